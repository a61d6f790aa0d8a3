/* A static memory plan: where each tensor of a run lives in one arena.
 *
 * From the sizes a run produced, every value made by a node gets a storage: its own,
 * its input's when the node is a view (Reshape and the like: the kernel need not run),
 * or the storage of an input that dies at the node when the kernel works in place.
 * Storages live from the node that makes them to the last use of any value in them
 * (the end of the run for graph outputs), and get arena offsets greedily, largest
 * first, each in the smallest gap left by the storages it overlaps in time.
 *
 * Graph inputs and constants are not in the arena (store -1); a view of one is fine
 * inside a run but never for a graph output, whose data must outlive the caller's
 * input buffers. */
#ifndef KL_MEMPLAN_H
#define KL_MEMPLAN_H

#include "ir/ir.h"

#define KL_MEMPLAN_ALIGN 64

/* What the chosen kernel of a node allows (see kl_cpu_choice). */
typedef struct kl_memplan_node {
  unsigned inplace; /* bit k: out[0] may share in[k]'s storage (same dtype and shape) */
  bool view;        /* out[0] may be in[0]'s bytes under a new shape */
} kl_memplan_node;

typedef struct kl_mem_store {
  size_t offset, size;
  int first, last; /* node range during which the storage holds a live value */
} kl_mem_store;

typedef struct kl_memplan {
  int n_values, n_nodes;
  int *last_use;  /* per value: last node reading it; n_nodes for graph outputs */
  int *store;     /* per value: its storage, -1 for graph inputs, constants, unmade */
  int *view_of;   /* per value: the value whose bytes it shows, else -1 */
  int *inplace_of;/* per value: the input whose storage it took over, else -1 */
  size_t *bytes;  /* per value: the size it was planned for */
  kl_mem_store *stores;
  int n_stores;
  /* Values whose storage ends after node i: release[release_at[i] .. release_at[i+1]);
   * i == n_nodes lists the storages that live to the end of the run. */
  int *release, *release_at;
  size_t arena_bytes;  /* the arena the offsets need */
  size_t total_bytes;  /* the sum of every planned value's size: the cost of no reuse */
  /* scratch for the offset assignment (place_stores in memplan.c), made by
   * kl_memplan_init so that a build allocates nothing */
  int *order;                 /* storages, largest first */
  struct kl_mem_key *keys, *keys_tmp; /* sort keys (per storage), and room to sort */
  int *hits;                  /* the placed storages overlapping one in time */
  unsigned *mark, stamp;      /* per storage: the query that last found it */
  int prev_hits;              /* how many the query before found, -1: none */
  int tree_leaves;            /* time steps, rounded up to a power of two */
  int *head, *sub;            /* per tree node: first entry, entries in its subtree */
  int *ent_store, *ent_next;  /* entries: a storage at a node, the node's next one */
  int n_ent, cap_ent;
} kl_memplan;

/* Allocates the plan's arrays for g and computes lifetimes; the plan then gives every
 * value made by a node a storage of its own of size 0 (build with bytes == NULL). */
kiln_status kl_memplan_init(kl_memplan *p, const kl_graph *g, kl_err *e);
void kl_memplan_clear(kl_memplan *p);

/* Plans g for the sizes in bytes[] and the types[] of a run (per value; graph inputs
 * and constants included), with the kernels' permissions in nodes[] (per node). With
 * bytes == NULL every value made by a node gets its own empty storage: nothing fits
 * and the run falls back to a buffer per value, freed after its last use. Allocates
 * nothing; fails only on an overflowing size. */
kiln_status kl_memplan_build(kl_memplan *p, const kl_graph *g, const size_t *bytes,
                             const kl_type *types, const kl_memplan_node *nodes, kl_err *e);

#endif
