/* Shape/dtype inference for GridSample and AffineGrid, NonMaxSuppression, RoiAlign,
 * DeformConv, Det, BitCast and TensorScatter.
 *
 * GridSample: X [N, C, D1..Dr], grid [N, O1..Or, r] -> Y [N, C, O1..Or]
 * AffineGrid: theta [N, 2, 3], size (N, C, H, W) -> grid [N, H, W, 2];
 *             theta [N, 3, 4], size (N, C, D, H, W) -> grid [N, D, H, W, 3]
 */
#include "ir/infer_more.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ---- GridSample ---- */

static kiln_status read_choice(const kl_node *node, const char *attr, const char *dflt,
                               const char *const *names, int count, int *v, kl_err *e) {
  const char *s = kl_attr_string(node, attr, dflt);
  for (int i = 0; i < count; i++)
    if (strcmp(s, names[i]) == 0) {
      *v = i;
      return KILN_OK;
    }
  return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s is '%s', expected %s, %s or %s", attr, s,
                 names[0], names[1], names[2]);
}

kiln_status kl_grid_init(const kl_node *node, kl_grid *g, kl_err *e) {
  static const char *const modes[] = {"linear", "nearest", "cubic"};
  static const char *const pads[] = {"zeros", "border", "reflection"};
  int mode = 0, pad = 0;
  int64_t align = kl_attr_int(node, "align_corners", 0);
  kiln_status st = read_choice(node, "mode", "linear", modes, 3, &mode, e);
  if (st == KILN_OK) st = read_choice(node, "padding_mode", "zeros", pads, 3, &pad, e);
  if (st == KILN_OK && align != 0 && align != 1)
    st = kl_fail(e, KILN_ERR_INVALID_MODEL, "align_corners is %lld, expected 0 or 1",
                 (long long)align);
  g->mode = (kl_grid_mode)mode;
  g->pad = (kl_grid_pad)pad;
  g->align_corners = align == 1;
  return st;
}

int kl_infer_grid_sample(kl_infer_ctx *c) {
  kl_grid g;
  kiln_status st = kl_grid_init(c->node, &g, c->e);
  if (st == KILN_OK) st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "grid", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 3, KL_MAX_RANK);
  if (st == KILN_OK) st = kl_check_rank(c, 1, "grid", 3, KL_MAX_RANK);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0], *grid = c->in[1];
  int rank = x->rank >= 0 ? x->rank : grid->rank;
  kl_type_unknown(&c->out[0], x->dtype);
  if (rank < 0) return KILN_OK;
  if (x->rank >= 0 && grid->rank >= 0 && x->rank != grid->rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (grid) has rank %d, expected %d like "
                   "input 0 (X)", grid->rank, x->rank);
  st = kl_more_expect_dim(c, 1, "grid", rank - 1, rank - 2, "one coordinate per spatial dim");
  bool ok = true;
  kl_dim n = kl_dim_merge(x->rank >= 0 ? x->dims[0] : kl_dim_unknown(),
                          grid->rank >= 0 ? grid->dims[0] : kl_dim_unknown(), &ok);
  if (st == KILN_OK && !ok)
    st = kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (grid) has batch %lld, expected %lld like "
                 "input 0 (X)", (long long)grid->dims[0].size, (long long)x->dims[0].size);
  if (st != KILN_OK) return st;
  kl_type *y = &c->out[0];
  y->rank = rank;
  y->dims[0] = n;
  y->dims[1] = x->rank >= 0 ? x->dims[1] : kl_dim_unknown();
  for (int i = 2; i < rank; i++)
    y->dims[i] = grid->rank >= 0 ? grid->dims[i - 1] : kl_dim_unknown();
  return KILN_OK;
}

/* ---- AffineGrid ---- */

int kl_infer_affine_grid(kl_infer_ctx *c) {
  int64_t align = kl_attr_int(c->node, "align_corners", 0);
  if (align != 0 && align != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "align_corners is %lld, expected 0 or 1",
                   (long long)align);
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "theta", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "size", KL_DT(KL_I64));
  if (st == KILN_OK) st = kl_check_rank(c, 0, "theta", 3, 3);
  if (st == KILN_OK) st = kl_check_rank(c, 1, "size", 1, 1);
  int64_t size[5];
  int n = -1;
  if (st == KILN_OK) st = kl_read_ints(c, 1, "size", size, 5, &n);
  if (st != KILN_OK) return st;
  const kl_type *theta = c->in[0], *sz = c->in[1];
  /* the output's rank follows size's length, known from its shape before its data */
  int len = n >= 0 ? n : sz->rank == 1 && kl_dim_known(sz->dims[0]) ? (int)sz->dims[0].size : -1;
  kl_type_unknown(&c->out[0], theta->dtype);
  if (len < 0) return KILN_OK;
  if (len != 4 && len != 5)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (size) has %d values, expected 4 (N, C, "
                   "H, W) or 5 (N, C, D, H, W)", len);
  int spatial = len - 2;
  st = kl_more_expect_dim(c, 0, "theta", 1, spatial, "one row per spatial dim");
  if (st == KILN_OK) st = kl_more_expect_dim(c, 0, "theta", 2, spatial + 1, "spatial dims + 1");
  if (st == KILN_OK && n >= 0) st = kl_more_expect_dim(c, 0, "theta", 0, size[0], "size[0]");
  for (int i = 0; st == KILN_OK && n >= 0 && i < len; i++)
    if (size[i] < (i < 2 ? 0 : 1))
      st = kl_fail(c->e, KILN_ERR_SHAPE, "size[%d] is %lld, expected at least %d", i,
                   (long long)size[i], i < 2 ? 0 : 1);
  if (st != KILN_OK) return st;
  kl_type *y = &c->out[0];
  y->rank = spatial + 2;
  y->dims[0] = n >= 0 ? kl_dim_of(size[0]) : theta->rank == 3 ? theta->dims[0] : kl_dim_unknown();
  for (int i = 0; i < spatial; i++)
    y->dims[1 + i] = n >= 0 ? kl_dim_of(size[2 + i]) : kl_dim_unknown();
  y->dims[spatial + 1] = kl_dim_of(spatial);
  return kl_check_out_numel(c, y);
}

