/* The static memory plan (memplan.h): storages, lifetimes and arena offsets. */
#include "runtime/memplan.h"

#include <stdlib.h>
#include <string.h>

kiln_status kl_memplan_init(kl_memplan *p, const kl_graph *g, kl_err *e) {
  memset(p, 0, sizeof *p);
  size_t nv = (size_t)g->n_values + 1, nn = (size_t)g->n_nodes + 2;
  p->n_values = g->n_values;
  p->n_nodes = g->n_nodes;
  p->last_use = calloc(nv, sizeof *p->last_use);
  p->store = calloc(nv, sizeof *p->store);
  p->view_of = calloc(nv, sizeof *p->view_of);
  p->inplace_of = calloc(nv, sizeof *p->inplace_of);
  p->bytes = calloc(nv, sizeof *p->bytes);
  p->stores = calloc(nv, sizeof *p->stores);
  p->release = calloc(nv, sizeof *p->release);
  p->release_at = calloc(nn, sizeof *p->release_at);
  p->order = calloc(nv, sizeof *p->order);
  p->placed = calloc(nv, sizeof *p->placed);
  if (!p->last_use || !p->store || !p->view_of || !p->inplace_of || !p->bytes ||
      !p->stores || !p->release || !p->release_at || !p->order || !p->placed)
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the memory plan");
  for (int v = 0; v < g->n_values; v++) p->last_use[v] = g->values[v].producer;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] >= 0) p->last_use[g->nodes[i].in[k]] = i;
  for (int i = 0; i < g->n_outputs; i++) p->last_use[g->outputs[i]] = g->n_nodes;
  return kl_memplan_build(p, g, NULL, NULL, NULL, e);
}

void kl_memplan_clear(kl_memplan *p) {
  free(p->last_use);
  free(p->store);
  free(p->view_of);
  free(p->inplace_of);
  free(p->bytes);
  free(p->stores);
  free(p->release);
  free(p->release_at);
  free(p->order);
  free(p->placed);
  memset(p, 0, sizeof *p);
}

static int max_int(int a, int b) { return a > b ? a : b; }

static bool same_type(const kl_type *a, const kl_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d].size != b->dims[d].size) return false;
  return true;
}

static int new_store(kl_memplan *p, int v, int node, size_t bytes) {
  int s = p->n_stores++;
  p->stores[s] = (kl_mem_store){0, bytes, node, p->last_use[v]};
  if (p->stores[s].last < node) p->stores[s].last = node; /* made, never read */
  return s;
}

/* out[0] of a view node shows in[0]'s bytes. Allowed unless out[0] is a graph output
 * over a graph input or constant (those bytes are not the session's to keep). */
static bool try_view(kl_memplan *p, const kl_graph *g, const kl_node *n, int v,
                     const size_t *bytes, const kl_type *types) {
  int u = n->in[0];
  if (u < 0 || bytes[u] != bytes[v] || types[u].dtype != types[v].dtype) return false;
  int s = p->store[u];
  if (s < 0 && p->last_use[v] == g->n_nodes) return false;
  p->store[v] = s;
  p->view_of[v] = u;
  if (s >= 0) p->stores[s].last = max_int(p->stores[s].last, p->last_use[v]);
  return true;
}

/* Whether storage s is read by node n through an input other than value u. */
static bool read_elsewhere(const kl_memplan *p, const kl_node *n, int s, int u) {
  for (int k = 0; k < n->n_in; k++) {
    int w = n->in[k];
    if (w >= 0 && w != u && p->store[w] == s) return true;
  }
  return false;
}

/* out[0] takes over the storage of an input that dies at this node. */
static bool try_inplace(kl_memplan *p, const kl_node *n, int node, int v, unsigned mask,
                        const size_t *bytes, const kl_type *types) {
  for (int k = 0; k < n->n_in && k < 32; k++) {
    int u = n->in[k];
    if (!(mask & (1u << k)) || u < 0 || p->store[u] < 0) continue;
    int s = p->store[u];
    if (p->stores[s].last != node || bytes[u] != bytes[v] || !same_type(&types[u], &types[v]) ||
        read_elsewhere(p, n, s, u))
      continue;
    p->store[v] = s;
    p->inplace_of[v] = u;
    p->stores[s].last = max_int(node, p->last_use[v]);
    return true;
  }
  return false;
}

static void assign_stores(kl_memplan *p, const kl_graph *g, const size_t *bytes,
                          const kl_type *types, const kl_memplan_node *nodes) {
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      if (v < 0) continue;
      p->bytes[v] = bytes ? bytes[v] : 0;
      if (bytes && k == 0 && nodes[i].view && try_view(p, g, n, v, bytes, types)) continue;
      if (bytes && k == 0 && try_inplace(p, n, i, v, nodes[i].inplace, bytes, types)) continue;
      p->store[v] = new_store(p, v, i, p->bytes[v]);
    }
  }
}

