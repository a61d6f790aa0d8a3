#include "ir/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
  const char *key;
  int value;
} slot;

struct kl_strmap {
  slot *slots;
  size_t cap, len; /* cap is a power of two */
};

static uint64_t hash_str(const char *s) { /* FNV-1a */
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

kl_strmap *kl_strmap_new(void) { return calloc(1, sizeof(kl_strmap)); }

void kl_strmap_free(kl_strmap *m) {
  if (!m) return;
  free(m->slots);
  free(m);
}

void kl_strmap_clear(kl_strmap *m) {
  if (m->slots) memset(m->slots, 0, m->cap * sizeof(slot));
  m->len = 0;
}

static slot *find_slot(slot *slots, size_t cap, const char *key) {
  size_t i = hash_str(key) & (cap - 1);
  while (slots[i].key && strcmp(slots[i].key, key) != 0) i = (i + 1) & (cap - 1);
  return &slots[i];
}

static bool grow(kl_strmap *m) {
  size_t cap = m->cap ? m->cap * 2 : 64;
  slot *slots = calloc(cap, sizeof(slot));
  if (!slots) return false;
  for (size_t i = 0; i < m->cap; i++)
    if (m->slots[i].key) *find_slot(slots, cap, m->slots[i].key) = m->slots[i];
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  return true;
}

bool kl_strmap_put(kl_strmap *m, const char *key, int value) {
  if ((m->len + 1) * 2 > m->cap && !grow(m)) return false;
  slot *s = find_slot(m->slots, m->cap, key);
  if (!s->key) {
    s->key = key;
    m->len++;
  }
  s->value = value;
  return true;
}

int kl_strmap_get(const kl_strmap *m, const char *key) {
  if (!m->cap) return -1;
  const slot *s = find_slot(m->slots, m->cap, key);
  return s->key ? s->value : -1;
}
