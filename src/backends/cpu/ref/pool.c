/* Reference pooling: MaxPool (with its optional Indices output), AveragePool and
 * GlobalAveragePool.
 *
 * Shapes: X [N, C, D, H, W] -> Y [N, C, oD, oH, oW] (1-D and 2-D run as 3-D, see
 * ref.h); Indices like Y, int64. Window taps are o * stride - pad + k * dilation.
 * MaxPool: padding never wins and NaN is skipped; the first maximum in row-major tap
 * order is kept. Indices are flat indexes into X: (n * C + c) * D*H*W plus the spatial
 * offset, row-major (storage_order 0) or column-major (storage_order 1).
 * AveragePool: the sum over taps inside X, divided by the taps inside X, or with
 * count_include_pad by the taps inside the padded input (taps beyond the end padding,
 * which ceil_mode can add, never count).
 * GlobalAveragePool: Y [N, C, 1, ...] = the mean over each channel's spatial dims.
 */
#include "backends/cpu/ref/ref.h"

#include <math.h>

typedef struct pool_args {
  const kl_tensor *x;
  kl_ref_window g;
  int n_spatial;
  bool col_major, include_pad;
} pool_args;

typedef struct window_result {
  double value;
  int64_t index; /* spatial offset of the maximum, -1 if none */
  int64_t taps_in;
  double taps_padded; /* up to 2^63 per dim */
} window_result;

/* Spatial offset of (i0, i1, i2) in the index layout MaxPool's Indices use. Only the
 * last n_spatial of the three dims are real (the others have size 1). */
static int64_t spatial_index(const pool_args *a, const int64_t *p) {
  if (!a->col_major) return kl_ref_at3(a->g.in, p[0], p[1], p[2]);
  int64_t idx = 0, scale = 1;
  for (int i = 3 - a->n_spatial; i < 3; i++) {
    idx += p[i] * scale;
    scale *= a->g.in[i];
  }
  return idx;
}

/* Where tap k of output position o lands along dim i (negative in the begin pad). */
static int64_t tap_at(const kl_ref_window *g, int i, int64_t o, int64_t k) {
  return o * g->stride[i] - g->pad_begin[i] + k * g->dilation[i];
}

/* A tap inside X (pool_window visits no other). */
static void visit_tap(const pool_args *a, int64_t plane, const int64_t *p, bool is_max,
                      window_result *r) {
  r->taps_in++;
  int64_t at = plane + kl_ref_at3(a->g.in, p[0], p[1], p[2]);
  double v = kl_ref_load(a->x->data, a->x->dtype, at);
  if (!is_max) {
    r->value += v;
  } else if (v > r->value || (r->index < 0 && v == r->value)) {
    r->value = v;
    r->index = spatial_index(a, p);
  }
}

/* The taps k of output position o along dim i that land in [lo, hi): [*k0, *k1). */
static void tap_range(const kl_ref_window *g, int i, int64_t o, int64_t lo, int64_t hi,
                      int64_t *k0, int64_t *k1) {
  kl_ref_tap_span(tap_at(g, i, o, 0), g->kernel[i], g->dilation[i], lo, hi, k0, k1);
}

/* Only the taps inside X are visited, so that the work is bounded by X whatever the
 * window and pads (a kernel of 2^40 over padding took forever); the taps inside the
 * padded input are counted per dim. */
static window_result pool_window(const pool_args *a, int64_t plane, const int64_t *o,
                                 bool is_max) {
  const kl_ref_window *g = &a->g;
  window_result r = {is_max ? -INFINITY : 0.0, -1, 0, 1};
  int64_t k[3], p[3], from[3], to[3];
  for (int i = 0; i < 3; i++) {
    int64_t pk0, pk1;
    tap_range(g, i, o[i], -g->pad_begin[i], g->in[i] + g->pad_end[i], &pk0, &pk1);
    r.taps_padded *= (double)(pk1 - pk0);
    tap_range(g, i, o[i], 0, g->in[i], &from[i], &to[i]);
  }
  for (k[0] = from[0]; k[0] < to[0]; k[0]++)
    for (k[1] = from[1]; k[1] < to[1]; k[1]++)
      for (k[2] = from[2]; k[2] < to[2]; k[2]++) {
        for (int i = 0; i < 3; i++) p[i] = tap_at(g, i, o[i], k[i]);
        visit_tap(a, plane, p, is_max, &r);
      }
  return r;
}

