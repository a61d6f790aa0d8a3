/* The caching device allocator (src/backends/gpu/alloc.h) against a fake device: segments
 * are malloc'd, counted, and refused on demand (the Nth call, or past a byte budget).
 * Every step is followed by the allocator's invariant checker, and the statistics are
 * compared field by field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/gpu/alloc.h"
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define FAKE_MAGIC 0x6b696c6eu

/* ---- the fake device ---- */

typedef struct fake_seg {
  uint32_t magic;
  size_t size;
  unsigned char data[];
} fake_seg;

typedef struct fake_dev {
  size_t budget;         /* the most bytes held at once */
  int fail_call;         /* this seg_alloc call (1-based) fails with fail_code; 0: none */
  kiln_status fail_code;
  int calls, frees, bad_frees;
  size_t live_segments, live_bytes;
} fake_dev;

static kiln_status fake_alloc(void *ctx, size_t bytes, void **handle, kl_err *e) {
  fake_dev *d = ctx;
  d->calls++;
  if (d->calls == d->fail_call)
    return kl_fail(e, d->fail_code, "fake device: call %d fails on demand", d->calls);
  if (bytes > d->budget - d->live_bytes)
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "fake device: %zu bytes asked, %zu of %zu free",
                   bytes, d->budget - d->live_bytes, d->budget);
  fake_seg *s = malloc(sizeof *s + bytes);
  if (!s) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "fake device: host malloc failed");
  s->magic = FAKE_MAGIC;
  s->size = bytes;
  d->live_segments++;
  d->live_bytes += bytes;
  *handle = s;
  return KILN_OK;
}

static void fake_free(void *ctx, void *handle) {
  fake_dev *d = ctx;
  fake_seg *s = handle;
  d->frees++;
  if (!s || s->magic != FAKE_MAGIC) {
    d->bad_frees++;
    return;
  }
  s->magic = 0;
  d->live_segments--;
  d->live_bytes -= s->size;
  free(s);
}

static fake_dev fake(size_t budget) { return (fake_dev){.budget = budget}; }

static kl_dev_alloc *make(fake_dev *d) {
  kl_dev_iface dev = {.ctx = d, .seg_alloc = fake_alloc, .seg_free = fake_free};
  kl_dev_alloc *a = NULL;
  kl_err e = {0};
  tu_assert_status(kl_dev_alloc_create(&dev, &a, &e), KILN_OK, e.msg, NULL);
  return a;
}

/* ---- checks that name the test's line (tu_fail_at) ---- */

static void check_at(const kl_dev_alloc *a, const char *file, int line) {
  kl_err e = {0};
  if (kl_dev_alloc_check(a, &e) != KILN_OK) tu_fail_at(file, line, "check: %s", e.msg);
}
#define check(a) check_at(a, __FILE__, __LINE__)

static kl_dev_block get_at(kl_dev_alloc *a, size_t bytes, const char *file, int line) {
  kl_dev_block b;
  kl_err e = {0};
  tu_assert_status_at(kl_dev_alloc_alloc(a, bytes, &b, &e), KILN_OK, e.msg, NULL, file, line);
  check_at(a, file, line);
  return b;
}
#define get(a, bytes) get_at(a, bytes, __FILE__, __LINE__)

static void put_at(kl_dev_alloc *a, kl_dev_block b, const char *file, int line) {
  kl_err e = {0};
  tu_assert_status_at(kl_dev_alloc_release(a, &b, &e), KILN_OK, e.msg, NULL, file, line);
  check_at(a, file, line);
}
#define put(a, b) put_at(a, b, __FILE__, __LINE__)

#define STAT_FIELDS(X)                                                                       \
  X(allocated_bytes) X(allocated_bytes_peak) X(reserved_bytes) X(reserved_bytes_peak)        \
  X(active_blocks) X(active_blocks_peak) X(cached_blocks) X(segments) X(segment_allocs)      \
  X(segment_frees) X(allocs) X(cache_hits) X(oom_retries)

/* Every field of the allocator's statistics equals want's. */
static void expect_stats_at(const kl_dev_alloc *a, const kl_dev_alloc_stats *want,
                            const char *file, int line) {
  kl_dev_alloc_stats got;
  kl_dev_alloc_stats_get(a, &got);
#define X(f)                                                                           \
  if ((uint64_t)got.f != (uint64_t)want->f)                                            \
    tu_fail_at(file, line, "stats." #f ": %" PRIu64 ", expected %" PRIu64, (uint64_t)got.f, \
            (uint64_t)want->f);
  STAT_FIELDS(X)
#undef X
}
#define expect_stats(a, want) expect_stats_at(a, want, __FILE__, __LINE__)
/* The same, written as the fields that are not 0. */
#define EXPECT_STATS(a, ...) expect_stats(a, (&(kl_dev_alloc_stats){__VA_ARGS__}))

static kl_dev_alloc_stats stats_of(const kl_dev_alloc *a) {
  kl_dev_alloc_stats s;
  kl_dev_alloc_stats_get(a, &s);
  return s;
}

/* Frees a, which must hold no live block, and checks that the device got everything back. */
static void finish_at(kl_dev_alloc *a, fake_dev *d, const char *file, int line) {
  kl_err e = {0};
  tu_assert_status_at(kl_dev_alloc_free(a, &e), KILN_OK, e.msg, NULL, file, line);
  if (d->live_segments || d->live_bytes || d->bad_frees)
    tu_fail_at(file, line, "fake device: %zu segments (%zu bytes) left, %d bad frees",
            d->live_segments, d->live_bytes, d->bad_frees);
}
#define finish(a, d) finish_at(a, d, __FILE__, __LINE__)

