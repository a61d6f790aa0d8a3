/* MatMulInteger of uint8 A [..., M, K] and constant int8 B [K, N] on kiln's own kernel
 * (the level's qgemm, isa_fns.h), where the CPU has no VNNI: oneDNN 2.6's integer gemm
 * (dnnl_gemm_u8s8s32, gemm:jit) packs B again at every call, and its kernel ran a
 * [128, 768] x [768, 3072] product (BERT-base's) at 65 multiply-adds of int8 a
 * nanosecond on one Zen 3 core, packing included.
 *
 * B is packed once, at the first run (it is a constant: kl_dnnl_mmint_supports), into
 * the panels of 8 columns of isa_fns.h, with each column's sum; A's zero point za (a
 * run-time input) is taken off as za times the column's sum, exactly in int32
 * (Y = (A - za) B = A B - za colsum(B)). A task is a pair of panels (16 columns) over a
 * run of rows, in blocks of KL_QGEMM_ROWS rows: the pair's weights stay in the cache for
 * all the rows, A's rows come from L2. MatMulIntegerToFloat scales the task's sums (and
 * adds its bias) once they are made, while they are in the cache.
 *
 * 8-bit weights (either kind, less their zero points; kl_qgemm_split_fits) take the same
 * path where few pairs of them are past what vpmaddubsw multiplies exactly: such a pair
 * is packed clamped to [-64, 64], and what the clamp took off is kept apart (kl_qres) and
 * added to each block's sums as scalar multiply-adds. Past one pair in 128, the wide
 * form (below) runs instead. */
#include "backends/cpu/isa/run.h"

#include <stdlib.h>
#include <string.h>

/* What B holds beyond the codes vpmaddubsw takes exactly (split_pair): B[i][col + j] less
 * its zero point is wp's code plus v. */
typedef struct kl_qres {
  uint16_t i; /* k (K < 33000) */
  int16_t v;
  uint32_t j; /* the column within the pair of panels (plan_create: within B) */
} kl_qres;

struct kl_qgemm_plan {
  size_t k, n, groups, panels;
  int8_t *wp;      /* B packed (isa_fns.h, KL_QGEMV_PANEL) */
  int32_t *colsum; /* each column's sum of wp's codes */
  kl_qres *res;    /* the remainders, by pair of panels, each pair's in order of k */
  size_t *res_at;  /* pair q's are res[res_at[q] .. res_at[q + 1] - 1]; NULL: none */
  int32_t *comp;   /* this run's za * colsum, rounded up to whole pairs of panels */
  int16_t *wp16;   /* the wide form's B less its zero points (kl_qgemm16_at), or NULL */
  size_t pairs;    /* the wide form's pairs of k: (k + 1) / 2 */
  int16_t *a16;    /* the wide form's A less its zero point, rows of 2 * pairs, or NULL */
  size_t a16_rows; /* the rows a16 holds */
};

void kl_qgemm_free(void *state) {
  kl_qgemm_plan *p = state;
  if (!p) return;
  free(p->wp);
  free(p->colsum);
  free(p->res);
  free(p->res_at);
  free(p->comp);
  free(p->wp16);
  free(p->a16);
  free(p);
}

size_t kl_qgemm_held_bytes(const void *state) {
  const kl_qgemm_plan *p = state;
  if (p && p->wp16)
    return (p->panels * KL_QGEMV_PANEL + p->a16_rows) * p->pairs * 2 * sizeof(int16_t);
  if (!p) return 0;
  size_t res = p->res_at ? p->res_at[p->panels / 2] * sizeof *p->res +
                               (p->panels / 2 + 1) * sizeof *p->res_at
                         : 0;
  return p->panels * p->groups * 32 + 2 * p->panels * KL_QGEMV_PANEL * sizeof(int32_t) + res;
}

static int32_t code_at(const kl_tensor *t, int64_t i) {
  return t->dtype == KL_U8 ? ((const uint8_t *)t->data)[i] : ((const int8_t *)t->data)[i];
}

