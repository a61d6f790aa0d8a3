/* Shape and dtype inference of the optimizer ops (ops.def, "optimizers"): SGD, Adagrad,
 * Adam, Lamb, Lars (in-place updates, one float32 0-D output, the trust ratio), GradNorm
 * and ClipCoef. The kernels check the same at run time (ref/optim.c), where every
 * shape is known. */
#include "ir/infer_common.h"
#include "ir/optim.h"

#include <stdio.h>

static const kl_optim_layout layouts[] = {
    {5, {"lr", "momentum", "dampening", "weight_decay", "step"}, 3, {3, -1, -1}, 4, 5,
     {"Hyper", "Param", "Grad", "Momentum", "GradScale", "Trail"}},
    {5, {"lr", "lr_decay", "weight_decay", "eps", "step"}, 4, {3, -1, -1}, 4, 5,
     {"Hyper", "Param", "Grad", "Sum", "GradScale", "Trail"}},
    {6, {"lr", "beta1", "beta2", "eps", "weight_decay", "step"}, 5, {3, 4, 5}, 6, 7,
     {"Hyper", "Param", "Grad", "ExpAvg", "ExpAvgSq", "MaxExpAvgSq", "GradScale", "Trail"}},
    {6, {"lr", "beta1", "beta2", "eps", "weight_decay", "step"}, 5, {3, 4, -1}, 5, 6,
     {"Hyper", "Param", "Grad", "ExpAvg", "ExpAvgSq", "GradScale", "Trail"}},
    {6, {"lr", "momentum", "weight_decay", "trust_coefficient", "eps", "step"}, 4,
     {3, -1, -1}, 4, 5, {"Hyper", "Param", "Grad", "Momentum", "GradScale", "Trail"}},
};

const kl_optim_layout *kl_optim_layout_of(kl_op op) {
  switch (op) {
  case KL_OP_KilnSGD: return &layouts[0];
  case KL_OP_KilnAdagrad: return &layouts[1];
  case KL_OP_KilnAdam: return &layouts[2];
  case KL_OP_KilnLamb: return &layouts[3];
  case KL_OP_KilnLars: return &layouts[4];
  default: return NULL;
  }
}

/* Input i must have Param's shape (input 1) where both are known. */
static kiln_status check_like_param(const kl_infer_ctx *c, int i, const char *name) {
  const kl_type *p = kl_infer_in(c, 1), *t = kl_infer_in(c, i);
  if (!p || !t || p->rank < 0 || t->rank < 0) return KILN_OK;
  bool same = p->rank == t->rank;
  for (int d = 0; same && d < p->rank; d++)
    if (kl_dim_known(p->dims[d]) && kl_dim_known(t->dims[d]) &&
        p->dims[d].size != t->dims[d].size)
      same = false;
  if (same) return KILN_OK;
  char want[256], got[256];
  kl_type_format(c->g, p, want, sizeof want);
  kl_type_format(c->g, t, got, sizeof got);
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) is %s, expected Param's shape (%s)", i,
                 name, got, want);
}

/* A float32 scalar: 0-D, or 1-D of one element. */
static kiln_status check_scalar(const kl_infer_ctx *c, int i, const char *name) {
  kiln_status st = kl_check_dtype(c, i, name, KL_DT(KL_F32));
  if (st != KILN_OK) return st;
  const kl_type *t = kl_infer_in(c, i);
  if (!t || t->rank < 0 || t->rank == 0) return KILN_OK;
  if (t->rank == 1 && (!kl_dim_known(t->dims[0]) || t->dims[0].size == 1)) return KILN_OK;
  char got[256];
  kl_type_format(c->g, t, got, sizeof got);
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) is %s, expected a float32 scalar "
                 "(0-D or [1])", i, name, got);
}

static kiln_status check_hyper(const kl_infer_ctx *c, const kl_optim_layout *l) {
  kiln_status st = kl_check_dtype(c, 0, "Hyper", KL_DT(KL_F64));
  if (st == KILN_OK) st = kl_check_rank(c, 0, "Hyper", 1, 1);
  if (st != KILN_OK) return st;
  const kl_type *h = kl_infer_in(c, 0);
  if (h->rank == 1 && kl_dim_known(h->dims[0]) && h->dims[0].size < l->n_hyper)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 (Hyper) has %lld values, expected at "
                   "least %d (%s, ..., %s)", (long long)h->dims[0].size, l->n_hyper,
                   l->hyper[0], l->hyper[l->n_hyper - 1]);
  return KILN_OK;
}

