/* A Relu or Clip between a Conv (or Gemm) and its QuantizeLinear, as QDQ models that
 * keep the activation write it (int8 activations, kiln quantize --symmetric, other
 * quantizers):
 *
 *   x -> Q(sx, zx) -> DQ -> Conv(., DQ(Wq), DQ(Bq)) -> Relu | Clip(lo, hi) -> Q(sy, zy)
 *     -> DQ -> y1, and the same codes -> DQ -> depthwise Conv -> Q -> DQ -> y2
 *
 * At -O2 pass fold_qdq moves the clamp onto the codes (Q is increasing: Q(Clip(v, lo,
 * hi)) = clamp(Q(v), Q(lo), Q(hi))), folds the Conv into QLinearConv and keeps a
 * QLinearLookup clamping the codes only where the quantized range does not already
 * (src/passes/fold_qdq.c, lift_clamp). No float32 Conv, Relu or Clip is left. Checked
 * on random non-zero data at awkward sizes (5 -> 7 channels, 11 x 9), uint8 and int8
 * activations:
 *
 * - -O2's reference kernels against -O0 (the float32 QDQ graph) on y1: within one step
 *   of sy, at most 1 in 50 outputs off (the int32 sum against a float32 one);
 * - -O2's fast kernels (oneDNN's int8 convolution, kiln's depthwise kernel, the
 *   lookup) against -O2's reference on y1 and y2: within one step, rarely off;
 * - the clamp must matter where a lookup is kept: some of y1 sit on each clamped end
 *   that lies inside the code range.
 * A Gemm (transB) with a Clip takes the same path (QLinearGemm, then the lookup). */
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

static uint32_t rng = 4711;

#define SX 0.031f

typedef struct clamp_case {
  kl_dtype act;
  bool relu, gemm;
  float lo, hi; /* Clip's bounds (hi INFINITY: no max input) */
  float sy;
  int zy;
  bool lookup; /* whether a clamp must stay after the fold */
} clamp_case;

static const clamp_case cases[] = {
    {KL_U8, true, false, 0, 0, 0.05f, 0, false},           /* Relu, uint8 zero point 0 */
    {KL_U8, true, false, 0, 0, 0.05f, 90, true},           /* Relu above the lowest code */
    {KL_U8, false, false, 0, 6, 0.0235294f, 0, false},     /* ReLU6, 6 at code 255 */
    {KL_U8, false, false, 0, 3, 0.05f, 0, true},           /* ReLU6-like, max at code 60 */
    {KL_I8, false, false, 0, 6, 0.03f, -128, true},        /* ReLU6 with int8 codes */
    {KL_I8, true, false, 0, 0, 0.04f, -10, true},          /* Relu, int8 */
    {KL_I8, false, false, -0.5f, INFINITY, 0.04f, 3, true}, /* Clip with min only */
    {KL_U8, false, true, -0.7f, 1.3f, 0.02f, 100, true},   /* Gemm and Clip */
    {KL_I8, true, true, 0, 0, 0.03f, 0, true},             /* Gemm and Relu: QLinearGemm's */
};

static int const_f32(kl_graph *g, float v) { return tu_graph_const(g, NULL, KL_F32, 0, NULL, &v); }

static int const_zp(kl_graph *g, kl_dtype t, int z) {
  uint8_t u = (uint8_t)z;
  int8_t s = (int8_t)z;
  return tu_graph_const(g, NULL, t, 0, NULL, t == KL_U8 ? (void *)&u : (void *)&s);
}

/* DequantizeLinear of random 7-bit weights of dims wd, per channel along axis. */
static int weights(kl_graph *g, int rank, const int64_t *wd, int axis, uint32_t *seed) {
  int64_t n = 1, m = wd[axis];
  for (int k = 0; k < rank; k++) n *= wd[k];
  int8_t *w = malloc((size_t)n), *wz = calloc((size_t)m, 1);
  float *ws = malloc(sizeof(float) * (size_t)m);
  assert_true(w && wz && ws);
  for (int64_t i = 0; i < n; i++) w[i] = (int8_t)lrintf(tu_rand_f32(seed, -64, 64));
  for (int64_t i = 0; i < m; i++) ws[i] = tu_rand_f32(seed, 0.002f, 0.02f);
  int d = TU_OP(g, DequantizeLinear, tu_graph_const(g, NULL, KL_I8, rank, wd, w),
                tu_graph_const(g, NULL, KL_F32, 1, &m, ws),
                tu_graph_const(g, NULL, KL_I8, 1, &m, wz));
  kl_node_set_int(g, g->values[d].producer, "axis", axis, NULL);
  free(w), free(wz), free(ws);
  return d;
}

