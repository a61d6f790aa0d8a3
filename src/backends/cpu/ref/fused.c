/* Reference kernels for kiln's fused ops, composed from the reference kernels of the
 * ops they replace so that an optimized graph computes what the original did.
 *
 * FusedConv / FusedConvTranspose / FusedGemm / FusedMatMul:
 *   Y = act(base(inputs) + Bias + Sum): the base op's kernel writes Y, then Bias
 *   (FusedMatMul only) and Sum (both broadcast to Y) are added and the activation runs
 *   in place, each step rounded to Y's dtype as the separate nodes did.
 * SkipLayerNorm (X, Skip, Scale, B?) -> Y, S?: S = X + Skip, Y = LayerNormalization(S).
 * Attention (Q [.., S, D], Kt [.., D, T], V [.., T, Dv], Mask?) -> Y [.., S, Dv]:
 *   Y = softmax(Q Kt * scale + Mask) V, softmax along the last axis; the scores are kept
 *   in double. With zero_masked_rows=1, a row whose scores are none above -inf (every
 *   key masked: the softmax is NaN) gives 0, as Where(IsNaN(p), 0, p) makes it.
 * MultiHeadAttention (Q, K?, V?, Mask?) num_heads=H: the same per batch b and head h
 *   on token-major tensors (ref/mha.h), computed directly in double.
 */
#include "backends/cpu/ref/mha.h"
#include "backends/cpu/ref/ref.h"
#include "ir/fused.h"
#include "ir/layout.h"

#include <math.h>
#include <stdlib.h>

/* y += t, t broadcast to y's shape. */
static void add_broadcast(kl_tensor *y, const kl_tensor *t) {
  kl_ref_iter it;
  kl_ref_iter_init(&it, y->rank, y->dims);
  kl_ref_iter_bcast(&it, 0, t->rank, t->dims, 1);
  int64_t n = kl_tensor_numel(y);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it))
    kl_ref_store(y->data, y->dtype, i,
                 kl_ref_load(y->data, y->dtype, i) + kl_ref_load(t->data, t->dtype, it.off[0]));
}

/* A scalar tensor of y's dtype holding v, stored in buf. */
static kl_tensor scalar_like(const kl_tensor *y, double v, double *buf) {
  kl_tensor t = {.dtype = y->dtype, .rank = 0, .data = buf};
  kl_ref_store(buf, y->dtype, 0, v);
  return t;
}

/* Runs the activation op's own kernel in place on y, through a stand-in node that
 * carries the activation's attributes (or, for Clip, its bound inputs). */
static kiln_status apply_activation(const kl_kernel_ctx *c, kl_tensor *y) {
  const kl_fused_act *act = kl_fused_act_find(kl_attr_string(c->node, "activation", NULL));
  if (!act) return KILN_OK; /* infer refused any unknown name */
  const float *p = NULL;
  kl_attr_floats(c->node, "activation_params", &p);
  char alpha[] = "alpha", beta[] = "beta", approximate[] = "approximate", tanh_s[] = "tanh";
  kl_attr attrs[2] = {{.name = alpha, .kind = KL_ATTR_FLOAT},
                      {.name = beta, .kind = KL_ATTR_FLOAT}};
  kl_node node = {.op = kl_op_lookup(KL_DOMAIN_ONNX, act->op), .name = c->node->name,
                  .src = c->node->src, .attrs = attrs};
  double lo_buf, hi_buf;
  kl_tensor lo, hi;
  const kl_tensor *in[3] = {y, NULL, NULL};
  int n_in = 1;
  if (act->tanh_approx) {
    attrs[0] = (kl_attr){.name = approximate, .kind = KL_ATTR_STRING, .s = tanh_s};
    node.n_attrs = 1;
  } else if (node.op == KL_OP_Clip) {
    lo = scalar_like(y, p[0], &lo_buf);
    hi = scalar_like(y, p[1], &hi_buf);
    in[1] = &lo;
    in[2] = &hi;
    n_in = 3;
  } else if (act->n_params > 0) {
    attrs[0].f = p[0];
    if (act->n_params > 1) attrs[1].f = p[1];
    node.n_attrs = act->n_params;
  }
  kl_tensor *out[1] = {y};
  kl_kernel_ctx sub = {&node, n_in, 1, in, out, c->e, c->threads, NULL, 0};
  return (kiln_status)kl_op_get(node.op)->ref(&sub);
}

