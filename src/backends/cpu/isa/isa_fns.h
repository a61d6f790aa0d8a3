/* The primitives of kiln's own CPU kernels, one table per family and ISA level.
 *
 * Each family (eltwise, rows, pool, copy, gemv) has one source file per level,
 * compiled with that level's flags into its own static library (isa/meson.build):
 *   <family>_generic.c     plain C written for the auto-vectorizer, any CPU
 *   <family>_avx2.c        AVX2 + FMA intrinsics
 *   <family>_avx512.c      AVX-512 F/BW/DQ/VL intrinsics
 *   <family>_avx512bf16.c  bfloat16 forms with AVX512_BF16's conversions
 * A level without a file of a family runs the level below's, measured as fast or
 * faster: the AVX2 8x8 transpose tile beat a 16x16 AVX-512 one (two-source permutes)
 * by 2x on Zen 4, whose 512-bit permutes are slow.
 * The op-level work (attributes, broadcasting, rows, threads, falling back to the
 * reference kernel) is done once, in the run_*.c drivers, which call these on
 * contiguous rows. Primitives work in place (y may equal x) unless they say otherwise.
 *
 * A file compiled with ISA flags includes only this header, its level's vector-math
 * header and system headers: an inline function with external linkage compiled there
 * could be merged with, and then used instead of, the generic copy.
 */
#ifndef KL_ISA_FNS_H
#define KL_ISA_FNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Unary activations. f(x) as the reference kernels define them:
 *   RELU x < 0 ? 0 : x (NaN kept)     LEAKY_RELU x < 0 ? alpha x : x
 *   SIGMOID 1 / (1 + e^-x)            TANH, EXP, ERF
 *   GELU_ERF x/2 (1 + erf(x / sqrt 2))  GELU_TANH x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 *   SWISH x sigmoid(alpha x)          HARD_SIGMOID clamp(alpha x + beta, 0, 1)
 *   HARD_SWISH x clamp(x / 6 + 1/2, 0, 1)
 *   CLIP min(max(x, alpha), beta): alpha, beta the bounds (+-inf when absent) */
typedef enum kl_act_kind {
  KL_ACT_RELU,
  KL_ACT_LEAKY_RELU,
  KL_ACT_SIGMOID,
  KL_ACT_TANH,
  KL_ACT_EXP,
  KL_ACT_ERF,
  KL_ACT_GELU_ERF,
  KL_ACT_GELU_TANH,
  KL_ACT_SWISH,
  KL_ACT_HARD_SIGMOID,
  KL_ACT_HARD_SWISH,
  KL_ACT_CLIP,
  KL_ACT_COUNT
} kl_act_kind;

typedef struct kl_act {
  kl_act_kind kind;
  float alpha, beta;
} kl_act;

/* Binary ops. MAX is internal (pooling): b > a ? b : a, so a NaN in b never wins. */
typedef enum kl_binop { KL_BIN_ADD, KL_BIN_SUB, KL_BIN_MUL, KL_BIN_DIV, KL_BIN_MAX } kl_binop;

typedef struct kl_eltwise_fns {
  void (*unary)(const kl_act *a, const float *x, float *y, size_t n);
  /* y[i] = a[i * a_step] op b[i * b_step], steps 0 (a broadcast scalar) or 1 */
  void (*binary)(kl_binop op, const float *a, size_t a_step, const float *b, size_t b_step,
                 float *y, size_t n);
  /* Inference BatchNormalization of a row: y[i] = (x[i] - m[i * step]) * k[i * step] +
   * b[i * step], step 0 (one channel's scalars) or 1 (a channel per element) */
  void (*batchnorm)(const float *x, const float *m, const float *k, const float *b,
                    size_t step, float *y, size_t n);
} kl_eltwise_fns;

/* The same on bfloat16 data: computed in float, rounded to nearest even once. */
typedef struct kl_eltwise_bf16_fns {
  void (*unary)(const kl_act *a, const uint16_t *x, uint16_t *y, size_t n);
  void (*binary)(kl_binop op, const uint16_t *a, size_t a_step, const uint16_t *b,
                 size_t b_step, uint16_t *y, size_t n);
} kl_eltwise_bf16_fns;

/* One row of LayerNormalization (or RMSNormalization when rms): n elements, scale and
 * bias of n elements each (bias NULL when absent), of the row's dtype. */
typedef struct kl_norm_row {
  size_t n;
  float eps;
  bool rms;
  const void *scale, *bias; /* one row each; NULL: every element's is scale1 / bias1 */
  float scale1, bias1;      /* (bias1 is 0 unless set: no bias) */
} kl_norm_row;

