/* What the gradient ops' attributes mean, read in one place for shape inference
 * (src/ir/infer_grad.c) and the reference kernels (src/backends/cpu/ref/grad.c,
 * loss_train.c): UnaryGrad's forward op, the loss kinds and reductions, and
 * DropoutTrain's mask generator. ops.def's "gradient ops" section lists the ops. */
#ifndef KL_GRAD_H
#define KL_GRAD_H

#include "ir/ir.h"

/* ---- UnaryGrad: the forward op whose derivative it applies ---- */

typedef enum kl_unary_grad_op {
  KL_UG_RELU, KL_UG_LEAKY_RELU, KL_UG_ELU, KL_UG_SELU, KL_UG_SIGMOID, KL_UG_HARD_SIGMOID,
  KL_UG_HARD_SWISH, KL_UG_TANH, KL_UG_SOFTPLUS, KL_UG_SOFTSIGN, KL_UG_EXP, KL_UG_LOG,
  KL_UG_SQRT, KL_UG_RECIPROCAL, KL_UG_ABS, KL_UG_ERF, KL_UG_GELU, KL_UG_SIN, KL_UG_COS,
  KL_UG_MISH, KL_UG_SILU, KL_UG_SWISH, KL_UG_CLIP, KL_UG_COUNT
} kl_unary_grad_op;

/* The rule with its constants, from the node's attributes (op, alpha, beta, gamma,
 * approximate), each defaulting as the forward op does. */
typedef struct kl_unary_grad {
  kl_unary_grad_op op;
  double alpha, beta, gamma;
  bool tanh_gelu;
} kl_unary_grad;

kiln_status kl_unary_grad_read(const kl_node *n, kl_unary_grad *u, kl_err *e);
/* Whether the rule reads the forward output Y when it is given. */
bool kl_unary_grad_uses_y(kl_unary_grad_op op);

/* ---- Loss and LossGrad ---- */

typedef enum kl_loss_kind {
  KL_LOSS_CROSS_ENTROPY, KL_LOSS_NLL, KL_LOSS_MSE, KL_LOSS_L1, KL_LOSS_SMOOTH_L1,
  KL_LOSS_BCE_LOGITS
} kl_loss_kind;
typedef enum kl_loss_reduction { KL_RED_MEAN, KL_RED_SUM, KL_RED_NONE } kl_loss_reduction;

typedef struct kl_loss_attrs {
  kl_loss_kind kind;
  kl_loss_reduction reduction;
  int64_t ignore_index;
  double label_smoothing, beta;
} kl_loss_attrs;

kiln_status kl_loss_attrs_read(const kl_node *n, kl_loss_attrs *a, kl_err *e);
/* The kinds whose Target holds class indexes (int64) rather than values like Input. */
static inline bool kl_loss_is_class(kl_loss_kind k) {
  return k == KL_LOSS_CROSS_ENTROPY || k == KL_LOSS_NLL;
}

/* ---- DropoutTrain's mask ---- */

/* Element i is kept when this is true: a counter-based draw (splitmix64 of the seed and
 * the index), so the mask depends on nothing but (seed, i, ratio). */
bool kl_dropout_keep(int64_t seed, int64_t i, double ratio);

#endif
