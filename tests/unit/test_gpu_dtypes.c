/* The GPU backend's kernels of the dtypes besides float32 (int64, int32, bool, uint8)
 * against the reference kernels, bit for bit, on random data at awkward sizes: the
 * moves (Transpose, Concat, Slice, Split, Expand, Tile, Gather, Pad, Identity and the
 * views) of every such dtype; Cast between all of them and float32 (NaN, infinities,
 * values past int32's and int64's ranges); Equal, Less, LessOrEqual, Greater and
 * GreaterOrEqual; And, Or, Xor, Not; Where; int64 Add, Sub, Mul, Div, Min, Max, Neg and
 * Abs (wrapping, INT64_MIN / -1), all under broadcasting at ranks 1 to 5, with empty
 * tensors. Then what a model sees: an int64 division by zero on the device fails the
 * run as on the CPU; a BERT-style attention mask (int64 mask -> Sub, Unsqueeze, Cast,
 * Where, Mul into the scores' Add) runs wholly on the device; shape arithmetic (Shape,
 * Gather, Concat into a Reshape) stays on the host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/session.h"
#include "testutil.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rand64(void) { /* xorshift64 */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Values that find the edges: small ones (so that comparisons meet equal operands),
 * then every width's limits, then anything. */
static int64_t rand_i64(bool no_zero) {
  static const int64_t edges[] = {INT64_MIN, INT64_MAX, -1, 1, (int64_t)1 << 31,
                                  -((int64_t)1 << 31) - 1, (int64_t)3 << 40, 255, 256};
  uint64_t r = rand64();
  int64_t v;
  switch (r % 8) {
  case 0: v = edges[(r >> 8) % (sizeof edges / sizeof edges[0])]; break;
  case 1: case 2: case 3: v = (int64_t)((r >> 8) % 9) - 4; break;
  default: v = (int64_t)rand64(); break;
  }
  return no_zero && v == 0 ? 3 : v;
}

static float rand_f32(void) {
  static const float edges[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 3e9f, -3e9f, 1e20f,
                                -1e20f, 2147483520.0f, -2147483648.0f, 255.5f, -0.75f};
  uint64_t r = rand64();
  switch (r % 6) {
  case 0: return edges[(r >> 8) % (sizeof edges / sizeof edges[0])];
  case 1: case 2: return (float)((int)((r >> 8) % 9) - 4) * 0.5f; /* often equal */
  default: return ((float)((r >> 8) % 2000001) - 1000000.0f) / 4096.0f;
  }
}

/* Fills n elements of dtype t at p at random (ints never 0 when no_zero). */
static void fill(void *p, kl_dtype t, int64_t n, bool no_zero) {
  for (int64_t k = 0; k < n; k++) {
    int64_t v = rand_i64(no_zero);
    switch (t) {
    case KL_F32: ((float *)p)[k] = rand_f32(); break;
    case KL_I64: ((int64_t *)p)[k] = v; break;
    case KL_I32: ((int32_t *)p)[k] = (int32_t)v == 0 && no_zero ? 5 : (int32_t)v; break;
    case KL_U8: ((uint8_t *)p)[k] = (uint8_t)v == 0 && no_zero ? 7 : (uint8_t)v; break;
    case KL_BOOL: ((uint8_t *)p)[k] = (uint8_t)(rand64() >> 20 & 1); break;
    default: fail_msg("no filling for dtype %d", (int)t);
    }
  }
}

/* Inputs for tu_gpu_check_at (tu_gpu_fill): ints never 0 in the inputs whose bit is set
 * in fill_no_zero. */
static unsigned fill_no_zero;
static void fill_input(void *p, kl_dtype t, int64_t n, int input) {
  fill(p, t, n, fill_no_zero >> input & 1u);
}

/* Exports g (freed), loads it at opt_level and runs it twice on random inputs (ints
 * never 0 in the inputs whose bit is in no_zero) with the reference kernels and on the
 * device: every output must match bit for bit (NaN any NaN) and, when all_on_device,
 * every node run on the device (tu_gpu_check_at, precision fp32). Returns the device's
 * node count. */
