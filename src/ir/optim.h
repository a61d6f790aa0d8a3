/* The optimizer ops (ops.def, "optimizers"): their input slots, and the split of an
 * FP32 master weight into a bfloat16 top half and a uint16 trail (SplitSGD).
 *
 * These ops update Param and their state inputs in place (the only kernels in kiln that
 * write their inputs); passes must neither fold them nor merge two of them
 * (kl_op_writes_inputs). docs/training.md has every formula. */
#ifndef KL_IR_OPTIM_H
#define KL_IR_OPTIM_H

#include "ir/ir.h"

#include <string.h>

#define KL_OPTIM_MAX_IN 8
#define KL_OPTIM_MAX_STATE 3

/* Where an optimizer op's inputs sit. Slot 0 is Hyper, 1 Param, 2 Grad; then the state
 * inputs (Param's shape, float32, updated in place), GradScale, Trail. */
typedef struct kl_optim_layout {
  int n_hyper;                    /* the entries of Hyper the op reads */
  const char *hyper[6];           /* their names, for messages */
  int n_required;                 /* inputs that must be present */
  int state[KL_OPTIM_MAX_STATE];  /* state slots, -1 past the last */
  int scale, trail;               /* GradScale's and Trail's slots, -1 when none */
  const char *names[KL_OPTIM_MAX_IN];
} kl_optim_layout;

/* The layout of op, NULL when op is not one of SGD, Adagrad, Adam, Lamb, Lars. */
const kl_optim_layout *kl_optim_layout_of(kl_op op);

/* Whether op's kernel writes its inputs (the optimizer updates). */
static inline bool kl_op_writes_inputs(kl_op op) { return kl_optim_layout_of(op) != NULL; }

/* ---- split FP32 master weights ----
 * An FP32 weight w is kept as top = w's high 16 bits (exactly the bfloat16 that the
 * forward and backward passes read: truncation, not rounding) and trail = its low 16
 * bits; join(top, trail) gives w back bit for bit.
 * The hazard: a NaN whose payload lies only in the low 16 bits (a signaling NaN such as
 * 0x7f800001) would have a top half of 0x7f80, which reads as Inf. split sets the quiet
 * bit (0x0040) in the top half of such a NaN, so the bfloat16 weight stays a NaN; the
 * trail keeps the payload, and join then gives the same NaN quieted (what any FP32
 * arithmetic would make of it). Every other pattern, quiet NaNs included, round-trips
 * exactly. A NaN computed by the update is always quiet, so this never happens to a
 * weight the ops wrote. */
static inline float kl_join_bf16(uint16_t top, uint16_t trail) {
  uint32_t bits = (uint32_t)top << 16 | trail;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline void kl_split_bf16(float f, uint16_t *top, uint16_t *trail) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  uint16_t hi = (uint16_t)(bits >> 16);
  if ((hi & 0x7f80u) == 0x7f80u && (hi & 0x007fu) == 0 && (bits & 0xffffu) != 0)
    hi |= 0x0040u; /* a NaN with a low-only payload: keep the top half a NaN */
  *top = hi;
  *trail = (uint16_t)(bits & 0xffffu);
}

#endif
