/* Kernel selection for the CPU backend (cpu_backend.h): per node, oneDNN when it
 * supports the node, else kiln's kernel for the machine's ISA level (kernels.c), else
 * the portable reference kernel; the memory plan learns from the choice which outputs
 * may share an input's buffer. */
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/isa.h"
#include "ir/fused.h"
#include "ir/layout.h"
#include "kl_config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if KL_HAVE_DNNL
#include "backends/cpu/dnnl.h"
#endif
#if KL_HAVE_OPENMP
#include <omp.h>
#endif

enum { DNNL_NODE = 1, DNNL_ATTENTION = 2, DNNL_GRAD = 3, DNNL_QCONV = 4 };

#define KL_MAX_ISA_INPUTS 64 /* wider nodes (a Concat of more) keep the reference */

struct kl_cpu_plan {
  int n_nodes;
  kl_cpu_choice *choice;
  void **state;
  bool bf16; /* KL_CPU_KERNELS_FAST_BF16 */
  int bf16_values; /* the activations it holds in bf16 (choose_bf16) */
#if KL_HAVE_DNNL
  kl_dnnl_engine *dnnl; /* made when some node runs on oneDNN */
  unsigned char *on_dnnl; /* per node: DNNL_NODE, DNNL_ATTENTION or 0 */
  unsigned *cl_slots;   /* per node: the inputs it can read channels-last */
  unsigned char *isa_cl; /* per node on kiln's kernel: its kl_isa_cl */
  /* per node: a float32 convolution, product, pooling or attention left on kiln's
   * portable reference kernel while oneDNN is usable (kl_cpu_plan_slow_path) */
  unsigned char *ref_heavy;
#endif
};

/* "avx512_bf16, oneDNN avx512_core_bf16": once per process (the levels never change). */
static pthread_once_t used_once = PTHREAD_ONCE_INIT;
static char used_name[96];

static void describe_isa(void) {
  const char *kiln = kl_isa_level_name(kl_isa_level());
#if KL_HAVE_DNNL
  if (kl_dnnl_usable()) {
    snprintf(used_name, sizeof used_name, "%s, oneDNN %s", kiln, kl_dnnl_isa_name());
    return;
  }
#endif
  snprintf(used_name, sizeof used_name, "%s", kiln);
}

const char *kl_cpu_isa_used(void) {
  pthread_once(&used_once, describe_isa);
  return used_name;
}

int kl_cpu_int8_weight_bits(void) {
#if KL_HAVE_DNNL
  return kl_dnnl_usable() ? kl_dnnl_qconv_weight_bits() : 8;
#else
  return 8;
#endif
}

kiln_status kl_cpu_bf16_check(kl_err *e) {
  const char *level = kl_isa_level_name(kl_isa_level());
#if KL_HAVE_DNNL
  if (kl_isa_level() >= KL_ISA_AVX512_BF16 && kl_dnnl_bf16_native()) return KILN_OK;
  return kl_fail(e, KILN_ERR_UNSUPPORTED, "option 'precision': bf16 needs a CPU with "
                 "AVX512-BF16 or AMX (kiln's level avx512_bf16 or amx); this one runs at level "
                 "%s (oneDNN %s), where bf16 would be %s, slower than float32: use fp32",
                 level, kl_dnnl_usable() ? kl_dnnl_isa_name() : "not used",
                 kl_isa_level() >= KL_ISA_AVX512 ? "emulated by AVX-512 integer instructions"
                                                 : "oneDNN's reference loop");
#else
  return kl_fail(e, KILN_ERR_UNSUPPORTED, "option 'precision': bf16 runs on oneDNN, which "
                 "this build of kiln is without (level %s): use fp32", level);
#endif
}

bool kl_cpu_native_nhwc(void) {
#if KL_HAVE_DNNL
  return kl_dnnl_usable();
#else
  return false;
#endif
}

#if KL_HAVE_OPENMP
/* The process's CPU count as first seen, which pinning (of the calling thread, which
 * omp_get_num_procs asks about) does not shrink. */
static int process_cpus(void);
#endif

void kl_cpu_set_threads(int threads) {
#if KL_HAVE_OPENMP
  omp_set_num_threads(threads > 0 ? threads : process_cpus());
#else
  (void)threads;
#endif
}

/* The CPUs the process may run on, as the first pinning found them (pinning narrows
 * the calling thread's own set afterwards). */
static pthread_once_t cpus_once = PTHREAD_ONCE_INIT;
static int cpus_n = -1, cpus_errno;
static int *cpus;

