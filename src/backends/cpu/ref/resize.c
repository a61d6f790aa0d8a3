/* Reference Resize: nearest, n-linear and n-cubic sampling, with every coordinate
 * transformation of opsets 11 to 19, antialiasing, exclude_outside and
 * tf_crop_and_resize's extrapolation.
 *
 * Resampling is separable, so each output dim gets a table of taps: for output index o,
 * n input indexes and their weights. An output element is the sum, over every
 * combination of one tap per dim, of the product of the weights times the input element
 * there. The weights are ONNX's reference ones: for a source coordinate x with
 * fraction r (taken as 1 when x is whole, so that the window leans left), tap j of an
 * n-tap window sits at floor-ish(x) + 1 - n/2 + j and weighs K((1 - n/2 + j - r) * s)
 * for the linear or cubic kernel K, s = min(scale, 1) with antialias and 1 without;
 * antialiased windows widen to cover the stretched kernel and are normalized. Indexes
 * outside the input read the edge. ResizeGrad, the gradient, sends each output
 * element's gradient back along the same taps.
 */
#include "backends/cpu/ref/ref.h"
#include "backends/cpu/ref/resize.h"

#include <math.h>
#include <stdlib.h>

typedef kl_resize_taps taps;

/* The source coordinate of output index o along dim d of `in` elements. */
static double source_coord(const kl_resize_attrs *a, const kl_resize_plan *p, int d,
                           int64_t in, int64_t o) {
  double x = (double)o, s = p->scale[d], len = (double)in;
  double width = s * len; /* the output length the scale implies, maybe fractional */
  double r0 = p->roi_start[d], r1 = p->roi_end[d];
  switch (a->coord) {
  case KL_COORD_HALF_PIXEL: return (x + 0.5) / s - 0.5;
  case KL_COORD_HALF_PIXEL_SYMMETRIC: {
    double offset = len / 2 * (1 - (double)p->out[d] / width);
    return offset + (x + 0.5) / s - 0.5;
  }
  case KL_COORD_PYTORCH_HALF_PIXEL: return width == 1 ? -0.5 : (x + 0.5) / s - 0.5;
  case KL_COORD_ALIGN_CORNERS: return width == 1 ? 0 : x * (len - 1) / (width - 1);
  case KL_COORD_ASYMMETRIC: return x / s;
  case KL_COORD_TF_CROP_AND_RESIZE:
    return (width == 1 ? (r1 - r0) * (len - 1) / 2 : x * (r1 - r0) * (len - 1) / (width - 1)) +
           r0 * (len - 1);
  case KL_COORD_TF_HALF_PIXEL_FOR_NN: return (x + 0.5) / s;
  }
  return x;
}

