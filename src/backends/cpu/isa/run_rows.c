/* Drivers of the row-wise ISA kernels: Softmax and LogSoftmax along the last axis,
 * LayerNormalization, RMSNormalization and SkipLayerNorm over their trailing axes,
 * ReduceSum and ReduceMean over a block of adjacent axes, GlobalAveragePool. */
#include "backends/cpu/isa/run.h"
#include "ir/reduce.h"

#include <math.h>
#include <string.h>

/* Rows per task: at least this many elements each. */
#define TASK_ELEMS 16384

static int64_t span(const int64_t *dims, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++) n *= dims[i];
  return n;
}

static bool takes_rows(const kl_isa_fns *f, kl_dtype t) {
  return t == KL_F32 || (t == KL_BF16 && f->rows_bf16);
}

/* Rows [first, last) of task t, for rows of len elements. */
typedef struct row_range {
  int64_t first, last;
} row_range;

static row_range task_rows(int64_t t, int64_t per, int64_t rows) {
  row_range r = {t * per, t * per + per < rows ? t * per + per : rows};
  return r;
}

static int64_t split_rows(int64_t rows, int64_t len, int64_t *per) {
  return kl_isa_split(rows, TASK_ELEMS / (len > 0 ? len : 1) + 1, per);
}

/* ---- Softmax, LogSoftmax ---- */

typedef struct softmax_job {
  const kl_isa_fns *f;
  const void *x;
  void *y;
  int64_t rows, len, per;
  bool log_form, bf16;
} softmax_job;

static void softmax_task(void *arg, int64_t t) {
  const softmax_job *j = arg;
  row_range r = task_rows(t, j->per, j->rows);
  for (int64_t i = r.first; i < r.last; i++) {
    size_t at = (size_t)(i * j->len);
    if (j->bf16)
      j->f->rows_bf16->softmax((const uint16_t *)j->x + at, (uint16_t *)j->y + at,
                               (size_t)j->len, j->log_form);
    else
      j->f->rows->softmax((const float *)j->x + at, (float *)j->y + at, (size_t)j->len,
                          j->log_form);
  }
}

int kl_run_softmax(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  if (x->rank < 1) return kl_isa_ref(c);
  int axis = kl_isa_axis(c->node, "axis", -1, x->rank);
  if (!takes_rows(f, x->dtype) || y->dtype != x->dtype || span(x->dims, axis + 1, x->rank) != 1)
    return kl_isa_ref(c);
  int64_t len = x->dims[axis], n = kl_tensor_numel(x);
  if (n == 0) return KILN_OK;
  softmax_job j = {f, x->data, y->data, n / len, len, 0,
                   c->node->op == KL_OP_LogSoftmax, x->dtype == KL_BF16};
  int64_t tasks = split_rows(j.rows, len, &j.per);
  kl_isa_parallel(c, tasks, n, softmax_task, &j);
  return KILN_OK;
}

/* ---- LayerNormalization, RMSNormalization, SkipLayerNorm ---- */

typedef struct norm_job {
  const kl_isa_fns *f;
  kl_norm_row row;
  const void *x, *skip; /* skip: SkipLayerNorm's addend, else NULL */
  void *y, *sum;        /* sum: where X + Skip goes (SkipLayerNorm's output 1, or y) */
  float *mean, *inv;    /* per-row statistics outputs, or NULL */
  int64_t rows, per;
  bool bf16;
} norm_job;

