/* The quantizer (quantize.h): which nodes, calibration through a session of the float
 * graph with the observed values as extra outputs, and the QDQ or dynamic rewrite. */
#include "quant/quantize.h"
#include "ir/infer_common.h"
#include "passes/rewrite.h"
#include "runtime/runtime.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One node's plan. */
typedef struct node_plan {
  bool quant;
  bool carrier;     /* an op between quantized nodes (no weights): only its output's QDQ */
  const char *why;
  int x_obs, y_obs; /* static: the observed values of its input 0 and output (-1: none) */
  int relu;         /* a Relu removed after it (uint8 activations), or -1 */
  /* bias correction: the sums of input 0's elements under each weight (a Conv's input
   * channel and kernel offset, a Gemm's column of A) over tap_count placements; NULL
   * when the node gets none */
  double *taps;
  int64_t n_taps, tap_count;
  /* GPTQ: the sums of x x^T of its input under the weights of each group (groups
   * blocks of dim x dim, upper triangles) over gram_rows placements; NULL when the node
   * gets none (too large, or a shape it cannot read) */
  double *gram;
  int64_t gram_dim, gram_groups, gram_rows;
  bool gram_off; /* refused once: not tried again */
  const char *gram_why; /* why the node has no sums (a static string), or NULL */
  /* the weights' codes and scales kl_quantizer_compute chose (GPTQ's are not cheap to
   * make twice), or NULL */
  int8_t *codes;
  float *scales;
  bool gptq;              /* ... GPTQ-rounded (every group, or rounding_why says) */
  char rounding_why[128]; /* why not, or not every group ("" when nothing to say) */
} node_plan;

/* A value observed (static) and quantized with a QDQ pair: v, whose readers read the
 * pair's DequantizeLinear; src, what the QuantizeLinear reads (v, or the input of a
 * removed Relu that produced v). */
typedef struct observed {
  int v, src, out_index;
  int same_as; /* the index of the observed value whose parameters v takes (a MaxPool's
                  or a move's output takes its input's), or -1 */
  kl_value_stats st;
  kl_qparam p;
} observed;

struct kl_quantizer {
  const kl_graph *g;
  kl_quant_options o;
  node_plan *plan;
  kl_quant_node *nodes;
  observed *obs;
  int n_obs;
  int *obs_of; /* per value: its index in obs, or -1 */
  kl_quant_value *values;
  int n_values;
  bool computed;
  int64_t batches;
  /* the calibration session: a copy of g with the observed values as outputs */
  kl_graph *cg;
  kiln_model *cm;
  kiln_session *cs;
  size_t gram_bytes; /* held by the nodes' GPTQ sums */
};

/* Calls fn(pattern, arg) for each non-empty comma-separated pattern of list, until fn
 * returns true; whether one did. A pattern is copied to be NUL-terminated, whatever its
 * length; false also when memory runs out (*oom set). */
static bool each_pattern(const char *list, bool (*fn)(const char *pat, const void *arg),
                         const void *arg, bool *oom) {
  for (const char *p = list; p && *p;) {
    size_t len = strcspn(p, ",");
    if (len > 0) {
      char *pat = malloc(len + 1);
      if (!pat) {
        *oom = true;
        return false;
      }
      memcpy(pat, p, len);
      pat[len] = '\0';
      bool hit = fn(pat, arg);
      free(pat);
      if (hit) return true;
    }
    p += len;
    if (*p == ',') p++;
  }
  return false;
}

static bool matches_name(const char *pat, const void *name) {
  return fnmatch(pat, name, 0) == 0;
}

static bool excluded(const char *list, const char *name) {
  bool oom = false;
  return each_pattern(list, matches_name, name ? name : "", &oom);
}

/* A pattern that no node of g is named by (a typo would otherwise quantize the node it
 * meant to keep, silently): true, with the pattern in the error. */
static bool matches_no_node(const char *pat, const void *graph) {
  const kl_graph *g = graph;
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].name && fnmatch(pat, g->nodes[i].name, 0) == 0) return false;
  return true;
}

typedef struct unmatched {
  const kl_graph *g;
  kl_err *e;
} unmatched;

static bool report_unmatched(const char *pat, const void *arg) {
  const unmatched *u = arg;
  if (!matches_no_node(pat, u->g)) return false;
  kl_fail(u->e, KILN_ERR_INVALID_ARGUMENT, "%s: exclude pattern '%s' names no node of the "
          "model as the quantizer reads it (constants and BatchNormalizations folded); "
          "patterns match node names, not op types (--report lists them)",
          u->g->source ? u->g->source : "model", pat);
  return true;
}

/* Every pattern of the exclude list names at least one node. */
static kiln_status check_exclude(const kl_graph *g, const char *list, kl_err *e) {
  bool oom = false;
  unmatched u = {g, e};
  if (each_pattern(list, report_unmatched, &u, &oom)) return e->code;
  return oom ? kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
}

static bool is_const_f32(const kl_graph *g, int v, int min_rank, int max_rank) {
  if (v < 0) return false;
  const kl_value *x = &g->values[v];
  return x->kind == KL_VALUE_CONST && x->data && x->type.dtype == KL_F32 &&
         x->type.rank >= min_rank && x->type.rank <= max_rank && kl_type_is_concrete(&x->type);
}

/* Whether constant v's float32 elements are all finite (or v is no float32 constant). */
static bool finite_const(const kl_graph *g, int v) {
  if (v < 0 || g->values[v].kind != KL_VALUE_CONST || g->values[v].type.dtype != KL_F32 ||
      !g->values[v].data)
    return true;
  const float *f = g->values[v].data;
  for (size_t k = 0; k < g->values[v].nbytes / sizeof(float); k++)
    if (!isfinite(f[k])) return false;
  return true;
}

static bool is_graph_output(const kl_graph *g, int v) {
  for (int k = 0; k < g->n_outputs; k++)
    if (g->outputs[k] == v) return true;
  return false;
}

/* Why node n is not quantized, or NULL when it is. */
static const char *why_not(const kl_graph *g, const kl_node *n, const kl_quant_options *o) {
  if (n->op != KL_OP_Conv && n->op != KL_OP_MatMul && n->op != KL_OP_Gemm)
    return o->dynamic ? "not a MatMul or Gemm" : "not a Conv, MatMul or Gemm";
  if (o->dynamic && n->op == KL_OP_Conv) return "dynamic quantization takes MatMul and Gemm";
  if (excluded(o->exclude, n->name)) return "excluded (--exclude)";
  int x = n->in[0];
  if (x < 0 || g->values[x].type.dtype != KL_F32) return "input is not float32";
  if (g->values[x].kind == KL_VALUE_CONST) return "input is a constant";
  if (n->op == KL_OP_Conv && !is_const_f32(g, n->in[1], 3, KL_MAX_RANK))
    return "weights are not a float32 constant";
  if (n->op != KL_OP_Conv && !is_const_f32(g, n->in[1], 2, 2))
    return "weights are not a constant float32 matrix";
  if (n->op == KL_OP_Gemm && kl_attr_int(n, "transA", 0) != 0) return "Gemm with transA";
  if (!finite_const(g, n->in[1]) || (n->n_in > 2 && !finite_const(g, n->in[2])))
    return "weights or bias hold a value that is not finite";
  if (o->dynamic && n->op == KL_OP_Gemm && kl_attr_float(n, "alpha", 1) != 1.0f)
    return "Gemm with alpha != 1";
  if (o->dynamic && n->op == KL_OP_MatMul && g->values[x].type.rank < 2)
    return "input of rank 1";
  return NULL;
}

static int add_obs(kl_quantizer *q, int v, int src) {
  if (q->obs_of[v] >= 0) return q->obs_of[v];
  observed *ob = &q->obs[q->n_obs];
  ob->v = v;
  ob->src = src;
  ob->out_index = -1;
  ob->same_as = -1;
  kl_stats_init(&ob->st);
  q->obs_of[v] = q->n_obs;
  return q->n_obs++;
}

/* Whether Clip node n clamps below at 0 (a ReLU6): a constant min of 0. Whatever its
 * max, the uint8 QuantizeLinear of its output range (which ends at or below that max)
 * then saturates exactly as the Clip does. */
