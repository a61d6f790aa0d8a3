/* Row primitives (softmax, layer normalization, sums), AVX2 level: 8 lanes, tails by
 * maskload / maskstore (masked-off lanes load as 0, so sums need no fix-up; maxima
 * and exponentials select them away). x and y may be the same row. */
#include "backends/cpu/isa/vmath_avx2.h"

#include <math.h>

static inline __m256i row_mask(size_t n, size_t i) {
  return n - i >= 8 ? _mm256_set1_epi32(-1) : kl_y_tail(n - i);
}

/* Lanes i.. of a row of n, masked only in the tail: a masked store is many times
 * slower than a plain one on some CPUs (AMD's). */
static inline __m256 load8(const float *p, size_t n, size_t i) {
  return n - i >= 8 ? _mm256_loadu_ps(p + i) : _mm256_maskload_ps(p + i, kl_y_tail(n - i));
}

static inline void store8(float *p, size_t n, size_t i, __m256 v) {
  if (n - i >= 8) _mm256_storeu_ps(p + i, v);
  else _mm256_maskstore_ps(p + i, kl_y_tail(n - i), v);
}

static float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static float row_sum(const float *x, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) { /* four chains of additions, to hide their latency */
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
  }
  for (; i < n; i += 8) a0 = _mm256_add_ps(a0, _mm256_maskload_ps(x + i, row_mask(n, i)));
  return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

/* The largest element; NaN is skipped (max returns the accumulator, its second
 * operand), and reaches the result through the sum of exponentials instead. */
static float row_max(const float *x, size_t n) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 a0 = ninf, a1 = ninf;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_max_ps(_mm256_loadu_ps(x + i), a0);
    a1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), a1);
  }
  for (; i < n; i += 8) {
    __m256i m = row_mask(n, i);
    __m256 v = _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m));
    a0 = _mm256_max_ps(v, a0);
  }
  return hmax(_mm256_max_ps(a0, a1));
}

/* sum of e^(x - max), storing each term in y unless y is NULL */
static float exp_sum(const float *x, float max, float *y, size_t n) {
  const __m256 vmax = _mm256_set1_ps(max);
  __m256 acc = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 8) {
    __m256i m = row_mask(n, i);
    __m256 e = kl_y_exp(_mm256_sub_ps(load8(x, n, i), vmax));
    acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(m)));
    if (y) store8(y, n, i, e);
  }
  return hsum(acc);
}

static void softmax(const float *x, float *y, size_t n, bool log_form) {
  float max = row_max(x, n);
  const __m256 vmax = _mm256_set1_ps(max);
  if (log_form) { /* (x - max) - lse: x - max is exact near the max, so keep it apart */
    const __m256 lse = _mm256_set1_ps((float)log((double)exp_sum(x, max, NULL, n)));
    for (size_t i = 0; i < n; i += 8)
      store8(y, n, i, _mm256_sub_ps(_mm256_sub_ps(load8(x, n, i), vmax), lse));
    return;
  }
  const __m256 inv = _mm256_set1_ps(1.0f / exp_sum(x, max, y, n));
  for (size_t i = 0; i < n; i += 8) store8(y, n, i, _mm256_mul_ps(load8(y, n, i), inv));
}

/* sum of (x - mean)^2 */
static float sq_dev(const float *x, float mean, size_t n) {
  const __m256 vm = _mm256_set1_ps(mean);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
    __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm);
    a0 = _mm256_fmadd_ps(d0, d0, a0);
    a1 = _mm256_fmadd_ps(d1, d1, a1);
  }
  for (; i < n; i += 8) {
    __m256i m = row_mask(n, i);
    __m256 d = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), vm),
                             _mm256_castsi256_ps(m));
    a0 = _mm256_fmadd_ps(d, d, a0);
  }
  return hsum(_mm256_add_ps(a0, a1));
}

static void norm(const kl_norm_row *p, const float *x, float *y, float *mean_out,
                 float *inv_out) {
  size_t n = p->n;
  float mean, inv;
  KL_NORM_STATS(row_sum, sq_dev, x, p, &mean, &inv);
  const float *scale = p->scale, *bias = p->bias;
  const __m256 vm = _mm256_set1_ps(mean), vi = _mm256_set1_ps(inv);
  const __m256 s1 = _mm256_set1_ps(p->scale1), b1 = _mm256_set1_ps(p->bias1);
  for (size_t i = 0; i < n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(load8(x, n, i), vm), vi);
    __m256 b = bias ? load8(bias, n, i) : b1;
    store8(y, n, i, _mm256_fmadd_ps(v, scale ? load8(scale, n, i) : s1, b));
  }
  *mean_out = mean;
  *inv_out = inv;
}

const kl_rows_fns kl_rows_avx2 = {softmax, norm, row_sum};
