/* The O3 layout pass: oneDNN's convolutions and pooling work best on channels-last
 * activations, so 2-D convolutions and the pooling after them switch to their
 * channels-last forms (ir/layout.h), with explicit Transposes where a tensor changes
 * layout (docs/passes.md has the whole story):
 *
 *   x -> Conv(W, B) -> Relu -> Conv(W2) -> Flatten
 *     becomes
 *   x -> kiln.FusedConv(W, B) channels_last=1 nchw_input=1 -> Relu
 *     -> kiln.FusedConv(W2) channels_last=1 -> Transpose(0,3,1,2) -> Flatten
 *
 * In one walk in topological order, each node is
 *   - a 2-D Conv, ConvTranspose (plain or fused, float32): made channels-last; its X
 *     (and Sum) read the channels-last tensor behind a Transpose back to [N, C, H, W]
 *     when there is one (or a Transpose in that exists), else X is read as it is
 *     (nchw_input=1) and a Sum through a new Transpose(0,2,3,1); its output goes
 *     through a new Transpose(0,3,1,2) into the old value (graph outputs keep their
 *     names);
 *   - a MaxPool (one output), AveragePool (ceil_mode 0, as oneDNN counts), global
 *     pooling, or ReduceMean/ReduceMax over H and W with keepdims, whose input comes
 *     from such a Transpose back: the same;
 *   - an elementwise op (unary, or broadcasting binary), Concat, Split, Slice, an
 *     inference BatchNormalization (as Mul and Add by per-channel constants) or a
 *     channel shuffle whose rank-4 inputs come from Transposes back (constants are
 *     permuted, tensors of ones and scalars read as they are): it computes on the
 *     channels-last tensors instead and the Transpose back moves after it (axes
 *     permuted), provided every reader of those inputs can follow.
 * A Transpose back that nothing reads any more is dropped (kl_rw_finish). The pass
 * runs by level only when the backend runs these ops on oneDNN
 * (kl_pass_config.native_nhwc), or when forced on.
 */
#include "ir/fused.h"
#include "ir/layout.h"
#include "passes/rewrite.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_transpose(const kl_node *n, const int64_t want[4]) {
  const int64_t *p;
  if (n->op != KL_OP_Transpose || n->n_out != 1 || kl_attr_ints(n, "perm", &p) != 4)
    return false;
  for (int i = 0; i < 4; i++)
    if (p[i] != want[i]) return false;
  return true;
}

/* The channels-last tensor behind v when a Transpose back to [N, C, H, W] makes v,
 * else -1. */
static int nhwc_behind(const kl_graph *g, int v) {
  int p = v >= 0 ? kl_rw_producer(g, v) : -1;
  return p >= 0 && is_transpose(&g->nodes[p], kl_layout_to_nchw) ? g->nodes[p].in[0] : -1;
}

static bool f32_rank4(const kl_graph *g, int v) {
  return v >= 0 && g->values[v].type.dtype == KL_F32 && g->values[v].type.rank == 4;
}

/* A value of v's type permuted, named after v when that name is free. */
static int add_value(kl_graph *g, int like, const int64_t perm[4], kl_err *e) {
  char name[256];
  snprintf(name, sizeof name, "%s_%s", g->values[like].name,
           perm == kl_layout_to_nhwc ? "nhwc" : "nchw");
  int v = kl_graph_add_value(g, kl_graph_find_value(g, name) < 0 ? name : NULL, e);
  if (v >= 0) kl_layout_permute_type(&g->values[like].type, perm, &g->values[v].type);
  return v;
}

/* A new Transpose(x, perm) writing out (a new value when out < 0); returns out or -1. */
static int add_transpose(kl_graph *g, int x, int out, const int64_t perm[4], int near,
                         kl_err *e) {
  if (out < 0 && (out = add_value(g, x, perm, e)) < 0) return -1;
  char name[256];
  snprintf(name, sizeof name, "%s_to_%s", g->nodes[near].name,
           perm == kl_layout_to_nhwc ? "nhwc" : "nchw");
  int t = kl_graph_add_node(g, KL_OP_Transpose, name, 1, &x, 1, &out, e);
  if (t < 0) return -1;
  g->values[out].producer = t;
  return kl_node_set_ints(g, t, "perm", perm, 4, e) == KILN_OK ? out : -1;
}

