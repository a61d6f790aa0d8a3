/* The op-level drivers of kiln's ISA kernels (run_*.c, compiled without ISA flags).
 *
 * A driver does what does not depend on the instruction set: reading attributes,
 * splitting a tensor into contiguous rows (collapsing broadcasts and permutations),
 * spreading the rows over threads, and handing each row to the primitives of one ISA
 * level (isa_fns.h). A case the primitives do not cover (an axis other than the last
 * for Softmax, a dtype that shape inference left open at session creation, ...) runs
 * the op's reference kernel instead, so a driver never refuses what the reference
 * kernel accepts.
 *
 * kernels.c picks a driver and a level for each node (kl_cpu_isa_kernel).
 */
#ifndef KL_ISA_RUN_H
#define KL_ISA_RUN_H

#include "backends/backend.h"
#include "backends/cpu/isa/isa_fns.h"
#include "ir/ir.h"

/* The primitives of one ISA level. */
typedef struct kl_isa_fns {
  const char *name;
  const kl_eltwise_fns *elt;
  const kl_eltwise_bf16_fns *elt_bf16; /* NULL below AVX512_BF16 */
  const kl_rows_fns *rows;
  const kl_rows_bf16_fns *rows_bf16; /* NULL below AVX512_BF16 */
  const kl_pool_fns *pool;
  const kl_copy_fns *copy;
  const kl_gemv_fns *gemv;
  const kl_conv_fns *conv;
  const kl_optim_fns *optim;
  const kl_grad_fns *grad;
  const kl_quant_fns *quant;
} kl_isa_fns;

/* Relu, LeakyRelu, Sigmoid, Tanh, Exp, Erf, Gelu, Swish, HardSigmoid, HardSwish, Clip */
int kl_run_unary(kl_kernel_ctx *c, const kl_isa_fns *f);
/* y = act(y) over n floats in place, on the node's threads: the fused activation of a
 * oneDNN node that the level's primitive computes faster than oneDNN's post-op
 * (dnnl.c) */
void kl_run_act_inplace(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_act *a, float *y,
                        int64_t n);
/* Add, Sub, Mul, Div with any broadcast */
/* Add/Sub/Mul/Div of one operand of Y's dims held channels-last and one of one value
 * per image and channel (KL_ISA_CL_CHANNEL). */
int kl_run_binary_cl(kl_kernel_ctx *c, const kl_isa_fns *f);
int kl_run_binary(kl_kernel_ctx *c, const kl_isa_fns *f);
/* y += b in float32, b broadcast to y (plain tensors), on the node's threads: the
 * addends of a oneDNN product that kiln adds after the primitive (dnnl.c) */
void kl_run_add_inplace(const kl_kernel_ctx *c, const kl_isa_fns *f, kl_tensor *y,
                        const kl_tensor *b);
/* y = a + b in float32, a of y's shape, b broadcast to it; b may be y itself: a
 * convolution's Sum that kiln adds after the primitive wrote to a (dnnl.c) */
void kl_run_add(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_tensor *a,
                const kl_tensor *b, kl_tensor *y);
/* Softmax, LogSoftmax along the last axis */
int kl_run_softmax(kl_kernel_ctx *c, const kl_isa_fns *f);
/* LayerNormalization, RMSNormalization; kiln's SkipLayerNorm */
int kl_run_norm(kl_kernel_ctx *c, const kl_isa_fns *f);
int kl_run_skip_norm(kl_kernel_ctx *c, const kl_isa_fns *f);
/* ReduceSum, ReduceMean over one block of adjacent axes */
int kl_run_reduce(kl_kernel_ctx *c, const kl_isa_fns *f);
/* GlobalAveragePool */
int kl_run_global_pool(kl_kernel_ctx *c, const kl_isa_fns *f);
/* MaxPool (without Indices), AveragePool: 1-D and 2-D */
int kl_run_pool(kl_kernel_ctx *c, const kl_isa_fns *f);
/* MaxPool over 8-bit codes held channels-last ([N, S..., C]; rank 3 or 4) into Y held so */
int kl_run_pool8_cl(kl_kernel_ctx *c, const kl_isa_fns *f);
/* The same and the global pools (kiln's Nhwc forms too), 1-D and 2-D, float32, over
 * tensors held channels-last: c's tensors have the [N, C, S...] dims (the window's
 * geometry comes from them and the node), x and y are their data as [N, S..., C].
 * KILN_ERR_UNSUPPORTED (nothing run) for other ranks. */
