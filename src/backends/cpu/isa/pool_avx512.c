/* The horizontal pass of 2-D pooling, AVX-512 level: contiguous loads for stride 1,
 * gathers otherwise; masked tails. */
#include "backends/cpu/isa/vmath_avx512.h"

static inline __m512 red(bool is_max, __m512 acc, __m512 v) {
  return is_max ? _mm512_max_ps(v, acc) : _mm512_add_ps(acc, v);
}

/* 16 outputs from j: taps v[(j + lane) * stride + k * dil] */
static inline __attribute__((always_inline)) __m512 window(bool is_max, const float *v,
                                                           size_t stride, size_t dil,
                                                           size_t kw, size_t j,
                                                           __mmask16 m) {
  if (stride == 1) {
    __m512 acc = _mm512_maskz_loadu_ps(m, v + j);
    for (size_t k = 1; k < kw; k++) acc = red(is_max, acc, _mm512_maskz_loadu_ps(m, v + j + k * dil));
    return acc;
  }
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i idx = _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32((int)j)),
                                   _mm512_set1_epi32((int)stride));
  const __m512 zero = _mm512_setzero_ps();
  __m512 acc = _mm512_mask_i32gather_ps(zero, m, idx, v, 4);
  for (size_t k = 1; k < kw; k++) {
    __m512i at = _mm512_add_epi32(idx, _mm512_set1_epi32((int)(k * dil)));
    acc = red(is_max, acc, _mm512_mask_i32gather_ps(zero, m, at, v, 4));
  }
  return acc;
}

static inline __attribute__((always_inline)) void hpool_run(bool is_max, const float *v,
                                                            size_t stride, size_t dil,
                                                            size_t kw, float *y, size_t n) {
  for (size_t j = 0; j < n; j += 16) {
    __mmask16 m = n - j >= 16 ? (__mmask16)0xffff : kl_z_tail(n - j);
    _mm512_mask_storeu_ps(y + j, m, window(is_max, v, stride, dil, kw, j, m));
  }
}

/* Offsets are int32 lanes: the driver's row buffer is far smaller than 2^31. */
static void hpool(bool is_max, const float *v, size_t stride, size_t dil, size_t kw,
                  float *y, size_t n) {
  if (is_max) hpool_run(true, v, stride, dil, kw, y, n);
  else hpool_run(false, v, stride, dil, kw, y, n);
}

/* 64 channels at a time in four accumulators, then 16 at a time, masked at the end. */
static inline __attribute__((always_inline)) void taps_run(bool is_max, bool acc,
                                                           const float *const *x,
                                                           size_t n_taps, float scale,
                                                           float *y, size_t n) {
  const __m512 init = _mm512_set1_ps(is_max ? -__builtin_inff() : 0.0f), k = _mm512_set1_ps(scale);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512 a0 = init, a1 = init;
    __m512 a2 = init, a3 = init;
    for (size_t t = 0; t < n_taps; t++) {
      const float *v = x[t] + i;
      a0 = red(is_max, a0, _mm512_loadu_ps(v));
      a1 = red(is_max, a1, _mm512_loadu_ps(v + 16));
      a2 = red(is_max, a2, _mm512_loadu_ps(v + 32));
      a3 = red(is_max, a3, _mm512_loadu_ps(v + 48));
    }
    if (acc) { /* these taps summed apart, then added to the earlier ones */
      a0 = red(is_max, a0, _mm512_loadu_ps(y + i));
      a1 = red(is_max, a1, _mm512_loadu_ps(y + i + 16));
      a2 = red(is_max, a2, _mm512_loadu_ps(y + i + 32));
      a3 = red(is_max, a3, _mm512_loadu_ps(y + i + 48));
    }
    _mm512_storeu_ps(y + i, _mm512_mul_ps(a0, k));
    _mm512_storeu_ps(y + i + 16, _mm512_mul_ps(a1, k));
    _mm512_storeu_ps(y + i + 32, _mm512_mul_ps(a2, k));
    _mm512_storeu_ps(y + i + 48, _mm512_mul_ps(a3, k));
  }
  for (; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 a = init;
    for (size_t t = 0; t < n_taps; t++) a = red(is_max, a, _mm512_maskz_loadu_ps(m, x[t] + i));
    if (acc) a = red(is_max, a, _mm512_maskz_loadu_ps(m, y + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(a, k));
  }
}

static void taps(bool is_max, bool acc, const float *const *x, size_t n_taps, float scale,
                 float *y, size_t n) {
  if (is_max) taps_run(true, acc, x, n_taps, scale, y, n);
  else taps_run(false, acc, x, n_taps, scale, y, n);
}

const kl_pool_fns kl_pool_avx512 = {hpool, taps};
