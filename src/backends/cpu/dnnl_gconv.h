/* Grouped convolutions of few channels a group (RegNet's 8, ResNeXt's) as kiln's own
 * direct kernel over channels-last tensors (dnnl_gconv.c), which dnnl.c runs in place of
 * oneDNN's jit:avx2 at the AVX2 level. Internal to the oneDNN kernels. */
#ifndef KL_CPU_DNNL_GCONV_H
#define KL_CPU_DNNL_GCONV_H

#include "backends/cpu/dnnl_engine.h"

/* X [n, h, w, c] -> Y [n, oh, ow, k] (both channels-last) in `groups` groups, by a
 * kh x kw kernel, strides sh, sw, dilations dh, dw (ONNX's: 1 is none), pt rows and pl
 * columns of padding before. */
typedef struct kl_gconv_shape {
  int64_t n, h, w, c, k, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, groups;
} kl_gconv_shape;

typedef struct kl_gconv_plan kl_gconv_plan;

/* Whether kiln's kernel should run s (docs/benchmarks.md, "Grouped convolutions"). */
bool kl_gconv_fits(const kl_gconv_shape *s);
/* The plan for s and the constant weights w ([k, c / groups, kh, kw]), which it packs
 * (w may be freed after); n's fused activation is applied to Y. Its runs on up to
 * `threads` threads (kl_isa_threads) copy the pixels at a row's ends into eng's
 * workspace, which it reserves. */
kiln_status kl_gconv_create(kl_dnnl_engine *eng, int threads, const kl_gconv_shape *s,
                            const float *w, const kl_node *n, kl_gconv_plan **out, kl_err *e);
/* Y = act(conv(X) + bias) on c's threads; bias ([k]) may be NULL. */
kiln_status kl_gconv_run(const kl_gconv_plan *p, const kl_kernel_ctx *c, const float *x,
                         float *y, const float *bias);
/* Bytes of the packed weights. */
size_t kl_gconv_held_bytes(const kl_gconv_plan *p);
void kl_gconv_free(kl_gconv_plan *p);

#endif
