/* The GPU "nn" family (kernels/nn.cl): Conv, Gemm and MatMul with their fused forms
 * (kiln.FusedConv, FusedGemm, FusedMatMul: Y = act(base + Bias + Sum)), MaxPool (without
 * Indices), AveragePool, GlobalAveragePool, GlobalMaxPool and BatchNormalization in
 * inference form. Windows take their geometry from the reference kernels' helper
 * (kl_ref_window_init: auto_pad, pads, ceil_mode resolved in one place), so both agree
 * by construction; 1-D to 3-D windows (all that inference admits). Channels-last nodes
 * (the O3 layout pass's) stay on the CPU. */
#include "backends/cpu/ref/ref.h"
#include "backends/gpu/kernels.h"
#include "ir/fused.h"
#include "ir/layout.h"

#include <stdlib.h>
#include <string.h>

/* Matches kl_nn_window of kernels/nn.cl: the reference's window geometry (in, out,
 * kernel, stride, dilation, pad_begin, pad_end: 3 longs each) plus the channels. */
typedef struct kl_nn_window {
  kl_ref_window w;
  int64_t channels, cout, cin_per_group, cout_per_group;
} kl_nn_window;
_Static_assert(sizeof(kl_nn_window) == 25 * sizeof(int64_t), "kl_nn_window: as in nn.cl");

/* Edge of the matrix product's square tiles and of the global pools' work-groups
 * (KL_NN_TILE and KL_NN_REDUCE of nn.cl). */
enum { TILE = 16, REDUCE = 64 };

static const kl_tensor *input(const kl_kernel_ctx *kc, int k) {
  return kc->n_in > k ? kc->in[k] : NULL;
}

static kiln_status window_of(const kl_kernel_ctx *kc, const int64_t *kernel, kl_nn_window *w) {
  memset(w, 0, sizeof *w);
  w->channels = kc->in[0]->dims[1];
  w->cout = kc->out[0]->dims[1];
  return kl_ref_window_init(kc, kernel, &w->w);
}

/* How operand k (t; NULL when absent) of bc reaches element i of Y in tc.cl's
 * epilogues: 0 absent, 1 at Y's own index (t has Y's shape), 2 at Y's column (t varies
 * along Y's last dim only, as a bias), 3 by the general broadcast. */
static int addend_mode(const kl_cl_bcast *bc, int k, const kl_tensor *t) {
  if (!t) return 0;
  bool same = true, column = true;
  int64_t stride = 1;
  for (int d = bc->rank - 1; d >= 0; d--) {
    if (bc->dims[d] != 1) {
      same &= bc->s[k][d] == stride;
      column &= d == bc->rank - 1 ? bc->s[k][d] == 1 : bc->s[k][d] == 0;
    }
    stride *= bc->dims[d];
  }
  return same ? 1 : column ? 2 : 3;
}

/* The addends of a product's or convolution's epilogue broadcast to y: operand 0 e
 * (Gemm's C, FusedMatMul's Bias), operand 1 s (a fused op's Sum); absent ones get y's
 * strides, which nothing reads. */
static void addends_bcast(kl_cl_bcast *bc, const kl_tensor *y, const kl_tensor *e,
                          const kl_tensor *s) {
  const kl_tensor *ops[2] = {e ? e : y, s ? s : y};
  kl_gpu_bcast(bc, y, ops, 2);
}

/* Convolutions with at least this many output channels per group and products per
 * output run as an implicit matrix product (kl_nn_conv_gemm); the rest (depthwise, tiny
 * channel counts) one work-item per output (kl_nn_conv). */
#define CONV_GEMM_MIN 8
/* At precision TF32, convolutions and products with at least this many rows (output
 * channels per group) and products per output run on the tensor cores (tc.cl). */
#define TC_MIN 16

/* Whether kl_tc_conv's gather may work in 32 bits: window starts (o * stride - pad) and
 * tap offsets (k * dilation) well inside an int, so that their sums are too. */
static bool window_fits_int(const kl_ref_window *w) {
  const int64_t lim = INT32_MAX / 4;
  for (int d = 0; d < 3; d++)
    if (w->pad_begin[d] > lim || w->pad_begin[d] < -lim || w->stride[d] < 1 ||
        w->dilation[d] < 1 || (w->out[d] - 1) > lim / w->stride[d] ||
        (w->kernel[d] - 1) > lim / w->dilation[d])
      return false;
  return true;
}

/* A convolution's Sum in tc.cl's epilogues: by Y's index (mode 1) or by the general
 * broadcast, never mode 2 (along Y's last dim), which is not the product's column there. */
static int conv_sum_mode(const kl_cl_bcast *bc, const kl_tensor *sum) {
  int mode = addend_mode(bc, 1, sum);
  return mode == 2 ? 3 : mode;
}

/* The rows of a tc.cl tile (BM) for m rows, cols columns and `batches` products: 64 for
 * at most 64 rows or when tiles of 128 x 128 would not give every compute unit two, else
 * 128. */
