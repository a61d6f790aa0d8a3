/* Shape/dtype inference for the transposed and unusual window ops: ConvTranspose,
 * LpPool, MaxUnpool and Col2Im (GlobalMaxPool shares GlobalAveragePool's). */
#include "ir/infer_convq.h"

#include <string.h>

/* infer_nn.c: MaxPool/AveragePool's inference, which LpPool's window follows. */
int kl_infer_pool(kl_infer_ctx *c);

/* ---- ConvTranspose geometry ---- */

static kiln_status read_out_padding(const kl_node *node, kl_convt *t, kl_err *e) {
  const int64_t *v;
  int n = kl_attr_ints(node, "output_padding", &v);
  if (n < 0) return KILN_OK;
  if (n != t->w.n)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "output_padding has %d values, expected %d",
                   n, t->w.n);
  for (int i = 0; i < n; i++) {
    /* Larger values would add outputs that no input position reaches. */
    if (v[i] < 0 || (v[i] >= t->w.stride[i] && v[i] >= t->w.dilation[i]))
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "output_padding[%d] is %lld, expected at "
                     "least 0 and less than the stride (%lld) or the dilation (%lld)", i,
                     (long long)v[i], (long long)t->w.stride[i], (long long)t->w.dilation[i]);
    t->out_pad[i] = v[i];
  }
  return KILN_OK;
}

static kiln_status read_out_shape(const kl_node *node, kl_convt *t, kl_err *e) {
  const int64_t *v;
  int n = kl_attr_ints(node, "output_shape", &v), spatial = t->w.n;
  if (n < 0) return KILN_OK;
  /* The spec lists the spatial sizes only; older exporters also wrote N and C. */
  if (n != spatial && n != spatial + 2)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "output_shape has %d values, expected %d "
                   "(one per spatial dim)", n, spatial);
  for (int i = 0; i < spatial; i++) {
    int64_t d = v[n - spatial + i];
    if (d < 1)
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "output_shape's spatial dim %d is %lld, "
                     "expected at least 1", i, (long long)d);
    t->out_shape[i] = d;
  }
  t->has_out_shape = true;
  return KILN_OK;
}

kiln_status kl_convt_init(const kl_node *node, int n, const int64_t *kernel, kl_convt *t,
                          kl_err *e) {
  memset(t, 0, sizeof *t);
  kiln_status st = kl_window_init(node, n, kernel, &t->w, e);
  if (st == KILN_OK) st = read_out_padding(node, t, e);
  if (st == KILN_OK) st = read_out_shape(node, t, e);
  return st;
}

/* stride * (in - 1) + output_padding + dilated kernel: the output before any padding
 * is cut off. */
static kiln_status full_size(const kl_convt *t, int i, int64_t in, int64_t *size, kl_err *e) {
  const kl_window *w = &t->w;
  int64_t span, extent;
  if (__builtin_mul_overflow(w->stride[i], in - 1, &span) ||
      __builtin_mul_overflow(w->dilation[i], w->kernel[i] - 1, &extent) ||
      __builtin_add_overflow(span, extent, size) ||
      __builtin_add_overflow(*size, t->out_pad[i] + 1, size))
    return kl_fail(e, KILN_ERR_LIMIT, "spatial dim %d: output size overflows", i);
  return KILN_OK;
}

/* Pads that cut a full-size output down to `target`. A target larger than the full
 * size leaves the extra positions at the end with no input (bias only), as onnxruntime
 * and PyTorch do, rather than padding negatively. */
static void pads_for_target(kl_convt *t, int i, int64_t full, int64_t target) {
  int64_t total = full > target ? full - target : 0;
  int64_t begin = t->w.auto_pad == KL_PAD_SAME_UPPER ? total / 2 : total - total / 2;
  t->w.pad_begin[i] = begin;
  t->w.pad_end[i] = total - begin;
}

kiln_status kl_convt_out(kl_convt *t, int i, int64_t in, int64_t *out, kl_err *e) {
  kl_window *w = &t->w;
  bool same = w->auto_pad == KL_PAD_SAME_UPPER || w->auto_pad == KL_PAD_SAME_LOWER;
  *out = t->has_out_shape ? t->out_shape[i] : -1;
  if (in < 0 || w->kernel[i] < 0) return KILN_OK;
  if (in == 0)
    return kl_fail(e, KILN_ERR_SHAPE, "spatial dim %d of input 0 (X) is empty", i);
  int64_t full = 0;
  kiln_status st = full_size(t, i, in, &full, e);
  if (st != KILN_OK) return st;
  if (t->has_out_shape || same) {
    int64_t target = *out;
    if (!t->has_out_shape && __builtin_mul_overflow(in, w->stride[i], &target))
      return kl_fail(e, KILN_ERR_LIMIT, "spatial dim %d: output size overflows", i);
    pads_for_target(t, i, full, target);
    *out = target;
    return KILN_OK;
  }
  if (w->auto_pad == KL_PAD_VALID) w->pad_begin[i] = w->pad_end[i] = 0;
  /* pads are at least 0, so only the subtraction can overflow (downwards) */
  if (__builtin_sub_overflow(full, w->pad_begin[i], out) ||
      __builtin_sub_overflow(*out, w->pad_end[i], out))
    *out = 0;
  if (*out < 1)
    return kl_fail(e, KILN_ERR_SHAPE, "spatial dim %d: pads %lld + %lld leave no output "
                   "of %lld positions", i, (long long)w->pad_begin[i],
                   (long long)w->pad_end[i], (long long)full);
  return KILN_OK;
}

