/* The ONNX importer's main line: bytes -> ModelProto -> version checks -> kl_graph.
 *
 * The graph is built in two passes over the nodes so that a file whose nodes are out
 * of order still imports (kl_graph_toposort orders it afterwards), and so that every
 * name the file uses is taken before any value is made up (canonicalization adds
 * values with fresh names, which then cannot collide with a later name of the file):
 *   1. initializers, graph inputs, Constant nodes, and a value for each node output;
 *   2. the declared types (outputs, value_info), then each node, canonicalized. */
#include "import/fileio.h"
#include "import/onnx_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KL_ONNX_MAX_DEPTH 100 /* nested messages, as protobuf's own parsers allow */
#define KL_ONNX_MAX_FILE ((size_t)INT32_MAX) /* protobuf's 2 GiB limit */
#define KL_ONNX_MAX_OPSETS 1024

/* ---- the wire format, checked before protobuf-c sees it ----
 * protobuf-c recurses once per nested message without a limit, and ONNX's messages
 * nest without bound (graphs in attributes, types in sequence types): a small file
 * could exhaust the stack. This walk bounds the depth first. It also refuses a NUL byte
 * inside a string field (a name, an op type, an external data location): protobuf-c
 * hands strings on as C strings, which would end at the NUL and silently mean another
 * name (an external file 'w.bin<NUL>x' read as 'w.bin'). Doc strings are only text and
 * may hold one. */

typedef enum wire_result { WIRE_OK, WIRE_MALFORMED, WIRE_TOO_DEEP, WIRE_NUL } wire_result;

static bool read_varint(const uint8_t *p, size_t len, size_t *i, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64 && *i < len; shift += 7) {
    uint8_t b = p[(*i)++];
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return true;
    }
  }
  return false;
}

static wire_result wire_check(const uint8_t *p, size_t len, const ProtobufCMessageDescriptor *d,
                              int depth, const char *field[2]) {
  if (depth > KL_ONNX_MAX_DEPTH) return WIRE_TOO_DEEP;
  for (size_t i = 0; i < len;) {
    uint64_t key, n;
    if (!read_varint(p, len, &i, &key) || key >> 3 == 0 || key >> 3 > UINT32_MAX)
      return WIRE_MALFORMED;
    switch (key & 7) {
    case 0: if (!read_varint(p, len, &i, &n)) return WIRE_MALFORMED; break;
    case 1: if (len - i < 8) return WIRE_MALFORMED; i += 8; break;
    case 5: if (len - i < 4) return WIRE_MALFORMED; i += 4; break;
    case 2: {
      if (!read_varint(p, len, &i, &n) || n > len - i) return WIRE_MALFORMED;
      const ProtobufCFieldDescriptor *f =
          protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3));
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
        wire_result r = wire_check(p + i, (size_t)n, f->descriptor, depth + 1, field);
        if (r != WIRE_OK) return r;
      } else if (f && f->type == PROTOBUF_C_TYPE_STRING && memchr(p + i, 0, (size_t)n) &&
                 strcmp(f->name, "doc_string") != 0) {
        field[0] = d->short_name, field[1] = f->name;
        return WIRE_NUL;
      }
      i += (size_t)n;
      break;
    }
    default: return WIRE_MALFORMED; /* groups: ONNX never uses them */
    }
  }
  return WIRE_OK;
}

/* ---- lifting the initializers' raw_data out before unpacking ----
 * protobuf-c copies every bytes field it unpacks, so unpacking a whole model holds its
 * weights twice (the file's bytes and the unpacked copy). Instead, the bytes given to
 * protobuf-c are the model without the main graph's initializers' raw_data (every
 * field else as it was, the enclosing lengths re-encoded), and each initializer's data
 * is then copied once, from the original bytes (or read from the file), into its
 * tensor. Runs after wire_check, but checks every bound itself anyway. */

#define ONNX_MODEL_GRAPH 7  /* ModelProto.graph */
#define ONNX_GRAPH_INIT 5   /* GraphProto.initializer */
#define ONNX_TENSOR_RAW 9   /* TensorProto.raw_data */

typedef struct wire_field {
  uint64_t num;
  int type;
  size_t start, body, end; /* the key, the payload, just past it */
} wire_field;

/* The field at *i (before end), or false when malformed. */
static bool next_field(const uint8_t *p, size_t end, size_t *i, wire_field *f) {
  uint64_t key, n;
  f->start = *i;
  if (!read_varint(p, end, i, &key)) return false;
  f->num = key >> 3;
  f->type = (int)(key & 7);
  switch (f->type) {
  case 0: if (!read_varint(p, end, i, &n)) return false; f->body = *i; break;
  case 1: if (end - *i < 8) return false; f->body = *i; *i += 8; break;
  case 5: if (end - *i < 4) return false; f->body = *i; *i += 4; break;
  case 2:
    if (!read_varint(p, end, i, &n) || n > end - *i) return false;
    f->body = *i;
    *i += (size_t)n;
    break;
  default: return false;
  }
  f->end = *i;
  return true;
}

static size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, n++;
  return n;
}

static uint8_t *put_varint(uint8_t *o, uint64_t v) {
  while (v >= 0x80) *o++ = (uint8_t)(v | 0x80), v >>= 7;
  *o++ = (uint8_t)v;
  return o;
}

static bool is_field(const wire_field *f, uint64_t num) { return f->num == num && f->type == 2; }

/* The size of a TensorProto (p[s, e)) without its raw_data; false when malformed. */
static bool tensor_size(const uint8_t *p, size_t s, size_t e, size_t *size) {
  wire_field f;
  *size = 0;
  for (size_t i = s; i < e;) {
    if (!next_field(p, e, &i, &f)) return false;
    if (!is_field(&f, ONNX_TENSOR_RAW)) *size += f.end - f.start;
  }
  return true;
}

/* The size of a GraphProto (p[s, e)) with its initializers stripped; counts them. */
static bool graph_size(const uint8_t *p, size_t s, size_t e, size_t *size, size_t *n_init) {
  wire_field f;
  *size = 0;
  for (size_t i = s; i < e;) {
    if (!next_field(p, e, &i, &f)) return false;
    if (!is_field(&f, ONNX_GRAPH_INIT)) {
      *size += f.end - f.start;
      continue;
    }
    size_t t;
    if (!tensor_size(p, f.body, f.end, &t)) return false;
    *size += 1 + varint_size(t) + t;
    (*n_init)++;
  }
  return true;
}

/* Writes the stripped TensorProto at o, noting its (last, as protobuf reads it)
 * raw_data in *raw. */
