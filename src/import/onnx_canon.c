/* Canonicalization: older opsets' forms of an op rewritten into the one form the IR
 * uses (the newest opset's). One rule per (op, opset range):
 *
 *   {"Squeeze", 13, canon_moves, {{"axes", 1, MOVE_I64_LIST}}}
 *
 * reads "below opset 13, Squeeze's 'axes' attribute becomes input 1 as an int64
 * list". Most changes in ONNX's history are of that kind (an attribute turned into an
 * input, or one that lost its meaning), and canon_moves handles them from the table
 * alone; ops whose meaning changed get a function of their own. Rules of one op are
 * listed with their `below` opsets ascending: the first that applies is used. */
#include "import/onnx_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum move_form {
  MOVE_DROP = 0,   /* the attribute has no meaning any more (inference): dropped */
  MOVE_I64_LIST,   /* INTS -> 1-D int64 tensor */
  MOVE_SCALAR_X,   /* FLOAT -> scalar of input 0's dtype (float32 when unknown) */
  MOVE_I64_ONE,    /* INT -> 1-D int64 tensor of one element */
  MOVE_F32_LIST,   /* FLOATS -> 1-D float32 tensor */
} move_form;

typedef struct move {
  const char *attr;
  int slot;        /* the input it becomes (unused for MOVE_DROP) */
  move_form form;
  bool required;   /* the old form required the attribute */
} move;

#define MAX_MOVES KL_ONNX_MAX_DROP

typedef struct rule rule;
typedef kiln_status (*canon_fn)(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r);

struct rule {
  const char *op;
  int64_t below; /* applies to default-domain opsets below this one */
  canon_fn fn;
  move moves[MAX_MOVES];
};

static kiln_status canon_moves(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r);
static kiln_status canon_coerce_2d(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r);
static kiln_status canon_batchnorm(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r);
static kiln_status canon_groupnorm(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r);
static kiln_status canon_resize_10(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r);
static kiln_status canon_grid_sample_16(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r);
static kiln_status canon_dft_17(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r);
static kiln_status canon_roi_align_10(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r);

