/* The "convq" family: ConvTranspose, GlobalMaxPool, LpPool, MaxUnpool, Col2Im, the
 * quantization ops, Attention and RotaryEmbedding.
 *
 * Shape inference is checked on types alone (symbolic and unknown dims, errors);
 * kernels on small inputs whose expected outputs were computed independently
 * (onnx.reference, and onnxruntime for ConvTranspose whose group > 1 the ONNX
 * reference gets wrong) and pasted here as literals, or computed by hand where noted.
 * Dims are written as numbers: >= 0 known, U unknown, B the symbol "batch".
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

#define MAX_IO 10
#define U (-1)
#define B (-100) /* symbol 0, "batch" */
#define UNKNOWN_RANK (-7)

typedef struct fixture {
  kl_graph *g;
  int node;
  int n_in, n_out;
  kl_type in[MAX_IO];
  bool present[MAX_IO];
  const void *data[MAX_IO];
  kl_type out[MAX_IO];
  kl_tensor tin[MAX_IO], tout[MAX_IO];
  kl_err e;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f || !(f->g = kl_graph_new())) return -1;
  if (kl_graph_symbol(f->g, "batch") != 0) return -1;
  *state = f;
  return 0;
}

static void free_tensors(fixture *f) {
  for (int i = 0; i < MAX_IO; i++) {
    free(f->tin[i].data);
    free(f->tout[i].data);
    f->tin[i].data = f->tout[i].data = NULL;
  }
}