static bool clip_from_zero(const kl_graph *g, const kl_node *n) {
  int lo = n->n_in > 1 ? n->in[1] : KL_ABSENT;
  if (lo < 0) return kl_node_attr(n, "min") && kl_attr_float(n, "min", -1) == 0.0f;
  const kl_value *v = &g->values[lo];
  return v->kind == KL_VALUE_CONST && v->data && v->type.dtype == KL_F32 &&
         v->nbytes == sizeof(float) && *(const float *)v->data == 0.0f;
}

/* The Relu (or Clip from 0) that alone reads y, where it can be removed (uint8
 * activations), or -1. */
static int removable_relu(const kl_graph *g, int y, const kl_quant_options *o) {
  if (o->symmetric || o->dynamic || is_graph_output(g, y)) return -1;
  int found = -1, readers = 0;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == y) readers++, found = i;
  if (readers != 1) return -1;
  const kl_node *n = &g->nodes[found];
  if (n->op == KL_OP_Clip && !clip_from_zero(g, n)) return -1;
  if (n->op != KL_OP_Relu && n->op != KL_OP_Clip) return -1;
  int r = n->out[0];
  return is_graph_output(g, r) ? -1 : found;
}

/* ---- the ops between the quantized nodes ----
 * Between two quantized convolutions kiln runs more than the convolutions on 8-bit
 * codes when the QDQ graph quantizes the values around them (passes/fold_qdq.c): a
 * residual Add and SiLU's or a squeeze-and-excitation's Mul (QLinearAdd, QLinearMul), a
 * Sigmoid or another elementwise function of one input (a lookup table of the 256
 * codes; x * sigmoid(x) one table), Concat (the codes, requantized where an input's
 * parameters differ), MaxPool (the codes themselves, its output quantized as its
 * input), average pooling (QLinearGlobalAveragePool, also of a ReduceMean over the
 * spatial dims; QLinearAveragePool) and the ops that only move elements (Flatten,
 * Reshape, Squeeze, Unsqueeze, Transpose, Slice: the codes, quantized as their input).
 * Left float32, such an op costs a DequantizeLinear, the op and a QuantizeLinear where
 * it could be one pass over bytes: EfficientNet-B0 quantized with only its convolutions
 * quantized ran slower than in float32. So, as onnxruntime's quantizer does, such an op
 * whose inputs are all quantized activations is quantized too: its output gets a QDQ
 * pair (removing a Relu after it as after a convolution). */
typedef enum carry {
  CARRY_NO,
  CARRY_OWN, /* its output quantized with parameters of its own range */
  CARRY_SAME /* its output quantized with its input's parameters */
} carry;

static carry carrier(kl_op op) {
  switch (op) {
  case KL_OP_Add: case KL_OP_Mul: case KL_OP_Concat: case KL_OP_GlobalAveragePool:
  case KL_OP_AveragePool: case KL_OP_Sigmoid: case KL_OP_Tanh: case KL_OP_HardSigmoid:
  case KL_OP_HardSwish: case KL_OP_LeakyRelu: case KL_OP_Elu: case KL_OP_Softplus:
  case KL_OP_Gelu:
    return CARRY_OWN;
  case KL_OP_MaxPool: case KL_OP_Flatten: case KL_OP_Reshape: case KL_OP_Squeeze:
  case KL_OP_Unsqueeze: case KL_OP_Transpose: case KL_OP_Slice:
    return CARRY_SAME;
  case KL_OP_ReduceMean: /* when it is a global average pool (carrier_why_not) */
    return CARRY_OWN;
  default: return CARRY_NO;
  }
}

/* The number of node n's inputs that carry data (the rest are shapes and axes). */
static int data_inputs(const kl_node *n) {
  if (n->op == KL_OP_Add || n->op == KL_OP_Mul) return 2;
  if (n->op == KL_OP_Concat) return n->n_in;
  return 1;
}

/* Why carrier node n is not quantized, or NULL when it is (its data inputs all
 * observed float32 activations). */
static const char *carrier_why_not(const kl_quantizer *q, const kl_quant_options *o,
                                   const kl_node *n) {
  const kl_graph *g = q->g;
  if (excluded(o->exclude, n->name)) return "excluded (--exclude)";
  if (n->n_out < 1 || n->out[0] < 0 || (n->n_out > 1 && n->out[1] >= 0))
    return "a second output (MaxPool's indices)";
  if (is_graph_output(g, n->out[0])) return "its output is a model output";
  int k, count = data_inputs(n);
  if (n->n_in < count) return "missing input";
  for (k = 0; k < count; k++) {
    int v = n->in[k];
    if (v < 0 || g->values[v].type.dtype != KL_F32 || g->values[v].kind == KL_VALUE_CONST ||
        q->obs_of[v] < 0)
      return "an input is not a quantized activation";
  }
  if (n->op == KL_OP_Add || n->op == KL_OP_Mul) {
    const kl_type *y = &g->values[n->out[0]].type;
    bool fa, fb;
    if (!kl_rw_qbinary_fits(&g->values[n->in[0]].type, y, &fa) ||
        !kl_rw_qbinary_fits(&g->values[n->in[1]].type, y, &fb) || !(fa || fb))
      return "operand shapes the 8-bit kernel does not take";
  }
  if ((n->op == KL_OP_GlobalAveragePool || n->op == KL_OP_ReduceMean) &&
      g->values[n->in[0]].type.rank < 3)
    return "input of rank below 3";
  if (n->op == KL_OP_ReduceMean && kl_rw_global_pool_of(g, n) != KL_OP_GlobalAveragePool)
    return "a ReduceMean that is no global average pool";
  return NULL;
}

kiln_status kl_quantizer_create(const kl_graph *g, const kl_quant_options *o,
                                kl_quantizer **out, kl_err *e) {
  *out = NULL;
  if (o->method == KL_CALIB_PERCENTILE && o->percentile != 0 &&
      !(o->percentile > 0 && o->percentile <= 100))
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "percentile %g is not in (0, 100]",
                   o->percentile);
  kiln_status st = check_exclude(g, o->exclude, e);
  if (st != KILN_OK) return st;
  kl_quantizer *q = calloc(1, sizeof *q);
  if (!q) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  q->g = g;
  q->o = *o;
  q->o.exclude = NULL; /* read only here */
  size_t nn = (size_t)g->n_nodes + 1, nv = (size_t)g->n_values + 1;
  q->plan = calloc(nn, sizeof *q->plan);
  q->nodes = calloc(nn, sizeof *q->nodes);
  q->obs = calloc(2 * nn, sizeof *q->obs);
  q->obs_of = malloc(nv * sizeof(int));
  if (!q->plan || !q->nodes || !q->obs || !q->obs_of) {
    kl_quantizer_free(q);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (int v = 0; v < g->n_values; v++) q->obs_of[v] = -1;
  int quantized = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    node_plan *p = &q->plan[i];
    p->x_obs = p->y_obs = p->relu = -1;
    p->why = why_not(g, n, o);
    p->quant = p->why == NULL;
    q->nodes[i].name = n->name;
    q->nodes[i].op = kl_op_name(n->op);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    node_plan *p = &q->plan[i];
    if (!p->quant) continue;
    quantized++;
    if (o->dynamic) continue;
    const kl_node *n = &g->nodes[i];
    p->x_obs = add_obs(q, n->in[0], n->in[0]);
    int y = n->out[0];
    if (is_graph_output(g, y)) continue; /* a model output stays float32 */
    p->relu = removable_relu(g, y, o);
    if (p->relu >= 0) {
      p->y_obs = add_obs(q, g->nodes[p->relu].out[0], y);
      q->plan[p->relu].why = "removed: the uint8 QuantizeLinear after it (zero point 0) "
                             "clamps as it does";
    } else {
      p->y_obs = add_obs(q, y, y);
    }
  }
  /* the ops between them, in graph order: an op's inputs are observed before it */
  for (int i = 0; i < g->n_nodes && !o->dynamic && quantized > 0; i++) {
    const kl_node *n = &g->nodes[i];
    node_plan *p = &q->plan[i];
    carry c = carrier(n->op);
    if (c == CARRY_NO || p->quant || (p->why && strncmp(p->why, "removed", 7) == 0)) continue;
    if ((p->why = carrier_why_not(q, o, n)) != NULL) continue;
    p->quant = p->carrier = true;
    int y = n->out[0];
    if (c == CARRY_SAME) {
      int in_ob = q->obs_of[n->in[0]], ob = add_obs(q, y, y);
      if (ob != in_ob) q->obs[ob].same_as = in_ob;
      continue;
    }
    p->relu = removable_relu(g, y, o);
    if (p->relu >= 0) { /* the Relu's output may be observed already (a reader's input) */
      p->y_obs = add_obs(q, g->nodes[p->relu].out[0], y);
      q->obs[p->y_obs].src = y;
      q->plan[p->relu].why = "removed: the uint8 QuantizeLinear after it (zero point 0) "
                             "clamps as it does";
    } else {
      p->y_obs = add_obs(q, y, y);
    }
  }
  for (int i = 0; i < g->n_nodes; i++) {
    q->nodes[i].quantized = q->plan[i].quant;
    q->nodes[i].why = q->plan[i].why;
  }
  if (quantized == 0) {
    /* the first product kept float32 says why (weights of NaN read as if there were
     * none) */
    char first[512] = "";
    for (int i = 0; i < g->n_nodes && !first[0]; i++) {
      const kl_node *n = &g->nodes[i];
      if (n->op == KL_OP_Conv || n->op == KL_OP_MatMul || n->op == KL_OP_Gemm) {
        char who[320];
        snprintf(first, sizeof first, "; %s: %s", kl_node_describe(g, n, who, sizeof who),
                 q->plan[i].why);
      }
    }
    kl_quantizer_free(q);
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT,
                   "%s: nothing to quantize: no %s node with constant float32 weights "
                   "(and not excluded)%s",
                   g->source ? g->source : "model", o->dynamic ? "MatMul or Gemm" :
                   "Conv, MatMul or Gemm", first);
  }
  *out = q;
  return KILN_OK;
}

