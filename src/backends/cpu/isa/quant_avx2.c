/* Linear quantization, AVX2 level: quant_impl.h's loops compiled with AVX2 (vdivps,
 * vroundps, vcvtps2dq, eight lanes), the 256-entry table lookup of QLinearLookup
 * with byte shuffles (lookup_avx2 below) and QLinearGlobalAveragePool's sums of codes
 * with vpsadbw (sum_avx2), and their channels-last form (sum_columns_avx2), the depthwise
 * int8 convolution with vpmaddwd (qdw_avx2), the int8 matrix-vector product with
 * vpmaddubsw (qgemv_avx2) and its form for 4 rows (qgemm_avx2), QLinearAdd and QLinearMul (qbin_avx2); quant_impl.h's scalar
 * loops are their twins, for the tail and at the generic level. */
#include "backends/cpu/isa/isa_fns.h"

#include <immintrin.h>
#include <string.h>

static void lookup_avx2(const uint8_t *x, uint8_t flip, const uint8_t *table, uint8_t *y,
                        size_t n);
static uint64_t sum_avx2(const uint8_t *x, uint8_t flip, size_t n);
static void sum_columns_avx2(const uint8_t *x, uint8_t flip, size_t stride, size_t rows,
                             size_t n, uint32_t *acc);
#ifdef KL_QUANT_AVX512 /* quant_avx512.c: VBMI's lookup where the CPU has it */
static void lookup_avx512(const uint8_t *x, uint8_t flip, const uint8_t *table, uint8_t *y,
                          size_t n);
#define KL_QUANT_LOOKUP lookup_avx512
#else
#define KL_QUANT_LOOKUP lookup_avx2
#endif
#define KL_QUANT_SUM sum_avx2
#define KL_QUANT_SUM_COLUMNS sum_columns_avx2
static void qdw_avx2(const kl_qdw *d, const uint8_t *const *taps, size_t xstep, size_t n,
                     uint8_t *y, size_t ystride);
#define KL_QUANT_QDW qdw_avx2
static void qgemv_avx2(const uint8_t *a, size_t k, const int8_t *wp, size_t n, int32_t *acc);
#define KL_QUANT_QGEMV qgemv_avx2
static void qgemm_avx2(const uint8_t *a, size_t lda, size_t rows, size_t k, const int8_t *wp,
                       size_t cols, const int32_t *comp, int32_t *y, size_t ldy);
#define KL_QUANT_QGEMM qgemm_avx2
static void qgemm16_avx2(const int16_t *a, size_t lda, size_t rows, size_t kpairs,
                         const int16_t *w0, const int16_t *w1, size_t cols, int32_t *y,
                         size_t ldy);
#define KL_QUANT_QGEMM16 qgemm16_avx2
static bool range_avx2(const float *x, size_t n, float *lo, float *hi);
#define KL_QUANT_RANGE range_avx2
#ifndef KL_QUANT_AVX512 /* AVX-512 keeps quant_impl.h's loops, in sixteen lanes */
#define KL_QUANT_QBIN(name) name##_avx2
#define KL_QUANT_QUANTIZE(name) name##_avx2
#endif
#include "backends/cpu/isa/quant_impl.h"

/* 32 codes at a time: vpshufb looks up 16-byte rows of the table by the low nibble;
 * the row the high nibble names is kept (blended in where it matches). */
static void lookup_avx2(const uint8_t *x, uint8_t flip, const uint8_t *table, uint8_t *y,
                        size_t n) {
  __m256i rows[16];
  for (int r = 0; r < 16; r++)
    rows[r] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table + 16 * r)));
  const __m256i lo_mask = _mm256_set1_epi8(0x0f), vflip = _mm256_set1_epi8((char)flip);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + i)), vflip);
    __m256i lo = _mm256_and_si256(v, lo_mask);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo_mask);
    __m256i out = _mm256_setzero_si256();
    for (int r = 0; r < 16; r++) {
      __m256i hit = _mm256_cmpeq_epi8(hi, _mm256_set1_epi8((char)r));
      out = _mm256_blendv_epi8(out, _mm256_shuffle_epi8(rows[r], lo), hit);
    }
    _mm256_storeu_si256((__m256i *)(y + i), out);
  }
  lookup(x + i, flip, table, y + i, n - i);
}

