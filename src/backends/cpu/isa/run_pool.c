/* Driver of the ISA kernels for MaxPool (without its Indices output) and AveragePool,
 * 1-D and 2-D, float32, any kernel, strides, dilations, pads and ceil_mode.
 *
 * A window is separable: its maximum (or sum) is the maximum over its columns of the
 * maxima over its rows. So for each output row, the input rows under the window are
 * first combined element by element into a row buffer v (contiguous, vectorizes at any
 * stride), then the ISA's hpool combines each output's columns of v. Positions of v
 * outside the input hold the identity (-inf, 0), so padding needs no tests; for the
 * average, the divisor is the product of the window's row and column tap counts, as
 * the taps inside the input (or the padded input) form a rectangle.
 *
 * Like the reference, MaxPool never lets a NaN win (binary MAX and hpool skip them)
 * and a window with no input under it gives -inf; AveragePool over no taps gives NaN.
 */
#include "backends/cpu/isa/run.h"
#include "backends/cpu/ref/ref.h"

#include <math.h>
#include <stdlib.h>

/* Floats in each row buffer: outputs are done in column chunks that fit. */
#define SPAN 2048

typedef struct pool_job {
  const kl_isa_fns *f;
  const float *x;
  float *y;
  int64_t ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, pe_h, pe_w;
  int64_t oc; /* output columns per chunk */
  int64_t planes, per;
  bool is_max, include_pad;
} pool_job;

/* How many taps k < kn of a window starting at `start` (step dil) land inside
 * [0, in), or inside the padded range [-pb, in + pe) when padded. */
static int64_t taps(int64_t start, int64_t kn, int64_t dil, int64_t in, int64_t pb,
                    int64_t pe, bool padded) {
  int64_t k0, k1;
  kl_ref_tap_span(start, kn, dil, padded ? -pb : 0, padded ? in + pe : in, &k0, &k1);
  return k1 - k0;
}

/* One output row, columns [ox0, ox0 + m): v spans input columns [c0, c0 + width). */
static void pool_row(const pool_job *j, const float *x, float *yr, int64_t oy, int64_t c0,
                     int64_t width, int64_t m, const float *cx, float *v, float *cnt) {
  const kl_eltwise_fns *e = j->f->elt;
  int64_t lo = c0 < 0 ? -c0 : 0, hi = j->iw - c0 < width ? j->iw - c0 : width;
  float identity = j->is_max ? -INFINITY : 0.0f;
  for (int64_t i = 0; i < width; i++) v[i] = identity;
  int64_t r0 = oy * j->sh - j->ph, k0, k1;
  kl_ref_tap_span(r0, j->kh, j->dh, 0, j->ih, &k0, &k1);
  int64_t rows_in = k1 - k0;
  for (int64_t k = k0; k < k1; k++) {
    int64_t iy = r0 + k * j->dh;
    if (hi > lo)
      e->binary(j->is_max ? KL_BIN_MAX : KL_BIN_ADD, v + lo, 1, x + iy * j->iw + c0 + lo, 1,
                v + lo, (size_t)(hi - lo));
  }
  j->f->pool->hpool(j->is_max, v, (size_t)j->sw, (size_t)j->dw, (size_t)j->kw, yr, (size_t)m);
  if (j->is_max) return;
  float cy = (float)(j->include_pad ? taps(r0, j->kh, j->dh, j->ih, j->ph, j->pe_h, true)
                                    : rows_in);
  e->binary(KL_BIN_MUL, cx, 1, &cy, 0, cnt, (size_t)m);
  e->binary(KL_BIN_DIV, yr, 1, cnt, 1, yr, (size_t)m);
}

#define S1_TAPS 64 /* pointers handed to the taps primitive at once */

/* The maximum or sum of v[i0 + kx step] for kx < kw, over the positions in [lo, hi);
 * *inside counts those. One output at a row's end, where the primitive's run stops. */
static float row_taps(const pool_job *j, const float *v, int64_t i0, int64_t step, int64_t lo,
                      int64_t hi, int64_t *inside) {
  float acc = j->is_max ? -INFINITY : 0.0f;
  int64_t in = 0;
  for (int64_t kx = 0; kx < j->kw; kx++) {
    int64_t i = i0 + kx * step;
    if (i < lo || i >= hi) continue;
    if (j->is_max) acc = v[i] > acc ? v[i] : acc; /* a NaN never wins */
    else acc += v[i];
    in++;
  }
  *inside = in;
  return acc;
}

/* Stride 1 along the row (sw 1, at most S1_TAPS taps each way): one call of the level's
 * taps primitive combines the input rows under the window into v, and one more the
 * taps of v into every output whose window lies inside the row, the average's divisor
 * being the same for all of those; the outputs over the padding are combined one by
 * one from v. PoolFormer's 3x3 average pools of 56-wide rows took 7 calls a row. */
