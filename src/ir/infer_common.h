/* Helpers shared by the shape/dtype inference functions (infer_*.c) and, for the
 * convolution and pooling window geometry, by the reference kernels.
 *
 * Conventions: a helper that fails records a message with kl_fail and returns the
 * status; the caller (the graph-level driver) puts the node's name in front. Unknown
 * dtypes, ranks and dims are never errors: checks apply only to what is known.
 */
#ifndef KL_INFER_COMMON_H
#define KL_INFER_COMMON_H

#include "ir/ir.h"

/* Sets of dtypes as bit masks, for "which dtypes may this input have". */
#define KL_DT(t) (1u << (unsigned)(t))
#define KL_DTS_FLOAT (KL_DT(KL_F16) | KL_DT(KL_BF16) | KL_DT(KL_F32) | KL_DT(KL_F64))
#define KL_DTS_INDEX (KL_DT(KL_I32) | KL_DT(KL_I64))
#define KL_DTS_ARITH (KL_DTS_FLOAT | KL_DTS_INDEX) /* what the int/float kernels do */
#define KL_DTS_ANY 0xffffffffu                      /* any storable dtype */

static inline bool kl_dim_known(kl_dim d) { return d.size >= 0; }
static inline kl_dim kl_dim_of(int64_t size) { return (kl_dim){size, -1}; }
static inline kl_dim kl_dim_unknown(void) { return (kl_dim){-1, -1}; }

/* Input i's type, or NULL when the input is absent (or beyond the node's inputs). */
const kl_type *kl_infer_in(const kl_infer_ctx *c, int i);
/* Input i's contents when known, else NULL. */
const void *kl_infer_data(const kl_infer_ctx *c, int i);

/* Inputs 0..n-1 must be present (an absent required input is a malformed model). */
kiln_status kl_check_required(const kl_infer_ctx *c, int n);

/* A type of the given dtype whose rank is not known. */
void kl_type_unknown(kl_type *t, kl_dtype dtype);
/* A type of the given dtype and rank whose dims are all unknown. */
void kl_type_unknown_dims(kl_type *t, kl_dtype dtype, int rank);

/* Input i (named `name` in messages, "X") must have a dtype in `allowed` when its
 * dtype is known; anything not storable is refused whatever the mask. */
kiln_status kl_check_dtype(const kl_infer_ctx *c, int i, const char *name, uint32_t allowed);
/* Inputs i and j must have the same dtype when both are known. */
kiln_status kl_check_same_dtype(const kl_infer_ctx *c, int i, int j);
/* Input i's rank must lie in [lo, hi] when known. */
kiln_status kl_check_rank(const kl_infer_ctx *c, int i, const char *name, int lo, int hi);
/* The output rank `rank` must fit KL_MAX_RANK. */
kiln_status kl_check_out_rank(const kl_infer_ctx *c, int64_t rank);
/* An output whose dims are all known must have an element count that fits int64 (ops
 * whose shape comes from data: ConstantOfShape, Expand, Tile, Resize, ...). */
kiln_status kl_check_out_numel(const kl_infer_ctx *c, const kl_type *t);

/* Merge two dims that must be equal: a known size wins over a symbol. *ok is false when
 * both are known and differ. */
kl_dim kl_dim_merge(kl_dim a, kl_dim b, bool *ok);

/* One dim of NumPy broadcasting, by the rules of kl_broadcast below; *ok is false when
 * both sizes are known and clash. */
kl_dim kl_broadcast_dim(kl_dim a, kl_dim b, bool *ok);

/* NumPy (multidirectional) broadcasting of the shapes of inputs ia and ib into out
 * (rank and dims only). A dim of 1 yields to the other; a known size other than 1
 * wins over a symbol (the symbol must then be that size or 1); equal symbols stay;
 * anything else is unknown. Either rank unknown makes the result's rank unknown. */
kiln_status kl_broadcast(const kl_infer_ctx *c, int ia, int ib, kl_type *out);
/* The same over inputs first..first+count-1 (Where, Sum, Max, ...): every present input
 * takes part; an absent one is skipped. */
kiln_status kl_broadcast_inputs(const kl_infer_ctx *c, int first, int count, kl_type *out);
/* Unidirectional broadcasting: input i's shape must broadcast to `target`. */
kiln_status kl_check_unidirectional(const kl_infer_ctx *c, int i, const char *name,
                                    const kl_type *target);

/* Normalize an axis in [-rank, rank) to [0, rank); `what` names it in messages. */
kiln_status kl_norm_axis(const kl_infer_ctx *c, int64_t axis, int rank, const char *what,
                         int *out);

/* Reads input i, a 0-D or 1-D integer tensor, into v (at most max values) and sets *n.
 * When the contents are not known, *n is -1 and the status KILN_OK. */
kiln_status kl_read_ints(const kl_infer_ctx *c, int i, const char *name, int64_t *v,
                         int max, int *n);
/* Element 0 of input i as a double; false when absent or not known. */
bool kl_read_scalar(const kl_infer_ctx *c, int i, double *v);

/* ---- sliding windows (Conv, MaxPool, AveragePool) ---- */

typedef enum kl_auto_pad {
  KL_PAD_NOTSET, KL_PAD_SAME_UPPER, KL_PAD_SAME_LOWER, KL_PAD_VALID
} kl_auto_pad;

/* The geometry of a window sliding over n spatial dims. pad_begin/pad_end hold the
 * explicit pads; kl_window_out replaces them for SAME_* and VALID. */
typedef struct kl_window {
  int n;
  kl_auto_pad auto_pad;
  bool ceil_mode;
  int64_t kernel[KL_MAX_RANK], stride[KL_MAX_RANK], dilation[KL_MAX_RANK];
  int64_t pad_begin[KL_MAX_RANK], pad_end[KL_MAX_RANK];
} kl_window;

/* Reads auto_pad, strides, dilations, pads and ceil_mode from the node, and the kernel
 * shape from the "kernel_shape" attribute or, when that is absent, from `kernel` (Conv
 * passes its weight's spatial dims, -1 where unknown; NULL for none). Checks list
 * lengths, that every value is in range and that kernel_shape agrees with `kernel`. A
 * kernel dim left unknown (-1) makes kl_window_out report an unknown size. */
kiln_status kl_window_init(const kl_node *node, int n, const int64_t *kernel,
                           kl_window *w, kl_err *e);
/* Output size of spatial dim i for an input of size `in` (known); for auto_pad it also
 * sets the pads of dim i. Fails when the window does not fit the padded input. */
kiln_status kl_window_out(kl_window *w, int i, int64_t in, int64_t *out, kl_err *e);

#endif
