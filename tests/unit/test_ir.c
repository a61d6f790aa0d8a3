/* The graph IR: builder, attributes, verifier, toposort, compaction, type inference
 * merging declared and inferred types, dtype helpers and the text dump. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* x: float32[batch,3] -> Relu 'relu' -> h -> Add 'add' (h, const w[3]) -> y (output). */
static kl_graph *small_graph(void) {
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  int batch = kl_graph_symbol(g, "batch");
  assert_int_equal(batch, 0);
  int x = tu_graph_input(g, "x", KL_F32, 2, (int64_t[]){-1, 3});
  g->values[x].type.dims[0].sym = batch;
  const float w_vals[3] = {1, 2, 3};
  int w = tu_graph_const(g, "w", KL_F32, 1, (int64_t[]){3}, w_vals);
  int h = tu_graph_value(g, "h"), y = tu_graph_value(g, "y");
  tu_graph_node(g, KL_OP_Relu, "relu", 1, &x, 1, &h);
  tu_graph_node(g, KL_OP_Add, "add", 2, (int[]){h, w}, 1, &y);
  assert_int_equal(kl_graph_add_output(g, y, &e), KILN_OK);
  return g;
}

/* ---- builder ---- */

static void test_values(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  int a = tu_graph_value(g, "a");
  int b = tu_graph_value(g, "b");
  assert_int_equal(a, 0);
  assert_int_equal(b, 1);
  assert_int_equal(kl_graph_find_value(g, "a"), a);
  assert_int_equal(kl_graph_find_value(g, "b"), b);
  assert_int_equal(kl_graph_find_value(g, "nope"), -1);
  assert_int_equal(kl_graph_find_value(g, NULL), -1);
  assert_int_equal(g->values[a].producer, -1);
  assert_int_equal(g->values[a].type.rank, -1);
  assert_int_equal(g->values[a].kind, KL_VALUE_INTERMEDIATE);

  assert_int_equal(kl_graph_add_value(g, "a", &e), -1);
  assert_int_equal(e.code, KILN_ERR_INVALID_MODEL);
  tu_assert_contains(e.msg, "'a'");
  assert_int_equal(g->n_values, 2);

  /* fresh names never collide, even with a value a model already called "_v2" */
  int taken = tu_graph_value(g, "_v3");
  int f1 = tu_graph_value(g, NULL), f2 = tu_graph_value(g, "");
  assert_string_not_equal(g->values[f1].name, g->values[f2].name);
  assert_string_not_equal(g->values[f1].name, "_v3");
  assert_string_not_equal(g->values[f2].name, "_v3");
  assert_int_equal(kl_graph_find_value(g, g->values[f1].name), f1);
  assert_int_equal(kl_graph_find_value(g, g->values[f2].name), f2);
  assert_int_equal(kl_graph_find_value(g, "_v3"), taken);

  /* many values: the arrays grow and every name stays findable */
  char name[32];
  for (int i = 0; i < 1000; i++) {
    snprintf(name, sizeof name, "many%d", i);
    tu_graph_value(g, name);
  }
  for (int i = 0; i < 1000; i += 97) {
    snprintf(name, sizeof name, "many%d", i);
    int v = kl_graph_find_value(g, name);
    assert_true(v >= 0);
    assert_string_equal(g->values[v].name, name);
  }
  assert_string_equal(g->source, "<memory>");
  assert_int_equal(kl_graph_set_source(g, "dir/m.onnx", &e), KILN_OK);
  assert_string_equal(g->source, "dir/m.onnx");
  kl_graph_free(g);
  kl_graph_free(NULL);
}

static void test_constants(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  const float vals[6] = {1, 2, 3, 4, 5, 6};
  int c = tu_graph_const(g, "c", KL_F32, 2, (int64_t[]){2, 3}, vals);
  const kl_value *v = &g->values[c];
  assert_int_equal(v->kind, KL_VALUE_CONST);
  assert_int_equal(v->type.dtype, KL_F32);
  assert_int_equal(v->type.rank, 2);
  assert_int_equal(v->type.dims[0].size, 2);
  assert_int_equal(v->type.dims[1].size, 3);
  assert_int_equal(v->nbytes, 24);
  assert_memory_equal(v->data, vals, 24);
  assert_false(v->borrowed);

  /* a scalar and an empty tensor */
  int s = tu_graph_const(g, "s", KL_F32, 0, NULL, vals);
  assert_int_equal(g->values[s].type.rank, 0);
  int z = tu_graph_const(g, "z", KL_F32, 2, (int64_t[]){0, 4}, NULL);
  assert_int_equal(g->values[z].nbytes, 0);

  /* borrowed data is not freed with the graph (a stack array would crash free()) */
  static const int64_t shape_vals[2] = {3, 2};
  int b = kl_graph_add_const(g, "shape", KL_I64, 1, (int64_t[]){2}, (void *)shape_vals, 16,
                             true, &e);
  assert_true(b >= 0);
  assert_true(g->values[b].borrowed);
  assert_ptr_equal(g->values[b].data, shape_vals);

  /* bytes that do not match the shape: refused, the (owned) data freed */
  void *data = malloc(20);
  assert_non_null(data);
  assert_int_equal(kl_graph_add_const(g, "bad", KL_F32, 2, (int64_t[]){2, 3}, data, 20, false,
                                      &e), -1);
  assert_int_equal(e.code, KILN_ERR_INTERNAL);
  tu_assert_contains(e.msg, "'bad'");
  assert_int_equal(kl_graph_find_value(g, "bad"), -1);

  kl_err_clear(&e);
  data = malloc(4);
  assert_non_null(data);
  int64_t dims9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  assert_int_equal(kl_graph_add_const(g, "deep", KL_F32, 9, dims9, data, 4, false, &e), -1);
  assert_int_equal(e.code, KILN_ERR_UNSUPPORTED);
  tu_assert_contains(e.msg, "rank 9");

  /* a duplicate name is refused and the data freed too */
  kl_err_clear(&e);
  data = malloc(4);
  assert_non_null(data);
  assert_int_equal(kl_graph_add_const(g, "c", KL_F32, 0, NULL, data, 4, false, &e), -1);
  assert_int_equal(e.code, KILN_ERR_INVALID_MODEL);
  kl_graph_free(g);
}

static void test_nodes(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){4});
  int y = tu_graph_value(g, "y"), mask = tu_graph_value(g, "mask");
  assert_int_equal(g->values[x].kind, KL_VALUE_INPUT);
  assert_int_equal(g->n_inputs, 1);
  assert_int_equal(g->inputs[0], x);

  int in[3] = {x, KL_ABSENT, KL_ABSENT};
  int out[2] = {y, mask};
  int n = kl_graph_add_node(g, KL_OP_Dropout, "drop", 3, in, 2, out, &e);
  assert_int_equal(n, 0);
  const kl_node *node = &g->nodes[n];
  assert_int_equal(node->op, KL_OP_Dropout);
  assert_string_equal(node->name, "drop");
  assert_string_equal(node->src, "Dropout");
  assert_int_equal(node->n_in, 3);
  assert_int_equal(node->n_out, 2);
  assert_int_equal(node->in[1], KL_ABSENT);
  assert_int_equal(kl_node_input_count(node), 1);
  assert_int_equal(g->values[y].producer, n);
  assert_int_equal(g->values[mask].producer, n);

  char buf[128];
  assert_string_equal(kl_node_describe(g, node, buf, sizeof buf), "node 'drop' (Dropout)");
  int z = tu_graph_value(g, "z");
  int n2 = tu_graph_node(g, KL_OP_Relu, NULL, 1, &y, 1, &z);
  assert_string_equal(g->nodes[n2].name, "");
  assert_string_equal(kl_node_describe(g, &g->nodes[n2], buf, sizeof buf), "node #1 (Relu)");

  /* a node with no inputs at all is representable (the verifier judges it) */
  int w = tu_graph_value(g, "w");
  int n3 = kl_graph_add_node(g, KL_OP_Shape, "empty", 0, NULL, 1, &w, &e);
  assert_int_equal(n3, 2);
  assert_int_equal(kl_node_input_count(&g->nodes[n3]), 0);

  /* the op table */
  assert_int_equal(kl_op_lookup("", "Relu"), KL_OP_Relu);
  assert_int_equal(kl_op_lookup("ai.onnx", "Conv"), KL_OP_Conv);
  assert_int_equal(kl_op_lookup(NULL, "Gemm"), KL_OP_Gemm);
  assert_int_equal(kl_op_lookup("", "NoSuchOp"), KL_OP_COUNT);
  assert_int_equal(kl_op_lookup("com.example", "Relu"), KL_OP_COUNT);
  assert_null(kl_op_get(KL_OP_COUNT));
  assert_string_equal(kl_op_name(KL_OP_COUNT), "?");
  const kl_op_info *add = kl_op_get(KL_OP_Add);
  assert_string_equal(add->name, "Add");
  assert_int_equal(add->min_in, 2);
  assert_int_equal(add->max_in, 2);
  for (int op = 0; op < KL_OP_COUNT; op++) {
    const kl_op_info *info = kl_op_get((kl_op)op);
    assert_non_null(info->infer);
    assert_non_null(info->ref);
    assert_true(info->min_in <= info->max_in);
    assert_true(info->min_out >= 1 && info->min_out <= info->max_out);
    assert_int_equal(kl_op_lookup(info->domain, info->name), op);
    /* its attribute names: one space between, none twice, each found by
     * kl_op_takes_attr */
    const char *a = info->attrs, *word[64];
    size_t len[64];
    int n = 0;
    assert_non_null(a);
    assert_true(!*a || (a[0] != ' ' && a[strlen(a) - 1] != ' ' && !strstr(a, "  ")));
    for (const char *p = a; *p; p += *p == ' ') {
      assert_true(n < 64);
      word[n] = p;
      len[n] = strcspn(p, " ");
      p += len[n];
      char name[64];
      assert_true(len[n] < sizeof name);
      memcpy(name, word[n], len[n]);
      name[len[n]] = '\0';
      assert_true(kl_op_takes_attr((kl_op)op, name));
      for (int k = 0; k < n; k++)
        if (len[k] == len[n] && memcmp(word[k], word[n], len[n]) == 0)
          fail_msg("%s lists attribute %s twice", info->name, name);
      n++;
    }
  }
  /* whole names only: "p" and "pads" of LpPool, not "pad" or "" */
  assert_true(kl_op_takes_attr(KL_OP_LpPool, "p"));
  assert_true(kl_op_takes_attr(KL_OP_LpPool, "pads"));
  assert_true(kl_op_takes_attr(KL_OP_LpPool, "strides"));
  assert_false(kl_op_takes_attr(KL_OP_LpPool, "pad"));
  assert_false(kl_op_takes_attr(KL_OP_LpPool, ""));
  assert_false(kl_op_takes_attr(KL_OP_Relu, "alpha"));
  assert_true(kl_op_takes_attr(KL_OP_KilnFusedConv, "kernel_shape"));
  assert_true(kl_op_takes_attr(KL_OP_KilnFusedConv, "activation"));
  assert_false(kl_op_takes_attr(KL_OP_COUNT, "axis"));
  kl_graph_free(g);
}

