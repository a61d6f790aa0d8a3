/* Reference kernels: Attention and RotaryEmbedding.
 *
 * Attention, per batch b, query head h (key/value head g = h / (Hq / Hkv)) and query i,
 * over the keys j < T = P + Skv (past_key's P rows, then K's):
 *   s_j = scale * <Q[b, h, i], K[b, g, j]>            (scale: 1 / sqrt(D) by default)
 *   s_j = softcap * tanh(s_j / softcap)               (when softcap > 0)
 *   s_j += bias_j: attn_mask (a float added; a bool false, or a key beyond the mask's
 *          length, is -inf), -inf when is_causal and j > i + P, -inf when
 *          j >= nonpad_kv_seqlen[b]
 *   Y[b, h, i] = sum_j softmax(s)_j * V[b, g, j]
 * A query whose keys are all masked out gets NaN, as the ONNX reference's softmax does.
 * qk_matmul_output holds s after step 1 (mode 0), 2 (mode 1), 3 (mode 2) or the
 * softmax (mode 3). present_key / present_value are past and new keys / values
 * concatenated. 3-D Q/K/V/Y are [B, S, heads * size]: the same values, laid out by
 * token. Everything is computed in double.
 *
 * RotaryEmbedding, per token (b, s) and head: with R = rotary_embedding_dim and
 * (cos, sin) the cache row of position_ids[b, s] (or of (b, s) without position ids),
 * the pairs (x1, x2) = (x[k], x[k + R/2]) (or (x[2k], x[2k+1]) when interleaved) for
 * k < R/2 become (cos*x1 - sin*x2, sin*x1 + cos*x2); x[R:] is copied.
 */
#include "backends/cpu/ref/ref.h"

#include <math.h>
#include <stdlib.h>

enum { Q, K, V, MASK, PAST_K, PAST_V, NONPAD };

typedef struct attn {
  const kl_tensor *q, *k, *v, *mask, *pk, *pv, *nonpad;
  bool rank3, causal;
  int mode;
  int64_t batch, hq, hkv, sq, skv, past, total, d, dv;
  double scale, softcap;
  int64_t mdims[4]; /* the mask's dims right-aligned to [B, Hq, Sq, L], 1 padded */
} attn;

/* Element e of token s of head h in batch b, for a tensor of `heads` heads, `seq`
 * tokens and `width` values per head, in either layout. */
static int64_t at(const attn *a, int64_t b, int64_t h, int64_t s, int64_t e, int64_t heads,
                  int64_t seq, int64_t width) {
  if (a->rank3) return (b * seq + s) * heads * width + h * width + e;
  return ((b * heads + h) * seq + s) * width + e;
}

/* Value e of key (or value) row j of head g: from the past for j < P. */
static double kv_load(const attn *a, bool is_v, int64_t b, int64_t g, int64_t j, int64_t e) {
  int64_t width = is_v ? a->dv : a->d;
  const kl_tensor *past = is_v ? a->pv : a->pk, *cur = is_v ? a->v : a->k;
  if (j < a->past)
    return kl_ref_load(past->data, past->dtype, ((b * a->hkv + g) * a->past + j) * width + e);
  return kl_ref_load(cur->data, cur->dtype, at(a, b, g, j - a->past, e, a->hkv, a->skv, width));
}

static void attn_init(const kl_kernel_ctx *c, attn *a) {
  const kl_tensor *q = c->in[Q], *k = c->in[K], *v = c->in[V];
  a->q = q;
  a->k = k;
  a->v = v;
  a->mask = c->n_in > MASK ? c->in[MASK] : NULL;
  a->pk = c->n_in > PAST_K ? c->in[PAST_K] : NULL;
  a->pv = c->n_in > PAST_V ? c->in[PAST_V] : NULL;
  a->nonpad = c->n_in > NONPAD ? c->in[NONPAD] : NULL;
  a->rank3 = q->rank == 3;
  a->batch = q->dims[0];
  if (a->rank3) {
    a->hq = kl_attr_int(c->node, "q_num_heads", 1);
    a->hkv = kl_attr_int(c->node, "kv_num_heads", 1);
    a->sq = q->dims[1], a->skv = k->dims[1];
    a->d = q->dims[2] / a->hq, a->dv = v->dims[2] / a->hkv;
  } else {
    a->hq = q->dims[1], a->hkv = k->dims[1];
    a->sq = q->dims[2], a->skv = k->dims[2];
    a->d = q->dims[3], a->dv = v->dims[3];
  }
  a->past = a->pk ? a->pk->dims[2] : 0;
  a->total = a->past + a->skv;
  a->causal = kl_attr_int(c->node, "is_causal", 0) != 0;
  a->mode = (int)kl_attr_int(c->node, "qk_matmul_output_mode", 0);
  a->softcap = kl_attr_float(c->node, "softcap", 0.0f);
  a->scale = kl_node_attr(c->node, "scale") ? kl_attr_float(c->node, "scale", 1.0f)
                                            : 1.0 / sqrt((double)a->d);
  for (int i = 0; i < 4; i++) {
    int j = a->mask ? i - (4 - a->mask->rank) : -1;
    a->mdims[i] = j >= 0 ? a->mask->dims[j] : 1;
  }
}

