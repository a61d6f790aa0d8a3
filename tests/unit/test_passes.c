/* The graph optimizer: each pass on small hand-built graphs, including the cases where
 * it must not fire, the ONNX writer's round trip, and the fused ops' kernels.
 *
 * Every graph is written as ONNX (kl_onnx_export), loaded twice, at -O0 and with the
 * passes under test, the optimized graph is checked node by node, and both models run
 * on the same random inputs: outputs must agree within
 * |optimized - reference| <= 1e-4 + 1e-4 |reference|. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "export/onnx_export.h"
#include "ir/fused.h"
#include "passes/rewrite.h"
#include "runtime/runtime.h"

#include "testutil.h"

/* ---- building graphs ---- */

/* Random constants and inputs; run() reseeds it so that both models get the same inputs. */
static uint32_t rng = 12345;

/* A float constant of the given shape: vals when given, else random in [lo, hi]. */
static int cst(kl_graph *g, int rank, const int64_t *dims, const float *vals, float lo,
               float hi) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  float *d = malloc(sizeof(float) * (size_t)(n ? n : 1));
  assert_non_null(d);
  for (int64_t i = 0; i < n; i++) d[i] = vals ? vals[i] : tu_rand_f32(&rng, lo, hi);
  int v = tu_graph_const(g, NULL, KL_F32, rank, dims, d);
  free(d);
  return v;
}

static int scalar(kl_graph *g, float x) { return cst(g, 0, NULL, &x, 0, 0); }

static int ints(kl_graph *g, int n, const int64_t *vals) {
  return tu_graph_const(g, NULL, KL_I64, 1, (const int64_t[]){n}, vals);
}

static int node_of(kl_graph *g, int v) { return g->values[v].producer; }

static void set_int(kl_graph *g, int v, const char *name, int64_t x) {
  assert_int_equal(kl_node_set_int(g, node_of(g, v), name, x, NULL), KILN_OK);
}
static void set_float(kl_graph *g, int v, const char *name, float x) {
  assert_int_equal(kl_node_set_float(g, node_of(g, v), name, x, NULL), KILN_OK);
}
static void set_ints(kl_graph *g, int v, const char *name, int n, const int64_t *x) {
  assert_int_equal(kl_node_set_ints(g, node_of(g, v), name, x, n, NULL), KILN_OK);
}
static void set_string(kl_graph *g, int v, const char *name, const char *x) {
  assert_int_equal(kl_node_set_string(g, node_of(g, v), name, x, NULL), KILN_OK);
}

static void output(kl_graph *g, int v) { assert_int_equal(kl_graph_add_output(g, v, NULL), KILN_OK); }

/* ---- loading and comparing ---- */

typedef struct opt {
  int level;
  const char *passes;
  int64_t fold_limit;
} opt;

static kiln_model *load(const void *buf, size_t len, opt o) {
  kiln_options *opts;
  assert_int_equal(kiln_options_create(&opts), KILN_OK);
  assert_int_equal(kiln_options_set_int(opts, "opt_level", o.level), KILN_OK);
  assert_int_equal(kiln_options_set_int(opts, "verify", 1), KILN_OK);
  assert_int_equal(kiln_options_set_int(opts, "fold_limit", o.fold_limit), KILN_OK);
  if (o.passes) assert_int_equal(kiln_options_set_string(opts, "passes", o.passes), KILN_OK);
  kiln_model *m = NULL;
  kiln_status st = kiln_model_load_memory(buf, len, opts, &m);
  if (st != KILN_OK) fail_msg("load failed: %s", kiln_model_error(m));
  kiln_options_free(opts);
  return m;
}

/* Runs m on inputs made from seed; returns the outputs' data (copies) in outs. */
static void run(kiln_model *m, uint32_t seed, float **outs, int64_t *counts) {
  kiln_session *s;
  assert_int_equal(kiln_session_create(m, NULL, &s), KILN_OK);
  rng = seed;
  float *bufs[8] = {NULL};
  for (int i = 0; i < kiln_model_input_count(m); i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    int64_t n = 1, dims[KL_MAX_RANK];
    for (int d = 0; d < info.rank; d++) {
      dims[d] = info.dims[d] < 0 ? 2 : info.dims[d]; /* a symbolic dim: batch 2 */
      n *= dims[d];
    }
    bufs[i] = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t k = 0; k < n; k++) bufs[i][k] = tu_rand_f32(&rng, -2, 2);
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
    tu_assert_floats(ob[i], oa[i], na[i], TU_TOL(1e-4, 1e-4)); /* optimized vs -O0 */
    free(oa[i]);
    free(ob[i]);
  }
}

/* Writes g, loads it at -O0 and with o; checks both compute the same; frees g and
 * returns the optimized model. */
static kiln_model *optimize(kl_graph *g, opt o) {
  void *buf;
  size_t len;
  kl_err e = {0};
  if (kl_onnx_export(g, &buf, &len, &e) != KILN_OK) fail_msg("export: %s", e.msg);
  kl_graph_free(g);
  kiln_model *ref = load(buf, len, (opt){0, NULL, 0});
  kiln_model *m = load(buf, len, o);
  free(buf);
  compare(ref, m);
  kiln_model_free(ref);
  return m;
}

static kiln_model *with_pass(kl_graph *g, const char *passes) {
  return optimize(g, (opt){0, passes, 0});
}

static int count(const kiln_model *m, kl_op o) {
  int n = 0;
  for (int i = 0; i < m->g->n_nodes; i++) n += m->g->nodes[i].op == o;
  return n;
}

/* The only node of op o in m. */
static const kl_node *only(const kiln_model *m, kl_op o) {
  assert_int_equal(count(m, o), 1);
  for (int i = 0; i < m->g->n_nodes; i++)
    if (m->g->nodes[i].op == o) return &m->g->nodes[i];
  return NULL;
}

static int fired(const kiln_model *m, const char *pass) {
  for (int k = 0; k < m->stats.n_passes; k++)
    if (strcmp(m->stats.name[k], pass) == 0) return m->stats.fired[k];
  fail_msg("no pass %s", pass);
  return -1;
}

/* ---- common subgraphs ---- */

static const int64_t X4[4] = {2, 3, 6, 6};

/* x [2,3,6,6] -> Conv 3x3 pad 1 with 4 output channels (bias when given) -> y. */
static int conv(kl_graph *g, int x, bool bias) {
  int w = cst(g, 4, (int64_t[]){4, 3, 3, 3}, NULL, -0.5f, 0.5f);
  int b = bias ? cst(g, 1, (int64_t[]){4}, NULL, -1, 1) : KL_ABSENT;
  int y = TU_OP(g, Conv, x, w, b);
  set_ints(g, y, "pads", 4, (int64_t[]){1, 1, 1, 1});
  return y;
}

static int batchnorm(kl_graph *g, int x, int c, bool const_mean) {
  int64_t d[1] = {c};
  int mean = const_mean ? cst(g, 1, d, NULL, -1, 1) : tu_graph_input(g, "mean", KL_F32, 1, d);
  return TU_OP(g, BatchNormalization, x, cst(g, 1, d, NULL, 0.5f, 1.5f), cst(g, 1, d, NULL, -1, 1),
            mean, cst(g, 1, d, NULL, 0.5f, 2));
}

/* ---- O1 ---- */

static void test_eliminate(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int a = TU_OP(g, Identity, x);
  int b = TU_OP(g, Dropout, a);
  int c = TU_OP(g, Cast, b);
  set_int(g, c, "to", KL_F32);
  int r = TU_OP(g, Reshape, c, ints(g, 4, X4));
  int t = TU_OP(g, Transpose, r);
  set_ints(g, t, "perm", 4, (int64_t[]){0, 1, 2, 3});
  int y = TU_OP(g, Relu, t);
  output(g, TU_OP(g, Identity, y)); /* a graph output: the Relu writes it directly */
  output(g, TU_OP(g, Identity, x)); /* input to output: the copy must stay */
  kiln_model *m = with_pass(g, "+eliminate");
  assert_int_equal(m->g->n_nodes, 2);
  assert_int_equal(count(m, KL_OP_Relu), 1);
  assert_int_equal(count(m, KL_OP_Identity), 1);
  kiln_model_free(m);
}

/* A Transpose that moves only axes of size 1 becomes a Reshape; one that reorders two
 * longer axes, or whose dims are not all known, stays. */
static void test_eliminate_unit_axis_transpose(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){1, 5, 7});
  int t = TU_OP(g, Transpose, x); /* [1, 5, 7] -> [5, 1, 7]: no byte moves */
  set_ints(g, t, "perm", 3, (int64_t[]){1, 0, 2});
  output(g, TU_OP(g, Relu, t));
  int u = TU_OP(g, Transpose, x); /* [1, 5, 7] -> [7, 1, 5]: real work */
  set_ints(g, u, "perm", 3, (int64_t[]){2, 0, 1});
  output(g, TU_OP(g, Relu, u));
  kiln_model *m = with_pass(g, "+eliminate");
  assert_int_equal(count(m, KL_OP_Transpose), 1);
  const kl_node *r = only(m, KL_OP_Reshape);
  const kl_value *shape = &m->g->values[r->in[1]];
  assert_true(shape->kind == KL_VALUE_CONST);
  const int64_t *d = shape->data;
  assert_true(d[0] == 5 && d[1] == 1 && d[2] == 7);
  const kl_type *y = &m->g->values[r->out[0]].type;
  assert_int_equal(y->rank, 3);
  assert_int_equal(y->dims[0].size, 5);
  kiln_model_free(m);

  g = tu_graph_new(); /* a symbolic dim: the Transpose stays */
  x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){1, -1, 7});
  t = TU_OP(g, Transpose, x);
  set_ints(g, t, "perm", 3, (int64_t[]){1, 0, 2});
  output(g, TU_OP(g, Relu, t));
  m = with_pass(g, "+eliminate");
  assert_int_equal(count(m, KL_OP_Transpose), 1);
  assert_int_equal(count(m, KL_OP_Reshape), 0);
  kiln_model_free(m);
}

/* ReduceMean and ReduceMax over H and W with keepdims become the global pools (timm's
 * x.mean((2, 3), keepdim=True)); other axes, keepdims 0, rank 3 stay. */
static void test_eliminate_spatial_reduce(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  output(g, TU_OP(g, ReduceMean, x, ints(g, 2, (int64_t[]){2, 3})));
  output(g, TU_OP(g, ReduceMax, x, ints(g, 2, (int64_t[]){-1, -2})));
  output(g, TU_OP(g, ReduceMean, x, ints(g, 2, (int64_t[]){1, 2}))); /* not the spatial axes */
  int k0 = TU_OP(g, ReduceMean, x, ints(g, 2, (int64_t[]){2, 3}));
  set_int(g, k0, "keepdims", 0); /* [N, C]: not a pool's shape */
  output(g, k0);
  int x3 = tu_graph_input(g, "x3", KL_F32, 3, (int64_t[]){2, 3, 6});
  output(g, TU_OP(g, ReduceMean, x3, ints(g, 2, (int64_t[]){1, 2})));
  kiln_model *m = with_pass(g, "+eliminate");
  assert_int_equal(count(m, KL_OP_GlobalAveragePool), 1);
  assert_int_equal(count(m, KL_OP_GlobalMaxPool), 1);
  assert_int_equal(count(m, KL_OP_ReduceMean), 3);
  kiln_model_free(m);
}

static void test_eliminate_keeps_real_work(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int c = TU_OP(g, Cast, x);
  set_int(g, c, "to", KL_F64); /* a real conversion */
  int back = TU_OP(g, Cast, c);
  set_int(g, back, "to", KL_F32);
  int r = TU_OP(g, Reshape, back, ints(g, 2, (int64_t[]){6, 36})); /* changes the shape */
  int t = TU_OP(g, Transpose, r);                                   /* no perm: reverses */
  output(g, t);
  kiln_model *m = with_pass(g, "+eliminate");
  assert_int_equal(m->g->n_nodes, 4);
  kiln_model_free(m);
}

static void test_const_fold(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int k = TU_OP(g, Mul, scalar(g, 2), scalar(g, 3));
  int shape = TU_OP(g, Shape, x);                 /* known dims: folds */
  int dims = TU_OP(g, Concat, TU_OP(g, Gather, shape, ints(g, 1, (int64_t[]){0})),
                ints(g, 1, (int64_t[]){-1}));
  set_int(g, dims, "axis", 0);
  int flat = TU_OP(g, Reshape, x, dims);
  output(g, TU_OP(g, Mul, flat, k));
  kiln_model *m = with_pass(g, "+const_fold");
  assert_int_equal(m->g->n_nodes, 2); /* Reshape and Mul */
  const kl_node *mul = only(m, KL_OP_Mul);
  double v;
  assert_true(m->g->values[mul->in[1]].kind == KL_VALUE_CONST);
  v = ((const float *)m->g->values[mul->in[1]].data)[0];
  assert_true(v == 6.0);
  /* the folded shape made the Reshape's output shape known */
  const kl_type *t = &m->g->values[mul->in[0]].type;
  assert_int_equal(t->rank, 2);
  assert_int_equal(t->dims[1].size, 108);
  kiln_model_free(m);
}

/* A result much larger than its inputs folds only under a large enough limit. */
static void test_const_fold_limit(void **state) {
  (void)state;
  for (int big = 0; big < 2; big++) {
    kl_graph *g = tu_graph_new();
    int x = tu_graph_input(g, "x", KL_F32, 2, (int64_t[]){64, 64});
    int outer = TU_OP(g, Add, cst(g, 2, (int64_t[]){64, 1}, NULL, 0, 1),
                   cst(g, 2, (int64_t[]){1, 64}, NULL, 0, 1)); /* 16 KiB from 512 bytes */
    output(g, TU_OP(g, Add, x, outer));
    kiln_model *m = optimize(g, (opt){0, "+const_fold", big ? 0 : 4096});
    assert_int_equal(m->g->n_nodes, big ? 1 : 2);
    kiln_model_free(m);
  }
}

/* x: float32[batch, 6, 8] with "batch" a named symbol. */
static int batch_input(kl_graph *g) {
  int x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){-1, 6, 8});
  g->values[x].type.dims[0] = (kl_dim){-1, kl_graph_symbol(g, "batch")};
  return x;
}

