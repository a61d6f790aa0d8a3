/* The fast kernels of the gradient ops against their reference kernels (the oracle,
 * in double), on random non-zero float32 data at awkward sizes: ConvGradX and
 * ConvGradW on oneDNN (dnnl_grad.c: strides with pads, dilations, groups, depthwise,
 * 1-D and 3-D, auto_pad, batch 1 and 3, channels not a multiple of 8), and kiln's own
 * kernels (isa/run_grad.c) for MaxPoolGrad, AveragePoolGrad, BatchNormTrain,
 * BatchNormGrad, UnaryGrad, SumTo and ReduceGrad. Each graph runs in a reference
 * session and a fast one (twice: the second run from the primitive cache), with 1 and
 * 2 threads, with oneDNN's workspace filled with NaNs before every node; every output
 * must match within float32 tolerance, and every node must have run on its fast
 * kernel (a fast path silently falling back to the reference is a bug), which at the
 * generic ISA level is kiln's generic kernel and, for the convolutions, the reference
 * (oneDNN has no generic level). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
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

static uint32_t rng = 4242;

static int input(kl_graph *g, const char *name, int rank, const int64_t *dims) {
  int v = kl_graph_add_value(g, name, NULL);
  assert_true(v >= 0);
  g->values[v].type.dtype = KL_F32;
  kl_type_set_shape(&g->values[v].type, rank, dims);
  assert_int_equal(kl_graph_add_input(g, v, NULL), KILN_OK);
  return v;
}

/* A node of op over in[] with n_out outputs, each a graph output; returns the node. */
static int node_n(kl_graph *g, kl_op o, int n_in, const int *in, int n_out) {
  int y[3];
  for (int k = 0; k < n_out; k++) {
    y[k] = kl_graph_add_value(g, NULL, NULL);
    assert_true(y[k] >= 0);
  }
  int n = kl_graph_add_node(g, o, NULL, n_in, in, n_out, y, NULL);
  assert_true(n >= 0);
  for (int k = 0; k < n_out; k++) assert_int_equal(kl_graph_add_output(g, y[k], NULL), KILN_OK);
  return n;
}

static void ints_attr(kl_graph *g, int n, const char *name, int count, const int64_t *v) {
  if (count > 0) assert_int_equal(kl_node_set_ints(g, n, name, v, count, NULL), KILN_OK);
}

/* ---- running ---- */

static kiln_session *session(const kiln_model *m, bool reference, int threads) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "reference", reference), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "threads", threads), KILN_OK);
  kiln_session *s = NULL;
  if (kiln_session_create(m, o, &s) != KILN_OK) fail_msg("session: %s", kiln_session_error(s));
  kiln_options_free(o);
  return s;
}

/* Every output of s after a run on bufs, one after another (a copy). */
static float *run(kiln_session *s, const kiln_model *m, float **bufs, int64_t *count) {
  for (int i = 0; i < kiln_model_input_count(m); i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    int64_t n = 1;
    for (int d = 0; d < info.rank; d++) n *= info.dims[d];
    assert_int_equal(kiln_session_set_input(s, info.name, KILN_DTYPE_FLOAT32, info.rank,
                                            info.dims, bufs[i], sizeof(float) * (size_t)n),
                     KILN_OK);
  }
  if (kiln_session_run(s) != KILN_OK) fail_msg("run: %s", kiln_session_error(s));
  float *all = NULL;
  *count = 0;
  for (int k = 0; k < kiln_model_output_count(m); k++) {
    kiln_tensor_info info;
    const void *data;
    assert_int_equal(kiln_session_get_output(s, k, &info, &data), KILN_OK);
    int64_t n = 1;
    for (int d = 0; d < info.rank; d++) n *= info.dims[d];
    all = realloc(all, sizeof(float) * (size_t)(*count + n + 1));
    assert_non_null(all);
    memcpy(all + *count, data, sizeof(float) * (size_t)n);
    *count += n;
  }
  return all;
}

