/* The fast kernels of the gradient ops against their reference kernels (the oracle,
 * in double), on random non-zero float32 data at awkward sizes: ConvGradX and
 * ConvGradW on oneDNN (dnnl_grad.c: strides with pads, dilations, groups, depthwise,
 * 1-D and 3-D, auto_pad, batch 1 and 3, channels not a multiple of 8), and kiln's own
 * kernels (isa/run_grad.c) for MaxPoolGrad, AveragePoolGrad, BatchNormTrain,
 * BatchNormGrad, UnaryGrad, SumTo and ReduceGrad. Each graph runs in a reference
 * session and a fast one (twice: the second run from the primitive cache), with 1 and
 * 2 threads, with oneDNN's workspace filled with NaNs before every node; every output
 * must match within float32 tolerance, the same bits at 1 and 2 threads (a training
 * run must not depend on the thread count), and every node must have run on its fast
 * kernel (a fast path silently falling back to the reference is a bug), which at the
 * generic ISA level is kiln's generic kernel and, for the convolutions, the reference
 * (oneDNN has no generic level). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/run.h"
#include "kl_config.h"
#include "runtime/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* float32 sums of up to a few thousand products of values in [-2, 2] against double */
#define ATOL 2e-4
#define RTOL 1e-4

/* ATOL and RTOL times this (grad_w_case's sums of 648 products through two convolutions
 * round further from the reference's than the other graphs' of at most 216) */
static double tol_scale = 1;

static uint32_t rng = 4242;

/* ---- running ---- */

/* Whether node n must run on a fast kernel here: kiln's own at every level; oneDNN's
 * convolutions and their gradients where oneDNN runs (not at the generic level). */
static bool fast_expected(const kl_node *n) {
  if (n->op == KL_OP_KilnConvGradX || n->op == KL_OP_KilnConvGradW || n->op == KL_OP_Conv)
    return KL_HAVE_DNNL && kl_isa_level() != KL_ISA_GENERIC;
  return true;
}

/* Input values: magnitudes in [0.05, 2] with random signs (no zeros, which would hide
 * a gradient routed to the wrong place); `positive` inputs (a forward output that
 * UnaryGrad reads as Y) in (0.05, 0.95). */
static void fill(float *v, int64_t n, bool positive) {
  for (int64_t k = 0; k < n; k++) {
    float m = tu_rand_f32(&rng, 0.05f, positive ? 0.95f : 2.0f);
    v[k] = positive || tu_rand_f32(&rng, -1, 1) >= 0 ? m : -m;
  }
}

/* Called after each fast run when set: checks of what ran where. */
static void (*after_fast_run)(const kiln_session *fast, const kiln_model *m);

/* A test's teardown: no hook left for the next test when a check failed before the
 * test could clear it. */
static int no_hook(void **state) {
  (void)state;
  after_fast_run = NULL;
  tol_scale = 1;
  return 0;
}

/* Input i of m filled by fill() (positive values when asked); *count its elements. */
static float *input_buf(const kiln_model *m, int i, bool positive, int64_t *count) {
  kiln_tensor_info info;
  assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
  int64_t n = 1;
  for (int d = 0; d < info.rank; d++) n *= info.dims[d];
  float *buf = malloc(sizeof(float) * (size_t)(n ? n : 1));
  assert_non_null(buf);
  fill(buf, n, positive);
  *count = n;
  return buf;
}

/* Exports g (freed), runs it in a reference session and in fast sessions of 1 and 2
 * threads, twice each; the outputs must agree, and every node run fast. positive:
 * bit i makes input i's values positive. */
static void check_pos(kl_graph *g, const char *what, unsigned positive) {
  kiln_model *m = tu_model_of(g, 0);
  int n_in = kiln_model_input_count(m);
  float **bufs = calloc((size_t)n_in + 1, sizeof *bufs);
  assert_non_null(bufs);
  for (int i = 0; i < n_in; i++) {
    int64_t n;
    bufs[i] = input_buf(m, i, positive >> i & 1, &n);
  }
  kiln_session *ref = tu_session(m, true, 1);
  int64_t n_want, n_got;
  float *want = tu_run_f32(ref, m, bufs, &n_want), *one_thread = NULL, *first_run = NULL;
  /* ConvGradW sums over the batch on oneDNN's threads: the same bits run after run, not
   * at another thread count */
  bool by_threads = false;
  for (int i = 0; i < m->g->n_nodes; i++) by_threads |= m->g->nodes[i].op == KL_OP_KilnConvGradW;
  for (int threads = 1; threads <= 2; threads++) {
    kiln_session *fast = tu_session(m, false, threads);
    kl_session_poison_workspace(fast);
    for (int r = 0; r < 2; r++) {
      float *got = tu_run_f32(fast, m, bufs, &n_got);
      for (int i = 0; i < m->g->n_nodes; i++) {
        const char *k = kl_session_kernel_name(fast, i), *slow = kl_session_slow_path(fast, i);
        if (fast_expected(&m->g->nodes[i]) && (strcmp(k, "ref") == 0 || slow))
          fail_msg("%s: node %d (%s) ran on '%s'%s%s at %s", what, i,
                   kl_op_get(m->g->nodes[i].op)->name, k, slow ? ", " : "", slow ? slow : "",
                   kl_isa_level_name(kl_isa_level()));
      }
      if (after_fast_run) after_fast_run(fast, m);
      assert_int_equal(n_got, n_want);
      for (int64_t k = 0; k < n_want; k++)
        if (!(fabs((double)got[k] - want[k]) <=
              tol_scale * (ATOL + RTOL * fabs((double)want[k]))))
          fail_msg("%s (%d threads, run %d): element %lld of %lld is %.8g, the reference %.8g",
                   what, threads, r + 1, (long long)k, (long long)n_want, (double)got[k],
                   (double)want[k]);
      /* the same bits in every run, and whatever the thread count (but ConvGradW's) */
      if (r == 1 && memcmp(got, first_run, sizeof(float) * (size_t)n_want) != 0)
        fail_msg("%s: %d threads give other bits in a second run", what, threads);
      if (!by_threads && one_thread && memcmp(got, one_thread, sizeof(float) * (size_t)n_want) != 0)
        fail_msg("%s: 2 threads give other bits than 1", what);
      if (r == 0) {
        free(first_run);
        first_run = malloc(sizeof(float) * (size_t)(n_want ? n_want : 1));
        memcpy(first_run, got, sizeof(float) * (size_t)n_want);
      }
      if (!one_thread) one_thread = got;
      else free(got);
    }
    kiln_session_free(fast);
  }
  free(want);
  free(one_thread);
  free(first_run);
  for (int i = 0; i < n_in; i++) free(bufs[i]);
  free(bufs);
  kiln_session_free(ref);
  kiln_model_free(m);
}