static const rule rules[] = {
    {"Squeeze", 13, canon_moves, {{"axes", 1, MOVE_I64_LIST, false}}},
    {"Unsqueeze", 13, canon_moves, {{"axes", 1, MOVE_I64_LIST, true}}},
    {"Clip", 11, canon_moves,
     {{"min", 1, MOVE_SCALAR_X, false}, {"max", 2, MOVE_SCALAR_X, false}}},
    {"Dropout", 12, canon_moves, {{"ratio", 0, MOVE_DROP, false}}},
    /* before 13 they flattened the input to 2-D at `axis` (default 1) */
    {"Softmax", 13, canon_coerce_2d, {{"axis", 0, MOVE_DROP, false}}},
    {"LogSoftmax", 13, canon_coerce_2d, {{"axis", 0, MOVE_DROP, false}}},
    {"Hardmax", 13, canon_coerce_2d, {{"axis", 0, MOVE_DROP, false}}},
    /* every opset: attributes of opsets 1..8 and training-only outputs */
    {"BatchNormalization", KL_ONNX_MAX_OPSET + 1, canon_batchnorm,
     {{"spatial", 0, MOVE_DROP, false},
      {"is_test", 0, MOVE_DROP, false},
      {"consumed_inputs", 0, MOVE_DROP, false}}},
    /* Reduce*: axes became input 1 at opset 18 (ReduceSum at 13) */
    {"ReduceSum", 13, canon_moves, {{"axes", 1, MOVE_I64_LIST, false}}},
    {"ReduceMean", 18, canon_moves, {{"axes", 1, MOVE_I64_LIST, false}}},
    {"ReduceMax", 18, canon_moves, {{"axes", 1, MOVE_I64_LIST, false}}},
    {"ReduceMin", 18, canon_moves, {{"axes", 1, MOVE_I64_LIST, false}}},
    {"ReduceProd", 18, canon_moves, {{"axes", 1, MOVE_I64_LIST, false}}},
    {"ReduceL1", 18, canon_moves, {{"axes", 1, MOVE_I64_LIST, false}}},
    {"ReduceL2", 18, canon_moves, {{"axes", 1, MOVE_I64_LIST, false}}},
    {"ReduceLogSum", 18, canon_moves, {{"axes", 1, MOVE_I64_LIST, false}}},
    {"ReduceLogSumExp", 18, canon_moves, {{"axes", 1, MOVE_I64_LIST, false}}},
    {"ReduceSumSquare", 18, canon_moves, {{"axes", 1, MOVE_I64_LIST, false}}},
    {"TopK", 10, canon_moves, {{"k", 1, MOVE_I64_ONE, true}}},
    {"InstanceNormalization", 6, canon_moves, {{"consumed_inputs", 0, MOVE_DROP, false}}},
    /* before 21, scale and bias had one value per group */
    {"GroupNormalization", 21, canon_groupnorm, {{NULL, 0, MOVE_DROP, false}}},
    {"Slice", 10, canon_moves,
     {{"starts", 1, MOVE_I64_LIST, true},
      {"ends", 2, MOVE_I64_LIST, true},
      {"axes", 3, MOVE_I64_LIST, false}}},
    {"Split", 13, canon_moves, {{"split", 1, MOVE_I64_LIST, false}}},
    {"Pad", 2, canon_moves,
     {{"paddings", 1, MOVE_I64_LIST, true}, {"value", 2, MOVE_SCALAR_X, false}}},
    {"Pad", 11, canon_moves,
     {{"pads", 1, MOVE_I64_LIST, true}, {"value", 2, MOVE_SCALAR_X, false}}},
    /* Upsample (every opset; renamed by kl_onnx_canon_alias) and Resize-10: scales at
     * input 2, asymmetric coordinates, their own nearest rounding */
    {"Upsample", KL_ONNX_MAX_OPSET + 1, canon_resize_10, {{"scales", 2, MOVE_F32_LIST, false}}},
    {"Resize", 11, canon_resize_10, {{"scales", 2, MOVE_F32_LIST, false}}},
    /* before 20, GridSample's modes were named bilinear and bicubic */
    {"GridSample", 20, canon_grid_sample_16, {{NULL, 0, MOVE_DROP, false}}},
    /* before 20, DFT's axis was an attribute, and its default 1 (now -2) */
    {"DFT", 20, canon_dft_17, {{"axis", 2, MOVE_I64_ONE, false}}},
    /* before 16, RoiAlign did not shift by half a pixel (output_half_pixel) */
    {"RoiAlign", 16, canon_roi_align_10, {{NULL, 0, MOVE_DROP, false}}},
};

/* Ops that exist only under an older name, with the same meaning as the IR op (or one
 * that a rule above rewrites into it). */
static const struct {
  const char *old_name;
  kl_op op;
} aliases[] = {
    {"Scatter", KL_OP_ScatterElements}, /* deprecated at opset 11 */
    {"Upsample", KL_OP_Resize},         /* deprecated at opset 10 */
};

kl_op kl_onnx_canon_alias(const char *op_type) {
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcmp(aliases[i].old_name, op_type) == 0) return aliases[i].op;
  return KL_OP_COUNT;
}

static const rule *find_rule(const char *op, int64_t opset) {
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    if (opset < rules[i].below && strcmp(rules[i].op, op) == 0) return &rules[i];
  return NULL;
}

kiln_status kl_onnx_canon_emit(kl_onnx_ctx *c, kl_onnx_node *n) {
  const char *domain = n->np->domain ? n->np->domain : "";
  bool onnx_domain = !*domain || strcmp(domain, "ai.onnx") == 0;
  const rule *r = onnx_domain ? find_rule(n->np->op_type, c->opset) : NULL;
  int node;
  return r ? r->fn(c, n, r) : kl_onnx_emit(c, n, &node);
}

/* ---- attributes that became inputs ---- */

static kiln_status attr_kind(const Onnx__AttributeProto *ap, int kind, const char *what,
                             kl_err *e) {
  if (!ap->has_type || (int)ap->type != kind)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "attribute '%s' must be %s", ap->name, what);
  return KILN_OK;
}