/* Whether node n must run on a fast kernel here: kiln's own at every level; oneDNN's
 * convolution gradients where oneDNN runs (not at the generic level). */
static bool fast_expected(const kl_node *n) {
  if (n->op == KL_OP_KilnConvGradX || n->op == KL_OP_KilnConvGradW)
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

/* Exports g (freed), runs it in a reference session and in fast sessions of 1 and 2
 * threads, twice each; the outputs must agree, and every node run fast. positive:
 * bit i makes input i's values positive. */
static void check_pos(kl_graph *g, const char *what, unsigned positive) {
  kiln_model *m = tu_model_of(g, 0);
  int n_in = kiln_model_input_count(m);
  float **bufs = calloc((size_t)n_in + 1, sizeof *bufs);
  assert_non_null(bufs);
  for (int i = 0; i < n_in; i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    int64_t n = 1;
    for (int d = 0; d < info.rank; d++) n *= info.dims[d];
    bufs[i] = malloc(sizeof(float) * (size_t)(n ? n : 1));
    assert_non_null(bufs[i]);
    fill(bufs[i], n, positive >> i & 1);
  }
  kiln_session *ref = session(m, true, 1);
  int64_t n_want, n_got;
  float *want = run(ref, m, bufs, &n_want);
  for (int threads = 1; threads <= 2; threads++) {
    kiln_session *fast = session(m, false, threads);
    kl_session_poison_workspace(fast);
    for (int r = 0; r < 2; r++) {
      float *got = run(fast, m, bufs, &n_got);
      for (int i = 0; i < m->g->n_nodes; i++) {
        const char *k = kl_session_kernel_name(fast, i), *slow = kl_session_slow_path(fast, i);
        if (fast_expected(&m->g->nodes[i]) && (strcmp(k, "ref") == 0 || slow))
          fail_msg("%s: node %d (%s) ran on '%s'%s%s at %s", what, i,
                   kl_op_get(m->g->nodes[i].op)->name, k, slow ? ", " : "", slow ? slow : "",
                   kl_isa_level_name(kl_isa_level()));
      }
      assert_int_equal(n_got, n_want);
      for (int64_t k = 0; k < n_want; k++)
        if (!(fabs((double)got[k] - want[k]) <= ATOL + RTOL * fabs((double)want[k])))
          fail_msg("%s (%d threads, run %d): element %lld of %lld is %.8g, the reference %.8g",
                   what, threads, r + 1, (long long)k, (long long)n_want, (double)got[k],
                   (double)want[k]);
      free(got);
    }
    kiln_session_free(fast);
  }
  free(want);
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
  ints_attr(g, n, "strides", sp, c->strides);
  ints_attr(g, n, "dilations", sp, c->dilations);
  if (c->auto_pad)
    assert_int_equal(kl_node_set_string(g, n, "auto_pad", c->auto_pad, NULL), KILN_OK);
  else ints_attr(g, n, "pads", 2 * sp, c->pads);
  assert_int_equal(kl_node_set_int(g, n, "group", c->group, NULL), KILN_OK);
}

static void test_conv_grad(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
    const conv_case *c = &conv_cases[i];
    int64_t y[5] = {c->x[0], c->w[0]};
    for (int d = 0; d < c->rank - 2; d++) y[2 + d] = conv_out(c, d);
    kl_graph *g = kl_graph_new();
    int x = input(g, "x", c->rank, c->x), w = input(g, "w", c->rank, c->w);
    int dy = input(g, "dy", c->rank, y);
    conv_attrs(g, node_n(g, KL_OP_KilnConvGradX, 3, (int[]){dy, w, x}, 1), c);
    conv_attrs(g, node_n(g, KL_OP_KilnConvGradW, 3, (int[]){x, dy, w}, 1), c);
    check(g, c->what);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_grad),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
