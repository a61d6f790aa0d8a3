/* 8-bit activations held channels-last through kiln's own kernels (backend.c's layouts,
 * kl_cpu_isa_layout): between oneDNN's int8 convolutions, QLinearLookup and QLinearAdd
 * of equal shapes run on the channels-last bytes as they are, QLinearGlobalAveragePool
 * reads them ([N, S, C] summed per channel: the level's sum_columns) and QLinearMul of
 * a squeeze-and-excitation scale ([N, C, 1, 1]) multiplies each pixel's channels; where
 * one tensor of an elementwise node must stay plain (a graph output), its other tensors
 * do too. Each graph
 *
 *   x -> QuantizeLinear -> QLinearConv -> QLinearLookup -+-> DequantizeLinear (output 1)
 *                                                        +-> QLinearConv (depthwise)
 *     -> QLinearLookup = X -> QLinearGlobalAveragePool -> QLinearConv 1x1 -> Lookup = s
 *     QLinearMul(X, s) -> QLinearAdd(., X) -> QLinearConv 1x1 -> DequantizeLinear
 *
 * runs on the fast kernels and on the reference ones, on random (non-zero) data at odd
 * channel counts and sizes, uint8 and int8; the kiln nodes' integer results are exact and
 * oneDNN's convolutions may differ from the reference by one step where acc * scale lands
 * on a half step (test_dnnl_qconv), which lookup tables of slope at most 1 and the small
 * weights keep within one step of the outputs: at most one step, and in at most 1 in 100
 * outputs (0 here). The images' planes have different means, so that a scale read from
 * the wrong image shows. Where oneDNN runs the convolutions, the pooling and the Mul must have run
 * their channels-last kernels. test_sum_columns compares sum_columns at each level this
 * CPU has against a plain loop.
 *
 * test_pool_concat: SqueezeNet's fire modules as quantize_static leaves them,
 *
 *   x -> Q -> QLinearConv 3x3 -> MaxPool 3x3 s2 (ceil_mode, pads) -+-> QLinearConv 1x1 -.
 *                                                                  +-> QLinearConv 3x3   |
 *        -> Lookup (requantize) --------------------------------------> Concat (axis 1) <-'
 *        -> MaxPool 2x2 (dilation 2) -> QLinearConv 1x1 -> DequantizeLinear
 *
 * where the MaxPools and the Concat run on channels-last codes (the level's max_codes;
 * kl_run_concat_cl) between oneDNN's convolutions, and again with the first MaxPool's
 * output also a graph output (through a DequantizeLinear, which reads plain codes):
 * then that MaxPool runs plain and the rest as before. test_max_codes and
 * test_lookup_codes compare max_codes and lookup at each level against plain loops. */
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

static uint32_t rng = 1618;

typedef struct layout_case {
  int64_t n, c0, c, h, w; /* x [n, c0, h, w]; c channels after the first convolution */
  kl_dtype q;
  int z; /* the zero point of every activation */
} layout_case;

static const layout_case cases[] = {
    {1, 3, 19, 11, 13, KL_U8, 117},
    {2, 5, 40, 9, 7, KL_U8, 128},
    {2, 4, 33, 15, 17, KL_I8, -7},
    {1, 3, 96, 6, 5, KL_U8, 30},
    /* one image of 480 and 399 pixels: at 2 threads the pooling sums parts of the pixels
     * (run_quant.c gap_parts) */
    {1, 3, 70, 24, 20, KL_U8, 60},
    {1, 4, 45, 19, 21, KL_I8, 5},
};

#define SY 0.05f /* every activation's scale */

static int const_f32(kl_graph *g, float v) { return tu_graph_const(g, NULL, KL_F32, 0, NULL, &v); }

static int const_zp(kl_graph *g, kl_dtype t, int z) {
  uint8_t u = (uint8_t)z;
  int8_t s = (int8_t)z;
  return tu_graph_const(g, NULL, t, 0, NULL, t == KL_U8 ? (void *)&u : (void *)&s);
}

/* A QLinearConv of X (m channels in) to c channels, kernel k x k with pad k / 2,
 * depthwise when dw; weights within [-8, 8], per-channel scales, a bias. */
