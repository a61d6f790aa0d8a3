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
 *   reading the fused node's [B, S, H*Dv]. Longer splits and merges (torchvision's
 *   ViT and Swin) are matched as strided views: see "head split and merge as strided
 *   views" below.
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
#include "passes/pattern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Attention node a becomes MultiHeadAttention(ids) num_heads=heads, keeping its scale
 * and its zero_masked_rows. */
static kiln_status become_mha(kl_graph *g, int a, const int *ids, int64_t heads, kl_err *e) {
  float scale = kl_attr_float(&g->nodes[a], "scale", 1.0f);
  int64_t zero_rows = kl_attr_int(&g->nodes[a], "zero_masked_rows", 0);
  kiln_status st = kl_rw_become(g, a, KL_OP_KilnMultiHeadAttention, 4, ids, e);
  if (st == KILN_OK) st = kl_node_set_int(g, a, "num_heads", heads, e);
  if (st == KILN_OK) st = kl_node_set_float(g, a, "scale", scale, e);
  if (st == KILN_OK && zero_rows) st = kl_node_set_int(g, a, "zero_masked_rows", zero_rows, e);
  return st;
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
  kiln_status st = become_mha(g, a, ids, hq, e);
  if (st != KILN_OK) return st;
  remove_all(g, &m);
  kl_rw_take_output(g, a, 0, y);
  (*changed)++;
  return KILN_OK;
}

/* ---- head split and merge as strided views (ViT, Swin) ---- */

/* torchvision's nn.MultiheadAttention (ViT) and Swin's window attention split heads
 * with longer chains of layout ops (Reshape, Transpose, Unsqueeze, Squeeze, Gather of
 * one index, Split) out of a packed or separate projection. Each chain is followed as
 * a strided view of the tensor it starts from: element i of the result is element
 * off + sum(i[k] * strides[k]) of the start, flat. Where Q, Kt and V are views that
 * read rows of a token-major [B, S, row] start the way kiln.MultiHeadAttention does,
 * and the merge chain after the Attention leaves its [B, S, H*Dv] result in order,
 * the views are exact and the op replaces them. All shapes must be static. */

#define MAX_CHAIN 16

typedef struct view {
  int rank;
  int64_t dims[KL_MAX_RANK], strides[KL_MAX_RANK], off;
} view;

static bool static_dims(const kl_type *t) {
  if (t->rank < 0 || t->rank > KL_MAX_RANK) return false;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i].size < 1) return false;
  return true;
}

static void view_of(view *w, const kl_type *t) {
  w->rank = t->rank;
  w->off = 0;
  int64_t s = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    w->dims[i] = t->dims[i].size;
    w->strides[i] = s;
    s *= w->dims[i];
  }
}

/* w as the same elements in the row-major order of shape dims[0..rank-1] (same count),
 * when strides can express that. */
static bool view_reshape(view *w, int rank, const int64_t *dims) {
  int64_t od[KL_MAX_RANK], os[KL_MAX_RANK];
  int n = 0;
  for (int i = 0; i < w->rank; i++)
    if (w->dims[i] != 1) od[n] = w->dims[i], os[n++] = w->strides[i];
  view out = {.rank = rank, .off = w->off};
  int i = 0, j = 0;
  while (j < rank) {
    if (dims[j] == 1) {
      out.dims[j] = 1, out.strides[j++] = 0;
      continue;
    }
    if (i >= n) return false;
    int j0 = j;
    int64_t np = dims[j], op = od[i];
    while (np != op) {
      if (np < op) {
        if (++j >= rank) return false;
        np *= dims[j];
      } else {
        if (++i >= n || os[i - 1] != os[i] * od[i]) return false;
        op *= od[i];
      }
    }
    int64_t s = os[i];
    for (int k = j; k >= j0; k--) out.dims[k] = dims[k], out.strides[k] = s, s *= dims[k];
    i++, j++;
  }
  if (i != n) return false;
  *w = out;
  return true;
}

