/* Multi-head attention and the other transformer patterns around the fused ops.
 *
 * fuse_mha: a kiln.Attention whose Q, Kt and V are heads split out of token-major
 *   tensors and whose result is merged back,
 *     Q  = Transpose(Reshape(q [B, S, H*D], [B, S, H, D]), perm [0, 2, 1, 3])
 *     Kt = Transpose(Reshape(k [B, T, H*D], [B, T, H, D]), perm [0, 2, 3, 1])
 *     V  = Transpose(Reshape(v [B, T, H*Dv], [B, T, H, Dv]), perm [0, 2, 1, 3])
 *     y  = Reshape(Transpose(Attention(Q, Kt, V, Mask), perm [0, 2, 1, 3]), [B, S, H*Dv])
 *   becomes y = kiln.MultiHeadAttention(q, k, v, Mask) num_heads=H, with the scale.
 *   When the merge Reshapes to another shape (GPT-2: [B*S, H*Dv]) that Reshape stays,
 *   reading the fused node's [B, S, H*Dv].
 * fuse_qkv: a MultiHeadAttention whose q, k and v are three MatMul/FusedMatMul of one
 *   input by constant 2-D float32 weights of one shape [K, N] (each with a constant
 *   bias, or none) reads one projection by the weights concatenated to [K, 3N] (and
 *   the biases to [3N]): packed QKV, K and V absent. The same when q, k and v are
 *   the three equal parts of a Split of one tensor along its last axis (GPT-2's c_attn).
 * fuse_rmsnorm: x * (1 / Sqrt(ReduceMean(x^2) + eps)) * w over the trailing axes, with
 *   x^2 as Pow(x, 2) or Mul(x, x) and the reciprocal as Reciprocal(Sqrt), Div(1, Sqrt)
 *   (then Mul by x) or Div(x, Sqrt); the constant weight Mul optional and on either
 *   side. Becomes RMSNormalization(x, w) axis=-k epsilon=eps.
 * sink_reshape: an activation whose input is a Reshape of a Conv/Gemm/MatMul result
 *   (each read by nothing else) moves before the Reshape, so that fuse_act can take it
 *   into the matmul: Act(Reshape(y, s)) = Reshape(Act(y), s) for an elementwise Act.
 *
 * Every intermediate value of a pattern must be read only inside the pattern.
 */
#include "ir/fused.h"
#include "passes/rewrite.h"

#include <stdlib.h>
#include <string.h>

#define MAX_PATTERN 12

typedef struct match {
  int nodes[MAX_PATTERN];
  int n;
} match;

static void take(match *m, int node) {
  if (m->n < MAX_PATTERN) m->nodes[m->n++] = node;
}

static void remove_all(kl_graph *g, const match *m) {
  for (int i = 0; i < m->n; i++) kl_rw_remove(g, m->nodes[i]);
}

/* Node n's output 0 feeds only node `to` (and is not a graph output). */
static bool feeds_only(const kl_graph *g, int n, int to) {
  return n >= 0 && g->nodes[n].n_out >= 1 && kl_rw_sole_consumer(g, g->nodes[n].out[0]) == to;
}

/* The producer of v when it is of op `op` and v feeds only node `to`; else -1. */
static int producer_for(const kl_graph *g, int v, kl_op op, int to) {
  int p = kl_rw_producer(g, v);
  return p >= 0 && g->nodes[p].op == op && feeds_only(g, p, to) ? p : -1;
}

/* ---- multi-head attention ---- */

static const int64_t P0213[4] = {0, 2, 1, 3}, P0231[4] = {0, 2, 3, 1};

static bool perm_is(const kl_node *n, const int64_t *want) {
  const int64_t *p;
  if (kl_attr_ints(n, "perm", &p) != 4) return false;
  return memcmp(p, want, 4 * sizeof *p) == 0;
}

/* v = Transpose(Reshape(x [B, S, H*D], [B, S, H, D]), perm) read only by node `to`: x,
 * with H and D; -1 when v is not such a head split. */