/* The constant an attribute becomes; returns its value id or -1. */
static int move_const(kl_onnx_ctx *c, const kl_onnx_node *n, const Onnx__AttributeProto *ap,
                      move_form form) {
  if (form == MOVE_I64_LIST) {
    if (attr_kind(ap, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, "a list of ints", c->e))
      return -1;
    int64_t dim = (int64_t)ap->n_ints;
    size_t bytes = ap->n_ints * sizeof(int64_t);
    void *data = malloc(bytes ? bytes : 1);
    if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
    if (bytes) memcpy(data, ap->ints, bytes);
    return kl_graph_add_const(c->g, NULL, KL_I64, 1, &dim, data, bytes, false, c->e);
  }
  if (form == MOVE_I64_ONE) {
    if (attr_kind(ap, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "an int", c->e)) return -1;
    int64_t one = 1, *data = malloc(sizeof *data);
    if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
    *data = ap->i;
    return kl_graph_add_const(c->g, NULL, KL_I64, 1, &one, data, sizeof *data, false, c->e);
  }
  if (form == MOVE_F32_LIST) {
    if (attr_kind(ap, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS, "a list of floats", c->e))
      return -1;
    int64_t dim = (int64_t)ap->n_floats;
    size_t bytes = ap->n_floats * sizeof(float);
    void *data = malloc(bytes ? bytes : 1);
    if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
    if (bytes) memcpy(data, ap->floats, bytes);
    return kl_graph_add_const(c->g, NULL, KL_F32, 1, &dim, data, bytes, false, c->e);
  }
  if (attr_kind(ap, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, "a float", c->e)) return -1;
  /* the new form wants input 0's dtype; the old one only allowed float types */
  kl_dtype t = n->n_in > 0 && n->in[0] >= 0 ? c->g->values[n->in[0]].type.dtype : KL_UNDEFINED;
  if (!kl_dtype_is_float(t)) t = KL_F32;
  void *data = malloc(kl_dtype_size(t));
  if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
  kl_store_f64(data, t, 0, ap->f);
  return kl_graph_add_const(c->g, NULL, t, 0, NULL, data, kl_dtype_size(t), false, c->e);
}

static kiln_status drop_attr(kl_onnx_ctx *c, kl_onnx_node *n, const char *name) {
  if (n->n_drop == KL_ONNX_MAX_DROP)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "too many attributes consumed by a rule");
  n->drop[n->n_drop++] = name;
  return KILN_OK;
}

static kiln_status apply_move(kl_onnx_ctx *c, kl_onnx_node *n, const move *m) {
  const Onnx__AttributeProto *ap = kl_onnx_node_attr(n, m->attr);
  if (!ap) {
    if (!m->required) return KILN_OK;
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "attribute '%s' is required at opset %lld",
                   m->attr, (long long)c->opset);
  }
  kiln_status s = drop_attr(c, n, m->attr);
  if (s != KILN_OK || m->form == MOVE_DROP) return s;
  if (m->slot < n->n_in && n->in[m->slot] != KL_ABSENT)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "has both attribute '%s' and input %d, "
                   "which replaced it at a later opset", m->attr, m->slot);
  if ((s = kl_onnx_node_reserve_input(c, n, m->slot)) != KILN_OK) return s;
  int v = move_const(c, n, ap, m->form);
  if (v < 0) return c->e->code;
  n->in[m->slot] = v;
  return KILN_OK;
}

static kiln_status canon_moves(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r) {
  for (int i = 0; i < MAX_MOVES && r->moves[i].attr; i++) {
    kiln_status s = apply_move(c, n, &r->moves[i]);
    if (s != KILN_OK) return s;
  }
  int node;
  return kl_onnx_emit(c, n, &node);
}

/* ---- Softmax and LogSoftmax before opset 13 ----
 * y = reshape(softmax(flatten(x, axis), axis=1), shape(x)). When `axis` is the last
 * dimension the flattening changes nothing, and the node is kept as it is. */

static const char *suffixed(char *buf, size_t len, const char *name, const char *suffix) {
  snprintf(buf, len, "%s%s%s", name, *name ? "/" : "", suffix);
  return buf;
}

static kiln_status add_helper(kl_onnx_ctx *c, kl_op op, const char *name, int n_in,
                              const int *in, int out, int *node) {
  *node = kl_graph_add_node(c->g, op, name, n_in, in, 1, &out, c->e);
  return *node < 0 ? c->e->code : KILN_OK;
}

