/* Gradient-op primitives, AVX2 level (isa_fns.h, kl_grad_fns): the generic level's
 * operations in its order, 8 floats at a time; the 8 double lanes of the sums are two
 * registers of 4 (elements 0-3 and 4-7 of each group of 8), tails as the generic level
 * forms them. Separate multiplies and adds, never FMA. The AVX-512 levels use these:
 * the loops are bound by memory, not by the width of the registers. */
#include "backends/cpu/isa/grad_cl.h"
#include "backends/cpu/isa/isa_fns.h"

#include <immintrin.h>
#include <math.h>

static inline __attribute__((always_inline)) __m256i lanes(size_t cnt) {
  static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256((const __m256i *)(ones + 8 - cnt));
}

static void sums(const float *x, const float *w, size_t n, double *s, double *sw) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, b0 = a0, b1 = a0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    a0 = _mm256_add_pd(a0, lo);
    a1 = _mm256_add_pd(a1, hi);
    if (w) {
      __m256 u = _mm256_loadu_ps(w + i);
      b0 = _mm256_add_pd(b0, _mm256_mul_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(u))));
      b1 = _mm256_add_pd(b1, _mm256_mul_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(u, 1))));
    } else {
      b0 = _mm256_add_pd(b0, _mm256_mul_pd(lo, lo));
      b1 = _mm256_add_pd(b1, _mm256_mul_pd(hi, hi));
    }
  }
  double a[8], b[8];
  _mm256_storeu_pd(a, a0);
  _mm256_storeu_pd(a + 4, a1);
  _mm256_storeu_pd(b, b0);
  _mm256_storeu_pd(b + 4, b1);
  for (int l = 0; i < n; i++, l++) {
    double v = x[i];
    a[l] += v;
    b[l] += v * (w ? (double)w[i] : v);
  }
  for (int l = 0; l < 8; l++) {
    *s += a[l];
    *sw += b[l];
  }
}

static double deviations(const float *x, size_t n, double mean) {
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, m = _mm256_set1_pd(mean);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256d lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), m);
    __m256d hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), m);
    a0 = _mm256_add_pd(a0, _mm256_mul_pd(lo, lo));
    a1 = _mm256_add_pd(a1, _mm256_mul_pd(hi, hi));
  }
  double a[8], d = 0;
  _mm256_storeu_pd(a, a0);
  _mm256_storeu_pd(a + 4, a1);
  for (int l = 0; i < n; i++, l++) {
    double v = x[i] - mean;
    a[l] += v * v;
  }
  for (int l = 0; l < 8; l++) d += a[l];
  return d;
}

static void affine(const float *x, float a, float b, float *y, size_t n) {
  __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), va), vb));
  if (i < n) {
    __m256i m = lanes(n - i);
    __m256 v = _mm256_maskload_ps(x + i, m);
    _mm256_maskstore_ps(y + i, m, _mm256_add_ps(_mm256_mul_ps(v, va), vb));
  }
}

static inline __attribute__((always_inline)) __m256 affine2_8(__m256 dy, __m256 x, __m256 a,
                                                               __m256 b, __m256 c) {
  return _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(a, dy), _mm256_mul_ps(b, x)), c);
}

static void affine2(const float *dy, const float *x, float a, float b, float c, float *dx,
                    size_t n) {
  __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b), vc = _mm256_set1_ps(c);
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dx + i, affine2_8(_mm256_loadu_ps(dy + i), _mm256_loadu_ps(x + i), va,
                                       vb, vc));
  if (i < n) {
    __m256i m = lanes(n - i);
    _mm256_maskstore_ps(dx + i, m, affine2_8(_mm256_maskload_ps(dy + i, m),
                                             _mm256_maskload_ps(x + i, m), va, vb, vc));
  }
}

/* x > 0 ? dy : dy * alpha (alpha 0: 0, also for an infinite or NaN dy) */
static inline __attribute__((always_inline)) __m256 relu8(__m256 dy, __m256 x, __m256 alpha,
                                                          bool leaky) {
  __m256 pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
  return leaky ? _mm256_blendv_ps(_mm256_mul_ps(dy, alpha), dy, pos) : _mm256_and_ps(dy, pos);
}

static void relu(const float *dy, const float *x, float alpha, float *dx, size_t n) {
  __m256 va = _mm256_set1_ps(alpha);
  bool leaky = alpha != 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dx + i, relu8(_mm256_loadu_ps(dy + i), _mm256_loadu_ps(x + i), va, leaky));
  if (i < n) {
    __m256i m = lanes(n - i);
    _mm256_maskstore_ps(dx + i, m, relu8(_mm256_maskload_ps(dy + i, m),
                                         _mm256_maskload_ps(x + i, m), va, leaky));
  }
}

