/* Sequences and optionals at run time.
 *
 * A sequence value is one block of memory, position-independent so that it copies with
 * memcpy: a header, an item per element (dtype, shape, offset and size of its data in
 * the block), then the elements' data, each 64-byte aligned. Its kl_tensor has the
 * elements' dtype, rank 0, and data pointing at the block. An optional value is its
 * element (a tensor or a sequence) or, holding none, a kl_tensor of rank -1 and no data.
 * Which of these a value is, the graph's type says (kl_type.seq, .opt).
 */
#ifndef KL_SEQUENCE_H
#define KL_SEQUENCE_H

#include "ir/ir.h"

typedef struct kl_seq_item {
  int32_t dtype, rank;
  int64_t dims[KL_MAX_RANK];
  uint64_t offset, bytes; /* of its data, from the start of the block */
} kl_seq_item;

typedef struct kl_seq {
  uint64_t magic; /* KL_SEQ_MAGIC */
  uint64_t count;
  uint64_t bytes; /* the whole block */
  uint64_t reserved;
  kl_seq_item items[];
} kl_seq;

#define KL_SEQ_MAGIC UINT64_C(0x71657320736c696b) /* "kils seq" */
#define KL_SEQ_ALIGN 64

/* The bytes of a block of count elements of these sizes, or 0 on overflow. */
size_t kl_seq_block_bytes(int64_t count, const size_t *item_bytes);
/* Lays out a block of count elements with these dtypes and shapes in mem (of
 * kl_seq_block_bytes bytes): header, items, offsets; the data is the caller's to fill. */
void kl_seq_layout(void *mem, int64_t count, const kl_tensor *const *shapes);
/* Element k of sequence value t as a tensor (its data inside the block). */
kl_tensor kl_seq_item_tensor(const kl_tensor *t, int64_t k);
int64_t kl_seq_count(const kl_tensor *t);
/* The bytes value t takes: a sequence's block, nothing for an optional holding none, a
 * tensor's elements. ty is the value's graph type. */
size_t kl_value_bytes(const kl_tensor *t, const kl_type *ty);
/* Whether t, of graph type ty, is an optional holding no element. */
bool kl_value_is_none(const kl_tensor *t, const kl_type *ty);

/* Where output k of a sequence op goes: the session gives it `bytes` bytes (none for 0)
 * and *out, a tensor of shape's dtype and dims with that data, to fill. */
typedef kiln_status (*kl_value_alloc)(void *ctx, int k, const kl_tensor *shape, size_t bytes,
                                      kl_tensor **out);

/* Runs sequence or optional op n (or an Identity of such a value): in[k] its inputs
 * (NULL when absent), tin[k] their graph types. */
kiln_status kl_seq_run(const kl_node *n, const kl_tensor *const *in, const kl_type *const *tin,
                       kl_value_alloc alloc, void *ctx, kl_err *e);

#endif
