/* kiln's depthwise int8 convolution (isa/run_qconv.c, the level's qdw primitive), which
 * runs a depthwise QLinearConv between two values held channels-last at level avx2:
 *
 * - test_primitive: qdw at each level this CPU has against a plain loop of its formula
 *   (isa_fns.h), exact, at channel counts around the 16-channel blocks (1, 7, 16, 17,
 *   33, 40, 101), tap counts odd and even (1, 2, 9, 25), taps in the padding, pixels
 *   one by one and stepped, uint8 and int8 Y saturating at both ends, weights of the
 *   full int8 range;
 * - test_sessions: x -> QuantizeLinear -> 1x1 QLinearConv -> depthwise QLinearConv ->
 *   1x1 QLinearConv -> DequantizeLinear (so the depthwise one is held channels-last on
 *   both sides), on the fast kernels against the reference ones, at odd sizes and
 *   channel counts, 3x3 and 5x5, strides 1 and 2, a dilation, asymmetric pads, int8 Y,
 *   with and without a bias, per-tensor and per-channel weights: at most one step (the
 *   reference rounds acc * scale in double, kiln in float32 as onnxruntime) and in at
 *   most 1 in 200 outputs; at level avx2 with oneDNN the depthwise node must have run
 *   kiln's kernel (implementation kiln_qdw). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/run.h"
#include "kl_config.h"
#include "runtime/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng = 31415;

static int rand_int(int lo, int hi) { return lo + (int)(tu_rand_f32(&rng, 0, 1) * (float)(hi - lo + 1) * 0.99999f); }

/* y of one pixel by the formula, channel by channel, weights w[t][i] unpacked. */
static void formula(const kl_qdw *d, const uint8_t *const *taps, const int8_t *w,
                    const int32_t *bias, const float *scale, uint8_t *y) {
  for (size_t i = 0; i < d->c; i++) {
    int32_t acc = bias[i];
    for (size_t t = 0; t < d->k; t++) acc += (int32_t)taps[t][i] * w[t * d->c + i];
    float q = (float)acc * scale[i];
    float lo = (float)(d->lo - d->zy), hi = (float)(d->hi - d->zy);
    q = q < lo ? lo : q > hi ? hi : q;
    y[i] = (uint8_t)((int32_t)rintf(q) + d->zy);
  }
}

static void test_primitive(void **state) {
  (void)state;
  static const size_t chans[] = {1, 7, 16, 17, 33, 40, 101};
  static const size_t ks[] = {1, 2, 9, 25};
  enum { PIX = 5, ROWS = 40, STEP = 2 }; /* pixel p's taps STEP rows after pixel 0's */
  for (size_t ci = 0; ci < sizeof chans / sizeof chans[0]; ci++)
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
      for (int s8 = 0; s8 < 2; s8++) {
        size_t c = chans[ci], k = ks[ki], c16 = (c + 15) / 16 * 16, pairs = (k + 1) / 2;
        uint8_t *x = malloc(ROWS * c), *pad = malloc(STEP * PIX * c), *want = malloc(PIX * c),
                *got = malloc(PIX * c);
        int8_t *w = malloc(k * c);
        int16_t *w16 = calloc(pairs * c16 * 2, sizeof *w16);
        int32_t *bias = malloc(c * sizeof *bias), *bias16 = calloc(c16, sizeof *bias16);
        float *scale = malloc(c * sizeof *scale), *scale16 = calloc(c16, sizeof *scale16);
        const uint8_t **taps = malloc(k * sizeof *taps), **one = malloc(k * sizeof *one);
        assert_true(x && pad && want && got && w && w16 && bias && bias16 && scale && scale16 &&
                    taps && one);
        for (size_t i = 0; i < ROWS * c; i++) x[i] = (uint8_t)rand_int(0, 255);
        memset(pad, 77, STEP * PIX * c);
        for (size_t i = 0; i < k * c; i++) w[i] = (int8_t)rand_int(-128, 127);
        for (size_t i = 0; i < c; i++) {
          size_t s = i / 16 * 16 + KL_QDW_SLOT(i % 16);
          bias[i] = rand_int(-20000, 20000);
          scale[i] = tu_rand_f32(&rng, 0.0005f, 0.01f);
          bias16[s] = bias[i], scale16[s] = scale[i];
          for (size_t t = 0; t < k; t++) w16[((t / 2) * c16 + s) * 2 + t % 2] = w[t * c + i];
        }
        for (size_t t = 0; t < k; t++) { /* every 5th tap in the padding */
          size_t r = (size_t)rand_int(0, ROWS - STEP * PIX);
          taps[t] = t % 5 == 3 ? pad : x + r * c;
        }
        int zy = s8 ? rand_int(-20, 20) : rand_int(100, 150);
        kl_qdw d = {c, c16, k, w16, bias16, scale16, zy, s8 ? -128 : 0, s8 ? 127 : 255};
        for (size_t p = 0; p < PIX; p++) {
          for (size_t t = 0; t < k; t++) one[t] = taps[t] + p * STEP * c;
          formula(&d, one, w, bias, scale, want + p * c);
        }
        for (int level = KL_ISA_GENERIC; level <= (int)kl_isa_level(); level++)
          for (int stepped = 0; stepped < 2; stepped++) {
            const kl_quant_fns *f = kl_cpu_isa_fns((kl_isa)level)->quant;
            memset(got, 0xa5, PIX * c);
            if (stepped) f->qdw(&d, taps, STEP * c, PIX, got, c);
            for (size_t p = 0; !stepped && p < PIX; p++) {
              for (size_t t = 0; t < k; t++) one[t] = taps[t] + p * STEP * c;
              f->qdw(&d, one, 0, 1, got + p * c, c);
            }
            for (size_t i = 0; i < PIX * c; i++)
              if (got[i] != want[i])
                fail_msg("level %d, %zu channels, %zu taps, %s, %s: pixel %zu channel %zu is "
                         "%d, expected %d", level, c, k, s8 ? "int8" : "uint8",
                         stepped ? "stepped" : "one by one", i / c, i % c,
                         s8 ? (int)(int8_t)got[i] : got[i], s8 ? (int)(int8_t)want[i] : want[i]);
          }
        free(x), free(pad), free(want), free(got), free(w), free(w16), free(bias);
        free(bias16), free(scale), free(scale16), free(taps), free(one);
      }
}

