/* The fold_qdq pass (src/passes/fold_qdq.c) on small QDQ graphs, as onnxruntime's
 * quantize_static writes them:
 *
 *   x -> Q -> DQ -> Conv(., DQ(Wq), DQ(Bq)) -> Q -> DQ -> y     (a second reader of the
 *                                                               first DQ: an Add)
 *
 * At -O2 the Conv and its QuantizeLinear become one QLinearConv reading the quantized
 * values; the DequantizeLinear that the Add also reads stays. The folded graph sums in
 * int32 and rounds once where the QDQ graph rounds a float32 sum: the outputs agree
 * within one step of the output scale, and all but a few (at most 1 in 100) exactly;
 * a float bias, rounded to the accumulator's grid first, likewise. Weights outside
 * [-64, 64] fold only where the backend multiplies them exactly (int8_weight_bits:
 * VNNI), else the graph keeps its float32 convolution. A MatMul of constant 2-D weights
 * (per column) becomes QLinearMatMul likewise (test_matmul).
 *
 * The other way (test_qoperator_wide): a QLinearConv or QLinearMatMul read as such (the
 * QOperator form) whose weights the int8 kernels cannot multiply exactly (8-bit ones
 * without VNNI, uint8 ones, zero points not 0) becomes DequantizeLinear -> Conv or
 * MatMul of float32 weights -> QuantizeLinear, which the float32 kernels run (it ran on
 * the reference kernel): within one step of -O0's exact int32 sums, at most 1 output in
 * 50 off, and no node on the reference kernel (but at the generic level, which has no
 * int8 convolution but the reference). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/isa.h"
#include "passes/pass.h"
#include "runtime/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng = 99;

#define SY 0.05f

static int const_f32(kl_graph *g, float v) { return tu_graph_const(g, NULL, KL_F32, 0, NULL, &v); }

static int const_u8(kl_graph *g, uint8_t v) { return tu_graph_const(g, NULL, KL_U8, 0, NULL, &v); }

typedef enum { BIAS_NONE, BIAS_QUANTIZED, BIAS_FLOAT } bias_kind;

/* The graph above: x [1, 6, 9, 7], W [10, 6, 3, 3] in [-wmax, wmax], per channel. */
static kl_graph *qdq_graph(int wmax, bias_kind bias) {
  kl_graph *g = tu_graph_new();
  int64_t xd[4] = {1, 6, 9, 7}, wd[4] = {10, 6, 3, 3}, m = 10;
  int8_t w[540], wz[10] = {0};
  float ws[10], bf[10], bs[10];
  int32_t bq[10];
  float sx = 0.03f;
  for (int i = 0; i < 540; i++) w[i] = (int8_t)lrintf(tu_rand_f32(&rng, -wmax, wmax));
  for (int i = 0; i < 10; i++) {
    ws[i] = tu_rand_f32(&rng, 0.002f, 0.02f);
    bs[i] = sx * ws[i]; /* as onnxruntime makes the bias scale */
    bq[i] = (int32_t)lrintf(tu_rand_f32(&rng, -3000, 3000));
    bf[i] = tu_rand_f32(&rng, -1, 1);
  }
  int x = tu_graph_input(g, "x", KL_F32, 4, xd);
  int s_x = const_f32(g, sx), z_x = const_u8(g, 117);
  int xq = TU_OP(g, QuantizeLinear, x, s_x, z_x);
  int xdq = TU_OP(g, DequantizeLinear, xq, s_x, z_x);
  int wq = tu_graph_const(g, "w", KL_I8, 4, wd, w);
  int w_s = tu_graph_const(g, "w_scale", KL_F32, 1, &m, ws);
  int w_z = tu_graph_const(g, "w_zero_point", KL_I8, 1, &m, wz);
  int wdq = TU_OP(g, DequantizeLinear, wq, w_s, w_z);
  kl_node_set_int(g, g->values[wdq].producer, "axis", 0, NULL);
  int b = KL_ABSENT;
  if (bias == BIAS_FLOAT) b = tu_graph_const(g, "b", KL_F32, 1, &m, bf);
  if (bias == BIAS_QUANTIZED) {
    int b_q = tu_graph_const(g, "b_q", KL_I32, 1, &m, bq);
    int b_s = tu_graph_const(g, "b_scale", KL_F32, 1, &m, bs);
    b = TU_OP(g, DequantizeLinear, b_q, b_s);
    kl_node_set_int(g, g->values[b].producer, "axis", 0, NULL);
  }
  int y = b == KL_ABSENT ? TU_OP(g, Conv, xdq, wdq) : TU_OP(g, Conv, xdq, wdq, b);
  int n = g->values[y].producer;
  tu_node_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  int s_y = const_f32(g, SY), z_y = const_u8(g, 128);
  int yq = TU_OP(g, QuantizeLinear, y, s_y, z_y);
  tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, s_y, z_y}, 1);
  /* another reader of the activation's DequantizeLinear */
  tu_graph_output_node(g, KL_OP_Add, 2, (int[]){xdq, xdq}, 1);
  return g;
}