static uint8_t *put_tensor(const uint8_t *p, size_t s, size_t e, uint8_t *o,
                           kl_onnx_lifted *raw) {
  wire_field f;
  for (size_t i = s; i < e && next_field(p, e, &i, &f);) {
    if (!is_field(&f, ONNX_TENSOR_RAW)) {
      memcpy(o, p + f.start, f.end - f.start);
      o += f.end - f.start;
      continue;
    }
    raw->present = true;
    raw->offset = f.body;
    raw->len = f.end - f.body;
  }
  return o;
}

static uint8_t *put_graph(const uint8_t *p, size_t s, size_t e, uint8_t *o,
                          kl_onnx_lifted *raw) {
  wire_field f;
  size_t k = 0;
  for (size_t i = s; i < e && next_field(p, e, &i, &f);) {
    if (!is_field(&f, ONNX_GRAPH_INIT)) {
      memcpy(o, p + f.start, f.end - f.start);
      o += f.end - f.start;
      continue;
    }
    size_t t = 0;
    tensor_size(p, f.body, f.end, &t);
    *o++ = ONNX_GRAPH_INIT << 3 | 2;
    o = put_varint(o, t);
    o = put_tensor(p, f.body, f.end, o, &raw[k++]);
  }
  return o;
}

/* The model's bytes with the initializers' raw_data lifted out: *out (malloc'd, *out_len
 * bytes) and *raw (calloc'd, one per initializer, *n_raw). *out stays NULL when there
 * is nothing to lift (or the model names its graph twice, which protobuf merges): the
 * bytes are then unpacked as they are. */
static kiln_status lift_raw(const uint8_t *p, size_t len, uint8_t **out, size_t *out_len,
                            kl_onnx_lifted **raw, size_t *n_raw, kl_err *e) {
  wire_field f, graph = {0};
  int graphs = 0;
  *out = NULL;
  *raw = NULL;
  *n_raw = 0;
  for (size_t i = 0; i < len;) {
    if (!next_field(p, len, &i, &f))
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "not an ONNX model: protobuf parse failed");
    if (is_field(&f, ONNX_MODEL_GRAPH)) graph = f, graphs++;
  }
  size_t gsize, n_init = 0;
  if (graphs != 1) return KILN_OK;
  if (!graph_size(p, graph.body, graph.end, &gsize, &n_init))
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "not an ONNX model: protobuf parse failed");
  if (n_init == 0) return KILN_OK;
  if (n_init > KL_ONNX_MAX_ITEMS)
    return kl_fail(e, KILN_ERR_LIMIT, "the graph has %zu initializers; kiln allows %d",
                   n_init, KL_ONNX_MAX_ITEMS);
  size_t total = graph.start + 1 + varint_size(gsize) + gsize + (len - graph.end);
  *raw = calloc(n_init, sizeof **raw);
  *out = malloc(total);
  if (!*raw || !*out) {
    free(*raw);
    free(*out);
    *raw = NULL;
    *out = NULL;
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  uint8_t *o = *out;
  memcpy(o, p, graph.start);
  o += graph.start;
  *o++ = ONNX_MODEL_GRAPH << 3 | 2;
  o = put_varint(o, gsize);
  o = put_graph(p, graph.body, graph.end, o, *raw);
  memcpy(o, p + graph.end, len - graph.end);
  o += len - graph.end;
  *out_len = (size_t)(o - *out);
  *n_raw = n_init;
  for (size_t k = 0; k < n_init; k++) (*raw)[k].base = p, (*raw)[k].fd = -1;
  return KILN_OK;
}

/* ---- versions ---- */

static bool onnx_domain(const char *domain) {
  return !domain || !*domain || strcmp(domain, "ai.onnx") == 0;
}

static kiln_status check_ir(const Onnx__ModelProto *m, kl_err *e) {
  if (!m->has_ir_version)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "the model has no ir_version");
  if (m->ir_version < KL_ONNX_MIN_IR)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "IR version %lld is older than %d, the oldest "
                   "kiln reads", (long long)m->ir_version, KL_ONNX_MIN_IR);
  if (m->ir_version > KL_ONNX_MAX_IR)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "IR version %lld is newer than %d, the newest "
                   "kiln reads", (long long)m->ir_version, KL_ONNX_MAX_IR);
  return KILN_OK;
}

/* The default domain's opset, which decides the form of every ONNX op; 0 when the
 * model imports none (it may use other domains only, which nodes then report). */
static kiln_status check_opsets(const Onnx__ModelProto *m, int64_t *opset, kl_err *e) {
  bool found = false;
  *opset = 0;
  if (m->n_opset_import > KL_ONNX_MAX_OPSETS)
    return kl_fail(e, KILN_ERR_LIMIT, "the model imports %zu opsets", m->n_opset_import);
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *os = m->opset_import[i];
    if (os->domain && !kl_onnx_name_ok(os->domain))
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "an opset_import domain %s",
                     kl_onnx_name_fault(os->domain));
    if (!os->has_version)
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "opset_import of domain '%s' has no version",
                     os->domain ? os->domain : "");
    if (!onnx_domain(os->domain)) continue;
    if (found)
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "opset_import lists the default domain twice");
    found = true;
    *opset = os->version;
  }
  if (!found) return KILN_OK;
  if (*opset < KL_ONNX_MIN_OPSET)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "opset %lld is older than %d, the oldest kiln "
                   "reads", (long long)*opset, KL_ONNX_MIN_OPSET);
  if (*opset > KL_ONNX_MAX_OPSET)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "opset %lld is newer than %d, the newest kiln "
                   "supports", (long long)*opset, KL_ONNX_MAX_OPSET);
  return KILN_OK;
}

/* The version a model imports of a domain, 0 when it does not. */
static int64_t domain_version(const Onnx__ModelProto *m, const char *domain) {
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const char *d = m->opset_import[i]->domain ? m->opset_import[i]->domain : "";
    if (strcmp(d, domain) == 0) return m->opset_import[i]->version;
  }
  return 0;
}

/* ---- types ---- */

static kiln_status parse_dim(kl_onnx_ctx *c, const Onnx__TensorShapeProto__Dimension *d,
                             kl_dim *out, const char *what) {
  out->size = -1;
  out->sym = -1;
  if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
    if (d->dim_value < 0)
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s has a dimension of size %lld", what,
                     (long long)d->dim_value);
    out->size = d->dim_value;
  } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
             d->dim_param && *d->dim_param) {
    if (!kl_onnx_name_ok(d->dim_param))
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s has a dim_param that %s", what,
                     kl_onnx_name_fault(d->dim_param));
    if ((out->sym = kl_graph_symbol(c->g, d->dim_param)) < 0)
      return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  return KILN_OK;
}

static const char *type_case_name(Onnx__TypeProto__ValueCase vc) {
  switch (vc) {
  case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE: return "a sequence";
  case ONNX__TYPE_PROTO__VALUE_MAP_TYPE: return "a map";
  case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE: return "an optional";
  case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE: return "a sparse tensor";
  default: return "not a tensor";
  }
}

