/* Helpers for the portable reference kernels (the oracle that faster kernels are tested
 * against): dtype-generic element access, NumPy broadcast iteration, and the window
 * geometry of convolution and pooling in a fixed three-spatial-dim form.
 *
 * Kernels compute in double whatever the storage dtype (integer arithmetic ops in
 * int64), and trust the shapes and dtypes that the op's infer function validated.
 */
#ifndef KL_REF_H
#define KL_REF_H

#include "ir/ir.h"

#include <math.h>
#include <string.h>

/* Element i of a buffer as double. Inline twin of kl_load_f64 for the common float
 * types, so that an inner loop compiles to a load rather than a call. */
static inline double kl_ref_load(const void *p, kl_dtype t, int64_t i) {
  switch (t) {
  case KL_F32: return ((const float *)p)[i];
  case KL_F64: return ((const double *)p)[i];
  case KL_F16: return kl_f16_to_f32(((const uint16_t *)p)[i]);
  case KL_BF16: return kl_bf16_to_f32(((const uint16_t *)p)[i]);
  default: return kl_load_f64(p, t, (size_t)i);
  }
}

/* Stores v rounded to the dtype (to nearest even for the half types). */
static inline void kl_ref_store(void *p, kl_dtype t, int64_t i, double v) {
  switch (t) {
  case KL_F32: ((float *)p)[i] = (float)v; break;
  case KL_F64: ((double *)p)[i] = v; break;
  case KL_F16: ((uint16_t *)p)[i] = kl_f32_to_f16((float)v); break;
  case KL_BF16: ((uint16_t *)p)[i] = kl_f32_to_bf16((float)v); break;
  default: kl_store_f64(p, t, (size_t)i, v); break;
  }
}

/* Integer (and bool) elements as int64; a uint64 comes back as its bit pattern, so
 * kernels that order or divide values treat KL_U64 as unsigned themselves. */
static inline int64_t kl_ref_load_int(const void *p, kl_dtype t, int64_t i) {
  switch (t) {
  case KL_I32: return ((const int32_t *)p)[i];
  case KL_I64: return ((const int64_t *)p)[i];
  default: return kl_load_i64(p, t, (size_t)i);
  }
}

/* Wraps to the dtype's width (two's complement), as NumPy and onnxruntime do on
 * overflow; bool stores v != 0. */
static inline void kl_ref_store_int(void *p, kl_dtype t, int64_t i, int64_t v) {
  uint64_t u = (uint64_t)v;
  switch (t) {
  case KL_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)u; break;
  case KL_I64: ((int64_t *)p)[i] = v; break;
  case KL_U8: ((uint8_t *)p)[i] = (uint8_t)u; break;
  case KL_I8: ((int8_t *)p)[i] = (int8_t)(uint8_t)u; break;
  case KL_U16: ((uint16_t *)p)[i] = (uint16_t)u; break;
  case KL_I16: ((int16_t *)p)[i] = (int16_t)(uint16_t)u; break;
  case KL_U32: ((uint32_t *)p)[i] = (uint32_t)u; break;
  case KL_U64: ((uint64_t *)p)[i] = u; break;
  case KL_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  case KL_I4: case KL_U4: case KL_I2: case KL_U2: kl_store_small_int(p, t, (size_t)i, v); break;
  default: break;
  }
}

/* v truncated toward zero, saturating at the int64 range, NaN as 0: a defined result
 * where C leaves the conversion of an out-of-range float undefined. */
static inline int64_t kl_ref_trunc_i64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775808.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

/* Product of dims[from..to). */
static inline int64_t kl_ref_span(const int64_t *dims, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++) n *= dims[i];
  return n;
}

static inline void kl_ref_copy_bytes(void *dst, const void *src, size_t n) {
  if (n && dst != src) memmove(dst, src, n);
}

/* ---- broadcast iteration ----
 * Walks the indexes of an output shape in row-major order and keeps, for each operand,
 * the element offset that NumPy broadcasting maps the index to:
 *
 *   kl_ref_iter it;
 *   kl_ref_iter_init(&it, y->rank, y->dims);
 *   kl_ref_iter_bcast(&it, 0, a->rank, a->dims, 1);
 *   for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) use it.off[0];
 */
