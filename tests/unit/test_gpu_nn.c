/* The GPU backend's "nn" kernels (src/backends/gpu/ops_nn.c, kernels/nn.cl) against
 * the reference kernels on an OpenCL device (PoCL on the CPU in CI), on random data at
 * awkward sizes: Conv and FusedConv (1-D to 3-D, groups, depthwise, strides, dilations,
 * asymmetric pads, every auto_pad, every fused activation with bias and Sum), Gemm
 * (every transpose, every shape of C) and MatMul (ranks 1 to 4, broadcast batches)
 * with their fused forms, at sizes that are not multiples of the 16 x 16 tiles,
 * MaxPool and AveragePool (ceil_mode, count_include_pad, dilations), the global pools,
 * BatchNormalization, empty tensors, the nodes that must stay on the CPU, and a small
 * network optimized at O2 that runs wholly on the device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/gpu/opencl.h"
#include "testutil.h"

/* Inputs are uniform in [-2, 2]; sums of up to ~300 products stay within this (the
 * largest cases say why where they need more). */
#define TOL TU_TOL(1e-4, 1e-4)

static uint32_t rng = 99;

/* A float32 graph input (weights too: tu_gpu_check fills every input at random). */
static int input(kl_graph *g, int rank, const int64_t *dims) {
  char name[16];
  snprintf(name, sizeof name, "in%d", g->n_values);
  return tu_graph_input(g, name, KL_F32, rank, dims);
}

/* A float32 constant uniform in [lo, hi]. */
static int cst(kl_graph *g, int rank, const int64_t *dims, float lo, float hi) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  float *v = tu_rand_vec(&rng, (size_t)n, lo, hi);
  int id = tu_graph_const(g, NULL, KL_F32, rank, dims, v);
  free(v);
  return id;
}

/* A node of op over in[] (KL_ABSENT allowed) whose output is a graph output. */
static int out_node(kl_graph *g, kl_op op, int n_in, const int *in) {
  int y = tu_graph_value(g, NULL);
  int n = tu_graph_node(g, op, NULL, n_in, in, 1, &y);
  assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
  return n;
}

static void set_ints(kl_graph *g, int n, const char *name, int count, const int64_t *v) {
  if (count > 0) assert_int_equal(kl_node_set_ints(g, n, name, v, count, NULL), KILN_OK);
}

typedef struct act_case {
  const char *name;
  int n;
  float p[2];
} act_case;

/* Every activation kiln's fused ops carry (ir/fused.h). */
static const act_case acts[] = {
    {"Relu", 0, {0}},      {"LeakyRelu", 1, {0.1f}}, {"Clip", 2, {-0.5f, 0.7f}},
    {"Sigmoid", 0, {0}},   {"Tanh", 0, {0}},         {"HardSigmoid", 2, {0.2f, 0.5f}},
    {"HardSwish", 0, {0}}, {"Gelu", 0, {0}},         {"GeluTanh", 0, {0}},
    {"Silu", 0, {0}},      {"Mish", 0, {0}},         {"Elu", 1, {0.8f}},
};
#define N_ACTS TU_LEN(acts)

static void set_act(kl_graph *g, int n, const act_case *a) {
  assert_int_equal(kl_node_set_string(g, n, "activation", a->name, NULL), KILN_OK);
  if (a->n)
    assert_int_equal(kl_node_set_floats(g, n, "activation_params", a->p, a->n, NULL), KILN_OK);
}

/* ---- convolution ---- */

typedef struct conv_case {
  const char *what;
  int rank;
  int64_t x[5], w[5];
  int64_t group;
  int64_t strides[3], dilations[3], pads[6]; /* strides, dilations: {0}: the defaults */
  const char *auto_pad;                      /* NULL: explicit pads */
  bool bias;
} conv_case;

static const conv_case conv_cases[] = {
    {"3x3 pad 1 batch 2, 3 -> 5 channels, 9x7", 4, {2, 3, 9, 7}, {5, 3, 3, 3}, 1, {0}, {0},
     {1, 1, 1, 1}, NULL, true},
    {"stride 2 dilation 2 asymmetric pads", 4, {1, 3, 11, 10}, {4, 3, 3, 2}, 1, {2, 2}, {2, 2},
     {0, 1, 2, 1}, NULL, true},
    {"groups 2", 4, {2, 4, 8, 9}, {6, 2, 3, 3}, 2, {0}, {0}, {1, 1, 1, 1}, NULL, false},
    {"depthwise stride 2", 4, {1, 7, 9, 8}, {7, 1, 3, 3}, 7, {2, 2}, {0}, {1, 1, 1, 1}, NULL,
     true},
    {"depthwise multiplier 2 asymmetric pads", 4, {1, 5, 6, 7}, {10, 1, 3, 3}, 5, {0}, {0},
     {0, 1, 1, 0}, NULL, true},
    {"1x1, 17 -> 9 channels", 4, {2, 17, 5, 6}, {9, 17, 1, 1}, 1, {0}, {0}, {0}, NULL, true},
    {"1x1 stride 2", 4, {1, 6, 7, 9}, {5, 6, 1, 1}, 1, {2, 2}, {0}, {0}, NULL, false},
    {"SAME_UPPER stride 2", 4, {1, 3, 7, 8}, {4, 3, 3, 3}, 1, {2, 2}, {0}, {0}, "SAME_UPPER",
     true},
    {"SAME_LOWER even kernel", 4, {2, 3, 7, 6}, {4, 3, 4, 2}, 1, {0}, {0}, {0}, "SAME_LOWER",
     true},
    {"VALID strides 2, 1", 4, {1, 2, 8, 8}, {3, 2, 3, 3}, 1, {2, 1}, {0}, {0}, "VALID", true},
    {"kernel over the padding only", 4, {1, 2, 3, 3}, {3, 2, 5, 5}, 1, {0}, {0},
     {2, 2, 2, 2}, NULL, true},
    {"strides past the kernel", 4, {1, 3, 10, 11}, {2, 3, 2, 2}, 1, {3, 4}, {0}, {0}, NULL,
     true},
    {"1-D stride 2", 3, {2, 4, 11}, {3, 4, 3}, 1, {2}, {0}, {1, 0}, NULL, true},
    {"1-D dilation 3 groups 3", 3, {1, 6, 20}, {3, 2, 4}, 3, {0}, {3}, {2, 3}, NULL, true},
    {"3-D", 5, {1, 2, 5, 6, 4}, {4, 2, 3, 3, 3}, 1, {0}, {0}, {1, 1, 1, 1, 1, 1}, NULL, true},
    {"3-D strides, groups 2", 5, {2, 4, 5, 4, 6}, {6, 2, 2, 3, 1}, 2, {2, 1, 2}, {0},
     {0, 1, 0, 1, 0, 0}, NULL, false},
    /* at least 8 output channels per group and 8 products per output: the implicit
     * product (kl_nn_conv_gemm), its 64 x 64 tiles crossed both ways and k not a
     * multiple of its step of 16 */
    {"implicit product 24 -> 70, stride 2 dilation 2, batch 3", 4, {3, 24, 19, 17},
     {70, 24, 3, 3}, 1, {2, 1}, {2, 2}, {2, 1, 0, 2}, NULL, true},
    {"implicit product groups 2 of 16, asymmetric pads", 4, {2, 20, 10, 11}, {32, 10, 3, 3},
     2, {0}, {0}, {0, 1, 2, 1}, NULL, false},
    {"implicit product 1x1 65 -> 66 over 9x9", 4, {1, 65, 9, 9}, {66, 65, 1, 1}, 1, {0}, {0},
     {0}, NULL, true},
    {"implicit product 1-D stride 2", 3, {2, 9, 70}, {12, 9, 5}, 1, {2}, {0}, {2, 1}, NULL,
     true},
    {"implicit product 3-D", 5, {1, 4, 5, 6, 7}, {9, 4, 2, 3, 3}, 1, {0}, {0},
     {0, 1, 1, 1, 1, 0}, NULL, true},
    /* a pad of 2^29 (stride 2^28): past what the implicit product's 32-bit gather takes
     * (ops_nn.c window_fits_int), so the direct kernel */
    {"pad 2^29, 8 -> 12 channels", 4, {1, 8, 3, 3}, {12, 8, 2, 2}, 1, {1, 268435456}, {0},
     {0, 536870912, 0, 0}, NULL, true},
    {"empty batch", 4, {0, 3, 5, 5}, {4, 3, 3, 3}, 1, {0}, {0}, {1, 1, 1, 1}, NULL, true},
    {"no input channels: the bias", 4, {2, 0, 4, 4}, {3, 0, 3, 3}, 1, {0}, {0}, {1, 1, 1, 1},
     NULL, true},
};

