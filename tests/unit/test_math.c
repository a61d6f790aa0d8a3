/* The math family: shape/dtype inference of the unary, binary, variadic, Where, Cast
 * and activation ops (symbolic dims, negative axes, the errors bad models get), and
 * their reference kernels against values computed independently (NumPy, pasted as
 * literals) or by hand, with the edge cases the ONNX node tests do not reach: integer
 * wrap-around, uint64 beyond int64, floored vs truncated modulo, half-to-even
 * rounding, NaN handling, out-of-range casts.
 *
 * Each test builds a one-node graph. Inference tests call the op's infer function on
 * types written as dims (>= 0 known, U unknown, B the symbol "batch"); kernel tests run
 * infer on concrete inputs, as the runtime does, then the reference kernel.
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
  int node;
  int n_in;
  kl_type in[MAX_IO];
  const void *data[MAX_IO];
  kl_type out;
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

/* A fresh node of op `name` with n_in inputs (in a fresh graph, so attributes of an
 * earlier node do not carry over). */
static void node(fixture *f, const char *name, int n_in) {
  kl_graph_free(f->g);
  f->g = kl_graph_new();
  assert_non_null(f->g);
  assert_int_equal(kl_graph_symbol(f->g, "batch"), 0);
  int ins[MAX_IO], out;
  for (int i = 0; i < n_in; i++) ins[i] = kl_graph_add_value(f->g, NULL, &f->e);
  out = kl_graph_add_value(f->g, NULL, &f->e);
  kl_op op = kl_op_lookup("", name);
  assert_int_not_equal(op, KL_OP_COUNT);
  f->node = kl_graph_add_node(f->g, op, name, n_in, ins, 1, &out, &f->e);
  assert_true(f->node >= 0);
  f->n_in = n_in;
  memset(f->data, 0, sizeof f->data);
}

static void attr_int(fixture *f, const char *name, int64_t v) {
  assert_int_equal(kl_node_set_int(f->g, f->node, name, v, &f->e), KILN_OK);
}
static void attr_float(fixture *f, const char *name, float v) {
  assert_int_equal(kl_node_set_float(f->g, f->node, name, v, &f->e), KILN_OK);
}
static void attr_string(fixture *f, const char *name, const char *v) {
  assert_int_equal(kl_node_set_string(f->g, f->node, name, v, &f->e), KILN_OK);
}

static kiln_status infer(fixture *f) {
  const kl_type *tp[MAX_IO];
  for (int i = 0; i < f->n_in; i++) tp[i] = &f->in[i];
  memset(&f->out, 0, sizeof f->out);
  f->out.rank = -1;
  kl_err_clear(&f->e);
  const kl_node *n = &f->g->nodes[f->node];
  kl_infer_ctx ctx = {f->g, n, f->n_in, 1, tp, f->data, &f->out, &f->e};
  return (kiln_status)kl_op_get(n->op)->infer(&ctx);
}

static void expect_ok(fixture *f, kl_type want) {
  kiln_status st = infer(f);
  if (st != KILN_OK) fail_msg("infer failed: %s", f->e.msg);
  char a[256], b[256];
  kl_type_format(f->g, &f->out, a, sizeof a);
  kl_type_format(f->g, &want, b, sizeof b);
  bool same = f->out.dtype == want.dtype && f->out.rank == want.rank;
  for (int i = 0; same && i < want.rank; i++)
    same = f->out.dims[i].size == want.dims[i].size &&
           (want.dims[i].size >= 0 || f->out.dims[i].sym == want.dims[i].sym);
  if (!same) fail_msg("output is %s, expected %s", a, b);
}

static void expect_fail(fixture *f, kiln_status code, const char *part) {
  kiln_status st = infer(f);
  if (st != code) fail_msg("status %d, expected %d (message: %s)", st, code, f->e.msg);
  if (!strstr(f->e.msg, part)) fail_msg("message \"%s\" lacks \"%s\"", f->e.msg, part);
}

