/* Post-training quantization (src/quant/quantize.h, `kiln quantize`):
 *
 * - the numbers: activation scales and zero points, symmetric int8 weights per tensor
 *   and per channel (7-bit and full range), on hand-computed cases;
 * - the statistics: minmax, a histogram that widens without losing counts, percentile
 *   (a known answer), entropy (below the maximum on a Gaussian with outliers, near it
 *   on a uniform distribution);
 * - the graph it writes: QDQ pairs, int8 weights and int32 biases behind
 *   DequantizeLinear, a Relu removed (uint8) or kept (int8), a Clip from 0 removed and
 *   one from -1 kept, model outputs float32, the
 *   quantized model's outputs close to the float model's and its first Conv folded to
 *   QLinearConv by kiln; exclusion; the dynamic form (DynamicQuantizeLinear,
 *   MatMulInteger) against the float Gemm; MatMulInteger's fast kernel bit for bit
 *   against the reference (uint8 and int8 on either side, zero points absent, scalar or
 *   per column, batched A);
 * - errors: nothing to quantize, calibration inputs missing or misnamed, NaN, no batch,
 *   calibration data for a dynamic quantizer, a percentile out of range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/run.h"
#include "kl_config.h"
#if KL_HAVE_DNNL
#include "backends/cpu/dnnl.h"
#endif
#include "quant/quantize.h"
#include "runtime/runtime.h"
#include "runtime/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng = 7;

/* ---- the numbers ---- */

static void test_activation_params(void **state) {
  (void)state;
  kl_qparam p = kl_qparam_activation(-1, 3, false); /* 4 / 255, -(-1) / scale = 63.75 */
  assert_float_equal(p.scale, 4.0 / 255, 1e-9);
  assert_int_equal(p.zero_point, 64);
  p = kl_qparam_activation(0.5, 2, false); /* the range takes 0 in */
  assert_float_equal(p.scale, 2.0 / 255, 1e-9);
  assert_int_equal(p.zero_point, 0);
  p = kl_qparam_activation(-2, -1, false);
  assert_float_equal(p.scale, 2.0 / 255, 1e-9);
  assert_int_equal(p.zero_point, 255);
  p = kl_qparam_activation(0, 0, false); /* empty: scale 1 */
  assert_float_equal(p.scale, 1, 0);
  assert_int_equal(p.zero_point, 0);
  p = kl_qparam_activation(-1, 3, true);
  assert_float_equal(p.scale, 3.0 / 127, 1e-9);
  assert_int_equal(p.zero_point, 0);
  /* calibration data of denormals: the scale underflowed to 0 and the zero point was
   * -0 / 0 = NaN cast to int (UBSan); now as an empty range */
  for (int sym = 0; sym < 2; sym++) {
    p = kl_qparam_activation(1e-45, 1e-45, sym);
    assert_float_equal(p.scale, 1, 0);
    assert_int_equal(p.zero_point, 0);
    p = kl_qparam_activation(-1e-40, 1e-40, sym); /* a denormal scale: as empty too */
    assert_float_equal(p.scale, 1, 0);
    assert_int_equal(p.zero_point, 0);
  }
  p = kl_qparam_activation(0, 1e-30, false); /* narrow but normal: kept */
  assert_float_equal(p.scale, (float)(1e-30 / 255), 0);
}

static void test_weights(void **state) {
  (void)state;
  const float w[6] = {1, -0.5f, 0.25f, -4, 2, 0};
  int64_t dims[2] = {2, 3};
  float s[3];
  int8_t q[6];
  /* per tensor, 7-bit: scale 4 / 64 */
  kl_quantize_weights(w, 2, dims, 0, false, true, s, q);
  assert_float_equal(s[0], 0.0625, 0);
  const int8_t want_t[6] = {16, -8, 4, -64, 32, 0};
  assert_memory_equal(q, want_t, 6);
  /* per row (axis 0), 7-bit: 1 / 64 and 4 / 64 */
  kl_quantize_weights(w, 2, dims, 0, true, true, s, q);
  assert_float_equal(s[0], 1.0 / 64, 0);
  assert_float_equal(s[1], 4.0 / 64, 0);
  const int8_t want_r[6] = {64, -32, 16, -64, 32, 0};
  assert_memory_equal(q, want_r, 6);
  /* per column (axis 1, a MatMul's), full range: max |.| 4, 2, 0.25 over 127 */
  kl_quantize_weights(w, 2, dims, 1, true, false, s, q);
  assert_float_equal(s[0], 4.0f / 127, 1e-9);
  assert_float_equal(s[1], 2.0f / 127, 1e-9);
  assert_float_equal(s[2], 0.25f / 127, 1e-9);
  const int8_t want_c[6] = {32, -32, 127, -127, 127, 0};
  assert_memory_equal(q, want_c, 6);
  /* an all-zero channel: scale 1, values 0 */
  const float z[4] = {0, 0, 1, -1};
  int64_t zd[2] = {2, 2};
  kl_quantize_weights(z, 2, zd, 0, true, true, s, q);
  assert_float_equal(s[0], 1, 0);
  assert_int_equal(q[0], 0);
  assert_int_equal(q[2], 64);
  assert_int_equal(q[3], -64);
  /* a channel of denormals: its scale underflowed to 0 (a model with a weight scale of
   * 0); now scale 1, codes 0 */
  const float d[4] = {1e-45f, -3e-44f, 1, -1};
  kl_quantize_weights(d, 2, zd, 0, true, false, s, q);
  assert_float_equal(s[0], 1, 0);
  assert_int_equal(q[0], 0);
  assert_int_equal(q[1], 0);
  assert_float_equal(s[1], 1.0f / 127, 1e-9);
}

/* ---- statistics ---- */

static int64_t hist_total(const kl_value_stats *s) {
  int64_t n = s->zeros;
  for (int i = 0; i < 2 * KL_HIST_HALF; i++) n += s->hist[i];
  return n;
}

static void test_minmax_and_widening(void **state) {
  (void)state;
  kl_value_stats *s = malloc(sizeof *s);
  assert_non_null(s);
  kl_stats_init(s);
  const float zeros[3] = {0, 0, 0}, a[3] = {-1, 0.5f, 1}, b[2] = {10, -3};
  kl_stats_add(s, zeros, 3); /* before any range: counted apart */
  kl_stats_add(s, a, 3);
  assert_float_equal(s->half_range, 1, 0);
  kl_stats_add(s, b, 2); /* widens twice, to 16 */
  assert_float_equal(s->half_range, 16, 0);
  assert_int_equal(s->count, 8);
  assert_int_equal(hist_total(s), 8);
  double lo, hi;
  kl_stats_range(s, KL_CALIB_MINMAX, 0, &lo, &hi);
  assert_float_equal(lo, -3, 0);
  assert_float_equal(hi, 10, 0);
  assert_float_equal(kl_stats_threshold(s, KL_CALIB_MINMAX, 0), 10, 0);
  /* every value still on its side of 0: the negatives' bins are below the middle */
  int64_t neg = 0;
  for (int i = 0; i < KL_HIST_HALF; i++) neg += s->hist[i];
  assert_int_equal(neg, 2);
  free(s);
}

static void test_percentile(void **state) {
  (void)state;
  kl_value_stats *s = malloc(sizeof *s);
  float *x = malloc(sizeof(float) * 1000);
  assert_true(s && x);
  kl_stats_init(s);
  for (int i = 0; i < 1000; i++) x[i] = i == 500 ? 100.0f : 1.0f;
  kl_stats_add(s, x, 1000);
  double w = s->half_range / KL_HIST_HALF;
  /* 99.9% of the values are 1: the threshold is the end of 1's bin */
  double t = kl_stats_threshold(s, KL_CALIB_PERCENTILE, 99.9);
  assert_true(t >= 1 && t <= 1 + w);
  double lo, hi;
  kl_stats_range(s, KL_CALIB_PERCENTILE, 99.9, &lo, &hi);
  assert_float_equal(lo, 1, 0);
  assert_float_equal(hi, t, 0);
  /* 100: nothing clipped */
  assert_float_equal(kl_stats_threshold(s, KL_CALIB_PERCENTILE, 100), 100, 0);
  assert_float_equal(kl_stats_threshold(s, KL_CALIB_MINMAX, 0), 100, 0);
  free(s), free(x);
}

