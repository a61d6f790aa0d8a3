/* The numbers of quantization (quantize.h): value statistics, clipping thresholds
 * (minmax, percentile, entropy), scales and zero points, int8 weights. */
#include "quant/quantize.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NBINS (2 * KL_HIST_HALF)

void kl_stats_init(kl_value_stats *s) {
  memset(s, 0, sizeof *s);
  s->min = INFINITY;
  s->max = -INFINITY;
}

/* Doubles the histogram's range: bin pairs merge towards the middle, so that bins stay
 * symmetric about 0 and a value keeps the side it was counted on. */
static void widen(kl_value_stats *s) {
  int64_t h[NBINS] = {0};
  for (int i = 0; i < NBINS; i++) h[KL_HIST_HALF / 2 + i / 2] += s->hist[i];
  memcpy(s->hist, h, sizeof h);
  s->half_range *= 2;
}

void kl_stats_add(kl_value_stats *s, const float *x, int64_t n) {
  double amax = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = x[i];
    if (v < s->min) s->min = v;
    if (v > s->max) s->max = v;
    if (fabs(v) > amax) amax = fabs(v);
  }
  s->count += n;
  if (s->half_range == 0) {
    if (amax == 0) {
      s->zeros += n;
      return;
    }
    s->half_range = amax;
    s->hist[KL_HIST_HALF] += s->zeros; /* zero's bin: [0, w) */
    s->zeros = 0;
  }
  while (amax > s->half_range) widen(s); /* |x| = half_range: the last bin */
  double inv_w = KL_HIST_HALF / s->half_range;
  for (int64_t i = 0; i < n; i++) {
    int b = (int)floor((x[i] + s->half_range) * inv_w);
    s->hist[b < 0 ? 0 : b >= NBINS ? NBINS - 1 : b]++;
  }
}

/* |x|'s histogram: bin k counts |x| in [k w, (k + 1) w) (for negative values the bins
 * are (-(k + 1) w, -k w], which folds onto the same |x| interval). */
static void fold_abs(const kl_value_stats *s, double *h) {
  for (int k = 0; k < KL_HIST_HALF; k++)
    h[k] = (double)s->hist[KL_HIST_HALF + k] + (double)s->hist[KL_HIST_HALF - 1 - k];
}

static double percentile_threshold(const double *h, double w, double percentile) {
  double total = 0, sum = 0;
  for (int k = 0; k < KL_HIST_HALF; k++) total += h[k];
  double want = total * percentile / 100.0;
  for (int k = 0; k < KL_HIST_HALF; k++) {
    sum += h[k];
    if (sum >= want) return (k + 1) * w;
  }
  return KL_HIST_HALF * w;
}

/* KL(p || q) of two unnormalised histograms of n bins (q > 0 wherever p > 0). */
static double kl_divergence(const double *p, const double *q, int n) {
  double sp = 0, sq = 0, d = 0;
  for (int i = 0; i < n; i++) sp += p[i], sq += q[i];
  if (sp <= 0 || sq <= 0) return INFINITY;
  for (int i = 0; i < n; i++)
    if (p[i] > 0) d += p[i] / sp * log((p[i] / sp) / (q[i] / sq));
  return d;
}

/* TensorRT's entropy calibration: for each candidate threshold (i bins of |x|), the
 * reference distribution is the histogram cut at i with everything beyond added to its
 * last bin; the candidate is that cut merged into `levels` quantization bins and spread
 * back evenly over the nonzero bins of each; the threshold whose candidate diverges
 * least from its reference wins. */
static double entropy_threshold(const double *h, double w, int levels) {
  double *p = malloc(sizeof(double) * KL_HIST_HALF * 2);
  if (!p) return KL_HIST_HALF * w; /* no memory: no clipping, as minmax */
  double *qd = p + KL_HIST_HALF;
  double beyond = 0, best = INFINITY;
  int best_i = KL_HIST_HALF;
  for (int k = levels; k < KL_HIST_HALF; k++) beyond += h[k];
  for (int i = levels; i <= KL_HIST_HALF; i++) {
    memcpy(p, h, sizeof(double) * (size_t)i);
    p[i - 1] += beyond;
    if (i < KL_HIST_HALF) beyond -= h[i];
    /* bins [j*i/levels, (j+1)*i/levels) form quantized bin j */
    for (int j = 0; j < levels; j++) {
      int a = (int)((int64_t)j * i / levels), b = (int)((int64_t)(j + 1) * i / levels);
      double sum = 0;
      int nonzero = 0;
      for (int k = a; k < b; k++) sum += h[k], nonzero += h[k] > 0;
      for (int k = a; k < b; k++) qd[k] = h[k] > 0 ? sum / nonzero : 0;
    }
    /* p's last bin took the outliers; where h is empty there, q has nothing to match
     * and the divergence is infinite: give it the smallest mass instead */
    for (int k = 0; k < i; k++)
      if (p[k] > 0 && qd[k] == 0) qd[k] = 1e-4;
    double d = kl_divergence(p, qd, i);
    if (d < best) best = d, best_i = i;
  }
  free(p);
  return best_i * w;
}

