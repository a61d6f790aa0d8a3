/* Helpers shared by the unit tests: see testutil.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export/onnx_export.h"
#include "import/onnx.h"
#include "runtime/runtime.h"
#include "runtime/session.h"

#include "testutil.h"

/* ---- failing at the caller's line ---- */

void tu_fail_at(const char *file, int line, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  print_error("%s\n", msg);
  _fail(file, line);
}

/* n elements of size bytes, zeroed; at least one byte so that the pointer is never NULL. */
static void *alloc_elems(int64_t n, size_t size) {
  size_t bytes;
  assert_true(n >= 0);
  assert_false(__builtin_mul_overflow((size_t)n, size, &bytes));
  void *p = calloc(bytes ? bytes : 1, 1);
  assert_non_null(p);
  return p;
}

/* Product of dims, which a test's shapes must not overflow. */
static int64_t numel_of(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) assert_false(__builtin_mul_overflow(n, dims[d], &n));
  return n;
}

/* ---- types and tolerances ---- */

kl_type tu_type(kl_dtype dt, int rank, const int64_t *dims) {
  kl_type t;
  assert_true(rank <= KL_MAX_RANK);
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rank = rank;
  for (int i = 0; i < rank; i++) {
    t.dims[i].size = dims[i] >= 0 ? dims[i] : -1;
    t.dims[i].sym = dims[i] <= B ? (int32_t)(B - dims[i]) : -1;
  }
  return t;
}

/* NaN matches only NaN; equality first so that infinities match themselves. */
static bool close_to(double got, double want, tu_tol tol) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
  return got == want || fabs(got - want) <= tol.atol + tol.rtol * fabs(want);
}

/* ---- the one-node fixture ---- */

static void free_tensors(tu_fixture *f) {
  for (int i = 0; i < TU_MAX_IO; i++) {
    free(f->tin[i].data);
    free(f->tout[i].data);
    memset(&f->tin[i], 0, sizeof f->tin[i]);
    memset(&f->tout[i], 0, sizeof f->tout[i]);
  }
}

int tu_setup(void **state) {
  tu_fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  *state = f;
  return 0;
}

void tu_fixture_clear(tu_fixture *f) {
  free_tensors(f);
  kl_graph_free(f->g);
  memset(f, 0, sizeof *f);
}

int tu_teardown(void **state) {
  tu_fixture_clear(*state);
  free(*state);
  return 0;
}

void tu_one_node(tu_fixture *f, const char *op, int n_in, int n_out) {
  assert_true(n_in >= 0 && n_in <= TU_MAX_IO && n_out >= 0 && n_out <= TU_MAX_IO);
  bool kiln = strncmp(op, "kiln.", 5) == 0; /* an op of kiln's own domain */
  kl_op o = kl_op_lookup(kiln ? "kiln" : "", kiln ? op + 5 : op);
  if (o == KL_OP_COUNT) fail_msg("no op %s", op);
  free_tensors(f);
  kl_graph_free(f->g);
  f->g = tu_graph_new();
  assert_int_equal(kl_graph_symbol(f->g, "batch"), 0);
  assert_int_equal(kl_graph_symbol(f->g, "seq"), 1);
  int ins[TU_MAX_IO], outs[TU_MAX_IO];
  for (int i = 0; i < n_in; i++) ins[i] = tu_graph_value(f->g, NULL);
  for (int i = 0; i < n_out; i++) outs[i] = tu_graph_value(f->g, NULL);
  f->node = tu_graph_node(f->g, o, op, n_in, ins, n_out, outs);
  f->n_in = n_in;
  f->n_out = n_out;
  for (int i = 0; i < TU_MAX_IO; i++) {
    f->present[i] = true;
    f->data[i] = NULL;
  }
  kl_err_clear(&f->e);
}

void tu_input(tu_fixture *f, int i, kl_type t) {
  f->in[i] = t;
  f->present[i] = true;
}

void tu_absent(tu_fixture *f, int i) { f->present[i] = false; }

void tu_contents(tu_fixture *f, int i, const void *data) { f->data[i] = data; }

void tu_input_ints(tu_fixture *f, int i, int rank, const int64_t *v, int64_t n) {
  tu_input(f, i, rank == 0 ? TY0(KL_I64) : tu_type(KL_I64, 1, &n));
  f->data[i] = v;
}

void tu_attr_int(tu_fixture *f, const char *name, int64_t v) {
  assert_int_equal(kl_node_set_int(f->g, f->node, name, v, &f->e), KILN_OK);
}