static int split_heads(const kl_graph *g, int v, int to, const int64_t *perm, int64_t *heads,
                       int64_t *size, match *m) {
  int t = producer_for(g, v, KL_OP_Transpose, to);
  if (t < 0 || !perm_is(&g->nodes[t], perm)) return -1;
  int r = producer_for(g, g->nodes[t].in[0], KL_OP_Reshape, t);
  if (r < 0) return -1;
  int x = g->nodes[r].in[0];
  const kl_type *xt = &g->values[x].type, *rt = &g->values[g->nodes[r].out[0]].type;
  if (xt->rank != 3 || rt->rank != 4 || !kl_dim_equal(xt->dims[0], rt->dims[0]) ||
      !kl_dim_equal(xt->dims[1], rt->dims[1]) || rt->dims[2].size < 1 ||
      rt->dims[3].size < 1 || xt->dims[2].size != rt->dims[2].size * rt->dims[3].size)
    return -1;
  *heads = rt->dims[2].size;
  *size = rt->dims[3].size;
  take(m, t), take(m, r);
  return x;
}

/* Node a's output y [B, H, S, Dv] merged back, Reshape(Transpose(y, [0, 2, 1, 3]), s),
 * each read by nothing else. When s is [B, S, H*Dv], returns the Reshape (both go);
 * for another s (GPT-2 flattens to [B*S, H*Dv]) the Reshape stays, reading the fused
 * node's [B, S, H*Dv] in place of [B, S, H, Dv] (the same elements in the same order;
 * s must then hold no 0, which would copy a dim that changed): returns the Transpose
 * (it goes), with *keep set. -1 when no form matches. */
static int merge_heads(const kl_graph *g, int a, bool *keep, match *m) {
  int y = g->nodes[a].out[0];
  int t = kl_rw_sole_consumer(g, y);
  if (t < 0 || g->nodes[t].op != KL_OP_Transpose || !perm_is(&g->nodes[t], P0213)) return -1;
  int r = kl_rw_sole_consumer(g, g->nodes[t].out[0]);
  if (r < 0 || g->nodes[r].op != KL_OP_Reshape || g->nodes[r].in[0] != g->nodes[t].out[0])
    return -1;
  const kl_type *yt = &g->values[y].type, *rt = &g->values[g->nodes[r].out[0]].type;
  if (yt->rank != 4 || yt->dims[1].size < 1 || yt->dims[3].size < 1) return -1;
  *keep = rt->rank != 3 || !kl_dim_equal(rt->dims[0], yt->dims[0]) ||
          !kl_dim_equal(rt->dims[1], yt->dims[2]) ||
          rt->dims[2].size != yt->dims[1].size * yt->dims[3].size;
  if (!*keep) {
    take(m, t), take(m, r);
    return r;
  }
  const kl_value *shape = kl_rw_const(g, g->nodes[r].in[1]);
  int64_t count;
  if (!shape || !kl_type_numel(&shape->type, &count)) return -1;
  for (int64_t i = 0; i < count && kl_attr_int(&g->nodes[r], "allowzero", 0) == 0; i++)
    if (kl_load_i64(shape->data, shape->type.dtype, (size_t)i) == 0) return -1;
  take(m, t);
  return t;
}

