/* Reference kernels for element-wise indexing: GatherElements, GatherND,
 * ScatterElements and ScatterND. Index values are data, so they are checked here
 * (negative ones count from the end) and a bad one fails the run naming it.
 */
#include "backends/cpu/ref/ref.h"

static void strides_of(const kl_tensor *t, int64_t *s) {
  int64_t n = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    s[d] = n;
    n *= t->dims[d];
  }
}

/* Index element i of idx into [0, len), or a failure naming it. */
static kiln_status index_at(kl_kernel_ctx *c, const kl_tensor *idx, int64_t i, int64_t len,
                            int64_t *k) {
  *k = kl_ref_load_int(idx->data, idx->dtype, i);
  if (*k < -len || *k >= len)
    return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input 1 (indices) has %lld at element "
                   "%lld, expected %lld to %lld", (long long)*k, (long long)i,
                   (long long)-len, (long long)len - 1);
  if (*k < 0) *k += len;
  return KILN_OK;
}

/* ---- reductions of the scatters ---- */

typedef enum reduction { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN } reduction;

static reduction reduction_of(const kl_node *n) {
  static const char *const names[] = {"none", "add", "mul", "max", "min"};
  const char *r = kl_attr_string(n, "reduction", "none");
  for (int i = 1; i < 5; i++)
    if (strcmp(r, names[i]) == 0) return (reduction)i;
  return RED_NONE;
}

static double reduce_f(reduction r, double a, double b) {
  switch (r) {
  case RED_ADD: return a + b;
  case RED_MUL: return a * b;
  case RED_MAX: return a > b ? a : b;
  case RED_MIN: return a < b ? a : b;
  default: return b;
  }
}

/* Integers wrap on overflow, as two's complement hardware (and onnxruntime) do. */
static int64_t reduce_i(reduction r, int64_t a, int64_t b) {
  switch (r) {
  case RED_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
  case RED_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
  case RED_MAX: return a > b ? a : b;
  case RED_MIN: return a < b ? a : b;
  default: return b;
  }
}

/* y[yi] = y[yi] (reduction) u[ui]; a plain copy without a reduction. */
static void scatter_elem(reduction r, kl_tensor *y, int64_t yi, const kl_tensor *u, int64_t ui) {
  kl_dtype t = y->dtype;
  size_t es = kl_dtype_size(t);
  if (r == RED_NONE) {
    memcpy((char *)y->data + (size_t)yi * es, (const char *)u->data + (size_t)ui * es, es);
  } else if (kl_dtype_is_float(t)) {
    kl_ref_store(y->data, t, yi, reduce_f(r, kl_ref_load(y->data, t, yi),
                                          kl_ref_load(u->data, t, ui)));
  } else {
    int64_t v = reduce_i(r, kl_load_i64(y->data, t, (size_t)yi), kl_load_i64(u->data, t, (size_t)ui));
    if (t == KL_I32 || t == KL_I64) kl_ref_store_int(y->data, t, yi, v);
    else kl_store_f64(y->data, t, (size_t)yi, (double)v);
  }
}

/* ---- GatherElements and ScatterElements ---- */

/* For element i of the indices (walked by it), the offset in a tensor of strides s
 * that it addresses: its own position except along axis, where the index value. */
static kiln_status element_offset(kl_kernel_ctx *c, const kl_ref_iter *it, const kl_tensor *idx,
                                  int64_t i, int axis, int64_t len, const int64_t *s,
                                  int64_t *off) {
  int64_t k;
  kiln_status st = index_at(c, idx, i, len, &k);
  *off = 0;
  for (int d = 0; d < it->rank; d++) *off += (d == axis ? k : it->idx[d]) * s[d];
  return st;
}

static int axis_of(const kl_node *n, int rank) {
  int64_t a = kl_attr_int(n, "axis", 0);
  return (int)(a < 0 ? a + rank : a);
}

/* Y (shape of indices)[i] = X[i with the axis coordinate replaced by indices[i]]. */
int kl_ref_gather_elements(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *idx = c->in[1];
  kl_tensor *y = c->out[0];
  int axis = axis_of(c->node, x->rank);
  int64_t xs[KL_MAX_RANK], n = kl_tensor_numel(idx), off;
  strides_of(x, xs);
  size_t es = kl_dtype_size(x->dtype);
  kl_ref_iter it;
  kl_ref_iter_init(&it, idx->rank, idx->dims);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    kiln_status st = element_offset(c, &it, idx, i, axis, x->dims[axis], xs, &off);
    if (st != KILN_OK) return st;
    memcpy((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)off * es, es);
  }
  return KILN_OK;
}

