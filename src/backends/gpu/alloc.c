/* The caching device allocator (alloc.h): segments from the device, blocks in them,
 * free blocks cached in two size-ordered pools. */
#include "backends/gpu/alloc.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct kl_dev_segment {
  void *handle;
  size_t size;
  uint64_t id; /* creation order: part of the pool key, so that ties break the same way */
  bool large;
  struct kl_dev_chunk *first; /* its blocks, in address order */
  struct kl_dev_segment *prev, *next;
} kl_dev_segment;

/* A block's record. Records are never given back to the host before the allocator is
 * freed, only kept as spares, so that a stale kl_dev_block still points at a record
 * whose serial tells it apart. */
struct kl_dev_chunk {
  kl_dev_segment *seg; /* NULL for a spare */
  size_t offset, size;
  struct kl_dev_chunk *prev, *next;  /* neighbours in the segment; next links spares */
  struct kl_dev_chunk *left, *right; /* in its pool's tree while free */
  int height;                        /* of its subtree in the pool's tree */
  bool free;
  uint64_t serial; /* the live block's serial, 0 when free */
};
typedef struct kl_dev_chunk kl_dev_chunk;

struct kl_dev_alloc {
  kl_dev_iface dev;
  kl_dev_chunk *pool[2]; /* AVL roots of the free blocks: [0] small, [1] large */
  kl_dev_segment *segments;
  kl_dev_chunk *spares;
  size_t n_spares;
  uint64_t last_serial, last_segment_id;
  kl_dev_alloc_stats st;
};

static size_t round_up(size_t n, size_t to) { return (n + to - 1) & ~(to - 1); }

/* ---- the pools: AVL trees keyed by (size, segment id, offset) ---- */

static bool key_less(const kl_dev_chunk *x, const kl_dev_chunk *y) {
  if (x->size != y->size) return x->size < y->size;
  if (x->seg->id != y->seg->id) return x->seg->id < y->seg->id;
  return x->offset < y->offset;
}

static int height(const kl_dev_chunk *c) { return c ? c->height : 0; }

static void fix_height(kl_dev_chunk *c) {
  int l = height(c->left), r = height(c->right);
  c->height = 1 + (l > r ? l : r);
}

static kl_dev_chunk *rotate_right(kl_dev_chunk *c) {
  kl_dev_chunk *l = c->left;
  c->left = l->right;
  l->right = c;
  fix_height(c);
  fix_height(l);
  return l;
}

static kl_dev_chunk *rotate_left(kl_dev_chunk *c) {
  kl_dev_chunk *r = c->right;
  c->right = r->left;
  r->left = c;
  fix_height(c);
  fix_height(r);
  return r;
}

static kl_dev_chunk *rebalance(kl_dev_chunk *c) {
  fix_height(c);
  int balance = height(c->left) - height(c->right);
  if (balance > 1) {
    if (height(c->left->left) < height(c->left->right)) c->left = rotate_left(c->left);
    return rotate_right(c);
  }
  if (balance < -1) {
    if (height(c->right->right) < height(c->right->left)) c->right = rotate_right(c->right);
    return rotate_left(c);
  }
  return c;
}

static kl_dev_chunk *tree_insert(kl_dev_chunk *root, kl_dev_chunk *c) {
  if (!root) {
    c->left = c->right = NULL;
    c->height = 1;
    return c;
  }
  if (key_less(c, root))
    root->left = tree_insert(root->left, c);
  else
    root->right = tree_insert(root->right, c);
  return rebalance(root);
}

static kl_dev_chunk *tree_remove_min(kl_dev_chunk *root, kl_dev_chunk **min) {
  if (!root->left) {
    *min = root;
    return root->right;
  }
  root->left = tree_remove_min(root->left, min);
  return rebalance(root);
}

/* c must be in the tree (keys are unique: no two blocks share a segment and offset). */
static kl_dev_chunk *tree_remove(kl_dev_chunk *root, kl_dev_chunk *c) {
  if (!root) return NULL;
  if (root == c) {
    kl_dev_chunk *l = c->left, *r = c->right, *m;
    c->left = c->right = NULL;
    c->height = 0;
    if (!r) return l;
    r = tree_remove_min(r, &m);
    m->left = l;
    m->right = r;
    return rebalance(m);
  }
  if (key_less(c, root))
    root->left = tree_remove(root->left, c);
  else
    root->right = tree_remove(root->right, c);
  return rebalance(root);
}