static int count_op(const kiln_model *m, kl_op op) {
  int n = 0;
  for (int i = 0; i < m->g->n_nodes; i++) n += m->g->nodes[i].op == op;
  return n;
}

/* Runs g at -O0 and -O2 (on the reference kernels: the pass, not a kernel, is tested)
 * and compares; returns the QLinearConv count at -O2. */
static int check_folded(int wmax, bias_kind bias) {
  uint32_t seed = rng;
  kiln_model *m0 = tu_model_of(qdq_graph(wmax, bias), 0);
  rng = seed;
  kiln_model *m2 = tu_model_of(qdq_graph(wmax, bias), 2);
  assert_int_equal(count_op(m0, KL_OP_QLinearConv), 0);
  int folded = count_op(m2, KL_OP_QLinearConv);
  if (folded) { /* the Add still reads the activation's DequantizeLinear */
    assert_int_equal(count_op(m2, KL_OP_Conv), 0);
    assert_int_equal(count_op(m2, KL_OP_DequantizeLinear), 2);
  }
  float *x = malloc(sizeof(float) * 378);
  assert_non_null(x);
  for (int i = 0; i < 378; i++) x[i] = tu_rand_f32(&rng, -3, 3);
  kiln_session *s0 = tu_session(m0, true, 0), *s2 = tu_session(m2, true, 0);
  int64_t n0, n2;
  float *want = tu_run_f32(s0, m0, &x, &n0), *got = tu_run_f32(s2, m2, &x, &n2);
  assert_int_equal(n0, n2);
  int64_t off = 0, ny = 10 * 9 * 7; /* output 0, y; then the Add's */
  for (int64_t k = 0; k < n0; k++) {
    double d = fabs((double)got[k] - want[k]);
    if (d > (k < ny ? SY * 1.001 : 0))
      fail_msg("output element %lld is %g at -O2, %g at -O0", (long long)k, (double)got[k],
               (double)want[k]);
    off += d > 0;
  }
  if (off * 100 > ny) fail_msg("%lld of %lld outputs one step off", (long long)off, (long long)ny);
  free(want), free(got), free(x);
  kiln_session_free(s0), kiln_session_free(s2);
  kiln_model_free(m0), kiln_model_free(m2);
  return folded;
}

static void test_fold(void **state) {
  (void)state;
  assert_int_equal(check_folded(64, BIAS_QUANTIZED), 1);
  assert_int_equal(check_folded(64, BIAS_NONE), 1);
  assert_int_equal(check_folded(64, BIAS_FLOAT), 1);
}

/* x [5, 24] -> Q -> DQ -> MatMul(., DQ(W [24, 10], per column)) -> Q -> DQ -> y:
 * one QLinearMatMul at -O2, within one step of -O0. */