static size_t round_up(size_t n) {
  return (n + KL_MEMPLAN_ALIGN - 1) / KL_MEMPLAN_ALIGN * KL_MEMPLAN_ALIGN;
}

/* Storages by size, largest first (insertion sort: it allocates nothing). */
static void sort_by_size(kl_memplan *p) {
  for (int i = 0; i < p->n_stores; i++) {
    int s = i, j = i;
    while (j > 0 && p->stores[p->order[j - 1]].size < p->stores[s].size) {
      p->order[j] = p->order[j - 1];
      j--;
    }
    p->order[j] = s;
  }
}

static bool overlap(const kl_mem_store *a, const kl_mem_store *b) {
  return a->first <= b->last && b->first <= a->last;
}

/* The smallest gap that fits s among the placed storages it overlaps in time (placed
 * is sorted by offset), else the end of them. */
static size_t best_offset(const kl_memplan *p, int n_placed, const kl_mem_store *s) {
  size_t size = round_up(s->size), end = 0, best = 0, best_gap = SIZE_MAX;
  for (int i = 0; i < n_placed; i++) {
    const kl_mem_store *o = &p->stores[p->placed[i]];
    if (!overlap(o, s) || o->size == 0) continue;
    if (o->offset >= end && o->offset - end >= size && o->offset - end < best_gap) {
      best_gap = o->offset - end;
      best = end;
    }
    size_t o_end = o->offset + round_up(o->size);
    if (o_end > end) end = o_end;
  }
  return best_gap != SIZE_MAX ? best : end;
}

static kiln_status place_stores(kl_memplan *p, kl_err *e) {
  sort_by_size(p);
  int n_placed = 0;
  p->arena_bytes = 0;
  for (int i = 0; i < p->n_stores; i++) {
    kl_mem_store *s = &p->stores[p->order[i]];
    if (s->size > SIZE_MAX / 2)
      return kl_fail(e, KILN_ERR_LIMIT, "a tensor of %zu bytes is too large to plan", s->size);
    s->offset = s->size ? best_offset(p, n_placed, s) : 0;
    size_t end = s->offset + round_up(s->size);
    if (end < s->offset) return kl_fail(e, KILN_ERR_LIMIT, "the memory plan overflows");
    if (end > p->arena_bytes) p->arena_bytes = end;
    int j = n_placed++; /* keep placed sorted by offset */
    while (j > 0 && p->stores[p->placed[j - 1]].offset > s->offset) {
      p->placed[j] = p->placed[j - 1];
      j--;
    }
    p->placed[j] = p->order[i];
  }
  return KILN_OK;
}

/* release lists: each value in a storage is listed at the storage's last node. */
static void list_releases(kl_memplan *p) {
  int nn = p->n_nodes;
  memset(p->release_at, 0, sizeof(int) * (size_t)(nn + 2));
  for (int v = 0; v < p->n_values; v++)
    if (p->store[v] >= 0) p->release_at[p->stores[p->store[v]].last + 1]++;
  for (int i = 0; i <= nn; i++) p->release_at[i + 1] += p->release_at[i];
  for (int v = 0; v < p->n_values; v++) { /* fill, counting up from each start */
    if (p->store[v] < 0) continue;
    int at = p->stores[p->store[v]].last;
    p->release[p->release_at[at]++] = v;
  }
  for (int i = nn; i > 0; i--) p->release_at[i] = p->release_at[i - 1];
  p->release_at[0] = 0;
}

kiln_status kl_memplan_build(kl_memplan *p, const kl_graph *g, const size_t *bytes,
                             const kl_type *types, const kl_memplan_node *nodes, kl_err *e) {
  for (int v = 0; v < p->n_values; v++) {
    p->store[v] = p->view_of[v] = p->inplace_of[v] = -1;
    p->bytes[v] = 0;
  }
  p->n_stores = 0;
  assign_stores(p, g, bytes, types, nodes);
  kiln_status st = place_stores(p, e);
  if (st != KILN_OK) return st;
  p->total_bytes = 0;
  for (int v = 0; v < p->n_values; v++)
    if (g->values[v].producer >= 0 &&
        kl_add_overflow_size(p->total_bytes, p->bytes[v], &p->total_bytes)) {
      p->total_bytes = SIZE_MAX;
      break;
    }
  list_releases(p);
  return KILN_OK;
}
