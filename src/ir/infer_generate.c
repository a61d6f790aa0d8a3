/* Shape/dtype inference for ops that make a tensor from a description or whose output
 * shape depends on the data: ConstantOfShape, Range, Size, EyeLike, OneHot, NonZero and
 * Unique, plus the slice sort that Unique's inference and kernel share (data_plan.h).
 * At load time such shapes are known only when their inputs are constants; at run time
 * the data is always there. */
#include "ir/data_plan.h"
#include "ir/infer_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- ConstantOfShape ---- */

int kl_infer_constant_of_shape(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "input", KL_DT(KL_I64));
  if (st == KILN_OK) st = kl_check_rank(c, 0, "input", 1, 1);
  if (st != KILN_OK) return st;
  const kl_attr *a = kl_node_attr(c->node, "value");
  kl_dtype dtype = KL_F32;
  if (a) {
    if (a->kind != KL_ATTR_TENSOR || kl_tensor_numel(a->t) != 1)
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "attribute value must be a tensor of one "
                     "element");
    if (!kl_dtype_valid(a->t->dtype))
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "attribute value is %s, which kiln cannot "
                     "store", kl_dtype_name(a->t->dtype));
    dtype = a->t->dtype;
  }
  int64_t shape[KL_MAX_RANK];
  int n;
  st = kl_read_ints(c, 0, "input", shape, KL_MAX_RANK, &n);
  kl_type_unknown(&c->out[0], dtype);
  if (st != KILN_OK) return st;
  if (n < 0) {
    const kl_type *s = c->in[0];
    if (s->rank == 1 && kl_dim_known(s->dims[0])) {
      st = kl_check_out_rank(c, s->dims[0].size);
      if (st == KILN_OK) kl_type_unknown_dims(&c->out[0], dtype, (int)s->dims[0].size);
    }
    return st;
  }
  for (int k = 0; k < n; k++)
    if (shape[k] < 0)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 has %lld at index %d, expected a size "
                     ">= 0", (long long)shape[k], k);
  kl_type_set_shape(&c->out[0], n, shape);
  return kl_check_out_numel(c, &c->out[0]);
}

/* ---- Range ---- */

#define RANGE_DTYPES (KL_DTS_FLOAT | KL_DT(KL_I16) | KL_DTS_INDEX)

/* ceil((limit - start) / delta), at least 0, for integer bounds. */
static kiln_status range_count_int(const kl_infer_ctx *c, int64_t start, int64_t limit,
                                   int64_t delta, int64_t *n) {
  int64_t span;
  if (__builtin_sub_overflow(limit, start, &span))
    return kl_fail(c->e, KILN_ERR_LIMIT, "the range %lld to %lld is too long",
                   (long long)start, (long long)limit);
  *n = 0;
  if (span == 0 || (span > 0) != (delta > 0)) return KILN_OK;
  uint64_t s = span > 0 ? (uint64_t)span : (uint64_t)0 - (uint64_t)span;
  uint64_t d = delta > 0 ? (uint64_t)delta : (uint64_t)0 - (uint64_t)delta;
  *n = (int64_t)((s - 1) / d + 1);
  return KILN_OK;
}

static kiln_status range_count(const kl_infer_ctx *c, int64_t *n) {
  kl_dtype t = c->in[0]->dtype;
  const void *p[3] = {kl_infer_data(c, 0), kl_infer_data(c, 1), kl_infer_data(c, 2)};
  *n = -1;
  if (!p[0] || !p[1] || !p[2]) return KILN_OK;
  if (!kl_dtype_is_float(t)) {
    int64_t delta = kl_load_i64(p[2], t, 0);
    if (delta == 0) return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "delta is 0");
    return range_count_int(c, kl_load_i64(p[0], t, 0), kl_load_i64(p[1], t, 0), delta, n);
  }
  double start = kl_load_f64(p[0], t, 0), limit = kl_load_f64(p[1], t, 0);
  double delta = kl_load_f64(p[2], t, 0), count = ceil((limit - start) / delta);
  if (delta == 0 || !isfinite(count))
    return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "cannot count the range from %g to %g "
                   "by %g", start, limit, delta);
  if (count > 4e18) return kl_fail(c->e, KILN_ERR_LIMIT, "the range has %g elements", count);
  *n = count > 0 ? (int64_t)count : 0;
  return KILN_OK;
}

