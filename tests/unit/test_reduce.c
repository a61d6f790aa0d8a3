/* The reduce family: Reduce*, ArgMax/ArgMin, CumSum/CumProd, TopK, Einsum, the
 * normalizations and the losses.
 *
 * Shape inference is checked on types alone (symbolic and unknown dims, negative axes,
 * errors); kernels on small inputs whose outputs were computed independently, with
 * NumPy (the numbers are pasted below) or by hand. Each test builds one node in a fresh
 * graph. Dims are written as numbers: >= 0 known, U unknown, B the symbol "batch".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

#define MAX_IO 4
#define U (-1)
#define B (-100) /* symbol 0, "batch" */
#define UNKNOWN_RANK (-7)

typedef struct fixture {
  kl_graph *g;
  int node, n_in, n_out;
  kl_type in[MAX_IO], out[MAX_IO];
  bool present[MAX_IO];
  const void *data[MAX_IO];
  kl_tensor tin[MAX_IO], tout[MAX_IO]; /* kernel tests */
  kl_err e;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f || !(f->g = kl_graph_new()) || kl_graph_symbol(f->g, "batch") != 0) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  for (int i = 0; i < MAX_IO; i++) {
    free(f->tin[i].data);
    free(f->tout[i].data);
  }
  kl_graph_free(f->g);
  free(f);
  return 0;
}

static kl_type make_type(kl_dtype dt, int rank, const int64_t *dims) {
  kl_type t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rank = rank == UNKNOWN_RANK ? -1 : rank;
  for (int i = 0; i < rank; i++) {
    t.dims[i].size = dims[i] >= 0 ? dims[i] : -1;
    t.dims[i].sym = dims[i] <= B ? (int32_t)(B - dims[i]) : -1;
  }
  return t;
}

#define COUNT(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define TY(dt, ...) make_type(dt, COUNT(__VA_ARGS__), (const int64_t[]){__VA_ARGS__})
#define TY0(dt) make_type(dt, 0, NULL)
#define TYU(dt) make_type(dt, UNKNOWN_RANK, NULL)

/* A node of op `name` with n_in inputs, all present until absent() says otherwise. */
static void node(fixture *f, const char *name, int n_in, int n_out) {
  int ins[MAX_IO], outs[MAX_IO];
  for (int i = 0; i < n_in; i++) ins[i] = kl_graph_add_value(f->g, NULL, &f->e);
  for (int i = 0; i < n_out; i++) outs[i] = kl_graph_add_value(f->g, NULL, &f->e);
  kl_op op = kl_op_lookup("", name);
  assert_int_not_equal(op, KL_OP_COUNT);
  f->node = kl_graph_add_node(f->g, op, name, n_in, ins, n_out, outs, &f->e);
  assert_true(f->node >= 0);
  f->n_in = n_in;
  f->n_out = n_out;
  for (int i = 0; i < n_in; i++) f->present[i] = true;
  memset(f->data, 0, sizeof f->data);
}

static void absent(fixture *f, int i) { f->present[i] = false; }

static void set_int(fixture *f, const char *name, int64_t v) {
  assert_int_equal(kl_node_set_int(f->g, f->node, name, v, &f->e), KILN_OK);
}

static void set_float(fixture *f, const char *name, float v) {
  assert_int_equal(kl_node_set_float(f->g, f->node, name, v, &f->e), KILN_OK);
}

static void set_string(fixture *f, const char *name, const char *v) {
  assert_int_equal(kl_node_set_string(f->g, f->node, name, v, &f->e), KILN_OK);
}

/* An int64 constant input i holding n values (0-D when rank is 0). */
static void const_ints(fixture *f, int i, int rank, const int64_t *v, int64_t n) {
  f->in[i] = rank == 0 ? TY0(KL_I64) : make_type(KL_I64, 1, &n);
  f->data[i] = v;
}

static int infer(fixture *f) {
  const kl_type *in[MAX_IO];
  for (int i = 0; i < f->n_in; i++) in[i] = f->present[i] ? &f->in[i] : NULL;
  for (int i = 0; i < f->n_out; i++) {
    memset(&f->out[i], 0, sizeof f->out[i]);
    f->out[i].rank = -1;
  }
  kl_err_clear(&f->e);
  const kl_node *n = &f->g->nodes[f->node];
  kl_infer_ctx c = {f->g, n, f->n_in, f->n_out, in, f->data, f->out, &f->e};
  return kl_op_get(n->op)->infer(&c);
}

