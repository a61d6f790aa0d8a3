/* Shape and dtype inference, op by op: broadcasting edge cases, negative axes,
 * symbolic and unknown dims (load time), and the errors that bad models and inputs get.
 *
 * Each test builds one node in a fresh graph, gives its infer function input types
 * (and contents for shape inputs) directly, and checks the output types or the status
 * and message. Dims are written as numbers: >= 0 known, U unknown, B and S the
 * symbols "batch" and "seq".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

#define MAX_IO 6
#define U (-1)
#define B (-100) /* symbol 0, "batch" */
#define S (-101) /* symbol 1, "seq" */
#define UNKNOWN_RANK (-7)

typedef struct fixture {
  kl_graph *g;
  int node;
  int n_in, n_out;
  kl_type in[MAX_IO];
  bool present[MAX_IO];
  const void *data[MAX_IO];
  kl_type out[MAX_IO];
  kl_err e;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f || !(f->g = kl_graph_new())) return -1;
  if (kl_graph_symbol(f->g, "batch") != 0 || kl_graph_symbol(f->g, "seq") != 1) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kl_graph_free(f->g);
  free(f);
  return 0;
}

/* A type from dims written as above; rank UNKNOWN_RANK makes the rank unknown. */
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

/* A node of op `name` with n_in inputs (all present until absent() says otherwise). */
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
  for (int i = 0; i < n_in; i++) {
    f->present[i] = true;
    f->data[i] = NULL;
  }
}

static void input(fixture *f, int i, kl_type t) {
  f->in[i] = t;
  f->present[i] = true;
}
static void absent(fixture *f, int i) { f->present[i] = false; }
static void contents(fixture *f, int i, const void *data) { f->data[i] = data; }

static void attr_int(fixture *f, const char *name, int64_t v) {
  assert_int_equal(kl_node_set_int(f->g, f->node, name, v, &f->e), KILN_OK);
}
static void attr_ints(fixture *f, const char *name, const int64_t *v, int n) {
  assert_int_equal(kl_node_set_ints(f->g, f->node, name, v, n, &f->e), KILN_OK);
}
static void attr_string(fixture *f, const char *name, const char *v) {
  assert_int_equal(kl_node_set_string(f->g, f->node, name, v, &f->e), KILN_OK);
}
#define ATTR_INTS(f, name, ...) attr_ints(f, name, (const int64_t[]){__VA_ARGS__}, \
                                          N_INTS(__VA_ARGS__))

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

/* Infer succeeds and output 0 is `want`. */
static void expect_ok(fixture *f, kl_type want) {
  kiln_status st = run(f);
  if (st != KILN_OK) fail_msg("infer failed: %s", f->e.msg);
  expect_type(f, 0, want);
}

/* Infer fails with `code` and a message containing `part`. */
static void expect_fail(fixture *f, kiln_status code, const char *part) {
  kiln_status st = run(f);
  if (st != code) fail_msg("status %d, expected %d (message: %s)", st, code, f->e.msg);
  if (!strstr(f->e.msg, part)) fail_msg("message \"%s\" lacks \"%s\"", f->e.msg, part);
}

/* ---- elementwise ---- */

static void test_broadcast(void **state) {
  fixture *f = *state;
  node(f, "Add", 2, 1);
  input(f, 0, TY(KL_F32, 2, 1, 4));
  input(f, 1, TY(KL_F32, 3, 1));
  expect_ok(f, TY(KL_F32, 2, 3, 4));
  input(f, 0, TY0(KL_F32));
  input(f, 1, TY(KL_F32, 5));
  expect_ok(f, TY(KL_F32, 5));
  input(f, 0, TY(KL_F32, 0));
  input(f, 1, TY(KL_F32, 1));
  expect_ok(f, TY(KL_F32, 0)); /* 1 yields even to 0 */
  input(f, 1, TY(KL_F32, 3));
  expect_fail(f, KILN_ERR_SHAPE, "do not broadcast");
  input(f, 0, TY(KL_F32, 2, 3));
  input(f, 1, TY(KL_F32, 4, 3));
  expect_fail(f, KILN_ERR_SHAPE, "2 vs 4 in output dim 0");
}

