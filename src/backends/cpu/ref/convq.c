/* Reference kernels: ConvTranspose, GlobalMaxPool, LpPool, MaxUnpool and Col2Im.
 *
 * ConvTranspose: X [N, C, D, H, W], W [C, M/group, kD, kH, kW], B [M] (optional),
 *   Y [N, M, oD, oH, oW] (1-D and 2-D run as 3-D, see ref.h). Written in gather form,
 *   one output at a time, so each output is one sum and no scratch is needed:
 *     Y[n, m, o] = B[m] + sum over c in m's group, k with o + pad - k * dilation = i * stride
 *                  of X[n, c, i] * W[c, m mod (M/group), k]
 * GlobalMaxPool: Y [N, C, 1, ...] = the maximum over each channel's spatial dims (NaN wins).
 * LpPool: Y [N, C, o...] = (sum over the window's taps inside X of |x|^p)^(1/p); the
 *   padding holds zeros and adds nothing.
 * MaxUnpool: Y zero but for X.flat[j], written where I[j] points. I holds flat indexes
 *   (as MaxPool's Indices) into the default output [N, C, (in - 1) * stride - pads +
 *   kernel]; a larger output_shape keeps that block in its leading corner, as the ONNX
 *   spec and its tests say (onnxruntime indexes the larger output directly instead).
 * Col2Im: input [N, C * prod(block), L] -> Y [N, C, image...]: each column l holds one
 *   block position; Y sums every block value that lands on a pixel (gather form again).
 */
#include "backends/cpu/ref/ref.h"
#include "ir/infer_convq.h"

#include <math.h>

/* ---- ConvTranspose ---- */

typedef struct convt_args {
  const kl_tensor *x, *w, *b;
  kl_ref_window g; /* in: X's spatial dims, out: Y's */
  int64_t cin_per_group, cout_per_group;
} convt_args;

static void window_reset(kl_ref_window *g) {
  for (int i = 0; i < 3; i++) {
    g->in[i] = g->out[i] = g->kernel[i] = g->stride[i] = g->dilation[i] = 1;
    g->pad_begin[i] = g->pad_end[i] = 0;
  }
}

static kiln_status convt_geometry(const kl_kernel_ctx *c, kl_ref_window *g) {
  const kl_tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
  int n = x->rank - 2, lead = 3 - n;
  window_reset(g);
  if (n < 1 || n > 3)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%d spatial dims; the reference kernel "
                   "takes 1 to 3", n);
  kl_convt t;
  kiln_status st = kl_convt_init(c->node, n, w->dims + 2, &t, c->e);
  for (int i = 0; st == KILN_OK && i < n; i++) {
    int64_t out;
    st = kl_convt_out(&t, i, x->dims[2 + i], &out, c->e);
    if (st == KILN_OK && out != y->dims[2 + i])
      st = kl_fail(c->e, KILN_ERR_INTERNAL, "output spatial dim %d is %lld, expected %lld",
                   i, (long long)y->dims[2 + i], (long long)out);
    g->in[lead + i] = x->dims[2 + i];
    g->out[lead + i] = out;
    g->kernel[lead + i] = t.w.kernel[i];
    g->stride[lead + i] = t.w.stride[i];
    g->dilation[lead + i] = t.w.dilation[i];
    g->pad_begin[lead + i] = t.w.pad_begin[i];
    g->pad_end[lead + i] = t.w.pad_end[i];
  }
  return st;
}

/* Input position that output position o reaches through kernel tap k along dim i, or
 * -1 when there is none (between strides, or outside X). */
static int64_t convt_tap(const kl_ref_window *g, int i, int64_t o, int64_t k) {
  int64_t p = o + g->pad_begin[i] - k * g->dilation[i];
  if (p < 0 || p % g->stride[i] != 0) return -1;
  p /= g->stride[i];
  return p < g->in[i] ? p : -1;
}

static double convt_channel(const convt_args *a, int64_t xplane, int64_t wplane,
                            const int64_t *o) {
  const kl_ref_window *g = &a->g;
  double acc = 0;
  for (int64_t k0 = 0; k0 < g->kernel[0]; k0++) {
    int64_t i0 = convt_tap(g, 0, o[0], k0);
    for (int64_t k1 = 0; i0 >= 0 && k1 < g->kernel[1]; k1++) {
      int64_t i1 = convt_tap(g, 1, o[1], k1);
      for (int64_t k2 = 0; i1 >= 0 && k2 < g->kernel[2]; k2++) {
        int64_t i2 = convt_tap(g, 2, o[2], k2);
        if (i2 < 0) continue;
        int64_t xi = xplane + kl_ref_at3(g->in, i0, i1, i2);
        int64_t wi = wplane + kl_ref_at3(g->kernel, k0, k1, k2);
        acc += kl_ref_load(a->x->data, a->x->dtype, xi) *
               kl_ref_load(a->w->data, a->w->dtype, wi);
      }
    }
  }
  return acc;
}

