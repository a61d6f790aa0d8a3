/* Shared helpers for shape/dtype inference: dtype and rank checks, NumPy broadcasting
 * with symbolic dims, axis normalization, reading shape data, window geometry. */
#include "ir/infer_common.h"

#include <string.h>

const kl_type *kl_infer_in(const kl_infer_ctx *c, int i) {
  return i >= 0 && i < c->n_in ? c->in[i] : NULL;
}

const void *kl_infer_data(const kl_infer_ctx *c, int i) {
  return i >= 0 && i < c->n_in && c->in[i] && c->data ? c->data[i] : NULL;
}

kiln_status kl_check_required(const kl_infer_ctx *c, int n) {
  for (int i = 0; i < n; i++)
    if (!kl_infer_in(c, i))
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "input %d is required but absent", i);
  return KILN_OK;
}

void kl_type_unknown(kl_type *t, kl_dtype dtype) {
  memset(t, 0, sizeof *t);
  t->dtype = dtype;
  t->rank = -1;
}

void kl_type_unknown_dims(kl_type *t, kl_dtype dtype, int rank) {
  kl_type_unknown(t, dtype);
  t->rank = rank;
  for (int i = 0; i < rank && i < KL_MAX_RANK; i++) t->dims[i] = kl_dim_unknown();
}

static const char *op_name(const kl_infer_ctx *c) { return kl_op_name(c->node->op); }

/* "float16, float32" for a dtype mask, into buf. */
static const char *dtype_list(uint32_t mask, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int t = 1; t < 32 && used < len; t++) {
    if (!(mask & KL_DT(t)) || !kl_dtype_valid(t)) continue;
    used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "",
                             kl_dtype_name((kl_dtype)t));
  }
  return buf;
}

kiln_status kl_check_dtype(const kl_infer_ctx *c, int i, const char *name, uint32_t allowed) {
  const kl_type *t = kl_infer_in(c, i);
  if (!t || t->dtype == KL_UNDEFINED) return KILN_OK;
  if (kl_dtype_valid(t->dtype) && (allowed & KL_DT(t->dtype))) return KILN_OK;
  char list[256];
  return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "input %d (%s) is %s; %s takes %s", i, name,
                 kl_dtype_name(t->dtype), op_name(c), dtype_list(allowed, list, sizeof list));
}

kiln_status kl_check_same_dtype(const kl_infer_ctx *c, int i, int j) {
  const kl_type *a = kl_infer_in(c, i), *b = kl_infer_in(c, j);
  if (!a || !b || a->dtype == KL_UNDEFINED || b->dtype == KL_UNDEFINED || a->dtype == b->dtype)
    return KILN_OK;
  return kl_fail(c->e, KILN_ERR_DTYPE, "input %d is %s, expected %s like input %d", j,
                 kl_dtype_name(b->dtype), kl_dtype_name(a->dtype), i);
}

kiln_status kl_check_rank(const kl_infer_ctx *c, int i, const char *name, int lo, int hi) {
  const kl_type *t = kl_infer_in(c, i);
  if (!t || t->rank < 0 || (t->rank >= lo && t->rank <= hi)) return KILN_OK;
  if (lo == hi)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has rank %d, expected %d", i, name,
                   t->rank, lo);
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has rank %d, expected %d to %d", i,
                 name, t->rank, lo, hi);
}

kiln_status kl_check_out_rank(const kl_infer_ctx *c, int64_t rank) {
  if (rank <= KL_MAX_RANK) return KILN_OK;
  return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "output would have rank %lld; kiln supports "
                 "at most %d", (long long)rank, KL_MAX_RANK);
}

kiln_status kl_check_out_numel(const kl_infer_ctx *c, const kl_type *t) {
  int64_t n;
  for (int i = 0; i < t->rank; i++)
    if (!kl_dim_known(t->dims[i])) return KILN_OK;
  if (t->rank < 0 || kl_type_numel(t, &n)) return KILN_OK;
  return kl_fail(c->e, KILN_ERR_LIMIT, "the output's dims are too large (their product, an "
                 "empty dim counted as 1, is over 2^59)");
}

kl_dim kl_dim_merge(kl_dim a, kl_dim b, bool *ok) {
  *ok = true;
  if (kl_dim_known(a) && kl_dim_known(b)) {
    *ok = a.size == b.size;
    return a;
  }
  if (kl_dim_known(a)) return a;
  if (kl_dim_known(b)) return b;
  return a.sym >= 0 ? a : b;
}

