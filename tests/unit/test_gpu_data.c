/* The GPU "data" kernels (src/backends/gpu/ops_data.c) against the reference kernels on
 * random data at awkward sizes, every node on the device: Softmax and LogSoftmax on
 * rows of 1, 7, 1000 and 1025 along the first, a middle and the last axis (one
 * work-item per row and one work-group per row); LayerNormalization with and without
 * B, along -1 and -2, with its Mean and InvStdDev outputs and a Scale that broadcasts
 * unevenly; RMSNormalization; kiln SkipLayerNorm with a broadcast Skip and its sum
 * output; Transpose of ranks 2 to 5; Concat on every axis with an empty input and of
 * many inputs; Slice stepping backwards and past the ends; Split by sizes (one empty)
 * and by count; Gather along axes 0 and 1 with negative and graph-input indices;
 * Expand, Tile, Pad in all four modes; every Reduce* over several axes, with and
 * without keepdims, over no axis, over an empty axis and over long sets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/gpu/opencl.h"
#include "runtime/session.h"
#include "testutil.h"

#define TOL TU_TOL(1e-5, 1e-4)

/* A graph with one float32 input x of dims. */
static kl_graph *graph_x(int rank, const int64_t *dims, int *x) {
  kl_graph *g = tu_graph_new();
  *x = tu_graph_input(g, "x", KL_F32, rank, dims);
  return g;
}

/* A node of op over in[] with n_out outputs, all graph outputs; returns the node. */
static int node_out(kl_graph *g, kl_op op, int n_in, const int *in, int n_out) {
  int out[8] = {0};
  assert_true(n_out <= 8);
  for (int k = 0; k < n_out; k++) {
    char name[16];
    snprintf(name, sizeof name, "y%d", k);
    out[k] = tu_graph_value(g, name);
  }
  int node = tu_graph_node(g, op, "n", n_in, in, n_out, out);
  for (int k = 0; k < n_out; k++) assert_int_equal(kl_graph_add_output(g, out[k], NULL), KILN_OK);
  return node;
}

/* A 1-D int64 constant. */
static int ints(kl_graph *g, int n, const int64_t *v) {
  return tu_graph_const(g, NULL, KL_I64, 1, (const int64_t[]){n}, v);
}

static void set_int(kl_graph *g, int node, const char *name, int64_t v) {
  assert_int_equal(kl_node_set_int(g, node, name, v, NULL), KILN_OK);
}

typedef struct shape_case {
  int rank;
  int64_t dims[KL_MAX_RANK];
  int axis;
} shape_case;

static void test_softmax(void **state) {
  (void)state;
  static const shape_case cases[] = {
      {2, {3, 1025}, -1}, {2, {5, 7}, -1},   {2, {1000, 3}, 0}, {3, {4, 1, 6}, 1},
      {3, {2, 1000, 3}, 1}, {3, {2, 7, 3}, -2}, {1, {1}, 0},    {2, {2, 1000}, 1},
  };
  static const kl_op ops[] = {KL_OP_Softmax, KL_OP_LogSoftmax};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int k = 0; k < 2; k++) {
      int x;
      kl_graph *g = graph_x(cases[c].rank, cases[c].dims, &x);
      set_int(g, node_out(g, ops[k], 1, &x, 1), "axis", cases[c].axis);
      char what[64];
      snprintf(what, sizeof what, "%s case %zu", kl_op_name(ops[k]), c);
      tu_gpu_check(g, what, 0, TOL, 1, true);
    }
}

typedef struct norm_case {
  int rank, axis, scale_rank;
  int64_t dims[KL_MAX_RANK], scale[KL_MAX_RANK];
  bool bias;
  int n_out;
} norm_case;

