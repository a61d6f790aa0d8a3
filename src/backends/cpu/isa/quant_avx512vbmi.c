/* QLinearLookup's 256-entry table lookup with AVX512-VBMI (isa_fns.h, kl_lookup_vbmi;
 * compiled with -mavx512vbmi, run only where the CPU has it). The table is four
 * registers of 64 codes; vpermi2b looks 64 codes up at once in a pair of them (128
 * entries: the index's low 7 bits), once in the low pair and once in the high pair, and
 * the code's top bit picks between the two. Three shuffles per 64 codes where AVX2's
 * lookup (quant_avx2.c) takes 32 (a vpshufb per 16-entry row, each 32 codes): that one
 * is bound by the shuffle port, half a cycle a code. The tail is one masked step. */
#include "backends/cpu/isa/isa_fns.h"

#include <immintrin.h>

void kl_lookup_vbmi(const uint8_t *x, uint8_t flip, const uint8_t *table, uint8_t *y, size_t n) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
  const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
  const __m512i vflip = _mm512_set1_epi8((char)flip);
  for (size_t i = 0; i < n; i += 64) {
    __mmask64 m = n - i >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (n - i)) - 1;
    __m512i v = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, x + i), vflip);
    __m512i lo = _mm512_permutex2var_epi8(t0, v, t1), hi = _mm512_permutex2var_epi8(t2, v, t3);
    _mm512_mask_storeu_epi8(y + i, m, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi));
  }
}
