/* kiln's own int8 kernels for two cases of dnnl_qconv.c's nodes (it takes them instead
 * of oneDNN's at level avx2): a depthwise QLinearConv, and QLinearGemm / QLinearMatMul of
 * a few rows (below).
 *
 * Depthwise QLinearConv on the level's qdw primitive (isa_fns.h), over activations the
 * session holds channels-last:
 *
 *   X [N, H, W, C] uint8 (zero point zx), W [C, 1, KH, KW] int8 (zero points 0),
 *   B [C] int32 (optional) -> Y [N, OH, OW, C] uint8 or int8
 *   acc = B + sum (X - zx) W over the window (padding: X = zx), exact in int32
 *   Y = clamp(rint((float)acc * (sx * sw[c] / sy)), lo - zy, hi - zy) + zy
 *
 * the multiplier rounded to float32 step by step as oneDNN's output scales are, the
 * product rounded as onnxruntime's MLAS rounds it. The weights are packed once per plan;
 * a task is one output row: the pixels whose window lies within X's columns go to the
 * primitive in one call, a pointer per tap for the first and a step of the stride for
 * the next (a window row above or below X reads the plan's zx codes, long enough for
 * the steps); the others one by one (their taps in the padding at the same zx codes).
 */
#include "backends/cpu/isa/run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct kl_qdw_plan {
  kl_qdw d;
  kl_qdw_geom geo;
  int64_t n, h, w, oh, ow;
  int64_t inner_lo, inner_hi; /* output columns whose window lies within X's */
  uint8_t *pad; /* ((OW - 1) * stride + 1) * c codes of zx */
  int16_t *w16;
  int32_t *bias;
  float *scale;
};

static int32_t zero_point(const kl_tensor *z) {
  return z->dtype == KL_U8 ? ((const uint8_t *)z->data)[0] : ((const int8_t *)z->data)[0];
}

bool kl_qdw_fits(const kl_kernel_ctx *c, const kl_qdw_geom *geo) {
  const kl_tensor *x = c->in[0], *w = c->in[3], *y = c->out[0];
  int64_t ch = x->rank == 4 ? x->dims[1] : 0;
  return x->rank == 4 && x->dtype == KL_U8 && (y->dtype == KL_U8 || y->dtype == KL_I8) &&
         w->rank == 4 && w->dims[0] == ch && w->dims[1] == 1 && y->dims[1] == ch && ch > 0 &&
         kl_attr_int(c->node, "group", 1) == ch && w->dims[2] * w->dims[3] <= KL_QDW_MAX_TAPS &&
         geo->sh > 0 && geo->sw > 0 && geo->dh > 0 && geo->dw > 0;
}

void kl_qdw_plan_free(kl_qdw_plan *p) {
  if (!p) return;
  free(p->pad);
  free(p->w16);
  free(p->bias);
  free(p->scale);
  free(p);
}

/* The weights as tap pairs in the primitive's slots, the bias less zx times each
 * channel's weight sum, the multipliers (isa_fns.h, kl_qdw). */
static void pack(kl_qdw_plan *p, const kl_kernel_ctx *c, int32_t zx) {
  const kl_tensor *w = c->in[3], *ws = c->in[4], *b = c->n_in > 8 ? c->in[8] : NULL;
  size_t ch = p->d.c, k = p->d.k;
  float sx = *(const float *)c->in[1]->data, sy = *(const float *)c->in[6]->data;
  bool per_channel = kl_tensor_numel(ws) > 1;
  for (size_t i = 0; i < ch; i++) {
    size_t s = i / 16 * 16 + KL_QDW_SLOT(i % 16);
    const int8_t *wi = (const int8_t *)w->data + i * k;
    int32_t sum = 0;
    for (size_t t = 0; t < k; t++) {
      p->w16[((t / 2) * p->d.c16 + s) * 2 + t % 2] = wi[t];
      sum += wi[t];
    }
    p->bias[s] = (b ? ((const int32_t *)b->data)[i] : 0) - zx * sum;
    float prod = sx * ((const float *)ws->data)[per_channel ? i : 0];
    p->scale[s] = prod / sy;
  }
}

