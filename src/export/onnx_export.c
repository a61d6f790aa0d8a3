/* The ONNX writer (see onnx_export.h). The protobuf-c message tree points into the
 * graph for names and constant data; only the tree itself is allocated, through a
 * pool that is freed in one go after packing. */
#include "export/onnx_export.h"
#include "ir/strmap.h"
#include "import/fileio.h"
#include "import/onnx.h"
#include "kl_config.h"
#include "onnx.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KL_ONNX_IR_VERSION 11 /* what ONNX pairs with opset 23 */
#define KL_ONNX_RELEASED_OPSET 23 /* stamped unless the graph needs newer (below) */
#define MAX_MESSAGE ((size_t)INT32_MAX)

typedef struct pool {
  void **blocks;
  size_t n, cap;
  bool failed;
} pool;

/* Zeroed memory for count items of size bytes, owned by the pool; NULL (and
 * p->failed) on overflow or out of memory. */
static void *pool_alloc(pool *p, size_t count, size_t size) {
  size_t bytes;
  if (p->failed || kl_mul_overflow_size(count ? count : 1, size, &bytes)) goto fail;
  if (p->n == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 256;
    void **b = realloc(p->blocks, sizeof(void *) * cap);
    if (!b) goto fail;
    p->blocks = b;
    p->cap = cap;
  }
  void *m = calloc(1, bytes);
  if (!m) goto fail;
  p->blocks[p->n++] = m;
  return m;
fail:
  p->failed = true;
  return NULL;
}

static void pool_free(pool *p) {
  for (size_t i = 0; i < p->n; i++) free(p->blocks[i]);
  free(p->blocks);
}

#define NEW(p, type, init) new_msg(p, sizeof(type), &(type)init)
static void *new_msg(pool *p, size_t size, const void *init) {
  void *m = pool_alloc(p, 1, size);
  if (m) memcpy(m, init, size);
  return m;
}

/* A graph being written, and the name each of its values has in the file: a body's
 * captures take the names of the enclosing graph's values they are, and every other
 * value of a body a name no graph of the file uses yet (ONNX names values once in the
 * whole model, bodies included). */
typedef struct scope {
  const kl_graph *g;
  const char **names; /* per value */
  kl_strmap *taken;   /* every name given so far, in any graph of the file */
} scope;

/* ---- tensors, types, attributes ---- */

static Onnx__TensorProto *tensor_proto(pool *p, const char *name, kl_dtype dtype, int rank,
                                       const int64_t *dims, const void *data, size_t nbytes) {
  Onnx__TensorProto *t = NEW(p, Onnx__TensorProto, ONNX__TENSOR_PROTO__INIT);
  int64_t *d = pool_alloc(p, (size_t)rank, sizeof(int64_t));
  if (!t || !d) return NULL;
  memcpy(d, dims, sizeof(int64_t) * (size_t)rank);
  t->n_dims = (size_t)rank;
  t->dims = d;
  t->has_data_type = 1;
  t->data_type = (int32_t)dtype;
  t->name = (char *)name;
  t->has_raw_data = 1;
  t->raw_data.len = nbytes;
  t->raw_data.data = (uint8_t *)data;
  if (kl_dtype_file_bits(dtype) < 8) { /* sub-byte types: packed, one element a byte now */
    size_t len = kl_dtype_file_bytes(dtype, nbytes);
    uint8_t *packed = pool_alloc(p, len ? len : 1, 1);
    if (!packed) return NULL;
    kl_dtype_pack(dtype, data, nbytes, packed);
    t->raw_data.len = len;
    t->raw_data.data = packed;
  }
  return t;
}

static Onnx__TypeProto *tensor_type_proto(pool *p, const kl_graph *g, const kl_type *ty);

/* A value's type: a tensor type, inside a sequence type and an optional type as the
 * value is (kl_type.seq, .opt). */
