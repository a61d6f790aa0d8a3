/* Weight rounding that minds the data (quantize.h, kl_gptq_round): GPTQ's order.
 *
 * Rounding each weight to its nearest code minimizes |W - dq(Q)|, not what the layer
 * computes from it. For inputs x with second moments H = E[x x^T], the output error of
 * a row w is (w - dq(q)) H (w - dq(q))^T; GPTQ rounds the columns one after another and
 * moves each one's rounding error onto the columns not yet rounded, in the proportions
 * that cancel it best under H (the Cholesky factor U of H^-1, H^-1 = U^T U):
 *
 *   for j in columns:  q_j = round(w_j / s);  e = (w_j - s q_j) / U[j][j];
 *                      w_k -= e U[j][k]  for every k > j
 *
 * H is damped by 1% of its mean diagonal first (as the method's authors do), which also
 * covers inputs that were always 0. Everything is in double. */
#include "quant/quantize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* In-place lower Cholesky factor of the n x n symmetric matrix a (lower triangle read):
 * a = L L^T, L in the lower triangle, the upper one zeroed. False when a is not
 * positive definite. */
static bool cholesky(double *a, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    double d = a[j * n + j];
    for (int64_t k = 0; k < j; k++) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0)) return false;
    d = sqrt(d);
    a[j * n + j] = d;
    for (int64_t i = j + 1; i < n; i++) {
      double v = a[i * n + j];
      for (int64_t k = 0; k < j; k++) v -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = v / d;
    }
    for (int64_t k = j + 1; k < n; k++) a[j * n + k] = 0;
  }
  return true;
}

/* u, on return: the upper factor of H^-1 for the damped h (n x n, upper triangle and
 * diagonal read), H^-1 = u^T u. With P the reversal of the indices and P H P = L L^T
 * (Cholesky), H^-1 = P L^-T L^-1 P, so u = P L^-1 P (upper triangular: a lower
 * triangle reversed both ways): one factorization and one triangular inverse, each
 * walking rows. False when h is not positive definite. */
static bool inverse_factor(const double *h, int64_t n, double *u) {
  double mean = 0;
  for (int64_t i = 0; i < n; i++) mean += h[i * n + i];
  mean /= (double)n;
  if (!(mean > 0) || !isfinite(mean)) return false;
  double *l = malloc(sizeof *l * (size_t)(n * n));
  if (!l) return false;
  for (int64_t i = 0; i < n; i++) /* P H P's lower triangle from h's upper one, damped */
    for (int64_t j = 0; j <= i; j++) {
      int64_t a = n - 1 - i, b = n - 1 - j; /* a <= b */
      l[i * n + j] = h[a * n + b] + (i == j ? 0.01 * mean : 0);
    }
  bool ok = cholesky(l, n);
  /* M = L^-1, row by row: M[i] = (e_i - sum_{k<i} L[i][k] M[k]) / L[i][i]; into u's rows
   * reversed as they are made (u = P M P) */
  double *m = ok ? calloc((size_t)(n * n), sizeof *m) : NULL;
  ok = ok && m;
  for (int64_t i = 0; ok && i < n; i++) {
    double *mi = m + i * n;
    for (int64_t k = 0; k < i; k++) {
      double f = l[i * n + k];
      if (f == 0) continue;
      const double *mk = m + k * n;
      for (int64_t j = 0; j <= k; j++) mi[j] -= f * mk[j];
    }
    mi[i] += 1;
    double d = l[i * n + i];
    for (int64_t j = 0; j <= i; j++) mi[j] /= d;
  }
  for (int64_t i = 0; ok && i < n; i++)
    for (int64_t j = 0; j < n; j++) u[i * n + j] = m[(n - 1 - i) * n + (n - 1 - j)];
  free(m);
  free(l);
  return ok;
}

bool kl_gptq_round(const float *w, int64_t rows, int64_t cols, const float *scales,
                   int64_t scale_step, float qmax, const double *h, int8_t *q) {
  if (rows <= 0 || cols <= 0) return false;
  double *u = malloc(sizeof *u * (size_t)(cols * cols));
  double *row = malloc(sizeof *row * (size_t)cols);
  bool ok = u && row && inverse_factor(h, cols, u);
  for (int64_t r = 0; ok && r < rows; r++) {
    double s = scales[r * scale_step];
    for (int64_t j = 0; j < cols; j++) row[j] = w[r * cols + j];
    for (int64_t j = 0; j < cols; j++) {
      double v = nearbyint(row[j] / s);
      v = v < -qmax ? -qmax : v > qmax ? qmax : v;
      q[r * cols + j] = (int8_t)v;
      double e = (row[j] - v * s) / u[j * cols + j];
      const double *uj = u + j * cols;
      for (int64_t k = j + 1; k < cols; k++) row[k] -= e * uj[k];
    }
  }
  free(u);
  free(row);
  return ok;
}