/* Keys' cubic convolution kernel with parameter A. */
static double cubic(double x, double A) {
  x = fabs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

/* The kernel's stretch: min(scale, 1) when antialiasing, else 1. */
static double stretch(const kl_resize_attrs *a, double scale) {
  return a->antialias && scale < 1 ? scale : 1;
}

/* Taps per output index along a dim of `in` elements resized by `scale`. */
static kiln_status tap_count(const kl_resize_attrs *a, double scale, int64_t in, int *n,
                             kl_err *e) {
  if (a->mode == KL_RESIZE_NEAREST) {
    *n = 1;
    return KILN_OK;
  }
  double reach = a->mode == KL_RESIZE_LINEAR ? 1 : 2, s = stretch(a, scale);
  double count = 2 - 2 * (floor(-reach / s) + 1);
  if (count > 4.0 * (double)in + 8 || count > 1e6)
    return kl_fail(e, KILN_ERR_LIMIT, "scale %g needs %g input elements per output element",
                   scale, count);
  *n = (int)count;
  return KILN_OK;
}

static int64_t clamp_index(int64_t i, int64_t in) { return i < 0 ? 0 : i >= in ? in - 1 : i; }

/* The one input index nearest_mode picks for coordinate x. */
static int64_t nearest_index(const kl_resize_attrs *a, double x, double scale, int64_t in) {
  double f = floor(x), r = x - f;
  bool up = false;
  switch (a->nearest) {
  case KL_NEAREST_ROUND_PREFER_FLOOR: up = r > 0.5; break;
  case KL_NEAREST_ROUND_PREFER_CEIL: up = r >= 0.5; break;
  case KL_NEAREST_FLOOR: up = false; break;
  case KL_NEAREST_CEIL: up = r > 0; break;
  case KL_NEAREST_SIMPLE: up = scale < 1 && r > 0; break;
  }
  return clamp_index((int64_t)f + up, in);
}

/* The n taps of one output index at source coordinate x. */
static void window(const kl_resize_attrs *a, double x, double scale, int64_t in, int n,
                   int64_t *idx, double *w) {
  double f = floor(x), r = x == f ? 1 : x - f, s = stretch(a, scale), sum = 0;
  int64_t base = (int64_t)f - (x == f) + 1 - n / 2;
  for (int j = 0; j < n; j++) {
    double t = (1 - n / 2 + j - r) * s;
    w[j] = a->mode == KL_RESIZE_LINEAR ? fmax(0, 1 - fabs(t)) : cubic(t, a->cubic_a);
    idx[j] = base + j;
    if (a->exclude_outside && (idx[j] < 0 || idx[j] >= in)) w[j] = 0;
    sum += w[j];
  }
  bool normalize = (a->antialias && s < 1) || a->exclude_outside;
  for (int j = 0; j < n; j++) {
    if (normalize && sum != 0) w[j] /= sum;
    idx[j] = clamp_index(idx[j], in);
  }
}

/* Fills the taps of dim d (t->idx, t->w, t->outside already allocated). */
static void dim_taps(const kl_resize_attrs *a, const kl_resize_plan *p, int d, int64_t in,
                     taps *t) {
  for (int64_t o = 0; o < p->out[d]; o++) {
    int64_t *idx = t->idx + o * t->n;
    double *w = t->w + o * t->n;
    t->outside[o] = false;
    if (p->identity[d]) {
      *idx = o, *w = 1;
      continue;
    }
    double x = source_coord(a, p, d, in, o);
    t->outside[o] = a->coord == KL_COORD_TF_CROP_AND_RESIZE && (x < 0 || x > (double)in - 1);
    /* far outside, every tap reads the edge anyway; keep x where int64 can follow it */
    x = fmin(fmax(x, -2.0 * t->n - 2), (double)in + 2.0 * t->n + 2);
    if (a->mode == KL_RESIZE_NEAREST) *idx = nearest_index(a, x, p->scale[d], in), *w = 1;
    else window(a, x, p->scale[d], in, t->n, idx, w);
  }
}

/* ---- the sum over taps ---- */

/* Stores v into an integer Y as ONNX's reference does: rounded half to even, then
 * saturated to the type's range. */
static void store_sample(void *y, kl_dtype t, int64_t i, double v) {
  double lo, hi;
  switch (t) {
  case KL_I8: lo = -128, hi = 127; break;
  case KL_U8: lo = 0, hi = 255; break;
  case KL_I16: lo = -32768, hi = 32767; break;
  case KL_U16: lo = 0, hi = 65535; break;
  case KL_I32: lo = -2147483648.0, hi = 2147483647.0; break;
  case KL_U32: lo = 0, hi = 4294967295.0; break;
  default: kl_ref_store(y, t, i, v); return;
  }
  v = isnan(v) ? 0 : nearbyint(v);
  kl_store_f64(y, t, (size_t)i, v < lo ? lo : v > hi ? hi : v);
}

typedef struct sampler {
  const kl_tensor *x;
  int rank;
  int64_t xs[KL_MAX_RANK];
  const taps *t;
} sampler;

/* Sum over every combination of one tap per dim for output index o. */
static double sample(const sampler *s, const int64_t *o) {
  int j[KL_MAX_RANK] = {0};
  double acc = 0;
  for (;;) {
    double w = 1;
    int64_t off = 0;
    for (int d = 0; d < s->rank; d++) {
      int64_t k = o[d] * s->t[d].n + j[d];
      w *= s->t[d].w[k];
      off += s->t[d].idx[k] * s->xs[d];
    }
    if (w != 0) acc += w * kl_ref_load(s->x->data, s->x->dtype, off);
    int d = s->rank - 1;
    while (d >= 0 && ++j[d] == s->t[d].n) j[d--] = 0;
    if (d < 0) return acc;
  }
}

static void resample(const kl_resize_attrs *a, const sampler *s, kl_tensor *y) {
  size_t es = kl_dtype_size(y->dtype);
  int64_t n = kl_tensor_numel(y);
  kl_ref_iter it;
  kl_ref_iter_init(&it, y->rank, y->dims);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    bool outside = false;
    int64_t off = 0;
    for (int d = 0; d < y->rank; d++) {
      outside = outside || s->t[d].outside[it.idx[d]];
      off += s->t[d].idx[it.idx[d] * s->t[d].n] * s->xs[d];
    }
    if (outside) store_sample(y->data, y->dtype, i, a->extrapolation);
    else if (a->mode == KL_RESIZE_NEAREST) /* a copy: exact for every dtype */
      memcpy((char *)y->data + (size_t)i * es, (const char *)s->x->data + (size_t)off * es, es);
    else store_sample(y->data, y->dtype, i, sample(s, it.idx));
  }
}