/* B's zero points, one per column (zb NULL: zeros), into z[n]. */
static void zero_points(const void *zb, kl_dtype bt, size_t nzb, size_t n, int16_t *z) {
  for (size_t j = 0; j < n; j++) {
    size_t at = nzb == 1 ? 0 : j;
    z[j] = (int16_t)(!zb ? 0 : bt == KL_U8 ? ((const uint8_t *)zb)[at] : ((const int8_t *)zb)[at]);
  }
}

/* Row i of B less its zero points (z from zero_points), in [-255, 255], into out[n];
 * a row past k (i >= k) is zeros. One loop a dtype: the packings read every weight. */
static void weight_row(const void *b, kl_dtype bt, const int16_t *z, size_t i, size_t k,
                       size_t n, int16_t *out) {
  if (i >= k) {
    memset(out, 0, n * sizeof *out);
  } else if (bt == KL_U8) {
    const uint8_t *r = (const uint8_t *)b + i * n;
    for (size_t j = 0; j < n; j++) out[j] = (int16_t)(r[j] - z[j]);
  } else {
    const int8_t *r = (const int8_t *)b + i * n;
    for (size_t j = 0; j < n; j++) out[j] = (int16_t)(r[j] - z[j]);
  }
}

/* 1 when the pair of weights b0, b1 (less zero points) must be split (split_pair). */
static inline int pair_past(int32_t b0, int32_t b1) {
  int32_t a0 = b0 < 0 ? -b0 : b0, a1 = b1 < 0 ? -b1 : b1; /* b >= -255: past -128 is past 128 */
  return (a0 + a1 > 128) | (b0 > 127) | (b1 > 127);
}

/* A pair of weights of one column (k 2t and 2t + 1, which vpmaddubsw multiplies and adds
 * in 16 bits), less the zero point: the int8 codes s[0], s[1] of the packed B, exact
 * with any uint8 A as long as |s[0]| + |s[1]| <= 128 (255 * 128 < 2^15); returns how many
 * of the two leave a remainder (b - s, the residual kl_qres). */
static int split_pair(int32_t b0, int32_t b1, int8_t s[2]) {
  if (!pair_past(b0, b1)) {
    s[0] = (int8_t)b0, s[1] = (int8_t)b1;
    return 0;
  }
  s[0] = (int8_t)(b0 < -64 ? -64 : b0 > 64 ? 64 : b0);
  s[1] = (int8_t)(b1 < -64 ? -64 : b1 > 64 ? 64 : b1);
  return (s[0] != b0) + (s[1] != b1);
}

