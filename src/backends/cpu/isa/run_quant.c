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

/* QLinearAdd of two same-shape operands, over chunks on the node's threads; a broadcast
 * runs the reference kernel. */
typedef struct qadd_job {
  const kl_quant_fns *fns;
  bool u8;
  const void *a, *b;
  void *y;
  float sa, sb, sc;
  int32_t za, zb, zc;
  int64_t n;
} qadd_job;

static void qadd_task(void *arg, int64_t t) {
  const qadd_job *j = arg;
  int64_t i = t * CHUNK;
  size_t len = (size_t)(j->n - i < CHUNK ? j->n - i : CHUNK);
  if (j->u8)
    j->fns->qadd_u8((const uint8_t *)j->a + i, j->sa, j->za, (const uint8_t *)j->b + i, j->sb,
                    j->zb, j->sc, j->zc, (uint8_t *)j->y + i, len);
  else
    j->fns->qadd_s8((const int8_t *)j->a + i, j->sa, j->za, (const int8_t *)j->b + i, j->sb,
                    j->zb, j->sc, j->zc, (int8_t *)j->y + i, len);
}

static int32_t zero_point(const kl_tensor *z) {
  return z->dtype == KL_U8 ? ((const uint8_t *)z->data)[0] : ((const int8_t *)z->data)[0];
}

static int run_qadd(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *a = c->in[0], *b = c->in[3];
  kl_tensor *y = c->out[0];
  if (a->rank != b->rank || a->rank != y->rank ||
      memcmp(a->dims, y->dims, sizeof(int64_t) * (size_t)a->rank) != 0 ||
      memcmp(b->dims, y->dims, sizeof(int64_t) * (size_t)a->rank) != 0)
    return kl_isa_ref(c);
  qadd_job j = {f->quant, y->dtype == KL_U8, a->data, b->data, y->data,
                *(const float *)c->in[1]->data, *(const float *)c->in[4]->data,
                *(const float *)c->in[6]->data, zero_point(c->in[2]), zero_point(c->in[5]),
                zero_point(c->in[7]), kl_tensor_numel(y)};
  kl_isa_parallel(c, (j.n + CHUNK - 1) / CHUNK, j.n, qadd_task, &j);
  return KILN_OK;
}

int kl_run_quantize(kl_kernel_ctx *c, const kl_isa_fns *f) {
  if (c->node->op == KL_OP_KilnQLinearAdd) return run_qadd(c, f);
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