static int ref_fused(kl_kernel_ctx *c);

int kl_ref_fused(kl_kernel_ctx *c) {
  if (kl_layout_nhwc(c->node)) return kl_layout_ref(c, ref_fused);
  return ref_fused(c);
}

static int ref_fused(kl_kernel_ctx *c) {
  kl_op base = kl_fused_base(c->node->op);
  if (base == KL_OP_COUNT)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "op %s is not a fused op", kl_op_name(c->node->op));
  kl_kernel_ctx sub = *c;
  int base_in = base == KL_OP_MatMul ? 2 : 3;
  if (sub.n_in > base_in) sub.n_in = base_in;
  kiln_status st = (kiln_status)kl_op_get(base)->ref(&sub);
  if (st != KILN_OK) return st;
  kl_tensor *y = c->out[0];
  if (base == KL_OP_MatMul && c->n_in > KL_FUSED_BIAS && c->in[KL_FUSED_BIAS])
    add_broadcast(y, c->in[KL_FUSED_BIAS]);
  if (c->n_in > KL_FUSED_SUM && c->in[KL_FUSED_SUM]) add_broadcast(y, c->in[KL_FUSED_SUM]);
  return apply_activation(c, y);
}

int kl_ref_skip_layernorm(kl_kernel_ctx *c) {
  kl_tensor sum = *c->out[0]; /* the sum has Y's shape (infer made it so) */
  void *scratch = NULL;
  if (c->n_out > 1 && c->out[1]) {
    sum = *c->out[1];
  } else {
    size_t bytes = kl_tensor_nbytes(&sum);
    if (!(scratch = malloc(bytes ? bytes : 1)))
      return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for X + Skip (%zu bytes)",
                     bytes);
    sum.data = scratch;
  }
  kl_node add = {.op = KL_OP_Add, .name = c->node->name, .src = c->node->src};
  kl_tensor *sum_out[1] = {&sum};
  kl_kernel_ctx add_ctx = {&add, 2, 1, c->in, sum_out, c->e, c->threads, NULL, 0};
  kiln_status st = (kiln_status)kl_op_get(KL_OP_Add)->ref(&add_ctx);
  const kl_tensor *ln_in[3] = {&sum, c->in[2], c->n_in > 3 ? c->in[3] : NULL};
  kl_kernel_ctx ln = {c->node, ln_in[2] ? 3 : 2, 1, ln_in, c->out, c->e, c->threads, NULL, 0};
  if (st == KILN_OK) st = (kiln_status)kl_op_get(KL_OP_LayerNormalization)->ref(&ln);
  free(scratch);
  return st;
}

static void type_of(const kl_tensor *t, kl_type *out) {
  out->dtype = t->dtype;
  kl_type_set_shape(out, t->rank, t->dims);
}

/* The scores tensor Q Kt, in double, shaped as MatMul's inference says. */
static kiln_status scores_alloc(const kl_kernel_ctx *c, kl_tensor *s) {
  kl_type tq, tk, out;
  type_of(c->in[0], &tq);
  type_of(c->in[1], &tk);
  const kl_type *in[2] = {&tq, &tk};
  const void *data[2] = {c->in[0]->data, c->in[1]->data};
  kl_infer_ctx ic = {NULL, c->node, 2, 1, in, data, &out, c->e, true};
  kiln_status st = (kiln_status)kl_op_get(KL_OP_MatMul)->infer(&ic);
  if (st != KILN_OK) return st;
  int64_t numel;
  size_t bytes;
  if (!kl_type_numel(&out, &numel) || kl_mul_overflow_size((size_t)numel, sizeof(double), &bytes))
    return kl_fail(c->e, KILN_ERR_LIMIT, "the attention scores are too large");
  s->dtype = KL_F64;
  s->rank = out.rank;
  for (int i = 0; i < out.rank; i++) s->dims[i] = out.dims[i].size;
  s->data = malloc(bytes ? bytes : 1);
  if (!s->data)
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the attention scores "
                   "(%zu bytes)", bytes);
  return KILN_OK;
}

