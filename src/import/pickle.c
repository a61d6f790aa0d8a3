/* The bounded pickle reader for TorchScript archives (see pickle.h). A small stack
 * machine: each opcode pops its operands and pushes its result; objects live in an
 * arena owned by the kl_pickle, so a failure part way frees everything at once. */
#include "import/pickle.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK_BYTES ((size_t)64 << 10)

typedef struct chunk {
  struct chunk *next;
  size_t used, size;
  max_align_t data[]; /* aligned for any object */
} chunk;

struct kl_pickle {
  chunk *chunks;
};

typedef struct vm {
  kl_pickle *p;
  const uint8_t *buf;
  size_t len, pos, op_pos; /* op_pos: where the current opcode starts, for messages */
  const char *what;
  kl_err *e;
  kl_pk_limits lim;
  kl_pk_obj **stack;
  int sp, stack_cap;
  int *marks;
  int n_marks, marks_cap;
  kl_pk_obj **memo;
  int64_t memo_cap;
  int64_t n_objects;
} vm;

/* ---- arena ---- */

static void *arena_alloc(kl_pickle *p, size_t size) {
  size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
  chunk *c = p->chunks;
  if (!c || c->size - c->used < size) {
    size_t cap = size > CHUNK_BYTES ? size : CHUNK_BYTES;
    c = malloc(sizeof *c + cap);
    if (!c) return NULL;
    c->next = p->chunks;
    c->used = 0;
    c->size = cap;
    p->chunks = c;
  }
  void *r = (char *)c->data + c->used;
  c->used += size;
  memset(r, 0, size);
  return r;
}