static float gaussian(void) {
  double u1 = (tu_rand_f32(&rng, 0, 1) + 1e-7), u2 = tu_rand_f32(&rng, 0, 1);
  return (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
}

static void test_entropy(void **state) {
  (void)state;
  int n = 200000;
  kl_value_stats *s = malloc(sizeof *s);
  float *x = malloc(sizeof(float) * (size_t)n);
  assert_true(s && x);
  /* N(0, 1) with 20 outliers at +-60: minmax spends its range on the outliers; the
   * entropy threshold covers the bulk (|x| < 4 for all but 1 in 15,000) and stops far
   * below them */
  kl_stats_init(s);
  for (int i = 0; i < n; i++) x[i] = i % 10000 == 0 ? (i % 20000 ? 60.0f : -60.0f) : gaussian();
  kl_stats_add(s, x, n);
  double t = kl_stats_threshold(s, KL_CALIB_ENTROPY, 0);
  print_message("entropy threshold %g (max 60)\n", t);
  assert_true(t > 2.5 && t < 15);
  assert_float_equal(kl_stats_threshold(s, KL_CALIB_MINMAX, 0), 60, 0);
  double lo, hi;
  kl_stats_range(s, KL_CALIB_ENTROPY, 0, &lo, &hi);
  assert_float_equal(lo, -t, 0);
  assert_float_equal(hi, t, 0);
  /* a ReLU6's output: N(0, 3) clamped to [0, 6] (2.3% at exactly 6, half at 0): the KL
   * search alone clips it below 6 (5.97 here; EfficientNet-Lite0's ReLU6 outputs at
   * about 3), the spike at the top keeps it whole */
  kl_stats_init(s);
  int at_top = 0;
  for (int i = 0; i < n; i++) {
    float v = 3 * gaussian();
    x[i] = v < 0 ? 0 : v > 6 ? 6 : v;
    at_top += x[i] == 6;
  }
  kl_stats_add(s, x, n);
  t = kl_stats_threshold(s, KL_CALIB_ENTROPY, 0);
  print_message("clamped at 6 (%d of %d there): entropy threshold %g\n", at_top, n, t);
  assert_float_equal(t, 6, 1e-6);
  /* uniform on [0, 1]: nothing to gain by clipping, the threshold is near the end */
  kl_stats_init(s);
  for (int i = 0; i < n; i++) x[i] = tu_rand_f32(&rng, 0, 1);
  kl_stats_add(s, x, n);
  t = kl_stats_threshold(s, KL_CALIB_ENTROPY, 0);
  print_message("uniform: entropy threshold %g (max %g)\n", t, s->max);
  assert_true(t > 0.9 && t <= s->max);
  free(s), free(x);
}

/* ---- graphs ---- */

#define C_IN 3
#define C_MID 4
#define C_OUT 5
#define HW 6

/* x [2, 3, 6, 6] -> Conv "conv1" (3x3, pads 1, bias) -> Relu (or Clip(clip_lo, 6) when
 * clip) -> Conv "conv2" (1x1, no bias) -> y (output). */
static kl_graph *act_graph(bool clip, float clip_lo);
static kl_graph *cnn_graph(void) { return act_graph(false, 0); }

static kl_graph *act_graph(bool clip, float clip_lo) {
  kl_graph *g = tu_graph_new();
  int64_t xd[4] = {2, C_IN, HW, HW}, w1d[4] = {C_MID, C_IN, 3, 3}, bd[1] = {C_MID},
          w2d[4] = {C_OUT, C_MID, 1, 1};
  float w1[C_MID * C_IN * 9], b1[C_MID], w2[C_OUT * C_MID];
  for (int i = 0; i < C_MID * C_IN * 9; i++) w1[i] = tu_rand_f32(&rng, -0.5f, 0.5f) * (1 + i / 27);
  for (int i = 0; i < C_MID; i++) b1[i] = tu_rand_f32(&rng, -0.2f, 0.3f);
  for (int i = 0; i < C_OUT * C_MID; i++) w2[i] = tu_rand_f32(&rng, -1, 1);
  int x = tu_graph_input(g, "x", KL_F32, 4, xd);
  int cw1 = tu_graph_const(g, "w1", KL_F32, 4, w1d, w1);
  int cb1 = tu_graph_const(g, "b1", KL_F32, 1, bd, b1);
  int cw2 = tu_graph_const(g, "w2", KL_F32, 4, w2d, w2);
  int h = tu_graph_value(g, "h"), r = tu_graph_value(g, "r"), y = tu_graph_value(g, "y");
  int c1 = tu_graph_node(g, KL_OP_Conv, "conv1", 3, (int[]){x, cw1, cb1}, 1, &h);
  tu_node_ints(g, c1, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  if (clip) {
    float hi = 6;
    int lo_c = tu_graph_const(g, "lo", KL_F32, 0, NULL, &clip_lo);
    int hi_c = tu_graph_const(g, "hi", KL_F32, 0, NULL, &hi);
    tu_graph_node(g, KL_OP_Clip, "relu6", 3, (int[]){h, lo_c, hi_c}, 1, &r);
  } else {
    tu_graph_node(g, KL_OP_Relu, "relu", 1, &h, 1, &r);
  }
  tu_graph_node(g, KL_OP_Conv, "conv2", 2, (int[]){r, cw2}, 1, &y);
  kl_graph_add_output(g, y, NULL);
  kl_err e = {0};
  if (kl_graph_infer(g, &e) != KILN_OK) fail_msg("infer: %s", e.msg);
  return g;
}

static int count(const kl_graph *g, kl_op op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += g->nodes[i].op == op;
  return n;
}

static const kl_node *producer(const kl_graph *g, int v) {
  assert_true(v >= 0 && g->values[v].producer >= 0);
  return &g->nodes[g->values[v].producer];
}

#define NX (2 * C_IN * HW * HW)

static void random_x(float *x) {
  for (int i = 0; i < NX; i++) x[i] = tu_rand_f32(&rng, -1, 2);
}

static float last_x[NX]; /* calibrate's last batch */

static kiln_status calibrate(kl_quantizer *q, int batches, kl_err *e) {
  float *x = last_x;
  kiln_status st = KILN_OK;
  for (int b = 0; b < batches && st == KILN_OK; b++) {
    random_x(x);
    kl_tensor t = {.dtype = KL_F32, .rank = 4, .dims = {2, C_IN, HW, HW}, .data = x};
    st = kl_quantizer_run(q, 1, (const char *[]){"x"}, &t, e);
  }
  return st;
}

/* The outputs of session s (one float32 output) on x, calibrate's shape whatever the
 * model's input says (a symbolic batch). */
static float *run_x(kiln_session *s, const float *x, int64_t *count) {
  const int64_t dims[4] = {2, C_IN, HW, HW};
  assert_int_equal(kiln_session_set_input(s, "x", KILN_DTYPE_FLOAT32, 4, dims, x,
                                          sizeof(float) * NX), KILN_OK);
  if (kiln_session_run(s) != KILN_OK) fail_msg("run: %s", kiln_session_error(s));
  kiln_tensor_info info;
  const void *data;
  assert_int_equal(kiln_session_get_output(s, 0, &info, &data), KILN_OK);
  assert_int_equal(info.dtype, KILN_DTYPE_FLOAT32);
  int64_t n = 1;
  for (int d = 0; d < info.rank; d++) n *= info.dims[d];
  float *out = malloc(sizeof(float) * (size_t)(n + 1));
  assert_non_null(out);
  memcpy(out, data, sizeof(float) * (size_t)n);
  *count = n;
  return out;
}

/* The relative L2 difference between the float and the quantized graph's outputs on
 * calibrate's last batch (on new data, values past the ranges of a few calibration
 * batches saturate); the quantized graph at opt_level. */
static double compare_outputs(kl_graph *fg, kl_graph *qg, int opt_level, int *qlinear) {
  kiln_model *mf = tu_model_of(kl_graph_copy(fg), 0), *mq = tu_model_of(qg, opt_level);
  if (qlinear) *qlinear = count(mq->g, KL_OP_QLinearConv);
  float *x = last_x;
  kiln_session *sf = tu_session(mf, false, 1), *sq = tu_session(mq, false, 1);
  int64_t nf, nq;
  float *want = run_x(sf, x, &nf), *got = run_x(sq, x, &nq);
  assert_int_equal(nf, nq);
  double sum = 0, err = 0;
  for (int64_t i = 0; i < nf; i++) {
    sum += (double)want[i] * want[i];
    err += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
  }
  free(want), free(got);
  kiln_session_free(sf), kiln_session_free(sq);
  kiln_model_free(mf), kiln_model_free(mq);
  return sqrt(err / sum);
}

static void test_static_graph(void **state) {
  (void)state;
  kl_graph *g = cnn_graph();
  kl_quant_options o = {.per_channel = true, .reduce_range = true};
  kl_quantizer *q;
  kl_err e = {0};
  assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
  assert_int_equal(calibrate(q, 3, &e), KILN_OK);
  assert_int_equal(kl_quantizer_batches(q), 3);
  assert_int_equal(kl_quantizer_compute(q, &e), KILN_OK);
  assert_int_equal(calibrate(q, 1, &e), KILN_OK); /* the error pass */
  kl_graph *h;
  assert_int_equal(kl_quantizer_graph(q, &h, &e), KILN_OK);
  /* x and r (the Relu's output, now Q(conv1)'s) get a QDQ pair; y, an output, none */
  assert_int_equal(count(h, KL_OP_Relu), 0);
  assert_int_equal(count(h, KL_OP_QuantizeLinear), 2);
  /* + 2 weights, 2 biases (conv2's added by bias correction) */
  assert_int_equal(count(h, KL_OP_DequantizeLinear), 6);
  assert_int_equal(count(h, KL_OP_Conv), 2);
  for (int i = 0; i < h->n_nodes; i++) {
    const kl_node *n = &h->nodes[i];
    if (n->op != KL_OP_Conv) continue;
    const kl_node *dx = producer(h, n->in[0]), *dw = producer(h, n->in[1]);
    assert_int_equal(dx->op, KL_OP_DequantizeLinear);
    assert_int_equal(dw->op, KL_OP_DequantizeLinear);
    assert_int_equal(h->values[dx->in[0]].type.dtype, KL_U8);
    assert_int_equal(producer(h, dx->in[0])->op, KL_OP_QuantizeLinear);
    /* int8 weights per output channel, within [-64, 64] */
    const kl_value *wq = &h->values[dw->in[0]];
    assert_int_equal(wq->kind, KL_VALUE_CONST);
    assert_int_equal(wq->type.dtype, KL_I8);
    for (size_t k = 0; k < wq->nbytes; k++)
      assert_true(abs(((const int8_t *)wq->data)[k]) <= 64);
    assert_int_equal(kl_attr_int(dw, "axis", -1), 0);
    assert_int_equal(h->values[dw->in[1]].type.rank, 1);
    if (strcmp(n->name, "conv1") == 0) {
      /* the bias: int32 at scale sx * sw[c] */
      const kl_node *db = producer(h, n->in[2]);
      assert_int_equal(db->op, KL_OP_DequantizeLinear);
      assert_int_equal(h->values[db->in[0]].type.dtype, KL_I32);
      const float *bs = h->values[db->in[1]].data, *ws = h->values[dw->in[1]].data,
                  *sx = h->values[dx->in[1]].data;
      for (int c = 0; c < C_MID; c++) assert_float_equal(bs[c], sx[0] * ws[c], 0);
      /* its output goes through Q (zero point 0: the Relu's clamp) to conv2 */
      int rd = kl_graph_readers(h, n->out[0], &(int){0})[0];
      assert_int_equal(h->nodes[rd].op, KL_OP_QuantizeLinear);
      assert_int_equal(*(const uint8_t *)h->values[h->nodes[rd].in[2]].data, 0);
    } else {
      /* a bias made by bias correction: int32 at scale sx * sw[c] */
      const kl_node *db = producer(h, n->in[2]);
      assert_int_equal(db->op, KL_OP_DequantizeLinear);
      assert_int_equal(h->values[db->in[0]].type.dtype, KL_I32);
      int out = n->out[0];
      assert_int_equal(h->outputs[0], out); /* the model output, float32 */
      assert_string_equal(h->values[out].name, "y");
    }
  }
  /* the report: 2 activations and 2 weights, errors measured; the Relu removed */
  int nv, nn;
  const kl_quant_value *v = kl_quantizer_values(q, &nv);
  assert_int_equal(nv, 4);
  for (int i = 0; i < nv; i++) {
    assert_true(v[i].sqnr_db > 20 && isfinite(v[i].sqnr_db));
    assert_true(v[i].rel_l2 > 0 && v[i].rel_l2 < 0.1);
  }
  assert_string_equal(v[0].name, "x");
  assert_true(v[0].min >= -1 && v[0].max <= 2 && v[0].min < -0.9 && v[0].max > 1.9);
  const kl_quant_node *nodes = kl_quantizer_nodes(q, &nn);
  assert_int_equal(nn, 3);
  assert_true(nodes[0].quantized && nodes[2].quantized && !nodes[1].quantized);
  tu_assert_contains_at(nodes[1].why, "removed", __FILE__, __LINE__);
  /* the written model runs; kiln folds conv1 (DQ in, Q out) into QLinearConv */
  int qlinear;
  double rel = compare_outputs(g, kl_graph_copy(h), 2, &qlinear);
  print_message("static: relative L2 difference %.4f\n", rel);
  assert_true(rel < 0.05);
  assert_int_equal(qlinear, 1);
  rel = compare_outputs(g, h, 0, NULL);
  print_message("static -O0: relative L2 difference %.4f\n", rel);
  assert_true(rel < 0.05);
  kl_quantizer_free(q);
  kl_graph_free(g);
}

/* A depthwise convolution (C_IN groups of one channel) and a 1x1 one after it: with
 * depthwise_per_channel and not per_channel (kiln quantize's static default) the
 * depthwise weights get a scale per output channel (axis 0), the 1x1's one scale; with
 * neither, both one; the written model runs within 5% of float32 (relative L2). */
static kl_graph *depthwise_graph(void) {
  kl_graph *g = tu_graph_new();
  int64_t xd[4] = {2, C_IN, HW, HW}, wdd[4] = {C_IN, 1, 3, 3}, wpd[4] = {C_OUT, C_IN, 1, 1};
  float wd[C_IN * 9], wp[C_OUT * C_IN];
  /* filters of very different sizes: one scale for all would leave the small ones a
   * few codes */
  for (int i = 0; i < C_IN * 9; i++) wd[i] = tu_rand_f32(&rng, -1, 1) * (i / 9 == 0 ? 0.02f : 1);
  for (int i = 0; i < C_OUT * C_IN; i++) wp[i] = tu_rand_f32(&rng, -1, 1);
  int x = tu_graph_input(g, "x", KL_F32, 4, xd);
  int cwd = tu_graph_const(g, "wd", KL_F32, 4, wdd, wd);
  int cwp = tu_graph_const(g, "wp", KL_F32, 4, wpd, wp);
  int h = tu_graph_value(g, "h"), y = tu_graph_value(g, "y");
  int dw = tu_graph_node(g, KL_OP_Conv, "dw", 2, (int[]){x, cwd}, 1, &h);
  tu_node_ints(g, dw, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  assert_int_equal(kl_node_set_int(g, dw, "group", C_IN, NULL), KILN_OK);
  tu_graph_node(g, KL_OP_Conv, "pw", 2, (int[]){h, cwp}, 1, &y);
  kl_graph_add_output(g, y, NULL);
  kl_err e = {0};
  if (kl_graph_infer(g, &e) != KILN_OK) fail_msg("infer: %s", e.msg);
  return g;
}

static void test_depthwise_scales(void **state) {
  (void)state;
  for (int dpc = 0; dpc < 2; dpc++) {
    kl_graph *g = depthwise_graph();
    kl_quant_options o = {.depthwise_per_channel = dpc, .reduce_range = true};
    kl_quantizer *q;
    kl_err e = {0};
    assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
    assert_int_equal(calibrate(q, 2, &e), KILN_OK);
    assert_int_equal(kl_quantizer_compute(q, &e), KILN_OK);
    kl_graph *h;
    assert_int_equal(kl_quantizer_graph(q, &h, &e), KILN_OK);
    int convs = 0;
    for (int i = 0; i < h->n_nodes; i++) {
      const kl_node *n = &h->nodes[i];
      if (n->op != KL_OP_Conv) continue;
      convs++;
      const kl_node *dq = producer(h, n->in[1]);
      assert_int_equal(dq->op, KL_OP_DequantizeLinear);
      int64_t scales = 0;
      assert_true(kl_type_numel(&h->values[dq->in[1]].type, &scales));
      bool depthwise = strcmp(n->name, "dw") == 0, per_channel = dpc && depthwise;
      if (scales != (per_channel ? C_IN : 1))
        fail_msg("depthwise_per_channel %d, %s: %lld weight scales", dpc, n->name,
                 (long long)scales);
      assert_int_equal(kl_attr_int(dq, "axis", -1), per_channel ? 0 : -1);
    }
    assert_int_equal(convs, 2);
    double rel = compare_outputs(g, h, 2, NULL);
    print_message("depthwise_per_channel %d: relative L2 difference %.4f\n", dpc, rel);
    if (dpc) assert_true(rel < 0.05);
    kl_quantizer_free(q);
    kl_graph_free(g);
  }
}

static void test_symmetric_keeps_relu(void **state) {
  (void)state;
  kl_graph *g = cnn_graph();
  kl_quant_options o = {.symmetric = true, .method = KL_CALIB_PERCENTILE, .percentile = 99.99};
  kl_quantizer *q;
  kl_err e = {0};
  assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
  assert_int_equal(calibrate(q, 2, &e), KILN_OK);
  kl_graph *h;
  assert_int_equal(kl_quantizer_graph(q, &h, &e), KILN_OK);
  assert_int_equal(count(h, KL_OP_Relu), 1);
  /* x, h (conv1's output) and r (the Relu's) */
  assert_int_equal(count(h, KL_OP_QuantizeLinear), 3);
  for (int i = 0; i < h->n_nodes; i++)
    if (h->nodes[i].op == KL_OP_QuantizeLinear) {
      const kl_value *z = &h->values[h->nodes[i].in[2]];
      assert_int_equal(z->type.dtype, KL_I8);
      assert_int_equal(*(const int8_t *)z->data, 0);
    }
  /* per tensor: the weights' scale a scalar, no axis */
  int nv;
  const kl_quant_value *v = kl_quantizer_values(q, &nv);
  for (int i = 0; i < nv; i++)
    if (v[i].weight) assert_float_equal(v[i].scale, v[i].scale_max, 0);
  double rel = compare_outputs(g, h, 2, NULL);
  print_message("symmetric: relative L2 difference %.4f\n", rel);
  assert_true(rel < 0.05);
  kl_quantizer_free(q);
  kl_graph_free(g);
}

/* A Clip from 0 (ReLU6) goes as a Relu does; one from -1 stays (zero point not 0). */
static void test_clip(void **state) {
  (void)state;
  for (int from_zero = 0; from_zero < 2; from_zero++) {
    kl_graph *g = act_graph(true, from_zero ? 0.0f : -1.0f);
    kl_quant_options o = {.per_channel = true, .reduce_range = true};
    kl_quantizer *q;
    kl_err e = {0};
    assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
    assert_int_equal(calibrate(q, 2, &e), KILN_OK);
    kl_graph *h;
    assert_int_equal(kl_quantizer_graph(q, &h, &e), KILN_OK);
    assert_int_equal(count(h, KL_OP_Clip), from_zero ? 0 : 1);
    /* x, then the Clip's output (removed) or conv1's and the Clip's (kept) */
    assert_int_equal(count(h, KL_OP_QuantizeLinear), from_zero ? 2 : 3);
    int qlinear;
    double rel = compare_outputs(g, h, 2, &qlinear);
    print_message("clip from %d: relative L2 difference %.4f\n", from_zero ? 0 : -1, rel);
    assert_true(rel < 0.05);
    assert_int_equal(qlinear, 1); /* conv1 either way: its output has its own pair */
    kl_quantizer_free(q);
    kl_graph_free(g);
  }
}

static void test_exclude(void **state) {
  (void)state;
  kl_graph *g = cnn_graph();
  kl_quant_options o = {.exclude = ",conv1,"}; /* empty patterns are skipped */
  kl_quantizer *q;
  kl_err e = {0};
  assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
  assert_int_equal(calibrate(q, 1, &e), KILN_OK);
  kl_graph *h;
  assert_int_equal(kl_quantizer_graph(q, &h, &e), KILN_OK);
  int nn;
  const kl_quant_node *nodes = kl_quantizer_nodes(q, &nn);
  assert_false(nodes[0].quantized);
  assert_string_equal(nodes[0].why, "excluded (--exclude)");
  assert_true(nodes[2].quantized);
  /* conv1 keeps its float weights; conv2 reads r through a QDQ pair */
  assert_int_equal(count(h, KL_OP_Relu), 1);
  assert_int_equal(count(h, KL_OP_QuantizeLinear), 1);
  for (int i = 0; i < h->n_nodes; i++)
    if (h->nodes[i].op == KL_OP_Conv && strcmp(h->nodes[i].name, "conv1") == 0)
      assert_int_equal(h->values[h->nodes[i].in[1]].kind, KL_VALUE_CONST);
  kl_graph_free(h);
  kl_quantizer_free(q);
  /* a pattern for both: nothing to quantize */
  o.exclude = "conv*";
  e = (kl_err){0};
  assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_ERR_INVALID_ARGUMENT);
  assert_null(q);
  tu_assert_contains_at(e.msg, "nothing to quantize", __FILE__, __LINE__);
  /* and says why the first product was kept float32 */
  tu_assert_contains_at(e.msg, "; node 'conv1' (Conv): excluded (--exclude)", __FILE__, __LINE__);
  /* a pattern that names no node (a typo, or an op type) is refused: it quantized the
   * node it meant to keep, silently; a pattern past 255 characters was skipped too */
  static char long_pat[300];
  memset(long_pat, 'c', sizeof long_pat - 1);
  const char *unmatched[] = {"nothing,conv1", "Conv", "conv1, conv2", long_pat};
  for (size_t k = 0; k < sizeof unmatched / sizeof unmatched[0]; k++) {
    o.exclude = unmatched[k];
    e = (kl_err){0};
    assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_ERR_INVALID_ARGUMENT);
    assert_null(q);
    tu_assert_contains_at(e.msg, "names no node of the model", __FILE__, __LINE__);
  }
  memset(long_pat, '*', sizeof long_pat - 1); /* conv1 and 294 stars: matches conv1 */
  memcpy(long_pat, "conv1", 5);
  o.exclude = long_pat;
  e = (kl_err){0};
  assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
  assert_string_equal(kl_quantizer_nodes(q, &nn)[0].why, "excluded (--exclude)");
  kl_quantizer_free(q);
  kl_graph_free(g);
}

static const kl_quant_node *node_named(const kl_quant_node *nodes, int nn, const char *name);

/* A NaN among conv2's weights, or an infinity in conv1's bias (a hostile or broken
 * file): that node stays float32 with the reason, the other is quantized (the
 * infinity then reaches conv2's input, and calibration refuses it by name). */
static void test_non_finite_weights(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    kl_graph *g = cnn_graph();
    float *f = (float *)g->values[kl_graph_find_value(g, k ? "b1" : "w2")].data;
    f[1] = k ? INFINITY : NAN;
    kl_quant_options o = {.per_channel = true, .reduce_range = true, .gptq = true};
    kl_quantizer *q;
    kl_err e = {0};
    assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
    int nn;
    const kl_quant_node *nodes = kl_quantizer_nodes(q, &nn);
    const kl_quant_node *bad = node_named(nodes, nn, k ? "conv1" : "conv2"),
                        *good = node_named(nodes, nn, k ? "conv2" : "conv1");
    assert_false(bad->quantized);
    tu_assert_contains_at(bad->why, "not finite", __FILE__, __LINE__);
    assert_true(good->quantized);
    if (k) { /* the infinity reaches conv2's input, which calibration refuses */
      assert_int_equal(calibrate(q, 2, &e), KILN_ERR_INVALID_ARGUMENT);
      tu_assert_contains_at(e.msg, "value 'r' holds inf", __FILE__, __LINE__);
    } else {
      if (calibrate(q, 2, &e) != KILN_OK) fail_msg("calibrate: %s", e.msg);
      assert_int_equal(kl_quantizer_compute(q, &e), KILN_OK);
      kl_graph *h;
      assert_int_equal(kl_quantizer_graph(q, &h, &e), KILN_OK);
      kl_graph_free(h);
    }
    kl_quantizer_free(q);
    kl_graph_free(g);
  }
}