static kiln_status plan_create(const kl_kernel_ctx *c, kl_qgemm_plan **out) {
  const kl_tensor *b = c->in[1], *zb = c->n_in > 3 ? c->in[3] : NULL;
  kl_qgemm_plan *p = calloc(1, sizeof *p);
  *out = p;
  if (!p) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for an int8 product");
  size_t k = (size_t)b->dims[0], n = (size_t)b->dims[1], nzb = zb ? (size_t)kl_tensor_numel(zb) : 0;
  p->k = k, p->n = n, p->groups = (k + 3) / 4;
  p->panels = (n + 2 * KL_QGEMV_PANEL - 1) / (2 * KL_QGEMV_PANEL) * 2; /* whole pairs */
  size_t cols = p->panels * KL_QGEMV_PANEL, pairs = p->panels / 2, count = 0, cap = 0;
  p->wp = calloc(p->panels * p->groups * 32, 1);
  p->colsum = calloc(cols, sizeof *p->colsum);
  p->comp = calloc(cols, sizeof *p->comp);
  p->res_at = calloc(pairs + 1, sizeof *p->res_at);
  int16_t *rows = malloc(3 * n * sizeof *rows + 1); /* two rows of B and the zero points */
  kl_qres *found = NULL; /* the remainders in order of k, then by pair of panels */
  if (!p->wp || !p->colsum || !p->comp || !p->res_at || !rows) goto oom;
  int16_t *r0 = rows, *r1 = rows + n, *z = rows + 2 * n;
  zero_points(zb ? zb->data : NULL, b->dtype, nzb, n, z);
  for (size_t i = 0; i < k; i += 2) {
    weight_row(b->data, b->dtype, z, i, k, n, r0);
    weight_row(b->data, b->dtype, z, i + 1, k, n, r1);
    for (size_t j = 0; j < n; j++) {
      int8_t sp[2];
      if (split_pair(r0[j], r1[j], sp) && count + 2 > cap) {
        cap = cap ? 2 * cap : 256;
        kl_qres *more = realloc(found, cap * sizeof *found);
        if (!more) goto oom;
        found = more;
      }
      for (int h = 0; h < 2 && i + (size_t)h < k; h++) {
        int32_t v = h ? r1[j] : r0[j];
        p->wp[kl_qgemv_at(i + (size_t)h, j, p->groups)] = sp[h];
        p->colsum[j] += sp[h];
        if (sp[h] != v)
          found[count++] = (kl_qres){(uint16_t)(i + (size_t)h), (int16_t)(v - sp[h]), (uint32_t)j};
      }
    }
  }
  if (count && k >= 33000) { /* kl_qgemm_split_fits keeps the sums within int32 */
    free(rows), free(found);
    return kl_fail(c->e, KILN_ERR_INTERNAL, "%s '%s': weights past 7 bits over k %zu",
                   kl_op_name(c->node->op), c->node->name ? c->node->name : "", k);
  }
  if (count && !(p->res = malloc(count * sizeof *p->res))) goto oom;
  for (size_t e = 0; e < count; e++) p->res_at[found[e].j / (2 * KL_QGEMV_PANEL) + 1]++;
  for (size_t q = 0; q < pairs; q++) p->res_at[q + 1] += p->res_at[q];
  free(rows);
  if (!count) {
    free(found), free(p->res_at), p->res_at = NULL; /* 7-bit weights: nothing to add */
    return KILN_OK;
  }
  size_t *next = calloc(pairs, sizeof *next);
  if (!next) {
    rows = NULL;
    goto oom;
  }
  for (size_t e = 0; e < count; e++) { /* by pair of panels, each pair's in order of k */
    size_t q = found[e].j / (2 * KL_QGEMV_PANEL);
    kl_qres r = found[e];
    r.j %= 2 * KL_QGEMV_PANEL;
    p->res[p->res_at[q] + next[q]++] = r;
  }
  free(next), free(found);
  return KILN_OK;
oom:
  free(rows), free(found);
  return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory packing the %zu x %zu int8 "
                 "weights of %s '%s'", k, n, kl_op_name(c->node->op),
                 c->node->name ? c->node->name : "");
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
  int32_t za;
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
    if (p->res_at && p->res_at[pair + 1] > p->res_at[pair]) /* the remainders, in L1 too */
      for (size_t q = 0; q < rows; q++) {
        const uint8_t *a = j->a + (size_t)(r + (int64_t)q) * p->k;
        /* as uint32: the sum is exact in int32 but its parts need not be */
        uint32_t *y = (uint32_t *)(j->y + (size_t)(r + (int64_t)q) * p->n + col);
        for (size_t e = p->res_at[pair]; e < p->res_at[pair + 1]; e++)
          y[p->res[e].j] += (uint32_t)((a[p->res[e].i] - j->za) * p->res[e].v);
      }
  }
  if (j->scale) /* the task's sums, still in L1 (straight after each block they stall */
    kl_mmint_scale_rows(j->scale, j->y + (size_t)r0 * p->n + col, p->n, (size_t)(r1 - r0),
                        col, cols); /* reading what the 32-byte stores have not yet left) */
}

