/* The O3 layout pass (src/passes/layout.c) and the channels-last ops it makes
 * (ir/layout.h): small graphs written as ONNX, loaded at -O0 and with the pass, the
 * optimized graph checked node by node (which ops became channels-last, how many
 * Transposes are left), and both run on the same random inputs, on the fast backend
 * (oneDNN when built with it) and on the reference kernels; outputs must agree within
 * |optimized - reference| <= 1e-4 + 1e-4 |reference|. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "export/onnx_export.h"
#include "ir/fused.h"
#include "ir/layout.h"
#include "runtime/runtime.h"

#include "testutil.h"

static uint32_t rng = 4242;

/* A float constant of the given shape, random in [lo, hi]. */
static int cst(kl_graph *g, int rank, const int64_t *dims, float lo, float hi) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  float *d = tu_rand_vec(&rng, (size_t)n, lo, hi);
  int v = tu_graph_const(g, NULL, KL_F32, rank, dims, d);
  free(d);
  return v;
}

static int node_of(kl_graph *g, int v) { return g->values[v].producer; }

static void set_int(kl_graph *g, int v, const char *name, int64_t x) {
  assert_int_equal(kl_node_set_int(g, node_of(g, v), name, x, NULL), KILN_OK);
}
static void set_ints(kl_graph *g, int v, const char *name, int n, const int64_t *x) {
  assert_int_equal(kl_node_set_ints(g, node_of(g, v), name, x, n, NULL), KILN_OK);
}
static void output(kl_graph *g, int v) {
  assert_int_equal(kl_graph_add_output(g, v, NULL), KILN_OK);
}

/* x [N, cin, H, W] -> Conv k x k (pads k/2, stride) with cout channels and a bias. */
static int conv(kl_graph *g, int x, int64_t cin, int64_t cout, int64_t k, int64_t stride) {
  int w = cst(g, 4, (int64_t[]){cout, cin, k, k}, -0.5f, 0.5f);
  int y = TU_OP(g, Conv, x, w, cst(g, 1, (int64_t[]){cout}, -1, 1));
  int64_t p = k / 2;
  set_ints(g, y, "pads", 4, (int64_t[]){p, p, p, p});
  set_ints(g, y, "strides", 2, (int64_t[]){stride, stride});
  return y;
}

/* ---- loading, running, comparing ---- */

typedef struct opt {
  int level;
  const char *passes;
  bool reference; /* sessions run the reference kernels */
} opt;

static kiln_model *load(const void *buf, size_t len, opt o) {
  kiln_options *opts;
  assert_int_equal(kiln_options_create(&opts), KILN_OK);
  assert_int_equal(kiln_options_set_int(opts, "opt_level", o.level), KILN_OK);
  assert_int_equal(kiln_options_set_int(opts, "verify", 1), KILN_OK);
  assert_int_equal(kiln_options_set_int(opts, "reference", o.reference), KILN_OK);
  if (o.passes) assert_int_equal(kiln_options_set_string(opts, "passes", o.passes), KILN_OK);
  kiln_model *m = NULL;
  kiln_status st = kiln_model_load_memory(buf, len, opts, &m);
  if (st != KILN_OK) fail_msg("load failed: %s", kiln_model_error(m));
  kiln_options_free(opts);
  return m;
}

/* Runs m on random inputs from seed (a symbolic dim is 2); returns copies of the
 * outputs. */
