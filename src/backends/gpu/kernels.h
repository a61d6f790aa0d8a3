/* The GPU backend's kernels, op by op: which ops run on an OpenCL device, what each
 * needs, and the host code that launches its kernels (the kernels folder holds the device
 * code). A family of ops is a file src/backends/gpu/ops_<family>.c with a table of
 * kl_gpu_op; gpu/backend.c joins the tables.
 *
 * A kernel gets a kl_kernel_ctx whose tensors' data are kl_dev_buf * (device memory),
 * except the inputs its entry reads on the host (host_inputs: shape lists, scalar
 * bounds), whose data are host pointers; every output is already shaped and placed, and
 * no output is empty. Only float32 tensors reach the device, and the dtypes an entry's
 * `dtypes` names (gpu/backend.c checks the static types before an op's own supports
 * function, which then checks their combination). On the device bool and uint8 are
 * uchar (a bool 0 or 1), int32 int and int64 long. */
#ifndef KL_GPU_KERNELS_H
#define KL_GPU_KERNELS_H

#include "backends/gpu/opencl.h"
#include "ir/ir.h"

typedef struct kl_gpu_op {
  kl_op op;
  const char *name;      /* "cl:binary", for `kiln inspect` and profiles */
  unsigned host_inputs;  /* bit k: input k is read on the host, not uploaded */
  unsigned dtypes;       /* KL_GPU_DT bits: what its device tensors may be besides
                          * float32 (0: float32 only); supports then checks which */
  bool view;             /* out[0] is in[0]'s bytes under a new shape: nothing runs */
  /* Further conditions on the node (attributes, ranks), NULL when there are none. */
  bool (*supports)(const kl_graph *g, const kl_node *n);
  kiln_status (*run)(kl_cl *c, kl_kernel_ctx *kc);
} kl_gpu_op;

/* The dtypes of `dtypes` above: those the byte-moving kernels take by element size. */
#define KL_GPU_DT(t) (1u << (t))
#define KL_GPU_DT_MOVABLE (KL_GPU_DT(KL_I64) | KL_GPU_DT(KL_I32) | KL_GPU_DT(KL_BOOL) | KL_GPU_DT(KL_U8))

/* A device tensor's offset in its buffer, in elements (what the kernels add to their
 * pointer argument). */
static inline int64_t kl_gpu_elem_off(const kl_tensor *t) {
  const kl_dev_buf *b = t->data;
  return b ? (int64_t)(b->off / kl_dtype_size(t->dtype)) : 0;
}

/* Device memory a node's kernels keep from one run to the next, freed with the backend
 * (the convolution's tap-major weights: ops_nn.c). gpu/backend.c hands each node's to its
 * run as *kc->state (a kl_gpu_node_mem *). */
typedef struct kl_gpu_node_mem {
  kl_dev_buf buf;
  unsigned const_inputs; /* bit k: input k is a constant of the graph (gpu/backend.c) */
  /* what buf was made from: a source buffer's cl_mem, offset and allocation serial */
  const void *src;
  size_t src_off;
  uint64_t src_serial;
} kl_gpu_node_mem;

/* The name of op's kernels at precision TF32 ("cl:conv tf32": products on the tensor
 * cores where their shapes allow it), NULL for ops that compute float32 at every
 * precision (ops_nn.c). */
const char *kl_gpu_tf32_name(const kl_gpu_op *op);

/* The tables, each with its length. */
extern const kl_gpu_op kl_gpu_ops_elementwise[]; /* ops_elementwise.c */
extern const int kl_gpu_ops_elementwise_count;
extern const kl_gpu_op kl_gpu_ops_nn[]; /* ops_nn.c: convolution, products, pooling */
extern const int kl_gpu_ops_nn_count;
extern const kl_gpu_op kl_gpu_ops_data[]; /* ops_data.c: normalization, softmax, data movement */
extern const int kl_gpu_ops_data_count;
extern const kl_gpu_op kl_gpu_ops_attention[]; /* ops_attention.c: kiln's attention ops */
extern const int kl_gpu_ops_attention_count;

/* Activation codes of kernels/common.cl (KL_ACT_*). */
enum {
  KL_ACT_NONE, KL_ACT_RELU, KL_ACT_SIGMOID, KL_ACT_TANH, KL_ACT_LEAKY, KL_ACT_ELU,
  KL_ACT_SELU, KL_ACT_CELU, KL_ACT_HSIGMOID, KL_ACT_HSWISH, KL_ACT_MISH, KL_ACT_GELU,
  KL_ACT_GELU_TANH, KL_ACT_SOFTPLUS, KL_ACT_SOFTSIGN, KL_ACT_THRELU, KL_ACT_CLIP, KL_ACT_ABS,
  KL_ACT_NEG, KL_ACT_EXP, KL_ACT_LOG, KL_ACT_SQRT, KL_ACT_RECIP, KL_ACT_FLOOR, KL_ACT_CEIL,
  KL_ACT_ROUND, KL_ACT_SIGN, KL_ACT_ERF, KL_ACT_SIN, KL_ACT_COS, KL_ACT_SWISH,
};

/* An activation as a kernel sees it: code and two parameters. */
typedef struct kl_gpu_act {
  int code;
  float a, b;
} kl_gpu_act;

/* The activation a fused node (FusedConv, FusedGemm, ...) carries in its "activation"
 * and "activation_params" attributes ({KL_ACT_NONE} when none); false when the
 * activation is one the kernels do not have. */
bool kl_gpu_fused_act(const kl_node *n, kl_gpu_act *act);

/* Matches kl_cl_bcast of kernels/common.cl: up to three operands broadcast to an output
 * of rank `rank`, as element strides per output dim. */
typedef struct kl_cl_bcast {
  int64_t dims[KL_MAX_RANK];
  int64_t s[3][KL_MAX_RANK];
  int32_t rank, pad;
} kl_cl_bcast;
/* Fills bc for out's shape and the operands x[0..n-1] (numpy broadcasting, which
 * shape inference has checked). */
void kl_gpu_bcast(kl_cl_bcast *bc, const kl_tensor *out, const kl_tensor *const *x, int n);

/* The kernel `base` for t's element size: base itself for 4 bytes (float32, int32: the
 * kernels move their bits as uint), base_b1 for 1 (bool, uint8), base_b8 for 8 (int64).
 * Written into buf[64]. */
const char *kl_gpu_sized(const char *base, const kl_tensor *t, char *buf);

/* A 1-D launch of n work-items in groups of 256 (or the device's largest group). */
kiln_status kl_gpu_launch1(kl_cl *c, const char *name, int64_t n, const kl_cl_arg *args,
                           int n_args, kl_err *e);
#define KL_GPU_LAUNCH1(c, name, n, e, ...)                                                  \
  kl_gpu_launch1(c, name, n, (const kl_cl_arg[]){__VA_ARGS__},                          \
                 (int)(sizeof((kl_cl_arg[]){__VA_ARGS__}) / sizeof(kl_cl_arg)), e)

#endif