/* The graph above for case c; a Gemm case: x [3, 33] -> Gemm(W [17, 33]) -> Clip. */
static kl_graph *clamp_graph(const clamp_case *c, uint32_t *seed) {
  kl_graph *g = tu_graph_new();
  int64_t xd4[4] = {1, 5, 11, 9}, xd2[2] = {3, 33};
  int64_t wd4[4] = {7, 5, 3, 3}, wd2[2] = {17, 33}, dwd[4] = {7, 1, 3, 3};
  int64_t m = c->gemm ? 17 : 7;
  float bf[17];
  for (int i = 0; i < 17; i++) bf[i] = tu_rand_f32(seed, -0.5f, 0.5f);
  int zx = c->act == KL_U8 ? 121 : -9;
  int x = tu_graph_input(g, "x", KL_F32, c->gemm ? 2 : 4, c->gemm ? xd2 : xd4);
  int s_x = const_f32(g, SX), z_x = const_zp(g, c->act, zx);
  int xdq = TU_OP(g, DequantizeLinear, TU_OP(g, QuantizeLinear, x, s_x, z_x), s_x, z_x);
  int b = tu_graph_const(g, "b", KL_F32, 1, &m, bf);
  int y;
  if (c->gemm) {
    y = TU_OP(g, Gemm, xdq, weights(g, 2, wd2, 0, seed), b);
    kl_node_set_int(g, g->values[y].producer, "transB", 1, NULL);
  } else {
    y = TU_OP(g, Conv, xdq, weights(g, 4, wd4, 0, seed), b);
    tu_node_ints(g, g->values[y].producer, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  }
  if (c->relu) {
    y = TU_OP(g, Relu, y);
  } else if (isinf(c->hi)) {
    y = TU_OP(g, Clip, y, const_f32(g, c->lo));
  } else {
    y = TU_OP(g, Clip, y, const_f32(g, c->lo), const_f32(g, c->hi));
  }
  int s_y = const_f32(g, c->sy), z_y = const_zp(g, c->act, c->zy);
  int yq = TU_OP(g, QuantizeLinear, y, s_y, z_y);
  int ydq = TU_OP(g, DequantizeLinear, yq, s_y, z_y);
  tu_graph_output_node(g, KL_OP_Identity, 1, &ydq, 1);
  if (!c->gemm) { /* a depthwise convolution reads the clamped codes */
    int d = TU_OP(g, Conv, ydq, weights(g, 4, dwd, 0, seed));
    kl_node_set_int(g, g->values[d].producer, "group", 7, NULL);
    tu_node_ints(g, g->values[d].producer, "pads", 4, (const int64_t[]){1, 1, 1, 1});
    int s_2 = const_f32(g, 0.07f), z_2 = const_zp(g, c->act, c->act == KL_U8 ? 128 : 0);
    int dq = TU_OP(g, QuantizeLinear, d, s_2, z_2);
    tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){dq, s_2, z_2}, 1);
  }
  return g;
}

static int count_op(const kiln_model *m, kl_op op) {
  int n = 0;
  for (int i = 0; i < m->g->n_nodes; i++) n += m->g->nodes[i].op == op;
  return n;
}

/* Elements of got more than `step` from want fail; returns how many differ at all. */
static int64_t steps_off(const char *what, size_t c, const float *got, const float *want,
                         int64_t from, int64_t to, float step) {
  int64_t off = 0;
  for (int64_t i = from; i < to; i++) {
    double d = fabs((double)got[i] - want[i]);
    if (d > step * 1.001)
      fail_msg("case %zu (%s): output %lld is %g, expected %g", c, what, (long long)i,
               (double)got[i], (double)want[i]);
    off += d > 0;
  }
  return off;
}