static Onnx__TypeProto *type_proto(pool *p, const kl_graph *g, const kl_type *ty) {
  Onnx__TypeProto *tp = tensor_type_proto(p, g, ty);
  if (tp && ty->seq) {
    Onnx__TypeProto *outer = NEW(p, Onnx__TypeProto, ONNX__TYPE_PROTO__INIT);
    Onnx__TypeProto__Sequence *sq =
        NEW(p, Onnx__TypeProto__Sequence, ONNX__TYPE_PROTO__SEQUENCE__INIT);
    if (!outer || !sq) return NULL;
    sq->elem_type = tp;
    outer->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
    outer->sequence_type = sq;
    tp = outer;
  }
  if (tp && ty->opt) {
    Onnx__TypeProto *outer = NEW(p, Onnx__TypeProto, ONNX__TYPE_PROTO__INIT);
    Onnx__TypeProto__Optional *op =
        NEW(p, Onnx__TypeProto__Optional, ONNX__TYPE_PROTO__OPTIONAL__INIT);
    if (!outer || !op) return NULL;
    op->elem_type = tp;
    outer->value_case = ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE;
    outer->optional_type = op;
    tp = outer;
  }
  return tp;
}

static Onnx__TypeProto *tensor_type_proto(pool *p, const kl_graph *g, const kl_type *ty) {
  Onnx__TypeProto *tp = NEW(p, Onnx__TypeProto, ONNX__TYPE_PROTO__INIT);
  Onnx__TypeProto__Tensor *tt = NEW(p, Onnx__TypeProto__Tensor, ONNX__TYPE_PROTO__TENSOR__INIT);
  if (!tp || !tt) return NULL;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  tt->has_elem_type = 1;
  tt->elem_type = (int32_t)ty->dtype;
  if (ty->rank < 0) return tp;
  Onnx__TensorShapeProto *sh = NEW(p, Onnx__TensorShapeProto, ONNX__TENSOR_SHAPE_PROTO__INIT);
  Onnx__TensorShapeProto__Dimension **dims =
      pool_alloc(p, (size_t)ty->rank, sizeof *dims);
  if (!sh || !dims) return NULL;
  for (int i = 0; i < ty->rank; i++) {
    Onnx__TensorShapeProto__Dimension *d =
        NEW(p, Onnx__TensorShapeProto__Dimension, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT);
    if (!d) return NULL;
    kl_dim k = ty->dims[i];
    if (k.size >= 0) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = k.size;
    } else if (k.sym >= 0 && k.sym < g->n_symbols) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = g->symbols[k.sym];
    }
    dims[i] = d;
  }
  sh->n_dim = (size_t)ty->rank;
  sh->dim = dims;
  tt->shape = sh;
  return tp;
}

static Onnx__ValueInfoProto *value_info(pool *p, const scope *sc, int v) {
  const kl_graph *g = sc->g;
  Onnx__ValueInfoProto *vi = NEW(p, Onnx__ValueInfoProto, ONNX__VALUE_INFO_PROTO__INIT);
  if (!vi) return NULL;
  vi->name = (char *)sc->names[v];
  if (g->values[v].type.dtype != KL_UNDEFINED) vi->type = type_proto(p, g, &g->values[v].type);
  return vi;
}

static Onnx__AttributeProto *attr_proto(pool *p, const kl_attr *a, kl_err *e) {
  Onnx__AttributeProto *ap = NEW(p, Onnx__AttributeProto, ONNX__ATTRIBUTE_PROTO__INIT);
  if (!ap) return NULL;
  ap->name = a->name;
  ap->has_type = 1;
  ap->type = (Onnx__AttributeProto__AttributeType)a->kind;
  switch (a->kind) {
  case KL_ATTR_FLOAT: ap->has_f = 1, ap->f = a->f; break;
  case KL_ATTR_INT: ap->has_i = 1, ap->i = a->i; break;
  case KL_ATTR_STRING:
    ap->has_s = 1;
    ap->s.data = (uint8_t *)a->s;
    ap->s.len = strlen(a->s);
    break;
  case KL_ATTR_FLOATS: ap->n_floats = (size_t)a->n, ap->floats = a->floats; break;
  case KL_ATTR_INTS: ap->n_ints = (size_t)a->n, ap->ints = a->ints; break;
  case KL_ATTR_STRINGS:
    if (!(ap->strings = pool_alloc(p, (size_t)a->n, sizeof *ap->strings))) return NULL;
    ap->n_strings = (size_t)a->n;
    for (int i = 0; i < a->n; i++) {
      ap->strings[i].data = (uint8_t *)a->strings[i];
      ap->strings[i].len = strlen(a->strings[i]);
    }
    break;
  case KL_ATTR_TENSOR:
    ap->t = tensor_proto(p, "", a->t->dtype, a->t->rank, a->t->dims, a->t->data,
                         kl_tensor_nbytes(a->t));
    if (!ap->t) return NULL;
    break;
  default:
    kl_fail(e, KILN_ERR_UNSUPPORTED, "attribute '%s' is of a kind the ONNX writer cannot "
            "write", a->name);
    return NULL;
  }
  return ap;
}

