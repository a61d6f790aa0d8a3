/* Reference data-movement kernels: copy (Identity, Flatten, Reshape, Squeeze,
 * Unsqueeze), Concat, Transpose, Shape and Gather. They move bytes, so they serve
 * every dtype.
 */
#include "backends/cpu/ref/ref.h"

/* Y = X: only the shape differs, and the bytes are the same row-major order. */
int kl_ref_copy(kl_kernel_ctx *c) {
  kl_ref_copy_bytes(c->out[0]->data, c->in[0]->data, kl_tensor_nbytes(c->in[0]));
  return KILN_OK;
}

/* Concat along axis: Y = [outer, sum of the inputs' axis dims, inner]; each input
 * contributes a block of dims[axis] * inner elements per outer index. */
int kl_ref_concat(kl_kernel_ctx *c) {
  kl_tensor *y = c->out[0];
  int64_t a = kl_attr_int(c->node, "axis", 0);
  int axis = (int)(a < 0 ? a + y->rank : a);
  size_t es = kl_dtype_size(y->dtype);
  int64_t outer = kl_ref_span(y->dims, 0, axis);
  int64_t inner = kl_ref_span(y->dims, axis + 1, y->rank);
  char *dst = y->data;
  for (int64_t o = 0; o < outer; o++)
    for (int i = 0; i < c->n_in; i++) {
      const kl_tensor *x = c->in[i];
      size_t block = (size_t)(x->dims[axis] * inner) * es;
      if (block == 0) continue;
      memcpy(dst, (const char *)x->data + (size_t)o * block, block);
      dst += block;
    }
  return KILN_OK;
}

/* Y[i0, ..., ir] = X[j] with j[perm[k]] = i_k: walk Y in order with X's strides
 * permuted. */
int kl_ref_transpose(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  const int64_t *perm;
  bool given = kl_attr_ints(c->node, "perm", &perm) >= 0;
  int64_t xstride[KL_MAX_RANK], s = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    xstride[d] = s;
    s *= x->dims[d];
  }
  kl_ref_iter it;
  kl_ref_iter_init(&it, y->rank, y->dims);
  for (int k = 0; k < y->rank; k++)
    it.stride[0][k] = xstride[given ? perm[k] : y->rank - 1 - k];
  size_t es = kl_dtype_size(y->dtype);
  int64_t n = kl_tensor_numel(y);
  const char *src = x->data;
  char *dst = y->data;
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it))
    memcpy(dst + (size_t)i * es, src + (size_t)it.off[0] * es, es);
  return KILN_OK;
}

/* Y = dims[start:end] of X as int64 (start/end clamped as in Shape-15). */
int kl_ref_shape(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int64_t start = kl_attr_int(c->node, "start", 0);
  if (start < 0) start += x->rank;
  if (start < 0) start = 0;
  for (int64_t i = 0; i < y->dims[0]; i++) ((int64_t *)y->data)[i] = x->dims[start + i];
  return KILN_OK;
}

/* Indices must lie in [-len, len); checked before any copying. */
static kiln_status check_indices(kl_kernel_ctx *c, const kl_tensor *idx, int64_t len) {
  int64_t count = kl_tensor_numel(idx);
  for (int64_t j = 0; j < count; j++) {
    int64_t k = kl_ref_load_int(idx->data, idx->dtype, j);
    if (k < -len || k >= len)
      return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input 1 (indices) has %lld at "
                     "element %lld, expected %lld to %lld", (long long)k, (long long)j,
                     (long long)-len, (long long)len - 1);
  }
  return KILN_OK;
}

/* Gather along axis: X viewed as [outer, len, inner], Y as [outer, count, inner] with
 * Y[o, j, :] = X[o, idx[j], :]; negative indexes count from the end. */
int kl_ref_gather(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *idx = c->in[1];
  int64_t a = kl_attr_int(c->node, "axis", 0);
  int axis = (int)(a < 0 ? a + x->rank : a);
  int64_t outer = kl_ref_span(x->dims, 0, axis), len = x->dims[axis];
  size_t block = (size_t)kl_ref_span(x->dims, axis + 1, x->rank) * kl_dtype_size(x->dtype);
  int64_t count = kl_tensor_numel(idx);
  kiln_status st = check_indices(c, idx, len);
  if (st != KILN_OK || block == 0) return st;
  char *dst = c->out[0]->data;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < count; j++, dst += block) {
      int64_t k = kl_ref_load_int(idx->data, idx->dtype, j);
      if (k < 0) k += len;
      memcpy(dst, (const char *)x->data + (size_t)(o * len + k) * block, block);
    }
  return KILN_OK;
}
