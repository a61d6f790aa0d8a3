/* The reduce family: Reduce*, ArgMax/ArgMin, CumSum/CumProd, TopK, Einsum, the
 * normalizations and the losses.
 *
 * Shape inference is checked on types alone (symbolic and unknown dims, negative axes,
 * errors); kernels on small inputs whose outputs were computed independently, with
 * NumPy (the numbers are pasted below) or by hand. Each test builds one node in a fresh
 * graph. Dims are written as numbers: >= 0 known, U unknown, B the symbol "batch".
 */
#include <math.h>
#include <stdint.h>

#include "testutil.h"

/* ---- Reduce*: inference ---- */

static void test_reduce_infer_axes(void **state) {
  tu_fixture *f = *state;
  static const int64_t axes[] = {-1, 1};
  tu_one_node(f, "ReduceMean", 2, 1);
  tu_input(f, 0, TY(KL_F32, B, 3, 4));
  tu_input_ints(f, 1, 1, axes, 2);
  tu_expect_ok(f, TY(KL_F32, B, 1, 1));
  tu_attr_int(f, "keepdims", 0);
  tu_expect_ok(f, TY(KL_F32, B));
}

static void test_reduce_infer_empty_axes(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "ReduceSum", 2, 1);
  tu_input(f, 0, TY(KL_I64, B, 3));
  tu_input_ints(f, 1, 1, NULL, 0);
  tu_attr_int(f, "keepdims", 0);
  tu_expect_ok(f, TY0(KL_I64)); /* every axis */
  tu_attr_int(f, "noop_with_empty_axes", 1);
  tu_expect_ok(f, TY(KL_I64, B, 3)); /* none */
  tu_absent(f, 1);
  tu_expect_ok(f, TY(KL_I64, B, 3));
}

static void test_reduce_infer_unknown_axes(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "ReduceMax", 2, 1);
  tu_input(f, 0, TY(KL_F32, B, 1, 5));
  tu_input(f, 1, TY(KL_I64, 2)); /* two axes, contents not known (a graph input) */
  tu_expect_ok(f, TY(KL_F32, U, 1, U)); /* only the 1 is sure */
  tu_attr_int(f, "keepdims", 0);
  tu_expect_ok(f, TY(KL_F32, U));
  tu_input(f, 0, TYU(KL_F32));
  tu_expect_ok(f, TYU(KL_F32));
}

static void test_reduce_infer_errors(void **state) {
  tu_fixture *f = *state;
  static const int64_t twice[] = {1, -1}, far[] = {2};
  tu_one_node(f, "ReduceL2", 2, 1);
  tu_input(f, 0, TY(KL_F32, 4, 5));
  tu_input_ints(f, 1, 1, twice, 2);
  tu_expect_fail(f, KILN_ERR_SHAPE, "naming axis 1 a second time");
  tu_input_ints(f, 1, 1, far, 1);
  tu_expect_fail(f, KILN_ERR_SHAPE, "axes[0] is 2, out of range for rank 2");
  tu_input(f, 0, TY(KL_BOOL, 4, 5));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "input 0 (data) is bool");
}

/* ---- Reduce*: kernels ---- */

static void reduce_case(tu_fixture *f, const char *op, int64_t axis, int keepdims) {
  tu_one_node(f, op, 2, 1);
  static const int64_t one[] = {1};
  tu_tensor(f, 0, KL_F32, DIMS(2, 3), VALS(0.5, -1.25, 2.0, 3.5, 0.75, -0.5));
  tu_tensor(f, 1, KL_I64, 1, one, VALS((double)axis));
  tu_attr_int(f, "keepdims", keepdims);
}