/* ---- kernels: infer on concrete inputs, allocate the output, run ---- */

typedef struct input {
  kl_dtype dt;
  int rank;
  int64_t dims[4];
  const void *data;
} input;

/* Runs the node on inputs in[0..n_in-1]; *y gets the output (data owned by caller). */
static kiln_status run_kernel(fixture *f, const input *in, kl_tensor *y) {
  memset(y, 0, sizeof *y);
  kl_tensor t[MAX_IO];
  const kl_tensor *tp[MAX_IO];
  for (int i = 0; i < f->n_in; i++) {
    f->in[i] = make_type(in[i].dt, in[i].rank, in[i].dims);
    f->data[i] = in[i].data;
    t[i] = (kl_tensor){in[i].dt, in[i].rank, {0}, (void *)in[i].data};
    memcpy(t[i].dims, in[i].dims, sizeof in[i].dims);
    tp[i] = &t[i];
  }
  kiln_status st = infer(f);
  if (st != KILN_OK) return st;
  assert_true(kl_type_is_concrete(&f->out));
  y->dtype = f->out.dtype;
  y->rank = f->out.rank;
  for (int i = 0; i < y->rank; i++) y->dims[i] = f->out.dims[i].size;
  y->data = calloc(kl_tensor_nbytes(y) + 1, 1);
  assert_non_null(y->data);
  kl_tensor *outs[1] = {y};
  kl_kernel_ctx kc = {&f->g->nodes[f->node], f->n_in, 1, tp, outs, &f->e, 1, NULL};
  return (kiln_status)kl_op_get(kc.node->op)->ref(&kc);
}

/* y's values, as doubles, must be want[0..n-1] within rtol (NaN matches NaN). */
static void expect_values(const kl_tensor *y, const double *want, int n, double rtol) {
  assert_int_equal(kl_tensor_numel(y), n);
  for (int i = 0; i < n; i++) {
    double got = kl_load_f64(y->data, y->dtype, (size_t)i);
    bool ok = isnan(want[i])   ? isnan(got)
              : isinf(want[i]) ? got == want[i]
                               : fabs(got - want[i]) <= 1e-12 + rtol * fabs(want[i]);
    if (!ok) fail_msg("element %d is %.17g, expected %.17g", i, got, want[i]);
  }
}

#define NV(...) ((int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)))
#define EXPECT(y, rtol, ...) expect_values(y, (const double[]){__VA_ARGS__}, NV(__VA_ARGS__), rtol)

/* Runs a one-input op on a 1-D float32 vector and checks the result. */
static void check_unary_f32(fixture *f, const float *x, int n, const double *want, double rtol) {
  input in = {KL_F32, 1, {n}, x};
  kl_tensor y;
  kiln_status st = run_kernel(f, &in, &y);
  if (st != KILN_OK) fail_msg("run failed: %s", f->e.msg);
  expect_values(&y, want, n, rtol);
  free(y.data);
}

/* ---- inference ---- */

static void test_infer_unary(void **state) {
  fixture *f = *state;
  node(f, "Abs", 1);
  f->in[0] = TY(KL_I8, B, 3);
  expect_ok(f, TY(KL_I8, B, 3));
  node(f, "Neg", 1);
  f->in[0] = TY(KL_U8, 3);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (X) is uint8; Neg takes");
  node(f, "Sqrt", 1);
  f->in[0] = TY(KL_I32, 3);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "Sqrt takes float32");
  node(f, "IsNaN", 1);
  f->in[0] = TY(KL_F16, B, U);
  expect_ok(f, TY(KL_BOOL, B, U));
  node(f, "Not", 1);
  f->in[0] = TY(KL_F32, 2);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "Not takes bool");
  node(f, "BitwiseNot", 1);
  f->in[0] = TYU(KL_U64);
  expect_ok(f, TYU(KL_U64));
  f->in[0] = TY(KL_F32, 2);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "BitwiseNot takes");
}

