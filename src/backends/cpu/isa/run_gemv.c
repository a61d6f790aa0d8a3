/* kiln's matrix product driver (run.h, kl_run_gemv): Gemm / MatMul nodes whose
 * weights are a constant float32 matrix, which dnnl.c hands here instead of to a oneDNN
 * primitive: every run of one row, and at the levels whose tiles beat oneDNN's
 * products (kl_gemv_fns.rows_fast) every run of more (below, "many rows").
 *
 * At one row a fully connected layer is a matrix-vector product: every weight is read
 * once and used for one multiply-add, so its speed is the speed at which the weights
 * stream from memory. They are packed once (kl_gemv_pack, or kl_gemv_pack_nk_inplace
 * over the model's own buffer when the session may take it) in panels of 16 outputs,
 * each panel k rows of 16 in one contiguous stream, whichever way the model holds them
 * (W [N, K]: Gemm transB=1, torch's Linear; W [K, N]: Gemm transB=0, MatMul): read
 * front to back, panel by panel, they stream at the memory's speed (isa_fns.h; on a
 * Zen 4 core from DRAM 24 GB/s, against 16-18 GB/s for four rows at a time of the
 * plain layouts, which run_gemv read before).
 * The panels are split into tasks of at least GEMV_TASK_BYTES of weights each, run on
 * the node's threads (kl_isa_parallel): one thread for a small layer. The products go
 * into y, then the epilogue makes y = act(alpha * xW + add_scale * add + sum) in
 * place, the activation through the level's unary primitive. When y shares its buffer
 * with sum (a fused node whose Sum dies there), the products are made GEMV_CHUNK at a
 * time into a buffer on the stack.
 */
#include "backends/cpu/isa/run.h"
#include "kl_config.h"

#include <stdlib.h>
#include <string.h>

/* Outputs per chunk when y shares its buffer with Sum, made in a buffer on the stack
 * (16 KiB, a whole number of panels); else they are made in y, a task at once. */
#define GEMV_CHUNK 4096
/* Weights per task, at least: enough to pay for a task. */
#define GEMV_TASK_BYTES (256 * 1024)

/* The panel of outputs at .. at+15 (len of them real) of W into panel: for W [n, k]
 * the transpose of its rows at .. at+len-1 (the level's transpose primitive), for
 * W [k, n] a piece of each row; the spare columns 0. */
static void pack_panel(const kl_isa_fns *f, const float *w, bool nk, int64_t k, int64_t n,
                       int64_t at, float *panel) {
  int64_t len = n - at < KL_GEMV_PANEL ? n - at : KL_GEMV_PANEL;
  if (nk)
    f->copy->transpose2d(sizeof(float), w + at * k, (size_t)k, panel, KL_GEMV_PANEL,
                         (size_t)len, (size_t)k);
  for (int64_t j = 0; j < k; j++) {
    float *row = panel + j * KL_GEMV_PANEL;
    if (!nk) memcpy(row, w + j * n + at, sizeof(float) * (size_t)len);
    for (int64_t l = len; l < KL_GEMV_PANEL; l++) row[l] = 0.0f;
  }
}

void kl_gemv_pack(const kl_isa_fns *f, const float *w, bool nk, int64_t k, int64_t n,
                  float *full, float *tail) {
  int64_t whole = n / KL_GEMV_PANEL * KL_GEMV_PANEL;
  for (int64_t at = 0; at < whole; at += KL_GEMV_PANEL)
    pack_panel(f, w, nk, k, n, at, full + at * k);
  if (whole < n) pack_panel(f, w, nk, k, n, whole, tail);
}

size_t kl_gemv_kn_seen_bytes(int64_t k, int64_t n) {
  return ((size_t)k * (size_t)(n / KL_GEMV_PANEL) + 7) / 8;
}

