/* Reference kernels against outputs computed independently (onnx.reference and
 * onnxruntime, see fixtures/make_fixtures.py), one cmocka test per fixture case, plus
 * the behaviours the fixtures cannot show: run-time data errors and edge cases.
 *
 * Each case builds a one-node graph, runs the op's infer function on the concrete
 * inputs (as the runtime does before every kernel), checks the inferred output types
 * against the expected outputs, runs the reference kernel and compares values within
 * the case's tolerance: |got - want| <= atol + rtol * |want|.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

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

#define MAX_IO 8

/* Everything one case allocates, freed by harness_free. */
typedef struct harness {
  kl_graph *g;
  int node;
  int n_in, n_out;
  kl_tensor in[MAX_IO], out[MAX_IO];
  bool present[MAX_IO];
  kl_err e;
} harness;

static void harness_free(harness *h) {
  for (int i = 0; i < MAX_IO; i++) {
    free(h->in[i].data);
    free(h->out[i].data);
  }
  kl_graph_free(h->g);
}

static void set_attr(harness *h, const fx_attr *a) {
  kiln_status st = KILN_OK;
  switch (a->kind) {
  case FX_INT: st = kl_node_set_int(h->g, h->node, a->name, a->i, &h->e); break;
  case FX_FLOAT: st = kl_node_set_float(h->g, h->node, a->name, (float)a->f, &h->e); break;
  case FX_STRING: st = kl_node_set_string(h->g, h->node, a->name, a->s, &h->e); break;
  default: st = kl_node_set_ints(h->g, h->node, a->name, a->ints, a->n, &h->e); break;
  }
  assert_int_equal(st, KILN_OK);
}

/* Makes a tensor of the fixture's dtype and shape holding its values. */
static void tensor_from(kl_tensor *t, const fx_tensor *f) {
  t->dtype = (kl_dtype)f->dtype;
  t->rank = f->rank;
  for (int d = 0; d < f->rank; d++) t->dims[d] = f->dims[d];
  int64_t n = kl_tensor_numel(t);
  t->data = calloc((size_t)(n > 0 ? n : 1), kl_dtype_size(t->dtype));
  assert_non_null(t->data);
  for (int64_t i = 0; i < n; i++) kl_store_f64(t->data, t->dtype, (size_t)i, f->data[i]);
}

static void type_of(kl_type *ty, const kl_tensor *t) {
  memset(ty, 0, sizeof *ty);
  ty->dtype = t->dtype;
  kl_type_set_shape(ty, t->rank, t->dims);
}

static void build(harness *h, const fx_case *c) {
  memset(h, 0, sizeof *h);
  kl_op op = kl_op_lookup("", c->op);
  assert_int_not_equal(op, KL_OP_COUNT);
  h->g = kl_graph_new();
  assert_non_null(h->g);
  int ins[MAX_IO], outs[MAX_IO];
  h->n_in = c->n_in;
  h->n_out = c->n_out;
  for (int i = 0; i < c->n_in; i++) {
    h->present[i] = c->in[i].dtype != 0;
    ins[i] = h->present[i] ? kl_graph_add_value(h->g, NULL, &h->e) : KL_ABSENT;
    if (h->present[i]) tensor_from(&h->in[i], &c->in[i]);
  }
  for (int i = 0; i < c->n_out; i++) outs[i] = kl_graph_add_value(h->g, NULL, &h->e);
  h->node = kl_graph_add_node(h->g, op, c->name, c->n_in, ins, c->n_out, outs, &h->e);
  assert_true(h->node >= 0);
  for (int i = 0; i < c->n_attrs; i++) set_attr(h, &c->attrs[i]);
}

