/* kiln's own kernels for the gradient ops of a CNN training step, float32, in plain C
 * that the vectorizer takes (this file is built with -O3 like the other drivers),
 * spread over the node's threads in fixed tasks, so that every result is the same
 * whatever the thread count: a sum is always formed by one task, in one order.
 *
 *   MaxPoolGrad (dY, X) -> dX         per (n, c) plane: dX zeroed, each dY element
 *                                     added at its window's maximum, found again with
 *                                     the reference's rule (ref/grad.c: taps in scan
 *                                     order, a later one wins when greater or NaN)
 *   AveragePoolGrad (dY, XLike) -> dX per plane: dY / count spread over the taps
 *   BatchNormTrain (X, scale, B, mean, var) -> Y, mean', var'     per channel
 *   BatchNormGrad (dY, X, scale) -> dX, dScale, dB               per channel
 *   UnaryGrad (dY, X, Y?) -> dX       Relu, LeakyRelu, Sigmoid, Tanh, Gelu, Silu, Erf
 *   SoftmaxGrad (dY, Y) -> dX         per row of the last axis
 *   LayerNormGrad (dY, X, scale) -> dX, dScale, dB   per block of rows; dScale and dB
 *                                     summed per block in double, blocks added in order
 *   SumTo (dY, Like) -> dX            dY summed down to Like's shape
 *   ReduceGrad (dY, XLike) -> dX      dY broadcast back over the reduced axes
 *
 * Sums (batch statistics, SumTo) are formed in double, as the reference forms them:
 * per channel in 8 lanes (element j into lane j % 8) added in a fixed order, so the
 * vectorizer can keep the lanes in registers. Shapes SumTo and ReduceGrad cannot
 * collapse to at most three runs of kept and reduced dims, other dtypes and other
 * UnaryGrad rules run the reference kernel (kl_isa_ref).
 */
#include "backends/cpu/isa/run.h"
#include "backends/cpu/ref/ref.h"
#include "ir/grad.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 16384 /* elements per task of the elementwise kernels */
#define LANES 8

static bool all_f32(const kl_kernel_ctx *c, int from, int to) {
  for (int k = from; k < to && k < c->n_in; k++)
    if (c->in[k] && c->in[k]->dtype != KL_F32) return false;
  for (int k = 0; k < c->n_out; k++)
    if (c->out[k] && c->out[k]->dtype != KL_F32) return false;
  return true;
}

/* ---- pooling gradients ---- */

typedef struct pool_job {
  kl_ref_window g;
  const float *dy, *x;
  float *dx;
  bool is_max, include_pad;
} pool_job;

/* The taps of output o along dim i inside [lo, hi): [*k0, *k1). */
static void taps(const kl_ref_window *g, int i, int64_t o, int64_t lo, int64_t hi, int64_t *k0,
                 int64_t *k1) {
  kl_ref_tap_span(o * g->stride[i] - g->pad_begin[i], g->kernel[i], g->dilation[i], lo, hi, k0, k1);
}

static int64_t tap(const kl_ref_window *g, int i, int64_t o, int64_t k) {
  return o * g->stride[i] - g->pad_begin[i] + k * g->dilation[i];
}

/* One dY element's window: its taps inside X in from..to per dim. */
static void max_window(const pool_job *j, const float *x, float *dx, const int64_t *o,
                       const int64_t *from, const int64_t *to, float dy) {
  const kl_ref_window *g = &j->g;
  float max = -INFINITY;
  int64_t best = -1;
  for (int64_t k0 = from[0]; k0 < to[0]; k0++)
    for (int64_t k1 = from[1]; k1 < to[1]; k1++) {
      int64_t row = (tap(g, 0, o[0], k0) * g->in[1] + tap(g, 1, o[1], k1)) * g->in[2];
      for (int64_t k2 = from[2]; k2 < to[2]; k2++) {
        int64_t at = row + tap(g, 2, o[2], k2);
        float v = x[at];
        if (best < 0) best = at;
        if (v > max || isnan(v)) {
          max = v;
          best = at;
        }
      }
    }
  dx[best] += dy;
}