#define KL_NORM_BLOCK 4096

/* The statistics of row x for a norm primitive (kl_norm_row *p): *mean (0 for rms) and
 * *inv = 1/sqrt(var + eps), each sum taken in blocks of KL_NORM_BLOCK added in double.
 * SUM(x, n) and DEV(x, mean, n) are the level's row sum and sum of squared deviations. */
#define KL_NORM_STATS(SUM, DEV, x, p, mean, inv)                                         \
  do {                                                                                   \
    size_t n_ = (p)->n;                                                                  \
    double sum_ = 0, dev_ = 0;                                                           \
    for (size_t i_ = 0; !(p)->rms && i_ < n_; i_ += KL_NORM_BLOCK)                       \
      sum_ += SUM((x) + i_, n_ - i_ < KL_NORM_BLOCK ? n_ - i_ : KL_NORM_BLOCK);         \
    *(mean) = (p)->rms ? 0.0f : (float)(sum_ / (double)n_);                              \
    for (size_t i_ = 0; i_ < n_; i_ += KL_NORM_BLOCK)                                    \
      dev_ += DEV((x) + i_, *(mean), n_ - i_ < KL_NORM_BLOCK ? n_ - i_ : KL_NORM_BLOCK); \
    *(inv) = (float)(1.0 / sqrt((double)(float)(dev_ / (double)n_) + (double)(p)->eps)); \
  } while (0)

typedef struct kl_rows_fns {
  /* Softmax (or LogSoftmax) of a row of n >= 1 */
  void (*softmax)(const float *x, float *y, size_t n, bool log_form);
  /* Normalizes a row; *mean and *inv get its mean (0 for rms) and 1/sqrt(var + eps).
   * The statistics of a long row are summed in blocks of KL_NORM_BLOCK (an instance
   * normalization's row is a whole feature map). */
  void (*norm)(const kl_norm_row *p, const float *x, float *y, float *mean, float *inv);
  /* The sum of n elements */
  float (*sum)(const float *x, size_t n);
} kl_rows_fns;

typedef struct kl_rows_bf16_fns {
  void (*softmax)(const uint16_t *x, uint16_t *y, size_t n, bool log_form);
  void (*norm)(const kl_norm_row *p, const uint16_t *x, uint16_t *y, float *mean, float *inv);
} kl_rows_bf16_fns;

typedef struct kl_pool_fns {
  /* The horizontal pass of 2-D pooling: y[j] = the max (or sum) over k < kw of
   * v[j * stride + k * dilation], j < n. Not in place. */
  void (*hpool)(bool is_max, const float *v, size_t stride, size_t dilation, size_t kw,
                float *y, size_t n);
  /* Channels-last pooling of one output pixel's C elements: y[i] = scale * (the max,
   * or the sum, of y[i] when acc, and of x[t][i] for t < n_taps), i < n. Without acc
   * the max starts from -inf and the sum from 0; a NaN in x never wins a max. The
   * taps are summed apart and y[i] added last, so that a large window given in parts
   * is not one chain of additions (its error would grow with the window). Not in
   * place. */
  void (*taps)(bool is_max, bool acc, const float *const *x, size_t n_taps, float scale,
               float *y, size_t n);
} kl_pool_fns;

typedef struct kl_copy_fns {
  /* dst[c * dst_ld + r] = src[r * src_ld + c] for r < rows, c < cols, elements of
   * elem_size bytes (1, 2, 4 or 8); lds in elements. Not in place. */
  void (*transpose2d)(size_t elem_size, const void *src, size_t src_ld, void *dst,
                      size_t dst_ld, size_t rows, size_t cols);
} kl_copy_fns;

/* Linear quantization of n contiguous elements with one scale and zero point
 * (run_quant.c's primitives; quant_impl.h has the loops and why they are exact):
 *   quantize:   y = saturate(rint(x / scale) + zp), the division in float32; NaN -> zp
 *   dequantize: y = (x - zp) * scale, in float32 */