static void test_broadcast_symbolic(void **state) {
  fixture *f = *state;
  node(f, "Mul", 2, 1);
  input(f, 0, TY(KL_F32, B, 1));
  input(f, 1, TY(KL_F32, 1, S));
  expect_ok(f, TY(KL_F32, B, S));
  input(f, 0, TY(KL_F32, B));
  input(f, 1, TY(KL_F32, 4)); /* batch must be 1 or 4: the result is 4 */
  expect_ok(f, TY(KL_F32, 4));
  input(f, 1, TY(KL_F32, B));
  expect_ok(f, TY(KL_F32, B));
  input(f, 1, TY(KL_F32, S)); /* batch or seq, whichever is not 1 */
  expect_ok(f, TY(KL_F32, U));
  input(f, 1, TY(KL_F32, U));
  expect_ok(f, TY(KL_F32, U));
  input(f, 1, TYU(KL_F32));
  expect_ok(f, TYU(KL_F32));
  input(f, 0, TYU(KL_UNDEFINED));
  input(f, 1, TY(KL_I64, 3));
  expect_ok(f, TYU(KL_I64)); /* the dtype comes from whichever input knows it */
}

static void test_binary_dtypes(void **state) {
  fixture *f = *state;
  node(f, "Div", 2, 1);
  input(f, 0, TY(KL_F32, 3));
  input(f, 1, TY(KL_F16, 3));
  expect_fail(f, KILN_ERR_DTYPE, "float16");
  input(f, 0, TY(KL_U64, 3)); /* Div divides signed: uint64 is refused */
  input(f, 1, TY(KL_U64, 3));
  expect_fail(f, KILN_ERR_UNSUPPORTED, "uint64");
  input(f, 0, TY(KL_BF16, 3));
  input(f, 1, TY(KL_BF16, 1));
  expect_ok(f, TY(KL_BF16, 3));
}

static void test_unary(void **state) {
  fixture *f = *state;
  node(f, "Sigmoid", 1, 1);
  input(f, 0, TY(KL_F16, B, 3));
  expect_ok(f, TY(KL_F16, B, 3));
  input(f, 0, TY(KL_I32, 3));
  expect_fail(f, KILN_ERR_UNSUPPORTED, "Sigmoid takes float32, float16, float64, bfloat16");
  node(f, "Identity", 1, 1);
  input(f, 0, TY(KL_BOOL, U, 2));
  expect_ok(f, TY(KL_BOOL, U, 2));
  node(f, "Relu", 1, 1);
  absent(f, 0);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "input 0 is required");
}

static void test_clip(void **state) {
  fixture *f = *state;
  node(f, "Clip", 3, 1);
  input(f, 0, TY(KL_F32, 2, 3));
  absent(f, 1);
  input(f, 2, TY0(KL_F32));
  expect_ok(f, TY(KL_F32, 2, 3));
  input(f, 2, TY(KL_F32, 2));
  expect_fail(f, KILN_ERR_SHAPE, "expected a scalar");
  input(f, 2, TY0(KL_F64));
  expect_fail(f, KILN_ERR_DTYPE, "input 2 is float64, expected float32");
}

static void test_dropout(void **state) {
  fixture *f = *state;
  node(f, "Dropout", 3, 2);
  input(f, 0, TY(KL_F32, B, 7));
  input(f, 1, TY0(KL_F32));
  input(f, 2, TY0(KL_BOOL));
  expect_ok(f, TY(KL_F32, B, 7));
  expect_type(f, 1, TY(KL_BOOL, B, 7));
  bool yes = true;
  contents(f, 2, &yes); /* training, ratio unknown: decided when it is known */
  expect_ok(f, TY(KL_F32, B, 7));
  float ratio = 0.5f;
  contents(f, 1, &ratio);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "training-mode Dropout");
  absent(f, 1); /* the default ratio, 0.5 */
  expect_fail(f, KILN_ERR_UNSUPPORTED, "training-mode Dropout");
  ratio = 0;
  input(f, 1, TY0(KL_F32));
  expect_ok(f, TY(KL_F32, B, 7));
}

/* ---- convolution and pooling ---- */

