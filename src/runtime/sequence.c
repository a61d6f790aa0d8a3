/* The sequence and optional ops (sequence.h). */
#include "runtime/sequence.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static size_t align_up(size_t n) { return (n + KL_SEQ_ALIGN - 1) & ~(size_t)(KL_SEQ_ALIGN - 1); }

static size_t header_bytes(int64_t count) {
  return align_up(sizeof(kl_seq) + sizeof(kl_seq_item) * (size_t)count);
}

size_t kl_seq_block_bytes(int64_t count, const size_t *item_bytes) {
  if (count < 0 || (uint64_t)count > SIZE_MAX / 2 / sizeof(kl_seq_item)) return 0;
  size_t total = header_bytes(count);
  for (int64_t k = 0; k < count; k++) {
    size_t b = align_up(item_bytes[k]);
    if (b < item_bytes[k] || total > SIZE_MAX - b) return 0;
    total += b;
  }
  return total;
}

void kl_seq_layout(void *mem, int64_t count, const kl_tensor *const *shapes) {
  kl_seq *s = mem;
  s->magic = KL_SEQ_MAGIC;
  s->count = (uint64_t)count;
  s->reserved = 0;
  size_t at = header_bytes(count);
  for (int64_t k = 0; k < count; k++) {
    kl_seq_item *it = &s->items[k];
    memset(it, 0, sizeof *it);
    it->dtype = shapes[k]->dtype;
    it->rank = shapes[k]->rank;
    memcpy(it->dims, shapes[k]->dims, sizeof(int64_t) * (size_t)shapes[k]->rank);
    it->offset = at;
    it->bytes = kl_tensor_nbytes(shapes[k]);
    at += align_up((size_t)it->bytes);
  }
  s->bytes = at;
}

int64_t kl_seq_count(const kl_tensor *t) {
  const kl_seq *s = t->data;
  return s ? (int64_t)s->count : 0;
}

kl_tensor kl_seq_item_tensor(const kl_tensor *t, int64_t k) {
  const kl_seq *s = t->data;
  const kl_seq_item *it = &s->items[k];
  kl_tensor x = {(kl_dtype)it->dtype, it->rank, {0}, (char *)s + it->offset};
  memcpy(x.dims, it->dims, sizeof(int64_t) * (size_t)it->rank);
  if (!it->bytes) x.data = NULL;
  return x;
}

bool kl_value_is_none(const kl_tensor *t, const kl_type *ty) {
  return ty->opt && t->rank < 0;
}

size_t kl_value_bytes(const kl_tensor *t, const kl_type *ty) {
  if (kl_value_is_none(t, ty)) return 0;
  if (ty->seq) return t->data ? (size_t)((const kl_seq *)t->data)->bytes : 0;
  return kl_tensor_nbytes(t);
}

/* ---- the ops ---- */

/* Output 0: a sequence of the count tensors items[] (copied). */
static kiln_status emit_seq(kl_dtype dtype, int64_t count, const kl_tensor *items,
                            kl_value_alloc alloc, void *ctx, kl_err *e) {
  size_t *bytes = malloc(sizeof(size_t) * (size_t)(count + 1));
  const kl_tensor **shapes = calloc((size_t)(count + 1), sizeof *shapes);
  if (!bytes || !shapes) {
    free(bytes);
    free(shapes);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (int64_t k = 0; k < count; k++) {
    bytes[k] = kl_tensor_nbytes(&items[k]);
    shapes[k] = &items[k];
  }
  size_t total = kl_seq_block_bytes(count, bytes);
  kiln_status st = total ? KILN_OK : kl_fail(e, KILN_ERR_LIMIT, "a sequence of %" PRId64
                                                 " elements is too large", count);
  kl_tensor shape = {.dtype = dtype, .rank = 0}, *out = NULL;
  if (st == KILN_OK) st = alloc(ctx, 0, &shape, total, &out);
  if (st == KILN_OK) {
    kl_seq_layout(out->data, count, shapes);
    for (int64_t k = 0; k < count; k++)
      if (bytes[k]) memcpy((char *)out->data + ((kl_seq *)out->data)->items[k].offset,
                           items[k].data, bytes[k]);
  }
  free(bytes);
  free(shapes);
  return st;
}

/* Output k: a copy of tensor x. */
static kiln_status emit_tensor(int k, const kl_tensor *x, kl_value_alloc alloc, void *ctx) {
  kl_tensor *out = NULL;
  size_t bytes = kl_tensor_nbytes(x);
  kiln_status st = alloc(ctx, k, x, bytes, &out);
  if (st == KILN_OK && bytes) memcpy(out->data, x->data, bytes);
  return st;
}

/* Output 0: a copy of value x of graph type ty (a tensor, a sequence, none). */
static kiln_status emit_value(const kl_tensor *x, const kl_type *ty, kl_value_alloc alloc,
                              void *ctx) {
  kl_tensor *out = NULL;
  size_t bytes = kl_value_bytes(x, ty);
  kl_tensor shape = *x;
  if (kl_value_is_none(x, ty)) shape.rank = -1;
  kiln_status st = alloc(ctx, 0, &shape, bytes, &out);
  if (st == KILN_OK && bytes) memcpy(out->data, x->data, bytes);
  return st;
}

/* A position input: one int32 or int64 within [lo, hi] (negative ones count from n). */
static kiln_status position(const kl_tensor *p, int64_t n, bool at_end_ok, int64_t *pos,
                            kl_err *e) {
  if (kl_tensor_numel(p) != 1 || (p->dtype != KL_I32 && p->dtype != KL_I64))
    return kl_fail(e, KILN_ERR_SHAPE, "position must be one int32 or int64");
  int64_t v = kl_load_i64(p->data, p->dtype, 0);
  int64_t hi = at_end_ok ? n : n - 1;
  if (v < -n || v > hi)
    return kl_fail(e, KILN_ERR_SHAPE, "position %" PRId64 " is out of range for a sequence of "
                   "%" PRId64 " (%" PRId64 " to %" PRId64 ")", v, n, -n, hi);
  *pos = v < 0 ? v + n : v;
  return KILN_OK;
}

/* The elements of sequence value t, as tensors into its block (plus room for one). */
static kl_tensor *items_of(const kl_tensor *t, int64_t *count, kl_err *e) {
  int64_t n = kl_seq_count(t);
  kl_tensor *items = malloc(sizeof *items * (size_t)(n + 2));
  if (!items) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), NULL;
  for (int64_t k = 0; k < n; k++) items[k] = kl_seq_item_tensor(t, k);
  *count = n;
  return items;
}