static uint32_t next_rand(uint32_t *rng) {
  *rng ^= *rng << 13;
  *rng ^= *rng >> 17;
  *rng ^= *rng << 5;
  return *rng;
}

/* ---- rounding and pools ---- */

/* Sizes round up to 512 B; small requests share 2 MiB segments; large ones get their
 * own, split only when more than 1 MiB would be left. Stats after every step. */
static void test_rounding(void **state) {
  (void)state;
  fake_dev d = fake(SIZE_MAX);
  kl_dev_alloc *a = make(&d);
  kl_dev_alloc_stats w = {0};
  expect_stats(a, &w);

  kl_dev_block b0 = get(a, 0); /* a 512 B block of its own, in a new small segment */
  assert_int_equal(b0.size, 512);
  assert_int_equal(b0.offset, 0);
  assert_int_equal(((fake_seg *)b0.segment)->size, 2 * MIB);
  w = (kl_dev_alloc_stats){.allocated_bytes = 512, .allocated_bytes_peak = 512,
                           .reserved_bytes = 2 * MIB, .reserved_bytes_peak = 2 * MIB,
                           .active_blocks = 1, .active_blocks_peak = 1, .cached_blocks = 1,
                           .segments = 1, .segment_allocs = 1, .allocs = 1};
  expect_stats(a, &w);

  const size_t small[][2] = {{1, 512}, {512, 512}, {513, 1024}, {1000, 1024}, {MIB, MIB}};
  size_t offset = 512;
  for (int i = 0; i < TU_LEN(small); i++) {
    kl_dev_block b = get(a, small[i][0]); /* all from the rest of the first segment */
    assert_int_equal(b.size, small[i][1]);
    assert_int_equal(b.offset, offset);
    assert_ptr_equal(b.segment, b0.segment);
    offset += b.size;
    w.allocated_bytes = w.allocated_bytes_peak = offset;
    w.active_blocks = w.active_blocks_peak = (size_t)i + 2;
    w.allocs++;
    w.cache_hits++;
    expect_stats(a, &w);
  }
  assert_int_equal(d.calls, 1);

  /* 1 MiB + 1: large, 1 MiB + 512; its 2 MiB segment's rest (1 MiB - 512) is not kept */
  kl_dev_block l1 = get(a, MIB + 1);
  assert_ptr_not_equal(l1.segment, b0.segment);
  assert_int_equal(l1.offset, 0);
  assert_int_equal(l1.size, 2 * MIB);
  w.allocated_bytes = w.allocated_bytes_peak = offset + 2 * MIB;
  w.reserved_bytes = w.reserved_bytes_peak = 4 * MIB;
  w.active_blocks = w.active_blocks_peak = 7;
  w.segments = w.segment_allocs = 2;
  w.allocs++;
  expect_stats(a, &w);

  /* 2 MiB + 1: a 4 MiB segment, split: the rest (2 MiB - 512) is over 1 MiB */
  kl_dev_block l2 = get(a, 2 * MIB + 1);
  assert_int_equal(l2.size, 2 * MIB + 512);
  assert_int_equal(((fake_seg *)l2.segment)->size, 4 * MIB);
  w.allocated_bytes = w.allocated_bytes_peak = w.allocated_bytes + 2 * MIB + 512;
  w.reserved_bytes = w.reserved_bytes_peak = 8 * MIB;
  w.active_blocks = w.active_blocks_peak = 8;
  w.cached_blocks = 2;
  w.segments = w.segment_allocs = 3;
  w.allocs++;
  expect_stats(a, &w);

  /* 3 MiB: the cached 2 MiB - 512 does not hold it; a 4 MiB segment, rest 1 MiB: whole */
  kl_dev_block l3 = get(a, 3 * MIB);
  assert_int_equal(l3.size, 4 * MIB);
  assert_int_equal(((fake_seg *)l3.segment)->size, 4 * MIB);
  w.allocated_bytes = w.allocated_bytes_peak = w.allocated_bytes + 4 * MIB;
  w.reserved_bytes = w.reserved_bytes_peak = 12 * MIB;
  w.active_blocks = w.active_blocks_peak = 9;
  w.segments = w.segment_allocs = 4;
  w.allocs++;
  expect_stats(a, &w);

  /* exactly 4 MiB: exactly its segment */
  kl_dev_block l4 = get(a, 4 * MIB);
  assert_int_equal(l4.size, 4 * MIB);
  w.allocated_bytes = w.allocated_bytes_peak = w.allocated_bytes + 4 * MIB;
  w.reserved_bytes = w.reserved_bytes_peak = 16 * MIB;
  w.active_blocks = w.active_blocks_peak = 10;
  w.segments = w.segment_allocs = 5;
  w.allocs++;
  expect_stats(a, &w);

  /* releasing keeps the segments; empty_cache gives them all back */
  put(a, l1);
  put(a, l2);
  put(a, l3);
  put(a, l4);
  w.allocated_bytes = offset;
  w.active_blocks = 6;
  w.cached_blocks = 5; /* the small rest and four whole large segments */
  expect_stats(a, &w);
  assert_int_equal(kl_dev_alloc_empty_cache(a), 4);
  w.reserved_bytes = 2 * MIB;
  w.cached_blocks = 1;
  w.segments = 1;
  w.segment_frees = 4;
  expect_stats(a, &w);
  assert_int_equal(d.live_segments, 1);
  kl_dev_alloc_reset_peaks(a);
  w.allocated_bytes_peak = w.allocated_bytes;
  w.reserved_bytes_peak = w.reserved_bytes;
  w.active_blocks_peak = w.active_blocks;
  expect_stats(a, &w);
  kl_err e = {0};
  tu_assert_status(kl_dev_alloc_free(a, &e), KILN_ERR_STATE, e.msg, "6 blocks");
  assert_int_equal(d.live_segments, 0);
}