static void check_matmul(bool weights_in_graph) {
  kiln_model *m[2];
  for (int level = 0; level < 2; level++) {
    uint32_t seed = 7;
    kl_graph *g = tu_graph_new();
    int64_t xd[2] = {5, 24}, wd[2] = {24, 10}, n = 10;
    int8_t w[240], wz[10] = {0};
    float ws[10];
    for (int i = 0; i < 240; i++) w[i] = (int8_t)lrintf(tu_rand_f32(&seed, -64, 64));
    for (int i = 0; i < 10; i++) ws[i] = tu_rand_f32(&seed, 0.002f, 0.02f);
    int x = tu_graph_input(g, "x", KL_F32, 2, xd);
    int s_x = const_f32(g, 0.03f), z_x = const_u8(g, 100);
    int xdq = TU_OP(g, DequantizeLinear, TU_OP(g, QuantizeLinear, x, s_x, z_x), s_x, z_x);
    int w_s = tu_graph_const(g, "w_scale", KL_F32, 1, &n, ws);
    int w_z = tu_graph_const(g, "w_zero_point", KL_I8, 1, &n, wz);
    int wq = tu_graph_const(g, "w", KL_I8, 2, wd, w);
    if (weights_in_graph) { /* float32 weights near the codes' values, Q in the graph */
      float wf[240];
      for (int i = 0; i < 240; i++)
        wf[i] = ((float)w[i] + tu_rand_f32(&seed, -0.45f, 0.45f)) * ws[i % 10];
      wq = TU_OP(g, QuantizeLinear, tu_graph_const(g, "w_float", KL_F32, 2, wd, wf), w_s, w_z);
      kl_node_set_int(g, g->values[wq].producer, "axis", 1, NULL);
    }
    int wdq = TU_OP(g, DequantizeLinear, wq, w_s, w_z);
    kl_node_set_int(g, g->values[wdq].producer, "axis", 1, NULL);
    int s_y = const_f32(g, SY), z_y = const_u8(g, 128);
    int yq = TU_OP(g, QuantizeLinear, TU_OP(g, MatMul, xdq, wdq), s_y, z_y);
    tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, s_y, z_y}, 1);
    m[level] = tu_model_of(g, level * 2);
  }
  assert_int_equal(count_op(m[0], KL_OP_QLinearMatMul), 0);
  assert_int_equal(count_op(m[1], KL_OP_QLinearMatMul), 1);
  assert_int_equal(count_op(m[1], KL_OP_MatMul), 0);
  assert_int_equal(m[1]->g->n_nodes, 3); /* Q(x), QLinearMatMul, DQ(y) */
  float *x = malloc(sizeof(float) * 120);
  assert_non_null(x);
  for (int i = 0; i < 120; i++) x[i] = tu_rand_f32(&rng, -3, 3);
  kiln_session *s0 = tu_session(m[0], true, 0), *s2 = tu_session(m[1], true, 0);
  int64_t n0, n2;
  float *want = tu_run_f32(s0, m[0], &x, &n0), *got = tu_run_f32(s2, m[1], &x, &n2);
  assert_int_equal(n0, 50);
  assert_int_equal(n2, 50);
  int off = 0;
  for (int k = 0; k < 50; k++) {
    double d = fabs((double)got[k] - want[k]);
    if (d > SY * 1.001) fail_msg("output %d is %g at -O2, %g at -O0", k, got[k], want[k]);
    off += d > 0;
  }
  assert_true(off <= 1);
  free(want), free(got), free(x);
  kiln_session_free(s0), kiln_session_free(s2);
  kiln_model_free(m[0]), kiln_model_free(m[1]);
}

static void test_matmul(void **state) {
  (void)state;
  check_matmul(false);
}

/* The same with the weights held in float32 and quantized in the graph, DQ(Q(W)): the
 * QuantizeLinear of constants runs at the fold, and the MatMul folds as above. */
static void test_weights_in_graph(void **state) {
  (void)state;
  check_matmul(true);
}

/* A residual Add between quantized activations: DQ(Q(a)) + DQ(Q(b)) -> Q -> DQ. At -O2
 * one kiln QLinearAdd (same shapes only: a broadcast stays an Add), whose outputs equal
 * -O0's bit for bit on the reference and on the fast kernels (which tests/run_levels.sh
 * runs at every level), at sizes below and past the fast kernel's 16384-element tasks,
 * with sums that saturate both ends. */
static kl_graph *add_graph(const int64_t *ad, const int64_t *bd, kl_dtype q, kl_op op) {
  kl_graph *g = tu_graph_new();
  int a = tu_graph_input(g, "a", KL_F32, 4, ad), b = tu_graph_input(g, "b", KL_F32, 4, bd);
  uint8_t zu[3] = {117, 200, 250};
  int8_t zs[3] = {-11, -100, -128};
  float sc[3] = {0.031f, 0.047f, 0.029f};
  int z[3], sv[3];
  for (int i = 0; i < 3; i++) {
    sv[i] = const_f32(g, sc[i]);
    z[i] = q == KL_U8 ? const_u8(g, zu[i]) : tu_graph_const(g, NULL, KL_I8, 0, NULL, &zs[i]);
  }
  int adq = TU_OP(g, DequantizeLinear, TU_OP(g, QuantizeLinear, a, sv[0], z[0]), sv[0], z[0]);
  int bdq = TU_OP(g, DequantizeLinear, TU_OP(g, QuantizeLinear, b, sv[1], z[1]), sv[1], z[1]);
  int yq = TU_OP(g, QuantizeLinear, tu_graph_op(g, op, 2, (int[]){adq, bdq}), sv[2], z[2]);
  tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, sv[2], z[2]}, 1);
  return g;
}

