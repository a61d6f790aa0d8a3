/* Shape and dtype inference, op by op: broadcasting edge cases, negative axes,
 * symbolic and unknown dims (load time), and the errors that bad models and inputs get.
 *
 * Each test builds one node in a fresh graph, gives its infer function input types
 * (and contents for shape inputs) directly, and checks the output types or the status
 * and message. Dims are written as numbers: >= 0 known, U unknown, B and S the
 * symbols "batch" and "seq".
 */
#include "testutil.h"

/* ---- elementwise ---- */

static void test_broadcast(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Add", 2, 1);
  tu_input(f, 0, TY(KL_F32, 2, 1, 4));
  tu_input(f, 1, TY(KL_F32, 3, 1));
  tu_expect_ok(f, TY(KL_F32, 2, 3, 4));
  tu_input(f, 0, TY0(KL_F32));
  tu_input(f, 1, TY(KL_F32, 5));
  tu_expect_ok(f, TY(KL_F32, 5));
  tu_input(f, 0, TY(KL_F32, 0));
  tu_input(f, 1, TY(KL_F32, 1));
  tu_expect_ok(f, TY(KL_F32, 0)); /* 1 yields even to 0 */
  tu_input(f, 1, TY(KL_F32, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "do not broadcast");
  tu_input(f, 0, TY(KL_F32, 2, 3));
  tu_input(f, 1, TY(KL_F32, 4, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "2 vs 4 in output dim 0");
}

static void test_broadcast_symbolic(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Mul", 2, 1);
  tu_input(f, 0, TY(KL_F32, B, 1));
  tu_input(f, 1, TY(KL_F32, 1, S));
  tu_expect_ok(f, TY(KL_F32, B, S));
  tu_input(f, 0, TY(KL_F32, B));
  tu_input(f, 1, TY(KL_F32, 4)); /* batch must be 1 or 4: the result is 4 */
  tu_expect_ok(f, TY(KL_F32, 4));
  tu_input(f, 1, TY(KL_F32, B));
  tu_expect_ok(f, TY(KL_F32, B));
  tu_input(f, 1, TY(KL_F32, S)); /* batch or seq, whichever is not 1 */
  tu_expect_ok(f, TY(KL_F32, U));
  tu_input(f, 1, TY(KL_F32, U));
  tu_expect_ok(f, TY(KL_F32, U));
  tu_input(f, 1, TYU(KL_F32));
  tu_expect_ok(f, TYU(KL_F32));
  tu_input(f, 0, TYU(KL_UNDEFINED));
  tu_input(f, 1, TY(KL_I64, 3));
  tu_expect_ok(f, TYU(KL_I64)); /* the dtype comes from whichever input knows it */
}

static void test_binary_dtypes(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Div", 2, 1);
  tu_input(f, 0, TY(KL_F32, 3));
  tu_input(f, 1, TY(KL_F16, 3));
  tu_expect_fail(f, KILN_ERR_DTYPE, "float16");
  tu_input(f, 0, TY(KL_U64, 3)); /* Div divides signed: uint64 is refused */
  tu_input(f, 1, TY(KL_U64, 3));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "uint64");
  tu_input(f, 0, TY(KL_BF16, 3));
  tu_input(f, 1, TY(KL_BF16, 1));
  tu_expect_ok(f, TY(KL_BF16, 3));
}

static void test_unary(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Sigmoid", 1, 1);
  tu_input(f, 0, TY(KL_F16, B, 3));
  tu_expect_ok(f, TY(KL_F16, B, 3));
  tu_input(f, 0, TY(KL_I32, 3));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "Sigmoid takes float32, float16, float64, bfloat16");
  tu_one_node(f, "Identity", 1, 1);
  tu_input(f, 0, TY(KL_BOOL, U, 2));
  tu_expect_ok(f, TY(KL_BOOL, U, 2));
  tu_one_node(f, "Relu", 1, 1);
  tu_absent(f, 0);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "input 0 is required");
}

