/* Reference convolution (ONNX Conv), direct form.
 *
 * Shapes: X [N, C, D, H, W], W [M, C/group, kD, kH, kW], B [M] (optional),
 * Y [N, M, oD, oH, oW]; 1-D and 2-D convolutions run as 3-D ones (see ref.h).
 *   Y[n, m, o] = B[m] + sum over c in m's group, k of
 *                X[n, c, o * stride - pad + k * dilation] * W[m, c', k]
 * Taps that fall in the padding contribute zero. Accumulates in double.
 */
#include "backends/cpu/ref/ref.h"
#include "ir/infer_common.h"

kiln_status kl_ref_window_init(const kl_kernel_ctx *c, const int64_t *kernel,
                               kl_ref_window *w) {
  const kl_tensor *x = c->in[0], *y = c->out[0];
  int n = x->rank - 2, lead = 3 - n;
  if (n < 1 || n > 3)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%d spatial dims; the reference kernel "
                   "takes 1 to 3", n);
  kl_window win;
  kiln_status st = kl_window_init(c->node, n, kernel, &win, c->e);
  for (int i = 0; i < 3; i++) {
    w->in[i] = w->out[i] = w->kernel[i] = w->stride[i] = w->dilation[i] = 1;
    w->pad_begin[i] = w->pad_end[i] = 0;
  }
  for (int i = 0; st == KILN_OK && i < n; i++) {
    int64_t out;
    st = kl_window_out(&win, i, x->dims[2 + i], &out, c->e);
    if (st == KILN_OK && out != y->dims[2 + i])
      st = kl_fail(c->e, KILN_ERR_INTERNAL, "output spatial dim %d is %lld, expected %lld",
                   i, (long long)y->dims[2 + i], (long long)out);
    w->in[lead + i] = x->dims[2 + i];
    w->out[lead + i] = out;
    w->kernel[lead + i] = win.kernel[i];
    w->stride[lead + i] = win.stride[i];
    w->dilation[lead + i] = win.dilation[i];
    w->pad_begin[lead + i] = win.pad_begin[i];
    w->pad_end[lead + i] = win.pad_end[i];
  }
  return st;
}

typedef struct conv_args {
  const kl_tensor *x, *w, *b;
  kl_ref_window g;
  int64_t cin_per_group, cout_per_group;
} conv_args;

/* Input coordinate of output position o and kernel tap k along spatial dim i, or -1
 * when it falls in the padding. */
static int64_t tap(const kl_ref_window *g, int i, int64_t o, int64_t k) {
  int64_t p = o * g->stride[i] - g->pad_begin[i] + k * g->dilation[i];
  return p >= 0 && p < g->in[i] ? p : -1;
}

/* Sum over one input channel's kernel window. */
static double conv_channel(const conv_args *a, int64_t xplane, int64_t wplane,
                           const int64_t *o) {
  const kl_ref_window *g = &a->g;
  double acc = 0;
  for (int64_t k0 = 0; k0 < g->kernel[0]; k0++) {
    int64_t i0 = tap(g, 0, o[0], k0);
    for (int64_t k1 = 0; i0 >= 0 && k1 < g->kernel[1]; k1++) {
      int64_t i1 = tap(g, 1, o[1], k1);
      for (int64_t k2 = 0; i1 >= 0 && k2 < g->kernel[2]; k2++) {
        int64_t i2 = tap(g, 2, o[2], k2);
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
static double conv_point(const conv_args *a, int64_t n, int64_t m, const int64_t *o) {
  const kl_ref_window *g = &a->g;
  int64_t xsize = kl_ref_span(g->in, 0, 3), wsize = kl_ref_span(g->kernel, 0, 3);
  int64_t c0 = m / a->cout_per_group * a->cin_per_group, channels = a->x->dims[1];
  double acc = a->b ? kl_ref_load(a->b->data, a->b->dtype, m) : 0;
  for (int64_t ci = 0; ci < a->cin_per_group; ci++) {
    int64_t xplane = (n * channels + c0 + ci) * xsize;
    int64_t wplane = (m * a->cin_per_group + ci) * wsize;
    acc += conv_channel(a, xplane, wplane, o);
  }
  return acc;
}

int kl_ref_conv(kl_kernel_ctx *c) {
  conv_args a = {.x = c->in[0], .w = c->in[1], .b = c->n_in > 2 ? c->in[2] : NULL};
  kiln_status st = kl_ref_window_init(c, a.w->dims + 2, &a.g);
  if (st != KILN_OK) return st;
  int64_t group = kl_attr_int(c->node, "group", 1);
  a.cin_per_group = a.w->dims[1];
  a.cout_per_group = a.w->dims[0] / group;
  kl_tensor *y = c->out[0];
  int64_t i = 0, o[3];
  for (int64_t n = 0; n < y->dims[0]; n++)
    for (int64_t m = 0; m < y->dims[1]; m++)
      for (o[0] = 0; o[0] < a.g.out[0]; o[0]++)
        for (o[1] = 0; o[1] < a.g.out[1]; o[1]++)
          for (o[2] = 0; o[2] < a.g.out[2]; o[2]++)
            kl_ref_store(y->data, y->dtype, i++, conv_point(&a, n, m, o));
  return KILN_OK;
}
