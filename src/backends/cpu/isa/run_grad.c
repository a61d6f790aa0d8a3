/* kiln's own kernels for the gradient ops of a training step, float32: drivers in plain
 * C (this file is built with -O3 like the other drivers) that hand contiguous runs to
 * the level's primitives (isa_fns.h: kl_grad_fns, and the eltwise family's activations
 * for the slopes of UnaryGrad), spread over the node's threads in fixed tasks, so that
 * every result is the same whatever the thread count: a sum is always formed by one
 * task, in one order.
 *
 *   MaxPoolGrad (dY, X) -> dX         per (n, c) plane: dX zeroed, each dY element
 *                                     added at its window's maximum, found again with
 *                                     the reference's rule (ref/grad.c: taps in scan
 *                                     order, a later one wins when greater or NaN),
 *                                     without branches on the data
 *   AveragePoolGrad (dY, XLike) -> dX per plane: dY / count spread over the taps
 *   BatchNormTrain (X, scale, B, mean, var) -> Y, mean', var'     per channel
 *   BatchNormGrad (dY, X, scale) -> dX, dScale, dB               per channel
 *   UnaryGrad (dY, X, Y?) -> dX       Relu, LeakyRelu (the level's relu primitive);
 *                                     Sigmoid, Tanh, Gelu, Silu, Erf (the activation
 *                                     from the level's eltwise primitive, then the slope)
 *   SoftmaxGrad (dY, Y) -> dX         per row of the last axis
 *   LayerNormGrad (dY, X, scale) -> dX, dScale, dB   per block of rows; dScale and dB
 *                                     summed per block in double, blocks added in order
 *   SumTo (dY, Like) -> dX            dY summed down to Like's shape
 *   ReduceGrad (dY, XLike) -> dX      dY broadcast back over the reduced axes
 *
 * Sums (batch statistics, SumTo) are formed in double, as the reference forms them:
 * per channel in 8 lanes (element j into lane j % 8) added in a fixed order (the
 * primitives' sums and deviations). Shapes SumTo and ReduceGrad cannot collapse to at
 * most three runs of kept and reduced dims, other dtypes and other UnaryGrad rules run
 * the reference kernel (kl_isa_ref).
 */
#include "backends/cpu/isa/run.h"
#include "backends/cpu/ref/ref.h"
#include "ir/grad.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 16384 /* elements per task of the elementwise kernels */

static bool all_f32(const kl_kernel_ctx *c, int from, int to) {
  for (int k = from; k < to && k < c->n_in; k++)
    if (c->in[k] && c->in[k]->dtype != KL_F32) return false;
  for (int k = 0; k < c->n_out; k++)
    if (c->out[k] && c->out[k]->dtype != KL_F32) return false;
  return true;
}

/* ---- pooling gradients ---- */

/* The taps of output o along one dim that fall inside X: k in [k0, k1), at input
 * position base + k * dilation. */
typedef struct span {
  int64_t k0, k1, base;
} span;

typedef struct pool_job {
  const kl_grad_fns *fn;
  kl_ref_window g;
  const float *dy, *x;
  float *dx;
  span *sp[3]; /* per dim, one per output position */
  bool is_max, include_pad;
  bool rows_fit; /* a window's rows fit max_row's rows[], positions fit int32 */
} pool_job;

/* The taps of output o along dim i inside [lo, hi): [*k0, *k1). */
static void taps(const kl_ref_window *g, int i, int64_t o, int64_t lo, int64_t hi, int64_t *k0,
                 int64_t *k1) {
  kl_ref_tap_span(o * g->stride[i] - g->pad_begin[i], g->kernel[i], g->dilation[i], lo, hi, k0, k1);
}

/* One dY element's window (its spans s), the maximum's position; the first tap's when
 * no tap is greater than -inf or NaN. Selects, not branches: on data of random order
 * a branch on the comparison mispredicts about once a window. */
static int64_t max_at(const kl_ref_window *g, const float *x, const span *s0, const span *s1,
                      const span *s2) {
  int64_t d1 = g->dilation[1], d2 = g->dilation[2];
  int64_t best = ((s0->base + s0->k0 * g->dilation[0]) * g->in[1] + s1->base + s1->k0 * d1) *
                     g->in[2] + s2->base + s2->k0 * d2;
  float max = -INFINITY;
  for (int64_t k0 = s0->k0; k0 < s0->k1; k0++) {
    int64_t plane = (s0->base + k0 * g->dilation[0]) * g->in[1];
    for (int64_t k1 = s1->k0; k1 < s1->k1; k1++) {
      int64_t row = (plane + s1->base + k1 * d1) * g->in[2] + s2->base;
      for (int64_t k2 = s2->k0; k2 < s2->k1; k2++) {
        int64_t at = row + k2 * d2;
        float v = x[at];
        bool take = v > max || v != v;
        max = take ? v : max;
        best = take ? at : best;
      }
    }
  }
  return best;
}

