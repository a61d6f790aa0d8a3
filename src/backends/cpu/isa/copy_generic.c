/* 2-D transpose, generic level: square tiles small enough that a tile's source rows
 * and destination rows all stay in the L1 cache while it is copied. */
#include "backends/cpu/isa/isa_fns.h"

#define TILE 16

#define TRANSPOSE_T(T)                                                                 \
  static void transpose_##T(const T *src, size_t src_ld, T *dst, size_t dst_ld,        \
                            size_t rows, size_t cols) {                                \
    for (size_t r0 = 0; r0 < rows; r0 += TILE)                                         \
      for (size_t c0 = 0; c0 < cols; c0 += TILE) {                                     \
        size_t r1 = rows - r0 < TILE ? rows : r0 + TILE;                               \
        size_t c1 = cols - c0 < TILE ? cols : c0 + TILE;                               \
        for (size_t c = c0; c < c1; c++)                                               \
          for (size_t r = r0; r < r1; r++) dst[c * dst_ld + r] = src[r * src_ld + c];  \
      }                                                                                \
  }

TRANSPOSE_T(uint8_t)
TRANSPOSE_T(uint16_t)
TRANSPOSE_T(uint32_t)
TRANSPOSE_T(uint64_t)

static void transpose2d(size_t elem_size, const void *src, size_t src_ld, void *dst,
                        size_t dst_ld, size_t rows, size_t cols) {
  switch (elem_size) {
  case 1: transpose_uint8_t(src, src_ld, dst, dst_ld, rows, cols); break;
  case 2: transpose_uint16_t(src, src_ld, dst, dst_ld, rows, cols); break;
  case 4: transpose_uint32_t(src, src_ld, dst, dst_ld, rows, cols); break;
  default: transpose_uint64_t(src, src_ld, dst, dst_ld, rows, cols); break;
  }
}

const kl_copy_fns kl_copy_generic = {transpose2d};
