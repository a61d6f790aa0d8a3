/* What the reduce family's shape inference (infer_reduce.c, infer_einsum.c) and its
 * reference kernels (ref/reduce.c, ref/einsum.c) both need to agree on: which axes a
 * Reduce* node reduces, and how an Einsum equation labels each input dimension. */
#ifndef KL_REDUCE_H
#define KL_REDUCE_H

#include "ir/ir.h"

/* mask[d] (d < rank) is set for every axis that a Reduce* node reduces, given the
 * contents of its axes input (n_axes values; 0 when the input is absent or empty).
 * Empty axes reduce every axis, or none when the node has noop_with_empty_axes=1.
 * An axis out of [-rank, rank) or given twice is KILN_ERR_SHAPE. */
kiln_status kl_reduce_mask(const kl_node *node, int rank, const int64_t *axes, int n_axes,
                           bool *mask, kl_err *e);

/* The same for MeanVarianceNormalization's axes attribute (default [0, 2, 3]). */
kiln_status kl_mvn_mask(const kl_node *node, int rank, bool *mask, kl_err *e);

/* ---- Einsum ----
 * Labels: the letters 'A'..'Z' are 0..25 and 'a'..'z' 26..51 (so that sorting labels
 * sorts the letters as NumPy does for the implicit output), and the dims an ellipsis
 * stands for are KL_EINSUM_ELL + j, right-aligned across the operands as in NumPy
 * broadcasting (j = 0 is the outermost of the widest ellipsis). */
#define KL_EINSUM_LETTERS 52
#define KL_EINSUM_ELL KL_EINSUM_LETTERS
#define KL_EINSUM_LABELS (KL_EINSUM_LETTERS + KL_MAX_RANK)
#define KL_EINSUM_MAX_INPUTS 16

typedef struct kl_einsum {
  int n_in;
  int rank[KL_EINSUM_MAX_INPUTS];                /* -1: not known (load time) */
  int8_t label[KL_EINSUM_MAX_INPUTS][KL_MAX_RANK]; /* per input dim; when rank known */
  int out_rank;                                  /* -1: not known */
  int8_t out_label[KL_MAX_RANK];
  int n_ell; /* dims of the widest ellipsis (when every rank it needs is known) */
} kl_einsum;

/* Parses `equation` for n_in operands of the given ranks (-1 where not known) and
 * labels every dim. A malformed equation, or one that does not fit the ranks, is
 * KILN_ERR_INVALID_MODEL; ranks needing more than KL_MAX_RANK dims are
 * KILN_ERR_UNSUPPORTED. */
kiln_status kl_einsum_parse(const char *equation, int n_in, const int *ranks, kl_einsum *out,
                            kl_err *e);

#endif