/* Conv or FusedConv of case c over new inputs X, W (B); Sum when sum >= 0. */
static int conv_node(kl_graph *g, kl_op op, const conv_case *c, int sum) {
  int sp = c->rank - 2;
  int x = input(g, c->rank, c->x), w = input(g, c->rank, c->w);
  int b = c->bias ? input(g, 1, &c->w[0]) : KL_ABSENT;
  int n = sum >= 0 ? out_node(g, op, 4, (const int[]){x, w, b, sum})
                   : out_node(g, op, 3, (const int[]){x, w, b});
  if (c->strides[0]) set_ints(g, n, "strides", sp, c->strides);
  if (c->dilations[0]) set_ints(g, n, "dilations", sp, c->dilations);
  if (c->auto_pad)
    assert_int_equal(kl_node_set_string(g, n, "auto_pad", c->auto_pad, NULL), KILN_OK);
  else set_ints(g, n, "pads", 2 * sp, c->pads);
  if (c->group != 1) assert_int_equal(kl_node_set_int(g, n, "group", c->group, NULL), KILN_OK);
  return n;
}

static void test_conv(void **state) {
  (void)state;
  for (int i = 0; i < TU_LEN(conv_cases); i++) {
    kl_graph *g = tu_graph_new();
    conv_node(g, KL_OP_Conv, &conv_cases[i], -1);
    char what[96];
    snprintf(what, sizeof what, "Conv %s", conv_cases[i].what);
    assert_int_equal(tu_gpu_check(g, what, 0, TOL, 1, true), 1);
  }
}

/* 32 -> 40 channels, 3x3: sums of 288 products (a tile's worth of work per output),
 * with W a constant in [-0.25, 0.25] so that float's rounding over 288 terms stays well
 * inside TOL. */
static void test_conv_wide(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = input(g, 4, (const int64_t[]){1, 32, 14, 13});
  int w = cst(g, 4, (const int64_t[]){40, 32, 3, 3}, -0.25f, 0.25f);
  int b = cst(g, 1, (const int64_t[]){40}, -1, 1);
  int n = out_node(g, KL_OP_Conv, 3, (const int[]){x, w, b});
  set_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  tu_gpu_check(g, "Conv 32 -> 40 channels", 0, TOL, 1, true);
}

/* FusedConv = act(Conv + Sum): every activation with a bias and a Sum of Y's shape,
 * then Sums that broadcast, a Sum without bias, an activation without Sum. */
static void test_fused_conv(void **state) {
  (void)state;
  const conv_case *c = &conv_cases[0]; /* Y [2, 5, 9, 7] */
  for (int i = 0; i < N_ACTS; i++) {
    kl_graph *g = tu_graph_new();
    int sum = input(g, 4, (const int64_t[]){2, 5, 9, 7});
    set_act(g, conv_node(g, KL_OP_KilnFusedConv, c, sum), &acts[i]);
    char what[64];
    snprintf(what, sizeof what, "FusedConv + Sum + %s", acts[i].name);
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
  static const struct {
    const char *what;
    int rank;
    int64_t dims[4];
  } sums[] = {
      {"per channel", 4, {1, 5, 1, 1}}, {"along W", 1, {7}}, {"per image", 4, {2, 1, 9, 7}}};
  for (int i = 0; i < TU_LEN(sums); i++) {
    kl_graph *g = tu_graph_new();
    int sum = input(g, sums[i].rank, sums[i].dims);
    set_act(g, conv_node(g, KL_OP_KilnFusedConv, c, sum), &acts[1]);
    char what[64];
    snprintf(what, sizeof what, "FusedConv + Sum %s", sums[i].what);
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
  kl_graph *gp = tu_graph_new(); /* the implicit product's epilogue: bias, Sum, Silu */
  set_act(gp, conv_node(gp, KL_OP_KilnFusedConv, &conv_cases[16],
                        input(gp, 4, (const int64_t[]){3, 70, 9, 16})), &acts[9]);
  tu_gpu_check(gp, "FusedConv (implicit product) + Sum + Silu", 0, TOL, 1, true);
  kl_graph *g = tu_graph_new(); /* depthwise, no bias, Sum */
  const conv_case *dw = &conv_cases[3]; /* Y [1, 7, 5, 4] */
  conv_node(g, KL_OP_KilnFusedConv, dw, input(g, 4, (const int64_t[]){1, 7, 5, 4}));
  tu_gpu_check(g, "FusedConv depthwise + Sum", 0, TOL, 1, true);
  g = tu_graph_new(); /* 1-D, an activation, no Sum */
  set_act(g, conv_node(g, KL_OP_KilnFusedConv, &conv_cases[12], -1), &acts[2]);
  tu_gpu_check(g, "FusedConv 1-D + Clip", 0, TOL, 1, true);
}

/* ---- Gemm and MatMul ---- */

static void test_gemm(void **state) {
  (void)state;
  static const struct {
    const char *what;
    int rank;
    int64_t dims[2]; /* -1: M, -2: N */
  } cs[] = {{"no C", -1, {0}},    {"C scalar", 0, {0}},      {"C [N]", 1, {-2}},
            {"C [1, N]", 2, {1, -2}}, {"C [M, 1]", 2, {-1, 1}}, {"C [M, N]", 2, {-1, -2}}};
  static const int64_t sizes[][3] = {{33, 7, 65}, {1, 65, 7}, {17, 1, 33}, {65, 33, 1}};
  int k = 0;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int ci = 0; ci < TU_LEN(cs); ci++, k++) {
        int64_t m = sizes[k % 4][0], n = sizes[k % 4][1], kk = sizes[k % 4][2];
        kl_graph *g = tu_graph_new();
        int a = input(g, 2, ta ? (const int64_t[]){kk, m} : (const int64_t[]){m, kk});
        int b = input(g, 2, tb ? (const int64_t[]){n, kk} : (const int64_t[]){kk, n});
        int64_t cd[2];
        for (int d = 0; d < 2; d++)
          cd[d] = cs[ci].dims[d] == -1 ? m : cs[ci].dims[d] == -2 ? n : cs[ci].dims[d];
        int c = cs[ci].rank >= 0 ? input(g, cs[ci].rank, cd) : KL_ABSENT;
        int node = out_node(g, KL_OP_Gemm, c == KL_ABSENT ? 2 : 3, (const int[]){a, b, c});
        assert_int_equal(kl_node_set_int(g, node, "transA", ta, NULL), KILN_OK);
        assert_int_equal(kl_node_set_int(g, node, "transB", tb, NULL), KILN_OK);
        if (k % 3 == 1) {
          assert_int_equal(kl_node_set_float(g, node, "alpha", 0.5f, NULL), KILN_OK);
          assert_int_equal(kl_node_set_float(g, node, "beta", -1.5f, NULL), KILN_OK);
        }
        char what[96];
        snprintf(what, sizeof what, "Gemm transA %d transB %d %s, M %lld N %lld K %lld", ta, tb,
                 cs[ci].what, (long long)m, (long long)n, (long long)kk);
        assert_int_equal(tu_gpu_check(g, what, 0, TOL, 1, true), 1);
      }
}

typedef struct mm_case {
  const char *what;
  int ra, rb;
  int64_t a[4], b[4];
} mm_case;

static const mm_case mm_cases[] = {
    {"[K] x [K]", 1, 1, {33}, {33}},
    {"[K] x [K, N]", 1, 2, {7}, {7, 65}},
    {"[M, K] x [K]", 2, 1, {65, 33}, {33}},
    {"[M, K] x [K, N] 33 x 65 x 7", 2, 2, {33, 65}, {65, 7}},
    {"[M, K] x [K, N] 1 x 1 x 1", 2, 2, {1, 1}, {1, 1}},
    {"[M, K] x [K, N] 65 x 17 x 33", 2, 2, {65, 17}, {17, 33}},
    {"[B, M, K] x [K, N]", 3, 2, {3, 7, 33}, {33, 65}},
    {"[S, 1, K] x [K, N]: one row per batch, folded into one product", 3, 2, {70, 1, 33},
     {33, 65}},
    {"[2, 3, M, K] x [K, N]", 4, 2, {2, 3, 5, 17}, {17, 20}},
    {"[K] x [B, K, N]", 1, 3, {33}, {2, 33, 7}},
    {"[B, M, K] x [K]", 3, 1, {2, 17, 7}, {7}},
    {"[2, 1, M, K] x [3, K, N]", 4, 3, {2, 1, 7, 33}, {3, 33, 17}},
    {"[2, 3, M, K] x [2, 3, K, N]", 4, 4, {2, 3, 17, 7}, {2, 3, 7, 33}},
    {"[1, M, K] x [4, K, N]", 3, 3, {1, 33, 16}, {4, 16, 1}},
    {"[M, K] x [2, 1, K, N]", 2, 4, {7, 65}, {2, 1, 65, 7}},
    {"K = 0: zeros", 2, 2, {5, 0}, {0, 3}},
    {"empty batch", 3, 2, {0, 4, 5}, {5, 3}},
};

static void test_matmul(void **state) {
  (void)state;
  for (int i = 0; i < TU_LEN(mm_cases); i++) {
    kl_graph *g = tu_graph_new();
    const mm_case *c = &mm_cases[i];
    out_node(g, KL_OP_MatMul, 2, (const int[]){input(g, c->ra, c->a), input(g, c->rb, c->b)});
    char what[96];
    snprintf(what, sizeof what, "MatMul %s", c->what);
    assert_int_equal(tu_gpu_check(g, what, 0, TOL, 1, true), 1);
  }
}

/* K = 300 (more than the reference's double sums and float's drift apart by 1e-4 at
 * inputs in [-2, 2]): B is a constant in [-0.1, 0.1], so Y stays near 1 in size. */
static void test_matmul_long_k(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int a = input(g, 3, (const int64_t[]){2, 31, 300});
  int b = cst(g, 2, (const int64_t[]){300, 40}, -0.1f, 0.1f);
  out_node(g, KL_OP_MatMul, 2, (const int[]){a, b});
  tu_gpu_check(g, "MatMul K = 300", 0, TOL, 1, true);
}

/* FusedGemm (A, B, C, Sum) and FusedMatMul (A, B, Bias, Sum) with every activation,
 * then Bias and Sum that broadcast, and rank-1 operands. */
static void test_fused_products(void **state) {
  (void)state;
  for (int i = 0; i < N_ACTS; i++) {
    kl_graph *g = tu_graph_new();
    int a = input(g, 2, (const int64_t[]){9, 20}), b = input(g, 2, (const int64_t[]){17, 20});
    int c = input(g, 1, (const int64_t[]){17}), s = input(g, 2, (const int64_t[]){9, 17});
    int n = out_node(g, KL_OP_KilnFusedGemm, 4, (const int[]){a, b, c, s});
    assert_int_equal(kl_node_set_int(g, n, "transB", 1, NULL), KILN_OK);
    assert_int_equal(kl_node_set_float(g, n, "alpha", 0.75f, NULL), KILN_OK);
    set_act(g, n, &acts[i]);
    char what[64];
    snprintf(what, sizeof what, "FusedGemm + C + Sum + %s", acts[i].name);
    tu_gpu_check(g, what, 0, TOL, 1, true);

    g = tu_graph_new();
    a = input(g, 3, (const int64_t[]){2, 5, 18});
    b = input(g, 2, (const int64_t[]){18, 19});
    c = input(g, 1, (const int64_t[]){19});
    s = input(g, 3, (const int64_t[]){2, 5, 19});
    set_act(g, out_node(g, KL_OP_KilnFusedMatMul, 4, (const int[]){a, b, c, s}), &acts[i]);
    snprintf(what, sizeof what, "FusedMatMul + Bias + Sum + %s", acts[i].name);
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
  static const struct {
    const char *what;
    int ra, rb, rbias, rsum;
    int64_t a[3], b[3], bias[3], sum[3];
  } cases[] = {
      {"Bias [M, 1], Sum [N]", 3, 2, 2, 1, {2, 5, 8}, {8, 6}, {5, 1}, {6}},
      {"no Bias, Sum [1, M, N]", 3, 3, -1, 3, {3, 4, 8}, {3, 8, 6}, {0}, {1, 4, 6}},
      {"[K] x [K, N], Bias scalar, Sum [N]", 1, 2, 0, 1, {8}, {8, 33}, {0}, {33}},
      {"[M, K] x [K], Bias [M], no Sum", 2, 1, 1, -1, {17, 8}, {8}, {17}, {0}},
  };
  for (int i = 0; i < TU_LEN(cases); i++) {
    kl_graph *g = tu_graph_new();
    int a = input(g, cases[i].ra, cases[i].a), b = input(g, cases[i].rb, cases[i].b);
    int bias = cases[i].rbias >= 0 ? input(g, cases[i].rbias, cases[i].bias) : KL_ABSENT;
    int sum = cases[i].rsum >= 0 ? input(g, cases[i].rsum, cases[i].sum) : KL_ABSENT;
    set_act(g, out_node(g, KL_OP_KilnFusedMatMul, 4, (const int[]){a, b, bias, sum}), &acts[0]);
    char what[96];
    snprintf(what, sizeof what, "FusedMatMul %s", cases[i].what);
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
}

/* ---- TF32 on the tensor cores (kernels/tc.cl) ---- */

/* Whether the device takes precision tf32 (NVIDIA sm_80 and later, with the embedded
 * PTX); where it does not (PoCL), session creation must say why. */
static bool device_tf32(void) {
  kl_graph *g = tu_graph_new();
  out_node(g, KL_OP_MatMul, 2,
           (const int[]){input(g, 2, (const int64_t[]){16, 16}), input(g, 2, (const int64_t[]){16, 16})});
  kiln_model *m = tu_model_of(g, 0);
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "device", "opencl"), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "precision", "tf32"), KILN_OK);
  kiln_session *s = NULL;
  kiln_status st = kiln_session_create(m, o, &s);
  if (st != KILN_OK) {
    assert_int_equal(st, KILN_ERR_UNSUPPORTED);
    if (!strstr(kiln_session_error(s), "tensor cores"))
      fail_msg("precision tf32 refused without saying why: %s", kiln_session_error(s));
  }
  kiln_session_free(s);
  kiln_options_free(o);
  kiln_model_free(m);
  return st == KILN_OK;
}