/* Constant integer list of node n: input `slot` when present, else attribute name.
 * Returns the count (0 when neither), -1 when not constant or too long. */
static int const_list(const kl_graph *g, const kl_node *n, int slot, const char *name,
                      int64_t *out) {
  if (n->n_in > slot && n->in[slot] != KL_ABSENT) {
    const kl_value *c = kl_rw_const(g, n->in[slot]);
    int64_t count;
    if (!c || !kl_type_numel(&c->type, &count) || count > KL_MAX_RANK) return -1;
    for (int64_t i = 0; i < count; i++) out[i] = kl_load_i64(c->data, c->type.dtype, (size_t)i);
    return (int)count;
  }
  const int64_t *a;
  int count = kl_attr_ints(n, name, &a);
  if (count > KL_MAX_RANK) return -1;
  for (int i = 0; i < count; i++) out[i] = a[i];
  return count < 0 ? 0 : count;
}

/* w (the view of node n's input 0) becomes the view of n's output `slot`. */
static bool view_step(const kl_graph *g, int n, int slot, view *w) {
  const kl_node *node = &g->nodes[n];
  const kl_type *yt = &g->values[node->out[slot]].type;
  if (!static_dims(yt)) return false;
  int64_t list[KL_MAX_RANK];
  view out = *w;
  switch (node->op) {
  case KL_OP_Reshape: {
    int64_t dims[KL_MAX_RANK];
    for (int i = 0; i < yt->rank; i++) dims[i] = yt->dims[i].size;
    if (!view_reshape(&out, yt->rank, dims)) return false;
    break;
  }
  case KL_OP_Transpose: {
    const int64_t *p;
    int count = kl_attr_ints(node, "perm", &p);
    if (count >= 0 && count != w->rank) return false;
    for (int i = 0; i < w->rank; i++) {
      int64_t a = count < 0 ? w->rank - 1 - i : p[i];
      if (a < 0 || a >= w->rank) return false;
      out.dims[i] = w->dims[a], out.strides[i] = w->strides[a];
    }
    break;
  }
  case KL_OP_Unsqueeze: case KL_OP_Squeeze: {
    /* both only add or drop dims of size 1: the same elements in the same order */
    int64_t dims[KL_MAX_RANK];
    for (int i = 0; i < yt->rank; i++) dims[i] = yt->dims[i].size;
    if (!view_reshape(&out, yt->rank, dims)) return false;
    break;
  }
  case KL_OP_Gather: {
    const kl_value *c = kl_rw_const(g, node->in[1]);
    int64_t count, axis = kl_attr_int(node, "axis", 0);
    if (axis < 0) axis += w->rank;
    if (!c || !kl_type_numel(&c->type, &count) || count != 1 || c->type.rank > 1 ||
        axis < 0 || axis >= w->rank)
      return false;
    int64_t idx = kl_load_i64(c->data, c->type.dtype, 0);
    if (idx < 0) idx += w->dims[axis];
    if (idx < 0 || idx >= w->dims[axis]) return false;
    out.off += idx * w->strides[axis];
    out.dims[axis] = 1;
    if (c->type.rank == 0) { /* a scalar index drops the axis */
      for (int i = (int)axis; i + 1 < w->rank; i++)
        out.dims[i] = out.dims[i + 1], out.strides[i] = out.strides[i + 1];
      out.rank--;
    }
    break;
  }
  case KL_OP_Split: {
    int64_t axis = kl_attr_int(node, "axis", 0);
    if (axis < 0) axis += w->rank;
    if (axis < 0 || axis >= w->rank) return false;
    int count = const_list(g, node, 1, "split", list);
    int64_t start = 0;
    if (count == 0) { /* equal parts */
      if (w->dims[axis] % node->n_out != 0) return false;
      start = slot * (w->dims[axis] / node->n_out);
    } else {
      if (count != node->n_out) return false;
      for (int i = 0; i < slot; i++) start += list[i];
    }
    out.off += start * w->strides[axis];
    out.dims[axis] = yt->dims[axis].size;
    break;
  }
  default:
    return false;
  }
  if (out.rank != yt->rank) return false;
  for (int i = 0; i < out.rank; i++)
    if (out.dims[i] != yt->dims[i].size) return false;
  *w = out;
  return true;
}

