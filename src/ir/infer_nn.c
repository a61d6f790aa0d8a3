/* Shape/dtype inference for neural-network ops: Conv, MaxPool, AveragePool,
 * GlobalAveragePool, BatchNormalization, Gemm, MatMul, Softmax and LogSoftmax. */
#include "ir/infer_common.h"

/* The reference kernels walk at most three spatial dims (1-D and 2-D as 3-D). */
#define MAX_SPATIAL 3

/* Input i is (N, C, spatial...): too few dims is a bad model; more spatial dims than
 * the kernels walk is valid ONNX that kiln does not run. */
static kiln_status check_spatial_rank(const kl_infer_ctx *c, int i, const char *name) {
  const kl_type *t = kl_infer_in(c, i);
  if (t && t->rank > MAX_SPATIAL + 2)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "input %d (%s) has %d spatial dims; kiln "
                   "supports 1 to %d", i, name, t->rank - 2, MAX_SPATIAL);
  return kl_check_rank(c, i, name, 3, MAX_SPATIAL + 2);
}

/* Fills the spatial dims of out (from index 2) with the window applied to x's. */
static kiln_status window_dims(const kl_infer_ctx *c, const kl_type *x, kl_window *w,
                               kl_type *out) {
  for (int i = 0; i < w->n; i++) {
    kl_dim d = x->rank >= 0 ? x->dims[2 + i] : kl_dim_unknown();
    int64_t size = -1;
    if (kl_dim_known(d)) {
      kiln_status st = kl_window_out(w, i, d.size, &size, c->e);
      if (st != KILN_OK) return st;
    }
    out->dims[2 + i] = kl_dim_of(size);
  }
  out->rank = w->n + 2;
  return KILN_OK;
}

static kiln_status conv_check_channels(const kl_infer_ctx *c, const kl_type *x,
                                       const kl_type *w, int64_t group) {
  if (group < 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "group is %lld, expected at least 1",
                   (long long)group);
  if (x->rank >= 0 && w->rank >= 0 && x->rank != w->rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (W) has rank %d, expected %d like "
                   "input 0 (X)", w->rank, x->rank);
  kl_dim cin = x->rank >= 2 ? x->dims[1] : kl_dim_unknown();
  kl_dim wc = w->rank >= 2 ? w->dims[1] : kl_dim_unknown();
  kl_dim m = w->rank >= 1 ? w->dims[0] : kl_dim_unknown();
  int64_t expected;
  if (kl_dim_known(cin) && kl_dim_known(wc) &&
      (__builtin_mul_overflow(wc.size, group, &expected) || cin.size != expected))
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (W) has %lld input channels per group, "
                   "expected %lld (input 0 has %lld channels, group %lld)",
                   (long long)wc.size, (long long)(cin.size / group), (long long)cin.size,
                   (long long)group);
  if (kl_dim_known(m) && m.size % group != 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (W) has %lld output channels, not a "
                   "multiple of group %lld", (long long)m.size, (long long)group);
  const kl_type *b = kl_infer_in(c, 2);
  if (b && b->rank == 1 && kl_dim_known(m) && kl_dim_known(b->dims[0]) &&
      b->dims[0].size != m.size)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 2 (B) has %lld values, expected %lld (one "
                   "per output channel)", (long long)b->dims[0].size, (long long)m.size);
  return KILN_OK;
}

static kiln_status conv_check_inputs(const kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = check_spatial_rank(c, 0, "X");
  if (st == KILN_OK) st = check_spatial_rank(c, 1, "W");
  if (st == KILN_OK) st = kl_check_rank(c, 2, "B", 1, 1);
  return st;
}

