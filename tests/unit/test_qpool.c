/* DequantizeLinear -> GlobalAveragePool -> QuantizeLinear (a squeeze-and-excitation
 * block's or a classifier head's pooling in a QDQ model; or a ReduceMean over the two
 * spatial axes with keepdims, as exports write the same) at -O2 becomes one kiln
 * QLinearGlobalAveragePool (pass fold_qdq; ops.def states its rounding, onnxruntime's),
 * and DequantizeLinear -> AveragePool -> QuantizeLinear one QLinearAveragePool:
 *
 * - -O2's fast kernels (run_quant.c, the level's sum of codes: vpsadbw at AVX2; the
 *   separable 8-bit average pool of run_pool.c) give -O2's reference kernels' (ref/qadd.c,
 *   ref/pool.c) bits, at awkward plane sizes (1, 7, 15, 31, 32, 33, 221, 1369), ranks 3
 *   to 5, uint8 and int8, outputs saturating at both ends; windows with strides, pads at
 *   either end, dilations, ceil_mode, count_include_pad on and off, a 1-D window and one
 *   larger than the input;
 * - -O2 against -O0 (the float32 QDQ graph): within one step of the output scale, where
 *   the QDQ graph rounds each dequantized value and the mean and QLinearGlobalAveragePool
 *   the exact integer sum once; at most 1 in 50 outputs (plus one) a step off;
 * - the sum of codes at each level this CPU has against the generic level's, lengths 0
 *   to 100 and 4099, both flips (test_sum_codes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/run.h"
#include "runtime/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng = 2718;

/* AveragePool's attributes (the first n_spatial of each) */
typedef struct avg_attrs {
  int64_t kernel[2], strides[2], pads[4], dilations[2];
  int ceil_mode, include_pad;
} avg_attrs;

