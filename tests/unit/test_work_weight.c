/* max_work's weights (src/ir/work_weight.c): what one step (kl_node_work) of each
 * class of node counts against max_work, on the kernel kiln picks at this process's ISA
 * level and on the portable reference kernel, and the bound itself: a session runs a
 * node whose weighed steps are exactly max_work and refuses it at one less, naming the
 * kernel's class and the weight. An optimized kernel that hands a run's shapes to the
 * reference kernel (a pooling window wider than its buffers) is weighed as the
 * reference there. No timing here: tools/measure_work.py measures what the weights
 * claim (docs/fuzzing.md). Runs at every ISA level this CPU has (run_levels.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "runtime/session.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An input of a case's node: a float32 graph input (zeros), a float32 or int64
 * constant (vals), or absent. */
typedef enum arg_kind { ABSENT, INPUT, FLOATS, INTS } arg_kind;
typedef struct arg {
  arg_kind kind;
  int rank;
  int64_t dims[5];
  double vals[8]; /* FLOATS and INTS: the first numel values; the rest zeros */
} arg;

#define IN(r, ...) {INPUT, r, {__VA_ARGS__}, {0}}
#define W(r, ...) {FLOATS, r, {__VA_ARGS__}, {0}}
#define INTS1(...) {INTS, 1, {TU_COUNT(double, __VA_ARGS__)}, {__VA_ARGS__}}
#define NONE {ABSENT, 0, {0}, {0}}

/* Weights: the reference kernel's, and kiln's default kernel's at the AVX-512 levels and
 * at avx2 (the generic level: 4 times avx2's). A case whose op has no optimized kernel
 * runs the reference in both sessions, and its fast columns are not read. */
typedef struct wcase {
  const char *what;
  const char *op; /* ONNX name; "kiln.X" for kiln's own */
  int n_out;
  arg in[5];
  const char *attrs; /* "name=v name=v1,v2 name=text" */
  double ref, avx512, avx2;
} wcase;

static const wcase cases[] = {
    {"MatMul", "MatMul", 1, {IN(2, 64, 256), W(2, 256, 64)}, "", 768, 1, 2},
    {"Conv, one channel pair, 64 taps", "Conv", 1, {IN(3, 1, 1, 4159), W(3, 1, 1, 64)}, "",
     768, 96, 192},
    {"Conv, depthwise", "Conv", 1, {IN(4, 1, 8, 32, 32), W(4, 8, 1, 3, 3)}, "group=8", 768, 96,
     192},
    {"Conv, 4 x 4 channels", "Conv", 1, {IN(4, 1, 4, 32, 32), W(4, 4, 4, 3, 3)}, "", 768, 12,
     24},
    {"Conv, 32 x 32 channels", "Conv", 1, {IN(4, 1, 32, 16, 16), W(4, 32, 32, 3, 3)}, "", 768,
     1.5, 3},
    {"ConvTranspose, one channel pair", "ConvTranspose", 1, {IN(4, 1, 1, 32, 32), W(4, 1, 1, 3, 3)},
     "strides=2,2", 256, 192, 384},
    {"DeformConv", "DeformConv", 1, {IN(4, 1, 1, 8, 8), W(4, 1, 1, 3, 3), W(4, 1, 18, 6, 6)}, "",
     3072, 3072, 3072},
    {"MaxPool 3x3", "MaxPool", 1, {IN(4, 1, 16, 16, 16)}, "kernel_shape=3,3", 768, 12, 24},
    {"LpPool", "LpPool", 1, {IN(4, 1, 8, 16, 16)}, "kernel_shape=3,3", 1536, 1536, 1536},
    {"Col2Im", "Col2Im", 1, {IN(3, 1, 16, 49), INTS1(10, 10), INTS1(4, 4)}, "", 384, 384, 384},
    {"LSTM", "LSTM", 1, {IN(3, 10, 1, 8), W(3, 1, 32, 8), W(3, 1, 32, 8)}, "hidden_size=8", 192,
     3, 4},
    {"Det", "Det", 1, {IN(3, 16, 8, 8)}, "", 12, 12, 12},
    {"TopK", "TopK", 2, {IN(2, 4, 1000), INTS1(10)}, "", 384, 256, 256},
    {"Einsum", "Einsum", 1, {IN(2, 16, 32), W(2, 32, 16)}, "equation=ij,jk->ik", 8192, 8192,
     8192},
    {"DFT", "DFT", 1, {IN(3, 4, 64, 1), NONE, INTS1(1)}, "", 48, 48, 48},
    {"RoiAlign", "RoiAlign", 1,
     {IN(4, 1, 4, 16, 16), {FLOATS, 2, {1, 4}, {0, 0, 8, 8}}, INTS1(0)}, "", 512, 96, 96},
    {"Attention", "Attention", 1, {IN(4, 1, 2, 16, 8), IN(4, 1, 2, 16, 8), IN(4, 1, 2, 16, 8)}, "",
     256, 256, 256},
    {"kiln.MultiHeadAttention", "kiln.MultiHeadAttention", 1,
     {IN(3, 1, 16, 16), IN(3, 1, 16, 16), IN(3, 1, 16, 16)}, "num_heads=2", 256, 1, 2},
    {"Unique", "Unique", 1, {IN(1, 1000)}, "", 3072, 3072, 3072},
    {"LRN", "LRN", 1, {IN(4, 1, 8, 8, 8)}, "size=3", 384, 384, 384},
    {"Resize, cubic", "Resize", 1, {IN(4, 1, 2, 16, 16), NONE, W(1, 4)}, "mode=cubic", 6144,
     6144, 6144},
    {"Resize, linear", "Resize", 1, {IN(4, 1, 2, 16, 16), NONE, W(1, 4)}, "mode=linear",
     2048, 96, 96},
    {"GridSample, cubic", "GridSample", 1, {IN(4, 1, 2, 8, 8), IN(4, 1, 8, 8, 2)}, "mode=cubic",
     2048, 2048, 2048},
    {"Transpose", "Transpose", 1, {IN(2, 64, 64)}, "perm=1,0", 768, 192, 192},
    {"Add (elements)", "Add", 1, {IN(1, 1000), W(1, 1)}, "", 768, 48, 64},
};