static kiln_status plan16_create(const kl_kernel_ctx *c, kl_qgemm_plan **out);

/* What both forms do first: their operands checked (wide: any 8-bit A and B, K <
 * 33000; else uint8 A), an empty output or K = 0 done (*out NULL), the plan
 * of this session's node taken or made (B packed) into *out; *sc the fused node's
 * scale (*scaled). */
static kiln_status begin(kl_kernel_ctx *c, bool wide, kl_mmint_scale *sc, bool *scaled,
                         kl_qgemm_plan **out) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  kl_tensor *y = c->out[0];
  *out = NULL;
  *scaled = kl_mmint_scale_of(c, sc);
  bool q8a = a->dtype == KL_U8 || (wide && a->dtype == KL_I8);
  bool q8b = b->dtype == KL_I8 || b->dtype == KL_U8;
  if (!q8a || !q8b || b->rank != 2 || a->rank < 1 || a->dims[a->rank - 1] != b->dims[0] ||
      (wide && b->dims[0] >= 33000) || y->dtype != (*scaled ? KL_F32 : KL_I32))
    return kl_fail(c->e, KILN_ERR_INTERNAL, "%s '%s' on kiln's %sint8 product with operands "
                   "it does not take", kl_op_name(c->node->op),
                   c->node->name ? c->node->name : "", wide ? "wide " : "");
  if (kl_tensor_numel(y) == 0) return KILN_OK;
  if (b->dims[0] == 0) { /* sums over nothing */
    memset(y->data, 0, kl_tensor_nbytes(y));
    if (*scaled) kl_mmint_scale_all(c, sc);
    return KILN_OK;
  }
  kl_qgemm_plan *p = c->state ? *c->state : NULL;
  if (p && (p->k != (size_t)b->dims[0] || p->n != (size_t)b->dims[1] || !p->wp16 != !wide))
    return kl_fail(c->e, KILN_ERR_INTERNAL, "%s '%s': its weights changed shape",
                   kl_op_name(c->node->op), c->node->name ? c->node->name : "");
  if (!p) {
    kiln_status st = wide ? plan16_create(c, &p) : plan_create(c, &p);
    if (st != KILN_OK) {
      kl_qgemm_free(p);
      return st;
    }
    if (c->state) *c->state = p;
  }
  *out = p;
  return KILN_OK;
}

/* Tasks of a pair of panels over `per` rows (a multiple of KL_QGEMM_ROWS), *chunks of
 * them a pair: rows split only as far as the threads need, since each chunk reads the
 * pair's weights again. */
static void split_rows(const kl_kernel_ctx *c, int64_t rows, int64_t pairs, int64_t *chunks,
                       int64_t *per) {
  int64_t blocks = (rows + KL_QGEMM_ROWS - 1) / KL_QGEMM_ROWS, threads = kl_isa_threads(c);
  int64_t n = pairs >= 4 * threads ? 1 : (4 * threads + pairs - 1) / pairs;
  n = n < blocks ? n : blocks;
  *per = (blocks + n - 1) / n * KL_QGEMM_ROWS;
  *chunks = (rows + *per - 1) / *per;
}

int kl_run_qgemm(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *za = c->n_in > 2 ? c->in[2] : NULL;
  kl_mmint_scale sc;
  bool scaled;
  kl_qgemm_plan *p;
  kiln_status st = begin(c, false, &sc, &scaled, &p);
  if (st != KILN_OK || !p) return st;
  int32_t zp = za ? *(const uint8_t *)za->data : 0;
  for (size_t j = 0; j < p->n; j++) p->comp[j] = zp * p->colsum[j];
  int64_t rows = kl_tensor_numel(c->in[0]) / (int64_t)p->k, pairs = (int64_t)p->panels / 2;
  int64_t chunks, per;
  split_rows(c, rows, pairs, &chunks, &per);
  qgemm_job j = {f->quant, p, c->in[0]->data, zp, c->out[0]->data, scaled ? &sc : NULL, rows,
                 chunks, per};
  kl_isa_parallel(c, pairs * chunks, rows * (int64_t)(p->n * p->k), qgemm_task, &j);
  if (!c->state) kl_qgemm_free(p);
  return KILN_OK;
}