/* ---- ConvTranspose ---- */

static kiln_status convt_check_inputs(const kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 3, 5);
  if (st == KILN_OK) st = kl_check_rank(c, 1, "W", 3, 5);
  if (st == KILN_OK) st = kl_check_rank(c, 2, "B", 1, 1);
  return st;
}

/* W is [C, M / group, k...]; the output has M channels. Sets *m (or -1). */
static kiln_status convt_channels(const kl_infer_ctx *c, int64_t group, int64_t *m) {
  const kl_type *x = c->in[0], *w = c->in[1], *b = kl_infer_in(c, 2);
  *m = -1;
  if (group < 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "group is %lld, expected at least 1",
                   (long long)group);
  if (x->rank >= 0 && w->rank >= 0 && x->rank != w->rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (W) has rank %d, expected %d like "
                   "input 0 (X)", w->rank, x->rank);
  kl_dim cin = x->rank >= 2 ? x->dims[1] : kl_dim_unknown();
  kl_dim wc = w->rank >= 2 ? w->dims[0] : kl_dim_unknown();
  kl_dim per_group = w->rank >= 2 ? w->dims[1] : kl_dim_unknown();
  if (kl_dim_known(cin) && kl_dim_known(wc) && cin.size != wc.size)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (W) is for %lld input channels, but "
                   "input 0 (X) has %lld", (long long)wc.size, (long long)cin.size);
  kl_dim ch = kl_dim_known(cin) ? cin : wc;
  if (kl_dim_known(ch) && ch.size % group != 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "%lld input channels do not split into %lld "
                   "groups", (long long)ch.size, (long long)group);
  if (kl_dim_known(per_group) && __builtin_mul_overflow(per_group.size, group, m))
    return kl_fail(c->e, KILN_ERR_LIMIT, "output channel count overflows");
  if (b && b->rank == 1 && *m >= 0 && kl_dim_known(b->dims[0]) && b->dims[0].size != *m)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 2 (B) has %lld values, expected %lld (one "
                   "per output channel)", (long long)b->dims[0].size, (long long)*m);
  return KILN_OK;
}

int kl_infer_conv_transpose(kl_infer_ctx *c) {
  kiln_status st = convt_check_inputs(c);
  int64_t m;
  if (st == KILN_OK) st = convt_channels(c, kl_attr_int(c->node, "group", 1), &m);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0], *w = c->in[1];
  kl_type_unknown(&c->out[0], x->dtype);
  int rank = x->rank >= 0 ? x->rank : w->rank;
  if (rank < 0) return KILN_OK;
  int64_t kernel[KL_MAX_RANK];
  for (int i = 0; i < rank - 2; i++) kernel[i] = w->rank >= 0 ? w->dims[2 + i].size : -1;
  kl_convt t;
  st = kl_convt_init(c->node, rank - 2, kernel, &t, c->e);
  if (st != KILN_OK) return st;
  kl_type *y = &c->out[0];
  y->rank = rank;
  y->dims[0] = x->rank >= 0 ? x->dims[0] : kl_dim_unknown();
  y->dims[1] = kl_dim_of(m);
  for (int i = 0; i < rank - 2 && st == KILN_OK; i++) {
    int64_t size;
    st = kl_convt_out(&t, i, x->rank >= 0 ? x->dims[2 + i].size : -1, &size, c->e);
    y->dims[2 + i] = kl_dim_of(size);
  }
  return st;
}

/* ---- LpPool ---- */

int kl_infer_lppool(kl_infer_ctx *c) {
  const kl_attr *p = kl_node_attr(c->node, "p");
  if (p && p->kind != KL_ATTR_INT)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "p must be an int attribute");
  if (p && p->i < 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "p is %lld, expected at least 1",
                   (long long)p->i);
  return kl_infer_pool(c);
}

/* ---- MaxUnpool ---- */

