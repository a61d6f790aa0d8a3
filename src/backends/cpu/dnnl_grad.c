/* kiln.ConvGradX and kiln.ConvGradW on oneDNN (dnnl.h): the convolution's
 * backward-data and backward-weights primitives, in float32, one set per set of input
 * shapes (a small cache per node).
 *
 *   ConvGradX (dY [N, M, S'...], W [M, C/g, K...], XLike [N, C, S...]) -> dX [N, C, S...]
 *   ConvGradW (X [N, C, S...], dY [N, M, S'...], WLike [M, C/g, K...]) -> dW [M, C/g, K...]
 *
 * with the forward Conv's attributes (groups, strides, dilations, pads; auto_pad is
 * resolved to explicit pads by kl_window_out). oneDNN sees the weights with the group
 * split out ([g, M/g, C/g, K...] over kiln's bytes, as dnnl.c's forward convolutions).
 *
 * Layouts: the activations (dY, X, dX) are plain in the graph or, where the CPU plan
 * holds them so between oneDNN nodes and kiln's channels-last kernels (backend.c
 * choose_layouts: a training step's convolutions, BatchNorms and elementwise ops),
 * channels-last; the weights and dW are plain. For plain activations the primitives are
 * asked first for oneDNN's own choice on every operand (on AVX2 its blocked nChw8c /
 * OIhw8i8o forms, which its JIT kernels run), the operands reordered into regions of the
 * session's workspace around the primitive; then for plain operands (oneDNN's im2col +
 * GEMM kernels, "gemm:jit"); then channels-last activations. For channels-last ones,
 * channels-last first (choose_pd_as says why), then the same two. The first layouts with an
 * implementation that is not one of oneDNN's reference loops win. Where only those
 * exist, the entry runs kiln's reference kernel instead and the node reports a slow
 * path (kl_cpu_plan_slow_path, which the session's fast_only refuses); with a tensor
 * held channels-last, which the reference cannot read, the run fails saying so.
 *
 * The weights are graph inputs that change every step: they are reordered at every
 * run, never packed once. Running an existing entry allocates nothing.
 *
 * Precision bf16 (the engine's: `--bf16` training on an AMX CPU, or precision "bf16"):
 * the two inputs (ConvGradX: dY and W; ConvGradW: X and dY) are read as bf16, the
 * reorders into the primitive's layout rounding them (round to nearest even), the
 * output is float32, the sums float32 (oneDNN's bf16 kernels: VDPBF16PS, AMX tiles).
 * Where no layout has a fast bf16 implementation the node computes in float32.
 *
 * Determinism: backward-data gives every thread its own part of dX: the same bits at any
 * thread count. Backward-weights reduces over the batch across oneDNN's threads, whose
 * split depends on their count: the same bits run after run at one thread count (as
 * PyTorch's, which uses the same oneDNN kernels), other bits at another. One thread
 * made ResNet-18's step 1.5 times PyTorch's at 2 threads (ConvGradW 46% of it). */
#include "backends/cpu/dnnl_cache.h"
#include "backends/cpu/dnnl_engine.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"
#include "ir/infer_common.h"
#include "kl_config.h"

#if KL_HAVE_OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GR_SMALL_WORK 262144.0 /* multiply-adds below which one thread runs it (dnnl.c) */
#define GR_LAYOUT_WORK 16777216.0 /* ... below which cl_order keeps channels-last */

typedef enum gr_try { GR_TRY_ANY, GR_TRY_PLAIN, GR_TRY_CL, GR_TRIES } gr_try;

/* One operand of the primitive: mem is what it reads or writes; when kiln's plain
 * tensor has another layout, user is that tensor and a reorder stands between (mem is
 * then a region of the workspace at off). */
typedef struct gr_io {
  dnnl_memory_t mem, user, reorder_scratch;
  dnnl_primitive_t reorder;
  size_t off;
} gr_io;

/* The primitive's three operands: the two inputs in the node's input order and the
 * output. */
enum { GR_IN0, GR_IN1, GR_OUT, GR_IOS };

typedef struct gr_entry {
  bool fallback;
  dnnl_primitive_t prim;
  gr_io io[GR_IOS];
  dnnl_memory_t scratch; /* the primitive's and the reorders' shared scratchpad */
  size_t scratch_off;
  uint64_t ws_gen; /* the workspace generation the memories point into (0: none) */
  bool single;     /* small work: run on one thread */
  char impl[48];   /* oneDNN's name for the implementation (" bf16", " blocked" added) */
} gr_entry;

