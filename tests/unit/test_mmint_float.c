/* kiln's MatMulIntegerToFloat (src/ir/ops.def) and the pass that makes it
 * (src/passes/fuse_int_matmul.c): dynamic quantization's
 *
 *   x -> DynamicQuantizeLinear -> MatMulInteger(., W, zx[, zw]) -> Cast(float32)
 *     -> Mul(., scale) -> [Add(., bias)] -> y
 *
 * becomes one node at -O2, whose kernels (kiln's int8 product, oneDNN's int8 matmul or
 * gemm, kiln's MatMulInteger kernel, each followed by the scale and bias) must give -O0's
 * reference outputs bit for bit: the scale and the bias are each one value or one per
 * column (constant, or the run-time product of the two scales), either operand order,
 * the bias absent, B's zero point absent or present, at awkward sizes (111 rows, not a
 * multiple of the int8 product's 4; 77 columns, not of its 16; 3 columns, fewer than a
 * vector of the scale's 4; K 1023 and 5), 7-bit weights, 8-bit ones (kiln's wide int8
 * product) and 8-bit ones of which few are past 7 bits (its int8 product with the
 * remainders added apart), at 1 and 2 threads, at every level
 * (run_levels.sh). Forms the pass must leave alone (a Cast another node reads, a scale
 * per row, one that enlarges the product) keep their nodes and their numbers. The
 * fused node's fast kernel must not be the reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "kl_config.h"
#if KL_HAVE_DNNL
#include "backends/cpu/dnnl.h"
#endif
#include "runtime/runtime.h"
#include "runtime/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng = 9127;

enum { SCALE_RUNTIME, SCALE_COLUMNS, SCALE_ROW_OF_COLUMNS, SCALE_PER_ROW, SCALE_ENLARGES };
enum { BIAS_NONE, BIAS_ONE, BIAS_COLUMNS };

typedef struct mf_case {
  int64_t m, k, n; /* x [3, m, k], W [k, n] */
  int scale, bias;
  bool swap;       /* Mul(scale, .) and Add(bias, .) */
  bool zw;         /* W's zero point given (zeros) */
  bool cast_read;  /* the Cast's output is also a graph output: not fused */
  bool wide;       /* 8-bit weights, [-128, 127] (7-bit, [-64, 64], otherwise) */
  bool few;        /* 7-bit weights but for a few pairs of k past vpmaddubsw's bound */
} mf_case;

/* A pair of weights of one column (k 2t, 2t + 1) for `few`: each of these once in 331
 * pairs, the rest 7-bit. Both past 64, one at -128, sums of magnitudes just within 128
 * (no remainder) and just past it. */
static const int8_t few_pairs[][2] = {{127, 127}, {-128, -128}, {-128, 0}, {100, 20},
                                      {100, 40}, {65, -63}, {-64, -64}, {0, 127}};

static int count_op(const kl_graph *g, kl_op op) {
  int c = 0;
  for (int i = 0; i < g->n_nodes; i++) c += g->nodes[i].op == op;
  return c;
}

