/* The one-row matrix product driver (run.h, kl_run_gemv): Gemm / MatMul nodes whose
 * weights are a constant float32 matrix and whose run has one row of input, which
 * dnnl.c hands here instead of to a oneDNN primitive.
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
static void epilogue(const kl_isa_fns *f, const kl_gemv_args *a, int64_t at, const float *p,
                     int64_t len) {
  float *y = a->y + at;
  const float alpha = a->alpha, scale = a->add_scale;
  const float *add = a->add ? a->add + at * a->add_step : NULL;
  const float *sum = a->sum ? a->sum + at * a->sum_step : NULL;
  if (alpha != 1.0f || add || sum)
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
    epilogue(j->f, a, at, p, len);
  }
}

void kl_run_gemv(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_gemv_args *a) {
  if (a->n <= 0) return;
  int64_t panel_bytes = (a->k > 0 ? a->k : 1) * KL_GEMV_PANEL * (int64_t)sizeof(float);
  int64_t panels = (a->n + KL_GEMV_PANEL - 1) / KL_GEMV_PANEL, per;
  const float *sum_end = a->sum ? a->sum + (a->n - 1) * a->sum_step + 1 : NULL;
  gemv_job j = {f, a, 0, !a->sum || sum_end <= a->y || a->sum >= a->y + a->n};
  int64_t tasks = kl_isa_split(panels, GEMV_TASK_BYTES / panel_bytes + 1, &per);
  j.per = per * KL_GEMV_PANEL; /* outputs, a whole number of panels */
  kl_isa_parallel(c, tasks, a->k * a->n, gemv_task, &j);
}