static void run(kiln_model *m, uint32_t seed, float **outs, int64_t *counts) {
  kiln_session *s;
  assert_int_equal(kiln_session_create(m, NULL, &s), KILN_OK);
  uint32_t r = seed;
  float *bufs[8] = {NULL};
  assert_true(kiln_model_input_count(m) <= 8 && kiln_model_output_count(m) <= 8);
  for (int i = 0; i < kiln_model_input_count(m); i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    int64_t n = 1, dims[KL_MAX_RANK];
    for (int d = 0; d < info.rank; d++) {
      dims[d] = info.dims[d] < 0 ? 2 : info.dims[d];
      n *= dims[d];
    }
    bufs[i] = malloc(sizeof(float) * (size_t)(n ? n : 1));
    assert_non_null(bufs[i]);
    for (int64_t k = 0; k < n; k++) bufs[i][k] = tu_rand_f32(&r, -2, 2);
    assert_int_equal(kiln_session_set_input(s, info.name, KILN_DTYPE_FLOAT32, info.rank, dims,
                                            bufs[i], sizeof(float) * (size_t)n),
                     KILN_OK);
  }
  if (kiln_session_run(s) != KILN_OK) fail_msg("run failed: %s", kiln_session_error(s));
  for (int i = 0; i < kiln_model_output_count(m); i++) {
    kiln_tensor_info info;
    const void *data;
    assert_int_equal(kiln_session_get_output(s, i, &info, &data), KILN_OK);
    int64_t n = 1;
    for (int d = 0; d < info.rank; d++) n *= info.dims[d];
    outs[i] = malloc(sizeof(float) * (size_t)(n ? n : 1));
    assert_non_null(outs[i]);
    memcpy(outs[i], data, sizeof(float) * (size_t)n);
    counts[i] = n;
  }
  for (int i = 0; i < 8; i++) free(bufs[i]);
  kiln_session_free(s);
}

static void compare(kiln_model *a, kiln_model *b) {
  float *oa[8] = {NULL}, *ob[8] = {NULL};
  int64_t na[8], nb[8];
  assert_int_equal(kiln_model_output_count(a), kiln_model_output_count(b));
  run(a, 777, oa, na);
  run(b, 777, ob, nb);
  for (int i = 0; i < kiln_model_output_count(a); i++) {
    assert_int_equal(na[i], nb[i]);
    tu_assert_floats(ob[i], oa[i], na[i], TU_TOL(1e-4, 1e-4));
    free(oa[i]);
    free(ob[i]);
  }
}

/* Writes g and frees it; loads it at -O0 on the reference kernels (the oracle), and
 * with o twice, on the fast kernels and on the reference ones: all three must agree.
 * Returns the optimized model on the fast kernels. */
static kiln_model *optimize(kl_graph *g, opt o) {
  void *buf;
  size_t len;
  kl_err e = {0};
  if (kl_onnx_export(g, &buf, &len, &e) != KILN_OK) fail_msg("export: %s", e.msg);
  kl_graph_free(g);
  kiln_model *oracle = load(buf, len, (opt){0, NULL, true});
  o.reference = false;
  kiln_model *fast = load(buf, len, o);
  o.reference = true;
  kiln_model *slow = load(buf, len, o);
  free(buf);
  assert_int_equal(fast->g->n_nodes, slow->g->n_nodes);
  compare(oracle, fast);
  compare(oracle, slow);
  kiln_model_free(oracle);
  kiln_model_free(slow);
  return fast;
}

/* The layout pass alone (forced on), then the -O2 passes and it (forced on). */
#define LAYOUT_ONLY ((opt){0, "+layout", false})
#define O2_LAYOUT ((opt){2, "+layout", false})

static int count(const kiln_model *m, kl_op o) {
  int n = 0;
  for (int i = 0; i < m->g->n_nodes; i++) n += m->g->nodes[i].op == o;
  return n;
}

static int count_nhwc(const kiln_model *m) {
  int n = 0;
  for (int i = 0; i < m->g->n_nodes; i++) n += kl_layout_nhwc(&m->g->nodes[i]);
  return n;
}

/* The first node of op o in m. */
static const kl_node *first(const kiln_model *m, kl_op o) {
  for (int i = 0; i < m->g->n_nodes; i++)
    if (m->g->nodes[i].op == o) return &m->g->nodes[i];
  fail_msg("no %s node", kl_op_name(o));
  return NULL;
}