static void avg_window(const pool_job *j, float *dx, const int64_t *o, const int64_t *from,
                       const int64_t *to, float dy) {
  const kl_ref_window *g = &j->g;
  double count = 1;
  for (int i = 0; i < 3; i++) {
    int64_t p0 = from[i], p1 = to[i];
    if (j->include_pad) taps(g, i, o[i], -g->pad_begin[i], g->in[i] + g->pad_end[i], &p0, &p1);
    count *= (double)(p1 - p0);
  }
  float share = (float)(dy / count);
  for (int64_t k0 = from[0]; k0 < to[0]; k0++)
    for (int64_t k1 = from[1]; k1 < to[1]; k1++) {
      float *row = dx + (tap(g, 0, o[0], k0) * g->in[1] + tap(g, 1, o[1], k1)) * g->in[2];
      for (int64_t k2 = from[2]; k2 < to[2]; k2++) row[tap(g, 2, o[2], k2)] += share;
    }
}

/* Plane p (one (n, c)): every dY element of it into dX's plane. */
static void pool_plane(void *arg, int64_t p) {
  const pool_job *j = arg;
  const kl_ref_window *g = &j->g;
  int64_t xsize = g->in[0] * g->in[1] * g->in[2], ysize = g->out[0] * g->out[1] * g->out[2];
  float *dx = j->dx + p * xsize;
  const float *dy = j->dy + p * ysize, *x = j->is_max ? j->x + p * xsize : NULL;
  memset(dx, 0, sizeof(float) * (size_t)xsize);
  int64_t o[3], from[3], to[3];
  for (o[0] = 0; o[0] < g->out[0]; o[0]++) {
    taps(g, 0, o[0], 0, g->in[0], &from[0], &to[0]);
    for (o[1] = 0; o[1] < g->out[1]; o[1]++) {
      taps(g, 1, o[1], 0, g->in[1], &from[1], &to[1]);
      for (o[2] = 0; o[2] < g->out[2]; o[2]++, dy++) {
        taps(g, 2, o[2], 0, g->in[2], &from[2], &to[2]);
        if (from[0] >= to[0] || from[1] >= to[1] || from[2] >= to[2]) continue;
        if (j->is_max) max_window(j, x, dx, o, from, to, *dy);
        else avg_window(j, dx, o, from, to, *dy);
      }
    }
  }
}

int kl_run_pool_grad(kl_kernel_ctx *c) {
  bool is_max = c->node->op == KL_OP_KilnMaxPoolGrad;
  const kl_tensor *dy = c->in[0], *x = c->in[1];
  if (c->out[0]->dtype != KL_F32 || dy->dtype != KL_F32 || (is_max && x->dtype != KL_F32) ||
      x->rank < 3 || x->rank > 5)
    return kl_isa_ref(c);
  pool_job j = {.dy = dy->data, .x = x->data, .dx = c->out[0]->data, .is_max = is_max,
                .include_pad = kl_attr_int(c->node, "count_include_pad", 0) != 0};
  /* the forward op's window: over X (its dims only) producing dY */
  const kl_tensor *in[1] = {x};
  kl_tensor yy = *dy, *out[1] = {&yy};
  kl_kernel_ctx f = *c;
  f.n_in = f.n_out = 1;
  f.in = in;
  f.out = out;
  kiln_status st = kl_ref_window_init(&f, NULL, &j.g);
  if (st != KILN_OK) return st;
  int64_t planes = x->dims[0] * x->dims[1];
  kl_isa_parallel(c, planes, kl_tensor_numel(x) + kl_tensor_numel(dy), pool_plane, &j);
  return KILN_OK;
}

/* ---- BatchNormTrain and BatchNormGrad: X [N, C, inner] per channel ---- */

typedef struct bn_job {
  const float *x, *dy, *scale, *bias, *old_mean, *old_var;
  float *y, *new_mean, *new_var, *dx, *dscale, *dbias;
  int64_t batch, channels, inner;
  double eps, momentum;
} bn_job;

