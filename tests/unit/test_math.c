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
#include <math.h>
#include <stdint.h>

#include "testutil.h"

/* Runs a one-input op on a 1-D float32 vector and checks the result. */
static void check_unary_f32(tu_fixture *f, const float *x, int n, const double *want,
                            double rtol) {
  tu_in in = {KL_F32, 1, {n}, x};
  tu_assert_status(tu_run_on(f, &in), KILN_OK, f->e.msg, NULL);
  tu_expect_values(f, 0, TU_TOL(1e-12, rtol), want, n);
}

/* ---- inference ---- */

static void test_infer_unary(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Abs", 1, 1);
  tu_input(f, 0, TY(KL_I8, B, 3));
  tu_expect_ok(f, TY(KL_I8, B, 3));
  tu_one_node(f, "Neg", 1, 1);
  tu_input(f, 0, TY(KL_U8, 3));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (X) is uint8; Neg takes");
  tu_one_node(f, "Sqrt", 1, 1);
  tu_input(f, 0, TY(KL_I32, 3));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "Sqrt takes float32");
  tu_one_node(f, "IsNaN", 1, 1);
  tu_input(f, 0, TY(KL_F16, B, U));
  tu_expect_ok(f, TY(KL_BOOL, B, U));
  tu_one_node(f, "Not", 1, 1);
  tu_input(f, 0, TY(KL_F32, 2));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "Not takes bool");
  tu_one_node(f, "BitwiseNot", 1, 1);
  tu_input(f, 0, TYU(KL_U64));
  tu_expect_ok(f, TYU(KL_U64));
  tu_input(f, 0, TY(KL_F32, 2));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "BitwiseNot takes");
}

static void test_infer_compare_and_logic(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "LessOrEqual", 2, 1);
  tu_input(f, 0, TY(KL_U16, B, 1, 4));
  tu_input(f, 1, TY(KL_U16, 3, 1));
  tu_expect_ok(f, TY(KL_BOOL, B, 3, 4));
  tu_input(f, 1, TY(KL_I16, 3, 1));
  tu_expect_fail(f, KILN_ERR_DTYPE, "input 1 is int16, expected uint16");
  tu_input(f, 0, TY(KL_BOOL, 2));
  tu_input(f, 1, TY(KL_BOOL, 2));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "LessOrEqual takes");
  tu_one_node(f, "Equal", 2, 1);
  tu_input(f, 0, TY(KL_BOOL, 2));
  tu_input(f, 1, TYU(KL_UNDEFINED));
  tu_expect_ok(f, TYU(KL_BOOL));
  tu_input(f, 1, TY(KL_BOOL, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "do not broadcast");
  tu_one_node(f, "Xor", 2, 1);
  tu_input(f, 0, TY(KL_BOOL, 1, 5));
  tu_input(f, 1, TY(KL_BOOL, 4, 1));
  tu_expect_ok(f, TY(KL_BOOL, 4, 5));
  tu_input(f, 1, TY(KL_I32, 4, 1));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "Xor takes bool");
}

static void test_infer_bitwise_mod_pow(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "BitShift", 2, 1);
  tu_input(f, 0, TY(KL_U32, 3));
  tu_input(f, 1, TY0(KL_U32));
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "'direction'");
  tu_attr_string(f, "direction", "UP");
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "direction is \"UP\"");
  tu_attr_string(f, "direction", "RIGHT");
  tu_expect_ok(f, TY(KL_U32, 3));
  tu_input(f, 0, TY(KL_I32, 3));
  tu_input(f, 1, TY0(KL_I32));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "BitShift takes uint8");
  tu_one_node(f, "BitwiseAnd", 2, 1);
  tu_input(f, 0, TY(KL_I16, 3));
  tu_input(f, 1, TY(KL_I16, 2, 1));
  tu_expect_ok(f, TY(KL_I16, 2, 3));
  tu_one_node(f, "Mod", 2, 1);
  tu_input(f, 0, TY(KL_F32, 3));
  tu_input(f, 1, TY(KL_F32, 3));
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "requires fmod=1 for float types");
  tu_attr_int(f, "fmod", 1);
  tu_expect_ok(f, TY(KL_F32, 3));
  tu_attr_int(f, "fmod", 2);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "fmod is 2");
  tu_one_node(f, "Pow", 2, 1);
  tu_input(f, 0, TY(KL_F16, B, 2));
  tu_input(f, 1, TY(KL_U8, 2));
  tu_expect_ok(f, TY(KL_F16, B, 2)); /* the base's dtype, whatever the exponent's */
  tu_input(f, 0, TY(KL_I8, 2));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (X) is int8; Pow takes");
  tu_input(f, 0, TY(KL_I64, 2));
  tu_input(f, 1, TY(KL_BOOL, 2));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "input 1 (Y) is bool");
}