static int qconv(kl_graph *g, const layout_case *lc, int x, int64_t m, int64_t c, int64_t k,
                 bool dw) {
  int64_t wd[4] = {c, dw ? 1 : m, k, k}, wn = wd[0] * wd[1] * k * k;
  int8_t *w = malloc((size_t)wn), *wz = calloc((size_t)c, 1);
  float *ws = malloc(sizeof(float) * (size_t)c);
  int32_t *b = malloc(sizeof(int32_t) * (size_t)c);
  assert_true(w && wz && ws && b);
  for (int64_t i = 0; i < wn; i++) w[i] = (int8_t)lrintf(tu_rand_f32(&rng, -8, 8));
  for (int64_t i = 0; i < c; i++) {
    ws[i] = tu_rand_f32(&rng, 0.01f, 0.05f);
    b[i] = (int32_t)lrintf(tu_rand_f32(&rng, -300, 300));
  }
  int in[9] = {x, const_f32(g, SY), const_zp(g, lc->q, lc->z),
               tu_graph_const(g, NULL, KL_I8, 4, wd, w),
               tu_graph_const(g, NULL, KL_F32, 1, &c, ws), tu_graph_const(g, NULL, KL_I8, 1, &c, wz),
               const_f32(g, SY), const_zp(g, lc->q, lc->z), tu_graph_const(g, NULL, KL_I32, 1, &c, b)};
  int y = tu_graph_op(g, KL_OP_QLinearConv, 9, in);
  int node = g->values[y].producer;
  int64_t p = k / 2, pads[4] = {p, p, p, p};
  tu_node_ints(g, node, "pads", 4, pads);
  if (dw) assert_int_equal(kl_node_set_int(g, node, "group", c, NULL), KILN_OK);
  free(w), free(wz), free(ws), free(b);
  return y;
}

/* A table of slope 1/2 or 1 around a random offset (saturating at the code range). */
static int lookup(kl_graph *g, const layout_case *lc, int x) {
  uint8_t table[256];
  int lo = lc->q == KL_U8 ? 0 : -128, shift = (int)lrintf(tu_rand_f32(&rng, -40, 40));
  bool half = tu_rand_f32(&rng, 0, 1) < 0.5f;
  for (int code = 0; code < 256; code++) {
    int v = lo + code, y = (half ? v / 2 : v) + shift;
    y = y < lo ? lo : y > lo + 255 ? lo + 255 : y;
    table[code] = (uint8_t)y;
  }
  int64_t n = 256;
  return TU_OP(g, KilnQLinearLookup, x, tu_graph_const(g, NULL, lc->q, 1, &n, table));
}

/* QLinearAdd or QLinearMul of a and b, all scales SY (Mul: b's 0.01, so that the
 * product stays in range). */
static int qbin(kl_graph *g, const layout_case *lc, kl_op op, int a, int b) {
  int z = const_zp(g, lc->q, lc->z);
  int in[8] = {a, const_f32(g, SY), z, b, const_f32(g, op == KL_OP_KilnQLinearMul ? 0.01f : SY),
               z, const_f32(g, SY), z};
  return tu_graph_op(g, op, 8, in);
}

/* The graph's input x [n, c0, h, w] quantized (scale *sy, zero point *zy, constants of
 * g that the graph's other (de)quantizations share). */
static int quantized_input(kl_graph *g, const layout_case *lc, int *sy, int *zy) {
  int64_t xd[4] = {lc->n, lc->c0, lc->h, lc->w};
  int x = tu_graph_input(g, "x", KL_F32, 4, xd);
  *sy = const_f32(g, SY);
  *zy = const_zp(g, lc->q, lc->z);
  return TU_OP(g, QuantizeLinear, x, *sy, *zy);
}