static void test_add(void **state) {
  (void)state;
  static const struct {
    int64_t a[4], b[4];
    kl_dtype q;
    kl_op op;
    bool folds;
  } cases[] = {
      {{1, 3, 37, 41}, {1, 3, 37, 41}, KL_U8, KL_OP_Add, true},
      {{2, 7, 40, 41}, {2, 7, 40, 41}, KL_U8, KL_OP_Add, true},
      {{1, 1, 1, 13}, {1, 1, 1, 13}, KL_I8, KL_OP_Add, true},
      {{2, 7, 40, 41}, {2, 7, 40, 41}, KL_I8, KL_OP_Add, true},
      {{1, 5, 1, 9}, {1, 5, 7, 9}, KL_U8, KL_OP_Add, false}, /* a broadcast in the middle */
      {{2, 7, 40, 41}, {2, 7, 40, 41}, KL_U8, KL_OP_Mul, true},
      {{1, 3, 37, 41}, {1, 3, 37, 41}, KL_I8, KL_OP_Mul, true},
      {{2, 7, 13, 11}, {2, 7, 1, 1}, KL_U8, KL_OP_Mul, true}, /* a per-channel scale */
      {{1, 9, 1, 1}, {1, 9, 23, 31}, KL_I8, KL_OP_Mul, true}, /* ... first */
      {{2, 7, 13, 11}, {2, 1, 1, 1}, KL_U8, KL_OP_Add, true},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    kl_op op = cases[c].op, qop = op == KL_OP_Add ? KL_OP_KilnQLinearAdd : KL_OP_KilnQLinearMul;
    kiln_model *m0 = tu_model_of(add_graph(cases[c].a, cases[c].b, cases[c].q, op), 0);
    kiln_model *m2 = tu_model_of(add_graph(cases[c].a, cases[c].b, cases[c].q, op), 2);
    assert_int_equal(count_op(m2, qop), cases[c].folds);
    assert_int_equal(count_op(m2, op), !cases[c].folds);
    int64_t na = 1, nb = 1;
    for (int d = 0; d < 4; d++) na *= cases[c].a[d], nb *= cases[c].b[d];
    float *x[2] = {malloc(sizeof(float) * (size_t)na), malloc(sizeof(float) * (size_t)nb)};
    assert_non_null(x[0]);
    assert_non_null(x[1]);
    for (int64_t i = 0; i < na; i++) x[0][i] = tu_rand_f32(&rng, -9, 9);
    for (int64_t i = 0; i < nb; i++) x[1][i] = tu_rand_f32(&rng, -9, 9);
    kiln_session *s0 = tu_session(m0, true, 0), *r2 = tu_session(m2, true, 0),
                 *f2 = tu_session(m2, false, 0);
    int64_t n0, nr, nf;
    float *want = tu_run_f32(s0, m0, x, &n0), *ref = tu_run_f32(r2, m2, x, &nr),
          *fast = tu_run_f32(f2, m2, x, &nf);
    assert_int_equal(n0, nr);
    assert_int_equal(n0, nf);
    int low = 0, high = 0, zc = cases[c].q == KL_U8 ? 250 : -128;
    float lowv = (float)((cases[c].q == KL_U8 ? 0 : -128) - zc) * 0.029f; /* saturated */
    float highv = (float)((cases[c].q == KL_U8 ? 255 : 127) - zc) * 0.029f;
    for (int64_t k = 0; k < n0; k++) {
      if (memcmp(&want[k], &ref[k], 4) || memcmp(&want[k], &fast[k], 4))
        fail_msg("case %zu: output %lld is %.9g at -O0, %.9g (reference) and %.9g (fast, "
                 "kernel %s) at -O2", c, (long long)k, (double)want[k], (double)ref[k],
                 (double)fast[k], kl_session_kernel_name(f2, 0));
      low += want[k] == lowv;
      high += want[k] == highv;
    }
    if (cases[c].folds && na > 100 && nb > 100 && (!low || !high))
      fail_msg("case %zu: no saturated sums (%d low, %d high): the data do not test it", c,
               low, high);
    free(want), free(ref), free(fast), free(x[0]), free(x[1]);
    kiln_session_free(s0), kiln_session_free(r2), kiln_session_free(f2);
    kiln_model_free(m0), kiln_model_free(m2);
  }
}

/* DQ -> an elementwise op -> Q: one QLinearLookup at -O2 whose table gives -O0's
 * reference outputs bit for bit, and the fast kernel the same. A Clip of constant
 * bounds too (a ReLU6 that int8 activations keep between its own Q/DQ pairs). */