/* ---- the wide form: any 8-bit A and constant B, zero points, exact (isa_fns.h) ----
 * B less its zero points is packed once as int16 (plan16_create). At each run A less its
 * zero point is widened to int16 once, into a buffer the plan keeps (a16), in parallel
 * by rows; then each task (a pair of panels over a run of rows) takes the whole of k from
 * it. Widening A's rows inside each task, once per pair of panels, as the first form
 * did, cost a quarter to a third of the product's time on a Zen 3 (BERT-base's
 * [128, 768] x [768, 768]: 2.3 -> 1.55 ms a node at 1 thread). */

/* The rows of A widened at a time: as many as fit this many bytes (at least a block). */
#define QGEMM16_SLAB_BYTES ((size_t)8 << 20)

bool kl_qgemm16_fits(const kl_graph *g, const kl_node *n) {
  bool fused = n->op == KL_OP_KilnMatMulIntegerToFloat;
  if ((n->op != KL_OP_MatMulInteger && !fused) || n->n_out != 1 || n->n_in < 2 ||
      n->in[0] < 0 || n->in[1] < 0 || n->out[0] < 0)
    return false;
  const kl_value *b = &g->values[n->in[1]];
  const kl_type *a = &g->values[n->in[0]].type;
  bool q8a = a->dtype == KL_U8 || a->dtype == KL_I8, q8b = b->type.dtype == KL_U8 ||
                                                             b->type.dtype == KL_I8;
  if (!q8a || !q8b || a->rank < 2 || b->type.rank != 2 || b->kind != KL_VALUE_CONST ||
      !b->data || b->type.dims[0].size < 0 || b->type.dims[1].size < 0 ||
      b->type.dims[0].size >= 33000 ||
      g->values[n->out[0]].type.dtype != (fused ? KL_F32 : KL_I32))
    return false;
  int64_t count;
  if (n->n_in > 2 && n->in[2] >= 0) { /* A's zero point: one value (a run-time input) */
    const kl_type *z = &g->values[n->in[2]].type;
    if (z->dtype != a->dtype || !kl_type_numel(z, &count) || count != 1) return false;
  }
  if (n->n_in > 3 && n->in[3] >= 0) { /* B's: constant, one value or one per column */
    const kl_value *z = &g->values[n->in[3]];
    if (z->kind != KL_VALUE_CONST || !z->data || z->type.dtype != b->type.dtype ||
        z->type.rank > 1 || !kl_type_numel(&z->type, &count) ||
        (count != 1 && count != b->type.dims[1].size))
      return false;
  }
  return true;
}

/* Weights past 7 bits on the int8 product where few pairs leave remainders (split_pair):
 * at most one pair in 128 (a remainder or two each, a scalar multiply-add per row;
 * BERT-base quantized by onnxruntime's quantize_dynamic, 8-bit weights: one in 1,250). */
bool kl_qgemm_split_fits(const kl_graph *g, const kl_node *n) {
  if (!kl_qgemm16_fits(g, n) || g->values[n->in[0]].type.dtype != KL_U8) return false;
  const kl_value *b = &g->values[n->in[1]];
  const kl_value *zb = n->n_in > 3 && n->in[3] >= 0 ? &g->values[n->in[3]] : NULL;
  size_t k = (size_t)b->type.dims[0].size, cols = (size_t)b->type.dims[1].size, left = 0;
  size_t most = (k + 1) / 2 * cols / 128;
  int64_t nzb = 1;
  if (zb && !kl_type_numel(&zb->type, &nzb)) return false;
  int16_t *rows = malloc(3 * cols * sizeof *rows + 1);
  if (!rows) return false;
  int16_t *r0 = rows, *r1 = rows + cols, *z = rows + 2 * cols;
  zero_points(zb ? zb->data : NULL, b->type.dtype, (size_t)nzb, cols, z);
  for (size_t i = 0; i < k && left <= most; i += 2) {
    weight_row(b->data, b->type.dtype, z, i, k, cols, r0);
    weight_row(b->data, b->type.dtype, z, i + 1, k, cols, r1);
    unsigned bad = 0; /* one vector loop a row */
    for (size_t j = 0; j < cols; j++) bad += (unsigned)pair_past(r0[j], r1[j]);
    left += bad;
  }
  free(rows);
  return left <= most;
}