typedef struct gr_node {
  kl_dnnl_engine *eng; /* the session's, not owned */
  bool to_x;           /* ConvGradX, else ConvGradW */
  unsigned cl_in;      /* inputs held channels-last (kl_dnnl_grad_set_channels_last) */
  bool cl_out;         /* dX held channels-last */
  bool ran_reference;
  const char *ran_impl;
  kl_dnnl_cache cache; /* per set of the inputs' shapes, an entry of slots */
  gr_entry slots[KL_DNNL_CACHE_SLOTS];
} gr_node;

/* The geometry of the forward Conv, as oneDNN wants it. */
typedef struct gr_problem {
  int nd;
  dnnl_dims_t x, w, y; /* w with the group split out when group > 1 */
  int w_nd;
  dnnl_dims_t strides, dilates, pad_l, pad_r;
  bool bf16;  /* the two inputs in bf16, the output float32 */
  int threads; /* the node's (kl_isa_threads): cl_order's forms are for 1 or 2 */
} gr_problem;

static const kl_tensor *x_of(const gr_node *g, const kl_kernel_ctx *c) {
  return g->to_x ? c->out[0] : c->in[0];
}
static const kl_tensor *w_of(const gr_node *g, const kl_kernel_ctx *c) {
  return g->to_x ? c->in[1] : c->out[0];
}
static const kl_tensor *dy_of(const gr_node *g, const kl_kernel_ctx *c) {
  return g->to_x ? c->in[0] : c->in[1];
}

static kiln_status problem_of(const gr_node *g, const kl_kernel_ctx *c, gr_problem *p) {
  const kl_tensor *x = x_of(g, c), *w = w_of(g, c), *y = dy_of(g, c);
  int64_t group = kl_attr_int(c->node, "group", 1);
  kl_dnnl_conv_geom geo;
  kiln_status st = kl_dnnl_conv_geometry(c->node, x, w, &geo, c->e);
  if (st != KILN_OK) return st;
  memcpy(p->strides, geo.strides, sizeof p->strides);
  memcpy(p->dilates, geo.dilates, sizeof p->dilates);
  memcpy(p->pad_l, geo.pad_l, sizeof p->pad_l);
  memcpy(p->pad_r, geo.pad_r, sizeof p->pad_r);
  p->threads = kl_isa_threads(c);
  p->nd = x->rank;
  for (int i = 0; i < p->nd; i++) {
    p->x[i] = x->dims[i];
    p->y[i] = y->dims[i];
  }
  int o = group > 1;
  p->w_nd = w->rank + o;
  if (o) p->w[0] = group;
  p->w[o] = w->dims[0] / group;
  for (int i = 1; i < w->rank; i++) p->w[o + i] = w->dims[i];
  return KILN_OK;
}

static dnnl_status_t want_md(gr_try t, bool activation, bool bf16, dnnl_memory_desc_t *md,
                             int nd, const dnnl_dims_t dims) {
  dnnl_data_type_t type = bf16 ? dnnl_bf16 : dnnl_f32;
  if (t == GR_TRY_ANY || (t == GR_TRY_CL && !activation))
    return dnnl_memory_desc_init_by_tag(md, nd, dims, type, dnnl_format_tag_any);
  dnnl_status_t s =
      t == GR_TRY_CL ? kl_dnnl_channels_last_md(md, nd, dims) : kl_dnnl_plain_md(md, nd, dims);
  md->data_type = type;
  return s;
}

