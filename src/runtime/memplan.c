/* The static memory plan (memplan.h): storages, lifetimes and arena offsets. */
#include "runtime/memplan.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* a sort key: a size or an offset, and its storage (place_stores) */
struct kl_mem_key {
  size_t key;
  int store;
};

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
  p->keys = calloc(nv, sizeof *p->keys);
  p->keys_tmp = calloc(nv, sizeof *p->keys_tmp);
  p->hits = calloc(nv, sizeof *p->hits);
  p->mark = calloc(nv, sizeof *p->mark);
  /* the time tree: leaves for nodes 0 .. n_nodes; an interval is at most two nodes a
   * level, so 2 (levels + 1) entries a storage */
  int levels = 0;
  p->tree_leaves = 1;
  while (p->tree_leaves < g->n_nodes + 1) p->tree_leaves *= 2, levels++;
  size_t tree = 2 * (size_t)p->tree_leaves;
  p->cap_ent = (int)(nv * 2 * (size_t)(levels + 1) < (size_t)INT32_MAX
                         ? nv * 2 * (size_t)(levels + 1) : (size_t)INT32_MAX);
  p->head = calloc(tree, sizeof *p->head);
  p->sub = calloc(tree, sizeof *p->sub);
  p->ent_store = calloc((size_t)p->cap_ent, sizeof *p->ent_store);
  p->ent_next = calloc((size_t)p->cap_ent, sizeof *p->ent_next);
  if (!p->last_use || !p->store || !p->view_of || !p->inplace_of || !p->bytes ||
      !p->stores || !p->release || !p->release_at || !p->order || !p->keys || !p->keys_tmp ||
      !p->hits || !p->mark || !p->head || !p->sub || !p->ent_store || !p->ent_next)
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
  free(p->keys);
  free(p->keys_tmp);
  free(p->hits);
  free(p->mark);
  free(p->head);
  free(p->sub);
  free(p->ent_store);
  free(p->ent_next);
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

/* ---- offsets ----
 * Storages are placed largest first, each at the smallest gap that fits it among the
 * placed ones it overlaps in time, else above them all. The placed ones are found in a
 * segment tree over time (node ranges): a storage is entered at the O(log n) tree nodes
 * whose ranges make up its lifetime, and those overlapping [first, last] are the ones
 * entered at tree nodes whose ranges meet it, found by descending only into subtrees
 * that hold any. A plan costs O(S log n + sum of the overlaps found), where comparing
 * every pair of storages took minutes on a graph of 40,000 nodes. */
/* Whether key x goes before y: by key, ascending (desc: descending), then by storage. */
static bool key_before(const struct kl_mem_key *x, const struct kl_mem_key *y, bool desc) {
  if (x->key != y->key) return desc ? x->key > y->key : x->key < y->key;
  return x->store < y->store;
}

/* Sorts k[0 .. n) through tmp (n keys): runs of 16 by insertion, then merged in
 * passes; stable, in O(n log n), allocating nothing (a build allocates nothing; glibc's
 * qsort may). */
static void sort_keys(struct kl_mem_key *k, struct kl_mem_key *tmp, int n, bool desc) {
  enum { RUN = 16 };
  for (int lo = 0; lo < n; lo += RUN) {
    int hi = lo + RUN < n ? lo + RUN : n;
    for (int i = lo + 1; i < hi; i++) {
      struct kl_mem_key t = k[i];
      int j = i;
      for (; j > lo && key_before(&t, &k[j - 1], desc); j--) k[j] = k[j - 1];
      k[j] = t;
    }
  }
  struct kl_mem_key *from = k, *to = tmp;
  for (int width = RUN; width < n; width *= 2) {
    for (int lo = 0; lo < n; lo += 2 * width) {
      int mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      int a = lo, b = mid, o = lo;
      while (a < mid && b < hi)
        to[o++] = key_before(&from[b], &from[a], desc) ? from[b++] : from[a++];
      while (a < mid) to[o++] = from[a++];
      while (b < hi) to[o++] = from[b++];
    }
    struct kl_mem_key *t = from;
    from = to;
    to = t;
  }
  if (from != k) memcpy(k, from, sizeof *k * (size_t)n);
}

