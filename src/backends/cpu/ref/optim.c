/* Reference kernels of the optimizer ops (ops.def, "optimizers"): the oracle that fixes
 * every formula, its order of operations and its rounding; the ISA levels
 * (isa/optim_*.c) must give these bits exactly. docs/training.md states the formulas.
 *
 * IN PLACE: SGD, Adagrad, Adam, Lamb and Lars write Param (and Trail) and their state
 * inputs (Momentum, Sum, ExpAvg, ExpAvgSq, MaxExpAvgSq); those are graph inputs bound
 * to the trainer's buffers. Their output is the trust ratio, float32 0-D.
 *
 * Arithmetic: per element in float32, in the order PyTorch's single-tensor optimizers
 * (torch/optim/sgd.py, adagrad.py, adam.py) apply their tensor ops; the scalars those
 * compute as Python floats (bias corrections, step size, Adagrad's decayed lr, 1 - lr
 * wd, 1 - beta) are computed here in double and rounded to float once. FMA policy: none
 * anywhere; every product is rounded before it is added (the ISA files are compiled
 * with -ffp-contract=off and use separate multiply and add instructions; gcc's C11 mode
 * contracts nothing here, and clang is told so below). PyTorch's own vector bodies fuse
 * add(alpha), lerp and addcmul into FMAs, so a step can differ from PyTorch's in the
 * last bit of those terms (tests/unit/test_optim.c bounds it).
 * Norms (Lamb, Lars, GradNorm): sums of squares in double over fixed blocks
 * (kl_optim_block), each in 16 lanes summed in a fixed tree, blocks added in order. */
#include "backends/cpu/ref/optim.h"
#include "backends/cpu/ref/ref.h"

#include <math.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- plan: tensors, Hyper, scalars ---- */

static kiln_status check_tensor(const kl_kernel_ctx *c, const kl_optim_layout *l, int i,
                                kl_dtype want, int64_t n) {
  const kl_tensor *t = c->in[i];
  if (t->dtype != want)
    return kl_fail(c->e, KILN_ERR_DTYPE, "input %d (%s) is %s, expected %s", i, l->names[i],
                   kl_dtype_name(t->dtype), kl_dtype_name(want));
  if (kl_tensor_numel(t) != n)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %lld elements, expected %lld "
                   "like Param", i, l->names[i], (long long)kl_tensor_numel(t), (long long)n);
  return KILN_OK;
}

static const kl_tensor *in_at(const kl_kernel_ctx *c, int i) {
  return i >= 0 && i < c->n_in ? c->in[i] : NULL;
}

