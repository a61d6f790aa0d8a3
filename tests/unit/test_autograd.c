/* The gradient rules (src/train/rules.c) against finite differences in float64.
 *
 * Each case builds a small graph whose weights are float64 constants with random
 * values; the loss is sum(y * R) for a random R of y's shape, so that every element of
 * y matters with its own weight. kl_autograd differentiates it; the session runs it on
 * the reference kernels; each weight's gradient is compared, at up to 16 elements,
 * with the central difference (L(x + h) - L(x - h)) / 2h of the loss. */
#include "kiln.h"
#include "runtime/runtime.h"
#include "train/autograd.h"
#include "train/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAX_P 6

typedef struct built {
  int y;            /* the output compared */
  int p[MAX_P];     /* the weights differentiated */
  int n_p;
} built;

typedef void (*builder)(kl_graph *g, uint32_t *rng, built *b);

/* A float64 constant of random values in [lo, hi]. */
static int rand_const(kl_graph *g, uint32_t *rng, int rank, const int64_t *dims, double lo,
                      double hi) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
  assert_non_null(d);
  for (int64_t i = 0; i < n; i++) d[i] = lo + (hi - lo) * tu_rand_f32(rng, 0, 1);
  int v = tu_graph_const(g, NULL, KL_F64, rank, dims, d);
  free(d);
  return v;
}

static int param(kl_graph *g, uint32_t *rng, built *b, int rank, const int64_t *dims, double lo,
                 double hi) {
  int v = rand_const(g, rng, rank, dims, lo, hi);
  b->p[b->n_p++] = v;
  return v;
}
#define P(lo, hi, ...) param(g, rng, b, DIMS(__VA_ARGS__), lo, hi)
#define W(...) P(-1, 1, __VA_ARGS__)

static int ints(kl_graph *g, int64_t n, const int64_t *v) {
  int64_t dims[1] = {n};
  return tu_graph_const(g, NULL, KL_I64, 1, dims, v);
}

static int node1(kl_graph *g, const char *op, int n_in, const int *in) {
  kl_op k = strncmp(op, "kiln.", 5) == 0 ? kl_op_lookup(KL_DOMAIN_KILN, op + 5)
                                          : kl_op_lookup(KL_DOMAIN_ONNX, op);
  if (k == KL_OP_COUNT) fail_msg("op %s is not in this build", op);
  return tu_graph_op(g, k, n_in, in);
}

/* the last node's attributes */
static void a_int(kl_graph *g, const char *name, int64_t v) {
  assert_int_equal(kl_node_set_int(g, g->n_nodes - 1, name, v, NULL), KILN_OK);
}
static void a_ints(kl_graph *g, const char *name, int n, const int64_t *v) {
  assert_int_equal(kl_node_set_ints(g, g->n_nodes - 1, name, v, n, NULL), KILN_OK);
}
static void a_float(kl_graph *g, const char *name, float v) {
  assert_int_equal(kl_node_set_float(g, g->n_nodes - 1, name, v, NULL), KILN_OK);
}
static void a_str(kl_graph *g, const char *name, const char *v) {
  assert_int_equal(kl_node_set_string(g, g->n_nodes - 1, name, v, NULL), KILN_OK);
}
static void a_strs(kl_graph *g, const char *name, int n, const char *const *v) {
  assert_int_equal(kl_node_set_strings(g, g->n_nodes - 1, name, v, n, NULL), KILN_OK);
}

/* Runs g (no inputs) on the reference kernels; out[k] gets a malloc'd copy of output
 * k as doubles. */
static void run_graph(kl_graph *g, int n_out, double **out, int64_t *counts) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "opt_level", 0), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "reference", 1), KILN_OK);
  kiln_model *m = NULL;
  assert_int_equal(kl_model_create(o, &m), KILN_OK);
  m->g = g;
  kl_err e = {0};
  kiln_status st = kl_graph_toposort(g, &e);
  if (st == KILN_OK) st = kl_graph_verify(g, &e);
  if (st == KILN_OK) st = kl_graph_infer(g, &e);
  if (st != KILN_OK) fail_msg("graph: %s", e.msg);
  if (kl_model_finish(m) != KILN_OK) fail_msg("model: %s", kiln_model_error(m));
  kiln_session *s = NULL;
  if (kiln_session_create(m, o, &s) != KILN_OK) fail_msg("session: %s", kiln_session_error(s));
  if (kiln_session_run(s) != KILN_OK) fail_msg("run: %s", kiln_session_error(s));
  for (int k = 0; k < n_out; k++) {
    kiln_tensor_info info;
    const void *data;
    assert_int_equal(kiln_session_get_output(s, k, &info, &data), KILN_OK);
    int64_t n = 1;
    for (int d = 0; d < info.rank; d++) n *= info.dims[d];
    out[k] = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) out[k][i] = kl_load_f64(data, (kl_dtype)info.dtype, (size_t)i);
    if (counts) counts[k] = n;
  }
  kiln_session_free(s);
  kiln_model_free(m);
  kiln_options_free(o);
}

