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

const kl_pool_fns kl_pool_avx512 = {hpool};