/* How many rewrites the layout pass made. */
static int fired(const kiln_model *m) {
  for (int k = 0; k < m->stats.n_passes; k++)
    if (strcmp(m->stats.name[k], "layout") == 0) return m->stats.fired[k];
  fail_msg("no layout pass");
  return -1;
}

static void expect_perm(const kl_node *t, const int64_t want[4]) {
  const int64_t *p;
  assert_int_equal(kl_attr_ints(t, "perm", &p), 4);
  for (int i = 0; i < 4; i++) assert_int_equal(p[i], want[i]);
}

static const int64_t X4[4] = {2, 3, 9, 7}; /* odd sizes: pooling and strides have tails */

/* ---- the pass ---- */

/* Conv, Relu, MaxPool, Conv (stride 2), GlobalAveragePool, Flatten, Gemm: the first
 * convolution reads the image as it is, one Transpose out of the global pooling. */
static void test_conv_chain(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){B, 3, 9, 7});
  int y = TU_OP(g, Relu, conv(g, x, 3, 8, 3, 1));
  y = TU_OP(g, MaxPool, y);
  set_ints(g, y, "kernel_shape", 2, (int64_t[]){3, 3});
  set_ints(g, y, "strides", 2, (int64_t[]){2, 2});
  set_ints(g, y, "pads", 4, (int64_t[]){1, 1, 1, 1});
  y = TU_OP(g, Sigmoid, conv(g, y, 8, 16, 3, 2));
  y = TU_OP(g, Flatten, TU_OP(g, GlobalAveragePool, y));
  output(g, TU_OP(g, Gemm, y, cst(g, 2, (int64_t[]){16, 5}, -1, 1)));
  kiln_model *m = optimize(g, O2_LAYOUT);
  assert_int_equal(count(m, KL_OP_Transpose), 1);
  assert_int_equal(count(m, KL_OP_Conv) + count(m, KL_OP_MaxPool), 0);
  assert_int_equal(count(m, KL_OP_KilnFusedConv), 2);
  assert_int_equal(count(m, KL_OP_KilnNhwcMaxPool), 1);
  assert_int_equal(count(m, KL_OP_KilnNhwcGlobalAveragePool), 1);
  assert_int_equal(count_nhwc(m), 4);
  expect_perm(first(m, KL_OP_Transpose), kl_layout_to_nchw);
  /* the first convolution reads the image as it is; the second the channels-last
   * tensor */
  const kl_node *c = first(m, KL_OP_KilnFusedConv);
  assert_int_equal(kl_attr_int(c, "nchw_input", 0), 1);
  assert_int_equal(m->g->values[c->in[0]].kind, KL_VALUE_INPUT);
  /* the channels-last conv's output type is [N, H, W, C] */
  const kl_type *ty = &m->g->values[c->out[0]].type;
  assert_int_equal(ty->rank, 4);
  assert_int_equal(ty->dims[1].size, 9);
  assert_int_equal(ty->dims[2].size, 7);
  assert_int_equal(ty->dims[3].size, 8);
  kiln_model_free(m);
}

/* A residual block: the shortcut's layout matches, the Add becomes the Sum of a
 * channels-last FusedConv at -O2. */
static void test_residual(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int a = TU_OP(g, Relu, conv(g, x, 3, 6, 3, 1));
  int b = conv(g, TU_OP(g, Relu, conv(g, a, 6, 6, 3, 1)), 6, 6, 1, 1);
  output(g, TU_OP(g, Relu, TU_OP(g, Add, b, a)));
  kiln_model *m = optimize(g, O2_LAYOUT);
  assert_int_equal(count(m, KL_OP_Transpose), 1);
  assert_int_equal(count(m, KL_OP_Add), 0);
  assert_int_equal(count_nhwc(m), 3);
  int with_sum = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    const kl_node *n = &m->g->nodes[i];
    if (n->op == KL_OP_KilnFusedConv && n->n_in > KL_FUSED_SUM && n->in[KL_FUSED_SUM] >= 0) {
      with_sum++;
      assert_true(kl_layout_nhwc(n));
      assert_int_equal(m->g->values[n->in[KL_FUSED_SUM]].type.dims[3].size, 6);
    }
  }
  assert_int_equal(with_sum, 1);
  kiln_model_free(m);
}