static void test_attributes(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 4, (int64_t[]){1, 1, 4, 4});
  int y = tu_graph_value(g, "y");
  int n = tu_graph_node(g, KL_OP_MaxPool, "pool", 1, &x, 1, &y);

  const int64_t ks[2] = {2, 2};
  const float fl[3] = {0.5f, -1.0f, 2.25f};
  const char *const strs[2] = {"alpha", "beta"};
  assert_int_equal(kl_node_set_int(g, n, "axis", -1, &e), KILN_OK);
  assert_int_equal(kl_node_set_float(g, n, "eps", 1e-5f, &e), KILN_OK);
  assert_int_equal(kl_node_set_string(g, n, "auto_pad", "VALID", &e), KILN_OK);
  assert_int_equal(kl_node_set_ints(g, n, "kernel_shape", ks, 2, &e), KILN_OK);
  assert_int_equal(kl_node_set_floats(g, n, "scales", fl, 3, &e), KILN_OK);
  assert_int_equal(kl_node_set_strings(g, n, "names", strs, 2, &e), KILN_OK);
  assert_int_equal(kl_node_set_ints(g, n, "empty", NULL, 0, &e), KILN_OK);
  kl_tensor *t = calloc(1, sizeof *t);
  assert_non_null(t);
  t->dtype = KL_I32;
  t->rank = 1;
  t->dims[0] = 2;
  t->data = malloc(8);
  assert_non_null(t->data);
  ((int32_t *)t->data)[0] = 7;
  ((int32_t *)t->data)[1] = -7;
  assert_int_equal(kl_node_set_tensor(g, n, "value", t, &e), KILN_OK);
  kl_attr taken = {.name = strdup("graph_free"), .kind = KL_ATTR_INT, .i = 42};
  assert_non_null(taken.name);
  assert_int_equal(kl_node_take_attr(g, n, &taken, &e), KILN_OK);

  const kl_node *node = &g->nodes[n];
  assert_int_equal(node->n_attrs, 9);
  assert_int_equal(kl_attr_int(node, "axis", 5), -1);
  assert_int_equal(kl_attr_int(node, "graph_free", 0), 42);
  assert_true(kl_attr_float(node, "eps", 0) == 1e-5f);
  assert_string_equal(kl_attr_string(node, "auto_pad", "NOTSET"), "VALID");
  /* the setters copied their arguments: the caller's strings are not referenced */
  assert_ptr_not_equal(kl_attr_string(node, "auto_pad", NULL), "VALID");
  const int64_t *iv;
  assert_int_equal(kl_attr_ints(node, "kernel_shape", &iv), 2);
  assert_ptr_not_equal(iv, ks);
  assert_int_equal(iv[0], 2);
  assert_int_equal(iv[1], 2);
  assert_int_equal(kl_attr_ints(node, "empty", &iv), 0);
  const float *fv;
  assert_int_equal(kl_attr_floats(node, "scales", &fv), 3);
  assert_true(fv[2] == 2.25f);
  const kl_attr *sa = kl_node_attr(node, "names");
  assert_non_null(sa);
  assert_int_equal(sa->kind, KL_ATTR_STRINGS);
  assert_int_equal(sa->n, 2);
  assert_string_equal(sa->strings[1], "beta");
  const kl_attr *ta = kl_node_attr(node, "value");
  assert_non_null(ta);
  assert_int_equal(ta->kind, KL_ATTR_TENSOR);
  assert_ptr_equal(ta->t, t);
  assert_int_equal(((int32_t *)ta->t->data)[1], -7);

  /* defaults: absent, or present with another kind */
  assert_int_equal(kl_attr_int(node, "missing", 17), 17);
  assert_int_equal(kl_attr_int(node, "eps", 17), 17);
  assert_true(kl_attr_float(node, "missing", 0.25f) == 0.25f);
  assert_true(kl_attr_float(node, "axis", 0.25f) == -1.0f); /* an int reads as a float */
  assert_true(kl_attr_float(node, "auto_pad", 0.25f) == 0.25f);
  assert_string_equal(kl_attr_string(node, "axis", "dflt"), "dflt");
  assert_null(kl_attr_string(node, "missing", NULL));
  assert_int_equal(kl_attr_ints(node, "missing", &iv), -1);
  assert_int_equal(kl_attr_ints(node, "scales", &iv), -1);
  assert_int_equal(kl_attr_floats(node, "kernel_shape", &fv), -1);
  assert_null(kl_node_attr(node, "missing"));

  /* a second set of the same name replaces, whatever the kinds */
  assert_int_equal(kl_node_set_int(g, n, "axis", 3, &e), KILN_OK);
  assert_int_equal(kl_node_set_ints(g, n, "auto_pad", ks, 1, &e), KILN_OK);
  assert_int_equal(kl_node_set_string(g, n, "value", "now a string", &e), KILN_OK);
  assert_int_equal(kl_node_set_float(g, n, "names", 3.5f, &e), KILN_OK);
  assert_int_equal(kl_node_set_strings(g, n, "kernel_shape", strs, 1, &e), KILN_OK);
  node = &g->nodes[n];
  assert_int_equal(node->n_attrs, 9);
  assert_int_equal(kl_attr_int(node, "axis", 0), 3);
  assert_null(kl_attr_string(node, "auto_pad", NULL));
  assert_int_equal(kl_attr_ints(node, "auto_pad", &iv), 1);
  assert_string_equal(kl_attr_string(node, "value", NULL), "now a string");
  assert_true(kl_attr_float(node, "names", 0) == 3.5f);
  assert_int_equal(kl_node_attr(node, "kernel_shape")->kind, KL_ATTR_STRINGS);
  assert_int_equal(e.code, KILN_OK);

  kl_attr cleared = {.name = strdup("x"), .kind = KL_ATTR_STRING, .s = strdup("y")};
  kl_attr_clear(&cleared);
  assert_null(cleared.name);
  assert_null(cleared.s);
  kl_graph_free(g);
}

