/* Reference kernels: GridSample, AffineGrid, NonMaxSuppression, RoiAlign, DeformConv,
 * Det, BitCast and TensorScatter (shapes in src/ir/infer_more.c).
 *
 * GridSample: X [N, C, D1..Dr], grid [N, O1..Or, r] -> Y [N, C, O1..Or]. grid holds
 *   coordinates in [-1, 1], the last one for Dr (x), the one before for Dr-1 (y), ...;
 *   each is mapped to a pixel position (align_corners: -1 and 1 are the centres of the
 *   end pixels; else their outer edges), then, as PyTorch and the ONNX reference do:
 *   nearest rounds it half to even; for nearest and linear, border clamps a position
 *   outside the image to it and reflection mirrors it at the borders; linear and cubic
 *   (Keys, a = -0.75) weigh 2
 *   or 4 taps per dim, and a tap outside the image reads 0 (zeros), the edge pixel
 *   (border) or its mirror image (reflection).
 * AffineGrid: grid[n, d, h, w] = theta[n] (x_w, y_h, z_d, 1), the normalized position
 *   of each output pixel (the same mapping as GridSample's, so the two invert).
 */
#include "backends/cpu/ref/ref.h"
#include "ir/infer_more.h"

#include <math.h>
#include <stdlib.h>

/* ---- GridSample ---- */

#define GRID_MAX_DIMS (KL_MAX_RANK - 2)

typedef struct grid_args {
  kl_grid g;
  int r;                                  /* spatial dims */
  int64_t size[GRID_MAX_DIMS];            /* X's spatial dims */
  double lo[GRID_MAX_DIMS], hi[GRID_MAX_DIMS]; /* where positions reflect */
  /* per spatial dim, the taps of the current sample: index into X (or -1: reads 0) and
   * weight */
  int n_taps;
  int64_t tap[GRID_MAX_DIMS][4];
  double weight[GRID_MAX_DIMS][4];
} grid_args;

/* Mirrors x at lo and hi until it lies between them. */
static double reflect(double x, double lo, double hi) {
  double span = hi - lo;
  if (!(span > 0)) return lo;
  if (x >= lo && x <= hi) return x;
  double dx = x < lo ? lo - x : x - hi, r = fmod(dx, span);
  bool even = fmod(floor(dx / span), 2) == 0;
  if (x < lo) return even ? lo + r : hi - r;
  return even ? hi - r : lo + r;
}

/* Index into X of tap i of dim d, by the padding mode; -1 for a zero. */
static int64_t tap_index(const grid_args *a, int d, int64_t i) {
  int64_t n = a->size[d];
  if (i >= 0 && i < n) return i;
  if (a->g.pad == KL_GRID_ZEROS) return -1;
  if (a->g.pad == KL_GRID_BORDER) return i < 0 ? 0 : n - 1;
  int64_t m = (int64_t)reflect((double)i, a->lo[d], a->hi[d]);
  return m < 0 ? 0 : m >= n ? n - 1 : m;
}

static void cubic_weights(double t, double *w) {
  const double A = -0.75;
  double x0 = t + 1, x1 = t, x2 = 1 - t, x3 = 2 - t;
  w[0] = ((A * x0 - 5 * A) * x0 + 8 * A) * x0 - 4 * A;
  w[1] = ((A + 2) * x1 - (A + 3)) * x1 * x1 + 1;
  w[2] = ((A + 2) * x2 - (A + 3)) * x2 * x2 + 1;
  w[3] = ((A * x3 - 5 * A) * x3 + 8 * A) * x3 - 4 * A;
}

/* Pixel position of normalized coordinate v along dim d, after border or reflection
 * have moved it inside (linear, nearest). A far-away position (or a NaN) is pinned a few pixels out, where
 * all its taps still read what they would have. */
static double grid_position(const grid_args *a, int d, double v) {
  double n = (double)a->size[d];
  double x = a->g.align_corners ? (v + 1) / 2 * (n - 1) : ((v + 1) * n - 1) / 2;
  if (a->g.mode == KL_GRID_NEAREST) x = nearbyint(x);
  /* cubic leaves the position alone and moves each tap instead (PyTorch, onnxruntime;
   * the ONNX reference clamps the position too, which differs for border) */
  if (a->g.mode != KL_GRID_CUBIC && (x < a->lo[d] || x > a->hi[d])) {
    if (a->g.pad == KL_GRID_BORDER) x = fmin(fmax(x, 0), n - 1);
    else if (a->g.pad == KL_GRID_REFLECTION) x = reflect(x, a->lo[d], a->hi[d]);
  }
  return fmin(fmax(x, -8), n + 8);
}

/* Taps and weights of one sample at normalized coordinates v (x last). */
static void grid_taps(grid_args *a, const double *v) {
  int count = a->g.mode == KL_GRID_NEAREST ? 1 : a->g.mode == KL_GRID_LINEAR ? 2 : 4;
  a->n_taps = count;
  for (int d = 0; d < a->r; d++) {
    double x = grid_position(a, d, v[a->r - 1 - d]);
    double x0 = count == 1 ? trunc(x) : floor(x), t = x - x0;
    int64_t first = (int64_t)x0 - (count == 4 ? 1 : 0);
    double w[4] = {1, 0, 0, 0};
    if (count == 2) w[0] = 1 - t, w[1] = t;
    if (count == 4) cubic_weights(t, w);
    for (int k = 0; k < count; k++) {
      a->tap[d][k] = tap_index(a, d, first + k);
      a->weight[d][k] = w[k];
    }
  }
}

/* The interpolated value of one channel plane: the sum over every combination of one
 * tap per dim of the product of their weights times the pixel. */