static void expect_type(const fixture *f, int k, kl_type want) {
  const kl_type *got = &f->out[k];
  assert_int_equal(got->dtype, want.dtype);
  assert_int_equal(got->rank, want.rank);
  for (int i = 0; i < want.rank; i++) {
    assert_int_equal(got->dims[i].size, want.dims[i].size);
    if (want.dims[i].size < 0) assert_int_equal(got->dims[i].sym, want.dims[i].sym);
  }
}

/* The call failed with `code` and a message containing `part`. */
static void expect_error(fixture *f, int st, kiln_status code, const char *part) {
  assert_int_equal(st, code);
  if (!strstr(f->e.msg, part)) fail_msg("message \"%s\" lacks \"%s\"", f->e.msg, part);
}

/* ---- kernels ---- */

/* Concrete input i of dtype dt holding vals (stored in dt). */
static void tensor_in(fixture *f, int i, kl_dtype dt, int rank, const int64_t *dims,
                      const double *vals) {
  kl_tensor *t = &f->tin[i];
  free(t->data);
  t->dtype = dt;
  t->rank = rank;
  memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
  int64_t n = kl_tensor_numel(t);
  t->data = calloc((size_t)(n ? n : 1), kl_dtype_size(dt));
  assert_non_null(t->data);
  for (int64_t k = 0; k < n; k++) kl_store_f64(t->data, dt, (size_t)k, vals[k]);
  memset(&f->in[i], 0, sizeof f->in[i]);
  f->in[i].dtype = dt;
  kl_type_set_shape(&f->in[i], rank, dims);
  f->data[i] = t->data;
}

#define IN(f, i, dt, dims, ...) \
  tensor_in(f, i, dt, (int)(sizeof dims / sizeof dims[0]), dims, (const double[]){__VA_ARGS__})

/* Runs infer on the concrete inputs, then the reference kernel; returns its status. */
static int run(fixture *f) {
  int st = infer(f);
  if (st != KILN_OK) return st;
  const kl_tensor *in[MAX_IO];
  kl_tensor *out[MAX_IO];
  for (int i = 0; i < f->n_in; i++) in[i] = f->present[i] ? &f->tin[i] : NULL;
  for (int k = 0; k < f->n_out; k++) {
    kl_tensor *t = &f->tout[k];
    free(t->data);
    assert_true(kl_type_is_concrete(&f->out[k]));
    t->dtype = f->out[k].dtype;
    t->rank = f->out[k].rank;
    for (int d = 0; d < t->rank; d++) t->dims[d] = f->out[k].dims[d].size;
    t->data = calloc(kl_tensor_nbytes(t) + 1, 1);
    assert_non_null(t->data);
    out[k] = t;
  }
  const kl_node *n = &f->g->nodes[f->node];
  kl_kernel_ctx c = {n, f->n_in, f->n_out, in, out, &f->e, 1, NULL};
  return kl_op_get(n->op)->ref(&c);
}

static void expect_values(const fixture *f, int k, const double *want, int64_t n, double tol) {
  const kl_tensor *t = &f->tout[k];
  assert_int_equal(kl_tensor_numel(t), n);
  for (int64_t i = 0; i < n; i++) {
    double got = kl_load_f64(t->data, t->dtype, (size_t)i);
    if (isinf(want[i]) && got == want[i]) continue;
    if (!(fabs(got - want[i]) <= tol * (1 + fabs(want[i]))))
      fail_msg("output %d [%lld]: got %.9g, want %.9g", k, (long long)i, got, want[i]);
  }
}

#define EXPECT(f, k, tol, ...)                                                       \
  expect_values(f, k, (const double[]){__VA_ARGS__},                                 \
                (int64_t)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)), tol)

static const int64_t D2x3[] = {2, 3};

/* ---- Reduce*: inference ---- */

static void test_reduce_infer_axes(void **state) {
  fixture *f = *state;
  static const int64_t axes[] = {-1, 1};
  node(f, "ReduceMean", 2, 1);
  f->in[0] = TY(KL_F32, B, 3, 4);
  const_ints(f, 1, 1, axes, 2);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_F32, B, 1, 1));
  set_int(f, "keepdims", 0);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_F32, B));
}