int kl_infer_conv(kl_infer_ctx *c) {
  kiln_status st = conv_check_inputs(c);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0], *w = c->in[1];
  st = conv_check_channels(c, x, w, kl_attr_int(c->node, "group", 1));
  if (st != KILN_OK) return st;
  kl_type_unknown(&c->out[0], x->dtype);
  int rank = x->rank >= 0 ? x->rank : w->rank;
  if (rank < 0) return KILN_OK;
  int64_t kernel[KL_MAX_RANK];
  for (int i = 0; i < rank - 2; i++)
    kernel[i] = w->rank >= 0 ? w->dims[2 + i].size : -1;
  kl_window win;
  st = kl_window_init(c->node, rank - 2, kernel, &win, c->e);
  if (st != KILN_OK) return st;
  c->out[0].dims[0] = x->rank >= 0 ? x->dims[0] : kl_dim_unknown();
  c->out[0].dims[1] = w->rank >= 0 ? w->dims[0] : kl_dim_unknown();
  return window_dims(c, x, &win, &c->out[0]);
}

static uint32_t pool_dtypes(kl_op op) {
  return op == KL_OP_MaxPool ? KL_DTS_FLOAT | KL_DT(KL_I8) | KL_DT(KL_U8)
         : op == KL_OP_KilnQLinearAveragePool ? KL_DT(KL_I8) | KL_DT(KL_U8)
                                              : KL_DTS_FLOAT;
}

int kl_infer_pool(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", pool_dtypes(c->node->op));
  if (st == KILN_OK) st = check_spatial_rank(c, 0, "X");
  if (st != KILN_OK) return st;
  const int64_t *ks;
  int n = kl_attr_ints(c->node, "kernel_shape", &ks);
  if (n < 0) return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "kernel_shape is required");
  const kl_type *x = c->in[0];
  if (x->rank >= 0 && n != x->rank - 2)
    return kl_fail(c->e, KILN_ERR_SHAPE, "kernel_shape has %d values but input 0 (X) has "
                   "%d spatial dims", n, x->rank - 2);
  int64_t order = kl_attr_int(c->node, "storage_order", 0);
  if (order != 0 && order != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "storage_order is %lld, expected 0 or 1",
                   (long long)order);
  kl_window w;
  st = kl_window_init(c->node, n, NULL, &w, c->e);
  if (st != KILN_OK) return st;
  kl_type_unknown(&c->out[0], x->dtype);
  c->out[0].dims[0] = x->rank >= 0 ? x->dims[0] : kl_dim_unknown();
  c->out[0].dims[1] = x->rank >= 0 ? x->dims[1] : kl_dim_unknown();
  st = window_dims(c, x, &w, &c->out[0]);
  if (st == KILN_OK && c->n_out > 1) {
    c->out[1] = c->out[0];
    c->out[1].dtype = KL_I64;
  }
  return st;
}

int kl_infer_global_pool(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 3, KL_MAX_RANK);
  if (st != KILN_OK) return st;
  c->out[0] = *c->in[0];
  for (int i = 2; i < c->out[0].rank; i++) c->out[0].dims[i] = kl_dim_of(1);
  return KILN_OK;
}

int kl_infer_batchnorm(kl_infer_ctx *c) {
  static const char *const names[] = {"X", "scale", "B", "input_mean", "input_var"};
  kiln_status st = kl_check_required(c, 5);
  for (int i = 0; st == KILN_OK && i < 5; i++)
    st = kl_check_dtype(c, i, names[i], KL_DTS_FLOAT);
  for (int i = 1; st == KILN_OK && i < 5; i++) st = kl_check_rank(c, i, names[i], 1, 1);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 1, KL_MAX_RANK);
  if (st != KILN_OK) return st;
  int64_t training = kl_attr_int(c->node, "training_mode", 0);
  if (training != 0 && training != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "training_mode=%lld: expected 0 or 1",
                   (long long)training);
  if (c->n_out > (training ? 3 : 1))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%d outputs, expected at most %d with "
                   "training_mode=%lld", c->n_out, training ? 3 : 1, (long long)training);
  const kl_type *x = c->in[0];
  /* A 1-D input is N samples of one channel. */
  kl_dim ch = x->rank >= 2 ? x->dims[1] : x->rank == 1 ? kl_dim_of(1) : kl_dim_unknown();
  for (int i = 1; i < 5; i++) {
    const kl_type *t = c->in[i];
    if (t->rank == 1 && kl_dim_known(ch) && kl_dim_known(t->dims[0]) &&
        t->dims[0].size != ch.size)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %lld values, expected %lld "
                     "(one per channel of input 0)", i, names[i], (long long)t->dims[0].size,
                     (long long)ch.size);
  }
  c->out[0] = *x;
  /* training_mode=1: the running mean and variance, updated with the batch's */
  for (int k = 1; k < c->n_out && k < 3; k++) c->out[k] = *c->in[k + 2];
  return KILN_OK;
}