/* The smallest block of at least size bytes (the first in key order), or NULL. */
static kl_dev_chunk *tree_best_fit(kl_dev_chunk *root, size_t size) {
  kl_dev_chunk *best = NULL;
  while (root) {
    if (root->size >= size) {
      best = root;
      root = root->left;
    } else {
      root = root->right;
    }
  }
  return best;
}

static void pool_put(kl_dev_alloc *a, kl_dev_chunk *c) {
  a->pool[c->seg->large] = tree_insert(a->pool[c->seg->large], c);
  a->st.cached_blocks++;
}

static void pool_take(kl_dev_alloc *a, kl_dev_chunk *c) {
  a->pool[c->seg->large] = tree_remove(a->pool[c->seg->large], c);
  a->st.cached_blocks--;
}

/* ---- records ---- */

/* At least n spare records, so that an allocation cannot fail half-way. */
static bool reserve_spares(kl_dev_alloc *a, size_t n) {
  while (a->n_spares < n) {
    kl_dev_chunk *c = calloc(1, sizeof *c);
    if (!c) return false;
    c->next = a->spares;
    a->spares = c;
    a->n_spares++;
  }
  return true;
}

static kl_dev_chunk *take_spare(kl_dev_alloc *a) {
  kl_dev_chunk *c = a->spares;
  a->spares = c->next;
  a->n_spares--;
  memset(c, 0, sizeof *c);
  return c;
}

static void put_spare(kl_dev_alloc *a, kl_dev_chunk *c) {
  memset(c, 0, sizeof *c);
  c->next = a->spares;
  a->spares = c;
  a->n_spares++;
}

/* ---- segments ---- */

static void segment_unlink(kl_dev_alloc *a, kl_dev_segment *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    a->segments = s->next;
  if (s->next) s->next->prev = s->prev;
}

static void segment_give_back(kl_dev_alloc *a, kl_dev_segment *s) {
  segment_unlink(a, s);
  a->dev.seg_free(a->dev.ctx, s->handle);
  a->st.reserved_bytes -= s->size;
  a->st.segments--;
  a->st.segment_frees++;
  free(s);
}

/* Gives back every segment that is one free block; returns how many. */
static size_t release_free_segments(kl_dev_alloc *a) {
  size_t n = 0;
  kl_dev_segment *s = a->segments;
  while (s) {
    kl_dev_segment *next = s->next;
    kl_dev_chunk *c = s->first;
    if (c->free && c->size == s->size) {
      pool_take(a, c);
      put_spare(a, c);
      segment_give_back(a, s);
      n++;
    }
    s = next;
  }
  return n;
}

static kiln_status device_oom(kl_dev_alloc *a, size_t bytes, size_t size, size_t seg_size,
                              size_t released, size_t released_bytes, const kl_err *de,
                              kl_err *e) {
  const kl_dev_alloc_stats *st = &a->st;
  return kl_fail(e, KILN_ERR_OUT_OF_MEMORY,
                 "device out of memory for a request of %zu bytes (%zu rounded up, a new "
                 "%zu-byte segment of the %s pool), after giving %zu cached segments (%zu "
                 "bytes) back and retrying: %zu bytes allocated in %zu blocks, %zu bytes "
                 "reserved in %zu segments, %" PRIu64 " OOM retries; the device said: %s",
                 bytes, size, seg_size, size > KL_DEV_ALLOC_SMALL_MAX ? "large" : "small",
                 released, released_bytes, st->allocated_bytes, st->active_blocks,
                 st->reserved_bytes, st->segments, st->oom_retries,
                 de->msg[0] ? de->msg : "(no message)");
}

/* A new segment for a block of size bytes, as one free block (not in a pool) in *out.
 * On device OOM the cache goes back to the device and the device is asked again. */
