/* Graph construction and whole-graph bookkeeping (toposort, compaction). */
#include "ir/ir.h"
#include "ir/strmap.h"

#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s) { return strdup(s ? s : ""); }

/* Grow *arr (of elem bytes each) so that it can hold need elements. */
static bool reserve(void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap) return true;
  int n = *cap ? *cap : 16;
  while (n < need) {
    if (n > (1 << 29)) return false;
    n *= 2;
  }
  void *p = realloc(*arr, (size_t)n * elem);
  if (!p) return false;
  *arr = p;
  *cap = n;
  return true;
}

/* ---- the readers index (ir.h) ---- */
typedef struct kl_readers {
  int *node, n, cap; /* ascending node ids, one per slot reading the value */
} kl_readers;

struct kl_uses {
  bool made;
  int n_values;      /* values the index covers; later ones are read by nobody yet */
  kl_readers *of;
};

void kl_graph_uses_reset(const kl_graph *g) {
  struct kl_uses *u = g->uses;
  if (!u || !u->made) return;
  for (int v = 0; v < u->n_values; v++) free(u->of[v].node);
  free(u->of);
  u->of = NULL;
  u->n_values = 0;
  u->made = false;
}

/* Enters node n as a reader of v, in order; false (the index forgotten) on failure. */
static bool uses_add(const kl_graph *g, int v, int n) {
  struct kl_uses *u = g->uses;
  if (v >= u->n_values) {
    int want = v + 1 > 2 * u->n_values ? v + 1 : 2 * u->n_values;
    kl_readers *p = realloc(u->of, sizeof *p * (size_t)want);
    if (!p) return false;
    memset(p + u->n_values, 0, sizeof *p * (size_t)(want - u->n_values));
    u->of = p;
    u->n_values = want;
  }
  kl_readers *r = &u->of[v];
  if (r->n == r->cap) {
    int cap = r->cap ? 2 * r->cap : 2;
    int *p = realloc(r->node, sizeof *p * (size_t)cap);
    if (!p) return false;
    r->node = p;
    r->cap = cap;
  }
  int at = r->n++;
  while (at > 0 && r->node[at - 1] > n) {
    r->node[at] = r->node[at - 1];
    at--;
  }
  r->node[at] = n;
  return true;
}

static void uses_del(const kl_graph *g, int v, int n) {
  struct kl_uses *u = g->uses;
  if (v < 0 || v >= u->n_values) return;
  kl_readers *r = &u->of[v];
  for (int i = 0; i < r->n; i++)
    if (r->node[i] == n) {
      memmove(r->node + i, r->node + i + 1, sizeof(int) * (size_t)(r->n - i - 1));
      r->n--;
      return;
    }
}

static void uses_node(const kl_graph *g, int n, bool enter) {
  const kl_node *node = &g->nodes[n];
  for (int k = 0; k < node->n_in; k++) {
    int v = node->in[k];
    if (v < 0) continue;
    if (!enter) uses_del(g, v, n);
    else if (!uses_add(g, v, n)) {
      kl_graph_uses_reset(g);
      return;
    }
  }
}

void kl_graph_uses_node(kl_graph *g, int n, bool enter) {
  if (g->uses && g->uses->made) uses_node(g, n, enter);
}

static bool uses_make(const kl_graph *g) {
  struct kl_uses *u = g->uses;
  if (!u) return false;
  if (u->made) return true;
  u->made = true;
  for (int i = 0; i < g->n_nodes; i++) {
    uses_node(g, i, true);
    if (!u->made) return false;
  }
  return true;
}

const int *kl_graph_readers(const kl_graph *g, int v, int *count) {
  *count = 0;
  if (!uses_make(g)) return NULL;
  static const int none[1] = {0};
  if (v < 0 || v >= g->uses->n_values) return none;
  *count = g->uses->of[v].n;
  return g->uses->of[v].node ? g->uses->of[v].node : none;
}

void kl_graph_set_input(kl_graph *g, int n, int slot, int v) {
  int *in = &g->nodes[n].in[slot];
  if (*in == v) return;
  if (g->uses && g->uses->made) {
    if (*in >= 0) uses_del(g, *in, n);
    if (v >= 0 && !uses_add(g, v, n)) kl_graph_uses_reset(g);
  }
  *in = v;
}