/* The ops between quantized nodes (quantize.c, "the ops between the quantized nodes"):
 *   x -> conv1 -> Relu -> MaxPool -> p [2, 4, 3, 3]
 *   p -> conv2 -> h2; Sigmoid(h2) -> s2; Mul(h2, s2) -> m        (SiLU)
 *   Add(m, p) -> a -> Relu -> ar                                  (a residual)
 *   p -> conv3 -> h3 [2, 1, 3, 3]; Mul(ar, h3) -> bm              (shapes not taken)
 *   GlobalAveragePool(bm) -> Flatten -> Gemm -> y                 (float: bm is)
 * MaxPool, Sigmoid, the SiLU Mul and the Add are quantized (the MaxPool's output with
 * its input's parameters, the Relu after the Add removed); the second Mul is not (its
 * [2, 1, 3, 3] operand against [2, 4, 3, 3] is no shape the 8-bit kernel takes), nor is
 * the pooling after it (its input is no quantized activation). The written graph, at
 * -O2, runs the Add as QLinearAdd and SiLU as one lookup table, within 5% of float32.
 * With sym_batch, x's first dim is the symbol "batch" (as most exported models have it):
 * the same decisions (the operand shapes are compared dim by dim, a symbol with itself). */
static kl_graph *between_graph(bool sym_batch) {
  kl_graph *g = tu_graph_new();
  int64_t xd[4] = {2, C_IN, HW, HW}, w1d[4] = {4, C_IN, 3, 3}, w2d[4] = {4, 4, 1, 1},
          w3d[4] = {1, 4, 1, 1}, wgd[2] = {5, 4}, bd[1] = {4};
  float w1[4 * C_IN * 9], b1[4], w2[16], w3[4], wg[20];
  for (int i = 0; i < 4 * C_IN * 9; i++) w1[i] = tu_rand_f32(&rng, -0.5f, 0.5f);
  for (int i = 0; i < 4; i++) b1[i] = tu_rand_f32(&rng, -0.2f, 0.3f);
  for (int i = 0; i < 16; i++) w2[i] = tu_rand_f32(&rng, -1, 1);
  for (int i = 0; i < 4; i++) w3[i] = tu_rand_f32(&rng, -1, 1);
  for (int i = 0; i < 20; i++) wg[i] = tu_rand_f32(&rng, -1, 1);
  int x = tu_graph_input(g, "x", KL_F32, 4, xd);
  if (sym_batch) g->values[x].type.dims[0] = (kl_dim){-1, kl_graph_symbol(g, "batch")};
  int cw1 = tu_graph_const(g, "w1", KL_F32, 4, w1d, w1), cb1 = tu_graph_const(g, "b1", KL_F32, 1, bd, b1);
  int cw2 = tu_graph_const(g, "w2", KL_F32, 4, w2d, w2), cw3 = tu_graph_const(g, "w3", KL_F32, 4, w3d, w3);
  int cwg = tu_graph_const(g, "wg", KL_F32, 2, wgd, wg);
  const char *names[] = {"h1", "r1", "p", "h2", "s2", "m", "a", "ar", "h3", "bm", "gp", "f", "y"};
  int v[13];
  for (int k = 0; k < 13; k++) v[k] = tu_graph_value(g, names[k]);
  int c1 = tu_graph_node(g, KL_OP_Conv, "conv1", 3, (int[]){x, cw1, cb1}, 1, &v[0]);
  tu_node_ints(g, c1, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  tu_graph_node(g, KL_OP_Relu, "relu1", 1, &v[0], 1, &v[1]);
  int mp = tu_graph_node(g, KL_OP_MaxPool, "pool", 1, &v[1], 1, &v[2]);
  tu_node_ints(g, mp, "kernel_shape", 2, (const int64_t[]){2, 2});
  tu_node_ints(g, mp, "strides", 2, (const int64_t[]){2, 2});
  tu_graph_node(g, KL_OP_Conv, "conv2", 2, (int[]){v[2], cw2}, 1, &v[3]);
  tu_graph_node(g, KL_OP_Sigmoid, "sigmoid", 1, &v[3], 1, &v[4]);
  tu_graph_node(g, KL_OP_Mul, "silu", 2, (int[]){v[3], v[4]}, 1, &v[5]);
  tu_graph_node(g, KL_OP_Add, "residual", 2, (int[]){v[5], v[2]}, 1, &v[6]);
  tu_graph_node(g, KL_OP_Relu, "relu2", 1, &v[6], 1, &v[7]);
  tu_graph_node(g, KL_OP_Conv, "conv3", 2, (int[]){v[2], cw3}, 1, &v[8]);
  tu_graph_node(g, KL_OP_Mul, "gate", 2, (int[]){v[7], v[8]}, 1, &v[9]);
  tu_graph_node(g, KL_OP_GlobalAveragePool, "gap", 1, &v[9], 1, &v[10]);
  tu_graph_node(g, KL_OP_Flatten, "flatten", 1, &v[10], 1, &v[11]);
  int gm = tu_graph_node(g, KL_OP_Gemm, "fc", 2, (int[]){v[11], cwg}, 1, &v[12]);
  assert_int_equal(kl_node_set_int(g, gm, "transB", 1, NULL), KILN_OK);
  kl_graph_add_output(g, v[12], NULL);
  kl_err e = {0};
  if (kl_graph_infer(g, &e) != KILN_OK) fail_msg("infer: %s", e.msg);
  return g;
}

static const kl_quant_node *node_named(const kl_quant_node *nodes, int nn, const char *name) {
  for (int i = 0; i < nn; i++)
    if (strcmp(nodes[i].name, name) == 0) return &nodes[i];
  fail_msg("no node %s", name);
  return NULL;
}

static const kl_quant_value *value_named(const kl_quant_value *v, int nv, const char *name) {
  for (int i = 0; i < nv; i++)
    if (strcmp(v[i].name, name) == 0) return &v[i];
  fail_msg("no quantized value %s", name);
  return NULL;
}

static void ops_between(bool sym_batch) {
  kl_graph *g = between_graph(sym_batch);
  kl_quant_options o = {.per_channel = true, .reduce_range = true};
  kl_quantizer *q;
  kl_err e = {0};
  assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
  assert_int_equal(calibrate(q, 3, &e), KILN_OK);
  assert_int_equal(kl_quantizer_compute(q, &e), KILN_OK);
  int nn, nv;
  const kl_quant_node *nodes = kl_quantizer_nodes(q, &nn);
  const char *taken[] = {"conv1", "pool", "conv2", "sigmoid", "silu", "residual", "conv3", "fc"};
  for (size_t k = 0; k < sizeof taken / sizeof taken[0]; k++)
    if (!node_named(nodes, nn, taken[k])->quantized) fail_msg("%s is not quantized", taken[k]);
  tu_assert_contains_at(node_named(nodes, nn, "relu1")->why, "removed", __FILE__, __LINE__);
  tu_assert_contains_at(node_named(nodes, nn, "relu2")->why, "removed", __FILE__, __LINE__);
  const kl_quant_node *gate = node_named(nodes, nn, "gate"), *gap = node_named(nodes, nn, "gap");
  assert_false(gate->quantized);
  tu_assert_contains_at(gate->why, "operand shapes", __FILE__, __LINE__);
  assert_false(gap->quantized);
  tu_assert_contains_at(gap->why, "not a quantized activation", __FILE__, __LINE__);
  /* the MaxPool's output quantized as its input (the Relu's output, conv1's Q) */
  const kl_quant_value *v = kl_quantizer_values(q, &nv);
  const kl_quant_value *r1 = value_named(v, nv, "r1"), *p = value_named(v, nv, "p");
  assert_float_equal(p->scale, r1->scale, 0);
  assert_int_equal(p->zero_point, r1->zero_point);
  assert_float_equal(p->hi, r1->hi, 0);
  /* observed: x, r1, p, h2, s2, m, ar (the Add's, its Relu removed), h3, f */
  const char *observed[] = {"x", "r1", "p", "h2", "s2", "m", "ar", "h3", "f"};
  for (size_t k = 0; k < sizeof observed / sizeof observed[0]; k++) value_named(v, nv, observed[k]);
  kl_graph *h;
  assert_int_equal(kl_quantizer_graph(q, &h, &e), KILN_OK);
  assert_int_equal(count(h, KL_OP_QuantizeLinear), 9);
  assert_int_equal(count(h, KL_OP_Relu), 0);
  /* at -O2: QLinearConv x 3, the Add on codes, SiLU one lookup, MaxPool on codes */
  kiln_model *mq = tu_model_of(kl_graph_copy(h), 2);
  print_message("ops between: %d QLinearConv, %d QLinearAdd, %d QLinearLookup, %d "
                "QuantizeLinear after -O2\n", count(mq->g, KL_OP_QLinearConv),
                count(mq->g, KL_OP_KilnQLinearAdd), count(mq->g, KL_OP_KilnQLinearLookup),
                count(mq->g, KL_OP_QuantizeLinear));
  assert_int_equal(count(mq->g, KL_OP_QLinearConv), 3);
  assert_int_equal(count(mq->g, KL_OP_KilnQLinearAdd), 1);
  assert_int_equal(count(mq->g, KL_OP_KilnQLinearLookup), 1);
  assert_int_equal(count(mq->g, KL_OP_Sigmoid), 0);
  for (int i = 0; i < mq->g->n_nodes; i++)
    if (mq->g->nodes[i].op == KL_OP_MaxPool)
      assert_int_equal(mq->g->values[mq->g->nodes[i].out[0]].type.dtype, KL_U8);
  kiln_model_free(mq);
  double rel = compare_outputs(g, kl_graph_copy(h), 2, NULL);
  print_message("ops between: relative L2 difference %.4f (-O2)\n", rel);
  assert_true(rel < 0.05);
  rel = compare_outputs(g, h, 0, NULL);
  print_message("ops between: relative L2 difference %.4f (-O0)\n", rel);
  assert_true(rel < 0.05);
  kl_quantizer_free(q);
  kl_graph_free(g);
}

static void test_ops_between(void **state) {
  (void)state;
  ops_between(false);
}

static void test_ops_between_symbolic_batch(void **state) {
  (void)state;
  ops_between(true);
}

/* Bias correction (quantize.c): x [2, 3, 6, 6] on calibration data of mean 0.5 (U(-1, 2)),
 *   conv a:  W [4, 3, 3, 3], strides 2, pads (1, 0, 0, 1), no bias       -> ya
 *   conv d:  depthwise W [3, 1, 3, 3], dilations 2, pads 2, a bias        -> yd
 *   gemm g:  Flatten(x) [2, 108] x W [5, 108] (transB), no C              -> yg
 * Each written bias (the int32 constant times its scale) is B - sum_k (dq(Wq) - W)[c, k]
 * E[x under weight k], the means taken here the plain way from the stored calibration
 * batches, within half a step of the bias's scale; with no_bias_correction conv a and
 * the Gemm get none and conv d keeps B. */
#define BC_BATCHES 3
static float bc_x[BC_BATCHES][NX];

/* The mean of x under weight (ci, ki, kj) of a 2-D convolution over the stored batches. */
static double bc_tap_mean(int ci, int ki, int kj, const int64_t *st, const int64_t *pb,
                          const int64_t *pe, const int64_t *dil, int k) {
  int64_t ho = (HW + pb[0] + pe[0] - dil[0] * (k - 1) - 1) / st[0] + 1;
  int64_t wo = (HW + pb[1] + pe[1] - dil[1] * (k - 1) - 1) / st[1] + 1;
  double sum = 0;
  for (int b = 0; b < BC_BATCHES; b++)
    for (int n = 0; n < 2; n++)
      for (int64_t oh = 0; oh < ho; oh++)
        for (int64_t ow = 0; ow < wo; ow++) {
          int64_t y = oh * st[0] - pb[0] + ki * dil[0], xx = ow * st[1] - pb[1] + kj * dil[1];
          if (y >= 0 && y < HW && xx >= 0 && xx < HW)
            sum += bc_x[b][((n * C_IN + ci) * HW + y) * HW + xx];
        }
  return sum / (BC_BATCHES * 2 * ho * wo);
}

/* The values of a DequantizeLinear of a constant: q[k] * scale[k / inner % n_scales]. */
static double *bc_dequantized(const kl_graph *h, int v, int64_t inner, int64_t *count) {
  const kl_node *dq = producer(h, v);
  assert_int_equal(dq->op, KL_OP_DequantizeLinear);
  const kl_value *cq = &h->values[dq->in[0]], *sc = &h->values[dq->in[1]];
  int64_t n, ns;
  kl_type_numel(&cq->type, &n);
  kl_type_numel(&sc->type, &ns);
  double *out = malloc(sizeof *out * (size_t)n);
  assert_non_null(out);
  for (int64_t k = 0; k < n; k++) {
    double code = cq->type.dtype == KL_I32 ? ((const int32_t *)cq->data)[k]
                                          : ((const int8_t *)cq->data)[k];
    out[k] = code * ((const float *)sc->data)[ns > 1 ? k / inner % ns : 0];
  }
  *count = n;
  return out;
}

static int node_index(const kl_graph *h, const char *name) {
  for (int i = 0; i < h->n_nodes; i++)
    if (strcmp(h->nodes[i].name, name) == 0) return i;
  fail_msg("no node %s", name);
  return -1;
}

static void test_bias_correction(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int64_t xd[4] = {2, C_IN, HW, HW}, wad[4] = {4, C_IN, 3, 3}, wdd[4] = {C_IN, 1, 3, 3},
          wgd[2] = {5, C_IN * HW * HW}, bd = C_IN;
  float wa[4 * C_IN * 9], wdw[C_IN * 9], bdw[C_IN], wg[5 * C_IN * HW * HW];
  for (int i = 0; i < 4 * C_IN * 9; i++) wa[i] = tu_rand_f32(&rng, -1, 1);
  for (int i = 0; i < C_IN * 9; i++) wdw[i] = tu_rand_f32(&rng, -2, 2);
  for (int i = 0; i < C_IN; i++) bdw[i] = tu_rand_f32(&rng, -0.5f, 0.5f);
  for (int i = 0; i < 5 * C_IN * HW * HW; i++) wg[i] = tu_rand_f32(&rng, -0.3f, 0.3f);
  int x = tu_graph_input(g, "x", KL_F32, 4, xd);
  int cwa = tu_graph_const(g, "wa", KL_F32, 4, wad, wa);
  int cwd = tu_graph_const(g, "wd", KL_F32, 4, wdd, wdw), cbd = tu_graph_const(g, "bd", KL_F32, 1, &bd, bdw);
  int cwg = tu_graph_const(g, "wg", KL_F32, 2, wgd, wg);
  int ya = tu_graph_value(g, "ya"), yd = tu_graph_value(g, "yd"), f = tu_graph_value(g, "f"),
      yg = tu_graph_value(g, "yg");
  int na = tu_graph_node(g, KL_OP_Conv, "a", 2, (int[]){x, cwa}, 1, &ya);
  tu_node_ints(g, na, "strides", 2, (const int64_t[]){2, 2});
  tu_node_ints(g, na, "pads", 4, (const int64_t[]){1, 0, 0, 1});
  int nd = tu_graph_node(g, KL_OP_Conv, "d", 3, (int[]){x, cwd, cbd}, 1, &yd);
  tu_node_ints(g, nd, "dilations", 2, (const int64_t[]){2, 2});
  tu_node_ints(g, nd, "pads", 4, (const int64_t[]){2, 2, 2, 2});
  assert_int_equal(kl_node_set_int(g, nd, "group", C_IN, NULL), KILN_OK);
  tu_graph_node(g, KL_OP_Flatten, "flat", 1, &x, 1, &f);
  int ng = tu_graph_node(g, KL_OP_Gemm, "g", 2, (int[]){f, cwg}, 1, &yg);
  assert_int_equal(kl_node_set_int(g, ng, "transB", 1, NULL), KILN_OK);
  kl_graph_add_output(g, ya, NULL);
  kl_graph_add_output(g, yd, NULL);
  kl_graph_add_output(g, yg, NULL);
  kl_err e = {0};
  if (kl_graph_infer(g, &e) != KILN_OK) fail_msg("infer: %s", e.msg);
  for (int b = 0; b < BC_BATCHES; b++) random_x(bc_x[b]);
  for (int corrected = 1; corrected >= 0; corrected--) {
    kl_quant_options o = {.per_channel = true, .reduce_range = true,
                          .no_bias_correction = !corrected};
    kl_quantizer *q;
    assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
    for (int b = 0; b < BC_BATCHES; b++) {
      kl_tensor t = {.dtype = KL_F32, .rank = 4, .dims = {2, C_IN, HW, HW}, .data = bc_x[b]};
      assert_int_equal(kl_quantizer_run(q, 1, (const char *[]){"x"}, &t, &e), KILN_OK);
    }
    assert_int_equal(kl_quantizer_compute(q, &e), KILN_OK);
    kl_graph *h;
    assert_int_equal(kl_quantizer_graph(q, &h, &e), KILN_OK);
    const kl_node *a = &h->nodes[node_index(h, "a")], *d = &h->nodes[node_index(h, "d")],
                  *gm = &h->nodes[node_index(h, "g")];
    if (!corrected) {
      assert_int_equal(a->n_in, 2);
      assert_int_equal(gm->n_in, 2);
    }
    /* conv a, conv d: each output channel's bias against B - shift */
    struct {
      const kl_node *n;
      const float *w, *b;
      int m, cg, group;
      int64_t st[2], pb[2], pe[2], dil[2];
    } convs[2] = {{a, wa, NULL, 4, C_IN, 1, {2, 2}, {1, 0}, {0, 1}, {1, 1}},
                  {d, wdw, bdw, C_IN, 1, C_IN, {1, 1}, {2, 2}, {2, 2}, {2, 2}}};
    for (int k = 0; k < 2; k++) {
      if (!corrected && !convs[k].b) continue;
      int64_t nw, nb, per = convs[k].cg * 9;
      double *dw = bc_dequantized(h, convs[k].n->in[1], per, &nw);
      double *bias = bc_dequantized(h, convs[k].n->in[2], 1, &nb);
      assert_int_equal(nb, convs[k].m);
      const kl_node *bdq = producer(h, convs[k].n->in[2]);
      const float *bscale = h->values[bdq->in[1]].data;
      for (int c = 0; c < convs[k].m; c++) {
        double shift = 0;
        int gi = c / (convs[k].m / convs[k].group);
        for (int ci = 0; ci < convs[k].cg; ci++)
          for (int t = 0; t < 9; t++) {
            int64_t w = (int64_t)c * per + ci * 9 + t;
            shift += (dw[w] - convs[k].w[w]) *
                     bc_tap_mean(gi * convs[k].cg + ci, t / 3, t % 3, convs[k].st, convs[k].pb,
                                 convs[k].pe, convs[k].dil, 3);
          }
        double want = (convs[k].b ? convs[k].b[c] : 0) - (corrected ? shift : 0);
        if (fabs(bias[c] - want) > 0.5 * bscale[c] + 1e-6)
          fail_msg("conv %d channel %d (corrected %d): bias %g, want %g (shift %g)", k, c,
                   corrected, bias[c], want, shift);
        if (corrected && convs[k].b) assert_true(fabs(shift) > bscale[c]); /* it moved */
      }
      free(dw), free(bias);
    }
    if (corrected) { /* the Gemm: columns of Flatten(x) */
      int64_t nw, nb, kk = C_IN * HW * HW;
      double *dw = bc_dequantized(h, gm->in[1], kk, &nw), *bias = bc_dequantized(h, gm->in[2], 1, &nb);
      const float *bscale = h->values[producer(h, gm->in[2])->in[1]].data;
      for (int c = 0; c < 5; c++) {
        double shift = 0;
        for (int64_t j = 0; j < kk; j++) {
          double mean = 0;
          for (int b = 0; b < BC_BATCHES; b++) mean += bc_x[b][j] + bc_x[b][kk + j];
          shift += (dw[c * kk + j] - wg[c * kk + j]) * mean / (2 * BC_BATCHES);
        }
        if (fabs(bias[c] + shift) > 0.5 * bscale[c] + 1e-6)
          fail_msg("gemm channel %d: bias %g, want %g", c, bias[c], -shift);
      }
      free(dw), free(bias);
    }
    kl_graph_free(h);
    kl_quantizer_free(q);
  }
  kl_graph_free(g);
}

/* A channel split (ShuffleNetV2's Slice) and a global pool written as ReduceMean over
 * the spatial dims between quantized convolutions:
 *   x -> conv1 -> h [2, 4, 6, 6] -> Slice(channels 2..4) -> sl -> conv2 -> h2
 *     -> ReduceMean(axes 2, 3, keepdims) -> rm -> conv3 -> y
 * The Slice is quantized with its input's parameters and runs on the codes at -O2, the
 * ReduceMean becomes QLinearGlobalAveragePool: one QuantizeLinear (x's) is left. */
static void test_split_and_mean(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int64_t xd[4] = {2, C_IN, HW, HW}, w1d[4] = {4, C_IN, 3, 3}, w2d[4] = {3, 2, 1, 1},
          w3d[4] = {5, 3, 1, 1}, one = 1, two = 2, s0 = 2, s1 = 4, ax = 1;
  float w1[4 * C_IN * 9], w2[6], w3[15];
  for (int i = 0; i < 4 * C_IN * 9; i++) w1[i] = tu_rand_f32(&rng, -0.5f, 0.5f);
  for (int i = 0; i < 6; i++) w2[i] = tu_rand_f32(&rng, -1, 1);
  for (int i = 0; i < 15; i++) w3[i] = tu_rand_f32(&rng, -1, 1);
  int x = tu_graph_input(g, "x", KL_F32, 4, xd);
  int h = tu_graph_value(g, "h"), sl = tu_graph_value(g, "sl"), h2 = tu_graph_value(g, "h2"),
      rm = tu_graph_value(g, "rm"), y = tu_graph_value(g, "y");
  int c1 = tu_graph_node(g, KL_OP_Conv, "conv1", 2,
                         (int[]){x, tu_graph_const(g, "w1", KL_F32, 4, w1d, w1)}, 1, &h);
  tu_node_ints(g, c1, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  tu_graph_node(g, KL_OP_Slice, "split", 4,
                (int[]){h, tu_graph_const(g, "s0", KL_I64, 1, &one, &s0),
                        tu_graph_const(g, "s1", KL_I64, 1, &one, &s1),
                        tu_graph_const(g, "ax", KL_I64, 1, &one, &ax)}, 1, &sl);
  tu_graph_node(g, KL_OP_Conv, "conv2", 2, (int[]){sl, tu_graph_const(g, "w2", KL_F32, 4, w2d, w2)},
                1, &h2);
  int64_t axes[2] = {2, 3};
  tu_graph_node(g, KL_OP_ReduceMean, "mean", 2,
                (int[]){h2, tu_graph_const(g, "axes", KL_I64, 1, &two, axes)}, 1, &rm);
  tu_graph_node(g, KL_OP_Conv, "conv3", 2, (int[]){rm, tu_graph_const(g, "w3", KL_F32, 4, w3d, w3)},
                1, &y);
  kl_graph_add_output(g, y, NULL);
  kl_err e = {0};
  if (kl_graph_infer(g, &e) != KILN_OK) fail_msg("infer: %s", e.msg);
  kl_quant_options o = {.per_channel = true, .reduce_range = true};
  kl_quantizer *q;
  assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
  assert_int_equal(calibrate(q, 3, &e), KILN_OK);
  assert_int_equal(kl_quantizer_compute(q, &e), KILN_OK);
  int nn, nv;
  const kl_quant_node *nodes = kl_quantizer_nodes(q, &nn);
  assert_true(node_named(nodes, nn, "split")->quantized);
  assert_true(node_named(nodes, nn, "mean")->quantized);
  const kl_quant_value *v = kl_quantizer_values(q, &nv);
  assert_float_equal(value_named(v, nv, "sl")->scale, value_named(v, nv, "h")->scale, 0);
  kl_graph *hq;
  assert_int_equal(kl_quantizer_graph(q, &hq, &e), KILN_OK);
  kiln_model *mq = tu_model_of(kl_graph_copy(hq), 2);
  assert_int_equal(count(mq->g, KL_OP_QuantizeLinear), 1);
  assert_int_equal(count(mq->g, KL_OP_KilnQLinearGlobalAveragePool), 1);
  for (int i = 0; i < mq->g->n_nodes; i++)
    if (mq->g->nodes[i].op == KL_OP_Slice)
      assert_int_equal(mq->g->values[mq->g->nodes[i].out[0]].type.dtype, KL_U8);
  kiln_model_free(mq);
  double rel = compare_outputs(g, hq, 2, NULL);
  print_message("split and mean: relative L2 difference %.4f\n", rel);
  assert_true(rel < 0.05);
  kl_quantizer_free(q);
  kl_graph_free(g);
}

static void test_errors(void **state) {
  (void)state;
  kl_graph *g = cnn_graph();
  kl_quant_options o = {0};
  kl_quantizer *q;
  kl_err e = {0};
  assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
  /* no batch yet */
  assert_int_equal(kl_quantizer_compute(q, &e), KILN_ERR_INVALID_ARGUMENT);
  tu_assert_contains_at(e.msg, "no calibration data", __FILE__, __LINE__);
  float *x = calloc(NX, sizeof(float));
  assert_non_null(x);
  kl_tensor t = {.dtype = KL_F32, .rank = 4, .dims = {2, C_IN, HW, HW}, .data = x};
  /* misnamed */
  e = (kl_err){0};
  assert_int_equal(kl_quantizer_run(q, 1, (const char *[]){"image"}, &t, &e),
                   KILN_ERR_INVALID_ARGUMENT);
  tu_assert_contains_at(e.msg, "model input 'x' not given", __FILE__, __LINE__);
  /* wrong shape: the session's message names the input */
  e = (kl_err){0};
  t.dims[1] = 2; /* fewer channels: the buffer holds them */
  assert_true(kl_quantizer_run(q, 1, (const char *[]){"x"}, &t, &e) != KILN_OK);
  tu_assert_contains_at(e.msg, "x", __FILE__, __LINE__);
  t.dims[1] = C_IN;
  /* NaN */
  x[17] = NAN;
  e = (kl_err){0};
  assert_int_equal(kl_quantizer_run(q, 1, (const char *[]){"x"}, &t, &e),
                   KILN_ERR_INVALID_ARGUMENT);
  tu_assert_contains_at(e.msg, "element 17 is nan", __FILE__, __LINE__);
  assert_int_equal(kl_quantizer_batches(q), 0);
  /* all zeros: scale 1, a graph all the same */
  x[17] = 0;
  assert_int_equal(kl_quantizer_run(q, 1, (const char *[]){"x"}, &t, &e), KILN_OK);
  kl_graph *h;
  assert_int_equal(kl_quantizer_graph(q, &h, &e), KILN_OK);
  kl_graph_free(h);
  kl_quantizer_free(q);
  free(x);
  /* a percentile out of range */
  o.method = KL_CALIB_PERCENTILE;
  o.percentile = 120;
  e = (kl_err){0};
  assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_ERR_INVALID_ARGUMENT);
  tu_assert_contains_at(e.msg, "percentile", __FILE__, __LINE__);
  /* dynamic: no Conv taken (nothing to quantize here), and no calibration */
  o = (kl_quant_options){.dynamic = true};
  e = (kl_err){0};
  assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_ERR_INVALID_ARGUMENT);
  tu_assert_contains_at(e.msg, "MatMul or Gemm", __FILE__, __LINE__);
  kl_graph_free(g);
}