void kl_quantizer_free(kl_quantizer *q) {
  if (!q) return;
  kiln_session_free(q->cs);
  kiln_model_free(q->cm);
  kl_graph_free(q->cg);
  for (int i = 0; q->plan && i < q->g->n_nodes; i++) {
    node_plan *p = &q->plan[i];
    free(p->taps), free(p->gram), free(p->codes), free(p->scales);
  }
  free(q->plan);
  free(q->nodes);
  free(q->obs);
  free(q->obs_of);
  free(q->values);
  free(q);
}

int64_t kl_quantizer_batches(const kl_quantizer *q) { return q->batches; }

const kl_quant_node *kl_quantizer_nodes(const kl_quantizer *q, int *count) {
  *count = q->g->n_nodes;
  return q->nodes;
}

const kl_quant_value *kl_quantizer_values(const kl_quantizer *q, int *count) {
  *count = q->n_values;
  return q->values;
}

/* ---- calibration ---- */

static kiln_status make_session(kl_quantizer *q, kl_err *e) {
  q->cg = kl_graph_copy(q->g);
  if (!q->cg) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory copying the graph");
  kiln_status st = KILN_OK;
  for (int k = 0; k < q->n_obs && st == KILN_OK; k++) {
    int v = q->obs[k].v;
    for (int j = 0; j < q->cg->n_outputs; j++)
      if (q->cg->outputs[j] == v) q->obs[k].out_index = j;
    if (q->obs[k].out_index < 0) {
      q->obs[k].out_index = q->cg->n_outputs;
      st = kl_graph_add_output(q->cg, v, e);
    }
  }
  if (st != KILN_OK) return st;
  st = kl_model_wrap(q->cg, NULL, &q->cm);
  if (st != KILN_OK) return kl_fail(e, st, "calibration model: %s", kiln_model_error(q->cm));
  st = kiln_session_create(q->cm, NULL, &q->cs);
  if (st != KILN_OK)
    return kl_fail(e, st, "calibration session: %s", kiln_session_error(q->cs));
  return KILN_OK;
}

static void measure_error(observed *ob, const float *x, int64_t n, bool symmetric) {
  double qmin = symmetric ? -128 : 0, qmax = symmetric ? 127 : 255;
  for (int64_t i = 0; i < n; i++) {
    double v = nearbyintf(x[i] / ob->p.scale) + ob->p.zero_point;
    v = v < qmin ? qmin : v > qmax ? qmax : v;
    double d = (v - ob->p.zero_point) * ob->p.scale - x[i];
    ob->st.sum_sq += (double)x[i] * x[i];
    ob->st.err_sq += d * d;
  }
}

/* ---- bias correction ----
 *
 * Rounding a node's weights shifts each output channel's mean on the data by
 * sum_k (dq(Wq)[c, k] - W[c, k]) E[x_k], x_k the input under weight k; with few taps
 * per channel (a depthwise convolution's 9 or 25, BatchNorm folded into them) that
 * shift is much of the error the rounding adds: EfficientNet-Lite0's depthwise weights
 * alone, rounded per channel to 8 bits, moved its logits by 14% (relative L2) and
 * changed 9.5% of its top-1 classes; with their biases corrected 3.6% and 3%. So the
 * calibration sums the input under each weight (below), and the written bias is
 * B - shift (quantize_static_node). */

/* A Conv's placements as a 2-D one's (a 1-D convolution is one of height 1). */
typedef struct conv_geom {
  int64_t kernel[2], in[2], out[2], stride[2], dil[2], pad[2];
} conv_geom;

/* The input coordinate along spatial axis d that output o reads under kernel offset k,
 * or -1 in the padding (conv_taps' and conv_gram's placements). */
static int64_t conv_tap(const conv_geom *cg, int d, int64_t o, int64_t k) {
  int64_t i = o * cg->stride[d] - cg->pad[d] + k * cg->dil[d];
  return i >= 0 && i < cg->in[d] ? i : -1;
}

/* The geometry of Conv node n (weights of type wt) over x of dims (rank 3 or 4); false
 * for another rank or attributes it cannot read. */
static bool conv_geometry(const kl_node *n, const kl_type *wt, const int64_t *dims, int rank,
                          conv_geom *cg) {
  int nsp = rank - 2;
  if (nsp < 1 || nsp > 2 || wt->rank != rank) return false;
  *cg = (conv_geom){{1, 1}, {1, dims[2]}, {1, 1}, {1, 1}, {1, 1}, {0, 0}};
  kl_window w;
  kl_err e = {0};
  int64_t wk[2];
  for (int d = 0; d < nsp; d++) wk[d] = wt->dims[2 + d].size;
  if (kl_window_init(n, nsp, wk, &w, &e) != KILN_OK) return false;
  for (int d = 0; d < nsp; d++) {
    int a = 2 - nsp + d;
    int64_t o;
    if (kl_window_out(&w, d, dims[2 + d], &o, &e) != KILN_OK) return false;
    cg->kernel[a] = w.kernel[d], cg->in[a] = dims[2 + d], cg->out[a] = o;
    cg->stride[a] = w.stride[d], cg->dil[a] = w.dilation[d], cg->pad[a] = w.pad_begin[d];
  }
  return true;
}

/* Sums of x [N, C, H, W] (or [N, C, W]) under each of Conv node n's kernel offsets per
 * input channel into p->taps (C * kernel taps), counting the output placements. A
 * rank, auto_pad or shape it cannot read leaves the node uncorrected. */
static void conv_taps(node_plan *p, const kl_node *n, const kl_type *wt, const float *x,
                      const int64_t *dims, int rank) {
  conv_geom cg;
  if (!conv_geometry(n, wt, dims, rank, &cg)) return;
  const int64_t *kernel = cg.kernel, *in = cg.in, *out = cg.out;
  int64_t nb = dims[0], ch = dims[1], plane = in[0] * in[1], taps = kernel[0] * kernel[1];
  if (!p->taps) {
    p->taps = calloc((size_t)(ch * taps), sizeof *p->taps);
    if (!p->taps) return;
    p->n_taps = ch * taps;
  }
  if (p->n_taps != ch * taps) return;
  double *sum = malloc(sizeof *sum * (size_t)(plane ? plane : 1)); /* x summed over N */
  if (!sum) return;
  for (int64_t c = 0; c < ch; c++) {
    for (int64_t k = 0; k < plane; k++) sum[k] = 0;
    for (int64_t b = 0; b < nb; b++)
      for (int64_t k = 0; k < plane; k++) sum[k] += x[(b * ch + c) * plane + k];
    for (int64_t ki = 0; ki < kernel[0]; ki++)
      for (int64_t kj = 0; kj < kernel[1]; kj++) {
        double t = 0;
        for (int64_t oh = 0; oh < out[0]; oh++) {
          int64_t yy = conv_tap(&cg, 0, oh, ki);
          if (yy < 0) continue;
          for (int64_t ow = 0; ow < out[1]; ow++) {
            int64_t xx = conv_tap(&cg, 1, ow, kj);
            if (xx >= 0) t += sum[yy * in[1] + xx];
          }
        }
        p->taps[c * taps + ki * kernel[1] + kj] += t;
      }
  }
  free(sum);
  p->tap_count += nb * out[0] * out[1];
}