static kiln_status parse_tensor_type(kl_onnx_ctx *c, const Onnx__TypeProto__Tensor *tt,
                                     bool need, const char *what, kl_type *t) {
  int et = tt->has_elem_type ? tt->elem_type : 0;
  if (et == 0 && need)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s has no element type", what);
  if (et != 0 && !kl_dtype_valid(et))
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%s has element type %s (%d), which kiln "
                   "does not support", what, kl_onnx_dtype_name(et), et);
  t->dtype = (kl_dtype)et;
  if (!tt->shape) return KILN_OK;
  if (tt->shape->n_dim > KL_MAX_RANK)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%s has rank %zu; kiln supports up to %d",
                   what, tt->shape->n_dim, KL_MAX_RANK);
  t->rank = (int)tt->shape->n_dim;
  for (int i = 0; i < t->rank; i++) {
    kiln_status s = parse_dim(c, tt->shape->dim[i], &t->dims[i], what);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* A declared type: a tensor, a sequence of tensors, an optional tensor or an optional
 * sequence of tensors (kl_type's seq and opt). need: the value must have a type with
 * an element type (graph inputs); otherwise a missing type leaves it unknown. */
static kiln_status parse_type(kl_onnx_ctx *c, const Onnx__TypeProto *tp, bool need,
                              const char *what, kl_type *t) {
  memset(t, 0, sizeof *t);
  t->rank = -1;
  if (!tp || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET)
    return need ? kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s has no type", what) : KILN_OK;
  if (tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE) {
    t->opt = true;
    tp = tp->optional_type ? tp->optional_type->elem_type : NULL;
    if (!tp || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET)
      return need ? kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s has no element type", what)
                  : KILN_OK;
  }
  if (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE) {
    t->seq = true;
    tp = tp->sequence_type ? tp->sequence_type->elem_type : NULL;
    if (!tp || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET)
      return need ? kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s has no element type", what)
                  : KILN_OK;
  }
  if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%s is %s%s; kiln supports tensors, sequences "
                   "of tensors and optionals of those only", what,
                   t->seq ? "a sequence of " : t->opt ? "an optional of " : "",
                   type_case_name(tp->value_case));
  return parse_tensor_type(c, tp->tensor_type, need, what, t);
}

/* ---- pass 1: the values the file names ---- */

static kiln_status add_initializers(kl_onnx_ctx *c, const Onnx__GraphProto *gp) {
  char what[KL_ONNX_MAX_NAME + 32];
  if (gp->n_sparse_initializer)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "the model has sparse initializers, which "
                   "kiln does not support");
  for (size_t i = 0; i < gp->n_initializer; i++) {
    Onnx__TensorProto *tp = gp->initializer[i];
    if (!tp->name || !*tp->name)
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "initializer %zu has no name", i);
    if (!kl_onnx_name_ok(tp->name))
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "initializer %zu's name %s", i,
                     kl_onnx_name_fault(tp->name));
    snprintf(what, sizeof what, "initializer '%s'", tp->name);
    kl_tensor t;
    size_t nbytes;
    const kl_onnx_lifted *raw =
        i < c->n_lifted && c->lifted[i].present ? &c->lifted[i] : NULL;
    kiln_status s = kl_onnx_tensor_decode_lifted(tp, &c->ts, what, raw, &t, &nbytes, c->e);
    if (s != KILN_OK) return s;
    if (kl_graph_add_const(c->g, tp->name, t.dtype, t.rank, t.dims, t.data, nbytes, false,
                           c->e) < 0)
      return c->e->code;
  }
  return KILN_OK;
}

/* An input that is also an initializer stays the constant (see onnx.h). A body's
 * inputs may leave their types to the node that runs it. */
static kiln_status add_inputs(kl_onnx_ctx *c, const Onnx__GraphProto *gp) {
  char what[KL_ONNX_MAX_NAME + 32];
  for (size_t i = 0; i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    if (kl_onnx_name_fault(vi->name))
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "graph input %zu's name %s", i,
                     kl_onnx_name_fault(vi->name));
    int id = kl_graph_find_value(c->g, vi->name);
    if (id >= 0 && c->g->values[id].kind == KL_VALUE_CONST) continue;
    snprintf(what, sizeof what, "%s input '%s'", c->parent ? "body" : "graph", vi->name);
    kl_type t;
    kiln_status s = parse_type(c, vi->type, !c->parent, what, &t);
    if (s != KILN_OK) return s;
    if ((id = kl_graph_add_value(c->g, vi->name, c->e)) < 0) {
      kl_err_prefix(c->e, "graph input %zu", i);
      return c->e->code;
    }
    c->g->values[id].type = t;
    if ((s = kl_graph_add_input(c->g, id, c->e)) != KILN_OK) return s;
  }
  return KILN_OK;
}

static bool is_constant(const Onnx__NodeProto *np) {
  return onnx_domain(np->domain) && strcmp(np->op_type, "Constant") == 0;
}

/* Constant's list forms: value_floats / value_ints as 1-D tensors. */
static kiln_status constant_list(kl_onnx_ctx *c, const Onnx__AttributeProto *ap, bool ints,
                                 kl_tensor *t, size_t *nbytes) {
  size_t n = ints ? ap->n_ints : ap->n_floats, esize = ints ? 8 : 4;
  *nbytes = n * esize; /* n elements came from a file of at most 2 GiB: no overflow */
  if (*nbytes > (uint64_t)c->ts.max_bytes)
    return kl_fail(c->e, KILN_ERR_LIMIT, "Constant is %zu bytes, over the limit of %lld "
                   "(max_tensor_bytes)", *nbytes, (long long)c->ts.max_bytes);
  t->dtype = ints ? KL_I64 : KL_F32;
  t->rank = 1;
  t->dims[0] = (int64_t)n;
  if (!(t->data = malloc(*nbytes ? *nbytes : 1)))
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (n) memcpy(t->data, ints ? (const void *)ap->ints : (const void *)ap->floats, *nbytes);
  return KILN_OK;
}

static kiln_status constant_scalar(kl_onnx_ctx *c, const Onnx__AttributeProto *ap, bool is_int,
                                   kl_tensor *t, size_t *nbytes) {
  t->dtype = is_int ? KL_I64 : KL_F32;
  t->rank = 0;
  *nbytes = kl_dtype_size(t->dtype);
  if (!(t->data = malloc(*nbytes))) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (is_int) *(int64_t *)t->data = ap->i;
  else *(float *)t->data = ap->f;
  return KILN_OK;
}

/* The attribute kind (kl_attr_kind, ONNX's numbers) each form of Constant's value has;
 * 0 for other names. */