/* Enters storage s (lifetime [a, b]) under tree node t, which covers [lo, hi]. */
static void tree_insert(kl_memplan *p, int t, int lo, int hi, int a, int b, int s) {
  if (b < lo || hi < a) return;
  p->sub[t]++;
  if (a <= lo && hi <= b) {
    if (p->n_ent < p->cap_ent) { /* (the bound in kl_memplan_init holds: never full) */
      p->ent_store[p->n_ent] = s;
      p->ent_next[p->n_ent] = p->head[t];
      p->head[t] = p->n_ent++;
    }
    return;
  }
  int mid = lo + (hi - lo) / 2;
  tree_insert(p, 2 * t, lo, mid, a, b, s);
  tree_insert(p, 2 * t + 1, mid + 1, hi, a, b, s);
}

/* Adds to p->hits (count *n) every entered storage whose lifetime meets [a, b]; *again
 * counts those the query before found too. */
static void tree_query(kl_memplan *p, int t, int lo, int hi, int a, int b, int *n,
                       int *again) {
  if (p->sub[t] == 0 || b < lo || hi < a) return;
  for (int at = p->head[t]; at >= 0; at = p->ent_next[at]) {
    int s = p->ent_store[at];
    if (p->mark[s] != p->stamp) {
      *again += p->mark[s] == p->stamp - 1;
      p->mark[s] = p->stamp;
      p->hits[(*n)++] = s;
    }
  }
  if (lo == hi) return;
  int mid = lo + (hi - lo) / 2;
  tree_query(p, 2 * t, lo, mid, a, b, n, again);
  tree_query(p, 2 * t + 1, mid + 1, hi, a, b, n, again);
}

/* The smallest gap that fits s among the placed storages it overlaps in time, else
 * the end of them. When they are the ones the storage before overlapped (storages
 * that live long, met by every short one after them), p->keys holds them in offset
 * order already (placed offsets never move): no sort. */
static size_t best_offset(kl_memplan *p, const kl_mem_store *s) {
  int n = 0, again = 0;
  if (p->stamp >= UINT_MAX - 1) { /* about to wrap: no mark may look current */
    memset(p->mark, 0, sizeof *p->mark * (size_t)p->n_stores);
    p->stamp = 1;
    p->prev_hits = -1;
  }
  p->stamp++;
  tree_query(p, 1, 0, p->tree_leaves - 1, s->first, s->last, &n, &again);
  if (n != p->prev_hits || again != n) {
    for (int i = 0; i < n; i++)
      p->keys[i] = (struct kl_mem_key){p->stores[p->hits[i]].offset, p->hits[i]};
    sort_keys(p->keys, p->keys_tmp, n, false);
  }
  p->prev_hits = n;
  size_t size = round_up(s->size), end = 0, best = 0, best_gap = SIZE_MAX;
  for (int i = 0; i < n; i++) {
    const kl_mem_store *o = &p->stores[p->keys[i].store];
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
  for (int i = 0; i < p->n_stores; i++) p->keys[i] = (struct kl_mem_key){p->stores[i].size, i};
  sort_keys(p->keys, p->keys_tmp, p->n_stores, true);
  for (int i = 0; i < p->n_stores; i++) p->order[i] = p->keys[i].store;
  memset(p->head, 0xff, sizeof *p->head * 2 * (size_t)p->tree_leaves); /* all -1 */
  memset(p->sub, 0, sizeof *p->sub * 2 * (size_t)p->tree_leaves);
  memset(p->mark, 0, sizeof *p->mark * (size_t)p->n_stores);
  p->stamp = 1; /* (marks of 0: found by no query) */
  p->prev_hits = -1;
  p->n_ent = 0;
  p->arena_bytes = 0;
  for (int i = 0; i < p->n_stores; i++) {
    kl_mem_store *s = &p->stores[p->order[i]];
    if (s->size > SIZE_MAX / 2)
      return kl_fail(e, KILN_ERR_LIMIT, "a tensor of %zu bytes is too large to plan", s->size);
    s->offset = s->size ? best_offset(p, s) : 0;
    size_t end = s->offset + round_up(s->size);
    if (end < s->offset) return kl_fail(e, KILN_ERR_LIMIT, "the memory plan overflows");
    if (end > p->arena_bytes) p->arena_bytes = end;
    if (s->size) tree_insert(p, 1, 0, p->tree_leaves - 1, s->first, s->last, p->order[i]);
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
