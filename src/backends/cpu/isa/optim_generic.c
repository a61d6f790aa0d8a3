/* Optimizer primitives, generic level: plain C for the auto-vectorizer, each element
 * computed with the float operations of the scalar reference (ref/optim.c) in its
 * order, no FMA (-ffp-contract=off), so every bit agrees with it. The updates are in
 * place: Param and the state arrays are written (isa_fns.h, kl_optim_fns). */
#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/optim_split.h"

/* sqrtf without errno (never read by kiln; the result is the same correctly rounded
 * root), so that gcc vectorizes the loops that take roots */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-math-errno")
#endif

#include <math.h>

static inline float grad_in(const kl_optim_k *k, float g) {
  if (k->has_scale) g = g * k->scale;
  return k->maximize ? -g : g;
}

static void sgd(const kl_optim_k *k, float *p, const float *g, float *buf, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = p[i], d = grad_in(k, g[i]);
    if (k->has_wd) d = d + k->wd * x;
    if (k->has_momentum) {
      float b = k->first ? d : buf[i] * k->momentum + k->damp * d;
      buf[i] = b;
      d = k->nesterov ? d + k->momentum * b : b;
    }
    p[i] = x + k->neg_lr * d;
  }
}

static void adagrad(const kl_optim_k *k, float *p, const float *g, float *sum, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = p[i], d = grad_in(k, g[i]);
    if (k->has_wd) d = d + k->wd * x;
    float s = sum[i] + d * d;
    sum[i] = s;
    p[i] = x + (k->neg_clr * d) / (sqrtf(s) + k->eps);
  }
}

static void adam(const kl_optim_k *k, float *p, const float *g, float *ma, float *va,
                 float *vmax, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = p[i], d = grad_in(k, g[i]);
    if (k->has_wd) {
      if (k->decoupled) x = x * k->decay;
      else d = d + k->wd * x;
    }
    float m = ma[i];
    m = k->lerp_small ? m + k->w1 * (d - m) : d - (d - m) * k->w1c;
    ma[i] = m;
    float v = va[i] * k->beta2 + (k->c2 * d) * d;
    va[i] = v;
    if (k->amsgrad) {
      float a = vmax[i];
      v = (a > v || a != a) ? a : v;
      vmax[i] = v;
    }
    p[i] = x + (k->neg_step * m) / (sqrtf(v) / k->bc2_sqrt + k->eps);
  }
}

static inline float lamb_update(const kl_optim_k *k, float m, float v, float x) {
  float u = (m / k->bc1) / (sqrtf(v / k->bc2) + k->eps);
  return k->has_wd ? u + k->wd * x : u;
}

static void lamb_moments(const kl_optim_k *k, const float *p, const float *g, float *ma,
                         float *va, size_t n, double *acc_p, double *acc_u) {
  for (size_t i = 0; i < n; i++) {
    float x = p[i], d = grad_in(k, g[i]);
    float m = ma[i] * k->beta1 + k->c1 * d;
    float v = va[i] * k->beta2 + k->c2 * (d * d);
    ma[i] = m;
    va[i] = v;
    float u = lamb_update(k, m, v, x);
    acc_p[i % KL_OPTIM_LANES] += (double)x * x;
    acc_u[i % KL_OPTIM_LANES] += (double)u * u;
  }
}

static void lamb_apply(const kl_optim_k *k, float *p, const float *ma, const float *va,
                       size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = p[i] - k->lr_trust * lamb_update(k, ma[i], va[i], p[i]);
}

static void lars_norms(const kl_optim_k *k, const float *p, const float *g, size_t n,
                       double *acc_p, double *acc_g) {
  for (size_t i = 0; i < n; i++) {
    float x = p[i], d = grad_in(k, g[i]);
    acc_p[i % KL_OPTIM_LANES] += (double)x * x;
    acc_g[i % KL_OPTIM_LANES] += (double)d * d;
  }
}

static void lars(const kl_optim_k *k, float *p, const float *g, float *buf, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = p[i], d = grad_in(k, g[i]);
    float u = k->has_wd ? k->lr_trust * (d + k->wd * x) : k->lr_trust * d;
    float b = buf[i] * k->momentum + u;
    buf[i] = b;
    p[i] = x - b;
  }
}

static void sumsq(const float *x, size_t n, double *acc) {
  for (size_t i = 0; i < n; i++) acc[i % KL_OPTIM_LANES] += (double)x[i] * x[i];
}

const kl_optim_fns kl_optim_generic = {sgd, adagrad, adam, lamb_moments, lamb_apply,
                                       lars_norms, lars, sumsq, join_halves, split_halves};
