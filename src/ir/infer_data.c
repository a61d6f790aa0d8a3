/* Shape/dtype inference for ops that cut, pad, repeat or rearrange a tensor: Slice,
 * Expand, Tile, Pad, CenterCropPad, Split, Compress, ReverseSequence, Trilu,
 * DepthToSpace and SpaceToDepth, and the Slice and Pad plans their kernels share
 * (data_plan.h). They move elements without arithmetic, so they take every storable
 * dtype. */
#include "ir/data_plan.h"
#include "ir/infer_common.h"

#include <string.h>

/* The dims of x as sizes, -1 where not known. */
static void dim_sizes(const kl_type *x, int64_t *dims) {
  for (int i = 0; i < x->rank; i++) dims[i] = kl_dim_known(x->dims[i]) ? x->dims[i].size : -1;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* Normalizes axis k of a list against rank into *d, refusing repeats (seen). */
static kiln_status list_axis(const int64_t *axes, int k, int rank, bool *seen, int *d,
                             kl_err *e) {
  if (axes[k] < -rank || axes[k] >= rank)
    return kl_fail(e, KILN_ERR_SHAPE, "axes[%d] is %lld, out of range for rank %d (expected "
                   "%d to %d)", k, (long long)axes[k], rank, -rank, rank - 1);
  *d = (int)(axes[k] < 0 ? axes[k] + rank : axes[k]);
  if (seen[*d]) return kl_fail(e, KILN_ERR_SHAPE, "axes name dim %d twice", *d);
  seen[*d] = true;
  return KILN_OK;
}

/* The length of a 1-D input whose contents are not known, or -1. */
static int list_length(const kl_infer_ctx *c, int i) {
  const kl_type *t = kl_infer_in(c, i);
  if (!t || t->rank != 1 || !kl_dim_known(t->dims[0]) || t->dims[0].size > KL_MAX_RANK)
    return -1;
  return (int)t->dims[0].size;
}

/* ---- Slice ---- */

/* One sliced dim of len elements (len < 0: not known). Bounds are clamped as ONNX
 * says: into [0, len] going forwards and into [-1, len - 1] going backwards. */
static void slice_dim(int64_t len, int64_t start, int64_t end, int64_t step,
                      kl_slice_plan *p, int d) {
  p->step[d] = step;
  p->start[d] = 0;
  p->count[d] = -1;
  /* [0:INT_MAX] is how exporters spell "all of it", whatever the dim's size */
  p->whole[d] = step == 1 && start == 0 && end >= INT32_MAX;
  if (len < 0) return;
  p->count[d] = 0;
  if (len == 0) return;
  if (start < 0) start += len;
  if (end < 0) end += len;
  if (step > 0) {
    start = clamp64(start, 0, len);
    end = clamp64(end, 0, len);
    if (end > start) p->count[d] = (int64_t)((uint64_t)(end - start - 1) / (uint64_t)step) + 1;
  } else {
    start = clamp64(start, 0, len - 1);
    end = clamp64(end, -1, len - 1);
    uint64_t mag = (uint64_t)0 - (uint64_t)step; /* also right for INT64_MIN */
    if (start > end) p->count[d] = (int64_t)((uint64_t)(start - end - 1) / mag) + 1;
  }
  p->start[d] = start;
  p->whole[d] = step == 1 && p->count[d] == len;
}

void kl_slice_plan_view(const kl_slice_plan *p, int rank, const int64_t *xstrides,
                        int64_t *stride, int64_t *base) {
  *base = 0;
  for (int d = 0; d < rank; d++) {
    stride[d] = p->count[d] > 1 ? xstrides[d] * p->step[d] : 0;
    *base += p->start[d] * xstrides[d];
  }
}

kiln_status kl_slice_plan_make(int rank, const int64_t *dims, int n, const int64_t *starts,
                               const int64_t *ends, const int64_t *axes,
                               const int64_t *steps, kl_slice_plan *p, kl_err *e) {
  if (n > rank)
    return kl_fail(e, KILN_ERR_SHAPE, "starts has %d values but the input has rank %d", n,
                   rank);
  bool seen[KL_MAX_RANK] = {false};
  for (int d = 0; d < rank; d++) {
    p->start[d] = 0;
    p->step[d] = 1;
    p->count[d] = dims[d];
    p->whole[d] = true;
  }
  for (int k = 0; k < n; k++) {
    int d = k;
    if (axes) {
      kiln_status st = list_axis(axes, k, rank, seen, &d, e);
      if (st != KILN_OK) return st;
    }
    int64_t step = steps ? steps[k] : 1;
    if (step == 0) return kl_fail(e, KILN_ERR_SHAPE, "steps[%d] is 0", k);
    slice_dim(dims[d], starts[k], ends[k], step, p, d);
  }
  return KILN_OK;
}

/* Slice's list inputs; n_* is -1 when not known, and axes/steps may be absent. */
typedef struct slice_args {
  int64_t starts[KL_MAX_RANK], ends[KL_MAX_RANK], axes[KL_MAX_RANK], steps[KL_MAX_RANK];
  int n_starts, n_ends, n_axes, n_steps;
  bool has_axes, has_steps;
} slice_args;

static kiln_status slice_count(const kl_infer_ctx *c, int i, const char *name, int n, int want) {
  if (n < 0 || want < 0 || n == want) return KILN_OK;
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %d values, expected %d like "
                 "starts", i, name, n, want);
}

