/* Reference kernels of the channels-last forms (ir/layout.h): X (and Sum) are
 * transposed into [N, C, H, W] buffers of our own, the base op's reference kernel
 * writes Y in that layout into another, which is transposed into the output. Slow by
 * design: the oracle; oneDNN runs these nodes without any copy. */
#include "backends/cpu/ref/ref.h"
#include "ir/layout.h"

#include <stdlib.h>

#define KL_LAYOUT_MAX_IN 8

/* A buffer holding t permuted to the ONNX layout, padded to rank 4. */
static kiln_status to_nchw(const kl_tensor *t, kl_tensor *out, kl_err *e) {
  size_t bytes = kl_tensor_nbytes(t);
  out->dtype = t->dtype;
  out->rank = 4;
  kl_layout_permute_dims(t->rank, t->dims, kl_layout_to_nchw, out->dims);
  out->data = malloc(bytes ? bytes : 1);
  if (!out->data)
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a channels-first copy "
                   "(%zu bytes)", bytes);
  kl_layout_permute_data(t->data, t->rank, t->dims, kl_layout_to_nchw,
                         kl_dtype_size(t->dtype), out->data);
  return KILN_OK;
}

int kl_layout_ref(kl_kernel_ctx *c, kl_kernel_fn base) {
  if (c->n_in > KL_LAYOUT_MAX_IN || c->n_out < 1 || c->out[0]->rank != 4 ||
      !c->in[0] || c->in[0]->rank != 4)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "channels-last %s without rank-4 X and Y",
                   kl_op_name(c->node->op));
  kl_tensor moved[KL_LAYOUT_MAX_IN], y;
  const kl_tensor *in[KL_LAYOUT_MAX_IN];
  void *owned[KL_LAYOUT_MAX_IN + 1] = {NULL};
  int n_owned = 0;
  kiln_status st = KILN_OK;
  for (int k = 0; k < c->n_in; k++) {
    in[k] = c->in[k];
    if (!in[k] || !kl_layout_activation_slot(c->node, k) || st != KILN_OK) continue;
    st = to_nchw(in[k], &moved[k], c->e);
    owned[n_owned++] = moved[k].data;
    in[k] = &moved[k];
  }
  const kl_tensor *out = c->out[0];
  size_t bytes = kl_tensor_nbytes(out);
  y.dtype = out->dtype;
  y.rank = 4;
  kl_layout_permute_dims(4, out->dims, kl_layout_to_nchw, y.dims);
  y.data = st == KILN_OK ? malloc(bytes ? bytes : 1) : NULL;
  owned[n_owned++] = y.data;
  if (st == KILN_OK && !y.data)
    st = kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a channels-first "
                 "output (%zu bytes)", bytes);
  if (st == KILN_OK) {
    kl_node stand = *c->node;
    kl_op pool = kl_layout_base(stand.op);
    if (pool != KL_OP_COUNT) stand.op = pool;
    kl_tensor *outs[1] = {&y};
    kl_kernel_ctx sub = *c;
    sub.node = &stand;
    sub.in = in;
    sub.n_out = 1;
    sub.out = outs;
    st = (kiln_status)base(&sub);
  }
  if (st == KILN_OK)
    kl_layout_permute_data(y.data, 4, y.dims, kl_layout_to_nhwc, kl_dtype_size(y.dtype),
                           out->data);
  for (int i = 0; i < n_owned; i++) free(owned[i]);
  return st;
}

int kl_ref_nhwc_pool(kl_kernel_ctx *c) {
  kl_op base = kl_layout_base(c->node->op);
  if (base == KL_OP_COUNT)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "op %s is not a channels-last pooling",
                   kl_op_name(c->node->op));
  return kl_layout_ref(c, kl_op_get(base)->ref);
}