static void test_infer_variadic(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Sum", 3, 1);
  tu_input(f, 0, TY(KL_F32, B, 1, 4));
  tu_input(f, 1, TY(KL_F32, 3, 1));
  tu_input(f, 2, TY0(KL_F32));
  tu_expect_ok(f, TY(KL_F32, B, 3, 4));
  tu_input(f, 2, TY(KL_F32, 5));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 2 float32[5] does not broadcast with the inputs "
                                    "before it (together float32[batch,3,4]): 5 vs 4");
  tu_input(f, 2, TYU(KL_F32));
  tu_expect_ok(f, TYU(KL_F32));
  tu_input(f, 0, TYU(KL_UNDEFINED));
  tu_input(f, 2, TY(KL_F64, 4));
  tu_expect_fail(f, KILN_ERR_DTYPE, "input 2 is float64, expected float32 like input 1");
  tu_input(f, 0, TY(KL_I32, 4));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (data_0) is int32; Sum takes");
  tu_one_node(f, "Max", 1, 1);
  tu_input(f, 0, TY(KL_U64, B));
  tu_expect_ok(f, TY(KL_U64, B));
}

static void test_infer_where(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Where", 3, 1);
  tu_input(f, 0, TY(KL_BOOL, B, 1, 1));
  tu_input(f, 1, TY(KL_I64, 3, 1));
  tu_input(f, 2, TY(KL_I64, 4));
  tu_expect_ok(f, TY(KL_I64, B, 3, 4));
  tu_input(f, 2, TY(KL_I32, 4));
  tu_expect_fail(f, KILN_ERR_DTYPE, "input 2 is int32, expected int64");
  tu_input(f, 0, TY(KL_U8, 1));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (condition) is uint8");
  tu_input(f, 0, TY(KL_BOOL, 2, 3, 1));
  tu_input(f, 1, TYU(KL_UNDEFINED)); /* unknown rank: what the others say still counts */
  tu_input(f, 2, TY(KL_F16, 4, 5));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 2 float16[4,5] does not broadcast");
}

static void test_infer_cast(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Cast", 1, 1);
  tu_input(f, 0, TY(KL_F32, B, 2));
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "attribute 'to'");
  tu_attr_int(f, "to", KL_F16);
  tu_expect_ok(f, TY(KL_F16, B, 2));
  tu_attr_int(f, "to", KL_STRING);
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "casting to string");
  tu_attr_int(f, "to", 14); /* complex64 */
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "to=14 is a dtype kiln does not store");
  tu_attr_string(f, "to", "FLOAT"); /* the opset-1 form */
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "attribute 'to' (an int");
  tu_one_node(f, "CastLike", 2, 1);
  tu_input(f, 0, TY(KL_BOOL, 3));
  tu_input(f, 1, TY0(KL_BF16));
  tu_expect_ok(f, TY(KL_BF16, 3));
  tu_input(f, 0, TY(KL_STRING, 3));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (input) is string");
}