/* The channels-last form of v for node n: the tensor behind a Transpose back, else
 * the Transpose into channels-last that another reader of v made, else a new one. */
static int nhwc_existing(const kl_graph *g, int v) {
  int behind = nhwc_behind(g, v);
  if (behind >= 0) return behind;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].n_in == 1 && g->nodes[i].in[0] == v &&
        is_transpose(&g->nodes[i], kl_layout_to_nhwc))
      return g->nodes[i].out[0];
  return -1;
}

static int nhwc_input(kl_graph *g, int v, int n, kl_err *e) {
  int x = nhwc_existing(g, v);
  return x >= 0 ? x : add_transpose(g, v, -1, kl_layout_to_nhwc, n, e);
}

/* Output k of node n becomes a new channels-last value; a Transpose back makes the
 * old one. */
static kiln_status output_back_at(kl_graph *g, int n, int k, kl_err *e) {
  int y = g->nodes[n].out[k], y2 = add_value(g, y, kl_layout_to_nhwc, e);
  if (y2 < 0) return e->code;
  g->nodes[n].out[k] = y2;
  g->values[y2].producer = n;
  return add_transpose(g, y2, y, kl_layout_to_nchw, n, e) < 0 ? e->code : KILN_OK;
}

static kiln_status output_back(kl_graph *g, int n, kl_err *e) {
  return output_back_at(g, n, 0, e);
}

/* ---- the ops made channels-last ---- */



static bool convertible(const kl_graph *g, const kl_node *n) {
  if (kl_layout_nhwc(n) || n->n_out != 1 || n->n_in < 1 || !f32_rank4(g, n->in[0]) ||
      !f32_rank4(g, n->out[0]))
    return false;
  bool reduce = n->op == KL_OP_ReduceMean || n->op == KL_OP_ReduceMax; /* int axes */
  for (int k = 0; k < n->n_in && !reduce; k++)
    if (n->in[k] >= 0 && g->values[n->in[k]].type.dtype != KL_F32) return false;
  switch (n->op) {
  case KL_OP_Conv:
  case KL_OP_ConvTranspose: return true;
  case KL_OP_KilnFusedConv:
  case KL_OP_KilnFusedConvTranspose:
    /* a Sum of Y's dims only: the channels-last node reads it in place (dnnl.c), and
     * one that broadcasts (PiT's position embedding [1, C, H, W] against a batch) would
     * leave the convolution to the reference kernel */
    return n->n_in <= KL_FUSED_SUM || n->in[KL_FUSED_SUM] < 0 ||
           (f32_rank4(g, n->in[KL_FUSED_SUM]) &&
            kl_type_same_dims(&g->values[n->in[KL_FUSED_SUM]].type,
                              &g->values[n->out[0]].type));
  case KL_OP_AveragePool: /* oneDNN averages a window that ceil_mode adds otherwise */
    if (kl_attr_int(n, "ceil_mode", 0) != 0) return false;
    /* fall through */
  case KL_OP_MaxPool:
  case KL_OP_GlobalAveragePool:
  case KL_OP_GlobalMaxPool: /* only after a convolution: alone it gains nothing */
    return nhwc_behind(g, n->in[0]) >= 0;
  case KL_OP_ReduceMean:
  case KL_OP_ReduceMax:
    return kl_rw_global_pool_of(g, n) != KL_OP_COUNT && nhwc_behind(g, n->in[0]) >= 0;
  default: return false;
  }
}

