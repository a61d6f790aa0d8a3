/* Reference Softmax and LogSoftmax along one axis (opset 13 semantics).
 *
 * Shapes: X of any rank r >= 1, axis in [-r, r) (default -1), Y like X. Viewing X as
 * [outer, len, inner] around the axis:
 *   Softmax:    Y = exp(X - max) / sum(exp(X - max))
 *   LogSoftmax: Y = X - max - log(sum(exp(X - max)))
 * Subtracting the row maximum keeps exp from overflowing. Computed in double.
 */
#include "backends/cpu/ref/ref.h"

#include <math.h>

/* One row along the axis: elements base + j * step for j < len. */
static void softmax_row(const kl_tensor *x, kl_tensor *y, int64_t base, int64_t len,
                        int64_t step, bool log_form) {
  double max = -INFINITY, sum = 0;
  for (int64_t j = 0; j < len; j++) {
    double v = kl_ref_load(x->data, x->dtype, base + j * step);
    if (v > max || isnan(v)) max = v;
  }
  for (int64_t j = 0; j < len; j++)
    sum += exp(kl_ref_load(x->data, x->dtype, base + j * step) - max);
  for (int64_t j = 0; j < len; j++) {
    double d = kl_ref_load(x->data, x->dtype, base + j * step) - max;
    kl_ref_store(y->data, y->dtype, base + j * step, log_form ? d - log(sum) : exp(d) / sum);
  }
}

int kl_ref_softmax(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  int64_t a = kl_attr_int(c->node, "axis", -1);
  int axis = (int)(a < 0 ? a + x->rank : a);
  int64_t outer = kl_ref_span(x->dims, 0, axis), len = x->dims[axis];
  int64_t inner = kl_ref_span(x->dims, axis + 1, x->rank);
  bool log_form = c->node->op == KL_OP_LogSoftmax;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++)
      softmax_row(x, c->out[0], o * len * inner + i, len, inner, log_form);
  return KILN_OK;
}