/* ---- the kernel ---- */

/* Values of an optional 1-D input: *n -1 when absent or empty. */
static void read_request_list(const kl_kernel_ctx *c, int i, double *v, int64_t *iv, int *n) {
  const kl_tensor *t = i < c->n_in ? c->in[i] : NULL;
  int64_t count = t ? kl_tensor_numel(t) : 0;
  *n = count > 0 ? (int)count : -1;
  for (int64_t k = 0; k < count; k++) {
    if (iv) iv[k] = kl_load_i64(t->data, t->dtype, (size_t)k);
    else v[k] = kl_load_f64(t->data, t->dtype, (size_t)k);
  }
}

/* One block holding every dim's taps. */
static kiln_status alloc_taps(const kl_resize_attrs *a, const kl_resize_plan *p,
                              const kl_tensor *x, taps *t, void **block, kl_err *e) {
  size_t total = 0, outs = 0, entries;
  for (int d = 0; d < x->rank; d++) {
    t[d].n = 1;
    kiln_status st = p->identity[d] ? KILN_OK : tap_count(a, p->scale[d], x->dims[d], &t[d].n, e);
    if (st != KILN_OK) return st;
    if (kl_mul_overflow_size((size_t)p->out[d], (size_t)t[d].n, &entries) ||
        kl_add_overflow_size(total, entries, &total) ||
        kl_add_overflow_size(outs, (size_t)p->out[d], &outs))
      return kl_fail(e, KILN_ERR_LIMIT, "the resampling tables overflow");
  }
  size_t bytes;
  if (kl_mul_overflow_size(total, sizeof(int64_t) + sizeof(double), &bytes) ||
      kl_add_overflow_size(bytes, outs + 1, &bytes))
    return kl_fail(e, KILN_ERR_LIMIT, "the resampling tables overflow");
  char *m = *block = malloc(bytes);
  if (!m) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes", bytes);
  int64_t *idx = (int64_t *)m;
  double *w = (double *)(m + total * sizeof(int64_t));
  bool *outside = (bool *)(m + total * (sizeof(int64_t) + sizeof(double)));
  for (int d = 0; d < x->rank; d++) {
    t[d].idx = idx, t[d].w = w, t[d].outside = outside;
    idx += p->out[d] * t[d].n, w += p->out[d] * t[d].n, outside += p->out[d];
  }
  return KILN_OK;
}

