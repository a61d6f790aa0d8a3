/* Shape/dtype inference for shape and data-movement ops: Flatten, Reshape, Squeeze,
 * Unsqueeze, Concat, Transpose, Shape and Gather. These move bytes, so every storable
 * dtype is accepted. */
#include "ir/infer_common.h"

#include <string.h>

/* The product of some dims, split into a known factor and the symbols (or unknown
 * dims) left over, so that Reshape can cancel the symbols of both sides. */
typedef struct dim_product {
  int64_t known;
  int n_syms;
  int syms[KL_MAX_RANK];
  bool unknown; /* an anonymous unknown dim (no symbol to cancel) */
} dim_product;

/* False when the known factor overflows. */
static bool product_of(const kl_dim *dims, int n, dim_product *p) {
  memset(p, 0, sizeof *p);
  p->known = 1;
  for (int i = 0; i < n; i++) {
    if (kl_dim_known(dims[i])) {
      if (__builtin_mul_overflow(p->known, dims[i].size, &p->known)) return false;
    } else if (dims[i].sym >= 0) {
      p->syms[p->n_syms++] = dims[i].sym;
    } else {
      p->unknown = true;
    }
  }
  return true;
}

/* The product as one dim: known, a single symbol times 1, or unknown. */
static kl_dim product_dim(const dim_product *p) {
  if (p->unknown) return kl_dim_unknown();
  if (p->n_syms == 0) return kl_dim_of(p->known);
  if (p->n_syms == 1 && p->known == 1) return (kl_dim){-1, p->syms[0]};
  return kl_dim_unknown();
}

static kiln_status overflow(const kl_infer_ctx *c) {
  return kl_fail(c->e, KILN_ERR_LIMIT, "the number of elements overflows");
}

int kl_infer_flatten(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  int64_t axis = kl_attr_int(c->node, "axis", 1);
  kl_type_unknown_dims(&c->out[0], x->dtype, 2);
  if (x->rank < 0) return KILN_OK;
  /* Unlike most axes, Flatten's may equal the rank (everything in the first dim). */
  if (axis < -x->rank || axis > x->rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "axis %lld is out of range for rank %d (expected "
                   "%d to %d)", (long long)axis, x->rank, -x->rank, x->rank);
  int k = (int)(axis < 0 ? axis + x->rank : axis);
  dim_product outer, inner;
  if (!product_of(x->dims, k, &outer) || !product_of(x->dims + k, x->rank - k, &inner))
    return overflow(c);
  c->out[0].dims[0] = product_dim(&outer);
  c->out[0].dims[1] = product_dim(&inner);
  return KILN_OK;
}

/* ---- Reshape ---- */

/* Checks the requested shape's special values. */
static kiln_status reshape_check(const kl_infer_ctx *c, const int64_t *shape, int n,
                                 bool allowzero, int *infer_at) {
  bool has_zero = false;
  *infer_at = -1;
  for (int i = 0; i < n; i++) {
    if (shape[i] < -1)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (shape) has %lld at index %d; values "
                     "must be at least -1", (long long)shape[i], i);
    if (shape[i] == 0) has_zero = true;
    if (shape[i] != -1) continue;
    if (*infer_at >= 0)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (shape) has -1 at indexes %d and %d; "
                     "at most one dim can be inferred", *infer_at, i);
    *infer_at = i;
  }
  if (allowzero && has_zero && *infer_at >= 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (shape) has both 0 and -1, which "
                   "allowzero=1 forbids");
  return KILN_OK;
}

/* Removes from `from` one occurrence of each symbol of `take`; false if one is missing. */
static bool cancel_syms(dim_product *from, const dim_product *take) {
  for (int i = 0; i < take->n_syms; i++) {
    int k = 0;
    while (k < from->n_syms && from->syms[k] != take->syms[i]) k++;
    if (k == from->n_syms) return false;
    from->syms[k] = from->syms[--from->n_syms];
  }
  return true;
}

static kiln_status size_mismatch(const kl_infer_ctx *c, int64_t in, int64_t out) {
  return kl_fail(c->e, KILN_ERR_SHAPE, "cannot reshape %lld elements into a shape of %lld "
                 "elements", (long long)in, (long long)out);
}

/* Fills out->dims[at] (the -1 dim) so that the element counts agree, or checks them
 * when there is no -1 (at < 0). Symbols on both sides cancel ([batch,3,4] -> [0,-1]
 * gives [batch,12]); whatever cannot be worked out stays unknown. */