/* ---- nodes and the graph ---- */

static const char *value_name(const scope *sc, int v) { return v >= 0 ? sc->names[v] : ""; }

static Onnx__GraphProto *graph_proto(pool *p, const scope *sc, kl_err *e);

/* Body b of node n (of scope up) as a graph of the file. */
static Onnx__GraphProto *body_proto(pool *p, const scope *up, const kl_node *n,
                                    const kl_graph *b, kl_err *e) {
  scope sc = {b, pool_alloc(p, (size_t)b->n_values, sizeof(char *)), up->taken};
  if (!sc.names) return NULL;
  int first_cap = b->n_inputs - b->n_outer, formal = n->n_in - b->n_outer;
  for (int k = first_cap; k < b->n_inputs; k++)
    sc.names[b->inputs[k]] = value_name(up, n->in[formal + k - first_cap]);
  for (int v = 0; v < b->n_values; v++) {
    if (sc.names[v]) continue;
    const char *name = b->values[v].name;
    if (kl_strmap_get(sc.taken, name) >= 0) {
      size_t len = strlen(name) + 24;
      char *fresh = pool_alloc(p, len, 1);
      if (!fresh) return NULL;
      for (int i = 1;; i++) {
        snprintf(fresh, len, "%s_%d", b->values[v].name, i);
        if (kl_strmap_get(sc.taken, fresh) < 0 && kl_graph_find_value(b, fresh) < 0) break;
      }
      name = fresh;
    }
    if (!kl_strmap_put(sc.taken, name, v)) return p->failed = true, NULL;
    sc.names[v] = name;
  }
  Onnx__GraphProto *gp = graph_proto(p, &sc, e);
  if (gp) gp->name = "body";
  return gp;
}