/* Gemm node n: the sums of A's columns (A [M, K], or [K, M] with transA). */
static void gemm_taps(node_plan *p, const kl_node *n, const float *a, const int64_t *dims,
                      int rank) {
  if (rank != 2) return;
  bool ta = kl_attr_int(n, "transA", 0) != 0;
  int64_t m = ta ? dims[1] : dims[0], k = ta ? dims[0] : dims[1];
  if (!p->taps) {
    p->taps = calloc((size_t)(k ? k : 1), sizeof *p->taps);
    if (!p->taps) return;
    p->n_taps = k;
  }
  if (p->n_taps != k) return;
  for (int64_t r = 0; r < m; r++)
    for (int64_t j = 0; j < k; j++) p->taps[j] += a[ta ? j * m + r : r * k + j];
  p->tap_count += m;
}

/* GPTQ's sums: at most GRAM_DIM inputs a group, GRAM_BYTES for all nodes, and at most
 * GRAM_ROWS placements a node from each calibration run (every k-th). */
#define GRAM_DIM 1536
#define GRAM_BYTES ((size_t)1 << 30)
#define GRAM_ROWS 4096

/* Node p's sums for groups blocks of dim x dim, made on the first run; false when they
 * would not fit (the node keeps nearest rounding). */
static bool gram_ready(kl_quantizer *q, node_plan *p, int64_t groups, int64_t dim) {
  if (p->gram_off) return false;
  if (p->gram) return p->gram_groups == groups && p->gram_dim == dim;
  size_t bytes = sizeof(double) * (size_t)groups * (size_t)dim * (size_t)dim;
  const char *why = NULL;
  if (dim <= 0 || groups <= 0) why = "no inputs under its weights";
  else if (dim > GRAM_DIM) why = "more than 1536 inputs under a group's weights";
  else if (bytes / (size_t)groups > GRAM_BYTES || q->gram_bytes + bytes > GRAM_BYTES)
    why = "GPTQ's sums over 1 GiB for the model";
  else if (!(p->gram = calloc(bytes, 1))) why = "out of memory for GPTQ's sums";
  if (why) {
    p->gram_off = true;
    p->gram_why = why;
    return false;
  }
  q->gram_bytes += bytes;
  p->gram_groups = groups, p->gram_dim = dim;
  return true;
}

/* v v^T into the upper triangle of the dim x dim block g. */
static void gram_add(double *g, const double *v, int64_t dim) {
  for (int64_t a = 0; a < dim; a++) {
    double va = v[a];
    if (va == 0) continue;
    double *row = g + a * dim;
    for (int64_t b = a; b < dim; b++) row[b] += va * v[b];
  }
}

/* Conv node n: each group's input patches (its input channels by kernel offsets, 0
 * outside the input), in the order of W's rows [C / group, k...]. */
static void conv_gram(kl_quantizer *q, node_plan *p, const kl_node *n, const kl_type *wt,
                      const float *x, const int64_t *dims, int rank) {
  conv_geom cg;
  int64_t group = kl_attr_int(n, "group", 1), ch = dims[1];
  if (!conv_geometry(n, wt, dims, rank, &cg) || group <= 0 || ch % group) {
    p->gram_why = "an input or weight shape GPTQ does not read";
    return;
  }
  int64_t cpg = ch / group, taps = cg.kernel[0] * cg.kernel[1], dim = cpg * taps;
  if (!gram_ready(q, p, group, dim)) return;
  double *v = malloc(sizeof *v * (size_t)dim);
  if (!v) {
    p->gram_why = "out of memory for GPTQ's sums";
    return;
  }
  int64_t per = cg.out[0] * cg.out[1], places = dims[0] * per;
  int64_t step = places > GRAM_ROWS ? (places + GRAM_ROWS - 1) / GRAM_ROWS : 1;
  for (int64_t at = 0; at < places; at += step) {
    int64_t b = at / per, oh = at % per / cg.out[1], ow = at % cg.out[1];
    for (int64_t gi = 0; gi < group; gi++) {
      for (int64_t ci = 0; ci < cpg; ci++) {
        const float *plane = x + (b * ch + gi * cpg + ci) * cg.in[0] * cg.in[1];
        for (int64_t ki = 0; ki < cg.kernel[0]; ki++)
          for (int64_t kj = 0; kj < cg.kernel[1]; kj++) {
            int64_t yy = conv_tap(&cg, 0, oh, ki), xx = conv_tap(&cg, 1, ow, kj);
            v[(ci * cg.kernel[0] + ki) * cg.kernel[1] + kj] =
                yy >= 0 && xx >= 0 ? plane[yy * cg.in[1] + xx] : 0;
          }
      }
      gram_add(p->gram + gi * dim * dim, v, dim);
    }
    p->gram_rows++;
  }
  free(v);
}

/* Gemm node n: the rows of A (columns of A with transA). */
static void gemm_gram(kl_quantizer *q, node_plan *p, const kl_node *n, const float *a,
                      const int64_t *dims, int rank) {
  if (rank != 2) {
    p->gram_why = "an input that is not a matrix";
    return;
  }
  bool ta = kl_attr_int(n, "transA", 0) != 0;
  int64_t m = ta ? dims[1] : dims[0], k = ta ? dims[0] : dims[1];
  if (!gram_ready(q, p, 1, k)) return;
  double *v = malloc(sizeof *v * (size_t)(k ? k : 1));
  if (!v) {
    p->gram_why = "out of memory for GPTQ's sums";
    return;
  }
  int64_t step = m > GRAM_ROWS ? (m + GRAM_ROWS - 1) / GRAM_ROWS : 1;
  for (int64_t r = 0; r < m; r += step) {
    for (int64_t j = 0; j < k; j++) v[j] = a[ta ? j * m + r : r * k + j];
    gram_add(p->gram, v, k);
    p->gram_rows++;
  }
  free(v);
}

/* After a calibration run: each quantized weight node's input sums, for bias correction
 * (taps) and GPTQ (gram). */
static kiln_status add_input_sums(kl_quantizer *q, kl_err *e) {
  for (int i = 0; i < q->g->n_nodes; i++) {
    node_plan *p = &q->plan[i];
    const kl_node *n = &q->g->nodes[i];
    if (!p->quant || p->carrier || p->x_obs < 0) continue;
    kiln_tensor_info info;
    const void *data;
    kiln_status st = kiln_session_get_output(q->cs, q->obs[p->x_obs].out_index, &info, &data);
    if (st != KILN_OK) return kl_fail(e, st, "%s", kiln_session_error(q->cs));
    const kl_type *wt = &q->g->values[n->in[1]].type;
    /* a MatMul's A [..., K] as rows of K (no bias to correct) */
    int64_t rows_k[2] = {1, info.rank > 0 ? info.dims[info.rank - 1] : 0};
    for (int d = 0; d + 1 < info.rank; d++) rows_k[0] *= info.dims[d];
    if (!q->o.no_bias_correction && n->op != KL_OP_MatMul) {
      if (n->op == KL_OP_Conv) conv_taps(p, n, wt, data, info.dims, info.rank);
      else gemm_taps(p, n, data, info.dims, info.rank);
    }
    if (q->o.gptq) {
      if (n->op == KL_OP_Conv) conv_gram(q, p, n, wt, data, info.dims, info.rank);
      else if (n->op == KL_OP_Gemm) gemm_gram(q, p, n, data, info.dims, info.rank);
      else if (info.rank >= 1 && wt->rank == 2) gemm_gram(q, p, n, data, rows_k, 2);
      else p->gram_why = "a weight that is not a matrix";
    }
  }
  return KILN_OK;
}