void tu_attr_float(tu_fixture *f, const char *name, float v) {
  assert_int_equal(kl_node_set_float(f->g, f->node, name, v, &f->e), KILN_OK);
}

void tu_attr_string(tu_fixture *f, const char *name, const char *v) {
  assert_int_equal(kl_node_set_string(f->g, f->node, name, v, &f->e), KILN_OK);
}

void tu_attr_ints(tu_fixture *f, const char *name, const int64_t *v, int n) {
  assert_int_equal(kl_node_set_ints(f->g, f->node, name, v, n, &f->e), KILN_OK);
}

/* Input i becomes tensor t (whose data f now owns): its type and contents for infer. */
static void set_tensor(tu_fixture *f, int i, kl_tensor t) {
  assert_true(i >= 0 && i < TU_MAX_IO && t.rank >= 0 && t.rank <= KL_MAX_RANK);
  free(f->tin[i].data);
  f->tin[i] = t;
  kl_type ty;
  memset(&ty, 0, sizeof ty);
  ty.dtype = t.dtype;
  kl_type_set_shape(&ty, t.rank, t.dims);
  tu_input(f, i, ty);
  f->data[i] = t.data;
}

void tu_tensor(tu_fixture *f, int i, kl_dtype dt, int rank, const int64_t *dims,
               const double *vals) {
  kl_tensor t = {.dtype = dt, .rank = rank};
  assert_true(rank >= 0 && rank <= KL_MAX_RANK);
  if (rank) memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  int64_t n = numel_of(rank, t.dims);
  t.data = alloc_elems(n, kl_dtype_size(dt));
  for (int64_t k = 0; k < n; k++) kl_store_f64(t.data, dt, (size_t)k, vals[k]);
  set_tensor(f, i, t);
}

void tu_tensor_copy(tu_fixture *f, int i, const tu_in *in) {
  if (in->dt == KL_UNDEFINED) {
    free(f->tin[i].data);
    memset(&f->tin[i], 0, sizeof f->tin[i]);
    tu_absent(f, i);
    return;
  }
  kl_tensor t = {.dtype = in->dt, .rank = in->rank};
  assert_true(in->rank >= 0 && in->rank <= KL_MAX_RANK);
  memcpy(t.dims, in->dims, sizeof t.dims);
  size_t size = kl_dtype_size(in->dt);
  int64_t n = numel_of(in->rank, in->dims);
  t.data = alloc_elems(n, size);
  if (n) memcpy(t.data, in->data, (size_t)n * size); /* alloc_elems checked the product */
  set_tensor(f, i, t);
}

kiln_status tu_infer(tu_fixture *f) {
  const kl_type *tp[TU_MAX_IO];
  const void *dp[TU_MAX_IO];
  for (int i = 0; i < f->n_in; i++) {
    tp[i] = f->present[i] ? &f->in[i] : NULL;
    dp[i] = f->present[i] ? f->data[i] : NULL;
  }
  for (int k = 0; k < f->n_out; k++) {
    memset(&f->out[k], 0, sizeof f->out[k]);
    f->out[k].rank = -1;
  }
  kl_err_clear(&f->e);
  const kl_node *n = &f->g->nodes[f->node];
  kl_infer_ctx c = {.g = f->g, .node = n, .n_in = f->n_in, .n_out = f->n_out, .in = tp,
                    .data = dp, .out = f->out, .e = &f->e};
  return (kiln_status)kl_op_get(n->op)->infer(&c);
}

kiln_status tu_infer_with(tu_fixture *f, const kl_type *const *in, const void *const *data) {
  for (int i = 0; i < f->n_in; i++) {
    if (in[i]) tu_input(f, i, *in[i]);
    else tu_absent(f, i);
    f->data[i] = data[i];
  }
  return tu_infer(f);
}

/* Output k's tensor, shaped as infer said and zeroed. */
static kl_tensor *alloc_output(tu_fixture *f, int k) {
  const kl_type *t = &f->out[k];
  if (!kl_type_is_concrete(t)) fail_msg("output %d is not concrete after infer", k);
  kl_tensor *y = &f->tout[k];
  free(y->data);
  y->dtype = t->dtype;
  y->rank = t->rank;
  for (int d = 0; d < t->rank; d++) y->dims[d] = t->dims[d].size;
  y->data = alloc_elems(numel_of(y->rank, y->dims), kl_dtype_size(y->dtype));
  return y;
}

