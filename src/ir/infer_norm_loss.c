/* Shape/dtype inference for normalizations (LayerNormalization, RMSNormalization,
 * InstanceNormalization, GroupNormalization, LpNormalization,
 * MeanVarianceNormalization, LRN) and losses (NegativeLogLikelihoodLoss,
 * SoftmaxCrossEntropyLoss). */
#include "ir/infer_common.h"
#include "ir/reduce.h"

#include <string.h>

/* Inputs first..first+n-1 (names[k]) must be float and of input 0's dtype. */
static kiln_status check_float_inputs(const kl_infer_ctx *c, int n,
                                      const char *const *names) {
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < n; i++) {
    st = kl_check_dtype(c, i, names[i], KL_DTS_FLOAT);
    if (st == KILN_OK) st = kl_check_same_dtype(c, 0, i);
  }
  return st;
}

/* The dtype stash_type names (the precision of the statistics and of the Mean and
 * InvStdDev outputs). Kernels compute in double whatever it says. */
static kiln_status stash_dtype(const kl_infer_ctx *c, kl_dtype *t) {
  int64_t s = kl_attr_int(c->node, "stash_type", KL_F32);
  if (s == KL_F32 || s == KL_F64 || s == KL_F16 || s == KL_BF16) {
    *t = (kl_dtype)s;
    return KILN_OK;
  }
  return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "stash_type is %lld; kiln takes a float dtype "
                 "(1, 10, 11 or 16)", (long long)s);
}

/* LayerNormalization and RMSNormalization: statistics over the axes from `axis` on;
 * Scale and B broadcast to X. LayerNormalization's optional Mean and InvStdDev have
 * X's leading dims and 1 for each normalized one. */
static kiln_status axis_norm(kl_infer_ctx *c, int n_inputs) {
  static const char *const names[] = {"X", "Scale", "B"};
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = check_float_inputs(c, n_inputs, names);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 1, KL_MAX_RANK);
  kl_dtype stash = KL_F32;
  if (st == KILN_OK) st = stash_dtype(c, &stash);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  int axis = 0;
  if (x->rank >= 0) st = kl_norm_axis(c, kl_attr_int(c->node, "axis", -1), x->rank, "axis", &axis);
  for (int i = 1; st == KILN_OK && i < n_inputs; i++)
    st = kl_check_unidirectional(c, i, names[i], x);
  if (st != KILN_OK) return st;
  c->out[0] = *x;
  for (int k = 1; k < c->n_out; k++) {
    c->out[k] = *x;
    c->out[k].dtype = stash;
    for (int d = axis; d < x->rank; d++) c->out[k].dims[d] = kl_dim_of(1);
  }
  return KILN_OK;
}

int kl_infer_layernorm(kl_infer_ctx *c) { return axis_norm(c, 3); }

int kl_infer_rmsnorm(kl_infer_ctx *c) { return axis_norm(c, 2); }

/* Inputs from..2 (names) must be 1-D with `count` values (when known), what they are
 * one "per" of. */
static kiln_status check_vectors(const kl_infer_ctx *c, int from, const char *const *names,
                                 kl_dim count, const char *per) {
  for (int i = from; i < 3; i++) {
    kiln_status st = kl_check_rank(c, i, names[i], 1, 1);
    if (st != KILN_OK) return st;
    kl_dim d = c->in[i]->rank == 1 ? c->in[i]->dims[0] : kl_dim_unknown();
    if (kl_dim_known(d) && kl_dim_known(count) && d.size != count.size)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %lld values, expected %lld "
                     "(one per %s)", i, names[i], (long long)d.size, (long long)count.size,
                     per);
  }
  return KILN_OK;
}

/* InstanceNormalization and GroupNormalization: X [N, C, D1, ...], scale and bias [C]. */
static kiln_status channel_norm(kl_infer_ctx *c, const char *const *names) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = check_float_inputs(c, 3, names);
  if (st == KILN_OK) st = kl_check_rank(c, 0, names[0], 3, KL_MAX_RANK);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_dim ch = x->rank >= 2 ? x->dims[1] : kl_dim_unknown();
  st = check_vectors(c, 1, names, ch, "channel of input 0");
  if (st == KILN_OK) c->out[0] = *x;
  return st;
}

int kl_infer_instancenorm(kl_infer_ctx *c) {
  static const char *const names[] = {"input", "scale", "B"};
  return channel_norm(c, names);
}

int kl_infer_groupnorm(kl_infer_ctx *c) {
  static const char *const names[] = {"X", "scale", "bias"};
  kiln_status st = channel_norm(c, names);
  if (st != KILN_OK) return st;
  const kl_attr *a = kl_node_attr(c->node, "num_groups");
  if (!a || a->kind != KL_ATTR_INT || a->i < 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "num_groups must be an int of at least 1");
  kl_dim ch = c->in[0]->rank >= 2 ? c->in[0]->dims[1] : kl_dim_unknown();
  if (kl_dim_known(ch) && ch.size % a->i != 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 (X) has %lld channels, not a multiple of "
                   "num_groups %lld", (long long)ch.size, (long long)a->i);
  kl_dtype stash;
  return stash_dtype(c, &stash);
}