/* Squeeze-excitation: GlobalAveragePool, two 1x1 convolutions, Sigmoid, and the Mul
 * that broadcasts the gate [N, C, 1, 1] over the image all stay channels-last. */
static void test_squeeze_excitation(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int a = TU_OP(g, Relu, conv(g, x, 3, 8, 3, 1));
  int s = TU_OP(g, Relu, conv(g, TU_OP(g, GlobalAveragePool, a), 8, 4, 1, 1));
  int gate = TU_OP(g, Sigmoid, conv(g, s, 4, 8, 1, 1));
  output(g, conv(g, TU_OP(g, Mul, a, gate), 8, 5, 3, 1));
  kiln_model *m = optimize(g, O2_LAYOUT);
  assert_int_equal(count(m, KL_OP_Transpose), 1);
  assert_int_equal(count_nhwc(m), 5);
  const kl_node *mul = first(m, KL_OP_Mul);
  for (int k = 0; k < 2; k++) assert_int_equal(m->g->values[mul->in[k]].type.dims[3].size, 8);
  kiln_model_free(m);
}

/* torch.export writes the squeeze's pooling as ReduceMean over H and W with keepdims:
 * it becomes the channels-last GlobalAveragePool (ReduceMax: GlobalMaxPool). */
static void test_reduce_mean_pooling(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int a = conv(g, x, 3, 4, 3, 1);
  int axes = tu_graph_const(g, NULL, KL_I64, 1, (int64_t[]){2}, (int64_t[]){-1, -2});
  int mean = TU_OP(g, ReduceMean, a, axes), max = TU_OP(g, ReduceMax, a, axes);
  output(g, conv(g, TU_OP(g, Add, mean, max), 4, 2, 1, 1));
  int other = tu_graph_const(g, NULL, KL_I64, 1, (int64_t[]){2}, (int64_t[]){1, 2});
  output(g, TU_OP(g, ReduceMean, a, other)); /* over C and H: stays */
  kiln_model *m = optimize(g, LAYOUT_ONLY);
  assert_int_equal(count(m, KL_OP_KilnNhwcGlobalAveragePool), 1);
  assert_int_equal(count(m, KL_OP_KilnNhwcGlobalMaxPool), 1);
  assert_int_equal(count(m, KL_OP_ReduceMean), 1);
  assert_int_equal(count(m, KL_OP_Transpose), 2);
  kiln_model_free(m);
}

/* Concat on the channel axis becomes a Concat on the last axis. */
static void test_concat(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int a = conv(g, x, 3, 4, 3, 1), b = conv(g, x, 3, 5, 1, 1);
  int c = TU_OP(g, Concat, a, b);
  set_int(g, c, "axis", 1);
  output(g, conv(g, c, 9, 2, 3, 1));
  kiln_model *m = optimize(g, LAYOUT_ONLY);
  assert_int_equal(count(m, KL_OP_Transpose), 1);
  assert_int_equal(kl_attr_int(first(m, KL_OP_Concat), "axis", 0), 3);
  kiln_model_free(m);
}

/* An elementwise op with a per-channel constant: the constant is permuted. */
static void test_constant_permuted(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int a = TU_OP(g, Add, conv(g, x, 3, 4, 3, 1), cst(g, 3, (int64_t[]){4, 1, 1}, -1, 1));
  a = TU_OP(g, Mul, a, cst(g, 4, (int64_t[]){1, 1, 9, 1}, -1, 1)); /* along H */
  output(g, conv(g, a, 4, 3, 3, 1));
  kiln_model *m = optimize(g, LAYOUT_ONLY);
  assert_int_equal(count(m, KL_OP_Transpose), 1);
  const kl_node *add = first(m, KL_OP_Add), *mul = first(m, KL_OP_Mul);
  const kl_type *c = &m->g->values[add->in[1]].type, *h = &m->g->values[mul->in[1]].type;
  assert_int_equal(c->rank, 4);
  assert_int_equal(c->dims[3].size, 4);
  assert_int_equal(c->dims[1].size, 1);
  assert_int_equal(h->dims[1].size, 9);
  assert_int_equal(h->dims[3].size, 1);
  kiln_model_free(m);
}

