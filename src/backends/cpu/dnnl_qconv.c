/* QLinearConv on oneDNN's int8 convolution, and QLinearMatMul (and kiln's QLinearGemm,
 * with a bias and Relu) of constant weights on its int8 matmul (dnnl.h):
 *
 *   X [N, C, S...] uint8 or int8, W [M, C/g, K...] int8 (constant, zero point 0),
 *   B [M] int32 (optional) -> Y [N, M, S'...] uint8 or int8
 *   acc[n, m, o] = B[m] + sum (X - zx) W            (int32, exact)
 *   Y = saturate(rint(acc * (sx * sw[m] / sy) + zy))
 *
 * oneDNN computes exactly that: s32 accumulation, the bias added before the output
 * scales (one per channel: the multiplier, rounded to float32 as the reference does),
 * X's zero point as its source zero point (padding counts as zx, a real 0) and zy as
 * its destination zero point, added before rounding. A convolution that pads nothing
 * has neither: zx times each output channel's weight sum is taken from its bias once
 * (exact in int32, checked) and zy added by an eltwise linear post-op, the same sums
 * (oneDNN 2.6's AMX brgemm convolutions take no zero points: with them, its AMX 1x1
 * ones fell back to older jit kernels, slower than its VNNI ones at MobileNetV2's
 * channel counts). Its float32 product acc * scale
 * (the reference's is in double) can differ by one step where it lands on a half step.
 *
 * oneDNN 2.6 has int8 convolutions for AVX2 (jit_uni_int8, with vpmaddubsw) only for
 * channels-last activations, and only its reference loops (ref_int8:any) for plain
 * ones: kiln's plain X is reordered to channels-last in the session's workspace before
 * the primitive and Y back after it, unless the session holds them channels-last
 * (kl_dnnl_qconv_set_channels_last: a value passed from one QLinearConv to the next,
 * most of a QDQ network's), which costs no reorder at all. The weights are reordered once per set of input
 * shapes into the layout the primitive asks for (with the compensation oneDNN keeps
 * for int8 sources). QLinearMatMul is the same product with A [..., M, K] as rows
 * against a constant B [K, N] (scales per column), plain on both sides (gemm:jit).
 * A primitive that is oneDNN's reference implementation is kept but
 * reported (kl_dnnl_qconv_ran_slow), as for float32 primitives, so that the option
 * fast_only refuses it; shapes oneDNN cannot do at all run kiln's reference kernel.
 * At level avx2 two cases run kiln's own kernels instead (isa/run_qconv.c): a depthwise
 * convolution of uint8 X held channels-last on both sides (oneDNN 2.6's is slow with a
 * source zero point), and a product of uint8 A of at most 4 rows (gemm:jit packs B at
 * every run); their implementation names are kiln_qdw:avx2 and kiln_qgemv:avx2.
 */
#include "backends/cpu/dnnl_cache.h"
#include "backends/cpu/dnnl_engine.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"
#include "ir/infer_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kl_ref_qlinear_conv(kl_kernel_ctx *c);

typedef struct qc_entry {
  bool fallback;
  dnnl_primitive_t conv, src_in, dst_out;
  dnnl_memory_t src_user, src, wei, bias, dst, dst_user, scratch;
  void *wei_data; /* the weights in the primitive's layout, ours */
  int32_t *bias_own; /* B - zx * (each output channel's weight sum) when zx is folded */
  int32_t *colsum;   /* MatMulInteger: each column's sum of B, for A's zero point */
  bool shift;     /* X is int8: read as uint8 X + 128 (zero point zx + 128) */
  size_t shift_off, shift_bytes;
  size_t src_off, dst_off, scratch_off; /* regions of the session's workspace */
  uint64_t ws_gen;
  kl_qdw_plan *qdw; /* kiln's depthwise kernel runs it instead (run_qconv.c) */
  kl_qgemv_plan *qgemv; /* kiln's matrix-vector product runs it instead */
  char impl[32];
} qc_entry;

typedef struct qc_node {
  kl_dnnl_engine *eng; /* the session's, not owned */
  bool cl_x, cl_y;     /* X, Y held channels-last by the session */
  bool ran_reference;
  const char *ran_impl;
  kl_dnnl_cache cache; /* keyed by X's shape */
  qc_entry slots[KL_DNNL_CACHE_SLOTS];
} qc_node;

static bool is_q8(kl_dtype t) { return t == KL_U8 || t == KL_I8; }

static bool is_const(const kl_graph *g, int v) {
  return v >= 0 && g->values[v].kind == KL_VALUE_CONST && g->values[v].data;
}

int kl_dnnl_qconv_weight_bits(void) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return isa == dnnl_cpu_isa_avx2_vnni || (isa & dnnl_cpu_isa_avx512_core_vnni) ==
                                              dnnl_cpu_isa_avx512_core_vnni
             ? 8
             : 7;
}

/* Whether oneDNN's int32 sums are exact: for each output channel (QLinearConv's W [M,
 * ...]) or column (the products' B [K, N]), its bias plus up to 255 (a code less its zero
 * point) times the sum of its |weights|. oneDNN wraps past int32 (a QLinearMatMul of K
 * 140,000 codes of 255 against weights of 64 gave the lowest code where the reference,
 * exact in double, gives the highest); such a node runs the reference. */