void kl_gemv_pack_kn_inplace(float *w, int64_t k, int64_t n, float *tail, uint8_t *seen) {
  int64_t whole = n / KL_GEMV_PANEL * KL_GEMV_PANEL, p = whole / KL_GEMV_PANEL;
  if (whole < n) pack_panel(NULL, w, false, k, n, whole, tail);
  if (whole == 0) return;
  /* rows of whole floats, one after the other (each moves back, never over a later one) */
  if (whole < n)
    for (int64_t j = 1; j < k; j++)
      memmove(w + j * whole, w + j * n, sizeof(float) * (size_t)whole);
  /* W is now [k, p] blocks of 16 floats; the panels are [p, k]: block s = j p + i goes
   * to i k + j. Each cycle of that permutation is followed once, a block at a time. */
  int64_t total = k * p;
  memset(seen, 0, kl_gemv_kn_seen_bytes(k, n));
  float carry[KL_GEMV_PANEL], next[KL_GEMV_PANEL];
  size_t block = sizeof carry;
  for (int64_t start = 0; start < total; start++) {
    if (seen[start >> 3] & (1u << (start & 7))) continue;
    memcpy(carry, w + start * KL_GEMV_PANEL, block);
    int64_t at = start;
    do {
      int64_t to = at % p * k + at / p;
      seen[to >> 3] |= (uint8_t)(1u << (to & 7));
      memcpy(next, w + to * KL_GEMV_PANEL, block);
      memcpy(w + to * KL_GEMV_PANEL, carry, block);
      memcpy(carry, next, block);
      at = to;
    } while (at != start);
  }
}

void kl_gemv_pack_nk_inplace(const kl_isa_fns *f, float *w, int64_t k, int64_t n, float *tail,
                             float *scratch) {
  int64_t whole = n / KL_GEMV_PANEL * KL_GEMV_PANEL;
  if (whole < n) pack_panel(f, w, true, k, n, whole, tail);
  for (int64_t at = 0; at < whole; at += KL_GEMV_PANEL) {
    /* rows at .. at+15 are the panel's floats already: the panel is their transpose */
    float *block = w + at * k;
    memcpy(scratch, block, sizeof(float) * (size_t)(KL_GEMV_PANEL * k));
    f->copy->transpose2d(sizeof(float), scratch, (size_t)k, block, KL_GEMV_PANEL,
                         KL_GEMV_PANEL, (size_t)k);
  }
}

typedef struct gemv_job {
  const kl_isa_fns *f;
  const kl_gemv_args *a;
  int64_t per;  /* outputs per task */
  bool direct;  /* the products go into y itself (sum is not in y's buffer) */
} gemv_job;

/* y[0:len] of the outputs from `at`, from their products in p (which may be y). */
void kl_gemv_epilogue(const kl_isa_fns *f, const kl_gemv_args *a, int64_t at, const float *p,
                     int64_t len) {
  float *y = a->y + at;
  const float alpha = a->alpha, scale = a->add_scale;
  const float *add = a->add ? a->add + at * a->add_step : NULL;
  const float *sum = a->sum ? a->sum + at * a->sum_step : NULL;
  if (alpha == 1.0f && (!add || scale == 1.0f) && (add || sum)) {
    /* the level's vector adds, in the same order: (p + add) + sum */
    const float *from = p;
    if (add) f->elt->binary(KL_BIN_ADD, from, 1, add, (size_t)a->add_step, y, (size_t)len);
    if (add) from = y;
    if (sum) f->elt->binary(KL_BIN_ADD, from, 1, sum, (size_t)a->sum_step, y, (size_t)len);
  } else if (alpha != 1.0f || add || sum)
    for (int64_t i = 0; i < len; i++) {
      float v = alpha * p[i];
      if (add) v += scale * add[i * a->add_step];
      if (sum) v += sum[i * a->sum_step];
      y[i] = v;
    }
  else if (p != y)
    memcpy(y, p, sizeof(float) * (size_t)len);
  if (a->has_act) f->elt->unary(&a->act, y, y, (size_t)len);
}

/* The products of outputs at .. at+len-1 (at a panel's start) into p: the whole panels
 * from w, the partial last one from w_tail. */
static void products(const gemv_job *j, int64_t at, int64_t len, float *p) {
  const kl_gemv_args *a = j->a;
  int64_t whole = a->n / KL_GEMV_PANEL * KL_GEMV_PANEL;
  int64_t in_whole = at >= whole ? 0 : at + len <= whole ? len : whole - at;
  if (in_whole > 0)
    j->f->gemv->panel(a->x, a->w + at * a->k, (size_t)a->k, p, (size_t)in_whole);
  if (in_whole < len)
    j->f->gemv->panel(a->x, a->w_tail, (size_t)a->k, p + in_whole, (size_t)(len - in_whole));
}

