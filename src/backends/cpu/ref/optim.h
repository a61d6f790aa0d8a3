/* What the reference optimizer kernels (ref/optim.c) share with the ISA driver
 * (isa/run_optim.c): reading a node's run-time inputs into the float scalars of the
 * update, the fixed blocks of the deterministic norms, and the trust ratios. */
#ifndef KL_REF_OPTIM_H
#define KL_REF_OPTIM_H

#include "backends/cpu/isa/isa_fns.h"
#include "ir/ir.h"
#include "ir/optim.h"

/* One optimizer node's run: its tensors and scalars. */
typedef struct kl_optim_plan {
  kl_op op;
  int64_t n;                     /* Param's elements */
  bool split;                    /* Param is the bf16 top half, trail the low half */
  float *p;                      /* Param, when !split */
  uint16_t *top, *trail;         /* when split */
  const float *g;                /* Grad as float32, or */
  const uint16_t *g_bf16;        /* as bfloat16 (only with split) */
  float *state[KL_OPTIM_MAX_STATE]; /* in slot order; NULL when absent */
  double h[6];                   /* Hyper's values, in the op's order */
  bool apex;                     /* Lamb: apex's trust rule */
  double max_trust;              /* Lamb: clamp of the trust ratio, 0 for none */
  kl_optim_k k;                  /* the float scalars (lr_trust set by kl_optim_trust) */
} kl_optim_plan;

/* Checks c's tensors and Hyper's values (step an integer >= 1, Momentum given when an
 * SGD momentum is not 0) and fills pl; an error names the input. */
kiln_status kl_optim_plan_make(const kl_kernel_ctx *c, kl_optim_plan *pl);

/* The elements of each block whose sum of squares is formed apart (then the block sums
 * are added in block order): fixed by n alone, a multiple of KL_OPTIM_LANES, at most
 * KL_OPTIM_MAX_BLOCKS blocks. So a norm does not depend on the thread count. */
#define KL_OPTIM_MAX_BLOCKS 512
int64_t kl_optim_block(int64_t n);
/* A GradScale that is NaN or infinite (the trainer's guard of a non-finite loss, or a
 * non-finite gradient norm under clipping) skips the update: the weight and its state
 * are left as they were and the output is NaN. */
bool kl_optim_skips(const kl_optim_plan *pl);
/* The sum of the 16 lane accumulators of a block, in a fixed tree order. */
double kl_optim_lanes_sum(double *acc);
/* Lamb, Lars: the trust ratio from the sums of squares of Param and of the update
 * (Lamb) or the scaled gradient (Lars); sets pl->k.lr_trust = (float)(lr * ratio). */
double kl_optim_trust(kl_optim_plan *pl, double ss_p, double ss_b);

#endif