static void test_reduce_infer_empty_axes(void **state) {
  fixture *f = *state;
  node(f, "ReduceSum", 2, 1);
  f->in[0] = TY(KL_I64, B, 3);
  const_ints(f, 1, 1, NULL, 0);
  set_int(f, "keepdims", 0);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY0(KL_I64)); /* every axis */
  set_int(f, "noop_with_empty_axes", 1);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_I64, B, 3)); /* none */
  absent(f, 1);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_I64, B, 3));
}

static void test_reduce_infer_unknown_axes(void **state) {
  fixture *f = *state;
  node(f, "ReduceMax", 2, 1);
  f->in[0] = TY(KL_F32, B, 1, 5);
  f->in[1] = TY(KL_I64, 2); /* two axes, contents not known (a graph input) */
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_F32, U, 1, U)); /* only the 1 is sure */
  set_int(f, "keepdims", 0);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_F32, U));
  f->in[0] = TYU(KL_F32);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TYU(KL_F32));
}

static void test_reduce_infer_errors(void **state) {
  fixture *f = *state;
  static const int64_t twice[] = {1, -1}, far[] = {2};
  node(f, "ReduceL2", 2, 1);
  f->in[0] = TY(KL_F32, 4, 5);
  const_ints(f, 1, 1, twice, 2);
  expect_error(f, infer(f), KILN_ERR_SHAPE, "naming axis 1 a second time");
  const_ints(f, 1, 1, far, 1);
  expect_error(f, infer(f), KILN_ERR_SHAPE, "axes[0] is 2, out of range for rank 2");
  f->in[0] = TY(KL_BOOL, 4, 5);
  expect_error(f, infer(f), KILN_ERR_UNSUPPORTED, "input 0 (data) is bool");
}

/* ---- Reduce*: kernels ---- */

static void reduce_case(fixture *f, const char *op, int64_t axis, int keepdims) {
  node(f, op, 2, 1);
  static const int64_t one[] = {1};
  IN(f, 0, KL_F32, D2x3, 0.5, -1.25, 2.0, 3.5, 0.75, -0.5);
  tensor_in(f, 1, KL_I64, 1, one, (const double[]){(double)axis});
  set_int(f, "keepdims", keepdims);
}

static void test_reduce_kernels(void **state) {
  fixture *f = *state;
  reduce_case(f, "ReduceSum", 1, 0);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 1e-6, 1.25, 3.75);
  reduce_case(f, "ReduceMean", 0, 1);
  assert_int_equal(run(f), KILN_OK);
  expect_type(f, 0, TY(KL_F32, 1, 3));
  EXPECT(f, 0, 1e-6, 2.0, -0.25, 0.75);
  reduce_case(f, "ReduceMin", -1, 0);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 0, -1.25, -0.5);
  reduce_case(f, "ReduceLogSumExp", 1, 0); /* NumPy: log(exp(x).sum(1)) */
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 1e-6, 2.232622, 3.5790362);
  reduce_case(f, "ReduceL2", 0, 0);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 1e-6, 3.5355339, 1.457738, 2.0615528);
}

/* Over a zero-size axis each reduction gives its identity. */
static void test_reduce_empty_set(void **state) {
  fixture *f = *state;
  static const int64_t dims[] = {2, 0}, one[] = {1};
  const char *ops[] = {"ReduceSum", "ReduceProd", "ReduceLogSum", "ReduceMax", "ReduceMin"};
  const double want[] = {0, 1, -INFINITY, -INFINITY, INFINITY};
  for (int i = 0; i < 5; i++) {
    node(f, ops[i], 2, 1);
    tensor_in(f, 0, KL_F32, 2, dims, NULL);
    tensor_in(f, 1, KL_I64, 1, one, (const double[]){1});
    assert_int_equal(run(f), KILN_OK);
    expect_values(f, 0, (const double[]){want[i], want[i]}, 2, 0);
  }
  node(f, "ReduceMax", 2, 1);
  tensor_in(f, 0, KL_I32, 2, dims, NULL);
  tensor_in(f, 1, KL_I64, 1, one, (const double[]){1});
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 0, INT32_MIN, INT32_MIN);
}