int kl_run_pool_nhwc(const kl_kernel_ctx *c, const kl_isa_fns *f, const float *x, float *y);
/* Transpose, Concat: any dtype of 1, 2, 4 or 8 bytes */
int kl_run_transpose(kl_kernel_ctx *c, const kl_isa_fns *f);
/* QuantizeLinear, DequantizeLinear: float32 <-> uint8/int8 per tensor (run_quant.c) */
int kl_run_quantize(kl_kernel_ctx *c, const kl_isa_fns *f);
int kl_run_dequantize(kl_kernel_ctx *c, const kl_isa_fns *f);
/* The channels-last forms (kl_cpu_isa_layout): QLinearGlobalAveragePool of X held
 * [N, S..., C]; QLinearAdd and QLinearMul of one operand and Y held so and the other one
 * value per image and channel */
int kl_run_quantize_cl(kl_kernel_ctx *c, const kl_isa_fns *f);
/* A training step's gradient ops over tensors held [N, S..., C] (run_grad.c):
 * BatchNormTrain and BatchNormGrad (the plain kernels' statistics and outputs, the
 * per-channel sums reduced over fixed blocks of rows: the same bits at any thread
 * count), MaxPoolGrad (dY, X, dX so), ReduceGrad of a global pooling (dX so). */
int kl_run_grad_cl(kl_kernel_ctx *c, const kl_isa_fns *f);

/* Depthwise QLinearConv over channels-last uint8 X (run_qconv.c): c's tensors have the
 * [N, C, H, W] dims, x and y are their data as [N, H, W, C]. The window's geometry:
 * kernel, strides, dilations (ONNX's, 1 for none), the pads before. */
#define KL_QDW_MAX_TAPS 64
typedef struct kl_qdw_geom {
  int64_t kh, kw, sh, sw, dh, dw, pt, pl;
} kl_qdw_geom;
typedef struct kl_qdw_plan kl_qdw_plan;
/* Whether the kernel takes c's node: 2-D, uint8 X, uint8 or int8 Y, C in and out,
 * group C, at most KL_QDW_MAX_TAPS taps (the caller checks the weights' zero points). */
bool kl_qdw_fits(const kl_kernel_ctx *c, const kl_qdw_geom *geo);
/* The packed weights and multipliers for c's inputs (constant ones). */
kiln_status kl_qdw_plan_create(const kl_kernel_ctx *c, const kl_qdw_geom *geo,
                               kl_qdw_plan **out);
void kl_qdw_plan_free(kl_qdw_plan *p);
int kl_run_qdw(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_qdw_plan *p,
               const uint8_t *x, uint8_t *y);

/* QLinearGemm and QLinearMatMul (plain layouts) of at most KL_QGEMV_MAX_ROWS rows of
 * uint8 A against constant int8 B within [-64, 64] (run_qconv.c; the caller checks the
 * scales' and zero points' counts and B's zero points): the level's qgemv per row.
 * kl_run_qgemv writes into the plan (one session's). */
#define KL_QGEMV_MAX_ROWS 4
typedef struct kl_qgemv_plan kl_qgemv_plan;
/* Whether an int8 product's sums stay within int32 for any uint8 A: for each of `outs`
 * outputs o, whose `per` weights are w[o * os + i * is], |bias[o] - za sum(w)| + 255
 * sum(|w|) <= INT32_MAX (bias NULL: 0). */
bool kl_qsums_fit(const int8_t *w, int64_t outs, int64_t per, int64_t os, int64_t is,
                  const int32_t *bias, int64_t za);
bool kl_qgemv_fits(const kl_kernel_ctx *c);
kiln_status kl_qgemv_plan_create(const kl_kernel_ctx *c, bool relu, kl_qgemv_plan **out);
void kl_qgemv_plan_free(kl_qgemv_plan *p);
int kl_run_qgemv(const kl_kernel_ctx *c, const kl_isa_fns *f, kl_qgemv_plan *p);
int kl_run_matmul_integer(kl_kernel_ctx *c, const kl_isa_fns *f);
/* MatMulInteger of uint8 A and constant int8 B of 7-bit values (kl_dnnl_mmint_supports)
 * on the level's qgemm (run_qgemm.c): B packed at the first run into the plan kept in
 * *c->state (at every run when c->state is NULL), which kl_qgemm_free releases. */
typedef struct kl_qgemm_plan kl_qgemm_plan;
int kl_run_qgemm(kl_kernel_ctx *c, const kl_isa_fns *f);
/* Its wide form (isa_fns.h; kl_qgemm16_fits, backend.h, says which nodes it takes):
 * the same plan type and release. */
