/* The execution engine (src/runtime/session.c) and its static memory plan
 * (src/runtime/memplan.c):
 *   - after the first run with given shapes, kiln_session_run makes no heap allocation
 *     (counted by wrapping malloc and friends at link time: tests/meson.build links this
 *     test with -Wl,--wrap=...; kiln's code is linked statically into it, so every
 *     allocation kiln makes goes through the wrappers);
 *   - a session with the reference kernels computes, through the plan's shared buffers,
 *     in-place kernels and views, exactly (bit for bit) what a plain interpreter
 *     computes with one buffer per tensor, on the digits models and random graphs;
 *   - the fast kernels (oneDNN) agree with it within a tolerance;
 *   - plans never give two tensors alive at once overlapping bytes, reuse memory, run
 *     elementwise ops in place and shape-only ops as views;
 *   - shapes that grow re-plan, shapes that shrink fit the plan.
 * Runs from the source root. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "export/onnx_export.h"
#include "import/tensorfile.h"
#include "kl_config.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/isa.h"
#if KL_HAVE_DNNL
#include "backends/cpu/dnnl.h"
#endif
#include "runtime/session.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- allocation counting ---- */

static int counting, allocations;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);

void *__wrap_malloc(size_t n) {
  allocations += counting;
  return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t size) {
  allocations += counting;
  return __real_calloc(n, size);
}
void *__wrap_realloc(void *p, size_t n) {
  allocations += counting;
  return __real_realloc(p, n);
}
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
  allocations += counting;
  return __real_posix_memalign(p, align, n);
}
void *__wrap_aligned_alloc(size_t align, size_t n) {
  allocations += counting;
  return __real_aligned_alloc(align, n);
}

/* ---- graphs ---- */

static uint32_t rng = 12345;

static uint32_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}

static float frand(float lo, float hi) {
  return lo + (hi - lo) * (float)(next_rand() % 1000000) / 1000000.0f;
}

static int input(kl_graph *g, const char *name, int rank, const int64_t *dims) {
  int v = kl_graph_add_value(g, name, NULL);
  assert_true(v >= 0);
  g->values[v].type.dtype = KL_F32;
  kl_type_set_shape(&g->values[v].type, rank, dims);
  assert_int_equal(kl_graph_add_input(g, v, NULL), KILN_OK);
  return v;
}

static int cst(kl_graph *g, int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  float *d = malloc(sizeof(float) * (size_t)(n ? n : 1));
  assert_non_null(d);
  for (int64_t i = 0; i < n; i++) d[i] = frand(-1, 1);
  int v = kl_graph_add_const(g, NULL, KL_F32, rank, dims, d, sizeof(float) * (size_t)n, false,
                             NULL);
  assert_true(v >= 0);
  return v;
}

static int ints(kl_graph *g, int n, const int64_t *vals) {
  int64_t *d = malloc(sizeof(int64_t) * (size_t)n);
  assert_non_null(d);
  memcpy(d, vals, sizeof(int64_t) * (size_t)n);
  int64_t dims[1] = {n};
  int v = kl_graph_add_const(g, NULL, KL_I64, 1, dims, d, sizeof(int64_t) * (size_t)n, false,
                             NULL);
  assert_true(v >= 0);
  return v;
}

static int op(kl_graph *g, kl_op o, int n_in, const int *in) {
  int y = kl_graph_add_value(g, NULL, NULL);
  assert_true(y >= 0);
  assert_true(kl_graph_add_node(g, o, NULL, n_in, in, 1, &y, NULL) >= 0);
  return y;
}
#define OP(g, o, ...) op(g, KL_OP_##o, (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (int[]){__VA_ARGS__})

static void set_ints(kl_graph *g, int v, const char *name, int n, const int64_t *x) {
  assert_int_equal(kl_node_set_ints(g, g->values[v].producer, name, x, n, NULL), KILN_OK);
}

static void set_int(kl_graph *g, int v, const char *name, int64_t x) {
  assert_int_equal(kl_node_set_int(g, g->values[v].producer, name, x, NULL), KILN_OK);
}

static kiln_model *model_file(const char *path) {
  kiln_model *m = NULL;
  if (kiln_model_load(path, NULL, &m) != KILN_OK) fail_msg("load: %s", kiln_model_error(m));
  return m;
}

/* ---- tensors ---- */

#define MAX_IO 8

typedef struct tensors {
  int n;
  kl_tensor t[MAX_IO];
} tensors;

static void tensors_free(tensors *ts) {
  for (int i = 0; i < ts->n; i++) free(ts->t[i].data);
  ts->n = 0;
}

static kl_tensor tensor_copy(const kl_tensor *x) {
  kl_tensor t = *x;
  size_t bytes = kl_tensor_nbytes(x);
  t.data = malloc(bytes ? bytes : 1);
  assert_non_null(t.data);
  if (bytes) memcpy(t.data, x->data, bytes);
  return t;
}

/* Random float inputs for m, symbolic dims set to batch. */
static void random_inputs(const kiln_model *m, int64_t batch, tensors *in) {
  in->n = kiln_model_input_count(m);
  for (int i = 0; i < in->n; i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    kl_tensor *t = &in->t[i];
    t->dtype = KL_F32;
    t->rank = info.rank;
    int64_t n = 1;
    for (int d = 0; d < info.rank; d++) n *= t->dims[d] = info.dims[d] < 0 ? batch : info.dims[d];
    t->data = malloc(sizeof(float) * (size_t)(n ? n : 1));
    assert_non_null(t->data);
    for (int64_t k = 0; k < n; k++) ((float *)t->data)[k] = frand(-2, 2);
  }
}

/* ---- the plain interpreter: one buffer per tensor, reference kernels ---- */