static kiln_status new_segment(kl_dev_alloc *a, size_t bytes, size_t size, kl_dev_chunk **out,
                               kl_err *e) {
  bool large = size > KL_DEV_ALLOC_SMALL_MAX;
  size_t seg_size = large ? round_up(size, KL_DEV_ALLOC_LARGE_ROUND)
                          : KL_DEV_ALLOC_SMALL_SEGMENT;
  kl_dev_segment *s = calloc(1, sizeof *s);
  if (!s)
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY,
                   "out of host memory for a device segment's record");
  kl_err de;
  kl_err_clear(&de);
  void *handle = NULL;
  kiln_status st = a->dev.seg_alloc(a->dev.ctx, seg_size, &handle, &de);
  if (st == KILN_ERR_OUT_OF_MEMORY) {
    size_t before = a->st.reserved_bytes;
    size_t released = release_free_segments(a);
    a->st.oom_retries++;
    kl_err_clear(&de);
    st = a->dev.seg_alloc(a->dev.ctx, seg_size, &handle, &de);
    if (st == KILN_ERR_OUT_OF_MEMORY) {
      free(s);
      return device_oom(a, bytes, size, seg_size, released, before - a->st.reserved_bytes,
                        &de, e);
    }
  }
  if (st != KILN_OK) {
    free(s);
    return kl_fail(e, st, "allocating a %zu-byte device segment for a request of %zu bytes: %s",
                   seg_size, bytes, de.msg[0] ? de.msg : "(no message)");
  }
  s->handle = handle;
  s->size = seg_size;
  s->id = ++a->last_segment_id;
  s->large = large;
  kl_dev_chunk *c = take_spare(a);
  c->seg = s;
  c->size = seg_size;
  c->free = true;
  s->first = c;
  s->next = a->segments;
  if (a->segments) a->segments->prev = s;
  a->segments = s;
  a->st.segments++;
  a->st.segment_allocs++;
  a->st.reserved_bytes += seg_size;
  if (a->st.reserved_bytes > a->st.reserved_bytes_peak)
    a->st.reserved_bytes_peak = a->st.reserved_bytes;
  *out = c;
  return KILN_OK;
}

/* Cuts c (free, in no pool) to size bytes when the rest is worth keeping: the rest
 * becomes a free block of the pool right after it. */
static void split(kl_dev_alloc *a, kl_dev_chunk *c, size_t size) {
  size_t rest = c->size - size;
  bool worth = c->seg->large ? rest > KL_DEV_ALLOC_LARGE_MIN_REST : rest >= KL_DEV_ALLOC_ROUND;
  if (!worth) return;
  kl_dev_chunk *r = take_spare(a);
  r->seg = c->seg;
  r->offset = c->offset + size;
  r->size = rest;
  r->free = true;
  r->prev = c;
  r->next = c->next;
  if (c->next) c->next->prev = r;
  c->next = r;
  c->size = size;
  pool_put(a, r);
}

/* ---- the interface ---- */

kiln_status kl_dev_alloc_create(const kl_dev_iface *dev, kl_dev_alloc **out, kl_err *e) {
  if (out) *out = NULL;
  if (!out || !dev || !dev->seg_alloc || !dev->seg_free)
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT,
                   "a device allocator needs an output and a device with seg_alloc and "
                   "seg_free");
  kl_dev_alloc *a = calloc(1, sizeof *a);
  if (!a) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of host memory for a device allocator");
  a->dev = *dev;
  *out = a;
  return KILN_OK;
}

