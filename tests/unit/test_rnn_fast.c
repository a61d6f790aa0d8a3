/* kiln's float32 RNN, GRU and LSTM kernel (src/backends/cpu/isa/run_rnn.c) against the
 * double-precision reference kernel (ref/rnn.c) on random data (never zeros) at awkward
 * sizes: every direction, with and without B, initial states and sequence_lens (a
 * length 0, lengths short of seq), layouts 0 and 1, clip, LSTM peepholes and
 * input_forget, GRU's linear_before_reset 0 and 1; at every ISA level this machine
 * has, with W and R packed once (kept across runs) and at every run, on 1 and 2
 * threads (the same bits on kiln's own products; oneDNN's sgemm, which takes the input
 * projection of many rows, within the tolerance). Then through sessions: the fast
 * kernel is the one chosen (by name) and matches the reference, a non-default
 * activation stays on the reference kernel and says so, and the work bound counts the
 * fast kernel's steps once, not as a reference kernel's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"
#include "runtime/session.h"

#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IN_X, IN_W, IN_R, IN_B, IN_LENS, IN_H0, IN_C0, IN_P };

static uint32_t rng = 777;

/* Never zero: |v| in [0.1, 1] times span, either sign. */
static double nonzero(double span) {
  double v = tu_rand_f32(&rng, 0.1f, 1.0f) * span;
  return tu_rand_f32(&rng, 0.0f, 1.0f) < 0.5f ? -v : v;
}

static double *rand_vals(int64_t n, double span) {
  double *p = malloc(sizeof(double) * (size_t)(n ? n : 1));
  assert_non_null(p);
  for (int64_t i = 0; i < n; i++) p[i] = nonzero(span);
  return p;
}

typedef struct rnn_case {
  const char *op; /* "RNN", "GRU", "LSTM" */
  const char *dir;
  int64_t hidden, input, batch, seq;
  bool bias, init, lens, layout1, peep, input_forget, lbr;
  double clip; /* 0: none */
} rnn_case;

static int gates_of(const rnn_case *c) {
  return !strcmp(c->op, "LSTM") ? 4 : !strcmp(c->op, "GRU") ? 3 : 1;
}

static void describe(const rnn_case *c, char *buf, size_t len) {
  snprintf(buf, len, "%s %s h%lld i%lld b%lld s%lld%s%s%s%s%s%s%s clip %g", c->op, c->dir,
           (long long)c->hidden, (long long)c->input, (long long)c->batch, (long long)c->seq,
           c->bias ? " B" : "", c->init ? " init" : "", c->lens ? " lens" : "",
           c->layout1 ? " layout1" : "", c->peep ? " P" : "", c->input_forget ? " if" : "",
           c->lbr ? " lbr" : "", c->clip);
}

/* One tensor input of random values. */
static void rand_input(tu_fixture *f, int i, int rank, const int64_t *dims, double span) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  double *v = rand_vals(n, span);
  tu_tensor(f, i, KL_F32, rank, dims, v);
  free(v);
}

/* f's node and inputs for case c; the reference kernel run (its outputs in f->tout). */
static void build(tu_fixture *f, const rnn_case *c) {
  bool lstm = !strcmp(c->op, "LSTM");
  int64_t dirs = !strcmp(c->dir, "bidirectional") ? 2 : 1, gh = gates_of(c) * c->hidden;
  tu_one_node(f, c->op, lstm ? 8 : 6, lstm ? 3 : 2);
  tu_attr_int(f, "hidden_size", c->hidden);
  tu_attr_string(f, "direction", c->dir);
  if (c->layout1) tu_attr_int(f, "layout", 1);
  if (c->clip > 0) tu_attr_float(f, "clip", (float)c->clip);
  if (c->input_forget) tu_attr_int(f, "input_forget", 1);
  if (c->lbr) tu_attr_int(f, "linear_before_reset", 1);
  int64_t x[3] = {c->seq, c->batch, c->input}, st[3] = {dirs, c->batch, c->hidden};
  if (c->layout1) {
    x[0] = c->batch, x[1] = c->seq;
    st[0] = c->batch, st[1] = dirs;
  }
  rand_input(f, IN_X, 3, x, 1.0);
  rand_input(f, IN_W, 3, (const int64_t[]){dirs, gh, c->input}, 0.6);
  rand_input(f, IN_R, 3, (const int64_t[]){dirs, gh, c->hidden}, 0.6);
  if (c->bias) rand_input(f, IN_B, 2, (const int64_t[]){dirs, 2 * gh}, 0.5);
  else tu_absent(f, IN_B);
  if (c->lens) { /* a full row, a row of length 0, the rest short */
    double l[8];
    for (int64_t b = 0; b < c->batch; b++)
      l[b] = b == 0 ? (double)(c->seq > 1 ? c->seq - 1 : 0)
             : b == 1 ? 0.0 : (double)(c->seq - (b % 2));
    if (c->batch > 2) l[2] = (double)c->seq;
    tu_tensor(f, IN_LENS, c->hidden % 2 ? KL_I32 : KL_I64, 1, (const int64_t[]){c->batch}, l);
  } else {
    tu_absent(f, IN_LENS);
  }
  if (c->init) rand_input(f, IN_H0, 3, st, 0.8);
  else tu_absent(f, IN_H0);
  if (lstm) {
    if (c->init) rand_input(f, IN_C0, 3, st, 1.5);
    else tu_absent(f, IN_C0);
    if (c->peep) rand_input(f, IN_P, 2, (const int64_t[]){dirs, 3 * c->hidden}, 0.7);
    else tu_absent(f, IN_P);
  }
  char what[160];
  describe(c, what, sizeof what);
  if (tu_run(f) != KILN_OK) fail_msg("%s: the reference: %s", what, f->e.msg);
}