/* A BatchNormalization between convolutions (as in DenseNet, where nothing folds it)
 * becomes a Mul and an Add by channels-last constants. */
static void test_batchnorm(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int64_t c[1] = {4};
  int bn = TU_OP(g, BatchNormalization, conv(g, x, 3, 4, 3, 1), cst(g, 1, c, 0.5f, 1.5f),
                 cst(g, 1, c, -1, 1), cst(g, 1, c, -1, 1), cst(g, 1, c, 0.5f, 2));
  output(g, conv(g, TU_OP(g, Relu, bn), 4, 3, 3, 1));
  kiln_model *m = optimize(g, LAYOUT_ONLY);
  assert_int_equal(count(m, KL_OP_Transpose), 1);
  assert_int_equal(count(m, KL_OP_BatchNormalization), 0);
  const kl_type *s = &m->g->values[first(m, KL_OP_Mul)->in[1]].type;
  const kl_type *t = &m->g->values[first(m, KL_OP_Add)->in[1]].type;
  assert_int_equal(s->rank, 4);
  assert_int_equal(s->dims[3].size, 4);
  assert_int_equal(t->dims[3].size, 4);
  kiln_model_free(m);
}

static int i64s(kl_graph *g, int n, const int64_t *v) {
  return tu_graph_const(g, NULL, KL_I64, 1, (const int64_t[]){n}, v);
}

/* ShuffleNet's unit: Concat, the channel shuffle (Reshape, Transpose, Reshape), and
 * Slices (or a Split) of the channel halves, all on the channels-last tensors. */
static void test_channel_shuffle(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){B, 3, 5, 7});
  int c = TU_OP(g, Concat, conv(g, x, 3, 4, 3, 1), conv(g, x, 3, 4, 1, 1));
  set_int(g, c, "axis", 1);
  int r = TU_OP(g, Reshape, c, i64s(g, 5, (int64_t[]){-1, 2, 4, 5, 7}));
  int t = TU_OP(g, Transpose, r);
  set_ints(g, t, "perm", 5, (int64_t[]){0, 2, 1, 3, 4});
  int sh = TU_OP(g, Reshape, t, i64s(g, 4, (int64_t[]){0, 8, 5, 7}));
  int lo = TU_OP(g, Slice, sh, i64s(g, 1, (int64_t[]){0}), i64s(g, 1, (int64_t[]){3}),
                 i64s(g, 1, (int64_t[]){1}));
  int hi = TU_OP(g, Slice, sh, i64s(g, 2, (int64_t[]){3, 1}), i64s(g, 2, (int64_t[]){8, 5}),
                 i64s(g, 2, (int64_t[]){-3, 2}));
  int halves[2] = {tu_graph_value(g, NULL), tu_graph_value(g, NULL)};
  int sp = tu_graph_node(g, KL_OP_Split, "split", 1, &sh, 2, halves);
  assert_int_equal(kl_node_set_int(g, sp, "axis", 1, NULL), KILN_OK);
  assert_int_equal(kl_node_set_int(g, sp, "num_outputs", 2, NULL), KILN_OK);
  output(g, conv(g, lo, 3, 2, 3, 1));
  output(g, conv(g, hi, 5, 2, 1, 1));
  output(g, conv(g, halves[0], 4, 2, 1, 1));
  output(g, conv(g, halves[1], 4, 2, 3, 1));
  kiln_model *m = optimize(g, O2_LAYOUT);
  assert_int_equal(count_nhwc(m), 6);
  assert_int_equal(count(m, KL_OP_Transpose), 5); /* the shuffle, out four times */
  assert_int_equal(kl_attr_int(first(m, KL_OP_Split), "axis", 0), 3);
  int64_t want[5] = {0, 1, 2, 4, 3};
  int shuffles = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    const int64_t *p;
    if (m->g->nodes[i].op == KL_OP_Transpose && kl_attr_ints(&m->g->nodes[i], "perm", &p) == 5) {
      assert_memory_equal(p, want, sizeof want);
      shuffles++;
    }
  }
  assert_int_equal(shuffles, 1);
  kiln_model_free(m);
}

