/* How much work a node is, from its shapes (ir.h, kl_node_work): the bound behind the
 * option max_work (every run of a node, runtime/session.c) and behind constant folding
 * (passes/const_fold.c), so that a file of a few hundred bytes cannot ask for 10^18
 * steps (an Einsum of six letters of 1000 each, a DFT of a prime length in the
 * millions, the square of a generated 12288 x 12288 matrix).
 *
 * Steps are multiply-adds or element visits, counted as the reference kernels do them;
 * the optimized kernels take fewer, never more. Every op costs at least its inputs'
 * and outputs' elements; the ops whose loops multiply dims (or attributes) say how. */
#include "ir/data_plan.h"
#include "ir/ir.h"
#include "ir/reduce.h"
#include "base/fft.h"

#include <math.h>


static double numel_of(const kl_tensor *t) {
  if (!t) return 0;
  double n = 1;
  for (int i = 0; i < t->rank; i++) n *= (double)t->dims[i];
  return n;
}

/* The product of every dim but the last: a tensor's rows, counted when the last dim is
 * 0 too. */
static double rows_of(const kl_tensor *t) {
  double n = 1;
  for (int i = 0; t && i + 1 < t->rank; i++) n *= (double)t->dims[i];
  return n;
}

static double dim_of(const kl_tensor *t, int axis) {
  if (!t || t->rank <= 0) return 1;
  if (axis < 0) axis += t->rank;
  return axis >= 0 && axis < t->rank ? (double)t->dims[axis] : 1;
}

/* What one step of one direction of a recurrence costs besides its products, in
 * multiply-adds: the gates' activations and the loop around them, 60 to 170 ns a step
 * on kiln's kernel at hidden size 1 (an LSTM's step there is 8 multiply-adds: counted
 * so, a sequence of 10^8 steps from a 400 MB input would have been about 17 s of 8e8
 * steps). */
#define RNN_STEP_COST 8192.0

/* Steps per output of a filter W [out channels, ...]: its elements per output channel. */
static double per_filter(const kl_tensor *w) {
  return w && w->rank > 0 && w->dims[0] > 0 ? numel_of(w) / (double)w->dims[0] : 1;
}

/* The taps of a pooling window over X that can land inside X, its spatial dims from
 * axis `first` on (2 for N, C, spatial...; 1 for kiln's NHWC). */
static double pool_taps(const kl_node *n, const kl_tensor *x, int first) {
  const int64_t *k;
  int count = kl_attr_ints(n, "kernel_shape", &k);
  double taps = 1;
  for (int i = 0; i < count; i++) {
    double size = dim_of(x, first + i);
    taps *= (double)k[i] < size ? (double)k[i] : size;
  }
  return taps;
}