/* ---- NonMaxSuppression ----
 * Class by class, the candidates (above the score threshold when there is one) sorted
 * once, best first; each is kept unless one kept before it overlaps it by more than the
 * IoU threshold, until max_output_boxes_per_class are kept. A candidate is compared
 * with the kept boxes only (at most count x min(count, max) pairs per class), from
 * arrays of corners and areas: four at a time for any overlap, on float32 bounds of
 * the corners, then two at a time for the IoU in float64. */

#define NMS_LOAD_MAX_PAIRS ((double)(1 << 24))
#define NMS_BLOCK 64 /* kept boxes tested for any overlap at once, before the IoU */

typedef struct nms_candidate {
  double score;
  int64_t box;
} nms_candidate;

/* Higher score first, then lower box index (onnxruntime's and the ONNX reference's
 * order); NaN scores last. */
static int nms_order(const void *pa, const void *pb) {
  const nms_candidate *a = pa, *b = pb;
  bool na = a->score != a->score, nb = b->score != b->score;
  if (na != nb) return na ? 1 : -1;
  if (!na && a->score != b->score) return a->score > b->score ? -1 : 1;
  return (a->box > b->box) - (a->box < b->box);
}

/* Boxes as [lo_y, lo_x, hi_y, hi_x] with their areas, one array each. */
typedef struct nms_boxes {
  double *lo_y, *lo_x, *hi_y, *hi_x, *area;
} nms_boxes;

/* Box i of batch b, into slot k of r. */
static void nms_box(const kl_nms *p, int64_t b, int64_t i, nms_boxes *r, int64_t k) {
  double v[4], lo_y, lo_x, hi_y, hi_x;
  for (int j = 0; j < 4; j++)
    v[j] = kl_load_f64(p->boxes, p->boxes_dtype, (size_t)((b * p->count + i) * 4 + j));
  if (p->center_point_box) {
    lo_y = v[1] - v[3] / 2, hi_y = v[1] + v[3] / 2;
    lo_x = v[0] - v[2] / 2, hi_x = v[0] + v[2] / 2;
  } else {
    lo_y = fmin(v[0], v[2]), hi_y = fmax(v[0], v[2]);
    lo_x = fmin(v[1], v[3]), hi_x = fmax(v[1], v[3]);
  }
  r->lo_y[k] = lo_y, r->lo_x[k] = lo_x, r->hi_y[k] = hi_y, r->hi_x[k] = hi_x;
  r->area[k] = (hi_y - lo_y) * (hi_x - lo_x);
}

/* Whether a box takes part in suppression at all: one of no area, or a NaN corner, or
 * both sides negative (center_point_box with negative width and height: it overlaps no
 * box) neither suppresses nor is suppressed. */
static bool nms_active(const nms_boxes *r, int64_t i) {
  return r->area[i] > 0 && r->hi_y[i] > r->lo_y[i] && r->hi_x[i] > r->lo_x[i];
}

static void nms_copy(nms_boxes *to, int64_t k, const nms_boxes *from, int64_t i) {
  to->lo_y[k] = from->lo_y[i], to->lo_x[k] = from->lo_x[i];
  to->hi_y[k] = from->hi_y[i], to->hi_x[k] = from->hi_x[i];
  to->area[k] = from->area[i];
}

/* The float at or below d, and at or above: bounds of the corners in float32, for a
 * test of overlap that is never wrong when it says none (each box only grows). */
static float nms_down(double d) {
  if (d > FLT_MAX) return FLT_MAX;
  if (d < -FLT_MAX) return -INFINITY;
  float f = (float)d;
  return (double)f > d ? nextafterf(f, -INFINITY) : f;
}

static float nms_up(double d) {
  if (d > FLT_MAX) return INFINITY;
  if (d < -FLT_MAX) return -FLT_MAX;
  float f = (float)d;
  return (double)f < d ? nextafterf(f, INFINITY) : f;
}

