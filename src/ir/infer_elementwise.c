/* Shape/dtype inference for elementwise ops: unary (Identity, Relu, Sigmoid, Tanh,
 * Clip), Dropout, and the broadcasting binary ops (Add, Sub, Mul, Div). */
#include "ir/infer_common.h"

/* The dtypes each unary op's reference kernel computes. */
static uint32_t unary_dtypes(kl_op op) {
  switch (op) {
  case KL_OP_Identity: return KL_DTS_ANY;
  case KL_OP_Sigmoid:
  case KL_OP_Tanh: return KL_DTS_FLOAT;
  default: return KL_DTS_ARITH;
  }
}

/* Clip's optional min (1) and max (2): scalars of the input's dtype. */
static kiln_status check_clip_bound(const kl_infer_ctx *c, int i, const char *name) {
  const kl_type *t = kl_infer_in(c, i);
  int64_t count;
  if (!t) return KILN_OK;
  kiln_status st = kl_check_same_dtype(c, 0, i);
  if (st == KILN_OK && kl_type_numel(t, &count) && count != 1)
    st = kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %lld elements, expected a scalar",
                 i, name, (long long)count);
  return st;
}

int kl_infer_unary(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", unary_dtypes(c->node->op));
  if (st == KILN_OK && c->node->op == KL_OP_Clip) {
    st = check_clip_bound(c, 1, "min");
    if (st == KILN_OK) st = check_clip_bound(c, 2, "max");
  }
  if (st == KILN_OK) c->out[0] = *c->in[0];
  return st;
}

/* Dropout runs as in inference: the output is the input and the mask all true. Only a
 * request for real training-mode dropout (training_mode true, ratio not 0) is refused,
 * since its output is random. */
int kl_infer_dropout(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "data", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "ratio", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 2, "training_mode", KL_DT(KL_BOOL));
  if (st != KILN_OK) return st;
  double training = 0, ratio = 0.5;
  bool ratio_known = !kl_infer_in(c, 1) || kl_read_scalar(c, 1, &ratio);
  if (kl_read_scalar(c, 2, &training) && training != 0 && ratio_known && ratio != 0)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "training-mode Dropout (ratio %g) is "
                   "random; kiln runs Dropout only as in inference", ratio);
  c->out[0] = *c->in[0];
  if (c->n_out > 1) {
    c->out[1] = *c->in[0];
    c->out[1].dtype = KL_BOOL;
  }
  return KILN_OK;
}

/* Every integer dtype wraps like int64 in the kernel; Div divides signed, which is wrong
 * for uint64 values of 2^63 and up, so Div leaves uint64 out. */
static uint32_t binary_dtypes(kl_op op) {
  uint32_t ints = KL_DT(KL_I8) | KL_DT(KL_I16) | KL_DT(KL_U8) | KL_DT(KL_U16) | KL_DT(KL_U32);
  return KL_DTS_ARITH | ints | (op == KL_OP_Div ? 0 : KL_DT(KL_U64));
}

int kl_infer_binary(kl_infer_ctx *c) {
  uint32_t allowed = binary_dtypes(c->node->op);
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "A", allowed);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "B", allowed);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st != KILN_OK) return st;
  kl_dtype dt = c->in[0]->dtype != KL_UNDEFINED ? c->in[0]->dtype : c->in[1]->dtype;
  kl_type_unknown(&c->out[0], dt);
  return kl_broadcast(c, 0, 1, &c->out[0]);
}
