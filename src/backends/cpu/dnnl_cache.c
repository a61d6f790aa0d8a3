/* The per-node entry cache of the oneDNN kernels (dnnl_cache.h). */
#include "backends/cpu/dnnl_cache.h"

#include <assert.h>
#include <string.h>

void kl_dnnl_cache_init(kl_dnnl_cache *cache, void *entries, size_t entry_size, int n_key,
                        void *owner, kl_dnnl_cache_build_fn build_entry,
                        kl_dnnl_cache_free_fn free_entry) {
  assert(n_key >= 0 && n_key <= KL_DNNL_CACHE_MAX_KEY);
  memset(cache, 0, sizeof *cache);
  cache->entries = entries;
  cache->entry_size = entry_size;
  cache->n_key = n_key;
  cache->owner = owner;
  cache->build_entry = build_entry;
  cache->free_entry = free_entry;
}

static void *entry_at(const kl_dnnl_cache *cache, int i) {
  return (char *)cache->entries + (size_t)i * cache->entry_size;
}

/* Frees slot i's entry; the slot is empty again (last used never: an empty slot is
 * always chosen before a used one). */
static void slot_free(kl_dnnl_cache *cache, int i) {
  cache->free_entry(entry_at(cache, i));
  memset(&cache->slots[i], 0, sizeof cache->slots[i]);
}

/* Input k of c, NULL when absent. */
static const kl_tensor *key_input(const kl_kernel_ctx *c, int k) {
  return k < c->n_in ? c->in[k] : NULL;
}

static bool matches(const kl_dnnl_cache *cache, const kl_dnnl_cache_slot *s,
                    const kl_kernel_ctx *c) {
  for (int k = 0; k < cache->n_key; k++) {
    const kl_tensor *t = key_input(c, k);
    if ((t ? t->rank : -1) != s->rank[k]) return false;
    if (t && memcmp(s->dims[k], t->dims, sizeof(int64_t) * (size_t)t->rank) != 0) return false;
  }
  return true;
}

kiln_status kl_dnnl_cache_get(kl_dnnl_cache *cache, kl_kernel_ctx *c, void **entry) {
  int v = 0; /* the slot to build in: an empty one, else the least recently used */
  cache->clock++;
  for (int i = 0; i < KL_DNNL_CACHE_SLOTS; i++) {
    kl_dnnl_cache_slot *s = &cache->slots[i], *victim = &cache->slots[v];
    if (s->used && matches(cache, s, c)) {
      s->last_use = cache->clock;
      *entry = entry_at(cache, i);
      return KILN_OK;
    }
    if (!s->used ? victim->used : s->last_use < victim->last_use) v = i;
  }
  void *en = entry_at(cache, v);
  slot_free(cache, v);
  kiln_status st = cache->build_entry(cache->owner, en, c);
  if (st != KILN_OK) {
    slot_free(cache, v);
    return st;
  }
  kl_dnnl_cache_slot *s = &cache->slots[v];
  s->used = true;
  s->last_use = cache->clock;
  for (int k = 0; k < cache->n_key; k++) {
    const kl_tensor *t = key_input(c, k);
    s->rank[k] = t ? t->rank : -1;
    if (t) memcpy(s->dims[k], t->dims, sizeof(int64_t) * (size_t)t->rank);
  }
  *entry = en;
  return KILN_OK;
}

void kl_dnnl_cache_clear(kl_dnnl_cache *cache) {
  for (int i = 0; i < KL_DNNL_CACHE_SLOTS; i++) slot_free(cache, i);
}