static void test_clip(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Clip", 3, 1);
  tu_input(f, 0, TY(KL_F32, 2, 3));
  tu_absent(f, 1);
  tu_input(f, 2, TY0(KL_F32));
  tu_expect_ok(f, TY(KL_F32, 2, 3));
  tu_input(f, 2, TY(KL_F32, 2));
  tu_expect_fail(f, KILN_ERR_SHAPE, "expected a scalar");
  tu_input(f, 2, TY0(KL_F64));
  tu_expect_fail(f, KILN_ERR_DTYPE, "input 2 is float64, expected float32");
}

static void test_dropout(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Dropout", 3, 2);
  tu_input(f, 0, TY(KL_F32, B, 7));
  tu_input(f, 1, TY0(KL_F32));
  tu_input(f, 2, TY0(KL_BOOL));
  tu_expect_ok(f, TY(KL_F32, B, 7));
  tu_expect_type(f, 1, TY(KL_BOOL, B, 7));
  bool yes = true;
  tu_contents(f, 2, &yes); /* training, ratio unknown: decided when it is known */
  tu_expect_ok(f, TY(KL_F32, B, 7));
  float ratio = 0.5f;
  tu_contents(f, 1, &ratio);
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "training-mode Dropout");
  tu_absent(f, 1); /* the default ratio, 0.5 */
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "training-mode Dropout");
  ratio = 0;
  tu_input(f, 1, TY0(KL_F32));
  tu_expect_ok(f, TY(KL_F32, B, 7));
}

/* ---- convolution and pooling ---- */

static void test_conv(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Conv", 3, 1);
  tu_input(f, 0, TY(KL_F32, B, 3, 7, 6));
  tu_input(f, 1, TY(KL_F32, 4, 3, 3, 2));
  tu_input(f, 2, TY(KL_F32, 4));
  TU_ATTR_INTS(f, "pads", 1, 0, 1, 1);
  TU_ATTR_INTS(f, "strides", 2, 1);
  tu_expect_ok(f, TY(KL_F32, B, 4, 4, 6));
  tu_input(f, 0, TY(KL_F32, 1, 3, S, 6)); /* symbolic spatial dims stay unknown */
  tu_expect_ok(f, TY(KL_F32, 1, 4, U, 6));
  tu_input(f, 0, TYU(KL_F32));
  tu_expect_ok(f, TY(KL_F32, U, 4, U, U));
  tu_input(f, 2, TY(KL_F32, 5));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 2 (B) has 5 values, expected 4");
}

static void test_conv_auto_pad_and_groups(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Conv", 2, 1);
  tu_input(f, 0, TY(KL_F16, 2, 4, 7, 8));
  tu_input(f, 1, TY(KL_F16, 6, 2, 4, 3));
  tu_attr_int(f, "group", 2);
  TU_ATTR_INTS(f, "strides", 2, 3);
  tu_attr_string(f, "auto_pad", "SAME_LOWER");
  tu_expect_ok(f, TY(KL_F16, 2, 6, 4, 3));
  tu_attr_string(f, "auto_pad", "VALID");
  tu_expect_ok(f, TY(KL_F16, 2, 6, 2, 2));
  tu_attr_string(f, "auto_pad", "SAME");
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "auto_pad is \"SAME\"");
  tu_attr_string(f, "auto_pad", "NOTSET");
  tu_attr_int(f, "group", 3);
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (W) has 2 input channels per group");
  tu_attr_int(f, "group", 0);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "group is 0");
}