static void test_symbols_and_types(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int batch = kl_graph_symbol(g, "batch");
  int seq = kl_graph_symbol(g, "seq");
  assert_int_equal(batch, 0);
  assert_int_equal(seq, 1);
  assert_int_equal(kl_graph_symbol(g, "batch"), batch);
  assert_int_equal(g->n_symbols, 2);
  assert_string_equal(g->symbols[seq], "seq");

  kl_type t = {.dtype = KL_F32};
  kl_type_set_shape(&t, 3, (int64_t[]){2, 3, 4});
  int64_t numel = 0;
  assert_true(kl_type_is_concrete(&t));
  assert_true(kl_type_numel(&t, &numel));
  assert_int_equal(numel, 24);
  t.dims[1] = (kl_dim){-1, batch};
  assert_false(kl_type_is_concrete(&t));
  assert_false(kl_type_numel(&t, &numel));
  kl_type_set_shape(&t, 3, (int64_t[]){INT64_C(1) << 40, INT64_C(1) << 30, 2});
  assert_false(kl_type_numel(&t, &numel)); /* overflows int64 */
  kl_type_set_shape(&t, 0, NULL);
  assert_true(kl_type_numel(&t, &numel));
  assert_int_equal(numel, 1);
  t.rank = -1;
  assert_false(kl_type_is_concrete(&t));
  kl_type_set_shape(&t, 1, (int64_t[]){5});
  t.dtype = KL_UNDEFINED;
  assert_false(kl_type_is_concrete(&t));

  assert_true(kl_dim_equal((kl_dim){4, -1}, (kl_dim){4, -1}));
  assert_false(kl_dim_equal((kl_dim){4, -1}, (kl_dim){5, -1}));
  assert_true(kl_dim_equal((kl_dim){-1, batch}, (kl_dim){-1, batch}));
  assert_false(kl_dim_equal((kl_dim){-1, batch}, (kl_dim){-1, seq}));
  assert_false(kl_dim_equal((kl_dim){-1, -1}, (kl_dim){-1, -1})); /* two unknowns */
  assert_false(kl_dim_equal((kl_dim){-1, batch}, (kl_dim){4, -1}));

  /* same dims: known and equal, or one symbol; not two unknowns, not another rank */
  kl_type p = {.dtype = KL_F32}, q = {.dtype = KL_F32};
  kl_type_set_shape(&p, 3, (int64_t[]){1, 3, 4});
  kl_type_set_shape(&q, 3, (int64_t[]){1, 3, 4});
  assert_true(kl_type_same_dims(&p, &q));
  p.dims[0] = q.dims[0] = (kl_dim){-1, batch};
  assert_true(kl_type_same_dims(&p, &q));
  q.dims[0] = (kl_dim){-1, seq};
  assert_false(kl_type_same_dims(&p, &q));
  p.dims[0] = q.dims[0] = (kl_dim){-1, -1};
  assert_false(kl_type_same_dims(&p, &q));
  kl_type_set_shape(&q, 2, (int64_t[]){3, 4});
  assert_false(kl_type_same_dims(&p, &q));
  assert_false(kl_type_same_dims(&p, NULL));

  kl_tensor x = {.dtype = KL_F16, .rank = 2, .dims = {3, 5}};
  assert_int_equal(kl_tensor_numel(&x), 15);
  assert_int_equal(kl_tensor_nbytes(&x), 30);
  x.rank = 0;
  assert_int_equal(kl_tensor_numel(&x), 1);

  char buf[128];
  kl_type f = {.dtype = KL_F32, .rank = 3};
  f.dims[0] = (kl_dim){-1, batch};
  f.dims[1] = (kl_dim){-1, -1};
  f.dims[2] = (kl_dim){8, -1};
  kl_type_format(g, &f, buf, sizeof buf);
  assert_string_equal(buf, "float32[batch,?,8]");
  f.rank = -1;
  f.dtype = KL_I64;
  kl_type_format(g, &f, buf, sizeof buf);
  assert_string_equal(buf, "int64[?]");
  f.rank = 0;
  kl_type_format(g, &f, buf, sizeof buf);
  assert_string_equal(buf, "int64[]");
  kl_type_format(g, &f, buf, 4); /* cut, but terminated */
  assert_string_equal(buf, "int");
  kl_graph_free(g);
}

/* ---- verifier ---- */

static void test_verify_accepts(void **state) {
  (void)state;
  kl_graph *g = small_graph();
  kl_err e = {0};
  assert_int_equal(kl_graph_verify(g, &e), KILN_OK);
  assert_int_equal(e.code, KILN_OK);
  assert_string_equal(e.msg, "");

  /* optional inputs absent in the middle and at the end are fine */
  int x = g->inputs[0];
  int c = tu_graph_value(g, "clipped");
  int in[3] = {x, KL_ABSENT, kl_graph_find_value(g, "w")};
  assert_true(kl_graph_add_node(g, KL_OP_Clip, "clip", 3, in, 1, &c, &e) >= 0);
  assert_int_equal(kl_graph_verify(g, &e), KILN_OK);
  /* a graph output may be a graph input or a constant */
  assert_int_equal(kl_graph_add_output(g, x, &e), KILN_OK);
  assert_int_equal(kl_graph_add_output(g, kl_graph_find_value(g, "w"), &e), KILN_OK);
  assert_int_equal(kl_graph_verify(g, &e), KILN_OK);
  kl_graph_free(g);

  kl_graph *empty = tu_graph_new();
  assert_int_equal(kl_graph_verify(empty, &e), KILN_OK);
  kl_graph_free(empty);
}

static void test_verify_use_before_def(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){4});
  int a = tu_graph_value(g, "a"), b = tu_graph_value(g, "b");
  tu_graph_node(g, KL_OP_Relu, "second", 1, &a, 1, &b); /* reads a before it is made */
  tu_graph_node(g, KL_OP_Relu, "first", 1, &x, 1, &a);
  assert_int_equal(kl_graph_add_output(g, b, &e), KILN_OK);
  assert_int_equal(kl_graph_verify(g, &e), KILN_ERR_INVALID_MODEL);
  tu_assert_contains(e.msg, "node 'second' (Relu)");
  tu_assert_contains(e.msg, "'a'");
  tu_assert_contains(e.msg, "earlier node");

  /* and a value that no node produces at all */
  kl_err_clear(&e);
  kl_graph *h = tu_graph_new();
  int hx = tu_graph_input(h, "x", KL_F32, 1, (int64_t[]){4});
  int ghost = tu_graph_value(h, "ghost"), hy = tu_graph_value(h, "hy");
  tu_graph_node(h, KL_OP_Add, "add", 2, (int[]){hx, ghost}, 1, &hy);
  assert_int_equal(kl_graph_add_output(h, hy, &e), KILN_OK);
  assert_int_equal(kl_graph_verify(h, &e), KILN_ERR_INVALID_MODEL);
  tu_assert_contains(e.msg, "'ghost'");
  kl_graph_free(h);
  kl_graph_free(g);
}

static void test_verify_two_producers(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){4});
  int y = tu_graph_value(g, "y");
  tu_graph_node(g, KL_OP_Relu, "one", 1, &x, 1, &y);
  tu_graph_node(g, KL_OP_Tanh, "two", 1, &x, 1, &y);
  assert_int_equal(kl_graph_add_output(g, y, &e), KILN_OK);
  assert_int_equal(g->values[y].producer, 0);
  assert_int_equal(kl_graph_verify(g, &e), KILN_ERR_INVALID_MODEL);
  tu_assert_contains(e.msg, "node 'two' (Tanh)");
  tu_assert_contains(e.msg, "'y'");
  tu_assert_contains(e.msg, "one producer");
  kl_graph_free(g);

  /* a node writing over a graph input or a constant */
  const float one = 1;
  for (int which = 0; which < 2; which++) {
    kl_err_clear(&e);
    g = tu_graph_new();
    int gx = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){1});
    int k = tu_graph_const(g, "k", KL_F32, 1, (int64_t[]){1}, &one);
    tu_graph_node(g, KL_OP_Relu, "clobber", 1, which ? &k : &gx, 1, (int[]){which ? gx : k});
    assert_int_equal(kl_graph_verify(g, &e), KILN_ERR_INVALID_MODEL);
    tu_assert_contains(e.msg, which ? "'x'" : "'k'");
    tu_assert_contains(e.msg, "already defined");
    kl_graph_free(g);
  }
}

/* An attribute of another kind than kiln reads its name as is refused (it was read as
 * absent: Softmax's axis as a string silently became -1); a float given as an int, and
 * names kiln has no fixed kind for, are accepted. */
static void test_verify_attr_kinds(void **state) {
  (void)state;
  const float one = 1.0f;
  const int64_t ax = 1;
  for (int c = 0; c < 6; c++) {
    kl_graph *g = tu_graph_new();
    kl_err e = {0};
    int x = tu_graph_input(g, "x", KL_F32, 2, (int64_t[]){2, 3});
    int y = tu_graph_value(g, "y");
    int n = tu_graph_node(g, c < 4 ? KL_OP_Softmax : KL_OP_LeakyRelu, "sm", 1, &x, 1, &y);
    const char *want = NULL;
    if (c == 0) {
      assert_int_equal(kl_node_set_string(g, n, "axis", "1", &e), KILN_OK);
      want = "node 'sm' (Softmax): attribute 'axis' is a string, expected an int";
    } else if (c == 1) {
      assert_int_equal(kl_node_set_float(g, n, "axis", 1.0f, &e), KILN_OK);
      want = "attribute 'axis' is a float, expected an int";
    } else if (c == 2) {
      assert_int_equal(kl_node_set_ints(g, n, "axis", &ax, 1, &e), KILN_OK);
      want = "attribute 'axis' is a list of ints, expected an int";
    } else if (c == 3) {
      assert_int_equal(kl_node_set_floats(g, n, "my_own_name", &one, 1, &e), KILN_OK);
    } else if (c == 4) {
      assert_int_equal(kl_node_set_int(g, n, "alpha", 2, &e), KILN_OK); /* read as 2.0 */
    } else {
      assert_int_equal(kl_node_set_string(g, n, "alpha", "0.1", &e), KILN_OK);
      want = "(LeakyRelu): attribute 'alpha' is a string, expected a float";
    }
    if (want) {
      assert_int_equal(kl_graph_verify(g, &e), KILN_ERR_INVALID_MODEL);
      tu_assert_contains(e.msg, want);
    } else {
      assert_int_equal(kl_graph_verify(g, &e), KILN_OK);
    }
    kl_graph_free(g);
  }
}

