/* Transformer patterns, in the forms PyTorch and Hugging Face exports write.
 *
 * fuse_layernorm: the decomposed LayerNormalization
 *     m = ReduceMean(x, trailing axes); d = Sub(x, m)
 *     v = ReduceMean(Pow(d, 2) or Mul(d, d), same axes); s = Sqrt(Add(v, eps))
 *     y = Add(Mul(Div(d, s), gamma), beta)          (Mul and Add optional, constant)
 *   becomes LayerNormalization(x, gamma, beta) axis=-k epsilon=eps.
 * fuse_gelu: x * 0.5 * (1 + Erf(x / sqrt(2)))  and
 *   x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))  (the Muls by x and by 0.5
 *   in any grouping) become Gelu(x), approximate "none" or "tanh".
 * fuse_skip_layernorm: LayerNormalization(Add(a, b)) with a and b of the same shape
 *   becomes kiln.SkipLayerNorm(a, b, scale, B); when something else reads the sum it
 *   becomes the node's second output.
 * fuse_attention: MatMul(Q, Kt) [Div or Mul by a constant] [Add(mask)] -> Softmax
 *   over the last axis -> MatMul(., V) becomes kiln.Attention(Q, Kt, V, mask) scale=s.
 *   Q and Kt may each be scaled by a constant first (torch 2 scales both by D^-1/4): the
 *   scale takes both. Two mask Adds (T5: position bias, then padding mask) become one
 *   Add of the two masks, read as the Mask. The guard torch.onnx writes after the
 *   softmax of scaled_dot_product_attention with a boolean mask, Where(IsNaN(p), 0, p)
 *   (a row whose every key is masked gives 0, not NaN), is taken in: zero_masked_rows=1.
 *
 * Every intermediate value of a pattern must be read only inside the pattern.
 */
#include "passes/pattern.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Node n is op(a, c) or, when commutative, op(c, a), c the constant ~want: returns a,
 * else -1. */
static int with_scalar(const kl_graph *g, int n, kl_op op, double want) {
  const kl_node *node = &g->nodes[n];
  if (node->op != op || node->n_in != 2) return -1;
  if (kl_rw_scalar_near(g, node->in[1], want)) return node->in[0];
  bool commutes = op == KL_OP_Add || op == KL_OP_Mul;
  if (commutes && kl_rw_scalar_near(g, node->in[0], want)) return node->in[1];
  return -1;
}

/* The producer of v when it is of op `op` and v feeds only node `to`; else -1. */
static int producer_for(const kl_graph *g, int v, kl_op op, int to) {
  int p = kl_rw_producer(g, v);
  return p >= 0 && g->nodes[p].op == op && feeds_only(g, p, to) ? p : -1;
}

/* ---- LayerNormalization ---- */

/* ReduceMean node r over the last k axes of its input (keepdims): k, else 0. */
static int trailing_axes(const kl_graph *g, int r) {
  const kl_node *n = &g->nodes[r];
  const kl_type *x = &g->values[n->in[0]].type;
  const kl_value *axes = n->n_in > 1 ? kl_rw_const(g, n->in[1]) : NULL;
  int64_t count;
  if (n->op != KL_OP_ReduceMean || x->rank < 1 || !axes || kl_attr_int(n, "keepdims", 1) != 1 ||
      !kl_type_numel(&axes->type, &count) || count < 1 || count > x->rank)
    return 0;
  bool seen[KL_MAX_RANK] = {false};
  for (int64_t i = 0; i < count; i++) {
    int64_t a = kl_load_i64(axes->data, axes->type.dtype, (size_t)i);
    if (a < 0) a += x->rank;
    if (a < x->rank - count || a >= x->rank || seen[a]) return 0;
    seen[a] = true;
  }
  return (int)count;
}

