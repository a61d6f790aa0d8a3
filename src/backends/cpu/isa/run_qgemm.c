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
 * weights stay in the cache for all the rows, A's rows come from L2. MatMulIntegerToFloat
 * scales each block's sums (and adds its bias) right after they are made, while they
 * are in the L1 cache. */
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

bool kl_mmint_scale_of(const kl_kernel_ctx *c, kl_mmint_scale *s) {
  if (c->node->op != KL_OP_KilnMatMulIntegerToFloat) return false;
  const kl_tensor *sc = c->in[4], *b = c->n_in > 5 ? c->in[5] : NULL;
  *s = (kl_mmint_scale){sc->data, b ? b->data : NULL, kl_tensor_numel(sc) != 1,
                        b && kl_tensor_numel(b) != 1};
  return true;
}

/* Four sums at a time through the compiler's vectors (the in-place loop as plain C,
 * reading int32 and writing float32 at the same address, is not vectorized: gcc's
 * check that the two arrays do not overlap fails, and the scalar loop made BERT-base's
 * [128, 768] x [768, 3072] products 8% slower than the product alone). One loop for
 * each form of scale and bias (cols: one per column; bias 0 none, 1 one, 2 per column),
 * their flags constants once inlined. */
typedef int32_t kl_v4i __attribute__((vector_size(16)));
typedef float kl_v4f __attribute__((vector_size(16)));

static inline __attribute__((always_inline)) void scale_row(unsigned char *row,
                                                            const float *sv, const float *bv,
                                                            size_t cols, bool s_cols,
                                                            int bias) {
  kl_v4f s4 = (kl_v4f){0} + sv[0], b4 = (kl_v4f){0} + (bias ? bv[0] : 0.0f);
  size_t j = 0;
  for (; j + 4 <= cols; j += 4) {
    kl_v4i v;
    memcpy(&v, row + j * 4, sizeof v);
    kl_v4f f = __builtin_convertvector(v, kl_v4f), m = s4, a = b4;
    if (s_cols) memcpy(&m, sv + j, sizeof m);
    f = f * m;
    if (bias == 2) memcpy(&a, bv + j, sizeof a);
    if (bias) f = f + a;
    memcpy(row + j * 4, &f, sizeof f);
  }
  for (; j < cols; j++) {
    int32_t v;
    memcpy(&v, row + j * 4, sizeof v);
    float f = (float)v * sv[s_cols ? j : 0];
    if (bias) f = f + bv[bias == 2 ? j : 0];
    memcpy(row + j * 4, &f, sizeof f);
  }
}

void kl_mmint_scale_rows(const kl_mmint_scale *s, void *y, size_t ldy, size_t rows,
                         size_t col0, size_t cols) {
  const float *sv = s->scale + (s->scale_cols ? col0 : 0);
  const float *bv = s->bias ? s->bias + (s->bias_cols ? col0 : 0) : NULL;
  int form = (s->scale_cols ? 3 : 0) + (!bv ? 0 : s->bias_cols ? 2 : 1);
  for (size_t r = 0; r < rows; r++) {
    unsigned char *row = (unsigned char *)y + r * ldy * 4;
    switch (form) {
    case 0: scale_row(row, sv, bv, cols, false, 0); break;
    case 1: scale_row(row, sv, bv, cols, false, 1); break;
    case 2: scale_row(row, sv, bv, cols, false, 2); break;
    case 3: scale_row(row, sv, bv, cols, true, 0); break;
    case 4: scale_row(row, sv, bv, cols, true, 1); break;
    default: scale_row(row, sv, bv, cols, true, 2); break;
    }
  }
}

typedef struct scale_job {
  const kl_mmint_scale *s;
  void *y;
  size_t n, per; /* columns; rows a task */
  int64_t rows;
} scale_job;

static void scale_task(void *arg, int64_t t) {
  const scale_job *j = arg;
  int64_t r0 = t * (int64_t)j->per, left = j->rows - r0;
  size_t rows = left < (int64_t)j->per ? (size_t)left : j->per;
  kl_mmint_scale_rows(j->s, (int32_t *)j->y + (size_t)r0 * j->n, j->n, rows, 0, j->n);
}

void kl_mmint_scale_all(const kl_kernel_ctx *c, const kl_mmint_scale *s) {
  kl_tensor *y = c->out[0];
  int64_t n = y->rank > 0 ? y->dims[y->rank - 1] : 1, total = kl_tensor_numel(y);
  if (total == 0 || n == 0) return;
  int64_t rows = total / n, per = (16384 + n - 1) / n; /* about 64 KB a task */
  scale_job j = {s, y->data, (size_t)n, (size_t)per, rows};
  kl_isa_parallel(c, (rows + per - 1) / per, total, scale_task, &j);
}

typedef struct qgemm_job {
  const kl_quant_fns *f;
  const kl_qgemm_plan *p;
  const uint8_t *a;
  int32_t *y;
  const kl_mmint_scale *scale; /* MatMulIntegerToFloat's, or NULL */
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
  if (j->scale) /* the task's sums, still in L1 (straight after each block they stall */
    kl_mmint_scale_rows(j->scale, j->y + (size_t)r0 * p->n + col, p->n, (size_t)(r1 - r0),
                        col, cols); /* reading what the 32-byte stores have not yet left) */
}

int kl_run_qgemm(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  const kl_tensor *za = c->n_in > 2 ? c->in[2] : NULL;
  kl_tensor *y = c->out[0];
  kl_mmint_scale sc;
  bool scaled = kl_mmint_scale_of(c, &sc);
  if (a->dtype != KL_U8 || b->dtype != KL_I8 || b->rank != 2 || a->rank < 1 ||
      a->dims[a->rank - 1] != b->dims[0] || y->dtype != (scaled ? KL_F32 : KL_I32))
    return kl_fail(c->e, KILN_ERR_INTERNAL, "%s '%s' on kiln's int8 product with operands "
                   "it does not take", kl_op_name(c->node->op),
                   c->node->name ? c->node->name : "");
  if (kl_tensor_numel(y) == 0) return KILN_OK;
  if (b->dims[0] == 0) { /* sums over nothing */
    memset(y->data, 0, kl_tensor_nbytes(y));
    if (scaled) kl_mmint_scale_all(c, &sc);
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
  qgemm_job j = {f->quant, p, a->data, y->data, scaled ? &sc : NULL, rows, chunks, per};
  kl_isa_parallel(c, pairs * chunks, rows * (int64_t)(p->n * p->k), qgemm_task, &j);
  if (!c->state) kl_qgemm_free(p);
  return KILN_OK;
}