static void test_conv(void **state) {
  fixture *f = *state;
  node(f, "Conv", 3, 1);
  input(f, 0, TY(KL_F32, B, 3, 7, 6));
  input(f, 1, TY(KL_F32, 4, 3, 3, 2));
  input(f, 2, TY(KL_F32, 4));
  ATTR_INTS(f, "pads", 1, 0, 1, 1);
  ATTR_INTS(f, "strides", 2, 1);
  expect_ok(f, TY(KL_F32, B, 4, 4, 6));
  input(f, 0, TY(KL_F32, 1, 3, S, 6)); /* symbolic spatial dims stay unknown */
  expect_ok(f, TY(KL_F32, 1, 4, U, 6));
  input(f, 0, TYU(KL_F32));
  expect_ok(f, TY(KL_F32, U, 4, U, U));
  input(f, 2, TY(KL_F32, 5));
  expect_fail(f, KILN_ERR_SHAPE, "input 2 (B) has 5 values, expected 4");
}

static void test_conv_auto_pad_and_groups(void **state) {
  fixture *f = *state;
  node(f, "Conv", 2, 1);
  input(f, 0, TY(KL_F16, 2, 4, 7, 8));
  input(f, 1, TY(KL_F16, 6, 2, 4, 3));
  attr_int(f, "group", 2);
  ATTR_INTS(f, "strides", 2, 3);
  attr_string(f, "auto_pad", "SAME_LOWER");
  expect_ok(f, TY(KL_F16, 2, 6, 4, 3));
  attr_string(f, "auto_pad", "VALID");
  expect_ok(f, TY(KL_F16, 2, 6, 2, 2));
  attr_string(f, "auto_pad", "SAME");
  expect_fail(f, KILN_ERR_INVALID_MODEL, "auto_pad is \"SAME\"");
  attr_string(f, "auto_pad", "NOTSET");
  attr_int(f, "group", 3);
  expect_fail(f, KILN_ERR_SHAPE, "input 1 (W) has 2 input channels per group");
  attr_int(f, "group", 0);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "group is 0");
}

static void test_conv_errors(void **state) {
  fixture *f = *state;
  node(f, "Conv", 2, 1);
  input(f, 0, TY(KL_F32, 1, 2, 5, 5));
  input(f, 1, TY(KL_F32, 3, 2, 3));
  expect_fail(f, KILN_ERR_SHAPE, "input 1 (W) has rank 3, expected 4");
  input(f, 1, TY(KL_F32, 3, 2, 7, 3));
  expect_fail(f, KILN_ERR_SHAPE, "window of 7 does not fit the padded input of 5");
  input(f, 1, TY(KL_F32, 3, 2, 3, 0));
  expect_fail(f, KILN_ERR_SHAPE, "empty kernel (spatial dim 1 is 0)");
  input(f, 1, TY(KL_F32, 3, 2, 3, 3));
  ATTR_INTS(f, "kernel_shape", 3, 2);
  expect_fail(f, KILN_ERR_SHAPE, "kernel_shape[1] is 2 but the weights have 3");
  ATTR_INTS(f, "kernel_shape", 3, 3);
  ATTR_INTS(f, "pads", 1, 1);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "pads has 2 values, expected 4");
  ATTR_INTS(f, "pads", 1, 1, 1, 1);
  ATTR_INTS(f, "strides", 1, 0);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "strides[1] is 0");
  ATTR_INTS(f, "strides", 1, 1);
  input(f, 1, TY(KL_I32, 3, 2, 3, 3));
  expect_fail(f, KILN_ERR_DTYPE, "input 1 is int32");
  input(f, 0, TY(KL_F32, 1, 2, 3, 3, 3, 3));
  input(f, 1, TY(KL_F32, 3, 2, 1, 1, 1, 1));
  expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (X) has 4 spatial dims; kiln supports 1 to 3");
  input(f, 0, TY(KL_F32, 1, 2));
  input(f, 1, TY(KL_F32, 3, 2, 1));
  expect_fail(f, KILN_ERR_SHAPE, "input 0 (X) has rank 2, expected 3 to 5");
}

