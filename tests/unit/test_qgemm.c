/* A Gemm, or a MatMul and the Add of its bias, with a Relu after it or not, between
 * DequantizeLinear and QuantizeLinear nodes as quantize_static writes them:
 *
 *   x -> Q(sx, zx) -> DQ -> Gemm(., DQ(Wq), DQ(Bq int32, sx * sw))  -> [Relu] -> Q -> DQ -> y
 *   x -> Q(sx, zx) -> DQ -> MatMul(., DQ(Wq)) -> Add(., bias)      -> [Relu] -> Q -> DQ -> y
 *
 * At -O2 pass fold_qdq makes one kiln QLinearGemm of it (src/passes/fold_qdq.c), run on
 * oneDNN's int8 matmul (src/backends/cpu/dnnl_qconv.c) or the reference kernel
 * (ref/quant.c). Checked at awkward sizes (M 1, 3, 17; K 5, 33; N 7, 65), uint8 and int8
 * activations, weights per tensor and per column, [K, N] and Gemm's transB [N, K], no
 * bias, an int32 bias and a float one, [N] or [1, N], Gemm's alpha and beta not 1, with
 * and without Relu, on random non-zero data:
 *
 * - -O2's reference kernel against -O0 (the float32 QDQ graph): within one step of the
 *   output scale, where the QDQ graph rounds a float32 sum and QLinearGemm the exact
 *   int32 one (a float bias also rounds to the accumulator's grid first), at most 1 in
 *   50 outputs off;
 * - -O2's fast kernel against -O2's reference kernel: within one step, where oneDNN
 *   multiplies the int32 sum by the float32 scale in float32 and the reference in
 *   double (a product on a half step), at most 1 in 200 outputs (plus one) off; and
 *   the fast kernel must be oneDNN's JIT (dnnl_qconv, no slow path) where oneDNN is used,
 *   or, at level avx2, kiln's matrix-vector product (kiln_qgemv, isa/run_qconv.c) for
 *   uint8 A of at most 4 rows (test_qgemv checks its primitive).
 * The weights are 7-bit ([-64, 64], reduce_range), which oneDNN multiplies exactly on
 * AVX2 (docs/precision.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kl_config.h"
#include "backends/cpu/isa.h"
#include "runtime/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng = 1611;

#define SX 0.037f
#define SY 0.09f

typedef enum { BIAS_NONE, BIAS_QUANTIZED, BIAS_FLOAT } bias_kind;

typedef struct gemm_case {
  int64_t m, k, n;
  kl_dtype act;
  bool per_column, gemm, trans_b, relu;
  bias_kind bias;
  float alpha, beta; /* Gemm's (0: absent, 1) */
  int bias_rank;     /* the bias [N] (0 or 1) or [1, N] (2) */
} gemm_case;

static const gemm_case cases[] = {
    {1, 5, 7, KL_U8, true, true, true, false, BIAS_QUANTIZED, 0, 0, 0},
    {3, 33, 65, KL_U8, true, true, false, true, BIAS_QUANTIZED, 0, 0, 0},
    {17, 33, 7, KL_I8, false, true, true, false, BIAS_NONE, 0, 0, 0},
    {17, 5, 65, KL_I8, true, true, true, true, BIAS_FLOAT, 0, 0, 0},
    {3, 5, 7, KL_U8, false, false, false, false, BIAS_QUANTIZED, 0, 0, 0},
    {1, 33, 65, KL_I8, true, false, false, true, BIAS_FLOAT, 0, 0, 0},
    {17, 33, 65, KL_U8, true, false, false, false, BIAS_FLOAT, 0, 0, 0},
    {3, 33, 7, KL_I8, true, false, false, true, BIAS_NONE, 0, 0, 0}, /* MatMul and Relu */
    /* alpha and beta scale the weights' scales and the bias; a bias [1, N] */
    {3, 33, 65, KL_U8, true, true, true, false, BIAS_FLOAT, 0.75f, 1.5f, 2},
    {17, 5, 7, KL_I8, false, true, false, true, BIAS_QUANTIZED, 1.25f, 0.5f, 2},
    {1, 33, 7, KL_U8, true, true, true, false, BIAS_QUANTIZED, 2.0f, 0, 1},
    {3, 33, 7, KL_U8, true, false, false, false, BIAS_FLOAT, 0, 0, 2}, /* MatMul, Add [1, N] */
};

static int const_f32(kl_graph *g, float v) { return tu_graph_const(g, NULL, KL_F32, 0, NULL, &v); }