/* The graph of a case with loss sum(y * R); its weights perturbed at (pi, at) by h. */
static kl_graph *make(builder build, uint32_t seed, built *b, int *loss, int pi, int64_t at,
                      double h) {
  kl_graph *g = tu_graph_new();
  uint32_t rng = seed;
  memset(b, 0, sizeof *b);
  build(g, &rng, b);
  if (pi >= 0) ((double *)g->values[b->p[pi]].data)[at] += h;
  kl_err e = {0};
  if (kl_graph_infer(g, &e) != KILN_OK) fail_msg("infer: %s", e.msg);
  const kl_type *t = &g->values[b->y].type;
  int64_t dims[KL_MAX_RANK];
  for (int d = 0; d < t->rank; d++) dims[d] = t->dims[d].size;
  int r = rand_const(g, &rng, t->rank, dims, -1, 1);
  int prod = TU_OP(g, Mul, b->y, r);
  *loss = TU_OP(g, ReduceSum, prod);
  a_int(g, "keepdims", 0);
  g->n_outputs = 0;
  assert_int_equal(kl_graph_add_output(g, *loss, NULL), KILN_OK);
  if (kl_graph_infer(g, &e) != KILN_OK) fail_msg("infer: %s", e.msg);
  return g;
}

static double loss_at(builder build, uint32_t seed, int pi, int64_t at, double h) {
  built b;
  int loss;
  kl_graph *g = make(build, seed, &b, &loss, pi, at, h);
  double *out[1];
  run_graph(g, 1, out, NULL);
  double v = out[0][0];
  free(out[0]);
  return v;
}

static void check_case(const char *name, builder build) {
  uint32_t seed = 12345;
  built b;
  int loss;
  kl_graph *g = make(build, seed, &b, &loss, -1, 0, 0);
  bool *trainable = calloc((size_t)g->n_values, sizeof(bool));
  for (int i = 0; i < b.n_p; i++) trainable[b.p[i]] = true;
  int *grads = NULL;
  kl_err e = {0};
  if (kl_autograd(g, loss, trainable, &grads, &e) != KILN_OK) fail_msg("%s: %s", name, e.msg);
  int64_t numel[MAX_P];
  for (int i = 0; i < b.n_p; i++) {
    if (grads[b.p[i]] < 0) fail_msg("%s: weight %d got no gradient", name, i);
    assert_int_equal(kl_graph_add_output(g, grads[b.p[i]], NULL), KILN_OK);
    assert_true(kl_type_numel(&g->values[b.p[i]].type, &numel[i]));
  }
  free(trainable);
  free(grads);
  double *out[MAX_P + 1];
  int64_t counts[MAX_P + 1];
  run_graph(g, 1 + b.n_p, out, counts);
  for (int i = 0; i < b.n_p; i++) {
    if (counts[1 + i] != numel[i])
      fail_msg("%s: weight %d has %lld elements, its gradient %lld", name, i,
               (long long)numel[i], (long long)counts[1 + i]);
    int64_t step = numel[i] > 16 ? numel[i] / 16 + 1 : 1;
    for (int64_t at = 0; at < numel[i]; at += step) {
      double h = 1e-6;
      double fd = (loss_at(build, seed, i, at, h) - loss_at(build, seed, i, at, -h)) / (2 * h);
      double got = out[1 + i][at];
      if (fabs(got - fd) > 1e-6 * (1 + fabs(fd)))
        fail_msg("%s: d loss / d weight %d [%lld]: autograd %.12g, finite difference %.12g",
                 name, i, (long long)at, got, fd);
    }
  }
  for (int k = 0; k <= b.n_p; k++) free(out[k]);
}

/* ---- the cases ---- */