static void interpret(const kiln_model *m, const tensors *in, tensors *out) {
  kl_graph *g = m->g;
  kl_tensor *vals = calloc((size_t)g->n_values, sizeof *vals);
  kl_type *types = calloc((size_t)g->n_values, sizeof *types);
  assert_true(vals && types);
  for (int v = 0; v < g->n_values; v++) {
    const kl_value *val = &g->values[v];
    if (val->kind != KL_VALUE_CONST) continue;
    types[v] = val->type;
    vals[v] = (kl_tensor){val->type.dtype, val->type.rank, {0}, val->data};
    for (int d = 0; d < val->type.rank; d++) vals[v].dims[d] = val->type.dims[d].size;
  }
  for (int i = 0; i < g->n_inputs; i++) {
    vals[g->inputs[i]] = in->t[i];
    types[g->inputs[i]].dtype = in->t[i].dtype;
    kl_type_set_shape(&types[g->inputs[i]], in->t[i].rank, in->t[i].dims);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    const kl_type *tin[16];
    const void *tdata[16];
    const kl_tensor *kin[16];
    kl_type tout[4];
    kl_tensor *kout[4];
    assert_true(n->n_in <= 16 && n->n_out <= 4);
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      tin[k] = v >= 0 ? &types[v] : NULL;
      tdata[k] = v >= 0 ? vals[v].data : NULL;
      kin[k] = v >= 0 ? &vals[v] : NULL;
    }
    for (int k = 0; k < n->n_out; k++) tout[k] = (kl_type){.rank = -1};
    kl_err e = {0};
    kl_infer_ctx ic = {g, n, n->n_in, n->n_out, tin, tdata, tout, &e, false};
    if (kl_op_get(n->op)->infer(&ic) != KILN_OK) fail_msg("infer: %s", e.msg);
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      types[v] = tout[k];
      vals[v] = (kl_tensor){tout[k].dtype, tout[k].rank, {0}, NULL};
      for (int d = 0; d < tout[k].rank; d++) vals[v].dims[d] = tout[k].dims[d].size;
      vals[v].data = calloc(1, kl_tensor_nbytes(&vals[v]) + 1);
      kout[k] = &vals[v];
    }
    kl_kernel_ctx kc = {n, n->n_in, n->n_out, kin, kout, &e, 1, NULL, 0};
    if (kl_op_get(n->op)->ref(&kc) != KILN_OK) fail_msg("kernel: %s", e.msg);
  }
  out->n = g->n_outputs;
  for (int i = 0; i < g->n_outputs; i++) out->t[i] = tensor_copy(&vals[g->outputs[i]]);
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++) free(vals[g->nodes[i].out[k]].data);
  free(vals);
  free(types);
}

/* ---- sessions ---- */

static kiln_session *session(const kiln_model *m, bool reference) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "reference", reference), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "threads", 2), KILN_OK);
  kiln_session *s = NULL;
  if (kiln_session_create(m, o, &s) != KILN_OK) fail_msg("session: %s", kiln_session_error(s));
  kiln_options_free(o);
  return s;
}

/* Binds in, runs, and returns the allocations the run made (out gets copies). */
static int run(kiln_session *s, const kiln_model *m, const tensors *in, tensors *out) {
  for (int i = 0; i < in->n; i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    const kl_tensor *t = &in->t[i];
    assert_int_equal(kiln_session_set_input(s, info.name, (kiln_dtype)t->dtype, t->rank,
                                            t->dims, t->data, kl_tensor_nbytes(t)),
                     KILN_OK);
  }
  allocations = 0;
  counting = 1;
  kiln_status st = kiln_session_run(s);
  counting = 0;
  if (st != KILN_OK) fail_msg("run: %s", kiln_session_error(s));
  out->n = kiln_model_output_count(m);
  for (int i = 0; i < out->n; i++) {
    kiln_tensor_info info;
    const void *data;
    assert_int_equal(kiln_session_get_output(s, i, &info, &data), KILN_OK);
    kl_tensor t = {(kl_dtype)info.dtype, info.rank, {0}, (void *)data};
    memcpy(t.dims, info.dims, sizeof(int64_t) * (size_t)info.rank);
    out->t[i] = tensor_copy(&t);
  }
  return allocations;
}

static void assert_same_shape(const kl_tensor *a, const kl_tensor *b) {
  assert_int_equal(a->dtype, b->dtype);
  assert_int_equal(a->rank, b->rank);
  for (int d = 0; d < a->rank; d++) assert_int_equal(a->dims[d], b->dims[d]);
}

static void assert_bitwise_equal(const tensors *a, const tensors *b, const char *what) {
  assert_int_equal(a->n, b->n);
  for (int i = 0; i < a->n; i++) {
    assert_same_shape(&a->t[i], &b->t[i]);
    if (memcmp(a->t[i].data, b->t[i].data, kl_tensor_nbytes(&a->t[i])) != 0)
      fail_msg("%s: output %d differs from the interpreter's", what, i);
  }
}

static void assert_close(const tensors *a, const tensors *b, double tol, const char *what) {
  assert_int_equal(a->n, b->n);
  for (int i = 0; i < a->n; i++) {
    assert_same_shape(&a->t[i], &b->t[i]);
    if (a->t[i].dtype != KL_F32) continue;
    const float *x = a->t[i].data, *y = b->t[i].data;
    for (int64_t k = 0; k < kl_tensor_numel(&a->t[i]); k++)
      if (!(fabs((double)x[k] - y[k]) <= tol * (1 + fabs((double)y[k]))))
        fail_msg("%s: output %d element %lld: %.9g, expected %.9g", what, i, (long long)k,
                 (double)x[k], (double)y[k]);
  }
}

/* Runs m three times on one set of inputs with both kernel sets: every run after the
 * first allocates nothing, the reference session equals the interpreter bit for bit
 * and the fast one comes within tol. */