static kl_graph *build(const mf_case *c) {
  kl_graph *g = tu_graph_new();
  int64_t xd[3] = {3, c->m, c->k}, wd[2] = {c->k, c->n};
  int x = tu_graph_input(g, "x", KL_F32, 3, xd);
  int q[3] = {tu_graph_value(g, "xq"), tu_graph_value(g, "xs"), tu_graph_value(g, "xz")};
  tu_graph_node(g, KL_OP_DynamicQuantizeLinear, "dql", 1, &x, 3, q);
  int8_t *w = malloc((size_t)(c->k * c->n) + 1);
  assert_non_null(w);
  for (int64_t i = 0; i < c->k * c->n; i++)
    w[i] = c->wide ? (int8_t)(i % 7 == 3 ? -128 : i % 7 == 4 ? 127 : lrintf(tu_rand_f32(&rng, -128, 127)))
                   : (int8_t)lrintf(tu_rand_f32(&rng, -64, 64));
  for (int64_t i = 0; c->few && i < c->k; i++)
    for (int64_t j = 0; j < c->n; j++)
      if (((i / 2) * 7 + j * 13) % 331 == 0)
        w[i * c->n + j] = few_pairs[(i / 2 + j) % 8][i % 2];
  int cw = tu_graph_const(g, "w", KL_I8, 2, wd, w);
  free(w);
  int8_t zero = 0;
  int in[4] = {q[0], cw, q[2], c->zw ? tu_graph_const(g, "zw", KL_I8, 0, NULL, &zero) : -1};
  int acc = tu_graph_value(g, "acc");
  tu_graph_node(g, KL_OP_MatMulInteger, "mmi", c->zw ? 4 : 3, in, 1, &acc);
  int f = tu_graph_op(g, KL_OP_Cast, 1, &acc);
  kl_node_set_int(g, g->values[f].producer, "to", KL_F32, NULL);
  if (c->cast_read) assert_int_equal(kl_graph_add_output(g, f, NULL), KILN_OK);
  int s;
  float *sv = tu_rand_vec(&rng, (size_t)(c->n > c->m ? c->n : c->m), 1e-4f, 3e-3f);
  if (c->scale == SCALE_RUNTIME) {
    float ws = 0.0123f;
    int cs = tu_graph_const(g, "ws", KL_F32, 0, NULL, &ws);
    s = tu_graph_op(g, KL_OP_Mul, 2, (int[]){q[1], cs});
  } else if (c->scale == SCALE_COLUMNS) {
    s = tu_graph_const(g, "s", KL_F32, 1, &c->n, sv);
  } else if (c->scale == SCALE_ROW_OF_COLUMNS) {
    s = tu_graph_const(g, "s", KL_F32, 2, (int64_t[]){1, c->n}, sv);
  } else if (c->scale == SCALE_PER_ROW) {
    s = tu_graph_const(g, "s", KL_F32, 2, (int64_t[]){c->m, 1}, sv);
  } else { /* [2, 1, 1, n]: the product becomes [2, 3, m, n] */
    float *two = malloc(sizeof(float) * 2 * (size_t)c->n);
    assert_non_null(two);
    for (int64_t i = 0; i < 2 * c->n; i++) two[i] = sv[i % c->n] * (i < c->n ? 1 : 2);
    s = tu_graph_const(g, "s", KL_F32, 4, (int64_t[]){2, 1, 1, c->n}, two);
    free(two);
  }
  free(sv);
  int y = tu_graph_op(g, KL_OP_Mul, 2, c->swap ? (int[]){s, f} : (int[]){f, s});
  if (c->bias != BIAS_NONE) {
    int64_t nb = c->bias == BIAS_ONE ? 1 : c->n;
    float *bv = tu_rand_vec(&rng, (size_t)nb, -2, 2);
    int b = tu_graph_const(g, "bias", KL_F32, 1, &nb, bv);
    free(bv);
    y = tu_graph_op(g, KL_OP_Add, 2, c->swap ? (int[]){b, y} : (int[]){y, b});
  }
  assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
  return g;
}

static bool fusable(const mf_case *c) {
  return !c->cast_read && c->scale != SCALE_PER_ROW && c->scale != SCALE_ENLARGES;
}

/* The outputs of session s after running it on x, as bytes (a copy to free). */
static unsigned char *outputs(kiln_session *s, const kiln_model *m, const float *x,
                              const int64_t *xd, size_t *len) {
  int64_t n = xd[0] * xd[1] * xd[2];
  assert_int_equal(kiln_session_set_input(s, "x", KILN_DTYPE_FLOAT32, 3, xd, x,
                                          sizeof(float) * (size_t)n), KILN_OK);
  if (kiln_session_run(s) != KILN_OK) fail_msg("run: %s", kiln_session_error(s));
  size_t total = 0;
  for (int k = 0; k < kiln_model_output_count(m); k++)
    total += kl_tensor_nbytes(kl_session_output_value(s, k));
  unsigned char *buf = malloc(total + 1), *p = buf;
  assert_non_null(buf);
  for (int k = 0; k < kiln_model_output_count(m); k++) {
    const kl_tensor *t = kl_session_output_value(s, k);
    memcpy(p, t->data, kl_tensor_nbytes(t));
    p += kl_tensor_nbytes(t);
  }
  *len = total;
  return buf;
}

