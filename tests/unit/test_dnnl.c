/* The oneDNN kernels (src/backends/cpu/dnnl.c) against the reference kernels, op by
 * op: Conv (groups, depthwise, strides, dilations, pads, auto_pad, 1-D to 3-D; 1x1
 * with strides, run over X subsampled, and the odd sizes where oneDNN refuses that),
 * ConvTranspose, pooling (max, average, global, ceil_mode, dilations), Gemm
 * (transposes, alpha, beta, C shapes), MatMul (batch broadcast, rank 1), the fused ops
 * with every activation, Bias and Sum (same shape: the sum post-op; broadcast: a binary
 * one; the activations kiln runs over Y after the primitive, after Sum, over a staged
 * Y and on threads), and a chain whose tensors stay channels-last between the
 * primitives. Each case runs twice (the second time from the primitive cache) and
 * must match a reference-kernel session within 1e-4 relative, with the session's
 * shared workspace (scratchpads, staged copies) filled with NaNs before every node,
 * so that no node can depend on what it or another left there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "export/onnx_export.h"
#include "kl_config.h"
#include "runtime/session.h"
#if KL_HAVE_DNNL
#include "backends/cpu/dnnl.h"
#include "backends/cpu/dnnl_cache.h"
#endif
#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define TOL 1e-4

static uint32_t rng = 777;

static float frand(float lo, float hi) { return tu_rand_f32(&rng, lo, hi); }

/* A constant of random values in [-bound, bound]. */
static int cst_within(kl_graph *g, int rank, const int64_t *dims, float bound) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  float *d = tu_rand_vec(&rng, (size_t)n, -bound, bound);
  int v = kl_graph_add_const(g, NULL, KL_F32, rank, dims, d, sizeof(float) * (size_t)n, false,
                             NULL);
  assert_true(v >= 0);
  return v;
}

static int cst(kl_graph *g, int rank, const int64_t *dims) { return cst_within(g, rank, dims, 1); }

/* A tensor operand: an input named name when as_input, else a constant. */
static int operand(kl_graph *g, bool as_input, const char *name, int rank, const int64_t *dims) {
  return as_input ? tu_graph_input(g, name, KL_F32, rank, dims) : cst(g, rank, dims);
}

static void activation(kl_graph *g, int n, const char *act, int n_params, const float *p) {
  if (!act) return;
  assert_int_equal(kl_node_set_string(g, n, "activation", act, NULL), KILN_OK);
  if (n_params)
    assert_int_equal(kl_node_set_floats(g, n, "activation_params", p, n_params, NULL), KILN_OK);
}

/* ---- running ---- */

/* Called by check_on after each fast run when set: checks of what ran where. */
static void (*after_fast_run)(const kiln_session *fast, const kiln_model *m);

/* Exports g, runs it with the reference and the fast kernels, compares; frees g.
 * need_dnnl: every node must have run on oneDNN (or kiln's GEMV), not fallen back. */
static void check_at(kl_graph *g, const char *what, bool need_dnnl, int level) {
  kiln_model *m = tu_model_of(g, level);
  float *bufs[4] = {NULL};
  for (int i = 0; i < kiln_model_input_count(m); i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    int64_t n = tu_input_numel(&info);
    bufs[i] = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t k = 0; k < n; k++) bufs[i][k] = frand(-2, 2);
  }
  kiln_session *ref = tu_session(m, true, 0), *fast = tu_session(m, false, 0);
  kl_session_poison_workspace(fast);
  int64_t n_want, n_got;
  float *want = tu_run_f32(ref, m, bufs, &n_want);
  for (int r = 0; r < 2; r++) {
    float *got = tu_run_f32(fast, m, bufs, &n_got);
    for (int i = 0; KL_HAVE_DNNL && need_dnnl && i < m->g->n_nodes; i++) /* oneDNN ran each */
      if (strncmp(kl_session_kernel_name(fast, i), "dnnl", 4) != 0 &&
          strcmp(kl_session_kernel_name(fast, i), "gemv") != 0 && /* or, one row: our GEMV */
          strcmp(kl_session_kernel_name(fast, i), "gemm") != 0 && /* or our tiles (AVX2) */
          strcmp(kl_session_kernel_name(fast, i), "concat") != 0) /* a Concat among them */
        fail_msg("%s: node %d ran on kernel '%s'", what, i, kl_session_kernel_name(fast, i));
      else if (kl_session_slow_path(fast, i)) /* nor on a reference implementation */
        fail_msg("%s: node %d ran on %s at %s", what, i, kl_session_slow_path(fast, i),
                 kl_isa_level_name(kl_isa_level()));
    if (after_fast_run) after_fast_run(fast, m);
    assert_int_equal(n_got, n_want);
    for (int64_t k = 0; k < n_want; k++)
      if (!(fabs((double)got[k] - want[k]) <= TOL * (1 + fabs((double)want[k]))))
        fail_msg("%s (run %d): element %lld is %.8g, the reference %.8g", what, r + 1,
                 (long long)k, (double)got[k], (double)want[k]);
    free(got);
  }
  free(want);
  for (int i = 0; i < 4; i++) free(bufs[i]);
  kiln_session_free(ref);
  kiln_session_free(fast);
  kiln_model_free(m);
}

static void check_on(kl_graph *g, const char *what, bool need_dnnl) {
  check_at(g, what, need_dnnl, 0);
}

static void check(kl_graph *g, const char *what) { check_on(g, what, true); }

/* ---- convolution ---- */

typedef struct conv_case {
  const char *what;
  int rank;
  int64_t x[5], w[5];
  int64_t group;
  int n_sp;
  int64_t strides[3], dilations[3], pads[6];
  const char *auto_pad;
  bool bias;
} conv_case;

static const conv_case conv_cases[] = {
    {"conv 3x3 pad 1", 4, {2, 3, 9, 7}, {5, 3, 3, 3}, 1, 2, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, true},
    {"conv stride 2 dilation 2 uneven pads", 4, {1, 3, 11, 10}, {4, 3, 3, 2}, 1, 2, {2, 2}, {2, 2},
     {0, 1, 2, 1}, NULL, true},
    {"conv groups 2", 4, {1, 4, 8, 8}, {6, 2, 3, 3}, 2, 2, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, false},
    {"conv depthwise stride 2", 4, {1, 8, 7, 7}, {8, 1, 3, 3}, 8, 2, {2, 2}, {1, 1}, {1, 1, 1, 1},
     NULL, true},
    {"conv depthwise multiplier 2", 4, {1, 8, 6, 6}, {16, 1, 3, 3}, 8, 2, {1, 1}, {1, 1},
     {1, 1, 1, 1}, NULL, true},
    {"conv 1x1", 4, {1, 16, 5, 5}, {32, 16, 1, 1}, 1, 2, {1, 1}, {1, 1}, {0, 0, 0, 0}, NULL, true},
    {"conv SAME_UPPER stride 2", 4, {1, 3, 7, 7}, {4, 3, 3, 3}, 1, 2, {2, 2}, {1, 1}, {0},
     "SAME_UPPER", true},
    {"conv 1-D", 3, {2, 4, 11}, {3, 4, 3}, 1, 1, {2}, {1}, {1, 0}, NULL, true},
    {"conv 3-D", 5, {1, 2, 5, 6, 4}, {4, 2, 3, 3, 3}, 1, 3, {1, 1, 1}, {1, 1, 1},
     {1, 1, 1, 1, 1, 1}, NULL, true},
    /* 1x1 with strides: a stride-1 convolution over X subsampled (dnnl.c, subsample_src) */
    {"conv 1x1 stride 2 batch 2", 4, {2, 16, 8, 10}, {24, 16, 1, 1}, 1, 2, {2, 2}, {1, 1},
     {0, 0, 0, 0}, NULL, true},
    {"conv 1x1 stride 2 odd sizes (oneDNN refuses the view)", 4, {2, 16, 7, 9}, {24, 16, 1, 1},
     1, 2, {2, 2}, {1, 1}, {0, 0, 0, 0}, NULL, true},
    {"conv 1x1 stride 2 odd sizes batch 1", 4, {1, 16, 7, 9}, {24, 16, 1, 1}, 1, 2, {2, 2},
     {1, 1}, {0, 0, 0, 0}, NULL, true},
    {"conv 1x1 strides 3, 1 dilation 2", 4, {1, 5, 9, 6}, {7, 5, 1, 1}, 1, 2, {3, 1}, {2, 2},
     {0, 0, 0, 0}, NULL, false},
    {"conv 1x1 groups 2 stride 2", 4, {1, 8, 6, 5}, {6, 4, 1, 1}, 2, 2, {2, 2}, {1, 1},
     {0, 0, 0, 0}, NULL, true},
    {"conv 1x1 SAME_UPPER stride 2", 4, {1, 6, 6, 6}, {3, 6, 1, 1}, 1, 2, {2, 2}, {1, 1}, {0},
     "SAME_UPPER", true},
    {"conv 1-D k1 stride 4", 3, {1, 3, 12}, {5, 3, 1}, 1, 1, {4}, {1}, {0, 0}, NULL, true},
    {"conv 3-D 1x1x1 strides 2, 1, 3", 5, {1, 4, 6, 3, 9}, {6, 4, 1, 1, 1}, 1, 3, {2, 1, 3},
     {1, 1, 1}, {0, 0, 0, 0, 0, 0}, NULL, true},
    {"conv 1x1 stride 2 padded (not subsampled)", 4, {1, 4, 6, 6}, {5, 4, 1, 1}, 1, 2, {2, 2},
     {1, 1}, {1, 0, 0, 1}, NULL, true},
    /* strides past X's extent are not subsampled: the view's strides would overflow
     * (UBSan: a hostile model's stride 2^62 times the row's) */
    {"conv 1x1 stride past the extent", 4, {1, 4, 6, 6}, {3, 4, 1, 1}, 1, 2, {9, 2}, {1, 1},
     {0, 0, 0, 0}, NULL, true},
    {"conv 3x3 32->48 (Winograd)", 4, {1, 32, 10, 12}, {48, 32, 3, 3}, 1, 2, {1, 1}, {1, 1},
     {1, 1, 1, 1}, NULL, true},
};

static int conv_node(kl_graph *g, kl_op op, const conv_case *c, const int64_t *w_dims,
                     int sum) {
  int x = tu_graph_input(g, "x", KL_F32, c->rank, c->x);
  int w = cst(g, c->rank, w_dims);
  int64_t m = op == KL_OP_Conv || op == KL_OP_KilnFusedConv ? w_dims[0] : w_dims[1] * c->group;
  int b = c->bias ? cst(g, 1, &m) : KL_ABSENT;
  int n = sum >= 0 ? tu_graph_output_node(g, op, 4, (int[]){x, w, b, sum}, 1)
                   : tu_graph_output_node(g, op, 3, (int[]){x, w, b}, 1);
  tu_node_ints(g, n, "strides", c->n_sp, c->strides);
  tu_node_ints(g, n, "dilations", c->n_sp, c->dilations);
  if (c->auto_pad)
    assert_int_equal(kl_node_set_string(g, n, "auto_pad", c->auto_pad, NULL), KILN_OK);
  else tu_node_ints(g, n, "pads", 2 * c->n_sp, c->pads);
  assert_int_equal(kl_node_set_int(g, n, "group", c->group, NULL), KILN_OK);
  return n;
}

static void test_conv(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
    kl_graph *g = kl_graph_new();
    conv_node(g, KL_OP_Conv, &conv_cases[i], conv_cases[i].w, -1);
    check(g, conv_cases[i].what);
  }
  /* A hostile stride (2^62) on a 1x1 convolution: not subsampled (the view's strides,
   * X's times it, would overflow: UBSan caught that before the guard), and right
   * whichever kernel runs it (oneDNN refuses it and the reference runs). */
  static const conv_case huge = {"conv 1x1 stride 2^62", 4, {1, 4, 6, 6}, {3, 4, 1, 1}, 1, 2,
                                 {INT64_C(1) << 62, 2}, {1, 1}, {0, 0, 0, 0}, NULL, true};
  kl_graph *g = kl_graph_new();
  conv_node(g, KL_OP_Conv, &huge, huge.w, -1);
  check_on(g, huge.what, false);
}