/* Kept boxes' corners so bounded, one array each. */
typedef struct nms_bounds {
  float *lo_y, *lo_x, *hi_y, *hi_x;
} nms_bounds;

#if defined(__SSE2__)
/* Whether any of the n kept boxes k (all active, their corners bounded in kb; slots n
 * to the next multiple of 4, boxes that overlap none) overlaps the active box i of all
 * by more than the threshold: intersection over union, both sides of the intersection
 * positive and the union positive. A block of kept boxes is first tested for any
 * overlap at all, four at a time on the float bounds (overlap of active boxes is each
 * one's high corner above the other's low one); only a block with some has its IoUs
 * computed, two at a time in float64. With no NaN among the corners of active boxes,
 * _mm_min_pd and _mm_max_pd are fmin and fmax. */
static bool nms_suppressed(const nms_boxes *k, const nms_bounds *kb, int64_t n,
                           const nms_boxes *all, int64_t i, double threshold) {
  const __m128 f_lo_y = _mm_set1_ps(nms_down(all->lo_y[i]));
  const __m128 f_lo_x = _mm_set1_ps(nms_down(all->lo_x[i]));
  const __m128 f_hi_y = _mm_set1_ps(nms_up(all->hi_y[i]));
  const __m128 f_hi_x = _mm_set1_ps(nms_up(all->hi_x[i]));
  const __m128d lo_y = _mm_set1_pd(all->lo_y[i]), lo_x = _mm_set1_pd(all->lo_x[i]);
  const __m128d hi_y = _mm_set1_pd(all->hi_y[i]), hi_x = _mm_set1_pd(all->hi_x[i]);
  const __m128d area = _mm_set1_pd(all->area[i]), thr = _mm_set1_pd(threshold);
  const __m128d zero = _mm_setzero_pd();
  for (int64_t s = 0; s < n; s += NMS_BLOCK) {
    int64_t e = n - s < NMS_BLOCK ? n : s + NMS_BLOCK;
    __m128 any = _mm_setzero_ps();
    __m128d hit = zero;
    for (int64_t j = s; j < e; j += 4) { /* mostly none: boxes far apart */
      __m128 y = _mm_and_ps(_mm_cmplt_ps(_mm_loadu_ps(kb->lo_y + j), f_hi_y),
                            _mm_cmplt_ps(f_lo_y, _mm_loadu_ps(kb->hi_y + j)));
      __m128 x = _mm_and_ps(_mm_cmplt_ps(_mm_loadu_ps(kb->lo_x + j), f_hi_x),
                            _mm_cmplt_ps(f_lo_x, _mm_loadu_ps(kb->hi_x + j)));
      any = _mm_or_ps(any, _mm_and_ps(y, x));
    }
    if (!_mm_movemask_ps(any)) continue;
    for (int64_t j = s; j < e; j += 2) {
      __m128d h = _mm_sub_pd(_mm_min_pd(hi_y, _mm_loadu_pd(k->hi_y + j)),
                             _mm_max_pd(lo_y, _mm_loadu_pd(k->lo_y + j)));
      __m128d w = _mm_sub_pd(_mm_min_pd(hi_x, _mm_loadu_pd(k->hi_x + j)),
                             _mm_max_pd(lo_x, _mm_loadu_pd(k->lo_x + j)));
      __m128d inter = _mm_mul_pd(h, w);
      __m128d uni = _mm_sub_pd(_mm_add_pd(area, _mm_loadu_pd(k->area + j)), inter);
      __m128d sides = _mm_and_pd(_mm_cmpgt_pd(h, zero), _mm_cmpgt_pd(w, zero));
      __m128d iou = _mm_and_pd(_mm_cmpgt_pd(uni, zero), _mm_cmpgt_pd(_mm_div_pd(inter, uni), thr));
      hit = _mm_or_pd(hit, _mm_and_pd(sides, iou));
    }
    if (_mm_movemask_pd(hit)) return true;
  }
  return false;
}
#else
/* As above, one kept box at a time (no test on the bounds first). */
static bool nms_suppressed(const nms_boxes *k, const nms_bounds *kb, int64_t n,
                           const nms_boxes *all, int64_t i, double threshold) {
  (void)kb;
  for (int64_t j = 0; j < n; j++) {
    double h = fmin(all->hi_y[i], k->hi_y[j]) - fmax(all->lo_y[i], k->lo_y[j]);
    double w = fmin(all->hi_x[i], k->hi_x[j]) - fmax(all->lo_x[i], k->lo_x[j]);
    double inter = h * w, uni = all->area[i] + k->area[j] - inter;
    if (h > 0 && w > 0 && uni > 0 && inter / uni > threshold) return true;
  }
  return false;
}
#endif

/* The scratch of a selection: the candidates, the boxes of the batch, the kept boxes
 * that can suppress (the active ones) with their bounds, and every kept box's index. */
typedef struct nms_scratch {
  nms_candidate *cand;
  nms_boxes all, kept;
  nms_bounds kept_bounds;
  int64_t *kept_box;
} nms_scratch;

