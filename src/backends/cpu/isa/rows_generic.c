/* Row primitives (softmax, layer normalization, sums), generic level: plain C for the
 * auto-vectorizer. Reductions keep LANES partial results, one per vector lane, so the
 * compiler can vectorize them without reassociating float additions (which it may not
 * do on its own); x and y may be the same row, so y is written from local blocks, as
 * in eltwise_generic.c. */
#include "backends/cpu/isa/vmath_generic.h"

#include <math.h>

#define LANES 16
#define BLOCK 256

static float lanes_sum(const float *acc) {
  float s = 0;
  for (int l = 0; l < LANES; l++) s += acc[l];
  return s;
}

static float row_sum(const float *x, size_t n) {
  float acc[LANES] = {0};
  size_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) acc[l] += x[i + l];
  for (int l = 0; i < n; i++, l++) acc[l] += x[i];
  return lanes_sum(acc);
}

/* The largest element; a NaN is skipped here, and reaches the result through the sum
 * of exponentials instead. */
static float row_max(const float *x, size_t n) {
  float acc[LANES];
  for (int l = 0; l < LANES; l++) acc[l] = -INFINITY;
  size_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  for (int l = 0; i < n; i++, l++) acc[l] = x[i] > acc[l] ? x[i] : acc[l];
  float m = acc[0];
  for (int l = 1; l < LANES; l++) m = acc[l] > m ? acc[l] : m;
  return m;
}

/* sum of e^(x - max), storing each term in y unless y is NULL */
static float exp_sum(const float *x, float max, float *y, size_t n) {
  float buf[BLOCK], acc[LANES] = {0};
  for (size_t i = 0; i < n; i += BLOCK) {
    size_t m = n - i < BLOCK ? n - i : BLOCK, j = 0;
    memcpy(buf, x + i, m * sizeof *buf);
    for (size_t k = 0; k < m; k++) buf[k] = kl_g_exp(buf[k] - max);
    for (; j + LANES <= m; j += LANES)
      for (int l = 0; l < LANES; l++) acc[l] += buf[j + l];
    for (int l = 0; j < m; j++, l++) acc[l] += buf[j];
    if (y) memcpy(y + i, buf, m * sizeof *buf);
  }
  return lanes_sum(acc);
}

/* y = (x - t) * s - u, in blocks (x may be y); each step rounded as written, since
 * x - t is exact near the maximum and must not be folded with u */
static void shift_scale(const float *x, float t, float s, float u, float *y, size_t n) {
  float buf[BLOCK];
  for (size_t i = 0; i < n; i += BLOCK) {
    size_t m = n - i < BLOCK ? n - i : BLOCK;
    memcpy(buf, x + i, m * sizeof *buf);
    for (size_t k = 0; k < m; k++) buf[k] = (buf[k] - t) * s - u;
    memcpy(y + i, buf, m * sizeof *buf);
  }
}

static void softmax(const float *x, float *y, size_t n, bool log_form) {
  float max = row_max(x, n);
  if (log_form) {
    float lse = (float)log((double)exp_sum(x, max, NULL, n));
    shift_scale(x, max, 1.0f, lse, y, n);
    return;
  }
  float sum = exp_sum(x, max, y, n);
  shift_scale(y, 0.0f, 1.0f / sum, 0.0f, y, n);
}

/* sum of (x - mean)^2 */
static float sq_dev(const float *x, float mean, size_t n) {
  float acc[LANES] = {0};
  size_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) {
      float d = x[i + l] - mean;
      acc[l] += d * d;
    }
  for (int l = 0; i < n; i++, l++) acc[l] += (x[i] - mean) * (x[i] - mean);
  return lanes_sum(acc);
}

static void norm(const kl_norm_row *p, const float *x, float *y, float *mean_out,
                 float *inv_out) {
  size_t n = p->n;
  float mean, inv;
  KL_NORM_STATS(row_sum, sq_dev, x, p, &mean, &inv);
  const float *scale = p->scale, *bias = p->bias;
  float buf[BLOCK];
  for (size_t i = 0; i < n; i += BLOCK) {
    size_t m = n - i < BLOCK ? n - i : BLOCK;
    memcpy(buf, x + i, m * sizeof *buf);
    for (size_t k = 0; k < m; k++) buf[k] = (buf[k] - mean) * inv * (scale ? scale[i + k] : p->scale1);
    if (bias)
      for (size_t k = 0; k < m; k++) buf[k] += bias[i + k];
    else if (p->bias1 != 0)
      for (size_t k = 0; k < m; k++) buf[k] += p->bias1;
    memcpy(y + i, buf, m * sizeof *buf);
  }
  *mean_out = mean;
  *inv_out = inv;
}

const kl_rows_fns kl_rows_generic = {softmax, norm, row_sum};