/* den = Sqrt(Add(ReduceMean(Pow(d, 2) | Mul(d, d)), eps)) over k trailing axes. */
static bool match_stddev(const kl_graph *g, int div, int d, int k, double *eps, match *m) {
  int sq = producer_for(g, g->nodes[div].in[1], KL_OP_Sqrt, div);
  int add = sq >= 0 ? producer_for(g, g->nodes[sq].in[0], KL_OP_Add, sq) : -1;
  if (add < 0) return false;
  const kl_node *a = &g->nodes[add];
  int var = -1;
  for (int i = 0; i < 2 && var < 0; i++)
    if (kl_rw_scalar(g, a->in[1 - i], eps)) var = a->in[i];
  int mean = producer_for(g, var, KL_OP_ReduceMean, add);
  if (mean < 0 || trailing_axes(g, mean) != k) return false;
  int p = kl_rw_producer(g, g->nodes[mean].in[0]);
  if (!feeds_only(g, p, mean)) return false;
  const kl_node *pn = &g->nodes[p];
  bool square = (pn->op == KL_OP_Pow && pn->in[0] == d && kl_rw_scalar_near(g, pn->in[1], 2)) ||
                (pn->op == KL_OP_Mul && pn->in[0] == d && pn->in[1] == d);
  if (!square || *eps < 0 || (double)(float)*eps != *eps) return false;
  take(m, sq), take(m, add), take(m, mean), take(m, p);
  return true;
}

/* Constant operand of a Mul/Add pattern step with node `last`'s output; -1 if none. */
static int affine_step(const kl_graph *g, int last, kl_op op, int *next) {
  *next = kl_rw_sole_consumer(g, g->nodes[last].out[0]);
  if (*next < 0 || g->nodes[*next].op != op || g->nodes[*next].n_in != 2) return -1;
  const kl_node *n = &g->nodes[*next];
  int c = n->in[0] == g->nodes[last].out[0] ? n->in[1] : n->in[0];
  return kl_rw_const(g, c) && kl_dtype_is_float(g->values[c].type.dtype) ? c : -1;
}

/* A scale of ones, [1], for a pattern without its Mul by gamma. */
static int ones_scale(kl_graph *g, int x, kl_err *e) {
  double one = 1;
  return kl_rw_add_vector(g, "layernorm_scale", g->values[x].type.dtype, 1, &one, 1, e);
}

static kiln_status layernorm_at(kl_graph *g, int div, int *changed, kl_err *e) {
  const kl_node *n = &g->nodes[div];
  int sub = n->op == KL_OP_Div && n->n_in == 2 ? kl_rw_producer(g, n->in[0]) : -1;
  if (sub < 0 || g->nodes[sub].op != KL_OP_Sub) return KILN_OK;
  int d = g->nodes[sub].out[0], x = g->nodes[sub].in[0];
  int mean = producer_for(g, g->nodes[sub].in[1], KL_OP_ReduceMean, sub);
  int k = mean >= 0 && g->nodes[mean].in[0] == x ? trailing_axes(g, mean) : 0;
  if (k == 0 || kl_rw_is_output(g, d) || !kl_dtype_is_float(g->values[x].type.dtype)) return KILN_OK;
  match m = {.n = 0};
  double eps;
  if (!match_stddev(g, div, d, k, &eps, &m) || kl_rw_uses(g, d) != (g->nodes[m.nodes[3]].op == KL_OP_Mul ? 3 : 2))
    return KILN_OK;
  take(&m, sub), take(&m, mean);
  int last = div, next, gamma = affine_step(g, div, KL_OP_Mul, &next), beta = KL_ABSENT;
  if (gamma >= 0) {
    take(&m, last);
    last = next;
    int b = affine_step(g, last, KL_OP_Add, &next);
    if (b >= 0) {
      take(&m, last);
      last = next;
      beta = b;
    }
  } else if ((gamma = ones_scale(g, x, e)) < 0) {
    return e->code;
  }
  const kl_type *xt = &g->values[x].type;
  if (!kl_rw_fits(&g->values[gamma].type, xt) ||
      (beta != KL_ABSENT && !kl_rw_fits(&g->values[beta].type, xt)))
    return KILN_OK;
  int ids[3] = {x, gamma, beta};
  kiln_status st = kl_rw_become(g, last, KL_OP_LayerNormalization, 3, ids, e);
  if (st == KILN_OK) st = kl_node_set_int(g, last, "axis", -k, e);
  if (st == KILN_OK) st = kl_node_set_float(g, last, "epsilon", (float)eps, e);
  if (st == KILN_OK) remove_all(g, &m);
  *changed += st == KILN_OK;
  return st;
}

