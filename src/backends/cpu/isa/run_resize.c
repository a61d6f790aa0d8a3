/* Resize of float32 images along their last two dims, nearest or bilinear without
 * antialiasing (torchvision's detection transforms, FPN upsampling): the reference's
 * own tables of taps (kl_ref_resize_taps: every coordinate transformation and nearest
 * mode as it reads them), with each output row's two source rows and each output
 * column's two source columns read from them once, then each plane's rows made from
 * them in float, on the node's threads (tasks of planes and runs of rows). Nearest
 * copies the picked pixel, exactly as the reference: an output row that picks the same
 * source row as the one before is a copy of that row, and where each source column is
 * picked twice in a row (an upsampling by 2, the usual nearest2d), the columns go in
 * pairs instead of through the table. GhostNetV2's 14 upsamplings by 2 took 1.9 ms at
 * 1 thread on a Zen 3 through the table row by row, where onnxruntime took 0.8. Anything else (more taps, other
 * dims resized, tf_crop_and_resize's extrapolation, other dtypes) runs the reference.
 * Plain C, the same at every level.
 */
#include "backends/cpu/isa/run.h"
#include "backends/cpu/ref/ref.h"
#include "backends/cpu/ref/resize.h"

#include <stdlib.h>
#include <string.h>

#define ROWS_PER_TASK_MIN 4096 /* output elements per task, at least */

typedef struct resize_job {
  const float *x;
  float *y;
  bool nearest, pairs; /* pairs: nearest, output column ox picks source column ox / 2 */
  int64_t h, w, oh, ow, planes, rows_per, row_tasks;
  const int64_t *iy0, *iy1, *ix0, *ix1; /* source rows (times w) and columns */
  const float *wy0, *wy1, *wx0, *wx1;
} resize_job;

static void resize_task(void *arg, int64_t t) {
  const resize_job *j = arg;
  int64_t p = t / j->row_tasks, r0 = t % j->row_tasks * j->rows_per;
  int64_t r1 = r0 + j->rows_per < j->oh ? r0 + j->rows_per : j->oh;
  const float *x = j->x + p * j->h * j->w;
  float *y = j->y + p * j->oh * j->ow;
  for (int64_t oy = r0; oy < r1; oy++) {
    float *out = y + oy * j->ow;
    const float *a = x + j->iy0[oy];
    if (j->nearest) {
      if (oy > r0 && j->iy0[oy] == j->iy0[oy - 1]) { /* the row above again */
        memcpy(out, out - j->ow, sizeof(float) * (size_t)j->ow);
      } else if (j->pairs) {
        int64_t half = j->ow / 2;
        for (int64_t i = 0; i < half; i++) out[2 * i] = out[2 * i + 1] = a[i];
        if (j->ow % 2) out[j->ow - 1] = a[half];
      } else {
        for (int64_t ox = 0; ox < j->ow; ox++) out[ox] = a[j->ix0[ox]];
      }
      continue;
    }
    const float *b = x + j->iy1[oy];
    float wa = j->wy0[oy], wb = j->wy1[oy];
    for (int64_t ox = 0; ox < j->ow; ox++) {
      int64_t c0 = j->ix0[ox], c1 = j->ix1[ox];
      float u = j->wx0[ox], v = j->wx1[ox];
      out[ox] = wa * (u * a[c0] + v * a[c1]) + wb * (u * b[c0] + v * b[c1]);
    }
  }
}

/* Dim d's taps as two sources (times stride) and two float weights per output index;
 * false when it has more than two taps or samples outside the input. */
static bool two_taps(const kl_resize_taps *t, int64_t out, int64_t stride, int64_t *i0,
                     int64_t *i1, float *w0, float *w1) {
  if (t->n > 2) return false;
  for (int64_t o = 0; o < out; o++) {
    if (t->outside[o]) return false;
    const int64_t *idx = t->idx + o * t->n;
    const double *w = t->w + o * t->n;
    i0[o] = idx[0] * stride, w0[o] = (float)w[0];
    i1[o] = (t->n == 2 ? idx[1] : idx[0]) * stride, w1[o] = t->n == 2 ? (float)w[1] : 0.0f;
  }
  return true;
}

int kl_run_resize(kl_kernel_ctx *c, const kl_isa_fns *f) {
  (void)f;
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int r = x->rank;
  if (x->dtype != KL_F32 || y->dtype != KL_F32 || r < 2 || y->rank != r) return kl_isa_ref(c);
  kl_resize_attrs a;
  kl_resize_taps t[KL_MAX_RANK];
  void *block = NULL;
  kiln_status st = kl_ref_resize_taps(c, x, 1, &a, t, &block);
  if (st != KILN_OK) {
    free(block);
    return st;
  }
  bool ok = (a.mode == KL_RESIZE_NEAREST || a.mode == KL_RESIZE_LINEAR) && x->dims[r - 2] > 0 &&
            x->dims[r - 1] > 0;
  int64_t planes = 1;
  for (int d = 0; d < r - 2 && ok; d++) { /* the outer dims copied as they are */
    ok = y->dims[d] == x->dims[d] && t[d].n == 1;
    for (int64_t o = 0; o < y->dims[d] && ok; o++) ok = t[d].idx[o] == o && t[d].w[o] == 1;
    planes *= x->dims[d];
  }
  resize_job j = {.x = x->data, .y = y->data, .nearest = a.mode == KL_RESIZE_NEAREST,
                  .h = x->dims[r - 2], .w = x->dims[r - 1], .oh = y->dims[r - 2],
                  .ow = y->dims[r - 1], .planes = planes};
  int64_t n = kl_tensor_numel(y);
  int64_t *idx = ok ? malloc(sizeof(int64_t) * 2 * (size_t)(j.oh + j.ow + 1)) : NULL;
  float *w = ok ? malloc(sizeof(float) * 2 * (size_t)(j.oh + j.ow + 1)) : NULL;
  if (ok && idx && w) {
    int64_t *iy0 = idx, *iy1 = iy0 + j.oh, *ix0 = iy1 + j.oh, *ix1 = ix0 + j.ow;
    float *wy0 = w, *wy1 = wy0 + j.oh, *wx0 = wy1 + j.oh, *wx1 = wx0 + j.ow;
    ok = two_taps(&t[r - 2], j.oh, j.w, iy0, iy1, wy0, wy1) &&
         two_taps(&t[r - 1], j.ow, 1, ix0, ix1, wx0, wx1);
    j.iy0 = iy0, j.iy1 = iy1, j.ix0 = ix0, j.ix1 = ix1;
    j.wy0 = wy0, j.wy1 = wy1, j.wx0 = wx0, j.wx1 = wx1;
    j.pairs = ok && j.nearest;
    for (int64_t ox = 0; ox < j.ow && j.pairs; ox++) j.pairs = ix0[ox] == ox / 2;
  }
  free(block);
  if (!ok || !idx || !w) { /* (out of memory too: the reference says so) */
    free(idx);
    free(w);
    return kl_isa_ref(c);
  }
  if (n > 0) {
    j.rows_per = j.oh;
    int64_t tasks = kl_isa_split(j.oh, ROWS_PER_TASK_MIN / (j.ow > 0 ? j.ow : 1) + 1,
                                 &j.rows_per);
    j.row_tasks = tasks;
    kl_isa_parallel(c, planes * tasks, n * 4, resize_task, &j);
  }
  free(idx);
  free(w);
  return KILN_OK;
}