static int const_zp(kl_graph *g, kl_dtype t, int z) {
  uint8_t u = (uint8_t)z;
  int8_t s = (int8_t)z;
  return tu_graph_const(g, NULL, t, 0, NULL, t == KL_U8 ? (void *)&u : (void *)&s);
}

/* The graph above for case c, its constants drawn from *seed; with float_out, the
 * product's (or Relu's) float32 result is the output, no QuantizeLinear after it. */
static kl_graph *gemm_graph_out(const gemm_case *c, uint32_t *seed, bool float_out) {
  kl_graph *g = tu_graph_new();
  int64_t m = c->m, k = c->k, n = c->n, ns = c->per_column ? n : 1;
  int64_t xd[2] = {m, k}, wd[2] = {c->trans_b ? n : k, c->trans_b ? k : n};
  int8_t *w = malloc((size_t)(k * n)), wz[65] = {0};
  float ws[65], bs[65], bf[65];
  int32_t bq[65];
  assert_non_null(w);
  for (int64_t i = 0; i < k * n; i++) w[i] = (int8_t)lrintf(tu_rand_f32(seed, -64, 64));
  for (int64_t i = 0; i < n; i++) {
    ws[i] = tu_rand_f32(seed, 0.002f, 0.02f);
    bq[i] = (int32_t)lrintf(tu_rand_f32(seed, -2000, 2000));
    bf[i] = tu_rand_f32(seed, -1, 1);
  }
  for (int64_t i = 0; i < n; i++) bs[i] = SX * ws[c->per_column ? i : 0]; /* as onnxruntime */
  int zx = c->act == KL_U8 ? 121 : -9, zy = c->act == KL_U8 ? (c->relu ? 0 : 131) : -17;
  int x = tu_graph_input(g, "x", KL_F32, 2, xd);
  int s_x = const_f32(g, SX), z_x = const_zp(g, c->act, zx);
  int xdq = TU_OP(g, DequantizeLinear, TU_OP(g, QuantizeLinear, x, s_x, z_x), s_x, z_x);
  int wdq = TU_OP(g, DequantizeLinear, tu_graph_const(g, "w", KL_I8, 2, wd, w),
                  tu_graph_const(g, "w_scale", KL_F32, 1, &ns, ws),
                  tu_graph_const(g, "w_zero_point", KL_I8, 1, &ns, wz));
  free(w);
  if (c->per_column)
    kl_node_set_int(g, g->values[wdq].producer, "axis", c->trans_b ? 0 : 1, NULL);
  int b = KL_ABSENT, br = c->bias_rank == 2 ? 2 : 1;
  int64_t bd[2] = {br == 2 ? 1 : n, n};
  if (c->bias == BIAS_FLOAT) b = tu_graph_const(g, "b", KL_F32, br, bd, bf);
  if (c->bias == BIAS_QUANTIZED) {
    b = TU_OP(g, DequantizeLinear, tu_graph_const(g, "b_q", KL_I32, br, bd, bq),
              tu_graph_const(g, "b_scale", KL_F32, 1, &n, bs));
    kl_node_set_int(g, g->values[b].producer, "axis", br - 1, NULL);
  }
  int y;
  if (c->gemm) {
    y = b == KL_ABSENT ? TU_OP(g, Gemm, xdq, wdq) : TU_OP(g, Gemm, xdq, wdq, b);
    int node = g->values[y].producer;
    if (c->trans_b) kl_node_set_int(g, node, "transB", 1, NULL);
    if (c->alpha != 0) kl_node_set_float(g, node, "alpha", c->alpha, NULL);
    if (c->beta != 0) kl_node_set_float(g, node, "beta", c->beta, NULL);
  } else {
    y = TU_OP(g, MatMul, xdq, wdq);
    if (b != KL_ABSENT) y = TU_OP(g, Add, b, y); /* the bias first: either side folds */
  }
  if (c->relu) y = TU_OP(g, Relu, y);
  if (float_out) {
    kl_graph_add_output(g, y, NULL);
    return g;
  }
  int s_y = const_f32(g, SY), z_y = const_zp(g, c->act, zy);
  int yq = TU_OP(g, QuantizeLinear, y, s_y, z_y);
  tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, s_y, z_y}, 1);
  return g;
}

static kl_graph *gemm_graph(const gemm_case *c, uint32_t *seed) {
  return gemm_graph_out(c, seed, false);
}

