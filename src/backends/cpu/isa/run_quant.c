/* Drivers of QuantizeLinear and DequantizeLinear per tensor (one scale, one zero point):
 * float32 x and scale to uint8 or int8 and back, over contiguous chunks on the node's
 * threads. Per-axis and blocked scales, other dtypes, a `precision` other than float32
 * and saturate=0 run the reference kernel. And MatMulInteger of 2-D B (below). */
#include "backends/cpu/isa/run.h"

#include <math.h>
#include <stdlib.h>
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

/* Elements at..at + len of a and y against b's codes from bcodes. */
static void qbin_codes(const qbin_job *j, int64_t at, const uint8_t *bcodes, size_t len,
                       size_t bstep) {
  const kl_quant_fns *f = j->fns;
  if (j->u8)
    (j->mul ? f->qmul_u8 : f->qadd_u8)(j->a + at, j->sa, j->za, bcodes, j->sb, j->zb,
                                       j->sc, j->zc, j->y + at, len, bstep);
  else
    (j->mul ? f->qmul_s8 : f->qadd_s8)((const int8_t *)j->a + at, j->sa, j->za,
                                       (const int8_t *)bcodes, j->sb, j->zb, j->sc,
                                       j->zc, (int8_t *)j->y + at, len, bstep);
}

