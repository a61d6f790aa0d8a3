/* Convolutions as kiln's matrix product (dnnl_im2col.h): Y [n oh ow, k] = A W, where
 * row r of A holds the kh kw c input values output position r reads, tap by tap (c
 * channels of one input pixel at a time, contiguous in a channels-last X; zeros in the
 * padding), and W [kh kw c, k] is the weights permuted to that order and packed once
 * in the product's panels (kl_gemv_pack). A is never made whole: the product packs its
 * rows in groups of KL_GEMM_ROWS (run_gemv.c), and this file's rows callback gathers
 * each group straight from X into that packed form, through a small buffer of
 * IM_CHUNK channels per row and the level's own pack. Bias, Sum and the activation
 * are the product's epilogue. */
#include "backends/cpu/dnnl_im2col.h"
#include "backends/cpu/dnnl_wino.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"

#include <stdlib.h>
#include <string.h>

#define IM_CHUNK 256 /* channels per gathered piece: KL_GEMM_ROWS x 256 floats, 6 KiB */
/* The most output positions (kl_im2col_fits). Measured on a Zen 3 core (AVX2, one
 * thread, min of 30 runs, a loaded machine): a 3x3 stride-2 convolution 512 -> 1024 at
 * 7x7 out 5.9-8.4 ms against oneDNN's direct 9.6-9.9, 256 -> 512 at 14x14 6.0-7.9
 * against 6.4-8.6, 128 -> 256 at 28x28 (784 positions) 7.2-8.5 against 6.0-7.3. */
#define IM_MAX_ROWS 256

struct kl_im2col {
  kl_dnnl_engine *eng;
  const kl_isa_fns *fns;
  kl_im2col_shape s;
  int64_t rows, depth;  /* n oh ow rows of kh kw c */
  float *w, *w_tail;    /* the packed weights: whole panels, the partial last one */
  size_t w_bytes;
  size_t scratch_bytes; /* the packed rows, in the workspace */
  size_t x_off, y_off;  /* and X's, Y's channels-last copies (when held plain) */
  bool has_act;
  kl_act act;
};

bool kl_im2col_fits(const kl_im2col_shape *s) {
  int64_t rows = s->n * s->oh * s->ow;
  return s->kh * s->kw > 1 && s->c * s->kh * s->kw >= 64 && s->k >= 16 && rows >= 2 &&
         rows <= IM_MAX_ROWS;
}

kiln_status kl_im2col_create(kl_dnnl_engine *eng, const kl_im2col_shape *s, const float *w,
                             const kl_node *n, kl_im2col **out, kl_err *e) {
  *out = NULL;
  kl_im2col *p = calloc(1, sizeof *p);
  if (!p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a convolution's plan");
  p->eng = eng;
  p->fns = kl_cpu_isa_fns(kl_isa_level());
  p->s = *s;
  p->rows = s->n * s->oh * s->ow;
  int64_t taps = s->kh * s->kw;
  p->depth = taps * s->c;
  bool has;
  if (!kl_isa_fused_act(n, &has, &p->act)) { /* the caller checked it */
    free(p);
    return kl_fail(e, KILN_ERR_INTERNAL, "a convolution with an activation kiln lacks");
  }
  p->has_act = has;
  /* W [k][c][t] -> [k][t][c], then the panels */
  size_t count = (size_t)(s->k * p->depth);
  float *perm = malloc(sizeof(float) * count);
  int64_t whole = s->k / KL_GEMV_PANEL * KL_GEMV_PANEL;
  size_t full = sizeof(float) * (size_t)(whole * p->depth);
  size_t tail = whole < s->k ? sizeof(float) * (size_t)(KL_GEMV_PANEL * p->depth) : 0;
  void *mem = NULL;
  if (!perm || posix_memalign(&mem, 64, full + tail ? full + tail : 64) != 0) {
    free(perm);
    free(p);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory packing a convolution's "
                   "weights (%zu bytes)", full + tail);
  }
  for (int64_t ko = 0; ko < s->k; ko++)
    for (int64_t ci = 0; ci < s->c; ci++)
      for (int64_t t = 0; t < taps; t++)
        perm[(ko * taps + t) * s->c + ci] = w[(ko * s->c + ci) * taps + t];
  p->w = mem;
  p->w_tail = tail ? p->w + whole * p->depth : NULL;
  p->w_bytes = full + tail;
  kl_gemv_pack(p->fns, perm, true, p->depth, s->k, p->w, p->w_tail);
  free(perm);
  size_t used = 0; /* the tensors exist, so these byte counts do not overflow */
  p->scratch_bytes = kl_gemv_scratch_bytes(p->rows, p->depth);
  kl_dnnl_ws_take(&used, p->scratch_bytes);
  if (!s->x_cl) p->x_off = kl_dnnl_ws_take(&used, sizeof(float) * (size_t)(s->n * s->h * s->w * s->c));
  if (!s->y_cl) p->y_off = kl_dnnl_ws_take(&used, sizeof(float) * (size_t)(p->rows * s->k));
  if (kl_dnnl_ws_reserve(eng, used) != dnnl_success) {
    size_t bytes = used;
    kl_im2col_free(p);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the workspace of a "
                   "convolution (%zu bytes of packed rows)", bytes);
  }
  *out = p;
  return KILN_OK;
}