static int teardown(void **state) {
  fixture *f = *state;
  free_tensors(f);
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

#define N_INTS(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define TY(dt, ...) make_type(dt, N_INTS(__VA_ARGS__), (const int64_t[]){__VA_ARGS__})
#define TY0(dt) make_type(dt, 0, NULL)
#define TYU(dt) make_type(dt, UNKNOWN_RANK, NULL)

static void node(fixture *f, const char *name, int n_in, int n_out) {
  int ins[MAX_IO], outs[MAX_IO];
  free_tensors(f);
  for (int i = 0; i < n_in; i++) ins[i] = kl_graph_add_value(f->g, NULL, &f->e);
  for (int i = 0; i < n_out; i++) outs[i] = kl_graph_add_value(f->g, NULL, &f->e);
  kl_op op = kl_op_lookup("", name);
  assert_int_not_equal(op, KL_OP_COUNT);
  f->node = kl_graph_add_node(f->g, op, name, n_in, ins, n_out, outs, &f->e);
  assert_true(f->node >= 0);
  f->n_in = n_in;
  f->n_out = n_out;
  for (int i = 0; i < n_in; i++) {
    f->present[i] = true;
    f->data[i] = NULL;
  }
}

static void input(fixture *f, int i, kl_type t) { f->in[i] = t; }
static void absent(fixture *f, int i) { f->present[i] = false; }
static void contents(fixture *f, int i, const void *data) { f->data[i] = data; }

static void attr_int(fixture *f, const char *name, int64_t v) {
  assert_int_equal(kl_node_set_int(f->g, f->node, name, v, &f->e), KILN_OK);
}
static void attr_float(fixture *f, const char *name, float v) {
  assert_int_equal(kl_node_set_float(f->g, f->node, name, v, &f->e), KILN_OK);
}
static void attr_string(fixture *f, const char *name, const char *v) {
  assert_int_equal(kl_node_set_string(f->g, f->node, name, v, &f->e), KILN_OK);
}
static void attr_ints(fixture *f, const char *name, const int64_t *v, int n) {
  assert_int_equal(kl_node_set_ints(f->g, f->node, name, v, n, &f->e), KILN_OK);
}
#define ATTR_INTS(f, name, ...) \
  attr_ints(f, name, (const int64_t[]){__VA_ARGS__}, N_INTS(__VA_ARGS__))

static kiln_status run(fixture *f) {
  const kl_type *tp[MAX_IO];
  for (int i = 0; i < f->n_in; i++) tp[i] = f->present[i] ? &f->in[i] : NULL;
  for (int i = 0; i < f->n_out; i++) {
    memset(&f->out[i], 0, sizeof f->out[i]);
    f->out[i].rank = -1;
  }
  kl_err_clear(&f->e);
  const kl_node *n = &f->g->nodes[f->node];
  kl_infer_ctx ctx = {f->g, n, f->n_in, f->n_out, tp, f->data, f->out, &f->e};
  return (kiln_status)kl_op_get(n->op)->infer(&ctx);
}

static void expect_type(fixture *f, int k, kl_type want) {
  const kl_type *got = &f->out[k];
  char a[256], b[256];
  kl_type_format(f->g, got, a, sizeof a);
  kl_type_format(f->g, &want, b, sizeof b);
  bool same = got->dtype == want.dtype && got->rank == want.rank;
  for (int i = 0; same && i < want.rank; i++)
    same = got->dims[i].size == want.dims[i].size &&
           (want.dims[i].size >= 0 || got->dims[i].sym == want.dims[i].sym);
  if (!same) fail_msg("output %d is %s, expected %s", k, a, b);
}

static void expect_ok(fixture *f, kl_type want) {
  kiln_status st = run(f);
  if (st != KILN_OK) fail_msg("infer failed: %s", f->e.msg);
  expect_type(f, 0, want);
}

static void expect_fail(fixture *f, kiln_status code, const char *part) {
  kiln_status st = run(f);
  if (st != code) fail_msg("status %d, expected %d (message: %s)", st, code, f->e.msg);
  if (!strstr(f->e.msg, part)) fail_msg("message \"%s\" lacks \"%s\"", f->e.msg, part);
}

/* ---- kernel harness: concrete inputs from double literals ---- */

static void tensor(fixture *f, int i, kl_dtype dt, int rank, const int64_t *dims,
                   const double *v) {
  kl_tensor *t = &f->tin[i];
  t->dtype = dt;
  t->rank = rank;
  for (int d = 0; d < rank; d++) t->dims[d] = dims[d];
  int64_t n = kl_tensor_numel(t);
  t->data = calloc((size_t)(n > 0 ? n : 1), kl_dtype_size(dt));
  assert_non_null(t->data);
  for (int64_t k = 0; k < n; k++) kl_store_f64(t->data, dt, (size_t)k, v[k]);
  f->in[i] = make_type(dt, rank, dims);
  f->data[i] = t->data;
}
#define DIMS(...) N_INTS(__VA_ARGS__), (const int64_t[]){__VA_ARGS__}
#define VALS(...) (const double[]){__VA_ARGS__}

/* Infers from the concrete inputs, allocates the outputs, runs the reference kernel. */
static kiln_status run_kernel(fixture *f) {
  kiln_status st = run(f);
  if (st != KILN_OK) return st;
  const kl_tensor *in[MAX_IO];
  kl_tensor *out[MAX_IO];
  for (int i = 0; i < f->n_in; i++) in[i] = f->present[i] ? &f->tin[i] : NULL;
  for (int i = 0; i < f->n_out; i++) {
    assert_true(kl_type_is_concrete(&f->out[i]));
    kl_tensor *t = &f->tout[i];
    t->dtype = f->out[i].dtype;
    t->rank = f->out[i].rank;
    for (int d = 0; d < t->rank; d++) t->dims[d] = f->out[i].dims[d].size;
    int64_t n = kl_tensor_numel(t);
    free(t->data);
    t->data = calloc((size_t)(n > 0 ? n : 1), kl_dtype_size(t->dtype));
    assert_non_null(t->data);
    out[i] = t;
  }
  const kl_node *n = &f->g->nodes[f->node];
  kl_kernel_ctx ctx = {n, f->n_in, f->n_out, in, out, &f->e, 1, NULL};
  return (kiln_status)kl_op_get(n->op)->ref(&ctx);
}

static void expect_run(fixture *f) {
  kiln_status st = run_kernel(f);
  if (st != KILN_OK) fail_msg("run failed: %s", f->e.msg);
}

/* Output k holds the n values of want, within |got - want| <= tol * (1 + |want|). */
static void expect_values(fixture *f, int k, const double *want, int64_t n, double tol) {
  const kl_tensor *t = &f->tout[k];
  assert_int_equal(kl_tensor_numel(t), n);
  for (int64_t i = 0; i < n; i++) {
    double g = kl_load_f64(t->data, t->dtype, (size_t)i), w = want[i];
    bool ok = isnan(w) ? isnan(g) : fabs(g - w) <= tol * (1 + fabs(w));
    if (!ok) fail_msg("output %d element %lld is %.9g, expected %.9g", k, (long long)i, g, w);
  }
}
#define EXPECT(f, k, tol, ...) \
  expect_values(f, k, VALS(__VA_ARGS__), (int64_t)(sizeof VALS(__VA_ARGS__) / sizeof(double)), tol)

/* ---- ConvTranspose, pools, Col2Im: shapes ---- */

static void test_convtranspose_shapes(void **state) {
  fixture *f = *state;
  node(f, "ConvTranspose", 2, 1);
  input(f, 0, TY(KL_F32, B, 4, 5, 6));
  input(f, 1, TY(KL_F32, 4, 3, 3, 3));
  attr_int(f, "group", 2);
  ATTR_INTS(f, "strides", 2, 2);
  ATTR_INTS(f, "output_padding", 1, 0);
  /* 2 * (5 - 1) + 1 + 3 = 12, 2 * (6 - 1) + 0 + 3 = 13; 3 channels per group, 2 groups */
  expect_ok(f, TY(KL_F32, B, 6, 12, 13));
  ATTR_INTS(f, "pads", 1, 0, 2, 1);
  expect_ok(f, TY(KL_F32, B, 6, 9, 12));
  attr_string(f, "auto_pad", "SAME_UPPER");
  expect_ok(f, TY(KL_F32, B, 6, 10, 12));

  node(f, "ConvTranspose", 3, 1);
  input(f, 0, TY(KL_F16, 1, 2, U, U, U));
  input(f, 1, TY(KL_F16, 2, 1, 2, 2, 2));
  input(f, 2, TY(KL_F16, 1));
  ATTR_INTS(f, "output_shape", 7, 8, 9); /* fixes the output even with unknown input dims */
  expect_ok(f, TY(KL_F16, 1, 1, 7, 8, 9));

  node(f, "ConvTranspose", 2, 1);
  input(f, 0, TYU(KL_F32));
  input(f, 1, TY(KL_F32, 3, 2, 4));
  expect_ok(f, TY(KL_F32, U, 2, U));
}

static void test_convtranspose_errors(void **state) {
  fixture *f = *state;
  node(f, "ConvTranspose", 3, 1);
  input(f, 0, TY(KL_F32, 1, 4, 5, 5));
  input(f, 1, TY(KL_F32, 3, 2, 3, 3));
  input(f, 2, TY(KL_F32, 2));
  expect_fail(f, KILN_ERR_SHAPE, "for 3 input channels, but input 0 (X) has 4");
  input(f, 1, TY(KL_F32, 4, 2, 3, 3));
  input(f, 2, TY(KL_F32, 5));
  expect_fail(f, KILN_ERR_SHAPE, "input 2 (B) has 5 values, expected 2");
  input(f, 2, TY(KL_F32, 2));
  ATTR_INTS(f, "output_padding", 1, 1);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "output_padding[0] is 1");
  ATTR_INTS(f, "output_padding", 0, 0);
  ATTR_INTS(f, "pads", 4, 0, 3, 0);
  expect_fail(f, KILN_ERR_SHAPE, "leave no output");
  input(f, 0, TY(KL_I32, 1, 4, 5, 5));
  expect_fail(f, KILN_ERR_UNSUPPORTED, "int32");
}