/* Convolutions for the tensor cores: at least 16 output channels a group and 16
 * products an output; row tiles of 64 and 128 crossed, columns (batch x positions) not
 * a multiple of 128, k not a multiple of the step of 16. */
static const conv_case tc_conv_cases[] = {
    {"3x3 pad 1 batch 2, 19 -> 70, 13x13", 4, {2, 19, 13, 13}, {70, 19, 3, 3}, 1, {0}, {0},
     {1, 1, 1, 1}, NULL, true},
    {"1x1 64 -> 40 over 7x7, batch 3", 4, {3, 64, 7, 7}, {40, 64, 1, 1}, 1, {0}, {0}, {0},
     NULL, true},
    {"groups 2 stride 2, 32 -> 48", 4, {2, 32, 15, 11}, {48, 16, 3, 3}, 2, {2, 2}, {0},
     {1, 1, 1, 1}, NULL, false},
    {"5x5 dilation 2 asymmetric pads, 17 -> 33", 4, {1, 17, 20, 18}, {33, 17, 5, 5}, 1, {0},
     {2, 2}, {3, 1, 2, 4}, NULL, true},
    {"130 -> 150: two row tiles of 128", 4, {1, 130, 6, 5}, {150, 130, 3, 3}, 1, {0}, {0},
     {1, 1, 1, 1}, NULL, true},
    {"1-D stride 2, 20 -> 24", 3, {2, 20, 70}, {24, 20, 5}, 1, {2}, {0}, {2, 1}, NULL, true},
    {"3-D, 8 -> 20", 5, {1, 8, 5, 6, 7}, {20, 8, 2, 3, 3}, 1, {0}, {0}, {0, 1, 1, 1, 1, 0},
     NULL, true},
    /* 1x1, stride 1, no pads, with the bias and a Sum below (a ResNet's bottleneck) */
    {"1x1 32 -> 48 over 2 x 12 x 16", 4, {2, 32, 12, 16},
     {48, 32, 1, 1}, 1, {0}, {0}, {0}, NULL, true},
    /* enough tiles of 128 x 128 (2 x 144) that a GPU of up to 144 SMs takes them, not
     * the 64-row tiles that small problems get */
    {"16 -> 200 over 2 x 96 x 96 (row tiles of 128)", 4, {2, 16, 96, 96}, {200, 16, 3, 3}, 1,
     {0}, {0}, {1, 1, 1, 1}, NULL, true},
    /* 1x1 on kl_tc_mm (Cin and positions multiples of 4): rows of 128, bias per row */
    {"1x1 20 -> 130 over 5 x 64 x 64 (products, row tiles of 128)", 4, {5, 20, 64, 64},
     {130, 20, 1, 1}, 1, {0}, {0}, {0}, NULL, true},
    {"1x1 36 -> 24 over 3 x 10 x 10, no bias (products)", 4, {3, 36, 10, 10}, {24, 36, 1, 1}, 1,
     {0}, {0}, {0}, NULL, false},
    /* W in 4-vectors (k = 180), over 13 x 13 and 12 x 12 positions */
    {"3x3 pad 1 batch 2, 20 -> 70, 13x13 (W in 4-vectors)", 4, {2, 20, 13, 13}, {70, 20, 3, 3}, 1,
     {0}, {0}, {1, 1, 1, 1}, NULL, true},
    {"3x3 pad 1 batch 3, 20 -> 40, 12x12 (W in 4-vectors)", 4, {3, 20, 12, 12}, {40, 20, 3, 3}, 1,
     {0}, {0}, {1, 1, 1, 1}, NULL, true},
    /* Cin per group a multiple of 16: kl_tc_cvt, W tap-major (tc_uses_taps); with the
     * two cases above of 16 channels a group */
    {"3x3 pad 1 batch 3, 32 -> 64, 7x7 (tap-major)", 4, {3, 32, 7, 7}, {64, 32, 3, 3}, 1, {0},
     {0}, {1, 1, 1, 1}, NULL, true},
    {"3x3 stride 2 dilation 2 asymmetric pads, 16 -> 24 (tap-major)", 4, {2, 16, 11, 10},
     {24, 16, 3, 3}, 1, {2, 2}, {2, 2}, {0, 1, 2, 1}, NULL, true},
    {"1x1 stride 2, 32 -> 40 (tap-major, one tap)", 4, {2, 32, 9, 9}, {40, 32, 1, 1}, 1, {2, 2},
     {0}, {0}, NULL, true},
    {"3-D, 16 -> 20 (tap-major)", 5, {1, 16, 4, 5, 6}, {20, 16, 2, 3, 3}, 1, {0}, {0},
     {0, 1, 1, 1, 1, 0}, NULL, true},
    {"1-D kernel 5, 48 -> 33 over 2 x 50 (tap-major)", 3, {2, 48, 50}, {33, 48, 5}, 1, {0}, {0},
     {2, 2}, NULL, false},
    {"3x3 pad 1, 160 -> 150 over 8x8 (tap-major, two row tiles)", 4, {1, 160, 8, 8},
     {150, 160, 3, 3}, 1, {0}, {0}, {1, 1, 1, 1}, NULL, true},
    {"kernel over the padding only, 16 -> 16 (tap-major)", 4, {1, 16, 3, 3}, {16, 16, 5, 5}, 1,
     {0}, {0}, {2, 2, 2, 2}, NULL, true},
    /* 144 tiles of 128 columns of 64 rows, many positions per image */
    {"3x3 pad 1, 16 -> 48 over 2 x 96 x 96 (tap-major, rows of 64)", 4, {2, 16, 96, 96},
     {48, 16, 3, 3}, 1, {0}, {0}, {1, 1, 1, 1}, NULL, true},
};