typedef struct dw_case {
  const char *what;
  int64_t n, c, h, w, k, stride, dilation, pads[4];
  kl_dtype yq; /* the depthwise node's Y (its X is uint8) */
  bool bias, per_channel;
} dw_case;

static const dw_case cases[] = {
    {"3x3 pad 1, 19 channels", 1, 19, 11, 13, 3, 1, 1, {1, 1, 1, 1}, KL_U8, true, true},
    {"3x3 stride 2, 96 channels", 1, 96, 14, 15, 3, 2, 1, {1, 1, 1, 1}, KL_U8, true, true},
    {"5x5 pad 2, 40 channels, 2 images", 2, 40, 9, 7, 5, 1, 1, {2, 2, 2, 2}, KL_U8, false, true},
    {"5x5 stride 2, 33 channels, int8 Y", 1, 33, 12, 11, 5, 2, 1, {2, 2, 2, 2}, KL_I8, true, false},
    {"3x3 dilation 2, asymmetric pads, 16 channels", 1, 16, 10, 9, 3, 1, 2, {0, 2, 1, 0}, KL_U8, true, true},
    {"3x3 no pad, 7 channels", 1, 7, 6, 8, 3, 1, 1, {0, 0, 0, 0}, KL_U8, true, true},
};

static int const_f32(kl_graph *g, float v) { return tu_graph_const(g, NULL, KL_F32, 0, NULL, &v); }

static int const_zp(kl_graph *g, kl_dtype t, int z) {
  uint8_t u = (uint8_t)z;
  int8_t s = (int8_t)z;
  return tu_graph_const(g, NULL, t, 0, NULL, t == KL_U8 ? (void *)&u : (void *)&s);
}

#define SY 0.05f

/* A QLinearConv (X's dtype xq, zero point zx; Y's yq, zy) of m channels in, c out,
 * kernel k x k, depthwise (group c) when dw; 7-bit weights. */