/* With noop_with_empty_axes and no axes each set is one element: f(x) elementwise. */
static void test_reduce_noop(void **state) {
  fixture *f = *state;
  node(f, "ReduceSumSquare", 2, 1);
  IN(f, 0, KL_F32, D2x3, 0.5, -1.25, 2.0, 3.5, 0.75, -0.5);
  absent(f, 1);
  set_int(f, "noop_with_empty_axes", 1);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 1e-6, 0.25, 1.5625, 4.0, 12.25, 0.5625, 0.25);
}

/* Integer sums wrap to the dtype, like NumPy; Max selects exactly. */
static void test_reduce_integers(void **state) {
  fixture *f = *state;
  static const int64_t dims[] = {3};
  node(f, "ReduceSum", 2, 1);
  IN(f, 0, KL_I32, dims, 2147483647, 1, 5);
  absent(f, 1);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 0, -2147483643.0);
  node(f, "ReduceMax", 2, 1);
  IN(f, 0, KL_U64, dims, 7, 18446744073709549568.0, 9);
  absent(f, 1);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 0, 18446744073709549568.0);
}

/* ---- ArgMax, ArgMin ---- */

static void test_argmax(void **state) {
  fixture *f = *state;
  node(f, "ArgMax", 1, 1);
  f->in[0] = TY(KL_F16, B, 7, 3);
  set_int(f, "axis", -2);
  set_int(f, "keepdims", 0);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_I64, B, 3));
  f->in[0] = TY(KL_F32, 2, 0, 3);
  expect_error(f, infer(f), KILN_ERR_SHAPE, "axis 1 of input 0 (data) is empty");
  IN(f, 0, KL_F32, D2x3, 4, 1, 4, -2, 7, 7);
  set_int(f, "axis", 1);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 0, 0, 1); /* ties: the first */
  set_int(f, "select_last_index", 1);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 0, 2, 2);
  node(f, "ArgMin", 1, 1);
  IN(f, 0, KL_I32, D2x3, 4, 1, 4, -2, 7, 7);
  assert_int_equal(run(f), KILN_OK);
  expect_type(f, 0, TY(KL_I64, 1, 3));
  EXPECT(f, 0, 0, 1, 0, 0);
}

/* ---- CumSum, CumProd ---- */

static void test_cumulative(void **state) {
  fixture *f = *state;
  static const int64_t axis = -1;
  node(f, "CumSum", 2, 1);
  f->in[0] = TY(KL_F32, B, 4);
  const_ints(f, 1, 0, &axis, 1);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_F32, B, 4));
  static const int64_t far = 2;
  const_ints(f, 1, 0, &far, 1);
  expect_error(f, infer(f), KILN_ERR_SHAPE, "input 1 (axis) 2 is out of range for rank 2");
  static const int64_t scalar[] = {0};
  IN(f, 0, KL_F64, D2x3, 1.5, -2, 0.25, 3, 4, -1);
  tensor_in(f, 1, KL_I32, 0, scalar, (const double[]){1});
  set_int(f, "exclusive", 1);
  set_int(f, "reverse", 1);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 1e-12, -1.75, 0.25, 0, 3, -1, 0);
  node(f, "CumProd", 2, 1);
  IN(f, 0, KL_I64, D2x3, 2, -3, 4, 5, 1, -1);
  tensor_in(f, 1, KL_I64, 0, scalar, (const double[]){0});
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 0, 2, -3, 4, 10, -3, -4);
}

/* ---- TopK ---- */

static void test_topk(void **state) {
  fixture *f = *state;
  static const int64_t k2 = 2, k9 = 9;
  node(f, "TopK", 2, 2);
  f->in[0] = TY(KL_F32, B, 5);
  const_ints(f, 1, 1, &k2, 1);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_F32, B, 2));
  expect_type(f, 1, TY(KL_I64, B, 2));
  const_ints(f, 1, 1, &k9, 1);
  expect_error(f, infer(f), KILN_ERR_SHAPE, "input 1 (K) is 9 but axis 1");
  f->data[1] = NULL; /* K not known (a graph input) */
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_F32, B, U));
  static const int64_t dims[] = {2, 5}, one[] = {1};
  IN(f, 0, KL_F32, dims, 3, 1, 3, 0.5, 3, -1, 2, -1, 2, 0);
  tensor_in(f, 1, KL_I64, 1, one, (const double[]){3});
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 0, 3, 3, 3, 2, 2, 0);
  EXPECT(f, 1, 0, 0, 2, 4, 1, 3, 4); /* equal values by increasing index */
  set_int(f, "largest", 0);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 0, 0.5, 1, 3, -1, -1, 0);
  EXPECT(f, 1, 0, 3, 1, 0, 0, 2, 4);
}