static int find_op(const kiln_model *m, kl_op op, int *count) {
  int at = -1;
  *count = 0;
  for (int i = 0; i < m->g->n_nodes; i++)
    if (m->g->nodes[i].op == op) at = i, (*count)++;
  return at;
}

/* Outputs of got and want more than one step apart fail; returns how many differ. */
static int64_t steps_off(const char *what, size_t c, const float *got, const float *want,
                         int64_t n) {
  int64_t off = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]);
    if (d > SY * 1.001)
      fail_msg("case %zu (%s): output %lld is %g, expected %g", c, what, (long long)i,
               (double)got[i], (double)want[i]);
    off += d > 0;
  }
  return off;
}

/* Case gc's -O0 model m0 (reference kernels), and -O2's m2 on the reference and the
 * fast kernels, run on the same random x. */
typedef struct runs {
  kiln_session *s0, *r2, *f2; /* f2: m2 on the fast kernels */
  float *x, *want, *ref, *fast;
  int64_t ny;
} runs;

static void run_three(const gemm_case *gc, kiln_model *m0, kiln_model *m2, runs *r) {
  int64_t nx = gc->m * gc->k, n0, nr, nf;
  r->ny = gc->m * gc->n;
  r->x = malloc(sizeof(float) * (size_t)nx);
  assert_non_null(r->x);
  for (int64_t i = 0; i < nx; i++) r->x[i] = tu_rand_f32(&rng, -4, 4);
  r->s0 = tu_session(m0, true, 0), r->r2 = tu_session(m2, true, 0);
  r->f2 = tu_session(m2, false, 0);
  r->want = tu_run_f32(r->s0, m0, &r->x, &n0);
  r->ref = tu_run_f32(r->r2, m2, &r->x, &nr);
  r->fast = tu_run_f32(r->f2, m2, &r->x, &nf);
  assert_int_equal(n0, r->ny);
  assert_int_equal(nr, r->ny);
  assert_int_equal(nf, r->ny);
}

static void free_runs(runs *r) {
  free(r->want), free(r->ref), free(r->fast), free(r->x);
  kiln_session_free(r->s0), kiln_session_free(r->r2), kiln_session_free(r->f2);
}

static void test_gemm(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const gemm_case *gc = &cases[c];
    uint32_t seed = rng;
    kiln_model *m0 = tu_model_of(gemm_graph(gc, &seed), 0);
    seed = rng;
    kiln_model *m2 = tu_model_of(gemm_graph(gc, &seed), 2);
    rng = seed;
    int count, node = find_op(m2, KL_OP_KilnQLinearGemm, &count);
    if (count != 1) fail_msg("case %zu: %d QLinearGemm", c, count);
    assert_int_equal(m2->g->n_nodes, 3); /* Q(x), QLinearGemm, DQ(y): no float32 left */
    assert_int_equal(kl_node_attr(&m2->g->nodes[node], "activation") != NULL, gc->relu);
    runs r;
    run_three(gc, m0, m2, &r);
    int64_t ny = r.ny;
    float *want = r.want, *ref = r.ref, *fast = r.fast;
    kiln_session *f2 = r.f2;
    int64_t off = steps_off("-O2 reference against -O0", c, ref, want, ny);
    if (off * 50 > ny + 50) fail_msg("case %zu: %lld outputs one step off -O0", c, (long long)off);
    off = steps_off("fast against reference", c, fast, ref, ny);
    if (off * 200 > ny + 200) fail_msg("case %zu: %lld fast outputs one step off", c, (long long)off);
    int zero = 0, clipped = 0; /* the data reach Relu's floor and the bias matters */
    for (int64_t i = 0; i < ny; i++) zero += want[i] == 0, clipped += want[i] < 0;
    if (gc->relu) assert_int_equal(clipped, 0);
    if (gc->relu && ny >= 7 && zero == 0) fail_msg("case %zu: Relu never clips", c);
    if (KL_HAVE_DNNL && kl_isa_level() != KL_ISA_GENERIC &&
        (strcmp(kl_session_kernel_name(f2, node), "dnnl_qconv") != 0 ||
         kl_session_slow_path(f2, node)))
      fail_msg("case %zu: ran on '%s' (%s)", c, kl_session_kernel_name(f2, node),
               kl_session_slow_path(f2, node) ? kl_session_slow_path(f2, node) : "fast");
    const char *impl = kl_session_kernel_impl(f2, node);
    bool few = gc->act == KL_U8 && gc->m <= 4; /* kiln's product at avx2 */
    if (KL_HAVE_DNNL && kl_isa_level() == KL_ISA_AVX2 &&
        few != (impl && strncmp(impl, "kiln_qgemv", 10) == 0))
      fail_msg("case %zu: ran on %s", c, impl ? impl : "(none)");
    free_runs(&r);
    kiln_model_free(m0), kiln_model_free(m2);
  }
}