static void test_reduce_kernels(void **state) {
  tu_fixture *f = *state;
  reduce_case(f, "ReduceSum", 1, 0);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-6), 1.25, 3.75);
  reduce_case(f, "ReduceMean", 0, 1);
  tu_expect_run(f);
  tu_expect_type(f, 0, TY(KL_F32, 1, 3));
  TU_EXPECT(f, 0, TU_NEAR(1e-6), 2.0, -0.25, 0.75);
  reduce_case(f, "ReduceMin", -1, 0);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, -1.25, -0.5);
  reduce_case(f, "ReduceLogSumExp", 1, 0); /* NumPy: log(exp(x).sum(1)) */
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-6), 2.232622, 3.5790362);
  reduce_case(f, "ReduceL2", 0, 0);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-6), 3.5355339, 1.457738, 2.0615528);
}

/* Over a zero-size axis each reduction gives its identity. */
static void test_reduce_empty_set(void **state) {
  tu_fixture *f = *state;
  static const int64_t dims[] = {2, 0}, one[] = {1};
  const char *ops[] = {"ReduceSum", "ReduceProd", "ReduceLogSum", "ReduceMax", "ReduceMin"};
  const double want[] = {0, 1, -INFINITY, -INFINITY, INFINITY};
  for (int i = 0; i < 5; i++) {
    tu_one_node(f, ops[i], 2, 1);
    tu_tensor(f, 0, KL_F32, 2, dims, NULL);
    tu_tensor(f, 1, KL_I64, 1, one, VALS(1));
    tu_expect_run(f);
    TU_EXPECT(f, 0, TU_EXACT, want[i], want[i]);
  }
  tu_one_node(f, "ReduceMax", 2, 1);
  tu_tensor(f, 0, KL_I32, 2, dims, NULL);
  tu_tensor(f, 1, KL_I64, 1, one, VALS(1));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, INT32_MIN, INT32_MIN);
}

/* With noop_with_empty_axes and no axes each set is one element: f(x) elementwise. */
static void test_reduce_noop(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "ReduceSumSquare", 2, 1);
  tu_tensor(f, 0, KL_F32, DIMS(2, 3), VALS(0.5, -1.25, 2.0, 3.5, 0.75, -0.5));
  tu_absent(f, 1);
  tu_attr_int(f, "noop_with_empty_axes", 1);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-6), 0.25, 1.5625, 4.0, 12.25, 0.5625, 0.25);
}

/* Integer sums wrap to the dtype, like NumPy; Max selects exactly. */
static void test_reduce_integers(void **state) {
  tu_fixture *f = *state;
  static const int64_t dims[] = {3};
  tu_one_node(f, "ReduceSum", 2, 1);
  tu_tensor(f, 0, KL_I32, TU_LEN(dims), dims, VALS(2147483647, 1, 5));
  tu_absent(f, 1);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, -2147483643.0);
  tu_one_node(f, "ReduceMax", 2, 1);
  tu_tensor(f, 0, KL_U64, TU_LEN(dims), dims, VALS(7, 18446744073709549568.0, 9));
  tu_absent(f, 1);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 18446744073709549568.0);
}

/* ---- ArgMax, ArgMin ---- */

static void test_argmax(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "ArgMax", 1, 1);
  tu_input(f, 0, TY(KL_F16, B, 7, 3));
  tu_attr_int(f, "axis", -2);
  tu_attr_int(f, "keepdims", 0);
  tu_expect_ok(f, TY(KL_I64, B, 3));
  tu_input(f, 0, TY(KL_F32, 2, 0, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "axis 1 of input 0 (data) is empty");
  tu_tensor(f, 0, KL_F32, DIMS(2, 3), VALS(4, 1, 4, -2, 7, 7));
  tu_attr_int(f, "axis", 1);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 0, 1); /* ties: the first */
  tu_attr_int(f, "select_last_index", 1);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 2, 2);
  tu_one_node(f, "ArgMin", 1, 1);
  tu_tensor(f, 0, KL_I32, DIMS(2, 3), VALS(4, 1, 4, -2, 7, 7));
  tu_expect_run(f);
  tu_expect_type(f, 0, TY(KL_I64, 1, 3));
  TU_EXPECT(f, 0, TU_EXACT, 1, 0, 0);
}

/* ---- CumSum, CumProd ---- */

