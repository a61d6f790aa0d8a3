/* The backend interface, and how sessions choose CPU kernels.
 *
 * A backend is a table of functions (kl_backend_iface) plus its context, as ggml's
 * backend interface is: the session places every node on a backend that supports it
 * (the device the user chose, else the CPU, which runs every op), moves tensors at the
 * boundaries with the device's upload/download, and runs each node through execute.
 * The CPU backend (cpu/backend.c: kl_cpu_backend) works on host memory and leaves the
 * buffer slots NULL; a device backend (gpu/backend.c: OpenCL) hands out kl_dev_buf
 * ranges of its memory, and its kernels see, as each tensor's data, a kl_dev_buf *.
 *
 * CPU kernels:
 * At session creation every node gets one kernel, chosen once from the node's op,
 * attributes and static input types: a oneDNN kernel (src/backends/cpu/dnnl.c), else a
 * kiln kernel for the machine's ISA level (src/backends/cpu/kernels.c and isa/), else
 * the op's portable reference kernel from ops.def. Every chosen kernel has the
 * reference kernel as its oracle in the tests.
 *
 * A kernel that needs per-node state (a oneDNN primitive, prepacked weights) keeps it
 * in *ctx->state, created on the first call for a given input shape and reused while
 * the shapes stay the same; the session frees it with the kernel's release function. */
#ifndef KL_BACKEND_H
#define KL_BACKEND_H

#include "ir/ir.h"

/* ISA levels, lowest to highest; KILN_ISA lowers the choice. */
typedef enum kl_isa {
  KL_ISA_GENERIC = 0,
  KL_ISA_AVX2,        /* AVX2 + FMA */
  KL_ISA_AVX512,      /* AVX-512 F/BW/DQ/VL */
  KL_ISA_AVX512_BF16, /* + AVX512_BF16 */
  KL_ISA_AMX,         /* + AMX-TILE/BF16/INT8, with tile permission granted */
  KL_ISA_COUNT
} kl_isa;

typedef struct kl_cpu_kernel {
  const char *name;      /* "ref", "avx512", "dnnl_conv", ... for `kiln inspect` */
  kl_kernel_fn run;
  void (*release)(void *state); /* NULL when the kernel keeps no state */
} kl_cpu_kernel;

/* The ISA-level kernel for a node, or a kernel with run == NULL when kiln has none
 * faster than the reference for it (src/backends/cpu/kernels.c). in[i] are the
 * node's static input types (NULL for absent inputs). */
kl_cpu_kernel kl_cpu_isa_kernel(const kl_node *n, const kl_type *const *in, int n_in,
                                kl_isa isa);
/* The same for RNN, GRU and LSTM (isa/run_rnn.c), which packs W and R once per session
 * when const_weights (both are constants of the graph), else at every run. */
kl_cpu_kernel kl_cpu_isa_rnn_kernel(const kl_node *n, const kl_type *const *in, int n_in,
                                    bool const_weights, kl_isa isa);
/* MatMulInteger of uint8 A and constant int8 B of 7-bit values on kiln's own int8
 * product at level isa (isa/run_qgemm.c), B packed once per session. */
kl_cpu_kernel kl_cpu_isa_qgemm_kernel(kl_isa isa);
/* The same product for 8-bit B (either kind, less its zero points) of which few pairs of
 * weights are past what vpmaddubsw multiplies exactly: those weights' remainders are
 * added to the sums apart (kl_qgemm16_fits below holds too, and A is uint8). */
bool kl_qgemm_split_fits(const kl_graph *g, const kl_node *n);
/* Its wide form (isa/run_qgemm.c): MatMulInteger (and kiln's MatMulIntegerToFloat) of
 * any 8-bit A and constant 8-bit B [K, N] (K < 33000), A's zero point one value, B's one
 * or one per column, exact for weights past 7 bits, where kiln_qgemm's vpmaddubsw would
 * saturate: both operands less their zero points as int16, vpmaddwd. */
bool kl_qgemm16_fits(const kl_graph *g, const kl_node *n);
kl_cpu_kernel kl_cpu_isa_qgemm16_kernel(kl_isa isa);
/* The bytes the state of a kernel from the three above holds (0 for those without one). */
size_t kl_cpu_isa_held_bytes(const kl_cpu_kernel *k, const void *state);

/* A range of a device's memory: what a device tensor's data points at. */
typedef struct kl_dev_buf {
  void *mem;       /* the device's buffer (a cl_mem); NULL for an empty tensor */
  size_t off;      /* bytes from mem's start (a multiple of 512) */
  size_t size;     /* bytes the range holds */
  void *priv;      /* the allocator's (kl_dev_block) */
  uint64_t serial;
} kl_dev_buf;

typedef struct kl_backend kl_backend;

typedef struct kl_backend_iface {
  const char *name; /* "cpu", "opencl" */
  /* Whether node `node` of g can run here, judged from its op, attributes and the
   * graph's static types (symbolic dims allowed). The backend must then run it for any
   * concrete shapes those types admit, or fail the run with a message. */
  bool (*supports_node)(kl_backend *b, const kl_graph *g, int node);
  /* Runs node kc->node (index `node` of the graph the backend was made for) on kc's
   * tensors, every output already shaped and placed; may only queue the work. */
  kiln_status (*execute)(kl_backend *b, int node, kl_kernel_ctx *kc);
  /* What the chosen kernel of a supported node needs: bit k of *host_inputs set when
   * input k is read on the host (a shape list, a scalar bound: kept there, not copied
   * to the device); *view when out[0] is in[0]'s bytes under a new shape, so that
   * nothing runs. NULL for the CPU (the CPU plan says it: cpu_backend.h). */
  void (*node_io)(kl_backend *b, const kl_graph *g, int node, unsigned *host_inputs,
                  bool *view);
  /* The kernel that ran node i last ("ref", "dnnl_conv", "cl:conv2d", ...). */
  const char *(*kernel_name)(const kl_backend *b, int node);
  /* Device memory; NULL for a backend working on host memory. */
  kiln_status (*buffer_alloc)(kl_backend *b, size_t bytes, kl_dev_buf *out, kl_err *e);
  void (*buffer_free)(kl_backend *b, kl_dev_buf *buf); /* zeroes *buf */
  kiln_status (*upload)(kl_backend *b, const kl_dev_buf *dst, const void *src, size_t n,
                        kl_err *e);
  /* Waits for the queued work that writes src, then copies. */
  kiln_status (*download)(kl_backend *b, void *dst, const kl_dev_buf *src, size_t n,
                          kl_err *e);
  /* Profiling: while on, the backend times its kernels on the device, and node_ms
   * returns the device time of what ran since its last call (after waiting for it).
   * NULL for a backend whose kernels the host times itself (the CPU). */
  void (*set_profiling)(kl_backend *b, bool on);
  double (*node_ms)(kl_backend *b);
  /* Waits for everything queued; NULL when execute is synchronous. */
  kiln_status (*synchronize)(kl_backend *b, kl_err *e);
  /* "pthread-haswell-AMD EPYC (Portable Computing Language, OpenCL 3.0 PoCL 3.1)" */
  const char *(*device_name)(const kl_backend *b);
  void (*release)(kl_backend *b); /* frees the backend and everything it holds */
} kl_backend_iface;

struct kl_backend {
  const kl_backend_iface *iface;
  void *ctx;
};

#endif
