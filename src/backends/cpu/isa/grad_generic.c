/* Gradient-op primitives, generic level: plain C for the auto-vectorizer (isa_fns.h,
 * kl_grad_fns). The lanes of the sums are explicit arrays the vectorizer keeps in
 * registers; no FMA (-ffp-contract=off), as at every level. */
#include "backends/cpu/isa/grad_cl.h"
#include "backends/cpu/isa/isa_fns.h"

#include <math.h>

#define LANES 8

static void sums(const float *x, const float *w, size_t n, double *s, double *sw) {
  double a[LANES] = {0}, b[LANES] = {0};
  size_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) {
      double v = x[i + l];
      a[l] += v;
      b[l] += v * (w ? (double)w[i + l] : v);
    }
  for (int l = 0; i < n; i++, l++) {
    double v = x[i];
    a[l] += v;
    b[l] += v * (w ? (double)w[i] : v);
  }
  for (int l = 0; l < LANES; l++) {
    *s += a[l];
    *sw += b[l];
  }
}

static double deviations(const float *x, size_t n, double mean) {
  double a[LANES] = {0}, d = 0;
  size_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) {
      double v = x[i + l] - mean;
      a[l] += v * v;
    }
  for (int l = 0; i < n; i++, l++) {
    double v = x[i] - mean;
    a[l] += v * v;
  }
  for (int l = 0; l < LANES; l++) d += a[l];
  return d;
}

static void affine(const float *restrict x, float a, float b, float *restrict y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = x[i] * a + b;
}

static void affine2(const float *restrict dy, const float *restrict x, float a, float b,
                    float c, float *restrict dx, size_t n) {
  for (size_t i = 0; i < n; i++) dx[i] = a * dy[i] + b * x[i] + c;
}

/* Both operands loaded whatever the sign, so that the select is a blend, not a branch
 * (random signs mispredict one branch in two). */
static void relu(const float *restrict dy, const float *restrict x, float alpha,
                 float *restrict dx, size_t n) {
  if (alpha == 0) {
    for (size_t i = 0; i < n; i++) {
      float d = dy[i];
      dx[i] = x[i] > 0 ? d : 0.0f;
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    float d = dy[i];
    dx[i] = x[i] > 0 ? d : d * alpha;
  }
}

static void max_taps(const float *x, const int32_t *rows, int n_rows, int32_t first,
                     int32_t step, int32_t kw, int32_t dil, int n, int32_t *best) {
  for (int l = 0; l < n; l++) {
    int32_t col = first + l * step, at0 = rows[0] + col;
    float max = -INFINITY;
    for (int r = 0; r < n_rows; r++)
      for (int32_t k = 0; k < kw; k++) {
        int32_t at = rows[r] + col + k * dil;
        float v = x[at];
        bool take = v > max || v != v;
        max = take ? v : max;
        at0 = take ? at : at0;
      }
    best[l] = at0;
  }
}

const kl_grad_fns kl_grad_generic = {sums,     deviations, affine, affine2, relu,
                                   max_taps, cl_sums,    cl_apply, cl_max_c};