static int constant_form(const char *name) {
  static const struct { const char *name; int kind; } forms[] = {
      {"value", KL_ATTR_TENSOR},      {"value_float", KL_ATTR_FLOAT},
      {"value_floats", KL_ATTR_FLOATS}, {"value_int", KL_ATTR_INT},
      {"value_ints", KL_ATTR_INTS},
  };
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
    if (strcmp(name, forms[i].name) == 0) return forms[i].kind;
  return 0;
}

static kiln_status constant_value(kl_onnx_ctx *c, const Onnx__AttributeProto *ap, kl_tensor *t,
                                  size_t *nbytes) {
  const char *name = ap->name ? ap->name : "";
  int form = constant_form(name);
  memset(t, 0, sizeof *t);
  if (!kl_onnx_name_ok(name))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "Constant's attribute name %s",
                   kl_onnx_name_fault(name));
  if (!strcmp(name, "value_string") || !strcmp(name, "value_strings") ||
      !strcmp(name, "sparse_value"))
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "Constant '%s' is not supported (kiln has no "
                   "string or sparse tensors)", name);
  if (!form)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "Constant has no value (attribute '%s' "
                   "is not one of value, value_float(s), value_int(s))", name);
  if (!ap->has_type || (int)ap->type != form || (form == KL_ATTR_TENSOR && !ap->t))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "Constant attribute '%s' has the wrong "
                   "type", name);
  switch (form) {
  case KL_ATTR_TENSOR:
    return kl_onnx_tensor_decode(ap->t, &c->ts, "Constant value", t, nbytes, c->e);
  case KL_ATTR_FLOATS: return constant_list(c, ap, false, t, nbytes);
  case KL_ATTR_INTS: return constant_list(c, ap, true, t, nbytes);
  default: return constant_scalar(c, ap, form == KL_ATTR_INT, t, nbytes);
  }
}

static kiln_status add_constant(kl_onnx_ctx *c, const Onnx__NodeProto *np) {
  if (np->n_input != 0 || np->n_output != 1 || !*np->output[0])
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "a Constant takes no inputs and has one "
                   "output (found %zu and %zu)", np->n_input, np->n_output);
  if (np->n_attribute != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "a Constant has exactly one attribute "
                   "(found %zu)", np->n_attribute);
  kl_tensor t;
  size_t nbytes;
  kiln_status s = constant_value(c, np->attribute[0], &t, &nbytes);
  if (s != KILN_OK) return s;
  if (kl_graph_add_const(c->g, np->output[0], t.dtype, t.rank, t.dims, t.data, nbytes, false,
                         c->e) < 0)
    return c->e->code;
  return KILN_OK;
}

static const char *describe(const Onnx__NodeProto *np, int index, char *buf, size_t len) {
  if (np->name && *np->name) snprintf(buf, len, "node '%s' (%s)", np->name, np->op_type);
  else snprintf(buf, len, "node #%d (%s)", index, np->op_type);
  return buf;
}

/* Names first, so that every later message may print them. */
static kiln_status check_node_text(kl_onnx_ctx *c, const Onnx__NodeProto *np, int index) {
  if (kl_onnx_name_fault(np->op_type))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "node #%d: op_type %s", index,
                   kl_onnx_name_fault(np->op_type));
  if (np->name && !kl_onnx_name_ok(np->name))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "node #%d (%s): name %s", index,
                   np->op_type, kl_onnx_name_fault(np->name));
  if (np->domain && !kl_onnx_name_ok(np->domain))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "node #%d (%s): domain %s", index,
                   np->op_type, kl_onnx_name_fault(np->domain));
  if (np->n_input > KL_ONNX_MAX_NODE_IO || np->n_output > KL_ONNX_MAX_NODE_IO ||
      np->n_attribute > KL_ONNX_MAX_ATTRS)
    return kl_fail(c->e, KILN_ERR_LIMIT, "node #%d (%s) has %zu inputs, %zu outputs and %zu "
                   "attributes; kiln allows %d, %d and %d", index, np->op_type, np->n_input,
                   np->n_output, np->n_attribute, KL_ONNX_MAX_NODE_IO, KL_ONNX_MAX_NODE_IO,
                   KL_ONNX_MAX_ATTRS);
  for (size_t i = 0; i < np->n_input; i++)
    if (!kl_onnx_name_ok(np->input[i]))
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "node #%d (%s) input %zu's name %s",
                     index, np->op_type, i, kl_onnx_name_fault(np->input[i]));
  for (size_t i = 0; i < np->n_output; i++)
    if (!kl_onnx_name_ok(np->output[i]))
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "node #%d (%s) output %zu's name %s",
                     index, np->op_type, i, kl_onnx_name_fault(np->output[i]));
  return KILN_OK;
}

static kiln_status declare_node(kl_onnx_ctx *c, const Onnx__NodeProto *np, int index) {
  kiln_status s = check_node_text(c, np, index);
  if (s != KILN_OK) return s;
  if (onnx_domain(np->domain) && c->opset == 0) {
    s = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "the node is of the default ONNX domain, "
                "which the model does not import (no opset_import for it)");
  } else if (is_constant(np)) {
    s = add_constant(c, np);
  } else {
    for (size_t i = 0; i < np->n_output && s == KILN_OK; i++)
      if (*np->output[i] && kl_graph_add_value(c->g, np->output[i], c->e) < 0) s = c->e->code;
  }
  if (s != KILN_OK) {
    char d[KL_ONNX_MAX_NAME + 64];
    kl_err_prefix(c->e, "%s", describe(np, index, d, sizeof d));
  }
  return s;
}

/* ---- names of enclosing graphs ---- */

/* The id in c's graph of `name`, which c's graph does not define: for a body, a value of
 * an enclosing graph, entered as a capture (a body input recorded in c->caps) or, for a
 * constant, as a copy of it. -1 when no enclosing graph has it (or out of memory, with
 * c->e set). */
static int outer_value(kl_onnx_ctx *c, const char *name) {
  if (!c->parent) return -1;
  kl_onnx_ctx *p = c->parent;
  int pid = kl_graph_find_value(p->g, name);
  if (pid < 0) pid = outer_value(p, name);
  if (pid < 0) return -1;
  const kl_value *pv = &p->g->values[pid];
  if (pv->kind == KL_VALUE_CONST) {
    int64_t dims[KL_MAX_RANK];
    for (int d = 0; d < pv->type.rank; d++) dims[d] = pv->type.dims[d].size;
    void *data = malloc(pv->nbytes ? pv->nbytes : 1);
    if (!data) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
    if (pv->nbytes) memcpy(data, pv->data, pv->nbytes);
    return kl_graph_add_const(c->g, name, pv->type.dtype, pv->type.rank, dims, data,
                              pv->nbytes, false, c->e);
  }
  if (c->n_caps == c->cap_caps) {
    int cap = c->cap_caps ? 2 * c->cap_caps : 8;
    int *caps = realloc(c->caps, sizeof(int) * (size_t)cap);
    if (!caps) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
    c->caps = caps;
    c->cap_caps = cap;
  }
  int id = kl_graph_add_value(c->g, name, c->e);
  if (id < 0 || kl_graph_add_input(c->g, id, c->e) != KILN_OK) return -1;
  c->caps[c->n_caps++] = pid;
  return id;
}