/* Box i of w->all kept as active box k; the slots after it (the lanes up to the next
 * multiple of 4) boxes that overlap none. */
static void nms_keep(nms_scratch *w, int64_t k, int64_t i) {
  nms_copy(&w->kept, k, &w->all, i);
  nms_bounds *b = &w->kept_bounds;
  b->lo_y[k] = nms_down(w->all.lo_y[i]), b->lo_x[k] = nms_down(w->all.lo_x[i]);
  b->hi_y[k] = nms_up(w->all.hi_y[i]), b->hi_x[k] = nms_up(w->all.hi_x[i]);
  for (int64_t j = k + 1; j < k + 4; j++) {
    w->kept.lo_y[j] = w->kept.lo_x[j] = b->lo_y[j] = b->lo_x[j] = INFINITY;
    w->kept.hi_y[j] = w->kept.hi_x[j] = b->hi_y[j] = b->hi_x[j] = -INFINITY;
    w->kept.area[j] = 0;
  }
}

/* One class of one batch (its boxes in w->all): the indexes of the boxes it keeps, in
 * w->kept_box, and their number. */
static int64_t nms_class(const kl_nms *p, int64_t b, int64_t cls, nms_scratch *w) {
  int64_t n = 0, n_kept = 0, n_active = 0;
  for (int64_t i = 0; i < p->count; i++) {
    size_t at = (size_t)((b * p->classes + cls) * p->count + i);
    double s = kl_load_f64(p->scores, p->scores_dtype, at);
    if (!p->has_score_threshold || s > p->score_threshold) w->cand[n++] = (nms_candidate){s, i};
  }
  qsort(w->cand, (size_t)n, sizeof *w->cand, nms_order);
  for (int64_t i = 0; i < n && n_kept < p->max_per_class; i++) {
    int64_t box = w->cand[i].box;
    if (nms_active(&w->all, box)) {
      if (nms_suppressed(&w->kept, &w->kept_bounds, n_active, &w->all, box,
                         p->iou_threshold))
        continue;
      nms_keep(w, n_active++, box);
    }
    w->kept_box[n_kept++] = box;
  }
  return n_kept;
}

kiln_status kl_nms_select(const kl_nms *p, int64_t *out, int64_t rows, int64_t *selected,
                          kl_err *e) {
  *selected = 0;
  if (p->count == 0 || p->max_per_class <= 0) return KILN_OK;
  /* per box: a candidate and its corners; per box that can be kept: an index, corners
   * again and their bounds, and 3 more boxes of those (the lanes after the last) */
  int64_t most = p->max_per_class < p->count ? p->max_per_class : p->count;
  size_t per_box = sizeof(nms_candidate) + 5 * sizeof(double);
  size_t per_kept = sizeof(int64_t) + 5 * sizeof(double) + 4 * sizeof(float), a, k, bytes;
  if (kl_mul_overflow_size((size_t)p->count, per_box, &a) ||
      kl_mul_overflow_size((size_t)most + 3, per_kept, &k) || kl_add_overflow_size(a, k, &bytes))
    return kl_fail(e, KILN_ERR_LIMIT, "%lld boxes are too many", (long long)p->count);
  nms_scratch w;
  w.cand = malloc(bytes);
  if (!w.cand) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "no memory for %lld boxes",
                              (long long)p->count);
  double *d = (double *)(w.cand + p->count);
  double **all[5] = {&w.all.lo_y, &w.all.lo_x, &w.all.hi_y, &w.all.hi_x, &w.all.area};
  double **kept[5] = {&w.kept.lo_y, &w.kept.lo_x, &w.kept.hi_y, &w.kept.hi_x, &w.kept.area};
  for (int j = 0; j < 5; j++) *all[j] = d + j * p->count;
  float **bounds[4] = {&w.kept_bounds.lo_y, &w.kept_bounds.lo_x, &w.kept_bounds.hi_y,
                       &w.kept_bounds.hi_x};
  for (int j = 0; j < 5; j++) *kept[j] = d + 5 * p->count + j * (most + 3);
  w.kept_box = (int64_t *)(d + 5 * p->count + 5 * (most + 3));
  float *f = (float *)(w.kept_box + most);
  for (int j = 0; j < 4; j++) *bounds[j] = f + j * (most + 3);
  for (int64_t b = 0; b < p->batches; b++) {
    for (int64_t i = 0; i < p->count; i++) nms_box(p, b, i, &w.all, i);
    for (int64_t cls = 0; cls < p->classes; cls++) {
      int64_t n = nms_class(p, b, cls, &w);
      for (int64_t j = 0; j < n && *selected + j < rows; j++) {
        int64_t *row = out + (*selected + j) * 3;
        row[0] = b, row[1] = cls, row[2] = w.kept_box[j];
      }
      *selected += n;
    }
  }
  free(w.cand);
  return KILN_OK;
}

