/* Grouped convolutions of few channels a group over channels-last tensors
 * (dnnl_gconv.h), on the level's gconv primitive (isa_fns.h, kl_conv_fns).
 *
 * oneDNN 2.6's jit:avx2 runs a convolution of 8 channels a group (RegNet's) at 30 to
 * 38 GFLOP/s on one Zen 3 core, channels-last or blocked alike: its kernel blocks the
 * output channels by 8 and a group has only one such block. kiln's keeps a group's 8
 * outputs of 8 pixels in registers and streams the group's weights once for them.
 *
 * Each task is a run of output rows, as many tasks as threads (gc_task); the activation
 * follows on each row while it is in the cache. */
#include "backends/cpu/dnnl_gconv.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"

#include <stdlib.h>
#include <string.h>

#define GC_MAX_TAPS 64 /* a 7x7 kernel and more than a 5x5 one: the taps of a pixel */
#define GC_MAX_CO 16   /* the output channels a group this kernel beats oneDNN at */
#define GC_MAX_CI 32
#define GC_EDGE 8 /* pixels a patch at a row's ends covers: one full block of the kernel */

struct kl_gconv_plan {
  const kl_isa_fns *fns;
  kl_dnnl_engine *eng;
  size_t patch_off, patch_bytes; /* a task's patch in eng's workspace (0: none needed) */
  int slots;                     /* tasks with a patch each */
  kl_gconv_shape s;
  kl_gconv d;
  int64_t inner_lo, inner_hi; /* output columns whose window lies within X's */
  float *w, *zeros; /* packed weights; ((OW - 1) * stride + 1) * C zeros: the taps in the
                     * padding, for a run of pixels as for one */
  size_t w_bytes;
  bool has_act;
  kl_act act;
};

bool kl_gconv_fits(const kl_gconv_shape *s) {
  if (s->groups < 2 || s->c % s->groups != 0 || s->k % s->groups != 0 || s->n < 1 ||
      s->oh < 1 || s->ow < 1 || s->sh < 1 || s->sw < 1 || s->dh < 1 || s->dw < 1)
    return false;
  int64_t ci = s->c / s->groups, co = s->k / s->groups;
  return co % 8 == 0 && co <= GC_MAX_CO && ci <= GC_MAX_CI && s->kh * s->kw <= GC_MAX_TAPS;
}

kiln_status kl_gconv_create(kl_dnnl_engine *eng, int threads, const kl_gconv_shape *s,
                            const float *w, const kl_node *n, kl_gconv_plan **out, kl_err *e) {
  *out = NULL;
  kl_gconv_plan *p = calloc(1, sizeof *p);
  if (!p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a convolution's plan");
  bool has;
  if (!kl_isa_fused_act(n, &has, &p->act)) { /* the caller checked it */
    free(p);
    return kl_fail(e, KILN_ERR_INTERNAL, "a convolution with an activation kiln lacks");
  }
  p->has_act = has;
  p->fns = kl_cpu_isa_fns(kl_isa_level());
  p->s = *s;
  p->eng = eng;
  p->slots = threads < 1 ? 1 : threads;
  size_t g = (size_t)s->groups, ci = (size_t)(s->c / s->groups), co = (size_t)(s->k / s->groups);
  size_t k = (size_t)(s->kh * s->kw);
  p->d = (kl_gconv){g, ci, co, k, NULL, NULL};
  p->w_bytes = sizeof(float) * g * k * ci * co;
  p->w = malloc(p->w_bytes);
  p->zeros = calloc((size_t)((s->ow - 1) * s->sw + 1) * (size_t)s->c, sizeof(float));
  if (!p->w || !p->zeros) {
    kl_gconv_free(p);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory packing a grouped "
                   "convolution's weights (%zu bytes)", sizeof(float) * g * k * ci * co);
  }
  /* W [g co + o][c][t] -> [g][t][c][o] */
  for (size_t gi = 0; gi < g; gi++)
    for (size_t o = 0; o < co; o++)
      for (size_t c = 0; c < ci; c++)
        for (size_t t = 0; t < k; t++)
          p->w[((gi * k + t) * ci + c) * co + o] = w[((gi * co + o) * ci + c) * k + t];
  p->d.w = p->w;
  kl_isa_inner_cols(s->w, s->kw, s->dw, s->sw, s->pl, s->ow, &p->inner_lo, &p->inner_hi);
  if (p->inner_lo > 0 || p->inner_hi < s->ow) { /* patches at the rows' ends (gc_task) */
    int64_t np = s->ow < GC_EDGE ? s->ow : GC_EDGE;
    int64_t pw = (np - 1) * s->sw + (s->kw - 1) * s->dw + 1;
    p->patch_bytes = sizeof(float) * (size_t)(s->kh * pw * s->c);
    size_t used = 0;
    p->patch_off = kl_dnnl_ws_take(&used, p->patch_bytes * (size_t)p->slots);
    if (kl_dnnl_ws_reserve(eng, used) != dnnl_success) {
      kl_gconv_free(p);
      return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a grouped convolution's "
                     "workspace (%zu bytes)", used);
    }
  }
  *out = p;
  return KILN_OK;
}

void kl_gconv_free(kl_gconv_plan *p) {
  if (!p) return;
  free(p->w);
  free(p->zeros);
  free(p);
}

size_t kl_gconv_held_bytes(const kl_gconv_plan *p) { return p ? p->w_bytes : 0; }

typedef struct gc_job {
  const kl_gconv_plan *p;
  kl_gconv d; /* the plan's, with this run's bias */
  const float *x;
  float *y;
  int64_t per; /* rows a task */
} gc_job;

