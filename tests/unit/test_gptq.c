/* GPTQ rounding (src/quant/gptq.c, kl_gptq_round) against nearest rounding, and
 * kiln quantize's --gptq (kl_quant_options.gptq) on a small CNN. */
#include "quant/quantize.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng = 11;

/* Nearest codes of rows x cols weights at per-row scales (max |w| / qmax). */
static void nearest(const float *w, int rows, int cols, float qmax, float *scales, int8_t *q) {
  for (int r = 0; r < rows; r++) {
    float amax = 0;
    for (int j = 0; j < cols; j++) amax = fmaxf(amax, fabsf(w[r * cols + j]));
    scales[r] = amax > 0 ? amax / qmax : 1;
    for (int j = 0; j < cols; j++) {
      float v = nearbyintf(w[r * cols + j] / scales[r]);
      q[r * cols + j] = (int8_t)(v < -qmax ? -qmax : v > qmax ? qmax : v);
    }
  }
}

/* sum over the samples of |(W - dq(Q)) x|^2. */
static double output_error(const float *w, const int8_t *q, const float *scales, int rows,
                           int cols, const float *x, int n) {
  double err = 0;
  for (int s = 0; s < n; s++)
    for (int r = 0; r < rows; r++) {
      double d = 0;
      for (int j = 0; j < cols; j++)
        d += ((double)w[r * cols + j] - (double)q[r * cols + j] * scales[r]) * x[s * cols + j];
      err += d * d;
    }
  return err;
}

/* Correlated inputs (x = z A, z uniform, A random with a shared column), awkward sizes,
 * 8 and 7 bits: GPTQ's codes stay in range and give a smaller output error than the
 * nearest codes at the same scales; with H the identity (no correlation to use) they are
 * the nearest codes exactly; a zero H is refused and leaves q as it was. */
static void test_round(void **state) {
  (void)state;
  const int sizes[][3] = {{5, 24, 400}, {3, 9, 200}, {17, 37, 300}, {1, 1, 50}};
  for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
    int rows = sizes[t][0], cols = sizes[t][1], n = sizes[t][2];
    for (int bits = 7; bits <= 8; bits++) {
      float qmax = bits == 8 ? 127.0f : 64.0f;
      float *w = malloc(sizeof *w * (size_t)(rows * cols));
      float *a = malloc(sizeof *a * (size_t)(cols * cols)), *x = malloc(sizeof *x * (size_t)(n * cols));
      float *scales = malloc(sizeof *scales * (size_t)rows);
      double *h = calloc((size_t)(cols * cols), sizeof *h);
      int8_t *qn = malloc((size_t)(rows * cols)), *qg = malloc((size_t)(rows * cols));
      assert_true(w && a && x && scales && h && qn && qg);
      for (int i = 0; i < rows * cols; i++) w[i] = tu_rand_f32(&rng, -1, 1);
      for (int i = 0; i < cols * cols; i++) a[i] = tu_rand_f32(&rng, -1, 1) + (i % cols == 0 ? 2 : 0);
      for (int s = 0; s < n; s++)
        for (int j = 0; j < cols; j++) {
          double v = 0;
          for (int k = 0; k < cols; k++) v += tu_rand_f32(&rng, 0, 1) * a[k * cols + j];
          x[s * cols + j] = (float)v;
        }
      for (int s = 0; s < n; s++)
        for (int i = 0; i < cols; i++)
          for (int j = i; j < cols; j++) h[i * cols + j] += (double)x[s * cols + i] * x[s * cols + j];
      nearest(w, rows, cols, qmax, scales, qn);
      memcpy(qg, qn, (size_t)(rows * cols));
      assert_true(kl_gptq_round(w, rows, cols, scales, 1, qmax, h, qg));
      for (int i = 0; i < rows * cols; i++) assert_true(qg[i] >= -qmax && qg[i] <= qmax);
      double en = output_error(w, qn, scales, rows, cols, x, n);
      double eg = output_error(w, qg, scales, rows, cols, x, n);
      print_message("%d x %d, %d-bit: output error nearest %.4g, GPTQ %.4g\n", rows, cols, bits,
                    en, eg);
      if (cols > 1) assert_true(eg < 0.9 * en);
      else assert_memory_equal(qg, qn, (size_t)rows); /* one column: nothing to move */
      /* H the identity: the nearest codes */
      memset(h, 0, sizeof *h * (size_t)(cols * cols));
      for (int i = 0; i < cols; i++) h[i * cols + i] = 3;
      memset(qg, 0, (size_t)(rows * cols));
      assert_true(kl_gptq_round(w, rows, cols, scales, 1, qmax, h, qg));
      assert_memory_equal(qg, qn, (size_t)(rows * cols));
      /* a zero H: refused, q untouched */
      memset(h, 0, sizeof *h * (size_t)(cols * cols));
      memset(qg, 5, (size_t)(rows * cols));
      assert_false(kl_gptq_round(w, rows, cols, scales, 1, qmax, h, qg));
      for (int i = 0; i < rows * cols; i++) assert_int_equal(qg[i], 5);
      free(w), free(a), free(x), free(scales), free(h), free(qn), free(qg);
    }
  }
}