void kl_im2col_free(kl_im2col *p) {
  if (!p) return;
  free(p->w);
  free(p);
}

size_t kl_im2col_held_bytes(const kl_im2col *p) { return p ? p->w_bytes : 0; }

typedef struct im_job {
  const kl_im2col *p;
  const float *x;
} im_job;

/* Rows r0 .. r0 + count - 1 of A, packed as the level's pack packs rows. */
static void gather_rows(const void *arg, const kl_isa_fns *f, int64_t r0, size_t count,
                        float *out) {
  const im_job *j = arg;
  const kl_im2col_shape *s = &j->p->s;
  float buf[KL_GEMM_ROWS * IM_CHUNK];
  const float *src[KL_GEMM_ROWS];
  int64_t oy[KL_GEMM_ROWS], ox[KL_GEMM_ROWS], img[KL_GEMM_ROWS];
  for (size_t i = 0; i < count; i++) {
    int64_t r = r0 + (int64_t)i;
    ox[i] = r % s->ow;
    oy[i] = r / s->ow % s->oh;
    img[i] = r / (s->ow * s->oh);
  }
  for (int64_t ky = 0; ky < s->kh; ky++)
    for (int64_t kx = 0; kx < s->kw; kx++) {
      for (size_t i = 0; i < count; i++) {
        int64_t iy = oy[i] * s->sh - s->pt + ky * s->dh, ix = ox[i] * s->sw - s->pl + kx * s->dw;
        src[i] = iy < 0 || iy >= s->h || ix < 0 || ix >= s->w
                     ? NULL
                     : j->x + ((img[i] * s->h + iy) * s->w + ix) * s->c;
      }
      float *at = out + (ky * s->kw + kx) * s->c * KL_GEMM_ROWS;
      for (int64_t c0 = 0; c0 < s->c; c0 += IM_CHUNK) {
        size_t cc = (size_t)(s->c - c0 < IM_CHUNK ? s->c - c0 : IM_CHUNK);
        for (size_t i = 0; i < count; i++) {
          if (src[i]) memcpy(buf + i * cc, src[i] + c0, sizeof(float) * cc);
          else memset(buf + i * cc, 0, sizeof(float) * cc);
        }
        f->gemv->pack(buf, cc, count, at + c0 * KL_GEMM_ROWS);
      }
    }
}

kiln_status kl_im2col_run(kl_im2col *p, const kl_kernel_ctx *c, const float *x, float *y,
                          const float *bias, const float *sum) {
  const kl_im2col_shape *s = &p->s;
  char *ws = p->eng->ws;
  kl_dnnl_ws_enter(p->eng);
  float *ys = s->y_cl ? y : (float *)(ws + p->y_off);
  if (!s->x_cl) {
    float *xt = (float *)(ws + p->x_off);
    kl_cl_transpose(p->fns, c, x, xt, s->n, s->c, s->h * s->w, true);
    x = xt;
  }
  if (!s->y_cl && sum) { /* Sum is held as Y: into Y's channels-last copy, added in place */
    kl_cl_transpose(p->fns, c, sum, ys, s->n, s->k, s->oh * s->ow, true);
    sum = ys;
  }
  im_job j = {p, x};
  kl_gemv_args a = {.w = p->w, .w_tail = p->w_tail, .k = p->depth, .n = s->k, .m = p->rows,
                    .alpha = 1.0f, .add = bias, .add_step = 1, .add_row = 0, .add_scale = 1.0f,
                    .sum = sum, .sum_step = 1, .sum_row = s->k, .has_act = p->has_act,
                    .act = p->act, .y = ys, .scratch = (float *)ws, .rows = gather_rows,
                    .rows_arg = &j};
  kiln_status st = kl_run_gemv(c, p->fns, &a);
  if (st == KILN_OK && !s->y_cl) kl_cl_transpose(p->fns, c, ys, y, s->n, s->k, s->oh * s->ow, false);
  return st;
}
