/* Post-training quantization (`kiln quantize`): a float32 graph into the QDQ form that
 * kiln's fold_qdq pass and onnxruntime both run in int8.
 *
 * Static (calibrated): the float graph runs on calibration batches while the values
 * that will be quantized are observed (min, max and a histogram each); their ranges
 * (minmax, percentile or entropy) give scales and zero points; then
 *
 *   x -> Q -> DQ -> Conv/MatMul/Gemm(., DQ(Wq int8), DQ(Bq int32)) -> Q -> DQ -> ...
 *
 * is written around every quantized node (weights per tensor or per output channel,
 * symmetric int8; activations uint8 asymmetric, or int8 symmetric). A Relu (or a Clip
 * from 0, ReLU6) that alone reads a quantized node's output is removed where
 * activations are uint8: its output range starts at 0, so zero point 0 and
 * QuantizeLinear's saturation do what it did. Model outputs stay float32.
 * Dynamic: MatMul/Gemm of constant weights become DynamicQuantizeLinear, MatMulInteger,
 * Cast and a scale multiply (onnxruntime's quantize_dynamic form); nothing observed.
 *
 * Nothing here prints; every failure is a status with a message in the kl_err. */
#ifndef KL_QUANTIZE_H
#define KL_QUANTIZE_H

#include "ir/ir.h"

typedef enum kl_calib_method {
  KL_CALIB_MINMAX,     /* the observed min and max */
  KL_CALIB_PERCENTILE, /* |x| clipped at a percentile of its histogram */
  KL_CALIB_ENTROPY,    /* |x| clipped where the KL divergence of the quantized
                          histogram from the observed one is least (TensorRT's method) */
} kl_calib_method;

/* ---- statistics of one value ---- */
#define KL_HIST_HALF 1024 /* bins on each side of 0 */

typedef struct kl_value_stats {
  double min, max;
  int64_t count;
  double half_range; /* the histogram covers [-half_range, half_range); 0: not yet */
  int64_t zeros;     /* values seen while half_range was 0 (all zeros so far) */
  int64_t hist[2 * KL_HIST_HALF];
  /* the error pass (kl_quantizer_run after kl_quantizer_compute) */
  double sum_sq, err_sq;
} kl_value_stats;

void kl_stats_init(kl_value_stats *s);
/* Adds n finite values (the caller has refused NaN and infinities). */
void kl_stats_add(kl_value_stats *s, const float *x, int64_t n);
/* The clipping threshold of |x| the method gives (for minmax, the largest |x|);
 * percentile in (0, 100], used by KL_CALIB_PERCENTILE. */
double kl_stats_threshold(const kl_value_stats *s, kl_calib_method m, double percentile);
/* The range [*lo, *hi] the method gives: the observed one clipped at the threshold. */
void kl_stats_range(const kl_value_stats *s, kl_calib_method m, double percentile, double *lo,
                    double *hi);

/* ---- scales and zero points ---- */
typedef struct kl_qparam {
  float scale;
  int32_t zero_point;
} kl_qparam;

/* An activation's: uint8 over [min(lo, 0), max(hi, 0)] (zero exact), or int8
 * symmetric over [-max|.|, max|.|] with zero point 0; an empty range, or one too narrow
 * for a normal float32 scale, gives scale 1 (onnxruntime's quantizer does the same). */
kl_qparam kl_qparam_activation(double lo, double hi, bool symmetric);
/* Symmetric int8 weights: scale max|w| / qmax (qmax 64 with reduce_range, 7-bit weights
 * that AVX2 multiplies exactly, else 127); one scale per index of axis when per_channel
 * (scales: dims[axis] entries), else one. q (numel entries) gets the rounded values. */
/* GPTQ rounding (gptq.c): rows x cols weights w (row-major, row r's scale
 * scales[r * scale_step]) to codes q in [-qmax, qmax], column by column, each column's
 * rounding error moved onto the later columns so as to cancel it best for inputs of
 * second moments h (cols x cols; its upper triangle and diagonal are read). False, q
 * left as it was, when h is not positive definite (after damping) or memory ran out. */
bool kl_gptq_round(const float *w, int64_t rows, int64_t cols, const float *scales,
                   int64_t scale_step, float qmax, const double *h, int8_t *q);