kiln_status tu_kernel(tu_fixture *f) {
  const kl_tensor *in[TU_MAX_IO];
  kl_tensor *out[TU_MAX_IO];
  for (int i = 0; i < f->n_in; i++) {
    if (f->present[i] && f->tin[i].dtype == KL_UNDEFINED)
      fail_msg("input %d is present but has no tensor to run on", i);
    in[i] = f->present[i] ? &f->tin[i] : NULL;
  }
  for (int k = 0; k < f->n_out; k++) out[k] = alloc_output(f, k);
  const kl_node *n = &f->g->nodes[f->node];
  kl_kernel_fn ref = kl_op_get(n->op)->ref;
  assert_non_null(ref);
  kl_kernel_ctx c = {.node = n, .n_in = f->n_in, .n_out = f->n_out, .in = in, .out = out,
                     .e = &f->e, .threads = 1, .state = NULL};
  return (kiln_status)ref(&c);
}

kiln_status tu_run(tu_fixture *f) {
  kiln_status st = tu_infer(f);
  return st != KILN_OK ? st : tu_kernel(f);
}

kiln_status tu_run_on(tu_fixture *f, const tu_in *in) {
  for (int i = 0; i < f->n_in; i++) tu_tensor_copy(f, i, &in[i]);
  return tu_run(f);
}

void tu_expect_type_at(const tu_fixture *f, int k, kl_type want, const char *file, int line) {
  const kl_type *got = &f->out[k];
  bool same = got->dtype == want.dtype && got->rank == want.rank;
  for (int i = 0; same && i < want.rank; i++)
    same = got->dims[i].size == want.dims[i].size &&
           (want.dims[i].size >= 0 || got->dims[i].sym == want.dims[i].sym);
  if (same) return;
  char a[256], b[256];
  kl_type_format(f->g, got, a, sizeof a);
  kl_type_format(f->g, &want, b, sizeof b);
  tu_fail_at(file, line, "output %d is %s, expected %s", k, a, b);
}

void tu_expect_ok_at(tu_fixture *f, kl_type want, const char *file, int line) {
  kiln_status st = tu_infer(f);
  if (st != KILN_OK) tu_fail_at(file, line, "infer failed (%d): %s", st, f->e.msg);
  else tu_expect_type_at(f, 0, want, file, line);
}

void tu_expect_fail_at(tu_fixture *f, kiln_status code, const char *part, const char *file,
                       int line) {
  tu_assert_status_at(tu_infer(f), code, f->e.msg, part, file, line);
}

void tu_expect_run_at(tu_fixture *f, const char *file, int line) {
  kiln_status st = tu_run(f);
  if (st != KILN_OK) tu_fail_at(file, line, "run failed (%d): %s", st, f->e.msg);
}

/* ---- checks on numbers, tensors and messages ---- */

void tu_assert_close_at(const void *got, kl_dtype got_dt, const void *want, kl_dtype want_dt,
                        int64_t n, tu_tol tol, const char *file, int line) {
  for (int64_t i = 0; i < n; i++) {
    double g = kl_load_f64(got, got_dt, (size_t)i), w = kl_load_f64(want, want_dt, (size_t)i);
    if (!close_to(g, w, tol)) {
      tu_fail_at(file, line, "element %lld is %.17g, expected %.17g (atol %g, rtol %g)",
              (long long)i, g, w, tol.atol, tol.rtol);
      return;
    }
  }
}

static void expect_numel(const kl_tensor *t, int64_t n, const char *file, int line) {
  int64_t got = kl_tensor_numel(t);
  if (got != n) tu_fail_at(file, line, "tensor has %lld elements, expected %lld", (long long)got,
                        (long long)n);
}

void tu_assert_tensor_at(const kl_tensor *t, tu_tol tol, const double *want, int64_t n,
                         const char *file, int line) {
  expect_numel(t, n, file, line);
  tu_assert_close_at(t->data, t->dtype, want, KL_F64, n, tol, file, line);
}

static void expect_dtype(const kl_tensor *t, kl_dtype want, const char *file, int line) {
  if (t->dtype != want)
    tu_fail_at(file, line, "tensor is %s, expected %s", kl_dtype_name(t->dtype),
            kl_dtype_name(want));
}

void tu_assert_f32_at(const kl_tensor *t, const float *want, int64_t n, tu_tol tol,
                      const char *file, int line) {
  expect_dtype(t, KL_F32, file, line);
  expect_numel(t, n, file, line);
  tu_assert_close_at(t->data, KL_F32, want, KL_F32, n, tol, file, line);
}