static void qbin_span(const qbin_job *j, int64_t at, int64_t b_at, size_t len, size_t bstep) {
  qbin_codes(j, at, j->b + b_at, len, bstep);
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

/* QLinearGlobalAveragePool (ops.def) on X [N, C, S...]: each plane's codes summed by
 * the level's sum_codes (an int8 plane as its codes plus 128, the 128 S taken off),
 * then acc * m rounded in float32 as the reference does (ref/qadd.c); a plane per task
 * group of GAP_PLANES. */
#define GAP_PLANES 16
typedef struct gap_job {
  const kl_quant_fns *fns;
  const uint8_t *x;
  uint8_t *y;
  bool u8;
  int64_t planes, size, channels;
  int32_t zx, zy;
  float m;
} gap_job;

/* Y's code of a plane whose codes (as uint8) add up to `codes`. */
static uint8_t gap_code(const gap_job *j, uint64_t codes) {
  int64_t off = (j->u8 ? 0 : 128) + j->zx; /* per element */
  float lo = (float)((j->u8 ? 0 : -128) - j->zy), hi = (float)((j->u8 ? 255 : 127) - j->zy);
  float q = (float)((int64_t)codes - off * j->size) * j->m;
  q = q == q ? q : 0.0f;
  q = q < lo ? lo : q > hi ? hi : q;
  return (uint8_t)((int32_t)rintf(q) + j->zy);
}

static void gap_task(void *arg, int64_t t) {
  const gap_job *j = arg;
  int64_t end = (t + 1) * GAP_PLANES < j->planes ? (t + 1) * GAP_PLANES : j->planes;
  for (int64_t p = t * GAP_PLANES; p < end; p++)
    j->y[p] = gap_code(j, j->fns->sum_codes(j->x + p * j->size, j->u8 ? 0 : 0x80,
                                            (size_t)j->size));
}

/* The same over X held channels-last ([N, S, C]): task t sums GAP_COLUMNS channels of
 * one image over its S pixels, in blocks of rows that keep the 32-bit sums exact. */
#define GAP_COLUMNS 64
#define GAP_ROWS ((int64_t)1 << 23)
static void gap_cl_task(void *arg, int64_t t) {
  const gap_job *j = arg;
  int64_t blocks = (j->channels + GAP_COLUMNS - 1) / GAP_COLUMNS, n = t / blocks;
  int64_t c0 = t % blocks * GAP_COLUMNS;
  size_t len = (size_t)(j->channels - c0 < GAP_COLUMNS ? j->channels - c0 : GAP_COLUMNS);
  uint64_t total[GAP_COLUMNS] = {0};
  uint32_t part[GAP_COLUMNS];
  const uint8_t *x = j->x + n * j->size * j->channels + c0;
  for (int64_t r = 0; r < j->size; r += GAP_ROWS) {
    int64_t rows = j->size - r < GAP_ROWS ? j->size - r : GAP_ROWS;
    j->fns->sum_columns(x + r * j->channels, j->u8 ? 0 : 0x80, (size_t)j->channels,
                        (size_t)rows, len, part);
    for (size_t i = 0; i < len; i++) total[i] += part[i];
  }
  for (size_t i = 0; i < len; i++) j->y[n * j->channels + c0 + (int64_t)i] = gap_code(j, total[i]);
}

/* Channels-last, fewer images than threads: each task sums one part of one image's
 * pixels over all its channels (rows of C codes one after the other, where the column
 * tasks above read 64 codes of each row), the parts added in 64 bits after. At 2
 * threads a QDQ EfficientNet-B0's 17 pools took 0.22 ms that way against 0.16 at 1. */
#define GAP_PART_CHANNELS 4096
typedef struct gap_part_job {
  const gap_job *g;
  int64_t parts, per;
  uint64_t *sums; /* [image][part][C] */
} gap_part_job;

static void gap_part_task(void *arg, int64_t t) {
  const gap_part_job *p = arg;
  const gap_job *j = p->g;
  int64_t n = t / p->parts, r0 = t % p->parts * p->per;
  int64_t r1 = r0 + p->per < j->size ? r0 + p->per : j->size;
  uint64_t *sum = p->sums + t * j->channels;
  uint32_t part[GAP_PART_CHANNELS];
  for (int64_t c = 0; c < j->channels; c++) sum[c] = 0;
  for (int64_t r = r0; r < r1; r += GAP_ROWS) {
    int64_t rows = r1 - r < GAP_ROWS ? r1 - r : GAP_ROWS;
    j->fns->sum_columns(j->x + (n * j->size + r) * j->channels, j->u8 ? 0 : 0x80,
                        (size_t)j->channels, (size_t)rows, (size_t)j->channels, part);
    for (int64_t c = 0; c < j->channels; c++) sum[c] += part[c];
  }
}

static bool gap_parts(const kl_kernel_ctx *c, const gap_job *j, int64_t images) {
  int threads = kl_isa_threads(c);
  if (threads < 2 || images >= threads || j->channels > GAP_PART_CHANNELS || j->size < 64 ||
      j->size * j->channels < 8192)
    return false;
  gap_part_job p = {j, (threads + images - 1) / images, 0, NULL};
  p.per = (j->size + p.parts - 1) / p.parts;
  p.parts = (j->size + p.per - 1) / p.per;
  uint64_t stack[4096]; /* up to 2 parts of 2048 channels without a malloc at every run */
  size_t need = (size_t)(images * p.parts * j->channels);
  p.sums = need <= sizeof stack / sizeof *stack ? stack : malloc(sizeof(uint64_t) * need);
  if (!p.sums) return false;
  kl_isa_parallel(c, images * p.parts, INT64_MAX, gap_part_task, &p);
  for (int64_t n = 0; n < images; n++)
    for (int64_t ch = 0; ch < j->channels; ch++) {
      uint64_t total = 0;
      for (int64_t k = 0; k < p.parts; k++) total += p.sums[(n * p.parts + k) * j->channels + ch];
      j->y[n * j->channels + ch] = gap_code(j, total);
    }
  if (p.sums != stack) free(p.sums);
  return true;
}

static int run_qgap(kl_kernel_ctx *c, const kl_isa_fns *f, bool cl) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  if (x->rank < 3 || !is_q8(x->dtype) || y->dtype != x->dtype) {
    if (!cl) return kl_isa_ref(c);
    return kl_fail(c->e, KILN_ERR_INTERNAL, "QLinearGlobalAveragePool held channels-last "
                   "with X of rank %d (%s)", x->rank, kl_dtype_name(x->dtype));
  }
  int64_t size = kl_tensor_numel(x) / (x->dims[0] * x->dims[1] > 0 ? x->dims[0] * x->dims[1] : 1);
  gap_job j = {f->quant, x->data, y->data, x->dtype == KL_U8, x->dims[0] * x->dims[1], size,
               x->dims[1], zero_point(c->in[2]), zero_point(c->in[4]),
               *(const float *)c->in[1]->data / (*(const float *)c->in[3]->data * (float)size)};
  if (j.planes == 0) return KILN_OK;
  if (size == 0) return kl_isa_ref(c); /* no codes: Y is the same bytes in both layouts */
  if (cl && gap_parts(c, &j, x->dims[0])) return KILN_OK;
  if (cl) {
    int64_t tasks = x->dims[0] * ((x->dims[1] + GAP_COLUMNS - 1) / GAP_COLUMNS);
    kl_isa_parallel(c, tasks, j.planes * size, gap_cl_task, &j);
    return KILN_OK;
  }
  kl_isa_parallel(c, (j.planes + GAP_PLANES - 1) / GAP_PLANES, j.planes * size, gap_task, &j);
  return KILN_OK;
}