static void read_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    cpus_errno = errno;
    return;
  }
  int n = CPU_COUNT(&set);
  if (!(cpus = malloc(sizeof *cpus * (size_t)(n ? n : 1)))) {
    cpus_errno = ENOMEM;
    return;
  }
  cpus_n = 0;
  for (int c = 0; c < CPU_SETSIZE && cpus_n < n; c++)
    if (CPU_ISSET(c, &set)) cpus[cpus_n++] = c;
}

#if KL_HAVE_OPENMP
static int process_cpus(void) {
  pthread_once(&cpus_once, read_cpus);
  return cpus_n > 0 ? cpus_n : omp_get_num_procs();
}
#endif

static int threads_wanted(int threads) {
#if KL_HAVE_OPENMP
  return threads > 0 ? threads : process_cpus();
#else
  (void)threads;
  return 1;
#endif
}

int kl_cpu_threads_for(int threads) { return threads_wanted(threads); }

kiln_status kl_cpu_pin_check(int threads, kl_err *e) {
  pthread_once(&cpus_once, read_cpus);
  if (cpus_n < 0)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "pin_threads: cannot read the CPUs this "
                   "process may run on: %s", strerror(cpus_errno));
  /* The count asked for, also in a build without OpenMP (which runs one thread): a
   * request that cannot be met on this machine is refused the same way everywhere. */
  int want = threads > 0 ? threads : threads_wanted(threads);
  if (want > cpus_n)
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "pin_threads: %d threads cannot each "
                   "have a core of their own: the process may run on %d CPU(s)", want,
                   cpus_n);
  return KILN_OK;
}

#if KL_HAVE_OPENMP /* (without OpenMP a session runs one thread: nothing to check) */
typedef struct probe_gate {
  pthread_mutex_t lock;
  pthread_cond_t open;
  bool go;
} probe_gate;

static void *probe_wait(void *arg) {
  probe_gate *g = arg;
  pthread_mutex_lock(&g->lock);
  while (!g->go) pthread_cond_wait(&g->open, &g->lock);
  pthread_mutex_unlock(&g->lock);
  return NULL;
}
#endif

/* The most threads a probe has started in this process: a session asking for no more
 * is not probed again (an embedder creating many sessions paid the probe each time). */
#if KL_HAVE_OPENMP
static int proven_threads;
#endif
static int probes;

int kl_cpu_threads_probes(void) { return __atomic_load_n(&probes, __ATOMIC_RELAXED); }

kiln_status kl_cpu_threads_check(int threads, kl_err *e) {
#if KL_HAVE_OPENMP
  int want = threads_wanted(threads);
  if (want <= process_cpus()) return KILN_OK; /* as many as the CPUs: never refused */
  if (want <= __atomic_load_n(&proven_threads, __ATOMIC_RELAXED)) return KILN_OK;
  __atomic_add_fetch(&probes, 1, __ATOMIC_RELAXED);
  pthread_t *team = malloc(sizeof *team * (size_t)want);
  if (!team) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory checking %d threads", want);
  probe_gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
  int started = 0, err = 0;
  while (started < want - 1 && (err = pthread_create(&team[started], NULL, probe_wait, &g)) == 0)
    started++;
  pthread_mutex_lock(&g.lock);
  g.go = true;
  pthread_cond_broadcast(&g.open);
  pthread_mutex_unlock(&g.lock);
  for (int i = 0; i < started; i++) pthread_join(team[i], NULL);
  free(team);
  if (started < want - 1)
    return kl_fail(e, KILN_ERR_LIMIT, "threads %d: this process could start only %d threads "
                   "besides its own (%s); ask for fewer (it may run on %d CPUs)", want,
                   started, strerror(err), process_cpus());
  int seen = __atomic_load_n(&proven_threads, __ATOMIC_RELAXED);
  while (want > seen && !__atomic_compare_exchange_n(&proven_threads, &seen, want, false,
                                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
#else
  (void)threads;
  (void)e;
#endif
  return KILN_OK;
}

kiln_status kl_cpu_pin_threads(int threads, kl_err *e) {
  kiln_status st = kl_cpu_pin_check(threads, e);
  if (st != KILN_OK) return st;
  int want = threads_wanted(threads), team = 1, failed = 0, err = 0;
#if KL_HAVE_OPENMP
#pragma omp parallel num_threads(want) shared(team, failed, err)
#endif
  {
    int t = 0;
#if KL_HAVE_OPENMP
    t = omp_get_thread_num();
    if (t == 0) team = omp_get_num_threads();
#endif
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[t], &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) {
#if KL_HAVE_OPENMP
#pragma omp critical(kl_pin)
#endif
      {
        failed++;
        err = errno;
      }
    }
  }
  if (failed)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "pin_threads: %d of %d threads could not be "
                   "pinned to their core: %s", failed, team, strerror(err));
  if (team != want)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "pin_threads: OpenMP gave %d threads where %d "
                   "were asked for, so not every thread that runs is pinned", team, want);
  return KILN_OK;
}