static void pool_row_s1(const pool_job *j, const float *x, float *yr, int64_t oy, int64_t c0,
                        int64_t width, int64_t m, const float *cx, float *v) {
  const float *ptr[S1_TAPS];
  int64_t lo = c0 < 0 ? -c0 : 0, hi = j->iw - c0 < width ? j->iw - c0 : width;
  float identity = j->is_max ? -INFINITY : 0.0f;
  int64_t r0 = oy * j->sh - j->ph, k0, k1;
  kl_ref_tap_span(r0, j->kh, j->dh, 0, j->ih, &k0, &k1);
  if (hi < lo) hi = lo;
  for (int64_t i = 0; i < lo; i++) v[i] = identity;
  for (int64_t i = hi; i < width; i++) v[i] = identity;
  size_t n = 0;
  for (int64_t k = k0; k < k1; k++) ptr[n++] = x + (r0 + k * j->dh) * j->iw + c0 + lo;
  if (n > 0 && hi > lo) j->f->pool->taps(j->is_max, false, ptr, n, 1.0f, v + lo, (size_t)(hi - lo));
  else for (int64_t i = lo; i < hi; i++) v[i] = identity;
  float rows = (float)(j->include_pad ? taps(r0, j->kh, j->dh, j->ih, j->ph, j->pe_h, true)
                                      : k1 - k0);
  /* outputs i in [a, b) read v[i + kx * dw] inside the input for every kx */
  int64_t a = lo, b = hi - (j->kw - 1) * j->dw;
  if (b > m) b = m;
  if (a > b) a = b;
  for (int64_t kx = 0; kx < j->kw; kx++) ptr[kx] = v + a + kx * j->dw;
  if (b > a)
    j->f->pool->taps(j->is_max, false, ptr, (size_t)j->kw,
                     j->is_max ? 1.0f : 1.0f / (rows * (float)j->kw), yr + a, (size_t)(b - a));
  for (int side = 0; side < 2; side++) /* the outputs before a, then from b */
    for (int64_t i = side ? b : 0; i < (side ? m : a); i++) {
      int64_t all; /* v holds the identity over the padding */
      float r = row_taps(j, v, i, j->dw, 0, width, &all);
      yr[i] = j->is_max ? r : r / (rows * cx[i]);
    }
}

/* A stride-1, dilation-1 window whose output has the input's size ("same" pads, PoolFormer's
 * 3x3 average pools): the output rows whose window rows all lie inside the plane, rows
 * [*lo, *hi), go in bands of whole rows, two calls of the level's taps primitive a band
 * (the rows under the windows combined into v, then v's taps into the outputs, the
 * band's rows as one run); the outputs whose window crosses a row's end, which that
 * run gets wrong (it reads on into the next row), are done again one by one from v.
 * PoolFormer's 12 pools took 4.2 ms a run on a Zen 3 core row by row (pool_row_s1: 14
 * to 56 outputs a row, two calls and the ends each), onnxruntime's 1.2. False (nothing
 * done) where the window or plane does not fit. */
#define BAND SPAN

/* pool_band's output ox of a row whose window crosses the row's end, from v's row vr. */
static void band_end(const pool_job *j, const float *vr, float *yr, int64_t ox) {
  int64_t inside;
  float acc = row_taps(j, vr, ox - j->pw, 1, 0, j->iw, &inside);
  int64_t cols = j->include_pad ? taps(ox - j->pw, j->kw, 1, j->iw, j->pw, j->pe_w, true) : inside;
  yr[ox] = j->is_max ? acc : acc / (float)(j->kh * cols);
}

static bool pool_band(const pool_job *j, const float *x, float *y, int64_t *lo, int64_t *hi) {
  if (j->sh != 1 || j->sw != 1 || j->dh != 1 || j->dw != 1 || j->oh != j->ih ||
      j->ow != j->iw || j->kh > S1_TAPS || j->kw > S1_TAPS || j->ih < j->kh || j->iw < j->kw ||
      j->ph > j->kh - 1 || j->pw > j->kw - 1 || j->iw > BAND || j->iw > j->oc)
    return false;
  float v[BAND];
  const float *ptr[S1_TAPS];
  int64_t iw = j->iw, per = BAND / iw, right = iw - (j->kw - 1 - j->pw); /* ends: < pw, >= right */
  float scale = j->is_max ? 1.0f : 1.0f / (float)(j->kh * j->kw);
  *lo = j->ph, *hi = j->ih - (j->kh - 1 - j->ph);
  for (int64_t oy0 = *lo; oy0 < *hi; oy0 += per) {
    int64_t nb = *hi - oy0 < per ? *hi - oy0 : per;
    for (int64_t ky = 0; ky < j->kh; ky++) ptr[ky] = x + (oy0 - j->ph + ky) * iw;
    j->f->pool->taps(j->is_max, false, ptr, (size_t)j->kh, 1.0f, v, (size_t)(nb * iw));
    for (int64_t kx = 0; kx < j->kw; kx++) ptr[kx] = v + kx;
    j->f->pool->taps(j->is_max, false, ptr, (size_t)j->kw, scale, y + oy0 * iw + j->pw,
                     (size_t)(nb * iw - (j->kw - 1)));
    for (int64_t r = 0; r < nb; r++) {
      for (int64_t ox = 0; ox < j->pw; ox++) band_end(j, v + r * iw, y + (oy0 + r) * iw, ox);
      for (int64_t ox = right; ox < iw; ox++) band_end(j, v + r * iw, y + (oy0 + r) * iw, ox);
    }
  }
  return true;
}