int kl_infer_range(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "start", RANGE_DTYPES);
  for (int i = 1; i < 3 && st == KILN_OK; i++) st = kl_check_same_dtype(c, 0, i);
  static const char *const names[3] = {"start", "limit", "delta"};
  for (int i = 0; i < 3 && st == KILN_OK; i++) {
    int64_t n;
    if (kl_type_numel(c->in[i], &n) && (n != 1 || c->in[i]->rank > 1))
      st = kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) must be a scalar", i, names[i]);
  }
  if (st != KILN_OK) return st;
  int64_t n;
  kl_type_unknown_dims(&c->out[0], c->in[0]->dtype, 1);
  st = range_count(c, &n);
  if (n >= 0) c->out[0].dims[0] = kl_dim_of(n);
  return st;
}

/* ---- Size and EyeLike ---- */

int kl_infer_size(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  kl_type_unknown_dims(&c->out[0], KL_I64, 0);
  return st;
}

int kl_infer_eye_like(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "input", 2, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "input", KL_DTS_ANY);
  if (st != KILN_OK) return st;
  int64_t dt = kl_attr_int(c->node, "dtype", c->in[0]->dtype);
  if (dt != KL_UNDEFINED && !kl_dtype_valid((int)dt))
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "dtype %lld is not a type kiln can make",
                   (long long)dt);
  c->out[0] = *c->in[0];
  c->out[0].dtype = (kl_dtype)dt;
  return KILN_OK;
}

/* ---- OneHot ---- */

static kiln_status onehot_depth(const kl_infer_ctx *c, int64_t *depth) {
  const kl_type *t = c->in[1];
  const void *d = kl_infer_data(c, 1);
  int64_t n;
  *depth = -1;
  if (kl_type_numel(t, &n) && n != 1)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (depth) has %lld elements, expected 1",
                   (long long)n);
  if (!d) return KILN_OK;
  double f = kl_load_f64(d, t->dtype, 0);
  if (kl_dtype_is_float(t->dtype) && !(f >= 0 && f < 9.2e18)) /* NaN once read as 0 */
    return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input 1 (depth) is %g, expected a "
                   "finite count >= 0", f);
  *depth = kl_load_i64(d, t->dtype, 0);
  if (*depth < 0)
    return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input 1 (depth) is %lld, expected a "
                   "count >= 0", (long long)*depth);
  return KILN_OK;
}

int kl_infer_one_hot(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "indices", KL_DTS_ARITH | KL_DT(KL_I8) |
                                         KL_DT(KL_U8) | KL_DT(KL_I16) | KL_DT(KL_U16) |
                                         KL_DT(KL_U32) | KL_DT(KL_U64));
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "depth", KL_DTS_ANY & ~KL_DT(KL_BOOL));
  if (st == KILN_OK) st = kl_check_rank(c, 2, "values", 1, 1);
  int64_t nv, depth;
  if (st == KILN_OK && kl_type_numel(c->in[2], &nv) && nv != 2)
    st = kl_fail(c->e, KILN_ERR_SHAPE, "input 2 (values) has %lld elements, expected 2 "
                 "(off and on)", (long long)nv);
  if (st == KILN_OK) st = onehot_depth(c, &depth);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_type *out = &c->out[0];
  kl_type_unknown(out, c->in[2]->dtype);
  if (x->rank < 0) return KILN_OK;
  int axis;
  st = kl_check_out_rank(c, x->rank + 1);
  if (st == KILN_OK)
    st = kl_norm_axis(c, kl_attr_int(c->node, "axis", -1), x->rank + 1, "axis", &axis);
  if (st != KILN_OK) return st;
  out->rank = x->rank + 1;
  for (int d = 0, k = 0; d < out->rank; d++)
    out->dims[d] = d == axis ? (depth >= 0 ? kl_dim_of(depth) : kl_dim_unknown()) : x->dims[k++];
  return kl_check_out_numel(c, out);
}