static void avg_window(const pool_job *j, float *dx, const int64_t *o, const span *const *s,
                       float dy) {
  const kl_ref_window *g = &j->g;
  double count = 1;
  for (int i = 0; i < 3; i++) {
    int64_t p0 = s[i]->k0, p1 = s[i]->k1;
    if (j->include_pad) taps(g, i, o[i], -g->pad_begin[i], g->in[i] + g->pad_end[i], &p0, &p1);
    count *= (double)(p1 - p0);
  }
  float share = (float)(dy / count);
  for (int64_t k0 = s[0]->k0; k0 < s[0]->k1; k0++)
    for (int64_t k1 = s[1]->k0; k1 < s[1]->k1; k1++) {
      float *row = dx + ((s[0]->base + k0 * g->dilation[0]) * g->in[1] + s[1]->base +
                         k1 * g->dilation[1]) * g->in[2] + s[2]->base;
      for (int64_t k2 = s[2]->k0; k2 < s[2]->k1; k2++) row[k2 * g->dilation[2]] += share;
    }
}

#define MAX_ROWS 256 /* a window's rows (taps along dims 0 and 1) for max_taps */
#define MAX_RUN 64   /* outputs per max_taps call */

static bool whole(const kl_ref_window *g, const span *s) {
  return s->k0 == 0 && s->k1 == g->kernel[2];
}

/* MaxPoolGrad over the outputs of one row (o0, o1) whose dim-0 and dim-1 spans are
 * s0, s1: runs of outputs whose windows are whole along dim 2 go to the level's
 * max_taps, the others (at the edges) to max_at; dX gets dY in the order of the
 * outputs, as the reference adds it. */
static void max_row(const pool_job *j, const float *x, float *dx, const float *dy,
                    const span *s0, const span *s1) {
  const kl_ref_window *g = &j->g;
  int32_t rows[MAX_ROWS], best[MAX_RUN];
  int n_rows = 0;
  for (int64_t k0 = s0->k0; k0 < s0->k1; k0++)
    for (int64_t k1 = s1->k0; k1 < s1->k1; k1++)
      rows[n_rows++] = (int32_t)(((s0->base + k0 * g->dilation[0]) * g->in[1] + s1->base +
                                  k1 * g->dilation[1]) * g->in[2]);
  const span *sp = j->sp[2];
  for (int64_t o = 0; o < g->out[2];) {
    if (!whole(g, &sp[o])) {
      if (sp[o].k0 < sp[o].k1) dx[max_at(g, x, s0, s1, &sp[o])] += dy[o];
      o++;
      continue;
    }
    int64_t e = o + 1;
    while (e < g->out[2] && e - o < MAX_RUN && whole(g, &sp[e])) e++;
    j->fn->max_taps(x, rows, n_rows, (int32_t)sp[o].base, (int32_t)g->stride[2],
                    (int32_t)g->kernel[2], (int32_t)g->dilation[2], (int)(e - o), best);
    for (int64_t l = o; l < e; l++) dx[best[l - o]] += dy[l];
    o = e;
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
  int64_t o[3];
  for (o[0] = 0; o[0] < g->out[0]; o[0]++) {
    const span *s0 = &j->sp[0][o[0]];
    for (o[1] = 0; o[1] < g->out[1]; o[1]++, dy += g->out[2]) {
      const span *s1 = &j->sp[1][o[1]];
      if (s0->k0 >= s0->k1 || s1->k0 >= s1->k1) continue;
      if (j->is_max && j->rows_fit) {
        max_row(j, x, dx, dy, s0, s1);
        continue;
      }
      for (o[2] = 0; o[2] < g->out[2]; o[2]++) {
        const span *s2 = &j->sp[2][o[2]];
        if (s2->k0 >= s2->k1) continue;
        if (j->is_max) {
          dx[max_at(g, x, s0, s1, s2)] += dy[o[2]];
        } else {
          const span *s[3] = {s0, s1, s2};
          avg_window(j, dx, o, s, dy[o[2]]);
        }
      }
    }
  }
}

/* The forward op's window over X (its dims only) producing dY, and each output's taps
 * along each dim (*all, to free, holds them). */
static kiln_status pool_window(const kl_kernel_ctx *c, kl_ref_window *g, span *sp[3], span **all) {
  const kl_tensor *in[1] = {c->in[1]};
  kl_tensor yy = *c->in[0], *out[1] = {&yy};
  kl_kernel_ctx fw = *c;
  fw.n_in = fw.n_out = 1;
  fw.in = in;
  fw.out = out;
  kiln_status st = kl_ref_window_init(&fw, NULL, g);
  if (st != KILN_OK) return st;
  int64_t spans = g->out[0] + g->out[1] + g->out[2];
  if (!(*all = malloc(sizeof(span) * (size_t)(spans ? spans : 1))))
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory (%lld window spans)",
                   (long long)spans);
  int64_t at = 0;
  for (int i = 0; i < 3; at += g->out[i], i++) {
    sp[i] = *all + at;
    for (int64_t o = 0; o < g->out[i]; o++) {
      span *s = &sp[i][o];
      taps(g, i, o, 0, g->in[i], &s->k0, &s->k1);
      s->base = o * g->stride[i] - g->pad_begin[i];
    }
  }
  return KILN_OK;
}