static void pool_plane(const pool_job *j, const float *x, float *y) {
  float v[SPAN], cx[SPAN], cnt[SPAN];
  bool s1 = j->sw == 1 && j->kw <= S1_TAPS && j->kh <= S1_TAPS;
  int64_t band_lo = 0, band_hi = 0; /* output rows pool_band did */
  if (s1 && !pool_band(j, x, y, &band_lo, &band_hi)) band_lo = band_hi = 0;
  for (int64_t ox0 = 0; ox0 < j->ow; ox0 += j->oc) {
    int64_t m = j->ow - ox0 < j->oc ? j->ow - ox0 : j->oc;
    int64_t c0 = ox0 * j->sw - j->pw, width = (m - 1) * j->sw + (j->kw - 1) * j->dw + 1;
    for (int64_t i = 0; !j->is_max && i < m; i++)
      cx[i] = (float)taps(c0 + i * j->sw, j->kw, j->dw, j->iw, j->pw, j->pe_w, j->include_pad);
    for (int64_t oy = 0; oy < j->oh; oy++) {
      if (oy == band_lo && band_hi > band_lo) oy = band_hi;
      if (oy >= j->oh) break;
      if (s1) pool_row_s1(j, x, y + oy * j->ow + ox0, oy, c0, width, m, cx, v);
      else pool_row(j, x, y + oy * j->ow + ox0, oy, c0, width, m, cx, v, cnt);
    }
  }
}

static void pool_task(void *arg, int64_t t) {
  const pool_job *j = arg;
  int64_t last = (t + 1) * j->per < j->planes ? (t + 1) * j->per : j->planes;
  for (int64_t p = t * j->per; p < last; p++)
    pool_plane(j, j->x + p * j->ih * j->iw, j->y + p * j->oh * j->ow);
}

/* The job's geometry from the reference's window (1-D and 2-D use its last two dims);
 * false when a window row is too wide for the buffers. */
static bool pool_setup(const kl_ref_window *g, pool_job *j) {
  j->ih = g->in[1], j->iw = g->in[2], j->oh = g->out[1], j->ow = g->out[2];
  j->kh = g->kernel[1], j->kw = g->kernel[2], j->sh = g->stride[1], j->sw = g->stride[2];
  j->dh = g->dilation[1], j->dw = g->dilation[2];
  j->ph = g->pad_begin[1], j->pw = g->pad_begin[2], j->pe_h = g->pad_end[1];
  j->pe_w = g->pad_end[2];
  int64_t reach = (j->kw - 1) * j->dw + 1;
  if (reach > SPAN || j->sw < 1 || j->kw < 1) return false;
  j->oc = (SPAN - reach) / j->sw + 1;
  return true;
}

/* MaxPool of 8-bit codes (a quantized activation's, fold_qdq): each output the largest
 * code under its window, the lowest code when no input lies under it (as -inf
 * quantizes), planes on the node's threads. */
typedef struct pool8_job {
  kl_ref_window g;
  const void *x;
  void *y;
  bool s8;
  int64_t planes, per;
} pool8_job;

#define POOL8_SPAN 4096 /* the widest input and output rows taken (else the reference) */

/* Separable, as pool_row: the rows under an output row's window maxed into v element by
 * element (vectorizes), then each output's columns of v (their spans worked out once
 * per plane). */
#define POOL8_PLANE(T, LOWEST)                                                            \
  static void pool8_plane_##T(const kl_ref_window *g, const T *x, T *y) {                \
    T v[POOL8_SPAN];                                                                      \
    int32_t c0[POOL8_SPAN], j0[POOL8_SPAN], j1[POOL8_SPAN];                               \
    int64_t iw = g->in[2], ow = g->out[2], dw = g->dilation[2];                           \
    for (int64_t ox = 0; ox < ow; ox++) {                                                 \
      int64_t c = ox * g->stride[2] - g->pad_begin[2], a, b;                              \
      kl_ref_tap_span(c, g->kernel[2], dw, 0, iw, &a, &b);                                \
      c0[ox] = (int32_t)c, j0[ox] = (int32_t)a, j1[ox] = (int32_t)b;                      \
    }                                                                                     \
    for (int64_t oy = 0; oy < g->out[1]; oy++) {                                          \
      int64_t r0 = oy * g->stride[1] - g->pad_begin[1], k0, k1;                           \
      kl_ref_tap_span(r0, g->kernel[1], g->dilation[1], 0, g->in[1], &k0, &k1);           \
      for (int64_t i = 0; i < iw; i++) v[i] = LOWEST;                                     \
      for (int64_t k = k0; k < k1; k++) {                                                 \
        const T *row = x + (r0 + k * g->dilation[1]) * iw;                                \
        for (int64_t i = 0; i < iw; i++) v[i] = row[i] > v[i] ? row[i] : v[i];           \
      }                                                                                   \
      T *yr = y + oy * ow;                                                                \
      for (int64_t ox = 0; ox < ow; ox++) {                                               \
        T m = LOWEST;                                                                     \
        const T *vc = v + c0[ox];                                                         \
        for (int64_t jj = j0[ox]; jj < j1[ox]; jj++) m = vc[jj * dw] > m ? vc[jj * dw] : m; \
        yr[ox] = m;                                                                       \
      }                                                                                   \
    }                                                                                     \
  }