static void test_lppool_shapes(void **state) {
  fixture *f = *state;
  node(f, "LpPool", 1, 1);
  input(f, 0, TY(KL_F32, B, 3, 10));
  ATTR_INTS(f, "kernel_shape", 3);
  ATTR_INTS(f, "dilations", 2);
  attr_int(f, "p", 3);
  expect_ok(f, TY(KL_F32, B, 3, 6));
  attr_int(f, "p", 0);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "p is 0");
  attr_float(f, "p", 2.0f);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "p must be an int");
}

static void test_maxunpool_shapes(void **state) {
  fixture *f = *state;
  node(f, "MaxUnpool", 2, 1);
  input(f, 0, TY(KL_F32, B, 2, 3, 4));
  input(f, 1, TY(KL_I64, B, 2, 3, 4));
  ATTR_INTS(f, "kernel_shape", 2, 2);
  ATTR_INTS(f, "strides", 2, 2);
  ATTR_INTS(f, "pads", 0, 1, 0, 0);
  expect_ok(f, TY(KL_F32, B, 2, 6, 7));
  input(f, 1, TY(KL_I64, B, 2, 4, 4));
  expect_fail(f, KILN_ERR_SHAPE, "must have the shape of input 0");

  node(f, "MaxUnpool", 3, 1);
  input(f, 0, TY(KL_F32, 1, 2, 3, 4));
  input(f, 1, TY(KL_I64, 1, 2, 3, 4));
  input(f, 2, TY(KL_I64, 4));
  ATTR_INTS(f, "kernel_shape", 2, 2);
  ATTR_INTS(f, "strides", 2, 2);
  expect_ok(f, TY(KL_F32, U, U, U, U)); /* output_shape not known yet */
  static const int64_t bigger[4] = {1, 2, 7, 9}, smaller[4] = {1, 2, 5, 9};
  contents(f, 2, bigger);
  expect_ok(f, TY(KL_F32, 1, 2, 7, 9));
  contents(f, 2, smaller);
  expect_fail(f, KILN_ERR_SHAPE, "expected at least 6");
}

static void test_col2im_shapes(void **state) {
  fixture *f = *state;
  node(f, "Col2Im", 3, 1);
  input(f, 0, TY(KL_F32, B, 12, 6));
  input(f, 1, TY(KL_I64, 2));
  input(f, 2, TY(KL_I64, 2));
  expect_ok(f, TY(KL_F32, B, U, U, U)); /* rank from the length of image_shape */
  static const int64_t image[2] = {3, 4}, block[2] = {2, 2};
  contents(f, 1, image);
  contents(f, 2, block);
  expect_ok(f, TY(KL_F32, B, 3, 3, 4)); /* 12 / (2 * 2) channels, 2 * 3 positions */
  input(f, 0, TY(KL_F32, B, 12, 5));
  expect_fail(f, KILN_ERR_SHAPE, "has 5 columns, expected 6");
  input(f, 0, TY(KL_F32, B, 10, 6));
  expect_fail(f, KILN_ERR_SHAPE, "not a multiple of the block size 4");
}

/* ---- quantization: shapes and dtypes ---- */