/* x [m, 8] -> Gemm "fc" (W [n, 8] transB, C [n]) -> y, inferred */
static kl_graph *fc_graph(int64_t m, int64_t n, const float *w, const float *c) {
  kl_graph *g = tu_graph_new();
  int64_t xd[2] = {m, 8}, wd[2] = {n, 8};
  int x = tu_graph_input(g, "x", KL_F32, 2, xd);
  int cw = tu_graph_const(g, "w", KL_F32, 2, wd, w), cc = tu_graph_const(g, "c", KL_F32, 1, &n, c);
  int y = tu_graph_value(g, "y");
  int node = tu_graph_node(g, KL_OP_Gemm, "fc", 3, (int[]){x, cw, cc}, 1, &y);
  kl_node_set_int(g, node, "transB", 1, NULL);
  kl_graph_add_output(g, y, NULL);
  kl_err e = {0};
  if (kl_graph_infer(g, &e) != KILN_OK) fail_msg("infer: %s", e.msg);
  return g;
}

/* x [3, 8] -> Gemm "fc" (W [6, 8], transB, C [6]) -> y */
static kl_graph *gemm_graph(void) {
  float w[48], c[6];
  for (int i = 0; i < 48; i++) w[i] = tu_rand_f32(&rng, -1, 1) * (1 + i / 8);
  for (int i = 0; i < 6; i++) c[i] = tu_rand_f32(&rng, -1, 1);
  return fc_graph(3, 6, w, c);
}