/* Sum of x[0..n-1] and of x * w (w NULL: x * x), in double, in fixed lanes. */
static void sums(const float *x, const float *w, int64_t n, double *s, double *sw) {
  double a[LANES] = {0}, b[LANES] = {0};
  int64_t i = 0;
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

/* Sum of (x - mean)^2 over x[0..n-1], in double, in fixed lanes. */
static double deviations(const float *x, int64_t n, double mean) {
  double a[LANES] = {0}, s = 0;
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) {
      double d = x[i + l] - mean;
      a[l] += d * d;
    }
  for (int l = 0; i < n; i++, l++) {
    double d = x[i] - mean;
    a[l] += d * d;
  }
  for (int l = 0; l < LANES; l++) s += a[l];
  return s;
}

/* Channel ch's mean and biased variance, two passes as the reference. */
static void bn_stats(const bn_job *j, int64_t ch, double *mean, double *var) {
  double s = 0, unused = 0, sq = 0, n = (double)(j->batch * j->inner);
  for (int64_t b = 0; b < j->batch; b++)
    sums(j->x + (b * j->channels + ch) * j->inner, NULL, j->inner, &s, &unused);
  *mean = s / n;
  for (int64_t b = 0; b < j->batch; b++)
    sq += deviations(j->x + (b * j->channels + ch) * j->inner, j->inner, *mean);
  *var = sq / n;
}

static void bn_train_channel(void *arg, int64_t ch) {
  const bn_job *j = arg;
  double mean, var, n = (double)(j->batch * j->inner);
  bn_stats(j, ch, &mean, &var);
  double k = (double)j->scale[ch] / sqrt(var + j->eps);
  float kf = (float)k, shift = (float)((double)j->bias[ch] - mean * k);
  for (int64_t b = 0; b < j->batch; b++) {
    const float *x = j->x + (b * j->channels + ch) * j->inner;
    float *y = j->y + (b * j->channels + ch) * j->inner;
    for (int64_t i = 0; i < j->inner; i++) y[i] = x[i] * kf + shift;
  }
  if (j->new_mean)
    j->new_mean[ch] = (float)(j->old_mean[ch] * j->momentum + mean * (1 - j->momentum));
  if (j->new_var)
    j->new_var[ch] = (float)(j->old_var[ch] * j->momentum + var * n / (n - 1) * (1 - j->momentum));
}

static void bn_grad_channel(void *arg, int64_t ch) {
  const bn_job *j = arg;
  double mean, var, n = (double)(j->batch * j->inner), sum_dy = 0, sum_dy_x = 0;
  bn_stats(j, ch, &mean, &var);
  for (int64_t b = 0; b < j->batch; b++) {
    int64_t at = (b * j->channels + ch) * j->inner;
    sums(j->dy + at, j->x + at, j->inner, &sum_dy, &sum_dy_x);
  }
  double invstd = 1 / sqrt(var + j->eps);
  double sum_dy_xhat = (sum_dy_x - mean * sum_dy) * invstd; /* sum dY (x - mean) invstd */
  double k = (double)j->scale[ch] * invstd;
  /* dX = k (dY - sum_dy / n - xhat sum_dy_xhat / n) = a dY + b x + c */
  float a = (float)k, bx = (float)(-k * invstd * sum_dy_xhat / n);
  float c0 = (float)(-k * sum_dy / n + k * invstd * sum_dy_xhat / n * mean);
  for (int64_t b = 0; b < j->batch; b++) {
    int64_t at = (b * j->channels + ch) * j->inner;
    const float *dy = j->dy + at, *x = j->x + at;
    float *dx = j->dx + at;
    for (int64_t i = 0; i < j->inner; i++) dx[i] = a * dy[i] + bx * x[i] + c0;
  }
  if (j->dscale) j->dscale[ch] = (float)sum_dy_xhat;
  if (j->dbias) j->dbias[ch] = (float)sum_dy;
}

static kiln_status bn_view(const kl_kernel_ctx *c, const kl_tensor *x, bn_job *j) {
  j->batch = x->dims[0];
  j->channels = x->dims[1];
  j->inner = 1;
  for (int d = 2; d < x->rank; d++) j->inner *= x->dims[d];
  j->eps = kl_attr_float(c->node, "epsilon", 1e-5f);
  return KILN_OK;
}