static kiln_status unpool_check_inputs(const kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "I", KL_DT(KL_I64));
  if (st == KILN_OK) st = kl_check_dtype(c, 2, "output_shape", KL_DT(KL_I64));
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 3, KL_MAX_RANK);
  if (st == KILN_OK) st = kl_check_rank(c, 2, "output_shape", 1, 1);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0], *idx = c->in[1];
  if (x->rank < 0 || idx->rank < 0) return KILN_OK;
  bool same = x->rank == idx->rank;
  for (int i = 0; same && i < x->rank; i++) kl_dim_merge(x->dims[i], idx->dims[i], &same);
  if (!same) {
    char sx[256], si[256];
    kl_type_format(c->g, x, sx, sizeof sx);
    kl_type_format(c->g, idx, si, sizeof si);
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (I) %s must have the shape of input 0 "
                   "(X) %s", si, sx);
  }
  return KILN_OK;
}

kiln_status kl_unpool_dims(const kl_node *node, int n, const int64_t *in, int64_t *out,
                           kl_err *e) {
  kl_window w;
  kiln_status st = kl_window_init(node, n, NULL, &w, e);
  for (int i = 0; st == KILN_OK && i < n; i++) {
    out[i] = -1;
    if (in[i] < 0) continue;
    if (__builtin_mul_overflow(in[i] - 1, w.stride[i], &out[i]) ||
        __builtin_add_overflow(out[i], w.kernel[i], &out[i]))
      return kl_fail(e, KILN_ERR_LIMIT, "spatial dim %d: output size overflows", i);
    if (__builtin_sub_overflow(out[i], w.pad_begin[i], &out[i]) ||
        __builtin_sub_overflow(out[i], w.pad_end[i], &out[i]))
      out[i] = 0;
    if (out[i] < 1 && in[i] > 0)
      return kl_fail(e, KILN_ERR_SHAPE, "spatial dim %d: pads leave no output", i);
    if (out[i] < 0) out[i] = 0;
  }
  return st;
}

/* output_shape given as data: the whole output shape, N and C included, at least the
 * default shape in every spatial dim (the unpooled values fill its leading corner). */
static kiln_status unpool_given_dims(const kl_infer_ctx *c, const int64_t *dflt,
                                     const int64_t *v, int n, kl_type *y) {
  const kl_type *x = c->in[0];
  if (x->rank >= 0 && n != x->rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 2 (output_shape) has %d values, expected "
                   "%d (the rank of input 0)", n, x->rank);
  for (int i = 0; i < n; i++) {
    int64_t low = i >= 2 && x->rank >= 0 ? dflt[i - 2] : 0;
    kl_dim d = x->rank >= 0 && i < 2 ? x->dims[i] : kl_dim_unknown();
    if (kl_dim_known(d) && d.size != v[i])
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 2 (output_shape) has %lld in dim %d, "
                     "expected %lld like input 0", (long long)v[i], i, (long long)d.size);
    if (v[i] < low)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 2 (output_shape) has %lld in dim %d, "
                     "expected at least %lld (the unpooled size)", (long long)v[i], i,
                     (long long)low);
    y->dims[i] = kl_dim_of(v[i]);
  }
  y->rank = n;
  return KILN_OK;
}

int kl_infer_maxunpool(kl_infer_ctx *c) {
  kiln_status st = unpool_check_inputs(c);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  const int64_t *ks;
  int n = kl_attr_ints(c->node, "kernel_shape", &ks);
  if (n < 0) return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "kernel_shape is required");
  if (x->rank >= 0 && n != x->rank - 2)
    return kl_fail(c->e, KILN_ERR_SHAPE, "kernel_shape has %d values but input 0 (X) has "
                   "%d spatial dims", n, x->rank - 2);
  int64_t in[KL_MAX_RANK], dflt[KL_MAX_RANK];
  for (int i = 0; i < n; i++) in[i] = x->rank >= 0 ? x->dims[2 + i].size : -1;
  st = kl_unpool_dims(c->node, n, in, dflt, c->e);
  if (st != KILN_OK) return st;
  kl_type *y = &c->out[0];
  kl_type_unknown_dims(y, x->dtype, n + 2);
  if (kl_infer_in(c, 2)) {
    int64_t v[KL_MAX_RANK];
    int count;
    st = kl_read_ints(c, 2, "output_shape", v, KL_MAX_RANK, &count);
    if (st == KILN_OK && count >= 0) st = unpool_given_dims(c, dflt, v, count, y);
    return st;
  }
  if (x->rank < 0) return KILN_OK;
  y->dims[0] = x->dims[0];
  y->dims[1] = x->dims[1];
  for (int i = 0; i < n; i++) y->dims[2 + i] = kl_dim_of(dflt[i]);
  return KILN_OK;
}

/* ---- Col2Im ---- */