/* Reference kernels that compute out[i] from in[k][i] alone, reading before writing,
 * so that out[0] may share the buffer of any input of its own shape and dtype. */
static bool ref_elementwise(kl_op op) {
  switch (op) {
  case KL_OP_Relu: case KL_OP_Sigmoid: case KL_OP_Tanh: case KL_OP_Clip:
  case KL_OP_Add: case KL_OP_Sub: case KL_OP_Mul: case KL_OP_Div:
  case KL_OP_Abs: case KL_OP_Neg: case KL_OP_Exp: case KL_OP_Log: case KL_OP_Sqrt:
  case KL_OP_Reciprocal: case KL_OP_Floor: case KL_OP_Ceil: case KL_OP_Round:
  case KL_OP_Sign: case KL_OP_Erf: case KL_OP_Sin: case KL_OP_Cos: case KL_OP_Tan:
  case KL_OP_LeakyRelu: case KL_OP_Elu: case KL_OP_Selu: case KL_OP_Celu:
  case KL_OP_HardSigmoid: case KL_OP_HardSwish: case KL_OP_Mish: case KL_OP_Gelu:
  case KL_OP_Softplus: case KL_OP_Softsign: case KL_OP_ThresholdedRelu: case KL_OP_Swish:
    return true;
  default:
    return false;
  }
}

/* Ops whose output is their input's bytes under another shape. */
static bool renames_bytes(kl_op op) {
  return op == KL_OP_Identity || op == KL_OP_Reshape || op == KL_OP_Flatten ||
         op == KL_OP_Squeeze || op == KL_OP_Unsqueeze;
}

static kl_cpu_choice reference_choice(const kl_node *n) {
  kl_cpu_choice c = {.kernel = {"ref", kl_op_get(n->op)->ref, NULL}};
  c.inplace = ref_elementwise(n->op) ? ~0u : 0u;
  c.view = renames_bytes(n->op);
  return c;
}

#if KL_HAVE_DNNL
/* A float32 convolution, matrix product, pooling or attention: the ops whose reference
 * kernel is a slow path where oneDNN is usable (a fused op by the op it extends). */
static bool heavy_float(const kl_graph *g, const kl_node *n) {
  kl_op op = kl_fused_base(n->op);
  if (op == KL_OP_COUNT) op = kl_layout_base(n->op);
  if (op == KL_OP_COUNT) op = n->op;
  switch (op) {
  case KL_OP_Conv: case KL_OP_ConvTranspose: case KL_OP_Gemm: case KL_OP_MatMul:
  case KL_OP_MaxPool: case KL_OP_AveragePool: case KL_OP_GlobalAveragePool:
  case KL_OP_GlobalMaxPool: case KL_OP_Attention: case KL_OP_KilnAttention:
  case KL_OP_KilnMultiHeadAttention:
    break;
  default: return false;
  }
  if (n->n_out < 1 || n->out[0] < 0 || g->values[n->out[0]].type.dtype != KL_F32) return false;
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && g->values[n->in[k]].type.dtype != KL_F32) return false;
  return true;
}

static kiln_status dnnl_choice(kl_cpu_plan *p, const kl_graph *g, int i, kl_err *e) {
  if (!p->dnnl) {
    kiln_status st = kl_dnnl_engine_create(&p->dnnl, e);
    if (st != KILN_OK) return st;
    kl_dnnl_engine_set_bf16(p->dnnl, p->bf16);
  }
  kl_cpu_choice *c = &p->choice[i];
  c->view = false;
  c->inplace = 0;
  if (g->nodes[i].op == KL_OP_MatMulInteger ||
      g->nodes[i].op == KL_OP_KilnMatMulIntegerToFloat) { /* choose: kl_dnnl_mmint_primitive */
    p->on_dnnl[i] = DNNL_QCONV;
    return kl_dnnl_mmint_create(p->dnnl, &c->kernel, &p->state[i], e);
  }
  if (kl_dnnl_attention_supports(g, &g->nodes[i])) {
    p->on_dnnl[i] = DNNL_ATTENTION;
    return kl_dnnl_attention_create(p->dnnl, &c->kernel, &p->state[i], e);
  }
  if (kl_dnnl_qconv_supports(g, &g->nodes[i])) {
    p->on_dnnl[i] = DNNL_QCONV;
    /* X; and Y between two of them (convolutions: matrix products keep plain) */
    p->cl_slots[i] = g->nodes[i].op == KL_OP_QLinearConv ? 1u : 0u;
    return kl_dnnl_qconv_create(p->dnnl, &c->kernel, &p->state[i], e);
  }
  if (kl_dnnl_grad_supports(g, &g->nodes[i])) {
    p->on_dnnl[i] = DNNL_GRAD;
    p->cl_slots[i] = kl_dnnl_grad_channels_last_slots(g, &g->nodes[i]);
    return kl_dnnl_grad_create(p->dnnl, &g->nodes[i], &c->kernel, &p->state[i], e);
  }
  p->on_dnnl[i] = DNNL_NODE;
  p->cl_slots[i] = kl_dnnl_channels_last_slots(g, &g->nodes[i]);
  return kl_dnnl_node_create(p->dnnl, g, &g->nodes[i], &c->kernel, &c->inplace, &p->state[i], e);
}

