/* A string -> int map (open addressing), for name lookups while building graphs. */
#ifndef KL_STRMAP_H
#define KL_STRMAP_H

#include <stdbool.h>

typedef struct kl_strmap kl_strmap;

kl_strmap *kl_strmap_new(void);
void kl_strmap_free(kl_strmap *m);
/* The key is not copied: it must outlive the map entry. Returns false on out of
 * memory. An existing key gets the new value. */
bool kl_strmap_put(kl_strmap *m, const char *key, int value);
/* The value, or -1 when absent. */
int kl_strmap_get(const kl_strmap *m, const char *key);
void kl_strmap_clear(kl_strmap *m);

#endif