/* The backward primitive descriptor for try t, with the forward one as its hint. */
static dnnl_status_t pd_create(const gr_node *g, const gr_problem *p, gr_try t,
                               dnnl_primitive_attr_t attr, dnnl_engine_t engine,
                               dnnl_primitive_desc_t *pd) {
  /* in bf16: dY and the input the node reads (W for ConvGradX, X for ConvGradW) */
  dnnl_memory_desc_t x, w, y;
  memset(&w, 0, sizeof w);
  memset(&y, 0, sizeof y);
  dnnl_status_t s = want_md(t, true, p->bf16 && !g->to_x, &x, p->nd, p->x);
  if (s == dnnl_success) s = want_md(t, false, p->bf16 && g->to_x, &w, p->w_nd, p->w);
  if (s == dnnl_success) s = want_md(t, true, p->bf16, &y, p->nd, p->y);
  dnnl_convolution_desc_t fd, bd;
  dnnl_memory_desc_t fx = x, fw = w; /* the forward hint: bf16 source and weights */
  if (p->bf16) fx.data_type = fw.data_type = dnnl_bf16;
  if (s == dnnl_success)
    s = dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                                   dnnl_convolution_direct, &fx, &fw, NULL, &y,
                                                   p->strides, p->dilates, p->pad_l, p->pad_r);
  dnnl_primitive_desc_t hint = NULL;
  if (s == dnnl_success) s = dnnl_primitive_desc_create(&hint, &fd, NULL, engine, NULL);
  if (s == dnnl_success && g->to_x)
    s = dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &x, &w, &y,
                                                         p->strides, p->dilates, p->pad_l,
                                                         p->pad_r);
  else if (s == dnnl_success)
    s = dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &x, &w,
                                                            NULL, &y, p->strides, p->dilates,
                                                            p->pad_l, p->pad_r);
  if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, &bd, attr, engine, hint);
  if (hint) dnnl_primitive_desc_destroy(hint);
  return s;
}

static const char *impl_of(const_dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
    return "unknown";
  return impl;
}

/* Which layouts to try first when the activations are held channels-last, measured on
 * ResNet-18's training step at batch 8 (per node, the least of 3 alternated runs):
 * - The AVX-512 levels: channels-last. oneDNN 2.6's float32 blocked backward kernels run
 *   faster than its channels-last ones, but not by as much as the reorders into them
 *   cost (the 1-thread step 600-620 ms against 635-651 blocked on an AVX-512 Xeon); in
 *   bf16 on AMX oneDNN's own choice is channels-last.
 * - AVX2 and below: the blocked nChw8c kernels, reorders and all (on a Zen 3 both
 *   gradients' time went from 2.70 to 2.32 times the forward convolutions' in the same
 *   runs: ConvGradW 1.72 -> 1.47, ConvGradX 0.98 -> 0.85; the step 1.10 -> 0.97 of
 *   PyTorch's at 1 thread; on the AVX-512 Xeon capped to avx2 both gradients blocked
 *   had measured 930-943 ms against 916-925 channels-last, within its noise) ...
 * - ... but for a ConvGradW whose kernel is wider than 1 x 1 and whose output has few
 *   positions per image against its columns (OH OW <= C K / 2: ResNet's last two
 *   stages), plain operands first: oneDNN's im2col + GEMM (gemm:jit) there beat the
 *   blocked kernel by 13-25% at 1 thread (layer4's 3 x 3: 45-48 -> 35-36 ms; layer3's
 *   34-35 -> 29-30) and 0-13% at 2; where the output has many positions (layer1,
 *   the 7 x 7 stem) it lost by 10-50%, and for ConvGradX it lost everywhere.
 * - On more than 2 threads, channels-last: on the Xeon capped to avx2 at 4 threads the
 *   forms above made the step 1.3-1.4 times slower (505-511 -> 650-724 ms; at 1 thread
 *   1289-1701 against 1337-1511, no clear change). Only 1 and 2 threads were measured
 *   on an AMD AVX2 CPU (the Zen 3 has two cores).
 * - Under GR_LAYOUT_WORK multiply-adds, channels-last at every level: the reorders cost
 *   more than the blocked kernels save (the digits CNN's step at batch 64, 1 -> 8 -> 16
 *   channels on 8 x 8 images, took 1.06-1.12 ms with them against 0.75-0.80). */
static gr_try cl_order(const gr_node *g, const gr_problem *p) {
  double taps = 1, positions = 1, macs = (double)p->y[0] * (double)p->y[1];
  for (int i = 2; i < p->nd; i++) taps *= (double)p->w[i], positions *= (double)p->y[i];
  for (int i = p->w_nd - p->nd + 1; i < p->w_nd; i++) macs *= (double)p->w[i];
  macs *= positions;
  if (p->bf16 || kl_isa_level() > KL_ISA_AVX2 || macs < GR_LAYOUT_WORK || p->threads > 2)
    return GR_TRY_CL;
  if (g->to_x || p->w_nd != p->nd) return GR_TRY_ANY; /* grouped: w has a group dim */
  return taps > 1 && 2 * positions <= (double)p->w[1] * taps ? GR_TRY_PLAIN : GR_TRY_ANY;
}