static Onnx__NodeProto *node_proto(pool *p, const scope *sc, const kl_node *n, kl_err *e) {
  const kl_graph *g = sc->g;
  Onnx__NodeProto *np = NEW(p, Onnx__NodeProto, ONNX__NODE_PROTO__INIT);
  /* a control node's captures are implicit in the file: its bodies name them */
  int n_in = kl_op_is_control(n->op) ? kl_control_formal_inputs(n) : n->n_in;
  char **in = pool_alloc(p, (size_t)n_in, sizeof(char *));
  /* ONNX wants a training-mode BatchNormalization's three outputs listed (the running
   * statistics may be absent: empty names) */
  int n_out = n->op == KL_OP_BatchNormalization && kl_attr_int(n, "training_mode", 0) == 1 &&
                      n->n_out < 3
                  ? 3
                  : n->n_out;
  char **out = pool_alloc(p, (size_t)n_out, sizeof(char *));
  Onnx__AttributeProto **attrs = pool_alloc(p, (size_t)n->n_attrs, sizeof *attrs);
  if (!np || !in || !out || !attrs) return NULL;
  const kl_op_info *info = kl_op_get(n->op);
  np->name = n->name;
  np->op_type = (char *)info->name;
  np->domain = (char *)info->domain;
  for (int k = 0; k < n_in; k++) in[k] = (char *)value_name(sc, n->in[k]);
  for (int k = 0; k < n_out; k++) {
    out[k] = (char *)(k < n->n_out ? value_name(sc, n->out[k]) : "");
    if (*out[k] || k == 0) continue;
    /* a name of its own, which no value of the graph has (onnxruntime 1.32 crashes
     * running a training-mode BatchNormalization whose running outputs are absent) */
    const char *y = value_name(sc, n->out[0]);
    size_t len = strlen(y) + 32;
    char *name = pool_alloc(p, len, 1);
    if (!name) return NULL;
    for (int i = 0;; i++) {
      snprintf(name, len, "%s_running_%s%s%.0d", y, k == 1 ? "mean" : "var", i ? "_" : "", i);
      if (kl_graph_find_value(g, name) < 0 && kl_strmap_get(sc->taken, name) < 0) break;
    }
    out[k] = name;
  }
  for (int k = 0; k < n->n_attrs; k++) {
    const kl_attr *a = &n->attrs[k];
    if (n->op == KL_OP_Optional && strcmp(a->name, "elem_dtype") == 0) {
      /* the importer's ints of Optional's attribute `type` */
      kl_type t = {.dtype = (kl_dtype)a->i, .rank = -1,
                   .seq = kl_attr_int(n, "elem_sequence", 0) != 0};
      if (!(attrs[k] = NEW(p, Onnx__AttributeProto, ONNX__ATTRIBUTE_PROTO__INIT))) return NULL;
      attrs[k]->name = "type";
      attrs[k]->has_type = 1;
      attrs[k]->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO;
      if (!(attrs[k]->tp = type_proto(p, sc->g, &t))) return NULL;
      continue;
    }
    if (n->op == KL_OP_Optional && strcmp(a->name, "elem_sequence") == 0) {
      attrs[k] = NULL; /* in `type` */
      continue;
    }
    if (a->kind == KL_ATTR_GRAPH && a->g) {
      if (!(attrs[k] = NEW(p, Onnx__AttributeProto, ONNX__ATTRIBUTE_PROTO__INIT))) return NULL;
      attrs[k]->name = a->name;
      attrs[k]->has_type = 1;
      attrs[k]->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
      if (!(attrs[k]->g = body_proto(p, sc, n, a->g, e))) return NULL;
    } else if (!(attrs[k] = attr_proto(p, a, e))) {
      return NULL;
    }
  }
  size_t n_attrs = 0; /* without the NULL entries (Optional's elem_sequence) */
  for (int k = 0; k < n->n_attrs; k++)
    if (attrs[k]) attrs[n_attrs++] = attrs[k];
  np->n_input = (size_t)n_in;
  np->input = in;
  np->n_output = (size_t)n_out;
  np->output = out;
  np->n_attribute = n_attrs;
  np->attribute = attrs;
  return np;
}

static bool add_initializers(pool *p, const scope *sc, Onnx__GraphProto *gp) {
  const kl_graph *g = sc->g;
  gp->initializer = pool_alloc(p, (size_t)g->n_values, sizeof *gp->initializer);
  if (!gp->initializer) return false;
  for (int v = 0; v < g->n_values; v++) {
    const kl_value *val = &g->values[v];
    if (val->kind != KL_VALUE_CONST) continue;
    int64_t dims[KL_MAX_RANK];
    for (int i = 0; i < val->type.rank; i++) dims[i] = val->type.dims[i].size;
    Onnx__TensorProto *t = tensor_proto(p, sc->names[v], val->type.dtype, val->type.rank, dims,
                                        val->data, val->nbytes);
    if (!t) return false;
    gp->initializer[gp->n_initializer++] = t;
  }
  return true;
}