static kiln_status slice_read(const kl_infer_ctx *c, slice_args *s) {
  s->has_axes = kl_infer_in(c, 3) != NULL;
  s->has_steps = kl_infer_in(c, 4) != NULL;
  s->n_axes = s->n_steps = -1;
  kiln_status st = kl_read_ints(c, 1, "starts", s->starts, KL_MAX_RANK, &s->n_starts);
  if (st == KILN_OK) st = kl_read_ints(c, 2, "ends", s->ends, KL_MAX_RANK, &s->n_ends);
  if (st == KILN_OK && s->has_axes)
    st = kl_read_ints(c, 3, "axes", s->axes, KL_MAX_RANK, &s->n_axes);
  if (st == KILN_OK && s->has_steps)
    st = kl_read_ints(c, 4, "steps", s->steps, KL_MAX_RANK, &s->n_steps);
  if (st == KILN_OK) st = slice_count(c, 2, "ends", s->n_ends, s->n_starts);
  if (st == KILN_OK) st = slice_count(c, 3, "axes", s->n_axes, s->n_starts);
  if (st == KILN_OK) st = slice_count(c, 4, "steps", s->n_steps, s->n_starts);
  return st;
}

/* Some lists are not known: the dims no list can name keep their size. */
static kiln_status slice_partial(const kl_infer_ctx *c, const slice_args *s, kl_type *out) {
  const kl_type *x = c->in[0];
  bool seen[KL_MAX_RANK] = {false};
  if (s->has_axes && s->n_axes >= 0) {
    for (int k = 0; k < s->n_axes; k++) {
      int d;
      kiln_status st = list_axis(s->axes, k, x->rank, seen, &d, c->e);
      if (st != KILN_OK) return st;
    }
  } else if (!s->has_axes) {
    int n = s->n_starts >= 0 ? s->n_starts : s->n_ends >= 0 ? s->n_ends : list_length(c, 1);
    for (int d = 0; d < x->rank; d++) seen[d] = n < 0 || d < n;
  } else {
    return KILN_OK;
  }
  for (int d = 0; d < x->rank; d++)
    if (!seen[d]) out->dims[d] = x->dims[d];
  return KILN_OK;
}

int kl_infer_slice(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  slice_args s;
  st = slice_read(c, &s);
  kl_type *out = &c->out[0];
  kl_type_unknown(out, x->dtype);
  if (st != KILN_OK || x->rank < 0) return st;
  kl_type_unknown_dims(out, x->dtype, x->rank);
  if (s.n_starts < 0 || s.n_ends < 0 || (s.has_axes && s.n_axes < 0) ||
      (s.has_steps && s.n_steps < 0))
    return slice_partial(c, &s, out);
  int64_t dims[KL_MAX_RANK];
  dim_sizes(x, dims);
  kl_slice_plan p;
  st = kl_slice_plan_make(x->rank, dims, s.n_starts, s.starts, s.ends,
                          s.has_axes ? s.axes : NULL, s.has_steps ? s.steps : NULL, &p, c->e);
  for (int d = 0; st == KILN_OK && d < x->rank; d++)
    out->dims[d] = p.whole[d] ? x->dims[d] : p.count[d] >= 0 ? kl_dim_of(p.count[d])
                                                             : kl_dim_unknown();
  return st;
}

