/* What one step of a node costs on each class of kernel (ir.h, kl_work_weight): what
 * the session counts against max_work (runtime/session.c), and what bounds constant
 * folding (fold.c).
 *
 * kl_node_work (src/ir/work.c) counts a node's steps from its shapes: multiply-adds,
 * window taps, element visits. Kernels take very different times a step, so the
 * session weighs each step by what it costs on the kernel that takes it, in units of
 * the cheapest step there is: a multiply-add of a large float32 product on oneDNN, on
 * one thread of an AVX-512 core, about KL_WORK_UNIT_NS (0.0098 to 0.0140 ns measured
 * on the 2-core Xeon these were tuned on). Weighed steps times KL_WORK_UNIT_NS is then
 * about a node's time on one core, and max_work a bound on that time: the default,
 * 2^39, about 7 s on that Xeon (docs/fuzzing.md, "The default compute bound").
 *
 * Each weight is the slowest step measured for its class (tools/measure_work.py and
 * tools/work_cost.c: single-op models at 1 thread, release build) over the unit,
 * rounded up to the ladder 1, 1.5, 2, 3, 4, 6, 8, 12, 16, ... (a margin of up to 50%),
 * at the two x86 levels kiln has (the AVX-512 levels share a column; avx2 is
 * KILN_ISA=avx2 on the same Xeon) and for kiln's portable reference kernels. The
 * comments give the measured ns a step: avx512 / avx2 / reference. Shapes that are
 * mostly memory traffic (a matrix-vector product, a 3x3 depthwise convolution, a
 * product with K = 1) cost up to about 1 ns an element read or written whatever the
 * op: those are bounded by the tensors' sizes (max_tensor_bytes, the memory limit)
 * rather than by these weights, which price the work that reuses data.
 *
 * Not measured: the generic level (weighed as avx2 times GENERIC_SLOWER) and devices'
 * kernels (each step counts 1). This file knows classes of kernels, not kernels: the
 * session says which class runs a node (and a kernel that hands some shapes to the
 * reference checks that weight then: kl_isa_ref_allowed).
 */
#include "ir/ir.h"

#include <math.h>
#include <string.h>

/* What a step of one class costs: kiln's default kernel at the AVX-512 levels and at
 * avx2, and the portable reference kernel. */
typedef struct step_cost {
  float avx512, avx2, ref;
} step_cost;

#define GENERIC_SLOWER 4 /* the generic level's kernels against avx2's (not measured) */

/* Steps that are element visits: the ops kl_node_work counts by their inputs' and
 * outputs' elements and this table does not list. Add, Erf, Softmax,
 * LayerNormalization, InstanceNormalization, ReduceSum 0.13-0.44 / 0.14-0.65 / 0.8-6.9
 * (Pow 6.9, Pad reflect 5.5, Softmax 5.4, ReduceMax 4.7 the slowest). */
static const step_cost element_cost = {48, 64, 768};

/* The ops whose steps cost otherwise; a zero entry takes element_cost. Where an op
 * has no optimized kernel the session weighs it by the ref column whatever the level
 * (its fast columns repeat it). */
