/* Float math on 8 lanes, AVX2 + FMA (included by the *_avx2.c files only). The same
 * approximations as vmath_generic.h (constants in vmath_coef.h).
 *
 * min/max return their second operand when either is NaN, so clamps are written
 * max(limit, x) to let a NaN x through; selects are blendv(no, yes, mask).
 */
#ifndef KL_VMATH_AVX2_H
#define KL_VMATH_AVX2_H

#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/vmath_coef.h"

#include <immintrin.h>

#define KL_V8(c) _mm256_set1_ps(c)

static inline __m256 kl_y_sign(void) { return _mm256_set1_ps(-0.0f); }
static inline __m256 kl_y_abs(__m256 x) { return _mm256_andnot_ps(kl_y_sign(), x); }

/* |m| with the sign of s */
static inline __m256 kl_y_copysign(__m256 m, __m256 s) {
  return _mm256_or_ps(_mm256_andnot_ps(kl_y_sign(), m), _mm256_and_ps(kl_y_sign(), s));
}

static inline __m256 kl_y_clamp01(__m256 x) {
  return _mm256_min_ps(KL_V8(1.0f), _mm256_max_ps(_mm256_setzero_ps(), x));
}

/* 2^n for integer lanes -75 <= n <= 64 (normal floats). */
static inline __m256 kl_y_pow2i(__m256i n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}

/* e^x = p * 2^n for x already clamped: *n = round(x / ln 2), the polynomial p of the
 * remainder returned (kl_y_exp and kl_y_exp_1p differ only in the clamp and 2^n) */
static inline __m256 kl_y_exp_poly(__m256 x, __m256 *n) {
  *n = _mm256_round_ps(_mm256_mul_ps(x, KL_V8(KL_EXP_LOG2E)),
                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(*n, KL_V8(KL_EXP_LN2_HI), x);
  r = _mm256_fnmadd_ps(*n, KL_V8(KL_EXP_LN2_LO), r);
  __m256 p = KL_V8(KL_EXP_C6);
  p = _mm256_fmadd_ps(p, r, KL_V8(KL_EXP_C5));
  p = _mm256_fmadd_ps(p, r, KL_V8(KL_EXP_C4));
  p = _mm256_fmadd_ps(p, r, KL_V8(KL_EXP_C3));
  p = _mm256_fmadd_ps(p, r, KL_V8(KL_EXP_C2));
  p = _mm256_fmadd_ps(p, r, KL_V8(1.0f));
  return _mm256_fmadd_ps(p, r, KL_V8(1.0f));
}

static inline __m256 kl_y_exp(__m256 x) {
  __m256 n, p = kl_y_exp_poly(
      _mm256_max_ps(KL_V8(KL_EXP_LO), _mm256_min_ps(KL_V8(KL_EXP_HI), x)), &n);
  /* 2^n in two normal halves (n is in [-150, 128]); a NaN lane converts to INT_MIN,
   * whose garbage exponent is harmless since p is NaN there too */
  __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1);
  return _mm256_mul_ps(_mm256_mul_ps(p, kl_y_pow2i(n1)), kl_y_pow2i(_mm256_sub_epi32(ni, n1)));
}

/* e^x for 1 + e^x: x clamped to [-87, KL_EXP_HI], where 2^n is one float (normal, or
 * +inf for n = 128 past e^88.72, as kl_y_exp gives; kl_y_exp builds 2^n in two halves
 * to reach the subnormal results of Exp). 1 + e^x is exactly 1 below -87. 22% less time
 * for a Silu than through kl_y_exp (0.42 against 0.54 ns an element, one Zen 3 core, in
 * L1). A NaN x stays NaN through p (the clamps let it through). */
static inline __m256 kl_y_exp_1p(__m256 x) {
  __m256 n, p =
      kl_y_exp_poly(_mm256_max_ps(KL_V8(-87.0f), _mm256_min_ps(KL_V8(KL_EXP_HI), x)), &n);
  return _mm256_mul_ps(p, kl_y_pow2i(_mm256_cvtps_epi32(n)));
}