/* ---- Expand and Tile ---- */

/* The shape a 1-D int64 input asks for as a type: known sizes, or unknown dims when
 * only its length is known; false when not even that is. Sizes must be >= 0. */
static kiln_status requested_shape(const kl_infer_ctx *c, int i, const char *name, kl_type *s,
                                   bool *known) {
  int64_t v[KL_MAX_RANK];
  int n;
  kiln_status st = kl_read_ints(c, i, name, v, KL_MAX_RANK, &n);
  *known = false;
  if (st != KILN_OK) return st;
  kl_type_unknown(s, KL_I64);
  if (n < 0) {
    n = list_length(c, i);
    if (n >= 0) kl_type_unknown_dims(s, KL_I64, n);
    *known = n >= 0;
    return KILN_OK;
  }
  for (int k = 0; k < n; k++)
    if (v[k] < 0)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %lld at index %d, expected a "
                     "size >= 0", i, name, (long long)v[k], k);
  kl_type_set_shape(s, n, v);
  *known = true;
  return KILN_OK;
}

int kl_infer_expand(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_type s, *out = &c->out[0];
  bool known;
  st = requested_shape(c, 1, "shape", &s, &known);
  kl_type_unknown(out, x->dtype);
  if (st != KILN_OK || !known || x->rank < 0) return st;
  int rank = x->rank > s.rank ? x->rank : s.rank;
  out->rank = rank;
  for (int k = 0; k < rank; k++) {
    int i = k - (rank - x->rank), j = k - (rank - s.rank);
    kl_dim a = i >= 0 ? x->dims[i] : kl_dim_of(1), b = j >= 0 ? s.dims[j] : kl_dim_of(1);
    bool ok;
    out->dims[k] = kl_broadcast_dim(a, b, &ok);
    if (!ok)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 has %lld in dim %d, which does not "
                     "broadcast to the %lld asked for by input 1 (shape)", (long long)a.size,
                     i, (long long)b.size);
  }
  return kl_check_out_numel(c, out);
}

static kl_dim tile_dim(kl_dim d, int64_t r, bool *overflowed) {
  int64_t n;
  if (r == 1) return d;
  if (r == 0) return kl_dim_of(0);
  if (!kl_dim_known(d)) return kl_dim_unknown();
  if (__builtin_mul_overflow(d.size, r, &n)) *overflowed = true;
  return kl_dim_of(n);
}

int kl_infer_tile(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  int64_t r[KL_MAX_RANK];
  int n;
  st = kl_read_ints(c, 1, "repeats", r, KL_MAX_RANK, &n);
  kl_type *out = &c->out[0];
  kl_type_unknown(out, x->dtype);
  if (st != KILN_OK || x->rank < 0) return st;
  kl_type_unknown_dims(out, x->dtype, x->rank);
  if (n < 0) return KILN_OK;
  if (n != x->rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (repeats) has %d values, expected %d (the "
                   "rank of input 0)", n, x->rank);
  bool overflowed = false;
  for (int d = 0; d < n; d++) {
    if (r[d] < 0)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (repeats) has %lld at index %d, expected "
                     "a count >= 0", (long long)r[d], d);
    out->dims[d] = tile_dim(x->dims[d], r[d], &overflowed);
  }
  if (overflowed) return kl_fail(c->e, KILN_ERR_LIMIT, "the tiled size overflows");
  return kl_check_out_numel(c, out);
}

/* ---- Pad ---- */

static const char *const pad_modes[] = {"constant", "reflect", "edge", "wrap"};

kiln_status kl_pad_mode_read(const kl_node *node, kl_pad_mode *mode, kl_err *e) {
  const char *s = kl_attr_string(node, "mode", "constant");
  for (int i = 0; i < 4; i++)
    if (strcmp(s, pad_modes[i]) == 0) {
      *mode = (kl_pad_mode)i;
      return KILN_OK;
    }
  return kl_fail(e, KILN_ERR_INVALID_MODEL, "mode is \"%s\", expected constant, reflect, "
                 "edge or wrap", s);
}