static void run_case(const mf_case *c) {
  kl_graph *g = build(c);
  kiln_model *m0 = tu_model_of(kl_graph_copy(g), 0), *m2 = tu_model_of(g, 2);
  const kl_graph *h = m2->g;
  int fused = count_op(h, KL_OP_KilnMatMulIntegerToFloat);
  if (fused != (fusable(c) ? 1 : 0) || count_op(h, KL_OP_MatMulInteger) != 1 - fused ||
      count_op(h, KL_OP_Cast) != 1 - fused)
    fail_msg("case m %lld n %lld scale %d bias %d cast_read %d: %d fused nodes",
             (long long)c->m, (long long)c->n, c->scale, c->bias, c->cast_read, fused);
  int64_t xd[3] = {3, c->m, c->k};
  size_t nx = (size_t)(3 * c->m * c->k);
  float *x = tu_rand_vec(&rng, nx, -2.5f, 7.0f);
  x[nx / 2] = 0.0f;
  kiln_session *sr = tu_session(m0, true, 1);
  size_t nr, nf;
  unsigned char *want = outputs(sr, m0, x, xd, &nr);
  for (int threads = 1; threads <= 2; threads++) {
    kiln_session *sf = tu_session(m2, false, threads);
    unsigned char *got = outputs(sf, m2, x, xd, &nf);
    if (nf != nr || memcmp(got, want, nr) != 0)
      fail_msg("case m %lld k %lld n %lld scale %d bias %d swap %d zw %d: -O2's outputs "
               "differ from -O0's reference at %d threads", (long long)c->m,
               (long long)c->k, (long long)c->n, c->scale, c->bias, c->swap, c->zw, threads);
    for (int i = 0; i < h->n_nodes; i++) {
      if (h->nodes[i].op != KL_OP_KilnMatMulIntegerToFloat) continue;
      const char *k = kl_session_kernel_name(sf, i);
      if (!k || strcmp(k, "ref") == 0) fail_msg("MatMulIntegerToFloat ran on the reference");
#if KL_HAVE_DNNL
      /* oneDNN's matmul with VNNI or AMX, else kiln's int8 product (its wide form for
       * 8-bit weights, but where few are past 7 bits); at the generic level (no oneDNN)
       * kiln's MatMulInteger kernel */
      const char *w = kl_isa_level() == KL_ISA_GENERIC ? "generic"
                      : kl_dnnl_mmint_primitive()       ? "dnnl_matmul_u8s8s32"
                      : kl_isa_level() == KL_ISA_AVX2
                          ? (c->wide ? "kiln_qgemm16:avx2" : "kiln_qgemm:avx2")
                          : (c->wide ? "kiln_qgemm16:avx512" : "kiln_qgemm:avx512");
      if (strcmp(k, w) != 0) fail_msg("MatMulIntegerToFloat ran on '%s', not '%s'", k, w);
#endif
    }
    free(got);
    kiln_session_free(sf);
  }
  free(want);
  free(x);
  kiln_session_free(sr);
  kiln_model_free(m0), kiln_model_free(m2);
}

static void test_fused_forms(void **state) {
  (void)state;
  static const int64_t sizes[][3] = {{37, 1023, 77}, {37, 5, 3}, {4, 64, 32}};
  for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
    for (int scale = SCALE_RUNTIME; scale <= SCALE_ROW_OF_COLUMNS; scale++)
      for (int bias = BIAS_NONE; bias <= BIAS_COLUMNS; bias++) {
        mf_case c = {sizes[z][0], sizes[z][1], sizes[z][2], scale, bias,
                     (scale + bias) % 2 == 1, bias == BIAS_ONE, false, false, false};
        run_case(&c);
      }
}

/* 8-bit weights, where AVX2's vpmaddubsw would saturate: kiln's wide int8 product
 * without VNNI, bit for bit: K 2051 (an odd end), 4200 rows of K 1030 (x [3, 1400, k]:
 * A widened in two slabs, 4072 rows of 8 MiB, then 128), columns within and past a pair
 * of panels. */