static void norm_one(const norm_job *j, int64_t i) {
  size_t at = (size_t)i * j->row.n, es = j->bf16 ? 2 : 4;
  const char *x = (const char *)j->x + at * es;
  char *y = (char *)j->y + at * es;
  if (j->skip) { /* X + Skip first, rounded to the dtype as the separate Add was */
    char *s = (char *)j->sum + at * es;
    const char *k = (const char *)j->skip + at * es;
    if (j->bf16)
      j->f->elt_bf16->binary(KL_BIN_ADD, (const uint16_t *)x, 1, (const uint16_t *)k, 1,
                             (uint16_t *)s, j->row.n);
    else
      j->f->elt->binary(KL_BIN_ADD, (const float *)x, 1, (const float *)k, 1, (float *)s,
                        j->row.n);
    x = s;
  }
  float mean, inv;
  if (j->bf16)
    j->f->rows_bf16->norm(&j->row, (const uint16_t *)x, (uint16_t *)y, &mean, &inv);
  else
    j->f->rows->norm(&j->row, (const float *)x, (float *)y, &mean, &inv);
  if (j->mean) j->mean[i] = mean;
  if (j->inv) j->inv[i] = inv;
}

static void norm_task(void *arg, int64_t t) {
  const norm_job *j = arg;
  row_range r = task_rows(t, j->per, j->rows);
  for (int64_t i = r.first; i < r.last; i++) norm_one(j, i);
}

/* Optional float32 statistics output k; false when present in another dtype. */
static bool stats_out(const kl_kernel_ctx *c, int k, float **out) {
  kl_tensor *t = k < c->n_out ? c->out[k] : NULL;
  *out = t ? t->data : NULL;
  return !t || t->dtype == KL_F32;
}

/* Fills j from x (input 0), the scale and bias inputs, the Mean / InvStdDev outputs
 * from output `stats` on (none when stats is 0); false when the primitives do not
 * cover the case: scale and bias must each be one row long, as a row of X is. */
static bool norm_setup(kl_kernel_ctx *c, const kl_isa_fns *f, const kl_tensor *x,
                       int scale_in, int stats, norm_job *j) {
  const kl_tensor *scale = c->in[scale_in];
  const kl_tensor *bias = scale_in + 1 < c->n_in ? c->in[scale_in + 1] : NULL;
  int axis = kl_isa_axis(c->node, "axis", -1, x->rank);
  int64_t len = span(x->dims, axis, x->rank);
  if (!takes_rows(f, x->dtype) || c->out[0]->dtype != x->dtype || scale->dtype != x->dtype ||
      kl_tensor_numel(scale) != len || (bias && (bias->dtype != x->dtype ||
                                                 kl_tensor_numel(bias) != len)))
    return false;
  j->f = f;
  j->row = (kl_norm_row){(size_t)len, kl_attr_float(c->node, "epsilon", 1e-5f),
                         c->node->op == KL_OP_RMSNormalization, scale->data,
                         bias ? bias->data : NULL, 1.0f, 0.0f};
  j->x = x->data;
  j->y = c->out[0]->data;
  j->rows = span(x->dims, 0, axis);
  j->bf16 = x->dtype == KL_BF16;
  j->mean = j->inv = NULL;
  return stats == 0 || (stats_out(c, stats, &j->mean) && stats_out(c, stats + 1, &j->inv));
}

static int norm_run(kl_kernel_ctx *c, norm_job *j) {
  if (j->rows == 0 || j->row.n == 0) return kl_isa_ref(c); /* statistics of nothing */
  int64_t tasks = split_rows(j->rows, (int64_t)j->row.n, &j->per);
  kl_isa_parallel(c, tasks, j->rows * (int64_t)j->row.n, norm_task, j);
  return KILN_OK;
}

/* InstanceNormalization: X [N, C, D...] normalized over D... for each (n, c), then
 * scaled and shifted by Scale[c] and B[c]: rows of one channel each. */
typedef struct instance_job {
  const kl_isa_fns *f;
  const float *x, *scale, *bias;
  float *y;
  int64_t rows, len, channels, per;
  float eps;
} instance_job;

static void instance_task(void *arg, int64_t t) {
  const instance_job *j = arg;
  row_range r = task_rows(t, j->per, j->rows);
  for (int64_t i = r.first; i < r.last; i++) {
    int64_t ch = i % j->channels;
    kl_norm_row row = {(size_t)j->len, j->eps, false, NULL, NULL, j->scale[ch], j->bias[ch]};
    float mean, inv;
    j->f->rows->norm(&row, j->x + i * j->len, j->y + i * j->len, &mean, &inv);
  }
}