static kl_cpu_kernel kernel_for(const tu_fixture *f, bool const_weights, kl_isa isa) {
  const kl_type *types[TU_MAX_IO];
  for (int i = 0; i < f->n_in; i++) types[i] = f->present[i] ? &f->in[i] : NULL;
  return kl_cpu_isa_rnn_kernel(&f->g->nodes[f->node], types, f->n_in, const_weights, isa);
}

/* Kernel k on f's inputs, outputs shaped as the reference's into out[] (allocated here,
 * filled with NaNs first, so that an element not written shows). */
static kiln_status run_kernel(tu_fixture *f, kl_cpu_kernel k, int threads, void **state,
                              kl_tensor *out) {
  const kl_tensor *in[TU_MAX_IO];
  kl_tensor *outp[TU_MAX_IO];
  for (int i = 0; i < f->n_in; i++) in[i] = f->present[i] ? &f->tin[i] : NULL;
  for (int o = 0; o < f->n_out; o++) {
    out[o] = f->tout[o];
    int64_t n = kl_tensor_numel(&out[o]);
    float *d = malloc(sizeof(float) * (size_t)(n ? n : 1));
    assert_non_null(d);
    for (int64_t i = 0; i < n; i++) d[i] = NAN;
    out[o].data = d;
    outp[o] = &out[o];
  }
  kl_kernel_ctx c = {.node = &f->g->nodes[f->node], .n_in = f->n_in, .n_out = f->n_out,
                     .in = in, .out = outp, .e = &f->e, .threads = threads, .state = state};
  return (kiln_status)k.run(&c);
}

static void free_outputs(tu_fixture *f, kl_tensor *out) {
  for (int o = 0; o < f->n_out; o++) free(out[o].data);
}

static void compare(const tu_fixture *f, const kl_tensor *got, const char *what) {
  static const char *const names[] = {"Y", "Y_h", "Y_c"};
  for (int o = 0; o < f->n_out; o++) {
    const float *g = got[o].data, *w = f->tout[o].data;
    for (int64_t i = 0; i < kl_tensor_numel(&got[o]); i++)
      if (!(fabs((double)g[i] - w[i]) <= 1e-4 * (1 + fabs((double)w[i]))))
        fail_msg("%s: %s[%lld] is %.8g, the reference %.8g", what, names[o], (long long)i,
                 (double)g[i], (double)w[i]);
  }
}

static void same_bits(const tu_fixture *f, const kl_tensor *a, const kl_tensor *b,
                      const char *what) {
  for (int o = 0; o < f->n_out; o++)
    if (memcmp(a[o].data, b[o].data, sizeof(float) * (size_t)kl_tensor_numel(&a[o])) != 0)
      fail_msg("%s: output %d differs between 1 and 2 threads", what, o);
}

/* Case c at every level, W and R packed once and at every run, two runs each (the
 * second on the state the first left), on 1 and 2 threads. */
