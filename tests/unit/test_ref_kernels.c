/* Reference kernels against outputs computed independently (onnx.reference and
 * onnxruntime, see fixtures/make_fixtures.py), one cmocka test per fixture case, plus
 * the behaviours the fixtures cannot show: run-time data errors and edge cases.
 *
 * Each case builds a one-node graph, runs the op's infer function on the concrete
 * inputs (as the runtime does before every kernel), checks the inferred output types
 * against the expected outputs, runs the reference kernel and compares values within
 * the case's tolerance: |got - want| <= atol + rtol * |want|.
 */
#include <math.h>
#include <stdint.h>

#include "testutil.h"

enum { FX_FLOAT = KL_ATTR_FLOAT, FX_INT = KL_ATTR_INT, FX_STRING = KL_ATTR_STRING,
       FX_INTS = KL_ATTR_INTS };

typedef struct fx_attr {
  const char *name;
  int kind;
  int64_t i;
  double f;
  const char *s;
  int n;
  const int64_t *ints;
} fx_attr;

typedef struct fx_tensor {
  int dtype; /* 0: an absent optional input */
  int rank;
  const int64_t *dims;
  const double *data;
} fx_tensor;

typedef struct fx_case {
  const char *name, *op;
  int n_attrs;
  const fx_attr *attrs;
  int n_in;
  const fx_tensor *in;
  int n_out;
  const fx_tensor *out;
  double rtol, atol;
} fx_case;

#include "fixtures/ref_cases.h"

/* The fixture's node, attributes and inputs (absent ones too) for case c. */
static void build(tu_fixture *f, const fx_case *c) {
  tu_one_node(f, c->op, c->n_in, c->n_out);
  for (int i = 0; i < c->n_attrs; i++) {
    const fx_attr *a = &c->attrs[i];
    switch (a->kind) {
    case FX_INT: tu_attr_int(f, a->name, a->i); break;
    case FX_FLOAT: tu_attr_float(f, a->name, (float)a->f); break;
    case FX_STRING: tu_attr_string(f, a->name, a->s); break;
    default: tu_attr_ints(f, a->name, a->ints, a->n); break;
    }
  }
  for (int i = 0; i < c->n_in; i++) {
    const fx_tensor *t = &c->in[i];
    if (t->dtype) tu_tensor(f, i, (kl_dtype)t->dtype, t->rank, t->dims, t->data);
    else tu_absent(f, i);
  }
}

static void check_output(const fx_case *c, int k, const kl_tensor *got) {
  const fx_tensor *want = &c->out[k];
  assert_int_equal(got->dtype, want->dtype);
  tu_assert_dims(got, want->rank, want->dims);
  tu_assert_tensor(got, TU_TOL(c->atol, c->rtol), want->data, kl_tensor_numel(got));
}

static void test_fixture_case(void **state) {
  const fx_case *c = *state;
  tu_fixture f = {0};
  build(&f, c);
  kiln_status st = tu_infer(&f);
  if (st != KILN_OK) fail_msg("%s: infer failed: %s", c->name, f.e.msg);
  st = tu_kernel(&f);
  if (st != KILN_OK) fail_msg("%s: kernel failed: %s", c->name, f.e.msg);
  for (int k = 0; k < c->n_out; k++) check_output(c, k, &f.tout[k]);
  tu_fixture_clear(&f);
}

/* ---- hand-written cases: behaviours beyond the oracles' reach ---- */

static void test_div_int_by_zero(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Div", 2, 1);
  tu_tensor(f, 0, KL_I32, DIMS(3), VALS(4, 5, 6));
  tu_tensor(f, 1, KL_I32, DIMS(3), VALS(2, 0, 3));
  tu_assert_status(tu_run(f), KILN_ERR_INVALID_ARGUMENT, f->e.msg, "division by zero");
}

static void test_div_int64_min_by_minus_one_wraps(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Div", 2, 1);
  tu_tensor(f, 0, KL_I64, DIMS(2), VALS(0, -7));
  tu_tensor(f, 1, KL_I64, DIMS(2), VALS(-1, -1));
  ((int64_t *)f->tin[0].data)[0] = INT64_MIN; /* not representable in a double literal */
  tu_expect_run(f);
  assert_true(((int64_t *)f->tout[0].data)[0] == INT64_MIN);
  assert_int_equal(((int64_t *)f->tout[0].data)[1], 7);
}

static void test_gather_index_out_of_range(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Gather", 2, 1);
  tu_tensor(f, 0, KL_F32, DIMS(3, 2), VALS(1, 2, 3, 4, 5, 6));
  tu_tensor(f, 1, KL_I64, DIMS(2), VALS(1, -4));
  tu_assert_status(tu_run(f), KILN_ERR_INVALID_ARGUMENT, f->e.msg, "-4");
  /* The kernel checks too, for callers that did not run infer on these indices. */
  tu_tensor(f, 1, KL_I64, DIMS(2), VALS(1, 0));
  assert_int_equal(tu_infer(f), KILN_OK);
  ((int64_t *)f->tin[1].data)[1] = 3;
  assert_int_equal(tu_kernel(f), KILN_ERR_INVALID_ARGUMENT);
}