static int run_instance_norm(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0], *scale = c->in[1], *bias = c->in[2];
  if (x->dtype != KL_F32 || c->out[0]->dtype != KL_F32 || x->rank < 3 ||
      scale->dtype != KL_F32 || bias->dtype != KL_F32 ||
      kl_tensor_numel(scale) != x->dims[1] || kl_tensor_numel(bias) != x->dims[1])
    return kl_isa_ref(c);
  instance_job j = {f, x->data, scale->data, bias->data, c->out[0]->data,
                    x->dims[0] * x->dims[1], span(x->dims, 2, x->rank), x->dims[1], 0,
                    kl_attr_float(c->node, "epsilon", 1e-5f)};
  if (j.rows == 0 || j.len == 0) return kl_isa_ref(c);
  int64_t tasks = split_rows(j.rows, j.len, &j.per);
  kl_isa_parallel(c, tasks, j.rows * j.len, instance_task, &j);
  return KILN_OK;
}

int kl_run_norm(kl_kernel_ctx *c, const kl_isa_fns *f) {
  if (c->node->op == KL_OP_InstanceNormalization) return run_instance_norm(c, f);
  norm_job j = {0};
  bool layer = c->node->op == KL_OP_LayerNormalization;
  if (!norm_setup(c, f, c->in[0], 1, layer ? 1 : 0, &j)) return kl_isa_ref(c);
  return norm_run(c, &j);
}

/* SkipLayerNorm (X, Skip, Scale, B?) -> Y, Sum?: Skip must have X's shape here (the
 * op allows it to broadcast). Without the Sum output, X + Skip is formed in Y's row
 * and normalized in place. */
int kl_run_skip_norm(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0], *skip = c->in[1];
  kl_tensor *sum = c->n_out > 1 ? c->out[1] : NULL;
  norm_job j = {0};
  int64_t n = kl_tensor_numel(x);
  if (skip->dtype != x->dtype || kl_tensor_numel(skip) != n ||
      kl_tensor_numel(c->out[0]) != n || (sum && sum->dtype != x->dtype) ||
      !norm_setup(c, f, x, 2, 0, &j))
    return kl_isa_ref(c);
  j.skip = skip->data;
  j.sum = sum ? sum->data : j.y;
  return norm_run(c, &j);
}

/* ---- ReduceSum, ReduceMean, GlobalAveragePool ---- */

/* X viewed as [outer, len, inner], reducing the middle: y[o, i] = sum over j. */
typedef struct reduce_job {
  const kl_isa_fns *f;
  const float *x;
  float *y;
  int64_t outer, len, inner, per;
  bool mean;
} reduce_job;

/* y[i] = the sum of x's len rows of inner floats. Rows are added in blocks of
 * REDUCE_BLOCK, each block summed apart and then the block sums, in column chunks of
 * REDUCE_CHUNK floats: one chain of len additions per column lost accuracy in
 * proportion to len (a channels-last ReduceMean over 56x56 pixels: 3.5x the error of
 * the same mean over contiguous pixels, which rexnet's squeeze-excitation blocks then
 * amplified 30-fold). */
enum { REDUCE_BLOCK = 64, REDUCE_CHUNK = 256 };

