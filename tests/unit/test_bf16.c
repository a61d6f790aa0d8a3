/* Precision bf16 on the CPU (option "precision" = "bf16"): oneDNN's convolutions and
 * matrix products take their operands rounded to bf16 and sum in float32.
 *
 * Where the CPU has native bf16 (kiln's level avx512_bf16 or amx), every case runs
 * twice in a bf16 session and is compared with a float32 reference session fed the
 * same inputs and weights rounded to bf16 (round to nearest even, as oneDNN's reorder
 * rounds): bf16 x bf16 products are exact in float32, so the two differ only by the
 * order of the sums (1e-4 relative). The bf16 output must also differ from the
 * float32 reference on the unrounded operands (random data: a session that silently
 * computed float32 fails there), and oneDNN's implementation must be named "... bf16"
 * and not be a reference one, for every case that oneDNN 2.6 has fast bf16 kernels
 * for (all but depthwise convolutions, which may stay float32: then the output must
 * match float32's).
 *
 * Chains: activations passed between two bf16 nodes are held in bf16 (the producer
 * writes bf16, the consumer reads it with no conversion) exactly where the plan's rule
 * says (read only as X by bf16 nodes, no Sum, no graph output), and give what the same
 * session gives with every activation float32 between the nodes (rounding to bf16 at
 * the producer or at the consumer's conversion is the same rounding).
 *
 * Below those levels the session must refuse precision bf16 with a message that says
 * why (KILN_ERR_UNSUPPORTED), and at every level a reference session must refuse it
 * (KILN_ERR_INVALID_ARGUMENT). tests/run_levels.sh runs this at every level the CPU
 * has. At the AMX level the Gemm and MatMul cases with constant weights must run on
 * kiln's own tile product ("kiln:amx gemm bf16", tests/unit/test_amx.c tests it
 * alone). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "backends/cpu/isa/isa_fns.h"
#include "kl_config.h"
#include "runtime/session.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng;
static bool round_consts; /* cst(): round the constants to bf16 */

static float to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u += 0x7fffu + (u >> 16 & 1u); /* round to nearest even (no NaN in these data) */
  u &= 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

/* A constant; weights (not biases, which oneDNN adds in float32) rounded to bf16 when
 * round_consts. */
static int cst_of(kl_graph *g, int rank, const int64_t *dims, bool weight) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  float *d = malloc(sizeof(float) * (size_t)n);
  assert_non_null(d);
  for (int64_t i = 0; i < n; i++) {
    d[i] = tu_rand_f32(&rng, -1, 1);
    if (round_consts && weight) d[i] = to_bf16(d[i]);
  }
  int v = kl_graph_add_const(g, NULL, KL_F32, rank, dims, d, sizeof(float) * (size_t)n, false,
                             NULL);
  assert_true(v >= 0);
  return v;
}

static int cst(kl_graph *g, int rank, const int64_t *dims) { return cst_of(g, rank, dims, true); }
static int bias(kl_graph *g, int64_t n) { return cst_of(g, 1, &n, false); }

static kiln_session *session(const kiln_model *m, const char *precision, bool reference,
                             kiln_status want, kiln_session **out) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "reference", reference), KILN_OK);
  if (precision) assert_int_equal(kiln_options_set_string(o, "precision", precision), KILN_OK);
  kiln_session *s = NULL;
  kiln_status st = kiln_session_create(m, o, &s);
  kiln_options_free(o);
  if (st != want)
    fail_msg("session (precision %s, reference %d): status %d, expected %d: %s",
             precision ? precision : "-", reference, st, want, kiln_session_error(s));
  *out = s;
  return s;
}

typedef enum { C_CONV, C_DECONV, C_GEMM, C_MATMUL, C_MATMUL_IN } case_kind;