/* Small and large requests never share a segment, even when the other pool has room. */
static void test_pools_separate(void **state) {
  (void)state;
  fake_dev d = fake(SIZE_MAX);
  kl_dev_alloc *a = make(&d);
  kl_dev_block s = get(a, 4 * KIB);
  put(a, s); /* a free 2 MiB small segment */
  kl_dev_block l = get(a, MIB + 512);
  assert_ptr_not_equal(l.segment, s.segment);
  assert_int_equal(l.size, 2 * MIB);
  put(a, l); /* a free 2 MiB large segment */
  EXPECT_STATS(a, .allocated_bytes_peak = 2 * MIB, .reserved_bytes = 4 * MIB,
               .reserved_bytes_peak = 4 * MIB, .active_blocks_peak = 1, .cached_blocks = 2,
               .segments = 2, .segment_allocs = 2, .allocs = 2);

  kl_dev_block s1 = get(a, MIB), s2 = get(a, MIB); /* both from the small segment */
  assert_ptr_equal(s1.segment, s.segment);
  assert_ptr_equal(s2.segment, s.segment);
  assert_int_equal(s1.offset, 0);
  assert_int_equal(s2.offset, MIB);
  kl_dev_block s3 = get(a, 512); /* the small pool is empty: a new segment */
  assert_ptr_not_equal(s3.segment, s.segment);
  assert_ptr_not_equal(s3.segment, l.segment);
  kl_dev_block l1 = get(a, 2 * MIB); /* the large segment */
  assert_ptr_equal(l1.segment, l.segment);
  EXPECT_STATS(a, .allocated_bytes = 4 * MIB + 512, .allocated_bytes_peak = 4 * MIB + 512,
               .reserved_bytes = 6 * MIB, .reserved_bytes_peak = 6 * MIB,
               .active_blocks = 4, .active_blocks_peak = 4, .cached_blocks = 1,
               .segments = 3, .segment_allocs = 3, .allocs = 6, .cache_hits = 3);
  put(a, s1);
  put(a, s2);
  put(a, s3);
  put(a, l1);
  finish(a, &d);
}

/* ---- best fit ---- */

/* The smallest free block that holds the request, across segments; ties go to the
 * oldest segment, then the lowest offset. */
static void test_best_fit_small(void **state) {
  (void)state;
  fake_dev d = fake(SIZE_MAX);
  kl_dev_alloc *a = make(&d);
  /* free blocks of 8K, 2K, 4K, 1K, kept apart by live 512 B blocks */
  const size_t sizes[] = {8 * KIB, 2 * KIB, 4 * KIB, 1 * KIB};
  kl_dev_block hole[4], sep[4];
  for (int i = 0; i < 4; i++) {
    hole[i] = get(a, sizes[i]);
    sep[i] = get(a, 512);
  }
  for (int i = 0; i < 4; i++) put(a, hole[i]);
  assert_int_equal(stats_of(a).cached_blocks, 5); /* and the segment's tail */

  kl_dev_block b = get(a, 1536); /* the 2K hole, split */
  assert_int_equal(b.offset, hole[1].offset);
  assert_int_equal(b.size, 1536);
  kl_dev_block c = get(a, 1 * KIB); /* the 1K hole, exactly */
  assert_int_equal(c.offset, hole[3].offset);
  kl_dev_block f = get(a, 3 * KIB); /* the 4K hole */
  assert_int_equal(f.offset, hole[2].offset);
  kl_dev_block g = get(a, 512); /* the 512 B left of the 2K hole, not the 1K of the 4K */
  assert_int_equal(g.offset, hole[1].offset + 1536);
  kl_dev_block h = get(a, 768); /* the 1K left of the 4K hole */
  assert_int_equal(h.offset, hole[2].offset + 3 * KIB);
  kl_dev_block i8 = get(a, 6 * KIB); /* the 8K hole */
  assert_int_equal(i8.offset, hole[0].offset);
  kl_dev_block t = get(a, 16 * KIB); /* the tail */
  assert_int_equal(t.offset, sep[3].offset + 512);
  assert_int_equal(d.calls, 1);

  /* ties: 2K holes in two segments */
  kl_dev_block h0 = get(a, 2 * KIB); /* the 2K left of the 8K hole */
  assert_int_equal(h0.offset, hole[0].offset + 6 * KIB);
  /* all but 8K of the rest, in two small requests */
  kl_dev_block fill1 = get(a, MIB), fill2 = get(a, MIB - t.offset - t.size - 8 * KIB);
  assert_ptr_equal(fill2.segment, t.segment);
  kl_dev_block x[4], y[4];
  for (int k = 0; k < 4; k++) x[k] = get(a, 2 * KIB);
  for (int k = 0; k < 4; k++) y[k] = get(a, 2 * KIB);
  assert_ptr_equal(x[3].segment, t.segment);
  assert_int_equal(x[3].offset, 2 * MIB - 2 * KIB);
  assert_ptr_not_equal(y[0].segment, t.segment);
  assert_int_equal(y[3].offset, 6 * KIB);
  assert_int_equal(d.calls, 2);
  put(a, y[2]);
  put(a, x[1]);
  put(a, y[0]);
  put(a, x[3]);
  kl_dev_block r1 = get(a, 2 * KIB), r2 = get(a, 2 * KIB), r3 = get(a, 2 * KIB),
               r4 = get(a, 2 * KIB);
  assert_ptr_equal(r1.segment, t.segment);
  assert_int_equal(r1.offset, x[1].offset);
  assert_ptr_equal(r2.segment, t.segment);
  assert_int_equal(r2.offset, x[3].offset);
  assert_ptr_equal(r3.segment, y[0].segment);
  assert_int_equal(r3.offset, y[0].offset);
  assert_ptr_equal(r4.segment, y[0].segment);
  assert_int_equal(r4.offset, y[2].offset);
  assert_int_equal(stats_of(a).segment_allocs, 2);

  kl_dev_block live[] = {b,    c,    f,  g,  h,  i8, t,      h0,     fill1,  fill2, x[0],
                         x[2], y[1], y[3], r1, r2, r3, r4,     sep[0], sep[1], sep[2], sep[3]};
  for (int k = 0; k < TU_LEN(live); k++) put(a, live[k]);
  EXPECT_STATS(a, .allocated_bytes_peak = stats_of(a).allocated_bytes_peak,
               .reserved_bytes = 4 * MIB, .reserved_bytes_peak = 4 * MIB,
               .active_blocks_peak = stats_of(a).active_blocks_peak, .cached_blocks = 2,
               .segments = 2, .segment_allocs = 2, .allocs = 30, .cache_hits = 28);
  finish(a, &d);
}