static kiln_status split_to_sequence(const kl_node *n, const kl_tensor *x, const kl_tensor *split,
                                     kl_value_alloc alloc, void *ctx, kl_err *e) {
  int64_t axis = kl_attr_int(n, "axis", 0);
  if (axis < -x->rank || axis >= x->rank)
    return kl_fail(e, KILN_ERR_SHAPE, "axis %" PRId64 " is out of range for rank %d", axis,
                   x->rank);
  if (axis < 0) axis += x->rank;
  int64_t len = x->dims[axis], count;
  bool squeeze = !split && kl_attr_int(n, "keepdims", 1) == 0;
  int64_t chunk = 1, *sizes = NULL;
  if (split && split->rank == 0) {
    chunk = kl_load_i64(split->data, split->dtype, 0);
    if (chunk <= 0)
      return kl_fail(e, KILN_ERR_SHAPE, "split %" PRId64 " must be positive", chunk);
    count = (len + chunk - 1) / chunk;
  } else if (split) {
    count = kl_tensor_numel(split);
    int64_t sum = 0;
    for (int64_t k = 0; k < count; k++) {
      int64_t s = kl_load_i64(split->data, split->dtype, k);
      if (s < 0 || s > len - sum)
        return kl_fail(e, KILN_ERR_SHAPE, "split sizes do not add up to the %" PRId64
                       " of axis %" PRId64, len, axis);
      sum += s;
    }
    if (sum != len)
      return kl_fail(e, KILN_ERR_SHAPE, "split sizes add up to %" PRId64 ", axis %" PRId64
                     " has %" PRId64, sum, axis, len);
  } else {
    count = len;
  }
  size_t esize = kl_dtype_size(x->dtype), inner = esize, outer = 1;
  for (int d = (int)axis + 1; d < x->rank; d++) inner *= (size_t)x->dims[d];
  for (int d = 0; d < axis; d++) outer *= (size_t)x->dims[d];
  /* The sequence's bytes first, with nothing of count's size made yet: the allocator
   * refuses a block past the session's limit (max_tensor_bytes) with a clear error, where
   * 2^40 items of an empty [2^40, 0] ran out of memory in the arrays below. Item k holds
   * size(k) * inner * outer bytes: a split list's sizes, else chunks of `chunk` and a
   * last one of the rest. */
  size_t row = inner * outer, total = 0, last = 0;
  bool over = (uint64_t)count > SIZE_MAX / 2 / sizeof(kl_seq_item);
  if (!over) total = header_bytes(count);
  if (!over && split && split->rank == 1) {
    for (int64_t k = 0; !over && k < count; k++) {
      size_t b = (size_t)kl_load_i64(split->data, split->dtype, k) * row;
      over = __builtin_add_overflow(total, align_up(b), &total);
    }
  } else if (!over && count > 0) {
    size_t full, each = align_up((size_t)chunk * row);
    last = align_up((size_t)(len - (count - 1) * chunk) * row);
    over = __builtin_mul_overflow((size_t)(count - 1), each, &full) ||
           __builtin_add_overflow(total, full, &total) ||
           __builtin_add_overflow(total, last, &total);
  }
  if (over)
    return kl_fail(e, KILN_ERR_LIMIT, "a sequence of %" PRId64 " elements is too large", count);
  kl_tensor shape = {.dtype = x->dtype, .rank = 0}, *out = NULL;
  kiln_status st = alloc(ctx, 0, &shape, total, &out);
  if (st != KILN_OK) return st;
  kl_tensor *items = malloc(sizeof *items * (size_t)(count + 1));
  const kl_tensor **shapes = calloc((size_t)(count + 1), sizeof *shapes);
  sizes = malloc(sizeof *sizes * (size_t)(count + 1));
  if (!items || !shapes || !sizes) {
    free(items);
    free(shapes);
    free(sizes);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (int64_t k = 0, start = 0; k < count; k++) {
    int64_t s = split && split->rank == 1 ? kl_load_i64(split->data, split->dtype, k)
                                          : (len - start < chunk ? len - start : chunk);
    sizes[k] = s;
    start += s;
    items[k] = *x;
    items[k].dims[axis] = s;
    if (squeeze) {
      memmove(&items[k].dims[axis], &items[k].dims[axis + 1],
              sizeof(int64_t) * (size_t)(x->rank - 1 - axis));
      items[k].rank--;
    }
    shapes[k] = &items[k];
  }
  /* each chunk's rows gathered into its place in the block */
  kl_seq_layout(out->data, count, shapes);
  kl_seq *seq = out->data;
  for (int64_t k = 0, start = 0; k < count; k++) {
    size_t piece = (size_t)sizes[k] * inner;
    char *at = (char *)out->data + seq->items[k].offset;
    for (size_t o = 0; o < outer && piece; o++)
      memcpy(at + o * piece, (const char *)x->data + (o * (size_t)len + (size_t)start) * inner,
             piece);
    start += sizes[k];
  }
  free(items);
  free(shapes);
  free(sizes);
  return KILN_OK;
}

static kiln_status concat_from_sequence(const kl_node *n, const kl_tensor *s,
                                        kl_value_alloc alloc, void *ctx, kl_err *e) {
  int64_t count = kl_seq_count(s);
  if (count == 0) return kl_fail(e, KILN_ERR_SHAPE, "the sequence is empty: nothing to concatenate");
  bool stack = kl_attr_int(n, "new_axis", 0) != 0;
  kl_tensor first = kl_seq_item_tensor(s, 0), y = first;
  int rank = first.rank + (stack ? 1 : 0);
  int64_t axis = kl_attr_int(n, "axis", 0);
  if (rank > KL_MAX_RANK || axis < -rank || axis >= rank)
    return kl_fail(e, KILN_ERR_SHAPE, "axis %" PRId64 " is out of range for rank %d", axis, rank);
  if (axis < 0) axis += rank;
  if (stack) {
    memmove(&y.dims[axis + 1], &y.dims[axis], sizeof(int64_t) * (size_t)(first.rank - axis));
    y.dims[axis] = 0;
    y.rank = rank;
  } else {
    y.dims[axis] = 0;
  }
  for (int64_t k = 0; k < count; k++) {
    kl_tensor x = kl_seq_item_tensor(s, k);
    bool ok = x.dtype == first.dtype && x.rank == first.rank;
    for (int d = 0; ok && d < first.rank; d++) ok = (!stack && d == axis) || x.dims[d] == first.dims[d];
    if (!ok)
      return kl_fail(e, KILN_ERR_SHAPE, "element %" PRId64 " does not fit element 0's shape "
                     "to be %s along axis %" PRId64, k, stack ? "stacked" : "concatenated", axis);
    y.dims[axis] += stack ? 1 : x.dims[axis];
  }
  int64_t numel;
  if (!kl_dims_fit(y.rank, y.dims, &numel))
    return kl_fail(e, KILN_ERR_LIMIT, "the result would be too large");
  kl_tensor *out = NULL;
  kiln_status st = alloc(ctx, 0, &y, kl_tensor_nbytes(&y), &out);
  if (st != KILN_OK) return st;
  size_t esize = kl_dtype_size(y.dtype), inner = esize, outer = 1;
  for (int d = (int)axis + 1; d < y.rank; d++) inner *= (size_t)y.dims[d];
  for (int d = 0; d < axis; d++) outer *= (size_t)y.dims[d];
  size_t row_out = (size_t)y.dims[axis] * inner, at = 0;
  for (int64_t k = 0; k < count; k++) {
    kl_tensor x = kl_seq_item_tensor(s, k);
    size_t row = (size_t)(stack ? 1 : x.dims[axis]) * inner;
    for (size_t o = 0; o < outer && row; o++)
      memcpy((char *)out->data + o * row_out + at, (const char *)x.data + o * row, row);
    at += row;
  }
  return KILN_OK;
}

kiln_status kl_seq_run(const kl_node *n, const kl_tensor *const *in, const kl_type *const *tin,
                       kl_value_alloc alloc, void *ctx, kl_err *e) {
  const kl_tensor *a = n->n_in > 0 ? in[0] : NULL, *b = n->n_in > 1 ? in[1] : NULL;
  const kl_tensor *c = n->n_in > 2 ? in[2] : NULL;
  int64_t count = 0, pos = 0;
  kl_tensor *items = NULL;
  kiln_status st = KILN_OK;
  switch (n->op) {
  case KL_OP_Identity: return emit_value(a, tin[0], alloc, ctx);
  case KL_OP_SequenceEmpty:
    return emit_seq((kl_dtype)kl_attr_int(n, "dtype", KL_F32), 0, NULL, alloc, ctx, e);
  case KL_OP_SequenceConstruct: {
    if (!(items = malloc(sizeof *items * (size_t)(n->n_in + 1))))
      return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int k = 0; k < n->n_in && st == KILN_OK; k++) {
      items[k] = *in[k];
      if (in[k]->dtype != a->dtype)
        st = kl_fail(e, KILN_ERR_DTYPE, "input %d is %s, input 0 %s", k,
                     kl_dtype_name(in[k]->dtype), kl_dtype_name(a->dtype));
    }
    if (st == KILN_OK) st = emit_seq(a->dtype, n->n_in, items, alloc, ctx, e);
    break;
  }
  case KL_OP_SequenceInsert:
    if (!(items = items_of(a, &count, e))) return e->code;
    if (b->dtype != a->dtype)
      st = kl_fail(e, KILN_ERR_DTYPE, "a sequence of %s cannot hold a %s tensor",
                   kl_dtype_name(a->dtype), kl_dtype_name(b->dtype));
    if (st == KILN_OK && c) st = position(c, count, true, &pos, e);
    else pos = count;
    if (st == KILN_OK) {
      memmove(&items[pos + 1], &items[pos], sizeof *items * (size_t)(count - pos));
      items[pos] = *b;
      st = emit_seq(a->dtype, count + 1, items, alloc, ctx, e);
    }
    break;
  case KL_OP_SequenceErase:
    if (!(items = items_of(a, &count, e))) return e->code;
    if (count == 0) st = kl_fail(e, KILN_ERR_SHAPE, "the sequence is empty: nothing to erase");
    else if (b) st = position(b, count, false, &pos, e);
    else pos = count - 1;
    if (st == KILN_OK) {
      memmove(&items[pos], &items[pos + 1], sizeof *items * (size_t)(count - pos - 1));
      st = emit_seq(a->dtype, count - 1, items, alloc, ctx, e);
    }
    break;
  case KL_OP_SequenceAt: {
    st = position(b, kl_seq_count(a), false, &pos, e);
    kl_tensor x;
    if (st == KILN_OK) x = kl_seq_item_tensor(a, pos);
    if (st == KILN_OK) st = emit_tensor(0, &x, alloc, ctx);
    break;
  }
  case KL_OP_SequenceLength: {
    int64_t len = kl_seq_count(a);
    kl_tensor x = {.dtype = KL_I64, .rank = 0, .data = &len};
    return emit_tensor(0, &x, alloc, ctx);
  }
  case KL_OP_SplitToSequence: return split_to_sequence(n, a, b, alloc, ctx, e);
  case KL_OP_ConcatFromSequence: return concat_from_sequence(n, a, alloc, ctx, e);
  case KL_OP_Optional:
    if (a) return emit_value(a, tin[0], alloc, ctx);
    {
      kl_tensor none = {.dtype = (kl_dtype)kl_attr_int(n, "elem_dtype", KL_F32), .rank = -1};
      kl_tensor *out;
      return alloc(ctx, 0, &none, 0, &out);
    }
  case KL_OP_OptionalHasElement: {
    uint8_t has = a && !kl_value_is_none(a, tin[0]);
    kl_tensor x = {.dtype = KL_BOOL, .rank = 0, .data = &has};
    return emit_tensor(0, &x, alloc, ctx);
  }
  case KL_OP_OptionalGetElement:
    if (kl_value_is_none(a, tin[0]))
      return kl_fail(e, KILN_ERR_STATE, "the optional holds no element");
    {
      kl_type t = *tin[0];
      t.opt = false;
      return emit_value(a, &t, alloc, ctx);
    }
  default:
    return kl_fail(e, KILN_ERR_INTERNAL, "%s is not a sequence op", kl_op_name(n->op));
  }
  free(items);
  return st;
}