/* DynamicQuantizeLinear: the range [min(0, x), max(0, x)] in one pass, then x quantized
 * to uint8 on the node's threads by the level's quantize primitive, with the scale and
 * zero point worked out as the reference does (ref/quant.c); a NaN or infinity goes to
 * the reference, which names it. */
static int run_dynamic_quantize(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0];
  const float *xv = x->data;
  int64_t n = kl_tensor_numel(x);
  float lo = 0.0f, hi = 0.0f;
  if (!f->quant->range(xv, (size_t)n, &lo, &hi) || c->out[0]->dtype != KL_U8)
    return kl_isa_ref(c);
  float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
  float zp = 0.0f - lo / scale;
  zp = rintf(zp < 0.0f ? 0.0f : zp > 255.0f ? 255.0f : zp);
  quant_job j = {f->quant, true, true, x->data, c->out[0]->data, scale, (int32_t)zp, n};
  int st = run_job(c, &j);
  if (c->n_out > 1 && c->out[1]) *(float *)c->out[1]->data = scale;
  if (c->n_out > 2 && c->out[2]) *(uint8_t *)c->out[2]->data = (uint8_t)zp;
  return st;
}

/* Cast of int32 and int64 to float32 (each rounded to nearest, as the reference's
 * (float)v) or to bool (nonzero: 1), and of bf16 to float32 (a bf16 training step's weights: the bits moved up 16, exact, a signaling NaN
 * made quiet as the reference's conversion through double does). */
typedef struct cast_job {
  const void *x;
  float *y;
  int64_t n;
} cast_job;

/* int32 or int64 (T) to bool (nonzero is true, 1, as the reference; Y uint8_t) or to
 * float32 (Y float, rounded to nearest as the reference's conversion). */
#define CAST_TASK(name, T, Y, conv)                                                      \
  static void name(void *arg, int64_t t) {                                               \
    const cast_job *j = arg;                                                             \
    int64_t i = t * CHUNK, end = j->n - i < CHUNK ? j->n : i + CHUNK;                    \
    const T *x = j->x;                                                                   \
    Y *y = (Y *)j->y;                                                                    \
    for (; i < end; i++) y[i] = conv(x[i]);                                              \
  }
#define TO_BOOL(v) ((v) != 0)
#define TO_FLOAT(v) ((float)(v))
CAST_TASK(cast_bool_int32_t, int32_t, uint8_t, TO_BOOL)
CAST_TASK(cast_bool_int64_t, int64_t, uint8_t, TO_BOOL)
CAST_TASK(cast_float_int32_t, int32_t, float, TO_FLOAT)
CAST_TASK(cast_float_int64_t, int64_t, float, TO_FLOAT)

static void cast_bf16_task(void *arg, int64_t t) {
  const cast_job *j = arg;
  int64_t i = t * CHUNK, end = j->n - i < CHUNK ? j->n : i + CHUNK;
  const uint16_t *x = j->x;
  uint32_t *y = (uint32_t *)j->y;
  for (; i < end; i++)
    y[i] = (uint32_t)x[i] << 16 | ((x[i] & 0x7fffu) > 0x7f80u ? 0x400000u : 0u);
}

static int run_cast(kl_kernel_ctx *c) {
  kl_dtype from = c->in[0]->dtype;
  kl_dtype to = c->out[0]->dtype;
  bool ints = from == KL_I32 || from == KL_I64;
  if (!(ints && (to == KL_F32 || to == KL_BOOL)) && !(from == KL_BF16 && to == KL_F32))
    return kl_isa_ref(c);
  cast_job j = {c->in[0]->data, c->out[0]->data, kl_tensor_numel(c->out[0])};
  kl_task_fn fn = from == KL_BF16 ? cast_bf16_task
                  : to == KL_BOOL ? (from == KL_I64 ? cast_bool_int64_t : cast_bool_int32_t)
                  : from == KL_I64 ? cast_float_int64_t
                                   : cast_float_int32_t;
  kl_isa_parallel(c, (j.n + CHUNK - 1) / CHUNK, j.n, fn, &j);
  return KILN_OK;
}