static void test_best_fit_large(void **state) {
  (void)state;
  fake_dev d = fake(SIZE_MAX);
  kl_dev_alloc *a = make(&d);
  kl_dev_block l8 = get(a, 8 * MIB), l4 = get(a, 4 * MIB), l6 = get(a, 6 * MIB);
  put(a, l8);
  put(a, l4);
  put(a, l6);
  kl_dev_block b = get(a, 3 * MIB); /* the 4 MiB segment; 1 MiB rest: not split */
  assert_ptr_equal(b.segment, l4.segment);
  assert_int_equal(b.size, 4 * MIB);
  kl_dev_block c = get(a, 5 * MIB); /* the 6 MiB one, whole */
  assert_ptr_equal(c.segment, l6.segment);
  assert_int_equal(c.size, 6 * MIB);
  kl_dev_block f = get(a, 5 * MIB); /* the 8 MiB one, split: 3 MiB left */
  assert_ptr_equal(f.segment, l8.segment);
  assert_int_equal(f.size, 5 * MIB);
  kl_dev_block g = get(a, MIB + MIB / 2); /* the 3 MiB rest, split: 1.5 MiB left */
  assert_int_equal(g.offset, 5 * MIB);
  assert_int_equal(g.size, MIB + MIB / 2);
  kl_dev_block h = get(a, MIB + 1); /* the last 1.5 MiB, whole (0.5 MiB rest) */
  assert_int_equal(h.offset, 6 * MIB + MIB / 2);
  assert_int_equal(h.size, MIB + MIB / 2);
  EXPECT_STATS(a, .allocated_bytes = 18 * MIB, .allocated_bytes_peak = 18 * MIB,
               .reserved_bytes = 18 * MIB, .reserved_bytes_peak = 18 * MIB,
               .active_blocks = 5, .active_blocks_peak = 5, .segments = 3,
               .segment_allocs = 3, .allocs = 8, .cache_hits = 5);
  put(a, g);
  put(a, h);
  put(a, f); /* the 8 MiB segment is one block again */
  kl_dev_block whole = get(a, 7 * MIB + 1);
  assert_ptr_equal(whole.segment, l8.segment);
  assert_int_equal(whole.offset, 0);
  assert_int_equal(whole.size, 8 * MIB);
  put(a, whole);
  put(a, b);
  put(a, c);
  assert_int_equal(stats_of(a).segment_allocs, 3);
  finish(a, &d);
}

/* ---- split and merge ---- */

/* Maximal runs of free slots. */
static size_t free_runs(const bool *freed, int n) {
  size_t runs = 0;
  for (int i = 0; i < n; i++) runs += freed[i] && (i == 0 || !freed[i - 1]);
  return runs;
}

/* Splits a segment into four blocks and releases them in each of the 24 orders: after
 * every release the free blocks are exactly the runs of free neighbours, and at the end
 * the segment is one block that serves a request as big as it. */