static const avg_attrs k3s2p1 = {{3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, 0};
static const avg_attrs k2s2ceil = {{2, 2}, {2, 2}, {0, 1, 1, 0}, {1, 1}, 1, 1};
static const avg_attrs k5s3p2 = {{5}, {3}, {2, 2}, {1}, 0, 1};
static const avg_attrs k3d2 = {{3, 3}, {1, 2}, {2, 0, 1, 2}, {2, 2}, 1, 0};
static const avg_attrs k7s4p3 = {{7, 7}, {4, 4}, {3, 3, 3, 3}, {1, 1}, 0, 1};

typedef struct pool_case {
  int rank;
  int64_t x[5];
  kl_dtype q;
  int zx, zy;
  float sx, sy;
  bool reduce; /* ReduceMean over the two spatial axes (keepdims), not GlobalAveragePool */
  const avg_attrs *avg; /* AveragePool with these, else a global pooling */
} pool_case;

static const pool_case cases[] = {
    {4, {1, 5, 7, 7}, KL_U8, 117, 3, 0.05f, 0.011f, false, NULL},   /* the mean saturates at 255 */
    {4, {2, 19, 3, 5}, KL_I8, -20, 9, 0.04f, 0.013f, false, NULL},  /* and at -128 */
    {4, {1, 3, 1, 1}, KL_U8, 0, 128, 0.1f, 0.07f, false, NULL},
    {4, {3, 7, 13, 17}, KL_U8, 131, 120, 0.031f, 0.0043f, false, NULL},
    {4, {1, 40, 1, 33}, KL_I8, 5, -3, 0.02f, 0.0029f, false, NULL},
    {3, {2, 9, 32}, KL_U8, 200, 60, 0.017f, 0.003f, false, NULL},
    {3, {2, 9, 31}, KL_I8, -128, -100, 0.017f, 0.003f, false, NULL},
    {5, {1, 3, 2, 5, 7}, KL_U8, 90, 77, 0.023f, 0.0051f, false, NULL},
    {4, {1, 12, 37, 37}, KL_I8, 11, 0, 0.06f, 0.0033f, false, NULL},
    {4, {2, 7, 13, 17}, KL_U8, 131, 120, 0.031f, 0.0043f, true, NULL},
    {4, {1, 19, 9, 11}, KL_I8, -20, 9, 0.04f, 0.0057f, true, NULL},
    {4, {1, 5, 17, 13}, KL_U8, 117, 3, 0.05f, 0.011f, false, &k3s2p1},
    {4, {2, 7, 11, 9}, KL_I8, -20, 9, 0.04f, 0.013f, false, &k2s2ceil},
    {3, {2, 9, 31}, KL_U8, 200, 60, 0.017f, 0.003f, false, &k5s3p2},
    {4, {1, 3, 23, 19}, KL_I8, 11, 0, 0.06f, 0.0033f, false, &k3d2},
    {4, {1, 4, 6, 6}, KL_U8, 90, 77, 0.023f, 0.0051f, false, &k7s4p3},
};

static int const_f32(kl_graph *g, float v) { return tu_graph_const(g, NULL, KL_F32, 0, NULL, &v); }

static int const_zp(kl_graph *g, kl_dtype t, int z) {
  uint8_t u = (uint8_t)z;
  int8_t s = (int8_t)z;
  return tu_graph_const(g, NULL, t, 0, NULL, t == KL_U8 ? (void *)&u : (void *)&s);
}

static kl_graph *pool_graph(const pool_case *c) {
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, c->rank, c->x);
  int sx = const_f32(g, c->sx), zx = const_zp(g, c->q, c->zx);
  int sy = const_f32(g, c->sy), zy = const_zp(g, c->q, c->zy);
  int xdq = TU_OP(g, DequantizeLinear, TU_OP(g, QuantizeLinear, x, sx, zx), sx, zx);
  int pool;
  if (c->reduce) {
    int64_t two = 2, axes[2] = {-1, 2};
    pool = TU_OP(g, ReduceMean, xdq, tu_graph_const(g, "axes", KL_I64, 1, &two, axes));
  } else if (c->avg) {
    const avg_attrs *a = c->avg;
    int ns = c->rank - 2, n;
    pool = TU_OP(g, AveragePool, xdq);
    n = g->values[pool].producer;
    tu_node_ints(g, n, "kernel_shape", ns, a->kernel);
    tu_node_ints(g, n, "strides", ns, a->strides);
    tu_node_ints(g, n, "dilations", ns, a->dilations);
    tu_node_ints(g, n, "pads", 2 * ns, a->pads);
    assert_int_equal(kl_node_set_int(g, n, "ceil_mode", a->ceil_mode, NULL), KILN_OK);
    assert_int_equal(kl_node_set_int(g, n, "count_include_pad", a->include_pad, NULL), KILN_OK);
  } else {
    pool = TU_OP(g, GlobalAveragePool, xdq);
  }
  int yq = TU_OP(g, QuantizeLinear, pool, sy, zy);
  tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, sy, zy}, 1);
  return g;
}

