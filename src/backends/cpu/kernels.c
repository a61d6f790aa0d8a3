/* kiln's own CPU kernels: which node gets which, at which ISA level (backend.h states
 * the contract with the session).
 *
 * The choice is made once per node from its op, attributes and static input types. A
 * kernel is one driver (isa/run_*.c: shapes, broadcasting, threads) bound to the
 * primitives of one level (isa/<family>_<level>.c); it runs the reference kernel for
 * the rare run-time cases its primitives do not cover, so choosing it is always safe.
 * Levels above what this build has (non-x86 hosts) run the highest level below them;
 * AMX runs the AVX512_BF16 level's kernels, and its tiles only in bf16 matrix products
 * (kl_cpu_isa_amx, dnnl.c).
 */
#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"

#include <string.h>


#if defined(__x86_64__)
#define KL_ISA_X86 1
#else
#define KL_ISA_X86 0
#endif

typedef enum kernel_kind {
  K_UNARY,
  K_BINARY,
  K_SOFTMAX,
  K_NORM,
  K_SKIP_NORM,
  K_REDUCE,
  K_POOL,
  K_GLOBAL_POOL,
  K_TRANSPOSE,
  K_CONCAT,
  K_BATCHNORM,
  K_SLICE,
  K_PAD,
  K_OPTIM,
  K_GRAD_NORM,
  K_POOL_GRAD, /* the gradient ops (run_grad.c) */
  K_BN_TRAIN,
  K_BN_GRAD,
  K_UNARY_GRAD,
  K_SUM_TO,
  K_REDUCE_GRAD,
  K_SOFTMAX_GRAD,
  K_LN_GRAD,
  K_SELECT, /* Where, And, Or, Xor (run_select.c) */
  K_QUANT,  /* QuantizeLinear, DequantizeLinear per tensor (run_quant.c) */
  K_DEQUANT,
  K_MATMUL_INT, /* MatMulInteger of 2-D B (run_quant.c) */
  K_DETECT, /* RoiAlign, ScatterElements, Expand, ConstantOfShape, Gather, GatherND,
               GatherElements, Split, NonZero, TopK, Max, Min, comparisons (run_detect.c),
               Resize (run_resize.c) */
  K_COUNT
} kernel_kind;

static const kl_isa_fns fns_generic = {"generic", &kl_eltwise_generic, NULL, &kl_rows_generic,
                                       NULL, &kl_pool_generic, &kl_copy_generic,
                                       &kl_gemv_generic, &kl_conv_generic,
                                       &kl_optim_generic, &kl_grad_generic,
                                       &kl_quant_generic};
#if KL_ISA_X86
static const kl_isa_fns fns_avx2 = {"avx2", &kl_eltwise_avx2, NULL, &kl_rows_avx2, NULL,
                                    &kl_pool_avx2, &kl_copy_avx2, &kl_gemv_avx2, &kl_conv_avx2,
                                    &kl_optim_avx2, &kl_grad_avx2, &kl_quant_avx2};
/* The AVX-512 levels transpose with AVX2's tiles (isa_fns.h says why). */
static const kl_isa_fns fns_avx512 = {"avx512", &kl_eltwise_avx512, NULL, &kl_rows_avx512,
                                      NULL, &kl_pool_avx512, &kl_copy_avx2, &kl_gemv_avx512,
                                      &kl_conv_avx2, &kl_optim_avx512, &kl_grad_avx2,
                                      &kl_quant_avx512};
static const kl_isa_fns fns_avx512_bf16 = {"avx512_bf16", &kl_eltwise_avx512,
                                           &kl_eltwise_avx512bf16, &kl_rows_avx512,
                                           &kl_rows_avx512bf16, &kl_pool_avx512,
                                           &kl_copy_avx2, &kl_gemv_avx512, &kl_conv_avx2,
                                           &kl_optim_avx512, &kl_grad_avx2,
                                           &kl_quant_avx512};
#endif

/* The kernels of one level: each driver bound to the level's primitives (a kernel is a
 * bare function pointer, so the binding is a function per driver and level). */