static bool sums_fit(const kl_graph *g, const kl_node *n) {
  const kl_value *w = &g->values[n->in[3]];
  const kl_value *b = n->n_in > 8 && n->in[8] >= 0 ? &g->values[n->in[8]] : NULL;
  int64_t nw;
  if (!kl_type_numel(&w->type, &nw) || w->type.rank < 1) return false;
  bool conv = n->op == KL_OP_QLinearConv;
  int64_t outs = conv ? w->type.dims[0].size : w->type.dims[w->type.rank - 1].size;
  if (outs < 1) return true;
  int64_t per = nw / outs;
  if (b && (!b->data || b->type.dtype != KL_I32)) return false;
  int64_t nb = 0;
  if (b && !kl_type_numel(&b->type, &nb)) return false;
  return kl_qsums_fit(w->data, outs, per, conv ? per : 1, conv ? 1 : outs,
                      nb == outs ? b->data : NULL, 0);
}

/* Constant int8 weights whose zero points are all 0 (oneDNN has no weights zero point)
 * and that oneDNN's ISA multiplies exactly (kl_dnnl_qconv_weight_bits). */
static bool exact_weights(const kl_graph *g, const kl_node *n) {
  const kl_value *w = &g->values[n->in[3]], *z = &g->values[n->in[5]];
  int64_t nz, nw;
  if (!is_const(g, n->in[3]) || !is_const(g, n->in[5]) || w->type.dtype != KL_I8 ||
      !kl_type_numel(&z->type, &nz) || !kl_type_numel(&w->type, &nw))
    return false;
  for (int64_t i = 0; i < nz; i++)
    if (((const int8_t *)z->data)[i] != 0) return false;
  int lim = kl_dnnl_qconv_weight_bits() == 8 ? 128 : 64;
  for (int64_t i = 0; i < nw; i++)
    if (abs(((const int8_t *)w->data)[i]) > lim) return false;
  return sums_fit(g, n);
}

/* QLinearMatMul, or kiln's QLinearGemm (its bias and Relu: oneDNN's bias and eltwise
 * post-op). */
static bool is_matmul(kl_op op) { return op == KL_OP_QLinearMatMul || op == KL_OP_KilnQLinearGemm; }
/* MatMulInteger, and MatMulIntegerToFloat: its product then its scale (kl_mmint_scale) */
static bool is_mmint(kl_op op) {
  return op == KL_OP_MatMulInteger || op == KL_OP_KilnMatMulIntegerToFloat;
}

static bool has_relu(const kl_node *n) {
  return n->op == KL_OP_KilnQLinearGemm && kl_node_attr(n, "activation");
}

bool kl_dnnl_qconv_supports(const kl_graph *g, const kl_node *n) {
  bool mm = is_matmul(n->op);
  if ((n->op != KL_OP_QLinearConv && !mm) || n->n_out != 1 || n->n_in < 8) return false;
  const char *act = kl_attr_string(n, "activation", NULL);
  if (act && (n->op != KL_OP_KilnQLinearGemm || strcmp(act, "Relu") != 0)) return false;
  const kl_type *x = &g->values[n->in[0]].type, *y = &g->values[n->out[0]].type;
  if (!is_q8(x->dtype) || !is_q8(y->dtype)) return false;
  if (!mm && (x->rank < 3 || x->rank > 5)) return false;
  /* A [..., M, K] times a matrix B [K, N]: one [batch * M, K] x [K, N] product */
  if (mm && (x->rank < 2 || g->values[n->in[3]].type.rank != 2)) return false;
  for (int k = 1; k < n->n_in; k++) /* scales, zero points, W and B: known once */
    if (k != 3 && n->in[k] >= 0 && !is_const(g, n->in[k])) return false;
  /* float32 scales; X's and Y's scale and zero point one value each (QLinearMatMul
   * allows one per row of A); W's one or one per output channel / column */
  int64_t count;
  for (int k = 1; k <= 7; k++) {
    const kl_type *t = &g->values[n->in[k]].type;
    if ((k == 1 || k == 4 || k == 6) && t->dtype != KL_F32) return false;
    if (k != 3 && k != 4 && k != 5 && (!kl_type_numel(t, &count) || count != 1)) return false;
  }
  return exact_weights(g, n);
}

/* ---- memory descriptors ---- */

static dnnl_data_type_t dt_of(kl_dtype t) {
  return t == KL_U8 ? dnnl_u8 : t == KL_I8 ? dnnl_s8 : dnnl_s32;
}

/* [N, C, S...] of dtype t (int8 X: as uint8, shifted), plain (row-major) or
 * channels-last ([N, S..., C]). */
static dnnl_status_t act_md(dnnl_memory_desc_t *md, const kl_tensor *t, bool cl, bool is_x) {
  int nd = t->rank < 3 ? 3 : t->rank; /* 3 to 5 (kl_dnnl_qconv_supports) */
  dnnl_dims_t dims = {0}, strides = {0};
  for (int i = 0; i < nd; i++) dims[i] = i < t->rank ? t->dims[i] : 1;
  int64_t s = 1;
  if (!cl) {
    for (int i = nd - 1; i >= 0; i--) strides[i] = s, s *= dims[i];
  } else {
    strides[1] = s, s *= dims[1];
    for (int i = nd - 1; i >= 2; i--) strides[i] = s, s *= dims[i];
    strides[0] = s;
  }
  return dnnl_memory_desc_init_by_strides(md, nd, dims, is_x ? dnnl_u8 : dt_of(t->dtype),
                                          strides);
}

