/* Reference BatchNormalization.
 *
 * Shapes: X [N, C, D1, ...] (a 1-D X is [N] with C = 1), scale, B, mean, var [C];
 * Y like X.
 *   Y[n, c, ...] = (X[n, c, ...] - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + B[c]
 * With training_mode=1, mean and var are the batch's own, over every dim but C (the
 * variance the population one), and the optional outputs 1 and 2 are the running
 * statistics updated with them: input_mean * momentum + mean * (1 - momentum), the same
 * for the variance (as ONNX's reference does). Computed in double.
 */
#include "backends/cpu/ref/ref.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

int kl_ref_batchnorm(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *scale = c->in[1], *bias = c->in[2];
  const kl_tensor *mean = c->in[3], *var = c->in[4];
  kl_tensor *y = c->out[0];
  double eps = kl_attr_float(c->node, "epsilon", 1e-5f);
  int64_t channels = x->rank >= 2 ? x->dims[1] : 1;
  int64_t inner = x->rank >= 2 ? kl_ref_span(x->dims, 2, x->rank) : 1;
  /* an empty X (inner or C 0 under 2^40 rows, say) has no row to visit; training still
   * makes the running statistics, so the node runs although Y is empty */
  int64_t outer = inner && channels ? x->dims[0] : 0, i = 0;
  bool training = kl_attr_int(c->node, "training_mode", 0) == 1;
  double *stats = NULL; /* training: per channel, the batch's mean then its variance */
  if (training) {
    if (!(stats = calloc((size_t)(channels ? channels : 1) * 2, sizeof *stats)))
      return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for batch statistics");
    double count = (double)outer * (double)inner;
    for (int64_t n = 0; n < outer; n++)
      for (int64_t ch = 0; ch < channels; ch++)
        for (int64_t j = 0, at = (n * channels + ch) * inner; j < inner; j++)
          stats[ch] += kl_ref_load(x->data, x->dtype, at + j);
    /* a batch of no values has no mean: NaN, as the spec's function and onnxruntime */
    for (int64_t ch = 0; ch < channels; ch++) stats[ch] = count > 0 ? stats[ch] / count : NAN;
    for (int64_t n = 0; n < outer; n++)
      for (int64_t ch = 0; ch < channels; ch++)
        for (int64_t j = 0, at = (n * channels + ch) * inner; j < inner; j++) {
          double d = kl_ref_load(x->data, x->dtype, at + j) - stats[ch];
          stats[channels + ch] += d * d;
        }
    for (int64_t ch = 0; ch < channels; ch++)
      stats[channels + ch] = count > 0 ? stats[channels + ch] / count : NAN;
    double momentum = kl_attr_float(c->node, "momentum", 0.9f);
    for (int k = 1; k < c->n_out && k < 3; k++) {
      const kl_tensor *old = k == 1 ? mean : var;
      if (!c->out[k]) continue;
      for (int64_t ch = 0; ch < channels; ch++)
        kl_ref_store(c->out[k]->data, c->out[k]->dtype, ch,
                     kl_ref_load(old->data, old->dtype, ch) * momentum +
                         stats[(k - 1) * channels + ch] * (1 - momentum));
    }
  }
  for (int64_t n = 0; n < outer; n++)
    for (int64_t ch = 0; ch < channels; ch++) {
      double m = training ? stats[ch] : kl_ref_load(mean->data, mean->dtype, ch);
      double v = training ? stats[channels + ch] : kl_ref_load(var->data, var->dtype, ch);
      double k = kl_ref_load(scale->data, scale->dtype, ch) / sqrt(v + eps);
      double b = kl_ref_load(bias->data, bias->dtype, ch);
      for (int64_t j = 0; j < inner; j++, i++)
        kl_ref_store(y->data, y->dtype, i, (kl_ref_load(x->data, x->dtype, i) - m) * k + b);
    }
  free(stats);
  return KILN_OK;
}