static void test_infer_compare_and_logic(void **state) {
  fixture *f = *state;
  node(f, "LessOrEqual", 2);
  f->in[0] = TY(KL_U16, B, 1, 4);
  f->in[1] = TY(KL_U16, 3, 1);
  expect_ok(f, TY(KL_BOOL, B, 3, 4));
  f->in[1] = TY(KL_I16, 3, 1);
  expect_fail(f, KILN_ERR_DTYPE, "input 1 is int16, expected uint16");
  f->in[0] = TY(KL_BOOL, 2);
  f->in[1] = TY(KL_BOOL, 2);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "LessOrEqual takes");
  node(f, "Equal", 2);
  f->in[0] = TY(KL_BOOL, 2);
  f->in[1] = TYU(KL_UNDEFINED);
  expect_ok(f, TYU(KL_BOOL));
  f->in[1] = TY(KL_BOOL, 3);
  expect_fail(f, KILN_ERR_SHAPE, "do not broadcast");
  node(f, "Xor", 2);
  f->in[0] = TY(KL_BOOL, 1, 5);
  f->in[1] = TY(KL_BOOL, 4, 1);
  expect_ok(f, TY(KL_BOOL, 4, 5));
  f->in[1] = TY(KL_I32, 4, 1);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "Xor takes bool");
}

static void test_infer_bitwise_mod_pow(void **state) {
  fixture *f = *state;
  node(f, "BitShift", 2);
  f->in[0] = TY(KL_U32, 3);
  f->in[1] = TY0(KL_U32);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "'direction'");
  attr_string(f, "direction", "UP");
  expect_fail(f, KILN_ERR_INVALID_MODEL, "direction is \"UP\"");
  attr_string(f, "direction", "RIGHT");
  expect_ok(f, TY(KL_U32, 3));
  f->in[0] = TY(KL_I32, 3);
  f->in[1] = TY0(KL_I32);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "BitShift takes uint8");
  node(f, "BitwiseAnd", 2);
  f->in[0] = TY(KL_I16, 3);
  f->in[1] = TY(KL_I16, 2, 1);
  expect_ok(f, TY(KL_I16, 2, 3));
  node(f, "Mod", 2);
  f->in[0] = TY(KL_F32, 3);
  f->in[1] = TY(KL_F32, 3);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "requires fmod=1 for float types");
  attr_int(f, "fmod", 1);
  expect_ok(f, TY(KL_F32, 3));
  attr_int(f, "fmod", 2);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "fmod is 2");
  node(f, "Pow", 2);
  f->in[0] = TY(KL_F16, B, 2);
  f->in[1] = TY(KL_U8, 2);
  expect_ok(f, TY(KL_F16, B, 2)); /* the base's dtype, whatever the exponent's */
  f->in[0] = TY(KL_I8, 2);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (X) is int8; Pow takes");
  f->in[0] = TY(KL_I64, 2);
  f->in[1] = TY(KL_BOOL, 2);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "input 1 (Y) is bool");
}

static void test_infer_variadic(void **state) {
  fixture *f = *state;
  node(f, "Sum", 3);
  f->in[0] = TY(KL_F32, B, 1, 4);
  f->in[1] = TY(KL_F32, 3, 1);
  f->in[2] = TY0(KL_F32);
  expect_ok(f, TY(KL_F32, B, 3, 4));
  f->in[2] = TY(KL_F32, 5);
  expect_fail(f, KILN_ERR_SHAPE, "input 2 float32[5] does not broadcast with the inputs "
                                  "before it (together float32[batch,3,4]): 5 vs 4");
  f->in[2] = TYU(KL_F32);
  expect_ok(f, TYU(KL_F32));
  f->in[0] = TYU(KL_UNDEFINED);
  f->in[2] = TY(KL_F64, 4);
  expect_fail(f, KILN_ERR_DTYPE, "input 2 is float64, expected float32 like input 1");
  f->in[0] = TY(KL_I32, 4);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (data_0) is int32; Sum takes");
  node(f, "Max", 1);
  f->in[0] = TY(KL_U64, B);
  expect_ok(f, TY(KL_U64, B));
}