static void test_global_pool(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const pool_case *pc = &cases[c];
    kiln_model *m0 = tu_model_of(pool_graph(pc), 0), *m2 = tu_model_of(pool_graph(pc), 2);
    int node = -1, pools = 0;
    kl_op qop = pc->avg ? KL_OP_KilnQLinearAveragePool : KL_OP_KilnQLinearGlobalAveragePool;
    for (int i = 0; i < m2->g->n_nodes; i++) {
      kl_op op = m2->g->nodes[i].op;
      if (op == qop) node = i;
      pools += op == KL_OP_GlobalAveragePool || op == KL_OP_ReduceMean || op == KL_OP_AveragePool;
    }
    assert_true(node >= 0);
    assert_int_equal(pools, 0);
    assert_int_equal(m2->g->n_nodes, 3); /* Q(x), the pool, DQ(y) */
    int64_t nx = 1, planes = pc->x[0] * pc->x[1];
    for (int d = 0; d < pc->rank; d++) nx *= pc->x[d];
    float *x = malloc(sizeof(float) * (size_t)nx);
    assert_non_null(x);
    /* planes of different means, spread around them, so that the means cover the range */
    for (int64_t p = 0; p < planes; p++) {
      float mid = tu_rand_f32(&rng, -4, 4), spread = tu_rand_f32(&rng, 0.1f, 4);
      for (int64_t i = 0; i < nx / planes; i++)
        x[p * (nx / planes) + i] = mid + tu_rand_f32(&rng, -spread, spread);
    }
    kiln_session *s0 = tu_session(m0, true, 0), *r2 = tu_session(m2, true, 0),
                 *f2 = tu_session(m2, false, 0);
    int64_t n0, nr, nf;
    float *want = tu_run_f32(s0, m0, &x, &n0), *ref = tu_run_f32(r2, m2, &x, &nr),
          *fast = tu_run_f32(f2, m2, &x, &nf);
    if (!pc->avg) assert_int_equal(n0, planes);
    assert_int_equal(nr, n0);
    assert_int_equal(nf, n0);
    int64_t off = 0;
    for (int64_t k = 0; k < n0; k++) {
      if (memcmp(&ref[k], &fast[k], 4))
        fail_msg("case %zu: output %lld is %.9g on the reference, %.9g on %s", c, (long long)k,
                 (double)ref[k], (double)fast[k], kl_session_kernel_name(f2, node));
      double d = fabs((double)ref[k] - want[k]);
      if (d > pc->sy * 1.001)
        fail_msg("case %zu: output %lld is %.9g at -O2, %.9g at -O0", c, (long long)k,
                 (double)ref[k], (double)want[k]);
      off += d > 0;
    }
    if (off * 50 > n0 + 50) fail_msg("case %zu: %lld outputs one step off", c, (long long)off);
    if (c < 2) { /* the data reach the saturation this case is for */
      float edge = (float)((c == 0 ? 255 : -128) - pc->zy) * pc->sy;
      int64_t hits = 0;
      for (int64_t k = 0; k < n0; k++) hits += want[k] == edge;
      if (!hits) fail_msg("case %zu: no output saturates", c);
    }
    assert_string_not_equal(kl_session_kernel_name(f2, node), kl_session_kernel_name(r2, node));
    free(want), free(ref), free(fast), free(x);
    kiln_session_free(s0), kiln_session_free(r2), kiln_session_free(f2);
    kiln_model_free(m0), kiln_model_free(m2);
  }
}

static void test_sum_codes(void **state) {
  (void)state;
  uint8_t *x = malloc(4099);
  assert_non_null(x);
  for (int i = 0; i < 4099; i++) x[i] = (uint8_t)(tu_rand_f32(&rng, 0, 256));
  x[0] = 255, x[1] = 0, x[2] = 128;
  const kl_quant_fns *gen = kl_cpu_isa_fns(KL_ISA_GENERIC)->quant;
  for (int level = KL_ISA_GENERIC; level <= (int)kl_isa_level(); level++) {
    const kl_quant_fns *f = kl_cpu_isa_fns((kl_isa)level)->quant;
    for (int flip = 0; flip <= 0x80; flip += 0x80)
      for (size_t n = 0; n <= 4099; n = n < 100 ? n + 1 : 4099) {
        uint64_t want = 0;
        for (size_t i = 0; i < n; i++) want += (uint8_t)(x[i] ^ flip);
        uint64_t got = f->sum_codes(x, (uint8_t)flip, n);
        if (got != want || gen->sum_codes(x, (uint8_t)flip, n) != want)
          fail_msg("level %d, flip %d, %zu codes: %llu, expected %llu", level, flip, n,
                   (unsigned long long)got, (unsigned long long)want);
        if (n == 4099) break;
      }
  }
  free(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_global_pool),
      cmocka_unit_test(test_sum_codes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