static void test_conv_errors(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Conv", 2, 1);
  tu_input(f, 0, TY(KL_F32, 1, 2, 5, 5));
  tu_input(f, 1, TY(KL_F32, 3, 2, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (W) has rank 3, expected 4");
  tu_input(f, 1, TY(KL_F32, 3, 2, 7, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "window of 7 does not fit the padded input of 5");
  tu_input(f, 1, TY(KL_F32, 3, 2, 3, 0));
  tu_expect_fail(f, KILN_ERR_SHAPE, "empty kernel (spatial dim 1 is 0)");
  tu_input(f, 1, TY(KL_F32, 3, 2, 3, 3));
  TU_ATTR_INTS(f, "kernel_shape", 3, 2);
  tu_expect_fail(f, KILN_ERR_SHAPE, "kernel_shape[1] is 2 but the weights have 3");
  TU_ATTR_INTS(f, "kernel_shape", 3, 3);
  TU_ATTR_INTS(f, "pads", 1, 1);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "pads has 2 values, expected 4");
  TU_ATTR_INTS(f, "pads", 1, 1, 1, 1);
  TU_ATTR_INTS(f, "strides", 1, 0);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "strides[1] is 0");
  TU_ATTR_INTS(f, "strides", 1, 1);
  tu_input(f, 1, TY(KL_I32, 3, 2, 3, 3));
  tu_expect_fail(f, KILN_ERR_DTYPE, "input 1 is int32");
  tu_input(f, 0, TY(KL_F32, 1, 2, 3, 3, 3, 3));
  tu_input(f, 1, TY(KL_F32, 3, 2, 1, 1, 1, 1));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (X) has 4 spatial dims; kiln supports 1 to 3");
  tu_input(f, 0, TY(KL_F32, 1, 2));
  tu_input(f, 1, TY(KL_F32, 3, 2, 1));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 0 (X) has rank 2, expected 3 to 5");
}

static void test_pool(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "MaxPool", 1, 2);
  tu_input(f, 0, TY(KL_F32, B, 3, 7, 8));
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "kernel_shape is required");
  TU_ATTR_INTS(f, "kernel_shape", 2, 2);
  TU_ATTR_INTS(f, "strides", 2, 3);
  tu_expect_ok(f, TY(KL_F32, B, 3, 3, 3));
  tu_expect_type(f, 1, TY(KL_I64, B, 3, 3, 3));
  tu_attr_int(f, "ceil_mode", 1);
  tu_expect_ok(f, TY(KL_F32, B, 3, 4, 3));
  TU_ATTR_INTS(f, "kernel_shape", 2);
  tu_expect_fail(f, KILN_ERR_SHAPE, "kernel_shape has 1 values but input 0 (X) has 2");
  tu_attr_int(f, "storage_order", 2);
  TU_ATTR_INTS(f, "kernel_shape", 2, 2);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "storage_order is 2");
}

/* ceil_mode drops a last window that would start in the end padding. */
static void test_pool_ceil_drops_last_window(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "AveragePool", 1, 1);
  tu_input(f, 0, TY(KL_F32, 1, 1, 3));
  TU_ATTR_INTS(f, "kernel_shape", 1);
  TU_ATTR_INTS(f, "strides", 2);
  TU_ATTR_INTS(f, "pads", 0, 1);
  tu_expect_ok(f, TY(KL_F32, 1, 1, 2));
  tu_attr_int(f, "ceil_mode", 1); /* ceil(3 / 2) + 1 = 3, but the 3rd starts at 4 >= 3 */
  tu_expect_ok(f, TY(KL_F32, 1, 1, 2));
  TU_ATTR_INTS(f, "kernel_shape", 2);
  TU_ATTR_INTS(f, "pads", 0, 0); /* ceil(1 / 2) + 1 = 2, the 2nd starts at 2 < 3: kept */
  tu_expect_ok(f, TY(KL_F32, 1, 1, 2));
  tu_attr_int(f, "ceil_mode", 0);
  tu_expect_ok(f, TY(KL_F32, 1, 1, 1));
  tu_input(f, 0, TYU(KL_F32)); /* rank from kernel_shape */
  tu_expect_ok(f, TY(KL_F32, U, U, U));
  tu_input(f, 0, TY(KL_I8, 1, 1, 3));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "AveragePool takes");
}