#ifdef KL_QUANT_AVX512
static void lookup_avx512(const uint8_t *x, uint8_t flip, const uint8_t *table, uint8_t *y,
                          size_t n) {
  if (kl_isa_features()->avx512_vbmi) kl_lookup_vbmi(x, flip, table, y, n);
  else lookup_avx2(x, flip, table, y, n);
}
#endif

/* DynamicQuantizeLinear's range, 32 floats a step in four sets of lanes (vminps and
 * vmaxps; a NaN lane is caught by x - x, whatever min and max made of it). */
static bool range_avx2(const float *x, size_t n, float *lo, float *hi) {
  __m256i zero_i = _mm256_setzero_si256();
  __m256 l[4], h[4], bad[4];
  for (int k = 0; k < 4; k++)
    l[k] = h[k] = bad[k] = _mm256_castsi256_ps(zero_i);
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; k++) {
      __m256 v = _mm256_loadu_ps(x + i + 8 * k);
      bad[k] = _mm256_add_ps(bad[k], _mm256_sub_ps(v, v));
      l[k] = _mm256_min_ps(l[k], v);
      h[k] = _mm256_max_ps(h[k], v);
    }
  float lv[32], hv[32], bv[32], tl, th;
  for (int k = 0; k < 4; k++) {
    _mm256_storeu_ps(lv + 8 * k, l[k]);
    _mm256_storeu_ps(hv + 8 * k, h[k]);
    _mm256_storeu_ps(bv + 8 * k, bad[k]);
  }
  bool ok = range(x + i, n - i, &tl, &th);
  for (int k = 0; k < 32; k++) {
    ok = ok && bv[k] == 0.0f;
    tl = lv[k] < tl ? lv[k] : tl;
    th = hv[k] > th ? hv[k] : th;
  }
  *lo = tl;
  *hi = th;
  return ok;
}

/* 32 codes at a time: vpsadbw against zero adds each 8 bytes into a 64-bit lane. */
static uint64_t sum_avx2(const uint8_t *x, uint8_t flip, size_t n) {
  const __m256i zero = _mm256_setzero_si256(), vflip = _mm256_set1_epi8((char)flip);
  __m256i acc = zero;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + i)), vflip);
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(v, zero));
  }
  uint64_t lanes[4];
  _mm256_storeu_si256((__m256i *)lanes, acc);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + sum_codes(x + i, flip, n - i);
}

/* 32 channels at a time: each row's codes widened to 16 bits and added in two vectors,
 * which hold 257 rows of 255 at most, so they are widened into the 32-bit sums every
 * 256 rows. */
static __m256i widen_lo(__m256i v) { return _mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)); }
static __m256i widen_hi(__m256i v) { return _mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)); }

static void sum_columns_avx2(const uint8_t *x, uint8_t flip, size_t stride, size_t rows,
                             size_t n, uint32_t *acc) {
  const __m256i vflip = _mm256_set1_epi8((char)flip);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i s[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
    for (size_t r0 = 0; r0 < rows; r0 += 256) {
      size_t end = rows - r0 < 256 ? rows : r0 + 256;
      __m256i lo = _mm256_setzero_si256(), hi = lo;
      for (size_t r = r0; r < end; r++) {
        __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + r * stride + i)),
                                     vflip);
        lo = _mm256_add_epi16(lo, _mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)));
        hi = _mm256_add_epi16(hi, _mm256_cvtepu8_epi16(_mm256_extracti128_si256(v, 1)));
      }
      s[0] = _mm256_add_epi32(s[0], widen_lo(lo));
      s[1] = _mm256_add_epi32(s[1], widen_hi(lo));
      s[2] = _mm256_add_epi32(s[2], widen_lo(hi));
      s[3] = _mm256_add_epi32(s[3], widen_hi(hi));
    }
    for (int k = 0; k < 4; k++) _mm256_storeu_si256((__m256i *)(acc + i + 8 * k), s[k]);
  }
  if (i < n) sum_columns(x + i, flip, stride, rows, n - i, acc + i);
}