int kl_run_batchnorm_train(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  if (!all_f32(c, 0, 5) || x->rank < 2 || kl_tensor_numel(x) / (x->dims[1] ? x->dims[1] : 1) < 2)
    return kl_isa_ref(c); /* the reference refuses fewer than 2 values per channel */
  bn_job j = {.x = x->data, .scale = c->in[1]->data, .bias = c->in[2]->data,
              .old_mean = c->in[3]->data, .old_var = c->in[4]->data, .y = c->out[0]->data,
              .new_mean = c->n_out > 1 && c->out[1] ? c->out[1]->data : NULL,
              .new_var = c->n_out > 2 && c->out[2] ? c->out[2]->data : NULL,
              .momentum = kl_attr_float(c->node, "momentum", 0.9f)};
  bn_view(c, x, &j);
  kl_isa_parallel(c, j.channels, 2 * kl_tensor_numel(x), bn_train_channel, &j);
  return KILN_OK;
}

int kl_run_batchnorm_grad(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[1];
  if (!all_f32(c, 0, 3) || x->rank < 2 || kl_tensor_numel(x) == 0) return kl_isa_ref(c);
  bn_job j = {.dy = c->in[0]->data, .x = x->data, .scale = c->in[2]->data,
              .dx = c->out[0]->data,
              .dscale = c->n_out > 1 && c->out[1] ? c->out[1]->data : NULL,
              .dbias = c->n_out > 2 && c->out[2] ? c->out[2]->data : NULL};
  bn_view(c, x, &j);
  kl_isa_parallel(c, j.channels, 3 * kl_tensor_numel(x), bn_grad_channel, &j);
  return KILN_OK;
}

/* ---- UnaryGrad ---- */

typedef struct unary_job {
  kl_unary_grad u;
  const float *dy, *x, *y;
  float *dx;
  int64_t n, per;
} unary_job;

#define SQRT1_2F 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

static void unary_task(void *arg, int64_t t) {
  const unary_job *j = arg;
  int64_t i0 = t * j->per, i1 = i0 + j->per < j->n ? i0 + j->per : j->n;
  const float *dy = j->dy, *x = j->x, *y = j->y;
  float *dx = j->dx, alpha = (float)j->u.alpha;
  switch (j->u.op) {
  case KL_UG_RELU:
    for (int64_t i = i0; i < i1; i++) dx[i] = x[i] > 0 ? dy[i] : 0.0f;
    break;
  case KL_UG_LEAKY_RELU: /* slope alpha, 0 when alpha is (the reference's rule) */
    for (int64_t i = i0; i < i1; i++) dx[i] = x[i] > 0 ? dy[i] : alpha == 0 ? 0.0f : dy[i] * alpha;
    break;
  case KL_UG_SIGMOID:
    for (int64_t i = i0; i < i1; i++) {
      float s = y ? y[i] : 1 / (1 + expf(-x[i])), slope = s * (1 - s);
      dx[i] = slope == 0 ? 0.0f : dy[i] * slope;
    }
    break;
  case KL_UG_TANH:
    for (int64_t i = i0; i < i1; i++) {
      float t = y ? y[i] : tanhf(x[i]), slope = 1 - t * t;
      dx[i] = slope == 0 ? 0.0f : dy[i] * slope;
    }
    break;
  case KL_UG_SILU:
    for (int64_t i = i0; i < i1; i++) {
      float s = 1 / (1 + expf(-x[i])), slope = s * (1 + x[i] * (1 - s));
      dx[i] = slope == 0 ? 0.0f : dy[i] * slope;
    }
    break;
  case KL_UG_ERF: /* 2 / sqrt(pi) e^(-x^2) */
    for (int64_t i = i0; i < i1; i++) {
      float slope = 1.12837916709551257390f * expf(-x[i] * x[i]);
      dx[i] = slope == 0 ? 0.0f : dy[i] * slope;
    }
    break;
  default: /* KL_UG_GELU */
    for (int64_t i = i0; i < i1; i++) {
      float v = x[i], slope;
      if (j->u.tanh_gelu) {
        const float k = 0.79788456080286535588f, kappa = 0.044715f;
        float t = tanhf(k * (v + kappa * v * v * v));
        slope = 0.5f * (1 + t) + 0.5f * v * (1 - t * t) * k * (1 + 3 * kappa * v * v);
      } else {
        slope = 0.5f * (1 + erff(v * SQRT1_2F)) + v * expf(-0.5f * v * v) * INV_SQRT_2PI;
      }
      dx[i] = slope == 0 ? 0.0f : dy[i] * slope;
    }
    break;
  }
}

