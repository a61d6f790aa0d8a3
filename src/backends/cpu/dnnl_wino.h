/* kiln's Winograd F(2x2, 3x3) convolution over channels-last tensors (dnnl_wino.c),
 * which dnnl.c runs in place of oneDNN's direct convolution where oneDNN has no
 * Winograd for the level (AVX2). Internal to the oneDNN kernels. */
#ifndef KL_CPU_DNNL_WINO_H
#define KL_CPU_DNNL_WINO_H

#include "backends/cpu/dnnl_engine.h"
#include "backends/cpu/isa/run.h"

/* X [n, h, w, c] -> Y [n, oh, ow, k] by a 3x3 kernel, stride 1, dilation 1, one group,
 * pt rows and pl columns of padding before. x_cl: X is held channels-last, else plain
 * ([n, c, h, w]); y_cl: Y (and Sum, held as Y is) likewise. A plain X is transposed
 * into the workspace before the tiles read it, a plain Y is made channels-last in the
 * workspace and transposed out (each one pass, against the 2.25 times fewer
 * multiplications). */
typedef struct kl_wino_shape {
  int64_t n, h, w, c, k, oh, ow, pt, pl;
  bool x_cl, y_cl;
} kl_wino_shape;

typedef struct kl_wino kl_wino;

/* Whether the shape is worth it: 32 or more channels in and out (below, the transforms
 * cost about what they save: 16 -> 64 channels at 55x55 ran 0.57 against oneDNN's
 * direct 0.62 ms on a Zen 3 core, 64 -> 64 at 56x56 1.5 against 2.6 ms). */
bool kl_wino_fits(const kl_wino_shape *s);
/* The plan for shape s and the constant weights w ([k, c, 3, 3], plain), which it
 * transforms and packs (w may be freed after); n's fused activation ("activation"),
 * which kiln's primitives must have (kl_isa_fused_act), is applied to Y. Reserves the
 * workspace its blocks need in eng. */
kiln_status kl_wino_create(kl_dnnl_engine *eng, const kl_wino_shape *s, const float *w,
                           const kl_node *n, kl_wino **out, kl_err *e);
/* Y = act(conv(X) + bias + sum) on c's threads; bias ([k]) and sum (Y's shape and
 * layout, Y's own memory allowed) may be NULL. */
kiln_status kl_wino_run(kl_wino *p, const kl_kernel_ctx *c, const float *x, float *y,
                        const float *bias, const float *sum);
/* [n, ch, sp] plain <-> [n, sp, ch] channels-last (to_cl: plain to channels-last), on
 * c's threads, through level f's transpose; not in place (dnnl_im2col.c's too). */
void kl_cl_transpose(const kl_isa_fns *f, const kl_kernel_ctx *c, const float *src, float *dst,
                     int64_t n, int64_t ch, int64_t sp, bool to_cl);
/* Bytes of the packed transformed weights. */
size_t kl_wino_held_bytes(const kl_wino *p);
void kl_wino_free(kl_wino *p);

#endif