static void check_model(const kiln_model *m, const tensors *in, double tol, const char *what) {
  tensors want = {0}, got = {0};
  interpret(m, in, &want);
  for (int reference = 1; reference >= 0; reference--) {
    kiln_session *s = session(m, reference);
    for (int r = 0; r < 3; r++) {
      int allocs = run(s, m, in, &got);
      if (r > 0 && allocs)
        fail_msg("%s: run %d (%s kernels) made %d allocations", what, r + 1,
                 reference ? "reference" : "fast", allocs);
      if (reference) assert_bitwise_equal(&got, &want, what);
      else assert_close(&got, &want, tol, what);
      tensors_free(&got);
    }
    kiln_session_free(s);
  }
  tensors_free(&want);
}

/* No two storages alive at the same node share a byte; the arena holds them all. */
static void assert_plan_sound(const kl_memplan *p) {
  for (int a = 0; a < p->n_stores; a++) {
    const kl_mem_store *x = &p->stores[a];
    assert_true(x->offset + x->size <= p->arena_bytes);
    for (int b = a + 1; b < p->n_stores; b++) {
      const kl_mem_store *y = &p->stores[b];
      bool live_together = x->first <= y->last && y->first <= x->last;
      bool disjoint = x->offset + x->size <= y->offset || y->offset + y->size <= x->offset;
      if (live_together && x->size && y->size && !disjoint)
        fail_msg("storages %d [%zu, +%zu) and %d [%zu, +%zu) overlap while both live", a,
                 x->offset, x->size, b, y->offset, y->size);
    }
  }
}

/* ---- the digits models ---- */

static void check_digits(const char *dir) {
  char path[256], set[256];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  snprintf(set, sizeof set, "%s/test_data_set_0/input_0.pb", dir);
  kiln_model *m = model_file(path);
  tensors in = {1, {{0}}};
  kl_err e = {0};
  if (kl_tensorfile_read(set, INT64_C(1) << 30, &in.t[0], NULL, &e) != KILN_OK)
    fail_msg("%s: %s", set, e.msg);
  check_model(m, &in, 1e-4, dir);
  kiln_session *s = session(m, false);
  tensors out = {0};
  run(s, m, &in, &out);
  const kl_memplan *p = kl_session_memplan(s);
  assert_non_null(p);
  assert_plan_sound(p);
  assert_true(p->arena_bytes < p->total_bytes); /* buffers were reused */
  tensors_free(&out);
  tensors_free(&in);
  kiln_session_free(s);
  kiln_model_free(m);
}

/* ---- control flow: a Loop's body session plans once ---- */

/* dir's test_data_set_0 inputs and outputs. */
static void read_set(const char *dir, const char *kind, int n, tensors *ts) {
  ts->n = n;
  for (int i = 0; i < n; i++) {
    char path[256];
    kl_err e = {0};
    snprintf(path, sizeof path, "%s/test_data_set_0/%s_%d.pb", dir, kind, i);
    if (kl_tensorfile_read(path, INT64_C(1) << 30, &ts->t[i], NULL, &e) != KILN_OK)
      fail_msg("%s: %s", path, e.msg);
  }
}

/* The control-flow fixtures (tests/models/make_control_fixtures.py), three runs each
 * with both kernel sets: the outputs onnxruntime gave, and no allocation after the first
 * run (a Loop's iterations run one body session, whose plan holds after it; the carried
 * values' and scan outputs' buffers are kept). */
static void test_control_flow_plans(void **state) {
  (void)state;
  const char *dirs[] = {"tests/models/control/loop_conv", "tests/models/control/loop_grow",
                        "tests/models/control/scan_axes", "tests/models/control/if_shapes"};
  for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
    char path[256];
    snprintf(path, sizeof path, "%s/model.onnx", dirs[d]);
    kiln_model *m = model_file(path);
    tensors in = {0}, want = {0};
    read_set(dirs[d], "input", kiln_model_input_count(m), &in);
    read_set(dirs[d], "output", kiln_model_output_count(m), &want);
    for (int reference = 1; reference >= 0; reference--) {
      kiln_session *s = session(m, reference);
      for (int r = 0; r < 3; r++) {
        tensors got = {0};
        int allocs = run(s, m, &in, &got);
        if (r > 0 && allocs)
          fail_msg("%s: run %d (%s kernels) made %d allocations", dirs[d], r + 1,
                   reference ? "reference" : "fast", allocs);
        assert_close(&got, &want, 1e-4, dirs[d]);
        tensors_free(&got);
      }
      kiln_session_free(s);
    }
    tensors_free(&in);
    tensors_free(&want);
    kiln_model_free(m);
  }
}

static void test_digits_cnn(void **state) {
  (void)state;
  check_digits("models/digits_cnn");
}

static void test_digits_cnn_fused(void **state) {
  (void)state;
  check_digits("models/digits_cnn_fused");
}

static void test_digits_mlp(void **state) {
  (void)state;
  check_digits("models/digits_mlp");
}

/* ---- the plan on a known graph ---- */
/* The offsets of the old placement, every storage against every placed one (O(S^2)):
 * the twin the interval tree of memplan.c must agree with to the byte. */
static size_t twin_round(size_t n) {
  return (n + KL_MEMPLAN_ALIGN - 1) / KL_MEMPLAN_ALIGN * KL_MEMPLAN_ALIGN;
}