static bool unary_fast(kl_unary_grad_op op) {
  return op == KL_UG_RELU || op == KL_UG_LEAKY_RELU || op == KL_UG_SIGMOID ||
         op == KL_UG_TANH || op == KL_UG_GELU || op == KL_UG_SILU || op == KL_UG_ERF;
}

bool kl_grad_unary_fast(const kl_node *n) {
  kl_unary_grad u;
  kl_err e;
  return kl_unary_grad_read(n, &u, &e) == KILN_OK && unary_fast(u.op);
}

int kl_run_unary_grad(kl_kernel_ctx *c) {
  unary_job j;
  kl_err e;
  if (kl_unary_grad_read(c->node, &j.u, &e) != KILN_OK || !unary_fast(j.u.op) || !all_f32(c, 0, 3))
    return kl_isa_ref(c);
  const kl_tensor *y = c->n_in > 2 && kl_unary_grad_uses_y(j.u.op) ? c->in[2] : NULL;
  j.n = kl_tensor_numel(c->out[0]);
  if (kl_tensor_numel(c->in[0]) != j.n || kl_tensor_numel(c->in[1]) != j.n ||
      (y && kl_tensor_numel(y) != j.n))
    return kl_isa_ref(c);
  j.dy = c->in[0]->data;
  j.x = c->in[1]->data;
  j.y = y ? y->data : NULL;
  j.dx = c->out[0]->data;
  int64_t tasks = kl_isa_split(j.n, CHUNK, &j.per);
  kl_isa_parallel(c, tasks, 3 * j.n, unary_task, &j);
  return KILN_OK;
}

/* ---- SumTo and ReduceGrad: the big shape seen as runs of kept and reduced dims ---- */

/* The big shape's dims (rank r) with a mask of the reduced ones, collapsed into at most
 * 3 alternating runs [a, b, c]: sizes and whether run 0 is reduced (run i reduced when
 * (i % 2 == 0) == first_reduced). Dims of size 1 join any run. false when more runs. */
typedef struct runs {
  int n;
  int64_t size[3];
  bool first_reduced;
} runs;

static bool runs_of(int r, const int64_t *dims, const bool *reduced, runs *out) {
  out->n = 0;
  bool cur = false;
  for (int d = 0; d < r; d++) {
    if (dims[d] == 1) continue;
    if (out->n == 0 || reduced[d] != cur) {
      if (out->n == 3) return false;
      if (out->n == 0) out->first_reduced = reduced[d];
      cur = reduced[d];
      out->size[out->n++] = 1;
    }
    out->size[out->n - 1] *= dims[d];
  }
  if (out->n == 0) { /* every dim 1: one kept element */
    out->n = 1;
    out->size[0] = 1;
    out->first_reduced = false;
  }
  return true;
}

/* Pads the runs to exactly [R, K, R] (a reduced run of 1 where missing). */
static void rkr_of(const runs *u, int64_t *a, int64_t *b, int64_t *c) {
  int64_t s[3] = {1, 1, 1};
  int at = u->first_reduced ? 0 : 1;
  for (int i = 0; i < u->n; i++) s[at + i] = u->size[i];
  /* a run of kept, reduced, kept ([K, R, K]) does not fit: checked by the caller */
  *a = s[0], *b = s[1], *c = s[2];
}

/* K R K: the one shape that [R, K, R] cannot hold. */
static bool is_krk(const runs *u) { return u->n == 3 && !u->first_reduced; }

typedef struct sum_job {
  const float *big;
  float *small;
  int64_t a, b, c, per; /* [R a, K b, R c] or, krk, [K a, R b, K c] */
  double scale;
} sum_job;

/* SumTo [R a, K b, R c]: small[k] = sum over i < a, l < c of big[i, k, l], for the
 * kept elements k of task t (per per task). When c is 1, blocks of k are summed along
 * rows; else each k's runs of c. */