POOL8_PLANE(uint8_t, 0)
POOL8_PLANE(int8_t, -128)

static void pool8_task(void *arg, int64_t t) {
  const pool8_job *j = arg;
  int64_t last = (t + 1) * j->per < j->planes ? (t + 1) * j->per : j->planes;
  int64_t in = j->g.in[1] * j->g.in[2], out = j->g.out[1] * j->g.out[2];
  for (int64_t p = t * j->per; p < last; p++) {
    if (j->s8)
      pool8_plane_int8_t(&j->g, (const int8_t *)j->x + p * in, (int8_t *)j->y + p * out);
    else
      pool8_plane_uint8_t(&j->g, (const uint8_t *)j->x + p * in, (uint8_t *)j->y + p * out);
  }
}

static int run_pool8(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  pool8_job j = {.x = x->data, .y = c->out[0]->data, .s8 = x->dtype == KL_I8,
                 .planes = x->dims[0] * x->dims[1]};
  kiln_status st = kl_ref_window_init(c, NULL, &j.g);
  if (st != KILN_OK) return st;
  if (kl_tensor_numel(c->out[0]) == 0) return KILN_OK;
  if (j.g.in[2] > POOL8_SPAN || j.g.out[2] > POOL8_SPAN || j.g.in[2] > INT32_MAX / 2)
    return kl_isa_ref(c);
  int64_t work = j.planes * j.g.out[1] * j.g.out[2] * j.g.kernel[1] * j.g.kernel[2];
  int64_t tasks = kl_isa_split(j.planes, 16384 / (j.g.in[1] * j.g.in[2] + 1) + 1, &j.per);
  kl_isa_parallel(c, tasks, work, pool8_task, &j);
  return KILN_OK;
}

/* The same over codes held channels-last: each output pixel's C channels the level's
 * max_codes of the input pixels under its window (found once per row and column, as
 * pool8_plane), rows of output pixels on the node's threads. */
#define POOL8_TAPS 64 /* taps per max_codes call; a larger window goes in parts */
typedef struct pool8_cl_job {
  const kl_quant_fns *q;
  kl_ref_window g;
  const uint8_t *x;
  uint8_t *y;
  uint8_t flip;
  int64_t c, rows, per;
} pool8_cl_job;

static void pool8_cl_task(void *arg, int64_t t) {
  const pool8_cl_job *j = arg;
  const kl_ref_window *g = &j->g;
  int64_t ih = g->in[1], iw = g->in[2], oh = g->out[1], ow = g->out[2];
  int64_t last = (t + 1) * j->per < j->rows ? (t + 1) * j->per : j->rows;
  const uint8_t *taps[POOL8_TAPS];
  for (int64_t r = t * j->per; r < last; r++) { /* r = image * oh + oy */
    int64_t img = r / oh, oy = r % oh, r0 = oy * g->stride[1] - g->pad_begin[1], k0, k1;
    kl_ref_tap_span(r0, g->kernel[1], g->dilation[1], 0, ih, &k0, &k1);
    const uint8_t *xi = j->x + img * ih * iw * j->c;
    uint8_t *yr = j->y + r * ow * j->c;
    for (int64_t ox = 0; ox < ow; ox++) {
      int64_t c0 = ox * g->stride[2] - g->pad_begin[2], q0, q1;
      kl_ref_tap_span(c0, g->kernel[2], g->dilation[2], 0, iw, &q0, &q1);
      size_t n = 0;
      bool acc = false;
      for (int64_t k = k0; k < k1; k++)
        for (int64_t q = q0; q < q1; q++) {
          taps[n++] = xi + ((r0 + k * g->dilation[1]) * iw + c0 + q * g->dilation[2]) * j->c;
          if (n == POOL8_TAPS) {
            j->q->max_codes(taps, n, j->flip, acc, yr + ox * j->c, (size_t)j->c);
            n = 0, acc = true;
          }
        }
      if (n || !acc) j->q->max_codes(taps, n, j->flip, acc, yr + ox * j->c, (size_t)j->c);
    }
  }
}

int kl_run_pool8_cl(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  if ((x->dtype != KL_U8 && x->dtype != KL_I8) || y->dtype != x->dtype ||
      (x->rank != 3 && x->rank != 4) || (c->n_out > 1 && c->out[1]))
    return kl_fail(c->e, KILN_ERR_INTERNAL, "MaxPool held channels-last on %s codes of rank "
                   "%d: expected uint8 or int8 of rank 3 or 4, one output",
                   kl_dtype_name(x->dtype), x->rank);
  pool8_cl_job j = {.q = f->quant, .x = x->data, .y = y->data,
                    .flip = x->dtype == KL_I8 ? 0x80 : 0, .c = x->dims[1]};
  kiln_status st = kl_ref_window_init(c, NULL, &j.g);
  if (st != KILN_OK) return st;
  if (kl_tensor_numel(y) == 0) return KILN_OK;
  j.rows = x->dims[0] * j.g.out[1];
  int64_t per_row = j.g.out[2] * j.c * j.g.kernel[1] * j.g.kernel[2];
  int64_t tasks = kl_isa_split(j.rows, 16384 / (per_row + 1) + 1, &j.per);
  kl_isa_parallel(c, tasks, j.rows * per_row, pool8_cl_task, &j);
  return KILN_OK;
}