/* kiln's [M, C/g, K...] weights, with the group split out when there is more than one. */
static dnnl_status_t weights_md(dnnl_memory_desc_t *user, dnnl_memory_desc_t *want,
                                const kl_tensor *w, int64_t group) {
  int o = group > 1, nd = w->rank + o;
  dnnl_dims_t dims, strides;
  if (o) dims[0] = group;
  dims[o] = w->dims[0] / group;
  for (int i = 1; i < w->rank; i++) dims[o + i] = w->dims[i];
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; i--) strides[i] = s, s *= dims[i];
  dnnl_status_t st = dnnl_memory_desc_init_by_strides(user, nd, dims, dnnl_s8, strides);
  if (st == dnnl_success) st = dnnl_memory_desc_init_by_tag(want, nd, dims, dnnl_s8,
                                                            dnnl_format_tag_any);
  return st;
}

/* ---- building an entry ---- */

static int32_t zero_point(const kl_tensor *z) {
  return z->dtype == KL_U8 ? ((const uint8_t *)z->data)[0] : ((const int8_t *)z->data)[0];
}

/* Output scales sx * sw[m] / sy, each step rounded to float32 (as the reference); zero
 * points of X and Y (0: none). fold: X's zero point is in the bias (fold_zx) and Y's
 * is added by an eltwise linear post-op after the scales, before the rounding (as
 * oneDNN adds a destination zero point): oneDNN 2.6's AMX brgemm convolutions take no
 * zero points, and without them its AMX int8 1x1 convolutions run on them instead of
 * the older jit ones. */
static dnnl_status_t quant_attr(const kl_kernel_ctx *c, dnnl_primitive_attr_t attr,
                                int64_t m, bool fold) {
  const kl_tensor *ws = c->in[4];
  float sx = *(const float *)c->in[1]->data, sy = *(const float *)c->in[6]->data;
  int64_t n = kl_tensor_numel(ws);
  float *scales = malloc((size_t)(n > 0 ? n : 1) * sizeof *scales);
  if (!scales) return dnnl_out_of_memory;
  for (int64_t i = 0; i < n; i++) {
    float prod = sx * ((const float *)ws->data)[i];
    scales[i] = prod / sy;
  }
  dnnl_status_t s = dnnl_primitive_attr_set_output_scales(attr, n == 1 ? 1 : m,
                                                          n == 1 ? 0 : 1 << 1, scales);
  free(scales);
  int32_t zx = zero_point(c->in[2]) + (c->in[0]->dtype == KL_I8 ? 128 : 0);
  int32_t zy = zero_point(c->in[7]);
  if (s == dnnl_success && zx && !fold)
    s = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &zx);
  if (s == dnnl_success && zy && !fold)
    s = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_DST, 1, 0, &zy);
  if (s == dnnl_success && zy && fold) {
    dnnl_post_ops_t po = NULL;
    s = dnnl_post_ops_create(&po);
    if (s == dnnl_success)
      s = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_linear, 1.0f, (float)zy);
    if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
    if (po) dnnl_post_ops_destroy(po);
  }
  if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  return s;
}

static const char *impl_of(const_dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
    return "unknown";
  return impl;
}

static dnnl_status_t reorder_make(dnnl_primitive_t *r, dnnl_engine_t eng,
                                  const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to) {
  dnnl_primitive_desc_t pd;
  dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL);
  if (s != dnnl_success) return s;
  s = dnnl_primitive_create(r, pd);
  dnnl_primitive_desc_destroy(pd);
  return s;
}

/* W reordered once into the layout pd asks for, in en->wei_data. */
static dnnl_status_t pack_weights(qc_node *q, qc_entry *en, const dnnl_memory_desc_t *user,
                                  const_dnnl_primitive_desc_t pd, const void *w) {
  const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  size_t bytes = dnnl_memory_desc_get_size(want);
  en->wei_data = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!en->wei_data) return dnnl_out_of_memory;
  dnnl_memory_t from = NULL;
  dnnl_primitive_t r = NULL;
  dnnl_engine_t eng = q->eng->engine;
  dnnl_status_t s = dnnl_memory_create(&from, user, eng, (void *)w);
  if (s == dnnl_success) s = dnnl_memory_create(&en->wei, want, eng, en->wei_data);
  if (s == dnnl_success) s = reorder_make(&r, eng, user, want);
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, en->wei}};
  if (s == dnnl_success) s = dnnl_primitive_execute(r, q->eng->stream, 2, args);
  if (s == dnnl_success) s = dnnl_stream_wait(q->eng->stream);
  if (r) dnnl_primitive_destroy(r);
  if (from) dnnl_memory_destroy(from);
  return s;
}

/* The memories over the workspace regions and kiln's tensors (handles set per run). */
static dnnl_status_t make_memories(qc_node *q, qc_entry *en, const_dnnl_primitive_desc_t pd,
                                   const dnnl_memory_desc_t *src_user,
                                   const dnnl_memory_desc_t *dst_user,
                                   const dnnl_memory_desc_t *bias) {
  dnnl_engine_t eng = q->eng->engine;
  const dnnl_memory_desc_t *src = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *dst = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  const dnnl_memory_desc_t *scr = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  bool src_in = !dnnl_memory_desc_equal(src_user, src);
  bool dst_out = !dnnl_memory_desc_equal(dst_user, dst);
  size_t used = 0;
  en->shift_off = kl_dnnl_ws_take(&used, en->shift_bytes);
  en->src_off = kl_dnnl_ws_take(&used, src_in ? dnnl_memory_desc_get_size(src) : 0);
  en->dst_off = kl_dnnl_ws_take(&used, dst_out ? dnnl_memory_desc_get_size(dst) : 0);
  size_t scr_bytes = scr ? dnnl_memory_desc_get_size(scr) : 0;
  en->scratch_off = kl_dnnl_ws_take(&used, scr_bytes);
  dnnl_status_t s = kl_dnnl_ws_reserve(q->eng, used);
  if (s == dnnl_success) s = dnnl_memory_create(&en->src_user, src_user, eng, DNNL_MEMORY_NONE);
  if (s == dnnl_success) s = dnnl_memory_create(&en->dst_user, dst_user, eng, DNNL_MEMORY_NONE);
  if (s == dnnl_success && src_in) s = dnnl_memory_create(&en->src, src, eng, DNNL_MEMORY_NONE);
  if (s == dnnl_success && dst_out) s = dnnl_memory_create(&en->dst, dst, eng, DNNL_MEMORY_NONE);
  if (s == dnnl_success && scr_bytes)
    s = dnnl_memory_create(&en->scratch, scr, eng, DNNL_MEMORY_NONE);
  if (s == dnnl_success && bias) s = dnnl_memory_create(&en->bias, bias, eng, DNNL_MEMORY_NONE);
  if (s == dnnl_success && src_in) s = reorder_make(&en->src_in, eng, src_user, src);
  if (s == dnnl_success && dst_out) s = reorder_make(&en->dst_out, eng, dst, dst_user);
  return s;
}