int kl_run_qgemm16(kl_kernel_ctx *c, const kl_isa_fns *f);
void kl_qgemm_free(void *state);
size_t kl_qgemm_held_bytes(const void *state);
/* kiln's MatMulIntegerToFloat (ops.def) runs the kernels of MatMulInteger, which write
 * the int32 sums over its float32 output's bytes, then its scale and bias: each sum v
 * becomes float(v) * scale[j] + bias[j], one float32 step at a time (the Cast, Mul and
 * Add it replaces). kl_mmint_scale_of fills *s (false for a MatMulInteger);
 * kl_mmint_scale_rows does rows of y, ldy elements apart, over columns col0 .. col0 +
 * cols - 1 (kl_run_qgemm: each tile of sums while it is in the cache);
 * kl_mmint_scale_all the whole output, in parallel. */
typedef struct kl_mmint_scale {
  const float *scale, *bias; /* bias NULL: none */
  bool scale_cols, bias_cols; /* one value a column, else one in all */
} kl_mmint_scale;
bool kl_mmint_scale_of(const kl_kernel_ctx *c, kl_mmint_scale *s);
void kl_mmint_scale_rows(const kl_mmint_scale *s, void *y, size_t ldy, size_t rows,
                         size_t col0, size_t cols);
void kl_mmint_scale_all(const kl_kernel_ctx *c, const kl_mmint_scale *s);
int kl_run_concat(kl_kernel_ctx *c, const kl_isa_fns *f);
/* Concat along `axis` of c's tensors whatever the node says (a channels-last Concat of
 * [N, C, S...] values is one along the last axis of their [N, S..., C] dims, dnnl.c);
 * KILN_ERR_UNSUPPORTED (nothing run) for a dtype of another size or a bad axis. */
int kl_run_concat_axis(const kl_kernel_ctx *c, const kl_isa_fns *f, int axis);
/* A Concat along dim 1 of [N, C, S...] tensors (at most 32) that Y and every input hold
 * channels-last: along the last dim of their [N, S..., C] forms. */
int kl_run_concat_cl(const kl_kernel_ctx *c, const kl_isa_fns *f);
/* BatchNormalization, inference form (run_batchnorm.c) */
int kl_run_batchnorm(kl_kernel_ctx *c, const kl_isa_fns *f);
/* Slice: any dtype of 1, 2, 4 or 8 bytes (run_slice.c) */
int kl_run_slice(kl_kernel_ctx *c, const kl_isa_fns *f);
/* Pad in constant mode: any dtype of 1, 2, 4 or 8 bytes (run_pad.c) */
int kl_run_pad(kl_kernel_ctx *c, const kl_isa_fns *f);
/* Pad of X and Y held channels-last (constant mode; run_pad.c) */
int kl_run_pad_cl(kl_kernel_ctx *c, const kl_isa_fns *f);
/* kiln's SGD, Adagrad, Adam, Lamb, Lars (in place), GradNorm (run_optim.c) */
int kl_run_optim(kl_kernel_ctx *c, const kl_isa_fns *f);
int kl_run_grad_norm(kl_kernel_ctx *c, const kl_isa_fns *f);

/* Rows times constant weights packed in panels (run_gemv.c), for the oneDNN nodes' runs
 * that kiln's products take (dnnl.c): for rows r < m (m 0 is 1) and i < n,
 *   y[r n + i] = act(alpha * (x W)[r][i] + add_scale * add[r add_row + i add_step]
 *                    + sum[r sum_row + i sum_step]),
 * each addend skipped when NULL, steps 0 (a broadcast along the row) or 1, row steps 0
 * (the same for every row) or anything else. x is [m, k] row-major; W [k, n] as
 * kl_gemv_pack made it: its whole panels at w, the partial last one (when n is not a
 * multiple of KL_GEMV_PANEL) at w_tail. An addend may share y's buffer (a Sum that
 * dies at the node): as y's own elements it is added in place, otherwise read through
 * a copy. y must not overlap x or the weights. One row is a matrix-vector product (the
 * level's panel primitive), more are tiles (its tile primitive, which m > 1 needs),
 * on x's rows packed into scratch (kl_gemv_scratch_bytes; NULL: a buffer of its own). */