/* ConvTranspose: W is [C, M/g, K...]. */
static void test_conv_transpose(void **state) {
  (void)state;
  static const conv_case cases[] = {
      {"deconv stride 2 pad 1", 4, {1, 4, 5, 5}, {4, 3, 3, 3}, 1, 2, {2, 2}, {1, 1}, {1, 1, 1, 1},
       NULL, true},
      {"deconv groups 2", 4, {1, 4, 4, 4}, {4, 2, 3, 3}, 2, 2, {2, 2}, {1, 1}, {0, 0, 0, 0}, NULL,
       true},
      {"deconv 1-D stride 3", 3, {2, 3, 7}, {3, 5, 4}, 1, 1, {3}, {1}, {0, 0}, NULL, false},
      {"deconv dilation 2", 4, {1, 2, 4, 5}, {2, 3, 3, 3}, 1, 2, {1, 1}, {2, 2}, {1, 0, 1, 2},
       NULL, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kl_graph *g = kl_graph_new();
    conv_node(g, KL_OP_ConvTranspose, &cases[i], cases[i].w, -1);
    check(g, cases[i].what);
  }
  kl_graph *g = kl_graph_new(); /* output_padding */
  int n = conv_node(g, KL_OP_ConvTranspose, &cases[0], cases[0].w, -1);
  tu_node_ints(g, n, "output_padding", 2, (int64_t[]){1, 0});
  check(g, "deconv output_padding");
}

/* A convolution whose output rows are wider than 16384 is not given oneDNN's brgconv,
 * which builds its kernels by the row's width (1.3 us and 550 bytes a column: a 1-D
 * convolution over 9e6 samples asked for 5 GB and aborted the process on
 * std::bad_alloc), and still runs on a fast implementation; a narrower one is free to
 * take it. Checked against the reference. */
static int64_t wide_cols;

static void not_brgconv(const kiln_session *fast, const kiln_model *m) {
  assert_int_equal(m->g->n_nodes, 1);
  const char *impl = kl_session_kernel_impl(fast, 0);
  if (wide_cols > 16384 && impl && strncmp(impl, "brgconv:", 8) == 0)
    fail_msg("a convolution of %lld output columns ran on '%s'", (long long)wide_cols, impl);
}

static void test_wide_rows(void **state) {
  (void)state;
  static const conv_case cases[] = {
      {"1-D, one channel, 20000 columns", 3, {1, 1, 20000}, {1, 1, 3}, 1, 1, {1}, {1}, {1, 1},
       NULL, true},
      {"1-D, 8 x 8 channels, 40000 columns", 3, {1, 8, 40000}, {8, 8, 5}, 1, 1, {1}, {1},
       {2, 2}, NULL, true},
      {"2-D, 2 x 20000", 4, {1, 4, 2, 20000}, {4, 4, 1, 3}, 1, 2, {1, 1}, {1, 1},
       {0, 1, 0, 1}, NULL, true},
      {"1-D, 1000 columns", 3, {1, 8, 1000}, {8, 8, 3}, 1, 1, {1}, {1}, {1, 1}, NULL, true},
  };
  after_fast_run = not_brgconv;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    wide_cols = cases[i].x[cases[i].rank - 1];
    kl_graph *g = kl_graph_new();
    conv_node(g, KL_OP_Conv, &cases[i], cases[i].w, -1);
    check(g, cases[i].what);
  }
  after_fast_run = NULL;
}

/* ---- pooling ---- */

static void test_pool(void **state) {
  (void)state;
  static const struct {
    const char *what;
    kl_op op;
    int rank;
    int64_t x[5];
    int n_sp;
    int64_t kernel[3], strides[3], dilations[3], pads[6];
    int ceil, include_pad;
  } cases[] = {
      {"maxpool 3x3 stride 2 pad 1", KL_OP_MaxPool, 4, {1, 8, 11, 11}, 2, {3, 3}, {2, 2}, {1, 1},
       {1, 1, 1, 1}, 0, 0},
      {"maxpool ceil_mode", KL_OP_MaxPool, 4, {2, 3, 8, 7}, 2, {3, 2}, {2, 2}, {1, 1},
       {0, 0, 0, 0}, 1, 0},
      {"maxpool dilation 2", KL_OP_MaxPool, 4, {1, 4, 9, 9}, 2, {2, 2}, {1, 1}, {2, 2},
       {1, 0, 0, 1}, 0, 0},
      {"maxpool 1-D", KL_OP_MaxPool, 3, {2, 5, 10}, 1, {3}, {3}, {1}, {1, 1}, 0, 0},
      {"avgpool exclude pad", KL_OP_AveragePool, 4, {1, 8, 9, 9}, 2, {3, 3}, {2, 2}, {1, 1},
       {1, 1, 1, 1}, 0, 0},
      {"avgpool include pad", KL_OP_AveragePool, 4, {1, 8, 9, 9}, 2, {3, 3}, {1, 1}, {1, 1},
       {1, 1, 1, 1}, 0, 1},
      {"avgpool 3-D", KL_OP_AveragePool, 5, {1, 2, 4, 6, 5}, 3, {2, 2, 2}, {2, 2, 2}, {1, 1, 1},
       {0, 0, 0, 0, 0, 0}, 0, 0},
      /* stride 1 along the row: the inside outputs of a row in one call (pool_row_s1) */
      {"avgpool 3x3 stride 1 exclude pad (PoolFormer)", KL_OP_AveragePool, 4, {2, 5, 10, 37},
       2, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 0, 0},
      {"maxpool 5x5 stride 1 pad 2, 70 wide", KL_OP_MaxPool, 4, {1, 3, 6, 70}, 2, {5, 5},
       {1, 1}, {1, 1}, {2, 2, 2, 2}, 0, 0},
      {"avgpool 1-D stride 1 dilation 3 uneven pads", KL_OP_AveragePool, 3, {2, 4, 25}, 1, {4},
       {1}, {3}, {2, 5}, 0, 1},
      {"maxpool wider than the row", KL_OP_MaxPool, 4, {1, 2, 5, 4}, 2, {3, 7}, {2, 1}, {1, 1},
       {1, 3, 1, 3}, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kl_graph *g = kl_graph_new();
    int x = tu_graph_input(g, "x", KL_F32, cases[i].rank, cases[i].x);
    int n = tu_graph_output_node(g, cases[i].op, 1, &x, 1);
    int sp = cases[i].n_sp;
    tu_node_ints(g, n, "kernel_shape", sp, cases[i].kernel);
    tu_node_ints(g, n, "strides", sp, cases[i].strides);
    tu_node_ints(g, n, "pads", 2 * sp, cases[i].pads);
    if (cases[i].dilations[0] != 1) tu_node_ints(g, n, "dilations", sp, cases[i].dilations);
    assert_int_equal(kl_node_set_int(g, n, "ceil_mode", cases[i].ceil, NULL), KILN_OK);
    if (cases[i].op == KL_OP_AveragePool)
      assert_int_equal(kl_node_set_int(g, n, "count_include_pad", cases[i].include_pad, NULL),
                       KILN_OK);
    /* dilated pooling is kiln's own (oneDNN has only its reference loop for it) */
    check_on(g, cases[i].what, cases[i].dilations[0] == 1);
  }
  static const kl_op globals[] = {KL_OP_GlobalAveragePool, KL_OP_GlobalMaxPool};
  for (int i = 0; i < 2; i++) {
    kl_graph *g = kl_graph_new();
    int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 6, 7, 5});
    tu_graph_output_node(g, globals[i], 1, &x, 1);
    check(g, i ? "global max pool" : "global average pool");
  }
}

/* ---- Gemm and MatMul ---- */

