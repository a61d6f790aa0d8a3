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
#include <string.h>

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
 * have moved it inside (linear, nearest). */
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
  return x;
}

/* Taps and weights along dim d for pixel position x. A far-away position (or a NaN)
 * is pinned a few pixels out, where all its taps still read what they would have. */
static void dim_taps(grid_args *a, int d, double x) {
  int count = a->n_taps;
  x = fmin(fmax(x, -8), (double)a->size[d] + 8);
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

/* Taps and weights of one sample at normalized coordinates v (x last). */
static void grid_taps(grid_args *a, const double *v) {
  a->n_taps = a->g.mode == KL_GRID_NEAREST ? 1 : a->g.mode == KL_GRID_LINEAR ? 2 : 4;
  for (int d = 0; d < a->r; d++) dim_taps(a, d, grid_position(a, d, v[a->r - 1 - d]));
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
  kiln_status st = kl_nms_select(&p, y->data, y->dims[0], &selected, c->e);
  if (st == KILN_OK && selected != y->dims[0])
    st = kl_fail(c->e, KILN_ERR_INTERNAL, "selected %lld boxes, but the output has %lld "
                 "rows", (long long)selected, (long long)y->dims[0]);
  return st;
}

/* ---- RoiAlign ----
 * X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2 in X's pixels times 1/spatial_scale),
 * batch_indices [R] -> Y [R, C, out_h, out_w]. Each output bin of a roi averages (or,
 * in max mode, takes the largest of) grid_h x grid_w bilinear samples at the centres of
 * a regular grid over the bin; grid = sampling_ratio, else ceil(roi size / out size).
 * half_pixel shifts the roi by -0.5 pixel; output_half_pixel (opset 10's behaviour)
 * does not, and makes a roi at least one pixel wide and high. A sample more than a
 * pixel outside X is 0. Max mode takes the largest of the four weighted corner values
 * of each sample, as onnxruntime and the ONNX reference do. */

typedef struct roi_sample {
  int64_t at[4];   /* y * W + x of the four corners */
  double w[4];     /* their bilinear weights; all 0 for a sample outside X */
} roi_sample;

static roi_sample roi_sample_at(double y, double x, int64_t h, int64_t w) {
  roi_sample s = {{0, 0, 0, 0}, {0, 0, 0, 0}};
  /* an empty image (inference refuses it) has no pixel to weigh */
  if (h <= 0 || w <= 0 || !(y >= -1 && y <= (double)h && x >= -1 && x <= (double)w)) return s;
  y = fmax(y, 0);
  x = fmax(x, 0);
  int64_t y0 = (int64_t)y, x0 = (int64_t)x, y1 = y0 + 1, x1 = x0 + 1;
  if (y0 >= h - 1) y0 = y1 = h - 1, y = (double)y0;
  if (x0 >= w - 1) x0 = x1 = w - 1, x = (double)x0;
  double ly = y - (double)y0, lx = x - (double)x0;
  s.at[0] = y0 * w + x0, s.at[1] = y0 * w + x1, s.at[2] = y1 * w + x0, s.at[3] = y1 * w + x1;
  s.w[0] = (1 - ly) * (1 - lx), s.w[1] = (1 - ly) * lx, s.w[2] = ly * (1 - lx), s.w[3] = ly * lx;
  return s;
}

typedef struct roi_geom {
  double start_y, start_x, bin_h, bin_w;
  int64_t grid_h, grid_w;
} roi_geom;

static kiln_status roi_geometry(const kl_roi_align *r, const kl_tensor *rois, int64_t i,
                                roi_geom *g, kl_err *e) {
  double v[4], offset = r->half_pixel ? 0.5 : 0;
  for (int k = 0; k < 4; k++)
    v[k] = kl_ref_load(rois->data, rois->dtype, i * 4 + k) * r->spatial_scale - offset;
  double roi_w = v[2] - v[0], roi_h = v[3] - v[1];
  if (!r->half_pixel) roi_w = fmax(roi_w, 1), roi_h = fmax(roi_h, 1);
  g->start_x = v[0], g->start_y = v[1];
  g->bin_h = roi_h / (double)r->out_h, g->bin_w = roi_w / (double)r->out_w;
  double gh = r->sampling_ratio > 0 ? (double)r->sampling_ratio : ceil(g->bin_h);
  double gw = r->sampling_ratio > 0 ? (double)r->sampling_ratio : ceil(g->bin_w);
  /* the bound first: a huge roi (1e30) must not reach the cast to int64 */
  g->grid_h = g->grid_w = 0;
  if (gh > 4096 || gw > 4096)
    return kl_fail(e, KILN_ERR_LIMIT, "roi %lld spans %g x %g pixels per output bin; kiln "
                   "samples at most 4096 x 4096", (long long)i, g->bin_h, g->bin_w);
  /* a NaN or negative extent samples nothing (the bin is 0) */
  g->grid_h = gh > 0 ? (int64_t)gh : 0, g->grid_w = gw > 0 ? (int64_t)gw : 0;
  return KILN_OK;
}

/* Output bin (ph, pw) of one channel plane of X. */
static double roi_bin(const kl_roi_align *r, const roi_geom *g, const kl_tensor *x,
                      int64_t plane, int64_t ph, int64_t pw) {
  int64_t h = x->dims[2], w = x->dims[3], count = g->grid_h * g->grid_w;
  double acc = 0;
  for (int64_t iy = 0; iy < g->grid_h; iy++)
    for (int64_t ix = 0; ix < g->grid_w; ix++) {
      double y = g->start_y + (double)ph * g->bin_h +
                 ((double)iy + 0.5) * g->bin_h / (double)g->grid_h;
      double xx = g->start_x + (double)pw * g->bin_w +
                  ((double)ix + 0.5) * g->bin_w / (double)g->grid_w;
      roi_sample s = roi_sample_at(y, xx, h, w);
      double v = r->max_mode ? -INFINITY : 0;
      for (int k = 0; k < 4; k++) {
        double t = s.w[k] == 0 ? 0 : s.w[k] * kl_ref_load(x->data, x->dtype, plane + s.at[k]);
        v = r->max_mode ? fmax(v, t) : v + t;
      }
      acc = r->max_mode ? (iy == 0 && ix == 0 ? v : fmax(acc, v)) : acc + v;
    }
  return r->max_mode ? acc : acc / (double)(count > 1 ? count : 1);
}

int kl_ref_roi_align(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *rois = c->in[1], *idx = c->in[2];
  kl_tensor *y = c->out[0];
  kl_roi_align r;
  kiln_status st = kl_roi_align_init(c->node, &r, c->e);
  int64_t channels = x->dims[1], plane = x->dims[2] * x->dims[3], out = 0;
  for (int64_t i = 0; st == KILN_OK && i < y->dims[0]; i++) {
    roi_geom g;
    if ((st = roi_geometry(&r, rois, i, &g, c->e)) != KILN_OK) break;
    int64_t b = kl_ref_load_int(idx->data, idx->dtype, i);
    for (int64_t ch = 0; ch < channels; ch++)
      for (int64_t ph = 0; ph < r.out_h; ph++)
        for (int64_t pw = 0; pw < r.out_w; pw++)
          kl_ref_store(y->data, y->dtype, out++,
                       roi_bin(&r, &g, x, (b * channels + ch) * plane, ph, pw));
  }
  return st;
}

/* ---- DeformConv ----
 * X [N, C, D1..Dr], W [M, C / group, k...], offset [N, G * K * r, O...], B [M]?,
 * mask [N, G * K, O...]? -> Y [N, M, O...], G offset groups of C / G channels, K kernel
 * positions. Like a convolution, but kernel position k of output position o reads X
 * at o * stride - pad_begin + k * dilation + offset[n, (g K + k) r + d, o] along each
 * dim d: a fractional position, sampled N-linearly (0 outside X), and weighed by
 * mask[n, g K + k, o]. */

typedef struct deform_args {
  const kl_tensor *x, *w, *offset, *b, *mask;
  kl_window win;
  int r;
  int64_t taps;              /* K */
  int64_t cin_group, cout_group, cin_offset_group;
  int64_t in_plane, out_plane;
  int64_t out_dims[GRID_MAX_DIMS];
  grid_args grid;            /* linear sampling with zeros outside, over X's dims */
} deform_args;

/* Sample of X channel plane `plane` at kernel position k (flat index kidx, per-dim
 * index kpos) of output position o (flat oidx, per dim opos). */
static double deform_sample(deform_args *a, int64_t n, int64_t g, int64_t plane,
                            int64_t kidx, const int64_t *kpos, int64_t oidx, const int64_t *opos) {
  for (int d = 0; d < a->r; d++) {
    int64_t ch = ((g * a->taps + kidx) * a->r + d);
    double off = kl_ref_load(a->offset->data, a->offset->dtype,
                             (n * a->offset->dims[1] + ch) * a->out_plane + oidx);
    double pos = (double)(opos[d] * a->win.stride[d] - a->win.pad_begin[d] +
                          kpos[d] * a->win.dilation[d]) + off;
    dim_taps(&a->grid, d, pos);
  }
  double v = grid_value(&a->grid, a->x, plane);
  if (a->mask)
    v *= kl_ref_load(a->mask->data, a->mask->dtype,
                     (n * a->mask->dims[1] + g * a->taps + kidx) * a->out_plane + oidx);
  return v;
}

/* Index vector of flat position i in dims (row-major). */
static void unflatten(int64_t i, int r, const int64_t *dims, int64_t *pos) {
  for (int d = r - 1; d >= 0; d--) {
    pos[d] = i % dims[d];
    i /= dims[d];
  }
}

static double deform_point(deform_args *a, int64_t n, int64_t m, int64_t oidx) {
  int64_t opos[GRID_MAX_DIMS], kpos[GRID_MAX_DIMS];
  int64_t c0 = m / a->cout_group * a->cin_group;
  double acc = a->b ? kl_ref_load(a->b->data, a->b->dtype, m) : 0;
  unflatten(oidx, a->r, a->out_dims, opos);
  for (int64_t ci = 0; ci < a->cin_group; ci++) {
    int64_t c = c0 + ci, g = c / a->cin_offset_group;
    int64_t plane = (n * a->x->dims[1] + c) * a->in_plane;
    for (int64_t k = 0; k < a->taps; k++) {
      unflatten(k, a->r, a->win.kernel, kpos);
      double w = kl_ref_load(a->w->data, a->w->dtype, (m * a->cin_group + ci) * a->taps + k);
      acc += w * deform_sample(a, n, g, plane, k, kpos, oidx, opos);
    }
  }
  return acc;
}

int kl_ref_deform_conv(kl_kernel_ctx *c) {
  deform_args a = {.x = c->in[0], .w = c->in[1], .offset = c->in[2],
                   .b = c->n_in > 3 ? c->in[3] : NULL, .mask = c->n_in > 4 ? c->in[4] : NULL};
  kl_tensor *y = c->out[0];
  a.r = a.x->rank - 2;
  kiln_status st = kl_window_init(c->node, a.r, a.w->dims + 2, &a.win, c->e);
  for (int d = 0; st == KILN_OK && d < a.r; d++) {
    int64_t out;
    st = kl_window_out(&a.win, d, a.x->dims[2 + d], &out, c->e);
  }
  if (st != KILN_OK) return st;
  int64_t group = kl_attr_int(c->node, "group", 1), og = kl_attr_int(c->node, "offset_group", 1);
  a.taps = kl_ref_span(a.w->dims, 2, a.w->rank);
  a.cin_group = a.x->dims[1] / group;
  a.cout_group = y->dims[1] / group;
  a.cin_offset_group = a.x->dims[1] / og;
  a.in_plane = kl_ref_span(a.x->dims, 2, a.x->rank);
  a.out_plane = kl_ref_span(y->dims, 2, y->rank);
  a.grid.r = a.r;
  a.grid.g = (kl_grid){KL_GRID_LINEAR, KL_GRID_ZEROS, true};
  a.grid.n_taps = 2;
  for (int d = 0; d < a.r; d++) {
    a.grid.size[d] = a.x->dims[2 + d];
    a.out_dims[d] = y->dims[2 + d];
  }
  int64_t i = 0;
  for (int64_t n = 0; n < y->dims[0]; n++)
    for (int64_t m = 0; m < y->dims[1]; m++)
      for (int64_t o = 0; o < a.out_plane; o++)
        kl_ref_store(y->data, y->dtype, i++, deform_point(&a, n, m, o));
  return KILN_OK;
}

/* ---- Det ----
 * X [*, M, M] -> [*]: Gaussian elimination with partial pivoting in double; the
 * determinant is the product of the pivots, its sign flipped for each row swap. */

static double det_matrix(double *a, int64_t n) {
  double det = 1;
  for (int64_t k = 0; k < n; k++) {
    int64_t p = k;
    for (int64_t i = k + 1; i < n; i++)
      if (fabs(a[i * n + k]) > fabs(a[p * n + k])) p = i;
    if (a[p * n + k] == 0) return 0;
    if (p != k) {
      for (int64_t j = 0; j < n; j++) {
        double t = a[k * n + j];
        a[k * n + j] = a[p * n + j], a[p * n + j] = t;
      }
      det = -det;
    }
    det *= a[k * n + k];
    for (int64_t i = k + 1; i < n; i++) {
      double f = a[i * n + k] / a[k * n + k];
      for (int64_t j = k; j < n; j++) a[i * n + j] -= f * a[k * n + j];
    }
  }
  return det;
}

int kl_ref_det(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int64_t n = x->dims[x->rank - 1], count = kl_tensor_numel(y);
  size_t elems, bytes;
  if (kl_mul_overflow_size((size_t)n, (size_t)n, &elems) ||
      kl_mul_overflow_size(elems, sizeof(double), &bytes))
    return kl_fail(c->e, KILN_ERR_LIMIT, "%lld x %lld matrices are too large", (long long)n,
                   (long long)n);
  double *a = malloc(bytes ? bytes : 1);
  if (!a) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "no memory for a %lld x %lld matrix",
                         (long long)n, (long long)n);
  for (int64_t m = 0; m < count; m++) {
    for (size_t i = 0; i < elems; i++)
      a[i] = kl_ref_load(x->data, x->dtype, m * (int64_t)elems + (int64_t)i);
    kl_ref_store(y->data, y->dtype, m, det_matrix(a, n));
  }
  free(a);
  return KILN_OK;
}