static bool layout_op(kl_op op) {
  return op == KL_OP_Reshape || op == KL_OP_Transpose || op == KL_OP_Unsqueeze ||
         op == KL_OP_Squeeze || op == KL_OP_Gather || op == KL_OP_Split;
}

/* How operand v of an Attention reads its start x: rows of `row` values, token (b, s)
 * at (b * S + s) * row, head h's slice at off + h * D. */
typedef struct operand {
  int x;
  int64_t off, row, batch, seq, heads, size;
  int chain[MAX_CHAIN], len; /* the layout ops from x to v */
} operand;

/* w, a view of x with dims [B, H, S, D], as an operand. */
static bool token_major(const kl_graph *g, int x, const view *w, operand *o) {
  if (w->rank != 4) return false;
  int64_t b = w->dims[0], h = w->dims[1], s = w->dims[2], d = w->dims[3], count, row;
  if (!kl_type_numel(&g->values[x].type, &count) || count % (b * s) != 0) return false;
  row = count / (b * s);
  if ((d > 1 && w->strides[3] != 1) || (h > 1 && w->strides[1] != d) ||
      (s > 1 && w->strides[2] != row) || (b > 1 && w->strides[0] != s * row) ||
      w->off < 0 || w->off + h * d > row)
    return false;
  o->x = x, o->off = w->off, o->row = row;
  o->batch = b, o->seq = s, o->heads = h, o->size = d;
  return true;
}

/* Operand v of an Attention (transposed, [B, H, D, T], when kt): the furthest start
 * up its chain of layout ops from which it is a token-major view. */
static bool trace_operand(const kl_graph *g, int v, bool kt, operand *o) {
  int chain[MAX_CHAIN], slots[MAX_CHAIN], n = 0;
  for (int cur = v; n < MAX_CHAIN;) {
    int p = kl_rw_producer(g, cur);
    if (p < 0 || !layout_op(g->nodes[p].op) || !static_dims(&g->values[g->nodes[p].in[0]].type))
      break;
    int slot = 0;
    while (slot < g->nodes[p].n_out && g->nodes[p].out[slot] != cur) slot++;
    chain[n] = p, slots[n++] = slot;
    cur = g->nodes[p].in[0];
  }
  for (int start = n; start >= 1; start--) {
    int x = g->nodes[chain[start - 1]].in[0];
    view w;
    view_of(&w, &g->values[x].type);
    bool ok = true;
    for (int k = start - 1; ok && k >= 0; k--) ok = view_step(g, chain[k], slots[k], &w);
    if (!ok || w.rank != 4) continue;
    if (kt) { /* [B, H, D, T] read as [B, H, T, D] */
      int64_t d = w.dims[2], s = w.strides[2];
      w.dims[2] = w.dims[3], w.strides[2] = w.strides[3];
      w.dims[3] = d, w.strides[3] = s;
    }
    if (token_major(g, x, &w, o)) {
      memcpy(o->chain, chain, sizeof(int) * (size_t)start);
      o->len = start;
      return true;
    }
  }
  return false;
}

/* The layout ops of the three operands, each once, into set[0..*count-1], when every
 * value they make is read only by them and by the Attention a, none a graph output. */
static bool chains_private(const kl_graph *g, int a, const operand *ops, int *set,
                           int *count) {
  int n = 0;
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < ops[k].len; i++) {
      int j = 0;
      while (j < n && set[j] != ops[k].chain[i]) j++;
      if (j == n) set[n++] = ops[k].chain[i];
    }
  for (int i = 0; i < n; i++) {
    const kl_node *node = &g->nodes[set[i]];
    for (int o = 0; o < node->n_out; o++) {
      int readers[8], nr = kl_rw_consumers(g, node->out[o], readers, 8);
      if (kl_rw_is_output(g, node->out[o]) || nr > 8) return false;
      for (int r = 0; r < nr; r++) {
        int j = 0;
        while (j < n && set[j] != readers[r]) j++;
        if (j == n && readers[r] != a) return false;
      }
    }
  }
  *count = n;
  return true;
}