static void test_global_pool(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "GlobalAveragePool", 1, 1);
  tu_input(f, 0, TY(KL_F32, B, 3, S, 5, 2));
  tu_expect_ok(f, TY(KL_F32, B, 3, 1, 1, 1));
  tu_input(f, 0, TY(KL_F32, 2, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "rank 2, expected 3 to 8");
}

static void test_batchnorm(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "BatchNormalization", 5, 1);
  tu_input(f, 0, TY(KL_F32, B, 3, 4, 4));
  for (int i = 1; i < 5; i++) tu_input(f, i, TY(KL_F32, 3));
  tu_expect_ok(f, TY(KL_F32, B, 3, 4, 4));
  tu_input(f, 0, TY(KL_F32, 6)); /* 1-D: one channel */
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (scale) has 3 values, expected 1");
  for (int i = 1; i < 5; i++) tu_input(f, i, TY(KL_F16, 1));
  tu_expect_ok(f, TY(KL_F32, 6));
  tu_input(f, 4, TY(KL_F32, 1, 1));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 4 (input_var) has rank 2, expected 1");
  tu_input(f, 4, TY(KL_F32, 1));
  tu_attr_int(f, "training_mode", 1); /* the batch's statistics: Y as X */
  tu_expect_ok(f, TY(KL_F32, 6));
  tu_attr_int(f, "training_mode", 2);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "training_mode=2: expected 0 or 1");
  /* training_mode=1's running statistics, each of the mean's and var's type */
  tu_one_node(f, "BatchNormalization", 5, 3);
  tu_input(f, 0, TY(KL_F32, B, 3, 4, 4));
  for (int i = 1; i < 5; i++) tu_input(f, i, TY(KL_F32, 3));
  tu_attr_int(f, "training_mode", 1);
  tu_expect_ok(f, TY(KL_F32, B, 3, 4, 4));
  assert_int_equal(f->out[1].rank, 1);
  assert_int_equal(f->out[1].dims[0].size, 3);
  assert_int_equal(f->out[2].dims[0].size, 3);
  tu_attr_int(f, "training_mode", 0);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "3 outputs, expected at most 1 with training_mode=0");
}

/* ---- matrix products and softmax ---- */

static void test_gemm(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Gemm", 3, 1);
  tu_input(f, 0, TY(KL_F32, B, 5));
  tu_input(f, 1, TY(KL_F32, 5, 4));
  tu_input(f, 2, TY(KL_F32, 4));
  tu_expect_ok(f, TY(KL_F32, B, 4));
  tu_attr_int(f, "transA", 1);
  tu_attr_int(f, "transB", 1);
  tu_input(f, 0, TY(KL_F32, 5, 3));
  tu_input(f, 1, TY(KL_F32, 4, 5));
  tu_input(f, 2, TY(KL_F32, 3, 1));
  tu_expect_ok(f, TY(KL_F32, 3, 4));
  tu_input(f, 1, TY(KL_F32, 4, 7));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (B) has 7 columns, expected 5 to match input 0 "
                                    "(A)'s rows");
  tu_input(f, 1, TY(KL_F32, 4, 5));
  tu_input(f, 2, TY(KL_F32, 2, 4));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 2 (C) float32[2,4] does not broadcast to");
  tu_input(f, 2, TY(KL_F32, 1, 3, 4));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 2 (C) has rank 3");
  tu_absent(f, 2);
  tu_input(f, 0, TY(KL_F32, 5));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 0 (A) has rank 1, expected 2");
}