typedef struct bf_case {
  const char *what;
  case_kind kind;
  int64_t x[4], w[4];
  int64_t group, stride, pad;
  bool bias, relu_sum; /* FusedConv with Relu over Bias + Sum */
  bool may_stay_f32;   /* oneDNN 2.6 may have no fast bf16 kernel for it */
} bf_case;

static const bf_case cases[] = {
    {"conv 3x3 37->45 pad 1 batch 2", C_CONV, {2, 37, 9, 7}, {45, 37, 3, 3}, 1, 1, 1, true,
     false, false},
    {"conv 3x3 fused Bias + Sum + Relu", C_CONV, {1, 20, 11, 6}, {33, 20, 3, 3}, 1, 1, 1, true,
     true, false},
    {"conv 1x1 64->96", C_CONV, {1, 64, 5, 5}, {96, 64, 1, 1}, 1, 1, 0, true, false, false},
    {"conv 7x7 stride 2 from 3 channels", C_CONV, {1, 3, 17, 15}, {24, 3, 7, 7}, 1, 2, 3, true,
     false, false},
    {"conv groups 4", C_CONV, {1, 32, 9, 9}, {40, 8, 3, 3}, 4, 1, 1, false, false, true},
    {"conv depthwise 32", C_CONV, {1, 32, 9, 9}, {32, 1, 3, 3}, 32, 1, 1, true, false, true},
    {"deconv stride 2", C_DECONV, {1, 24, 5, 6}, {24, 17, 3, 3}, 1, 2, 1, true, false, true},
    {"gemm transB 33x200 by 77x200 + C", C_GEMM, {33, 200}, {77, 200}, 1, 1, 0, true, false,
     false},
    {"matmul [3,17,130] x [130,50]", C_MATMUL, {3, 17, 130}, {130, 50}, 1, 1, 0, false, false,
     false},
    {"matmul [2,17,64] x input [2,64,19]", C_MATMUL_IN, {2, 17, 64}, {2, 64, 19}, 1, 1, 0,
     false, false, false},
    {"matmul [2,150,40] x [40,30] (300 rows)", C_MATMUL, {2, 150, 40}, {40, 30}, 1, 1, 0,
     false, false, false},
};

static int rank_of(const int64_t *d) {
  int r = 0;
  while (r < 4 && d[r]) r++;
  return r;
}

/* The case's graph; its constants rounded to bf16 when round_consts. The same seed
 * gives the same numbers either way. */
static kl_graph *build(const bf_case *c, bool rounded) {
  rng = 4242;
  round_consts = rounded;
  kl_graph *g = kl_graph_new();
  int rx = rank_of(c->x), rw = rank_of(c->w);
  int x = tu_graph_input(g, "x", KL_F32, rx, c->x);
  if (c->kind == C_GEMM) {
    int w = cst(g, rw, c->w);
    int b = bias(g, c->w[0]);
    int n = tu_graph_output_node(g, KL_OP_Gemm, 3, (int[]){x, w, b}, 1);
    assert_int_equal(kl_node_set_int(g, n, "transB", 1, NULL), KILN_OK);
    return g;
  }
  if (c->kind == C_MATMUL || c->kind == C_MATMUL_IN) {
    int w = c->kind == C_MATMUL ? cst(g, rw, c->w) : tu_graph_input(g, "w", KL_F32, rw, c->w);
    tu_graph_output_node(g, KL_OP_MatMul, 2, (int[]){x, w}, 1);
    return g;
  }
  bool deconv = c->kind == C_DECONV;
  int w = cst(g, rw, c->w);
  int64_t m = deconv ? c->w[1] * c->group : c->w[0];
  int b = c->bias ? bias(g, m) : KL_ABSENT;
  int n;
  if (c->relu_sum) { /* Sum: a second input of Y's shape (same pads: same size) */
    int64_t yd[4] = {c->x[0], m, c->x[2], c->x[3]};
    int sum = tu_graph_input(g, "sum", KL_F32, 4, yd);
    n = tu_graph_output_node(g, KL_OP_KilnFusedConv, 4, (int[]){x, w, b, sum}, 1);
    assert_int_equal(kl_node_set_string(g, n, "activation", "Relu", NULL), KILN_OK);
  } else {
    n = tu_graph_output_node(g, deconv ? KL_OP_ConvTranspose : KL_OP_Conv, 3,
                             (int[]){x, w, b}, 1);
  }
  int64_t st[2] = {c->stride, c->stride}, pads[4] = {c->pad, c->pad, c->pad, c->pad};
  tu_node_ints(g, n, "strides", 2, st);
  tu_node_ints(g, n, "pads", 4, pads);
  assert_int_equal(kl_node_set_int(g, n, "group", c->group, NULL), KILN_OK);
  return g;
}

