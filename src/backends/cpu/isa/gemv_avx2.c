/* Matrix-vector products (isa_fns.h, kl_gemv_fns), AVX2 + FMA level: 8 lanes, tails by
 * maskload / maskstore (masked-off lanes load as 0 and are never written).
 *
 * The same shape as the AVX-512 level (gemv_avx512.c): nk takes four rows of w at a
 * time with two accumulators each and one load of x per vector for the four rows,
 * prefetching the next four; kn
 * adds four rows of w per pass over a y short enough to stay in L1. */
#include "backends/cpu/isa/isa_fns.h"

#include <immintrin.h>
#include <stdbool.h>

/* Lane mask of the first n < 8 lanes. */
static __m256i tail8(size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* pf: the next four rows follow, and are prefetched while these are read (as at the
 * AVX-512 level). */
static void dot4(const float *x, const float *w, size_t ldw, size_t k, float *y, bool pf) {
  const float *w0 = w, *w1 = w + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  size_t j = 0;
  const char *next = (const char *)(w3 + ldw), *next1 = next + ldw * 4;
  const char *next2 = next1 + ldw * 4, *next3 = next2 + ldw * 4;
  for (; j + 16 <= k; j += 16) {
    __m256 x0 = _mm256_loadu_ps(x + j), x1 = _mm256_loadu_ps(x + j + 8);
    if (pf) { /* the line of each next row at this column */
      _mm_prefetch(next + j * 4, _MM_HINT_T0);
      _mm_prefetch(next1 + j * 4, _MM_HINT_T0);
      _mm_prefetch(next2 + j * 4, _MM_HINT_T0);
      _mm_prefetch(next3 + j * 4, _MM_HINT_T0);
    }
    a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(w0 + j), a0);
    a1 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(w1 + j), a1);
    a2 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(w2 + j), a2);
    a3 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(w3 + j), a3);
    b0 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(w0 + j + 8), b0);
    b1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(w1 + j + 8), b1);
    b2 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(w2 + j + 8), b2);
    b3 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(w3 + j + 8), b3);
  }
  for (; j < k; j += 8) {
    __m256i m = k - j >= 8 ? _mm256_set1_epi32(-1) : tail8(k - j);
    __m256 x0 = _mm256_maskload_ps(x + j, m);
    a0 = _mm256_fmadd_ps(x0, _mm256_maskload_ps(w0 + j, m), a0);
    a1 = _mm256_fmadd_ps(x0, _mm256_maskload_ps(w1 + j, m), a1);
    a2 = _mm256_fmadd_ps(x0, _mm256_maskload_ps(w2 + j, m), a2);
    a3 = _mm256_fmadd_ps(x0, _mm256_maskload_ps(w3 + j, m), a3);
  }
  y[0] = hsum(_mm256_add_ps(a0, b0));
  y[1] = hsum(_mm256_add_ps(a1, b1));
  y[2] = hsum(_mm256_add_ps(a2, b2));
  y[3] = hsum(_mm256_add_ps(a3, b3));
}

static float dot1(const float *x, const float *w, size_t k) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t j = 0;
  for (; j + 32 <= k; j += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(w + j), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + j + 8), _mm256_loadu_ps(w + j + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + j + 16), _mm256_loadu_ps(w + j + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + j + 24), _mm256_loadu_ps(w + j + 24), a3);
  }
  for (; j < k; j += 8) {
    __m256i m = k - j >= 8 ? _mm256_set1_epi32(-1) : tail8(k - j);
    a0 = _mm256_fmadd_ps(_mm256_maskload_ps(x + j, m), _mm256_maskload_ps(w + j, m), a0);
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

static void gemv_nk(const float *x, const float *w, size_t ldw, size_t k, float *y, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) dot4(x, w + i * ldw, ldw, k, y + i, i + 8 <= n);
  for (; i < n; i++) y[i] = dot1(x, w + i * ldw, k);
}

/* y[0:n] (+)= x0 w0 + x1 w1 + x2 w2 + x3 w3; first: y is written, not read. */
static void axpy4(const float *x, const float *w0, size_t ldw, float *y, size_t n, bool first) {
  const float *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
  __m256 x0 = _mm256_set1_ps(x[0]), x1 = _mm256_set1_ps(x[1]);
  __m256 x2 = _mm256_set1_ps(x[2]), x3 = _mm256_set1_ps(x[3]);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 acc = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + i);
    __m256 acc2 = _mm256_mul_ps(x1, _mm256_loadu_ps(w1 + i));
    acc = _mm256_fmadd_ps(x0, _mm256_loadu_ps(w0 + i), acc);
    acc2 = _mm256_fmadd_ps(x3, _mm256_loadu_ps(w3 + i), acc2);
    acc = _mm256_fmadd_ps(x2, _mm256_loadu_ps(w2 + i), acc);
    _mm256_storeu_ps(y + i, _mm256_add_ps(acc, acc2));
  }
  if (i < n) {
    __m256i m = tail8(n - i);
    __m256 acc = first ? _mm256_setzero_ps() : _mm256_maskload_ps(y + i, m);
    __m256 acc2 = _mm256_mul_ps(x1, _mm256_maskload_ps(w1 + i, m));
    acc = _mm256_fmadd_ps(x0, _mm256_maskload_ps(w0 + i, m), acc);
    acc2 = _mm256_fmadd_ps(x3, _mm256_maskload_ps(w3 + i, m), acc2);
    acc = _mm256_fmadd_ps(x2, _mm256_maskload_ps(w2 + i, m), acc);
    _mm256_maskstore_ps(y + i, m, _mm256_add_ps(acc, acc2));
  }
}

static void axpy1(float x, const float *w, float *y, size_t n, bool first) {
  __m256 x0 = _mm256_set1_ps(x);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 acc = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + i);
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(x0, _mm256_loadu_ps(w + i), acc));
  }
  if (i < n) {
    __m256i m = tail8(n - i);
    __m256 acc = first ? _mm256_setzero_ps() : _mm256_maskload_ps(y + i, m);
    _mm256_maskstore_ps(y + i, m, _mm256_fmadd_ps(x0, _mm256_maskload_ps(w + i, m), acc));
  }
}

static void gemv_kn(const float *x, const float *w, size_t ldw, size_t k, float *y, size_t n) {
  size_t j = 0;
  for (; j + 4 <= k; j += 4) axpy4(x + j, w + j * ldw, ldw, y, n, j == 0);
  for (; j < k; j++) axpy1(x[j], w + j * ldw, y, n, j == 0);
  if (k == 0)
    for (size_t i = 0; i < n; i++) y[i] = 0.0f;
}

const kl_gemv_fns kl_gemv_avx2 = {gemv_nk, gemv_kn};