/* 16 channels of pixels p (and p + 1, when two): the codes of taps 2j and 2j + 1
 * widened to 16 bits and interleaved in each 128-bit lane (channels 0-3, 8-11 in lo;
 * 4-7, 12-15 in hi: the packed weights' order), each pair multiplied by its two weights
 * and added into 32 bits by vpmaddwd (exact: no saturation); then scaled in float32,
 * rounded by vcvtps2dq (to nearest even), and packed back into channel order. Two
 * pixels share the loads of the weights and tap pointers. */
static void qdw_store(const kl_qdw *d, __m256i lo, __m256i hi, size_t c0, uint8_t *y) {
  const __m256 qlo = _mm256_set1_ps((float)(d->lo - d->zy));
  const __m256 qhi = _mm256_set1_ps((float)(d->hi - d->zy));
  const __m256i zy = _mm256_set1_epi32(d->zy);
  __m256 flo = _mm256_mul_ps(_mm256_cvtepi32_ps(lo), _mm256_loadu_ps(d->scale + c0));
  __m256 fhi = _mm256_mul_ps(_mm256_cvtepi32_ps(hi), _mm256_loadu_ps(d->scale + c0 + 8));
  flo = _mm256_min_ps(_mm256_max_ps(flo, qlo), qhi);
  fhi = _mm256_min_ps(_mm256_max_ps(fhi, qlo), qhi);
  lo = _mm256_add_epi32(_mm256_cvtps_epi32(flo), zy);
  hi = _mm256_add_epi32(_mm256_cvtps_epi32(fhi), zy);
  __m256i v16 = _mm256_packs_epi32(lo, hi); /* channels 0-7 | 8-15, in range */
  __m256i v8 = d->lo < 0 ? _mm256_packs_epi16(v16, v16) : _mm256_packus_epi16(v16, v16);
  v8 = _mm256_permute4x64_epi64(v8, 0x08); /* qwords 0 and 2 */
  _mm_storeu_si128((__m128i *)(y + c0), _mm256_castsi256_si128(v8));
}

static __m256i widen16(const uint8_t *x) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)x));
}

static void qdw_block(const kl_qdw *d, const uint8_t *const *taps, size_t off, size_t xstep,
                      bool two, size_t c0, uint8_t *y, size_t ystride) {
  const int16_t *w = d->w + c0 * 2;
  __m256i lo0 = _mm256_loadu_si256((const __m256i *)(d->bias + c0));
  __m256i hi0 = _mm256_loadu_si256((const __m256i *)(d->bias + c0 + 8));
  __m256i lo1 = lo0, hi1 = hi0;
  off += c0;
  size_t off1 = two ? off + xstep : off;
  for (size_t t = 0; t < d->k; t += 2, w += d->c16 * 2) {
    const uint8_t *a = taps[t], *b = taps[t + 1 < d->k ? t + 1 : t]; /* odd: weight 0 */
    __m256i wlo = _mm256_loadu_si256((const __m256i *)w);
    __m256i whi = _mm256_loadu_si256((const __m256i *)(w + 16));
    __m256i xa = widen16(a + off), xb = widen16(b + off);
    lo0 = _mm256_add_epi32(lo0, _mm256_madd_epi16(_mm256_unpacklo_epi16(xa, xb), wlo));
    hi0 = _mm256_add_epi32(hi0, _mm256_madd_epi16(_mm256_unpackhi_epi16(xa, xb), whi));
    xa = widen16(a + off1), xb = widen16(b + off1);
    lo1 = _mm256_add_epi32(lo1, _mm256_madd_epi16(_mm256_unpacklo_epi16(xa, xb), wlo));
    hi1 = _mm256_add_epi32(hi1, _mm256_madd_epi16(_mm256_unpackhi_epi16(xa, xb), whi));
  }
  qdw_store(d, lo0, hi0, c0, y);
  if (two) qdw_store(d, lo1, hi1, c0, y + ystride);
}