static bool native(void) { return kl_isa_level() >= KL_ISA_AVX512_BF16; }

/* Inputs of m, random in [-2, 2]; rounded to bf16 when `rounded` (same seed), except a
 * Sum, which oneDNN adds in float32. */
static void inputs(const kiln_model *m, bool rounded, float **bufs) {
  uint32_t r = 99;
  for (int i = 0; i < kiln_model_input_count(m); i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    int64_t n = 1;
    for (int d = 0; d < info.rank; d++) n *= info.dims[d];
    bufs[i] = malloc(sizeof(float) * (size_t)n);
    for (int64_t k = 0; k < n; k++) {
      bufs[i][k] = tu_rand_f32(&r, -2, 2);
      if (rounded && strcmp(info.name, "sum") != 0) bufs[i][k] = to_bf16(bufs[i][k]);
    }
  }
}

static double max_rel(const float *a, const float *b, int64_t n, int64_t *at) {
  double worst = 0;
  for (int64_t k = 0; k < n; k++) {
    double d = fabs((double)a[k] - b[k]) / (1 + fabs((double)b[k]));
    if (!(d <= worst)) { /* NaN too */
      worst = d;
      *at = k;
    }
  }
  return worst;
}

static void check_released(const bf_case *c, const float *want, int64_t n_want);

static void check_case(const bf_case *c) {
  kiln_model *m = tu_model_of(build(c, false), 0);
  kiln_model *m_round = tu_model_of(build(c, true), 0);
  float *x[4] = {NULL}, *x_round[4] = {NULL};
  inputs(m, false, x);
  inputs(m, true, x_round);
  kiln_session *bf, *ref, *ref_round;
  session(m, "bf16", false, KILN_OK, &bf);
  session(m, NULL, true, KILN_OK, &ref);
  session(m_round, NULL, true, KILN_OK, &ref_round);
  int64_t n_f32, n_want, n_got, at = 0;
  float *f32 = tu_run_f32(ref, m, x, &n_f32);
  float *want = tu_run_f32(ref_round, m_round, x_round, &n_want);
  for (int run = 0; run < 2; run++) { /* the second from the primitive cache */
    float *got = tu_run_f32(bf, m, x, &n_got);
    assert_int_equal(n_got, n_want);
    const char *impl = kl_session_kernel_impl(bf, 0);
    const char *slow = kl_session_slow_path(bf, 0);
    if (slow) fail_msg("%s: ran on %s", c->what, slow);
    bool in_bf16 = impl && strstr(impl, " bf16");
    if (!in_bf16 && !c->may_stay_f32)
      fail_msg("%s: ran on '%s' (kernel %s), not in bf16", c->what, impl ? impl : "(none)",
               kl_session_kernel_name(bf, 0));
    /* at the AMX level a product with constant weights and at most KL_AMX_MAX_ROWS rows
     * runs on kiln's tiles (run_amx.c), one of more rows on oneDNN's matmul */
    int64_t rows = c->x[0] * (c->kind == C_MATMUL && rank_of(c->x) == 3 ? c->x[1] : 1);
    bool tiles = rows <= KL_AMX_MAX_ROWS;
    if (kl_isa_level() == KL_ISA_AMX && (c->kind == C_GEMM || c->kind == C_MATMUL) &&
        tiles != (impl && strstr(impl, "kiln:amx")))
      fail_msg("%s: ran on '%s' (%lld rows)", c->what, impl ? impl : "(none)", (long long)rows);
    double err = max_rel(got, in_bf16 ? want : f32, n_got, &at);
    if (!(err <= 1e-4))
      fail_msg("%s (run %d, %s): element %lld is %.8g, the float32 reference on %s operands "
               "%.8g", c->what, run + 1, impl ? impl : "-", (long long)at, (double)got[at],
               in_bf16 ? "bf16-rounded" : "the same", (double)(in_bf16 ? want : f32)[at]);
    if (in_bf16 && !(max_rel(got, f32, n_got, &at) > 1e-6))
      fail_msg("%s: the bf16 session's output equals float32's on unrounded operands: it did "
               "not compute in bf16", c->what);
    printf("%-40s %-32s max rel. error vs bf16-rounded float32 %.2e\n", c->what,
           impl ? impl : "-", err);
    if (run == 1 && (c->kind == C_GEMM || c->kind == C_MATMUL)) check_released(c, got, n_got);
    free(got);
  }
  free(f32);
  free(want);
  for (int i = 0; i < 4; i++) {
    free(x[i]);
    free(x_round[i]);
  }
  kiln_session_free(bf);
  kiln_session_free(ref);
  kiln_session_free(ref_round);
  kiln_model_free(m);
  kiln_model_free(m_round);
}