/* One output dim of NumPy broadcasting; *ok false when the known sizes clash. */
static kl_dim broadcast_dim(kl_dim a, kl_dim b, bool *ok) {
  *ok = true;
  if (a.size == 1) return b;
  if (b.size == 1) return a;
  if (kl_dim_known(a) && kl_dim_known(b)) {
    *ok = a.size == b.size;
    return a;
  }
  if (kl_dim_known(a)) return a; /* b is a symbol standing for 1 or a's size */
  if (kl_dim_known(b)) return b;
  if (a.sym >= 0 && a.sym == b.sym) return a;
  return kl_dim_unknown();
}

kl_dim kl_broadcast_dim(kl_dim a, kl_dim b, bool *ok) { return broadcast_dim(a, b, ok); }

/* Broadcasts the known-rank shapes a and b into out (rank and dims). On a clash returns
 * false with the output dim and the two sizes that clash. */
static bool broadcast_shapes(const kl_type *a, const kl_type *b, kl_type *out,
                             int *bad_dim, kl_dim *da, kl_dim *db) {
  int rank = a->rank > b->rank ? a->rank : b->rank;
  kl_dim dims[KL_MAX_RANK];
  for (int k = 0; k < rank; k++) {
    int i = k - (rank - a->rank), j = k - (rank - b->rank);
    *da = i >= 0 ? a->dims[i] : kl_dim_of(1);
    *db = j >= 0 ? b->dims[j] : kl_dim_of(1);
    bool ok;
    dims[k] = broadcast_dim(*da, *db, &ok);
    if (!ok) {
      *bad_dim = k;
      return false;
    }
  }
  out->rank = rank;
  if (rank > 0) memcpy(out->dims, dims, sizeof(kl_dim) * (size_t)rank);
  return true;
}

kiln_status kl_broadcast(const kl_infer_ctx *c, int ia, int ib, kl_type *out) {
  const kl_type *a = kl_infer_in(c, ia), *b = kl_infer_in(c, ib);
  if (!a || !b || a->rank < 0 || b->rank < 0) {
    out->rank = -1;
    return KILN_OK;
  }
  int k;
  kl_dim da, db;
  if (broadcast_shapes(a, b, out, &k, &da, &db)) return KILN_OK;
  char sa[256], sb[256];
  kl_type_format(c->g, a, sa, sizeof sa);
  kl_type_format(c->g, b, sb, sizeof sb);
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d %s and input %d %s do not broadcast: "
                 "%lld vs %lld in output dim %d", ia, sa, ib, sb, (long long)da.size,
                 (long long)db.size, k);
}

kiln_status kl_broadcast_inputs(const kl_infer_ctx *c, int first, int count, kl_type *out) {
  kl_type acc;
  kl_type_unknown(&acc, out->dtype);
  acc.rank = 0; /* a scalar broadcasts to anything */
  bool rank_unknown = false; /* the inputs of known rank must still agree */
  for (int i = first; i < first + count; i++) {
    const kl_type *t = kl_infer_in(c, i);
    if (!t) continue;
    if (t->rank < 0) {
      rank_unknown = true;
      continue;
    }
    kl_type prev = acc;
    int k;
    kl_dim da, dt;
    if (broadcast_shapes(&prev, t, &acc, &k, &da, &dt)) continue;
    char sa[256], st[256];
    kl_type_format(c->g, &prev, sa, sizeof sa);
    kl_type_format(c->g, t, st, sizeof st);
    return kl_fail(c->e, KILN_ERR_SHAPE, "input %d %s does not broadcast with the "
                   "inputs before it (together %s): %lld vs %lld in output dim %d", i, st,
                   sa, (long long)dt.size, (long long)da.size, k);
  }
  out->rank = rank_unknown ? -1 : acc.rank;
  if (out->rank > 0) memcpy(out->dims, acc.dims, sizeof(kl_dim) * (size_t)acc.rank);
  return KILN_OK;
}