static void test_matmul(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "MatMul", 2, 1);
  tu_input(f, 0, TY(KL_F32, B, S, 4));
  tu_input(f, 1, TY(KL_F32, 4, 6));
  tu_expect_ok(f, TY(KL_F32, B, S, 6));
  tu_input(f, 0, TY(KL_F32, 4)); /* 1-D A: a row whose 1 is dropped */
  tu_input(f, 1, TY(KL_F32, 2, 3, 4, 5));
  tu_expect_ok(f, TY(KL_F32, 2, 3, 5));
  tu_input(f, 0, TY(KL_F32, 2, 1, 3, 4));
  tu_input(f, 1, TY(KL_F32, 4)); /* 1-D B: a column */
  tu_expect_ok(f, TY(KL_F32, 2, 1, 3));
  tu_input(f, 0, TY(KL_F32, 6));
  tu_input(f, 1, TY(KL_F32, 6));
  tu_expect_ok(f, TY0(KL_F32));
  tu_input(f, 0, TY(KL_F32, 2, 1, 3, 4));
  tu_input(f, 1, TY(KL_F32, 5, 4, 2));
  tu_expect_ok(f, TY(KL_F32, 2, 5, 3, 2));
  tu_input(f, 1, TY(KL_F32, 3, 3, 4, 2));
  tu_expect_fail(f, KILN_ERR_SHAPE, "do not broadcast");
  tu_input(f, 1, TY(KL_F32, 5, 2));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (B) has 5 rows, expected 4");
  tu_input(f, 1, TY0(KL_F32));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (B) has rank 0");
  tu_input(f, 1, TYU(KL_F32));
  tu_expect_ok(f, TYU(KL_F32));
}

static void test_softmax(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "LogSoftmax", 1, 1);
  tu_input(f, 0, TY(KL_F64, B, 3, 4));
  tu_expect_ok(f, TY(KL_F64, B, 3, 4));
  tu_attr_int(f, "axis", -3);
  tu_expect_ok(f, TY(KL_F64, B, 3, 4));
  tu_attr_int(f, "axis", 3);
  tu_expect_fail(f, KILN_ERR_SHAPE, "axis 3 is out of range for rank 3 (expected -3 to 2)");
  tu_attr_int(f, "axis", -4);
  tu_expect_fail(f, KILN_ERR_SHAPE, "axis -4");
}

/* ---- shape ops ---- */

static void test_flatten(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Flatten", 1, 1);
  tu_input(f, 0, TY(KL_I8, B, 3, 4));
  tu_expect_ok(f, TY(KL_I8, B, 12));
  tu_attr_int(f, "axis", 0);
  tu_expect_ok(f, TY(KL_I8, 1, U));
  tu_attr_int(f, "axis", 3);
  tu_expect_ok(f, TY(KL_I8, U, 1));
  tu_attr_int(f, "axis", -2);
  tu_expect_ok(f, TY(KL_I8, B, 12));
  tu_input(f, 0, TY(KL_I8, 2, 3, 4));
  tu_attr_int(f, "axis", 3);
  tu_expect_ok(f, TY(KL_I8, 24, 1));
  tu_attr_int(f, "axis", -4);
  tu_expect_fail(f, KILN_ERR_SHAPE, "axis -4 is out of range for rank 3 (expected -3 to 3)");
}

static void test_reshape(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Reshape", 2, 1);
  tu_input(f, 0, TY(KL_F32, B, 3, 4));
  tu_input(f, 1, TY(KL_I64, 2));
  const int64_t zero_minus1[] = {0, -1};
  tu_contents(f, 1, zero_minus1);
  tu_expect_ok(f, TY(KL_F32, B, 12)); /* the batch symbol cancels */
  tu_input(f, 0, TY(KL_F32, B, S, 8));
  tu_input(f, 1, TY(KL_I64, 4));
  const int64_t heads[] = {0, 0, 2, -1};
  tu_contents(f, 1, heads);
  tu_expect_ok(f, TY(KL_F32, B, S, 2, 4));
  tu_input(f, 1, TY(KL_I64, 2));
  const int64_t merge[] = {-1, 8};
  tu_contents(f, 1, merge); /* batch * seq has no single symbol */
  tu_expect_ok(f, TY(KL_F32, U, 8));
  const int32_t merge32[] = {-1, 8};
  tu_input(f, 1, TY(KL_I32, 2));
  tu_contents(f, 1, merge32);
  tu_expect_ok(f, TY(KL_F32, U, 8));
  tu_contents(f, 1, NULL); /* contents unknown: only the rank */
  tu_expect_ok(f, TY(KL_F32, U, U));
  tu_input(f, 1, TY(KL_I64, U));
  tu_expect_ok(f, TYU(KL_F32));
}