static void twin_offsets(const kl_memplan *p, size_t *off) {
  int n = p->n_stores, *order = malloc(sizeof(int) * (size_t)(n + 1));
  int *placed = malloc(sizeof(int) * (size_t)(n + 1));
  assert_non_null(order);
  assert_non_null(placed);
  for (int i = 0; i < n; i++) { /* largest first, stable */
    int j = i;
    while (j > 0 && p->stores[order[j - 1]].size < p->stores[i].size) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = i;
  }
  int n_placed = 0;
  for (int i = 0; i < n; i++) {
    const kl_mem_store *s = &p->stores[order[i]];
    size_t at = 0;
    if (s->size) {
      size_t size = twin_round(s->size), end = 0, best_gap = SIZE_MAX;
      for (int k = 0; k < n_placed; k++) {
        const kl_mem_store *o = &p->stores[placed[k]];
        if (!(o->first <= s->last && s->first <= o->last) || o->size == 0) continue;
        size_t oo = off[placed[k]];
        if (oo >= end && oo - end >= size && oo - end < best_gap) {
          best_gap = oo - end;
          at = end;
        }
        if (oo + twin_round(o->size) > end) end = oo + twin_round(o->size);
      }
      if (best_gap == SIZE_MAX) at = end;
    }
    off[order[i]] = at;
    int j = n_placed++;
    while (j > 0 && off[placed[j - 1]] > at) {
      placed[j] = placed[j - 1];
      j--;
    }
    placed[j] = order[i];
  }
  free(order);
  free(placed);
}

/* Random graphs (values of random sizes read by random later nodes, some living to the
 * end, some never read): the plan is sound and every offset is the twin's. */
static void test_plan_placement(void **state) {
  (void)state;
  uint64_t seed = 0x9e3779b97f4a7c15u;
  for (int round = 0; round < 12; round++) {
    kl_graph *g = kl_graph_new();
    int n = 50 + round * 37, *vals = malloc(sizeof(int) * (size_t)(n + 1));
    assert_non_null(vals);
    vals[0] = input(g, "x", 1, (int64_t[]){4});
    for (int i = 0; i < n; i++) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      int back = (int)((seed >> 33) % (uint64_t)(i + 1)), near = i - (int)((seed >> 40) % 4);
      int a = vals[(seed >> 20) % 3 == 0 ? back : (near < 0 ? 0 : near)];
      int b = vals[back];
      vals[i + 1] = OP(g, Add, a, b);
      if ((seed >> 50) % 11 == 0)
        assert_int_equal(kl_graph_add_output(g, vals[i + 1], NULL), KILN_OK);
    }
    assert_int_equal(kl_graph_add_output(g, vals[n], NULL), KILN_OK);
    kl_memplan p;
    kl_err e = {0};
    assert_int_equal(kl_memplan_init(&p, g, &e), KILN_OK);
    size_t *bytes = calloc((size_t)g->n_values, sizeof *bytes);
    kl_type *types = calloc((size_t)g->n_values, sizeof *types);
    kl_memplan_node *rules = calloc((size_t)g->n_nodes, sizeof *rules);
    size_t *off = calloc((size_t)g->n_values + 1, sizeof *off);
    assert_true(bytes && types && rules && off);
    for (int v = 0; v < g->n_values; v++) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      bytes[v] = (seed >> 40) % 7 == 0 ? 0 : 1 + (size_t)((seed >> 33) % 5000);
    }
    for (int again = 0; again < 2; again++) { /* a second build on the same plan */
      assert_int_equal(kl_memplan_build(&p, g, bytes, types, rules, &e), KILN_OK);
      assert_plan_sound(&p);
      twin_offsets(&p, off);
      for (int s = 0; s < p.n_stores; s++)
        if (p.stores[s].size && p.stores[s].offset != off[s])
          fail_msg("round %d: storage %d of %zu bytes, live [%d, %d], at %zu; the twin "
                   "places it at %zu", round, s, p.stores[s].size, p.stores[s].first,
                   p.stores[s].last, p.stores[s].offset, off[s]);
    }
    kl_memplan_clear(&p);
    free(bytes);
    free(types);
    free(rules);
    free(off);
    free(vals);
    kl_graph_free(g);
  }
}


/* x -> Relu -> Sigmoid -> Reshape -> Tanh -> Add(., Tanh) -> y: the chain runs in
 * place in one storage, the Reshape is a view, and only y outlives its node. */
static void test_inplace_and_views(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int64_t dims[2] = {4, 16};
  int x = input(g, "x", 2, dims);
  int a = OP(g, Relu, x);
  int b = OP(g, Sigmoid, a);
  int r = OP(g, Reshape, b, ints(g, 2, (int64_t[]){8, 8}));
  int t = OP(g, Tanh, r);
  int u = OP(g, Exp, r);
  int y = OP(g, Add, t, u);
  assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
  kiln_model *m = tu_model_of(g, 0);
  tensors in = {0}, out = {0};
  random_inputs(m, 1, &in);
  check_model(m, &in, 1e-6, "chain");
  kiln_session *s = session(m, true);
  for (int r_ = 0; r_ < 2; r_++) { /* the first run plans, the second runs the plan */
    tensors_free(&out);
    run(s, m, &in, &out);
  }
  const kl_memplan *p = kl_session_memplan(s);
  assert_non_null(p);
  assert_plan_sound(p);
  const kl_graph *mg = m->g;
  int n_view = 0, n_inplace = 0;
  for (int v = 0; v < mg->n_values; v++) {
    n_view += p->view_of[v] >= 0;
    n_inplace += p->inplace_of[v] >= 0;
  }
  assert_int_equal(n_view, 1);  /* the Reshape */
  assert_true(n_inplace >= 2);  /* Sigmoid on Relu's storage, Add on Tanh's or Exp's */
  /* Relu's 256 bytes, then Tanh and Exp alive together: two storages in all */
  assert_int_equal(p->arena_bytes, 2 * 256);
  assert_int_equal(p->total_bytes, 6 * 256);
  for (int i = 0; i < mg->n_nodes; i++)
    if (mg->nodes[i].op == KL_OP_Reshape)
      assert_string_equal(kl_session_kernel_name(s, i), "view");
  tensors_free(&out);
  tensors_free(&in);
  kiln_session_free(s);
  kiln_model_free(m);
}