static void test_layernorm(void **state) {
  (void)state;
  static const norm_case cases[] = {
      {2, -1, 1, {3, 1025}, {1025}, true, 1},
      {2, -1, 1, {6, 7}, {7}, false, 1},
      {3, -2, 2, {2, 5, 7}, {5, 7}, true, 1},
      {3, -2, 1, {4, 9, 13}, {13}, false, 1},  /* Scale repeats within the row */
      {3, -2, 2, {2, 5, 7}, {5, 1}, true, 1},  /* neither the row nor a repeat of it */
      {2, -1, 1, {4, 1000}, {1000}, true, 3},  /* with Mean and InvStdDev */
      {2, -1, 1, {37, 768}, {768}, true, 3},   /* 8 rows per group: five groups, the last of 5 */
      {2, -1, 1, {9, 1024}, {1024}, false, 1}, /* the longest row held in registers */
      {3, 1, 2, {2, 3, 4}, {3, 4}, false, 3},
      {1, 0, 1, {1}, {1}, true, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const norm_case *t = &cases[c];
    int x;
    kl_graph *g = graph_x(t->rank, t->dims, &x);
    int in[3] = {x, tu_graph_input(g, "scale", KL_F32, t->scale_rank, t->scale), KL_ABSENT};
    if (t->bias) in[2] = tu_graph_input(g, "bias", KL_F32, t->scale_rank, t->scale);
    int node = node_out(g, KL_OP_LayerNormalization, t->bias ? 3 : 2, in, t->n_out);
    set_int(g, node, "axis", t->axis);
    assert_int_equal(kl_node_set_float(g, node, "epsilon", 1e-3f, NULL), KILN_OK);
    char what[64];
    snprintf(what, sizeof what, "LayerNormalization case %zu", c);
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
}

static void test_rmsnorm(void **state) {
  (void)state;
  static const norm_case cases[] = {
      {2, -1, 1, {3, 7}, {7}, false, 1},
      {3, -1, 1, {2, 2, 1000}, {1000}, false, 1},
      {3, 1, 2, {2, 33, 5}, {33, 5}, false, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const norm_case *t = &cases[c];
    int x;
    kl_graph *g = graph_x(t->rank, t->dims, &x);
    int in[2] = {x, tu_graph_input(g, "scale", KL_F32, t->scale_rank, t->scale)};
    set_int(g, node_out(g, KL_OP_RMSNormalization, 2, in, 1), "axis", t->axis);
    char what[64];
    snprintf(what, sizeof what, "RMSNormalization case %zu", c);
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
}

/* kiln.SkipLayerNorm (X, Skip, Scale, B?) -> Y, X + Skip?: built directly, and fused
 * from Add + LayerNormalization by the optimizer. */
static void test_skip_layernorm(void **state) {
  (void)state;
  static const struct {
    int64_t x[3], skip[3];
    bool bias;
    int n_out;
  } cases[] = {
      {{2, 9, 40}, {2, 9, 40}, true, 2},
      {{2, 9, 40}, {1, 9, 40}, false, 1}, /* Skip broadcast over the batch */
      {{1, 3, 1000}, {1, 3, 1000}, true, 1},
      {{3, 1, 100}, {3, 4, 100}, true, 2}, /* Y takes Skip's shape */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    kl_graph *g = tu_graph_new();
    int64_t h = cases[c].x[2];
    int in[4] = {tu_graph_input(g, "x", KL_F32, 3, cases[c].x),
                 tu_graph_input(g, "skip", KL_F32, 3, cases[c].skip),
                 tu_graph_input(g, "scale", KL_F32, 1, &h), KL_ABSENT};
    if (cases[c].bias) in[3] = tu_graph_input(g, "bias", KL_F32, 1, &h);
    node_out(g, KL_OP_KilnSkipLayerNorm, cases[c].bias ? 4 : 3, in, cases[c].n_out);
    char what[64];
    snprintf(what, sizeof what, "SkipLayerNorm case %zu", c);
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
  kl_graph *g = tu_graph_new();
  int64_t dims[3] = {2, 5, 24}, h = 24;
  int a = tu_graph_input(g, "a", KL_F32, 3, dims), b = tu_graph_input(g, "b", KL_F32, 3, dims);
  int s = TU_OP(g, Add, a, b);
  int scale = tu_graph_input(g, "scale", KL_F32, 1, &h);
  int bias = tu_graph_input(g, "bias", KL_F32, 1, &h);
  assert_int_equal(kl_graph_add_output(g, TU_OP(g, LayerNormalization, s, scale, bias), NULL),
                   KILN_OK);
  assert_int_equal(kl_graph_add_output(g, TU_OP(g, Relu, s), NULL), KILN_OK);
  assert_int_equal(tu_gpu_check(g, "Add + LayerNormalization fused", 2, TOL, 1, true), 2);
}

static void test_transpose(void **state) {
  (void)state;
  static const struct {
    int rank;
    int64_t dims[5], perm[5];
  } cases[] = {
      {2, {7, 13}, {1, 0}},
      {3, {3, 5, 7}, {2, 0, 1}},
      {3, {3, 1, 7}, {0, 2, 1}},
      {4, {2, 3, 5, 7}, {0, 2, 1, 3}},
      {4, {3, 5, 7, 9}, {3, 2, 1, 0}},
      {5, {2, 3, 5, 1, 3}, {4, 0, 3, 2, 1}},
      {5, {3, 2, 3, 5, 2}, {0, 1, 2, 4, 3}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int x;
    kl_graph *g = graph_x(cases[c].rank, cases[c].dims, &x);
    int node = node_out(g, KL_OP_Transpose, 1, &x, 1);
    assert_int_equal(kl_node_set_ints(g, node, "perm", cases[c].perm, cases[c].rank, NULL),
                     KILN_OK);
    char what[64];
    snprintf(what, sizeof what, "Transpose case %zu", c);
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
  int x; /* no perm: the dims reversed */
  kl_graph *g = graph_x(3, (const int64_t[]){4, 5, 6}, &x);
  node_out(g, KL_OP_Transpose, 1, &x, 1);
  tu_gpu_check(g, "Transpose without perm", 0, TOL, 1, true);
}

static void test_concat(void **state) {
  (void)state;
  for (int axis = -1; axis < 3; axis++) {
    kl_graph *g = tu_graph_new();
    static const int64_t along[3] = {3, 0, 2};
    int in[3], a = axis < 0 ? axis + 3 : axis;
    for (int k = 0; k < 3; k++) {
      int64_t dims[3] = {4, 5, 6};
      dims[a] = along[k];
      char name[16];
      snprintf(name, sizeof name, "x%d", k);
      in[k] = tu_graph_input(g, name, KL_F32, 3, dims);
    }
    set_int(g, node_out(g, KL_OP_Concat, 3, in, 1), "axis", axis);
    char what[64];
    snprintf(what, sizeof what, "Concat axis %d", axis);
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
  kl_graph *g = tu_graph_new(); /* many inputs: three of them over and over */
  int x[3], in[40];
  for (int k = 0; k < 3; k++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", k);
    x[k] = tu_graph_input(g, name, KL_F32, 2, (const int64_t[]){1 + k, 17});
  }
  for (int k = 0; k < 40; k++) in[k] = x[k % 3];
  set_int(g, node_out(g, KL_OP_Concat, 40, in, 1), "axis", 0);
  tu_gpu_check(g, "Concat of 40", 0, TOL, 1, true);
}

typedef struct slice_case {
  int n;
  int64_t starts[3], ends[3], axes[3], steps[3];
  bool has_axes, has_steps;
} slice_case;

static void test_slice(void **state) {
  (void)state;
  static const slice_case cases[] = {
      {3, {-1, 8, 0}, {-100, 1, 100}, {0, 1, 2}, {-2, -3, 1}, true, true},
      {1, {1}, {INT64_MAX}, {-1}, {2}, true, true},
      {1, {2}, {-1}, {0}, {1}, false, false},
      {2, {100, -2}, {-100, 0}, {2, 0}, {-1, -1}, true, true},
      {2, {0, 3}, {INT64_MAX, 4}, {0, 1}, {INT64_MAX, 1}, true, true},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const slice_case *t = &cases[c];
    int x;
    kl_graph *g = graph_x(3, (const int64_t[]){7, 9, 5}, &x);
    int in[5] = {x, ints(g, t->n, t->starts), ints(g, t->n, t->ends), KL_ABSENT, KL_ABSENT};
    if (t->has_axes) in[3] = ints(g, t->n, t->axes);
    if (t->has_steps) in[4] = ints(g, t->n, t->steps);
    node_out(g, KL_OP_Slice, t->has_steps ? 5 : t->has_axes ? 4 : 3, in, 1);
    char what[64];
    snprintf(what, sizeof what, "Slice case %zu", c);
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
}

static void test_split(void **state) {
  (void)state;
  int x;
  kl_graph *g = graph_x(3, (const int64_t[]){4, 10, 3}, &x);
  int in[2] = {x, ints(g, 3, (const int64_t[]){3, 0, 7})};
  set_int(g, node_out(g, KL_OP_Split, 2, in, 3), "axis", 1);
  tu_gpu_check(g, "Split by sizes", 0, TOL, 1, true);
  g = graph_x(2, (const int64_t[]){5, 10}, &x);
  int node = node_out(g, KL_OP_Split, 1, &x, 3);
  set_int(g, node, "axis", -1);
  set_int(g, node, "num_outputs", 3);
  tu_gpu_check(g, "Split by count", 0, TOL, 1, true);
  g = graph_x(2, (const int64_t[]){6, 3}, &x);
  node_out(g, KL_OP_Split, 1, &x, 2);
  tu_gpu_check(g, "Split in halves along 0", 0, TOL, 1, true);
}

static void test_gather(void **state) {
  (void)state;
  for (int axis = 0; axis < 2; axis++) { /* constant indices, some negative */
    int x;
    kl_graph *g = graph_x(3, (const int64_t[]){6, 5, 7}, &x);
    int idx = ints(g, 6, (const int64_t[]){-1, 0, 3, -5, 2, 4});
    set_int(g, node_out(g, KL_OP_Gather, 2, (const int[]){x, idx}, 1), "axis", axis);
    char what[64];
    snprintf(what, sizeof what, "Gather axis %d, constant indices", axis);
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
  int x; /* indices from the caller, 2-D, along the last axis */
  kl_graph *g = graph_x(3, (const int64_t[]){3, 4, 9}, &x);
  int idx = tu_graph_input(g, "i", KL_I64, 2, (const int64_t[]){2, 5});
  set_int(g, node_out(g, KL_OP_Gather, 2, (const int[]){x, idx}, 1), "axis", -1);
  tu_gpu_check(g, "Gather axis -1, input indices", 0, TOL, 9, true);
  g = graph_x(2, (const int64_t[]){1000, 24}, &x); /* an embedding lookup */
  idx = tu_graph_input(g, "i", KL_I64, 2, (const int64_t[]){2, 11});
  node_out(g, KL_OP_Gather, 2, (const int[]){x, idx}, 1);
  tu_gpu_check(g, "Gather rows", 0, TOL, 1000, true);
  g = graph_x(2, (const int64_t[]){5, 6}, &x); /* a scalar index drops the axis */
  idx = tu_graph_const(g, NULL, KL_I64, 0, NULL, (const int64_t[]){-2});
  set_int(g, node_out(g, KL_OP_Gather, 2, (const int[]){x, idx}, 1), "axis", 1);
  tu_gpu_check(g, "Gather scalar index", 0, TOL, 1, true);
}

/* An index out of range fails the run with a device Gather as on the CPU, naming the
 * node, the index and where it is (indices the host holds are checked by the node's
 * shape inference before its kernel runs); the next run with good indices succeeds. */
static void test_gather_out_of_range(void **state) {
  (void)state;
  int x;
  kl_graph *g = graph_x(2, (const int64_t[]){10, 4}, &x);
  int idx = tu_graph_input(g, "i", KL_I64, 1, (const int64_t[]){3});
  int y1 = tu_graph_value(g, NULL), y2 = tu_graph_value(g, NULL);
  tu_graph_node(g, KL_OP_Relu, "first", 1, &x, 1, &y1);
  tu_graph_node(g, KL_OP_Gather, "lookup", 2, (const int[]){y1, idx}, 1, &y2);
  assert_int_equal(kl_graph_add_output(g, y2, NULL), KILN_OK);
  kiln_model *m = tu_model_of(g, 0);
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "device", "opencl"), KILN_OK);
  kiln_session *s = NULL;
  assert_int_equal(kiln_session_create(m, o, &s), KILN_OK);
  assert_string_equal(kl_session_node_device(s, 1), kl_session_node_device(s, 0));
  assert_string_not_equal(kl_session_node_device(s, 1), "cpu"); /* the Gather on the device */
  float xs[40];
  for (int i = 0; i < 40; i++) xs[i] = (float)i;
  const struct {
    int64_t idx[3];
    const char *want;
  } cases[] = {
      {{1, 10, 2}, "has 10 at element 1, expected -10 to 9"},
      {{-11, 0, 3}, "has -11 at element 0, expected -10 to 9"},
      {{-10, 9, 0}, NULL},
  };
  for (int c = 0; c < 3; c++) {
    assert_int_equal(kiln_session_set_input(s, "x", KILN_DTYPE_FLOAT32, 2, (const int64_t[]){10, 4},
                                            xs, sizeof xs), KILN_OK);
    assert_int_equal(kiln_session_set_input(s, "i", KILN_DTYPE_INT64, 1, (const int64_t[]){3},
                                            cases[c].idx, sizeof cases[c].idx), KILN_OK);
    kiln_status st = kiln_session_run(s);
    if (!cases[c].want) {
      assert_int_equal(st, KILN_OK);
      kiln_tensor_info info;
      const float *y;
      assert_int_equal(kiln_session_get_output(s, 0, &info, (const void **)&y), KILN_OK);
      assert_float_equal(y[0], 0.0f, 0); /* row 0 */
      assert_float_equal(y[5], 37.0f, 0); /* row 9, column 1 */
      continue;
    }
    assert_int_equal(st, KILN_ERR_INVALID_ARGUMENT);
    tu_assert_contains(kiln_session_error(s), "node 'lookup' (Gather)");
    tu_assert_contains(kiln_session_error(s), cases[c].want);
  }
  kiln_session_free(s);
  kiln_options_free(o);
  kiln_model_free(m);
}

/* The kernel's own check, for indices only the device holds (which no node's inference
 * sees): an index out of range gives NaN and raises the session's error flag with the
 * node, the element, the index and the axis length (opencl.h); reading it clears it. */
static void test_gather_flag(void **state) {
  (void)state;
  kl_err e = {0};
  kl_cl_device *d = NULL;
  kl_cl *c = NULL;
  if (kl_cl_device_open("opencl", &d, &e) != KILN_OK) fail_msg("%s", e.msg);
  if (kl_cl_open_on(d, &c, &e) != KILN_OK) fail_msg("%s", e.msg);
  kl_cl_device_release(d); /* the session's reference keeps it */
  float x[12];
  for (int i = 0; i < 12; i++) x[i] = (float)i;
  int64_t idx[2] = {-3, 7}; /* X [4, 3] along axis 0: row 1, then out of range */
  kl_dev_buf bx, bi, by;
  assert_int_equal(kl_cl_alloc(c, sizeof x, &bx, &e), KILN_OK);
  assert_int_equal(kl_cl_alloc(c, sizeof idx, &bi, &e), KILN_OK);
  assert_int_equal(kl_cl_alloc(c, 6 * sizeof(float), &by, &e), KILN_OK);
  assert_int_equal(kl_cl_upload(c, &bx, x, sizeof x, &e), KILN_OK);
  assert_int_equal(kl_cl_upload(c, &bi, idx, sizeof idx, &e), KILN_OK);
  kl_tensor tx = {KL_F32, 2, {4, 3}, &bx}, ti = {KL_I64, 1, {2}, &bi}, ty = {KL_F32, 2, {2, 3}, &by};
  kl_cl_set_node(c, 5);
  const kl_tensor *flag = kl_cl_flag(c, &e);
  assert_non_null(flag);
  size_t global = 6, local = 1;
  assert_int_equal(KL_CL_LAUNCH(c, "kl_gather", 1, &global, &local, &e, CLA_T(&tx), CLA_T(&ti),
                                CLA_T(&ty), CLA_L(6), CLA_L(4), CLA_L(2), CLA_L(3), CLA_T(flag),
                                CLA_I(kl_cl_node(c))),
                   KILN_OK);
  assert_int_equal(kl_cl_finish(c, &e), KILN_OK);
  int32_t f[KL_CL_FLAG_INTS];
  assert_int_equal(kl_cl_flag_read(c, f, &e), KILN_OK);
  assert_int_equal(f[0], 6);                /* node 5 */
  assert_int_equal(f[1], 1);                /* element 1 */
  assert_int_equal(f[2], 0);
  assert_int_equal(f[3], 7), assert_int_equal(f[4], 0); /* the index */
  assert_int_equal(f[5], 4), assert_int_equal(f[6], 0); /* the axis length */
  float y[6];
  assert_int_equal(kl_cl_download(c, y, &by, sizeof y, &e), KILN_OK);
  for (int k = 0; k < 3; k++) {
    assert_float_equal(y[k], x[3 + k], 0);
    assert_true(isnan(y[3 + k]));
  }
  assert_int_equal(kl_cl_flag_read(c, f, &e), KILN_OK); /* cleared by the first read */
  for (int k = 0; k < KL_CL_FLAG_INTS; k++) assert_int_equal(f[k], 0);
  kl_cl_free(c, &bx);
  kl_cl_free(c, &bi);
  kl_cl_free(c, &by);
  kl_cl_close(c);
}

static void test_expand_tile(void **state) {
  (void)state;
  int x;
  kl_graph *g = graph_x(3, (const int64_t[]){3, 1, 5}, &x);
  node_out(g, KL_OP_Expand, 2, (const int[]){x, ints(g, 4, (const int64_t[]){2, 3, 4, 5})}, 1);
  tu_gpu_check(g, "Expand", 0, TOL, 1, true);
  g = graph_x(1, (const int64_t[]){1}, &x);
  node_out(g, KL_OP_Expand, 2, (const int[]){x, ints(g, 2, (const int64_t[]){6, 7})}, 1);
  tu_gpu_check(g, "Expand a scalar", 0, TOL, 1, true);
  g = graph_x(3, (const int64_t[]){2, 3, 1}, &x);
  node_out(g, KL_OP_Tile, 2, (const int[]){x, ints(g, 3, (const int64_t[]){2, 1, 3})}, 1);
  tu_gpu_check(g, "Tile", 0, TOL, 1, true);
  g = graph_x(2, (const int64_t[]){3, 4}, &x);
  node_out(g, KL_OP_Tile, 2, (const int[]){x, ints(g, 2, (const int64_t[]){3, 2})}, 1);
  tu_gpu_check(g, "Tile 2-D", 0, TOL, 1, true);
}

static void test_pad(void **state) {
  (void)state;
  static const char *modes[] = {"constant", "reflect", "edge", "wrap"};
  for (int m = 0; m < 4; m++) {
    int x;
    kl_graph *g = graph_x(3, (const int64_t[]){3, 4, 5}, &x);
    int pads = ints(g, 6, (const int64_t[]){1, 0, 2, 2, -1, 3});
    int value = tu_graph_const(g, NULL, KL_F32, 0, NULL, (const float[]){1.5f});
    int node = node_out(g, KL_OP_Pad, 3, (const int[]){x, pads, value}, 1);
    assert_int_equal(kl_node_set_string(g, node, "mode", modes[m], NULL), KILN_OK);
    char what[64];
    snprintf(what, sizeof what, "Pad %s", modes[m]);
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
  int x; /* pads for the named axes only, the value absent: zeros */
  kl_graph *g = graph_x(3, (const int64_t[]){2, 3, 4}, &x);
  int pads = ints(g, 2, (const int64_t[]){2, 3});
  node_out(g, KL_OP_Pad, 4, (const int[]){x, pads, KL_ABSENT, ints(g, 1, (const int64_t[]){-2})},
           1);
  tu_gpu_check(g, "Pad along axes", 0, TOL, 1, true);
}

typedef struct reduce_case {
  int rank, n_axes;
  int64_t dims[4], axes[4];
  int keepdims, noop;
} reduce_case;

static void test_reduce(void **state) {
  (void)state;
  static const reduce_case cases[] = {
      {4, 2, {3, 4, 5, 6}, {1, 3}, 1, 0},
      {4, 2, {3, 4, 5, 6}, {0, -2}, 0, 0},
      {3, 1, {2, 3, 7}, {-1}, 1, 0},
      {3, 0, {2, 3, 7}, {0}, 0, 0},  /* no axes: all */
      {3, 0, {2, 3, 7}, {0}, 1, 1},  /* no axes, noop_with_empty_axes: elementwise */
      {2, 1, {3, 1025}, {1}, 0, 0},  /* long sets: a work-group each */
      {2, 1, {1000, 3}, {0}, 1, 0},
      {3, 2, {40, 3, 30}, {0, 2}, 0, 0},
  };
  static const kl_op ops[] = {KL_OP_ReduceSum, KL_OP_ReduceMean, KL_OP_ReduceMax,
                              KL_OP_ReduceMin, KL_OP_ReduceProd, KL_OP_ReduceL1,
                              KL_OP_ReduceL2, KL_OP_ReduceSumSquare, KL_OP_ReduceLogSum,
                              KL_OP_ReduceLogSumExp};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
      const reduce_case *t = &cases[c];
      int x;
      kl_graph *g = graph_x(t->rank, t->dims, &x);
      if (ops[k] == KL_OP_ReduceLogSum) x = TU_OP(g, Abs, x); /* a positive sum */
      int in[2] = {x, t->n_axes ? ints(g, t->n_axes, t->axes) : KL_ABSENT};
      int node = node_out(g, ops[k], t->n_axes ? 2 : 1, in, 1);
      set_int(g, node, "keepdims", t->keepdims);
      if (t->noop) set_int(g, node, "noop_with_empty_axes", 1);
      char what[64];
      snprintf(what, sizeof what, "%s case %zu", kl_op_name(ops[k]), c);
      tu_gpu_check(g, what, 0, TOL, 1, true);
    }
  /* over an empty axis: the identity (Mean NaN), read from no input element; the ops
   * whose identity is infinite are left out (the check takes inf - inf for a mismatch) */
  for (size_t k = 0; k < 8; k++) {
    if (ops[k] == KL_OP_ReduceMax || ops[k] == KL_OP_ReduceMin) continue;
    int x;
    kl_graph *g = graph_x(2, (const int64_t[]){3, 0}, &x);
    int in[2] = {x, ints(g, 1, (const int64_t[]){1})};
    set_int(g, node_out(g, ops[k], 2, in, 1), "keepdims", 0);
    char what[64];
    snprintf(what, sizeof what, "%s over an empty axis", kl_op_name(ops[k]));
    tu_gpu_check(g, what, 0, TOL, 1, true);
  }
}

/* A chain that stays on the device: the intermediate tensors sit at offsets inside the
 * allocator's segments. */
static void test_chain(void **state) {
  (void)state;
  int x;
  kl_graph *g = graph_x(3, (const int64_t[]){2, 6, 6}, &x);
  int parts[2] = {tu_graph_value(g, "p0"), tu_graph_value(g, "p1")};
  tu_graph_node(g, KL_OP_Split, "split", 1, &x, 2, parts);
  int t = tu_graph_op(g, KL_OP_Transpose, 1, &parts[1]);
  assert_int_equal(kl_node_set_ints(g, g->n_nodes - 1, "perm", (const int64_t[]){0, 2, 1}, 3,
                                    NULL), KILN_OK);
  int cat = TU_OP(g, Concat, parts[0], t);
  set_int(g, g->n_nodes - 1, "axis", 1);
  int sm = TU_OP(g, Softmax, cat);
  int r = TU_OP(g, ReduceMean, sm, ints(g, 1, (const int64_t[]){1}));
  assert_int_equal(kl_graph_add_output(g, r, NULL), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, sm, NULL), KILN_OK);
  assert_int_equal(tu_gpu_check(g, "chain", 0, TOL, 1, true), 5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_softmax),   cmocka_unit_test(test_layernorm),
      cmocka_unit_test(test_rmsnorm),   cmocka_unit_test(test_skip_layernorm),
      cmocka_unit_test(test_transpose), cmocka_unit_test(test_concat),
      cmocka_unit_test(test_slice),     cmocka_unit_test(test_split),
      cmocka_unit_test(test_gather),    cmocka_unit_test(test_gather_out_of_range),
      cmocka_unit_test(test_gather_flag),
      cmocka_unit_test(test_expand_tile),
      cmocka_unit_test(test_pad),       cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_chain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