int kl_run_quantize(kl_kernel_ctx *c, const kl_isa_fns *f) {
  if (c->node->op == KL_OP_DynamicQuantizeLinear) return run_dynamic_quantize(c, f);
  if (c->node->op == KL_OP_Cast) return run_cast(c);
  if (c->node->op == KL_OP_KilnQLinearAdd || c->node->op == KL_OP_KilnQLinearMul)
    return run_qbin(c, f);
  if (c->node->op == KL_OP_KilnQLinearLookup) return run_lookup(c, f);
  if (c->node->op == KL_OP_KilnQLinearGlobalAveragePool) return run_qgap(c, f, false);
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

/* QLinearAdd and QLinearMul over tensors held channels-last: one operand and Y
 * [N, S, C], the other one value per image and channel ([N, C, 1...], the same bytes in
 * either layout): each pixel's C codes against its image's C values. */
typedef struct qbin_cl_job {
  qbin_job bin;
  int64_t channels, size, per_task;
} qbin_cl_job;

/* The image's C values repeated for as many pixels as fit in QBIN_TILE codes, so that
 * the primitive takes that many pixels at a time (one when C is larger). */
#define QBIN_TILE 4096
static void qbin_cl_task(void *arg, int64_t t) {
  const qbin_cl_job *j = arg;
  int64_t ch = j->channels, rows = j->bin.n / ch, end = (t + 1) * j->per_task;
  int64_t per = ch < QBIN_TILE ? QBIN_TILE / ch : 1, image = -1;
  uint8_t tile[QBIN_TILE];
  end = end < rows ? end : rows;
  for (int64_t r = t * j->per_task; r < end;) {
    int64_t n = r / j->size, stop = (n + 1) * j->size; /* this image's pixels */
    int64_t count = per < end - r ? per : end - r;
    count = count < stop - r ? count : stop - r;
    const uint8_t *b = j->bin.b + n * ch;
    if (per > 1 && n != image)
      for (int64_t p = 0; p < per; p++) memcpy(tile + p * ch, b, (size_t)ch);
    image = n;
    qbin_codes(&j->bin, r * ch, per > 1 ? tile : b, (size_t)(count * ch), 1);
    r += count;
  }
}

static int run_qbin_cl(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *y = c->out[0];
  int ia = same_dims(c->in[0], y) ? 0 : 3, ib = 3 - ia;
  const kl_tensor *b = c->in[ib];
  int64_t n = kl_tensor_numel(y), ch = y->rank > 1 ? y->dims[1] : 0;
  if (!same_dims(c->in[ia], y) || y->rank < 3 || b->rank != y->rank || b->dims[0] != y->dims[0] ||
      b->dims[1] != ch || kl_tensor_numel(b) != y->dims[0] * ch)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "%s held channels-last without one operand of "
                   "one value per channel", kl_op_name(c->node->op));
  if (n == 0) return KILN_OK;
  qbin_cl_job j = {{f->quant, y->dtype == KL_U8, c->node->op == KL_OP_KilnQLinearMul,
                    c->in[ia]->data, b->data, y->data, *(const float *)c->in[ia + 1]->data,
                    *(const float *)c->in[ib + 1]->data, *(const float *)c->in[6]->data,
                    zero_point(c->in[ia + 2]), zero_point(c->in[ib + 2]), zero_point(c->in[7]),
                    n, 0},
                   ch, n / (y->dims[0] * ch), 0};
  int64_t tasks = kl_isa_split(n / ch, CHUNK / ch + 1, &j.per_task);
  kl_isa_parallel(c, tasks, n, qbin_cl_task, &j);
  return KILN_OK;
}