static void c_add_bcast(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 3, 4), y = W(3, 1);
  b->y = TU_OP(g, Add, x, y);
}
static void c_arith(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 3, 4), y = W(4), z = W(3, 1), d = P(1, 2, 2, 1, 4);
  b->y = TU_OP(g, Div, TU_OP(g, Mul, TU_OP(g, Sub, x, y), z), d);
}
static void c_neg_pow(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(3, 5);
  double three = 3.0;
  int c = tu_graph_const(g, NULL, KL_F64, 0, NULL, &three);
  b->y = TU_OP(g, Neg, TU_OP(g, Pow, x, c));
}
static void c_matmul_rows(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 3, 4), w = W(4, 5);
  b->y = TU_OP(g, MatMul, x, w);
}
static void c_matmul_batched(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 3, 4), w = W(2, 4, 5);
  b->y = TU_OP(g, MatMul, x, w);
}
static void c_matmul_bcast(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(3, 4), w = W(2, 4, 5);
  b->y = TU_OP(g, MatMul, x, w);
}
static void c_gemm_trans(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(4, 3), w = W(5, 4), c = W(5);
  b->y = TU_OP(g, Gemm, x, w, c);
  a_int(g, "transA", 1);
  a_int(g, "transB", 1);
  a_float(g, "alpha", 0.7f);
  a_float(g, "beta", 1.25f);
}
static void c_gemm_plain(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(3, 4), w = W(4, 5), c = W(3, 5);
  b->y = TU_OP(g, Gemm, x, w, c);
}
static void c_shapes(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 3, 4), w = W(4, 6);
  int t = TU_OP(g, Transpose, x);
  a_ints(g, "perm", 3, (const int64_t[]){2, 0, 1});
  int r = TU_OP(g, Reshape, t, ints(g, 2, (const int64_t[]){4, 6}));
  int f = TU_OP(g, Flatten, TU_OP(g, Unsqueeze, TU_OP(g, Mul, r, w), ints(g, 1, (const int64_t[]){0})));
  a_int(g, "axis", 1);
  b->y = f;
}
static void c_concat_split(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 3), y = W(2, 5);
  int c = TU_OP(g, Concat, x, y, x);
  a_int(g, "axis", 1);
  int out[2] = {tu_graph_value(g, NULL), tu_graph_value(g, NULL)};
  int in[2] = {c, ints(g, 2, (const int64_t[]){6, 5})};
  tu_graph_node(g, KL_OP_Split, "split", 2, in, 2, out);
  a_int(g, "axis", 1);
  int s0 = TU_OP(g, Slice, out[0], ints(g, 1, (const int64_t[]){1}), ints(g, 1, (const int64_t[]){6}),
                 ints(g, 1, (const int64_t[]){1}));
  b->y = TU_OP(g, Mul, s0, out[1]);
}
static void c_where_expand(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(3, 1), y = W(4);
  unsigned char cond[12];
  for (int i = 0; i < 12; i++) cond[i] = (unsigned char)(i % 3 == 0);
  int c = tu_graph_const(g, NULL, KL_BOOL, 2, (const int64_t[]){3, 4}, cond);
  int e = TU_OP(g, Expand, x, ints(g, 2, (const int64_t[]){3, 4}));
  b->y = TU_OP(g, Where, c, e, y);
}
static void c_unary(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(3, 7), p = P(0.5, 2, 3, 7);
  int y = TU_OP(g, Add, TU_OP(g, Relu, x), TU_OP(g, Sigmoid, x));
  y = TU_OP(g, Add, y, TU_OP(g, Tanh, x));
  y = TU_OP(g, Add, y, TU_OP(g, Erf, x));
  y = TU_OP(g, Add, y, TU_OP(g, Exp, x));
  y = TU_OP(g, Add, y, TU_OP(g, Log, p));
  y = TU_OP(g, Add, y, TU_OP(g, Sqrt, p));
  y = TU_OP(g, Add, y, TU_OP(g, Reciprocal, p));
  y = TU_OP(g, Add, y, TU_OP(g, LeakyRelu, x));
  a_float(g, "alpha", 0.1f);
  y = TU_OP(g, Add, y, TU_OP(g, Gelu, x));
  y = TU_OP(g, Add, y, TU_OP(g, Gelu, x));
  a_str(g, "approximate", "tanh");
  double lo = -0.5, hi = 0.4;
  int l = tu_graph_const(g, NULL, KL_F64, 0, NULL, &lo), h = tu_graph_const(g, NULL, KL_F64, 0, NULL, &hi);
  y = TU_OP(g, Add, y, TU_OP(g, Clip, x, l, h));
  b->y = y;
}
static void c_softmax(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 5, 3);
  int s = TU_OP(g, Softmax, x);
  a_int(g, "axis", 1);
  int l = TU_OP(g, LogSoftmax, x);
  b->y = TU_OP(g, Add, s, l);
}
static void c_conv(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 4, 7, 6), w = W(6, 2, 3, 3), bias = W(6);
  b->y = TU_OP(g, Conv, x, w, bias);
  a_int(g, "group", 2);
  a_ints(g, "strides", 2, (const int64_t[]){2, 1});
  a_ints(g, "pads", 4, (const int64_t[]){1, 0, 1, 2});
  a_ints(g, "dilations", 2, (const int64_t[]){1, 2});
}
static void c_pools(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 3, 7, 6);
  int m = TU_OP(g, MaxPool, x);
  a_ints(g, "kernel_shape", 2, (const int64_t[]){3, 2});
  a_ints(g, "strides", 2, (const int64_t[]){2, 2});
  a_ints(g, "pads", 4, (const int64_t[]){1, 0, 1, 0});
  int a = TU_OP(g, AveragePool, m);
  a_ints(g, "kernel_shape", 2, (const int64_t[]){2, 2});
  a_int(g, "ceil_mode", 1);
  a_int(g, "count_include_pad", 0);
  b->y = TU_OP(g, Mul, TU_OP(g, GlobalAveragePool, x), TU_OP(g, GlobalAveragePool, a));
}
static void c_norms(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(4, 3, 5), s = P(0.5, 1.5, 3), bias = W(3), mean = W(3), var = P(0.5, 1.5, 3);
  int out[3] = {tu_graph_value(g, NULL), tu_graph_value(g, NULL), tu_graph_value(g, NULL)};
  kl_op bt = kl_op_lookup(KL_DOMAIN_KILN, "BatchNormTrain");
  if (bt == KL_OP_COUNT) fail_msg("kiln.BatchNormTrain is not in this build");
  int in[5] = {x, s, bias, mean, var};
  tu_graph_node(g, bt, "bn", 5, in, 3, out);
  b->n_p = 3; /* the running statistics are no weights */
  int ls = W(5), lb = W(5);
  int ln = TU_OP(g, LayerNormalization, out[0], ls, lb);
  a_int(g, "axis", -1);
  b->y = ln;
}
/* InstanceNormalization over [N, C, H, W] and GroupNormalization (2 groups of 3
 * channels over [N, 6, L]) with X, scale and B all weights; their epsilons matter. */