static int64_t tc_rows(const kl_cl *c, int64_t m, int64_t cols, int64_t batches) {
  return m <= 64 || (m + 127) / 128 * ((cols + 127) / 128) * batches <
                        2 * (int64_t)kl_cl_compute_units(c)
             ? 64
             : 128;
}

/* Whether to run tc.cl's wgmma kernel `name`: the program has it (PTX for sm_90a, on an
 * sm_90 device) and KILN_GPU_WGMMA allows it: unset, products only; "all", convolutions
 * too (kl_wg_cvt: measured slower than kl_tc_cvt on ResNet-50, docs/gpu.md); "0", none
 * (the mma.sync kernels: for comparisons). */
static bool wg_kernel(const kl_cl *c, const char *name, bool conv) {
  return kl_cl_wgmma(c) >= (conv ? KL_CL_WG_ALL : KL_CL_WG_PRODUCTS) &&
         kl_cl_has_kernel(c, name);
}

/* A 1 x 1 convolution of stride 1 without pads (one group) as a batch of products on
 * tc.cl's kl_tc_mm: per image, Y [Cout, P] = W [Cout, Cin] X [Cin, P], the bias added per
 * row (operand mode 4). KILN_ERR_UNSUPPORTED (nothing launched, no message) where the
 * operands are not 16-byte pieces: Cin, P and the offsets multiples of 4 floats. */
static kiln_status conv1x1_mm(kl_cl *c, kl_kernel_ctx *kc, const kl_nn_window *g,
                              const kl_cl_bcast *bc, const kl_gpu_act *act,
                              const kl_tensor *sum) {
  const kl_tensor *x = kc->in[0], *w = kc->in[1], *b = input(kc, 2);
  kl_tensor *y = kc->out[0];
  int64_t p = g->w.out[0] * g->w.out[1] * g->w.out[2], cin = g->cin_per_group;
  int64_t cout = g->cout_per_group, images = y->dims[0];
  for (int d = 0; d < 3; d++)
    if (g->w.stride[d] != 1 || g->w.pad_begin[d] || g->w.pad_end[d] || g->w.in[d] != g->w.out[d])
      return KILN_ERR_UNSUPPORTED;
  if (cin % 4 || p % 4 || kl_gpu_elem_off(x) % 4 || kl_gpu_elem_off(w) % 4) return KILN_ERR_UNSUPPORTED;
  int64_t bm = tc_rows(c, cout, p, images);
  /* on wgmma where the program has it: kl_wg_cvt (conv_taps), whose B is K-major as
   * kl_tc_mm's here is not; where Cout >= Cin (measured on the H200: the reductions of
   * ResNet-50's bottlenecks, 256 -> 64 and 1024 -> 256, ran 10-40% longer so) */
  if (cin % 16 == 0 && cout >= cin &&
      wg_kernel(c, bm == 64 ? "kl_wg_cvt64" : "kl_wg_cvt128", true))
    return KILN_ERR_UNSUPPORTED;
  kl_cl_bcast bb;
  memset(&bb, 0, sizeof bb);
  bb.rank = 1;
  bb.dims[0] = images;
  bb.s[1][0] = cin * p; /* A (W) is every image's */
  size_t global = (size_t)((cout + bm - 1) / bm) * (size_t)((p + 127) / 128) * (size_t)images *
                  128,
         local = 128;
  int smode = conv_sum_mode(bc, sum);
  return KL_CL_LAUNCH(c, bm == 64 ? "kl_tc_mm64" : "kl_tc_mm128", 1, &global, &local, kc->e,
                      CLA_T(w), CLA_T(x), CLA_T(b), CLA_T(sum), CLA_T(y), CLA_L(cout), CLA_L(p),
                      CLA_L(cin), CLA_L(cin), CLA_L(1), CLA_L(p), CLA_L(1), CLA_S(bb),
                      CLA_S(*bc), CLA_F(1.0f), CLA_F(1.0f), CLA_I(act->code), CLA_F(act->a),
                      CLA_F(act->b), CLA_I(b ? 4 : 0), CLA_I(smode));
}

/* Device memory of the node (kl_gpu_node_mem) holding a form of input 1 (W, or B) that a
 * kernel made from it, *wt: input 1's type and dims in that buffer of `bytes`. True in
 * *fresh where the buffer holds it already: input 1 is a constant of the graph (its
 * device copy, uploaded once, stays where it is) and the buffer was made from that copy;
 * else the caller makes it and then calls node_copy_made. */
static kiln_status node_copy(kl_cl *c, kl_kernel_ctx *kc, size_t bytes, kl_tensor *wt,
                             bool *fresh) {
  kl_gpu_node_mem *nm = kc->state ? *kc->state : NULL;
  const kl_tensor *w = kc->in[1];
  const kl_dev_buf *src = w->data;
  if (!nm || !src) return KILN_ERR_UNSUPPORTED;
  *wt = *w;
  wt->data = &nm->buf;
  *fresh = nm->buf.mem && nm->buf.size >= bytes && nm->const_inputs & 2u && nm->src == src->mem &&
           nm->src_off == src->off && nm->src_serial == src->serial;
  if (*fresh) return KILN_OK;
  nm->src = NULL;
  if (nm->buf.size < bytes) {
    kl_cl_free(c, &nm->buf);
    return kl_cl_alloc(c, bytes, &nm->buf, kc->e);
  }
  return KILN_OK;
}

