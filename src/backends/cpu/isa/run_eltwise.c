/* Drivers of the elementwise ISA kernels (unary activations and broadcasting binary
 * ops), and the helpers every driver shares: threads, task splitting, strided walks. */
#include "backends/cpu/isa/run.h"
#include "ir/fused.h"
#include "kl_config.h"

#include <math.h>
#include <string.h>

#if KL_HAVE_OPENMP
#include <omp.h>
#endif

/* Below this many elements a parallel region costs more than it saves. */
#define PAR_MIN_WORK 32768
#define MAX_TASKS 4096
/* Elements per task of an elementwise op: large enough to amortize the call, small
 * enough (64 KiB of float) that a task's input and output stay in L2. */
#define CHUNK 16384

int kl_isa_ref(kl_kernel_ctx *c) {
  int st = kl_isa_ref_allowed(c, "its optimized kernel has no path for these shapes");
  return st != KILN_OK ? st : kl_op_get(c->node->op)->ref(c);
}

int kl_isa_ref_allowed(const kl_kernel_ctx *c, const char *why) {
  if (c->max_work <= 0) return KILN_OK;
  double steps = kl_node_work(c->node, c->n_in, c->in, c->n_out,
                              (const kl_tensor *const *)c->out);
  double weight = kl_work_weight(c->node, c->n_in, c->in, KL_WORK_REF), work = steps * weight;
  if (work <= (double)c->max_work) return KILN_OK;
  return kl_fail(c->e, KILN_ERR_LIMIT, "about %.3g steps for these shapes, over max_work "
                 "%lld: %s, and kiln's reference kernel, a scalar loop whose steps count %g "
                 "times, would run them (%.3g in all; option max_work, `--max-work N`; 0 "
                 "lifts the bound)", steps, (long long)c->max_work, why, weight, work);
}

void kl_isa_parallel(const kl_kernel_ctx *c, int64_t n_tasks, int64_t work, kl_task_fn fn,
                     void *arg) {
#if KL_HAVE_OPENMP
  if (n_tasks > 1 && c->threads != 1 && work >= PAR_MIN_WORK) {
    int threads = c->threads > 0 ? c->threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t t = 0; t < n_tasks; t++) fn(arg, t);
    return;
  }
#else
  (void)c;
  (void)work;
#endif
  for (int64_t t = 0; t < n_tasks; t++) fn(arg, t);
}

int kl_isa_threads(const kl_kernel_ctx *c) {
#if KL_HAVE_OPENMP
  if (c->threads == 1) return 1;
  return c->threads > 0 ? c->threads : omp_get_max_threads();
#else
  (void)c;
  return 1;
#endif
}

int64_t kl_isa_split(int64_t count, int64_t min_per_task, int64_t *per_task) {
  int64_t per = min_per_task < 1 ? 1 : min_per_task;
  if (count / per > MAX_TASKS) per = count / MAX_TASKS + 1;
  *per_task = per;
  return (count + per - 1) / per;
}

void kl_isa_walk_seek(kl_isa_walk *w, int64_t o) {
  w->off[0] = w->off[1] = 0;
  for (int d = w->rank - 1; d >= 0; d--) {
    w->idx[d] = o % w->dims[d];
    o /= w->dims[d];
    w->off[0] += w->idx[d] * w->stride[0][d];
    w->off[1] += w->idx[d] * w->stride[1][d];
  }
}

void kl_isa_walk_next(kl_isa_walk *w) {
  for (int d = w->rank - 1; d >= 0; d--) {
    w->off[0] += w->stride[0][d];
    w->off[1] += w->stride[1][d];
    if (++w->idx[d] < w->dims[d]) return;
    w->off[0] -= w->stride[0][d] * w->dims[d];
    w->off[1] -= w->stride[1][d] * w->dims[d];
    w->idx[d] = 0;
  }
}

/* Whether level f takes dtype t (float32, or bfloat16 where it has those forms). */
static bool takes(const kl_isa_fns *f, kl_dtype t) {
  return t == KL_F32 || (t == KL_BF16 && f->elt_bf16);
}

/* ---- unary ---- */

