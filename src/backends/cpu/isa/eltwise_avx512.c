/* Elementwise primitives, AVX-512 level: 16 lanes, tails by masked loads and stores
 * (which never touch memory outside the mask). In place is fine: each vector is loaded
 * before its own lanes are stored. */
#include "backends/cpu/isa/vmath_avx512.h"

static inline __attribute__((always_inline)) void unary_run(kl_act_kind k, const kl_act *a,
                                                            const float *x, float *y,
                                                            size_t n) {
  const __m512 alpha = _mm512_set1_ps(a->alpha), beta = _mm512_set1_ps(a->beta);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) { /* two vectors per step to hide the latency */
    __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
    _mm512_storeu_ps(y + i, kl_z_act(k, alpha, beta, v0));
    _mm512_storeu_ps(y + i + 16, kl_z_act(k, alpha, beta, v1));
  }
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, kl_z_act(k, alpha, beta, _mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 m = kl_z_tail(n - i);
    _mm512_mask_storeu_ps(y + i, m, kl_z_act(k, alpha, beta, _mm512_maskz_loadu_ps(m, x + i)));
  }
}

#define UNARY_CASE(K) \
  case K: unary_run(K, a, x, y, n); break;

static void unary(const kl_act *a, const float *x, float *y, size_t n) {
  switch (a->kind) {
    UNARY_CASE(KL_ACT_RELU)
    UNARY_CASE(KL_ACT_LEAKY_RELU)
    UNARY_CASE(KL_ACT_SIGMOID)
    UNARY_CASE(KL_ACT_TANH)
    UNARY_CASE(KL_ACT_EXP)
    UNARY_CASE(KL_ACT_ERF)
    UNARY_CASE(KL_ACT_GELU_ERF)
    UNARY_CASE(KL_ACT_GELU_TANH)
    UNARY_CASE(KL_ACT_SWISH)
    UNARY_CASE(KL_ACT_HARD_SIGMOID)
    UNARY_CASE(KL_ACT_HARD_SWISH)
    UNARY_CASE(KL_ACT_CLIP)
  default: break;
  }
}

/* Lanes i.. of an operand with step 1, or its broadcast scalar with step 0. */
static inline __m512 operand(const float *p, size_t step, size_t i, __mmask16 m) {
  return step ? _mm512_maskz_loadu_ps(m, p + i) : _mm512_set1_ps(p[0]);
}

static inline __attribute__((always_inline)) void binary_run(kl_binop op, const float *a,
                                                             size_t sa, const float *b,
                                                             size_t sb, float *y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, kl_z_bin(op, operand(a, sa, i, 0xffff), operand(b, sb, i, 0xffff)));
  if (i < n) {
    __mmask16 m = kl_z_tail(n - i);
    _mm512_mask_storeu_ps(y + i, m, kl_z_bin(op, operand(a, sa, i, m), operand(b, sb, i, m)));
  }
}

/* One loop per op and pair of steps, so that neither is tested inside it. */
#define BINARY_CASE(OP)                                          \
  case OP:                                                       \
    if (a_step && b_step) binary_run(OP, a, 1, b, 1, y, n);      \
    else if (a_step) binary_run(OP, a, 1, b, 0, y, n);           \
    else if (b_step) binary_run(OP, a, 0, b, 1, y, n);           \
    else binary_run(OP, a, 0, b, 0, y, n);                       \
    break;

static void binary(kl_binop op, const float *a, size_t a_step, const float *b, size_t b_step,
                   float *y, size_t n) {
  switch (op) {
    BINARY_CASE(KL_BIN_ADD)
    BINARY_CASE(KL_BIN_SUB)
    BINARY_CASE(KL_BIN_MUL)
    BINARY_CASE(KL_BIN_DIV)
    BINARY_CASE(KL_BIN_MAX)
  default: break;
  }
}

static inline __attribute__((always_inline)) void batchnorm_run(
    const float *x, const float *m, const float *k, const float *b, size_t step, float *y,
    size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 t = n - i >= 16 ? (__mmask16)0xffff : kl_z_tail(n - i);
    __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(t, x + i), operand(m, step, i, t));
    _mm512_mask_storeu_ps(y + i, t, _mm512_fmadd_ps(d, operand(k, step, i, t),
                                                    operand(b, step, i, t)));
  }
}

static void batchnorm(const float *x, const float *m, const float *k, const float *b,
                      size_t step, float *y, size_t n) {
  if (step) batchnorm_run(x, m, k, b, 1, y, n);
  else batchnorm_run(x, m, k, b, 0, y, n);
}

const kl_eltwise_fns kl_eltwise_avx512 = {unary, binary, batchnorm};