/* QLinearAveragePool (ops.def) on 8-bit codes, separable as pool8: the codes (x ^ flip,
 * an int8 x plus 128) of the rows under an output row's window summed into v in int32,
 * then each output's columns of v; acc is that sum less 128 (int8) and x_zero_point per
 * tap inside X; the divisor the taps inside X, or inside the padded input (both a
 * rectangle); rounded in float32 as the reference (kl_ref_mean_code). */
typedef struct qavg_job {
  kl_ref_window g;
  const uint8_t *x;
  uint8_t *y, flip;
  bool include_pad;
  int32_t zx, zy;
  float sx, sy, lo, hi; /* lo, hi: the codes' range less zy */
  int64_t planes, per;
} qavg_job;

static void qavg_plane(const qavg_job *j, const uint8_t *x, uint8_t *y) {
  const kl_ref_window *g = &j->g;
  int32_t v[POOL8_SPAN], c0[POOL8_SPAN], j0[POOL8_SPAN], j1[POOL8_SPAN], cols[POOL8_SPAN];
  int64_t iw = g->in[2], ow = g->out[2], dw = g->dilation[2], a, b;
  for (int64_t ox = 0; ox < ow; ox++) {
    int64_t c = ox * g->stride[2] - g->pad_begin[2];
    kl_ref_tap_span(c, g->kernel[2], dw, -g->pad_begin[2], iw + g->pad_end[2], &a, &b);
    cols[ox] = (int32_t)(b - a);
    kl_ref_tap_span(c, g->kernel[2], dw, 0, iw, &a, &b);
    c0[ox] = (int32_t)c, j0[ox] = (int32_t)a, j1[ox] = (int32_t)b;
  }
  int32_t off = (j->flip ? 128 : 0) + j->zx;
  for (int64_t oy = 0; oy < g->out[1]; oy++) {
    int64_t r0 = oy * g->stride[1] - g->pad_begin[1], k0, k1;
    kl_ref_tap_span(r0, g->kernel[1], g->dilation[1], -g->pad_begin[1],
                    g->in[1] + g->pad_end[1], &a, &b);
    int64_t rows = b - a;
    kl_ref_tap_span(r0, g->kernel[1], g->dilation[1], 0, g->in[1], &k0, &k1);
    for (int64_t i = 0; i < iw; i++) v[i] = 0;
    for (int64_t k = k0; k < k1; k++) {
      const uint8_t *row = x + (r0 + k * g->dilation[1]) * iw;
      for (int64_t i = 0; i < iw; i++) v[i] += (uint8_t)(row[i] ^ j->flip);
    }
    for (int64_t ox = 0; ox < ow; ox++) {
      int64_t sum = 0, taps = (k1 - k0) * (j1[ox] - j0[ox]);
      for (int64_t jj = j0[ox]; jj < j1[ox]; jj++) sum += v[c0[ox] + jj * dw];
      float count = (float)(j->include_pad ? rows * cols[ox] : taps);
      float q = (float)(sum - off * taps) * (j->sx / (j->sy * count));
      q = q == q ? q : 0.0f;
      q = q < j->lo ? j->lo : q > j->hi ? j->hi : q;
      y[oy * ow + ox] = (uint8_t)((int32_t)rintf(q) + j->zy);
    }
  }
}

static void qavg_task(void *arg, int64_t t) {
  const qavg_job *j = arg;
  int64_t last = (t + 1) * j->per < j->planes ? (t + 1) * j->per : j->planes;
  int64_t in = j->g.in[1] * j->g.in[2], out = j->g.out[1] * j->g.out[2];
  for (int64_t p = t * j->per; p < last; p++) qavg_plane(j, j->x + p * in, j->y + p * out);
}

static int32_t code_at(const kl_tensor *z) {
  return z->dtype == KL_U8 ? *(const uint8_t *)z->data : *(const int8_t *)z->data;
}

static int run_qavg(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  bool u8 = x->dtype == KL_U8;
  qavg_job j = {.x = x->data, .y = c->out[0]->data, .flip = u8 ? 0 : 0x80,
                .include_pad = kl_attr_int(c->node, "count_include_pad", 0) != 0,
                .zx = code_at(c->in[2]), .zy = code_at(c->in[4]),
                .sx = *(const float *)c->in[1]->data, .sy = *(const float *)c->in[3]->data,
                .planes = x->dims[0] * x->dims[1]};
  j.lo = (float)((u8 ? 0 : -128) - j.zy), j.hi = (float)((u8 ? 255 : 127) - j.zy);
  kiln_status st = kl_ref_window_init(c, NULL, &j.g);
  if (st != KILN_OK) return st;
  if (kl_tensor_numel(c->out[0]) == 0) return KILN_OK;
  if (j.g.in[2] > POOL8_SPAN || j.g.out[2] > POOL8_SPAN || j.g.in[1] > (1 << 22) ||
      c->out[0]->dtype != x->dtype)
    return kl_isa_ref(c);
  int64_t work = j.planes * j.g.out[1] * j.g.out[2] * j.g.kernel[1] * j.g.kernel[2];
  int64_t tasks = kl_isa_split(j.planes, 16384 / (j.g.in[1] * j.g.in[2] + 1) + 1, &j.per);
  kl_isa_parallel(c, tasks, work, qavg_task, &j);
  return KILN_OK;
}

