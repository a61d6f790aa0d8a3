/* oneDNN kernels for the heavy ops: Conv, ConvTranspose, Gemm and MatMul in float32,
 * and kiln's fused forms of them (FusedConv, FusedConvTranspose, FusedGemm,
 * FusedMatMul), whose Bias, Sum and activation become oneDNN post-ops; also the
 * pooling ops (MaxPool without Indices, AveragePool, GlobalAveragePool,
 * GlobalMaxPool), so that a MaxPool between convolutions keeps their layout.
 *
 * A node's state holds, per set of input shapes (a small cache), the primitive and the
 * reorders between kiln's plain row-major tensors and the layouts the primitive chose;
 * the buffers these need only while the node runs (scratchpads, staged copies) are
 * regions of one workspace per session (kl_dnnl_engine); constant weights are reordered once into the layout oneDNN
 * picks and shared by every entry that wants that layout. When oneDNN has no
 * implementation for a shape, the entry remembers it and runs the reference kernel.
 * A Gemm or MatMul run with one row of input and constant weights makes no primitive:
 * kiln's own matrix-vector product (isa/run_gemv.c) streams the weights, packed once
 * for it in panels.
 *
 * Running a node whose entry exists allocates nothing: every buffer is made (or the
 * workspace grown) when the entry is. */
#ifndef KL_CPU_DNNL_H
#define KL_CPU_DNNL_H

#include "backends/backend.h"

/* A oneDNN CPU engine and stream, shared by the nodes of one session. */
typedef struct kl_dnnl_engine kl_dnnl_engine;

kiln_status kl_dnnl_engine_create(kl_dnnl_engine **out, kl_err *e);
/* Whether oneDNN's ISA here (after KILN_ISA's cap) has native bf16 dot products
 * (avx512_core_bf16 or avx512_core_amx), which precision bf16 needs. */
bool kl_dnnl_bf16_native(void);
/* Precision bf16: the engine's convolutions and matrix products take their operands in
 * bf16 (reordered from float32 before the primitive, weights packed once) and write
 * float32; a node oneDNN has no fast bf16 implementation for stays float32. */
void kl_dnnl_engine_set_bf16(kl_dnnl_engine *eng, bool on);
/* Precision bf16: whether the node (kl_dnnl_node_create's state) is a convolution or
 * matrix product of a bf16 engine, which can read X and write Y in bf16; and, decided
 * for the whole graph before the first run (kl_cpu_plan), whether it does: X (input 0)
 * and Y are then bf16 in the session's buffers, passed between two such nodes without
 * a conversion. */
bool kl_dnnl_bf16_capable(const void *state);
void kl_dnnl_set_bf16_held(void *state, bool src, bool dst);
void kl_dnnl_engine_free(kl_dnnl_engine *eng);
/* Bytes of the engine's workspace: the buffers every node of the session shares for
 * what it needs only while it runs (scratchpads, staged copies, attention scores). */
size_t kl_dnnl_engine_held_bytes(const kl_dnnl_engine *eng);
/* For tests: from now on, fill the workspace with NaNs before every node runs, so
 * that a node reading what another left there shows in its outputs. */
void kl_dnnl_ws_poison(kl_dnnl_engine *eng, bool on);

/* Whether oneDNN is to run node n of g: its op, float32 types and attributes that
 * post-ops can express. Decided from the graph alone, once per session. */
bool kl_dnnl_supports(const kl_graph *g, const kl_node *n);

/* The kernel for a supported node and its initial state (which refers to eng, so eng
 * must outlive it). *inplace gets the input bits the kernel may share out[0] with
 * (see kl_cpu_choice). */
kiln_status kl_dnnl_node_create(kl_dnnl_engine *eng, const kl_graph *g, const kl_node *n,
                                kl_cpu_kernel *kernel, unsigned *inplace, void **state,
                                kl_err *e);

/* The inputs (bit k: input k) that node n, a supported one, can read channels-last
 * ([N, S..., C] in memory for logical [N, C, S...]); when it is not 0 the node can
 * also write its output so. Convolutions: X and Sum; pooling: X; Add, Mul, ...: the
 * operands of the output's rank. */