kiln_status kl_pad_plan_make(int rank, int n, const int64_t *pads, const int64_t *axes,
                             int64_t *begin, int64_t *end, kl_err *e) {
  bool seen[KL_MAX_RANK] = {false};
  for (int d = 0; d < rank; d++) begin[d] = end[d] = 0;
  for (int k = 0; k < n; k++) {
    int d = k;
    if (axes) {
      kiln_status st = list_axis(axes, k, rank, seen, &d, e);
      if (st != KILN_OK) return st;
    }
    begin[d] = pads[k];
    end[d] = pads[n + k];
  }
  return KILN_OK;
}

/* p is a position in the kept part of m >= 1 elements, or outside it. */
static int64_t pad_fold(kl_pad_mode mode, int64_t p, int64_t m) {
  if (mode == KL_PADMODE_EDGE) return clamp64(p, 0, m - 1);
  if (mode == KL_PADMODE_WRAP) return (p % m + m) % m;
  if (m == 1) return 0;
  int64_t period = 2 * (m - 1), q = (p % period + period) % period; /* reflect */
  return q < m ? q : period - q;
}

int64_t kl_pad_source(kl_pad_mode mode, int64_t o, int64_t len, int64_t begin, int64_t end) {
  int64_t crop_begin = begin < 0 ? -begin : 0, crop_end = end < 0 ? -end : 0;
  int64_t m = len - crop_begin - crop_end, p = o - (begin > 0 ? begin : 0);
  if (p >= 0 && p < m) return crop_begin + p;
  if (mode == KL_PADMODE_CONSTANT || m <= 0) return -1;
  return crop_begin + pad_fold(mode, p, m);
}

/* Size of a padded dim of known size len. */
static kiln_status pad_dim(const kl_infer_ctx *c, kl_pad_mode mode, int d, int64_t len,
                           int64_t b, int64_t e, int64_t *size) {
  int64_t kept;
  if (__builtin_add_overflow(len, b, size) || __builtin_add_overflow(*size, e, size) ||
      __builtin_add_overflow(len, (b < 0 ? b : 0), &kept) ||
      __builtin_add_overflow(kept, (e < 0 ? e : 0), &kept))
    return kl_fail(c->e, KILN_ERR_LIMIT, "dim %d: the padded size overflows", d);
  if (kept < 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "dim %d: pads %lld and %lld crop more than its %lld "
                   "elements", d, (long long)b, (long long)e, (long long)len);
  if (mode != KL_PADMODE_CONSTANT && kept == 0 && *size > 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "dim %d: cannot pad an empty dim in %s mode", d,
                   pad_modes[mode]);
  return KILN_OK;
}

/* The padding value, when given, is one element of input 0's dtype. */
static kiln_status pad_check_value(const kl_infer_ctx *c) {
  const kl_type *v = kl_infer_in(c, 2);
  int64_t n;
  kiln_status st = kl_check_same_dtype(c, 0, 2);
  if (st != KILN_OK || !v || !kl_type_numel(v, &n) || n == 1) return st;
  return kl_fail(c->e, KILN_ERR_SHAPE, "input 2 (constant_value) has %lld elements, "
                 "expected 1", (long long)n);
}

/* Pads and axes as read; n_* -1 when not known. */
typedef struct pad_args {
  int64_t pads[2 * KL_MAX_RANK], axes[KL_MAX_RANK];
  int n_pads, n_axes;
  bool has_axes;
} pad_args;

static kiln_status pad_read(const kl_infer_ctx *c, pad_args *a) {
  a->has_axes = kl_infer_in(c, 3) != NULL;
  a->n_axes = -1;
  kiln_status st = kl_read_ints(c, 1, "pads", a->pads, 2 * KL_MAX_RANK, &a->n_pads);
  if (st == KILN_OK && a->has_axes)
    st = kl_read_ints(c, 3, "axes", a->axes, KL_MAX_RANK, &a->n_axes);
  return st == KILN_OK ? pad_check_value(c) : st;
}

