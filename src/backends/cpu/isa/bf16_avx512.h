/* bfloat16 loads and stores on 16 float lanes, for the *_avx512bf16.c files (compiled
 * with -mavx512bf16). A bfloat16 is the top half of a float, so widening is a shift;
 * narrowing is VCVTNEPS2BF16, round to nearest even with NaN kept, as
 * kl_f32_to_bf16 rounds. */
#ifndef KL_BF16_AVX512_H
#define KL_BF16_AVX512_H

#include "backends/cpu/isa/vmath_avx512.h"

static inline __m512 kl_bf_load(const uint16_t *p, __mmask16 m) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

static inline void kl_bf_store(uint16_t *p, __mmask16 m, __m512 v) {
  _mm256_mask_storeu_epi16(p, m, (__m256i)_mm512_cvtneps_pbh(v));
}

/* One bfloat16 as a float, for broadcast operands. */
static inline float kl_bf_scalar(const uint16_t *p) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128((int)((uint32_t)p[0] << 16))));
}

#endif