int kl_infer_lpnorm(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "input", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "input", 1, KL_MAX_RANK);
  if (st != KILN_OK) return st;
  int64_t p = kl_attr_int(c->node, "p", 2);
  if (p != 1 && p != 2)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "p is %lld, expected 1 or 2", (long long)p);
  const kl_type *x = c->in[0];
  int axis;
  if (x->rank >= 0) st = kl_norm_axis(c, kl_attr_int(c->node, "axis", -1), x->rank, "axis", &axis);
  if (st == KILN_OK) c->out[0] = *x;
  return st;
}

kiln_status kl_mvn_mask(const kl_node *node, int rank, bool *mask, kl_err *e) {
  static const int64_t dflt[] = {0, 2, 3};
  const int64_t *axes;
  int n = kl_attr_ints(node, "axes", &axes);
  if (n < 0) {
    axes = dflt;
    n = 3;
  }
  return kl_reduce_mask(node, rank, axes, n, mask, e);
}

int kl_infer_mvn(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  bool mask[KL_MAX_RANK];
  if (x->rank >= 0) st = kl_mvn_mask(c->node, x->rank, mask, c->e);
  if (st == KILN_OK) c->out[0] = *x;
  return st;
}

int kl_infer_lrn(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 3, KL_MAX_RANK);
  if (st != KILN_OK) return st;
  const kl_attr *size = kl_node_attr(c->node, "size");
  if (!size || size->kind != KL_ATTR_INT || size->i < 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "size must be an int of at least 1");
  c->out[0] = *c->in[0];
  return KILN_OK;
}

/* ---- losses ---- */

static kiln_status check_reduction(const kl_infer_ctx *c, bool *none) {
  const char *r = kl_attr_string(c->node, "reduction", "mean");
  *none = strcmp(r, "none") == 0;
  if (*none || strcmp(r, "sum") == 0 || strcmp(r, "mean") == 0) return KILN_OK;
  return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "reduction is \"%s\", expected \"none\", "
                 "\"sum\" or \"mean\"", r);
}

/* The target's shape, [N, D1, ...], must be the input's without its class axis;
 * into *out goes the merged shape. */
static kiln_status check_target(const kl_infer_ctx *c, const kl_type *x, const kl_type *t,
                                kl_type *out) {
  kl_type_unknown(out, x->dtype);
  if (x->rank < 0 && t->rank < 0) return KILN_OK;
  int rank = x->rank >= 0 ? x->rank - 1 : t->rank;
  if (t->rank >= 0 && t->rank != rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (target) has rank %d, expected %d (input "
                   "0's rank less its class axis)", t->rank, rank);
  out->rank = rank;
  for (int d = 0; d < rank; d++) {
    kl_dim a = x->rank >= 0 ? x->dims[d == 0 ? 0 : d + 1] : kl_dim_unknown();
    kl_dim b = t->rank >= 0 ? t->dims[d] : kl_dim_unknown();
    bool ok;
    out->dims[d] = kl_dim_merge(a, b, &ok);
    if (!ok)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (target) dim %d is %lld, expected %lld "
                     "to match input 0 dim %d", d, (long long)b.size, (long long)a.size,
                     d == 0 ? 0 : d + 1);
  }
  return KILN_OK;
}

/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: input [N, C, D1, ...],
 * target [N, D1, ...] of int32/int64, weight [C]. */
static kiln_status loss(kl_infer_ctx *c) {
  static const char *const names[] = {"input", "target", "weight"};
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, names[0], KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, names[1], KL_DTS_INDEX);
  if (st == KILN_OK) st = kl_check_dtype(c, 2, names[2], KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = kl_check_rank(c, 0, names[0], 2, KL_MAX_RANK);
  bool none;
  if (st == KILN_OK) st = check_reduction(c, &none);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_dim ch = x->rank >= 2 ? x->dims[1] : kl_dim_unknown();
  if (kl_infer_in(c, 2)) st = check_vectors(c, 2, names, ch, "class");
  kl_type shape;
  if (st == KILN_OK) st = check_target(c, x, c->in[1], &shape);
  if (st != KILN_OK) return st;
  c->out[0] = shape;
  if (!none) c->out[0].rank = 0;
  if (c->n_out > 1) c->out[1] = *x;
  return KILN_OK;
}

int kl_infer_nllloss(kl_infer_ctx *c) { return loss(c); }

int kl_infer_sceloss(kl_infer_ctx *c) { return loss(c); }