/* Whether value v can be held channels-last: made by a oneDNN node that can write it
 * so, and read only by oneDNN nodes through inputs that can read it so; never a graph
 * output. */
static bool channels_last(const kl_cpu_plan *p, const kl_graph *g, int v) {
  int prod = g->values[v].producer;
  if (prod < 0 || !p->cl_slots[prod] || g->nodes[prod].out[0] != v) return false;
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return false;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == v && (k >= 32 || !(p->cl_slots[i] >> k & 1))) return false;
  return true;
}

/* Precision bf16: whether value v passes between two bf16 convolutions or matrix
 * products in bf16: made as the only output of one that adds no Sum (a residual
 * added in bf16 would lose its float32 precision), read only as X (input 0) by
 * others, no graph output, float32 in the graph. */
static bool bf16_held(const kl_cpu_plan *p, const kl_graph *g, int v) {
  int prod = g->values[v].producer;
  if (prod < 0 || p->on_dnnl[prod] != DNNL_NODE || !kl_dnnl_bf16_capable(p->state[prod]) ||
      g->nodes[prod].n_out != 1 || g->values[v].type.dtype != KL_F32)
    return false;
  const kl_node *pn = &g->nodes[prod];
  if (pn->n_in > KL_FUSED_SUM && pn->in[KL_FUSED_SUM] >= 0) return false;
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return false;
  bool read = false;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      if (g->nodes[i].in[k] != v) continue;
      if (k != 0 || p->on_dnnl[i] != DNNL_NODE || !kl_dnnl_bf16_capable(p->state[i]))
        return false;
      read = true;
    }
  return read;
}

static kiln_status choose_bf16(kl_cpu_plan *p, const kl_graph *g, kl_err *e) {
  bool *bf = calloc((size_t)g->n_values + 1, sizeof *bf);
  if (!bf) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory choosing precisions");
  for (int i = 0; i < g->n_nodes; i++)
    if (p->on_dnnl[i] == DNNL_NODE && kl_dnnl_bf16_capable(p->state[i]))
      bf[g->nodes[i].out[0]] = bf16_held(p, g, g->nodes[i].out[0]);
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    if (p->on_dnnl[i] != DNNL_NODE || !kl_dnnl_bf16_capable(p->state[i])) continue;
    bool x = n->in[0] >= 0 && bf[n->in[0]], y = bf[n->out[0]];
    kl_dnnl_set_bf16_held(p->state[i], x, y);
    p->bf16_values += y;
    for (int k = 0; k < n->n_in && k < 32; k++) /* Y overwrites only what it matches */
      if (n->in[k] >= 0 && bf[n->in[k]] != y) p->choice[i].inplace &= ~(1u << k);
  }
  free(bf);
  return KILN_OK;
}

/* kiln's kernels that read and write one layout (kl_cpu_isa_layout's SAME, CHANNEL and
 * WHOLE: on 8-bit codes, float32 elementwise ops, a training step's BatchNorms): where
 * one of their tensors stays plain, all do, until nothing changes (each round only
 * clears). */
static void same_layouts(const kl_cpu_plan *p, const kl_graph *g, bool *cl) {
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < g->n_nodes; i++) {
      const kl_node *n = &g->nodes[i];
      /* a oneDNN node's windowed pooling too (X and Y): kiln's own kernels run it where
       * both are in one layout (dnnl.c own_pool); a plain X into a channels-last Y went
       * to oneDNN 2.6's pooling, 0.27 ms for PoolFormer's 3x3 average pools of 64 x 56
       * x 56 where kiln's plain kernel takes a fifth of that */
      bool pool = p->on_dnnl[i] == DNNL_NODE &&
                  (n->op == KL_OP_MaxPool || n->op == KL_OP_AveragePool);
      if (p->isa_cl[i] != KL_ISA_CL_SAME && p->isa_cl[i] != KL_ISA_CL_CHANNEL &&
          p->isa_cl[i] != KL_ISA_CL_WHOLE && !pool)
        continue;
      unsigned slots = pool ? 1u : p->cl_slots[i];
      bool all = cl[n->out[0]];
      for (int k = 0; k < n->n_in && k < 32; k++)
        if (slots >> k & 1) all = all && cl[n->in[k]];
      if (all) continue;
      for (int k = -1; k < n->n_in && k < 32; k++) {
        int v = k < 0 ? n->out[0] : (slots >> k & 1) ? n->in[k] : -1;
        if (v >= 0 && cl[v]) cl[v] = false, changed = true;
      }
    }
  }
}