typedef struct kl_gemv_args {
  const float *x, *w, *w_tail;
  int64_t k, n, m;
  float alpha;
  const float *add;
  int64_t add_step, add_row;
  float add_scale;
  const float *sum;
  int64_t sum_step, sum_row;
  bool has_act;
  kl_act act;
  float *y;
  float *scratch;
  /* When set, x is not read: rows(rows_arg, f, r0, count, out) packs rows r0 .. r0 +
   * count - 1 (count <= KL_GEMM_ROWS) as f's pack would pack them from x, and the
   * tiles run for any m (dnnl_im2col.c's convolutions gather their rows so). */
  void (*rows)(const void *rows_arg, const kl_isa_fns *f, int64_t r0, size_t count,
               float *out);
  const void *rows_arg;
} kl_gemv_args;
/* The scratch a product of m rows of k needs: none for one row. */
size_t kl_gemv_scratch_bytes(int64_t m, int64_t k);
/* Packs W (row-major: [n, k] when nk, else [k, n]) in panels of KL_GEMV_PANEL outputs
 * (isa_fns.h): the n / 16 whole panels into full (16 k floats each, one after the
 * other), the partial last one, when n % 16 != 0, into tail (16 k floats, its spare
 * columns 0). tail may be full's end, for one contiguous run of panels. W [n, k] is
 * transposed by level f's transpose primitive. */
void kl_gemv_pack(const kl_isa_fns *f, const float *w, bool nk, int64_t k, int64_t n,
                  float *full, float *tail);
/* The same for W [n, k] in place: the 16 rows of a whole panel are its floats already,
 * so each is transposed where it is (through scratch, 16 k floats); the rows past the
 * whole panels go into tail, and w's floats from (n / 16) * 16 * k on are left unused.
 * Packing so never holds a second copy of the weights. */
void kl_gemv_pack_nk_inplace(const kl_isa_fns *f, float *w, int64_t k, int64_t n, float *tail,
                             float *scratch);
/* The same for W [k, n] in place: the partial last panel into tail first, then the
 * rows' whole-panel parts moved together, then the [k, n / 16] blocks of 16 floats
 * transposed to [n / 16, k] by following the permutation's cycles, with seen
 * (kl_gemv_kn_seen_bytes: a bit per block) marking the blocks placed. */
size_t kl_gemv_kn_seen_bytes(int64_t k, int64_t n);
void kl_gemv_pack_kn_inplace(float *w, int64_t k, int64_t n, float *tail, uint8_t *seen);
/* KILN_ERR_OUT_OF_MEMORY (with c's error set) when the packed rows of x do not fit. */
kiln_status kl_run_gemv(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_gemv_args *a);
/* y[0:len] of the outputs from `at` of a's row (its y, add and sum at that row) from
 * their products p (which may be y): alpha, the addends, the activation (run_gemv.c) */
void kl_gemv_epilogue(const kl_isa_fns *f, const kl_gemv_args *a, int64_t at, const float *p,
                      int64_t len);
/* An addend of count floats at *p that shares the product's output buffer, read
 * through a copy instead: *p and *copy (to free) become the copy. KILN_ERR_OUT_OF_MEMORY
 * with c's error set when it does not fit. */
kiln_status kl_gemv_addend_copy(const kl_kernel_ctx *c, const float **p, int64_t count,
                                float **copy);

/* Rows times constant weights in bfloat16 on AMX tiles (run_amx.c, isa_fns.h's
 * kl_amx_fns), precision bf16: y = act(alpha * (bf16(x) W) + add_scale * add + sum) as
 * kl_run_gemv computes it, the products of bfloat16 operands summed in float, x and y
 * float32 or bfloat16 (x_bf16, y_bf16: held so between two bf16 nodes; a bfloat16 y is
 * rounded once, after the epilogue). epi holds the epilogue's terms (alpha, add,
 * add_step, add_row, add_scale, sum, sum_step, sum_row, has_act, act); its other fields
 * are not read. An addend may share y's buffer: read in place when it is y's own
 * elements, else through a copy. x's rows are packed into scratch
 * (kl_amx_scratch_bytes). */
typedef struct kl_amx_args {
  const void *x;
  bool x_bf16;
  const uint16_t *w; /* kl_amx_pack_weights */
  int64_t m, k, n;
  kl_gemv_args epi;
  void *y;
  bool y_bf16;
  uint16_t *scratch;
} kl_amx_args;
size_t kl_amx_weights_bytes(int64_t k, int64_t n);
size_t kl_amx_scratch_bytes(int64_t m, int64_t k);
/* W (row-major: [n, k] when nk, else [k, n]) rounded to bfloat16 into the panels
 * (kl_amx_weights_bytes of them at out); the whole steps of W [k, n] by amx's pack_kn
 * when amx is not NULL, the rest a weight at a time (the same bits) */