static void test_cumulative(void **state) {
  tu_fixture *f = *state;
  static const int64_t axis = -1;
  tu_one_node(f, "CumSum", 2, 1);
  tu_input(f, 0, TY(KL_F32, B, 4));
  tu_input_ints(f, 1, 0, &axis, 1);
  tu_expect_ok(f, TY(KL_F32, B, 4));
  static const int64_t far = 2;
  tu_input_ints(f, 1, 0, &far, 1);
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (axis) 2 is out of range for rank 2");
  static const int64_t scalar[] = {0};
  tu_tensor(f, 0, KL_F64, DIMS(2, 3), VALS(1.5, -2, 0.25, 3, 4, -1));
  tu_tensor(f, 1, KL_I32, 0, scalar, VALS(1));
  tu_attr_int(f, "exclusive", 1);
  tu_attr_int(f, "reverse", 1);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-12), -1.75, 0.25, 0, 3, -1, 0);
  tu_one_node(f, "CumProd", 2, 1);
  tu_tensor(f, 0, KL_I64, DIMS(2, 3), VALS(2, -3, 4, 5, 1, -1));
  tu_tensor(f, 1, KL_I64, 0, scalar, VALS(0));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 2, -3, 4, 10, -3, -4);
}

/* ---- TopK ---- */

static void test_topk(void **state) {
  tu_fixture *f = *state;
  static const int64_t k2 = 2, k9 = 9;
  tu_one_node(f, "TopK", 2, 2);
  tu_input(f, 0, TY(KL_F32, B, 5));
  tu_input_ints(f, 1, 1, &k2, 1);
  tu_expect_ok(f, TY(KL_F32, B, 2));
  tu_expect_type(f, 1, TY(KL_I64, B, 2));
  tu_input_ints(f, 1, 1, &k9, 1);
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (K) is 9 but axis 1");
  f->data[1] = NULL; /* K not known (a graph input) */
  tu_expect_ok(f, TY(KL_F32, B, U));
  static const int64_t dims[] = {2, 5}, one[] = {1};
  tu_tensor(f, 0, KL_F32, TU_LEN(dims), dims, VALS(3, 1, 3, 0.5, 3, -1, 2, -1, 2, 0));
  tu_tensor(f, 1, KL_I64, 1, one, VALS(3));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 3, 3, 3, 2, 2, 0);
  TU_EXPECT(f, 1, TU_EXACT, 0, 2, 4, 1, 3, 4); /* equal values by increasing index */
  tu_attr_int(f, "largest", 0);
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 0.5, 1, 3, -1, -1, 0);
  TU_EXPECT(f, 1, TU_EXACT, 3, 1, 0, 0, 2, 4);
}

/* ---- Einsum ---- */

static void einsum_node(tu_fixture *f, const char *eq, int n_in) {
  tu_one_node(f, "Einsum", n_in, 1);
  tu_attr_string(f, "equation", eq);
}

static void test_einsum_infer(void **state) {
  tu_fixture *f = *state;
  einsum_node(f, "bij, bjk -> bik", 2);
  tu_input(f, 0, TY(KL_F32, B, 2, 3));
  tu_input(f, 1, TY(KL_F32, U, 3, 4));
  tu_expect_ok(f, TY(KL_F32, B, 2, 4));
  einsum_node(f, "kj,ji", 2); /* implicit: the letters used once, sorted */
  tu_input(f, 0, TY(KL_F64, 5, 3));
  tu_input(f, 1, TY(KL_F64, 3, 7));
  tu_expect_ok(f, TY(KL_F64, 7, 5));
  einsum_node(f, "...ij,...jk", 2); /* ellipsis dims broadcast, and come first */
  tu_input(f, 0, TY(KL_F32, 6, 1, 2, 3));
  tu_input(f, 1, TY(KL_F32, 5, 3, 4));
  tu_expect_ok(f, TY(KL_F32, 6, 5, 2, 4));
  tu_input(f, 0, TYU(KL_F32));
  tu_expect_ok(f, TYU(KL_F32));
}