static kiln_status nms_check(const kl_infer_ctx *c) {
  int64_t center = kl_attr_int(c->node, "center_point_box", 0);
  if (center != 0 && center != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "center_point_box is %lld, expected 0 or 1",
                   (long long)center);
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "boxes", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "scores", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 2, "max_output_boxes_per_class", KL_DT(KL_I64));
  if (st == KILN_OK) st = kl_check_dtype(c, 3, "iou_threshold", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 4, "score_threshold", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "boxes", 3, 3);
  if (st == KILN_OK) st = kl_check_rank(c, 1, "scores", 3, 3);
  static const char *const scalars[] = {"max_output_boxes_per_class", "iou_threshold",
                                         "score_threshold"};
  for (int i = 2; st == KILN_OK && i < 5; i++) {
    st = kl_check_rank(c, i, scalars[i - 2], 0, 1);
    if (st == KILN_OK) st = kl_more_expect_dim(c, i, scalars[i - 2], 0, 1, "a single value");
  }
  if (st == KILN_OK) st = kl_more_expect_dim(c, 0, "boxes", 2, 4, "4 coordinates per box");
  const kl_type *boxes = c->in[0];
  if (st == KILN_OK && boxes->rank == 3)
    st = kl_more_expect_dim(c, 1, "scores", 0, boxes->dims[0].size, "boxes' batch size");
  if (st == KILN_OK && boxes->rank == 3)
    st = kl_more_expect_dim(c, 1, "scores", 2, boxes->dims[1].size, "boxes' box count");
  return st;
}

/* The selection's parameters when every input's contents are known. */
static bool nms_from_data(const kl_infer_ctx *c, kl_nms *p) {
  const kl_type *boxes = c->in[0], *scores = c->in[1];
  double v;
  memset(p, 0, sizeof *p);
  p->boxes = kl_infer_data(c, 0);
  p->scores = kl_infer_data(c, 1);
  if (!kl_type_is_concrete(boxes) || !kl_type_is_concrete(scores)) return false;
  p->batches = boxes->dims[0].size;
  p->count = boxes->dims[1].size;
  p->classes = scores->dims[1].size;
  int64_t n_boxes, n_scores;
  if (!kl_type_numel(boxes, &n_boxes) || !kl_type_numel(scores, &n_scores) ||
      (n_boxes > 0 && !p->boxes) || (n_scores > 0 && !p->scores))
    return false;
  p->boxes_dtype = boxes->dtype;
  p->scores_dtype = scores->dtype;
  p->center_point_box = kl_attr_int(c->node, "center_point_box", 0) == 1;
  for (int i = 2; i < 5; i++)
    if (kl_infer_in(c, i) && !kl_read_scalar(c, i, &v)) return false;
  /* absent: no output, threshold 0, no score threshold */
  if (kl_read_scalar(c, 2, &v)) p->max_per_class = kl_load_i64(kl_infer_data(c, 2), KL_I64, 0);
  if (kl_read_scalar(c, 3, &v)) p->iou_threshold = v;
  p->has_score_threshold = kl_read_scalar(c, 4, &p->score_threshold);
  return true;
}

int kl_infer_nms(kl_infer_ctx *c) {
  kiln_status st = nms_check(c);
  if (st != KILN_OK) return st;
  kl_type *y = &c->out[0];
  kl_type_unknown_dims(y, KL_I64, 2);
  y->dims[1] = kl_dim_of(3);
  kl_nms p;
  int64_t selected;
  if (!nms_from_data(c, &p)) return KILN_OK;
  /* the selection compares each candidate with every box kept before it: at load it is
   * made only when that is quick (the run bounds it with max_work) */
  double most = (double)(p.max_per_class < p.count ? p.max_per_class : p.count);
  double pairs = (double)p.batches * (double)p.classes * (double)p.count * most;
  if (!c->at_run && pairs > NMS_LOAD_MAX_PAIRS) return KILN_OK;
  st = kl_nms_select(&p, NULL, 0, &selected, c->e);
  y->dims[0] = kl_dim_of(selected);
  return st;
}

/* ---- RoiAlign ---- */

kiln_status kl_roi_align_init(const kl_node *node, kl_roi_align *r, kl_err *e) {
  const char *mode = kl_attr_string(node, "mode", "avg");
  const char *ctm = kl_attr_string(node, "coordinate_transformation_mode", "half_pixel");
  r->max_mode = strcmp(mode, "max") == 0;
  r->half_pixel = strcmp(ctm, "half_pixel") == 0;
  r->out_h = kl_attr_int(node, "output_height", 1);
  r->out_w = kl_attr_int(node, "output_width", 1);
  r->sampling_ratio = kl_attr_int(node, "sampling_ratio", 0);
  r->spatial_scale = kl_attr_float(node, "spatial_scale", 1.0f);
  if (!r->max_mode && strcmp(mode, "avg") != 0)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "mode is '%s', expected avg or max", mode);
  if (!r->half_pixel && strcmp(ctm, "output_half_pixel") != 0)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "coordinate_transformation_mode is '%s', "
                   "expected half_pixel or output_half_pixel", ctm);
  if (r->out_h < 1 || r->out_w < 1)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "output_height %lld and output_width %lld: "
                   "expected at least 1", (long long)r->out_h, (long long)r->out_w);
  if (r->sampling_ratio < 0)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "sampling_ratio is %lld, expected at least 0",
                   (long long)r->sampling_ratio);
  if (!isfinite(r->spatial_scale))
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "spatial_scale is %g", r->spatial_scale);
  return KILN_OK;
}

