/* Drivers of QuantizeLinear and DequantizeLinear per tensor (one scale, one zero point):
 * float32 x and scale to uint8 or int8 and back, over contiguous chunks on the node's
 * threads. Per-axis and blocked scales, other dtypes, a `precision` other than float32
 * and saturate=0 run the reference kernel. */
#include "backends/cpu/isa/run.h"

#include <string.h>

#define CHUNK 16384 /* elements per task */

typedef struct quant_job {
  const kl_quant_fns *fns;
  bool quantize, u8;
  const void *x;
  void *y;
  float scale;
  int32_t zp;
  int64_t n;
} quant_job;

static void quant_task(void *arg, int64_t t) {
  const quant_job *j = arg;
  int64_t i = t * CHUNK;
  size_t len = (size_t)(j->n - i < CHUNK ? j->n - i : CHUNK);
  if (j->quantize && j->u8)
    j->fns->quantize_u8((const float *)j->x + i, j->scale, j->zp, (uint8_t *)j->y + i, len);
  else if (j->quantize)
    j->fns->quantize_s8((const float *)j->x + i, j->scale, j->zp, (int8_t *)j->y + i, len);
  else if (j->u8)
    j->fns->dequantize_u8((const uint8_t *)j->x + i, j->scale, j->zp, (float *)j->y + i, len);
  else
    j->fns->dequantize_s8((const int8_t *)j->x + i, j->scale, j->zp, (float *)j->y + i, len);
}

static int run_job(const kl_kernel_ctx *c, quant_job *j) {
  kl_isa_parallel(c, (j->n + CHUNK - 1) / CHUNK, j->n, quant_task, j);
  return KILN_OK;
}

static bool is_q8(kl_dtype t) { return t == KL_U8 || t == KL_I8; }

/* One scale and (absent or) one zero point of dtype q. */
static bool per_tensor(const kl_kernel_ctx *c, kl_dtype q, int32_t *zp) {
  const kl_tensor *s = c->in[1], *z = c->n_in > 2 ? c->in[2] : NULL;
  if (s->dtype != KL_F32 || kl_tensor_numel(s) != 1 || kl_attr_int(c->node, "block_size", 0))
    return false;
  *zp = 0;
  if (!z) return true;
  if (z->dtype != q || kl_tensor_numel(z) != 1) return false;
  *zp = q == KL_U8 ? ((const uint8_t *)z->data)[0] : ((const int8_t *)z->data)[0];
  return true;
}

/* QLinearAdd and QLinearMul over chunks (or rows) on the node's threads: operands of
 * one shape, or one of them one value per leading index ([N, C, 1, 1] against
 * [N, C, H, W]: a squeeze-and-excitation scale); other broadcasts run the reference. */
typedef struct qbin_job {
  const kl_quant_fns *fns;
  bool u8, mul;
  const uint8_t *a, *b; /* bytes of uint8 or int8 codes */
  uint8_t *y;
  float sa, sb, sc;
  int32_t za, zb, zc;
  int64_t n, inner; /* inner: the elements per b value (0: b has a's shape) */
} qbin_job;

static void qbin_span(const qbin_job *j, int64_t at, int64_t b_at, size_t len, size_t bstep) {
  const kl_quant_fns *f = j->fns;
  if (j->u8)
    (j->mul ? f->qmul_u8 : f->qadd_u8)(j->a + at, j->sa, j->za, j->b + b_at, j->sb, j->zb,
                                       j->sc, j->zc, j->y + at, len, bstep);
  else
    (j->mul ? f->qmul_s8 : f->qadd_s8)((const int8_t *)j->a + at, j->sa, j->za,
                                       (const int8_t *)j->b + b_at, j->sb, j->zb, j->sc,
                                       j->zc, (int8_t *)j->y + at, len, bstep);
}

static void qbin_task(void *arg, int64_t t) {
  const qbin_job *j = arg;
  if (j->inner) { /* row t: b's value t over inner elements */
    qbin_span(j, t * j->inner, t, (size_t)j->inner, 0);
    return;
  }
  int64_t i = t * CHUNK;
  qbin_span(j, i, i, (size_t)(j->n - i < CHUNK ? j->n - i : CHUNK), 1);
}

static int32_t zero_point(const kl_tensor *z) {
  return z->dtype == KL_U8 ? ((const uint8_t *)z->data)[0] : ((const int8_t *)z->data)[0];
}