/* Gather(Shape(x), i) unsqueezed to a 1-element list. */
static int dim_of(kl_graph *g, int x, int64_t i) {
  int d = TU_OP(g, Gather, TU_OP(g, Shape, x), tu_graph_const(g, NULL, KL_I64, 0, NULL, &i));
  return TU_OP(g, Unsqueeze, d, ints(g, 1, (int64_t[]){0}));
}

static int concat0(kl_graph *g, int a, int b, int c) {
  int v = c >= 0 ? TU_OP(g, Concat, a, b, c) : TU_OP(g, Concat, a, b);
  set_int(g, v, "axis", 0);
  return v;
}

static const int64_t *const_ints(const kiln_model *m, int v) {
  assert_true(m->g->values[v].kind == KL_VALUE_CONST);
  return m->g->values[v].data;
}

/* shape_values on a dynamic batch: the shape arithmetic folds to constant targets. */
static void test_shape_values(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = batch_input(g);
  /* Reshape(x, [batch, 6/2 (from Shape), 16]): [0, 3, 16] */
  int three = TU_OP(g, Div, dim_of(g, x, 1), ints(g, 1, (int64_t[]){2}));
  int r = TU_OP(g, Reshape, x, concat0(g, dim_of(g, x, 0), three, ints(g, 1, (int64_t[]){16})));
  output(g, TU_OP(g, Relu, r));
  /* torch's expand: Where(Equal(shape, -1), 1, shape) with shape [batch, 6, 8] */
  int shape = concat0(g, dim_of(g, x, 0), dim_of(g, x, 1), ints(g, 1, (int64_t[]){8}));
  int minus = ints(g, 3, (int64_t[]){-1, -1, -1}), ones = ints(g, 3, (int64_t[]){1, 1, 1});
  int target = TU_OP(g, Where, TU_OP(g, Equal, shape, minus), ones, shape);
  output(g, TU_OP(g, Expand, x, target));
  /* an Expand of a [1, 8] constant to [batch, 8]: the output's dims are learnt */
  int row = cst(g, 2, (int64_t[]){1, 8}, NULL, -1, 1);
  int e2 = TU_OP(g, Expand, row, concat0(g, dim_of(g, x, 0), ints(g, 1, (int64_t[]){8}), -1));
  output(g, TU_OP(g, Relu, e2));
  /* hostile slice steps: x's dims 1.. by a step of 2^63 - 1 is [6], backwards by -2^63
   * from the end is [8]; both fold (without overflowing an index) */
  int64_t big[1] = {INT64_MAX}, neg[1] = {INT64_MIN};
  int shp = TU_OP(g, Shape, x);
  int s1 = TU_OP(g, Slice, shp, ints(g, 1, (int64_t[]){1}), ints(g, 1, big), ints(g, 1, (int64_t[]){0}),
                 ints(g, 1, big));
  int s2 = TU_OP(g, Slice, shp, ints(g, 1, (int64_t[]){-1}), ints(g, 1, neg),
                 ints(g, 1, (int64_t[]){0}), ints(g, 1, neg));
  output(g, TU_OP(g, Relu, TU_OP(g, Reshape, x, concat0(g, dim_of(g, x, 0), s1, s2))));
  kiln_model *m = with_pass(g, "+shape_values");
  assert_true(fired(m, "shape_values") > 0);
  assert_int_equal(count(m, KL_OP_Reshape), 2);
  const kl_node *rs = NULL;
  for (int i = 0; i < m->g->n_nodes; i++) {
    const kl_node *r = &m->g->nodes[i];
    if (r->op != KL_OP_Reshape) continue;
    const int64_t *t = const_ints(m, r->in[1]);
    if (t[1] == 6) assert_true(t[0] == 0 && t[2] == 8); /* [batch, 6, 8] */
    else rs = r;
  }
  assert_non_null(rs);
  const int64_t *t = const_ints(m, rs->in[1]);
  assert_true(t[0] == 0 && t[1] == 3 && t[2] == 16);
  const kl_type *rt = &m->g->values[rs->out[0]].type;
  assert_int_equal(rt->rank, 3);
  assert_true(rt->dims[0].size < 0 && rt->dims[0].sym == kl_graph_symbol(m->g, "batch"));
  assert_int_equal(rt->dims[1].size, 3);
  assert_int_equal(count(m, KL_OP_Expand), 2);
  int learnt = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    const kl_node *n = &m->g->nodes[i];
    if (n->op != KL_OP_Expand) continue;
    const kl_type *in = &m->g->values[n->in[0]].type, *out = &m->g->values[n->out[0]].type;
    if (in->rank == 3) { /* x expanded to its own shape: batch becomes 1 */
      t = const_ints(m, n->in[1]);
      assert_true(t[0] == 1 && t[1] == 6 && t[2] == 8);
    } else { /* [1, 8] to [batch, 8]: the target stays, the output knows its dims */
      assert_false(m->g->values[n->in[1]].kind == KL_VALUE_CONST);
      assert_int_equal(out->rank, 2);
      assert_true(out->dims[0].sym == kl_graph_symbol(m->g, "batch"));
      assert_int_equal(out->dims[1].size, 8);
      learnt++;
    }
  }
  assert_int_equal(learnt, 1);
  kiln_model_free(m);
}

/* Where a target's symbol is not the input's dim at that position, or allowzero is
 * set, the Reshape keeps its computed target (and still computes the same). */
static void test_shape_values_must_not_fire(void **state) {
  (void)state;
  for (int allowzero = 0; allowzero < 2; allowzero++) {
    kl_graph *g = tu_graph_new();
    int x = batch_input(g);
    int target = allowzero ? concat0(g, dim_of(g, x, 0), ints(g, 1, (int64_t[]){48}), -1)
                           : concat0(g, dim_of(g, x, 1), dim_of(g, x, 0),
                                     ints(g, 1, (int64_t[]){8})); /* [6, batch, 8] */
    int r = TU_OP(g, Reshape, x, target);
    if (allowzero) set_int(g, r, "allowzero", 1);
    output(g, TU_OP(g, Relu, r));
    kiln_model *m = with_pass(g, "+shape_values");
    const kl_node *rs = only(m, KL_OP_Reshape);
    assert_false(m->g->values[rs->in[1]].kind == KL_VALUE_CONST);
    kiln_model_free(m);
  }
}

/* An unknown dim that a Shape reads gets a name, shared by what it flows into, so that
 * a Reshape of x @ W to a target built from that Shape copies it (0). */
static void test_shape_values_names_unknown_dims(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){2, -1, 8}); /* dim 1 unnamed */
  int y = TU_OP(g, MatMul, x, cst(g, 2, (int64_t[]){8, 8}, NULL, -1, 1));
  int target = concat0(g, ints(g, 1, (int64_t[]){2}), dim_of(g, x, 1),
                       ints(g, 2, (int64_t[]){2, 4}));
  output(g, TU_OP(g, Relu, TU_OP(g, Reshape, y, target)));
  kiln_model *m = with_pass(g, "+shape_values");
  const kl_node *rs = only(m, KL_OP_Reshape);
  const int64_t *t = const_ints(m, rs->in[1]);
  assert_true(t[0] == 2 && t[1] == 0 && t[2] == 2 && t[3] == 4);
  assert_int_equal(count(m, KL_OP_Shape), 0);
  kiln_model_free(m);
}

/* BERT's position embeddings: P[:, :seq] (a Slice to a computed end) has at most seq
 * rows, so x + P[:, :seq] has seq rows when it runs at all; a Reshape of the sum to a
 * target made from its Shape then copies both dims. */
static void test_shape_values_slice_bound(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){-1, -1, 8});
  g->values[x].type.dims[0] = (kl_dim){-1, kl_graph_symbol(g, "batch")};
  g->values[x].type.dims[1] = (kl_dim){-1, kl_graph_symbol(g, "seq")};
  int pos = cst(g, 3, (int64_t[]){1, 32, 8}, NULL, -1, 1);
  int p = TU_OP(g, Slice, pos, ints(g, 1, (int64_t[]){0}), dim_of(g, x, 1),
                ints(g, 1, (int64_t[]){1}));
  int y = TU_OP(g, Add, x, p);
  int target = TU_OP(g, Concat, dim_of(g, y, 0), dim_of(g, y, 1), ints(g, 2, (int64_t[]){2, 4}));
  set_int(g, target, "axis", 0);
  output(g, TU_OP(g, Relu, TU_OP(g, Reshape, y, target)));
  kiln_model *m = with_pass(g, "+shape_values");
  const kl_node *add = only(m, KL_OP_Add);
  const kl_type *yt = &m->g->values[add->out[0]].type;
  assert_true(yt->dims[1].size < 0 && yt->dims[1].sym == kl_graph_symbol(m->g, "seq"));
  const int64_t *t = const_ints(m, only(m, KL_OP_Reshape)->in[1]);
  assert_true(t[0] == 0 && t[1] == 0 && t[2] == 2 && t[3] == 4);
  kiln_model_free(m);
}

static void test_cse(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int a = TU_OP(g, Mul, TU_OP(g, Relu, x), scalar(g, 0.5f));
  int b = TU_OP(g, Mul, TU_OP(g, Relu, x), scalar(g, 0.5f)); /* same chain, its own constant */
  int c = TU_OP(g, LeakyRelu, x);
  set_float(g, c, "alpha", 0.1f);
  int d = TU_OP(g, LeakyRelu, x);
  set_float(g, d, "alpha", 0.2f); /* different attribute: stays */
  output(g, TU_OP(g, Sum, a, b, c, d));
  output(g, TU_OP(g, Relu, x)); /* a duplicate that is a graph output stays */
  kiln_model *m = with_pass(g, "+cse");
  assert_int_equal(count(m, KL_OP_Relu), 2);
  assert_int_equal(count(m, KL_OP_Mul), 1);
  assert_int_equal(count(m, KL_OP_LeakyRelu), 2);
  kiln_model_free(m);
}

/* ---- folding into weights ---- */

static void test_fold_bn_conv(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  output(g, batchnorm(g, conv(g, x, true), 4, true));
  kiln_model *m = with_pass(g, "+fold_bn");
  assert_int_equal(m->g->n_nodes, 1);
  assert_int_equal(count(m, KL_OP_Conv), 1);
  assert_int_equal(fired(m, "fold_bn"), 1);
  kiln_model_free(m);
}

static void test_fold_bn_must_not_fire(void **state) {
  (void)state;
  for (int c = 0; c < 4; c++) {
    kl_graph *g = tu_graph_new();
    int x = tu_graph_input(g, "x", KL_F32, 4, X4);
    int y = conv(g, x, false);
    int bn = batchnorm(g, y, 4, c != 2);
    output(g, bn);
    if (c == 0) output(g, TU_OP(g, Relu, y)); /* the Conv output has a second reader */
    if (c == 1) output(g, y);              /* the Conv output is a graph output */
    if (c == 3) set_int(g, bn, "training_mode", 1); /* the batch's statistics, not the inputs */
    kiln_model *m = with_pass(g, "+fold_bn"); /* c == 2: the mean is not constant */
    assert_int_equal(count(m, KL_OP_BatchNormalization), 1);
    assert_int_equal(fired(m, "fold_bn"), 0);
    kiln_model_free(m);
  }
}

static void test_fold_bn_conv_transpose_gemm_matmul(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 4, 3, 3});
  int ct = TU_OP(g, ConvTranspose, x, cst(g, 4, (int64_t[]){4, 3, 2, 2}, NULL, -1, 1));
  set_int(g, ct, "group", 2); /* 4 in, 6 out channels */
  output(g, batchnorm(g, ct, 6, true));
  int a = tu_graph_input(g, "a", KL_F32, 2, (int64_t[]){3, 5});
  int gm = TU_OP(g, Gemm, a, cst(g, 2, (int64_t[]){4, 5}, NULL, -1, 1),
                 cst(g, 1, (int64_t[]){4}, NULL, -1, 1));
  set_int(g, gm, "transB", 1);
  set_float(g, gm, "beta", 0.5f);
  output(g, batchnorm(g, gm, 4, true));
  int mm = TU_OP(g, MatMul, a, cst(g, 2, (int64_t[]){5, 4}, NULL, -1, 1));
  output(g, batchnorm(g, mm, 4, true));
  kiln_model *m = with_pass(g, "+fold_bn");
  assert_int_equal(count(m, KL_OP_BatchNormalization), 0);
  assert_int_equal(count(m, KL_OP_Gemm), 2); /* the MatMul gained a bias: a Gemm */
  kiln_model_free(m);
}

static void test_fold_scale_bias(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int y = TU_OP(g, Add, conv(g, x, true), cst(g, 3, (int64_t[]){4, 1, 1}, NULL, -1, 1));
  y = TU_OP(g, Mul, cst(g, 4, (int64_t[]){1, 4, 1, 1}, NULL, 0.5f, 2), y);
  output(g, TU_OP(g, Sub, y, scalar(g, 0.25f)));
  int a = tu_graph_input(g, "a", KL_F32, 2, (int64_t[]){3, 5});
  int gm = TU_OP(g, Gemm, a, cst(g, 2, (int64_t[]){5, 4}, NULL, -1, 1));
  int scaled = TU_OP(g, Div, gm, cst(g, 1, (int64_t[]){4}, NULL, 1, 2));
  output(g, TU_OP(g, Add, scaled, cst(g, 2, (int64_t[]){1, 4}, NULL, -1, 1)));
  kiln_model *m = with_pass(g, "+fold_scale_bias");
  assert_int_equal(m->g->n_nodes, 2);
  assert_int_equal(only(m, KL_OP_Gemm)->n_in, 3); /* the Add became its C */
  kiln_model_free(m);
}