int kl_run_pool_grad(kl_kernel_ctx *c, const kl_isa_fns *f) {
  bool is_max = c->node->op == KL_OP_KilnMaxPoolGrad;
  const kl_tensor *dy = c->in[0], *x = c->in[1];
  if (c->out[0]->dtype != KL_F32 || dy->dtype != KL_F32 || (is_max && x->dtype != KL_F32) ||
      x->rank < 3 || x->rank > 5)
    return kl_isa_ref(c);
  pool_job j = {.fn = f->grad, .dy = dy->data, .x = x->data, .dx = c->out[0]->data, .is_max = is_max,
                .include_pad = kl_attr_int(c->node, "count_include_pad", 0) != 0};
  span *all;
  kiln_status st = pool_window(c, &j.g, j.sp, &all);
  if (st != KILN_OK) return st;
  j.rows_fit = j.g.kernel[0] * j.g.kernel[1] <= MAX_ROWS &&
               j.g.in[0] * j.g.in[1] * j.g.in[2] <= INT32_MAX;
  int64_t planes = x->dims[0] * x->dims[1];
  kl_isa_parallel(c, planes, kl_tensor_numel(x) + kl_tensor_numel(dy), pool_plane, &j);
  free(all);
  return KILN_OK;
}

/* ---- BatchNormTrain and BatchNormGrad: X [N, C, inner] per channel ---- */

typedef struct bn_job {
  const kl_grad_fns *fn;
  const float *x, *dy, *scale, *bias, *old_mean, *old_var;
  float *y, *new_mean, *new_var, *dx, *dscale, *dbias;
  int64_t batch, channels, inner;
  double eps, momentum;
} bn_job;

/* Channel ch's mean and biased variance, two passes as the reference. */
static void bn_stats(const bn_job *j, int64_t ch, double *mean, double *var) {
  double s = 0, unused = 0, sq = 0, n = (double)(j->batch * j->inner);
  for (int64_t b = 0; b < j->batch; b++)
    j->fn->sums(j->x + (b * j->channels + ch) * j->inner, NULL, (size_t)j->inner, &s, &unused);
  *mean = s / n;
  for (int64_t b = 0; b < j->batch; b++)
    sq += j->fn->deviations(j->x + (b * j->channels + ch) * j->inner, (size_t)j->inner, *mean);
  *var = sq / n;
}