kiln_status kl_pass_fuse_layernorm(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                   kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++)
    if (g->nodes[i].op == KL_OP_Div && g->nodes[i].n_out == 1) st = layernorm_at(g, i, changed, e);
  return st == KILN_OK ? kl_rw_finish(g, *changed, e) : st;
}

/* ---- GELU ---- */

/* The end of x * 0.5 * c, c the output of node `cnode`: the node computing the product
 * (its other nodes added to m), or -1. */
static int half_product(const kl_graph *g, int cnode, int x, match *m) {
  int c = g->nodes[cnode].out[0];
  int m1 = kl_rw_sole_consumer(g, c);
  if (m1 < 0 || g->nodes[m1].op != KL_OP_Mul || g->nodes[m1].n_in != 2) return -1;
  int t = kl_rw_other_input(&g->nodes[m1], c);
  int m2 = kl_rw_sole_consumer(g, g->nodes[m1].out[0]);
  if (t == x && m2 >= 0 && with_scalar(g, m2, KL_OP_Mul, 0.5) == g->nodes[m1].out[0]) {
    take(m, m1);
    return m2;
  }
  if (kl_rw_scalar_near(g, t, 0.5) && m2 >= 0 && g->nodes[m2].op == KL_OP_Mul &&
      kl_rw_other_input(&g->nodes[m2], g->nodes[m1].out[0]) == x) {
    take(m, m1);
    return m2;
  }
  int h = kl_rw_producer(g, t);
  if (h >= 0 && feeds_only(g, h, m1) && with_scalar(g, h, KL_OP_Mul, 0.5) == x) {
    take(m, h);
    return m1;
  }
  return -1;
}

/* 1 + f, f the output of node fn: the Add node, or -1. */
static int plus_one(const kl_graph *g, int fn) {
  int add = kl_rw_sole_consumer(g, g->nodes[fn].out[0]);
  return add >= 0 && with_scalar(g, add, KL_OP_Add, 1.0) == g->nodes[fn].out[0] ? add : -1;
}

/* Erf(x / sqrt(2)) at node erf: x, else -1. */
static int erf_arg(const kl_graph *g, int erf, match *m) {
  int p = kl_rw_producer(g, g->nodes[erf].in[0]);
  if (!feeds_only(g, p, erf)) return -1;
  int x = with_scalar(g, p, KL_OP_Div, sqrt(2.0));
  if (x < 0) x = with_scalar(g, p, KL_OP_Mul, sqrt(0.5));
  if (x >= 0) take(m, p);
  return x;
}

/* v is x cubed for node `to` alone: Pow(x, 3), or x * (x * x) in either order. */
static bool is_cube(const kl_graph *g, int v, int x, int to, match *m) {
  int p = kl_rw_producer(g, v);
  if (!feeds_only(g, p, to)) return false;
  const kl_node *n = &g->nodes[p];
  if (n->op == KL_OP_Pow && n->in[0] == x && kl_rw_scalar_near(g, n->in[1], 3)) {
    take(m, p);
    return true;
  }
  int sq = n->op == KL_OP_Mul ? kl_rw_producer(g, kl_rw_other_input(n, x)) : -1;
  if (sq < 0 || !feeds_only(g, sq, p) || g->nodes[sq].op != KL_OP_Mul ||
      g->nodes[sq].in[0] != x || g->nodes[sq].in[1] != x)
    return false;
  take(m, p), take(m, sq);
  return true;
}

/* Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)) at node th: x, else -1. */
static int tanh_arg(const kl_graph *g, int th, match *m) {
  int s = kl_rw_producer(g, g->nodes[th].in[0]);
  int a = feeds_only(g, s, th) ? with_scalar(g, s, KL_OP_Mul, sqrt(2.0 / M_PI)) : -1;
  int an = a >= 0 ? producer_for(g, a, KL_OP_Add, s) : -1;
  if (an < 0) return -1;
  for (int i = 0; i < 2; i++) {
    int x = g->nodes[an].in[i], mn = producer_for(g, g->nodes[an].in[1 - i], KL_OP_Mul, an);
    int cube = mn >= 0 ? with_scalar(g, mn, KL_OP_Mul, 0.044715) : -1;
    if (cube < 0 || !is_cube(g, cube, x, mn, m)) continue;
    take(m, s), take(m, an), take(m, mn);
    return x;
  }
  return -1;
}

static kiln_status gelu_at(kl_graph *g, int f, int *changed, kl_err *e) {
  match m = {.n = 0};
  bool is_tanh = g->nodes[f].op == KL_OP_Tanh;
  int x = is_tanh ? tanh_arg(g, f, &m) : erf_arg(g, f, &m);
  int add = x >= 0 ? plus_one(g, f) : -1;
  int last = add >= 0 ? half_product(g, add, x, &m) : -1;
  if (last < 0 || !kl_dtype_is_float(g->values[x].type.dtype)) return KILN_OK;
  take(&m, f), take(&m, add);
  kiln_status st = kl_rw_become(g, last, KL_OP_Gelu, 1, &x, e);
  if (st == KILN_OK && is_tanh) st = kl_node_set_string(g, last, "approximate", "tanh", e);
  if (st == KILN_OK) remove_all(g, &m);
  *changed += st == KILN_OK;
  return st;
}

kiln_status kl_pass_fuse_gelu(kl_graph *g, const kl_pass_config *cfg, int *changed,
                              kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    kl_op op = g->nodes[i].op;
    if ((op == KL_OP_Erf || op == KL_OP_Tanh) && g->nodes[i].n_out == 1)
      st = gelu_at(g, i, changed, e);
  }
  return st == KILN_OK ? kl_rw_finish(g, *changed, e) : st;
}

/* ---- SkipLayerNorm ---- */

static kiln_status skip_layernorm_at(kl_graph *g, int ln, int *changed, kl_err *e) {
  const kl_node *n = &g->nodes[ln];
  for (int k = 1; k < n->n_out; k++)
    if (n->out[k] >= 0 && kl_rw_uses(g, n->out[k]) > 0) return KILN_OK;
  int s = n->in[0], add = kl_rw_producer(g, s);
  if (add < 0 || g->nodes[add].op != KL_OP_Add || g->nodes[add].n_in != 2) return KILN_OK;
  int a = g->nodes[add].in[0], b = g->nodes[add].in[1];
  const kl_type *ta = &g->values[a].type, *tb = &g->values[b].type;
  if (!kl_rw_same_shape(ta, tb) || ta->dtype != tb->dtype) return KILN_OK;
  bool keep_sum = kl_rw_uses(g, s) > 1;
  int ids[4] = {a, b, n->in[1], n->n_in > 2 ? n->in[2] : KL_ABSENT};
  int64_t axis = kl_attr_int(n, "axis", -1);
  float eps = kl_attr_float(n, "epsilon", 1e-5f);
  g->nodes[ln].n_out = 1;
  kiln_status st = kl_rw_become(g, ln, KL_OP_KilnSkipLayerNorm, 4, ids, e);
  if (st == KILN_OK) st = kl_node_set_int(g, ln, "axis", axis, e);
  if (st == KILN_OK) st = kl_node_set_float(g, ln, "epsilon", eps, e);
  if (st != KILN_OK) return st;
  kl_rw_remove(g, add);
  if (keep_sum) st = kl_rw_add_output(g, ln, s, e);
  (*changed)++;
  return st;
}