static void test_gemm(void **state) {
  (void)state;
  static const struct {
    const char *what;
    bool ta, tb;
    float alpha, beta;
    int c_rank;
    int64_t c[2];
    bool b_input;
  } cases[] = {
      {"gemm C [N]", false, false, 1, 1, 1, {3}, false},
      {"gemm transposes alpha beta", true, true, 0.5f, 2, 2, {5, 3}, false},
      {"gemm C [M, 1]", false, true, 1, 1, 2, {5, 1}, false},
      {"gemm no C", false, false, 1.5f, 1, 0, {0}, false},
      {"gemm B an input", false, false, 1, 1, 1, {3}, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kl_graph *g = kl_graph_new();
    int64_t ad[2] = {cases[i].ta ? 7 : 5, cases[i].ta ? 5 : 7};
    int64_t bd[2] = {cases[i].tb ? 3 : 7, cases[i].tb ? 7 : 3};
    int a = tu_graph_input(g, "a", KL_F32, 2, ad);
    int b = operand(g, cases[i].b_input, "b", 2, bd);
    int c = cases[i].c_rank ? cst(g, cases[i].c_rank, cases[i].c) : KL_ABSENT;
    int n = tu_graph_output_node(g, KL_OP_Gemm, c == KL_ABSENT ? 2 : 3, (int[]){a, b, c}, 1);
    assert_int_equal(kl_node_set_int(g, n, "transA", cases[i].ta, NULL), KILN_OK);
    assert_int_equal(kl_node_set_int(g, n, "transB", cases[i].tb, NULL), KILN_OK);
    assert_int_equal(kl_node_set_float(g, n, "alpha", cases[i].alpha, NULL), KILN_OK);
    assert_int_equal(kl_node_set_float(g, n, "beta", cases[i].beta, NULL), KILN_OK);
    check(g, cases[i].what);
  }
}

static void test_matmul(void **state) {
  (void)state;
  static const struct {
    const char *what;
    int ra, rb;
    int64_t a[4], b[4];
    bool b_input;
  } cases[] = {
      {"matmul [3,4,5] x [5,6]", 3, 2, {3, 4, 5}, {5, 6}, false},
      {"matmul broadcast [2,1,4,5] x [3,5,2]", 4, 3, {2, 1, 4, 5}, {3, 5, 2}, true},
      {"matmul [5] x [5,3]", 1, 2, {5}, {5, 3}, false},
      {"matmul [2,4,5] x [5]", 3, 1, {2, 4, 5}, {5}, true},
      {"matmul [4,5] x input [5,6]", 2, 2, {4, 5}, {5, 6}, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kl_graph *g = kl_graph_new();
    int a = tu_graph_input(g, "a", KL_F32, cases[i].ra, cases[i].a);
    int b = operand(g, cases[i].b_input, "b", cases[i].rb, cases[i].b);
    tu_graph_output_node(g, KL_OP_MatMul, 2, (int[]){a, b}, 1);
    check(g, cases[i].what);
  }
}

/* ---- fused ops ---- */

static const struct {
  const char *name;
  int n;
  float p[2];
} acts[] = {
    {"Relu", 0, {0}},      {"LeakyRelu", 1, {0.1f}}, {"Clip", 2, {-0.5f, 0.7f}},
    {"Sigmoid", 0, {0}},   {"Tanh", 0, {0}},         {"HardSigmoid", 2, {0.2f, 0.5f}},
    {"HardSwish", 0, {0}}, {"Gelu", 0, {0}},         {"GeluTanh", 0, {0}},
    {"Silu", 0, {0}},      {"Mish", 0, {0}},         {"Elu", 1, {0.8f}},
};

static void test_fused_conv_activations(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
    kl_graph *g = kl_graph_new();
    int n = conv_node(g, KL_OP_KilnFusedConv, &conv_cases[0], conv_cases[0].w, -1);
    activation(g, n, acts[i].name, acts[i].n, acts[i].p);
    char what[64];
    snprintf(what, sizeof what, "FusedConv + %s", acts[i].name);
    check(g, what);
  }
}

static void test_fused_sum(void **state) {
  (void)state;
  const conv_case *c = &conv_cases[0]; /* y [2, 5, 9, 7] */
  kl_graph *g = kl_graph_new();
  int sum = tu_graph_input(g, "s", KL_F32, 4, (int64_t[]){2, 5, 9, 7});
  int n = conv_node(g, KL_OP_KilnFusedConv, c, c->w, sum);
  activation(g, n, "Relu", 0, NULL);
  check(g, "FusedConv + Sum + Relu");
  g = kl_graph_new();
  sum = tu_graph_input(g, "s", KL_F32, 4, (int64_t[]){1, 5, 1, 1});
  conv_node(g, KL_OP_KilnFusedConv, c, c->w, sum);
  check(g, "FusedConv + broadcast Sum");
  const conv_case *wino = &conv_cases[sizeof conv_cases / sizeof conv_cases[0] - 1];
  g = kl_graph_new();
  sum = tu_graph_input(g, "s", KL_F32, 4, (int64_t[]){1, 48, 10, 12});
  n = conv_node(g, KL_OP_KilnFusedConv, wino, wino->w, sum);
  activation(g, n, "Relu", 0, NULL);
  check(g, "FusedConv (Winograd) + Sum + Relu");
  /* activations that run after the primitive over Y (dnnl.c, act_after_of): after the
   * Sum post-op, over a staged (Winograd) Y, and on threads (51200 outputs) */
  g = kl_graph_new();
  sum = tu_graph_input(g, "s", KL_F32, 4, (int64_t[]){1, 48, 10, 12});
  n = conv_node(g, KL_OP_KilnFusedConv, wino, wino->w, sum);
  activation(g, n, "Sigmoid", 0, NULL);
  check(g, "FusedConv (Winograd) + Sum + Sigmoid");
  static const conv_case big = {"", 4, {1, 16, 40, 40}, {32, 16, 1, 1}, 1, 2, {1, 1}, {1, 1},
                                {0, 0, 0, 0}, NULL, true};
  g = kl_graph_new();
  sum = tu_graph_input(g, "s", KL_F32, 4, (int64_t[]){1, 32, 40, 40});
  n = conv_node(g, KL_OP_KilnFusedConv, &big, big.w, sum);
  activation(g, n, "Silu", 0, NULL);
  check(g, "FusedConv 1x1 + Sum + Silu, 51200 outputs");
  g = kl_graph_new();
  sum = tu_graph_input(g, "s", KL_F32, 4, (int64_t[]){1, 3, 10, 10});
  n = conv_node(g, KL_OP_KilnFusedConvTranspose, &(conv_case){"", 4, {1, 4, 5, 5},
                {4, 3, 3, 3}, 1, 2, {2, 2}, {1, 1}, {0, 0, 1, 1}, NULL, true},
                (int64_t[]){4, 3, 3, 3}, sum);
  activation(g, n, "Tanh", 0, NULL);
  check(g, "FusedConvTranspose + Sum + Tanh");
}

static void test_fused_gemm_matmul(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int a = tu_graph_input(g, "a", KL_F32, 2, (int64_t[]){6, 8});
  int s = tu_graph_input(g, "s", KL_F32, 2, (int64_t[]){6, 4});
  int w = cst(g, 2, (int64_t[]){4, 8}), bias = cst(g, 1, (int64_t[]){4});
  int n = tu_graph_output_node(g, KL_OP_KilnFusedGemm, 4, (int[]){a, w, bias, s}, 1);
  assert_int_equal(kl_node_set_int(g, n, "transB", 1, NULL), KILN_OK);
  activation(g, n, "LeakyRelu", 1, (float[]){0.2f});
  check(g, "FusedGemm + C + Sum + LeakyRelu");

  /* Gelu stays oneDNN's post-op; GeluTanh runs after the primitive (act_after_of) */
  for (int i = 0; i < 2; i++) {
    const char *gelu = i == 0 ? "Gelu" : "GeluTanh";
    g = kl_graph_new();
    a = tu_graph_input(g, "a", KL_F32, 3, (int64_t[]){2, 5, 8});
    s = tu_graph_input(g, "s", KL_F32, 3, (int64_t[]){2, 5, 6});
    w = cst(g, 2, (int64_t[]){8, 6});
    bias = cst(g, 1, (int64_t[]){6});
    n = tu_graph_output_node(g, KL_OP_KilnFusedMatMul, 4, (int[]){a, w, bias, s}, 1);
    activation(g, n, gelu, 0, NULL);
    char what[64];
    snprintf(what, sizeof what, "FusedMatMul + Bias + Sum + %s", gelu);
    check(g, what);
  }

  g = kl_graph_new();
  a = tu_graph_input(g, "a", KL_F32, 3, (int64_t[]){2, 5, 8});
  s = tu_graph_input(g, "s", KL_F32, 2, (int64_t[]){5, 6});
  tu_graph_output_node(g, KL_OP_KilnFusedMatMul, 4,
                       (int[]){a, cst(g, 2, (int64_t[]){8, 6}), KL_ABSENT, s}, 1);
  check(g, "FusedMatMul + broadcast Sum");
}

/* fast_only: a FusedMatMul whose Sum broadcasts along M (oneDNN has only its
 * reference loop for that binary post-op) with an activation kiln's primitives lack
 * (Mish), so that kiln cannot add Sum and apply the activation after the primitive
 * either: a session with fast_only refuses the run, naming the node and the slow
 * path; a plain one runs it and reports the slow path. */
static void test_fast_only(void **state) {
  (void)state;
  if (!KL_HAVE_DNNL || kl_isa_level() == KL_ISA_GENERIC) skip();
  kl_graph *g = kl_graph_new();
  int a = tu_graph_input(g, "a", KL_F32, 3, (int64_t[]){2, 5, 8});
  int s = tu_graph_input(g, "s", KL_F32, 3, (int64_t[]){2, 5, 1});
  int n = tu_graph_output_node(g, KL_OP_KilnFusedMatMul, 4,
                               (int[]){a, cst(g, 2, (int64_t[]){8, 6}), KL_ABSENT, s}, 1);
  activation(g, n, "Mish", 0, NULL);
  kiln_model *m = tu_model_of(g, 0);
  float *bufs[2] = {malloc(sizeof(float) * 80), malloc(sizeof(float) * 10)};
  for (int k = 0; k < 80; k++) bufs[0][k] = frand(-2, 2);
  for (int k = 0; k < 10; k++) bufs[1][k] = frand(-2, 2);
  kiln_session *plain = tu_session(m, false, 0);
  int64_t count;
  free(tu_run_f32(plain, m, bufs, &count));
  const char *slow = kl_session_slow_path(plain, 0);
  assert_non_null(slow);
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "fast_only", 1), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "fast_only", 2), KILN_ERR_INVALID_ARGUMENT);
  kiln_session *strict = NULL;
  assert_int_equal(kiln_session_create(m, o, &strict), KILN_OK);
  for (int i = 0; i < 2; i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    assert_int_equal(kiln_session_set_input(strict, info.name, KILN_DTYPE_FLOAT32, info.rank,
                                            info.dims, bufs[i], sizeof(float) * (i ? 10 : 80)),
                     KILN_OK);
  }
  assert_int_equal(kiln_session_run(strict), KILN_ERR_UNSUPPORTED);
  const char *msg = kiln_session_error(strict);
  if (!strstr(msg, "fast_only") || !strstr(msg, slow) || !strstr(msg, "FusedMatMul"))
    fail_msg("fast_only's message: %s", msg);
  kiln_options_free(o);
  kiln_session_free(strict);
  kiln_session_free(plain);
  kiln_model_free(m);
  free(bufs[0]);
  free(bufs[1]);
}

/* kiln.Attention: scaled Q Kt, the mask added, softmax, times V. With dead_fill, a
 * constant mask where some queries see no key (tu_dead_rows_mask) and
 * zero_masked_rows=1: those give 0 (-inf), or average V (float32's lowest). */
static void test_attention(void **state) {
  (void)state;
  static const struct {
    const char *what;
    int rank, mask_rank;
    int64_t q[4], kt[4], v[4], mask[4];
    float dead_fill;
  } cases[] = {
      {"attention with a [B,1,1,T] mask", 4, 4, {2, 3, 5, 4}, {2, 3, 4, 6}, {2, 3, 6, 7},
       {2, 1, 1, 6}, 0},
      {"attention with a [S,T] mask", 4, 2, {1, 2, 5, 8}, {1, 2, 8, 5}, {1, 2, 5, 8}, {5, 5}, 0},
      {"attention without a mask", 3, 0, {4, 7, 16}, {4, 16, 9}, {4, 9, 16}, {0}, 0},
      {"attention, queries with no key (-inf)", 4, 4, {2, 3, 5, 4}, {2, 3, 4, 6}, {2, 3, 6, 7},
       {2, 1, 5, 6}, -INFINITY},
      {"attention, queries with no key (lowest float)", 4, 4, {2, 3, 5, 4}, {2, 3, 4, 6},
       {2, 3, 6, 7}, {2, 1, 5, 6}, -FLT_MAX},
      {"attention, batches with no key (-inf)", 3, 3, {3, 5, 4}, {3, 4, 6}, {3, 6, 7},
       {3, 1, 6}, -INFINITY},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kl_graph *g = kl_graph_new();
    int q = tu_graph_input(g, "q", KL_F32, cases[i].rank, cases[i].q);
    int kt = tu_graph_input(g, "kt", KL_F32, cases[i].rank, cases[i].kt);
    int v = tu_graph_input(g, "v", KL_F32, cases[i].rank, cases[i].v);
    int r = cases[i].mask_rank;
    int mask = !r ? KL_ABSENT
               : cases[i].dead_fill != 0
                   ? tu_dead_rows_mask(g, r, cases[i].mask, cases[i].dead_fill)
                   : tu_graph_input(g, "mask", KL_F32, r, cases[i].mask);
    int n = tu_graph_output_node(g, KL_OP_KilnAttention, r ? 4 : 3, (int[]){q, kt, v, mask}, 1);
    assert_int_equal(kl_node_set_float(g, n, "scale", 0.35f, NULL), KILN_OK);
    if (cases[i].dead_fill != 0)
      assert_int_equal(kl_node_set_int(g, n, "zero_masked_rows", 1, NULL), KILN_OK);
    check(g, cases[i].what);
  }
}

/* kiln.MultiHeadAttention: oneDNN's strided views of token-major Q, K, V (separate, or
 * packed QKV at three offsets) against the reference, at odd sizes. */