/* The first try's fast descriptor in p's precision, else NULL in *pd and
 * dnnl_unimplemented (or the error that stopped the search). */
static dnnl_status_t choose_pd_as(const gr_node *g, const gr_problem *p,
                                  dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd) {
  static const gr_try plain_first[GR_TRIES] = {GR_TRY_ANY, GR_TRY_PLAIN, GR_TRY_CL},
                      cl_first[GR_TRIES] = {GR_TRY_CL, GR_TRY_ANY, GR_TRY_PLAIN},
                      blocked_first[GR_TRIES] = {GR_TRY_ANY, GR_TRY_CL, GR_TRY_PLAIN},
                      gemm_first[GR_TRIES] = {GR_TRY_PLAIN, GR_TRY_ANY, GR_TRY_CL};
  const gr_try *order = plain_first;
  if (g->cl_in & 3u) {
    gr_try first = cl_order(g, p);
    order = first == GR_TRY_CL ? cl_first : first == GR_TRY_ANY ? blocked_first : gemm_first;
  }
  for (int i = 0; i < GR_TRIES; i++) {
    gr_try t = order[i];
    dnnl_primitive_desc_t cand = NULL;
    dnnl_status_t s = pd_create(g, p, t, attr, g->eng->engine, &cand);
    if (s == dnnl_unimplemented || s == dnnl_invalid_arguments) continue;
    if (s != dnnl_success) return s;
    if (!kl_dnnl_impl_is_slow(impl_of(cand))) {
      *pd = cand;
      return dnnl_success;
    }
    dnnl_primitive_desc_destroy(cand);
  }
  return dnnl_unimplemented;
}

/* The fast descriptor for p: in bf16 first when the engine's precision is bf16, else (or
 * where bf16 has none) in float32, p->bf16 saying which; NULL in *pd and
 * dnnl_unimplemented when neither has one (or the error that stopped the search). */
static dnnl_status_t choose_pd(const gr_node *g, gr_problem *p, dnnl_primitive_attr_t attr,
                               dnnl_primitive_desc_t *pd) {
  *pd = NULL;
  for (int k = g->eng->bf16 ? 0 : 1; k < 2; k++) {
    p->bf16 = k == 0;
    dnnl_status_t s = choose_pd_as(g, p, attr, pd);
    if (s != dnnl_unimplemented) return s;
  }
  return dnnl_unimplemented;
}

/* Operand io over `want` (what the primitive asked for): kiln's plain tensor itself
 * when the layouts agree, else a workspace region with a reorder from (in) or to it. */
static dnnl_status_t io_make(gr_node *g, gr_io *io, const dnnl_memory_desc_t *want, int nd,
                             const dnnl_dims_t dims, bool in, bool cl, size_t *used,
                             size_t *scratch) {
  dnnl_engine_t e = g->eng->engine;
  dnnl_memory_desc_t user;
  dnnl_status_t s = cl ? kl_dnnl_channels_last_md(&user, nd, dims) : kl_dnnl_plain_md(&user, nd, dims);
  if (s != dnnl_success) return s;
  if (dnnl_memory_desc_equal(&user, want))
    return dnnl_memory_create(&io->mem, &user, e, DNNL_MEMORY_NONE);
  io->off = kl_dnnl_ws_take(used, dnnl_memory_desc_get_size(want));
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  s = dnnl_primitive_attr_create(&attr);
  if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (s == dnnl_success)
    s = dnnl_reorder_primitive_desc_create(&pd, in ? &user : want, e, in ? want : &user, e, attr);
  if (s == dnnl_success) s = dnnl_primitive_create(&io->reorder, pd);
  const dnnl_memory_desc_t *sp =
      s == dnnl_success ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0) : NULL;
  size_t sp_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
  if (sp_bytes > *scratch) *scratch = sp_bytes;
  if (s == dnnl_success && sp_bytes)
    s = dnnl_memory_create(&io->reorder_scratch, sp, e, DNNL_MEMORY_NONE);
  if (s == dnnl_success) s = dnnl_memory_create(&io->user, &user, e, DNNL_MEMORY_NONE);
  if (s == dnnl_success) s = dnnl_memory_create(&io->mem, want, e, DNNL_MEMORY_NONE);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return s;
}

