/* Reference reductions along axes: Reduce* (opset 18 form), ArgMax and ArgMin,
 * CumSum and CumProd, TopK.
 *
 * Reduce*: data of rank r, axes (input 1) chosen as kl_reduce_mask says; y has the
 * reduced axes removed, or kept as 1 with keepdims. Each y element reduces the set S
 * of data elements that map to it:
 *   Sum    sum(S)            Mean  sum(S) / |S|      Prod  prod(S)
 *   Max    max(S)            Min   min(S)            SumSquare  sum(x^2)
 *   L1     sum(|x|)          L2    sqrt(sum(x^2))    LogSum     log(sum(S))
 *   LogSumExp  log(sum(exp(x))), computed as m + log(sum(exp(x - m))), m = max(S)
 * Over an empty set (a zero-size reduced axis) these give their identity: 0 for the
 * sums, 1 for Prod, -inf for LogSum and LogSumExp, and for Max / Min the lowest /
 * highest value of the dtype (-inf / +inf for floats); Mean gives NaN (0 / 0). Over no
 * axes (noop_with_empty_axes) each set holds one element, so y = f(x) elementwise, as
 * in ONNX's reference implementation. Float dtypes are computed in double; the sums and
 * products of integers in 64-bit arithmetic wrapped to the dtype; Max and Min select
 * an element, so they are exact for every dtype.
 */
#include "backends/cpu/ref/reduce_view.h"
#include "ir/reduce.h"

#include <math.h>

static bool is_unsigned(kl_dtype t) {
  return t == KL_U8 || t == KL_U16 || t == KL_U32 || t == KL_U64 || t == KL_BOOL;
}

/* Order of element i of a against element j of b (both of dtype t): <0, 0 or >0. NaN
 * ranks above every number and equal to NaN, so the order is total and a NaN wins a
 * maximum as in NumPy. */
static int cmp_elem(const void *a, int64_t i, const void *b, int64_t j, kl_dtype t) {
  if (kl_dtype_is_float(t)) {
    double x = kl_ref_load(a, t, i), y = kl_ref_load(b, t, j);
    if (isnan(x) || isnan(y)) return (int)isnan(x) - (int)isnan(y);
    return (x > y) - (x < y);
  }
  int64_t x = kl_ref_load_int(a, t, i), y = kl_ref_load_int(b, t, j);
  if (t == KL_U64) return ((uint64_t)x > (uint64_t)y) - ((uint64_t)x < (uint64_t)y);
  return (x > y) - (x < y);
}

static void copy_elem(void *dst, int64_t i, const void *src, int64_t j, size_t size) {
  memcpy((char *)dst + (size_t)i * size, (const char *)src + (size_t)j * size, size);
}

/* ---- Reduce* ---- */

static double reduce_double(kl_op op, const kl_tensor *x, int64_t base, kl_ref_iter set,
                            int64_t n);

/* m + log(sum(exp(x - m))) with m the maximum, so that exp cannot overflow. */
static double log_sum_exp(const kl_tensor *x, int64_t base, kl_ref_iter set, int64_t n) {
  double m = reduce_double(KL_OP_ReduceMax, x, base, set, n), sum = 0;
  if (isinf(m)) return m; /* empty, all -inf, or a +inf */
  for (int64_t k = 0; k < n; k++, kl_ref_iter_next(&set))
    sum += exp(kl_ref_load(x->data, x->dtype, base + set.off[0]) - m);
  return m + log(sum);
}

/* The reduction of one set in double: the elements at base + set.off[0]. */
static double reduce_double(kl_op op, const kl_tensor *x, int64_t base, kl_ref_iter set,
                            int64_t n) {
  if (op == KL_OP_ReduceLogSumExp) return log_sum_exp(x, base, set, n);
  double acc = op == KL_OP_ReduceProd ? 1 : op == KL_OP_ReduceMax ? -INFINITY
             : op == KL_OP_ReduceMin ? INFINITY : 0;
  for (int64_t k = 0; k < n; k++, kl_ref_iter_next(&set)) {
    double v = kl_ref_load(x->data, x->dtype, base + set.off[0]);
    switch (op) {
    case KL_OP_ReduceProd: acc *= v; break;
    case KL_OP_ReduceMax: if (!isnan(acc) && (v > acc || isnan(v))) acc = v; break;
    case KL_OP_ReduceMin: if (!isnan(acc) && (v < acc || isnan(v))) acc = v; break;
    case KL_OP_ReduceL1: acc += fabs(v); break;
    case KL_OP_ReduceL2: case KL_OP_ReduceSumSquare: acc += v * v; break;
    default: acc += v; break; /* Sum, Mean, LogSum */
    }
  }
  switch (op) {
  case KL_OP_ReduceMean: return acc / (double)n;
  case KL_OP_ReduceL2: return sqrt(acc);
  case KL_OP_ReduceLogSum: return log(acc);
  default: return acc;
  }
}

