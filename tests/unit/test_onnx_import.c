/* The ONNX importer: models are built here with protobuf-c's structs (so every broken
 * form can be made), packed, and loaded from memory or from a temporary folder; a few
 * files written by the onnx Python package (tests/unit/fixtures/onnx/, made by
 * make_onnx_fixtures.py) check that what real exporters write is read. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export/onnx_export.h"
#include "import/onnx.h"
#include "onnx.pb-c.h"

#include "testutil.h"

/* ---- building models: everything malloc'd, so protobuf-c's free_unpacked frees it ---- */

static void *grow(void *arr, size_t n, size_t elem) {
  void *p = realloc(arr, (n + 1) * elem);
  assert_non_null(p);
  return p;
}
#define PUSH(arr, n, item)                     \
  do {                                         \
    (arr) = grow((arr), (n), sizeof *(arr));   \
    (arr)[(n)++] = (item);                     \
  } while (0)

static void *dup_mem(const void *p, size_t n) {
  void *q = malloc(n ? n : 1);
  assert_non_null(q);
  if (n) memcpy(q, p, n);
  return q;
}

static void add_opset(Onnx__ModelProto *m, const char *domain, int64_t version) {
  Onnx__OperatorSetIdProto *os = calloc(1, sizeof *os);
  onnx__operator_set_id_proto__init(os);
  os->domain = strdup(domain);
  os->has_version = 1;
  os->version = version;
  PUSH(m->opset_import, m->n_opset_import, os);
}

static Onnx__ModelProto *model_new(int64_t ir, int64_t opset) {
  Onnx__ModelProto *m = calloc(1, sizeof *m);
  onnx__model_proto__init(m);
  m->has_ir_version = 1;
  m->ir_version = ir;
  if (opset) add_opset(m, "", opset);
  m->graph = calloc(1, sizeof *m->graph);
  onnx__graph_proto__init(m->graph);
  return m;
}

/* "a,,b" -> {"a", "", "b"}; "" -> nothing */
static void split_names(const char *list, char ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (!list || !*list) return;
  for (const char *p = list;;) {
    size_t len = strcspn(p, ",");
    PUSH(*out, *n, strndup(p, len));
    if (!p[len]) break;
    p += len + 1;
  }
}

static Onnx__NodeProto *add_node(Onnx__ModelProto *m, const char *op, const char *name,
                                 const char *ins, const char *outs) {
  Onnx__NodeProto *n = calloc(1, sizeof *n);
  onnx__node_proto__init(n);
  n->op_type = strdup(op);
  if (name) n->name = strdup(name);
  split_names(ins, &n->input, &n->n_input);
  split_names(outs, &n->output, &n->n_output);
  PUSH(m->graph->node, m->graph->n_node, n);
  return n;
}

static Onnx__AttributeProto *attr(Onnx__NodeProto *n, const char *name,
                                  Onnx__AttributeProto__AttributeType type) {
  Onnx__AttributeProto *a = calloc(1, sizeof *a);
  onnx__attribute_proto__init(a);
  a->name = strdup(name);
  a->has_type = 1;
  a->type = type;
  PUSH(n->attribute, n->n_attribute, a);
  return a;
}

static void attr_int(Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = v;
}

static void attr_float(Onnx__NodeProto *n, const char *name, float v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  a->has_f = 1;
  a->f = v;
}

static void attr_ints(Onnx__NodeProto *n, const char *name, size_t count, const int64_t *v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  a->n_ints = count;
  a->ints = dup_mem(v, count * sizeof *v);
}

static void attr_floats(Onnx__NodeProto *n, const char *name, size_t count, const float *v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
  a->n_floats = count;
  a->floats = dup_mem(v, count * sizeof *v);
}

static void attr_string(Onnx__NodeProto *n, const char *name, const char *s, size_t len) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  a->has_s = 1;
  a->s.len = len;
  a->s.data = dup_mem(s, len);
}

static Onnx__TensorProto *tensor(const char *name, int dtype, size_t rank, const int64_t *dims) {
  Onnx__TensorProto *t = calloc(1, sizeof *t);
  onnx__tensor_proto__init(t);
  if (name) t->name = strdup(name);
  t->has_data_type = 1;
  t->data_type = dtype;
  t->n_dims = rank;
  t->dims = dup_mem(dims, rank * sizeof *dims);
  return t;
}

static void set_raw(Onnx__TensorProto *t, const void *data, size_t len) {
  t->has_raw_data = 1;
  t->raw_data.len = len;
  t->raw_data.data = dup_mem(data, len);
}

static void set_external(Onnx__TensorProto *t, const char *location, const char *offset,
                         const char *length) {
  const char *keys[] = {"location", "offset", "length"}, *vals[] = {location, offset, length};
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  for (int i = 0; i < 3; i++) {
    if (!vals[i]) continue;
    Onnx__StringStringEntryProto *kv = calloc(1, sizeof *kv);
    onnx__string_string_entry_proto__init(kv);
    kv->key = strdup(keys[i]);
    kv->value = strdup(vals[i]);
    PUSH(t->external_data, t->n_external_data, kv);
  }
}

static void add_init(Onnx__ModelProto *m, Onnx__TensorProto *t) {
  PUSH(m->graph->initializer, m->graph->n_initializer, t);
}

static void attr_tensor(Onnx__NodeProto *n, const char *name, Onnx__TensorProto *t) {
  attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t = t;
}

/* dims: NULL = no shape, "" = rank 0, "2,N,?" = known, symbolic, unknown */
static Onnx__ValueInfoProto *value_info(const char *name, int dtype, const char *dims) {
  Onnx__ValueInfoProto *vi = calloc(1, sizeof *vi);
  onnx__value_info_proto__init(vi);
  vi->name = strdup(name);
  vi->type = calloc(1, sizeof *vi->type);
  onnx__type_proto__init(vi->type);
  vi->type->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  Onnx__TypeProto__Tensor *tt = vi->type->tensor_type = calloc(1, sizeof *tt);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = dtype != 0;
  tt->elem_type = dtype;
  if (!dims) return vi;
  tt->shape = calloc(1, sizeof *tt->shape);
  onnx__tensor_shape_proto__init(tt->shape);
  char **parts;
  size_t n;
  split_names(dims, &parts, &n);
  for (size_t i = 0; i < n; i++) {
    Onnx__TensorShapeProto__Dimension *d = calloc(1, sizeof *d);
    onnx__tensor_shape_proto__dimension__init(d);
    if (parts[i][0] >= '0' && parts[i][0] <= '9') {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = atoll(parts[i]);
    } else if (parts[i][0] == '-') {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = atoll(parts[i]);
    } else if (strcmp(parts[i], "?") != 0) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = strdup(parts[i]);
    }
    free(parts[i]);
    PUSH(tt->shape->dim, tt->shape->n_dim, d);
  }
  free(parts);
  return vi;
}

static void add_input(Onnx__ModelProto *m, const char *name, int dtype, const char *dims) {
  PUSH(m->graph->input, m->graph->n_input, value_info(name, dtype, dims));
}

static void add_output(Onnx__ModelProto *m, const char *name, int dtype, const char *dims) {
  PUSH(m->graph->output, m->graph->n_output, value_info(name, dtype, dims));
}

static uint8_t *pack(const Onnx__ModelProto *m, size_t *len) {
  *len = onnx__model_proto__get_packed_size(m);
  uint8_t *buf = malloc(*len + 1);
  assert_non_null(buf);
  onnx__model_proto__pack(m, buf);
  return buf;
}

static kiln_status load(Onnx__ModelProto *m, const char *dir, int64_t max_bytes,
                        kl_graph **g, kl_err *e) {
  size_t len;
  uint8_t *buf = pack(m, &len);
  kl_import_opts o = {.max_tensor_bytes = max_bytes};
  kl_err_clear(e);
  kiln_status s = kl_onnx_load_memory(buf, len, dir, &o, g, e);
  free(buf);
  onnx__model_proto__free_unpacked(m, NULL);
  return s;
}

/* Load, expect success and a graph that passes the verifier (nodes in the file's
 * order, which must then be topological). Frees m. */
static kl_graph *load_ok(Onnx__ModelProto *m, const char *dir) {
  kl_err e;
  kl_graph *g = NULL;
  tu_assert_status(load(m, dir, 0, &g, &e), KILN_OK, e.msg, NULL);
  assert_non_null(g);
  kl_err_clear(&e);
  tu_assert_status(kl_graph_verify(g, &e), KILN_OK, e.msg, NULL);
  return g;
}

/* Load, expect the status and a message containing each of the NULL-ended strings. */
static void load_fails_in(Onnx__ModelProto *m, const char *dir, int64_t max_bytes,
                          kiln_status want, ...) {
  kl_err e;
  kl_graph *g = (kl_graph *)&e; /* must be reset to NULL */
  tu_assert_status(load(m, dir, max_bytes, &g, &e), want, e.msg, NULL);
  assert_null(g);
  va_list ap;
  va_start(ap, want);
  for (const char *sub; (sub = va_arg(ap, const char *));) tu_assert_contains(e.msg, sub);
  va_end(ap);
}
#define load_fails(m, want, ...) load_fails_in(m, NULL, 0, want, __VA_ARGS__, NULL)

static const kl_value *value(const kl_graph *g, const char *name) {
  int id = kl_graph_find_value(g, name);
  if (id < 0) print_error("no value '%s'\n", name);
  assert_true(id >= 0);
  return &g->values[id];
}

/* The model most tests start from: X [N,3] float -> Relu -> Y. */
static Onnx__ModelProto *relu_model(int64_t opset) {
  Onnx__ModelProto *m = model_new(8, opset);
  add_input(m, "X", 1, "N,3");
  add_node(m, "Relu", "relu", "X", "Y");
  add_output(m, "Y", 1, "N,3");
  return m;
}

/* ---- basics ---- */

static void test_minimal_model(void **state) {
  (void)state;
  kl_graph *g = load_ok(relu_model(13), NULL);
  assert_int_equal(g->opset, 13);
  assert_int_equal(g->n_inputs, 1);
  assert_int_equal(g->n_outputs, 1);
  assert_int_equal(g->n_nodes, 1);
  assert_int_equal(g->nodes[0].op, KL_OP_Relu);
  assert_string_equal(g->nodes[0].name, "relu");
  const kl_value *x = &g->values[g->inputs[0]];
  assert_string_equal(x->name, "X");
  assert_int_equal(x->kind, KL_VALUE_INPUT);
  assert_int_equal(x->type.dtype, KL_F32);
  assert_int_equal(x->type.rank, 2);
  assert_int_equal(x->type.dims[0].size, -1);
  assert_string_equal(g->symbols[x->type.dims[0].sym], "N");
  assert_int_equal(x->type.dims[1].size, 3);
  const kl_value *y = &g->values[g->outputs[0]];
  assert_string_equal(y->name, "Y");
  /* the output's declared type is kept, its symbol the same as the input's */
  assert_int_equal(y->type.rank, 2);
  assert_int_equal(y->type.dims[0].sym, x->type.dims[0].sym);
  kl_graph_free(g);
}