kiln_status kl_graph_uses_check(const kl_graph *g, kl_err *e) {
  struct kl_uses *u = g->uses;
  if (!u || !u->made) return KILN_OK;
  int *seen = calloc((size_t)u->n_values + 1, sizeof(int));
  if (!seen) return KILN_OK; /* nothing to compare with: the index stays unproven */
  kiln_status st = KILN_OK;
  for (int i = 0; i < g->n_nodes && st == KILN_OK; i++)
    for (int k = 0; k < g->nodes[i].n_in && st == KILN_OK; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0) continue;
      const kl_readers *r = v < u->n_values ? &u->of[v] : NULL;
      int have = 0;
      for (int j = 0; r && j < r->n; j++) have += r->node[j] == i;
      int want = 0;
      for (int kk = 0; kk < g->nodes[i].n_in; kk++) want += g->nodes[i].in[kk] == v;
      if (have != want)
        st = kl_fail(e, KILN_ERR_INTERNAL, "the readers index lists node %d %d time(s) "
                     "for value %d, which it reads %d time(s): a node's inputs changed "
                     "behind it", i, have, v, want);
      if (v < u->n_values) seen[v]++;
    }
  for (int v = 0; v < u->n_values && st == KILN_OK; v++)
    if (u->of[v].n != seen[v])
      st = kl_fail(e, KILN_ERR_INTERNAL, "the readers index lists %d reader slot(s) of "
                   "value %d, the graph has %d", u->of[v].n, v, seen[v]);
  free(seen);
  return st;
}

kl_graph *kl_graph_new(void) {
  kl_graph *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->names = kl_strmap_new();
  g->source = strdup("<memory>");
  g->uses = calloc(1, sizeof *g->uses);
  if (!g->names || !g->source || !g->uses) {
    kl_graph_free(g);
    return NULL;
  }
  return g;
}

kiln_status kl_graph_set_source(kl_graph *g, const char *source, kl_err *e) {
  char *s = strdup(source);
  if (!s) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  free(g->source);
  g->source = s;
  return KILN_OK;
}

void kl_attr_clear(kl_attr *a) {
  free(a->name);
  free(a->s);
  free(a->ints);
  free(a->floats);
  if (a->strings)
    for (int i = 0; i < a->n; i++) free(a->strings[i]);
  free(a->strings);
  if (a->t) free(a->t->data);
  free(a->t);
  kl_graph_free(a->g);
  memset(a, 0, sizeof *a);
}

static void node_clear(kl_node *n) {
  free(n->name);
  free(n->src);
  free(n->in);
  free(n->out);
  for (int i = 0; i < n->n_attrs; i++) kl_attr_clear(&n->attrs[i]);
  free(n->attrs);
}

static void value_clear(kl_value *v) {
  free(v->name);
  if (!v->borrowed) free(v->data);
}

void kl_graph_free(kl_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_values; i++) value_clear(&g->values[i]);
  for (int i = 0; i < g->n_nodes; i++) node_clear(&g->nodes[i]);
  for (int i = 0; i < g->n_symbols; i++) free(g->symbols[i]);
  free(g->values);
  free(g->nodes);
  free(g->inputs);
  free(g->outputs);
  free(g->symbols);
  free(g->source);
  kl_strmap_free(g->names);
  if (g->uses) kl_graph_uses_reset(g);
  free(g->uses);
  free(g);
}

/* ---- copying ---- */

/* *dst = a copy of n bytes at src (NULL stays NULL); false when out of memory. */
static bool copy_bytes(void **dst, const void *src, size_t n) {
  *dst = NULL;
  if (!src) return true;
  if (!(*dst = malloc(n ? n : 1))) return false;
  if (n) memcpy(*dst, src, n);
  return true;
}

