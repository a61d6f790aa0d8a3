/* Shape/dtype inference for element-wise indexing: GatherElements, GatherND,
 * ScatterElements and ScatterND. Index values are checked by the kernels, which see
 * them at run time; these check ranks, dims and dtypes. */
#include "ir/infer_common.h"

#include <string.h>

/* Reductions that the scatter kernels do in arithmetic, so not on every dtype. */
#define SCATTER_REDUCE_DTYPES (KL_DTS_FLOAT | KL_DTS_INDEX | KL_DT(KL_I8) | KL_DT(KL_U8) | \
                               KL_DT(KL_I16) | KL_DT(KL_U16) | KL_DT(KL_U32))

static kiln_status check_indices_dtype(const kl_infer_ctx *c, int i) {
  return kl_check_dtype(c, i, "indices", KL_DTS_INDEX);
}

/* Index input i must have data's rank, and each dim but `axis` no larger than data's. */
static kiln_status check_within(const kl_infer_ctx *c, int i, const char *name, int axis) {
  const kl_type *x = c->in[0], *t = c->in[i];
  if (x->rank < 0 || t->rank < 0) return KILN_OK;
  if (t->rank != x->rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has rank %d, expected %d like input "
                   "0", i, name, t->rank, x->rank);
  for (int d = 0; d < x->rank; d++)
    if (d != axis && kl_dim_known(t->dims[d]) && kl_dim_known(x->dims[d]) &&
        t->dims[d].size > x->dims[d].size)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %lld in dim %d, more than the "
                     "%lld of input 0", i, name, (long long)t->dims[d].size, d,
                     (long long)x->dims[d].size);
  return KILN_OK;
}

static kiln_status read_axis(const kl_infer_ctx *c, int *axis) {
  *axis = -1;
  if (c->in[0]->rank < 0) return KILN_OK;
  return kl_norm_axis(c, kl_attr_int(c->node, "axis", 0), c->in[0]->rank, "axis", axis);
}

int kl_infer_gather_elements(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = check_indices_dtype(c, 1);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "data", 1, KL_MAX_RANK);
  int axis = -1;
  if (st == KILN_OK) st = read_axis(c, &axis);
  if (st == KILN_OK) st = check_within(c, 1, "indices", axis);
  if (st != KILN_OK) return st;
  c->out[0] = *c->in[1];
  c->out[0].dtype = c->in[0]->dtype;
  return KILN_OK;
}

/* Reductions of ScatterElements and ScatterND; bool and the rest only without one. */
static kiln_status check_reduction(const kl_infer_ctx *c) {
  static const char *const names[] = {"none", "add", "mul", "max", "min"};
  const char *r = kl_attr_string(c->node, "reduction", "none");
  for (int i = 0; i < 5; i++)
    if (strcmp(r, names[i]) == 0)
      return i == 0 ? kl_check_dtype(c, 0, "data", KL_DTS_ANY)
                    : kl_check_dtype(c, 0, "data", SCATTER_REDUCE_DTYPES);
  return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "reduction is \"%s\", expected none, add, "
                 "mul, max or min", r);
}

static kiln_status check_same_shape(const kl_infer_ctx *c, int i, int j) {
  const kl_type *a = c->in[i], *b = c->in[j];
  if (a->rank < 0 || b->rank < 0) return KILN_OK;
  bool ok = a->rank == b->rank;
  for (int d = 0; ok && d < a->rank; d++) kl_dim_merge(a->dims[d], b->dims[d], &ok);
  if (ok) return KILN_OK;
  char sa[256], sb[256];
  kl_type_format(c->g, a, sa, sizeof sa);
  kl_type_format(c->g, b, sb, sizeof sb);
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d %s and input %d %s must have the same "
                 "shape", i, sa, j, sb);
}

int kl_infer_scatter_elements(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = check_indices_dtype(c, 1);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = check_reduction(c);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "data", 1, KL_MAX_RANK);
  int axis = -1;
  if (st == KILN_OK) st = read_axis(c, &axis);
  if (st == KILN_OK) st = check_same_shape(c, 1, 2);
  if (st == KILN_OK) st = check_within(c, 1, "indices", axis);
  if (st == KILN_OK) c->out[0] = *c->in[0];
  return st;
}

/* ---- GatherND and ScatterND ----
 * indices [..., k] picks, for each of its leading positions, the slice
 * data[i_0, ..., i_{k-1}, :] (after b batch dims shared by data and indices). */