void kl_amx_pack_weights(const kl_amx_fns *amx, const float *w, bool nk, int64_t k, int64_t n,
                         uint16_t *out);
/* KILN_ERR_OUT_OF_MEMORY (with c's error set) when a copy of an addend does not fit */
kiln_status kl_run_amx(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_amx_fns *amx,
                       const kl_amx_args *a);
/* kiln.MultiHeadAttention at precision bf16 on AMX tiles (run_mha_amx.c): the geometry
 * (ref/mha.h) of float32 operands, within these bounds (kl_mha_amx_fits), and a
 * workspace of kl_mha_amx_ws_bytes for the threads c runs on (kl_isa_threads). */
struct kl_mha_geom;
#define KL_MHA_AMX_MAX_KEYS 4096 /* a task's rows of scores: 32 x 4096 floats */
#define KL_MHA_AMX_MAX_D 256
#define KL_MHA_AMX_MAX_KV_BYTES ((size_t)256 << 20) /* every head's packed K and V */
bool kl_mha_amx_fits(const struct kl_mha_geom *g);
size_t kl_mha_amx_ws_bytes(const struct kl_mha_geom *g, int threads);
kiln_status kl_run_mha_amx(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_amx_fns *amx,
                           const struct kl_mha_geom *g, void *ws, size_t ws_bytes);
/* RNN, GRU and LSTM in float32 with the default activations (run_rnn.c): every
 * direction, sequence_lens, initial states, layouts 0 and 1, clip, LSTM peepholes and
 * input_forget, GRU's linear_before_reset 0 and 1, as the reference kernel. kl_rnn_fast
 * says from the node and its static input types whether it takes the node (else the
 * reference kernel runs it). The state (c->state) holds W and R packed in panels, once
 * when const_weights (both constants), else again at every run, and a run's buffers;
 * kl_rnn_state_free releases it. */
bool kl_rnn_fast(const kl_node *n, const kl_type *const *in, int n_in);
int kl_run_rnn(kl_kernel_ctx *c, const kl_isa_fns *f, bool const_weights);
void kl_rnn_state_free(void *state);
/* The bytes a state holds (packed W and R, a run's buffers): kiln bench's memory. */
size_t kl_rnn_held_bytes(const void *state);
/* The primitives of level isa (the highest this build has at or below it). */
const kl_isa_fns *kl_cpu_isa_fns(kl_isa isa);
/* The AMX tile primitives at level isa (amx and this build has them), else NULL. */
const kl_amx_fns *kl_cpu_isa_amx(kl_isa isa);

/* The activation a node computes; false for an op kl_run_unary does not take. Clip's
 * bounds are inputs, read at run time by the driver. */
bool kl_isa_act(const kl_node *n, kl_act *a);
/* The activation of a fused node (its "activation" attribute) as a kl_act: *has false
 * when it has none; returns false when it has one the primitives lack (Mish, Elu). */
bool kl_isa_fused_act(const kl_node *n, bool *has, kl_act *a);

/* The gradient ops of a training step (run_grad.c), float32: MaxPoolGrad and
 * AveragePoolGrad, BatchNormTrain, BatchNormGrad, UnaryGrad (the rules
 * kl_grad_unary_fast takes), SoftmaxGrad, LayerNormGrad, SumTo, ReduceGrad. */
int kl_run_pool_grad(kl_kernel_ctx *c, const kl_isa_fns *f);
int kl_run_batchnorm_train(kl_kernel_ctx *c, const kl_isa_fns *f);
int kl_run_batchnorm_grad(kl_kernel_ctx *c, const kl_isa_fns *f);
int kl_run_unary_grad(kl_kernel_ctx *c, const kl_isa_fns *f);
int kl_run_softmax_grad(kl_kernel_ctx *c, const kl_isa_fns *f);
int kl_run_layernorm_grad(kl_kernel_ctx *c, const kl_isa_fns *f);
bool kl_grad_unary_fast(const kl_node *n);
/* Where (any dtype of 1, 2, 4 or 8 bytes) and And, Or, Xor over bool, broadcasting
 * (run_select.c) */