static void sum_rkr_task(void *arg, int64_t t) {
  const sum_job *j = arg;
  int64_t k0 = t * j->per, k1 = k0 + j->per < j->b ? k0 + j->per : j->b;
  if (j->c == 1) {
    double acc[256];
    for (int64_t kb = k0; kb < k1; kb += 256) {
      int64_t m = k1 - kb < 256 ? k1 - kb : 256;
      for (int64_t k = 0; k < m; k++) acc[k] = 0;
      for (int64_t i = 0; i < j->a; i++) {
        const float *row = j->big + i * j->b + kb;
        for (int64_t k = 0; k < m; k++) acc[k] += row[k];
      }
      for (int64_t k = 0; k < m; k++) j->small[kb + k] = (float)acc[k];
    }
    return;
  }
  for (int64_t k = k0; k < k1; k++) {
    double s = 0, unused = 0;
    for (int64_t i = 0; i < j->a; i++)
      sums(j->big + (i * j->b + k) * j->c, NULL, j->c, &s, &unused);
    j->small[k] = (float)s;
  }
}

/* SumTo [K a, R b, K c]: small[i, l] = sum over k of big[i, k, l], task t doing i. */
static void sum_krk_task(void *arg, int64_t i) {
  const sum_job *j = arg;
  for (int64_t l0 = 0; l0 < j->c; l0 += 256) {
    double acc[256];
    int64_t m = j->c - l0 < 256 ? j->c - l0 : 256;
    for (int64_t l = 0; l < m; l++) acc[l] = 0;
    for (int64_t k = 0; k < j->b; k++) {
      const float *row = j->big + (i * j->b + k) * j->c + l0;
      for (int64_t l = 0; l < m; l++) acc[l] += row[l];
    }
    for (int64_t l = 0; l < m; l++) j->small[i * j->c + l0 + l] = (float)acc[l];
  }
}

/* ReduceGrad [R a, K b, R c]: big[i, k, l] = small[k] * scale, task t doing rows
 * (i, k) in [t * per, ...). */
static void bcast_rkr_task(void *arg, int64_t t) {
  const sum_job *j = arg;
  int64_t rows = j->a * j->b, r0 = t * j->per, r1 = r0 + j->per < rows ? r0 + j->per : rows;
  float s = (float)j->scale;
  if (j->c == 1) { /* rows of b kept elements */
    for (int64_t r = r0; r < r1; r++) {
      float *out = (float *)j->big + r; /* r counts elements here: a * b of them */
      *out = j->small[r % j->b] * s;
    }
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    float v = j->small[r % j->b] * s, *out = (float *)j->big + r * j->c;
    for (int64_t l = 0; l < j->c; l++) out[l] = v;
  }
}

/* ReduceGrad [K a, R b, K c]: big[i, k, l] = small[i, l] * scale, task t doing i. */
static void bcast_krk_task(void *arg, int64_t i) {
  const sum_job *j = arg;
  float s = (float)j->scale;
  for (int64_t k = 0; k < j->b; k++) {
    float *out = (float *)j->big + (i * j->b + k) * j->c;
    const float *in = j->small + i * j->c;
    for (int64_t l = 0; l < j->c; l++) out[l] = in[l] * s;
  }
}

/* The big shape's runs for a small shape right-aligned against it (SumTo's Like). */
static bool sum_to_runs(const kl_tensor *big, const kl_tensor *small, runs *u) {
  bool reduced[KL_MAX_RANK];
  int off = big->rank - small->rank;
  if (off < 0) return false;
  for (int d = 0; d < big->rank; d++) {
    int64_t s = d >= off ? small->dims[d - off] : 1;
    if (s != 1 && s != big->dims[d]) return false;
    reduced[d] = s == 1 && big->dims[d] != 1;
  }
  return runs_of(big->rank, big->dims, reduced, u);
}