void tu_assert_i64_at(const kl_tensor *t, const int64_t *want, int64_t n, const char *file,
                      int line) {
  expect_dtype(t, KL_I64, file, line);
  expect_numel(t, n, file, line);
  const int64_t *got = t->data;
  for (int64_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      tu_fail_at(file, line, "element %lld is %lld, expected %lld", (long long)i,
              (long long)got[i], (long long)want[i]);
      return;
    }
}

void tu_assert_dims_at(const kl_tensor *t, int rank, const int64_t *dims, const char *file,
                       int line) {
  bool same = t->rank == rank;
  for (int d = 0; same && d < rank; d++) same = t->dims[d] == dims[d];
  if (same) return;
  char a[160] = "", b[160] = "";
  for (int d = 0, ua = 0, ub = 0; d < KL_MAX_RANK; d++) {
    if (d < t->rank && ua < (int)sizeof a)
      ua += snprintf(a + ua, sizeof a - (size_t)ua, "%s%lld", d ? "," : "",
                     (long long)t->dims[d]);
    if (d < rank && ub < (int)sizeof b)
      ub += snprintf(b + ub, sizeof b - (size_t)ub, "%s%lld", d ? "," : "", (long long)dims[d]);
  }
  tu_fail_at(file, line, "tensor has shape [%s], expected [%s]", a, b);
}

void tu_assert_contains_at(const char *hay, const char *needle, const char *file, int line) {
  if (!strstr(hay, needle)) tu_fail_at(file, line, "\"%s\" does not contain \"%s\"", hay, needle);
}

void tu_assert_status_at(int st, int want, const char *msg, const char *part, const char *file,
                         int line) {
  if (st != want)
    tu_fail_at(file, line, "status %d (%s), expected %d (%s); message: %s", st,
            kiln_status_string((kiln_status)st), want, kiln_status_string((kiln_status)want),
            msg);
  else if (part) tu_assert_contains_at(msg, part, file, line);
}

/* ---- graphs ---- */

int tu_dead_rows_mask(kl_graph *g, int rank, const int64_t *dims, float fill) {
  int64_t n = 1, len = rank > 0 ? dims[rank - 1] : 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  float *m = malloc(sizeof(float) * (size_t)(n ? n : 1));
  assert_non_null(m);
  for (int64_t i = 0; i < n; i++)
    m[i] = i / len % 3 == 1 || i % len % 4 == 3 ? fill : 0;
  int v = tu_graph_const(g, "mask", KL_F32, rank, dims, m);
  free(m);
  return v;
}

kl_graph *tu_mha_graph(const tu_mha_case *c) {
  kl_graph *g = tu_graph_new();
  int q = tu_graph_input(g, "q", KL_F32, 3, c->q);
  int k = c->packed ? KL_ABSENT : tu_graph_input(g, "k", KL_F32, 3, c->k);
  int v = c->packed ? KL_ABSENT : tu_graph_input(g, "v", KL_F32, 3, c->v);
  int mask = !c->mask_rank ? KL_ABSENT
             : c->dead_fill != 0 ? tu_dead_rows_mask(g, c->mask_rank, c->mask, c->dead_fill)
                                 : tu_graph_input(g, "mask", KL_F32, c->mask_rank, c->mask);
  int count = mask != KL_ABSENT ? 4 : c->packed ? 1 : 3;
  int n = tu_graph_output_node(g, KL_OP_KilnMultiHeadAttention, count, (int[]){q, k, v, mask}, 1);
  assert_int_equal(kl_node_set_int(g, n, "num_heads", c->heads, NULL), KILN_OK);
  assert_int_equal(kl_node_set_float(g, n, "scale", 0.4f, NULL), KILN_OK);
  if (c->dead_fill != 0)
    assert_int_equal(kl_node_set_int(g, n, "zero_masked_rows", 1, NULL), KILN_OK);
  return g;
}

kl_graph *tu_graph_new(void) {
  kl_graph *g = kl_graph_new();
  assert_non_null(g);
  return g;
}

int tu_graph_value(kl_graph *g, const char *name) {
  kl_err e = {0};
  int v = kl_graph_add_value(g, name, &e);
  if (v < 0) fail_msg("add value %s: %s", name ? name : "(unnamed)", e.msg);
  return v;
}

