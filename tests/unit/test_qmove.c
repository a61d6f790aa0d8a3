/* An op that only moves elements between DequantizeLinear and QuantizeLinear, as
 * quantize_static writes a classifier's Flatten:
 *
 *   x -> Q(sx, zx) -> DQ -> Flatten | Reshape | Transpose | Squeeze | Slice -> Q(sy, zy)
 *     -> DQ -> y
 *
 * (a Slice of channels 1, 3, 5 of 7: ShuffleNetV2's channel split, as kiln quantize now
 * quantizes it)
 *
 * At -O2 pass fold_qdq moves the codes themselves (src/passes/fold_qdq.c, fold_move),
 * with a QLinearLookup requantizing them where sy, zy are not sx, zx (Q(DQ(code)) for
 * each of the 256 codes): no float32 node but the input's Q and the output's DQ is
 * left, and the outputs are -O0's bit for bit (each element goes through the same two
 * float32 conversions), on the reference and the fast kernels, uint8 and int8, at
 * awkward sizes ([2, 7, 3, 5]). A QDQ graph with weights quantized in the graph
 * (DQ(Q(W)), W float32) folds as one with quantized weights: test_fold_qdq. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "runtime/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng = 2027;

typedef struct move_case {
  kl_op op;
  kl_dtype act;
  float sy;
  int zy;
  bool lookup; /* sy, zy differ from sx, zx */
} move_case;

#define SX 0.029f
#define ZX_U8 117
#define ZX_I8 -7

static const move_case cases[] = {
    {KL_OP_Flatten, KL_U8, SX, ZX_U8, false},   /* quantize_static's classifier */
    {KL_OP_Flatten, KL_I8, SX, ZX_I8, false},
    {KL_OP_Flatten, KL_U8, 0.041f, 100, true},
    {KL_OP_Reshape, KL_I8, 0.023f, 3, true},
    {KL_OP_Transpose, KL_U8, SX, ZX_U8, false},
    {KL_OP_Transpose, KL_I8, 0.05f, -20, true},
    {KL_OP_Squeeze, KL_U8, SX, ZX_U8, false},
    {KL_OP_Slice, KL_U8, SX, ZX_U8, false},
    {KL_OP_Slice, KL_I8, 0.037f, 11, true},
};

static int const_f32(kl_graph *g, float v) { return tu_graph_const(g, NULL, KL_F32, 0, NULL, &v); }

static int const_zp(kl_graph *g, kl_dtype t, int z) {
  uint8_t u = (uint8_t)z;
  int8_t s = (int8_t)z;
  return tu_graph_const(g, NULL, t, 0, NULL, t == KL_U8 ? (void *)&u : (void *)&s);
}

static kl_graph *move_graph(const move_case *c) {
  kl_graph *g = tu_graph_new();
  bool squeeze = c->op == KL_OP_Squeeze;
  int64_t xd[4] = {2, 7, squeeze ? 1 : 3, 5};
  int x = tu_graph_input(g, "x", KL_F32, 4, xd);
  int s_x = const_f32(g, SX), z_x = const_zp(g, c->act, c->act == KL_U8 ? ZX_U8 : ZX_I8);
  int xdq = TU_OP(g, DequantizeLinear, TU_OP(g, QuantizeLinear, x, s_x, z_x), s_x, z_x);
  int y;
  if (c->op == KL_OP_Reshape) {
    int64_t shape[3] = {7, -1, 2}, three = 3;
    y = TU_OP(g, Reshape, xdq, tu_graph_const(g, NULL, KL_I64, 1, &three, shape));
  } else if (c->op == KL_OP_Slice) {
    int64_t one = 1, start = 1, end = 6, axis = 1, step = 2;
    y = tu_graph_op(g, KL_OP_Slice, 5,
                    (int[]){xdq, tu_graph_const(g, NULL, KL_I64, 1, &one, &start),
                            tu_graph_const(g, NULL, KL_I64, 1, &one, &end),
                            tu_graph_const(g, NULL, KL_I64, 1, &one, &axis),
                            tu_graph_const(g, NULL, KL_I64, 1, &one, &step)});
  } else if (squeeze) {
    int64_t axis = 2, one = 1;
    y = TU_OP(g, Squeeze, xdq, tu_graph_const(g, NULL, KL_I64, 1, &one, &axis));
  } else {
    y = tu_graph_op(g, c->op, 1, &xdq);
    if (c->op == KL_OP_Transpose)
      tu_node_ints(g, g->values[y].producer, "perm", 4, (const int64_t[]){2, 0, 3, 1});
  }
  int s_y = const_f32(g, c->sy), z_y = const_zp(g, c->act, c->zy);
  int yq = TU_OP(g, QuantizeLinear, y, s_y, z_y);
  tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){yq, s_y, z_y}, 1);
  return g;
}

static int count_op(const kiln_model *m, kl_op op) {
  int n = 0;
  for (int i = 0; i < m->g->n_nodes; i++) n += m->g->nodes[i].op == op;
  return n;
}

static void test_move(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const move_case *mc = &cases[c];
    kiln_model *m0 = tu_model_of(move_graph(mc), 0), *m2 = tu_model_of(move_graph(mc), 2);
    assert_int_equal(count_op(m2, KL_OP_QuantizeLinear), 1);   /* x's */
    assert_int_equal(count_op(m2, KL_OP_DequantizeLinear), 1); /* y's */
    assert_int_equal(count_op(m2, KL_OP_KilnQLinearLookup), mc->lookup);
    assert_int_equal(m2->g->n_nodes, 3 + mc->lookup);
    int64_t n = mc->op == KL_OP_Squeeze ? 70 : 210, ny = mc->op == KL_OP_Slice ? 90 : n;
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = tu_rand_f32(&rng, -4.5f, 4.5f); /* saturates too */
    for (int fast = 0; fast < 2; fast++) {
      kiln_session *s0 = tu_session(m0, true, 0), *s2 = tu_session(m2, !fast, 0);
      int64_t n0, n2;
      float *want = tu_run_f32(s0, m0, &x, &n0), *got = tu_run_f32(s2, m2, &x, &n2);
      assert_int_equal(n0, ny);
      assert_int_equal(n2, ny);
      for (int64_t i = 0; i < ny; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
          fail_msg("case %zu (%s): output %lld is %g, expected %g", c, fast ? "fast" : "reference",
                   (long long)i, (double)got[i], (double)want[i]);
      free(want), free(got);
      kiln_session_free(s0), kiln_session_free(s2);
    }
    free(x);
    kiln_model_free(m0), kiln_model_free(m2);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_move),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