static void entry_free(void *entry) {
  qc_entry *en = entry;
  dnnl_primitive_t prims[] = {en->conv, en->src_in, en->dst_out};
  for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++)
    if (prims[i]) dnnl_primitive_destroy(prims[i]);
  dnnl_memory_t mems[] = {en->src_user, en->src, en->wei, en->bias, en->dst, en->dst_user,
                          en->scratch};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
    if (mems[i]) dnnl_memory_destroy(mems[i]);
  free(en->wei_data);
  free(en->bias_own);
  free(en->colsum);
  kl_qdw_plan_free(en->qdw);
  kl_qgemv_plan_free(en->qgemv);
  memset(en, 0, sizeof *en);
}

/* Relu after the output scales, before Y's zero point: max(acc * scale, 0) + zy. */
static dnnl_status_t relu_attr(dnnl_primitive_attr_t attr) {
  dnnl_post_ops_t po = NULL;
  dnnl_status_t s = dnnl_post_ops_create(&po);
  if (s == dnnl_success) s = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0, 0);
  if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
  if (po) dnnl_post_ops_destroy(po);
  return s;
}

/* The matrix product's primitive from md (s: how making md went; attr destroyed here):
 * the fallback (kiln's reference) when oneDNN has none, else B (w, as wei_user) reordered
 * once into the layout it wants, the memories and the primitive. */
static kiln_status matmul_make(qc_node *q, qc_entry *en, kl_kernel_ctx *c, dnnl_status_t s,
                               dnnl_primitive_attr_t attr, const dnnl_matmul_desc_t *md,
                               const dnnl_memory_desc_t *wei_user, const void *w,
                               const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst,
                               const dnnl_memory_desc_t *bias) {
  dnnl_primitive_desc_t pd = NULL;
  if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, md, attr, q->eng->engine, NULL);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (s == dnnl_unimplemented || s == dnnl_invalid_arguments) {
    en->fallback = true;
    return KILN_OK;
  }
  snprintf(en->impl, sizeof en->impl, "%s", s == dnnl_success ? impl_of(pd) : "");
  if (s == dnnl_success) s = pack_weights(q, en, wei_user, pd, w);
  if (s == dnnl_success) s = make_memories(q, en, pd, src, dst, bias);
  if (s == dnnl_success) s = dnnl_primitive_create(&en->conv, pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (s != dnnl_success)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "oneDNN failed to make the %s of %lld x %lld by "
                   "%lld x %lld (status %d)", is_mmint(c->node->op) ?
                   "integer matrix product" : "int8 matrix product",
                   (long long)src->dims[0], (long long)src->dims[1],
                   (long long)wei_user->dims[0], (long long)wei_user->dims[1], (int)s);
  return KILN_OK;
}

/* QLinearMatMul and QLinearGemm: A [..., M, K] as [rows, K], B [K, N] (weights,
 * reordered once), Y [rows, N], all plain; per-column scales of B along dim 1 of Y;
 * QLinearGemm's int32 bias [1, N] added to the sums before the scales. */
static kiln_status matmul_build(qc_node *q, qc_entry *en, kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *w = c->in[3], *y = c->out[0];
  if (kl_isa_level() == KL_ISA_AVX2 && kl_qgemv_fits(c)) { /* gemm:jit packs B every run */
    snprintf(en->impl, sizeof en->impl, "kiln_qgemv:%s", kl_cpu_isa_fns(kl_isa_level())->name);
    return kl_qgemv_plan_create(c, has_relu(c->node), &en->qgemv);
  }
  const kl_tensor *b = c->n_in > 8 ? c->in[8] : NULL;
  int64_t k = w->dims[0], n = w->dims[1], rows = k > 0 ? kl_tensor_numel(a) / k : 0;
  dnnl_memory_desc_t src, dst, wei_user, wei_want, bias;
  dnnl_status_t s = dnnl_memory_desc_init_by_tag(&src, 2, (dnnl_dims_t){rows, k}, dnnl_u8,
                                                 dnnl_ab);
  if (s == dnnl_success)
    s = dnnl_memory_desc_init_by_tag(&dst, 2, (dnnl_dims_t){rows, n}, dt_of(y->dtype), dnnl_ab);
  if (s == dnnl_success)
    s = dnnl_memory_desc_init_by_tag(&wei_user, 2, (dnnl_dims_t){k, n}, dnnl_s8, dnnl_ab);
  if (s == dnnl_success)
    s = dnnl_memory_desc_init_by_tag(&wei_want, 2, (dnnl_dims_t){k, n}, dnnl_s8,
                                     dnnl_format_tag_any);
  if (s == dnnl_success && b)
    s = dnnl_memory_desc_init_by_tag(&bias, 2, (dnnl_dims_t){1, n}, dnnl_s32, dnnl_ab);
  en->shift = a->dtype == KL_I8;
  en->shift_bytes = en->shift ? (size_t)kl_tensor_numel(a) : 0;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_matmul_desc_t md;
  if (s == dnnl_success) s = dnnl_primitive_attr_create(&attr);
  if (s == dnnl_success) s = quant_attr(c, attr, n, false);
  if (s == dnnl_success && has_relu(c->node)) s = relu_attr(attr);
  if (s == dnnl_success)
    s = dnnl_matmul_desc_init(&md, &src, &wei_want, b ? &bias : NULL, &dst);
  return matmul_make(q, en, c, s, attr, &md, &wei_user, w->data, &src, &dst, b ? &bias : NULL);
}