/* A convolution whose output is also a graph output: the output keeps its name and
 * layout through a Transpose, while the next convolution reads the channels-last
 * tensor directly. */
static void test_conv_output_is_graph_output(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int a = conv(g, x, 3, 4, 3, 1);
  output(g, a);
  output(g, conv(g, a, 4, 2, 3, 1));
  kiln_model *m = optimize(g, O2_LAYOUT);
  assert_int_equal(count(m, KL_OP_Transpose), 2);
  assert_int_equal(count_nhwc(m), 2);
  kiln_model_free(m);
}

/* ConvTranspose, AveragePool (count_include_pad), grouped and dilated convolutions,
 * GlobalMaxPool: reference kernels against oneDNN at awkward sizes. */
static void test_other_forms(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){3, 6, 5, 11});
  int w = cst(g, 4, (int64_t[]){6, 2, 3, 3}, -0.5f, 0.5f); /* 3 groups, dilation 2 */
  int a = TU_OP(g, Conv, x, w);
  set_int(g, a, "group", 3);
  set_ints(g, a, "dilations", 2, (int64_t[]){2, 2});
  set_ints(g, a, "pads", 4, (int64_t[]){2, 1, 2, 3});
  int t = TU_OP(g, ConvTranspose, a, cst(g, 4, (int64_t[]){6, 4, 3, 3}, -0.5f, 0.5f),
                cst(g, 1, (int64_t[]){4}, -1, 1));
  set_ints(g, t, "strides", 2, (int64_t[]){2, 2});
  set_ints(g, t, "output_padding", 2, (int64_t[]){1, 0});
  int p = TU_OP(g, AveragePool, TU_OP(g, LeakyRelu, t));
  set_ints(g, p, "kernel_shape", 2, (int64_t[]){3, 2});
  set_ints(g, p, "pads", 4, (int64_t[]){1, 0, 1, 1});
  set_int(g, p, "count_include_pad", 1);
  output(g, p);
  output(g, TU_OP(g, GlobalMaxPool, p));
  kiln_model *m = optimize(g, O2_LAYOUT);
  assert_int_equal(count_nhwc(m), 4);
  assert_int_equal(count(m, KL_OP_KilnFusedConvTranspose), 1);
  assert_int_equal(count(m, KL_OP_KilnNhwcAveragePool), 1);
  assert_int_equal(count(m, KL_OP_KilnNhwcGlobalMaxPool), 1);
  /* out to both outputs: the pooled [3, 1, 1, 4] moves only axes of size 1, so its
   * way back is a Reshape (eliminate), not a copy */
  assert_int_equal(count(m, KL_OP_Transpose), 1);
  assert_int_equal(count(m, KL_OP_Reshape), 1);
  kiln_model_free(m);
}

/* Where it must not fire: 1-D and 3-D convolutions, pooling with no convolution
 * before it, an AveragePool with ceil_mode (oneDNN counts its windows otherwise), an
 * elementwise op whose other operand is a plain tensor, and a Concat of a plain
 * tensor. */