static void check(kl_graph *g, const char *what) { check_pos(g, what, 0); }

/* ---- ConvGradX and ConvGradW ---- */

typedef struct conv_case {
  const char *what;
  int rank;
  int64_t x[5], w[5];
  int64_t group;
  int64_t strides[3], dilations[3], pads[6];
  const char *auto_pad;
} conv_case;

static const conv_case conv_cases[] = {
    {"3x3 pad 1, batch 3, 5 -> 6 channels", 4, {3, 5, 9, 7}, {6, 5, 3, 3}, 1, {1, 1}, {1, 1},
     {1, 1, 1, 1}, NULL},
    {"stride 2 pad 1, odd sizes", 4, {1, 3, 11, 10}, {4, 3, 3, 3}, 1, {2, 2}, {1, 1},
     {1, 1, 1, 1}, NULL},
    {"dilation 2", 4, {3, 6, 9, 9}, {10, 6, 3, 3}, 1, {1, 1}, {2, 2}, {2, 2, 2, 2}, NULL},
    {"groups 2", 4, {2, 6, 7, 9}, {10, 3, 3, 3}, 2, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL},
    {"depthwise stride 2", 4, {3, 12, 9, 9}, {12, 1, 3, 3}, 12, {2, 2}, {1, 1}, {1, 1, 1, 1},
     NULL},
    {"1-D stride 2", 3, {3, 5, 17}, {7, 5, 5}, 1, {2}, {1}, {2, 2}, NULL},
    {"3-D", 5, {1, 4, 5, 6, 7}, {6, 4, 3, 3, 3}, 1, {1, 1, 1}, {1, 1, 1}, {1, 1, 1, 1, 1, 1},
     NULL},
    {"1x1 stride 2", 4, {3, 16, 9, 9}, {24, 16, 1, 1}, 1, {2, 2}, {1, 1}, {0, 0, 0, 0}, NULL},
    {"one input channel (the digits CNN's first)", 4, {3, 1, 8, 8}, {8, 1, 3, 3}, 1, {1, 1},
     {1, 1}, {1, 1, 1, 1}, NULL},
    {"7x7 stride 2 pad 3 from 3 channels", 4, {1, 3, 23, 23}, {8, 3, 7, 7}, 1, {2, 2}, {1, 1},
     {3, 3, 3, 3}, NULL},
    {"uneven pads", 4, {2, 4, 8, 9}, {5, 4, 3, 2}, 1, {1, 2}, {1, 1}, {0, 1, 2, 0}, NULL},
    {"auto_pad SAME_UPPER stride 2", 4, {2, 4, 8, 9}, {5, 4, 3, 3}, 1, {2, 2}, {1, 1},
     {0}, "SAME_UPPER"},
    {"32 -> 48 channels 3x3", 4, {2, 32, 10, 12}, {48, 32, 3, 3}, 1, {1, 1}, {1, 1},
     {1, 1, 1, 1}, NULL},
};

/* Y's spatial size along dim i of case c. */
static int64_t conv_out(const conv_case *c, int i) {
  int64_t in = c->x[2 + i], s = c->strides[i];
  if (c->auto_pad) return (in + s - 1) / s;
  int sp = c->rank - 2;
  int64_t span = (c->w[2 + i] - 1) * c->dilations[i] + 1;
  return (in + c->pads[i] + c->pads[sp + i] - span) / s + 1;
}

static void conv_attrs(kl_graph *g, int n, const conv_case *c) {
  int sp = c->rank - 2;
  tu_node_ints(g, n, "strides", sp, c->strides);
  tu_node_ints(g, n, "dilations", sp, c->dilations);
  if (c->auto_pad)
    assert_int_equal(kl_node_set_string(g, n, "auto_pad", c->auto_pad, NULL), KILN_OK);
  else tu_node_ints(g, n, "pads", 2 * sp, c->pads);
  assert_int_equal(kl_node_set_int(g, n, "group", c->group, NULL), KILN_OK);
}

/* ConvGradX and ConvGradW of case c over inputs x, w, dy, both outputs. */
static kl_graph *conv_grad_graph(const conv_case *c) {
  int64_t y[5] = {c->x[0], c->w[0]};
  for (int d = 0; d < c->rank - 2; d++) y[2 + d] = conv_out(c, d);
  kl_graph *g = kl_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, c->rank, c->x);
  int w = tu_graph_input(g, "w", KL_F32, c->rank, c->w);
  int dy = tu_graph_input(g, "dy", KL_F32, c->rank, y);
  conv_attrs(g, tu_graph_output_node(g, KL_OP_KilnConvGradX, 3, (int[]){dy, w, x}, 1), c);
  conv_attrs(g, tu_graph_output_node(g, KL_OP_KilnConvGradW, 3, (int[]){x, dy, w}, 1), c);
  return g;
}

static void test_conv_grad(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++)
    check(conv_grad_graph(&conv_cases[i]), conv_cases[i].what);
}

/* ---- MaxPoolGrad and AveragePoolGrad ---- */

typedef struct pool_case {
  const char *what;
  int rank;
  int64_t x[5], y[5];
  int64_t kernel[3], strides[3], dilations[3], pads[6];
  int64_t ceil_mode, include_pad;
} pool_case;