static void test_infer_activations(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Gelu", 1, 1);
  tu_input(f, 0, TY(KL_BF16, B, 8));
  tu_expect_ok(f, TY(KL_BF16, B, 8));
  tu_attr_string(f, "approximate", "erf");
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "approximate is \"erf\"");
  tu_one_node(f, "LeakyRelu", 1, 1);
  tu_input(f, 0, TY(KL_I32, 2));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "LeakyRelu takes float32");
  tu_one_node(f, "Shrink", 1, 1);
  tu_input(f, 0, TY(KL_I8, 2));
  tu_expect_ok(f, TY(KL_I8, 2));
  tu_one_node(f, "PRelu", 2, 1);
  tu_input(f, 0, TY(KL_F32, B, 3, 4, 5));
  tu_input(f, 1, TY(KL_F32, 3, 1, 1));
  tu_expect_ok(f, TY(KL_F32, B, 3, 4, 5));
  tu_input(f, 1, TY(KL_F32, 3, 1));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (slope) float32[3,1] does not broadcast");
  tu_input(f, 1, TY(KL_F32, 1, 1, 1, 1, 5)); /* more dims than X */
  tu_expect_fail(f, KILN_ERR_SHAPE, "does not broadcast");
  tu_one_node(f, "Hardmax", 1, 1);
  tu_input(f, 0, TY(KL_F32, 2, B));
  tu_attr_int(f, "axis", -2);
  tu_expect_ok(f, TY(KL_F32, 2, B));
  tu_attr_int(f, "axis", 2);
  tu_expect_fail(f, KILN_ERR_SHAPE, "axis 2 is out of range for rank 2");
}

/* ---- kernels ---- */

static void test_round_and_sign(void **state) {
  tu_fixture *f = *state;
  static const float x[] = {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 2.6f, -1.4f};
  tu_one_node(f, "Round", 1, 1);
  check_unary_f32(f, x, 7, (const double[]){0, 2, 2, -0.0, -2, 3, -1}, 0);
  static const float s[] = {-3.5f, 0.0f, 7.25f, NAN};
  tu_one_node(f, "Sign", 1, 1);
  check_unary_f32(f, s, 4, (const double[]){-1, 0, 1, NAN}, 0);
}

static void test_int_unary_wraps(void **state) {
  tu_fixture *f = *state;
  static const int8_t x[] = {-128, -5, 0, 127};
  tu_one_node(f, "Neg", 1, 1);
  assert_int_equal(tu_run_on(f, &(tu_in){KL_I8, 1, {4}, x}), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, -128, 5, 0, -127); /* -(-128) wraps to -128 in int8, as in NumPy */
  tu_one_node(f, "Abs", 1, 1);
  assert_int_equal(tu_run_on(f, &(tu_in){KL_I8, 1, {4}, x}), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, -128, 5, 0, 127);
  static const uint64_t u[] = {0, 1, UINT64_MAX};
  tu_one_node(f, "BitwiseNot", 1, 1);
  assert_int_equal(tu_run_on(f, &(tu_in){KL_U64, 1, {3}, u}), KILN_OK);
  const uint64_t *yu = f->tout[0].data;
  assert_true(yu[0] == UINT64_MAX && yu[1] == UINT64_MAX - 1 && yu[2] == 0);
}

static void test_is_inf_flags(void **state) {
  tu_fixture *f = *state;
  static const double x[] = {INFINITY, -INFINITY, 1.0, NAN};
  tu_one_node(f, "IsInf", 1, 1);
  tu_attr_int(f, "detect_positive", 0);
  assert_int_equal(tu_run_on(f, &(tu_in){KL_F64, 1, {4}, x}), KILN_OK);
  assert_int_equal(f->tout[0].dtype, KL_BOOL);
  TU_EXPECT(f, 0, TU_EXACT, 0, 1, 0, 0);
  tu_one_node(f, "IsNaN", 1, 1);
  assert_int_equal(tu_run_on(f, &(tu_in){KL_F64, 1, {4}, x}), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 0, 0, 0, 1);
}