static kiln_status reshape_solve(const kl_infer_ctx *c, const kl_type *x, kl_type *out,
                                 int at) {
  dim_product in, rest;
  if (at >= 0) out->dims[at] = kl_dim_of(1); /* leaves it out of the product */
  if (!product_of(x->dims, x->rank, &in) || !product_of(out->dims, out->rank, &rest))
    return overflow(c);
  bool exact = !in.unknown && !rest.unknown && in.n_syms == 0 && rest.n_syms == 0;
  if (at < 0)
    return exact && in.known != rest.known ? size_mismatch(c, in.known, rest.known) : KILN_OK;
  out->dims[at] = kl_dim_unknown();
  if (in.unknown || rest.unknown || !cancel_syms(&in, &rest)) return KILN_OK;
  if (in.n_syms == 0 && rest.known != 0 && in.known % rest.known == 0)
    out->dims[at] = kl_dim_of(in.known / rest.known);
  else if (in.n_syms == 1 && in.known == rest.known && rest.known != 0)
    out->dims[at] = (kl_dim){-1, in.syms[0]};
  else if (exact)
    return rest.known == 0
               ? kl_fail(c->e, KILN_ERR_SHAPE, "cannot infer the -1 dim: the other dims "
                         "multiply to 0")
               : size_mismatch(c, in.known, rest.known);
  return KILN_OK;
}

static kiln_status reshape_known(const kl_infer_ctx *c, const int64_t *shape, int n,
                                 kl_type *out) {
  const kl_type *x = c->in[0];
  bool allowzero = kl_attr_int(c->node, "allowzero", 0) != 0;
  int at;
  kiln_status st = reshape_check(c, shape, n, allowzero, &at);
  if (st != KILN_OK) return st;
  out->rank = n;
  for (int i = 0; i < n; i++) {
    out->dims[i] = kl_dim_of(shape[i]);
    if (shape[i] != 0 || allowzero) continue;
    if (x->rank >= 0 && i >= x->rank)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (shape) has 0 at index %d, but input 0 "
                     "has only %d dims to copy", i, x->rank);
    out->dims[i] = x->rank >= 0 ? x->dims[i] : kl_dim_unknown();
  }
  if (x->rank < 0) {
    if (at >= 0) out->dims[at] = kl_dim_unknown();
    return KILN_OK;
  }
  return reshape_solve(c, x, out, at);
}

int kl_infer_reshape(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st != KILN_OK) return st;
  int64_t shape[KL_MAX_RANK];
  int n;
  st = kl_read_ints(c, 1, "shape", shape, KL_MAX_RANK, &n);
  if (st != KILN_OK) return st;
  kl_type_unknown(&c->out[0], c->in[0]->dtype);
  if (n >= 0) return reshape_known(c, shape, n, &c->out[0]);
  const kl_type *s = c->in[1];
  if (s->rank == 1 && kl_dim_known(s->dims[0])) {
    st = kl_check_out_rank(c, s->dims[0].size);
    if (st == KILN_OK) kl_type_unknown_dims(&c->out[0], c->in[0]->dtype, (int)s->dims[0].size);
  }
  return st;
}

/* ---- Squeeze and Unsqueeze ---- */

/* Normalizes axes against rank into a mask; repeated axes are an error. */
static kiln_status axes_mask(const kl_infer_ctx *c, const int64_t *axes, int n, int rank,
                             bool *mask) {
  memset(mask, 0, sizeof(bool) * KL_MAX_RANK);
  for (int i = 0; i < n; i++) {
    int a;
    kiln_status st = kl_norm_axis(c, axes[i], rank, "axis", &a);
    if (st != KILN_OK) return st;
    if (mask[a])
      return kl_fail(c->e, KILN_ERR_SHAPE, "axes name dim %d twice", a);
    mask[a] = true;
  }
  return KILN_OK;
}

/* Squeeze without axes drops every dim of size 1, which needs every dim known. */
static void squeeze_all(const kl_type *x, kl_type *out) {
  out->rank = -1;
  for (int i = 0; i < x->rank; i++)
    if (!kl_dim_known(x->dims[i])) return;
  out->rank = 0;
  for (int i = 0; i < x->rank; i++)
    if (x->dims[i].size != 1) out->dims[out->rank++] = x->dims[i];
}