static void io_free(gr_io *io) {
  if (io->reorder) dnnl_primitive_destroy(io->reorder);
  dnnl_memory_t m[3] = {io->mem, io->user, io->reorder_scratch};
  for (int i = 0; i < 3; i++)
    if (m[i]) dnnl_memory_destroy(m[i]);
  memset(io, 0, sizeof *io);
}

static void entry_free(gr_entry *en) {
  if (en->prim) dnnl_primitive_destroy(en->prim);
  if (en->scratch) dnnl_memory_destroy(en->scratch);
  for (int k = 0; k < GR_IOS; k++) io_free(&en->io[k]);
  memset(en, 0, sizeof *en);
}

/* The memories of a chosen descriptor: the operands in node order (GradX: dY, W, dX;
 * GradW: X, dY, dW) and the shared scratchpad, all sized into the workspace. */
static dnnl_status_t entry_memories(gr_node *g, gr_entry *en, const gr_problem *p,
                                    const_dnnl_primitive_desc_t pd) {
  const dnnl_memory_desc_t *x, *w, *y;
  if (g->to_x) {
    x = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_src_md, 0);
    w = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  } else {
    x = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    w = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0);
  }
  y = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0);
  const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (!x || !w || !y) return dnnl_runtime_error;
  size_t used = 0, scratch = sp ? dnnl_memory_desc_get_size(sp) : 0;
  /* the weights in plain form (kiln's [M, C/g, K...] bytes) */
  dnnl_status_t s;
  bool cl0 = g->cl_in & 1u, cl1 = g->cl_in >> 1 & 1u;
  if (g->to_x) {
    s = io_make(g, &en->io[GR_IN0], y, p->nd, p->y, true, cl0, &used, &scratch);
    if (s == dnnl_success)
      s = io_make(g, &en->io[GR_IN1], w, p->w_nd, p->w, true, false, &used, &scratch);
    if (s == dnnl_success)
      s = io_make(g, &en->io[GR_OUT], x, p->nd, p->x, false, g->cl_out, &used, &scratch);
  } else {
    s = io_make(g, &en->io[GR_IN0], x, p->nd, p->x, true, cl0, &used, &scratch);
    if (s == dnnl_success) s = io_make(g, &en->io[GR_IN1], y, p->nd, p->y, true, cl1, &used, &scratch);
    if (s == dnnl_success)
      s = io_make(g, &en->io[GR_OUT], w, p->w_nd, p->w, false, false, &used, &scratch);
  }
  en->scratch_off = kl_dnnl_ws_take(&used, scratch);
  if (s == dnnl_success && sp && dnnl_memory_desc_get_size(sp))
    s = dnnl_memory_create(&en->scratch, sp, g->eng->engine, DNNL_MEMORY_NONE);
  if (s == dnnl_success) s = kl_dnnl_ws_reserve(g->eng, used);
  return s;
}

static double work_of(const gr_node *g, const kl_kernel_ctx *c) {
  const kl_tensor *w = w_of(g, c);
  return (double)kl_tensor_numel(dy_of(g, c)) * (double)kl_tensor_numel(w) /
         (double)(w->dims[0] ? w->dims[0] : 1);
}

/* Runs f with OpenMP's thread count at 1 when `single`, restoring it after; the same
 * shapes give the same count when the primitive is made and when it runs. */
static kiln_status with_threads(bool single, gr_node *g, gr_entry *en, kl_kernel_ctx *c,
                                kiln_status (*f)(gr_node *, gr_entry *, kl_kernel_ctx *)) {
#if KL_HAVE_OPENMP
  if (single) {
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    kiln_status st = f(g, en, c);
    omp_set_num_threads(saved);
    return st;
  }
#else
  (void)single;
#endif
  return f(g, en, c);
}