/* The taps of output pixel (oy, ox) of image n: X's pixels, or zeros. */
static void window(const kl_gconv_plan *p, const float *x, int64_t n, int64_t oy, int64_t ox,
                   const float **taps) {
  const kl_gconv_shape *s = &p->s;
  for (int64_t ky = 0; ky < s->kh; ky++) {
    int64_t iy = oy * s->sh - s->pt + ky * s->dh;
    for (int64_t kx = 0; kx < s->kw; kx++) {
      int64_t ix = ox * s->sw - s->pl + kx * s->dw;
      bool in = iy >= 0 && iy < s->h && ix >= 0 && ix < s->w;
      *taps++ = in ? x + ((n * s->h + iy) * s->w + ix) * s->c : p->zeros;
    }
  }
}

/* Output pixels x0 .. x0 + np - 1 of row oy of image n from a patch: the columns their
 * windows read, copied from X (zeros in the padding), kh rows of them, so that the
 * pixels at a row's ends go to the primitive as one run with the inner ones next to
 * them (one at a time, a pixel's sums form fewer chains: slower). */
static void from_patch(const gc_job *j, float *patch, int64_t n, int64_t oy, int64_t x0,
                       int64_t np, float *y) {
  const kl_gconv_plan *p = j->p;
  const kl_gconv_shape *s = &p->s;
  int64_t pw = (np - 1) * s->sw + (s->kw - 1) * s->dw + 1, left = x0 * s->sw - s->pl;
  size_t row = sizeof(float) * (size_t)s->c;
  const float *taps[GC_MAX_TAPS];
  for (int64_t ky = 0; ky < s->kh; ky++) {
    int64_t iy = oy * s->sh - s->pt + ky * s->dh;
    float *dst = patch + ky * pw * s->c;
    for (int64_t col = 0; col < pw; col++, dst += s->c) {
      int64_t ix = left + col;
      if (iy >= 0 && iy < s->h && ix >= 0 && ix < s->w)
        memcpy(dst, j->x + ((n * s->h + iy) * s->w + ix) * s->c, row);
      else
        memset(dst, 0, row);
    }
    for (int64_t kx = 0; kx < s->kw; kx++)
      taps[ky * s->kw + kx] = patch + (ky * pw + kx * s->dw) * s->c;
  }
  p->fns->conv->gconv(&j->d, taps, (size_t)(s->sw * s->c), (size_t)np, y, (size_t)s->k);
}

/* Output row oy of image n: the pixels at its ends from patches (when their windows
 * reach into the padding), the ones between straight from X in one run (the taps of rows
 * in the padding reading zeros). Where the padding reaches past a patch, the pixels
 * whose windows reach into it go one at a time. */
static void gc_row(const gc_job *j, float *patch, int64_t n, int64_t oy) {
  const kl_gconv_plan *p = j->p;
  const kl_gconv_shape *s = &p->s;
  const float *taps[GC_MAX_TAPS];
  float *yrow = j->y + (n * s->oh + oy) * s->ow * s->k;
  int64_t a = 0, b = s->ow; /* the pixels between the patches */
  if (patch) {
    int64_t np = s->ow < GC_EDGE ? s->ow : GC_EDGE;
    a = p->inner_lo > 0 ? np : 0;
    b = p->inner_hi < s->ow ? (s->ow - np > a ? s->ow - np : a) : s->ow;
    if (a >= b || (p->inner_lo <= a && p->inner_hi >= b)) { /* the pixels between inside */
      if (a > 0) from_patch(j, patch, n, oy, 0, a, yrow);
      if (b < s->ow) from_patch(j, patch, n, oy, b, s->ow - b, yrow + b * s->k);
    } else {
      a = 0, b = s->ow;
    }
  }
  for (int64_t ox = a; ox < b; ox++) {
    bool inner = ox >= p->inner_lo && ox < p->inner_hi;
    int64_t end = inner ? (p->inner_hi < b ? p->inner_hi : b) : ox + 1;
    window(p, j->x, n, oy, ox, taps);
    p->fns->conv->gconv(&j->d, taps, (size_t)(s->sw * s->c), (size_t)(end - ox),
                        yrow + ox * s->k, (size_t)s->k);
    ox = end - 1;
  }
  if (p->has_act) p->fns->elt->unary(&p->act, yrow, yrow, (size_t)(s->ow * s->k));
}

/* Task t: rows t per .. (t + 1) per - 1 of the N OH output rows, with patch t. */
static void gc_task(void *arg, int64_t t) {
  const gc_job *j = arg;
  const kl_gconv_plan *p = j->p;
  int64_t rows = p->s.n * p->s.oh, end = (t + 1) * j->per < rows ? (t + 1) * j->per : rows;
  float *patch = p->patch_bytes
                     ? (float *)((char *)p->eng->ws + p->patch_off + (size_t)t * p->patch_bytes)
                     : NULL;
  for (int64_t r = t * j->per; r < end; r++) gc_row(j, patch, r / p->s.oh, r % p->s.oh);
}

kiln_status kl_gconv_run(const kl_gconv_plan *p, const kl_kernel_ctx *c, const float *x,
                         float *y, const float *bias) {
  const kl_gconv_shape *s = &p->s;
  gc_job j = {p, p->d, x, y, 0};
  j.d.bias = bias;
  int64_t rows = s->n * s->oh, tasks = kl_isa_threads(c);
  tasks = tasks < p->slots ? tasks : p->slots; /* a patch each */
  tasks = tasks < rows ? tasks : rows;
  tasks = tasks < 1 ? 1 : tasks;
  j.per = (rows + tasks - 1) / tasks;
  tasks = (rows + j.per - 1) / j.per;
  kl_dnnl_ws_enter(p->eng);
  kl_isa_parallel(c, tasks, rows * s->ow * s->k * (s->c / s->groups) * s->kh * s->kw, gc_task,
                  &j);
  return KILN_OK;
}
