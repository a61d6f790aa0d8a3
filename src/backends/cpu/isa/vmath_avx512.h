/* Float math on 16 lanes, AVX-512 F/DQ (included by the *_avx512*.c files only). The
 * same approximations as vmath_generic.h (constants in vmath_coef.h), with FMA and
 * scalef, which scales by 2^n with one rounding even into the subnormals.
 *
 * min/max return their second operand when either is NaN, so clamps are written
 * max(limit, x) to let a NaN x through.
 */
#ifndef KL_VMATH_AVX512_H
#define KL_VMATH_AVX512_H

#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/vmath_coef.h"

#include <immintrin.h>

#define KL_V16(c) _mm512_set1_ps(c)

static inline __m512 kl_z_abs(__m512 x) { return _mm512_abs_ps(x); }

/* |m| with the sign of s */
static inline __m512 kl_z_copysign(__m512 m, __m512 s) {
  const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
  /* ternary logic 0xd8: bits of s where sign has them set, of m elsewhere */
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
      _mm512_castps_si512(m), _mm512_castps_si512(s), sign, 0xd8));
}

static inline __m512 kl_z_clamp01(__m512 x) {
  return _mm512_min_ps(KL_V16(1.0f), _mm512_max_ps(_mm512_setzero_ps(), x));
}

static inline __m512 kl_z_exp(__m512 x) {
  x = _mm512_max_ps(KL_V16(KL_EXP_LO), _mm512_min_ps(KL_V16(KL_EXP_HI), x));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, KL_V16(KL_EXP_LOG2E)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, KL_V16(KL_EXP_LN2_HI), x);
  r = _mm512_fnmadd_ps(n, KL_V16(KL_EXP_LN2_LO), r);
  __m512 p = KL_V16(KL_EXP_C6);
  p = _mm512_fmadd_ps(p, r, KL_V16(KL_EXP_C5));
  p = _mm512_fmadd_ps(p, r, KL_V16(KL_EXP_C4));
  p = _mm512_fmadd_ps(p, r, KL_V16(KL_EXP_C3));
  p = _mm512_fmadd_ps(p, r, KL_V16(KL_EXP_C2));
  p = _mm512_fmadd_ps(p, r, KL_V16(1.0f));
  p = _mm512_fmadd_ps(p, r, KL_V16(1.0f));
  return _mm512_scalef_ps(p, n);
}

/* num / (1 + e^-x): e^-x overflows to +inf below x = -88.7, which makes it 0 (-0, or
 * NaN for an infinite num) where the exact value is below 2^-126 times num; one
 * division and no sign select (vmath_generic.h divides e^-|x| instead, which keeps
 * those subnormal results). */
static inline __m512 kl_z_div_1pexp(__m512 num, __m512 x) {
  __m512 e = kl_z_exp(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(num, _mm512_add_ps(KL_V16(1.0f), e));
}

static inline __m512 kl_z_sigmoid(__m512 x) { return kl_z_div_1pexp(KL_V16(1.0f), x); }

static inline __m512 kl_z_tanh(__m512 x) {
  __m512 a = kl_z_abs(x), a2 = _mm512_mul_ps(a, a);
  __m512 p = KL_V16(KL_TANH_C5);
  p = _mm512_fmadd_ps(p, a2, KL_V16(KL_TANH_C4));
  p = _mm512_fmadd_ps(p, a2, KL_V16(KL_TANH_C3));
  p = _mm512_fmadd_ps(p, a2, KL_V16(KL_TANH_C2));
  p = _mm512_fmadd_ps(p, a2, KL_V16(KL_TANH_C1));
  __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(a, a2), p, a);
  __m512 e = kl_z_exp(_mm512_add_ps(_mm512_min_ps(KL_V16(KL_TANH_BIG), a),
                                    _mm512_min_ps(KL_V16(KL_TANH_BIG), a)));
  __m512 big = _mm512_sub_ps(KL_V16(1.0f),
                             _mm512_div_ps(KL_V16(2.0f), _mm512_add_ps(e, KL_V16(1.0f))));
  __mmask16 lt = _mm512_cmp_ps_mask(a, KL_V16(KL_TANH_SMALL), _CMP_LT_OQ);
  return kl_z_copysign(_mm512_mask_blend_ps(lt, big, small), x);
}

static inline __m512 kl_z_erf_q(__m512 a2) {
  __m512 q = KL_V16(KL_ERF_C6);
  q = _mm512_fmadd_ps(q, a2, KL_V16(KL_ERF_C5));
  q = _mm512_fmadd_ps(q, a2, KL_V16(KL_ERF_C4));
  q = _mm512_fmadd_ps(q, a2, KL_V16(KL_ERF_C3));
  q = _mm512_fmadd_ps(q, a2, KL_V16(KL_ERF_C2));
  q = _mm512_fmadd_ps(q, a2, KL_V16(KL_ERF_C1));
  return _mm512_fmadd_ps(q, a2, KL_V16(KL_ERF_C0));
}

static inline __m512 kl_z_erfcx(__m512 t) {
  __m512 w = _mm512_div_ps(_mm512_sub_ps(t, KL_V16(KL_ERFCX_W)),
                           _mm512_add_ps(t, KL_V16(KL_ERFCX_W)));
  __m512 g = KL_V16(KL_ERFCX_C8);
  g = _mm512_fmadd_ps(g, w, KL_V16(KL_ERFCX_C7));
  g = _mm512_fmadd_ps(g, w, KL_V16(KL_ERFCX_C6));
  g = _mm512_fmadd_ps(g, w, KL_V16(KL_ERFCX_C5));
  g = _mm512_fmadd_ps(g, w, KL_V16(KL_ERFCX_C4));
  g = _mm512_fmadd_ps(g, w, KL_V16(KL_ERFCX_C3));
  g = _mm512_fmadd_ps(g, w, KL_V16(KL_ERFCX_C2));
  g = _mm512_fmadd_ps(g, w, KL_V16(KL_ERFCX_C1));
  return _mm512_fmadd_ps(g, w, KL_V16(KL_ERFCX_C0));
}