static kiln_status convert(kl_graph *g, int i, kl_err *e) {
  kl_op op = g->nodes[i].op, pool = kl_rw_global_pool_of(g, &g->nodes[i]);
  if (pool != KL_OP_COUNT) {
    int x = g->nodes[i].in[0];
    kiln_status st = kl_rw_become(g, i, pool, 1, &x, e);
    if (st != KILN_OK) return st;
    op = pool;
  }
  /* A convolution whose X exists only as [N, C, H, W] (an image from the graph's
   * input) reads it so: oneDNN's kernels take such a source directly, where a
   * Transpose would be one more pass over it. */
  if (kl_layout_nhwc_of(op) == KL_OP_COUNT && nhwc_existing(g, g->nodes[i].in[0]) < 0) {
    kiln_status st = kl_node_set_int(g, i, "nchw_input", 1, e);
    if (st != KILN_OK) return st;
  }
  for (int k = 0; k < g->nodes[i].n_in; k++) {
    int v = g->nodes[i].in[k];
    if (v < 0 || !kl_layout_activation_slot(&g->nodes[i], k)) continue;
    int x = nhwc_input(g, v, i, e);
    if (x < 0) return e->code;
    kl_graph_set_input(g, i, k, x);
  }
  kiln_status st = KILN_OK;
  if (kl_layout_nhwc_of(op) != KL_OP_COUNT) {
    kl_rw_set_op(g, i, kl_layout_nhwc_of(op));
  } else {
    if (kl_fused_base(op) == KL_OP_COUNT) kl_rw_set_op(g, i, kl_fused_of(op));
    st = kl_node_set_int(g, i, "channels_last", 1, e);
  }
  return st == KILN_OK ? output_back(g, i, e) : st;
}

/* ---- the ops a Transpose back moves past ---- */

static bool elementwise_unary(kl_op op) {
  switch (op) {
  case KL_OP_Relu: case KL_OP_Sigmoid: case KL_OP_Tanh: case KL_OP_Clip:
  case KL_OP_LeakyRelu: case KL_OP_Elu: case KL_OP_Selu: case KL_OP_Celu:
  case KL_OP_HardSigmoid: case KL_OP_HardSwish: case KL_OP_Mish: case KL_OP_Gelu:
  case KL_OP_Softplus: case KL_OP_Softsign: case KL_OP_Swish: case KL_OP_Abs:
  case KL_OP_Neg: case KL_OP_Exp: case KL_OP_Log: case KL_OP_Sqrt: case KL_OP_Erf:
  case KL_OP_Reciprocal: case KL_OP_Floor: case KL_OP_Ceil: case KL_OP_Round:
  case KL_OP_Sign: case KL_OP_Identity:
    return true;
  default:
    return false;
  }
}

static bool elementwise_broadcast(kl_op op) {
  switch (op) {
  case KL_OP_Add: case KL_OP_Sub: case KL_OP_Mul: case KL_OP_Div: case KL_OP_Pow:
  case KL_OP_PRelu: case KL_OP_Max: case KL_OP_Min:
    return true;
  default:
    return false;
  }
}

/* How many inputs of n carry the image (the rest are Clip's bounds). */
static int image_inputs(const kl_node *n) {
  return elementwise_unary(n->op) ? 1 : n->n_in;
}

/* A BatchNormalization in inference with constant float parameters of one value per
 * channel. */
static bool bn_inference(const kl_graph *g, const kl_node *n) {
  if (n->op != KL_OP_BatchNormalization || n->n_out != 1 || n->n_in != 5 ||
      kl_attr_int(n, "training_mode", 0) != 0 || !f32_rank4(g, n->in[0]))
    return false;
  int64_t c = g->values[n->in[0]].type.dims[1].size;
  for (int k = 1; k < 5; k++) {
    const kl_value *v = kl_rw_const(g, n->in[k]);
    if (!v || v->type.dtype != KL_F32 || v->type.rank != 1 || v->type.dims[0].size != c)
      return false;
  }
  return c > 0;
}

static bool movable_op(const kl_node *n) {
  return n->n_out == 1 && (elementwise_unary(n->op) || elementwise_broadcast(n->op) ||
                           n->op == KL_OP_Concat || n->op == KL_OP_BatchNormalization);
}

/* A value that reads the same in either layout: a scalar or a tensor of ones (by
 * shape) of rank at most 4. */
static bool layout_free(const kl_graph *g, int v) {
  const kl_type *t = &g->values[v].type;
  if (t->rank < 0 || t->rank > 4) return false;
  for (int d = 0; d < t->rank; d++)
    if (t->dims[d].size != 1) return false;
  return true;
}