kiln_status kl_dev_alloc_free(kl_dev_alloc *a, kl_err *e) {
  if (!a) return KILN_OK;
  size_t live = a->st.active_blocks, live_bytes = a->st.allocated_bytes;
  while (a->segments) {
    kl_dev_segment *s = a->segments;
    for (kl_dev_chunk *c = s->first, *next; c; c = next) {
      next = c->next;
      free(c);
    }
    segment_give_back(a, s);
  }
  for (kl_dev_chunk *c = a->spares, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(a);
  if (live)
    return kl_fail(e, KILN_ERR_STATE,
                   "a device allocator was freed with %zu blocks (%zu bytes) still live; "
                   "their segments were given back all the same",
                   live, live_bytes);
  return KILN_OK;
}

kiln_status kl_dev_alloc_alloc(kl_dev_alloc *a, size_t bytes, kl_dev_block *block, kl_err *e) {
  if (block) memset(block, 0, sizeof *block);
  if (!a || !block)
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "a device allocation needs an allocator "
                                                 "and a block to fill");
  if (bytes > KL_DEV_ALLOC_MAX_REQUEST)
    return kl_fail(e, KILN_ERR_LIMIT,
                   "a device allocation of %zu bytes is too large: rounded up to its segment "
                   "it overflows size_t (the most is %zu bytes)",
                   bytes, (size_t)KL_DEV_ALLOC_MAX_REQUEST);
  size_t size = bytes ? round_up(bytes, KL_DEV_ALLOC_ROUND) : KL_DEV_ALLOC_ROUND;
  bool large = size > KL_DEV_ALLOC_SMALL_MAX;
  if (!reserve_spares(a, 2))
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of host memory for a device block's record");
  kl_dev_chunk *c = tree_best_fit(a->pool[large], size);
  if (c) {
    pool_take(a, c);
    a->st.cache_hits++;
  } else {
    kiln_status st = new_segment(a, bytes, size, &c, e);
    if (st != KILN_OK) return st;
  }
  split(a, c, size);
  c->free = false;
  c->serial = ++a->last_serial;
  kl_dev_alloc_stats *st = &a->st;
  st->allocs++;
  st->allocated_bytes += c->size;
  if (st->allocated_bytes > st->allocated_bytes_peak)
    st->allocated_bytes_peak = st->allocated_bytes;
  if (++st->active_blocks > st->active_blocks_peak) st->active_blocks_peak = st->active_blocks;
  *block = (kl_dev_block){.segment = c->seg->handle, .offset = c->offset, .size = c->size,
                          .chunk = c, .serial = c->serial};
  return KILN_OK;
}

kiln_status kl_dev_alloc_release(kl_dev_alloc *a, const kl_dev_block *block, kl_err *e) {
  if (!a || !block)
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "releasing a device block needs an "
                                                 "allocator and a block");
  kl_dev_chunk *c = block->chunk;
  /* the serial first: a spare's is 0, and its segment may be gone */
  if (!c || block->serial == 0 || c->serial != block->serial || c->free ||
      c->seg->handle != block->segment || c->offset != block->offset || c->size != block->size)
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT,
                   "releasing a device block (%zu bytes at offset %zu) that is not live: "
                   "released twice, or never allocated",
                   block->size, block->offset);
  c->free = true;
  c->serial = 0;
  a->st.allocated_bytes -= c->size;
  a->st.active_blocks--;
  kl_dev_chunk *p = c->prev;
  if (p && p->free) {
    pool_take(a, p);
    p->size += c->size;
    p->next = c->next;
    if (c->next) c->next->prev = p;
    put_spare(a, c);
    c = p;
  }
  kl_dev_chunk *n = c->next;
  if (n && n->free) {
    pool_take(a, n);
    c->size += n->size;
    c->next = n->next;
    if (n->next) n->next->prev = c;
    put_spare(a, n);
  }
  pool_put(a, c);
  return KILN_OK;
}

void kl_dev_alloc_stats_get(const kl_dev_alloc *a, kl_dev_alloc_stats *stats) {
  if (a)
    *stats = a->st;
  else
    memset(stats, 0, sizeof *stats);
}

void kl_dev_alloc_reset_peaks(kl_dev_alloc *a) {
  if (!a) return;
  a->st.allocated_bytes_peak = a->st.allocated_bytes;
  a->st.reserved_bytes_peak = a->st.reserved_bytes;
  a->st.active_blocks_peak = a->st.active_blocks;
}

size_t kl_dev_alloc_empty_cache(kl_dev_alloc *a) { return a ? release_free_segments(a) : 0; }

/* ---- the invariant checker ---- */

/* Returns KILN_ERR_INTERNAL from the checking function when cond fails. */
#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) return kl_fail(e, KILN_ERR_INTERNAL, __VA_ARGS__);   \
  } while (0)