/* MatMulInteger where oneDNN multiplies with VNNI or AMX (mmint_primitive): A [..., M, K]
 * uint8 as [rows, K], B [K, N] int8 (reordered once), Y [rows, N] int32, the product
 * A B with no zero point (oneDNN's matmul takes none that changes at run time: A's comes
 * from a DynamicQuantizeLinear); A's is subtracted after it, za * (column j's sum of B),
 * exactly in int32 (mmint_compensate). */
static kiln_status mmint_build(qc_node *q, qc_entry *en, kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *w = c->in[1];
  int64_t k = w->dims[0], n = w->dims[1], rows = k > 0 ? kl_tensor_numel(a) / k : 0;
  en->colsum = calloc((size_t)(n > 0 ? n : 1), sizeof *en->colsum);
  if (!en->colsum) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for column sums");
  const int8_t *wd = w->data;
  for (int64_t i = 0; i < k; i++)
    for (int64_t j = 0; j < n; j++) en->colsum[j] += wd[i * n + j];
  dnnl_memory_desc_t src, dst, wei_user, wei_want;
  dnnl_status_t s = dnnl_memory_desc_init_by_tag(&src, 2, (dnnl_dims_t){rows, k}, dnnl_u8,
                                                 dnnl_ab);
  if (s == dnnl_success)
    s = dnnl_memory_desc_init_by_tag(&dst, 2, (dnnl_dims_t){rows, n}, dnnl_s32, dnnl_ab);
  if (s == dnnl_success)
    s = dnnl_memory_desc_init_by_tag(&wei_user, 2, (dnnl_dims_t){k, n}, dnnl_s8, dnnl_ab);
  if (s == dnnl_success)
    s = dnnl_memory_desc_init_by_tag(&wei_want, 2, (dnnl_dims_t){k, n}, dnnl_s8,
                                     dnnl_format_tag_any);
  dnnl_primitive_attr_t attr = NULL;
  dnnl_matmul_desc_t md;
  if (s == dnnl_success) s = dnnl_primitive_attr_create(&attr);
  if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (s == dnnl_success) s = dnnl_matmul_desc_init(&md, &src, &wei_want, NULL, &dst);
  return matmul_make(q, en, c, s, attr, &md, &wei_user, w->data, &src, &dst, NULL);
}

/* Y -= za * colsum per column, in uint32 (wrapping as int32 would; the result is the
 * reference's, within int32 by kl_dnnl_mmint_supports' bound on K). */
static void mmint_compensate(const qc_entry *en, kl_kernel_ctx *c) {
  const kl_tensor *za = c->n_in > 2 ? c->in[2] : NULL;
  uint32_t z = za ? *(const uint8_t *)za->data : 0;
  if (!z) return;
  int64_t n = c->in[1]->dims[1], rows = n > 0 ? kl_tensor_numel(c->out[0]) / n : 0;
  uint32_t *y = c->out[0]->data;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < n; j++) y[r * n + j] -= z * (uint32_t)en->colsum[j];
}

/* Whether the convolution pads nothing (its nd spatial dims). */
static bool zero_pad(const kl_dnnl_conv_geom *geo, int nd) {
  for (int i = 0; i < nd; i++)
    if (geo->pad_l[i] || geo->pad_r[i]) return false;
  return true;
}

/* *out = B[m] - zx * sum of W[m]'s weights, for each output channel m (B 0 when the
 * node has none), with zx X's zero point as quant_attr gives it (+128 for int8 X, read
 * as uint8). KILN_OK and a NULL *out when zx is 0 (nothing to fold);
 * KILN_ERR_UNSUPPORTED when a value leaves int32 (the zero point stays oneDNN's). */
static kiln_status fold_zx(const kl_kernel_ctx *c, int64_t m, int32_t **out) {
  const kl_tensor *w = c->in[3], *b = c->n_in > 8 ? c->in[8] : NULL;
  int64_t zx = zero_point(c->in[2]) + (c->in[0]->dtype == KL_I8 ? 128 : 0);
  *out = NULL;
  if (zx == 0) return KILN_OK; /* nothing to fold */
  int64_t per = kl_tensor_numel(w) / (m ? m : 1);
  int32_t *bias = malloc(sizeof *bias * (size_t)(m ? m : 1));
  if (!bias) return KILN_ERR_OUT_OF_MEMORY;
  const int8_t *wd = w->data;
  for (int64_t i = 0; i < m; i++) {
    int64_t sum = 0;
    for (int64_t k = 0; k < per; k++) sum += wd[i * per + k];
    int64_t v = (b && b->data ? ((const int32_t *)b->data)[i] : 0) - zx * sum;
    if (v < INT32_MIN || v > INT32_MAX) {
      free(bias);
      return KILN_ERR_UNSUPPORTED;
    }
    bias[i] = (int32_t)v;
  }
  *out = bias;
  return KILN_OK;
}

