/* Shape/dtype inference for the transformer ops: Attention (opset 24 form, with
 * nonpad_kv_seqlen) and RotaryEmbedding.
 *
 * Attention's inputs come in two layouts: 4-D Q [B, Hq, Sq, D], K [B, Hkv, Skv, D],
 * V [B, Hkv, Skv, Dv]; or 3-D Q [B, Sq, Hq * D], K [B, Skv, Hkv * D], V [B, Skv,
 * Hkv * Dv] with q_num_heads and kv_num_heads given. past_key [B, Hkv, P, D] and
 * past_value [B, Hkv, P, Dv] are 4-D either way. Outputs: Y like Q but with Dv,
 * present_key [B, Hkv, P + Skv, D], present_value [B, Hkv, P + Skv, Dv] and
 * qk_matmul_output [B, Hq, Sq, P + Skv]. */
#include "ir/infer_common.h"

enum { Q, K, V, MASK, PAST_K, PAST_V, NONPAD };

/* The sizes of one Attention node, each known or not. */
typedef struct attn_dims {
  int rank; /* of Q, K and V: 3 or 4; -1 when not known */
  kl_dim batch, q_heads, kv_heads, q_seq, kv_seq, past, head, v_head;
} attn_dims;

static kl_dim dim_at(const kl_type *t, int i) {
  return t && t->rank > i ? t->dims[i] : kl_dim_unknown();
}

/* a and b must agree when both are known; `what` names the pair in the message. */
static kiln_status merge(const kl_infer_ctx *c, kl_dim *a, kl_dim b, const char *what) {
  bool ok;
  kl_dim m = kl_dim_merge(*a, b, &ok);
  if (!ok)
    return kl_fail(c->e, KILN_ERR_SHAPE, "%s: %lld vs %lld", what, (long long)a->size,
                   (long long)b.size);
  *a = m;
  return KILN_OK;
}

static kl_dim dim_mul(kl_dim a, kl_dim b) {
  int64_t r;
  if (!kl_dim_known(a) || !kl_dim_known(b) || __builtin_mul_overflow(a.size, b.size, &r))
    return kl_dim_unknown();
  return kl_dim_of(r);
}

static kl_dim dim_add(kl_dim a, kl_dim b) {
  if (kl_dim_known(a) && a.size == 0) return b;
  if (kl_dim_known(b) && b.size == 0) return a;
  int64_t r;
  if (!kl_dim_known(a) || !kl_dim_known(b) || __builtin_add_overflow(a.size, b.size, &r))
    return kl_dim_unknown();
  return kl_dim_of(r);
}

/* hidden / heads, which must divide; unknown when either is. */
static kiln_status dim_div(const kl_infer_ctx *c, kl_dim hidden, int64_t heads, int in,
                           kl_dim *out) {
  *out = kl_dim_unknown();
  if (!kl_dim_known(hidden)) return KILN_OK;
  if (hidden.size % heads != 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input %d has %lld values per token, not a "
                   "multiple of its %lld heads", in, (long long)hidden.size, (long long)heads);
  *out = kl_dim_of(hidden.size / heads);
  return KILN_OK;
}

static kiln_status read_heads(const kl_infer_ctx *c, const char *name, int64_t *v) {
  *v = kl_attr_int(c->node, name, 0);
  if (*v >= 1 && *v <= KL_MAX_HEADS) return KILN_OK;
  if (*v > KL_MAX_HEADS) /* the kernels loop over heads, even over empty ones */
    return kl_fail(c->e, KILN_ERR_LIMIT, "%s is %lld; kiln takes at most %lld heads", name,
                   (long long)*v, (long long)KL_MAX_HEADS);
  return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s is %lld; it is required, at least 1, "
                 "with 3-D inputs", name, (long long)*v);
}

static kiln_status dims_3d(const kl_infer_ctx *c, attn_dims *d) {
  const kl_type *q = c->in[Q], *k = c->in[K], *v = c->in[V];
  int64_t hq, hkv;
  kiln_status st = read_heads(c, "q_num_heads", &hq);
  if (st == KILN_OK) st = read_heads(c, "kv_num_heads", &hkv);
  if (st != KILN_OK) return st;
  d->q_heads = kl_dim_of(hq);
  d->kv_heads = kl_dim_of(hkv);
  d->q_seq = dim_at(q, 1);
  d->kv_seq = dim_at(k, 1);
  kl_dim dk;
  st = dim_div(c, dim_at(q, 2), hq, Q, &d->head);
  if (st == KILN_OK) st = dim_div(c, dim_at(k, 2), hkv, K, &dk);
  if (st == KILN_OK) st = dim_div(c, dim_at(v, 2), hkv, V, &d->v_head);
  if (st == KILN_OK) st = merge(c, &d->head, dk, "head size of Q and K");
  if (st == KILN_OK) st = merge(c, &d->kv_seq, dim_at(v, 1), "sequence length of K and V");
  return st;
}