int kl_run_quantize_cl(kl_kernel_ctx *c, const kl_isa_fns *f) {
  if (c->node->op == KL_OP_KilnQLinearGlobalAveragePool) return run_qgap(c, f, true);
  if (c->node->op == KL_OP_MaxPool) return kl_run_pool8_cl(c, f);
  if (c->node->op == KL_OP_Concat) {
    int st = kl_run_concat_cl(c, f);
    return st == KILN_ERR_UNSUPPORTED
               ? kl_fail(c->e, KILN_ERR_INTERNAL, "Concat of %d inputs held channels-last",
                         c->n_in)
               : st;
  }
  return run_qbin_cl(c, f);
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

/* MatMulInteger: A [..., M, K] (uint8 or int8) times 2-D B [K, N] (int8 or uint8) into
 * int32 Y [..., M, N], A's zero point one value, B's one or one per column:
 *   Y[m, n] = sum_k (A[m, k] - za) (B[k, n] - zb[n])
 *           = sum_k (A[m, k] - za) B[k, n]  -  zb[n] sum_k (A[m, k] - za)
 * 4 rows at a time (axpy of each B row into all 4), exact in int32 (|sum| <= K 255^2 < 2^31 for the
 * K < 33,000 taken here). Batched B and a per-row A zero point run the reference. */
typedef struct mmint_job {
  const kl_quant_fns *fns;
  const uint8_t *a;
  bool a_u8, b_u8;
  int64_t rows;
  const void *b;
  int32_t za;
  const kl_tensor *zb; /* NULL: 0 */
  int64_t k, n;
  int32_t *y;
} mmint_job;

static int32_t zero_point_at(const kl_tensor *z, int64_t i) {
  int64_t k = kl_tensor_numel(z) == 1 ? 0 : i;
  return z->dtype == KL_U8 ? ((const uint8_t *)z->data)[k] : ((const int8_t *)z->data)[k];
}

/* A - za at row m, column k. */
static int32_t a_at(const mmint_job *j, int64_t m, int64_t k) {
  uint8_t v = j->a[m * j->k + k];
  return (j->a_u8 ? (int32_t)v : (int32_t)(int8_t)v) - j->za;
}

/* Task t: rows 4t .. 4t + 3 (fewer at the end), in column chunks that keep the 4 output
 * rows in the L1 cache while each row of B is read once for all 4. */
#define MMINT_COLS 1024
static void mmint_rows(void *arg, int64_t t) {
  const mmint_job *j = arg;
  int64_t m0 = 4 * t, rows = j->rows - m0 < 4 ? j->rows - m0 : 4;
  int32_t *y = j->y + m0 * j->n;
  memset(y, 0, sizeof(int32_t) * (size_t)(rows * j->n));
  for (int64_t n0 = 0; n0 < j->n; n0 += MMINT_COLS) {
    size_t len = (size_t)(j->n - n0 < MMINT_COLS ? j->n - n0 : MMINT_COLS);
    for (int64_t k = 0; k < j->k; k++) {
      int32_t a[4] = {0, 0, 0, 0};
      for (int64_t r = 0; r < rows; r++) a[r] = a_at(j, m0 + r, k);
      if (!(a[0] | a[1] | a[2] | a[3])) continue;
      const void *b = j->b_u8 ? (const void *)((const uint8_t *)j->b + k * j->n + n0)
                              : (const void *)((const int8_t *)j->b + k * j->n + n0);
      if (rows == 4 && j->b_u8)
        j->fns->axpy4_u8(a, b, y + n0, (size_t)j->n, len);
      else if (rows == 4)
        j->fns->axpy4_s8(a, b, y + n0, (size_t)j->n, len);
      else
        for (int64_t r = 0; r < rows; r++)
          if (j->b_u8) j->fns->axpy_u8(a[r], b, y + r * j->n + n0, len);
          else j->fns->axpy_s8(a[r], b, y + r * j->n + n0, len);
    }
  }
  if (!j->zb) return;
  for (int64_t r = 0; r < rows; r++) {
    int64_t sum = 0;
    for (int64_t k = 0; k < j->k; k++) sum += a_at(j, m0 + r, k);
    for (int64_t n = 0; n < j->n; n++)
      y[r * j->n + n] -= (int32_t)(zero_point_at(j->zb, n) * sum);
  }
}

int kl_run_matmul_integer(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  const kl_tensor *za = c->n_in > 2 ? c->in[2] : NULL, *zb = c->n_in > 3 ? c->in[3] : NULL;
  kl_tensor *y = c->out[0];
  kl_mmint_scale sc;
  bool scaled = kl_mmint_scale_of(c, &sc); /* MatMulIntegerToFloat: then its scale */
  if (a->rank < 2 || b->rank != 2 || !is_q8(b->dtype) || y->dtype != (scaled ? KL_F32 : KL_I32) ||
      a->dims[a->rank - 1] != b->dims[0] || b->dims[0] >= 33000 || y->rank != a->rank ||
      (za && (za->dtype != a->dtype || kl_tensor_numel(za) != 1)) ||
      (zb && (zb->dtype != b->dtype || (kl_tensor_numel(zb) != 1 &&
                                        (zb->rank != 1 || zb->dims[0] != b->dims[1])))))
    return kl_isa_ref(c);
  mmint_job j = {f->quant, a->data, a->dtype == KL_U8, b->dtype == KL_U8, 0, b->data,
                 za ? zero_point_at(za, 0) : 0, zb, b->dims[0], b->dims[1], y->data};
  if (j.k == 0 || j.n == 0) {
    memset(y->data, 0, kl_tensor_nbytes(y));
  } else {
    j.rows = kl_tensor_numel(a) / j.k;
    kl_isa_parallel(c, (j.rows + 3) / 4, j.rows * j.k * j.n, mmint_rows, &j);
  }
  if (scaled) kl_mmint_scale_all(c, &sc);
  return KILN_OK;
}
