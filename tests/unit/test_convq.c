/* The "convq" family: ConvTranspose, GlobalMaxPool, LpPool, MaxUnpool, Col2Im, the
 * quantization ops, Attention and RotaryEmbedding.
 *
 * Shape inference is checked on types alone (symbolic and unknown dims, errors);
 * kernels on small inputs whose expected outputs were computed independently
 * (onnx.reference, and onnxruntime for ConvTranspose whose group > 1 the ONNX
 * reference gets wrong) and pasted here as literals, or computed by hand where noted.
 * Dims are written as numbers: >= 0 known, U unknown, B the symbol "batch".
 */
#include <math.h>
#include <stdint.h>

#include "testutil.h"

/* ---- ConvTranspose, pools, Col2Im: shapes ---- */

static void test_convtranspose_shapes(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "ConvTranspose", 2, 1);
  tu_input(f, 0, TY(KL_F32, B, 4, 5, 6));
  tu_input(f, 1, TY(KL_F32, 4, 3, 3, 3));
  tu_attr_int(f, "group", 2);
  TU_ATTR_INTS(f, "strides", 2, 2);
  TU_ATTR_INTS(f, "output_padding", 1, 0);
  /* 2 * (5 - 1) + 1 + 3 = 12, 2 * (6 - 1) + 0 + 3 = 13; 3 channels per group, 2 groups */
  tu_expect_ok(f, TY(KL_F32, B, 6, 12, 13));
  TU_ATTR_INTS(f, "pads", 1, 0, 2, 1);
  tu_expect_ok(f, TY(KL_F32, B, 6, 9, 12));
  tu_attr_string(f, "auto_pad", "SAME_UPPER");
  tu_expect_ok(f, TY(KL_F32, B, 6, 10, 12));

  tu_one_node(f, "ConvTranspose", 3, 1);
  tu_input(f, 0, TY(KL_F16, 1, 2, U, U, U));
  tu_input(f, 1, TY(KL_F16, 2, 1, 2, 2, 2));
  tu_input(f, 2, TY(KL_F16, 1));
  TU_ATTR_INTS(f, "output_shape", 7, 8, 9); /* fixes the output even with unknown input dims */
  tu_expect_ok(f, TY(KL_F16, 1, 1, 7, 8, 9));

  tu_one_node(f, "ConvTranspose", 2, 1);
  tu_input(f, 0, TYU(KL_F32));
  tu_input(f, 1, TY(KL_F32, 3, 2, 4));
  tu_expect_ok(f, TY(KL_F32, U, 2, U));
}

static void test_convtranspose_errors(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "ConvTranspose", 3, 1);
  tu_input(f, 0, TY(KL_F32, 1, 4, 5, 5));
  tu_input(f, 1, TY(KL_F32, 3, 2, 3, 3));
  tu_input(f, 2, TY(KL_F32, 2));
  tu_expect_fail(f, KILN_ERR_SHAPE, "for 3 input channels, but input 0 (X) has 4");
  tu_input(f, 1, TY(KL_F32, 4, 2, 3, 3));
  tu_input(f, 2, TY(KL_F32, 5));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 2 (B) has 5 values, expected 2");
  tu_input(f, 2, TY(KL_F32, 2));
  TU_ATTR_INTS(f, "output_padding", 1, 1);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "output_padding[0] is 1");
  TU_ATTR_INTS(f, "output_padding", 0, 0);
  TU_ATTR_INTS(f, "pads", 4, 0, 3, 0);
  tu_expect_fail(f, KILN_ERR_SHAPE, "leave no output");
  tu_input(f, 0, TY(KL_I32, 1, 4, 5, 5));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "int32");
}

static void test_lppool_shapes(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "LpPool", 1, 1);
  tu_input(f, 0, TY(KL_F32, B, 3, 10));
  TU_ATTR_INTS(f, "kernel_shape", 3);
  TU_ATTR_INTS(f, "dilations", 2);
  tu_attr_int(f, "p", 3);
  tu_expect_ok(f, TY(KL_F32, B, 3, 6));
  tu_attr_int(f, "p", 0);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "p is 0");
  tu_attr_float(f, "p", 2.0f);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "p must be an int");
}