static void test_einsum_errors(void **state) {
  tu_fixture *f = *state;
  einsum_node(f, "ij,jk->ik", 2);
  tu_input(f, 0, TY(KL_F32, 2, 3));
  tu_input(f, 1, TY(KL_F32, 4, 5));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 dim 0 is 4");
  einsum_node(f, "ij->iz", 1);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "output letter 'z' is in no input");
  einsum_node(f, "ij,jk", 1);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "more terms than the 1 inputs");
  einsum_node(f, "i.j", 1);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "not one ellipsis");
  einsum_node(f, "ijk", 1);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "term 0 names 3 dims but input 0 has rank 2");
  einsum_node(f, "i2", 1);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "has '2'");
}

static void test_einsum_kernels(void **state) {
  tu_fixture *f = *state;
  static const int64_t da[] = {1, 2, 3}, db[] = {2, 3, 2}, dm[] = {3, 3};
  einsum_node(f, "...ij,...jk->...ik", 2); /* NumPy np.einsum */
  tu_tensor(f, 0, KL_F32, TU_LEN(da), da, VALS(0.3, -1.2, 0.7, 1.1, 0.4, -0.6));
  tu_tensor(f, 1, KL_F32, TU_LEN(db), db,
            VALS(0.5, -0.2, 1.3, 0.9, -0.7, 0.25, 0.1, 0.6, -1.0, 0.35, 0.8, -0.45));
  tu_expect_run(f);
  tu_expect_type(f, 0, TY(KL_F32, 2, 2, 2));
  TU_EXPECT(f, 0, TU_NEAR(1e-6), -1.9, -0.965, 1.49, -0.01, 1.79, -0.555, -0.77, 1.07);
  einsum_node(f, "ii", 1);
  tu_tensor(f, 0, KL_F32, TU_LEN(dm), dm, VALS(1.5, -0.3, 0.8, 0.2, -2.1, 0.6, 0.9, 0.45, 3.2));
  tu_expect_run(f);
  tu_expect_type(f, 0, TY0(KL_F32));
  TU_EXPECT(f, 0, TU_NEAR(1e-6), 2.6);
  einsum_node(f, "ii->i", 1);
  tu_tensor(f, 0, KL_I64, TU_LEN(dm), dm, VALS(1, -3, 8, 2, -2, 6, 9, 4, 3));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 1, -2, 3);
}

/* ---- normalizations ---- */

static void test_layernorm_infer(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "LayerNormalization", 3, 3);
  tu_input(f, 0, TY(KL_F16, B, 7, 4));
  tu_input(f, 1, TY(KL_F16, 7, 4));
  tu_input(f, 2, TY(KL_F16, 4));
  tu_attr_int(f, "axis", -2);
  tu_expect_ok(f, TY(KL_F16, B, 7, 4));
  tu_expect_type(f, 1, TY(KL_F32, B, 1, 1)); /* stash_type, float by default */
  tu_expect_type(f, 2, TY(KL_F32, B, 1, 1));
  tu_input(f, 1, TY(KL_F16, 5));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (Scale)");
  tu_input(f, 1, TY(KL_F32, 4));
  tu_expect_fail(f, KILN_ERR_DTYPE, "input 1 is float32, expected float16");
  tu_input(f, 1, TY(KL_F16, 4));
  tu_attr_int(f, "stash_type", KL_I32);
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "stash_type is 6");
}