/* kiln's ISA kernels run in place where kl_cpu_isa_inplace allows it: x -> Relu ->
 * Softmax -> Add(., x) -> y takes one storage on the fast kernels, and matches the
 * reference and makes no allocation (check_model). */
static void test_isa_kernels_in_place(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int64_t dims[2] = {3, 37};
  int x = input(g, "x", 2, dims);
  int a = OP(g, Relu, x);
  int b = OP(g, Softmax, a);
  int y = OP(g, Add, b, x);
  assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
  kiln_model *m = tu_model_of(g, 0);
  tensors in = {0}, out = {0};
  random_inputs(m, 1, &in);
  check_model(m, &in, 1e-5, "isa in place");
  kiln_session *s = session(m, false);
  for (int r = 0; r < 2; r++) {
    tensors_free(&out);
    run(s, m, &in, &out);
  }
  const kl_memplan *p = kl_session_memplan(s);
  assert_non_null(p);
  assert_plan_sound(p);
  const kl_graph *mg = m->g;
  for (int i = 0; i < mg->n_nodes; i++) { /* each on its input's storage */
    assert_string_not_equal(kl_session_kernel_name(s, i), "ref");
    if (i > 0) assert_int_equal(p->inplace_of[mg->nodes[i].out[0]], mg->nodes[i].in[0]);
  }
  assert_int_equal(p->arena_bytes, (size_t)(3 * 37 * 4 + 63) / 64 * 64);
  tensors_free(&out);
  tensors_free(&in);
  kiln_session_free(s);
  kiln_model_free(m);
}

/* x -> Concat(x, Relu x) -> BatchNormalization -> Slice -> Pad -> y, with the
 * variance computed in the graph (Abs of a constant, left unfolded at -O0): kiln's ISA
 * kernels take all three, BatchNormalization in place, and the runs after the first
 * allocate nothing (check_model). */
static void test_isa_batchnorm_slice_pad(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int64_t dims[4] = {2, 5, 7, 6}, ch[1] = {10};
  int x = input(g, "x", 4, dims);
  int c = OP(g, Concat, x, OP(g, Relu, x));
  set_int(g, c, "axis", 1);
  int var = OP(g, Abs, cst(g, 1, ch));
  int bn = OP(g, BatchNormalization, c, cst(g, 1, ch), cst(g, 1, ch), cst(g, 1, ch), var);
  int sl = OP(g, Slice, bn, ints(g, 2, (int64_t[]){1, 6}), ints(g, 2, (int64_t[]){9, 0}),
              ints(g, 2, (int64_t[]){1, 3}), ints(g, 2, (int64_t[]){1, -2}));
  int y = OP(g, Pad, sl, ints(g, 8, (int64_t[]){0, 0, 1, 2, 1, 0, 2, 0}));
  assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
  kiln_model *m = tu_model_of(g, 0);
  tensors in = {0}, out = {0};
  random_inputs(m, 1, &in);
  check_model(m, &in, 1e-5, "isa batchnorm slice pad");
  kiln_session *s = session(m, false);
  run(s, m, &in, &out);
  const kl_memplan *p = kl_session_memplan(s);
  assert_non_null(p);
  const kl_graph *mg = m->g;
  for (int i = 0; i < mg->n_nodes; i++) {
    kl_op o = mg->nodes[i].op;
    if (o != KL_OP_BatchNormalization && o != KL_OP_Slice && o != KL_OP_Pad) continue;
    assert_string_not_equal(kl_session_kernel_name(s, i), "ref");
    if (o == KL_OP_BatchNormalization)
      assert_int_equal(p->inplace_of[mg->nodes[i].out[0]], mg->nodes[i].in[0]);
  }
  tensors_free(&out);
  tensors_free(&in);
  kiln_session_free(s);
  kiln_model_free(m);
}

/* A graph output that is a Reshape of a graph input must not point into the caller's
 * buffer, which may go away once kiln_session_run returns. */
static void test_output_view_of_input(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int64_t dims[2] = {3, 4};
  int x = input(g, "x", 2, dims);
  int r = OP(g, Reshape, x, ints(g, 1, (int64_t[]){12}));
  int f = OP(g, Flatten, OP(g, Relu, x));
  assert_int_equal(kl_graph_add_output(g, r, NULL), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, f, NULL), KILN_OK);
  kiln_model *m = tu_model_of(g, 0);
  tensors in = {0}, out = {0};
  random_inputs(m, 1, &in);
  check_model(m, &in, 0, "output view");
  kiln_session *s = session(m, true);
  for (int r_ = 0; r_ < 2; r_++) {
    run(s, m, &in, &out);
    tensors_free(&out);
  }
  const void *data;
  assert_int_equal(kiln_session_get_output(s, 0, NULL, &data), KILN_OK);
  assert_ptr_not_equal(data, in.t[0].data);
  assert_memory_equal(data, in.t[0].data, 12 * sizeof(float));
  tensors_free(&in);
  kiln_session_free(s);
  kiln_model_free(m);
}

/* A kiln.Check (a scripted raise) whose outputs are empty still fails the run when its
 * code says so: nodes with empty outputs are otherwise skipped. */