static void test_maxunpool_shapes(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "MaxUnpool", 2, 1);
  tu_input(f, 0, TY(KL_F32, B, 2, 3, 4));
  tu_input(f, 1, TY(KL_I64, B, 2, 3, 4));
  TU_ATTR_INTS(f, "kernel_shape", 2, 2);
  TU_ATTR_INTS(f, "strides", 2, 2);
  TU_ATTR_INTS(f, "pads", 0, 1, 0, 0);
  tu_expect_ok(f, TY(KL_F32, B, 2, 6, 7));
  tu_input(f, 1, TY(KL_I64, B, 2, 4, 4));
  tu_expect_fail(f, KILN_ERR_SHAPE, "must have the shape of input 0");

  tu_one_node(f, "MaxUnpool", 3, 1);
  tu_input(f, 0, TY(KL_F32, 1, 2, 3, 4));
  tu_input(f, 1, TY(KL_I64, 1, 2, 3, 4));
  tu_input(f, 2, TY(KL_I64, 4));
  TU_ATTR_INTS(f, "kernel_shape", 2, 2);
  TU_ATTR_INTS(f, "strides", 2, 2);
  tu_expect_ok(f, TY(KL_F32, U, U, U, U)); /* output_shape not known yet */
  static const int64_t bigger[4] = {1, 2, 7, 9}, smaller[4] = {1, 2, 5, 9};
  tu_contents(f, 2, bigger);
  tu_expect_ok(f, TY(KL_F32, 1, 2, 7, 9));
  tu_contents(f, 2, smaller);
  tu_expect_fail(f, KILN_ERR_SHAPE, "expected at least 6");
}

static void test_col2im_shapes(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Col2Im", 3, 1);
  tu_input(f, 0, TY(KL_F32, B, 12, 6));
  tu_input(f, 1, TY(KL_I64, 2));
  tu_input(f, 2, TY(KL_I64, 2));
  tu_expect_ok(f, TY(KL_F32, B, U, U, U)); /* rank from the length of image_shape */
  static const int64_t image[2] = {3, 4}, block[2] = {2, 2};
  tu_contents(f, 1, image);
  tu_contents(f, 2, block);
  tu_expect_ok(f, TY(KL_F32, B, 3, 3, 4)); /* 12 / (2 * 2) channels, 2 * 3 positions */
  tu_input(f, 0, TY(KL_F32, B, 12, 5));
  tu_expect_fail(f, KILN_ERR_SHAPE, "has 5 columns, expected 6");
  tu_input(f, 0, TY(KL_F32, B, 10, 6));
  tu_expect_fail(f, KILN_ERR_SHAPE, "not a multiple of the block size 4");
}

/* ---- quantization: shapes and dtypes ---- */

static void test_quantize_shapes(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "QuantizeLinear", 3, 1);
  tu_input(f, 0, TY(KL_F32, B, 3, 4));
  tu_input(f, 1, TY(KL_F32, 3));
  tu_input(f, 2, TY(KL_I8, 3));
  tu_attr_int(f, "axis", -2);
  tu_expect_ok(f, TY(KL_I8, B, 3, 4));
  tu_input(f, 1, TY(KL_F32, 4));
  tu_input(f, 2, TY(KL_I8, 4));
  tu_expect_fail(f, KILN_ERR_SHAPE, "has 4 values, expected 3");
  tu_input(f, 2, TY(KL_I8, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "must have the shape of input 1");
  tu_attr_int(f, "output_dtype", KL_U8);
  tu_input(f, 1, TY0(KL_F32));
  tu_input(f, 2, TY0(KL_I8));
  tu_expect_fail(f, KILN_ERR_DTYPE, "output_dtype is uint8 but input 2");

  tu_one_node(f, "QuantizeLinear", 2, 1);
  tu_input(f, 0, TY(KL_F16, 6, 5));
  tu_input(f, 1, TY(KL_F16, 6, 2));
  tu_attr_int(f, "block_size", 3);
  tu_attr_int(f, "output_dtype", KL_I16);
  tu_expect_ok(f, TY(KL_I16, 6, 5)); /* ceil(5 / 3) = 2 blocks along axis 1 */
  tu_input(f, 1, TY(KL_F16, 6, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "has 3 in dim 1, expected 2");
  tu_attr_int(f, "output_dtype", 14); /* complex64 */
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "output_dtype is 14");

  tu_one_node(f, "QuantizeLinear", 2, 1);
  tu_input(f, 0, TY(KL_F32, 7));
  tu_input(f, 1, TY0(KL_F32));
  tu_expect_ok(f, TY(KL_U8, 7)); /* uint8 by default; axis 1 unused per tensor */
}