static void merge_orders(bool large) {
  fake_dev d = fake(SIZE_MAX);
  kl_dev_alloc *a = make(&d);
  const size_t small_sizes[4] = {64 * KIB, 128 * KIB, 64 * KIB, 256 * KIB};
  const size_t large_sizes[4] = {3 * MIB, 3 * MIB, 2 * MIB, 2 * MIB};
  const size_t *sizes = large ? large_sizes : small_sizes;
  const size_t seg = large ? 10 * MIB : 2 * MIB;
  int slots = large ? 4 : 5; /* the small segment keeps a free tail */
  if (large) put(a, get(a, seg)); /* a 10 MiB segment; the small one comes with b[0] */
  int perm[4] = {0, 1, 2, 3};
  for (int p = 0; p < 24; p++) {
    /* the p-th permutation, by its factorial digits */
    int left[4] = {0, 1, 2, 3}, n = 4, q = p;
    for (int k = 0; k < 4; k++) {
      int f = k == 0 ? 6 : k == 1 ? 2 : 1, j = q / f;
      q %= f;
      perm[k] = left[j];
      for (int m = j; m < n - 1; m++) left[m] = left[m + 1];
      n--;
    }
    kl_dev_block b[4];
    size_t offset = 0;
    for (int k = 0; k < 4; k++) {
      b[k] = get(a, sizes[k]);
      assert_int_equal(b[k].offset, offset);
      assert_int_equal(b[k].size, sizes[k]);
      offset += sizes[k];
    }
    bool freed[5] = {false, false, false, false, true};
    assert_int_equal(stats_of(a).cached_blocks, free_runs(freed, slots));
    for (int k = 0; k < 4; k++) {
      put(a, b[perm[k]]);
      freed[perm[k]] = true;
      assert_int_equal(stats_of(a).cached_blocks, free_runs(freed, slots));
    }
    assert_int_equal(stats_of(a).cached_blocks, 1);
  }
  if (large) {
    kl_dev_block w = get(a, seg);
    assert_int_equal(w.offset, 0);
    put(a, w);
  } else { /* two of the largest small requests */
    kl_dev_block w1 = get(a, MIB), w2 = get(a, MIB);
    assert_int_equal(w1.offset, 0);
    assert_int_equal(w2.offset, MIB);
    assert_ptr_equal(w1.segment, w2.segment);
    put(a, w2);
    put(a, w1);
  }
  kl_dev_alloc_stats s = stats_of(a);
  assert_int_equal(s.segment_allocs, 1);
  assert_int_equal(s.segments, 1);
  assert_int_equal(s.cache_hits, s.allocs - 1);
  assert_int_equal(s.allocated_bytes, 0);
  assert_int_equal(s.allocated_bytes_peak, seg);
  finish(a, &d);
}

static void test_merge_small(void **state) {
  (void)state;
  merge_orders(false);
}

static void test_merge_large(void **state) {
  (void)state;
  merge_orders(true);
}

/* ---- fragmentation ---- */

typedef struct live_block {
  kl_dev_block b;
  unsigned char tag;
} live_block;

static unsigned char *block_bytes(const kl_dev_block *b) {
  return ((fake_seg *)b->segment)->data + b->offset;
}

static void fill(live_block *l) { memset(block_bytes(&l->b), l->tag, l->b.size); }

static void verify_fill(const live_block *l) {
  const unsigned char *p = block_bytes(&l->b);
  for (size_t i = 0; i < l->b.size; i++)
    if (p[i] != l->tag) fail_msg("block at %zu: byte %zu overwritten", l->b.offset, i);
}

static int by_place(const void *x, const void *y) {
  const live_block *p = x, *q = y;
  if (p->b.segment != q->b.segment)
    return (uintptr_t)p->b.segment < (uintptr_t)q->b.segment ? -1 : 1;
  return p->b.offset < q->b.offset ? -1 : p->b.offset > q->b.offset;
}

/* No two live blocks of a segment overlap, each lies inside its segment, each still holds
 * its own bytes (when contents), and the statistics are what the live blocks add up to. */
static void verify_live(const kl_dev_alloc *a, live_block *live, int n, bool contents) {
  check(a);
  size_t bytes = 0;
  for (int i = 0; i < n; i++) {
    if (contents) verify_fill(&live[i]);
    bytes += live[i].b.size;
    assert_true(live[i].b.offset + live[i].b.size <= ((fake_seg *)live[i].b.segment)->size);
  }
  live_block *sorted = malloc((size_t)n * sizeof *sorted + 1);
  assert_non_null(sorted);
  memcpy(sorted, live, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, by_place);
  for (int i = 1; i < n; i++)
    if (sorted[i].b.segment == sorted[i - 1].b.segment)
      assert_true(sorted[i - 1].b.offset + sorted[i - 1].b.size <= sorted[i].b.offset);
  free(sorted);
  kl_dev_alloc_stats s = stats_of(a);
  assert_int_equal(s.allocated_bytes, bytes);
  assert_int_equal(s.active_blocks, (size_t)n);
  assert_int_equal(s.cache_hits + s.segment_allocs, s.allocs); /* no OOM here */
  assert_true(s.allocated_bytes <= s.reserved_bytes);
}

static size_t random_size(uint32_t *rng) {
  uint32_t r = next_rand(rng), kind = r % 10;
  r = next_rand(rng);
  if (kind < 6) return r % (16 * KIB);              /* 0 included */
  if (kind < 9) return 16 * KIB + r % MIB;          /* up to the small limit and past it */
  return MIB + 1 + r % (3 * MIB);                   /* large */
}

static void alloc_random(kl_dev_alloc *a, live_block *live, int *n, uint32_t *rng) {
  live_block *l = &live[*n];
  size_t bytes = random_size(rng);
  l->b = get(a, bytes);
  assert_true(l->b.size >= bytes && l->b.size % 512 == 0);
  l->tag = (unsigned char)(next_rand(rng) | 1);
  fill(l);
  (*n)++;
}

static void release_random(kl_dev_alloc *a, live_block *live, int *n, uint32_t *rng) {
  int i = (int)(next_rand(rng) % (uint32_t)*n);
  verify_fill(&live[i]);
  put(a, live[i].b);
  live[i] = live[--*n];
}

/* Many random sizes, a random half released, as many allocated again, then mixed
 * allocation and release; invariants and overlap after every step, contents at the end
 * of each phase and of every block released. */