bool kl_isa_act(const kl_node *n, kl_act *a) {
  a->alpha = a->beta = 0;
  switch (n->op) {
  case KL_OP_Relu: a->kind = KL_ACT_RELU; return true;
  case KL_OP_Sigmoid: a->kind = KL_ACT_SIGMOID; return true;
  case KL_OP_Tanh: a->kind = KL_ACT_TANH; return true;
  case KL_OP_Exp: a->kind = KL_ACT_EXP; return true;
  case KL_OP_Erf: a->kind = KL_ACT_ERF; return true;
  case KL_OP_HardSwish: a->kind = KL_ACT_HARD_SWISH; return true;
  case KL_OP_LeakyRelu:
    a->kind = KL_ACT_LEAKY_RELU;
    a->alpha = kl_attr_float(n, "alpha", 0.01f);
    return true;
  case KL_OP_Swish:
    a->kind = KL_ACT_SWISH;
    a->alpha = kl_attr_float(n, "alpha", 1.0f);
    return true;
  case KL_OP_HardSigmoid:
    a->kind = KL_ACT_HARD_SIGMOID;
    a->alpha = kl_attr_float(n, "alpha", 0.2f);
    a->beta = kl_attr_float(n, "beta", 0.5f);
    return true;
  case KL_OP_Gelu: {
    const char *approx = kl_attr_string(n, "approximate", "none");
    a->kind = strcmp(approx, "tanh") == 0 ? KL_ACT_GELU_TANH : KL_ACT_GELU_ERF;
    return strcmp(approx, "tanh") == 0 || strcmp(approx, "none") == 0;
  }
  case KL_OP_Clip:
    a->kind = KL_ACT_CLIP;
    a->alpha = -INFINITY;
    a->beta = INFINITY;
    return true;
  default: return false;
  }
}

bool kl_isa_fused_act(const kl_node *n, bool *has, kl_act *a) {
  const kl_fused_act *act = kl_fused_act_find(kl_attr_string(n, "activation", NULL));
  *has = act != NULL;
  a->alpha = a->beta = 0;
  if (!act) return true;
  const float *p = NULL;
  int n_p = kl_attr_floats(n, "activation_params", &p);
  if (act->n_params > 0 && n_p < act->n_params) return false;
  const char *name = act->name;
  if (strcmp(name, "Relu") == 0) a->kind = KL_ACT_RELU;
  else if (strcmp(name, "Sigmoid") == 0) a->kind = KL_ACT_SIGMOID;
  else if (strcmp(name, "Tanh") == 0) a->kind = KL_ACT_TANH;
  else if (strcmp(name, "HardSwish") == 0) a->kind = KL_ACT_HARD_SWISH;
  else if (strcmp(name, "Gelu") == 0) a->kind = KL_ACT_GELU_ERF;
  else if (strcmp(name, "GeluTanh") == 0) a->kind = KL_ACT_GELU_TANH;
  else if (strcmp(name, "Silu") == 0) a->kind = KL_ACT_SWISH, a->alpha = 1.0f;
  else if (strcmp(name, "LeakyRelu") == 0) a->kind = KL_ACT_LEAKY_RELU, a->alpha = p[0];
  else if (strcmp(name, "HardSigmoid") == 0)
    a->kind = KL_ACT_HARD_SIGMOID, a->alpha = p[0], a->beta = p[1];
  else if (strcmp(name, "Clip") == 0) a->kind = KL_ACT_CLIP, a->alpha = p[0], a->beta = p[1];
  else return false; /* Mish, Elu: no primitive */
  return true;
}

/* Clip's bound input k into *v, when given; false when its dtype is not x's. */
static bool clip_bound(const kl_kernel_ctx *c, int k, kl_dtype t, float *v) {
  const kl_tensor *b = k < c->n_in ? c->in[k] : NULL;
  if (!b) return true;
  if (b->dtype != t || kl_tensor_numel(b) != 1) return false;
  *v = t == KL_F32 ? *(const float *)b->data : kl_bf16_to_f32(*(const uint16_t *)b->data);
  return true;
}

typedef struct unary_job {
  const kl_isa_fns *f;
  kl_act act;
  const void *x;
  void *y;
  int64_t n, per;
  bool bf16;
} unary_job;

static void unary_task(void *arg, int64_t t) {
  const unary_job *j = arg;
  int64_t at = t * j->per, len = j->n - at < j->per ? j->n - at : j->per;
  if (j->bf16)
    j->f->elt_bf16->unary(&j->act, (const uint16_t *)j->x + at, (uint16_t *)j->y + at,
                          (size_t)len);
  else
    j->f->elt->unary(&j->act, (const float *)j->x + at, (float *)j->y + at, (size_t)len);
}