static void test_lookup(void **state) {
  (void)state;
  static const struct {
    kl_op op;
    kl_dtype q;
    float alpha;
  } cases[] = {
      {KL_OP_Sigmoid, KL_U8, 0},   {KL_OP_Sigmoid, KL_I8, 0}, {KL_OP_HardSwish, KL_U8, 0},
      {KL_OP_LeakyRelu, KL_I8, 0.13f}, {KL_OP_Tanh, KL_I8, 0},  {KL_OP_Gelu, KL_U8, 0},
      {KL_OP_Clip, KL_I8, 0},      {KL_OP_Clip, KL_U8, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    kiln_model *m[2];
    for (int level = 0; level < 2; level++) {
      kl_graph *g = tu_graph_new();
      int64_t xd[3] = {3, 37, 211};
      int x = tu_graph_input(g, "x", KL_F32, 3, xd);
      int8_t zs[2] = {-7, 20};
      uint8_t zu[2] = {131, 40};
      int sx = const_f32(g, 0.043f), sy = const_f32(g, 0.011f);
      int zx = cases[c].q == KL_U8 ? const_u8(g, zu[0]) : tu_graph_const(g, NULL, KL_I8, 0, NULL, &zs[0]);
      int zy = cases[c].q == KL_U8 ? const_u8(g, zu[1]) : tu_graph_const(g, NULL, KL_I8, 0, NULL, &zs[1]);
      int xdq = TU_OP(g, DequantizeLinear, TU_OP(g, QuantizeLinear, x, sx, zx), sx, zx);
      int u = cases[c].op == KL_OP_Clip
                  ? TU_OP(g, Clip, xdq, const_f32(g, -0.6f), const_f32(g, 0.9f))
                  : tu_graph_op(g, cases[c].op, 1, &xdq);
      if (cases[c].alpha != 0)
        assert_int_equal(kl_node_set_float(g, g->values[u].producer, "alpha", cases[c].alpha,
                                           NULL), KILN_OK);
      int yq = TU_OP(g, QuantizeLinear, u, sy, zy);
      tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, sy, zy}, 1);
      m[level] = tu_model_of(g, level * 2);
    }
    assert_int_equal(count_op(m[1], KL_OP_KilnQLinearLookup), 1);
    assert_int_equal(count_op(m[1], cases[c].op), 0);
    /* the table holds the op's alpha: no attribute stays behind, which the ONNX reader
     * would refuse in what kiln optimize writes (QLinearLookup takes none) */
    for (int i = 0; i < m[1]->g->n_nodes; i++)
      if (m[1]->g->nodes[i].op == KL_OP_KilnQLinearLookup)
        assert_int_equal(m[1]->g->nodes[i].n_attrs, 0);
    int64_t n = 3 * 37 * 211;
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = tu_rand_f32(&rng, -7, 7); /* every code */
    kiln_session *s0 = tu_session(m[0], true, 0), *r2 = tu_session(m[1], true, 0),
                 *f2 = tu_session(m[1], false, 0);
    int64_t n0, nr, nf;
    float *want = tu_run_f32(s0, m[0], &x, &n0), *ref = tu_run_f32(r2, m[1], &x, &nr),
          *fast = tu_run_f32(f2, m[1], &x, &nf);
    assert_int_equal(n0, nr);
    assert_int_equal(n0, nf);
    for (int64_t k = 0; k < n0; k++)
      if (memcmp(&want[k], &ref[k], 4) || memcmp(&want[k], &fast[k], 4))
        fail_msg("%s: output %lld is %.9g at -O0, %.9g (reference) and %.9g (fast) at -O2",
                 kl_op_name(cases[c].op), (long long)k, (double)want[k], (double)ref[k],
                 (double)fast[k]);
    free(want), free(ref), free(fast), free(x);
    kiln_session_free(s0), kiln_session_free(r2), kiln_session_free(f2);
    kiln_model_free(m[0]), kiln_model_free(m[1]);
  }
}

/* SiLU between QDQ pairs, as a QDQ EfficientNet has it: DQ(x) -> Sigmoid -> Q -> DQ ->
 * Mul(DQ(x), .) -> Q: one QLinearLookup of x at -O2 (the Sigmoid's lookup and the Mul
 * collapsed: both are functions of x's code), -O0's reference outputs bit for bit. */
