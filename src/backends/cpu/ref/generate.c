/* Reference kernels for ops that make a tensor from a description or whose output
 * shape depends on the data: ConstantOfShape, Range, Size, EyeLike, OneHot, NonZero and
 * Unique. Shape inference has already counted what the data asks for (it sees the data
 * at run time), so these only fill the outputs they are given.
 */
#include "backends/cpu/ref/ref.h"
#include "ir/data_plan.h"

#include <stdlib.h>

/* Every element of Y is the `value` attribute's one element (float32 0 without it). */
int kl_ref_constant_of_shape(kl_kernel_ctx *c) {
  kl_tensor *y = c->out[0];
  const kl_attr *a = kl_node_attr(c->node, "value");
  static const float zero = 0.0f;
  const void *v = a ? a->t->data : &zero;
  size_t es = kl_dtype_size(y->dtype);
  int64_t n = kl_tensor_numel(y);
  for (int64_t i = 0; i < n; i++) memcpy((char *)y->data + (size_t)i * es, v, es);
  return KILN_OK;
}

/* Y[i] = start + i * delta, in double for float types and exactly for integers. */
int kl_ref_range(kl_kernel_ctx *c) {
  kl_tensor *y = c->out[0];
  kl_dtype t = y->dtype;
  int64_t n = kl_tensor_numel(y);
  if (kl_dtype_is_float(t)) {
    double start = kl_ref_load(c->in[0]->data, t, 0), delta = kl_ref_load(c->in[2]->data, t, 0);
    for (int64_t i = 0; i < n; i++) kl_ref_store(y->data, t, i, start + (double)i * delta);
    return KILN_OK;
  }
  /* every value lies between start and limit, so none of this overflows */
  int64_t start = kl_load_i64(c->in[0]->data, t, 0), delta = kl_load_i64(c->in[2]->data, t, 0);
  for (int64_t i = 0; i < n; i++) {
    int64_t v = start + i * delta;
    if (t == KL_I16) ((int16_t *)y->data)[i] = (int16_t)v;
    else kl_ref_store_int(y->data, t, i, v);
  }
  return KILN_OK;
}

int kl_ref_size(kl_kernel_ctx *c) {
  *(int64_t *)c->out[0]->data = kl_tensor_numel(c->in[0]);
  return KILN_OK;
}

/* Ones on the diagonal j = i + k, zeros elsewhere. */
int kl_ref_eye_like(kl_kernel_ctx *c) {
  kl_tensor *y = c->out[0];
  int64_t k = kl_attr_int(c->node, "k", 0), rows = y->dims[0], cols = y->dims[1];
  if (kl_tensor_nbytes(y)) memset(y->data, 0, kl_tensor_nbytes(y));
  if (k >= cols || k <= -rows) return KILN_OK;
  for (int64_t i = k < 0 ? -k : 0; i < rows && i + k < cols; i++)
    kl_store_f64(y->data, y->dtype, (size_t)(i * cols + i + k), 1.0);
  return KILN_OK;
}

/* Y has a new dim of size depth at axis: off_value everywhere except on_value where the
 * new index equals the index's value (negative values count from depth; values out of
 * range leave their row all off). */
int kl_ref_one_hot(kl_kernel_ctx *c) {
  const kl_tensor *idx = c->in[0], *vals = c->in[2];
  kl_tensor *y = c->out[0];
  int64_t a = kl_attr_int(c->node, "axis", -1);
  int axis = (int)(a < 0 ? a + y->rank : a);
  int64_t depth = y->dims[axis], outer = kl_ref_span(idx->dims, 0, axis);
  int64_t inner = kl_ref_span(idx->dims, axis, idx->rank), n = kl_tensor_numel(y);
  size_t es = kl_dtype_size(y->dtype);
  const char *off = vals->data, *on = off + es;
  for (int64_t i = 0; i < n; i++) memcpy((char *)y->data + (size_t)i * es, off, es);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      int64_t v = kl_load_i64(idx->data, idx->dtype, (size_t)(o * inner + j));
      if (v < 0) v += depth;
      if (v < 0 || v >= depth) continue;
      memcpy((char *)y->data + (size_t)((o * depth + v) * inner + j) * es, on, es);
    }
  return KILN_OK;
}

/* Y [rank, count]: column k holds the index of the k-th non-zero element of X in
 * row-major order (a scalar counts as a 1-D tensor of one element). */