/* d (zeroed) = a deep copy of s; on failure d holds what was copied (kl_attr_clear). */
static bool attr_copy(kl_attr *d, const kl_attr *s) {
  d->kind = s->kind;
  d->n = s->n;
  d->i = s->i;
  d->f = s->f;
  if (!(d->name = strdup(s->name))) return false;
  if (s->s && !(d->s = strdup(s->s))) return false;
  if (!copy_bytes((void **)&d->ints, s->ints, sizeof(int64_t) * (size_t)s->n) ||
      !copy_bytes((void **)&d->floats, s->floats, sizeof(float) * (size_t)s->n))
    return false;
  if (s->strings) {
    if (!(d->strings = calloc((size_t)s->n + 1, sizeof(char *)))) return false;
    for (int k = 0; k < s->n; k++)
      if (!(d->strings[k] = strdup(s->strings[k]))) return false;
  }
  if (s->t) {
    if (!(d->t = malloc(sizeof *d->t))) return false;
    *d->t = *s->t;
    if (!copy_bytes(&d->t->data, s->t->data, kl_tensor_nbytes(s->t))) return false;
  }
  if (s->g && !(d->g = kl_graph_copy(s->g))) return false;
  return true;
}

/* d (zeroed) = a deep copy of s; on failure d holds what was copied (node_clear). */
static bool node_copy(kl_node *d, const kl_node *s) {
  d->op = s->op;
  d->n_in = s->n_in;
  d->n_out = s->n_out;
  if (!(d->name = dup_str(s->name)) || !(d->src = dup_str(s->src)) ||
      !(d->in = malloc(sizeof(int) * (size_t)(s->n_in ? s->n_in : 1))) ||
      !(d->out = malloc(sizeof(int) * (size_t)(s->n_out ? s->n_out : 1))))
    return false;
  if (s->n_in) memcpy(d->in, s->in, sizeof(int) * (size_t)s->n_in);
  if (s->n_out) memcpy(d->out, s->out, sizeof(int) * (size_t)s->n_out);
  if (s->n_attrs && !(d->attrs = calloc((size_t)s->n_attrs, sizeof(kl_attr)))) return false;
  for (int k = 0; k < s->n_attrs; k++) {
    d->n_attrs = k + 1;
    if (!attr_copy(&d->attrs[k], &s->attrs[k])) return false;
  }
  return true;
}

/* c's values = copies of g's, under the same ids and names. */
static bool values_copy(kl_graph *c, const kl_graph *g) {
  if (!reserve((void **)&c->values, &c->cap_values, g->n_values, sizeof(kl_value)))
    return false;
  for (int i = 0; i < g->n_values; i++) {
    const kl_value *s = &g->values[i];
    kl_value *d = &c->values[i];
    *d = *s;
    d->name = NULL;
    if (!s->borrowed) d->data = NULL;
    c->n_values = i + 1;
    if (!(d->name = strdup(s->name)) || !kl_strmap_put(c->names, d->name, i)) return false;
    if (!s->borrowed && !copy_bytes(&d->data, s->data, s->nbytes)) return false;
  }
  return true;
}

/* Every field of kl_graph (ir.h) into c, a new graph: the name map as the values are
 * copied; the readers index stays kl_graph_new's, empty (made on demand). */
static bool graph_copy(kl_graph *c, const kl_graph *g) {
  if (!values_copy(c, g)) return false;
  if (!reserve((void **)&c->nodes, &c->cap_nodes, g->n_nodes, sizeof(kl_node))) return false;
  for (int i = 0; i < g->n_nodes; i++) {
    memset(&c->nodes[i], 0, sizeof c->nodes[i]);
    c->n_nodes = i + 1;
    if (!node_copy(&c->nodes[i], &g->nodes[i])) return false;
  }
  if (!copy_bytes((void **)&c->inputs, g->inputs, sizeof(int) * (size_t)g->n_inputs) ||
      !copy_bytes((void **)&c->outputs, g->outputs, sizeof(int) * (size_t)g->n_outputs))
    return false;
  c->n_inputs = g->n_inputs;
  c->n_outputs = g->n_outputs;
  if (g->n_symbols && !(c->symbols = calloc((size_t)g->n_symbols, sizeof(char *)))) return false;
  for (int i = 0; i < g->n_symbols; i++) {
    c->n_symbols = i + 1;
    if (!(c->symbols[i] = strdup(g->symbols[i]))) return false;
  }
  c->opset = g->opset;
  c->n_outer = g->n_outer;
  char *source = strdup(g->source);
  if (!source) return false;
  free(c->source);
  c->source = source;
  return true;
}