static void test_silu(void **state) {
  (void)state;
  for (int signed8 = 0; signed8 < 2; signed8++) {
    kiln_model *m[2];
    for (int level = 0; level < 2; level++) {
      kl_graph *g = tu_graph_new();
      int64_t xd[2] = {7, 3001};
      int x = tu_graph_input(g, "x", KL_F32, 2, xd);
      int8_t zs[3] = {-30, -128, -90};
      uint8_t zu[3] = {98, 0, 37};
      float sc[3] = {0.05f, 1.0f / 255, 0.031f};
      int sv[3], z[3];
      for (int i = 0; i < 3; i++) {
        sv[i] = const_f32(g, sc[i]);
        z[i] = signed8 ? tu_graph_const(g, NULL, KL_I8, 0, NULL, &zs[i]) : const_u8(g, zu[i]);
      }
      int xdq = TU_OP(g, DequantizeLinear, TU_OP(g, QuantizeLinear, x, sv[0], z[0]), sv[0], z[0]);
      int sig = TU_OP(g, QuantizeLinear, tu_graph_op(g, KL_OP_Sigmoid, 1, &xdq), sv[1], z[1]);
      int sdq = TU_OP(g, DequantizeLinear, sig, sv[1], z[1]);
      int yq = TU_OP(g, QuantizeLinear, TU_OP(g, Mul, xdq, sdq), sv[2], z[2]);
      tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, sv[2], z[2]}, 1);
      m[level] = tu_model_of(g, level * 2);
    }
    assert_int_equal(count_op(m[1], KL_OP_KilnQLinearLookup), 1);
    assert_int_equal(count_op(m[1], KL_OP_KilnQLinearMul), 0);
    assert_int_equal(count_op(m[1], KL_OP_Sigmoid), 0);
    int64_t n = 7 * 3001;
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = tu_rand_f32(&rng, -8, 8);
    kiln_session *s0 = tu_session(m[0], true, 0), *f2 = tu_session(m[1], false, 0);
    int64_t n0, nf;
    float *want = tu_run_f32(s0, m[0], &x, &n0), *fast = tu_run_f32(f2, m[1], &x, &nf);
    assert_int_equal(n0, nf);
    for (int64_t k = 0; k < n0; k++)
      if (memcmp(&want[k], &fast[k], 4))
        fail_msg("SiLU (%s): output %lld is %.9g at -O0, %.9g at -O2", signed8 ? "int8" : "uint8",
                 (long long)k, (double)want[k], (double)fast[k]);
    free(want), free(fast), free(x);
    kiln_session_free(s0), kiln_session_free(f2);
    kiln_model_free(m[0]), kiln_model_free(m[1]);
  }
}

/* Concat of three quantized activations, one quantized as the output and two not, into
 * a QuantizeLinear: a Concat of the codes at -O2 with two requantizing lookups, -O0's
 * reference outputs bit for bit (fast and reference kernels). */
static void test_concat(void **state) {
  (void)state;
  kiln_model *m[2];
  for (int level = 0; level < 2; level++) {
    kl_graph *g = tu_graph_new();
    float sc[4] = {0.031f, 0.05f, 0.012f, 0.031f};
    uint8_t zu[4] = {0, 30, 200, 0};
    int64_t d[3][4] = {{1, 5, 9, 11}, {1, 3, 9, 11}, {1, 7, 9, 11}};
    int ins[3];
    for (int k = 0; k < 3; k++) {
      char name[4] = {(char)('a' + k), 0};
      int x = tu_graph_input(g, name, KL_F32, 4, d[k]);
      int sv = const_f32(g, sc[k]), zv = const_u8(g, zu[k]);
      ins[k] = TU_OP(g, DequantizeLinear, TU_OP(g, QuantizeLinear, x, sv, zv), sv, zv);
    }
    int cat = tu_graph_op(g, KL_OP_Concat, 3, ins);
    assert_int_equal(kl_node_set_int(g, g->values[cat].producer, "axis", 1, NULL), KILN_OK);
    int sy = const_f32(g, sc[3]), zy = const_u8(g, zu[3]);
    int yq = TU_OP(g, QuantizeLinear, cat, sy, zy);
    tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, sy, zy}, 1);
    m[level] = tu_model_of(g, level * 2);
  }
  assert_int_equal(count_op(m[1], KL_OP_KilnQLinearLookup), 2);
  assert_int_equal(count_op(m[1], KL_OP_Concat), 1);
  assert_int_equal(count_op(m[1], KL_OP_QuantizeLinear), 3); /* the inputs' own */
  float *x[3];
  int64_t n[3] = {5 * 99, 3 * 99, 7 * 99};
  for (int k = 0; k < 3; k++) {
    x[k] = malloc(sizeof(float) * (size_t)n[k]);
    assert_non_null(x[k]);
    for (int64_t i = 0; i < n[k]; i++) x[k][i] = tu_rand_f32(&rng, -3, 12);
  }
  kiln_session *s0 = tu_session(m[0], true, 0), *r2 = tu_session(m[1], true, 0),
               *f2 = tu_session(m[1], false, 0);
  int64_t n0, nr, nf;
  float *want = tu_run_f32(s0, m[0], x, &n0), *ref = tu_run_f32(r2, m[1], x, &nr),
        *fast = tu_run_f32(f2, m[1], x, &nf);
  assert_int_equal(n0, 15 * 99);
  assert_int_equal(nr, n0);
  assert_int_equal(nf, n0);
  for (int64_t k = 0; k < n0; k++)
    if (memcmp(&want[k], &ref[k], 4) || memcmp(&want[k], &fast[k], 4))
      fail_msg("concat: output %lld is %.9g at -O0, %.9g (reference) and %.9g (fast) at -O2",
               (long long)k, (double)want[k], (double)ref[k], (double)fast[k]);
  free(want), free(ref), free(fast);
  for (int k = 0; k < 3; k++) free(x[k]);
  kiln_session_free(s0), kiln_session_free(r2), kiln_session_free(f2);
  kiln_model_free(m[0]), kiln_model_free(m[1]);
}

