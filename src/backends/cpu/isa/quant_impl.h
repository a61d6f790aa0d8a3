/* The loops of the quantization primitives (isa_fns.h, kl_quant_fns), written once for
 * the auto-vectorizer and compiled at each level with that level's flags
 * (quant_generic.c, quant_avx2.c): static, so no level's copy can stand in for
 * another's. Exact, as the reference kernels (ref/quant.c) with float32 scales:
 *   quantize:   x / scale is one correctly rounded float32 division, as the reference's
 *               rounded to the scale's dtype; clamping to [lo - zp, hi - zp] (integers)
 *               before rint is the same as saturating after it; NaN gives zp.
 *   dequantize: (x - zp) is exact in float32 and its product with the scale is rounded
 *               once, as the reference's exact double product rounded to float32.
 */
#ifndef KL_ISA_QUANT_IMPL_H
#define KL_ISA_QUANT_IMPL_H

#include <math.h>
#include <string.h>

#define QUANTIZE_T(T, LO, HI)                                                          \
  static void quantize_##T(const float *x, float scale, int32_t zp, T *y, size_t n) { \
    float lo = (float)(LO - zp), hi = (float)(HI - zp);                                \
    for (size_t i = 0; i < n; i++) {                                                   \
      float q = x[i] / scale;                                                          \
      q = q == q ? q : 0.0f;                                                           \
      q = q > lo ? q : lo; /* as a max and a min: vmaxps, vminps (QBIN_T below) */     \
      q = q < hi ? q : hi;                                                             \
      y[i] = (T)((int32_t)rintf(q) + zp);                                              \
    }                                                                                  \
  }

#define DEQUANTIZE_T(T)                                                                  \
  static void dequantize_##T(const T *x, float scale, int32_t zp, float *y, size_t n) { \
    for (size_t i = 0; i < n; i++) y[i] = (float)((int32_t)x[i] - zp) * scale;         \
  }

QUANTIZE_T(uint8_t, 0, 255)
QUANTIZE_T(int8_t, -128, 127)
DEQUANTIZE_T(uint8_t)
DEQUANTIZE_T(int8_t)

/* int32 sums of 8-bit products: exact (the caller keeps them within int32) */
#define AXPY_T(T)                                                                \
  static void axpy_##T(int32_t a, const T *x, int32_t *y, size_t n) {           \
    for (size_t i = 0; i < n; i++) y[i] += a * (int32_t)x[i];                    \
  }

#define AXPY4_T(T)                                                                    \
  static void axpy4_##T(const int32_t *a, const T *x, int32_t *y, size_t ldy, size_t n) { \
    int32_t a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];                                 \
    int32_t *y0 = y, *y1 = y + ldy, *y2 = y + 2 * ldy, *y3 = y + 3 * ldy;               \
    for (size_t i = 0; i < n; i++) {                                                    \
      int32_t v = x[i];                                                                 \
      y0[i] += a0 * v;                                                                  \
      y1[i] += a1 * v;                                                                  \
      y2[i] += a2 * v;                                                                  \
      y3[i] += a3 * v;                                                                  \
    }                                                                                   \
  }

AXPY_T(uint8_t)
AXPY_T(int8_t)
AXPY4_T(uint8_t)
AXPY4_T(int8_t)

/* QLinearAdd and QLinearMul: each operand dequantized and the two added or multiplied
 * in float32, the result quantized as above (ref/qadd.c computes the same operations).
 * bstep 1: b has a's shape; 0: b is one code, broadcast over the n elements. The clamp
 * is written as a max and a min (q is no NaN by then), which the vectorizer turns into
 * vmaxps and vminps: the nested conditional became compares and blends, and with the
 * bstep choice inside the loop, half the loop's time (ResNet-50's residual Adds on a
 * Zen 3: 0.56 ns an element). */
#define QBIN_T(T, LO, HI, NAME, OP)                                                       \
  static inline T NAME##_one_##T(float fa, float fb, float sc, float lo, float hi,        \
                                 int32_t zc) {                                            \
    float q = (fa OP fb) / sc;                                                            \
    q = q == q ? q : 0.0f;                                                                \
    q = q > lo ? q : lo;                                                                  \
    q = q < hi ? q : hi;                                                                  \
    return (T)((int32_t)rintf(q) + zc);                                                   \
  }                                                                                       \
  static void NAME##_##T(const T *a, float sa, int32_t za, const T *b, float sb, int32_t zb, \
                         float sc, int32_t zc, T *y, size_t n, size_t bstep) {            \
    float lo = (float)(LO - zc), hi = (float)(HI - zc);                                  \
    if (!bstep) {                                                                         \
      float b0 = (float)((int32_t)b[0] - zb) * sb;                                       \
      for (size_t i = 0; i < n; i++)                                                      \
        y[i] = NAME##_one_##T((float)((int32_t)a[i] - za) * sa, b0, sc, lo, hi, zc);      \
      return;                                                                             \
    }                                                                                     \
    for (size_t i = 0; i < n; i++)                                                        \
      y[i] = NAME##_one_##T((float)((int32_t)a[i] - za) * sa,                             \
                            (float)((int32_t)b[i] - zb) * sb, sc, lo, hi, zc);            \
  }