/* ---- BitCast: the bytes, unchanged (kiln runs on little-endian hosts, the order the
 * spec names) ---- */

int kl_ref_bitcast(kl_kernel_ctx *c) {
  kl_ref_copy_bytes(c->out[0]->data, c->in[0]->data, kl_tensor_nbytes(c->in[0]));
  return KILN_OK;
}

/* ---- TensorScatter ----
 * present = past, then update[p, s, q] written to present[p, w(p) + s, q] for every
 * prefix index p (the dims before the axis), sequence position s and suffix index q,
 * with w(p) = write_indices[batch of p] (0 without it), taken modulo the cache length
 * in circular mode. */

int kl_ref_tensor_scatter(kl_kernel_ctx *c) {
  const kl_tensor *past = c->in[0], *upd = c->in[1], *idx = c->n_in > 2 ? c->in[2] : NULL;
  kl_tensor *y = c->out[0];
  bool circular = strcmp(kl_attr_string(c->node, "mode", "linear"), "circular") == 0;
  int64_t axis = kl_attr_int(c->node, "axis", -2);
  if (axis < 0) axis += past->rank;
  int64_t prefix = kl_ref_span(past->dims, 0, (int)axis);
  int64_t per_batch = kl_ref_span(past->dims, 1, (int)axis);
  int64_t suffix = kl_ref_span(past->dims, (int)axis + 1, past->rank);
  int64_t cap = past->dims[axis], len = upd->dims[axis];
  size_t esize = kl_dtype_size(past->dtype), row = (size_t)suffix * esize;
  kl_ref_copy_bytes(y->data, past->data, kl_tensor_nbytes(past));
  for (int64_t p = 0; p < prefix; p++) {
    int64_t w = idx ? kl_ref_load_int(idx->data, idx->dtype, p / per_batch) : 0;
    if (circular && cap > 0) w %= cap; /* then w + s cannot overflow (once did at INT64_MAX) */
    for (int64_t s = 0; s < len; s++) {
      int64_t at;
      if (__builtin_add_overflow(w, s, &at)) continue; /* far outside in linear mode */
      if (circular) at = (at % cap + cap) % cap;
      if (at < 0 || at >= cap) continue; /* infer refused it; never write outside */
      kl_ref_copy_bytes((char *)y->data + (size_t)((p * cap + at) * suffix) * esize,
                        (const char *)upd->data + (size_t)((p * len + s) * suffix) * esize, row);
    }
  }
  return KILN_OK;
}