static const pool_case pool_cases[] = {
    {"3x3 stride 2 pad 1, batch 3, 5 channels", 4, {3, 5, 9, 7}, {3, 5, 5, 4}, {3, 3}, {2, 2},
     {1, 1}, {1, 1, 1, 1}, 0, 0},
    {"2x2 stride 2 (the digits CNN's)", 4, {1, 3, 8, 8}, {1, 3, 4, 4}, {2, 2}, {2, 2}, {1, 1},
     {0, 0, 0, 0}, 0, 0},
    {"dilation 2, uneven pads", 4, {2, 3, 11, 10}, {2, 3, 10, 3}, {3, 2}, {1, 3}, {2, 2},
     {1, 0, 2, 1}, 0, 0},
    {"ceil_mode", 4, {1, 2, 7, 8}, {1, 2, 3, 4}, {3, 3}, {2, 2}, {1, 1}, {0, 0, 0, 0}, 1, 0},
    {"count_include_pad", 4, {3, 4, 7, 9}, {3, 4, 4, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1},
     0, 1},
    {"1-D", 3, {3, 4, 11}, {3, 4, 5}, {3}, {2}, {1}, {0, 0}, 0, 0},
    {"3-D", 5, {1, 2, 5, 6, 7}, {1, 2, 2, 3, 4}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1},
     {0, 0, 0, 0, 1, 1}, 0, 0},
    /* rows long enough for runs of whole windows (the level's max_taps, 8 at a time)
     * with tails: stride 2 (two loads and a shuffle), 1 (one load), 3 (a gather) */
    {"3x3 stride 2 pad 1, 19 wide", 4, {2, 3, 9, 37}, {2, 3, 5, 19}, {3, 3}, {2, 2}, {1, 1},
     {1, 1, 1, 1}, 0, 0},
    {"3x3 stride 1 pad 1, 29 wide", 4, {1, 2, 6, 29}, {1, 2, 6, 29}, {3, 3}, {1, 1}, {1, 1},
     {1, 1, 1, 1}, 0, 0},
    {"3x2 stride 3, dilation 2, 12 wide", 4, {1, 2, 7, 40}, {1, 2, 3, 12}, {2, 3}, {2, 3},
     {1, 2}, {0, 0, 0, 0}, 0, 0},
};

static void pool_attrs(kl_graph *g, int n, const pool_case *c, bool avg) {
  int sp = c->rank - 2;
  tu_node_ints(g, n, "kernel_shape", sp, c->kernel);
  tu_node_ints(g, n, "strides", sp, c->strides);
  tu_node_ints(g, n, "dilations", sp, c->dilations);
  tu_node_ints(g, n, "pads", 2 * sp, c->pads);
  assert_int_equal(kl_node_set_int(g, n, "ceil_mode", c->ceil_mode, NULL), KILN_OK);
  if (avg)
    assert_int_equal(kl_node_set_int(g, n, "count_include_pad", c->include_pad, NULL), KILN_OK);
}

static void test_pool_grad(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++) {
    const pool_case *c = &pool_cases[i];
    kl_graph *g = kl_graph_new();
    int x = tu_graph_input(g, "x", KL_F32, c->rank, c->x);
    int dy = tu_graph_input(g, "dy", KL_F32, c->rank, c->y);
    pool_attrs(g, tu_graph_output_node(g, KL_OP_KilnMaxPoolGrad, 2, (int[]){dy, x}, 1), c, false);
    pool_attrs(g, tu_graph_output_node(g, KL_OP_KilnAveragePoolGrad, 2, (int[]){dy, x}, 1), c,
               true);
    check(g, c->what);
  }
}

/* MaxPool's ties: X of a few repeated values (as after a Relu), where the first of equal
 * maxima must get the gradient. */
static void test_max_pool_grad_ties(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int64_t xd[4] = {2, 3, 9, 9}, yd[4] = {2, 3, 4, 4};
  int64_t n = 2 * 3 * 9 * 9;
  float *v = malloc(sizeof(float) * (size_t)n); /* the graph's from here */
  assert_non_null(v);
  for (int64_t k = 0; k < n; k++) v[k] = (float)(k * 7 % 3) * 0.5f;
  int x = kl_graph_add_const(g, NULL, KL_F32, 4, xd, v, sizeof(float) * (size_t)n, false, NULL);
  int dy = tu_graph_input(g, "dy", KL_F32, 4, yd);
  int k = tu_graph_output_node(g, KL_OP_KilnMaxPoolGrad, 2, (int[]){dy, x}, 1);
  tu_node_ints(g, k, "kernel_shape", 2, (int64_t[]){3, 3});
  tu_node_ints(g, k, "strides", 2, (int64_t[]){2, 2});
  check(g, "MaxPoolGrad with ties");
}

/* NaN and -inf in X: a NaN wins its window (the last one when several), a window of
 * -inf gives its first tap the gradient; rows long enough for the level's max_taps. */
static void test_max_pool_grad_nan(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int64_t xd[4] = {1, 2, 7, 41}, yd[4] = {1, 2, 4, 21};
  int64_t n = 2 * 7 * 41;
  float *v = malloc(sizeof(float) * (size_t)n); /* the graph's from here */
  assert_non_null(v);
  for (int64_t k = 0; k < n; k++)
    v[k] = k % 17 == 3 ? NAN : k % 5 == 1 || (k >= 41 && k < 82) ? -INFINITY
                                                               : (float)((k * 37) % 23) - 11.0f;
  int x = kl_graph_add_const(g, NULL, KL_F32, 4, xd, v, sizeof(float) * (size_t)n, false, NULL);
  int dy = tu_graph_input(g, "dy", KL_F32, 4, yd);
  int k = tu_graph_output_node(g, KL_OP_KilnMaxPoolGrad, 2, (int[]){dy, x}, 1);
  tu_node_ints(g, k, "kernel_shape", 2, (int64_t[]){3, 3});
  tu_node_ints(g, k, "strides", 2, (int64_t[]){2, 2});
  tu_node_ints(g, k, "pads", 4, (int64_t[]){1, 1, 1, 1});
  check(g, "MaxPoolGrad with NaN and -inf");
}

/* ---- BatchNormTrain and BatchNormGrad ---- */

static void bn_case(const char *what, int rank, const int64_t *x_dims) {
  int64_t ch = x_dims[1];
  kl_graph *g = kl_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, rank, x_dims);
  int dy = tu_graph_input(g, "dy", KL_F32, rank, x_dims);
  int scale = tu_graph_input(g, "scale", KL_F32, 1, &ch);
  int b = tu_graph_input(g, "b", KL_F32, 1, &ch);
  int mean = tu_graph_input(g, "mean", KL_F32, 1, &ch);
  int var = tu_graph_input(g, "var", KL_F32, 1, &ch);
  int t = tu_graph_output_node(g, KL_OP_KilnBatchNormTrain, 5, (int[]){x, scale, b, mean, var}, 3);
  assert_int_equal(kl_node_set_float(g, t, "momentum", 0.8f, NULL), KILN_OK);
  int k = tu_graph_output_node(g, KL_OP_KilnBatchNormGrad, 3, (int[]){dy, x, scale}, 3);
  assert_int_equal(kl_node_set_float(g, k, "epsilon", 1e-3f, NULL), KILN_OK);
  check(g, what);
}

