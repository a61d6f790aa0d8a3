/* kiln's bfloat16 matrix product on AMX tiles (run.h, kl_run_amx; the primitives are
 * isa_fns.h's kl_amx_fns): the precision-bf16 Gemm and MatMul nodes with constant
 * weights that dnnl.c hands here at the AMX level instead of to oneDNN's matmul.
 *
 * Why: inside a model the weights come from memory, not cache (BERT-base's 85 M
 * weights are 170 MB in bf16, read once per run), and oneDNN 2.6's AMX matmul does not
 * fetch them ahead of its sums: alone, with the same weights every call, a 128 x 768 x
 * 3072 product took 0.55 ms on one core of a 2-core Sapphire Rapids VM, with weights
 * from memory 0.84 ms, the weights' own time from memory (4.7 MB at ~16 GB/s, 0.29 ms)
 * added on top of the sums. Here each task walks its run of panels front to back, and
 * while the blocks of rows meet one panel, the next panel is fetched into L2, an even
 * share of its lines each step of each block (kl_amx_fns.block's pf).
 *
 * The rows of x are packed once per run into blocks of KL_AMX_ROWS (bfloat16, k padded
 * to whole steps, the rows past m zeros); each panel then meets every block in turn
 * (the panel stays in L2 for all of them), the block's 32 x 32 sums go to a buffer on
 * the stack and from there through the epilogue into y, rounded to bfloat16 last when
 * y is held so: a bias [N] and the activation in one pass (kl_amx_fns.out), any other
 * epilogue through run_gemv.c's, row by row. The tasks are as many as the threads, each a run of
 * (panel, block) units in panel order.
 * (Tried and left: gathering a block's sums over 4 panels before the epilogue, so that
 * its calls run over 128 outputs instead of 32: BERT-base's 128 x 3072 x 768 product
 * took 0.92 ms against 0.71 at 1 thread, the 768 KiB of weights read again for each
 * block keeping L1 and L2 busier.) */
#include "backends/cpu/isa/run.h"

#include <stdlib.h>
#include <string.h>

#define AMX_PANEL_ELEMS ((int64_t)2 * 16 * KL_AMX_STEP) /* bf16 of one step of a panel */

static int64_t steps_of(int64_t k) { return (k + KL_AMX_STEP - 1) / KL_AMX_STEP; }
static int64_t panels_of(int64_t n) { return (n + KL_AMX_COLS - 1) / KL_AMX_COLS; }

size_t kl_amx_weights_bytes(int64_t k, int64_t n) {
  return (size_t)panels_of(n) * (size_t)steps_of(k) * AMX_PANEL_ELEMS * sizeof(uint16_t);
}

size_t kl_amx_scratch_bytes(int64_t m, int64_t k) {
  int64_t blocks = (m + KL_AMX_ROWS - 1) / KL_AMX_ROWS;
  return (size_t)(blocks * KL_AMX_ROWS) * (size_t)(steps_of(k) * KL_AMX_STEP) *
         sizeof(uint16_t);
}

void kl_amx_pack_weights(const kl_amx_fns *amx, const float *w, bool nk, int64_t k, int64_t n,
                         uint16_t *out) {
  int64_t steps = steps_of(k), panels = panels_of(n);
  /* out is [panel][step][tile][r][j][e]: output 32 p + 16 t + j, input 32 s + 2 r + e */
  for (int64_t p = 0; p < panels; p++)
    for (int64_t s = 0; s < steps; s++) {
      if (amx && (p + 1) * KL_AMX_COLS <= n && (s + 1) * KL_AMX_STEP <= k) {
        if (nk) amx->pack_nk(w + p * KL_AMX_COLS * k + s * KL_AMX_STEP, (size_t)k, out);
        else amx->pack_kn(w + s * KL_AMX_STEP * n + p * KL_AMX_COLS, (size_t)n, out);
        out += AMX_PANEL_ELEMS;
        continue;
      }
      for (int t = 0; t < 2; t++)
        for (int r = 0; r < 16; r++)
          for (int j = 0; j < 16; j++)
            for (int e = 0; e < 2; e++) {
              int64_t o = p * KL_AMX_COLS + 16 * t + j, i = s * KL_AMX_STEP + 2 * r + e;
              *out++ = o < n && i < k ? kl_f32_to_bf16(w[nk ? o * k + i : i * n + o]) : 0;
            }
    }
}