static void test_fold_scale_bias_must_not_fire(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  /* varies along the width, not the channels */
  output(g, TU_OP(g, Add, conv(g, x, true), cst(g, 3, (int64_t[]){1, 1, 6}, NULL, -1, 1)));
  /* divides the constant by the output, not the reverse */
  output(g, TU_OP(g, Div, scalar(g, 2), conv(g, x, true)));
  /* enlarges the output by broadcasting */
  output(g, TU_OP(g, Add, conv(g, x, true), cst(g, 5, (int64_t[]){3, 1, 4, 1, 1}, NULL, -1, 1)));
  kiln_model *m = with_pass(g, "+fold_scale_bias");
  assert_int_equal(m->g->n_nodes, 6);
  kiln_model_free(m);
}

/* A constant scale after a product of a convolution and another tensor moves into the
 * convolution; not where the convolution's result is broadcast by the product, nor
 * read elsewhere. Two single-value scales in a row become one (NFNet: the
 * squeeze-and-excitation output times two scalar gains). */
static void test_fold_scale_across_mul(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int se = tu_graph_input(g, "se", KL_F32, 4, (int64_t[]){2, 4, 1, 1});
  int y = TU_OP(g, Mul, conv(g, x, true), se);
  y = TU_OP(g, Mul, TU_OP(g, Mul, y, scalar(g, 0.25f)), scalar(g, 1.5f));
  output(g, TU_OP(g, Div, y, cst(g, 3, (int64_t[]){4, 1, 1}, NULL, 0.5f, 2)));
  /* must not: the convolution's result [2, 4, 1, 1] broadcast over a larger tensor */
  int big = tu_graph_input(g, "big", KL_F32, 4, (int64_t[]){2, 4, 6, 6});
  int small = TU_OP(g, Conv, TU_OP(g, GlobalAveragePool, x), cst(g, 4, (int64_t[]){4, 3, 1, 1},
                                                                 NULL, -1, 1));
  output(g, TU_OP(g, Mul, TU_OP(g, Mul, small, big), scalar(g, 2)));
  /* must not: the convolution's result read by another node too */
  int c2 = conv(g, x, true);
  output(g, TU_OP(g, Mul, TU_OP(g, Mul, c2, se), scalar(g, 3)));
  output(g, c2);
  /* two single-value scales of an input in a row: one Mul by their product */
  output(g, TU_OP(g, Div, TU_OP(g, Mul, scalar(g, 0.5f), big), scalar(g, 4)));
  kiln_model *m = with_pass(g, "+fold_scale_bias");
  assert_int_equal(count(m, KL_OP_Mul), 6); /* the first product's three scales folded */
  assert_int_equal(count(m, KL_OP_Div), 0);
  kiln_model_free(m);
}

/* Conv -> act -> Mul(s) -> Add(t) at -O2, act given by name (NULL: none). */
static int conv_act_affine(kl_graph *g, int x, const char *act, int s, int t) {
  int y = conv(g, x, true);
  if (act && strcmp(act, "Clip") == 0) {
    y = TU_OP(g, Clip, y, scalar(g, 0), scalar(g, 6));
  } else if (act) {
    y = tu_graph_op(g, kl_op_lookup("", act), 1, &y);
    if (strcmp(act, "LeakyRelu") == 0) set_float(g, y, "alpha", 0.2f);
  }
  if (s != KL_ABSENT) y = TU_OP(g, Mul, s, y);
  if (t != KL_ABSENT) y = TU_OP(g, Add, y, t);
  return y;
}

/* The affine after a fused Relu, Clip or LeakyRelu folds through it where the bounds
 * stay one pair for every channel (fold_bn.c): HGNetV2's learnable affine blocks. */
static void test_fold_scale_bias_through_activation(void **state) {
  (void)state;
  static const struct {
    const char *act;
    float s, t;       /* scalars; s 0: per-channel positive scales, no t */
    const char *want; /* the activation after */
    float lo, hi;
  } cases[] = {
      {"Relu", 0.7f, -0.3f, "Clip", -0.3f, INFINITY},
      {"Clip", -2.0f, 1.5f, "Clip", -10.5f, 1.5f},
      {"Relu", 0, 0, "Relu", 0, 0},
      {"LeakyRelu", 2.0f, 0, "LeakyRelu", 0, 0},
      {"Relu", -0.5f, 0, "Clip", -INFINITY, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    kl_graph *g = tu_graph_new();
    int x = tu_graph_input(g, "x", KL_F32, 4, X4);
    int s = cases[k].s != 0 ? scalar(g, cases[k].s)
                            : cst(g, 4, (int64_t[]){1, 4, 1, 1}, NULL, 0.5f, 2);
    int t = cases[k].t != 0 ? scalar(g, cases[k].t) : KL_ABSENT;
    output(g, conv_act_affine(g, x, cases[k].act, s, t));
    kiln_model *m = optimize(g, (opt){2, NULL, 0});
    assert_int_equal(m->g->n_nodes, 1);
    const kl_node *n = only(m, KL_OP_KilnFusedConv);
    assert_string_equal(kl_attr_string(n, "activation", ""), cases[k].want);
    if (strcmp(cases[k].want, "Clip") == 0) {
      const float *p = NULL;
      assert_int_equal(kl_attr_floats(n, "activation_params", &p), 2);
      assert_true(p[0] == cases[k].lo && p[1] == cases[k].hi);
    }
    kiln_model_free(m);
  }
}

static void test_fold_scale_bias_through_activation_must_not_fire(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  /* a shift per channel after a Relu: the lower bound would differ by channel */
  output(g, conv_act_affine(g, x, "Relu", KL_ABSENT, cst(g, 3, (int64_t[]){4, 1, 1}, NULL, 0.1f, 1)));
  /* scales of both signs after a Relu */
  output(g, conv_act_affine(g, x, "Relu", cst(g, 3, (int64_t[]){4, 1, 1}, (const float[]){1, -1, 2, 3}, 0, 0),
                            KL_ABSENT));
  /* no bounds to move: a Sigmoid; a shift after a LeakyRelu; a Clip scaled by 0 */
  output(g, conv_act_affine(g, x, "Sigmoid", scalar(g, 2), KL_ABSENT));
  output(g, conv_act_affine(g, x, "LeakyRelu", KL_ABSENT, scalar(g, 1)));
  output(g, conv_act_affine(g, x, "Clip", scalar(g, 0), KL_ABSENT));
  /* a residual Sum fused before the Relu is not scaled with the weights */
  int r = TU_OP(g, Relu, TU_OP(g, Add, conv(g, x, true), tu_graph_input(g, "sc", KL_F32, 4,
                                                                         (int64_t[]){2, 4, 6, 6})));
  output(g, TU_OP(g, Mul, r, scalar(g, 3)));
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(count(m, KL_OP_Mul) + count(m, KL_OP_Add), 6);
  kiln_model_free(m);
}

/* A Conv of x with cout outputs, cin / group inputs a group, a kernel of the given
 * spatial sizes (sp axes), strides, dilations and begin = end pads, and a bias. */
static int conv_of(kl_graph *g, int x, int64_t cout, int64_t cin, int64_t group, int sp,
                   const int64_t *k, int64_t stride, int64_t dil, const int64_t *pads) {
  int64_t wd[5] = {cout, cin / group, 1, 1, 1}, p[6], one[3];
  for (int i = 0; i < sp; i++) wd[2 + i] = k[i], one[i] = stride, p[i] = p[i + sp] = pads[i];
  int y = TU_OP(g, Conv, x, cst(g, 2 + sp, wd, NULL, -0.5f, 0.5f),
                cst(g, 1, &cout, NULL, -1, 1));
  set_int(g, y, "group", group);
  set_ints(g, y, "pads", 2 * sp, p);
  set_ints(g, y, "strides", sp, one);
  for (int i = 0; i < sp; i++) one[i] = dil;
  set_ints(g, y, "dilations", sp, one);
  return y;
}

/* RepVGG / MobileOne blocks in their training form: a kxk convolution, a 1x1 one (or
 * another kxk) and a BatchNorm of the input (or the input), summed: one Conv each. */
static void test_merge_convs(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 6, 7, 9});
  const int64_t k3[2] = {3, 3}, k1[2] = {1, 1}, p1[2] = {1, 1}, p0[2] = {0, 0}, p2[2] = {2, 2};
  /* RepVGG: 3x3 + 1x1 + BN(x) */
  int y = TU_OP(g, Add, conv_of(g, x, 6, 6, 1, 2, k3, 1, 1, p1), conv_of(g, x, 6, 6, 1, 2, k1, 1, 1, p0));
  output(g, TU_OP(g, Add, y, batchnorm(g, x, 6, true)));
  /* MobileOne's depthwise block: 1x1 + three 3x3 + BN(x), group 6 (the 1x1 first) */
  y = conv_of(g, x, 6, 6, 6, 2, k1, 1, 1, p0);
  for (int r = 0; r < 3; r++) y = TU_OP(g, Add, y, conv_of(g, x, 6, 6, 6, 2, k3, 1, 1, p1));
  output(g, TU_OP(g, Add, batchnorm(g, x, 6, true), y));
  /* stride 2, 12 outputs: 3x3 + 1x1 */
  output(g, TU_OP(g, Add, conv_of(g, x, 12, 6, 1, 2, k1, 2, 1, p0),
                  conv_of(g, x, 12, 6, 1, 2, k3, 2, 1, p1)));
  /* dilation 2: 3x3 pads 2 + 1x1, and the input itself */
  y = TU_OP(g, Add, conv_of(g, x, 6, 6, 2, 2, k3, 1, 2, p2), conv_of(g, x, 6, 6, 2, 2, k1, 1, 2, p0));
  output(g, TU_OP(g, Add, x, y));
  /* 1-D: 5 taps pad 2 + 3 taps pad 1 */
  int z = tu_graph_input(g, "z", KL_F32, 3, (int64_t[]){2, 4, 11});
  output(g, TU_OP(g, Add, conv_of(g, z, 5, 4, 1, 1, (int64_t[]){3}, 1, 1, (int64_t[]){1}),
                  conv_of(g, z, 5, 4, 1, 1, (int64_t[]){5}, 1, 1, (int64_t[]){2})));
  kiln_model *m = with_pass(g, "+merge_convs");
  assert_int_equal(count(m, KL_OP_Add), 0);
  assert_int_equal(count(m, KL_OP_BatchNormalization), 0);
  assert_int_equal(count(m, KL_OP_Conv), 5);
  assert_int_equal(fired(m, "merge_convs"), 10);
  kiln_model_free(m);
}

/* FastViT's RepMixer, x + ls * (dwconv(x) - BN(x)), and a Sub with the convolution
 * second: merge_convs and fold_scale_bias leave one convolution each. */
static void test_merge_convs_repmixer(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 6, 7, 9});
  const int64_t k3[2] = {3, 3}, k1[2] = {1, 1}, p1[2] = {1, 1}, p0[2] = {0, 0};
  int d = TU_OP(g, Sub, conv_of(g, x, 6, 6, 6, 2, k3, 1, 1, p1), batchnorm(g, x, 6, true));
  d = TU_OP(g, Mul, d, cst(g, 3, (int64_t[]){6, 1, 1}, NULL, 0.1f, 1));
  output(g, TU_OP(g, Add, x, d));
  output(g, TU_OP(g, Sub, batchnorm(g, x, 6, true), conv_of(g, x, 6, 6, 1, 2, k1, 1, 1, p0)));
  kiln_model *m = with_pass(g, "+merge_convs,+fold_scale_bias");
  assert_int_equal(m->g->n_nodes, 2);
  assert_int_equal(count(m, KL_OP_Conv), 2);
  kiln_model_free(m);
}

static void test_merge_convs_must_not_fire(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 6, 7, 9});
  const int64_t k3[2] = {3, 3}, k1[2] = {1, 1}, p1[2] = {1, 1}, p0[2] = {0, 0}, p2[2] = {2, 2};
  /* dilations differ */
  output(g, TU_OP(g, Add, conv_of(g, x, 6, 6, 1, 2, k3, 1, 1, p1),
                  conv_of(g, x, 6, 6, 1, 2, k3, 1, 2, p2)));
  /* groups differ */
  output(g, TU_OP(g, Add, conv_of(g, x, 6, 6, 1, 2, k3, 1, 1, p1),
                  conv_of(g, x, 6, 6, 6, 2, k1, 1, 1, p0)));
  /* the taps do not line up: pads (0, 0, 2, 2) against (1, 1, 1, 1), same output */
  int a = conv_of(g, x, 6, 6, 1, 2, k3, 1, 1, p1), b = conv_of(g, x, 6, 6, 1, 2, k3, 1, 1, p1);
  set_ints(g, b, "pads", 4, (int64_t[]){0, 0, 2, 2});
  output(g, TU_OP(g, Add, a, b));
  /* a convolution read by another node too */
  int c = conv_of(g, x, 6, 6, 1, 2, k1, 1, 1, p0);
  output(g, TU_OP(g, Add, conv_of(g, x, 6, 6, 1, 2, k3, 1, 1, p1), c));
  output(g, TU_OP(g, Relu, c));
  /* convolutions of two inputs; a BatchNorm in training mode */
  int x2 = tu_graph_input(g, "x2", KL_F32, 4, (int64_t[]){2, 6, 7, 9});
  output(g, TU_OP(g, Add, conv_of(g, x, 6, 6, 1, 2, k3, 1, 1, p1),
                  conv_of(g, x2, 6, 6, 1, 2, k1, 1, 1, p0)));
  int bn = batchnorm(g, x, 6, true);
  set_int(g, bn, "training_mode", 1);
  output(g, TU_OP(g, Add, conv_of(g, x, 6, 6, 1, 2, k3, 1, 1, p1), bn));
  kiln_model *m = with_pass(g, "+merge_convs");
  assert_int_equal(count(m, KL_OP_Add), 6);
  assert_int_equal(fired(m, "merge_convs"), 0);
  kiln_model_free(m);
}

/* ---- fusion ---- */