kiln_status kl_quantizer_run(kl_quantizer *q, int n, const char *const *names,
                             const kl_tensor *inputs, kl_err *e) {
  if (q->o.dynamic)
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT,
                   "dynamic quantization takes no calibration data");
  kiln_status st;
  if (!q->cs && (st = make_session(q, e)) != KILN_OK) return st;
  const kl_graph *g = q->g;
  for (int k = 0; k < g->n_inputs; k++) {
    const char *want = g->values[g->inputs[k]].name;
    int found = 0;
    for (int j = 0; j < n; j++) found += strcmp(names[j], want) == 0;
    if (found != 1)
      return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "model input '%s' %s", want,
                     found ? "given more than once" : "not given");
  }
  for (int j = 0; j < n; j++) { /* the session checks name, dtype and shape */
    const kl_tensor *t = &inputs[j];
    st = kiln_session_set_input(q->cs, names[j], (kiln_dtype)t->dtype, t->rank, t->dims,
                                t->data, kl_tensor_nbytes(t));
    if (st != KILN_OK) return kl_fail(e, st, "%s", kiln_session_error(q->cs));
    int64_t numel = kl_tensor_numel(t);
    if (t->dtype == KL_F32)
      for (int64_t i = 0; i < numel; i++)
        if (!isfinite(((const float *)t->data)[i]))
          return kl_fail(e, KILN_ERR_INVALID_ARGUMENT,
                         "input '%s': element %lld is %g (calibration data must be finite)",
                         names[j], (long long)i, (double)((const float *)t->data)[i]);
  }
  st = kiln_session_run(q->cs);
  if (st != KILN_OK) return kl_fail(e, st, "%s", kiln_session_error(q->cs));
  for (int k = 0; k < q->n_obs; k++) {
    observed *ob = &q->obs[k];
    kiln_tensor_info info;
    const void *data;
    st = kiln_session_get_output(q->cs, ob->out_index, &info, &data);
    if (st != KILN_OK) return kl_fail(e, st, "%s", kiln_session_error(q->cs));
    int64_t numel = 1;
    for (int d = 0; d < info.rank; d++) numel *= info.dims[d];
    const float *x = data;
    for (int64_t i = 0; i < numel; i++)
      if (!isfinite(x[i]))
        return kl_fail(e, KILN_ERR_INVALID_ARGUMENT,
                       "value '%s' holds %g at element %lld on this batch: it cannot be "
                       "quantized", g->values[ob->v].name, (double)x[i], (long long)i);
    if (q->computed) measure_error(ob, x, numel, q->o.symmetric);
    else kl_stats_add(&ob->st, x, numel);
  }
  if (!q->computed && (!q->o.no_bias_correction || q->o.gptq) &&
      (st = add_input_sums(q, e)) != KILN_OK)
    return st;
  if (!q->computed) q->batches++;
  return KILN_OK;
}

/* ---- scales ---- */

/* The channel axis of node n's weights and their count. */
static int weight_axis(const kl_graph *g, const kl_node *n) {
  if (n->op == KL_OP_Conv) return 0;
  if (n->op == KL_OP_Gemm && kl_attr_int(n, "transB", 0)) return 0;
  (void)g;
  return 1;
}

/* Whether node n's weights get a scale per output channel (kl_quant_options). */
static bool channel_scales(const kl_quantizer *q, const kl_node *n) {
  if (q->o.per_channel) return true;
  const kl_value *w = &q->g->values[n->in[1]];
  return q->o.depthwise_per_channel && n->op == KL_OP_Conv && kl_attr_int(n, "group", 1) > 1 &&
         w->type.rank >= 2 && w->type.dims[1].size == 1;
}

typedef struct qweights {
  int8_t *q;
  float *scales;
  int n_scales, axis;
  int64_t numel;
  bool per_channel;
} qweights;

/* Why node p's weights were not (all) GPTQ-rounded, for the report. */
static void rounding_note(node_plan *p, const char *why) {
  snprintf(p->rounding_why, sizeof p->rounding_why, "%s", why);
}

static const char zero_input_note[] = "its input was zero on all the calibration data";

/* Whether the dim x dim sums h are all zero (their diagonal: sums of squares). */
static bool zero_input(const double *h, int64_t dim) {
  for (int64_t j = 0; j < dim; j++)
    if (h[j * dim + j] != 0) return false;
  return true;
}

/* GPTQ: node n's codes in w (nearest ones, with their scales) rounded again group by
 * group against its inputs' sums (a group whose sums are not positive definite keeps
 * them; p->gptq and p->rounding_why say so). Its weights' rows: a Conv's [M, C / group, k...]
 * rows, a Gemm's columns of W [K, N] (rows of W [N, K] with transB). False when memory
 * ran out. */
static bool gptq_weights(const kl_quantizer *q, const kl_node *n, node_plan *p, qweights *w) {
  const kl_value *v = &q->g->values[n->in[1]];
  const float *f = v->data;
  float qmax = q->o.reduce_range ? 64.0f : 127.0f;
  int64_t dim = p->gram_dim, groups = p->gram_groups;
  int64_t rows = w->numel / dim, per_group = rows / groups;
  int64_t step = w->n_scales > 1 ? 1 : 0;
  if (rows * dim != w->numel || per_group * groups != rows) {
    rounding_note(p, "GPTQ's sums do not match the weights' shape");
    return true;
  }
  if (n->op == KL_OP_Conv || kl_attr_int(n, "transB", 0)) {
    /* a group whose input was zero on all the data (a channel a ReLU always zeroed)
     * computes zero whatever its codes: nearest ones, and nothing to say */
    int64_t done = 0, silent = 0;
    for (int64_t gi = 0; gi < groups; gi++) {
      if (zero_input(p->gram + gi * dim * dim, dim)) {
        silent++;
        continue;
      }
      done += kl_gptq_round(f + gi * per_group * dim, per_group, dim,
                            w->scales + gi * per_group * step, step, qmax,
                            p->gram + gi * dim * dim, w->q + gi * per_group * dim);
    }
    p->gptq = done > 0;
    if (!done && silent == groups)
      rounding_note(p, zero_input_note);
    else if (done + silent < groups)
      snprintf(p->rounding_why, sizeof p->rounding_why, "nearest in %lld of %lld groups: their "
               "input sums are not positive definite (or memory ran out)",
               (long long)(groups - done - silent), (long long)groups);
    return true;
  }
  if (zero_input(p->gram, dim)) {
    rounding_note(p, zero_input_note);
    return true;
  }
  /* W [K, N]: its columns as rows */
  float *t = malloc(sizeof *t * (size_t)w->numel);
  int8_t *c = malloc((size_t)w->numel);
  bool ok = t && c;
  if (ok) {
    for (int64_t r = 0; r < rows; r++)
      for (int64_t j = 0; j < dim; j++) t[r * dim + j] = f[j * rows + r], c[r * dim + j] = w->q[j * rows + r];
    if ((p->gptq = kl_gptq_round(t, rows, dim, w->scales, step, qmax, p->gram, c)))
      for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < dim; j++) w->q[j * rows + r] = c[r * dim + j];
    else
      rounding_note(p, "its input sums are not positive definite (or memory ran out)");
  }
  free(t), free(c);
  return ok;
}

/* The largest |bias| in steps of sx * sw[c] the written int32 bias may take: 2^30, so
 * that the kernels' int32 sums (bias plus products) keep room for the products. */
#define BIAS_STEPS 1073741824.0

/* Static: node n's float bias in int32 steps of sx * sw[c] must fit BIAS_STEPS. A
 * channel whose weights are tiny next to its bias (a dead channel after BatchNorm
 * folding: weights ~1e-6, bias -7; EfficientNet-Lite0's stem) would otherwise
 * saturate: its scale is raised to |b| / (sx * BIAS_STEPS) and its weights rounded
 * again to the nearest codes at it (few of them not 0). One scale per tensor rises for
 * all. onnxruntime's quantize_static raises such scales likewise. */
