/* Common subexpression elimination. First constants: two small constants with the same
 * dtype, shape and bytes become one (exporters write the same 0.5 or axes list many
 * times). Then nodes, in topological order: a node with the same op, inputs and
 * attributes as an earlier one is replaced by it, so whole duplicated chains go in one
 * walk. Nodes whose outputs are graph outputs stay (their names are the API), and so
 * do random ops.
 *
 *   a = Shape(x); b = Shape(x); Concat(a, b)     becomes     a = Shape(x); Concat(a, a)
 */
#include "passes/rewrite.h"

#include <stdlib.h>
#include <string.h>

#define MAX_CONST_BYTES 65536 /* larger constants are weights: not worth hashing */

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ULL; }

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = mix(h, b[i]);
  return h;
}

static uint64_t hash_const(const kl_value *v) {
  uint64_t h = mix(0xcbf29ce484222325ULL, (uint64_t)v->type.dtype);
  for (int i = 0; i < v->type.rank; i++) h = mix(h, (uint64_t)v->type.dims[i].size);
  return hash_bytes(h, v->data, v->nbytes);
}

static bool same_const(const kl_value *a, const kl_value *b) {
  if (a->type.dtype != b->type.dtype || a->type.rank != b->type.rank || a->nbytes != b->nbytes)
    return false;
  for (int i = 0; i < a->type.rank; i++)
    if (a->type.dims[i].size != b->type.dims[i].size) return false;
  return a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0;
}

static bool same_attr(const kl_attr *a, const kl_attr *b) {
  if (a->kind != b->kind || a->n != b->n) return false;
  switch (a->kind) {
  case KL_ATTR_INT: return a->i == b->i;
  case KL_ATTR_FLOAT: return memcmp(&a->f, &b->f, sizeof a->f) == 0;
  case KL_ATTR_STRING: return strcmp(a->s, b->s) == 0;
  case KL_ATTR_INTS: return a->n == 0 || memcmp(a->ints, b->ints, sizeof(int64_t) * (size_t)a->n) == 0;
  case KL_ATTR_FLOATS: return a->n == 0 || memcmp(a->floats, b->floats, sizeof(float) * (size_t)a->n) == 0;
  case KL_ATTR_STRINGS:
    for (int i = 0; i < a->n; i++)
      if (strcmp(a->strings[i], b->strings[i]) != 0) return false;
    return true;
  case KL_ATTR_TENSOR: {
    const kl_tensor *x = a->t, *y = b->t;
    if (x->dtype != y->dtype || x->rank != y->rank) return false;
    for (int i = 0; i < x->rank; i++)
      if (x->dims[i] != y->dims[i]) return false;
    size_t n = kl_tensor_nbytes(x);
    return n == 0 || memcmp(x->data, y->data, n) == 0;
  }
  default: return false;
  }
}

static bool same_node(const kl_node *a, const kl_node *b) {
  if (a->op != b->op || a->n_in != b->n_in || a->n_out != b->n_out || a->n_attrs != b->n_attrs)
    return false;
  for (int k = 0; k < a->n_in; k++)
    if (a->in[k] != b->in[k]) return false;
  for (int i = 0; i < a->n_attrs; i++) {
    const kl_attr *other = kl_node_attr(b, a->attrs[i].name);
    if (!other || !same_attr(&a->attrs[i], other)) return false;
  }
  return true;
}

static uint64_t hash_node(const kl_node *n) {
  uint64_t h = mix(0xcbf29ce484222325ULL, (uint64_t)n->op);
  for (int k = 0; k < n->n_in; k++) h = mix(h, (uint64_t)(int64_t)n->in[k]);
  return mix(h, (uint64_t)n->n_attrs);
}

/* An open-addressing set of ids, keyed by a hash the caller computes. */
typedef struct id_table {
  int *slot;
  uint64_t *key;
  size_t cap;
} id_table;

static kiln_status table_init(id_table *t, int count, kl_err *e) {
  t->cap = 16;
  while (t->cap < (size_t)count * 2) t->cap *= 2;
  t->slot = malloc(sizeof(int) * t->cap);
  t->key = malloc(sizeof(uint64_t) * t->cap);
  if (!t->slot || !t->key) {
    free(t->slot);
    free(t->key);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for common subexpressions");
  }
  for (size_t i = 0; i < t->cap; i++) t->slot[i] = -1;
  return KILN_OK;
}

static void table_free(id_table *t) {
  free(t->slot);
  free(t->key);
}

/* The first id stored under key for which same(ctx, id, cand) holds; else stores cand
 * and returns -1. */
static int table_find_or_add(id_table *t, uint64_t key, int cand,
                             bool (*same)(const kl_graph *, int, int), const kl_graph *g) {
  size_t i = (size_t)key & (t->cap - 1);
  for (; t->slot[i] >= 0; i = (i + 1) & (t->cap - 1))
    if (t->key[i] == key && same(g, t->slot[i], cand)) return t->slot[i];
  t->slot[i] = cand;
  t->key[i] = key;
  return -1;
}

static bool same_const_id(const kl_graph *g, int a, int b) {
  return same_const(&g->values[a], &g->values[b]);
}

static bool same_node_id(const kl_graph *g, int a, int b) {
  return same_node(&g->nodes[a], &g->nodes[b]);
}

static kiln_status merge_consts(kl_graph *g, int *changed, kl_err *e) {
  id_table t;
  kiln_status st = table_init(&t, g->n_values, e);
  if (st != KILN_OK) return st;
  for (int v = 0; v < g->n_values; v++) {
    const kl_value *val = &g->values[v];
    if (val->kind != KL_VALUE_CONST || val->nbytes > MAX_CONST_BYTES) continue;
    int first = table_find_or_add(&t, hash_const(val), v, same_const_id, g);
    if (first >= 0 && kl_rw_replace_uses(g, v, first) > 0) (*changed)++;
  }
  table_free(&t);
  return KILN_OK;
}

static bool outputs_free(const kl_graph *g, const kl_node *n) {
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] < 0 || kl_rw_is_output(g, n->out[k])) return false;
  return true;
}

kiln_status kl_pass_cse(kl_graph *g, const kl_pass_config *cfg, int *changed, kl_err *e) {
  (void)cfg;
  kiln_status st = merge_consts(g, changed, e);
  id_table t;
  if (st == KILN_OK) st = table_init(&t, g->n_nodes, e);
  if (st != KILN_OK) return st;
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    if (n->n_out == 0 || !kl_rw_deterministic(n->op)) continue;
    int first = table_find_or_add(&t, hash_node(n), i, same_node_id, g);
    if (first < 0 || !outputs_free(g, n)) continue;
    for (int k = 0; k < n->n_out; k++) kl_rw_replace_uses(g, n->out[k], g->nodes[first].out[k]);
    kl_rw_remove(g, i);
    (*changed)++;
  }
  table_free(&t);
  return kl_rw_finish(g, *changed, e);
}