/* For zero_masked_rows: which rows of the scores (len values each) have no score
 * above -inf, into dead[0..rows-1]. */
static void find_masked_rows(const double *s, int64_t rows, int64_t len, bool *dead) {
  for (int64_t r = 0; r < rows; r++) {
    dead[r] = true;
    for (int64_t j = 0; j < len && dead[r]; j++) dead[r] = !(s[r * len + j] > -INFINITY);
  }
}

int kl_ref_kiln_attention(kl_kernel_ctx *c) {
  kl_tensor scores;
  kiln_status st = scores_alloc(c, &scores);
  if (st != KILN_OK) return st;
  kl_kernel_ctx mm = {c->node, 2, 1, c->in, (kl_tensor *[]){&scores}, c->e, c->threads, NULL, 0};
  st = (kiln_status)kl_op_get(KL_OP_MatMul)->ref(&mm);
  double scale = kl_attr_float(c->node, "scale", 1.0f);
  double *s = scores.data;
  int64_t n = kl_tensor_numel(&scores), len = scores.dims[scores.rank - 1];
  int64_t rows = len > 0 ? n / len : 0;
  for (int64_t i = 0; i < n; i++) s[i] *= scale;
  if (st == KILN_OK && c->n_in > 3 && c->in[3]) add_broadcast(&scores, c->in[3]);
  bool *dead = NULL;
  if (st == KILN_OK && kl_attr_int(c->node, "zero_masked_rows", 0) && rows > 0) {
    if (!(dead = malloc((size_t)rows)))
      st = kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the attention rows");
    else
      find_masked_rows(s, rows, len, dead);
  }
  kl_node softmax = {.op = KL_OP_Softmax, .name = c->node->name, .src = c->node->src};
  const kl_tensor *sm_in[1] = {&scores};
  kl_kernel_ctx sm = {&softmax, 1, 1, sm_in, (kl_tensor *[]){&scores}, c->e, c->threads, NULL, 0};
  if (st == KILN_OK) st = (kiln_status)kl_op_get(KL_OP_Softmax)->ref(&sm);
  for (int64_t r = 0; dead && r < rows; r++)
    if (dead[r])
      for (int64_t j = 0; j < len; j++) s[r * len + j] = 0;
  const kl_tensor *pv_in[2] = {&scores, c->in[2]};
  kl_kernel_ctx pv = {c->node, 2, 1, pv_in, c->out, c->e, c->threads, NULL, 0};
  if (st == KILN_OK) st = (kiln_status)kl_op_get(KL_OP_MatMul)->ref(&pv);
  free(dead);
  free(scores.data);
  return st;
}

kiln_status kl_mha_geometry(const kl_kernel_ctx *c, kl_mha_geom *m) {
  const kl_tensor *q = c->in[0];
  m->q = q;
  m->k = c->n_in > 1 ? c->in[1] : NULL;
  m->v = c->n_in > 2 ? c->in[2] : NULL;
  m->mask = c->n_in > 3 ? c->in[3] : NULL;
  m->heads = kl_attr_int(c->node, "num_heads", 0);
  if (q->rank != 3 || m->heads < 1 || (!m->k) != (!m->v) ||
      (m->k && (m->k->rank != 3 || m->v->rank != 3)))
    return kl_fail(c->e, KILN_ERR_SHAPE, "MultiHeadAttention needs rank-3 Q (and K, V) and "
                   "num_heads >= 1");
  m->batch = q->dims[0];
  m->seq = q->dims[1];
  m->qrow = q->dims[2];
  if (!m->k) {
    if (m->qrow % (3 * m->heads) != 0)
      return kl_fail(c->e, KILN_ERR_SHAPE, "packed QKV width %lld is not a multiple of 3 * "
                     "num_heads", (long long)m->qrow);
    m->d = m->dv = m->qrow / 3 / m->heads;
    m->keys = m->seq;
    m->krow = m->vrow = m->qrow;
    m->koff = m->heads * m->d;
    m->voff = 2 * m->heads * m->d;
    m->k = m->v = q;
  } else {
    if (m->qrow % m->heads != 0 || m->v->dims[2] % m->heads != 0 ||
        m->k->dims[2] != m->qrow || m->k->dims[0] != m->batch || m->v->dims[0] != m->batch ||
        m->k->dims[1] != m->v->dims[1])
      return kl_fail(c->e, KILN_ERR_SHAPE, "MultiHeadAttention: Q, K, V shapes disagree");
    m->d = m->qrow / m->heads;
    m->dv = m->v->dims[2] / m->heads;
    m->keys = m->k->dims[1];
    m->krow = m->qrow;
    m->vrow = m->v->dims[2];
    m->koff = m->voff = 0;
  }
  const int64_t full[4] = {m->batch, m->heads, m->seq, m->keys};
  for (int a = 0; a < 4; a++) m->mstride[a] = 0;
  if (m->mask) {
    if (m->mask->rank > 4)
      return kl_fail(c->e, KILN_ERR_SHAPE, "Mask has rank %d, expected at most 4",
                     m->mask->rank);
    int64_t s = 1;
    for (int i = m->mask->rank - 1; i >= 0; i--) {
      int a = 4 - m->mask->rank + i;
      int64_t d = m->mask->dims[i];
      if (d != 1 && d != full[a])
        return kl_fail(c->e, KILN_ERR_SHAPE, "Mask dim %d is %lld, expected 1 or %lld", i,
                       (long long)d, (long long)full[a]);
      m->mstride[a] = d == 1 ? 0 : s;
      s *= d;
    }
  }
  return KILN_OK;
}