/* Y = data; then Y[i with the axis coordinate replaced by indices[i]] (op)= updates[i],
 * in the order of the updates. */
int kl_ref_scatter_elements(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *idx = c->in[1], *u = c->in[2];
  kl_tensor *y = c->out[0];
  reduction r = reduction_of(c->node);
  int axis = axis_of(c->node, x->rank);
  int64_t ys[KL_MAX_RANK], n = kl_tensor_numel(idx), off;
  strides_of(y, ys);
  kl_ref_copy_bytes(y->data, x->data, kl_tensor_nbytes(x));
  kl_ref_iter it;
  kl_ref_iter_init(&it, idx->rank, idx->dims);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    kiln_status st = element_offset(c, &it, idx, i, axis, y->dims[axis], ys, &off);
    if (st != KILN_OK) return st;
    scatter_elem(r, y, off, u, i);
  }
  return KILN_OK;
}

/* ---- GatherND and ScatterND ---- */

/* The offset, within a block of dims[0..k) (strides s), of index tuple t of idx. */
static kiln_status tuple_offset(kl_kernel_ctx *c, const kl_tensor *idx, int64_t t, int k,
                                const int64_t *dims, const int64_t *s, int64_t *off) {
  *off = 0;
  for (int j = 0; j < k; j++) {
    int64_t v;
    kiln_status st = index_at(c, idx, t * k + j, dims[j], &v);
    if (st != KILN_OK) return st;
    *off += v * s[j];
  }
  return KILN_OK;
}

/* With b batch dims: for each batch entry and each index tuple in it, Y gets the slice
 * data[batch, i_0, ..., i_{k-1}, :]. */
int kl_ref_gather_nd(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *idx = c->in[1];
  kl_tensor *y = c->out[0];
  int b = (int)kl_attr_int(c->node, "batch_dims", 0), k = (int)idx->dims[idx->rank - 1];
  int64_t xs[KL_MAX_RANK], batches = kl_ref_span(x->dims, 0, b);
  int64_t tuples = kl_ref_span(idx->dims, b, idx->rank - 1);
  int64_t block = kl_ref_span(x->dims, b, x->rank);
  size_t es = kl_dtype_size(x->dtype);
  size_t slice = (size_t)kl_ref_span(x->dims, b + k, x->rank) * es;
  strides_of(x, xs);
  for (int64_t bi = 0; bi < batches; bi++)
    for (int64_t t = 0; t < tuples; t++) {
      int64_t off, at = bi * tuples + t;
      kiln_status st = tuple_offset(c, idx, at, k, x->dims + b, xs + b, &off);
      if (st != KILN_OK) return st;
      if (slice == 0) continue; /* empty slices: the indices checked, nothing to copy (and
                                 * an empty X or Y may have no buffer to offset into) */
      kl_ref_copy_bytes((char *)y->data + (size_t)at * slice,
                        (const char *)x->data + (size_t)(bi * block + off) * es, slice);
    }
  return KILN_OK;
}

/* Y = data; then for each index tuple t, Y[i_0, ..., i_{k-1}, :] (op)= updates[t, :]. */
int kl_ref_scatter_nd(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *idx = c->in[1], *u = c->in[2];
  kl_tensor *y = c->out[0];
  reduction r = reduction_of(c->node);
  int k = (int)idx->dims[idx->rank - 1];
  int64_t ys[KL_MAX_RANK], tuples = kl_ref_span(idx->dims, 0, idx->rank - 1);
  int64_t slice = kl_ref_span(y->dims, k, y->rank);
  strides_of(y, ys);
  kl_ref_copy_bytes(y->data, x->data, kl_tensor_nbytes(x));
  for (int64_t t = 0; t < tuples; t++) {
    int64_t off;
    kiln_status st = tuple_offset(c, idx, t, k, y->dims, ys, &off);
    if (st != KILN_OK) return st;
    for (int64_t e = 0; e < slice; e++) scatter_elem(r, y, off + e, u, t * slice + e);
  }
  return KILN_OK;
}