/* One output value: batch n, output channel m, spatial position o. */
static double convt_point(const convt_args *a, int64_t n, int64_t m, const int64_t *o) {
  const kl_ref_window *g = &a->g;
  int64_t xsize = kl_ref_span(g->in, 0, 3), wsize = kl_ref_span(g->kernel, 0, 3);
  int64_t c0 = m / a->cout_per_group * a->cin_per_group, mg = m % a->cout_per_group;
  double acc = a->b ? kl_ref_load(a->b->data, a->b->dtype, m) : 0;
  for (int64_t ci = c0; ci < c0 + a->cin_per_group; ci++) {
    int64_t xplane = (n * a->x->dims[1] + ci) * xsize;
    int64_t wplane = (ci * a->cout_per_group + mg) * wsize;
    acc += convt_channel(a, xplane, wplane, o);
  }
  return acc;
}

int kl_ref_conv_transpose(kl_kernel_ctx *c) {
  convt_args a = {.x = c->in[0], .w = c->in[1], .b = c->n_in > 2 ? c->in[2] : NULL};
  kiln_status st = convt_geometry(c, &a.g);
  if (st != KILN_OK) return st;
  int64_t group = kl_attr_int(c->node, "group", 1);
  a.cin_per_group = a.x->dims[1] / group;
  a.cout_per_group = a.w->dims[1];
  kl_tensor *y = c->out[0];
  int64_t i = 0, o[3];
  for (int64_t n = 0; n < y->dims[0]; n++)
    for (int64_t m = 0; m < y->dims[1]; m++)
      for (o[0] = 0; o[0] < a.g.out[0]; o[0]++)
        for (o[1] = 0; o[1] < a.g.out[1]; o[1]++)
          for (o[2] = 0; o[2] < a.g.out[2]; o[2]++)
            kl_ref_store(y->data, y->dtype, i++, convt_point(&a, n, m, o));
  return KILN_OK;
}

/* ---- GlobalMaxPool ---- */

int kl_ref_global_max_pool(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int64_t planes = x->dims[0] * x->dims[1], size = kl_ref_span(x->dims, 2, x->rank);
  for (int64_t p = 0; p < planes; p++) {
    double m = -INFINITY;
    /* Once m is NaN every comparison fails and it stays NaN, as NumPy's max does. */
    for (int64_t j = 0; j < size; j++) {
      double v = kl_ref_load(x->data, x->dtype, p * size + j);
      if (v > m || isnan(v)) m = v;
    }
    kl_ref_store(y->data, y->dtype, p, m);
  }
  return KILN_OK;
}

/* ---- LpPool ---- */

typedef struct lp_args {
  const kl_tensor *x;
  kl_ref_window g;
  double p;
} lp_args;

static double lp_window(const lp_args *a, int64_t plane, const int64_t *o) {
  const kl_ref_window *g = &a->g;
  double sum = 0;
  int64_t k[3], p[3], from[3], to[3];
  for (int i = 0; i < 3; i++) /* only the taps inside X: a huge window over padding */
    kl_ref_tap_span(o[i] * g->stride[i] - g->pad_begin[i], g->kernel[i], g->dilation[i], 0,
                    g->in[i], &from[i], &to[i]);
  for (k[0] = from[0]; k[0] < to[0]; k[0]++)
    for (k[1] = from[1]; k[1] < to[1]; k[1]++)
      for (k[2] = from[2]; k[2] < to[2]; k[2]++) {
        for (int i = 0; i < 3; i++)
          p[i] = o[i] * g->stride[i] - g->pad_begin[i] + k[i] * g->dilation[i];
        double v = kl_ref_load(a->x->data, a->x->dtype, plane + kl_ref_at3(g->in, p[0], p[1], p[2]));
        sum += pow(fabs(v), a->p);
      }
  return pow(sum, 1.0 / a->p);
}

int kl_ref_lppool(kl_kernel_ctx *c) {
  lp_args a = {.x = c->in[0], .p = (double)kl_attr_int(c->node, "p", 2)};
  kiln_status st = kl_ref_window_init(c, NULL, &a.g);
  if (st != KILN_OK) return st;
  kl_tensor *y = c->out[0];
  int64_t planes = a.x->dims[0] * a.x->dims[1], xsize = kl_ref_span(a.g.in, 0, 3);
  int64_t i = 0, o[3];
  for (int64_t plane = 0; plane < planes; plane++)
    for (o[0] = 0; o[0] < a.g.out[0]; o[0]++)
      for (o[1] = 0; o[1] < a.g.out[1]; o[1]++)
        for (o[2] = 0; o[2] < a.g.out[2]; o[2]++)
          kl_ref_store(y->data, y->dtype, i++, lp_window(&a, plane * xsize, o));
  return KILN_OK;
}