static void test_must_not_fire(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x1 = tu_graph_input(g, "x1", KL_F32, 3, (int64_t[]){2, 3, 10});
  output(g, TU_OP(g, Conv, x1, cst(g, 3, (int64_t[]){4, 3, 3}, -1, 1)));
  int x3 = tu_graph_input(g, "x3", KL_F32, 5, (int64_t[]){1, 2, 4, 5, 6});
  output(g, TU_OP(g, Conv, x3, cst(g, 5, (int64_t[]){3, 2, 2, 2, 2}, -1, 1)));
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int p = TU_OP(g, MaxPool, x);
  set_ints(g, p, "kernel_shape", 2, (int64_t[]){2, 2});
  output(g, p);
  kiln_model *m = optimize(g, LAYOUT_ONLY);
  assert_int_equal(count_nhwc(m), 0);
  assert_int_equal(count(m, KL_OP_Transpose), 0);
  assert_int_equal(fired(m), 0);
  kiln_model_free(m);

  g = tu_graph_new();
  x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int other = tu_graph_input(g, "other", KL_F32, 4, (int64_t[]){2, 4, 9, 7});
  int a = conv(g, x, 3, 4, 3, 1);
  int ap = TU_OP(g, AveragePool, a);
  set_ints(g, ap, "kernel_shape", 2, (int64_t[]){2, 2});
  set_ints(g, ap, "strides", 2, (int64_t[]){2, 2});
  set_int(g, ap, "ceil_mode", 1);
  output(g, ap);
  output(g, TU_OP(g, Add, a, other));
  int c = TU_OP(g, Concat, a, other);
  set_int(g, c, "axis", 1);
  output(g, c);
  m = optimize(g, LAYOUT_ONLY);
  assert_int_equal(count_nhwc(m), 1); /* the Conv alone */
  assert_int_equal(count(m, KL_OP_AveragePool), 1);
  assert_int_equal(count(m, KL_OP_Transpose), 1);
  expect_perm(&m->g->nodes[node_of(m->g, first(m, KL_OP_Add)->in[0])], kl_layout_to_nchw);
  kiln_model_free(m);
}

/* By level: -O3 runs the pass exactly when the backend runs convolutions on oneDNN,
 * never for reference sessions; -O2 never. */
static void test_levels(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  output(g, TU_OP(g, Relu, conv(g, conv(g, x, 3, 4, 3, 1), 4, 4, 3, 1)));
  void *buf;
  size_t len;
  assert_int_equal(kl_onnx_export(g, &buf, &len, NULL), KILN_OK);
  kl_graph_free(g);
  kiln_model *o3 = load(buf, len, (opt){3, NULL, false});
  kiln_model *o3_ref = load(buf, len, (opt){3, NULL, true});
  kiln_model *o2 = load(buf, len, (opt){2, NULL, false});
  kiln_model *off = load(buf, len, (opt){3, "-layout", false});
  free(buf);
  assert_int_equal(count_nhwc(o3), kl_cpu_native_nhwc() ? 2 : 0);
  assert_int_equal(count_nhwc(o3_ref), 0);
  assert_int_equal(count_nhwc(o2), 0);
  assert_int_equal(count_nhwc(off), 0);
  assert_int_equal(o2->g->n_nodes, off->g->n_nodes); /* -O3 without it is -O2 */
  compare(o2, o3);
  kiln_model_free(o3);
  kiln_model_free(o3_ref);
  kiln_model_free(o2);
  kiln_model_free(off);
}

/* The optimized graph saved as ONNX reloads at -O0 as it was, and runs the same. */
static void test_round_trip(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int y = TU_OP(g, MaxPool, TU_OP(g, Relu, conv(g, x, 3, 4, 3, 1)));
  set_ints(g, y, "kernel_shape", 2, (int64_t[]){2, 2});
  output(g, conv(g, y, 4, 2, 1, 1));
  kiln_model *m = optimize(g, O2_LAYOUT);
  void *buf;
  size_t len;
  assert_int_equal(kl_onnx_export(m->g, &buf, &len, NULL), KILN_OK);
  kiln_model *again = load(buf, len, (opt){0, NULL, false});
  kiln_model *slow = load(buf, len, (opt){0, NULL, true});
  free(buf);
  assert_int_equal(again->g->n_nodes, m->g->n_nodes);
  for (int i = 0; i < m->g->n_nodes; i++)
    assert_int_equal(again->g->nodes[i].op, m->g->nodes[i].op);
  assert_int_equal(count_nhwc(again), 3);
  compare(m, again);
  compare(m, slow);
  kiln_model_free(again);
  kiln_model_free(slow);
  kiln_model_free(m);
}