static void test_fragmentation(void **state) {
  (void)state;
  enum { N = 240 };
  fake_dev d = fake(SIZE_MAX);
  kl_dev_alloc *a = make(&d);
  uint32_t rng = 20240611u;
  live_block live[2 * N];
  int n = 0;
  for (int i = 0; i < N; i++) {
    alloc_random(a, live, &n, &rng);
    verify_live(a, live, n, false);
  }
  size_t reserved = stats_of(a).reserved_bytes;
  for (int i = 0; i < N / 2; i++) {
    release_random(a, live, &n, &rng);
    verify_live(a, live, n, false);
  }
  verify_live(a, live, n, true);
  assert_int_equal(stats_of(a).reserved_bytes, reserved); /* nothing given back */
  for (int i = 0; i < N / 2; i++) {
    alloc_random(a, live, &n, &rng);
    verify_live(a, live, n, false);
  }
  verify_live(a, live, n, true);
  kl_dev_alloc_stats s = stats_of(a);
  assert_true(s.cache_hits > (uint64_t)N / 4); /* the freed half served many */
  for (int i = 0; i < 4 * N; i++) {
    if (n < 2 * N && (n == 0 || next_rand(&rng) % 2))
      alloc_random(a, live, &n, &rng);
    else
      release_random(a, live, &n, &rng);
    verify_live(a, live, n, false);
  }
  verify_live(a, live, n, true);
  while (n > 0) {
    release_random(a, live, &n, &rng);
    verify_live(a, live, n, false);
  }
  /* every segment merged back into one free block */
  s = stats_of(a);
  assert_int_equal(s.cached_blocks, s.segments);
  assert_int_equal(kl_dev_alloc_empty_cache(a), s.segments);
  check(a);
  assert_int_equal(d.live_segments, 0);
  s = stats_of(a);
  assert_int_equal(s.reserved_bytes, 0);
  assert_int_equal(s.cached_blocks, 0);
  assert_int_equal(s.segment_frees, s.segment_allocs);
  finish(a, &d);
}

/* ---- out of memory ---- */

/* The device is full until the free cached segments go back; the retry then succeeds.
 * Segments holding a live block stay. */
static void test_oom_retry(void **state) {
  (void)state;
  fake_dev d = fake(6 * MIB);
  kl_dev_alloc *a = make(&d);
  kl_dev_block x = get(a, 1 * KIB); /* small segment A, kept by x */
  put(a, get(a, 4 * KIB));          /* A: a free block besides x */
  put(a, get(a, 2 * MIB));          /* large segment B, all free */
  kl_dev_block y = get(a, 2 * MIB); /* B again: cached */
  put(a, y);
  kl_dev_block s2 = get(a, 4 * KIB); /* A again, from its free rest */
  put(a, s2);
  EXPECT_STATS(a, .allocated_bytes = 1024, .allocated_bytes_peak = 1024 + 2 * MIB,
               .reserved_bytes = 4 * MIB, .reserved_bytes_peak = 4 * MIB,
               .active_blocks = 1, .active_blocks_peak = 2, .cached_blocks = 2,
               .segments = 2, .segment_allocs = 2, .allocs = 5, .cache_hits = 3);
  kl_dev_block z = get(a, 4 * MIB); /* 4 MiB + 4 MiB held > 6 MiB: B goes back, then fits */
  assert_int_equal(z.size, 4 * MIB);
  EXPECT_STATS(a, .allocated_bytes = 1024 + 4 * MIB, .allocated_bytes_peak = 1024 + 4 * MIB,
               .reserved_bytes = 6 * MIB, .reserved_bytes_peak = 6 * MIB,
               .active_blocks = 2, .active_blocks_peak = 2, .cached_blocks = 1,
               .segments = 2, .segment_allocs = 3, .segment_frees = 1, .allocs = 6,
               .cache_hits = 3, .oom_retries = 1);
  assert_int_equal(d.calls, 4);
  assert_int_equal(d.live_segments, 2);
  kl_dev_block x2 = get(a, 4 * KIB); /* A's free rest is still there */
  assert_ptr_equal(x2.segment, x.segment);
  put(a, x2);
  put(a, x);
  put(a, z);
  finish(a, &d);
}

/* A request the device cannot serve even with the cache back: KILN_ERR_OUT_OF_MEMORY
 * with the request and the statistics; the allocator holds what it held. */
static void test_oom_real(void **state) {
  (void)state;
  fake_dev d = fake(4 * MIB);
  kl_dev_alloc *a = make(&d);
  kl_dev_block h = get(a, 3 * MIB); /* a 4 MiB segment, whole */
  kl_dev_block b = {.offset = 77};
  kl_err e = {0};
  tu_assert_status(kl_dev_alloc_alloc(a, 1000, &b, &e), KILN_ERR_OUT_OF_MEMORY, e.msg,
                   "request of 1000 bytes (1024 rounded up, a new 2097152-byte segment of "
                   "the small pool)");
  tu_assert_contains(e.msg, "giving 0 cached segments (0 bytes) back and retrying");
  tu_assert_contains(e.msg, "4194304 bytes allocated in 1 blocks");
  tu_assert_contains(e.msg, "4194304 bytes reserved in 1 segments");
  tu_assert_contains(e.msg, "1 OOM retries");
  tu_assert_contains(e.msg, "fake device: 2097152 bytes asked, 0 of 4194304 free");
  assert_null(b.segment);
  assert_int_equal(b.offset, 0);
  assert_int_equal(b.size, 0);
  check(a);
  kl_dev_alloc_stats w = {.allocated_bytes = 4 * MIB, .allocated_bytes_peak = 4 * MIB,
                          .reserved_bytes = 4 * MIB, .reserved_bytes_peak = 4 * MIB,
                          .active_blocks = 1, .active_blocks_peak = 1, .segments = 1,
                          .segment_allocs = 1, .allocs = 1, .oom_retries = 1};
  expect_stats(a, &w);
  assert_int_equal(d.calls, 3);

  /* a large one too, past a cached segment that goes back in vain */
  put(a, h);
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_alloc(a, 5 * MIB, &b, &e), KILN_ERR_OUT_OF_MEMORY, e.msg,
                   "request of 5242880 bytes (5242880 rounded up, a new 6291456-byte segment "
                   "of the large pool), after giving 1 cached segments (4194304 bytes) back");
  tu_assert_contains(e.msg, "0 bytes allocated in 0 blocks, 0 bytes reserved in 0 segments");
  w.allocated_bytes = w.reserved_bytes = w.active_blocks = w.segments = 0;
  w.segment_frees = 1;
  w.oom_retries = 2;
  expect_stats(a, &w);
  check(a);

  /* with the room back, the same small request succeeds */
  kl_dev_block ok = get(a, 1000);
  assert_int_equal(ok.size, 1024);
  put(a, ok);
  finish(a, &d);
}