static void test_quantize_shapes(void **state) {
  fixture *f = *state;
  node(f, "QuantizeLinear", 3, 1);
  input(f, 0, TY(KL_F32, B, 3, 4));
  input(f, 1, TY(KL_F32, 3));
  input(f, 2, TY(KL_I8, 3));
  attr_int(f, "axis", -2);
  expect_ok(f, TY(KL_I8, B, 3, 4));
  input(f, 1, TY(KL_F32, 4));
  input(f, 2, TY(KL_I8, 4));
  expect_fail(f, KILN_ERR_SHAPE, "has 4 values, expected 3");
  input(f, 2, TY(KL_I8, 3));
  expect_fail(f, KILN_ERR_SHAPE, "must have the shape of input 1");
  attr_int(f, "output_dtype", KL_U8);
  input(f, 1, TY0(KL_F32));
  input(f, 2, TY0(KL_I8));
  expect_fail(f, KILN_ERR_DTYPE, "output_dtype is uint8 but input 2");

  node(f, "QuantizeLinear", 2, 1);
  input(f, 0, TY(KL_F16, 6, 5));
  input(f, 1, TY(KL_F16, 6, 2));
  attr_int(f, "block_size", 3);
  attr_int(f, "output_dtype", KL_I16);
  expect_ok(f, TY(KL_I16, 6, 5)); /* ceil(5 / 3) = 2 blocks along axis 1 */
  input(f, 1, TY(KL_F16, 6, 3));
  expect_fail(f, KILN_ERR_SHAPE, "has 3 in dim 1, expected 2");
  attr_int(f, "output_dtype", 17); /* float8e4m3fn */
  expect_fail(f, KILN_ERR_UNSUPPORTED, "output_dtype is 17");

  node(f, "QuantizeLinear", 2, 1);
  input(f, 0, TY(KL_F32, 7));
  input(f, 1, TY0(KL_F32));
  expect_ok(f, TY(KL_U8, 7)); /* uint8 by default; axis 1 unused per tensor */
}

static void test_dequantize_shapes(void **state) {
  fixture *f = *state;
  node(f, "DequantizeLinear", 3, 1);
  input(f, 0, TY(KL_U16, 2, B));
  input(f, 1, TY(KL_F16, 2));
  input(f, 2, TY(KL_U16, 2));
  attr_int(f, "axis", 0);
  expect_ok(f, TY(KL_F16, 2, B));
  attr_int(f, "output_dtype", KL_F32);
  expect_ok(f, TY(KL_F32, 2, B));
  input(f, 2, TY(KL_I16, 2));
  expect_fail(f, KILN_ERR_DTYPE, "input 2 is int16, expected uint16");

  node(f, "DequantizeLinear", 2, 1);
  input(f, 0, TY(KL_I32, 3));
  input(f, 1, TY(KL_F32, 1));
  expect_ok(f, TY(KL_F32, 3));
  input(f, 0, TY(KL_F32, 3));
  expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (x) is float32");

  node(f, "DynamicQuantizeLinear", 1, 3);
  input(f, 0, TY(KL_F32, B, 5));
  expect_ok(f, TY(KL_U8, B, 5));
  expect_type(f, 1, TY0(KL_F32));
  expect_type(f, 2, TY0(KL_U8));
}

static void test_integer_product_shapes(void **state) {
  fixture *f = *state;
  node(f, "MatMulInteger", 4, 1);
  input(f, 0, TY(KL_U8, B, 4, 3));
  input(f, 1, TY(KL_I8, 3, 5));
  input(f, 2, TY(KL_U8, 4));
  input(f, 3, TY(KL_I8, 5));
  expect_ok(f, TY(KL_I32, B, 4, 5));
  input(f, 2, TY(KL_U8, 3));
  expect_fail(f, KILN_ERR_SHAPE, "input 2 has 3 values, expected 1 or 4");
  absent(f, 2);
  input(f, 1, TY(KL_I8, 2, 5));
  expect_fail(f, KILN_ERR_SHAPE, "input 1 has 2 rows, expected 3");

  node(f, "ConvInteger", 4, 1);
  input(f, 0, TY(KL_U8, B, 2, 5, 5));
  input(f, 1, TY(KL_U8, 6, 2, 3, 3));
  input(f, 2, TY0(KL_U8));
  input(f, 3, TY(KL_U8, 6));
  expect_ok(f, TY(KL_I32, B, 6, 3, 3));
  input(f, 3, TY(KL_U8, 4));
  expect_fail(f, KILN_ERR_SHAPE, "one per output channel (6)");

  node(f, "QLinearConv", 9, 1);
  input(f, 0, TY(KL_U8, 1, 2, 5, 5));
  input(f, 1, TY0(KL_F32));
  input(f, 2, TY0(KL_U8));
  input(f, 3, TY(KL_I8, 4, 1, 3, 3));
  input(f, 4, TY(KL_F32, 4));
  input(f, 5, TY(KL_I8, 4));
  input(f, 6, TY0(KL_F32));
  input(f, 7, TY0(KL_I8));
  input(f, 8, TY(KL_I32, 4));
  attr_int(f, "group", 2);
  expect_ok(f, TY(KL_I8, 1, 4, 3, 3));
  input(f, 8, TY(KL_I32, 2));
  expect_fail(f, KILN_ERR_SHAPE, "input 8 (B) has 2 values, expected 4");

  node(f, "QLinearMatMul", 8, 1);
  input(f, 0, TY(KL_I8, 2, 4));
  input(f, 1, TY(KL_F16, 1));
  input(f, 2, TY(KL_I8, 1));
  input(f, 3, TY(KL_I8, 4, 3));
  input(f, 4, TY(KL_F16, 3));
  input(f, 5, TY(KL_I8, 3));
  input(f, 6, TY(KL_F16, 1));
  input(f, 7, TY(KL_U8, 1));
  expect_ok(f, TY(KL_U8, 2, 3));
  input(f, 6, TY(KL_F16, 3));
  input(f, 7, TY(KL_U8, 3));
  expect_fail(f, KILN_ERR_SHAPE, "input 6 (y_scale) must hold one value");
  input(f, 6, TY(KL_F32, 1));
  input(f, 7, TY(KL_U8, 1));
  expect_fail(f, KILN_ERR_DTYPE, "input 6 is float32, expected float16");
}