int kl_run_sum_to(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0];
  kl_tensor *dx = c->out[0];
  runs u;
  if (!all_f32(c, 0, 1) || !sum_to_runs(dy, dx, &u)) return kl_isa_ref(c);
  sum_job j = {.big = dy->data, .small = dx->data};
  int64_t work = kl_tensor_numel(dy);
  if (work == 0 || kl_tensor_numel(dx) == 0) return kl_isa_ref(c);
  if (is_krk(&u)) {
    j.a = u.size[0], j.b = u.size[1], j.c = u.size[2];
    kl_isa_parallel(c, j.a, work, sum_krk_task, &j);
    return KILN_OK;
  }
  rkr_of(&u, &j.a, &j.b, &j.c);
  int64_t tasks = kl_isa_split(j.b, j.c == 1 ? 256 : CHUNK / j.c + 1, &j.per);
  kl_isa_parallel(c, tasks, work, sum_rkr_task, &j);
  return KILN_OK;
}

int kl_run_reduce_grad(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0];
  kl_tensor *dx = c->out[0];
  if (!all_f32(c, 0, 1) || dx->rank > KL_MAX_RANK) return kl_isa_ref(c);
  const int64_t *axes;
  int n_axes = kl_attr_ints(c->node, "axes", &axes);
  bool reduced[KL_MAX_RANK];
  int64_t count = 1;
  for (int d = 0; d < dx->rank; d++) reduced[d] = n_axes <= 0;
  for (int k = 0; k < n_axes; k++) {
    int64_t ax = axes[k] < 0 ? axes[k] + dx->rank : axes[k];
    if (ax < 0 || ax >= dx->rank) return kl_isa_ref(c);
    reduced[ax] = true;
  }
  for (int d = 0; d < dx->rank; d++)
    if (reduced[d]) count *= dx->dims[d];
  runs u;
  int64_t work = kl_tensor_numel(dx);
  if (work == 0 || kl_tensor_numel(dy) == 0 || !runs_of(dx->rank, dx->dims, reduced, &u))
    return kl_isa_ref(c);
  sum_job j = {.big = dx->data, .small = dy->data,
               .scale = kl_attr_int(c->node, "mean", 0) ? 1.0 / (double)count : 1.0};
  if (is_krk(&u)) {
    j.a = u.size[0], j.b = u.size[1], j.c = u.size[2];
    kl_isa_parallel(c, j.a, work, bcast_krk_task, &j);
    return KILN_OK;
  }
  rkr_of(&u, &j.a, &j.b, &j.c);
  int64_t rows = j.a * j.b;
  int64_t tasks = kl_isa_split(rows, j.c == 1 ? CHUNK : CHUNK / j.c + 1, &j.per);
  kl_isa_parallel(c, tasks, work, bcast_rkr_task, &j);
  return KILN_OK;
}

/* ---- SoftmaxGrad over the last axis ---- */

typedef struct softmax_job {
  const float *dy, *y;
  float *dx;
  int64_t len, per, rows;
  bool log_form;
} softmax_job;

static void softmax_task(void *arg, int64_t t) {
  const softmax_job *j = arg;
  int64_t r1 = (t + 1) * j->per < j->rows ? (t + 1) * j->per : j->rows;
  for (int64_t r = t * j->per; r < r1; r++) {
    const float *dy = j->dy + r * j->len, *y = j->y + r * j->len;
    float *dx = j->dx + r * j->len;
    double s = 0;
    if (j->log_form) { /* dX = dY - e^Y sum(dY) */
      for (int64_t i = 0; i < j->len; i++) s += dy[i];
      for (int64_t i = 0; i < j->len; i++) dx[i] = (float)(dy[i] - expf(y[i]) * s);
    } else { /* dX = Y (dY - sum(dY Y)) */
      for (int64_t i = 0; i < j->len; i++) s += (double)dy[i] * y[i];
      for (int64_t i = 0; i < j->len; i++) dx[i] = (float)(y[i] * (dy[i] - s));
    }
  }
}

int kl_run_softmax_grad(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0], *y = c->in[1];
  int64_t a = kl_attr_int(c->node, "axis", -1);
  if (!all_f32(c, 0, 2) || y->rank < 1 || (a != -1 && a != y->rank - 1) ||
      kl_tensor_numel(dy) != kl_tensor_numel(y))
    return kl_isa_ref(c);
  softmax_job j = {.dy = dy->data, .y = y->data, .dx = c->out[0]->data,
                   .len = y->dims[y->rank - 1], .log_form = kl_attr_int(c->node, "log", 0) != 0};
  if (j.len == 0) return KILN_OK;
  j.rows = kl_tensor_numel(y) / j.len;
  int64_t tasks = kl_isa_split(j.rows, CHUNK / j.len + 1, &j.per);
  kl_isa_parallel(c, tasks, 3 * kl_tensor_numel(y), softmax_task, &j);
  return KILN_OK;
}

