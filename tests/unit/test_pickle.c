/* The bounded pickle reader: pickles are written opcode by opcode here, in the forms
 * torch.jit.save writes (module objects, storages, _rebuild_tensor_v2 and
 * _rebuild_parameter), and broken or hostile ones are refused with a clear error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "import/pickle.h"

#include <stdlib.h>
#include <string.h>

/* ---- writing pickles ---- */

typedef struct pk {
  uint8_t *d;
  size_t n, cap;
} pk;

static void put(pk *p, const void *b, size_t n) {
  if (!n) return;
  if (p->n + n > p->cap) {
    p->cap = (p->n + n) * 2 + 64;
    p->d = realloc(p->d, p->cap);
    assert_non_null(p->d);
  }
  memcpy(p->d + p->n, b, n);
  p->n += n;
}

static void op(pk *p, uint8_t c) { put(p, &c, 1); }

static void le(pk *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) op(p, (uint8_t)(v >> (8 * i)));
}

static void proto(pk *p) {
  op(p, 0x80);
  op(p, 2);
}

static void str(pk *p, const char *s) {
  op(p, 'X');
  le(p, strlen(s), 4);
  put(p, s, strlen(s));
}

static void global(pk *p, const char *mod, const char *name) {
  op(p, 'c');
  put(p, mod, strlen(mod));
  op(p, '\n');
  put(p, name, strlen(name));
  op(p, '\n');
}