static const step_cost op_costs[KL_OP_COUNT] = {
    /* products (oneDNN, kiln's gemm and gemv): 2048^3 0.0098-0.0140 / 0.0175-0.0177 /
     * 4.9-7.7 (Gemm with B transposed 2.0-5.3); int8 0.0012 / 0.059-0.070 / 6.4-7.4 */
    [KL_OP_MatMul] = {1, 2, 768},
    [KL_OP_Gemm] = {1, 2, 768},
    [KL_OP_KilnFusedMatMul] = {1, 2, 768},
    [KL_OP_KilnFusedGemm] = {1, 2, 768},
    [KL_OP_MatMulInteger] = {1, 6, 768},
    [KL_OP_KilnMatMulIntegerToFloat] = {1, 6, 768},
    [KL_OP_KilnQLinearGemm] = {1, 6, 768},
    /* QLinearMatMul of a constant int8 B runs oneDNN's int8 matmul as QLinearGemm; other
     * forms hand their shapes to the reference (6.4-8.2), which checks its own weight
     * (kl_isa_ref_allowed): a statically quantized transformer's products, 2.8e9 steps
     * at all-MiniLM-L6-v2's 300 x 64 tokens, were refused when this was 768 */
    [KL_OP_QLinearMatMul] = {1, 6, 768},
    /* convolutions: the optimized kernels by channel pairs (conv_weight); the reference
     * 1.8-3.9, a 1x1 one 6.8, transposed 2.3-2.6, ConvInteger (the reference only)
     * 2.7-2.9, QLinearConv 2.7-4.2, DeformConv 32-33 */
    [KL_OP_Conv] = {0, 0, 768},
    [KL_OP_KilnFusedConv] = {0, 0, 768},
    [KL_OP_ConvTranspose] = {0, 0, 256},
    [KL_OP_KilnFusedConvTranspose] = {0, 0, 256},
    [KL_OP_ConvInteger] = {256, 256, 256},
    [KL_OP_QLinearConv] = {0, 0, 384},
    [KL_OP_DeformConv] = {3072, 3072, 3072},
    /* pooling (and by its channels, pool_weight): kiln's 2-D kernels 0.003-0.12 /
     * 0.0036-0.16 (3x3 windows: memory), oneDNN's 3-D 0.063-0.078 / 0.090, 8-bit
     * 0.0087-0.0089; a window wider than kiln's buffers goes to the reference
     * (kl_isa_ref_allowed); the reference 2.2-6.0, LpPool (the reference only)
     * 13.5-13.9 */
    [KL_OP_MaxPool] = {12, 24, 768},
    [KL_OP_AveragePool] = {12, 24, 768},
    [KL_OP_KilnNhwcMaxPool] = {12, 24, 768},
    [KL_OP_KilnNhwcAveragePool] = {12, 24, 768},
    [KL_OP_KilnQLinearAveragePool] = {3, 3, 384}, /* 0.026 / 0.027 / 3.0-4.7 */
    [KL_OP_LpPool] = {1536, 1536, 1536},
    [KL_OP_Col2Im] = {384, 384, 384}, /* the reference only: 4.6-4.7 */
    /* recurrences, each step's gates and loop counted too (work.c): hidden 256
     * 0.015-0.029 / 0.021-0.035, hidden 1 to 8 0.0078-0.024 / ... / 0.003-1.8 */
    [KL_OP_LSTM] = {3, 4, 192},
    [KL_OP_GRU] = {3, 4, 192},
    [KL_OP_RNN] = {3, 4, 192},
    [KL_OP_KilnLSTMGrad] = {256, 256, 256},
    [KL_OP_KilnGRUGrad] = {256, 256, 256},
    [KL_OP_Det] = {12, 12, 12}, /* the reference only: 0.088-0.091, 1024 x 1024 0.106 */
    /* TopK: a heap of k, 0.024-2.6 (k = 1 over random rows: 2.6 a step, the count
     * being elements x k); the reference's sorted list 3.2-4.0 */
    [KL_OP_TopK] = {256, 256, 384},
    [KL_OP_Einsum] = {8192, 8192, 8192}, /* the reference only: 12-72, by the pattern */
    [KL_OP_DFT] = {48, 48, 48},          /* FFTs: 0.033-0.49 (Bluestein) */
    [KL_OP_STFT] = {48, 48, 48},         /* 0.36-0.38 */
    [KL_OP_RoiAlign] = {96, 96, 512},    /* 0.073-0.78 / 0.080-0.80 (mode max) / 0.62-4.9 */
    /* attention: oneDNN's products 0.011-0.012 / 0.015; ONNX Attention (the reference
     * only) 0.73-2.5 (a head width of 1), kiln's on the reference 0.68-1.04 */
    [KL_OP_Attention] = {256, 256, 256},
    [KL_OP_KilnAttention] = {1, 2, 256},
    [KL_OP_KilnMultiHeadAttention] = {1, 2, 256},
    /* NonMaxSuppression (the reference only): 0.13-0.59 for 30,000 boxes, 0.70 for
     * 60,000 that all overlap (each compared with every kept one) */
    [KL_OP_NonMaxSuppression] = {96, 96, 96},
    [KL_OP_Unique] = {3072, 3072, 3072},      /* the reference only: 1.5-25.5 */
    [KL_OP_LRN] = {384, 384, 384},            /* the reference only: 1.1-3.5 */
    /* element visits that cost more than most: a transpose's scattered writes 1.6-1.9,
     * gathers 0.46-0.73, NonZero 0.88-0.89 */
    [KL_OP_Transpose] = {192, 192, 768},
    [KL_OP_Gather] = {64, 64, 768},
    [KL_OP_GatherElements] = {48, 48, 768},
    [KL_OP_NonZero] = {96, 96, 768},
};

/* Resize and GridSample by their interpolation, an element read or written: cubic
 * Resize 58-63 on either kernel (16 taps an output, their coefficients worked out for
 * each), linear 0.96-0.99 / 19.6-20.2, nearest 0.52-0.53 / 5.0-5.5; GridSample (the
 * reference only) cubic 20-21, linear 6.0. */
static step_cost interpolation_cost(const kl_node *n) {
  const char *mode = kl_attr_string(n, "mode", n->op == KL_OP_GridSample ? "linear" : "nearest");
  bool cubic = strcmp(mode, "cubic") == 0 || strcmp(mode, "bicubic") == 0;
  bool linear = strstr(mode, "linear") != NULL;
  if (n->op == KL_OP_GridSample)
    return cubic ? (step_cost){2048, 2048, 2048} : (step_cost){768, 768, 768};
  if (cubic) return (step_cost){6144, 6144, 6144};
  return linear ? (step_cost){96, 96, 2048} : (step_cost){48, 48, 512};
}

