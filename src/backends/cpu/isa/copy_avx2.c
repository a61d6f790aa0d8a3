/* 2-D transpose, AVX2 level: 4-byte elements in 8x8 register tiles; other sizes and
 * the ragged edges element by element.
 *
 * A transpose swaps bits between an element's row and column index. The 8x8 tile does
 * it one bit at a time: for bit b (4, 2, 1), rows i and i + b (i with bit b clear)
 * exchange the lanes that have bit b set in i's row with those that have it clear in
 * row i + b. */
#include "backends/cpu/isa/vmath_avx2.h"

/* 4-byte elements of any type: they are only moved (the float intrinsics may alias
 * anything and never change bits), never computed on. */
static void tile8(const float *src, size_t src_ld, float *dst, size_t dst_ld) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + (size_t)i * src_ld);
  for (int i = 0; i < 4; i++) { /* bit 4: 128-bit halves */
    t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
  for (int i = 0; i < 8; i += 4) /* bit 2: pairs of lanes */
    for (int k = i; k < i + 2; k++) {
      r[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[k + 2] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    }
  for (int i = 0; i < 8; i += 2) { /* bit 1: single lanes */
    t[i] = _mm256_blend_ps(r[i], _mm256_moveldup_ps(r[i + 1]), 0xaa);
    t[i + 1] = _mm256_blend_ps(_mm256_movehdup_ps(r[i]), r[i + 1], 0xaa);
  }
  for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + (size_t)i * dst_ld, t[i]);
}

static void edge(const uint32_t *src, size_t src_ld, uint32_t *dst, size_t dst_ld,
                 size_t rows, size_t cols) {
  for (size_t c = 0; c < cols; c++)
    for (size_t r = 0; r < rows; r++) dst[c * dst_ld + r] = src[r * src_ld + c];
}

static void transpose2d(size_t elem_size, const void *src, size_t src_ld, void *dst,
                        size_t dst_ld, size_t rows, size_t cols) {
  if (elem_size != 4) {
    kl_copy_generic.transpose2d(elem_size, src, src_ld, dst, dst_ld, rows, cols);
    return;
  }
  const uint32_t *s = src;
  uint32_t *d = dst;
  size_t rf = rows & ~(size_t)7, cf = cols & ~(size_t)7;
  for (size_t r = 0; r < rf; r += 8)
    for (size_t c = 0; c < cf; c += 8)
      tile8((const float *)(s + r * src_ld + c), src_ld, (float *)(d + c * dst_ld + r), dst_ld);
  edge(s + cf, src_ld, d + cf * dst_ld, dst_ld, rows, cols - cf);
  edge(s + rf * src_ld, src_ld, d + rf, dst_ld, rows - rf, cf);
}

const kl_copy_fns kl_copy_avx2 = {transpose2d};