static void test_ai_onnx_domain_and_unnamed_nodes(void **state) {
  (void)state;
  Onnx__ModelProto *m = model_new(8, 0);
  add_opset(m, "ai.onnx", 17);
  add_input(m, "X", 1, "2");
  Onnx__NodeProto *n = add_node(m, "Sigmoid", NULL, "X", "Y");
  n->domain = strdup("ai.onnx");
  add_output(m, "Y", 1, NULL);
  kl_graph *g = load_ok(m, NULL);
  assert_int_equal(g->opset, 17);
  assert_int_equal(g->nodes[0].op, KL_OP_Sigmoid);
  assert_string_equal(g->nodes[0].name, "");
  kl_graph_free(g);
}

static void test_dims_symbols_and_value_info(void **state) {
  (void)state;
  Onnx__ModelProto *m = model_new(8, 13);
  add_input(m, "A", 1, "batch,?,4");
  add_input(m, "B", 1, "batch,?,4");
  add_input(m, "S", 7, ""); /* rank 0 */
  add_node(m, "Add", "add", "A,B", "C");
  add_node(m, "Relu", "relu", "C", "D");
  PUSH(m->graph->value_info, m->graph->n_value_info, value_info("C", 1, "batch,seq,4"));
  PUSH(m->graph->value_info, m->graph->n_value_info, value_info("nowhere", 1, "1"));
  add_output(m, "D", 0, NULL); /* no type at all: left unknown */
  kl_graph *g = load_ok(m, NULL);
  const kl_value *a = value(g, "A"), *b = value(g, "B"), *c = value(g, "C");
  assert_int_equal(a->type.dims[0].sym, b->type.dims[0].sym);
  assert_true(a->type.dims[0].sym >= 0);
  assert_int_equal(a->type.dims[1].size, -1);
  assert_int_equal(a->type.dims[1].sym, -1);
  assert_int_equal(value(g, "S")->type.rank, 0);
  assert_int_equal(value(g, "S")->type.dtype, KL_I64);
  assert_int_equal(c->type.rank, 3);
  assert_string_equal(g->symbols[c->type.dims[1].sym], "seq");
  assert_int_equal(c->type.dims[0].sym, a->type.dims[0].sym);
  assert_int_equal(value(g, "D")->type.rank, -1);
  assert_int_equal(value(g, "D")->type.dtype, KL_UNDEFINED);
  assert_int_equal(kl_graph_find_value(g, "nowhere"), -1);
  kl_graph_free(g);
}

static void test_graph_structure(void **state) {
  (void)state;
  /* nodes out of order, an initializer that is also an input, absent optional
   * inputs in the middle and trailing absent outputs */
  Onnx__ModelProto *m = model_new(8, 13);
  add_input(m, "X", 1, "1,1,5,5");
  add_input(m, "W", 1, "1,1,3,3");
  float w[9] = {0};
  Onnx__TensorProto *t = tensor("W", 1, 4, (const int64_t[]){1, 1, 3, 3});
  set_raw(t, w, sizeof w);
  add_init(m, t);
  add_node(m, "Relu", "second", "Y", "Z");
  add_node(m, "Conv", "first", "X,W,", "Y");
  add_node(m, "Clip", "clip", "Z,,", "C");
  add_node(m, "Dropout", "drop", "C", "D,");
  add_output(m, "D", 1, NULL);
  kl_err e;
  kl_graph *g = NULL;
  assert_int_equal(load(m, NULL, 0, &g, &e), KILN_OK);
  assert_string_equal(g->nodes[0].name, "second"); /* the file's order is kept */
  assert_int_equal(kl_graph_toposort(g, &e), KILN_OK);
  assert_int_equal(kl_graph_verify(g, &e), KILN_OK);
  assert_int_equal(g->n_inputs, 1);
  assert_string_equal(g->values[g->inputs[0]].name, "X");
  assert_int_equal(value(g, "W")->kind, KL_VALUE_CONST);
  assert_string_equal(g->nodes[0].name, "first");
  assert_int_equal(g->nodes[0].n_in, 2);          /* trailing "" dropped */
  const kl_node *clip = &g->nodes[2];
  assert_int_equal(clip->op, KL_OP_Clip);
  assert_int_equal(clip->n_in, 1);
  assert_int_equal(g->nodes[3].n_out, 1);
  kl_graph_free(g);

  /* an absent input in the middle stays as KL_ABSENT */
  m = model_new(8, 13);
  add_input(m, "X", 1, "4");
  add_input(m, "hi", 1, "");
  add_node(m, "Clip", "clip", "X,,hi", "Y");
  add_output(m, "Y", 1, NULL);
  g = load_ok(m, NULL);
  assert_int_equal(g->nodes[0].n_in, 3);
  assert_int_equal(g->nodes[0].in[1], KL_ABSENT);
  assert_string_equal(g->values[g->nodes[0].in[2]].name, "hi");
  kl_graph_free(g);
}

static void test_graph_structure_errors(void **state) {
  (void)state;
  Onnx__ModelProto *m = relu_model(13);
  add_node(m, "Relu", "again", "X", "Y");
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'again' (Relu)", "'Y' is defined twice");

  m = relu_model(13);
  add_node(m, "Relu", "r2", "nothing", "Z");
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'r2' (Relu)", "input 0 'nothing' is not a graph "
             "input, an initializer or the output of any node");

  m = relu_model(13);
  add_output(m, "ghost", 1, NULL);
  load_fails(m, KILN_ERR_INVALID_MODEL, "graph output 'ghost'");

  m = relu_model(13);
  add_input(m, "X", 1, "2");
  load_fails(m, KILN_ERR_INVALID_MODEL, "'X' is defined twice");

  m = model_new(8, 13);
  add_input(m, "X", 1, "2");
  add_node(m, "Relu", "two", "X,X", "Y");
  add_output(m, "Y", 1, NULL);
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'two' (Relu)", "2 inputs; the op takes 1 to 1");

  m = model_new(8, 13);
  add_input(m, "X", 1, "2");
  add_node(m, "Concat", NULL, "", "Y");
  add_output(m, "Y", 1, NULL);
  load_fails(m, KILN_ERR_INVALID_MODEL, "node #0 (Concat)", "0 inputs; the op takes at least 1");

  m = model_new(8, 13);
  Onnx__TensorProto *t = tensor(NULL, 1, 0, NULL);
  set_raw(t, (float[]){1}, 4);
  add_init(m, t);
  load_fails(m, KILN_ERR_INVALID_MODEL, "initializer 0 has no name");

  m = model_new(8, 13);
  add_input(m, "X", 1, "2");
  m->graph->n_sparse_initializer = 1;
  m->graph->sparse_initializer = calloc(1, sizeof(Onnx__SparseTensorProto *));
  m->graph->sparse_initializer[0] = calloc(1, sizeof(Onnx__SparseTensorProto));
  onnx__sparse_tensor_proto__init(m->graph->sparse_initializer[0]);
  load_fails(m, KILN_ERR_UNSUPPORTED, "sparse initializers");
}

static void test_input_types(void **state) {
  (void)state;
  Onnx__ModelProto *m = model_new(8, 13);
  add_input(m, "X", 0, "2");
  load_fails(m, KILN_ERR_INVALID_MODEL, "graph input 'X' has no element type");

  m = model_new(8, 13);
  add_input(m, "X", 1, "2");
  onnx__type_proto__free_unpacked(m->graph->input[0]->type, NULL);
  m->graph->input[0]->type = NULL;
  load_fails(m, KILN_ERR_INVALID_MODEL, "graph input 'X' has no type");

  m = model_new(8, 13);
  add_input(m, "X", 1, "2");
  Onnx__TypeProto *tp = m->graph->input[0]->type;
  protobuf_c_message_free_unpacked(&tp->tensor_type->base, NULL);
  tp->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  tp->sequence_type = calloc(1, sizeof *tp->sequence_type);
  onnx__type_proto__sequence__init(tp->sequence_type);
  /* a sequence input is read (tests/models/control/seq_loop); one of nothing is not */
  load_fails(m, KILN_ERR_INVALID_MODEL, "graph input 'X' has no element type");

  m = model_new(8, 13);
  add_input(m, "X", 1, "2");
  tp = m->graph->input[0]->type;
  protobuf_c_message_free_unpacked(&tp->tensor_type->base, NULL);
  tp->value_case = ONNX__TYPE_PROTO__VALUE_MAP_TYPE;
  tp->map_type = calloc(1, sizeof *tp->map_type);
  onnx__type_proto__map__init(tp->map_type);
  load_fails(m, KILN_ERR_UNSUPPORTED, "graph input 'X' is a map; kiln supports tensors, "
             "sequences of tensors and optionals of those only");

  m = model_new(8, 13);
  add_input(m, "X", 8, "2");
  load_fails(m, KILN_ERR_UNSUPPORTED, "element type string");

  m = model_new(8, 13);
  add_input(m, "X", 14, "2");
  load_fails(m, KILN_ERR_UNSUPPORTED, "element type complex64 (14)");

  m = model_new(8, 13);
  add_input(m, "X", 1, "1,2,3,4,5,6,7,8,9");
  load_fails(m, KILN_ERR_UNSUPPORTED, "rank 9; kiln supports up to 8");

  m = model_new(8, 13);
  add_input(m, "X", 1, "2,-3");
  load_fails(m, KILN_ERR_INVALID_MODEL, "graph input 'X' has a dimension of size -3");
}

/* ---- versions and domains ---- */

static void test_versions(void **state) {
  (void)state;
  load_fails(relu_model(KL_ONNX_MAX_OPSET + 1), KILN_ERR_UNSUPPORTED, "opset 28 is newer than 27");
  load_fails(relu_model(6), KILN_ERR_UNSUPPORTED, "opset 6 is older than 7");
  kl_graph_free(load_ok(relu_model(KL_ONNX_MAX_OPSET), NULL));
  kl_graph_free(load_ok(relu_model(KL_ONNX_MIN_OPSET), NULL));

  Onnx__ModelProto *m = relu_model(13);
  m->ir_version = 2;
  load_fails(m, KILN_ERR_UNSUPPORTED, "IR version 2 is older than 3");
  m = relu_model(13);
  m->ir_version = KL_ONNX_MAX_IR + 1;
  load_fails(m, KILN_ERR_UNSUPPORTED, "IR version 15 is newer than 14");
  m = relu_model(13);
  m->ir_version = 14; /* onnx 1.23's default, which onnxruntime 1.32 loads */
  kl_graph_free(load_ok(m, NULL));
  m = relu_model(13);
  m->has_ir_version = 0;
  load_fails(m, KILN_ERR_INVALID_MODEL, "no ir_version");

  /* a model may import other domains only; then an ONNX node is an error */
  m = model_new(8, 0);
  add_opset(m, "ai.onnx.ml", 3);
  add_input(m, "X", 1, "2");
  add_node(m, "Relu", "r", "X", "Y");
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'r' (Relu): the node is of the default ONNX "
             "domain, which the model does not import");
  m = model_new(8, 0);
  add_opset(m, "ai.onnx.ml", 3);
  add_input(m, "X", 1, "2");
  add_node(m, "Binarizer", "b", "X", "Y")->domain = strdup("ai.onnx.ml");
  load_fails(m, KILN_ERR_UNSUPPORTED, "domain 'ai.onnx.ml' is not supported by kiln");
  m = relu_model(13);
  add_opset(m, "ai.onnx", 13);
  load_fails(m, KILN_ERR_INVALID_MODEL, "lists the default domain twice");
  m = relu_model(13);
  onnx__graph_proto__free_unpacked(m->graph, NULL);
  m->graph = NULL;
  load_fails(m, KILN_ERR_INVALID_MODEL, "has no graph");
}