/* num / (1 + e^-x), as kl_z_div_1pexp in vmath_avx512.h */
static inline __m256 kl_y_div_1pexp(__m256 num, __m256 x) {
  __m256 e = kl_y_exp_1p(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(num, _mm256_add_ps(KL_V8(1.0f), e));
}

static inline __m256 kl_y_sigmoid(__m256 x) { return kl_y_div_1pexp(KL_V8(1.0f), x); }

static inline __m256 kl_y_tanh(__m256 x) {
  __m256 a = kl_y_abs(x), a2 = _mm256_mul_ps(a, a);
  __m256 p = KL_V8(KL_TANH_C5);
  p = _mm256_fmadd_ps(p, a2, KL_V8(KL_TANH_C4));
  p = _mm256_fmadd_ps(p, a2, KL_V8(KL_TANH_C3));
  p = _mm256_fmadd_ps(p, a2, KL_V8(KL_TANH_C2));
  p = _mm256_fmadd_ps(p, a2, KL_V8(KL_TANH_C1));
  __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(a, a2), p, a);
  __m256 ac = _mm256_min_ps(KL_V8(KL_TANH_BIG), a);
  __m256 e = kl_y_exp(_mm256_add_ps(ac, ac));
  __m256 big = _mm256_sub_ps(KL_V8(1.0f),
                             _mm256_div_ps(KL_V8(2.0f), _mm256_add_ps(e, KL_V8(1.0f))));
  __m256 lt = _mm256_cmp_ps(a, KL_V8(KL_TANH_SMALL), _CMP_LT_OQ);
  return kl_y_copysign(_mm256_blendv_ps(big, small, lt), x);
}

static inline __m256 kl_y_erf_q(__m256 a2) {
  __m256 q = KL_V8(KL_ERF_C6);
  q = _mm256_fmadd_ps(q, a2, KL_V8(KL_ERF_C5));
  q = _mm256_fmadd_ps(q, a2, KL_V8(KL_ERF_C4));
  q = _mm256_fmadd_ps(q, a2, KL_V8(KL_ERF_C3));
  q = _mm256_fmadd_ps(q, a2, KL_V8(KL_ERF_C2));
  q = _mm256_fmadd_ps(q, a2, KL_V8(KL_ERF_C1));
  return _mm256_fmadd_ps(q, a2, KL_V8(KL_ERF_C0));
}

static inline __m256 kl_y_erfcx(__m256 t) {
  __m256 w = _mm256_div_ps(_mm256_sub_ps(t, KL_V8(KL_ERFCX_W)),
                           _mm256_add_ps(t, KL_V8(KL_ERFCX_W)));
  __m256 g = KL_V8(KL_ERFCX_C8);
  g = _mm256_fmadd_ps(g, w, KL_V8(KL_ERFCX_C7));
  g = _mm256_fmadd_ps(g, w, KL_V8(KL_ERFCX_C6));
  g = _mm256_fmadd_ps(g, w, KL_V8(KL_ERFCX_C5));
  g = _mm256_fmadd_ps(g, w, KL_V8(KL_ERFCX_C4));
  g = _mm256_fmadd_ps(g, w, KL_V8(KL_ERFCX_C3));
  g = _mm256_fmadd_ps(g, w, KL_V8(KL_ERFCX_C2));
  g = _mm256_fmadd_ps(g, w, KL_V8(KL_ERFCX_C1));
  return _mm256_fmadd_ps(g, w, KL_V8(KL_ERFCX_C0));
}

static inline __m256 kl_y_erf(__m256 x) {
  __m256 a = kl_y_abs(x), t = _mm256_min_ps(KL_V8(KL_ERFC_BIG), a);
  __m256 small = _mm256_mul_ps(a, kl_y_erf_q(_mm256_mul_ps(a, a)));
  __m256 e = kl_y_exp(_mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), t), t));
  __m256 big = _mm256_fnmadd_ps(e, kl_y_erfcx(t), KL_V8(1.0f));
  __m256 lt = _mm256_cmp_ps(a, KL_V8(KL_ERF_SMALL), _CMP_LT_OQ);
  return kl_y_copysign(_mm256_blendv_ps(big, small, lt), x);
}