static kiln_status squeeze_axes(const kl_infer_ctx *c, const int64_t *axes, int n,
                                kl_type *out) {
  const kl_type *x = c->in[0];
  bool mask[KL_MAX_RANK];
  kiln_status st = axes_mask(c, axes, n, x->rank, mask);
  if (st != KILN_OK) return st;
  out->rank = 0;
  for (int i = 0; i < x->rank; i++) {
    if (!mask[i]) {
      out->dims[out->rank++] = x->dims[i];
    } else if (kl_dim_known(x->dims[i]) && x->dims[i].size != 1) {
      return kl_fail(c->e, KILN_ERR_SHAPE, "cannot squeeze dim %d of size %lld (expected "
                     "1)", i, (long long)x->dims[i].size);
    }
  }
  return KILN_OK;
}

/* The number of entries of an axes input whose contents are not known, or -1. */
static int axes_count(const kl_infer_ctx *c, int i) {
  const kl_type *t = kl_infer_in(c, i);
  if (!t || t->rank != 1 || !kl_dim_known(t->dims[0]) || t->dims[0].size > KL_MAX_RANK)
    return -1;
  return (int)t->dims[0].size;
}

int kl_infer_squeeze(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  int64_t axes[KL_MAX_RANK];
  int n = -1;
  if (kl_infer_in(c, 1)) st = kl_read_ints(c, 1, "axes", axes, KL_MAX_RANK, &n);
  if (st != KILN_OK) return st;
  kl_type_unknown(&c->out[0], x->dtype);
  if (x->rank < 0) return KILN_OK;
  if (!kl_infer_in(c, 1)) {
    squeeze_all(x, &c->out[0]);
    return KILN_OK;
  }
  if (n >= 0) return squeeze_axes(c, axes, n, &c->out[0]);
  int count = axes_count(c, 1);
  if (count >= 0 && count <= x->rank)
    kl_type_unknown_dims(&c->out[0], x->dtype, x->rank - count);
  return KILN_OK;
}

static kiln_status unsqueeze_axes(const kl_infer_ctx *c, const int64_t *axes, int n,
                                  kl_type *out) {
  const kl_type *x = c->in[0];
  bool mask[KL_MAX_RANK];
  int rank = x->rank + n, next = 0;
  kiln_status st = axes_mask(c, axes, n, rank, mask);
  if (st != KILN_OK) return st;
  out->rank = rank;
  for (int i = 0; i < rank; i++) out->dims[i] = mask[i] ? kl_dim_of(1) : x->dims[next++];
  return KILN_OK;
}

int kl_infer_unsqueeze(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  int64_t axes[KL_MAX_RANK];
  int n;
  st = kl_read_ints(c, 1, "axes", axes, KL_MAX_RANK, &n);
  if (st != KILN_OK) return st;
  kl_type_unknown(&c->out[0], x->dtype);
  int count = n >= 0 ? n : axes_count(c, 1);
  if (x->rank < 0 || count < 0) return KILN_OK;
  st = kl_check_out_rank(c, x->rank + count);
  if (st != KILN_OK) return st;
  if (n >= 0) return unsqueeze_axes(c, axes, n, &c->out[0]);
  kl_type_unknown_dims(&c->out[0], x->dtype, x->rank + count);
  return KILN_OK;
}

/* ---- Concat ---- */

/* Adds dim `d` of one input to the running concat dim. */
static kl_dim concat_add(kl_dim sum, kl_dim d, bool *overflowed) {
  if (!kl_dim_known(sum) || !kl_dim_known(d)) return kl_dim_unknown();
  int64_t s;
  if (__builtin_add_overflow(sum.size, d.size, &s)) *overflowed = true;
  return kl_dim_of(s);
}

static kiln_status concat_input(const kl_infer_ctx *c, int i, int axis, kl_type *out) {
  const kl_type *t = c->in[i];
  if (t->rank < 0) {
    out->dims[axis] = kl_dim_unknown();
    return KILN_OK;
  }
  if (t->rank != out->rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input %d has rank %d, expected %d like the "
                   "other inputs", i, t->rank, out->rank);
  bool overflowed = false;
  for (int k = 0; k < t->rank; k++) {
    bool ok = true;
    if (k == axis) out->dims[k] = concat_add(out->dims[k], t->dims[k], &overflowed);
    else out->dims[k] = kl_dim_merge(out->dims[k], t->dims[k], &ok);
    if (!ok)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input %d has %lld in dim %d, expected %lld like "
                     "the inputs before it", i, (long long)t->dims[k].size, k,
                     (long long)out->dims[k].size);
  }
  return overflowed ? overflow(c) : KILN_OK;
}