/* Depthwise int8 convolution over channels-last uint8 codes (run_qconv.c), one output
 * pixel of c channels at a time from k taps:
 *   acc[i] = bias[i] + sum over taps t of x_t[i] w[t][i]   (int32, exact)
 *   y[i]   = clamp(rint((float)acc[i] * scale[i]), lo - zy, hi - zy) + zy
 * (onnxruntime's requantization: the float32 product rounded to nearest even, then the
 * zero point added). A tap in the padding reads a row of X's zero point zx, and bias
 * holds B - zx * (the channel's weight sum), so that padding adds nothing, as X - zx
 * would. The weights are packed as pairs of taps (2j, 2j + 1; a last odd tap paired with
 * 0) of int16, channel by channel, the channels in blocks of 16 stored in the order
 * 0-3, 8-11, 4-7, 12-15 (what AVX2's in-lane interleaves give), c rounded up to 16:
 *   w[(j * c16 + slot(i)) * 2 + r] = w[2j + r][i],  slot(i) = i with bits 2 and 3 swapped;
 * bias and scale in the same slots. */
#define KL_QDW_SLOT(i) (((i) & ~(size_t)12) | ((i) & 4) << 1 | ((i) & 8) >> 1)
typedef struct kl_qdw {
  size_t c, c16, k;
  const int16_t *w;
  const int32_t *bias;
  const float *scale;
  int32_t zy, lo, hi; /* Y's zero point and code range: 0, 255 or -128, 127 */
} kl_qdw;

/* int8 matrix-vector product (run_qconv.c: QLinearGemm and QLinearMatMul of one row): a
 * row a of k uint8 codes (read up to k rounded up to 4, the caller's zeros past k)
 * against int8 weights packed in panels of 8 columns, each k4 / 4 groups of 4 rows:
 *   wp[(p * (k4 / 4) + g) * 32 + col * 4 + r] = B[4g + r][8p + col]   (0 past k, n)
 * acc[j] = sum over i of a[i] B[i][j] for j < n, int32. Exact for |B| <= 64: AVX2 adds
 * pairs of products in 16 bits with saturation (vpmaddubsw), 2 * 255 * 64 < 32768. */
#define KL_QGEMV_PANEL 8
/* Where B[i][j] goes in wp, groups = k4 / 4 */
static inline size_t kl_qgemv_at(size_t i, size_t j, size_t groups) {
  return ((j / KL_QGEMV_PANEL) * groups + i / 4) * 32 + (j % KL_QGEMV_PANEL) * 4 + i % 4;
}
/* int8 matrix product of a few rows (run_qgemm.c: MatMulInteger): rows r < rows (at most
 * KL_QGEMM_ROWS) of uint8 codes a + r * lda, k each (read up to k, no further), against
 * one or two panels of weights packed as above (wp, the second at wp + groups * 32, with
 * groups = (k + 3) / 4), cols <= 2 * KL_QGEMV_PANEL of their columns:
 *   y[r * ldy + j] = sum over i < k of a[r * lda + i] B[i][j] - comp[j]   (int32)
 * Exact for |B| <= 64 (as above) while the sums stay within int32. */
#define KL_QGEMM_ROWS 4
/* The wide form of that product, for 8-bit operands of any kind (run_qgemm.c: weights
 * past 7 bits, uint8 B, int8 A, zero points), exact: both operands are int16 values
 * (the codes less their zero points, within [-255, 255]) and vpmaddwd adds pairs of
 * their products into int32 without saturating. B is packed in panels of 8 columns, k in
 * pairs: B[i][j] at kl_qgemm16_at(i, j, pairs), pairs = (k + 1) / 2, a missing last row
 * 0. rows r < rows (at most KL_QGEMM_ROWS) of a + r * lda, 2 * kpairs values each (a
 * missing last one 0), against the panels at w0 and w1 (the same when cols <= 8), cols
 * <= 16 of their columns:
 *   y[r * ldy + j] = sum over i < 2 kpairs of a[r * lda + i] B[i][j]   (int32)
 * Exact while the sums stay within int32 (K < 33000). */
static inline size_t kl_qgemm16_at(size_t i, size_t j, size_t pairs) {
  return ((j / KL_QGEMV_PANEL) * pairs + i / 2) * 16 + (j % KL_QGEMV_PANEL) * 2 + i % 2;
}