/* Resize's scales (an all-zero constant would be refused): x2 on the last two dims. */
static void fill_scales(const wcase *c, int k, double *vals) {
  if (strcmp(c->op, "Resize") == 0 && k == 2)
    vals[0] = 1, vals[1] = 1, vals[2] = 2, vals[3] = 2;
}

static void set_attrs(kl_graph *g, int node, const char *spec) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(tok, '=');
    assert_non_null(eq);
    *eq = '\0';
    const char *v = eq + 1;
    kl_err e = {0};
    if (v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) {
      int64_t ints[8];
      int n = 0;
      for (const char *p = v; *p && n < 8; p = strchr(p, ',') ? strchr(p, ',') + 1 : "")
        ints[n++] = strtoll(p, NULL, 10);
      bool list = strchr(v, ',') || strcmp(tok, "kernel_shape") == 0 || strcmp(tok, "strides") == 0 ||
                  strcmp(tok, "perm") == 0;
      assert_int_equal(list ? kl_node_set_ints(g, node, tok, ints, n, &e)
                            : kl_node_set_int(g, node, tok, ints[0], &e),
                       KILN_OK);
    } else {
      assert_int_equal(kl_node_set_string(g, node, tok, v, &e), KILN_OK);
    }
  }
}

static kiln_model *model_of(const wcase *c) {
  kl_graph *g = tu_graph_new();
  int ids[5], n_in = 0;
  for (int k = 0; k < 5; k++)
    if (c->in[k].kind != ABSENT) n_in = k + 1;
  for (int k = 0; k < n_in; k++) {
    const arg *a = &c->in[k];
    char name[8];
    snprintf(name, sizeof name, "in%d", k);
    int64_t n = 1;
    for (int d = 0; d < a->rank; d++) n *= a->dims[d];
    double vals[8] = {0};
    memcpy(vals, a->vals, sizeof vals);
    fill_scales(c, k, vals);
    if (a->kind == ABSENT) {
      ids[k] = KL_ABSENT;
    } else if (a->kind == INPUT) {
      ids[k] = tu_graph_input(g, name, KL_F32, a->rank, a->dims);
    } else if (a->kind == INTS) {
      int64_t *v = calloc((size_t)n, sizeof *v);
      for (int64_t i = 0; i < n && i < 8; i++) v[i] = (int64_t)vals[i];
      ids[k] = tu_graph_const(g, name, KL_I64, a->rank, a->dims, v);
      free(v);
    } else {
      float *v = calloc((size_t)n, sizeof *v);
      for (int64_t i = 0; i < n && i < 8; i++) v[i] = (float)vals[i];
      ids[k] = tu_graph_const(g, name, KL_F32, a->rank, a->dims, v);
      free(v);
    }
  }
  bool kiln = strncmp(c->op, "kiln.", 5) == 0;
  kl_op op = kl_op_lookup(kiln ? "kiln" : "", kiln ? c->op + 5 : c->op);
  assert_int_not_equal(op, KL_OP_COUNT);
  int node = tu_graph_output_node(g, op, n_in, ids, c->n_out);
  set_attrs(g, node, c->attrs);
  return tu_model_of(g, 0);
}

