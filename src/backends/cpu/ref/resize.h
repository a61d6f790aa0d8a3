/* Resize's sampling tables (ref/resize.c), shared with kiln's fast Resize
 * (isa/run_resize.c) so that both sample at the same taps with the same weights. */
#ifndef KL_REF_RESIZE_H
#define KL_REF_RESIZE_H

#include "ir/data_plan.h"
#include "ir/ir.h"

/* The taps of one dim: for output index o, n input indexes (clamped into the input)
 * and their weights at [o * n, o * n + n). */
typedef struct kl_resize_taps {
  int n;           /* taps per output index */
  int64_t *idx;    /* [out * n], clamped into the input */
  double *w;       /* [out * n] */
  bool *outside;   /* [out]: tf_crop_and_resize samples outside the input */
} kl_resize_taps;

/* Resize's taps for X (dims of x), one table per dim, from the node's attributes (*a)
 * and the request in c's inputs first..first + 2 (roi, scales, sizes); *block holds
 * them (free it, also on failure). */
kiln_status kl_ref_resize_taps(kl_kernel_ctx *c, const kl_tensor *x, int first,
                               kl_resize_attrs *a, kl_resize_taps *t, void **block);

#endif