static kiln_status mha_at(kl_graph *g, int a, int *changed, kl_err *e) {
  const kl_node *n = &g->nodes[a];
  if (n->n_in < 3 || !kl_dtype_is_float(g->values[n->out[0]].type.dtype)) return KILN_OK;
  match m = {.n = 0};
  int64_t hq, dq, hk, dk, hv, dv;
  int q = split_heads(g, n->in[0], a, P0213, &hq, &dq, &m);
  int k = q >= 0 ? split_heads(g, n->in[1], a, P0231, &hk, &dk, &m) : -1;
  int v = k >= 0 ? split_heads(g, n->in[2], a, P0213, &hv, &dv, &m) : -1;
  bool keep = false;
  int r = v >= 0 ? merge_heads(g, a, &keep, &m) : -1;
  if (r < 0 || hq != hk || hq != hv || dq != dk) return KILN_OK;
  float scale = kl_attr_float(n, "scale", 1.0f);
  int ids[4] = {q, k, v, n->n_in > 3 ? n->in[3] : KL_ABSENT};
  int y = g->nodes[r].out[0];
  if (keep) { /* the Transpose's output, read by the Reshape, is [B, S, H*Dv] now */
    kl_type *yt = &g->values[y].type;
    const kl_type *at = &g->values[n->out[0]].type;
    yt->rank = 3;
    yt->dims[0] = at->dims[0];
    yt->dims[1] = at->dims[2];
    yt->dims[2] = (kl_dim){at->dims[1].size * at->dims[3].size, -1};
  }
  kiln_status st = kl_rw_become(g, a, KL_OP_KilnMultiHeadAttention, 4, ids, e);
  if (st == KILN_OK) st = kl_node_set_int(g, a, "num_heads", hq, e);
  if (st == KILN_OK) st = kl_node_set_float(g, a, "scale", scale, e);
  if (st != KILN_OK) return st;
  remove_all(g, &m);
  kl_rw_take_output(g, a, 0, y);
  (*changed)++;
  return KILN_OK;
}

kiln_status kl_pass_fuse_mha(kl_graph *g, const kl_pass_config *cfg, int *changed, kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++)
    if (g->nodes[i].op == KL_OP_KilnAttention && g->nodes[i].n_out == 1)
      st = mha_at(g, i, changed, e);
  return st == KILN_OK ? kl_rw_finish(g, *changed, e) : st;
}

/* ---- packed QKV ---- */

/* Node p is MatMul(a, W) or FusedMatMul(a, W, Bias?) with a constant float32 W [K, N]
 * and Bias [N], no Sum and no activation, read only by node `to`. */
static bool plain_projection(const kl_graph *g, int p, int to) {
  if (p < 0 || !feeds_only(g, p, to)) return false;
  const kl_node *n = &g->nodes[p];
  if (n->op != KL_OP_MatMul && n->op != KL_OP_KilnFusedMatMul) return false;
  if (n->n_in > 3 || kl_node_attr(n, "activation")) return false;
  const kl_value *w = kl_rw_const(g, n->in[1]);
  if (!w || w->type.rank != 2 || w->type.dtype != KL_F32 || g->values[n->in[0]].type.rank < 2)
    return false;
  if (n->n_in < 3 || n->in[2] == KL_ABSENT) return true;
  const kl_value *b = kl_rw_const(g, n->in[2]);
  return b && b->type.rank == 1 && b->type.dtype == KL_F32 &&
         b->type.dims[0].size == w->type.dims[1].size;
}

static bool has_bias(const kl_node *n) { return n->n_in > 2 && n->in[2] != KL_ABSENT; }

/* The three weights (or biases, slot 2) of nodes p side by side: rows of n values each,
 * giving rows of 3n. */
static float *concat_rows(const kl_graph *g, const int *p, int slot, int64_t rows, int64_t n) {
  size_t count, bytes;
  if (kl_mul_overflow_size((size_t)rows, (size_t)n, &count) ||
      kl_mul_overflow_size(count, 3 * sizeof(float), &bytes))
    return NULL;
  float *out = malloc(bytes ? bytes : 1);
  for (int k = 0; out && k < 3; k++) {
    const float *src = g->values[g->nodes[p[k]].in[slot]].data;
    for (int64_t r = 0; r < rows; r++)
      memcpy(out + r * 3 * n + k * n, src + r * n, sizeof(float) * (size_t)n);
  }
  return out;
}

/* q, k, v are the outputs 0, 1, 2 of one Split in three equal parts along the last
 * axis of a rank-3 X, each read only by node a (GPT-2): a reads X as packed QKV. */
