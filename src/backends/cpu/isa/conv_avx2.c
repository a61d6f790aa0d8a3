/* Winograd F(2x2, 3x3) tile transforms, AVX2 level: eight channels at a time, the
 * same operations in the same order as the generic level; masked at the end. */
#include "backends/cpu/isa/vmath_avx2.h"

static inline __m256 load8(const float *p, __m256i m, bool full) {
  return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}

static inline void store8(float *p, __m256 v, __m256i m, bool full) {
  if (full) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, m, v);
}

static inline __attribute__((always_inline)) void in8(const float *const *d, size_t i, float *v,
                                                      size_t stride, __m256i m, bool full) {
  __m256 t[16], r[16];
  for (int k = 0; k < 16; k++) t[k] = load8(d[k] + i, m, full);
  for (int j = 0; j < 4; j++) {
    r[j] = _mm256_sub_ps(t[j], t[8 + j]);
    r[4 + j] = _mm256_add_ps(t[4 + j], t[8 + j]);
    r[8 + j] = _mm256_sub_ps(t[8 + j], t[4 + j]);
    r[12 + j] = _mm256_sub_ps(t[4 + j], t[12 + j]);
  }
  for (int a = 0; a < 4; a++) {
    const __m256 *q = r + 4 * a;
    store8(v + (size_t)(4 * a) * stride + i, _mm256_sub_ps(q[0], q[2]), m, full);
    store8(v + (size_t)(4 * a + 1) * stride + i, _mm256_add_ps(q[1], q[2]), m, full);
    store8(v + (size_t)(4 * a + 2) * stride + i, _mm256_sub_ps(q[2], q[1]), m, full);
    store8(v + (size_t)(4 * a + 3) * stride + i, _mm256_sub_ps(q[1], q[3]), m, full);
  }
}

static void in_tile(const float *const *d, size_t c, float *v, size_t stride) {
  size_t i = 0;
  const __m256i all = _mm256_set1_epi32(-1);
  for (; i + 8 <= c; i += 8) in8(d, i, v, stride, all, true);
  if (i < c) in8(d, i, v, stride, kl_y_tail(c - i), false);
}

static inline __attribute__((always_inline)) void out8(const float *m, size_t stride, size_t i,
                                                       const float *bias, float *const *y,
                                                       const float *const *sum, __m256i mask,
                                                       bool full) {
  __m256 t[16], r[8];
  for (int x = 0; x < 16; x++) t[x] = load8(m + (size_t)x * stride + i, mask, full);
  for (int j = 0; j < 4; j++) {
    r[j] = _mm256_add_ps(_mm256_add_ps(t[j], t[4 + j]), t[8 + j]);
    r[4 + j] = _mm256_sub_ps(_mm256_sub_ps(t[4 + j], t[8 + j]), t[12 + j]);
  }
  __m256 b = bias ? load8(bias + i, mask, full) : _mm256_setzero_ps();
  for (int a = 0; a < 2; a++) {
    const __m256 *q = r + 4 * a;
    __m256 o[2] = {_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(q[0], q[1]), q[2]), b),
                   _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(q[1], q[2]), q[3]), b)};
    for (int s = 0; s < 2; s++) {
      float *yp = y[2 * a + s];
      if (!yp) continue;
      __m256 out = sum ? _mm256_add_ps(o[s], load8(sum[2 * a + s] + i, mask, full)) : o[s];
      store8(yp + i, out, mask, full);
    }
  }
}

static void out_tile(const float *m, size_t stride, size_t k, const float *bias,
                     float *const *y, const float *const *sum) {
  size_t i = 0;
  const __m256i all = _mm256_set1_epi32(-1);
  for (; i + 8 <= k; i += 8) out8(m, stride, i, bias, y, sum, all, true);
  if (i < k) out8(m, stride, i, bias, y, sum, kl_y_tail(k - i), false);
}

/* The grouped convolution: 8 output channels of a group (one vector) for up to
 * GC_PIX pixels at once, in registers, each weight vector loaded once for them all and
 * each input value broadcast: per (tap, channel) one load and GC_PIX broadcasts for
 * GC_PIX multiply-adds. Fewer pixels (a row's last ones, the ones at its borders) take
 * 4 or 2 groups at once instead, so that 4 or more independent sums hide the
 * multiply-add's latency (one pixel's single chain ran 5 times slower). np and gb are
 * constants in each call (the functions inlined): the sums stay in registers. */
#define GC_PIX 8

static inline __attribute__((always_inline)) void gconv_groups(const kl_gconv *d,
                                                               const float *const *taps,
                                                               size_t xoff, size_t xstep,
                                                               size_t np, size_t gb, size_t g0,
                                                               float *y, size_t ystride) {
  size_t ci = d->ci, co = d->co, k = d->k, wg = k * ci * co;
  for (size_t o = 0; o < co; o += 8) {
    __m256 acc[4][GC_PIX];
    for (size_t g = 0; g < gb; g++) {
      __m256 b = d->bias ? _mm256_loadu_ps(d->bias + (g0 + g) * co + o) : _mm256_setzero_ps();
      for (size_t p = 0; p < np; p++) acc[g][p] = b;
    }
    const float *w = d->w + g0 * wg + o;
    for (size_t t = 0; t < k; t++) {
      const float *x = taps[t] + xoff + g0 * ci;
      for (size_t c = 0; c < ci; c++, w += co)
        for (size_t g = 0; g < gb; g++) {
          __m256 wv = _mm256_loadu_ps(w + g * wg);
          for (size_t p = 0; p < np; p++)
            acc[g][p] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + g * ci + p * xstep + c), wv,
                                        acc[g][p]);
        }
    }
    for (size_t g = 0; g < gb; g++)
      for (size_t p = 0; p < np; p++)
        _mm256_storeu_ps(y + p * ystride + (g0 + g) * co + o, acc[g][p]);
  }
}

static inline __attribute__((always_inline)) void gconv_block(const kl_gconv *d,
                                                              const float *const *taps,
                                                              size_t xoff, size_t xstep,
                                                              size_t np, float *y,
                                                              size_t ystride) {
  size_t gb = np == 1 ? 4 : np <= 3 ? 2 : 1, g = 0;
  for (; g + gb <= d->groups; g += gb)
    gconv_groups(d, taps, xoff, xstep, np, gb, g, y, ystride);
  for (; g < d->groups; g++) gconv_groups(d, taps, xoff, xstep, np, 1, g, y, ystride);
}

static void gconv(const kl_gconv *d, const float *const *taps, size_t xstep, size_t n,
                  float *y, size_t ystride) {
  size_t p = 0;
  for (; p + GC_PIX <= n; p += GC_PIX)
    gconv_block(d, taps, p * xstep, xstep, GC_PIX, y + p * ystride, ystride);
  size_t off = p * xstep;
  y += p * ystride;
  switch (n - p) { /* the rest, each count its own unrolled block in registers */
  case 1: gconv_block(d, taps, off, xstep, 1, y, ystride); break;
  case 2: gconv_block(d, taps, off, xstep, 2, y, ystride); break;
  case 3: gconv_block(d, taps, off, xstep, 3, y, ystride); break;
  case 4: gconv_block(d, taps, off, xstep, 4, y, ystride); break;
  case 5: gconv_block(d, taps, off, xstep, 5, y, ystride); break;
  case 6: gconv_block(d, taps, off, xstep, 6, y, ystride); break;
  case 7: gconv_block(d, taps, off, xstep, 7, y, ystride); break;
  default: break;
  }
}

const kl_conv_fns kl_conv_avx2 = {in_tile, out_tile, gconv};