/* Floored (fmod=0, sign of the divisor) vs truncated (fmod=1, sign of the dividend). */
static void test_mod(void **state) {
  tu_fixture *f = *state;
  static const int8_t a[] = {7, -7, 7, -7, 5, -128}, b[] = {3, 3, -3, -3, -5, -1};
  tu_in in[2] = {{KL_I8, 1, {6}, a}, {KL_I8, 1, {6}, b}};
  tu_one_node(f, "Mod", 2, 1);
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 1, 2, -2, -1, 0, 0);
  tu_attr_int(f, "fmod", 1);
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 1, -1, 1, -1, 0, 0);
  static const int8_t zero[] = {0};
  in[1] = (tu_in){KL_I8, 1, {1}, zero};
  tu_assert_status(tu_run_on(f, in), KILN_ERR_INVALID_ARGUMENT, f->e.msg, "modulo by zero");
  static const uint64_t ua[] = {UINT64_MAX, 17}, ub[] = {10, 5};
  tu_one_node(f, "Mod", 2, 1);
  in[0] = (tu_in){KL_U64, 1, {2}, ua};
  in[1] = (tu_in){KL_U64, 1, {2}, ub};
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  assert_true(((uint64_t *)f->tout[0].data)[0] == 5 && ((uint64_t *)f->tout[0].data)[1] == 2);
}

static void test_pow(void **state) {
  tu_fixture *f = *state;
  static const int64_t base[] = {3, -2, 5, 0}, e[] = {4, 3, 0, 2};
  tu_in in[2] = {{KL_I64, 1, {4}, base}, {KL_I64, 1, {4}, e}};
  tu_one_node(f, "Pow", 2, 1);
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 81, -8, 1, 0);
  static const int64_t neg[] = {-1};
  in[1] = (tu_in){KL_I64, 0, {0}, neg}; /* 0 to a negative power has no value */
  assert_int_equal(tu_run_on(f, in), KILN_ERR_INVALID_ARGUMENT);
  static const float fb[] = {2.0f, 9.0f};
  static const float half[] = {0.5f};
  in[0] = (tu_in){KL_F32, 1, {2}, fb};
  in[1] = (tu_in){KL_F32, 1, {1}, half};
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  TU_EXPECT(f, 0, TU_TOL(1e-12, 1e-7), 1.4142135623730951, 3.0);
}

/* uint64 values of 2^63 and up order as unsigned numbers. */
static void test_compare_uint64(void **state) {
  tu_fixture *f = *state;
  static const uint64_t a[] = {(1ull << 63) + 5, 3, UINT64_MAX}, b[] = {3, (1ull << 63) + 5, 0};
  tu_in in[2] = {{KL_U64, 1, {3}, a}, {KL_U64, 1, {3}, b}};
  tu_one_node(f, "Less", 2, 1);
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 0, 1, 0);
  tu_one_node(f, "Max", 2, 1);
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  const uint64_t *m = f->tout[0].data;
  assert_true(m[0] == (1ull << 63) + 5 && m[1] == (1ull << 63) + 5 && m[2] == UINT64_MAX);
}

static void test_compare_nan_and_broadcast(void **state) {
  tu_fixture *f = *state;
  static const float a[] = {NAN, 1, 2}, b[] = {1, NAN, 2};
  tu_in in[2] = {{KL_F32, 1, {3}, a}, {KL_F32, 1, {3}, b}};
  tu_one_node(f, "GreaterOrEqual", 2, 1);
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 0, 0, 1);
  static const int32_t c[] = {1, 4}, d[] = {0, 1, 4};
  in[0] = (tu_in){KL_I32, 2, {2, 1}, c};
  in[1] = (tu_in){KL_I32, 1, {3}, d};
  tu_one_node(f, "Equal", 2, 1);
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  assert_int_equal(f->tout[0].rank, 2);
  TU_EXPECT(f, 0, TU_EXACT, 0, 1, 0, 0, 0, 1);
}

static void test_bitshift(void **state) {
  tu_fixture *f = *state;
  static const uint8_t x[] = {255, 1, 3, 128}, by[] = {1, 7, 2, 8};
  tu_in in[2] = {{KL_U8, 1, {4}, x}, {KL_U8, 1, {4}, by}};
  tu_one_node(f, "BitShift", 2, 1);
  tu_attr_string(f, "direction", "LEFT");
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 254, 128, 12, 0); /* bits shifted out of the byte are lost */
  tu_attr_string(f, "direction", "RIGHT");
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 127, 0, 0, 0);
}