static void test_pool(void **state) {
  fixture *f = *state;
  node(f, "MaxPool", 1, 2);
  input(f, 0, TY(KL_F32, B, 3, 7, 8));
  expect_fail(f, KILN_ERR_INVALID_MODEL, "kernel_shape is required");
  ATTR_INTS(f, "kernel_shape", 2, 2);
  ATTR_INTS(f, "strides", 2, 3);
  expect_ok(f, TY(KL_F32, B, 3, 3, 3));
  expect_type(f, 1, TY(KL_I64, B, 3, 3, 3));
  attr_int(f, "ceil_mode", 1);
  expect_ok(f, TY(KL_F32, B, 3, 4, 3));
  ATTR_INTS(f, "kernel_shape", 2);
  expect_fail(f, KILN_ERR_SHAPE, "kernel_shape has 1 values but input 0 (X) has 2");
  attr_int(f, "storage_order", 2);
  ATTR_INTS(f, "kernel_shape", 2, 2);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "storage_order is 2");
}

/* ceil_mode drops a last window that would start in the end padding. */
static void test_pool_ceil_drops_last_window(void **state) {
  fixture *f = *state;
  node(f, "AveragePool", 1, 1);
  input(f, 0, TY(KL_F32, 1, 1, 3));
  ATTR_INTS(f, "kernel_shape", 1);
  ATTR_INTS(f, "strides", 2);
  ATTR_INTS(f, "pads", 0, 1);
  expect_ok(f, TY(KL_F32, 1, 1, 2));
  attr_int(f, "ceil_mode", 1); /* ceil(3 / 2) + 1 = 3, but the 3rd starts at 4 >= 3 */
  expect_ok(f, TY(KL_F32, 1, 1, 2));
  ATTR_INTS(f, "kernel_shape", 2);
  ATTR_INTS(f, "pads", 0, 0); /* ceil(1 / 2) + 1 = 2, the 2nd starts at 2 < 3: kept */
  expect_ok(f, TY(KL_F32, 1, 1, 2));
  attr_int(f, "ceil_mode", 0);
  expect_ok(f, TY(KL_F32, 1, 1, 1));
  input(f, 0, TYU(KL_F32)); /* rank from kernel_shape */
  expect_ok(f, TY(KL_F32, U, U, U));
  input(f, 0, TY(KL_I8, 1, 1, 3));
  expect_fail(f, KILN_ERR_UNSUPPORTED, "AveragePool takes");
}

static void test_global_pool(void **state) {
  fixture *f = *state;
  node(f, "GlobalAveragePool", 1, 1);
  input(f, 0, TY(KL_F32, B, 3, S, 5, 2));
  expect_ok(f, TY(KL_F32, B, 3, 1, 1, 1));
  input(f, 0, TY(KL_F32, 2, 3));
  expect_fail(f, KILN_ERR_SHAPE, "rank 2, expected 3 to 8");
}

static void test_batchnorm(void **state) {
  fixture *f = *state;
  node(f, "BatchNormalization", 5, 1);
  input(f, 0, TY(KL_F32, B, 3, 4, 4));
  for (int i = 1; i < 5; i++) input(f, i, TY(KL_F32, 3));
  expect_ok(f, TY(KL_F32, B, 3, 4, 4));
  input(f, 0, TY(KL_F32, 6)); /* 1-D: one channel */
  expect_fail(f, KILN_ERR_SHAPE, "input 1 (scale) has 3 values, expected 1");
  for (int i = 1; i < 5; i++) input(f, i, TY(KL_F16, 1));
  expect_ok(f, TY(KL_F32, 6));
  input(f, 4, TY(KL_F32, 1, 1));
  expect_fail(f, KILN_ERR_SHAPE, "input 4 (input_var) has rank 2, expected 1");
  input(f, 4, TY(KL_F32, 1));
  attr_int(f, "training_mode", 1);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "training_mode=1");
}

/* ---- matrix products and softmax ---- */

