/* NonMaxSuppression's selection (ir/infer_more.c, kl_nms_select: the candidates sorted
 * once, each compared with the kept boxes only, two at a time) against a plain
 * reference written here: the best remaining candidate picked by a scan, compared with
 * every box selected before it, one pair at a time. Random boxes (overlapping, some
 * with their corners the other way round, of no area, of negative size or with a NaN
 * coordinate) and scores (many ties, some NaN), both box formats, float32 and float64,
 * 0, 1, 7 and 1000 boxes, several batches and classes, max_output_boxes_per_class 0,
 * small and huge, the optional inputs absent or not; the outputs must be equal. Then
 * the work that max_work bounds (ir/work.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* ---- the reference ---- */

typedef struct nms_case {
  int64_t batches, classes, count;
  kl_dtype dt;
  bool center;           /* center_point_box = 1 */
  int n_in;              /* 2..5: inputs given */
  int64_t max_out;       /* input 2 */
  double iou, score_thr; /* inputs 3 and 4 */
} nms_case;

/* Box v as [lo_y, lo_x, hi_y, hi_x]. */
static void corners(const double *v, bool center, double *r) {
  if (center) {
    r[0] = v[1] - v[3] / 2, r[2] = v[1] + v[3] / 2;
    r[1] = v[0] - v[2] / 2, r[3] = v[0] + v[2] / 2;
  } else {
    r[0] = fmin(v[0], v[2]), r[2] = fmax(v[0], v[2]);
    r[1] = fmin(v[1], v[3]), r[3] = fmax(v[1], v[3]);
  }
}

/* Whether selected box a suppresses candidate b: both of positive area, an
 * intersection of positive sides, a positive union, IoU over the threshold. */
static bool suppresses(const double *a, const double *b, bool center, double iou) {
  double ra[4], rb[4];
  corners(a, center, ra);
  corners(b, center, rb);
  double area_a = (ra[2] - ra[0]) * (ra[3] - ra[1]);
  double area_b = (rb[2] - rb[0]) * (rb[3] - rb[1]);
  double h = fmin(ra[2], rb[2]) - fmax(ra[0], rb[0]);
  double w = fmin(ra[3], rb[3]) - fmax(ra[1], rb[1]);
  if (!(h > 0 && w > 0)) return false;
  double inter = h * w, uni = area_b + area_a - inter;
  if (!(area_a > 0 && area_b > 0 && uni > 0)) return false;
  return inter / uni > iou;
}

/* Whether score s (box i) goes before score t (box j): higher first, NaN last, ties by
 * the lower index. */
static bool before(double s, int64_t i, double t, int64_t j) {
  if (isnan(s) != isnan(t)) return !isnan(s);
  if (!isnan(s) && s != t) return s > t;
  return i < j;
}

/* The selection as rows of (batch, class, box) in out (room for every box of every
 * class); returns the row count. */
static int64_t reference(const nms_case *c, const double *boxes, const double *scores,
                         int64_t *out) {
  int64_t rows = 0, max_out = c->n_in > 2 ? c->max_out : 0;
  bool *used = calloc((size_t)c->count + 1, 1);
  int64_t *sel = calloc((size_t)c->count + 1, sizeof *sel);
  assert_non_null(used);
  assert_non_null(sel);
  for (int64_t b = 0; b < c->batches; b++)
    for (int64_t k = 0; k < c->classes; k++) {
      const double *sc = scores + (b * c->classes + k) * c->count;
      int64_t n_sel = 0;
      memset(used, 0, (size_t)c->count + 1);
      while (n_sel < max_out) {
        int64_t best = -1;
        for (int64_t i = 0; i < c->count; i++) {
          bool ok = c->n_in < 5 || sc[i] > c->score_thr;
          if (!used[i] && ok && (best < 0 || before(sc[i], i, sc[best], best))) best = i;
        }
        if (best < 0) break;
        used[best] = true;
        bool keep = true;
        for (int64_t j = 0; j < n_sel && keep; j++)
          keep = !suppresses(boxes + (b * c->count + sel[j]) * 4,
                             boxes + (b * c->count + best) * 4, c->center,
                             c->n_in > 3 ? c->iou : 0);
        if (!keep) continue;
        sel[n_sel++] = best;
        out[rows * 3] = b, out[rows * 3 + 1] = k, out[rows * 3 + 2] = best;
        rows++;
      }
    }
  free(used);
  free(sel);
  return rows;
}