static kiln_status dims_4d(const kl_infer_ctx *c, attn_dims *d) {
  const kl_type *q = c->in[Q], *k = c->in[K], *v = c->in[V];
  d->q_heads = dim_at(q, 1);
  d->q_seq = dim_at(q, 2);
  d->head = dim_at(q, 3);
  d->kv_heads = dim_at(k, 1);
  d->kv_seq = dim_at(k, 2);
  d->v_head = dim_at(v, 3);
  kiln_status st = merge(c, &d->head, dim_at(k, 3), "head size of Q and K");
  if (st == KILN_OK) st = merge(c, &d->kv_heads, dim_at(v, 1), "head count of K and V");
  if (st == KILN_OK) st = merge(c, &d->kv_seq, dim_at(v, 2), "sequence length of K and V");
  return st;
}

static kiln_status check_ranks(const kl_infer_ctx *c, attn_dims *d) {
  static const char *const names[] = {"Q", "K", "V"};
  d->rank = -1;
  for (int i = 0; i < 3; i++) {
    kiln_status st = kl_check_rank(c, i, names[i], 3, 4);
    if (st != KILN_OK) return st;
    int r = c->in[i]->rank;
    if (r >= 0 && d->rank >= 0 && r != d->rank)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has rank %d, expected %d like "
                     "the others", i, names[i], r, d->rank);
    if (r >= 0) d->rank = r;
  }
  return KILN_OK;
}

/* past_key / past_value: [B, Hkv, P, D] and [B, Hkv, P, Dv], both or neither. */
static kiln_status check_past(const kl_infer_ctx *c, attn_dims *d) {
  const kl_type *pk = kl_infer_in(c, PAST_K), *pv = kl_infer_in(c, PAST_V);
  d->past = kl_dim_of(0);
  if (!pk && !pv) return KILN_OK;
  if (!pk || !pv)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "past_key and past_value must be given "
                   "together");
  if (kl_infer_in(c, NONPAD))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "nonpad_kv_seqlen is for a cache updated "
                   "outside the op; it cannot be used with past_key and past_value");
  kiln_status st = kl_check_rank(c, PAST_K, "past_key", 4, 4);
  if (st == KILN_OK) st = kl_check_rank(c, PAST_V, "past_value", 4, 4);
  d->past = dim_at(pk, 2);
  if (st == KILN_OK) st = merge(c, &d->batch, dim_at(pk, 0), "batch of past_key");
  if (st == KILN_OK) st = merge(c, &d->batch, dim_at(pv, 0), "batch of past_value");
  if (st == KILN_OK) st = merge(c, &d->kv_heads, dim_at(pk, 1), "head count of past_key");
  if (st == KILN_OK) st = merge(c, &d->kv_heads, dim_at(pv, 1), "head count of past_value");
  if (st == KILN_OK) st = merge(c, &d->past, dim_at(pv, 2), "length of past_key and past_value");
  if (st == KILN_OK) st = merge(c, &d->head, dim_at(pk, 3), "head size of past_key");
  if (st == KILN_OK) st = merge(c, &d->v_head, dim_at(pv, 3), "head size of past_value");
  return st;
}

/* attn_mask broadcasts to [B, Hq, Sq, L] with L at most P + Skv (shorter masks are
 * padded with "masked out"); nonpad_kv_seqlen is [B]. */
static kiln_status check_masks(const kl_infer_ctx *c, const attn_dims *d, kl_dim total) {
  const kl_type *m = kl_infer_in(c, MASK);
  kiln_status st = kl_check_rank(c, MASK, "attn_mask", 1, 4);
  if (st == KILN_OK) st = kl_check_rank(c, NONPAD, "nonpad_kv_seqlen", 1, 1);
  if (st != KILN_OK) return st;
  const kl_type *np = kl_infer_in(c, NONPAD);
  kl_dim batch = d->batch;
  if (np && np->rank == 1) st = merge(c, &batch, np->dims[0], "batch of nonpad_kv_seqlen");
  if (st != KILN_OK || !m || m->rank < 0) return st;
  kl_dim len = m->dims[m->rank - 1];
  if (kl_dim_known(len) && kl_dim_known(total) && len.size > total.size)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 3 (attn_mask) covers %lld keys, expected "
                   "at most %lld", (long long)len.size, (long long)total.size);
  const kl_dim want[3] = {d->q_seq, d->q_heads, d->batch};
  for (int i = 0; i < m->rank - 1; i++) {
    kl_dim md = m->dims[m->rank - 2 - i], w = want[i];
    if (kl_dim_known(md) && md.size != 1 && kl_dim_known(w) && md.size != w.size)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 3 (attn_mask) has %lld in dim %d, "
                     "expected 1 or %lld", (long long)md.size, m->rank - 2 - i,
                     (long long)w.size);
  }
  return KILN_OK;
}