/* ---- Attention and RotaryEmbedding: shapes ---- */

static void test_attention_shapes(void **state) {
  fixture *f = *state;
  node(f, "Attention", 6, 4);
  input(f, 0, TY(KL_F32, B, 8, 5, 16));
  input(f, 1, TY(KL_F32, B, 2, 7, 16));
  input(f, 2, TY(KL_F32, B, 2, 7, 10));
  input(f, 3, TY(KL_BOOL, 5, 9));
  input(f, 4, TY(KL_F32, B, 2, 3, 16));
  input(f, 5, TY(KL_F32, B, 2, 3, 10));
  expect_ok(f, TY(KL_F32, B, 8, 5, 10));
  expect_type(f, 1, TY(KL_F32, B, 2, 10, 16));
  expect_type(f, 2, TY(KL_F32, B, 2, 10, 10));
  expect_type(f, 3, TY(KL_F32, B, 8, 5, 10));
  input(f, 3, TY(KL_BOOL, 5, 11));
  expect_fail(f, KILN_ERR_SHAPE, "covers 11 keys, expected at most 10");
  input(f, 3, TY(KL_F16, 5, 9));
  expect_fail(f, KILN_ERR_DTYPE, "input 3 is float16, expected float32");
  absent(f, 3);
  input(f, 1, TY(KL_F32, B, 3, 7, 16));
  input(f, 2, TY(KL_F32, B, 3, 7, 10));
  expect_fail(f, KILN_ERR_SHAPE, "head count of past_key");
  absent(f, 4);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "must be given together");
  absent(f, 5);
  expect_fail(f, KILN_ERR_SHAPE, "8 query heads do not split");

  node(f, "Attention", 3, 1);
  input(f, 0, TY(KL_F16, 2, B, 24));
  input(f, 1, TY(KL_F16, 2, 6, 8));
  input(f, 2, TY(KL_F16, 2, 6, 10));
  expect_fail(f, KILN_ERR_INVALID_MODEL, "q_num_heads is 0");
  attr_int(f, "q_num_heads", 6);
  attr_int(f, "kv_num_heads", 2);
  expect_ok(f, TY(KL_F16, 2, B, 30)); /* 6 heads of V's 10 / 2 */
  attr_int(f, "kv_num_heads", 3);
  expect_fail(f, KILN_ERR_SHAPE, "input 1 has 8 values per token, not a multiple of its 3");
}

static void test_rotary_shapes(void **state) {
  fixture *f = *state;
  node(f, "RotaryEmbedding", 4, 1);
  input(f, 0, TY(KL_F32, B, 4, 7, 8));
  input(f, 1, TY(KL_F32, 64, 2));
  input(f, 2, TY(KL_F32, 64, 2));
  input(f, 3, TY(KL_I64, B, 7));
  attr_int(f, "rotary_embedding_dim", 4);
  expect_ok(f, TY(KL_F32, B, 4, 7, 8));
  attr_int(f, "rotary_embedding_dim", 5);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "rotary_embedding_dim is 5");
  attr_int(f, "rotary_embedding_dim", 0);
  expect_fail(f, KILN_ERR_SHAPE, "has 2 values per position, expected 4");

  node(f, "RotaryEmbedding", 3, 1);
  input(f, 0, TY(KL_F32, 2, 5, 12));
  input(f, 1, TY(KL_F32, 2, 5, 3));
  input(f, 2, TY(KL_F32, 2, 5, 3));
  expect_fail(f, KILN_ERR_INVALID_MODEL, "num_heads is 0");
  attr_int(f, "num_heads", 2);
  expect_ok(f, TY(KL_F32, 2, 5, 12));
  input(f, 1, TY(KL_F32, 3, 5, 3));
  expect_fail(f, KILN_ERR_SHAPE, "must be [batch, sequence, 3]");
}

/* ---- kernels ---- */

static void test_convtranspose_values(void **state) {
  fixture *f = *state;
  node(f, "ConvTranspose", 3, 1);
  tensor(f, 0, KL_F32, DIMS(1, 4, 3), VALS(0.5, 1.59, 1.1, -1.1, -0.8, 1.49, -1.98, 1.28,
                                           1.19, -0.13, -0.79, -0.89));
  tensor(f, 1, KL_F32, DIMS(4, 2, 3),
         VALS(-0.98, -0.22, 0.02, 0.21, 1.98, 1.17, 0.49, 1.96, -1.14, -1.36, 0.45, -1.82,
              -1.86, 0.06, -0.14, 1.67, 0.52, 0.06, -0.01, -1.01, -1.95, -1.23, 0.77, -1.2));
  tensor(f, 2, KL_F32, DIMS(4), VALS(-0.52, -1.99, 1.32, -1.38));
  attr_int(f, "group", 2);
  ATTR_INTS(f, "strides", 2);
  ATTR_INTS(f, "pads", 1, 0);
  ATTR_INTS(f, "output_padding", 1);
  expect_run(f);
  EXPECT(f, 0, 1e-5, -2.78600001, -1.2062, -2.43779993, 0.0758999586, 2.15840006, -2.19659996,
         -0.519999981, -1.495, 2.01890016, 0.79820013, -0.469100118, 0.858500004, -3.41480017,
         -1.99000001, 1.3325001, -0.522199988, 2.1947, 0.476799965, 2.29029989, 2.88890004,
         1.32000005, -2.50970006, 1.76649988, -1.32270002, 2.72679996, -1.44649994,
         -0.24059999, -1.38);
}