typedef struct kl_quant_fns {
  void (*quantize_u8)(const float *x, float scale, int32_t zp, uint8_t *y, size_t n);
  void (*quantize_s8)(const float *x, float scale, int32_t zp, int8_t *y, size_t n);
  void (*dequantize_u8)(const uint8_t *x, float scale, int32_t zp, float *y, size_t n);
  void (*dequantize_s8)(const int8_t *x, float scale, int32_t zp, float *y, size_t n);
  /* y[i] += a * x[i] in int32 (a row of MatMulInteger: run_quant.c) */
  void (*axpy_u8)(int32_t a, const uint8_t *x, int32_t *y, size_t n);
  void (*axpy_s8)(int32_t a, const int8_t *x, int32_t *y, size_t n);
  /* the same for 4 rows of y (y + r * ldy) and their 4 factors, x read once */
  void (*axpy4_u8)(const int32_t *a, const uint8_t *x, int32_t *y, size_t ldy, size_t n);
  void (*axpy4_s8)(const int32_t *a, const int8_t *x, int32_t *y, size_t ldy, size_t n);
  /* QLinearAdd, QLinearMul: y = quantize(dequantize(a) + or * dequantize(b)), each
   * step as above; b of a's n elements (bstep 1) or one (bstep 0) */
  void (*qadd_u8)(const uint8_t *a, float sa, int32_t za, const uint8_t *b, float sb,
                  int32_t zb, float sc, int32_t zc, uint8_t *y, size_t n, size_t bstep);
  void (*qadd_s8)(const int8_t *a, float sa, int32_t za, const int8_t *b, float sb,
                  int32_t zb, float sc, int32_t zc, int8_t *y, size_t n, size_t bstep);
  void (*qmul_u8)(const uint8_t *a, float sa, int32_t za, const uint8_t *b, float sb,
                  int32_t zb, float sc, int32_t zc, uint8_t *y, size_t n, size_t bstep);
  void (*qmul_s8)(const int8_t *a, float sa, int32_t za, const int8_t *b, float sb,
                  int32_t zb, float sc, int32_t zc, int8_t *y, size_t n, size_t bstep);
  /* QLinearLookup: y[i] = table[x[i] ^ flip] (flip 0x80 for int8 codes) */
  void (*lookup)(const uint8_t *x, uint8_t flip, const uint8_t *table, uint8_t *y, size_t n);
  /* QLinearGlobalAveragePool: the sum of x[i] ^ flip over n codes (as uint8) */
  uint64_t (*sum_codes)(const uint8_t *x, uint8_t flip, size_t n);
  /* The same over a channels-last tensor: acc[i] = sum of x[r * stride + i] ^ flip over
   * rows r < rows, for each i < n (rows < 2^24 keeps the sums exact in 32 bits) */
  void (*sum_columns)(const uint8_t *x, uint8_t flip, size_t stride, size_t rows, size_t n,
                      uint32_t *acc);
  /* Depthwise int8 convolution (kl_qdw above) of n output pixels: pixel p's tap t
   * reads the c codes at taps[t] + p * xstep, its c outputs go to y + p * ystride
   * (uint8 or, with lo -128, int8 codes) */
  void (*qdw)(const kl_qdw *d, const uint8_t *const *taps, size_t xstep, size_t n,
              uint8_t *y, size_t ystride);
  /* int8 matrix-vector product (above) */
  void (*qgemv)(const uint8_t *a, size_t k, const int8_t *wp, size_t n, int32_t *acc);
  /* int8 matrix product of a few rows (above) */
  void (*qgemm)(const uint8_t *a, size_t lda, size_t rows, size_t k, const int8_t *wp,
                size_t cols, const int32_t *comp, int32_t *y, size_t ldy);
  /* its wide form (above) */
  void (*qgemm16)(const int16_t *a, size_t lda, size_t rows, size_t kpairs,
                  const int16_t *w0, const int16_t *w1, size_t cols, int32_t *y, size_t ldy);
  /* MaxPool over channels-last codes, one output pixel's n channels: y[i] = the largest
   * of x[t][i] for t < n_taps, and of y[i] itself when acc, compared as uint8 after ^
   * flip (flip 0x80: int8 codes); without acc and taps, the lowest code (0 ^ flip). */
  void (*max_codes)(const uint8_t *const *x, size_t n_taps, uint8_t flip, bool acc,
                    uint8_t *y, size_t n);
  /* DynamicQuantizeLinear's range: *lo = min(0, x[i]), *hi = max(0, x[i]) over i < n;
   * false (lo and hi unspecified) when an element is NaN or infinite */
  bool (*range)(const float *x, size_t n, float *lo, float *hi);
} kl_quant_fns;

/* Matrix-vector products (run_gemv.c's primitives): one row x of k elements times
 * float32 weights packed in panels of KL_GEMV_PANEL outputs, for n outputs:
 *   panel p (outputs 16p .. 16p+15) is k rows of 16 at wp + p * 16 * k, row j holding
 *   w[j][16p .. 16p+15]; the last panel's columns past n are zeros (kl_gemv_pack).
 *   y[i] = sum_j x[j] wp[(i / 16) * 16 * k + j * 16 + i % 16], i < n.
 * Each panel is one stream read front to back, and one vector of x's broadcasts feeds
 * all its 16 outputs. y must not overlap x or wp; only y[0 .. n-1] is written. The sums
 * are in float, in an order of each level's choosing. */