static bool split_packed(kl_graph *g, int a, int *changed) {
  const kl_node *n = &g->nodes[a];
  int s = kl_rw_producer(g, n->in[0]);
  if (s < 0 || g->nodes[s].op != KL_OP_Split || g->nodes[s].n_out != 3) return false;
  const kl_node *sn = &g->nodes[s];
  const kl_type *x = &g->values[sn->in[0]].type;
  int64_t axis = kl_attr_int(sn, "axis", 0);
  if (x->rank != 3 || (axis != 2 && axis != -1) || x->dims[2].size < 3) return false;
  for (int k = 0; k < 3; k++) {
    const kl_type *t = &g->values[sn->out[k]].type;
    if (sn->out[k] != n->in[k] || kl_rw_sole_consumer(g, sn->out[k]) != a || t->rank != 3 ||
        t->dims[2].size * 3 != x->dims[2].size)
      return false;
  }
  kl_node *an = &g->nodes[a];
  an->in[0] = sn->in[0];
  an->in[1] = an->in[2] = KL_ABSENT;
  while (an->n_in > 1 && an->in[an->n_in - 1] == KL_ABSENT) an->n_in--;
  kl_rw_remove(g, s);
  (*changed)++;
  return true;
}

static kiln_status qkv_at(kl_graph *g, int a, int *changed, kl_err *e) {
  const kl_node *n = &g->nodes[a];
  if (n->n_in < 3 || n->in[1] == KL_ABSENT || n->in[2] == KL_ABSENT) return KILN_OK;
  if (split_packed(g, a, changed)) return KILN_OK;
  int p[3];
  for (int k = 0; k < 3; k++) {
    p[k] = kl_rw_producer(g, n->in[k]);
    if (!plain_projection(g, p[k], a)) return KILN_OK;
  }
  const kl_node *p0 = &g->nodes[p[0]];
  const kl_type *w0 = &g->values[p0->in[1]].type;
  for (int k = 1; k < 3; k++) {
    const kl_node *pk = &g->nodes[p[k]];
    const kl_type *wk = &g->values[pk->in[1]].type;
    if (pk->op != p0->op || pk->in[0] != p0->in[0] || has_bias(pk) != has_bias(p0) ||
        wk->dims[0].size != w0->dims[0].size || wk->dims[1].size != w0->dims[1].size)
      return KILN_OK;
  }
  int64_t rows = w0->dims[0].size, cols = w0->dims[1].size;
  bool bias = has_bias(p0);
  float *w = concat_rows(g, p, 1, rows, cols), *b = bias ? concat_rows(g, p, 2, 1, cols) : NULL;
  if (!w || (bias && !b)) {
    free(w);
    free(b);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory packing the QKV weights of '%s'",
                   n->name);
  }
  int wid = kl_rw_add_const(g, "qkv_weight", KL_F32, 2, (int64_t[]){rows, 3 * cols}, w, e);
  if (wid < 0) {
    free(b);
    return e->code;
  }
  int bid = bias ? kl_rw_add_const(g, "qkv_bias", KL_F32, 1, (int64_t[]){3 * cols}, b, e)
                 : KL_ABSENT;
  if (bias && bid < 0) return e->code;
  kiln_status st = kl_rw_set_input(g, p[0], 1, wid, e);
  if (st == KILN_OK && bias) st = kl_rw_set_input(g, p[0], 2, bid, e);
  if (st == KILN_OK) st = kl_rw_set_input(g, a, 1, KL_ABSENT, e);
  if (st == KILN_OK) st = kl_rw_set_input(g, a, 2, KL_ABSENT, e);
  if (st != KILN_OK) return st;
  kl_rw_remove(g, p[1]);
  kl_rw_remove(g, p[2]);
  kl_type *out = &g->values[g->nodes[p[0]].out[0]].type; /* [..., N] is [..., 3N] now */
  if (out->rank >= 1) out->dims[out->rank - 1] = (kl_dim){3 * cols, -1};
  (*changed)++;
  return KILN_OK;
}