kl_graph *kl_graph_copy(const kl_graph *g) {
  kl_graph *c = kl_graph_new();
  if (c && !graph_copy(c, g)) {
    kl_graph_free(c);
    return NULL;
  }
  return c;
}

int kl_graph_find_value(const kl_graph *g, const char *name) {
  return name ? kl_strmap_get(g->names, name) : -1;
}

int kl_graph_add_value(kl_graph *g, const char *name, kl_err *e) {
  char fresh[32];
  if (!name || !*name) {
    /* a fresh name no source model is likely to use; loop past any that is taken */
    for (int k = g->n_values;; k++) {
      snprintf(fresh, sizeof fresh, "_v%d", k);
      if (kl_graph_find_value(g, fresh) < 0) break;
    }
    name = fresh;
  } else if (kl_graph_find_value(g, name) >= 0) {
    kl_fail(e, KILN_ERR_INVALID_MODEL, "value name '%s' is defined twice", name);
    return -1;
  }
  if (!reserve((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof(kl_value)))
    goto oom;
  kl_value *v = &g->values[g->n_values];
  memset(v, 0, sizeof *v);
  v->name = strdup(name);
  if (!v->name) goto oom;
  v->producer = -1;
  v->type.rank = -1;
  if (!kl_strmap_put(g->names, v->name, g->n_values)) {
    free(v->name);
    goto oom;
  }
  return g->n_values++;
oom:
  kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory adding value '%s'", name);
  return -1;
}

int kl_graph_add_const(kl_graph *g, const char *name, kl_dtype dtype, int rank,
                       const int64_t *dims, void *data, size_t nbytes, bool borrowed,
                       kl_err *e) {
  if (rank < 0 || rank > KL_MAX_RANK) {
    kl_fail(e, KILN_ERR_UNSUPPORTED, "constant '%s' has rank %d; kiln supports 0 to %d",
            name ? name : "", rank, KL_MAX_RANK);
    goto fail;
  }
  kl_type t = {.dtype = dtype};
  kl_type_set_shape(&t, rank, dims);
  int64_t numel;
  size_t want;
  if (!kl_type_numel(&t, &numel)) {
    kl_fail(e, KILN_ERR_LIMIT, "constant '%s': its dims are too large (their product, an "
            "empty dim counted as 1, is over 2^59)", name ? name : "");
    goto fail;
  }
  if (kl_mul_overflow_size((size_t)numel, kl_dtype_size(dtype), &want) || want != nbytes) {
    kl_fail(e, KILN_ERR_INTERNAL, "constant '%s': %zu bytes do not match its shape",
            name ? name : "", nbytes);
    goto fail;
  }
  int id = kl_graph_add_value(g, name, e);
  if (id < 0) goto fail;
  kl_value *v = &g->values[id];
  v->type = t;
  v->kind = KL_VALUE_CONST;
  v->data = data;
  v->nbytes = nbytes;
  v->borrowed = borrowed;
  return id;
fail:
  if (!borrowed) free(data);
  return -1;
}

int kl_graph_add_node(kl_graph *g, kl_op op, const char *name, int n_in, const int *in,
                      int n_out, const int *out, kl_err *e) {
  if (!reserve((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(kl_node)))
    goto oom;
  kl_node *n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->name = dup_str(name);
  n->src = dup_str(kl_op_name(op));
  n->in = malloc(sizeof(int) * (size_t)(n_in ? n_in : 1));
  n->out = malloc(sizeof(int) * (size_t)(n_out ? n_out : 1));
  if (!n->name || !n->src || !n->in || !n->out) {
    node_clear(n);
    goto oom;
  }
  if (n_in) memcpy(n->in, in, sizeof(int) * (size_t)n_in);
  if (n_out) memcpy(n->out, out, sizeof(int) * (size_t)n_out);
  n->n_in = n_in;
  n->n_out = n_out;
  for (int i = 0; i < n_out; i++)
    if (out[i] >= 0 && out[i] < g->n_values && g->values[out[i]].producer < 0)
      g->values[out[i]].producer = g->n_nodes;
  int id = g->n_nodes++;
  kl_graph_uses_node(g, id, true);
  return id;
oom:
  kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory adding node '%s'", name ? name : "");
  return -1;
}

void kl_graph_pop_node(kl_graph *g) {
  if (g->n_nodes == 0) return;
  kl_node *n = &g->nodes[g->n_nodes - 1];
  kl_graph_uses_node(g, g->n_nodes - 1, false);
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0 && g->values[n->out[k]].producer == g->n_nodes - 1)
      g->values[n->out[k]].producer = -1;
  node_clear(n);
  g->n_nodes--;
}

static kiln_status push_id(int **arr, int *n, int v, kl_err *e) {
  int *p = realloc(*arr, sizeof(int) * (size_t)(*n + 1));
  if (!p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  p[(*n)++] = v;
  *arr = p;
  return KILN_OK;
}

kiln_status kl_graph_add_input(kl_graph *g, int value, kl_err *e) {
  g->values[value].kind = KL_VALUE_INPUT;
  return push_id(&g->inputs, &g->n_inputs, value, e);
}

kiln_status kl_graph_add_output(kl_graph *g, int value, kl_err *e) {
  return push_id(&g->outputs, &g->n_outputs, value, e);
}

int kl_graph_symbol(kl_graph *g, const char *name) {
  for (int i = 0; i < g->n_symbols; i++)
    if (strcmp(g->symbols[i], name) == 0) return i;
  char **p = realloc(g->symbols, sizeof(char *) * (size_t)(g->n_symbols + 1));
  if (!p) return -1;
  g->symbols = p;
  if (!(p[g->n_symbols] = strdup(name))) return -1;
  return g->n_symbols++;
}

int kl_node_input_count(const kl_node *n) {
  int k = n->n_in;
  while (k > 0 && n->in[k - 1] == KL_ABSENT) k--;
  return k;
}

const char *kl_node_describe(const kl_graph *g, const kl_node *n, char *buf, size_t len) {
  (void)g;
  if (n->name && *n->name)
    snprintf(buf, len, "node '%s' (%s)", n->name, n->src ? n->src : kl_op_name(n->op));
  else
    snprintf(buf, len, "node #%d (%s)", (int)(n - g->nodes), n->src ? n->src : kl_op_name(n->op));
  return buf;
}

/* ---- types and tensors ---- */

kl_type kl_type_translate(kl_graph *to, const kl_graph *from, const kl_type *t) {
  kl_type out = *t;
  for (int d = 0; d < t->rank; d++)
    if (t->dims[d].size < 0 && t->dims[d].sym >= 0 && t->dims[d].sym < from->n_symbols)
      out.dims[d].sym = kl_graph_symbol(to, from->symbols[t->dims[d].sym]);
  return out;
}

void kl_type_set_shape(kl_type *t, int rank, const int64_t *dims) {
  t->rank = rank;
  for (int i = 0; i < rank && i < KL_MAX_RANK; i++) {
    t->dims[i].size = dims[i];
    t->dims[i].sym = -1;
  }
}

bool kl_type_is_concrete(const kl_type *t) {
  if (t->dtype == KL_UNDEFINED || t->rank < 0) return false;
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i].size < 0) return false;
  return true;
}

