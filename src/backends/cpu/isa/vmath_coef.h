/* Constants of kiln's float exp, tanh and erf, shared by every ISA level so that all
 * levels compute the same approximations (isa/vmath_*.h evaluate them).
 *
 * The polynomials were fitted for this project (Lawson's iteratively reweighted least
 * squares towards the minimax relative error, on 20000 Chebyshev nodes, in double),
 * then rounded to float. Maximum relative error of each, evaluated in float with
 * Horner's rule, over its interval:
 *   exp(r), |r| <= ln2/2, degree 6 with c0 = c1 = 1          1.0e-7
 *   tanh(x) = x P(x^2), 0 <= x <= 0.625, P degree 5, P(0) = 1   5.3e-8
 *   erf(x) = x Q(x^2), 0 <= x <= 1, Q degree 6                 1.5e-7
 *   erfcx(t) = e^(t^2) erfc(t), 1 <= t <= 10, degree 8 in w = (t - 4) / (t + 4)
 *                                                              2.8e-7
 * The whole functions (range reduction included) are checked against libm in double
 * by tests/unit/test_isa.c at every level.
 */
#ifndef KL_VMATH_COEF_H
#define KL_VMATH_COEF_H

/* exp: x = n ln2 + r, n = round(x / ln2); ln2 in two parts so n * LN2_HI is exact for
 * |n| <= 150 (LN2_HI has 15 significant bits). Inputs are clamped to [LO, HI]: below,
 * the result rounds to 0; above, it overflows to +inf. */
#define KL_EXP_LOG2E 0x1.715476p+0f
#define KL_EXP_LN2_HI 0x1.62e4p-1f
#define KL_EXP_LN2_LO 0x1.7f7d1cp-20f
#define KL_EXP_LO (-104.0f)
#define KL_EXP_HI 88.8f
#define KL_EXP_C2 0x1.fffffcp-2f
#define KL_EXP_C3 0x1.55541ap-3f
#define KL_EXP_C4 0x1.555822p-5f
#define KL_EXP_C5 0x1.126782p-7f
#define KL_EXP_C6 0x1.6ae72ep-10f

/* tanh: the odd polynomial below KL_TANH_SMALL, else 1 - 2 / (e^(2|x|) + 1), with
 * |x| clamped to KL_TANH_BIG where tanh is 1 in float. */
#define KL_TANH_SMALL 0.625f
#define KL_TANH_BIG 10.0f
#define KL_TANH_C1 (-0x1.555532p-2f)
#define KL_TANH_C2 0x1.110726p-3f
#define KL_TANH_C3 (-0x1.b83c5ap-5f)
#define KL_TANH_C4 0x1.52269ep-6f
#define KL_TANH_C5 (-0x1.75e1dcp-8f)

/* erf: the odd polynomial below 1, else 1 - erfc; erfc(t) = e^(-t^2) erfcx(t) with t
 * clamped to KL_ERFC_BIG where erfc underflows. */
#define KL_ERF_SMALL 1.0f
#define KL_ERFC_BIG 10.0f
#define KL_ERF_C0 0x1.20dd74p+0f
#define KL_ERF_C1 (-0x1.81273ep-2f)
#define KL_ERF_C2 0x1.ce2cf8p-4f
#define KL_ERF_C3 (-0x1.b7f912p-6f)
#define KL_ERF_C4 0x1.5405cep-8f
#define KL_ERF_C5 (-0x1.a3f7b8p-11f)
#define KL_ERF_C6 0x1.496bf4p-14f
#define KL_ERFCX_W 4.0f
#define KL_ERFCX_C0 0x1.18932cp-3f
#define KL_ERFCX_C1 (-0x1.09491cp-2f)
#define KL_ERFCX_C2 0x1.bfefcap-3f
#define KL_ERFCX_C3 (-0x1.5068c2p-3f)
#define KL_ERFCX_C4 0x1.be6196p-4f
#define KL_ERFCX_C5 (-0x1.023a8ep-4f)
#define KL_ERFCX_C6 0x1.fe8c6cp-6f
#define KL_ERFCX_C7 (-0x1.b0fe8cp-7f)
#define KL_ERFCX_C8 0x1.207728p-8f

/* Gelu: 1/sqrt(2) for the erf form, whose |x| is clamped to KL_GELU_BIG where
 * e^(-x^2 / 2) is 0 in float (so that x Phi(x) is exactly 0, and NaN at -inf like
 * x (1 + erf(x / sqrt 2)) / 2); the tanh form as x sigmoid(x (G1 + G3 x^2)) with
 * G1 = 2 sqrt(2/pi), G3 = G1 * 0.044715, since 1 + tanh(u) = 2 sigmoid(2u) has no
 * cancellation for negative x. */
#define KL_SQRT1_2 0x1.6a09e6p-1f
#define KL_GELU_BIG 14.5f
#define KL_GELU_G1 0x1.988454p+0f
#define KL_GELU_G3 0x1.2444f2p-4f

#define KL_ONE_SIXTH 0x1.555556p-3f

#endif
