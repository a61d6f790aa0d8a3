/* The optimizer primitives written once for the vector levels (optim_avx2.c,
 * optim_avx512.c), which define before including this:
 *   VN        float lanes of a vector (8 or 16); vf and vd the float and double vectors
 *   v_ld(p, cnt), v_st(p, x, cnt)  the first cnt lanes (the rest of a load 0, of a
 *             store untouched); cnt == VN a plain load or store
 *   v_set(s), v_add, v_sub, v_mul, v_div, v_sqrt, v_neg (sign flip), v_zero_past(x, cnt)
 *   v_max_nan(a, v)  a > v or a NaN ? a : v (torch.maximum, first operand a)
 *   vd_zero(), vd_add, vd_mul, vd_lo(x), vd_hi(x) (x's low and high halves as doubles),
 *   vd_load(p), vd_store(p, x)
 * Each element gets the float operations of the scalar reference (ref/optim.c) in its
 * order: a separate multiply and add everywhere, never an FMA (-ffp-contract=off). The
 * elements go in groups of KL_OPTIM_LANES (16), so that the sums of squares sit in the
 * lanes that the reference uses (element j of a call in accumulator j % 16); the tail
 * of a call runs on masked vectors. A static-only header: include it once per level. */
#ifndef KL_OPTIM_SIMD_H
#define KL_OPTIM_SIMD_H

#include "backends/cpu/isa/optim_split.h"

#define AI static inline __attribute__((always_inline))
#define GROUP KL_OPTIM_LANES
#define PER (GROUP / VN)     /* vectors per group */
#define VD_PER 2             /* double vectors per float vector */

/* Runs BODY(off, cnt) over the n elements: whole groups, then the masked tail; h is
 * the vector's place in its group (its lanes start at h * VN). */
#define FOR_GROUPS(n, BODY)                                                         \
  do {                                                                              \
    size_t i_ = 0;                                                                  \
    for (; i_ + GROUP <= (n); i_ += GROUP)                                          \
      for (int h = 0; h < PER; h++) BODY(i_ + (size_t)h * VN, VN);                  \
    for (int h = 0; h < PER; h++) {                                                 \
      size_t at_ = i_ + (size_t)h * VN;                                             \
      if (at_ < (n)) BODY(at_, (int)((n) - at_ < VN ? (n) - at_ : VN));             \
    }                                                                               \
  } while (0)

AI vf grad_in(const kl_optim_k *k, vf g) {
  if (k->has_scale) g = v_mul(g, v_set(k->scale));
  return k->maximize ? v_neg(g) : g;
}

/* acc[2h], acc[2h + 1] += x's lanes squared, in double (lanes past cnt add 0) */
AI void sq_acc(vd *acc, int h, vf x, int cnt) {
  if (cnt < VN) x = v_zero_past(x, cnt);
  vd lo = vd_lo(x), hi = vd_hi(x);
  acc[VD_PER * h] = vd_add(acc[VD_PER * h], vd_mul(lo, lo));
  acc[VD_PER * h + 1] = vd_add(acc[VD_PER * h + 1], vd_mul(hi, hi));
}

#define ACC_N (PER * VD_PER)
AI void acc_load(vd *acc, const double *a) {
  for (int j = 0; j < ACC_N; j++) acc[j] = vd_load(a + j * (GROUP / ACC_N));
}
AI void acc_store(const vd *acc, double *a) {
  for (int j = 0; j < ACC_N; j++) vd_store(a + j * (GROUP / ACC_N), acc[j]);
}

static void sgd(const kl_optim_k *k, float *p, const float *g, float *buf, size_t n) {
  const vf wd = v_set(k->wd), mom = v_set(k->momentum), damp = v_set(k->damp),
           neg_lr = v_set(k->neg_lr);
#define SGD_BODY(o, cnt)                                                            \
  {                                                                                 \
    vf x = v_ld(p + (o), cnt), d = grad_in(k, v_ld(g + (o), cnt));                  \
    if (k->has_wd) d = v_add(d, v_mul(wd, x));                                      \
    if (k->has_momentum) {                                                          \
      vf b = k->first ? d : v_add(v_mul(v_ld(buf + (o), cnt), mom), v_mul(damp, d)); \
      v_st(buf + (o), b, cnt);                                                      \
      d = k->nesterov ? v_add(d, v_mul(mom, b)) : b;                                \
    }                                                                               \
    v_st(p + (o), v_add(x, v_mul(neg_lr, d)), cnt);                                 \
  }
  FOR_GROUPS(n, SGD_BODY);
#undef SGD_BODY
}

static void adagrad(const kl_optim_k *k, float *p, const float *g, float *sum, size_t n) {
  const vf wd = v_set(k->wd), neg_clr = v_set(k->neg_clr), eps = v_set(k->eps);
#define ADAGRAD_BODY(o, cnt)                                                        \
  {                                                                                 \
    vf x = v_ld(p + (o), cnt), d = grad_in(k, v_ld(g + (o), cnt));                  \
    if (k->has_wd) d = v_add(d, v_mul(wd, x));                                      \
    vf s = v_add(v_ld(sum + (o), cnt), v_mul(d, d));                                \
    v_st(sum + (o), s, cnt);                                                        \
    v_st(p + (o), v_add(x, v_div(v_mul(neg_clr, d), v_add(v_sqrt(s), eps))), cnt);  \
  }
  FOR_GROUPS(n, ADAGRAD_BODY);
#undef ADAGRAD_BODY
}