static void test_gemm(void **state) {
  fixture *f = *state;
  node(f, "Gemm", 3, 1);
  input(f, 0, TY(KL_F32, B, 5));
  input(f, 1, TY(KL_F32, 5, 4));
  input(f, 2, TY(KL_F32, 4));
  expect_ok(f, TY(KL_F32, B, 4));
  attr_int(f, "transA", 1);
  attr_int(f, "transB", 1);
  input(f, 0, TY(KL_F32, 5, 3));
  input(f, 1, TY(KL_F32, 4, 5));
  input(f, 2, TY(KL_F32, 3, 1));
  expect_ok(f, TY(KL_F32, 3, 4));
  input(f, 1, TY(KL_F32, 4, 7));
  expect_fail(f, KILN_ERR_SHAPE, "input 1 (B) has 7 columns, expected 5 to match input 0 "
                                 "(A)'s rows");
  input(f, 1, TY(KL_F32, 4, 5));
  input(f, 2, TY(KL_F32, 2, 4));
  expect_fail(f, KILN_ERR_SHAPE, "input 2 (C) float32[2,4] does not broadcast to");
  input(f, 2, TY(KL_F32, 1, 3, 4));
  expect_fail(f, KILN_ERR_SHAPE, "input 2 (C) has rank 3");
  absent(f, 2);
  input(f, 0, TY(KL_F32, 5));
  expect_fail(f, KILN_ERR_SHAPE, "input 0 (A) has rank 1, expected 2");
}

static void test_matmul(void **state) {
  fixture *f = *state;
  node(f, "MatMul", 2, 1);
  input(f, 0, TY(KL_F32, B, S, 4));
  input(f, 1, TY(KL_F32, 4, 6));
  expect_ok(f, TY(KL_F32, B, S, 6));
  input(f, 0, TY(KL_F32, 4)); /* 1-D A: a row whose 1 is dropped */
  input(f, 1, TY(KL_F32, 2, 3, 4, 5));
  expect_ok(f, TY(KL_F32, 2, 3, 5));
  input(f, 0, TY(KL_F32, 2, 1, 3, 4));
  input(f, 1, TY(KL_F32, 4)); /* 1-D B: a column */
  expect_ok(f, TY(KL_F32, 2, 1, 3));
  input(f, 0, TY(KL_F32, 6));
  input(f, 1, TY(KL_F32, 6));
  expect_ok(f, TY0(KL_F32));
  input(f, 0, TY(KL_F32, 2, 1, 3, 4));
  input(f, 1, TY(KL_F32, 5, 4, 2));
  expect_ok(f, TY(KL_F32, 2, 5, 3, 2));
  input(f, 1, TY(KL_F32, 3, 3, 4, 2));
  expect_fail(f, KILN_ERR_SHAPE, "do not broadcast");
  input(f, 1, TY(KL_F32, 5, 2));
  expect_fail(f, KILN_ERR_SHAPE, "input 1 (B) has 5 rows, expected 4");
  input(f, 1, TY0(KL_F32));
  expect_fail(f, KILN_ERR_SHAPE, "input 1 (B) has rank 0");
  input(f, 1, TYU(KL_F32));
  expect_ok(f, TYU(KL_F32));
}

static void test_softmax(void **state) {
  fixture *f = *state;
  node(f, "LogSoftmax", 1, 1);
  input(f, 0, TY(KL_F64, B, 3, 4));
  expect_ok(f, TY(KL_F64, B, 3, 4));
  attr_int(f, "axis", -3);
  expect_ok(f, TY(KL_F64, B, 3, 4));
  attr_int(f, "axis", 3);
  expect_fail(f, KILN_ERR_SHAPE, "axis 3 is out of range for rank 3 (expected -3 to 2)");
  attr_int(f, "axis", -4);
  expect_fail(f, KILN_ERR_SHAPE, "axis -4");
}

/* ---- shape ops ---- */

static void test_flatten(void **state) {
  fixture *f = *state;
  node(f, "Flatten", 1, 1);
  input(f, 0, TY(KL_I8, B, 3, 4));
  expect_ok(f, TY(KL_I8, B, 12));
  attr_int(f, "axis", 0);
  expect_ok(f, TY(KL_I8, 1, U));
  attr_int(f, "axis", 3);
  expect_ok(f, TY(KL_I8, U, 1));
  attr_int(f, "axis", -2);
  expect_ok(f, TY(KL_I8, B, 12));
  input(f, 0, TY(KL_I8, 2, 3, 4));
  attr_int(f, "axis", 3);
  expect_ok(f, TY(KL_I8, 24, 1));
  attr_int(f, "axis", -4);
  expect_fail(f, KILN_ERR_SHAPE, "axis -4 is out of range for rank 3 (expected -3 to 3)");
}

