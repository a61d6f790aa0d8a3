/* Optimizer primitives, AVX-512 level: 16 float lanes, tails by masked loads and
 * stores. Separate multiplies and adds, never an FMA: the reference (ref/optim.c)
 * rounds every product. The updates are in place (isa_fns.h, kl_optim_fns); the bodies
 * are in optim_simd.h. */
#include "backends/cpu/isa/isa_fns.h"

#include <immintrin.h>

#define VN 16
typedef __m512 vf;
typedef __m512d vd;

static inline __attribute__((always_inline)) __mmask16 lanes(int cnt) {
  return (__mmask16)((1u << cnt) - 1u);
}
static inline __attribute__((always_inline)) vf v_ld(const float *p, int cnt) {
  return cnt == VN ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(lanes(cnt), p);
}
static inline __attribute__((always_inline)) void v_st(float *p, vf x, int cnt) {
  if (cnt == VN) _mm512_storeu_ps(p, x);
  else _mm512_mask_storeu_ps(p, lanes(cnt), x);
}
#define v_set _mm512_set1_ps
#define v_add _mm512_add_ps
#define v_sub _mm512_sub_ps
#define v_mul _mm512_mul_ps
#define v_div _mm512_div_ps
#define v_sqrt _mm512_sqrt_ps
#define v_neg(x) _mm512_xor_ps(x, _mm512_set1_ps(-0.0f))
#define v_zero_past(x, cnt) _mm512_maskz_mov_ps(lanes(cnt), x)
static inline __attribute__((always_inline)) vf v_max_nan(vf a, vf v) {
  __mmask16 pick_a = _mm512_cmp_ps_mask(a, v, _CMP_GT_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
  return _mm512_mask_blend_ps(pick_a, v, a);
}
#define vd_add _mm512_add_pd
#define vd_mul _mm512_mul_pd
#define vd_lo(x) _mm512_cvtps_pd(_mm512_castps512_ps256(x))
#define vd_hi(x) _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))
#define vd_load _mm512_loadu_pd
#define vd_store _mm512_storeu_pd

#include "backends/cpu/isa/optim_simd.h"

const kl_optim_fns kl_optim_avx512 = {sgd, adagrad, adam, lamb_moments, lamb_apply,
                                      lars_norms, lars, sumsq, join_halves, split_halves};