static void test_mha(void **state) {
  (void)state;
  static const tu_mha_case cases[] = {
      {"MHA, 3 heads of 5 (V 3), S 5, T 7, [B,1,1,T] mask", false, 3, 4,
       {2, 5, 15}, {2, 7, 15}, {2, 7, 9}, {2, 1, 1, 7}, 0},
      {"MHA, packed QKV, 2 heads of 7, S 9, [S,T] mask", true, 2, 2, {1, 9, 42}, {0}, {0},
       {9, 9}, 0},
      {"MHA, 4 heads of 3 (V 6), S 1, T 4, no mask", false, 4, 0, {3, 1, 12}, {3, 4, 12},
       {3, 4, 24}, {0}, 0},
      {"MHA, packed QKV, 1 head of 13, S 6, [B,H,S,T] mask", true, 1, 4, {2, 6, 39}, {0}, {0},
       {2, 1, 6, 6}, 0},
      {"MHA, 3 heads of 5, S 5, T 7, queries with no key (-inf)", false, 3, 4, {2, 5, 15},
       {2, 7, 15}, {2, 7, 15}, {2, 1, 5, 7}, -INFINITY},
      {"MHA, packed QKV, 2 heads of 7, batches with no key (lowest float)", true, 2, 4,
       {3, 6, 42}, {0}, {0}, {3, 1, 1, 6}, -FLT_MAX},
      {"MHA, packed QKV, 2 heads of 7, batches with no key (-inf)", true, 2, 4, {3, 6, 42},
       {0}, {0}, {3, 1, 1, 6}, -INFINITY},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check(tu_mha_graph(&cases[i]), cases[i].what);
}

/* Convolutions and a MaxPool feeding each other: the values between them are held
 * channels-last (c1 as X of c2 and Sum of c3, which overwrites it in place), the
 * output is plain. */
static void test_conv_chain(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){1, 8, 10, 10});
  int64_t eight = 8;
  kl_err e = {0};
  int vals[5];
  for (int k = 0; k < 5; k++) vals[k] = kl_graph_add_value(g, NULL, &e);
  int w1 = cst(g, 4, (int64_t[]){8, 8, 3, 3}), b1 = cst(g, 1, &eight);
  int wd = cst(g, 4, (int64_t[]){8, 1, 3, 3});
  int w3 = cst(g, 4, (int64_t[]){8, 8, 1, 1}), b3 = cst(g, 1, &eight);
  int w4 = cst(g, 4, (int64_t[]){4, 8, 3, 3});
  int w6 = cst(g, 4, (int64_t[]){8, 8, 1, 1});
  int n1 = kl_graph_add_node(g, KL_OP_KilnFusedConv, NULL, 3, (int[]){x, w1, b1}, 1, &vals[0], &e);
  int n2 = kl_graph_add_node(g, KL_OP_KilnFusedConv, NULL, 2, (int[]){vals[0], wd}, 1, &vals[1], &e);
  int n3 = kl_graph_add_node(g, KL_OP_KilnFusedConv, NULL, 4, (int[]){vals[1], w3, b3, vals[0]}, 1,
                             &vals[2], &e);
  /* 1x1 stride 2 over a channels-last X: subsampled through a strided view of it */
  int n6 = kl_graph_add_node(g, KL_OP_KilnFusedConv, NULL, 2, (int[]){vals[2], w6}, 1, &vals[4],
                             &e);
  int n4 = kl_graph_add_node(g, KL_OP_MaxPool, NULL, 1, &vals[4], 1, &vals[3], &e);
  int y = kl_graph_add_value(g, NULL, &e);
  int n5 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2, (int[]){vals[3], w4}, 1, &y, &e);
  assert_true(n1 >= 0 && n2 >= 0 && n3 >= 0 && n4 >= 0 && n5 >= 0 && n6 >= 0);
  tu_node_ints(g, n6, "strides", 2, (int64_t[]){2, 2});
  activation(g, n6, "Relu", 0, NULL);
  assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
  tu_node_ints(g, n4, "kernel_shape", 2, (int64_t[]){2, 2});
  int64_t pad1[4] = {1, 1, 1, 1};
  tu_node_ints(g, n1, "pads", 4, pad1);
  activation(g, n1, "Relu", 0, NULL);
  tu_node_ints(g, n2, "pads", 4, pad1);
  assert_int_equal(kl_node_set_int(g, n2, "group", 8, NULL), KILN_OK);
  activation(g, n2, "Clip", 2, (float[]){0, 6});
  activation(g, n3, "Silu", 0, NULL);
  tu_node_ints(g, n5, "pads", 4, pad1);
  tu_node_ints(g, n5, "strides", 2, (int64_t[]){2, 2});
  check(g, "conv chain");
}

/* Channel Concats among convolutions, which the session holds channels-last where it
 * can: all inputs and the output channels-last (A and B into C), an input made by a
 * kiln kernel held plain with a channels-last output (A and Relu(x) into D: that input
 * transposed into place), and a plain output (a graph output) with a channels-last
 * input (B and Relu(x)). Odd channel counts; every node checked as in check(). */
static void concat_impls(const kiln_session *fast, const kiln_model *m) {
  if (!KL_HAVE_DNNL || kl_isa_level() == KL_ISA_GENERIC) return;
  const char *want[3] = {" nhwc", " nhwc mixed", " mixed"};
  int seen = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    if (m->g->nodes[i].op == KL_OP_GlobalAveragePool) {
      const char *impl = kl_session_kernel_impl(fast, i);
      if (!impl || !strstr(impl, " nhwc"))
        fail_msg("the global pool of a channels-last input ran on '%s'", impl ? impl : "-");
    }
    if (m->g->nodes[i].op != KL_OP_Concat) continue;
    const char *impl = kl_session_kernel_impl(fast, i);
    assert_non_null(impl);
    const char *tail = strchr(impl, ' ');
    if (!tail || strcmp(tail, want[seen]) != 0)
      fail_msg("Concat %d ran on '%s', expected the '%s' form", seen, impl, want[seen]);
    seen++;
  }
  assert_int_equal(seen, 3);
}

static void test_concat_layouts(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 8, 9, 7});
  int v[9];
  for (int k = 0; k < 9; k++) v[k] = kl_graph_add_value(g, NULL, &e);
  int a = v[0], b = v[1], r = v[2], c1 = v[3], c2 = v[4], o1 = v[5], o2 = v[6], o3 = v[7];
  int o4 = v[8];
  int na = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){x, cst(g, 4, (int64_t[]){6, 8, 3, 3})}, 1, &a, &e);
  int nb = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){x, cst(g, 4, (int64_t[]){5, 8, 1, 1})}, 1, &b, &e);
  int nr = kl_graph_add_node(g, KL_OP_Relu, NULL, 1, &x, 1, &r, &e);
  int n1 = kl_graph_add_node(g, KL_OP_Concat, NULL, 2, (int[]){a, b}, 1, &c1, &e);
  int n2 = kl_graph_add_node(g, KL_OP_Concat, NULL, 2, (int[]){a, r}, 1, &c2, &e);
  int n3 = kl_graph_add_node(g, KL_OP_Concat, NULL, 2, (int[]){b, r}, 1, &o3, &e);
  int nc = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){c1, cst(g, 4, (int64_t[]){4, 11, 1, 1})}, 1, &o1, &e);
  int nd = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){c2, cst(g, 4, (int64_t[]){3, 14, 3, 3})}, 1, &o2, &e);
  /* a global pool of the channels-last c1 into a plain graph output: one pixel per
   * channel is the same bytes in both layouts (own_pool) */
  int ng = kl_graph_add_node(g, KL_OP_GlobalAveragePool, NULL, 1, &c1, 1, &o4, &e);
  assert_true(na >= 0 && nb >= 0 && nr >= 0 && n1 >= 0 && n2 >= 0 && n3 >= 0 && nc >= 0 &&
              nd >= 0 && ng >= 0);
  tu_node_ints(g, na, "pads", 4, (int64_t[]){1, 1, 1, 1});
  tu_node_ints(g, nd, "pads", 4, (int64_t[]){1, 0, 1, 2});
  for (int n = n1; n <= n3; n++)
    assert_int_equal(kl_node_set_int(g, n, "axis", n == n2 ? -3 : 1, NULL), KILN_OK);
  for (int k = 5; k < 9; k++) assert_int_equal(kl_graph_add_output(g, v[k], NULL), KILN_OK);
  after_fast_run = concat_impls;
  check_on(g, "concat layouts", false); /* the Relu is kiln's */
  after_fast_run = NULL;
}

/* Asserts that every node of the ops in ops[] (KL_OP_COUNT-terminated) ran on a kernel
 * whose name (impl: oneDNN's implementation, or kiln's "kiln:...") holds `want`, and
 * that there were `count` of them; nothing to check where oneDNN is not used. */
static void expect_kernels(const kiln_session *fast, const kiln_model *m, const kl_op *ops,
                           bool impl, const char *want, int count) {
  if (!KL_HAVE_DNNL || kl_isa_level() == KL_ISA_GENERIC) return;
  int seen = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    kl_op op = m->g->nodes[i].op;
    bool listed = false;
    for (int k = 0; ops[k] != KL_OP_COUNT; k++) listed |= ops[k] == op;
    if (!listed) continue;
    const char *name = impl ? kl_session_kernel_impl(fast, i) : kl_session_kernel_name(fast, i);
    if (!name || !strstr(name, want))
      fail_msg("%s %d ran on '%s', not a kernel of '%s'", kl_op_name(op), i,
               name ? name : "-", want);
    seen++;
  }
  assert_int_equal(seen, count);
}

/* A squeeze-and-excitation scale between convolutions: Add, Sub, Mul and Div of a
 * convolution's result and one value per image and channel (either operand first) run
 * on kiln's channels-last kernel (kl_run_binary_cl) where the result is held so, not on
 * oneDNN's binary; batch 2 (a symbolic dim), 37 channels, 5x7 pixels. */
static void channel_scale_impls(const kiln_session *fast, const kiln_model *m) {
  static const kl_op ops[] = {KL_OP_Add, KL_OP_Sub, KL_OP_Mul, KL_OP_Div, KL_OP_COUNT};
  expect_kernels(fast, m, ops, false, " channels-last", 4);
}

static void test_channel_scale_layouts(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 8, 5, 7});
  /* a symbolic batch (as exporters write it): the scale [N, C, 1, 1] has the same N */
  g->values[x].type.dims[0] = (kl_dim){-1, kl_graph_symbol(g, "batch")};
  int v[12];
  for (int k = 0; k < 12; k++) v[k] = kl_graph_add_value(g, NULL, &e);
  int a = v[0], p = v[1], q = v[2], s = v[3];
  int na = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){x, cst(g, 4, (int64_t[]){37, 8, 3, 3})}, 1, &a, &e);
  int np = kl_graph_add_node(g, KL_OP_GlobalAveragePool, NULL, 1, &a, 1, &p, &e);
  /* small weights keep the Sigmoid away from 0: the Div by it would amplify the
   * convolutions' rounding past TOL (a draw with s near 0.01 was 4e-4 off) */
  int nq = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){p, cst_within(g, 4, (int64_t[]){37, 37, 1, 1}, 0.1f)}, 1,
                             &q, &e);
  int ns = kl_graph_add_node(g, KL_OP_Sigmoid, NULL, 1, &q, 1, &s, &e);
  assert_true(na >= 0 && np >= 0 && nq >= 0 && ns >= 0);
  tu_node_ints(g, na, "pads", 4, (int64_t[]){1, 1, 1, 1});
  kl_op ops[4] = {KL_OP_Mul, KL_OP_Add, KL_OP_Div, KL_OP_Sub};
  for (int k = 0; k < 4; k++) {
    int in[2] = {a, s};
    if (k % 2) in[0] = s, in[1] = a; /* the per-channel operand first */
    int nb = kl_graph_add_node(g, ops[k], NULL, 2, in, 1, &v[4 + k], &e);
    int nc = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                               (int[]){v[4 + k], cst(g, 4, (int64_t[]){6, 37, 1, 1})}, 1,
                               &v[8 + k], &e);
    assert_true(nb >= 0 && nc >= 0);
    assert_int_equal(kl_graph_add_output(g, v[8 + k], NULL), KILN_OK);
  }
  after_fast_run = channel_scale_impls;
  check_on(g, "channel scale layouts", false); /* the Sigmoid and the binaries are kiln's */
  after_fast_run = NULL;
}

/* Pads between convolutions run on kiln's channels-last Pad (kl_run_pad_cl) where the
 * tensors are held so: the spatial pads of HGNetV2's stem before a 2x2 stride-1 max
 * pool, a pad of the channels too with a constant of 0.5, and negative pads (a crop). */
static void pad_impls(const kiln_session *fast, const kiln_model *m) {
  static const kl_op ops[] = {KL_OP_Pad, KL_OP_COUNT};
  expect_kernels(fast, m, ops, false, " channels-last", 3);
}

static void test_pad_layouts(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 8, 9, 7});
  int a = kl_graph_add_value(g, NULL, &e);
  int na = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){x, cst(g, 4, (int64_t[]){37, 8, 3, 3})}, 1, &a, &e);
  assert_true(na >= 0);
  tu_node_ints(g, na, "pads", 4, (int64_t[]){1, 1, 1, 1});
  static const int64_t pads[3][8] = {{0, 0, 1, 0, 0, 0, 0, 2},
                                     {0, 1, 0, 2, 0, 2, 1, 0},
                                     {0, 0, -1, 0, 0, 0, 0, -2}};
  static const int64_t cout_in[3] = {37, 40, 37};
  for (int k = 0; k < 3; k++) {
    int v[3];
    for (int i = 0; i < 3; i++) v[i] = kl_graph_add_value(g, NULL, &e);
    int pv = tu_graph_const(g, NULL, KL_I64, 1, (int64_t[]){8}, pads[k]);
    int in[3] = {a, pv, k == 1 ? tu_graph_const(g, NULL, KL_F32, 0, NULL, (float[]){0.5f}) : -1};
    int np = kl_graph_add_node(g, KL_OP_Pad, NULL, k == 1 ? 3 : 2, in, 1, &v[0], &e);
    int src = v[0];
    if (k == 0) { /* HGNetV2's stem: a 2x2 stride-1 max pool of the padded map */
      int nm = kl_graph_add_node(g, KL_OP_MaxPool, NULL, 1, &v[0], 1, &v[1], &e);
      assert_true(nm >= 0);
      tu_node_ints(g, nm, "kernel_shape", 2, (int64_t[]){2, 2});
      src = v[1];
    }
    int nc = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                               (int[]){src, cst(g, 4, (int64_t[]){6, cout_in[k], 1, 1})}, 1,
                               &v[2], &e);
    assert_true(np >= 0 && nc >= 0);
    assert_int_equal(kl_graph_add_output(g, v[2], NULL), KILN_OK);
  }
  after_fast_run = pad_impls;
  check_on(g, "pad layouts", false); /* the Pads are kiln's */
  after_fast_run = NULL;
}