/* x as a [B, S, row] tensor: itself when of that shape, else a new Reshape of it. */
static int as_rows(kl_graph *g, const operand *o, const char *near, kl_err *e) {
  const kl_type *t = &g->values[o->x].type;
  int64_t dims[3] = {o->batch, o->seq, o->row};
  if (t->rank == 3 && t->dims[0].size == dims[0] && t->dims[1].size == dims[1] &&
      t->dims[2].size == dims[2])
    return o->x;
  int64_t *shape = malloc(sizeof dims);
  if (!shape) {
    kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a Reshape near '%s'", near);
    return -1;
  }
  memcpy(shape, dims, sizeof dims);
  int c = kl_rw_add_const(g, "mha_rows", KL_I64, 1, (int64_t[]){3}, shape, e);
  int y = c >= 0 ? kl_graph_add_value(g, NULL, e) : -1;
  char name[256];
  snprintf(name, sizeof name, "%s_rows", near);
  int r = y >= 0 ? kl_graph_add_node(g, KL_OP_Reshape, name, 2, (int[]){o->x, c}, 1, &y, e)
                 : -1;
  if (r < 0) return -1;
  kl_type *yt = &g->values[y].type;
  *yt = g->values[o->x].type;
  yt->rank = 3;
  for (int i = 0; i < 3; i++) yt->dims[i] = (kl_dim){dims[i], -1};
  g->values[y].producer = r;
  return y;
}

static bool contiguous(const view *w) {
  int64_t s = 1;
  for (int i = w->rank - 1; i >= 0; i--) {
    if (w->dims[i] != 1 && w->strides[i] != s) return false;
    s *= w->dims[i];
  }
  return w->off == 0;
}