static void c_channel_norms(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 3, 2, 3), s = P(0.5, 1.5, 3), bias = W(3);
  int in = TU_OP(g, InstanceNormalization, x, s, bias);
  a_float(g, "epsilon", 0.01f);
  int x2 = W(2, 6, 4), s2 = P(0.5, 1.5, 6), bias2 = W(6);
  int gn = TU_OP(g, GroupNormalization, x2, s2, bias2);
  a_int(g, "num_groups", 2);
  a_float(g, "epsilon", 0.02f);
  /* one output: the instance norm's pooled values scale the group norm's rows */
  int pooled = TU_OP(g, ReduceMean, in, ints(g, 2, (const int64_t[]){2, 3}));
  a_int(g, "keepdims", 0); /* [2, 3] */
  int scale = TU_OP(g, Tile, pooled, ints(g, 2, (const int64_t[]){1, 2})); /* [2, 6] */
  b->y = TU_OP(g, Mul, gn, TU_OP(g, Unsqueeze, scale, ints(g, 1, (const int64_t[]){2})));
}
/* Resize: nearest upsampling by scales, linear (half_pixel) to sizes that do not divide,
 * and cubic antialiased downsampling: X a weight in each. */
static void c_resize(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(1, 2, 3, 4);
  double sc[4] = {1, 1, 2, 1.5};
  int64_t sz[4] = {1, 2, 5, 7}, four = 4;
  int scales = tu_graph_const(g, NULL, KL_F64, 1, &four, sc);
  int near = tu_graph_op(g, KL_OP_Resize, 3, (const int[]){x, KL_ABSENT, scales});
  a_str(g, "mode", "nearest");
  a_str(g, "coordinate_transformation_mode", "asymmetric");
  a_str(g, "nearest_mode", "floor");
  int lin = tu_graph_op(g, KL_OP_Resize, 4, (const int[]){x, KL_ABSENT, KL_ABSENT, ints(g, 4, sz)});
  a_str(g, "mode", "linear");
  int x2 = W(1, 1, 9, 8);
  int64_t small[4] = {1, 1, 4, 3};
  int cub = tu_graph_op(g, KL_OP_Resize, 4, (const int[]){x2, KL_ABSENT, KL_ABSENT, ints(g, 4, small)});
  a_str(g, "mode", "cubic");
  a_int(g, "antialias", 1);
  /* [1, 2, 6, 6] and [1, 2, 5, 7] and [1, 1, 4, 3]: summed through their means */
  int64_t axes[2] = {2, 3};
  int m1 = TU_OP(g, ReduceMean, TU_OP(g, Mul, near, near), ints(g, 2, axes));
  int m2 = TU_OP(g, ReduceMean, TU_OP(g, Mul, lin, lin), ints(g, 2, axes));
  int m3 = TU_OP(g, ReduceSum, TU_OP(g, Mul, cub, cub), ints(g, 2, axes));
  b->y = TU_OP(g, Add, TU_OP(g, Add, m1, m2), m3);
}
/* Tile over three dims with a repeat of 1 among them, and a rank-1 one. */
static void c_tile(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 3, 2), v = W(3);
  int t = TU_OP(g, Tile, x, ints(g, 3, (const int64_t[]){3, 1, 2})); /* [6, 3, 4] */
  int tv = TU_OP(g, Tile, v, ints(g, 1, (const int64_t[]){4}));      /* [12] */
  b->y = TU_OP(g, Mul, t, TU_OP(g, Reshape, tv, ints(g, 3, (const int64_t[]){1, 3, 4})));
}
static void c_gather_reduce(kl_graph *g, uint32_t *rng, built *b) {
  int emb = W(7, 4);
  int idx = tu_graph_const(g, NULL, KL_I64, 2, (const int64_t[]){2, 3},
                           (const int64_t[]){1, 6, 1, -1, 0, 3});
  int e = TU_OP(g, Gather, emb, idx);
  int m = TU_OP(g, ReduceMean, e, ints(g, 1, (const int64_t[]){1}));
  int s = TU_OP(g, ReduceSum, e, ints(g, 1, (const int64_t[]){-2}));
  a_int(g, "keepdims", 0);
  b->y = TU_OP(g, Mul, m, TU_OP(g, Unsqueeze, s, ints(g, 1, (const int64_t[]){1})));
}
static void c_loss_ce(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(5, 4, 3);
  int tgt = tu_graph_const(g, NULL, KL_I64, 2, (const int64_t[]){5, 3},
                           (const int64_t[]){0, 3, 2, 1, 1, 0, 2, 2, 3, 0, -100, 1, 3, 3, 0});
  int l = node1(g, "kiln.Loss", 2, (const int[]){x, tgt});
  a_str(g, "kind", "cross_entropy");
  a_float(g, "label_smoothing", 0.1f);
  b->y = l;
}
static void c_loss_mse_bce(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(4, 3), t = rand_const(g, rng, 2, (const int64_t[]){4, 3}, 0, 1);
  int l1 = node1(g, "kiln.Loss", 2, (const int[]){x, t});
  a_str(g, "kind", "mse");
  int l2 = node1(g, "kiln.Loss", 2, (const int[]){x, t});
  a_str(g, "kind", "bce_logits");
  int l3 = node1(g, "kiln.Loss", 2, (const int[]){x, t});
  a_str(g, "kind", "smooth_l1");
  a_str(g, "reduction", "sum");
  b->y = TU_OP(g, Add, TU_OP(g, Add, l1, l2), l3);
}

