/* Node attributes: typed setters (copying) and getters with defaults. */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

const kl_attr *kl_node_attr(const kl_node *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

int64_t kl_attr_int(const kl_node *n, const char *name, int64_t dflt) {
  const kl_attr *a = kl_node_attr(n, name);
  return a && a->kind == KL_ATTR_INT ? a->i : dflt;
}

float kl_attr_float(const kl_node *n, const char *name, float dflt) {
  const kl_attr *a = kl_node_attr(n, name);
  if (!a) return dflt;
  if (a->kind == KL_ATTR_FLOAT) return a->f;
  if (a->kind == KL_ATTR_INT) return (float)a->i;
  return dflt;
}

const char *kl_attr_string(const kl_node *n, const char *name, const char *dflt) {
  const kl_attr *a = kl_node_attr(n, name);
  return a && a->kind == KL_ATTR_STRING ? a->s : dflt;
}

bool kl_op_is_control(kl_op op) {
  return op == KL_OP_If || op == KL_OP_Loop || op == KL_OP_Scan;
}

bool kl_op_takes_sequences(kl_op op) {
  switch (op) {
  case KL_OP_Identity: case KL_OP_If: case KL_OP_Loop: case KL_OP_Scan:
  case KL_OP_SequenceEmpty: case KL_OP_SequenceConstruct: case KL_OP_SequenceInsert:
  case KL_OP_SequenceAt: case KL_OP_SequenceErase: case KL_OP_SequenceLength:
  case KL_OP_SplitToSequence: case KL_OP_ConcatFromSequence: case KL_OP_Optional:
  case KL_OP_OptionalHasElement: case KL_OP_OptionalGetElement:
    return true;
  default: return false;
  }
}

kl_graph *kl_node_body(const kl_node *n, const char *name) {
  const kl_attr *a = kl_node_attr(n, name);
  return a && a->kind == KL_ATTR_GRAPH ? a->g : NULL;
}

kl_graph *kl_node_first_body(const kl_node *n) {
  return kl_node_body(n, n->op == KL_OP_If ? "then_branch" : "body");
}

int kl_control_formal_inputs(const kl_node *n) {
  const kl_graph *b = kl_node_first_body(n);
  int k = n->n_in - (b ? b->n_outer : 0);
  return k < 0 ? 0 : k;
}

int kl_attr_ints(const kl_node *n, const char *name, const int64_t **v) {
  const kl_attr *a = kl_node_attr(n, name);
  if (!a || a->kind != KL_ATTR_INTS) return -1;
  *v = a->ints;
  return a->n;
}

int kl_attr_floats(const kl_node *n, const char *name, const float **v) {
  const kl_attr *a = kl_node_attr(n, name);
  if (!a || a->kind != KL_ATTR_FLOATS) return -1;
  *v = a->floats;
  return a->n;
}

/* The kind of every attribute kiln reads by a fixed name, in whichever op has it (each
 * name means one kind in every op of the IR, whose ops have one form: the importer
 * rewrites older ones), sorted by name. An attribute of another kind was read as
 * absent, silently giving its default (Softmax's axis as a string); kl_graph_verify
 * refuses it with kl_attr_kind_check. A float may also be given as an int, as
 * kl_attr_float reads it. Names not here are the ops' own business (the importer's
 * older forms, Constant's value_*, the subgraphs). */
static const struct {
  const char *name;
  kl_attr_kind kind;
} attr_kinds[] = {
    {"activation", KL_ATTR_STRING}, {"activation_alpha", KL_ATTR_FLOATS},
    {"activation_beta", KL_ATTR_FLOATS}, {"activation_params", KL_ATTR_FLOATS},
    {"activations", KL_ATTR_STRINGS}, {"align_corners", KL_ATTR_INT},
    {"allowzero", KL_ATTR_INT}, {"alpha", KL_ATTR_FLOAT}, {"amsgrad", KL_ATTR_INT},
    {"antialias", KL_ATTR_INT}, {"apex", KL_ATTR_INT}, {"approximate", KL_ATTR_STRING},
    {"auto_pad", KL_ATTR_STRING}, {"axes", KL_ATTR_INTS}, {"axis", KL_ATTR_INT},
    {"batch_axis", KL_ATTR_INT}, {"batch_dims", KL_ATTR_INT}, {"beta", KL_ATTR_FLOAT},
    {"bias", KL_ATTR_FLOAT}, {"block_size", KL_ATTR_INT}, {"blocksize", KL_ATTR_INT},
    {"body", KL_ATTR_GRAPH}, {"ceil_mode", KL_ATTR_INT},
    {"center_point_box", KL_ATTR_INT}, {"channels_last", KL_ATTR_INT},
    {"clip", KL_ATTR_FLOAT}, {"coordinate_transformation_mode", KL_ATTR_STRING},
    {"count_include_pad", KL_ATTR_INT}, {"cubic_coeff_a", KL_ATTR_FLOAT},
    {"decoupled", KL_ATTR_INT}, {"detect_negative", KL_ATTR_INT},
    {"detect_positive", KL_ATTR_INT}, {"dilations", KL_ATTR_INTS},
    {"direction", KL_ATTR_STRING}, {"dtype", KL_ATTR_INT}, {"elem_dtype", KL_ATTR_INT},
    {"elem_sequence", KL_ATTR_INT}, {"else_branch", KL_ATTR_GRAPH}, {"end", KL_ATTR_INT},
    {"epsilon", KL_ATTR_FLOAT}, {"equation", KL_ATTR_STRING},
    {"exclude_outside", KL_ATTR_INT}, {"exclusive", KL_ATTR_INT},
    {"extrapolation_value", KL_ATTR_FLOAT}, {"fmod", KL_ATTR_INT},
    {"gamma", KL_ATTR_FLOAT}, {"group", KL_ATTR_INT}, {"hidden_size", KL_ATTR_INT},
    {"ignore_index", KL_ATTR_INT}, {"input_forget", KL_ATTR_INT},
    {"interleaved", KL_ATTR_INT}, {"inverse", KL_ATTR_INT}, {"is_causal", KL_ATTR_INT},
    {"k", KL_ATTR_INT}, {"keepdims", KL_ATTR_INT}, {"kernel_shape", KL_ATTR_INTS},
    {"kind", KL_ATTR_STRING}, {"kv_num_heads", KL_ATTR_INT},
    {"label_smoothing", KL_ATTR_FLOAT}, {"lambd", KL_ATTR_FLOAT},
    {"largest", KL_ATTR_INT}, {"layout", KL_ATTR_INT},
    {"linear_before_reset", KL_ATTR_INT}, {"log", KL_ATTR_INT},
    {"max_norm", KL_ATTR_FLOAT}, {"max_trust", KL_ATTR_FLOAT}, {"maximize", KL_ATTR_INT},
    {"mean", KL_ATTR_INT}, {"messages", KL_ATTR_STRINGS}, {"mode", KL_ATTR_STRING},
    {"momentum", KL_ATTR_FLOAT}, {"nchw_input", KL_ATTR_INT}, {"nesterov", KL_ATTR_INT},
    {"new_axis", KL_ATTR_INT}, {"noop_with_empty_axes", KL_ATTR_INT},
    {"num_groups", KL_ATTR_INT}, {"num_heads", KL_ATTR_INT}, {"num_outputs", KL_ATTR_INT},
    {"num_scan_inputs", KL_ATTR_INT}, {"offset_group", KL_ATTR_INT},
    {"onesided", KL_ATTR_INT}, {"op", KL_ATTR_STRING}, {"output_datatype", KL_ATTR_INT},
    {"output_dtype", KL_ATTR_INT}, {"output_height", KL_ATTR_INT},
    {"output_padding", KL_ATTR_INTS}, {"output_shape", KL_ATTR_INTS},
    {"output_width", KL_ATTR_INT}, {"p", KL_ATTR_INT}, {"padding_mode", KL_ATTR_STRING},
    {"pads", KL_ATTR_INTS}, {"periodic", KL_ATTR_INT}, {"perm", KL_ATTR_INTS},
    {"precision", KL_ATTR_INT}, {"q_num_heads", KL_ATTR_INT},
    {"qk_matmul_output_mode", KL_ATTR_INT}, {"reduction", KL_ATTR_STRING},
    {"reverse", KL_ATTR_INT}, {"rotary_embedding_dim", KL_ATTR_INT},
    {"round_mode", KL_ATTR_STRING}, {"sampling_ratio", KL_ATTR_INT},
    {"saturate", KL_ATTR_INT}, {"scale", KL_ATTR_FLOAT},
    {"scan_input_axes", KL_ATTR_INTS}, {"scan_input_directions", KL_ATTR_INTS},
    {"scan_output_axes", KL_ATTR_INTS}, {"scan_output_directions", KL_ATTR_INTS},
    {"select_last_index", KL_ATTR_INT}, {"size", KL_ATTR_INT}, {"softcap", KL_ATTR_FLOAT},
    {"softmax_precision", KL_ATTR_INT}, {"sorted", KL_ATTR_INT},
    {"spatial_scale", KL_ATTR_FLOAT}, {"start", KL_ATTR_INT}, {"stash_type", KL_ATTR_INT},
    {"storage_order", KL_ATTR_INT}, {"strides", KL_ATTR_INTS},
    {"then_branch", KL_ATTR_GRAPH}, {"time_axis", KL_ATTR_INT}, {"to", KL_ATTR_INT},
    {"training_mode", KL_ATTR_INT}, {"transA", KL_ATTR_INT}, {"transB", KL_ATTR_INT},
    {"upper", KL_ATTR_INT}, {"zero_masked_rows", KL_ATTR_INT},
};

static const char *kind_words(kl_attr_kind k) {
  switch (k) {
  case KL_ATTR_FLOAT: return "a float";
  case KL_ATTR_INT: return "an int";
  case KL_ATTR_STRING: return "a string";
  case KL_ATTR_TENSOR: return "a tensor";
  case KL_ATTR_GRAPH: return "a graph";
  case KL_ATTR_FLOATS: return "a list of floats";
  case KL_ATTR_INTS: return "a list of ints";
  case KL_ATTR_STRINGS: return "a list of strings";
  }
  return "of an unknown kind";
}

kiln_status kl_attr_kind_check(const kl_attr *a, const char *node, kl_err *e) {
  size_t lo = 0, hi = sizeof attr_kinds / sizeof attr_kinds[0];
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(a->name, attr_kinds[mid].name);
    if (c == 0) {
      kl_attr_kind want = attr_kinds[mid].kind;
      if (a->kind == want || (want == KL_ATTR_FLOAT && a->kind == KL_ATTR_INT)) return KILN_OK;
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: attribute '%s' is %s, expected %s",
                     node, a->name, kind_words(a->kind), kind_words(want));
    }
    if (c < 0) hi = mid;
    else lo = mid + 1;
  }
  return KILN_OK;
}

