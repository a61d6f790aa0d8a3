/* The channels-last forms (layout.h): which nodes, the permutations, and inference
 * through the base op's own. */
#include "ir/layout.h"
#include "ir/fused.h"
#include "ir/infer_common.h"

#include <string.h>

const int64_t kl_layout_to_nhwc[4] = {0, 2, 3, 1};
const int64_t kl_layout_to_nchw[4] = {0, 3, 1, 2};

static const kl_op nhwc_pairs[][2] = {
    {KL_OP_KilnNhwcMaxPool, KL_OP_MaxPool},
    {KL_OP_KilnNhwcAveragePool, KL_OP_AveragePool},
    {KL_OP_KilnNhwcGlobalAveragePool, KL_OP_GlobalAveragePool},
    {KL_OP_KilnNhwcGlobalMaxPool, KL_OP_GlobalMaxPool},
};
#define N_NHWC ((int)(sizeof nhwc_pairs / sizeof nhwc_pairs[0]))

kl_op kl_layout_base(kl_op op) {
  for (int i = 0; i < N_NHWC; i++)
    if (nhwc_pairs[i][0] == op) return nhwc_pairs[i][1];
  return KL_OP_COUNT;
}

kl_op kl_layout_nhwc_of(kl_op base) {
  for (int i = 0; i < N_NHWC; i++)
    if (nhwc_pairs[i][1] == base) return nhwc_pairs[i][0];
  return KL_OP_COUNT;
}

bool kl_layout_nhwc(const kl_node *n) {
  if (kl_layout_base(n->op) != KL_OP_COUNT) return true;
  return (n->op == KL_OP_KilnFusedConv || n->op == KL_OP_KilnFusedConvTranspose) &&
         kl_attr_int(n, "channels_last", 0) != 0;
}

bool kl_layout_activation_slot(const kl_node *n, int k) {
  if (k == 0) return kl_attr_int(n, "nchw_input", 0) == 0;
  return k == KL_FUSED_SUM && kl_fused_base(n->op) != KL_OP_COUNT;
}

void kl_layout_permute_dims(int rank, const int64_t *dims, const int64_t perm[4],
                            int64_t out[4]) {
  int64_t padded[4] = {1, 1, 1, 1};
  for (int i = 0; i < rank && i < 4; i++) padded[4 - rank + i] = dims[i];
  for (int i = 0; i < 4; i++) out[i] = padded[perm[i]];
}

void kl_layout_permute_type(const kl_type *t, const int64_t perm[4], kl_type *out) {
  *out = *t;
  if (t->rank < 0 || t->rank > 4) return;
  kl_dim padded[4];
  for (int i = 0; i < 4; i++) padded[i] = (kl_dim){.size = 1, .sym = -1};
  for (int i = 0; i < t->rank; i++) padded[4 - t->rank + i] = t->dims[i];
  out->rank = 4;
  for (int i = 0; i < 4; i++) out->dims[i] = padded[perm[i]];
}

void kl_layout_permute_data(const void *src, int rank, const int64_t *sdims,
                            const int64_t perm[4], size_t esize, void *dst) {
  int64_t sd[4] = {1, 1, 1, 1}, stride[4], dd[4];
  for (int i = 0; i < rank && i < 4; i++) sd[4 - rank + i] = sdims[i];
  stride[3] = 1;
  for (int i = 2; i >= 0; i--) stride[i] = stride[i + 1] * sd[i + 1];
  int64_t ds[4]; /* source stride of each destination axis */
  for (int i = 0; i < 4; i++) {
    dd[i] = sd[perm[i]];
    ds[i] = stride[perm[i]];
  }
  const char *s = src;
  char *d = dst;
  for (int64_t a = 0; a < dd[0]; a++)
    for (int64_t b = 0; b < dd[1]; b++)
      for (int64_t c = 0; c < dd[2]; c++) {
        const char *row = s + (size_t)(a * ds[0] + b * ds[1] + c * ds[2]) * esize;
        if (ds[3] == 1) {
          memcpy(d, row, (size_t)dd[3] * esize);
          d += (size_t)dd[3] * esize;
          continue;
        }
        for (int64_t x = 0; x < dd[3]; x++, d += esize)
          memcpy(d, row + (size_t)(x * ds[3]) * esize, esize);
      }
}

#define KL_LAYOUT_MAX_IN 8

int kl_layout_infer(kl_infer_ctx *c, kl_infer_fn base) {
  const kl_type *x = c->in[0];
  if (x && x->rank >= 0 && x->rank != 4)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 (X) of the channels-last %s must be "
                   "[N, H, W, C] (rank 4), found rank %d", kl_op_name(c->node->op), x->rank);
  if (c->n_in > KL_LAYOUT_MAX_IN)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s has %d inputs, at most %d expected",
                   kl_op_name(c->node->op), c->n_in, KL_LAYOUT_MAX_IN);
  kl_type moved[KL_LAYOUT_MAX_IN];
  const kl_type *in[KL_LAYOUT_MAX_IN];
  const void *data[KL_LAYOUT_MAX_IN];
  for (int k = 0; k < c->n_in; k++) {
    in[k] = c->in[k];
    data[k] = c->data ? c->data[k] : NULL;
    if (!in[k] || !kl_layout_activation_slot(c->node, k) || in[k]->rank < 0) continue;
    if (in[k]->rank > 4)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input %d of the channels-last %s has rank %d, "
                     "at most 4 expected", k, kl_op_name(c->node->op), in[k]->rank);
    kl_layout_permute_type(in[k], kl_layout_to_nchw, &moved[k]);
    in[k] = &moved[k];
    data[k] = NULL;
  }
  kl_node stand = *c->node;
  kl_op pool = kl_layout_base(stand.op);
  if (pool != KL_OP_COUNT) stand.op = pool;
  kl_infer_ctx sub = *c;
  sub.node = &stand;
  sub.in = in;
  sub.data = data;
  kiln_status st = (kiln_status)base(&sub);
  if (st != KILN_OK) return st;
  if (c->out[0].rank >= 0 && c->out[0].rank != 4)
    return kl_fail(c->e, KILN_ERR_SHAPE, "the channels-last %s gives rank %d, expected 4",
                   kl_op_name(c->node->op), c->out[0].rank);
  kl_type y = c->out[0];
  kl_layout_permute_type(&y, kl_layout_to_nhwc, &c->out[0]);
  return KILN_OK;
}

/* kiln.Nhwc*Pool: the ONNX pooling op's inference on the permuted input. */
int kl_infer_nhwc_pool(kl_infer_ctx *c) {
  kl_op base = kl_layout_base(c->node->op);
  if (base == KL_OP_COUNT)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "op %s is not a channels-last pooling",
                   kl_op_name(c->node->op));
  return kl_layout_infer(c, kl_op_get(base)->infer);
}