/* Sum, Prod, SumSquare and L1 of integers: 64-bit arithmetic that wraps (unsigned, so
 * overflow is defined), stored wrapped to the dtype like NumPy. */
static uint64_t reduce_wrapped(kl_op op, const kl_tensor *x, int64_t base, kl_ref_iter set,
                               int64_t n) {
  uint64_t acc = op == KL_OP_ReduceProd;
  for (int64_t k = 0; k < n; k++, kl_ref_iter_next(&set)) {
    int64_t s = kl_ref_load_int(x->data, x->dtype, base + set.off[0]);
    uint64_t v = (uint64_t)s;
    if (op == KL_OP_ReduceL1 && !is_unsigned(x->dtype) && s < 0) v = 0 - v;
    if (op == KL_OP_ReduceProd) acc *= v;
    else if (op == KL_OP_ReduceSumSquare) acc += v * v;
    else acc += v;
  }
  return acc;
}

/* The lowest (or highest) value of an integer or bool dtype: Max (Min) of nothing. */
static int64_t int_extreme(kl_dtype t, bool highest) {
  switch (t) {
  case KL_I8: return highest ? INT8_MAX : INT8_MIN;
  case KL_U8: case KL_BOOL: return highest ? (t == KL_BOOL ? 1 : UINT8_MAX) : 0;
  case KL_I32: return highest ? INT32_MAX : INT32_MIN;
  case KL_U32: return highest ? (int64_t)UINT32_MAX : 0;
  case KL_U64: return highest ? -1 : 0; /* -1 stores as UINT64_MAX */
  default: return highest ? INT64_MAX : INT64_MIN;
  }
}

/* Max or Min of integers: the element itself, or the dtype's extreme when empty. */
static void reduce_select(kl_op op, const kl_tensor *x, int64_t base, kl_ref_iter set,
                          int64_t n, kl_tensor *y, int64_t o) {
  int sign = op == KL_OP_ReduceMax ? 1 : -1;
  int64_t best = -1;
  for (int64_t k = 0; k < n; k++, kl_ref_iter_next(&set)) {
    int64_t at = base + set.off[0];
    if (best < 0 || sign * cmp_elem(x->data, at, x->data, best, x->dtype) > 0) best = at;
  }
  if (best >= 0) copy_elem(y->data, o, x->data, best, kl_dtype_size(x->dtype));
  else kl_ref_store_int(y->data, y->dtype, o, int_extreme(y->dtype, sign < 0));
}

static void reduce_one(kl_op op, const kl_tensor *x, int64_t base, const kl_reduce_view *v,
                       kl_tensor *y, int64_t o) {
  if (kl_dtype_is_float(x->dtype)) {
    kl_ref_store(y->data, y->dtype, o, reduce_double(op, x, base, v->set, v->n_set));
    return;
  }
  switch (op) {
  case KL_OP_ReduceMax: case KL_OP_ReduceMin:
    reduce_select(op, x, base, v->set, v->n_set, y, o);
    break;
  case KL_OP_ReduceSum: case KL_OP_ReduceProd: case KL_OP_ReduceSumSquare:
  case KL_OP_ReduceL1:
    kl_ref_store_int(y->data, y->dtype, o, (int64_t)reduce_wrapped(op, x, base, v->set,
                                                                    v->n_set));
    break;
  default: /* Mean, L2, LogSum, LogSumExp: in double, truncated back */
    kl_ref_store_int(y->data, y->dtype, o,
                     kl_ref_trunc_i64(reduce_double(op, x, base, v->set, v->n_set)));
    break;
  }
}

int kl_ref_reduce(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *a = c->n_in > 1 ? c->in[1] : NULL;
  int64_t axes[KL_MAX_RANK];
  int n_axes = a ? (int)kl_tensor_numel(a) : 0;
  if (n_axes > KL_MAX_RANK)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "%d axes passed shape inference", n_axes);
  for (int i = 0; i < n_axes; i++) axes[i] = kl_load_i64(a->data, a->dtype, (size_t)i);
  bool mask[KL_MAX_RANK];
  kiln_status st = kl_reduce_mask(c->node, x->rank, axes, n_axes, mask, c->e);
  if (st != KILN_OK) return st;
  kl_reduce_view v;
  kl_reduce_view_init(x, mask, &v);
  kl_ref_iter kept = v.kept;
  for (int64_t o = 0; o < v.n_kept; o++, kl_ref_iter_next(&kept))
    reduce_one(c->node->op, x, kept.off[0], &v, c->out[0], o);
  return KILN_OK;
}

/* ---- ArgMax, ArgMin ----
 * data of rank r, axis in [-r, r) (default 0); the index (int64) of the first maximum
 * (minimum) along the axis, or of the last with select_last_index. */