#define KL_GEMV_PANEL 16
/* gemv sums each block of this many rows of k apart and then adds the block sums, so
 * that a long k (VGG's 25088) is not one chain of additions: the rounding error grows
 * with the block and the block count, not with k (VGG-11's logits moved 2-3x further
 * from float64 than onnxruntime's). */
#ifndef KL_GEMV_BLOCK /* (-DKL_GEMV_BLOCK=... to compare) */
#define KL_GEMV_BLOCK 256
#endif
/* kiln's own convolutions over channels-last float pixels (the generic and AVX2 levels;
 * the AVX-512 ones run AVX2's).
 *
 * Winograd F(2x2, 3x3) tiles (dnnl_wino.c): a 4x4 window of input
 * pixels becomes 16 transformed values per channel, V = B^T d B, and 16 products of
 * the transformed weights become a 2x2 output tile, Y = A^T M A, with
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]   A^T = [1 1 1 0; 0 1 -1 -1].
 *
 * A grouped convolution of few channels a group (dnnl_gconv.c, kl_gconv): groups of ci
 * input and co output channels, co a multiple of 8, k taps; output pixel p, group g,
 * output channel o < co:
 *   y[p ystride + g co + o] = bias[g co + o]
 *       + sum over t < k, then c < ci, of taps[t][p xstep + g ci + c] w[((g k + t) ci + c) co + o]
 * (bias NULL: 0), one multiply-add at a time in that order. */
typedef struct kl_gconv {
  size_t groups, ci, co, k;
  const float *w, *bias;
} kl_gconv;

typedef struct kl_conv_fns {
  /* d[4 r + s]: the c channels of the window's pixel (r, s) (zeros where it lies in
   * the padding); v[x * stride + i] gets value x of channel i, x < 16, i < c. */
  void (*in_tile)(const float *const *d, size_t c, float *v, size_t stride);
  /* m[x * stride + i]: product x of output channel i, x < 16, i < k; y[2 r + s], when
   * not NULL, gets the k channels of the tile's output pixel (r, s), plus bias[i]
   * (when not NULL) and plus sum[2 r + s][i] (when sum is not NULL; it may be y's own
   * memory). */
  void (*out_tile)(const float *m, size_t stride, size_t k, const float *bias,
                   float *const *y, const float *const *sum);
  /* The grouped convolution (kl_gconv above) of n output pixels: pixel p's tap t
   * reads taps[t] + p * xstep; y does not overlap the taps. */
  void (*gconv)(const kl_gconv *d, const float *const *taps, size_t xstep, size_t n,
                float *y, size_t ystride);
} kl_conv_fns;

/* Matrix products of many rows on the same panels (run_gemv.c, kl_run_gemv with m > 1):
 * the rows of A are packed in groups of KL_GEMM_ROWS, each group k steps of
 * KL_GEMM_ROWS floats (row i of the group at step j: a[j * KL_GEMM_ROWS + i]; rows past
 * the matrix's end hold zeros), so that a tile of KL_GEMM_ROWS x KL_GEMV_PANEL outputs
 * keeps its sums in registers while one panel's k rows and the group stream by. */
#define KL_GEMM_ROWS 6
/* The most rows dnnl.c hands the tiles. On a Zen 3 (docs/benchmarks.md) they beat
 * oneDNN's products (which pack the weights at each call) by 1.6 to 3 times at 4 to 32
 * rows and by a fifth at 128 (BERT's), but inside whole models (weights read from
 * memory, not cache) lost 13% at swin_t's 196 rows, and alone lost at 256 and more. */
#define KL_GEMM_MAX_ROWS 128
/* Weights (k n floats) from which on the tiles take any number of rows: oneDNN 2.6's
 * gemm packs such a matrix again at each call, a pass through memory as long as the
 * product's own at some hundred rows (Faster R-CNN's box head: 12544 x 1024 weights,
 * 51 MB, on ~150 rois: 58 ms on kiln's tiles against 117 ms on oneDNN's gemm, Zen 3,
 * one thread). Smaller weights stay in cache for oneDNN's packing and keep the limit. */