static void test_reshape_errors(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Reshape", 2, 1);
  tu_input(f, 0, TY(KL_F32, 2, 3, 4));
  tu_input(f, 1, TY(KL_I64, 2));
  const int64_t bad_div[] = {5, -1}, two_minus1[] = {-1, -1}, bad_count[] = {7, 3};
  const int64_t too_neg[] = {-2, 12}, copy_beyond[] = {24, 0, 0, 0}, zero_minus1[] = {0, -1};
  tu_contents(f, 1, bad_div);
  tu_expect_fail(f, KILN_ERR_SHAPE, "cannot reshape 24 elements into a shape of 5");
  tu_contents(f, 1, two_minus1);
  tu_expect_fail(f, KILN_ERR_SHAPE, "at most one dim can be inferred");
  tu_contents(f, 1, bad_count);
  tu_expect_fail(f, KILN_ERR_SHAPE, "cannot reshape 24 elements into a shape of 21");
  tu_contents(f, 1, too_neg);
  tu_expect_fail(f, KILN_ERR_SHAPE, "values must be at least -1");
  tu_input(f, 1, TY(KL_I64, 4));
  tu_contents(f, 1, copy_beyond);
  tu_expect_fail(f, KILN_ERR_SHAPE, "has 0 at index 3, but input 0 has only 3 dims");
  tu_attr_int(f, "allowzero", 1);
  tu_input(f, 1, TY(KL_I64, 2));
  tu_contents(f, 1, zero_minus1);
  tu_expect_fail(f, KILN_ERR_SHAPE, "both 0 and -1");
  tu_input(f, 1, TY(KL_F32, 2));
  tu_expect_fail(f, KILN_ERR_DTYPE, "input 1 (shape) is float32, expected an integer tensor");
  tu_input(f, 1, TY(KL_I64, 9));
  tu_contents(f, 1, NULL);
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "rank 9");
}

static void test_reshape_allowzero(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Reshape", 2, 1);
  tu_attr_int(f, "allowzero", 1);
  tu_input(f, 0, TY(KL_F32, 3, 0));
  tu_input(f, 1, TY(KL_I64, 3));
  const int64_t shape[] = {0, 3, 5};
  tu_contents(f, 1, shape);
  tu_expect_ok(f, TY(KL_F32, 0, 3, 5));
  const int64_t minus1[] = {0, -1, 2};
  tu_contents(f, 1, minus1);
  tu_attr_int(f, "allowzero", 0); /* copies 3: 3 * ? * 2 = 0 */
  tu_expect_ok(f, TY(KL_F32, 3, 0, 2));
  tu_input(f, 1, TY(KL_I64, 0)); /* an empty shape makes a scalar */
  tu_input(f, 0, TY(KL_F32, 1, 1));
  tu_contents(f, 1, NULL);
  tu_expect_ok(f, TY0(KL_F32));
}

