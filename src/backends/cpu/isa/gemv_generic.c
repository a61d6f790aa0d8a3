/* Matrix-vector products (isa_fns.h, kl_gemv_fns) in plain C for the auto-vectorizer.
 *
 * Float sums are not reassociated by the compiler (no -ffast-math), so the dot products
 * of nk keep GEMV_LANES partial sums written out as arrays, which it maps to vectors;
 * kn's inner loop runs along y and needs no reassociation. */
#include "backends/cpu/isa/isa_fns.h"

#define GEMV_LANES 8

/* The sum of the lanes of s, pairwise. */
static float lanes_sum(const float *s) {
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

/* Two rows at once: x is read once for both. */
static void dot2(const float *x, const float *w0, const float *w1, size_t k, float *y) {
  float s0[GEMV_LANES] = {0}, s1[GEMV_LANES] = {0};
  size_t j = 0;
  for (; j + GEMV_LANES <= k; j += GEMV_LANES)
    for (int l = 0; l < GEMV_LANES; l++) {
      s0[l] += x[j + l] * w0[j + l];
      s1[l] += x[j + l] * w1[j + l];
    }
  float t0 = lanes_sum(s0), t1 = lanes_sum(s1);
  for (; j < k; j++) {
    t0 += x[j] * w0[j];
    t1 += x[j] * w1[j];
  }
  y[0] = t0;
  y[1] = t1;
}

static void dot1(const float *x, const float *w0, size_t k, float *y) {
  float s0[GEMV_LANES] = {0};
  size_t j = 0;
  for (; j + GEMV_LANES <= k; j += GEMV_LANES)
    for (int l = 0; l < GEMV_LANES; l++) s0[l] += x[j + l] * w0[j + l];
  float t0 = lanes_sum(s0);
  for (; j < k; j++) t0 += x[j] * w0[j];
  y[0] = t0;
}

static void gemv_nk(const float *x, const float *w, size_t ldw, size_t k, float *y, size_t n) {
  size_t i = 0;
  for (; i + 2 <= n; i += 2) dot2(x, w + i * ldw, w + (i + 1) * ldw, k, y + i);
  if (i < n) dot1(x, w + i * ldw, k, y + i);
}

/* y = sum_j x[j] w[j], four rows of w per pass over y. */
static void gemv_kn(const float *x, const float *w, size_t ldw, size_t k, float *y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = 0.0f;
  size_t j = 0;
  for (; j + 4 <= k; j += 4) {
    const float *w0 = w + j * ldw, *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
    float x0 = x[j], x1 = x[j + 1], x2 = x[j + 2], x3 = x[j + 3];
    for (size_t i = 0; i < n; i++) y[i] += (x0 * w0[i] + x1 * w1[i]) + (x2 * w2[i] + x3 * w3[i]);
  }
  for (; j < k; j++) {
    const float *w0 = w + j * ldw;
    float x0 = x[j];
    for (size_t i = 0; i < n; i++) y[i] += x0 * w0[i];
  }
}

const kl_gemv_fns kl_gemv_generic = {gemv_nk, gemv_kn};