/* Whether a TF32 convolution case runs on kl_tc_cvt: Cin per group a multiple of 16 and
 * not a 1x1 convolution of stride 1 (those are products: kl_tc_mm). */
static bool tc_uses_taps(const conv_case *c) {
  int64_t taps = 1;
  for (int d = 2; d < c->rank; d++) taps *= c->w[d];
  return c->w[1] % 16 == 0 && (taps > 1 || c->strides[0] > 1);
}

static const mm_case tc_mm_cases[] = {
    {"[B, M, K] x [K, N] 3 x 70 x 33 x 150", 3, 2, {3, 70, 33}, {33, 150}},
    {"[2, 3, M, K] x [2, 1, K, N] 40 x 17 x 65", 4, 4, {2, 3, 40, 17}, {2, 1, 17, 65}},
    {"[M, K] x [K, N] 33 x 1000 x 129 (many steps of k)", 2, 2, {33, 1000}, {1000, 129}},
    {"[M, K] x [K, N] 200 x 64 x 300", 2, 2, {200, 64}, {64, 300}},
    {"[M, K] x [K, N] 300 x 64 x 18500 (row tiles of 128)", 2, 2, {300, 64}, {64, 18500}},
    /* operands in 16-byte pieces (kl_tc_mm): k not a multiple of the step of 16, rows
     * and columns past a tile, batches folded into rows and batches of their own */
    {"[M, K] x [K, N] 300 x 36 x 260 (4-vectors)", 2, 2, {300, 36}, {36, 260}},
    {"[B, M, K] x [K, N] 2 x 130 x 100 x 132 (4-vectors)", 3, 2, {2, 130, 100}, {100, 132}},
    {"[2, 3, M, K] x [2, 1, K, N] 40 x 20 x 68 (4-vectors)", 4, 4, {2, 3, 40, 20},
     {2, 1, 20, 68}},
};

/* TF32 products. With inputs rounded to TF32 the products are exact and only the order
 * of the float sums differs from the reference's (a tolerance for sums, 1000 terms at
 * most); with inputs as drawn, TF32's rounding of each operand (2^-11 relative) over
 * sums of up to ~300 products of values in [-2, 2] (TF32_TOL). Where the device has no
 * tensor cores (PoCL in CI) the test checks that precision tf32 is refused and says so. */
#define EXACT_TOL TU_TOL(1e-3, 1e-4)
#define TF32_TOL TU_TOL(0.1, 4e-3)

static void tc_check(kl_graph *(*make)(int), int arg, const char *what) {
  tu_gpu_check_at(make(arg), what, 0, EXACT_TOL, 1, true, "tf32", true);
  char inexact[200];
  snprintf(inexact, sizeof inexact, "%s, inputs not TF32", what);
  tu_gpu_check_at(make(arg), inexact, 0, TF32_TOL, 1, true, "tf32", false);
}

static kl_graph *tc_conv_graph(int i) {
  kl_graph *g = tu_graph_new();
  conv_node(g, KL_OP_Conv, &tc_conv_cases[i], -1);
  return g;
}

static kl_graph *tc_fused_conv_graph(int act) {
  kl_graph *g = tu_graph_new(); /* Y [2, 70, 13, 13] */
  int sum = input(g, 4, (const int64_t[]){2, 70, 13, 13});
  set_act(g, conv_node(g, KL_OP_KilnFusedConv, &tc_conv_cases[0], sum), &acts[act]);
  return g;
}

/* a Sum that varies along Y's last dim only ([13]: kl_tc_conv read its element 0 for
 * every output before it took such a Sum by the general broadcast) */
static kl_graph *tc_conv_row_sum_graph(int act) {
  kl_graph *g = tu_graph_new(); /* Y [2, 70, 13, 13] */
  int sum = input(g, 1, (const int64_t[]){13});
  set_act(g, conv_node(g, KL_OP_KilnFusedConv, &tc_conv_cases[0], sum), &acts[act]);
  return g;
}

/* the same with W in 4-vectors (k = 180) */
static kl_graph *tc_fused_conv4_graph(int act) {
  kl_graph *g = tu_graph_new(); /* Y [2, 70, 13, 13] */
  int sum = input(g, 4, (const int64_t[]){2, 70, 13, 13});
  set_act(g, conv_node(g, KL_OP_KilnFusedConv, &tc_conv_cases[11], sum), &acts[act]);
  return g;
}

static kl_graph *tc_fused_1x1_graph(int act) {
  kl_graph *g = tu_graph_new(); /* the 1x1 case: Y [2, 48, 12, 16] */
  int sum = input(g, 4, (const int64_t[]){2, 48, 12, 16});
  set_act(g, conv_node(g, KL_OP_KilnFusedConv, &tc_conv_cases[7], sum), &acts[act]);
  return g;
}

/* W a constant of the graph: kl_tc_cvt's tap-major copy made on the first run only */
static kl_graph *tc_taps_const_graph(int unused) {
  (void)unused;
  kl_graph *g = tu_graph_new();
  int x = input(g, 4, (const int64_t[]){2, 32, 9, 9});
  int w = cst(g, 4, (const int64_t[]){40, 32, 3, 3}, -2, 2);
  int b = cst(g, 1, (const int64_t[]){40}, -1, 1);
  int n = out_node(g, KL_OP_Conv, 3, (const int[]){x, w, b});
  set_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  return g;
}

/* FusedConv on kl_tc_cvt: act 0 with a Sum of Y's shape, else a Sum per channel
 * [40, 1, 1] (the general broadcast) */
static kl_graph *tc_fused_taps_graph(int act) {
  kl_graph *g = tu_graph_new(); /* Y [2, 40, 9, 9] */
  int x = input(g, 4, (const int64_t[]){2, 32, 9, 9}), w = input(g, 4, (const int64_t[]){40, 32, 3, 3});
  int b = input(g, 1, (const int64_t[]){40});
  int sum = act ? input(g, 3, (const int64_t[]){40, 1, 1}) : input(g, 4, (const int64_t[]){2, 40, 9, 9});
  int n = out_node(g, KL_OP_KilnFusedConv, 4, (const int[]){x, w, b, sum});
  set_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  set_act(g, n, &acts[act]);
  return g;
}

static kl_graph *tc_matmul_graph(int i) {
  kl_graph *g = tu_graph_new();
  const mm_case *c = &tc_mm_cases[i];
  out_node(g, KL_OP_MatMul, 2, (const int[]){input(g, c->ra, c->a), input(g, c->rb, c->b)});
  return g;
}