static void test_dequantize_shapes(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "DequantizeLinear", 3, 1);
  tu_input(f, 0, TY(KL_U16, 2, B));
  tu_input(f, 1, TY(KL_F16, 2));
  tu_input(f, 2, TY(KL_U16, 2));
  tu_attr_int(f, "axis", 0);
  tu_expect_ok(f, TY(KL_F16, 2, B));
  tu_attr_int(f, "output_dtype", KL_F32);
  tu_expect_ok(f, TY(KL_F32, 2, B));
  tu_input(f, 2, TY(KL_I16, 2));
  tu_expect_fail(f, KILN_ERR_DTYPE, "input 2 is int16, expected uint16");

  tu_one_node(f, "DequantizeLinear", 2, 1);
  tu_input(f, 0, TY(KL_I32, 3));
  tu_input(f, 1, TY(KL_F32, 1));
  tu_expect_ok(f, TY(KL_F32, 3));
  tu_input(f, 0, TY(KL_F32, 3));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (x) is float32");

  /* a [1] scale with a scalar zero point (onnxruntime's quantizer writes them): both
   * hold the one value of per-tensor quantization; [2] against a scalar does not */
  tu_one_node(f, "DequantizeLinear", 3, 1);
  tu_input(f, 0, TY(KL_I32, 6));
  tu_input(f, 1, TY(KL_F32, 1));
  tu_input(f, 2, TY0(KL_I32));
  tu_expect_ok(f, TY(KL_F32, 6));
  tu_input(f, 1, TY0(KL_F32));
  tu_input(f, 2, TY(KL_I32, 1));
  tu_expect_ok(f, TY(KL_F32, 6));
  tu_input(f, 1, TY(KL_F32, 2));
  tu_input(f, 2, TY0(KL_I32));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 2 (zero point) int32[] must have the shape of input 1");

  tu_one_node(f, "DynamicQuantizeLinear", 1, 3);
  tu_input(f, 0, TY(KL_F32, B, 5));
  tu_expect_ok(f, TY(KL_U8, B, 5));
  tu_expect_type(f, 1, TY0(KL_F32));
  tu_expect_type(f, 2, TY0(KL_U8));
}