static void check_case(tu_fixture *f, const rnn_case *c) {
  build(f, c);
  kl_isa lv[3];
  int n_levels = tu_isa_levels(lv);
  char what[200], desc[160];
  describe(c, desc, sizeof desc);
  for (int l = 0; l < n_levels; l++)
    for (int once = 0; once < 2; once++) {
      kl_cpu_kernel k = kernel_for(f, once, lv[l]);
      snprintf(what, sizeof what, "%s at %s, %s", desc, kl_isa_level_name(lv[l]),
               once ? "packed once" : "packed every run");
      if (!k.run) fail_msg("%s: the fast kernel does not take the node", what);
      assert_string_equal(k.name, kl_cpu_isa_fns(lv[l])->name);
      void *state = NULL;
      kl_tensor one[3], two[3];
      /* kiln's products (not oneDNN's, whose sums may follow the thread count) */
      bool on_tiles = kl_cpu_isa_fns(lv[l])->gemv->tile && c->seq * c->batch <= KL_GEMM_MAX_ROWS;
      for (int r = 0; r < 2; r++) {
        if (run_kernel(f, k, 1, &state, one) != KILN_OK) fail_msg("%s: %s", what, f->e.msg);
        compare(f, one, what);
        if (run_kernel(f, k, 2, &state, two) != KILN_OK) fail_msg("%s: %s", what, f->e.msg);
        compare(f, two, what);
        if (on_tiles) same_bits(f, one, two, what);
        free_outputs(f, one);
        free_outputs(f, two);
      }
      k.release(state);
      /* and with no state slot, as constant folding runs kernels */
      if (run_kernel(f, k, 1, NULL, one) != KILN_OK) fail_msg("%s: %s", what, f->e.msg);
      compare(f, one, what);
      free_outputs(f, one);
    }
}

static const int64_t shapes[][4] = { /* hidden, input, batch, seq */
    {1, 1, 1, 1}, {7, 5, 3, 4}, {33, 17, 1, 9}, {65, 5, 3, 9}, {7, 17, 3, 1}, {1, 17, 3, 4},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])
static const char *const dirs[] = {"forward", "reverse", "bidirectional"};

/* Every direction and shape, with the optional parts in four mixes. */
static void check_op(void **state, const char *op, bool lbr) {
  tu_fixture *f = *state;
  bool lstm = !strcmp(op, "LSTM");
  for (int d = 0; d < 3; d++)
    for (size_t s = 0; s < N_SHAPES; s++)
      for (int mix = 0; mix < 4; mix++) {
        rnn_case c = {op, dirs[d], shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
                      .lbr = lbr};
        c.bias = mix == 1 || mix == 2;
        c.init = mix == 1 || mix == 2;
        c.lens = mix >= 2;
        c.layout1 = mix == 2;
        c.clip = mix >= 2 ? 0.9 : 0;
        c.peep = lstm && mix >= 2;
        c.input_forget = lstm && mix == 3;
        check_case(f, &c);
      }
}

static void test_rnn(void **state) { check_op(state, "RNN", false); }
static void test_gru(void **state) { check_op(state, "GRU", false); }
static void test_gru_linear_before_reset(void **state) { check_op(state, "GRU", true); }
static void test_lstm(void **state) { check_op(state, "LSTM", false); }