/* The id of `name` in c's graph or, for a body, in an enclosing one; -1 if none (c->e
 * set only when out of memory). */
static int find_name(kl_onnx_ctx *c, const char *name) {
  int id = kl_graph_find_value(c->g, name);
  return id >= 0 ? id : outer_value(c, name);
}

/* ---- pass 2: declared types, then the nodes ---- */

/* A declared type goes on values that nodes compute; inputs and constants have their
 * own. value_info about a name the graph does not have is ignored. */
static kiln_status declare_type(kl_onnx_ctx *c, const Onnx__ValueInfoProto *vi, bool output) {
  char what[KL_ONNX_MAX_NAME + 32];
  if (kl_onnx_name_fault(vi->name))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "a graph %s's name %s",
                   output ? "output" : "value_info entry", kl_onnx_name_fault(vi->name));
  int id = output ? find_name(c, vi->name) : kl_graph_find_value(c->g, vi->name);
  if (id < 0 && output && c->e->code) return c->e->code;
  if (id < 0 && output)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "graph output '%s' is not a graph input, "
                   "an initializer or the output of any node", vi->name);
  if (id < 0) return KILN_OK;
  snprintf(what, sizeof what, "%s '%s'", output ? "graph output" : "value_info", vi->name);
  kl_type t;
  kiln_status s = parse_type(c, vi->type, false, what, &t);
  if (s != KILN_OK) return s;
  if (c->g->values[id].kind == KL_VALUE_INTERMEDIATE) c->g->values[id].type = t;
  return output ? kl_graph_add_output(c->g, id, c->e) : KILN_OK;
}

kiln_status kl_onnx_node_reserve_input(kl_onnx_ctx *c, kl_onnx_node *n, int slot) {
  if (slot >= n->cap_in) {
    int *p = realloc(n->in, sizeof(int) * (size_t)(slot + 1));
    if (!p) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    n->in = p;
    n->cap_in = slot + 1;
  }
  for (; n->n_in <= slot; n->n_in++) n->in[n->n_in] = KL_ABSENT;
  return KILN_OK;
}

/* Value ids for the node's names; "" (an absent optional) is KL_ABSENT, and trailing
 * absent ones are dropped. */
static kiln_status resolve_names(kl_onnx_ctx *c, char **names, size_t count, bool inputs,
                                 int **ids, int *n) {
  while (count > 0 && !*names[count - 1]) count--;
  if (!(*ids = malloc(sizeof(int) * (count + 1))))
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  *n = (int)count;
  for (size_t i = 0; i < count; i++) {
    if (!*names[i]) {
      (*ids)[i] = KL_ABSENT;
      continue;
    }
    (*ids)[i] = inputs ? find_name(c, names[i]) : kl_graph_find_value(c->g, names[i]);
    if ((*ids)[i] < 0 && c->e->code) return c->e->code;
    if ((*ids)[i] < 0)
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s %zu '%s' is not a graph input, an "
                     "initializer or the output of any node", inputs ? "input" : "output", i,
                     names[i]);
  }
  return KILN_OK;
}

static kiln_status arity(kl_onnx_ctx *c, const char *what, int n, int lo, int hi) {
  if (n >= lo && n <= hi) return KILN_OK;
  if (hi >= KL_ARITY_ANY && n > hi) /* variadic: kiln's own bound */
    return kl_fail(c->e, KILN_ERR_LIMIT, "it has %d %s; kiln takes at most %d", n, what, hi);
  if (hi >= KL_ARITY_ANY)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "it has %d %s; the op takes at least %d", n,
                   what, lo);
  return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "it has %d %s; the op takes %d to %d", n, what,
                 lo, hi);
}

static bool dropped(const kl_onnx_node *n, const char *attr) {
  for (int i = 0; i < n->n_drop; i++)
    if (strcmp(n->drop[i], attr) == 0) return true;
  return false;
}

/* An attribute the op does not have, as onnx.checker and onnxruntime refuse it: read as
 * absent, a misspelt one ("axiss") would silently leave the default in force. A node
 * read as another op (Upsample as Resize, com.microsoft's QLinear ops as their float
 * op) is told so, since that op's list is the one that applies. */
static kiln_status unknown_attr(kl_onnx_ctx *c, const kl_onnx_node *n, const char *name) {
  const kl_op_info *info = kl_op_get(n->op);
  char list[512], as[KL_ONNX_MAX_NAME + 64] = "";
  size_t used = 0;
  list[0] = '\0';
  for (const char *p = info->attrs; *p && used < sizeof list;) {
    size_t word = strcspn(p, " ");
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%.*s", used ? ", " : "",
                             (int)word, p);
    p += word;
    p += strspn(p, " ");
  }
  if (strcmp(n->np->op_type, info->name) != 0)
    snprintf(as, sizeof as, "%s is read as %s, which", n->np->op_type, info->name);
  else
    snprintf(as, sizeof as, "%s", info->name);
  if (!*list)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "unrecognized attribute '%s': %s takes no "
                   "attributes", name, as);
  return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "unrecognized attribute '%s': %s takes %s",
                 name, as, list);
}

