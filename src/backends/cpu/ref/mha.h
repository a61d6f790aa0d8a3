/* kiln.MultiHeadAttention's operand geometry, shared by the reference kernel
 * (ref/fused.c) and the oneDNN one (dnnl_attention.c).
 *
 * Q, K, V are token-major: row (b, s) of an operand holds `row` values, and head h's
 * slice of it starts at off + h * size (size D for Q and K, Dv for V). Separate
 * projections: Q [B, S, H*D], K [B, T, H*D], V [B, T, H*Dv], offsets 0. Packed QKV
 * (K and V absent): Q [B, S, 3*H*D] with K at offset H*D and V at 2*H*D of each row.
 * Y is [B, S, H*Dv]; the Mask broadcasts to the scores [B, H, S, T]. */
#ifndef KL_REF_MHA_H
#define KL_REF_MHA_H

#include "ir/ir.h"
#include "ir/op.h"

typedef struct kl_mha_geom {
  int64_t batch, heads, seq, keys, d, dv;
  int64_t qrow, krow, vrow, koff, voff;
  const kl_tensor *q, *k, *v, *mask; /* k and v are q itself when packed */
  int64_t mstride[4]; /* the mask's strides over [B, H, S, T]; 0 where broadcast */
} kl_mha_geom;

/* Fills m from the kernel's inputs and its num_heads attribute; a shape error names
 * what disagrees. */
kiln_status kl_mha_geometry(const kl_kernel_ctx *c, kl_mha_geom *m);

#endif
