/* The horizontal pass of 2-D pooling, AVX2 level: contiguous loads for stride 1,
 * gathers otherwise; masked tails. */
#include "backends/cpu/isa/vmath_avx2.h"

static inline __m256 red(bool is_max, __m256 acc, __m256 v) {
  return is_max ? _mm256_max_ps(v, acc) : _mm256_add_ps(acc, v);
}

/* Lanes of m from p; plain loads where all are (masked ones are slow on some CPUs). */
static inline __m256 load8(const float *p, __m256i m, bool full) {
  return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}

/* 8 outputs from j: taps v[(j + lane) * stride + k * dil] */
static inline __attribute__((always_inline)) __m256 window(bool is_max, const float *v,
                                                           size_t stride, size_t dil,
                                                           size_t kw, size_t j, __m256i m,
                                                           bool full) {
  if (stride == 1) {
    __m256 acc = load8(v + j, m, full);
    for (size_t k = 1; k < kw; k++) acc = red(is_max, acc, load8(v + j + k * dil, m, full));
    return acc;
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i idx = _mm256_mullo_epi32(_mm256_add_epi32(lane, _mm256_set1_epi32((int)j)),
                                   _mm256_set1_epi32((int)stride));
  const __m256 zero = _mm256_setzero_ps(), fm = _mm256_castsi256_ps(m);
  __m256 acc = _mm256_mask_i32gather_ps(zero, v, idx, fm, 4);
  for (size_t k = 1; k < kw; k++) {
    __m256i at = _mm256_add_epi32(idx, _mm256_set1_epi32((int)(k * dil)));
    acc = red(is_max, acc, _mm256_mask_i32gather_ps(zero, v, at, fm, 4));
  }
  return acc;
}

static inline __attribute__((always_inline)) void hpool_run(bool is_max, const float *v,
                                                            size_t stride, size_t dil,
                                                            size_t kw, float *y, size_t n) {
  size_t j = 0;
  const __m256i all = _mm256_set1_epi32(-1);
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, window(is_max, v, stride, dil, kw, j, all, true));
  if (j < n) {
    __m256i m = kl_y_tail(n - j);
    _mm256_maskstore_ps(y + j, m, window(is_max, v, stride, dil, kw, j, m, false));
  }
}

/* Offsets are int32 lanes: the driver's row buffer is far smaller than 2^31. */
static void hpool(bool is_max, const float *v, size_t stride, size_t dil, size_t kw,
                  float *y, size_t n) {
  if (is_max) hpool_run(true, v, stride, dil, kw, y, n);
  else hpool_run(false, v, stride, dil, kw, y, n);
}

/* 32 channels at a time in four accumulators (loads of the taps overlap), then 8 at
 * a time, then a masked tail. */
static inline __attribute__((always_inline)) void taps_run(bool is_max, bool acc,
                                                           const float *const *x,
                                                           size_t n_taps, float scale,
                                                           float *y, size_t n) {
  const __m256 init = _mm256_set1_ps(is_max ? -__builtin_inff() : 0.0f), k = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a0 = init, a1 = init;
    __m256 a2 = init, a3 = init;
    for (size_t t = 0; t < n_taps; t++) {
      const float *v = x[t] + i;
      a0 = red(is_max, a0, _mm256_loadu_ps(v));
      a1 = red(is_max, a1, _mm256_loadu_ps(v + 8));
      a2 = red(is_max, a2, _mm256_loadu_ps(v + 16));
      a3 = red(is_max, a3, _mm256_loadu_ps(v + 24));
    }
    if (acc) { /* these taps summed apart, then added to the earlier ones */
      a0 = red(is_max, a0, _mm256_loadu_ps(y + i));
      a1 = red(is_max, a1, _mm256_loadu_ps(y + i + 8));
      a2 = red(is_max, a2, _mm256_loadu_ps(y + i + 16));
      a3 = red(is_max, a3, _mm256_loadu_ps(y + i + 24));
    }
    _mm256_storeu_ps(y + i, _mm256_mul_ps(a0, k));
    _mm256_storeu_ps(y + i + 8, _mm256_mul_ps(a1, k));
    _mm256_storeu_ps(y + i + 16, _mm256_mul_ps(a2, k));
    _mm256_storeu_ps(y + i + 24, _mm256_mul_ps(a3, k));
  }
  for (; i < n; i += 8) {
    bool full = i + 8 <= n;
    __m256i m = full ? _mm256_set1_epi32(-1) : kl_y_tail(n - i);
    __m256 a = init;
    for (size_t t = 0; t < n_taps; t++) a = red(is_max, a, load8(x[t] + i, m, full));
    if (acc) a = red(is_max, a, load8(y + i, m, full));
    a = _mm256_mul_ps(a, k);
    if (full) _mm256_storeu_ps(y + i, a);
    else _mm256_maskstore_ps(y + i, m, a);
  }
}

static void taps(bool is_max, bool acc, const float *const *x, size_t n_taps, float scale,
                 float *y, size_t n) {
  if (is_max) taps_run(true, acc, x, n_taps, scale, y, n);
  else taps_run(false, acc, x, n_taps, scale, y, n);
}

const kl_pool_fns kl_pool_avx2 = {hpool, taps};