kiln_status kl_pass_fuse_skip_layernorm(kl_graph *g, const kl_pass_config *cfg,
                                        int *changed, kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++)
    if (g->nodes[i].op == KL_OP_LayerNormalization && g->nodes[i].n_out >= 1)
      st = skip_layernorm_at(g, i, changed, e);
  return st == KILN_OK ? kl_rw_finish(g, *changed, e) : st;
}

/* ---- attention ---- */

/* Softmax node sm over the last axis of its input. */
static bool last_axis_softmax(const kl_graph *g, int sm) {
  const kl_node *n = &g->nodes[sm];
  int rank = g->values[n->in[0]].type.rank;
  int64_t axis = kl_attr_int(n, "axis", -1);
  return n->op == KL_OP_Softmax && rank >= 1 && (axis == -1 || axis == rank - 1);
}

/* Walks up from the softmax input: up to two [Add(mask)] (T5 adds its position bias,
 * then the padding mask) or one windowed mask (below) <- [Div/Mul scale] <- MatMul(Q,
 * Kt). mask[0..1]: the masks found; mask[2..3]: 1 when that mask's leading dim (of size
 * 1) is to be dropped. */
static int scores_matmul(const kl_graph *g, int v, int to, int *mask, double *scale, match *m);

/* Swin's shifted windows: Reshape(Add(Reshape(s, [1, dims of s]), c), dims of s) with c a
 * constant of rank 5 and leading dim 1 (or of a lower rank) adds c, seen without its
 * leading 1, to s. At the outer Reshape p (read only by the walk's last node): from s, c
 * recorded as a mask whose leading dim is to be dropped. */
static int windowed_mask(const kl_graph *g, int p, int *mask, double *scale, match *m) {
  int add = producer_for(g, g->nodes[p].in[0], KL_OP_Add, p);
  if (add < 0 || mask[1] != KL_ABSENT || g->nodes[add].n_in != 2) return -1;
  for (int i = 0; i < 2; i++) {
    int r0 = producer_for(g, g->nodes[add].in[i], KL_OP_Reshape, add);
    const kl_value *c = kl_rw_const(g, g->nodes[add].in[1 - i]);
    if (r0 < 0 || !c || c->type.rank > 5 || (c->type.rank == 5 && c->type.dims[0].size != 1))
      continue;
    int sv = g->nodes[r0].in[0];
    const kl_type *st = &g->values[sv].type, *wide = &g->values[g->nodes[r0].out[0]].type;
    if (!kl_rw_same_shape(st, &g->values[g->nodes[p].out[0]].type) ||
        wide->rank != st->rank + 1 || wide->dims[0].size != 1 ||
        !kl_rw_fits(&c->type, &g->values[g->nodes[add].out[0]].type))
      continue;
    bool same = true;
    for (int d = 0; d < st->rank; d++) same &= kl_dim_equal(st->dims[d], wide->dims[d + 1]);
    if (!same) continue;
    int k = mask[0] == KL_ABSENT ? 0 : 1;
    mask[k] = g->nodes[add].in[1 - i];
    mask[2 + k] = c->type.rank == st->rank + 1;
    take(m, p), take(m, add), take(m, r0);
    return scores_matmul(g, sv, r0, mask, scale, m);
  }
  return -1;
}

