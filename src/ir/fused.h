/* kiln's fused ops (ops.def, domain "kiln"): the activations they can carry and the
 * op each one extends. Shared by the fusion passes, infer_fused.c and ref/fused.c.
 *
 * A fused node has the attributes of its base op plus
 *   activation         string, one of the names below (absent: none)
 *   activation_params  floats, as many as the activation takes:
 *                      LeakyRelu [alpha], Elu [alpha], HardSigmoid [alpha, beta],
 *                      Clip [min, max] (-inf/inf for an absent bound)
 * and computes, in this order, rounding to the output dtype after each step as the
 * unfused graph did:  Y = act(base(inputs) + Bias + Sum).
 */
#ifndef KL_FUSED_H
#define KL_FUSED_H

#include "ir/ir.h"

typedef struct kl_fused_act {
  const char *name;   /* value of the "activation" attribute */
  const char *op;     /* the ONNX op that computes it */
  int n_params;
  bool tanh_approx;   /* Gelu with approximate="tanh" */
} kl_fused_act;

/* The activation called name, or NULL. */
const kl_fused_act *kl_fused_act_find(const char *name);
/* The op a fused op extends (Conv for FusedConv, ...), KL_OP_COUNT for other ops. */
kl_op kl_fused_base(kl_op fused);
/* The fused op extending base, KL_OP_COUNT when there is none. */
kl_op kl_fused_of(kl_op base);

/* Input slots of the fused ops. */
#define KL_FUSED_BIAS 2 /* FusedMatMul's bias (the base op's own third input elsewhere) */
#define KL_FUSED_SUM 3

#endif
