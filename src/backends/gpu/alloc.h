/* The caching device allocator: one per device, between the GPU backend and the
 * device's own allocation calls (clCreateBuffer, zeMemAllocDevice), which are slow and
 * synchronising. It knows nothing of any device: it asks a small interface (kl_dev_iface)
 * for segments, large opaque allocations, and hands out blocks, byte ranges of them.
 *
 * Policy (docs/gpu.md):
 * - Every request is rounded up to a multiple of 512 B; a request of 0 bytes gets a
 *   512 B block of its own, so that every live block is distinct.
 * - Small requests (rounded size <= 1 MiB) come from 2 MiB segments, large ones from
 *   segments of the request rounded up to a multiple of 2 MiB. The two kinds of
 *   segment never share blocks: each has its own pool of cached free blocks.
 * - A request takes the best fit from its pool: the smallest free block that holds it
 *   (ties: the oldest segment, then the lowest offset), found in O(log n) in a
 *   size-ordered AVL tree. It is split when the rest is worth keeping (small pool: any
 *   rest, which is >= 512 B; large pool: a rest over 1 MiB); otherwise the caller gets
 *   the whole block, and block.size says so.
 * - A released block merges with free neighbours of its segment (blocks are kept in
 *   address order per segment), so a segment whose blocks are all free is one free block.
 * - When the device is out of memory, every free cached segment (one free block as big
 *   as the segment) goes back to the device and the device is asked once more; a second
 *   failure is KILN_ERR_OUT_OF_MEMORY with the request and the statistics in the message.
 *
 * Not thread-safe: one allocator per device, used under the lock of whoever owns it. */
#ifndef KL_GPU_ALLOC_H
#define KL_GPU_ALLOC_H

#include "base/status.h"

#include <stddef.h>
#include <stdint.h>

#define KL_DEV_ALLOC_ROUND ((size_t)512)               /* every block is a multiple */
#define KL_DEV_ALLOC_SMALL_MAX ((size_t)1 << 20)       /* largest small request */
#define KL_DEV_ALLOC_SMALL_SEGMENT ((size_t)2 << 20)   /* the small pool's segments */
#define KL_DEV_ALLOC_LARGE_ROUND ((size_t)2 << 20)     /* large segments: a multiple */
#define KL_DEV_ALLOC_LARGE_MIN_REST ((size_t)1 << 20)  /* large split: rest > this */
/* The largest request: its segment (a multiple of 2 MiB) still fits in a size_t.
 * Larger ones are KILN_ERR_LIMIT. */
#define KL_DEV_ALLOC_MAX_REQUEST (SIZE_MAX & ~(KL_DEV_ALLOC_LARGE_ROUND - 1))

/* What the allocator needs of a device. A segment is `bytes` of device memory behind
 * an opaque handle (a cl_mem); the allocator never looks inside it. */
typedef struct kl_dev_iface {
  void *ctx;
  /* Allocates a segment of exactly `bytes` (a multiple of 512). On failure it returns
   * the status, KILN_ERR_OUT_OF_MEMORY when the device has no room (the allocator then
   * releases its cache and tries once more; any other status is passed on as it is),
   * with a message in *e. */
  kiln_status (*seg_alloc)(void *ctx, size_t bytes, void **handle, kl_err *e);
  void (*seg_free)(void *ctx, void *handle);
} kl_dev_iface;

/* A block handed out by kl_dev_alloc_alloc, by value: the caller uses segment, offset
 * and size, and gives the whole struct back to kl_dev_alloc_release. `size` is what the
 * block holds: the request rounded up to 512 B, or more when a large-pool block was
 * not worth splitting. The last two fields are the allocator's, to find the block again
 * and to refuse a block released twice. */
typedef struct kl_dev_block {
  void *segment;  /* the device's handle of the segment holding the block */
  size_t offset;  /* bytes from the segment's start; a multiple of 512 */
  size_t size;    /* bytes the block holds; a multiple of 512, never 0 */
  struct kl_dev_chunk *chunk;
  uint64_t serial;
} kl_dev_block;

typedef struct kl_dev_alloc_stats {
  size_t allocated_bytes, allocated_bytes_peak; /* in live blocks (their block sizes) */
  size_t reserved_bytes, reserved_bytes_peak;   /* in segments held from the device */
  size_t active_blocks, active_blocks_peak;     /* live blocks */
  size_t cached_blocks;                         /* free blocks kept in the two pools */
  size_t segments;                              /* segments held now */
  uint64_t segment_allocs; /* segments the device gave, ever */
  uint64_t segment_frees;  /* segments given back, ever (empty_cache, OOM, free) */
  uint64_t allocs;         /* successful kl_dev_alloc_alloc calls */
  uint64_t cache_hits;     /* of those, served from a cached block, no new segment */
  uint64_t oom_retries;    /* device OOMs answered by releasing the cache and retrying */
} kl_dev_alloc_stats;

typedef struct kl_dev_alloc kl_dev_alloc;

/* A new allocator over dev (copied), holding nothing yet. */
kiln_status kl_dev_alloc_create(const kl_dev_iface *dev, kl_dev_alloc **out, kl_err *e);

/* Gives every segment back to the device and frees a. Freeing with blocks still live is
 * a caller bug: their segments are given back all the same (nothing leaks, and any
 * kl_dev_block still held is void), and the call returns KILN_ERR_STATE saying how
 * many blocks and bytes were live. a may be NULL. */
kiln_status kl_dev_alloc_free(kl_dev_alloc *a, kl_err *e);

/* A block of at least `bytes` in *block. Fails with KILN_ERR_LIMIT when bytes is over
 * KL_DEV_ALLOC_MAX_REQUEST, KILN_ERR_OUT_OF_MEMORY when the device has no room even
 * after the cache went back to it (or the host has none for the allocator's records),
 * or the device's status for any other failure; on failure *block is zeroed and the
 * allocator holds what it held before, less any cached segments released. */
kiln_status kl_dev_alloc_alloc(kl_dev_alloc *a, size_t bytes, kl_dev_block *block, kl_err *e);

/* Returns a live block to its pool, merged with its free neighbours. A block that is
 * not live (released twice, zeroed, from an earlier allocation of reused space) is
 * KILN_ERR_INVALID_ARGUMENT and changes nothing. The segment stays cached. */
kiln_status kl_dev_alloc_release(kl_dev_alloc *a, const kl_dev_block *block, kl_err *e);

void kl_dev_alloc_stats_get(const kl_dev_alloc *a, kl_dev_alloc_stats *stats);
/* Resets the peaks to the current values. */
void kl_dev_alloc_reset_peaks(kl_dev_alloc *a);

/* Gives every free cached segment back to the device; segments with a live block stay
 * (their free blocks stay cached). Returns how many segments went back. */
size_t kl_dev_alloc_empty_cache(kl_dev_alloc *a);

/* Checks every invariant (for tests and debug builds): each segment's block list is in
 * address order, contiguous and covers the segment, no two free blocks are neighbours,
 * both pools are well-formed AVL trees in key order holding exactly the free blocks of
 * their kind of segment, and the statistics match what is held. KILN_ERR_INTERNAL with
 * the first inconsistency found. */
kiln_status kl_dev_alloc_check(const kl_dev_alloc *a, kl_err *e);

#endif