static kiln_status entry_build(void *owner, void *entry, kl_kernel_ctx *c) {
  qc_node *q = owner;
  qc_entry *en = entry;
  if (is_mmint(c->node->op)) return mmint_build(q, en, c);
  if (is_matmul(c->node->op)) return matmul_build(q, en, c);
  const kl_tensor *x = c->in[0], *w = c->in[3], *y = c->out[0];
  const kl_tensor *b = c->n_in > 8 ? c->in[8] : NULL;
  int64_t group = kl_attr_int(c->node, "group", 1), m = w->dims[0];
  kl_dnnl_conv_geom geo;
  kiln_status st = kl_dnnl_conv_geometry(c->node, c->in[0], c->in[3], &geo, c->e);
  if (st != KILN_OK) return st;
  if (q->cl_x && q->cl_y && kl_isa_level() == KL_ISA_AVX2 && x->rank == 4) {
    kl_qdw_geom dw = {w->dims[2], w->dims[3], geo.strides[0], geo.strides[1],
                      geo.dilates[0] + 1, geo.dilates[1] + 1, geo.pad_l[0], geo.pad_l[1]};
    if (kl_qdw_fits(c, &dw)) {
      snprintf(en->impl, sizeof en->impl, "kiln_qdw:%s", kl_cpu_isa_fns(kl_isa_level())->name);
      return kl_qdw_plan_create(c, &dw, &en->qdw);
    }
  }
  dnnl_memory_desc_t src_user, src_cl, dst_user, dst_cl, wei_user, wei_want, bias;
  dnnl_status_t s = act_md(&src_user, x, q->cl_x, true);
  if (s == dnnl_success) s = act_md(&src_cl, x, true, true);
  if (s == dnnl_success) s = act_md(&dst_user, y, q->cl_y, false);
  if (s == dnnl_success) s = act_md(&dst_cl, y, true, false);
  en->shift = x->dtype == KL_I8;
  en->shift_bytes = en->shift ? (size_t)kl_tensor_numel(x) : 0;
  if (s == dnnl_success) s = weights_md(&wei_user, &wei_want, w, group);
  /* Without padding, X's zero point is a constant per output channel, zx times its
   * weights' sum: folded into the bias, exactly (int64 checked against int32's range),
   * and Y's into a post-op (quant_attr) */
  bool fold = s == dnnl_success && zero_pad(&geo, x->rank - 2);
  if (fold) {
    kiln_status fst = fold_zx(c, m, &en->bias_own);
    if (fst == KILN_ERR_OUT_OF_MEMORY) return kl_fail(c->e, fst, "out of memory for the bias");
    fold = fst == KILN_OK;
  }
  if (s == dnnl_success && (b || en->bias_own))
    s = dnnl_memory_desc_init_by_tag(&bias, 1, (dnnl_dims_t){m}, dnnl_s32, dnnl_a);
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_convolution_desc_t cd;
  if (s == dnnl_success) s = dnnl_primitive_attr_create(&attr);
  if (s == dnnl_success) s = quant_attr(c, attr, m, fold);
  if (s == dnnl_success)
    s = dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                   dnnl_convolution_direct, &src_cl, &wei_want,
                                                   b || en->bias_own ? &bias : NULL, &dst_cl, geo.strides,
                                                   geo.dilates, geo.pad_l, geo.pad_r);
  if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, &cd, attr, q->eng->engine, NULL);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (s == dnnl_unimplemented || s == dnnl_invalid_arguments) {
    en->fallback = true; /* kiln's reference kernel runs it, reported as a slow path */
    return KILN_OK;
  }
  snprintf(en->impl, sizeof en->impl, "%s", s == dnnl_success ? impl_of(pd) : "");
  if (s == dnnl_success) s = pack_weights(q, en, &wei_user, pd, w->data);
  if (s == dnnl_success)
    s = make_memories(q, en, pd, &src_user, &dst_user, b || en->bias_own ? &bias : NULL);
  if (s == dnnl_success && en->bias_own) s = dnnl_memory_set_data_handle(en->bias, en->bias_own);
  if (s == dnnl_success) s = dnnl_primitive_create(&en->conv, pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (s != dnnl_success)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "oneDNN failed to make the int8 convolution "
                   "for X of %lld channels (status %d)", (long long)x->dims[1], (int)s);
  return KILN_OK;
}

/* ---- running ---- */

static dnnl_status_t ws_bind(qc_node *q, qc_entry *en) {
  if (en->ws_gen == q->eng->ws_gen) return dnnl_success;
  char *base = q->eng->ws;
  dnnl_status_t s = dnnl_success;
  if (en->src) s = dnnl_memory_set_data_handle(en->src, base + en->src_off);
  if (s == dnnl_success && en->dst) s = dnnl_memory_set_data_handle(en->dst, base + en->dst_off);
  if (s == dnnl_success && en->scratch)
    s = dnnl_memory_set_data_handle(en->scratch, base + en->scratch_off);
  if (s == dnnl_success) en->ws_gen = q->eng->ws_gen;
  return s;
}