unsigned kl_dnnl_channels_last_slots(const kl_graph *g, const kl_node *n);
/* Tells a node's state which of its inputs and whether its output are held
 * channels-last; the session decides, before the first run, for values passed only
 * between such nodes, so that no reorder to plain and back happens between them. */
void kl_dnnl_set_channels_last(void *state, unsigned inputs, bool output);

/* kiln.Attention (Q, Kt, V, Mask?) in float32 on oneDNN (dnnl_attention.c): a scaled
 * matmul, the mask added, softmax, a matmul; same contract as the kernels above. */
bool kl_dnnl_attention_supports(const kl_graph *g, const kl_node *n);
kiln_status kl_dnnl_attention_create(kl_dnnl_engine *eng, kl_cpu_kernel *kernel, void **state,
                                     kl_err *e);
bool kl_dnnl_attention_ran_reference(const void *state);
/* The oneDNN reference implementation one of the last run's primitives was, NULL when
 * none was (kl_dnnl_impl_is_slow). */
/* The implementation of the last run's first product ("... bf16" at precision bf16);
 * NULL when the reference ran. */
const char *kl_dnnl_attention_ran_impl(const void *state);
const char *kl_dnnl_attention_ran_slow(const void *state);

/* kiln.ConvGradX and kiln.ConvGradW in float32 on oneDNN's backward-data and
 * backward-weights primitives (dnnl_grad.c); same contract as the kernels above. Shapes
 * for which oneDNN has no fast implementation run the reference kernel, which
 * kl_dnnl_grad_ran_reference then reports. */
bool kl_dnnl_grad_supports(const kl_graph *g, const kl_node *n);
kiln_status kl_dnnl_grad_create(kl_dnnl_engine *eng, const kl_node *n, kl_cpu_kernel *kernel,
                                void **state, kl_err *e);
bool kl_dnnl_grad_ran_reference(const void *state);
/* oneDNN's implementation of the last run's primitive ("jit:avx2", "gemm:jit"), NULL
 * when none ran. */
const char *kl_dnnl_grad_ran_impl(const void *state);
/* The inputs a convolution gradient can read channels-last (as kl_dnnl_channels_last_slots):
 * ConvGradX dY (bit 0) and the X whose shape it takes (bit 2), ConvGradW X and dY (bits
 * 0, 1); 0 for other ranks than 3 to 5. ConvGradX can write dX so; ConvGradW's dW stays
 * plain. */
unsigned kl_dnnl_grad_channels_last_slots(const kl_graph *g, const kl_node *n);
void kl_dnnl_grad_set_channels_last(void *state, unsigned inputs, bool output);

/* QLinearConv in int8 on oneDNN's int8 convolution (dnnl_qconv.c): X uint8 or int8,
 * constant int8 weights with zero point 0, constant scales and zero points (per
 * output channel for the weights), int32 bias; same contract as the kernels above.
 * Shapes oneDNN has no implementation for run the reference kernel
 * (kl_dnnl_qconv_ran_reference); kl_dnnl_qconv_ran_impl names the implementation of
 * the last run's primitive ("jit_uni_int8:avx2", or "ref_int8:any", a slow path). */
bool kl_dnnl_qconv_supports(const kl_graph *g, const kl_node *n);
/* MatMulInteger of uint8 A and constant int8 B [K, N] (B's zero point none or 0) whose
 * weights oneDNN's integer gemm multiplies exactly on this ISA (7-bit without VNNI):
 * kl_dnnl_mmint_run computes it with dnnl_gemm_u8s8s32, bit for bit the reference (at
 * the generic level; without VNNI from AVX2 up, kiln's own product runs it instead,
 * B packed once: kl_cpu_isa_qgemm_kernel, backend.c). */
bool kl_dnnl_mmint_supports(const kl_graph *g, const kl_node *n);
int kl_dnnl_mmint_run(kl_kernel_ctx *c);
/* Where oneDNN has VNNI or AMX (avx512_core_vnni and above): such a MatMulInteger runs
 * instead on its int8 matmul primitive with B reordered once per set of shapes
 * (dnnl_gemm_u8s8s32 packs B at every call), A's zero point subtracted after it as
 * its value times each column's sum of B; the kernel "dnnl_matmul_u8s8s32", a state
 * as kl_dnnl_qconv_create's. */
