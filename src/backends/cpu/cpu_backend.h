/* The CPU backend as a session sees it: one kernel per node, chosen once at session
 * creation (backend.h states the contract), with the per-node state that kernel keeps.
 *
 *   kl_cpu_plan_create   choose a kernel for every node of a graph
 *   kl_cpu_plan_kernel   the kernel chosen for node i, and what it allows (in place)
 *   kl_cpu_plan_state    its state slot, for kl_kernel_ctx.state
 *   kl_cpu_plan_free     release every state with its kernel's release function
 *
 * A plan belongs to one session and is used by one thread at a time; the graph must
 * outlive it. */
#ifndef KL_CPU_BACKEND_H
#define KL_CPU_BACKEND_H

#include "backends/backend.h"

/* Which kernels a plan may choose. */
typedef enum kl_cpu_kernels {
  KL_CPU_KERNELS_FAST = 0, /* oneDNN, else kiln's ISA kernel, else the reference */
  KL_CPU_KERNELS_REF = 1,  /* only the portable reference kernels (the oracle) */
  /* FAST, with oneDNN's convolutions and matrix products computing in bfloat16
   * (operands rounded to bf16, sums in float32, tensors float32 between nodes):
   * option precision "bf16"; kl_cpu_bf16_check says whether this CPU can */
  KL_CPU_KERNELS_FAST_BF16 = 2,
} kl_cpu_kernels;

typedef struct kl_cpu_choice {
  kl_cpu_kernel kernel;
  /* Bit k set: the kernel accepts out[0] sharing in[k]'s buffer when the two have the
   * same dtype and shape (the memory plan then runs it in place). */
  unsigned inplace;
  /* The op only renames its input's bytes (Reshape, Flatten, ...): out[0] may be a
   * view of in[0] and the kernel need not run at all. */
  bool view;
} kl_cpu_choice;

typedef struct kl_cpu_plan kl_cpu_plan;

/* elsewhere (NULL: none): per node, 1 when another backend runs it; the plan gives such
 * a node no kernel state and reads and writes plain layouts around it. */
kiln_status kl_cpu_plan_create(const kl_graph *g, kl_cpu_kernels which,
                               const unsigned char *elsewhere, kl_cpu_plan **out, kl_err *e);
void kl_cpu_plan_free(kl_cpu_plan *p);
const kl_cpu_choice *kl_cpu_plan_kernel(const kl_cpu_plan *p, int node);
/* Whether node i was given kiln's portable reference kernel (no oneDNN primitive and no
 * ISA kernel takes it, or the plan is KL_CPU_KERNELS_REF): scalar loops, each step
 * tens of times slower than an optimized kernel's (the session's work bound weighs
 * them so). */
bool kl_cpu_plan_is_reference(const kl_cpu_plan *p, int node);
void **kl_cpu_plan_state(kl_cpu_plan *p, int node);
/* The name of the kernel that ran node i last: the chosen kernel's, "ref" when a
 * oneDNN kernel handed its last run to the reference kernel, or "gemv" when it ran
 * kiln's one-row matrix-vector product (isa/run_gemv.c). */
const char *kl_cpu_plan_ran(const kl_cpu_plan *p, int node);
/* oneDNN's name for the implementation that ran node i last ("jit:avx2",
 * "brg:avx512_core"), NULL when no oneDNN primitive ran it. */
const char *kl_cpu_plan_impl(const kl_cpu_plan *p, int node);
/* The slow path node i's last run took where a fast one is the rule, NULL when none:
 * a node given to oneDNN (convolution, matrix product, pooling, attention, ...) run
 * by oneDNN's reference implementation ("ref:any") or by kiln's reference kernel
 * because oneDNN had no implementation for its shapes. */
const char *kl_cpu_plan_slow_path(const kl_cpu_plan *p, int node);

/* release_weights: lets the plan's oneDNN nodes free the data of the constant weights
 * that only they read (input 1, no other reader, not a graph output) once they hold
 * them packed. The graph is then this plan's alone. Returns how many may be freed. */
int kl_cpu_plan_release_weights(kl_cpu_plan *p, kl_graph *g);
/* The bytes of constant weights the plan's oneDNN nodes will hold reordered (known
 * before any run: their plain size, which blocked layouts pad at most a little). */