static void qdw_avx2(const kl_qdw *d, const uint8_t *const *taps, size_t xstep, size_t n,
                     uint8_t *y, size_t ystride) {
  if (d->c < 16) {
    qdw(d, taps, xstep, n, y, ystride);
    return;
  }
  size_t full = d->c / 16 * 16;
  for (size_t p = 0; p < n; p += 2) {
    bool two = p + 1 < n;
    for (size_t c0 = 0; c0 < full; c0 += 16)
      qdw_block(d, taps, p * xstep, xstep, two, c0, y + p * ystride, ystride);
    if (full < d->c) qdw_pixel(d, taps, p * xstep, full, y + p * ystride);
    if (two && full < d->c) qdw_pixel(d, taps, (p + 1) * xstep, full, y + (p + 1) * ystride);
  }
}

/* Two panels of 8 columns at a time: 4 codes of a broadcast to every column, vpmaddubsw
 * adds each column's 2 pairs of products in 16 bits (exact for 7-bit weights), vpmaddwd
 * by ones adds the two pairs into 32 bits. */
static void qgemv_avx2(const uint8_t *a, size_t k, const int8_t *wp, size_t n, int32_t *acc) {
  if (n < KL_QGEMV_PANEL) {
    qgemv(a, k, wp, n, acc);
    return;
  }
  size_t groups = (k + 3) / 4, panels = (n + KL_QGEMV_PANEL - 1) / KL_QGEMV_PANEL;
  const __m256i ones = _mm256_set1_epi16(1);
  for (size_t p = 0; p < panels; p += 2) {
    bool two = p + 1 < panels;
    const int8_t *w0 = wp + p * groups * 32, *w1 = two ? w0 + groups * 32 : w0;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0;
    for (size_t g = 0; g < groups; g++) {
      int32_t four;
      memcpy(&four, a + 4 * g, 4);
      __m256i av = _mm256_set1_epi32(four);
      __m256i p0 = _mm256_maddubs_epi16(av, _mm256_loadu_si256((const __m256i *)(w0 + g * 32)));
      __m256i p1 = _mm256_maddubs_epi16(av, _mm256_loadu_si256((const __m256i *)(w1 + g * 32)));
      s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, ones));
      s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, ones));
    }
    int32_t out[2 * KL_QGEMV_PANEL];
    _mm256_storeu_si256((__m256i *)out, s0);
    _mm256_storeu_si256((__m256i *)(out + KL_QGEMV_PANEL), s1);
    size_t j0 = p * KL_QGEMV_PANEL, m = n - j0 < 2 * KL_QGEMV_PANEL ? n - j0 : 2 * KL_QGEMV_PANEL;
    memcpy(acc + j0, out, m * sizeof *acc);
  }
}

/* 4 rows against two panels (16 columns) at a time: each row's 4 codes of a group
 * broadcast, vpmaddubsw with each panel's 32 weight bytes (the pairs of products in 16
 * bits, exact for |B| <= 64), vpmaddwd by ones adds the pairs into the 8 int32 sums of
 * the row: 8 accumulators, the weights loaded once for the 4 rows. Rows past `rows`
 * read row 0 again (computed, not stored); a last group of fewer than 4 codes is read
 * byte by byte (no read past the row's k). */
