/* Shape/dtype inference for the activation functions with attributes (LeakyRelu, Elu,
 * Selu, Celu, HardSigmoid, HardSwish, Mish, Gelu, Softplus, Softsign, ThresholdedRelu,
 * Shrink, Swish) and for PRelu. Hardmax shares Softmax's inference. */
#include "ir/infer_common.h"

#include <string.h>

#define DTS_INT                                                                      \
  (KL_DT(KL_I8) | KL_DT(KL_I16) | KL_DT(KL_I32) | KL_DT(KL_I64) | KL_DT(KL_U8) |          \
   KL_DT(KL_U16) | KL_DT(KL_U32) | KL_DT(KL_U64))

/* Y = f(X) elementwise, same type. Shrink takes every numeric dtype (ONNX), the
 * others float types. */
int kl_infer_activation(kl_infer_ctx *c) {
  uint32_t allowed = KL_DTS_FLOAT;
  if (c->node->op == KL_OP_Shrink) allowed |= DTS_INT;
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", allowed);
  if (st != KILN_OK) return st;
  if (c->node->op == KL_OP_Gelu) {
    const char *approx = kl_attr_string(c->node, "approximate", "none");
    if (strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0)
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "approximate is \"%s\", expected "
                     "\"none\" or \"tanh\"", approx);
  }
  c->out[0] = *c->in[0];
  return KILN_OK;
}

/* PRelu(X, slope): slope, of X's dtype, broadcasts to X (unidirectionally). */
int kl_infer_prelu(kl_infer_ctx *c) {
  uint32_t allowed = KL_DTS_FLOAT | KL_DTS_INDEX | KL_DT(KL_U32) | KL_DT(KL_U64);
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", allowed);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "slope", allowed);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st == KILN_OK) st = kl_check_unidirectional(c, 1, "slope", c->in[0]);
  if (st != KILN_OK) return st;
  c->out[0] = *c->in[0];
  if (c->out[0].dtype == KL_UNDEFINED) c->out[0].dtype = c->in[1]->dtype;
  return KILN_OK;
}