static void node_copy_made(kl_kernel_ctx *kc) {
  kl_gpu_node_mem *nm = *kc->state;
  const kl_dev_buf *src = kc->in[1]->data;
  nm->src = src->mem, nm->src_off = src->off, nm->src_serial = src->serial;
}

/* W [Cout, Cin, taps] tap-major ([Cout, taps, Cin]) in the node's device memory
 * (node_copy), as *wt: `kernel` kl_nn_w_taps, or kl_wg_w_taps (rounded to TF32 too). */
static kiln_status w_taps(kl_cl *c, kl_kernel_ctx *kc, const char *kernel, int64_t cin,
                          int64_t taps, kl_tensor *wt) {
  const kl_tensor *w = kc->in[1];
  bool fresh;
  kiln_status st = node_copy(c, kc, kl_tensor_nbytes(w), wt, &fresh);
  if (st != KILN_OK || fresh) return st;
  int64_t n = kl_tensor_numel(w);
  st = KL_GPU_LAUNCH1(c, kernel, n, kc->e, CLA_T(w), CLA_T(wt), CLA_L(n), CLA_L(cin),
                      CLA_L(taps));
  if (st == KILN_OK) node_copy_made(kc);
  return st;
}

/* A convolution on tc.cl's kl_tc_cvt (TF32; Cin per group a multiple of 16, W tap-major:
 * w_taps), KILN_ERR_UNSUPPORTED (nothing launched, no message) where it does not apply:
 * sizes past its 32-bit arithmetic, a kernel without node memory. */
static kiln_status conv_taps(kl_cl *c, kl_kernel_ctx *kc, const kl_nn_window *g, int64_t groups,
                             const kl_cl_bcast *bc, const kl_gpu_act *act, const kl_tensor *sum) {
  const kl_tensor *x = kc->in[0], *w = kc->in[1], *b = input(kc, 2);
  kl_tensor *y = kc->out[0];
  int64_t taps = g->w.kernel[0] * g->w.kernel[1] * g->w.kernel[2], cin = g->cin_per_group;
  int64_t xsize = g->w.in[0] * g->w.in[1] * g->w.in[2], batch = y->dims[0];
  int64_t cols = batch * g->w.out[0] * g->w.out[1] * g->w.out[2];
  if (cin % 16 || cin * taps > INT32_MAX || cin * xsize > INT32_MAX || !window_fits_int(&g->w))
    return KILN_ERR_UNSUPPORTED;
  int64_t bm = tc_rows(c, g->cout_per_group, cols, groups);
  /* on wgmma where the program has it (kl_wg_cvt: W' rounded to TF32, one tap too) */
  const char *name = bm == 64 ? "kl_wg_cvt64" : "kl_wg_cvt128";
  bool wg = wg_kernel(c, name, true);
  if (!wg) name = bm == 64 ? "kl_tc_cvt64" : "kl_tc_cvt128";
  kl_tensor wt = *w;
  if (taps > 1 || wg) {
    kiln_status st = w_taps(c, kc, wg ? "kl_wg_w_taps" : "kl_nn_w_taps", cin, taps, &wt);
    if (st != KILN_OK) return st;
  } else if (kl_gpu_elem_off(w) % 4) {
    return KILN_ERR_UNSUPPORTED;
  }
  size_t global = (size_t)((cols + 127) / 128 * ((g->cout_per_group + bm - 1) / bm) * groups) *
                  128,
         local = 128;
  return KL_CL_LAUNCH(c, name, 1, &global, &local, kc->e,
                      CLA_T(x), CLA_T(&wt), CLA_T(b), CLA_T(sum), CLA_T(y), CLA_S(*g),
                      CLA_L(groups), CLA_L(batch), CLA_S(*bc), CLA_I(act->code), CLA_F(act->a),
                      CLA_F(act->b), CLA_I(conv_sum_mode(bc, sum)));
}

