/* A tensor's axes split into the ones an operation keeps and the ones it reduces, as
 * two strided walks (kl_ref_iter, operand 0) over the same data: for each position of
 * `kept` in row-major order, `set` visits the elements that reduce into it at
 * kept.off[0] + set.off[0]. Used by the Reduce* kernels and MeanVarianceNormalization. */
#ifndef KL_REF_REDUCE_VIEW_H
#define KL_REF_REDUCE_VIEW_H

#include "backends/cpu/ref/ref.h"

typedef struct kl_reduce_view {
  kl_ref_iter kept, set;
  int64_t n_kept, n_set; /* positions of each walk */
} kl_reduce_view;

/* One walk over the axes d of x with mask[d] == want. */
static inline int64_t kl_reduce_walk(const kl_tensor *x, const bool *mask, bool want,
                                     kl_ref_iter *it) {
  int64_t dims[KL_MAX_RANK], strides[KL_MAX_RANK], stride = 1, count = 1;
  int n = 0;
  for (int d = 0; d < x->rank; d++) n += mask[d] == want;
  for (int d = x->rank - 1, k = n - 1; d >= 0; d--) {
    if (mask[d] == want) {
      dims[k] = x->dims[d];
      strides[k--] = stride;
      count *= x->dims[d];
    }
    stride *= x->dims[d];
  }
  kl_ref_iter_init(it, n, dims);
  for (int k = 0; k < n; k++) it->stride[0][k] = strides[k];
  return count;
}

static inline void kl_reduce_view_init(const kl_tensor *x, const bool *mask,
                                       kl_reduce_view *v) {
  v->n_kept = kl_reduce_walk(x, mask, false, &v->kept);
  v->n_set = kl_reduce_walk(x, mask, true, &v->set);
}

#endif