/* Every batch index must name a batch of X, once the indices are known. */
static kiln_status roi_check_indices(const kl_infer_ctx *c) {
  const kl_type *x = c->in[0], *idx = c->in[2];
  const void *data = kl_infer_data(c, 2);
  int64_t n;
  if (!data || x->rank != 4 || !kl_dim_known(x->dims[0]) || !kl_type_numel(idx, &n))
    return KILN_OK;
  for (int64_t i = 0; i < n; i++) {
    int64_t b = kl_load_i64(data, idx->dtype, (size_t)i);
    if (b < 0 || b >= x->dims[0].size)
      return kl_fail(c->e, KILN_ERR_SHAPE, "batch_indices[%lld] is %lld, expected 0 to %lld",
                     (long long)i, (long long)b, (long long)x->dims[0].size - 1);
  }
  return KILN_OK;
}

int kl_infer_roi_align(kl_infer_ctx *c) {
  kl_roi_align r;
  kiln_status st = kl_roi_align_init(c->node, &r, c->e);
  if (st == KILN_OK) st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 2, "batch_indices", KL_DTS_INDEX);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 4, 4);
  if (st == KILN_OK) st = kl_check_rank(c, 1, "rois", 2, 2);
  if (st == KILN_OK) st = kl_check_rank(c, 2, "batch_indices", 1, 1);
  if (st == KILN_OK) st = kl_more_expect_dim(c, 1, "rois", 1, 4, "x1, y1, x2, y2");
  const kl_type *x = c->in[0], *rois = c->in[1], *idx = c->in[2];
  bool ok = true;
  kl_dim n_rois = kl_dim_merge(rois->rank == 2 ? rois->dims[0] : kl_dim_unknown(),
                               idx->rank == 1 ? idx->dims[0] : kl_dim_unknown(), &ok);
  if (st == KILN_OK && !ok)
    st = kl_fail(c->e, KILN_ERR_SHAPE, "input 2 (batch_indices) has %lld values, expected "
                 "%lld (one per roi)", (long long)idx->dims[0].size, (long long)rois->dims[0].size);
  if (st == KILN_OK) st = roi_check_indices(c);
  /* a roi samples the image bilinearly: an image of no rows or columns has nothing to
   * sample (when there are rois to pool) */
  for (int d = 2; st == KILN_OK && x->rank == 4 && d < 4; d++)
    if (kl_dim_known(x->dims[d]) && x->dims[d].size == 0 &&
        !(kl_dim_known(n_rois) && n_rois.size == 0))
      st = kl_fail(c->e, KILN_ERR_SHAPE, "input 0 (X) has %s 0: there is no image to "
                   "sample the rois from", d == 2 ? "height" : "width");
  if (st != KILN_OK) return st;
  kl_type *y = &c->out[0];
  kl_type_unknown_dims(y, x->dtype, 4);
  y->dims[0] = n_rois;
  if (x->rank == 4) y->dims[1] = x->dims[1];
  y->dims[2] = kl_dim_of(r.out_h);
  y->dims[3] = kl_dim_of(r.out_w);
  return kl_check_out_numel(c, y);
}

/* ---- DeformConv ----
 * X [N, C, D1..Dr], W [M, C / group, k1..kr], offset [N, offset_group * K * r, O1..Or]
 * (K = k1 * .. * kr), B [M]?, mask [N, offset_group * K, O1..Or]? -> Y [N, M, O1..Or],
 * with the output dims of a convolution of the same window. */

static kiln_status deform_check_inputs(const kl_infer_ctx *c) {
  static const char *const names[] = {"X", "W", "offset", "B", "mask"};
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  for (int i = 1; st == KILN_OK && i < 5; i++) st = kl_check_same_dtype(c, 0, i);
  for (int i = 0; st == KILN_OK && i < 5; i++)
    st = kl_check_rank(c, i, names[i], i == 3 ? 1 : 3, i == 3 ? 1 : KL_MAX_RANK);
  int rank = c->in[0]->rank;
  for (int i = 1; st == KILN_OK && rank >= 0 && i < 5; i++) {
    const kl_type *t = kl_infer_in(c, i);
    if (i != 3 && t && t->rank >= 0 && t->rank != rank)
      st = kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has rank %d, expected %d like input 0 "
                   "(X)", i, names[i], t->rank, rank);
  }
  return st;
}

