/* Linear quantization, AVX2 level: quant_impl.h's loops compiled with AVX2 (vdivps,
 * vroundps, vcvtps2dq, eight lanes), the 256-entry table lookup of QLinearLookup
 * with byte shuffles (lookup_avx2 below) and QLinearGlobalAveragePool's sums of codes
 * with vpsadbw (sum_avx2); quant_impl.h's scalar loops are their twins, for the tail
 * and at the generic level. */
#include "backends/cpu/isa/isa_fns.h"

#include <immintrin.h>

static void lookup_avx2(const uint8_t *x, uint8_t flip, const uint8_t *table, uint8_t *y,
                        size_t n);
static uint64_t sum_avx2(const uint8_t *x, uint8_t flip, size_t n);
#define KL_QUANT_LOOKUP lookup_avx2
#define KL_QUANT_SUM sum_avx2
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

const kl_quant_fns kl_quant_avx2 = KL_QUANT_FNS;