int kl_ref_non_zero(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int64_t n = kl_tensor_numel(x), count = y->dims[1], k = 0;
  int64_t *out = y->data;
  kl_ref_iter it;
  kl_ref_iter_init(&it, x->rank, x->dims);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    if (kl_load_f64(x->data, x->dtype, (size_t)i) == 0) continue;
    if (x->rank == 0) out[k] = 0;
    for (int d = 0; d < x->rank; d++) out[d * count + k] = it.idx[d];
    k++;
  }
  return KILN_OK;
}

/* ---- Unique ---- */

/* Work arrays of len entries each. Group q (in sorted order) starts at slice first[q]
 * and has cnt[q] members; slot[q] is its place in the output; gid[i] is slice i's
 * group. */
typedef struct unique_work {
  int64_t *order, *gid, *mark, *first, *cnt, *slot;
} unique_work;

/* Groups the sorted slices and gives each group its output slot: its sorted position,
 * or, unsorted, its rank by first occurrence. Returns the number of groups. */
static int64_t unique_group(const kl_unique_view *v, bool sorted, unique_work *w) {
  int64_t u = 0;
  for (int64_t p = 0; p < v->len; p++) {
    if (p == 0 || !kl_unique_same(v, w->order[p - 1], w->order[p])) {
      w->first[u] = w->order[p]; /* the sort is stable: the first occurrence */
      w->cnt[u++] = 0;
    }
    w->gid[w->order[p]] = u - 1;
    w->cnt[u - 1]++;
  }
  for (int64_t i = 0; i < v->len; i++) w->mark[i] = -1;
  for (int64_t q = 0; q < u; q++) w->mark[w->first[q]] = q;
  for (int64_t i = 0, r = 0; i < v->len; i++)
    if (w->mark[i] >= 0) w->slot[w->mark[i]] = sorted ? w->mark[i] : r++;
  return u;
}

/* Y's slots, and the optional outputs: first occurrences, inverse map, counts. */
static void unique_write(kl_kernel_ctx *c, const kl_unique_view *v, const unique_work *w,
                         int64_t u) {
  kl_tensor *y = c->out[0];
  size_t row = (size_t)v->inner * kl_dtype_size(y->dtype);
  for (int64_t q = 0; q < u; q++) {
    int64_t r = w->slot[q];
    for (int64_t o = 0; o < v->outer && row > 0; o++)
      memcpy((char *)y->data + (size_t)(o * u + r) * row,
             (const char *)v->data + (size_t)(o * v->len + w->first[q]) * row, row);
    if (c->n_out > 1) ((int64_t *)c->out[1]->data)[r] = w->first[q];
    if (c->n_out > 3) ((int64_t *)c->out[3]->data)[r] = w->cnt[q];
  }
  for (int64_t i = 0; c->n_out > 2 && i < v->len; i++)
    ((int64_t *)c->out[2]->data)[i] = w->slot[w->gid[i]];
}

/* Unique: the distinct elements of X (or, with an axis, the distinct slices along it),
 * sorted or in order of first occurrence. */
int kl_ref_unique(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_unique_view v = {x->data, x->dtype, 1, kl_tensor_numel(x), 1};
  if (kl_node_attr(c->node, "axis")) {
    int64_t a = kl_attr_int(c->node, "axis", 0);
    int axis = (int)(a < 0 ? a + x->rank : a);
    v.outer = kl_ref_span(x->dims, 0, axis);
    v.len = x->dims[axis];
    v.inner = kl_ref_span(x->dims, axis + 1, x->rank);
  }
  size_t n = (size_t)(v.len ? v.len : 1);
  if (n > SIZE_MAX / (6 * sizeof(int64_t)))
    return kl_fail(c->e, KILN_ERR_LIMIT, "Unique: %lld slices, too many to sort",
                   (long long)v.len);
  int64_t *block = malloc(6 * n * sizeof(int64_t)), u;
  if (!block) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  unique_work w = {block, block + n, block + 2 * n, block + 3 * n, block + 4 * n, block + 5 * n};
  kiln_status st = kl_unique_sort(&v, w.order, &u, c->e);
  if (st == KILN_OK) {
    u = unique_group(&v, kl_attr_int(c->node, "sorted", 1) != 0, &w);
    unique_write(c, &v, &w, u);
  }
  free(block);
  return st;
}