static void test_integer_product_shapes(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "MatMulInteger", 4, 1);
  tu_input(f, 0, TY(KL_U8, B, 4, 3));
  tu_input(f, 1, TY(KL_I8, 3, 5));
  tu_input(f, 2, TY(KL_U8, 4));
  tu_input(f, 3, TY(KL_I8, 5));
  tu_expect_ok(f, TY(KL_I32, B, 4, 5));
  tu_input(f, 2, TY(KL_U8, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 2 has 3 values, expected 1 or 4");
  tu_absent(f, 2);
  tu_input(f, 1, TY(KL_I8, 2, 5));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 has 2 rows, expected 3");

  tu_one_node(f, "ConvInteger", 4, 1);
  tu_input(f, 0, TY(KL_U8, B, 2, 5, 5));
  tu_input(f, 1, TY(KL_U8, 6, 2, 3, 3));
  tu_input(f, 2, TY0(KL_U8));
  tu_input(f, 3, TY(KL_U8, 6));
  tu_expect_ok(f, TY(KL_I32, B, 6, 3, 3));
  tu_input(f, 3, TY(KL_U8, 4));
  tu_expect_fail(f, KILN_ERR_SHAPE, "one per output channel (6)");

  tu_one_node(f, "QLinearConv", 9, 1);
  tu_input(f, 0, TY(KL_U8, 1, 2, 5, 5));
  tu_input(f, 1, TY0(KL_F32));
  tu_input(f, 2, TY0(KL_U8));
  tu_input(f, 3, TY(KL_I8, 4, 1, 3, 3));
  tu_input(f, 4, TY(KL_F32, 4));
  tu_input(f, 5, TY(KL_I8, 4));
  tu_input(f, 6, TY0(KL_F32));
  tu_input(f, 7, TY0(KL_I8));
  tu_input(f, 8, TY(KL_I32, 4));
  tu_attr_int(f, "group", 2);
  tu_expect_ok(f, TY(KL_I8, 1, 4, 3, 3));
  tu_input(f, 8, TY(KL_I32, 2));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 8 (B) has 2 values, expected 4");

  tu_one_node(f, "QLinearMatMul", 8, 1);
  tu_input(f, 0, TY(KL_I8, 2, 4));
  tu_input(f, 1, TY(KL_F16, 1));
  tu_input(f, 2, TY(KL_I8, 1));
  tu_input(f, 3, TY(KL_I8, 4, 3));
  tu_input(f, 4, TY(KL_F16, 3));
  tu_input(f, 5, TY(KL_I8, 3));
  tu_input(f, 6, TY(KL_F16, 1));
  tu_input(f, 7, TY(KL_U8, 1));
  tu_expect_ok(f, TY(KL_U8, 2, 3));
  tu_input(f, 6, TY(KL_F16, 3));
  tu_input(f, 7, TY(KL_U8, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 6 (y_scale) must hold one value");
  tu_input(f, 6, TY(KL_F32, 1));
  tu_input(f, 7, TY(KL_U8, 1));
  tu_expect_fail(f, KILN_ERR_DTYPE, "input 6 is float32, expected float16");
}

/* ---- Attention and RotaryEmbedding: shapes ---- */

static void test_attention_shapes(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Attention", 6, 4);
  tu_input(f, 0, TY(KL_F32, B, 8, 5, 16));
  tu_input(f, 1, TY(KL_F32, B, 2, 7, 16));
  tu_input(f, 2, TY(KL_F32, B, 2, 7, 10));
  tu_input(f, 3, TY(KL_BOOL, 5, 9));
  tu_input(f, 4, TY(KL_F32, B, 2, 3, 16));
  tu_input(f, 5, TY(KL_F32, B, 2, 3, 10));
  tu_expect_ok(f, TY(KL_F32, B, 8, 5, 10));
  tu_expect_type(f, 1, TY(KL_F32, B, 2, 10, 16));
  tu_expect_type(f, 2, TY(KL_F32, B, 2, 10, 10));
  tu_expect_type(f, 3, TY(KL_F32, B, 8, 5, 10));
  tu_input(f, 3, TY(KL_BOOL, 5, 11));
  tu_expect_fail(f, KILN_ERR_SHAPE, "covers 11 keys, expected at most 10");
  tu_input(f, 3, TY(KL_F16, 5, 9));
  tu_expect_fail(f, KILN_ERR_DTYPE, "input 3 is float16, expected float32");
  tu_absent(f, 3);
  tu_input(f, 1, TY(KL_F32, B, 3, 7, 16));
  tu_input(f, 2, TY(KL_F32, B, 3, 7, 10));
  tu_expect_fail(f, KILN_ERR_SHAPE, "head count of past_key");
  tu_absent(f, 4);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "must be given together");
  tu_absent(f, 5);
  tu_expect_fail(f, KILN_ERR_SHAPE, "8 query heads do not split");

  tu_one_node(f, "Attention", 3, 1);
  tu_input(f, 0, TY(KL_F16, 2, B, 24));
  tu_input(f, 1, TY(KL_F16, 2, 6, 8));
  tu_input(f, 2, TY(KL_F16, 2, 6, 10));
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "q_num_heads is 0");
  tu_attr_int(f, "q_num_heads", 6);
  tu_attr_int(f, "kv_num_heads", 2);
  tu_expect_ok(f, TY(KL_F16, 2, B, 30)); /* 6 heads of V's 10 / 2 */
  tu_attr_int(f, "kv_num_heads", 3);
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 has 8 values per token, not a multiple of its 3");
  /* head counts are bounded (kernels loop over them, also over empty data), and a 3-D
   * output's width, heads times V's head size, must not overflow */
  tu_attr_int(f, "kv_num_heads", INT64_C(1) << 40);
  tu_expect_fail(f, KILN_ERR_LIMIT, "kiln takes at most 1048576 heads");
  tu_attr_int(f, "q_num_heads", 1 << 20);
  tu_attr_int(f, "kv_num_heads", 1);
  tu_input(f, 0, TY(KL_F16, 2, B, INT64_C(1) << 20));
  tu_input(f, 1, TY(KL_F16, 2, 6, 1));
  tu_input(f, 2, TY(KL_F16, 2, 6, INT64_C(1) << 50));
  tu_expect_fail(f, KILN_ERR_LIMIT, "overflows");

  /* kiln.MultiHeadAttention from a file: 3 * num_heads must not overflow */
  tu_one_node(f, "kiln.MultiHeadAttention", 1, 1);
  tu_input(f, 0, TY(KL_F32, 2, 5, 12));
  tu_attr_int(f, "num_heads", INT64_C(1) << 62);
  tu_expect_fail(f, KILN_ERR_LIMIT, "at most 1048576 heads");
  tu_attr_int(f, "num_heads", 2);
  tu_expect_ok(f, TY(KL_F32, 2, 5, 4));
}

static void test_rotary_shapes(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "RotaryEmbedding", 4, 1);
  tu_input(f, 0, TY(KL_F32, B, 4, 7, 8));
  tu_input(f, 1, TY(KL_F32, 64, 2));
  tu_input(f, 2, TY(KL_F32, 64, 2));
  tu_input(f, 3, TY(KL_I64, B, 7));
  tu_attr_int(f, "rotary_embedding_dim", 4);
  tu_expect_ok(f, TY(KL_F32, B, 4, 7, 8));
  tu_attr_int(f, "rotary_embedding_dim", 5);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "rotary_embedding_dim is 5");
  tu_attr_int(f, "rotary_embedding_dim", 0);
  tu_expect_fail(f, KILN_ERR_SHAPE, "has 2 values per position, expected 4");

  tu_one_node(f, "RotaryEmbedding", 3, 1);
  tu_input(f, 0, TY(KL_F32, 2, 5, 12));
  tu_input(f, 1, TY(KL_F32, 2, 5, 3));
  tu_input(f, 2, TY(KL_F32, 2, 5, 3));
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "num_heads is 0");
  tu_attr_int(f, "num_heads", 2);
  tu_expect_ok(f, TY(KL_F32, 2, 5, 12));
  tu_input(f, 1, TY(KL_F32, 3, 5, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "must be [batch, sequence, 3]");
}

