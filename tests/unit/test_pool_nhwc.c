/* kiln's channels-last pooling (isa/run_pool.c, kl_run_pool_nhwc) against the reference
 * pooling kernels, at every ISA level this CPU has: MaxPool, AveragePool (with and
 * without the padding counted), the global pools, 1-D and 2-D, with strides, pads,
 * dilations and ceil_mode, on random data at awkward sizes (channel counts that are
 * not multiples of the vector width, odd extents, batch 2, windows of more than the
 * 64 taps the driver hands the primitive at once). The input is transposed
 * to [N, S..., C] for the kernel and its output back for the comparison. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef struct pool_case {
  const char *what;
  kl_op op;
  int rank;
  int64_t x[4];
  int64_t kernel[2], strides[2], dilations[2], pads[4];
  int ceil, include_pad;
} pool_case;

static const pool_case cases[] = {
    {"max 3x3 stride 2 ceil", KL_OP_MaxPool, 4, {2, 17, 11, 9}, {3, 3}, {2, 2}, {1, 1},
     {0, 0, 0, 0}, 1, 0},
    {"max 3x3 pad 1", KL_OP_MaxPool, 4, {1, 33, 7, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 0, 0},
    {"max 2x3 dilation 2 uneven pads", KL_OP_MaxPool, 4, {2, 7, 13, 10}, {2, 3}, {1, 2},
     {2, 2}, {1, 0, 0, 2}, 0, 0},
    {"max 1 channel", KL_OP_MaxPool, 4, {1, 1, 9, 9}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}, 0, 0},
    {"avg 3x3 stride 2 pad 1", KL_OP_AveragePool, 4, {2, 17, 11, 9}, {3, 3}, {2, 2}, {1, 1},
     {1, 1, 1, 1}, 0, 0},
    {"avg pad counted", KL_OP_AveragePool, 4, {1, 9, 8, 7}, {3, 2}, {1, 2}, {1, 1},
     {1, 0, 1, 1}, 0, 1},
    {"avg 5x5 stride 3", KL_OP_AveragePool, 4, {1, 40, 14, 14}, {5, 5}, {3, 3}, {1, 1},
     {0, 0, 0, 0}, 0, 0},
    {"max 1-D stride 2 ceil", KL_OP_MaxPool, 3, {2, 19, 15}, {3}, {2}, {1}, {1, 0}, 1, 0},
    {"avg 1-D pad", KL_OP_AveragePool, 3, {1, 12, 10}, {4}, {1}, {1}, {2, 1}, 0, 0},
    {"global average", KL_OP_GlobalAveragePool, 4, {2, 23, 7, 5}, {0}, {0}, {0}, {0}, 0, 0},
    {"global max", KL_OP_GlobalMaxPool, 4, {1, 65, 6, 9}, {0}, {0}, {0}, {0}, 0, 0},
    {"global average 1-D", KL_OP_GlobalAveragePool, 3, {2, 9, 17}, {0}, {0}, {0}, {0}, 0, 0},
    /* more taps than the driver hands over at once (64): in parts */
    {"global average 9x9", KL_OP_GlobalAveragePool, 4, {1, 70, 9, 9}, {0}, {0}, {0}, {0}, 0, 0},
    {"global max 12x11", KL_OP_GlobalMaxPool, 4, {2, 19, 12, 11}, {0}, {0}, {0}, {0}, 0, 0},
    {"avg 9x8 window", KL_OP_AveragePool, 4, {1, 5, 10, 10}, {9, 8}, {1, 2}, {1, 1},
     {0, 0, 0, 0}, 0, 0},
    /* one image on 2 threads: a global pool's positions shared out in parts (1800 and
     * 667 positions), and one output row's channels in chunks (80 + 70) */
    {"global average in parts", KL_OP_GlobalAveragePool, 4, {1, 37, 40, 45}, {0}, {0}, {0},
     {0}, 0, 0},
    {"global max in parts", KL_OP_GlobalMaxPool, 4, {1, 130, 23, 29}, {0}, {0}, {0}, {0}, 0, 0},
    {"avg one output row, channels in chunks", KL_OP_AveragePool, 4, {1, 150, 5, 6}, {5, 6},
     {1, 1}, {1, 1}, {0, 0, 0, 0}, 0, 0},
    /* other strides: the pixels whose window lies inside the row as one run too */
    {"max 3x3 stride 2 pad 1 (ShuffleNet's)", KL_OP_MaxPool, 4, {2, 24, 16, 17}, {3, 3},
     {2, 2}, {1, 1}, {1, 1, 1, 1}, 0, 0},
    {"avg 3x3 stride 2 ceil pad counted", KL_OP_AveragePool, 4, {1, 21, 12, 13}, {3, 3},
     {2, 2}, {1, 1}, {1, 1, 1, 1}, 1, 1},
    /* stride 1: the pixels whose window lies inside the row go as one run */
    {"max 2x2 stride 1 ceil (HGNetV2's stem)", KL_OP_MaxPool, 4, {1, 16, 13, 13}, {2, 2},
     {1, 1}, {1, 1}, {0, 0, 1, 1}, 1, 0},
    {"avg 3x3 stride 1 dilation 2 pad counted", KL_OP_AveragePool, 4, {2, 5, 9, 11}, {3, 3},
     {1, 1}, {2, 2}, {2, 1, 2, 2}, 0, 1},
    {"max 7x10 stride 1 pad 3 (70 taps)", KL_OP_MaxPool, 4, {1, 3, 9, 14}, {7, 10}, {1, 1},
     {1, 1}, {3, 4, 3, 5}, 0, 0},
    {"avg 1-D stride 1 uneven pads", KL_OP_AveragePool, 3, {2, 21, 30}, {5}, {1}, {1},
     {3, 1}, 0, 0},
};