static inline __m512 kl_z_erf(__m512 x) {
  __m512 a = kl_z_abs(x), t = _mm512_min_ps(KL_V16(KL_ERFC_BIG), a);
  __m512 small = _mm512_mul_ps(a, kl_z_erf_q(_mm512_mul_ps(a, a)));
  __m512 e = kl_z_exp(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), t), t));
  __m512 big = _mm512_fnmadd_ps(e, kl_z_erfcx(t), KL_V16(1.0f));
  __mmask16 lt = _mm512_cmp_ps_mask(a, KL_V16(KL_ERF_SMALL), _CMP_LT_OQ);
  return kl_z_copysign(_mm512_mask_blend_ps(lt, big, small), x);
}

/* x Phi(x) as in vmath_generic.h; x^2 = hi + lo exactly by FMA. */
static inline __m512 kl_z_gelu_erf(__m512 x) {
  __m512 a = kl_z_abs(x), t = _mm512_mul_ps(a, KL_V16(KL_SQRT1_2));
  __m512 e = _mm512_mul_ps(_mm512_mul_ps(KL_V16(0.5f), t), kl_z_erf_q(_mm512_mul_ps(t, t)));
  __m512 phi_small = _mm512_add_ps(KL_V16(0.5f), kl_z_copysign(e, x));
  __m512 xa = _mm512_min_ps(KL_V16(KL_GELU_BIG), a);
  __m512 hi = _mm512_mul_ps(xa, xa), lo = _mm512_fmsub_ps(xa, xa, hi);
  __m512 ex = kl_z_exp(_mm512_mul_ps(KL_V16(-0.5f), hi));
  ex = _mm512_fnmadd_ps(ex, _mm512_mul_ps(KL_V16(0.5f), lo), ex);
  __m512 half_erfc = _mm512_mul_ps(_mm512_mul_ps(KL_V16(0.5f), ex),
                                   kl_z_erfcx(_mm512_mul_ps(xa, KL_V16(KL_SQRT1_2))));
  __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
  __m512 phi_big = _mm512_mask_blend_ps(pos, half_erfc, _mm512_sub_ps(KL_V16(1.0f), half_erfc));
  __mmask16 lt = _mm512_cmp_ps_mask(t, KL_V16(KL_ERF_SMALL), _CMP_LT_OQ);
  return _mm512_mul_ps(x, _mm512_mask_blend_ps(lt, phi_big, phi_small));
}

static inline __m512 kl_z_gelu_tanh(__m512 x) {
  __m512 u = _mm512_fmadd_ps(_mm512_mul_ps(x, x), KL_V16(KL_GELU_G3), KL_V16(KL_GELU_G1));
  return kl_z_div_1pexp(x, _mm512_mul_ps(x, u));
}

/* The activation of kind k; k is a constant where this is inlined. */
static inline __attribute__((always_inline)) __m512 kl_z_act(kl_act_kind k, __m512 alpha,
                                                             __m512 beta, __m512 x) {
  const __m512 zero = _mm512_setzero_ps();
  switch (k) {
  case KL_ACT_RELU:
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), x, zero);
  case KL_ACT_LEAKY_RELU:
    return _mm512_mask_mul_ps(x, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), x, alpha);
  case KL_ACT_SIGMOID: return kl_z_sigmoid(x);
  case KL_ACT_TANH: return kl_z_tanh(x);
  case KL_ACT_EXP: return kl_z_exp(x);
  case KL_ACT_ERF: return kl_z_erf(x);
  case KL_ACT_GELU_ERF: return kl_z_gelu_erf(x);
  case KL_ACT_GELU_TANH: return kl_z_gelu_tanh(x);
  case KL_ACT_SWISH: return kl_z_div_1pexp(x, _mm512_mul_ps(alpha, x));
  case KL_ACT_HARD_SIGMOID: return kl_z_clamp01(_mm512_fmadd_ps(alpha, x, beta));
  case KL_ACT_HARD_SWISH:
    return _mm512_mul_ps(x, kl_z_clamp01(_mm512_fmadd_ps(x, KL_V16(KL_ONE_SIXTH),
                                                         KL_V16(0.5f))));
  default: return _mm512_min_ps(beta, _mm512_max_ps(alpha, x)); /* Clip */
  }
}

/* y = a op b on 16 lanes */
static inline __attribute__((always_inline)) __m512 kl_z_bin(kl_binop op, __m512 a, __m512 b) {
  switch (op) {
  case KL_BIN_ADD: return _mm512_add_ps(a, b);
  case KL_BIN_SUB: return _mm512_sub_ps(a, b);
  case KL_BIN_MUL: return _mm512_mul_ps(a, b);
  case KL_BIN_DIV: return _mm512_div_ps(a, b);
  default: return _mm512_max_ps(b, a); /* a when either is NaN */
  }
}

/* The mask of the first n < 16 lanes, for tails. */
static inline __mmask16 kl_z_tail(size_t n) { return (__mmask16)((1u << n) - 1u); }

#endif