static kl_graph *layout_graph(const layout_case *lc) {
  kl_graph *g = tu_graph_new();
  int sy, zy, xq = quantized_input(g, lc, &sy, &zy);
  int a = lookup(g, lc, qconv(g, lc, xq, lc->c0, lc->c, 3, false));
  tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){a, sy, zy}, 1);
  int X = lookup(g, lc, qconv(g, lc, a, lc->c, lc->c, 3, true));
  int in[5] = {X, sy, zy, sy, zy};
  int pooled = tu_graph_op(g, KL_OP_KilnQLinearGlobalAveragePool, 5, in);
  int s = lookup(g, lc, qconv(g, lc, pooled, lc->c, lc->c, 1, false));
  int y = qbin(g, lc, KL_OP_KilnQLinearAdd, qbin(g, lc, KL_OP_KilnQLinearMul, X, s), X);
  y = qconv(g, lc, y, lc->c, 7, 1, false);
  tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){y, sy, zy}, 1);
  return g;
}

/* MaxPool of x (kernel k x k, strides s, dilations d, pads p on every side, ceil_mode). */
static int maxpool(kl_graph *g, int x, int64_t k, int64_t s, int64_t d, int64_t p, bool ceil) {
  int y = TU_OP(g, MaxPool, x);
  int node = g->values[y].producer;
  tu_node_ints(g, node, "kernel_shape", 2, (int64_t[]){k, k});
  tu_node_ints(g, node, "strides", 2, (int64_t[]){s, s});
  tu_node_ints(g, node, "dilations", 2, (int64_t[]){d, d});
  tu_node_ints(g, node, "pads", 4, (int64_t[]){p, p, p, p});
  if (ceil) assert_int_equal(kl_node_set_int(g, node, "ceil_mode", 1, NULL), KILN_OK);
  return y;
}

static bool pool_out; /* pool_graph: the first MaxPool's output is a graph output too */

static kl_graph *pool_graph(const layout_case *lc) {
  kl_graph *g = tu_graph_new();
  int sy, zy, xq = quantized_input(g, lc, &sy, &zy);
  int p = maxpool(g, qconv(g, lc, xq, lc->c0, lc->c, 3, false), 3, 2, 1, 1, true);
  if (pool_out) tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){p, sy, zy}, 1);
  int e1 = qconv(g, lc, p, lc->c, lc->c / 2 + 1, 1, false);
  int e3 = lookup(g, lc, qconv(g, lc, p, lc->c, lc->c + 3, 3, false));
  int cat = TU_OP(g, Concat, e1, e3);
  assert_int_equal(kl_node_set_int(g, g->values[cat].producer, "axis", 1, NULL), KILN_OK);
  int y = qconv(g, lc, maxpool(g, cat, 2, 1, 2, 0, false), lc->c / 2 + lc->c + 4, 5, 1, false);
  tu_graph_output_node(g, KL_OP_DequantizeLinear, 3, (int[]){y, sy, zy}, 1);
  return g;
}

/* The fast session against the reference on make(lc)'s graph; where oneDNN runs the
 * convolutions, the nodes of ops cl[0 .. n_cl) must run channels-last kernels but for
 * the first plain_first of them in graph order, which must run plain ones. */
static void check_graph(const layout_case *lc, kl_graph *(*make)(const layout_case *),
                        const kl_op *cl, int n_cl, int plain_first) {
  kiln_model *m = tu_model_of(make(lc), 0);
  int64_t n = lc->n * lc->c0 * lc->h * lc->w, n_want, n_got;
  float *x = malloc(sizeof(float) * (size_t)n);
  assert_non_null(x);
  int64_t plane = lc->h * lc->w; /* planes of different means: images pool apart */
  for (int64_t p = 0; p < lc->n * lc->c0; p++) {
    float mid = tu_rand_f32(&rng, -4, 4);
    for (int64_t i = 0; i < plane; i++) x[p * plane + i] = mid + tu_rand_f32(&rng, -3, 3);
  }
  kiln_session *ref = tu_session(m, true, 0), *fast = tu_session(m, false, 0);
  float *want = tu_run_f32(ref, m, &x, &n_want), *got = tu_run_f32(fast, m, &x, &n_got);
  assert_int_equal(n_got, n_want);
  int64_t off = 0;
  for (int64_t k = 0; k < n_want; k++) {
    double d = fabs((double)got[k] - want[k]);
    if (d > SY * 1.001)
      fail_msg("%lld channels, %s: output %lld is %g, the reference %g", (long long)lc->c,
               kl_dtype_name(lc->q), (long long)k, (double)got[k], (double)want[k]);
    off += d > 0;
  }
  if (off * 100 > n_want)
    fail_msg("%lld channels: %lld of %lld outputs one step off", (long long)lc->c,
             (long long)off, (long long)n_want);
  bool dnnl = false;

  for (int i = 0; i < m->g->n_nodes; i++)
    dnnl |= strcmp(kl_session_kernel_name(fast, i), "dnnl_qconv") == 0;
  int seen = 0;
  for (int i = 0; dnnl && i < m->g->n_nodes; i++) {
    kl_op op = m->g->nodes[i].op;
    const char *k = kl_session_kernel_name(fast, i);
    bool listed = false;
    for (int j = 0; j < n_cl; j++) listed |= op == cl[j];
    if (!listed) continue;
    bool want = seen++ >= plain_first;
    if (!strstr(k, "channels-last") == want)
      fail_msg("%lld channels: node %d (%s) ran on '%s', expected %s", (long long)lc->c, i,
               kl_op_name(op), k, want ? "channels-last" : "a plain kernel");
  }
  if (dnnl) assert_true(seen > plain_first);
  free(want), free(got), free(x);
  kiln_session_free(ref), kiln_session_free(fast);
  kiln_model_free(m);
}