/* Channel counts: C splits into group (and offset_group) parts, M into group ones. */
static kiln_status deform_channels(const kl_infer_ctx *c, int64_t group, int64_t offset_group) {
  const kl_type *x = c->in[0], *w = c->in[1];
  if (group < 1 || offset_group < 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "group %lld and offset_group %lld: expected "
                   "at least 1", (long long)group, (long long)offset_group);
  int64_t cin = x->rank >= 2 ? x->dims[1].size : -1, m = w->rank >= 1 ? w->dims[0].size : -1;
  int64_t per_group = w->rank >= 2 ? w->dims[1].size : -1;
  if (cin >= 0 && per_group >= 0 && cin != per_group * group)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (W) takes %lld channels per group, so %lld "
                   "in %lld groups, but input 0 (X) has %lld", (long long)per_group,
                   (long long)(per_group * group), (long long)group, (long long)cin);
  if (m >= 0 && m % group != 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "%lld output channels do not split into %lld groups",
                   (long long)m, (long long)group);
  if (cin >= 0 && cin % offset_group != 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "%lld input channels do not split into %lld offset "
                   "groups", (long long)cin, (long long)offset_group);
  return kl_more_expect_dim(c, 3, "B", 0, m, "one per output channel");
}

/* offset and mask: offset_group * K (* r) channels and the output's spatial dims. */
static kiln_status deform_offsets(const kl_infer_ctx *c, const kl_window *w, int64_t groups,
                                  const kl_type *y) {
  int64_t taps = groups;
  for (int i = 0; i < w->n && taps >= 0; i++)
    if (w->kernel[i] < 0 || __builtin_mul_overflow(taps, w->kernel[i], &taps)) taps = -1;
  int64_t coords = taps >= 0 && !__builtin_mul_overflow(taps, w->n, &coords) ? coords : -1;
  kiln_status st = kl_more_expect_dim(c, 2, "offset", 1, coords, "offset_group * kernel "
                                      "positions * spatial dims");
  if (st == KILN_OK) st = kl_more_expect_dim(c, 4, "mask", 1, taps, "offset_group * kernel "
                                             "positions");
  for (int i = 0; st == KILN_OK && i < w->n; i++) {
    st = kl_more_expect_dim(c, 2, "offset", 2 + i, y->dims[2 + i].size, "the output's size");
    if (st == KILN_OK)
      st = kl_more_expect_dim(c, 4, "mask", 2 + i, y->dims[2 + i].size, "the output's size");
  }
  for (int k = 2; st == KILN_OK && k < 5; k += 2)
    st = kl_more_expect_dim(c, k, k == 2 ? "offset" : "mask", 0, y->dims[0].size, "X's batch");
  return st;
}

int kl_infer_deform_conv(kl_infer_ctx *c) {
  int64_t group = kl_attr_int(c->node, "group", 1), og = kl_attr_int(c->node, "offset_group", 1);
  kiln_status st = deform_check_inputs(c);
  if (st == KILN_OK) st = deform_channels(c, group, og);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0], *wt = c->in[1];
  kl_type *y = &c->out[0];
  int rank = x->rank >= 0 ? x->rank : wt->rank;
  kl_type_unknown(y, x->dtype);
  if (rank < 0) return KILN_OK;
  int64_t kernel[KL_MAX_RANK];
  for (int i = 0; i < rank - 2; i++) kernel[i] = wt->rank >= 0 ? wt->dims[2 + i].size : -1;
  kl_window w;
  if ((st = kl_window_init(c->node, rank - 2, kernel, &w, c->e)) != KILN_OK) return st;
  kl_type_unknown_dims(y, x->dtype, rank);
  y->dims[0] = x->rank >= 0 ? x->dims[0] : kl_dim_unknown();
  y->dims[1] = wt->rank >= 0 ? wt->dims[0] : kl_dim_unknown();
  for (int i = 0; i < rank - 2 && st == KILN_OK; i++) {
    int64_t in = x->rank >= 0 ? x->dims[2 + i].size : -1, out = -1;
    if (in >= 0) st = kl_window_out(&w, i, in, &out, c->e);
    y->dims[2 + i] = kl_dim_of(out);
    const kl_type *off = c->in[2];
    if (out < 0 && off->rank == rank) y->dims[2 + i] = off->dims[2 + i]; /* may be a symbol */
  }
  if (st == KILN_OK) st = deform_offsets(c, &w, og, y);
  return st;
}

/* ---- Det: X [*, M, M] -> [*] ---- */

int kl_infer_det(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 2, KL_MAX_RANK);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_type *y = &c->out[0];
  kl_type_unknown(y, x->dtype);
  if (x->rank < 0) return KILN_OK;
  bool ok = true;
  kl_dim_merge(x->dims[x->rank - 2], x->dims[x->rank - 1], &ok);
  if (!ok)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 (X) has %lld x %lld matrices, expected "
                   "square ones", (long long)x->dims[x->rank - 2].size,
                   (long long)x->dims[x->rank - 1].size);
  y->rank = x->rank - 2;
  for (int i = 0; i < y->rank; i++) y->dims[i] = x->dims[i];
  return KILN_OK;
}

/* ---- BitCast: the same bytes as another dtype of the same width ---- */