int kl_ref_kiln_mha(kl_kernel_ctx *c) {
  kl_mha_geom m;
  kiln_status st = kl_mha_geometry(c, &m);
  if (st != KILN_OK) return st;
  size_t bytes;
  if (kl_mul_overflow_size((size_t)(m.keys + m.dv) + 1, sizeof(double), &bytes))
    return kl_fail(c->e, KILN_ERR_LIMIT, "MultiHeadAttention: too many keys");
  double *s = malloc(bytes);
  if (!s) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the scores");
  double *acc = s + m.keys;
  double scale = kl_attr_float(c->node, "scale", 1.0f);
  bool zero_rows = kl_attr_int(c->node, "zero_masked_rows", 0) != 0;
  kl_tensor *y = c->out[0];
  for (int64_t b = 0; b < m.batch; b++)
    for (int64_t h = 0; h < m.heads; h++)
      for (int64_t i = 0; i < m.seq; i++) {
        int64_t qi = (b * m.seq + i) * m.qrow + h * m.d;
        double max = -INFINITY;
        for (int64_t j = 0; j < m.keys; j++) {
          int64_t kj = (b * m.keys + j) * m.krow + m.koff + h * m.d;
          double dot = 0;
          for (int64_t e = 0; e < m.d; e++)
            dot += kl_ref_load(m.q->data, m.q->dtype, qi + e) *
                   kl_ref_load(m.k->data, m.k->dtype, kj + e);
          s[j] = dot * scale;
          if (m.mask) {
            int64_t mi = b * m.mstride[0] + h * m.mstride[1] + i * m.mstride[2] +
                         j * m.mstride[3];
            s[j] += kl_ref_load(m.mask->data, m.mask->dtype, mi);
          }
          if (s[j] > max) max = s[j];
        }
        double sum = 0;
        for (int64_t j = 0; j < m.keys; j++) sum += s[j] = exp(s[j] - max);
        for (int64_t e = 0; e < m.dv; e++) acc[e] = 0;
        bool dead = zero_rows && max == -INFINITY; /* no score above -inf: the row is 0 */
        for (int64_t j = 0; j < m.keys && !dead; j++) {
          int64_t vj = (b * m.keys + j) * m.vrow + m.voff + h * m.dv;
          double p = s[j] / sum;
          for (int64_t e = 0; e < m.dv; e++)
            acc[e] += p * kl_ref_load(m.v->data, m.v->dtype, vj + e);
        }
        int64_t yi = (b * m.seq + i) * m.heads * m.dv + h * m.dv;
        for (int64_t e = 0; e < m.dv; e++) kl_ref_store(y->data, y->dtype, yi + e, acc[e]);
      }
  free(s);
  return KILN_OK;
}