int kl_ref_argminmax(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int64_t a = kl_attr_int(c->node, "axis", 0);
  int axis = (int)(a < 0 ? a + x->rank : a);
  int64_t outer = kl_ref_span(x->dims, 0, axis), len = x->dims[axis];
  int64_t inner = kl_ref_span(x->dims, axis + 1, x->rank);
  int sign = c->node->op == KL_OP_ArgMax ? 1 : -1;
  bool last = kl_attr_int(c->node, "select_last_index", 0) != 0;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t base = o * len * inner + i, best = 0;
      for (int64_t j = 1; j < len; j++) {
        int r = sign * cmp_elem(x->data, base + j * inner, x->data, base + best * inner,
                                x->dtype);
        if (r > 0 || (r == 0 && last)) best = j;
      }
      ((int64_t *)y->data)[o * inner + i] = best;
    }
  return KILN_OK;
}

/* ---- CumSum, CumProd ----
 * x of rank r, axis (input 1, a scalar) in [-r, r); y like x:
 *   y[.., j, ..] = sum (product) of x[.., i, ..] for i <= j
 * with exclusive the element itself left out (i < j; the first is 0, or 1), with
 * reverse the scan runs from the end (i >= j). */

static void scan_row(const kl_tensor *x, kl_tensor *y, int64_t base, int64_t len,
                     int64_t step, bool prod, bool exclusive, bool reverse) {
  double acc = prod;
  uint64_t iacc = prod;
  for (int64_t k = 0; k < len; k++) {
    int64_t at = base + (reverse ? len - 1 - k : k) * step;
    if (kl_dtype_is_float(x->dtype)) {
      double v = kl_ref_load(x->data, x->dtype, at), next = prod ? acc * v : acc + v;
      kl_ref_store(y->data, y->dtype, at, exclusive ? acc : next);
      acc = next;
    } else {
      uint64_t v = (uint64_t)kl_ref_load_int(x->data, x->dtype, at);
      uint64_t next = prod ? iacc * v : iacc + v;
      kl_ref_store_int(y->data, y->dtype, at, (int64_t)(exclusive ? iacc : next));
      iacc = next;
    }
  }
}

int kl_ref_cumulative(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *a = c->in[1];
  int64_t ax = kl_load_i64(a->data, a->dtype, 0);
  int axis = (int)(ax < 0 ? ax + x->rank : ax);
  int64_t outer = kl_ref_span(x->dims, 0, axis), len = x->dims[axis];
  int64_t inner = kl_ref_span(x->dims, axis + 1, x->rank);
  bool prod = c->node->op == KL_OP_CumProd;
  bool exclusive = kl_attr_int(c->node, "exclusive", 0) != 0;
  bool reverse = kl_attr_int(c->node, "reverse", 0) != 0;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++)
      scan_row(x, c->out[0], o * len * inner + i, len, inner, prod, exclusive, reverse);
  return KILN_OK;
}

/* ---- TopK ----
 * X of rank r, K (input 1, one int64), axis (default -1), largest (default 1);
 * Values and Indices (int64) have X's shape with k along the axis: the k largest
 * (smallest) elements in order, equal values by increasing index. Always sorted, which
 * sorted=0 allows. The outputs are kept as a sorted list while the row is scanned once
 * (insertion), so the kernel needs no scratch memory. */

static void topk_row(const kl_tensor *x, kl_tensor *vals, kl_tensor *idx, int64_t xbase,
                     int64_t ybase, int64_t len, int64_t k, int64_t step, int sign) {
  size_t size = kl_dtype_size(x->dtype);
  int64_t *ind = idx->data;
  int64_t count = 0;
  for (int64_t j = 0; j < len; j++) {
    int64_t at = xbase + j * step, p = count;
    /* before every kept entry that x[j] beats strictly; ties keep the earlier index */
    while (p > 0 && sign * cmp_elem(x->data, at, vals->data, ybase + (p - 1) * step,
                                    x->dtype) > 0)
      p--;
    if (p >= k) continue;
    if (count < k) count++;
    for (int64_t q = count - 1; q > p; q--) {
      copy_elem(vals->data, ybase + q * step, vals->data, ybase + (q - 1) * step, size);
      ind[ybase + q * step] = ind[ybase + (q - 1) * step];
    }
    copy_elem(vals->data, ybase + p * step, x->data, at, size);
    ind[ybase + p * step] = j;
  }
}

int kl_ref_topk(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  int64_t k = kl_load_i64(c->in[1]->data, c->in[1]->dtype, 0);
  int64_t a = kl_attr_int(c->node, "axis", -1);
  int axis = (int)(a < 0 ? a + x->rank : a);
  int64_t outer = kl_ref_span(x->dims, 0, axis), len = x->dims[axis];
  int64_t inner = kl_ref_span(x->dims, axis + 1, x->rank);
  int sign = kl_attr_int(c->node, "largest", 1) != 0 ? 1 : -1;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++)
      topk_row(x, c->out[0], c->out[1], o * len * inner + i, o * k * inner + i, len, k,
               inner, sign);
  return KILN_OK;
}