/* Activations passed between oneDNN convolutions (and the pooling and elementwise
 * nodes between them, oneDNN's or kiln's on 8-bit codes) stay channels-last instead of
 * being reordered to plain after one primitive and back before the next. */
static kiln_status choose_layouts(kl_cpu_plan *p, const kl_graph *g, kl_err *e) {
  bool *cl = calloc((size_t)g->n_values + 1, sizeof *cl);
  if (!cl) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory choosing layouts");
  for (int i = 0; i < g->n_nodes; i++)
    if (p->cl_slots[i]) cl[g->nodes[i].out[0]] = channels_last(p, g, g->nodes[i].out[0]);
  same_layouts(p, g, cl);
  for (int i = 0; i < g->n_nodes; i++) {
    if (!p->cl_slots[i]) continue;
    const kl_node *n = &g->nodes[i];
    unsigned in = 0;
    for (int k = 0; k < n->n_in && k < 32; k++)
      if (n->in[k] >= 0 && cl[n->in[k]]) in |= 1u << k;
    bool cl_y = cl[n->out[0]];
    if (p->isa_cl[i] == KL_ISA_CL_CHANNEL || p->isa_cl[i] == KL_ISA_CL_READ ||
        p->isa_cl[i] == KL_ISA_CL_WHOLE) {
      if (in & p->cl_slots[i]) p->choice[i].kernel = kl_cpu_isa_kernel_cl(n, kl_isa_level());
    } else if (p->on_dnnl[i] == DNNL_QCONV) {
      kl_dnnl_qconv_set_channels_last(p->state[i], in & 1u, cl_y);
    } else if (p->on_dnnl[i] == DNNL_GRAD) {
      kl_dnnl_grad_set_channels_last(p->state[i], in, cl_y);
    } else if (p->on_dnnl[i]) {
      kl_dnnl_set_channels_last(p->state[i], in, cl_y);
    }
    for (int k = 0; k < n->n_in && k < 32; k++) /* Y overwrites only what it matches */
      if (n->in[k] >= 0 && cl[n->in[k]] != cl_y) p->choice[i].inplace &= ~(1u << k);
  }
  free(cl);
  return KILN_OK;
}
#endif

/* A recurrent node's W and R (inputs 1 and 2) are constants: packed once. */
static bool weights_constant(const kl_graph *g, const kl_node *n) {
  return n->n_in > 2 && n->in[1] >= 0 && n->in[2] >= 0 &&
         g->values[n->in[1]].kind == KL_VALUE_CONST && g->values[n->in[2]].kind == KL_VALUE_CONST;
}

/* kiln's kernel for the ISA level, when it has one for the node, with the inputs whose
 * buffer it may write its output over (kl_cpu_isa_inplace; test_isa runs every such
 * kernel with out[0] aliasing each of them against the reference). */
static void isa_choice(kl_cpu_plan *p, const kl_graph *g, int i) {
  const kl_node *n = &g->nodes[i];
  const kl_type *in[KL_MAX_ISA_INPUTS];
  int n_in = n->n_in < KL_MAX_ISA_INPUTS ? n->n_in : KL_MAX_ISA_INPUTS;
  for (int k = 0; k < n_in; k++) in[k] = n->in[k] >= 0 ? &g->values[n->in[k]].type : NULL;
  kl_cpu_kernel k = kl_cpu_isa_kernel(n, in, n_in, kl_isa_level());
  if (n->op == KL_OP_RNN || n->op == KL_OP_GRU || n->op == KL_OP_LSTM)
    k = kl_cpu_isa_rnn_kernel(n, in, n_in, weights_constant(g, n), kl_isa_level());
  if (!k.run) return;
  p->choice[i].kernel = k;
  p->choice[i].inplace = kl_cpu_isa_inplace(n);
#if KL_HAVE_DNNL
  bool bn = n->op == KL_OP_KilnBatchNormTrain || n->op == KL_OP_KilnBatchNormGrad;
  if ((n->n_out == 1 || bn) && n->out[0] >= 0)
    p->isa_cl[i] = (unsigned char)kl_cpu_isa_layout(n, in, n_in, &g->values[n->out[0]].type,
                                                    &p->cl_slots[i]);
#endif
}

