/* How much work a node is, from its shapes (ir.h, kl_node_work): the bound behind the
 * option max_work (every run of a node, runtime/session.c) and behind constant folding
 * (passes/const_fold.c), so that a file of a few hundred bytes cannot ask for 10^18
 * steps (an Einsum of six letters of 1000 each, a DFT of a prime length in the
 * millions, the square of a generated 12288 x 12288 matrix).
 *
 * Steps are multiply-adds or element visits, counted as the reference kernels do them;
 * the optimized kernels take fewer, never more. Every op costs at least its inputs'
 * and outputs' elements; the ops whose loops multiply dims (or attributes) say how. */
#include "ir/ir.h"
#include "ir/reduce.h"

#include <string.h>

static double numel_of(const kl_tensor *t) {
  if (!t) return 0;
  double n = 1;
  for (int i = 0; i < t->rank; i++) n *= (double)t->dims[i];
  return n;
}

static double dim_of(const kl_tensor *t, int axis) {
  if (!t || t->rank <= 0) return 1;
  if (axis < 0) axis += t->rank;
  return axis >= 0 && axis < t->rank ? (double)t->dims[axis] : 1;
}

static bool op_is(const kl_node *n, const char *name) {
  return strcmp(kl_op_name(n->op), name) == 0;
}

/* The product of every letter's size: the loop nest of an Einsum. */
static double einsum_work(const kl_node *n, int n_in, const kl_tensor *const *in) {
  const char *eq = kl_attr_string(n, "equation", NULL);
  int ranks[KL_EINSUM_MAX_INPUTS];
  if (!eq || n_in > KL_EINSUM_MAX_INPUTS) return 0;
  for (int k = 0; k < n_in; k++) {
    if (!in[k]) return 0;
    ranks[k] = in[k]->rank;
  }
  kl_einsum r;
  kl_err e = {0};
  if (kl_einsum_parse(eq, n_in, ranks, &r, &e) != KILN_OK) return 0;
  double size[KL_EINSUM_LABELS];
  for (int l = 0; l < KL_EINSUM_LABELS; l++) size[l] = 1;
  for (int k = 0; k < n_in; k++)
    for (int d = 0; d < in[k]->rank; d++) {
      int l = r.label[k][d];
      if (l >= 0 && l < KL_EINSUM_LABELS && (double)in[k]->dims[d] > size[l])
        size[l] = (double)in[k]->dims[d];
    }
  double w = 1;
  for (int l = 0; l < KL_EINSUM_LABELS; l++) w *= size[l];
  return w;
}

double kl_node_work(const kl_node *n, int n_in, const kl_tensor *const *in, int n_out,
                    const kl_tensor *const *out) {
  double io = 0, y = n_out > 0 ? numel_of(out[0]) : 0;
  for (int k = 0; k < n_in; k++) io += numel_of(in[k]);
  for (int k = 0; k < n_out; k++) io += numel_of(out[k]);
  const kl_tensor *a = n_in > 0 ? in[0] : NULL, *b = n_in > 1 ? in[1] : NULL;
  double w = 0;
  if (op_is(n, "MatMul") || op_is(n, "MatMulInteger") || op_is(n, "FusedMatMul") ||
      op_is(n, "QLinearMatMul") || op_is(n, "MatMulNBits"))
    w = y * dim_of(a, -1);
  else if (op_is(n, "Gemm"))
    w = y * dim_of(a, kl_attr_int(n, "transA", 0) ? 0 : 1);
  else if (op_is(n, "Conv") || op_is(n, "ConvInteger") || op_is(n, "FusedConv") ||
           op_is(n, "NhwcConv") || op_is(n, "DeformConv"))
    w = y * (b && b->rank > 0 && b->dims[0] > 0 ? numel_of(b) / (double)b->dims[0] : 1);
  else if (op_is(n, "QLinearConv")) /* W is input 3 */
    w = y * (n_in > 3 && in[3] && in[3]->rank > 0 && in[3]->dims[0] > 0
                 ? numel_of(in[3]) / (double)in[3]->dims[0] : 1);
  else if (op_is(n, "ConvTranspose") || op_is(n, "FusedConvTranspose"))
    w = numel_of(a) * (b && b->rank > 0 && b->dims[0] > 0 ? numel_of(b) / (double)b->dims[0] : 1);
  else if (op_is(n, "Einsum"))
    w = einsum_work(n, n_in, in);
  else if (op_is(n, "DFT")) /* a direct sum: each output a sum over the length */
    w = y * (n_out > 0 && out[0] && out[0]->rank >= 2
                 ? dim_of(out[0], (int)kl_attr_int(n, "axis", 1)) : 1);
  else if (op_is(n, "STFT")) /* each bin a sum over the frame ([B, frames, bins, 2]) */
    w = y * 2 * dim_of(out[0], 2);
  else if (op_is(n, "RoiAlign")) { /* each output the mean of its samples */
    int64_t ratio = kl_attr_int(n, "sampling_ratio", 0);
    double sh = (double)ratio, sw = (double)ratio;
    if (ratio <= 0) { /* adaptive: at most the image over the output, rounded up */
      sh = dim_of(a, 2) / dim_of(out[0], 2) + 1;
      sw = dim_of(a, 3) / dim_of(out[0], 3) + 1;
    }
    w = y * sh * sw * 4;
  } else if (op_is(n, "Attention") || op_is(n, "MultiHeadAttention")) {
    /* every query against every key (and past key), scores and values */
    double keys = b ? (b->rank == 4 ? dim_of(b, 2) : dim_of(b, 1)) : 1;
    if (n_in > 4 && in[4]) keys += in[4]->rank == 4 ? dim_of(in[4], 2) : dim_of(in[4], 1);
    w = 2 * numel_of(a) * keys + 2 * y * keys;
  } else if (op_is(n, "NonMaxSuppression")) /* every box against every other, per class */
    w = numel_of(a) * (b ? numel_of(b) : 1);
  else if (op_is(n, "LRN"))
    w = y * (double)kl_attr_int(n, "size", 1);
  return w > io ? w : io;
}