/* DQ -> MaxPool -> Q with the same parameters: a MaxPool of the codes at -O2 (ceil_mode,
 * pads, strides, an empty window past the edge), -O0's reference bits on both kernels;
 * with other parameters it stays float32. */
static void test_maxpool(void **state) {
  (void)state;
  for (int c = 0; c < 3; c++) {
    bool s8 = c == 1, same = c != 2;
    kiln_model *m[2];
    for (int level = 0; level < 2; level++) {
      kl_graph *g = tu_graph_new();
      int64_t xd[4] = {2, 5, 23, 17};
      int x = tu_graph_input(g, "x", KL_F32, 4, xd);
      int8_t zs = -20;
      uint8_t zu = 77;
      int sx = const_f32(g, 0.04f), sy = same ? sx : const_f32(g, 0.05f);
      int z = s8 ? tu_graph_const(g, NULL, KL_I8, 0, NULL, &zs) : const_u8(g, zu);
      int xdq = TU_OP(g, DequantizeLinear, TU_OP(g, QuantizeLinear, x, sx, z), sx, z);
      int mp = tu_graph_op(g, KL_OP_MaxPool, 1, &xdq);
      int n = g->values[mp].producer;
      tu_node_ints(g, n, "kernel_shape", 2, (int64_t[]){3, 3});
      tu_node_ints(g, n, "strides", 2, (int64_t[]){2, 3});
      tu_node_ints(g, n, "pads", 4, (int64_t[]){1, 0, 0, 2});
      assert_int_equal(kl_node_set_int(g, n, "ceil_mode", 1, NULL), KILN_OK);
      int yq = TU_OP(g, QuantizeLinear, mp, sy, z);
      tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, sy, z}, 1);
      m[level] = tu_model_of(g, level * 2);
    }
    assert_int_equal(count_op(m[1], KL_OP_QuantizeLinear), same ? 1 : 2);
    int64_t n = 2 * 5 * 23 * 17;
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = tu_rand_f32(&rng, -6, 6);
    kiln_session *s0 = tu_session(m[0], true, 0), *r2 = tu_session(m[1], true, 0),
                 *f2 = tu_session(m[1], false, 0);
    int64_t n0, nr, nf;
    float *want = tu_run_f32(s0, m[0], &x, &n0), *ref = tu_run_f32(r2, m[1], &x, &nr),
          *fast = tu_run_f32(f2, m[1], &x, &nf);
    assert_int_equal(nr, n0);
    assert_int_equal(nf, n0);
    for (int64_t k = 0; k < n0; k++)
      if (memcmp(&want[k], &ref[k], 4) || memcmp(&want[k], &fast[k], 4))
        fail_msg("maxpool case %d: output %lld is %.9g at -O0, %.9g (reference) and %.9g "
                 "(fast) at -O2", c, (long long)k, (double)want[k], (double)ref[k],
                 (double)fast[k]);
    free(want), free(ref), free(fast), free(x);
    kiln_session_free(s0), kiln_session_free(r2), kiln_session_free(f2);
    kiln_model_free(m[0]), kiln_model_free(m[1]);
  }
}

static void test_wide_weights(void **state) {
  (void)state;
  assert_int_equal(check_folded(127, BIAS_QUANTIZED), kl_cpu_int8_weight_bits() == 8);
}

/* x -> Q(sx, zx) -> QLinearConv (conv) or QLinearMatMul -> DequantizeLinear -> y, the
 * weights int8 of 8 bits with zero points 0 (unfolded where the int8 kernels take 7
 * bits) or uint8 with zero points of 120 to 135 (unfolded everywhere). Returns whether
 * the QLinear node was unfolded. */