static int scores_matmul(const kl_graph *g, int v, int to, int *mask, double *scale, match *m) {
  int p = kl_rw_producer(g, v);
  if (p >= 0 && g->nodes[p].op == KL_OP_Reshape && feeds_only(g, p, to))
    return windowed_mask(g, p, mask, scale, m);
  if (p >= 0 && g->nodes[p].op == KL_OP_Add && feeds_only(g, p, to) && mask[1] == KL_ABSENT) {
    for (int i = 0; i < 2; i++) {
      int from = kl_rw_producer(g, g->nodes[p].in[i]);
      if (from < 0 || !feeds_only(g, from, p)) continue;
      kl_op op = g->nodes[from].op;
      if (op != KL_OP_MatMul && op != KL_OP_Div && op != KL_OP_Mul && op != KL_OP_Add) continue;
      mask[mask[0] == KL_ABSENT ? 0 : 1] = g->nodes[p].in[1 - i];
      take(m, p);
      return scores_matmul(g, g->nodes[p].in[i], p, mask, scale, m);
    }
    return -1;
  }
  if (p < 0 || !feeds_only(g, p, to)) return -1;
  const kl_node *n = &g->nodes[p];
  double c;
  if ((n->op == KL_OP_Div || n->op == KL_OP_Mul) && *scale == 1.0 && n->n_in == 2) {
    for (int i = 0; i < 2; i++) {
      if (!kl_rw_scalar(g, n->in[1 - i], &c) || c == 0 || (n->op == KL_OP_Div && i == 1))
        continue;
      *scale = n->op == KL_OP_Div ? 1.0 / c : c;
      take(m, p);
      return scores_matmul(g, n->in[i], p, mask, scale, m);
    }
    return -1;
  }
  return n->op == KL_OP_MatMul ? p : -1;
}

/* Where(IsNaN(p), 0, p) over the softmax's output p, p read by nothing else: the Where
 * (the IsNaN added to m), else -1. A row of p is NaN where every score was -inf. */
static int nan_guard(const kl_graph *g, int sm, match *m) {
  int p = g->nodes[sm].out[0], readers[2];
  if (kl_rw_uses(g, p) != 2 || kl_rw_consumers(g, p, readers, 2) != 2) return -1;
  for (int i = 0; i < 2; i++) {
    int isnan = readers[i], w = readers[1 - i];
    const kl_node *a = &g->nodes[isnan], *b = &g->nodes[w];
    double zero;
    if (a->op != KL_OP_IsNaN || b->op != KL_OP_Where || b->n_in != 3 || b->in[2] != p ||
        !feeds_only(g, isnan, w) || b->in[0] != a->out[0] || !kl_rw_scalar(g, b->in[1], &zero) ||
        zero != 0 || !kl_rw_same_shape(&g->values[b->out[0]].type, &g->values[p].type))
      continue;
    take(m, isnan);
    return w;
  }
  return -1;
}