/* x Phi(x) as in vmath_generic.h; x^2 = hi + lo exactly by FMA. */
static inline __m256 kl_y_gelu_erf(__m256 x) {
  __m256 a = kl_y_abs(x), t = _mm256_mul_ps(a, KL_V8(KL_SQRT1_2));
  __m256 e = _mm256_mul_ps(_mm256_mul_ps(KL_V8(0.5f), t), kl_y_erf_q(_mm256_mul_ps(t, t)));
  __m256 phi_small = _mm256_add_ps(KL_V8(0.5f), kl_y_copysign(e, x));
  __m256 xa = _mm256_min_ps(KL_V8(KL_GELU_BIG), a);
  __m256 hi = _mm256_mul_ps(xa, xa), lo = _mm256_fmsub_ps(xa, xa, hi);
  __m256 ex = kl_y_exp(_mm256_mul_ps(KL_V8(-0.5f), hi));
  ex = _mm256_fnmadd_ps(ex, _mm256_mul_ps(KL_V8(0.5f), lo), ex);
  __m256 half_erfc = _mm256_mul_ps(_mm256_mul_ps(KL_V8(0.5f), ex),
                                   kl_y_erfcx(_mm256_mul_ps(xa, KL_V8(KL_SQRT1_2))));
  __m256 pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
  __m256 phi_big = _mm256_blendv_ps(half_erfc, _mm256_sub_ps(KL_V8(1.0f), half_erfc), pos);
  __m256 lt = _mm256_cmp_ps(t, KL_V8(KL_ERF_SMALL), _CMP_LT_OQ);
  return _mm256_mul_ps(x, _mm256_blendv_ps(phi_big, phi_small, lt));
}

static inline __m256 kl_y_gelu_tanh(__m256 x) {
  __m256 u = _mm256_fmadd_ps(_mm256_mul_ps(x, x), KL_V8(KL_GELU_G3), KL_V8(KL_GELU_G1));
  return kl_y_div_1pexp(x, _mm256_mul_ps(x, u));
}

/* The activation of kind k; k is a constant where this is inlined. */
static inline __attribute__((always_inline)) __m256 kl_y_act(kl_act_kind k, __m256 alpha,
                                                             __m256 beta, __m256 x) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 neg = _mm256_cmp_ps(x, zero, _CMP_LT_OQ);
  switch (k) {
  case KL_ACT_RELU: return _mm256_blendv_ps(x, zero, neg);
  case KL_ACT_LEAKY_RELU: return _mm256_blendv_ps(x, _mm256_mul_ps(x, alpha), neg);
  case KL_ACT_SIGMOID: return kl_y_sigmoid(x);
  case KL_ACT_TANH: return kl_y_tanh(x);
  case KL_ACT_EXP: return kl_y_exp(x);
  case KL_ACT_ERF: return kl_y_erf(x);
  case KL_ACT_GELU_ERF: return kl_y_gelu_erf(x);
  case KL_ACT_GELU_TANH: return kl_y_gelu_tanh(x);
  case KL_ACT_SWISH: return kl_y_div_1pexp(x, _mm256_mul_ps(alpha, x));
  case KL_ACT_HARD_SIGMOID: return kl_y_clamp01(_mm256_fmadd_ps(alpha, x, beta));
  case KL_ACT_HARD_SWISH:
    return _mm256_mul_ps(x, kl_y_clamp01(_mm256_fmadd_ps(x, KL_V8(KL_ONE_SIXTH),
                                                         KL_V8(0.5f))));
  default: return _mm256_min_ps(beta, _mm256_max_ps(alpha, x)); /* Clip */
  }
}

static inline __attribute__((always_inline)) __m256 kl_y_bin(kl_binop op, __m256 a, __m256 b) {
  switch (op) {
  case KL_BIN_ADD: return _mm256_add_ps(a, b);
  case KL_BIN_SUB: return _mm256_sub_ps(a, b);
  case KL_BIN_MUL: return _mm256_mul_ps(a, b);
  case KL_BIN_DIV: return _mm256_div_ps(a, b);
  default: return _mm256_max_ps(b, a); /* a when either is NaN */
  }
}

/* Lane mask of the first n < 8 lanes, for maskload / maskstore. */
static inline __m256i kl_y_tail(size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#endif