kiln_status kl_ref_resize_taps(kl_kernel_ctx *c, const kl_tensor *x, int first,
                               kl_resize_attrs *a, taps *t, void **block) {
  kl_resize_request r;
  kl_resize_plan p;
  *block = NULL;
  read_request_list(c, first, r.roi, NULL, &r.n_roi);
  read_request_list(c, first + 1, r.scales, NULL, &r.n_scales);
  read_request_list(c, first + 2, NULL, r.sizes, &r.n_sizes);
  kiln_status st = kl_resize_attrs_read(c->node, x->rank, a, c->e);
  if (st == KILN_OK) st = kl_resize_plan_make(a, x->rank, x->dims, &r, &p, c->e);
  if (st == KILN_OK) st = alloc_taps(a, &p, x, t, block, c->e);
  if (st == KILN_OK)
    for (int d = 0; d < x->rank; d++) dim_taps(a, &p, d, x->dims[d], &t[d]);
  return st;
}

static void strides_of(const kl_tensor *x, int64_t *xs) {
  int64_t stride = 1;
  for (int d = x->rank - 1; d >= 0; d--) xs[d] = stride, stride *= x->dims[d];
}

int kl_ref_resize(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  kl_resize_attrs a;
  taps t[KL_MAX_RANK];
  void *block;
  kiln_status st = kl_ref_resize_taps(c, x, 1, &a, t, &block);
  if (st == KILN_OK && kl_tensor_numel(y) > 0) {
    sampler s = {x, x->rank, {0}, t};
    strides_of(x, s.xs);
    resample(&a, &s, y);
  }
  free(block);
  return st;
}

/* ResizeGrad (dY, XLike, roi?, scales?, sizes?) -> dX: each dY element goes back to the
 * X elements its Resize output read, times their weights (a sample outside the input
 * under tf_crop_and_resize read none: it was the extrapolation value). Sums in double,
 * one dX element at a time per dY element, in dY's order. */
int kl_ref_resize_grad(kl_kernel_ctx *c) {
  const kl_tensor *dy = c->in[0], *x = c->in[1];
  kl_tensor *dx = c->out[0];
  int64_t nx = kl_tensor_numel(dx), ny = kl_tensor_numel(dy);
  double *acc = calloc((size_t)(nx > 0 ? nx : 1), sizeof(double));
  if (!acc) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for %lld sums",
                           (long long)nx);
  kl_resize_attrs a;
  taps t[KL_MAX_RANK];
  void *block;
  kiln_status st = kl_ref_resize_taps(c, x, 2, &a, t, &block);
  if (st == KILN_OK && ny > 0 && nx > 0) {
    int64_t xs[KL_MAX_RANK];
    strides_of(x, xs);
    kl_ref_iter it;
    kl_ref_iter_init(&it, dy->rank, dy->dims);
    for (int64_t i = 0; i < ny; i++, kl_ref_iter_next(&it)) {
      bool outside = false;
      for (int d = 0; d < dy->rank; d++) outside = outside || t[d].outside[it.idx[d]];
      if (outside) continue;
      double g = kl_ref_load(dy->data, dy->dtype, i);
      int j[KL_MAX_RANK] = {0};
      for (;;) { /* every combination of one tap per dim, as sample() reads them */
        double w = 1;
        int64_t off = 0;
        for (int d = 0; d < x->rank; d++) {
          int64_t k = it.idx[d] * t[d].n + j[d];
          w *= t[d].w[k];
          off += t[d].idx[k] * xs[d];
        }
        if (w != 0) acc[off] += w * g;
        int d = x->rank - 1;
        while (d >= 0 && ++j[d] == t[d].n) j[d--] = 0;
        if (d < 0) break;
      }
    }
  }
  for (int64_t k = 0; st == KILN_OK && k < nx; k++) kl_ref_store(dx->data, dx->dtype, k, acc[k]);
  free(block);
  free(acc);
  return st;
}