#define KL_GEMM_BIG_WEIGHTS ((int64_t)4 << 20)
typedef struct kl_gemv_fns {
  void (*panel)(const float *x, const float *wp, size_t k, float *y, size_t n);
  /* One tile: c[i * ldc + l] = sum_{j < k} a[j * 6 + i] wp[j * 16 + l] (+ c[i * ldc + l]
   * when acc, added last) for rows i < m <= KL_GEMM_ROWS and columns l < nc <=
   * KL_GEMV_PANEL; nothing else of c is read or written. Sums in float, in k order (a
   * level may sum the even and the odd steps apart and add the two at the end).
   * pf, npf: a hint, the npf lines of 64 bytes from pf (16 floats apart) that the tiles
   * after this one read (the next weight slice), to fetch one a step while the sums
   * are made; a level may ignore it, and pf is never read. */
  void (*tile)(const float *a, const float *wp, size_t k, size_t m, float *c, size_t ldc,
               size_t nc, bool acc, const float *pf, size_t npf);
  /* Whether the level's tiles beat oneDNN's matrix products (measured, docs/
   * benchmarks.md): dnnl.c hands them the runs of more than one row only then. */
  bool rows_fast;
  /* A group of rows <= KL_GEMM_ROWS rows of x (k floats each, one after the other) into
   * out as the tiles read it: out[j * KL_GEMM_ROWS + i] = x[i * k + j], zeros for the
   * rows i >= rows; nothing past out's k * KL_GEMM_ROWS floats written. With tile. */
  void (*pack)(const float *x, size_t k, size_t rows, float *out);
} kl_gemv_fns;

/* bfloat16 matrix products on AMX tiles (amx_bf16.c, driven by run_amx.c), AMX level:
 *   the weights in panels of KL_AMX_COLS outputs, each k padded to a whole number of
 *   steps of KL_AMX_STEP (zeros past k and past n), a panel one stream front to back:
 *   step s holds two tiles (outputs 0-15, then 16-31) of 16 rows of 16 pairs: row r,
 *   pair j is (w[32 s + 2 r][j], w[32 s + 2 r + 1][j]) of the tile's outputs, the
 *   layout TDPBF16PS reads (kl_amx_pack_weights);
 *   the rows of x as bfloat16, row-major, kp (k padded) apart, in blocks of
 *   KL_AMX_ROWS rows (zeros past k and past the last row).
 * A block is KL_AMX_ROWS x KL_AMX_COLS sums, two by two tiles of 16 x 16, each step
 * one pair of row tiles times one pair of weight tiles; the sums in float, each TDPBF16PS
 * adding 32 products, in an order of the hardware's. */
#define KL_AMX_ROWS 32
#define KL_AMX_COLS 32
#define KL_AMX_STEP 32
/* The most rows dnnl.c hands the tiles: past them oneDNN's matmul, which blocks the
 * rows for its caches, is as fast or faster (weights from memory, 1 thread, Sapphire
 * Rapids: at 64 and 128 rows the tiles took 0.65-0.85 of its time, at 256 rows 0.78 to
 * 1.12 by shape, at 384 1.0-1.1, at 512 1.4, at 2048 rows x 768 x 3072 2.5) */
#define KL_AMX_MAX_ROWS 192
typedef struct kl_amx_fns {
  /* The tile configuration that block needs, for this thread; release gives the tiles
   * back (the thread's AMX state returns to its initial, cheap-to-save form). */
  void (*config)(void);
  void (*release)(void);
  /* c[i * ldc + l] = sum over the steps of a[i * lda + j] w[j][l], i, l < 32, for the
   * block of rows at a (lda elements apart) and the panel at wp, `steps` steps; while
   * the sums are made, the lines of 64 bytes pf + 64 q for q < pf_lines are fetched
   * into L2, per_step of them a step (the next panel: never read, may be NULL with
   * pf_lines 0). */
  void (*block)(const uint16_t *a, size_t lda, const uint16_t *wp, size_t steps, float *c,
                size_t ldc, const char *pf, size_t per_step, size_t pf_lines);
  /* rows of x (k floats each, consecutive) as bfloat16, round to nearest even with
   * NaN kept, into rows kp elements apart, zeros from k to kp */
  void (*pack_rows)(const float *x, size_t k, size_t rows, size_t kp, uint16_t *out);
  /* y[i] = x[i] as bfloat16, i < n, rounded so */
  void (*to_bf16)(const float *x, uint16_t *y, size_t n);
  /* The common epilogue fused over a block's sums: for rows i < rows and columns l < nc
   * (<= KL_AMX_COLS), v = c[i * ldc + l] (+ bias[l] when bias is not NULL), then act
   * (when not NULL) into y[i * ldy + l], float32 or rounded to bfloat16 (y_bf16): the
   * same float operations as the level's add and unary primitives make. */
  void (*out)(const float *c, size_t ldc, size_t rows, size_t nc, const float *bias,
              const kl_act *act, void *y, size_t ldy, bool y_bf16);
  /* One whole step of one panel of W [k, n] (32 rows of 32 outputs at w, rows ld floats
   * apart) into out (2 x 16 x 16 pairs, the layout above), each weight rounded to
   * bfloat16 to nearest even. */
  void (*pack_kn)(const float *w, size_t ld, uint16_t *out);
  /* The same step from W [n, k]: 32 rows of 32 inputs at w (one output a row, rows ld
   * floats apart), e.g. the keys of attention's first product. */
  void (*pack_nk)(const float *w, size_t ld, uint16_t *out);
  /* One row of attention's scores, n floats at s: v = s * scale, + m[i] (m_step 1) or
   * + m[0] (m_step 0) when m is not NULL, then the softmax of v rounded to bfloat16
   * into p, zeros from n to np (>= n); s is overwritten. Returns true, with p's first n
   * NaN (the reference's e^(-inf - -inf)), when no v is above -inf. */
  bool (*probs)(float *s, size_t n, float scale, const float *m, int m_step, uint16_t *p,
                size_t np);
} kl_amx_fns;