/* Runs infer on the concrete inputs and shapes the outputs from what it says. */
static kiln_status infer(harness *h, kl_type *out) {
  kl_type types[MAX_IO];
  const kl_type *tp[MAX_IO];
  const void *data[MAX_IO];
  for (int i = 0; i < h->n_in; i++) {
    if (h->present[i]) type_of(&types[i], &h->in[i]);
    tp[i] = h->present[i] ? &types[i] : NULL;
    data[i] = h->present[i] ? h->in[i].data : NULL;
  }
  for (int i = 0; i < h->n_out; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].rank = -1;
  }
  const kl_node *n = &h->g->nodes[h->node];
  kl_infer_ctx ctx = {h->g, n, h->n_in, h->n_out, tp, data, out, &h->e};
  return (kiln_status)kl_op_get(n->op)->infer(&ctx);
}

static void alloc_outputs(harness *h, const kl_type *out) {
  for (int i = 0; i < h->n_out; i++) {
    assert_true(kl_type_is_concrete(&out[i]));
    kl_tensor *t = &h->out[i];
    t->dtype = out[i].dtype;
    t->rank = out[i].rank;
    for (int k = 0; k < t->rank; k++) t->dims[k] = out[i].dims[k].size;
    int64_t n = kl_tensor_numel(t);
    t->data = calloc((size_t)(n > 0 ? n : 1), kl_dtype_size(t->dtype));
    assert_non_null(t->data);
  }
}

static kiln_status run_kernel(harness *h) {
  const kl_tensor *in[MAX_IO];
  kl_tensor *out[MAX_IO];
  for (int i = 0; i < h->n_in; i++) in[i] = h->present[i] ? &h->in[i] : NULL;
  for (int i = 0; i < h->n_out; i++) out[i] = &h->out[i];
  const kl_node *n = &h->g->nodes[h->node];
  kl_kernel_ctx ctx = {n, h->n_in, h->n_out, in, out, &h->e, 1, NULL};
  return (kiln_status)kl_op_get(n->op)->ref(&ctx);
}

static void check_output(const fx_case *c, int k, const kl_tensor *got) {
  const fx_tensor *want = &c->out[k];
  assert_int_equal(got->dtype, want->dtype);
  assert_int_equal(got->rank, want->rank);
  for (int d = 0; d < want->rank; d++) assert_int_equal(got->dims[d], want->dims[d]);
  int64_t n = kl_tensor_numel(got);
  for (int64_t i = 0; i < n; i++) {
    double g = kl_load_f64(got->data, got->dtype, (size_t)i), w = want->data[i];
    bool ok = isnan(w) ? isnan(g) : g == w || fabs(g - w) <= c->atol + c->rtol * fabs(w);
    if (!ok) fail_msg("%s: output %d element %lld is %.9g, expected %.9g", c->name, k,
                      (long long)i, g, w);
  }
}

static void test_fixture_case(void **state) {
  const fx_case *c = *state;
  harness h;
  build(&h, c);
  kl_type out[MAX_IO];
  kiln_status st = infer(&h, out);
  if (st != KILN_OK) fail_msg("%s: infer failed: %s", c->name, h.e.msg);
  alloc_outputs(&h, out);
  st = run_kernel(&h);
  if (st != KILN_OK) fail_msg("%s: kernel failed: %s", c->name, h.e.msg);
  for (int k = 0; k < c->n_out; k++) check_output(c, k, &h.out[k]);
  harness_free(&h);
}

/* ---- hand-written cases: behaviours beyond the oracles' reach ---- */

/* Builds, infers and runs a case whose input values are given; returns the status of
 * infer, or of the kernel when infer succeeds. */
static kiln_status run_case(harness *h, const fx_case *c) {
  build(h, c);
  kl_type out[MAX_IO];
  kiln_status st = infer(h, out);
  if (st != KILN_OK) return st;
  alloc_outputs(h, out);
  return run_kernel(h);
}

