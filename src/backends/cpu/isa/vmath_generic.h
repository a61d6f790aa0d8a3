/* Float math for the generic level, one element at a time, written so that the
 * compiler can vectorize loops over it: no branches (only selects), no libm calls,
 * bit casts through memcpy. The constants are in vmath_coef.h.
 *
 * Comparisons are ordered so that NaN passes through every clamp: `x > hi ? hi : x`
 * keeps a NaN x, and so does every function here.
 */
#ifndef KL_VMATH_GENERIC_H
#define KL_VMATH_GENERIC_H

#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/vmath_coef.h"

#include <math.h>
#include <string.h>

static inline uint32_t kl_g_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float kl_g_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float kl_g_min(float x, float hi) { return x > hi ? hi : x; }
static inline float kl_g_max(float x, float lo) { return x < lo ? lo : x; }
static inline float kl_g_clamp01(float x) { return kl_g_min(kl_g_max(x, 0.0f), 1.0f); }

/* 2^n for -75 <= n <= 64 (a normal float). */
static inline float kl_g_pow2i(int32_t n) { return kl_g_float((uint32_t)(n + 127) << 23); }

static inline float kl_g_exp(float x) {
  x = kl_g_max(kl_g_min(x, KL_EXP_HI), KL_EXP_LO);
  /* round x / ln2 to an integer by adding 1.5 * 2^23, whose ulp is 1: no float to int
   * conversion, which C leaves undefined for NaN */
  float k = x * KL_EXP_LOG2E + 0x1.8p23f, n = k - 0x1.8p23f;
  int32_t ni = (int32_t)kl_g_bits(k) - 0x4b400000;
  float r = x - n * KL_EXP_LN2_HI;
  r = r - n * KL_EXP_LN2_LO;
  float p = KL_EXP_C6;
  p = p * r + KL_EXP_C5;
  p = p * r + KL_EXP_C4;
  p = p * r + KL_EXP_C3;
  p = p * r + KL_EXP_C2;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  /* 2^n in two halves, each a normal float, so results down in the subnormals are
   * rounded once, by the last product */
  int32_t n1 = ni / 2;
  return p * kl_g_pow2i(n1) * kl_g_pow2i(ni - n1);
}

/* 1 / (1 + e^-x), from e = e^-|x| so that neither side overflows. */
static inline float kl_g_sigmoid(float x) {
  float e = kl_g_exp(-fabsf(x));
  return (x >= 0 ? 1.0f : e) / (1.0f + e);
}

static inline float kl_g_tanh(float x) {
  float a = fabsf(x), a2 = a * a;
  float p = KL_TANH_C5;
  p = p * a2 + KL_TANH_C4;
  p = p * a2 + KL_TANH_C3;
  p = p * a2 + KL_TANH_C2;
  p = p * a2 + KL_TANH_C1;
  float small = a + a * a2 * p;
  float big = 1.0f - 2.0f / (kl_g_exp(2.0f * kl_g_min(a, KL_TANH_BIG)) + 1.0f);
  return copysignf(a < KL_TANH_SMALL ? small : big, x);
}

/* erf(a) / a for 0 <= a <= 1 */
static inline float kl_g_erf_q(float a2) {
  float q = KL_ERF_C6;
  q = q * a2 + KL_ERF_C5;
  q = q * a2 + KL_ERF_C4;
  q = q * a2 + KL_ERF_C3;
  q = q * a2 + KL_ERF_C2;
  q = q * a2 + KL_ERF_C1;
  return q * a2 + KL_ERF_C0;
}

/* e^(t^2) erfc(t) for 1 <= t <= 10 */
static inline float kl_g_erfcx(float t) {
  float w = (t - KL_ERFCX_W) / (t + KL_ERFCX_W);
  float g = KL_ERFCX_C8;
  g = g * w + KL_ERFCX_C7;
  g = g * w + KL_ERFCX_C6;
  g = g * w + KL_ERFCX_C5;
  g = g * w + KL_ERFCX_C4;
  g = g * w + KL_ERFCX_C3;
  g = g * w + KL_ERFCX_C2;
  g = g * w + KL_ERFCX_C1;
  return g * w + KL_ERFCX_C0;
}

static inline float kl_g_erf(float x) {
  float a = fabsf(x), t = kl_g_min(a, KL_ERFC_BIG);
  float small = a * kl_g_erf_q(a * a);
  float big = 1.0f - kl_g_exp(-(t * t)) * kl_g_erfcx(t);
  return copysignf(a < KL_ERF_SMALL ? small : big, x);
}

/* x * Phi(x), Phi the normal CDF = erfc(-x / sqrt 2) / 2. For x < -sqrt 2, Phi is
 * erfc(|x| / sqrt 2) / 2 directly, never 1 - erf, which would cancel; its e^(-x^2 / 2)
 * takes x^2 exactly as hi + lo (Dekker's product, since this level has no FMA), as the
 * rounding of x^2 alone would cost 2 t^2 ulps. */
static inline float kl_g_gelu_erf(float x) {
  float a = fabsf(x), t = a * KL_SQRT1_2;
  float phi_small = 0.5f + copysignf(0.5f * t * kl_g_erf_q(t * t), x);
  float xa = kl_g_min(a, KL_GELU_BIG), tc = xa * KL_SQRT1_2;
  float c = 4097.0f * xa, xh = c - (c - xa), xl = xa - xh;
  float hi = xa * xa, lo = ((xh * xh - hi) + 2.0f * xh * xl) + xl * xl;
  float half_erfc = 0.5f * kl_g_exp(-0.5f * hi) * (1.0f - 0.5f * lo) * kl_g_erfcx(tc);
  float phi_big = x > 0 ? 1.0f - half_erfc : half_erfc;
  return x * (t < KL_ERF_SMALL ? phi_small : phi_big);
}

static inline float kl_g_gelu_tanh(float x) {
  return x * kl_g_sigmoid(x * (KL_GELU_G1 + KL_GELU_G3 * x * x));
}

/* The activation of kind k (a constant where this is inlined, so the switch folds). */
static inline float kl_g_act(kl_act_kind k, float alpha, float beta, float x) {
  switch (k) {
  case KL_ACT_RELU: return x < 0 ? 0.0f : x;
  case KL_ACT_LEAKY_RELU: return x < 0 ? alpha * x : x;
  case KL_ACT_SIGMOID: return kl_g_sigmoid(x);
  case KL_ACT_TANH: return kl_g_tanh(x);
  case KL_ACT_EXP: return kl_g_exp(x);
  case KL_ACT_ERF: return kl_g_erf(x);
  case KL_ACT_GELU_ERF: return kl_g_gelu_erf(x);
  case KL_ACT_GELU_TANH: return kl_g_gelu_tanh(x);
  case KL_ACT_SWISH: return x * kl_g_sigmoid(alpha * x);
  case KL_ACT_HARD_SIGMOID: return kl_g_clamp01(alpha * x + beta);
  case KL_ACT_HARD_SWISH: return x * kl_g_clamp01(x * KL_ONE_SIXTH + 0.5f);
  default: return kl_g_min(kl_g_max(x, alpha), beta); /* Clip */
  }
}

#endif
