/* Driver of the ISA kernel for inference BatchNormalization, float32:
 *   Y[n, c, ...] = (X[n, c, ...] - mean[c]) * k[c] + B[c],  k[c] = scale[c] / sqrt(var[c] + eps)
 * with X [N, C, D1, ...] (a 1-D X is [N] with C = 1) and scale, B, mean, var [C].
 *
 * The parameters are read at every run (they may be graph inputs, not constants); k is
 * formed in double, as the reference does, and rounded to float once. Each row of one
 * channel's inner elements goes to the ISA's batchnorm with the channel's scalars
 * (step 0). When rows are short (rank 2, small spatial dims), channels are taken a
 * block at a time instead: their parameters are spread over a stack buffer, one value
 * per element, and the block's elements of each batch index are done in one call
 * (step 1). No heap memory: the buffers are on the stack.
 *
 * Training mode (more than one output, or training_mode set), other dtypes and
 * parameters of the wrong size run the reference kernel.
 */
#include "backends/cpu/isa/run.h"

#include <math.h>

/* Elements per task along long rows (64 KiB of float). */
#define CHUNK 16384
/* Rows up to this long are done a channel block at a time. */
#define SHORT_ROW 16
/* Elements of a channel block's spread parameters. */
#define SPREAD 1024

typedef struct bn_job {
  const kl_isa_fns *f;
  const float *x, *scale, *bias, *mean, *var;
  float *y;
  double eps;
  int64_t batch, channels, inner, per, total;
} bn_job;

/* Channel ch's mean, k and shift. */
static void bn_params(const bn_job *j, int64_t ch, float *m, float *k, float *b) {
  *m = j->mean[ch];
  *k = (float)((double)j->scale[ch] / sqrt((double)j->var[ch] + j->eps));
  *b = j->bias[ch];
}

/* Long rows: elements [t * per, (t + 1) * per), cut where channels change. */
static void bn_long_task(void *arg, int64_t t) {
  const bn_job *j = arg;
  int64_t i = t * j->per, last = i + j->per < j->total ? i + j->per : j->total;
  while (i < last) {
    int64_t row = i / j->inner, end = (row + 1) * j->inner;
    if (end > last) end = last;
    float m, k, b;
    bn_params(j, row % j->channels, &m, &k, &b);
    j->f->elt->batchnorm(j->x + i, &m, &k, &b, 0, j->y + i, (size_t)(end - i));
    i = end;
  }
}

/* Short rows: channel blocks [t * per, (t + 1) * per) of every batch index. */
static void bn_short_task(void *arg, int64_t t) {
  const bn_job *j = arg;
  float m[SPREAD], k[SPREAD], b[SPREAD];
  int64_t c0 = t * j->per, c1 = c0 + j->per < j->channels ? c0 + j->per : j->channels;
  int64_t n = (c1 - c0) * j->inner;
  for (int64_t ch = c0; ch < c1; ch++) {
    float cm, ck, cb;
    bn_params(j, ch, &cm, &ck, &cb);
    for (int64_t e = (ch - c0) * j->inner; e < (ch - c0 + 1) * j->inner; e++)
      m[e] = cm, k[e] = ck, b[e] = cb;
  }
  for (int64_t nb = 0; nb < j->batch; nb++) {
    int64_t at = (nb * j->channels + c0) * j->inner;
    j->f->elt->batchnorm(j->x + at, m, k, b, 1, j->y + at, (size_t)n);
  }
}

static bool f32_of(const kl_tensor *t, int64_t n) {
  return t && t->dtype == KL_F32 && kl_tensor_numel(t) == n;
}

int kl_run_batchnorm(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  if (c->n_in < 5 || c->n_out != 1 || kl_attr_int(c->node, "training_mode", 0) != 0 ||
      x->dtype != KL_F32 || y->dtype != KL_F32 || x->rank < 1)
    return kl_isa_ref(c);
  bn_job j = {.f = f, .x = x->data, .y = y->data, .batch = x->dims[0],
              .channels = x->rank >= 2 ? x->dims[1] : 1, .inner = 1,
              .eps = kl_attr_float(c->node, "epsilon", 1e-5f)};
  for (int d = 2; d < x->rank; d++) j.inner *= x->dims[d];
  for (int i = 1; i < 5; i++)
    if (!f32_of(c->in[i], j.channels)) return kl_isa_ref(c);
  j.scale = c->in[1]->data, j.bias = c->in[2]->data;
  j.mean = c->in[3]->data, j.var = c->in[4]->data;
  j.total = kl_tensor_numel(x);
  if (j.total == 0) return KILN_OK;
  if (j.inner > SHORT_ROW) {
    int64_t tasks = kl_isa_split(j.total, CHUNK, &j.per);
    kl_isa_parallel(c, tasks, j.total, bn_long_task, &j);
    return KILN_OK;
  }
  /* channel blocks small enough for the spread buffers, large enough per task */
  int64_t per_block = SPREAD / j.inner, want = CHUNK / (j.inner * j.batch) + 1;
  int64_t tasks = kl_isa_split(j.channels, want < per_block ? want : per_block, &j.per);
  if (j.per > per_block) { /* more channels than kl_isa_split's task cap allows */
    j.per = per_block;
    tasks = (j.channels + per_block - 1) / per_block;
  }
  kl_isa_parallel(c, tasks, j.total, bn_short_task, &j);
  return KILN_OK;
}
