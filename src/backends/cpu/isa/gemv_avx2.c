/* Matrix-vector products on panel-packed weights (isa_fns.h, kl_gemv_fns), AVX2 + FMA
 * level: a panel's 16 outputs are two vectors of 8, each with two accumulators (even
 * and odd rows: four FMAs in flight), x[j] broadcast once per row; the last panel's
 * tail stored under a mask. One stream of weights read front to back (as at the
 * AVX-512 level, gemv_avx512.c). */
#include "backends/cpu/isa/isa_fns.h"

#include <immintrin.h>

/* Lane mask of the first n < 8 lanes. */
static __m256i tail8(size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static void store(float *y, size_t len, __m256 v) {
  if (len >= 8) _mm256_storeu_ps(y, v);
  else if (len > 0) _mm256_maskstore_ps(y, tail8(len), v);
}

static void gemv_panel(const float *x, const float *wp, size_t k, float *y, size_t n) {
  for (size_t at = 0; at < n; at += 16, wp += 16 * k) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
    size_t j = 0;
    for (; j + 2 <= k; j += 2) {
      __m256 x0 = _mm256_broadcast_ss(x + j), x1 = _mm256_broadcast_ss(x + j + 1);
      const float *r = wp + j * 16;
      a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(r), a0);
      b0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(r + 8), b0);
      a1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(r + 16), a1);
      b1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(r + 24), b1);
    }
    if (j < k) {
      __m256 x0 = _mm256_broadcast_ss(x + j);
      a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(wp + j * 16), a0);
      b0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(wp + j * 16 + 8), b0);
    }
    size_t len = n - at;
    store(y + at, len, _mm256_add_ps(a0, a1));
    if (len > 8) store(y + at + 8, len - 8, _mm256_add_ps(b0, b1));
  }
}

const kl_gemv_fns kl_gemv_avx2 = {gemv_panel};