/* ---- NonZero ---- */

/* The elements of data that are not 0 (run at each run of a detection model, over
 * millions of scores: the common dtypes read as their own words). */
static int64_t count_non_zero(const void *data, kl_dtype t, int64_t n) {
  int64_t count = 0;
  switch (t) {
  case KL_BOOL: case KL_U8: case KL_I8:
    for (int64_t i = 0; i < n; i++) count += ((const uint8_t *)data)[i] != 0;
    return count;
  case KL_F32:
    for (int64_t i = 0; i < n; i++) count += ((const float *)data)[i] != 0;
    return count;
  case KL_I32:
    for (int64_t i = 0; i < n; i++) count += ((const int32_t *)data)[i] != 0;
    return count;
  case KL_I64:
    for (int64_t i = 0; i < n; i++) count += ((const int64_t *)data)[i] != 0;
    return count;
  default:
    for (int64_t i = 0; i < n; i++) count += kl_load_f64(data, t, (size_t)i) != 0;
    return count;
  }
}

int kl_infer_non_zero(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_ANY);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  const void *data = kl_infer_data(c, 0);
  kl_type *out = &c->out[0];
  int64_t n;
  kl_type_unknown_dims(out, KL_I64, 2);
  /* a scalar counts as one element of a 1-D tensor, as in NumPy's atleast_1d */
  if (x->rank >= 0) out->dims[0] = kl_dim_of(x->rank > 0 ? x->rank : 1);
  if (!kl_type_numel(x, &n) || (n > 0 && !data)) return KILN_OK;
  out->dims[1] = kl_dim_of(count_non_zero(data, x->dtype, n));
  return KILN_OK;
}

/* ---- Unique ---- */

/* -1, 0 or 1 as element ia of slice a compares with element ib; NaN sorts last and
 * equals NaN (as NumPy's unique does). */
static int compare_elem(const kl_unique_view *v, int64_t ia, int64_t ib) {
  if (v->dtype == KL_U64) {
    uint64_t a = ((const uint64_t *)v->data)[ia], b = ((const uint64_t *)v->data)[ib];
    return (a > b) - (a < b);
  }
  if (!kl_dtype_is_float(v->dtype)) {
    int64_t a = kl_load_i64(v->data, v->dtype, (size_t)ia);
    int64_t b = kl_load_i64(v->data, v->dtype, (size_t)ib);
    return (a > b) - (a < b);
  }
  double a = kl_load_f64(v->data, v->dtype, (size_t)ia);
  double b = kl_load_f64(v->data, v->dtype, (size_t)ib);
  if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
  return (a > b) - (a < b);
}

static int compare_slices(const kl_unique_view *v, int64_t a, int64_t b) {
  for (int64_t o = 0; o < v->outer; o++)
    for (int64_t j = 0; j < v->inner; j++) {
      int64_t base = o * v->len * v->inner + j;
      int r = compare_elem(v, base + a * v->inner, base + b * v->inner);
      if (r) return r;
    }
  return 0;
}

double kl_unique_steps(double slices, double slice_elems) {
  double per = slice_elems > 1 ? slice_elems : 1;
  return slices < 2 ? slices : slices * ceil(log2(slices)) * per;
}

bool kl_unique_same(const kl_unique_view *v, int64_t a, int64_t b) {
  return compare_slices(v, a, b) == 0;
}

/* Stable merge sort of order[0..n) by slice, through tmp; stability keeps the first
 * occurrence of equal slices first. */