bool kl_type_same_dims(const kl_type *a, const kl_type *b) {
  if (!a || !b || a->rank != b->rank || a->rank < 0) return false;
  for (int i = 0; i < a->rank; i++)
    if (!kl_dim_equal(a->dims[i], b->dims[i])) return false;
  return true;
}

bool kl_dims_fit(int rank, const int64_t *dims, int64_t *numel) {
  int64_t n = 1, extent = 1;
  if (rank < 0) return false;
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0 || kl_mul_overflow_i64(n, dims[i], &n) ||
        kl_mul_overflow_i64(extent, dims[i] ? dims[i] : 1, &extent) || extent > KL_MAX_EXTENT)
      return false;
  *numel = n;
  return true;
}

bool kl_type_numel(const kl_type *t, int64_t *numel) {
  int64_t dims[KL_MAX_RANK];
  if (t->rank < 0 || t->rank > KL_MAX_RANK) return false;
  for (int i = 0; i < t->rank; i++) dims[i] = t->dims[i].size;
  return kl_dims_fit(t->rank, dims, numel);
}

bool kl_dim_equal(kl_dim a, kl_dim b) {
  if (a.size >= 0 || b.size >= 0) return a.size == b.size;
  return a.sym >= 0 && a.sym == b.sym;
}

int64_t kl_tensor_numel(const kl_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

size_t kl_tensor_nbytes(const kl_tensor *t) {
  return (size_t)kl_tensor_numel(t) * kl_dtype_size(t->dtype);
}

/* ---- toposort and compaction ---- */

/* A binary min-heap of node indexes: the ready node that came first in the source runs
 * first, so a graph already in order comes out unchanged and a dump follows the file. */
typedef struct ready_heap {
  int *v;
  int n;
} ready_heap;

static void heap_push(ready_heap *h, int x) {
  int i = h->n++;
  while (i > 0 && h->v[(i - 1) / 2] > x) {
    h->v[i] = h->v[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h->v[i] = x;
}

static int heap_pop(ready_heap *h) {
  int top = h->v[0], x = h->v[--h->n], i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && h->v[c + 1] < h->v[c]) c++;
    if (h->v[c] >= x) break;
    h->v[i] = h->v[c];
    i = c;
  }
  if (h->n) h->v[i] = x;
  return top;
}

/* The first producer of each value (-1 for none). */
static void find_producers(const kl_graph *g, int *producer) {
  for (int v = 0; v < g->n_values; v++) producer[v] = -1;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++) {
      int v = g->nodes[i].out[k];
      if (v >= 0 && v < g->n_values && producer[v] < 0) producer[v] = i;
    }
}