int kl_infer_bitcast(kl_infer_ctx *c) {
  const kl_attr *to = kl_node_attr(c->node, "to");
  if (!to || to->kind != KL_ATTR_INT)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "attribute 'to' (an int) is required");
  if (to->i < 0 || to->i > 31 || !kl_dtype_valid((int)to->i))
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "to is %lld (%s), a dtype kiln does not store",
                   (long long)to->i,
                   to->i >= 0 && to->i <= 31 ? kl_dtype_name((kl_dtype)to->i) : "unknown");
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "input", KL_DTS_ANY);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_dtype dt = (kl_dtype)to->i;
  if (x->dtype != KL_UNDEFINED && kl_dtype_size(x->dtype) != kl_dtype_size(dt))
    return kl_fail(c->e, KILN_ERR_DTYPE, "input 0 is %s (%zu bytes), but to is %s (%zu bytes); "
                   "BitCast keeps the width", kl_dtype_name(x->dtype), kl_dtype_size(x->dtype),
                   kl_dtype_name(dt), kl_dtype_size(dt));
  c->out[0] = *x;
  c->out[0].dtype = dt;
  return KILN_OK;
}

/* ---- TensorScatter ----
 * past_cache [B, D1.., S, ..Dn], update [B, D1.., s, ..Dn] (s <= S along `axis`),
 * write_indices [B]? -> present_cache, past_cache's type. */

static kiln_status scatter_shapes(const kl_infer_ctx *c, int axis) {
  const kl_type *past = c->in[0], *upd = c->in[1];
  if (upd->rank >= 0 && upd->rank != past->rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (update) has rank %d, expected %d like "
                   "input 0 (past_cache)", upd->rank, past->rank);
  for (int i = 0; upd->rank >= 0 && i < past->rank; i++) {
    kl_dim p = past->dims[i], u = upd->dims[i];
    if (!kl_dim_known(p) || !kl_dim_known(u)) continue;
    if (i != axis && p.size != u.size)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (update) has %lld at dim %d, expected %lld "
                     "like input 0 (past_cache)", (long long)u.size, i, (long long)p.size);
    if (i == axis && u.size > p.size)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (update) has %lld entries along axis %d, "
                     "more than the cache's %lld", (long long)u.size, i, (long long)p.size);
  }
  return kl_more_expect_dim(c, 2, "write_indices", 0, past->dims[0].size, "the batch size");
}

/* In linear mode every write must fit: 0 <= index and index + s <= S. */
static kiln_status scatter_indices(const kl_infer_ctx *c, int axis) {
  const kl_type *past = c->in[0], *upd = c->in[1], *idx = kl_infer_in(c, 2);
  const void *data = kl_infer_data(c, 2);
  int64_t n;
  if (!idx || !data || !kl_type_numel(idx, &n) || upd->rank < 0 ||
      !kl_dim_known(past->dims[axis]) || !kl_dim_known(upd->dims[axis]))
    return KILN_OK;
  int64_t cap = past->dims[axis].size, len = upd->dims[axis].size;
  for (int64_t i = 0; i < n; i++) {
    int64_t at = kl_load_i64(data, KL_I64, (size_t)i);
    if (at < 0 || at > cap - len)
      return kl_fail(c->e, KILN_ERR_SHAPE, "write_indices[%lld] is %lld: %lld entries from "
                     "there do not fit the cache's %lld (mode linear)", (long long)i,
                     (long long)at, (long long)len, (long long)cap);
  }
  return KILN_OK;
}

int kl_infer_tensor_scatter(kl_infer_ctx *c) {
  const char *mode = kl_attr_string(c->node, "mode", "linear");
  bool circular = strcmp(mode, "circular") == 0;
  if (!circular && strcmp(mode, "linear") != 0)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "mode is '%s', expected linear or circular",
                   mode);
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "past_cache", KL_DTS_ANY);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 2, "write_indices", KL_DT(KL_I64));
  if (st == KILN_OK) st = kl_check_rank(c, 0, "past_cache", 2, KL_MAX_RANK);
  if (st == KILN_OK) st = kl_check_rank(c, 2, "write_indices", 1, 1);
  if (st != KILN_OK) return st;
  const kl_type *past = c->in[0];
  c->out[0] = *past;
  if (past->rank < 0) return KILN_OK;
  int axis;
  st = kl_norm_axis(c, kl_attr_int(c->node, "axis", -2), past->rank, "axis", &axis);
  if (st == KILN_OK && axis == 0)
    st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "axis is the batch dim 0; expected a later one");
  if (st == KILN_OK) st = scatter_shapes(c, axis);
  if (st == KILN_OK && !circular) st = scatter_indices(c, axis);
  return st;
}

/* ---- kiln.Check: the inputs after the code, passed through ---- */

int kl_infer_check(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "code", KL_DT(KL_I64));
  if (st == KILN_OK && c->in[0]->rank > 0)
    st = kl_fail(c->e, KILN_ERR_SHAPE, "input 0 (code) has rank %d, expected a scalar",
                 c->in[0]->rank);
  if (st == KILN_OK && c->n_out != c->n_in - 1)
    st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%d inputs after the code but %d outputs; "
                 "Check passes each input through", c->n_in - 1, c->n_out);
  for (int k = 1; k < c->n_in && st == KILN_OK; k++) {
    if (!c->in[k]) st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "input %d is absent", k);
    else c->out[k - 1] = *c->in[k];
  }
  return st;
}