static kiln_status build(gr_node *g, gr_entry *en, kl_kernel_ctx *c) {
  gr_problem p;
  kiln_status st = problem_of(g, c, &p);
  if (st != KILN_OK) return st;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s = dnnl_primitive_attr_create(&attr);
  if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (s == dnnl_success) s = choose_pd(g, &p, attr, &pd);
  if (s == dnnl_unimplemented) {
    en->fallback = true; /* no fast implementation: the reference runs, a slow path */
    s = dnnl_success;
  } else if (s == dnnl_success) {
    const dnnl_memory_desc_t *dy = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0);
    bool blocked = kl_dnnl_md_blocked(dy);
    snprintf(en->impl, sizeof en->impl, "%s%s%s", impl_of(pd), p.bf16 ? " bf16" : "",
             blocked ? " blocked" : "");
    s = dnnl_primitive_create(&en->prim, pd);
    if (s == dnnl_success) s = entry_memories(g, en, &p, pd);
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (s == dnnl_success) return KILN_OK;
  return kl_fail(c->e, s == dnnl_out_of_memory ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_INTERNAL,
                 "oneDNN failed to build the convolution's %s primitive (status %d)",
                 g->to_x ? "backward-data" : "backward-weights", (int)s);
}

/* The cache's callbacks (dnnl_cache.h): an entry for c's shapes, built with small work
 * on one thread and the rest on the session's (see the top of this file on what that
 * means for backward-weights' sums), and freed. */
static kiln_status cache_build(void *owner, void *entry, kl_kernel_ctx *c) {
  gr_node *g = owner;
  gr_entry *en = entry;
  en->single = work_of(g, c) < GR_SMALL_WORK;
  return with_threads(en->single, g, en, c, build);
}

static void cache_free(void *entry) { entry_free(entry); }

/* Points the staged operands and the scratchpads into the workspace, when it is new
 * to them. */
static dnnl_status_t ws_bind(gr_node *g, gr_entry *en) {
  if (en->ws_gen == g->eng->ws_gen) return dnnl_success;
  char *base = g->eng->ws;
  dnnl_status_t s = dnnl_success;
  for (int k = 0; s == dnnl_success && k < GR_IOS; k++) {
    gr_io *io = &en->io[k];
    if (io->reorder) s = dnnl_memory_set_data_handle(io->mem, base + io->off);
    if (s == dnnl_success && io->reorder_scratch)
      s = dnnl_memory_set_data_handle(io->reorder_scratch, base + en->scratch_off);
  }
  if (s == dnnl_success && en->scratch)
    s = dnnl_memory_set_data_handle(en->scratch, base + en->scratch_off);
  if (s == dnnl_success) en->ws_gen = g->eng->ws_gen;
  return s;
}

static dnnl_status_t io_reorder(const gr_io *io, dnnl_stream_t stream, bool in) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, in ? io->user : io->mem},
                             {DNNL_ARG_TO, in ? io->mem : io->user},
                             {DNNL_ARG_SCRATCHPAD, io->reorder_scratch}};
  return dnnl_primitive_execute(io->reorder, stream, io->reorder_scratch ? 3 : 2, args);
}

/* Sets the operand to kiln's tensor data; an input's reorder runs. */
static dnnl_status_t io_bind(const gr_io *io, const void *data, dnnl_stream_t stream, bool in) {
  dnnl_status_t s = dnnl_memory_set_data_handle(io->reorder ? io->user : io->mem, (void *)data);
  return s == dnnl_success && io->reorder && in ? io_reorder(io, stream, true) : s;
}

static kiln_status execute(gr_node *g, gr_entry *en, kl_kernel_ctx *c) {
  dnnl_stream_t stream = g->eng->stream;
  dnnl_status_t s = ws_bind(g, en);
  kl_dnnl_ws_enter(g->eng);
  if (s == dnnl_success) s = io_bind(&en->io[GR_IN0], c->in[0]->data, stream, true);
  if (s == dnnl_success) s = io_bind(&en->io[GR_IN1], c->in[1]->data, stream, true);
  if (s == dnnl_success) s = io_bind(&en->io[GR_OUT], c->out[0]->data, stream, false);
  dnnl_exec_arg_t args[4];
  int n = 0;
  if (g->to_x) {
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, en->io[GR_IN0].mem};
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, en->io[GR_IN1].mem};
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, en->io[GR_OUT].mem};
  } else {
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, en->io[GR_IN0].mem};
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, en->io[GR_IN1].mem};
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, en->io[GR_OUT].mem};
  }
  if (en->scratch) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, en->scratch};
  if (s == dnnl_success) s = dnnl_primitive_execute(en->prim, stream, n, args);
  if (s == dnnl_success && en->io[GR_OUT].reorder) s = io_reorder(&en->io[GR_OUT], stream, false);
  if (s == dnnl_success) s = dnnl_stream_wait(stream);
  return s == dnnl_success ? KILN_OK
                           : kl_fail(c->e, KILN_ERR_INTERNAL, "oneDNN failed to run the "
                                     "convolution's gradient (status %d)", (int)s);
}