/* After Kahn's algorithm stalls, nodes with indeg > 0 are on a cycle or downstream of
 * one. Walking from any of them to the producer of a still-waiting input n times must
 * end on the cycle itself, which is what a message should name. */
static int node_on_cycle(const kl_graph *g, const int *producer, const int *indeg) {
  int i = 0;
  while (indeg[i] == 0) i++;
  for (int step = 0; step < g->n_nodes; step++) {
    const kl_node *nd = &g->nodes[i];
    for (int k = 0; k < nd->n_in; k++) {
      int v = nd->in[k];
      if (v >= 0 && v < g->n_values && producer[v] >= 0 && indeg[producer[v]] > 0) {
        i = producer[v];
        break;
      }
    }
  }
  return i;
}

/* Kahn's algorithm over producer edges, consumers kept as CSR (cstart/cons). */
kiln_status kl_graph_toposort(kl_graph *g, kl_err *e) {
  kl_graph_uses_reset(g); /* the nodes are renumbered */
  int n = g->n_nodes, nv = g->n_values;
  if (n == 0) return KILN_OK;
  int *indeg = calloc((size_t)n, sizeof(int));
  int *order = malloc(sizeof(int) * (size_t)n);
  int *producer = malloc(sizeof(int) * (size_t)(nv ? nv : 1));
  int *cstart = calloc((size_t)nv + 1, sizeof(int));
  int *fill = calloc((size_t)nv + 1, sizeof(int));
  int *heap = malloc(sizeof(int) * (size_t)n);
  kl_node *sorted = malloc(sizeof(kl_node) * (size_t)n);
  int total = 0;
  for (int i = 0; i < n; i++) total += g->nodes[i].n_in;
  int *cons = malloc(sizeof(int) * (size_t)(total ? total : 1));
  kiln_status st = KILN_OK;
  if (!indeg || !order || !producer || !cstart || !fill || !heap || !sorted || !cons) {
    st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory sorting the graph");
    goto done;
  }
  find_producers(g, producer);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v >= 0 && v < nv && producer[v] >= 0) {
        indeg[i]++;
        cstart[v + 1]++;
      }
    }
  for (int v = 0; v < nv; v++) cstart[v + 1] += cstart[v];
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v >= 0 && v < nv && producer[v] >= 0) cons[cstart[v] + fill[v]++] = i;
    }
  ready_heap h = {heap, 0};
  int done_n = 0;
  for (int i = 0; i < n; i++)
    if (indeg[i] == 0) heap_push(&h, i);
  while (h.n) {
    int i = heap_pop(&h);
    order[done_n++] = i;
    for (int k = 0; k < g->nodes[i].n_out; k++) {
      int v = g->nodes[i].out[k];
      if (v < 0 || v >= nv || producer[v] != i) continue;
      for (int c = cstart[v]; c < cstart[v + 1]; c++)
        if (--indeg[cons[c]] == 0) heap_push(&h, cons[c]);
    }
  }
  if (done_n < n) {
    char d[256];
    int i = node_on_cycle(g, producer, indeg);
    st = kl_fail(e, KILN_ERR_INVALID_MODEL, "the graph has a cycle through %s",
                 kl_node_describe(g, &g->nodes[i], d, sizeof d));
    goto done;
  }
  for (int i = 0; i < n; i++) sorted[i] = g->nodes[order[i]];
  memcpy(g->nodes, sorted, sizeof(kl_node) * (size_t)n);
  find_producers(g, producer);
  for (int v = 0; v < nv; v++) g->values[v].producer = producer[v];