static void test_check_empty_outputs(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int code = tu_graph_input(g, "code", KL_I64, 0, NULL);
  int x = tu_graph_input(g, "x", KL_F32, 1, (const int64_t[]){0});
  int y = tu_graph_value(g, "y");
  int n = tu_graph_node(g, KL_OP_KilnCheck, "check", 2, (const int[]){code, x}, 1, &y);
  const char *msg[1] = {"model.py:3: the check failed"};
  assert_int_equal(kl_node_set_strings(g, n, "messages", msg, 1, NULL), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
  kiln_model *m = tu_model_of(g, 0);
  for (int ref = 0; ref < 2; ref++) {
    kiln_session *s = session(m, ref);
    for (int64_t c = 0; c < 2; c++) {
      float none = 0;
      assert_int_equal(kiln_session_set_input(s, "code", KILN_DTYPE_INT64, 0, NULL, &c, sizeof c),
                       KILN_OK);
      assert_int_equal(kiln_session_set_input(s, "x", KILN_DTYPE_FLOAT32, 1, (int64_t[]){0},
                                              &none, 0),
                       KILN_OK);
      kiln_status st = kiln_session_run(s);
      if (c == 0) {
        assert_int_equal(st, KILN_OK);
      } else {
        assert_int_equal(st, KILN_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(kiln_session_error(s), "model.py:3: the check failed"));
      }
    }
    kiln_session_free(s);
  }
  kiln_model_free(m);
}

/* ---- shapes that change ---- */

/* The CNN at batch 4, then 8 (grows: re-plans, then no allocation), then 2 and 4
 * (fit the plan), each equal to the interpreter. With the reference kernels the
 * smaller batches allocate nothing; oneDNN builds a primitive for a batch size it has
 * not seen (kept in its cache: batch 4 again allocates nothing). */
static void test_shape_changes(void **state) {
  (void)state;
  kiln_model *m = model_file("models/digits_cnn/model.onnx");
  const int64_t batches[] = {4, 8, 8, 2, 4};
  const bool new_plan[] = {true, true, false, false, false};
  const bool new_shape[] = {true, true, false, true, false};
  for (int reference = 1; reference >= 0; reference--) {
    kiln_session *s = session(m, reference);
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
      tensors in = {0}, want = {0}, got = {0};
      random_inputs(m, batches[i], &in);
      interpret(m, &in, &want);
      int allocs = run(s, m, &in, &got);
      bool may_allocate = new_plan[i] || (!reference && new_shape[i]);
      if (!may_allocate && allocs)
        fail_msg("batch %lld (run %zu, %s kernels) made %d allocations", (long long)batches[i],
                 i + 1, reference ? "reference" : "fast", allocs);
      if (reference) assert_bitwise_equal(&got, &want, "batch change");
      else assert_close(&got, &want, 1e-4, "batch change");
      tensors_free(&in);
      tensors_free(&want);
      tensors_free(&got);
    }
    kiln_session_free(s);
  }
  kiln_model_free(m);
}

/* ---- random graphs ---- */

typedef struct pool {
  int n;
  int v[64];
  int rank[64];
  int64_t dims[64][4];
} pool;

static void pool_add(pool *p, int v, int rank, const int64_t *dims) {
  if (p->n == 64) return;
  p->v[p->n] = v;
  p->rank[p->n] = rank;
  memcpy(p->dims[p->n], dims, sizeof(int64_t) * (size_t)rank);
  p->n++;
}

static int pick(const pool *p) { return (int)(next_rand() % (uint32_t)p->n); }

/* Another entry of p with entry i's shape, or i itself. */
static int pick_same_shape(const pool *p, int i) {
  int start = pick(p);
  for (int k = 0; k < p->n; k++) {
    int j = (start + k) % p->n;
    if (p->rank[j] == p->rank[i] &&
        memcmp(p->dims[j], p->dims[i], sizeof(int64_t) * (size_t)p->rank[i]) == 0)
      return j;
  }
  return i;
}

static void add_random_node(kl_graph *g, pool *p) {
  int i = pick(p), x = p->v[i], rank = p->rank[i];
  int64_t *d = p->dims[i], out[4];
  memcpy(out, d, sizeof out);
  int y;
  static const kl_op unary[] = {KL_OP_Relu, KL_OP_Sigmoid, KL_OP_Tanh, KL_OP_Abs, KL_OP_Neg};
  static const kl_op binary[] = {KL_OP_Add, KL_OP_Sub, KL_OP_Mul};
  switch (next_rand() % 8) {
  case 0:
  case 1:
    y = op(g, unary[next_rand() % 5], 1, &x);
    break;
  case 2:
    y = op(g, binary[next_rand() % 3], 2, (int[]){x, p->v[pick_same_shape(p, i)]});
    break;
  case 3: { /* broadcast a constant over the last dim */
    int c = cst(g, 1, &d[rank - 1]);
    y = op(g, binary[next_rand() % 3], 2, (int[]){c, x});
    break;
  }
  case 4: /* 4-D -> 2-D and back */
    if (rank == 4) {
      out[0] = d[0];
      out[1] = d[1] * d[2] * d[3];
      y = OP(g, Flatten, x);
      rank = 2;
    } else {
      y = OP(g, Reshape, x, ints(g, 4, (int64_t[]){2, 3, 5, 4}));
      rank = 4;
      out[0] = 2, out[1] = 3, out[2] = 5, out[3] = 4;
    }
    break;
  case 5: /* a MatMul over the last dim, kept square */
    y = OP(g, MatMul, x, cst(g, 2, (int64_t[]){d[rank - 1], d[rank - 1]}));
    break;
  case 6:
    if (rank == 4 && d[1] == 3) {
      y = OP(g, Conv, x, cst(g, 4, (int64_t[]){3, 3, 3, 3}), cst(g, 1, (int64_t[]){3}));
      set_ints(g, y, "pads", 4, (int64_t[]){1, 1, 1, 1});
    } else {
      y = OP(g, Softmax, x);
    }
    break;
  default:
    y = OP(g, Identity, x);
    break;
  }
  pool_add(p, y, rank, out);
}

static kiln_model *random_model(uint32_t seed, int level) {
  rng = seed * 2654435761u + 1;
  kl_graph *g = kl_graph_new();
  pool p = {0};
  int64_t dims[4] = {2, 3, 5, 4};
  pool_add(&p, input(g, "x", 4, dims), 4, dims);
  int n_nodes = 4 + (int)(next_rand() % 20);
  for (int k = 0; k < n_nodes; k++) add_random_node(g, &p);
  int n_out = 1 + (int)(next_rand() % 3);
  for (int k = 0; k < n_out; k++) { /* the last node's output, then others */
    int v = p.v[k == 0 ? p.n - 1 : 1 + (int)(next_rand() % (uint32_t)(p.n - 1))];
    bool dup = false;
    for (int j = 0; j < g->n_outputs; j++) dup |= g->outputs[j] == v;
    if (!dup) assert_int_equal(kl_graph_add_output(g, v, NULL), KILN_OK);
  }
  return tu_model_of(g, level);
}