/* ---- MaxUnpool ---- */

/* Where flat index `at` of the default-shaped output (dims[0..n) per plane) lands in
 * Y, whose planes have the spatial dims ydims: the same position, in Y's layout. */
static int64_t unpool_target(int64_t at, int n, const int64_t *dims, const int64_t *ydims) {
  int64_t plane_size = kl_ref_span(dims, 0, n), pos = at % plane_size, off = 0, scale = 1;
  for (int i = n - 1; i >= 0; i--) {
    off += pos % dims[i] * scale;
    pos /= dims[i];
    scale *= ydims[i];
  }
  return at / plane_size * scale + off;
}

int kl_ref_maxunpool(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *idx = c->in[1];
  kl_tensor *y = c->out[0];
  int n = x->rank - 2;
  int64_t dims[KL_MAX_RANK];
  kiln_status st = kl_unpool_dims(c->node, n, x->dims + 2, dims, c->e);
  if (st != KILN_OK) return st;
  int64_t count = kl_tensor_numel(x), total = kl_tensor_numel(y);
  int64_t limit = x->dims[0] * x->dims[1] * kl_ref_span(dims, 0, n);
  for (int64_t j = 0; j < total; j++) kl_ref_store(y->data, y->dtype, j, 0.0);
  for (int64_t j = 0; j < count; j++) {
    int64_t at = ((const int64_t *)idx->data)[j];
    if (at < 0 || at >= limit)
      return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input 1 (I) has %lld at flat index "
                     "%lld, expected 0 to %lld", (long long)at, (long long)j,
                     (long long)limit - 1);
    int64_t to = unpool_target(at, n, dims, y->dims + 2);
    kl_ref_store(y->data, y->dtype, to, kl_ref_load(x->data, x->dtype, j));
  }
  return KILN_OK;
}

/* ---- Col2Im ---- */

typedef struct col2im_args {
  const kl_tensor *x;
  int n;
  int64_t image[KL_MAX_RANK], block[KL_MAX_RANK], count[KL_MAX_RANK];
  kl_window w;
} col2im_args;

/* Row-major successor of idx within dims; false after the last index. */
static bool next_index(int64_t *idx, const int64_t *dims, int n) {
  for (int i = n - 1; i >= 0; i--) {
    if (++idx[i] < dims[i]) return true;
    idx[i] = 0;
  }
  return false;
}

static kiln_status col2im_geometry(const kl_kernel_ctx *c, col2im_args *a) {
  const kl_tensor *image = c->in[1], *block = c->in[2];
  a->n = (int)image->dims[0];
  for (int i = 0; i < a->n; i++) {
    a->image[i] = ((const int64_t *)image->data)[i];
    a->block[i] = ((const int64_t *)block->data)[i];
  }
  kiln_status st = kl_window_init(c->node, a->n, a->block, &a->w, c->e);
  for (int i = 0; st == KILN_OK && i < a->n; i++)
    st = kl_window_out(&a->w, i, a->image[i], &a->count[i], c->e);
  return st;
}

/* Sum of the block values landing on image position o, from the columns of plane
 * (n, c) starting at element `base` of the input. */
static double col2im_pixel(const col2im_args *a, int64_t base, const int64_t *o) {
  const kl_window *w = &a->w;
  int64_t k[KL_MAX_RANK] = {0}, length = kl_ref_span(a->count, 0, a->n);
  int64_t row = 0; /* flat index of k within the block */
  double acc = 0;
  do {
    int64_t col = 0;
    bool hit = true;
    for (int i = 0; hit && i < a->n; i++) {
      int64_t p = o[i] + w->pad_begin[i] - k[i] * w->dilation[i];
      hit = p >= 0 && p % w->stride[i] == 0 && p / w->stride[i] < a->count[i];
      col = col * a->count[i] + (hit ? p / w->stride[i] : 0);
    }
    if (hit) acc += kl_ref_load(a->x->data, a->x->dtype, base + row * length + col);
    row++;
  } while (next_index(k, a->block, a->n));
  return acc;
}

int kl_ref_col2im(kl_kernel_ctx *c) {
  col2im_args a = {.x = c->in[0]};
  kiln_status st = col2im_geometry(c, &a);
  if (st != KILN_OK) return st;
  kl_tensor *y = c->out[0];
  int64_t planes = y->dims[0] * y->dims[1], pixels = kl_ref_span(a.image, 0, a.n);
  int64_t plane_in = kl_ref_span(a.block, 0, a.n) * kl_ref_span(a.count, 0, a.n);
  for (int64_t p = 0; p < planes; p++) {
    int64_t o[KL_MAX_RANK] = {0};
    for (int64_t i = 0; i < pixels; i++, next_index(o, a.image, a.n))
      kl_ref_store(y->data, y->dtype, p * pixels + i, col2im_pixel(&a, p * plane_in, o));
  }
  return KILN_OK;
}