int kl_run_select(kl_kernel_ctx *c, const kl_isa_fns *f);
int kl_run_sum_to(kl_kernel_ctx *c, const kl_isa_fns *f);
/* RoiAlign (float32), ScatterElements (reduction none), Expand, ConstantOfShape,
 * Gather, GatherND, GatherElements (any dtype of 1, 2, 4 or 8 bytes, int64 or int32
 * indices), Split (the same dtypes), NonZero, TopK, Max and Min of two inputs (float32,
 * int32, int64) and Equal, Less, Greater, LessOrEqual, GreaterOrEqual (float32, float64,
 * int32, int64), broadcasting: plain C at every level (run_detect.c) */
int kl_run_detect(kl_kernel_ctx *c, const kl_isa_fns *f);
/* Resize of float32 along the last two dims, nearest or bilinear (run_resize.c; the
 * detection kernels' driver hands it the Resize nodes) */
int kl_run_resize(kl_kernel_ctx *c, const kl_isa_fns *f);
int kl_run_reduce_grad(kl_kernel_ctx *c, const kl_isa_fns *f);

/* ---- helpers shared by the drivers ---- */

/* The node's reference kernel: the fallback for cases the primitives do not cover,
 * after kl_isa_ref_allowed. */
int kl_isa_ref(kl_kernel_ctx *c);
/* Whether max_work lets the reference kernel take the node's steps for these shapes
 * (c->max_work, each step weighed as kl_work_weight's KL_WORK_REF; asked only on this
 * path, not at every run): an optimized kernel weighed as such before it ran may find
 * a run's shapes outside what it does (a pooling window wider than its buffers,
 * a shape oneDNN has no implementation for, or only its reference loops) and hand
 * them to a loop 100 to 1000 times slower a step. `why` says which, for the message:
 * "oneDNN has no implementation for these shapes". KILN_ERR_LIMIT when it would go
 * over. */
int kl_isa_ref_allowed(const kl_kernel_ctx *c, const char *why);

/* Runs fn(arg, t) for t < n_tasks, on the node's threads (OpenMP, when kiln is built
 * with it) if work, a count of elements touched, is large enough to pay for waking
 * them; else in order on the calling thread. Tasks must be independent. */
typedef void (*kl_task_fn)(void *arg, int64_t task);
/* The threads kl_isa_parallel would run a large job of c's on. */
int kl_isa_threads(const kl_kernel_ctx *c);
void kl_isa_parallel(const kl_kernel_ctx *c, int64_t n_tasks, int64_t work, kl_task_fn fn,
                     void *arg);

/* Splits `count` items into tasks of at least `min_per_task` items each (and few enough
 * that scheduling them costs nothing); returns the task count and sets *per_task. */
int64_t kl_isa_split(int64_t count, int64_t min_per_task, int64_t *per_task);

/* The element offsets of an operand while walking the outer dims of a collapsed
 * shape in row-major order (the innermost dim is left to the primitive). */
typedef struct kl_isa_walk {
  int rank; /* outer dims */
  int64_t dims[KL_MAX_RANK], idx[KL_MAX_RANK];
  int64_t stride[2][KL_MAX_RANK];
  int64_t off[2];
} kl_isa_walk;

/* The element stride of each of y's dims in operand t (0 where t broadcasts), t
 * right-aligned against y (numpy broadcasting). */
void kl_isa_bcast_strides(const kl_tensor *t, const kl_tensor *y, int64_t *stride);

/* Positions the walk at outer index o (row-major over dims). */
void kl_isa_walk_seek(kl_isa_walk *w, int64_t o);
void kl_isa_walk_next(kl_isa_walk *w);

/* Normalizes an axis attribute against rank (ONNX allows -rank..rank-1). */
static inline int kl_isa_axis(const kl_node *n, const char *name, int64_t dflt, int rank) {
  int64_t a = kl_attr_int(n, name, dflt);
  return (int)(a < 0 ? a + rank : a);
}

/* The output columns [*lo, *hi) of a row whose windows lie within the input's w
 * columns (no tap in the padding): a kernel of kw columns dilated by dw (ONNX's: 1 is
 * none), stride sw, pl columns of padding before, ow outputs. *lo == *hi when none do;
 * both at most ow. */
static inline void kl_isa_inner_cols(int64_t w, int64_t kw, int64_t dw, int64_t sw,
                                     int64_t pl, int64_t ow, int64_t *lo, int64_t *hi) {
  int64_t last = w - 1 + pl - (kw - 1) * dw; /* the last window's start */
  int64_t l = (pl + sw - 1) / sw, h = last >= 0 ? last / sw + 1 : 0;
  l = l < ow ? l : ow;
  h = h < ow ? h : ow;
  *lo = l;
  *hi = h > l ? h : l;
}

#endif