static void test_wide_weights(void **state) {
  (void)state;
  static const int64_t sizes[][3] = {{37, 2051, 77}, {5, 33, 16}, {37, 5, 3}, {1400, 1030, 17}};
  for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
    for (int bias = BIAS_NONE; bias <= BIAS_COLUMNS; bias += 2) {
      mf_case c = {sizes[z][0], sizes[z][1], sizes[z][2], z ? SCALE_COLUMNS : SCALE_RUNTIME,
                   bias, false, z == 1, false, true, false};
      run_case(&c);
    }
}

/* 8-bit weights of which few pairs are past what vpmaddubsw multiplies exactly: kiln's
 * int8 product on the rest, those weights' remainders added apart (run_qgemm.c), bit for
 * bit; K odd (a pair's second weight missing), 1023 and 64, columns within and past a
 * pair of panels, B's zero point absent and present. */
static void test_few_wide_weights(void **state) {
  (void)state;
  static const int64_t sizes[][3] = {{37, 1023, 77}, {5, 33, 16}, {13, 64, 700}};
  for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
    for (int bias = BIAS_NONE; bias <= BIAS_COLUMNS; bias += 2) {
      mf_case c = {sizes[z][0], sizes[z][1], sizes[z][2], z ? SCALE_COLUMNS : SCALE_RUNTIME,
                   bias, false, z == 1, false, false, true};
      run_case(&c);
    }
}

/* What the pass leaves alone, with the same numbers as -O0. */
static void test_unfused_forms(void **state) {
  (void)state;
  mf_case cast_read = {37, 33, 77, SCALE_RUNTIME, BIAS_COLUMNS, false, false, true, false, false};
  mf_case per_row = {37, 33, 77, SCALE_PER_ROW, BIAS_COLUMNS, false, false, false, true, false};
  mf_case enlarges = {37, 33, 77, SCALE_ENLARGES, BIAS_NONE, true, false, false, false, false};
  run_case(&cast_read);
  run_case(&per_row);
  run_case(&enlarges);
}

/* The fused node of operands oneDNN's int8 matmul does not take (int8 A, uint8 B of 8
 * bits, both zero points: kiln's wide int8 product where the level has one, else its
 * MatMulInteger kernel, then the scale), and the reference kernel, against -O0, bit for
 * bit; K = 0 (zeros scaled, plus the bias). */