/* ---- random cases ---- */

static uint64_t rng_state;

static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}

static double pick(int n) { return (double)(rnd() % (uint32_t)n); }

/* Random boxes over a field that grows with the count (so that some overlap and some
 * do not), in eighths or whole units (exact in float32; float64 ones often 1e-12 off
 * that grid): about 1 in 16 of no or negative size, 1 in 40 with a NaN coordinate, the
 * corner format's corners in either order. Scores in eighths (ties), 1 in 30 NaN. */
static void fill(const nms_case *c, double *boxes, double *scores) {
  double field = 4 + 8 * sqrt((double)c->count);
  int64_t nb = c->batches * c->count, ns = c->batches * c->classes * c->count;
  int unit = rnd() % 2 ? 8 : 1; /* whole units: IoUs of exactly 1/2 or 1/4 come often */
  for (int64_t i = 0; i < nb; i++) {
    double *v = boxes + i * 4;
    double y = pick((int)field * unit) / unit, x = pick((int)field * unit) / unit;
    double h = (1 + pick(6 * unit)) / unit, w = (1 + pick(6 * unit)) / unit;
    uint32_t odd = rnd() % 16;
    if (odd == 0) h = 0;
    if (odd == 1) w = -w;
    if (odd == 2) h = -h, w = -w;
    if (c->center) {
      v[0] = x, v[1] = y, v[2] = w, v[3] = h;
    } else {
      bool flip_y = rnd() % 4 == 0, flip_x = rnd() % 4 == 0;
      v[0] = flip_y ? y + h : y, v[2] = flip_y ? y : y + h;
      v[1] = flip_x ? x + w : x, v[3] = flip_x ? x : x + w;
    }
    if (c->dt == KL_F64 && rnd() % 2) /* off float32's grid: its bounds are rounded */
      for (int j = 0; j < 4; j++) v[j] += (pick(3) - 1) * 1e-12;
    if (rnd() % 40 == 0) v[rnd() % 4] = NAN;
  }
  for (int64_t i = 0; i < ns; i++) scores[i] = rnd() % 30 == 0 ? NAN : pick(9) / 8;
}

/* Runs case c through the fixture and the reference; the rows must be equal. */
static void check(tu_fixture *f, nms_case c_in) {
  nms_case *c = &c_in;
  size_t nb = (size_t)(c->batches * c->count * 4);
  size_t ns = (size_t)(c->batches * c->classes * c->count);
  double *boxes = malloc((nb + 1) * sizeof *boxes);
  double *scores = malloc((ns + 1) * sizeof *scores);
  size_t rows_room = (size_t)(c->batches * c->classes * c->count + 1) * 3;
  int64_t *want = malloc(rows_room * sizeof *want);
  assert_non_null(boxes);
  assert_non_null(scores);
  assert_non_null(want);
  fill(c, boxes, scores);
  tu_one_node(f, "NonMaxSuppression", c->n_in, 1);
  tu_attr_int(f, "center_point_box", c->center);
  tu_tensor(f, 0, c->dt, DIMS(c->batches, c->count, 4), boxes);
  tu_tensor(f, 1, c->dt, DIMS(c->batches, c->classes, c->count), scores);
  if (c->n_in > 2)
    tu_tensor_copy(f, 2, &(tu_in){.dt = KL_I64, .rank = 1, .dims = {1}, .data = &c->max_out});
  if (c->n_in > 3) tu_tensor(f, 3, c->dt, 0, NULL, VALS(c->iou));
  if (c->n_in > 4) tu_tensor(f, 4, c->dt, DIMS(1), VALS(c->score_thr));
  /* the values as the dtype holds them (the thresholds rounded to float32) */
  for (size_t i = 0; i < nb; i++) boxes[i] = kl_load_f64(f->tin[0].data, c->dt, i);
  for (size_t i = 0; i < ns; i++) scores[i] = kl_load_f64(f->tin[1].data, c->dt, i);
  if (c->n_in > 3) c->iou = kl_load_f64(f->tin[3].data, c->dt, 0);
  if (c->n_in > 4) c->score_thr = kl_load_f64(f->tin[4].data, c->dt, 0);
  int64_t rows = reference(c, boxes, scores, want);
  kiln_status st = tu_run(f);
  if (st != KILN_OK) fail_msg("run failed: %s", f->e.msg);
  const kl_tensor *y = &f->tout[0];
  if (y->rank != 2 || y->dims[0] != rows || y->dims[1] != 3)
    fail_msg("%lld boxes, %lld x %lld classes, center %d: %lld rows, expected %lld",
             (long long)c->count, (long long)c->batches, (long long)c->classes, c->center,
             (long long)y->dims[0], (long long)rows);
  const int64_t *got = y->data;
  for (int64_t i = 0; i < rows * 3; i++)
    if (got[i] != want[i])
      fail_msg("%lld boxes, center %d, max %lld, iou %g: row %lld is (%lld, %lld, %lld), "
               "expected (%lld, %lld, %lld)", (long long)c->count, c->center,
               (long long)c->max_out, c->iou, (long long)(i / 3), (long long)got[i / 3 * 3],
               (long long)got[i / 3 * 3 + 1], (long long)got[i / 3 * 3 + 2],
               (long long)want[i / 3 * 3], (long long)want[i / 3 * 3 + 1],
               (long long)want[i / 3 * 3 + 2]);
  free(boxes);
  free(scores);
  free(want);
}