/* What QLinearGemm does not take: a Gemm with a negative alpha, a bias Add whose MatMul
 * something else also reads, a Relu of a Gemm that something else also reads. The
 * product still runs on the codes, as MatMulInteger with a float32 result
 * (fold_float_product; test_float_output checks its numbers), which fuse_int_matmul makes
 * one kiln MatMulIntegerToFloat with its scale. */
static void test_gemm_unfolded(void **state) {
  (void)state;
  for (int v = 0; v < 3; v++) {
    gemm_case gc = {3, 5, 7, KL_U8, true, v != 1, false, v == 2, BIAS_QUANTIZED, 0, 0, 0};
    uint32_t seed = 5;
    kl_graph *g = gemm_graph(&gc, &seed);
    kl_op op = v == 1 ? KL_OP_MatMul : KL_OP_Gemm;
    for (int i = 0; i < g->n_nodes; i++) {
      if (g->nodes[i].op != op) continue;
      if (v == 0) assert_int_equal(kl_node_set_float(g, i, "alpha", -2.0f, NULL), KILN_OK);
      else tu_graph_output_node(g, KL_OP_Identity, 1, (int[]){g->nodes[i].out[0]}, 1);
      break;
    }
    kiln_model *m = tu_model_of(g, 2);
    int count;
    find_op(m, KL_OP_KilnQLinearGemm, &count);
    assert_int_equal(count, 0);
    find_op(m, op, &count);
    assert_int_equal(count, 0);
    find_op(m, KL_OP_MatMulInteger, &count); /* fused with its scale (fuse_int_matmul) */
    assert_int_equal(count, 0);
    find_op(m, KL_OP_KilnMatMulIntegerToFloat, &count);
    assert_int_equal(count, 1);
    kiln_model_free(m);
  }
}

/* The cases above with the product's float32 result as the output (a classifier's last
 * Gemm as kiln quantize writes it): at -O2 one MatMulIntegerToFloat on the codes (the
 * MatMulInteger, Cast, Mul and Add of fold_float_product), no Gemm or MatMul left; -O2's reference kernels against -O0 (the float32 QDQ graph) and -O2's
 * fast kernels against its reference ones within float32 rounding of the sums (the
 * int32 sums are exact), the fast one no slow path. */
static void test_float_output(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const gemm_case *gc = &cases[c];
    uint32_t seed = rng;
    kiln_model *m0 = tu_model_of(gemm_graph_out(gc, &seed, true), 0);
    seed = rng;
    kiln_model *m2 = tu_model_of(gemm_graph_out(gc, &seed, true), 2);
    rng = seed;
    int count, node = find_op(m2, KL_OP_KilnMatMulIntegerToFloat, &count);
    if (count != 1) fail_msg("case %zu: %d MatMulIntegerToFloat", c, count);
    find_op(m2, gc->gemm ? KL_OP_Gemm : KL_OP_MatMul, &count);
    assert_int_equal(count, 0);
    runs r;
    run_three(gc, m0, m2, &r);
    int64_t ny = r.ny;
    float *want = r.want, *ref = r.ref, *fast = r.fast;
    kiln_session *f2 = r.f2;
    double big = 0;
    int64_t nonzero = 0;
    for (int64_t i = 0; i < ny; i++) big = fmax(big, fabs(want[i])), nonzero += want[i] != 0;
    assert_true(big > 0.1 && nonzero > ny / 3); /* real sums, not zeros */
    for (int64_t i = 0; i < ny; i++) {
      if (fabs((double)ref[i] - want[i]) > 1e-5 * big)
        fail_msg("case %zu: output %lld is %.9g at -O2, %.9g at -O0", c, (long long)i,
                 (double)ref[i], (double)want[i]);
      if (fabs((double)fast[i] - ref[i]) > 1e-6 * big)
        fail_msg("case %zu: output %lld is %.9g on the fast kernels, %.9g on the reference",
                 c, (long long)i, (double)fast[i], (double)ref[i]);
    }
    const char *kernel = kl_session_kernel_name(f2, node);
    if (kl_isa_level() != KL_ISA_GENERIC &&
        (!kernel || !strcmp(kernel, "ref") || kl_session_slow_path(f2, node)))
      fail_msg("case %zu: MatMulIntegerToFloat ran on '%s' (%s)", c, kernel ? kernel : "(none)",
               kl_session_slow_path(f2, node) ? kl_session_slow_path(f2, node) : "fast");
    free_runs(&r);
    kiln_model_free(m0), kiln_model_free(m2);
  }
}