/* The SGD, Adagrad, Adam, Lamb, Lars scalars from Hyper (h) and the attributes. */
static void make_scalars(kl_optim_plan *pl, const kl_node *node) {
  kl_optim_k *k = &pl->k;
  const double *h = pl->h;
  k->maximize = kl_attr_int(node, "maximize", 0) != 0;
  switch (pl->op) {
  case KL_OP_KilnSGD: /* lr, momentum, dampening, weight_decay, step */
    k->neg_lr = (float)-h[0];
    k->has_momentum = h[1] != 0;
    k->momentum = (float)h[1];
    k->damp = (float)(1.0 - h[2]);
    k->has_wd = h[3] != 0;
    k->wd = (float)h[3];
    k->first = h[4] == 1;
    k->nesterov = kl_attr_int(node, "nesterov", 0) != 0;
    break;
  case KL_OP_KilnAdagrad: { /* lr, lr_decay, weight_decay, eps, step */
    double clr = h[0] / (1 + (h[4] - 1) * h[1]);
    k->neg_clr = (float)-clr;
    k->has_wd = h[2] != 0;
    k->wd = (float)h[2];
    k->eps = (float)h[3];
    break;
  }
  case KL_OP_KilnAdam: { /* lr, beta1, beta2, eps, weight_decay, step */
    double bc1 = 1 - pow(h[1], h[5]), bc2 = 1 - pow(h[2], h[5]);
    k->w1 = (float)(1 - h[1]);
    k->lerp_small = fabsf(k->w1) < 0.5f; /* ATen's lerp: two forms */
    k->w1c = 1.0f - k->w1;
    k->beta2 = (float)h[2];
    k->c2 = (float)(1 - h[2]);
    k->eps = (float)h[3];
    k->has_wd = h[4] != 0;
    k->wd = (float)h[4];
    k->decoupled = kl_attr_int(node, "decoupled", 0) != 0;
    k->decay = (float)(1 - h[0] * h[4]);
    k->amsgrad = kl_attr_int(node, "amsgrad", 0) != 0;
    k->neg_step = (float)-(h[0] / bc1);
    k->bc2_sqrt = (float)pow(bc2, 0.5); /* Python's bc2 ** 0.5 */
    break;
  }
  case KL_OP_KilnLamb:
    k->beta1 = (float)h[1];
    k->c1 = (float)(1 - h[1]);
    k->beta2 = (float)h[2];
    k->c2 = (float)(1 - h[2]);
    k->eps = (float)h[3];
    k->has_wd = h[4] != 0;
    k->wd = (float)h[4];
    k->bc1 = (float)(1 - pow(h[1], h[5]));
    k->bc2 = (float)(1 - pow(h[2], h[5]));
    pl->apex = kl_attr_int(node, "apex", 0) != 0;
    pl->max_trust = kl_attr_float(node, "max_trust", 0.0f);
    break;
  case KL_OP_KilnLars: /* lr, momentum, weight_decay, trust_coefficient, eps, step */
    k->momentum = (float)h[1];
    k->has_wd = h[2] != 0;
    k->wd = (float)h[2];
    k->maximize = false;
    break;
  default: break;
  }
}

kiln_status kl_optim_plan_make(const kl_kernel_ctx *c, kl_optim_plan *pl) {
  const kl_optim_layout *l = kl_optim_layout_of(c->node->op);
  *pl = (kl_optim_plan){.op = c->node->op};
  if (!l || c->n_in < l->n_required || c->n_out != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "not an optimizer node of %d inputs",
                   c->n_in);
  for (int i = 0; i < l->n_required; i++)
    if (!c->in[i])
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "input %d (%s) is required", i,
                     l->names[i]);
  const kl_tensor *hyper = c->in[0], *param = c->in[1], *grad = c->in[2];
  if (hyper->dtype != KL_F64 || hyper->rank != 1 || hyper->dims[0] < l->n_hyper)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 (Hyper) must be float64 [>= %d]",
                   l->n_hyper);
  for (int j = 0; j < l->n_hyper; j++) pl->h[j] = ((const double *)hyper->data)[j];
  double step = pl->h[l->n_hyper - 1];
  if (!(step >= 1 && step == floor(step) && step < 9007199254740992.0))
    return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input 0 (Hyper): step is %g, expected "
                   "an integer >= 1", step);
  const kl_tensor *trail = in_at(c, l->trail), *scale = in_at(c, l->scale);
  int64_t n = pl->n = kl_tensor_numel(param);
  kiln_status st;
  pl->split = trail != NULL;
  if (pl->split) {
    if ((st = check_tensor(c, l, 1, KL_BF16, n)) != KILN_OK ||
        (st = check_tensor(c, l, l->trail, KL_U16, n)) != KILN_OK ||
        (st = check_tensor(c, l, 2, grad->dtype == KL_BF16 ? KL_BF16 : KL_F32, n)) != KILN_OK)
      return st;
    pl->top = param->data;
    pl->trail = trail->data;
  } else {
    if ((st = check_tensor(c, l, 1, KL_F32, n)) != KILN_OK ||
        (st = check_tensor(c, l, 2, KL_F32, n)) != KILN_OK)
      return st;
    pl->p = param->data;
  }
  if (grad->dtype == KL_BF16) pl->g_bf16 = grad->data;
  else pl->g = grad->data;
  for (int s = 0; s < KL_OPTIM_MAX_STATE && l->state[s] >= 0; s++) {
    const kl_tensor *t = in_at(c, l->state[s]);
    if (!t) continue;
    if ((st = check_tensor(c, l, l->state[s], KL_F32, n)) != KILN_OK) return st;
    pl->state[s] = t->data;
  }
  if (scale) {
    if (scale->dtype != KL_F32 || kl_tensor_numel(scale) != 1)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (GradScale) must be one float32",
                     l->scale);
    pl->k.has_scale = true;
    pl->k.scale = *(const float *)scale->data;
  }
  make_scalars(pl, c->node);
  if (pl->op == KL_OP_KilnSGD && pl->k.has_momentum && !pl->state[0])
    return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "momentum is %g but input 3 (Momentum) "
                   "is absent", pl->h[1]);
  if (pl->op == KL_OP_KilnAdam && pl->k.amsgrad && !pl->state[2])
    return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "amsgrad is set but input 5 "
                   "(MaxExpAvgSq) is absent");
  return KILN_OK;
}