static kiln_status lower_coerce_2d(kl_onnx_ctx *c, kl_onnx_node *n, int64_t axis) {
  char buf[KL_ONNX_MAX_NAME + 32];
  int x = n->in[0], y = n->out[0];
  int flat = kl_graph_add_value(c->g, NULL, c->e);
  int soft = flat < 0 ? -1 : kl_graph_add_value(c->g, NULL, c->e);
  int shape = soft < 0 ? -1 : kl_graph_add_value(c->g, NULL, c->e);
  if (shape < 0) return c->e->code;
  int node, reshape_in[2] = {soft, shape};
  kiln_status s = add_helper(c, KL_OP_Flatten, suffixed(buf, sizeof buf, n->name, "flatten"),
                             1, &x, flat, &node);
  if (s == KILN_OK) s = kl_node_set_int(c->g, node, "axis", axis, c->e);
  if (s == KILN_OK) {
    n->in[0] = flat;
    n->out[0] = soft;
    s = kl_onnx_emit(c, n, &node);
  }
  if (s == KILN_OK) s = kl_node_set_int(c->g, node, "axis", 1, c->e);
  if (s == KILN_OK)
    s = add_helper(c, KL_OP_Shape, suffixed(buf, sizeof buf, n->name, "shape"), 1, &x, shape,
                   &node);
  if (s == KILN_OK)
    s = add_helper(c, KL_OP_Reshape, suffixed(buf, sizeof buf, n->name, "reshape"), 2,
                   reshape_in, y, &node);
  return s;
}

static kiln_status canon_coerce_2d(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r) {
  const Onnx__AttributeProto *ap = kl_onnx_node_attr(n, "axis");
  int64_t axis = 1;
  kiln_status s = KILN_OK;
  if (ap && (s = attr_kind(ap, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "an int", c->e)))
    return s;
  if (ap) axis = ap->i;
  if ((s = drop_attr(c, n, r->moves[0].attr)) != KILN_OK) return s;
  /* a node without its input or output is left to kl_onnx_emit to report */
  bool malformed = n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 || n->out[0] < 0;
  int rank = malformed ? -1 : c->g->values[n->in[0]].type.rank;
  if (!malformed && axis != -1 && !(rank > 0 && axis == rank - 1))
    return lower_coerce_2d(c, n, axis);
  int node;
  s = kl_onnx_emit(c, n, &node);
  return s != KILN_OK ? s : kl_node_set_int(c->g, node, "axis", -1, c->e);
}

/* ---- BatchNormalization ---- */

static kiln_status canon_batchnorm(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r) {
  const Onnx__AttributeProto *spatial = kl_onnx_node_attr(n, "spatial");
  const Onnx__AttributeProto *training = kl_onnx_node_attr(n, "training_mode");
  const char *want = "an int";
  int kind = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  kiln_status s = KILN_OK;
  if ((spatial && (s = attr_kind(spatial, kind, want, c->e))) ||
      (training && (s = attr_kind(training, kind, want, c->e))))
    return s;
  if (spatial && spatial->i != 1)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "spatial=%lld (statistics per activation) "
                   "is not supported", (long long)spatial->i);
  if (training && training->i != 0 && training->i != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "training_mode=%lld: expected 0 or 1",
                   (long long)training->i);
  /* training_mode=1 normalizes with the batch's own statistics (timm's NFNets
   * standardize their weights so) and may output the updated running ones */
  if (!(training && training->i == 1) && n->n_out > 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "it has %d outputs, which only "
                   "training_mode=1 has (the running statistics)", n->n_out);
  if (n->n_out > 3)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "it has %d outputs, expected at most 3",
                   n->n_out);
  return canon_moves(c, n, r);
}

/* ---- GroupNormalization before opset 21 ----
 * scale and bias had one value per group; since 21 they have one per channel. Each
 * group's value is repeated over its C / num_groups channels, which kiln can do when
 * both are constants and X's channel count is declared. */