static bool shuffle_at(const kl_graph *g, int r1, int *t, int *r2);
static bool slice_movable(const kl_graph *g, const kl_node *n);
static bool split_movable(const kl_graph *g, const kl_node *n);

/* Whether every reader of v can take its channels-last form: a node that becomes
 * channels-last, or one the Transpose back moves past, or a Transpose into
 * channels-last (which then cancels). v is not a graph output. */
static bool readers_follow(const kl_graph *g, int v) {
  if (kl_rw_is_output(g, v)) return false;
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    bool reads = false;
    for (int k = 0; k < n->n_in; k++) reads |= n->in[k] == v;
    if (!reads) continue;
    kl_op op = n->op;
    bool conv = op == KL_OP_Conv || op == KL_OP_ConvTranspose ||
                op == KL_OP_KilnFusedConv || op == KL_OP_KilnFusedConvTranspose;
    int t, r2;
    if (!conv && kl_layout_nhwc_of(op) == KL_OP_COUNT && !movable_op(n) &&
        !is_transpose(n, kl_layout_to_nhwc) && !(op == KL_OP_Slice && slice_movable(g, n)) &&
        !(op == KL_OP_Reshape && shuffle_at(g, i, &t, &r2)) && !split_movable(g, n) &&
        kl_rw_global_pool_of(g, n) == KL_OP_COUNT)
      return false;
  }
  return true;
}

/* Whether the Transpose back can move past node i. */
static bool movable(const kl_graph *g, int i) {
  const kl_node *n = &g->nodes[i];
  if (!movable_op(n) || g->values[n->out[0]].type.rank != 4) return false;
  if (n->op == KL_OP_BatchNormalization)
    return bn_inference(g, n) && nhwc_behind(g, n->in[0]) >= 0 && readers_follow(g, n->in[0]);
  if (n->op == KL_OP_Concat) {
    int64_t axis = kl_attr_int(n, "axis", 0);
    if (axis < -4 || axis > 3) return false;
  }
  bool any = false;
  for (int k = 0; k < image_inputs(n); k++) {
    int v = n->in[k];
    if (v < 0) return false;
    if (nhwc_behind(g, v) >= 0) {
      if (!readers_follow(g, v)) return false;
      any = true;
      continue;
    }
    if (n->op == KL_OP_Concat && !kl_rw_const(g, v)) return false;
    const kl_type *t = &g->values[v].type;
    if (layout_free(g, v)) continue;
    if (!kl_rw_const(g, v) || t->rank > 4 || kl_dtype_size(t->dtype) == 0) return false;
  }
  return any;
}

/* Constant c permuted into channels-last (padded to rank 4). */
static int permute_const(kl_graph *g, int c, kl_err *e) {
  const kl_value *v = &g->values[c];
  int64_t sdims[4], dims[4];
  for (int d = 0; d < v->type.rank; d++) sdims[d] = v->type.dims[d].size;
  kl_layout_permute_dims(v->type.rank, sdims, kl_layout_to_nhwc, dims);
  void *data = malloc(v->nbytes ? v->nbytes : 1);
  if (!data) {
    kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory permuting constant '%s'", v->name);
    return -1;
  }
  kl_layout_permute_data(v->data, v->type.rank, sdims, kl_layout_to_nhwc,
                         kl_dtype_size(v->type.dtype), data);
  char hint[256];
  snprintf(hint, sizeof hint, "%s_nhwc", v->name);
  kl_dtype dt = v->type.dtype;
  return kl_rw_add_const(g, hint, dt, 4, dims, data, e);
}

/* BatchNormalization(x) in inference is x * s + t per channel, s = scale / sqrt(var +
 * eps), t = B - mean * s: a Mul and an Add by constants [1, 1, 1, C] on the
 * channels-last tensor, which kiln's elementwise kernels run at memory speed. */