static kiln_status choose(kl_cpu_plan *p, const kl_graph *g, kl_cpu_kernels which, int i,
                          kl_err *e) {
  const kl_node *n = &g->nodes[i];
  p->choice[i] = reference_choice(n);
  if (which == KL_CPU_KERNELS_REF) return KILN_OK;
#if KL_HAVE_DNNL
  if (kl_dnnl_usable() && kl_dnnl_mmint_supports(g, n)) {
    if (kl_dnnl_mmint_primitive()) return dnnl_choice(p, g, i, e);
    /* no VNNI: kiln's product, B packed once (oneDNN's gemm packs it at every call) */
    p->choice[i].kernel = kl_isa_level() >= KL_ISA_AVX2
                              ? kl_cpu_isa_qgemm_kernel(kl_isa_level())
                              : (kl_cpu_kernel){"dnnl_gemm_u8s8s32", kl_dnnl_mmint_run, NULL};
    p->choice[i].inplace = 0;
    return KILN_OK;
  }
  /* the rest of the integer products of constant weights (8-bit weights without VNNI,
   * uint8 B, int8 A, B's zero points): kiln's int8 product with the few weights past
   * its pairs' bound added apart, else its wide form; both exact */
  if (kl_isa_level() >= KL_ISA_AVX2 && kl_qgemm16_fits(g, n)) {
    p->choice[i].kernel = kl_qgemm_split_fits(g, n) ? kl_cpu_isa_qgemm_kernel(kl_isa_level())
                                                    : kl_cpu_isa_qgemm16_kernel(kl_isa_level());
    p->choice[i].inplace = 0;
    return KILN_OK;
  }
  if (kl_dnnl_usable() &&
      (kl_dnnl_supports(g, n) || kl_dnnl_attention_supports(g, n) ||
       kl_dnnl_grad_supports(g, n) || kl_dnnl_qconv_supports(g, n)))
    return dnnl_choice(p, g, i, e);
#else
  (void)e;
#endif
  if (n->n_in <= KL_MAX_ISA_INPUTS) isa_choice(p, g, i);
  return KILN_OK;
}

kiln_status kl_cpu_plan_create(const kl_graph *g, kl_cpu_kernels which,
                               const unsigned char *elsewhere, kl_cpu_plan **out, kl_err *e) {
  kl_cpu_plan *p = calloc(1, sizeof *p);
  *out = p;
  if (!p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the kernel plan");
  p->n_nodes = g->n_nodes;
  p->bf16 = which == KL_CPU_KERNELS_FAST_BF16;
  p->choice = calloc((size_t)g->n_nodes + 1, sizeof *p->choice);
  p->state = calloc((size_t)g->n_nodes + 1, sizeof *p->state);
#if KL_HAVE_DNNL
  p->cl_slots = calloc((size_t)g->n_nodes + 1, sizeof *p->cl_slots);
  p->on_dnnl = calloc((size_t)g->n_nodes + 1, sizeof *p->on_dnnl);
  p->isa_cl = calloc((size_t)g->n_nodes + 1, sizeof *p->isa_cl);
  p->ref_heavy = calloc((size_t)g->n_nodes + 1, sizeof *p->ref_heavy);
  if (!p->cl_slots || !p->on_dnnl || !p->isa_cl || !p->ref_heavy)
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the kernel plan");
#endif
  if (!p->choice || !p->state)
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the kernel plan");
  for (int i = 0; i < g->n_nodes; i++) {
    if (elsewhere && elsewhere[i]) { /* another backend's: no state, plain layouts around it */
      p->choice[i] = reference_choice(&g->nodes[i]);
      continue;
    }
    kiln_status st = choose(p, g, which, i, e);
    if (st != KILN_OK) {
      char d[256];
      kl_err_prefix(e, "%s", kl_node_describe(g, &g->nodes[i], d, sizeof d));
      return st;
    }
#if KL_HAVE_DNNL
    p->ref_heavy[i] = which != KL_CPU_KERNELS_REF && kl_dnnl_usable() &&
                      p->choice[i].kernel.run == kl_op_get(g->nodes[i].op)->ref &&
                      heavy_float(g, &g->nodes[i]);
#endif
  }
#if KL_HAVE_DNNL
  if (p->dnnl && p->bf16) {
    kiln_status st = choose_bf16(p, g, e);
    if (st != KILN_OK) return st;
  }
  if (p->dnnl) return choose_layouts(p, g, e);
#endif
  return KILN_OK;
}

void kl_cpu_plan_free(kl_cpu_plan *p) {
  if (!p) return;
  for (int i = 0; p->choice && p->state && i < p->n_nodes; i++)
    if (p->state[i] && p->choice[i].kernel.release) p->choice[i].kernel.release(p->state[i]);
#if KL_HAVE_DNNL
  kl_dnnl_engine_free(p->dnnl);
  free(p->cl_slots);
  free(p->on_dnnl);
  free(p->isa_cl);
  free(p->ref_heavy);
#endif
  free(p->choice);
  free(p->state);
  free(p);
}

const kl_cpu_choice *kl_cpu_plan_kernel(const kl_cpu_plan *p, int node) {
  return &p->choice[node];
}

void **kl_cpu_plan_state(kl_cpu_plan *p, int node) { return &p->state[node]; }

bool kl_cpu_plan_is_reference(const kl_cpu_plan *p, int node) {
  return strcmp(p->choice[node].kernel.name, "ref") == 0; /* reference_choice's name */
}

#if KL_HAVE_DNNL
/* Whether value v is read by node `node` alone, at input 1, and is no graph output. */
static bool only_weights_of(const kl_graph *g, int v, int node) {
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v) return false;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == v && (i != node || k != 1)) return false;
  return true;
}
#endif