static kl_graph *tc_gemm_graph(int t) { /* transA t & 1, transB t >> 1; C [N]; alpha, beta */
  int ta = t & 1, tb = t >> 1;
  int64_t m = 77, n = 130, k = 45;
  kl_graph *g = tu_graph_new();
  int a = input(g, 2, ta ? (const int64_t[]){k, m} : (const int64_t[]){m, k});
  int b = input(g, 2, tb ? (const int64_t[]){n, k} : (const int64_t[]){k, n});
  int c = input(g, 1, (const int64_t[]){n});
  int node = out_node(g, KL_OP_Gemm, 3, (const int[]){a, b, c});
  assert_int_equal(kl_node_set_int(g, node, "transA", ta, NULL), KILN_OK);
  assert_int_equal(kl_node_set_int(g, node, "transB", tb, NULL), KILN_OK);
  assert_int_equal(kl_node_set_float(g, node, "alpha", 0.5f, NULL), KILN_OK);
  assert_int_equal(kl_node_set_float(g, node, "beta", -1.5f, NULL), KILN_OK);
  return g;
}

/* Gemm on kl_tc_mm (K and N multiples of 4): t 0, 1 with transB (B read as [n][k]),
 * 2 without; t 1 has enough tiles for rows of 128 */
static kl_graph *tc_gemm_vec_graph(int t) {
  static const int64_t dims[3][3] = {{77, 132, 44}, {520, 8200, 20}, {77, 132, 44}};
  int64_t m = dims[t][0], n = dims[t][1], k = dims[t][2];
  int tb = t < 2;
  kl_graph *g = tu_graph_new();
  int a = input(g, 2, (const int64_t[]){m, k});
  int b = input(g, 2, tb ? (const int64_t[]){n, k} : (const int64_t[]){k, n});
  int c = input(g, 1, (const int64_t[]){n});
  int node = out_node(g, KL_OP_Gemm, 3, (const int[]){a, b, c});
  assert_int_equal(kl_node_set_int(g, node, "transB", tb, NULL), KILN_OK);
  assert_int_equal(kl_node_set_float(g, node, "alpha", 0.5f, NULL), KILN_OK);
  assert_int_equal(kl_node_set_float(g, node, "beta", -1.5f, NULL), KILN_OK);
  return g;
}

static kl_graph *tc_fused_matmul_graph(int act) {
  kl_graph *g = tu_graph_new();
  /* N 72: on kl_tc_mm, whose epilogue this checks (the Gemm cases check kl_tc_matmul's) */
  int a = input(g, 3, (const int64_t[]){2, 50, 40}), b = input(g, 2, (const int64_t[]){40, 72});
  int c = input(g, 1, (const int64_t[]){72}), s = input(g, 3, (const int64_t[]){2, 50, 72});
  set_act(g, out_node(g, KL_OP_KilnFusedMatMul, 4, (const int[]){a, b, c, s}), &acts[act]);
  return g;
}

/* Products of positive terms, where TF32's rounding of the operands must not be biased:
 * cvt.rna's errors cancel over k (the sums' relative error ~1e-5 here), a truncation
 * (what wgmma makes of float32 bits) makes every term smaller and the sums ~5e-4 too
 * small, past TRUNC_TOL. X = Abs(input) + 0.5 on the device, W a constant in [0.5, 1.5]:
 * `conv` 1, a 3x3 convolution 32 -> 96 over 2 x 40 x 40 (k 288); 0, a MatMul
 * [300, 512] x [512, 700]; 2, [300, 512] x [512, 2100]. */
#define TRUNC_TOL TU_TOL(0, 1.5e-4)
static kl_graph *wg_positive_graph(int conv) {
  kl_graph *g = tu_graph_new();
  int x = input(g, conv == 1 ? 4 : 2,
                conv == 1 ? (const int64_t[]){2, 32, 40, 40} : (const int64_t[]){300, 512});
  int ax = tu_graph_value(g, NULL), px = tu_graph_value(g, NULL);
  tu_graph_node(g, KL_OP_Abs, NULL, 1, &x, 1, &ax);
  int half = cst(g, 1, (const int64_t[]){1}, 0.5f, 0.5f);
  tu_graph_node(g, KL_OP_Add, NULL, 2, (const int[]){ax, half}, 1, &px);
  if (conv == 1) {
    int w = cst(g, 4, (const int64_t[]){96, 32, 3, 3}, 0.5f, 1.5f);
    set_ints(g, out_node(g, KL_OP_Conv, 2, (const int[]){px, w}), "pads", 4,
             (const int64_t[]){1, 1, 1, 1});
  } else { /* conv 2: N of 2100, A then rounded by its own pass on wgmma (wg_a_round) */
    int w = cst(g, 2, (const int64_t[]){512, conv == 2 ? 2100 : 700}, 0.5f, 1.5f);
    out_node(g, KL_OP_MatMul, 2, (const int[]){px, w});
  }
  return g;
}

static void test_tf32(void **state) {
  (void)state;
  if (!device_tf32()) {
    print_message("[  INFO    ] the OpenCL device has no tensor cores: checked that precision "
                  "tf32 is refused; the TF32 kernels run on NVIDIA (docs/gpu.md)\n");
    return;
  }
  char what[160];
  for (int i = 0; i < TU_LEN(tc_conv_cases); i++) {
    snprintf(what, sizeof what, "TF32 Conv %s", tc_conv_cases[i].what);
    /* kl_tc_cvt, or kl_wg_cvt128 on an sm_90 (test_wgmma) */
    tu_gpu_expect_kernel = tc_uses_taps(&tc_conv_cases[i]) ? "_cvt" : NULL;
    tc_check(tc_conv_graph, i, what);
  }
  tu_gpu_expect_kernel = "_cvt";
  /* W a constant drawn as is (not TF32 values): the inexact check only */
  tu_gpu_check_at(tc_taps_const_graph(0), "TF32 Conv 32 -> 40, W a constant (tap-major once)",
                  0, TF32_TOL, 1, true, "tf32", false);
  tc_check(tc_fused_taps_graph, 0, "TF32 FusedConv 32 -> 40 + bias + Sum + Relu (tap-major)");
  tc_check(tc_fused_taps_graph, 9, "TF32 FusedConv 32 -> 40 + bias + Sum [40, 1, 1] + Silu "
           "(tap-major)");
  tu_gpu_expect_kernel = NULL;
  tc_check(tc_fused_conv_graph, 0, "TF32 FusedConv + bias + Sum + Relu");
  tc_check(tc_fused_conv_graph, 9, "TF32 FusedConv + bias + Sum + Silu");
  tc_check(tc_conv_row_sum_graph, 0, "TF32 FusedConv + bias + Sum [13] + Relu");
  tc_check(tc_fused_conv4_graph, 0, "TF32 FusedConv (W in 4-vectors) + bias + Sum + Relu");
  tc_check(tc_fused_conv4_graph, 9, "TF32 FusedConv (W in 4-vectors) + bias + Sum + Silu");
  tc_check(tc_fused_1x1_graph, 0, "TF32 FusedConv 1x1 + bias + Sum + Relu");
  tc_check(tc_fused_1x1_graph, 1, "TF32 FusedConv 1x1 + bias + Sum + LeakyRelu");
  for (int i = 0; i < TU_LEN(tc_mm_cases); i++) {
    snprintf(what, sizeof what, "TF32 MatMul %s", tc_mm_cases[i].what);
    tc_check(tc_matmul_graph, i, what);
  }
  for (int t = 0; t < 4; t++) {
    snprintf(what, sizeof what, "TF32 Gemm transA %d transB %d, C [N], alpha, beta", t & 1, t >> 1);
    tc_check(tc_gemm_graph, t, what);
  }
  for (int t = 0; t < 3; t++) {
    snprintf(what, sizeof what, "TF32 Gemm in 4-vectors, case %d (transB %d)", t, t < 2);
    tc_check(tc_gemm_vec_graph, t, what);
  }
  tc_check(tc_fused_matmul_graph, 7, "TF32 FusedMatMul + Bias + Sum + Gelu");
  tu_gpu_check_at(wg_positive_graph(1), "TF32 Conv of positive terms, rounded not truncated",
                  0, TRUNC_TOL, 1, true, "tf32", false);
  tu_gpu_check_at(wg_positive_graph(0), "TF32 MatMul of positive terms, rounded not truncated",
                  0, TRUNC_TOL, 1, true, "tf32", false);
}

/* ---- Hopper's wgmma (tc.cl's kl_wg_*: the PTX for sm_90a) ---- */

/* Whether kiln's wgmma kernels run here: the device is an sm_90 (H100, H200), whose
 * program is the PTX for sm_90a, and KILN_GPU_WGMMA does not turn them off. An H100 or
 * H200 that does not say it is sm_90 fails the test. */
static bool device_wgmma(void) {
  char buf[8192];
  kl_cl_describe(buf, sizeof buf);
  const char *env = getenv("KILN_GPU_WGMMA");
  bool sm90 = strstr(buf, "the device is sm_90;") != NULL;
  if ((strstr(buf, "NVIDIA H100") || strstr(buf, "NVIDIA H200")) && !sm90)
    fail_msg("an H100 or H200 that kl_cl_describe does not call sm_90: %s", buf);
  return sm90 && !(env && strcmp(env, "0") == 0);
}