/* The readers index (kl_graph_readers): made on demand, kept through kl_graph_set_input,
 * kl_graph_uses_node and kl_graph_add_node, forgotten by renumbering; a direct write of
 * a node's input shows in kl_graph_uses_check. */
static void test_readers_index(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){4});
  int a = tu_graph_value(g, "a"), b = tu_graph_value(g, "b"), c = tu_graph_value(g, "c");
  int n0 = tu_graph_node(g, KL_OP_Relu, "r", 1, &x, 1, &a);
  int n1 = tu_graph_node(g, KL_OP_Add, "add", 2, (int[]){a, a}, 1, &b);
  int count;
  const int *r = kl_graph_readers(g, a, &count);
  assert_non_null(r);
  assert_int_equal(count, 2); /* one per slot */
  assert_int_equal(r[0], n1);
  assert_int_equal(r[1], n1);
  r = kl_graph_readers(g, x, &count);
  assert_int_equal(count, 1);
  assert_int_equal(r[0], n0);
  /* a node added after the index was made is in it */
  int n2 = tu_graph_node(g, KL_OP_Add, "add2", 2, (int[]){x, b}, 1, &c);
  r = kl_graph_readers(g, x, &count);
  assert_int_equal(count, 2);
  assert_int_equal(r[0], n0);
  assert_int_equal(r[1], n2);
  /* a value made after the index: read by nobody, then by the node set to read it */
  int d = tu_graph_value(g, "d");
  kl_graph_readers(g, d, &count);
  assert_int_equal(count, 0);
  kl_graph_set_input(g, n1, 1, d);
  r = kl_graph_readers(g, a, &count);
  assert_int_equal(count, 1);
  r = kl_graph_readers(g, d, &count);
  assert_int_equal(count, 1);
  assert_int_equal(r[0], n1);
  assert_int_equal(kl_graph_uses_check(g, &e), KILN_OK);
  /* a whole input list changed around kl_graph_uses_node */
  kl_graph_uses_node(g, n2, false);
  g->nodes[n2].in[0] = a;
  kl_graph_uses_node(g, n2, true);
  assert_int_equal(kl_graph_uses_check(g, &e), KILN_OK);
  kl_graph_readers(g, a, &count);
  assert_int_equal(count, 2);
  /* a direct write behind the index is found */
  g->nodes[n2].in[1] = x;
  assert_int_equal(kl_graph_uses_check(g, &e), KILN_ERR_INTERNAL);
  tu_assert_contains(e.msg, "changed behind it");
  /* renumbering forgets it; the next query makes it from the graph */
  assert_int_equal(kl_graph_toposort(g, &e), KILN_OK);
  assert_int_equal(kl_graph_uses_check(g, &e), KILN_OK);
  r = kl_graph_readers(g, x, &count);
  assert_int_equal(count, 2);
  assert_int_equal(kl_graph_uses_check(g, &e), KILN_OK);
  kl_graph_free(g);
}

/* kl_node_work: the loop nests of the ops whose work multiplies dims, at least the
 * elements read and written for the others. */
static kl_tensor shape_t(int rank, const int64_t *dims) {
  kl_tensor t = {.dtype = KL_F32, .rank = rank};
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  return t;
}

static void test_node_work(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){4});
  int y = tu_graph_value(g, "y");
  /* MatMul [7, 5] x [5, 3]: 7 * 3 outputs of 5 steps */
  int mm = tu_graph_node(g, KL_OP_MatMul, "mm", 2, (int[]){x, x}, 1, &y);
  kl_tensor a = shape_t(2, (int64_t[]){7, 5}), b = shape_t(2, (int64_t[]){5, 3});
  kl_tensor o = shape_t(2, (int64_t[]){7, 3});
  const kl_tensor *in2[2] = {&a, &b}, *out1[1] = {&o};
  assert_true(kl_node_work(&g->nodes[mm], 2, in2, 1, out1) == 105.0);
  /* Gemm transA=1: A [5, 7] */
  int gm = tu_graph_node(g, KL_OP_Gemm, "gm", 2, (int[]){x, x}, 1, &y);
  assert_int_equal(kl_node_set_int(g, gm, "transA", 1, NULL), KILN_OK);
  a = shape_t(2, (int64_t[]){5, 7});
  assert_true(kl_node_work(&g->nodes[gm], 2, in2, 1, out1) == 105.0);
  /* Conv: [1, 4, 6, 6] outputs of W [4, 2, 3, 3]: 2 * 9 steps each */
  int cv = tu_graph_node(g, KL_OP_Conv, "cv", 2, (int[]){x, x}, 1, &y);
  a = shape_t(4, (int64_t[]){1, 2, 8, 8});
  b = shape_t(4, (int64_t[]){4, 2, 3, 3});
  o = shape_t(4, (int64_t[]){1, 4, 6, 6});
  assert_true(kl_node_work(&g->nodes[cv], 2, in2, 1, out1) == 144.0 * 18.0);
  /* Einsum "ij,jk->ik" over 3, 4, 5: every letter's loop */
  int es = tu_graph_node(g, KL_OP_Einsum, "es", 2, (int[]){x, x}, 1, &y);
  assert_int_equal(kl_node_set_string(g, es, "equation", "ij,jk->ik", NULL), KILN_OK);
  a = shape_t(2, (int64_t[]){3, 4});
  b = shape_t(2, (int64_t[]){4, 5});
  o = shape_t(2, (int64_t[]){3, 5});
  assert_true(kl_node_work(&g->nodes[es], 2, in2, 1, out1) == 60.0);
  /* RoiAlign sampling_ratio 4096 over [2, 3, 7, 7] outputs: 4 taps of 4096^2 samples */
  int ra = tu_graph_node(g, KL_OP_RoiAlign, "ra", 1, &x, 1, &y);
  assert_int_equal(kl_node_set_int(g, ra, "sampling_ratio", 4096, NULL), KILN_OK);
  a = shape_t(4, (int64_t[]){1, 3, 8, 8});
  o = shape_t(4, (int64_t[]){2, 3, 7, 7});
  const kl_tensor *in1[1] = {&a};
  assert_true(kl_node_work(&g->nodes[ra], 1, in1, 1, out1) == 294.0 * 4096.0 * 4096.0 * 4);
  /* an elementwise op: what it reads and writes, even for dims past int64 together */
  int re = tu_graph_node(g, KL_OP_Relu, "re", 1, &x, 1, &y);
  a = shape_t(3, (int64_t[]){INT64_C(1) << 40, INT64_C(1) << 40, 2});
  o = a;
  assert_true(kl_node_work(&g->nodes[re], 1, in1, 1, out1) == 0x1p82); /* 2^81 in, 2^81 out */
  kl_graph_free(g);
}

static void test_verify_arity(void **state) {
  (void)state;
  struct {
    kl_op op;
    int n_in, n_out;
    const char *want;
  } cases[] = {
      {KL_OP_Relu, 2, 1, "has 2 inputs; Relu takes 1 to 1"},
      {KL_OP_Add, 1, 1, "has 1 inputs; Add takes 2 to 2"},
      {KL_OP_Conv, 4, 1, "has 4 inputs; Conv takes 2 to 3"},
      {KL_OP_Relu, 1, 2, "has 2 outputs; Relu gives 1 to 1"},
      {KL_OP_Dropout, 1, 3, "has 3 outputs; Dropout gives 1 to 2"},
      {KL_OP_BatchNormalization, 4, 1, "has 4 inputs; BatchNormalization takes 5 to 5"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    kl_graph *g = tu_graph_new();
    kl_err e = {0};
    int x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){4});
    int in[8], out[8];
    for (int k = 0; k < cases[c].n_in; k++) in[k] = x;
    for (int k = 0; k < cases[c].n_out; k++) {
      char name[16];
      snprintf(name, sizeof name, "o%d", k);
      out[k] = tu_graph_value(g, name);
    }
    assert_true(kl_graph_add_node(g, cases[c].op, "n", cases[c].n_in, in, cases[c].n_out,
                                  out, &e) >= 0);
    assert_int_equal(kl_graph_verify(g, &e), KILN_ERR_INVALID_MODEL);
    tu_assert_contains(e.msg, cases[c].want);
    tu_assert_contains(e.msg, "node 'n'");
    kl_graph_free(g);
  }

  /* an absent required input: given inputs are counted up to the last present one */
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){4});
  int y = tu_graph_value(g, "y");
  tu_graph_node(g, KL_OP_Add, "half", 2, (int[]){x, KL_ABSENT}, 1, &y);
  assert_int_equal(kl_graph_verify(g, &e), KILN_ERR_INVALID_MODEL);
  tu_assert_contains(e.msg, "has 1 inputs; Add takes 2 to 2");
  kl_graph_free(g);

  /* ids out of range are a bug in whoever built the graph */
  g = tu_graph_new();
  kl_err_clear(&e);
  x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){4});
  y = tu_graph_value(g, "y");
  tu_graph_node(g, KL_OP_Add, "wild", 2, (int[]){x, 99}, 1, &y);
  assert_int_equal(kl_graph_verify(g, &e), KILN_ERR_INTERNAL);
  tu_assert_contains(e.msg, "99");
  kl_graph_free(g);
}