/* A pooling whose input is held plain (made by a kernel of kiln's that writes plain
 * tensors only: here a Softmax) and whose output oneDNN nodes read: X and Y in one
 * layout (backend.c same_layouts), so kiln's plain kernel runs it rather than oneDNN
 * 2.6's plain-to-channels-last pooling (PoolFormer's x - AvgPool(x) after its norm). */
static void mixed_pool_impls(const kiln_session *fast, const kiln_model *m) {
  static const kl_op ops[] = {KL_OP_AveragePool, KL_OP_MaxPool, KL_OP_COUNT};
  expect_kernels(fast, m, ops, true, "kiln:", 2);
}

static void test_pool_after_plain(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 8, 9, 7});
  int v[12];
  for (int k = 0; k < 12; k++) v[k] = kl_graph_add_value(g, NULL, &e);
  int na = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){x, cst(g, 4, (int64_t[]){24, 8, 1, 1})}, 1, &v[0], &e);
  int ns = kl_graph_add_node(g, KL_OP_Softmax, NULL, 1, &v[0], 1, &v[1], &e);
  assert_true(na >= 0 && ns >= 0);
  assert_int_equal(kl_node_set_int(g, ns, "axis", 1, NULL), KILN_OK);
  kl_op ops[2] = {KL_OP_AveragePool, KL_OP_MaxPool};
  for (int k = 0; k < 2; k++) {
    int np = kl_graph_add_node(g, ops[k], NULL, 1, &v[1], 1, &v[2 + k], &e);
    int nd = kl_graph_add_node(g, KL_OP_Sub, NULL, 2, (int[]){v[2 + k], v[1]}, 1, &v[4 + k], &e);
    int nc = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                               (int[]){v[4 + k], cst(g, 4, (int64_t[]){5, 24, 1, 1})}, 1,
                               &v[6 + k], &e);
    assert_true(np >= 0 && nd >= 0 && nc >= 0);
    tu_node_ints(g, np, "kernel_shape", 2, (int64_t[]){3, 3});
    tu_node_ints(g, np, "pads", 4, (int64_t[]){1, 1, 1, 1});
    assert_int_equal(kl_graph_add_output(g, v[6 + k], NULL), KILN_OK);
  }
  after_fast_run = mixed_pool_impls;
  check_on(g, "pool after a plain tensor", false); /* the Softmax is kiln's */
  after_fast_run = NULL;
}

/* Between convolutions held channels-last: an AveragePool with ceil_mode (oneDNN
 * declines it: ONNX counts its window past the pads another way) and a dilated MaxPool
 * run on kiln's channels-last pooling, and a standalone Sigmoid and a Mul by a single
 * value (NFNet's gains) on kiln's elementwise kernels in that layout, not oneDNN's
 * binary. */
static void cl_elementwise_impls(const kiln_session *fast, const kiln_model *m) {
  static const kl_op pools[] = {KL_OP_AveragePool, KL_OP_MaxPool, KL_OP_COUNT};
  expect_kernels(fast, m, pools, false, " channels-last", 2);
  for (int i = 0; KL_HAVE_DNNL && kl_isa_level() != KL_ISA_GENERIC && i < m->g->n_nodes; i++) {
    kl_op op = m->g->nodes[i].op;
    const char *name = kl_session_kernel_name(fast, i);
    if ((op == KL_OP_Mul || op == KL_OP_Sigmoid) && strncmp(name, "dnnl", 4) == 0)
      fail_msg("%s %d ran on '%s', not kiln's kernel", kl_op_name(op), i, name);
  }
}

static void test_cl_elementwise(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 8, 9, 7});
  int v[8];
  for (int k = 0; k < 8; k++) v[k] = kl_graph_add_value(g, NULL, &e);
  int n0 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){x, cst(g, 4, (int64_t[]){24, 8, 1, 1})}, 1, &v[0], &e);
  int n1 = kl_graph_add_node(g, KL_OP_AveragePool, NULL, 1, &v[0], 1, &v[1], &e);
  int n2 = kl_graph_add_node(g, KL_OP_MaxPool, NULL, 1, &v[0], 1, &v[2], &e);
  int n3 = kl_graph_add_node(g, KL_OP_Sigmoid, NULL, 1, &v[0], 1, &v[3], &e);
  int n4 = kl_graph_add_node(g, KL_OP_Mul, NULL, 2,
                             (int[]){v[3], tu_graph_const(g, NULL, KL_F32, 0, NULL, (float[]){1.7f})},
                             1, &v[4], &e);
  assert_true(n0 >= 0 && n1 >= 0 && n2 >= 0 && n3 >= 0 && n4 >= 0);
  tu_node_ints(g, n1, "kernel_shape", 2, (int64_t[]){2, 2});
  tu_node_ints(g, n1, "strides", 2, (int64_t[]){2, 2});
  assert_int_equal(kl_node_set_int(g, n1, "ceil_mode", 1, NULL), KILN_OK);
  tu_node_ints(g, n2, "kernel_shape", 2, (int64_t[]){2, 2});
  tu_node_ints(g, n2, "dilations", 2, (int64_t[]){2, 2});
  for (int k = 0; k < 3; k++) { /* 1x1 convolutions read each */
    int src = k == 0 ? v[1] : k == 1 ? v[2] : v[4];
    int nc = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                               (int[]){src, cst(g, 4, (int64_t[]){5, 24, 1, 1})}, 1, &v[5 + k], &e);
    assert_true(nc >= 0);
    assert_int_equal(kl_graph_add_output(g, v[5 + k], NULL), KILN_OK);
  }
  after_fast_run = cl_elementwise_impls;
  check_on(g, "channels-last pools and elementwise ops", false);
  after_fast_run = NULL;
}

/* At -O3 with a symbolic batch (as exporters write it), a convolution whose residual
 * Sum is held channels-last: oneDNN's, never the reference kernel (ConvNeXt's blocks
 * ran on it, 1.9 s a run against 13 ms at -O2, when the Sum's dims were not concrete). */
static void no_reference_convs(const kiln_session *fast, const kiln_model *m) {
  if (!KL_HAVE_DNNL || kl_isa_level() == KL_ISA_GENERIC) return;
  int convs = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    const char *op = kl_op_name(m->g->nodes[i].op);
    if (!strstr(op, "Conv")) continue;
    const char *name = kl_session_kernel_name(fast, i);
    if (strncmp(name, "dnnl", 4) != 0)
      fail_msg("%s %d ran on '%s', not oneDNN", op, i, name);
    convs++;
  }
  assert_int_equal(convs, 5);
}

static void test_symbolic_batch_o3(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 8, 9, 7});
  g->values[x].type.dims[0] = (kl_dim){-1, kl_graph_symbol(g, "batch")};
  int v[6];
  for (int k = 0; k < 6; k++) v[k] = kl_graph_add_value(g, NULL, &e);
  int n0 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){x, cst(g, 4, (int64_t[]){16, 8, 3, 3})}, 1, &v[0], &e);
  int n1 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){v[0], cst(g, 4, (int64_t[]){16, 16, 1, 1})}, 1, &v[1], &e);
  /* the residual: another convolution of x (of a, merge_convs would merge the two) */
  int n5 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){x, cst(g, 4, (int64_t[]){16, 8, 1, 1})}, 1, &v[5], &e);
  int n2 = kl_graph_add_node(g, KL_OP_Add, NULL, 2, (int[]){v[1], v[5]}, 1, &v[2], &e);
  int n3 = kl_graph_add_node(g, KL_OP_Relu, NULL, 1, &v[2], 1, &v[3], &e);
  int n4 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){v[3], cst(g, 4, (int64_t[]){4, 16, 1, 1})}, 1, &v[4], &e);
  assert_true(n0 >= 0 && n1 >= 0 && n2 >= 0 && n3 >= 0 && n4 >= 0 && n5 >= 0);
  tu_node_ints(g, n0, "pads", 4, (int64_t[]){1, 1, 1, 1});
  assert_int_equal(kl_graph_add_output(g, v[4], NULL), KILN_OK);
  /* a Sum that broadcasts over the batch (PiT's position embedding after its patch
   * convolution): the O3 layout pass leaves that convolution plain */
  int w[2];
  for (int k = 0; k < 2; k++) w[k] = kl_graph_add_value(g, NULL, &e);
  int n6 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){x, cst(g, 4, (int64_t[]){16, 8, 2, 2})}, 1, &w[0], &e);
  int n7 = kl_graph_add_node(g, KL_OP_Add, NULL, 2,
                             (int[]){w[0], cst(g, 4, (int64_t[]){1, 16, 8, 6})}, 1, &w[1], &e);
  assert_true(n6 >= 0 && n7 >= 0);
  assert_int_equal(kl_graph_add_output(g, w[1], NULL), KILN_OK);
  after_fast_run = no_reference_convs;
  check_at(g, "a residual at -O3 with a symbolic batch", false, 3);
  after_fast_run = NULL;
}

/* At the AVX2 level, oneDNN's jit:avx2 runs a convolution of a 3x3 kernel or larger
 * with 40 input channels or more (64 a group where grouped) in its blocked layout, X and
 * Y reordered around it from and to the channels-last ones the session holds: the impl
 * says "blocked" (blocked_conv in dnnl.c). Not 1x1 convolutions, nor 16 channels a
 * group, nor at other levels. */
static void blocked_impls(const kiln_session *fast, const kiln_model *m) {
  if (!KL_HAVE_DNNL || kl_isa_level() == KL_ISA_GENERIC) return;
  int convs = 0, blocked = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    const kl_node *n = &m->g->nodes[i];
    if (!strstr(kl_op_name(n->op), "Conv")) continue;
    const kl_type *w = &m->g->values[n->in[1]].type;
    int64_t group = kl_attr_int(n, "group", 1), icg = w->dims[1].size;
    bool want = kl_isa_level() == KL_ISA_AVX2 && w->dims[2].size >= 3 && icg >= 40 &&
                (group == 1 || icg >= 64);
    const char *impl = kl_session_kernel_impl(fast, i);
    if (!impl || (strstr(impl, " blocked") != NULL) != want)
      fail_msg("convolution %d (%lldx%lld, %lld channels in, group %lld) ran on '%s' at %s",
               i, (long long)w->dims[2].size, (long long)w->dims[3].size, (long long)icg,
               (long long)group, impl ? impl : "-", kl_isa_level_name(kl_isa_level()));
    convs++;
    blocked += want;
  }
  assert_int_equal(convs, 6);
  assert_int_equal(blocked, kl_isa_level() == KL_ISA_AVX2 ? 3 : 0);
}