int kl_run_pool(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  bool indices = c->n_out > 1 && c->out[1];
  if (c->node->op == KL_OP_KilnQLinearAveragePool)
    return x->rank == 3 || x->rank == 4 ? run_qavg(c) : kl_isa_ref(c);
  if ((x->dtype == KL_U8 || x->dtype == KL_I8) && c->node->op == KL_OP_MaxPool && !indices &&
      y->dtype == x->dtype && (x->rank == 3 || x->rank == 4))
    return run_pool8(c);
  if (x->dtype != KL_F32 || y->dtype != KL_F32 || indices || x->rank < 3 || x->rank > 4)
    return kl_isa_ref(c);
  kl_ref_window g;
  kiln_status st = kl_ref_window_init(c, NULL, &g);
  if (st != KILN_OK) return st;
  pool_job j = {.f = f, .x = x->data, .y = y->data, .planes = x->dims[0] * x->dims[1],
                .is_max = c->node->op == KL_OP_MaxPool,
                .include_pad = kl_attr_int(c->node, "count_include_pad", 0) != 0};
  if (!pool_setup(&g, &j)) return kl_isa_ref(c);
  if (kl_tensor_numel(y) == 0) return KILN_OK;
  /* taps inside X per output: at most min(kernel, input) per dim */
  int64_t work = j.planes * j.oh * j.ow * (j.kh < j.ih ? j.kh : j.ih) * (j.kw < j.iw ? j.kw : j.iw);
  int64_t tasks = kl_isa_split(j.planes, 16384 / (j.ih * j.iw + 1) + 1, &j.per);
  kl_isa_parallel(c, tasks, work, pool_task, &j);
  return KILN_OK;
}

/* ---- channels-last ---- */

/* Pooling over [N, H, W, C] in memory: every output pixel combines the C-long rows of
 * the input pixels under its window with the level's binary primitive, so it
 * vectorizes along C at any window. Tasks are runs of output rows. */
typedef struct nhwc_job {
  const kl_isa_fns *f;
  const float *x;
  float *y;
  int64_t c, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, pe_h, pe_w;
  int64_t rows, per; /* rows: N * OH */
  int64_t cb, chunks; /* channels a task takes (a multiple of 16 but the last), chunks of C */
  bool is_max, include_pad;
} nhwc_job;

#define NHWC_TAPS 64 /* tap pointers handed to the primitive at once */

/* Output pixels [ox, ox + count) of row oy, channels [ch, ch + cn). count > 1 only for
 * a stride-1 window inside the row for every one of them, over all the channels: then
 * each tap's inputs for the run are one contiguous block, as are the outputs, and
 * one call of the primitive covers the run (count * C elements, one scale). */
static void nhwc_pixels(const nhwc_job *j, int64_t n, int64_t oy, int64_t ox, int64_t count,
                        int64_t ch, int64_t cn) {
  const float *x[NHWC_TAPS];
  float *yp = j->y + ((n * j->oh + oy) * j->ow + ox) * j->c + ch;
  int64_t r0 = oy * j->sh - j->ph, c0 = ox * j->sw - j->pw, ky0, ky1, kx0, kx1;
  kl_ref_tap_span(r0, j->kh, j->dh, 0, j->ih, &ky0, &ky1);
  kl_ref_tap_span(c0, j->kw, j->dw, 0, j->iw, &kx0, &kx1);
  int64_t rows_in = ky1 - ky0, cols_in = kx1 - kx0;
  size_t len = (size_t)(count > 1 ? count * j->c : cn);
  float scale = 1.0f;
  if (!j->is_max)
    scale = 1.0f / (j->include_pad ? (float)taps(r0, j->kh, j->dh, j->ih, j->ph, j->pe_h, true) *
                                             (float)taps(c0, j->kw, j->dw, j->iw, j->pw, j->pe_w, true)
                                   : (float)(rows_in * cols_in));
  size_t n_taps = 0;
  bool acc = false;
  for (int64_t ky = ky0; ky < ky1; ky++) {
    int64_t iy = r0 + ky * j->dh;
    for (int64_t kx = kx0; kx < kx1; kx++) {
      int64_t ix = c0 + kx * j->dw;
      if (n_taps == NHWC_TAPS) { /* a large window: in parts, the last one scaled */
        j->f->pool->taps(j->is_max, acc, x, n_taps, 1.0f, yp, len);
        acc = true;
        n_taps = 0;
      }
      x[n_taps++] = j->x + ((n * j->ih + iy) * j->iw + ix) * j->c + ch;
    }
  }
  j->f->pool->taps(j->is_max, acc, x, n_taps, scale, yp, len);
}