/* A bf16 session with release_weights over case c's graph: two runs that give exactly
 * what the session without it gave (want); at the AMX level the products' constant
 * weights are held only packed for the tiles, the model's float32 copy freed. */
static void check_released(const bf_case *c, const float *want, int64_t n_want) {
  kiln_model *m = tu_model_of(build(c, false), 0);
  float *x[4] = {NULL};
  inputs(m, false, x);
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "precision", "bf16"), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "release_weights", 1), KILN_OK);
  kiln_session *s = NULL;
  if (kiln_session_create(m, o, &s) != KILN_OK) fail_msg("%s", kiln_session_error(s));
  for (int run = 0; run < 2; run++) {
    int64_t n;
    float *got = tu_run_f32(s, m, x, &n);
    assert_int_equal(n, n_want);
    if (memcmp(got, want, sizeof(float) * (size_t)n) != 0)
      fail_msg("%s, release_weights (run %d): not the output without it", c->what, run + 1);
    free(got);
  }
  if (kl_isa_level() == KL_ISA_AMX) {
    for (int k = 0; k < m->g->n_nodes; k++) {
      const kl_node *n = &m->g->nodes[k];
      if (n->op != KL_OP_Gemm && n->op != KL_OP_MatMul) continue;
      if (m->g->values[n->in[1]].data)
        fail_msg("%s, release_weights: the float32 weights were kept", c->what);
    }
  }
  for (int i = 0; i < 4; i++) free(x[i]);
  kiln_options_free(o);
  kiln_session_free(s);
  kiln_model_free(m);
}