static kiln_status col2im_check_inputs(const kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "input", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "image_shape", KL_DT(KL_I64));
  if (st == KILN_OK) st = kl_check_dtype(c, 2, "block_shape", KL_DT(KL_I64));
  if (st == KILN_OK) st = kl_check_rank(c, 0, "input", 3, 3);
  if (st == KILN_OK) st = kl_check_rank(c, 1, "image_shape", 1, 1);
  if (st == KILN_OK) st = kl_check_rank(c, 2, "block_shape", 1, 1);
  return st;
}

/* Reads image_shape and block_shape (n values each when known, else n = -1). */
static kiln_status col2im_shapes(const kl_infer_ctx *c, int64_t *image, int *n_image,
                                 int64_t *block, int *n_block) {
  kiln_status st = kl_read_ints(c, 1, "image_shape", image, KL_MAX_RANK - 2, n_image);
  if (st == KILN_OK) st = kl_read_ints(c, 2, "block_shape", block, KL_MAX_RANK - 2, n_block);
  if (st != KILN_OK) return st;
  for (int i = 0; i < *n_image; i++)
    if (image[i] < 1)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (image_shape) has %lld in dim %d, "
                     "expected at least 1", (long long)image[i], i);
  for (int i = 0; i < *n_block; i++)
    if (block[i] < 1)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 2 (block_shape) has %lld in dim %d, "
                     "expected at least 1", (long long)block[i], i);
  if (*n_image >= 0 && *n_block >= 0 && *n_image != *n_block)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (image_shape) has %d values but input 2 "
                   "(block_shape) has %d", *n_image, *n_block);
  return KILN_OK;
}

/* Spatial rank from the lengths of image_shape and block_shape, or -1. */
static int col2im_rank(const kl_infer_ctx *c) {
  for (int i = 1; i <= 2; i++)
    if (c->in[i]->rank == 1 && kl_dim_known(c->in[i]->dims[0]))
      return (int)(c->in[i]->dims[0].size < KL_MAX_RANK ? c->in[i]->dims[0].size : KL_MAX_RANK);
  return -1;
}

/* The input's dims 1 and 2 must be C * prod(block) and the number of block positions. */
static kiln_status col2im_check_blocks(const kl_infer_ctx *c, kl_window *w,
                                       const int64_t *image, kl_type *y) {
  const kl_type *in = c->in[0];
  int64_t per_col = 1, positions = 1, count;
  for (int i = 0; i < w->n; i++) {
    kiln_status st = kl_window_out(w, i, image[i], &count, c->e);
    if (st != KILN_OK) return st;
    if (__builtin_mul_overflow(per_col, w->kernel[i], &per_col) ||
        __builtin_mul_overflow(positions, count, &positions))
      return kl_fail(c->e, KILN_ERR_LIMIT, "block count overflows");
  }
  kl_dim cols = in->rank == 3 ? in->dims[1] : kl_dim_unknown();
  kl_dim length = in->rank == 3 ? in->dims[2] : kl_dim_unknown();
  if (kl_dim_known(cols) && cols.size % per_col != 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 has %lld values per column, not a "
                   "multiple of the block size %lld", (long long)cols.size, (long long)per_col);
  if (kl_dim_known(length) && length.size != positions)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 has %lld columns, expected %lld (one per "
                   "block position)", (long long)length.size, (long long)positions);
  if (kl_dim_known(cols)) y->dims[1] = kl_dim_of(cols.size / per_col);
  return KILN_OK;
}

int kl_infer_col2im(kl_infer_ctx *c) {
  kiln_status st = col2im_check_inputs(c);
  int64_t image[KL_MAX_RANK], block[KL_MAX_RANK];
  int n_image, n_block;
  if (st == KILN_OK) st = col2im_shapes(c, image, &n_image, block, &n_block);
  if (st != KILN_OK) return st;
  int n = n_image >= 0 ? n_image : n_block >= 0 ? n_block : col2im_rank(c);
  kl_type_unknown(&c->out[0], c->in[0]->dtype);
  if (n < 0) return KILN_OK;
  if (n < 1 || n > KL_MAX_RANK - 2)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%d spatial dims, expected 1 to %d", n,
                   KL_MAX_RANK - 2);
  kl_type *y = &c->out[0];
  kl_type_unknown_dims(y, c->in[0]->dtype, n + 2);
  y->dims[0] = c->in[0]->rank == 3 ? c->in[0]->dims[0] : kl_dim_unknown();
  for (int i = 0; i < n_image; i++) y->dims[2 + i] = kl_dim_of(image[i]);
  kl_window w;
  st = kl_window_init(c->node, n, n_block >= 0 ? block : NULL, &w, c->e);
  if (st != KILN_OK || n_image < 0 || n_block < 0) return st;
  return col2im_check_blocks(c, &w, image, y);
}