/* At level avx2, the form each ConvGradW (in node order) must run, dnnl_grad.c's
 * cl_order: "gemm" (im2col + GEMM on plain operands), " blocked" (nChw8c), or "" for
 * channels-last (neither of those). */
static const char *want_grad_w[2];

static void grad_w_forms(const kiln_session *fast, const kiln_model *m) {
  if (!KL_HAVE_DNNL || kl_isa_level() != KL_ISA_AVX2) return;
  int w = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    if (m->g->nodes[i].op != KL_OP_KilnConvGradW || w >= 2 || !want_grad_w[w]) continue;
    const char *impl = kl_session_kernel_impl(fast, i), *want = want_grad_w[w];
    bool ok = impl && (*want ? strstr(impl, want) != NULL
                             : !strstr(impl, "gemm") && !strstr(impl, "blocked"));
    if (!ok)
      fail_msg("ConvGradW #%d ran '%s', expected oneDNN's %s form at avx2", w,
               impl ? impl : "-", *want ? want : "channels-last");
    w++;
  }
}

/* A training step's tensors held channels-last between oneDNN's convolutions (backend.c
 * choose_layouts): x -> Conv -> BatchNormTrain -> Add (with the convolution's output)
 * -> Relu -> Conv -> y, and back from dy: ConvGradX -> UnaryGrad (Relu) ->
 * BatchNormGrad -> Add (the two paths' gradients) -> ConvGradW, and ConvGradW of the
 * second convolution. Where oneDNN runs (every level but generic) BatchNormTrain and
 * BatchNormGrad must run their channels-last kernels (kl_run_batchnorm_train_grad_cl),
 * the convolution gradients over channels-last dY, X and dX; every output as the
 * reference's (all plain there). Odd sizes: 3 images of 9x7 (189 rows per channel:
 * two full blocks of 64 and a partial one), 20 -> 24 -> 16 channels. */
static void cl_kernels(const kiln_session *fast, const kiln_model *m) {
  if (!KL_HAVE_DNNL || kl_isa_level() == KL_ISA_GENERIC) return;
  grad_w_forms(fast, m);
  int seen = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    kl_op op = m->g->nodes[i].op;
    if (op != KL_OP_KilnBatchNormTrain && op != KL_OP_KilnBatchNormGrad &&
        op != KL_OP_KilnMaxPoolGrad && op != KL_OP_KilnReduceGrad)
      continue;
    const char *k = kl_session_kernel_name(fast, i);
    if (!strstr(k, "channels-last"))
      fail_msg("%s ran on '%s', not its channels-last kernel, at %s", kl_op_get(op)->name, k,
               kl_isa_level_name(kl_isa_level()));
    seen++;
  }
  assert_int_equal(seen, 2); /* both graphs have two of them */
}

/* BatchNormGrad held channels-last over an X with no rows ([0, 5, 3, 3]): dScale and dB
 * are sums over nothing, zeros, at every level (the kernel returned without writing
 * them: whatever the buffers held came out). */
static void test_batchnorm_grad_cl_empty(void **state) {
  (void)state;
  int64_t xd[4] = {0, 5, 3, 3}, ch = 5;
  kl_graph *g = kl_graph_new();
  int dy = tu_graph_input(g, "dy", KL_F32, 4, xd), x = tu_graph_input(g, "x", KL_F32, 4, xd);
  int scale = tu_graph_input(g, "scale", KL_F32, 1, &ch);
  int k = tu_graph_output_node(g, KL_OP_KilnBatchNormGrad, 3, (int[]){dy, x, scale}, 3);
  float sc[5] = {1, 2, 3, 4, 5}, ds[5], db[5], nothing[1];
  kl_tensor tdy = {KL_F32, 4, {0, 5, 3, 3}, nothing}, tx = tdy, tdx = tdy;
  kl_tensor tsc = {KL_F32, 1, {5}, sc}, tds = {KL_F32, 1, {5}, ds}, tdb = {KL_F32, 1, {5}, db};
  const kl_tensor *in[3] = {&tdy, &tx, &tsc};
  kl_tensor *out[3] = {&tdx, &tds, &tdb};
  for (int level = KL_ISA_GENERIC; level <= (int)kl_isa_level(); level++) {
    for (int i = 0; i < 5; i++) ds[i] = db[i] = 7.0f;
    kl_err e = {0};
    kl_kernel_ctx c = {.node = &g->nodes[k], .n_in = 3, .in = in, .n_out = 3, .out = out,
                       .e = &e, .threads = 1};
    assert_int_equal(kl_run_grad_cl(&c, kl_cpu_isa_fns((kl_isa)level)), KILN_OK);
    for (int i = 0; i < 5; i++)
      if (ds[i] != 0.0f || db[i] != 0.0f)
        fail_msg("level %s: dScale[%d] %g, dB[%d] %g, expected zeros",
                 kl_isa_level_name((kl_isa)level), i, (double)ds[i], i, (double)db[i]);
  }
  kl_graph_free(g);
}