static void fit_bias(const kl_quantizer *q, const kl_node *n, qweights *w) {
  const node_plan *p = &q->plan[n - q->g->nodes];
  int b = n->n_in > 2 ? n->in[2] : KL_ABSENT;
  if (q->o.dynamic || p->x_obs < 0 || !is_const_f32(q->g, b, 1, 1) ||
      (n->op == KL_OP_Gemm && kl_attr_float(n, "beta", 1) != 1.0f))
    return;
  int64_t channels = q->g->values[b].type.dims[0].size;
  const float *bf = q->g->values[b].data, *f = q->g->values[n->in[1]].data;
  const kl_value *v = &q->g->values[n->in[1]];
  if (channels != v->type.dims[w->axis].size) return;
  double sx = q->obs[p->x_obs].p.scale, qmax = q->o.reduce_range ? 64 : 127;
  if (!(sx > 0)) return;
  int64_t inner = 1;
  for (int d = w->axis + 1; d < v->type.rank; d++) inner *= v->type.dims[d].size;
  for (int s = 0; s < w->n_scales; s++) {
    double need = 0;
    for (int64_t c = 0; c < channels; c++)
      if (w->n_scales == 1 || c == s) need = fmax(need, fabs(bf[c]) / (sx * BIAS_STEPS));
    if (!(need > w->scales[s]) || !isfinite(need)) continue;
    w->scales[s] = (float)need * 1.0000001f; /* float rounding must not undo it */
    for (int64_t k = 0; k < w->numel; k++) {
      if (w->n_scales > 1 && (k / inner) % w->n_scales != s) continue;
      double c = nearbyint(f[k] / w->scales[s]);
      w->q[k] = (int8_t)(c > qmax ? qmax : c < -qmax ? -qmax : c);
    }
  }
}

static kiln_status quantize_node_weights(const kl_quantizer *q, const kl_node *n, qweights *w,
                                         kl_err *e) {
  const kl_value *v = &q->g->values[n->in[1]];
  w->axis = weight_axis(q->g, n);
  w->numel = (int64_t)(v->nbytes / sizeof(float));
  w->per_channel = channel_scales(q, n);
  w->n_scales = w->per_channel ? (int)v->type.dims[w->axis].size : 1;
  int64_t dims[KL_MAX_RANK];
  for (int d = 0; d < v->type.rank; d++) dims[d] = v->type.dims[d].size;
  w->q = malloc((size_t)w->numel + 1);
  w->scales = malloc(sizeof(float) * (size_t)(w->n_scales + 1));
  if (!w->q || !w->scales) {
    free(w->q), free(w->scales);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory quantizing '%s'", v->name);
  }
  node_plan *p = &q->plan[n - q->g->nodes];
  if (p->codes) { /* kl_quantizer_compute's (its rounding in p too) */
    memcpy(w->q, p->codes, (size_t)w->numel);
    memcpy(w->scales, p->scales, sizeof(float) * (size_t)w->n_scales);
    return KILN_OK;
  }
  p->gptq = false;
  p->rounding_why[0] = 0;
  kl_quantize_weights(v->data, v->type.rank, dims, w->axis, w->per_channel,
                      q->o.reduce_range, w->scales, w->q);
  if (q->o.gptq) {
    if (p->gram && p->gram_rows > 0) {
      if (!gptq_weights(q, n, p, w)) {
        free(w->q), free(w->scales);
        return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory rounding '%s'", v->name);
      }
    } else {
      rounding_note(p, p->gram_why ? p->gram_why
                       : p->gram   ? "no placements of its input in the calibration data"
                                   : "its input was not observed");
    }
  }
  fit_bias(q, n, w);
  return KILN_OK;
}

static void fill_error(kl_quant_value *r, double sum_sq, double err_sq) {
  r->sqnr_db = err_sq > 0 ? 10 * log10(sum_sq / err_sq) : INFINITY;
  r->rel_l2 = sum_sq > 0 ? sqrt(err_sq / sum_sq) : 0;
}

kiln_status kl_quantizer_compute(kl_quantizer *q, kl_err *e) {
  if (!q->o.dynamic && q->batches == 0)
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "no calibration data was run");
  free(q->values);
  q->n_values = 0;
  q->values = calloc((size_t)(q->n_obs + q->g->n_nodes + 1), sizeof *q->values);
  if (!q->values) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int k = 0; k < q->n_obs; k++) {
    observed *ob = &q->obs[k];
    kl_quant_value *r = &q->values[q->n_values++];
    kl_stats_range(&ob->st, q->o.method, q->o.percentile, &r->lo, &r->hi);
    ob->p = kl_qparam_activation(r->lo, r->hi, q->o.symmetric);
    ob->st.sum_sq = ob->st.err_sq = 0;
  }
  /* a value quantized as another (a MaxPool's or a move's output as its input): that
   * one's parameters, along the chain (a link goes from a node's output to its input,
   * against the graph's edges, so no chain loops) */
  for (int k = 0; k < q->n_obs; k++) {
    int src = k;
    for (int steps = 0; q->obs[src].same_as >= 0 && steps < q->n_obs; steps++)
      src = q->obs[src].same_as;
    if (src == k) continue;
    q->obs[k].p = q->obs[src].p;
    q->values[k].lo = q->values[src].lo;
    q->values[k].hi = q->values[src].hi;
  }
  for (int k = 0; k < q->n_obs; k++) {
    observed *ob = &q->obs[k];
    kl_quant_value *r = &q->values[k];
    r->name = q->g->values[ob->v].name;
    r->scale = r->scale_max = ob->p.scale;
    r->zero_point = ob->p.zero_point;
    r->min = ob->st.min;
    r->max = ob->st.max;
    r->sqnr_db = r->rel_l2 = NAN;
  }
  for (int i = 0; i < q->g->n_nodes; i++) {
    if (!q->plan[i].quant || q->plan[i].carrier) continue;
    const kl_node *n = &q->g->nodes[i];
    const kl_value *v = &q->g->values[n->in[1]];
    qweights w;
    kiln_status st = quantize_node_weights(q, n, &w, e);
    if (st != KILN_OK) return st;
    kl_quant_value *r = &q->values[q->n_values++];
    r->name = v->name;
    r->weight = true;
    r->scale = INFINITY;
    r->scale_max = 0;
    for (int c = 0; c < w.n_scales; c++) {
      r->scale = fminf(r->scale, w.scales[c]);
      r->scale_max = fmaxf(r->scale_max, w.scales[c]);
    }
    /* the error: w[k] against q[k] * its channel's scale */
    const float *f = v->data;
    int64_t inner = 1;
    for (int d = w.axis + 1; d < v->type.rank; d++) inner *= v->type.dims[d].size;
    double sum_sq = 0, err_sq = 0;
    r->min = INFINITY, r->max = -INFINITY;
    for (int64_t k = 0; k < w.numel; k++) {
      int c = w.n_scales > 1 ? (int)((k / inner) % w.n_scales) : 0;
      double d = (double)w.q[k] * w.scales[c] - f[k];
      sum_sq += (double)f[k] * f[k];
      err_sq += d * d;
      r->min = fmin(r->min, f[k]);
      r->max = fmax(r->max, f[k]);
    }
    r->lo = r->min, r->hi = r->max;
    fill_error(r, sum_sq, err_sq);
    node_plan *p = &q->plan[i];
    r->rounding = p->gptq ? "gptq" : "nearest";
    snprintf(r->rounding_why, sizeof r->rounding_why, "%s", p->rounding_why);
    free(p->codes), free(p->scales);
    p->codes = w.q, p->scales = w.scales; /* for kl_quantizer_graph */
  }
  q->computed = true;
  return KILN_OK;
}

/* The error pass's results into the report (kl_quantizer_graph calls it). */
static void report_errors(kl_quantizer *q) {
  for (int k = 0; k < q->n_obs; k++)
    if (q->obs[k].st.sum_sq > 0 || q->obs[k].st.err_sq > 0)
      fill_error(&q->values[k], q->obs[k].st.sum_sq, q->obs[k].st.err_sq);
}

/* ---- the rewrite ---- */

/* A fresh value named base + suffix (made unique with a number). */
static int new_value(kl_graph *h, const char *base, const char *suffix, kl_err *e) {
  char name[512];
  snprintf(name, sizeof name, "%s%s", base, suffix);
  for (int k = 2; kl_graph_find_value(h, name) >= 0; k++)
    snprintf(name, sizeof name, "%s%s_%d", base, suffix, k);
  return kl_graph_add_value(h, name, e);
}