/* Inputs, outputs, and the types of the intermediate values that have one. */
static bool add_value_infos(pool *p, const scope *sc, Onnx__GraphProto *gp) {
  const kl_graph *g = sc->g;
  gp->input = pool_alloc(p, (size_t)g->n_inputs, sizeof *gp->input);
  gp->output = pool_alloc(p, (size_t)g->n_outputs, sizeof *gp->output);
  gp->value_info = pool_alloc(p, (size_t)g->n_values, sizeof *gp->value_info);
  if (!gp->input || !gp->output || !gp->value_info) return false;
  for (int i = 0; i < g->n_inputs - g->n_outer; i++) /* a body's captures are implicit */
    if (!(gp->input[gp->n_input++] = value_info(p, sc, g->inputs[i]))) return false;
  for (int i = 0; i < g->n_outputs; i++)
    if (!(gp->output[gp->n_output++] = value_info(p, sc, g->outputs[i]))) return false;
  for (int v = 0; v < g->n_values; v++) {
    const kl_value *val = &g->values[v];
    bool listed = false;
    for (int i = 0; i < g->n_outputs; i++) listed |= g->outputs[i] == v;
    if (val->kind != KL_VALUE_INTERMEDIATE || listed || val->type.dtype == KL_UNDEFINED)
      continue;
    if (!(gp->value_info[gp->n_value_info++] = value_info(p, sc, v))) return false;
  }
  return true;
}

/* Node names unique, as ONNX requires and onnxruntime checks: a name already taken
 * (a TorchScript trace repeats them, fusion keeps one of several) gets "_N" after it,
 * the first N that is free; unnamed nodes stay unnamed. */
static bool unique_node_names(pool *p, Onnx__GraphProto *gp) {
  kl_strmap *seen = kl_strmap_new();
  bool ok = seen != NULL;
  for (size_t i = 0; ok && i < gp->n_node; i++) {
    char *name = gp->node[i]->name;
    if (!name || !*name) continue;
    for (int k = 1; ok && kl_strmap_get(seen, name) >= 0; k++) {
      size_t n = strlen(gp->node[i]->name) + 24;
      if ((ok = (name = pool_alloc(p, n, 1)) != NULL))
        snprintf(name, n, "%s_%d", gp->node[i]->name, k);
    }
    if (ok) ok = kl_strmap_put(seen, name, (int)i);
    gp->node[i]->name = name;
  }
  kl_strmap_free(seen);
  return ok;
}

static Onnx__GraphProto *graph_proto(pool *p, const scope *sc, kl_err *e) {
  const kl_graph *g = sc->g;
  Onnx__GraphProto *gp = NEW(p, Onnx__GraphProto, ONNX__GRAPH_PROTO__INIT);
  if (!gp || !(gp->node = pool_alloc(p, (size_t)g->n_nodes, sizeof *gp->node))) return NULL;
  gp->name = "kiln";
  for (int i = 0; i < g->n_nodes; i++)
    if (!(gp->node[gp->n_node++] = node_proto(p, sc, &g->nodes[i], e))) return NULL;
  if (!unique_node_names(p, gp)) return NULL;
  if (!add_initializers(p, sc, gp) || !add_value_infos(p, sc, gp)) return NULL;
  return gp;
}

/* The model's graph: its values keep their names. */
static Onnx__GraphProto *main_graph_proto(pool *p, const kl_graph *g, kl_err *e) {
  scope sc = {g, pool_alloc(p, (size_t)g->n_values, sizeof(char *)), kl_strmap_new()};
  Onnx__GraphProto *gp = NULL;
  bool ok = sc.names && sc.taken;
  for (int v = 0; ok && v < g->n_values; v++) {
    sc.names[v] = g->values[v].name;
    ok = kl_strmap_put(sc.taken, sc.names[v], v);
  }
  if (ok) gp = graph_proto(p, &sc, e);
  else p->failed = true;
  kl_strmap_free(sc.taken);
  return gp;
}

static bool uses_kiln_ops(const kl_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    if (strcmp(kl_op_get(g->nodes[i].op)->domain, KL_DOMAIN_KILN) == 0) return true;
    for (int k = 0; k < g->nodes[i].n_attrs; k++)
      if (g->nodes[i].attrs[k].g && uses_kiln_ops(g->nodes[i].attrs[k].g)) return true;
  }
  return false;
}