static int check(kl_graph *g, const char *what, int opt_level, unsigned no_zero,
                 bool all_on_device) {
  fill_no_zero = no_zero;
  tu_gpu_fill = fill_input;
  int on_dev = tu_gpu_check_at(g, what, opt_level, (tu_tol){0, 0}, 1, all_on_device, "fp32",
                               false);
  tu_gpu_fill = NULL;
  return on_dev;
}

static const kl_dtype int_types[] = {KL_I64, KL_I32, KL_BOOL, KL_U8};
#define N_INT_TYPES (int)(sizeof int_types / sizeof int_types[0])

static int ints(kl_graph *g, int n, const int64_t *v) {
  return tu_graph_const(g, NULL, KL_I64, 1, (const int64_t[]){n}, v);
}

/* The last node of g: its attribute name set to v. */
static void last_int(kl_graph *g, const char *name, int64_t v) {
  assert_int_equal(kl_node_set_int(g, g->n_nodes - 1, name, v, NULL), KILN_OK);
}

static void output(kl_graph *g, int v) { assert_int_equal(kl_graph_add_output(g, v, NULL), KILN_OK); }

static void test_moves(void **state) {
  (void)state;
  for (int t = 0; t < N_INT_TYPES; t++) {
    kl_dtype dt = int_types[t];
    char what[96];
    kl_graph *g = tu_graph_new(); /* Transpose at rank 5, Concat with an empty part */
    int x = tu_graph_input(g, "x", dt, 5, (const int64_t[]){2, 3, 5, 1, 3});
    int tr = TU_OP(g, Transpose, x);
    tu_node_ints(g, g->n_nodes - 1, "perm", 5, (const int64_t[]){4, 0, 3, 2, 1});
    output(g, tr);
    int a = tu_graph_input(g, "a", dt, 3, (const int64_t[]){3, 7, 5});
    int e = tu_graph_input(g, "e", dt, 3, (const int64_t[]){3, 0, 5});
    int b = tu_graph_input(g, "b", dt, 3, (const int64_t[]){3, 2, 5});
    output(g, TU_OP(g, Concat, a, e, b));
    last_int(g, "axis", 1);
    snprintf(what, sizeof what, "%s Transpose, Concat", kl_dtype_name(dt));
    check(g, what, 0, 0, true);

    g = tu_graph_new(); /* Slice backwards, Split with an empty part, Expand, Tile */
    x = tu_graph_input(g, "x", dt, 3, (const int64_t[]){4, 9, 7});
    output(g, TU_OP(g, Slice, x, ints(g, 2, (const int64_t[]){8, 1}),
                    ints(g, 2, (const int64_t[]){-100, 7}), ints(g, 2, (const int64_t[]){1, 2}),
                    ints(g, 2, (const int64_t[]){-2, 3})));
    int parts[3] = {tu_graph_value(g, "p0"), tu_graph_value(g, "p1"), tu_graph_value(g, "p2")};
    tu_graph_node(g, KL_OP_Split, "split", 2, (const int[]){x, ints(g, 3, (const int64_t[]){2, 0, 7})},
                  3, parts);
    last_int(g, "axis", 1);
    for (int k = 0; k < 3; k++) output(g, parts[k]);
    int s = tu_graph_input(g, "s", dt, 3, (const int64_t[]){3, 1, 5});
    output(g, TU_OP(g, Expand, s, ints(g, 4, (const int64_t[]){2, 3, 4, 5})));
    int r = tu_graph_input(g, "r", dt, 1, (const int64_t[]){3});
    output(g, TU_OP(g, Tile, r, ints(g, 1, (const int64_t[]){5})));
    snprintf(what, sizeof what, "%s Slice, Split, Expand, Tile", kl_dtype_name(dt));
    check(g, what, 0, 0, true);

    g = tu_graph_new(); /* Gather (negative indices), Pad, Identity and the views */
    x = tu_graph_input(g, "x", dt, 3, (const int64_t[]){4, 5, 3});
    output(g, TU_OP(g, Gather, x, ints(g, 4, (const int64_t[]){-1, 0, 4, -5})));
    last_int(g, "axis", 1);
    /* the constant: the low bytes of -3 (a bool's 1) */
    int value = tu_graph_const(g, NULL, dt, 0, NULL, (const int64_t[]){dt == KL_BOOL ? 1 : -3});
    output(g, TU_OP(g, Pad, x, ints(g, 6, (const int64_t[]){1, 0, 2, 0, 3, -1}), value));
    int id = TU_OP(g, Identity, x);
    int un = TU_OP(g, Unsqueeze, id, ints(g, 1, (const int64_t[]){1}));
    int re = TU_OP(g, Reshape, un, ints(g, 2, (const int64_t[]){5, -1}));
    int sq = TU_OP(g, Squeeze, TU_OP(g, Unsqueeze, re, ints(g, 1, (const int64_t[]){0})),
                   ints(g, 1, (const int64_t[]){0}));
    output(g, TU_OP(g, Flatten, sq));
    snprintf(what, sizeof what, "%s Gather, Pad, Identity, views", kl_dtype_name(dt));
    check(g, what, 0, 0, true);
  }
}

