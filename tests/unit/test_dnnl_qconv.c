/* The int8 convolution and matrix product on oneDNN (src/backends/cpu/dnnl_qconv.c)
 * against the reference QLinearConv and QLinearMatMul (test_matmul: rows of 1 and 17, a
 * batch of matrices, uint8 and int8 A, per-column and per-tensor B), at awkward sizes: odd channel counts, depthwise and grouped, strides,
 * dilations, pads, 1x1 and 1-D, uint8 and int8 activations with zero points, weights
 * per tensor and per channel, with and without a bias. Each graph is
 *
 *   x (float32) -> QuantizeLinear(sx, zx) -> QLinearConv -> DequantizeLinear(sy, zy)
 *
 * so that the sessions take and give float32, on random (non-zero) data and weights.
 * oneDNN multiplies the int32 sum by the float32 scale in float32 where the reference
 * does it in double: the two differ by one step (sy) where the product lands on a half
 * step, which the check allows and counts (at most 1 in 200 outputs); every other
 * output is equal. The weights are 7-bit ([-64, 64], what quantize_static's
 * reduce_range makes): on AVX2 without VNNI oneDNN adds pairs of uint8 x int8 products
 * in int16 with saturation (vpmaddubsw), exact only then (docs/precision.md); the
 * fast path is taken only for such weights there (test_weights_range). Every node must
 * run on oneDNN's JIT, not its reference loops (kl_session_slow_path); where oneDNN has
 * only those (ref_int8:any), the option fast_only refuses the run (test_fast_only). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kl_config.h"
#include "runtime/session.h"
#if KL_HAVE_DNNL
#include "backends/cpu/dnnl.h"
#endif
#include "backends/cpu/isa.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng = 4242;

typedef struct qconv_case {
  const char *what;
  int rank;
  int64_t x[5], w[5];
  int64_t group;
  int64_t strides[3], dilations[3], pads[6];
  kl_dtype act;  /* KL_U8 or KL_I8 */
  int zx, zy;
  bool per_channel, bias;
} qconv_case;

static const qconv_case cases[] = {
    {"3x3 pad 1, 3 -> 13, stride 2, u8", 4, {1, 3, 17, 15}, {13, 3, 3, 3}, 1, {2, 2}, {1, 1},
     {1, 1, 1, 1}, KL_U8, 121, 7, true, true},
    {"depthwise 3x3 stride 2 pad 1, 19 channels, u8", 4, {1, 19, 13, 11}, {19, 1, 3, 3}, 19,
     {2, 2}, {1, 1}, {1, 1, 1, 1}, KL_U8, 3, 130, true, true},
    {"depthwise 5x5 pad 2, s8", 4, {2, 24, 9, 10}, {24, 1, 5, 5}, 24, {1, 1}, {1, 1},
     {2, 2, 2, 2}, KL_I8, -5, 11, true, true},
    {"1x1 37 -> 29, u8, per tensor, no bias", 4, {1, 37, 7, 9}, {29, 37, 1, 1}, 1, {1, 1},
     {1, 1}, {0, 0, 0, 0}, KL_U8, 128, 0, false, false},
    {"grouped 3x3 (4 groups), asymmetric pads, u8", 4, {1, 32, 12, 13},
     {32, 8, 3, 3}, 4, {1, 1}, {1, 1}, {1, 0, 2, 1}, KL_U8, 77, 200, true, true},
    {"1x1 960 -> 160 at 7x7, u8", 4, {1, 960, 7, 7}, {160, 960, 1, 1}, 1, {1, 1}, {1, 1},
     {0, 0, 0, 0}, KL_U8, 0, 128, true, true},
    {"depthwise 96 stride 2 at 28x28, u8", 4, {1, 96, 28, 28}, {96, 1, 3, 3}, 96, {2, 2},
     {1, 1}, {1, 1, 1, 1}, KL_U8, 0, 0, true, true},
    {"1x1 32 -> 16 at 28x28, u8", 4, {1, 32, 28, 28}, {16, 32, 1, 1}, 1, {1, 1}, {1, 1},
     {0, 0, 0, 0}, KL_U8, 0, 128, true, true},
    {"1x1 stride 2 64 -> 40, s8", 4, {1, 64, 11, 11}, {40, 64, 1, 1}, 1, {2, 2}, {1, 1},
     {0, 0, 0, 0}, KL_I8, 0, -3, true, true},
    {"1-D kernel 3, u8", 3, {1, 10, 31}, {6, 10, 3}, 1, {1}, {1}, {1, 1}, KL_U8, 9, 60, true,
     true},
    /* unpadded, with zero points: X's folded into the bias per output channel (its
     * group's weights), Y's a post-op (dnnl_qconv.c) */
    {"depthwise 3x3 unpadded, zero points, u8", 4, {2, 20, 9, 8}, {20, 1, 3, 3}, 20, {1, 1},
     {1, 1}, {0, 0, 0, 0}, KL_U8, 90, 33, true, true},
    {"grouped 1x1 (4 groups), zero points, s8, no bias", 4, {1, 32, 5, 7}, {16, 8, 1, 1}, 4,
     {1, 1}, {1, 1}, {0, 0, 0, 0}, KL_I8, -20, 17, true, false},
    {"3x3 stride 2 unpadded, zero points, u8", 4, {1, 16, 11, 12}, {24, 16, 3, 3}, 1, {2, 2},
     {1, 1}, {0, 0, 0, 0}, KL_U8, 200, 5, false, true},
};