static kiln_status plan16_create(const kl_kernel_ctx *c, kl_qgemm_plan **out) {
  const kl_tensor *b = c->in[1], *zb = c->n_in > 3 ? c->in[3] : NULL;
  kl_qgemm_plan *p = calloc(1, sizeof *p);
  *out = p;
  if (!p) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for an int8 product");
  size_t k = (size_t)b->dims[0], n = (size_t)b->dims[1];
  p->k = k, p->n = n, p->pairs = (k + 1) / 2;
  p->panels = (n + 2 * KL_QGEMV_PANEL - 1) / (2 * KL_QGEMV_PANEL) * 2; /* whole pairs */
  p->wp16 = calloc(p->panels * KL_QGEMV_PANEL * p->pairs * 2 + 1, sizeof *p->wp16);
  if (!p->wp16)
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory packing the %zu x %zu 8-bit "
                   "weights of %s '%s'", k, n, kl_op_name(c->node->op),
                   c->node->name ? c->node->name : "");
  size_t nzb = zb ? (size_t)kl_tensor_numel(zb) : 0;
  int16_t *rows = malloc(2 * n * sizeof *rows + 1);
  if (!rows)
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory packing the %zu x %zu 8-bit "
                   "weights of %s '%s'", k, n, kl_op_name(c->node->op),
                   c->node->name ? c->node->name : "");
  zero_points(zb ? zb->data : NULL, b->dtype, nzb, n, rows + n);
  for (size_t i = 0; i < k; i++) {
    weight_row(b->data, b->dtype, rows + n, i, k, n, rows);
    for (size_t j = 0; j < n; j++) p->wp16[kl_qgemm16_at(i, j, p->pairs)] = rows[j];
  }
  free(rows);
  return KILN_OK;
}

typedef struct qgemm16_job {
  const kl_quant_fns *f;
  const kl_qgemm_plan *p;
  const kl_tensor *a;
  int32_t za;
  int32_t *y;
  const kl_mmint_scale *scale; /* MatMulIntegerToFloat's, or NULL */
  int64_t s0, rows;            /* the slab: rows s0 .. s0 + rows - 1 of A and Y */
  int64_t chunks, per, widen_per;
} qgemm16_job;

/* Task t of the widening: rows s0 + t * widen_per onwards of A less its zero point, as
 * int16 into the plan's a16 (rows of 2 * pairs, the odd end padded with 0). */
static void widen16_task(void *arg, int64_t t) {
  const qgemm16_job *j = arg;
  size_t k = j->p->k, lda = 2 * j->p->pairs;
  int64_t r0 = t * j->widen_per, r1 = r0 + j->widen_per < j->rows ? r0 + j->widen_per : j->rows;
  for (int64_t r = r0; r < r1; r++) {
    int16_t *dst = j->p->a16 + (size_t)r * lda;
    size_t at = (size_t)(j->s0 + r) * k;
    if (j->a->dtype == KL_U8) {
      const uint8_t *src = (const uint8_t *)j->a->data + at;
      for (size_t i = 0; i < k; i++) dst[i] = (int16_t)(src[i] - j->za);
    } else {
      const int8_t *src = (const int8_t *)j->a->data + at;
      for (size_t i = 0; i < k; i++) dst[i] = (int16_t)(src[i] - j->za);
    }
    if (k % 2) dst[k] = 0;
  }
}