/* x [4, 8] -> Gemm "fc" (W [3, 8] transB, C [3]) -> y, row 1 of W tiny (1e-8: a dead
 * channel after BatchNorm folding) under a bias of 5: its int32 bias at scale sx * sw
 * would be about 5e10 steps, past int32. The written model (run at -O0 and at -O2)
 * still adds 5 there: the channel's scale is raised until the bias fits (fit_bias);
 * the other rows keep their own scales per channel. */
static void test_bias_fits_int32(void **state) {
  (void)state;
  for (int per_channel = 0; per_channel < 2; per_channel++) {
    float w[24], c[3] = {0.25f, 5.0f, -0.5f}, x[32];
    for (int i = 0; i < 24; i++) w[i] = i / 8 == 1 ? 1e-8f * (float)(i % 8 - 3) : tu_rand_f32(&rng, -1, 1);
    for (int i = 0; i < 32; i++) x[i] = tu_rand_f32(&rng, -1, 1);
    kl_graph *g = fc_graph(4, 3, w, c);
    kl_err e = {0};
    kl_quant_options o = {.per_channel = per_channel};
    kl_quantizer *q;
    assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
    kl_tensor t = {.dtype = KL_F32, .rank = 2, .dims = {4, 8}, .data = x};
    assert_int_equal(kl_quantizer_run(q, 1, (const char *[]){"x"}, &t, &e), KILN_OK);
    assert_int_equal(kl_quantizer_compute(q, &e), KILN_OK);
    kl_graph *h;
    assert_int_equal(kl_quantizer_graph(q, &h, &e), KILN_OK);
    for (int level = 0; level <= 2; level += 2) {
      kiln_model *mf = tu_model_of(kl_graph_copy(g), 0), *mq = tu_model_of(kl_graph_copy(h), level);
      kiln_session *sf = tu_session(mf, false, 1), *sq = tu_session(mq, false, 1);
      float *in = x;
      int64_t nf, nq;
      float *want = tu_run_f32(sf, mf, &in, &nf), *got = tu_run_f32(sq, mq, &in, &nq);
      assert_int_equal(nf, 12);
      assert_int_equal(nq, 12);
      for (int r = 0; r < 4; r++) {
        if (fabs((double)got[r * 3 + 1] - want[r * 3 + 1]) > 1e-3)
          fail_msg("per_channel %d, -O%d: row %d's dead channel is %g, float32 %g", per_channel,
                   level, r, (double)got[r * 3 + 1], (double)want[r * 3 + 1]);
        for (int k = 0; k < 3; k += 2) /* the live channels within 8-bit error */
          if (fabs((double)got[r * 3 + k] - want[r * 3 + k]) > 0.1)
            fail_msg("per_channel %d, -O%d: output [%d, %d] is %g, float32 %g", per_channel,
                     level, r, k, (double)got[r * 3 + k], (double)want[r * 3 + k]);
      }
      free(want), free(got);
      kiln_session_free(sf), kiln_session_free(sq);
      kiln_model_free(mf), kiln_model_free(mq);
    }
    kl_graph_free(h);
    kl_quantizer_free(q);
    kl_graph_free(g);
  }
}