static void test_clamp(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const clamp_case *cc = &cases[c];
    uint32_t seed = rng;
    kiln_model *m0 = tu_model_of(clamp_graph(cc, &seed), 0);
    seed = rng;
    kiln_model *m2 = tu_model_of(clamp_graph(cc, &seed), 2);
    rng = seed;
    /* no float32 product or clamp left; the lookup only where the clamp is needed */
    assert_int_equal(count_op(m2, KL_OP_Conv) + count_op(m2, KL_OP_Gemm) +
                         count_op(m2, KL_OP_Relu) + count_op(m2, KL_OP_Clip),
                     0);
    assert_int_equal(count_op(m2, KL_OP_QLinearConv), cc->gemm ? 0 : 2);
    assert_int_equal(count_op(m2, KL_OP_KilnQLinearGemm), cc->gemm);
    bool gemm_relu = cc->gemm && cc->relu; /* QLinearGemm's own activation */
    assert_int_equal(count_op(m2, KL_OP_KilnQLinearLookup), cc->lookup && !gemm_relu);
    int64_t nx = cc->gemm ? 3 * 33 : 5 * 11 * 9, ny1 = cc->gemm ? 3 * 17 : 7 * 11 * 9;
    int64_t ny = cc->gemm ? ny1 : 2 * ny1;
    float *x = malloc(sizeof(float) * (size_t)nx);
    assert_non_null(x);
    for (int64_t i = 0; i < nx; i++) x[i] = tu_rand_f32(&rng, -3.5f, 3.5f);
    kiln_session *s0 = tu_session(m0, true, 0), *r2 = tu_session(m2, true, 0),
                 *f2 = tu_session(m2, false, 0);
    int64_t n0, nr, nf;
    float *want = tu_run_f32(s0, m0, &x, &n0), *ref = tu_run_f32(r2, m2, &x, &nr),
          *fast = tu_run_f32(f2, m2, &x, &nf);
    assert_int_equal(n0, ny);
    assert_int_equal(nr, ny);
    assert_int_equal(nf, ny);
    int64_t off = steps_off("-O2 reference against -O0", c, ref, want, 0, ny1, cc->sy);
    if (off * 50 > ny1 + 50) fail_msg("case %zu: %lld outputs one step off -O0", c, (long long)off);
    off = steps_off("fast against reference", c, fast, ref, 0, ny1, cc->sy);
    if (off * 200 > ny1 + 200) fail_msg("case %zu: %lld fast outputs off", c, (long long)off);
    if (off == 0 && !cc->gemm) /* the depthwise layer reads the same codes on both */
      steps_off("fast depthwise against reference", c, fast, ref, ny1, ny, 0.07f);
    /* the data reach the clamp's ends that lie inside the codes' range */
    int cmin = cc->act == KL_U8 ? 0 : -128, cmax = cc->act == KL_U8 ? 255 : 127;
    float lo = cc->relu ? 0 : cc->lo, hi = cc->relu ? INFINITY : cc->hi;
    double qlo = fmax(rint(lo / cc->sy) + cc->zy, cmin);
    double qhi = fmin(rint(hi / cc->sy) + cc->zy, cmax);
    int at_lo = 0, at_hi = 0;
    for (int64_t i = 0; i < ny1; i++) {
      double code = rint(want[i] / cc->sy) + cc->zy;
      at_lo += code == qlo, at_hi += code == qhi;
      if (code < qlo || code > qhi)
        fail_msg("case %zu: -O0 output %lld not clamped", c, (long long)i);
    }
    if (qlo > cmin && at_lo == 0) fail_msg("case %zu: nothing reaches the low clamp", c);
    if (qhi < cmax && at_hi == 0) fail_msg("case %zu: nothing reaches the high clamp", c);
    free(want), free(ref), free(fast), free(x);
    kiln_session_free(s0), kiln_session_free(r2), kiln_session_free(f2);
    kiln_model_free(m0), kiln_model_free(m2);
  }
}

/* What keeps its float32 clamp: a Clip whose max is not a constant, and a Relu whose
 * input something else also reads. */
static void test_clamp_unfolded(void **state) {
  (void)state;
  for (int v = 0; v < 2; v++) {
    kl_graph *g = tu_graph_new();
    uint32_t seed = 3;
    int64_t xd[4] = {1, 5, 6, 6}, wd[4] = {7, 5, 3, 3};
    int x = tu_graph_input(g, "x", KL_F32, 4, xd);
    int s_x = const_f32(g, SX), z_x = const_zp(g, KL_U8, 128);
    int xdq = TU_OP(g, DequantizeLinear, TU_OP(g, QuantizeLinear, x, s_x, z_x), s_x, z_x);
    int y = TU_OP(g, Conv, xdq, weights(g, 4, wd, 0, &seed));
    if (v == 0) {
      int64_t one = 1;
      int hi = tu_graph_input(g, "hi", KL_F32, 0, &one);
      y = TU_OP(g, Clip, y, const_f32(g, 0), hi);
    } else {
      tu_graph_output_node(g, KL_OP_Identity, 1, &y, 1);
      y = TU_OP(g, Relu, y);
    }
    int s_y = const_f32(g, 0.05f), z_y = const_zp(g, KL_U8, 10);
    int yq = TU_OP(g, QuantizeLinear, y, s_y, z_y);
    tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, s_y, z_y}, 1);
    kiln_model *m2 = tu_model_of(g, 2);
    assert_int_equal(count_op(m2, KL_OP_Conv), 1);
    assert_int_equal(count_op(m2, v == 0 ? KL_OP_Clip : KL_OP_Relu), 1);
    assert_int_equal(count_op(m2, KL_OP_KilnQLinearLookup), 0);
    kiln_model_free(m2);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_clamp),
      cmocka_unit_test(test_clamp_unfolded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