/* Each activation kiln fuses, after a Conv, at -O2. */
static void test_fuse_activations(void **state) {
  (void)state;
  static const char *const names[] = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh",
                                      "HardSigmoid", "HardSwish", "Gelu", "GeluTanh",
                                      "Silu", "Mish", "Elu", "SiluMul", "HardSwishMul"};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    kl_graph *g = tu_graph_new();
    int x = conv(g, tu_graph_input(g, "x", KL_F32, 4, X4), true), y;
    const char *n = names[k];
    if (strcmp(n, "Clip") == 0) {
      y = TU_OP(g, Clip, x, scalar(g, 0), scalar(g, 6));
    } else if (strcmp(n, "GeluTanh") == 0) {
      y = TU_OP(g, Gelu, x);
      set_string(g, y, "approximate", "tanh");
    } else if (strcmp(n, "Silu") == 0) {
      y = TU_OP(g, Swish, x);
    } else if (strcmp(n, "SiluMul") == 0) {
      y = TU_OP(g, Mul, TU_OP(g, Sigmoid, x), x);
    } else if (strcmp(n, "HardSwishMul") == 0) {
      int hs = TU_OP(g, HardSigmoid, x);
      set_float(g, hs, "alpha", 1.0f / 6);
      y = TU_OP(g, Mul, x, hs);
    } else {
      y = tu_graph_op(g, kl_op_lookup("", n), 1, &x);
      if (strcmp(n, "LeakyRelu") == 0) set_float(g, y, "alpha", 0.3f);
      if (strcmp(n, "Elu") == 0) set_float(g, y, "alpha", 0.7f);
      if (strcmp(n, "HardSigmoid") == 0) set_float(g, y, "beta", 0.4f);
    }
    output(g, y);
    kiln_model *m = optimize(g, (opt){2, NULL, 0});
    assert_int_equal(m->g->n_nodes, 1);
    const char *act = kl_attr_string(only(m, KL_OP_KilnFusedConv), "activation", "");
    const char *want = strcmp(n, "SiluMul") == 0 ? "Silu" : strcmp(n, "HardSwishMul") == 0 ? "HardSwish" : n;
    assert_string_equal(act, want);
    kiln_model_free(m);
  }
}

static void test_fuse_act_must_not_fire(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int y = conv(g, x, true);
  output(g, TU_OP(g, Relu, y));
  output(g, TU_OP(g, Sigmoid, y)); /* two activations read the Conv */
  int z = conv(g, x, true);
  /* a bound that is not constant */
  output(g, TU_OP(g, Clip, z, tu_graph_input(g, "lo", KL_F32, 0, NULL)));
  kiln_model *m = with_pass(g, "+fuse_act");
  assert_int_equal(count(m, KL_OP_Conv), 2);
  assert_int_equal(count(m, KL_OP_KilnFusedConv), 0);
  kiln_model_free(m);
}

/* Conv + Add(shortcut) + Relu: the residual block after BN folding, at -O2. */
static void test_fuse_sum(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int r = TU_OP(g, Relu, batchnorm(g, conv(g, x, false), 4, true));
  int sc = conv(g, x, false);
  output(g, TU_OP(g, Relu, TU_OP(g, Add, sc, r)));
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(m->g->n_nodes, 2);
  assert_int_equal(count(m, KL_OP_KilnFusedConv), 2);
  int with_sum = 0;
  for (int i = 0; i < m->g->n_nodes; i++)
    with_sum += m->g->nodes[i].n_in > KL_FUSED_SUM && m->g->nodes[i].in[KL_FUSED_SUM] >= 0;
  assert_int_equal(with_sum, 1);
  kiln_model_free(m);
}

static void test_fuse_sum_must_not_fire(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  /* the other operand is larger: the Add broadcasts the Conv output up */
  output(g, TU_OP(g, Add, conv(g, x, true),
                  tu_graph_input(g, "big", KL_F32, 5, (int64_t[]){2, 2, 4, 6, 6})));
  /* an activation comes first: the sum would be added after it */
  int y = TU_OP(g, Relu, conv(g, x, true));
  output(g, TU_OP(g, Add, y, tu_graph_input(g, "other", KL_F32, 4, (int64_t[]){2, 4, 6, 6})));
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(count(m, KL_OP_Add), 2);
  kiln_model_free(m);
}

/* Mul(x, s) -> 1x1 Conv (W [out_ch, in_ch, 1, 1] constant, a bias) -> the result. */
static int scaled_conv(kl_graph *g, int x, int s, int64_t out_ch, int64_t in_ch) {
  int w = cst(g, 4, (int64_t[]){out_ch, in_ch, 1, 1}, NULL, -0.5f, 0.5f);
  return TU_OP(g, Conv, TU_OP(g, Mul, x, s), w, cst(g, 1, &out_ch, NULL, -1, 1));
}

static void test_fold_input_scale(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){1, 8, 8, 8});
  /* squeeze-and-excitation: the scale from x itself, [1, 8, 1, 1] */
  int se = TU_OP(g, GlobalAveragePool, x);
  se = TU_OP(g, Sigmoid, TU_OP(g, Conv, se, cst(g, 4, (int64_t[]){8, 8, 1, 1}, NULL, -1, 1)));
  output(g, scaled_conv(g, x, se, 4, 8));
  /* a scale input of rank 3, [8, 1, 1], the Mul's operands the other way round, and a
   * 3x3 convolution (W 4 x 8 x 9 = 288 elements against x's 512) */
  int s3 = tu_graph_input(g, "s3", KL_F32, 3, (int64_t[]){8, 1, 1});
  int w = cst(g, 4, (int64_t[]){4, 8, 3, 3}, NULL, -0.5f, 0.5f);
  int y = TU_OP(g, Conv, TU_OP(g, Mul, s3, x), w);
  set_ints(g, y, "pads", 4, (int64_t[]){1, 1, 1, 1}); /* padding: zeros stay zeros */
  output(g, y);
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(fired(m, "fold_input_scale"), 2);
  /* every Mul now scales a convolution's weights: it reads them, and a convolution
   * reads its output in the weights slot */
  int muls = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    const kl_node *n = &m->g->nodes[i];
    if (n->op != KL_OP_Mul) continue;
    muls++;
    assert_non_null(kl_rw_const(m->g, n->in[0]));
    int c = kl_rw_sole_consumer(m->g, n->out[0]);
    assert_true(c >= 0);
    assert_int_equal(m->g->nodes[c].in[1], n->out[0]);
  }
  assert_int_equal(muls, 2);
  kiln_model_free(m);
}

/* A constant scale (NFNet's activation gain, a scalar) before a convolution of an input
 * whose batch is symbolic: folded into the weights once (X's size is not needed). */
static void test_fold_input_scale_symbolic_batch(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){2, 8, 5, 6});
  g->values[x].type.dims[0] = (kl_dim){-1, kl_graph_symbol(g, "batch")};
  int a = TU_OP(g, Relu, x);
  output(g, scaled_conv(g, a, scalar(g, 1.7881f), 4, 8));
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(fired(m, "fold_input_scale"), 1);
  assert_int_equal(count(m, KL_OP_Mul), 0); /* const_fold took Mul(W, s) */
  kiln_model_free(m);
}

static void test_fold_input_scale_must_not_fire(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){1, 8, 6, 6});
  int s = tu_graph_input(g, "s", KL_F32, 4, (int64_t[]){1, 8, 1, 1});
  /* the weights (64 x 8) outweigh the activation (8 x 6 x 6) */
  output(g, scaled_conv(g, x, s, 64, 8));
  /* the scale varies along the width */
  output(g, scaled_conv(g, x, tu_graph_input(g, "sw", KL_F32, 4, (int64_t[]){1, 1, 1, 6}),
                        4, 8));
  /* the scale varies along the batch (x of batch 2) */
  int x2 = tu_graph_input(g, "x2", KL_F32, 4, (int64_t[]){2, 8, 6, 6});
  output(g, scaled_conv(g, x2, tu_graph_input(g, "sb", KL_F32, 4, (int64_t[]){2, 8, 1, 1}),
                        4, 8));
  /* the product has a second reader */
  int p = TU_OP(g, Mul, x, tu_graph_input(g, "s2", KL_F32, 4, (int64_t[]){1, 8, 1, 1}));
  output(g, TU_OP(g, Conv, p, cst(g, 4, (int64_t[]){4, 8, 1, 1}, NULL, -1, 1)));
  output(g, TU_OP(g, Relu, p));
  /* two groups */
  int sg = tu_graph_input(g, "sg", KL_F32, 4, (int64_t[]){1, 8, 1, 1});
  int gc = TU_OP(g, Conv, TU_OP(g, Mul, x, sg), cst(g, 4, (int64_t[]){4, 4, 1, 1}, NULL, -1, 1));
  set_int(g, gc, "group", 2);
  output(g, gc);
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(fired(m, "fold_input_scale"), 0);
  assert_int_equal(count(m, KL_OP_Mul), 5);
  kiln_model_free(m);
}

/* Conv of x (dims xd) by constant W (dims wd) with the given dilations, pads, strides
 * and groups; spatial axes sp. */
static int dilated_conv(kl_graph *g, int x, int sp, const int64_t *wd, const int64_t *dil,
                        const int64_t *pads, const int64_t *strides, int64_t group) {
  int w = cst(g, sp + 2, wd, NULL, -0.5f, 0.5f);
  int y = TU_OP(g, Conv, x, w, cst(g, 1, wd, NULL, -1, 1));
  set_ints(g, y, "dilations", sp, dil);
  set_ints(g, y, "pads", 2 * sp, pads);
  if (strides) set_ints(g, y, "strides", sp, strides);
  if (group > 1) set_int(g, y, "group", group);
  return y;
}

/* The kernel attribute name of the node that makes output k of m. */
static const int64_t *conv_attr(const kiln_model *m, int k, const char *name, int want_n) {
  int v = m->g->outputs[k], n = m->g->values[v].producer;
  assert_true(n >= 0);
  const int64_t *a;
  assert_int_equal(kl_attr_ints(&m->g->nodes[n], name, &a), want_n);
  return a;
}

static void test_trim_taps(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  /* DeepLabV3's atrous branch in small: dilation 6 on 6x7, only the centre tap reads x */
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){1, 5, 6, 7});
  output(g, dilated_conv(g, x, 2, (int64_t[]){4, 5, 3, 3}, (int64_t[]){6, 7},
                         (int64_t[]){6, 7, 6, 7}, NULL, 1));
  /* rows keep their three taps (dilation 4 on 9), columns one (dilation 5 on 5); two
   * groups; batch 2 */
  int x2 = tu_graph_input(g, "x2", KL_F32, 4, (int64_t[]){2, 4, 9, 5});
  output(g, dilated_conv(g, x2, 2, (int64_t[]){6, 2, 3, 3}, (int64_t[]){4, 5},
                         (int64_t[]){4, 5, 4, 5}, NULL, 2));
  /* 1-D, stride 2, uneven pads, a kernel of 4 with dilation 5: 3 outputs, tap t reads
   * o * 2 - 9 + t * 5, which for t = 0 is -9, -7, -5: that tap goes, the pads 9 -> 4 */
  int x3 = tu_graph_input(g, "x3", KL_F32, 3, (int64_t[]){1, 3, 10});
  output(g, dilated_conv(g, x3, 1, (int64_t[]){2, 3, 4}, (int64_t[]){5}, (int64_t[]){9, 1},
                         (int64_t[]){2}, 1));
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(fired(m, "trim_taps"), 3);
  const int64_t *k0 = conv_attr(m, 0, "kernel_shape", 2), *d0 = conv_attr(m, 0, "dilations", 2);
  const int64_t *p0 = conv_attr(m, 0, "pads", 4);
  assert_true(k0[0] == 1 && k0[1] == 1 && d0[0] == 1 && d0[1] == 1);
  for (int i = 0; i < 4; i++) assert_int_equal(p0[i], 0);
  const int64_t *k1 = conv_attr(m, 1, "kernel_shape", 2), *d1 = conv_attr(m, 1, "dilations", 2);
  const int64_t *p1 = conv_attr(m, 1, "pads", 4);
  assert_true(k1[0] == 3 && k1[1] == 1 && d1[0] == 4 && d1[1] == 1);
  assert_true(p1[0] == 4 && p1[1] == 0 && p1[2] == 4 && p1[3] == 0);
  const int64_t *k2 = conv_attr(m, 2, "kernel_shape", 1), *p2 = conv_attr(m, 2, "pads", 2);
  assert_true(k2[0] == 3 && p2[0] == 4 && p2[1] == 1);
  kiln_model_free(m);
}

static void test_trim_taps_must_not_fire(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){1, 3, 6, 6});
  /* every tap reads x somewhere (dilation 2 on 6) */
  output(g, dilated_conv(g, x, 2, (int64_t[]){2, 3, 3, 3}, (int64_t[]){2, 2},
                         (int64_t[]){2, 2, 2, 2}, NULL, 1));
  /* the weights are an input: nothing to cut */
  int w = tu_graph_input(g, "w", KL_F32, 4, (int64_t[]){2, 3, 3, 3});
  int y = TU_OP(g, Conv, x, w);
  set_ints(g, y, "dilations", 2, (int64_t[]){6, 6});
  set_ints(g, y, "pads", 4, (int64_t[]){6, 6, 6, 6});
  output(g, y);
  /* auto_pad: the pads are not the node's own */
  int z = TU_OP(g, Conv, x, cst(g, 4, (int64_t[]){2, 3, 3, 3}, NULL, -1, 1));
  set_ints(g, z, "dilations", 2, (int64_t[]){6, 6});
  set_string(g, z, "auto_pad", "SAME_UPPER");
  output(g, z);
  /* the spatial sizes are not known while building */
  int xs = tu_graph_input(g, "xs", KL_F32, 4, (int64_t[]){1, 3, -1, -1});
  g->values[xs].type.dims[2] = (kl_dim){-1, kl_graph_symbol(g, "h")};
  g->values[xs].type.dims[3] = (kl_dim){-1, kl_graph_symbol(g, "w")};
  output(g, dilated_conv(g, xs, 2, (int64_t[]){2, 3, 3, 3}, (int64_t[]){6, 6},
                         (int64_t[]){6, 6, 6, 6}, NULL, 1));
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(fired(m, "trim_taps"), 0);
  kiln_model_free(m);
}