static void bn_train_channel(void *arg, int64_t ch) {
  const bn_job *j = arg;
  double mean, var, n = (double)(j->batch * j->inner);
  bn_stats(j, ch, &mean, &var);
  double k = (double)j->scale[ch] / sqrt(var + j->eps);
  float kf = (float)k, shift = (float)((double)j->bias[ch] - mean * k);
  for (int64_t b = 0; b < j->batch; b++) {
    int64_t at = (b * j->channels + ch) * j->inner;
    j->fn->affine(j->x + at, kf, shift, j->y + at, (size_t)j->inner);
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
    j->fn->sums(j->dy + at, j->x + at, (size_t)j->inner, &sum_dy, &sum_dy_x);
  }
  double invstd = 1 / sqrt(var + j->eps);
  double sum_dy_xhat = (sum_dy_x - mean * sum_dy) * invstd; /* sum dY (x - mean) invstd */
  double k = (double)j->scale[ch] * invstd;
  /* dX = k (dY - sum_dy / n - xhat sum_dy_xhat / n) = a dY + b x + c */
  float a = (float)k, bx = (float)(-k * invstd * sum_dy_xhat / n);
  float c0 = (float)(-k * sum_dy / n + k * invstd * sum_dy_xhat / n * mean);
  for (int64_t b = 0; b < j->batch; b++) {
    int64_t at = (b * j->channels + ch) * j->inner;
    j->fn->affine2(j->dy + at, j->x + at, a, bx, c0, j->dx + at, (size_t)j->inner);
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

int kl_run_batchnorm_train(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0];
  if (!all_f32(c, 0, 5) || x->rank < 2 || kl_tensor_numel(x) / (x->dims[1] ? x->dims[1] : 1) < 2)
    return kl_isa_ref(c); /* the reference refuses fewer than 2 values per channel */
  bn_job j = {.fn = f->grad, .x = x->data, .scale = c->in[1]->data, .bias = c->in[2]->data,
              .old_mean = c->in[3]->data, .old_var = c->in[4]->data, .y = c->out[0]->data,
              .new_mean = c->n_out > 1 && c->out[1] ? c->out[1]->data : NULL,
              .new_var = c->n_out > 2 && c->out[2] ? c->out[2]->data : NULL,
              .momentum = kl_attr_float(c->node, "momentum", 0.9f)};
  bn_view(c, x, &j);
  kl_isa_parallel(c, j.channels, 2 * kl_tensor_numel(x), bn_train_channel, &j);
  return KILN_OK;
}

int kl_run_batchnorm_grad(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[1];
  if (!all_f32(c, 0, 3) || x->rank < 2 || kl_tensor_numel(x) == 0) return kl_isa_ref(c);
  bn_job j = {.fn = f->grad, .dy = c->in[0]->data, .x = x->data, .scale = c->in[2]->data,
              .dx = c->out[0]->data,
              .dscale = c->n_out > 1 && c->out[1] ? c->out[1]->data : NULL,
              .dbias = c->n_out > 2 && c->out[2] ? c->out[2]->data : NULL};
  bn_view(c, x, &j);
  kl_isa_parallel(c, j.channels, 3 * kl_tensor_numel(x), bn_grad_channel, &j);
  return KILN_OK;
}

/* ---- MaxPoolGrad channels-last: dY, X and dX held [N, S..., C] ----
 * Each task one image: its dX zeroed, then for every output in order its window's taps
 * gathered POOL_CL_TAPS at a time, each gathering searched for every block of up to
 * KL_GRAD_CL_CH channels as max_at does (the first tap's position unless a later one is
 * greater, or NaN; the level's cl_max, the running maxima and positions per channel in
 * the task's part of state), and dY added at the winners. A pixel's channels are read
 * together, X once a tap. */
#define POOL_CL_TAPS 64

typedef struct pool_cl_job {
  const kl_grad_fns *fn;
  kl_ref_window g;
  span *sp[3];
  const float *dy, *x;
  float *dx;
  int64_t channels;
  float *mx;    /* [images][channels]: each task's running maxima */
  int32_t *best; /* [images][channels]: and their positions */
} pool_cl_job;

/* Searches the gathered taps for every block of channels. */
static void max_cl_search(const pool_cl_job *j, const float *x, const int32_t *taps, int n,
                          float *mx, int32_t *best) {
  for (int64_t c0 = 0; c0 < j->channels; c0 += KL_GRAD_CL_CH) {
    int cw = (int)(j->channels - c0 < KL_GRAD_CL_CH ? j->channels - c0 : KL_GRAD_CL_CH);
    j->fn->cl_max(x + c0, (size_t)j->channels, taps, n, cw, mx + c0, best + c0);
  }
}

static void max_cl_task(void *arg, int64_t n) {
  const pool_cl_job *j = arg;
  const kl_ref_window *g = &j->g;
  int64_t nc = j->channels;
  int64_t px = g->in[0] * g->in[1] * g->in[2], py = g->out[0] * g->out[1] * g->out[2];
  const float *x = j->x + n * px * nc, *dy = j->dy + n * py * nc;
  float *dx = j->dx + n * px * nc, *mx = j->mx + n * nc;
  int32_t *best = j->best + n * nc, taps[POOL_CL_TAPS];
  memset(dx, 0, sizeof(float) * (size_t)(px * nc));
  int64_t q = 0, d0 = g->dilation[0], d1 = g->dilation[1], d2 = g->dilation[2];
  for (int64_t o0 = 0; o0 < g->out[0]; o0++)
    for (int64_t o1 = 0; o1 < g->out[1]; o1++)
      for (int64_t o2 = 0; o2 < g->out[2]; o2++, q++) {
        const span *s0 = &j->sp[0][o0], *s1 = &j->sp[1][o1], *s2 = &j->sp[2][o2];
        if (s0->k0 >= s0->k1 || s1->k0 >= s1->k1 || s2->k0 >= s2->k1) continue;
        /* no tap greater than -inf: the first's, as max_at */
        int32_t first = (int32_t)(((s0->base + s0->k0 * d0) * g->in[1] + s1->base +
                                   s1->k0 * d1) * g->in[2] + s2->base + s2->k0 * d2);
        for (int64_t k = 0; k < nc; k++) mx[k] = -INFINITY, best[k] = first;
        int m = 0;
        for (int64_t k0 = s0->k0; k0 < s0->k1; k0++)
          for (int64_t k1 = s1->k0; k1 < s1->k1; k1++) {
            int64_t row = ((s0->base + k0 * d0) * g->in[1] + s1->base + k1 * d1) * g->in[2] +
                          s2->base;
            for (int64_t k2 = s2->k0; k2 < s2->k1; k2++) {
              taps[m++] = (int32_t)(row + k2 * d2);
              if (m == POOL_CL_TAPS) max_cl_search(j, x, taps, m, mx, best), m = 0;
            }
          }
        if (m) max_cl_search(j, x, taps, m, mx, best);
        const float *dyv = dy + q * nc;
        for (int64_t k = 0; k < nc; k++) dx[(int64_t)best[k] * nc + k] += dyv[k];
      }
}

static int run_max_pool_grad_cl(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *dy = c->in[0], *x = c->in[1];
  if (!all_f32(c, 0, 2) || x->rank < 3 || x->rank > 5)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "MaxPoolGrad held channels-last needs float32 "
                   "tensors of rank 3 to 5");
  pool_cl_job j = {.fn = f->grad, .dy = dy->data, .x = x->data, .dx = c->out[0]->data,
                   .channels = x->dims[1]};
  if (kl_tensor_numel(c->out[0]) == 0) return KILN_OK;
  span *all;
  kiln_status st = pool_window(c, &j.g, j.sp, &all);
  if (st != KILN_OK) return st;
  if (j.g.in[0] * j.g.in[1] * j.g.in[2] > INT32_MAX) {
    free(all);
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "MaxPoolGrad held channels-last: more than "
                   "2^31 pixels an image");
  }
  size_t states = (size_t)(x->dims[0] * j.channels); /* at most X's elements */
  j.mx = malloc(sizeof(float) * states);
  j.best = malloc(sizeof(int32_t) * states);
  if (j.mx && j.best)
    kl_isa_parallel(c, x->dims[0], kl_tensor_numel(x) + kl_tensor_numel(dy), max_cl_task, &j);
  else st = kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for MaxPoolGrad's maxima");
  free(j.mx);
  free(j.best);
  free(all);
  return st;
}

