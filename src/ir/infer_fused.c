/* Shape and dtype inference for kiln's fused ops (domain "kiln"), built on the
 * inference of the ops they replace so that both agree by construction. */
#include "ir/fused.h"
#include "ir/infer_common.h"
#include "ir/layout.h"

#include <string.h>

static const kl_fused_act acts[] = {
    {"Relu", "Relu", 0, false},           {"LeakyRelu", "LeakyRelu", 1, false},
    {"Clip", "Clip", 2, false},           {"Sigmoid", "Sigmoid", 0, false},
    {"Tanh", "Tanh", 0, false},           {"HardSigmoid", "HardSigmoid", 2, false},
    {"HardSwish", "HardSwish", 0, false}, {"Gelu", "Gelu", 0, false},
    {"GeluTanh", "Gelu", 0, true},        {"Silu", "Swish", 0, false},
    {"Mish", "Mish", 0, false},           {"Elu", "Elu", 1, false},
};

const kl_fused_act *kl_fused_act_find(const char *name) {
  for (size_t i = 0; name && i < sizeof acts / sizeof acts[0]; i++)
    if (strcmp(acts[i].name, name) == 0) return &acts[i];
  return NULL;
}

static const kl_op fused_pairs[][2] = {
    {KL_OP_KilnFusedConv, KL_OP_Conv},
    {KL_OP_KilnFusedConvTranspose, KL_OP_ConvTranspose},
    {KL_OP_KilnFusedGemm, KL_OP_Gemm},
    {KL_OP_KilnFusedMatMul, KL_OP_MatMul},
};
#define N_FUSED ((int)(sizeof fused_pairs / sizeof fused_pairs[0]))

kl_op kl_fused_base(kl_op fused) {
  for (int i = 0; i < N_FUSED; i++)
    if (fused_pairs[i][0] == fused) return fused_pairs[i][1];
  return KL_OP_COUNT;
}

kl_op kl_fused_of(kl_op base) {
  for (int i = 0; i < N_FUSED; i++)
    if (fused_pairs[i][1] == base) return fused_pairs[i][0];
  return KL_OP_COUNT;
}

static kiln_status check_activation(const kl_infer_ctx *c) {
  const kl_attr *a = kl_node_attr(c->node, "activation");
  if (!a) return KILN_OK;
  const kl_fused_act *act = a->kind == KL_ATTR_STRING ? kl_fused_act_find(a->s) : NULL;
  if (!act)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "attribute activation is not one of "
                   "kiln's fused activations (Relu, LeakyRelu, Clip, Sigmoid, Tanh, "
                   "HardSigmoid, HardSwish, Gelu, GeluTanh, Silu, Mish, Elu)");
  const float *p;
  int n = kl_attr_floats(c->node, "activation_params", &p);
  if (n < 0) n = 0;
  if (n != act->n_params)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "activation %s takes %d "
                   "activation_params, the node has %d", act->name, act->n_params, n);
  return KILN_OK;
}

/* Input i (Bias or Sum) must have the output's dtype and broadcast to its shape. */
static kiln_status check_addend(const kl_infer_ctx *c, int i, const char *name) {
  const kl_type *t = kl_infer_in(c, i);
  if (!t) return KILN_OK;
  kl_dtype want = c->out[0].dtype;
  if (t->dtype != KL_UNDEFINED && want != KL_UNDEFINED && t->dtype != want)
    return kl_fail(c->e, KILN_ERR_DTYPE, "input %d (%s) is %s, expected %s like the "
                   "output", i, name, kl_dtype_name(t->dtype), kl_dtype_name(want));
  return kl_check_unidirectional(c, i, name, &c->out[0]);
}

static int infer_fused(kl_infer_ctx *c);

int kl_infer_fused(kl_infer_ctx *c) {
  if (kl_layout_nhwc(c->node)) return kl_layout_infer(c, infer_fused);
  return infer_fused(c);
}

static int infer_fused(kl_infer_ctx *c) {
  kl_op base = kl_fused_base(c->node->op);
  if (base == KL_OP_COUNT)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "op %s is not a fused op", kl_op_name(c->node->op));
  kl_infer_ctx sub = *c;
  int base_in = base == KL_OP_MatMul ? 2 : 3;
  if (sub.n_in > base_in) sub.n_in = base_in;
  kiln_status st = (kiln_status)kl_op_get(base)->infer(&sub);
  if (st == KILN_OK && base == KL_OP_MatMul) st = check_addend(c, KL_FUSED_BIAS, "Bias");
  if (st == KILN_OK) st = check_addend(c, KL_FUSED_SUM, "Sum");
  if (st == KILN_OK) st = check_activation(c);
  return st;
}

/* SkipLayerNorm (X, Skip, Scale, B?) -> Y, Sum?: LayerNormalization of X + Skip. */
int kl_infer_skip_layernorm(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st != KILN_OK) return st;
  kl_type sum;
  memset(&sum, 0, sizeof sum);
  sum.dtype = c->in[0]->dtype;
  st = kl_broadcast(c, 0, 1, &sum);
  if (st != KILN_OK) return st;
  const kl_type *in[3] = {&sum, c->in[2], kl_infer_in(c, 3)};
  const void *data[3] = {NULL, kl_infer_data(c, 2), kl_infer_data(c, 3)};
  kl_infer_ctx ln = *c;
  ln.n_in = in[2] ? 3 : 2;
  ln.n_out = 1;
  ln.in = in;
  ln.data = data;
  st = (kiln_status)kl_op_get(KL_OP_LayerNormalization)->infer(&ln);
  if (st == KILN_OK && c->n_out > 1) c->out[1] = sum;
  return st;
}