/* Optimizer updates (run_optim.c's primitives; ops.def "optimizers"; the scalar
 * reference ref/optim.c fixes every formula and docs/training.md states them). Each
 * primitive updates n float32 elements in place, element by element, with the same
 * float operations in the same order as the reference (no FMA: separate multiplies and
 * adds), so that every level gives the reference's bits. The scalars are prepared by
 * the driver in double and rounded to float once (kl_optim_k).
 * Sums of squares go to 16 double accumulators, element j of a call into acc[j % 16]
 * ((double)x * x is exact), so the driver calls them at offsets that are multiples of
 * KL_OPTIM_LANES within its fixed blocks; the reference sums in the same lanes. */
#define KL_OPTIM_LANES 16
typedef struct kl_optim_k {
  float scale;                   /* GradScale: g = g * scale first, when has_scale */
  bool has_scale, maximize, has_wd;
  float wd;                      /* weight_decay */
  /* SGD */
  bool has_momentum, first, nesterov;
  float momentum, damp, neg_lr;  /* damp = 1 - dampening, neg_lr = -lr */
  /* Adagrad (eps shared with Adam and Lamb) */
  float neg_clr, eps;            /* -lr / (1 + (step - 1) lr_decay) */
  /* Adam */
  bool decoupled, amsgrad, lerp_small;
  float decay;                   /* 1 - lr wd (AdamW) */
  float w1, w1c;                 /* lerp weight 1 - beta1, and 1 - w1 in float */
  float beta2, c2;               /* beta2, 1 - beta2 */
  float bc2_sqrt, neg_step;      /* sqrt(1 - beta2^step), -lr / (1 - beta1^step) */
  /* Lamb (beta2, c2, eps, wd above) */
  float beta1, c1, bc1, bc2;     /* beta1, 1 - beta1, 1 - beta1^step, 1 - beta2^step */
  float lr_trust;                /* Lamb, Lars: lr times the trust ratio (pass two) */
} kl_optim_k;

typedef struct kl_optim_fns {
  /* buf NULL when !has_momentum */
  void (*sgd)(const kl_optim_k *k, float *p, const float *g, float *buf, size_t n);
  void (*adagrad)(const kl_optim_k *k, float *p, const float *g, float *sum, size_t n);
  /* vmax NULL when !amsgrad */
  void (*adam)(const kl_optim_k *k, float *p, const float *g, float *m, float *v, float *vmax,
               size_t n);
  /* Lamb pass one: m, v updated; the squares of p and of the update into acc_p, acc_u */
  void (*lamb_moments)(const kl_optim_k *k, const float *p, const float *g, float *m,
                       float *v, size_t n, double *acc_p, double *acc_u);
  /* Lamb pass two: p -= lr_trust * update (recomputed from m, v, p) */
  void (*lamb_apply)(const kl_optim_k *k, float *p, const float *m, const float *v, size_t n);
  /* Lars pass one: the squares of p and of g * scale */
  void (*lars_norms)(const kl_optim_k *k, const float *p, const float *g, size_t n,
                     double *acc_p, double *acc_g);
  void (*lars)(const kl_optim_k *k, float *p, const float *g, float *buf, size_t n);
  /* the squares of x (GradNorm) */
  void (*sumsq)(const float *x, size_t n, double *acc);
  /* split weights (optim_split.h): out = the float32 of top << 16 | trail (trail NULL:
   * 0), and back, exactly as kl_join_bf16 and kl_split_bf16 */
  void (*join)(const uint16_t *top, const uint16_t *trail, float *out, size_t n);
  void (*split)(const float *in, uint16_t *top, uint16_t *trail, size_t n);
} kl_optim_fns;