static void test_blocked_convs(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 8, 40, 35});
  int v[9];
  for (int k = 0; k < 9; k++) v[k] = kl_graph_add_value(g, NULL, &e);
  /* 1x1 (channels-last out), then 3x3 stride 2 with Bias and a Relu (720 output pixels:
   * past the im2col product's reach), 64 channels a group, 16 a group, 1x1 again, and
   * a dilated 3x3 (not the Winograd's) with a residual Sum held channels-last */
  int n0 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){x, cst(g, 4, (int64_t[]){48, 8, 1, 1})}, 1, &v[0], &e);
  int n1 = kl_graph_add_node(g, KL_OP_Conv, NULL, 3,
                             (int[]){v[0], cst_within(g, 4, (int64_t[]){128, 48, 3, 3}, 0.3f),
                                     cst(g, 1, (int64_t[]){128})},
                             1, &v[1], &e);
  int n2 = kl_graph_add_node(g, KL_OP_Relu, NULL, 1, &v[1], 1, &v[2], &e);
  int n3 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){v[2], cst_within(g, 4, (int64_t[]){128, 64, 3, 3}, 0.1f)},
                             1, &v[3], &e);
  int n4 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){v[3], cst_within(g, 4, (int64_t[]){128, 16, 3, 3}, 0.2f)},
                             1, &v[4], &e);
  int n5 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){v[4], cst_within(g, 4, (int64_t[]){64, 128, 1, 1}, 0.1f)},
                             1, &v[5], &e);
  int n6 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                             (int[]){v[5], cst_within(g, 4, (int64_t[]){64, 64, 3, 3}, 0.1f)},
                             1, &v[6], &e);
  int n7 = kl_graph_add_node(g, KL_OP_Add, NULL, 2, (int[]){v[6], v[5]}, 1, &v[7], &e);
  int n8 = kl_graph_add_node(g, KL_OP_Sigmoid, NULL, 1, &v[7], 1, &v[8], &e);
  assert_true(n0 >= 0 && n1 >= 0 && n2 >= 0 && n3 >= 0 && n4 >= 0 && n5 >= 0 && n6 >= 0 &&
              n7 >= 0 && n8 >= 0);
  tu_node_ints(g, n1, "pads", 4, (int64_t[]){1, 0, 1, 1});
  tu_node_ints(g, n1, "strides", 2, (int64_t[]){2, 2});
  for (int n = n3; n <= n4; n++) tu_node_ints(g, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  assert_int_equal(kl_node_set_int(g, n3, "group", 2, NULL), KILN_OK);
  assert_int_equal(kl_node_set_int(g, n4, "group", 8, NULL), KILN_OK);
  tu_node_ints(g, n6, "pads", 4, (int64_t[]){2, 2, 2, 2});
  tu_node_ints(g, n6, "dilations", 2, (int64_t[]){2, 2});
  assert_int_equal(kl_graph_add_output(g, v[8], NULL), KILN_OK);
  after_fast_run = blocked_impls;
  check_at(g, "convolutions in oneDNN's blocked layout", true, 2);
  after_fast_run = NULL;
}

/* kiln's grouped convolution (dnnl_gconv.c) runs those of 8 or 16 output channels a
 * group between channels-last tensors at the AVX2 level: rows whose ends reach into the
 * padding (patches), rows narrower than a patch, stride 2, dilation 2, a 5x5 kernel
 * with pads wider than a patch's reach on one side, 3 channels in a group, Bias, Relu
 * and Silu, batch 2. Elsewhere (other levels, a plain input) oneDNN runs them. */
static int gconv_expect;

static void gconv_impls(const kiln_session *fast, const kiln_model *m) {
  if (!KL_HAVE_DNNL || kl_isa_level() == KL_ISA_GENERIC) return;
  int seen = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    const kl_node *n = &m->g->nodes[i];
    if (!strstr(kl_op_name(n->op), "Conv") || kl_attr_int(n, "group", 1) == 1) continue;
    const char *impl = kl_session_kernel_impl(fast, i);
    if (impl && strstr(impl, " gconv")) seen++;
  }
  assert_int_equal(seen, kl_isa_level() == KL_ISA_AVX2 ? gconv_expect : 0);
}

static void test_grouped_convs(void **state) {
  (void)state;
  static const struct {
    int64_t c, k, g, hw[2], kern, stride, dil, pads[4];
    const char *act;
  } cases[] = {
      {48, 48, 6, {23, 21}, 3, 1, 1, {1, 1, 1, 1}, "Relu"},     /* RegNet's, odd sizes */
      {48, 48, 6, {29, 27}, 3, 2, 1, {1, 1, 1, 1}, NULL},       /* stride 2 */
      {24, 48, 3, {9, 7}, 3, 1, 2, {2, 2, 2, 2}, "Silu"},       /* dilated, 16 out a group */
      {12, 32, 4, {12, 19}, 5, 1, 1, {4, 0, 1, 3}, "Relu"},     /* 3 in a group, 5x5 */
      {16, 16, 2, {6, 5}, 3, 1, 1, {1, 1, 1, 1}, NULL},         /* rows under a patch */
  };
  for (size_t i = 0; i < TU_LEN(cases); i++) {
    kl_graph *g = kl_graph_new();
    kl_err e = {0};
    int64_t c = cases[i].c, k = cases[i].k, kern = cases[i].kern;
    int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 8, cases[i].hw[0], cases[i].hw[1]});
    int v[4];
    for (int q = 0; q < 4; q++) v[q] = kl_graph_add_value(g, NULL, &e);
    /* a 1x1 convolution first, so that X is held channels-last; one after too */
    int n0 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                               (int[]){x, cst_within(g, 4, (int64_t[]){c, 8, 1, 1}, 0.5f)}, 1,
                               &v[0], &e);
    int n1 = kl_graph_add_node(g, KL_OP_Conv, NULL, 3,
                               (int[]){v[0],
                                       cst_within(g, 4, (int64_t[]){k, c / cases[i].g, kern, kern},
                                                  0.3f),
                                       cst(g, 1, (int64_t[]){k})},
                               1, &v[1], &e);
    int n2 = cases[i].act ? kl_graph_add_node(g, strcmp(cases[i].act, "Relu") == 0
                                                     ? KL_OP_Relu
                                                     : KL_OP_Sigmoid,
                                              NULL, 1, &v[1], 1, &v[2], &e)
                          : -1;
    int last = v[1];
    if (n2 >= 0 && strcmp(cases[i].act, "Silu") == 0) { /* x * sigmoid(x): fused as Silu */
      int n3 = kl_graph_add_node(g, KL_OP_Mul, NULL, 2, (int[]){v[1], v[2]}, 1, &v[3], &e);
      assert_true(n3 >= 0);
      last = v[3];
    } else if (n2 >= 0) {
      last = v[2];
    }
    int out = kl_graph_add_value(g, NULL, &e);
    int n4 = kl_graph_add_node(g, KL_OP_Conv, NULL, 2,
                               (int[]){last, cst_within(g, 4, (int64_t[]){8, k, 1, 1}, 0.3f)}, 1,
                               &out, &e);
    assert_true(n0 >= 0 && n1 >= 0 && n4 >= 0);
    assert_int_equal(kl_node_set_int(g, n1, "group", cases[i].g, NULL), KILN_OK);
    tu_node_ints(g, n1, "pads", 4, cases[i].pads);
    tu_node_ints(g, n1, "strides", 2, (int64_t[]){cases[i].stride, cases[i].stride});
    tu_node_ints(g, n1, "dilations", 2, (int64_t[]){cases[i].dil, cases[i].dil});
    assert_int_equal(kl_graph_add_output(g, out, NULL), KILN_OK);
    gconv_expect = 1;
    after_fast_run = gconv_impls;
    check_at(g, "a grouped convolution", true, 2);
    after_fast_run = NULL;
  }
}

/* kiln's Winograd F(2x2, 3x3) (dnnl_wino.c), which runs the 3x3 stride-1 convolutions
 * between channels-last tensors at the AVX2 level: odd channel counts (33 -> 40), an
 * odd output (29x23: partial tiles at the right and bottom), batch 2 (360 tiles: three
 * blocks of 96 and a shorter one), symmetric and uneven pads, Bias, a Sum held
 * channels-last, and an activation of kiln's (Silu). Elsewhere oneDNN runs them: the
 * same check. */
static int wino_expect = 3; /* 3x3 convolutions of the graph */
static const char *const *wino_layouts; /* each one's layout suffix, when set */

static void wino_impls(const kiln_session *fast, const kiln_model *m) {
  int seen = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    const kl_node *n = &m->g->nodes[i];
    const kl_type *w = n->n_in > 1 ? &m->g->values[n->in[1]].type : NULL;
    if (!w || w->rank != 4 || w->dims[3].size != 3) continue; /* the 3x3 ones */
    const char *impl = kl_session_kernel_impl(fast, i);
    bool wino = impl && strstr(impl, "wino_2x2");
    if (wino != (kl_isa_level() == KL_ISA_AVX2))
      fail_msg("3x3 convolution %d ran on '%s' at %s", i, impl ? impl : "-",
               kl_isa_level_name(kl_isa_level()));
    if (wino && wino_layouts && strcmp(strstr(impl, "wino_2x2") + 8, wino_layouts[seen]) != 0)
      fail_msg("3x3 convolution %d ran on '%s', expected the layouts '%s'", i, impl,
               wino_layouts[seen]);
    seen++;
  }
  assert_int_equal(seen, wino_expect);
}

/* A release_weights session over make()'s graph against the reference, two runs; its
 * constant weights with a kernel larger than 1x1 that were freed (held only packed or
 * transformed) must number want_freed (-1: any). */
static void check_released(kl_graph *(*make)(void), int want_freed, const char *what) {
  uint32_t seed = rng;
  kiln_model *want_m = tu_model_of(make(), 0);
  rng = seed;
  kiln_model *m = tu_model_of(make(), 0);
  float *bufs[4] = {NULL};
  for (int i = 0; i < kiln_model_input_count(m); i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    int64_t n = tu_input_numel(&info);
    bufs[i] = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t k = 0; k < n; k++) bufs[i][k] = frand(-2, 2);
  }
  kiln_session *ref = tu_session(want_m, true, 0), *fast = NULL;
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "release_weights", 1), KILN_OK);
  if (kiln_session_create(m, o, &fast) != KILN_OK) fail_msg("%s", kiln_session_error(fast));
  int64_t n_want, n_got;
  float *want = tu_run_f32(ref, want_m, bufs, &n_want);
  for (int r = 0; r < 2; r++) {
    float *got = tu_run_f32(fast, m, bufs, &n_got);
    assert_int_equal(n_got, n_want);
    for (int64_t k = 0; k < n_want; k++)
      if (!(fabs((double)got[k] - want[k]) <= TOL * (1 + fabs((double)want[k]))))
        fail_msg("%s, release_weights (run %d): element %lld is %.8g, the reference %.8g",
                 what, r + 1, (long long)k, (double)got[k], (double)want[k]);
    free(got);
  }
  int freed = 0;
  for (int v = 0; v < m->g->n_values; v++) {
    const kl_value *val = &m->g->values[v];
    freed += val->kind == KL_VALUE_CONST && !val->data && val->type.rank == 4 &&
             val->type.dims[2].size * val->type.dims[3].size > 1;
  }
  if (want_freed >= 0 && freed != want_freed)
    fail_msg("%s, release_weights: %d weights freed, expected %d", what, freed, want_freed);
  free(want);
  for (int i = 0; i < 4; i++) free(bufs[i]);
  kiln_options_free(o);
  kiln_session_free(ref);
  kiln_session_free(fast);
  kiln_model_free(want_m);
  kiln_model_free(m);
}

/* A kiln.FusedConv of x writing value y: weights of dims wd (random, within bound),
 * with a random Bias of wd[0] values when bias, a Sum when sum >= 0. Returns the node. */
static int fconv(kl_graph *g, int x, const int64_t *wd, float bound, bool bias, int sum, int y) {
  kl_err e = {0};
  int in[4] = {x, cst_within(g, 4, wd, bound), -1, sum};
  if (bias) in[2] = cst(g, 1, wd);
  int node = kl_graph_add_node(g, KL_OP_KilnFusedConv, NULL, sum >= 0 ? 4 : bias ? 3 : 2, in, 1,
                               &y, &e);
  assert_true(node >= 0);
  return node;
}