/* Tiles of 128 rows (tc_rows: at least two a compute unit of 132), the shapes of each
 * path to kl_wg_cvt128: taps, a 1x1 of positions in 4-vectors (kl_tc_mm's before), one
 * whose positions are not (5775), stride 2 with odd sizes; Cout past a tile of 128; then
 * tiles of 64 rows (kl_wg_cvt64): few positions, dilation and asymmetric pads. */
static const conv_case wg_conv_cases[] = {
    {"3x3 pad 1, 16 -> 129 over 2 x 96 x 96", 4, {2, 16, 96, 96}, {129, 16, 3, 3}, 1, {0}, {0},
     {1, 1, 1, 1}, NULL, true},
    {"1x1, 64 -> 256 over 2 x 96 x 96", 4, {2, 64, 96, 96}, {256, 64, 1, 1}, 1, {0}, {0}, {0},
     NULL, true},
    {"1x1, 48 -> 136 over 3 x 77 x 75, no bias", 4, {3, 48, 77, 75}, {136, 48, 1, 1}, 1, {0}, {0},
     {0}, NULL, false},
    {"3x3 stride 2, 16 -> 130 over 8 x 97 x 95", 4, {8, 16, 97, 95}, {130, 16, 3, 3}, 1, {2, 2},
     {0}, {1, 1, 1, 1}, NULL, true},
    {"3x3 dilation 2 pads 2, 1, 0, 1, 32 -> 40 over 3 x 20 x 21 (rows of 64)", 4, {3, 32, 20, 21},
     {40, 32, 3, 3}, 1, {0}, {2, 2}, {2, 1, 0, 1}, NULL, true},
    {"1x1, 64 -> 72 over 2 x 14 x 14 (rows of 64)", 4, {2, 64, 14, 14}, {72, 64, 1, 1}, 1, {0},
     {0}, {0}, NULL, true},
};

static kl_graph *wg_conv_graph(int i) {
  kl_graph *g = tu_graph_new();
  conv_node(g, KL_OP_Conv, &wg_conv_cases[i], -1);
  return g;
}

/* FusedConv with a Sum of Y's shape and an activation, W a constant when `cw` (its
 * tap-major copy made once) */
static kl_graph *wg_fused_conv_graph(int cw) {
  kl_graph *g = tu_graph_new(); /* Y [2, 130, 96, 96] */
  int x = input(g, 4, (const int64_t[]){2, 16, 96, 96});
  int w = cw ? cst(g, 4, (const int64_t[]){130, 16, 3, 3}, -1, 1)
             : input(g, 4, (const int64_t[]){130, 16, 3, 3});
  int b = input(g, 1, (const int64_t[]){130});
  int sum = input(g, 4, (const int64_t[]){2, 130, 96, 96});
  int n = out_node(g, KL_OP_KilnFusedConv, 4, (const int[]){x, w, b, sum});
  set_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  set_act(g, n, &acts[cw ? 9 : 0]);
  return g;
}

/* FusedMatMul [2, 200, 72] x [72, 9000] + Bias + Sum + Gelu, B a constant when `cb` (its
 * [n][k] copy made once) or an input (then on kl_tc_mm: fewer than 4096 rows) */
static kl_graph *wg_fused_matmul_graph(int cb) {
  kl_graph *g = tu_graph_new();
  int a = input(g, 3, (const int64_t[]){2, 200, 72});
  int b = cb ? cst(g, 2, (const int64_t[]){72, 9000}, -2, 2)
             : input(g, 2, (const int64_t[]){72, 9000});
  int c = input(g, 1, (const int64_t[]){9000}), s = input(g, 3, (const int64_t[]){2, 200, 9000});
  set_act(g, out_node(g, KL_OP_KilnFusedMatMul, 4, (const int[]){a, b, c, s}), &acts[7]);
  return g;
}

/* Gemm transB [M, K] x [N, K]^T + C: 77 x 44 x 132 (rows of 64), or 520 x 20 x 8200 (rows
 * of 128), B a constant ([n][k] already: rounded once) */
static kl_graph *wg_gemm_graph(int big) {
  int64_t m = big ? 520 : 77;
  kl_graph *g = tu_graph_new();
  int a = input(g, 2, (const int64_t[]){m, big ? 20 : 44});
  int b = cst(g, 2, big ? (const int64_t[]){8200, 20} : (const int64_t[]){132, 44}, -2, 2);
  int c = input(g, 1, (const int64_t[]){big ? 8200 : 132});
  int node = out_node(g, KL_OP_Gemm, 3, (const int[]){a, b, c});
  assert_int_equal(kl_node_set_int(g, node, "transB", 1, NULL), KILN_OK);
  assert_int_equal(kl_node_set_float(g, node, "beta", -1.5f, NULL), KILN_OK);
  return g;
}

/* MatMul [4100, 40] x [40, 300], B an input: reordered at every run (4096 rows and more) */
static kl_graph *wg_tall_graph(int unused) {
  (void)unused;
  kl_graph *g = tu_graph_new();
  out_node(g, KL_OP_MatMul, 2,
           (const int[]){input(g, 2, (const int64_t[]){4100, 40}), input(g, 2, (const int64_t[]){40, 300})});
  return g;
}

static void test_wgmma(void **state) {
  (void)state;
  if (!device_tf32() || !device_wgmma()) {
    print_message("[  INFO    ] not an sm_90 device with kiln's wgmma kernels: the kl_wg_* "
                  "cases run on the H100 and H200 (docs/gpu.md)\n");
    return;
  }
  char what[160];
  /* convolutions on wgmma only when asked (KILN_GPU_WGMMA=all): not by default */
  tu_gpu_expect_kernel = "kl_tc_cvt";
  tc_check(wg_conv_graph, 0, "Conv 3x3 16 -> 129 on kl_tc_cvt by default");
  setenv("KILN_GPU_WGMMA", "all", 1);
  tu_gpu_expect_kernel = "kl_wg_cvt";
  for (int i = 0; i < TU_LEN(wg_conv_cases); i++) {
    snprintf(what, sizeof what, "wgmma Conv %s", wg_conv_cases[i].what);
    tc_check(wg_conv_graph, i, what);
  }
  tc_check(wg_fused_conv_graph, 0, "wgmma FusedConv 16 -> 130 + bias + Sum + Relu");
  tu_gpu_check_at(wg_fused_conv_graph(1), "wgmma FusedConv 16 -> 130 + bias + Sum + Silu, W a "
                  "constant", 0, TF32_TOL, 1, true, "tf32", false);
  tu_gpu_check_at(wg_positive_graph(1), "wgmma Conv of positive terms, rounded not truncated",
                  0, TRUNC_TOL, 1, true, "tf32", false);
  unsetenv("KILN_GPU_WGMMA");
  /* products: B a constant, or an input of 4096 rows and more; A rounded by each tile
   * in local memory (kl_wg_mm*t), or where N >= 2048 by one pass before (kl_wg_round,
   * then kl_wg_mm*r); tiles of 64 or 128 rows as tc_rows chooses for 132 compute units
   * (or the H100 PCIe's 114) */
  tu_gpu_expect_kernel = "kl_wg_mm64t";
  tu_gpu_check_at(wg_positive_graph(0), "wgmma MatMul of positive terms, rounded not truncated",
                  0, TRUNC_TOL, 1, true, "tf32", false);
  tu_gpu_check_at(wg_gemm_graph(0), "wgmma Gemm transB 77 x 44 x 132, B a constant (rows of 64)",
                  0, TF32_TOL, 1, true, "tf32", false);
  tc_check(wg_tall_graph, 0, "wgmma MatMul 4100 x 40 x 300, B an input ([n][k] each run)");
  tu_gpu_expect_kernel = "kl_wg_mm64r";
  tu_gpu_check_at(wg_positive_graph(2), "wgmma MatMul of positive terms, N 2100, A rounded by "
                  "kl_wg_round", 0, TRUNC_TOL, 1, true, "tf32", false);
  tu_gpu_expect_kernel = "kl_wg_mm128r";
  tu_gpu_check_at(wg_gemm_graph(1), "wgmma Gemm transB 520 x 20 x 8200, B a constant (rows of "
                  "128)", 0, TF32_TOL, 1, true, "tf32", false);
  tu_gpu_check_at(wg_fused_matmul_graph(1), "wgmma FusedMatMul 400 x 72 x 9000 + Bias + Sum + "
                  "Gelu, B a constant ([n][k] once)", 0, TF32_TOL, 1, true, "tf32", false);
  /* KILN_GPU_WGMMA_ROUND=tile: A rounded by each tile in local memory (kl_wg_mm*t) */
  setenv("KILN_GPU_WGMMA_ROUND", "tile", 1);
  tu_gpu_expect_kernel = "kl_wg_mm64t";
  tu_gpu_check_at(wg_positive_graph(2), "wgmma MatMul of positive terms, N 2100, A rounded by "
                  "the tiles", 0, TRUNC_TOL, 1, true, "tf32", false);
  tu_gpu_expect_kernel = "kl_wg_mm128t";
  tu_gpu_check_at(wg_fused_matmul_graph(1), "wgmma FusedMatMul 400 x 72 x 9000 + Bias + Sum + "
                  "Gelu, A rounded by the tiles", 0, TF32_TOL, 1, true, "tf32", false);
  unsetenv("KILN_GPU_WGMMA_ROUND");
  setenv("KILN_GPU_WGMMA", "0", 1);
  tu_gpu_expect_kernel = "kl_tc_mm";
  tc_check(wg_tall_graph, 0, "MatMul 4100 x 40 x 300 on kl_tc_mm with KILN_GPU_WGMMA=0");
  unsetenv("KILN_GPU_WGMMA");
  tu_gpu_expect_kernel = NULL;
}