/* ---- BatchNormTrain and BatchNormGrad channels-last: X [rows, C] ----
 * A training step's activations held [N, S..., C] between oneDNN's convolutions
 * (backend.c choose_layouts). Two passes over fixed blocks of BN_CL_ROWS rows (the same
 * bits at any thread count), reading each pixel's channels together: the sums per
 * channel of X - K, (X - K)^2 (and dY, dY (X - K)), K the first row's X (a shift near
 * the mean, so that the variance does not cancel), float32 within a block (the level's
 * cl_sums) and double across blocks in block order; then Y = k X + shift (dX = a dY + b
 * X + c) with the plain kernels' per-channel coefficients (cl_apply). */
#define BN_CL_ROWS 64

typedef struct bn_cl_job {
  const kl_grad_fns *fn;
  const float *x, *dy;
  float *out;
  int64_t rows, channels;
  bool apply;                /* the outputs, else the sums */
  float *part;               /* [blocks][4][channels] */
  const float *shift;        /* [channels] */
  const float *ka, *kb, *kc; /* [channels] */
} bn_cl_job;

static void bn_cl_task(void *arg, int64_t t) {
  const bn_cl_job *j = arg;
  int64_t r0 = t * BN_CL_ROWS, r1 = r0 + BN_CL_ROWS < j->rows ? r0 + BN_CL_ROWS : j->rows;
  size_t nc = (size_t)j->channels, at = (size_t)r0 * nc, rows = (size_t)(r1 - r0);
  const float *dy = j->dy ? j->dy + at : NULL;
  if (j->apply) j->fn->cl_apply(j->x + at, dy, j->ka, j->kb, j->kc, rows, nc, j->out + at);
  else j->fn->cl_sums(j->x + at, dy, j->shift, rows, nc, j->part + (size_t)t * 4 * nc);
}