/* ---- Einsum ---- */

static void einsum_node(fixture *f, const char *eq, int n_in) {
  node(f, "Einsum", n_in, 1);
  set_string(f, "equation", eq);
}

static void test_einsum_infer(void **state) {
  fixture *f = *state;
  einsum_node(f, "bij, bjk -> bik", 2);
  f->in[0] = TY(KL_F32, B, 2, 3);
  f->in[1] = TY(KL_F32, U, 3, 4);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_F32, B, 2, 4));
  einsum_node(f, "kj,ji", 2); /* implicit: the letters used once, sorted */
  f->in[0] = TY(KL_F64, 5, 3);
  f->in[1] = TY(KL_F64, 3, 7);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_F64, 7, 5));
  einsum_node(f, "...ij,...jk", 2); /* ellipsis dims broadcast, and come first */
  f->in[0] = TY(KL_F32, 6, 1, 2, 3);
  f->in[1] = TY(KL_F32, 5, 3, 4);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_F32, 6, 5, 2, 4));
  f->in[0] = TYU(KL_F32);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TYU(KL_F32));
}

static void test_einsum_errors(void **state) {
  fixture *f = *state;
  einsum_node(f, "ij,jk->ik", 2);
  f->in[0] = TY(KL_F32, 2, 3);
  f->in[1] = TY(KL_F32, 4, 5);
  expect_error(f, infer(f), KILN_ERR_SHAPE, "input 1 dim 0 is 4");
  einsum_node(f, "ij->iz", 1);
  expect_error(f, infer(f), KILN_ERR_INVALID_MODEL, "output letter 'z' is in no input");
  einsum_node(f, "ij,jk", 1);
  expect_error(f, infer(f), KILN_ERR_INVALID_MODEL, "more terms than the 1 inputs");
  einsum_node(f, "i.j", 1);
  expect_error(f, infer(f), KILN_ERR_INVALID_MODEL, "not one ellipsis");
  einsum_node(f, "ijk", 1);
  expect_error(f, infer(f), KILN_ERR_INVALID_MODEL, "term 0 names 3 dims but input 0 has "
               "rank 2");
  einsum_node(f, "i2", 1);
  expect_error(f, infer(f), KILN_ERR_INVALID_MODEL, "has '2'");
}

static void test_einsum_kernels(void **state) {
  fixture *f = *state;
  static const int64_t da[] = {1, 2, 3}, db[] = {2, 3, 2}, dm[] = {3, 3};
  einsum_node(f, "...ij,...jk->...ik", 2); /* NumPy np.einsum */
  IN(f, 0, KL_F32, da, 0.3, -1.2, 0.7, 1.1, 0.4, -0.6);
  IN(f, 1, KL_F32, db, 0.5, -0.2, 1.3, 0.9, -0.7, 0.25, 0.1, 0.6, -1.0, 0.35, 0.8, -0.45);
  assert_int_equal(run(f), KILN_OK);
  expect_type(f, 0, TY(KL_F32, 2, 2, 2));
  EXPECT(f, 0, 1e-6, -1.9, -0.965, 1.49, -0.01, 1.79, -0.555, -0.77, 1.07);
  einsum_node(f, "ii", 1);
  IN(f, 0, KL_F32, dm, 1.5, -0.3, 0.8, 0.2, -2.1, 0.6, 0.9, 0.45, 3.2);
  assert_int_equal(run(f), KILN_OK);
  expect_type(f, 0, TY0(KL_F32));
  EXPECT(f, 0, 1e-6, 2.6);
  einsum_node(f, "ii->i", 1);
  IN(f, 0, KL_I64, dm, 1, -3, 8, 2, -2, 6, 9, 4, 3);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 0, 1, -2, 3);
}

/* ---- normalizations ---- */