/* Totals over the segments' block lists. */
typedef struct check_sums {
  size_t segments, reserved, live, live_bytes, free_blocks[2], all_blocks;
} check_sums;

static kiln_status check_segment(const kl_dev_alloc *a, const kl_dev_segment *s,
                                 check_sums *sum, kl_err *e) {
  CHECK(s->size % KL_DEV_ALLOC_ROUND == 0 && s->size > 0, "segment %" PRIu64 " has size %zu",
        s->id, s->size);
  if (s->large)
    CHECK(s->size % KL_DEV_ALLOC_LARGE_ROUND == 0 && s->size > KL_DEV_ALLOC_SMALL_MAX,
          "large segment %" PRIu64 " has size %zu", s->id, s->size);
  else
    CHECK(s->size == KL_DEV_ALLOC_SMALL_SEGMENT, "small segment %" PRIu64 " has size %zu",
          s->id, s->size);
  CHECK(s->id >= 1 && s->id <= a->last_segment_id, "segment id %" PRIu64 " out of range", s->id);
  CHECK(s->first && !s->first->prev, "segment %" PRIu64 " has no first block", s->id);
  size_t end = 0, n = 0, max_blocks = s->size / KL_DEV_ALLOC_ROUND;
  for (const kl_dev_chunk *c = s->first; c; c = c->next) {
    CHECK(++n <= max_blocks, "segment %" PRIu64 ": its block list is longer than it can be",
          s->id);
    CHECK(c->seg == s, "segment %" PRIu64 ": block at %zu names another segment", s->id,
          c->offset);
    CHECK(c->offset == end, "segment %" PRIu64 ": block at %zu, expected at %zu", s->id,
          c->offset, end);
    CHECK(c->size > 0 && c->size % KL_DEV_ALLOC_ROUND == 0 && c->size <= s->size - end,
          "segment %" PRIu64 ": block at %zu has size %zu", s->id, c->offset, c->size);
    CHECK(!c->next || c->next->prev == c, "segment %" PRIu64 ": block at %zu: broken links",
          s->id, c->offset);
    end += c->size;
    if (c->free) {
      CHECK(c->serial == 0, "segment %" PRIu64 ": free block at %zu has a serial", s->id,
            c->offset);
      CHECK(!c->next || !c->next->free,
            "segment %" PRIu64 ": free blocks at %zu and %zu were not merged", s->id,
            c->offset, c->next->offset);
      sum->free_blocks[s->large]++;
    } else {
      CHECK(c->serial >= 1 && c->serial <= a->last_serial,
            "segment %" PRIu64 ": live block at %zu has serial %" PRIu64, s->id, c->offset,
            c->serial);
      CHECK(c->height == 0 && !c->left && !c->right,
            "segment %" PRIu64 ": live block at %zu is linked into a pool", s->id, c->offset);
      sum->live++;
      sum->live_bytes += c->size;
    }
  }
  CHECK(end == s->size, "segment %" PRIu64 ": blocks cover %zu of its %zu bytes", s->id, end,
        s->size);
  sum->segments++;
  sum->reserved += s->size;
  sum->all_blocks += n;
  return KILN_OK;
}

/* c is a block of a segment the allocator holds. */
static bool block_is_held(const kl_dev_alloc *a, const kl_dev_chunk *c) {
  for (const kl_dev_segment *s = a->segments; s; s = s->next)
    if (s == c->seg) {
      for (const kl_dev_chunk *b = s->first; b; b = b->next)
        if (b == c) return true;
      return false;
    }
  return false;
}

typedef struct tree_walk {
  const kl_dev_alloc *a;
  int large;
  size_t count, limit;
  const kl_dev_chunk *last; /* the previous block in key order */
} tree_walk;