static uint32_t rng = 4242;

static float frand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return -3.0f + 6.0f * (float)(rng % 1000000) / 1000000.0f;
}

/* [N, C, S] <-> [N, S, C] with S the product of the spatial dims. */
static void to_nhwc(const float *x, float *y, int64_t n, int64_t c, int64_t s) {
  for (int64_t b = 0; b < n; b++)
    for (int64_t k = 0; k < c; k++)
      for (int64_t p = 0; p < s; p++) y[(b * s + p) * c + k] = x[(b * c + k) * s + p];
}

static void to_nchw(const float *x, float *y, int64_t n, int64_t c, int64_t s) {
  for (int64_t b = 0; b < n; b++)
    for (int64_t k = 0; k < c; k++)
      for (int64_t p = 0; p < s; p++) y[(b * c + k) * s + p] = x[(b * s + p) * c + k];
}

static int64_t spatial(const kl_tensor *t) {
  int64_t s = 1;
  for (int d = 2; d < t->rank; d++) s *= t->dims[d];
  return s;
}

static void check_case(const pool_case *pc) {
  kl_err e = {0};
  kl_graph *g = kl_graph_new();
  int in = kl_graph_add_value(g, NULL, &e), out = kl_graph_add_value(g, NULL, &e);
  int n = kl_graph_add_node(g, pc->op, pc->what, 1, &in, 1, &out, &e);
  assert_true(n >= 0);
  int sp = pc->rank - 2;
  bool global = pc->op == KL_OP_GlobalAveragePool || pc->op == KL_OP_GlobalMaxPool;
  if (!global) {
    assert_int_equal(kl_node_set_ints(g, n, "kernel_shape", pc->kernel, sp, &e), KILN_OK);
    assert_int_equal(kl_node_set_ints(g, n, "strides", pc->strides, sp, &e), KILN_OK);
    assert_int_equal(kl_node_set_ints(g, n, "dilations", pc->dilations, sp, &e), KILN_OK);
    int64_t pads[4];
    for (int i = 0; i < sp; i++) pads[i] = pc->pads[i], pads[sp + i] = pc->pads[sp + i];
    assert_int_equal(kl_node_set_ints(g, n, "pads", pads, 2 * sp, &e), KILN_OK);
    assert_int_equal(kl_node_set_int(g, n, "ceil_mode", pc->ceil, &e), KILN_OK);
    assert_int_equal(kl_node_set_int(g, n, "count_include_pad", pc->include_pad, &e), KILN_OK);
  }
  const kl_node *node = &g->nodes[n];
  kl_tensor x = {.dtype = KL_F32, .rank = pc->rank};
  memcpy(x.dims, pc->x, sizeof(int64_t) * (size_t)pc->rank);
  int64_t nx = kl_tensor_numel(&x);
  float *xd = malloc(sizeof(float) * (size_t)nx), *xn = malloc(sizeof(float) * (size_t)nx);
  for (int64_t i = 0; i < nx; i++) xd[i] = frand();
  x.data = xd;
  /* the output's shape from shape inference, as the runtime gets it */
  kl_type ti = {.dtype = KL_F32, .rank = pc->rank}, to;
  kl_type_set_shape(&ti, pc->rank, pc->x);
  const kl_type *tin[1] = {&ti};
  const void *tdata[1] = {NULL};
  kl_infer_ctx ic = {g, node, 1, 1, tin, tdata, &to, &e, false};
  assert_int_equal(kl_op_get(pc->op)->infer(&ic), KILN_OK);
  kl_tensor want = {.dtype = KL_F32, .rank = to.rank}, got = want;
  for (int d = 0; d < to.rank; d++) want.dims[d] = got.dims[d] = to.dims[d].size;
  int64_t ny = kl_tensor_numel(&want);
  want.data = malloc(sizeof(float) * (size_t)ny);
  got.data = malloc(sizeof(float) * (size_t)ny);
  float *yn = malloc(sizeof(float) * (size_t)ny);
  const kl_tensor *ins[1] = {&x};
  kl_tensor *outs[1] = {&want};
  kl_kernel_ctx c = {node, 1, 1, ins, outs, &e, 1, NULL, 0};
  assert_int_equal(kl_op_get(pc->op)->ref(&c), KILN_OK);
  to_nhwc(xd, xn, x.dims[0], x.dims[1], spatial(&x));
  outs[0] = &got;
  kl_isa top = kl_isa_supported(kl_isa_features());
  for (int level = KL_ISA_GENERIC; level <= (int)top; level++) {
    for (int threads = 1; threads <= 2; threads++) {
      c.threads = threads;
      memset(yn, 0xff, sizeof(float) * (size_t)ny); /* NaN: every element must be written */
      assert_int_equal(kl_run_pool_nhwc(&c, kl_cpu_isa_fns((kl_isa)level), xn, yn), KILN_OK);
      to_nchw(yn, got.data, got.dims[0], got.dims[1], spatial(&got));
      const float *w = want.data, *y = got.data;
      for (int64_t i = 0; i < ny; i++)
        if (!(fabsf(y[i] - w[i]) <= 1e-5f * (1 + fabsf(w[i]))))
          fail_msg("%s at %s, %d thread(s): element %lld is %.8g, the reference %.8g",
                   pc->what, kl_isa_level_name((kl_isa)level), threads, (long long)i,
                   (double)y[i], (double)w[i]);
    }
  }
  free(xd);
  free(xn);
  free(yn);
  free(want.data);
  free(got.data);
  kl_graph_free(g);
}