static void test_layernorm_infer(void **state) {
  fixture *f = *state;
  node(f, "LayerNormalization", 3, 3);
  f->in[0] = TY(KL_F16, B, 7, 4);
  f->in[1] = TY(KL_F16, 7, 4);
  f->in[2] = TY(KL_F16, 4);
  set_int(f, "axis", -2);
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_F16, B, 7, 4));
  expect_type(f, 1, TY(KL_F32, B, 1, 1)); /* stash_type, float by default */
  expect_type(f, 2, TY(KL_F32, B, 1, 1));
  f->in[1] = TY(KL_F16, 5);
  expect_error(f, infer(f), KILN_ERR_SHAPE, "input 1 (Scale)");
  f->in[1] = TY(KL_F32, 4);
  expect_error(f, infer(f), KILN_ERR_DTYPE, "input 1 is float32, expected float16");
  f->in[1] = TY(KL_F16, 4);
  set_int(f, "stash_type", KL_I32);
  expect_error(f, infer(f), KILN_ERR_UNSUPPORTED, "stash_type is 6");
}

static void test_layernorm_kernel(void **state) {
  fixture *f = *state;
  static const int64_t dx[] = {3, 4}, dv[] = {4};
  node(f, "LayerNormalization", 3, 3);
  IN(f, 0, KL_F32, dx, 0.2, -1.1, 0.6, 1.7, 2.3, 0.4, -0.8, -1.5, 0.05, 0.9, -0.3, 1.2);
  IN(f, 1, KL_F32, dv, 1.2, -0.5, 0.8, 1.1);
  IN(f, 2, KL_F32, dv, 0.1, 0.2, -0.3, 0.05);
  assert_int_equal(run(f), KILN_OK); /* NumPy, population variance, epsilon 1e-5 */
  EXPECT(f, 0, 1e-5, -0.079774524, 0.92409183, -0.10025053, 1.5331398, 1.9327103,
         0.095868731, -0.79983009, -1.1718069, -0.71188052, -0.15878559, -1.3004992,
         1.380582);
  EXPECT(f, 1, 1e-6, 0.35, 0.1, 0.4625);
  EXPECT(f, 2, 1e-5, 0.99874736, 0.69420846, 1.6401627);
}

static void test_groupnorm(void **state) {
  fixture *f = *state;
  static const int64_t dx[] = {1, 4, 3}, dv[] = {4};
  node(f, "GroupNormalization", 3, 1);
  f->in[0] = TY(KL_F32, B, 6, 3);
  f->in[1] = f->in[2] = TY(KL_F32, 6);
  expect_error(f, infer(f), KILN_ERR_INVALID_MODEL, "num_groups must be");
  set_int(f, "num_groups", 4);
  expect_error(f, infer(f), KILN_ERR_SHAPE, "6 channels, not a multiple of num_groups 4");
  set_int(f, "num_groups", 2);
  f->in[1] = TY(KL_F32, 2); /* opset 18's per-group form is canonicalized on import */
  expect_error(f, infer(f), KILN_ERR_SHAPE, "input 1 (scale) has 2 values, expected 6");
  IN(f, 0, KL_F32, dx, 0.3, -0.7, 1.9, 0.8, 1.4, -0.2, -1.3, 0.6, 0.1, 2.2, -0.4, 0.75);
  IN(f, 1, KL_F32, dv, 1.1, 0.9, -0.6, 1.3);
  IN(f, 2, KL_F32, dv, 0.05, -0.1, 0.2, 0.3);
  assert_int_equal(run(f), KILN_OK); /* NumPy */
  EXPECT(f, 0, 1e-5, -0.29887598, -1.530203, 1.6712472, 0.11828069, 0.72275031,
         -0.88916867, 1.103397, 0.047117438, 0.32508573, 2.5584924, -0.57328373,
         0.81192494);
}

static void test_lrn_kernel(void **state) {
  fixture *f = *state;
  static const int64_t dx[] = {1, 3, 2};
  node(f, "LRN", 1, 1);
  set_int(f, "size", 3);
  set_float(f, "alpha", 0.3f);
  set_float(f, "beta", 0.6f);
  set_float(f, "bias", 1.5f);
  IN(f, 0, KL_F32, dx, 0.5, -1.2, 1.7, 0.3, -0.8, 2.2);
  assert_int_equal(run(f), KILN_OK); /* NumPy */
  EXPECT(f, 0, 1e-5, 0.34977409, -0.88760049, 1.1647469, 0.19021228, -0.55254129,
         1.4545153);
}