/* ---- the channels-last ops ---- */

/* Inference: [N, H, W, C] in and out; any other rank is refused. */
static void test_nhwc_infer(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "MaxPool", 1, 1);
  f->g->nodes[f->node].op = KL_OP_KilnNhwcMaxPool;
  TU_ATTR_INTS(f, "kernel_shape", 3, 2);
  TU_ATTR_INTS(f, "strides", 2, 2);
  tu_input(f, 0, TY(KL_F32, B, 9, 8, 5));
  tu_expect_ok(f, TY(KL_F32, B, 4, 4, 5));
  tu_input(f, 0, TY(KL_F32, 2, 9, 8));
  tu_expect_fail(f, KILN_ERR_SHAPE, "[N, H, W, C]");
}

/* The reference kernel of a channels-last pooling against the plain one on the
 * transposed data, at sizes with tails. */
static void test_nhwc_pool_kernel(void **state) {
  tu_fixture *f = *state;
  const int64_t n = 2, c = 3, h = 5, w = 7;
  double plain[2 * 3 * 5 * 7], nhwc[2 * 5 * 7 * 3];
  uint32_t r = 99;
  for (int i = 0; i < n * c * h * w; i++) plain[i] = tu_rand_f32(&r, -3, 3);
  for (int64_t a = 0; a < n; a++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++)
          nhwc[((a * h + y) * w + x) * c + ch] = plain[((a * c + ch) * h + y) * w + x];
  tu_one_node(f, "AveragePool", 1, 1);
  TU_ATTR_INTS(f, "kernel_shape", 2, 3);
  TU_ATTR_INTS(f, "pads", 1, 1, 0, 1);
  TU_ATTR_INTS(f, "strides", 2, 2);
  tu_tensor(f, 0, KL_F32, 4, (int64_t[]){n, c, h, w}, plain);
  tu_expect_run(f);
  kl_tensor want = f->tout[0];
  int64_t oh = want.dims[2], ow = want.dims[3], count_out = n * c * oh * ow;
  double *expect = malloc(sizeof(double) * (size_t)count_out);
  assert_non_null(expect);
  for (int64_t a = 0; a < n; a++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t y = 0; y < oh; y++)
        for (int64_t x = 0; x < ow; x++)
          expect[((a * oh + y) * ow + x) * c + ch] =
              ((const float *)want.data)[((a * c + ch) * oh + y) * ow + x];
  f->g->nodes[f->node].op = KL_OP_KilnNhwcAveragePool;
  tu_tensor(f, 0, KL_F32, 4, (int64_t[]){n, h, w, c}, nhwc);
  tu_expect_run(f);
  tu_assert_dims(&f->tout[0], 4, (int64_t[]){n, oh, ow, c});
  tu_expect_values(f, 0, TU_EXACT, expect, count_out);
  free(expect);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_chain),
      cmocka_unit_test(test_residual),
      cmocka_unit_test(test_squeeze_excitation),
      cmocka_unit_test(test_reduce_mean_pooling),
      cmocka_unit_test(test_concat),
      cmocka_unit_test(test_constant_permuted),
      cmocka_unit_test(test_batchnorm),
      cmocka_unit_test(test_channel_shuffle),
      cmocka_unit_test(test_conv_output_is_graph_output),
      cmocka_unit_test(test_other_forms),
      cmocka_unit_test(test_must_not_fire),
      cmocka_unit_test(test_levels),
      cmocka_unit_test(test_round_trip),
      TU_TEST(test_nhwc_infer),
      TU_TEST(test_nhwc_pool_kernel),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
