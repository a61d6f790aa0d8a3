/* Reference BatchNormalization, inference form.
 *
 * Shapes: X [N, C, D1, ...] (a 1-D X is [N] with C = 1), scale, B, mean, var [C];
 * Y like X.
 *   Y[n, c, ...] = (X[n, c, ...] - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + B[c]
 * Computed in double.
 */
#include "backends/cpu/ref/ref.h"

#include <math.h>

int kl_ref_batchnorm(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *scale = c->in[1], *bias = c->in[2];
  const kl_tensor *mean = c->in[3], *var = c->in[4];
  kl_tensor *y = c->out[0];
  double eps = kl_attr_float(c->node, "epsilon", 1e-5f);
  int64_t channels = x->rank >= 2 ? x->dims[1] : 1;
  int64_t inner = x->rank >= 2 ? kl_ref_span(x->dims, 2, x->rank) : 1;
  int64_t outer = x->dims[0], i = 0;
  for (int64_t n = 0; n < outer; n++)
    for (int64_t ch = 0; ch < channels; ch++) {
      double m = kl_ref_load(mean->data, mean->dtype, ch);
      double k = kl_ref_load(scale->data, scale->dtype, ch) /
                 sqrt(kl_ref_load(var->data, var->dtype, ch) + eps);
      double b = kl_ref_load(bias->data, bias->dtype, ch);
      for (int64_t j = 0; j < inner; j++, i++)
        kl_ref_store(y->data, y->dtype, i, (kl_ref_load(x->data, x->dtype, i) - m) * k + b);
    }
  return KILN_OK;
}