static void test_div_int_by_zero(void **state) {
  (void)state;
  fx_tensor in[2] = {{KL_I32, 1, (const int64_t[]){3}, (const double[]){4, 5, 6}},
                     {KL_I32, 1, (const int64_t[]){3}, (const double[]){2, 0, 3}}};
  fx_case c = {"div0", "Div", 0, NULL, 2, in, 1, NULL, 0, 0};
  harness h;
  assert_int_equal(run_case(&h, &c), KILN_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(h.e.msg, "division by zero"));
  harness_free(&h);
}

static void test_div_int64_min_by_minus_one_wraps(void **state) {
  (void)state;
  fx_tensor in[2] = {{KL_I64, 1, (const int64_t[]){2}, (const double[]){0, -7}},
                     {KL_I64, 1, (const int64_t[]){2}, (const double[]){-1, -1}}};
  fx_case c = {"divmin", "Div", 0, NULL, 2, in, 1, NULL, 0, 0};
  harness h;
  build(&h, &c);
  ((int64_t *)h.in[0].data)[0] = INT64_MIN; /* not representable in the double fixture */
  kl_type out[1];
  assert_int_equal(infer(&h, out), KILN_OK);
  alloc_outputs(&h, out);
  assert_int_equal(run_kernel(&h), KILN_OK);
  assert_true(((int64_t *)h.out[0].data)[0] == INT64_MIN);
  assert_int_equal(((int64_t *)h.out[0].data)[1], 7);
  harness_free(&h);
}

static void test_gather_index_out_of_range(void **state) {
  (void)state;
  fx_tensor in[2] = {{KL_F32, 2, (const int64_t[]){3, 2}, (const double[]){1, 2, 3, 4, 5, 6}},
                     {KL_I64, 1, (const int64_t[]){2}, (const double[]){1, -4}}};
  fx_case c = {"gather_oob", "Gather", 0, NULL, 2, in, 1, NULL, 0, 0};
  harness h;
  assert_int_equal(run_case(&h, &c), KILN_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(h.e.msg, "-4"));
  harness_free(&h);
  /* The kernel checks too, for callers that did not run infer on these indices. */
  in[1].data = (const double[]){1, 0};
  build(&h, &c);
  kl_type out[1];
  assert_int_equal(infer(&h, out), KILN_OK);
  alloc_outputs(&h, out);
  ((int64_t *)h.in[1].data)[1] = 3;
  assert_int_equal(run_kernel(&h), KILN_ERR_INVALID_ARGUMENT);
  harness_free(&h);
}

static void test_dropout_training_refused(void **state) {
  (void)state;
  fx_tensor in[3] = {{KL_F32, 1, (const int64_t[]){2}, (const double[]){1, 2}},
                     {KL_F32, 0, NULL, (const double[]){0.5}},
                     {KL_BOOL, 0, NULL, (const double[]){1}}};
  fx_case c = {"dropout_train", "Dropout", 0, NULL, 3, in, 1, NULL, 0, 0};
  harness h;
  assert_int_equal(run_case(&h, &c), KILN_ERR_UNSUPPORTED);
  harness_free(&h);
}

/* A window whose taps all miss the input (in 1, kernel 2, dilation 5, pads 4 and 1: taps at
 * -4 and 1) has no maximum: Y is -inf, Indices -1; the average of nothing is NaN. */
static void test_pool_window_in_padding(void **state) {
  (void)state;
  fx_attr attrs[] = {{"kernel_shape", FX_INTS, 0, 0, NULL, 1, (const int64_t[]){2}},
                     {"dilations", FX_INTS, 0, 0, NULL, 1, (const int64_t[]){5}},
                     {"pads", FX_INTS, 0, 0, NULL, 2, (const int64_t[]){4, 1}}};
  fx_tensor in[1] = {{KL_F32, 3, (const int64_t[]){1, 1, 1}, (const double[]){3}}};
  fx_case c = {"maxpool_empty", "MaxPool", 3, attrs, 1, in, 2, NULL, 0, 0};
  harness h;
  assert_int_equal(run_case(&h, &c), KILN_OK);
  assert_int_equal(h.out[0].dims[2], 1);
  assert_true(isinf(((float *)h.out[0].data)[0]) && ((float *)h.out[0].data)[0] < 0);
  assert_int_equal(((int64_t *)h.out[1].data)[0], -1);
  harness_free(&h);
  c.op = "AveragePool";
  c.n_out = 1;
  assert_int_equal(run_case(&h, &c), KILN_OK);
  assert_true(isnan(((float *)h.out[0].data)[0]));
  harness_free(&h);
}

