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

#define QUANTIZE_T(T, LO, HI)                                                          \
  static void quantize_##T(const float *x, float scale, int32_t zp, T *y, size_t n) { \
    float lo = (float)(LO - zp), hi = (float)(HI - zp);                                \
    for (size_t i = 0; i < n; i++) {                                                   \
      float q = x[i] / scale;                                                          \
      q = q == q ? q : 0.0f;                                                           \
      q = q < lo ? lo : q > hi ? hi : q;                                               \
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

#define KL_QUANT_FNS                                                                   \
  {quantize_uint8_t, quantize_int8_t, dequantize_uint8_t, dequantize_int8_t,           \
   axpy_uint8_t, axpy_int8_t, axpy4_uint8_t, axpy4_int8_t}

#endif