int tu_graph_input(kl_graph *g, const char *name, kl_dtype dt, int rank, const int64_t *dims) {
  kl_err e = {0};
  int v = tu_graph_value(g, name);
  g->values[v].type.dtype = dt;
  if (rank >= 0) kl_type_set_shape(&g->values[v].type, rank, dims);
  if (kl_graph_add_input(g, v, &e) != KILN_OK) fail_msg("add input: %s", e.msg);
  return v;
}

int tu_graph_const(kl_graph *g, const char *name, kl_dtype dt, int rank, const int64_t *dims,
                   const void *data) {
  kl_err e = {0};
  size_t size = kl_dtype_size(dt);
  int64_t n = numel_of(rank, dims);
  void *copy = alloc_elems(n, size);
  if (n) memcpy(copy, data, (size_t)n * size);
  int v = kl_graph_add_const(g, name, dt, rank, dims, copy, (size_t)n * size, false, &e);
  if (v < 0) fail_msg("add constant: %s", e.msg);
  return v;
}

int tu_graph_node(kl_graph *g, kl_op op, const char *name, int n_in, const int *in, int n_out,
                  const int *out) {
  kl_err e = {0};
  int i = kl_graph_add_node(g, op, name, n_in, in, n_out, out, &e);
  if (i < 0) fail_msg("add node %s: %s", name ? name : kl_op_get(op)->name, e.msg);
  return i;
}

int tu_graph_op(kl_graph *g, kl_op op, int n_in, const int *in) {
  int y = tu_graph_value(g, NULL);
  tu_graph_node(g, op, NULL, n_in, in, 1, &y);
  return y;
}

int tu_graph_output_node(kl_graph *g, kl_op op, int n_in, const int *in, int n_out) {
  int y[TU_MAX_IO];
  assert_true(n_out >= 0 && n_out <= TU_MAX_IO);
  for (int k = 0; k < n_out; k++) y[k] = tu_graph_value(g, NULL);
  int n = tu_graph_node(g, op, NULL, n_in, in, n_out, y);
  for (int k = 0; k < n_out; k++) assert_int_equal(kl_graph_add_output(g, y[k], NULL), KILN_OK);
  return n;
}

void tu_node_ints(kl_graph *g, int n, const char *name, int count, const int64_t *v) {
  if (count > 0) assert_int_equal(kl_node_set_ints(g, n, name, v, count, NULL), KILN_OK);
}

const int64_t *tu_const_i64(const kl_graph *g, int id, int64_t n) {
  assert_true(id >= 0 && id < g->n_values);
  const kl_value *v = &g->values[id];
  assert_int_equal(v->kind, KL_VALUE_CONST);
  assert_int_equal(v->type.dtype, KL_I64);
  assert_int_equal(v->type.rank, 1);
  assert_int_equal(v->type.dims[0].size, n);
  return v->data;
}

kl_graph *tu_load_onnx(const char *path) {
  kl_err e = {0};
  kl_graph *g = NULL;
  if (kl_onnx_load_file(path, NULL, &g, &e) != KILN_OK) fail_msg("%s: %s", path, e.msg);
  if (kl_graph_verify(g, &e) != KILN_OK) fail_msg("%s: verify: %s", path, e.msg);
  return g;
}

float *tu_output0_f32(kiln_session *s, int64_t *count) {
  kiln_tensor_info info;
  const void *data;
  assert_int_equal(kiln_session_get_output(s, 0, &info, &data), KILN_OK);
  assert_int_equal(info.dtype, KILN_DTYPE_FLOAT32);
  *count = 1;
  for (int d = 0; d < info.rank; d++) *count *= info.dims[d];
  float *out = malloc(sizeof(float) * (size_t)(*count ? *count : 1));
  assert_non_null(out);
  memcpy(out, data, sizeof(float) * (size_t)*count);
  return out;
}

float tu_rand_f32(uint32_t *rng, float lo, float hi) {
  *rng ^= *rng << 13;
  *rng ^= *rng >> 17;
  *rng ^= *rng << 5;
  return lo + (hi - lo) * (float)(*rng % 1000000) / 1000000.0f;
}

float *tu_rand_vec(uint32_t *rng, size_t n, float lo, float hi) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  assert_non_null(p);
  for (size_t i = 0; i < n; i++) p[i] = tu_rand_f32(rng, lo, hi);
  return p;
}

float *tu_rand_nonzero(uint32_t *rng, size_t n, float span) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  assert_non_null(p);
  for (size_t i = 0; i < n; i++) {
    float v = tu_rand_f32(rng, 0.1f, 1.0f) * span;
    p[i] = tu_rand_f32(rng, 0.0f, 1.0f) < 0.5f ? -v : v;
  }
  return p;
}