int kl_infer_concat(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, c->n_in);
  for (int i = 1; st == KILN_OK && i < c->n_in; i++) st = kl_check_same_dtype(c, 0, i);
  if (st != KILN_OK) return st;
  if (!kl_node_attr(c->node, "axis"))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "attribute axis is required");
  int rank = -1;
  for (int i = 0; i < c->n_in && rank < 0; i++) rank = c->in[i]->rank;
  kl_type_unknown(&c->out[0], c->in[0]->dtype);
  if (rank < 0) return KILN_OK;
  int axis;
  st = kl_norm_axis(c, kl_attr_int(c->node, "axis", 0), rank, "axis", &axis);
  if (st != KILN_OK) return st;
  kl_type_unknown_dims(&c->out[0], c->in[0]->dtype, rank);
  c->out[0].dims[axis] = kl_dim_of(0);
  for (int i = 0; st == KILN_OK && i < c->n_in; i++) st = concat_input(c, i, axis, &c->out[0]);
  return st;
}

/* ---- Transpose, Shape, Gather ---- */

int kl_infer_transpose(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  const int64_t *perm;
  int n = kl_attr_ints(c->node, "perm", &perm);
  int rank = x->rank >= 0 ? x->rank : n;
  kl_type_unknown(&c->out[0], x->dtype);
  if (rank < 0) return KILN_OK;
  if (n >= 0 && n != rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "perm has %d values but input 0 has rank %d", n,
                   rank);
  st = kl_check_out_rank(c, rank);
  if (st != KILN_OK) return st;
  bool seen[KL_MAX_RANK] = {false};
  kl_type_unknown_dims(&c->out[0], x->dtype, rank);
  for (int i = 0; i < rank; i++) {
    int64_t p = n >= 0 ? perm[i] : rank - 1 - i;
    if (p < 0 || p >= rank || seen[p])
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "perm is not a permutation of 0..%d "
                     "(entry %d is %lld)", rank - 1, i, (long long)p);
    seen[p] = true;
    if (x->rank >= 0) c->out[0].dims[i] = x->dims[p];
  }
  return KILN_OK;
}

/* Shape's start/end: negative counts from the end, then clamped to [0, rank]. */
static int64_t shape_bound(int64_t v, int rank) {
  if (v < 0) v += rank;
  return v < 0 ? 0 : v > rank ? rank : v;
}

int kl_infer_shape(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_type_unknown_dims(&c->out[0], KL_I64, 1);
  if (x->rank < 0) return KILN_OK;
  int64_t start = shape_bound(kl_attr_int(c->node, "start", 0), x->rank);
  int64_t end = shape_bound(kl_attr_int(c->node, "end", x->rank), x->rank);
  c->out[0].dims[0] = kl_dim_of(end > start ? end - start : 0);
  return KILN_OK;
}

/* When the indices are known at load time, catches out-of-range ones early. */
static kiln_status gather_check_indices(const kl_infer_ctx *c, kl_dim size) {
  const kl_type *t = c->in[1];
  const void *data = kl_infer_data(c, 1);
  int64_t n;
  if (!data || !kl_dim_known(size) || !kl_type_numel(t, &n)) return KILN_OK;
  for (int64_t i = 0; i < n; i++) {
    int64_t v = kl_load_i64(data, t->dtype, (size_t)i);
    if (v < -size.size || v >= size.size)
      return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input 1 (indices) has %lld at "
                     "element %lld, expected %lld to %lld", (long long)v, (long long)i,
                     (long long)-size.size, (long long)size.size - 1);
  }
  return KILN_OK;
}

int kl_infer_gather(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "indices", KL_DTS_INDEX);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "data", 1, KL_MAX_RANK);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0], *idx = c->in[1];
  kl_type_unknown(&c->out[0], x->dtype);
  if (x->rank < 0) return KILN_OK;
  int axis;
  st = kl_norm_axis(c, kl_attr_int(c->node, "axis", 0), x->rank, "axis", &axis);
  if (st == KILN_OK) st = gather_check_indices(c, x->dims[axis]);
  if (st != KILN_OK || idx->rank < 0) return st;
  int rank = x->rank - 1 + idx->rank;
  st = kl_check_out_rank(c, rank);
  if (st != KILN_OK) return st;
  kl_type *out = &c->out[0];
  out->rank = 0;
  for (int i = 0; i < axis; i++) out->dims[out->rank++] = x->dims[i];
  for (int i = 0; i < idx->rank; i++) out->dims[out->rank++] = idx->dims[i];
  for (int i = axis + 1; i < x->rank; i++) out->dims[out->rank++] = x->dims[i];
  return KILN_OK;
}