static void test_nms_random(void **state) {
  tu_fixture *f = *state;
  static const int64_t counts[] = {0, 1, 2, 7, 64, 65, 129, 1000};
  static const double ious[] = {0, 0.25, 0.5, 0.7, 1};
  static const int64_t maxes[] = {0, 1, 3, 100, INT64_MAX};
  rng_state = 20;
  int cases = 0;
  for (size_t k = 0; k < TU_LEN(counts); k++)
    for (int trial = 0; trial < (counts[k] >= 1000 ? 6 : 24); trial++) {
      nms_case c = {.batches = 1 + rnd() % 3, .classes = 1 + rnd() % 3, .count = counts[k],
                    .dt = rnd() % 2 ? KL_F32 : KL_F64, .center = rnd() % 2,
                    .n_in = 2 + (int)(rnd() % 4), .iou = ious[rnd() % TU_LEN(ious)],
                    .score_thr = pick(9) / 8 - 0.125};
      c.max_out = rnd() % 3 ? INT64_MAX : maxes[rnd() % TU_LEN(maxes)];
      if (c.n_in == 2) c.n_in = 3; /* mostly: with no input 2 nothing is selected */
      check(f, c);
      cases++;
    }
  /* no input 2: nothing */
  check(f, (nms_case){.batches = 2, .classes = 2, .count = 7, .dt = KL_F32, .n_in = 2});
  assert_true(cases > 100);
}

/* Boxes that all overlap but never by more than the threshold, past the blocks the
 * selection tests at once: every box kept, in score order. */
static void test_nms_all_kept(void **state) {
  tu_fixture *f = *state;
  enum { N = 301 };
  double boxes[N * 4], scores[N];
  for (int i = 0; i < N; i++) {
    double d = i * 0.125;
    boxes[i * 4] = boxes[i * 4 + 1] = d;
    boxes[i * 4 + 2] = boxes[i * 4 + 3] = d + 1000;
    scores[i] = (double)((i * 37) % N) / N;
  }
  tu_one_node(f, "NonMaxSuppression", 4, 1);
  tu_tensor(f, 0, KL_F32, DIMS(1, N, 4), boxes);
  tu_tensor(f, 1, KL_F32, DIMS(1, 1, N), scores);
  tu_tensor(f, 2, KL_I64, DIMS(1), VALS(1000));
  tu_tensor(f, 3, KL_F32, DIMS(1), VALS(1)); /* an IoU is never over 1 */
  tu_expect_run(f);
  const kl_tensor *y = &f->tout[0];
  assert_int_equal(y->dims[0], N);
  const int64_t *got = y->data;
  for (int i = 1; i < N; i++)
    assert_true(scores[got[(i - 1) * 3 + 2]] > scores[got[i * 3 + 2]]);
  /* 0.999: the last box in score order among two neighbours is suppressed, and so on */
  tu_tensor(f, 3, KL_F32, DIMS(1), VALS(0.999));
  tu_expect_run(f);
  assert_true(f->tout[0].dims[0] < N);
}

