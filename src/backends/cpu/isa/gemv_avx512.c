/* Matrix-vector products (isa_fns.h, kl_gemv_fns), AVX-512 level: 16 lanes, tails by
 * masked loads and stores (which never touch memory outside the mask).
 *
 * nk: four rows of w at a time, two accumulators each (eight in flight hide the FMA
 * latency), each vector of x loaded once for the four rows; one horizontal sum per row;
 * the next four rows prefetched meanwhile.
 * kn: four rows of w per pass over y, which the caller keeps short enough to stay in
 * L1; every row of w is read front to back, so the weights stream in order. */
#include "backends/cpu/isa/isa_fns.h"

#include <immintrin.h>
#include <stdbool.h>

static __mmask16 tail16(size_t n) { return (__mmask16)((1u << n) - 1u); }

/* pf: the next four rows follow, and are prefetched while these are read (short rows
 * then start from the cache, where the hardware prefetcher would still be learning
 * them: 15 -> 17 GB/s at 1280 x 960, 20 -> 23 at 4096 x 4096 on a Zen 4 core). */
static void dot4(const float *x, const float *w, size_t ldw, size_t k, float *y, bool pf) {
  const float *w0 = w, *w1 = w + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  size_t j = 0;
  const char *next = (const char *)(w3 + ldw), *next1 = next + ldw * 4;
  const char *next2 = next1 + ldw * 4, *next3 = next2 + ldw * 4;
  for (; j + 32 <= k; j += 32) {
    __m512 x0 = _mm512_loadu_ps(x + j), x1 = _mm512_loadu_ps(x + j + 16);
    if (pf) { /* the two lines of each next row at this column */
      _mm_prefetch(next + j * 4, _MM_HINT_T0);
      _mm_prefetch(next + j * 4 + 64, _MM_HINT_T0);
      _mm_prefetch(next1 + j * 4, _MM_HINT_T0);
      _mm_prefetch(next1 + j * 4 + 64, _MM_HINT_T0);
      _mm_prefetch(next2 + j * 4, _MM_HINT_T0);
      _mm_prefetch(next2 + j * 4 + 64, _MM_HINT_T0);
      _mm_prefetch(next3 + j * 4, _MM_HINT_T0);
      _mm_prefetch(next3 + j * 4 + 64, _MM_HINT_T0);
    }
    a0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w0 + j), a0);
    a1 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w1 + j), a1);
    a2 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w2 + j), a2);
    a3 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w3 + j), a3);
    b0 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w0 + j + 16), b0);
    b1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w1 + j + 16), b1);
    b2 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w2 + j + 16), b2);
    b3 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w3 + j + 16), b3);
  }
  for (; j < k; j += 16) { /* the last one or two vectors, the final one masked */
    __mmask16 m = k - j >= 16 ? (__mmask16)0xffff : tail16(k - j);
    __m512 x0 = _mm512_maskz_loadu_ps(m, x + j);
    a0 = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, w0 + j), a0);
    a1 = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, w1 + j), a1);
    a2 = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, w2 + j), a2);
    a3 = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, w3 + j), a3);
  }
  y[0] = _mm512_reduce_add_ps(_mm512_add_ps(a0, b0));
  y[1] = _mm512_reduce_add_ps(_mm512_add_ps(a1, b1));
  y[2] = _mm512_reduce_add_ps(_mm512_add_ps(a2, b2));
  y[3] = _mm512_reduce_add_ps(_mm512_add_ps(a3, b3));
}

static float dot1(const float *x, const float *w, size_t k) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t j = 0;
  for (; j + 64 <= k; j += 64) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + j), _mm512_loadu_ps(w + j), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + j + 16), _mm512_loadu_ps(w + j + 16), a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + j + 32), _mm512_loadu_ps(w + j + 32), a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + j + 48), _mm512_loadu_ps(w + j + 48), a3);
  }
  for (; j < k; j += 16) {
    __mmask16 m = k - j >= 16 ? (__mmask16)0xffff : tail16(k - j);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + j), _mm512_maskz_loadu_ps(m, w + j), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

static void gemv_nk(const float *x, const float *w, size_t ldw, size_t k, float *y, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) dot4(x, w + i * ldw, ldw, k, y + i, i + 8 <= n);
  for (; i < n; i++) y[i] = dot1(x, w + i * ldw, k);
}

/* y[0:n] (+)= x0 w0 + x1 w1 + x2 w2 + x3 w3; first: y is written, not read. */
static void axpy4(const float *x, const float *w0, size_t ldw, float *y, size_t n, bool first) {
  const float *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
  __m512 x0 = _mm512_set1_ps(x[0]), x1 = _mm512_set1_ps(x[1]);
  __m512 x2 = _mm512_set1_ps(x[2]), x3 = _mm512_set1_ps(x[3]);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 acc = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + i);
    __m512 acc2 = _mm512_mul_ps(x1, _mm512_loadu_ps(w1 + i));
    acc = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w0 + i), acc);
    acc2 = _mm512_fmadd_ps(x3, _mm512_loadu_ps(w3 + i), acc2);
    acc = _mm512_fmadd_ps(x2, _mm512_loadu_ps(w2 + i), acc);
    _mm512_storeu_ps(y + i, _mm512_add_ps(acc, acc2));
  }
  if (i < n) {
    __mmask16 m = tail16(n - i);
    __m512 acc = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, y + i);
    __m512 acc2 = _mm512_mul_ps(x1, _mm512_maskz_loadu_ps(m, w1 + i));
    acc = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, w0 + i), acc);
    acc2 = _mm512_fmadd_ps(x3, _mm512_maskz_loadu_ps(m, w3 + i), acc2);
    acc = _mm512_fmadd_ps(x2, _mm512_maskz_loadu_ps(m, w2 + i), acc);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(acc, acc2));
  }
}

static void axpy1(float x, const float *w, float *y, size_t n, bool first) {
  __m512 x0 = _mm512_set1_ps(x);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 acc = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + i);
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(x0, _mm512_loadu_ps(w + i), acc));
  }
  if (i < n) {
    __mmask16 m = tail16(n - i);
    __m512 acc = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, y + i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, w + i), acc));
  }
}

static void gemv_kn(const float *x, const float *w, size_t ldw, size_t k, float *y, size_t n) {
  size_t j = 0;
  for (; j + 4 <= k; j += 4) axpy4(x + j, w + j * ldw, ldw, y, n, j == 0);
  for (; j < k; j++) axpy1(x[j], w + j * ldw, y, n, j == 0);
  if (k == 0)
    for (size_t i = 0; i < n; i++) y[i] = 0.0f;
}

const kl_gemv_fns kl_gemv_avx512 = {gemv_nk, gemv_kn};