int kl_run_unary(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  unary_job j = {.f = f, .x = x->data, .y = y->data, .n = kl_tensor_numel(x),
                 .bf16 = x->dtype == KL_BF16};
  if (!takes(f, x->dtype) || y->dtype != x->dtype || !kl_isa_act(c->node, &j.act))
    return kl_isa_ref(c);
  if (j.act.kind == KL_ACT_CLIP &&
      !(clip_bound(c, 1, x->dtype, &j.act.alpha) && clip_bound(c, 2, x->dtype, &j.act.beta)))
    return kl_isa_ref(c);
  if (j.n == 0) return KILN_OK;
  int64_t tasks = kl_isa_split(j.n, CHUNK, &j.per);
  kl_isa_parallel(c, tasks, j.n, unary_task, &j);
  return KILN_OK;
}

void kl_run_act_inplace(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_act *a, float *y,
                        int64_t n) {
  unary_job j = {.f = f, .act = *a, .x = y, .y = y, .n = n};
  if (n <= 0) return;
  int64_t tasks = kl_isa_split(n, CHUNK, &j.per);
  kl_isa_parallel(c, tasks, n, unary_task, &j);
}

/* ---- binary ---- */

/* y = a op b as rows: the collapsed outer dims walked with each operand's strides, and
 * the innermost dim handed to the primitive with steps 0 (broadcast) or 1. */
typedef struct binary_job {
  const kl_isa_fns *f;
  kl_binop op;
  const char *a, *b;
  char *y;
  size_t es;
  kl_isa_walk walk;
  int64_t outer, inner, step[2];
  int64_t per, parts; /* rows per task, or parts per row when one row is long */
} binary_job;

void kl_isa_bcast_strides(const kl_tensor *t, const kl_tensor *y, int64_t *stride) {
  int64_t s = 1;
  for (int d = y->rank - 1; d >= 0; d--) {
    int td = d - (y->rank - t->rank);
    int64_t size = td >= 0 ? t->dims[td] : 1;
    stride[d] = size == 1 ? 0 : s;
    s *= size;
  }
}

/* Drops y's size-1 dims and merges neighbours that both operands walk as one. */
static void binary_plan(const kl_tensor *a, const kl_tensor *b, const kl_tensor *y,
                        binary_job *j) {
  int64_t sa[KL_MAX_RANK], sb[KL_MAX_RANK], dims[KL_MAX_RANK], st[2][KL_MAX_RANK];
  kl_isa_bcast_strides(a, y, sa);
  kl_isa_bcast_strides(b, y, sb);
  int m = 0;
  for (int d = 0; d < y->rank; d++) {
    if (y->dims[d] == 1) continue;
    if (m > 0 && st[0][m - 1] == sa[d] * y->dims[d] && st[1][m - 1] == sb[d] * y->dims[d]) {
      dims[m - 1] *= y->dims[d];
      st[0][m - 1] = sa[d];
      st[1][m - 1] = sb[d];
      continue;
    }
    dims[m] = y->dims[d];
    st[0][m] = sa[d];
    st[1][m] = sb[d];
    m++;
  }
  if (m == 0) { /* a single element */
    dims[0] = 1;
    st[0][0] = st[1][0] = 0;
    m = 1;
  }
  j->inner = dims[m - 1];
  j->step[0] = st[0][m - 1];
  j->step[1] = st[1][m - 1];
  j->walk.rank = m - 1;
  j->outer = 1;
  for (int d = 0; d < m - 1; d++) {
    j->walk.dims[d] = dims[d];
    j->walk.stride[0][d] = st[0][d];
    j->walk.stride[1][d] = st[1][d];
    j->outer *= dims[d];
  }
}

static void binary_row(const binary_job *j, const kl_isa_walk *w, int64_t row, int64_t from,
                       int64_t len) {
  const char *pa = j->a + (size_t)(w->off[0] + j->step[0] * from) * j->es;
  const char *pb = j->b + (size_t)(w->off[1] + j->step[1] * from) * j->es;
  char *py = j->y + (size_t)(row * j->inner + from) * j->es;
  if (j->es == 2)
    j->f->elt_bf16->binary(j->op, (const uint16_t *)pa, (size_t)j->step[0],
                           (const uint16_t *)pb, (size_t)j->step[1], (uint16_t *)py,
                           (size_t)len);
  else
    j->f->elt->binary(j->op, (const float *)pa, (size_t)j->step[0], (const float *)pb,
                      (size_t)j->step[1], (float *)py, (size_t)len);
}