static void test_batchnorm_channels_last(void **state) {
  (void)state;
  int64_t xd[4] = {3, 20, 9, 7}, w1d[4] = {24, 20, 3, 3}, w2d[4] = {16, 24, 3, 3};
  int64_t yd[4] = {3, 16, 9, 7}, ch = 24, pads[4] = {1, 1, 1, 1};
  kl_graph *g = kl_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, xd), w1 = tu_graph_input(g, "w1", KL_F32, 4, w1d);
  int w2 = tu_graph_input(g, "w2", KL_F32, 4, w2d), dy = tu_graph_input(g, "dy", KL_F32, 4, yd);
  int scale = tu_graph_input(g, "scale", KL_F32, 1, &ch), b = tu_graph_input(g, "b", KL_F32, 1, &ch);
  int mean = tu_graph_input(g, "mean", KL_F32, 1, &ch), var = tu_graph_input(g, "var", KL_F32, 1, &ch);
  int c1 = TU_OP(g, Conv, x, w1);
  tu_node_ints(g, g->values[c1].producer, "pads", 4, pads);
  int bn = tu_graph_value(g, NULL), nm = tu_graph_value(g, NULL), nv = tu_graph_value(g, NULL);
  int t = tu_graph_node(g, KL_OP_KilnBatchNormTrain, NULL, 5, (int[]){c1, scale, b, mean, var}, 3,
                        (int[]){bn, nm, nv});
  assert_int_equal(kl_node_set_float(g, t, "momentum", 0.8f, NULL), KILN_OK);
  int sum = TU_OP(g, Add, bn, c1), r = TU_OP(g, Relu, sum), y = TU_OP(g, Conv, r, w2);
  tu_node_ints(g, g->values[y].producer, "pads", 4, pads);
  int dr = TU_OP(g, KilnConvGradX, dy, w2, r);
  tu_node_ints(g, g->values[dr].producer, "pads", 4, pads);
  int ds = TU_OP(g, KilnUnaryGrad, dr, sum);
  assert_int_equal(kl_node_set_string(g, g->values[ds].producer, "op", "Relu", NULL), KILN_OK);
  int dc = tu_graph_value(g, NULL), dscale = tu_graph_value(g, NULL), db = tu_graph_value(g, NULL);
  tu_graph_node(g, KL_OP_KilnBatchNormGrad, NULL, 3, (int[]){ds, c1, scale}, 3,
                (int[]){dc, dscale, db});
  int dsum = TU_OP(g, Add, dc, ds);
  int dw1 = TU_OP(g, KilnConvGradW, x, dsum, w1), dw2 = TU_OP(g, KilnConvGradW, r, dy, w2);
  tu_node_ints(g, g->values[dw1].producer, "pads", 4, pads);
  tu_node_ints(g, g->values[dw2].producer, "pads", 4, pads);
  int outs[7] = {y, nm, nv, dscale, db, dw1, dw2};
  for (int k = 0; k < 7; k++) assert_int_equal(kl_graph_add_output(g, outs[k], NULL), KILN_OK);
  after_fast_run = cl_kernels;
  /* both ConvGradW under GR_LAYOUT_WORK multiply-adds: channels-last */
  want_grad_w[0] = want_grad_w[1] = "";
  check_pos(g, "a training step held channels-last", 1u << 7); /* var > 0 */
  want_grad_w[0] = want_grad_w[1] = NULL;
  after_fast_run = NULL;
}

/* MaxPoolGrad and a global pooling's ReduceGrad held channels-last: x -> Conv -> MaxPool
 * 3x3 stride 2 pad 1 (11x9 -> 6x5: windows cut at the edges; and 9x9 stride 3 pad 4:
 * more taps than one call of the search takes) -> Conv -> GlobalAveragePool
 * -> output, and back: dy -> ReduceGrad (mean over H, W) -> ConvGradX -> MaxPoolGrad ->
 * ConvGradW; 19 channels (a block of 16 and a partial one). Where oneDNN runs both
 * gradients must run their channels-last kernels; every output as the reference's. */
static void pool_grads_cl_case(int64_t k, int64_t stride, int64_t pad, const char *what) {
  int64_t xd[4] = {2, 5, 11, 9}, w1d[4] = {19, 5, 3, 3}, w2d[4] = {7, 19, 3, 3};
  int64_t gd[4] = {2, 7, 1, 1}, pads[4] = {1, 1, 1, 1}, mpads[4] = {pad, pad, pad, pad};
  kl_graph *g = kl_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, xd), w1 = tu_graph_input(g, "w1", KL_F32, 4, w1d);
  int w2 = tu_graph_input(g, "w2", KL_F32, 4, w2d), dg = tu_graph_input(g, "dg", KL_F32, 4, gd);
  int c1 = TU_OP(g, Conv, x, w1);
  tu_node_ints(g, g->values[c1].producer, "pads", 4, pads);
  int mp = TU_OP(g, MaxPool, c1);
  int mpn = g->values[mp].producer, mpg[1];
  tu_node_ints(g, mpn, "kernel_shape", 2, (int64_t[]){k, k});
  tu_node_ints(g, mpn, "strides", 2, (int64_t[]){stride, stride});
  tu_node_ints(g, mpn, "pads", 4, mpads);
  int c2 = TU_OP(g, Conv, mp, w2);
  tu_node_ints(g, g->values[c2].producer, "pads", 4, pads);
  int gap = TU_OP(g, GlobalAveragePool, c2);
  int dc2 = TU_OP(g, KilnReduceGrad, dg, c2);
  tu_node_ints(g, g->values[dc2].producer, "axes", 2, (int64_t[]){2, 3});
  assert_int_equal(kl_node_set_int(g, g->values[dc2].producer, "keepdims", 1, NULL), KILN_OK);
  assert_int_equal(kl_node_set_int(g, g->values[dc2].producer, "mean", 1, NULL), KILN_OK);
  int dmp = TU_OP(g, KilnConvGradX, dc2, w2, mp);
  tu_node_ints(g, g->values[dmp].producer, "pads", 4, pads);
  int dc1 = TU_OP(g, KilnMaxPoolGrad, dmp, c1);
  mpg[0] = g->values[dc1].producer;
  tu_node_ints(g, mpg[0], "kernel_shape", 2, (int64_t[]){k, k});
  tu_node_ints(g, mpg[0], "strides", 2, (int64_t[]){stride, stride});
  tu_node_ints(g, mpg[0], "pads", 4, mpads);
  int dw1 = TU_OP(g, KilnConvGradW, x, dc1, w1), dw2 = TU_OP(g, KilnConvGradW, mp, dc2, w2);
  tu_node_ints(g, g->values[dw1].producer, "pads", 4, pads);
  tu_node_ints(g, g->values[dw2].producer, "pads", 4, pads);
  int outs[3] = {gap, dw1, dw2};
  for (int k = 0; k < 3; k++) assert_int_equal(kl_graph_add_output(g, outs[k], NULL), KILN_OK);
  after_fast_run = cl_kernels;
  /* both ConvGradW under GR_LAYOUT_WORK multiply-adds: channels-last */
  want_grad_w[0] = want_grad_w[1] = "";
  check(g, what);
  want_grad_w[0] = want_grad_w[1] = NULL;
  after_fast_run = NULL;
}

static void test_pool_grads_channels_last(void **state) {
  (void)state;
  pool_grads_cl_case(3, 2, 1, "pooling gradients held channels-last, 3x3 windows");
  /* 9x9 windows: 81 taps, searched in two calls of cl_max (64 and 17) */
  pool_grads_cl_case(9, 3, 4, "pooling gradients held channels-last, 9x9 windows");
}