bool kl_optim_skips(const kl_optim_plan *pl) {
  return pl->k.has_scale && !isfinite(pl->k.scale);
}

int64_t kl_optim_block(int64_t n) {
  int64_t per = (n + KL_OPTIM_MAX_BLOCKS - 1) / KL_OPTIM_MAX_BLOCKS;
  per = (per + KL_OPTIM_LANES - 1) / KL_OPTIM_LANES * KL_OPTIM_LANES;
  return per < 16384 ? 16384 : per;
}

double kl_optim_lanes_sum(double *acc) {
  for (int w = KL_OPTIM_LANES / 2; w >= 1; w /= 2)
    for (int i = 0; i < w; i++) acc[i] += acc[i + w];
  return acc[0];
}

double kl_optim_trust(kl_optim_plan *pl, double ss_p, double ss_b) {
  double pn = sqrt(ss_p), bn = sqrt(ss_b), trust = 1;
  const double *h = pl->h;
  if (pl->op == KL_OP_KilnLamb) {
    if (!(pl->apex && h[4] == 0) && pn > 0 && bn > 0) trust = pn / bn;
    if (pl->max_trust > 0 && trust > pl->max_trust) trust = pl->max_trust;
  } else if (pn > 0 && bn > 0) { /* Lars: trust_coefficient ||p|| / (||g|| + wd ||p|| + eps) */
    trust = h[3] * pn / (bn + h[2] * pn + h[4]);
  }
  pl->k.lr_trust = (float)(h[0] * trust);
  return trust;
}

/* ---- the elements ---- */

static float load_p(const kl_optim_plan *pl, int64_t i) {
  return pl->split ? kl_join_bf16(pl->top[i], pl->trail[i]) : pl->p[i];
}

static void store_p(const kl_optim_plan *pl, int64_t i, float v) {
  if (pl->split) kl_split_bf16(v, &pl->top[i], &pl->trail[i]);
  else pl->p[i] = v;
}

/* The gradient as the update reads it: scaled (GradScale), negated (maximize). */
static float load_g(const kl_optim_plan *pl, int64_t i) {
  float g = pl->g_bf16 ? kl_join_bf16(pl->g_bf16[i], 0) : pl->g[i];
  if (pl->k.has_scale) g = g * pl->k.scale;
  if (pl->k.maximize) g = -g;
  return g;
}

static void sgd(const kl_optim_plan *pl) {
  const kl_optim_k *k = &pl->k;
  float *buf = pl->state[0];
  for (int64_t i = 0; i < pl->n; i++) {
    float p = load_p(pl, i), g = load_g(pl, i);
    if (k->has_wd) g = g + k->wd * p;
    if (k->has_momentum) {
      float b = k->first ? g : buf[i] * k->momentum + k->damp * g;
      buf[i] = b;
      g = k->nesterov ? g + k->momentum * b : b;
    }
    store_p(pl, i, p + k->neg_lr * g);
  }
}