/* The per-channel constant for the per-group constant value v. */
static int per_channel_const(kl_onnx_ctx *c, const kl_value *v, int64_t groups,
                             int64_t channels) {
  size_t size = kl_dtype_size(v->type.dtype), bytes;
  if (kl_mul_overflow_size((size_t)channels, size, &bytes) ||
      bytes > (uint64_t)c->ts.max_bytes)
    return kl_fail(c->e, KILN_ERR_LIMIT, "%lld channels of %s are over the tensor limit",
                   (long long)channels, kl_dtype_name(v->type.dtype)), -1;
  char *data = malloc(bytes ? bytes : 1);
  if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
  int64_t per_group = channels / groups;
  for (int64_t ch = 0; ch < channels; ch++)
    memcpy(data + (size_t)ch * size, (const char *)v->data + (size_t)(ch / per_group) * size,
           size);
  return kl_graph_add_const(c->g, NULL, v->type.dtype, 1, &channels, data, bytes, false,
                            c->e);
}

static kiln_status canon_groupnorm(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r) {
  (void)r;
  const Onnx__AttributeProto *ap = kl_onnx_node_attr(n, "num_groups");
  int node;
  /* a malformed node is left to kl_onnx_emit and shape inference to report */
  if (!ap || ap->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT || ap->i < 1 ||
      n->n_in < 3 || n->in[0] < 0 || n->in[1] < 0 || n->in[2] < 0)
    return kl_onnx_emit(c, n, &node);
  const kl_type *x = &c->g->values[n->in[0]].type;
  int64_t groups = ap->i, channels = x->rank >= 2 ? x->dims[1].size : -1;
  if (channels == groups) return kl_onnx_emit(c, n, &node); /* per group is per channel */
  for (int slot = 1; slot < 3; slot++) {
    const kl_value *v = &c->g->values[n->in[slot]];
    int64_t count;
    if (v->kind != KL_VALUE_CONST || !kl_type_numel(&v->type, &count) || count != groups ||
        channels < 0 || channels % groups != 0)
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "at opset %lld there is one %s value per "
                     "group; kiln converts it to one per channel (opset 21) only when input "
                     "%d is a constant of num_groups values and input 0's channel count is "
                     "declared", (long long)c->opset, slot == 1 ? "scale" : "bias", slot);
    int id = per_channel_const(c, v, groups, channels);
    if (id < 0) return c->e->code;
    n->in[slot] = id;
  }
  return kl_onnx_emit(c, n, &node);
}

/* ---- Upsample and Resize-10 ----
 * Their scales (an attribute before Upsample-9, else input 1) become Resize's input 2.
 * They mapped output index i to i / scale and rounded nearest samples down when
 * enlarging and up when shrinking, which nearest_mode "simple" reproduces. */

static kiln_status canon_resize_10(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r) {
  if (strcmp(n->np->op_type, "Upsample") == 0 && c->opset < 7)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "Upsample before opset 7 (height_scale and "
                   "width_scale) is not supported");
  kiln_status s = KILN_OK;
  if (kl_onnx_node_attr(n, "scales")) {
    s = apply_move(c, n, &r->moves[0]);
  } else if (n->n_in > 1 && n->in[1] != KL_ABSENT) {
    s = kl_onnx_node_reserve_input(c, n, 2);
    if (s == KILN_OK) n->in[2] = n->in[1], n->in[1] = KL_ABSENT;
  }
  int node;
  if (s == KILN_OK) s = kl_onnx_emit(c, n, &node);
  if (s == KILN_OK)
    s = kl_node_set_string(c->g, node, "coordinate_transformation_mode", "asymmetric", c->e);
  return s == KILN_OK ? kl_node_set_string(c->g, node, "nearest_mode", "simple", c->e) : s;
}

/* ---- GridSample before opset 20 ----
 * Only the names changed (bilinear -> linear, bicubic -> cubic); opset 16 also limited
 * it to 4-D input, a subset of what opset 20 takes. */

static kiln_status canon_grid_sample_16(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r) {
  (void)r;
  int node;
  kiln_status s = kl_onnx_emit(c, n, &node);
  const char *mode = s == KILN_OK ? kl_attr_string(&c->g->nodes[node], "mode", "") : "";
  if (strcmp(mode, "bilinear") == 0)
    s = kl_node_set_string(c->g, node, "mode", "linear", c->e);
  else if (strcmp(mode, "bicubic") == 0)
    s = kl_node_set_string(c->g, node, "mode", "cubic", c->e);
  return s;
}