static kiln_status pad_shape(const kl_infer_ctx *c, kl_pad_mode mode, const pad_args *a,
                             kl_type *out) {
  const kl_type *x = c->in[0];
  int n = a->has_axes ? a->n_axes : x->rank;
  if (a->n_pads != 2 * n)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (pads) has %d values, expected %d (2 per "
                   "padded dim)", a->n_pads, 2 * n);
  int64_t b[KL_MAX_RANK], e[KL_MAX_RANK], size;
  kiln_status st = kl_pad_plan_make(x->rank, n, a->pads, a->has_axes ? a->axes : NULL, b, e,
                                    c->e);
  for (int d = 0; st == KILN_OK && d < x->rank; d++) {
    if (b[d] == 0 && e[d] == 0) {
      out->dims[d] = x->dims[d];
    } else if (kl_dim_known(x->dims[d])) {
      st = pad_dim(c, mode, d, x->dims[d].size, b[d], e[d], &size);
      out->dims[d] = kl_dim_of(size);
    }
  }
  return st;
}

int kl_infer_pad(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_pad_mode mode = KL_PADMODE_CONSTANT;
  pad_args a;
  st = kl_pad_mode_read(c->node, &mode, c->e);
  if (st == KILN_OK) st = pad_read(c, &a);
  kl_type *out = &c->out[0];
  kl_type_unknown(out, x->dtype);
  if (st != KILN_OK || x->rank < 0) return st;
  kl_type_unknown_dims(out, x->dtype, x->rank);
  if (a.n_pads >= 0 && (!a.has_axes || a.n_axes >= 0)) {
    st = pad_shape(c, mode, &a, out);
    return st == KILN_OK ? kl_check_out_numel(c, out) : st;
  }
  bool seen[KL_MAX_RANK] = {false};
  for (int k = 0; a.has_axes && k < a.n_axes; k++) {
    int d;
    st = list_axis(a.axes, k, x->rank, seen, &d, c->e);
    if (st != KILN_OK) return st;
  }
  for (int d = 0; a.n_axes >= 0 && d < x->rank; d++)
    if (!seen[d]) out->dims[d] = x->dims[d];
  return KILN_OK;
}

/* ---- CenterCropPad ---- */

int kl_infer_center_crop_pad(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  int64_t shape[KL_MAX_RANK];
  int n;
  st = kl_read_ints(c, 1, "shape", shape, KL_MAX_RANK, &n);
  kl_type *out = &c->out[0];
  kl_type_unknown(out, x->dtype);
  if (st != KILN_OK || x->rank < 0) return st;
  const int64_t *axes;
  int n_axes = kl_attr_ints(c->node, "axes", &axes);
  int count = n_axes >= 0 ? n_axes : x->rank;
  if (n >= 0 && n != count)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (shape) has %d values, expected %d (one "
                   "per %s)", n, count, n_axes >= 0 ? "entry of axes" : "dim of input 0");
  *out = *x;
  bool seen[KL_MAX_RANK] = {false};
  for (int k = 0; k < count; k++) {
    int d = k;
    if (n_axes >= 0 && (st = list_axis(axes, k, x->rank, seen, &d, c->e)) != KILN_OK) return st;
    if (n >= 0 && shape[k] < 0)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (shape) has %lld at index %d, expected a "
                     "size >= 0", (long long)shape[k], k);
    out->dims[d] = n >= 0 ? kl_dim_of(shape[k]) : kl_dim_unknown();
  }
  return kl_check_out_numel(c, out);
}

/* ---- Split ---- */

/* Output k's share of a dim of len elements (len < 0: not known); -1 when not known. */
static kiln_status split_size(const kl_infer_ctx *c, int64_t len, int k, int64_t *size) {
  const void *data = kl_infer_data(c, 1);
  *size = -1;
  if (kl_infer_in(c, 1)) {
    if (data) *size = kl_load_i64(data, c->in[1]->dtype, (size_t)k);
    if (*size < -1 || (data && *size < 0))
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (split) has %lld at index %d, expected "
                     "a size >= 0", (long long)*size, k);
    return KILN_OK;
  }
  if (len < 0) return KILN_OK;
  /* ceil(len / n) each, the last part taking what is left */
  int64_t n = c->n_out, chunk = len / n + (len % n != 0), first = chunk * k;
  *size = first >= len ? 0 : len - first < chunk ? len - first : chunk;
  return KILN_OK;
}