/* In-order walk of a pool's subtree; *h gets its height. */
static kiln_status check_tree(tree_walk *w, const kl_dev_chunk *c, int depth, int *h,
                              kl_err *e) {
  *h = 0;
  if (!c) return KILN_OK;
  CHECK(depth < 128 && w->count < w->limit, "%s pool: more blocks than the segments hold",
        w->large ? "large" : "small");
  int hl, hr;
  kiln_status st = check_tree(w, c->left, depth + 1, &hl, e);
  if (st != KILN_OK) return st;
  w->count++;
  CHECK(block_is_held(w->a, c), "%s pool: a block (%zu bytes) in no held segment",
        w->large ? "large" : "small", c->size);
  CHECK(c->free && c->serial == 0, "%s pool: a live block at %zu of segment %" PRIu64,
        w->large ? "large" : "small", c->offset, c->seg->id);
  CHECK(c->seg->large == w->large, "%s pool: a block of the other pool's segment %" PRIu64,
        w->large ? "large" : "small", c->seg->id);
  CHECK(!w->last || key_less(w->last, c), "%s pool: blocks out of order at %zu bytes",
        w->large ? "large" : "small", c->size);
  w->last = c;
  st = check_tree(w, c->right, depth + 1, &hr, e);
  if (st != KILN_OK) return st;
  *h = 1 + (hl > hr ? hl : hr);
  CHECK(c->height == *h && hl - hr <= 1 && hr - hl <= 1,
        "%s pool: unbalanced at a block of %zu bytes (heights %d/%d, stored %d)",
        w->large ? "large" : "small", c->size, hl, hr, c->height);
  return KILN_OK;
}

kiln_status kl_dev_alloc_check(const kl_dev_alloc *a, kl_err *e) {
  CHECK(a, "no allocator");
  check_sums sum = {0};
  const kl_dev_segment *prev = NULL;
  for (const kl_dev_segment *s = a->segments; s; prev = s, s = s->next) {
    CHECK(s->prev == prev, "segment list: broken links");
    CHECK(sum.segments < a->st.segments, "more segments than the statistics count");
    kiln_status st = check_segment(a, s, &sum, e);
    if (st != KILN_OK) return st;
  }
  for (int large = 0; large < 2; large++) {
    tree_walk w = {.a = a, .large = large, .limit = sum.all_blocks};
    int h;
    kiln_status st = check_tree(&w, a->pool[large], 0, &h, e);
    if (st != KILN_OK) return st;
    CHECK(w.count == sum.free_blocks[large], "%s pool holds %zu blocks, the segments %zu free",
          large ? "large" : "small", w.count, sum.free_blocks[large]);
  }
  size_t spares = 0;
  for (const kl_dev_chunk *c = a->spares; c; c = c->next) {
    CHECK(++spares <= a->n_spares, "more spare records than counted");
    CHECK(!c->seg && c->serial == 0, "a spare record in use");
  }
  CHECK(spares == a->n_spares, "%zu spare records, %zu counted", spares, a->n_spares);
  const kl_dev_alloc_stats *st = &a->st;
  CHECK(st->segments == sum.segments, "stats: %zu segments, %zu held", st->segments,
        sum.segments);
  CHECK(st->reserved_bytes == sum.reserved, "stats: %zu bytes reserved, %zu held",
        st->reserved_bytes, sum.reserved);
  CHECK(st->allocated_bytes == sum.live_bytes, "stats: %zu bytes allocated, %zu live",
        st->allocated_bytes, sum.live_bytes);
  CHECK(st->active_blocks == sum.live, "stats: %zu active blocks, %zu live", st->active_blocks,
        sum.live);
  CHECK(st->cached_blocks == sum.free_blocks[0] + sum.free_blocks[1],
        "stats: %zu cached blocks, %zu free", st->cached_blocks,
        sum.free_blocks[0] + sum.free_blocks[1]);
  CHECK(st->allocated_bytes_peak >= st->allocated_bytes &&
            st->reserved_bytes_peak >= st->reserved_bytes &&
            st->active_blocks_peak >= st->active_blocks,
        "stats: a peak below its current value");
  CHECK(st->segment_allocs - st->segment_frees == st->segments,
        "stats: %" PRIu64 " segments allocated, %" PRIu64 " freed, %zu held",
        st->segment_allocs, st->segment_frees, st->segments);
  CHECK(st->cache_hits <= st->allocs && st->active_blocks <= st->allocs,
        "stats: more cache hits or live blocks than allocations");
  return KILN_OK;
}