static kiln_status bn_to_affine(kl_graph *g, int i, kl_err *e) {
  const kl_node *n = &g->nodes[i];
  int64_t c = g->values[n->in[0]].type.dims[1].size, dims[4] = {1, 1, 1, c};
  double eps = kl_attr_float(n, "epsilon", 1e-5f);
  const float *scale = g->values[n->in[1]].data, *bias = g->values[n->in[2]].data;
  const float *mean = g->values[n->in[3]].data, *var = g->values[n->in[4]].data;
  float *s = malloc(sizeof(float) * (size_t)c), *t = malloc(sizeof(float) * (size_t)c);
  if (!s || !t) {
    free(s);
    free(t);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory folding a BatchNormalization");
  }
  for (int64_t k = 0; k < c; k++) {
    double sk = scale[k] / sqrt((double)var[k] + eps);
    s[k] = (float)sk;
    t[k] = (float)(bias[k] - mean[k] * sk);
  }
  char hint[256];
  snprintf(hint, sizeof hint, "%s_scale", n->name);
  int sv = kl_rw_add_const(g, hint, KL_F32, 4, dims, s, e);
  snprintf(hint, sizeof hint, "%s_shift", g->nodes[i].name);
  int tv = sv < 0 ? -1 : kl_rw_add_const(g, hint, KL_F32, 4, dims, t, e);
  if (sv < 0) free(t);
  if (tv < 0) return e->code;
  int x = nhwc_behind(g, g->nodes[i].in[0]);
  int mid = add_value(g, g->nodes[i].out[0], kl_layout_to_nhwc, e);
  if (mid < 0) return e->code;
  char name[256];
  snprintf(name, sizeof name, "%s_scale", g->nodes[i].name);
  if (kl_graph_add_node(g, KL_OP_Mul, name, 2, (int[]){x, sv}, 1, &mid, e) < 0) return e->code;
  kiln_status st = kl_rw_become(g, i, KL_OP_Add, 2, (int[]){mid, tv}, e);
  return st == KILN_OK ? output_back(g, i, e) : st;
}

static kiln_status move_past(kl_graph *g, int i, kl_err *e) {
  if (g->nodes[i].op == KL_OP_BatchNormalization) return bn_to_affine(g, i, e);
  for (int k = 0; k < image_inputs(&g->nodes[i]); k++) {
    int v = g->nodes[i].in[k], x = nhwc_behind(g, v);
    if (x < 0 && !layout_free(g, v)) x = permute_const(g, v, e);
    if (x >= 0) kl_graph_set_input(g, i, k, x);
    else if (!layout_free(g, v)) return e->code;
  }
  if (g->nodes[i].op == KL_OP_Concat) {
    int64_t axis = kl_attr_int(&g->nodes[i], "axis", 0);
    if (axis < 0) axis += 4;
    int64_t moved = 0;
    while (kl_layout_to_nhwc[moved] != axis) moved++;
    kiln_status st = kl_node_set_int(g, i, "axis", moved, e);
    if (st != KILN_OK) return st;
  }
  return output_back(g, i, e);
}

/* ---- Slice and the channel shuffle ---- */

/* The channels-last position of axis a of a rank-4 tensor (negative counts from the
 * end), or -1. */
static int64_t nhwc_axis(int64_t a) {
  if (a < 0) a += 4;
  if (a < 0 || a > 3) return -1;
  int64_t p = 0;
  while (kl_layout_to_nhwc[p] != a) p++;
  return p;
}


/* Slice(x, starts, ends, axes?, steps?) of a rank-4 x with constant starts and axes:
 * the same Slice of the channels-last tensor along the permuted axes. */
static bool slice_movable(const kl_graph *g, const kl_node *n) {
  int64_t v[4];
  int k, ka = -1;
  if (n->op != KL_OP_Slice || n->n_out != 1 || g->values[n->in[0]].type.rank != 4 ||
      !kl_rw_const_ints(g, n->in[1], v, &k))
    return false;
  if (n->n_in > 3 && n->in[3] >= 0) {
    if (!kl_rw_const_ints(g, n->in[3], v, &ka) || ka != k) return false;
    for (int i = 0; i < ka; i++)
      if (nhwc_axis(v[i]) < 0) return false;
  }
  return true;
}