static void test_verify_outputs_and_constants(void **state) {
  (void)state;
  kl_graph *g = small_graph();
  kl_err e = {0};
  int never = tu_graph_value(g, "never");
  assert_int_equal(kl_graph_add_output(g, never, &e), KILN_OK);
  assert_int_equal(kl_graph_verify(g, &e), KILN_ERR_INVALID_MODEL);
  tu_assert_contains(e.msg, "graph output 'never' is never computed");
  kl_graph_free(g);

  g = small_graph();
  kl_err_clear(&e);
  g->values[kl_graph_find_value(g, "w")].nbytes = 8; /* 3 floats need 12 */
  assert_int_equal(kl_graph_verify(g, &e), KILN_ERR_INTERNAL);
  tu_assert_contains(e.msg, "constant 'w'");
  tu_assert_contains(e.msg, "8 bytes");
  g->values[kl_graph_find_value(g, "w")].nbytes = 12;
  kl_err_clear(&e);
  assert_int_equal(kl_graph_verify(g, &e), KILN_OK);
  /* a constant whose shape is not concrete cannot hold data */
  kl_value *w = &g->values[kl_graph_find_value(g, "w")];
  w->type.dims[0] = (kl_dim){-1, 0};
  assert_int_equal(kl_graph_verify(g, &e), KILN_ERR_INTERNAL);
  tu_assert_contains(e.msg, "constant 'w'");
  w->type.dims[0] = (kl_dim){3, -1};
  kl_err_clear(&e);
  /* a graph input list naming a value that is not an input */
  g->inputs[0] = kl_graph_find_value(g, "h");
  assert_int_equal(kl_graph_verify(g, &e), KILN_ERR_INTERNAL);
  tu_assert_contains(e.msg, "graph input 0");
  kl_graph_free(g);
}

/* ---- toposort ---- */

static void test_toposort_reorders(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){4});
  int a = tu_graph_value(g, "a"), b = tu_graph_value(g, "b"), c = tu_graph_value(g, "c");
  int d = tu_graph_value(g, "d");
  /* file order: d = Add(c, a); c = Relu(b); b = Tanh(a); a = Relu(x) */
  tu_graph_node(g, KL_OP_Add, "n_d", 2, (int[]){c, a}, 1, &d);
  tu_graph_node(g, KL_OP_Relu, "n_c", 1, &b, 1, &c);
  tu_graph_node(g, KL_OP_Tanh, "n_b", 1, &a, 1, &b);
  tu_graph_node(g, KL_OP_Relu, "n_a", 1, &x, 1, &a);
  assert_int_equal(kl_graph_add_output(g, d, &e), KILN_OK);
  assert_int_equal(kl_graph_verify(g, &e), KILN_ERR_INVALID_MODEL);
  kl_err_clear(&e);

  assert_int_equal(kl_graph_toposort(g, &e), KILN_OK);
  const char *want[4] = {"n_a", "n_b", "n_c", "n_d"};
  for (int i = 0; i < 4; i++) assert_string_equal(g->nodes[i].name, want[i]);
  assert_int_equal(g->values[a].producer, 0);
  assert_int_equal(g->values[b].producer, 1);
  assert_int_equal(g->values[c].producer, 2);
  assert_int_equal(g->values[d].producer, 3);
  assert_int_equal(g->values[x].producer, -1);
  assert_int_equal(kl_graph_verify(g, &e), KILN_OK);

  /* a sorted graph keeps its order (so dumps follow the source model) */
  assert_int_equal(kl_graph_toposort(g, &e), KILN_OK);
  for (int i = 0; i < 4; i++) assert_string_equal(g->nodes[i].name, want[i]);
  kl_graph_free(g);

  /* independent nodes keep their relative order */
  g = small_graph();
  int gx = g->inputs[0];
  int p = tu_graph_value(g, "p"), q = tu_graph_value(g, "q");
  tu_graph_node(g, KL_OP_Sigmoid, "sig", 1, &gx, 1, &p);
  tu_graph_node(g, KL_OP_Tanh, "tanh", 1, &gx, 1, &q);
  assert_int_equal(kl_graph_toposort(g, &e), KILN_OK);
  const char *order[4] = {"relu", "add", "sig", "tanh"};
  for (int i = 0; i < 4; i++) assert_string_equal(g->nodes[i].name, order[i]);

  kl_graph *empty = tu_graph_new();
  assert_int_equal(kl_graph_toposort(empty, &e), KILN_OK);
  kl_graph_free(empty);
  kl_graph_free(g);
}

static void test_toposort_cycle(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  int x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){4});
  int a = tu_graph_value(g, "a"), b = tu_graph_value(g, "b"), d = tu_graph_value(g, "d");
  /* a node downstream of the cycle comes first in the file: the message must still
   * name one of the nodes on the cycle (loop_add, loop_relu) */
  tu_graph_node(g, KL_OP_Relu, "downstream", 1, &b, 1, &d);
  tu_graph_node(g, KL_OP_Add, "loop_add", 2, (int[]){x, b}, 1, &a);
  tu_graph_node(g, KL_OP_Relu, "loop_relu", 1, &a, 1, &b);
  assert_int_equal(kl_graph_add_output(g, d, &e), KILN_OK);
  assert_int_equal(kl_graph_toposort(g, &e), KILN_ERR_INVALID_MODEL);
  tu_assert_contains(e.msg, "cycle");
  if (!strstr(e.msg, "'loop_add'") && !strstr(e.msg, "'loop_relu'"))
    fail_msg("the message names no node on the cycle: %s", e.msg);
  /* the failed sort leaves the graph as it was */
  assert_string_equal(g->nodes[0].name, "downstream");
  assert_string_equal(g->nodes[2].name, "loop_relu");
  kl_graph_free(g);

  /* a node that reads its own output */
  g = tu_graph_new();
  kl_err_clear(&e);
  x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){4});
  int s = tu_graph_value(g, "s");
  tu_graph_node(g, KL_OP_Add, "self", 2, (int[]){x, s}, 1, &s);
  assert_int_equal(kl_graph_toposort(g, &e), KILN_ERR_INVALID_MODEL);
  tu_assert_contains(e.msg, "node 'self' (Add)");
  kl_graph_free(g);
}

/* ---- compaction ---- */

static void test_compact(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  const float k[2] = {1, 2};
  int unused_in = tu_graph_input(g, "unused_in", KL_F32, 1, (int64_t[]){2});
  int dead_k = tu_graph_const(g, "dead_k", KL_F32, 1, (int64_t[]){2}, k);
  int x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){2});
  int live_k = tu_graph_const(g, "live_k", KL_F32, 1, (int64_t[]){2}, k);
  int dead1 = tu_graph_value(g, "dead1"), dead2 = tu_graph_value(g, "dead2");
  int h = tu_graph_value(g, "h"), y = tu_graph_value(g, "y");
  int orphan = tu_graph_value(g, "orphan");
  (void)orphan;
  tu_graph_node(g, KL_OP_Add, "dead_add", 2, (int[]){x, dead_k}, 1, &dead1);
  tu_graph_node(g, KL_OP_Relu, "live_relu", 1, &x, 1, &h);
  tu_graph_node(g, KL_OP_Tanh, "dead_tanh", 1, &dead1, 1, &dead2);
  tu_graph_node(g, KL_OP_Mul, "live_mul", 2, (int[]){h, live_k}, 1, &y);
  assert_int_equal(kl_graph_add_output(g, y, &e), KILN_OK);
  assert_int_equal(g->n_values, 9);
  (void)unused_in;

  assert_int_equal(kl_graph_compact(g, &e), KILN_OK);
  assert_int_equal(g->n_nodes, 2);
  assert_string_equal(g->nodes[0].name, "live_relu");
  assert_string_equal(g->nodes[1].name, "live_mul");
  /* kept: unused_in (graph inputs are the API), x, live_k, h, y */
  assert_int_equal(g->n_values, 5);
  const char *gone[4] = {"dead_k", "dead1", "dead2", "orphan"};
  for (int i = 0; i < 4; i++) assert_int_equal(kl_graph_find_value(g, gone[i]), -1);
  const char *kept[5] = {"unused_in", "x", "live_k", "h", "y"};
  for (int i = 0; i < 5; i++) {
    int v = kl_graph_find_value(g, kept[i]);
    assert_true(v >= 0 && v < g->n_values);
    assert_string_equal(g->values[v].name, kept[i]);
  }
  /* ids renumbered consistently in nodes, inputs, outputs and producers */
  const kl_node *mul = &g->nodes[1];
  assert_string_equal(g->values[mul->in[0]].name, "h");
  assert_string_equal(g->values[mul->in[1]].name, "live_k");
  assert_string_equal(g->values[mul->out[0]].name, "y");
  assert_string_equal(g->values[g->nodes[0].in[0]].name, "x");
  assert_int_equal(g->n_inputs, 2);
  assert_string_equal(g->values[g->inputs[0]].name, "unused_in");
  assert_string_equal(g->values[g->inputs[1]].name, "x");
  assert_string_equal(g->values[g->outputs[0]].name, "y");
  assert_int_equal(g->values[kl_graph_find_value(g, "h")].producer, 0);
  assert_int_equal(g->values[kl_graph_find_value(g, "y")].producer, 1);
  assert_int_equal(g->values[kl_graph_find_value(g, "x")].producer, -1);
  const kl_value *lk = &g->values[kl_graph_find_value(g, "live_k")];
  assert_int_equal(lk->kind, KL_VALUE_CONST);
  assert_memory_equal(lk->data, k, sizeof k);
  assert_int_equal(kl_graph_verify(g, &e), KILN_OK);

  /* names freed with the dead values can be used again */
  assert_true(kl_graph_add_value(g, "dead1", &e) >= 0);
  /* compacting a compact graph changes nothing */
  int nv = g->n_values, nn = g->n_nodes;
  assert_int_equal(kl_graph_compact(g, &e), KILN_OK);
  assert_int_equal(g->n_values, nv - 1);
  assert_int_equal(g->n_nodes, nn);
  kl_graph_free(g);
}