static void test_bf16_cases(void **state) {
  (void)state;
  if (!native()) {
    /* the same sessions must be refused here, saying why */
    kiln_model *m = tu_model_of(build(&cases[0], false), 0);
    kiln_session *s;
    session(m, "bf16", false, KILN_ERR_UNSUPPORTED, &s);
    const char *msg = kiln_session_error(s);
    if (!strstr(msg, "AVX512-BF16") || !strstr(msg, kl_isa_level_name(kl_isa_level())) ||
        !strstr(msg, "use fp32"))
      fail_msg("the refusal does not say why: %s", msg);
    printf("level %s: precision bf16 refused: %s\n", kl_isa_level_name(kl_isa_level()), msg);
    kiln_session_free(s);
    kiln_model_free(m);
    return;
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

/* ---- chains ---- */

static int conv(kl_graph *g, int x, int64_t cin, int64_t cout, int64_t k, int64_t stride,
                int sum) {
  int64_t wd[4] = {cout, cin, k, k}, p = k / 2;
  int w = cst(g, 4, wd), b = bias(g, cout);
  int y = tu_graph_value(g, NULL);
  int n = tu_graph_node(g, sum >= 0 ? KL_OP_KilnFusedConv : KL_OP_Conv, NULL, sum >= 0 ? 4 : 3,
                        (int[]){x, w, b, sum}, 1, &y);
  tu_node_ints(g, n, "strides", 2, (int64_t[]){stride, stride});
  tu_node_ints(g, n, "pads", 4, (int64_t[]){p, p, p, p});
  return y;
}

static int matmul(kl_graph *g, int x, int64_t k, int64_t n) {
  int w = cst(g, 2, (int64_t[]){k, n});
  return tu_graph_op(g, KL_OP_MatMul, 2, (int[]){x, w});
}

typedef struct chain_case {
  const char *what;
  int held; /* activations the plan must hold in bf16 */
  int which;
} chain_case;

static kl_graph *chain(int which) {
  rng = 777;
  round_consts = false;
  kl_graph *g = kl_graph_new();
  int x, y = -1;
  switch (which) {
  case 0: /* conv -> conv -> conv: the two activations between them */
    x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){1, 24, 13, 11});
    y = conv(g, conv(g, conv(g, x, 24, 32, 3, 1, -1), 32, 48, 1, 1, -1), 48, 16, 3, 2, -1);
    break;
  case 1: /* matmul -> matmul */
    x = tu_graph_input(g, "x", KL_F32, 3, (int64_t[]){2, 9, 40});
    y = matmul(g, matmul(g, x, 40, 64), 64, 24);
    break;
  case 2: { /* an activation that is also a graph output stays float32 */
    x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){1, 16, 9, 9});
    int a = conv(g, x, 16, 32, 3, 1, -1);
    assert_int_equal(kl_graph_add_output(g, a, NULL), KILN_OK);
    y = conv(g, a, 32, 8, 1, 1, -1);
    break;
  }
  case 3: { /* ... and one read as a Sum (a residual), and one read by Relu */
    x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){1, 16, 9, 9});
    int a = conv(g, x, 16, 16, 3, 1, -1);
    int b = conv(g, a, 16, 16, 3, 1, a);
    y = conv(g, tu_graph_op(g, KL_OP_Relu, 1, (int[]){b}), 16, 8, 1, 1, -1);
    break;
  }
  default: fail();
  }
  assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
  return g;
}