static void test_pool_values(void **state) {
  fixture *f = *state;
  node(f, "LpPool", 1, 1);
  tensor(f, 0, KL_F32, DIMS(1, 1, 3, 4), VALS(-0.93, 1.52, 0.04, 1.39, 0.56, 0.97, -1.63,
                                              0.16, 0.03, 1.49, -0.55, 0.39));
  ATTR_INTS(f, "kernel_shape", 2, 2);
  ATTR_INTS(f, "pads", 1, 0, 0, 1);
  ATTR_INTS(f, "strides", 2, 2);
  attr_int(f, "p", 3);
  expect_run(f);
  EXPECT(f, 0, 1e-6, 1.62816846, 1.39001107, 1.63817871, 1.6583339);

  /* by hand: the maximum of each channel; a NaN anywhere makes it NaN */
  node(f, "GlobalMaxPool", 1, 1);
  tensor(f, 0, KL_F64, DIMS(1, 2, 1, 3), VALS(-3.5, -1.25, -2, 4, NAN, 7));
  expect_run(f);
  EXPECT(f, 0, 0, -1.25, NAN);
}

static void test_maxunpool_values(void **state) {
  fixture *f = *state;
  /* by hand: indexes into the default [1, 1, 4, 4] output, kept in the top-left corner
   * of the requested [1, 1, 5, 5] one */
  node(f, "MaxUnpool", 3, 1);
  tensor(f, 0, KL_F32, DIMS(1, 1, 2, 2), VALS(5.5, -6, 7, 8.25));
  tensor(f, 1, KL_I64, DIMS(1, 1, 2, 2), VALS(0, 7, 9, 14));
  tensor(f, 2, KL_I64, DIMS(4), VALS(1, 1, 5, 5));
  ATTR_INTS(f, "kernel_shape", 2, 2);
  ATTR_INTS(f, "strides", 2, 2);
  expect_run(f);
  EXPECT(f, 0, 0, 5.5, 0, 0, 0, 0, 0, 0, 0, -6, 0, 0, 7, 0, 0, 0, 0, 0, 8.25, 0, 0, 0, 0,
         0, 0, 0);
  ((int64_t *)f->tin[1].data)[2] = 16; /* beyond the 16 default positions */
  assert_int_equal(run_kernel(f), KILN_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(f->e.msg, "has 16 at flat index 2"));
}

static void test_col2im_values(void **state) {
  fixture *f = *state;
  node(f, "Col2Im", 3, 1);
  tensor(f, 0, KL_F32, DIMS(1, 4, 4), VALS(-1.76, -0.45, -0.71, -1.4, 1.27, -0.48, 1.91, 0.36,
                                           0.42, 0.55, 0.71, -1.4, -0.24, -1.04, -0.39, -1.61));
  tensor(f, 1, KL_I64, DIMS(2), VALS(3, 3));
  tensor(f, 2, KL_I64, DIMS(2), VALS(2, 2));
  expect_run(f);
  EXPECT(f, 0, 1e-6, -1.75999999, 0.819999993, -0.479999989, -0.289999992, 0.819999933,
         -0.679999948, 0.709999979, -1.78999996, -1.61000001);
}

static void test_quantize_values(void **state) {
  fixture *f = *state;
  /* blocks of 3 along axis 1; ties round to even (0.5 -> 0, 1.5 and 2.5 -> 2) */
  node(f, "QuantizeLinear", 3, 1);
  tensor(f, 0, KL_F32, DIMS(2, 6), VALS(0.5, 1.5, 2.5, -0.5, -1.5, 300, 3.3, -2.7, 0, 7.9,
                                        -250, 1.25));
  tensor(f, 1, KL_F32, DIMS(2, 2), VALS(1, 0.5, 0.25, 2));
  tensor(f, 2, KL_I8, DIMS(2, 2), VALS(1, -3, 0, 2));
  attr_int(f, "block_size", 3);
  expect_run(f);
  EXPECT(f, 0, 0, 1, 3, 3, -4, -6, 127, 13, -11, 0, 6, -123, 3);

  node(f, "DequantizeLinear", 3, 1);
  tensor(f, 0, KL_U8, DIMS(2, 2, 2), VALS(10, 200, 3, 0, 255, 7, 128, 9));
  tensor(f, 1, KL_F16, DIMS(2), VALS(0.5, 0.125));
  tensor(f, 2, KL_U8, DIMS(2), VALS(128, 3));
  attr_int(f, "axis", -2);
  expect_run(f);
  assert_int_equal(f->tout[0].dtype, KL_F16);
  EXPECT(f, 0, 0, -59, 36, 0, -0.375, 63.5, -60.5, 15.625, 0.75);

  node(f, "DynamicQuantizeLinear", 1, 3);
  tensor(f, 0, KL_F32, DIMS(2, 3), VALS(1.7, -0.3, 2.9, 0, -1.25, 3.5));
  expect_run(f);
  EXPECT(f, 0, 0, 158, 51, 223, 67, 0, 255);
  EXPECT(f, 1, 1e-7, 0.0186274517);
  EXPECT(f, 2, 0, 67);
}