/* One run of m's node under max_work (threads 1); its steps, weight and kernel. */
static kiln_status run_under(const kiln_model *m, bool reference, int64_t max_work,
                             double *steps, double *weight, char *kernel, char *msg,
                             size_t len) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "max_work", max_work), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "reference", reference), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "threads", 1), KILN_OK);
  kiln_session *s = NULL;
  assert_int_equal(kiln_session_create(m, o, &s), KILN_OK);
  kiln_options_free(o);
  void *bufs[5] = {NULL};
  for (int k = 0; k < kiln_model_input_count(m); k++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, k, &info), KILN_OK);
    int64_t n = 1;
    for (int d = 0; d < info.rank; d++) n *= info.dims[d];
    bufs[k] = calloc((size_t)n + 1, sizeof(float));
    assert_int_equal(kiln_session_set_input(s, info.name, info.dtype, info.rank, info.dims,
                                            bufs[k], (size_t)n * sizeof(float)),
                     KILN_OK);
  }
  kiln_status st = kiln_session_run(s);
  snprintf(msg, len, "%s", kiln_session_error(s));
  *steps = kl_session_node_steps(s, 0, weight);
  snprintf(kernel, 32, "%s", kl_session_kernel_name(s, 0));
  for (int k = 0; k < 5; k++) free(bufs[k]);
  kiln_session_free(s);
  return st;
}

static double fast_weight(const wcase *c) {
  kl_isa isa = kl_isa_level();
  return isa >= KL_ISA_AVX512 ? c->avx512 : isa == KL_ISA_AVX2 ? c->avx2 : 4 * c->avx2;
}

/* Each class's weight on the kernel that runs it, and the bound at its weighed steps. */
static void test_weights_and_bound(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const wcase *c = &cases[i];
    kiln_model *m = model_of(c);
    for (int reference = 0; reference < 2; reference++) {
      double steps, weight, s2, w2;
      char kernel[32], k2[32], msg[512];
      kiln_status st = run_under(m, reference, INT64_MAX, &steps, &weight, kernel, msg,
                                 sizeof msg);
      if (st != KILN_OK) fail_msg("%s (%s): %s", c->what, reference ? "ref" : "fast", msg);
      bool ref = strcmp(kernel, "ref") == 0;
      if (reference) assert_true(ref);
      double want = ref ? c->ref : fast_weight(c);
      if (weight != want)
        fail_msg("%s: kernel %s weighs a step %g, expected %g", c->what, kernel, weight, want);
      assert_true(steps > 0);
      /* at its weighed steps it runs; one less, it is refused, naming the class */
      int64_t bound = (int64_t)ceil(steps * weight);
      st = run_under(m, reference, bound, &s2, &w2, k2, msg, sizeof msg);
      if (st != KILN_OK) fail_msg("%s at max_work %lld: %s", c->what, (long long)bound, msg);
      st = run_under(m, reference, bound - 1, &s2, &w2, k2, msg, sizeof msg);
      char words[160];
      snprintf(words, sizeof words, "%s, whose steps count %g times a dense product's",
               ref ? "kiln's reference kernel runs it, a scalar loop" : "an optimized kernel runs it",
               weight);
      if (weight == 1) snprintf(words, sizeof words, "over max_work %lld (option max_work",
                                (long long)(bound - 1));
      tu_assert_status(st, KILN_ERR_LIMIT, msg, words);
    }
    kiln_model_free(m);
  }
}