static int const_f32(kl_graph *g, float v) {
  return tu_graph_const(g, NULL, KL_F32, 0, NULL, &v);
}

static int const_zp(kl_graph *g, kl_dtype t, int z) {
  uint8_t u = (uint8_t)z;
  int8_t s = (int8_t)z;
  return tu_graph_const(g, NULL, t, 0, NULL, t == KL_U8 ? (const void *)&u : (const void *)&s);
}

/* A QLinearConv of case c over xq (quantized with 0.03 and c->zx), weights in
 * [-wmax, wmax]; its output, quantized with SY and c->zy. */
#define SY 0.05f
static int add_qconv(kl_graph *g, const qconv_case *c, int xq, int wmax) {
  int64_t m = c->w[0], wn = 1;
  for (int i = 0; i < c->rank; i++) wn *= c->w[i];
  int8_t *w = malloc((size_t)wn);
  float *ws = malloc(sizeof(float) * (size_t)m);
  int8_t *wz = calloc((size_t)m, 1);
  int32_t *b = malloc(sizeof(int32_t) * (size_t)m);
  assert_true(w && ws && wz && b);
  for (int64_t i = 0; i < wn; i++) w[i] = (int8_t)lrintf(tu_rand_f32(&rng, -wmax, wmax));
  for (int64_t i = 0; i < m; i++) {
    ws[i] = tu_rand_f32(&rng, 0.002f, 0.02f);
    b[i] = (int32_t)lrintf(tu_rand_f32(&rng, -3000, 3000));
  }
  int64_t nsc = c->per_channel ? m : 1;
  int sx = const_f32(g, 0.03f), zx = const_zp(g, c->act, c->zx);
  int wq = tu_graph_const(g, NULL, KL_I8, c->rank, c->w, w);
  int wsc = tu_graph_const(g, NULL, KL_F32, 1, &nsc, ws);
  int wzp = tu_graph_const(g, NULL, KL_I8, 1, &nsc, wz);
  int sy = const_f32(g, SY), zy = const_zp(g, c->act, c->zy);
  int bias = c->bias ? tu_graph_const(g, NULL, KL_I32, 1, &m, b) : KL_ABSENT;
  int in[9] = {xq, sx, zx, wq, wsc, wzp, sy, zy, bias};
  int yq = tu_graph_op(g, KL_OP_QLinearConv, c->bias ? 9 : 8, in);
  int n = g->values[yq].producer;
  int sp = c->rank - 2;
  tu_node_ints(g, n, "strides", sp, c->strides);
  tu_node_ints(g, n, "dilations", sp, c->dilations);
  tu_node_ints(g, n, "pads", 2 * sp, c->pads);
  assert_int_equal(kl_node_set_int(g, n, "group", c->group, NULL), KILN_OK);
  free(w), free(ws), free(wz), free(b);
  return yq;
}

/* x -> QuantizeLinear -> the QLinearConv of each case in turn -> DequantizeLinear: the
 * cases chained share the activation dtype and zero points (the values between them
 * stay channels-last). */
static kl_graph *qconv_graph(const qconv_case *c, int count, int wmax) {
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, c->rank, c->x);
  int y = TU_OP(g, QuantizeLinear, x, const_f32(g, 0.03f), const_zp(g, c->act, c->zx));
  for (int i = 0; i < count; i++) y = add_qconv(g, &c[i], y, wmax);
  int sy = const_f32(g, SY), zy = const_zp(g, c[count - 1].act, c[count - 1].zy);
  tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){y, sy, zy}, 1);
  return g;
}

static bool allow_slow; /* a case that oneDNN refuses: the reference kernel runs it */