/* ---- files ---- */

void tu_mkdtemp(char *dir, size_t size, const char *tag) {
  int len = snprintf(dir, size, "/tmp/kiln-%s-XXXXXX", tag);
  assert_true(len > 0 && (size_t)len < size);
  if (!mkdtemp(dir)) fail_msg("mkdtemp %s: %s", dir, strerror(errno));
}

int tu_tmpdir_setup(void **state) {
  tu_tmpdir *t = calloc(1, sizeof *t);
  if (!t) return -1;
  tu_mkdtemp(t->dir, sizeof t->dir, "test");
  snprintf(t->path, sizeof t->path, "%s/file", t->dir);
  *state = t;
  return 0;
}

int tu_tmpdir_teardown(void **state) {
  tu_tmpdir *t = *state;
  unlink(t->path);
  int st = rmdir(t->dir);
  free(t);
  return st;
}

void tu_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) fail_msg("cannot write %s: %s", path, strerror(errno));
  assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

void *tu_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot read %s: %s", path, strerror(errno));
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n >= 0);
  rewind(f);
  char *p = malloc((size_t)n + 1);
  assert_non_null(p);
  assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  p[n] = '\0';
  *len = (size_t)n;
  return p;
}

kiln_model *tu_model_of(kl_graph *g, int opt_level) {
  void *buf;
  size_t len;
  kl_err e = {0};
  if (kl_onnx_export(g, &buf, &len, &e) != KILN_OK) fail_msg("export: %s", e.msg);
  kl_graph_free(g);
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "opt_level", opt_level), KILN_OK);
  kiln_model *m = NULL;
  if (kiln_model_load_memory(buf, len, o, &m) != KILN_OK)
    fail_msg("load: %s", kiln_model_error(m));
  kiln_options_free(o);
  free(buf);
  return m;
}

/* ---- sessions ---- */

kiln_session *tu_session(const kiln_model *m, bool reference, int threads) {
  kiln_session *s = NULL;
  kiln_status st = tu_session_try(m, reference, threads, NULL, &s);
  if (st != KILN_OK) fail_msg("session: %s", kiln_session_error(s));
  return s;
}

kiln_status tu_session_try(const kiln_model *m, bool reference, int threads,
                           const char *precision, kiln_session **out) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "reference", reference), KILN_OK);
  if (threads > 0) assert_int_equal(kiln_options_set_int(o, "threads", threads), KILN_OK);
  if (precision) assert_int_equal(kiln_options_set_string(o, "precision", precision), KILN_OK);
  *out = NULL;
  kiln_status st = kiln_session_create(m, o, out);
  kiln_options_free(o);
  return st;
}

static int64_t info_numel(const kiln_tensor_info *info) {
  int64_t n = 1;
  for (int d = 0; d < info->rank; d++) n *= info->dims[d] < 0 ? TU_SYMBOLIC_DIM : info->dims[d];
  return n;
}

int64_t tu_input_numel(const kiln_tensor_info *info) { return info_numel(info); }

float *tu_run_f32(kiln_session *s, const kiln_model *m, float *const *bufs, int64_t *count) {
  for (int i = 0; i < kiln_model_input_count(m); i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    int64_t dims[KL_MAX_RANK];
    for (int d = 0; d < info.rank; d++) dims[d] = info.dims[d] < 0 ? TU_SYMBOLIC_DIM : info.dims[d];
    assert_int_equal(kiln_session_set_input(s, info.name, KILN_DTYPE_FLOAT32, info.rank, dims,
                                            bufs[i],
                                            sizeof(float) * (size_t)info_numel(&info)),
                     KILN_OK);
  }
  if (kiln_session_run(s) != KILN_OK) fail_msg("run: %s", kiln_session_error(s));
  float *all = NULL;
  *count = 0;
  for (int k = 0; k < kiln_model_output_count(m); k++) {
    kiln_tensor_info info;
    const void *data;
    assert_int_equal(kiln_session_get_output(s, k, &info, &data), KILN_OK);
    assert_int_equal(info.dtype, KILN_DTYPE_FLOAT32);
    int64_t n = info_numel(&info);
    all = realloc(all, sizeof(float) * (size_t)(*count + n + 1));
    assert_non_null(all);
    memcpy(all + *count, data, sizeof(float) * (size_t)n);
    *count += n;
  }
  return all;
}

