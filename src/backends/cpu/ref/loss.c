/* Reference losses, computed in double.
 *
 * NegativeLogLikelihoodLoss: input [N, C, D1, ...] (log-probabilities), target
 * [N, D1, ...] of class indexes, weight [C] (all 1 when absent):
 *   loss[n, d] = -input[n, target[n, d], d] * weight[target[n, d]]
 * and loss and weight 0 where target equals ignore_index (when the node has one).
 * reduction "none" gives loss ([N, D1, ...]); "sum" its sum; "mean" its sum divided
 * by the sum of the weights taken (0 / 0, NaN, when every target is ignored).
 * A target outside [0, C) that is not ignored is KILN_ERR_INVALID_ARGUMENT.
 *
 * SoftmaxCrossEntropyLoss: the same over log_prob = LogSoftmax(scores) along axis 1,
 * which is also output 1 (log_prob, shaped like scores) when the node asks for it.
 */
#include "backends/cpu/ref/ref.h"

#include <math.h>
#include <string.h>

typedef struct loss_args {
  const kl_tensor *x, *target, *weight;
  kl_tensor *log_prob; /* SoftmaxCrossEntropyLoss's output 1, or NULL */
  bool softmax, has_ignore;
  int64_t ignore, classes, inner; /* inner: elements per class, prod(D1, ...) */
} loss_args;

/* log(sum(exp(x))) over the classes of position (n, d) at `base`, with x - lse
 * written to log_prob when asked for. */
static double log_sum_exp(const loss_args *a, int64_t base) {
  double max = -INFINITY, sum = 0;
  for (int64_t k = 0; k < a->classes; k++) {
    double v = kl_ref_load(a->x->data, a->x->dtype, base + k * a->inner);
    if (v > max || isnan(v)) max = v;
  }
  for (int64_t k = 0; k < a->classes; k++)
    sum += exp(kl_ref_load(a->x->data, a->x->dtype, base + k * a->inner) - max);
  double lse = max + log(sum);
  for (int64_t k = 0; a->log_prob && k < a->classes; k++) {
    int64_t at = base + k * a->inner;
    kl_ref_store(a->log_prob->data, a->log_prob->dtype, at,
                 kl_ref_load(a->x->data, a->x->dtype, at) - lse);
  }
  return lse;
}

/* The loss at position (n, d) (flat index i = n * inner + d) and the weight taken. */
static kiln_status loss_at(kl_kernel_ctx *c, const loss_args *a, int64_t i, double *loss,
                           double *weight) {
  int64_t n = i / a->inner, d = i % a->inner, base = n * a->classes * a->inner + d;
  double lse = a->softmax ? log_sum_exp(a, base) : 0;
  int64_t label = kl_ref_load_int(a->target->data, a->target->dtype, i);
  *loss = *weight = 0;
  if (a->has_ignore && label == a->ignore) return KILN_OK;
  if (label < 0 || label >= a->classes)
    return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input 1 (target) has %lld at flat "
                   "index %lld, expected a class in [0, %lld)", (long long)label,
                   (long long)i, (long long)a->classes);
  *weight = a->weight ? kl_ref_load(a->weight->data, a->weight->dtype, label) : 1;
  *loss = -(kl_ref_load(a->x->data, a->x->dtype, base + label * a->inner) - lse) * *weight;
  return KILN_OK;
}

static int loss_run(kl_kernel_ctx *c, bool softmax) {
  const kl_tensor *x = c->in[0];
  loss_args a = {x, c->in[1], c->n_in > 2 ? c->in[2] : NULL,
                 softmax && c->n_out > 1 ? c->out[1] : NULL, softmax,
                 kl_node_attr(c->node, "ignore_index") != NULL,
                 kl_attr_int(c->node, "ignore_index", 0), x->dims[1],
                 kl_ref_span(x->dims, 2, x->rank)};
  const char *reduction = kl_attr_string(c->node, "reduction", "mean");
  bool none = strcmp(reduction, "none") == 0, mean = strcmp(reduction, "mean") == 0;
  kl_tensor *y = c->out[0];
  int64_t count = x->dims[0] * a.inner;
  double total = 0, weights = 0;
  for (int64_t i = 0; i < count; i++) {
    double loss, weight;
    kiln_status st = loss_at(c, &a, i, &loss, &weight);
    if (st != KILN_OK) return st;
    if (none) kl_ref_store(y->data, y->dtype, i, loss);
    total += loss;
    weights += weight;
  }
  if (!none) kl_ref_store(y->data, y->dtype, 0, mean ? total / weights : total);
  return KILN_OK;
}

int kl_ref_nllloss(kl_kernel_ctx *c) { return loss_run(c, false); }

int kl_ref_sceloss(kl_kernel_ctx *c) { return loss_run(c, true); }