int kl_cpu_plan_release_weights(kl_cpu_plan *p, kl_graph *g) {
  int n = 0;
#if KL_HAVE_DNNL
  for (int i = 0; p->on_dnnl && i < p->n_nodes; i++) {
    const kl_node *nd = &g->nodes[i];
    if (p->on_dnnl[i] != DNNL_NODE || nd->n_in < 2 || nd->in[1] < 0) continue;
    kl_value *w = &g->values[nd->in[1]];
    if (w->kind == KL_VALUE_CONST && !w->borrowed && only_weights_of(g, nd->in[1], i))
      n += kl_dnnl_allow_release(p->state[i], w);
  }
#else
  (void)p;
  (void)g;
#endif
  return n;
}

size_t kl_cpu_plan_packed_bytes(const kl_cpu_plan *p, const kl_graph *g) {
  size_t n = 0;
#if KL_HAVE_DNNL
  for (int i = 0; p->on_dnnl && i < p->n_nodes; i++)
    if (p->on_dnnl[i] == DNNL_NODE) n += kl_dnnl_weights_bytes(p->state[i], g);
#else
  (void)p;
  (void)g;
#endif
  return n;
}

size_t kl_cpu_plan_held_bytes(const kl_cpu_plan *p) {
  size_t n = 0;
  for (int i = 0; i < p->n_nodes; i++) /* kiln's kernels' states (RNN: packed W and R) */
    if (p->state[i]) n += kl_cpu_isa_held_bytes(&p->choice[i].kernel, p->state[i]);
#if KL_HAVE_DNNL
  for (int i = 0; p->on_dnnl && i < p->n_nodes; i++)
    if (p->on_dnnl[i] == DNNL_NODE) n += kl_dnnl_held_bytes(p->state[i]);
  n += kl_dnnl_engine_held_bytes(p->dnnl);
#else
  (void)p;
#endif
  return n;
}

void kl_cpu_plan_poison_workspace(kl_cpu_plan *p) {
#if KL_HAVE_DNNL
  kl_dnnl_ws_poison(p->dnnl, true);
#else
  (void)p;
#endif
}

const char *kl_cpu_plan_impl(const kl_cpu_plan *p, int node) {
#if KL_HAVE_DNNL
  if (p->on_dnnl && p->on_dnnl[node] == DNNL_NODE) return kl_dnnl_ran_impl(p->state[node]);
  if (p->on_dnnl && p->on_dnnl[node] == DNNL_GRAD) return kl_dnnl_grad_ran_impl(p->state[node]);
  if (p->on_dnnl && p->on_dnnl[node] == DNNL_QCONV) return kl_dnnl_qconv_ran_impl(p->state[node]);
  if (p->on_dnnl && p->on_dnnl[node] == DNNL_ATTENTION)
    return kl_dnnl_attention_ran_impl(p->state[node]);
#else
  (void)p, (void)node;
#endif
  return NULL;
}