static void test_other_operands(void **state) {
  (void)state;
  for (int64_t k = 0; k <= 13; k += 13) {
    kl_graph *g = tu_graph_new();
    int64_t ad[2] = {9, k}, bd[2] = {k, 21}, n = 21;
    int a = tu_graph_input(g, "a", KL_I8, 2, ad);
    uint8_t bv[13 * 21 + 1];
    for (int i = 0; i < 13 * 21; i++) bv[i] = (uint8_t)tu_rand_f32(&rng, 0, 255.99f);
    int8_t za = -7;
    uint8_t zb = 131;
    int b = tu_graph_const(g, "b", KL_U8, 2, bd, bv);
    int cza = tu_graph_const(g, "za", KL_I8, 0, NULL, &za);
    int czb = tu_graph_const(g, "zb", KL_U8, 0, NULL, &zb);
    int acc = tu_graph_value(g, "acc");
    tu_graph_node(g, KL_OP_MatMulInteger, "mmi", 4, (int[]){a, b, cza, czb}, 1, &acc);
    int f = tu_graph_op(g, KL_OP_Cast, 1, &acc);
    kl_node_set_int(g, g->values[f].producer, "to", KL_F32, NULL);
    float *sv = tu_rand_vec(&rng, 21, 1e-3f, 2e-2f), *bias = tu_rand_vec(&rng, 21, -1, 1);
    int s = tu_graph_const(g, "s", KL_F32, 1, &n, sv);
    int cb = tu_graph_const(g, "bias", KL_F32, 1, &n, bias);
    free(sv), free(bias);
    int y = tu_graph_op(g, KL_OP_Mul, 2, (int[]){f, s});
    y = tu_graph_op(g, KL_OP_Add, 2, (int[]){y, cb});
    assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
    kiln_model *m0 = tu_model_of(kl_graph_copy(g), 0), *m2 = tu_model_of(g, 2);
    assert_int_equal(count_op(m2->g, KL_OP_KilnMatMulIntegerToFloat), 1);
    int8_t av[9 * 13 + 1];
    for (int i = 0; i < 9 * 13; i++) av[i] = (int8_t)tu_rand_f32(&rng, -128, 127.99f);
    float *res[3];
    for (int r = 0; r < 3; r++) { /* -O0 reference, -O2 reference, -O2 fast */
      kiln_session *s3 = tu_session(r ? m2 : m0, r < 2, 2);
      assert_int_equal(kiln_session_set_input(s3, "a", KILN_DTYPE_INT8, 2, ad, av,
                                              (size_t)(9 * k)), KILN_OK);
      if (kiln_session_run(s3) != KILN_OK) fail_msg("run: %s", kiln_session_error(s3));
      const kl_tensor *t = kl_session_output_value(s3, 0);
      assert_int_equal(kl_tensor_numel(t), 9 * 21);
      res[r] = malloc(sizeof(float) * 9 * 21);
      assert_non_null(res[r]);
      memcpy(res[r], t->data, sizeof(float) * 9 * 21);
      if (r == 2) {
        for (int i = 0; i < m2->g->n_nodes; i++)
          if (m2->g->nodes[i].op == KL_OP_KilnMatMulIntegerToFloat) {
            const char *kn = kl_session_kernel_name(s3, i);
            const char *want = kl_isa_level() == KL_ISA_GENERIC ? "generic"
                               : kl_isa_level() == KL_ISA_AVX2  ? "kiln_qgemm16:avx2"
                                                                : "kiln_qgemm16:avx512";
            if (!kn || strcmp(kn, want) != 0) fail_msg("ran on '%s', not '%s'", kn, want);
          }
      }
      kiln_session_free(s3);
    }
    assert_memory_equal(res[1], res[0], sizeof(float) * 9 * 21);
    assert_memory_equal(res[2], res[0], sizeof(float) * 9 * 21);
    for (int r = 0; r < 3; r++) free(res[r]);
    kiln_model_free(m0), kiln_model_free(m2);
  }
}

/* MatMulInteger of uint8 A and uint8 B less zero points per column, B within 60 of its
 * zero point but for a few weights far from it (as a uint8 weight file has them): kiln's
 * int8 product with the remainders added apart, at levels with no oneDNN product for
 * such weights, against the reference bit for bit; K odd and even, columns past a
 * pair of panels, 1 and 2 threads. */