static kiln_status check_dtypes(const kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, Q, "Q", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, V, "V", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, Q, K);
  if (st == KILN_OK) st = kl_check_same_dtype(c, Q, PAST_K);
  if (st == KILN_OK) st = kl_check_same_dtype(c, V, PAST_V);
  if (st == KILN_OK) st = kl_check_dtype(c, MASK, "attn_mask", KL_DTS_FLOAT | KL_DT(KL_BOOL));
  if (st == KILN_OK) st = kl_check_dtype(c, NONPAD, "nonpad_kv_seqlen", KL_DT(KL_I64));
  const kl_type *m = kl_infer_in(c, MASK);
  if (st == KILN_OK && m && m->dtype != KL_BOOL) st = kl_check_same_dtype(c, Q, MASK);
  return st;
}

static kiln_status check_attrs(const kl_infer_ctx *c) {
  int64_t mode = kl_attr_int(c->node, "qk_matmul_output_mode", 0);
  int64_t causal = kl_attr_int(c->node, "is_causal", 0);
  int64_t prec = kl_attr_int(c->node, "softmax_precision", 0);
  if (mode < 0 || mode > 3)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "qk_matmul_output_mode is %lld, expected "
                   "0 to 3", (long long)mode);
  if (causal != 0 && causal != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "is_causal is %lld, expected 0 or 1",
                   (long long)causal);
  if (kl_attr_float(c->node, "softcap", 0.0f) < 0.0f)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "softcap is negative");
  /* The reference kernel computes the softmax in double, which covers every choice. */
  if (prec != 0 && !(prec > 0 && prec < 32 && kl_dtype_is_float((kl_dtype)prec)))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "softmax_precision is %lld, expected a "
                   "float dtype", (long long)prec);
  return KILN_OK;
}

/* Sizes from the inputs, checked against each other. */
static kiln_status attn_sizes(const kl_infer_ctx *c, attn_dims *d) {
  kiln_status st = check_ranks(c, d);
  if (st != KILN_OK) return st;
  d->batch = dim_at(c->in[Q], 0);
  st = merge(c, &d->batch, dim_at(c->in[K], 0), "batch of Q and K");
  if (st == KILN_OK) st = merge(c, &d->batch, dim_at(c->in[V], 0), "batch of Q and V");
  if (st == KILN_OK && d->rank == 3) st = dims_3d(c, d);
  if (st == KILN_OK && d->rank == 4) st = dims_4d(c, d);
  if (st == KILN_OK && d->rank < 0) {
    d->q_heads = d->kv_heads = d->q_seq = d->kv_seq = kl_dim_unknown();
    d->head = d->v_head = kl_dim_unknown();
  }
  if (st == KILN_OK) st = check_past(c, d);
  if (st != KILN_OK) return st;
  kl_dim hq = d->q_heads, hkv = d->kv_heads;
  if (kl_dim_known(hq) && kl_dim_known(hkv) && (hkv.size == 0 || hq.size % hkv.size != 0))
    return kl_fail(c->e, KILN_ERR_SHAPE, "%lld query heads do not split into groups over "
                   "%lld key/value heads", (long long)hq.size, (long long)hkv.size);
  return KILN_OK;
}

static void set4(kl_type *t, kl_dtype dtype, kl_dim a, kl_dim b, kl_dim c, kl_dim d) {
  kl_type_unknown_dims(t, dtype, 4);
  t->dims[0] = a;
  t->dims[1] = b;
  t->dims[2] = c;
  t->dims[3] = d;
}