/* Conv and FusedConv (X, W, B?, Sum?). */
static kiln_status run_conv(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *x = kc->in[0], *w = kc->in[1], *b = input(kc, 2);
  const kl_tensor *sum = input(kc, KL_FUSED_SUM);
  kl_tensor *y = kc->out[0];
  kl_nn_window g;
  kiln_status st = window_of(kc, w->dims + 2, &g);
  if (st != KILN_OK) return st;
  g.cin_per_group = w->dims[1];
  g.cout_per_group = w->dims[0] / kl_attr_int(kc->node, "group", 1);
  kl_gpu_act act;
  kl_gpu_fused_act(kc->node, &act);
  kl_cl_bcast bc;
  addends_bcast(&bc, y, NULL, sum);
  int64_t n = kl_tensor_numel(y);
  int64_t groups = kl_attr_int(kc->node, "group", 1);
  int64_t taps = w->dims[2] * (w->rank > 3 ? w->dims[3] : 1) * (w->rank > 4 ? w->dims[4] : 1);
  int64_t xsize = g.w.in[0] * g.w.in[1] * g.w.in[2], batch = y->dims[0];
  if (kl_cl_tf32(c) && groups == 1 && taps == 1 && g.cout_per_group >= TC_MIN &&
      g.cin_per_group >= TC_MIN) {
    kiln_status done = conv1x1_mm(c, kc, &g, &bc, &act, sum);
    if (done != KILN_ERR_UNSUPPORTED) return done;
  }
  if (kl_cl_tf32(c) && g.cout_per_group >= TC_MIN && g.cin_per_group % 16 == 0) {
    kiln_status done = conv_taps(c, kc, &g, groups, &bc, &act, sum);
    if (done != KILN_ERR_UNSUPPORTED) return done;
  }
  if (kl_cl_tf32(c) && g.cout_per_group >= TC_MIN && g.cin_per_group * taps >= TC_MIN &&
      g.cin_per_group * xsize <= INT32_MAX && window_fits_int(&g.w)) {
    /* TF32 on the tensor cores (tc.cl): tiles of BM output channels x 128 columns of
     * (batch, position), BM 64 for at most 64 channels a group or when tiles of 128
     * would not give every compute unit two, else 128 */
    int64_t cols = batch * (n / (batch * y->dims[1]));
    int64_t bm = tc_rows(c, g.cout_per_group, cols, groups);
    size_t global = (size_t)((cols + 127) / 128 * ((g.cout_per_group + bm - 1) / bm) * groups) *
                    256,
           local = 256;
    int vec = (g.cin_per_group * taps) % 4 == 0 && kl_gpu_elem_off(w) % 4 == 0; /* W in 4-vectors */
    int smode = conv_sum_mode(&bc, sum);
    return KL_CL_LAUNCH(c, bm == 64 ? "kl_tc_conv64" : "kl_tc_conv128", 1, &global, &local,
                        kc->e, CLA_T(x), CLA_T(w), CLA_T(b), CLA_T(sum), CLA_T(y), CLA_S(g),
                        CLA_L(groups), CLA_L(batch), CLA_S(bc), CLA_I(act.code), CLA_F(act.a),
                        CLA_F(act.b), CLA_I(vec), CLA_I(smode));
  }
  if (g.cout_per_group >= CONV_GEMM_MIN && g.cin_per_group * taps >= CONV_GEMM_MIN &&
      kl_cl_max_group(c) >= 256 && g.cin_per_group * xsize <= INT32_MAX &&
      window_fits_int(&g.w)) {
    /* the implicit product: 64 x 64 tiles of (output channels x positions) per batch and
     * group (kl_nn_conv_gemm) */
    int64_t positions = n / (y->dims[0] * y->dims[1]);
    int64_t tiles = (positions + 63) / 64 * ((g.cout_per_group + 63) / 64) * y->dims[0] *
                    groups;
    size_t global = (size_t)tiles * 256, local = 256;
    return KL_CL_LAUNCH(c, "kl_nn_conv_gemm", 1, &global, &local, kc->e, CLA_T(x), CLA_T(w),
                        CLA_T(b), CLA_T(sum), CLA_T(y), CLA_S(g), CLA_L(groups), CLA_S(bc),
                        CLA_I(act.code), CLA_F(act.a), CLA_F(act.b));
  }
  return KL_GPU_LAUNCH1(c, "kl_nn_conv", n, kc->e, CLA_T(x), CLA_T(w), CLA_T(b), CLA_T(sum),
                        CLA_T(y), CLA_L(n), CLA_S(g), CLA_S(bc), CLA_I(act.code),
                        CLA_F(act.a), CLA_F(act.b));
}

/* A (batched) matrix product as kl_nn_matmul takes it. */
typedef struct product {
  int64_t m, n, k;
  int64_t sam, sak, sbk, sbn; /* A(m, k), B(k, n) element strides */
  kl_cl_bcast batch;          /* Y's batch dims; operands 0, 1: A's and B's strides */
  const kl_tensor *addend;    /* Gemm's C or FusedMatMul's Bias, NULL when absent */
  float alpha, beta;
} product;

/* Whether operand k's batch strides are multiples of 4 elements. */
static bool batch_vec(const product *p, int k) {
  for (int d = 0; d < p->batch.rank; d++)
    if (p->batch.s[k][d] % 4) return false;
  return true;
}

/* Which of tc.cl's kl_tc_mm kernels takes product p (at tf32, whose kernels, these
 * among them, the program has: gpu/backend.c): 0 for B as [k][n], 1 for B as [n][k]
 * (B^T's rows contiguous in k); -1 where none does (an operand is not read in 16-byte
 * pieces: A's rows contiguous in k, offsets, row and batch
 * strides, K, and N for [k][n], multiples of 4 floats). */