static int qconv(kl_graph *g, const dw_case *dc, int x, kl_dtype xq, int zx, kl_dtype yq,
                 int zy, int64_t m, int64_t c, bool dw) {
  int64_t k = dw ? dc->k : 1, wd[4] = {c, dw ? 1 : m, k, k}, wn = wd[0] * wd[1] * k * k;
  bool per_channel = !dw || dc->per_channel;
  int64_t nsc = per_channel ? c : 1;
  int8_t *w = malloc((size_t)wn), *wz = calloc((size_t)c, 1);
  float *ws = malloc(sizeof(float) * (size_t)c);
  int32_t *b = malloc(sizeof(int32_t) * (size_t)c);
  assert_true(w && wz && ws && b);
  for (int64_t i = 0; i < wn; i++) w[i] = (int8_t)rand_int(-64, 64);
  for (int64_t i = 0; i < c; i++) {
    ws[i] = tu_rand_f32(&rng, 0.0005f, 0.004f);
    b[i] = rand_int(-3000, 3000);
  }
  bool bias = !dw || dc->bias;
  int in[9] = {x, const_f32(g, SY), const_zp(g, xq, zx),
               tu_graph_const(g, NULL, KL_I8, 4, wd, w),
               tu_graph_const(g, NULL, KL_F32, 1, &nsc, ws), tu_graph_const(g, NULL, KL_I8, 1, &nsc, wz),
               const_f32(g, SY), const_zp(g, yq, zy),
               bias ? tu_graph_const(g, NULL, KL_I32, 1, &c, b) : KL_ABSENT};
  int y = tu_graph_op(g, KL_OP_QLinearConv, bias ? 9 : 8, in);
  int node = g->values[y].producer;
  if (dw) {
    int64_t st[2] = {dc->stride, dc->stride}, dl[2] = {dc->dilation, dc->dilation};
    tu_node_ints(g, node, "pads", 4, dc->pads);
    tu_node_ints(g, node, "strides", 2, st);
    tu_node_ints(g, node, "dilations", 2, dl);
    assert_int_equal(kl_node_set_int(g, node, "group", c, NULL), KILN_OK);
  }
  free(w), free(wz), free(ws), free(b);
  return y;
}

static kl_graph *dw_graph(const dw_case *dc) {
  kl_graph *g = tu_graph_new();
  int64_t xd[4] = {dc->n, 5, dc->h, dc->w};
  int x = tu_graph_input(g, "x", KL_F32, 4, xd);
  int y = TU_OP(g, QuantizeLinear, x, const_f32(g, SY), const_zp(g, KL_U8, 128));
  y = qconv(g, dc, y, KL_U8, 128, KL_U8, 120, 5, dc->c, false);
  int zy = dc->yq == KL_U8 ? 130 : -5;
  y = qconv(g, dc, y, KL_U8, 120, dc->yq, zy, dc->c, dc->c, true);
  y = qconv(g, dc, y, dc->yq, zy, KL_U8, 128, dc->c, 6, false);
  tu_graph_output_node(g, KL_OP_DequantizeLinear, 3,
                       (int[]){y, const_f32(g, SY), const_zp(g, KL_U8, 128)}, 1);
  return g;
}

static void test_sessions(void **state) {
  (void)state;
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const dw_case *dc = &cases[ci];
    kiln_model *m = tu_model_of(dw_graph(dc), 0);
    int64_t n = dc->n * 5 * dc->h * dc->w, n_want, n_got;
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = tu_rand_f32(&rng, -6, 6);
    kiln_session *ref = tu_session(m, true, 0), *fast = tu_session(m, false, 0);
    float *want = tu_run_f32(ref, m, &x, &n_want);
    for (int r = 0; r < 2; r++) { /* the second run from the plan kept */
      float *got = tu_run_f32(fast, m, &x, &n_got);
      assert_int_equal(n_got, n_want);
      int64_t off = 0;
      for (int64_t k = 0; k < n_want; k++) {
        double d = fabs((double)got[k] - want[k]);
        if (d > SY * 1.001)
          fail_msg("%s: output %lld is %g, the reference %g", dc->what, (long long)k,
                   (double)got[k], (double)want[k]);
        off += d > 0;
      }
      if (off * 200 > n_want)
        fail_msg("%s: %lld of %lld outputs one step off", dc->what, (long long)off,
                 (long long)n_want);
      free(got);
    }
    const char *impl = kl_session_kernel_impl(fast, 2); /* Q, conv, the depthwise one */
    if (KL_HAVE_DNNL && kl_isa_level() == KL_ISA_AVX2 &&
        strcmp(kl_session_kernel_name(fast, 1), "dnnl_qconv") == 0 &&
        (!impl || strncmp(impl, "kiln_qdw", 8) != 0))
      fail_msg("%s: the depthwise node ran on %s, expected kiln_qdw", dc->what,
               impl ? impl : "(none)");
    free(want), free(x);
    kiln_session_free(ref), kiln_session_free(fast);
    kiln_model_free(m);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_primitive),
      cmocka_unit_test(test_sessions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