#define LEVEL_KERNELS(L)                                                                 \
  static int unary_##L(kl_kernel_ctx *c) { return kl_run_unary(c, &fns_##L); }          \
  static int binary_##L(kl_kernel_ctx *c) { return kl_run_binary(c, &fns_##L); }        \
  static int softmax_##L(kl_kernel_ctx *c) { return kl_run_softmax(c, &fns_##L); }      \
  static int norm_##L(kl_kernel_ctx *c) { return kl_run_norm(c, &fns_##L); }            \
  static int skip_norm_##L(kl_kernel_ctx *c) { return kl_run_skip_norm(c, &fns_##L); }  \
  static int reduce_##L(kl_kernel_ctx *c) { return kl_run_reduce(c, &fns_##L); }        \
  static int pool_##L(kl_kernel_ctx *c) { return kl_run_pool(c, &fns_##L); }            \
  static int gpool_##L(kl_kernel_ctx *c) { return kl_run_global_pool(c, &fns_##L); }    \
  static int transpose_##L(kl_kernel_ctx *c) { return kl_run_transpose(c, &fns_##L); }  \
  static int concat_##L(kl_kernel_ctx *c) { return kl_run_concat(c, &fns_##L); }        \
  static int bn_##L(kl_kernel_ctx *c) { return kl_run_batchnorm(c, &fns_##L); }         \
  static int slice_##L(kl_kernel_ctx *c) { return kl_run_slice(c, &fns_##L); }          \
  static int pad_##L(kl_kernel_ctx *c) { return kl_run_pad(c, &fns_##L); }              \
  static int optim_##L(kl_kernel_ctx *c) { return kl_run_optim(c, &fns_##L); }          \
  static int gnorm_##L(kl_kernel_ctx *c) { return kl_run_grad_norm(c, &fns_##L); }      \
  static int pool_grad_##L(kl_kernel_ctx *c) { return kl_run_pool_grad(c, &fns_##L); }   \
  static int bn_train_##L(kl_kernel_ctx *c) { return kl_run_batchnorm_train(c, &fns_##L); } \
  static int bn_grad_##L(kl_kernel_ctx *c) { return kl_run_batchnorm_grad(c, &fns_##L); } \
  static int unary_grad_##L(kl_kernel_ctx *c) { return kl_run_unary_grad(c, &fns_##L); } \
  static int sum_to_##L(kl_kernel_ctx *c) { return kl_run_sum_to(c, &fns_##L); }         \
  static int reduce_grad_##L(kl_kernel_ctx *c) { return kl_run_reduce_grad(c, &fns_##L); } \
  static int softmax_grad_##L(kl_kernel_ctx *c) { return kl_run_softmax_grad(c, &fns_##L); } \
  static int ln_grad_##L(kl_kernel_ctx *c) { return kl_run_layernorm_grad(c, &fns_##L); } \
  static int select_##L(kl_kernel_ctx *c) { return kl_run_select(c, &fns_##L); }         \
  static int quant_##L(kl_kernel_ctx *c) { return kl_run_quantize(c, &fns_##L); }        \
  static int dequant_##L(kl_kernel_ctx *c) { return kl_run_dequantize(c, &fns_##L); }    \
  static int mmint_##L(kl_kernel_ctx *c) { return kl_run_matmul_integer(c, &fns_##L); }  \
  static int detect_##L(kl_kernel_ctx *c) { return kl_run_detect(c, &fns_##L); }         \
  static int cl_##L(kl_kernel_ctx *c) {                                                  \
    kl_op op = c->node->op;                                                              \
    if (op == KL_OP_Add || op == KL_OP_Sub || op == KL_OP_Mul || op == KL_OP_Div)        \
      return kl_run_binary_cl(c, &fns_##L);                                              \
    if (op == KL_OP_Pad) return kl_run_pad_cl(c, &fns_##L);                              \
    if ((op == KL_OP_MaxPool || op == KL_OP_AveragePool) && c->in[0]->dtype == KL_F32)   \
      return kl_run_pool_nhwc(c, &fns_##L, c->in[0]->data, c->out[0]->data);             \
    return op == KL_OP_KilnBatchNormTrain || op == KL_OP_KilnBatchNormGrad ||             \
                   op == KL_OP_KilnMaxPoolGrad || op == KL_OP_KilnReduceGrad               \
               ? kl_run_grad_cl(c, &fns_##L)                                             \
               : kl_run_quantize_cl(c, &fns_##L);                                        \
  }                                                                                      \
  static const kl_kernel_fn kernels_##L[K_COUNT] = {                                     \
      unary_##L,  binary_##L, softmax_##L,   norm_##L,      skip_norm_##L,              \
      reduce_##L, pool_##L,   gpool_##L,     transpose_##L, concat_##L,                 \
      bn_##L,     slice_##L, pad_##L,       optim_##L,     gnorm_##L,                   \
      pool_grad_##L, bn_train_##L, bn_grad_##L, unary_grad_##L, sum_to_##L,            \
      reduce_grad_##L, softmax_grad_##L, ln_grad_##L, select_##L, quant_##L, dequant_##L, \
      mmint_##L, detect_##L};

LEVEL_KERNELS(generic)
#if KL_ISA_X86
LEVEL_KERNELS(avx2)
LEVEL_KERNELS(avx512)
LEVEL_KERNELS(avx512_bf16)
#endif

/* RNN, GRU and LSTM: W and R packed once (constants) or at every run. */
#define RNN_KERNELS(L)                                                                   \
  static int rnn_##L(kl_kernel_ctx *c) { return kl_run_rnn(c, &fns_##L, false); }        \
  static int rnn_const_##L(kl_kernel_ctx *c) { return kl_run_rnn(c, &fns_##L, true); }

RNN_KERNELS(generic)
#if KL_ISA_X86
RNN_KERNELS(avx2)
RNN_KERNELS(avx512)
RNN_KERNELS(avx512_bf16)
#endif

/* MatMulInteger on kiln's int8 product, B packed once (isa/run_qgemm.c). */
#define QGEMM_KERNEL(L)                                                                  \
  static int qgemm_##L(kl_kernel_ctx *c) { return kl_run_qgemm(c, &fns_##L); }          \
  static int qgemm16_##L(kl_kernel_ctx *c) { return kl_run_qgemm16(c, &fns_##L); }
QGEMM_KERNEL(generic)
#if KL_ISA_X86
QGEMM_KERNEL(avx2)
QGEMM_KERNEL(avx512)
#endif

typedef struct level {
  const kl_isa_fns *fns;
  const kl_kernel_fn *kernels;
  kl_kernel_fn cl; /* the channels-last forms (kl_cpu_isa_kernel_cl) */
  kl_kernel_fn rnn, rnn_const;
} level;

static level level_of(kl_isa isa) {
#if KL_ISA_X86
  switch (isa) {
  case KL_ISA_AVX2:
    return (level){&fns_avx2, kernels_avx2, cl_avx2, rnn_avx2, rnn_const_avx2};
  case KL_ISA_AVX512:
    return (level){&fns_avx512, kernels_avx512, cl_avx512, rnn_avx512, rnn_const_avx512};
  case KL_ISA_AVX512_BF16: case KL_ISA_AMX:
    return (level){&fns_avx512_bf16, kernels_avx512_bf16, cl_avx512_bf16,
                   rnn_avx512_bf16, rnn_const_avx512_bf16};
  default: break;
  }
#else
  (void)isa;
#endif
  return (level){&fns_generic, kernels_generic, cl_generic, rnn_generic, rnn_const_generic};
}

const kl_isa_fns *kl_cpu_isa_fns(kl_isa isa) { return level_of(isa).fns; }

const kl_amx_fns *kl_cpu_isa_amx(kl_isa isa) {
#if KL_ISA_X86
  return isa == KL_ISA_AMX ? &kl_amx_bf16 : NULL;
#else
  (void)isa;
  return NULL;
#endif
}

/* ---- which kernel a node gets ---- */

static kl_dtype dtype_of(const kl_type *const *in, int n_in, int i) {
  return i < n_in && in[i] ? in[i]->dtype : KL_UNDEFINED;
}

/* float32, or bfloat16 where the level has its forms */
static bool float_ok(const kl_isa_fns *f, kl_dtype t) {
  return t == KL_F32 || (t == KL_BF16 && f->elt_bf16);
}

/* Inputs from..to (those present) all have dtype t. */
static bool same_dtype(const kl_type *const *in, int n_in, int from, int to, kl_dtype t) {
  for (int i = from; i < n_in && i <= to; i++)
    if (in[i] && in[i]->dtype != t) return false;
  return true;
}

/* Softmax's axis is the last one (or the rank is not known yet: checked at run time). */
static bool last_axis(const kl_node *n, const kl_type *x) {
  if (x->rank < 0) return true;
  int64_t a = kl_attr_int(n, "axis", -1);
  return a == -1 || a == x->rank - 1;
}

static bool pool_shape_ok(const kl_node *n, const kl_type *x) {
  return n->n_out == 1 && (x->rank < 0 || x->rank == 3 || x->rank == 4);
}

static bool movable(kl_dtype t) {
  size_t es = kl_dtype_size(t);
  return es == 1 || es == 2 || es == 4 || es == 8;
}

static bool index_dtype(kl_dtype t) { return t == KL_I64 || t == KL_I32; }

/* The detection ops' kernels (run_detect.c): the dtypes they take, else K_COUNT. */
static kernel_kind detect_kind(const kl_node *n, const kl_type *const *in, int n_in) {
  kl_dtype t = dtype_of(in, n_in, 0);
  switch (n->op) {
  case KL_OP_RoiAlign:
    return t == KL_F32 && dtype_of(in, n_in, 1) == KL_F32 && index_dtype(dtype_of(in, n_in, 2))
               ? K_DETECT
               : K_COUNT;
  case KL_OP_ScatterElements:
    return movable(t) && index_dtype(dtype_of(in, n_in, 1)) && dtype_of(in, n_in, 2) == t &&
                   strcmp(kl_attr_string(n, "reduction", "none"), "none") == 0
               ? K_DETECT
               : K_COUNT;
  case KL_OP_Expand: return movable(t) ? K_DETECT : K_COUNT;
  case KL_OP_Resize: return t == KL_F32 ? K_DETECT : K_COUNT;
  case KL_OP_Max: case KL_OP_Min:
    return n_in == 2 && (t == KL_F32 || t == KL_I32 || t == KL_I64) && dtype_of(in, n_in, 1) == t
               ? K_DETECT
               : K_COUNT;
  case KL_OP_NonZero:
    return t == KL_BOOL || t == KL_U8 || t == KL_I8 || t == KL_F32 || t == KL_I32 || t == KL_I64
               ? K_DETECT
               : K_COUNT;
  case KL_OP_ConstantOfShape: return K_DETECT; /* the value's dtype is checked at run time */
  case KL_OP_TopK: return t == KL_F32 && n->n_out == 2 ? K_DETECT : K_COUNT;
  case KL_OP_Gather: case KL_OP_GatherND: case KL_OP_GatherElements:
    return movable(t) && index_dtype(dtype_of(in, n_in, 1)) ? K_DETECT : K_COUNT;
  case KL_OP_Split: return movable(t) ? K_DETECT : K_COUNT;
  case KL_OP_Equal: case KL_OP_Less: case KL_OP_Greater: case KL_OP_LessOrEqual:
  case KL_OP_GreaterOrEqual:
    return (t == KL_F32 || t == KL_F64 || t == KL_I32 || t == KL_I64) &&
                   dtype_of(in, n_in, 1) == t
               ? K_DETECT
               : K_COUNT;
  default: return K_COUNT;
  }
}

/* The kind of kernel for node n, or K_COUNT for none. */
static kernel_kind kind_of(const kl_node *n, const kl_type *const *in, int n_in,
                           const kl_isa_fns *f) {
  kl_dtype t = dtype_of(in, n_in, 0);
  kl_act act;
  if (kl_isa_act(n, &act))
    return float_ok(f, t) && same_dtype(in, n_in, 1, 2, t) ? K_UNARY : K_COUNT;
  switch (n->op) {
  case KL_OP_Add: case KL_OP_Sub: case KL_OP_Mul: case KL_OP_Div:
    return float_ok(f, t) && same_dtype(in, n_in, 1, 1, t) ? K_BINARY : K_COUNT;
  case KL_OP_Where: /* Cond bool, X and Y of one dtype of 1, 2, 4 or 8 bytes */
    return t == KL_BOOL && n_in == 3 && in[1] && in[2] && in[1]->dtype == in[2]->dtype &&
                   in[1]->dtype != KL_UNDEFINED && in[1]->dtype != KL_STRING
               ? K_SELECT
               : K_COUNT;
  case KL_OP_And: case KL_OP_Or: case KL_OP_Xor:
    return t == KL_BOOL && same_dtype(in, n_in, 1, 1, t) ? K_SELECT : K_COUNT;
  case KL_OP_Softmax: case KL_OP_LogSoftmax:
    return float_ok(f, t) && last_axis(n, in[0]) ? K_SOFTMAX : K_COUNT;
  case KL_OP_LayerNormalization: case KL_OP_RMSNormalization:
    return float_ok(f, t) && same_dtype(in, n_in, 1, 2, t) ? K_NORM : K_COUNT;
  case KL_OP_InstanceNormalization:
    return t == KL_F32 && n_in == 3 && same_dtype(in, n_in, 1, 2, t) ? K_NORM : K_COUNT;
  case KL_OP_KilnSkipLayerNorm:
    return float_ok(f, t) && same_dtype(in, n_in, 1, 3, t) ? K_SKIP_NORM : K_COUNT;
  case KL_OP_ReduceSum: case KL_OP_ReduceMean: return t == KL_F32 ? K_REDUCE : K_COUNT;
  case KL_OP_MaxPool: case KL_OP_AveragePool: /* MaxPool of 8-bit codes too (fold_qdq) */
  case KL_OP_KilnQLinearAveragePool:
    return (n->op == KL_OP_KilnQLinearAveragePool
                ? t == KL_U8 || t == KL_I8
                : t == KL_F32 || (n->op == KL_OP_MaxPool && (t == KL_U8 || t == KL_I8))) &&
                   pool_shape_ok(n, in[0])
               ? K_POOL
               : K_COUNT;
  case KL_OP_GlobalAveragePool: return t == KL_F32 ? K_GLOBAL_POOL : K_COUNT;
  case KL_OP_Transpose: return movable(t) ? K_TRANSPOSE : K_COUNT;
  case KL_OP_Concat: return movable(t) && same_dtype(in, n_in, 1, n_in - 1, t) ? K_CONCAT
                                                                               : K_COUNT;
  case KL_OP_BatchNormalization: /* inference form: one output, float32 parameters */
    return t == KL_F32 && n_in == 5 && n->n_out == 1 && same_dtype(in, n_in, 1, 4, t) &&
                   kl_attr_int(n, "training_mode", 0) == 0
               ? K_BATCHNORM
               : K_COUNT;
  case KL_OP_Slice: return movable(t) ? K_SLICE : K_COUNT;
  case KL_OP_Pad:
    return movable(t) && strcmp(kl_attr_string(n, "mode", "constant"), "constant") == 0
               ? K_PAD
               : K_COUNT;
  /* the optimizers: the driver takes what the reference takes (the same plan) */
  case KL_OP_KilnSGD: case KL_OP_KilnAdagrad: case KL_OP_KilnAdam: case KL_OP_KilnLamb:
  case KL_OP_KilnLars:
    return K_OPTIM;
  case KL_OP_KilnGradNorm: return K_GRAD_NORM;
  /* float32 <-> 8-bit with a float32 scale; the driver takes per-tensor ones */
  case KL_OP_QuantizeLinear:
    return t == KL_F32 && dtype_of(in, n_in, 1) == KL_F32 ? K_QUANT : K_COUNT;
  case KL_OP_MatMulInteger:
  case KL_OP_KilnMatMulIntegerToFloat: return t == KL_U8 || t == KL_I8 ? K_MATMUL_INT : K_COUNT;
  case KL_OP_DequantizeLinear:
    return (t == KL_U8 || t == KL_I8) && dtype_of(in, n_in, 1) == KL_F32 ? K_DEQUANT : K_COUNT;
  case KL_OP_DynamicQuantizeLinear: /* float32 to uint8 (run_quant.c) */
    return t == KL_F32 ? K_QUANT : K_COUNT;
  case KL_OP_Cast: { /* int32 to float32: MatMulInteger's sums; int64 to float32 or bool:
                       token ids and attention masks; bf16 to float32: a bf16 training
                       step's weights (run_quant.c) */
    int64_t to = kl_attr_int(n, "to", 0);
    bool fits = t == KL_I32 || t == KL_I64 ? to == KL_F32 || to == KL_BOOL
                                           : t == KL_BF16 && to == KL_F32;
    return fits && !kl_node_attr(n, "round_mode") ? K_QUANT : K_COUNT;
  }
  case KL_OP_KilnQLinearAdd: case KL_OP_KilnQLinearMul: case KL_OP_KilnQLinearLookup:
  case KL_OP_KilnQLinearGlobalAveragePool:
    /* the quantize driver (run_quant.c) takes them */
    return t == KL_U8 || t == KL_I8 ? K_QUANT : K_COUNT;
  default: return detect_kind(n, in, n_in);
  }
}

/* The gradient ops' kernels (run_grad.c), float32 at every level, or K_COUNT. */
static kernel_kind grad_kind(const kl_node *n, kl_dtype t) {
  if (t != KL_F32) return K_COUNT;
  switch (n->op) {
  case KL_OP_KilnMaxPoolGrad: case KL_OP_KilnAveragePoolGrad: return K_POOL_GRAD;
  case KL_OP_KilnBatchNormTrain: return K_BN_TRAIN;
  case KL_OP_KilnBatchNormGrad: return K_BN_GRAD;
  case KL_OP_KilnUnaryGrad: return kl_grad_unary_fast(n) ? K_UNARY_GRAD : K_COUNT;
  case KL_OP_KilnSumTo: return K_SUM_TO;
  case KL_OP_KilnReduceGrad: return K_REDUCE_GRAD;
  case KL_OP_KilnSoftmaxGrad: return K_SOFTMAX_GRAD;
  case KL_OP_KilnLayerNormGrad: return K_LN_GRAD;
  default: return K_COUNT;
  }
}

kl_cpu_kernel kl_cpu_isa_kernel(const kl_node *n, const kl_type *const *in, int n_in,
                                kl_isa isa) {
  kl_cpu_kernel k = {NULL, NULL, NULL};
  if (!n || n_in < 1 || !in || !in[0]) return k;
  level l = level_of(isa);
  kernel_kind kind = grad_kind(n, in[0]->dtype);
  if (kind == K_COUNT) kind = kind_of(n, in, n_in, l.fns);
  if (kind == K_COUNT) return k;
  k.name = l.fns->name;
  k.run = l.kernels[kind];
  return k;
}

kl_cpu_kernel kl_cpu_isa_rnn_kernel(const kl_node *n, const kl_type *const *in, int n_in,
                                    bool const_weights, kl_isa isa) {
  kl_cpu_kernel k = {NULL, NULL, NULL};
  if (!n || !in || !kl_rnn_fast(n, in, n_in)) return k;
  level l = level_of(isa);
  return (kl_cpu_kernel){l.fns->name, const_weights ? l.rnn_const : l.rnn, kl_rnn_state_free};
}

kl_cpu_kernel kl_cpu_isa_qgemm_kernel(kl_isa isa) {
  kl_cpu_kernel k = {"kiln_qgemm:generic", qgemm_generic, kl_qgemm_free};
#if KL_ISA_X86
  if (isa == KL_ISA_AVX2) k = (kl_cpu_kernel){"kiln_qgemm:avx2", qgemm_avx2, kl_qgemm_free};
  if (isa >= KL_ISA_AVX512) k = (kl_cpu_kernel){"kiln_qgemm:avx512", qgemm_avx512, kl_qgemm_free};
#else
  (void)isa;
#endif
  return k;
}

kl_cpu_kernel kl_cpu_isa_qgemm16_kernel(kl_isa isa) {
  kl_cpu_kernel k = {"kiln_qgemm16:generic", qgemm16_generic, kl_qgemm_free};
#if KL_ISA_X86
  if (isa == KL_ISA_AVX2) k = (kl_cpu_kernel){"kiln_qgemm16:avx2", qgemm16_avx2, kl_qgemm_free};
  if (isa >= KL_ISA_AVX512)
    k = (kl_cpu_kernel){"kiln_qgemm16:avx512", qgemm16_avx512, kl_qgemm_free};
#else
  (void)isa;
#endif
  return k;
}

size_t kl_cpu_isa_held_bytes(const kl_cpu_kernel *k, const void *state) {
  if (k->release == kl_qgemm_free) return kl_qgemm_held_bytes(state);
  return k->release == kl_rnn_state_free ? kl_rnn_held_bytes(state) : 0;
}

unsigned kl_cpu_isa_inplace(const kl_node *n) {
  kl_act act;
  if (kl_isa_act(n, &act)) return 1u; /* Clip's bounds are scalars: never Y's buffer */
  switch (n->op) {
  case KL_OP_Add: case KL_OP_Sub: case KL_OP_Mul: case KL_OP_Div:
  case KL_OP_KilnSkipLayerNorm: /* Y takes X + Skip, formed from both */
    return 3u;
  case KL_OP_Softmax: case KL_OP_LogSoftmax: case KL_OP_LayerNormalization:
  case KL_OP_RMSNormalization: case KL_OP_BatchNormalization: case KL_OP_InstanceNormalization:
  case KL_OP_ScatterElements: /* Y is Data updated: no copy when it takes Data's buffer */
    return 1u;
  default: return 0u; /* Transpose keeps its shape for square perms, yet moves data */
  }
}

/* ---- channels-last tensors (isa.h) ---- */

/* Static dims, all known and equal. */
static bool same_static(const kl_type *a, const kl_type *b) {
  if (!a || !b || a->rank != b->rank || a->rank < 0) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i].size < 0 || a->dims[i].size != b->dims[i].size) return false;
  return true;
}

/* Whether inputs [from, to) that are present are float32 (what the channels-last
 * gradient kernels take; they cannot fall back to the reference). */
static bool f32_inputs(const kl_type *const *in, int n_in, int from, int to) {
  for (int k = from; k < to && k < n_in; k++)
    if (in[k] && in[k]->dtype != KL_F32) return false;
  return true;
}

bool kl_cpu_single_value(const kl_type *b, const kl_type *y) {
  if (!b || b->rank < 0 || b->rank > y->rank) return false;
  for (int i = 0; i < b->rank; i++)
    if (b->dims[i].size != 1) return false;
  return true;
}

/* b is [N, C, 1...] against y [N, C, S...] (isa.h). */
bool kl_cpu_per_channel(const kl_type *b, const kl_type *y) {
  if (!b || b->rank != y->rank || b->rank < 3) return false;
  for (int i = 0; i < b->rank; i++)
    if (i < 2 ? !kl_dim_equal(b->dims[i], y->dims[i]) /* a symbolic batch: the same one */
              : b->dims[i].size != 1)
      return false;
  return true;
}

/* The float32 ops whose kiln kernels read and write channels-last tensors: elementwise
 * ones over operands of Y's dims (the layout does not matter to them) and a training
 * step's BatchNormTrain, BatchNormGrad, MaxPoolGrad and a global pooling's ReduceGrad
 * (kl_cpu_isa_kernel_cl's kernels). */
static kl_isa_cl float_layout(const kl_node *n, const kl_type *const *in, int n_in,
                              const kl_type *y, unsigned *slots) {
  bool grad = n->op == KL_OP_KilnBatchNormTrain || n->op == KL_OP_KilnBatchNormGrad ||
              n->op == KL_OP_KilnMaxPoolGrad || n->op == KL_OP_KilnReduceGrad;
  if (grad && !f32_inputs(in, n_in, 0, 5)) return KL_ISA_CL_NONE;
  kl_act act; /* an activation on kiln's unary kernel: elementwise, either layout */
  if (kl_isa_act(n, &act)) {
    *slots = in[0] && in[0]->dtype == KL_F32 && kl_type_same_dims(in[0], y) ? 1u : 0u;
    return *slots ? KL_ISA_CL_SAME : KL_ISA_CL_NONE;
  }
  switch (n->op) {
  case KL_OP_Add: case KL_OP_Sub: case KL_OP_Mul: case KL_OP_Div:
    /* one operand of Y's dims, the other one value per image and channel (a
     * squeeze-and-excitation block's scale): kl_run_binary_cl */
    if (n->op != KL_OP_KilnUnaryGrad && n_in == 2 && in[0] && in[1] && in[0]->dtype == KL_F32 &&
        in[1]->dtype == KL_F32) {
      if (kl_type_same_dims(in[0], y) && kl_cpu_per_channel(in[1], y)) *slots = 1u;
      else if (kl_type_same_dims(in[1], y) && kl_cpu_per_channel(in[0], y)) *slots = 2u;
      if (*slots) return KL_ISA_CL_CHANNEL;
      /* one operand of Y's dims and one value (a scalar gain): the plain kernel, whose
       * broadcast of that value is the same in either layout */
      if (kl_type_same_dims(in[0], y) && kl_cpu_single_value(in[1], y)) *slots = 1u;
      else if (kl_type_same_dims(in[1], y) && kl_cpu_single_value(in[0], y)) *slots = 2u;
      if (*slots) return KL_ISA_CL_SAME;
    }
    if (n->op != KL_OP_Add) return KL_ISA_CL_NONE;
    /* fall through */
  case KL_OP_KilnUnaryGrad: /* Add (A, B); UnaryGrad (dY, X, Y?) */
    for (int k = 0; k < n_in && k < 3; k++) {
      if (!in[k]) continue;
      if (!kl_type_same_dims(in[k], y)) return *slots = 0, KL_ISA_CL_NONE;
      *slots |= 1u << k;
    }
    return *slots ? KL_ISA_CL_SAME : KL_ISA_CL_NONE;
  case KL_OP_MaxPool: case KL_OP_AveragePool: /* kl_run_pool_nhwc: those oneDNN declines
                                              * (AveragePool's ceil_mode, dilations) */
    if (in[0]->rank != y->rank || y->rank > 4 || (n->n_out > 1 && n->out[1] >= 0))
      return KL_ISA_CL_NONE;
    *slots = 1u;
    return KL_ISA_CL_WHOLE;
  case KL_OP_Pad: { /* constant mode, X's dtype (kl_run_pad_cl) */
    const char *mode = kl_attr_string(n, "mode", "constant");
    bool ok = strcmp(mode, "constant") == 0 && in[0]->rank == y->rank &&
              (n_in < 3 || !in[2] || in[2]->dtype == KL_F32);
    *slots = ok ? 1u : 0u;
    return *slots ? KL_ISA_CL_WHOLE : KL_ISA_CL_NONE;
  }
  case KL_OP_KilnBatchNormTrain: /* X; Y is out[0], the running statistics per channel */
    *slots = kl_type_same_dims(in[0], y) ? 1u : 0u;
    return *slots ? KL_ISA_CL_WHOLE : KL_ISA_CL_NONE;
  case KL_OP_KilnBatchNormGrad: /* dY and X; dX is out[0], dScale and dB per channel */
    *slots = n_in >= 2 && kl_type_same_dims(in[0], y) && kl_type_same_dims(in[1], y) ? 3u : 0u;
    return *slots ? KL_ISA_CL_WHOLE : KL_ISA_CL_NONE;
  case KL_OP_KilnMaxPoolGrad: /* dY and X; dX (X's dims) is out[0] */
    *slots = n_in == 2 && in[0] && in[0]->rank == y->rank && kl_type_same_dims(in[1], y) &&
                     y->rank <= 5
                 ? 3u
                 : 0u;
    return *slots ? KL_ISA_CL_WHOLE : KL_ISA_CL_NONE;
  case KL_OP_KilnReduceGrad: { /* over exactly the spatial axes: XLike; dY [N, C, 1...] */
    const int64_t *axes;
    int n_axes = kl_attr_ints(n, "axes", &axes);
    bool spatial = n_in == 2 && n_axes == y->rank - 2 && kl_type_same_dims(in[1], y);
    for (int k = 0; spatial && k < n_axes; k++) {
      int64_t ax = axes[k] < 0 ? axes[k] + y->rank : axes[k];
      spatial = ax == k + 2;
    }
    *slots = spatial ? 2u : 0u;
    return *slots ? KL_ISA_CL_WHOLE : KL_ISA_CL_NONE;
  }
  default: return KL_ISA_CL_NONE;
  }
}

kl_isa_cl kl_cpu_isa_layout(const kl_node *n, const kl_type *const *in, int n_in,
                            const kl_type *y, unsigned *slots) {
  *slots = 0;
  const kl_type *a = n_in > 0 ? in[0] : NULL, *b = n_in > 3 ? in[3] : NULL;
  if (!a || !y || y->rank < 3 || y->rank > 5) return KL_ISA_CL_NONE;
  if ((n->op == KL_OP_QuantizeLinear || n->op == KL_OP_DequantizeLinear) &&
      kl_type_same_dims(a, y) && n_in > 1 && in[1] && kl_cpu_single_value(in[1], y) &&
      (n_in < 3 || !in[2] || kl_cpu_single_value(in[2], y))) {
    *slots = 1u; /* per tensor: elementwise, either layout (between the float32
                    convolutions a QLinearConv of wide weights becomes: fold_qdq.c) */
    return KL_ISA_CL_SAME;
  }
  if (a->dtype == KL_F32 && y->dtype == KL_F32) return float_layout(n, in, n_in, y, slots);
  if (a->dtype != KL_U8 && a->dtype != KL_I8) return KL_ISA_CL_NONE;
  switch (n->op) {
  case KL_OP_KilnQLinearLookup:
    *slots = 1u;
    return KL_ISA_CL_SAME;
  case KL_OP_KilnQLinearAdd: case KL_OP_KilnQLinearMul:
    if (same_static(a, y) && same_static(b, y)) {
      *slots = 1u | 1u << 3;
      return KL_ISA_CL_SAME;
    }
    if (same_static(a, y) && kl_cpu_per_channel(b, y)) *slots = 1u;
    else if (same_static(b, y) && kl_cpu_per_channel(a, y)) *slots = 1u << 3;
    return *slots ? KL_ISA_CL_CHANNEL : KL_ISA_CL_NONE;
  case KL_OP_KilnQLinearGlobalAveragePool:
    *slots = a->rank == y->rank ? 1u : 0u;
    return *slots ? KL_ISA_CL_READ : KL_ISA_CL_NONE;
  case KL_OP_MaxPool: /* run_pool8's */
    if (a->rank != y->rank || y->rank > 4 || y->dtype != a->dtype ||
        (n->n_out > 1 && n->out[1] >= 0))
      return KL_ISA_CL_NONE;
    *slots = 1u;
    return KL_ISA_CL_WHOLE;
  case KL_OP_Concat: {
    int64_t axis = kl_attr_int(n, "axis", 0);
    if (n->n_in > 32 || y->dtype != a->dtype || (axis < 0 ? axis + y->rank : axis) != 1)
      return KL_ISA_CL_NONE;
    *slots = n->n_in == 32 ? ~0u : (1u << n->n_in) - 1;
    return KL_ISA_CL_WHOLE;
  }
  default: return KL_ISA_CL_NONE;
  }
}

/* Named apart from the plain kernels, so that a profile shows the layout. */
kl_cpu_kernel kl_cpu_isa_kernel_cl(const kl_node *n, kl_isa isa) {
  (void)n;
  level l = level_of(isa);
  const char *name = l.fns == &fns_generic ? "generic channels-last" : "avx2 channels-last";
#if KL_ISA_X86
  if (l.fns == &fns_avx512) name = "avx512 channels-last";
  if (l.fns == &fns_avx512_bf16) name = "avx512_bf16 channels-last";
#endif
  return (kl_cpu_kernel){name, l.cl, NULL};
}