#define QG_ROW(s0, s1, av)                                                              \
  do {                                                                                  \
    __m256i v_ = (av);                                                                  \
    s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(v_, b0), ones));   \
    s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(v_, b1), ones));   \
  } while (0)

static inline __m256i bcast4(const uint8_t *p) {
  int32_t four;
  memcpy(&four, p, 4);
  return _mm256_set1_epi32(four);
}

static void qgemm_avx2(const uint8_t *a, size_t lda, size_t rows, size_t k, const int8_t *wp,
                       size_t cols, const int32_t *comp, int32_t *y, size_t ldy) {
  size_t groups = (k + 3) / 4, full = k / 4;
  const int8_t *w0 = wp, *w1 = cols > KL_QGEMV_PANEL ? wp + groups * 32 : wp;
  const uint8_t *r0 = a, *r1 = rows > 1 ? a + lda : a, *r2 = rows > 2 ? a + 2 * lda : a,
                *r3 = rows > 3 ? a + 3 * lda : a;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s00 = _mm256_setzero_si256(), s01 = s00, s10 = s00, s11 = s00, s20 = s00,
          s21 = s00, s30 = s00, s31 = s00;
  for (size_t g = 0; g < full; g++) {
    __m256i b0 = _mm256_loadu_si256((const __m256i *)(w0 + g * 32));
    __m256i b1 = _mm256_loadu_si256((const __m256i *)(w1 + g * 32));
    QG_ROW(s00, s01, bcast4(r0 + 4 * g));
    QG_ROW(s10, s11, bcast4(r1 + 4 * g));
    QG_ROW(s20, s21, bcast4(r2 + 4 * g));
    QG_ROW(s30, s31, bcast4(r3 + 4 * g));
  }
  if (full < groups) {
    uint8_t t[4][4] = {{0}};
    const uint8_t *r[4] = {r0, r1, r2, r3};
    for (int q = 0; q < 4; q++) memcpy(t[q], r[q] + 4 * full, k - 4 * full);
    __m256i b0 = _mm256_loadu_si256((const __m256i *)(w0 + full * 32));
    __m256i b1 = _mm256_loadu_si256((const __m256i *)(w1 + full * 32));
    QG_ROW(s00, s01, bcast4(t[0]));
    QG_ROW(s10, s11, bcast4(t[1]));
    QG_ROW(s20, s21, bcast4(t[2]));
    QG_ROW(s30, s31, bcast4(t[3]));
  }
  __m256i s[4][2] = {{s00, s01}, {s10, s11}, {s20, s21}, {s30, s31}};
  if (cols == 2 * KL_QGEMV_PANEL) {
    __m256i c0 = _mm256_loadu_si256((const __m256i *)comp);
    __m256i c1 = _mm256_loadu_si256((const __m256i *)(comp + 8));
    for (size_t q = 0; q < rows; q++) {
      _mm256_storeu_si256((__m256i *)(y + q * ldy), _mm256_sub_epi32(s[q][0], c0));
      _mm256_storeu_si256((__m256i *)(y + q * ldy + 8), _mm256_sub_epi32(s[q][1], c1));
    }
    return;
  }
  for (size_t q = 0; q < rows; q++) {
    int32_t out[2 * KL_QGEMV_PANEL];
    _mm256_storeu_si256((__m256i *)out, s[q][0]);
    _mm256_storeu_si256((__m256i *)(out + 8), s[q][1]);
    for (size_t j = 0; j < cols; j++) y[q * ldy + j] = out[j] - comp[j];
  }
}

/* The wide product (isa_fns.h), 4 rows x 16 columns a step of 2 k: each row's pair of
 * int16 values broadcast to the 8 lanes, vpmaddwd against each panel's 8 columns x 2 k
 * (exact: the pair's sum of products fits int32), vpaddd into the 8 accumulators. */
#define QG16_ROW(s0, s1, av)                                                            \
  do {                                                                                  \
    __m256i v_ = (av);                                                                  \
    s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(v_, b0));                               \
    s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(v_, b1));                               \
  } while (0)