static kiln_status mha_views_at(kl_graph *g, int a, int *changed, kl_err *e) {
  const kl_node *n = &g->nodes[a];
  int y = n->out[0];
  const kl_type *yt = &g->values[y].type;
  if (n->n_in < 3 || !kl_dtype_is_float(yt->dtype) || yt->rank != 4 || !static_dims(yt))
    return KILN_OK;
  operand ops[3];
  if (!trace_operand(g, n->in[0], false, &ops[0]) ||
      !trace_operand(g, n->in[1], true, &ops[1]) || !trace_operand(g, n->in[2], false, &ops[2]))
    return KILN_OK;
  const operand q = ops[0], k = ops[1], v = ops[2];
  int split[3 * MAX_CHAIN], n_split;
  if (!chains_private(g, a, ops, split, &n_split)) return KILN_OK;
  int64_t hd = q.heads * q.size;
  bool same = q.heads == k.heads && q.heads == v.heads && q.size == k.size &&
              q.batch == k.batch && q.batch == v.batch && k.seq == v.seq;
  bool packed = same && q.x == k.x && q.x == v.x && q.size == v.size && q.seq == k.seq &&
                q.row == 3 * hd && k.row == q.row && v.row == q.row && q.off == 0 &&
                k.off == hd && v.off == 2 * hd;
  bool separate = same && q.off == 0 && k.off == 0 && v.off == 0 && q.row == hd &&
                  k.row == hd && v.row == v.heads * v.size;
  if (!packed && !separate) return KILN_OK;
  /* the merge: Y [B, H, S, Dv] is a view of the fused [B, S, H*Dv] result; follow the
   * chain after it while each link is read only by the next, to its last in order */
  int64_t b = q.batch, h = q.heads, s = q.seq, dv = v.size;
  view w = {.rank = 4, .off = 0, .dims = {b, h, s, dv}, .strides = {s * h * dv, dv, h * dv, 1}};
  int chain[MAX_CHAIN], len = 0, last = 0;
  for (int cur = y; len < MAX_CHAIN;) {
    int c = kl_rw_sole_consumer(g, cur);
    if (c < 0 || g->nodes[c].in[0] != cur || g->nodes[c].n_out != 1) break;
    kl_op op = g->nodes[c].op;
    if ((op != KL_OP_Reshape && op != KL_OP_Transpose && op != KL_OP_Unsqueeze &&
         op != KL_OP_Squeeze) || !view_step(g, c, 0, &w))
      break;
    chain[len++] = c;
    if (contiguous(&w)) last = len;
    cur = g->nodes[c].out[0];
  }
  if (last == 0) return KILN_OK;
  int z = g->nodes[chain[last - 1]].out[0];
  const kl_type zt = g->values[z].type; /* a copy: adding values moves them */
  bool direct = zt.rank == 3 && zt.dims[0].size == b && zt.dims[1].size == s &&
                zt.dims[2].size == h * dv;
  int mask = n->n_in > 3 ? n->in[3] : KL_ABSENT;
  char name[256];
  snprintf(name, sizeof name, "%s", n->name);
  int ids[4] = {as_rows(g, &q, name, e), KL_ABSENT, KL_ABSENT, mask};
  if (ids[0] < 0) return e->code;
  if (separate && !packed) {
    if ((ids[1] = as_rows(g, &k, name, e)) < 0 || (ids[2] = as_rows(g, &v, name, e)) < 0)
      return e->code;
  }
  int out = z;
  if (!direct) { /* the fused [B, S, H*Dv], then the chain's last link reshapes it */
    int64_t *shape = malloc(sizeof(int64_t) * (size_t)(zt.rank ? zt.rank : 1));
    if (!shape) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory fusing '%s'", name);
    for (int i = 0; i < zt.rank; i++) shape[i] = zt.dims[i].size;
    int c = kl_rw_add_const(g, "mha_merged", KL_I64, 1, (int64_t[]){zt.rank}, shape, e);
    if (c < 0 || (out = kl_graph_add_value(g, NULL, e)) < 0) return e->code;
    kl_type *ot = &g->values[out].type;
    *ot = g->values[y].type;
    ot->rank = 3;
    ot->dims[0] = (kl_dim){b, -1}, ot->dims[1] = (kl_dim){s, -1};
    ot->dims[2] = (kl_dim){h * dv, -1};
    kiln_status st = kl_rw_become(g, chain[last - 1], KL_OP_Reshape, 2, (int[]){out, c}, e);
    if (st != KILN_OK) return st;
  }
  kiln_status st = become_mha(g, a, ids, h, e);
  if (st != KILN_OK) return st;
  for (int i = 0; i < n_split; i++) kl_rw_remove(g, split[i]);
  for (int i = 0; i < last - (direct ? 0 : 1); i++) kl_rw_remove(g, chain[i]);
  kl_rw_take_output(g, a, 0, out);
  (*changed)++;
  return KILN_OK;
}

kiln_status kl_pass_fuse_mha(kl_graph *g, const kl_pass_config *cfg, int *changed, kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++)
    if (g->nodes[i].op == KL_OP_KilnAttention && g->nodes[i].n_out == 1)
    {
      int before = *changed;
      st = mha_at(g, i, changed, e);
      if (st == KILN_OK && *changed == before) st = mha_views_at(g, i, changed, e);
    }
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
  kl_graph_set_input(g, a, 0, sn->in[0]);
  kl_graph_set_input(g, a, 1, KL_ABSENT);
  kl_graph_set_input(g, a, 2, KL_ABSENT);
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
    kl_graph_set_input(g, i, 0, y);
    kl_graph_set_input(g, r, 0, z);
    kl_rw_take_output(g, i, 0, z);
    kl_rw_take_output(g, r, 0, o);
    g->values[z].type = g->values[y].type; /* z holds Act(y) now */
    (*changed)++;
  }
  return kl_rw_finish(g, *changed, e);
}