static void test_pool_nhwc(void **state) {
  (void)state;
  for (int i = 0; i < TU_LEN(cases); i++) check_case(&cases[i]);
}

/* A global average over 112x112 pixels of positive values, channels last: each level
 * within 1.2e-6 of the double means, relatively (7.2e-7 seen). The 64-tap parts the
 * driver hands over are summed apart; added one after another into the running sums
 * (the primitives before), 12544 additions in one chain drifted to 2.4e-6. */
static void test_pool_nhwc_long_window(void **state) {
  (void)state;
  kl_err e = {0};
  kl_graph *g = kl_graph_new();
  int in = kl_graph_add_value(g, NULL, &e), out = kl_graph_add_value(g, NULL, &e);
  int n = kl_graph_add_node(g, KL_OP_GlobalAveragePool, "gap", 1, &in, 1, &out, &e);
  const int64_t c = 37, s = 112 * 112;
  float *x = malloc(sizeof(float) * (size_t)(c * s)), y[37];
  double want[37] = {0};
  assert_non_null(x);
  for (int64_t i = 0; i < c * s; i++) { /* [1, 112, 112, 37] in memory */
    x[i] = 2.5f + frand() / 2;
    want[i % c] += x[i];
  }
  kl_tensor xt = {.dtype = KL_F32, .rank = 4, .dims = {1, c, 112, 112}, .data = x};
  kl_tensor yt = {.dtype = KL_F32, .rank = 4, .dims = {1, c, 1, 1}, .data = y};
  const kl_tensor *ins[1] = {&xt};
  kl_tensor *outs[1] = {&yt};
  kl_kernel_ctx ctx = {&g->nodes[n], 1, 1, ins, outs, &e, 1, NULL, 0};
  kl_isa top = kl_isa_supported(kl_isa_features());
  for (int level = KL_ISA_GENERIC; level <= (int)top; level++) {
    assert_int_equal(kl_run_pool_nhwc(&ctx, kl_cpu_isa_fns((kl_isa)level), x, y), KILN_OK);
    for (int64_t k = 0; k < c; k++) {
      double m = want[k] / (double)s, rel = fabs(y[k] - m) / m;
      if (rel > 1.2e-6)
        fail_msg("%s: channel %lld's mean is %.9g, %.3g from the double mean %.9g",
                 kl_isa_level_name((kl_isa)level), (long long)k, (double)y[k], rel, m);
    }
  }
  free(x);
  kl_graph_free(g);
}

/* Ranks other than 3 and 4 are refused, nothing written. */
static void test_pool_nhwc_ranks(void **state) {
  (void)state;
  kl_err e = {0};
  kl_graph *g = kl_graph_new();
  int in = kl_graph_add_value(g, NULL, &e), out = kl_graph_add_value(g, NULL, &e);
  int n = kl_graph_add_node(g, KL_OP_GlobalMaxPool, "gmp", 1, &in, 1, &out, &e);
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[2] = {-1, -1};
  kl_tensor xt = {.dtype = KL_F32, .rank = 5, .dims = {1, 2, 2, 2, 1}, .data = x};
  kl_tensor yt = {.dtype = KL_F32, .rank = 5, .dims = {1, 2, 1, 1, 1}, .data = y};
  const kl_tensor *ins[1] = {&xt};
  kl_tensor *outs[1] = {&yt};
  kl_kernel_ctx c = {&g->nodes[n], 1, 1, ins, outs, &e, 1, NULL, 0};
  assert_int_equal(kl_run_pool_nhwc(&c, kl_cpu_isa_fns(KL_ISA_GENERIC), x, y),
                   KILN_ERR_UNSUPPORTED);
  assert_true(y[0] == -1 && y[1] == -1);
  kl_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pool_nhwc),
      cmocka_unit_test(test_pool_nhwc_ranks),
      cmocka_unit_test(test_pool_nhwc_long_window),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