/* Runs the chain of `count` cases from c on the reference and the fast kernels; returns
 * the last node's kernel name ("dnnl_qconv" expected) and checks the outputs (see the
 * top of the file). */
static void check_case(const qconv_case *c, int count, int wmax, char *kernel,
                       size_t kernel_size) {
  kiln_model *m = tu_model_of(qconv_graph(c, count, wmax), 0);
  int64_t n = 1;
  for (int i = 0; i < c->rank; i++) n *= c->x[i];
  float *x = malloc(sizeof(float) * (size_t)n);
  assert_non_null(x);
  for (int64_t i = 0; i < n; i++) x[i] = tu_rand_f32(&rng, -4, 4);
  kiln_session *ref = tu_session(m, true, 0), *fast = tu_session(m, false, 0);
  kl_session_poison_workspace(fast);
  int64_t n_want, n_got;
  float *want = tu_run_f32(ref, m, &x, &n_want);
  for (int r = 0; r < 2; r++) { /* the second run from the primitive cache */
    float *got = tu_run_f32(fast, m, &x, &n_got);
    assert_int_equal(n_got, n_want);
    int64_t off_by_one = 0;
    for (int64_t k = 0; k < n_want; k++) {
      double d = fabs((double)got[k] - want[k]);
      if (d > SY * 1.001)
        fail_msg("%s (run %d): output %lld is %g, the reference %g", c->what, r + 1,
                 (long long)k, (double)got[k], (double)want[k]);
      off_by_one += d > 0;
    }
    if (off_by_one * 200 > n_want)
      fail_msg("%s: %lld of %lld outputs one step off", c->what, (long long)off_by_one,
               (long long)n_want);
    free(got);
  }
  for (int i = 0, j = 0; i < m->g->n_nodes; i++)
    if (m->g->nodes[i].op == KL_OP_QLinearConv) {
      snprintf(kernel, kernel_size, "%s", kl_session_kernel_name(fast, i));
      const qconv_case *cc = &c[j++];
      const char *impl = kl_session_kernel_impl(fast, i);
      bool one = cc->group == 1 && cc->rank == 4 && cc->w[2] == 1 && cc->w[3] == 1;
      for (int p = 0; p < 4; p++) one = one && cc->pads[p] == 0;
      /* with the zero points out of oneDNN's attributes (X's in the bias, Y's a
       * post-op: dnnl_qconv.c), AMX's brgemm 1x1 convolutions take these */
      if (KL_HAVE_DNNL && kl_isa_level() == KL_ISA_AMX && one && !allow_slow &&
          !(impl && strstr(impl, "brgconv_1x1:avx512_core_amx")))
        fail_msg("%s: ran on '%s' at amx, expected brgconv_1x1:avx512_core_amx_int8",
                 cc->what, impl ? impl : "-");
      if (kl_session_slow_path(fast, i) && !allow_slow)
        fail_msg("%s: ran on %s", c->what, kl_session_slow_path(fast, i));
    }
  free(want);
  free(x);
  kiln_session_free(ref);
  kiln_session_free(fast);
  kiln_model_free(m);
}

static void test_cases(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char kernel[64] = "";
    check_case(&cases[i], 1, 64, kernel, sizeof kernel);
    if (KL_HAVE_DNNL && kl_isa_level() != KL_ISA_GENERIC && strcmp(kernel, "dnnl_qconv") != 0)
      fail_msg("%s: ran on kernel '%s', expected dnnl_qconv", cases[i].what, kernel);
  }
}

/* Two QLinearConvs in a row: the value between them is held channels-last (no
 * reorder); the first one reads a plain X, the last one writes a plain Y. */
static const qconv_case chain[] = {
    {"chain: 3x3 pad 1, 11 -> 24, u8", 4, {1, 11, 13, 14}, {24, 11, 3, 3}, 1, {1, 1}, {1, 1},
     {1, 1, 1, 1}, KL_U8, 100, 90, true, true},
    {"chain: depthwise 3x3 stride 2, 24", 4, {1, 24, 13, 14}, {24, 1, 3, 3}, 24, {2, 2},
     {1, 1}, {1, 1, 1, 1}, KL_U8, 90, 20, true, true},
    {"chain: 1x1 24 -> 9", 4, {1, 24, 7, 7}, {9, 24, 1, 1}, 1, {1, 1}, {1, 1},
     {0, 0, 0, 0}, KL_U8, 20, 128, false, true},
};

static void test_chain(void **state) {
  (void)state;
  char kernel[64] = "";
  check_case(chain, 3, 64, kernel, sizeof kernel);
  if (KL_HAVE_DNNL && kl_isa_level() != KL_ISA_GENERIC && strcmp(kernel, "dnnl_qconv") != 0)
    fail_msg("chain: ran on kernel '%s', expected dnnl_qconv", kernel);
}