static void test_matmul_add_and_transpose(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int a = tu_graph_input(g, "a", KL_F32, 2, (int64_t[]){5, 3});
  int t = TU_OP(g, Transpose, a); /* [3, 5] */
  output(g, TU_OP(g, Add, TU_OP(g, MatMul, t, cst(g, 2, (int64_t[]){5, 4}, NULL, -1, 1)),
                  cst(g, 1, (int64_t[]){4}, NULL, -1, 1)));
  int x3 = tu_graph_input(g, "x3", KL_F32, 3, (int64_t[]){2, 3, 5});
  output(g, TU_OP(g, Add, cst(g, 1, (int64_t[]){4}, NULL, -1, 1),
                  TU_OP(g, MatMul, x3, cst(g, 2, (int64_t[]){5, 4}, NULL, -1, 1))));
  kiln_model *m = with_pass(g, "+fuse_matmul_add,+fold_transpose");
  assert_int_equal(m->g->n_nodes, 2);
  assert_int_equal(kl_attr_int(only(m, KL_OP_Gemm), "transA", 0), 1);
  assert_int_equal(only(m, KL_OP_KilnFusedMatMul)->n_in, 3);
  kiln_model_free(m);
}

static void test_collapse_reshape_transpose(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int f = TU_OP(g, Flatten, x);
  output(g, TU_OP(g, Reshape, f, ints(g, 2, (int64_t[]){6, -1})));
  int t1 = TU_OP(g, Transpose, x);
  set_ints(g, t1, "perm", 4, (int64_t[]){0, 2, 3, 1});
  int t2 = TU_OP(g, Transpose, t1);
  set_ints(g, t2, "perm", 4, (int64_t[]){0, 3, 1, 2}); /* undoes t1 */
  int t3 = TU_OP(g, Transpose, TU_OP(g, Relu, t2));
  set_ints(g, t3, "perm", 4, (int64_t[]){1, 0, 2, 3});
  int t4 = TU_OP(g, Transpose, t3);
  set_ints(g, t4, "perm", 4, (int64_t[]){0, 2, 1, 3});
  output(g, t4);
  /* a Reshape that copies a dim (0) of the Flatten output must stay after it */
  output(g, TU_OP(g, Reshape, TU_OP(g, Flatten, x), ints(g, 2, (int64_t[]){0, -1})));
  kiln_model *m = with_pass(g, "+collapse_reshape,+collapse_transpose");
  assert_int_equal(count(m, KL_OP_Flatten), 1);
  assert_int_equal(count(m, KL_OP_Transpose), 1);
  const int64_t *perm;
  assert_int_equal(kl_attr_ints(only(m, KL_OP_Transpose), "perm", &perm), 4);
  assert_true(perm[0] == 1 && perm[1] == 2 && perm[2] == 0 && perm[3] == 3);
  kiln_model_free(m);
}

/* The dynamo exporter's key transpose, Reshape(Transpose(Reshape(x [batch, 3, seq, 5],
 * [-1, seq, 5]), [0, 2, 1]), [batch, 3, 5, seq]) (targets computed from Shape), becomes
 * Transpose(x, [0, 1, 3, 2]). Not when the second Reshape splits the merged axis in
 * another order ([3, 2, ...] for x [2, 3, 7, 5]). */
static void test_collapse_unmerge(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){-1, 3, -1, 5});
  g->values[x].type.dims[0] = (kl_dim){-1, kl_graph_symbol(g, "batch")};
  g->values[x].type.dims[2] = (kl_dim){-1, kl_graph_symbol(g, "seq")};
  int three = ints(g, 1, (int64_t[]){3}), five = ints(g, 1, (int64_t[]){5});
  int minus1 = ints(g, 1, (int64_t[]){-1});
  int merged = TU_OP(g, Reshape, x, concat0(g, minus1, dim_of(g, x, 2), five));
  int t = TU_OP(g, Transpose, merged);
  set_ints(g, t, "perm", 3, (int64_t[]){0, 2, 1});
  int back = TU_OP(g, Concat, dim_of(g, x, 0), three, five, dim_of(g, x, 2));
  set_int(g, back, "axis", 0);
  output(g, TU_OP(g, Relu, TU_OP(g, Reshape, t, back)));
  int y = tu_graph_input(g, "y", KL_F32, 4, (int64_t[]){2, 3, 7, 5});
  t = TU_OP(g, Transpose, TU_OP(g, Reshape, y, ints(g, 3, (int64_t[]){6, 7, 5})));
  set_ints(g, t, "perm", 3, (int64_t[]){0, 2, 1});
  output(g, TU_OP(g, Relu, TU_OP(g, Reshape, t, ints(g, 4, (int64_t[]){3, 2, 5, 7}))));
  kiln_model *m = with_pass(g, "+shape_values,+collapse_transpose");
  assert_int_equal(count(m, KL_OP_Transpose), 2);
  assert_int_equal(count(m, KL_OP_Reshape), 2); /* y's */
  const int64_t *perm;
  int of_x = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    const kl_node *n = &m->g->nodes[i];
    if (n->op != KL_OP_Transpose || n->in[0] != m->g->inputs[0]) continue;
    assert_int_equal(kl_attr_ints(n, "perm", &perm), 4);
    assert_true(perm[0] == 0 && perm[1] == 1 && perm[2] == 3 && perm[3] == 2);
    of_x++;
  }
  assert_int_equal(of_x, 1);
  kiln_model_free(m);
}

/* ---- transformer patterns ---- */

static const int64_t H3[3] = {2, 5, 8};

/* The decomposed LayerNormalization over the last axis, as opset <= 16 exports write. */
static int decomposed_layernorm(kl_graph *g, int x) {
  int axes = ints(g, 1, (int64_t[]){-1});
  int mean = TU_OP(g, ReduceMean, x, axes);
  int d = TU_OP(g, Sub, x, mean);
  int var = TU_OP(g, ReduceMean, TU_OP(g, Pow, d, scalar(g, 2)), axes);
  int n = TU_OP(g, Div, d, TU_OP(g, Sqrt, TU_OP(g, Add, var, scalar(g, 1e-5f))));
  return TU_OP(g, Add, TU_OP(g, Mul, n, cst(g, 1, (int64_t[]){8}, NULL, 0.5f, 1.5f)),
            cst(g, 1, (int64_t[]){8}, NULL, -1, 1));
}

static void test_fuse_layernorm_and_skip(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int a = tu_graph_input(g, "a", KL_F32, 3, H3), b = tu_graph_input(g, "b", KL_F32, 3, H3);
  int s = TU_OP(g, Add, a, b);
  output(g, decomposed_layernorm(g, s));
  output(g, TU_OP(g, Relu, s)); /* the sum is read again: SkipLayerNorm's second output */
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(m->g->n_nodes, 2);
  const kl_node *n = only(m, KL_OP_KilnSkipLayerNorm);
  assert_int_equal(n->n_out, 2);
  assert_int_equal(kl_attr_int(n, "axis", 0), -1);
  kiln_model_free(m);
}

static void test_fuse_layernorm_must_not_fire(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 3, H3);
  int axes = ints(g, 1, (int64_t[]){1}); /* not the last axis */
  int d = TU_OP(g, Sub, x, TU_OP(g, ReduceMean, x, axes));
  int var = TU_OP(g, ReduceMean, TU_OP(g, Pow, d, scalar(g, 2)), axes);
  output(g, TU_OP(g, Div, d, TU_OP(g, Sqrt, TU_OP(g, Add, var, scalar(g, 1e-5f)))));
  kiln_model *m = with_pass(g, "+fuse_layernorm");
  assert_int_equal(count(m, KL_OP_LayerNormalization), 0);
  kiln_model_free(m);
}

/* GELU as exported: Erf form with Div by sqrt(2), and the tanh form with x*x*x. */
static void test_fuse_gelu(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 3, H3);
  int e = TU_OP(g, Erf, TU_OP(g, Div, x, scalar(g, 1.4142135f)));
  output(g, TU_OP(g, Mul, TU_OP(g, Mul, x, TU_OP(g, Add, e, scalar(g, 1))), scalar(g, 0.5f)));
  int cube = TU_OP(g, Mul, x, TU_OP(g, Mul, x, x));
  int in = TU_OP(g, Mul, scalar(g, 0.7978846f),
                 TU_OP(g, Add, x, TU_OP(g, Mul, scalar(g, 0.044715f), cube)));
  int c = TU_OP(g, Add, scalar(g, 1), TU_OP(g, Tanh, in));
  output(g, TU_OP(g, Mul, TU_OP(g, Mul, x, scalar(g, 0.5f)), c));
  kiln_model *m = with_pass(g, "+fuse_gelu");
  assert_int_equal(m->g->n_nodes, 2);
  assert_int_equal(count(m, KL_OP_Gelu), 2);
  kiln_model_free(m);
}

static void test_fuse_attention(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int q = tu_graph_input(g, "q", KL_F32, 4, (int64_t[]){2, 3, 5, 4});
  int kt = tu_graph_input(g, "kt", KL_F32, 4, (int64_t[]){2, 3, 4, 5});
  int v = tu_graph_input(g, "v", KL_F32, 4, (int64_t[]){2, 3, 5, 6});
  int mask = tu_graph_input(g, "mask", KL_F32, 4, (int64_t[]){2, 1, 1, 5});
  int s = TU_OP(g, Add, TU_OP(g, Div, TU_OP(g, MatMul, q, kt), scalar(g, 2)), mask);
  output(g, TU_OP(g, MatMul, TU_OP(g, Softmax, s), v));
  /* no scale, no mask */
  output(g, TU_OP(g, MatMul, TU_OP(g, Softmax, TU_OP(g, MatMul, q, kt)), v));
  kiln_model *m = with_pass(g, "+fuse_attention");
  assert_int_equal(m->g->n_nodes, 2);
  assert_int_equal(count(m, KL_OP_KilnAttention), 2);
  kiln_model_free(m);
}

static void test_fuse_attention_must_not_fire(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int q = tu_graph_input(g, "q", KL_F32, 3, (int64_t[]){3, 5, 4});
  int kt = tu_graph_input(g, "kt", KL_F32, 3, (int64_t[]){3, 4, 5});
  int v = tu_graph_input(g, "v", KL_F32, 3, (int64_t[]){3, 5, 6});
  int sm = TU_OP(g, Softmax, TU_OP(g, MatMul, q, kt));
  set_int(g, sm, "axis", 1); /* not the last axis */
  output(g, TU_OP(g, MatMul, sm, v));
  int scores = TU_OP(g, MatMul, q, kt);
  output(g, scores); /* the scores are a graph output too */
  output(g, TU_OP(g, MatMul, TU_OP(g, Softmax, scores), v));
  kiln_model *m = with_pass(g, "+fuse_attention");
  assert_int_equal(count(m, KL_OP_KilnAttention), 0);
  kiln_model_free(m);
}

/* T5's scores: MatMul, Mul by 1, + position bias (constant), + padding mask. The two
 * masks become one Add feeding kiln.Attention's Mask. */
static void test_fuse_attention_two_masks(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int q = tu_graph_input(g, "q", KL_F32, 4, (int64_t[]){2, 3, 5, 4});
  int kt = tu_graph_input(g, "kt", KL_F32, 4, (int64_t[]){2, 3, 4, 5});
  int v = tu_graph_input(g, "v", KL_F32, 4, (int64_t[]){2, 3, 5, 6});
  int mask = tu_graph_input(g, "mask", KL_F32, 4, (int64_t[]){2, 1, 1, 5});
  int bias = cst(g, 4, (int64_t[]){1, 3, 5, 5}, NULL, -1, 1);
  int s = TU_OP(g, Mul, TU_OP(g, MatMul, q, kt), scalar(g, 1));
  s = TU_OP(g, Add, TU_OP(g, Add, s, bias), mask);
  output(g, TU_OP(g, MatMul, TU_OP(g, Softmax, s), v));
  kiln_model *m = with_pass(g, "+fuse_attention");
  assert_int_equal(m->g->n_nodes, 2);
  assert_int_equal(count(m, KL_OP_KilnAttention), 1);
  assert_int_equal(count(m, KL_OP_Add), 1);
  kiln_model_free(m);
}

/* Swin's shifted windows: the scores viewed as [1, windows, H, S, T], the window mask
 * [1, windows, 1, S, T] added, viewed back. Not when the view back has another shape. */
static void test_fuse_attention_windows(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int q = tu_graph_input(g, "q", KL_F32, 4, (int64_t[]){4, 3, 5, 6});
  int kt = tu_graph_input(g, "kt", KL_F32, 4, (int64_t[]){4, 3, 6, 5});
  int v = tu_graph_input(g, "v", KL_F32, 4, (int64_t[]){4, 3, 5, 6});
  int wide = ints(g, 5, (int64_t[]){1, 4, 3, 5, 5});
  int wmask = cst(g, 5, (int64_t[]){1, 4, 1, 5, 5}, NULL, -3, 0);
  int s = TU_OP(g, Reshape, TU_OP(g, MatMul, q, kt), wide);
  s = TU_OP(g, Reshape, TU_OP(g, Add, s, wmask), ints(g, 4, (int64_t[]){4, 3, 5, 5}));
  output(g, TU_OP(g, MatMul, TU_OP(g, Softmax, s), v));
  int q2 = tu_graph_input(g, "q2", KL_F32, 4, (int64_t[]){4, 3, 5, 6});
  int v2 = tu_graph_input(g, "v2", KL_F32, 3, (int64_t[]){12, 5, 6});
  s = TU_OP(g, Reshape, TU_OP(g, MatMul, q2, kt), wide);
  s = TU_OP(g, Reshape, TU_OP(g, Add, s, wmask), ints(g, 3, (int64_t[]){12, 5, 5}));
  output(g, TU_OP(g, MatMul, TU_OP(g, Softmax, s), v2));
  kiln_model *m = with_pass(g, "+fuse_attention");
  assert_int_equal(count(m, KL_OP_KilnAttention), 1);
  assert_int_equal(count(m, KL_OP_Softmax), 1);
  assert_int_equal(m->g->n_nodes, 1 + 6);
  kiln_model_free(m);
}

/* ---- scaled_dot_product_attention as torch.onnx writes it ---- */

/* Where(IsNaN(p), 0, p): the guard after the softmax (a fully masked row gives 0). */
static int nan_guard(kl_graph *g, int p, float zero) {
  return TU_OP(g, Where, TU_OP(g, IsNaN, p), cst(g, 1, (int64_t[]){1}, &zero, 0, 0), p);
}