static void test_reshape(void **state) {
  fixture *f = *state;
  node(f, "Reshape", 2, 1);
  input(f, 0, TY(KL_F32, B, 3, 4));
  input(f, 1, TY(KL_I64, 2));
  const int64_t zero_minus1[] = {0, -1};
  contents(f, 1, zero_minus1);
  expect_ok(f, TY(KL_F32, B, 12)); /* the batch symbol cancels */
  input(f, 0, TY(KL_F32, B, S, 8));
  input(f, 1, TY(KL_I64, 4));
  const int64_t heads[] = {0, 0, 2, -1};
  contents(f, 1, heads);
  expect_ok(f, TY(KL_F32, B, S, 2, 4));
  input(f, 1, TY(KL_I64, 2));
  const int64_t merge[] = {-1, 8};
  contents(f, 1, merge); /* batch * seq has no single symbol */
  expect_ok(f, TY(KL_F32, U, 8));
  const int32_t merge32[] = {-1, 8};
  input(f, 1, TY(KL_I32, 2));
  contents(f, 1, merge32);
  expect_ok(f, TY(KL_F32, U, 8));
  contents(f, 1, NULL); /* contents unknown: only the rank */
  expect_ok(f, TY(KL_F32, U, U));
  input(f, 1, TY(KL_I64, U));
  expect_ok(f, TYU(KL_F32));
}

static void test_reshape_errors(void **state) {
  fixture *f = *state;
  node(f, "Reshape", 2, 1);
  input(f, 0, TY(KL_F32, 2, 3, 4));
  input(f, 1, TY(KL_I64, 2));
  const int64_t bad_div[] = {5, -1}, two_minus1[] = {-1, -1}, bad_count[] = {7, 3};
  const int64_t too_neg[] = {-2, 12}, copy_beyond[] = {24, 0, 0, 0}, zero_minus1[] = {0, -1};
  contents(f, 1, bad_div);
  expect_fail(f, KILN_ERR_SHAPE, "cannot reshape 24 elements into a shape of 5");
  contents(f, 1, two_minus1);
  expect_fail(f, KILN_ERR_SHAPE, "at most one dim can be inferred");
  contents(f, 1, bad_count);
  expect_fail(f, KILN_ERR_SHAPE, "cannot reshape 24 elements into a shape of 21");
  contents(f, 1, too_neg);
  expect_fail(f, KILN_ERR_SHAPE, "values must be at least -1");
  input(f, 1, TY(KL_I64, 4));
  contents(f, 1, copy_beyond);
  expect_fail(f, KILN_ERR_SHAPE, "has 0 at index 3, but input 0 has only 3 dims");
  attr_int(f, "allowzero", 1);
  input(f, 1, TY(KL_I64, 2));
  contents(f, 1, zero_minus1);
  expect_fail(f, KILN_ERR_SHAPE, "both 0 and -1");
  input(f, 1, TY(KL_F32, 2));
  expect_fail(f, KILN_ERR_DTYPE, "input 1 (shape) is float32, expected an integer tensor");
  input(f, 1, TY(KL_I64, 9));
  contents(f, 1, NULL);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "rank 9");
}

static void test_reshape_allowzero(void **state) {
  fixture *f = *state;
  node(f, "Reshape", 2, 1);
  attr_int(f, "allowzero", 1);
  input(f, 0, TY(KL_F32, 3, 0));
  input(f, 1, TY(KL_I64, 3));
  const int64_t shape[] = {0, 3, 5};
  contents(f, 1, shape);
  expect_ok(f, TY(KL_F32, 0, 3, 5));
  const int64_t minus1[] = {0, -1, 2};
  contents(f, 1, minus1);
  attr_int(f, "allowzero", 0); /* copies 3: 3 * ? * 2 = 0 */
  expect_ok(f, TY(KL_F32, 3, 0, 2));
  input(f, 1, TY(KL_I64, 0)); /* an empty shape makes a scalar */
  input(f, 0, TY(KL_F32, 1, 1));
  contents(f, 1, NULL);
  expect_ok(f, TY0(KL_F32));
}