/* ConvGradW over activations held channels-last, above GR_LAYOUT_WORK multiply-adds:
 * x -> Conv -> Relu -> r -> Conv -> y and dW = ConvGradW(r, dy). At avx2 on 1 and 2
 * threads the form is cl_order's: few positions against the columns (13 x 13 against
 * 72 channels of 3 x 3 taps) run im2col + GEMM, many (47 x 45 against 24) the blocked
 * kernel; both against the reference. On 3 threads, channels-last. */
static kl_graph *grad_w_graph(int64_t n, int64_t ch, int64_t h, int64_t w) {
  int64_t xd[4] = {n, ch, h, w}, wd[4] = {ch, ch, 3, 3}, pads[4] = {1, 1, 1, 1};
  kl_graph *g = kl_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, xd), w1 = tu_graph_input(g, "w1", KL_F32, 4, wd);
  int w2 = tu_graph_input(g, "w2", KL_F32, 4, wd), dy = tu_graph_input(g, "dy", KL_F32, 4, xd);
  int c1 = TU_OP(g, Conv, x, w1);
  tu_node_ints(g, g->values[c1].producer, "pads", 4, pads);
  int r = TU_OP(g, Relu, c1), y = TU_OP(g, Conv, r, w2);
  tu_node_ints(g, g->values[y].producer, "pads", 4, pads);
  int dw = TU_OP(g, KilnConvGradW, r, dy, w2);
  tu_node_ints(g, g->values[dw].producer, "pads", 4, pads);
  assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, dw, NULL), KILN_OK);
  return g;
}

static void grad_w_case(int64_t n, int64_t ch, int64_t h, int64_t w, const char *form,
                        const char *what) {
  after_fast_run = grad_w_forms;
  want_grad_w[0] = form;
  tol_scale = 10;
  check(grad_w_graph(n, ch, h, w), what);
  tol_scale = 1;
  /* the same graph on 3 threads: channels-last */
  kiln_model *m = tu_model_of(grad_w_graph(n, ch, h, w), 0);
  int n_in = kiln_model_input_count(m);
  float *bufs[4];
  int64_t count;
  for (int i = 0; i < n_in; i++) bufs[i] = input_buf(m, i, false, &count);
  kiln_session *s = tu_session(m, false, 3);
  free(tu_run_f32(s, m, bufs, &count));
  want_grad_w[0] = "";
  grad_w_forms(s, m);
  want_grad_w[0] = NULL;
  after_fast_run = NULL;
  kiln_session_free(s);
  kiln_model_free(m);
  for (int i = 0; i < n_in; i++) free(bufs[i]);
}

static void test_grad_w_forms(void **state) {
  (void)state;
  grad_w_case(3, 72, 13, 13, "gemm", "ConvGradW of few positions, held channels-last");
  grad_w_case(2, 24, 47, 45, " blocked", "ConvGradW of many positions, held channels-last");
}

static void test_batchnorm(void **state) {
  (void)state;
  bn_case("BatchNorm [3, 5, 7, 9]", 4, (int64_t[]){3, 5, 7, 9});
  bn_case("BatchNorm [1, 13, 11, 3] (batch 1)", 4, (int64_t[]){1, 13, 11, 3});
  bn_case("BatchNorm [64, 10] (rank 2)", 2, (int64_t[]){64, 10});
  bn_case("BatchNorm 3-D [2, 3, 4, 5, 6]", 5, (int64_t[]){2, 3, 4, 5, 6});
}

/* ---- UnaryGrad ---- */

static void unary_case(const char *op, bool with_y, float alpha, const char *approximate) {
  int64_t d[3] = {3, 7, 1001};
  kl_graph *g = kl_graph_new();
  int dy = tu_graph_input(g, "dy", KL_F32, 3, d), x = tu_graph_input(g, "x", KL_F32, 3, d);
  int y = with_y ? tu_graph_input(g, "y", KL_F32, 3, d) : -1;
  int n = tu_graph_output_node(g, KL_OP_KilnUnaryGrad, with_y ? 3 : 2, (int[]){dy, x, y}, 1);
  assert_int_equal(kl_node_set_string(g, n, "op", op, NULL), KILN_OK);
  if (alpha != 0) assert_int_equal(kl_node_set_float(g, n, "alpha", alpha, NULL), KILN_OK);
  if (approximate)
    assert_int_equal(kl_node_set_string(g, n, "approximate", approximate, NULL), KILN_OK);
  char what[64];
  snprintf(what, sizeof what, "UnaryGrad %s%s%s", op, with_y ? " with Y" : "",
           approximate ? " tanh" : "");
  check_pos(g, what, with_y ? 4u : 0u); /* Y (input 2) a sigmoid's or tanh's in (0, 1) */
}

static void test_unary_grad(void **state) {
  (void)state;
  unary_case("Relu", false, 0, NULL);
  unary_case("LeakyRelu", false, 0.1f, NULL);
  unary_case("Sigmoid", true, 0, NULL);
  unary_case("Sigmoid", false, 0, NULL);
  unary_case("Tanh", true, 0, NULL);
  unary_case("Tanh", false, 0, NULL);
  unary_case("Gelu", false, 0, NULL);
  unary_case("Gelu", false, 0, "tanh");
  unary_case("Silu", false, 0, NULL);
  unary_case("Erf", false, 0, NULL);
}

/* ---- SoftmaxGrad (last axis) and LayerNormGrad ---- */

static void softmax_case(const char *what, int rank, const int64_t *d, bool log_form) {
  kl_graph *g = kl_graph_new();
  int dy = tu_graph_input(g, "dy", KL_F32, rank, d), y = tu_graph_input(g, "y", KL_F32, rank, d);
  int n = tu_graph_output_node(g, KL_OP_KilnSoftmaxGrad, 2, (int[]){dy, y}, 1);
  assert_int_equal(kl_node_set_int(g, n, "log", log_form, NULL), KILN_OK);
  check_pos(g, what, log_form ? 0u : 2u); /* a softmax's Y in (0, 1) */
}