/* ---- copying ---- */

/* small_graph with a borrowed constant, an unnamed value, attributes of every kind on
 * 'add' (whose source op name is another), an opset and a source. */
static kl_graph *copy_source_graph(void) {
  static const float borrowed[2] = {5, 6};
  kl_graph *g = small_graph();
  kl_err e = {0};
  assert_true(kl_graph_add_const(g, "b", KL_F32, 1, (int64_t[]){2}, (void *)borrowed,
                                 sizeof borrowed, true, &e) >= 0);
  tu_graph_value(g, NULL);
  int n = 1; /* 'add' */
  const char *const strs[2] = {"alpha", "beta"};
  assert_int_equal(kl_node_set_int(g, n, "axis", -1, &e), KILN_OK);
  assert_int_equal(kl_node_set_float(g, n, "eps", 1e-5f, &e), KILN_OK);
  assert_int_equal(kl_node_set_string(g, n, "auto_pad", "VALID", &e), KILN_OK);
  assert_int_equal(kl_node_set_ints(g, n, "kernel_shape", (int64_t[]){2, 3}, 2, &e), KILN_OK);
  assert_int_equal(kl_node_set_ints(g, n, "empty", NULL, 0, &e), KILN_OK);
  assert_int_equal(kl_node_set_floats(g, n, "scales", (float[]){0.5f, 2}, 2, &e), KILN_OK);
  assert_int_equal(kl_node_set_strings(g, n, "names", strs, 2, &e), KILN_OK);
  kl_tensor *t = calloc(1, sizeof *t);
  assert_non_null(t);
  *t = (kl_tensor){.dtype = KL_I32, .rank = 1, .dims = {2}, .data = malloc(8)};
  assert_non_null(t->data);
  memcpy(t->data, (int32_t[]){7, -7}, 8);
  assert_int_equal(kl_node_set_tensor(g, n, "value", t, &e), KILN_OK);
  free(g->nodes[n].src);
  g->nodes[n].src = strdup("aten::add");
  assert_non_null(g->nodes[n].src);
  g->opset = 17;
  assert_int_equal(kl_graph_set_source(g, "model.onnx", &e), KILN_OK);
  return g;
}

/* Everything of c's is g's, in copies of its own (but the borrowed data). */
static void expect_same_graph(const kl_graph *c, const kl_graph *g) {
  assert_int_equal(c->n_values, g->n_values);
  for (int v = 0; v < g->n_values; v++) {
    const kl_value *a = &c->values[v], *b = &g->values[v];
    assert_string_equal(a->name, b->name);
    assert_ptr_not_equal(a->name, b->name);
    assert_int_equal(kl_graph_find_value(c, b->name), v);
    assert_memory_equal(&a->type, &b->type, sizeof a->type);
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(a->producer, b->producer);
    assert_int_equal(a->nbytes, b->nbytes);
    assert_int_equal(a->borrowed, b->borrowed);
    if (b->borrowed || !b->data) {
      assert_ptr_equal(a->data, b->data);
    } else {
      assert_ptr_not_equal(a->data, b->data);
      assert_memory_equal(a->data, b->data, b->nbytes);
    }
  }
  assert_int_equal(c->n_nodes, g->n_nodes);
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *a = &c->nodes[i], *b = &g->nodes[i];
    assert_int_equal(a->op, b->op);
    assert_string_equal(a->name, b->name);
    assert_string_equal(a->src, b->src);
    assert_int_equal(a->n_in, b->n_in);
    assert_int_equal(a->n_out, b->n_out);
    assert_memory_equal(a->in, b->in, sizeof(int) * (size_t)b->n_in);
    assert_memory_equal(a->out, b->out, sizeof(int) * (size_t)b->n_out);
    assert_int_equal(a->n_attrs, b->n_attrs);
    for (int k = 0; k < b->n_attrs; k++) {
      assert_string_equal(a->attrs[k].name, b->attrs[k].name);
      assert_int_equal(a->attrs[k].kind, b->attrs[k].kind);
    }
  }
  assert_int_equal(c->n_inputs, g->n_inputs);
  assert_memory_equal(c->inputs, g->inputs, sizeof(int) * (size_t)g->n_inputs);
  assert_int_equal(c->n_outputs, g->n_outputs);
  assert_memory_equal(c->outputs, g->outputs, sizeof(int) * (size_t)g->n_outputs);
  assert_int_equal(c->n_symbols, g->n_symbols);
  for (int i = 0; i < g->n_symbols; i++) assert_string_equal(c->symbols[i], g->symbols[i]);
  assert_int_equal(c->opset, g->opset);
  assert_string_equal(c->source, g->source);
}

/* A deep copy is the same graph and shares nothing it owns with the original, which is
 * changed and freed under it; it is then built on as the original would be. */
static void test_copy(void **state) {
  (void)state;
  kl_err e = {0};
  kl_graph *g = copy_source_graph();
  kl_graph *c = kl_graph_copy(g);
  assert_non_null(c);
  expect_same_graph(c, g);

  /* the original changed, then gone: the copy keeps what it had */
  kl_node *add = &g->nodes[1];
  ((float *)g->values[kl_graph_find_value(g, "w")].data)[0] = 100;
  for (int k = 0; k < add->n_attrs; k++) {
    kl_attr *a = &add->attrs[k];
    if (a->s) a->s[0] = 'X';
    if (a->ints) a->ints[0] = 99;
    if (a->floats) a->floats[0] = 99;
    if (a->strings) a->strings[0][0] = 'X';
    if (a->t) ((int32_t *)a->t->data)[0] = 99;
  }
  kl_graph_free(g);
  const kl_node *n = &c->nodes[1];
  assert_memory_equal(c->values[kl_graph_find_value(c, "w")].data, ((float[]){1, 2, 3}),
                      3 * sizeof(float));
  assert_int_equal(kl_attr_int(n, "axis", 0), -1);
  assert_true(kl_attr_float(n, "eps", 0) == 1e-5f);
  assert_string_equal(kl_attr_string(n, "auto_pad", NULL), "VALID");
  const int64_t *iv;
  assert_int_equal(kl_attr_ints(n, "kernel_shape", &iv), 2);
  assert_int_equal(iv[0], 2);
  assert_int_equal(iv[1], 3);
  assert_int_equal(kl_attr_ints(n, "empty", &iv), 0);
  const float *fv;
  assert_int_equal(kl_attr_floats(n, "scales", &fv), 2);
  assert_true(fv[0] == 0.5f && fv[1] == 2);
  const kl_attr *names = kl_node_attr(n, "names");
  assert_int_equal(names->n, 2);
  assert_string_equal(names->strings[0], "alpha");
  assert_string_equal(names->strings[1], "beta");
  const kl_attr *value = kl_node_attr(n, "value");
  assert_int_equal(value->t->dtype, KL_I32);
  assert_int_equal(value->t->dims[0], 2);
  assert_memory_equal(value->t->data, ((int32_t[]){7, -7}), 8);
  assert_int_equal(kl_graph_verify(c, &e), KILN_OK);

  /* built on: names, fresh names, the readers of a value */
  assert_int_equal(kl_graph_add_value(c, "h", &e), -1);
  tu_assert_contains(e.msg, "defined twice");
  int v = tu_graph_value(c, NULL);
  assert_string_equal(c->values[v].name, "_v6");
  int count;
  const int *readers = kl_graph_readers(c, kl_graph_find_value(c, "h"), &count);
  assert_int_equal(count, 1);
  assert_int_equal(readers[0], 1);
  kl_graph_free(c);
}

/* ---- inference: declared vs inferred types ---- */

/* x: float32[batch,3] -> Relu -> y, y declared as `decl`. */
static kl_graph *relu_graph(const kl_type *decl) {
  kl_graph *g = tu_graph_new();
  kl_err e = {0};
  int batch = kl_graph_symbol(g, "batch");
  int x = tu_graph_input(g, "x", KL_F32, 2, (int64_t[]){-1, 3});
  g->values[x].type.dims[0].sym = batch;
  int y = tu_graph_value(g, "y");
  g->values[y].type = *decl;
  tu_graph_node(g, KL_OP_Relu, "r", 1, &x, 1, &y);
  assert_int_equal(kl_graph_add_output(g, y, &e), KILN_OK);
  return g;
}