static void test_squeeze(void **state) {
  fixture *f = *state;
  node(f, "Squeeze", 2, 1);
  input(f, 0, TY(KL_F32, 1, B, 1, 3));
  input(f, 1, TY(KL_I64, 2));
  const int64_t axes[] = {0, -2}, dup[] = {2, -2}, bad[] = {3}, out_of_range[] = {4};
  contents(f, 1, axes);
  expect_ok(f, TY(KL_F32, B, 3));
  contents(f, 1, dup);
  expect_fail(f, KILN_ERR_SHAPE, "axes name dim 2 twice");
  input(f, 1, TY(KL_I64, 1));
  contents(f, 1, bad);
  expect_fail(f, KILN_ERR_SHAPE, "cannot squeeze dim 3 of size 3");
  contents(f, 1, out_of_range);
  expect_fail(f, KILN_ERR_SHAPE, "axis 4 is out of range for rank 4");
  contents(f, 1, NULL);
  expect_ok(f, TY(KL_F32, U, U, U));
  absent(f, 1); /* no axes: every 1 goes, which needs every dim known */
  expect_ok(f, TYU(KL_F32));
  input(f, 0, TY(KL_F32, 1, 4, 1, 1));
  expect_ok(f, TY(KL_F32, 4));
}

static void test_unsqueeze(void **state) {
  fixture *f = *state;
  node(f, "Unsqueeze", 2, 1);
  input(f, 0, TY(KL_F32, B, 3));
  input(f, 1, TY(KL_I64, 3));
  const int64_t axes[] = {-1, 0, 2}, dup[] = {0, -4}, bad[] = {0, 5};
  contents(f, 1, axes);
  expect_ok(f, TY(KL_F32, 1, B, 1, 3, 1));
  input(f, 1, TY(KL_I64, 2));
  contents(f, 1, dup);
  expect_fail(f, KILN_ERR_SHAPE, "axes name dim 0 twice");
  contents(f, 1, bad);
  expect_fail(f, KILN_ERR_SHAPE, "axis 5 is out of range for rank 4");
  contents(f, 1, NULL);
  expect_ok(f, TY(KL_F32, U, U, U, U));
  input(f, 0, TY(KL_F32, 1, 1, 1, 1, 1, 1, 1));
  expect_fail(f, KILN_ERR_UNSUPPORTED, "rank 9");
}

static void test_concat(void **state) {
  fixture *f = *state;
  node(f, "Concat", 3, 1);
  input(f, 0, TY(KL_I64, B, 2));
  input(f, 1, TY(KL_I64, U, 3));
  input(f, 2, TY(KL_I64, 4, 1));
  expect_fail(f, KILN_ERR_INVALID_MODEL, "axis is required");
  attr_int(f, "axis", -1);
  expect_ok(f, TY(KL_I64, 4, 6));
  attr_int(f, "axis", 0);
  expect_fail(f, KILN_ERR_SHAPE, "input 1 has 3 in dim 1, expected 2");
  input(f, 1, TY(KL_I64, S, 2));
  input(f, 2, TY(KL_I64, 4, 2));
  expect_ok(f, TY(KL_I64, U, 2));
  input(f, 1, TY(KL_I64, 0, 2));
  input(f, 0, TY(KL_I64, 3, 2));
  expect_ok(f, TY(KL_I64, 7, 2));
  input(f, 1, TYU(KL_I64));
  expect_ok(f, TY(KL_I64, U, 2));
  input(f, 1, TY(KL_I64, 3));
  expect_fail(f, KILN_ERR_SHAPE, "input 1 has rank 1, expected 2");
  input(f, 1, TY(KL_I32, 1, 2));
  expect_fail(f, KILN_ERR_DTYPE, "input 1 is int32, expected int64");
  attr_int(f, "axis", 2);
  input(f, 1, TY(KL_I64, 1, 2));
  expect_fail(f, KILN_ERR_SHAPE, "axis 2 is out of range for rank 2");
}

