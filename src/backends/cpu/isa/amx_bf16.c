/* bfloat16 matrix products on AMX tiles (isa_fns.h, kl_amx_fns), AMX level (compiled
 * with -mamx-tile -mamx-bf16; run only where isa.c found AMX and Linux granted its
 * tile data). Tiles 0-3 hold a block's four 16 x 16 float sums, 4-5 its two 16-row
 * pieces of x, 6-7 the panel's two weight tiles of a step: each step loads four tiles
 * and makes four TDPBF16PS, each operand tile used twice. */
#include "backends/cpu/isa/bf16_avx512.h"
#include "backends/cpu/isa/isa_fns.h"

#include <immintrin.h>
#include <string.h>

typedef struct tile_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

/* In static storage: gcc 12 does not see _tile_loadconfig read its operand, and drops
 * the stores that fill a configuration on the stack. Eight tiles of 16 rows of 64
 * bytes (16 floats, 32 bfloat16 or 16 pairs). */
static const tile_config tiles = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

static void config(void) { _tile_loadconfig(&tiles); }

static void release(void) { _tile_release(); }

static void block(const uint16_t *a, size_t lda, const uint16_t *wp, size_t steps, float *c,
                  size_t ldc, const char *pf, size_t per_step, size_t pf_lines) {
  const size_t sa = lda * sizeof(uint16_t), sc = ldc * sizeof(float);
  const uint16_t *a1 = a + 16 * lda;
  size_t line = 0;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (size_t s = 0; s < steps; s++, wp += 2 * 16 * 32) {
    _tile_loadd(4, a + s * KL_AMX_STEP, sa);
    _tile_loadd(5, a1 + s * KL_AMX_STEP, sa);
    _tile_loadd(6, wp, 64);
    _tile_loadd(7, wp + 16 * 32, 64);
    for (size_t q = 0; q < per_step && line < pf_lines; q++, line++)
      _mm_prefetch(pf + 64 * line, _MM_HINT_T1);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, sc);
  _tile_stored(1, c + 16, sc);
  _tile_stored(2, c + 16 * ldc, sc);
  _tile_stored(3, c + 16 * ldc + 16, sc);
}

static void to_bf16(const float *x, uint16_t *y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) kl_bf_store(y + i, 0xffff, _mm512_loadu_ps(x + i));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    kl_bf_store(y + i, m, _mm512_maskz_loadu_ps(m, x + i));
  }
}

static void pack_rows(const float *x, size_t k, size_t rows, size_t kp, uint16_t *out) {
  for (size_t r = 0; r < rows; r++) {
    to_bf16(x + r * k, out + r * kp, k);
    memset(out + r * kp + k, 0, sizeof(uint16_t) * (kp - k));
  }
}

/* One row of out: v = c + bias, act of kind K (a constant where this is inlined: the
 * same kl_z_act as the AVX-512 unary primitive), stored as float32 or bfloat16. */
static inline __attribute__((always_inline)) void out_row(kl_act_kind k, bool has_act,
                                                          __m512 al, __m512 be, const float *c,
                                                          size_t nc, const float *bias,
                                                          void *y, bool y_bf16) {
  for (size_t l = 0; l < nc; l += 16) {
    __mmask16 m = nc - l >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (nc - l)) - 1u);
    __m512 v = _mm512_maskz_loadu_ps(m, c + l);
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + l));
    if (has_act) v = kl_z_act(k, al, be, v);
    if (y_bf16) kl_bf_store((uint16_t *)y + l, m, v);
    else _mm512_mask_storeu_ps((float *)y + l, m, v);
  }
}

#define OUT_ROWS(K, HAS)                                                                  \
  for (size_t i = 0; i < rows; i++)                                                     \
    out_row(K, HAS, al, be, c + i * ldc, nc, bias,                                        \
            y_bf16 ? (void *)((uint16_t *)y + i * ldy) : (void *)((float *)y + i * ldy), \
            y_bf16)

static void out(const float *c, size_t ldc, size_t rows, size_t nc, const float *bias,
                const kl_act *act, void *y, size_t ldy, bool y_bf16) {
  const __m512 al = _mm512_set1_ps(act ? act->alpha : 0.0f);
  const __m512 be = _mm512_set1_ps(act ? act->beta : 0.0f);
  if (!act) {
    OUT_ROWS(KL_ACT_RELU, false);
    return;
  }
  switch (act->kind) { /* the kinds of transformers and CNNs with their own loop */
  case KL_ACT_RELU: OUT_ROWS(KL_ACT_RELU, true); break;
  case KL_ACT_GELU_ERF: OUT_ROWS(KL_ACT_GELU_ERF, true); break;
  case KL_ACT_GELU_TANH: OUT_ROWS(KL_ACT_GELU_TANH, true); break;
  default: OUT_ROWS(act->kind, true); break;
  }
}

static void pack_kn(const float *w, size_t ld, uint16_t *out) {
  /* vcvtne2ps2bf16 puts row 2r's 16 weights in the low half, row 2r + 1's in the high
   * half; the pairs interleave them: word 2j from j, word 2j + 1 from 16 + j */
  static const uint16_t pairs[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                     21, 6, 22, 7, 23, 8, 24, 9,  25, 10, 26,
                                     11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_loadu_si512(pairs);
  for (int t = 0; t < 2; t++)
    for (int r = 0; r < 16; r++) {
      __m512 e0 = _mm512_loadu_ps(w + (size_t)(2 * r) * ld + 16 * t);
      __m512 e1 = _mm512_loadu_ps(w + (size_t)(2 * r + 1) * ld + 16 * t);
      __m512i v = (__m512i)_mm512_cvtne2ps_pbh(e1, e0);
      _mm512_storeu_si512(out + (t * 16 + r) * 32, _mm512_permutexvar_epi16(idx, v));
    }
}

const kl_amx_fns kl_amx_bf16 = {config, release, block, pack_rows, to_bf16, out, pack_kn};