#define KL_REF_ITER_OPS 3

typedef struct kl_ref_iter {
  int rank;
  int64_t dims[KL_MAX_RANK], idx[KL_MAX_RANK];
  int64_t stride[KL_REF_ITER_OPS][KL_MAX_RANK]; /* 0 where an operand broadcasts */
  int64_t off[KL_REF_ITER_OPS];
} kl_ref_iter;

static inline void kl_ref_iter_init(kl_ref_iter *it, int rank, const int64_t *dims) {
  memset(it, 0, sizeof *it);
  it->rank = rank;
  memcpy(it->dims, dims, sizeof(int64_t) * (size_t)rank);
}

/* Operand k, of shape dims (right-aligned with the output, rank <= the output's), in
 * blocks of `unit` elements per index step. */
static inline void kl_ref_iter_bcast(kl_ref_iter *it, int k, int rank, const int64_t *dims,
                                     int64_t unit) {
  int64_t s = unit;
  for (int i = rank - 1; i >= 0; i--) {
    int o = i + it->rank - rank;
    it->stride[k][o] = dims[i] == 1 ? 0 : s;
    s *= dims[i];
  }
}

static inline void kl_ref_iter_next(kl_ref_iter *it) {
  for (int d = it->rank - 1; d >= 0; d--) {
    for (int k = 0; k < KL_REF_ITER_OPS; k++) it->off[k] += it->stride[k][d];
    if (++it->idx[d] < it->dims[d]) return;
    for (int k = 0; k < KL_REF_ITER_OPS; k++) it->off[k] -= it->stride[k][d] * it->dims[d];
    it->idx[d] = 0;
  }
}

/* ---- convolution and pooling windows ----
 * 1-D and 2-D inputs run as 3-D ones whose leading spatial dims have size 1, so the
 * kernels have one fixed loop nest. */
typedef struct kl_ref_window {
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3], pad_end[3];
} kl_ref_window;

/* Geometry of the node's window over input 0 (N, C, spatial...) producing output 0;
 * kernel gives the kernel dims when they come from a weight (Conv), else NULL. */
kiln_status kl_ref_window_init(const kl_kernel_ctx *c, const int64_t *kernel,
                               kl_ref_window *w);

/* QLinearGlobalAveragePool's and QLinearAveragePool's output code (ops.def): acc * (sx /
 * (sy * count)), each step rounded to float32 as onnxruntime's kernel rounds it, to
 * nearest even, plus zy, saturated to the 8-bit dtype t; NaN (no taps) gives zy. */
static inline int64_t kl_ref_mean_code(int64_t acc, float sx, float sy, float count,
                                       int64_t zy, kl_dtype t) {
  float q = (float)acc * (sx / (sy * count));
  double lo = t == KL_U8 ? 0 : -128, hi = t == KL_U8 ? 255 : 127;
  double v = q != q ? (double)zy : rint((double)q) + (double)zy;
  return (int64_t)(v < lo ? lo : v > hi ? hi : v);
}

/* The taps k < kn of a window starting at `start` (step dil >= 1) that land in
 * [lo, hi): [*k0, *k1), found without visiting the others, so that a window of 2^40
 * over padding costs what its taps inside do. The window's geometry was checked
 * (kl_window_out): lo - start and hi - start fit. */
static inline void kl_ref_tap_span(int64_t start, int64_t kn, int64_t dil, int64_t lo,
                                   int64_t hi, int64_t *k0, int64_t *k1) {
  int64_t first = start >= lo ? 0 : (lo - start) / dil + ((lo - start) % dil != 0);
  int64_t end = start >= hi ? 0 : (hi - 1 - start) / dil + 1;
  *k0 = first < kn ? first : kn;
  *k1 = end < kn ? end : kn;
  if (*k1 < *k0) *k1 = *k0;
}

/* Flat offset of (i0, i1, i2) in a 3-D block of dims d. */
static inline int64_t kl_ref_at3(const int64_t *d, int64_t i0, int64_t i1, int64_t i2) {
  return (i0 * d[1] + i1) * d[2] + i2;
}

#endif