/* Larger rows, where the products and the rows' gates run as several tasks. */
static void test_threads(void **state) {
  tu_fixture *f = *state;
  const rnn_case cases[] = {
      {"LSTM", "bidirectional", 300, 40, 3, 3, .bias = true, .init = true, .lens = true},
      {"GRU", "forward", 260, 20, 5, 2, .bias = true, .init = true},
      {"GRU", "reverse", 260, 20, 1, 2, .bias = true, .lbr = true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(f, &cases[i]);
}

/* Runs of more than KL_GEMM_MAX_ROWS rows on small weights: at AVX2 the input
 * projection goes to oneDNN's sgemm (as dnnl.c hands MatMul's), kiln's tiles at the
 * generic level. */
static void test_many_rows(void **state) {
  tu_fixture *f = *state;
  const rnn_case cases[] = {
      {"LSTM", "bidirectional", 7, 5, 3, 50, .bias = true, .init = true, .lens = true,
       .peep = true},
      {"GRU", "reverse", 9, 3, 2, 70, .bias = true, .lens = true, .layout1 = true},
      {"RNN", "forward", 5, 17, 1, 130, .bias = true, .init = true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(f, &cases[i]);
}

/* W and R that change between runs (graph inputs, not constants): the kernel that packs
 * at every run follows them; the one that packs once keeps the first run's (which is
 * what it is given only for constants) where it runs its products on kiln's packed
 * panels, which a level without tiles (avx512: oneDNN's sgemm on the plain weights for
 * runs of more than one row) does only for single rows. */
static void test_weights_change(void **state) {
  tu_fixture *f = *state;
  const rnn_case cases[] = {
      {"LSTM", "bidirectional", 9, 5, 3, 4, .bias = true, .init = true, .peep = true},
      {"GRU", "forward", 17, 3, 1, 3, .bias = true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    build(f, &cases[i]);
    kl_cpu_kernel every = kernel_for(f, false, kl_isa_level()),
                  once = kernel_for(f, true, kl_isa_level());
    void *st_every = NULL, *st_once = NULL;
    kl_tensor a[3], b[3];
    assert_int_equal(run_kernel(f, every, 1, &st_every, a), KILN_OK);
    assert_int_equal(run_kernel(f, once, 1, &st_once, b), KILN_OK);
    compare(f, a, cases[i].op);
    same_bits(f, a, b, cases[i].op);
    free_outputs(f, a);
    free_outputs(f, b);
    for (int in = IN_W; in <= IN_R; in++) {
      float *w = f->tin[in].data;
      for (int64_t k = 0; k < kl_tensor_numel(&f->tin[in]); k++) w[k] = (float)nonzero(0.6);
    }
    assert_int_equal(tu_kernel(f), KILN_OK); /* the reference on the new weights */
    assert_int_equal(run_kernel(f, every, 1, &st_every, a), KILN_OK);
    compare(f, a, cases[i].op);
    assert_int_equal(run_kernel(f, once, 1, &st_once, b), KILN_OK);
    const float *y = b[0].data, *want = f->tout[0].data;
    bool differs = false;
    for (int64_t k = 0; k < kl_tensor_numel(&b[0]); k++)
      differs = differs || fabs((double)y[k] - want[k]) > 1e-3;
    if (kl_cpu_isa_fns(kl_isa_level())->gemv->tile)
      assert_true(differs); /* the weights packed at the first run */
    free_outputs(f, a);
    free_outputs(f, b);
    every.release(st_every);
    once.release(st_once);
  }
}

/* ---- through sessions ---- */

static int rand_const(kl_graph *g, int rank, const int64_t *dims, float span) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  float *v = malloc(sizeof(float) * (size_t)n);
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) v[i] = (float)nonzero(span);
  int id = tu_graph_const(g, NULL, KL_F32, rank, dims, v);
  free(v);
  return id;
}

/* An LSTM (or GRU) over X [5, 2, 6] (a graph input) with constant W, R, B, hidden 4;
 * every output a graph output. activations: NULL for the default. */
static kl_graph *rnn_graph(kl_op op, const char *const *acts, int n_acts) {
  kl_graph *g = tu_graph_new();
  int64_t gh = (op == KL_OP_LSTM ? 4 : 3) * 4;
  int x = tu_graph_input(g, "X", KL_F32, 3, (const int64_t[]){5, 2, 6});
  int w = rand_const(g, 3, (const int64_t[]){1, gh, 6}, 0.6f);
  int r = rand_const(g, 3, (const int64_t[]){1, gh, 4}, 0.6f);
  int b = rand_const(g, 2, (const int64_t[]){1, 2 * gh}, 0.5f);
  int n = tu_graph_output_node(g, op, 4, (const int[]){x, w, r, b}, op == KL_OP_LSTM ? 3 : 2);
  assert_int_equal(kl_node_set_int(g, n, "hidden_size", 4, NULL), KILN_OK);
  if (acts)
    assert_int_equal(kl_node_set_strings(g, n, "activations", acts, n_acts, NULL), KILN_OK);
  return g;
}

/* The index of m's node of op op. */
static int node_of(const kiln_model *m, kl_op op) {
  for (int i = 0; i < m->g->n_nodes; i++)
    if (m->g->nodes[i].op == op) return i;
  fail_msg("no %s node", kl_op_name(op));
  return -1;
}

static float *run_model(kiln_session *s, const kiln_model *m, int64_t *count) {
  float x[60];
  for (int i = 0; i < 60; i++) x[i] = (float)nonzero(1.0);
  float *bufs[1] = {x};
  return tu_run_f32(s, m, bufs, count);
}

/* The session gives the node the fast kernel (named after kiln's level, not "ref"),
 * which matches the reference session's outputs. */
static void test_session_fast(void **state) {
  (void)state;
  kl_op ops[] = {KL_OP_LSTM, KL_OP_GRU};
  for (int o = 0; o < 2; o++) {
    kiln_model *m = tu_model_of(rnn_graph(ops[o], NULL, 0), 2);
    kiln_session *fast = tu_session(m, false, 1), *ref = tu_session(m, true, 1);
    uint32_t seed = rng;
    int64_t n_got, n_want;
    float *got = run_model(fast, m, &n_got);
    rng = seed; /* the same X */
    float *want = run_model(ref, m, &n_want);
    int node = node_of(m, ops[o]);
    assert_string_equal(kl_session_kernel_name(fast, node),
                        kl_cpu_isa_fns(kl_isa_level())->name);
    assert_string_equal(kl_session_kernel_name(ref, node), "ref");
    /* the session's memory counts the packed W (gh x 6) and R (gh x 4) the kernel holds */
    int64_t gh = (ops[o] == KL_OP_LSTM ? 4 : 3) * 4;
    assert_true(kl_session_held_bytes(fast) >= sizeof(float) * (size_t)(gh * (6 + 4)));
    assert_int_equal(n_got, n_want);
    for (int64_t i = 0; i < n_got; i++)
      if (!(fabs((double)got[i] - want[i]) <= 1e-4 * (1 + fabs((double)want[i]))))
        fail_msg("%s: element %lld is %.8g, the reference %.8g", kl_op_name(ops[o]),
                 (long long)i, (double)got[i], (double)want[i]);
    free(got);
    free(want);
    kiln_session_free(fast);
    kiln_session_free(ref);
    kiln_model_free(m);
  }
}

/* Activations other than the defaults stay on the reference kernel, which the session
 * names as such; the defaults spelled out take the fast one. */
static void test_session_other_activations(void **state) {
  (void)state;
  const char *const relu[] = {"Sigmoid", "Relu", "Tanh"}, *const spelled[] = {"sigmoid",
                                                                              "Tanh", "tanh"};
  kiln_model *m = tu_model_of(rnn_graph(KL_OP_LSTM, relu, 3), 2);
  kiln_session *s = tu_session(m, false, 1);
  int64_t n;
  free(run_model(s, m, &n));
  assert_string_equal(kl_session_kernel_name(s, node_of(m, KL_OP_LSTM)), "ref");
  kiln_session_free(s);
  kiln_model_free(m);
  m = tu_model_of(rnn_graph(KL_OP_LSTM, spelled, 3), 2);
  s = tu_session(m, false, 1);
  free(run_model(s, m, &n));
  assert_string_equal(kl_session_kernel_name(s, node_of(m, KL_OP_LSTM)),
                      kl_cpu_isa_fns(kl_isa_level())->name);
  kiln_session_free(s);
  kiln_model_free(m);
}

/* The work bound: the LSTM's 83,520 steps (10 rows through W and R's 160 weights, and
 * each row's gates and loop, 8192) count 3 to 16 times on the fast kernel (avx512 to
 * generic), 192 times on the reference kernel (src/ir/work_weight.c): under 4 x 10^6,
 * and over it. */
static void test_work_bound(void **state) {
  (void)state;
  kiln_model *m = tu_model_of(rnn_graph(KL_OP_LSTM, NULL, 0), 2);
  for (int reference = 0; reference < 2; reference++) {
    kiln_options *o;
    assert_int_equal(kiln_options_create(&o), KILN_OK);
    assert_int_equal(kiln_options_set_int(o, "reference", reference), KILN_OK);
    assert_int_equal(kiln_options_set_int(o, "max_work", 4000000), KILN_OK);
    kiln_session *s = NULL;
    assert_int_equal(kiln_session_create(m, o, &s), KILN_OK);
    kiln_options_free(o);
    float x[60];
    for (int i = 0; i < 60; i++) x[i] = (float)nonzero(1.0);
    int64_t dims[3] = {5, 2, 6};
    assert_int_equal(kiln_session_set_input(s, "X", KILN_DTYPE_FLOAT32, 3, dims, x, sizeof x),
                     KILN_OK);
    kiln_status st = kiln_session_run(s);
    if (reference) {
      assert_int_equal(st, KILN_ERR_LIMIT);
      tu_assert_contains(kiln_session_error(s), "reference kernel");
    } else if (st != KILN_OK) {
      fail_msg("fast session: %s", kiln_session_error(s));
    }
    kiln_session_free(s);
  }
  kiln_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_rnn),
      TU_TEST(test_gru),
      TU_TEST(test_gru_linear_before_reset),
      TU_TEST(test_lstm),
      TU_TEST(test_threads),
      TU_TEST(test_many_rows),
      TU_TEST(test_weights_change),
      cmocka_unit_test(test_session_fast),
      cmocka_unit_test(test_session_other_activations),
      cmocka_unit_test(test_work_bound),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