static void binary_task(void *arg, int64_t t) {
  const binary_job *j = arg;
  kl_isa_walk w = j->walk;
  if (j->parts > 1) { /* one long row, in parts */
    int64_t row = t / j->parts, from = t % j->parts * j->per;
    kl_isa_walk_seek(&w, row);
    binary_row(j, &w, row, from, j->inner - from < j->per ? j->inner - from : j->per);
    return;
  }
  int64_t first = t * j->per, last = first + j->per < j->outer ? first + j->per : j->outer;
  kl_isa_walk_seek(&w, first);
  for (int64_t row = first; row < last; row++, kl_isa_walk_next(&w))
    binary_row(j, &w, row, 0, j->inner);
}

static kl_binop binop_of(kl_op op) {
  switch (op) {
  case KL_OP_Add: return KL_BIN_ADD;
  case KL_OP_Sub: return KL_BIN_SUB;
  case KL_OP_Mul: return KL_BIN_MUL;
  default: return KL_BIN_DIV;
  }
}

/* y = a op b, every operand of y's dtype, on c's threads. */
static void run_binary_op(const kl_kernel_ctx *c, const kl_isa_fns *f, kl_binop op,
                          const kl_tensor *a, const kl_tensor *b, kl_tensor *y) {
  int64_t n = kl_tensor_numel(y);
  if (n == 0) return;
  binary_job j = {.f = f, .op = op, .a = a->data, .b = b->data, .y = y->data,
                  .es = kl_dtype_size(y->dtype)};
  binary_plan(a, b, y, &j);
  int64_t tasks;
  if (j.inner >= 2 * CHUNK) {
    j.parts = kl_isa_split(j.inner, CHUNK, &j.per);
    tasks = j.outer * j.parts;
  } else {
    j.parts = 1;
    tasks = kl_isa_split(j.outer, CHUNK / j.inner + 1, &j.per);
  }
  kl_isa_parallel(c, tasks, n, binary_task, &j);
}

/* A float32 Add, Sub, Mul or Div of Y's shape [N, C, S...] held channels-last with an
 * operand of one value per image and channel ([N, C, 1...], the same bytes in either
 * layout): in memory the first is [N, S, C] and the second [N, 1, C], a broadcast the
 * plain kernel runs along C. (oneDNN 2.6's binary took 16 us for EfficientNet-B0's
 * 7x7x1152 scale, twice that on two threads.) */
int kl_run_binary_cl(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *y = c->out[0];
  int full = c->in[0]->rank == y->rank && kl_tensor_numel(c->in[0]) == kl_tensor_numel(y) ? 0 : 1;
  const kl_tensor *a = c->in[full], *b = c->in[1 - full];
  int64_t n = y->rank >= 3 ? y->dims[0] : 0, ch = y->rank >= 3 ? y->dims[1] : 0;
  if (y->dtype != KL_F32 || a->dtype != KL_F32 || b->dtype != KL_F32 || y->rank < 3 ||
      kl_tensor_numel(a) != kl_tensor_numel(y) || b->rank != y->rank || b->dims[0] != n ||
      b->dims[1] != ch || kl_tensor_numel(b) != n * ch)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "%s held channels-last without one operand of "
                   "one value per image and channel", kl_op_name(c->node->op));
  int64_t sp = n > 0 && ch > 0 ? kl_tensor_numel(y) / (n * ch) : 0;
  kl_tensor va = {.dtype = KL_F32, .rank = 3, .dims = {n, sp, ch}, .data = a->data};
  kl_tensor vb = {.dtype = KL_F32, .rank = 3, .dims = {n, 1, ch}, .data = b->data};
  kl_tensor vy = {.dtype = KL_F32, .rank = 3, .dims = {n, sp, ch}, .data = y->data};
  if (full == 0) run_binary_op(c, f, binop_of(c->node->op), &va, &vb, &vy);
  else run_binary_op(c, f, binop_of(c->node->op), &vb, &va, &vy);
  return KILN_OK;
}

int kl_run_binary(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  kl_tensor *y = c->out[0];
  if (!takes(f, y->dtype) || a->dtype != y->dtype || b->dtype != y->dtype)
    return kl_isa_ref(c);
  run_binary_op(c, f, binop_of(c->node->op), a, b, y);
  return KILN_OK;
}

void kl_run_add_inplace(const kl_kernel_ctx *c, const kl_isa_fns *f, kl_tensor *y,
                        const kl_tensor *b) {
  run_binary_op(c, f, KL_BIN_ADD, y, b, y);
}

void kl_run_add(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_tensor *a,
                const kl_tensor *b, kl_tensor *y) {
  run_binary_op(c, f, KL_BIN_ADD, a, b, y);
}