static void test_cast(void **state) {
  (void)state;
  static const kl_dtype types[] = {KL_F32, KL_I64, KL_I32, KL_BOOL, KL_U8};
  const int n = (int)(sizeof types / sizeof types[0]);
  for (int from = 0; from < n; from++) {
    kl_graph *g = tu_graph_new();
    int x = tu_graph_input(g, "x", types[from], 3, (const int64_t[]){3, 5, 67});
    int empty = tu_graph_input(g, "e", types[from], 2, (const int64_t[]){0, 3});
    for (int to = 0; to < n; to++) {
      output(g, TU_OP(g, Cast, x));
      last_int(g, "to", types[to]);
      output(g, TU_OP(g, Cast, empty));
      last_int(g, "to", types[to]);
    }
    char what[64];
    snprintf(what, sizeof what, "Cast from %s", kl_dtype_name(types[from]));
    check(g, what, 0, 0, true);
  }
}

/* Shapes of two operands under broadcasting, ranks 1 to 5. */
static const struct {
  int ra, rb;
  int64_t a[5], b[5];
} pairs[] = {
    {1, 1, {37}, {37}},
    {1, 1, {1}, {13}},
    {4, 3, {2, 3, 1, 5}, {3, 4, 1}},
    {5, 2, {2, 1, 3, 1, 7}, {5, 1}},
    {2, 2, {0, 3}, {1, 3}}, /* empty */
};
#define N_PAIRS (int)(sizeof pairs / sizeof pairs[0])

/* A graph of op over every pair of shapes, inputs of dtype dt; no_zero: the pairs'
 * second operands are never 0. */
static void binary_cases(const kl_op *ops, int n_ops, kl_dtype dt, const char *label) {
  for (int o = 0; o < n_ops; o++) {
    kl_graph *g = tu_graph_new();
    unsigned no_zero = 0;
    for (int p = 0; p < N_PAIRS; p++) {
      char na[8], nb[8];
      snprintf(na, sizeof na, "a%d", p);
      snprintf(nb, sizeof nb, "b%d", p);
      int a = tu_graph_input(g, na, dt, pairs[p].ra, pairs[p].a);
      int b = tu_graph_input(g, nb, dt, pairs[p].rb, pairs[p].b);
      no_zero |= 1u << (2 * p + 1);
      output(g, tu_graph_op(g, ops[o], 2, (const int[]){a, b}));
    }
    char what[64];
    snprintf(what, sizeof what, "%s %s of %s", label, kl_op_name(ops[o]), kl_dtype_name(dt));
    check(g, what, 0, ops[o] == KL_OP_Div ? no_zero : 0, true);
  }
}

static void test_compare(void **state) {
  (void)state;
  static const kl_op ops[] = {KL_OP_Equal, KL_OP_Less, KL_OP_LessOrEqual, KL_OP_Greater,
                              KL_OP_GreaterOrEqual};
  static const kl_dtype types[] = {KL_F32, KL_I64, KL_I32, KL_U8};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
    binary_cases(ops, 5, types[t], "compare");
  binary_cases(ops, 1, KL_BOOL, "compare");
}

static void test_logic(void **state) {
  (void)state;
  static const kl_op ops[] = {KL_OP_And, KL_OP_Or, KL_OP_Xor};
  binary_cases(ops, 3, KL_BOOL, "logic");
  kl_graph *g = tu_graph_new();
  output(g, TU_OP(g, Not, tu_graph_input(g, "x", KL_BOOL, 4, (const int64_t[]){3, 1, 5, 33})));
  output(g, TU_OP(g, Not, tu_graph_input(g, "e", KL_BOOL, 1, (const int64_t[]){0})));
  check(g, "Not", 0, 0, true);
}