static inline __m256i bcast_pair(const int16_t *p) {
  int32_t two;
  memcpy(&two, p, 4);
  return _mm256_set1_epi32(two);
}

static void qgemm16_avx2(const int16_t *a, size_t lda, size_t rows, size_t kpairs,
                         const int16_t *w0, const int16_t *w1, size_t cols, int32_t *y,
                         size_t ldy) {
  const int16_t *r0 = a, *r1 = rows > 1 ? a + lda : a, *r2 = rows > 2 ? a + 2 * lda : a,
                *r3 = rows > 3 ? a + 3 * lda : a;
  __m256i s00 = _mm256_setzero_si256(), s01 = s00, s10 = s00, s11 = s00, s20 = s00,
          s21 = s00, s30 = s00, s31 = s00;
  for (size_t g = 0; g < kpairs; g++) {
    __m256i b0 = _mm256_loadu_si256((const __m256i *)(w0 + g * 16));
    __m256i b1 = _mm256_loadu_si256((const __m256i *)(w1 + g * 16));
    QG16_ROW(s00, s01, bcast_pair(r0 + 2 * g));
    QG16_ROW(s10, s11, bcast_pair(r1 + 2 * g));
    QG16_ROW(s20, s21, bcast_pair(r2 + 2 * g));
    QG16_ROW(s30, s31, bcast_pair(r3 + 2 * g));
  }
  __m256i s[4][2] = {{s00, s01}, {s10, s11}, {s20, s21}, {s30, s31}};
  for (size_t q = 0; q < rows; q++) {
    int32_t out[2 * KL_QGEMV_PANEL];
    int32_t *dst = cols == 2 * KL_QGEMV_PANEL ? y + q * ldy : out;
    _mm256_storeu_si256((__m256i *)dst, s[q][0]);
    _mm256_storeu_si256((__m256i *)(dst + 8), s[q][1]);
    if (dst == out) memcpy(y + q * ldy, out, cols * sizeof *y);
  }
}

#ifndef KL_QUANT_AVX512
/* QLinearAdd and QLinearMul, 32 codes at a time, the operations of quant_impl.h's
 * QBIN_T in the same order (so the same bits): each operand's codes widened to int32
 * less the zero point, converted (exact) and scaled, the two added or multiplied,
 * divided by Y's scale, NaN to 0, clamped, rounded to nearest even by vcvtps2dq (the
 * rounding mode rintf uses), the zero point added, packed to bytes. The loop the
 * compiler made of QBIN_T took about 3 instructions an element: widening through
 * 16 bits, vroundps and a truncating conversion, the pack through masks. */
#define DEQ8(T, p, z, s)                                                                  \
  _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(                                     \
                    QB_WIDEN_##T(_mm_loadl_epi64((const __m128i *)(p))), (z))),          \
                (s))
#define QB_WIDEN_uint8_t _mm256_cvtepu8_epi32
#define QB_WIDEN_int8_t _mm256_cvtepi8_epi32
#define QB_PACK_uint8_t _mm256_packus_epi16
#define QB_PACK_int8_t _mm256_packs_epi16
#define QB_OP_qadd _mm256_add_ps
#define QB_OP_qmul _mm256_mul_ps

/* 8 quotients to codes: NaN to 0, clamped to [lo, hi] (the codes' range
 * less the zero point), rounded to nearest even (vcvtps2dq, as rintf), z added. */
static inline __m256i qb_codes8(__m256 r, __m256 lo, __m256 hi, __m256i z) {
  r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_EQ_OQ));
  return _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi)), z);
}

/* 4 x 8 codes (int32 within T's range) packed to 32 bytes of T in order at y. */
#define QB_STORE32(T, y, q)                                                              \
  _mm256_storeu_si256(                                                                   \
      (__m256i *)(y),                                                                    \
      _mm256_permutevar8x32_epi32(QB_PACK_##T(_mm256_packs_epi32(q[0], q[1]),           \
                                              _mm256_packs_epi32(q[2], q[3])),          \
                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)))