static void test_bf16_chains(void **state) {
  (void)state;
  if (!native()) { /* refused here as well */
    kiln_model *m = tu_model_of(chain(0), 0);
    kiln_session *s;
    session(m, "bf16", false, KILN_ERR_UNSUPPORTED, &s);
    kiln_session_free(s);
    kiln_model_free(m);
    return;
  }
  static const chain_case chains[] = {
      {"conv -> conv -> conv", 2, 0},
      {"matmul -> matmul", 1, 1},
      {"conv -> (conv, graph output)", 0, 2},
      {"conv -> conv + Sum -> Relu -> conv", 0, 3},
  };
  for (size_t i = 0; i < sizeof chains / sizeof chains[0]; i++) {
    const chain_case *c = &chains[i];
    kiln_model *m = tu_model_of(chain(c->which), 0);
    float *x[4] = {NULL};
    inputs(m, false, x);
    kiln_session *held, *loose, *ref;
    session(m, "bf16", false, KILN_OK, &held);
    session(m, "bf16", false, KILN_OK, &loose);
    kl_session_bf16_unhold(loose);
    session(m, NULL, true, KILN_OK, &ref);
    if (kl_session_bf16_values(held) != c->held)
      fail_msg("%s: %d activations held in bf16, expected %d", c->what,
               kl_session_bf16_values(held), c->held);
    assert_int_equal(kl_session_bf16_values(loose), 0);
    int64_t n_h, n_l, n_r, at = 0;
    float *h = tu_run_f32(held, m, x, &n_h), *l = tu_run_f32(loose, m, x, &n_l);
    float *r = tu_run_f32(ref, m, x, &n_r);
    assert_int_equal(n_h, n_l);
    assert_int_equal(n_h, n_r);
    for (int k = 0; k < m->g->n_nodes; k++) { /* every convolution and product */
      const char *impl = kl_session_kernel_impl(held, k);
      if (m->g->nodes[k].op == KL_OP_Relu) continue;
      if (!impl || !strstr(impl, " bf16"))
        fail_msg("%s: node %d ran on '%s', not in bf16", c->what, k, impl ? impl : "-");
    }
    double err = max_rel(h, l, n_h, &at);
    if (!(err <= 1e-5))
      fail_msg("%s: element %lld is %.8g held in bf16, %.8g converted by each node", c->what,
               (long long)at, (double)h[at], (double)l[at]);
    double num = 0, den = 0; /* and near float32's: bf16's rounding, relative L2 */
    for (int64_t k = 0; k < n_h; k++) {
      num += ((double)h[k] - r[k]) * ((double)h[k] - r[k]);
      den += (double)r[k] * r[k];
    }
    if (!(sqrt(num / den) < 2e-2))
      fail_msg("%s: relative L2 distance to float32 %.3g", c->what, sqrt(num / den));
    printf("%-40s held %d, vs float32 relative L2 %.2e\n", c->what, c->held, sqrt(num / den));
    free(h);
    free(l);
    free(r);
    for (int k = 0; k < 4; k++) free(x[k]);
    kiln_session_free(held);
    kiln_session_free(loose);
    kiln_session_free(ref);
    kiln_model_free(m);
  }
}

/* At every level: a reference session computes float32 and says so; an unknown
 * precision is refused by the options. */
/* Attention (kiln.MultiHeadAttention on packed and separate Q, K, V, kiln.Attention)
 * at precision bf16. At the AMX level its products take bf16 operands (Q, Kt, V and
 * the softmax's probabilities rounded to bf16, sums in float32): the output is within
 * bf16's rounding of the reference's (relative L2 at most 1.5e-2, each element within
 * 3% of the largest), differs from the float32 session's (it did compute in bf16),
 * names a "... bf16" implementation, and the queries that see no key (zero_masked_rows)
 * give exact zeros. At avx512_bf16 attention stays float32 (dnnl_attention.c says why):
 * the output is the float32 session's, the implementation not bf16. */
static const char *want_impl; /* at AMX, the implementation must name this (NULL: any) */