/* If, Loop and Scan run in the session (runtime/control.c), which runs their bodies;
 * nothing else may run them (constant folding leaves them alone). */
int kl_ref_control(kl_kernel_ctx *c) {
  return kl_fail(c->e, KILN_ERR_INTERNAL, "%s runs only in a session", kl_op_name(c->node->op));
}

/* The sequence and optional ops run in a session (runtime/sequence.c), on values no
 * kernel's tensors describe. */
int kl_ref_sequence(kl_kernel_ctx *c) {
  return kl_fail(c->e, KILN_ERR_INTERNAL, "%s runs only in a session", kl_op_name(c->node->op));
}

/* ---- kiln.Check: fails the run with the message that the code names ---- */

int kl_ref_check(kl_kernel_ctx *c) {
  int64_t code = *(const int64_t *)c->in[0]->data;
  if (code != 0) {
    const kl_attr *m = kl_node_attr(c->node, "messages");
    bool known = m && m->kind == KL_ATTR_STRINGS && code > 0 && code <= m->n;
    return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "%s", known ? m->strings[code - 1]
                   : "a check of the model failed (no message for it)");
  }
  for (int k = 1; k < c->n_in; k++)
    kl_ref_copy_bytes(c->out[k - 1]->data, c->in[k]->data, kl_tensor_nbytes(c->in[k]));
  return KILN_OK;
}