static void test_infer_where(void **state) {
  fixture *f = *state;
  node(f, "Where", 3);
  f->in[0] = TY(KL_BOOL, B, 1, 1);
  f->in[1] = TY(KL_I64, 3, 1);
  f->in[2] = TY(KL_I64, 4);
  expect_ok(f, TY(KL_I64, B, 3, 4));
  f->in[2] = TY(KL_I32, 4);
  expect_fail(f, KILN_ERR_DTYPE, "input 2 is int32, expected int64");
  f->in[0] = TY(KL_U8, 1);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (condition) is uint8");
  f->in[0] = TY(KL_BOOL, 2, 3, 1);
  f->in[1] = TYU(KL_UNDEFINED); /* unknown rank: what the others say still counts */
  f->in[2] = TY(KL_F16, 4, 5);
  expect_fail(f, KILN_ERR_SHAPE, "input 2 float16[4,5] does not broadcast");
}

static void test_infer_cast(void **state) {
  fixture *f = *state;
  node(f, "Cast", 1);
  f->in[0] = TY(KL_F32, B, 2);
  expect_fail(f, KILN_ERR_INVALID_MODEL, "attribute 'to'");
  attr_int(f, "to", KL_F16);
  expect_ok(f, TY(KL_F16, B, 2));
  attr_int(f, "to", KL_STRING);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "casting to string");
  attr_int(f, "to", 17); /* float8e4m3fn */
  expect_fail(f, KILN_ERR_UNSUPPORTED, "to=17 is a dtype kiln does not store");
  attr_string(f, "to", "FLOAT"); /* the opset-1 form */
  expect_fail(f, KILN_ERR_INVALID_MODEL, "attribute 'to' (an int");
  node(f, "CastLike", 2);
  f->in[0] = TY(KL_BOOL, 3);
  f->in[1] = TY0(KL_BF16);
  expect_ok(f, TY(KL_BF16, 3));
  f->in[0] = TY(KL_STRING, 3);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (input) is string");
}

static void test_infer_activations(void **state) {
  fixture *f = *state;
  node(f, "Gelu", 1);
  f->in[0] = TY(KL_BF16, B, 8);
  expect_ok(f, TY(KL_BF16, B, 8));
  attr_string(f, "approximate", "erf");
  expect_fail(f, KILN_ERR_INVALID_MODEL, "approximate is \"erf\"");
  node(f, "LeakyRelu", 1);
  f->in[0] = TY(KL_I32, 2);
  expect_fail(f, KILN_ERR_UNSUPPORTED, "LeakyRelu takes float32");
  node(f, "Shrink", 1);
  f->in[0] = TY(KL_I8, 2);
  expect_ok(f, TY(KL_I8, 2));
  node(f, "PRelu", 2);
  f->in[0] = TY(KL_F32, B, 3, 4, 5);
  f->in[1] = TY(KL_F32, 3, 1, 1);
  expect_ok(f, TY(KL_F32, B, 3, 4, 5));
  f->in[1] = TY(KL_F32, 3, 1);
  expect_fail(f, KILN_ERR_SHAPE, "input 1 (slope) float32[3,1] does not broadcast");
  f->in[1] = TY(KL_F32, 1, 1, 1, 1, 5); /* more dims than X */
  expect_fail(f, KILN_ERR_SHAPE, "does not broadcast");
  node(f, "Hardmax", 1);
  f->in[0] = TY(KL_F32, 2, B);
  attr_int(f, "axis", -2);
  expect_ok(f, TY(KL_F32, 2, B));
  attr_int(f, "axis", 2);
  expect_fail(f, KILN_ERR_SHAPE, "axis 2 is out of range for rank 2");
}