static void check_attention(kl_graph *(*make)(const void *), const void *arg, const char *what) {
  kiln_model *m = tu_model_of(make(arg), 0);
  float *x[4] = {NULL};
  inputs(m, false, x);
  kiln_session *bf, *f32, *ref;
  session(m, "bf16", false, KILN_OK, &bf);
  session(m, NULL, false, KILN_OK, &f32);
  session(m, NULL, true, KILN_OK, &ref);
  int64_t n, n_f, n_r, at = 0;
  float *f = tu_run_f32(f32, m, x, &n_f), *r = tu_run_f32(ref, m, x, &n_r);
  bool amx = kl_isa_level() == KL_ISA_AMX;
  int node = m->g->n_nodes - 1;
  for (int run = 0; run < 2; run++) {
    float *got = tu_run_f32(bf, m, x, &n);
    assert_int_equal(n, n_r);
    assert_int_equal(n, n_f);
    const char *impl = kl_session_kernel_impl(bf, node);
    bool in_bf16 = impl && strstr(impl, " bf16");
    if (in_bf16 != amx || (amx && want_impl && !strstr(impl, want_impl)))
      fail_msg("%s: ran on '%s' at level %s", what, impl ? impl : "(none)",
               kl_isa_level_name(kl_isa_level()));
    double num = 0, den = 0, big = 0, worst = 0;
    for (int64_t k = 0; k < n; k++) {
      double d = (double)got[k] - r[k];
      num += d * d;
      den += (double)r[k] * r[k];
      big = fabs((double)r[k]) > big ? fabs((double)r[k]) : big;
      if (fabs(d) > worst) worst = fabs(d), at = k;
      if (r[k] == 0.0f && got[k] != 0.0f)
        fail_msg("%s: element %lld is %.8g, the reference's exact 0 (a query with no key)",
                 what, (long long)k, (double)got[k]);
    }
    double l2 = den > 0 ? sqrt(num / den) : sqrt(num);
    if (amx && !(l2 <= 1.5e-2 && worst <= 0.03 * big))
      fail_msg("%s (run %d): relative L2 %.3g, element %lld %.8g against the reference's "
               "%.8g (largest %.3g)", what, run + 1, l2, (long long)at, (double)got[at],
               (double)r[at], big);
    double apart = max_rel(got, f, n, &at);
    if (amx && !(apart > 1e-6))
      fail_msg("%s: the bf16 session's output equals float32's: not computed in bf16", what);
    if (!amx && !(apart <= 1e-6))
      fail_msg("%s: element %lld is %.8g, the float32 session's %.8g", what, (long long)at,
               (double)got[at], (double)f[at]);
    printf("%-58s %-30s L2 vs reference %.2e\n", what, impl ? impl : "-", l2);
    free(got);
  }
  free(f);
  free(r);
  for (int i = 0; i < 4; i++) free(x[i]);
  kiln_session_free(bf);
  kiln_session_free(f32);
  kiln_session_free(ref);
  kiln_model_free(m);
}

static kl_graph *mha_graph(const void *arg) { return tu_mha_graph(arg); }

/* kiln.Attention over Q [2, 3, 9, 8], Kt [2, 3, 8, 11], V [2, 3, 11, 6] and a [2, 1, 9,
 * 11] mask (arg: that mask's dead-row fill, 0 for a random input mask). */
static kl_graph *attention_graph(const void *arg) {
  float fill = *(const float *)arg;
  kl_graph *g = tu_graph_new();
  int q = tu_graph_input(g, "q", KL_F32, 4, (int64_t[]){2, 3, 9, 8});
  int kt = tu_graph_input(g, "kt", KL_F32, 4, (int64_t[]){2, 3, 8, 11});
  int v = tu_graph_input(g, "v", KL_F32, 4, (int64_t[]){2, 3, 11, 6});
  const int64_t md[4] = {2, 1, 9, 11};
  int mask = fill != 0 ? tu_dead_rows_mask(g, 4, md, fill) : tu_graph_input(g, "mask", KL_F32, 4, md);
  int n = tu_graph_output_node(g, KL_OP_KilnAttention, 4, (int[]){q, kt, v, mask}, 1);
  assert_int_equal(kl_node_set_float(g, n, "scale", 0.35f, NULL), KILN_OK);
  if (fill != 0) assert_int_equal(kl_node_set_int(g, n, "zero_masked_rows", 1, NULL), KILN_OK);
  return g;
}