/* The product of a 1-D int64 tensor's values (Col2Im's block_shape), each at least 1. */
static double block_size(const kl_tensor *t) {
  double p = 1;
  if (t->dtype != KL_I64 || t->rank != 1) return 1;
  for (int64_t i = 0; i < t->dims[0]; i++) {
    int64_t v = ((const int64_t *)t->data)[i];
    p *= v > 1 ? (double)v : 1;
  }
  return p;
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

/* An integer scalar's value when the tensor holds data, else -1. */
static int64_t scalar_of(const kl_tensor *t) {
  if (!t || !t->data || numel_of(t) != 1) return -1;
  if (t->dtype == KL_I64) return *(const int64_t *)t->data;
  if (t->dtype == KL_I32) return *(const int32_t *)t->data;
  return -1;
}

/* NonMaxSuppression: for each batch and class, the boxes read, sorted by score and each
 * compared with at most min(boxes, max_output_boxes_per_class) kept ones (infer_more.c);
 * twice, as shape inference makes the selection for the output's length and the kernel
 * again to fill it. Input 2 absent or at most 0: nothing is selected. */
static double nms_work(int n_in, const kl_tensor *const *in) {
  const kl_tensor *boxes = in[0], *scores = n_in > 1 ? in[1] : NULL;
  const kl_tensor *max_out = n_in > 2 ? in[2] : NULL;
  if (!boxes || !scores || !max_out) return 0;
  double count = dim_of(boxes, 1), most = count;
  if (max_out->data) {
    int64_t v = scalar_of(max_out);
    most = v < 1 ? 0 : (double)v < count ? (double)v : count;
  }
  if (most == 0) return 0;
  double sort = count < 2 ? count : count * ceil(log2(count));
  return 2 * dim_of(boxes, 0) * dim_of(scores, 1) * (count + sort + count * most);
}

/* The steps of transforms of length `len`, or, when it is not known, of the longest
 * transform a line of `bins` outputs (one-sided: L / 2 + 1 of them) can come from. */
static double fft_work(int64_t len, double bins) {
  if (len > 0) return kl_fft_steps(len);
  if (bins > (double)KL_FFT_MAX_LEN) return bins * bins;
  int64_t b = (int64_t)bins;
  double s = kl_fft_steps(b);
  for (int64_t l = 2 * (b - 1); l <= 2 * b - 1; l++)
    if (l > 0) {
      double t = kl_fft_steps(l);
      if (t > s) s = t;
    }
  return s;
}

static double dft_work(int n_in, const kl_tensor *const *in, const kl_tensor *y) {
  if (!y || y->rank < 2 || n_in < 1 || !in[0]) return 0;
  /* the axis is input 2 (default -2; importing opset 17 moves its attribute there) */
  int64_t axis = n_in > 2 && in[2] && in[2]->data ? scalar_of(in[2]) : -2;
  double along = dim_of(y, (int)axis), lines = numel_of(y) / (along * dim_of(y, -1));
  int64_t len = n_in > 1 ? scalar_of(in[1]) : -1;
  double in_len = dim_of(in[0], (int)axis);
  return lines * fft_work(len, along > in_len ? along : in_len);
}

static double stft_work(int n_in, const kl_tensor *const *in, const kl_tensor *y) {
  if (!y || y->rank != 4) return 0;
  int64_t frame = n_in > 2 && in[2] && in[2]->rank == 1 ? in[2]->dims[0]
                  : n_in > 3 ? scalar_of(in[3]) : -1;
  return dim_of(y, 0) * dim_of(y, 1) * fft_work(frame, dim_of(y, 2));
}

double kl_node_work(const kl_node *n, int n_in, const kl_tensor *const *in, int n_out,
                    const kl_tensor *const *out) {
  double io = 0, y = n_out > 0 ? numel_of(out[0]) : 0;
  for (int k = 0; k < n_in; k++) io += numel_of(in[k]);
  for (int k = 0; k < n_out; k++) io += numel_of(out[k]);
  const kl_tensor *a = n_in > 0 ? in[0] : NULL, *b = n_in > 1 ? in[1] : NULL;
  double w = 0;
  switch (n->op) { /* (kl_run's path: op ids, no name compared) */
  case KL_OP_MatMul:
  case KL_OP_MatMulInteger:
  case KL_OP_KilnMatMulIntegerToFloat:
  case KL_OP_KilnFusedMatMul:
  case KL_OP_QLinearMatMul:
  case KL_OP_KilnQLinearGemm:
    w = y * dim_of(a, -1);
    break;
  case KL_OP_Gemm:
    w = y * dim_of(a, kl_attr_int(n, "transA", 0) ? 0 : 1);
    break;
  case KL_OP_Conv:
  case KL_OP_ConvInteger:
  case KL_OP_KilnFusedConv:
  case KL_OP_DeformConv:
    w = y * per_filter(b);
    break;
  case KL_OP_QLinearConv: /* W is input 3 */
    w = y * per_filter(n_in > 3 ? in[3] : NULL);
    break;
  case KL_OP_KilnConvGradX: /* every (dY element, filter tap) pair, as Conv */
    w = numel_of(a) * per_filter(b);
    break;
  case KL_OP_KilnConvGradW: /* dY is input 1, W's shape input 2 */
    w = numel_of(b) * per_filter(n_in > 2 ? in[2] : NULL);
    break;
  case KL_OP_KilnMaxPoolGrad:
  case KL_OP_KilnAveragePoolGrad:
    w = numel_of(a) * pool_taps(n, b, 2);
    break;
  case KL_OP_MaxPool: /* each output visits its window's taps */
  case KL_OP_AveragePool:
  case KL_OP_LpPool:
  case KL_OP_KilnQLinearAveragePool:
    w = y * pool_taps(n, a, 2);
    break;
  case KL_OP_KilnNhwcMaxPool:
  case KL_OP_KilnNhwcAveragePool:
    w = y * pool_taps(n, a, 1);
    break;
  case KL_OP_ConvTranspose: /* the reference kernel gathers: each output visits every */
  case KL_OP_KilnFusedConvTranspose: /* tap of its group's input channels */
    w = numel_of(a) * per_filter(b);
    if (b && b->rank > 1 && b->dims[1] > 0) {
      double group = (double)kl_attr_int(n, "group", 1);
      double gather = y * numel_of(b) / ((double)b->dims[1] * (group > 0 ? group : 1));
      if (gather > w) w = gather;
    }
    break;
  case KL_OP_Col2Im: /* each pixel visits every position of the block (input 2) */
    w = y * (n_in > 2 && in[2] && in[2]->data ? block_size(in[2]) : 1);
    break;
  case KL_OP_RNN: /* each step of each sequence: X's row through W, the state through R, */
  case KL_OP_GRU:  /* and the gates' activations, counted per step and direction */
  case KL_OP_LSTM:
  case KL_OP_KilnLSTMGrad: /* the same inputs; backpropagation through time is three */
  case KL_OP_KilnGRUGrad:  /* such passes (the forward again, dX and the state, dW and dR) */
    /* the steps are X's rows (sequence x batch), counted without its input size: X of
     * input size 0 ([2^27, 1, 0]) has no elements but still 2^27 steps of the state */
    if (a && a->rank > 0)
      w = rows_of(a) *
          (numel_of(b) + (n_in > 2 ? numel_of(in[2]) : 0) + RNN_STEP_COST * dim_of(b, 0)) *
          (n->op == KL_OP_KilnLSTMGrad || n->op == KL_OP_KilnGRUGrad ? 3 : 1);
    break;
  case KL_OP_Det: /* an elimination of each [n, n] matrix */
    w = numel_of(a) * dim_of(a, -1);
    break;
  case KL_OP_TopK: /* the kept list, k long, is shifted for each element of the row */
    if (n_out > 0 && out[0] && out[0]->rank > 0)
      w = numel_of(a) * dim_of(out[0], (int)kl_attr_int(n, "axis", -1));
    break;
  case KL_OP_Einsum:
    w = einsum_work(n, n_in, in);
    break;
  case KL_OP_DFT: /* a transform of each line (base/fft.h) */
    w = dft_work(n_in, in, n_out > 0 ? out[0] : NULL);
    break;
  case KL_OP_STFT: /* a transform of each frame ([B, frames, bins, 2]) */
    w = stft_work(n_in, in, n_out > 0 ? out[0] : NULL);
    break;
  case KL_OP_RoiAlign: { /* each output the mean of its samples */
    int64_t ratio = kl_attr_int(n, "sampling_ratio", 0);
    double sh = (double)ratio, sw = (double)ratio;
    if (ratio <= 0) { /* adaptive: at most the image over the output, rounded up */
      const kl_tensor *o = n_out > 0 ? out[0] : NULL;
      sh = dim_of(a, 2) / dim_of(o, 2) + 1;
      sw = dim_of(a, 3) / dim_of(o, 3) + 1;
    }
    w = y * sh * sw * 4;
    break;
  }
  case KL_OP_Attention:
  case KL_OP_KilnAttention:
  case KL_OP_KilnMultiHeadAttention: {
    /* every query against every key (and past key), scores and values; kiln.Attention
     * takes K transposed ([..., D, keys]), kiln.MultiHeadAttention without K a packed
     * QKV ([B, S, 3 * H * D]: as many keys as queries) */
    double keys = !b                             ? dim_of(a, 1)
                  : n->op == KL_OP_KilnAttention ? dim_of(b, -1)
                  : b->rank == 4                 ? dim_of(b, 2)
                                                 : dim_of(b, 1);
    if (n_in > 4 && in[4]) keys += in[4]->rank == 4 ? dim_of(in[4], 2) : dim_of(in[4], 1);
    w = 2 * numel_of(a) * keys + 2 * y * keys;
    break;
  }
  case KL_OP_NonMaxSuppression:
    w = nms_work(n_in, in);
    break;
  case KL_OP_Unique: /* a merge sort of the slices along the axis, empty ones too */
    if (a && kl_node_attr(n, "axis")) {
      double len = dim_of(a, (int)kl_attr_int(n, "axis", 0));
      w = kl_unique_steps(len, len > 0 ? numel_of(a) / len : 0);
    } else if (a) {
      w = kl_unique_steps(numel_of(a), 1);
    }
    break;
  case KL_OP_LRN:
    w = y * (double)kl_attr_int(n, "size", 1);
    break;
  default:
    break;
  }
  return w > io ? w : io;
}