/* ---- DFT before opset 20 ----
 * axis became input 2; without the attribute the old default, 1, is made explicit,
 * since the new one (-2) names another axis for inputs of rank other than 3. */

static kiln_status canon_dft_17(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r) {
  if (kl_onnx_node_attr(n, "axis")) return canon_moves(c, n, r);
  if (n->n_in > 2 && n->in[2] != KL_ABSENT)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "it has %d inputs; DFT at opset %lld takes "
                   "at most 2", n->n_in, (long long)c->opset);
  kiln_status s = kl_onnx_node_reserve_input(c, n, 2);
  int64_t *one = s == KILN_OK ? malloc(sizeof *one) : NULL;
  if (s != KILN_OK) return s;
  if (!one) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  *one = 1;
  int v = kl_graph_add_const(c->g, NULL, KL_I64, 0, NULL, one, sizeof *one, false, c->e);
  if (v < 0) return c->e->code;
  n->in[2] = v;
  int node;
  return kl_onnx_emit(c, n, &node);
}

/* ---- RoiAlign before opset 16 ----
 * Opset 16 added coordinate_transformation_mode, defaulting to half_pixel; the older
 * behaviour is the mode output_half_pixel. */

static kiln_status canon_roi_align_10(kl_onnx_ctx *c, kl_onnx_node *n, const rule *r) {
  (void)r;
  int node;
  kiln_status s = kl_onnx_emit(c, n, &node);
  if (s != KILN_OK || kl_node_attr(&c->g->nodes[node], "coordinate_transformation_mode"))
    return s;
  return kl_node_set_string(c->g, node, "coordinate_transformation_mode", "output_half_pixel",
                            c->e);
}

/* ---- onnxruntime's quantized contrib ops (com.microsoft) ----
 *
 * What onnxruntime's quantize_static writes with QuantFormat.QOperator: each op takes
 * its tensors quantized, with a scale and zero point for every input and the output,
 * and means dequantize, compute in float, quantize:
 *   QLinearAdd(A, As, Az, B, Bs, Bz, Cs, Cz) = Q(DQ(A, As, Az) + DQ(B, Bs, Bz), Cs, Cz)
 * Unary ones (X, Xs, Xz, Ys, Yz); QLinearConcat(Ys, Yz, X0, X0s, X0z, X1, ...);
 * QGemm(A, As, Az, B, Bs, Bz, C, Ys, Yz) with C an int32 bias of scale As * Bs, Bs per
 * output column where given, and a float output when Ys is absent. QuantizeLinear and
 * DequantizeLinear of that domain are ONNX's. Lowered so, they run on the ops kiln has
 * (the quantize steps on their reference kernels).
 */
enum { Q_UNARY, Q_BINARY, Q_CONCAT, Q_GEMM, Q_PLAIN };

static const struct {
  const char *op;
  kl_op fop;
  int form;
} contribs[] = {
    {"QLinearAdd", KL_OP_Add, Q_BINARY},
    {"QLinearMul", KL_OP_Mul, Q_BINARY},
    {"QLinearSigmoid", KL_OP_Sigmoid, Q_UNARY},
    {"QLinearLeakyRelu", KL_OP_LeakyRelu, Q_UNARY},
    {"QLinearGlobalAveragePool", KL_OP_GlobalAveragePool, Q_UNARY},
    {"QLinearAveragePool", KL_OP_AveragePool, Q_UNARY},
    {"QLinearSoftmax", KL_OP_Softmax, Q_UNARY},
    {"QLinearConcat", KL_OP_Concat, Q_CONCAT},
    {"QGemm", KL_OP_Gemm, Q_GEMM},
    {"QuantizeLinear", KL_OP_QuantizeLinear, Q_PLAIN},
    {"DequantizeLinear", KL_OP_DequantizeLinear, Q_PLAIN},
};

static int contrib_index(const char *op_type) {
  for (size_t i = 0; op_type && i < sizeof contribs / sizeof contribs[0]; i++)
    if (strcmp(contribs[i].op, op_type) == 0) return (int)i;
  return -1;
}

