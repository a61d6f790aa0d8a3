/* The channels-last primitives of kl_grad_fns (isa_fns.h), in plain C over [rows, C]
 * tensors: included by grad_generic.c and grad_avx2.c, so that each level's compiler
 * flags vectorize the channel loops (4 floats with SSE2, 8 with AVX2; the AVX-512
 * levels use AVX2's). The same operations in the same order at every level; the
 * MaxPoolGrad search, which gcc 12 leaves scalar, is AVX2's own in grad_avx2.c for
 * whole blocks of channels. */
#ifndef KILN_GRAD_CL_H
#define KILN_GRAD_CL_H

#include "backends/cpu/isa/isa_fns.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Per channel over rows [0, rows) of x (and dy), d = x - shift: s[0..nc) = sum d,
 * s[nc..2nc) = sum d^2, s[2nc..3nc) = sum dy, s[3nc..4nc) = sum dy d (the last two 0
 * without dy). float32 sums, rows in order. */
static void cl_sums(const float *x, const float *dy, const float *shift, size_t rows, size_t nc,
                    float *s) {
  float *restrict s0 = s, *restrict s1 = s + nc, *restrict s2 = s + 2 * nc,
                  *restrict s3 = s + 3 * nc;
  memset(s, 0, sizeof(float) * 4 * nc);
  for (size_t r = 0; r < rows; r++) {
    const float *restrict xr = x + r * nc;
    for (size_t c = 0; c < nc; c++) {
      float d = xr[c] - shift[c];
      s0[c] += d;
      s1[c] += d * d;
    }
    if (!dy) continue;
    const float *restrict dr = dy + r * nc;
    for (size_t c = 0; c < nc; c++) {
      s2[c] += dr[c];
      s3[c] += dr[c] * (xr[c] - shift[c]);
    }
  }
}

/* out = x * ka + kb per channel (BatchNormTrain), or ka dy + kb x + kc (BatchNormGrad,
 * dy not NULL), over rows [0, rows). */
static void cl_apply(const float *x, const float *dy, const float *ka, const float *kb,
                     const float *kc, size_t rows, size_t nc, float *out) {
  for (size_t r = 0; r < rows; r++) {
    const float *restrict xr = x + r * nc;
    float *restrict y = out + r * nc;
    if (dy) {
      const float *restrict dr = dy + r * nc;
      for (size_t c = 0; c < nc; c++) y[c] = ka[c] * dr[c] + kb[c] * xr[c] + kc[c];
    } else {
      for (size_t c = 0; c < nc; c++) y[c] = xr[c] * ka[c] + kb[c];
    }
  }
}

/* MaxPoolGrad's search over n taps of a window (pixel positions taps[]), for the cw
 * channels at x (pixel p's at x + p * nc): per channel a tap wins when it is greater
 * than mx or NaN, mx and best carried in and out. cw is KL_GRAD_CL_CH or fewer. */
static void cl_max_c(const float *x, size_t nc, const int32_t *taps, int n, int cw, float *mx,
                     int32_t *best) {
  for (int t = 0; t < n; t++) {
    int32_t at = taps[t];
    const float *xv = x + (size_t)at * nc;
    for (int k = 0; k < cw; k++) {
      float v = xv[k];
      bool take = v > mx[k] || v != v;
      mx[k] = take ? v : mx[k];
      best[k] = take ? at : best[k];
    }
  }
}

#endif