static void c_pad(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 3, 4);
  int p = TU_OP(g, Pad, x, ints(g, 4, (const int64_t[]){1, 0, 2, 3}),
                tu_graph_const(g, NULL, KL_F64, 0, NULL, (const double[]){0.5}),
                ints(g, 2, (const int64_t[]){1, 2}));
  b->y = TU_OP(g, Mul, p, p);
}

static void c_extremes(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(2, 3, 5), y = W(3, 5), z = W(5);
  int mx = TU_OP(g, Max, x, y), mn = TU_OP(g, Min, y, z);
  int s = TU_OP(g, Sum, mx, mn, z), m = TU_OP(g, Mean, s, x);
  int r1 = TU_OP(g, ReduceMax, m, ints(g, 1, (const int64_t[]){1}));
  a_int(g, "keepdims", 0);
  int r2 = TU_OP(g, ReduceMin, m, ints(g, 1, (const int64_t[]){-1}));
  int gp = TU_OP(g, GlobalMaxPool, TU_OP(g, Unsqueeze, m, ints(g, 1, (const int64_t[]){0})));
  b->y = TU_OP(g, Add, TU_OP(g, Add, TU_OP(g, Unsqueeze, r1, ints(g, 1, (const int64_t[]){1})),
                                  r2),
               TU_OP(g, ReduceSum, gp));
}

/* A recurrent node: inputs in[0..n_in-1] (KL_ABSENT for an absent one), n_out outputs
 * into out[], hidden_size set. */
static void rnn_node(kl_graph *g, kl_op op, int n_in, const int *in, int n_out, int *out,
                     int64_t hidden) {
  for (int k = 0; k < n_out; k++) out[k] = tu_graph_value(g, NULL);
  tu_graph_node(g, op, op == KL_OP_LSTM ? "lstm" : "gru", n_in, in, n_out, out);
  a_int(g, "hidden_size", hidden);
}

/* LSTM [seq 3, batch 2, input 4] -> hidden 3, with bias and both initial states; Y, Y_h
 * and Y_c all reach the loss. */
static void c_lstm(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(3, 2, 4), w = W(1, 12, 4), r = W(1, 12, 3), bias = W(1, 24), h0 = W(1, 2, 3),
      c0 = W(1, 2, 3), out[3];
  rnn_node(g, KL_OP_LSTM, 7, (const int[]){x, w, r, bias, KL_ABSENT, h0, c0}, 3, out, 3);
  b->y = TU_OP(g, Add, TU_OP(g, Add, out[0], out[1]), out[2]);
}