static int mm_layout(const kl_kernel_ctx *kc, const product *p) {
  if (!(p->sak == 1 && p->sam % 4 == 0 && p->k % 4 == 0 && kl_gpu_elem_off(kc->in[0]) % 4 == 0 &&
        batch_vec(p, 0)))
    return -1;
  if (kl_gpu_elem_off(kc->in[1]) % 4 || !batch_vec(p, 1)) return -1;
  if (p->sbn == 1 && p->sbk % 4 == 0 && p->n % 4 == 0) return 0;
  if (p->sbk == 1 && p->sbn % 4 == 0) return 1;
  return -1;
}

/* B of product p as [n][k] rounded to TF32 (kl_wg_b_rows) in the node's memory
 * (node_copy: once where B is a constant of the graph), for kl_wg_mm, whose operands are
 * K-major and read rounded. KILN_ERR_UNSUPPORTED (nothing launched, no message) where B
 * has batches of its own, or is an input and the product too small to pay for the copy
 * at every run (fewer than 4096 rows: on the H200 a 1024^3 product took 0.038 ms so
 * against kl_tc_mm's 0.029, an 8192^3 one 6.2 against 6.6). */
static kiln_status wg_b_rows(kl_cl *c, kl_kernel_ctx *kc, const product *p, kl_tensor *bt) {
  for (int d = 0; d < p->batch.rank; d++)
    if (p->batch.s[1][d]) return KILN_ERR_UNSUPPORTED;
  kl_gpu_node_mem *nm = kc->state ? *kc->state : NULL;
  if (!nm || (!(nm->const_inputs & 2u) && p->m < 4096)) return KILN_ERR_UNSUPPORTED;
  bool fresh;
  kiln_status st = node_copy(c, kc, (size_t)(p->k * p->n) * sizeof(float), bt, &fresh);
  if (st != KILN_OK || fresh) return st;
  bt->rank = 2, bt->dims[0] = p->n, bt->dims[1] = p->k;
  size_t local = 256, global = (size_t)((p->k + 31) / 32 * ((p->n + 31) / 32)) * local;
  st = KL_CL_LAUNCH(c, "kl_wg_b_rows", 1, &global, &local, kc->e, CLA_T(kc->in[1]), CLA_T(bt),
                    CLA_L(p->k), CLA_L(p->n), CLA_L(p->sbk), CLA_L(p->sbn));
  if (st == KILN_OK) node_copy_made(kc);
  return st;
}

/* A of product p (input 0) rounded to TF32 into a block of the session's allocator
 * (*buf, which the caller frees once the product is queued), as *copy, for kl_wg_mm*r: one
 * pass over A (read and written once) instead of every tile rounding what it copied of A
 * in local memory, which costs a read and a write of local memory per step while the
 * tensor cores wait at the barrier, at every one of the N / 128 column tiles that copy A.
 * So only where N is at least 2048: on the H100 (one call, docs/gpu.md) 8192^3 took 6.18
 * ms with the tiles rounding and 5.00 with the pass, 4096 x 768 x 3072 0.157 and 0.146,
 * but N = 768 lost (4096 x 3072 x 768: 0.149 and 0.180; 4096 x 768 x 768: 0.049 and
 * 0.058). KILN_ERR_UNSUPPORTED (nothing launched, no message) where it does not apply, A
 * is not in whole 4-vectors, or KILN_GPU_WGMMA_ROUND is "tile" (for comparisons). */
static kiln_status wg_a_round(kl_cl *c, kl_kernel_ctx *kc, const product *p, kl_dev_buf *buf,
                              kl_tensor *copy) {
  const kl_tensor *a = kc->in[0];
  int64_t n = kl_tensor_numel(a);
  if (p->n < 2048 || n % 4 || kl_gpu_elem_off(a) % 4 || kl_cl_wg_round_in_tiles(c))
    return KILN_ERR_UNSUPPORTED;
  kiln_status st = kl_cl_alloc(c, (size_t)n * sizeof(float), buf, kc->e);
  if (st != KILN_OK) return st;
  *copy = *a;
  copy->data = buf;
  st = KL_GPU_LAUNCH1(c, "kl_wg_round", n / 4, kc->e, CLA_T(a), CLA_T(copy), CLA_L(n / 4));
  if (st != KILN_OK) kl_cl_free(c, buf);
  return st;
}