/* A chain whose second node oneDNN refuses (a stride of 2^62): the reference kernel
 * runs it on plain copies of the channels-last X the first one wrote. */
static void test_chain_fallback(void **state) {
  (void)state;
  qconv_case two[2] = {chain[0], chain[2]};
  memcpy(two[1].x, two[0].x, sizeof two[1].x);
  two[1].x[1] = 24;
  two[1].w[1] = 24;
  two[1].strides[0] = INT64_C(1) << 62;
  char kernel[64] = "";
  allow_slow = true;
  check_case(two, 2, 64, kernel, sizeof kernel);
  allow_slow = false;
  if (KL_HAVE_DNNL && kl_isa_level() != KL_ISA_GENERIC && strcmp(kernel, "ref") != 0)
    fail_msg("ran on kernel '%s', expected ref", kernel);
}

/* A grouped convolution of 5 input channels per group, dilated: oneDNN 2.6 has only its
 * reference loops for it at AVX2 (ref_int8:any). A plain session runs it and reports
 * the slow path; one with fast_only refuses the run, naming the node and the path.
 * Where nothing is slow (KILN_ISA=generic, where oneDNN is not used and kiln's portable
 * kernel is the only one; a oneDNN with a JIT for this case, as on VNNI), fast_only
 * must run it, and oneDNN's implementation, when it ran one, must not be a ref. */
static void test_fast_only(void **state) {
  (void)state;
  static const qconv_case slow = {"grouped dilated", 4, {1, 20, 12, 13}, {28, 5, 3, 3}, 4,
                                  {1, 1}, {2, 2}, {1, 0, 2, 1}, KL_U8, 77, 200, true, true};
  char kernel[64] = "";
  allow_slow = true;
  check_case(&slow, 1, 64, kernel, sizeof kernel); /* right, on whatever it runs */
  allow_slow = false;
  kiln_model *m = tu_model_of(qconv_graph(&slow, 1, 64), 0);
  float *x = calloc(20 * 12 * 13, sizeof(float));
  assert_non_null(x);
  kiln_session *plain = tu_session(m, false, 0);
  int64_t n;
  free(tu_run_f32(plain, m, &x, &n));
  int node = -1;
  for (int i = 0; i < m->g->n_nodes; i++)
    if (m->g->nodes[i].op == KL_OP_QLinearConv) node = i;
  const char *path = kl_session_slow_path(plain, node);
  const char *impl = kl_session_kernel_impl(plain, node);
  if (!path && impl && strstr(impl, "ref"))
    fail_msg("oneDNN ran %s without its slow path being reported", impl);
  if (path) assert_non_null(strstr(path, "ref"));
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "fast_only", 1), KILN_OK);
  kiln_session *strict = NULL;
  assert_int_equal(kiln_session_create(m, o, &strict), KILN_OK);
  kiln_tensor_info info;
  assert_int_equal(kiln_model_input_info(m, 0, &info), KILN_OK);
  assert_int_equal(kiln_session_set_input(strict, info.name, KILN_DTYPE_FLOAT32, info.rank,
                                          info.dims, x, sizeof(float) * 20 * 12 * 13),
                   KILN_OK);
  kiln_status st = kiln_session_run(strict);
  const char *msg = kiln_session_error(strict);
  if (!path && st != KILN_OK) fail_msg("nothing slow, yet fast_only refused: %s", msg);
  if (path) {
    assert_int_equal(st, KILN_ERR_UNSUPPORTED);
    if (!strstr(msg, "fast_only") || !strstr(msg, path) || !strstr(msg, "QLinearConv"))
      fail_msg("fast_only's message: %s", msg);
  }
  kiln_options_free(o);
  kiln_session_free(strict);
  kiln_session_free(plain);
  kiln_model_free(m);
  free(x);
}

/* ---- QLinearMatMul: A [..., M, K] (a graph input, quantized) times constant B [K, N] ---- */

typedef struct qmm_case {
  const char *what;
  int rank;
  int64_t a[3];
  int64_t n;
  kl_dtype act;
  int za, zy;
  bool per_column;
} qmm_case;

static const qmm_case mm_cases[] = {
    {"1 x 37 by 37 x 29, u8, per column", 2, {1, 37}, 29, KL_U8, 130, 7, true},
    {"17 x 64 by 64 x 40, s8, per tensor", 2, {17, 64}, 40, KL_I8, -9, 3, false},
    {"3 x 5 x 96 by 96 x 33, u8", 3, {3, 5, 96}, 33, KL_U8, 0, 128, true},
    {"2 x 9 x 23 by 23 x 65, s8", 3, {2, 9, 23}, 65, KL_I8, 5, -100, true},
};