void kl_pickle_free(kl_pickle *p) {
  if (!p) return;
  for (chunk *c = p->chunks, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(p);
}

/* ---- errors ---- */

static kiln_status fail_at(vm *m, kiln_status code, const char *fmt, const char *detail) {
  return kl_fail(m->e, code, "%s: byte %zu: %s%s", m->what, m->op_pos, fmt, detail);
}

static kiln_status oom(vm *m) { return fail_at(m, KILN_ERR_OUT_OF_MEMORY, "out of memory", ""); }

static kiln_status truncated(vm *m) {
  return fail_at(m, KILN_ERR_INVALID_MODEL, "the pickle ends in the middle of an opcode", "");
}

/* ---- objects ---- */

static kl_pk_obj *new_obj(vm *m, kl_pk_kind kind) {
  if (++m->n_objects > m->lim.max_objects) {
    char n[32];
    snprintf(n, sizeof n, "%lld", (long long)m->lim.max_objects);
    fail_at(m, KILN_ERR_LIMIT, "more objects than the limit of ", n);
    return NULL;
  }
  kl_pk_obj *o = arena_alloc(m->p, sizeof *o);
  if (!o) {
    oom(m);
    return NULL;
  }
  o->kind = kind;
  o->depth = 1;
  return o;
}

/* child goes inside parent: child may no longer change, parent gets deeper. */
static kiln_status adopt(vm *m, kl_pk_obj *parent, kl_pk_obj *child) {
  child->frozen = true;
  if (child->depth + 1 > parent->depth) parent->depth = child->depth + 1;
  if (parent->depth > m->lim.max_depth) {
    char n[32];
    snprintf(n, sizeof n, "%d", m->lim.max_depth);
    return fail_at(m, KILN_ERR_LIMIT, "containers nested deeper than the limit of ", n);
  }
  return KILN_OK;
}

static kiln_status container_push(vm *m, kl_pk_obj *c, kl_pk_obj *item) {
  if (item == c) /* the one cycle the frozen rule lets through: a memo GET of c itself */
    return fail_at(m, KILN_ERR_UNSUPPORTED, "a container put inside itself "
                   "(self-referencing data is not supported)", "");
  if (c->n == c->cap) {
    int cap = c->cap ? c->cap * 2 : 4;
    if (cap > m->lim.max_stack) cap = m->lim.max_stack;
    if (c->n >= cap)
      return fail_at(m, KILN_ERR_LIMIT, "a container has more items than the limit", "");
    kl_pk_obj **items = arena_alloc(m->p, sizeof *items * (size_t)cap);
    if (!items) return oom(m);
    if (c->n) memcpy(items, c->items, sizeof *items * (size_t)c->n);
    c->items = items;
    c->cap = cap;
  }
  c->items[c->n++] = item;
  return adopt(m, c, item);
}

static char *arena_strdup(vm *m, const void *s, size_t len) {
  char *r = arena_alloc(m->p, len + 1);
  if (r) memcpy(r, s, len);
  return r;
}

const char *kl_pk_kind_name(kl_pk_kind k) {
  static const char *const names[] = {"None",   "bool",   "int",     "float",
                                      "str",    "tuple",  "list",    "dict",
                                      "global", "object", "storage", "tensor"};
  return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

const kl_pk_obj *kl_pk_dict_get(const kl_pk_obj *d, const char *key) {
  if (!d || d->kind != KL_PK_DICT) return NULL;
  for (int i = 0; i + 1 < d->n; i += 2) {
    const kl_pk_obj *k = d->items[i];
    if (k->kind == KL_PK_STR && strcmp(k->s, key) == 0) return d->items[i + 1];
  }
  return NULL;
}

/* ---- the stack ---- */

static kiln_status push(vm *m, kl_pk_obj *o) {
  if (!o) return m->e->code;
  if (m->sp + m->n_marks >= m->lim.max_stack)
    return fail_at(m, KILN_ERR_LIMIT, "the stack grows past its limit", "");
  if (m->sp == m->stack_cap) {
    int cap = m->stack_cap ? m->stack_cap * 2 : 64;
    kl_pk_obj **s = realloc(m->stack, sizeof *s * (size_t)cap);
    if (!s) return oom(m);
    m->stack = s;
    m->stack_cap = cap;
  }
  m->stack[m->sp++] = o;
  return KILN_OK;
}

static kl_pk_obj *pop(vm *m) {
  if (m->sp <= (m->n_marks ? m->marks[m->n_marks - 1] : 0)) {
    fail_at(m, KILN_ERR_INVALID_MODEL, "an opcode pops more values than are on the stack", "");
    return NULL;
  }
  return m->stack[--m->sp];
}

static kl_pk_obj *top(vm *m) {
  if (m->sp <= (m->n_marks ? m->marks[m->n_marks - 1] : 0)) {
    fail_at(m, KILN_ERR_INVALID_MODEL, "an opcode needs a value but the stack is empty", "");
    return NULL;
  }
  return m->stack[m->sp - 1];
}

static kiln_status push_mark(vm *m) {
  if (m->sp + m->n_marks >= m->lim.max_stack)
    return fail_at(m, KILN_ERR_LIMIT, "MARKs nest past the stack limit", "");
  if (m->n_marks == m->marks_cap) {
    int cap = m->marks_cap ? m->marks_cap * 2 : 32;
    int *s = realloc(m->marks, sizeof *s * (size_t)cap);
    if (!s) return oom(m);
    m->marks = s;
    m->marks_cap = cap;
  }
  m->marks[m->n_marks++] = m->sp;
  return KILN_OK;
}

/* Pops the topmost MARK; *first is the stack index of the first value above it. */
static kiln_status pop_mark(vm *m, int *first) {
  if (!m->n_marks) return fail_at(m, KILN_ERR_INVALID_MODEL, "no MARK to close", "");
  *first = m->marks[--m->n_marks];
  return KILN_OK;
}

/* ---- reading operands ---- */

static bool take(vm *m, size_t n, const uint8_t **out) {
  if (m->len - m->pos < n) return false;
  *out = m->buf + m->pos;
  m->pos += n;
  return true;
}

static bool read_le(vm *m, int bytes, uint64_t *v) {
  const uint8_t *b;
  if (!take(m, (size_t)bytes, &b)) return false;
  *v = 0;
  for (int i = bytes - 1; i >= 0; i--) *v = *v << 8 | b[i];
  return true;
}

/* A line of text ended by '\n' (GLOBAL's operands). */
static const char *read_line(vm *m, size_t *n) {
  const uint8_t *start = m->buf + m->pos;
  const uint8_t *nl = memchr(start, '\n', m->len - m->pos);
  if (!nl) return NULL;
  *n = (size_t)(nl - start);
  m->pos += *n + 1;
  return (const char *)start;
}

/* ---- scalars ---- */

static kiln_status push_int(vm *m, kl_pk_kind kind, int64_t v) {
  kl_pk_obj *o = new_obj(m, kind);
  if (o) o->i = v;
  return push(m, o);
}

static kiln_status op_long1(vm *m) {
  uint64_t n, v = 0;
  const uint8_t *b;
  if (!read_le(m, 1, &n) || !take(m, n, &b)) return truncated(m);
  if (n > 8)
    return fail_at(m, KILN_ERR_UNSUPPORTED, "an integer wider than 64 bits (LONG1)", "");
  for (int i = (int)n - 1; i >= 0; i--) v = v << 8 | b[i];
  if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~UINT64_C(0) << (8 * n); /* sign-extend */
  return push_int(m, KL_PK_INT, (int64_t)v);
}

static kiln_status op_binfloat(vm *m) {
  const uint8_t *b;
  if (!take(m, 8, &b)) return truncated(m);
  uint64_t bits = 0;
  for (int i = 0; i < 8; i++) bits = bits << 8 | b[i]; /* big-endian on every machine */
  kl_pk_obj *o = new_obj(m, KL_PK_FLOAT);
  if (o) memcpy(&o->f, &bits, sizeof o->f);
  return push(m, o);
}

static kiln_status op_binunicode(vm *m) {
  uint64_t n;
  const uint8_t *b;
  if (!read_le(m, 4, &n) || !take(m, n, &b)) return truncated(m);
  if (memchr(b, 0, n))
    return fail_at(m, KILN_ERR_UNSUPPORTED, "a string with a NUL character", "");
  kl_pk_obj *o = new_obj(m, KL_PK_STR);
  if (o && !(o->s = arena_strdup(m, b, n))) return oom(m);
  if (o) o->len = n;
  return push(m, o);
}

/* ---- globals ---- */

static const struct {
  const char *cls;
  kl_dtype dtype;
} storages[] = {
    {"FloatStorage", KL_F32},   {"DoubleStorage", KL_F64}, {"HalfStorage", KL_F16},
    {"BFloat16Storage", KL_BF16}, {"LongStorage", KL_I64},  {"IntStorage", KL_I32},
    {"ShortStorage", KL_I16},   {"CharStorage", KL_I8},    {"ByteStorage", KL_U8},
    {"BoolStorage", KL_BOOL},
};

/* Known torch globals that kiln reads; NULL module ends the list. */
static const char *const accepted[][2] = {
    {"torch._utils", "_rebuild_tensor_v2"},
    {"torch._utils", "_rebuild_parameter"},
    {"torch._utils", "_rebuild_parameter_with_state"},
    {"collections", "OrderedDict"},
    {"torch.jit._pickle", "restore_type_tag"},
    {"torch.jit._pickle", "build_intlist"},
    {"torch.jit._pickle", "build_floatlist"},
    {"torch.jit._pickle", "build_doublelist"}, /* (what torch writes for a List[float]) */
    {"torch.jit._pickle", "build_boollist"},
    {"torch.jit._pickle", "build_tensorlist"},
    {NULL, NULL},
};

static kl_dtype storage_dtype(const kl_pk_obj *g) {
  if (g->kind != KL_PK_GLOBAL || strcmp(g->s, "torch") != 0) return KL_UNDEFINED;
  for (size_t i = 0; i < sizeof storages / sizeof storages[0]; i++)
    if (strcmp(g->name, storages[i].cls) == 0) return storages[i].dtype;
  return KL_UNDEFINED;
}

static bool is_global(const kl_pk_obj *g, const char *module, const char *name) {
  return g->kind == KL_PK_GLOBAL && strcmp(g->s, module) == 0 && strcmp(g->name, name) == 0;
}

static kiln_status check_global(vm *m, const kl_pk_obj *g) {
  char what[256];
  snprintf(what, sizeof what, "%s.%s", g->s, g->name);
  if (strncmp(g->s, "__torch__", 9) == 0 && (g->s[9] == 0 || g->s[9] == '.')) return KILN_OK;
  if (storage_dtype(g) != KL_UNDEFINED) return KILN_OK;
  for (int i = 0; accepted[i][0]; i++)
    if (is_global(g, accepted[i][0], accepted[i][1])) return KILN_OK;
  if (strcmp(g->s, "torch") == 0 && strstr(g->name, "Storage") && g->name[0] == 'Q')
    return fail_at(m, KILN_ERR_UNSUPPORTED, "quantized tensors are not supported: ", what);
  if (strcmp(g->name, "_rebuild_qtensor") == 0)
    return fail_at(m, KILN_ERR_UNSUPPORTED, "quantized tensors are not supported: ", what);
  return fail_at(m, KILN_ERR_UNSUPPORTED, "a pickle global kiln does not accept: ", what);
}

static kiln_status op_global(vm *m) {
  size_t nm, nn;
  const char *mod = read_line(m, &nm);
  const char *name = mod ? read_line(m, &nn) : NULL;
  if (!name) return truncated(m);
  kl_pk_obj *g = new_obj(m, KL_PK_GLOBAL);
  if (!g) return m->e->code;
  if (!(g->s = arena_strdup(m, mod, nm)) || !(g->name = arena_strdup(m, name, nn)))
    return oom(m);
  kiln_status s = check_global(m, g);
  return s != KILN_OK ? s : push(m, g);
}

/* ---- containers ---- */

/* A tuple of the values stack[first..sp-1], which are popped. */
static kiln_status make_tuple(vm *m, int first) {
  kl_pk_obj *t = new_obj(m, KL_PK_TUPLE);
  if (!t) return m->e->code;
  for (int i = first; i < m->sp; i++) {
    kiln_status s = container_push(m, t, m->stack[i]);
    if (s != KILN_OK) return s;
  }
  m->sp = first;
  return push(m, t);
}

static kiln_status op_tuple_n(vm *m, int n) {
  int floor = m->n_marks ? m->marks[m->n_marks - 1] : 0;
  if (m->sp - floor < n)
    return fail_at(m, KILN_ERR_INVALID_MODEL, "TUPLEn with too few values on the stack", "");
  return make_tuple(m, m->sp - n);
}

static kiln_status op_tuple_mark(vm *m) {
  int first = 0;
  kiln_status s = pop_mark(m, &first);
  return s != KILN_OK ? s : make_tuple(m, first);
}

static kiln_status check_mutable(vm *m, const kl_pk_obj *c, kl_pk_kind kind, const char *op) {
  if (c->kind != kind) {
    char d[96];
    snprintf(d, sizeof d, "%s on a %s", op, kl_pk_kind_name(c->kind));
    return fail_at(m, KILN_ERR_INVALID_MODEL, "", d);
  }
  if (c->frozen)
    return fail_at(m, KILN_ERR_UNSUPPORTED, "a container changed after it was put inside "
                   "another (self-referencing data is not supported): ", op);
  return KILN_OK;
}

/* APPENDS, SETITEMS, LIST, DICT: values from the last MARK into a container. */
static kiln_status fill_from_mark(vm *m, kl_pk_obj *c, int first, int stride, const char *op) {
  if ((m->sp - first) % stride)
    return fail_at(m, KILN_ERR_INVALID_MODEL, "an odd number of values for ", op);
  for (int i = first; i < m->sp; i++) {
    kiln_status s = container_push(m, c, m->stack[i]);
    if (s != KILN_OK) return s;
  }
  m->sp = first;
  return KILN_OK;
}

static kiln_status op_extend(vm *m, kl_pk_kind kind, const char *op) {
  int first = 0;
  kiln_status s = pop_mark(m, &first);
  if (s != KILN_OK) return s;
  if (first <= (m->n_marks ? m->marks[m->n_marks - 1] : 0))
    return fail_at(m, KILN_ERR_INVALID_MODEL, "no container below the MARK of ", op);
  kl_pk_obj *c = m->stack[first - 1];
  if ((s = check_mutable(m, c, kind, op)) != KILN_OK) return s;
  return fill_from_mark(m, c, first, kind == KL_PK_DICT ? 2 : 1, op);
}

static kiln_status op_add_one(vm *m, kl_pk_kind kind, const char *op) {
  int n = kind == KL_PK_DICT ? 2 : 1;
  int floor = m->n_marks ? m->marks[m->n_marks - 1] : 0;
  if (m->sp - floor < n + 1)
    return fail_at(m, KILN_ERR_INVALID_MODEL, "too few values on the stack for ", op);
  kl_pk_obj *c = m->stack[m->sp - n - 1];
  kiln_status s = check_mutable(m, c, kind, op);
  return s != KILN_OK ? s : fill_from_mark(m, c, m->sp - n, n, op);
}

static kiln_status op_new_from_mark(vm *m, kl_pk_kind kind, const char *op) {
  int first = 0;
  kiln_status s = pop_mark(m, &first);
  kl_pk_obj *c = s == KILN_OK ? new_obj(m, kind) : NULL;
  if (!c) return m->e->code;
  if ((s = fill_from_mark(m, c, first, kind == KL_PK_DICT ? 2 : 1, op)) != KILN_OK) return s;
  return push(m, c);
}

/* ---- memo ---- */

static kiln_status op_put(vm *m, int bytes) {
  uint64_t idx;
  if (!read_le(m, bytes, &idx)) return truncated(m);
  kl_pk_obj *o = top(m);
  if (!o) return m->e->code;
  if (idx >= (uint64_t)m->lim.max_memo)
    return fail_at(m, KILN_ERR_LIMIT, "a memo index over the limit", "");
  if ((int64_t)idx >= m->memo_cap) {
    int64_t cap = m->memo_cap ? m->memo_cap : 64;
    while (cap <= (int64_t)idx) cap *= 2;
    kl_pk_obj **memo = realloc(m->memo, sizeof *memo * (size_t)cap);
    if (!memo) return oom(m);
    memset(memo + m->memo_cap, 0, sizeof *memo * (size_t)(cap - m->memo_cap));
    m->memo = memo;
    m->memo_cap = cap;
  }
  m->memo[idx] = o;
  return KILN_OK;
}

static kiln_status op_get(vm *m, int bytes) {
  uint64_t idx;
  if (!read_le(m, bytes, &idx)) return truncated(m);
  if (idx >= (uint64_t)m->memo_cap || !m->memo[idx])
    return fail_at(m, KILN_ERR_INVALID_MODEL, "a memo entry read before it was written", "");
  return push(m, m->memo[idx]);
}

/* ---- torch objects ---- */

static kiln_status want_kind(vm *m, const kl_pk_obj *o, kl_pk_kind kind, const char *what) {
  if (o->kind == kind) return KILN_OK;
  char d[160];
  snprintf(d, sizeof d, "%s is a %s, expected a %s", what, kl_pk_kind_name(o->kind),
           kl_pk_kind_name(kind));
  return fail_at(m, KILN_ERR_INVALID_MODEL, "", d);
}

/* BINPERSID ('storage', <torch XStorage>, key, location, numel) */
static kiln_status op_persid(vm *m) {
  kl_pk_obj *pid = pop(m);
  if (!pid) return m->e->code;
  kiln_status s = want_kind(m, pid, KL_PK_TUPLE, "a persistent id");
  if (s != KILN_OK) return s;
  if (pid->n != 5 || pid->items[0]->kind != KL_PK_STR || strcmp(pid->items[0]->s, "storage"))
    return fail_at(m, KILN_ERR_INVALID_MODEL, "a persistent id that is not "
                   "('storage', type, key, location, size)", "");
  kl_pk_obj *cls = pid->items[1], *key = pid->items[2], *numel = pid->items[4];
  if ((s = want_kind(m, cls, KL_PK_GLOBAL, "a storage type")) ||
      (s = want_kind(m, key, KL_PK_STR, "a storage key")) ||
      (s = want_kind(m, numel, KL_PK_INT, "a storage size")))
    return s;
  kl_pk_obj *st = new_obj(m, KL_PK_STORAGE);
  if (!st) return m->e->code;
  st->dtype = storage_dtype(cls);
  if (st->dtype == KL_UNDEFINED)
    return fail_at(m, KILN_ERR_UNSUPPORTED, "a storage type kiln does not know: ", cls->name);
  if (numel->i < 0) return fail_at(m, KILN_ERR_INVALID_MODEL, "a negative storage size", "");
  st->s = key->s;
  st->len = key->len;
  st->i = numel->i;
  return push(m, st);
}

static kiln_status int_tuple(vm *m, const kl_pk_obj *t, const char *what, int64_t *v,
                             int *n) {
  kiln_status s = want_kind(m, t, KL_PK_TUPLE, what);
  if (s != KILN_OK) return s;
  if (t->n > KL_MAX_RANK)
    return fail_at(m, KILN_ERR_UNSUPPORTED, "a tensor of rank over 8: ", what);
  for (int i = 0; i < t->n; i++) {
    if ((s = want_kind(m, t->items[i], KL_PK_INT, what)) != KILN_OK) return s;
    v[i] = t->items[i]->i;
  }
  *n = t->n;
  return KILN_OK;
}

/* _rebuild_tensor_v2(storage, offset, sizes, strides, requires_grad, hooks[, meta]) */
static kiln_status rebuild_tensor(vm *m, const kl_pk_obj *args) {
  if (args->n != 6 && args->n != 7)
    return fail_at(m, KILN_ERR_INVALID_MODEL, "_rebuild_tensor_v2 takes 6 or 7 arguments", "");
  kl_pk_obj *t = new_obj(m, KL_PK_TENSOR);
  if (!t) return m->e->code;
  kiln_status s = want_kind(m, args->items[0], KL_PK_STORAGE, "a tensor's storage");
  if (!s) s = want_kind(m, args->items[1], KL_PK_INT, "a tensor's storage offset");
  int ns = 0, nt = 0;
  if (!s) s = int_tuple(m, args->items[2], "a tensor's sizes", t->sizes, &ns);
  if (!s) s = int_tuple(m, args->items[3], "a tensor's strides", t->strides, &nt);
  if (s) return s;
  if (ns != nt)
    return fail_at(m, KILN_ERR_INVALID_MODEL, "a tensor with more sizes than strides or "
                   "fewer", "");
  t->storage = args->items[0];
  t->dtype = t->storage->dtype;
  t->i = args->items[1]->i;
  t->rank = ns;
  if ((s = adopt(m, t, t->storage)) != KILN_OK) return s;
  return push(m, t);
}

/* REDUCE: callable(*args) for the few callables torch writes. */
static kiln_status op_reduce(vm *m) {
  kl_pk_obj *args = pop(m), *fn = args ? pop(m) : NULL;
  if (!fn) return m->e->code;
  kiln_status s = want_kind(m, args, KL_PK_TUPLE, "REDUCE's arguments");
  if (!s) s = want_kind(m, fn, KL_PK_GLOBAL, "REDUCE's callable");
  if (s) return s;
  if (is_global(fn, "torch._utils", "_rebuild_tensor_v2")) return rebuild_tensor(m, args);
  if (is_global(fn, "collections", "OrderedDict")) {
    if (args->n) return fail_at(m, KILN_ERR_UNSUPPORTED, "OrderedDict with arguments", "");
    return push(m, new_obj(m, KL_PK_DICT));
  }
  bool param = is_global(fn, "torch._utils", "_rebuild_parameter") ||
               is_global(fn, "torch._utils", "_rebuild_parameter_with_state");
  if (param && args->n >= 1 && args->items[0]->kind == KL_PK_TENSOR)
    return push(m, args->items[0]);
  if (param) return fail_at(m, KILN_ERR_INVALID_MODEL, "_rebuild_parameter of a non-tensor", "");
  /* restore_type_tag(value, type) and build_*list(list) give back their argument */
  if (strcmp(fn->s, "torch.jit._pickle") == 0 && args->n >= 1) return push(m, args->items[0]);
  char d[256];
  snprintf(d, sizeof d, "%s.%s", fn->s, fn->name);
  return fail_at(m, KILN_ERR_UNSUPPORTED, "REDUCE of a callable kiln does not run: ", d);
}

/* NEWOBJ: cls(*args) for __torch__ classes, which torch writes with no arguments. */
static kiln_status op_newobj(vm *m) {
  kl_pk_obj *args = pop(m), *cls = args ? pop(m) : NULL;
  if (!cls) return m->e->code;
  kiln_status s = want_kind(m, cls, KL_PK_GLOBAL, "NEWOBJ's class");
  if (s) return s;
  if (strncmp(cls->s, "__torch__", 9) != 0)
    return fail_at(m, KILN_ERR_UNSUPPORTED, "NEWOBJ of a class outside __torch__: ", cls->name);
  if (args->kind != KL_PK_TUPLE || args->n)
    return fail_at(m, KILN_ERR_UNSUPPORTED, "NEWOBJ with arguments for ", cls->name);
  kl_pk_obj *o = new_obj(m, KL_PK_OBJECT);
  if (!o) return m->e->code;
  o->s = cls->s;
  o->name = cls->name;
  return push(m, o);
}

static kiln_status op_build(vm *m) {
  kl_pk_obj *state = pop(m), *o = state ? top(m) : NULL;
  if (!o) return m->e->code;
  if (o->kind != KL_PK_OBJECT) {
    char d[64];
    snprintf(d, sizeof d, "BUILD on a %s", kl_pk_kind_name(o->kind));
    return fail_at(m, KILN_ERR_UNSUPPORTED, "", d);
  }
  if (o->frozen || o->state)
    return fail_at(m, KILN_ERR_UNSUPPORTED, "BUILD on an object already built or used: ",
                   o->name);
  if (state == o)
    return fail_at(m, KILN_ERR_UNSUPPORTED, "BUILD of an object with itself as its state "
                   "(self-referencing data is not supported): ", o->name);
  o->state = state;
  return adopt(m, o, state);
}

/* ---- the loop ---- */

static kiln_status step(vm *m, uint8_t op, bool *stop) {
  uint64_t v;
  switch (op) {
  case 0x80: /* PROTO */
    if (!read_le(m, 1, &v)) return truncated(m);
    if (v < 2 || v > 3)
      return fail_at(m, KILN_ERR_UNSUPPORTED, "a pickle protocol other than 2 or 3", "");
    return KILN_OK;
  case '.': *stop = true; return KILN_OK;
  case 'c': return op_global(m);
  case 'q': return op_put(m, 1);
  case 'r': return op_put(m, 4);
  case 'h': return op_get(m, 1);
  case 'j': return op_get(m, 4);
  case '(': return push_mark(m);
  case ')': return push(m, new_obj(m, KL_PK_TUPLE));
  case 't': return op_tuple_mark(m);
  case 0x85: return op_tuple_n(m, 1);
  case 0x86: return op_tuple_n(m, 2);
  case 0x87: return op_tuple_n(m, 3);
  case ']': return push(m, new_obj(m, KL_PK_LIST));
  case 'a': return op_add_one(m, KL_PK_LIST, "APPEND");
  case 'e': return op_extend(m, KL_PK_LIST, "APPENDS");
  case 'l': return op_new_from_mark(m, KL_PK_LIST, "LIST");
  case '}': return push(m, new_obj(m, KL_PK_DICT));
  case 's': return op_add_one(m, KL_PK_DICT, "SETITEM");
  case 'u': return op_extend(m, KL_PK_DICT, "SETITEMS");
  case 'd': return op_new_from_mark(m, KL_PK_DICT, "DICT");
  case 'J':
    if (!read_le(m, 4, &v)) return truncated(m);
    return push_int(m, KL_PK_INT, (int32_t)(uint32_t)v);
  case 'K':
    if (!read_le(m, 1, &v)) return truncated(m);
    return push_int(m, KL_PK_INT, (int64_t)v);
  case 'M':
    if (!read_le(m, 2, &v)) return truncated(m);
    return push_int(m, KL_PK_INT, (int64_t)v);
  case 0x8a: return op_long1(m);
  case 'G': return op_binfloat(m);
  case 0x88: return push_int(m, KL_PK_BOOL, 1);
  case 0x89: return push_int(m, KL_PK_BOOL, 0);
  case 'N': return push(m, new_obj(m, KL_PK_NONE));
  case 'X': return op_binunicode(m);
  case 0x81: return op_newobj(m);
  case 'b': return op_build(m);
  case 'R': return op_reduce(m);
  case 'Q': return op_persid(m);
  default: {
    char d[64];
    snprintf(d, sizeof d, "0x%02x%s%c%s", op, op >= 0x20 && op < 0x7f ? " '" : "",
             op >= 0x20 && op < 0x7f ? op : ' ', op >= 0x20 && op < 0x7f ? "'" : "");
    return fail_at(m, KILN_ERR_UNSUPPORTED, "a pickle opcode kiln does not read: ", d);
  }
  }
}

static kiln_status run(vm *m, const kl_pk_obj **root) {
  bool stop = false;
  while (!stop) {
    m->op_pos = m->pos;
    if (m->pos >= m->len)
      return fail_at(m, KILN_ERR_INVALID_MODEL, "the pickle ends without STOP", "");
    kiln_status s = step(m, m->buf[m->pos++], &stop);
    if (s != KILN_OK) return s;
  }
  if (m->sp != 1 || m->n_marks)
    return fail_at(m, KILN_ERR_INVALID_MODEL, "STOP with other than one value on the stack",
                   "");
  *root = m->stack[0];
  return KILN_OK;
}

kiln_status kl_pickle_load(const void *buf, size_t len, const kl_pk_limits *lim,
                           const char *what, kl_pickle **out, const kl_pk_obj **root,
                           kl_err *e) {
  static const kl_pk_limits dflt = KL_PK_DEFAULT_LIMITS;
  *out = NULL;
  *root = NULL;
  vm m = {.buf = buf, .len = len, .what = what ? what : "pickle", .e = e,
          .lim = lim ? *lim : dflt};
  m.p = calloc(1, sizeof *m.p);
  if (!m.p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  kiln_status s = run(&m, root);
  free(m.stack);
  free(m.marks);
  free(m.memo);
  if (s != KILN_OK) {
    kl_pickle_free(m.p);
    *root = NULL;
    return s;
  }
  *out = m.p;
  return KILN_OK;
}
