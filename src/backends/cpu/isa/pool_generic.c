/* The horizontal pass of 2-D pooling, generic level (the driver, run_pool.c, says how
 * the passes fit together). */
#include "backends/cpu/isa/isa_fns.h"

static inline float red(bool is_max, float acc, float v) {
  return is_max ? (v > acc ? v : acc) : acc + v;
}

static inline __attribute__((always_inline)) void hpool_run(bool is_max,
                                                            const float *restrict v,
                                                            size_t stride, size_t dil,
                                                            size_t kw, float *restrict y,
                                                            size_t n) {
  if (stride == 1) { /* tap by tap over the whole row: contiguous, so it vectorizes */
    for (size_t j = 0; j < n; j++) y[j] = v[j];
    for (size_t k = 1; k < kw; k++)
      for (size_t j = 0; j < n; j++) y[j] = red(is_max, y[j], v[j + k * dil]);
    return;
  }
  for (size_t j = 0; j < n; j++) {
    float acc = v[j * stride];
    for (size_t k = 1; k < kw; k++) acc = red(is_max, acc, v[j * stride + k * dil]);
    y[j] = acc;
  }
}

static void hpool(bool is_max, const float *v, size_t stride, size_t dil, size_t kw,
                  float *y, size_t n) {
  if (is_max) hpool_run(true, v, stride, dil, kw, y, n);
  else hpool_run(false, v, stride, dil, kw, y, n);
}

static inline __attribute__((always_inline)) void taps_run(bool is_max, bool acc,
                                                           const float *const *x,
                                                           size_t n_taps, float scale,
                                                           float *restrict y, size_t n) {
  /* these taps summed apart, then added to the earlier ones (acc): a window of
   * thousands of taps is not one chain of additions; in chunks of channels, each
   * loop over contiguous floats */
  float part[256];
  for (size_t i0 = 0; i0 < n; i0 += 256) {
    size_t w = n - i0 < 256 ? n - i0 : 256;
    for (size_t i = 0; i < w; i++) part[i] = is_max ? -__builtin_inff() : 0.0f;
    for (size_t t = 0; t < n_taps; t++) {
      const float *restrict v = x[t] + i0;
      for (size_t i = 0; i < w; i++) part[i] = red(is_max, part[i], v[i]);
    }
    float *restrict yc = y + i0;
    for (size_t i = 0; i < w; i++) {
      float s = acc ? red(is_max, part[i], yc[i]) : part[i];
      yc[i] = scale != 1.0f ? s * scale : s;
    }
  }
}

static void taps(bool is_max, bool acc, const float *const *x, size_t n_taps, float scale,
                 float *y, size_t n) {
  if (is_max) taps_run(true, acc, x, n_taps, scale, y, n);
  else taps_run(false, acc, x, n_taps, scale, y, n);
}

const kl_pool_fns kl_pool_generic = {hpool, taps};