static int run_batchnorm_cl(kl_kernel_ctx *c, const kl_isa_fns *f) {
  bool train = c->node->op == KL_OP_KilnBatchNormTrain;
  const kl_tensor *x = train ? c->in[0] : c->in[1];
  if (!all_f32(c, 0, train ? 5 : 3) || x->rank < 3)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%s held channels-last needs float32 tensors "
                   "of rank 3 or more", train ? "BatchNormTrain" : "BatchNormGrad");
  int64_t nc = x->dims[1], numel = kl_tensor_numel(x), rows = nc ? numel / nc : 0;
  if (train && rows < 2)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 (X) has %lld values per channel; training "
                   "needs more than 1 (the unbiased variance divides by n - 1)", (long long)rows);
  if (numel == 0) { /* BatchNormGrad of no rows: dScale and dB are sums over nothing */
    for (int k = 1; !train && k < c->n_out && k < 3; k++)
      if (c->out[k] && kl_tensor_nbytes(c->out[k]))
        memset(c->out[k]->data, 0, kl_tensor_nbytes(c->out[k]));
    return KILN_OK;
  }
  int64_t blocks = (rows + BN_CL_ROWS - 1) / BN_CL_ROWS;
  size_t per = (size_t)nc;
  float *part = malloc(sizeof(float) * (4 * (size_t)blocks + 3) * per);
  double *sum = malloc(sizeof(double) * 4 * per);
  if (!part || !sum) {
    free(part);
    free(sum);
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a BatchNorm's sums");
  }
  float *ka = part + 4 * (size_t)blocks * per, *kb = ka + per, *kc = kb + per;
  const float *shift = x->data; /* the first row */
  bn_cl_job j = {.fn = f->grad, .x = x->data, .dy = train ? NULL : c->in[0]->data,
                 .out = c->out[0]->data, .rows = rows, .channels = nc, .part = part,
                 .shift = shift, .ka = ka, .kb = kb, .kc = kc};
  kl_isa_parallel(c, blocks, numel * (j.dy ? 2 : 1), bn_cl_task, &j);
  memset(sum, 0, sizeof(double) * 4 * per);
  for (int64_t t = 0; t < blocks; t++)
    for (size_t k = 0; k < 4 * per; k++) sum[k] += part[(size_t)t * 4 * per + k];
  double n = (double)rows, eps = kl_attr_float(c->node, "epsilon", 1e-5f);
  const float *scale = c->in[train ? 1 : 2]->data;
  /* training: B, the old statistics; out[1], out[2] the new ones (or dScale, dB) */
  const float *bias = train ? c->in[2]->data : NULL;
  const float *old_mean = train ? c->in[3]->data : NULL, *old_var = train ? c->in[4]->data : NULL;
  float *o1 = c->n_out > 1 && c->out[1] ? c->out[1]->data : NULL;
  float *o2 = c->n_out > 2 && c->out[2] ? c->out[2]->data : NULL;
  double momentum = kl_attr_float(c->node, "momentum", 0.9f);
  for (int64_t ch = 0; ch < nc; ch++) {
    double d = sum[ch] / n; /* mean - K */
    double mean = shift[ch] + d, var = sum[per + ch] / n - d * d;
    if (var < 0) var = 0;
    double invstd = 1 / sqrt(var + eps), k = (double)scale[ch] * invstd;
    ka[ch] = (float)k;
    if (train) {
      kb[ch] = (float)((double)bias[ch] - mean * k);
      if (o1) o1[ch] = (float)(old_mean[ch] * momentum + mean * (1 - momentum));
      if (o2) o2[ch] = (float)(old_var[ch] * momentum + var * n / (n - 1) * (1 - momentum));
      continue;
    }
    /* as bn_grad_channel: dX = k (dY - sum_dy / n - xhat sum_dy_xhat / n); the sum of
     * dY (X - mean) is that of dY (X - K) less (mean - K) times that of dY */
    double sum_dy = sum[2 * per + ch];
    double sum_dy_xhat = (sum[3 * per + ch] - d * sum_dy) * invstd;
    kb[ch] = (float)(-k * invstd * sum_dy_xhat / n);
    kc[ch] = (float)(-k * sum_dy / n + k * invstd * sum_dy_xhat / n * mean);
    if (o1) o1[ch] = (float)sum_dy_xhat;
    if (o2) o2[ch] = (float)sum_dy;
  }
  j.apply = true;
  kl_isa_parallel(c, blocks, numel * (j.dy ? 3 : 2), bn_cl_task, &j);
  free(part);
  free(sum);
  return KILN_OK;
}