static int new_const(kl_graph *h, const char *base, const char *suffix, kl_dtype dt, int rank,
                     const int64_t *dims, const void *src, kl_err *e) {
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) numel *= dims[d];
  size_t bytes = (size_t)numel * kl_dtype_size(dt);
  void *data = malloc(bytes ? bytes : 1);
  if (!data) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
  memcpy(data, src, bytes);
  char name[512];
  snprintf(name, sizeof name, "%s%s", base, suffix);
  for (int k = 2; kl_graph_find_value(h, name) >= 0; k++)
    snprintf(name, sizeof name, "%s%s_%d", base, suffix, k);
  return kl_graph_add_const(h, name, dt, rank, dims, data, bytes, false, e);
}

static int add_node(kl_graph *h, kl_op op, const char *name, int n_in, const int *in,
                    int n_out, const int *out, kl_err *e) {
  char nm[512];
  snprintf(nm, sizeof nm, "%s", name);
  return kl_graph_add_node(h, op, nm, n_in, in, n_out, out, e);
}

/* Every reader of `from` in h but node `except` reads `to` instead. */
static void redirect(kl_graph *h, int from, int to, int except) {
  for (int i = 0; i < h->n_nodes; i++) {
    if (i == except) continue;
    for (int k = 0; k < h->nodes[i].n_in; k++)
      if (h->nodes[i].in[k] == from) h->nodes[i].in[k] = to;
  }
}

/* The QDQ pair of observed value ob. */
static kiln_status insert_qdq(kl_graph *h, const observed *ob, bool symmetric, kl_err *e) {
  const char *name = h->values[ob->v].name;
  int8_t zi = (int8_t)ob->p.zero_point;
  uint8_t zu = (uint8_t)ob->p.zero_point;
  int s = new_const(h, name, "_scale", KL_F32, 0, NULL, &ob->p.scale, e);
  int z = s < 0 ? -1 : new_const(h, name, "_zero_point", symmetric ? KL_I8 : KL_U8, 0, NULL,
                                 symmetric ? (const void *)&zi : (const void *)&zu, e);
  int qv = z < 0 ? -1 : new_value(h, name, "_quantized", e);
  int dq = qv < 0 ? -1 : new_value(h, name, "_dequantized", e);
  if (dq < 0) return e->code;
  char nm[512];
  snprintf(nm, sizeof nm, "%s_QuantizeLinear", name);
  int qn = add_node(h, KL_OP_QuantizeLinear, nm, 3, (int[]){ob->src, s, z}, 1, &qv, e);
  if (qn < 0) return e->code;
  redirect(h, ob->v, dq, qn);
  snprintf(nm, sizeof nm, "%s_DequantizeLinear", name);
  if (add_node(h, KL_OP_DequantizeLinear, nm, 3, (int[]){qv, s, z}, 1, &dq, e) < 0)
    return e->code;
  return KILN_OK;
}

/* DequantizeLinear(cq, scale, zp) of a new constant; returns its output. axis < 0:
 * per tensor. */
static int dq_const(kl_graph *h, const char *base, int cq, const float *scales, int n_scales,
                    int axis, bool int8_zp, kl_err *e) {
  int64_t sd = n_scales;
  int rank = axis >= 0 ? 1 : 0;
  int s = new_const(h, base, "_scale", KL_F32, rank, &sd, scales, e);
  if (s < 0) return -1;
  int in[3] = {cq, s, KL_ABSENT}, n_in = 2;
  if (int8_zp) {
    int8_t *zeros = calloc((size_t)n_scales, 1);
    if (!zeros) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
    in[2] = new_const(h, base, "_zero_point", KL_I8, rank, &sd, zeros, e);
    free(zeros);
    if (in[2] < 0) return -1;
    n_in = 3;
  }
  int out = new_value(h, base, "_dequantized", e);
  if (out < 0) return -1;
  char nm[512];
  snprintf(nm, sizeof nm, "%s_DequantizeLinear", base);
  int dn = add_node(h, KL_OP_DequantizeLinear, nm, n_in, in, 1, &out, e);
  if (dn < 0) return -1;
  if (axis >= 0 && kl_node_set_int(h, dn, "axis", axis, e) != KILN_OK) return -1;
  return out;
}

/* Bias correction: the mean shift node i's rounded weights w add to each of its
 * `channels` outputs on the calibration data, into shift; false when it has no sums
 * (or they do not match its weights). */
static bool weight_shift(const kl_quantizer *q, int i, const qweights *w, int64_t channels,
                         double *shift) {
  const node_plan *p = &q->plan[i];
  const kl_node *n = &q->g->nodes[i];
  const kl_value *v = &q->g->values[n->in[1]];
  const float *f = v->data;
  if (!p->taps || p->tap_count <= 0 || channels <= 0) return false;
  int64_t per = w->numel / channels; /* weights per output channel */
  if (per * channels != w->numel) return false;
  if (n->op == KL_OP_Conv) { /* W [M, C / group, k...], taps [C, k...] */
    int64_t group = kl_attr_int(n, "group", 1);
    if (group <= 0 || channels % group || per * group != p->n_taps) return false;
    for (int64_t c = 0; c < channels; c++) {
      const double *x = p->taps + c / (channels / group) * per;
      float sc = w->scales[w->n_scales > 1 ? c : 0];
      double t = 0;
      for (int64_t j = 0; j < per; j++)
        t += ((double)w->q[c * per + j] * sc - f[c * per + j]) * x[j];
      shift[c] = t / (double)p->tap_count;
    }
    return true;
  }
  bool tb = kl_attr_int(n, "transB", 0) != 0; /* Gemm: W [N, K] (transB) or [K, N] */
  if (per != p->n_taps) return false;
  for (int64_t c = 0; c < channels; c++) {
    float sc = w->scales[w->n_scales > 1 ? c : 0];
    double t = 0;
    for (int64_t j = 0; j < per; j++) {
      int64_t k = tb ? c * per + j : j * channels + c;
      t += ((double)w->q[k] * sc - f[k]) * p->taps[j];
    }
    shift[c] = t / (double)p->tap_count;
  }
  return true;
}

/* Static: node i's weights (and bias) through DequantizeLinear of int8 (int32) ones. */
static kiln_status quantize_static_node(kl_quantizer *q, kl_graph *h, int i, kl_err *e) {
  const kl_node *n = &q->g->nodes[i];
  const kl_value *wv = &q->g->values[n->in[1]];
  qweights w;
  kiln_status st = quantize_node_weights(q, n, &w, e);
  if (st != KILN_OK) return st;
  int64_t dims[KL_MAX_RANK];
  for (int d = 0; d < wv->type.rank; d++) dims[d] = wv->type.dims[d].size;
  int wq = new_const(h, wv->name, "_quantized", KL_I8, wv->type.rank, dims, w.q, e);
  int wdq = wq < 0 ? -1
                   : dq_const(h, wv->name, wq, w.scales, w.n_scales,
                              w.per_channel ? w.axis : -1, true, e);
  if (wdq < 0) goto fail;
  h->nodes[i].in[1] = wdq;
  /* the bias, 1-D over the output channels, at scale sx * sw[c] in int32, less the
   * shift the rounding adds (bias correction; a bias made for it where there was none) */
  int b = n->n_in > 2 ? n->in[2] : KL_ABSENT;
  int64_t channels = wv->type.dims[weight_axis(q->g, n)].size;
  bool beta1 = n->op != KL_OP_Gemm || kl_attr_float(n, "beta", 1) == 1.0f;
  bool has_b = is_const_f32(q->g, b, 1, 1) && q->g->values[b].type.dims[0].size == channels &&
               beta1;
  double *shift = NULL;
  if (!q->o.no_bias_correction && (has_b || (b == KL_ABSENT && beta1))) {
    shift = malloc(sizeof *shift * (size_t)(channels > 0 ? channels : 1));
    if (!shift) {
      kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      goto fail;
    }
    if (!weight_shift(q, i, &w, channels, shift)) free(shift), shift = NULL;
  }
  if (has_b || shift) {
    const float *bf = has_b ? q->g->values[b].data : NULL;
    char base[384]; /* new_const adds its suffix to it within 512 */
    snprintf(base, sizeof base, "%s%s", has_b ? q->g->values[b].name : wv->name,
             has_b ? "" : "_bias");
    float sx = q->obs[q->plan[i].x_obs].p.scale;
    float *bs = malloc(sizeof(float) * (size_t)channels);
    int32_t *bq = malloc(sizeof(int32_t) * (size_t)channels);
    if (!bs || !bq) {
      free(bs), free(bq), free(shift);
      kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      goto fail;
    }
    for (int64_t c = 0; c < channels; c++) {
      bs[c] = sx * w.scales[w.n_scales > 1 ? c : 0];
      double v = nearbyint(((bf ? bf[c] : 0) - (shift ? shift[c] : 0)) / bs[c]);
      bq[c] = v > INT32_MAX ? INT32_MAX : v < -INT32_MAX ? -INT32_MAX : (int32_t)v;
    }
    free(shift);
    int cq = new_const(h, base, "_quantized", KL_I32, 1, &channels, bq, e);
    int bdq = cq < 0 ? -1 : dq_const(h, base, cq, bs, (int)channels, 0, false, e);
    free(bs), free(bq);
    if (bdq < 0 || kl_rw_set_input(h, i, 2, bdq, e) != KILN_OK) goto fail;
  }
  free(w.q), free(w.scales);
  return KILN_OK;
fail:
  free(w.q), free(w.scales);
  return e->code ? e->code : KILN_ERR_INTERNAL;
}