static void test_random_graphs(void **state) {
  (void)state;
  for (uint32_t seed = 1; seed <= 40; seed++) {
    kiln_model *m = random_model(seed, seed % 2 ? 0 : 2);
    tensors in = {0};
    random_inputs(m, 2, &in);
    char what[64];
    snprintf(what, sizeof what, "random graph %u", seed);
    check_model(m, &in, 1e-4, what);
    kiln_session *s = session(m, seed % 3 == 0);
    tensors out = {0};
    run(s, m, &in, &out);
    assert_non_null(kl_session_memplan(s));
    assert_plan_sound(kl_session_memplan(s));
    tensors_free(&out);
    kiln_session_free(s);
    tensors_free(&in);
    kiln_model_free(m);
  }
}

/* A Sum that dies at a FusedConv is overwritten in place by its output (oneDNN's sum
 * post-op), and the result matches the reference. */
static void test_fused_sum_in_place(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int64_t dims[4] = {1, 8, 6, 6};
  int x = input(g, "x", 4, dims);
  int r = OP(g, Relu, x);
  int w = cst(g, 4, (int64_t[]){8, 8, 3, 3});
  int c = op(g, KL_OP_KilnFusedConv, 4, (int[]){x, w, KL_ABSENT, r});
  set_ints(g, c, "pads", 4, (int64_t[]){1, 1, 1, 1});
  assert_int_equal(kl_node_set_string(g, g->values[c].producer, "activation", "Relu", NULL),
                   KILN_OK);
  set_int(g, c, "group", 1);
  assert_int_equal(kl_graph_add_output(g, c, NULL), KILN_OK);
  kiln_model *m = tu_model_of(g, 0);
  tensors in = {0}, out = {0};
  random_inputs(m, 1, &in);
  check_model(m, &in, 1e-5, "fused sum");
  kiln_session *s = session(m, false);
  run(s, m, &in, &out);
  const kl_memplan *p = kl_session_memplan(s);
  assert_non_null(p);
  int y = m->g->outputs[0];
#if KL_HAVE_DNNL
  /* without oneDNN (not built, or KILN_ISA=generic, for which oneDNN has no level) the
   * reference kernel runs it, not in place */
  if (kl_dnnl_usable())
    assert_int_equal(p->inplace_of[y], m->g->nodes[0].out[0]); /* Y took over Relu's */
#else
  (void)y;
#endif
  tensors_free(&out);
  tensors_free(&in);
  kiln_session_free(s);
  kiln_model_free(m);
}

/* x -> MatMul(W1) -> Relu -> MatMul(W2) -> y, and z = MatMul(x, W1): W2 is read by
 * one oneDNN node only, W1 by two. */
static kiln_model *two_matmuls(int *w1, int *w2, bool batch) {
  kl_graph *g = kl_graph_new();
  int x = input(g, "x", 2, (int64_t[]){3, 40});
  if (batch) g->values[x].type.dims[0] = (kl_dim){-1, kl_graph_symbol(g, "batch")};
  int a = cst(g, 2, (int64_t[]){40, 72}), b = cst(g, 2, (int64_t[]){72, 24});
  int y = OP(g, MatMul, OP(g, Relu, OP(g, MatMul, x, a)), b);
  int z = OP(g, MatMul, x, a);
  assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, z, NULL), KILN_OK);
  kiln_model *m = tu_model_of(g, 0);
  *w1 = *w2 = -1;
  for (int i = 0; i < m->g->n_nodes; i++) { /* the first MatMul reads W1, the last W2 */
    const kl_node *n = &m->g->nodes[i];
    if (n->op != KL_OP_MatMul) continue;
    if (n->in[0] == m->g->inputs[0]) *w1 = n->in[1];
    else *w2 = n->in[1];
  }
  assert_true(*w1 >= 0 && *w2 >= 0);
  return m;
}

static kiln_session *session_with(const kiln_model *m, const char *name, int64_t value,
                                  kiln_status want, const char *msg) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "threads", 2), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, name, value), KILN_OK);
  kiln_session *s = NULL;
  kiln_status st = kiln_session_create(m, o, &s);
  kiln_options_free(o);
  tu_assert_status(st, want, kiln_session_error(s), msg);
  if (st == KILN_OK) return s;
  kiln_session_free(s);
  return NULL;
}

/* release_weights: the session frees the model's copy of the weights that only its
 * oneDNN nodes read once they hold them packed, runs as before (and allocates
 * nothing after the first run), and no other session can be made from the model. */