#define QBIN_AVX2(T, LO, HI, NAME)                                                        \
  static void NAME##_##T##_avx2(const T *a, float sa, int32_t za, const T *b, float sb,  \
                                int32_t zb, float sc, int32_t zc, T *y, size_t n,         \
                                size_t bstep) {                                           \
    const __m256i vza = _mm256_set1_epi32(za), vzb = _mm256_set1_epi32(zb),               \
                  vzc = _mm256_set1_epi32(zc);                                            \
    const __m256 vsa = _mm256_set1_ps(sa), vsb = _mm256_set1_ps(sb),                      \
                 vsc = _mm256_set1_ps(sc), vlo = _mm256_set1_ps((float)(LO - zc)),        \
                 vhi = _mm256_set1_ps((float)(HI - zc)),                                  \
                 b0 = _mm256_set1_ps(bstep || !n ? 0.0f : (float)((int32_t)b[0] - zb) * sb); \
    size_t i = 0;                                                                         \
    for (; i + 32 <= n; i += 32) {                                                        \
      __m256i q[4];                                                                       \
      for (int k = 0; k < 4; k++) {                                                       \
        __m256 fa = DEQ8(T, a + i + 8 * k, vza, vsa);                                     \
        __m256 fb = bstep ? DEQ8(T, b + i + 8 * k, vzb, vsb) : b0;                        \
        q[k] = qb_codes8(_mm256_div_ps(QB_OP_##NAME(fa, fb), vsc), vlo, vhi, vzc);        \
      }                                                                                   \
      QB_STORE32(T, y + i, q);                                                            \
    }                                                                                     \
    NAME##_##T(a + i, sa, za, bstep ? b + i : b, sb, zb, sc, zc, y + i, n - i, bstep);    \
  }

QBIN_AVX2(uint8_t, 0, 255, qadd)
QBIN_AVX2(int8_t, -128, 127, qadd)
QBIN_AVX2(uint8_t, 0, 255, qmul)
QBIN_AVX2(int8_t, -128, 127, qmul)

/* QuantizeLinear (and DynamicQuantizeLinear's codes), 32 floats at a time, QUANTIZE_T's
 * operations in its order: the division, NaN to 0, the clamp, vcvtps2dq's rounding to
 * nearest even, the zero point, one pack. */
#define QUANTIZE_AVX2(T, LO, HI)                                                          \
  static void quantize_##T##_avx2(const float *x, float scale, int32_t zp, T *y,          \
                                  size_t n) {                                             \
    const __m256 vs = _mm256_set1_ps(scale), vlo = _mm256_set1_ps((float)(LO - zp)),      \
                 vhi = _mm256_set1_ps((float)(HI - zp));                                  \
    const __m256i vzp = _mm256_set1_epi32(zp);                                            \
    size_t i = 0;                                                                         \
    for (; i + 32 <= n; i += 32) {                                                        \
      __m256i q[4];                                                                       \
      for (int k = 0; k < 4; k++)                                                         \
        q[k] = qb_codes8(_mm256_div_ps(_mm256_loadu_ps(x + i + 8 * k), vs), vlo, vhi, vzp); \
      QB_STORE32(T, y + i, q);                                                            \
    }                                                                                     \
    quantize_##T(x + i, scale, zp, y + i, n - i);                                         \
  }

QUANTIZE_AVX2(uint8_t, 0, 255)
QUANTIZE_AVX2(int8_t, -128, 127)
#endif

#ifndef KL_QUANT_AVX2_NAME /* quant_avx512.c compiles this file again */
#define KL_QUANT_AVX2_NAME kl_quant_avx2
#endif
const kl_quant_fns KL_QUANT_AVX2_NAME = KL_QUANT_FNS;