/* ---- kernels ---- */

static void test_convtranspose_values(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "ConvTranspose", 3, 1);
  tu_tensor(f, 0, KL_F32, DIMS(1, 4, 3), VALS(0.5, 1.59, 1.1, -1.1, -0.8, 1.49, -1.98, 1.28,
                                              1.19, -0.13, -0.79, -0.89));
  tu_tensor(f, 1, KL_F32, DIMS(4, 2, 3),
            VALS(-0.98, -0.22, 0.02, 0.21, 1.98, 1.17, 0.49, 1.96, -1.14, -1.36, 0.45, -1.82,
                 -1.86, 0.06, -0.14, 1.67, 0.52, 0.06, -0.01, -1.01, -1.95, -1.23, 0.77, -1.2));
  tu_tensor(f, 2, KL_F32, DIMS(4), VALS(-0.52, -1.99, 1.32, -1.38));
  tu_attr_int(f, "group", 2);
  TU_ATTR_INTS(f, "strides", 2);
  TU_ATTR_INTS(f, "pads", 1, 0);
  TU_ATTR_INTS(f, "output_padding", 1);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-5), -2.78600001, -1.2062, -2.43779993, 0.0758999586, 2.15840006,
            -2.19659996, -0.519999981, -1.495, 2.01890016, 0.79820013, -0.469100118,
            0.858500004, -3.41480017, -1.99000001, 1.3325001, -0.522199988, 2.1947, 0.476799965,
            2.29029989, 2.88890004, 1.32000005, -2.50970006, 1.76649988, -1.32270002,
            2.72679996, -1.44649994, -0.24059999, -1.38);
}

static void test_pool_values(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "LpPool", 1, 1);
  tu_tensor(f, 0, KL_F32, DIMS(1, 1, 3, 4), VALS(-0.93, 1.52, 0.04, 1.39, 0.56, 0.97, -1.63,
                                                 0.16, 0.03, 1.49, -0.55, 0.39));
  TU_ATTR_INTS(f, "kernel_shape", 2, 2);
  TU_ATTR_INTS(f, "pads", 1, 0, 0, 1);
  TU_ATTR_INTS(f, "strides", 2, 2);
  tu_attr_int(f, "p", 3);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-6), 1.62816846, 1.39001107, 1.63817871, 1.6583339);

  /* by hand: the maximum of each channel; a NaN anywhere makes it NaN */
  tu_one_node(f, "GlobalMaxPool", 1, 1);
  tu_tensor(f, 0, KL_F64, DIMS(1, 2, 1, 3), VALS(-3.5, -1.25, -2, 4, NAN, 7));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, -1.25, NAN);
}

static void test_maxunpool_values(void **state) {
  tu_fixture *f = *state;
  /* by hand: indexes into the default [1, 1, 4, 4] output, kept in the top-left corner
   * of the requested [1, 1, 5, 5] one */
  tu_one_node(f, "MaxUnpool", 3, 1);
  tu_tensor(f, 0, KL_F32, DIMS(1, 1, 2, 2), VALS(5.5, -6, 7, 8.25));
  tu_tensor(f, 1, KL_I64, DIMS(1, 1, 2, 2), VALS(0, 7, 9, 14));
  tu_tensor(f, 2, KL_I64, DIMS(4), VALS(1, 1, 5, 5));
  TU_ATTR_INTS(f, "kernel_shape", 2, 2);
  TU_ATTR_INTS(f, "strides", 2, 2);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 5.5, 0, 0, 0, 0, 0, 0, 0, -6, 0, 0, 7, 0, 0, 0, 0, 0, 8.25, 0, 0, 0,
            0, 0, 0, 0);
  ((int64_t *)f->tin[1].data)[2] = 16; /* beyond the 16 default positions */
  tu_assert_status(tu_run(f), KILN_ERR_INVALID_ARGUMENT, f->e.msg, "has 16 at flat index 2");
}