static bool same_dims(const kl_tensor *a, const kl_tensor *b) {
  return a->rank == b->rank && memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) == 0;
}

/* The elements of y per value of b when b is y's shape over its leading dims and 1
 * over the rest (of y's rank); 0 when it is not so. */
static int64_t leading(const kl_tensor *b, const kl_tensor *y) {
  if (b->rank != y->rank) return 0;
  int k = 0;
  while (k < y->rank && b->dims[k] == y->dims[k]) k++;
  int64_t inner = 1;
  for (int d = k; d < y->rank; d++) {
    if (b->dims[d] != 1) return 0;
    inner *= y->dims[d];
  }
  return inner;
}

static int run_qbin(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *a = c->in[0], *b = c->in[3];
  kl_tensor *y = c->out[0];
  int ia = 0, ib = 3; /* commutative: the full operand first */
  int64_t inner = 0;
  if (!same_dims(a, y) && same_dims(b, y)) {
    ia = 3;
    ib = 0;
  }
  if (!same_dims(c->in[ia], y) || (!same_dims(c->in[ib], y) && !(inner = leading(c->in[ib], y))))
    return kl_isa_ref(c);
  qbin_job j = {f->quant, y->dtype == KL_U8, c->node->op == KL_OP_KilnQLinearMul,
                c->in[ia]->data, c->in[ib]->data, y->data,
                *(const float *)c->in[ia + 1]->data, *(const float *)c->in[ib + 1]->data,
                *(const float *)c->in[6]->data, zero_point(c->in[ia + 2]),
                zero_point(c->in[ib + 2]), zero_point(c->in[7]), kl_tensor_numel(y), inner};
  if (j.n == 0) return KILN_OK;
  int64_t tasks = inner ? j.n / inner : (j.n + CHUNK - 1) / CHUNK;
  kl_isa_parallel(c, tasks, j.n, qbin_task, &j);
  return KILN_OK;
}

typedef struct lookup_job {
  const kl_quant_fns *fns;
  const uint8_t *x, *table;
  uint8_t *y, flip;
  int64_t n;
} lookup_job;

static void lookup_task(void *arg, int64_t t) {
  const lookup_job *j = arg;
  int64_t i = t * CHUNK;
  j->fns->lookup(j->x + i, j->flip, j->table, j->y + i,
                 (size_t)(j->n - i < CHUNK ? j->n - i : CHUNK));
}

static int run_lookup(kl_kernel_ctx *c, const kl_isa_fns *f) {
  lookup_job j = {f->quant, c->in[0]->data, c->in[1]->data, c->out[0]->data,
                  c->in[0]->dtype == KL_I8 ? 0x80 : 0, kl_tensor_numel(c->out[0])};
  kl_isa_parallel(c, (j.n + CHUNK - 1) / CHUNK, j.n, lookup_task, &j);
  return KILN_OK;
}

int kl_run_quantize(kl_kernel_ctx *c, const kl_isa_fns *f) {
  if (c->node->op == KL_OP_KilnQLinearAdd || c->node->op == KL_OP_KilnQLinearMul)
    return run_qbin(c, f);
  if (c->node->op == KL_OP_KilnQLinearLookup) return run_lookup(c, f);
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int32_t zp;
  int64_t prec = kl_attr_int(c->node, "precision", KL_F32);
  if (x->dtype != KL_F32 || !is_q8(y->dtype) || !per_tensor(c, y->dtype, &zp) ||
      (prec != KL_F32 && prec != KL_UNDEFINED) || kl_attr_int(c->node, "saturate", 1) != 1)
    return kl_isa_ref(c);
  quant_job j = {f->quant, true, y->dtype == KL_U8, x->data, y->data,
                 *(const float *)c->in[1]->data, zp, kl_tensor_numel(x)};
  return run_job(c, &j);
}

int kl_run_dequantize(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int32_t zp;
  if (!is_q8(x->dtype) || y->dtype != KL_F32 || !per_tensor(c, x->dtype, &zp))
    return kl_isa_ref(c);
  quant_job j = {f->quant, false, x->dtype == KL_U8, x->data, y->data,
                 *(const float *)c->in[1]->data, zp, kl_tensor_numel(x)};
  return run_job(c, &j);
}