static kiln_status copy_attrs(kl_onnx_ctx *c, const kl_onnx_node *n, int node) {
  const Onnx__NodeProto *np = n->np;
  for (size_t i = 0; i < np->n_attribute; i++) {
    const Onnx__AttributeProto *ap = np->attribute[i];
    if (ap->name && dropped(n, ap->name)) continue;
    for (size_t j = 0; ap->name && j < i; j++)
      if (np->attribute[j]->name && strcmp(np->attribute[j]->name, ap->name) == 0)
        return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "attribute '%s' is given twice",
                       ap->name);
    kl_attr a;
    kiln_status s = kl_onnx_attr_convert(ap, &c->ts, &a, c->e);
    if (s == KILN_OK && !kl_op_takes_attr(n->op, a.name)) {
      s = unknown_attr(c, n, a.name);
      kl_attr_clear(&a);
    }
    if (s == KILN_OK) s = kl_node_take_attr(c->g, node, &a, c->e);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

kiln_status kl_onnx_emit(kl_onnx_ctx *c, kl_onnx_node *n, int *node) {
  const kl_op_info *info = kl_op_get(n->op);
  int given = n->n_in;
  while (given > 0 && n->in[given - 1] == KL_ABSENT) given--;
  kiln_status s = arity(c, "inputs", given, info->min_in, info->max_in);
  if (s == KILN_OK) s = arity(c, "outputs", n->n_out, info->min_out, info->max_out);
  if (s != KILN_OK) return s;
  *node = kl_graph_add_node(c->g, n->op, n->name, given, n->in, n->n_out, n->out, c->e);
  if (*node < 0) return c->e->code;
  return copy_attrs(c, n, *node);
}

/* Whether kiln has the op of node np (in a domain it reads). */
/* The op kiln runs node np as (an old ONNX name through its alias), or KL_OP_COUNT;
 * *contrib: a com.microsoft op that kl_onnx_contrib_emit lowers instead. */
static kl_op resolve_op(const Onnx__NodeProto *np, bool *contrib) {
  const char *domain = np->domain ? np->domain : "";
  *contrib = false;
  if (!np->op_type) return KL_OP_COUNT;
  if (strcmp(domain, KL_DOMAIN_MS) == 0) {
    *contrib = kl_onnx_contrib_has(np->op_type);
    return KL_OP_COUNT;
  }
  if (!onnx_domain(domain) && strcmp(domain, KL_DOMAIN_KILN) != 0) return KL_OP_COUNT;
  kl_op op = kl_op_lookup(domain, np->op_type);
  return op == KL_OP_COUNT && onnx_domain(domain) ? kl_onnx_canon_alias(np->op_type) : op;
}

static bool has_op(const Onnx__NodeProto *np) {
  bool contrib;
  return resolve_op(np, &contrib) != KL_OP_COUNT || contrib;
}

/* "; in all 5 nodes of 3 ops kiln does not have: Foo (2 nodes), com.x.Bar (2 nodes),
 * Baz (1 node)" when more nodes than the first one found lack their op, so that a user
 * learns every missing op at once; "" otherwise. */
static void every_missing_op(const Onnx__GraphProto *gp, char *buf, size_t len) {
  enum { MAX_LISTED = 12 };
  const Onnx__NodeProto *first[MAX_LISTED];
  int count[MAX_LISTED], n_ops = 0, n_nodes = 0, unlisted = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    if (is_constant(np) || has_op(np)) continue;
    n_nodes++;
    const char *dom = np->domain ? np->domain : "", *op = np->op_type ? np->op_type : "";
    int k = 0;
    while (k < n_ops && !(strcmp(first[k]->op_type ? first[k]->op_type : "", op) == 0 &&
                          strcmp(first[k]->domain ? first[k]->domain : "", dom) == 0))
      k++;
    if (k < n_ops) count[k]++;
    else if (n_ops < MAX_LISTED) first[n_ops] = np, count[n_ops++] = 1;
    else unlisted++;
  }
  if (n_nodes < 2) return;
  size_t used = (size_t)snprintf(buf, len, "; in all %d nodes of %s%d ops kiln does not have:",
                                 n_nodes, unlisted ? "more than " : "", n_ops);
  for (int k = 0; k < n_ops && used < len; k++) {
    const char *dom = first[k]->domain ? first[k]->domain : "";
    used += (size_t)snprintf(buf + used, len - used, "%s %s%s%.64s (%d node%s)", k ? "," : "",
                             onnx_domain(dom) ? "" : dom, onnx_domain(dom) ? "" : ".",
                             first[k]->op_type ? first[k]->op_type : "", count[k],
                             count[k] == 1 ? "" : "s");
  }
  if (unlisted && used < len) snprintf(buf + used, len - used, ", ...");
}

static kiln_status lookup_op(kl_onnx_ctx *c, const Onnx__ModelProto *m,
                             const Onnx__GraphProto *gp, kl_onnx_node *n) {
  const Onnx__NodeProto *np = n->np;
  const char *domain = np->domain ? np->domain : "";
  int64_t version = onnx_domain(domain) ? c->opset : domain_version(m, domain);
  char who[KL_ONNX_MAX_NAME * 2 + 96];
  if (*n->name)
    snprintf(who, sizeof who, "node '%s' (op '%s', domain '%s', opset %lld)", n->name,
             np->op_type, domain, (long long)version);
  else
    snprintf(who, sizeof who, "node #%d (op '%s', domain '%s', opset %lld)", n->index,
             np->op_type, domain, (long long)version);
  n->op = resolve_op(np, &n->contrib);
  if (n->op != KL_OP_COUNT || n->contrib) return KILN_OK;
  char all[512];
  every_missing_op(gp, all, sizeof all);
  if (!onnx_domain(domain) && strcmp(domain, KL_DOMAIN_KILN) != 0)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%s: domain '%s' is not supported by kiln%s",
                   who, domain, all);
  return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%s: op not supported by kiln%s", who, all);
}

static kiln_status import_graph(kl_onnx_ctx *c, const Onnx__ModelProto *m,
                                const Onnx__GraphProto *gp);

/* The graph attribute of control node n named `name`, or NULL with c->e set. */
static const Onnx__GraphProto *body_proto(kl_onnx_ctx *c, const kl_onnx_node *n,
                                          const char *name) {
  const Onnx__AttributeProto *ap = kl_onnx_node_attr(n, name);
  if (!ap || !ap->has_type || ap->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH || !ap->g)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s needs a graph attribute '%s'",
                   kl_op_name(n->op), name), NULL;
  return ap->g;
}

/* Body b (imported with captures caps, n of them) takes every capture of `all` (n_all)
 * as its inputs after its own, in that order: those it does not read as unused inputs. */
static kiln_status align_captures(kl_onnx_ctx *c, kl_graph *b, const int *caps, int n,
                                  const int *all, int n_all) {
  int own = b->n_inputs - n;
  int *ins = malloc(sizeof(int) * (size_t)(own + n_all + 1));
  if (!ins) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (own > 0) memcpy(ins, b->inputs, sizeof(int) * (size_t)own); /* NULL when none */
  for (int k = 0; k < n_all; k++) {
    int j = 0;
    while (j < n && caps[j] != all[k]) j++;
    if (j < n) {
      ins[own + k] = b->inputs[own + j];
      continue;
    }
    const char *name = c->g->values[all[k]].name;
    int id = kl_graph_add_value(b, kl_graph_find_value(b, name) < 0 ? name : NULL, c->e);
    if (id < 0) {
      free(ins);
      return c->e->code;
    }
    b->values[id].kind = KL_VALUE_INPUT;
    ins[own + k] = id;
  }
  free(b->inputs);
  b->inputs = ins;
  b->n_inputs = own + n_all;
  b->n_outer = n_all;
  return KILN_OK;
}

/* If, Loop and Scan: each body imported as a graph of its own that reads the values of
 * this graph it names (and theirs, for a nested body) as extra inputs; the node takes
 * those values after its own inputs (ir.h). */