/* The value a window with no number in it gets: below every value of the dtype. */
static double lowest(kl_dtype t) {
  return t == KL_I8 ? INT8_MIN : t == KL_U8 ? 0 : -INFINITY;
}

static void pool_output(const pool_args *a, kl_kernel_ctx *c, int64_t plane, int64_t i,
                        const int64_t *o) {
  bool is_max = c->node->op == KL_OP_MaxPool;
  kl_tensor *y = c->out[0];
  int64_t xplane = plane * kl_ref_span(a->g.in, 0, 3);
  window_result r = pool_window(a, xplane, o, is_max);
  if (is_max) {
    kl_ref_store(y->data, y->dtype, i, r.index >= 0 ? r.value : lowest(y->dtype));
    kl_tensor *idx = c->n_out > 1 ? c->out[1] : NULL;
    if (idx) ((int64_t *)idx->data)[i] = r.index >= 0 ? xplane + r.index : -1;
    return;
  }
  double count = a->include_pad ? r.taps_padded : (double)r.taps_in;
  kl_ref_store(y->data, y->dtype, i, r.value / count);
}

/* QLinearAveragePool (ops.def): the windows of AveragePool over the codes; the sum of
 * the codes inside X less x_zero_point for each (padding is x_zero_point: a real 0). */
int kl_ref_qlinear_average_pool(kl_kernel_ctx *c) {
  pool_args a = {.x = c->in[0], .n_spatial = c->in[0]->rank - 2};
  kiln_status st = kl_ref_window_init(c, NULL, &a.g);
  if (st != KILN_OK) return st;
  a.include_pad = kl_attr_int(c->node, "count_include_pad", 0) != 0;
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  float sx = *(const float *)c->in[1]->data, sy = *(const float *)c->in[3]->data;
  int64_t zx = kl_ref_load_int(c->in[2]->data, c->in[2]->dtype, 0);
  int64_t zy = kl_ref_load_int(c->in[4]->data, c->in[4]->dtype, 0);
  int64_t planes = x->dims[0] * x->dims[1], i = 0, o[3];
  for (int64_t plane = 0; plane < planes; plane++)
    for (o[0] = 0; o[0] < a.g.out[0]; o[0]++)
      for (o[1] = 0; o[1] < a.g.out[1]; o[1]++)
        for (o[2] = 0; o[2] < a.g.out[2]; o[2]++, i++) {
          window_result r = pool_window(&a, plane * kl_ref_span(a.g.in, 0, 3), o, false);
          double count = a.include_pad ? r.taps_padded : (double)r.taps_in;
          int64_t acc = (int64_t)r.value - zx * r.taps_in;
          kl_ref_store_int(y->data, y->dtype, i,
                           kl_ref_mean_code(acc, sx, sy, (float)count, zy, y->dtype));
        }
  return KILN_OK;
}

int kl_ref_pool(kl_kernel_ctx *c) {
  pool_args a = {.x = c->in[0], .n_spatial = c->in[0]->rank - 2};
  kiln_status st = kl_ref_window_init(c, NULL, &a.g);
  if (st != KILN_OK) return st;
  a.col_major = kl_attr_int(c->node, "storage_order", 0) == 1;
  a.include_pad = kl_attr_int(c->node, "count_include_pad", 0) != 0;
  const kl_tensor *x = c->in[0];
  int64_t planes = x->dims[0] * x->dims[1], i = 0, o[3];
  for (int64_t plane = 0; plane < planes; plane++)
    for (o[0] = 0; o[0] < a.g.out[0]; o[0]++)
      for (o[1] = 0; o[1] < a.g.out[1]; o[1]++)
        for (o[2] = 0; o[2] < a.g.out[2]; o[2]++) pool_output(&a, c, plane, i++, o);
  return KILN_OK;
}

int kl_ref_global_pool(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int64_t planes = x->dims[0] * x->dims[1], size = kl_ref_span(x->dims, 2, x->rank);
  for (int64_t p = 0; p < planes; p++) {
    double sum = 0;
    for (int64_t j = 0; j < size; j++) sum += kl_ref_load(x->data, x->dtype, p * size + j);
    kl_ref_store(y->data, y->dtype, p, sum / (double)size);
  }
  return KILN_OK;
}