/* An optimized convolution (oneDNN's, kiln's Winograd or im2col) by its channel pairs
 * per group (C / group input channels times M / group output ones), which its kernels
 * vectorize over, at avx512 / avx2: many pairs 0.0046-0.0143 / 0.010-0.026 (1-D 32 x 32
 * 0.019 / 0.025), 64 pairs 0.034-0.046 / 0.052, 16 pairs 0.059-0.088 / 0.083-0.25 (1-D
 * filters of 3000 taps the slowest), 4 pairs 0.13-0.26 / 0.15-0.43, 2 pairs 0.49 /
 * 0.33, one pair (depthwise, or a single channel) 0.19-1.07 / 0.45-0.88 (a 1-D filter
 * of 3000 taps; oneDNN's gemm for a 3-D depthwise 0.74 / 0.70); a 1x1 one of 64 x 64
 * on its own 0.044-0.051 (the reorders around it: memory). Transposed: one pair
 * 1.9-2.0 / 0.93, 4 pairs 0.49 / 0.25, 16 pairs 0.11 / 0.039. The avx2 column is twice
 * the formula. */
static double conv_weight(bool transposed, double pairs) {
  double one_pair = transposed ? 192 : 96;
  return fmax(fmax(one_pair / pairs, 48 / sqrt(pairs)), 1);
}

/* The channel pairs per group of a convolution of weights W ([M, C / group, k...], a
 * transposed one's [C, M / group, k...]), or 0 when the node is not one. */
static double conv_pairs(const kl_node *n, int n_in, const kl_tensor *const *in) {
  int at = n->op == KL_OP_QLinearConv ? 3 : 1;
  switch (n->op) {
  case KL_OP_Conv: case KL_OP_KilnFusedConv: case KL_OP_ConvTranspose:
  case KL_OP_KilnFusedConvTranspose: case KL_OP_QLinearConv:
    break;
  default: return 0;
  }
  const kl_tensor *w = at < n_in ? in[at] : NULL;
  int64_t group = kl_attr_int(n, "group", 1);
  if (!w || w->rank < 2 || w->dims[0] < 1 || w->dims[1] < 1 || group < 1) return 1;
  double pairs = (double)w->dims[0] / (double)group * (double)w->dims[1];
  return pairs < 1 ? 1 : pairs;
}

/* An optimized pooling kernel by its channels: one that holds the image channels-last
 * combines each tap's row of C channels at once, about 2.2 ns a tap for up to 16 (C = 1:
 * 2.2 a step at avx2, C = 16 0.13); the plain layout's is fast at any C. The session
 * may hold a MaxPool or AveragePool between convolutions channels-last, so every
 * pooling is weighed so. */
static double pool_weight(const kl_node *n, int n_in, const kl_tensor *const *in,
                          double base) {
  const kl_tensor *x = n_in > 0 ? in[0] : NULL;
  if (!x || x->rank < 3) return base;
  bool nhwc = n->op == KL_OP_KilnNhwcMaxPool || n->op == KL_OP_KilnNhwcAveragePool;
  double c = (double)x->dims[nhwc ? x->rank - 1 : 1];
  return c < 1 ? base : fmax(base, 16 * base / c);
}

static bool is_pool(kl_op op) {
  return op == KL_OP_MaxPool || op == KL_OP_AveragePool || op == KL_OP_KilnNhwcMaxPool ||
         op == KL_OP_KilnNhwcAveragePool;
}

double kl_work_weight(const kl_node *n, int n_in, const kl_tensor *const *in,
                      kl_work_kernel kernel) {
  if (kernel == KL_WORK_UNIT) return 1;
  step_cost c = op_costs[n->op];
  if (n->op == KL_OP_Resize || n->op == KL_OP_GridSample) c = interpolation_cost(n);
  if (c.ref == 0) c = element_cost;
  if (kernel == KL_WORK_REF) return c.ref;
  double pairs = conv_pairs(n, n_in, in);
  if (pairs > 0) {
    c.avx512 = (float)conv_weight(n->op == KL_OP_ConvTranspose ||
                                  n->op == KL_OP_KilnFusedConvTranspose, pairs);
    c.avx2 = 2 * c.avx512;
  }
  if (is_pool(n->op)) {
    c.avx512 = (float)pool_weight(n, n_in, in, c.avx512);
    c.avx2 = (float)pool_weight(n, n_in, in, c.avx2);
  }
  return kernel == KL_WORK_AVX512 ? c.avx512
         : kernel == KL_WORK_AVX2 ? c.avx2
                                  : GENERIC_SLOWER * c.avx2;
}