static kl_graph *winograd_graph(void) {
  kl_graph *g = kl_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 33, 29, 23});
  /* t: a 13x13 one of one image (49 tiles: one short block) */
  int t = tu_graph_input(g, "t", KL_F32, 4, (int64_t[]){1, 32, 13, 13});
  int v[8];
  for (int k = 0; k < 8; k++) v[k] = kl_graph_add_value(g, NULL, &e);
  int n3 = fconv(g, t, (int64_t[]){36, 32, 3, 3}, 1, false, -1, v[6]);
  fconv(g, v[6], (int64_t[]){8, 36, 1, 1}, 1, false, -1, v[7]);
  tu_node_ints(g, n3, "pads", 4, (int64_t[]){1, 1, 1, 1});
  assert_int_equal(kl_graph_add_output(g, v[7], NULL), KILN_OK);
  /* a and s: channels-last inputs for the 3x3 ones (1x1 convolutions of x) */
  int na = fconv(g, x, (int64_t[]){33, 33, 1, 1}, 1, false, -1, v[0]);
  fconv(g, x, (int64_t[]){40, 33, 1, 1}, 1, false, -1, v[1]);
  int n1 = fconv(g, v[0], (int64_t[]){40, 33, 3, 3}, 1, true, v[1], v[2]);
  int n2 = fconv(g, v[0], (int64_t[]){40, 33, 3, 3}, 1, false, -1, v[3]);
  /* 1x1 convolutions read them back, so that they are held channels-last */
  fconv(g, v[2], (int64_t[]){8, 40, 1, 1}, 1, false, -1, v[4]);
  fconv(g, v[3], (int64_t[]){8, 40, 1, 1}, 1, false, -1, v[5]);
  activation(g, na, "Relu", 0, NULL);
  tu_node_ints(g, n1, "pads", 4, (int64_t[]){1, 1, 1, 1});
  activation(g, n1, "Relu", 0, NULL);
  tu_node_ints(g, n2, "pads", 4, (int64_t[]){2, 0, 0, 2}); /* still 29x23 out */
  activation(g, n2, "Silu", 0, NULL);
  assert_int_equal(kl_graph_add_output(g, v[4], NULL), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, v[5], NULL), KILN_OK);
  return g;
}

static void test_winograd(void **state) {
  (void)state;
  if (!KL_HAVE_DNNL || kl_isa_level() == KL_ISA_GENERIC) skip();
  uint32_t seed = rng;
  after_fast_run = wino_impls;
  check(winograd_graph(), "winograd");
  after_fast_run = NULL;
  /* release_weights: the transformed (or oneDNN's reordered) weights are then the only
   * copy, all three 3x3 weights freed, and the outputs the same */
  rng = seed;
  check_released(winograd_graph, 3, "winograd");
}

/* kiln's Winograd where X, or Y and its Sum, are held plain (graph inputs and
 * outputs; an FPN's lateral sums, which kiln's plain Resize and Add read): transposed
 * through the workspace. n1: X, Sum and Y plain (Bias, Relu); n2: X plain, Y
 * channels-last (a 1x1 convolution reads it); n3: X channels-last, Y plain (Silu). */
static kl_graph *winograd_plain_graph(void) {
  kl_graph *g = kl_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 33, 29, 23});
  int s = tu_graph_input(g, "s", KL_F32, 4, (int64_t[]){2, 40, 29, 23});
  int v[5];
  for (int k = 0; k < 5; k++) v[k] = kl_graph_add_value(g, NULL, &e);
  int n1 = fconv(g, x, (int64_t[]){40, 33, 3, 3}, 1, true, s, v[0]);
  int n2 = fconv(g, x, (int64_t[]){40, 33, 3, 3}, 1, false, -1, v[1]);
  fconv(g, v[1], (int64_t[]){8, 40, 1, 1}, 1, false, -1, v[2]);
  int na = fconv(g, x, (int64_t[]){33, 33, 1, 1}, 1, false, -1, v[3]);
  int n3 = fconv(g, v[3], (int64_t[]){36, 33, 3, 3}, 1, false, -1, v[4]);
  tu_node_ints(g, n1, "pads", 4, (int64_t[]){1, 1, 1, 1});
  activation(g, n1, "Relu", 0, NULL);
  tu_node_ints(g, n2, "pads", 4, (int64_t[]){0, 2, 2, 0});
  activation(g, na, "Relu", 0, NULL);
  tu_node_ints(g, n3, "pads", 4, (int64_t[]){1, 1, 1, 1});
  activation(g, n3, "Silu", 0, NULL);
  assert_int_equal(kl_graph_add_output(g, v[0], NULL), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, v[2], NULL), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, v[4], NULL), KILN_OK);
  return g;
}

static void test_winograd_plain(void **state) {
  (void)state;
  if (!KL_HAVE_DNNL || kl_isa_level() == KL_ISA_GENERIC) skip();
  static const char *const layouts[] = {" x:nchw y:nchw", " x:nchw", " y:nchw"};
  after_fast_run = wino_impls;
  wino_expect = 3;
  wino_layouts = layouts;
  check(winograd_plain_graph(), "winograd, plain tensors");
  after_fast_run = NULL;
  wino_expect = 3;
  wino_layouts = NULL;
}

/* Winograd is for constant weights only: oneDNN transforms computed ones (a training
 * step's, a weight a graph input gives) at every run, and that cost ResNet-18's
 * 512-channel 3x3 convolutions 100 ms each at batch 8, against 8 direct. The same 3x3
 * convolution with W a constant runs on a Winograd wherever the level has one (kiln's
 * at AVX2, oneDNN's jit_wino_4x3 at the AVX-512 levels), with W an input on no
 * Winograd; both against the reference. Without oneDNN (a -Ddnnl=disabled build, or
 * KILN_ISA=generic, where kiln does not use it) neither runs a Winograd. */
static bool want_wino;

static void wino_or_not(const kiln_session *fast, const kiln_model *m) {
  assert_int_equal(m->g->n_nodes, 1);
  const char *impl = kl_session_kernel_impl(fast, 0);
  bool wino = impl && strstr(impl, "wino");
  if (wino != want_wino)
    fail_msg("the 3x3 convolution with %s weights ran on '%s' at %s",
             want_wino ? "constant" : "computed", impl ? impl : "-",
             kl_isa_level_name(kl_isa_level()));
}

static void test_winograd_constant_weights_only(void **state) {
  (void)state;
  bool dnnl = KL_HAVE_DNNL && kl_isa_level() != KL_ISA_GENERIC;
  const conv_case *c = &conv_cases[sizeof conv_cases / sizeof conv_cases[0] - 1];
  after_fast_run = wino_or_not;
  for (int as_input = 0; as_input < 2; as_input++) {
    kl_graph *g = kl_graph_new();
    int x = tu_graph_input(g, "x", KL_F32, c->rank, c->x);
    int w = operand(g, as_input, "w", c->rank, c->w);
    int n = tu_graph_output_node(g, KL_OP_Conv, 2, (int[]){x, w}, 1);
    tu_node_ints(g, n, "pads", 4, c->pads);
    want_wino = dnnl && !as_input;
    check_on(g, as_input ? "3x3 convolution, W an input" : "3x3 convolution, W a constant",
             dnnl);
  }
  after_fast_run = NULL;
}

/* kiln's product over gathered rows (dnnl_im2col.c), which runs the strided and
 * larger-kernel convolutions over few output positions at the AVX2 level: odd
 * channels (37 in, 20 out: a partial panel), 300 channels (gathered in two pieces),
 * 2x8x7 and 1x5x5 outputs (row groups of fewer than 6), stride 2, a 5x3 kernel with
 * dilation 2 and uneven pads, Bias, a Sum, activations; X and Y plain (graph input and
 * outputs) or channels-last (read by, made by, 1x1 convolutions). */
static const char *const *im2col_layouts; /* the layout suffix of each, in node order */

static void im2col_impls(const kiln_session *fast, const kiln_model *m) {
  int seen = 0;
  bool want = kl_cpu_isa_fns(kl_isa_level())->gemv->rows_fast;
  for (int i = 0; i < m->g->n_nodes; i++) {
    const kl_node *n = &m->g->nodes[i];
    const kl_type *w = n->n_in > 1 ? &m->g->values[n->in[1]].type : NULL;
    if (!w || w->rank != 4 || w->dims[2].size * w->dims[3].size == 1) continue;
    const char *impl = kl_session_kernel_impl(fast, i);
    const char *at = impl ? strstr(impl, "im2col gemm") : NULL;
    if ((at != NULL) != want)
      fail_msg("convolution %d ran on '%s' at %s", i, impl ? impl : "-",
               kl_isa_level_name(kl_isa_level()));
    if (at && strcmp(at + 11, im2col_layouts[seen]) != 0)
      fail_msg("convolution %d ran on '%s', expected the layouts '%s'", i, impl,
               im2col_layouts[seen]);
    seen++;
  }
  assert_int_equal(seen, 4);
}

static kl_graph *im2col_graph(void) {
  kl_graph *g = kl_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 37, 15, 13});
  int s = tu_graph_input(g, "s", KL_F32, 4, (int64_t[]){2, 20, 8, 7});
  int z = tu_graph_input(g, "z", KL_F32, 4, (int64_t[]){1, 300, 9, 9});
  int v[8];
  for (int k = 0; k < 8; k++) v[k] = kl_graph_add_value(g, NULL, &e);
  /* n1: plain X, Sum, Y; 3x3 stride 2, Bias, Relu */
  int n1 = fconv(g, x, (int64_t[]){20, 37, 3, 3}, 1, true, s, v[0]);
  /* na: a channels-last copy of x for n2; n2: 5x3, dilation 2, stride 2, cl X, plain Y */
  fconv(g, x, (int64_t[]){37, 37, 1, 1}, 1, false, -1, v[1]);
  int n2 = fconv(g, v[1], (int64_t[]){24, 37, 5, 3}, 1, false, -1, v[2]);
  /* n3: 300 channels, plain X, channels-last Y (a 1x1 convolution reads it); weights
   * within 0.1, so that its 2700-term sums (and o3's of them) stay of the size of the
   * others and the relative tolerance means the same for them */
  int n3 = fconv(g, z, (int64_t[]){40, 300, 3, 3}, 0.1f, false, -1, v[3]);
  fconv(g, v[3], (int64_t[]){8, 40, 1, 1}, 1, false, -1, v[4]);
  /* n4: cl X and Y (a 1x1 convolution reads it) with a cl Sum (n1's output through a
   * 1x1 convolution) */
  fconv(g, v[0], (int64_t[]){20, 20, 1, 1}, 1, false, -1, v[5]);
  int n4 = fconv(g, v[1], (int64_t[]){20, 37, 3, 3}, 1, true, v[5], v[6]);
  fconv(g, v[6], (int64_t[]){8, 20, 1, 1}, 1, false, -1, v[7]);
  tu_node_ints(g, n1, "pads", 4, (int64_t[]){1, 1, 1, 1});
  tu_node_ints(g, n1, "strides", 2, (int64_t[]){2, 2});
  activation(g, n1, "Relu", 0, NULL);
  tu_node_ints(g, n2, "pads", 4, (int64_t[]){3, 0, 2, 1});
  tu_node_ints(g, n2, "strides", 2, (int64_t[]){2, 2});
  tu_node_ints(g, n2, "dilations", 2, (int64_t[]){2, 2});
  activation(g, n2, "Silu", 0, NULL);
  tu_node_ints(g, n3, "pads", 4, (int64_t[]){1, 1, 1, 1});
  tu_node_ints(g, n3, "strides", 2, (int64_t[]){2, 2});
  tu_node_ints(g, n4, "pads", 4, (int64_t[]){1, 1, 1, 1});
  tu_node_ints(g, n4, "strides", 2, (int64_t[]){2, 2});
  activation(g, n4, "Relu", 0, NULL);
  assert_int_equal(kl_graph_add_output(g, v[0], NULL), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, v[2], NULL), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, v[4], NULL), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, v[7], NULL), KILN_OK);
  return g;
}

static void test_im2col(void **state) {
  (void)state;
  /* without oneDNN, or at the generic level where kiln does not use it, these
   * convolutions run on the reference kernels: there is no fast path to compare */
  if (!KL_HAVE_DNNL || kl_isa_level() == KL_ISA_GENERIC) skip();
  static const char *const layouts[] = {" x:nchw y:nchw", " y:nchw", " x:nchw", ""};
  im2col_layouts = layouts;
  after_fast_run = im2col_impls;
  check(im2col_graph(), "im2col convolutions");
  after_fast_run = NULL;
  /* the four convolutions' weights are held only packed: in the product's panels where
   * kiln's tiles run them (avx2), in oneDNN's blocked layout elsewhere */
  check_released(im2col_graph, 4, "im2col convolutions");
}