/* No bias, no initial states; only Y_h reaches the loss (Y has no gradient). */
static void c_lstm_last(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(4, 3, 2), w = W(1, 8, 2), r = W(1, 8, 2), out[2];
  rnn_node(g, KL_OP_LSTM, 3, (const int[]){x, w, r}, 2, out, 2);
  a_strs(g, "activations", 3, (const char *const[]){"Sigmoid", "Tanh", "Tanh"});
  b->y = out[1];
}

/* GRU (linear_before_reset 0, the ONNX default) with bias and initial_h; Y and Y_h. */
static void c_gru(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(3, 2, 4), w = W(1, 9, 4), r = W(1, 9, 3), bias = W(1, 18), h0 = W(1, 2, 3),
      out[2];
  rnn_node(g, KL_OP_GRU, 6, (const int[]){x, w, r, bias, KL_ABSENT, h0}, 2, out, 3);
  b->y = TU_OP(g, Add, out[0], out[1]);
}

/* GRU with linear_before_reset 1 (PyTorch's form), bias, no initial_h; Y only. */
static void c_gru_lbr(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(4, 2, 3), w = W(1, 6, 3), r = W(1, 6, 2), bias = W(1, 12), out[1];
  rnn_node(g, KL_OP_GRU, 4, (const int[]){x, w, r, bias}, 1, out, 2);
  a_int(g, "linear_before_reset", 1);
  b->y = out[0];
}

/* Bidirectional LSTM with bias, both initial states and sequence_lens (a row shorter than
 * seq and one of length 0); Y, Y_h and Y_c. */
static void c_lstm_bidi(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(3, 3, 2), w = W(2, 8, 2), r = W(2, 8, 2), bias = W(2, 16), h0 = W(2, 3, 2),
      c0 = W(2, 3, 2), out[3];
  int lens = ints(g, 3, (const int64_t[]){3, 2, 0});
  rnn_node(g, KL_OP_LSTM, 7, (const int[]){x, w, r, bias, lens, h0, c0}, 3, out, 2);
  a_str(g, "direction", "bidirectional");
  b->y = TU_OP(g, Add, TU_OP(g, Add, out[0], out[1]), out[2]);
}

/* Reverse GRU (linear_before_reset 1) with bias, initial_h and sequence_lens; Y, Y_h. */
static void c_gru_reverse(kl_graph *g, uint32_t *rng, built *b) {
  int x = W(4, 2, 3), w = W(1, 6, 3), r = W(1, 6, 2), bias = W(1, 12), h0 = W(1, 2, 2),
      out[2];
  int lens = ints(g, 2, (const int64_t[]){2, 4});
  rnn_node(g, KL_OP_GRU, 6, (const int[]){x, w, r, bias, lens, h0}, 2, out, 2);
  a_str(g, "direction", "reverse");
  a_int(g, "linear_before_reset", 1);
  b->y = TU_OP(g, Add, out[0], out[1]);
}

#define CASE(name) \
  static void test_##name(void **state) { \
    (void)state; \
    check_case(#name, c_##name); \
  }
CASE(add_bcast)
CASE(arith)
CASE(neg_pow)
CASE(matmul_rows)
CASE(matmul_batched)
CASE(matmul_bcast)
CASE(gemm_trans)
CASE(gemm_plain)
CASE(shapes)
CASE(concat_split)
CASE(where_expand)
CASE(unary)
CASE(softmax)
CASE(conv)
CASE(pools)
CASE(norms)
CASE(channel_norms)
CASE(tile)
CASE(resize)
CASE(gather_reduce)
CASE(loss_ce)
CASE(loss_mse_bce)
CASE(pad)
CASE(extremes)
CASE(lstm)
CASE(lstm_last)
CASE(gru)
CASE(gru_lbr)
CASE(lstm_bidi)
CASE(gru_reverse)

/* The recurrent forms the rules do not differentiate are refused at differentiation,
 * naming the node and what it has. */