void kl_quantize_weights(const float *w, int rank, const int64_t *dims, int axis,
                         bool per_channel, bool reduce_range, float *scales, int8_t *q);

/* ---- the quantizer ---- */
typedef struct kl_quant_options {
  kl_calib_method method;
  double percentile;  /* 0: 99.999 */
  bool per_channel;   /* weights per output channel */
  /* ... and, when per_channel is not set, a depthwise convolution's (one input channel
   * per group) still per output channel: one scale for all its filters, each of a few
   * taps of one channel, leaves most of them a few codes (the static default) */
  bool depthwise_per_channel;
  bool symmetric;     /* int8 symmetric activations (else uint8 asymmetric) */
  bool reduce_range;  /* 7-bit weights ([-64, 64]) */
  bool dynamic;       /* dynamic quantization of MatMul/Gemm: no calibration */
  /* static: no bias correction. By default each quantized Conv's and Gemm's bias is
   * corrected by the mean shift its quantized weights add on the calibration data,
   * (W - dq(Wq)) . E[x under each weight] per output channel, a bias added where it had
   * none (quantize.c, "bias correction") */
  bool no_bias_correction;
  /* static: weights rounded by GPTQ (kl_gptq_round) against the second moments of each
   * Conv's and Gemm's inputs on the calibration data, where those fit (quantize.c,
   * "GPTQ"), instead of each to its nearest code */
  bool gptq;
  const char *exclude; /* comma-separated fnmatch patterns of node names, or NULL */
} kl_quant_options;

/* What happened to one node. */
typedef struct kl_quant_node {
  const char *name, *op; /* the graph's, valid while the quantizer lives */
  bool quantized;
  const char *why; /* when not: a static string */
} kl_quant_node;

/* One quantized value (static: activations, weights; dynamic: weights). */
typedef struct kl_quant_value {
  const char *name;
  bool weight;
  float scale, scale_max; /* per channel: the smallest and largest scale */
  int32_t zero_point;
  double lo, hi;   /* the range quantized (clipped by the method) */
  double min, max; /* the range observed */
  double sqnr_db;  /* 10 log10(sum x^2 / sum (x - dq(q(x)))^2); INFINITY when exact,
                      NAN when not measured (activations before the error pass) */
  double rel_l2;   /* sqrt(sum (x - dq(q(x)))^2 / sum x^2) */
  /* a weight's rounding: "gptq" or "nearest" (NULL for activations); rounding_why, when
   * GPTQ was asked for and did not round it (or not every group), says why */
  const char *rounding;
  char rounding_why[128];
} kl_quant_value;

typedef struct kl_quantizer kl_quantizer;

/* A quantizer of g (a float32 graph, inferred; not changed, and it must outlive the
 * quantizer). Chooses the nodes to quantize; KILN_ERR_INVALID_ARGUMENT when there are
 * none (the message says why of each candidate) or an option is out of range. */
kiln_status kl_quantizer_create(const kl_graph *g, const kl_quant_options *o,
                                kl_quantizer **out, kl_err *e);
void kl_quantizer_free(kl_quantizer *q);
/* Static quantization: runs the float graph on one batch (n tensors named by names,
 * each a model input, every input given once) and observes the values to quantize.
 * Before kl_quantizer_compute it collects statistics; after, it measures the error
 * that each activation's quantization adds (the report's sqnr_db). NaN or an infinity
 * in an input or an observed value is an error naming it. */
kiln_status kl_quantizer_run(kl_quantizer *q, int n, const char *const *names,
                             const kl_tensor *inputs, kl_err *e);
/* The scales and zero points from the statistics (static: after at least one batch). */
kiln_status kl_quantizer_compute(kl_quantizer *q, kl_err *e);
/* The quantized graph (a new graph the caller frees), after kl_quantizer_compute for a
 * static quantizer; inferred and verified. */
kiln_status kl_quantizer_graph(kl_quantizer *q, kl_graph **out, kl_err *e);
/* The batches run so far (the statistics pass's). */
int64_t kl_quantizer_batches(const kl_quantizer *q);
/* The report: every node of g, and every quantized value (after compute). */
const kl_quant_node *kl_quantizer_nodes(const kl_quantizer *q, int *count);
const kl_quant_value *kl_quantizer_values(const kl_quantizer *q, int *count);

#endif