static kiln_status split_check(const kl_infer_ctx *c) {
  const kl_type *s = kl_infer_in(c, 1);
  int64_t num = kl_attr_int(c->node, "num_outputs", c->n_out), count;
  if (num != c->n_out)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "num_outputs is %lld but the node has %d "
                   "outputs", (long long)num, c->n_out);
  if (!s) return KILN_OK;
  if (s->dtype != KL_UNDEFINED && s->dtype != KL_I64 && s->dtype != KL_I32)
    return kl_fail(c->e, KILN_ERR_DTYPE, "input 1 (split) is %s, expected int64",
                   kl_dtype_name(s->dtype));
  kiln_status st = kl_check_rank(c, 1, "split", 1, 1);
  if (st == KILN_OK && kl_type_numel(s, &count) && count != c->n_out)
    st = kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (split) has %lld values but the node has %d "
                 "outputs", (long long)count, c->n_out);
  return st;
}

int kl_infer_split(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = split_check(c);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  for (int k = 0; k < c->n_out; k++) kl_type_unknown(&c->out[k], x->dtype);
  if (x->rank < 0) return KILN_OK;
  int axis;
  st = kl_norm_axis(c, kl_attr_int(c->node, "axis", 0), x->rank, "axis", &axis);
  if (st != KILN_OK) return st;
  int64_t len = kl_dim_known(x->dims[axis]) ? x->dims[axis].size : -1, size, sum = 0;
  for (int k = 0; st == KILN_OK && k < c->n_out; k++) {
    st = split_size(c, len, k, &size);
    c->out[k] = *x;
    c->out[k].dims[axis] = size >= 0 ? kl_dim_of(size) : kl_dim_unknown();
    if (st == KILN_OK && size >= 0 && sum >= 0 && __builtin_add_overflow(sum, size, &sum))
      st = kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (split)'s sizes add up past 2^63");
    if (size < 0) sum = -1;
  }
  if (st == KILN_OK && len >= 0 && sum >= 0 && sum != len)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (split) adds up to %lld, but dim %d of "
                   "input 0 has %lld", (long long)sum, axis, (long long)len);
  return st;
}

/* ---- Compress ---- */

/* How many elements of a dim of len the condition keeps; -1 when not known. */
static kiln_status compress_kept(const kl_infer_ctx *c, int64_t len, int64_t *kept) {
  const uint8_t *cond = kl_infer_data(c, 1);
  int64_t n;
  *kept = -1;
  if (len < 0 || !kl_type_numel(c->in[1], &n) || (n > 0 && !cond)) return KILN_OK;
  *kept = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!cond[i]) continue;
    if (i >= len)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (condition) is true at index %lld, past "
                     "the %lld elements it selects from", (long long)i, (long long)len);
    (*kept)++;
  }
  return KILN_OK;
}

int kl_infer_compress(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "condition", KL_DT(KL_BOOL));
  if (st == KILN_OK) st = kl_check_rank(c, 1, "condition", 1, 1);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_type *out = &c->out[0];
  bool flat = !kl_node_attr(c->node, "axis");
  int64_t len = -1, kept;
  kl_type_unknown(out, x->dtype);
  if (flat) {
    kl_type_unknown_dims(out, x->dtype, 1);
    if (!kl_type_numel(x, &len)) len = -1;
  }
  if (x->rank < 0 && !flat) return KILN_OK;
  int axis = 0;
  if (!flat) {
    st = kl_norm_axis(c, kl_attr_int(c->node, "axis", 0), x->rank, "axis", &axis);
    if (st != KILN_OK) return st;
    len = kl_dim_known(x->dims[axis]) ? x->dims[axis].size : -1;
    *out = *x;
  }
  st = compress_kept(c, len, &kept);
  out->dims[axis] = kept >= 0 ? kl_dim_of(kept) : kl_dim_unknown();
  return st;
}

/* ---- ReverseSequence and Trilu: same shape out ---- */