static bool check_qoperator(bool conv, bool u8w, bool bias) {
  kl_graph *g = tu_graph_new();
  int64_t xd4[4] = {2, 5, 9, 9}, xd2[2] = {7, 21}, m = conv ? 6 : 11;
  int64_t wd4[4] = {6, 5, 3, 3}, wd2[2] = {21, 11};
  int x = tu_graph_input(g, "x", KL_F32, conv ? 4 : 2, conv ? xd4 : xd2);
  int sx = const_f32(g, 0.04f), zx = const_u8(g, 128), sy = const_f32(g, SY), zy = const_u8(g, 100);
  int xq = tu_graph_op(g, KL_OP_QuantizeLinear, 3, (int[]){x, sx, zx});
  int64_t nw = conv ? 6 * 5 * 9 : 21 * 11;
  uint8_t w[270], zw[11];
  float sw[11];
  int32_t bv[11];
  for (int64_t i = 0; i < nw; i++)
    w[i] = u8w ? (uint8_t)tu_rand_f32(&rng, 0, 255.99f)
               : (uint8_t)(int8_t)(i % 9 == 4 ? -128 : i % 9 == 5 ? 127 : lrintf(tu_rand_f32(&rng, -128, 127)));
  for (int64_t i = 0; i < m; i++) {
    zw[i] = u8w ? (uint8_t)(120 + i) : 0;
    sw[i] = tu_rand_f32(&rng, 0.001f, 0.004f);
    bv[i] = (int32_t)tu_rand_f32(&rng, -3000, 3000);
  }
  kl_dtype wt = u8w ? KL_U8 : KL_I8;
  int cw = tu_graph_const(g, "w", wt, conv ? 4 : 2, conv ? wd4 : wd2, w);
  int csw = tu_graph_const(g, "sw", KL_F32, 1, &m, sw), czw = tu_graph_const(g, "zw", wt, 1, &m, zw);
  int ins[9] = {xq, sx, zx, cw, csw, czw, sy, zy, bias ? tu_graph_const(g, "b", KL_I32, 1, &m, bv) : -1};
  int yq = tu_graph_op(g, conv ? KL_OP_QLinearConv : KL_OP_QLinearMatMul, conv && bias ? 9 : 8, ins);
  if (conv) tu_node_ints(g, g->values[yq].producer, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, sy, zy}, 1);
  kiln_model *m0 = tu_model_of(kl_graph_copy(g), 0), *m2 = tu_model_of(g, 2);
  bool unfolded = count_op(m2, conv ? KL_OP_QLinearConv : KL_OP_QLinearMatMul) == 0;
  if (unfolded) assert_int_equal(count_op(m2, conv ? KL_OP_Conv : KL_OP_MatMul) +
                                     count_op(m2, KL_OP_KilnFusedConv) +
                                     count_op(m2, KL_OP_Gemm), 1);
  int64_t nx = conv ? 2 * 5 * 81 : 7 * 21;
  float *xv = tu_rand_vec(&rng, (size_t)nx, -5, 5);
  kiln_session *s0 = tu_session(m0, true, 1), *s2 = tu_session(m2, false, 2);
  int64_t n0, n2;
  float *want = tu_run_f32(s0, m0, &xv, &n0), *got = tu_run_f32(s2, m2, &xv, &n2);
  assert_int_equal(n0, n2);
  int64_t off = 0, distinct = 0;
  for (int64_t k = 0; k < n0; k++) {
    double d = fabs((double)got[k] - want[k]);
    if (d > SY * 1.001)
      fail_msg("conv %d u8w %d: output %lld is %g at -O2, %g at -O0", conv, u8w, (long long)k,
               (double)got[k], (double)want[k]);
    off += d > 0;
    distinct += k > 0 && want[k] != want[k - 1];
  }
  assert_true(distinct > n0 / 4); /* real sums, not one clamped value */
  if (off * 50 > n0 + 50)
    fail_msg("conv %d u8w %d: %lld of %lld outputs one step off", conv, u8w, (long long)off,
             (long long)n0);
  for (int i = 0; kl_isa_level() != KL_ISA_GENERIC && i < m2->g->n_nodes; i++)
    if (strcmp(kl_session_kernel_name(s2, i), "ref") == 0)
      fail_msg("node %d (%s) ran on the reference kernel", i, kl_op_name(m2->g->nodes[i].op));
  free(want), free(got), free(xv);
  kiln_session_free(s0), kiln_session_free(s2);
  kiln_model_free(m0), kiln_model_free(m2);
  return unfolded;
}

static void test_qoperator_wide(void **state) {
  (void)state;
  bool narrow = kl_cpu_int8_weight_bits() < 8; /* the int8 kernels take 7 bits */
  for (int conv = 0; conv < 2; conv++) {
    assert_int_equal(check_qoperator(conv, false, conv), narrow);
    assert_true(check_qoperator(conv, true, conv));
    assert_true(check_qoperator(conv, true, false));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qoperator_wide),
      cmocka_unit_test(test_fold),
      cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_weights_in_graph),
      cmocka_unit_test(test_wide_weights),
      cmocka_unit_test(test_add),
      cmocka_unit_test(test_lookup),
      cmocka_unit_test(test_silu),
      cmocka_unit_test(test_concat),
      cmocka_unit_test(test_maxpool),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