static void test_dynamic(void **state) {
  (void)state;
  kl_graph *g = gemm_graph();
  kl_quant_options o = {.dynamic = true, .per_channel = true, .reduce_range = true};
  kl_quantizer *q;
  kl_err e = {0};
  assert_int_equal(kl_quantizer_create(g, &o, &q, &e), KILN_OK);
  float x[24] = {0};
  kl_tensor t = {.dtype = KL_F32, .rank = 2, .dims = {3, 8}, .data = x};
  assert_int_equal(kl_quantizer_run(q, 1, (const char *[]){"x"}, &t, &e),
                   KILN_ERR_INVALID_ARGUMENT);
  tu_assert_contains_at(e.msg, "no calibration", __FILE__, __LINE__);
  e = (kl_err){0};
  kl_graph *h;
  assert_int_equal(kl_quantizer_graph(q, &h, &e), KILN_OK);
  assert_int_equal(count(h, KL_OP_Gemm), 0);
  assert_int_equal(count(h, KL_OP_DynamicQuantizeLinear), 1);
  assert_int_equal(count(h, KL_OP_MatMulInteger), 1);
  assert_int_equal(count(h, KL_OP_Cast), 1);
  assert_int_equal(count(h, KL_OP_Mul), 2);
  assert_int_equal(count(h, KL_OP_Add), 1);
  assert_string_equal(h->values[h->outputs[0]].name, "y");
  /* the weights: [K, N] = [8, 6] int8, one scale per column */
  for (int i = 0; i < h->n_nodes; i++)
    if (h->nodes[i].op == KL_OP_MatMulInteger) {
      const kl_value *w = &h->values[h->nodes[i].in[1]];
      assert_int_equal(w->type.dtype, KL_I8);
      assert_int_equal(w->type.dims[0].size, 8);
      assert_int_equal(w->type.dims[1].size, 6);
      assert_int_equal(h->values[h->nodes[i].in[3]].type.dims[0].size, 6);
    }
  int nv;
  const kl_quant_value *v = kl_quantizer_values(q, &nv);
  assert_int_equal(nv, 1);
  assert_true(v[0].weight && v[0].scale < v[0].scale_max && v[0].sqnr_db > 30);
  /* against the float Gemm on random x */
  kiln_model *mf = tu_model_of(kl_graph_copy(g), 0), *mq = tu_model_of(h, 2);
  for (int i = 0; i < 24; i++) x[i] = tu_rand_f32(&rng, -2, 2);
  kiln_session *sf = tu_session(mf, false, 1), *sq = tu_session(mq, false, 1);
  int64_t nf, nq;
  float *px = x, *want = tu_run_f32(sf, mf, &px, &nf), *got = tu_run_f32(sq, mq, &px, &nq);
  assert_int_equal(nf, 18);
  assert_int_equal(nq, 18);
  double big = 0, diff = 0;
  for (int i = 0; i < 18; i++) {
    big = fmax(big, fabs(want[i]));
    diff = fmax(diff, fabs((double)got[i] - want[i]));
  }
  print_message("dynamic: largest difference %.4f of the largest output\n", diff / big);
  assert_true(diff / big < 0.05);
  assert_true(diff > 0); /* it did quantize */
  free(want), free(got);
  kiln_session_free(sf), kiln_session_free(sq);
  kiln_model_free(mf), kiln_model_free(mq);
  kl_quantizer_free(q);
  kl_graph_free(g);
}

