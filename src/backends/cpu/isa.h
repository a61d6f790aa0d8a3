/* Which instruction-set level kiln's own CPU kernels run at.
 *
 * The CPU's features come from cpuid, and the state the OS saves on a context switch
 * from xgetbv (XCR0): a CPU with AVX-512 under an OS that does not save the ZMM
 * registers cannot use them. AMX also needs Linux to grant the process permission to
 * use tile data (arch_prctl ARCH_REQ_XCOMP_PERM), which is asked for once, and only
 * when the AMX level could be chosen.
 *
 * The level is the highest one the CPU and OS support, lowered by the environment
 * variable KILN_ISA=generic|avx2|avx512|avx512_bf16|amx; KILN_ISA never raises it.
 * Detection runs once per process (pthread_once); it is the only global state kiln's
 * CPU kernels keep, and it never changes afterwards.
 */
#ifndef KL_CPU_ISA_H
#define KL_CPU_ISA_H

#include "backends/backend.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct kl_cpu_features {
  char vendor[13]; /* "GenuineIntel", "AuthenticAMD"; "" when not x86 */
  char brand[49];  /* the processor's name string, "" when it has none */
  bool avx, avx2, fma, f16c;
  bool avx512f, avx512bw, avx512dq, avx512vl, avx512_bf16;
  bool avx512_vbmi; /* byte permutes (vpermi2b): not a level of its own; the AVX-512
                     * levels' table lookup takes them where the CPU has them */
  bool amx_tile, amx_bf16, amx_int8;
  bool os_avx;    /* XCR0 has the SSE and AVX (YMM) state */
  bool os_avx512; /* ... and the opmask and ZMM state */
  bool os_amx;    /* ... and the tile config and tile data state */
  bool amx_permitted; /* Linux granted XTILEDATA (asked only when AMX could be used) */
} kl_cpu_features;

/* The features of this CPU, detected once; never NULL. */
const kl_cpu_features *kl_isa_features(void);

/* The level chosen for this process, and one line saying why it is that level and not
 * the next one up (for `kiln info`). Both are detected once and never change. */
kl_isa kl_isa_level(void);
const char *kl_isa_reason(void);

/* The highest level the features allow, ignoring KILN_ISA (pure). */
kl_isa kl_isa_supported(const kl_cpu_features *f);

/* The level for features f under KILN_ISA value env (NULL when it is not set), and
 * why, into why[len]. Pure: detection and the AMX permission request happen before. */
kl_isa kl_isa_choose(const kl_cpu_features *f, const char *env, char *why, size_t len);

/* "generic", "avx2", "avx512", "avx512_bf16", "amx"; "?" out of range. */
const char *kl_isa_level_name(kl_isa isa);

/* The level named s (as KILN_ISA spells it); false when s names none. */
bool kl_isa_parse(const char *s, kl_isa *out);

/* The features as a space-separated list ("avx2 fma avx512f ..."), into buf[len];
 * returns buf. */
const char *kl_isa_feature_list(const kl_cpu_features *f, char *buf, size_t len);

/* For the memory plan (src/backends/cpu/kernels.c): bit k is set when the kernel that
 * kl_cpu_isa_kernel gives node n may write out[0] into input k's buffer, which it then
 * reads element by element before writing there (the elementwise ops, Softmax,
 * LayerNormalization and SkipLayerNorm). Only for inputs of out[0]'s shape and dtype;
 * 0 for every other op. */
unsigned kl_cpu_isa_inplace(const kl_node *n);

/* For the layouts the CPU plan chooses (backend.c holds activations [N, C, S...] as
 * [N, S..., C] between oneDNN convolutions): how kiln's kernel for node n (of the
 * level's kl_cpu_isa_kernel) reads and writes tensors held so.
 *   KL_ISA_CL_NONE     plain tensors only
 *   KL_ISA_CL_SAME     elementwise on operands of Y's shape (QLinearLookup, QLinearAdd
 *                      and QLinearMul of equal shapes): the inputs in *slots and Y in
 *                      one layout, either
 *   KL_ISA_CL_CHANNEL  QLinearAdd and QLinearMul of an operand of Y's shape (in *slots)
 *                      and one of one value per image and channel ([N, C, 1...], the same
 *                      bytes in both layouts): the first and Y in one layout;
 *                      channels-last runs kl_cpu_isa_kernel_cl's kernel
 *   KL_ISA_CL_READ     QLinearGlobalAveragePool: X (in *slots) in either layout, Y
 *                      [N, C, 1...]; channels-last runs kl_cpu_isa_kernel_cl's kernel
 *   KL_ISA_CL_WHOLE    MaxPool of 8-bit codes (rank 3 or 4, no indices) and Concat of
 *                      them along dim 1: every input in *slots and Y in one layout;
 *                      channels-last runs kl_cpu_isa_kernel_cl's kernel
 * Float32 too: the activations of kiln's unary kernel (Relu, Sigmoid, Tanh, Swish,
 * Gelu, Clip, ...: kl_isa_act), Add and UnaryGrad over operands of Y's dims, and Add, Sub,
 * Mul and Div of one operand of Y's dims by a single value (SAME), a
 * training step's BatchNormTrain (X) and BatchNormGrad (dY, X) with out[0] (WHOLE: per
 * channel, the running statistics and dScale, dB the same in either layout), Pad in
 * constant mode and MaxPool and AveragePool of rank 3 or 4 (WHOLE: X and Y).
 * in holds the static types of the n_in inputs (NULL when absent), y that of out[0]. */
typedef enum kl_isa_cl {
  KL_ISA_CL_NONE,
  KL_ISA_CL_SAME,
  KL_ISA_CL_CHANNEL,
  KL_ISA_CL_READ,
  KL_ISA_CL_WHOLE
} kl_isa_cl;
/* Whether b is [N, C, 1...] against y [N, C, S...] (N and C y's own, known or the same
 * symbol; b's other dims known 1): one value per image and channel (a
 * squeeze-and-excitation scale), the same bytes in either layout. */
bool kl_cpu_per_channel(const kl_type *b, const kl_type *y);
/* Whether b holds one value (every dim known 1, rank at most y's): broadcast over y the
 * same in either layout. */
bool kl_cpu_single_value(const kl_type *b, const kl_type *y);
kl_isa_cl kl_cpu_isa_layout(const kl_node *n, const kl_type *const *in, int n_in,
                            const kl_type *y, unsigned *slots);
kl_cpu_kernel kl_cpu_isa_kernel_cl(const kl_node *n, kl_isa isa);

#endif