static void test_maxpool_skips_nan(void **state) {
  (void)state;
  fx_attr attrs[] = {{"kernel_shape", FX_INTS, 0, 0, NULL, 1, (const int64_t[]){3}}};
  fx_tensor in[1] = {
      {KL_F32, 3, (const int64_t[]){1, 1, 4}, (const double[]){NAN, -1, -3, NAN}}};
  fx_case c = {"maxpool_nan", "MaxPool", 1, attrs, 1, in, 2, NULL, 0, 0};
  harness h;
  assert_int_equal(run_case(&h, &c), KILN_OK);
  assert_true(((float *)h.out[0].data)[0] == -1.0f && ((float *)h.out[0].data)[1] == -1.0f);
  assert_int_equal(((int64_t *)h.out[1].data)[0], 1);
  harness_free(&h);
}

static void test_softmax_neg_inf(void **state) {
  (void)state;
  fx_tensor in[1] = {{KL_F32, 1, (const int64_t[]){3}, (const double[]){-INFINITY, 0, 0}}};
  fx_case c = {"softmax_inf", "Softmax", 0, NULL, 1, in, 1, NULL, 0, 0};
  harness h;
  assert_int_equal(run_case(&h, &c), KILN_OK);
  const float *y = h.out[0].data;
  assert_true(y[0] == 0.0f && y[1] == 0.5f && y[2] == 0.5f);
  harness_free(&h);
}

static void test_clip_keeps_nan(void **state) {
  (void)state;
  fx_tensor in[3] = {{KL_F32, 1, (const int64_t[]){3}, (const double[]){NAN, -5, 5}},
                     {KL_F32, 0, NULL, (const double[]){-1}},
                     {KL_F32, 1, (const int64_t[]){1}, (const double[]){1}}};
  fx_case c = {"clip_nan", "Clip", 0, NULL, 3, in, 1, NULL, 0, 0};
  harness h;
  assert_int_equal(run_case(&h, &c), KILN_OK);
  const float *y = h.out[0].data;
  assert_true(isnan(y[0]) && y[1] == -1.0f && y[2] == 1.0f);
  harness_free(&h);
}

int main(void) {
  enum { N_FIXTURES = sizeof fx_cases / sizeof fx_cases[0] };
  static const struct CMUnitTest extra[] = {
      cmocka_unit_test(test_div_int_by_zero),
      cmocka_unit_test(test_div_int64_min_by_minus_one_wraps),
      cmocka_unit_test(test_gather_index_out_of_range),
      cmocka_unit_test(test_dropout_training_refused),
      cmocka_unit_test(test_pool_window_in_padding),
      cmocka_unit_test(test_maxpool_skips_nan),
      cmocka_unit_test(test_softmax_neg_inf),
      cmocka_unit_test(test_clip_keeps_nan),
  };
  enum { N_EXTRA = sizeof extra / sizeof extra[0] };
  static struct CMUnitTest tests[N_FIXTURES + N_EXTRA];
  for (int i = 0; i < N_FIXTURES; i++)
    tests[i] = (struct CMUnitTest){fx_cases[i].name, test_fixture_case, NULL, NULL,
                                   (void *)&fx_cases[i]};
  for (int i = 0; i < N_EXTRA; i++) tests[N_FIXTURES + i] = extra[i];
  return _cmocka_run_group_tests("ref_kernels", tests, N_FIXTURES + N_EXTRA, NULL, NULL);
}