const char *kl_cpu_plan_slow_path(const kl_cpu_plan *p, int node) {
#if KL_HAVE_DNNL
  static const char *const no_impl = "kiln's reference kernel (oneDNN has no implementation "
                                     "for these shapes)";
  if (p->ref_heavy && p->ref_heavy[node])
    return "kiln's portable reference kernel (neither oneDNN nor kiln's kernels took the node)";
  if (!p->on_dnnl || !p->on_dnnl[node]) return NULL;
  const void *st = p->state[node];
  if (p->on_dnnl[node] == DNNL_ATTENTION)
    return kl_dnnl_attention_ran_reference(st) ? no_impl : kl_dnnl_attention_ran_slow(st);
  if (p->on_dnnl[node] == DNNL_GRAD) /* only fast implementations are ever made */
    return kl_dnnl_grad_ran_reference(st) ? no_impl : NULL;
  if (p->on_dnnl[node] == DNNL_QCONV) { /* int8: oneDNN's ref_int8:any is kept, reported */
    if (kl_dnnl_qconv_ran_reference(st)) return no_impl;
    const char *qimpl = kl_dnnl_qconv_ran_impl(st);
    return qimpl && kl_dnnl_impl_is_slow(qimpl) ? qimpl : NULL;
  }
  if (kl_dnnl_ran_reference(st)) return no_impl;
  const char *impl = kl_dnnl_ran_impl(st);
  return impl && kl_dnnl_impl_is_slow(impl) ? impl : NULL;
#else
  (void)p, (void)node;
  return NULL;
#endif
}

const char *kl_cpu_plan_ran(const kl_cpu_plan *p, int node) {
#if KL_HAVE_DNNL
  if (p->on_dnnl && p->on_dnnl[node] == DNNL_NODE && kl_dnnl_ran_reference(p->state[node]))
    return "ref";
  if (p->on_dnnl && p->on_dnnl[node] == DNNL_NODE && kl_dnnl_ran_gemv(p->state[node]))
    return kl_dnnl_ran_gemv(p->state[node]);
  if (p->on_dnnl && p->on_dnnl[node] == DNNL_ATTENTION &&
      kl_dnnl_attention_ran_reference(p->state[node]))
    return "ref";
  if (p->on_dnnl && p->on_dnnl[node] == DNNL_GRAD && kl_dnnl_grad_ran_reference(p->state[node]))
    return "ref";
  if (p->on_dnnl && p->on_dnnl[node] == DNNL_QCONV && kl_dnnl_qconv_ran_reference(p->state[node]))
    return "ref";
#endif
  return p->choice[node].kernel.name;
}

/* ---- the CPU backend behind the backend interface (backend.h) ---- */

static bool cpu_supports(kl_backend *b, const kl_graph *g, int node) {
  (void)b, (void)g, (void)node;
  return true; /* every op has its reference kernel */
}

static kiln_status cpu_execute(kl_backend *b, int node, kl_kernel_ctx *kc) {
  kl_cpu_plan *p = b->ctx;
  kc->state = &p->state[node];
  return (kiln_status)p->choice[node].kernel.run(kc);
}

static const char *cpu_kernel_name(const kl_backend *b, int node) {
  return kl_cpu_plan_ran(b->ctx, node);
}

static const char *cpu_device_name(const kl_backend *b) {
  (void)b;
  return kl_cpu_isa_used();
}

static void cpu_release(kl_backend *b) {
  if (!b) return;
  kl_cpu_plan_free(b->ctx);
  free(b);
}

static const kl_backend_iface cpu_iface = {
    .name = "cpu",
    .supports_node = cpu_supports,
    .execute = cpu_execute,
    .kernel_name = cpu_kernel_name,
    .device_name = cpu_device_name,
    .release = cpu_release,
};

kiln_status kl_cpu_backend_create(const kl_graph *g, kl_cpu_kernels which,
                                  const unsigned char *elsewhere, kl_backend **out, kl_err *e) {
  *out = NULL;
  kl_backend *b = calloc(1, sizeof *b);
  if (!b) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the CPU backend");
  kl_cpu_plan *p = NULL;
  kiln_status st = kl_cpu_plan_create(g, which, elsewhere, &p, e);
  if (st != KILN_OK) {
    kl_cpu_plan_free(p);
    free(b);
    return st;
  }
  *b = (kl_backend){&cpu_iface, p};
  *out = b;
  return KILN_OK;
}

kl_cpu_plan *kl_cpu_backend_plan(kl_backend *b) { return b->ctx; }

int kl_cpu_plan_bf16_values(const kl_cpu_plan *p) { return p ? p->bf16_values : 0; }

void kl_cpu_plan_bf16_unhold(kl_cpu_plan *p) {
#if KL_HAVE_DNNL
  for (int i = 0; p && i < p->n_nodes; i++)
    if (p->on_dnnl[i] == DNNL_NODE && kl_dnnl_bf16_capable(p->state[i]))
      kl_dnnl_set_bf16_held(p->state[i], false, false);
#endif
  if (p) p->bf16_values = 0;
}