/* ---- attention on the tensor cores (tc.cl's kl_attn_tc64) ---- */

/* kiln.MultiHeadAttention at precision tf32, heads of at most 64: both products on
 * mma.sync. With inputs rounded to TF32 the scores are exact products summed in float32
 * and only the weights' rounding to TF32 (2^-11 relative) and ex2.approx's error reach
 * the outputs, weighted averages of values in [-2, 2] (ATTN_TOL); with inputs as drawn,
 * Q's and K's rounding moves scores of up to ~10 by ~1e-2 (TF32_TOL). Query blocks of
 * 64 crossed and partial, key tiles of 64 and their halves of 32 crossed and partial,
 * heads narrower than 64 (D and Dv apart), separate and packed projections, masks
 * broadcast from [B,1,1,T], [S,T] and [B,H,S,T], queries that see no key. */
#define ATTN_TOL TU_TOL(3e-3, 1e-3)

static void test_tf32_attention(void **state) {
  (void)state;
  if (!device_tf32()) {
    print_message("[  INFO    ] the OpenCL device has no tensor cores: kl_attn_tc64 runs on "
                  "NVIDIA (docs/gpu.md)\n");
    return;
  }
  static const tu_mha_case cases[] = {
      {"12 heads of 64, S 130, T 100, [B,H,S,T] mask", false, 12, 4, {2, 130, 768},
       {2, 100, 768}, {2, 100, 768}, {2, 12, 130, 100}, 0},
      {"packed QKV, 12 heads of 64, S 128, [B,1,1,T] mask (BERT-base's)", true, 12, 4,
       {2, 128, 2304}, {0}, {0}, {2, 1, 1, 128}, 0},
      {"packed QKV, 2 heads of 64, S 77, [B,1,1,T] mask", true, 2, 4, {3, 77, 384}, {0}, {0},
       {3, 1, 1, 77}, 0},
      {"3 heads of 5 (V 3), S 5, T 7, [B,1,1,T] mask", false, 3, 4, {2, 5, 15}, {2, 7, 15},
       {2, 7, 9}, {2, 1, 1, 7}, 0},
      {"2 heads of 48 (V 64), S 65, T 33", false, 2, 0, {1, 65, 96}, {1, 33, 96},
       {1, 33, 128}, {0}, 0},
      {"2 heads of 16 (V 40), S 70, T 45, [S,T] mask", false, 2, 2, {1, 70, 32}, {1, 45, 32},
       {1, 45, 80}, {70, 45}, 0},
      {"1 head of 32, S 3, T 300 (five key tiles)", false, 1, 0, {1, 3, 32}, {1, 300, 32},
       {1, 300, 32}, {0}, 0},
      {"2 heads of 64, S 70, T 40, queries with no key", false, 2, 4, {2, 70, 128},
       {2, 40, 128}, {2, 40, 128}, {2, 1, 70, 40}, -INFINITY},
      {"1 head of 64, S 66, T 100, queries with no key (two key tiles)", false, 1, 4,
       {2, 66, 64}, {2, 100, 64}, {2, 100, 64}, {2, 1, 66, 100}, -INFINITY},
      /* the lowest float as the mask (the dynamo exporter's): times log2(e) it would
       * overflow to -inf, and a query whose every key is so masked would give 0, not the
       * mean of the values (tests/models/dyn_bert_sdpa_dynamo failed so on the H200) */
      {"2 heads of 64, S 70, T 40, keys all masked by the lowest float", false, 2, 4,
       {2, 70, 128}, {2, 40, 128}, {2, 40, 128}, {2, 1, 70, 40}, -FLT_MAX},
      {"packed QKV, 2 heads of 16, S 7, keys all masked by the lowest float", true, 2, 4,
       {3, 7, 96}, {0}, {0}, {3, 1, 7, 7}, -FLT_MAX},
  };
  tu_gpu_expect_kernel = "kl_attn_tc64";
  char what[200];
  for (int i = 0; i < TU_LEN(cases); i++) {
    snprintf(what, sizeof what, "TF32 attention %s", cases[i].what);
    tu_gpu_check_at(tu_mha_graph(&cases[i]), what, 0, ATTN_TOL, 1, true, "tf32", true);
    snprintf(what, sizeof what, "TF32 attention %s, inputs not TF32", cases[i].what);
    tu_gpu_check_at(tu_mha_graph(&cases[i]), what, 0, TF32_TOL, 1, true, "tf32", false);
  }
  tu_gpu_expect_kernel = NULL;
}

/* ---- pooling ---- */

static void test_pool(void **state) {
  (void)state;
  static const struct {
    const char *what;
    kl_op op;
    int rank;
    int64_t x[5];
    int64_t kernel[3], strides[3], dilations[3], pads[6]; /* {0}: defaults */
    const char *auto_pad;
    int ceil, include_pad;
  } cases[] = {
      {"max 3x3 stride 2 pad 1", KL_OP_MaxPool, 4, {2, 3, 11, 10}, {3, 3}, {2, 2}, {0},
       {1, 1, 1, 1}, NULL, 0, 0},
      {"max ceil_mode", KL_OP_MaxPool, 4, {1, 3, 8, 7}, {3, 2}, {2, 2}, {0}, {0}, NULL, 1, 0},
      {"max dilation 2 asymmetric pads", KL_OP_MaxPool, 4, {1, 4, 9, 9}, {2, 2}, {0}, {2, 2},
       {1, 0, 0, 1}, NULL, 0, 0},
      {"max 1-D", KL_OP_MaxPool, 3, {2, 5, 10}, {3}, {3}, {0}, {1, 1}, NULL, 0, 0},
      {"max 3-D", KL_OP_MaxPool, 5, {1, 2, 5, 6, 5}, {2, 3, 2}, {2, 2, 1}, {0}, {0}, NULL, 0, 0},
      {"max SAME_UPPER stride 2", KL_OP_MaxPool, 4, {1, 3, 7, 8}, {3, 3}, {2, 2}, {0}, {0},
       "SAME_UPPER", 0, 0},
      {"max window wider than X", KL_OP_MaxPool, 4, {1, 2, 3, 3}, {5, 5}, {0}, {0},
       {2, 2, 2, 2}, NULL, 0, 0},
      {"max empty batch", KL_OP_MaxPool, 4, {0, 3, 5, 5}, {2, 2}, {0}, {0}, {0}, NULL, 0, 0},
      /* a window and pads of 2^29: kl_nn_pool, not its 32-bit form */
      {"max window of 2^29 over padding", KL_OP_MaxPool, 4, {1, 2, 3, 3}, {2, 536870912},
       {0}, {0}, {0, 536870912, 0, 0}, NULL, 0, 0},
      {"avg window of 2^29 over padding", KL_OP_AveragePool, 4, {1, 2, 3, 3}, {2, 536870912},
       {0}, {0}, {0, 536870912, 0, 0}, NULL, 0, 1},
      {"avg excluding pads", KL_OP_AveragePool, 4, {1, 5, 9, 9}, {3, 3}, {2, 2}, {0},
       {1, 1, 1, 1}, NULL, 0, 0},
      {"avg count_include_pad", KL_OP_AveragePool, 4, {1, 5, 9, 9}, {3, 3}, {0}, {0},
       {1, 1, 1, 1}, NULL, 0, 1},
      {"avg count_include_pad ceil_mode asymmetric pads", KL_OP_AveragePool, 4, {2, 3, 8, 7},
       {3, 3}, {2, 2}, {0}, {1, 0, 0, 1}, NULL, 1, 1},
      {"avg ceil_mode", KL_OP_AveragePool, 4, {1, 3, 8, 7}, {3, 2}, {2, 2}, {0}, {0}, NULL, 1, 0},
      {"avg dilation 2 count_include_pad", KL_OP_AveragePool, 4, {1, 2, 9, 8}, {3, 2}, {0},
       {2, 2}, {1, 1, 1, 1}, NULL, 0, 1},
      {"avg 1-D ceil_mode", KL_OP_AveragePool, 3, {2, 3, 10}, {3}, {2}, {0}, {1, 0}, NULL, 1, 0},
      {"avg 3-D", KL_OP_AveragePool, 5, {1, 2, 4, 6, 5}, {2, 2, 2}, {2, 2, 2}, {0}, {0}, NULL,
       0, 0},
      {"avg SAME_LOWER", KL_OP_AveragePool, 4, {1, 3, 6, 7}, {2, 3}, {0}, {0}, {0},
       "SAME_LOWER", 0, 0},
  };
  for (int i = 0; i < TU_LEN(cases); i++) {
    kl_graph *g = tu_graph_new();
    int n = out_node(g, cases[i].op, 1, (const int[]){input(g, cases[i].rank, cases[i].x)});
    int sp = cases[i].rank - 2;
    set_ints(g, n, "kernel_shape", sp, cases[i].kernel);
    if (cases[i].strides[0]) set_ints(g, n, "strides", sp, cases[i].strides);
    if (cases[i].dilations[0]) set_ints(g, n, "dilations", sp, cases[i].dilations);
    if (cases[i].auto_pad)
      assert_int_equal(kl_node_set_string(g, n, "auto_pad", cases[i].auto_pad, NULL), KILN_OK);
    else set_ints(g, n, "pads", 2 * sp, cases[i].pads);
    if (cases[i].ceil) assert_int_equal(kl_node_set_int(g, n, "ceil_mode", 1, NULL), KILN_OK);
    if (cases[i].include_pad)
      assert_int_equal(kl_node_set_int(g, n, "count_include_pad", 1, NULL), KILN_OK);
    char what[96];
    snprintf(what, sizeof what, "pool %s", cases[i].what);
    assert_int_equal(tu_gpu_check(g, what, 0, TOL, 1, true), 1);
  }
}