bool kl_onnx_contrib_has(const char *op_type) { return contrib_index(op_type) >= 0; }

/* Input k of n, or KL_ABSENT past its inputs. */
static int input_at(const kl_onnx_node *n, int k) { return k < n->n_in ? n->in[k] : KL_ABSENT; }

/* *out = DequantizeLinear(x, scale, zero) (zero may be absent; axis < -999: none). */
static kiln_status dequantize(kl_onnx_ctx *c, const kl_onnx_node *n, int x, int scale,
                              int zero, int64_t axis, const char *what, int *out) {
  char buf[KL_ONNX_MAX_NAME + 48];
  if (x < 0 || scale < 0)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s: its tensor or scale is missing", what);
  if ((*out = kl_graph_add_value(c->g, NULL, c->e)) < 0) return c->e->code;
  int in[3] = {x, scale, zero}, node;
  kiln_status s = add_helper(c, KL_OP_DequantizeLinear, suffixed(buf, sizeof buf, n->name, what),
                             zero >= 0 ? 3 : 2, in, *out, &node);
  if (s == KILN_OK && axis > -1000) s = kl_node_set_int(c->g, node, "axis", axis, c->e);
  return s;
}

/* y = QuantizeLinear(f, scale, zero) into the node's own output. */
static kiln_status quantize(kl_onnx_ctx *c, const kl_onnx_node *n, int f, int scale, int zero,
                            int y) {
  char buf[KL_ONNX_MAX_NAME + 48];
  int in[3] = {f, scale, zero}, node;
  if (scale < 0)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "the output's scale is missing");
  return add_helper(c, KL_OP_QuantizeLinear, suffixed(buf, sizeof buf, n->name, "quantize"),
                    zero >= 0 ? 3 : 2, in, y, &node);
}

/* The float op on in[0..n_in-1] (n's attributes but those dropped) into a new value. */
static kiln_status float_op(kl_onnx_ctx *c, kl_onnx_node *n, kl_op op, int n_in,
                            const int *in, int *out) {
  if ((*out = kl_graph_add_value(c->g, NULL, c->e)) < 0) return c->e->code;
  int *keep_in = n->in, keep_n_in = n->n_in, keep_out = n->out[0], node;
  n->op = op;
  n->in = (int *)in;
  n->n_in = n_in;
  n->out[0] = *out;
  kiln_status s = kl_onnx_emit(c, n, &node);
  n->in = keep_in;
  n->n_in = keep_n_in;
  n->out[0] = keep_out;
  return s;
}