static void adagrad(const kl_optim_plan *pl) {
  const kl_optim_k *k = &pl->k;
  float *sum = pl->state[0];
  for (int64_t i = 0; i < pl->n; i++) {
    float p = load_p(pl, i), g = load_g(pl, i);
    if (k->has_wd) g = g + k->wd * p;
    float s = sum[i] + g * g;
    sum[i] = s;
    float std = sqrtf(s) + k->eps;
    store_p(pl, i, p + (k->neg_clr * g) / std);
  }
}

static void adam(const kl_optim_plan *pl) {
  const kl_optim_k *k = &pl->k;
  float *ma = pl->state[0], *va = pl->state[1], *vmax = pl->state[2];
  for (int64_t i = 0; i < pl->n; i++) {
    float p = load_p(pl, i), g = load_g(pl, i);
    if (k->has_wd) {
      if (k->decoupled) p = p * k->decay;
      else g = g + k->wd * p;
    }
    float m = ma[i];
    m = k->lerp_small ? m + k->w1 * (g - m) : g - (g - m) * k->w1c;
    ma[i] = m;
    float v = va[i] * k->beta2 + (k->c2 * g) * g;
    va[i] = v;
    if (k->amsgrad) { /* torch.maximum: a NaN in either wins */
      float a = vmax[i];
      v = (a > v || a != a) ? a : v;
      vmax[i] = v;
    }
    float denom = sqrtf(v) / k->bc2_sqrt + k->eps;
    store_p(pl, i, p + (k->neg_step * m) / denom);
  }
}

static float lamb_update(const kl_optim_k *k, float m, float v, float p) {
  float u = (m / k->bc1) / (sqrtf(v / k->bc2) + k->eps);
  return k->has_wd ? u + k->wd * p : u;
}

/* Lamb pass one over [i0, i1): the moments, and the squares into acc. */
static void lamb_moments(const kl_optim_plan *pl, int64_t i0, int64_t i1, double *acc_p,
                         double *acc_u) {
  const kl_optim_k *k = &pl->k;
  float *ma = pl->state[0], *va = pl->state[1];
  for (int64_t i = i0; i < i1; i++) {
    float p = load_p(pl, i), g = load_g(pl, i);
    float m = ma[i] * k->beta1 + k->c1 * g;
    float v = va[i] * k->beta2 + k->c2 * (g * g);
    ma[i] = m;
    va[i] = v;
    float u = lamb_update(k, m, v, p);
    acc_p[(i - i0) % KL_OPTIM_LANES] += (double)p * p;
    acc_u[(i - i0) % KL_OPTIM_LANES] += (double)u * u;
  }
}

static void lars_norms(const kl_optim_plan *pl, int64_t i0, int64_t i1, double *acc_p,
                       double *acc_g) {
  for (int64_t i = i0; i < i1; i++) {
    float p = load_p(pl, i), g = load_g(pl, i);
    acc_p[(i - i0) % KL_OPTIM_LANES] += (double)p * p;
    acc_g[(i - i0) % KL_OPTIM_LANES] += (double)g * g;
  }
}

/* Pass one of Lamb or Lars over the fixed blocks: the two sums of squares. */
static void norm_pass(const kl_optim_plan *pl, double *ss_p, double *ss_b) {
  int64_t block = kl_optim_block(pl->n);
  *ss_p = *ss_b = 0;
  for (int64_t i0 = 0; i0 < pl->n; i0 += block) {
    int64_t i1 = i0 + block < pl->n ? i0 + block : pl->n;
    double acc_p[KL_OPTIM_LANES] = {0}, acc_b[KL_OPTIM_LANES] = {0};
    if (pl->op == KL_OP_KilnLamb) lamb_moments(pl, i0, i1, acc_p, acc_b);
    else lars_norms(pl, i0, i1, acc_p, acc_b);
    *ss_p += kl_optim_lanes_sum(acc_p);
    *ss_b += kl_optim_lanes_sum(acc_b);
  }
}

