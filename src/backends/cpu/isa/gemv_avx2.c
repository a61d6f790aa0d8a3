/* Matrix-vector products on panel-packed weights (isa_fns.h, kl_gemv_fns), AVX2 + FMA
 * level: a panel's 16 outputs are two vectors of 8, each with two accumulators (even
 * and odd rows: four FMAs in flight), x[j] broadcast once per row; the last panel's
 * tail stored under a mask. One stream of weights read front to back (as at the
 * AVX-512 level, gemv_avx512.c).
 *
 * Tiles of many rows: 6 rows x 16 outputs are 12 vectors of sums held in registers
 * (with the panel row's two vectors and a broadcast, 15 of the 16), each step of k two
 * loads of weights and six broadcasts of packed A feeding twelve FMAs. oneDNN 2.6's
 * AVX2 gemm packs the weights again at every call; these are packed once. */
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
    __m256 ta = _mm256_setzero_ps(), tb = ta;
    for (size_t j = 0; j < k;) { /* blocks of KL_GEMV_BLOCK rows summed apart (isa_fns.h) */
      size_t end = k - j > KL_GEMV_BLOCK ? j + KL_GEMV_BLOCK : k;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
      for (; j + 2 <= end; j += 2) {
        __m256 x0 = _mm256_broadcast_ss(x + j), x1 = _mm256_broadcast_ss(x + j + 1);
        const float *r = wp + j * 16;
        a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(r), a0);
        b0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(r + 8), b0);
        a1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(r + 16), a1);
        b1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(r + 24), b1);
      }
      if (j < end) {
        __m256 x0 = _mm256_broadcast_ss(x + j);
        a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(wp + j * 16), a0);
        b0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(wp + j * 16 + 8), b0);
        j++;
      }
      ta = _mm256_add_ps(ta, _mm256_add_ps(a0, a1));
      tb = _mm256_add_ps(tb, _mm256_add_ps(b0, b1));
    }
    size_t len = n - at;
    store(y + at, len, ta);
    if (len > 8) store(y + at + 8, len - 8, tb);
  }
}

/* c row i's 16 columns (nc of them real) from the two vectors lo, hi. */
static inline void store_row(float *c, size_t nc, __m256 lo, __m256 hi) {
  if (nc == 16) {
    _mm256_storeu_ps(c, lo);
    _mm256_storeu_ps(c + 8, hi);
    return;
  }
  store(c, nc, lo);
  if (nc > 8) store(c + 8, nc - 8, hi);
}

static inline __m256 load_part(const float *c, size_t len) {
  if (len >= 8) return _mm256_loadu_ps(c);
  return len > 0 ? _mm256_maskload_ps(c, tail8(len)) : _mm256_setzero_ps();
}

/* Tiles of M rows (a constant, 1 to 6) by 16 outputs: 2M sums in named registers (an
 * array indexed by a run-time row count is kept in memory by gcc, storing every sum at
 * every step: three times slower), so a tile of fewer rows does no work for the rows
 * it lacks. The pass's sums start from zero and are added to c at the end, its rows
 * fetched while they are made: c is rows far apart in memory (a page each, often out
 * of cache), and loading them first stalled every tile (25% of a run of 128 rows). */
#define R1(X) X(0)
#define R2(X) R1(X) X(1)
#define R3(X) R2(X) X(2)
#define R4(X) R3(X) X(3)
#define R5(X) R4(X) X(4)
#define R6(X) R5(X) X(5)
#define INIT(i)                                                                            \
  __m256 lo##i = _mm256_setzero_ps(), hi##i = _mm256_setzero_ps();                         \
  if (acc) {                                                                               \
    _mm_prefetch((const char *)(c + (i) * ldc), _MM_HINT_T0);                              \
    _mm_prefetch((const char *)(c + (i) * ldc + nc - 1), _MM_HINT_T0);                     \
  }
#define STEP(i)                                                                            \
  ai = _mm256_broadcast_ss(a + (i));                                                       \
  lo##i = _mm256_fmadd_ps(ai, b0, lo##i);                                                  \
  hi##i = _mm256_fmadd_ps(ai, b1, hi##i);
#define STORE(i)                                                                           \
  if (acc) {                                                                               \
    lo##i = _mm256_add_ps(load_part(c + (i) * ldc, nc), lo##i);                            \
    hi##i = _mm256_add_ps(load_part(c + (i) * ldc + 8, nc > 8 ? nc - 8 : 0), hi##i);       \
  }                                                                                        \
  store_row(c + (i) * ldc, nc, lo##i, hi##i);
#define TILE(NAME, ROWS)                                                                   \
  static void NAME(const float *a, const float *wp, size_t k, float *c, size_t ldc,       \
                   size_t nc, bool acc) {                                                  \
    ROWS(INIT)                                                                             \
    for (size_t j = 0; j < k; j++, a += KL_GEMM_ROWS, wp += KL_GEMV_PANEL) {               \
      __m256 b0 = _mm256_loadu_ps(wp), b1 = _mm256_loadu_ps(wp + 8), ai;                   \
      ROWS(STEP)                                                                           \
    }                                                                                      \
    ROWS(STORE)                                                                            \
  }
TILE(tile1, R1)
TILE(tile2, R2)
TILE(tile3, R3)
TILE(tile4, R4)
TILE(tile5, R5)
TILE(tile6, R6)
#undef TILE
#undef INIT
#undef STEP
#undef STORE

static void gemm_tile(const float *a, const float *wp, size_t k, size_t m, float *c, size_t ldc,
                      size_t nc, bool acc) {
  typedef void (*tile_fn)(const float *, const float *, size_t, float *, size_t, size_t, bool);
  static const tile_fn tiles[KL_GEMM_ROWS] = {tile1, tile2, tile3, tile4, tile5, tile6};
  tiles[m - 1](a, wp, k, c, ldc, nc, acc);
}

const kl_gemv_fns kl_gemv_avx2 = {gemv_panel, gemm_tile, true};