static void test_col2im_values(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Col2Im", 3, 1);
  tu_tensor(f, 0, KL_F32, DIMS(1, 4, 4),
            VALS(-1.76, -0.45, -0.71, -1.4, 1.27, -0.48, 1.91, 0.36, 0.42, 0.55, 0.71, -1.4,
                 -0.24, -1.04, -0.39, -1.61));
  tu_tensor(f, 1, KL_I64, DIMS(2), VALS(3, 3));
  tu_tensor(f, 2, KL_I64, DIMS(2), VALS(2, 2));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-6), -1.75999999, 0.819999993, -0.479999989, -0.289999992,
            0.819999933, -0.679999948, 0.709999979, -1.78999996, -1.61000001);
}

static void test_quantize_values(void **state) {
  tu_fixture *f = *state;
  /* blocks of 3 along axis 1; ties round to even (0.5 -> 0, 1.5 and 2.5 -> 2) */
  tu_one_node(f, "QuantizeLinear", 3, 1);
  tu_tensor(f, 0, KL_F32, DIMS(2, 6), VALS(0.5, 1.5, 2.5, -0.5, -1.5, 300, 3.3, -2.7, 0, 7.9,
                                           -250, 1.25));
  tu_tensor(f, 1, KL_F32, DIMS(2, 2), VALS(1, 0.5, 0.25, 2));
  tu_tensor(f, 2, KL_I8, DIMS(2, 2), VALS(1, -3, 0, 2));
  tu_attr_int(f, "block_size", 3);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 1, 3, 3, -4, -6, 127, 13, -11, 0, 6, -123, 3);

  tu_one_node(f, "DequantizeLinear", 3, 1);
  tu_tensor(f, 0, KL_U8, DIMS(2, 2, 2), VALS(10, 200, 3, 0, 255, 7, 128, 9));
  tu_tensor(f, 1, KL_F16, DIMS(2), VALS(0.5, 0.125));
  tu_tensor(f, 2, KL_U8, DIMS(2), VALS(128, 3));
  tu_attr_int(f, "axis", -2);
  tu_expect_run(f);
  assert_int_equal(f->tout[0].dtype, KL_F16);
  TU_EXPECT(f, 0, TU_EXACT, -59, 36, 0, -0.375, 63.5, -60.5, 15.625, 0.75);

  /* a [1] scale and a scalar zero point (int32, as a quantized bias has) */
  tu_one_node(f, "DequantizeLinear", 3, 1);
  tu_tensor(f, 0, KL_I32, DIMS(3), VALS(-7, 0, 1000));
  tu_tensor(f, 1, KL_F32, DIMS(1), VALS(0.25));
  tu_tensor(f, 2, KL_I32, DIMS(), VALS(4));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, -2.75, -1, 249);

  tu_one_node(f, "DynamicQuantizeLinear", 1, 3);
  tu_tensor(f, 0, KL_F32, DIMS(2, 3), VALS(1.7, -0.3, 2.9, 0, -1.25, 3.5));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 158, 51, 223, 67, 0, 255);
  TU_EXPECT(f, 1, TU_NEAR(1e-7), 0.0186274517);
  TU_EXPECT(f, 2, TU_EXACT, 67);
}