typedef struct amx_job {
  const kl_isa_fns *f;
  const kl_amx_fns *amx;
  const kl_amx_args *a;
  const float *add, *sum; /* the addends as the epilogue reads them (resolve_addend) */
  bool fused;             /* amx->out makes the epilogue (out_rows) */
  int64_t kp, steps, blocks, panels, per;
} amx_job;

/* Block b's rows of x into the scratch as bfloat16, kp apart, zeros past k and past m. */
static void pack_task(void *arg, int64_t b) {
  const amx_job *j = arg;
  const kl_amx_args *a = j->a;
  int64_t r0 = b * KL_AMX_ROWS, rows = a->m - r0 < KL_AMX_ROWS ? a->m - r0 : KL_AMX_ROWS;
  uint16_t *out = a->scratch + r0 * j->kp;
  if (a->x_bf16)
    for (int64_t r = 0; r < rows; r++) {
      memcpy(out + r * j->kp, (const uint16_t *)a->x + (r0 + r) * a->k,
             sizeof(uint16_t) * (size_t)a->k);
      memset(out + r * j->kp + a->k, 0, sizeof(uint16_t) * (size_t)(j->kp - a->k));
    }
  else
    j->amx->pack_rows((const float *)a->x + r0 * a->k, (size_t)a->k, (size_t)rows,
                      (size_t)j->kp, out);
  memset(out + rows * j->kp, 0, sizeof(uint16_t) * (size_t)((KL_AMX_ROWS - rows) * j->kp));
}

/* The sums of a block's rows from r0 and the panel's columns from col (nc of them), in
 * cb (ldc floats a row), through the epilogue into y: the level's fused one when the
 * epilogue is at most a bias [N] and an activation (a Linear layer's), else
 * kl_gemv_epilogue row by row. */
static void out_rows(const amx_job *j, int64_t r0, int64_t col, int64_t nc, const float *cb,
                     int64_t ldc) {
  const kl_amx_args *a = j->a;
  int64_t rows = a->m - r0 < KL_AMX_ROWS ? a->m - r0 : KL_AMX_ROWS;
  if (j->fused) {
    size_t ysize = a->y_bf16 ? sizeof(uint16_t) : sizeof(float);
    j->amx->out(cb, (size_t)ldc, (size_t)rows, (size_t)nc, j->add ? j->add + col : NULL,
                a->epi.has_act ? &a->epi.act : NULL,
                (char *)a->y + (size_t)(r0 * a->n + col) * ysize, (size_t)a->n, a->y_bf16);
    return;
  }
  float row[KL_AMX_COLS];
  for (int64_t i = 0; i < rows; i++) {
    int64_t r = r0 + i;
    kl_gemv_args e = a->epi;
    e.add = j->add ? j->add + r * a->epi.add_row + col * a->epi.add_step : NULL;
    e.sum = j->sum ? j->sum + r * a->epi.sum_row + col * a->epi.sum_step : NULL;
    e.y = a->y_bf16 ? row : (float *)a->y + r * a->n + col;
    kl_gemv_epilogue(j->f, &e, 0, cb + i * ldc, nc);
    if (a->y_bf16) j->amx->to_bf16(row, (uint16_t *)a->y + r * a->n + col, (size_t)nc);
  }
}

/* Task t: its run of (panel, block) units, panel by panel: each block of rows meets
 * the panel (which stays in L2 for the blocks after it) and its sums go through the
 * epilogue into y; meanwhile, when the task goes on to the next panel, that panel's
 * lines are fetched, an even share at each step of each block. */
