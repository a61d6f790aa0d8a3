/* Elementwise primitives on bfloat16 data, AVX512_BF16 level: widened to float, computed
 * as eltwise_avx512.c does, narrowed with one rounding. */
#include "backends/cpu/isa/bf16_avx512.h"

static inline __attribute__((always_inline)) void unary_run(kl_act_kind k, const kl_act *a,
                                                            const uint16_t *x, uint16_t *y,
                                                            size_t n) {
  const __m512 alpha = _mm512_set1_ps(a->alpha), beta = _mm512_set1_ps(a->beta);
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : kl_z_tail(n - i);
    kl_bf_store(y + i, m, kl_z_act(k, alpha, beta, kl_bf_load(x + i, m)));
  }
}

#define UNARY_CASE(K) \
  case K: unary_run(K, a, x, y, n); break;

static void unary(const kl_act *a, const uint16_t *x, uint16_t *y, size_t n) {
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

static inline __m512 operand(const uint16_t *p, size_t step, size_t i, __mmask16 m) {
  return step ? kl_bf_load(p + i, m) : _mm512_set1_ps(kl_bf_scalar(p));
}

static inline __attribute__((always_inline)) void binary_run(kl_binop op, const uint16_t *a,
                                                             size_t sa, const uint16_t *b,
                                                             size_t sb, uint16_t *y, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : kl_z_tail(n - i);
    kl_bf_store(y + i, m, kl_z_bin(op, operand(a, sa, i, m), operand(b, sb, i, m)));
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

static void binary(kl_binop op, const uint16_t *a, size_t a_step, const uint16_t *b,
                   size_t b_step, uint16_t *y, size_t n) {
  switch (op) {
    BINARY_CASE(KL_BIN_ADD)
    BINARY_CASE(KL_BIN_SUB)
    BINARY_CASE(KL_BIN_MUL)
    BINARY_CASE(KL_BIN_DIV)
    BINARY_CASE(KL_BIN_MAX)
  default: break;
  }
}

const kl_eltwise_bf16_fns kl_eltwise_avx512bf16 = {unary, binary};