/* Output pixels [ox, ox + count) of row oy, channels [ch, ch + cn), each window inside
 * the row (the columns), of at most NHWC_TAPS taps: the taps and the scale worked out
 * once for the run, the pointers moved on by a stride's pixels from one output to the
 * next (a 3x3 stride-2 max pool over 24 channels, ShuffleNet's, took 86 ns a pixel
 * through nhwc_pixels, the window found again for each). */
static void nhwc_run(const nhwc_job *j, int64_t n, int64_t oy, int64_t ox, int64_t count,
                     int64_t ch, int64_t cn) {
  const float *x[NHWC_TAPS];
  float *yp = j->y + ((n * j->oh + oy) * j->ow + ox) * j->c + ch;
  int64_t r0 = oy * j->sh - j->ph, c0 = ox * j->sw - j->pw, ky0, ky1;
  kl_ref_tap_span(r0, j->kh, j->dh, 0, j->ih, &ky0, &ky1);
  float scale = 1.0f;
  if (!j->is_max)
    scale = 1.0f / (j->include_pad ? (float)taps(r0, j->kh, j->dh, j->ih, j->ph, j->pe_h, true) *
                                             (float)taps(c0, j->kw, j->dw, j->iw, j->pw, j->pe_w, true)
                                   : (float)((ky1 - ky0) * j->kw));
  size_t n_taps = 0;
  for (int64_t ky = ky0; ky < ky1; ky++)
    for (int64_t kx = 0; kx < j->kw; kx++)
      x[n_taps++] = j->x + ((n * j->ih + r0 + ky * j->dh) * j->iw + c0 + kx * j->dw) * j->c + ch;
  int64_t step = j->sw * j->c;
  for (int64_t p = 0; p < count; p++, yp += j->c) {
    j->f->pool->taps(j->is_max, false, x, n_taps, scale, yp, (size_t)cn);
    for (size_t t = 0; t < n_taps; t++) x[t] += step;
  }
}

/* Task t: a run of output rows, and of those one chunk of the channels (all of them
 * unless the rows are too few to share out: a global pool has one per image). The
 * pixels whose window lies inside the row go as one run: at stride 1 over all the
 * channels as one call (nhwc_pixels; HGNetV2's 2x2 max pool over 16 channels took 20
 * ns a pixel one by one), else a call a pixel with the window found once (nhwc_run). */
static void nhwc_task(void *arg, int64_t t) {
  const nhwc_job *j = arg;
  int64_t ch = t % j->chunks * j->cb, cn = j->c - ch < j->cb ? j->c - ch : j->cb;
  t /= j->chunks;
  int64_t last = (t + 1) * j->per < j->rows ? (t + 1) * j->per : j->rows;
  int64_t lo, hi; /* the run: ox in [lo, hi) */
  kl_isa_inner_cols(j->iw, j->kw, j->dw, j->sw, j->pw, j->ow, &lo, &hi);
  bool one_call = j->sw == 1 && j->chunks == 1;
  if (hi - lo < 2 || (!one_call && j->kh * j->kw > NHWC_TAPS)) lo = hi = 0;
  for (int64_t r = t * j->per; r < last; r++) {
    int64_t n = r / j->oh, oy = r % j->oh;
    for (int64_t ox = 0; ox < lo; ox++) nhwc_pixels(j, n, oy, ox, 1, ch, cn);
    if (hi > lo && one_call) nhwc_pixels(j, n, oy, lo, hi - lo, ch, cn);
    else if (hi > lo) nhwc_run(j, n, oy, lo, hi - lo, ch, cn);
    for (int64_t ox = hi > lo ? hi : 0; ox < j->ow; ox++) nhwc_pixels(j, n, oy, ox, 1, ch, cn);
  }
}

/* A global pool of few images on several threads: each task reduces one part of one
 * image's positions into its own row of partial results (sums, or maxima), which the
 * caller then combines and scales. */
typedef struct gpart_job {
  const kl_isa_fns *f;
  const float *x;
  float *part;             /* [n][parts][c] */
  int64_t c, hw, parts, per;
  bool is_max;
} gpart_job;

static void gpart_task(void *arg, int64_t t) {
  const gpart_job *j = arg;
  int64_t n = t / j->parts, p0 = t % j->parts * j->per;
  int64_t p1 = p0 + j->per < j->hw ? p0 + j->per : j->hw;
  float *yp = j->part + t * j->c;
  const float *x[NHWC_TAPS];
  bool acc = false;
  for (int64_t p = p0; p < p1;) {
    size_t k = 0;
    for (; k < NHWC_TAPS && p < p1; k++, p++) x[k] = j->x + (n * j->hw + p) * j->c;
    j->f->pool->taps(j->is_max, acc, x, k, 1.0f, yp, (size_t)j->c);
    acc = true;
  }
}

/* Returns false (nothing done) where it does not pay or has no memory. Even a pool of
 * 7x7x440 pays at 2 threads: RegNetY-400MF's squeeze-and-excitation pools took 7 us on
 * one thread against 2 us in a process of one thread. */