static void test_layouts(void **state) {
  (void)state;
  static const kl_op cl[] = {KL_OP_KilnQLinearGlobalAveragePool, KL_OP_KilnQLinearMul};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_graph(&cases[i], layout_graph, cl, 2, 0);
}

static void test_pool_concat(void **state) {
  (void)state;
  static const kl_op cl[] = {KL_OP_MaxPool, KL_OP_Concat};
  for (int out = 0; out < 2; out++) {
    pool_out = out;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
      check_graph(&cases[i], pool_graph, cl, 2, out);
  }
  pool_out = false;
}

/* max_codes at awkward widths (vector tails), tap counts, with and without acc, both
 * flips, against a plain loop over signed or unsigned codes. */
static void test_max_codes(void **state) {
  (void)state;
  enum { TAPS = 70, WIDTH = 131 };
  uint8_t *x = malloc(TAPS * WIDTH), got[WIDTH], want[WIDTH], init[WIDTH];
  const uint8_t *taps[TAPS];
  assert_non_null(x);
  for (int i = 0; i < TAPS * WIDTH; i++) x[i] = (uint8_t)tu_rand_f32(&rng, 0, 256);
  for (int i = 0; i < WIDTH; i++) init[i] = (uint8_t)tu_rand_f32(&rng, 0, 256);
  for (int t = 0; t < TAPS; t++) taps[t] = x + (size_t)((t * 37) % TAPS) * WIDTH;
  static const size_t widths[] = {1, 15, 16, 31, 32, 33, 64, 97, 131};
  static const size_t counts[] = {0, 1, 2, 9, 64, 70};
  for (int level = KL_ISA_GENERIC; level <= (int)kl_isa_level(); level++) {
    const kl_quant_fns *f = kl_cpu_isa_fns((kl_isa)level)->quant;
    for (int flip = 0; flip <= 0x80; flip += 0x80)
      for (int acc = 0; acc < 2; acc++)
        for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
          for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            size_t w = widths[wi], n = counts[ci];
            for (size_t i = 0; i < w; i++) {
              int best = acc ? (flip ? (int8_t)init[i] : init[i]) : (flip ? -128 : 0);
              for (size_t t = 0; t < n; t++) {
                int v = flip ? (int8_t)taps[t][i] : taps[t][i];
                best = v > best ? v : best;
              }
              want[i] = (uint8_t)best;
            }
            memcpy(got, init, sizeof got);
            f->max_codes(taps, n, (uint8_t)flip, acc, got, w);
            for (size_t i = 0; i < w; i++)
              if (got[i] != want[i])
                fail_msg("level %d, flip %d, acc %d, %zu channels of %zu taps: channel %zu "
                         "is %u, expected %u", level, flip, acc, w, n, i, got[i], want[i]);
            if (w < WIDTH && got[w] != init[w])
              fail_msg("level %d: max_codes wrote past its %zu channels", level, w);
          }
  }
  free(x);
}

/* Column sums at awkward widths (tails of 32 and of 16), strides wider than the row,
 * row counts across the AVX2 kernel's 256-row flush, both flips. */
