/* MatMulInteger of uint8 A [..., M, K] and constant int8 B [K, N] on kiln's own kernel
 * (the level's qgemm, isa_fns.h), where the CPU has no VNNI: oneDNN 2.6's integer gemm
 * (dnnl_gemm_u8s8s32, gemm:jit) packs B again at every call, and its kernel ran a
 * [128, 768] x [768, 3072] product (BERT-base's) at 65 multiply-adds of int8 a
 * nanosecond on one Zen 3 core, packing included.
 *
 * B is packed once, at the first run (it is a constant: kl_dnnl_mmint_supports), into
 * the panels of 8 columns of isa_fns.h, with each column's sum; A's zero point za
 * (a run-time input) is taken off as za times the column's sum, exactly in int32
 * (Y = (A - za) B = A B - za colsum(B); B's zero points are zeros). A task is a pair of
 * panels (16 columns) over a run of rows, in blocks of KL_QGEMM_ROWS rows: the pair's
 * weights stay in the cache for all the rows, A's rows come from L2. */
#include "backends/cpu/isa/run.h"

#include <stdlib.h>
#include <string.h>

struct kl_qgemm_plan {
  size_t k, n, groups, panels;
  int8_t *wp;      /* B packed (isa_fns.h, KL_QGEMV_PANEL) */
  int32_t *colsum; /* each column's sum of B */
  int32_t *comp;   /* this run's za * colsum, rounded up to whole pairs of panels */
};

void kl_qgemm_free(void *state) {
  kl_qgemm_plan *p = state;
  if (!p) return;
  free(p->wp);
  free(p->colsum);
  free(p->comp);
  free(p);
}

size_t kl_qgemm_held_bytes(const void *state) {
  const kl_qgemm_plan *p = state;
  return p ? p->panels * p->groups * 32 + 2 * p->panels * KL_QGEMV_PANEL * sizeof(int32_t) : 0;
}

static kiln_status plan_create(const kl_kernel_ctx *c, kl_qgemm_plan **out) {
  const kl_tensor *b = c->in[1];
  kl_qgemm_plan *p = calloc(1, sizeof *p);
  *out = p;
  if (!p) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for an int8 product");
  size_t k = (size_t)b->dims[0], n = (size_t)b->dims[1];
  p->k = k, p->n = n, p->groups = (k + 3) / 4;
  p->panels = (n + 2 * KL_QGEMV_PANEL - 1) / (2 * KL_QGEMV_PANEL) * 2; /* whole pairs */
  size_t cols = p->panels * KL_QGEMV_PANEL;
  p->wp = calloc(p->panels * p->groups * 32, 1);
  p->colsum = calloc(cols, sizeof *p->colsum);
  p->comp = calloc(cols, sizeof *p->comp);
  if (!p->wp || !p->colsum || !p->comp)
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory packing the %zu x %zu int8 "
                   "weights of MatMulInteger '%s'", k, n, c->node->name ? c->node->name : "");
  const int8_t *w = b->data;
  for (size_t i = 0; i < k; i++)
    for (size_t j = 0; j < n; j++) {
      int8_t v = w[i * n + j];
      p->wp[kl_qgemv_at(i, j, p->groups)] = v;
      p->colsum[j] += v;
    }
  return KILN_OK;
}

typedef struct qgemm_job {
  const kl_quant_fns *f;
  const kl_qgemm_plan *p;
  const uint8_t *a;
  int32_t *y;
  int64_t rows, chunks, per; /* per: rows a task, a multiple of KL_QGEMM_ROWS */
} qgemm_job;

/* Task t: pair t / chunks of panels, rows of chunk t % chunks. */
static void qgemm_task(void *arg, int64_t t) {
  const qgemm_job *j = arg;
  const kl_qgemm_plan *p = j->p;
  size_t pair = (size_t)(t / j->chunks), col = pair * 2 * KL_QGEMV_PANEL;
  size_t cols = p->n - col < 2 * KL_QGEMV_PANEL ? p->n - col : 2 * KL_QGEMV_PANEL;
  const int8_t *wp = p->wp + pair * 2 * p->groups * 32;
  int64_t r0 = t % j->chunks * j->per, r1 = r0 + j->per < j->rows ? r0 + j->per : j->rows;
  for (int64_t r = r0; r < r1; r += KL_QGEMM_ROWS) {
    size_t rows = (size_t)(r1 - r < KL_QGEMM_ROWS ? r1 - r : KL_QGEMM_ROWS);
    j->f->qgemm(j->a + (size_t)r * p->k, p->k, rows, p->k, wp, cols, p->comp + col,
                j->y + (size_t)r * p->n + col, p->n);
  }
}

int kl_run_qgemm(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  const kl_tensor *za = c->n_in > 2 ? c->in[2] : NULL;
  kl_tensor *y = c->out[0];
  if (a->dtype != KL_U8 || b->dtype != KL_I8 || b->rank != 2 || a->rank < 1 ||
      a->dims[a->rank - 1] != b->dims[0] || y->dtype != KL_I32)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "MatMulInteger '%s' on kiln's int8 product with "
                   "operands it does not take", c->node->name ? c->node->name : "");
  if (kl_tensor_numel(y) == 0) return KILN_OK;
  if (b->dims[0] == 0) { /* sums over nothing */
    memset(y->data, 0, kl_tensor_nbytes(y));
    return KILN_OK;
  }
  kl_qgemm_plan *p = c->state ? *c->state : NULL;
  if (p && (p->k != (size_t)b->dims[0] || p->n != (size_t)b->dims[1]))
    return kl_fail(c->e, KILN_ERR_INTERNAL, "MatMulInteger '%s': its weights changed shape",
                   c->node->name ? c->node->name : "");
  if (!p) {
    kiln_status st = plan_create(c, &p);
    if (st != KILN_OK) {
      kl_qgemm_free(p);
      return st;
    }
    if (c->state) *c->state = p;
  }
  int32_t zp = za ? *(const uint8_t *)za->data : 0;
  for (size_t j = 0; j < p->n; j++) p->comp[j] = zp * p->colsum[j];
  int64_t rows = kl_tensor_numel(a) / (int64_t)p->k, pairs = (int64_t)p->panels / 2;
  /* rows split only as far as the threads need: each chunk reads the pair's weights */
  int64_t blocks = (rows + KL_QGEMM_ROWS - 1) / KL_QGEMM_ROWS, threads = kl_isa_threads(c);
  int64_t chunks = pairs >= 4 * threads ? 1 : (4 * threads + pairs - 1) / pairs;
  chunks = chunks < blocks ? chunks : blocks;
  int64_t per = (blocks + chunks - 1) / chunks * KL_QGEMM_ROWS;
  chunks = (rows + per - 1) / per;
  qgemm_job j = {f->quant, p, a->data, y->data, rows, chunks, per};
  kl_isa_parallel(c, pairs * chunks, rows * (int64_t)(p->n * p->k), qgemm_task, &j);
  if (!c->state) kl_qgemm_free(p);
  return KILN_OK;
}