/* p = 1 divides by the sum of absolute values; a zero norm gives 0, not NaN. */
static void test_lpnorm_kernel(void **state) {
  fixture *f = *state;
  node(f, "LpNormalization", 1, 1);
  set_int(f, "p", 1);
  IN(f, 0, KL_F32, D2x3, 1, -3, 4, 0, 0, 0);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 1e-7, 0.125, -0.375, 0.5, 0, 0, 0);
  set_int(f, "p", 3);
  expect_error(f, infer(f), KILN_ERR_INVALID_MODEL, "p is 3, expected 1 or 2");
}

/* ---- losses ---- */

static void test_loss_infer(void **state) {
  fixture *f = *state;
  node(f, "SoftmaxCrossEntropyLoss", 3, 2);
  f->in[0] = TY(KL_F32, B, 5, 7);
  f->in[1] = TY(KL_I64, U, 7);
  f->in[2] = TY(KL_F32, 5);
  set_string(f, "reduction", "none");
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY(KL_F32, B, 7));
  expect_type(f, 1, TY(KL_F32, B, 5, 7));
  set_string(f, "reduction", "mean");
  assert_int_equal(infer(f), KILN_OK);
  expect_type(f, 0, TY0(KL_F32));
  f->in[1] = TY(KL_I64, 3, 8);
  expect_error(f, infer(f), KILN_ERR_SHAPE, "input 1 (target) dim 1 is 8, expected 7");
  f->in[1] = TY(KL_I64, 3);
  expect_error(f, infer(f), KILN_ERR_SHAPE, "input 1 (target) has rank 1, expected 2");
  f->in[1] = TY(KL_I64, 3, 7);
  set_string(f, "reduction", "max");
  expect_error(f, infer(f), KILN_ERR_INVALID_MODEL, "reduction is \"max\"");
}

static void test_loss_kernels(void **state) {
  fixture *f = *state;
  static const int64_t dx[] = {3, 4}, dt[] = {3}, dw[] = {4};
  node(f, "SoftmaxCrossEntropyLoss", 3, 2);
  set_int(f, "ignore_index", -1);
  set_string(f, "reduction", "none");
  IN(f, 0, KL_F32, dx, 0.4, -1.2, 2.1, 0.3, 1.5, 0.2, -0.6, 0.9, -0.3, 0.8, 0.05, -1.1);
  IN(f, 1, KL_I32, dt, 2, -1, 0);
  IN(f, 2, KL_F32, dw, 0.7, 1.3, 0.4, 1.0);
  assert_int_equal(run(f), KILN_OK); /* NumPy */
  EXPECT(f, 0, 1e-6, 0.13024123, 0, 1.2392038);
  EXPECT(f, 1, 1e-6, -2.0256031, -3.6256031, -0.32560308, -2.1256031, -0.66464475,
         -1.9646447, -2.7646447, -1.2646447, -1.7702911, -0.67029109, -1.4202911,
         -2.5702911);
  set_string(f, "reduction", "mean"); /* divided by the weights taken: 0.4 + 0.7 */
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 1e-6, 1.24494999);
  node(f, "NegativeLogLikelihoodLoss", 2, 1);
  set_string(f, "reduction", "sum");
  IN(f, 0, KL_F32, dx, 0.4, -1.2, 2.1, 0.3, 1.5, 0.2, -0.6, 0.9, -0.3, 0.8, 0.05, -1.1);
  IN(f, 1, KL_I64, dt, 3, 0, 1);
  assert_int_equal(run(f), KILN_OK);
  EXPECT(f, 0, 1e-6, -(0.3 + 1.5 + 0.8));
  IN(f, 1, KL_I64, dt, 3, 4, 1);
  expect_error(f, run(f), KILN_ERR_INVALID_ARGUMENT, "has 4 at flat index 1, expected a "
               "class in [0, 4)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_reduce_infer_axes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reduce_infer_empty_axes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reduce_infer_unknown_axes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reduce_infer_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reduce_kernels, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reduce_empty_set, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reduce_noop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reduce_integers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_argmax, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cumulative, setup, teardown),
      cmocka_unit_test_setup_teardown(test_topk, setup, teardown),
      cmocka_unit_test_setup_teardown(test_einsum_infer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_einsum_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_einsum_kernels, setup, teardown),
      cmocka_unit_test_setup_teardown(test_layernorm_infer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_layernorm_kernel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_groupnorm, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lrn_kernel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lpnorm_kernel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_loss_infer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_loss_kernels, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