static void test_infer_merge(void **state) {
  (void)state;
  kl_err e = {0};
  char buf[128];

  /* nothing declared: the inferred type, symbol included */
  kl_type none = {.dtype = KL_UNDEFINED, .rank = -1};
  kl_graph *g = relu_graph(&none);
  assert_int_equal(kl_graph_infer(g, &e), KILN_OK);
  kl_type_format(g, &g->values[kl_graph_find_value(g, "y")].type, buf, sizeof buf);
  assert_string_equal(buf, "float32[batch,3]");
  kl_graph_free(g);

  /* declared with an anonymous dim: the inferred symbol fills it */
  kl_type anon = {.dtype = KL_F32, .rank = 2, .dims = {{-1, -1}, {3, -1}}};
  g = relu_graph(&anon);
  assert_int_equal(kl_graph_infer(g, &e), KILN_OK);
  kl_type_format(g, &g->values[kl_graph_find_value(g, "y")].type, buf, sizeof buf);
  assert_string_equal(buf, "float32[batch,3]");
  kl_graph_free(g);

  /* declared with a known size where inference only has a symbol: the size is kept */
  kl_type fixed = {.dtype = KL_F32, .rank = 2, .dims = {{5, -1}, {3, -1}}};
  g = relu_graph(&fixed);
  assert_int_equal(kl_graph_infer(g, &e), KILN_OK);
  kl_type_format(g, &g->values[kl_graph_find_value(g, "y")].type, buf, sizeof buf);
  assert_string_equal(buf, "float32[5,3]");
  kl_graph_free(g);

  /* a known contradiction in a dim, in the rank, in the dtype */
  kl_type bad_dim = {.dtype = KL_F32, .rank = 2, .dims = {{-1, -1}, {4, -1}}};
  g = relu_graph(&bad_dim);
  assert_int_equal(kl_graph_infer(g, &e), KILN_ERR_SHAPE);
  tu_assert_contains(e.msg, "node 'r' (Relu)");
  tu_assert_contains(e.msg,
                     "value 'y' is declared float32[?,4] but computed as float32[batch,3]");
  kl_graph_free(g);

  kl_err_clear(&e);
  kl_type bad_rank = {.dtype = KL_F32, .rank = 3, .dims = {{-1, -1}, {3, -1}, {1, -1}}};
  g = relu_graph(&bad_rank);
  assert_int_equal(kl_graph_infer(g, &e), KILN_ERR_SHAPE);
  tu_assert_contains(e.msg, "declared float32[?,3,1]");
  kl_graph_free(g);

  kl_err_clear(&e);
  kl_type bad_dtype = {.dtype = KL_I64, .rank = -1};
  g = relu_graph(&bad_dtype);
  assert_int_equal(kl_graph_infer(g, &e), KILN_ERR_DTYPE);
  tu_assert_contains(e.msg, "node 'r' (Relu)");
  tu_assert_contains(e.msg, "value 'y' is declared int64 but computed as float32");
  kl_graph_free(g);

  /* inference that knows nothing keeps the declaration */
  kl_err_clear(&e);
  g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, -1, NULL);
  int y = tu_graph_value(g, "y");
  kl_type_set_shape(&g->values[y].type, 2, (int64_t[]){7, 2});
  tu_graph_node(g, KL_OP_Relu, "r", 1, &x, 1, &y);
  assert_int_equal(kl_graph_infer(g, &e), KILN_OK);
  kl_type_format(g, &g->values[y].type, buf, sizeof buf);
  assert_string_equal(buf, "float32[7,2]");
  kl_graph_free(g);

  /* types flow through a chain, constants included */
  kl_err_clear(&e);
  g = small_graph();
  assert_int_equal(kl_graph_infer(g, &e), KILN_OK);
  kl_type_format(g, &g->values[kl_graph_find_value(g, "y")].type, buf, sizeof buf);
  assert_string_equal(buf, "float32[batch,3]");
  kl_graph_free(g);

  /* an op's own check fails: the message names the node */
  kl_err_clear(&e);
  g = tu_graph_new();
  x = tu_graph_input(g, "x", KL_F32, 1, (int64_t[]){3});
  int i64 = tu_graph_input(g, "i", KL_I64, 1, (int64_t[]){3});
  y = tu_graph_value(g, "y");
  tu_graph_node(g, KL_OP_Add, "mixed", 2, (int[]){x, i64}, 1, &y);
  assert_int_equal(kl_graph_infer(g, &e), KILN_ERR_DTYPE);
  tu_assert_contains(e.msg, "node 'mixed' (Add)");
  kl_graph_free(g);
}

/* ---- dtypes ---- */

static float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void test_dtype_tables(void **state) {
  (void)state;
  struct {
    kl_dtype t;
    size_t size;
    const char *name;
    bool is_float, is_int;
  } rows[] = {
      {KL_F32, 4, "float32", true, false},   {KL_U8, 1, "uint8", false, true},
      {KL_I8, 1, "int8", false, true},       {KL_U16, 2, "uint16", false, true},
      {KL_I16, 2, "int16", false, true},     {KL_I32, 4, "int32", false, true},
      {KL_I64, 8, "int64", false, true},     {KL_BOOL, 1, "bool", false, false},
      {KL_F16, 2, "float16", true, false},   {KL_F64, 8, "float64", true, false},
      {KL_U32, 4, "uint32", false, true},    {KL_U64, 8, "uint64", false, true},
      {KL_BF16, 2, "bfloat16", true, false},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    assert_int_equal(kl_dtype_size(rows[i].t), rows[i].size);
    assert_string_equal(kl_dtype_name(rows[i].t), rows[i].name);
    assert_int_equal(kl_dtype_is_float(rows[i].t), rows[i].is_float);
    assert_int_equal(kl_dtype_is_int(rows[i].t), rows[i].is_int);
    assert_true(kl_dtype_valid((int)rows[i].t));
  }
  assert_false(kl_dtype_valid(KL_UNDEFINED));
  assert_false(kl_dtype_valid(KL_STRING));
  assert_false(kl_dtype_valid(14)); /* complex64 */
  assert_false(kl_dtype_valid(-3));
  assert_false(kl_dtype_valid(1000));
  assert_int_equal(kl_dtype_size(KL_STRING), 0);
  assert_string_equal(kl_dtype_name(KL_STRING), "string");
  assert_string_equal(kl_dtype_name((kl_dtype)99), "unknown");
}

static void test_f16(void **state) {
  (void)state;
  struct {
    uint16_t h;
    float f;
  } exact[] = {
      {0x0000, 0.0f},         {0x3c00, 1.0f},         {0xc000, -2.0f},
      {0x3555, 0.333251953125f}, {0x7bff, 65504.0f},  {0x0400, 6.103515625e-05f},
      {0x0001, 5.9604644775390625e-08f},              {0x03ff, 6.097555160522461e-05f},
      {0x8001, -5.9604644775390625e-08f},             {0x3c01, 1.0009765625f},
  };
  for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
    assert_true(kl_f16_to_f32(exact[i].h) == exact[i].f);
    assert_int_equal(kl_f32_to_f16(exact[i].f), exact[i].h);
  }
  /* negative zero, infinities, NaN */
  assert_int_equal(kl_f32_to_f16(-0.0f), 0x8000);
  assert_true(signbit(kl_f16_to_f32(0x8000)));
  assert_true(isinf(kl_f16_to_f32(0x7c00)) && kl_f16_to_f32(0x7c00) > 0);
  assert_true(isinf(kl_f16_to_f32(0xfc00)) && kl_f16_to_f32(0xfc00) < 0);
  assert_int_equal(kl_f32_to_f16(INFINITY), 0x7c00);
  assert_int_equal(kl_f32_to_f16(-INFINITY), 0xfc00);
  assert_true(isnan(kl_f16_to_f32(0x7e00)));
  assert_true(isnan(kl_f16_to_f32(0x7c01)));
  uint16_t hn = kl_f32_to_f16(NAN);
  assert_int_equal(hn & 0x7c00, 0x7c00);
  assert_int_not_equal(hn & 0x03ff, 0);
  assert_true(isnan(kl_f16_to_f32(kl_f32_to_f16(-NAN))));

  /* rounding to nearest, ties to even */
  assert_int_equal(kl_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);      /* tie, down to even */
  assert_int_equal(kl_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  /* tie, up to even */
  assert_int_equal(kl_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01); /* above a tie */
  assert_int_equal(kl_f32_to_f16(65519.0f), 0x7bff);  /* below halfway to 65536 */
  assert_int_equal(kl_f32_to_f16(65520.0f), 0x7c00);  /* halfway: rounds to infinity */
  assert_int_equal(kl_f32_to_f16(1e10f), 0x7c00);
  assert_int_equal(kl_f32_to_f16(-1e10f), 0xfc00);
  /* subnormal results: ties to even there too, and underflow to (signed) zero */
  assert_int_equal(kl_f32_to_f16(0x1p-25f), 0x0000);        /* half the smallest: even 0 */
  assert_int_equal(kl_f32_to_f16(3 * 0x1p-25f), 0x0002);    /* 1.5 ulp: even 2 */
  assert_int_equal(kl_f32_to_f16(0x1p-25f + 0x1p-35f), 0x0001);
  assert_int_equal(kl_f32_to_f16(0x1p-30f), 0x0000);
  assert_int_equal(kl_f32_to_f16(-0x1p-30f), 0x8000);
  assert_int_equal(kl_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400); /* rounds up to normal */
  assert_int_equal(kl_f32_to_f16(f32_of_bits(1)), 0x0000);  /* f32 subnormal input */

  /* every half other than NaN survives the round trip bit for bit */
  for (uint32_t h = 0; h <= 0xffff; h++) {
    bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x03ff);
    float f = kl_f16_to_f32((uint16_t)h);
    if (nan) {
      assert_true(isnan(f));
      continue;
    }
    if (kl_f32_to_f16(f) != h) fail_msg("f16 0x%04x -> %a -> 0x%04x", h, (double)f, kl_f32_to_f16(f));
  }
}