static void merge_sort(const kl_unique_view *v, int64_t *order, int64_t *tmp, int64_t n) {
  if (n < 2) return;
  int64_t h = n / 2, i = 0, j = h, k = 0;
  merge_sort(v, order, tmp, h);
  merge_sort(v, order + h, tmp, n - h);
  while (i < h && j < n)
    tmp[k++] = compare_slices(v, order[j], order[i]) < 0 ? order[j++] : order[i++];
  while (i < h) tmp[k++] = order[i++];
  while (j < n) tmp[k++] = order[j++];
  memcpy(order, tmp, sizeof(int64_t) * (size_t)n);
}

kiln_status kl_unique_sort(const kl_unique_view *v, int64_t *order, int64_t *n_unique,
                           kl_err *e) {
  int64_t *tmp = malloc(sizeof(int64_t) * (size_t)(v->len ? v->len : 1));
  if (!tmp) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory sorting %lld slices",
                           (long long)v->len);
  for (int64_t i = 0; i < v->len; i++) order[i] = i;
  merge_sort(v, order, tmp, v->len);
  free(tmp);
  *n_unique = v->len > 0;
  for (int64_t i = 1; i < v->len; i++) *n_unique += !kl_unique_same(v, order[i - 1], order[i]);
  return KILN_OK;
}

/* Steps of the sort that counts the distinct slices beyond which load-time inference
 * leaves the count unknown (the run bounds it with max_work: kl_node_work). */
#define UNIQUE_LOAD_MAX_STEPS ((double)(1 << 24))

/* The number of distinct slices when the data is known, else -1. */
static kiln_status unique_count(const kl_infer_ctx *c, int axis, int64_t *u) {
  const kl_type *x = c->in[0];
  kl_unique_view v = {kl_infer_data(c, 0), x->dtype, 1, 0, 1};
  int64_t n;
  *u = -1;
  if (!kl_type_numel(x, &n) || (n > 0 && !v.data)) return KILN_OK;
  v.len = n;
  if (axis >= 0) {
    v.len = x->dims[axis].size;
    for (int d = 0; d < axis; d++) v.outer *= x->dims[d].size;
    for (int d = axis + 1; d < x->rank; d++) v.inner *= x->dims[d].size;
  }
  /* slices are counted even when empty: [2^40, 0] along axis 0 is 2^40 of them */
  double steps = kl_unique_steps((double)v.len, (double)v.outer * (double)v.inner);
  if (!c->at_run && steps > UNIQUE_LOAD_MAX_STEPS) return KILN_OK;
  if ((size_t)v.len > SIZE_MAX / sizeof(int64_t))
    return kl_fail(c->e, KILN_ERR_LIMIT, "too many slices (%lld)", (long long)v.len);
  int64_t *order = malloc(sizeof(int64_t) * (size_t)(v.len ? v.len : 1));
  if (!order) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  kiln_status st = kl_unique_sort(&v, order, u, c->e);
  free(order);
  return st;
}

int kl_infer_unique(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_ANY);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  bool flat = !kl_node_attr(c->node, "axis");
  int axis = -1;
  kl_type_unknown(&c->out[0], x->dtype);
  for (int k = 1; k < c->n_out; k++) kl_type_unknown_dims(&c->out[k], KL_I64, 1);
  if (flat) kl_type_unknown_dims(&c->out[0], x->dtype, 1);
  if (!flat && x->rank >= 0)
    st = kl_norm_axis(c, kl_attr_int(c->node, "axis", 0), x->rank, "axis", &axis);
  if (st != KILN_OK || (!flat && x->rank < 0)) return st;
  int64_t u, len;
  st = unique_count(c, axis, &u);
  kl_dim du = u >= 0 ? kl_dim_of(u) : kl_dim_unknown();
  if (!flat) {
    c->out[0] = *x;
    c->out[0].dims[axis] = du;
  } else {
    c->out[0].dims[0] = du;
  }
  kl_dim dlen = flat ? (kl_type_numel(x, &len) ? kl_dim_of(len) : kl_dim_unknown())
                     : x->dims[axis];
  for (int k = 1; k < c->n_out; k++) c->out[k].dims[0] = k == 2 ? dlen : du;
  return st;
}