/* MatMulInteger(A [.., 5, 7], B [7, n], za, zb) -> Cast to float32 at -O0, on the fast
 * kernel and on the reference: the same int32 sums. zb_kind: 0 none, 1 one, 2 per
 * column. 5 rows: a block of 4 and one more; 30 (batched): 7 blocks and 2; n past 1024:
 * two column chunks. */
static void mmint_case(kl_dtype at, kl_dtype bt, int zb_kind, bool batched, int64_t n) {
  kl_graph *g = tu_graph_new();
  int64_t ad[4] = {2, 3, 5, 7}, bd[2] = {7, n};
  int ar = batched ? 4 : 2;
  const int64_t *adims = batched ? ad : ad + 2;
  uint8_t a[210], za = (uint8_t)(at == KL_U8 ? 131 : (uint8_t)(int8_t)-7);
  uint8_t *b = malloc((size_t)(7 * n)), *zb = malloc((size_t)n);
  assert_true(b && zb);
  for (int i = 0; i < 210; i++) a[i] = (uint8_t)tu_rand_f32(&rng, 0, 255.99f);
  for (int64_t i = 0; i < 7 * n; i++) b[i] = (uint8_t)tu_rand_f32(&rng, 0, 255.99f);
  for (int64_t i = 0; i < n; i++) zb[i] = (uint8_t)tu_rand_f32(&rng, 0, 255.99f);
  int ca = tu_graph_const(g, "a", at, ar, adims, a), cb = tu_graph_const(g, "b", bt, 2, bd, b);
  int cza = tu_graph_const(g, "za", at, 0, NULL, &za);
  int czb = zb_kind == 0 ? KL_ABSENT
                         : tu_graph_const(g, "zb", bt, zb_kind == 1 ? 0 : 1, &n, zb);
  int yi = tu_graph_value(g, "yi");
  tu_graph_node(g, KL_OP_MatMulInteger, "mmi", zb_kind ? 4 : 3, (int[]){ca, cb, cza, czb}, 1,
                &yi);
  int cast = tu_graph_output_node(g, KL_OP_Cast, 1, &yi, 1);
  kl_node_set_int(g, cast, "to", KL_F32, NULL);
  free(b), free(zb);
  kiln_model *m = tu_model_of(g, 0);
  kiln_session *sr = tu_session(m, true, 1), *sf = tu_session(m, false, 2);
  int64_t nr, nf;
  float *want = tu_run_f32(sr, m, NULL, &nr), *got = tu_run_f32(sf, m, NULL, &nf);
  assert_int_equal(nr, nf);
  assert_int_equal(nr, (batched ? 30 : 5) * n);
  assert_memory_equal(got, want, sizeof(float) * (size_t)nr);
  int node = m->g->nodes[0].op == KL_OP_MatMulInteger ? 0 : 1;
  assert_int_equal(m->g->nodes[node].op, KL_OP_MatMulInteger);
  assert_string_not_equal(kl_session_kernel_name(sf, node), "ref");
  free(want), free(got);
  kiln_session_free(sr), kiln_session_free(sf);
  kiln_model_free(m);
}

static void test_matmul_integer(void **state) {
  (void)state;
  for (int zb = 0; zb < 3; zb++) {
    mmint_case(KL_U8, KL_I8, zb, false, 9);
    mmint_case(KL_U8, KL_I8, zb, true, 9);
    mmint_case(KL_I8, KL_U8, zb, true, 9);
    mmint_case(KL_I8, KL_I8, zb, false, 9);
    mmint_case(KL_U8, KL_U8, zb, true, 9);
  }
  mmint_case(KL_U8, KL_I8, 2, false, 1100);
  mmint_case(KL_I8, KL_U8, 1, true, 1031);
}

/* The dynamic form's kernels against the reference, bit for bit: x -> DynamicQuantizeLinear
 * -> MatMulInteger (constant 7-bit weights, K = 3100: sums past 2^24; K = 1023: a last
 * group of 3 codes) -> Cast -> Mul by the scale; every output compared as its bytes (the
 * int32 sums too), at 1 and 2 threads, over 111 rows (not a multiple of the product's 4)
 * and 77 columns (of its 16). Where oneDNN runs (every level but generic) MatMulInteger
 * must be oneDNN's int8 matmul with VNNI or AMX, else kiln's product (B packed once), and
 * DynamicQuantizeLinear and Cast kiln's kernels, not the reference. */
static void dynamic_case(int64_t k) {
  kl_graph *g = tu_graph_new();
  int64_t xd[3] = {3, 37, k}, wd[2] = {k, 77};
  int8_t *w = malloc((size_t)(k * 77));
  assert_non_null(w);
  for (int i = 0; i < k * 77; i++) w[i] = (int8_t)lrintf(tu_rand_f32(&rng, -64, 64));
  int x = tu_graph_input(g, "x", KL_F32, 3, xd);
  int q[3] = {tu_graph_value(g, "xq"), tu_graph_value(g, "xs"), tu_graph_value(g, "xz")};
  tu_graph_node(g, KL_OP_DynamicQuantizeLinear, "dql", 1, &x, 3, q);
  int cw = tu_graph_const(g, "w", KL_I8, 2, wd, w);
  free(w);
  int acc = tu_graph_value(g, "acc");
  tu_graph_node(g, KL_OP_MatMulInteger, "mmi", 3, (int[]){q[0], cw, q[2]}, 1, &acc);
  int cast = tu_graph_op(g, KL_OP_Cast, 1, &acc);
  kl_node_set_int(g, g->values[cast].producer, "to", KL_F32, NULL);
  tu_graph_output_node(g, KL_OP_Mul, 2, (int[]){cast, q[1]}, 1);
  for (int k = 0; k < 3; k++) assert_int_equal(kl_graph_add_output(g, k == 0 ? acc : q[k], NULL), KILN_OK);
  kiln_model *m = tu_model_of(g, 0);
  int64_t n = 3 * 37 * k;
  float *xv = malloc(sizeof(float) * (size_t)n);
  assert_non_null(xv);
  for (int64_t i = 0; i < n; i++) xv[i] = tu_rand_f32(&rng, -2.5f, 7.0f);
  for (int threads = 1; threads <= 2; threads++) {
    kiln_session *sr = tu_session(m, true, 1), *sf = tu_session(m, false, threads);
    for (int r = 0; r < 2; r++) {
      kiln_session *sess = r ? sf : sr;
      assert_int_equal(kiln_session_set_input(sess, "x", KILN_DTYPE_FLOAT32, 3, xd, xv,
                                              sizeof(float) * (size_t)n), KILN_OK);
      if (kiln_session_run(sess) != KILN_OK) fail_msg("run: %s", kiln_session_error(sess));
    }
    for (int k = 0; k < kiln_model_output_count(m); k++) {
      const kl_tensor *a = kl_session_output_value(sr, k), *b = kl_session_output_value(sf, k);
      assert_int_equal(a->dtype, b->dtype);
      assert_int_equal(kl_tensor_nbytes(a), kl_tensor_nbytes(b));
      if (memcmp(a->data, b->data, kl_tensor_nbytes(a)) != 0)
        fail_msg("output %d differs from the reference's (%d threads)", k, threads);
    }
    for (int i = 0; i < m->g->n_nodes; i++) {
      const char *k = kl_session_kernel_name(sf, i);
      kl_op op = m->g->nodes[i].op;
#if KL_HAVE_DNNL
      /* oneDNN's int8 matmul (B packed once) with VNNI or AMX, kiln's product below */
      const char *want = kl_dnnl_mmint_primitive()           ? "dnnl_matmul_u8s8s32"
                         : kl_isa_level() == KL_ISA_AVX2 ? "kiln_qgemm:avx2"
                                                            : "kiln_qgemm:avx512";
      if (kl_isa_level() != KL_ISA_GENERIC && op == KL_OP_MatMulInteger && strcmp(k, want) != 0)
        fail_msg("MatMulInteger ran on '%s', not '%s'", k, want);
#endif
      if ((op == KL_OP_DynamicQuantizeLinear || op == KL_OP_Cast) && strcmp(k, "ref") == 0)
        fail_msg("%s ran on the reference kernel", kl_op_name(op));
    }
    kiln_session_free(sr), kiln_session_free(sf);
  }
  free(xv);
  kiln_model_free(m);
}