/* The bias that masks add to score j of query i: 0, a float, or -inf. */
static double bias(const attn *a, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (a->causal && j > i + a->past) return -INFINITY;
  if (a->nonpad && j >= ((const int64_t *)a->nonpad->data)[b]) return -INFINITY;
  if (!a->mask) return 0;
  const int64_t *m = a->mdims;
  if (j >= m[3]) return -INFINITY;
  int64_t off = (((m[0] > 1 ? b : 0) * m[1] + (m[1] > 1 ? h : 0)) * m[2] +
                 (m[2] > 1 ? i : 0)) * m[3] + j;
  if (a->mask->dtype == KL_BOOL) return ((const uint8_t *)a->mask->data)[off] ? 0 : -INFINITY;
  return kl_ref_load(a->mask->data, a->mask->dtype, off);
}

/* Scores of query i against every key, into s[0..T); qk (when not NULL) gets what
 * qk_matmul_output_mode asks for, up to the softmax. */
static void scores(const attn *a, int64_t b, int64_t h, int64_t i, double *s, double *qk) {
  int64_t g = h / (a->hq / a->hkv);
  for (int64_t j = 0; j < a->total; j++) {
    double dot = 0;
    for (int64_t e = 0; e < a->d; e++)
      dot += kl_ref_load(a->q->data, a->q->dtype, at(a, b, h, i, e, a->hq, a->sq, a->d)) *
             kv_load(a, false, b, g, j, e);
    double v = dot * a->scale;
    if (qk && a->mode == 0) qk[j] = v;
    if (a->softcap > 0) v = a->softcap * tanh(v / a->softcap);
    if (qk && a->mode == 1) qk[j] = v;
    v += bias(a, b, h, i, j);
    if (qk && a->mode == 2) qk[j] = v;
    s[j] = v;
  }
}

static void softmax(double *s, int64_t n) {
  double max = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n; j++) max = s[j] > max ? s[j] : max;
  for (int64_t j = 0; j < n; j++) sum += s[j] = exp(s[j] - max);
  for (int64_t j = 0; j < n; j++) s[j] /= sum;
}

static void attend(const attn *a, kl_kernel_ctx *c, int64_t b, int64_t h, int64_t i,
                   double *s) {
  kl_tensor *y = c->out[0], *qk_out = c->n_out > 3 ? c->out[3] : NULL;
  double *qk = qk_out ? s + a->total : NULL;
  scores(a, b, h, i, s, qk);
  softmax(s, a->total);
  int64_t row = ((b * a->hq + h) * a->sq + i) * a->total;
  for (int64_t j = 0; qk && j < a->total; j++)
    kl_ref_store(qk_out->data, qk_out->dtype, row + j, a->mode == 3 ? s[j] : qk[j]);
  int64_t g = h / (a->hq / a->hkv);
  for (int64_t e = 0; e < a->dv; e++) {
    double acc = 0;
    for (int64_t j = 0; j < a->total; j++) acc += s[j] * kv_load(a, true, b, g, j, e);
    kl_ref_store(y->data, y->dtype, at(a, b, h, i, e, a->hq, a->sq, a->dv), acc);
  }
}

/* present_key / present_value: [B, Hkv, T, width], past rows then new ones. */
static void present(const attn *a, kl_tensor *out, bool is_v) {
  int64_t width = is_v ? a->dv : a->d, i = 0;
  for (int64_t b = 0; b < a->batch; b++)
    for (int64_t g = 0; g < a->hkv; g++)
      for (int64_t j = 0; j < a->total; j++)
        for (int64_t e = 0; e < width; e++)
          kl_ref_store(out->data, out->dtype, i++, kv_load(a, is_v, b, g, j, e));
}