static void amx_task(void *arg, int64_t t) {
  const amx_job *j = arg;
  const kl_amx_args *a = j->a;
  int64_t units = j->panels * j->blocks;
  int64_t u0 = t * j->per, u1 = u0 + j->per < units ? u0 + j->per : units;
  int64_t panel = j->steps * AMX_PANEL_ELEMS, last = (u1 - 1) / j->blocks;
  int64_t lines = j->steps * 32, share = (32 + j->blocks - 1) / j->blocks;
  float cb[KL_AMX_ROWS * KL_AMX_COLS];
  j->amx->config();
  for (int64_t u = u0; u < u1; u++) {
    int64_t p = u / j->blocks, b = u % j->blocks;
    const uint16_t *wp = a->w + p * panel;
    const char *next = p < last ? (const char *)(wp + panel) : NULL;
    int64_t first = b * j->steps * share;
    int64_t count = !next || first >= lines ? 0 : lines - first;
    j->amx->block(a->scratch + b * KL_AMX_ROWS * j->kp, (size_t)j->kp, wp, (size_t)j->steps, cb,
                  KL_AMX_COLS, count ? next + 64 * first : NULL, (size_t)share, (size_t)count);
    int64_t col = p * KL_AMX_COLS;
    out_rows(j, b * KL_AMX_ROWS, col, a->n - col < KL_AMX_COLS ? a->n - col : KL_AMX_COLS, cb,
             KL_AMX_COLS);
  }
  j->amx->release();
}

/* An addend that shares y's buffer other than as y's own elements, read through a
 * copy (*copy); y's own elements are read in place, each before its output is made. */
static kiln_status resolve_addend(const kl_kernel_ctx *c, const kl_amx_args *a, const float **p,
                                  int64_t step, int64_t row, float **copy) {
  if (!*p) return KILN_OK;
  size_t ysize = a->y_bf16 ? sizeof(uint16_t) : sizeof(float);
  const char *y0 = a->y, *y1 = y0 + (size_t)(a->m * a->n) * ysize;
  int64_t count = (a->m - 1) * row + (a->n - 1) * step + 1;
  const char *p0 = (const char *)*p, *p1 = (const char *)(*p + count);
  if (p1 <= y0 || p0 >= y1) return KILN_OK;
  if (!a->y_bf16 && *p == a->y && step == 1 && row == a->n) return KILN_OK;
  return kl_gemv_addend_copy(c, p, count, copy);
}

kiln_status kl_run_amx(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_amx_fns *amx,
                       const kl_amx_args *a) {
  if (a->m <= 0 || a->n <= 0) return KILN_OK;
  amx_job j = {f, amx, a, a->epi.add, a->epi.sum, false, 0, 0, 0, 0, 0};
  float *add_copy = NULL, *sum_copy = NULL;
  kiln_status st = resolve_addend(c, a, &j.add, a->epi.add_step, a->epi.add_row, &add_copy);
  if (st == KILN_OK)
    st = resolve_addend(c, a, &j.sum, a->epi.sum_step, a->epi.sum_row, &sum_copy);
  /* alpha 1, no Sum, at most a bias [N]: the fused epilogue */
  j.fused = a->epi.alpha == 1.0f && !j.sum &&
            (!j.add || (a->epi.add_step == 1 && a->epi.add_row == 0 && a->epi.add_scale == 1.0f));
  if (st == KILN_OK) {
    j.steps = steps_of(a->k);
    j.kp = j.steps * KL_AMX_STEP;
    j.blocks = (a->m + KL_AMX_ROWS - 1) / KL_AMX_ROWS;
    j.panels = panels_of(a->n);
    int64_t work, threads = kl_isa_threads(c);
    if (__builtin_mul_overflow(a->m * a->n, a->k, &work)) work = INT64_MAX;
    kl_isa_parallel(c, j.blocks, a->m * a->k, pack_task, &j);
    /* as many tasks as threads, each an even run of (panel, block) units in panel
     * order: whole panels where they divide evenly, else shared by two tasks */
    int64_t units = j.panels * j.blocks, runs = threads < units ? threads : units;
    j.per = (units + runs - 1) / runs;
    runs = (units + j.per - 1) / j.per;
    kl_isa_parallel(c, runs, work, amx_task, &j);
  }
  free(add_copy);
  free(sum_copy);
  return st;
}