/* The Nth device call fails: an OOM is retried once (and the retry may succeed with
 * nothing to give back); any other failure is passed on untouched, with no retry. */
static void test_device_fails_on_demand(void **state) {
  (void)state;
  fake_dev d = fake(SIZE_MAX);
  d.fail_call = 2;
  d.fail_code = KILN_ERR_OUT_OF_MEMORY;
  kl_dev_alloc *a = make(&d);
  kl_dev_block s = get(a, 1 * KIB);
  kl_dev_block l = get(a, 2 * MIB); /* call 2 fails, call 3 succeeds */
  assert_int_equal(d.calls, 3);
  assert_int_equal(stats_of(a).oom_retries, 1);
  assert_int_equal(stats_of(a).segment_frees, 0);

  d.fail_call = 4;
  d.fail_code = KILN_ERR_INTERNAL;
  kl_dev_block b;
  kl_err e = {0};
  tu_assert_status(kl_dev_alloc_alloc(a, 4 * MIB, &b, &e), KILN_ERR_INTERNAL, e.msg,
                   "allocating a 4194304-byte device segment for a request of 4194304 bytes: "
                   "fake device: call 4 fails on demand");
  assert_int_equal(d.calls, 4);
  EXPECT_STATS(a, .allocated_bytes = 1024 + 2 * MIB, .allocated_bytes_peak = 1024 + 2 * MIB,
               .reserved_bytes = 4 * MIB, .reserved_bytes_peak = 4 * MIB,
               .active_blocks = 2, .active_blocks_peak = 2, .cached_blocks = 1,
               .segments = 2, .segment_allocs = 2, .allocs = 2, .oom_retries = 1);
  put(a, s);
  put(a, l);
  finish(a, &d);
}

/* ---- empty_cache ---- */

/* Gives back exactly the segments that are all free. */
static void test_empty_cache(void **state) {
  (void)state;
  fake_dev d = fake(SIZE_MAX);
  kl_dev_alloc *a = make(&d);
  assert_int_equal(kl_dev_alloc_empty_cache(a), 0);
  kl_dev_block l1 = get(a, 2 * MIB), l2 = get(a, 4 * MIB), l3 = get(a, 6 * MIB);
  kl_dev_block s1 = get(a, 1 * KIB), s2 = get(a, 1 * KIB);
  put(a, l1);
  put(a, l3);
  put(a, s1); /* the small segment still holds s2 */
  assert_int_equal(d.live_segments, 4);
  assert_int_equal(kl_dev_alloc_empty_cache(a), 2);
  check(a);
  assert_int_equal(d.live_segments, 2);
  assert_int_equal(d.live_bytes, 6 * MIB);
  assert_int_equal(((fake_seg *)l2.segment)->magic, FAKE_MAGIC); /* still the device's */
  assert_int_equal(((fake_seg *)s2.segment)->magic, FAKE_MAGIC);
  EXPECT_STATS(a, .allocated_bytes = 4 * MIB + 1024, .allocated_bytes_peak = 12 * MIB + 2048,
               .reserved_bytes = 6 * MIB, .reserved_bytes_peak = 14 * MIB,
               .active_blocks = 2, .active_blocks_peak = 5, .cached_blocks = 2,
               .segments = 2, .segment_allocs = 4, .segment_frees = 2, .allocs = 5,
               .cache_hits = 1);
  assert_int_equal(kl_dev_alloc_empty_cache(a), 0);
  kl_dev_block s3 = get(a, 1 * KIB); /* the small segment's cached free block */
  assert_int_equal(s3.offset, 0);
  put(a, s3);
  put(a, s2);
  put(a, l2);
  assert_int_equal(kl_dev_alloc_empty_cache(a), 2);
  assert_int_equal(d.live_segments, 0);
  EXPECT_STATS(a, .allocated_bytes_peak = 12 * MIB + 2048, .reserved_bytes_peak = 14 * MIB,
               .active_blocks_peak = 5, .segment_allocs = 4, .segment_frees = 4, .allocs = 6,
               .cache_hits = 2);
  kl_dev_block again = get(a, 100); /* and it still works */
  put(a, again);
  assert_int_equal(stats_of(a).segment_allocs, 5);
  finish(a, &d);
}

/* ---- limits and misuse ---- */