/* ---- UnaryGrad ---- */

typedef struct unary_job {
  const kl_isa_fns *f;
  kl_unary_grad u;
  const float *dy, *x, *y;
  float *dx;
  int64_t n, per;
} unary_job;

#define SQRT1_2F 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f
#define UBLOCK 256 /* elements per block of a task: the activations on the stack */

/* The slopes of elements [0, m) of the block at x (y: the op's output, or NULL) into
 * s, with the level's activations: f'(x) of the reference's rules (ref/grad.c). */
static void slopes(const unary_job *j, const float *x, const float *y, int64_t m, float *s,
                   float *t) {
  const kl_eltwise_fns *e = j->f->elt;
  size_t n = (size_t)m;
  switch (j->u.op) {
  case KL_UG_SIGMOID:
  case KL_UG_SILU:
    if (y && j->u.op == KL_UG_SIGMOID) {
      memcpy(t, y, sizeof(float) * n);
    } else {
      kl_act a = {KL_ACT_SIGMOID, 0, 0};
      e->unary(&a, x, t, n);
    }
    if (j->u.op == KL_UG_SIGMOID)
      for (int64_t i = 0; i < m; i++) s[i] = t[i] * (1 - t[i]);
    else
      for (int64_t i = 0; i < m; i++) s[i] = t[i] * (1 + x[i] * (1 - t[i]));
    return;
  case KL_UG_TANH:
    if (y) {
      memcpy(t, y, sizeof(float) * n);
    } else {
      kl_act a = {KL_ACT_TANH, 0, 0};
      e->unary(&a, x, t, n);
    }
    for (int64_t i = 0; i < m; i++) s[i] = 1 - t[i] * t[i];
    return;
  case KL_UG_ERF: { /* 2 / sqrt(pi) e^(-x^2) */
    kl_act a = {KL_ACT_EXP, 0, 0};
    for (int64_t i = 0; i < m; i++) t[i] = -x[i] * x[i];
    e->unary(&a, t, t, n);
    for (int64_t i = 0; i < m; i++) s[i] = 1.12837916709551257390f * t[i];
    return;
  }
  default: /* KL_UG_GELU */
    if (j->u.tanh_gelu) {
      const float k = 0.79788456080286535588f, kappa = 0.044715f;
      kl_act a = {KL_ACT_TANH, 0, 0};
      for (int64_t i = 0; i < m; i++) t[i] = k * (x[i] + kappa * x[i] * x[i] * x[i]);
      e->unary(&a, t, t, n);
      for (int64_t i = 0; i < m; i++)
        s[i] = 0.5f * (1 + t[i]) + 0.5f * x[i] * (1 - t[i] * t[i]) * k * (1 + 3 * kappa * x[i] * x[i]);
    } else { /* 0.5 (1 + erf(x / sqrt 2)) + x e^(-x^2 / 2) / sqrt(2 pi) */
      kl_act erf = {KL_ACT_ERF, 0, 0}, ex = {KL_ACT_EXP, 0, 0};
      for (int64_t i = 0; i < m; i++) t[i] = x[i] * SQRT1_2F;
      e->unary(&erf, t, t, n);
      for (int64_t i = 0; i < m; i++) s[i] = -0.5f * x[i] * x[i];
      e->unary(&ex, s, s, n);
      for (int64_t i = 0; i < m; i++) s[i] = 0.5f * (1 + t[i]) + x[i] * s[i] * INV_SQRT_2PI;
    }
    return;
  }
}