/* A shared scale (scale_step 0) reads scales[0] for every row: the same codes as
 * per-row scales that are all equal. */
static void test_shared_scale(void **state) {
  (void)state;
  enum { R = 4, C = 12, N = 100 };
  float w[R * C], x[N * C], sc[R];
  double h[C * C] = {0};
  for (int i = 0; i < R * C; i++) w[i] = tu_rand_f32(&rng, -2, 2);
  for (int i = 0; i < N * C; i++) x[i] = tu_rand_f32(&rng, -1, 1) + (i % C > 0 && i % C < 3 ? x[i - i % C] : 0);
  for (int s = 0; s < N; s++)
    for (int i = 0; i < C; i++)
      for (int j = i; j < C; j++) h[i * C + j] += (double)x[s * C + i] * x[s * C + j];
  for (int r = 0; r < R; r++) sc[r] = 0.03f;
  int8_t a[R * C], b[R * C];
  assert_true(kl_gptq_round(w, R, C, sc, 1, 64, h, a));
  assert_true(kl_gptq_round(w, R, C, sc, 0, 64, h, b));
  assert_memory_equal(a, b, sizeof a);
}

/* kiln quantize with gptq: x [2, 5, 7, 6] (channels correlated) -> Conv 3x3 (pads 1) ->
 * Relu -> depthwise Conv 3x3 (stride 2) -> y. With gptq the written graph's outputs on
 * the calibration data are closer to float32's than without, and its weight codes
 * differ from the nearest ones. */
enum { CI = 5, CM = 6, H = 7, W = 6, NX = 2 * CI * H * W };
static float xs[3][NX];