static void test_limits(void **state) {
  (void)state;
  fake_dev d = fake(64 * MIB);
  kl_dev_alloc *a = make(&d);
  kl_dev_block b;
  kl_err e = {0};
  tu_assert_status(kl_dev_alloc_alloc(a, SIZE_MAX, &b, &e), KILN_ERR_LIMIT, e.msg,
                   "too large");
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_alloc(a, SIZE_MAX - 511, &b, &e), KILN_ERR_LIMIT, e.msg,
                   "overflows size_t");
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_alloc(a, KL_DEV_ALLOC_MAX_REQUEST + 1, &b, &e), KILN_ERR_LIMIT,
                   e.msg, NULL);
  assert_int_equal(d.calls, 0);
  EXPECT_STATS(a, .allocs = 0);
  /* the largest request reaches the device, which has no room for it */
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_alloc(a, KL_DEV_ALLOC_MAX_REQUEST, &b, &e),
                   KILN_ERR_OUT_OF_MEMORY, e.msg, "large pool");
  assert_int_equal(d.calls, 2);
  check(a);
  finish(a, &d);
}

/* A block released twice, a stale copy of a block whose space was handed out again, a
 * forged or zeroed one: refused, nothing changes. */
static void test_release_misuse(void **state) {
  (void)state;
  fake_dev d = fake(SIZE_MAX);
  kl_dev_alloc *a = make(&d);
  kl_dev_block b = get(a, 1 * KIB), keep = get(a, 1 * KIB);
  put(a, b);
  kl_err e = {0};
  tu_assert_status(kl_dev_alloc_release(a, &b, &e), KILN_ERR_INVALID_ARGUMENT, e.msg,
                   "not live");
  check(a);
  kl_dev_block again = get(a, 1 * KIB); /* the same space, a new serial */
  assert_int_equal(again.offset, b.offset);
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_release(a, &b, &e), KILN_ERR_INVALID_ARGUMENT, e.msg, NULL);
  kl_dev_block forged = keep;
  forged.offset += 512;
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_release(a, &forged, &e), KILN_ERR_INVALID_ARGUMENT, e.msg,
                   NULL);
  forged = keep;
  forged.size = 512;
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_release(a, &forged, &e), KILN_ERR_INVALID_ARGUMENT, e.msg,
                   NULL);
  kl_dev_block zero = {0};
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_release(a, &zero, &e), KILN_ERR_INVALID_ARGUMENT, e.msg, NULL);
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_release(NULL, &keep, &e), KILN_ERR_INVALID_ARGUMENT, e.msg,
                   NULL);
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_release(a, NULL, &e), KILN_ERR_INVALID_ARGUMENT, e.msg, NULL);
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_alloc(NULL, 1, &zero, &e), KILN_ERR_INVALID_ARGUMENT, e.msg,
                   NULL);
  check(a);
  assert_int_equal(stats_of(a).active_blocks, 2);
  put(a, again);
  put(a, keep);
  finish(a, &d);
}

/* Freeing with live blocks: every segment goes back all the same, and the call says so. */
static void test_free_with_live_blocks(void **state) {
  (void)state;
  fake_dev d = fake(SIZE_MAX);
  kl_dev_alloc *a = make(&d);
  get(a, 1 * KIB);
  get(a, 3 * MIB);
  put(a, get(a, 8 * MIB));
  assert_int_equal(d.live_segments, 3);
  kl_err e = {0};
  tu_assert_status(kl_dev_alloc_free(a, &e), KILN_ERR_STATE, e.msg,
                   "freed with 2 blocks (4195328 bytes) still live");
  assert_int_equal(d.live_segments, 0);
  assert_int_equal(d.bad_frees, 0);
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_free(NULL, &e), KILN_OK, e.msg, NULL);
}

static void test_create_arguments(void **state) {
  (void)state;
  fake_dev d = fake(SIZE_MAX);
  kl_dev_alloc *a = (kl_dev_alloc *)&d;
  kl_err e = {0};
  tu_assert_status(kl_dev_alloc_create(NULL, &a, &e), KILN_ERR_INVALID_ARGUMENT, e.msg,
                   "seg_alloc and seg_free");
  assert_null(a);
  kl_dev_iface no_free = {.ctx = &d, .seg_alloc = fake_alloc};
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_create(&no_free, &a, &e), KILN_ERR_INVALID_ARGUMENT, e.msg,
                   NULL);
  kl_dev_iface dev = {.ctx = &d, .seg_alloc = fake_alloc, .seg_free = fake_free};
  kl_err_clear(&e);
  tu_assert_status(kl_dev_alloc_create(&dev, NULL, &e), KILN_ERR_INVALID_ARGUMENT, e.msg, NULL);
  kl_dev_alloc_stats s;
  kl_dev_alloc_stats_get(NULL, &s);
  assert_int_equal(s.allocs, 0);
  assert_int_equal(kl_dev_alloc_empty_cache(NULL), 0);
  assert_int_equal(d.calls, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rounding),
      cmocka_unit_test(test_pools_separate),
      cmocka_unit_test(test_best_fit_small),
      cmocka_unit_test(test_best_fit_large),
      cmocka_unit_test(test_merge_small),
      cmocka_unit_test(test_merge_large),
      cmocka_unit_test(test_fragmentation),
      cmocka_unit_test(test_oom_retry),
      cmocka_unit_test(test_oom_real),
      cmocka_unit_test(test_device_fails_on_demand),
      cmocka_unit_test(test_empty_cache),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_release_misuse),
      cmocka_unit_test(test_free_with_live_blocks),
      cmocka_unit_test(test_create_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