/* Query s of batch b sees no key in the sdpa tests' masks: query 1 of batch 0, queries
 * 3 and later of batch 1. */
static bool dead_query(int64_t b, int64_t s) { return (b == 0 && s == 1) || (b == 1 && s >= 3); }

/* A [2, 1, S, T] mask: fill on the keys a query does not see (every key of a dead
 * query, keys 4 and later of query 2), 0 elsewhere. fill is -inf (a boolean mask made
 * additive) or float32's lowest (transformers' additive masks). */
static int sdpa_mask(kl_graph *g, int64_t seq, int64_t keys, float fill) {
  float m[2 * 8 * 8];
  assert_true(seq <= 8 && keys <= 8);
  for (int64_t b = 0; b < 2; b++)
    for (int64_t s = 0; s < seq; s++)
      for (int64_t t = 0; t < keys; t++)
        m[(b * seq + s) * keys + t] = dead_query(b, s) || (s == 2 && t >= 4) ? fill : 0;
  return cst(g, 4, (int64_t[]){2, 1, seq, keys}, m, 0, 0);
}

/* Output k of m, [2, heads, seq, len] or [2, seq, len] (heads 1), run on the tests'
 * inputs: finite, and 0 exactly at the dead queries. */
static void expect_dead_rows(kiln_model *m, int k, int64_t heads, int64_t seq, int64_t len) {
  float *outs[8] = {NULL};
  int64_t counts[8];
  run(m, 777, outs, counts);
  assert_int_equal(counts[k], 2 * heads * seq * len);
  for (int64_t i = 0; i < counts[k]; i++) {
    int64_t b = i / (heads * seq * len), s = i / len % seq;
    if (!isfinite(outs[k][i]) || (dead_query(b, s) && outs[k][i] != 0.0f))
      fail_msg("output %d element %lld (batch %lld, query %lld) is %g", k, (long long)i,
               (long long)b, (long long)s, (double)outs[k][i]);
  }
  for (int i = 0; i < kiln_model_output_count(m); i++) free(outs[i]);
}

/* torch.onnx's scaled_dot_product_attention, q [2, 3, 5, 4] against k [2, 3, 6, 4]: Q
 * and the transposed K each scaled by sqrt(1/sqrt(4)), the mask added, the softmax
 * guarded by Where(IsNaN(p), 0, p). Case 0: a -inf mask, whose dead queries give 0;
 * 1: float32's lowest, where they average V. Must not fire: 2, the guard puts 0.5 for
 * NaN; 3, the softmax is a graph output too. */
static void test_fuse_attention_sdpa(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int v = tu_graph_input(g, "v", KL_F32, 4, (int64_t[]){2, 3, 6, 4});
  int kt = TU_OP(g, Transpose, tu_graph_input(g, "k", KL_F32, 4, (int64_t[]){2, 3, 6, 4}));
  set_ints(g, kt, "perm", 4, (int64_t[]){0, 1, 3, 2});
  /* a Q each, and each K scale its own (cse would merge equal scores): products 1/2 */
  const float qc[4] = {0.70710677f, 0.25f, 1, 2}, kc[4] = {0.70710677f, 2, 0.5f, 0.25f};
  for (int i = 0; i < 4; i++) {
    char name[8] = "q0";
    name[1] = (char)('0' + i);
    int q = tu_graph_input(g, name, KL_F32, 4, (int64_t[]){2, 3, 5, 4});
    int s = TU_OP(g, MatMul, TU_OP(g, Mul, q, scalar(g, qc[i])),
                  TU_OP(g, Mul, kt, scalar(g, kc[i])));
    int sm = TU_OP(g, Softmax, TU_OP(g, Add, s, sdpa_mask(g, 5, 6, i == 1 ? -3.4028235e38f
                                                                          : -INFINITY)));
    int p = nan_guard(g, sm, i == 2 ? 0.5f : 0.0f);
    output(g, TU_OP(g, MatMul, p, v));
    if (i == 3) output(g, sm);
  }
  kiln_model *m = optimize(g, (opt){3, NULL, 0});
  assert_int_equal(count(m, KL_OP_KilnAttention), 2);
  assert_int_equal(count(m, KL_OP_Softmax), 2);
  assert_int_equal(count(m, KL_OP_IsNaN), 2);
  for (int i = 0; i < m->g->n_nodes; i++) {
    const kl_node *n = &m->g->nodes[i];
    if (n->op != KL_OP_KilnAttention) continue;
    assert_float_equal(kl_attr_float(n, "scale", 0), 0.5f, 1e-6);
    assert_int_equal(kl_attr_int(n, "zero_masked_rows", 0), 1);
  }
  expect_dead_rows(m, 0, 3, 5, 4);
  kiln_model_free(m);
}

/* Self-attention as BERT exports it, on x [2, 7, 15]: three projections with biases,
 * each split into 3 heads of 5 (Reshape, Transpose; K transposed to [B, H, D, T]),
 * scores scaled and masked, the result merged back to [2, 7, 15]. Returns the merged
 * output; *qt is Q's head split. kx is the input K is projected from. */
static int bert_attention(kl_graph *g, int x, int kx, int mask, int *qt) {
  int64_t w[2] = {15, 15}, b[1] = {15};
  int split = ints(g, 4, (int64_t[]){2, 7, 3, 5});
  int proj[3];
  for (int i = 0; i < 3; i++)
    proj[i] = TU_OP(g, Add, TU_OP(g, MatMul, i == 1 ? kx : x, cst(g, 2, w, NULL, -0.5f, 0.5f)),
                    cst(g, 1, b, NULL, -1, 1));
  int q = TU_OP(g, Transpose, TU_OP(g, Reshape, proj[0], split));
  set_ints(g, q, "perm", 4, (int64_t[]){0, 2, 1, 3});
  int k = TU_OP(g, Transpose, TU_OP(g, Reshape, proj[1], split));
  set_ints(g, k, "perm", 4, (int64_t[]){0, 2, 3, 1});
  int v = TU_OP(g, Transpose, TU_OP(g, Reshape, proj[2], split));
  set_ints(g, v, "perm", 4, (int64_t[]){0, 2, 1, 3});
  int s = TU_OP(g, Add, TU_OP(g, Div, TU_OP(g, MatMul, q, k), scalar(g, 2.236068f)), mask);
  int y = TU_OP(g, Transpose, TU_OP(g, MatMul, TU_OP(g, Softmax, s), v));
  set_ints(g, y, "perm", 4, (int64_t[]){0, 2, 1, 3});
  *qt = q;
  return TU_OP(g, Reshape, y, ints(g, 3, (int64_t[]){2, 7, 15}));
}

static void test_fuse_mha_qkv(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){2, 7, 15});
  int mask = tu_graph_input(g, "mask", KL_F32, 4, (int64_t[]){2, 1, 1, 7});
  int qt;
  output(g, bert_attention(g, x, x, mask, &qt));
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  const kl_node *n = only(m, KL_OP_KilnMultiHeadAttention);
  assert_int_equal(kl_attr_int(n, "num_heads", 0), 3);
  assert_int_equal(n->n_in, 4); /* packed QKV, K and V absent, the mask */
  assert_int_equal(n->in[1], KL_ABSENT);
  assert_int_equal(n->in[2], KL_ABSENT);
  assert_int_equal(count(m, KL_OP_Transpose) + count(m, KL_OP_Reshape), 0);
  assert_int_equal(count(m, KL_OP_KilnFusedMatMul), 1);
  assert_int_equal(m->g->n_nodes, 2);
  assert_int_equal(fired(m, "fuse_mha"), 1);
  assert_int_equal(fired(m, "fuse_qkv"), 1);
  kiln_model_free(m);
}

static void test_fuse_mha_must_not_fire(void **state) {
  (void)state;
  /* K projected from another input: the heads fuse, the projections do not */
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){2, 7, 15});
  int x2 = tu_graph_input(g, "x2", KL_F32, 3, (int64_t[]){2, 7, 15});
  int mask = tu_graph_input(g, "mask", KL_F32, 4, (int64_t[]){2, 1, 1, 7});
  int qt;
  output(g, bert_attention(g, x, x2, mask, &qt));
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(count(m, KL_OP_KilnMultiHeadAttention), 1);
  assert_int_equal(fired(m, "fuse_qkv"), 0);
  assert_int_equal(count(m, KL_OP_KilnFusedMatMul), 3);
  kiln_model_free(m);
  /* Q's head split is a graph output too: nothing around the attention fuses */
  g = tu_graph_new();
  x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){2, 7, 15});
  mask = tu_graph_input(g, "mask", KL_F32, 4, (int64_t[]){2, 1, 1, 7});
  output(g, bert_attention(g, x, x, mask, &qt));
  output(g, qt);
  m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(count(m, KL_OP_KilnAttention), 1);
  assert_int_equal(count(m, KL_OP_KilnMultiHeadAttention), 0);
  assert_int_equal(fired(m, "fuse_qkv"), 0);
  kiln_model_free(m);
  /* heads given as [B, H, S, D] inputs (no split to fold, though the merge matches), and
   * a mask that would enlarge the scores */
  g = tu_graph_new();
  int64_t h[4] = {2, 3, 7, 5};
  int q = tu_graph_input(g, "q", KL_F32, 4, h), v = tu_graph_input(g, "v", KL_F32, 4, h);
  int k = tu_graph_input(g, "k", KL_F32, 4, (int64_t[]){2, 3, 5, 7});
  int y = TU_OP(g, Transpose, TU_OP(g, MatMul, TU_OP(g, Softmax, TU_OP(g, MatMul, q, k)), v));
  set_ints(g, y, "perm", 4, (int64_t[]){0, 2, 1, 3});
  output(g, TU_OP(g, Reshape, y, ints(g, 2, (int64_t[]){14, 15})));
  int big = tu_graph_input(g, "big", KL_F32, 5, (int64_t[]){2, 1, 1, 1, 7});
  int q2 = tu_graph_input(g, "q2", KL_F32, 4, h);
  output(g, TU_OP(g, MatMul, TU_OP(g, Softmax, TU_OP(g, Add, TU_OP(g, MatMul, q2, k), big)), v));
  m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(count(m, KL_OP_KilnAttention), 1);
  assert_int_equal(count(m, KL_OP_KilnMultiHeadAttention), 0);
  assert_int_equal(count(m, KL_OP_Softmax), 1);
  kiln_model_free(m);
}

/* transformers' sdpa self-attention as torch.onnx writes it, on x [B, S, 15], 3 heads of
 * 5: three projections with biases, heads split (Reshape to [0, 0, 3, 5], as shape_values
 * leaves a computed target, and Transpose), Q and the transposed K each scaled by
 * 5^-1/4, the mask added, the softmax guarded by Where(IsNaN), heads merged back to
 * [0, 0, 15]. dynamo: K transposed as the dynamo exporter does, [B, H, T, D] ->
 * [B*H, T, D] -> [B*H, D, T] -> [B, H, D, T] (B 2, S 7). */
static int sdpa_attention(kl_graph *g, int x, int mask, bool dynamo) {
  int64_t w[2] = {15, 15}, b[1] = {15};
  int split = ints(g, 4, (int64_t[]){0, 0, 3, 5}), heads[3];
  for (int i = 0; i < 3; i++) {
    int proj = TU_OP(g, Add, TU_OP(g, MatMul, x, cst(g, 2, w, NULL, -0.5f, 0.5f)),
                     cst(g, 1, b, NULL, -1, 1));
    heads[i] = TU_OP(g, Transpose, TU_OP(g, Reshape, proj, split));
    set_ints(g, heads[i], "perm", 4,
             i == 1 && !dynamo ? (int64_t[]){0, 2, 3, 1} : (int64_t[]){0, 2, 1, 3});
  }
  if (dynamo) {
    int merged = TU_OP(g, Reshape, heads[1], ints(g, 3, (int64_t[]){-1, 7, 5}));
    int kt = TU_OP(g, Transpose, merged);
    set_ints(g, kt, "perm", 3, (int64_t[]){0, 2, 1});
    heads[1] = TU_OP(g, Reshape, kt, ints(g, 4, (int64_t[]){2, 3, 5, 7}));
  }
  int c = scalar(g, 0.66874030f);
  int s = TU_OP(g, MatMul, TU_OP(g, Mul, heads[0], c), TU_OP(g, Mul, heads[1], c));
  int p = nan_guard(g, TU_OP(g, Softmax, TU_OP(g, Add, s, mask)), 0);
  int y = TU_OP(g, Transpose, TU_OP(g, MatMul, p, heads[2]));
  set_ints(g, y, "perm", 4, (int64_t[]){0, 2, 1, 3});
  return TU_OP(g, Reshape, y, ints(g, 3, (int64_t[]){0, 0, 15}));
}

/* g optimized at -O3: one kiln.MultiHeadAttention on packed QKV (one FusedMatMul) with
 * zero_masked_rows, n_nodes nodes in all. */
static kiln_model *expect_sdpa_mha(kl_graph *g, int n_nodes) {
  kiln_model *m = optimize(g, (opt){3, NULL, 0});
  const kl_node *n = only(m, KL_OP_KilnMultiHeadAttention);
  assert_int_equal(kl_attr_int(n, "num_heads", 0), 3);
  assert_float_equal(kl_attr_float(n, "scale", 0), 0.4472136f, 1e-6);
  assert_int_equal(kl_attr_int(n, "zero_masked_rows", 0), 1);
  assert_true(n->in[1] == KL_ABSENT && n->in[2] == KL_ABSENT);
  assert_int_equal(count(m, KL_OP_KilnFusedMatMul), 1);
  assert_int_equal(m->g->n_nodes, n_nodes);
  return m;
}

/* The sdpa export fuses as the classic one does. Batch and sequence symbolic, the mask
 * made from an input, Where(m > 0, 0, -inf) (its two nodes stay); then the dynamo
 * exporter's form at B 2, S 7, whose dead queries give 0. */