kiln_status kl_qdw_plan_create(const kl_kernel_ctx *c, const kl_qdw_geom *geo,
                               kl_qdw_plan **out) {
  const kl_tensor *x = c->in[0], *w = c->in[3], *y = c->out[0];
  kl_qdw_plan *p = calloc(1, sizeof *p);
  *out = p;
  if (!p) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a depthwise plan");
  size_t ch = (size_t)x->dims[1], c16 = (ch + 15) / 16 * 16;
  size_t k = (size_t)(w->dims[2] * w->dims[3]), pairs = (k + 1) / 2;
  p->geo = *geo;
  p->n = x->dims[0], p->h = x->dims[2], p->w = x->dims[3];
  p->oh = y->dims[2], p->ow = y->dims[3];
  kl_isa_inner_cols(p->w, geo->kw, geo->dw, geo->sw, geo->pl, p->ow, &p->inner_lo, &p->inner_hi);
  size_t pad_bytes = ((size_t)(p->ow > 0 ? p->ow - 1 : 0) * (size_t)geo->sw + 1) * ch;
  p->pad = malloc(pad_bytes);
  p->w16 = calloc(pairs * c16 * 2, sizeof *p->w16);
  p->bias = calloc(c16, sizeof *p->bias);
  p->scale = calloc(c16, sizeof *p->scale);
  if (!p->pad || !p->w16 || !p->bias || !p->scale)
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a depthwise plan of "
                   "%zu channels", ch);
  int32_t zx = zero_point(c->in[2]), zy = zero_point(c->in[7]);
  memset(p->pad, zx, pad_bytes);
  bool s8 = y->dtype == KL_I8;
  p->d = (kl_qdw){ch, c16, k, p->w16, p->bias, p->scale, zy, s8 ? -128 : 0, s8 ? 127 : 255};
  pack(p, c, zx);
  return KILN_OK;
}

typedef struct qdw_job {
  const kl_qdw_plan *p;
  const kl_quant_fns *fns;
  const uint8_t *x;
  uint8_t *y;
} qdw_job;

/* The taps of output pixel (oy, ox) of image n: X's pixels, or zx codes. */
static void window(const kl_qdw_plan *p, const uint8_t *x, int64_t n, int64_t oy, int64_t ox,
                   const uint8_t **taps) {
  const kl_qdw_geom *g = &p->geo;
  int64_t ch = (int64_t)p->d.c;
  for (int64_t ky = 0; ky < g->kh; ky++) {
    int64_t iy = oy * g->sh - g->pt + ky * g->dh;
    for (int64_t kx = 0; kx < g->kw; kx++) {
      int64_t ix = ox * g->sw - g->pl + kx * g->dw;
      bool in = iy >= 0 && iy < p->h && ix >= 0 && ix < p->w;
      *taps++ = in ? x + ((n * p->h + iy) * p->w + ix) * ch : p->pad;
    }
  }
}

/* Task t: output row t % OH of image t / OH. */
static void qdw_task(void *arg, int64_t t) {
  const qdw_job *j = arg;
  const kl_qdw_plan *p = j->p;
  int64_t n = t / p->oh, oy = t % p->oh, ch = (int64_t)p->d.c;
  const uint8_t *taps[KL_QDW_MAX_TAPS];
  uint8_t *yrow = j->y + (n * p->oh + oy) * p->ow * ch;
  for (int64_t ox = 0; ox < p->ow; ox++) {
    bool inner = ox == p->inner_lo && p->inner_lo < p->inner_hi;
    window(p, j->x, n, oy, ox, taps);
    size_t count = inner ? (size_t)(p->inner_hi - p->inner_lo) : 1;
    j->fns->qdw(&p->d, taps, (size_t)(p->geo.sw * ch), count, yrow + ox * ch, (size_t)ch);
    if (inner) ox = p->inner_hi - 1;
  }
}

int kl_run_qdw(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_qdw_plan *p,
               const uint8_t *x, uint8_t *y) {
  qdw_job j = {p, f->quant, x, y};
  int64_t rows = p->n * p->oh;
  if (rows == 0 || p->ow == 0) return KILN_OK;
  kl_isa_parallel(c, rows, rows * p->ow * (int64_t)(p->d.c * p->d.k), qdw_task, &j);
  return KILN_OK;
}

/* ---- QLinearGemm and QLinearMatMul of a few rows (a classifier's) ----
 *
 *   A [rows, K] uint8 (zero point za), B [K, N] int8 (constant, zero points 0, |B| <= 64),
 *   bias [N] int32 (optional) -> Y [rows, N] uint8 or int8
 *   acc = bias + sum (A - za) B = (bias - za * colsum(B)) + sum A B
 *   Y = clamp(rint((float)acc * (sa * sb[j] / sy)), lo - zy, hi - zy) + zy
 * (QLinearGemm's Relu: the lower bound max(lo - zy, 0), the product's max with 0).
 * Each row is one call of the level's qgemv over B packed once. */
struct kl_qgemv_plan {
  size_t k, n, rows;
  int8_t *wp;
  int32_t *bias, *acc;
  float *scale;
  uint8_t *a; /* a row, zeros past k up to a multiple of 4 */
  int32_t zy;
  float lo, hi;
};

/* Whether every output's int32 arithmetic is exact (run.h): its bias - za * sum(w), and
 * the sum of the products (at most 255 sum |w| in size) added to it. A file's bias near
 * INT32_MAX, or a K of a few hundred thousand, overflowed them (undefined behaviour here,
 * wrapped sums in oneDNN; the reference product takes such a node). */