int kl_infer_optim(kl_infer_ctx *c) {
  const kl_optim_layout *l = kl_optim_layout_of(c->node->op);
  kiln_status st = kl_check_required(c, l->n_required);
  if (st != KILN_OK) return st;
  if (c->n_in > KL_OPTIM_MAX_IN) /* cannot happen: ops.def bounds the arity */
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "too many inputs");
  if ((st = check_hyper(c, l)) != KILN_OK) return st;
  bool split = l->trail >= 0 && kl_infer_in(c, l->trail) != NULL;
  if (split) {
    if ((st = kl_check_dtype(c, l->trail, "Trail", KL_DT(KL_U16))) != KILN_OK) return st;
    const kl_type *p = kl_infer_in(c, 1);
    if (p->dtype != KL_UNDEFINED && p->dtype != KL_BF16)
      return kl_fail(c->e, KILN_ERR_DTYPE, "input 1 (Param) is %s, expected bfloat16 (the "
                     "top half of the FP32 master weight) since input %d (Trail) is given",
                     kl_dtype_name(p->dtype), l->trail);
    st = kl_check_dtype(c, 2, "Grad", KL_DT(KL_BF16) | KL_DT(KL_F32));
  } else {
    const kl_type *p = kl_infer_in(c, 1);
    if (p->dtype == KL_BF16)
      return kl_fail(c->e, KILN_ERR_DTYPE, "input 1 (Param) is bfloat16 without a Trail "
                     "input; expected float32, or bfloat16 with its uint16 Trail");
    if ((st = kl_check_dtype(c, 1, "Param", KL_DT(KL_F32))) != KILN_OK) return st;
    st = kl_check_dtype(c, 2, "Grad", KL_DT(KL_F32));
  }
  if (st != KILN_OK) return st;
  for (int i = 2; i < c->n_in; i++) {
    if (!kl_infer_in(c, i) || i == l->scale) continue;
    if (i != 2 && i != l->trail &&
        (st = kl_check_dtype(c, i, l->names[i], KL_DT(KL_F32))) != KILN_OK)
      return st;
    if ((st = check_like_param(c, i, l->names[i])) != KILN_OK) return st;
  }
  if (l->scale >= 0 && kl_infer_in(c, l->scale) &&
      (st = check_scalar(c, l->scale, "GradScale")) != KILN_OK)
    return st;
  if (c->node->op == KL_OP_KilnAdam && kl_attr_int(c->node, "amsgrad", 0) != 0 &&
      !kl_infer_in(c, 5))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "amsgrad is set but input 5 (MaxExpAvgSq) "
                   "is absent");
  kl_type_set_shape(&c->out[0], 0, NULL);
  c->out[0].dtype = KL_F32;
  return KILN_OK;
}

int kl_infer_grad_norm(kl_infer_ctx *c) {
  for (int i = 0; i < c->n_in; i++) {
    if (!kl_infer_in(c, i))
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "input %d (G%d) is absent", i, i + 1);
    kiln_status st = kl_check_dtype(c, i, "G", KL_DT(KL_F32) | KL_DT(KL_BF16));
    if (st != KILN_OK) return st;
  }
  kl_type_set_shape(&c->out[0], 0, NULL);
  c->out[0].dtype = KL_F32;
  return KILN_OK;
}

int kl_infer_clip_coef(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = check_scalar(c, 0, "Norm");
  if (st != KILN_OK) return st;
  const kl_attr *a = kl_node_attr(c->node, "max_norm");
  if (!a || a->kind != KL_ATTR_FLOAT)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "attribute max_norm (float) is %s",
                   a ? "not a float" : "missing");
  kl_type_set_shape(&c->out[0], 0, NULL);
  c->out[0].dtype = KL_F32;
  return KILN_OK;
}
