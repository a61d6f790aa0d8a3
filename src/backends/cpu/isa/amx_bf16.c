/* bfloat16 matrix products on AMX tiles (isa_fns.h, kl_amx_fns), AMX level (compiled
 * with -mamx-tile -mamx-bf16; run only where isa.c found AMX and Linux granted its
 * tile data). Tiles 0-3 hold a block's four 16 x 16 float sums, 4-5 its two 16-row
 * pieces of x, 6-7 the panel's two weight tiles of a step: each step loads four tiles
 * and makes four TDPBF16PS, each operand tile used twice. */
#include "backends/cpu/isa/bf16_avx512.h"
#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/vmath_avx512.h"

#include <immintrin.h>
#include <math.h>
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

/* A 16 x 16 transpose of 32-bit elements: r[m] element g becomes r[g] element m. Pairs
 * and quads of rows unpacked (each 128-bit lane then holds a 4 x 4 block transposed),
 * then the lanes exchanged: row 4 L + c takes lane G from quad G's row c, lane L. */
static inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int c = 0; c < 4; c++) { /* V_G = u[4 G + c] */
    __m512i x0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
    __m512i x1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    __m512i x2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    __m512i x3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(x0, x2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(x0, x2, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(x1, x3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(x1, x3, 0xDD);
  }
}

static void pack_nk(const float *w, size_t ld, uint16_t *out) {
  /* each output's 32 inputs as 16 pairs (vcvtne2ps2bf16: element 2 r and 2 r + 1 in
   * pair r), then the 16 outputs x 16 pairs of a tile turned to pairs x outputs */
  for (int t = 0; t < 2; t++) {
    __m512i r[16];
    for (int j = 0; j < 16; j++) {
      const float *x = w + (size_t)(16 * t + j) * ld;
      r[j] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
    }
    transpose16(r);
    for (int p = 0; p < 16; p++) _mm512_storeu_si512(out + (t * 16 + p) * 32, r[p]);
  }
}

static inline __mmask16 tail16(size_t n, size_t i) {
  return n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
}

static bool probs(float *s, size_t n, float scale, const float *m, int m_step, uint16_t *p,
                  size_t np) {
  const __m512 sc = _mm512_set1_ps(scale), mb = _mm512_set1_ps(m && !m_step ? m[0] : 0.0f);
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (size_t i = 0; i < n; i += 16) { /* scaled and masked; the max skips NaN */
    __mmask16 k = tail16(n, i);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + i), sc);
    if (m) v = _mm512_add_ps(v, m_step ? _mm512_maskz_loadu_ps(k, m + i) : mb);
    _mm512_mask_storeu_ps(s + i, k, v);
    mx = _mm512_mask_max_ps(mx, k, v, mx);
  }
  float max = _mm512_reduce_max_ps(mx);
  size_t i = 0;
  if (!(max > -INFINITY)) {
    for (; i < n; i++) p[i] = 0x7fc0;
    for (; i < np; i++) p[i] = 0;
    return true;
  }
  const __m512 vmax = _mm512_set1_ps(max);
  __m512 acc = _mm512_setzero_ps();
  for (i = 0; i < n; i += 16) {
    __mmask16 k = tail16(n, i);
    __m512 e = kl_z_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), vmax));
    acc = _mm512_mask_add_ps(acc, k, acc, e);
    _mm512_mask_storeu_ps(s + i, k, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(acc));
  for (i = 0; i < np; i += 16) {
    __mmask16 k = i < n ? tail16(n, i) : 0, all = tail16(np, i);
    kl_bf_store(p + i, all, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + i), inv));
  }
  return false;
}

const kl_amx_fns kl_amx_bf16 = {config, release, block,   pack_rows, to_bf16,
                                out,    pack_kn, pack_nk, probs};