static double grid_value(const grid_args *a, const kl_tensor *x, int64_t plane) {
  int k[GRID_MAX_DIMS] = {0};
  double acc = 0;
  for (;;) {
    double w = 1;
    int64_t off = 0;
    for (int d = 0; d < a->r && w != 0; d++) {
      int64_t i = a->tap[d][k[d]];
      w = i < 0 ? 0 : w * a->weight[d][k[d]];
      off = off * a->size[d] + (i < 0 ? 0 : i);
    }
    if (w != 0) acc += w * kl_ref_load(x->data, x->dtype, plane + off);
    int d = a->r - 1;
    while (d >= 0 && ++k[d] == a->n_taps) k[d--] = 0;
    if (d < 0) return acc;
  }
}

int kl_ref_grid_sample(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *grid = c->in[1];
  kl_tensor *y = c->out[0];
  grid_args a = {.r = x->rank - 2};
  kiln_status st = kl_grid_init(c->node, &a.g, c->e);
  if (st != KILN_OK) return st;
  for (int d = 0; d < a.r; d++) {
    a.size[d] = x->dims[2 + d];
    a.lo[d] = a.g.align_corners ? 0 : -0.5;
    a.hi[d] = a.g.align_corners ? (double)a.size[d] - 1 : (double)a.size[d] - 0.5;
  }
  int64_t batch = x->dims[0], channels = x->dims[1];
  int64_t in_plane = kl_ref_span(x->dims, 2, x->rank), points = kl_ref_span(y->dims, 2, y->rank);
  if (in_plane == 0) { /* nothing to sample: every tap is outside the image */
    for (int64_t i = 0; i < kl_tensor_numel(y); i++) kl_ref_store(y->data, y->dtype, i, 0);
    return KILN_OK;
  }
  double v[GRID_MAX_DIMS];
  for (int64_t n = 0; n < batch; n++)
    for (int64_t p = 0; p < points; p++) {
      for (int d = 0; d < a.r; d++)
        v[d] = kl_ref_load(grid->data, grid->dtype, (n * points + p) * a.r + d);
      grid_taps(&a, v);
      for (int64_t ch = 0; ch < channels; ch++)
        kl_ref_store(y->data, y->dtype, (n * channels + ch) * points + p,
                     grid_value(&a, x, (n * channels + ch) * in_plane));
    }
  return KILN_OK;
}

/* ---- AffineGrid ---- */

/* Normalized position of pixel i of n (0 for a single pixel, as PyTorch). */
static double affine_base(int64_t i, int64_t n, bool align) {
  if (n <= 1) return 0;
  if (align) return -1 + 2.0 * (double)i / (double)(n - 1);
  return -1 + (2.0 * (double)i + 1) / (double)n;
}

int kl_ref_affine_grid(kl_kernel_ctx *c) {
  const kl_tensor *theta = c->in[0];
  kl_tensor *y = c->out[0];
  bool align = kl_attr_int(c->node, "align_corners", 0) == 1;
  int r = y->rank - 2; /* 2 or 3 */
  int64_t d_n = r == 3 ? y->dims[1] : 1, h_n = y->dims[r - 1], w_n = y->dims[r];
  int64_t out = 0;
  for (int64_t n = 0; n < y->dims[0]; n++)
    for (int64_t d = 0; d < d_n; d++)
      for (int64_t h = 0; h < h_n; h++)
        for (int64_t w = 0; w < w_n; w++) {
          /* homogeneous position (x, y[, z], 1) */
          double pos[4] = {affine_base(w, w_n, align), affine_base(h, h_n, align), 0, 1};
          if (r == 3) pos[2] = affine_base(d, d_n, align);
          else pos[2] = 1;
          for (int row = 0; row < r; row++) {
            double acc = 0;
            for (int k = 0; k <= r; k++)
              acc += kl_ref_load(theta->data, theta->dtype, (n * r + row) * (r + 1) + k) * pos[k];
            kl_ref_store(y->data, y->dtype, out++, acc);
          }
        }
  return KILN_OK;
}

/* ---- NonMaxSuppression ---- */

/* Optional scalar input i as a double; false when absent. */
static bool scalar_in(const kl_kernel_ctx *c, int i, double *v) {
  const kl_tensor *t = i < c->n_in ? c->in[i] : NULL;
  if (!t) return false;
  *v = kl_ref_load(t->data, t->dtype, 0);
  return true;
}

int kl_ref_nms(kl_kernel_ctx *c) {
  const kl_tensor *boxes = c->in[0], *scores = c->in[1];
  kl_tensor *y = c->out[0];
  kl_nms p = {.boxes = boxes->data, .scores = scores->data, .boxes_dtype = boxes->dtype,
              .scores_dtype = scores->dtype, .batches = boxes->dims[0],
              .count = boxes->dims[1], .classes = scores->dims[1]};
  const kl_tensor *max_out = c->n_in > 2 ? c->in[2] : NULL;
  p.max_per_class = max_out ? kl_ref_load_int(max_out->data, max_out->dtype, 0) : 0;
  scalar_in(c, 3, &p.iou_threshold);
  p.has_score_threshold = scalar_in(c, 4, &p.score_threshold);
  p.center_point_box = kl_attr_int(c->node, "center_point_box", 0) == 1;
  int64_t selected;
  kiln_status st = kl_nms_select(&p, y->data, &selected, c->e);
  if (st == KILN_OK && selected != y->dims[0])
    st = kl_fail(c->e, KILN_ERR_INTERNAL, "selected %lld boxes, but the output has room for "
                 "%lld", (long long)selected, (long long)y->dims[0]);
  return st;
}