/* The weight follows the channel pairs per group of an optimized convolution, at each
 * level (directly: kl_work_weight is pure); the reference and a device do not care. */
static void test_conv_pairs(void **state) {
  (void)state;
  static const struct {
    int64_t c, m, group;
    double avx512; /* avx2: twice */
  } pairs[] = {{1, 1, 1, 96},   {8, 8, 8, 96},  {2, 1, 1, 48},  {2, 2, 1, 24},
               {4, 4, 1, 12},   {8, 8, 1, 6},   {16, 16, 1, 3}, {32, 32, 1, 1.5},
               {48, 48, 1, 1},  {64, 64, 2, 1.5}, {256, 256, 1, 1}};
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){1, 8, 8, 8});
  int w = tu_graph_input(g, "w", KL_F32, 4, (int64_t[]){8, 1, 3, 3});
  int n = tu_graph_output_node(g, KL_OP_Conv, 2, (int[]){x, w}, 1);
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    kl_err e = {0};
    assert_int_equal(kl_node_set_int(g, n, "group", pairs[i].group, &e), KILN_OK);
    kl_tensor tx = {KL_F32, 4, {1, pairs[i].c, 8, 8}, NULL};
    kl_tensor tw = {KL_F32, 4, {pairs[i].m, pairs[i].c / pairs[i].group, 3, 3}, NULL};
    const kl_tensor *in[2] = {&tx, &tw};
    static const struct {
      kl_work_kernel k;
      double times;
    } levels[] = {{KL_WORK_AVX512, 1}, {KL_WORK_AVX2, 2}, {KL_WORK_GENERIC, 8}};
    for (int l = 0; l < 3; l++) {
      double got = kl_work_weight(&g->nodes[n], 2, in, levels[l].k);
      if (got != levels[l].times * pairs[i].avx512)
        fail_msg("Conv %lld -> %lld, group %lld, level %d: weight %g, expected %g",
                 (long long)pairs[i].c, (long long)pairs[i].m, (long long)pairs[i].group, l,
                 got, levels[l].times * pairs[i].avx512);
    }
    assert_true(kl_work_weight(&g->nodes[n], 2, in, KL_WORK_REF) == 768);
    assert_true(kl_work_weight(&g->nodes[n], 2, in, KL_WORK_UNIT) == 1);
  }
  kl_graph_free(g);
}

/* A 1-D MaxPool window of 4096 taps is wider than the optimized kernel's row buffers:
 * it hands those shapes to the reference kernel, 1000 times slower a step, and that
 * hand-over is weighed as the reference. Between the two weighings the node is
 * accepted before it runs and refused at the hand-over; the reference session refuses
 * it before it runs. */
static void test_fallback_weighed_as_reference(void **state) {
  (void)state;
  wcase c = {"MaxPool of 4096 taps", "MaxPool", 1, {IN(3, 1, 16, 4200)}, "kernel_shape=4096",
             768, 12, 24};
  kiln_model *m = model_of(&c);
  double steps, weight, s2, w2;
  char kernel[32], k2[32], msg[512];
  assert_int_equal(run_under(m, false, INT64_MAX, &steps, &weight, kernel, msg, sizeof msg),
                   KILN_OK);
  if (strcmp(kernel, "ref") != 0) {
    assert_true(weight == fast_weight(&c));
    int64_t between = (int64_t)(steps * c.ref) - 1; /* over the fast weighing too */
    assert_true(between > steps * weight);
    kiln_status st = run_under(m, false, between, &s2, &w2, k2, msg, sizeof msg);
    tu_assert_status(st, KILN_ERR_LIMIT, msg, "its optimized kernel has no path for these "
                     "shapes, and kiln's reference kernel, a scalar loop whose steps count 768 "
                     "times, would run them");
    assert_int_equal(run_under(m, false, between + 1, &s2, &w2, k2, msg, sizeof msg), KILN_OK);
  }
  int64_t bound = (int64_t)(steps * c.ref);
  kiln_status st = run_under(m, true, bound - 1, &s2, &w2, k2, msg, sizeof msg);
  tu_assert_status(st, KILN_ERR_LIMIT, msg, "kiln's reference kernel runs it");
  kiln_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_weights_and_bound),
      cmocka_unit_test(test_conv_pairs),
      cmocka_unit_test(test_fallback_weighed_as_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