size_t kl_cpu_plan_packed_bytes(const kl_cpu_plan *p, const kl_graph *g);
/* Bytes the plan's kernels hold besides the session's tensors: oneDNN's packed
 * weights, and the workspace its nodes share for scratchpads and staged copies. */
size_t kl_cpu_plan_held_bytes(const kl_cpu_plan *p);
/* Tests: fill oneDNN's workspace with NaNs before every node (kl_dnnl_ws_poison). */
void kl_cpu_plan_poison_workspace(kl_cpu_plan *p);

/* The CPU backend behind the backend interface (backend.h): a plan for every node of
 * g, run through execute; it supports every node. kl_cpu_backend_plan gives the plan
 * for the CPU's own questions (packed weights, oneDNN's implementations). */
kiln_status kl_cpu_backend_create(const kl_graph *g, kl_cpu_kernels which,
                                  const unsigned char *elsewhere, kl_backend **out, kl_err *e);
kl_cpu_plan *kl_cpu_backend_plan(kl_backend *b);
/* Precision bf16: how many activations the plan passes between convolutions and matrix
 * products in bf16 (the rest are float32). */
int kl_cpu_plan_bf16_values(const kl_cpu_plan *p);
/* Tests, before the plan's first run: every activation float32 between the nodes again
 * (the bf16 nodes then convert X themselves), to compare with the plan as chosen. */
void kl_cpu_plan_bf16_unhold(kl_cpu_plan *p);

/* What the fast kernels run on, for `kiln bench`: kiln's level and oneDNN's ISA
 * ("avx512_bf16, oneDNN avx512_core_bf16"). Valid for the life of the process. */
const char *kl_cpu_isa_used(void);
/* The widest int8 weights (in bits, 7 or 8) whose convolutions fast sessions run
 * exactly on oneDNN's int8 primitives: 8 with VNNI or AMX (or no oneDNN: the reference
 * kernel runs them); 7 on AVX2 and AVX-512 without VNNI, whose vpmaddubsw adds pairs
 * of uint8 x int8 products in int16 with saturation (docs/precision.md). */
int kl_cpu_int8_weight_bits(void);
/* Whether fast sessions run 2-D convolutions and pooling on oneDNN, which reads their
 * channels-last forms in place (the O3 layout pass makes them only then). */
bool kl_cpu_native_nhwc(void);

/* Whether fast sessions can compute in bf16 here (KL_CPU_KERNELS_FAST_BF16): oneDNN
 * with its bf16 kernels, kiln's level avx512_bf16 or amx (a CPU with AVX512-BF16 or
 * AMX-BF16). Elsewhere KILN_ERR_UNSUPPORTED saying why: without those instructions
 * oneDNN emulates bf16 (AVX-512) or has only its reference loop (AVX2), slower than
 * float32 (docs/precision.md). */
kiln_status kl_cpu_bf16_check(kl_err *e);

/* pin_threads: whether `threads` threads (0 = one per core) can each have a CPU of the
 * process's own (KILN_ERR_INVALID_ARGUMENT when there are fewer). */
kiln_status kl_cpu_pin_check(int threads, kl_err *e);
/* Whether this process can start the `threads` threads a session asks for (0 = one per
 * CPU): more than the process's CPUs are started once, all alive together, and ended
 * (KILN_ERR_LIMIT naming how many started when one cannot be), since OpenMP ends the
 * process when it cannot start a thread of a team. */
kiln_status kl_cpu_threads_check(int threads, kl_err *e);
/* How many probes kl_cpu_threads_check has made in this process: a count it has
 * started once is not probed again (tests). */
int kl_cpu_threads_probes(void);
/* Pins the threads of the calling thread's OpenMP team of that size to the process's
 * CPUs, thread t (the calling thread is 0) to the t-th: they keep running there. */
kiln_status kl_cpu_pin_threads(int threads, kl_err *e);

/* Set the thread count of the calling thread's OpenMP parallel regions, which oneDNN's
 * primitives use (0 = one per core). OpenMP keeps this per calling thread, so
 * sessions run from different threads keep their own counts. */
void kl_cpu_set_threads(int threads);
/* The thread count a session asking for `threads` runs with (0: one per CPU the
 * process may use; 1 in a build without OpenMP). */
int kl_cpu_threads_for(int threads);

#endif