static kl_graph *gptq_graph(void) {
  kl_graph *g = tu_graph_new();
  int64_t xd[4] = {2, CI, H, W}, w1d[4] = {CM, CI, 3, 3}, w2d[4] = {CM, 1, 3, 3}, bd = CM;
  float w1[CM * CI * 9], w2[CM * 9], b2[CM];
  for (int i = 0; i < CM * CI * 9; i++) w1[i] = tu_rand_f32(&rng, -0.6f, 0.6f);
  for (int i = 0; i < CM * 9; i++) w2[i] = tu_rand_f32(&rng, -1.5f, 1.5f);
  for (int i = 0; i < CM; i++) b2[i] = tu_rand_f32(&rng, -0.5f, 0.5f);
  int x = tu_graph_input(g, "x", KL_F32, 4, xd);
  int cw1 = tu_graph_const(g, "w1", KL_F32, 4, w1d, w1), cw2 = tu_graph_const(g, "w2", KL_F32, 4, w2d, w2);
  int cb2 = tu_graph_const(g, "b2", KL_F32, 1, &bd, b2);
  int h = tu_graph_value(g, "h"), r = tu_graph_value(g, "r"), y = tu_graph_value(g, "y");
  int c1 = tu_graph_node(g, KL_OP_Conv, "c1", 2, (int[]){x, cw1}, 1, &h);
  tu_node_ints(g, c1, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  tu_graph_node(g, KL_OP_Relu, "relu", 1, &h, 1, &r);
  int c2 = tu_graph_node(g, KL_OP_Conv, "c2", 3, (int[]){r, cw2, cb2}, 1, &y);
  tu_node_ints(g, c2, "strides", 2, (const int64_t[]){2, 2});
  assert_int_equal(kl_node_set_int(g, c2, "group", CM, NULL), KILN_OK);
  kl_graph_add_output(g, y, NULL);
  kl_err e = {0};
  if (kl_graph_infer(g, &e) != KILN_OK) fail_msg("infer: %s", e.msg);
  return g;
}

static float *run(const kl_graph *g, const float *x, int64_t *count) {
  kiln_model *m = tu_model_of(kl_graph_copy(g), 0);
  kiln_session *s = tu_session(m, false, 1);
  const int64_t dims[4] = {2, CI, H, W};
  assert_int_equal(kiln_session_set_input(s, "x", KILN_DTYPE_FLOAT32, 4, dims, x, sizeof(float) * NX),
                   KILN_OK);
  if (kiln_session_run(s) != KILN_OK) fail_msg("run: %s", kiln_session_error(s));
  kiln_tensor_info info;
  const void *data;
  assert_int_equal(kiln_session_get_output(s, 0, &info, &data), KILN_OK);
  int64_t n = 1;
  for (int d = 0; d < info.rank; d++) n *= info.dims[d];
  float *out = malloc(sizeof *out * (size_t)n);
  assert_non_null(out);
  memcpy(out, data, sizeof *out * (size_t)n);
  *count = n;
  kiln_session_free(s);
  kiln_model_free(m);
  return out;
}

static int8_t *codes_of(const kl_graph *h, const char *node, int64_t *n) {
  for (int i = 0; i < h->n_nodes; i++) {
    if (strcmp(h->nodes[i].name, node) != 0) continue;
    int v = h->nodes[i].in[1];
    const kl_node *dq = &h->nodes[h->values[v].producer];
    const kl_value *c = &h->values[dq->in[0]];
    kl_type_numel(&c->type, n);
    return (int8_t *)c->data;
  }
  fail_msg("no node %s", node);
  return NULL;
}

static void test_quantizer(void **state) {
  (void)state;
  kl_graph *g = gptq_graph();
  for (int b = 0; b < 3; b++)
    for (int i = 0; i < NX; i++) { /* channels share a part */
      int px = i % (H * W), n = i / (CI * H * W);
      xs[b][i] = tu_rand_f32(&rng, -0.5f, 1) + (i / (H * W) % CI == 0 ? 0 : xs[b][n * CI * H * W + px]);
    }
  double err[2];
  kl_graph *hs[2];
  for (int k = 0; k < 2; k++) {
    kl_quant_options o = {.per_channel = true, .reduce_range = true, .gptq = k == 1};
    kl_quantizer *q;
    kl_err e = {0};
    assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
    for (int b = 0; b < 3; b++) {
      kl_tensor t = {.dtype = KL_F32, .rank = 4, .dims = {2, CI, H, W}, .data = xs[b]};
      assert_int_equal(kl_quantizer_run(q, 1, (const char *[]){"x"}, &t, &e), KILN_OK);
    }
    assert_int_equal(kl_quantizer_compute(q, &e), KILN_OK);
    int nv, weights = 0;
    const kl_quant_value *v = kl_quantizer_values(q, &nv);
    for (int i = 0; i < nv; i++) { /* the report says how each weight was rounded */
      if (!v[i].weight) {
        assert_null(v[i].rounding);
        continue;
      }
      weights++;
      assert_string_equal(v[i].rounding, k == 1 ? "gptq" : "nearest");
      assert_string_equal(v[i].rounding_why, "");
    }
    assert_int_equal(weights, 2);
    assert_int_equal(kl_quantizer_graph(q, &hs[k], &e), KILN_OK);
    double sum = 0, d2 = 0;
    for (int b = 0; b < 3; b++) {
      int64_t nf, nq;
      float *want = run(g, xs[b], &nf), *got = run(hs[k], xs[b], &nq);
      assert_int_equal(nf, nq);
      for (int64_t i = 0; i < nf; i++) {
        sum += (double)want[i] * want[i];
        d2 += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
      }
      free(want), free(got);
    }
    err[k] = sqrt(d2 / sum);
    kl_quantizer_free(q);
  }
  print_message("relative L2 to float32 on the calibration data: nearest %.5f, GPTQ %.5f\n",
                err[0], err[1]);
  assert_true(err[1] < err[0]);
  int64_t n0, n1;
  const int8_t *a = codes_of(hs[0], "c1", &n0), *b = codes_of(hs[1], "c1", &n1);
  assert_int_equal(n0, n1);
  assert_true(memcmp(a, b, (size_t)n0) != 0);
  kl_graph_free(hs[0]), kl_graph_free(hs[1]);
  kl_graph_free(g);
}

/* Graph g (input "x", one weight node), inferred, quantized with gptq per channel on
 * the one calibration batch t: the quantizer (*q, the caller frees it and g) and the
 * report's one weight value. */
static const kl_quant_value *gptq_weight(kl_graph *g, const kl_tensor *t, kl_quantizer **q) {
  kl_err e = {0};
  if (kl_graph_infer(g, &e) != KILN_OK) fail_msg("infer: %s", e.msg);
  kl_quant_options o = {.per_channel = true, .gptq = true};
  assert_int_equal(kl_quantizer_create(g, &o, q, &e), KILN_OK);
  assert_int_equal(kl_quantizer_run(*q, 1, (const char *[]){"x"}, t, &e), KILN_OK);
  assert_int_equal(kl_quantizer_compute(*q, &e), KILN_OK);
  int nv, found = 0;
  const kl_quant_value *v = kl_quantizer_values(*q, &nv), *w = NULL;
  for (int i = 0; i < nv; i++)
    if (v[i].weight) w = &v[i], found++;
  assert_int_equal(found, 1);
  assert_string_equal(w->name, "w");
  return w;
}

/* x [4, k] -> Gemm "fc" (W [3, k], transB) -> y, quantized with gptq on calibration
 * batch x: the weight's rounding and why as the report gives them. */
static void gemm_rounding(int64_t k, float x_value, const char *want, const char *why) {
  kl_graph *g = tu_graph_new();
  int64_t xd[2] = {4, k}, wd[2] = {3, k};
  float *w = malloc(sizeof *w * (size_t)(3 * k)), *x = malloc(sizeof *x * (size_t)(4 * k));
  assert_non_null(w);
  assert_non_null(x);
  for (int64_t i = 0; i < 3 * k; i++) w[i] = tu_rand_f32(&rng, -1, 1);
  for (int64_t i = 0; i < 4 * k; i++) x[i] = x_value ? tu_rand_f32(&rng, -x_value, x_value) : 0;
  int xv = tu_graph_input(g, "x", KL_F32, 2, xd), wv = tu_graph_const(g, "w", KL_F32, 2, wd, w);
  int y = tu_graph_value(g, "y");
  int n = tu_graph_node(g, KL_OP_Gemm, "fc", 2, (int[]){xv, wv}, 1, &y);
  kl_node_set_int(g, n, "transB", 1, NULL);
  kl_graph_add_output(g, y, NULL);
  kl_quantizer *q;
  kl_tensor t = {.dtype = KL_F32, .rank = 2, .dims = {4, k}, .data = x};
  const kl_quant_value *wq = gptq_weight(g, &t, &q);
  assert_string_equal(wq->rounding, want);
  if (!strstr(wq->rounding_why, why))
    fail_msg("k %lld: rounding note '%s', expected it to hold '%s'", (long long)k,
             wq->rounding_why, why);
  kl_quantizer_free(q);
  kl_graph_free(g);
  free(w), free(x);
}

/* x [1, 3, 5, 5] with channel 1 always zero -> depthwise Conv 3x3 (pads 1) -> y: the
 * zero channel's group keeps nearest codes and nothing is said of it (its codes
 * compute zero whatever they are); the others are GPTQ-rounded. */
static void test_zero_channel(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int64_t xd[4] = {1, 3, 5, 5}, wd[4] = {3, 1, 3, 3};
  float w[27], x[75];
  for (int i = 0; i < 27; i++) w[i] = tu_rand_f32(&rng, -1, 1);
  for (int i = 0; i < 75; i++) x[i] = i / 25 == 1 ? 0 : tu_rand_f32(&rng, -1, 1);
  int xv = tu_graph_input(g, "x", KL_F32, 4, xd), wv = tu_graph_const(g, "w", KL_F32, 4, wd, w);
  int y = tu_graph_value(g, "y");
  int n = tu_graph_node(g, KL_OP_Conv, "dw", 2, (int[]){xv, wv}, 1, &y);
  tu_node_ints(g, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  assert_int_equal(kl_node_set_int(g, n, "group", 3, NULL), KILN_OK);
  kl_graph_add_output(g, y, NULL);
  kl_quantizer *q;
  kl_tensor t = {.dtype = KL_F32, .rank = 4, .dims = {1, 3, 5, 5}, .data = x};
  const kl_quant_value *wq = gptq_weight(g, &t, &q);
  assert_string_equal(wq->rounding, "gptq");
  assert_string_equal(wq->rounding_why, "");
  kl_quantizer_free(q);
  kl_graph_free(g);
}

/* A weight GPTQ could not round keeps nearest rounding, and the report says why: more
 * inputs than its sums take (1536), or an input that was always zero (any codes compute
 * the same); next to them, ones it did round. */
static void test_report(void **state) {
  (void)state;
  gemm_rounding(37, 1, "gptq", "");
  gemm_rounding(1536, 1, "gptq", "");
  gemm_rounding(1537, 1, "nearest", "more than 1536 inputs");
  gemm_rounding(37, 0, "nearest", "its input was zero on all the calibration data");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round),
      cmocka_unit_test(test_shared_scale),
      cmocka_unit_test(test_quantizer),
      cmocka_unit_test(test_report),
      cmocka_unit_test(test_zero_channel),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