static void test_rnn_refused(void **state) {
  (void)state;
  static const char *const what[] = {"layout 1", "a clip", "input_forget 1",
                                     "activations other than", "activations other than",
                                     "peepholes"};
  for (int k = 0; k < 6; k++) {
    kl_graph *g = tu_graph_new();
    uint32_t rng = 11;
    built b = {0};
    int dirs = k == 4 ? 2 : 1, batch_first = k == 0;
    int x = param(g, &rng, &b, DIMS(3, 3, 2), -1, 1);
    int w = param(g, &rng, &b, DIMS(dirs, 8, 2), -1, 1);
    int r = param(g, &rng, &b, DIMS(dirs, 8, 2), -1, 1);
    int p = param(g, &rng, &b, DIMS(1, 6), -1, 1);
    int in[8] = {x, w, r, KL_ABSENT, KL_ABSENT, KL_ABSENT, KL_ABSENT, k == 5 ? p : KL_ABSENT};
    int out[1];
    rnn_node(g, KL_OP_LSTM, 8, in, 1, out, 2);
    if (batch_first) a_int(g, "layout", 1);
    if (k == 1) a_float(g, "clip", 3.0f);
    if (k == 2) a_int(g, "input_forget", 1);
    if (k == 3) a_strs(g, "activations", 3, (const char *const[]){"Sigmoid", "Relu", "Tanh"});
    if (k == 4) { /* the second direction's differ */
      a_str(g, "direction", "bidirectional");
      a_strs(g, "activations", 6,
             (const char *const[]){"Sigmoid", "Tanh", "Tanh", "Sigmoid", "Tanh", "Relu"});
    }
    int l = TU_OP(g, ReduceSum, out[0]);
    a_int(g, "keepdims", 0);
    kl_err e = {0};
    if (kl_graph_infer(g, &e) != KILN_OK) fail_msg("case %d: %s", k, e.msg);
    bool *tr = calloc((size_t)g->n_values, sizeof(bool));
    tr[w] = true;
    int *grads = NULL;
    tu_assert_status(kl_autograd(g, l, tr, &grads, &e), KILN_ERR_UNSUPPORTED, e.msg, what[k]);
    tu_assert_contains(e.msg, "lstm");
    tu_assert_contains(e.msg, "the gradient of LSTM is implemented for layout 0");
    assert_null(grads);
    free(tr);
    kl_graph_free(g);
  }
}

/* An op with no rule between the weights and the loss is an error naming it. */
static void test_no_rule(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  uint32_t rng = 7;
  built b = {0};
  int x = param(g, &rng, &b, DIMS(3, 4), -1, 1);
  int y = TU_OP(g, CumSum, x, tu_graph_const(g, NULL, KL_I64, 0, NULL, (const int64_t[]){1}));
  int l = TU_OP(g, ReduceSum, y);
  a_int(g, "keepdims", 0);
  kl_err e = {0};
  assert_int_equal(kl_graph_infer(g, &e), KILN_OK);
  bool tr[64] = {0};
  tr[x] = true;
  int *grads = NULL;
  tu_assert_status(kl_autograd(g, l, tr, &grads, &e), KILN_ERR_UNSUPPORTED, e.msg,
                   "no gradient rule for op CumSum");
  assert_null(grads);
  kl_graph_free(g);
}

/* The update nodes move to just after the last reader of their weight. */
static void test_update_order(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int w = tu_graph_input(g, "w", KL_F32, 1, (const int64_t[]){4});
  int x = tu_graph_input(g, "x", KL_F32, 1, (const int64_t[]){4});
  int hyper = tu_graph_input(g, "h", KL_F64, 1, (const int64_t[]){5});
  int a = TU_OP(g, Mul, x, w);      /* node 0 reads w */
  int gw = TU_OP(g, Add, a, x);     /* node 1: w's "gradient" */
  kl_op sgd = kl_op_lookup(KL_DOMAIN_KILN, "SGD");
  if (sgd == KL_OP_COUNT) fail_msg("kiln.SGD is not in this build");
  int r = tu_graph_op(g, sgd, 3, (const int[]){hyper, w, gw}); /* node 2 */
  int late = TU_OP(g, Mul, gw, w); /* node 3 reads w too: the update must follow it */
  int other = TU_OP(g, Neg, late);  /* node 4 */
  kl_graph_add_output(g, r, NULL);
  kl_graph_add_output(g, other, NULL);
  kl_err e = {0};
  assert_int_equal(kl_train_update_order(g, &e), KILN_OK);
  assert_int_equal(g->nodes[3].op, sgd);
  assert_int_equal(g->nodes[4].op, KL_OP_Neg);
  kl_graph_free(g);
}

/* A fresh PyTorch model as its exporter writes it: BatchNorms of one width share one
 * initializer for their weight (ones) and bias (zeros), the later ones through
 * Identities named as PyTorch's parameters, and each running variance is an Identity
 * of a weight. kl_train_own_stats gives every BatchNorm its own scale, bias and
 * statistics (PyTorch trains them apart; tied, kiln trained 80 of MnasNet-0.5's 158):
 * the Identities' outputs become constants of their names, a constant two read
 * directly is copied for the second ("<node>.scale"), the values unchanged. */