/* x[base + l * step] for l < 8 (lanes of m only; the others 0): one load at step 1,
 * two and a shuffle at step 2 (the usual pooling stride; m2a, m2b the halves' masks),
 * else a gather. */
static inline __attribute__((always_inline)) __m256 taps8(const float *x, int32_t base,
                                                          int32_t step, __m256i lane, __m256i m,
                                                          __m256i m2a, __m256i m2b) {
  if (step == 1) return _mm256_maskload_ps(x + base, m);
  if (step == 2) {
    __m256 a = _mm256_maskload_ps(x + base, m2a), b = _mm256_maskload_ps(x + base + 8, m2b);
    __m256 even = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); /* a0 a2 b0 b2 a4 a6 b4 b6 */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0)));
  }
  return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), x,
                                  _mm256_add_epi32(_mm256_set1_epi32(base), lane),
                                  _mm256_castsi256_ps(m), 4);
}

/* Eight outputs at a time: their taps loaded, compared and blended, so that no branch
 * depends on the data. */
static void max_taps(const float *x, const int32_t *rows, int n_rows, int32_t first,
                     int32_t step, int32_t kw, int32_t dil, int n, int32_t *best) {
  const __m256i lane = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                          _mm256_set1_epi32(step));
  for (int l0 = 0; l0 < n; l0 += 8) {
    int cnt = n - l0 < 8 ? n - l0 : 8, span2 = 2 * cnt - 1; /* step 2: elements read */
    __m256i m = lanes((size_t)cnt), m2a = lanes((size_t)(span2 < 8 ? span2 : 8));
    __m256i m2b = span2 > 8 ? lanes((size_t)(span2 - 8)) : _mm256_setzero_si256();
    int32_t col = first + l0 * step;
    __m256 max = _mm256_set1_ps(-INFINITY);
    __m256i at = _mm256_add_epi32(_mm256_set1_epi32(rows[0] + col), lane);
    for (int r = 0; r < n_rows; r++)
      for (int32_t k = 0; k < kw; k++) {
        int32_t base = rows[r] + col + k * dil;
        __m256 v = taps8(x, base, step, lane, m, m2a, m2b);
        __m256i pos = _mm256_add_epi32(_mm256_set1_epi32(base), lane);
        __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, max, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        max = _mm256_blendv_ps(max, v, take);
        at = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(at), _mm256_castsi256_ps(pos), take));
      }
    _mm256_maskstore_epi32(best + l0, m, at);
  }
}

/* cl_max_c for a whole block of 16 channels: two registers of maxima and of positions,
 * a tap taken where it is greater (ordered) or NaN. */
static void cl_max(const float *x, size_t nc, const int32_t *taps, int n, int cw, float *mx,
                   int32_t *best) {
  if (cw != KL_GRAD_CL_CH) {
    cl_max_c(x, nc, taps, n, cw, mx, best);
    return;
  }
  __m256 m0 = _mm256_loadu_ps(mx), m1 = _mm256_loadu_ps(mx + 8);
  __m256 b0 = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)best));
  __m256 b1 = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(best + 8)));
  for (int t = 0; t < n; t++) {
    const float *xv = x + (size_t)taps[t] * nc;
    __m256 at = _mm256_castsi256_ps(_mm256_set1_epi32(taps[t]));
    __m256 v0 = _mm256_loadu_ps(xv), v1 = _mm256_loadu_ps(xv + 8);
    __m256 t0 = _mm256_or_ps(_mm256_cmp_ps(v0, m0, _CMP_GT_OQ), _mm256_cmp_ps(v0, v0, _CMP_UNORD_Q));
    __m256 t1 = _mm256_or_ps(_mm256_cmp_ps(v1, m1, _CMP_GT_OQ), _mm256_cmp_ps(v1, v1, _CMP_UNORD_Q));
    m0 = _mm256_blendv_ps(m0, v0, t0);
    m1 = _mm256_blendv_ps(m1, v1, t1);
    b0 = _mm256_blendv_ps(b0, at, t0);
    b1 = _mm256_blendv_ps(b1, at, t1);
  }
  _mm256_storeu_ps(mx, m0);
  _mm256_storeu_ps(mx + 8, m1);
  _mm256_storeu_si256((__m256i *)best, _mm256_castps_si256(b0));
  _mm256_storeu_si256((__m256i *)(best + 8), _mm256_castps_si256(b1));
}

const kl_grad_fns kl_grad_avx2 = {sums,     deviations, affine, affine2, relu,
                                   max_taps, cl_sums,    cl_apply, cl_max};