static void gemv_task(void *arg, int64_t t) {
  const gemv_job *j = arg;
  const kl_gemv_args *a = j->a;
  float part[GEMV_CHUNK];
  int64_t from = t * j->per, to = from + j->per < a->n ? from + j->per : a->n;
  int64_t chunk = j->direct ? to - from : GEMV_CHUNK;
  for (int64_t at = from; at < to; at += chunk) {
    int64_t len = to - at < chunk ? to - at : chunk;
    float *p = j->direct ? a->y + at : part;
    products(j, at, len, p);
    kl_gemv_epilogue(j->f, a, at, p, len);
  }
}

static void run_one_row(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_gemv_args *a) {
  int64_t panel_bytes = (a->k > 0 ? a->k : 1) * KL_GEMV_PANEL * (int64_t)sizeof(float);
  int64_t panels = (a->n + KL_GEMV_PANEL - 1) / KL_GEMV_PANEL, per;
  const float *sum_end = a->sum ? a->sum + (a->n - 1) * a->sum_step + 1 : NULL;
  gemv_job j = {f, a, 0, !a->sum || sum_end <= a->y || a->sum >= a->y + a->n};
  int64_t tasks = kl_isa_split(panels, GEMV_TASK_BYTES / panel_bytes + 1, &per);
  j.per = per * KL_GEMV_PANEL; /* outputs, a whole number of panels */
  kl_isa_parallel(c, tasks, a->k * a->n, gemv_task, &j);
}

/* ---- many rows: tiles ----
 * The rows of x are packed once per run in groups of at most KL_GEMM_ROWS (isa_fns.h),
 * as even as they divide (8 rows: 4 + 4, not 6 + 2; 128: 18 x 6 + 4 x 5): a tile of
 * fewer rows has fewer sums in flight than the FMA units' latency needs, and a group
 * of two took as long as a group of six. A task is a block of whole groups (at most
 * about GEMM_MC rows, the blocks of even size) times a run of panels; for each pass of
 * GEMM_KC steps of k, every panel's slice (16 x GEMM_KC floats, 16 KiB: L1) meets every
 * group of the block (at most GEMM_MC x GEMM_KC floats, 204 KiB: L2), each tile adding
 * its sums to what the passes before left in y, and fetching its share of the next
 * slice a line a step. A block of one or two groups (12 rows at most) takes all of k
 * in one pass instead: a slice meets too few tiles to pay for the passes, and panel
 * after panel whole is one stream front to back, as the one-row product reads them
 * (1 thread, both ways alternated run by run in one process, p50: 5x768x3072 10%
 * faster, 2x768x768 8%, 8x768x3072 8%, 8x1024x1024 7%, 12x768x3072 5%, 4x1024x1024
 * 2.5%; three groups or more lost with k = 3072). The epilogue runs over the task's
 * part of y at the end. */
#define GEMM_KC 256
#define GEMM_MC 204 /* the most rows of a block, a multiple of KL_GEMM_ROWS */
#define GEMM_ONE_PASS_GROUPS 2 /* blocks of this many groups or fewer: one pass */

typedef struct gemm_job {
  const kl_isa_fns *f;
  kl_gemv_args a;   /* the addends as the epilogue reads them (below, run_rows) */
  float *xp;        /* the packed rows */
  int64_t groups, per_block, blocks, panels, per_task; /* groups; per block; blocks; ... */
  int64_t kc;       /* steps of k per pass */
  bool acc_y;       /* y holds an addend already: the first pass adds to it */
} gemm_job;

/* The first row of group g of the job's rows (the first m % groups have one more). */
static int64_t group_row(const gemm_job *j, int64_t g) {
  int64_t base = j->a.m / j->groups, extra = j->a.m % j->groups;
  return g * base + (g < extra ? g : extra);
}