static void unary_task(void *arg, int64_t t) {
  const unary_job *j = arg;
  int64_t i0 = t * j->per, i1 = i0 + j->per < j->n ? i0 + j->per : j->n;
  if (j->u.op == KL_UG_RELU || j->u.op == KL_UG_LEAKY_RELU) {
    float alpha = j->u.op == KL_UG_RELU ? 0.0f : (float)j->u.alpha;
    j->f->grad->relu(j->dy + i0, j->x + i0, alpha, j->dx + i0, (size_t)(i1 - i0));
    return;
  }
  float s[UBLOCK], tmp[UBLOCK];
  for (int64_t b = i0; b < i1; b += UBLOCK) {
    int64_t m = i1 - b < UBLOCK ? i1 - b : UBLOCK;
    slopes(j, j->x + b, j->y ? j->y + b : NULL, m, s, tmp);
    const float *dy = j->dy + b;
    float *dx = j->dx + b;
    for (int64_t i = 0; i < m; i++) {
      float d = dy[i];
      dx[i] = s[i] == 0 ? 0.0f : d * s[i];
    }
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

int kl_run_unary_grad(kl_kernel_ctx *c, const kl_isa_fns *f) {
  unary_job j = {.f = f};
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
  const kl_grad_fns *fn;
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
      j->fn->sums(j->big + (i * j->b + k) * j->c, NULL, (size_t)j->c, &s, &unused);
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

int kl_run_sum_to(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *dy = c->in[0];
  kl_tensor *dx = c->out[0];
  runs u;
  if (!all_f32(c, 0, 1) || !sum_to_runs(dy, dx, &u)) return kl_isa_ref(c);
  sum_job j = {.fn = f->grad, .big = dy->data, .small = dx->data};
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

int kl_run_reduce_grad(kl_kernel_ctx *c, const kl_isa_fns *f) {
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
  (void)f;
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

int kl_run_softmax_grad(kl_kernel_ctx *c, const kl_isa_fns *f) {
  (void)f;
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

int kl_run_layernorm_grad(kl_kernel_ctx *c, const kl_isa_fns *f) {
  (void)f;
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

/* ---- ReduceGrad channels-last: a global pooling's gradient ----
 * dY [N, C] or [N, C, 1...] (the same bytes in either layout) over the spatial axes of
 * X, dX held [N, S..., C]: each pixel gets its image's C values, times 1 / S for a mean.
 * kl_cpu_isa_layout offers it only for axes that are exactly the spatial ones. */
typedef struct reduce_cl_job {
  const float *dy;
  float *dx;
  int64_t channels, pixels;
  float scale;
} reduce_cl_job;

static void reduce_cl_task(void *arg, int64_t n) {
  const reduce_cl_job *j = arg;
  const float *dy = j->dy + n * j->channels;
  float *dx = j->dx + n * j->pixels * j->channels;
  for (int64_t p = 0; p < j->pixels; p++, dx += j->channels)
    for (int64_t k = 0; k < j->channels; k++) dx[k] = dy[k] * j->scale;
}

static int run_reduce_grad_cl(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0];
  kl_tensor *dx = c->out[0];
  if (!all_f32(c, 0, 1) || dx->rank < 3 || dx->dims[1] == 0 || dx->dims[0] == 0 ||
      kl_tensor_numel(dy) != dx->dims[0] * dx->dims[1])
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "ReduceGrad held channels-last needs float32 "
                   "dY of one value per image and channel");
  reduce_cl_job j = {.dy = dy->data, .dx = dx->data, .channels = dx->dims[1],
                     .pixels = kl_tensor_numel(dx) / (dx->dims[0] * dx->dims[1])};
  /* the same float as the plain kernel's 1 / count in double, rounded once */
  j.scale = kl_attr_int(c->node, "mean", 0) ? (float)(1.0 / (double)j.pixels) : 1.0f;
  kl_isa_parallel(c, dx->dims[0], kl_tensor_numel(dx), reduce_cl_task, &j);
  return KILN_OK;
}

int kl_run_grad_cl(kl_kernel_ctx *c, const kl_isa_fns *f) {
  switch (c->node->op) {
  case KL_OP_KilnMaxPoolGrad: return run_max_pool_grad_cl(c, f);
  case KL_OP_KilnReduceGrad: return run_reduce_grad_cl(c);
  default: return run_batchnorm_cl(c, f);
  }
}