/* An IoU equal to the threshold does not suppress: (0, 0, 2, 2) and (0, 0, 1, 2) overlap
 * by 2 / 4. */
static void test_nms_threshold_equal(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "NonMaxSuppression", 4, 1);
  tu_tensor(f, 0, KL_F32, DIMS(1, 2, 4), VALS(0, 0, 2, 2, 0, 0, 1, 2));
  tu_tensor(f, 1, KL_F32, DIMS(1, 1, 2), VALS(0.9, 0.8));
  tu_tensor(f, 2, KL_I64, DIMS(1), VALS(10));
  tu_tensor(f, 3, KL_F32, DIMS(1), VALS(0.5));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 0, 0, 0, 0, 0, 1);
  tu_tensor(f, 3, KL_F32, DIMS(1), VALS(0.4375));
  tu_expect_run(f);
  TU_EXPECT(f, 0, TU_EXACT, 0, 0, 0);
}

/* Two float64 boxes that overlap by a sliver of 1e-12 in y, which float32 would round
 * away: at IoU threshold 0 the second (lower score) is suppressed, whichever of the
 * four corners (the kept box's low or high, the candidate's low or high) is the one
 * off by the sliver. */
static void test_nms_sliver(void **state) {
  tu_fixture *f = *state;
  const double e = 1e-12;
  const double pairs[4][8] = {
      {1 - e, 0, 2, 1, 0, 0, 1, 1}, /* kept's low y below the candidate's high */
      {1, 0, 2, 1, 0, 0, 1 + e, 1}, /* the candidate's high y above the kept's low */
      {0, 0, 1, 1, 1 - e, 0, 2, 1}, /* the candidate's low y below the kept's high */
      {0, 0, 1 + e, 1, 1, 0, 2, 1}, /* the kept's high y above the candidate's low */
  };
  for (int k = 0; k < 4; k++) {
    tu_one_node(f, "NonMaxSuppression", 4, 1);
    tu_tensor(f, 0, KL_F64, DIMS(1, 2, 4), pairs[k]);
    tu_tensor(f, 1, KL_F64, DIMS(1, 1, 2), VALS(0.9, 0.8));
    tu_tensor(f, 2, KL_I64, DIMS(1), VALS(10));
    tu_tensor(f, 3, KL_F64, DIMS(1), VALS(0));
    tu_expect_run(f);
    TU_EXPECT(f, 0, TU_EXACT, 0, 0, 0);
  }
}

/* ---- the work max_work bounds ---- */

static void test_nms_work(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int in[3] = {tu_graph_value(g, "boxes"), tu_graph_value(g, "scores"),
               tu_graph_value(g, "max")};
  int out = tu_graph_value(g, "y");
  int n = tu_graph_node(g, KL_OP_NonMaxSuppression, "nms", 3, in, 1, &out);
  int64_t most = 10;
  kl_tensor boxes = {.dtype = KL_F32, .rank = 3, .dims = {2, 1000, 4}};
  kl_tensor scores = {.dtype = KL_F32, .rank = 3, .dims = {2, 3, 1000}};
  kl_tensor max_out = {.dtype = KL_I64, .rank = 1, .dims = {1}, .data = &most};
  const kl_tensor *t[3] = {&boxes, &scores, &max_out};
  /* per batch and class: the boxes read, sorted (1000 x 10) and each compared with at
   * most 10 kept ones; twice (inference, then the kernel) */
  double per = 1000 + 1000 * 10 + 1000 * 10;
  assert_true(kl_node_work(&g->nodes[n], 3, t, 0, NULL) >= 2 * 6 * per);
  assert_true(kl_node_work(&g->nodes[n], 3, t, 0, NULL) < 2 * 6 * per + 100000);
  /* max not known: every box may be kept */
  max_out.data = NULL;
  assert_true(kl_node_work(&g->nodes[n], 3, t, 0, NULL) >= 2 * 6 * 1000.0 * 1000);
  /* 0: nothing is selected, the inputs alone */
  most = 0;
  max_out.data = &most;
  assert_true(kl_node_work(&g->nodes[n], 3, t, 0, NULL) < 100000);
  kl_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TEST(test_nms_random),
      TU_TEST(test_nms_all_kept),
      TU_TEST(test_nms_threshold_equal),
      TU_TEST(test_nms_sliver),
      TU_TEST(test_nms_work),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