kiln_status kl_check_unidirectional(const kl_infer_ctx *c, int i, const char *name,
                                    const kl_type *target) {
  const kl_type *t = kl_infer_in(c, i);
  if (!t || t->rank < 0 || target->rank < 0) return KILN_OK;
  char st[256], sg[256];
  bool ok = t->rank <= target->rank;
  for (int k = 0; ok && k < t->rank; k++) {
    kl_dim d = t->dims[k], g = target->dims[k + target->rank - t->rank];
    ok = !(kl_dim_known(d) && kl_dim_known(g) && d.size != 1 && d.size != g.size);
  }
  if (ok) return KILN_OK;
  kl_type_format(c->g, t, st, sizeof st);
  kl_type_format(c->g, target, sg, sizeof sg);
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) %s does not broadcast to %s", i, name,
                 st, sg);
}

kiln_status kl_norm_axis(const kl_infer_ctx *c, int64_t axis, int rank, const char *what,
                         int *out) {
  if (axis < -rank || axis >= rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "%s %lld is out of range for rank %d (expected "
                   "%d to %d)", what, (long long)axis, rank, -rank, rank - 1);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return KILN_OK;
}

kiln_status kl_read_ints(const kl_infer_ctx *c, int i, const char *name, int64_t *v,
                         int max, int *n) {
  const kl_type *t = kl_infer_in(c, i);
  *n = -1;
  if (!t) return KILN_OK;
  if (t->dtype != KL_UNDEFINED && !kl_dtype_is_int(t->dtype))
    return kl_fail(c->e, KILN_ERR_DTYPE, "input %d (%s) is %s, expected an integer tensor",
                   i, name, kl_dtype_name(t->dtype));
  if (t->rank > 1)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has rank %d, expected 0 or 1", i,
                   name, t->rank);
  int64_t count;
  if (t->dtype == KL_UNDEFINED || !kl_type_numel(t, &count)) return KILN_OK;
  const void *data = kl_infer_data(c, i);
  if (!data && count > 0) return KILN_OK;
  if (count > max)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "input %d (%s) has %lld values; kiln "
                   "supports at most %d", i, name, (long long)count, max);
  for (int k = 0; k < (int)count; k++) v[k] = kl_load_i64(data, t->dtype, (size_t)k);
  *n = (int)count;
  return KILN_OK;
}

bool kl_read_scalar(const kl_infer_ctx *c, int i, double *v) {
  const kl_type *t = kl_infer_in(c, i);
  const void *data = kl_infer_data(c, i);
  int64_t count;
  if (!t || !data || !kl_dtype_valid(t->dtype) || !kl_type_numel(t, &count) || count < 1)
    return false;
  *v = kl_load_f64(data, t->dtype, 0);
  return true;
}

/* ---- sliding windows ---- */

static kiln_status read_auto_pad(const kl_node *node, kl_auto_pad *p, kl_err *e) {
  static const char *const names[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
  const char *s = kl_attr_string(node, "auto_pad", "NOTSET");
  for (int i = 0; i < 4; i++)
    if (strcmp(s, names[i]) == 0) {
      *p = (kl_auto_pad)i;
      return KILN_OK;
    }
  return kl_fail(e, KILN_ERR_INVALID_MODEL, "auto_pad is \"%s\", expected NOTSET, "
                 "SAME_UPPER, SAME_LOWER or VALID", s);
}

/* Copies the ints attribute `name` (count entries, each >= lo) into v, or fills v with
 * dflt when it is absent. */
static kiln_status read_list(const kl_node *node, const char *name, int count, int64_t lo,
                             int64_t dflt, int64_t *v, kl_err *e) {
  const int64_t *a;
  int n = kl_attr_ints(node, name, &a);
  if (n < 0) {
    for (int i = 0; i < count; i++) v[i] = dflt;
    return KILN_OK;
  }
  if (n != count)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s has %d values, expected %d", name, n,
                   count);
  for (int i = 0; i < n; i++) {
    if (a[i] < lo)
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s[%d] is %lld, expected at least %lld",
                     name, i, (long long)a[i], (long long)lo);
    v[i] = a[i];
  }
  return KILN_OK;
}

static kiln_status read_kernel(const kl_node *node, int n, const int64_t *kernel,
                               kl_window *w, kl_err *e) {
  for (int i = 0; kernel && i < n; i++)
    if (kernel[i] == 0)
      return kl_fail(e, KILN_ERR_SHAPE, "the weights have an empty kernel (spatial dim %d "
                     "is 0)", i);
  if (kl_node_attr(node, "kernel_shape") == NULL) {
    for (int i = 0; i < n; i++) w->kernel[i] = kernel ? kernel[i] : -1;
    return KILN_OK;
  }
  kiln_status st = read_list(node, "kernel_shape", n, 1, 1, w->kernel, e);
  for (int i = 0; st == KILN_OK && kernel && i < n; i++)
    if (kernel[i] >= 0 && kernel[i] != w->kernel[i])
      st = kl_fail(e, KILN_ERR_SHAPE, "kernel_shape[%d] is %lld but the weights have %lld",
                   i, (long long)w->kernel[i], (long long)kernel[i]);
  return st;
}