static void test_unsupported_ops_and_domains(void **state) {
  (void)state;
  Onnx__ModelProto *m = relu_model(13);
  add_node(m, "Foo", "n", "X", "F");
  load_fails(m, KILN_ERR_UNSUPPORTED,
             "node 'n' (op 'Foo', domain '', opset 13): op not supported by kiln");

  m = relu_model(13);
  add_opset(m, "ai.onnx.ml", 3);
  Onnx__NodeProto *n = add_node(m, "LinearClassifier", NULL, "X", "L");
  n->domain = strdup("ai.onnx.ml");
  load_fails(m, KILN_ERR_UNSUPPORTED, "node #1 (op 'LinearClassifier', domain 'ai.onnx.ml', "
             "opset 3): domain 'ai.onnx.ml' is not supported by kiln");

  m = relu_model(13);
  n = add_node(m, "Relu", "k", "X", "K");
  n->domain = strdup("kiln");
  load_fails(m, KILN_ERR_UNSUPPORTED, "node 'k' (op 'Relu', domain 'kiln', opset 0): op not "
             "supported by kiln");

  /* If without its graph attributes */
  m = relu_model(13);
  add_node(m, "If", "branch", "X", "I");
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'branch' (If)", "needs a graph attribute "
             "'then_branch'");

  /* every missing op is named at once, not only the first */
  m = relu_model(13);
  add_node(m, "Foo", "f1", "X", "F1");
  add_node(m, "Bar", "b1", "F1", "B1");
  add_node(m, "Foo", "f2", "B1", "F2");
  n = add_node(m, "LinearClassifier", NULL, "X", "L");
  n->domain = strdup("ai.onnx.ml");
  load_fails(m, KILN_ERR_UNSUPPORTED, "node 'f1' (op 'Foo', domain '', opset 13): op not "
             "supported by kiln; in all 4 nodes of 3 ops kiln does not have: Foo (2 nodes), "
             "Bar (1 node), ai.onnx.ml.LinearClassifier (1 node)");

  /* onnxruntime's quantized contrib ops: those kiln lowers load; others are named */
  m = relu_model(13);
  add_opset(m, "com.microsoft", 1);
  add_input(m, "s", 1, "");
  add_input(m, "z", 2, "");
  n = add_node(m, "QLinearAveragePool", "pool", "X,s,z,s,z", "P");
  n->domain = strdup("com.microsoft");
  attr_int(n, "channels_last", 1);
  load_fails(m, KILN_ERR_UNSUPPORTED, "node 'pool'", "channels_last=1 is not supported");
  m = relu_model(13);
  add_opset(m, "com.microsoft", 1);
  add_input(m, "s", 1, "");
  add_input(m, "z", 2, "");
  n = add_node(m, "QLinearConcat", "cat", "s,z,X,s", "C");
  n->domain = strdup("com.microsoft");
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'cat'", "4 inputs: expected Y_scale");
  m = relu_model(13);
  add_opset(m, "com.microsoft", 1);
  n = add_node(m, "QAttention", "qa", "X", "A");
  n->domain = strdup("com.microsoft");
  load_fails(m, KILN_ERR_UNSUPPORTED, "node 'qa' (op 'QAttention', domain 'com.microsoft'",
             "domain 'com.microsoft' is not supported by kiln");
}

/* ---- malformed bytes ---- */

static void load_bytes_fails(const void *buf, size_t len, kiln_status want, const char *sub) {
  kl_err e;
  kl_err_clear(&e);
  kl_graph *g = NULL;
  tu_assert_status(kl_onnx_load_memory(buf, len, NULL, NULL, &g, &e), want, e.msg, sub);
  assert_null(g);
}

static void test_malformed_bytes(void **state) {
  (void)state;
  load_bytes_fails("", 0, KILN_ERR_INVALID_MODEL, "the file is empty");
  load_bytes_fails("hello, this is not a model", 26, KILN_ERR_INVALID_MODEL,
                   "not an ONNX model: protobuf parse failed");
  /* a length that runs past the end */
  load_bytes_fails("\x3a\x7f\x0a", 3, KILN_ERR_INVALID_MODEL, "protobuf parse failed");
  /* a truncated model: every prefix of a real one fails cleanly or loads */
  size_t len;
  Onnx__ModelProto *m = relu_model(13);
  uint8_t *buf = pack(m, &len);
  onnx__model_proto__free_unpacked(m, NULL);
  for (size_t cut = 0; cut < len; cut++) {
    kl_err e;
    kl_err_clear(&e);
    kl_graph *g = NULL;
    kiln_status s = kl_onnx_load_memory(buf, cut, NULL, NULL, &g, &e);
    assert_true(s != KILN_OK || g != NULL);
    assert_true(s == KILN_OK || g == NULL);
    kl_graph_free(g);
  }
  free(buf);
}

/* ModelProto.graph -> GraphProto.node -> NodeProto.attribute -> AttributeProto.g -> ...
 * nested far deeper than any real model: refused before protobuf-c recurses. */