static void reduce_rows(const kl_isa_fns *f, const float *x, int64_t len, int64_t inner,
                        float *y) {
  float part[REDUCE_CHUNK];
  for (int64_t i0 = 0; i0 < inner; i0 += REDUCE_CHUNK) {
    size_t w = (size_t)(inner - i0 < REDUCE_CHUNK ? inner - i0 : REDUCE_CHUNK);
    const float *xc = x + i0;
    float *yc = y + i0;
    for (int64_t k0 = 0; k0 < len; k0 += REDUCE_BLOCK) {
      int64_t k1 = len - k0 < REDUCE_BLOCK ? len : k0 + REDUCE_BLOCK;
      float *acc = k0 == 0 ? yc : part;
      memcpy(acc, xc + k0 * inner, w * sizeof *acc);
      for (int64_t k = k0 + 1; k < k1; k++)
        f->elt->binary(KL_BIN_ADD, acc, 1, xc + k * inner, 1, acc, w);
      if (k0) f->elt->binary(KL_BIN_ADD, yc, 1, part, 1, yc, w);
    }
  }
}

static void reduce_task(void *arg, int64_t t) {
  const reduce_job *j = arg;
  row_range r = task_rows(t, j->per, j->outer);
  float count = (float)j->len;
  for (int64_t o = r.first; o < r.last; o++) {
    const float *x = j->x + o * j->len * j->inner;
    if (j->inner == 1) {
      float s = j->f->rows->sum(x, (size_t)j->len);
      j->y[o] = j->mean ? s / count : s;
      continue;
    }
    float *y = j->y + o * j->inner;
    reduce_rows(j->f, x, j->len, j->inner, y);
    if (j->mean) j->f->elt->binary(KL_BIN_DIV, y, 1, &count, 0, y, (size_t)j->inner);
  }
}

static int reduce_run(kl_kernel_ctx *c, reduce_job *j) {
  int64_t tasks = split_rows(j->outer, j->len * j->inner, &j->per);
  kl_isa_parallel(c, tasks, j->outer * j->len * j->inner, reduce_task, j);
  return KILN_OK;
}

/* The reduced axes as one block [outer, len, inner]; false when they are not adjacent
 * (size-1 axes may sit anywhere). */
static bool reduce_block(const kl_tensor *x, const bool *mask, reduce_job *j) {
  int first = -1, last = -1;
  for (int d = 0; d < x->rank; d++)
    if (mask[d] && x->dims[d] != 1) {
      if (first < 0) first = d;
      last = d;
    }
  if (first < 0) first = last = x->rank; /* nothing of size > 1 reduced */
  for (int d = first; d < last; d++)
    if (!mask[d] && x->dims[d] != 1) return false;
  j->outer = span(x->dims, 0, first);
  j->len = first < x->rank ? span(x->dims, first, last + 1) : 1;
  j->inner = span(x->dims, last + 1 > x->rank ? x->rank : last + 1, x->rank);
  return true;
}

int kl_run_reduce(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0], *a = c->n_in > 1 ? c->in[1] : NULL;
  int64_t axes[KL_MAX_RANK];
  int n_axes = a ? (int)kl_tensor_numel(a) : 0;
  if (x->dtype != KL_F32 || c->out[0]->dtype != KL_F32 || n_axes > KL_MAX_RANK ||
      kl_tensor_numel(x) == 0)
    return kl_isa_ref(c);
  for (int i = 0; i < n_axes; i++) axes[i] = kl_load_i64(a->data, a->dtype, (size_t)i);
  bool mask[KL_MAX_RANK];
  kiln_status st = kl_reduce_mask(c->node, x->rank, axes, n_axes, mask, c->e);
  if (st != KILN_OK) return st;
  reduce_job j = {.f = f, .x = x->data, .y = c->out[0]->data,
                  .mean = c->node->op == KL_OP_ReduceMean};
  if (!reduce_block(x, mask, &j)) return kl_isa_ref(c);
  return reduce_run(c, &j);
}

int kl_run_global_pool(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0];
  if (x->dtype != KL_F32 || c->out[0]->dtype != KL_F32 || x->rank < 2 ||
      kl_tensor_numel(x) == 0)
    return kl_isa_ref(c);
  reduce_job j = {.f = f, .x = x->data, .y = c->out[0]->data, .outer = x->dims[0] * x->dims[1],
                  .len = span(x->dims, 2, x->rank), .inner = 1, .mean = true};
  return reduce_run(c, &j);
}