static void test_own_bn_params(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int64_t c = 3;
  float ones[3] = {1, 1, 1}, zeros[3] = {0, 0, 0};
  int x = tu_graph_input(g, "x", KL_F32, 4, (const int64_t[]){2, 3, 4, 4});
  int s = tu_graph_const(g, "bn1.weight", KL_F32, 1, &c, ones);
  int b = tu_graph_const(g, "bn1.bias", KL_F32, 1, &c, zeros);
  int m = tu_graph_const(g, "bn1.running_mean", KL_F32, 1, &c, zeros);
  int v = tu_graph_value(g, "bn1.running_var"), s2 = tu_graph_value(g, "bn2.weight");
  int b2 = tu_graph_value(g, "bn2.bias"), v2 = tu_graph_value(g, "bn2.running_var");
  tu_graph_node(g, KL_OP_Identity, NULL, 1, &s, 1, &v);
  tu_graph_node(g, KL_OP_Identity, NULL, 1, &s, 1, &s2);
  tu_graph_node(g, KL_OP_Identity, NULL, 1, &b, 1, &b2);
  tu_graph_node(g, KL_OP_Identity, NULL, 1, &s, 1, &v2);
  int y1 = tu_graph_value(g, NULL), y2 = tu_graph_value(g, NULL), y3 = tu_graph_value(g, NULL);
  tu_graph_node(g, KL_OP_BatchNormalization, "bn1", 5, (const int[]){x, s, b, m, v}, 1, &y1);
  tu_graph_node(g, KL_OP_BatchNormalization, "bn2", 5, (const int[]){y1, s2, b2, m, v2}, 1, &y2);
  tu_graph_node(g, KL_OP_BatchNormalization, "bn3", 5, (const int[]){y2, s, b, m, v}, 1, &y3);
  assert_int_equal(kl_graph_add_output(g, y3, NULL), KILN_OK);
  kl_err e = {0};
  assert_int_equal(kl_graph_infer(g, &e), KILN_OK);
  if (kl_train_own_stats(g, &e) != KILN_OK) fail_msg("%s", e.msg);
  static const char *const nodes[3] = {"bn1", "bn2", "bn3"};
  static const char *const want[3][2] = {{"bn1.weight", "bn1.bias"}, {"bn2.weight", "bn2.bias"},
                                         {"bn3.scale", "bn3.bias"}};
  int seen[6];
  for (int i = 0; i < 3; i++) {
    int n = -1; /* the node named so (passes may have moved it) */
    for (int k = 0; k < g->n_nodes; k++)
      if (g->nodes[k].name && strcmp(g->nodes[k].name, nodes[i]) == 0) n = k;
    assert_true(n >= 0);
    for (int k = 1; k <= 2; k++) {
      const kl_value *val = &g->values[g->nodes[n].in[k]];
      if (val->kind != KL_VALUE_CONST || !val->name || strcmp(val->name, want[i][k - 1]) != 0)
        fail_msg("bn%d input %d: '%s' (kind %d), expected the constant '%s'", i + 1, k,
                 val->name ? val->name : "-", (int)val->kind, want[i][k - 1]);
      assert_memory_equal(val->data, k == 1 ? ones : zeros, sizeof ones);
      seen[i * 2 + k - 1] = g->nodes[n].in[k];
    }
    const kl_value *var = &g->values[g->nodes[n].in[4]];
    assert_int_equal(var->kind, KL_VALUE_CONST);
    assert_memory_equal(var->data, ones, sizeof ones);
  }
  for (int i = 0; i < 6; i++) /* six constants apart */
    for (int j = i + 1; j < 6; j++) assert_int_not_equal(seen[i], seen[j]);
  kl_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_add_bcast),     cmocka_unit_test(test_arith),
      cmocka_unit_test(test_neg_pow),       cmocka_unit_test(test_matmul_rows),
      cmocka_unit_test(test_matmul_batched), cmocka_unit_test(test_matmul_bcast),
      cmocka_unit_test(test_gemm_trans),    cmocka_unit_test(test_gemm_plain),
      cmocka_unit_test(test_shapes),        cmocka_unit_test(test_concat_split),
      cmocka_unit_test(test_where_expand),  cmocka_unit_test(test_unary),
      cmocka_unit_test(test_softmax),       cmocka_unit_test(test_conv),
      cmocka_unit_test(test_pools),         cmocka_unit_test(test_norms),
      cmocka_unit_test(test_channel_norms), cmocka_unit_test(test_tile),
      cmocka_unit_test(test_resize),
      cmocka_unit_test(test_gather_reduce), cmocka_unit_test(test_loss_ce),
      cmocka_unit_test(test_loss_mse_bce),  cmocka_unit_test(test_pad),
      cmocka_unit_test(test_extremes),
      cmocka_unit_test(test_lstm),          cmocka_unit_test(test_lstm_last),
      cmocka_unit_test(test_gru),           cmocka_unit_test(test_gru_lbr),
      cmocka_unit_test(test_lstm_bidi),     cmocka_unit_test(test_gru_reverse),
      cmocka_unit_test(test_rnn_refused),
      cmocka_unit_test(test_no_rule),
      cmocka_unit_test(test_update_order),
      cmocka_unit_test(test_own_bn_params),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