static void pack_task(void *arg, int64_t g) {
  const gemm_job *j = arg;
  int64_t k = j->a.k, r0 = group_row(j, g);
  size_t rows = (size_t)(group_row(j, g + 1) - r0);
  if (j->a.rows) j->a.rows(j->a.rows_arg, j->f, r0, rows, j->xp + g * KL_GEMM_ROWS * k);
  else j->f->gemv->pack(j->a.x + r0 * k, (size_t)k, rows, j->xp + g * KL_GEMM_ROWS * k);
}

/* The slice of kc steps from step s of panel p. */
static const float *slice(const kl_gemv_args *a, int64_t p, int64_t s) {
  int64_t whole = a->n / KL_GEMV_PANEL;
  return (p < whole ? a->w + p * KL_GEMV_PANEL * a->k : a->w_tail) + s * KL_GEMV_PANEL;
}

static void gemm_task(void *arg, int64_t t) {
  const gemm_job *j = arg;
  const kl_gemv_args *a = &j->a;
  int64_t k = a->k, n = a->n;
  int64_t g0 = t % j->blocks * j->per_block;
  int64_t g1 = g0 + j->per_block < j->groups ? g0 + j->per_block : j->groups;
  int64_t r0 = group_row(j, g0), r1 = group_row(j, g1), groups = g1 - g0;
  int64_t p0 = t / j->blocks * j->per_task;
  int64_t p1 = p0 + j->per_task < j->panels ? p0 + j->per_task : j->panels;
  for (int64_t s0 = 0; s0 < k; s0 += j->kc) {
    int64_t kc = k - s0 < j->kc ? k - s0 : j->kc;
    bool acc = s0 > 0 || j->acc_y;
    for (int64_t p = p0; p < p1; p++) {
      const float *wp = slice(a, p, s0);
      /* the slice after this one: the next panel's, or the first of the next pass; its
       * lines fetched by the block's tiles, an even share each */
      int64_t np = p + 1 < p1 ? p + 1 : p0, ns = p + 1 < p1 ? s0 : s0 + j->kc;
      int64_t nkc = ns < k ? (k - ns < j->kc ? k - ns : j->kc) : 0;
      const float *next = nkc ? slice(a, np, ns) : wp;
      int64_t share = (nkc + groups - 1) / groups;
      int64_t col = p * KL_GEMV_PANEL, nc = n - col < KL_GEMV_PANEL ? n - col : KL_GEMV_PANEL;
      for (int64_t g = g0; g < g1; g++) {
        int64_t r = group_row(j, g), rows = group_row(j, g + 1) - r;
        int64_t from = (g - g0) * share < nkc ? (g - g0) * share : nkc;
        int64_t count = nkc - from < share ? nkc - from : share;
        j->f->gemv->tile(j->xp + g * KL_GEMM_ROWS * k + s0 * KL_GEMM_ROWS, wp, (size_t)kc,
                         (size_t)rows, a->y + r * n + col, (size_t)n, (size_t)nc, acc,
                         next + from * KL_GEMV_PANEL, (size_t)count);
      }
    }
  }
  int64_t c0 = p0 * KL_GEMV_PANEL, c1 = p1 * KL_GEMV_PANEL < n ? p1 * KL_GEMV_PANEL : n;
  for (int64_t r = r0; r < r1 && c1 > c0; r++) {
    kl_gemv_args row = *a;
    row.y += r * n;
    if (row.add) row.add += r * a->add_row;
    if (row.sum) row.sum += r * a->sum_row;
    if (k == 0 && !j->acc_y) memset(row.y + c0, 0, sizeof(float) * (size_t)(c1 - c0));
    kl_gemv_epilogue(j->f, &row, c0, row.y + c0, c1 - c0);
  }
}

/* The elements an addend of m rows reads: [p, p + *count). */
static int64_t addend_count(const kl_gemv_args *a, int64_t step, int64_t row) {
  return (a->m - 1) * row + (a->n - 1) * step + 1;
}

/* An addend (its pointer *p, steps, and coefficient 1 or not) that shares y's buffer:
 * when it is y's own elements (and the product is not scaled), y keeps it and the
 * first pass adds to it (*acc_y); else it is read through a copy (*copy). */