static void adam(const kl_optim_k *k, float *p, const float *g, float *ma, float *va,
                 float *vmax, size_t n) {
  const vf wd = v_set(k->wd), decay = v_set(k->decay), w1 = v_set(k->w1),
           w1c = v_set(k->w1c), beta2 = v_set(k->beta2), c2 = v_set(k->c2),
           bc2s = v_set(k->bc2_sqrt), eps = v_set(k->eps), neg_step = v_set(k->neg_step);
#define ADAM_BODY(o, cnt)                                                           \
  {                                                                                 \
    vf x = v_ld(p + (o), cnt), d = grad_in(k, v_ld(g + (o), cnt));                  \
    if (k->has_wd) {                                                                \
      if (k->decoupled) x = v_mul(x, decay);                                        \
      else d = v_add(d, v_mul(wd, x));                                              \
    }                                                                               \
    vf m = v_ld(ma + (o), cnt);                                                     \
    m = k->lerp_small ? v_add(m, v_mul(w1, v_sub(d, m))) : v_sub(d, v_mul(v_sub(d, m), w1c)); \
    v_st(ma + (o), m, cnt);                                                         \
    vf v = v_add(v_mul(v_ld(va + (o), cnt), beta2), v_mul(v_mul(c2, d), d));        \
    v_st(va + (o), v, cnt);                                                         \
    if (k->amsgrad) {                                                               \
      v = v_max_nan(v_ld(vmax + (o), cnt), v);                                      \
      v_st(vmax + (o), v, cnt);                                                     \
    }                                                                               \
    vf denom = v_add(v_div(v_sqrt(v), bc2s), eps);                                  \
    v_st(p + (o), v_add(x, v_div(v_mul(neg_step, m), denom)), cnt);                 \
  }
  FOR_GROUPS(n, ADAM_BODY);
#undef ADAM_BODY
}

AI vf lamb_update(const kl_optim_k *k, vf m, vf v, vf x) {
  vf u = v_div(v_div(m, v_set(k->bc1)), v_add(v_sqrt(v_div(v, v_set(k->bc2))), v_set(k->eps)));
  return k->has_wd ? v_add(u, v_mul(v_set(k->wd), x)) : u;
}

static void lamb_moments(const kl_optim_k *k, const float *p, const float *g, float *ma,
                         float *va, size_t n, double *acc_p, double *acc_u) {
  const vf beta1 = v_set(k->beta1), c1 = v_set(k->c1), beta2 = v_set(k->beta2),
           c2 = v_set(k->c2);
  vd ap[ACC_N], au[ACC_N];
  acc_load(ap, acc_p);
  acc_load(au, acc_u);
#define LAMB_BODY(o, cnt)                                                           \
  {                                                                                 \
    vf x = v_ld(p + (o), cnt), d = grad_in(k, v_ld(g + (o), cnt));                  \
    vf m = v_add(v_mul(v_ld(ma + (o), cnt), beta1), v_mul(c1, d));                  \
    vf v = v_add(v_mul(v_ld(va + (o), cnt), beta2), v_mul(c2, v_mul(d, d)));        \
    v_st(ma + (o), m, cnt);                                                         \
    v_st(va + (o), v, cnt);                                                         \
    sq_acc(ap, h, x, cnt);                                                          \
    sq_acc(au, h, lamb_update(k, m, v, x), cnt);                                    \
  }
  FOR_GROUPS(n, LAMB_BODY);
#undef LAMB_BODY
  acc_store(ap, acc_p);
  acc_store(au, acc_u);
}

static void lamb_apply(const kl_optim_k *k, float *p, const float *ma, const float *va,
                       size_t n) {
  const vf lt = v_set(k->lr_trust);
#define APPLY_BODY(o, cnt)                                                          \
  {                                                                                 \
    vf x = v_ld(p + (o), cnt);                                                      \
    vf u = lamb_update(k, v_ld(ma + (o), cnt), v_ld(va + (o), cnt), x);             \
    v_st(p + (o), v_sub(x, v_mul(lt, u)), cnt);                                     \
  }
  FOR_GROUPS(n, APPLY_BODY);
#undef APPLY_BODY
}

static void lars_norms(const kl_optim_k *k, const float *p, const float *g, size_t n,
                       double *acc_p, double *acc_g) {
  vd ap[ACC_N], ag[ACC_N];
  acc_load(ap, acc_p);
  acc_load(ag, acc_g);
#define NORMS_BODY(o, cnt)                                                          \
  {                                                                                 \
    sq_acc(ap, h, v_ld(p + (o), cnt), cnt);                                         \
    sq_acc(ag, h, grad_in(k, v_ld(g + (o), cnt)), cnt);                             \
  }
  FOR_GROUPS(n, NORMS_BODY);
#undef NORMS_BODY
  acc_store(ap, acc_p);
  acc_store(ag, acc_g);
}

static void lars(const kl_optim_k *k, float *p, const float *g, float *buf, size_t n) {
  const vf lt = v_set(k->lr_trust), wd = v_set(k->wd), mom = v_set(k->momentum);
#define LARS_BODY(o, cnt)                                                           \
  {                                                                                 \
    vf x = v_ld(p + (o), cnt), d = grad_in(k, v_ld(g + (o), cnt));                  \
    vf u = k->has_wd ? v_mul(lt, v_add(d, v_mul(wd, x))) : v_mul(lt, d);            \
    vf b = v_add(v_mul(v_ld(buf + (o), cnt), mom), u);                              \
    v_st(buf + (o), b, cnt);                                                        \
    v_st(p + (o), v_sub(x, b), cnt);                                                \
  }
  FOR_GROUPS(n, LARS_BODY);
#undef LARS_BODY
}

static void sumsq(const float *x, size_t n, double *acc) {
  vd a[ACC_N];
  acc_load(a, acc);
#define SUMSQ_BODY(o, cnt) sq_acc(a, h, v_ld(x + (o), cnt), cnt);
  FOR_GROUPS(n, SUMSQ_BODY);
#undef SUMSQ_BODY
  acc_store(a, acc);
}

#endif