/* ---- kernels ---- */

static void test_round_and_sign(void **state) {
  fixture *f = *state;
  static const float x[] = {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 2.6f, -1.4f};
  node(f, "Round", 1);
  check_unary_f32(f, x, 7, (const double[]){0, 2, 2, -0.0, -2, 3, -1}, 0);
  static const float s[] = {-3.5f, 0.0f, 7.25f, NAN};
  node(f, "Sign", 1);
  check_unary_f32(f, s, 4, (const double[]){-1, 0, 1, NAN}, 0);
}

static void test_int_unary_wraps(void **state) {
  fixture *f = *state;
  static const int8_t x[] = {-128, -5, 0, 127};
  kl_tensor y;
  node(f, "Neg", 1);
  assert_int_equal(run_kernel(f, &(input){KL_I8, 1, {4}, x}, &y), KILN_OK);
  EXPECT(&y, 0, -128, 5, 0, -127); /* -(-128) wraps to -128 in int8, as in NumPy */
  free(y.data);
  node(f, "Abs", 1);
  assert_int_equal(run_kernel(f, &(input){KL_I8, 1, {4}, x}, &y), KILN_OK);
  EXPECT(&y, 0, -128, 5, 0, 127);
  free(y.data);
  static const uint64_t u[] = {0, 1, UINT64_MAX};
  node(f, "BitwiseNot", 1);
  assert_int_equal(run_kernel(f, &(input){KL_U64, 1, {3}, u}, &y), KILN_OK);
  const uint64_t *yu = y.data;
  assert_true(yu[0] == UINT64_MAX && yu[1] == UINT64_MAX - 1 && yu[2] == 0);
  free(y.data);
}

static void test_is_inf_flags(void **state) {
  fixture *f = *state;
  static const double x[] = {INFINITY, -INFINITY, 1.0, NAN};
  kl_tensor y;
  node(f, "IsInf", 1);
  attr_int(f, "detect_positive", 0);
  assert_int_equal(run_kernel(f, &(input){KL_F64, 1, {4}, x}, &y), KILN_OK);
  assert_int_equal(y.dtype, KL_BOOL);
  EXPECT(&y, 0, 0, 1, 0, 0);
  free(y.data);
  node(f, "IsNaN", 1);
  assert_int_equal(run_kernel(f, &(input){KL_F64, 1, {4}, x}, &y), KILN_OK);
  EXPECT(&y, 0, 0, 0, 0, 1);
  free(y.data);
}

/* Floored (fmod=0, sign of the divisor) vs truncated (fmod=1, sign of the dividend). */
static void test_mod(void **state) {
  fixture *f = *state;
  static const int8_t a[] = {7, -7, 7, -7, 5, -128}, b[] = {3, 3, -3, -3, -5, -1};
  input in[2] = {{KL_I8, 1, {6}, a}, {KL_I8, 1, {6}, b}};
  kl_tensor y;
  node(f, "Mod", 2);
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  EXPECT(&y, 0, 1, 2, -2, -1, 0, 0);
  free(y.data);
  attr_int(f, "fmod", 1);
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  EXPECT(&y, 0, 1, -1, 1, -1, 0, 0);
  free(y.data);
  static const int8_t zero[] = {0};
  in[1] = (input){KL_I8, 1, {1}, zero};
  assert_int_equal(run_kernel(f, in, &y), KILN_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(f->e.msg, "modulo by zero"));
  free(y.data);
  static const uint64_t ua[] = {UINT64_MAX, 17}, ub[] = {10, 5};
  node(f, "Mod", 2);
  in[0] = (input){KL_U64, 1, {2}, ua};
  in[1] = (input){KL_U64, 1, {2}, ub};
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  assert_true(((uint64_t *)y.data)[0] == 5 && ((uint64_t *)y.data)[1] == 2);
  free(y.data);
}