/* Whether |x|'s histogram h ends in a spike: its last nonzero bin holds at least 0.1%
 * of the nonzero values and twice as many as any of the 8 bins before it (a value
 * clamped at its top, as a ReLU6's output at 6, rather than a tail thinning out). */
static bool clamped_top(const double *h) {
  int top = KL_HIST_HALF - 1;
  while (top > 0 && h[top] == 0) top--;
  if (top < 8) return false;
  double total = 0, before = 0;
  for (int k = 1; k < KL_HIST_HALF; k++) total += h[k]; /* not the zeros' bin */
  for (int k = top - 8; k < top; k++) before = fmax(before, h[k]);
  return h[top] >= 1e-3 * total && h[top] >= 2 * before;
}

double kl_stats_threshold(const kl_value_stats *s, kl_calib_method m, double percentile) {
  double amax = fmax(fabs(s->min), fabs(s->max));
  if (s->count == 0 || s->half_range == 0 || m == KL_CALIB_MINMAX) return s->count ? amax : 0;
  double h[KL_HIST_HALF], w = s->half_range / KL_HIST_HALF, t;
  fold_abs(s, h);
  if (m == KL_CALIB_PERCENTILE) {
    t = percentile_threshold(h, w, percentile > 0 ? percentile : 99.999);
  } else {
    /* |x| of a value that is never negative fills 256 uint8 steps, else 128 */
    /* The KL search compares shapes, not errors: a value clamped at its top (a ReLU6's
     * 6, a few percent of it) it clipped at about half (EfficientNet-Lite0's: 10 to 20
     * dB of SQNR left, the model's top-1 0.5% the same as float32's), losing the
     * saturated values that carry the model. Such a value is not clipped. */
    t = clamped_top(h) ? amax : entropy_threshold(h, w, s->min >= 0 ? 256 : 128);
  }
  return fmin(t, amax);
}

void kl_stats_range(const kl_value_stats *s, kl_calib_method m, double percentile, double *lo,
                    double *hi) {
  if (s->count == 0) {
    *lo = *hi = 0;
    return;
  }
  double t = kl_stats_threshold(s, m, percentile);
  *lo = fmax(s->min, -t);
  *hi = fmin(s->max, t);
}

/* A range of width w over `steps` codes as a float32 scale, or 0 when that is not a normal
 * float32 (a range of denormals: its scale underflowed to 0, and the zero point -rmin /
 * scale was NaN; a model with a scale of 0 quantizes everything to a saturated code). */
static float range_scale(double w, double steps) {
  float s = (float)(w / steps);
  return s >= FLT_MIN ? s : 0.0f;
}

kl_qparam kl_qparam_activation(double lo, double hi, bool symmetric) {
  kl_qparam p = {1.0f, 0}; /* also for a range too narrow for a float32 scale */
  if (symmetric) {
    float s = range_scale(fmax(fabs(lo), fabs(hi)), 127.0);
    if (s > 0) p.scale = s;
    return p;
  }
  double rmin = fmin(lo, 0), rmax = fmax(hi, 0);
  float s = range_scale(rmax - rmin, 255.0);
  if (!(s > 0)) return p;
  p.scale = s;
  double z = nearbyint(-rmin / p.scale);
  p.zero_point = z < 0 ? 0 : z > 255 ? 255 : (int32_t)z;
  return p;
}

void kl_quantize_weights(const float *w, int rank, const int64_t *dims, int axis,
                         bool per_channel, bool reduce_range, float *scales, int8_t *q) {
  int64_t outer = 1, ch = 1, inner = 1;
  for (int d = 0; d < rank; d++) {
    if (!per_channel) outer *= dims[d];
    else if (d < axis) outer *= dims[d];
    else if (d == axis) ch = dims[d];
    else inner *= dims[d];
  }
  const float qmax = reduce_range ? 64.0f : 127.0f;
  for (int64_t c = 0; c < ch; c++) {
    float amax = 0;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t i = 0; i < inner; i++) amax = fmaxf(amax, fabsf(w[(o * ch + c) * inner + i]));
    float sc = range_scale(amax, qmax); /* weights all below FLT_MIN * qmax: codes 0 */
    sc = sc > 0 ? sc : 1.0f;
    scales[c] = sc;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t i = 0; i < inner; i++) {
        int64_t k = (o * ch + c) * inner + i;
        float v = nearbyintf(w[k] / sc);
        q[k] = (int8_t)(v < -qmax ? -qmax : v > qmax ? qmax : v);
      }
  }
}