/* Dynamic: node i (MatMul or Gemm) into DynamicQuantizeLinear, MatMulInteger, Cast,
 * the scale Mul and the bias Add; y stays the value it wrote. */
static kiln_status quantize_dynamic_node(kl_quantizer *q, kl_graph *h, int i, kl_err *e) {
  const kl_node *n = &q->g->nodes[i];
  const kl_value *wv = &q->g->values[n->in[1]];
  bool trans = n->op == KL_OP_Gemm && kl_attr_int(n, "transB", 0);
  int64_t rows = wv->type.dims[0].size, cols = wv->type.dims[1].size;
  int64_t K = trans ? cols : rows, N = trans ? rows : cols;
  float *wt = malloc(sizeof(float) * (size_t)(K * N + 1));
  int8_t *wq = malloc((size_t)(K * N + 1));
  float *ws = malloc(sizeof(float) * (size_t)(N + 1));
  int8_t *wz = calloc((size_t)(N + 1), 1);
  kiln_status st = KILN_OK;
  if (!wt || !wq || !ws || !wz) {
    st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  const float *src = wv->data;
  for (int64_t k = 0; k < K; k++)
    for (int64_t j = 0; j < N; j++) wt[k * N + j] = trans ? src[j * K + k] : src[k * N + j];
  int64_t dims[2] = {K, N};
  kl_quantize_weights(wt, 2, dims, 1, q->o.per_channel, q->o.reduce_range, ws, wq);
  int ns = q->o.per_channel ? (int)N : 1;
  int64_t sd = ns;
  int srank = q->o.per_channel ? 1 : 0;
  const char *xn = h->values[n->in[0]].name, *wn = wv->name;
  int y = n->out[0];
  int c_wq = new_const(h, wn, "_quantized", KL_I8, 2, dims, wq, e);
  int c_wz = c_wq < 0 ? -1 : new_const(h, wn, "_zero_point", KL_I8, srank, &sd, wz, e);
  int c_ws = c_wz < 0 ? -1 : new_const(h, wn, "_scale", KL_F32, srank, &sd, ws, e);
  int xq = c_ws < 0 ? -1 : new_value(h, xn, "_quantized", e);
  int xs = xq < 0 ? -1 : new_value(h, xn, "_scale", e);
  int xz = xs < 0 ? -1 : new_value(h, xn, "_zero_point", e);
  int yi = xz < 0 ? -1 : new_value(h, h->values[y].name, "_int32", e);
  int yf = yi < 0 ? -1 : new_value(h, h->values[y].name, "_float", e);
  int sc = yf < 0 ? -1 : new_value(h, h->values[y].name, "_scale", e);
  int dummy = sc < 0 ? -1 : new_value(h, h->values[y].name, "_unquantized", e);
  if (dummy < 0) {
    st = e->code;
    goto done;
  }
  /* the float node writes a value nobody reads (compact removes it); y is the new one's */
  h->nodes[i].out[0] = dummy;
  h->values[dummy].producer = i;
  h->values[y].producer = -1;
  char nm[512];
  const char *base = n->name[0] ? n->name : h->values[y].name;
  int xin = n->in[0];
  snprintf(nm, sizeof nm, "%s_DynamicQuantizeLinear", base);
  if (add_node(h, KL_OP_DynamicQuantizeLinear, nm, 1, &xin, 3, (int[]){xq, xs, xz}, e) < 0)
    goto fail;
  snprintf(nm, sizeof nm, "%s_MatMulInteger", base);
  if (add_node(h, KL_OP_MatMulInteger, nm, 4, (int[]){xq, c_wq, xz, c_wz}, 1, &yi, e) < 0)
    goto fail;
  snprintf(nm, sizeof nm, "%s_Cast", base);
  int cast = add_node(h, KL_OP_Cast, nm, 1, &yi, 1, &yf, e);
  if (cast < 0 || kl_node_set_int(h, cast, "to", KL_F32, e) != KILN_OK) goto fail;
  snprintf(nm, sizeof nm, "%s_scale_Mul", base);
  if (add_node(h, KL_OP_Mul, nm, 2, (int[]){xs, c_ws}, 1, &sc, e) < 0) goto fail;
  int c = n->op == KL_OP_Gemm && n->n_in > 2 ? n->in[2] : KL_ABSENT;
  int prod = y;
  if (c >= 0 && (prod = new_value(h, h->values[y].name, "_nobias", e)) < 0) goto fail;
  snprintf(nm, sizeof nm, "%s_output_Mul", base);
  if (add_node(h, KL_OP_Mul, nm, 2, (int[]){yf, sc}, 1, &prod, e) < 0) goto fail;
  if (c >= 0) {
    float beta = kl_attr_float(n, "beta", 1);
    if (beta != 1.0f) {
      int bb = new_const(h, base, "_beta", KL_F32, 0, NULL, &beta, e);
      int cb = bb < 0 ? -1 : new_value(h, h->values[c].name, "_beta", e);
      snprintf(nm, sizeof nm, "%s_beta_Mul", base);
      if (cb < 0 || add_node(h, KL_OP_Mul, nm, 2, (int[]){c, bb}, 1, &cb, e) < 0) goto fail;
      c = cb;
    }
    snprintf(nm, sizeof nm, "%s_bias_Add", base);
    if (add_node(h, KL_OP_Add, nm, 2, (int[]){prod, c}, 1, &y, e) < 0) goto fail;
  }
  goto done;
fail:
  st = e->code ? e->code : KILN_ERR_INTERNAL;
done:
  free(wt), free(wq), free(ws), free(wz);
  return st;
}

kiln_status kl_quantizer_graph(kl_quantizer *q, kl_graph **out, kl_err *e) {
  *out = NULL;
  if (!q->computed) {
    kiln_status st = kl_quantizer_compute(q, e);
    if (st != KILN_OK) return st;
  }
  report_errors(q);
  kl_graph *h = kl_graph_copy(q->g);
  if (!h) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory copying the graph");
  kl_graph_uses_reset(h); /* node inputs are written directly below */
  kiln_status st = KILN_OK;
  int n_nodes = h->n_nodes; /* the float graph's: added nodes come after */
  for (int i = 0; i < n_nodes && st == KILN_OK; i++) {
    if (!q->plan[i].quant || q->plan[i].carrier) continue;
    st = q->o.dynamic ? quantize_dynamic_node(q, h, i, e) : quantize_static_node(q, h, i, e);
  }
  for (int k = 0; k < q->n_obs && st == KILN_OK; k++)
    st = insert_qdq(h, &q->obs[k], q->o.symmetric, e);
  kl_graph_uses_reset(h);
  if (st == KILN_OK) st = kl_graph_toposort(h, e);
  if (st == KILN_OK) st = kl_graph_compact(h, e);
  if (st == KILN_OK) st = kl_graph_infer(h, e);
  if (st == KILN_OK) st = kl_graph_verify(h, e);
  if (st != KILN_OK) {
    kl_err_prefix(e, "quantized graph");
    kl_graph_free(h);
    return st;
  }
  *out = h;
  return KILN_OK;
}