static kiln_status run_product(kl_cl *c, kl_kernel_ctx *kc, const product *p) {
  if (kl_cl_max_group(c) < TILE * TILE)
    return kl_fail(kc->e, KILN_ERR_UNSUPPORTED, "the matrix product needs work-groups of "
                   "%d work-items; the device allows %zu", TILE * TILE, kl_cl_max_group(c));
  const kl_tensor *sum = input(kc, KL_FUSED_SUM);
  kl_tensor *y = kc->out[0];
  kl_gpu_act act;
  kl_gpu_fused_act(kc->node, &act);
  kl_cl_bcast bc;
  addends_bcast(&bc, y, p->addend, sum);
  int64_t batches = 1;
  for (int d = 0; d < p->batch.rank; d++) batches *= p->batch.dims[d];
  int bt = kl_cl_tf32(c) && p->m >= TC_MIN && p->n >= TC_MIN && p->k >= TC_MIN
               ? mm_layout(kc, p)
               : -1;
  int64_t bm = tc_rows(c, p->m, p->n, batches);
  kl_tensor bt_copy; /* B as [n][k] rounded for the wgmma kernels (wg_b_rows) */
  const kl_tensor *b = kc->in[1];
  int64_t sbk = p->sbk, sbn = p->sbn;
  if (bt >= 0 && wg_kernel(c, bm == 64 ? "kl_wg_mm64t" : "kl_wg_mm128t", false)) {
    kiln_status st = wg_b_rows(c, kc, p, &bt_copy);
    if (st == KILN_OK) b = &bt_copy, bt = 2, sbk = 1, sbn = p->k;
    else if (st != KILN_ERR_UNSUPPORTED) return st;
  }
  if (bt >= 0) {
    /* tc.cl's kl_tc_mm: BM x 128 tiles (BM as below), 128 work-items each; kl_wg_mm128t
     * (bt 2) on wgmma, or kl_wg_mm128r (bt 3) on A rounded beforehand (wg_a_round) */
    kl_dev_buf a_buf = {0};
    kl_tensor a_copy;
    const kl_tensor *a = kc->in[0];
    if (bt == 2) {
      kiln_status st = wg_a_round(c, kc, p, &a_buf, &a_copy);
      if (st == KILN_OK) a = &a_copy, bt = 3;
      else if (st != KILN_ERR_UNSUPPORTED) return st;
    }
    size_t global = (size_t)((p->m + bm - 1) / bm) * (size_t)((p->n + 127) / 128) *
                    (size_t)batches * 128,
           local = 128;
    static const char *const names[2][4] = {
        {"kl_tc_mm64", "kl_tc_mm64t", "kl_wg_mm64t", "kl_wg_mm64r"},
        {"kl_tc_mm128", "kl_tc_mm128t", "kl_wg_mm128t", "kl_wg_mm128r"}};
    kiln_status st = KL_CL_LAUNCH(
        c, names[bm == 128][bt], 1, &global, &local, kc->e, CLA_T(a), CLA_T(b),
        CLA_T(p->addend), CLA_T(sum), CLA_T(y), CLA_L(p->m), CLA_L(p->n), CLA_L(p->k),
        CLA_L(p->sam), CLA_L(p->sak), CLA_L(sbk), CLA_L(sbn), CLA_S(p->batch), CLA_S(bc),
        CLA_F(p->alpha), CLA_F(p->beta), CLA_I(act.code), CLA_F(act.a), CLA_F(act.b),
        CLA_I(addend_mode(&bc, 0, p->addend)), CLA_I(addend_mode(&bc, 1, sum)));
    /* the queue is in order: what is queued after may have the block */
    kl_cl_free(c, &a_buf);
    return st;
  }
  if (kl_cl_tf32(c) && p->m >= TC_MIN && p->n >= TC_MIN && p->k >= TC_MIN) {
    /* tc.cl: BM x 128 tiles, BM 64 when tiles of 128 would not give every compute unit
     * two */
    size_t global = (size_t)((p->m + bm - 1) / bm) * (size_t)((p->n + 127) / 128) *
                    (size_t)batches * 256,
           local = 256;
    /* 4-vectors of A along k and of B along n where rows and offsets allow (tc.cl) */
    int vec = (p->sak == 1 && p->sam % 4 == 0 && p->k % 4 == 0 && kl_gpu_elem_off(kc->in[0]) % 4 == 0) |
              (p->sbn == 1 && p->sbk % 4 == 0 && p->n % 4 == 0 && kl_gpu_elem_off(kc->in[1]) % 4 == 0)
                  << 1;
    return KL_CL_LAUNCH(c, bm == 64 ? "kl_tc_matmul64" : "kl_tc_matmul128", 1, &global, &local,
                        kc->e, CLA_T(kc->in[0]), CLA_T(kc->in[1]), CLA_T(p->addend), CLA_T(sum),
                        CLA_T(y), CLA_L(p->m), CLA_L(p->n), CLA_L(p->k), CLA_L(p->sam),
                        CLA_L(p->sak), CLA_L(p->sbk), CLA_L(p->sbn), CLA_S(p->batch), CLA_S(bc),
                        CLA_F(p->alpha), CLA_F(p->beta), CLA_I(act.code), CLA_F(act.a),
                        CLA_F(act.b), CLA_I(vec), CLA_I(addend_mode(&bc, 0, p->addend)),
                        CLA_I(addend_mode(&bc, 1, sum)));
  }
  /* 64 x 64 tiles with 4 x 4 outputs per work-item (kl_nn_matmul64) once both sides
   * fill a quarter of one; smaller products one output per work-item */
  int64_t edge = p->m >= 16 && p->n >= 16 ? 64 : TILE;
  size_t tiles = (size_t)((p->m + edge - 1) / edge) * (size_t)((p->n + edge - 1) / edge) *
                 (size_t)batches;
  size_t global = tiles * TILE * TILE, local = TILE * TILE;
  return KL_CL_LAUNCH(c, edge == 64 ? "kl_nn_matmul64" : "kl_nn_matmul", 1, &global, &local,
                      kc->e, CLA_T(kc->in[0]),
                      CLA_T(kc->in[1]), CLA_T(p->addend), CLA_T(sum), CLA_T(y), CLA_L(p->m),
                      CLA_L(p->n), CLA_L(p->k), CLA_L(p->sam), CLA_L(p->sak), CLA_L(p->sbk),
                      CLA_L(p->sbn), CLA_S(p->batch), CLA_S(bc), CLA_F(p->alpha),
                      CLA_F(p->beta), CLA_I(act.code), CLA_F(act.a), CLA_F(act.b));
}