static void test_deep_nesting(void **state) {
  (void)state;
  enum { LEVELS = 3000 };
  static const uint8_t tags[3] = {1 << 3 | 2, 5 << 3 | 2, 6 << 3 | 2}; /* node, attr, g */
  uint8_t *buf = malloc(LEVELS * 3 * 8 + 16);
  assert_non_null(buf);
  /* build from the inside out: each level wraps the previous bytes */
  size_t len = 0, cap = LEVELS * 3 * 8 + 16;
  for (int i = 3 * LEVELS - 1; i >= 0; i--) {
    uint8_t head[8];
    size_t h = 0;
    head[h++] = tags[i % 3];
    for (size_t v = len;; v >>= 7) {
      head[h++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
      if (v <= 0x7f) break;
    }
    assert_true(len + h + 2 <= cap);
    memmove(buf + h, buf, len);
    memcpy(buf, head, h);
    len += h;
  }
  /* ModelProto field 7 (graph) around it all */
  uint8_t head[8];
  size_t h = 0;
  head[h++] = 7 << 3 | 2;
  for (size_t v = len;; v >>= 7) {
    head[h++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    if (v <= 0x7f) break;
  }
  memmove(buf + h, buf, len);
  memcpy(buf, head, h);
  len += h;
  load_bytes_fails(buf, len, KILN_ERR_LIMIT, "nests messages deeper than 100 levels");
  free(buf);
}

/* ---- initializers: every storage form ---- */

static Onnx__ModelProto *init_model(Onnx__TensorProto *t) {
  Onnx__ModelProto *m = model_new(8, 13);
  add_init(m, t);
  add_node(m, "Identity", "id", t->name, "out");
  add_output(m, "out", 0, NULL);
  return m;
}

/* Loads a one-initializer model and checks the constant's bytes. */
static void expect_const(Onnx__TensorProto *t, kl_dtype dtype, int rank, const int64_t *dims,
                         const void *bytes, size_t nbytes) {
  char *name = strdup(t->name);
  kl_graph *g = load_ok(init_model(t), NULL);
  const kl_value *v = value(g, name);
  assert_int_equal(v->kind, KL_VALUE_CONST);
  assert_int_equal(v->type.dtype, dtype);
  assert_int_equal(v->type.rank, rank);
  for (int i = 0; i < rank; i++) assert_int_equal(v->type.dims[i].size, dims[i]);
  assert_int_equal(v->nbytes, nbytes);
  assert_non_null(v->data);
  if (nbytes) assert_memory_equal(v->data, bytes, nbytes);
  kl_graph_free(g);
  free(name);
}

static void test_raw_data(void **state) {
  (void)state;
  float f[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
  Onnx__TensorProto *t = tensor("w", 1, 2, (const int64_t[]){2, 3});
  set_raw(t, f, sizeof f);
  expect_const(t, KL_F32, 2, (const int64_t[]){2, 3}, f, sizeof f);

  /* bools are normalized to 0/1 */
  t = tensor("b", 9, 1, (const int64_t[]){3});
  set_raw(t, "\x00\x02\x01", 3);
  expect_const(t, KL_BOOL, 1, (const int64_t[]){3}, "\x00\x01\x01", 3);

  /* an empty tensor still gets a data pointer */
  t = tensor("empty", 1, 2, (const int64_t[]){0, 4});
  set_raw(t, NULL, 0);
  expect_const(t, KL_F32, 2, (const int64_t[]){0, 4}, NULL, 0);
  t = tensor("none", 7, 1, (const int64_t[]){0});
  expect_const(t, KL_I64, 1, (const int64_t[]){0}, NULL, 0);

  uint16_t bf[2] = {0x3f80, 0xc000};
  t = tensor("bf", 16, 1, (const int64_t[]){2});
  set_raw(t, bf, sizeof bf);
  expect_const(t, KL_BF16, 1, (const int64_t[]){2}, bf, sizeof bf);
}

static void test_typed_fields(void **state) {
  (void)state;
  Onnx__TensorProto *t = tensor("f", 1, 1, (const int64_t[]){3});
  float f[3] = {1.5f, -2, 0.25f};
  t->n_float_data = 3;
  t->float_data = dup_mem(f, sizeof f);
  expect_const(t, KL_F32, 1, (const int64_t[]){3}, f, sizeof f);

  t = tensor("i64", 7, 0, NULL);
  int64_t i64 = -5000000000LL;
  t->n_int64_data = 1;
  t->int64_data = dup_mem(&i64, 8);
  expect_const(t, KL_I64, 0, NULL, &i64, 8);

  t = tensor("d", 11, 1, (const int64_t[]){2});
  double d[2] = {1e300, -0.5};
  t->n_double_data = 2;
  t->double_data = dup_mem(d, sizeof d);
  expect_const(t, KL_F64, 1, (const int64_t[]){2}, d, sizeof d);

  uint64_t u[2] = {0, UINT64_MAX};
  t = tensor("u64", 13, 1, (const int64_t[]){2});
  t->n_uint64_data = 2;
  t->uint64_data = dup_mem(u, sizeof u);
  expect_const(t, KL_U64, 1, (const int64_t[]){2}, u, sizeof u);

  uint64_t u32in[2] = {7, UINT32_MAX};
  uint32_t u32[2] = {7, UINT32_MAX};
  t = tensor("u32", 12, 1, (const int64_t[]){2});
  t->n_uint64_data = 2;
  t->uint64_data = dup_mem(u32in, sizeof u32in);
  expect_const(t, KL_U32, 1, (const int64_t[]){2}, u32, sizeof u32);
}

/* int32_data carries every type of 16 bits or less */
static void test_int32_data(void **state) {
  (void)state;
  static const struct {
    int dtype;
    int32_t in[3];
    const char *bytes;
    size_t nbytes;
  } cases[] = {
      {6, {-1, 0, 2147483647}, "\xff\xff\xff\xff\0\0\0\0\xff\xff\xff\x7f", 12},
      {5, {-32768, 1, 32767}, "\x00\x80\x01\x00\xff\x7f", 6},
      {4, {0, 258, 65535}, "\x00\x00\x02\x01\xff\xff", 6},
      {3, {-128, -1, 127}, "\x80\xff\x7f", 3},
      {2, {0, 200, 255}, "\x00\xc8\xff", 3},
      {9, {0, 1, 5}, "\x00\x01\x01", 3},
      {10, {0x3c00, 0xc000, 0x7c00}, "\x00\x3c\x00\xc0\x00\x7c", 6}, /* 1, -2, inf */
      {16, {0x3f80, 0xbf80, 0}, "\x80\x3f\x80\xbf\x00\x00", 6},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    Onnx__TensorProto *t = tensor("v", cases[i].dtype, 1, (const int64_t[]){3});
    t->n_int32_data = 3;
    t->int32_data = dup_mem(cases[i].in, sizeof cases[i].in);
    expect_const(t, (kl_dtype)cases[i].dtype, 1, (const int64_t[]){3}, cases[i].bytes,
                 cases[i].nbytes);
  }
}

static void init_fails(Onnx__TensorProto *t, kiln_status want, const char *sub) {
  load_fails(init_model(t), want, sub);
}

static void test_storage_errors(void **state) {
  (void)state;
  Onnx__TensorProto *t = tensor("w", 1, 2, (const int64_t[]){2, 3});
  set_raw(t, "0123456789", 10);
  init_fails(t, KILN_ERR_INVALID_MODEL, "initializer 'w': raw_data has 10 bytes, expected 24 "
             "(6 elements of float32)");

  t = tensor("w", 1, 1, (const int64_t[]){3});
  t->n_float_data = 2;
  t->float_data = dup_mem((float[]){1, 2}, 8);
  init_fails(t, KILN_ERR_INVALID_MODEL, "float_data has 2 elements, expected 3");

  t = tensor("w", 7, 1, (const int64_t[]){1});
  t->n_float_data = 1;
  t->float_data = dup_mem((float[]){1}, 4);
  init_fails(t, KILN_ERR_INVALID_MODEL, "initializer 'w' is int64, which float_data cannot hold");

  t = tensor("w", 2, 1, (const int64_t[]){2});
  t->n_int32_data = 2;
  t->int32_data = dup_mem((int32_t[]){1, 256}, 8);
  init_fails(t, KILN_ERR_INVALID_MODEL, "int32_data element 1 is 256, out of range for uint8");

  t = tensor("w", 12, 1, (const int64_t[]){1});
  t->n_uint64_data = 1;
  t->uint64_data = dup_mem((uint64_t[]){1ull << 32}, 8);
  init_fails(t, KILN_ERR_INVALID_MODEL, "out of range for uint32");

  t = tensor("w", 1, 1, (const int64_t[]){1});
  set_raw(t, "abcd", 4);
  t->n_float_data = 1;
  t->float_data = dup_mem((float[]){1}, 4);
  init_fails(t, KILN_ERR_INVALID_MODEL, "more than one form");

  t = tensor("w", 1, 1, (const int64_t[]){2});
  init_fails(t, KILN_ERR_INVALID_MODEL, "initializer 'w' has no data (expected 2 elements)");

  t = tensor("w", 1, 1, (const int64_t[]){1});
  t->has_data_type = 0;
  set_raw(t, "abcd", 4);
  init_fails(t, KILN_ERR_INVALID_MODEL, "initializer 'w' has no data type");

  t = tensor("s", 8, 1, (const int64_t[]){1});
  t->n_string_data = 1;
  t->string_data = calloc(1, sizeof(ProtobufCBinaryData));
  t->string_data[0].len = 2;
  t->string_data[0].data = dup_mem("hi", 2);
  init_fails(t, KILN_ERR_UNSUPPORTED, "initializer 's' has data type string (8), which kiln "
             "does not support");

  t = tensor("c", 14, 1, (const int64_t[]){1});
  set_raw(t, "abcdefgh", 8);
  init_fails(t, KILN_ERR_UNSUPPORTED, "complex64");

  t = tensor("w", 1, 2, (const int64_t[]){2, -1});
  init_fails(t, KILN_ERR_INVALID_MODEL, "initializer 'w' has dimension 1 of size -1");

  t = tensor("w", 1, 3, (const int64_t[]){1LL << 40, 1LL << 40, 1LL << 40});
  init_fails(t, KILN_ERR_LIMIT, "dims are too large");

  t = tensor("w", 11, 2, (const int64_t[]){1LL << 31, 1LL << 31});
  init_fails(t, KILN_ERR_LIMIT, "dims are too large"); /* 2^62 elements */

  t = tensor("w", 1, 9, (const int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1});
  init_fails(t, KILN_ERR_UNSUPPORTED, "rank 9; kiln supports up to 8");

  t = tensor("w", 1, 1, (const int64_t[]){1});
  set_raw(t, "abcd", 4);
  t->segment = calloc(1, sizeof *t->segment);
  onnx__tensor_proto__segment__init(t->segment);
  init_fails(t, KILN_ERR_UNSUPPORTED, "segments");

  /* the size limit comes from the options */
  t = tensor("big", 1, 1, (const int64_t[]){1000});
  float *zeros = calloc(1000, sizeof(float));
  set_raw(t, zeros, 4000);
  free(zeros);
  load_fails_in(init_model(t), NULL, 3999, KILN_ERR_LIMIT,
                "initializer 'big' is 4000 bytes, over the limit of 3999", NULL);
  t = tensor("big", 1, 1, (const int64_t[]){1000});
  t->has_raw_data = 1; /* an empty raw_data: the limit is checked before the data */
  load_fails_in(init_model(t), NULL, 100, KILN_ERR_LIMIT, "over the limit of 100", NULL);
}

/* ---- external data ---- */

typedef struct tmpdir {
  char root[64];
  char model[96]; /* root/model: the model's folder */
} tmpdir;

static void path_in(char *buf, size_t len, const char *dir, const char *name) {
  snprintf(buf, len, "%s/%s", dir, name);
}

/* root/outside.bin, root/model/{weights.bin, sub/w.bin, link_out.bin -> ../outside.bin,
 * link_in.bin -> weights.bin, adir/} */
static int setup_tmpdir(void **state) {
  tmpdir *d = calloc(1, sizeof *d);
  assert_non_null(d);
  tu_mkdtemp(d->root, sizeof d->root, "onnx");
  snprintf(d->model, sizeof d->model, "%s/model", d->root);
  assert_int_equal(mkdir(d->model, 0755), 0);
  char p[256];
  float w[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  path_in(p, sizeof p, d->root, "outside.bin");
  tu_write_file(p, w, sizeof w);
  path_in(p, sizeof p, d->model, "weights.bin");
  tu_write_file(p, w, sizeof w);
  path_in(p, sizeof p, d->model, "sub");
  assert_int_equal(mkdir(p, 0755), 0);
  path_in(p, sizeof p, d->model, "sub/w.bin");
  tu_write_file(p, w + 4, 16);
  path_in(p, sizeof p, d->model, "link_out.bin");
  assert_int_equal(symlink("../outside.bin", p), 0);
  path_in(p, sizeof p, d->model, "link_in.bin");
  assert_int_equal(symlink("weights.bin", p), 0);
  path_in(p, sizeof p, d->model, "adir");
  assert_int_equal(mkdir(p, 0755), 0);
  *state = d;
  return 0;
}

static int teardown_tmpdir(void **state) {
  tmpdir *d = *state;
  static const char *const files[] = {"model/weights.bin", "model/sub/w.bin",
                                      "model/link_out.bin", "model/link_in.bin",
                                      "model/model.onnx", "outside.bin"};
  static const char *const dirs[] = {"model/sub", "model/adir", "model"};
  char p[256];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    path_in(p, sizeof p, d->root, files[i]);
    unlink(p);
  }
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    path_in(p, sizeof p, d->root, dirs[i]);
    rmdir(p);
  }
  assert_int_equal(rmdir(d->root), 0);
  free(d);
  return 0;
}

static Onnx__ModelProto *external_model(const char *loc, const char *offset, const char *length,
                                        int64_t n) {
  Onnx__TensorProto *t = tensor("w", 1, 1, (const int64_t[]){n});
  set_external(t, loc, offset, length);
  return init_model(t);
}

static void expect_external(const tmpdir *d, Onnx__ModelProto *m, const float *want, int n) {
  kl_graph *g = load_ok(m, d->model);
  const kl_value *v = value(g, "w");
  assert_int_equal(v->nbytes, n * sizeof(float));
  assert_memory_equal(v->data, want, n * sizeof(float));
  kl_graph_free(g);
}

static void test_external_data_inside(void **state) {
  const tmpdir *d = *state;
  expect_external(d, external_model("weights.bin", NULL, NULL, 8),
                  (const float[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
  expect_external(d, external_model("weights.bin", "8", "12", 3), (const float[]){2, 3, 4}, 3);
  expect_external(d, external_model("sub/w.bin", NULL, NULL, 4), (const float[]){4, 5, 6, 7}, 4);
  expect_external(d, external_model("./sub/w.bin", "4", NULL, 2), (const float[]){5, 6}, 2);
  /* a symlink that stays inside the folder is fine */
  expect_external(d, external_model("link_in.bin", "28", "4", 1), (const float[]){7}, 1);
}

static void external_fails(const tmpdir *d, Onnx__ModelProto *m, kiln_status want,
                           const char *sub) {
  load_fails_in(m, d->model, 0, want, "initializer 'w'", sub, NULL);
}

static void test_external_data_refused(void **state) {
  const tmpdir *d = *state;
  char abs[256];
  path_in(abs, sizeof abs, d->root, "outside.bin");
  external_fails(d, external_model(abs, NULL, NULL, 8), KILN_ERR_INVALID_MODEL,
                 "is an absolute path");
  external_fails(d, external_model("../outside.bin", NULL, NULL, 8), KILN_ERR_INVALID_MODEL,
                 "has a '..' component");
  external_fails(d, external_model("sub/../../outside.bin", NULL, NULL, 8),
                 KILN_ERR_INVALID_MODEL, "has a '..' component");
  external_fails(d, external_model("sub\\..\\weights.bin", NULL, NULL, 8),
                 KILN_ERR_INVALID_MODEL, "has a '..' component");
  external_fails(d, external_model("link_out.bin", NULL, NULL, 8), KILN_ERR_INVALID_MODEL,
                 "leads outside the model's folder");
  external_fails(d, external_model("adir", NULL, NULL, 0), KILN_ERR_INVALID_MODEL,
                 "is not a regular file");
  external_fails(d, external_model("missing.bin", NULL, NULL, 8), KILN_ERR_IO,
                 "cannot open external data file 'missing.bin'");
  external_fails(d, external_model("weights.bin", "4", NULL, 8), KILN_ERR_INVALID_MODEL,
                 "its 32 bytes at offset 4 lie past the end of external data file "
                 "'weights.bin' (32 bytes)");
  external_fails(d, external_model("weights.bin", "18446744073709551615", NULL, 1),
                 KILN_ERR_INVALID_MODEL, "lie past the end");
  external_fails(d, external_model("weights.bin", "99999999999999999999", NULL, 1),
                 KILN_ERR_INVALID_MODEL, "offset '99999999999999999999' is not a non-negative "
                 "integer");
  external_fails(d, external_model("weights.bin", "-4", NULL, 1), KILN_ERR_INVALID_MODEL,
                 "is not a non-negative integer");
  external_fails(d, external_model("weights.bin", NULL, "8", 1), KILN_ERR_INVALID_MODEL,
                 "external data length is 8 bytes, expected 4");
  external_fails(d, external_model(NULL, "0", NULL, 1), KILN_ERR_INVALID_MODEL,
                 "external data has no location");
  /* a model from memory has no folder to read from */
  load_fails(external_model("weights.bin", NULL, NULL, 8), KILN_ERR_UNSUPPORTED,
             "which a model loaded from memory cannot reach");
}

static void test_load_file(void **state) {
  const tmpdir *d = *state;
  char path[256];
  path_in(path, sizeof path, d->model, "model.onnx");
  Onnx__ModelProto *m = external_model("weights.bin", "16", NULL, 4);
  size_t len;
  uint8_t *buf = pack(m, &len);
  onnx__model_proto__free_unpacked(m, NULL);
  tu_write_file(path, buf, len);
  free(buf);
  kl_err e;
  kl_err_clear(&e);
  kl_graph *g = NULL;
  assert_int_equal(kl_onnx_load_file(path, NULL, &g, &e), KILN_OK);
  assert_string_equal(g->source, path);
  const kl_value *v = value(g, "w");
  assert_memory_equal(v->data, ((const float[]){4, 5, 6, 7}), 16);
  kl_graph_free(g);

  /* messages start with the file's path */
  m = relu_model(99);
  buf = pack(m, &len);
  onnx__model_proto__free_unpacked(m, NULL);
  tu_write_file(path, buf, len);
  free(buf);
  kl_err_clear(&e);
  tu_assert_status(kl_onnx_load_file(path, NULL, &g, &e), KILN_ERR_UNSUPPORTED, e.msg,
                   "opset 99");
  assert_null(g);
  assert_int_equal(strncmp(e.msg, path, strlen(path)), 0);

  path_in(path, sizeof path, d->model, "nope.onnx");
  kl_err_clear(&e);
  tu_assert_status(kl_onnx_load_file(path, NULL, &g, &e), KILN_ERR_IO, e.msg,
                   "nope.onnx: cannot open");
  kl_err_clear(&e);
  tu_assert_status(kl_onnx_load_file(d->model, NULL, &g, &e), KILN_ERR_IO, e.msg,
                   "not a regular file");
}

/* A model of four initializers (three in raw_data, of odd sizes so that their offsets in
 * the file are unaligned, one in float_data) summed into its output. */
static Onnx__ModelProto *lift_model(float *a, float *b, float *c) {
  Onnx__ModelProto *m = model_new(8, 13);
  for (int i = 0; i < 1000; i++) a[i] = (float)i * 0.5f - 7.0f;
  for (int i = 0; i < 3; i++) b[i] = (float)(i + 1) * 1.25f, c[i] = -(float)i;
  Onnx__TensorProto *t = tensor("a", 1, 1, (const int64_t[]){1000});
  set_raw(t, a, 1000 * sizeof(float));
  add_init(m, t);
  t = tensor("b", 1, 1, (const int64_t[]){3});
  set_raw(t, b, 3 * sizeof(float));
  add_init(m, t);
  t = tensor("c", 1, 1, (const int64_t[]){3});
  t->n_float_data = 3;
  t->float_data = dup_mem(c, 3 * sizeof(float));
  add_init(m, t);
  t = tensor("h", 10, 1, (const int64_t[]){1}); /* float16, 2 bytes */
  set_raw(t, "\x00\x3c", 2);
  add_init(m, t);
  add_node(m, "Add", "add", "b,c", "out");
  add_output(m, "out", 0, NULL);
  return m;
}

static void expect_lifted(const kl_graph *g, const float *a, const float *b, const float *c) {
  assert_memory_equal(value(g, "a")->data, a, 1000 * sizeof(float));
  assert_memory_equal(value(g, "b")->data, b, 3 * sizeof(float));
  assert_memory_equal(value(g, "c")->data, c, 3 * sizeof(float));
  assert_memory_equal(value(g, "h")->data, "\x00\x3c", 2);
}

/* Initializers' raw_data is lifted out of the bytes before protobuf-c unpacks them and
 * copied once into the constants: from memory, and read from the file. */
static void test_lifted_raw_data(void **state) {
  const tmpdir *d = *state;
  float a[1000], b[3], c[3];
  kl_graph *g = load_ok(lift_model(a, b, c), NULL);
  expect_lifted(g, a, b, c);
  kl_graph_free(g);

  char path[256];
  path_in(path, sizeof path, d->model, "model.onnx");
  Onnx__ModelProto *m = lift_model(a, b, c);
  size_t len;
  uint8_t *buf = pack(m, &len);
  onnx__model_proto__free_unpacked(m, NULL);
  tu_write_file(path, buf, len);
  kl_err e;
  kl_err_clear(&e);
  g = NULL;
  tu_assert_status(kl_onnx_load_file(path, NULL, &g, &e), KILN_OK, e.msg, NULL);
  expect_lifted(g, a, b, c);
  kl_graph_free(g);

  /* a graph given twice is merged by protobuf: then nothing is lifted, and the
   * initializers of both halves are there */
  Onnx__ModelProto *half = model_new(8, 0);
  Onnx__TensorProto *t = tensor("z", 1, 1, (const int64_t[]){2});
  set_raw(t, ((const float[]){9, 10}), 2 * sizeof(float));
  PUSH(half->graph->initializer, half->graph->n_initializer, t);
  size_t hlen;
  uint8_t *hbuf = pack(half, &hlen);
  onnx__model_proto__free_unpacked(half, NULL);
  uint8_t *both = malloc(len + hlen);
  assert_non_null(both);
  memcpy(both, buf, len);
  memcpy(both + len, hbuf, hlen);
  kl_err_clear(&e);
  g = NULL;
  tu_assert_status(kl_onnx_load_memory(both, len + hlen, NULL, NULL, &g, &e), KILN_OK, e.msg,
                   NULL);
  expect_lifted(g, a, b, c);
  assert_memory_equal(value(g, "z")->data, ((const float[]){9, 10}), 2 * sizeof(float));
  kl_graph_free(g);
  free(both);
  free(hbuf);
  free(buf);

  /* raw_data next to another form is still refused, lifted or not */
  t = tensor("w", 1, 1, (const int64_t[]){2});
  set_raw(t, ((const float[]){1, 2}), 2 * sizeof(float));
  t->n_float_data = 2;
  t->float_data = dup_mem((float[]){1, 2}, 8);
  init_fails(t, KILN_ERR_INVALID_MODEL, "more than one form");
}

/* ---- Constant nodes ---- */

static Onnx__ModelProto *constant_model(void) {
  Onnx__ModelProto *m = model_new(8, 13);
  add_node(m, "Constant", "c", "", "K");
  add_node(m, "Identity", "id", "K", "out");
  add_output(m, "out", 0, NULL);
  return m;
}

static const kl_value *constant_of(kl_graph *g) {
  const kl_value *v = value(g, "K");
  assert_int_equal(v->kind, KL_VALUE_CONST);
  assert_int_equal(g->n_nodes, 1); /* the Constant node itself is gone */
  return v;
}

static void test_constant_nodes(void **state) {
  (void)state;
  Onnx__ModelProto *m = constant_model();
  Onnx__TensorProto *t = tensor(NULL, 7, 1, (const int64_t[]){2});
  set_raw(t, (int64_t[]){4, -1}, 16);
  attr_tensor(m->graph->node[0], "value", t);
  kl_graph *g = load_ok(m, NULL);
  const kl_value *v = constant_of(g);
  assert_int_equal(v->type.dtype, KL_I64);
  assert_memory_equal(v->data, ((int64_t[]){4, -1}), 16);
  kl_graph_free(g);

  m = constant_model();
  attr_float(m->graph->node[0], "value_float", 2.5f);
  g = load_ok(m, NULL);
  v = constant_of(g);
  assert_int_equal(v->type.dtype, KL_F32);
  assert_int_equal(v->type.rank, 0);
  assert_true(*(float *)v->data == 2.5f);
  kl_graph_free(g);

  m = constant_model();
  attr_floats(m->graph->node[0], "value_floats", 3, (const float[]){1, 2, 3});
  g = load_ok(m, NULL);
  v = constant_of(g);
  assert_int_equal(v->type.rank, 1);
  assert_int_equal(v->type.dims[0].size, 3);
  assert_memory_equal(v->data, ((float[]){1, 2, 3}), 12);
  kl_graph_free(g);

  m = constant_model();
  attr_int(m->graph->node[0], "value_int", -9);
  g = load_ok(m, NULL);
  v = constant_of(g);
  assert_int_equal(v->type.dtype, KL_I64);
  assert_int_equal(v->type.rank, 0);
  assert_int_equal(*(int64_t *)v->data, -9);
  kl_graph_free(g);

  m = constant_model();
  attr_ints(m->graph->node[0], "value_ints", 0, NULL);
  g = load_ok(m, NULL);
  v = constant_of(g);
  assert_int_equal(v->type.rank, 1);
  assert_int_equal(v->type.dims[0].size, 0);
  assert_non_null(v->data);
  kl_graph_free(g);
}

static void test_constant_node_errors(void **state) {
  (void)state;
  Onnx__ModelProto *m = constant_model();
  attr_string(m->graph->node[0], "value_string", "hi", 2);
  load_fails(m, KILN_ERR_UNSUPPORTED, "node 'c' (Constant)", "Constant 'value_string' is not "
             "supported");
  m = constant_model();
  attr(m->graph->node[0], "sparse_value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR);
  load_fails(m, KILN_ERR_UNSUPPORTED, "Constant 'sparse_value' is not supported");
  m = constant_model();
  load_fails(m, KILN_ERR_INVALID_MODEL, "exactly one attribute (found 0)");
  m = constant_model();
  attr_int(m->graph->node[0], "value_int", 1);
  attr_float(m->graph->node[0], "value_float", 1);
  load_fails(m, KILN_ERR_INVALID_MODEL, "exactly one attribute (found 2)");
  m = constant_model();
  attr_int(m->graph->node[0], "value_float", 1);
  load_fails(m, KILN_ERR_INVALID_MODEL, "Constant attribute 'value_float' has the wrong type");
  m = constant_model();
  attr_int(m->graph->node[0], "valeu", 1);
  load_fails(m, KILN_ERR_INVALID_MODEL, "Constant has no value");
  m = constant_model();
  Onnx__TensorProto *t = tensor(NULL, 1, 1, (const int64_t[]){2});
  set_raw(t, "abc", 3);
  attr_tensor(m->graph->node[0], "value", t);
  load_fails(m, KILN_ERR_INVALID_MODEL, "Constant value: raw_data has 3 bytes, expected 8");
}

/* ---- attributes ---- */

/* Every attribute kind, each on an op that has an attribute of that name and kind. */
static void test_attributes(void **state) {
  (void)state;
  Onnx__ModelProto *m = relu_model(13);
  attr_int(add_node(m, "Flatten", "flatten", "X", "a"), "axis", -3);
  attr_float(add_node(m, "LeakyRelu", "leaky", "X", "b"), "alpha", 0.5f);
  attr_string(add_node(m, "Resize", "resize", "X", "c"), "mode", "NOTSET", 6);
  attr_ints(add_node(m, "Transpose", "transpose", "X", "d"), "perm", 3,
            (const int64_t[]){1, 2, 3});
  Onnx__NodeProto *n = add_node(m, "LSTM", "lstm", "X,X,X", "e");
  attr_floats(n, "activation_alpha", 2, (const float[]){0.25f, -1});
  Onnx__AttributeProto *a = attr(n, "activations", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
  a->n_strings = 2;
  a->strings = calloc(2, sizeof *a->strings);
  a->strings[0].len = 1;
  a->strings[0].data = dup_mem("a", 1);
  a->strings[1].len = 0;
  Onnx__TensorProto *t = tensor(NULL, 6, 1, (const int64_t[]){2});
  t->n_int32_data = 2;
  t->int32_data = dup_mem((int32_t[]){5, 6}, 8);
  attr_tensor(add_node(m, "ConstantOfShape", "fill", "X", "f"), "value", t);
  kl_graph *g = load_ok(m, NULL);
  assert_int_equal(kl_attr_int(&g->nodes[1], "axis", 0), -3);
  assert_true(kl_attr_float(&g->nodes[2], "alpha", 0) == 0.5f);
  assert_string_equal(kl_attr_string(&g->nodes[3], "mode", ""), "NOTSET");
  const int64_t *is;
  assert_int_equal(kl_attr_ints(&g->nodes[4], "perm", &is), 3);
  assert_int_equal(is[2], 3);
  const kl_node *k = &g->nodes[5];
  assert_int_equal(k->n_attrs, 2);
  const float *fs;
  assert_int_equal(kl_attr_floats(k, "activation_alpha", &fs), 2);
  assert_true(fs[1] == -1);
  const kl_attr *ss = kl_node_attr(k, "activations");
  assert_int_equal(ss->kind, KL_ATTR_STRINGS);
  assert_int_equal(ss->n, 2);
  assert_string_equal(ss->strings[0], "a");
  assert_string_equal(ss->strings[1], "");
  const kl_attr *ta = kl_node_attr(&g->nodes[6], "value");
  assert_int_equal(ta->kind, KL_ATTR_TENSOR);
  assert_int_equal(ta->t->dtype, KL_I32);
  assert_memory_equal(ta->t->data, ((int32_t[]){5, 6}), 8);
  kl_graph_free(g);
}

/* A node whose attribute its op does not have is refused, as onnx.checker refuses it
 * ("Unrecognized attribute"): read as absent, a misspelt name would silently leave the
 * default in force. The message names the node, the op, the name and what the op
 * takes; kiln's own ops and the older opsets' attributes the importer rewrites are
 * covered too. */
static void test_unknown_attributes(void **state) {
  (void)state;
  Onnx__ModelProto *m = relu_model(13);
  free(m->graph->node[0]->op_type);
  m->graph->node[0]->op_type = strdup("Softmax");
  attr_int(m->graph->node[0], "axiss", 0);
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'relu' (Softmax)",
             "unrecognized attribute 'axiss': Softmax takes axis");

  m = relu_model(13);
  attr_float(m->graph->node[0], "alpha", 0.1f);
  load_fails(m, KILN_ERR_INVALID_MODEL, "unrecognized attribute 'alpha': Relu takes no "
             "attributes");

  m = model_new(8, 13);
  add_input(m, "X", 1, "1,1,4,4");
  add_input(m, "W", 1, "1,1,3,3");
  attr_ints(add_node(m, "Conv", "conv", "X,W", "Y"), "kernel_shap", 2, (const int64_t[]){3, 3});
  add_output(m, "Y", 1, NULL);
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'conv' (Conv)", "unrecognized attribute "
             "'kernel_shap': Conv takes auto_pad, dilations, group, kernel_shape, pads, strides");

  /* kiln's domain: what kiln optimize writes loads back, anything else does not */
  for (int bad = 0; bad < 2; bad++) {
    m = model_new(8, 13);
    add_opset(m, "kiln", 1);
    add_input(m, "X", 1, "2,4");
    add_input(m, "S", 1, "4");
    Onnx__NodeProto *n = add_node(m, "SkipLayerNorm", "sln", "X,X,S", "Y");
    n->domain = strdup("kiln");
    attr_float(n, bad ? "epsilom" : "epsilon", 1e-5f);
    add_output(m, "Y", 1, NULL);
    if (!bad) {
      kl_graph *g = load_ok(m, NULL);
      assert_true(kl_attr_float(&g->nodes[0], "epsilon", 0) == 1e-5f);
      kl_graph_free(g);
    } else {
      load_fails(m, KILN_ERR_INVALID_MODEL, "node 'sln' (SkipLayerNorm)",
                 "unrecognized attribute 'epsilom': SkipLayerNorm takes axis, epsilon");
    }
  }

  /* com.microsoft ops: the float op's attributes, those of the contrib op kiln drops */
  m = model_new(8, 13);
  add_opset(m, "com.microsoft", 1);
  add_input(m, "X", 2, "1,4");
  add_input(m, "s", 1, "");
  add_input(m, "z", 2, "");
  Onnx__NodeProto *q = add_node(m, "QLinearLeakyRelu", "qleaky", "X,s,z,s,z", "Y");
  q->domain = strdup("com.microsoft");
  attr_float(q, "alpah", 0.1f);
  add_output(m, "Y", 2, NULL);
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'qleaky' (QLinearLeakyRelu)",
             "unrecognized attribute 'alpah': QLinearLeakyRelu is read as LeakyRelu, "
             "which takes alpha");

  /* older opsets' attributes, rewritten by the importer, still load */
  m = model_new(8, 7);
  add_input(m, "X", 1, "1,2");
  Onnx__NodeProto *n = add_node(m, "Upsample", "up", "X", "Y");
  attr_floats(n, "scales", 2, (const float[]){1, 2});
  attr_string(n, "mode", "nearest", 7);
  add_output(m, "Y", 1, NULL);
  kl_graph *g = load_ok(m, NULL);
  assert_int_equal(g->nodes[0].op, KL_OP_Resize);
  assert_null(kl_node_attr(&g->nodes[0], "scales"));
  kl_graph_free(g);
  m = model_new(8, 9);
  add_input(m, "X", 1, "1,2");
  add_input(m, "S", 1, "2");
  attr_string(add_node(m, "Upsample", "up", "X,S", "Y"), "mdoe", "nearest", 7);
  add_output(m, "Y", 1, NULL);
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'up' (Upsample)", "unrecognized attribute "
             "'mdoe': Upsample is read as Resize, which takes antialias, axes, ");

  m = model_new(8, 8);
  add_input(m, "X", 1, "1,2,3,3");
  static const char *const params[] = {"s", "b", "mu", "var"};
  for (int i = 0; i < 4; i++) add_input(m, params[i], 1, "2");
  n = add_node(m, "BatchNormalization", "bn", "X,s,b,mu,var", "Y");
  attr_int(n, "spatial", 1);
  attr_int(n, "is_test", 1);
  attr_ints(n, "consumed_inputs", 2, (const int64_t[]){0, 0});
  add_output(m, "Y", 1, NULL);
  g = load_ok(m, NULL);
  assert_int_equal(g->nodes[0].n_attrs, 0);
  kl_graph_free(g);
}

static void test_attribute_errors(void **state) {
  (void)state;
  Onnx__ModelProto *m = relu_model(13);
  attr(m->graph->node[0], "body", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'relu' (Relu)",
             "attribute 'body' is of type GRAPH (a subgraph); only If's then_branch");

  m = relu_model(13);
  attr(m->graph->node[0], "tp", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO);
  load_fails(m, KILN_ERR_UNSUPPORTED, "attribute 'tp' has type TYPE_PROTO");

  m = relu_model(13);
  attr_string(m->graph->node[0], "s", "a\0b", 3);
  load_fails(m, KILN_ERR_UNSUPPORTED, "attribute 's' holds a string with a NUL byte");

  m = model_new(8, 13);
  add_input(m, "X", 1, "N,3");
  Onnx__NodeProto *sm = add_node(m, "Softmax", "sm", "X", "Y");
  attr_int(sm, "axis", 1);
  attr_int(sm, "axis", 2);
  add_output(m, "Y", 1, NULL);
  load_fails(m, KILN_ERR_INVALID_MODEL, "attribute 'axis' is given twice");

  m = relu_model(13);
  attr_int(m->graph->node[0], "x", 1);
  m->graph->node[0]->attribute[0]->has_type = 0;
  load_fails(m, KILN_ERR_INVALID_MODEL, "attribute 'x' has no valid type");

  m = relu_model(13);
  attr_int(m->graph->node[0], "x", 1);
  m->graph->node[0]->attribute[0]->ref_attr_name = strdup("outer");
  load_fails(m, KILN_ERR_INVALID_MODEL, "refers to a function's attribute");

  m = relu_model(13);
  Onnx__TensorProto *t = tensor(NULL, 1, 1, (const int64_t[]){2});
  attr_tensor(m->graph->node[0], "t", t);
  load_fails(m, KILN_ERR_INVALID_MODEL, "attribute 't' has no data");
}

static void test_names_validated(void **state) {
  (void)state;
  Onnx__ModelProto *m = relu_model(13);
  free(m->graph->node[0]->name);
  m->graph->node[0]->name = strdup("bad\xff");
  load_fails(m, KILN_ERR_INVALID_MODEL, "node #0 (Relu): name is not valid UTF-8 text");
  m = relu_model(13);
  free(m->graph->node[0]->name);
  m->graph->node[0]->name = strdup("line\nbreak");
  load_fails(m, KILN_ERR_INVALID_MODEL, "node #0 (Relu): name holds a control character");
  m = relu_model(13);
  free(m->graph->input[0]->name);
  m->graph->input[0]->name = strdup("\xc0\x80"); /* an overlong NUL */
  load_fails(m, KILN_ERR_INVALID_MODEL, "graph input 0's name is not valid UTF-8 text");
  /* a name past the limit says so (it was reported as not UTF-8) */
  m = relu_model(13);
  free(m->graph->node[0]->name);
  m->graph->node[0]->name = malloc(5001);
  assert_non_null(m->graph->node[0]->name);
  memset(m->graph->node[0]->name, 'n', 5000);
  m->graph->node[0]->name[5000] = '\0';
  load_fails(m, KILN_ERR_INVALID_MODEL, "node #0 (Relu): name is longer than 4096 bytes");
  m = relu_model(13);
  free(m->graph->node[0]->domain);
  m->graph->node[0]->domain = strdup("d\x01");
  load_fails(m, KILN_ERR_INVALID_MODEL, "node #0 (Relu): domain holds a control character");
  /* real UTF-8 is fine */
  m = relu_model(13);
  free(m->graph->node[0]->name);
  m->graph->node[0]->name = strdup("r\xc3\xa9lu \xe2\x86\x92 \xf0\x9f\x94\xa5");
  kl_graph_free(load_ok(m, NULL));
}

/* ---- canonicalization of older opsets ---- */

static void test_canon_squeeze_unsqueeze(void **state) {
  (void)state;
  Onnx__ModelProto *m = model_new(8, 11);
  add_input(m, "X", 1, "1,3,1");
  attr_ints(add_node(m, "Squeeze", "sq", "X", "S"), "axes", 2, (const int64_t[]){0, -1});
  attr_ints(add_node(m, "Unsqueeze", "un", "S", "U"), "axes", 1, (const int64_t[]){1});
  add_node(m, "Squeeze", "all", "U", "A"); /* no axes: every 1-dim, stays without input 1 */
  add_output(m, "A", 1, NULL);
  kl_graph *g = load_ok(m, NULL);
  const kl_node *sq = &g->nodes[0], *un = &g->nodes[1], *all = &g->nodes[2];
  assert_int_equal(sq->n_in, 2);
  assert_int_equal(sq->n_attrs, 0);
  const int64_t *axes = tu_const_i64(g, sq->in[1], 2);
  assert_int_equal(axes[0], 0);
  assert_int_equal(axes[1], -1);
  assert_int_equal(un->n_in, 2);
  assert_int_equal(tu_const_i64(g, un->in[1], 1)[0], 1);
  assert_int_equal(all->n_in, 1);
  kl_graph_free(g);

  m = model_new(8, 11);
  add_input(m, "X", 1, "3");
  add_node(m, "Unsqueeze", "un", "X", "U");
  add_output(m, "U", 1, NULL);
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'un' (Unsqueeze)", "attribute 'axes' is "
             "required at opset 11");

  m = model_new(8, 11);
  add_input(m, "X", 1, "3");
  attr_floats(add_node(m, "Unsqueeze", "un", "X", "U"), "axes", 1, (const float[]){1});
  add_output(m, "U", 1, NULL);
  load_fails(m, KILN_ERR_INVALID_MODEL, "attribute 'axes' must be a list of ints");

  /* at 13 the input form is used as it is */
  m = model_new(8, 13);
  add_input(m, "X", 1, "3");
  add_input(m, "axes", 7, "1");
  add_node(m, "Unsqueeze", "un", "X,axes", "U");
  add_output(m, "U", 1, NULL);
  g = load_ok(m, NULL);
  assert_string_equal(g->values[g->nodes[0].in[1]].name, "axes");
  kl_graph_free(g);
}

static void test_canon_clip(void **state) {
  (void)state;
  Onnx__ModelProto *m = model_new(8, 10);
  add_input(m, "X", 1, "4");
  Onnx__NodeProto *n = add_node(m, "Clip", "clip", "X", "Y");
  attr_float(n, "min", -1.5f);
  attr_float(n, "max", 6);
  add_output(m, "Y", 1, NULL);
  kl_graph *g = load_ok(m, NULL);
  const kl_node *c = &g->nodes[0];
  assert_int_equal(c->n_in, 3);
  assert_int_equal(c->n_attrs, 0);
  const kl_value *lo = &g->values[c->in[1]], *hi = &g->values[c->in[2]];
  assert_int_equal(lo->type.dtype, KL_F32);
  assert_int_equal(lo->type.rank, 0);
  assert_true(*(float *)lo->data == -1.5f);
  assert_true(*(float *)hi->data == 6);
  kl_graph_free(g);

  /* only max: min stays absent; the bound takes the input's dtype */
  m = model_new(8, 7);
  add_input(m, "X", 10, "4");
  attr_float(add_node(m, "Clip", "clip", "X", "Y"), "max", 2);
  add_output(m, "Y", 10, NULL);
  g = load_ok(m, NULL);
  c = &g->nodes[0];
  assert_int_equal(c->n_in, 3);
  assert_int_equal(c->in[1], KL_ABSENT);
  hi = &g->values[c->in[2]];
  assert_int_equal(hi->type.dtype, KL_F16);
  assert_int_equal(*(uint16_t *)hi->data, 0x4000);
  kl_graph_free(g);

  /* neither: Clip without bounds */
  m = model_new(8, 10);
  add_input(m, "X", 1, "4");
  add_node(m, "Clip", "clip", "X", "Y");
  add_output(m, "Y", 1, NULL);
  g = load_ok(m, NULL);
  assert_int_equal(g->nodes[0].n_in, 1);
  kl_graph_free(g);
}

static void expect_ops(const kl_graph *g, int n, const kl_op *ops) {
  assert_int_equal(g->n_nodes, n);
  for (int i = 0; i < n; i++) assert_int_equal(g->nodes[i].op, ops[i]);
}

static void test_canon_softmax(void **state) {
  (void)state;
  /* axis 1 of a rank-4 input: flattened to 2-D, as opset 11 says */
  Onnx__ModelProto *m = model_new(8, 11);
  add_input(m, "X", 1, "2,3,4,5");
  attr_int(add_node(m, "Softmax", "sm", "X", "Y"), "axis", 1);
  add_output(m, "Y", 1, "2,3,4,5");
  kl_graph *g = load_ok(m, NULL);
  expect_ops(g, 4, (const kl_op[]){KL_OP_Flatten, KL_OP_Softmax, KL_OP_Shape, KL_OP_Reshape});
  assert_int_equal(kl_attr_int(&g->nodes[0], "axis", 99), 1);
  assert_int_equal(kl_attr_int(&g->nodes[1], "axis", 99), 1);
  assert_string_equal(g->nodes[1].name, "sm");
  assert_string_equal(g->nodes[0].name, "sm/flatten");
  assert_int_equal(g->nodes[0].in[0], kl_graph_find_value(g, "X"));
  assert_int_equal(g->nodes[2].in[0], kl_graph_find_value(g, "X"));
  assert_int_equal(g->nodes[3].out[0], kl_graph_find_value(g, "Y"));
  assert_int_equal(g->nodes[3].in[0], g->nodes[1].out[0]);
  assert_int_equal(g->nodes[3].in[1], g->nodes[2].out[0]);
  kl_graph_free(g);

  /* the default axis (1) of a rank-2 input is its last: nothing to flatten */
  m = model_new(8, 12);
  add_input(m, "X", 1, "N,10");
  add_node(m, "LogSoftmax", "lsm", "X", "Y");
  add_output(m, "Y", 1, NULL);
  g = load_ok(m, NULL);
  expect_ops(g, 1, (const kl_op[]){KL_OP_LogSoftmax});
  assert_int_equal(kl_attr_int(&g->nodes[0], "axis", 99), -1);
  kl_graph_free(g);

  /* axis -1 needs no rank; an unknown rank with another axis is lowered */
  m = model_new(8, 11);
  add_input(m, "X", 1, NULL);
  attr_int(add_node(m, "Softmax", "a", "X", "Y"), "axis", -1);
  add_node(m, "Softmax", NULL, "Y", "Z");
  add_output(m, "Z", 1, NULL);
  g = load_ok(m, NULL);
  expect_ops(g, 5, (const kl_op[]){KL_OP_Softmax, KL_OP_Flatten, KL_OP_Softmax, KL_OP_Shape,
                                   KL_OP_Reshape});
  assert_string_equal(g->nodes[1].name, "flatten");
  kl_graph_free(g);

  /* at 13 the attribute is kept as it is */
  m = model_new(8, 13);
  add_input(m, "X", 1, "2,3,4");
  attr_int(add_node(m, "Softmax", "sm", "X", "Y"), "axis", 1);
  add_output(m, "Y", 1, NULL);
  g = load_ok(m, NULL);
  expect_ops(g, 1, (const kl_op[]){KL_OP_Softmax});
  assert_int_equal(kl_attr_int(&g->nodes[0], "axis", 99), 1);
  kl_graph_free(g);
}

static void test_canon_dropout_batchnorm(void **state) {
  (void)state;
  Onnx__ModelProto *m = model_new(8, 10);
  add_input(m, "X", 1, "1,2");
  attr_float(add_node(m, "Dropout", "d", "X", "Y,mask"), "ratio", 0.3f);
  add_output(m, "Y", 1, NULL);
  kl_graph *g = load_ok(m, NULL);
  assert_int_equal(g->nodes[0].n_attrs, 0);
  assert_int_equal(g->nodes[0].n_out, 2);
  kl_graph_free(g);

  const char *bn_in = "X,s,b,mu,var";
  static const char *const params[] = {"s", "b", "mu", "var"};
  for (int opset = 7; opset <= 15; opset += 8) {
    m = model_new(8, opset);
    add_input(m, "X", 1, "1,2,3,3");
    for (int i = 0; i < 4; i++) add_input(m, params[i], 1, "2");
    Onnx__NodeProto *n = add_node(m, "BatchNormalization", "bn", bn_in, "Y");
    attr_float(n, "epsilon", 1e-3f);
    if (opset == 7) attr_int(n, "spatial", 1);
    if (opset == 15) attr_int(n, "training_mode", 0);
    add_output(m, "Y", 1, NULL);
    g = load_ok(m, NULL);
    const kl_node *bn = &g->nodes[0];
    assert_null(kl_node_attr(bn, "spatial"));
    assert_true(kl_attr_float(bn, "epsilon", 0) == 1e-3f);
    kl_graph_free(g);
  }

  m = model_new(8, 7);
  add_input(m, "X", 1, "1,2");
  for (int i = 0; i < 4; i++) add_input(m, params[i], 1, "2");
  attr_int(add_node(m, "BatchNormalization", "bn", bn_in, "Y"), "spatial", 0);
  load_fails(m, KILN_ERR_UNSUPPORTED, "node 'bn' (BatchNormalization)", "spatial=0");

  m = model_new(8, 9);
  add_input(m, "X", 1, "1,2");
  for (int i = 0; i < 4; i++) add_input(m, params[i], 1, "2");
  add_node(m, "BatchNormalization", "bn", bn_in, "Y,mean,var_out,,");
  load_fails(m, KILN_ERR_INVALID_MODEL, "it has 3 outputs, which only training_mode=1 has");

  m = model_new(8, 15); /* training_mode=1 (the batch's statistics) loads; 2 is no mode */
  add_input(m, "X", 1, "1,2");
  for (int i = 0; i < 4; i++) add_input(m, params[i], 1, "2");
  attr_int(add_node(m, "BatchNormalization", "bn", bn_in, "Y"), "training_mode", 2);
  load_fails(m, KILN_ERR_INVALID_MODEL, "training_mode=2: expected 0 or 1");
}

static void test_canon_reduce_topk(void **state) {
  (void)state;
  Onnx__ModelProto *m = model_new(8, 17);
  add_input(m, "X", 1, "2,3,4");
  Onnx__NodeProto *n = add_node(m, "ReduceMean", "mean", "X", "M");
  attr_ints(n, "axes", 2, (const int64_t[]){1, -1});
  attr_int(n, "keepdims", 0);
  add_node(m, "ReduceMax", "max", "M", "A"); /* no axes: all of them, no input 1 */
  add_output(m, "A", 1, NULL);
  kl_graph *g = load_ok(m, NULL);
  const kl_node *mean = &g->nodes[0];
  assert_int_equal(mean->n_in, 2);
  const int64_t *axes = tu_const_i64(g, mean->in[1], 2);
  assert_int_equal(axes[1], -1);
  assert_null(kl_node_attr(mean, "axes"));
  assert_int_equal(kl_attr_int(mean, "keepdims", 1), 0);
  assert_int_equal(g->nodes[1].n_in, 1);
  kl_graph_free(g);

  /* ReduceSum moved at 13, the others at 18 */
  m = model_new(8, 12);
  add_input(m, "X", 1, "2,3");
  attr_ints(add_node(m, "ReduceSum", "sum", "X", "S"), "axes", 1, (const int64_t[]){0});
  add_output(m, "S", 1, NULL);
  g = load_ok(m, NULL);
  assert_int_equal(tu_const_i64(g, g->nodes[0].in[1], 1)[0], 0);
  kl_graph_free(g);
  m = model_new(8, 18);
  add_input(m, "X", 1, "2,3");
  add_input(m, "axes", 7, "1");
  add_node(m, "ReduceMean", "mean", "X,axes", "M");
  add_output(m, "M", 1, NULL);
  g = load_ok(m, NULL);
  assert_string_equal(g->values[g->nodes[0].in[1]].name, "axes");
  kl_graph_free(g);

  /* TopK's k became a 1-D input of one element at opset 10 */
  m = model_new(8, 9);
  add_input(m, "X", 1, "5");
  attr_int(add_node(m, "TopK", "top", "X", "V,I"), "k", 3);
  add_output(m, "V", 1, NULL);
  g = load_ok(m, NULL);
  assert_int_equal(g->nodes[0].n_in, 2);
  assert_int_equal(tu_const_i64(g, g->nodes[0].in[1], 1)[0], 3);
  assert_null(kl_node_attr(&g->nodes[0], "k"));
  kl_graph_free(g);
  m = model_new(8, 9);
  add_input(m, "X", 1, "5");
  add_node(m, "TopK", "top", "X", "V,I");
  load_fails(m, KILN_ERR_INVALID_MODEL, "node 'top' (TopK)", "attribute 'k' is required at "
             "opset 9");

  /* Hardmax had Softmax's 2-D coercion before 13 */
  m = model_new(8, 11);
  add_input(m, "X", 1, "2,3,4");
  add_node(m, "Hardmax", "hm", "X", "Y");
  add_output(m, "Y", 1, NULL);
  g = load_ok(m, NULL);
  expect_ops(g, 4, (const kl_op[]){KL_OP_Flatten, KL_OP_Hardmax, KL_OP_Shape, KL_OP_Reshape});
  kl_graph_free(g);
}

/* X [1,4,2,2] with 2 groups; scale and bias per group: {1, 2} and {0.5, -0.5} */
static Onnx__ModelProto *groupnorm_model(int64_t opset, const char *x_dims) {
  Onnx__ModelProto *m = model_new(8, opset);
  add_input(m, "X", 1, x_dims);
  Onnx__TensorProto *t = tensor("scale", 1, 1, (const int64_t[]){2});
  set_raw(t, (float[]){1, 2}, 8);
  add_init(m, t);
  t = tensor("bias", 1, 1, (const int64_t[]){2});
  set_raw(t, (float[]){0.5f, -0.5f}, 8);
  add_init(m, t);
  attr_int(add_node(m, "GroupNormalization", "gn", "X,scale,bias", "Y"), "num_groups", 2);
  add_output(m, "Y", 1, NULL);
  return m;
}

static void test_canon_groupnorm(void **state) {
  (void)state;
  kl_graph *g = load_ok(groupnorm_model(18, "1,4,2,2"), NULL);
  const kl_node *gn = &g->nodes[0];
  const kl_value *scale = &g->values[gn->in[1]], *bias = &g->values[gn->in[2]];
  assert_int_equal(scale->type.dims[0].size, 4);
  assert_memory_equal(scale->data, ((float[]){1, 1, 2, 2}), 16);
  assert_memory_equal(bias->data, ((float[]){0.5f, 0.5f, -0.5f, -0.5f}), 16);
  kl_graph_free(g);

  load_fails(groupnorm_model(18, "1,C,2,2"), KILN_ERR_UNSUPPORTED, "node 'gn' "
             "(GroupNormalization)", "one scale value per group");
  /* at 21 the inputs are per channel already and kept */
  g = load_ok(groupnorm_model(21, "1,2,2,2"), NULL);
  assert_string_equal(g->values[g->nodes[0].in[1]].name, "scale");
  kl_graph_free(g);
}

/* ---- files written by the onnx Python package ---- */

#define FIXTURES "tests/unit/fixtures/onnx/"

static void test_python_fixtures(void **state) {
  (void)state;
  /* opset 23, IR 11, as onnx 1.22 writes: an MLP with a symbolic batch */
  kl_graph *g = tu_load_onnx(FIXTURES "mlp_opset23.onnx");
  assert_int_equal(g->opset, 23);
  assert_int_equal(g->n_inputs, 1);
  const kl_value *x = &g->values[g->inputs[0]];
  assert_string_equal(g->symbols[x->type.dims[0].sym], "batch");
  const kl_value *w = value(g, "w1");
  assert_int_equal(w->type.dims[0].size, 4);
  assert_int_equal(w->type.dims[1].size, 8);
  assert_true(((const float *)w->data)[9] == 0.125f * 9);
  kl_graph_free(g);

  /* external data written by onnx.save_model(save_as_external_data=True) */
  g = tu_load_onnx(FIXTURES "external/model.onnx");
  w = value(g, "w1");
  assert_true(((const float *)w->data)[31] == 0.125f * 31);
  kl_graph_free(g);

  /* opset 9 with the old forms the importer rewrites */
  g = tu_load_onnx(FIXTURES "old_forms_opset9.onnx");
  assert_int_equal(g->opset, 9);
  kl_graph_free(g);
}

/* The writer stamps opset 23 (what released onnxruntimes load) unless the graph needs a
 * newer form: TopK (changed in 24) or a float8 dtype; the model loads back either way. */
static int64_t stamped_opset(kl_graph *g) {
  void *buf;
  size_t len;
  kl_err e = {0};
  if (kl_onnx_export(g, &buf, &len, &e) != KILN_OK) fail_msg("export: %s", e.msg);
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
  assert_non_null(m);
  int64_t v = -1;
  for (size_t i = 0; i < m->n_opset_import; i++)
    if (!m->opset_import[i]->domain || !*m->opset_import[i]->domain) v = m->opset_import[i]->version;
  onnx__model_proto__free_unpacked(m, NULL);
  kl_graph *back = NULL;
  if (kl_onnx_load_memory(buf, len, NULL, NULL, &back, &e) != KILN_OK) fail_msg("reload: %s", e.msg);
  kl_graph_free(back);
  free(buf);
  kl_graph_free(g);
  return v;
}

static void test_export_opset(void **state) {
  (void)state;
  int64_t d[2] = {3, 5};
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 2, d);
  tu_graph_output_node(g, KL_OP_Relu, 1, &x, 1);
  assert_int_equal(stamped_opset(g), 23);
  g = tu_graph_new();
  x = tu_graph_input(g, "x", KL_F32, 2, d);
  int64_t k = 2;
  int kv = tu_graph_const(g, "k", KL_I64, 1, (int64_t[]){1}, &k);
  tu_graph_output_node(g, KL_OP_TopK, 2, (int[]){x, kv}, 2);
  assert_int_equal(stamped_opset(g), KL_ONNX_MAX_OPSET);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_minimal_model),
      cmocka_unit_test(test_ai_onnx_domain_and_unnamed_nodes),
      cmocka_unit_test(test_dims_symbols_and_value_info),
      cmocka_unit_test(test_graph_structure),
      cmocka_unit_test(test_graph_structure_errors),
      cmocka_unit_test(test_input_types),
      cmocka_unit_test(test_versions),
      cmocka_unit_test(test_unsupported_ops_and_domains),
      cmocka_unit_test(test_malformed_bytes),
      cmocka_unit_test(test_deep_nesting),
      cmocka_unit_test(test_raw_data),
      cmocka_unit_test(test_typed_fields),
      cmocka_unit_test(test_int32_data),
      cmocka_unit_test(test_storage_errors),
      cmocka_unit_test_setup_teardown(test_external_data_inside, setup_tmpdir, teardown_tmpdir),
      cmocka_unit_test_setup_teardown(test_external_data_refused, setup_tmpdir, teardown_tmpdir),
      cmocka_unit_test_setup_teardown(test_load_file, setup_tmpdir, teardown_tmpdir),
      cmocka_unit_test_setup_teardown(test_lifted_raw_data, setup_tmpdir, teardown_tmpdir),
      cmocka_unit_test(test_constant_nodes),
      cmocka_unit_test(test_constant_node_errors),
      cmocka_unit_test(test_attributes),
      cmocka_unit_test(test_attribute_errors),
      cmocka_unit_test(test_unknown_attributes),
      cmocka_unit_test(test_names_validated),
      cmocka_unit_test(test_canon_squeeze_unsqueeze),
      cmocka_unit_test(test_canon_clip),
      cmocka_unit_test(test_canon_softmax),
      cmocka_unit_test(test_canon_dropout_batchnorm),
      cmocka_unit_test(test_canon_reduce_topk),
      cmocka_unit_test(test_canon_groupnorm),
      cmocka_unit_test(test_python_fixtures),
      cmocka_unit_test(test_export_opset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