static void test_integer_product_values(void **state) {
  fixture *f = *state;
  node(f, "MatMulInteger", 4, 1);
  tensor(f, 0, KL_U8, DIMS(3, 4), VALS(103, 246, 242, 54, 1, 171, 3, 76, 126, 222, 23, 168));
  tensor(f, 1, KL_I8, DIMS(4, 2), VALS(7, -95, 87, 87, -5, 112, 26, 102));
  tensor(f, 2, KL_U8, DIMS(3), VALS(12, 200, 7)); /* per row */
  tensor(f, 3, KL_I8, DIMS(2), VALS(3, -5));      /* per column */
  expect_run(f);
  EXPECT(f, 0, 0, 19146, 44742, -4508, -21075, 22111, 28169);

  node(f, "QLinearMatMul", 8, 1);
  tensor(f, 0, KL_I8, DIMS(2, 3), VALS(116, 17, -57, -91, 15, -79));
  tensor(f, 1, KL_F32, DIMS(2, 1), VALS(0.02, 0.05));
  tensor(f, 2, KL_I8, DIMS(2, 1), VALS(1, -2));
  tensor(f, 3, KL_I8, DIMS(3, 3), VALS(63, 108, -66, 12, -116, -82, -32, 97, 119));
  tensor(f, 4, KL_F32, DIMS(3), VALS(0.01, 0.03, 0.02));
  tensor(f, 5, KL_I8, DIMS(3), VALS(0, 4, -1));
  tensor(f, 6, KL_F32, DIMS(1), VALS(0.1));
  tensor(f, 7, KL_U8, DIMS(1), VALS(128));
  expect_run(f);
  EXPECT(f, 0, 0, 147, 156, 65, 113, 0, 80);

  node(f, "QLinearConv", 9, 1);
  tensor(f, 0, KL_U8, DIMS(1, 2, 3, 3), VALS(163, 148, 145, 15, 95, 250, 104, 54, 61, 181, 9,
                                             247, 223, 144, 119, 194, 139, 121));
  tensor(f, 1, KL_F32, 0, NULL, VALS(0.02));
  tensor(f, 2, KL_U8, 0, NULL, VALS(100));
  tensor(f, 3, KL_I8, DIMS(2, 2, 2, 2), VALS(-46, -15, 63, -114, -122, 55, -34, 76, -121, 103,
                                             -97, -22, 118, -101, 39, 57));
  tensor(f, 4, KL_F32, DIMS(2), VALS(0.01, 0.004));
  tensor(f, 5, KL_I8, DIMS(2), VALS(0, 0));
  tensor(f, 6, KL_F32, 0, NULL, VALS(0.3));
  tensor(f, 7, KL_I8, 0, NULL, VALS(-10));
  tensor(f, 8, KL_I32, DIMS(2), VALS(300, -1200));
  ATTR_INTS(f, "pads", 1, 0, 0, 1);
  expect_run(f);
  EXPECT(f, 0, 0, -17, -2, -11, -26, -11, -17, -12, -13, -18, -13, -11, -10, -2, -17, -11, -3,
         -3, -13);
}