static kl_graph *qmm_graph(const qmm_case *c) {
  kl_graph *g = tu_graph_new();
  int64_t k = c->a[c->rank - 1], n = c->n, wd[2] = {k, n}, ns = c->per_column ? n : 1;
  int8_t *w = malloc((size_t)(k * n)), *wz = calloc((size_t)n, 1);
  float *ws = malloc(sizeof(float) * (size_t)n);
  assert_true(w && wz && ws);
  for (int64_t i = 0; i < k * n; i++) w[i] = (int8_t)lrintf(tu_rand_f32(&rng, -64, 64));
  for (int64_t i = 0; i < n; i++) ws[i] = tu_rand_f32(&rng, 0.002f, 0.02f);
  int x = tu_graph_input(g, "x", KL_F32, c->rank, c->a);
  int sx = const_f32(g, 0.03f), zx = const_zp(g, c->act, c->za);
  int xq = TU_OP(g, QuantizeLinear, x, sx, zx);
  int wq = tu_graph_const(g, NULL, KL_I8, 2, wd, w);
  int wsc = tu_graph_const(g, NULL, KL_F32, 1, &ns, ws);
  int wzp = tu_graph_const(g, NULL, KL_I8, 1, &ns, wz);
  int sy = const_f32(g, SY), zy = const_zp(g, c->act, c->zy);
  int yq = TU_OP(g, QLinearMatMul, xq, sx, zx, wq, wsc, wzp, sy, zy);
  tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, sy, zy}, 1);
  free(w), free(wz), free(ws);
  return g;
}

static void test_matmul(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof mm_cases / sizeof mm_cases[0]; i++) {
    const qmm_case *c = &mm_cases[i];
    kiln_model *m = tu_model_of(qmm_graph(c), 0);
    int64_t n = 1;
    for (int d = 0; d < c->rank; d++) n *= c->a[d];
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    for (int64_t k = 0; k < n; k++) x[k] = tu_rand_f32(&rng, -4, 4);
    kiln_session *ref = tu_session(m, true, 0), *fast = tu_session(m, false, 0);
    kl_session_poison_workspace(fast);
    int64_t n_want, n_got, off = 0;
    float *want = tu_run_f32(ref, m, &x, &n_want), *got = tu_run_f32(fast, m, &x, &n_got);
    assert_int_equal(n_got, n_want);
    for (int64_t k = 0; k < n_want; k++) {
      double d = fabs((double)got[k] - want[k]);
      if (d > SY * 1.001)
        fail_msg("%s: output %lld is %g, the reference %g", c->what, (long long)k,
                 (double)got[k], (double)want[k]);
      off += d > 0;
    }
    if (off * 200 > n_want + 200) fail_msg("%s: %lld outputs one step off", c->what, (long long)off);
    for (int k = 0; k < m->g->n_nodes; k++)
      if (m->g->nodes[k].op == KL_OP_QLinearMatMul && KL_HAVE_DNNL &&
          kl_isa_level() != KL_ISA_GENERIC &&
          (strcmp(kl_session_kernel_name(fast, k), "dnnl_qconv") != 0 ||
           kl_session_slow_path(fast, k)))
        fail_msg("%s: ran on '%s' (%s)", c->what, kl_session_kernel_name(fast, k),
                 kl_session_slow_path(fast, k) ? kl_session_slow_path(fast, k) : "fast");
    free(want), free(got), free(x);
    kiln_session_free(ref), kiln_session_free(fast);
    kiln_model_free(m);
  }
}

/* Full-range weights: oneDNN only where it multiplies them exactly (VNNI, AMX), else
 * the reference kernel, right either way. */
static void test_weights_range(void **state) {
  (void)state;
  char kernel[64] = "";
  check_case(&cases[0], 1, 127, kernel, sizeof kernel);
#if KL_HAVE_DNNL
  if (kl_isa_level() == KL_ISA_GENERIC) return;
  const char *want = kl_dnnl_qconv_weight_bits() == 8 ? "dnnl_qconv" : "ref";
  if (strcmp(kernel, want) != 0) fail_msg("ran on '%s', expected %s", kernel, want);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cases),
      cmocka_unit_test(test_weights_range),
      cmocka_unit_test(test_chain),
      cmocka_unit_test(test_chain_fallback),
      cmocka_unit_test(test_fast_only),
      cmocka_unit_test(test_matmul),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