static kiln_status import_control(kl_onnx_ctx *c, const Onnx__ModelProto *m, kl_onnx_node *n) {
  if (n->op == KL_OP_Scan && c->opset < 9)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "Scan's opset %lld is older than the Scan "
                   "kiln runs (opset 9 and later; opset 8's batched form with sequence_lens "
                   "is not supported): re-export at opset 9 or later", (long long)c->opset);
  const char *names[2] = {"body", NULL};
  if (n->op == KL_OP_If) names[0] = "then_branch", names[1] = "else_branch";
  kl_graph *bodies[2] = {NULL, NULL};
  int *caps[2] = {NULL, NULL}, n_caps[2] = {0, 0}, *all = NULL, n_all = 0;
  kiln_status s = KILN_OK;
  for (int k = 0; k < 2 && names[k] && s == KILN_OK; k++) {
    const Onnx__GraphProto *gp = body_proto(c, n, names[k]);
    if (!gp) s = c->e->code;
    else if (!(bodies[k] = kl_graph_new())) s = kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (s != KILN_OK) break;
    kl_onnx_ctx bc = {.g = bodies[k], .e = c->e, .ts = c->ts, .opset = c->opset, .parent = c};
    bodies[k]->opset = c->opset;
    /* before the import, for the bodies in this one to take it too */
    s = kl_graph_set_source(bodies[k], c->g->source, c->e);
    if (s == KILN_OK) s = import_graph(&bc, m, gp);
    if (s != KILN_OK) kl_err_prefix(c->e, "in %s", names[k]);
    caps[k] = bc.caps;
    n_caps[k] = bc.n_caps;
  }
  if (s == KILN_OK && !(all = malloc(sizeof(int) * (size_t)(n_caps[0] + n_caps[1] + 1))))
    s = kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int k = 0; k < 2 && s == KILN_OK; k++)
    for (int j = 0; j < n_caps[k]; j++) {
      int i = 0;
      while (i < n_all && all[i] != caps[k][j]) i++;
      if (i == n_all) all[n_all++] = caps[k][j];
    }
  for (int k = 0; k < 2 && bodies[k] && s == KILN_OK; k++)
    s = align_captures(c, bodies[k], caps[k], n_caps[k], all, n_all);
  /* the node's own inputs, as many as its body takes: If's cond; Loop's M, cond and the
   * carried values; Scan's states and scanned inputs */
  int formal = 1;
  if (s == KILN_OK && n->op != KL_OP_If) {
    formal = bodies[0]->n_inputs - n_all;
    if (n->op == KL_OP_Loop && formal < 2)
      s = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "Loop's body has %d inputs; it takes at "
                  "least the iteration number and cond", formal);
    else if (n->op == KL_OP_Scan && formal != n->n_in)
      s = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "Scan's body has %d inputs and the node %d; "
                  "they must be the same (states, then one slice of each scanned input)",
                  formal, n->n_in);
    else if (n->n_in > formal)
      s = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "Loop has %d inputs but its body takes %d "
                  "(M, cond and each loop-carried value)", n->n_in, formal);
  }
  for (int k = 0; k < 2 && bodies[k] && s == KILN_OK && n->op == KL_OP_If; k++)
    if (bodies[k]->n_inputs != n_all)
      s = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "If's %s declares %d inputs; a branch takes "
                  "none", names[k], bodies[k]->n_inputs - n_all);
  if (s == KILN_OK) s = kl_onnx_node_reserve_input(c, n, formal + n_all - 1);
  if (s == KILN_OK) {
    n->n_in = formal + n_all;
    for (int k = 0; k < n_all; k++) n->in[formal + k] = all[k];
    int node;
    for (int k = 0; k < 2 && names[k]; k++) n->drop[n->n_drop++] = names[k];
    s = kl_onnx_emit(c, n, &node);
    for (int k = 0; k < 2 && names[k] && s == KILN_OK; k++) {
      kl_attr a = {.kind = KL_ATTR_GRAPH, .g = bodies[k]};
      if (!(a.name = strdup(names[k]))) {
        s = kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        break;
      }
      bodies[k] = NULL; /* the node owns it now, even on failure */
      s = kl_node_take_attr(c->g, node, &a, c->e);
    }
  }
  for (int k = 0; k < 2; k++) {
    kl_graph_free(bodies[k]);
    free(caps[k]);
  }
  free(all);
  return s;
}

/* Optional: its attribute `type` (a TypeProto, what an Optional with no input holds)
 * becomes the ints elem_dtype and elem_sequence. */