/* Attention (Q, Kt, V, Mask?): scores = Q Kt (MatMul), Mask broadcast to the scores,
 * softmax along the last axis, then scores V (MatMul). */
int kl_infer_kiln_attention(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st != KILN_OK) return st;
  kl_type scores[1];
  const void *data[2] = {NULL, NULL};
  kl_infer_ctx mm = *c;
  mm.n_in = 2;
  mm.n_out = 1;
  mm.data = data;
  mm.out = scores;
  st = (kiln_status)kl_op_get(KL_OP_MatMul)->infer(&mm);
  if (st == KILN_OK && scores->rank == 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "Q Kt is a scalar, expected a matrix of scores");
  if (st == KILN_OK) {
    kl_infer_ctx mask = *c;
    mask.out = scores;
    st = check_addend(&mask, 3, "Mask");
  }
  if (st != KILN_OK) return st;
  const kl_type *in2[2] = {scores, c->in[2]};
  mm.in = in2;
  mm.out = c->out;
  return (kiln_status)kl_op_get(KL_OP_MatMul)->infer(&mm);
}

/* MultiHeadAttention (Q, K?, V?, Mask?) num_heads=H: Q [B, S, H*D], K [B, T, H*D] and
 * V [B, T, H*Dv] give Y [B, S, H*Dv]; without K and V, Q is packed [B, S, 3*H*D]
 * (queries, keys and values side by side, T = S, Dv = D). Mask broadcasts to the
 * scores [B, H, S, T]. */
int kl_infer_kiln_mha(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  const kl_type *q = c->in[0], *k = kl_infer_in(c, 1), *v = kl_infer_in(c, 2);
  int64_t h = kl_attr_int(c->node, "num_heads", 0);
  if (st == KILN_OK && h < 1)
    st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "attribute num_heads is %lld, expected at "
                 "least 1", (long long)h);
  if (st == KILN_OK && h > KL_MAX_HEADS) /* 3 * num_heads must not overflow either */
    st = kl_fail(c->e, KILN_ERR_LIMIT, "attribute num_heads is %lld; kiln takes at most "
                 "%lld heads", (long long)h, (long long)KL_MAX_HEADS);
  if (st == KILN_OK && (!k) != (!v))
    st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "K and V must both be given (separate "
                 "projections) or both be absent (packed QKV in Q)");
  for (int i = 0; st == KILN_OK && i < 3; i++) {
    if (!kl_infer_in(c, i)) continue;
    st = kl_check_dtype(c, i, "Q/K/V", KL_DTS_FLOAT);
    if (st == KILN_OK) st = kl_check_rank(c, i, "Q/K/V", 3, 3);
    if (st == KILN_OK && i > 0) st = kl_check_same_dtype(c, 0, i);
  }
  if (st != KILN_OK) return st;
  if (q->rank < 0 || (k && (k->rank < 0 || v->rank < 0))) {
    kl_type_unknown(&c->out[0], q->dtype);
    return KILN_OK;
  }
  bool ok = true;
  kl_dim batch = q->dims[0], seq = q->dims[1], keys = seq, width = kl_dim_unknown();
  if (!k) {
    int64_t w = q->dims[2].size;
    if (w >= 0 && w % (3 * h) != 0)
      return kl_fail(c->e, KILN_ERR_SHAPE, "packed QKV width %lld is not a multiple of "
                     "3 * num_heads = %lld", (long long)w, (long long)(3 * h));
    if (w >= 0) width = kl_dim_of(w / 3);
  } else {
    batch = kl_dim_merge(kl_dim_merge(batch, k->dims[0], &ok), v->dims[0], &ok);
    keys = kl_dim_merge(k->dims[1], v->dims[1], &ok);
    (void)kl_dim_merge(q->dims[2], k->dims[2], &ok);
    if (!ok)
      return kl_fail(c->e, KILN_ERR_SHAPE, "Q, K and V disagree in batch, key count or "
                     "query/key width");
    int64_t dims[2] = {q->dims[2].size, v->dims[2].size};
    for (int i = 0; i < 2; i++)
      if (dims[i] >= 0 && dims[i] % h != 0)
        return kl_fail(c->e, KILN_ERR_SHAPE, "%s width %lld is not a multiple of num_heads "
                       "%lld", i ? "V" : "Q", (long long)dims[i], (long long)h);
    width = v->dims[2];
  }
  kl_type scores;
  memset(&scores, 0, sizeof scores);
  scores.dtype = q->dtype;
  scores.rank = 4;
  scores.dims[0] = batch;
  scores.dims[1] = kl_dim_of(h);
  scores.dims[2] = seq;
  scores.dims[3] = keys;
  c->out[0].dtype = q->dtype;
  c->out[0].rank = 3;
  c->out[0].dims[0] = batch;
  c->out[0].dims[1] = seq;
  c->out[0].dims[2] = width;
  kl_infer_ctx mask = *c;
  mask.out = &scores;
  return check_addend(&mask, 3, "Mask");
}