#define GPART_MIN 8192
static bool global_parts(const kl_kernel_ctx *c, const nhwc_job *nj, int64_t images) {
  int threads = kl_isa_threads(c);
  int64_t hw = nj->ih * nj->iw;
  if (threads < 2 || images >= threads || hw < 16 || hw * nj->c < GPART_MIN) return false;
  int64_t want = (threads + images - 1) / images;
  if (want > 64) want = 64; /* the combining pass takes 64 rows */
  int64_t per = (hw + want - 1) / want;
  gpart_job j = {.f = nj->f, .x = nj->x, .c = nj->c, .hw = hw, .per = per,
                 .parts = (hw + per - 1) / per, .is_max = nj->is_max};
  float stack[4096];
  size_t need = (size_t)(images * j.parts * j.c);
  j.part = need <= sizeof stack / sizeof *stack ? stack : malloc(need * sizeof(float));
  if (!j.part) return false;
  kl_isa_parallel(c, images * j.parts, INT64_MAX, gpart_task, &j); /* past GPART_MIN */
  const float *rows[64];
  for (int64_t n = 0; n < images; n++) {
    for (int64_t p = 0; p < j.parts; p++) rows[p] = j.part + (n * j.parts + p) * j.c;
    nj->f->pool->taps(nj->is_max, false, rows, (size_t)j.parts,
                      nj->is_max ? 1.0f : 1.0f / (float)hw, nj->y + n * j.c, (size_t)j.c);
  }
  if (j.part != stack) free(j.part);
  return true;
}

int kl_run_pool_nhwc(const kl_kernel_ctx *c, const kl_isa_fns *f, const float *x, float *y) {
  const kl_tensor *xv = c->in[0], *yv = c->out[0];
  kl_op op = c->node->op;
  bool global = op == KL_OP_GlobalAveragePool || op == KL_OP_GlobalMaxPool ||
                op == KL_OP_KilnNhwcGlobalAveragePool || op == KL_OP_KilnNhwcGlobalMaxPool;
  nhwc_job j = {.f = f, .x = x, .y = y, .c = xv->dims[1],
                .is_max = op == KL_OP_MaxPool || op == KL_OP_GlobalMaxPool ||
                          op == KL_OP_KilnNhwcMaxPool || op == KL_OP_KilnNhwcGlobalMaxPool,
                .include_pad = kl_attr_int(c->node, "count_include_pad", 0) != 0};
  if (xv->rank < 3 || xv->rank > 4) return KILN_ERR_UNSUPPORTED;
  bool two = xv->rank == 4;
  j.ih = two ? xv->dims[2] : 1, j.iw = xv->dims[xv->rank - 1];
  j.oh = two ? yv->dims[2] : 1, j.ow = yv->dims[yv->rank - 1];
  if (global) {
    j.kh = j.ih, j.kw = j.iw, j.sh = j.sw = j.dh = j.dw = 1;
  } else {
    kl_ref_window g;
    kiln_status st = kl_ref_window_init(c, NULL, &g);
    if (st != KILN_OK) return st;
    j.kh = g.kernel[1], j.kw = g.kernel[2], j.sh = g.stride[1], j.sw = g.stride[2];
    j.dh = g.dilation[1], j.dw = g.dilation[2], j.ph = g.pad_begin[1], j.pw = g.pad_begin[2];
    j.pe_h = g.pad_end[1], j.pe_w = g.pad_end[2];
  }
  j.rows = xv->dims[0] * j.oh;
  if (j.rows * j.ow * j.c == 0) return KILN_OK;
  /* At 2 threads EfficientNet-B0's 17 global pools took 0.35 ms on one thread, against
   * 0.18 with one thread in all (half of each input sits in the other core's cache):
   * shared out by positions where the images are fewer than the threads. */
  if (global && global_parts(c, &j, xv->dims[0]))
    return KILN_OK;
  /* taps inside X per output: at most min(kernel, input) per dim */
  int64_t taps_in = (j.kh < j.ih ? j.kh : j.ih) * (j.kw < j.iw ? j.kw : j.iw);
  int64_t work = j.rows * j.ow * taps_in * j.c;
  int64_t tasks = kl_isa_split(j.rows, 16384 / (j.ow * taps_in * j.c + 1) + 1, &j.per);
  /* Fewer row runs than threads (a global pool: one an image): the channels are shared
   * out too, in chunks of whole cache lines of at least 64 channels. At 2 threads
   * EfficientNet-B0's 17 global pools took 0.36 ms on one thread against 0.19 with one
   * thread in all (half of each input then sits in the other core's cache). */
  int threads = kl_isa_threads(c);
  j.cb = j.c, j.chunks = 1;
  if (threads > 1 && tasks < threads && j.c >= 128) {
    int64_t want = (threads + tasks - 1) / tasks, cb = (j.c + want - 1) / want;
    cb = (cb + 15) / 16 * 16;
    if (cb < 64) cb = 64;
    j.cb = cb, j.chunks = (j.c + cb - 1) / cb;
  }
  kl_isa_parallel(c, tasks * j.chunks, work, nhwc_task, &j);
  return KILN_OK;
}