done:
  free(indeg);
  free(order);
  free(producer);
  free(cstart);
  free(fill);
  free(heap);
  free(sorted);
  free(cons);
  return st;
}

/* Drop nodes none of whose outputs reach a graph output, then values nothing refers
 * to, renumbering ids. Graph inputs are kept even when unused (they are the API). */
kiln_status kl_graph_compact(kl_graph *g, kl_err *e) {
  kl_graph_uses_reset(g); /* the nodes and values are renumbered */
  bool *live_v = calloc((size_t)g->n_values + 1, 1);
  bool *live_n = calloc((size_t)g->n_nodes + 1, 1);
  int *remap = malloc(sizeof(int) * ((size_t)g->n_values + 1));
  if (!live_v || !live_n || !remap) {
    free(live_v);
    free(live_n);
    free(remap);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory compacting the graph");
  }
  for (int i = 0; i < g->n_outputs; i++) live_v[g->outputs[i]] = true;
  for (int i = 0; i < g->n_inputs; i++) live_v[g->inputs[i]] = true;
  /* nodes are topologically sorted: walk backwards */
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    kl_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_out && !live_n[i]; k++)
      if (n->out[k] >= 0 && live_v[n->out[k]]) live_n[i] = true;
    if (!live_n[i]) continue;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) live_v[n->in[k]] = true;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) live_v[n->out[k]] = true;
  }
  int nv = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (!live_v[v]) {
      value_clear(&g->values[v]);
      remap[v] = -1;
      continue;
    }
    remap[v] = nv;
    g->values[nv++] = g->values[v];
  }
  g->n_values = nv;
  int nn = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    if (!live_n[i]) {
      node_clear(&g->nodes[i]);
      continue;
    }
    kl_node *n = &g->nodes[nn];
    *n = g->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) n->in[k] = remap[n->in[k]];
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) n->out[k] = remap[n->out[k]];
    nn++;
  }
  g->n_nodes = nn;
  for (int i = 0; i < g->n_inputs; i++) g->inputs[i] = remap[g->inputs[i]];
  for (int i = 0; i < g->n_outputs; i++) g->outputs[i] = remap[g->outputs[i]];
  kl_strmap_clear(g->names);
  kiln_status st = KILN_OK;
  for (int v = 0; v < g->n_values; v++) {
    g->values[v].producer = -1;
    if (!kl_strmap_put(g->names, g->values[v].name, v))
      st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory compacting the graph");
  }
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++) {
      int v = g->nodes[i].out[k];
      if (v >= 0 && g->values[v].producer < 0) g->values[v].producer = i;
    }
  free(live_v);
  free(live_n);
  free(remap);
  return st;
}
