/* The one-row matrix product driver (run.h, kl_run_gemv): Gemm / MatMul nodes whose
 * weights are a constant float32 matrix and whose run has one row of input, which
 * dnnl.c hands here instead of to a oneDNN primitive.
 *
 * At one row a fully connected layer is a matrix-vector product: every weight is read
 * once and used for one multiply-add, so its speed is the speed at which the weights
 * stream from memory. The weights are read as the model holds them, never packed
 * (there is no second copy of them, and nothing to reorder at session creation):
 *   nk (W [N, K]: Gemm transB=1, torch's Linear): output i is the dot product of x and
 *      row i; the primitive takes four rows at a time, each vector of x loaded once
 *      for the four (x stays in L1), so four streams of weights run front to back.
 *   kn (W [K, N]: Gemm transB=0, MatMul): y += x[j] * row j, four rows per pass over
 *      y, each row's piece read front to back. The longer the pieces the better the
 *      weights stream (on a Zen 4 core, 9216 x 4096: 12 GB/s with pieces of 256
 *      columns, 16 with 1024, 20 with whole rows of 4096), so each thread takes one
 *      block of columns, y's partial sums staying in L1 or L2.
 * The outputs are split into tasks of at least GEMV_TASK_BYTES of weights each (kn:
 * one block per thread), run on the node's threads (kl_isa_parallel): one thread for
 * a small layer. The products go into y, then the epilogue makes
 * y = act(alpha * xW + add_scale * add + sum) in place, the activation through the
 * level's unary primitive. When y shares its buffer with sum (a fused node whose Sum
 * dies there), the products are made GEMV_CHUNK at a time into a buffer on the stack.
 */
#include "backends/cpu/isa/run.h"
#include "ir/fused.h"
#include "kl_config.h"

#include <string.h>
#if KL_HAVE_OPENMP
#include <omp.h>
#endif

/* Outputs per chunk when y shares its buffer with Sum, made in a buffer on the stack
 * (16 KiB; the partial sums of kn stay in L1); else they are made in y, a task at once. */
#define GEMV_CHUNK 4096
/* Weights per task, at least: enough to pay for a task, and for kn rows long enough to
 * stream (GEMV_KN_MIN columns). */
#define GEMV_TASK_BYTES (256 * 1024)
#define GEMV_KN_MIN 256

bool kl_gemv_fused_act(const kl_node *n, bool *has, kl_act *a) {
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

static void gemv_task(void *arg, int64_t t) {
  const gemv_job *j = arg;
  const kl_gemv_args *a = j->a;
  float part[GEMV_CHUNK];
  int64_t from = t * j->per, to = from + j->per < a->n ? from + j->per : a->n;
  int64_t chunk = j->direct ? to - from : GEMV_CHUNK;
  for (int64_t at = from; at < to; at += chunk) {
    int64_t len = to - at < chunk ? to - at : chunk;
    float *p = j->direct ? a->y + at : part;
    if (a->nk)
      j->f->gemv->nk(a->x, a->w + at * a->k, (size_t)a->k, (size_t)a->k, p, (size_t)len);
    else
      j->f->gemv->kn(a->x, a->w + at, (size_t)a->n, (size_t)a->k, p, (size_t)len);
    epilogue(j->f, a, at, p, len);
  }
}

/* The node's thread count, as kl_isa_parallel will use it. */
static int64_t thread_count(const kl_kernel_ctx *c) {
#if KL_HAVE_OPENMP
  return c->threads > 0 ? c->threads : omp_get_max_threads();
#else
  (void)c;
  return 1;
#endif
}

void kl_run_gemv(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_gemv_args *a) {
  if (a->n <= 0) return;
  int64_t row_bytes = (a->k > 0 ? a->k : 1) * (int64_t)sizeof(float);
  int64_t min = GEMV_TASK_BYTES / row_bytes + 1;
  const float *sum_end = a->sum ? a->sum + (a->n - 1) * a->sum_step + 1 : NULL;
  gemv_job j = {f, a, 0, !a->sum || sum_end <= a->y || a->sum >= a->y + a->n};
  if (!a->nk) {
    /* y += x[j] * row j reads each row's piece front to back: the longer the piece the
     * better the weights stream, so one block of whole vectors per thread */
    if (min < GEMV_KN_MIN) min = GEMV_KN_MIN;
    int64_t threads = thread_count(c), even = (a->n + threads - 1) / threads;
    if (min < even) min = even;
    min = (min + 15) / 16 * 16;
  }
  int64_t tasks = kl_isa_split(a->n, min, &j.per);
  kl_isa_parallel(c, tasks, a->k * a->n, gemv_task, &j);
}