static kiln_status slice_move(kl_graph *g, int i, kl_err *e) {
  int64_t axes[4];
  int k = 0, ka;
  kl_rw_const_ints(g, g->nodes[i].in[1], axes, &k);
  if (g->nodes[i].n_in > 3 && g->nodes[i].in[3] >= 0) kl_rw_const_ints(g, g->nodes[i].in[3], axes, &ka);
  else
    for (int a = 0; a < k; a++) axes[a] = a;
  double moved[4];
  for (int a = 0; a < k; a++) moved[a] = (double)nhwc_axis(axes[a]);
  int av = k > 0 ? kl_rw_add_vector(g, "axes_nhwc", KL_I64, 1, moved, k, e) : -1;
  if (k > 0 && av < 0) return e->code;
  kl_graph_set_input(g, i, 0, nhwc_behind(g, g->nodes[i].in[0]));
  kiln_status st = k > 0 ? kl_rw_set_input(g, i, 3, av, e) : KILN_OK;
  return st == KILN_OK ? output_back(g, i, e) : st;
}

/* Split of a rank-4 tensor (sizes as an input or num_outputs): the same Split of the
 * channels-last tensor along the permuted axis, each output through a Transpose back. */
static bool split_movable(const kl_graph *g, const kl_node *n) {
  if (n->op != KL_OP_Split || g->values[n->in[0]].type.rank != 4 ||
      nhwc_axis(kl_attr_int(n, "axis", 0)) < 0)
    return false;
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] < 0 || g->values[n->out[k]].type.rank != 4) return false;
  return true;
}

static kiln_status split_move(kl_graph *g, int i, kl_err *e) {
  kl_graph_set_input(g, i, 0, nhwc_behind(g, g->nodes[i].in[0]));
  int64_t axis = nhwc_axis(kl_attr_int(&g->nodes[i], "axis", 0));
  kiln_status st = kl_node_set_int(g, i, "axis", axis, e);
  for (int k = 0; st == KILN_OK && k < g->nodes[i].n_out; k++) st = output_back_at(g, i, k, e);
  return st;
}

/* The channel shuffle of ShuffleNet: Reshape(x [N, C, H, W], [N, G, C/G, H, W]),
 * Transpose(0, 2, 1, 3, 4), Reshape back to [N, C, H, W], each read only by the next.
 * On the channels-last tensor the same is Reshape to [N, H, W, G, C/G], Transpose(0, 1,
 * 2, 4, 3), Reshape to [N, H, W, C]. */
static bool shuffle_at(const kl_graph *g, int r1, int *t, int *r2) {
  const kl_node *n = &g->nodes[r1];
  if (n->op != KL_OP_Reshape || n->n_out != 1) return false;
  const kl_type *x = &g->values[n->in[0]].type, *y = &g->values[n->out[0]].type;
  /* with allowzero the new shapes may hold no 0 for N: N must be known */
  bool zero_ok = x->rank == 4 && x->dims[0].size >= 1;
  if (kl_attr_int(n, "allowzero", 0) != 0 && !zero_ok) return false;
  /* with C, H, W known and kept, the first dim is N however the shape spells it */
  if (x->rank != 4 || y->rank != 5 || x->dims[2].size < 1 || x->dims[3].size < 1 ||
      x->dims[2].size != y->dims[3].size || x->dims[3].size != y->dims[4].size)
    return false;
  for (int d = 1; d < 5; d++)
    if (y->dims[d].size < 1) return false;
  if (x->dims[1].size != y->dims[1].size * y->dims[2].size) return false;
  *t = kl_rw_sole_consumer(g, n->out[0]);
  const int64_t *p;
  static const int64_t swap12[5] = {0, 2, 1, 3, 4};
  if (*t < 0 || g->nodes[*t].op != KL_OP_Transpose ||
      kl_attr_ints(&g->nodes[*t], "perm", &p) != 5 || memcmp(p, swap12, sizeof swap12) != 0)
    return false;
  *r2 = kl_rw_sole_consumer(g, g->nodes[*t].out[0]);
  if (*r2 < 0 || g->nodes[*r2].op != KL_OP_Reshape ||
      (kl_attr_int(&g->nodes[*r2], "allowzero", 0) != 0 && !zero_ok))
    return false;
  const kl_type *z = &g->values[g->nodes[*r2].out[0]].type;
  return z->rank == 4 && z->dims[1].size == x->dims[1].size &&
         z->dims[2].size == x->dims[2].size && z->dims[3].size == x->dims[3].size;
}

