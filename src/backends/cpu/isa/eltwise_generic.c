/* Elementwise primitives, generic level: plain C for the auto-vectorizer.
 *
 * Each loop runs over a block copied into a local array: x and y may be the same
 * buffer (in-place runs), and a loop over pointers that may overlap is either not
 * vectorized or vectorized behind run-time overlap checks that fail exactly then.
 */
#include "backends/cpu/isa/vmath_generic.h"

#define BLOCK 256

static inline __attribute__((always_inline)) void unary_run(kl_act_kind k, float alpha,
                                                            float beta, const float *x,
                                                            float *y, size_t n) {
  float buf[BLOCK];
  for (size_t i = 0; i < n; i += BLOCK) {
    size_t m = n - i < BLOCK ? n - i : BLOCK;
    memcpy(buf, x + i, m * sizeof *buf);
    for (size_t j = 0; j < m; j++) buf[j] = kl_g_act(k, alpha, beta, buf[j]);
    memcpy(y + i, buf, m * sizeof *buf);
  }
}

/* One copy of the loop per kind, each with its activation inlined. */
#define UNARY_CASE(K) \
  case K: unary_run(K, a->alpha, a->beta, x, y, n); break;

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

static inline float bin1(kl_binop op, float a, float b) {
  switch (op) {
  case KL_BIN_ADD: return a + b;
  case KL_BIN_SUB: return a - b;
  case KL_BIN_MUL: return a * b;
  case KL_BIN_DIV: return a / b;
  default: return b > a ? b : a;
  }
}

/* A block of y = a op b, each operand either a block or a scalar broadcast. */
static inline __attribute__((always_inline)) void binary_run(kl_binop op, const float *a,
                                                             size_t sa, const float *b,
                                                             size_t sb, float *y, size_t n) {
  float ba[BLOCK], bb[BLOCK];
  for (size_t i = 0; i < n; i += BLOCK) {
    size_t m = n - i < BLOCK ? n - i : BLOCK;
    if (sa) memcpy(ba, a + i, m * sizeof *ba);
    if (sb) memcpy(bb, b + i, m * sizeof *bb);
    if (sa && sb)
      for (size_t j = 0; j < m; j++) ba[j] = bin1(op, ba[j], bb[j]);
    else if (sa)
      for (size_t j = 0; j < m; j++) ba[j] = bin1(op, ba[j], b[0]);
    else if (sb)
      for (size_t j = 0; j < m; j++) ba[j] = bin1(op, a[0], bb[j]);
    else
      for (size_t j = 0; j < m; j++) ba[j] = bin1(op, a[0], b[0]);
    memcpy(y + i, ba, m * sizeof *ba);
  }
}

#define BINARY_CASE(OP) \
  case OP: binary_run(OP, a, a_step, b, b_step, y, n); break;

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

/* BatchNormalization rows: blocks copied locally, as above, for in-place runs. */
static void batchnorm(const float *x, const float *m, const float *k, const float *b,
                      size_t step, float *y, size_t n) {
  float bx[BLOCK], bm[BLOCK], bk[BLOCK], bb[BLOCK];
  for (size_t i = 0; i < n; i += BLOCK) {
    size_t len = n - i < BLOCK ? n - i : BLOCK;
    memcpy(bx, x + i, len * sizeof *bx);
    if (step) {
      memcpy(bm, m + i, len * sizeof *bm);
      memcpy(bk, k + i, len * sizeof *bk);
      memcpy(bb, b + i, len * sizeof *bb);
      for (size_t j = 0; j < len; j++) bx[j] = (bx[j] - bm[j]) * bk[j] + bb[j];
    } else {
      float sm = m[0], sk = k[0], sb = b[0];
      for (size_t j = 0; j < len; j++) bx[j] = (bx[j] - sm) * sk + sb;
    }
    memcpy(y + i, bx, len * sizeof *bx);
  }
}

const kl_eltwise_fns kl_eltwise_generic = {unary, binary, batchnorm};