static void test_sum_columns(void **state) {
  (void)state;
  enum { ROWS = 600, STRIDE = 131 };
  uint8_t *x = malloc(ROWS * STRIDE);
  uint32_t got[STRIDE], want[STRIDE];
  assert_non_null(x);
  for (int i = 0; i < ROWS * STRIDE; i++) x[i] = (uint8_t)tu_rand_f32(&rng, 0, 256);
  memset(x, 255, STRIDE * 300); /* sums past 16 bits within one flush */
  static const size_t widths[] = {1, 15, 16, 31, 32, 33, 64, 97, 131};
  static const size_t rows[] = {0, 1, 7, 255, 256, 257, 300, 600};
  for (int level = KL_ISA_GENERIC; level <= (int)kl_isa_level(); level++) {
    const kl_quant_fns *f = kl_cpu_isa_fns((kl_isa)level)->quant;
    for (int flip = 0; flip <= 0x80; flip += 0x80)
      for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
          size_t w = widths[wi], r = rows[ri], stride = w < STRIDE ? STRIDE : w;
          for (size_t i = 0; i < w; i++) {
            want[i] = 0;
            for (size_t k = 0; k < r; k++) want[i] += (uint8_t)(x[k * stride + i] ^ flip);
          }
          memset(got, 0xa5, sizeof got);
          f->sum_columns(x, (uint8_t)flip, stride, r, w, got);
          for (size_t i = 0; i < w; i++)
            if (got[i] != want[i])
              fail_msg("level %d, flip %d, %zu columns of %zu rows: column %zu is %u, "
                       "expected %u", level, flip, w, r, i, got[i], want[i]);
        }
  }
  free(x);
}

/* The level's lookup (QLinearLookup's table: lookup_avx2's blocks of 32 and its tail, and
 * where the CPU has AVX512-VBMI kl_lookup_vbmi's blocks of 64 and masked tail, called
 * directly as well as through the AVX-512 levels) at awkward lengths and offsets, both
 * flips, against table[x ^ flip]; nothing written past n. */
static void test_lookup_codes(void **state) {
  (void)state;
  enum { LEN = 300 };
  uint8_t x[LEN + 3], table[256], got[LEN + 1], want[LEN + 1];
  for (int i = 0; i < LEN + 3; i++) x[i] = (uint8_t)tu_rand_f32(&rng, 0, 256);
  for (int i = 0; i < 256; i++) table[i] = (uint8_t)tu_rand_f32(&rng, 0, 256);
  static const size_t lens[] = {0, 1, 15, 31, 32, 33, 63, 64, 65, 96, 127, 128, 200, 300};
  /* level -1: VBMI's lookup itself */
  int first = kl_isa_features()->avx512_vbmi && kl_isa_level() >= KL_ISA_AVX512 ? -1 : 0;
  if (first == 0) printf("no AVX512-VBMI: its lookup does not run here\n");
  for (int level = first; level <= (int)kl_isa_level(); level++) {
    kl_quant_fns vbmi = {0};
    vbmi.lookup = kl_lookup_vbmi;
    const kl_quant_fns *f = level < 0 ? &vbmi : kl_cpu_isa_fns((kl_isa)level)->quant;
    for (int flip = 0; flip <= 0x80; flip += 0x80)
      for (size_t off = 0; off < 3; off++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
          size_t n = lens[li];
          for (size_t i = 0; i < n; i++) want[i] = table[(uint8_t)(x[off + i] ^ flip)];
          memset(got, 0xa5, sizeof got);
          f->lookup(x + off, (uint8_t)flip, table, got, n);
          for (size_t i = 0; i < n; i++)
            if (got[i] != want[i])
              fail_msg("level %d, flip %d, %zu codes at offset %zu: code %zu gave %u, "
                       "expected %u", level, flip, n, off, i, got[i], want[i]);
          if (got[n] != 0xa5) fail_msg("level %d: lookup wrote past its %zu codes", level, n);
        }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layouts),
      cmocka_unit_test(test_sum_columns),
      cmocka_unit_test(test_pool_concat),
      cmocka_unit_test(test_max_codes),
      cmocka_unit_test(test_lookup_codes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