bool kl_dnnl_mmint_primitive(void);
kiln_status kl_dnnl_mmint_create(kl_dnnl_engine *eng, kl_cpu_kernel *kernel, void **state,
                                 kl_err *e);
kiln_status kl_dnnl_qconv_create(kl_dnnl_engine *eng, kl_cpu_kernel *kernel, void **state,
                                 kl_err *e);
bool kl_dnnl_qconv_ran_reference(const void *state);
/* 8 where oneDNN's ISA multiplies int8 exactly (VNNI, AMX), else 7 (see
 * kl_cpu_int8_weight_bits); nodes with wider weights are not supported there. */
int kl_dnnl_qconv_weight_bits(void);
/* As kl_dnnl_set_channels_last: X (bit 0) and Y held channels-last, as oneDNN's int8
 * convolutions read and write them (between two QLinearConv nodes: no reorder). */
void kl_dnnl_qconv_set_channels_last(void *state, unsigned inputs, bool output);
const char *kl_dnnl_qconv_ran_impl(const void *state);

/* release_weights: lets a node's state free w's data (the model's constant weights,
 * which only this node reads) once it holds them reordered for oneDNN (or packed for
 * the one-row product, when the graph's shapes make its every run one row), keeping
 * that copy as the only one. False (nothing changes) when the node has no such
 * weights. */
bool kl_dnnl_allow_release(void *state, kl_value *w);
/* The bytes of the constant weights the node will hold reordered (the size of its
 * plain weights; 0 when it has none). */
size_t kl_dnnl_weights_bytes(const void *state, const kl_graph *g);
/* Bytes the node's state holds for itself: its packed weights, for oneDNN and for the
 * one-row product (the scratchpads and
 * staged tensors it needs while it runs are in the engine's workspace). */
size_t kl_dnnl_held_bytes(const void *state);

/* Whether the node's last run went to the reference kernel because oneDNN had no
 * implementation for its shapes (not for an empty operand, which needs no work). */
bool kl_dnnl_ran_reference(const void *state);
/* oneDNN's name for the implementation of the primitive that ran the node's last run
 * ("jit:avx2", "brg:avx512_core", "ref:any"), NULL when no primitive ran it (the
 * reference kernel or the one-row product did, or it has not run). Valid while the
 * state lives. */
const char *kl_dnnl_ran_impl(const void *state);
/* Whether a oneDNN implementation name is one of its slow portable loops ("ref:any",
 * "simple_nchw:any"), which kiln avoids where some layout has a fast one. */
bool kl_dnnl_impl_is_slow(const char *impl);
/* "gemv" or "gemm" when the node's last run was kiln's matrix product (run_gemv.c) of
 * one row or more; else NULL. */
const char *kl_dnnl_ran_gemv(const void *state);

/* y [m, n] = x [m, k] w^T + bias (w [n, k] row-major; bias [n] added to every row,
 * NULL: none) on oneDNN's sgemm, on the calling thread's OpenMP threads: the products of
 * many rows that kiln's tiles take slower or not at all (isa/run_rnn.c). */
kiln_status kl_dnnl_sgemm_nt(const float *x, const float *w, const float *bias, int64_t m,
                             int64_t k, int64_t n, float *y, kl_err *e);

/* Whether oneDNN is to be used. The first call lowers oneDNN's ISA to kiln's level
 * (kl_isa_level: the machine's, lowered by KILN_ISA), once per process, before any
 * primitive exists; the answer is false when that level is generic, for which oneDNN
 * has nothing (it has no portable-C level). */
bool kl_dnnl_usable(void);
/* The ISA oneDNN dispatches to, as oneDNN names it ("avx512_core_bf16"), with a note
 * when kiln could not lower it to kiln's level (the embedding program fixed it first). */
const char *kl_dnnl_isa_name(void);

#endif
