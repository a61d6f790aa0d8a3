/* Convolutions as kiln's matrix product over image rows gathered on the fly
 * (dnnl_im2col.c), which dnnl.c runs in place of oneDNN's direct convolution where
 * kiln's product tiles are fast (AVX2) and the convolution is one oneDNN runs slowly:
 * a kernel larger than 1x1 that Winograd does not take (strided ones), over few
 * output positions and many weights. Internal to the oneDNN kernels. */
#ifndef KL_CPU_DNNL_IM2COL_H
#define KL_CPU_DNNL_IM2COL_H

#include "backends/cpu/dnnl_engine.h"

/* X [n, h, w, c] -> Y [n, oh, ow, k] by a kh x kw kernel, strides sh, sw, dilations
 * dh, dw (ONNX's: 1 is none), pt rows and pl columns of padding before, one group.
 * x_cl: X is held channels-last, else plain ([n, c, h, w]: transposed into the
 * workspace first); y_cl: Y and its Sum likewise (made channels-last in the workspace
 * and transposed out). */
typedef struct kl_im2col_shape {
  int64_t n, h, w, c, k, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
  bool x_cl, y_cl;
} kl_im2col_shape;

typedef struct kl_im2col kl_im2col;

/* Whether kiln's product should run s (docs/benchmarks.md, "Strided convolutions"). */
bool kl_im2col_fits(const kl_im2col_shape *s);
/* The plan for s and the constant weights w ([k, c, kh, kw], plain), which it packs
 * (w may be freed after); n's fused activation is applied to Y. Reserves the workspace
 * the packed rows need in eng. */
kiln_status kl_im2col_create(kl_dnnl_engine *eng, const kl_im2col_shape *s, const float *w,
                             const kl_node *n, kl_im2col **out, kl_err *e);
/* Y = act(conv(X) + bias + sum) on c's threads; bias ([k]) and sum (Y's shape and
 * layout, Y's own memory allowed) may be NULL. */
kiln_status kl_im2col_run(kl_im2col *p, const kl_kernel_ctx *c, const float *x, float *y,
                          const float *bias, const float *sum);
/* Bytes of the packed weights. */
size_t kl_im2col_held_bytes(const kl_im2col *p);
void kl_im2col_free(kl_im2col *p);

#endif
