/* The per-node cache of the oneDNN kernels (dnnl_attention.c, dnnl_grad.c): one entry
 * (primitives, memories) per recent set of input shapes, in a fixed number of slots.
 * A lookup that finds no entry for the node's input shapes builds one in the least
 * recently used slot (an empty slot first), freeing what that slot held.
 *
 * The entries are the owner's: an array of KL_DNNL_CACHE_SLOTS entries of entry_size
 * bytes, zeroed before the first use; the cache keeps, per slot, the shapes it was
 * built for and when it was last used. The free callback must leave an entry as
 * zeroed (ready to be built again) and accept one that is already so. */
#ifndef KL_CPU_DNNL_CACHE_H
#define KL_CPU_DNNL_CACHE_H

#include "ir/ir.h"

#define KL_DNNL_CACHE_SLOTS 4   /* entries kept per node */
#define KL_DNNL_CACHE_MAX_KEY 4 /* inputs in a key, at most */

/* Builds entry (zeroed) for c's input shapes; owner is what kl_dnnl_cache_init was
 * given. On an error c->e says what failed, and the cache frees the entry. */
typedef kiln_status (*kl_dnnl_cache_build_fn)(void *owner, void *entry, kl_kernel_ctx *c);
typedef void (*kl_dnnl_cache_free_fn)(void *entry);

typedef struct kl_dnnl_cache_slot {
  bool used;
  uint64_t last_use;
  int rank[KL_DNNL_CACHE_MAX_KEY]; /* -1: the input is absent */
  int64_t dims[KL_DNNL_CACHE_MAX_KEY][KL_MAX_RANK];
} kl_dnnl_cache_slot;

typedef struct kl_dnnl_cache {
  void *entries; /* the owner's KL_DNNL_CACHE_SLOTS entries */
  size_t entry_size;
  int n_key; /* inputs 0 .. n_key-1 make the key */
  void *owner;
  kl_dnnl_cache_build_fn build_entry;
  kl_dnnl_cache_free_fn free_entry;
  uint64_t clock;
  kl_dnnl_cache_slot slots[KL_DNNL_CACHE_SLOTS];
} kl_dnnl_cache;

/* A cache over `entries` keyed by the shapes of inputs 0 .. n_key-1 (at most
 * KL_DNNL_CACHE_MAX_KEY). */
void kl_dnnl_cache_init(kl_dnnl_cache *cache, void *entries, size_t entry_size, int n_key,
                        void *owner, kl_dnnl_cache_build_fn build_entry,
                        kl_dnnl_cache_free_fn free_entry);
/* The entry for c's input shapes in *entry, built when new. */
kiln_status kl_dnnl_cache_get(kl_dnnl_cache *cache, kl_kernel_ctx *c, void **entry);
/* Frees every entry (the owner frees the array). */
void kl_dnnl_cache_clear(kl_dnnl_cache *cache);

#endif