static void layernorm_case(const char *what, int rank, const int64_t *d, int axis) {
  kl_graph *g = kl_graph_new();
  int64_t cols = 1;
  for (int i = axis; i < rank; i++) cols *= d[i];
  int64_t sd[KL_MAX_RANK];
  for (int i = axis; i < rank; i++) sd[i - axis] = d[i];
  int dy = tu_graph_input(g, "dy", KL_F32, rank, d), x = tu_graph_input(g, "x", KL_F32, rank, d);
  int scale = tu_graph_input(g, "scale", KL_F32, rank - axis, sd);
  int n = tu_graph_output_node(g, KL_OP_KilnLayerNormGrad, 3, (int[]){dy, x, scale}, 3);
  assert_int_equal(kl_node_set_int(g, n, "axis", axis, NULL), KILN_OK);
  assert_int_equal(kl_node_set_float(g, n, "epsilon", 1e-3f, NULL), KILN_OK);
  (void)cols;
  check(g, what);
}

static void test_softmax_layernorm_grad(void **state) {
  (void)state;
  softmax_case("SoftmaxGrad [3, 5, 37]", 3, (int64_t[]){3, 5, 37}, false);
  softmax_case("SoftmaxGrad log [7, 1001]", 2, (int64_t[]){7, 1001}, true);
  softmax_case("SoftmaxGrad [2, 1]", 2, (int64_t[]){2, 1}, false);
  layernorm_case("LayerNormGrad [3, 67, 33]", 3, (int64_t[]){3, 67, 33}, 2);
  layernorm_case("LayerNormGrad [130, 20] (3 blocks)", 2, (int64_t[]){130, 20}, 1);
  layernorm_case("LayerNormGrad [2, 3, 4, 5] over 2 axes", 4, (int64_t[]){2, 3, 4, 5}, 2);
}

/* ---- SumTo and ReduceGrad ---- */

static void sum_to_case(const char *what, int rank, const int64_t *big, int like_rank,
                        const int64_t *like) {
  kl_graph *g = kl_graph_new();
  int dy = tu_graph_input(g, "dy", KL_F32, rank, big);
  int l = tu_graph_input(g, "like", KL_F32, like_rank, like);
  tu_graph_output_node(g, KL_OP_KilnSumTo, 2, (int[]){dy, l}, 1);
  check(g, what);
}

static void test_sum_to(void **state) {
  (void)state;
  sum_to_case("SumTo [3, 5, 7, 9] -> [5, 1, 1] (all but channels)", 4, (int64_t[]){3, 5, 7, 9},
              3, (int64_t[]){5, 1, 1});
  sum_to_case("SumTo [3, 5, 7, 9] -> [9]", 4, (int64_t[]){3, 5, 7, 9}, 1, (int64_t[]){9});
  sum_to_case("SumTo [64, 10] -> [10] (a bias)", 2, (int64_t[]){64, 10}, 1, (int64_t[]){10});
  sum_to_case("SumTo [4, 12, 33] -> [12, 33]", 3, (int64_t[]){4, 12, 33}, 2, (int64_t[]){12, 33});
  sum_to_case("SumTo [3, 5, 7] -> [3, 1, 7]", 3, (int64_t[]){3, 5, 7}, 3, (int64_t[]){3, 1, 7});
  sum_to_case("SumTo [3, 5, 7] -> [3, 1, 1]", 3, (int64_t[]){3, 5, 7}, 3, (int64_t[]){3, 1, 1});
  sum_to_case("SumTo [3, 5, 7] -> [] (everything)", 3, (int64_t[]){3, 5, 7}, 0, NULL);
  sum_to_case("SumTo [3, 5] -> [3, 5] (nothing)", 2, (int64_t[]){3, 5}, 2, (int64_t[]){3, 5});
  sum_to_case("SumTo [2, 3, 4, 5] -> [3, 1, 5] (more runs)", 4, (int64_t[]){2, 3, 4, 5}, 3,
              (int64_t[]){3, 1, 5});
}

static void reduce_grad_case(const char *what, int rank, const int64_t *x, int dy_rank,
                             const int64_t *dy_dims, int n_axes, const int64_t *axes,
                             int keepdims, int mean) {
  kl_graph *g = kl_graph_new();
  int dy = tu_graph_input(g, "dy", KL_F32, dy_rank, dy_dims);
  int xl = tu_graph_input(g, "x", KL_F32, rank, x);
  int n = tu_graph_output_node(g, KL_OP_KilnReduceGrad, 2, (int[]){dy, xl}, 1);
  tu_node_ints(g, n, "axes", n_axes, axes);
  assert_int_equal(kl_node_set_int(g, n, "keepdims", keepdims, NULL), KILN_OK);
  assert_int_equal(kl_node_set_int(g, n, "mean", mean, NULL), KILN_OK);
  check(g, what);
}

static void test_reduce_grad(void **state) {
  (void)state;
  int64_t x[4] = {3, 5, 7, 9};
  reduce_grad_case("ReduceGrad mean over H, W (global pooling)", 4, x, 4,
                   (int64_t[]){3, 5, 1, 1}, 2, (int64_t[]){2, 3}, 1, 1);
  reduce_grad_case("ReduceGrad sum over all but channels", 4, x, 1, (int64_t[]){5}, 3,
                   (int64_t[]){0, 2, 3}, 0, 0);
  reduce_grad_case("ReduceGrad mean over the sequence", 3, (int64_t[]){4, 12, 33}, 2,
                   (int64_t[]){4, 33}, 1, (int64_t[]){1}, 0, 1);
  reduce_grad_case("ReduceGrad mean over the last axis", 3, (int64_t[]){4, 12, 33}, 3,
                   (int64_t[]){4, 12, 1}, 1, (int64_t[]){-1}, 1, 1);
  reduce_grad_case("ReduceGrad over everything", 3, (int64_t[]){4, 12, 33}, 0, NULL, 0, NULL,
                   0, 1);
  reduce_grad_case("ReduceGrad over the batch", 2, (int64_t[]){64, 10}, 1, (int64_t[]){10}, 1,
                   (int64_t[]){0}, 0, 0);
  reduce_grad_case("ReduceGrad, more runs", 4, x, 2, (int64_t[]){5, 9}, 2,
                   (int64_t[]){0, 2}, 0, 1);
}

/* ---- bf16 training: ConvGradX and ConvGradW in bf16, the weights' Cast ---- */