/* Task t of the product: pair t / chunks of panels over the slab's rows of chunk
 * t % chunks, the whole of k at once from the widened rows. */
static void qgemm16_task(void *arg, int64_t t) {
  const qgemm16_job *j = arg;
  const kl_qgemm_plan *p = j->p;
  size_t pair = (size_t)(t / j->chunks), col = pair * 2 * KL_QGEMV_PANEL, lda = 2 * p->pairs;
  size_t cols = p->n - col < 2 * KL_QGEMV_PANEL ? p->n - col : 2 * KL_QGEMV_PANEL;
  const int16_t *w0 = p->wp16 + pair * 2 * p->pairs * 16, *w1 = w0 + p->pairs * 16;
  int64_t r0 = t % j->chunks * j->per, r1 = r0 + j->per < j->rows ? r0 + j->per : j->rows;
  int32_t *y = j->y + (size_t)j->s0 * p->n;
  for (int64_t r = r0; r < r1; r += KL_QGEMM_ROWS) {
    size_t rows = (size_t)(r1 - r < KL_QGEMM_ROWS ? r1 - r : KL_QGEMM_ROWS);
    j->f->qgemm16(p->a16 + (size_t)r * lda, lda, rows, p->pairs, w0, w1, cols,
                  y + (size_t)r * p->n + col, p->n);
  }
  if (j->scale)
    kl_mmint_scale_rows(j->scale, y + (size_t)r0 * p->n + col, p->n, (size_t)(r1 - r0), col,
                        cols);
}

int kl_run_qgemm16(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *za = c->n_in > 2 ? c->in[2] : NULL;
  kl_mmint_scale sc;
  bool scaled;
  kl_qgemm_plan *p;
  kiln_status st = begin(c, true, &sc, &scaled, &p);
  if (st != KILN_OK || !p) return st;
  int64_t rows = kl_tensor_numel(c->in[0]) / (int64_t)p->k, pairs = (int64_t)p->panels / 2;
  size_t row_bytes = 2 * p->pairs * sizeof(int16_t);
  int64_t slab = (int64_t)(QGEMM16_SLAB_BYTES / row_bytes) / KL_QGEMM_ROWS * KL_QGEMM_ROWS;
  slab = slab < KL_QGEMM_ROWS ? KL_QGEMM_ROWS : slab < rows ? slab : rows;
  if (p->a16_rows < (size_t)slab) { /* A is widened once a run, not once a panel */
    int16_t *a16 = malloc((size_t)slab * row_bytes);
    if (!a16) {
      if (!c->state) kl_qgemm_free(p);
      return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory widening %lld rows of %zu "
                     "for %s '%s'", (long long)slab, p->k, kl_op_name(c->node->op),
                     c->node->name ? c->node->name : "");
    }
    free(p->a16);
    p->a16 = a16, p->a16_rows = (size_t)slab;
  }
  qgemm16_job j = {f->quant, p, c->in[0], za ? code_at(za, 0) : 0, c->out[0]->data,
                   scaled ? &sc : NULL, 0, 0, 0, 0, 0};
  for (int64_t s0 = 0; s0 < rows; s0 += slab) {
    j.s0 = s0, j.rows = rows - s0 < slab ? rows - s0 : slab;
    int64_t wtasks = kl_isa_split(j.rows, 16, &j.widen_per);
    kl_isa_parallel(c, wtasks, j.rows * (int64_t)p->k, widen16_task, &j);
    split_rows(c, j.rows, pairs, &j.chunks, &j.per);
    kl_isa_parallel(c, pairs * j.chunks, j.rows * (int64_t)(p->n * p->k), qgemm16_task, &j);
  }
  if (!c->state) kl_qgemm_free(p);
  return KILN_OK;
}