static void test_fuse_mha_sdpa(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){-1, -1, 15});
  int mi = tu_graph_input(g, "m", KL_F32, 4, (int64_t[]){-1, 1, 1, -1});
  int batch = kl_graph_symbol(g, "batch"), seq = kl_graph_symbol(g, "seq");
  g->values[x].type.dims[0] = g->values[mi].type.dims[0] = (kl_dim){-1, batch};
  g->values[x].type.dims[1] = g->values[mi].type.dims[3] = (kl_dim){-1, seq};
  int mask = TU_OP(g, Where, TU_OP(g, Greater, mi, scalar(g, 0)), scalar(g, 0),
                   scalar(g, -INFINITY));
  output(g, sdpa_attention(g, x, mask, false));
  kiln_model_free(expect_sdpa_mha(g, 4));
  g = tu_graph_new();
  x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){2, 7, 15});
  output(g, sdpa_attention(g, x, sdpa_mask(g, 7, 7, -INFINITY), true));
  kiln_model *m = expect_sdpa_mha(g, 2);
  expect_dead_rows(m, 0, 1, 7, 15);
  kiln_model_free(m);
}

/* GPT-2's attention on x [7, 15]: one Gemm to [7, 45], Reshape to [1, 7, 45], Split in
 * three, heads split, a causal mask, Q and K each scaled by D^-1/4 first (torch 2's
 * form), heads merged and flattened to [7, 15] for the next Gemm. The Split goes (packed
 * QKV); the flattening Reshape stays. */
static void test_fuse_mha_gpt2(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 2, (int64_t[]){7, 15});
  int qkv = TU_OP(g, Gemm, x, cst(g, 2, (int64_t[]){15, 45}, NULL, -0.5f, 0.5f),
                  cst(g, 1, (int64_t[]){45}, NULL, -1, 1));
  qkv = TU_OP(g, Reshape, qkv, ints(g, 3, (int64_t[]){1, 7, 45}));
  kl_err e = {0};
  int parts[3];
  for (int i = 0; i < 3; i++) parts[i] = kl_graph_add_value(g, NULL, &e);
  int split = kl_graph_add_node(g, KL_OP_Split, "split", 2,
                                (int[]){qkv, ints(g, 3, (int64_t[]){15, 15, 15})}, 3, parts, &e);
  assert_true(split >= 0);
  assert_int_equal(kl_node_set_int(g, split, "axis", 2, NULL), KILN_OK);
  int heads[3], shape = ints(g, 4, (int64_t[]){1, 7, 3, 5});
  float quarter = 0.66874030f; /* 5^-1/4 */
  for (int i = 0; i < 3; i++) {
    heads[i] = TU_OP(g, Transpose, TU_OP(g, Reshape, parts[i], shape));
    set_ints(g, heads[i], "perm", 4, i == 1 ? (int64_t[]){0, 2, 3, 1} : (int64_t[]){0, 2, 1, 3});
    if (i < 2) heads[i] = TU_OP(g, Mul, heads[i], scalar(g, quarter));
  }
  float causal[49];
  for (int i = 0; i < 49; i++) causal[i] = i % 7 <= i / 7 ? 0 : -1e4f;
  int s = TU_OP(g, Add, TU_OP(g, MatMul, heads[0], heads[1]),
                cst(g, 4, (int64_t[]){1, 1, 7, 7}, causal, 0, 0));
  int y = TU_OP(g, Transpose, TU_OP(g, MatMul, TU_OP(g, Softmax, s), heads[2]));
  set_ints(g, y, "perm", 4, (int64_t[]){0, 2, 1, 3});
  y = TU_OP(g, Reshape, y, ints(g, 2, (int64_t[]){7, 15}));
  output(g, TU_OP(g, Gemm, y, cst(g, 2, (int64_t[]){15, 15}, NULL, -0.5f, 0.5f)));
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  const kl_node *n = only(m, KL_OP_KilnMultiHeadAttention);
  assert_int_equal(kl_attr_int(n, "num_heads", 0), 3);
  assert_float_equal(kl_attr_float(n, "scale", 0), 0.4472136f, 1e-6);
  assert_int_equal(count(m, KL_OP_Split) + count(m, KL_OP_Transpose) + count(m, KL_OP_Mul), 0);
  kiln_model_free(m);
}

/* torchvision's nn.MultiheadAttention as ViT exports it, sequence first: x [S=5, B, 12],
 * one packed in_proj MatMul+Add to [5, B, 36], Reshape [5, B, 3, 12], Unsqueeze(0),
 * Transpose [3, 1, 2, 0, 4], Squeeze(3), Gather 0/1/2 on axis 0, each Reshape to
 * [5, B*3, 4], Transpose [1, 0, 2], Reshape to [B, 3, 5, 4] (K also Transposed to
 * [B, 3, 4, 5]); the result Transposed [2, 0, 1, 3] and flattened to [5*B, 12] for the
 * out-proj Gemm. Returns the Gemm's output. */
static int vit_attention(kl_graph *g, int64_t batch) {
  int x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){5, batch, 12});
  int qkv = TU_OP(g, Add, TU_OP(g, MatMul, x, cst(g, 2, (int64_t[]){12, 36}, NULL, -0.5f, 0.5f)),
                  cst(g, 1, (int64_t[]){36}, NULL, -1, 1));
  qkv = TU_OP(g, Reshape, qkv, ints(g, 4, (int64_t[]){5, batch, 3, 12}));
  qkv = TU_OP(g, Unsqueeze, qkv, ints(g, 1, (int64_t[]){0}));
  qkv = TU_OP(g, Transpose, qkv);
  set_ints(g, qkv, "perm", 5, (int64_t[]){3, 1, 2, 0, 4});
  qkv = TU_OP(g, Squeeze, qkv, ints(g, 1, (int64_t[]){3}));
  int heads[3];
  for (int i = 0; i < 3; i++) {
    int64_t idx = i;
    int part = TU_OP(g, Gather, qkv, tu_graph_const(g, NULL, KL_I64, 0, NULL, &idx));
    part = TU_OP(g, Reshape, part, ints(g, 3, (int64_t[]){5, batch * 3, 4}));
    part = TU_OP(g, Transpose, part);
    set_ints(g, part, "perm", 3, (int64_t[]){1, 0, 2});
    heads[i] = TU_OP(g, Reshape, part, ints(g, 4, (int64_t[]){batch, 3, 5, 4}));
  }
  int kt = TU_OP(g, Transpose, heads[1]);
  set_ints(g, kt, "perm", 4, (int64_t[]){0, 1, 3, 2});
  int s = TU_OP(g, Mul, TU_OP(g, MatMul, heads[0], kt), scalar(g, 0.5f));
  int y = TU_OP(g, Transpose, TU_OP(g, MatMul, TU_OP(g, Softmax, s), heads[2]));
  set_ints(g, y, "perm", 4, (int64_t[]){2, 0, 1, 3});
  y = TU_OP(g, Reshape, y, ints(g, 2, (int64_t[]){5 * batch, 12}));
  return TU_OP(g, Gemm, y, cst(g, 2, (int64_t[]){12, 12}, NULL, -0.5f, 0.5f));
}

/* With batch 1 the sequence-first rows are token-major rows: packed QKV read through
 * one Reshape to [1, 5, 36], the merged [1, 5, 12] Reshaped to [5, 12] for the Gemm.
 * With batch 2 the tokens of one batch are not adjacent rows: nothing fuses. */
static void test_fuse_mha_vit(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  output(g, vit_attention(g, 1));
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  const kl_node *n = only(m, KL_OP_KilnMultiHeadAttention);
  assert_int_equal(kl_attr_int(n, "num_heads", 0), 3);
  assert_float_equal(kl_attr_float(n, "scale", 0), 0.5f, 1e-6);
  assert_int_equal(n->n_in, 1); /* packed QKV, no mask */
  assert_int_equal(count(m, KL_OP_Transpose) + count(m, KL_OP_Gather) +
                       count(m, KL_OP_Squeeze) + count(m, KL_OP_Unsqueeze),
                   0);
  assert_int_equal(count(m, KL_OP_Reshape), 2);
  assert_int_equal(m->g->n_nodes, 5);
  assert_int_equal(fired(m, "fuse_mha"), 1);
  kiln_model_free(m);
  g = tu_graph_new();
  output(g, vit_attention(g, 2));
  m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(count(m, KL_OP_KilnAttention), 1);
  assert_int_equal(count(m, KL_OP_KilnMultiHeadAttention), 0);
  assert_int_equal(fired(m, "fuse_mha"), 0);
  kiln_model_free(m);
}

/* Swin's window attention: x [4 windows, 5 tokens, 12], qkv Linear to [4, 5, 36],
 * Reshape [4, 5, 3, 3, 4], Transpose [2, 0, 3, 1, 4], Gather per q, k, v (order[i] for
 * part i), K Transposed, a relative position bias [1, 3, 5, 5] added, the result
 * Transposed [0, 2, 1, 3] and Reshaped to [4, 5, 12]. Returns that Reshape's output.
 * unbind 1 or 2 takes q, k, v apart as torch's unbind may export: Split on axis 0 (by
 * sizes [1, 1, 1], or in num_outputs equal parts), then Squeeze(0) each (order unused). */
static int swin_attention(kl_graph *g, const int64_t order[3], int unbind) {
  int x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){4, 5, 12});
  int qkv = TU_OP(g, Add, TU_OP(g, MatMul, x, cst(g, 2, (int64_t[]){12, 36}, NULL, -0.5f, 0.5f)),
                  cst(g, 1, (int64_t[]){36}, NULL, -1, 1));
  qkv = TU_OP(g, Reshape, qkv, ints(g, 5, (int64_t[]){4, 5, 3, 3, 4}));
  qkv = TU_OP(g, Transpose, qkv);
  set_ints(g, qkv, "perm", 5, (int64_t[]){2, 0, 3, 1, 4});
  int part[3];
  for (int i = 0; unbind == 0 && i < 3; i++) {
    part[i] = TU_OP(g, Gather, qkv, tu_graph_const(g, NULL, KL_I64, 0, NULL, &order[i]));
    set_int(g, part[i], "axis", 0);
  }
  if (unbind) {
    kl_err e = {0};
    for (int i = 0; i < 3; i++) part[i] = kl_graph_add_value(g, NULL, &e);
    int in[2] = {qkv, ints(g, 3, (int64_t[]){1, 1, 1})};
    int split = kl_graph_add_node(g, KL_OP_Split, "unbind", unbind == 1 ? 2 : 1, in, 3, part, &e);
    assert_true(split >= 0);
    assert_int_equal(kl_node_set_int(g, split, "axis", 0, NULL), KILN_OK);
    if (unbind == 2) assert_int_equal(kl_node_set_int(g, split, "num_outputs", 3, NULL), KILN_OK);
    for (int i = 0; i < 3; i++) part[i] = TU_OP(g, Squeeze, part[i], ints(g, 1, (int64_t[]){0}));
  }
  int kt = TU_OP(g, Transpose, part[1]);
  set_ints(g, kt, "perm", 4, (int64_t[]){0, 1, 3, 2});
  int q = TU_OP(g, Mul, part[0], scalar(g, 0.5f));
  int s = TU_OP(g, Add, TU_OP(g, MatMul, q, kt), cst(g, 4, (int64_t[]){1, 3, 5, 5}, NULL, -1, 1));
  int y = TU_OP(g, Transpose, TU_OP(g, MatMul, TU_OP(g, Softmax, s), part[2]));
  set_ints(g, y, "perm", 4, (int64_t[]){0, 2, 1, 3});
  return TU_OP(g, Reshape, y, ints(g, 3, (int64_t[]){4, 5, 12}));
}

static void test_fuse_mha_swin(void **state) {
  (void)state;
  for (int unbind = 0; unbind < 3; unbind++) {
    kl_graph *g = tu_graph_new();
    output(g, swin_attention(g, (int64_t[]){0, 1, 2}, unbind));
    kiln_model *m = optimize(g, (opt){2, NULL, 0});
    const kl_node *n = only(m, KL_OP_KilnMultiHeadAttention);
    assert_int_equal(kl_attr_int(n, "num_heads", 0), 3);
    assert_float_equal(kl_attr_float(n, "scale", 0), 0.5f, 1e-6);
    assert_int_equal(n->n_in, 4); /* packed QKV, K and V absent, the bias as Mask */
    assert_int_equal(n->in[1], KL_ABSENT);
    assert_int_equal(n->in[2], KL_ABSENT);
    assert_int_equal(count(m, KL_OP_Transpose) + count(m, KL_OP_Reshape) +
                         count(m, KL_OP_Gather) + count(m, KL_OP_Split) + count(m, KL_OP_Squeeze),
                     0);
    assert_int_equal(m->g->n_nodes, 2);
    kiln_model_free(m);
  }
}

static void test_fuse_mha_views_must_not_fire(void **state) {
  (void)state;
  /* K and Q taken from each other's places in the packed rows */
  kl_graph *g = tu_graph_new();
  output(g, swin_attention(g, (int64_t[]){1, 0, 2}, 0));
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(count(m, KL_OP_KilnMultiHeadAttention), 0);
  assert_int_equal(count(m, KL_OP_KilnAttention), 1);
  kiln_model_free(m);
  /* the merged heads are a graph output before their last Reshape, as [4, 5, 3, 4]:
   * the fused op reshaped back to it, the Reshape after it reading that */
  g = tu_graph_new();
  int y = swin_attention(g, (int64_t[]){0, 1, 2}, 0);
  output(g, y);
  output(g, g->nodes[node_of(g, y)].in[0]);
  m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(count(m, KL_OP_KilnMultiHeadAttention), 1);
  assert_int_equal(count(m, KL_OP_Transpose), 0);
  assert_int_equal(count(m, KL_OP_Reshape), 2);
  kiln_model_free(m);
  /* the heads read as [B, S, H, D] (Transpose [2, 0, 1, 3, 4] in place of Swin's
   * [2, 0, 3, 1, 4]) and the attention taken over the heads axis: no token-major rows */
  g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){4, 5, 36});
  int qkv = TU_OP(g, Reshape, x, ints(g, 5, (int64_t[]){4, 5, 3, 3, 4}));
  qkv = TU_OP(g, Transpose, qkv);
  set_ints(g, qkv, "perm", 5, (int64_t[]){2, 0, 1, 3, 4});
  int part[3];
  for (int i = 0; i < 3; i++) {
    int64_t idx = i;
    part[i] = TU_OP(g, Gather, qkv, tu_graph_const(g, NULL, KL_I64, 0, NULL, &idx));
  }
  int kt = TU_OP(g, Transpose, part[1]);
  set_ints(g, kt, "perm", 4, (int64_t[]){0, 1, 3, 2});
  int s = TU_OP(g, Softmax, TU_OP(g, MatMul, part[0], kt));
  y = TU_OP(g, Transpose, TU_OP(g, MatMul, s, part[2]));
  set_ints(g, y, "perm", 4, (int64_t[]){0, 2, 1, 3});
  output(g, TU_OP(g, Reshape, y, ints(g, 3, (int64_t[]){4, 3, 20})));
  m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(count(m, KL_OP_KilnMultiHeadAttention), 0);
  assert_int_equal(count(m, KL_OP_KilnAttention), 1);
  kiln_model_free(m);
}