QBIN_T(uint8_t, 0, 255, qadd, +)
QBIN_T(int8_t, -128, 127, qadd, +)
QBIN_T(uint8_t, 0, 255, qmul, *)
QBIN_T(int8_t, -128, 127, qmul, *)

/* QLinearLookup: y = table[code of x], the code of an int8 x being x + 128. */
static void lookup(const uint8_t *x, uint8_t flip, const uint8_t *table, uint8_t *y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = table[(uint8_t)(x[i] ^ flip)];
}

/* QLinearGlobalAveragePool's sums: the codes x ^ flip as uint8 (flip 0x80: an int8 x
 * plus 128), exact in 64 bits. */
static uint64_t sum_codes(const uint8_t *x, uint8_t flip, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; i++) s += (uint8_t)(x[i] ^ flip);
  return s;
}

/* Its channels-last form: one row of n channels per pixel, summed row by row (the
 * inner loop is the vector one). */
static void sum_columns(const uint8_t *x, uint8_t flip, size_t stride, size_t rows, size_t n,
                        uint32_t *acc) {
  for (size_t i = 0; i < n; i++) acc[i] = 0;
  for (size_t r = 0; r < rows; r++) {
    const uint8_t *row = x + r * stride;
    for (size_t i = 0; i < n; i++) acc[i] += (uint8_t)(row[i] ^ flip);
  }
}

/* Channels from..c of one output pixel of the depthwise convolution (isa_fns.h), its
 * taps at taps[t] + off. */
static void qdw_pixel(const kl_qdw *d, const uint8_t *const *taps, size_t off, size_t from,
                      uint8_t *y) {
  float lo = (float)(d->lo - d->zy), hi = (float)(d->hi - d->zy);
  for (size_t i = from; i < d->c; i++) {
    size_t s = i / 16 * 16 + KL_QDW_SLOT(i % 16);
    int32_t acc = d->bias[s];
    for (size_t t = 0; t < d->k; t++)
      acc += (int32_t)taps[t][off + i] * d->w[((t / 2) * d->c16 + s) * 2 + t % 2];
    float q = (float)acc * d->scale[s];
    q = q >= lo ? q : lo; /* NaN to lo, as the vector twins' vmaxps */
    q = q <= hi ? q : hi;
    y[i] = (uint8_t)((int32_t)rintf(q) + d->zy);
  }
}

static void qdw(const kl_qdw *d, const uint8_t *const *taps, size_t xstep, size_t n,
                uint8_t *y, size_t ystride) {
  for (size_t p = 0; p < n; p++) qdw_pixel(d, taps, p * xstep, 0, y + p * ystride);
}

static void qgemv(const uint8_t *a, size_t k, const int8_t *wp, size_t n, int32_t *acc) {
  size_t groups = (k + 3) / 4;
  for (size_t j = 0; j < n; j++) {
    const int8_t *w = wp + (j / KL_QGEMV_PANEL) * groups * 32 + (j % KL_QGEMV_PANEL) * 4;
    int32_t sum = 0;
    for (size_t g = 0; g < groups; g++)
      for (size_t r = 0; r < 4; r++) sum += (int32_t)a[4 * g + r] * w[g * 32 + r];
    acc[j] = sum;
  }
}

/* int8 matrix product of a few rows (isa_fns.h): the twin of the levels' kernels (inline:
 * a level with a kernel of its own leaves it unused). */
static inline void qgemm(const uint8_t *a, size_t lda, size_t rows, size_t k, const int8_t *wp,
                         size_t cols, const int32_t *comp, int32_t *y, size_t ldy) {
  size_t groups = (k + 3) / 4;
  for (size_t r = 0; r < rows; r++)
    for (size_t j = 0; j < cols; j++) {
      const int8_t *w = wp + (j / KL_QGEMV_PANEL) * groups * 32 + (j % KL_QGEMV_PANEL) * 4;
      int32_t sum = 0;
      for (size_t i = 0; i < k; i++) sum += (int32_t)a[r * lda + i] * w[i / 4 * 32 + i % 4];
      y[r * ldy + j] = sum - comp[j];
    }
}

/* The wide product of a few rows (isa_fns.h): the twin of the levels' kernels. */
static inline void qgemm16(const int16_t *a, size_t lda, size_t rows, size_t kpairs,
                           const int16_t *w0, const int16_t *w1, size_t cols, int32_t *y,
                           size_t ldy) {
  for (size_t r = 0; r < rows; r++)
    for (size_t j = 0; j < cols; j++) {
      const int16_t *w = (j < KL_QGEMV_PANEL ? w0 : w1) + (j % KL_QGEMV_PANEL) * 2;
      int32_t sum = 0;
      for (size_t i = 0; i < 2 * kpairs; i++)
        sum += (int32_t)a[r * lda + i] * w[i / 2 * 16 + i % 2];
      y[r * ldy + j] = sum;
    }
}