kiln_status kl_node_take_attr(kl_graph *g, int node, kl_attr *a, kl_err *e) {
  kl_node *n = &g->nodes[node];
  for (int i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, a->name) == 0) {
      kl_attr_clear(&n->attrs[i]);
      n->attrs[i] = *a;
      return KILN_OK;
    }
  kl_attr *p = realloc(n->attrs, sizeof(kl_attr) * (size_t)(n->n_attrs + 1));
  if (!p) {
    kl_attr_clear(a);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory setting an attribute");
  }
  n->attrs = p;
  n->attrs[n->n_attrs++] = *a;
  return KILN_OK;
}

static kiln_status start(kl_attr *a, const char *name, kl_attr_kind kind, kl_err *e) {
  memset(a, 0, sizeof *a);
  a->kind = kind;
  a->name = strdup(name);
  return a->name ? KILN_OK : kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
}

kiln_status kl_node_set_int(kl_graph *g, int node, const char *name, int64_t v, kl_err *e) {
  kl_attr a;
  if (start(&a, name, KL_ATTR_INT, e)) return e ? e->code : KILN_ERR_OUT_OF_MEMORY;
  a.i = v;
  return kl_node_take_attr(g, node, &a, e);
}

kiln_status kl_node_set_float(kl_graph *g, int node, const char *name, float v, kl_err *e) {
  kl_attr a;
  if (start(&a, name, KL_ATTR_FLOAT, e)) return e ? e->code : KILN_ERR_OUT_OF_MEMORY;
  a.f = v;
  return kl_node_take_attr(g, node, &a, e);
}