/* Gemm and FusedGemm (A, B, C?, Sum?): Y [M, N] = alpha A'B' + beta C (+ Sum, act). */
static kiln_status run_gemm(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *a = kc->in[0], *y = kc->out[0];
  bool ta = kl_attr_int(kc->node, "transA", 0) != 0;
  bool tb = kl_attr_int(kc->node, "transB", 0) != 0;
  product p = {.m = y->dims[0], .n = y->dims[1], .k = a->dims[ta ? 0 : 1],
               .addend = input(kc, 2), .alpha = kl_attr_float(kc->node, "alpha", 1.0f),
               .beta = kl_attr_float(kc->node, "beta", 1.0f)};
  p.sam = ta ? 1 : p.k;
  p.sak = ta ? p.m : 1;
  p.sbk = tb ? 1 : p.n;
  p.sbn = tb ? p.k : 1;
  return run_product(c, kc, &p);
}

/* The batch strides of MatMul operand t (operand k of bb), right-aligned with Y's batch
 * dims: `unit` elements (one matrix) per step of its last batch dim, 0 where it
 * broadcasts. */
static void batch_strides(kl_cl_bcast *bb, int k, const kl_tensor *t, int64_t unit) {
  int rank = t->rank > 2 ? t->rank - 2 : 0;
  for (int i = rank - 1; i >= 0; i--) {
    bb->s[k][bb->rank - rank + i] = t->dims[i] == 1 ? 0 : unit;
    unit *= t->dims[i];
  }
}

/* MatMul and FusedMatMul (A, B, Bias?, Sum?), NumPy's matmul: a rank-1 A is a row
 * [1, K], a rank-1 B a column [K, 1]; batch dims broadcast. */
static kiln_status run_matmul(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *a = kc->in[0], *b = kc->in[1], *y = kc->out[0];
  product p = {.m = a->rank > 1 ? a->dims[a->rank - 2] : 1,
               .n = b->rank > 1 ? b->dims[b->rank - 1] : 1,
               .k = a->dims[a->rank - 1],
               .addend = input(kc, KL_FUSED_BIAS),
               .alpha = 1,
               .beta = 1};
  p.sam = p.k;
  p.sak = 1;
  p.sbk = p.n;
  p.sbn = 1;
  memset(&p.batch, 0, sizeof p.batch);
  p.batch.rank = y->rank - (a->rank > 1) - (b->rank > 1);
  for (int d = 0; d < p.batch.rank; d++) p.batch.dims[d] = y->dims[d];
  batch_strides(&p.batch, 0, a, p.m * p.k);
  batch_strides(&p.batch, 1, b, p.k * p.n);
  if (a->rank > 2 && b->rank <= 2) {
    /* B is every batch's: one product over all of A's rows (Y's rows follow them), not a
     * batch of products that each read all of B (ViT's [197, 1, 768] x [768, 2304] was
     * 197 products of one row) */
    for (int d = 0; d < p.batch.rank; d++) p.m *= p.batch.dims[d];
    memset(&p.batch, 0, sizeof p.batch);
  }
  return run_product(c, kc, &p);
}