static void test_dropout_training_refused(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Dropout", 3, 1);
  tu_tensor(f, 0, KL_F32, DIMS(2), VALS(1, 2));
  tu_tensor(f, 1, KL_F32, 0, NULL, VALS(0.5));
  tu_tensor(f, 2, KL_BOOL, 0, NULL, VALS(1));
  assert_int_equal(tu_run(f), KILN_ERR_UNSUPPORTED);
}

/* A pool whose one window (in 1, kernel 2, dilation 5, pads 4 and 1) has taps at -4
 * and 1, both outside the input. */
static void pool_in_padding(tu_fixture *f, const char *op, int n_out) {
  tu_one_node(f, op, 1, n_out);
  TU_ATTR_INTS(f, "kernel_shape", 2);
  TU_ATTR_INTS(f, "dilations", 5);
  TU_ATTR_INTS(f, "pads", 4, 1);
  tu_tensor(f, 0, KL_F32, DIMS(1, 1, 1), VALS(3));
  tu_expect_run(f);
}

/* A window whose taps all miss the input has no maximum: Y is -inf, Indices -1; the
 * average of nothing is NaN. */
static void test_pool_window_in_padding(void **state) {
  tu_fixture *f = *state;
  pool_in_padding(f, "MaxPool", 2);
  assert_int_equal(f->tout[0].dims[2], 1);
  assert_true(isinf(((float *)f->tout[0].data)[0]) && ((float *)f->tout[0].data)[0] < 0);
  assert_int_equal(((int64_t *)f->tout[1].data)[0], -1);
  pool_in_padding(f, "AveragePool", 1);
  assert_true(isnan(((float *)f->tout[0].data)[0]));
}

static void test_maxpool_skips_nan(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "MaxPool", 1, 2);
  TU_ATTR_INTS(f, "kernel_shape", 3);
  tu_tensor(f, 0, KL_F32, DIMS(1, 1, 4), VALS(NAN, -1, -3, NAN));
  tu_expect_run(f);
  const float *y = f->tout[0].data;
  assert_true(y[0] == -1.0f && y[1] == -1.0f);
  assert_int_equal(((int64_t *)f->tout[1].data)[0], 1);
}

static void test_softmax_neg_inf(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Softmax", 1, 1);
  tu_tensor(f, 0, KL_F32, DIMS(3), VALS(-INFINITY, 0, 0));
  tu_expect_run(f);
  const float *y = f->tout[0].data;
  assert_true(y[0] == 0.0f && y[1] == 0.5f && y[2] == 0.5f);
}

static void test_clip_keeps_nan(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Clip", 3, 1);
  tu_tensor(f, 0, KL_F32, DIMS(3), VALS(NAN, -5, 5));
  tu_tensor(f, 1, KL_F32, 0, NULL, VALS(-1));
  tu_tensor(f, 2, KL_F32, DIMS(1), VALS(1));
  tu_expect_run(f);
  const float *y = f->tout[0].data;
  assert_true(isnan(y[0]) && y[1] == -1.0f && y[2] == 1.0f);
}

static void test_relu_keeps_nan(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Relu", 1, 1);
  tu_tensor(f, 0, KL_F32, DIMS(4), VALS(NAN, -2, 3, -INFINITY));
  tu_expect_run(f);
  const float *y = f->tout[0].data;
  assert_true(isnan(y[0]) && y[1] == 0.0f && y[2] == 3.0f && y[3] == 0.0f);
}

int main(void) {
  enum { N_FIXTURES = sizeof fx_cases / sizeof fx_cases[0] };
  static const struct CMUnitTest extra[] = {
      TU_TEST(test_div_int_by_zero),
      TU_TEST(test_div_int64_min_by_minus_one_wraps),
      TU_TEST(test_gather_index_out_of_range),
      TU_TEST(test_dropout_training_refused),
      TU_TEST(test_pool_window_in_padding),
      TU_TEST(test_maxpool_skips_nan),
      TU_TEST(test_softmax_neg_inf),
      TU_TEST(test_clip_keeps_nan),
      TU_TEST(test_relu_keeps_nan),
  };
  enum { N_EXTRA = sizeof extra / sizeof extra[0] };
  static struct CMUnitTest tests[N_FIXTURES + N_EXTRA];
  for (int i = 0; i < N_FIXTURES; i++)
    tests[i] = (struct CMUnitTest){fx_cases[i].name, test_fixture_case, NULL, NULL,
                                   (void *)&fx_cases[i]};
  for (int i = 0; i < N_EXTRA; i++) tests[N_FIXTURES + i] = extra[i];
  return _cmocka_run_group_tests("ref_kernels", tests, N_FIXTURES + N_EXTRA, NULL, NULL);
}