static void test_where(void **state) {
  (void)state;
  static const kl_dtype types[] = {KL_F32, KL_I64, KL_I32, KL_BOOL, KL_U8};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    kl_graph *g = tu_graph_new();
    int c = tu_graph_input(g, "c", KL_BOOL, 4, (const int64_t[]){2, 1, 5, 1});
    int x = tu_graph_input(g, "x", types[t], 2, (const int64_t[]){1, 7});
    int y = tu_graph_input(g, "y", types[t], 5, (const int64_t[]){3, 2, 1, 5, 7});
    output(g, TU_OP(g, Where, c, x, y));
    int c1 = tu_graph_input(g, "c1", KL_BOOL, 1, (const int64_t[]){41});
    output(g, TU_OP(g, Where, c1, tu_graph_input(g, "x1", types[t], 1, (const int64_t[]){41}),
                    tu_graph_input(g, "y1", types[t], 1, (const int64_t[]){1})));
    char what[64];
    snprintf(what, sizeof what, "Where of %s", kl_dtype_name(types[t]));
    check(g, what, 0, 0, true);
  }
}

static void test_int64_arith(void **state) {
  (void)state;
  static const kl_op ops[] = {KL_OP_Add, KL_OP_Sub, KL_OP_Mul, KL_OP_Div, KL_OP_Min, KL_OP_Max};
  binary_cases(ops, 6, KL_I64, "arithmetic");
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_I64, 3, (const int64_t[]){3, 7, 11});
  output(g, TU_OP(g, Neg, x));
  output(g, TU_OP(g, Abs, x));
  /* the limits as device values (x - x + limits: constants alone stay on the host) */
  int z = tu_graph_input(g, "z", KL_I64, 1, (const int64_t[]){3});
  int lim = TU_OP(g, Add, TU_OP(g, Sub, z, z),
                  tu_graph_const(g, NULL, KL_I64, 1, (const int64_t[]){3},
                                 (const int64_t[]){INT64_MIN, INT64_MIN, 7}));
  output(g, TU_OP(g, Div, lim, tu_graph_const(g, NULL, KL_I64, 1, (const int64_t[]){3},
                                             (const int64_t[]){-1, 3, -2})));
  output(g, TU_OP(g, Neg, lim));
  output(g, TU_OP(g, Abs, lim));
  check(g, "int64 Neg, Abs, INT64_MIN / -1", 0, 0, true);
}

/* An int64 division by zero on the device fails the run as on the CPU (the flag the
 * kernel raises), and the next run with good divisors succeeds. */
static void test_div_zero(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int a = tu_graph_input(g, "a", KL_I64, 1, (const int64_t[]){5});
  int b = tu_graph_input(g, "b", KL_I64, 1, (const int64_t[]){5});
  output(g, TU_OP(g, Div, a, b));
  kiln_model *m = tu_model_of(g, 0);
  kiln_session *s = tu_gpu_session(m, "opencl", false, "fp32");
  assert_string_not_equal(kl_session_node_device(s, 0), "cpu");
  int64_t av[5] = {7, -9, 1, 4, (int64_t)1 << 40}, bv[5] = {2, 2, 0, -3, 3};
  void *bufs[2] = {av, bv};
  tu_gpu_set_inputs(s, m, bufs);
  assert_int_equal(kiln_session_run(s), KILN_ERR_INVALID_ARGUMENT);
  tu_assert_contains_at(kiln_session_error(s), "integer division by zero at element 2",
                        __FILE__, __LINE__);
  /* the unnamed node by its index, as the CPU names it (it read "node '' (op 'Div'") */
  tu_assert_contains_at(kiln_session_error(s), "node #0 (Div), on ", __FILE__, __LINE__);
  bv[2] = 5;
  tu_gpu_set_inputs(s, m, bufs);
  assert_int_equal(kiln_session_run(s), KILN_OK);
  kiln_tensor_info info;
  const void *data;
  assert_int_equal(kiln_session_get_output(s, 0, &info, &data), KILN_OK);
  const int64_t want[5] = {3, -4, 0, -1, ((int64_t)1 << 40) / 3};
  assert_memory_equal(data, want, sizeof want);
  kiln_session_free(s);
  kiln_model_free(m);
}