static kiln_status import_optional(kl_onnx_ctx *c, kl_onnx_node *n) {
  const Onnx__AttributeProto *ap = kl_onnx_node_attr(n, "type");
  kl_type t;
  memset(&t, 0, sizeof t);
  t.rank = -1;
  if (ap && (!ap->has_type || ap->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "attribute 'type' must be a type");
  kiln_status s = ap ? parse_type(c, ap->tp, false, "attribute 'type'", &t) : KILN_OK;
  if (s == KILN_OK && t.opt)
    s = kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an optional of an optional is not supported");
  if (s != KILN_OK) return s;
  n->drop[n->n_drop++] = "type";
  int node;
  s = kl_onnx_emit(c, n, &node);
  if (s == KILN_OK && ap) s = kl_node_set_int(c->g, node, "elem_dtype", t.dtype, c->e);
  if (s == KILN_OK && ap) s = kl_node_set_int(c->g, node, "elem_sequence", t.seq, c->e);
  return s;
}

static kiln_status import_node(kl_onnx_ctx *c, const Onnx__ModelProto *m,
                               const Onnx__GraphProto *gp, int index) {
  const Onnx__NodeProto *np = gp->node[index];
  if (is_constant(np)) return KILN_OK;
  kl_onnx_node n = {.np = np, .index = index, .name = np->name ? np->name : ""};
  kiln_status s = lookup_op(c, m, gp, &n);
  if (s != KILN_OK) return s;
  s = resolve_names(c, np->input, np->n_input, true, &n.in, &n.n_in);
  n.cap_in = n.n_in + 1;
  if (s == KILN_OK) s = resolve_names(c, np->output, np->n_output, false, &n.out, &n.n_out);
  if (s == KILN_OK && kl_op_is_control(n.op)) s = import_control(c, m, &n);
  else if (s == KILN_OK && n.op == KL_OP_Optional) s = import_optional(c, &n);
  else if (s == KILN_OK) s = n.contrib ? kl_onnx_contrib_emit(c, &n) : kl_onnx_canon_emit(c, &n);
  if (s != KILN_OK) {
    char d[KL_ONNX_MAX_NAME + 64];
    kl_err_prefix(c->e, "%s", describe(np, index, d, sizeof d));
  }
  free(n.in);
  free(n.out);
  return s;
}

/* ---- the whole graph ---- */

static kiln_status check_counts(const Onnx__GraphProto *gp, kl_err *e) {
  size_t most = gp->n_node;
  const char *what = "nodes";
  if (gp->n_initializer > most) most = gp->n_initializer, what = "initializers";
  if (gp->n_input > most) most = gp->n_input, what = "inputs";
  if (gp->n_output > most) most = gp->n_output, what = "outputs";
  if (gp->n_value_info > most) most = gp->n_value_info, what = "value_info entries";
  if (most > KL_ONNX_MAX_ITEMS)
    return kl_fail(e, KILN_ERR_LIMIT, "the graph has %zu %s; kiln allows %d", most, what,
                   KL_ONNX_MAX_ITEMS);
  return KILN_OK;
}

static kiln_status import_graph(kl_onnx_ctx *c, const Onnx__ModelProto *m,
                                const Onnx__GraphProto *gp) {
  kiln_status s = check_counts(gp, c->e);
  if (s == KILN_OK) s = add_initializers(c, gp);
  if (s == KILN_OK) s = add_inputs(c, gp);
  for (size_t i = 0; s == KILN_OK && i < gp->n_node; i++)
    s = declare_node(c, gp->node[i], (int)i);
  for (size_t i = 0; s == KILN_OK && i < gp->n_output; i++)
    s = declare_type(c, gp->output[i], true);
  for (size_t i = 0; s == KILN_OK && i < gp->n_value_info; i++)
    s = declare_type(c, gp->value_info[i], false);
  for (size_t i = 0; s == KILN_OK && i < gp->n_node; i++) s = import_node(c, m, gp, (int)i);
  return s;
}

/* Checks the bytes and unpacks them into *m; with m NULL, only checks them. */
static kiln_status unpack(const void *buf, size_t len, ProtobufCAllocator *a,
                          Onnx__ModelProto **m, kl_err *e) {
  if (len == 0) return kl_fail(e, KILN_ERR_INVALID_MODEL, "not an ONNX model: the file is empty");
  const char *field[2] = {"", ""};
  switch (wire_check(buf, len, &onnx__model_proto__descriptor, 0, field)) {
  case WIRE_OK: break;
  case WIRE_NUL:
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "a %s's string field '%s' holds a NUL byte, "
                   "which would cut it short", field[0], field[1]);
  case WIRE_TOO_DEEP:
    return kl_fail(e, KILN_ERR_LIMIT, "the model nests messages deeper than %d levels",
                   KL_ONNX_MAX_DEPTH);
  case WIRE_MALFORMED:
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "not an ONNX model: protobuf parse failed");
  }
  if (!m) return KILN_OK;
  if (!(*m = onnx__model_proto__unpack(a, len, buf)))
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "not an ONNX model: protobuf parse failed "
                   "(or out of memory)");
  return KILN_OK;
}

/* Import from bytes (buf, len); the initializers' data is read from fd when it is not
 * -1 (the file the bytes are mapped from), else copied from buf. The graph's source is
 * source (NULL: kl_graph_new's "<memory>"), set before the import so that the bodies of
 * If, Loop and Scan take it too, and messages about their nodes name the file. */
static kiln_status load_bytes(const void *buf, size_t len, int fd, const char *dir,
                              const char *source, const kl_import_opts *o, kl_graph **out,
                              kl_err *e) {
  ProtobufCAllocator a;
  kl_onnx_allocator_init(&a);
  Onnx__ModelProto *m = NULL;
  kl_onnx_ctx c = {.e = e, .ts = {dir, KL_IMPORT_DEFAULT_MAX_TENSOR_BYTES}};
  if (o && o->max_tensor_bytes > 0) c.ts.max_bytes = o->max_tensor_bytes;
  uint8_t *stripped = NULL;
  size_t stripped_len = 0;
  kl_onnx_lifted *raw = NULL;
  kiln_status s = unpack(buf, len, NULL, NULL, e); /* the checks only */
  if (s == KILN_OK) s = lift_raw(buf, len, &stripped, &stripped_len, &raw, &c.n_lifted, e);
  for (size_t k = 0; k < c.n_lifted; k++) raw[k].fd = fd;
  c.lifted = raw;
  if (s == KILN_OK)
    s = stripped ? unpack(stripped, stripped_len, &a, &m, e) : unpack(buf, len, &a, &m, e);
  free(stripped);
  if (s == KILN_OK && raw && (!m->graph || m->graph->n_initializer != c.n_lifted))
    s = kl_fail(e, KILN_ERR_INTERNAL, "the graph's initializers were miscounted (%zu "
                "lifted, %zu unpacked)", c.n_lifted, m->graph ? m->graph->n_initializer : 0);
  if (s == KILN_OK) s = check_ir(m, e);
  if (s == KILN_OK) s = check_opsets(m, &c.opset, e);
  if (s == KILN_OK && !m->graph) s = kl_fail(e, KILN_ERR_INVALID_MODEL, "the model has no graph");
  if (s == KILN_OK && !(c.g = kl_graph_new()))
    s = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (s == KILN_OK && source) s = kl_graph_set_source(c.g, source, e);
  if (s == KILN_OK) {
    c.g->opset = c.opset;
    s = import_graph(&c, m, m->graph);
  }
  if (m) onnx__model_proto__free_unpacked(m, &a);
  free(raw);
  if (s != KILN_OK) kl_graph_free(c.g);
  else *out = c.g;
  return s;
}

kiln_status kl_onnx_load_memory(const void *buf, size_t len, const char *dir,
                                const kl_import_opts *o, kl_graph **out, kl_err *e) {
  kl_err local;
  if (!e) kl_err_clear(e = &local);
  if (!out || (!buf && len))
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "no output or no buffer");
  *out = NULL;
  return load_bytes(buf, len, -1, dir, NULL, o, out, e);
}

kiln_status kl_onnx_load_file(const char *path, const kl_import_opts *o, kl_graph **out,
                              kl_err *e) {
  kl_err local;
  if (!e) kl_err_clear(e = &local);
  if (!path || !out) return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "no path or no output");
  *out = NULL;
  kl_file_map map;
  kiln_status s = kl_file_map_open(path, KL_ONNX_MAX_FILE, &map, e);
  if (s != KILN_OK) return s; /* the message names the file already */
  char *dir = kl_path_dir(path);
  if (!dir) s = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  else s = load_bytes(map.data, map.len, map.fd, dir, path, o, out, e);
  kl_file_map_close(&map);
  if (s != KILN_OK) {
    kl_graph_free(*out);
    *out = NULL;
    kl_err_prefix(e, "%s", path);
  }
  free(dir);
  return s;
}
