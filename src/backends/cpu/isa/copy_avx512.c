/* 2-D transpose, AVX-512 level: 4-byte elements in 16x16 register tiles; other sizes
 * and the ragged edges element by element.
 *
 * A transpose swaps bits between an element's row and column index. The 16x16 tile
 * does it one bit b (8, 4, 2, 1) at a time: rows i and i + b (i with bit b clear)
 * exchange the lanes that have bit b set in row i with those that have it clear in
 * row i + b, each new row being one two-source permute of the pair. */
#include "backends/cpu/isa/vmath_avx512.h"

/* The permutes' lane indexes for bit b: lane l of the low row (i) takes row i's lane l
 * or row i + b's lane l - b (index 16 + l - b); of the high row, row i's lane l + b or
 * row i + b's lane l. */
static void stage_index(int b, __m512i *lo, __m512i *hi) {
  int32_t l_idx[16], h_idx[16];
  for (int l = 0; l < 16; l++) {
    l_idx[l] = (l & b) ? 16 + l - b : l;
    h_idx[l] = (l & b) ? 16 + l : l + b;
  }
  *lo = _mm512_loadu_si512(l_idx);
  *hi = _mm512_loadu_si512(h_idx);
}

/* 4-byte elements of any type: they are only moved (the float intrinsics may alias
 * anything and never change bits), never computed on. */
static void tile16(const __m512i *idx, const float *src, size_t src_ld, float *dst,
                   size_t dst_ld) {
  __m512 r[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + (size_t)i * src_ld);
  for (int s = 0, b = 8; b >= 1; s++, b >>= 1)
    for (int i = 0; i < 16; i++) {
      if (i & b) continue;
      __m512 lo = _mm512_permutex2var_ps(r[i], idx[2 * s], r[i + b]);
      r[i + b] = _mm512_permutex2var_ps(r[i], idx[2 * s + 1], r[i + b]);
      r[i] = lo;
    }
  for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + (size_t)i * dst_ld, r[i]);
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
  __m512i idx[8]; /* low and high row indexes of each stage */
  for (int s = 0, b = 8; b >= 1; s++, b >>= 1) stage_index(b, &idx[2 * s], &idx[2 * s + 1]);
  const uint32_t *s = src;
  uint32_t *d = dst;
  size_t rf = rows & ~(size_t)15, cf = cols & ~(size_t)15;
  for (size_t r = 0; r < rf; r += 16)
    for (size_t c = 0; c < cf; c += 16)
      tile16(idx, (const float *)(s + r * src_ld + c), src_ld,
             (float *)(d + c * dst_ld + r), dst_ld);
  edge(s + cf, src_ld, d + cf * dst_ld, dst_ld, rows, cols - cf);
  edge(s + rf * src_ld, src_ld, d + rf, dst_ld, rows - rf, cf);
}

const kl_copy_fns kl_copy_avx512 = {transpose2d};