static void test_integer_product_values(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "MatMulInteger", 4, 1);
  tu_tensor(f, 0, KL_U8, DIMS(3, 4), VALS(103, 246, 242, 54, 1, 171, 3, 76, 126, 222, 23, 168));
  tu_tensor(f, 1, KL_I8, DIMS(4, 2), VALS(7, -95, 87, 87, -5, 112, 26, 102));
  tu_tensor(f, 2, KL_U8, DIMS(3), VALS(12, 200, 7)); /* per row */
  tu_tensor(f, 3, KL_I8, DIMS(2), VALS(3, -5));      /* per column */
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 19146, 44742, -4508, -21075, 22111, 28169);

  tu_one_node(f, "QLinearMatMul", 8, 1);
  tu_tensor(f, 0, KL_I8, DIMS(2, 3), VALS(116, 17, -57, -91, 15, -79));
  tu_tensor(f, 1, KL_F32, DIMS(2, 1), VALS(0.02, 0.05));
  tu_tensor(f, 2, KL_I8, DIMS(2, 1), VALS(1, -2));
  tu_tensor(f, 3, KL_I8, DIMS(3, 3), VALS(63, 108, -66, 12, -116, -82, -32, 97, 119));
  tu_tensor(f, 4, KL_F32, DIMS(3), VALS(0.01, 0.03, 0.02));
  tu_tensor(f, 5, KL_I8, DIMS(3), VALS(0, 4, -1));
  tu_tensor(f, 6, KL_F32, DIMS(1), VALS(0.1));
  tu_tensor(f, 7, KL_U8, DIMS(1), VALS(128));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 147, 156, 65, 113, 0, 80);

  tu_one_node(f, "QLinearConv", 9, 1);
  tu_tensor(f, 0, KL_U8, DIMS(1, 2, 3, 3), VALS(163, 148, 145, 15, 95, 250, 104, 54, 61, 181, 9,
                                                247, 223, 144, 119, 194, 139, 121));
  tu_tensor(f, 1, KL_F32, 0, NULL, VALS(0.02));
  tu_tensor(f, 2, KL_U8, 0, NULL, VALS(100));
  tu_tensor(f, 3, KL_I8, DIMS(2, 2, 2, 2),
            VALS(-46, -15, 63, -114, -122, 55, -34, 76, -121, 103, -97, -22, 118, -101, 39,
                 57));
  tu_tensor(f, 4, KL_F32, DIMS(2), VALS(0.01, 0.004));
  tu_tensor(f, 5, KL_I8, DIMS(2), VALS(0, 0));
  tu_tensor(f, 6, KL_F32, 0, NULL, VALS(0.3));
  tu_tensor(f, 7, KL_I8, 0, NULL, VALS(-10));
  tu_tensor(f, 8, KL_I32, DIMS(2), VALS(300, -1200));
  TU_ATTR_INTS(f, "pads", 1, 0, 0, 1);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, -17, -2, -11, -26, -11, -17, -12, -13, -18, -13, -11, -10, -2, -17,
            -11, -3, -3, -13);
}

static void test_attention_values(void **state) {
  tu_fixture *f = *state;
  /* 4 query heads over 2 key/value heads, a past row, a bool mask one key short of the
   * 3 keys, softcap, and qk_matmul_output after the softcap */
  tu_one_node(f, "Attention", 6, 4);
  tu_tensor(f, 0, KL_F32, DIMS(1, 4, 2, 3),
            VALS(0.09, 1.49, -0.62, 0.36, 0.73, -0.58, 0.08, 1.06, 1.64, -1.4, 1.73, -1.98,
                 1.01, 1.24, -1.45, -0.32, 1.26, -1.94, 0.51, 1.17, 0.05, 0.9, -1.09, -1.21));
  tu_tensor(f, 1, KL_F32, DIMS(1, 2, 2, 3),
            VALS(-0.55, -1.28, -0.62, 1.79, 0.29, -0.64, -0.91, 1.81, -0.22, 1.92, 0.06, 0.08));
  tu_tensor(f, 2, KL_F32, DIMS(1, 2, 2, 2),
            VALS(1.59, 0.97, 0.32, -0.29, 1.51, -0.35, 1.69, -1.73));
  tu_tensor(f, 3, KL_BOOL, DIMS(2, 2), VALS(1, 0, 1, 1));
  tu_tensor(f, 4, KL_F32, DIMS(1, 2, 1, 3), VALS(-0.28, 0.08, 1.8, -1, 1.22, 0.71));
  tu_tensor(f, 5, KL_F32, DIMS(1, 2, 1, 2), VALS(0.87, 0.52, 1.89, -0.67));
  tu_attr_float(f, "softcap", 1.5f);
  tu_attr_int(f, "qk_matmul_output_mode", 1);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-6), 0.870000005, 0.519999981, 1.25866652, 0.762916565, 0.870000005,
            0.519999981, 1.41158509, 0.858490646, 1.88999999, -0.670000017, 1.61561084,
            -0.438935459, 1.88999999, -0.670000017, 1.68852866, -0.500339925);
  TU_EXPECT(f, 1, TU_NEAR(1e-7), -0.28, 0.08, 1.8, -0.55, -1.28, -0.62, 1.79, 0.29, -0.64, -1,
            1.22, 0.71, -0.91, 1.81, -0.22, 1.92, 0.06, 0.08);
  TU_EXPECT(f, 2, TU_NEAR(1e-7), 0.87, 0.52, 1.59, 0.97, 0.32, -0.29, 1.89, -0.67, 1.51, -0.35,
            1.69, -1.73);
  TU_EXPECT(f, 3, TU_NEAR(1e-6), -0.561390162, -0.811086357, 0.545430005, -0.593063176,
            -0.43346712, 0.660190105, 1.23167861, -1.0962646, -0.339832693, -1.23526788,
            -0.124879785, -0.41450277, -0.299991876, 0.840059876, 0.934952676, 0.273905873,
            1.22869205, -0.391415447, 0.52674669, 0.839385927, 0.576908648, -1.24536455,
            -1.1244663, 0.808427215);

  /* 3-D: 2 query heads of size 2 sharing one key/value head, a float mask, causal */
  tu_one_node(f, "Attention", 4, 1);
  tu_tensor(f, 0, KL_F32, DIMS(1, 2, 4),
            VALS(-0.41, -1.19, -1.8, -1.15, 1.66, 1.36, -1.55, 0.42));
  tu_tensor(f, 1, KL_F32, DIMS(1, 3, 2), VALS(-0.08, 0.38, 0.64, -0.77, 1.85, -0.14));
  tu_tensor(f, 2, KL_F32, DIMS(1, 3, 2), VALS(0.51, 0.54, -1.26, -1.75, -0.35, 1.06));
  tu_tensor(f, 3, KL_F32, DIMS(2, 3), VALS(1.26, 0.92, -1.55, 1.65, 1.21, 1.51));
  tu_attr_int(f, "q_num_heads", 2);
  tu_attr_int(f, "kv_num_heads", 1);
  tu_attr_float(f, "scale", 0.7f);
  tu_attr_int(f, "is_causal", 1);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-6), 0.50999999, 0.540000021, 0.50999999, 0.540000021,
            -0.0780299753, -0.220784515, 0.202467516, 0.14211902);
}