static void test_variadic(void **state) {
  tu_fixture *f = *state;
  static const float a[] = {1.5f, -2.0f}, b[] = {0.25f, 4.0f, -1.0f}, c[] = {10.0f};
  tu_in in[3] = {{KL_F32, 2, {2, 1}, a}, {KL_F32, 1, {3}, b}, {KL_F32, 0, {0}, c}};
  tu_one_node(f, "Sum", 3, 1);
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  assert_true(f->tout[0].rank == 2 && f->tout[0].dims[0] == 2 && f->tout[0].dims[1] == 3);
  TU_EXPECT(f, 0, TU_TOL(1e-12, 1e-7), 11.75, 15.5, 10.5, 8.25, 12.0, 7.0);
  tu_one_node(f, "Mean", 3, 1);
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  TU_EXPECT(f, 0, TU_TOL(1e-12, 1e-6), 11.75 / 3, 15.5 / 3, 10.5 / 3, 8.25 / 3, 4.0, 7.0 / 3);
  static const float n1[] = {NAN, 1, 2}, n2[] = {1, NAN, 0};
  in[0] = (tu_in){KL_F32, 1, {3}, n1};
  in[1] = (tu_in){KL_F32, 1, {3}, n2};
  tu_one_node(f, "Min", 2, 1);
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, NAN, NAN, 0); /* NaN wins, as in NumPy's minimum */
}

static void test_where(void **state) {
  tu_fixture *f = *state;
  static const bool cond[] = {true, false};
  static const int16_t x[] = {7, 8, 9}, yv[] = {-1};
  tu_in in[3] = {{KL_BOOL, 2, {2, 1}, cond}, {KL_I16, 1, {3}, x}, {KL_I16, 0, {0}, yv}};
  tu_one_node(f, "Where", 3, 1);
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  assert_int_equal(f->tout[0].dtype, KL_I16);
  TU_EXPECT(f, 0, TU_EXACT, 7, 8, 9, -1, -1, -1);
}

/* Float to integer truncates toward zero and wraps like NumPy; anything to bool is
 * "not zero", NaN included. */
static void test_cast(void **state) {
  tu_fixture *f = *state;
  static const float x[] = {3.7f, -3.7f, 300.0f, -1.5f, 0.0f, NAN};
  tu_one_node(f, "Cast", 1, 1);
  tu_attr_int(f, "to", KL_I8);
  tu_in in = {KL_F32, 1, {5}, x};
  assert_int_equal(tu_run_on(f, &in), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 3, -3, 44, -1, 0);
  tu_attr_int(f, "to", KL_U8);
  assert_int_equal(tu_run_on(f, &in), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 3, 253, 44, 255, 0);
  tu_attr_int(f, "to", KL_BOOL);
  in.dims[0] = 6;
  assert_int_equal(tu_run_on(f, &in), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 1, 1, 1, 1, 0, 1);
  static const uint64_t big[] = {UINT64_MAX, 1ull << 63};
  tu_attr_int(f, "to", KL_F64);
  assert_int_equal(tu_run_on(f, &(tu_in){KL_U64, 1, {2}, big}), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 18446744073709551616.0, 9223372036854775808.0);
  static const float f16in[] = {1.0f / 3.0f, 65504.0f, 70000.0f};
  tu_attr_int(f, "to", KL_F16);
  assert_int_equal(tu_run_on(f, &(tu_in){KL_F32, 1, {3}, f16in}), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 0.333251953125, 65504.0, INFINITY);
}