/* k, the index tuple length, when known (else -1), checked against data's rank. */
static kiln_status tuple_len(const kl_infer_ctx *c, int b, int64_t *k) {
  const kl_type *x = c->in[0], *idx = c->in[1];
  *k = -1;
  if (idx->rank < 0 || !kl_dim_known(idx->dims[idx->rank - 1])) return KILN_OK;
  *k = idx->dims[idx->rank - 1].size;
  if (x->rank >= 0 && (*k < 1 || *k > x->rank - b))
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (indices) has tuples of %lld, expected 1 to "
                   "%d (the rank of input 0 less %d batch dims)", (long long)*k, x->rank - b,
                   b);
  return KILN_OK;
}

static kiln_status check_batch_dims(const kl_infer_ctx *c, int b) {
  const kl_type *x = c->in[0], *idx = c->in[1];
  if ((x->rank >= 0 && b >= x->rank) || (idx->rank >= 0 && b >= idx->rank))
    return kl_fail(c->e, KILN_ERR_SHAPE, "batch_dims %d must be less than both ranks (%d and "
                   "%d)", b, x->rank, idx->rank);
  for (int d = 0; x->rank >= 0 && idx->rank >= 0 && d < b; d++) {
    bool ok;
    kl_dim_merge(x->dims[d], idx->dims[d], &ok);
    if (!ok)
      return kl_fail(c->e, KILN_ERR_SHAPE, "batch dim %d is %lld in input 0 but %lld in "
                     "input 1 (indices)", d, (long long)x->dims[d].size,
                     (long long)idx->dims[d].size);
  }
  return KILN_OK;
}

int kl_infer_gather_nd(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = check_indices_dtype(c, 1);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "data", 1, KL_MAX_RANK);
  if (st == KILN_OK) st = kl_check_rank(c, 1, "indices", 1, KL_MAX_RANK);
  int64_t batch = kl_attr_int(c->node, "batch_dims", 0), k = -1;
  if (st == KILN_OK && (batch < 0 || batch >= KL_MAX_RANK))
    st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "batch_dims is %lld, expected 0 to %d",
                 (long long)batch, KL_MAX_RANK - 1);
  if (st == KILN_OK) st = check_batch_dims(c, (int)batch);
  if (st == KILN_OK) st = tuple_len(c, (int)batch, &k);
  if (st != KILN_OK) return st; /* before reading inputs: one may be absent */
  const kl_type *x = c->in[0], *idx = c->in[1];
  kl_type *out = &c->out[0];
  kl_type_unknown(out, x->dtype);
  if (k < 0 || x->rank < 0) return st;
  st = kl_check_out_rank(c, idx->rank - 1 + x->rank - batch - k);
  if (st != KILN_OK) return st;
  out->rank = 0;
  for (int d = 0; d < idx->rank - 1; d++) {
    bool ok;
    out->dims[out->rank++] = d < batch ? kl_dim_merge(idx->dims[d], x->dims[d], &ok)
                                       : idx->dims[d];
  }
  for (int d = (int)(batch + k); d < x->rank; d++) out->dims[out->rank++] = x->dims[d];
  return KILN_OK;
}

/* updates must be indices.shape[:-1] + data.shape[k:]. */
static kiln_status check_updates(const kl_infer_ctx *c, int64_t k) {
  const kl_type *x = c->in[0], *idx = c->in[1], *u = c->in[2];
  if (k < 0 || x->rank < 0 || u->rank < 0) return KILN_OK;
  int want = (int)(idx->rank - 1 + x->rank - k);
  bool ok = u->rank == want;
  for (int d = 0; ok && d < want; d++) {
    kl_dim e = d < idx->rank - 1 ? idx->dims[d] : x->dims[d - (idx->rank - 1) + k];
    kl_dim_merge(u->dims[d], e, &ok);
  }
  if (ok) return KILN_OK;
  char s[256];
  kl_type_format(c->g, u, s, sizeof s);
  return kl_fail(c->e, KILN_ERR_SHAPE, "input 2 (updates) is %s, expected indices' leading "
                 "dims followed by data's dims after the first %lld", s, (long long)k);
}

int kl_infer_scatter_nd(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = check_indices_dtype(c, 1);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = check_reduction(c);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "data", 1, KL_MAX_RANK);
  if (st == KILN_OK) st = kl_check_rank(c, 1, "indices", 1, KL_MAX_RANK);
  int64_t k = -1;
  if (st == KILN_OK) st = tuple_len(c, 0, &k);
  if (st == KILN_OK) st = check_updates(c, k);
  if (st == KILN_OK) c->out[0] = *c->in[0];
  return st;
}