static kiln_status reverse_check_lens(const kl_infer_ctx *c, int64_t time) {
  const kl_type *t = c->in[1];
  const void *lens = kl_infer_data(c, 1);
  int64_t n;
  if (!lens || time < 0 || !kl_type_numel(t, &n)) return KILN_OK;
  for (int64_t i = 0; i < n; i++) {
    int64_t v = kl_load_i64(lens, t->dtype, (size_t)i);
    if (v < 0 || v > time)
      return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input 1 (sequence_lens) has %lld at "
                     "index %lld, expected 0 to %lld (the time dim)", (long long)v,
                     (long long)i, (long long)time);
  }
  return KILN_OK;
}

int kl_infer_reverse_sequence(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "sequence_lens", KL_DTS_INDEX);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "input", 2, KL_MAX_RANK);
  if (st == KILN_OK) st = kl_check_rank(c, 1, "sequence_lens", 1, 1);
  if (st != KILN_OK) return st;
  int64_t batch = kl_attr_int(c->node, "batch_axis", 1), time = kl_attr_int(c->node, "time_axis", 0);
  if ((batch != 0 && batch != 1) || (time != 0 && time != 1) || batch == time)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "batch_axis %lld and time_axis %lld must be "
                   "0 and 1 in some order", (long long)batch, (long long)time);
  const kl_type *x = c->in[0], *lens = c->in[1];
  c->out[0] = *x;
  if (x->rank < 0 || lens->rank < 0) return KILN_OK;
  bool ok;
  kl_dim_merge(x->dims[batch], lens->dims[0], &ok);
  if (!ok)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (sequence_lens) has %lld values, expected "
                   "%lld (the batch dim)", (long long)lens->dims[0].size,
                   (long long)x->dims[batch].size);
  return reverse_check_lens(c, x->dims[time].size);
}

int kl_infer_trilu(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "input", 2, KL_MAX_RANK);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "k", KL_DT(KL_I64));
  if (st == KILN_OK) st = kl_check_rank(c, 1, "k", 0, 1);
  c->out[0] = *c->in[0];
  return st;
}

/* ---- DepthToSpace and SpaceToDepth ---- */

static kiln_status read_blocksize(const kl_infer_ctx *c, int64_t *b) {
  *b = kl_attr_int(c->node, "blocksize", 0);
  if (*b < 1 || *b > INT32_MAX)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "blocksize is %lld, expected a positive "
                   "int32 (it is required)", (long long)*b);
  return kl_check_rank(c, 0, "input", 4, 4);
}

/* d * by, or d / by which must divide (what names the dim in messages). */
static kiln_status scale_dim(const kl_infer_ctx *c, kl_dim d, int64_t by, bool up,
                             const char *what, kl_dim *out) {
  int64_t v;
  *out = kl_dim_unknown();
  if (!kl_dim_known(d)) return KILN_OK;
  if (up) {
    if (__builtin_mul_overflow(d.size, by, &v))
      return kl_fail(c->e, KILN_ERR_LIMIT, "the %s dim overflows", what);
  } else {
    if (d.size % by != 0)
      return kl_fail(c->e, KILN_ERR_SHAPE, "the %s dim is %lld, not a multiple of %lld", what,
                     (long long)d.size, (long long)by);
    v = d.size / by;
  }
  *out = kl_dim_of(v);
  return KILN_OK;
}

/* DepthToSpace moves channels into space (channels / b^2, height and width * b);
 * SpaceToDepth does the reverse. */
static kiln_status depth_space(kl_infer_ctx *c, bool to_space) {
  kiln_status st = kl_check_required(c, 1);
  int64_t b;
  if (st == KILN_OK) st = read_blocksize(c, &b);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_type *out = &c->out[0];
  *out = *x;
  if (x->rank < 0) return KILN_OK;
  int64_t bb = b * b; /* b fits int32, so no overflow */
  st = scale_dim(c, x->dims[1], bb, !to_space, "channel", &out->dims[1]);
  if (st == KILN_OK) st = scale_dim(c, x->dims[2], b, to_space, "height", &out->dims[2]);
  if (st == KILN_OK) st = scale_dim(c, x->dims[3], b, to_space, "width", &out->dims[3]);
  return st;
}

int kl_infer_depth_to_space(kl_infer_ctx *c) {
  const char *mode = kl_attr_string(c->node, "mode", "DCR");
  if (strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "mode is \"%s\", expected DCR or CRD", mode);
  return depth_space(c, true);
}

int kl_infer_space_to_depth(kl_infer_ctx *c) { return depth_space(c, false); }