bool kl_qsums_fit(const int8_t *w, int64_t outs, int64_t per, int64_t os, int64_t is,
                  const int32_t *bias, int64_t za) {
  for (int64_t o = 0; o < outs; o++) {
    int64_t sum = 0, mag = 0;
    for (int64_t i = 0; i < per; i++) {
      sum += w[o * os + i * is];
      mag += abs(w[o * os + i * is]);
    }
    int64_t v = (bias ? bias[o] : 0) - za * sum;
    if ((v < 0 ? -v : v) + 255 * mag > INT32_MAX) return false;
  }
  return true;
}

bool kl_qgemv_fits(const kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[3], *y = c->out[0];
  if (a->dtype != KL_U8 || b->rank != 2 || (y->dtype != KL_U8 && y->dtype != KL_I8)) return false;
  int64_t k = b->dims[0], rows = k > 0 ? kl_tensor_numel(a) / k : 0;
  if (rows < 1 || rows > KL_QGEMV_MAX_ROWS || b->dims[1] < 1) return false;
  int64_t nb = kl_tensor_numel(b);
  for (int64_t i = 0; i < nb; i++) /* what vpmaddubsw multiplies exactly */
    if (abs(((const int8_t *)b->data)[i]) > 64) return false;
  const kl_tensor *bias = c->n_in > 8 ? c->in[8] : NULL;
  return kl_qsums_fit(b->data, b->dims[1], k, 1, b->dims[1], bias ? bias->data : NULL,
                      zero_point(c->in[2]));
}

void kl_qgemv_plan_free(kl_qgemv_plan *p) {
  if (!p) return;
  free(p->wp);
  free(p->bias);
  free(p->acc);
  free(p->scale);
  free(p->a);
  free(p);
}

kiln_status kl_qgemv_plan_create(const kl_kernel_ctx *c, bool relu, kl_qgemv_plan **out) {
  const kl_tensor *a = c->in[0], *b = c->in[3], *sb = c->in[4], *y = c->out[0];
  const kl_tensor *bias = c->n_in > 8 ? c->in[8] : NULL;
  kl_qgemv_plan *p = calloc(1, sizeof *p);
  *out = p;
  if (!p) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for an int8 product");
  size_t k = (size_t)b->dims[0], n = (size_t)b->dims[1], groups = (k + 3) / 4;
  size_t panels = (n + KL_QGEMV_PANEL - 1) / KL_QGEMV_PANEL;
  p->k = k, p->n = n, p->rows = (size_t)(kl_tensor_numel(a) / b->dims[0]);
  p->wp = calloc(panels * groups * 32, 1);
  p->bias = malloc(n * sizeof *p->bias);
  p->acc = malloc(n * sizeof *p->acc);
  p->scale = malloc(n * sizeof *p->scale);
  p->a = calloc(groups * 4, 1);
  if (!p->wp || !p->bias || !p->acc || !p->scale || !p->a)
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for an int8 product of "
                   "%zu x %zu weights", k, n);
  const int8_t *w = b->data;
  int32_t za = zero_point(c->in[2]);
  float sa = *(const float *)c->in[1]->data, sy = *(const float *)c->in[6]->data;
  bool per_col = kl_tensor_numel(sb) > 1;
  for (size_t j = 0; j < n; j++) {
    int32_t sum = 0;
    for (size_t i = 0; i < k; i++) {
      int8_t v = w[i * n + j];
      p->wp[kl_qgemv_at(i, j, groups)] = v;
      sum += v;
    }
    p->bias[j] = (int32_t)((bias ? ((const int32_t *)bias->data)[j] : 0) - (int64_t)za * sum);
    float prod = sa * ((const float *)sb->data)[per_col ? j : 0];
    p->scale[j] = prod / sy;
  }
  bool s8 = y->dtype == KL_I8;
  p->zy = zero_point(c->in[7]);
  p->lo = (float)((s8 ? -128 : 0) - p->zy), p->hi = (float)((s8 ? 127 : 255) - p->zy);
  if (relu && p->lo < 0.0f) p->lo = 0.0f;
  return KILN_OK;
}

int kl_run_qgemv(const kl_kernel_ctx *c, const kl_isa_fns *f, kl_qgemv_plan *p) {
  const uint8_t *a = c->in[0]->data;
  uint8_t *y = c->out[0]->data;
  for (size_t r = 0; r < p->rows; r++) {
    memcpy(p->a, a + r * p->k, p->k);
    f->quant->qgemv(p->a, p->k, p->wp, p->n, p->acc);
    for (size_t j = 0; j < p->n; j++) {
      float q = (float)(p->acc[j] + p->bias[j]) * p->scale[j];
      q = q >= p->lo ? q : p->lo; /* NaN (a NaN or infinite scale) too: no int of it */
      q = q <= p->hi ? q : p->hi;
      y[r * p->n + j] = (uint8_t)((int32_t)rintf(q) + p->zy);
    }
  }
  return KILN_OK;
}