/* MatMulInteger of K = 0 (A [5, 0], constant B [0, 7]): sums over nothing, zeros, on the
 * fast kernels as on the reference (kiln's int8 product divided by K before it looked). */
static void test_matmul_integer_empty_k(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int64_t ad[2] = {5, 0}, bd[2] = {0, 7};
  uint8_t za = 3, unused = 0;
  int a = tu_graph_input(g, "a", KL_U8, 2, ad);
  int b = tu_graph_const(g, "b", KL_I8, 2, bd, &unused);
  int cza = tu_graph_const(g, "za", KL_U8, 0, NULL, &za);
  int y = tu_graph_value(g, "y");
  tu_graph_node(g, KL_OP_MatMulInteger, "mmi", 3, (int[]){a, b, cza}, 1, &y);
  assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
  kiln_model *m = tu_model_of(g, 0);
  for (int fast = 0; fast < 2; fast++) {
    kiln_session *s = tu_session(m, !fast, 1);
    assert_int_equal(kiln_session_set_input(s, "a", KILN_DTYPE_UINT8, 2, ad, &unused, 0), KILN_OK);
    if (kiln_session_run(s) != KILN_OK) fail_msg("run: %s", kiln_session_error(s));
    const kl_tensor *t = kl_session_output_value(s, 0);
    assert_int_equal(kl_tensor_numel(t), 35);
    for (int i = 0; i < 35; i++) assert_int_equal(((const int32_t *)t->data)[i], 0);
    kiln_session_free(s);
  }
  kiln_model_free(m);
}

/* Cast of int64 and int32 to float32 and to bool (token ids, attention masks: BERT-base's
 * mask is int64 to bool) on kiln's kernel at every level, bit for bit the reference's:
 * (float)v for values past 2^24 and 2^53 (rounded once, to nearest even), the ends of
 * the range, zeros for bool; 40003 of them (past a task's chunk), at 1 and 2 threads. */
static void cast_case(kl_dtype from, kl_dtype to);

static void test_cast_int64(void **state) {
  (void)state;
  cast_case(KL_I64, KL_F32);
  cast_case(KL_I64, KL_BOOL);
  cast_case(KL_I32, KL_F32);
  cast_case(KL_I32, KL_BOOL);
}

static void cast_case(kl_dtype from, kl_dtype to) {
  enum { N = 40003 };
  int64_t *v = malloc(sizeof(int64_t) * N), d[1] = {N};
  assert_non_null(v);
  static const int64_t edge[] = {0, 1, -1, 16777217, -16777219, 9007199254740993LL,
                                 INT64_MAX, INT64_MIN, INT64_MAX - 1, (int64_t)1 << 62};
  for (int i = 0; i < N; i++)
    v[i] = i < 10 ? edge[i] : (int64_t)tu_rand_f32(&rng, -1e6f, 1e6f) * ((int64_t)1 << (i % 40));
  for (int i = 10; i < N; i += 7) v[i] = 0;
  int32_t *v32 = malloc(sizeof(int32_t) * N); /* the same values' low 32 bits */
  assert_non_null(v32);
  for (int i = 0; i < N; i++) v32[i] = (int32_t)(uint32_t)(uint64_t)v[i];
  const void *xv = from == KL_I32 ? (const void *)v32 : (const void *)v;
  size_t esize = from == KL_I32 ? 4 : 8, ysize = to == KL_BOOL ? 1 : 4;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", from, 1, d);
  int y = tu_graph_output_node(g, KL_OP_Cast, 1, &x, 1);
  kl_node_set_int(g, y, "to", to, NULL);
  kiln_model *m = tu_model_of(g, 0);
  for (int threads = 1; threads <= 2; threads++) {
    kiln_session *sr = tu_session(m, true, 1), *sf = tu_session(m, false, threads);
    for (int r = 0; r < 2; r++) {
      kiln_session *s = r ? sf : sr;
      assert_int_equal(kiln_session_set_input(s, "x", from == KL_I32 ? KILN_DTYPE_INT32
                                                                       : KILN_DTYPE_INT64,
                                              1, d, xv, esize * N), KILN_OK);
      if (kiln_session_run(s) != KILN_OK) fail_msg("run: %s", kiln_session_error(s));
    }
    const kl_tensor *a = kl_session_output_value(sr, 0), *b = kl_session_output_value(sf, 0);
    if (memcmp(a->data, b->data, ysize * N) != 0)
      fail_msg("%s -> %s differs from the reference's (%d threads)", kl_dtype_name(from),
               kl_dtype_name(to), threads);
    assert_string_not_equal(kl_session_kernel_name(sf, 0), "ref");
    kiln_session_free(sr), kiln_session_free(sf);
  }
  free(v), free(v32);
  kiln_model_free(m);
}

static void test_dynamic_kernels(void **state) {
  (void)state;
  dynamic_case(3100);
  dynamic_case(1023);
}

/* Each level's quantize_u8 and quantize_s8 (QuantizeLinear's and DynamicQuantizeLinear's
 * codes; AVX2's 32 floats a step) against the reference's operations written out, byte
 * for byte: lengths around 32, unaligned, values that round to both ends and past them,
 * exact halves (rounded to even), NaN (the zero point), infinities, subnormals. */
static void test_quantize_levels(void **state) {
  (void)state;
  static const size_t lens[] = {0, 1, 31, 32, 33, 64, 95, 1000};
  static const float scales[] = {0.05f, 1.0f, 3e-39f, 1e30f};
  float *x = malloc(sizeof(float) * 1001);
  uint8_t *y = malloc(1002);
  assert_true(x && y);
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
    for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++)
      for (int s8 = 0; s8 < 2; s8++) {
        size_t n = lens[li];
        float sc = scales[si], lo = s8 ? -128.0f : 0.0f, hi = s8 ? 127.0f : 255.0f;
        int32_t zp = (int32_t)tu_rand_f32(&rng, lo, hi + 0.99f);
        for (size_t i = 0; i < n; i++) {
          switch (i % 9) {
          case 0: x[i + 1] = NAN; break;
          case 1: x[i + 1] = i % 2 ? INFINITY : -INFINITY; break;
          case 2: x[i + 1] = ((float)(int)tu_rand_f32(&rng, -300, 300) + 0.5f) * sc; break;
          case 3: x[i + 1] = 1e-40f; break;
          default: x[i + 1] = tu_rand_f32(&rng, -300, 300) * sc;
          }
        }
        for (int level = KL_ISA_GENERIC; level <= (int)kl_isa_level(); level++) {
          const kl_quant_fns *f = kl_cpu_isa_fns((kl_isa)level)->quant;
          memset(y, 0xa5, n + 2);
          if (s8) f->quantize_s8(x + 1, sc, zp, (int8_t *)y + 1, n);
          else f->quantize_u8(x + 1, sc, zp, y + 1, n);
          for (size_t i = 0; i < n; i++) {
            float q = x[i + 1] / sc;
            float qlo = lo - (float)zp, qhi = hi - (float)zp;
            q = q != q ? 0.0f : q < qlo ? qlo : q > qhi ? qhi : q;
            int32_t want = (int32_t)rintf(q) + zp, got = s8 ? (int8_t)y[i + 1] : y[i + 1];
            if (got != want)
              fail_msg("level %d, %s, n %zu, scale %g, zp %d: y[%zu] is %d for %g, expected %d",
                       level, s8 ? "s8" : "u8", n, (double)sc, zp, i, got, (double)x[i + 1],
                       want);
          }
          assert_int_equal(y[0], 0xa5);
          assert_int_equal(y[n + 1], 0xa5);
        }
      }
  free(x), free(y);
}

/* Each level's range (DynamicQuantizeLinear's min(0, x) and max(0, x); the AVX2 one 32
 * floats a step) against a plain loop at awkward lengths, all-positive and
 * all-negative data (lo or hi stays 0), and a NaN or an infinity at the first, a middle
 * and the last place: false. */
static void test_range(void **state) {
  (void)state;
  enum { LEN = 1000 };
  float *x = malloc(sizeof(float) * LEN);
  assert_non_null(x);
  static const size_t lens[] = {0, 1, 7, 31, 32, 33, 64, 100, 1000};
  for (int level = KL_ISA_GENERIC; level <= (int)kl_isa_level(); level++) {
    const kl_quant_fns *f = kl_cpu_isa_fns((kl_isa)level)->quant;
    for (int sign = -1; sign <= 1; sign++)
      for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        float wl = 0.0f, wh = 0.0f, lo = 1, hi = -1;
        for (size_t i = 0; i < n; i++) {
          float v = tu_rand_f32(&rng, sign > 0 ? 0.5f : -3.0f, sign < 0 ? -0.5f : 3.0f);
          x[i] = v;
          wl = v < wl ? v : wl;
          wh = v > wh ? v : wh;
        }
        if (!f->range(x, n, &lo, &hi) || lo != wl || hi != wh)
          fail_msg("level %d, %zu floats: range [%g, %g], expected [%g, %g]", level, n,
                   (double)lo, (double)hi, (double)wl, (double)wh);
        for (int bad = 0; n && bad < 6; bad++) {
          size_t at = bad % 3 == 0 ? 0 : bad % 3 == 1 ? n / 2 : n - 1;
          float keep = x[at];
          x[at] = bad < 3 ? NAN : (bad == 4 ? -INFINITY : INFINITY);
          if (f->range(x, n, &lo, &hi))
            fail_msg("level %d, %zu floats: %g at %zu not found", level, n, (double)x[at], at);
          x[at] = keep;
        }
      }
  }
  free(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_activation_params),
      cmocka_unit_test(test_weights),
      cmocka_unit_test(test_minmax_and_widening),
      cmocka_unit_test(test_percentile),
      cmocka_unit_test(test_entropy),
      cmocka_unit_test(test_static_graph),
      cmocka_unit_test(test_depthwise_scales),
      cmocka_unit_test(test_symmetric_keeps_relu),
      cmocka_unit_test(test_clip),
      cmocka_unit_test(test_exclude),
      cmocka_unit_test(test_non_finite_weights),
      cmocka_unit_test(test_ops_between),
      cmocka_unit_test(test_ops_between_symbolic_batch),
      cmocka_unit_test(test_split_and_mean),
      cmocka_unit_test(test_bias_correction),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_bias_fits_int32),
      cmocka_unit_test(test_dynamic),
      cmocka_unit_test(test_matmul_integer),
      cmocka_unit_test(test_dynamic_kernels),
      cmocka_unit_test(test_matmul_integer_empty_k),
      cmocka_unit_test(test_cast_int64),
      cmocka_unit_test(test_range),
      cmocka_unit_test(test_quantize_levels),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