static void test_pow(void **state) {
  fixture *f = *state;
  static const int64_t base[] = {3, -2, 5, 0}, e[] = {4, 3, 0, 2};
  input in[2] = {{KL_I64, 1, {4}, base}, {KL_I64, 1, {4}, e}};
  kl_tensor y;
  node(f, "Pow", 2);
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  EXPECT(&y, 0, 81, -8, 1, 0);
  free(y.data);
  static const int64_t neg[] = {-1};
  in[1] = (input){KL_I64, 0, {0}, neg}; /* 0 to a negative power has no value */
  assert_int_equal(run_kernel(f, in, &y), KILN_ERR_INVALID_ARGUMENT);
  free(y.data);
  static const float fb[] = {2.0f, 9.0f};
  static const float half[] = {0.5f};
  in[0] = (input){KL_F32, 1, {2}, fb};
  in[1] = (input){KL_F32, 1, {1}, half};
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  EXPECT(&y, 1e-7, 1.4142135623730951, 3.0);
  free(y.data);
}

/* uint64 values of 2^63 and up order as unsigned numbers. */
static void test_compare_uint64(void **state) {
  fixture *f = *state;
  static const uint64_t a[] = {(1ull << 63) + 5, 3, UINT64_MAX}, b[] = {3, (1ull << 63) + 5, 0};
  input in[2] = {{KL_U64, 1, {3}, a}, {KL_U64, 1, {3}, b}};
  kl_tensor y;
  node(f, "Less", 2);
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  EXPECT(&y, 0, 0, 1, 0);
  free(y.data);
  node(f, "Max", 2);
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  const uint64_t *m = y.data;
  assert_true(m[0] == (1ull << 63) + 5 && m[1] == (1ull << 63) + 5 && m[2] == UINT64_MAX);
  free(y.data);
}

static void test_compare_nan_and_broadcast(void **state) {
  fixture *f = *state;
  static const float a[] = {NAN, 1, 2}, b[] = {1, NAN, 2};
  input in[2] = {{KL_F32, 1, {3}, a}, {KL_F32, 1, {3}, b}};
  kl_tensor y;
  node(f, "GreaterOrEqual", 2);
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  EXPECT(&y, 0, 0, 0, 1);
  free(y.data);
  static const int32_t c[] = {1, 4}, d[] = {0, 1, 4};
  in[0] = (input){KL_I32, 2, {2, 1}, c};
  in[1] = (input){KL_I32, 1, {3}, d};
  node(f, "Equal", 2);
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  assert_int_equal(y.rank, 2);
  EXPECT(&y, 0, 0, 1, 0, 0, 0, 1);
  free(y.data);
}

static void test_bitshift(void **state) {
  fixture *f = *state;
  static const uint8_t x[] = {255, 1, 3, 128}, by[] = {1, 7, 2, 8};
  input in[2] = {{KL_U8, 1, {4}, x}, {KL_U8, 1, {4}, by}};
  kl_tensor y;
  node(f, "BitShift", 2);
  attr_string(f, "direction", "LEFT");
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  EXPECT(&y, 0, 254, 128, 12, 0); /* bits shifted out of the byte are lost */
  free(y.data);
  attr_string(f, "direction", "RIGHT");
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  EXPECT(&y, 0, 127, 0, 0, 0);
  free(y.data);
}