int kl_infer_attention(kl_infer_ctx *c) {
  attn_dims d;
  kiln_status st = check_dtypes(c);
  if (st == KILN_OK) st = check_attrs(c);
  if (st == KILN_OK) st = attn_sizes(c, &d);
  kl_dim total = st == KILN_OK ? dim_add(d.past, d.kv_seq) : kl_dim_unknown();
  if (st == KILN_OK) st = check_masks(c, &d, total);
  if (st != KILN_OK) return st;
  kl_dtype qt = c->in[Q]->dtype, vt = c->in[V]->dtype;
  kl_type *y = &c->out[0];
  kl_type_unknown(y, qt);
  if (d.rank == 4) set4(y, qt, d.batch, d.q_heads, d.q_seq, d.v_head);
  if (d.rank == 3) {
    kl_type_unknown_dims(y, qt, 3);
    y->dims[0] = d.batch;
    y->dims[1] = d.q_seq;
    y->dims[2] = dim_mul(d.q_heads, d.v_head);
    if (!kl_dim_known(y->dims[2]) && kl_dim_known(d.q_heads) && kl_dim_known(d.v_head))
      return kl_fail(c->e, KILN_ERR_LIMIT, "the output's width, %lld heads of %lld values, "
                     "overflows", (long long)d.q_heads.size, (long long)d.v_head.size);
  }
  if (c->n_out > 1) set4(&c->out[1], qt, d.batch, d.kv_heads, total, d.head);
  if (c->n_out > 2) set4(&c->out[2], vt, d.batch, d.kv_heads, total, d.v_head);
  if (c->n_out > 3) set4(&c->out[3], qt, d.batch, d.q_heads, d.q_seq, total);
  return KILN_OK;
}

/* ---- RotaryEmbedding ----
 * X [B, H, S, D] or [B, S, H * D] (num_heads given); cos_cache and sin_cache
 * [max_position, R / 2] with position_ids [B, S], or [B, S, R / 2] without; R is
 * rotary_embedding_dim (0: D), even and at most D. Y is like X. */

static kiln_status rotary_head_size(const kl_infer_ctx *c, kl_dim *head) {
  const kl_type *x = c->in[0];
  *head = kl_dim_unknown();
  if (x->rank == 4) *head = x->dims[3];
  if (x->rank != 3) return KILN_OK;
  int64_t heads = kl_attr_int(c->node, "num_heads", 0);
  if (heads < 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "num_heads is %lld; it is required, at "
                   "least 1, with a 3-D input", (long long)heads);
  return dim_div(c, x->dims[2], heads, 0, head);
}

static kiln_status rotary_caches(const kl_infer_ctx *c, int64_t rot) {
  const kl_type *pos = kl_infer_in(c, 3), *x = c->in[0];
  int want = pos ? 2 : 3;
  for (int i = 1; i <= 2; i++) {
    const kl_type *t = c->in[i];
    const char *name = i == 1 ? "cos_cache" : "sin_cache";
    kiln_status st = kl_check_rank(c, i, name, want, want);
    if (st != KILN_OK) return st;
    kl_dim last = t->rank >= 1 ? t->dims[t->rank - 1] : kl_dim_unknown();
    if (rot >= 0 && kl_dim_known(last) && last.size != rot / 2)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %lld values per position, "
                     "expected %lld (half of rotary_embedding_dim %lld)", i, name,
                     (long long)last.size, (long long)(rot / 2), (long long)rot);
    if (pos || t->rank != 3 || x->rank < 0) continue;
    kl_dim seq = x->dims[x->rank == 4 ? 2 : 1], b = x->dims[0];
    bool ok1, ok2;
    kl_dim_merge(t->dims[0], b, &ok1);
    kl_dim_merge(t->dims[1], seq, &ok2);
    if (!ok1 || !ok2)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) must be [batch, sequence, %lld] "
                     "to match input 0", i, name, (long long)(rot / 2));
  }
  return KILN_OK;
}

int kl_infer_rotary_embedding(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK)
    st = kl_check_dtype(c, 0, "X", KL_DT(KL_F32) | KL_DT(KL_F16) | KL_DT(KL_BF16));
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 3, "position_ids", KL_DT(KL_I64));
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 3, 4);
  if (st == KILN_OK) st = kl_check_rank(c, 3, "position_ids", 2, 2);
  kl_dim head;
  if (st == KILN_OK) st = rotary_head_size(c, &head);
  if (st != KILN_OK) return st;
  int64_t rot = kl_attr_int(c->node, "rotary_embedding_dim", 0);
  bool bad = rot < 0;
  if (rot == 0) rot = head.size; /* -1 when the head size is not known */
  if (bad || (rot > 0 && (rot % 2 != 0 || (kl_dim_known(head) && rot > head.size))))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "rotary_embedding_dim is %lld, expected an "
                   "even number up to the head size %lld", (long long)rot,
                   (long long)head.size);
  st = rotary_caches(c, rot);
  if (st == KILN_OK) c->out[0] = *c->in[0];
  return st;
}