static void test_bf16(void **state) {
  (void)state;
  assert_int_equal(kl_f32_to_bf16(1.0f), 0x3f80);
  assert_true(kl_bf16_to_f32(0x3f80) == 1.0f);
  assert_true(kl_bf16_to_f32(0xc040) == -3.0f);
  assert_int_equal(kl_f32_to_bf16(-0.0f), 0x8000);
  assert_int_equal(kl_f32_to_bf16(INFINITY), 0x7f80);
  assert_int_equal(kl_f32_to_bf16(-INFINITY), 0xff80);
  /* NaN stays NaN, including a NaN whose payload is only in the low bits that a plain
   * truncation or rounding would turn into infinity */
  uint16_t n1 = kl_f32_to_bf16(NAN);
  assert_true(isnan(kl_bf16_to_f32(n1)));
  uint16_t n2 = kl_f32_to_bf16(f32_of_bits(0x7f800001u));
  assert_true(isnan(kl_bf16_to_f32(n2)));
  uint16_t n3 = kl_f32_to_bf16(f32_of_bits(0xffffffffu));
  assert_true(isnan(kl_bf16_to_f32(n3)));
  /* ties to even */
  assert_int_equal(kl_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  assert_int_equal(kl_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  assert_int_equal(kl_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  /* the largest float rounds up to infinity; subnormals round like the rest */
  assert_int_equal(kl_f32_to_bf16(f32_of_bits(0x7f7fffffu)), 0x7f80);
  assert_int_equal(kl_f32_to_bf16(f32_of_bits(0x00000001u)), 0x0000);
  assert_int_equal(kl_f32_to_bf16(f32_of_bits(0x00018000u)), 0x0002);
  assert_true(kl_bf16_to_f32(0x0001) == 0x1p-133f);
  for (uint32_t h = 0; h <= 0xffff; h++) {
    bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x007f);
    float f = kl_bf16_to_f32((uint16_t)h);
    if (nan) {
      assert_true(isnan(f));
      assert_true(isnan(kl_bf16_to_f32(kl_f32_to_bf16(f))));
      continue;
    }
    if (kl_f32_to_bf16(f) != h) fail_msg("bf16 0x%04x -> %a -> 0x%04x", h, (double)f, kl_f32_to_bf16(f));
  }
}

static void test_load_store(void **state) {
  (void)state;
  const kl_dtype all[] = {KL_F32, KL_U8, KL_I8, KL_U16, KL_I16, KL_I32, KL_I64,
                          KL_BOOL, KL_F16, KL_F64, KL_U32, KL_U64, KL_BF16};
  unsigned char buf[8 * 4];
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
    kl_dtype t = all[k];
    memset(buf, 0xa5, sizeof buf);
    kl_store_f64(buf, t, 2, 3.0);
    kl_store_f64(buf, t, 1, 0.0);
    double want = t == KL_BOOL ? 1.0 : 3.0;
    assert_true(kl_load_f64(buf, t, 2) == want);
    assert_int_equal(kl_load_i64(buf, t, 2), (int64_t)want);
    assert_true(kl_load_f64(buf, t, 1) == 0.0);
  }
  int8_t i8[1];
  kl_store_f64(i8, KL_I8, 0, -5.0);
  assert_int_equal(kl_load_i64(i8, KL_I8, 0), -5);
  int64_t big[1] = {INT64_C(9007199254740993)}; /* 2^53 + 1: exact as int64 only */
  assert_int_equal(kl_load_i64(big, KL_I64, 0), INT64_C(9007199254740993));
  uint64_t u[1] = {UINT64_C(1) << 63};
  assert_true(kl_load_f64(u, KL_U64, 0) == 0x1p63);
  float f[4] = {NAN, 1e30f, -1e30f, -2.75f};
  assert_int_equal(kl_load_i64(f, KL_F32, 0), 0);
  assert_int_equal(kl_load_i64(f, KL_F32, 1), INT64_MAX);
  assert_int_equal(kl_load_i64(f, KL_F32, 2), INT64_MIN);
  assert_int_equal(kl_load_i64(f, KL_F32, 3), -2);
  uint16_t h[1];
  kl_store_f64(h, KL_F16, 0, 0.5);
  assert_int_equal(h[0], 0x3800);
  kl_store_f64(h, KL_BF16, 0, 0.5);
  assert_int_equal(h[0], 0x3f00);
  uint8_t b[1];
  kl_store_f64(b, KL_BOOL, 0, -0.25);
  assert_int_equal(b[0], 1);
}

/* ---- dump ---- */

static void test_dump(void **state) {
  (void)state;
  kl_graph *g = small_graph();
  kl_err e = {0};
  assert_int_equal(kl_graph_set_source(g, "tests/small.onnx", &e), KILN_OK);
  g->opset = 13;
  int add = 1;
  const int64_t ints[3] = {1, -2, 3};
  const float floats[2] = {0.5f, 2.0f};
  const char *const strs[2] = {"a", "b"};
  assert_int_equal(kl_node_set_int(g, add, "axis", -1, &e), KILN_OK);
  assert_int_equal(kl_node_set_float(g, add, "alpha", 0.25f, &e), KILN_OK);
  assert_int_equal(kl_node_set_string(g, add, "mode", "constant", &e), KILN_OK);
  assert_int_equal(kl_node_set_ints(g, add, "pads", ints, 3, &e), KILN_OK);
  assert_int_equal(kl_node_set_floats(g, add, "scales", floats, 2, &e), KILN_OK);
  assert_int_equal(kl_node_set_strings(g, add, "names", strs, 2, &e), KILN_OK);
  kl_tensor *t = calloc(1, sizeof *t);
  assert_non_null(t);
  t->dtype = KL_I64;
  t->data = calloc(1, 8);
  assert_non_null(t->data);
  assert_int_equal(kl_node_set_tensor(g, add, "value", t, &e), KILN_OK);
  free(g->nodes[add].src);
  g->nodes[add].src = strdup("aten::add");
  assert_non_null(g->nodes[add].src);
  assert_int_equal(kl_graph_infer(g, &e), KILN_OK);

  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  kl_graph_dump(g, f);
  assert_int_equal(fclose(f), 0);
  assert_non_null(text);
  const char *want[] = {
      "graph tests/small.onnx (opset 13): 2 nodes, 1 constants (0.0 KiB)\n",
      "inputs:\n  x: float32[batch,3]\n",
      "outputs:\n  y: float32[batch,3]\n",
      "nodes:\n  #0 Relu 'relu'\n    in:  x: float32[batch,3]\n    out: h: float32[batch,3]\n",
      "  #1 Add 'add' from aten::add\n",
      "    in:  h: float32[batch,3], const w: float32[3]\n",
      "    out: y: float32[batch,3]\n",
      ("    attrs: axis=-1, alpha=0.25, mode=\"constant\", pads=[1,-2,3], scales=[0.5,2], "
       "names=[\"a\",\"b\"], value=<tensor int64>\n"),
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) tu_assert_contains(text, want[i]);
  free(text);

  /* an absent input prints as "-"; an unknown type as "[?]" */
  int x = g->inputs[0];
  int c = tu_graph_value(g, "c");
  assert_true(kl_graph_add_node(g, KL_OP_Clip, "", 3, (int[]){x, KL_ABSENT,
                                kl_graph_find_value(g, "w")}, 1, &c, &e) >= 0);
  text = NULL;
  f = open_memstream(&text, &len);
  assert_non_null(f);
  kl_graph_dump(g, f);
  assert_int_equal(fclose(f), 0);
  tu_assert_contains(text, "  #2 Clip\n    in:  x: float32[batch,3], -, const w: float32[3]\n"
                           "    out: c: undefined[?]\n");
  tu_assert_contains(text, ": 3 nodes, 1 constants");
  free(text);
  kl_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_values),
      cmocka_unit_test(test_constants),
      cmocka_unit_test(test_nodes),
      cmocka_unit_test(test_attributes),
      cmocka_unit_test(test_symbols_and_types),
      cmocka_unit_test(test_verify_accepts),
      cmocka_unit_test(test_verify_use_before_def),
      cmocka_unit_test(test_verify_two_producers),
      cmocka_unit_test(test_verify_arity),
      cmocka_unit_test(test_verify_attr_kinds),
      cmocka_unit_test(test_readers_index),
      cmocka_unit_test(test_node_work),
      cmocka_unit_test(test_verify_outputs_and_constants),
      cmocka_unit_test(test_toposort_reorders),
      cmocka_unit_test(test_toposort_cycle),
      cmocka_unit_test(test_compact),
      cmocka_unit_test(test_copy),
      cmocka_unit_test(test_infer_merge),
      cmocka_unit_test(test_dtype_tables),
      cmocka_unit_test(test_f16),
      cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_load_store),
      cmocka_unit_test(test_dump),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