static void test_variadic(void **state) {
  fixture *f = *state;
  static const float a[] = {1.5f, -2.0f}, b[] = {0.25f, 4.0f, -1.0f}, c[] = {10.0f};
  input in[3] = {{KL_F32, 2, {2, 1}, a}, {KL_F32, 1, {3}, b}, {KL_F32, 0, {0}, c}};
  kl_tensor y;
  node(f, "Sum", 3);
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  assert_true(y.rank == 2 && y.dims[0] == 2 && y.dims[1] == 3);
  EXPECT(&y, 1e-7, 11.75, 15.5, 10.5, 8.25, 12.0, 7.0);
  free(y.data);
  node(f, "Mean", 3);
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  EXPECT(&y, 1e-6, 11.75 / 3, 15.5 / 3, 10.5 / 3, 8.25 / 3, 4.0, 7.0 / 3);
  free(y.data);
  static const float n1[] = {NAN, 1, 2}, n2[] = {1, NAN, 0};
  in[0] = (input){KL_F32, 1, {3}, n1};
  in[1] = (input){KL_F32, 1, {3}, n2};
  node(f, "Min", 2);
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  EXPECT(&y, 0, NAN, NAN, 0); /* NaN wins, as in NumPy's minimum */
  free(y.data);
}

static void test_where(void **state) {
  fixture *f = *state;
  static const bool cond[] = {true, false};
  static const int16_t x[] = {7, 8, 9}, yv[] = {-1};
  input in[3] = {{KL_BOOL, 2, {2, 1}, cond}, {KL_I16, 1, {3}, x}, {KL_I16, 0, {0}, yv}};
  kl_tensor y;
  node(f, "Where", 3);
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  assert_int_equal(y.dtype, KL_I16);
  EXPECT(&y, 0, 7, 8, 9, -1, -1, -1);
  free(y.data);
}

/* Float to integer truncates toward zero and wraps like NumPy; anything to bool is
 * "not zero", NaN included. */
static void test_cast(void **state) {
  fixture *f = *state;
  static const float x[] = {3.7f, -3.7f, 300.0f, -1.5f, 0.0f, NAN};
  kl_tensor y;
  node(f, "Cast", 1);
  attr_int(f, "to", KL_I8);
  input in = {KL_F32, 1, {5}, x};
  assert_int_equal(run_kernel(f, &in, &y), KILN_OK);
  EXPECT(&y, 0, 3, -3, 44, -1, 0);
  free(y.data);
  attr_int(f, "to", KL_U8);
  assert_int_equal(run_kernel(f, &in, &y), KILN_OK);
  EXPECT(&y, 0, 3, 253, 44, 255, 0);
  free(y.data);
  attr_int(f, "to", KL_BOOL);
  in.dims[0] = 6;
  assert_int_equal(run_kernel(f, &in, &y), KILN_OK);
  EXPECT(&y, 0, 1, 1, 1, 1, 0, 1);
  free(y.data);
  static const uint64_t big[] = {UINT64_MAX, 1ull << 63};
  attr_int(f, "to", KL_F64);
  assert_int_equal(run_kernel(f, &(input){KL_U64, 1, {2}, big}, &y), KILN_OK);
  EXPECT(&y, 0, 18446744073709551616.0, 9223372036854775808.0);
  free(y.data);
  static const float f16in[] = {1.0f / 3.0f, 65504.0f, 70000.0f};
  attr_int(f, "to", KL_F16);
  assert_int_equal(run_kernel(f, &(input){KL_F32, 1, {3}, f16in}, &y), KILN_OK);
  EXPECT(&y, 0, 0.333251953125, 65504.0, INFINITY);
  free(y.data);
}