static void test_attention_values(void **state) {
  fixture *f = *state;
  /* 4 query heads over 2 key/value heads, a past row, a bool mask one key short of the
   * 3 keys, softcap, and qk_matmul_output after the softcap */
  node(f, "Attention", 6, 4);
  tensor(f, 0, KL_F32, DIMS(1, 4, 2, 3),
         VALS(0.09, 1.49, -0.62, 0.36, 0.73, -0.58, 0.08, 1.06, 1.64, -1.4, 1.73, -1.98, 1.01,
              1.24, -1.45, -0.32, 1.26, -1.94, 0.51, 1.17, 0.05, 0.9, -1.09, -1.21));
  tensor(f, 1, KL_F32, DIMS(1, 2, 2, 3),
         VALS(-0.55, -1.28, -0.62, 1.79, 0.29, -0.64, -0.91, 1.81, -0.22, 1.92, 0.06, 0.08));
  tensor(f, 2, KL_F32, DIMS(1, 2, 2, 2), VALS(1.59, 0.97, 0.32, -0.29, 1.51, -0.35, 1.69, -1.73));
  tensor(f, 3, KL_BOOL, DIMS(2, 2), VALS(1, 0, 1, 1));
  tensor(f, 4, KL_F32, DIMS(1, 2, 1, 3), VALS(-0.28, 0.08, 1.8, -1, 1.22, 0.71));
  tensor(f, 5, KL_F32, DIMS(1, 2, 1, 2), VALS(0.87, 0.52, 1.89, -0.67));
  attr_float(f, "softcap", 1.5f);
  attr_int(f, "qk_matmul_output_mode", 1);
  expect_run(f);
  EXPECT(f, 0, 1e-6, 0.870000005, 0.519999981, 1.25866652, 0.762916565, 0.870000005,
         0.519999981, 1.41158509, 0.858490646, 1.88999999, -0.670000017, 1.61561084,
         -0.438935459, 1.88999999, -0.670000017, 1.68852866, -0.500339925);
  EXPECT(f, 1, 1e-7, -0.28, 0.08, 1.8, -0.55, -1.28, -0.62, 1.79, 0.29, -0.64, -1, 1.22, 0.71,
         -0.91, 1.81, -0.22, 1.92, 0.06, 0.08);
  EXPECT(f, 2, 1e-7, 0.87, 0.52, 1.59, 0.97, 0.32, -0.29, 1.89, -0.67, 1.51, -0.35, 1.69, -1.73);
  EXPECT(f, 3, 1e-6, -0.561390162, -0.811086357, 0.545430005, -0.593063176, -0.43346712,
         0.660190105, 1.23167861, -1.0962646, -0.339832693, -1.23526788, -0.124879785,
         -0.41450277, -0.299991876, 0.840059876, 0.934952676, 0.273905873, 1.22869205,
         -0.391415447, 0.52674669, 0.839385927, 0.576908648, -1.24536455, -1.1244663,
         0.808427215);

  /* 3-D: 2 query heads of size 2 sharing one key/value head, a float mask, causal */
  node(f, "Attention", 4, 1);
  tensor(f, 0, KL_F32, DIMS(1, 2, 4), VALS(-0.41, -1.19, -1.8, -1.15, 1.66, 1.36, -1.55, 0.42));
  tensor(f, 1, KL_F32, DIMS(1, 3, 2), VALS(-0.08, 0.38, 0.64, -0.77, 1.85, -0.14));
  tensor(f, 2, KL_F32, DIMS(1, 3, 2), VALS(0.51, 0.54, -1.26, -1.75, -0.35, 1.06));
  tensor(f, 3, KL_F32, DIMS(2, 3), VALS(1.26, 0.92, -1.55, 1.65, 1.21, 1.51));
  attr_int(f, "q_num_heads", 2);
  attr_int(f, "kv_num_heads", 1);
  attr_float(f, "scale", 0.7f);
  attr_int(f, "is_causal", 1);
  expect_run(f);
  EXPECT(f, 0, 1e-6, 0.50999999, 0.540000021, 0.50999999, 0.540000021, -0.0780299753,
         -0.220784515, 0.202467516, 0.14211902);
}

static void test_rotary_values(void **state) {
  fixture *f = *state;
  node(f, "RotaryEmbedding", 4, 1);
  tensor(f, 0, KL_F32, DIMS(1, 2, 2, 6),
         VALS(0.09, 1.66, -1.81, -1.88, -1.92, -0.99, -1.01, -1.25, 0.27, -1.84, 0.36, -1.34,
              0.71, -1.92, -0.76, 1.75, 0.15, 1.25, 0.63, 0.44, -1.23, 0.3, -1.84, 1.21));
  tensor(f, 1, KL_F32, DIMS(5, 2), VALS(1.84, 1.42, -1.8, -0.65, -0.73, -1.55, 0.51, 1.19, -0.75,
                                        1.45));
  tensor(f, 2, KL_F32, DIMS(5, 2), VALS(1.19, -1.48, 1.07, 1.53, -1.21, 0.29, 0.55, 0.44, -1.62,
                                        0.64));
  tensor(f, 3, KL_I64, DIMS(1, 2), VALS(4, 1));
  attr_int(f, "interleaved", 1);
  attr_int(f, "rotary_embedding_dim", 4);
  expect_run(f);
  EXPECT(f, 0, 1e-6, 2.62169981, -1.3908, -1.42130005, -3.88439989, -1.91999996, -0.99000001,
         3.15549994, 1.16929996, 2.63970017, 1.60909998, 0.360000014, -1.34000003, -3.64289999,
         0.289799929, -2.22200012, 2.05110025, 0.150000006, 1.25, -1.60479999, -0.117899954,
         0.340499967, -2.07690001, -1.84000003, 1.21000004);
  ((int64_t *)f->tin[3].data)[1] = 5;
  assert_int_equal(run_kernel(f), KILN_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(f->e.msg, "position_ids) has 5 at [0, 1]"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_convtranspose_shapes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_convtranspose_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lppool_shapes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_maxunpool_shapes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_col2im_shapes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_quantize_shapes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dequantize_shapes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_integer_product_shapes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_attention_shapes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rotary_shapes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_convtranspose_values, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool_values, setup, teardown),
      cmocka_unit_test_setup_teardown(test_maxunpool_values, setup, teardown),
      cmocka_unit_test_setup_teardown(test_col2im_values, setup, teardown),
      cmocka_unit_test_setup_teardown(test_quantize_values, setup, teardown),
      cmocka_unit_test_setup_teardown(test_integer_product_values, setup, teardown),
      cmocka_unit_test_setup_teardown(test_attention_values, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rotary_values, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