/* MaxPool (one output) and AveragePool. */
static kiln_status run_pool(kl_cl *c, kl_kernel_ctx *kc) {
  kl_nn_window g;
  kiln_status st = window_of(kc, NULL, &g);
  if (st != KILN_OK) return st;
  bool is_max = kc->node->op == KL_OP_MaxPool;
  bool include_pad = kl_attr_int(kc->node, "count_include_pad", 0) != 0;
  kl_tensor *y = kc->out[0];
  int64_t n = kl_tensor_numel(y);
  /* kl_nn_pool32 where its 32-bit arithmetic cannot overflow (nn.cl) */
  const int64_t lim = INT64_C(1) << 28;
  bool fits = n < lim * 4 && kl_tensor_numel(kc->in[0]) < lim * 4;
  for (int d = 0; d < 3 && fits; d++) {
    const kl_ref_window *w = &g.w;
    fits = w->pad_begin[d] >= 0 && w->pad_begin[d] < lim && w->pad_end[d] >= 0 &&
           w->pad_end[d] < lim && w->in[d] < lim && w->stride[d] < lim &&
           w->out[d] < lim / w->stride[d] && w->dilation[d] < lim &&
           w->kernel[d] < lim / w->dilation[d];
  }
  return KL_GPU_LAUNCH1(c, fits ? "kl_nn_pool32" : "kl_nn_pool", n, kc->e, CLA_T(kc->in[0]),
                        CLA_T(y), CLA_L(n), CLA_S(g), CLA_I(is_max), CLA_I(include_pad));
}

static kiln_status run_global_pool(kl_cl *c, kl_kernel_ctx *kc) {
  if (kl_cl_max_group(c) < REDUCE)
    return kl_fail(kc->e, KILN_ERR_UNSUPPORTED, "the global pool needs work-groups of %d "
                   "work-items; the device allows %zu", REDUCE, kl_cl_max_group(c));
  const kl_tensor *x = kc->in[0];
  int64_t planes = x->dims[0] * x->dims[1], size = 1;
  for (int d = 2; d < x->rank; d++) size *= x->dims[d];
  size_t global = (size_t)planes * REDUCE, local = REDUCE;
  return KL_CL_LAUNCH(c, "kl_nn_global_pool", 1, &global, &local, kc->e, CLA_T(x),
                      CLA_T(kc->out[0]), CLA_L(size),
                      CLA_I(kc->node->op == KL_OP_GlobalMaxPool));
}

static kiln_status run_batchnorm(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *x = kc->in[0];
  int64_t channels = x->rank >= 2 ? x->dims[1] : 1, inner = 1;
  for (int d = 2; d < x->rank; d++) inner *= x->dims[d];
  int64_t n = kl_tensor_numel(kc->out[0]);
  return KL_GPU_LAUNCH1(c, "kl_nn_batchnorm", n, kc->e, CLA_T(x), CLA_T(kc->in[1]),
                        CLA_T(kc->in[2]), CLA_T(kc->in[3]), CLA_T(kc->in[4]),
                        CLA_T(kc->out[0]), CLA_L(n), CLA_L(channels), CLA_L(inner),
                        CLA_F(kl_attr_float(kc->node, "epsilon", 1e-5f)));
}

/* Conv, Gemm, MatMul and their fused forms: an activation the kernels have, and the
 * ONNX layout. */
static bool product_ok(const kl_graph *g, const kl_node *n) {
  (void)g;
  kl_gpu_act act;
  return !kl_layout_nhwc(n) && kl_gpu_fused_act(n, &act);
}

/* BatchNormalization in inference form (training_mode=1 computes the batch's
 * statistics, and only it has further outputs). */
static bool batchnorm_ok(const kl_graph *g, const kl_node *n) {
  (void)g;
  return kl_attr_int(n, "training_mode", 0) == 0;
}

const kl_gpu_op kl_gpu_ops_nn[] = {
    {KL_OP_Conv, "cl:conv", 0, 0, false, product_ok, run_conv},
    {KL_OP_KilnFusedConv, "cl:conv", 0, 0, false, product_ok, run_conv},
    {KL_OP_Gemm, "cl:matmul", 0, 0, false, product_ok, run_gemm},
    {KL_OP_KilnFusedGemm, "cl:matmul", 0, 0, false, product_ok, run_gemm},
    {KL_OP_MatMul, "cl:matmul", 0, 0, false, product_ok, run_matmul},
    {KL_OP_KilnFusedMatMul, "cl:matmul", 0, 0, false, product_ok, run_matmul},
    /* MaxPool's Indices output (int64) keeps the node on the CPU: gpu/backend.c
     * places only nodes whose outputs are float32. */
    {KL_OP_MaxPool, "cl:pool", 0, 0, false, NULL, run_pool},
    {KL_OP_AveragePool, "cl:pool", 0, 0, false, NULL, run_pool},
    {KL_OP_GlobalAveragePool, "cl:global_pool", 0, 0, false, NULL, run_global_pool},
    {KL_OP_GlobalMaxPool, "cl:global_pool", 0, 0, false, NULL, run_global_pool},
    {KL_OP_BatchNormalization, "cl:batchnorm", 0, 0, false, batchnorm_ok, run_batchnorm},
};
const int kl_gpu_ops_nn_count = (int)(sizeof kl_gpu_ops_nn / sizeof kl_gpu_ops_nn[0]);

const char *kl_gpu_tf32_name(const kl_gpu_op *op) {
  if (op->run == run_conv) return "cl:conv tf32";
  if (op->run == run_gemm || op->run == run_matmul) return "cl:matmul tf32";
  return NULL;
}