/* ---- LayerNormGrad: rows of cols elements, scale and dScale/dB of cols ---- */

#define LN_BLOCK 64 /* rows per task: fixed, so the sums do not depend on threads */

typedef struct ln_job {
  const float *dy, *x, *scale;
  float *dx;
  int64_t rows, cols;
  double eps;
  double *part; /* per task: dScale then dB partial sums, 2 * cols doubles */
} ln_job;

static void ln_task(void *arg, int64_t t) {
  const ln_job *j = arg;
  int64_t cols = j->cols, r1 = (t + 1) * LN_BLOCK < j->rows ? (t + 1) * LN_BLOCK : j->rows;
  double *ds = j->part + 2 * cols * t, *db = ds + cols;
  for (int64_t k = 0; k < 2 * cols; k++) ds[k] = 0;
  for (int64_t r = t * LN_BLOCK; r < r1; r++) {
    const float *x = j->x + r * cols, *dy = j->dy + r * cols;
    double mean = 0, var = 0;
    for (int64_t k = 0; k < cols; k++) mean += x[k];
    mean /= (double)cols;
    for (int64_t k = 0; k < cols; k++) var += (x[k] - mean) * (x[k] - mean);
    double inv = 1.0 / sqrt(var / (double)cols + j->eps);
    double mg = 0, mgx = 0; /* means of g = dy * scale and of g * xhat */
    for (int64_t k = 0; k < cols; k++) {
      double xh = (x[k] - mean) * inv, g = (double)dy[k] * j->scale[k];
      mg += g;
      mgx += g * xh;
      ds[k] += (double)dy[k] * xh;
      db[k] += dy[k];
    }
    mg /= (double)cols;
    mgx /= (double)cols;
    float *dx = j->dx + r * cols;
    for (int64_t k = 0; k < cols; k++) {
      double xh = (x[k] - mean) * inv, g = (double)dy[k] * j->scale[k];
      dx[k] = (float)(inv * (g - mg - xh * mgx));
    }
  }
}

int kl_run_layernorm_grad(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0], *x = c->in[1], *scale = c->in[2];
  int64_t a = kl_attr_int(c->node, "axis", -1);
  int axis = (int)(a < 0 ? a + x->rank : a);
  if (!all_f32(c, 0, 3) || axis < 0 || axis >= x->rank || kl_tensor_numel(dy) != kl_tensor_numel(x))
    return kl_isa_ref(c);
  ln_job j = {.dy = dy->data, .x = x->data, .scale = scale->data, .dx = c->out[0]->data,
              .eps = kl_attr_float(c->node, "epsilon", 1e-5f)};
  j.cols = 1;
  for (int d = axis; d < x->rank; d++) j.cols *= x->dims[d];
  if (j.cols == 0 || kl_tensor_numel(scale) != j.cols) return kl_isa_ref(c); /* broadcast scale */
  j.rows = kl_tensor_numel(x) / j.cols;
  int64_t tasks = (j.rows + LN_BLOCK - 1) / LN_BLOCK;
  size_t bytes;
  if (kl_mul_overflow_size((size_t)tasks * 2, (size_t)j.cols * sizeof(double), &bytes))
    return kl_isa_ref(c);
  j.part = malloc(bytes ? bytes : 1);
  if (!j.part) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory (%zu bytes of sums)", bytes);
  kl_isa_parallel(c, tasks, 4 * kl_tensor_numel(x), ln_task, &j);
  for (int o = 1; o < 3 && o < c->n_out; o++) {
    if (!c->out[o]) continue;
    float *out = c->out[o]->data;
    for (int64_t k = 0; k < j.cols; k++) {
      double sum = 0;
      for (int64_t t = 0; t < tasks; t++) sum += j.part[2 * j.cols * t + (o - 1) * j.cols + k];
      out[k] = (float)sum;
    }
  }
  free(j.part);
  return KILN_OK;
}