static void test_bf16_attention(void **state) {
  (void)state;
  if (!native()) return; /* precision bf16 is refused here (test_bf16_cases checks it) */
  static const tu_mha_case mha[] = {
      {"MHA, packed QKV, 12 heads of 64, S 128, [B,1,1,T] mask", true, 12, 4, {1, 128, 2304},
       {0}, {0}, {1, 1, 1, 128}, 0},
      {"MHA, 3 heads of 5 (V 3), S 5, T 7, [B,1,1,T] mask", false, 3, 4, {2, 5, 15},
       {2, 7, 15}, {2, 7, 9}, {2, 1, 1, 7}, 0},
      {"MHA, packed QKV, 2 heads of 7, S 9, [S,T] mask", true, 2, 2, {1, 9, 42}, {0}, {0},
       {9, 9}, 0},
      {"MHA, 4 heads of 3 (V 6), S 1, T 4, no mask", false, 4, 0, {3, 1, 12}, {3, 4, 12},
       {3, 4, 24}, {0}, 0},
      {"MHA, 3 heads of 5, S 5, T 7, queries with no key (-inf)", false, 3, 4, {2, 5, 15},
       {2, 7, 15}, {2, 7, 15}, {2, 1, 5, 7}, -INFINITY},
      {"MHA, packed QKV, 2 heads of 7, batches with no key (-inf)", true, 2, 4, {3, 6, 42},
       {0}, {0}, {3, 1, 1, 6}, -INFINITY},
      {"MHA, 3 heads of 5, S 5, T 7, keys all masked by the lowest float", false, 3, 4,
       {2, 5, 15}, {2, 7, 15}, {2, 7, 15}, {2, 1, 5, 7}, -FLT_MAX},
  };
  /* kiln.MultiHeadAttention on kiln's AMX tiles (run_mha_amx.c): every case above and
   * these, whose queries, keys and values cross and end inside the tiles' 32 */
  static const tu_mha_case tiles[] = {
      {"MHA, 3 heads of 40 (V 24), S 37, T 45, [B,H,S,T] mask", false, 3, 4, {2, 37, 120},
       {2, 45, 120}, {2, 45, 72}, {2, 3, 37, 45}, 0},
      {"MHA, packed QKV, 2 heads of 48, S 170 (6 query blocks), [S,T] mask", true, 2, 2,
       {1, 170, 288}, {0}, {0}, {170, 170}, 0},
      {"MHA, 1 head of 16 (V 40), S 3, T 1500 (a block a group), [B,1,1,T] mask", false, 1, 4,
       {1, 3, 16}, {1, 1500, 16}, {1, 1500, 40}, {1, 1, 1, 1500}, 0},
      {"MHA, 2 heads of 33 (V 40), S 40, T 50, queries with no key (-inf)", false, 2, 4,
       {1, 40, 66}, {1, 50, 66}, {1, 50, 80}, {1, 2, 40, 50}, -INFINITY},
  };
  want_impl = "kiln:amx";
  for (size_t i = 0; i < sizeof mha / sizeof mha[0]; i++)
    check_attention(mha_graph, &mha[i], mha[i].what);
  for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++)
    check_attention(mha_graph, &tiles[i], tiles[i].what);
  /* heads past the tiles' bound (KL_MHA_AMX_MAX_D) and kiln.Attention: oneDNN's bf16
   * products */
  static const tu_mha_case wide = {"MHA, 1 head of 260, S 5, T 7, no mask", false, 1, 0,
                                   {1, 5, 260}, {1, 7, 260}, {1, 7, 260}, {0}, 0};
  want_impl = "brg:";
  check_attention(mha_graph, &wide, wide.what);
  static const float fills[] = {0.0f, -INFINITY};
  check_attention(attention_graph, &fills[0], "attention [2,3,9,8] x [2,3,8,11], input mask");
  check_attention(attention_graph, &fills[1], "attention, queries with no key (-inf)");
  want_impl = NULL;
}

static void test_bf16_refusals(void **state) {
  (void)state;
  kiln_model *m = tu_model_of(build(&cases[2], false), 0);
  kiln_session *s;
  session(m, "bf16", true, KILN_ERR_INVALID_ARGUMENT, &s);
  assert_non_null(strstr(kiln_session_error(s), "reference"));
  kiln_session_free(s);
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "precision", "fp16"), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_options_set_string(o, "precision", "bf16"), KILN_OK);
  kiln_options_free(o);
  kiln_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bf16_cases),
      cmocka_unit_test(test_bf16_chains),
      cmocka_unit_test(test_bf16_attention),
      cmocka_unit_test(test_bf16_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