/* Dim `k` of a rank-2 type, or unknown. */
static kl_dim dim2(const kl_type *t, int k) {
  return t->rank == 2 ? t->dims[k] : kl_dim_unknown();
}

int kl_infer_gemm(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "A", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "A", 2, 2);
  if (st == KILN_OK) st = kl_check_rank(c, 1, "B", 2, 2);
  if (st == KILN_OK) st = kl_check_rank(c, 2, "C", 0, 2);
  if (st != KILN_OK) return st;
  int ta = kl_attr_int(c->node, "transA", 0) != 0, tb = kl_attr_int(c->node, "transB", 0) != 0;
  const kl_type *a = c->in[0], *b = c->in[1];
  kl_dim ka = dim2(a, !ta), kb = dim2(b, tb);
  bool ok;
  kl_dim_merge(ka, kb, &ok);
  if (!ok)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (B) has %lld %s, expected %lld to match "
                   "input 0 (A)'s %s", (long long)kb.size, tb ? "columns" : "rows",
                   (long long)ka.size, ta ? "rows" : "columns");
  kl_type_unknown_dims(&c->out[0], a->dtype, 2);
  c->out[0].dims[0] = dim2(a, ta);
  c->out[0].dims[1] = dim2(b, !tb);
  return kl_check_unidirectional(c, 2, "C", &c->out[0]);
}

/* MatMul's batch dims: a copy of t without its last two (matrix) dims. */
static kl_type batch_type(const kl_type *t) {
  kl_type b = *t;
  b.rank = t->rank > 2 ? t->rank - 2 : 0;
  return b;
}

static kiln_status matmul_dims(kl_infer_ctx *c, const kl_type *a, const kl_type *b) {
  /* NumPy: a 1-D A is a row [1, K] and a 1-D B a column [K, 1]; the 1 is dropped. */
  kl_dim ka = a->dims[a->rank - 1], kb = b->dims[b->rank == 1 ? 0 : b->rank - 2];
  bool ok;
  kl_dim_merge(ka, kb, &ok);
  if (!ok)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (B) has %lld rows, expected %lld to "
                   "match input 0 (A)'s columns", (long long)kb.size, (long long)ka.size);
  kl_type ba = batch_type(a), bb = batch_type(b);
  const kl_type *pair[2] = {&ba, &bb};
  kl_infer_ctx bc = *c;
  bc.in = pair;
  bc.n_in = 2;
  kl_type *out = &c->out[0];
  kiln_status st = kl_broadcast(&bc, 0, 1, out);
  if (st != KILN_OK) return st;
  if (a->rank > 1) out->dims[out->rank++] = a->dims[a->rank - 2];
  if (b->rank > 1) out->dims[out->rank++] = b->dims[b->rank - 1];
  return KILN_OK;
}

int kl_infer_matmul(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "A", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "A", 1, KL_MAX_RANK);
  if (st == KILN_OK) st = kl_check_rank(c, 1, "B", 1, KL_MAX_RANK);
  if (st != KILN_OK) return st;
  const kl_type *a = c->in[0], *b = c->in[1];
  kl_type_unknown(&c->out[0], a->dtype);
  if (a->rank < 0 || b->rank < 0) return KILN_OK;
  return matmul_dims(c, a, b);
}

int kl_infer_softmax(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "input", KL_DTS_FLOAT);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  int axis;
  if (x->rank >= 0)
    st = kl_norm_axis(c, kl_attr_int(c->node, "axis", -1), x->rank, "axis", &axis);
  if (st == KILN_OK) c->out[0] = *x;
  return st;
}