static void test_global_pool(void **state) {
  (void)state;
  static const struct {
    int rank;
    int64_t x[5];
  } shapes[] = {{4, {2, 6, 7, 5}},   {4, {1, 3, 37, 41}}, {3, {3, 5, 11}},
                {5, {1, 2, 3, 4, 5}}, {4, {2, 3, 1, 1}},  {4, {0, 3, 4, 4}}};
  static const kl_op ops[] = {KL_OP_GlobalAveragePool, KL_OP_GlobalMaxPool};
  for (int o = 0; o < 2; o++)
    for (int i = 0; i < TU_LEN(shapes); i++) {
      kl_graph *g = tu_graph_new();
      out_node(g, ops[o], 1, (const int[]){input(g, shapes[i].rank, shapes[i].x)});
      char what[64];
      snprintf(what, sizeof what, "%s shape %d", kl_op_name(ops[o]), i);
      assert_int_equal(tu_gpu_check(g, what, 0, TOL, 1, true), 1);
    }
  /* No element per plane: the mean is NaN (0 / 0) on both sides. */
  kl_graph *g = tu_graph_new();
  int x = input(g, 4, (const int64_t[]){2, 3, 0, 4});
  out_node(g, KL_OP_GlobalAveragePool, 1, &x);
  tu_gpu_check(g, "GlobalAveragePool of empty planes", 0, TOL, 1, true);
}

/* ---- BatchNormalization ---- */

/* BatchNormalization of X with constant statistics (a positive variance). */
static int batchnorm(kl_graph *g, int x, int64_t channels) {
  const int64_t c[1] = {channels};
  int n = out_node(g, KL_OP_BatchNormalization, 5,
                   (const int[]){x, cst(g, 1, c, 0.5f, 1.5f), cst(g, 1, c, -1, 1),
                                 cst(g, 1, c, -0.5f, 0.5f), cst(g, 1, c, 0.1f, 2)});
  return n;
}

static void test_batchnorm(void **state) {
  (void)state;
  static const struct {
    int rank;
    int64_t x[5];
  } shapes[] = {{4, {2, 5, 7, 6}}, {2, {3, 4}}, {1, {7}}, {5, {2, 3, 4, 5, 3}}, {3, {2, 3, 0}}};
  for (int i = 0; i < TU_LEN(shapes); i++) {
    kl_graph *g = tu_graph_new();
    int64_t channels = shapes[i].rank > 1 ? shapes[i].x[1] : 1;
    int n = batchnorm(g, input(g, shapes[i].rank, shapes[i].x), channels);
    if (i == 0) assert_int_equal(kl_node_set_float(g, n, "epsilon", 1e-3f, NULL), KILN_OK);
    char what[64];
    snprintf(what, sizeof what, "BatchNormalization rank %d", shapes[i].rank);
    assert_int_equal(tu_gpu_check(g, what, 0, TOL, 1, true), 1);
  }
}

/* ---- what stays on the CPU ---- */

/* MaxPool with its Indices output and BatchNormalization in training mode run on the
 * CPU, with the right results. */
static void test_cpu_fallbacks(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = input(g, 4, (const int64_t[]){1, 3, 6, 6});
  int ys[2] = {tu_graph_value(g, "y"), tu_graph_value(g, "idx")};
  int n = tu_graph_node(g, KL_OP_MaxPool, NULL, 1, &x, 2, ys);
  set_ints(g, n, "kernel_shape", 2, (const int64_t[]){2, 2});
  assert_int_equal(kl_graph_add_output(g, ys[0], NULL), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, ys[1], NULL), KILN_OK);
  assert_int_equal(tu_gpu_check(g, "MaxPool with Indices", 0, TOL, 1, false), 0);

  g = tu_graph_new();
  n = batchnorm(g, input(g, 4, (const int64_t[]){2, 3, 4, 4}), 3);
  assert_int_equal(kl_node_set_int(g, n, "training_mode", 1, NULL), KILN_OK);
  assert_int_equal(tu_gpu_check(g, "BatchNormalization training_mode=1", 0, TOL, 1, false), 0);
}

/* ---- a network ---- */

/* A small convolution network with constant weights, optimized at O2 (BatchNorm folded
 * into the convolution, Relu and the residual Add fused into FusedConv, the last Gemm
 * fused with its Relu): every node runs on the device. */
static void test_network(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = input(g, 4, (const int64_t[]){2, 1, 12, 12});
  int c1 = TU_OP(g, Conv, x, cst(g, 4, (const int64_t[]){8, 1, 3, 3}, -0.5f, 0.5f),
                 cst(g, 1, (const int64_t[]){8}, -0.2f, 0.2f));
  const int64_t c8[1] = {8};
  int bn = TU_OP(g, BatchNormalization, c1, cst(g, 1, c8, 0.5f, 1.5f), cst(g, 1, c8, -1, 1),
                 cst(g, 1, c8, -0.5f, 0.5f), cst(g, 1, c8, 0.1f, 2));
  int r1 = TU_OP(g, Relu, bn);
  int p1 = TU_OP(g, MaxPool, r1);
  int c2 = TU_OP(g, Conv, p1, cst(g, 4, (const int64_t[]){8, 8, 3, 3}, -0.3f, 0.3f));
  int r2 = TU_OP(g, Relu, TU_OP(g, Add, c2, p1));
  int gap = TU_OP(g, GlobalAveragePool, r2);
  int flat = TU_OP(g, Flatten, gap);
  int fc = TU_OP(g, Gemm, flat, cst(g, 2, (const int64_t[]){10, 8}, -1, 1),
                 cst(g, 1, (const int64_t[]){10}, -1, 1));
  assert_int_equal(kl_graph_add_output(g, TU_OP(g, Relu, fc), NULL), KILN_OK);
  for (int i = 0; i < g->n_nodes; i++) {
    kl_node *n = &g->nodes[i];
    if (n->op == KL_OP_MaxPool) {
      set_ints(g, i, "kernel_shape", 2, (const int64_t[]){2, 2});
      set_ints(g, i, "strides", 2, (const int64_t[]){2, 2});
    }
    if (n->op == KL_OP_Conv) set_ints(g, i, "pads", 4, (const int64_t[]){1, 1, 1, 1});
    if (n->op == KL_OP_Gemm) assert_int_equal(kl_node_set_int(g, i, "transB", 1, NULL), KILN_OK);
  }
  /* 11 nodes become 6: FusedConv (BatchNorm folded, Relu), MaxPool, FusedConv (Sum, Relu),
   * GlobalAveragePool, Flatten, FusedGemm (Relu) */
  assert_int_equal(tu_gpu_check(g, "network at O2", 2, TOL, 1, true), 6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv),           cmocka_unit_test(test_conv_wide),
      cmocka_unit_test(test_fused_conv),     cmocka_unit_test(test_gemm),
      cmocka_unit_test(test_matmul),         cmocka_unit_test(test_matmul_long_k),
      cmocka_unit_test(test_fused_products), cmocka_unit_test(test_pool),
      cmocka_unit_test(test_global_pool),    cmocka_unit_test(test_batchnorm),
      cmocka_unit_test(test_cpu_fallbacks),  cmocka_unit_test(test_network),
      cmocka_unit_test(test_tf32),
      cmocka_unit_test(test_wgmma),
      cmocka_unit_test(test_tf32_attention),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
