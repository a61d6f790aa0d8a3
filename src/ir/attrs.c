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