static kiln_status execute(qc_node *q, qc_entry *en, kl_kernel_ctx *c) {
  dnnl_stream_t stream = q->eng->stream;
  dnnl_status_t s = ws_bind(q, en);
  kl_dnnl_ws_enter(q->eng);
  const void *x = c->in[0]->data;
  if (en->shift) { /* oneDNN's own int8 source on AVX2 halves the weights (inexact) */
    uint8_t *u = (uint8_t *)q->eng->ws + en->shift_off;
    const uint8_t *v = x;
    for (size_t i = 0; i < en->shift_bytes; i++) u[i] = v[i] ^ 0x80u;
    x = u;
  }
  if (s == dnnl_success) s = dnnl_memory_set_data_handle(en->src_user, (void *)x);
  if (s == dnnl_success) s = dnnl_memory_set_data_handle(en->dst_user, c->out[0]->data);
  if (s == dnnl_success && en->bias && !en->bias_own)
    s = dnnl_memory_set_data_handle(en->bias, (void *)c->in[8]->data);
  dnnl_exec_arg_t in[2] = {{DNNL_ARG_FROM, en->src_user}, {DNNL_ARG_TO, en->src}};
  dnnl_exec_arg_t out[2] = {{DNNL_ARG_FROM, en->dst}, {DNNL_ARG_TO, en->dst_user}};
  dnnl_memory_t src = en->src_in ? en->src : en->src_user;
  dnnl_memory_t dst = en->dst_out ? en->dst : en->dst_user;
  dnnl_exec_arg_t conv[5] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, en->wei},
                             {DNNL_ARG_DST, dst}};
  int n = 3;
  if (en->bias) conv[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, en->bias};
  if (en->scratch) conv[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, en->scratch};
  if (s == dnnl_success && en->src_in) s = dnnl_primitive_execute(en->src_in, stream, 2, in);
  if (s == dnnl_success) s = dnnl_primitive_execute(en->conv, stream, n, conv);
  if (s == dnnl_success && en->dst_out) s = dnnl_primitive_execute(en->dst_out, stream, 2, out);
  if (s == dnnl_success) s = dnnl_stream_wait(stream);
  return s == dnnl_success ? KILN_OK
                           : kl_fail(c->e, KILN_ERR_INTERNAL, "oneDNN failed to run the int8 "
                                     "convolution (status %d)", (int)s);
}

/* [N, C, S] bytes between plain and channels-last ([N, S, C]). */
static void relayout(const uint8_t *from, uint8_t *to, const kl_tensor *t, bool to_cl) {
  int64_t n = t->dims[0], ch = t->dims[1], sp = kl_tensor_numel(t) / (n * ch > 0 ? n * ch : 1);
  for (int64_t i = 0; i < n; i++)
    for (int64_t k = 0; k < ch; k++)
      for (int64_t j = 0; j < sp; j++) {
        int64_t plain = (i * ch + k) * sp + j, cl = (i * sp + j) * ch + k;
        to[to_cl ? cl : plain] = from[to_cl ? plain : cl];
      }
}

/* The reference kernel, which reads and writes plain tensors: X and Y through plain
 * copies when the session holds them channels-last (a rare path: it allocates). */
static kiln_status run_reference(const qc_node *q, kl_kernel_ctx *c) {
  if (!q->cl_x && !q->cl_y) return (kiln_status)kl_op_get(c->node->op)->ref(c);
  kl_tensor x = *c->in[0], y = *c->out[0];
  size_t nx = (size_t)kl_tensor_numel(&x), ny = (size_t)kl_tensor_numel(&y);
  uint8_t *px = malloc(nx ? nx : 1), *py = malloc(ny ? ny : 1);
  kiln_status st = KILN_OK;
  if (!px || !py) st = kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes",
                               nx + ny);
  if (st == KILN_OK) {
    if (q->cl_x) relayout(c->in[0]->data, px, &x, false), x.data = px;
    if (q->cl_y) y.data = py;
    const kl_tensor *in[9];
    for (int k = 0; k < c->n_in && k < 9; k++) in[k] = c->in[k];
    in[0] = &x;
    kl_tensor *out[1] = {&y};
    kl_kernel_ctx sub = *c;
    sub.in = in;
    sub.out = out;
    st = kl_ref_qlinear_conv(&sub);
    if (st == KILN_OK && q->cl_y) relayout(py, c->out[0]->data, &y, true);
  }
  free(px);
  free(py);
  return st;
}

static int qc_run(kl_kernel_ctx *c) {
  qc_node *q = *c->state;
  if (!q) return kl_fail(c->e, KILN_ERR_INTERNAL, "oneDNN int8 convolution without its state");
  q->ran_reference = false;
  q->ran_impl = NULL;
  if (kl_tensor_numel(c->out[0]) == 0) return KILN_OK;
  if (kl_tensor_numel(c->in[0]) == 0) return run_reference(q, c);
  void *found;
  q->ran_reference = true;
  kiln_status st = kl_dnnl_cache_get(&q->cache, c, &found);
  if (st != KILN_OK) return st;
  qc_entry *en = found;
  q->ran_reference = en->fallback;
  if (en->fallback) {
    st = kl_isa_ref_allowed(c, "oneDNN has no implementation for these shapes");
    return st != KILN_OK ? st : run_reference(q, c);
  }
  q->ran_impl = en->impl;
  if (kl_dnnl_impl_is_slow(en->impl) && /* oneDNN's int8 reference loops (ref_int8:any) */
      (st = kl_isa_ref_allowed(c, "oneDNN has only its reference loops for these shapes")) !=
          KILN_OK)
    return st;
  if (en->qdw)
    return kl_run_qdw(c, kl_cpu_isa_fns(kl_isa_level()), en->qdw, c->in[0]->data,
                      c->out[0]->data);
  if (en->qgemv) return kl_run_qgemv(c, kl_cpu_isa_fns(kl_isa_level()), en->qgemv);
  kiln_status st2 = execute(q, en, c);
  if (st2 == KILN_OK && en->colsum) mmint_compensate(en, c);
  kl_mmint_scale sc;
  if (st2 == KILN_OK && kl_mmint_scale_of(c, &sc)) kl_mmint_scale_all(c, &sc);
  return st2;
}