kiln_status kl_pass_fuse_qkv(kl_graph *g, const kl_pass_config *cfg, int *changed, kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++)
    if (g->nodes[i].op == KL_OP_KilnMultiHeadAttention && g->nodes[i].n_out == 1)
      st = qkv_at(g, i, changed, e);
  return st == KILN_OK ? kl_rw_finish(g, *changed, e) : st;
}

/* ---- RMSNormalization ---- */

/* ReduceMean node r over the last k axes of its input (keepdims): k, else 0. */
static int trailing_axes(const kl_graph *g, int r) {
  const kl_node *n = &g->nodes[r];
  const kl_type *x = &g->values[n->in[0]].type;
  const kl_value *axes = n->n_in > 1 ? kl_rw_const(g, n->in[1]) : NULL;
  int64_t count;
  if (x->rank < 1 || !axes || kl_attr_int(n, "keepdims", 1) != 1 ||
      !kl_type_numel(&axes->type, &count) || count < 1 || count > x->rank)
    return 0;
  bool seen[KL_MAX_RANK] = {false};
  for (int64_t i = 0; i < count; i++) {
    int64_t ax = kl_load_i64(axes->data, axes->type.dtype, (size_t)i);
    if (ax < 0) ax += x->rank;
    if (ax < x->rank - count || ax >= x->rank || seen[ax]) return 0;
    seen[ax] = true;
  }
  return (int)count;
}

/* From Sqrt node sq down to x * rsqrt: the node computing the product, with x set;
 * -1 when no form matches. */
static int times_rsqrt(const kl_graph *g, int sq, int *x, match *m) {
  int c = kl_rw_sole_consumer(g, g->nodes[sq].out[0]);
  if (c < 0 || g->nodes[c].n_in > 2) return -1;
  const kl_node *cn = &g->nodes[c];
  int r = -1; /* the node computing 1 / Sqrt */
  if (cn->op == KL_OP_Reciprocal)
    r = c;
  else if (cn->op == KL_OP_Div && cn->in[1] == g->nodes[sq].out[0] &&
           kl_rw_scalar_near(g, cn->in[0], 1.0))
    r = c;
  else if (cn->op == KL_OP_Div && cn->in[1] == g->nodes[sq].out[0]) {
    *x = cn->in[0];
    return c;
  }
  if (r < 0) return -1;
  int mul = kl_rw_sole_consumer(g, g->nodes[r].out[0]);
  if (mul < 0 || g->nodes[mul].op != KL_OP_Mul) return -1;
  *x = kl_rw_other_input(&g->nodes[mul], g->nodes[r].out[0]);
  take(m, r);
  return *x >= 0 ? mul : -1;
}