kiln_status kl_node_set_string(kl_graph *g, int node, const char *name, const char *v,
                               kl_err *e) {
  kl_attr a;
  if (start(&a, name, KL_ATTR_STRING, e)) return e ? e->code : KILN_ERR_OUT_OF_MEMORY;
  if (!(a.s = strdup(v))) {
    kl_attr_clear(&a);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  return kl_node_take_attr(g, node, &a, e);
}

static void *dup_array(const void *v, int n, size_t elem) {
  void *p = malloc(elem * (size_t)(n > 0 ? n : 1));
  if (p && n > 0) memcpy(p, v, elem * (size_t)n);
  return p;
}

kiln_status kl_node_set_ints(kl_graph *g, int node, const char *name, const int64_t *v,
                             int n, kl_err *e) {
  kl_attr a;
  if (start(&a, name, KL_ATTR_INTS, e)) return e ? e->code : KILN_ERR_OUT_OF_MEMORY;
  a.n = n;
  if (!(a.ints = dup_array(v, n, sizeof *v))) {
    kl_attr_clear(&a);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  return kl_node_take_attr(g, node, &a, e);
}

kiln_status kl_node_set_floats(kl_graph *g, int node, const char *name, const float *v,
                               int n, kl_err *e) {
  kl_attr a;
  if (start(&a, name, KL_ATTR_FLOATS, e)) return e ? e->code : KILN_ERR_OUT_OF_MEMORY;
  a.n = n;
  if (!(a.floats = dup_array(v, n, sizeof *v))) {
    kl_attr_clear(&a);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  return kl_node_take_attr(g, node, &a, e);
}

kiln_status kl_node_set_strings(kl_graph *g, int node, const char *name,
                                const char *const *v, int n, kl_err *e) {
  kl_attr a;
  if (start(&a, name, KL_ATTR_STRINGS, e)) return e ? e->code : KILN_ERR_OUT_OF_MEMORY;
  a.strings = calloc((size_t)(n > 0 ? n : 1), sizeof(char *));
  if (!a.strings) goto oom;
  for (int i = 0; i < n; i++, a.n++)
    if (!(a.strings[i] = strdup(v[i]))) goto oom;
  return kl_node_take_attr(g, node, &a, e);
oom:
  kl_attr_clear(&a);
  return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
}

kiln_status kl_node_set_tensor(kl_graph *g, int node, const char *name, kl_tensor *t,
                               kl_err *e) {
  kl_attr a;
  if (start(&a, name, KL_ATTR_TENSOR, e)) {
    free(t->data);
    free(t);
    return e ? e->code : KILN_ERR_OUT_OF_MEMORY;
  }
  a.t = t;
  return kl_node_take_attr(g, node, &a, e);
}