int kl_ref_attention(kl_kernel_ctx *c) {
  attn a;
  attn_init(c, &a);
  for (int64_t b = 0; a.nonpad && b < a.batch; b++) {
    int64_t valid = ((const int64_t *)a.nonpad->data)[b];
    if (valid < 0 || valid > a.total)
      return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "nonpad_kv_seqlen[%lld] is %lld; "
                     "expected 0 to %lld, the keys there are", (long long)b,
                     (long long)valid, (long long)a.total);
  }
  /* scores, then the qk_matmul_output row */
  double *s = malloc((size_t)(2 * a.total + 1) * sizeof *s);
  if (!s) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for %lld scores",
                         (long long)a.total);
  for (int64_t b = 0; b < a.batch; b++)
    for (int64_t h = 0; h < a.hq; h++)
      for (int64_t i = 0; i < a.sq; i++) attend(&a, c, b, h, i, s);
  free(s);
  if (c->n_out > 1 && c->out[1]) present(&a, c->out[1], false);
  if (c->n_out > 2 && c->out[2]) present(&a, c->out[2], true);
  return KILN_OK;
}

/* ---- RotaryEmbedding ---- */

typedef struct rotary {
  const kl_tensor *x, *cos, *sin, *pos;
  bool rank3, interleaved;
  int64_t batch, heads, seq, head, rot;
} rotary;

static void rotary_init(const kl_kernel_ctx *c, rotary *r) {
  const kl_tensor *x = c->in[0];
  r->x = x;
  r->cos = c->in[1];
  r->sin = c->in[2];
  r->pos = c->n_in > 3 ? c->in[3] : NULL;
  r->rank3 = x->rank == 3;
  r->interleaved = kl_attr_int(c->node, "interleaved", 0) != 0;
  r->batch = x->dims[0];
  r->heads = r->rank3 ? kl_attr_int(c->node, "num_heads", 1) : x->dims[1];
  r->seq = x->dims[r->rank3 ? 1 : 2];
  r->head = r->rank3 ? x->dims[2] / r->heads : x->dims[3];
  r->rot = kl_attr_int(c->node, "rotary_embedding_dim", 0);
  if (r->rot == 0) r->rot = r->head;
}

/* Rotates one head of one token, starting at element `base` of X and Y. */
static void rotate(const rotary *r, kl_tensor *y, int64_t base, int64_t row) {
  const kl_tensor *x = r->x;
  int64_t half = r->rot / 2;
  for (int64_t k = 0; k < half; k++) {
    int64_t i1 = r->interleaved ? 2 * k : k, i2 = r->interleaved ? 2 * k + 1 : k + half;
    double cs = kl_ref_load(r->cos->data, r->cos->dtype, row * half + k);
    double sn = kl_ref_load(r->sin->data, r->sin->dtype, row * half + k);
    double x1 = kl_ref_load(x->data, x->dtype, base + i1);
    double x2 = kl_ref_load(x->data, x->dtype, base + i2);
    kl_ref_store(y->data, y->dtype, base + i1, cs * x1 - sn * x2);
    kl_ref_store(y->data, y->dtype, base + i2, sn * x1 + cs * x2);
  }
  for (int64_t e = r->rot; e < r->head; e++)
    kl_ref_store(y->data, y->dtype, base + e, kl_ref_load(x->data, x->dtype, base + e));
}

/* The cache row of token (b, s), checked against the cache's length. */
static kiln_status cache_row(const kl_kernel_ctx *c, const rotary *r, int64_t b, int64_t s,
                             int64_t *row) {
  *row = b * r->seq + s;
  if (!r->pos) return KILN_OK;
  *row = ((const int64_t *)r->pos->data)[b * r->seq + s];
  if (*row >= 0 && *row < r->cos->dims[0]) return KILN_OK;
  return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input 3 (position_ids) has %lld at "
                 "[%lld, %lld], expected 0 to %lld (the rows of the caches)", (long long)*row,
                 (long long)b, (long long)s, (long long)r->cos->dims[0] - 1);
}

int kl_ref_rotary_embedding(kl_kernel_ctx *c) {
  rotary r;
  rotary_init(c, &r);
  kl_tensor *y = c->out[0];
  for (int64_t b = 0; b < r.batch; b++)
    for (int64_t s = 0; s < r.seq; s++) {
      int64_t row;
      kiln_status st = cache_row(c, &r, b, s, &row);
      if (st != KILN_OK) return st;
      for (int64_t h = 0; h < r.heads; h++) {
        int64_t base = r.rank3 ? (b * r.seq + s) * r.heads * r.head + h * r.head
                               : ((b * r.heads + h) * r.seq + s) * r.head;
        rotate(&r, y, base, row);
      }
    }
  return KILN_OK;
}