static void test_squeeze(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Squeeze", 2, 1);
  tu_input(f, 0, TY(KL_F32, 1, B, 1, 3));
  tu_input(f, 1, TY(KL_I64, 2));
  const int64_t axes[] = {0, -2}, dup[] = {2, -2}, bad[] = {3}, out_of_range[] = {4};
  tu_contents(f, 1, axes);
  tu_expect_ok(f, TY(KL_F32, B, 3));
  tu_contents(f, 1, dup);
  tu_expect_fail(f, KILN_ERR_SHAPE, "axes name dim 2 twice");
  tu_input(f, 1, TY(KL_I64, 1));
  tu_contents(f, 1, bad);
  tu_expect_fail(f, KILN_ERR_SHAPE, "cannot squeeze dim 3 of size 3");
  tu_contents(f, 1, out_of_range);
  tu_expect_fail(f, KILN_ERR_SHAPE, "axis 4 is out of range for rank 4");
  tu_contents(f, 1, NULL);
  tu_expect_ok(f, TY(KL_F32, U, U, U));
  tu_absent(f, 1); /* no axes: every 1 goes, which needs every dim known */
  tu_expect_ok(f, TYU(KL_F32));
  tu_input(f, 0, TY(KL_F32, 1, 4, 1, 1));
  tu_expect_ok(f, TY(KL_F32, 4));
}

static void test_unsqueeze(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Unsqueeze", 2, 1);
  tu_input(f, 0, TY(KL_F32, B, 3));
  tu_input(f, 1, TY(KL_I64, 3));
  const int64_t axes[] = {-1, 0, 2}, dup[] = {0, -4}, bad[] = {0, 5};
  tu_contents(f, 1, axes);
  tu_expect_ok(f, TY(KL_F32, 1, B, 1, 3, 1));
  tu_input(f, 1, TY(KL_I64, 2));
  tu_contents(f, 1, dup);
  tu_expect_fail(f, KILN_ERR_SHAPE, "axes name dim 0 twice");
  tu_contents(f, 1, bad);
  tu_expect_fail(f, KILN_ERR_SHAPE, "axis 5 is out of range for rank 4");
  tu_contents(f, 1, NULL);
  tu_expect_ok(f, TY(KL_F32, U, U, U, U));
  tu_input(f, 0, TY(KL_F32, 1, 1, 1, 1, 1, 1, 1));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "rank 9");
}

static void test_concat(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Concat", 3, 1);
  tu_input(f, 0, TY(KL_I64, B, 2));
  tu_input(f, 1, TY(KL_I64, U, 3));
  tu_input(f, 2, TY(KL_I64, 4, 1));
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "axis is required");
  tu_attr_int(f, "axis", -1);
  tu_expect_ok(f, TY(KL_I64, 4, 6));
  tu_attr_int(f, "axis", 0);
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 has 3 in dim 1, expected 2");
  tu_input(f, 1, TY(KL_I64, S, 2));
  tu_input(f, 2, TY(KL_I64, 4, 2));
  tu_expect_ok(f, TY(KL_I64, U, 2));
  tu_input(f, 1, TY(KL_I64, 0, 2));
  tu_input(f, 0, TY(KL_I64, 3, 2));
  tu_expect_ok(f, TY(KL_I64, 7, 2));
  tu_input(f, 1, TYU(KL_I64));
  tu_expect_ok(f, TY(KL_I64, U, 2));
  tu_input(f, 1, TY(KL_I64, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 has rank 1, expected 2");
  tu_input(f, 1, TY(KL_I32, 1, 2));
  tu_expect_fail(f, KILN_ERR_DTYPE, "input 1 is int32, expected int64");
  tu_attr_int(f, "axis", 2);
  tu_input(f, 1, TY(KL_I64, 1, 2));
  tu_expect_fail(f, KILN_ERR_SHAPE, "axis 2 is out of range for rank 2");
}

static void test_transpose(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Transpose", 1, 1);
  tu_input(f, 0, TY(KL_BF16, B, 3, S));
  tu_expect_ok(f, TY(KL_BF16, S, 3, B));
  TU_ATTR_INTS(f, "perm", 1, 2, 0);
  tu_expect_ok(f, TY(KL_BF16, 3, S, B));
  tu_input(f, 0, TYU(KL_BF16));
  tu_expect_ok(f, TY(KL_BF16, U, U, U));
  tu_input(f, 0, TY(KL_BF16, 2, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "perm has 3 values but input 0 has rank 2");
  TU_ATTR_INTS(f, "perm", 1, 1);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "perm is not a permutation of 0..1");
  TU_ATTR_INTS(f, "perm", 0, -1);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "entry 1 is -1");
  tu_input(f, 0, TYU(KL_BF16));
  TU_ATTR_INTS(f, "perm", 0, 1, 2, 3, 4, 5, 6, 7, 8);
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "rank 9");
}