static kiln_status attention_at(kl_graph *g, int sm, int *changed, kl_err *e) {
  match m = {.n = 0};
  int guard = nan_guard(g, sm, &m);
  int probs = guard >= 0 ? g->nodes[guard].out[0] : g->nodes[sm].out[0];
  int pv = kl_rw_sole_consumer(g, probs);
  if (!last_axis_softmax(g, sm) || pv < 0 || g->nodes[pv].op != KL_OP_MatMul ||
      g->nodes[pv].in[0] != probs)
    return KILN_OK;
  if (guard >= 0) take(&m, guard);
  int masks[4] = {KL_ABSENT, KL_ABSENT, 0, 0};
  double scale = 1.0;
  int qk = scores_matmul(g, g->nodes[sm].in[0], sm, masks, &scale, &m);
  if (qk < 0) return KILN_OK;
  const kl_type *scores = &g->values[g->nodes[qk].out[0]].type;
  if (scores->rank < 2 || !kl_dtype_is_float(scores->dtype)) return KILN_OK;
  for (int i = 0; i < 2; i++) {
    if (masks[i] == KL_ABSENT) continue;
    kl_type t = g->values[masks[i]].type;
    if (masks[2 + i]) { /* seen without its leading 1 */
      t.rank--;
      memmove(t.dims, t.dims + 1, sizeof(kl_dim) * (size_t)t.rank);
    }
    if (!kl_rw_fits(&t, scores)) return KILN_OK;
  }
  for (int i = 0; i < 2; i++) {
    if (masks[i] == KL_ABSENT || !masks[2 + i]) continue;
    const kl_value *c = &g->values[masks[i]];
    int64_t dims[KL_MAX_RANK];
    for (int d = 1; d < c->type.rank; d++) dims[d - 1] = c->type.dims[d].size;
    void *copy = malloc(c->nbytes ? c->nbytes : 1);
    if (!copy) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for an attention mask");
    memcpy(copy, c->data, c->nbytes);
    char hint[256];
    snprintf(hint, sizeof hint, "%s_windows", c->name);
    masks[i] = kl_rw_add_const(g, hint, c->type.dtype, c->type.rank - 1, dims, copy, e);
    if (masks[i] < 0) return e->code;
    scores = &g->values[g->nodes[qk].out[0]].type;
  }
  int mask = masks[0];
  if (masks[1] != KL_ABSENT) { /* the Mask is their sum (each fits the scores: so does it) */
    kl_type sum = g->values[masks[0]].type;
    const kl_type *b = &g->values[masks[1]].type;
    int rank = sum.rank > b->rank ? sum.rank : b->rank;
    for (int i = 0; i < rank; i++) {
      kl_dim one = {1, -1};
      kl_dim da = i >= rank - sum.rank ? g->values[masks[0]].type.dims[i - rank + sum.rank] : one;
      kl_dim db = i >= rank - b->rank ? b->dims[i - rank + b->rank] : one;
      sum.dims[i] = da.size == 1 ? db : da;
    }
    sum.rank = rank;
    int out = kl_graph_add_value(g, NULL, e);
    int add = out >= 0 ? kl_graph_add_node(g, KL_OP_Add, "attention_mask_sum", 2, masks, 1,
                                           &out, e)
                       : -1;
    if (add < 0) return e->code;
    g->values[out].type = sum;
    mask = out;
  }
  int ids[4] = {g->nodes[qk].in[0], g->nodes[qk].in[1], g->nodes[pv].in[1], mask};
  for (int i = 0; i < 2; i++) { /* Q and K each scaled first (by D^-1/4, as torch 2 does) */
    int p = kl_rw_producer(g, ids[i]);
    if (p < 0 || !feeds_only(g, p, qk)) continue;
    kl_op op = g->nodes[p].op;
    if ((op != KL_OP_Mul && op != KL_OP_Div) || g->nodes[p].n_in != 2) continue;
    double c = 0;
    int x = -1;
    for (int k = 0; k < 2 && x < 0; k++)
      if ((op == KL_OP_Mul || k == 1) && kl_rw_scalar(g, g->nodes[p].in[k], &c) && c != 0)
        x = g->nodes[p].in[1 - k];
    if (x < 0 || !kl_rw_same_shape(&g->values[x].type, &g->values[ids[i]].type)) continue;
    scale *= op == KL_OP_Div ? 1.0 / c : c;
    ids[i] = x;
    take(&m, p);
  }
  take(&m, qk), take(&m, sm);
  kiln_status st = kl_rw_become(g, pv, KL_OP_KilnAttention, 4, ids, e);
  if (st == KILN_OK) st = kl_node_set_float(g, pv, "scale", (float)scale, e);
  if (st == KILN_OK && guard >= 0) st = kl_node_set_int(g, pv, "zero_masked_rows", 1, e);
  if (st == KILN_OK) remove_all(g, &m);
  *changed += st == KILN_OK;
  return st;
}

kiln_status kl_pass_fuse_attention(kl_graph *g, const kl_pass_config *cfg, int *changed,
                                   kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++)
    if (g->nodes[i].op == KL_OP_Softmax && g->nodes[i].n_out == 1)
      st = attention_at(g, i, changed, e);
  return st == KILN_OK ? kl_rw_finish(g, *changed, e) : st;
}