static void qc_release(void *state) {
  qc_node *q = state;
  if (!q) return;
  kl_dnnl_cache_clear(&q->cache);
  free(q);
}

kiln_status kl_dnnl_qconv_create(kl_dnnl_engine *eng, kl_cpu_kernel *kernel, void **state,
                                 kl_err *e) {
  qc_node *q = calloc(1, sizeof *q);
  *state = q;
  if (!q) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a oneDNN int8 convolution");
  q->eng = eng;
  kl_dnnl_cache_init(&q->cache, q->slots, sizeof q->slots[0], 1, q, entry_build, entry_free);
  *kernel = (kl_cpu_kernel){"dnnl_qconv", qc_run, qc_release};
  return KILN_OK;
}

bool kl_dnnl_mmint_primitive(void) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni;
}

kiln_status kl_dnnl_mmint_create(kl_dnnl_engine *eng, kl_cpu_kernel *kernel, void **state,
                                 kl_err *e) {
  kiln_status st = kl_dnnl_qconv_create(eng, kernel, state, e);
  if (st == KILN_OK) kernel->name = "dnnl_matmul_u8s8s32";
  return st;
}

void kl_dnnl_qconv_set_channels_last(void *state, unsigned inputs, bool output) {
  qc_node *q = state;
  q->cl_x = inputs & 1u;
  q->cl_y = output;
  kl_dnnl_cache_clear(&q->cache); /* entries made for other layouts */
}

bool kl_dnnl_qconv_ran_reference(const void *state) {
  const qc_node *q = state;
  return q && q->ran_reference;
}

const char *kl_dnnl_qconv_ran_impl(const void *state) {
  const qc_node *q = state;
  return q ? q->ran_impl : NULL;
}

/* ---- MatMulInteger on oneDNN's integer gemm ---- */

bool kl_dnnl_mmint_supports(const kl_graph *g, const kl_node *n) {
  if (!is_mmint(n->op) || n->n_out != 1 || n->n_in < 2) return false;
  const kl_type *a = &g->values[n->in[0]].type, *b = &g->values[n->in[1]].type;
  int64_t count;
  if (a->dtype != KL_U8 || b->dtype != KL_I8 || a->rank < 2 || b->rank != 2 ||
      !is_const(g, n->in[1]) || !kl_dim_known(b->dims[0]) || b->dims[0].size >= 65536 ||
      g->values[n->out[0]].type.dtype != (n->op == KL_OP_MatMulInteger ? KL_I32 : KL_F32))
    return false;
  if (n->n_in > 2 && n->in[2] >= 0) { /* A's zero point: one uint8 value, known at run time */
    const kl_type *z = &g->values[n->in[2]].type;
    if (z->dtype != KL_U8 || !kl_type_numel(z, &count) || count != 1) return false;
  }
  if (n->n_in > 3 && n->in[3] >= 0) { /* B's: constant zeros */
    const kl_value *z = &g->values[n->in[3]];
    if (!is_const(g, n->in[3]) || z->type.dtype != KL_I8 || !kl_type_numel(&z->type, &count))
      return false;
    for (int64_t i = 0; i < count; i++)
      if (((const int8_t *)z->data)[i] != 0) return false;
  }
  const kl_value *w = &g->values[n->in[1]]; /* what the ISA multiplies exactly */
  int lim = kl_dnnl_qconv_weight_bits() == 8 ? 128 : 64;
  if (!kl_type_numel(&w->type, &count)) return false;
  for (int64_t i = 0; i < count; i++)
    if (abs(((const int8_t *)w->data)[i]) > lim) return false;
  return true;
}

/* Y = (A - za) B in int32, A [..., M, K] as rows: dnnl_gemm_u8s8s32 (row-major, alpha 1,
 * beta 0: exact while K * 255 * 128 < 2^31, which kl_dnnl_mmint_supports keeps). */
int kl_dnnl_mmint_run(kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  const kl_tensor *za = c->n_in > 2 ? c->in[2] : NULL;
  kl_tensor *y = c->out[0];
  int64_t k = b->dims[0], n = b->dims[1], m = k ? kl_tensor_numel(a) / k : 0;
  if (kl_tensor_numel(y) == 0) return KILN_OK;
  dnnl_status_t s = dnnl_success;
  if (k == 0) {
    memset(y->data, 0, kl_tensor_nbytes(y));
  } else {
    int32_t co = 0;
    s = dnnl_gemm_u8s8s32('N', 'N', 'F', m, n, k, 1.0f, a->data, k,
                          za ? *(const uint8_t *)za->data : 0, b->data, n, 0, 0.0f, y->data, n,
                          &co);
  }
  if (s != dnnl_success)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "oneDNN failed its integer gemm (%s, %lld x %lld "
                   "x %lld): status %d", kl_op_name(c->node->op), (long long)m, (long long)k,
                   (long long)n, (int)s);
  kl_mmint_scale sc;
  if (kl_mmint_scale_of(c, &sc)) kl_mmint_scale_all(c, &sc);
  return KILN_OK;
}
