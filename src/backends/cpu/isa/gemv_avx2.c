/* Matrix-vector products on panel-packed weights (isa_fns.h, kl_gemv_fns), AVX2 + FMA
 * level: a panel's 16 outputs are two vectors of 8, each with two accumulators (even
 * and odd rows: four FMAs in flight), x[j] broadcast once per row; the last panel's
 * tail stored under a mask. One stream of weights read front to back (as at the
 * AVX-512 level, gemv_avx512.c).
 *
 * Tiles of many rows: 6 rows x 16 outputs are 12 vectors of sums held in registers
 * (with the panel row's two vectors and a broadcast, 15 of the 16), each step of k two
 * loads of weights and six broadcasts of packed A feeding twelve FMAs, and a prefetch
 * of a line of the slice the next tiles read. oneDNN 2.6's AVX2 gemm packs the weights
 * again at every call; these are packed once. Alone, in L1, on a Zen 3 core whose FMA
 * peak is about 99 GFLOP/s: tiles of 3 to 6 rows 91-97 GFLOP/s, 2 rows 62, 1 row 46. */
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
                   size_t nc, bool acc, const float *pf, size_t npf) {                     \
    ROWS(INIT)                                                                             \
    size_t j = 0, with_pf = npf < k ? npf : k;                                             \
    for (; j < with_pf; j++, a += KL_GEMM_ROWS, wp += KL_GEMV_PANEL) {                     \
      _mm_prefetch((const char *)(pf + j * KL_GEMV_PANEL), _MM_HINT_T0);                   \
      __m256 b0 = _mm256_loadu_ps(wp), b1 = _mm256_loadu_ps(wp + 8), ai;                   \
      ROWS(STEP)                                                                           \
    }                                                                                      \
    for (; j < k; j++, a += KL_GEMM_ROWS, wp += KL_GEMV_PANEL) {                           \
      __m256 b0 = _mm256_loadu_ps(wp), b1 = _mm256_loadu_ps(wp + 8), ai;                   \
      ROWS(STEP)                                                                           \
    }                                                                                      \
    for (; j < npf; j++) _mm_prefetch((const char *)(pf + j * KL_GEMV_PANEL), _MM_HINT_T0); \
    ROWS(STORE)                                                                            \
  }
/* Tiles of 1 to 3 rows have 2 to 6 sums, fewer than the FMA units keep in flight (two
 * units, 4 cycles each: 8), and ran at a third to two thirds of a tile of six (alone,
 * in L1). They keep a second set of sums for the odd steps of k, added to the first at
 * the end. */
#define INIT2(i) INIT(i) __m256 lp##i = _mm256_setzero_ps(), hp##i = _mm256_setzero_ps();
#define STEP2(i)                                                                           \
  STEP(i)                                                                                  \
  ai = _mm256_broadcast_ss(a + KL_GEMM_ROWS + (i));                                        \
  lp##i = _mm256_fmadd_ps(ai, b2, lp##i);                                                  \
  hp##i = _mm256_fmadd_ps(ai, b3, hp##i);
#define MERGE(i)                                                                           \
  lo##i = _mm256_add_ps(lo##i, lp##i);                                                     \
  hi##i = _mm256_add_ps(hi##i, hp##i);
#define TILE2(NAME, ROWS)                                                                  \
  static void NAME(const float *a, const float *wp, size_t k, float *c, size_t ldc,       \
                   size_t nc, bool acc, const float *pf, size_t npf) {                     \
    ROWS(INIT2)                                                                            \
    size_t j = 0;                                                                          \
    for (; j + 2 <= k; j += 2, a += 2 * KL_GEMM_ROWS, wp += 2 * KL_GEMV_PANEL) {           \
      if (j < npf) _mm_prefetch((const char *)(pf + j * KL_GEMV_PANEL), _MM_HINT_T0);      \
      if (j + 1 < npf)                                                                     \
        _mm_prefetch((const char *)(pf + (j + 1) * KL_GEMV_PANEL), _MM_HINT_T0);           \
      __m256 b0 = _mm256_loadu_ps(wp), b1 = _mm256_loadu_ps(wp + 8);                       \
      __m256 b2 = _mm256_loadu_ps(wp + 16), b3 = _mm256_loadu_ps(wp + 24), ai;             \
      ROWS(STEP2)                                                                          \
    }                                                                                      \
    if (j < k) {                                                                           \
      __m256 b0 = _mm256_loadu_ps(wp), b1 = _mm256_loadu_ps(wp + 8), ai;                   \
      ROWS(STEP)                                                                           \
    }                                                                                      \
    for (; j < npf; j++) _mm_prefetch((const char *)(pf + j * KL_GEMV_PANEL), _MM_HINT_T0); \
    ROWS(MERGE)                                                                            \
    ROWS(STORE)                                                                            \
  }
TILE2(tile1, R1)
TILE2(tile2, R2)
TILE2(tile3, R3)
TILE(tile4, R4)
TILE(tile5, R5)
TILE(tile6, R6)
#undef TILE
#undef TILE2
#undef INIT
#undef INIT2
#undef STEP2
#undef MERGE
#undef STEP
#undef STORE

static void gemm_tile(const float *a, const float *wp, size_t k, size_t m, float *c, size_t ldc,
                      size_t nc, bool acc, const float *pf, size_t npf) {
  typedef void (*tile_fn)(const float *, const float *, size_t, float *, size_t, size_t, bool,
                          const float *, size_t);
  static const tile_fn tiles[KL_GEMM_ROWS] = {tile1, tile2, tile3, tile4, tile5, tile6};
  tiles[m - 1](a, wp, k, c, ldc, nc, acc, pf, npf);
}

/* A group of rows packed 8 steps of k at a time: the rows' 8 floats (two rows of zeros
 * below them) transposed to 8 steps of 8 in registers, each step stored whole at its
 * place 6 floats apart, its last two lanes overwritten by the next step's store; while
 * the step after the 8 is still in the group (its first two lanes take the last
 * store's spill), the rest one by one. A product of 128 rows spent 3% of its time
 * packing them one float at a time. */
static void pack_rows(const float *x, size_t k, size_t rows, float *out) {
  size_t j = 0;
  for (; j + 8 < k; j += 8, out += 8 * KL_GEMM_ROWS) {
    __m256 r[8], t[8];
    for (size_t i = 0; i < 8; i++)
      r[i] = i < rows ? _mm256_loadu_ps(x + i * k + j) : _mm256_setzero_ps();
    for (int i = 0; i < 8; i += 2) { /* pairs of rows, lanes interleaved */
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) { /* rows 4 at a time: steps 0 and 4, 1 and 5, ... */
      r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int s = 0; s < 4; s++) /* rows 0-3 and 4-7 of step s, in step order */
      _mm256_storeu_ps(out + s * KL_GEMM_ROWS, _mm256_permute2f128_ps(r[s], r[s + 4], 0x20));
    for (int s = 0; s < 4; s++)
      _mm256_storeu_ps(out + (s + 4) * KL_GEMM_ROWS,
                       _mm256_permute2f128_ps(r[s], r[s + 4], 0x31));
  }
  for (; j < k; j++, out += KL_GEMM_ROWS)
    for (size_t i = 0; i < KL_GEMM_ROWS; i++) out[i] = i < rows ? x[i * k + j] : 0.0f;
}

const kl_gemv_fns kl_gemv_avx2 = {gemv_panel, gemm_tile, true, pack_rows};