static void test_activations(void **state) {
  tu_fixture *f = *state;
  static const float x[] = {-3.1f, -0.7f, 0.0f, 0.4f, 1.3f, 12.0f, -40.0f};
  /* NumPy in float64 on the float32 inputs above */
  tu_one_node(f, "Gelu", 1, 1);
  check_unary_f32(f, x, 7, (const double[]){-0.00299956996097695, -0.1693745565561511, 0.0,
                                            0.2621686966441297, 1.1741593700387067, 12.0,
                                            -0.0}, 1e-5);
  tu_attr_string(f, "approximate", "tanh");
  check_unary_f32(f, x, 7, (const double[]){-0.0026266102305497474, -0.16942986529488321, 0.0,
                                            0.2621611694273562, 1.1739290123173094, 12.0,
                                            -0.0}, 1e-5);
  tu_one_node(f, "Selu", 1, 1);
  check_unary_f32(f, x, 7, (const double[]){-1.6788983730616416, -0.8850530483437982, 0.0,
                                            0.42028040885925294, 1.3659113287925722,
                                            12.608412265777588, -1.7580993463430303}, 1e-5);
  tu_one_node(f, "Mish", 1, 1);
  check_unary_f32(f, x, 7, (const double[]){-0.1365099612829229, -0.267870234795501, 0.0,
                                            0.2890305340723632, 1.185976571527536,
                                            11.999999999093978, -1.6993417021166355e-16},
                  1e-5);
  tu_one_node(f, "HardSwish", 1, 1);
  check_unary_f32(f, x, 7, (const double[]){-0.0, -0.2683333333333333, 0.0,
                                            0.22666666666666668, 0.9316666666666668, 12.0,
                                            -0.0}, 1e-5);
  static const float big[] = {-1000.0f, 1000.0f, 0.0f};
  tu_one_node(f, "Softplus", 1, 1); /* no overflow of exp(x) on the way */
  check_unary_f32(f, big, 3, (const double[]){0.0, 1000.0, 0.6931471805599453}, 1e-6);
  tu_one_node(f, "Shrink", 1, 1);
  tu_attr_float(f, "lambd", 1.5f);
  tu_attr_float(f, "bias", 0.5f);
  check_unary_f32(f, x, 7, (const double[]){-2.6, 0, 0, 0, 0, 11.5, -39.5}, 1e-6);
}

static void test_prelu_and_hardmax(void **state) {
  tu_fixture *f = *state;
  static const float x[] = {-1, 2, -3, 4, -5, 6}, slope[] = {0.5f, -2.0f};
  tu_in in[2] = {{KL_F32, 2, {2, 3}, x}, {KL_F32, 2, {2, 1}, slope}};
  tu_one_node(f, "PRelu", 2, 1);
  assert_int_equal(tu_run_on(f, in), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, -0.5, 2, -1.5, 4, 10, 6);
  static const float h[] = {1, 3, 3, 2, -1, 0.5f}; /* ties go to the first maximum */
  tu_one_node(f, "Hardmax", 1, 1);
  assert_int_equal(tu_run_on(f, &(tu_in){KL_F32, 2, {2, 3}, h}), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 0, 1, 0, 1, 0, 0);
  tu_attr_int(f, "axis", 0);
  assert_int_equal(tu_run_on(f, &(tu_in){KL_F32, 2, {2, 3}, h}), KILN_OK);
  TU_EXPECT(f, 0, TU_EXACT, 0, 1, 1, 1, 0, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_infer_unary),
      TU_TEST(test_infer_compare_and_logic),
      TU_TEST(test_infer_bitwise_mod_pow),
      TU_TEST(test_infer_variadic),
      TU_TEST(test_infer_where),
      TU_TEST(test_infer_cast),
      TU_TEST(test_infer_activations),
      TU_TEST(test_round_and_sign),
      TU_TEST(test_int_unary_wraps),
      TU_TEST(test_is_inf_flags),
      TU_TEST(test_mod),
      TU_TEST(test_pow),
      TU_TEST(test_compare_uint64),
      TU_TEST(test_compare_nan_and_broadcast),
      TU_TEST(test_bitshift),
      TU_TEST(test_variadic),
      TU_TEST(test_where),
      TU_TEST(test_cast),
      TU_TEST(test_activations),
      TU_TEST(test_prelu_and_hardmax),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