static kiln_status rmsnorm_at(kl_graph *g, int sq, int *changed, kl_err *e) {
  match m = {.n = 0};
  int add = producer_for(g, g->nodes[sq].in[0], KL_OP_Add, sq);
  double eps = -1;
  int var = -1;
  for (int i = 0; add >= 0 && i < 2 && var < 0; i++)
    if (kl_rw_scalar(g, g->nodes[add].in[1 - i], &eps)) var = g->nodes[add].in[i];
  int mean = producer_for(g, var, KL_OP_ReduceMean, add);
  int k = mean >= 0 ? trailing_axes(g, mean) : 0;
  int p = k > 0 ? kl_rw_producer(g, g->nodes[mean].in[0]) : -1;
  if (!feeds_only(g, p, mean) || eps < 0 || (double)(float)eps != eps) return KILN_OK;
  int x = -1, last = times_rsqrt(g, sq, &x, &m);
  const kl_node *pn = &g->nodes[p];
  bool square = (pn->op == KL_OP_Pow && pn->in[0] == x && kl_rw_scalar_near(g, pn->in[1], 2)) ||
                (pn->op == KL_OP_Mul && pn->in[0] == x && pn->in[1] == x);
  if (last < 0 || !square || !kl_dtype_is_float(g->values[x].type.dtype)) return KILN_OK;
  take(&m, sq), take(&m, add), take(&m, mean), take(&m, p);
  const kl_type *xt = &g->values[x].type;
  int w = KL_ABSENT, next = kl_rw_sole_consumer(g, g->nodes[last].out[0]);
  if (next >= 0 && g->nodes[next].op == KL_OP_Mul && g->nodes[next].n_in == 2) {
    int c = kl_rw_other_input(&g->nodes[next], g->nodes[last].out[0]);
    const kl_value *cv = kl_rw_const(g, c);
    if (cv && cv->type.rank <= k && kl_rw_fits(&cv->type, xt)) {
      take(&m, last);
      last = next;
      w = c;
    }
  }
  if (w == KL_ABSENT) {
    double one = 1;
    w = kl_rw_add_vector(g, "rmsnorm_scale", xt->dtype, 1, &one, 1, e);
    if (w < 0) return e->code;
  }
  int ids[2] = {x, w};
  kiln_status st = kl_rw_become(g, last, KL_OP_RMSNormalization, 2, ids, e);
  if (st == KILN_OK) st = kl_node_set_int(g, last, "axis", -k, e);
  if (st == KILN_OK) st = kl_node_set_float(g, last, "epsilon", (float)eps, e);
  if (st == KILN_OK) remove_all(g, &m);
  *changed += st == KILN_OK;
  return st;
}

kiln_status kl_pass_fuse_rmsnorm(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                 kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++)
    if (g->nodes[i].op == KL_OP_Sqrt && g->nodes[i].n_out == 1 && g->nodes[i].n_in == 1)
      st = rmsnorm_at(g, i, changed, e);
  return st == KILN_OK ? kl_rw_finish(g, *changed, e) : st;
}

/* ---- activation before Reshape ---- */

/* Single-input elementwise activations that fuse_act can take into a matmul. */
static bool sinkable(kl_op op) {
  switch (op) {
  case KL_OP_Relu: case KL_OP_Sigmoid: case KL_OP_Tanh: case KL_OP_HardSwish:
  case KL_OP_Mish: case KL_OP_LeakyRelu: case KL_OP_Elu: case KL_OP_HardSigmoid:
  case KL_OP_Gelu:
    return true;
  default:
    return false;
  }
}

static bool matmul_like(const kl_node *n) {
  bool fused = n->op == KL_OP_KilnFusedGemm || n->op == KL_OP_KilnFusedMatMul ||
               n->op == KL_OP_KilnFusedConv;
  return n->op == KL_OP_Gemm || n->op == KL_OP_MatMul || n->op == KL_OP_Conv ||
         (fused && !kl_node_attr(n, "activation"));
}

kiln_status kl_pass_sink_reshape(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                 kl_err *e) {
  (void)cfg;
  for (int i = 0; i < g->n_nodes; i++) {
    kl_node *act = &g->nodes[i];
    if (!sinkable(act->op) || act->n_in != 1 || act->n_out != 1) continue;
    int r = producer_for(g, act->in[0], KL_OP_Reshape, i);
    int p = r >= 0 ? kl_rw_producer(g, g->nodes[r].in[0]) : -1;
    if (p < 0 || !matmul_like(&g->nodes[p]) || !feeds_only(g, p, r)) continue;
    /* y -> Reshape -> z -> Act -> o   becomes   y -> Act -> z -> Reshape -> o */
    kl_node *rn = &g->nodes[r];
    int y = rn->in[0], z = rn->out[0], o = act->out[0];
    act->in[0] = y;
    rn->in[0] = z;
    kl_rw_take_output(g, i, 0, z);
    kl_rw_take_output(g, r, 0, o);
    g->values[z].type = g->values[y].type; /* z holds Act(y) now */
    (*changed)++;
  }
  return kl_rw_finish(g, *changed, e);
}