static void test_few_far_uint8_weights(void **state) {
  (void)state;
  for (int64_t k = 13; k <= 130; k += 117) {
    enum { M = 11, N = 67 };
    kl_graph *g = tu_graph_new();
    int64_t ad[2] = {M, k}, bd[2] = {k, N}, zd = N;
    int a = tu_graph_input(g, "a", KL_U8, 2, ad);
    uint8_t *bv = malloc((size_t)(k * N)), zb[N], za = 77;
    assert_non_null(bv);
    for (int j = 0; j < N; j++) zb[j] = (uint8_t)(100 + j);
    for (int64_t i = 0; i < k * N; i++) {
      int j = (int)(i % N), v = zb[j] + (int)lrintf(tu_rand_f32(&rng, -60, 60));
      if (i % 331 == 5) v = i % 2 ? 255 : 0; /* far (1 in 331): a remainder */
      bv[i] = (uint8_t)v;
    }
    int b = tu_graph_const(g, "b", KL_U8, 2, bd, bv);
    int cza = tu_graph_const(g, "za", KL_U8, 0, NULL, &za);
    int czb = tu_graph_const(g, "zb", KL_U8, 1, &zd, zb);
    int y = tu_graph_value(g, "y");
    tu_graph_node(g, KL_OP_MatMulInteger, "mmi", 4, (int[]){a, b, cza, czb}, 1, &y);
    assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
    free(bv);
    kiln_model *m0 = tu_model_of(kl_graph_copy(g), 0), *m2 = tu_model_of(g, 2);
    uint8_t av[M * 130];
    for (int i = 0; i < M * k; i++) av[i] = (uint8_t)tu_rand_f32(&rng, 0, 255.99f);
    int32_t res[3][M * N];
    for (int r = 0; r < 3; r++) { /* -O0 reference, -O2 fast at 1 and 2 threads */
      kiln_session *s = tu_session(r ? m2 : m0, r == 0, r ? r : 1);
      assert_int_equal(kiln_session_set_input(s, "a", KILN_DTYPE_UINT8, 2, ad, av,
                                              (size_t)(M * k)), KILN_OK);
      if (kiln_session_run(s) != KILN_OK) fail_msg("run: %s", kiln_session_error(s));
      const kl_tensor *t = kl_session_output_value(s, 0);
      assert_int_equal(kl_tensor_numel(t), M * N);
      memcpy(res[r], t->data, sizeof res[r]);
      if (r) {
        const char *kn = kl_session_kernel_name(s, 0);
        const char *want = kl_isa_level() == KL_ISA_GENERIC ? NULL
                           : kl_isa_level() == KL_ISA_AVX2  ? "kiln_qgemm:avx2"
                                                            : "kiln_qgemm:avx512";
        if (!kn || strcmp(kn, "ref") == 0 || (want && strcmp(kn, want) != 0))
          fail_msg("k %lld ran on '%s', not '%s'", (long long)k, kn ? kn : "(none)",
                   want ? want : "a fast kernel");
      }
      kiln_session_free(s);
    }
    assert_memory_equal(res[1], res[0], sizeof res[0]);
    assert_memory_equal(res[2], res[0], sizeof res[0]);
    kiln_model_free(m0), kiln_model_free(m2);
  }
}

/* The node read from a file: scale and bias of other shapes are refused by name. */
static void test_infer(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "kiln.MatMulIntegerToFloat", 6, 1);
  tu_input(f, 0, TY(KL_U8, B, 7, 5));
  tu_input(f, 1, TY(KL_I8, 5, 9));
  tu_absent(f, 2);
  tu_absent(f, 3);
  tu_input(f, 4, TY(KL_F32, 9));
  tu_input(f, 5, TY(KL_F32, 1, 9));
  tu_expect_ok(f, TY(KL_F32, B, 7, 9));
  tu_input(f, 4, TY(KL_F32));
  tu_input(f, 5, TY(KL_F32, 1));
  tu_expect_ok(f, TY(KL_F32, B, 7, 9));
  tu_input(f, 4, TY(KL_F32, 7, 1));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 4 (scale) is float32[7,1], expected one value or "
                                    "one per column (9)");
  tu_input(f, 4, TY(KL_F32, 1, 1, 1, 9));
  tu_expect_fail(f, KILN_ERR_SHAPE, "one per column (9) of the rank-3 output");
  tu_input(f, 4, TY(KL_F32, 9));
  tu_input(f, 5, TY(KL_F32, 8));
  tu_expect_fail(f, KILN_ERR_SHAPE, "input 5 (bias)");
  tu_input(f, 5, TY(KL_F16, 9));
  tu_expect_fail(f, KILN_ERR_UNSUPPORTED, "input 5 (bias) is float16; MatMulIntegerToFloat takes float32");
  tu_input(f, 5, TY(KL_F32, 9));
  tu_absent(f, 4);
  tu_expect_fail(f, KILN_ERR_INVALID_MODEL, "input 4 (scale) is required");
  tu_input(f, 4, TY(KL_F32, 9));
  tu_input(f, 1, TY(KL_I8, 6, 9));
  tu_expect_fail(f, KILN_ERR_SHAPE, "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fused_forms),
      cmocka_unit_test(test_wide_weights),
      cmocka_unit_test(test_few_wide_weights),
      cmocka_unit_test(test_unfused_forms),
      cmocka_unit_test(test_other_operands),
      cmocka_unit_test(test_few_far_uint8_weights),
      TU_TEST(test_infer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