static void test_release_weights(void **state) {
  (void)state;
  int w1, w2;
  kiln_model *m = two_matmuls(&w1, &w2, false);
  tensors in = {0}, want = {0}, got = {0};
  random_inputs(m, 1, &in);
  interpret(m, &in, &want);
  kiln_session *s = session_with(m, "release_weights", 1, KILN_OK, NULL);
  for (int r = 0; r < 3; r++) {
    int allocs = run(s, m, &in, &got);
    if (r > 0) assert_int_equal(allocs, 0);
    assert_close(&got, &want, 1e-5, "release_weights");
    tensors_free(&got);
  }
  /* oneDNN runs the MatMuls; at AVX-512 it packs their weights (below it may read
   * them plain, and then nothing is released) */
  bool packs = KL_HAVE_DNNL && kl_cpu_native_nhwc() && kl_isa_level() >= KL_ISA_AVX512;
  if (packs) assert_null(m->g->values[w2].data); /* packed: the plain copy is gone */
  else if (!(KL_HAVE_DNNL && kl_cpu_native_nhwc())) assert_non_null(m->g->values[w2].data);
  assert_non_null(m->g->values[w1].data); /* two nodes read it */

  /* the model is the session's: no other, during or after it */
  assert_null(session_with(m, "threads", 1, KILN_ERR_STATE, "took this model's weights"));
  kiln_session_free(s);
  assert_null(session_with(m, "threads", 1, KILN_ERR_STATE, "load the model again"));
  kiln_model_free(m);

  /* it needs the model to itself, and the fast kernels */
  m = two_matmuls(&w1, &w2, false);
  s = session_with(m, "threads", 1, KILN_OK, NULL);
  assert_null(session_with(m, "release_weights", 1, KILN_ERR_STATE, "1 other session"));
  kiln_session_free(s);
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "release_weights", 1), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "reference", 1), KILN_OK);
  assert_int_equal(kiln_session_create(m, o, &s), KILN_ERR_INVALID_ARGUMENT);
  tu_assert_contains(kiln_session_error(s), "needs the fast kernels");
  kiln_session_free(s);
  kiln_options_free(o);
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "release_weights", 2), KILN_ERR_INVALID_ARGUMENT);
  kiln_options_free(o);
  /* a refused session leaves the model free for others */
  s = session_with(m, "release_weights", 1, KILN_OK, NULL);
  kiln_session_free(s);
  kiln_model_free(m);
  tensors_free(&in);
  tensors_free(&want);

  /* new shapes after the release: their layouts are reordered from the packed copy */
  m = two_matmuls(&w1, &w2, true);
  const int64_t batches[] = {3, 17, 1, 3};
  tensors ins[4] = {{0}}, wants[4] = {{0}};
  for (int i = 0; i < 4; i++) {
    random_inputs(m, batches[i], &ins[i]);
    interpret(m, &ins[i], &wants[i]);
  }
  s = session_with(m, "release_weights", 1, KILN_OK, NULL);
  for (int i = 0; i < 4; i++) {
    run(s, m, &ins[i], &got);
    assert_close(&got, &wants[i], 1e-5, "release_weights, batch change");
    tensors_free(&got);
    tensors_free(&ins[i]);
    tensors_free(&wants[i]);
  }
  if (KL_HAVE_DNNL && kl_cpu_native_nhwc() && kl_isa_level() >= KL_ISA_AVX512)
    assert_null(m->g->values[w2].data);
  kiln_session_free(s);
  kiln_model_free(m);
}

/* memory_limit counts oneDNN's packed copies of the weights: a limit that holds the
 * weights but not their packed copies refuses the session, naming both. */
static void test_memory_limit_counts_packed(void **state) {
  (void)state;
  int w1, w2;
  kiln_model *m = two_matmuls(&w1, &w2, false);
  size_t weights = m->g->values[w1].nbytes + m->g->values[w2].nbytes;
  bool dnnl = KL_HAVE_DNNL && kl_cpu_native_nhwc();
  /* oneDNN packs W1 for each of its two MatMuls, and W2 */
  size_t packed = dnnl ? 2 * m->g->values[w1].nbytes + m->g->values[w2].nbytes : 0;
  int64_t limit = (int64_t)(weights + packed / 2);
  kiln_session *s = session_with(m, "memory_limit", limit, dnnl ? KILN_ERR_LIMIT : KILN_OK,
                                 dnnl ? "reordered copies of them" : NULL);
  if (dnnl) {
    char want[128];
    snprintf(want, sizeof want, "weights (%zu bytes) and oneDNN's reordered copies of them "
             "(%zu bytes)", weights, packed);
    assert_null(s);
    /* the message states the sizes */
    kiln_options *o;
    assert_int_equal(kiln_options_create(&o), KILN_OK);
    assert_int_equal(kiln_options_set_int(o, "memory_limit", limit), KILN_OK);
    assert_int_equal(kiln_session_create(m, o, &s), KILN_ERR_LIMIT);
    tu_assert_contains(kiln_session_error(s), want);
    kiln_session_free(s);
    kiln_options_free(o);
    s = NULL;
  }
  kiln_session_free(s);
  /* a release_weights session refused for its limit leaves the model free */
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "release_weights", 1), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "memory_limit", (int64_t)weights / 2), KILN_OK);
  assert_int_equal(kiln_session_create(m, o, &s), KILN_ERR_LIMIT);
  tu_assert_contains(kiln_session_error(s), "exceed the memory limit");
  kiln_session_free(s);
  kiln_options_free(o);
  /* with room for both, it runs */
  tensors in = {0}, got = {0};
  random_inputs(m, 1, &in);
  s = session_with(m, "memory_limit", (int64_t)(weights + packed) + (4 << 20), KILN_OK, NULL);
  run(s, m, &in, &got);
  tensors_free(&got);
  kiln_session_free(s);
  tensors_free(&in);
  kiln_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_digits_cnn),
      cmocka_unit_test(test_control_flow_plans),
      cmocka_unit_test(test_digits_cnn_fused),
      cmocka_unit_test(test_digits_mlp),
      cmocka_unit_test(test_inplace_and_views),
      cmocka_unit_test(test_plan_placement),
      cmocka_unit_test(test_isa_kernels_in_place),
      cmocka_unit_test(test_isa_batchnorm_slice_pad),
      cmocka_unit_test(test_release_weights),
      cmocka_unit_test(test_memory_limit_counts_packed),
      cmocka_unit_test(test_output_view_of_input),
      cmocka_unit_test(test_check_empty_outputs),
      cmocka_unit_test(test_shape_changes),
      cmocka_unit_test(test_random_graphs),
      cmocka_unit_test(test_fused_sum_in_place),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
