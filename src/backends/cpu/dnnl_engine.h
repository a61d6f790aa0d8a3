/* The oneDNN engine and stream a session's oneDNN kernels share (dnnl.h); internal to
 * dnnl.c, dnnl_attention.c, dnnl_grad.c and dnnl_qconv.c, the only files that include oneDNN's header. */
#ifndef KL_CPU_DNNL_ENGINE_H
#define KL_CPU_DNNL_ENGINE_H

#include "backends/cpu/dnnl.h"

#include <dnnl.h>

struct kl_dnnl_engine {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  /* The session's workspace: what a node needs only while it runs (oneDNN's
   * scratchpads, the copies of its tensors in the layout a primitive asked for, the
   * attention scores). The session runs its nodes one at a time, so one buffer as
   * large as the largest node's need serves them all. It grows when a new entry needs
   * more (its content is not kept); ws_gen counts the growths, so that an entry points
   * its memories at the new buffer before its next run. */
  void *ws;
  size_t ws_bytes;
  uint64_t ws_gen;
  bool bf16;      /* precision bf16 (kl_dnnl_engine_set_bf16) */
  bool ws_poison; /* tests: fill the workspace with NaNs before every node (kl_dnnl_ws_poison) */
};

/* Grows eng's workspace to at least `bytes` (dnnl_out_of_memory if it cannot). */
dnnl_status_t kl_dnnl_ws_reserve(kl_dnnl_engine *eng, size_t bytes);
/* Before a node uses the workspace: fills it with NaNs when ws_poison is set. */
void kl_dnnl_ws_enter(kl_dnnl_engine *eng);

/* Whether md is one of oneDNN's blocked layouts (nChw8c, nChw16c...): what `kiln bench
 * --profile` marks " blocked" on a convolution or its gradients. */
static inline bool kl_dnnl_md_blocked(const dnnl_memory_desc_t *md) {
  return md && md->format_kind == dnnl_blocked && md->format_desc.blocking.inner_nblks > 0;
}

/* Workspace layout of one entry: consecutive regions, each aligned for oneDNN. */
#define KL_DNNL_WS_ALIGN 64
static inline size_t kl_dnnl_ws_take(size_t *used, size_t bytes) {
  size_t at = *used;
  *used += (bytes + KL_DNNL_WS_ALIGN - 1) / KL_DNNL_WS_ALIGN * KL_DNNL_WS_ALIGN;
  return at;
}

/* A convolution's spatial strides, dilations (oneDNN's: the gap, ONNX's minus 1) and
 * begin/end pads, from node n's attributes for input x and weights w (kl_window): one
 * reading for the forward, int8 and gradient convolutions. */
typedef struct kl_dnnl_conv_geom {
  dnnl_dims_t strides, dilates, pad_l, pad_r;
} kl_dnnl_conv_geom;
kiln_status kl_dnnl_conv_geometry(const kl_node *n, const kl_tensor *x, const kl_tensor *w,
                                  kl_dnnl_conv_geom *g, kl_err *e);

/* float32 memory descriptors of [N, C, S...]: plain (row-major), and channels-last
 * ([N, S..., C] in memory). dnnl.c defines them; the gradient kernels use them too. */
dnnl_status_t kl_dnnl_plain_md(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims);
dnnl_status_t kl_dnnl_channels_last_md(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims);

#endif