#define KL_GRAD_CL_CH 16 /* channels per kl_grad_fns.cl_max call, at most */

/* Gradient-op primitives (run_grad.c). The sums are in double over 8 fixed lanes: in a
 * call, element i goes into lane i % 8, in order, and the lanes, from 0, into the result;
 * with no FMA, every level forms the same sums bit for bit (and the products of two
 * floats are exact in double). */
typedef struct kl_grad_fns {
  /* *s += the sum of x[i], *sw += the sum of x[i] * (w ? w[i] : x[i]) */
  void (*sums)(const float *x, const float *w, size_t n, double *s, double *sw);
  /* the sum of (x[i] - mean)^2 */
  double (*deviations)(const float *x, size_t n, double mean);
  /* y[i] = x[i] * a + b (BatchNormTrain's output) */
  void (*affine)(const float *x, float a, float b, float *y, size_t n);
  /* dx[i] = a dy[i] + b x[i] + c (BatchNormGrad's dX) */
  void (*affine2)(const float *dy, const float *x, float a, float b, float c, float *dx,
                  size_t n);
  /* dx[i] = x[i] > 0 ? dy[i] : alpha == 0 ? 0 : dy[i] * alpha (Relu, LeakyRelu) */
  void (*relu)(const float *dy, const float *x, float alpha, float *dx, size_t n);
  /* MaxPoolGrad's search for n outputs l < n of one row, each window whole: best[l] =
   * the position of the maximum among x[rows[r] + first + l * step + k * dil] for
   * r < n_rows, k < kw, taken in that order (r outer), a later tap winning when it is
   * greater or NaN; the first tap's when none is greater than -inf. Positions < 2^31. */
  void (*max_taps)(const float *x, const int32_t *rows, int n_rows, int32_t first,
                   int32_t step, int32_t kw, int32_t dil, int n, int32_t *best);
  /* Channels-last forms over [rows, nc] (grad_cl.h): BatchNorm's per-channel sums of a
   * block of rows (of x - shift, its square, dy, dy (x - shift): s holds 4 nc), its
   * outputs, and MaxPoolGrad's search of n taps for up to KL_GRAD_CL_CH channels (mx,
   * best carried). */
  void (*cl_sums)(const float *x, const float *dy, const float *shift, size_t rows, size_t nc,
                  float *s);
  void (*cl_apply)(const float *x, const float *dy, const float *ka, const float *kb,
                   const float *kc, size_t rows, size_t nc, float *out);
  void (*cl_max)(const float *x, size_t nc, const int32_t *taps, int n, int cw, float *mx,
                 int32_t *best);
} kl_grad_fns;

/* The tables, defined by the family files. Only the generic ones exist off x86. */
extern const kl_eltwise_fns kl_eltwise_generic, kl_eltwise_avx2, kl_eltwise_avx512;
extern const kl_eltwise_bf16_fns kl_eltwise_avx512bf16;
extern const kl_rows_fns kl_rows_generic, kl_rows_avx2, kl_rows_avx512;
extern const kl_rows_bf16_fns kl_rows_avx512bf16;
extern const kl_pool_fns kl_pool_generic, kl_pool_avx2, kl_pool_avx512;
extern const kl_copy_fns kl_copy_generic, kl_copy_avx2;
extern const kl_quant_fns kl_quant_generic, kl_quant_avx2, kl_quant_avx512;
extern const kl_gemv_fns kl_gemv_generic, kl_gemv_avx2, kl_gemv_avx512;
extern const kl_amx_fns kl_amx_bf16;
/* QLinearLookup's table lookup with AVX512-VBMI's byte permutes (quant_avx512vbmi.c): the
 * AVX-512 levels' lookup where the CPU has VBMI (kl_cpu_features.avx512_vbmi) */
void kl_lookup_vbmi(const uint8_t *x, uint8_t flip, const uint8_t *table, uint8_t *y, size_t n);
extern const kl_conv_fns kl_conv_generic, kl_conv_avx2;
extern const kl_optim_fns kl_optim_generic, kl_optim_avx2, kl_optim_avx512;
extern const kl_grad_fns kl_grad_generic, kl_grad_avx2;

#endif
