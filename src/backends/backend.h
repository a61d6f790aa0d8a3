/* How sessions choose kernels (the contract between the runtime and the CPU backend).
 *
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

#endif