/* Winograd convolutions whose channel counts are not multiples of the 16-channel
 * blocks (so their staged copies have padding), sharing one session's workspace, which
 * holds the scratchpad and staged copies of each in turn. chain: the second reads the
 * first (checked against the reference); else each of the chosen ones reads x and is
 * an output of its own, so that each alone and both together build the same
 * primitives, and the session holds the larger of their buffers, not the sum. */
static kl_graph *wino_graph(bool chain, bool first, bool second) {
  kl_graph *g = kl_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){1, 20, 14, 14});
  kl_err e = {0};
  int mid = chain ? kl_graph_add_value(g, NULL, &e) : -1;
  if (first) {
    int w = cst(g, 4, (int64_t[]){36, 20, 3, 3});
    int n = chain ? kl_graph_add_node(g, KL_OP_Conv, NULL, 2, (int[]){x, w}, 1, &mid, &e)
                  : tu_graph_output_node(g, KL_OP_Conv, 2, (int[]){x, w}, 1);
    assert_true(n >= 0);
    tu_node_ints(g, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  }
  if (second) {
    int64_t k = chain ? 3 : 5;
    int w = cst(g, 4, (int64_t[]){40, chain ? 36 : 20, k, k});
    int n = tu_graph_output_node(g, KL_OP_Conv, 2, (int[]){chain ? mid : x, w}, 1);
    tu_node_ints(g, n, "pads", 4, chain ? (int64_t[]){1, 1, 1, 1} : (int64_t[]){2, 2, 2, 2});
    if (!chain) tu_node_ints(g, n, "strides", 2, (int64_t[]){2, 2});
  }
  return g;
}

/* kl_session_held_bytes of a fast session over g after one run (frees g). */
static size_t held_after_run(kl_graph *g) {
  kiln_model *m = tu_model_of(g, 2); /* the default level */
  kiln_tensor_info info;
  assert_int_equal(kiln_model_input_info(m, 0, &info), KILN_OK);
  float *x = malloc(sizeof(float) * 20 * 14 * 14);
  assert_non_null(x);
  for (int k = 0; k < 20 * 14 * 14; k++) x[k] = frand(-1, 1);
  kiln_session *s = tu_session(m, false, 0);
  int64_t count;
  free(tu_run_f32(s, m, &x, &count));
  size_t held = kl_session_held_bytes(s);
  kiln_session_free(s);
  kiln_model_free(m);
  free(x);
  return held;
}

static void test_shared_workspace(void **state) {
  (void)state;
  check(wino_graph(true, true, true), "two convs, padded channels, one workspace");
  size_t a = held_after_run(wino_graph(false, true, false));
  size_t b = held_after_run(wino_graph(false, false, true));
  size_t both = held_after_run(wino_graph(false, true, true));
  /* a and b are each packed weights + workspace; both shares one workspace */
  if (!(both >= (a > b ? a : b) && both < a + b))
    fail_msg("held bytes: first alone %zu, second alone %zu, together %zu", a, b, both);
}

/* Which binary ops oneDNN runs: those with an operand of the output's shape made by a
 * convolution or pooling (its layout kept) and the other of that shape too, not a
 * pooling's small result scaling constant weights, which oneDNN 2.6 could only
 * broadcast with its reference binary, nor one value per channel scaling a
 * convolution's result (kiln's kernels run those: test_channel_scale_layouts). All
 * against the reference session. */
static void test_binary_choice(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){1, 8, 6, 6});
  int pooled = kl_graph_add_value(g, NULL, NULL), scaled = kl_graph_add_value(g, NULL, NULL);
  int gap = kl_graph_add_node(g, KL_OP_GlobalAveragePool, NULL, 1, &x, 1, &pooled, NULL);
  int c = kl_graph_add_node(g, KL_OP_Conv, NULL, 2, (int[]){x, cst(g, 4, (int64_t[]){8, 8, 1, 1})},
                            1, &scaled, NULL);
  assert_true(gap >= 0 && c >= 0);
  int se = tu_graph_output_node(g, KL_OP_Mul, 2, (int[]){scaled, pooled}, 1); /* [1, 8, 6, 6] */
  int wmul = tu_graph_output_node(g, KL_OP_Mul, 2,
                                  (int[]){cst(g, 4, (int64_t[]){4, 8, 1, 1}), pooled},
                                  1); /* [4, 8, 1, 1] */
  int same = tu_graph_output_node(g, KL_OP_Add, 2, (int[]){scaled, x}, 1); /* [1, 8, 6, 6] */
  kiln_model *m = tu_model_of(g, 0);
  kiln_session *ref = tu_session(m, true, 0), *fast = tu_session(m, false, 0);
  float *in = malloc(sizeof(float) * 288);
  assert_non_null(in);
  for (int i = 0; i < 288; i++) in[i] = frand(-2, 2);
  float *bufs[1] = {in};
  int64_t count;
  free(tu_run_f32(ref, m, bufs, &count));
  free(tu_run_f32(fast, m, bufs, &count));
  for (int k = 0; k < 3; k++) { /* both Muls' outputs and the Add's */
    kiln_tensor_info iw, ig;
    const void *dw, *dg;
    assert_int_equal(kiln_session_get_output(ref, k, &iw, &dw), KILN_OK);
    assert_int_equal(kiln_session_get_output(fast, k, &ig, &dg), KILN_OK);
    assert_int_equal(ig.rank, iw.rank);
    int64_t n = 1;
    for (int d = 0; d < iw.rank; d++) {
      assert_int_equal(ig.dims[d], iw.dims[d]);
      n *= iw.dims[d];
    }
    tu_assert_floats(dg, dw, n, TU_TOL(TOL, TOL));
  }
  assert_string_equal(kl_session_kernel_name(fast, same), "dnnl_binary");
  assert_true(strncmp(kl_session_kernel_name(fast, se), "dnnl", 4) != 0);
  assert_true(strncmp(kl_session_kernel_name(fast, wmul), "dnnl", 4) != 0);
  free(in);
  kiln_session_free(ref);
  kiln_session_free(fast);
  kiln_model_free(m);
}

#if KL_HAVE_DNNL
/* ---- the entry cache of the oneDNN kernels (dnnl_cache.c) ---- */

typedef struct fake_entry {
  int built; /* which build made it, 0: empty */
} fake_entry;

typedef struct fake_owner {
  int builds, frees;
  bool fail; /* the next build fails */
  fake_entry slots[KL_DNNL_CACHE_SLOTS];
} fake_owner;

static fake_owner *freed_by; /* the free callback has no owner: counts land here */

static kiln_status fake_build(void *owner, void *entry, kl_kernel_ctx *c) {
  fake_owner *o = owner;
  fake_entry *en = entry;
  assert_int_equal(en->built, 0); /* the slot was freed first */
  if (o->fail) return kl_fail(c->e, KILN_ERR_INTERNAL, "no entry for these shapes");
  en->built = ++o->builds;
  return KILN_OK;
}

static void fake_free(void *entry) {
  fake_entry *en = entry;
  if (en->built) freed_by->frees++;
  en->built = 0;
}

/* The entry for inputs of shapes [n] and, when m > 0, [m, 2] (else absent). */
static fake_entry *cache_get(kl_dnnl_cache *cache, int64_t n, int64_t m, kiln_status want) {
  kl_tensor a = {.dtype = KL_F32, .rank = 1, .dims = {n}};
  kl_tensor b = {.dtype = KL_F32, .rank = 2, .dims = {m, 2}};
  const kl_tensor *in[2] = {&a, m > 0 ? &b : NULL};
  kl_err e = {0};
  kl_kernel_ctx c = {.n_in = 2, .in = in, .e = &e};
  void *entry = NULL;
  tu_assert_status(kl_dnnl_cache_get(cache, &c, &entry), want, e.msg, NULL);
  return entry;
}

/* Hits, the empty slots filled first, then the least recently used evicted; an absent
 * input is part of the key; a failed build leaves its slot empty. */
static void test_entry_cache(void **state) {
  (void)state;
  fake_owner o = {0};
  freed_by = &o;
  kl_dnnl_cache cache;
  kl_dnnl_cache_init(&cache, o.slots, sizeof o.slots[0], 2, &o, fake_build, fake_free);
  fake_entry *a = cache_get(&cache, 1, 0, KILN_OK);
  assert_ptr_equal(a, &o.slots[0]);
  assert_ptr_equal(cache_get(&cache, 1, 0, KILN_OK), a);
  assert_ptr_equal(cache_get(&cache, 2, 0, KILN_OK), &o.slots[1]);
  assert_ptr_equal(cache_get(&cache, 1, 3, KILN_OK), &o.slots[2]); /* input 1 present */
  assert_ptr_equal(cache_get(&cache, 1, 4, KILN_OK), &o.slots[3]);
  assert_int_equal(o.builds, 4);
  assert_int_equal(o.frees, 0);
  assert_ptr_equal(cache_get(&cache, 1, 0, KILN_OK), a); /* [2] is now the oldest */
  assert_ptr_equal(cache_get(&cache, 5, 0, KILN_OK), &o.slots[1]);
  assert_int_equal(o.frees, 1);
  assert_int_equal(o.slots[1].built, 5);
  assert_ptr_equal(cache_get(&cache, 1, 3, KILN_OK), &o.slots[2]); /* still there */
  o.fail = true; /* evicts [1], [4, 2] (slot 3), whose rebuild fails: the slot is empty */
  assert_null(cache_get(&cache, 1, 5, KILN_ERR_INTERNAL));
  assert_int_equal(o.frees, 2);
  assert_int_equal(o.slots[3].built, 0);
  o.fail = false;
  assert_ptr_equal(cache_get(&cache, 7, 0, KILN_OK), &o.slots[3]); /* the empty slot */
  assert_int_equal(o.frees, 2);
  kl_dnnl_cache_clear(&cache);
  assert_int_equal(o.frees, 6);
  for (int i = 0; i < KL_DNNL_CACHE_SLOTS; i++) assert_int_equal(o.slots[i].built, 0);
}
#endif

int main(void) {
  /* KILN_ISA=generic turns oneDNN off (it has no portable-C level): every node then runs
   * on kiln's kernels, which test_isa and test_ref_kernels cover; 77 is meson's skip. */
#if KL_HAVE_DNNL
  if (!kl_dnnl_usable()) {
    printf("oneDNN is not used at this ISA level (KILN_ISA=generic): nothing to test\n");
    return 77;
  }
#endif
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv),
      cmocka_unit_test(test_conv_transpose),
      cmocka_unit_test(test_pool),
      cmocka_unit_test(test_gemm),
      cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_fused_conv_activations),
      cmocka_unit_test(test_fused_sum),
      cmocka_unit_test(test_fused_gemm_matmul),
      cmocka_unit_test(test_attention),
      cmocka_unit_test(test_mha),
      cmocka_unit_test(test_conv_chain),
      cmocka_unit_test(test_concat_layouts),
      cmocka_unit_test(test_channel_scale_layouts),
      cmocka_unit_test(test_pad_layouts),
      cmocka_unit_test(test_pool_after_plain),
      cmocka_unit_test(test_cl_elementwise),
      cmocka_unit_test(test_symbolic_batch_o3),
      cmocka_unit_test(test_blocked_convs),
      cmocka_unit_test(test_grouped_convs),
      cmocka_unit_test(test_winograd),
      cmocka_unit_test(test_winograd_plain),
      cmocka_unit_test(test_winograd_constant_weights_only),
      cmocka_unit_test(test_im2col),
      cmocka_unit_test(test_shared_workspace),
      cmocka_unit_test(test_binary_choice),
      cmocka_unit_test(test_fast_only),
#if KL_HAVE_DNNL
      cmocka_unit_test(test_entry_cache),
#endif
      cmocka_unit_test(test_wide_rows), /* last: the others' random data stay as they were */
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