static void lamb_apply(const kl_optim_plan *pl) {
  const kl_optim_k *k = &pl->k;
  for (int64_t i = 0; i < pl->n; i++) {
    float p = load_p(pl, i);
    float u = lamb_update(k, pl->state[0][i], pl->state[1][i], p);
    store_p(pl, i, p - k->lr_trust * u);
  }
}

static void lars(const kl_optim_plan *pl) {
  const kl_optim_k *k = &pl->k;
  float *buf = pl->state[0];
  for (int64_t i = 0; i < pl->n; i++) {
    float p = load_p(pl, i), g = load_g(pl, i);
    float u = k->has_wd ? k->lr_trust * (g + k->wd * p) : k->lr_trust * g;
    float b = buf[i] * k->momentum + u;
    buf[i] = b;
    store_p(pl, i, p - b);
  }
}

int kl_ref_optim(kl_kernel_ctx *c) {
  kl_optim_plan pl;
  kiln_status st = kl_optim_plan_make(c, &pl);
  if (st != KILN_OK) return st;
  if (kl_optim_skips(&pl)) {
    *(float *)c->out[0]->data = NAN;
    return KILN_OK;
  }
  double trust = 1, ss_p, ss_b;
  switch (pl.op) {
  case KL_OP_KilnSGD: sgd(&pl); break;
  case KL_OP_KilnAdagrad: adagrad(&pl); break;
  case KL_OP_KilnAdam: adam(&pl); break;
  case KL_OP_KilnLamb:
    norm_pass(&pl, &ss_p, &ss_b);
    trust = kl_optim_trust(&pl, ss_p, ss_b);
    lamb_apply(&pl);
    break;
  case KL_OP_KilnLars:
    norm_pass(&pl, &ss_p, &ss_b);
    trust = kl_optim_trust(&pl, ss_p, ss_b);
    lars(&pl);
    break;
  default: return kl_fail(c->e, KILN_ERR_INTERNAL, "not an optimizer op");
  }
  *(float *)c->out[0]->data = (float)trust;
  return KILN_OK;
}

/* ---- GradNorm, ClipCoef ---- */

/* The sum of squares of t (float32 or bfloat16), by the fixed blocks. */
static double tensor_sumsq(const kl_tensor *t) {
  int64_t n = kl_tensor_numel(t), block = kl_optim_block(n);
  double ss = 0;
  for (int64_t i0 = 0; i0 < n; i0 += block) {
    int64_t i1 = i0 + block < n ? i0 + block : n;
    double acc[KL_OPTIM_LANES] = {0};
    for (int64_t i = i0; i < i1; i++) {
      float x = t->dtype == KL_BF16 ? kl_join_bf16(((const uint16_t *)t->data)[i], 0)
                                    : ((const float *)t->data)[i];
      acc[(i - i0) % KL_OPTIM_LANES] += (double)x * x;
    }
    ss += kl_optim_lanes_sum(acc);
  }
  return ss;
}

int kl_ref_grad_norm(kl_kernel_ctx *c) {
  double ss = 0;
  for (int i = 0; i < c->n_in; i++) {
    if (!c->in[i] || (c->in[i]->dtype != KL_F32 && c->in[i]->dtype != KL_BF16))
      return kl_fail(c->e, KILN_ERR_DTYPE, "input %d must be float32 or bfloat16", i);
    ss += tensor_sumsq(c->in[i]);
  }
  *(float *)c->out[0]->data = (float)sqrt(ss);
  return KILN_OK;
}

int kl_ref_clip_coef(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  if (x->dtype != KL_F32 || kl_tensor_numel(x) != 1)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 (Norm) must be one float32");
  float max_norm = kl_attr_float(c->node, "max_norm", 0.0f);
  float coef = max_norm / (*(const float *)x->data + 1e-6f);
  *(float *)c->out[0]->data = coef > 1.0f ? 1.0f : coef; /* NaN stays NaN, as clamp */
  return KILN_OK;
}