/* Whether g (bodies included) needs an opset past 23: an op added or changed there that
 * is not a dtype extension (Attention, TopK and Range, whose 24+ forms kiln does not
 * tell apart, are counted in), a Cast's round_mode (24), or a dtype past bfloat16 (the
 * float8/4-bit/2-bit ones, some from 24 and 25). Otherwise the model is stamped opset 23,
 * the newest that released onnxruntimes take (1.30 refuses 27 as "under development"):
 * every other op kiln writes has the same form from 23 to 27. */
static bool needs_newest_opset(const kl_graph *g) {
  static const char *const newer[] = {"Attention", "Swish", "TensorScatter", "BitCast",
                                      "CumProd", "CausalConvWithState", "LinearAttention",
                                      "TopK", "Range", NULL};
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].type.dtype > KL_BF16) return true;
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    const kl_op_info *op = kl_op_get(n->op);
    if (strcmp(op->domain, KL_DOMAIN_ONNX) == 0)
      for (int k = 0; newer[k]; k++)
        if (strcmp(op->name, newer[k]) == 0) return true;
    if ((n->op == KL_OP_Cast || n->op == KL_OP_CastLike) && kl_node_attr(n, "round_mode"))
      return true;
    for (int k = 0; k < n->n_attrs; k++)
      if (n->attrs[k].g && needs_newest_opset(n->attrs[k].g)) return true;
  }
  return false;
}

static Onnx__ModelProto *model_proto(pool *p, const kl_graph *g, kl_err *e) {
  Onnx__ModelProto *m = NEW(p, Onnx__ModelProto, ONNX__MODEL_PROTO__INIT);
  Onnx__OperatorSetIdProto **ops = pool_alloc(p, 2, sizeof *ops);
  if (!m || !ops) return NULL;
  m->has_ir_version = 1;
  m->ir_version = KL_ONNX_IR_VERSION;
  m->producer_name = "kiln";
  m->producer_version = KL_VERSION;
  const char *domains[2] = {"", KL_DOMAIN_KILN};
  int64_t versions[2] = {needs_newest_opset(g) ? KL_ONNX_MAX_OPSET : KL_ONNX_RELEASED_OPSET,
                         KL_KILN_DOMAIN_VERSION};
  for (int i = 0; i < (uses_kiln_ops(g) ? 2 : 1); i++) {
    if (!(ops[i] = NEW(p, Onnx__OperatorSetIdProto, ONNX__OPERATOR_SET_ID_PROTO__INIT)))
      return NULL;
    ops[i]->domain = (char *)domains[i];
    ops[i]->has_version = 1;
    ops[i]->version = versions[i];
    m->n_opset_import++;
  }
  m->opset_import = ops;
  m->graph = main_graph_proto(p, g, e);
  return m->graph ? m : NULL;
}

kiln_status kl_onnx_export(const kl_graph *g, void **buf, size_t *len, kl_err *e) {
  pool p = {0};
  *buf = NULL;
  *len = 0;
  Onnx__ModelProto *m = model_proto(&p, g, e);
  kiln_status st = KILN_OK;
  if (!m) {
    /* not out of memory: an attribute the writer cannot write, already reported */
    st = p.failed ? kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory writing ONNX")
                  : KILN_ERR_UNSUPPORTED;
  } else {
    size_t size = onnx__model_proto__get_packed_size(m);
    if (size > MAX_MESSAGE)
      st = kl_fail(e, KILN_ERR_LIMIT, "the model needs %zu bytes of ONNX; one protobuf "
                   "message holds at most 2 GiB", size);
    else if (!(*buf = malloc(size ? size : 1)))
      st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes of ONNX", size);
    else
      *len = onnx__model_proto__pack(m, *buf);
  }
  pool_free(&p);
  return st;
}

kiln_status kl_onnx_export_file(const kl_graph *g, const char *path, kl_err *e) {
  void *buf;
  size_t len;
  kiln_status st = kl_onnx_export(g, &buf, &len, e);
  if (st == KILN_OK) st = kl_file_write(path, buf, len, NULL, 0, e);
  free(buf);
  return st;
}