/* ---- the GPU backend against the reference kernels ---- */

kiln_session *tu_gpu_session(const kiln_model *m, const char *device, bool reference,
                              const char *precision) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "reference", reference), KILN_OK);
  if (device) assert_int_equal(kiln_options_set_string(o, "device", device), KILN_OK);
  if (precision) assert_int_equal(kiln_options_set_string(o, "precision", precision), KILN_OK);
  kiln_session *s = NULL;
  if (kiln_session_create(m, o, &s) != KILN_OK)
    fail_msg("session on %s: %s", device ? device : "the CPU", kiln_session_error(s));
  kiln_options_free(o);
  return s;
}

void tu_gpu_set_inputs(kiln_session *s, const kiln_model *m, void *const *bufs) {
  for (int i = 0; i < kiln_model_input_count(m); i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    int64_t n = 1;
    for (int d = 0; d < info.rank; d++) n *= info.dims[d];
    assert_int_equal(kiln_session_set_input(s, info.name, info.dtype, info.rank, info.dims,
                                            bufs[i], kiln_dtype_size(info.dtype) * (size_t)n),
                     KILN_OK);
  }
}

/* x rounded to TF32 (10-bit mantissa, to nearest, ties away: cvt.rna's rule), finite x */
static float tf32_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  u = (u + 0x1000u) & 0xffffe000u;
  memcpy(&x, &u, sizeof x);
  return x;
}

int tu_gpu_check(kl_graph *g, const char *what, int opt_level, tu_tol tol, int64_t int_hi,
                 bool all_on_device) {
  return tu_gpu_check_at(g, what, opt_level, tol, int_hi, all_on_device, "fp32", false);
}

const char *tu_gpu_expect_kernel;

void (*tu_gpu_fill)(void *p, kl_dtype t, int64_t n, int input);