/* A BERT-style attention mask: an int64 mask [B, S] made the additive mask of the
 * scores [B, H, S, S] in the ways exporters write it (1 - mask, Unsqueeze, Cast to
 * float and Mul by -10000; Cast to bool and Where; Equal and Not), the whole graph on
 * the device, at -O0 and -O2. */
static void test_mask_graph(void **state) {
  (void)state;
  for (int level = 0; level <= 2; level += 2) {
    kl_graph *g = tu_graph_new();
    int mask = tu_graph_input(g, "mask", KL_I64, 2, (const int64_t[]){3, 7});
    int scores = tu_graph_input(g, "scores", KL_F32, 4, (const int64_t[]){3, 2, 7, 7});
    int one = tu_graph_const(g, NULL, KL_I64, 0, NULL, (const int64_t[]){1});
    int inv = TU_OP(g, Sub, one, mask);
    int ext = TU_OP(g, Unsqueeze, inv, ints(g, 2, (const int64_t[]){1, 2}));
    int f = TU_OP(g, Cast, ext);
    last_int(g, "to", KL_F32);
    int big = tu_graph_const(g, NULL, KL_F32, 0, NULL, (const float[]){-10000.0f});
    int add1 = TU_OP(g, Mul, f, big);
    int cond = TU_OP(g, Cast, ext);
    last_int(g, "to", KL_BOOL);
    int zero = tu_graph_const(g, NULL, KL_F32, 0, NULL, (const float[]){0.0f});
    int add2 = TU_OP(g, Where, cond, big, zero);
    int pad = TU_OP(g, Not, TU_OP(g, Equal, ext, tu_graph_const(g, NULL, KL_I64, 0, NULL,
                                                                (const int64_t[]){0})));
    int add3 = TU_OP(g, Where, pad, zero, big);
    int y = TU_OP(g, Add, TU_OP(g, Add, TU_OP(g, Add, scores, add1), add2), add3);
    output(g, TU_OP(g, Softmax, y));
    char what[64];
    snprintf(what, sizeof what, "attention mask at -O%d", level);
    assert_true(check(g, what, level, 0, true) >= 5);
  }
}

/* Shape arithmetic stays on the host: Shape (the CPU's), then Gather, Unsqueeze and
 * Concat into Reshape's shape do not go to the device and back; the Reshape's data and
 * the Relu after it do go. */
static void test_shape_stays(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 2, (const int64_t[]){-1, 6}); /* not folded */
  int r = TU_OP(g, Relu, x);
  int d0 = TU_OP(g, Gather, TU_OP(g, Shape, r), tu_graph_const(g, NULL, KL_I64, 0, NULL,
                                                               (const int64_t[]){0}));
  int shape = TU_OP(g, Concat, TU_OP(g, Unsqueeze, d0, ints(g, 1, (const int64_t[]){0})),
                    ints(g, 2, (const int64_t[]){3, 2}));
  last_int(g, "axis", 0);
  output(g, TU_OP(g, Relu, TU_OP(g, Reshape, r, shape)));
  kiln_model *m = tu_model_of(g, 0);
  kiln_session *s = tu_gpu_session(m, "opencl", false, "fp32");
  for (int i = 0; i < m->g->n_nodes; i++) {
    kl_op op = m->g->nodes[i].op;
    bool host = op == KL_OP_Shape || op == KL_OP_Gather || op == KL_OP_Unsqueeze ||
                op == KL_OP_Concat;
    if (host != (strcmp(kl_session_node_device(s, i), "cpu") == 0))
      fail_msg("node %d (%s) is on %s", i, kl_op_name(op), kl_session_node_device(s, i));
  }
  kiln_session_free(s);
  kiln_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_moves),       cmocka_unit_test(test_cast),
      cmocka_unit_test(test_compare),     cmocka_unit_test(test_logic),
      cmocka_unit_test(test_where),       cmocka_unit_test(test_int64_arith),
      cmocka_unit_test(test_div_zero),    cmocka_unit_test(test_mask_graph),
      cmocka_unit_test(test_shape_stays),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
