/* Optimizer primitives, AVX2 level: 8 float lanes, tails by maskload and maskstore
 * (which never touch memory outside the mask). Separate multiplies and adds, never
 * _mm256_fmadd_ps: the reference (ref/optim.c) rounds every product. The updates are
 * in place (isa_fns.h, kl_optim_fns); the bodies are in optim_simd.h. */
#include "backends/cpu/isa/isa_fns.h"

#include <immintrin.h>

#define VN 8
typedef __m256 vf;
typedef __m256d vd;

static inline __attribute__((always_inline)) __m256i lanes(int cnt) {
  static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256((const __m256i *)(ones + 8 - cnt));
}
static inline __attribute__((always_inline)) vf v_ld(const float *p, int cnt) {
  return cnt == VN ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes(cnt));
}
static inline __attribute__((always_inline)) void v_st(float *p, vf x, int cnt) {
  if (cnt == VN) _mm256_storeu_ps(p, x);
  else _mm256_maskstore_ps(p, lanes(cnt), x);
}
#define v_set _mm256_set1_ps
#define v_add _mm256_add_ps
#define v_sub _mm256_sub_ps
#define v_mul _mm256_mul_ps
#define v_div _mm256_div_ps
#define v_sqrt _mm256_sqrt_ps
#define v_neg(x) _mm256_xor_ps(x, _mm256_set1_ps(-0.0f))
#define v_zero_past(x, cnt) _mm256_and_ps(x, _mm256_castsi256_ps(lanes(cnt)))
static inline __attribute__((always_inline)) vf v_max_nan(vf a, vf v) {
  vf pick_a = _mm256_or_ps(_mm256_cmp_ps(a, v, _CMP_GT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  return _mm256_blendv_ps(v, a, pick_a);
}
#define vd_add _mm256_add_pd
#define vd_mul _mm256_mul_pd
#define vd_lo(x) _mm256_cvtps_pd(_mm256_castps256_ps128(x))
#define vd_hi(x) _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))
#define vd_load _mm256_loadu_pd
#define vd_store _mm256_storeu_pd

#include "backends/cpu/isa/optim_simd.h"

const kl_optim_fns kl_optim_avx2 = {sgd, adagrad, adam, lamb_moments, lamb_apply,
                                    lars_norms, lars, sumsq, join_halves, split_halves};