static void test_shape(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Shape", 1, 1);
  tu_input(f, 0, TY(KL_U8, B, 3, 4, 5));
  tu_expect_ok(f, TY(KL_I64, 4));
  tu_attr_int(f, "start", -3);
  tu_attr_int(f, "end", -1);
  tu_expect_ok(f, TY(KL_I64, 2));
  tu_attr_int(f, "start", -10); /* clamped to 0 */
  tu_attr_int(f, "end", 100);
  tu_expect_ok(f, TY(KL_I64, 4));
  tu_attr_int(f, "start", 3);
  tu_attr_int(f, "end", 1);
  tu_expect_ok(f, TY(KL_I64, 0));
  tu_input(f, 0, TYU(KL_U8));
  tu_expect_ok(f, TY(KL_I64, U));
}

static void test_gather(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Gather", 2, 1);
  tu_input(f, 0, TY(KL_F16, B, 5, 3));
  tu_input(f, 1, TY(KL_I32, 2, S));
  tu_attr_int(f, "axis", -2);
  tu_expect_ok(f, TY(KL_F16, B, 2, S, 3));
  tu_input(f, 1, TY0(KL_I64));
  tu_expect_ok(f, TY(KL_F16, B, 3));
  const int64_t idx[] = {-5};
  tu_contents(f, 1, idx);
  tu_expect_ok(f, TY(KL_F16, B, 3));
  const int64_t bad[] = {5};
  tu_contents(f, 1, bad);
  tu_expect_fail(f, KILN_ERR_INVALID_ARGUMENT, "input 1 (indices) has 5 at element 0, "
                                               "expected -5 to 4");
  tu_contents(f, 1, NULL);
  tu_attr_int(f, "axis", 3);
  tu_expect_fail(f, KILN_ERR_SHAPE, "axis 3 is out of range for rank 3");
  tu_attr_int(f, "axis", 0);
  tu_input(f, 1, TY(KL_F32, 2));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "input 1 (indices) is float32");
  tu_input(f, 0, TY(KL_F16, 1, 1, 1, 1, 1, 1, 1, 1));
  tu_input(f, 1, TY(KL_I64, 2, 2));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "rank 9");
  tu_input(f, 0, TY0(KL_F16));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 0 (data) has rank 0, expected 1 to 8");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_broadcast),
      TU_TEST(test_broadcast_symbolic),
      TU_TEST(test_binary_dtypes),
      TU_TEST(test_unary),
      TU_TEST(test_clip),
      TU_TEST(test_dropout),
      TU_TEST(test_conv),
      TU_TEST(test_conv_auto_pad_and_groups),
      TU_TEST(test_conv_errors),
      TU_TEST(test_pool),
      TU_TEST(test_pool_ceil_drops_last_window),
      TU_TEST(test_global_pool),
      TU_TEST(test_batchnorm),
      TU_TEST(test_gemm),
      TU_TEST(test_matmul),
      TU_TEST(test_softmax),
      TU_TEST(test_flatten),
      TU_TEST(test_reshape),
      TU_TEST(test_reshape_errors),
      TU_TEST(test_reshape_allowzero),
      TU_TEST(test_squeeze),
      TU_TEST(test_unsqueeze),
      TU_TEST(test_concat),
      TU_TEST(test_transpose),
      TU_TEST(test_shape),
      TU_TEST(test_gather),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