static void test_layernorm_kernel(void **state) {
  tu_fixture *f = *state;
  static const int64_t dx[] = {3, 4}, dv[] = {4};
  tu_one_node(f, "LayerNormalization", 3, 3);
  tu_tensor(f, 0, KL_F32, TU_LEN(dx), dx,
            VALS(0.2, -1.1, 0.6, 1.7, 2.3, 0.4, -0.8, -1.5, 0.05, 0.9, -0.3, 1.2));
  tu_tensor(f, 1, KL_F32, TU_LEN(dv), dv, VALS(1.2, -0.5, 0.8, 1.1));
  tu_tensor(f, 2, KL_F32, TU_LEN(dv), dv, VALS(0.1, 0.2, -0.3, 0.05));
  tu_expect_run(f); /* NumPy, population variance, epsilon 1e-5 */
  TU_EXPECT(f, 0, TU_NEAR(1e-5), -0.079774524, 0.92409183, -0.10025053, 1.5331398, 1.9327103,
            0.095868731, -0.79983009, -1.1718069, -0.71188052, -0.15878559, -1.3004992,
            1.380582);
  TU_EXPECT(f, 1, TU_NEAR(1e-6), 0.35, 0.1, 0.4625);
  TU_EXPECT(f, 2, TU_NEAR(1e-5), 0.99874736, 0.69420846, 1.6401627);
}

static void test_groupnorm(void **state) {
  tu_fixture *f = *state;
  static const int64_t dx[] = {1, 4, 3}, dv[] = {4};
  tu_one_node(f, "GroupNormalization", 3, 1);
  tu_input(f, 0, TY(KL_F32, B, 6, 3));
  tu_input(f, 1, TY(KL_F32, 6));
  tu_input(f, 2, TY(KL_F32, 6));
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "num_groups must be");
  tu_attr_int(f, "num_groups", 4);
  tu_expect_fail(f, KILN_ERR_SHAPE, "6 channels, not a multiple of num_groups 4");
  tu_attr_int(f, "num_groups", 2);
  tu_input(f, 1, TY(KL_F32, 2)); /* opset 18's per-group form is canonicalized on import */
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (scale) has 2 values, expected 6");
  tu_tensor(f, 0, KL_F32, TU_LEN(dx), dx,
            VALS(0.3, -0.7, 1.9, 0.8, 1.4, -0.2, -1.3, 0.6, 0.1, 2.2, -0.4, 0.75));
  tu_tensor(f, 1, KL_F32, TU_LEN(dv), dv, VALS(1.1, 0.9, -0.6, 1.3));
  tu_tensor(f, 2, KL_F32, TU_LEN(dv), dv, VALS(0.05, -0.1, 0.2, 0.3));
  tu_expect_run(f); /* NumPy */
  TU_EXPECT(f, 0, TU_NEAR(1e-5), -0.29887598, -1.530203, 1.6712472, 0.11828069, 0.72275031,
            -0.88916867, 1.103397, 0.047117438, 0.32508573, 2.5584924, -0.57328373, 0.81192494);
}

static void test_lrn_kernel(void **state) {
  tu_fixture *f = *state;
  static const int64_t dx[] = {1, 3, 2};
  tu_one_node(f, "LRN", 1, 1);
  tu_attr_int(f, "size", 3);
  tu_attr_float(f, "alpha", 0.3f);
  tu_attr_float(f, "beta", 0.6f);
  tu_attr_float(f, "bias", 1.5f);
  tu_tensor(f, 0, KL_F32, TU_LEN(dx), dx, VALS(0.5, -1.2, 1.7, 0.3, -0.8, 2.2));
  tu_expect_run(f); /* NumPy */
  TU_EXPECT(f, 0, TU_NEAR(1e-5), 0.34977409, -0.88760049, 1.1647469, 0.19021228, -0.55254129,
            1.4545153);
}

/* p = 1 divides by the sum of absolute values; a zero norm gives 0, not NaN. */
static void test_lpnorm_kernel(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "LpNormalization", 1, 1);
  tu_attr_int(f, "p", 1);
  tu_tensor(f, 0, KL_F32, DIMS(2, 3), VALS(1, -3, 4, 0, 0, 0));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-7), 0.125, -0.375, 0.5, 0, 0, 0);
  tu_attr_int(f, "p", 3);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "p is 3, expected 1 or 2");
}

/* ---- losses ---- */