kiln_status kl_window_init(const kl_node *node, int n, const int64_t *kernel,
                           kl_window *w, kl_err *e) {
  memset(w, 0, sizeof *w);
  if (n < 1 || n > KL_MAX_RANK - 2)
    return kl_fail(e, KILN_ERR_SHAPE, "%d spatial dims, expected 1 to %d", n,
                   KL_MAX_RANK - 2);
  w->n = n;
  w->ceil_mode = kl_attr_int(node, "ceil_mode", 0) != 0;
  int64_t pads[2 * KL_MAX_RANK];
  kiln_status st = read_auto_pad(node, &w->auto_pad, e);
  if (st == KILN_OK) st = read_kernel(node, n, kernel, w, e);
  if (st == KILN_OK) st = read_list(node, "strides", n, 1, 1, w->stride, e);
  if (st == KILN_OK) st = read_list(node, "dilations", n, 1, 1, w->dilation, e);
  if (st == KILN_OK) st = read_list(node, "pads", 2 * n, 0, 0, pads, e);
  if (st != KILN_OK) return st;
  memcpy(w->pad_begin, pads, sizeof(int64_t) * (size_t)n);
  memcpy(w->pad_end, pads + n, sizeof(int64_t) * (size_t)n);
  return KILN_OK;
}

/* Output size with the pads already fixed; extent is the dilated kernel size. */
static kiln_status explicit_out(kl_window *w, int i, int64_t in, int64_t extent,
                                int64_t *out, kl_err *e) {
  int64_t padded;
  if (__builtin_add_overflow(in, w->pad_begin[i], &padded) ||
      __builtin_add_overflow(padded, w->pad_end[i], &padded))
    return kl_fail(e, KILN_ERR_LIMIT, "spatial dim %d: padded size overflows", i);
  if (padded < extent)
    return kl_fail(e, KILN_ERR_SHAPE, "spatial dim %d: window of %lld does not fit the "
                   "padded input of %lld", i, (long long)extent, (long long)padded);
  int64_t span = padded - extent, s = w->stride[i];
  if (!w->ceil_mode) {
    *out = span / s + 1;
    return KILN_OK;
  }
  *out = span / s + (span % s != 0) + 1;
  /* A last window that would start in the end padding is dropped (PyTorch, ONNX).
   * Here (*out - 1) * s < span + s, so it is only large when s is. */
  int64_t last_start;
  if (__builtin_mul_overflow(*out - 1, s, &last_start) || last_start >= in + w->pad_begin[i])
    (*out)--;
  return KILN_OK;
}

kiln_status kl_window_out(kl_window *w, int i, int64_t in, int64_t *out, kl_err *e) {
  int64_t extent;
  if (w->kernel[i] < 0) {
    *out = -1;
    return KILN_OK;
  }
  if (__builtin_mul_overflow(w->dilation[i], w->kernel[i] - 1, &extent) ||
      __builtin_add_overflow(extent, 1, &extent))
    return kl_fail(e, KILN_ERR_LIMIT, "spatial dim %d: dilated kernel size overflows", i);
  if (w->auto_pad == KL_PAD_VALID) w->pad_begin[i] = w->pad_end[i] = 0;
  if (w->auto_pad == KL_PAD_NOTSET || w->auto_pad == KL_PAD_VALID)
    return explicit_out(w, i, in, extent, out, e);
  /* SAME: ceil(in / stride) windows, padding split around the input. The windows cover
   * (n - 1) * s + extent; (n - 1) * s lies in (in - s, in], so no overflow. */
  int64_t s = w->stride[i], n = in / s + (in % s != 0);
  int64_t total = n > 0 ? extent - (in - (n - 1) * s) : 0;
  if (total < 0) total = 0;
  w->pad_begin[i] = w->auto_pad == KL_PAD_SAME_UPPER ? total / 2 : total - total / 2;
  w->pad_end[i] = total - w->pad_begin[i];
  *out = n;
  return KILN_OK;
}