static void test_rotary_values(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "RotaryEmbedding", 4, 1);
  tu_tensor(f, 0, KL_F32, DIMS(1, 2, 2, 6),
            VALS(0.09, 1.66, -1.81, -1.88, -1.92, -0.99, -1.01, -1.25, 0.27, -1.84, 0.36, -1.34,
                 0.71, -1.92, -0.76, 1.75, 0.15, 1.25, 0.63, 0.44, -1.23, 0.3, -1.84, 1.21));
  tu_tensor(f, 1, KL_F32, DIMS(5, 2),
            VALS(1.84, 1.42, -1.8, -0.65, -0.73, -1.55, 0.51, 1.19, -0.75, 1.45));
  tu_tensor(f, 2, KL_F32, DIMS(5, 2),
            VALS(1.19, -1.48, 1.07, 1.53, -1.21, 0.29, 0.55, 0.44, -1.62, 0.64));
  tu_tensor(f, 3, KL_I64, DIMS(1, 2), VALS(4, 1));
  tu_attr_int(f, "interleaved", 1);
  tu_attr_int(f, "rotary_embedding_dim", 4);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-6), 2.62169981, -1.3908, -1.42130005, -3.88439989, -1.91999996,
            -0.99000001, 3.15549994, 1.16929996, 2.63970017, 1.60909998, 0.360000014,
            -1.34000003, -3.64289999, 0.289799929, -2.22200012, 2.05110025, 0.150000006, 1.25,
            -1.60479999, -0.117899954, 0.340499967, -2.07690001, -1.84000003, 1.21000004);
  ((int64_t *)f->tin[3].data)[1] = 5;
  tu_assert_status(tu_run(f), KILN_ERR_INVALID_ARGUMENT, f->e.msg,
                   "position_ids) has 5 at [0, 1]");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_convtranspose_shapes),
      TU_TEST(test_convtranspose_errors),
      TU_TEST(test_lppool_shapes),
      TU_TEST(test_maxunpool_shapes),
      TU_TEST(test_col2im_shapes),
      TU_TEST(test_quantize_shapes),
      TU_TEST(test_dequantize_shapes),
      TU_TEST(test_integer_product_shapes),
      TU_TEST(test_attention_shapes),
      TU_TEST(test_rotary_shapes),
      TU_TEST(test_convtranspose_values),
      TU_TEST(test_pool_values),
      TU_TEST(test_maxunpool_values),
      TU_TEST(test_col2im_values),
      TU_TEST(test_quantize_values),
      TU_TEST(test_integer_product_values),
      TU_TEST(test_attention_values),
      TU_TEST(test_rotary_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