/* RMSNorm as T5 exports it (Pow, ReduceMean, Add, Sqrt, Div(1, .) or Reciprocal, Mul by
 * x, Mul by the weight on either side) and as Mul(x, x) with Div(x, Sqrt). */
static void test_fuse_rmsnorm(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 3, H3);
  int axes = ints(g, 1, (int64_t[]){-1});
  int w = cst(g, 1, (int64_t[]){8}, NULL, 0.5f, 1.5f);
  int ms = TU_OP(g, ReduceMean, TU_OP(g, Pow, x, scalar(g, 2)), axes);
  int r = TU_OP(g, Div, scalar(g, 1), TU_OP(g, Sqrt, TU_OP(g, Add, ms, scalar(g, 1e-6f))));
  output(g, TU_OP(g, Mul, w, TU_OP(g, Mul, x, r)));
  ms = TU_OP(g, ReduceMean, TU_OP(g, Pow, x, scalar(g, 2)), axes);
  r = TU_OP(g, Reciprocal, TU_OP(g, Sqrt, TU_OP(g, Add, scalar(g, 1e-5f), ms)));
  output(g, TU_OP(g, Mul, r, x)); /* no weight */
  int two = ints(g, 2, (int64_t[]){1, 2});
  ms = TU_OP(g, ReduceMean, TU_OP(g, Mul, x, x), two);
  int n = TU_OP(g, Div, x, TU_OP(g, Sqrt, TU_OP(g, Add, ms, scalar(g, 1e-6f))));
  output(g, TU_OP(g, Mul, n, cst(g, 2, (int64_t[]){5, 8}, NULL, 0.5f, 1.5f)));
  kiln_model *m = with_pass(g, "+fuse_rmsnorm");
  assert_int_equal(m->g->n_nodes, 3);
  assert_int_equal(count(m, KL_OP_RMSNormalization), 3);
  kiln_model_free(m);
}

static void test_fuse_rmsnorm_must_not_fire(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 3, H3), y = tu_graph_input(g, "y", KL_F32, 3, H3);
  int last = ints(g, 1, (int64_t[]){-1}), mid = ints(g, 1, (int64_t[]){1});
  /* the mean over a middle axis */
  int ms = TU_OP(g, ReduceMean, TU_OP(g, Pow, x, scalar(g, 2)), mid);
  output(g, TU_OP(g, Mul, x, TU_OP(g, Reciprocal, TU_OP(g, Sqrt, TU_OP(g, Add, ms, scalar(g, 1e-6f))))));
  /* the squares of y scale x */
  ms = TU_OP(g, ReduceMean, TU_OP(g, Pow, y, scalar(g, 2)), last);
  output(g, TU_OP(g, Mul, x, TU_OP(g, Reciprocal, TU_OP(g, Sqrt, TU_OP(g, Add, ms, scalar(g, 1e-6f))))));
  /* the mean square is read again */
  ms = TU_OP(g, ReduceMean, TU_OP(g, Mul, x, x), last);
  output(g, ms);
  output(g, TU_OP(g, Div, x, TU_OP(g, Sqrt, TU_OP(g, Add, ms, scalar(g, 1e-6f)))));
  kiln_model *m = with_pass(g, "+fuse_rmsnorm");
  assert_int_equal(count(m, KL_OP_RMSNormalization), 0);
  kiln_model_free(m);
}

/* GPT-2's MLP: Gemm on [B*S, C], Reshape to [B, S, 4C], Gelu: the Gelu moves above the
 * Reshape into the Gemm. Not when the Reshape's or the Gemm's result is read again. */
static void test_sink_reshape(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 2, (int64_t[]){6, 8});
  int shape = ints(g, 3, (int64_t[]){2, 3, 10});
  int mm = TU_OP(g, Gemm, x, cst(g, 2, (int64_t[]){8, 10}, NULL, -1, 1),
                 cst(g, 1, (int64_t[]){10}, NULL, -1, 1));
  output(g, TU_OP(g, Gelu, TU_OP(g, Reshape, mm, shape)));
  int mm2 = TU_OP(g, MatMul, x, cst(g, 2, (int64_t[]){8, 10}, NULL, -1, 1));
  int r2 = TU_OP(g, Reshape, mm2, shape);
  output(g, TU_OP(g, Relu, r2));
  output(g, r2); /* the reshaped result is an output too */
  int mm3 = TU_OP(g, MatMul, x, cst(g, 2, (int64_t[]){8, 10}, NULL, -1, 1));
  output(g, TU_OP(g, Tanh, TU_OP(g, Reshape, mm3, shape)));
  output(g, TU_OP(g, Sigmoid, mm3)); /* the matmul's result is read twice */
  kiln_model *m = optimize(g, (opt){2, NULL, 0});
  assert_int_equal(fired(m, "sink_reshape"), 1);
  const kl_node *n = only(m, KL_OP_KilnFusedGemm);
  assert_string_equal(kl_attr_string(n, "activation", ""), "Gelu");
  assert_int_equal(count(m, KL_OP_Gelu), 0);
  assert_int_equal(count(m, KL_OP_Relu), 1);
  assert_int_equal(count(m, KL_OP_Tanh), 1);
  kiln_model_free(m);
}

/* ---- the manager, the writer, the fused ops ---- */

static void test_unknown_pass(void **state) {
  (void)state;
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "passes", "+fold_bn,-nonesuch"), KILN_OK);
  kiln_model *m = NULL;
  assert_int_equal(kiln_model_load("models/digits_cnn/model.onnx", o, &m),
                   KILN_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kiln_model_error(m), "nonesuch"));
  kiln_model_free(m);
  kiln_options_free(o);
}

/* The digits CNN: BN folded, Relu fused; the optimized graph written as ONNX reloads
 * at -O0 as the same graph and at -O2 with nothing left to do. */
static void test_round_trip(void **state) {
  (void)state;
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  kiln_model *m = NULL;
  assert_int_equal(kiln_model_load("models/digits_cnn/model.onnx", o, &m), KILN_OK);
  assert_int_equal(count(m, KL_OP_BatchNormalization), 0);
  assert_int_equal(count(m, KL_OP_KilnFusedConv), 2);
  void *buf;
  size_t len;
  kl_err e = {0};
  assert_int_equal(kl_onnx_export(m->g, &buf, &len, &e), KILN_OK);
  kiln_model *again = load(buf, len, (opt){0, NULL, 0});
  kiln_model *re2 = load(buf, len, (opt){2, NULL, 0});
  free(buf);
  assert_int_equal(again->g->n_nodes, m->g->n_nodes);
  for (int i = 0; i < m->g->n_nodes; i++) {
    assert_int_equal(again->g->nodes[i].op, m->g->nodes[i].op);
    assert_int_equal(again->g->nodes[i].n_attrs, m->g->nodes[i].n_attrs);
  }
  for (int k = 0; k < re2->stats.n_passes; k++) assert_int_equal(re2->stats.fired[k], 0);
  compare(m, again);
  compare(m, re2);
  kiln_model_free(again);
  kiln_model_free(re2);
  kiln_model_free(m);
  kiln_options_free(o);
}

/* A fused node with an activation kiln does not know is refused at load. */
static void test_fused_bad_activation(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, X4);
  int y = tu_graph_op(g, KL_OP_KilnFusedConv, 2,
                      (int[]){x, cst(g, 4, (int64_t[]){4, 3, 1, 1}, NULL, -1, 1)});
  set_string(g, y, "activation", "Swoosh");
  output(g, y);
  void *buf;
  size_t len;
  assert_int_equal(kl_onnx_export(g, &buf, &len, NULL), KILN_OK);
  kl_graph_free(g);
  kiln_model *m = NULL;
  assert_int_equal(kiln_model_load_memory(buf, len, NULL, &m), KILN_ERR_INVALID_MODEL);
  assert_non_null(strstr(kiln_model_error(m), "activation"));
  kiln_model_free(m);
  free(buf);
}

/* kiln.MultiHeadAttention's inference refuses widths that do not split into the heads,
 * K without V, and a mask that does not broadcast to [B, H, S, T]. */
static void test_mha_bad_shapes(void **state) {
  (void)state;
  static const struct {
    int64_t q, k, v, heads, mask_s;
    const char *msg;
  } cases[] = {
      {15, 15, 15, 4, 1, "multiple of num_heads"},
      {45, 0, 0, 4, 1, "3 * num_heads"},
      {12, 12, -1, 4, 1, "both"},
      {12, 12, 12, 4, 3, "Mask"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kl_graph *g = tu_graph_new();
    int q = tu_graph_input(g, "q", KL_F32, 3, (int64_t[]){2, 5, cases[i].q});
    int k = cases[i].k ? tu_graph_input(g, "k", KL_F32, 3, (int64_t[]){2, 5, cases[i].k})
                       : KL_ABSENT;
    int v = cases[i].v > 0 ? tu_graph_input(g, "v", KL_F32, 3, (int64_t[]){2, 5, cases[i].v})
                           : KL_ABSENT;
    int mask = tu_graph_input(g, "mask", KL_F32, 4, (int64_t[]){2, 1, cases[i].mask_s, 5});
    int y = tu_graph_op(g, KL_OP_KilnMultiHeadAttention, 4, (int[]){q, k, v, mask});
    set_int(g, y, "num_heads", cases[i].heads);
    output(g, y);
    void *buf;
    size_t len;
    assert_int_equal(kl_onnx_export(g, &buf, &len, NULL), KILN_OK);
    kl_graph_free(g);
    kiln_model *m = NULL;
    assert_int_not_equal(kiln_model_load_memory(buf, len, NULL, &m), KILN_OK);
    if (!strstr(kiln_model_error(m), cases[i].msg))
      fail_msg("case %zu: '%s' does not say '%s'", i, kiln_model_error(m), cases[i].msg);
    kiln_model_free(m);
    free(buf);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_eliminate),
      cmocka_unit_test(test_eliminate_unit_axis_transpose),
      cmocka_unit_test(test_eliminate_spatial_reduce),
      cmocka_unit_test(test_eliminate_keeps_real_work),
      cmocka_unit_test(test_const_fold),
      cmocka_unit_test(test_const_fold_limit),
      cmocka_unit_test(test_shape_values),
      cmocka_unit_test(test_shape_values_must_not_fire),
      cmocka_unit_test(test_shape_values_names_unknown_dims),
      cmocka_unit_test(test_shape_values_slice_bound),
      cmocka_unit_test(test_cse),
      cmocka_unit_test(test_fold_bn_conv),
      cmocka_unit_test(test_fold_bn_must_not_fire),
      cmocka_unit_test(test_fold_bn_conv_transpose_gemm_matmul),
      cmocka_unit_test(test_fold_scale_bias),
      cmocka_unit_test(test_fold_scale_bias_must_not_fire),
      cmocka_unit_test(test_fold_scale_across_mul),
      cmocka_unit_test(test_fold_scale_bias_through_activation),
      cmocka_unit_test(test_fold_scale_bias_through_activation_must_not_fire),
      cmocka_unit_test(test_merge_convs),
      cmocka_unit_test(test_merge_convs_repmixer),
      cmocka_unit_test(test_merge_convs_must_not_fire),
      cmocka_unit_test(test_fuse_activations),
      cmocka_unit_test(test_fuse_act_must_not_fire),
      cmocka_unit_test(test_fuse_sum),
      cmocka_unit_test(test_fuse_sum_must_not_fire),
      cmocka_unit_test(test_fold_input_scale),
      cmocka_unit_test(test_trim_taps),
      cmocka_unit_test(test_trim_taps_must_not_fire),
      cmocka_unit_test(test_fold_input_scale_symbolic_batch),
      cmocka_unit_test(test_fold_input_scale_must_not_fire),
      cmocka_unit_test(test_matmul_add_and_transpose),
      cmocka_unit_test(test_collapse_reshape_transpose),
      cmocka_unit_test(test_collapse_unmerge),
      cmocka_unit_test(test_fuse_layernorm_and_skip),
      cmocka_unit_test(test_fuse_layernorm_must_not_fire),
      cmocka_unit_test(test_fuse_gelu),
      cmocka_unit_test(test_fuse_attention),
      cmocka_unit_test(test_fuse_attention_must_not_fire),
      cmocka_unit_test(test_fuse_attention_two_masks),
      cmocka_unit_test(test_fuse_attention_windows),
      cmocka_unit_test(test_fuse_attention_sdpa),
      cmocka_unit_test(test_fuse_mha_qkv),
      cmocka_unit_test(test_fuse_mha_must_not_fire),
      cmocka_unit_test(test_fuse_mha_sdpa),
      cmocka_unit_test(test_fuse_mha_gpt2),
      cmocka_unit_test(test_fuse_mha_vit),
      cmocka_unit_test(test_fuse_mha_swin),
      cmocka_unit_test(test_fuse_mha_views_must_not_fire),
      cmocka_unit_test(test_fuse_rmsnorm),
      cmocka_unit_test(test_fuse_rmsnorm_must_not_fire),
      cmocka_unit_test(test_sink_reshape),
      cmocka_unit_test(test_unknown_pass),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_fused_bad_activation),
      cmocka_unit_test(test_mha_bad_shapes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