static void test_transpose(void **state) {
  fixture *f = *state;
  node(f, "Transpose", 1, 1);
  input(f, 0, TY(KL_BF16, B, 3, S));
  expect_ok(f, TY(KL_BF16, S, 3, B));
  ATTR_INTS(f, "perm", 1, 2, 0);
  expect_ok(f, TY(KL_BF16, 3, S, B));
  input(f, 0, TYU(KL_BF16));
  expect_ok(f, TY(KL_BF16, U, U, U));
  input(f, 0, TY(KL_BF16, 2, 3));
  expect_fail(f, KILN_ERR_SHAPE, "perm has 3 values but input 0 has rank 2");
  ATTR_INTS(f, "perm", 1, 1);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "perm is not a permutation of 0..1");
  ATTR_INTS(f, "perm", 0, -1);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "entry 1 is -1");
  input(f, 0, TYU(KL_BF16));
  ATTR_INTS(f, "perm", 0, 1, 2, 3, 4, 5, 6, 7, 8);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "rank 9");
}

static void test_shape(void **state) {
  fixture *f = *state;
  node(f, "Shape", 1, 1);
  input(f, 0, TY(KL_U8, B, 3, 4, 5));
  expect_ok(f, TY(KL_I64, 4));
  attr_int(f, "start", -3);
  attr_int(f, "end", -1);
  expect_ok(f, TY(KL_I64, 2));
  attr_int(f, "start", -10); /* clamped to 0 */
  attr_int(f, "end", 100);
  expect_ok(f, TY(KL_I64, 4));
  attr_int(f, "start", 3);
  attr_int(f, "end", 1);
  expect_ok(f, TY(KL_I64, 0));
  input(f, 0, TYU(KL_U8));
  expect_ok(f, TY(KL_I64, U));
}

static void test_gather(void **state) {
  fixture *f = *state;
  node(f, "Gather", 2, 1);
  input(f, 0, TY(KL_F16, B, 5, 3));
  input(f, 1, TY(KL_I32, 2, S));
  attr_int(f, "axis", -2);
  expect_ok(f, TY(KL_F16, B, 2, S, 3));
  input(f, 1, TY0(KL_I64));
  expect_ok(f, TY(KL_F16, B, 3));
  const int64_t idx[] = {-5};
  contents(f, 1, idx);
  expect_ok(f, TY(KL_F16, B, 3));
  const int64_t bad[] = {5};
  contents(f, 1, bad);
  expect_fail(f, KILN_ERR_INVALID_ARGUMENT, "input 1 (indices) has 5 at element 0, "
                                            "expected -5 to 4");
  contents(f, 1, NULL);
  attr_int(f, "axis", 3);
  expect_fail(f, KILN_ERR_SHAPE, "axis 3 is out of range for rank 3");
  attr_int(f, "axis", 0);
  input(f, 1, TY(KL_F32, 2));
  expect_fail(f, KILN_ERR_UNSUPPORTED, "input 1 (indices) is float32");
  input(f, 0, TY(KL_F16, 1, 1, 1, 1, 1, 1, 1, 1));
  input(f, 1, TY(KL_I64, 2, 2));
  expect_fail(f, KILN_ERR_UNSUPPORTED, "rank 9");
  input(f, 0, TY0(KL_F16));
  expect_fail(f, KILN_ERR_SHAPE, "input 0 (data) has rank 0, expected 1 to 8");
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_broadcast), T(test_broadcast_symbolic), T(test_binary_dtypes), T(test_unary),
      T(test_clip), T(test_dropout), T(test_conv), T(test_conv_auto_pad_and_groups),
      T(test_conv_errors), T(test_pool), T(test_pool_ceil_drops_last_window),
      T(test_global_pool), T(test_batchnorm), T(test_gemm), T(test_matmul),
      T(test_softmax), T(test_flatten), T(test_reshape), T(test_reshape_errors),
      T(test_reshape_allowzero), T(test_squeeze), T(test_unsqueeze), T(test_concat),
      T(test_transpose), T(test_shape), T(test_gather),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
