/* Matrix-vector products on panel-packed weights (isa_fns.h, kl_gemv_fns), AVX-512
 * level: a panel's 16 outputs are one vector. Two panels at a time, each with two
 * accumulators (even and odd rows: four FMAs in flight), x[j] broadcast once for both;
 * the last panel's tail stored under a mask. Two streams of weights read front to back
 * are what the hardware prefetcher follows best: on a Zen 4 core, 1280 x 1024 from
 * DRAM at 24 GB/s against 16-18 for four rows of the plain [N, K] or [K, N] weights. */
#include "backends/cpu/isa/isa_fns.h"

#include <immintrin.h>

/* The products of panel p0 (and p1 when given) into a (b), over rows [j, end) of k. */
static void block(const float *x, const float *p0, const float *p1, size_t j, size_t end,
                  __m512 *a, __m512 *b) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
  if (p1) {
    for (; j + 2 <= end; j += 2) {
      __m512 x0 = _mm512_set1_ps(x[j]), x1 = _mm512_set1_ps(x[j + 1]);
      a0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(p0 + j * 16), a0);
      b0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(p1 + j * 16), b0);
      a1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(p0 + j * 16 + 16), a1);
      b1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(p1 + j * 16 + 16), b1);
    }
    if (j < end) {
      __m512 x0 = _mm512_set1_ps(x[j]);
      a0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(p0 + j * 16), a0);
      b0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(p1 + j * 16), b0);
    }
    *b = _mm512_add_ps(*b, _mm512_add_ps(b0, b1));
  } else {
    for (; j + 2 <= end; j += 2) {
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(x[j]), _mm512_loadu_ps(p0 + j * 16), a0);
      a1 = _mm512_fmadd_ps(_mm512_set1_ps(x[j + 1]), _mm512_loadu_ps(p0 + j * 16 + 16), a1);
    }
    if (j < end) a0 = _mm512_fmadd_ps(_mm512_set1_ps(x[j]), _mm512_loadu_ps(p0 + j * 16), a0);
  }
  *a = _mm512_add_ps(*a, _mm512_add_ps(a0, a1));
}

/* The products of panel p0 (and p1 when given) into a (b): blocks of KL_GEMV_BLOCK rows
 * summed apart, then added (isa_fns.h). */
static void panels(const float *x, const float *p0, const float *p1, size_t k, __m512 *a,
                   __m512 *b) {
  *a = _mm512_setzero_ps();
  *b = *a;
  for (size_t j = 0; j < k; j += KL_GEMV_BLOCK)
    block(x, p0, p1, j, k - j > KL_GEMV_BLOCK ? j + KL_GEMV_BLOCK : k, a, b);
}

static void store(float *y, size_t len, __m512 v) {
  if (len >= 16) _mm512_storeu_ps(y, v);
  else _mm512_mask_storeu_ps(y, (__mmask16)((1u << len) - 1u), v);
}

static void gemv_panel(const float *x, const float *wp, size_t k, float *y, size_t n) {
  size_t at = 0;
  __m512 a = _mm512_setzero_ps(), b = a;
  for (; at + 16 < n; at += 32, wp += 32 * k) { /* two panels, the second maybe partial */
    panels(x, wp, wp + 16 * k, k, &a, &b);
    _mm512_storeu_ps(y + at, a);
    store(y + at + 16, n - at - 16, b);
  }
  if (at < n) {
    panels(x, wp, NULL, k, &a, &b);
    store(y + at, n - at, a);
  }
}

/* Runs of many rows stay on oneDNN's products at this level (its packed brgemm
 * kernels): no tile. */
const kl_gemv_fns kl_gemv_avx512 = {gemv_panel, NULL, false, NULL};