static int gr_run(kl_kernel_ctx *c) {
  gr_node *g = *c->state;
  if (!g) return kl_fail(c->e, KILN_ERR_INTERNAL, "oneDNN convolution gradient without its state");
  g->ran_reference = false; /* empty operands: nothing to compute, no slow path */
  g->ran_impl = NULL;
  if (kl_tensor_numel(c->out[0]) == 0) return KILN_OK;
  for (int k = 0; k < 2; k++) /* oneDNN refuses empty operands; the gradient is zeros */
    if (kl_tensor_numel(c->in[k]) == 0) return kl_op_get(c->node->op)->ref(c);
  void *found;
  g->ran_reference = true;
  kiln_status st = kl_dnnl_cache_get(&g->cache, c, &found);
  if (st != KILN_OK) return st;
  gr_entry *en = found;
  g->ran_reference = en->fallback;
  if (en->fallback && ((g->cl_in & 3u) || g->cl_out))
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "oneDNN cannot run this convolution gradient "
                   "and its tensors are held channels-last, which the reference kernel "
                   "cannot read");
  if (en->fallback) {
    st = kl_isa_ref_allowed(c, "oneDNN has no implementation for these shapes");
    return st != KILN_OK ? st : kl_op_get(c->node->op)->ref(c);
  }
  g->ran_impl = en->impl;
  return with_threads(en->single, g, en, c, execute);
}

static void gr_release(void *state) {
  gr_node *g = state;
  if (!g) return;
  kl_dnnl_cache_clear(&g->cache);
  free(g);
}

bool kl_dnnl_grad_supports(const kl_graph *g, const kl_node *n) {
  if ((n->op != KL_OP_KilnConvGradX && n->op != KL_OP_KilnConvGradW) || n->n_in != 3 ||
      n->n_out != 1)
    return false;
  for (int k = 0; k < 2; k++)
    if (n->in[k] < 0 || g->values[n->in[k]].type.dtype != KL_F32) return false;
  int rank = g->values[n->in[0]].type.rank;
  return g->values[n->out[0]].type.dtype == KL_F32 && (rank < 0 || (rank >= 3 && rank <= 5));
}

unsigned kl_dnnl_grad_channels_last_slots(const kl_graph *g, const kl_node *n) {
  if (!kl_dnnl_grad_supports(g, n)) return 0;
  int rank = g->values[n->in[0]].type.rank;
  if (rank < 3 || rank > 5) return 0;
  return n->op == KL_OP_KilnConvGradX ? 1u | 1u << 2 : 1u | 1u << 1;
}

void kl_dnnl_grad_set_channels_last(void *state, unsigned inputs, bool output) {
  gr_node *g = state;
  g->cl_in = inputs;
  g->cl_out = output && g->to_x;
}

bool kl_dnnl_grad_ran_reference(const void *state) {
  const gr_node *g = state;
  return g && g->ran_reference;
}

const char *kl_dnnl_grad_ran_impl(const void *state) {
  const gr_node *g = state;
  return g ? g->ran_impl : NULL;
}

kiln_status kl_dnnl_grad_create(kl_dnnl_engine *eng, const kl_node *n, kl_cpu_kernel *kernel,
                                void **state, kl_err *e) {
  gr_node *g = calloc(1, sizeof *g);
  *state = g;
  if (!g) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a oneDNN convolution gradient");
  g->eng = eng;
  g->to_x = n->op == KL_OP_KilnConvGradX;
  /* keyed by the shapes of the three inputs */
  kl_dnnl_cache_init(&g->cache, g->slots, sizeof g->slots[0], 3, g, cache_build, cache_free);
  *kernel = (kl_cpu_kernel){g->to_x ? "dnnl_conv_grad_x" : "dnnl_conv_grad_w", gr_run, gr_release};
  return KILN_OK;
}