/* Precision bf16 (a bf16 training step on an AMX CPU, or precision "bf16" on one with
 * AVX512-BF16): the convolution gradients read dY and W (or X) as bf16, sum in float32.
 * Inputs drawn as bf16 values, so that the conversion is exact and any difference from
 * the reference is float32 summation order: the same tolerance as float32. The 2-D
 * convolutions without groups (ResNet's) must run a bf16 implementation; the others may
 * stay float32 where oneDNN 2.6 has no bf16 kernel, never on a reference one. Where
 * this level (or a build without oneDNN) has no bf16 kernels, the session must be
 * refused with a message naming the precision instead. */
static void test_conv_grad_bf16(void **state) {
  (void)state;
  kl_err e = {0};
  if (kl_cpu_bf16_check(&e) != KILN_OK) { /* no bf16 here: refused, saying why */
    kiln_model *m = tu_model_of(conv_grad_graph(&conv_cases[0]), 0);
    kiln_session *s;
    kiln_status st = tu_session_try(m, false, 1, "bf16", &s);
    tu_assert_status(st, KILN_ERR_UNSUPPORTED, kiln_session_error(s), "option 'precision': bf16");
    kiln_session_free(s);
    kiln_model_free(m);
    return;
  }
  for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
    const conv_case *c = &conv_cases[i];
    kiln_model *m = tu_model_of(conv_grad_graph(c), 0);
    float *bufs[3];
    for (int k = 0; k < 3; k++) {
      int64_t n;
      bufs[k] = input_buf(m, k, false, &n);
      for (int64_t j = 0; j < n; j++) bufs[k][j] = kl_bf16_to_f32(kl_f32_to_bf16(bufs[k][j]));
    }
    kiln_session *ref = tu_session(m, true, 1), *fast = NULL;
    if (tu_session_try(m, false, 1, "bf16", &fast) != KILN_OK)
      fail_msg("%s: %s", c->what, kiln_session_error(fast));
    int64_t n_want, n_got;
    float *want = tu_run_f32(ref, m, bufs, &n_want), *got = tu_run_f32(fast, m, bufs, &n_got);
    assert_int_equal(n_got, n_want);
    for (int64_t k = 0; k < n_want; k++)
      if (!(fabs((double)got[k] - want[k]) <= ATOL + RTOL * fabs((double)want[k])))
        fail_msg("%s, bf16: element %lld of %lld is %.8g, the reference %.8g", c->what,
                 (long long)k, (long long)n_want, (double)got[k], (double)want[k]);
    bool dense_2d = c->rank == 4 && c->group == 1;
    for (int k = 0; k < m->g->n_nodes; k++) {
      const char *impl = kl_session_kernel_impl(fast, k), *slow = kl_session_slow_path(fast, k);
      bool bf16 = impl && strstr(impl, " bf16");
      if (slow || (dense_2d && !bf16))
        fail_msg("%s: node %d ran on '%s'%s%s at %s, precision bf16", c->what, k,
                 impl ? impl : "-", slow ? ", " : "", slow ? slow : "",
                 kl_isa_level_name(kl_isa_level()));
    }
    free(want);
    free(got);
    for (int k = 0; k < 3; k++) free(bufs[k]);
    kiln_session_free(ref);
    kiln_session_free(fast);
    kiln_model_free(m);
  }
}

/* Cast of bf16 to float32 (the weights of a bf16 training step, every step): kiln's
 * kernel, bit for bit the reference's, over every one of the 65536 bf16 patterns
 * (zeros, subnormals, Inf, NaN payloads: a signaling NaN comes out quiet, as a
 * conversion through double makes it) and 7 more (a partial block). */
static void test_cast_bf16(void **state) {
  (void)state;
  int64_t n = 65536 + 7;
  kl_graph *g = kl_graph_new();
  int x = tu_graph_input(g, "x", KL_BF16, 1, &n);
  int cast = tu_graph_output_node(g, KL_OP_Cast, 1, &x, 1);
  assert_int_equal(kl_node_set_int(g, cast, "to", KL_F32, NULL), KILN_OK);
  kiln_model *m = tu_model_of(g, 0);
  uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
  assert_non_null(h);
  for (int64_t i = 0; i < n; i++) h[i] = (uint16_t)(i * 40503u);
  uint32_t *out[2];
  for (int r = 0; r < 2; r++) {
    kiln_session *s = tu_session(m, r == 0, 2);
    assert_int_equal(kiln_session_set_input(s, "x", KILN_DTYPE_BFLOAT16, 1, &n, h,
                                            sizeof(uint16_t) * (size_t)n),
                     KILN_OK);
    if (kiln_session_run(s) != KILN_OK) fail_msg("%s", kiln_session_error(s));
    if (r == 1 && strcmp(kl_session_kernel_name(s, 0), "ref") == 0)
      fail_msg("Cast bf16 -> float32 ran on the reference kernel at %s",
               kl_isa_level_name(kl_isa_level()));
    kiln_tensor_info info;
    const void *data;
    assert_int_equal(kiln_session_get_output(s, 0, &info, &data), KILN_OK);
    out[r] = malloc(sizeof(uint32_t) * (size_t)n);
    assert_non_null(out[r]);
    memcpy(out[r], data, sizeof(uint32_t) * (size_t)n);
    kiln_session_free(s);
  }
  for (int64_t i = 0; i < n; i++) {
    bool nan = (h[i] & 0x7fffu) > 0x7f80u; /* signaling ones made quiet */
    if (out[1][i] != out[0][i] || out[1][i] != ((uint32_t)h[i] << 16 | (nan ? 0x400000u : 0)))
      fail_msg("bf16 0x%04x: 0x%08x, the reference 0x%08x", h[i], out[1][i], out[0][i]);
  }
  free(out[0]);
  free(out[1]);
  free(h);
  kiln_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_grad),
      cmocka_unit_test(test_pool_grad),
      cmocka_unit_test(test_max_pool_grad_ties),
      cmocka_unit_test(test_max_pool_grad_nan),
      cmocka_unit_test(test_batchnorm),
      cmocka_unit_test_teardown(test_batchnorm_channels_last, no_hook),
      cmocka_unit_test_teardown(test_pool_grads_channels_last, no_hook),
      cmocka_unit_test_teardown(test_grad_w_forms, no_hook),
      cmocka_unit_test(test_unary_grad),
      cmocka_unit_test(test_sum_to),
      cmocka_unit_test(test_reduce_grad),
      cmocka_unit_test(test_softmax_layernorm_grad),
      cmocka_unit_test(test_conv_grad_bf16),
      cmocka_unit_test(test_cast_bf16),
      cmocka_unit_test(test_batchnorm_grad_cl_empty),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