/* kiln.QLinearGemm read from a file, at its edges, on kiln's matrix-vector product
 * (kiln_qgemv) against the reference kernel: int32 biases at INT32_MAX and INT32_MIN
 * under a zero point of 255 (bias - za * colsum(B) overflowed int32), a K of 140,000
 * codes of 255 against weights of 64 (the int32 sum overflowed), a NaN weight scale (a
 * NaN converted to int). Undefined behaviour (UBSan) and outputs that wrapped, before
 * issue 20's round 8; now the node goes to oneDNN's product where its sums do not fit in
 * int32, and a NaN gives the lowest code, as the reference. */
static void test_qgemv_edges(void **state) {
  (void)state;
  static const struct {
    const char *what;
    int64_t k;
    int zx;
    int32_t bias0, bias1;
    float sb;
    bool qgemv; /* still kiln's product */
  } edges[] = {
      {"biases at the int32 limits, zero point 0", 64, 0, INT32_MAX, INT32_MIN, 0.02f, false},
      {"biases at the int32 limits, zero point 255", 64, 255, INT32_MIN, INT32_MAX, 0.02f,
       false},
      {"K of 140000", 140000, 0, 0, 0, 0.02f, false},
      {"NaN weight scale", 64, 0, 5, -5, NAN, true},
      {"plain", 64, 0, 5, -5, 0.02f, true},
  };
  for (size_t c = 0; c < sizeof edges / sizeof edges[0]; c++) {
    int64_t k = edges[c].k, n = 2, xd[2] = {1, k}, bd[2] = {k, n};
    kl_graph *g = tu_graph_new();
    int x = tu_graph_input(g, "x", KL_F32, 2, xd);
    int s_x = const_f32(g, 1.0f), z_x = const_zp(g, KL_U8, edges[c].zx);
    int xq = TU_OP(g, QuantizeLinear, x, s_x, z_x); /* x of 255: codes of 255 */
    int8_t *w = malloc((size_t)(k * n));
    assert_non_null(w);
    for (int64_t i = 0; i < k * n; i++) w[i] = i % n ? -64 : 64;
    int32_t bias[2] = {edges[c].bias0, edges[c].bias1};
    int in[9] = {xq, s_x, z_x, tu_graph_const(g, "w", KL_I8, 2, bd, w),
                 const_f32(g, edges[c].sb), const_zp(g, KL_I8, 0), const_f32(g, 0.5f),
                 const_zp(g, KL_U8, 7), tu_graph_const(g, "bias", KL_I32, 1, &n, bias)};
    free(w);
    int y = tu_graph_value(g, "y");
    int node = tu_graph_node(g, KL_OP_KilnQLinearGemm, "qgemm", 9, in, 1, &y);
    kl_graph_add_output(g, TU_OP(g, DequantizeLinear, y, in[6], in[7]), NULL);
    kiln_model *m = tu_model_of(g, 0);
    kiln_session *ref = tu_session(m, true, 0), *fast = tu_session(m, false, 0);
    float *xv = tu_rand_vec(&rng, (size_t)k, 255, 255);
    int64_t nr, nf;
    float *want = tu_run_f32(ref, m, &xv, &nr), *got = tu_run_f32(fast, m, &xv, &nf);
    assert_int_equal(nr, n);
    assert_int_equal(nf, n);
    for (int64_t j = 0; j < n; j++)
      if (got[j] != want[j])
        fail_msg("%s: column %lld is %g, the reference's %g", edges[c].what, (long long)j,
                 (double)got[j], (double)want[j]);
    const char *impl = kl_session_kernel_impl(fast, node);
    if (KL_HAVE_DNNL && kl_isa_level() == KL_ISA_AVX2 &&
        edges[c].qgemv != (impl && strncmp(impl, "kiln_qgemv", 10) == 0))
      fail_msg("%s: ran on %s", edges[c].what, impl ? impl : "(none)");
    free(xv), free(want), free(got);
    kiln_session_free(ref), kiln_session_free(fast);
    kiln_model_free(m);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm),
      cmocka_unit_test(test_gemm_unfolded),
      cmocka_unit_test(test_float_output),
      cmocka_unit_test(test_qgemv_edges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
