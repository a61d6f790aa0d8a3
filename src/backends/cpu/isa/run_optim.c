/* Driver of the optimizer ISA kernels (ops.def "optimizers"; isa_fns.h kl_optim_fns):
 * SGD, Adagrad, Adam, Lamb, Lars and GradNorm.
 *
 * IN PLACE: the optimizer ops write Param (and Trail) and their state inputs; those
 * are graph inputs bound to the trainer's own buffers, the only inputs kiln's kernels
 * write. The output is the trust ratio, float32 0-D (1 for SGD, Adagrad, Adam).
 *
 * The plan (tensors, Hyper, the float scalars) is the reference's (ref/optim.h), so a
 * run takes and refuses exactly what the reference does. The elements go over threads
 * in fixed blocks (kl_optim_block: fixed by the element count alone); a norm is the sum
 * of its blocks' sums in block order, each block's sum of squares in the 16 lanes of
 * the reference, so the bits never depend on the thread count or the level. Split
 * weights (bfloat16 Param + uint16 Trail) and bfloat16 gradients are joined into
 * float32 runs of SUB elements on the stack, updated by the float32 primitive, and
 * split back (exactly: ir/optim.h). */
#include "backends/cpu/isa/run.h"
#include "backends/cpu/ref/optim.h"

#include <math.h>

#define SUB 512 /* a multiple of KL_OPTIM_LANES */

typedef struct optim_job {
  kl_optim_plan *pl;
  const kl_optim_fns *f;
  int64_t block;
  bool norms; /* pass one of Lamb or Lars: the sums of squares into ss */
  double ss[KL_OPTIM_MAX_BLOCKS][2];
} optim_job;

static float *at(float *p, int64_t i) { return p ? p + i : NULL; }

/* The primitives on elements [i, i + len) given as float32 arrays. */
static void run_range(optim_job *j, float *p, const float *g, int64_t i, size_t len,
                      double *acc_p, double *acc_b) {
  const kl_optim_plan *pl = j->pl;
  const kl_optim_k *k = &pl->k;
  float *const *s = pl->state;
  if (j->norms) {
    if (pl->op == KL_OP_KilnLamb)
      j->f->lamb_moments(k, p, g, s[0] + i, s[1] + i, len, acc_p, acc_b);
    else j->f->lars_norms(k, p, g, len, acc_p, acc_b);
    return;
  }
  switch (pl->op) {
  case KL_OP_KilnSGD: j->f->sgd(k, p, g, k->has_momentum ? s[0] + i : NULL, len); break;
  case KL_OP_KilnAdagrad: j->f->adagrad(k, p, g, s[0] + i, len); break;
  case KL_OP_KilnAdam: j->f->adam(k, p, g, s[0] + i, s[1] + i, k->amsgrad ? at(s[2], i) : NULL, len); break;
  case KL_OP_KilnLamb: j->f->lamb_apply(k, p, s[0] + i, s[1] + i, len); break;
  case KL_OP_KilnLars: j->f->lars(k, p, g, s[0] + i, len); break;
  default: break;
  }
}

static void optim_task(void *arg, int64_t t) {
  optim_job *j = arg;
  const kl_optim_plan *pl = j->pl;
  int64_t i0 = t * j->block, i1 = i0 + j->block < pl->n ? i0 + j->block : pl->n;
  double acc_p[KL_OPTIM_LANES] = {0}, acc_b[KL_OPTIM_LANES] = {0};
  if (!pl->split && !pl->g_bf16) {
    run_range(j, pl->p + i0, pl->g + i0, i0, (size_t)(i1 - i0), acc_p, acc_b);
  } else {
    float pf[SUB], gf[SUB];
    bool writes_p = !j->norms;
    for (int64_t i = i0; i < i1; i += SUB) {
      size_t len = (size_t)(i1 - i < SUB ? i1 - i : SUB);
      j->f->join(pl->top + i, pl->trail + i, pf, len);
      const float *g = pl->g ? pl->g + i : gf;
      if (!pl->g) j->f->join(pl->g_bf16 + i, NULL, gf, len);
      run_range(j, pf, g, i, len, acc_p, acc_b);
      if (writes_p) j->f->split(pf, pl->top + i, pl->trail + i, len);
    }
  }
  if (j->norms) {
    j->ss[t][0] = kl_optim_lanes_sum(acc_p);
    j->ss[t][1] = kl_optim_lanes_sum(acc_b);
  }
}

int kl_run_optim(kl_kernel_ctx *c, const kl_isa_fns *f) {
  optim_job j = {.f = f->optim};
  kl_optim_plan pl;
  kiln_status st = kl_optim_plan_make(c, &pl);
  if (st != KILN_OK) return st;
  if (kl_optim_skips(&pl)) {
    *(float *)c->out[0]->data = NAN;
    return KILN_OK;
  }
  j.pl = &pl;
  j.block = kl_optim_block(pl.n);
  int64_t tasks = (pl.n + j.block - 1) / j.block, work = pl.n * 4;
  double trust = 1;
  if (pl.op == KL_OP_KilnLamb || pl.op == KL_OP_KilnLars) {
    j.norms = true;
    kl_isa_parallel(c, tasks, work, optim_task, &j);
    double ss_p = 0, ss_b = 0;
    for (int64_t t = 0; t < tasks; t++) {
      ss_p += j.ss[t][0];
      ss_b += j.ss[t][1];
    }
    trust = kl_optim_trust(&pl, ss_p, ss_b);
    j.norms = false;
  }
  kl_isa_parallel(c, tasks, work, optim_task, &j);
  *(float *)c->out[0]->data = (float)trust;
  return KILN_OK;
}

typedef struct norm_job {
  const kl_optim_fns *f;
  const kl_tensor *x;
  int64_t n, block;
  double ss[KL_OPTIM_MAX_BLOCKS];
} norm_job;

static void norm_task(void *arg, int64_t t) {
  norm_job *j = arg;
  int64_t i0 = t * j->block, i1 = i0 + j->block < j->n ? i0 + j->block : j->n;
  double acc[KL_OPTIM_LANES] = {0};
  if (j->x->dtype == KL_F32) {
    j->f->sumsq((const float *)j->x->data + i0, (size_t)(i1 - i0), acc);
  } else {
    const uint16_t *h = j->x->data;
    float xf[SUB];
    for (int64_t i = i0; i < i1; i += SUB) {
      size_t len = (size_t)(i1 - i < SUB ? i1 - i : SUB);
      for (size_t e = 0; e < len; e++) xf[e] = kl_join_bf16(h[i + e], 0);
      j->f->sumsq(xf, len, acc);
    }
  }
  j->ss[t] = kl_optim_lanes_sum(acc);
}

int kl_run_grad_norm(kl_kernel_ctx *c, const kl_isa_fns *f) {
  norm_job j = {.f = f->optim};
  double total = 0;
  for (int i = 0; i < c->n_in; i++) {
    const kl_tensor *x = c->in[i];
    if (!x || (x->dtype != KL_F32 && x->dtype != KL_BF16)) return kl_isa_ref(c);
    j.x = x;
    j.n = kl_tensor_numel(x);
    j.block = kl_optim_block(j.n);
    int64_t tasks = (j.n + j.block - 1) / j.block;
    kl_isa_parallel(c, tasks, j.n, norm_task, &j);
    double ss = 0;
    for (int64_t t = 0; t < tasks; t++) ss += j.ss[t];
    total += ss;
  }
  *(float *)c->out[0]->data = (float)sqrt(total);
  return KILN_OK;
}