/* An int in the smallest form pickle would use. */
static void integer(pk *p, int64_t v) {
  if (v >= 0 && v < 256) {
    op(p, 'K');
    le(p, (uint64_t)v, 1);
  } else if (v >= 0 && v < 65536) {
    op(p, 'M');
    le(p, (uint64_t)v, 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    op(p, 'J');
    le(p, (uint64_t)(uint32_t)(int32_t)v, 4);
  } else {
    op(p, 0x8a);
    op(p, 8);
    le(p, (uint64_t)v, 8);
  }
}

static void binfloat(pk *p, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  op(p, 'G');
  for (int i = 7; i >= 0; i--) op(p, (uint8_t)(bits >> (8 * i)));
}

static void int_tuple(pk *p, int n, const int64_t *v) {
  op(p, '(');
  for (int i = 0; i < n; i++) integer(p, v[i]);
  op(p, 't');
}

/* _rebuild_tensor_v2((storage), offset, sizes, strides, False, OrderedDict()[, None]) */
static void tensor(pk *p, const char *cls, const char *key, int64_t numel, int64_t offset,
                   int rank, const int64_t *sizes, const int64_t *strides, bool seven) {
  global(p, "torch._utils", "_rebuild_tensor_v2");
  op(p, '(');
  op(p, '(');
  str(p, "storage");
  global(p, "torch", cls);
  str(p, key);
  str(p, "cpu");
  integer(p, numel);
  op(p, 't');
  op(p, 'Q');
  integer(p, offset);
  int_tuple(p, rank, sizes);
  int_tuple(p, rank, strides);
  op(p, 0x89);
  global(p, "collections", "OrderedDict");
  op(p, ')');
  op(p, 'R');
  if (seven) op(p, 'N');
  op(p, 't');
  op(p, 'R');
}

typedef struct loaded {
  kl_pickle *p;
  const kl_pk_obj *root;
  kl_err e;
} loaded;

static kiln_status load_lim(pk *p, const kl_pk_limits *lim, loaded *l) {
  memset(l, 0, sizeof *l);
  kiln_status s = kl_pickle_load(p->d, p->n, lim, "test.pkl", &l->p, &l->root, &l->e);
  free(p->d);
  memset(p, 0, sizeof *p);
  if (s != KILN_OK) {
    assert_null(l->p);
    assert_true(strlen(l->e.msg) > 0);
  }
  return s;
}

static kiln_status load(pk *p, loaded *l) { return load_lim(p, NULL, l); }

static void expect_error(pk *p, kiln_status code, const char *words) {
  loaded l;
  assert_int_equal(load(p, &l), code);
  if (!strstr(l.e.msg, words)) fail_msg("'%s' does not say '%s'", l.e.msg, words);
  assert_non_null(strstr(l.e.msg, "test.pkl: byte "));
}

/* ---- what torch writes ---- */

static void test_scalars_and_containers(void **state) {
  (void)state;
  pk p = {0};
  proto(&p);
  op(&p, '}');
  op(&p, '(');
  str(&p, "small"); integer(&p, 5);
  str(&p, "neg"); integer(&p, -3);
  str(&p, "wide"); integer(&p, 65535);
  str(&p, "big"); integer(&p, -(INT64_C(1) << 40));
  str(&p, "float"); binfloat(&p, -1.5e-5);
  str(&p, "text"); str(&p, "hello");
  str(&p, "yes"); op(&p, 0x88);
  str(&p, "none"); op(&p, 'N');
  str(&p, "list"); op(&p, ']'); op(&p, '('); integer(&p, 1); integer(&p, 2); op(&p, 'e');
  str(&p, "pair"); integer(&p, 7); integer(&p, 8); op(&p, 0x86);
  op(&p, 'u');
  op(&p, '.');
  loaded l;
  assert_int_equal(load(&p, &l), KILN_OK);
  const kl_pk_obj *r = l.root;
  assert_int_equal(r->kind, KL_PK_DICT);
  assert_int_equal(kl_pk_dict_get(r, "small")->i, 5);
  assert_int_equal(kl_pk_dict_get(r, "neg")->i, -3);
  assert_int_equal(kl_pk_dict_get(r, "wide")->i, 65535);
  assert_true(kl_pk_dict_get(r, "big")->i == -(INT64_C(1) << 40));
  assert_true(kl_pk_dict_get(r, "float")->f == -1.5e-5);
  assert_string_equal(kl_pk_dict_get(r, "text")->s, "hello");
  assert_int_equal(kl_pk_dict_get(r, "yes")->kind, KL_PK_BOOL);
  assert_int_equal(kl_pk_dict_get(r, "yes")->i, 1);
  assert_int_equal(kl_pk_dict_get(r, "none")->kind, KL_PK_NONE);
  const kl_pk_obj *list = kl_pk_dict_get(r, "list"), *pair = kl_pk_dict_get(r, "pair");
  assert_int_equal(list->kind, KL_PK_LIST);
  assert_int_equal(list->n, 2);
  assert_int_equal(list->items[1]->i, 2);
  assert_int_equal(pair->kind, KL_PK_TUPLE);
  assert_int_equal(pair->items[0]->i, 7);
  assert_null(kl_pk_dict_get(r, "missing"));
  assert_null(kl_pk_dict_get(pair, "small")); /* not a dict */
  kl_pickle_free(l.p);
}

/* LONG1 of every width, signed as Python writes them. */
static void test_long1(void **state) {
  (void)state;
  static const struct {
    uint8_t n, bytes[8];
    int64_t want;
  } cases[] = {
      {0, {0}, 0},
      {1, {0xff}, -1},
      {2, {0x00, 0x80}, -32768},
      {3, {0xff, 0xff, 0x7f}, 0x7fffff},
      {8, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, INT64_MAX},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pk p = {0};
    proto(&p);
    op(&p, 0x8a);
    op(&p, cases[i].n);
    put(&p, cases[i].bytes, cases[i].n);
    op(&p, '.');
    loaded l;
    assert_int_equal(load(&p, &l), KILN_OK);
    assert_true(l.root->i == cases[i].want);
    kl_pickle_free(l.p);
  }
}

static void test_tensors(void **state) {
  (void)state;
  static const struct {
    const char *cls;
    kl_dtype dtype;
  } storages[] = {{"FloatStorage", KL_F32}, {"DoubleStorage", KL_F64},
                  {"HalfStorage", KL_F16},  {"BFloat16Storage", KL_BF16},
                  {"LongStorage", KL_I64},  {"IntStorage", KL_I32},
                  {"ShortStorage", KL_I16}, {"CharStorage", KL_I8},
                  {"ByteStorage", KL_U8},   {"BoolStorage", KL_BOOL}};
  for (size_t i = 0; i < sizeof storages / sizeof storages[0]; i++) {
    pk p = {0};
    int64_t sizes[2] = {3, 4}, strides[2] = {1, 3};
    proto(&p);
    op(&p, ']');
    op(&p, '(');
    tensor(&p, storages[i].cls, "7", 20, 2, 2, sizes, strides, i % 2 == 1);
    /* _rebuild_parameter(tensor, requires_grad, hooks) is the tensor */
    global(&p, "torch._utils", "_rebuild_parameter");
    op(&p, '(');
    tensor(&p, storages[i].cls, "8", 1, 0, 0, NULL, NULL, false);
    op(&p, 0x88);
    global(&p, "collections", "OrderedDict");
    op(&p, ')');
    op(&p, 'R');
    op(&p, 't');
    op(&p, 'R');
    op(&p, 'e');
    op(&p, '.');
    loaded l;
    assert_int_equal(load(&p, &l), KILN_OK);
    const kl_pk_obj *t = l.root->items[0], *s = l.root->items[1];
    assert_int_equal(t->kind, KL_PK_TENSOR);
    assert_int_equal(t->dtype, storages[i].dtype);
    assert_int_equal(t->rank, 2);
    assert_int_equal(t->i, 2);
    assert_int_equal(t->sizes[1], 4);
    assert_int_equal(t->strides[1], 3);
    assert_string_equal(t->storage->s, "7");
    assert_int_equal(t->storage->i, 20);
    assert_int_equal(s->kind, KL_PK_TENSOR);
    assert_int_equal(s->rank, 0);
    assert_string_equal(s->storage->s, "8");
    kl_pickle_free(l.p);
  }
}

/* A module: NEWOBJ of a __torch__ class, then BUILD with its attribute dict; a
 * second reference to it through the memo is the same object. */
static void test_module_and_memo(void **state) {
  (void)state;
  pk p = {0};
  proto(&p);
  op(&p, '(');
  global(&p, "__torch__.torch.nn.modules.linear", "Linear");
  op(&p, ')');
  op(&p, 0x81);
  op(&p, '}');
  op(&p, '(');
  str(&p, "training");
  op(&p, 0x89);
  op(&p, 'u');
  op(&p, 'b');
  op(&p, 'r'); /* LONG_BINPUT 300 */
  le(&p, 300, 4);
  op(&p, 'j'); /* LONG_BINGET 300 */
  le(&p, 300, 4);
  op(&p, 't');
  op(&p, '.');
  loaded l;
  assert_int_equal(load(&p, &l), KILN_OK);
  const kl_pk_obj *m = l.root->items[0];
  assert_int_equal(m->kind, KL_PK_OBJECT);
  assert_string_equal(m->s, "__torch__.torch.nn.modules.linear");
  assert_string_equal(m->name, "Linear");
  assert_int_equal(kl_pk_dict_get(m->state, "training")->i, 0);
  assert_ptr_equal(l.root->items[1], m);
  kl_pickle_free(l.p);
}

/* torch.jit._pickle.restore_type_tag(x, "type"), build_intlist(x) and build_doublelist(x)
 * give x back. */
static void test_type_tags(void **state) {
  (void)state;
  pk p = {0};
  proto(&p);
  global(&p, "torch.jit._pickle", "restore_type_tag");
  global(&p, "torch.jit._pickle", "build_intlist");
  op(&p, ']');
  integer(&p, 4);
  op(&p, 'a');
  op(&p, 0x85);
  op(&p, 'R');
  str(&p, "List[int]");
  op(&p, 0x86);
  op(&p, 'R');
  op(&p, '.');
  loaded l;
  assert_int_equal(load(&p, &l), KILN_OK);
  assert_int_equal(l.root->kind, KL_PK_LIST);
  assert_int_equal(l.root->items[0]->i, 4);
  kl_pickle_free(l.p);
  proto(&p); /* a List[float] attribute of a scripted module */
  global(&p, "torch.jit._pickle", "build_doublelist");
  op(&p, ']');
  integer(&p, 4);
  op(&p, 'a');
  op(&p, 0x85);
  op(&p, 'R');
  op(&p, '.');
  assert_int_equal(load(&p, &l), KILN_OK);
  assert_int_equal(l.root->kind, KL_PK_LIST);
  kl_pickle_free(l.p);
}

/* ---- what kiln refuses ---- */

static void test_unknown_opcode_and_global(void **state) {
  (void)state;
  pk p = {0};
  proto(&p);
  op(&p, 0x94); /* MEMOIZE, protocol 4 */
  expect_error(&p, KILN_ERR_UNSUPPORTED, "opcode kiln does not read: 0x94");
  proto(&p);
  op(&p, 'S'); /* STRING, protocol 0 */
  expect_error(&p, KILN_ERR_UNSUPPORTED, "0x53 'S'");
  proto(&p);
  global(&p, "os", "system");
  expect_error(&p, KILN_ERR_UNSUPPORTED, "global kiln does not accept: os.system");
  proto(&p);
  global(&p, "torch", "QInt8Storage");
  expect_error(&p, KILN_ERR_UNSUPPORTED, "quantized");
  proto(&p);
  global(&p, "torch._utils", "_rebuild_qtensor");
  expect_error(&p, KILN_ERR_UNSUPPORTED, "quantized");
  op(&p, 0x80);
  op(&p, 5);
  expect_error(&p, KILN_ERR_UNSUPPORTED, "protocol");
}

static void test_bad_torch_forms(void **state) {
  (void)state;
  int64_t big[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  pk p = {0};
  proto(&p);
  tensor(&p, "FloatStorage", "0", 1, 0, 9, big, big, false);
  op(&p, '.');
  expect_error(&p, KILN_ERR_UNSUPPORTED, "rank over 8");
  /* five arguments */
  proto(&p);
  global(&p, "torch._utils", "_rebuild_tensor_v2");
  op(&p, '(');
  for (int i = 0; i < 5; i++) op(&p, 'N');
  op(&p, 't');
  op(&p, 'R');
  expect_error(&p, KILN_ERR_INVALID_MODEL, "6 or 7 arguments");
  /* a persistent id that is not a storage */
  proto(&p);
  str(&p, "thing");
  op(&p, 0x85);
  op(&p, 'Q');
  expect_error(&p, KILN_ERR_INVALID_MODEL, "persistent id");
  /* a storage type torch does not have */
  proto(&p);
  op(&p, '(');
  str(&p, "storage");
  global(&p, "torch", "ComplexFloatStorage");
  expect_error(&p, KILN_ERR_UNSUPPORTED, "ComplexFloatStorage");
  /* NEWOBJ of something outside __torch__ */
  proto(&p);
  global(&p, "collections", "OrderedDict");
  op(&p, ')');
  op(&p, 0x81);
  expect_error(&p, KILN_ERR_UNSUPPORTED, "NEWOBJ");
  /* LONG1 wider than 64 bits */
  proto(&p);
  op(&p, 0x8a);
  op(&p, 9);
  for (int i = 0; i < 9; i++) op(&p, 0);
  expect_error(&p, KILN_ERR_UNSUPPORTED, "wider than 64 bits");
}

/* A valid pickle cut short anywhere is an error, never a crash. */
static void test_truncated(void **state) {
  (void)state;
  pk full = {0};
  int64_t sizes[1] = {4}, strides[1] = {1};
  proto(&full);
  op(&full, '}');
  op(&full, '(');
  str(&full, "weight");
  tensor(&full, "FloatStorage", "0", 4, 0, 1, sizes, strides, false);
  str(&full, "eps");
  binfloat(&full, 1e-5);
  op(&full, 'u');
  op(&full, '.');
  for (size_t n = 0; n < full.n; n++) {
    pk p = {0};
    put(&p, full.d, n);
    loaded l;
    assert_int_not_equal(load(&p, &l), KILN_OK);
  }
  loaded l;
  assert_int_equal(load(&full, &l), KILN_OK);
  kl_pickle_free(l.p);
}

static void test_garbage(void **state) {
  (void)state;
  static const char *const junk[] = {"hello world", "PK\x03\x04", "\x80\x02.", "\x80\x02N",
                                     "\x80\x02NN.", "\x80\x02(N.", "\x80\x02h\x05.",
                                     "\x80\x02a", "\x80\x02u", "\x80\x02N\x87"};
  for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
    pk p = {0};
    put(&p, junk[i], strlen(junk[i]));
    loaded l;
    assert_int_not_equal(load(&p, &l), KILN_OK);
  }
  /* every byte value after a valid start: no crash, an error or a value */
  for (int b = 0; b < 256; b++) {
    pk p = {0};
    proto(&p);
    op(&p, (uint8_t)b);
    op(&p, '.');
    loaded l;
    if (load(&p, &l) == KILN_OK) kl_pickle_free(l.p);
  }
}

static void test_limits(void **state) {
  (void)state;
  /* None inside 1000 nested one-tuples: deep with a flat stack */
  pk p = {0};
  proto(&p);
  op(&p, 'N');
  for (int i = 0; i < 1000; i++) op(&p, 0x85);
  op(&p, '.');
  expect_error(&p, KILN_ERR_LIMIT, "nested deeper than the limit of 200");
  /* lists nested through APPEND */
  proto(&p);
  for (int i = 0; i < 300; i++) op(&p, ']');
  for (int i = 0; i < 299; i++) op(&p, 'a');
  op(&p, '.');
  expect_error(&p, KILN_ERR_LIMIT, "nested deeper");
  /* a memo index past the limit */
  proto(&p);
  op(&p, 'N');
  op(&p, 'r');
  le(&p, 0x7fffffff, 4);
  expect_error(&p, KILN_ERR_LIMIT, "memo index");
  /* the stack and the objects, with small limits */
  kl_pk_limits lim = {.max_depth = 10, .max_stack = 100, .max_memo = 16, .max_objects = 1000};
  loaded l;
  proto(&p);
  for (int i = 0; i < 200; i++) op(&p, '(');
  assert_int_equal(load_lim(&p, &lim, &l), KILN_ERR_LIMIT);
  proto(&p);
  for (int i = 0; i < 200; i++) op(&p, 'N');
  assert_int_equal(load_lim(&p, &lim, &l), KILN_ERR_LIMIT);
  lim.max_stack = 1 << 20;
  proto(&p);
  op(&p, ']');
  for (int i = 0; i < 2000; i++) {
    op(&p, 'N');
    op(&p, 'a');
  }
  assert_int_equal(load_lim(&p, &lim, &l), KILN_ERR_LIMIT);
  assert_non_null(strstr(l.e.msg, "more objects than the limit of 1000"));
}

/* A list that contains itself (through the memo) would make the tree cyclic. */
static void test_self_reference(void **state) {
  (void)state;
  pk p = {0};
  proto(&p);
  op(&p, ']');
  op(&p, 'q');
  op(&p, 0);
  op(&p, ']');
  op(&p, 'h');
  op(&p, 0);
  op(&p, 'a'); /* inner = [outer] */
  op(&p, 'a'); /* outer.append(inner) */
  op(&p, '.');
  expect_error(&p, KILN_ERR_UNSUPPORTED, "changed after it was put inside another");
  /* BUILD twice on one object */
  proto(&p);
  global(&p, "__torch__", "M");
  op(&p, ')');
  op(&p, 0x81);
  op(&p, '}');
  op(&p, 'b');
  op(&p, '}');
  op(&p, 'b');
  expect_error(&p, KILN_ERR_UNSUPPORTED, "already built");
  /* a list appended to itself through the memo (found by fuzz_torchscript: the
   * importer recursed into it until the stack overflowed) */
  proto(&p);
  op(&p, ']');
  op(&p, 'q');
  op(&p, 0);
  op(&p, 'h');
  op(&p, 0);
  op(&p, 'a');
  op(&p, '.');
  expect_error(&p, KILN_ERR_UNSUPPORTED, "a container put inside itself");
  /* the same through SETITEMS on a dict */
  proto(&p);
  op(&p, '}');
  op(&p, 'q');
  op(&p, 0);
  op(&p, '(');
  str(&p, "k");
  op(&p, 'h');
  op(&p, 0);
  op(&p, 'u');
  op(&p, '.');
  expect_error(&p, KILN_ERR_UNSUPPORTED, "a container put inside itself");
  /* an object built with itself as its state */
  proto(&p);
  global(&p, "__torch__", "M");
  op(&p, ')');
  op(&p, 0x81);
  op(&p, 'q');
  op(&p, 0);
  op(&p, 'h');
  op(&p, 0);
  op(&p, 'b');
  op(&p, '.');
  expect_error(&p, KILN_ERR_UNSUPPORTED, "itself as its state");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scalars_and_containers),
      cmocka_unit_test(test_long1),
      cmocka_unit_test(test_tensors),
      cmocka_unit_test(test_module_and_memo),
      cmocka_unit_test(test_type_tags),
      cmocka_unit_test(test_unknown_opcode_and_global),
      cmocka_unit_test(test_bad_torch_forms),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_garbage),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_self_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