kiln_status kl_onnx_contrib_emit(kl_onnx_ctx *c, kl_onnx_node *n) {
  int i = contrib_index(n->np->op_type);
  if (i < 0)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "op not supported by kiln in domain '%s'",
                   KL_DOMAIN_MS);
  if (n->n_out != 1 || n->out[0] < 0)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%d outputs, expected 1", n->n_out);
  int form = contribs[i].form, y = n->out[0], f, node;
  kl_op fop = contribs[i].fop;
  kiln_status s = KILN_OK;
  if (form == Q_PLAIN) {
    n->op = fop;
    return kl_onnx_emit(c, n, &node);
  }
  const Onnx__AttributeProto *cl = kl_onnx_node_attr(n, "channels_last");
  if (cl) {
    if ((s = attr_kind(cl, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "an int", c->e))) return s;
    if (cl->i != 0)
      return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "channels_last=%lld is not supported "
                     "(kiln's pools read channels first)", (long long)cl->i);
    if ((s = drop_attr(c, n, "channels_last"))) return s;
  }
  if (form == Q_UNARY) { /* X, Xs, Xz, Ys, Yz */
    if (fop == KL_OP_Softmax) { /* its "opset": the Softmax semantics it follows */
      const Onnx__AttributeProto *op = kl_onnx_node_attr(n, "opset");
      const Onnx__AttributeProto *ax = kl_onnx_node_attr(n, "axis");
      if (op && (s = drop_attr(c, n, "opset"))) return s;
      if (op && op->i < 13 && !(ax && ax->i == -1))
        return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "QLinearSoftmax of opset %lld semantics "
                       "(a 2-D view) on an axis other than -1", (long long)op->i);
    }
    int x;
    s = dequantize(c, n, input_at(n, 0), input_at(n, 1), input_at(n, 2), -1000, "dequantize",
                   &x);
    if (!s) s = float_op(c, n, fop, 1, &x, &f);
    return s ? s : quantize(c, n, f, input_at(n, 3), input_at(n, 4), y);
  }
  if (form == Q_BINARY) { /* A, As, Az, B, Bs, Bz, Cs, Cz */
    int ab[2];
    s = dequantize(c, n, input_at(n, 0), input_at(n, 1), input_at(n, 2), -1000, "dequantize_a",
                   &ab[0]);
    if (!s)
      s = dequantize(c, n, input_at(n, 3), input_at(n, 4), input_at(n, 5), -1000,
                     "dequantize_b", &ab[1]);
    if (!s) s = float_op(c, n, fop, 2, ab, &f);
    return s ? s : quantize(c, n, f, input_at(n, 6), input_at(n, 7), y);
  }
  if (form == Q_CONCAT) { /* Ys, Yz, then (X, Xs, Xz) per input */
    int parts = (n->n_in - 2) / 3;
    if (n->n_in < 5 || (n->n_in - 2) % 3)
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%d inputs: expected Y_scale, Y_zero_point "
                     "and then (X, X_scale, X_zero_point) for each input", n->n_in);
    int *xs = malloc(sizeof *xs * (size_t)parts);
    if (!xs) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int k = 0; !s && k < parts; k++) {
      char what[32];
      snprintf(what, sizeof what, "dequantize_%d", k);
      s = dequantize(c, n, n->in[2 + 3 * k], n->in[3 + 3 * k], n->in[4 + 3 * k], -1000, what,
                     &xs[k]);
    }
    if (!s) s = float_op(c, n, fop, parts, xs, &f);
    free(xs);
    return s ? s : quantize(c, n, f, input_at(n, 0), input_at(n, 1), y);
  }
  /* Q_GEMM: A, As, Az, B, Bs, Bz, C, Ys, Yz */
  const Onnx__AttributeProto *tb = kl_onnx_node_attr(n, "transB");
  int64_t b_axis = tb && tb->i ? 0 : 1; /* B [K, N], or [N, K] transposed */
  int ab[3], bs = input_at(n, 4), bias_scale = -1;
  const kl_value *bsv = bs >= 0 ? &c->g->values[bs] : NULL;
  bool per_column = bsv && bsv->type.rank == 1 && !(bsv->type.dims[0].size == 1);
  s = dequantize(c, n, input_at(n, 0), input_at(n, 1), input_at(n, 2), -1000, "dequantize_a",
                 &ab[0]);
  if (!s)
    s = dequantize(c, n, input_at(n, 3), bs, input_at(n, 5), per_column ? b_axis : -1000,
                   "dequantize_b", &ab[1]);
  int n_in = 2;
  if (!s && input_at(n, 6) >= 0) { /* the int32 bias, of scale As * Bs and zero point 0 */
    char buf[KL_ONNX_MAX_NAME + 48];
    int mul_in[2] = {input_at(n, 1), bs};
    if ((bias_scale = kl_graph_add_value(c->g, NULL, c->e)) < 0) return c->e->code;
    s = add_helper(c, KL_OP_Mul, suffixed(buf, sizeof buf, n->name, "bias_scale"), 2, mul_in,
                   bias_scale, &node);
    if (!s)
      s = dequantize(c, n, input_at(n, 6), bias_scale, KL_ABSENT, per_column ? 0 : -1000,
                     "dequantize_bias", &ab[2]);
    n_in = 3;
  }
  if (s) return s;
  if (input_at(n, 7) < 0) { /* no output scale: the output is the float product */
    n->op = fop;
    int *keep_in = n->in, keep_n = n->n_in;
    n->in = ab;
    n->n_in = n_in;
    s = kl_onnx_emit(c, n, &node);
    n->in = keep_in;
    n->n_in = keep_n;
    return s;
  }
  s = float_op(c, n, fop, n_in, ab, &f);
  return s ? s : quantize(c, n, f, input_at(n, 7), input_at(n, 8), y);
}