static void test_activations(void **state) {
  fixture *f = *state;
  static const float x[] = {-3.1f, -0.7f, 0.0f, 0.4f, 1.3f, 12.0f, -40.0f};
  /* NumPy in float64 on the float32 inputs above */
  node(f, "Gelu", 1);
  check_unary_f32(f, x, 7, (const double[]){-0.00299956996097695, -0.1693745565561511, 0.0,
                                            0.2621686966441297, 1.1741593700387067, 12.0,
                                            -0.0}, 1e-5);
  attr_string(f, "approximate", "tanh");
  check_unary_f32(f, x, 7, (const double[]){-0.0026266102305497474, -0.16942986529488321, 0.0,
                                            0.2621611694273562, 1.1739290123173094, 12.0,
                                            -0.0}, 1e-5);
  node(f, "Selu", 1);
  check_unary_f32(f, x, 7, (const double[]){-1.6788983730616416, -0.8850530483437982, 0.0,
                                            0.42028040885925294, 1.3659113287925722,
                                            12.608412265777588, -1.7580993463430303}, 1e-5);
  node(f, "Mish", 1);
  check_unary_f32(f, x, 7, (const double[]){-0.1365099612829229, -0.267870234795501, 0.0,
                                            0.2890305340723632, 1.185976571527536,
                                            11.999999999093978, -1.6993417021166355e-16},
                  1e-5);
  node(f, "HardSwish", 1);
  check_unary_f32(f, x, 7, (const double[]){-0.0, -0.2683333333333333, 0.0,
                                            0.22666666666666668, 0.9316666666666668, 12.0,
                                            -0.0}, 1e-5);
  static const float big[] = {-1000.0f, 1000.0f, 0.0f};
  node(f, "Softplus", 1); /* no overflow of exp(x) on the way */
  check_unary_f32(f, big, 3, (const double[]){0.0, 1000.0, 0.6931471805599453}, 1e-6);
  node(f, "Shrink", 1);
  attr_float(f, "lambd", 1.5f);
  attr_float(f, "bias", 0.5f);
  check_unary_f32(f, x, 7, (const double[]){-2.6, 0, 0, 0, 0, 11.5, -39.5}, 1e-6);
}

static void test_prelu_and_hardmax(void **state) {
  fixture *f = *state;
  static const float x[] = {-1, 2, -3, 4, -5, 6}, slope[] = {0.5f, -2.0f};
  input in[2] = {{KL_F32, 2, {2, 3}, x}, {KL_F32, 2, {2, 1}, slope}};
  kl_tensor y;
  node(f, "PRelu", 2);
  assert_int_equal(run_kernel(f, in, &y), KILN_OK);
  EXPECT(&y, 0, -0.5, 2, -1.5, 4, 10, 6);
  free(y.data);
  static const float h[] = {1, 3, 3, 2, -1, 0.5f}; /* ties go to the first maximum */
  node(f, "Hardmax", 1);
  assert_int_equal(run_kernel(f, &(input){KL_F32, 2, {2, 3}, h}, &y), KILN_OK);
  EXPECT(&y, 0, 0, 1, 0, 1, 0, 0);
  free(y.data);
  attr_int(f, "axis", 0);
  assert_int_equal(run_kernel(f, &(input){KL_F32, 2, {2, 3}, h}, &y), KILN_OK);
  EXPECT(&y, 0, 0, 1, 1, 1, 0, 0);
  free(y.data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_infer_unary, setup, teardown),
      cmocka_unit_test_setup_teardown(test_infer_compare_and_logic, setup, teardown),
      cmocka_unit_test_setup_teardown(test_infer_bitwise_mod_pow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_infer_variadic, setup, teardown),
      cmocka_unit_test_setup_teardown(test_infer_where, setup, teardown),
      cmocka_unit_test_setup_teardown(test_infer_cast, setup, teardown),
      cmocka_unit_test_setup_teardown(test_infer_activations, setup, teardown),
      cmocka_unit_test_setup_teardown(test_round_and_sign, setup, teardown),
      cmocka_unit_test_setup_teardown(test_int_unary_wraps, setup, teardown),
      cmocka_unit_test_setup_teardown(test_is_inf_flags, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mod, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_compare_uint64, setup, teardown),
      cmocka_unit_test_setup_teardown(test_compare_nan_and_broadcast, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bitshift, setup, teardown),
      cmocka_unit_test_setup_teardown(test_variadic, setup, teardown),
      cmocka_unit_test_setup_teardown(test_where, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cast, setup, teardown),
      cmocka_unit_test_setup_teardown(test_activations, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prelu_and_hardmax, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