/* The max of the taps' codes per channel (isa_fns.h): each code ^ flip compared as
 * uint8. Channels go in blocks of 16 bytes (a vector of the compiler's, one register at
 * every level), the last block overlapping the one before when n is not a multiple of
 * 16 (a maximum taken twice is the same maximum), so that a pixel of fewer channels
 * than the level's vectors (ShuffleNet's first MaxPool: 24) is not a scalar loop: a
 * plain loop over n bytes vectorized only where n reached a whole vector, and that
 * MaxPool took 0.6 ms where float32's took 0.14. Fewer than 16 channels: a byte at a
 * time. */
typedef uint8_t kl_q16 __attribute__((vector_size(16)));

static kl_q16 max_block(const uint8_t *const *x, size_t n_taps, size_t at, kl_q16 f, kl_q16 m) {
  for (size_t t = 0; t < n_taps; t++) {
    kl_q16 v;
    memcpy(&v, x[t] + at, sizeof v);
    v ^= f;
    kl_q16 gt = (kl_q16)(v > m); /* all ones where v is larger */
    m = (v & gt) | (m & ~gt);
  }
  return m;
}

static void max_codes(const uint8_t *const *x, size_t n_taps, uint8_t flip, bool acc,
                      uint8_t *y, size_t n) {
  if (n >= 16) {
    kl_q16 f = (kl_q16){0} + flip;
    for (size_t i = 0;; i += 16) {
      size_t at = i + 16 <= n ? i : n - 16;
      kl_q16 m = (kl_q16){0};
      if (acc) {
        memcpy(&m, y + at, sizeof m);
        m ^= f;
      }
      m = max_block(x, n_taps, at, f, m) ^ f;
      memcpy(y + at, &m, sizeof m);
      if (at + 16 >= n) return;
    }
  }
  if (!acc)
    for (size_t i = 0; i < n; i++) y[i] = flip;
  for (size_t t = 0; t < n_taps; t++) {
    const uint8_t *xt = x[t];
    for (size_t i = 0; i < n; i++) {
      uint8_t a = (uint8_t)(xt[i] ^ flip), b = (uint8_t)(y[i] ^ flip);
      y[i] = (uint8_t)((a > b ? a : b) ^ flip);
    }
  }
}

/* min(0, x) and max(0, x), NaN and infinities found as x - x != 0 (the twin of the
 * levels' vector forms: min and max are exact in any order). */
static bool range(const float *x, size_t n, float *lo, float *hi) {
  float l = 0.0f, h = 0.0f, bad = 0.0f;
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    bad += v - v;
    l = v < l ? v : l;
    h = v > h ? v : h;
  }
  *lo = l;
  *hi = h;
  return bad == 0.0f;
}

/* A level with a faster lookup, sum or product defines KL_QUANT_LOOKUP, KL_QUANT_SUM,
 * KL_QUANT_SUM_COLUMNS, KL_QUANT_QDW, KL_QUANT_QGEMV or KL_QUANT_RANGE before including
 * this file. */
#ifndef KL_QUANT_LOOKUP
#define KL_QUANT_LOOKUP lookup
#endif
#ifndef KL_QUANT_SUM
#define KL_QUANT_SUM sum_codes
#endif
#ifndef KL_QUANT_SUM_COLUMNS
#define KL_QUANT_SUM_COLUMNS sum_columns
#endif
#ifndef KL_QUANT_QDW
#define KL_QUANT_QDW qdw
#endif
#ifndef KL_QUANT_QGEMV
#define KL_QUANT_QGEMV qgemv
#endif
#ifndef KL_QUANT_RANGE
#define KL_QUANT_RANGE range
#endif
#ifndef KL_QUANT_QGEMM
#define KL_QUANT_QGEMM qgemm
#endif
#ifndef KL_QUANT_QGEMM16
#define KL_QUANT_QGEMM16 qgemm16
#endif
#ifndef KL_QUANT_QBIN /* a level's own QLinearAdd and QLinearMul: KL_QUANT_QBIN(qadd_uint8_t) */
#define KL_QUANT_QBIN(name) name
#endif

#ifndef KL_QUANT_QUANTIZE /* a level's own QuantizeLinear: KL_QUANT_QUANTIZE(quantize_uint8_t) */
#define KL_QUANT_QUANTIZE(name) name
#endif

#define KL_QUANT_FNS                                                                     \
  {KL_QUANT_QUANTIZE(quantize_uint8_t), KL_QUANT_QUANTIZE(quantize_int8_t), dequantize_uint8_t, dequantize_int8_t, axpy_uint8_t,  \
   axpy_int8_t, axpy4_uint8_t, axpy4_int8_t, KL_QUANT_QBIN(qadd_uint8_t),                   \
   KL_QUANT_QBIN(qadd_int8_t), KL_QUANT_QBIN(qmul_uint8_t), KL_QUANT_QBIN(qmul_int8_t),     \
   KL_QUANT_LOOKUP, KL_QUANT_SUM, KL_QUANT_SUM_COLUMNS, KL_QUANT_QDW, KL_QUANT_QGEMV, \
   KL_QUANT_QGEMM, KL_QUANT_QGEMM16, max_codes, KL_QUANT_RANGE}

#endif