static void test_loss_infer(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "SoftmaxCrossEntropyLoss", 3, 2);
  tu_input(f, 0, TY(KL_F32, B, 5, 7));
  tu_input(f, 1, TY(KL_I64, U, 7));
  tu_input(f, 2, TY(KL_F32, 5));
  tu_attr_string(f, "reduction", "none");
  tu_expect_ok(f, TY(KL_F32, B, 7));
  tu_expect_type(f, 1, TY(KL_F32, B, 5, 7));
  tu_attr_string(f, "reduction", "mean");
  tu_expect_ok(f, TY0(KL_F32));
  tu_input(f, 1, TY(KL_I64, 3, 8));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (target) dim 1 is 8, expected 7");
  tu_input(f, 1, TY(KL_I64, 3));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 1 (target) has rank 1, expected 2");
  tu_input(f, 1, TY(KL_I64, 3, 7));
  tu_attr_string(f, "reduction", "max");
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "reduction is \"max\"");
}

static void test_loss_kernels(void **state) {
  tu_fixture *f = *state;
  static const int64_t dx[] = {3, 4}, dt[] = {3}, dw[] = {4};
  tu_one_node(f, "SoftmaxCrossEntropyLoss", 3, 2);
  tu_attr_int(f, "ignore_index", -1);
  tu_attr_string(f, "reduction", "none");
  tu_tensor(f, 0, KL_F32, TU_LEN(dx), dx,
            VALS(0.4, -1.2, 2.1, 0.3, 1.5, 0.2, -0.6, 0.9, -0.3, 0.8, 0.05, -1.1));
  tu_tensor(f, 1, KL_I32, TU_LEN(dt), dt, VALS(2, -1, 0));
  tu_tensor(f, 2, KL_F32, TU_LEN(dw), dw, VALS(0.7, 1.3, 0.4, 1.0));
  tu_expect_run(f); /* NumPy */
  TU_EXPECT(f, 0, TU_NEAR(1e-6), 0.13024123, 0, 1.2392038);
  TU_EXPECT(f, 1, TU_NEAR(1e-6), -2.0256031, -3.6256031, -0.32560308, -2.1256031, -0.66464475,
            -1.9646447, -2.7646447, -1.2646447, -1.7702911, -0.67029109, -1.4202911,
            -2.5702911);
  tu_attr_string(f, "reduction", "mean"); /* divided by the weights taken: 0.4 + 0.7 */
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-6), 1.24494999);
  tu_one_node(f, "NegativeLogLikelihoodLoss", 2, 1);
  tu_attr_string(f, "reduction", "sum");
  tu_tensor(f, 0, KL_F32, TU_LEN(dx), dx,
            VALS(0.4, -1.2, 2.1, 0.3, 1.5, 0.2, -0.6, 0.9, -0.3, 0.8, 0.05, -1.1));
  tu_tensor(f, 1, KL_I64, TU_LEN(dt), dt, VALS(3, 0, 1));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_NEAR(1e-6), -(0.3 + 1.5 + 0.8));
  tu_tensor(f, 1, KL_I64, TU_LEN(dt), dt, VALS(3, 4, 1));
  tu_assert_status(tu_run(f), KILN_ERR_INVALID_ARGUMENT, f->e.msg,
                   "has 4 at flat index 1, expected a class in [0, 4)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_reduce_infer_axes),
      TU_TEST(test_reduce_infer_empty_axes),
      TU_TEST(test_reduce_infer_unknown_axes),
      TU_TEST(test_reduce_infer_errors),
      TU_TEST(test_reduce_kernels),
      TU_TEST(test_reduce_empty_set),
      TU_TEST(test_reduce_noop),
      TU_TEST(test_reduce_integers),
      TU_TEST(test_argmax),
      TU_TEST(test_cumulative),
      TU_TEST(test_topk),
      TU_TEST(test_einsum_infer),
      TU_TEST(test_einsum_errors),
      TU_TEST(test_einsum_kernels),
      TU_TEST(test_layernorm_infer),
      TU_TEST(test_layernorm_kernel),
      TU_TEST(test_groupnorm),
      TU_TEST(test_lrn_kernel),
      TU_TEST(test_lpnorm_kernel),
      TU_TEST(test_loss_infer),
      TU_TEST(test_loss_kernels),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