static kiln_status resolve_addend(const kl_kernel_ctx *c, const kl_gemv_args *a,
                                  const float **p, int64_t step, int64_t row, bool unit,
                                  bool *acc_y, float **copy) {
  if (!*p) return KILN_OK;
  int64_t count = addend_count(a, step, row);
  if (*p + count <= a->y || *p >= a->y + a->m * a->n) return KILN_OK;
  if (*p == a->y && step == 1 && row == a->n && unit && a->alpha == 1.0f && !*acc_y) {
    *acc_y = true;
    *p = NULL;
    return KILN_OK;
  }
  return kl_gemv_addend_copy(c, p, count, copy);
}

kiln_status kl_gemv_addend_copy(const kl_kernel_ctx *c, const float **p, int64_t count,
                                float **copy) {
  if (!(*copy = malloc(sizeof(float) * (size_t)count)))
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a copy of an addend "
                   "that shares the product's output buffer (%lld floats)", (long long)count);
  memcpy(*copy, *p, sizeof(float) * (size_t)count);
  *p = *copy;
  return KILN_OK;
}

static kiln_status run_rows(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_gemv_args *a) {
  gemm_job j = {.f = f, .a = *a};
  float *add_copy = NULL, *sum_copy = NULL;
  kiln_status st = resolve_addend(c, a, &j.a.sum, a->sum_step, a->sum_row, true, &j.acc_y,
                                  &sum_copy);
  if (st == KILN_OK)
    st = resolve_addend(c, a, &j.a.add, a->add_step, a->add_row, a->add_scale == 1.0f,
                        &j.acc_y, &add_copy);
  j.groups = (a->m + KL_GEMM_ROWS - 1) / KL_GEMM_ROWS;
  size_t bytes = kl_gemv_scratch_bytes(a->m, a->k);
  float *own = NULL;
  j.xp = a->scratch;
  if (st == KILN_OK && !j.xp && !(j.xp = own = malloc(bytes)))
    st = kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory packing the %lld rows of a "
                 "matrix product (%zu bytes)", (long long)a->m, bytes);
  if (st == KILN_OK) {
    int64_t work, threads = kl_isa_threads(c);
    if (__builtin_mul_overflow(a->m * a->n, a->k > 0 ? a->k : 1, &work)) work = INT64_MAX;
    kl_isa_parallel(c, j.groups, a->m * a->k, pack_task, &j);
    /* enough tasks for the threads to share evenly: row blocks times runs of panels */
    j.blocks = (a->m + GEMM_MC - 1) / GEMM_MC;
    /* blocks of even size (a last block of a few rows reads every panel for little) */
    j.per_block = (j.groups + j.blocks - 1) / j.blocks;
    j.blocks = (j.groups + j.per_block - 1) / j.per_block;
    j.kc = j.per_block <= GEMM_ONE_PASS_GROUPS && a->k > 0 ? a->k : GEMM_KC;
    j.panels = (a->n + KL_GEMV_PANEL - 1) / KL_GEMV_PANEL;
    int64_t runs = threads > 1 ? (4 * threads + j.blocks - 1) / j.blocks : 1;
    if (runs > j.panels) runs = j.panels;
    j.per_task = (j.panels + runs - 1) / runs;
    runs = (j.panels + j.per_task - 1) / j.per_task;
    kl_isa_parallel(c, j.blocks * runs, work, gemm_task, &j);
  }
  free(own);
  free(add_copy);
  free(sum_copy);
  return st;
}

size_t kl_gemv_scratch_bytes(int64_t m, int64_t k) {
  if (m <= 1) return 0;
  int64_t groups = (m + KL_GEMM_ROWS - 1) / KL_GEMM_ROWS;
  return sizeof(float) * (size_t)(groups * KL_GEMM_ROWS) * (size_t)(k > 0 ? k : 1);
}

kiln_status kl_run_gemv(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_gemv_args *a) {
  if (a->n <= 0 || a->m < 0) return KILN_OK;
  if (a->m <= 1 && !a->rows) {
    run_one_row(c, f, a);
    return KILN_OK;
  }
  if (!f->gemv->tile)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "kiln's matrix product of %lld rows at level "
                   "%s, which has no tile primitive", (long long)a->m, f->name);
  return run_rows(c, f, a);
}