int tu_gpu_check_at(kl_graph *g, const char *what, int opt_level, tu_tol tol, int64_t int_hi,
                    bool all_on_device, const char *precision, bool tf32_inputs) {
  static uint32_t rng = 12345;
  kiln_model *m = tu_model_of(g, opt_level);
  int n_in = kiln_model_input_count(m);
  void *bufs[TU_MAX_IO] = {NULL};
  assert_true(n_in <= TU_MAX_IO);
  kiln_session *ref = tu_gpu_session(m, NULL, true, NULL);
  kiln_session *dev = tu_gpu_session(m, "opencl", false, precision);
  bool tf32 = strcmp(precision, "tf32") == 0;
  for (int i = 0; tf32 && i < m->g->n_nodes; i++) { /* products say they run in TF32 */
    kl_op op = m->g->nodes[i].op;
    bool product = op == KL_OP_Conv || op == KL_OP_KilnFusedConv || op == KL_OP_Gemm ||
                   op == KL_OP_KilnFusedGemm || op == KL_OP_MatMul || op == KL_OP_KilnFusedMatMul;
    if (product && !strstr(kl_session_kernel_name(dev, i), "tf32"))
      fail_msg("%s: node %d (%s) runs '%s', not TF32", what, i, kl_op_name(op),
               kl_session_kernel_name(dev, i));
  }
  int on_dev = 0;
  /* the second run, on new inputs, reuses the first's device memory (and whatever a
   * kernel kept from it: what it kept must follow the inputs) */
  for (int r = 0; r < 2; r++) {
    for (int i = 0; i < n_in; i++) {
      kiln_tensor_info info;
      assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
      int64_t n = 1;
      for (int d = 0; d < info.rank; d++) n *= info.dims[d];
      if (!bufs[i]) bufs[i] = malloc(kiln_dtype_size(info.dtype) * (size_t)(n ? n : 1));
      assert_non_null(bufs[i]);
      for (int64_t k = 0; !tu_gpu_fill && k < n; k++) {
        if (info.dtype == KILN_DTYPE_FLOAT32) {
          float v = tu_rand_f32(&rng, -2, 2);
          ((float *)bufs[i])[k] = tf32_inputs ? tf32_of(v) : v;
        }
        else if (info.dtype == KILN_DTYPE_INT64)
          ((int64_t *)bufs[i])[k] = (int64_t)(tu_rand_f32(&rng, 0, 1) * (float)int_hi) % int_hi;
        else fail_msg("%s: input %d has a dtype this check does not fill", what, i);
      }
      if (tu_gpu_fill) tu_gpu_fill(bufs[i], (kl_dtype)info.dtype, n, i);
    }
    tu_gpu_set_inputs(ref, m, bufs);
    if (kiln_session_run(ref) != KILN_OK)
      fail_msg("%s: reference run: %s", what, kiln_session_error(ref));
    tu_gpu_set_inputs(dev, m, bufs);
    if (kiln_session_run(dev) != KILN_OK)
      fail_msg("%s: run %d on the device: %s", what, r + 1, kiln_session_error(dev));
    on_dev = 0;
    for (int i = 0; i < m->g->n_nodes; i++) {
      kl_op op = m->g->nodes[i].op;
      const char *kernel = kl_session_kernel_name(dev, i);
      if (tu_gpu_expect_kernel &&
          (op == KL_OP_Conv || op == KL_OP_KilnFusedConv || op == KL_OP_Gemm ||
           op == KL_OP_KilnFusedGemm || op == KL_OP_MatMul || op == KL_OP_KilnFusedMatMul ||
           op == KL_OP_KilnMultiHeadAttention) &&
          !strstr(kernel, tu_gpu_expect_kernel))
        fail_msg("%s: node %d (%s) ran '%s', expected kernel %s", what, i, kl_op_name(op),
                 kernel, tu_gpu_expect_kernel);
      bool here = strcmp(kl_session_node_device(dev, i), "cpu") != 0;
      on_dev += here;
      if (all_on_device && !here)
        fail_msg("%s: node %d (%s) ran on the CPU, not the device", what, i,
                 kl_op_name(m->g->nodes[i].op));
    }
    for (int k = 0; k < kiln_model_output_count(m); k++) {
      kiln_tensor_info wi, gi;
      const void *wd, *gd;
      assert_int_equal(kiln_session_get_output(ref, k, &wi, &wd), KILN_OK);
      assert_int_equal(kiln_session_get_output(dev, k, &gi, &gd), KILN_OK);
      assert_int_equal(gi.dtype, wi.dtype);
      assert_int_equal(gi.rank, wi.rank);
      int64_t n = 1;
      for (int d = 0; d < wi.rank; d++) {
        assert_int_equal(gi.dims[d], wi.dims[d]);
        n *= wi.dims[d];
      }
      char where[160];
      snprintf(where, sizeof where, "%s (output %d, run %d)", what, k, r + 1);
      size_t es = kiln_dtype_size(wi.dtype);
      for (int64_t j = 0; tu_gpu_fill && j < n; j++) { /* bit for bit, NaN any NaN */
        const uint8_t *w = (const uint8_t *)wd + (size_t)j * es, *x = (const uint8_t *)gd + (size_t)j * es;
        float fw = 0, fx = 0;
        if (wi.dtype == KILN_DTYPE_FLOAT32) memcpy(&fw, w, 4), memcpy(&fx, x, 4);
        if (memcmp(w, x, es) == 0 || (wi.dtype == KILN_DTYPE_FLOAT32 && isnan(fw) && isnan(fx)))
          continue;
        int64_t wv = 0, xv = 0;
        memcpy(&wv, w, es);
        memcpy(&xv, x, es);
        fail_msg("%s: element %lld is 0x%llx, the reference 0x%llx", where, (long long)j,
                 (unsigned long long)xv, (unsigned long long)wv);
      }
      for (int64_t j = 0; !tu_gpu_fill && j < n; j++) {
        double w = wi.dtype == KILN_DTYPE_FLOAT32 ? ((const float *)wd)[j]
                                                  : (double)((const int64_t *)wd)[j];
        double x = gi.dtype == KILN_DTYPE_FLOAT32 ? ((const float *)gd)[j]
                                                  : (double)((const int64_t *)gd)[j];
        if (!(isnan(w) && isnan(x)) && x != w && !(fabs(x - w) <= tol.atol + tol.rtol * fabs(w)))
          fail_msg("%s: element %lld is %.8g, the reference %.8g", where, (long long)j, x, w);
      }
    }
  }
  for (int i = 0; i < n_in; i++) free(bufs[i]);
  kiln_session_free(ref);
  kiln_session_free(dev);
  kiln_model_free(m);
  return on_dev;
}

int tu_isa_levels(kl_isa *out) {
  kl_isa top = kl_isa_supported(kl_isa_features());
  int n = 0;
  out[n++] = KL_ISA_GENERIC;
  if (top >= KL_ISA_AVX2) out[n++] = KL_ISA_AVX2;
  if (top >= KL_ISA_AVX512) out[n++] = KL_ISA_AVX512;
  return n;
}