/* A new value of the type of `like` with its dims picked by order[]. */
static int add_reordered(kl_graph *g, int like, const int *order, int rank, kl_err *e) {
  int v = kl_graph_add_value(g, NULL, e);
  if (v < 0) return -1;
  kl_type t = g->values[like].type;
  for (int d = 0; d < rank; d++) t.dims[d] = g->values[like].type.dims[order[d]];
  t.rank = rank;
  g->values[v].type = t;
  return v;
}

static kiln_status shuffle_move(kl_graph *g, int r1, int t, int r2, kl_err *e) {
  int y = g->nodes[r1].out[0];
  const kl_type *yt = &g->values[y].type; /* [N, G, C/G, H, W] */
  int64_t n = g->values[g->nodes[r1].in[0]].type.dims[0].size;
  int64_t gs = yt->dims[1].size, cg = yt->dims[2].size;
  int64_t h = yt->dims[3].size, w = yt->dims[4].size;
  double s1[5] = {(double)(n >= 0 ? n : 0), (double)h, (double)w, (double)gs, (double)cg};
  double s2[4] = {s1[0], (double)h, (double)w, (double)(gs * cg)};
  int c1 = kl_rw_add_vector(g, "shuffle_nhwc", KL_I64, 1, s1, 5, e);
  int c2 = c1 < 0 ? -1 : kl_rw_add_vector(g, "shuffle_nhwc", KL_I64, 1, s2, 4, e);
  int v1 = c2 < 0 ? -1 : add_reordered(g, y, (const int[]){0, 3, 4, 1, 2}, 5, e);
  int v2 = v1 < 0 ? -1 : add_reordered(g, y, (const int[]){0, 3, 4, 2, 1}, 5, e);
  if (v2 < 0) return e->code;
  kl_graph_set_input(g, r1, 0, nhwc_behind(g, g->nodes[r1].in[0]));
  kl_graph_set_input(g, r1, 1, c1);
  g->nodes[r1].out[0] = v1;
  g->values[v1].producer = r1;
  kl_graph_set_input(g, t, 0, v1);
  g->nodes[t].out[0] = v2;
  g->values[v2].producer = t;
  kl_graph_set_input(g, r2, 0, v2);
  kl_graph_set_input(g, r2, 1, c2);
  kiln_status st = kl_node_set_ints(g, t, "perm", (const int64_t[]){0, 1, 2, 4, 3}, 5, e);
  return st == KILN_OK ? output_back(g, r2, e) : st;
}

kiln_status kl_pass_layout(kl_graph *g, const kl_pass_config *cfg, int *changed,
                           kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  int n_nodes = g->n_nodes; /* the Transposes added go after these */
  for (int i = 0; st == KILN_OK && i < n_nodes; i++) {
    if (convertible(g, &g->nodes[i])) {
      st = convert(g, i, e);
      (*changed)++;
    } else if (movable(g, i)) {
      st = move_past(g, i, e);
      (*changed)++;
    } else if (g->nodes[i].op == KL_OP_Slice && nhwc_behind(g, g->nodes[i].in[0]) >= 0 &&
               slice_movable(g, &g->nodes[i]) && readers_follow(g, g->nodes[i].in[0])) {
      st = slice_move(g, i, e);
      (*changed)++;
    } else if (g->nodes[i].op == KL_OP_Split && nhwc_behind(g, g->nodes[i].in[0]) >= 0 &&
               split_movable(g, &g->nodes[i]) && readers_follow(g, g->nodes[i].in[0])) {
      st = split_move(g, i, e);
      (*changed)++;
    } else if (g->nodes[i].op == KL_OP_Reshape && nhwc_behind(g, g->nodes[i].in[0]) >= 0 &&
               readers_follow(g, g->nodes[i].in[0])) {
      int t, r2;
      if (!shuffle_at(g, i, &t, &r2)) continue;
      st = shuffle_move(g, i, t, r2, e);
      (*changed)++;
    }
  }
  return st == KILN_OK ? kl_rw_finish(g, *changed, e) : st;
}
