/* Kernel selection for the CPU backend (cpu_backend.h): per node, oneDNN when it
 * supports the node, else the portable reference kernel; the memory plan learns from
 * the choice which outputs may share an input's buffer. */
#include "backends/cpu/cpu_backend.h"
#include "kl_config.h"

#include <stdlib.h>
#include <string.h>

#if KL_HAVE_DNNL
#include "backends/cpu/dnnl.h"
#endif
#if KL_HAVE_OPENMP
#include <omp.h>
#endif

struct kl_cpu_plan {
  int n_nodes;
  kl_cpu_choice *choice;
  void **state;
#if KL_HAVE_DNNL
  kl_dnnl_engine *dnnl; /* made when some node runs on oneDNN */
#endif
};

static const char *const isa_names[KL_ISA_COUNT] = {
    [KL_ISA_GENERIC] = "generic", [KL_ISA_AVX2] = "avx2", [KL_ISA_AVX512] = "avx512",
    [KL_ISA_AVX512_BF16] = "avx512_bf16", [KL_ISA_AMX] = "amx"};

const char *kl_cpu_isa_name(kl_isa isa) {
  return (unsigned)isa < KL_ISA_COUNT ? isa_names[isa] : "unknown";
}

kl_isa kl_cpu_isa_cap(void) {
  const char *v = getenv("KILN_ISA");
  for (int i = 0; v && i < KL_ISA_COUNT; i++)
    if (strcmp(v, isa_names[i]) == 0) return (kl_isa)i;
  return KL_ISA_AMX;
}

const char *kl_cpu_isa_used(void) {
#if KL_HAVE_DNNL
  if (kl_dnnl_limit_isa(kl_cpu_isa_cap())) return kl_dnnl_isa_name();
#endif
  return "generic";
}

void kl_cpu_set_threads(int threads) {
#if KL_HAVE_OPENMP
  omp_set_num_threads(threads > 0 ? threads : omp_get_num_procs());
#else
  (void)threads;
#endif
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
static kiln_status dnnl_choice(kl_cpu_plan *p, const kl_graph *g, int i, kl_err *e) {
  if (!p->dnnl) {
    kiln_status st = kl_dnnl_engine_create(&p->dnnl, e);
    if (st != KILN_OK) return st;
  }
  kl_cpu_choice *c = &p->choice[i];
  c->view = false;
  return kl_dnnl_node_create(p->dnnl, g, &g->nodes[i], &c->kernel, &c->inplace, &p->state[i], e);
}
#endif

static kiln_status choose(kl_cpu_plan *p, const kl_graph *g, kl_cpu_kernels which, int i,
                          kl_err *e) {
  const kl_node *n = &g->nodes[i];
  p->choice[i] = reference_choice(n);
  if (which == KL_CPU_KERNELS_REF) return KILN_OK;
#if KL_HAVE_DNNL
  if (kl_dnnl_limit_isa(kl_cpu_isa_cap()) && kl_dnnl_supports(g, n))
    return dnnl_choice(p, g, i, e);
#else
  (void)e;
#endif
  return KILN_OK;
}

kiln_status kl_cpu_plan_create(const kl_graph *g, kl_cpu_kernels which, kl_cpu_plan **out,
                               kl_err *e) {
  kl_cpu_plan *p = calloc(1, sizeof *p);
  *out = p;
  if (!p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the kernel plan");
  p->n_nodes = g->n_nodes;
  p->choice = calloc((size_t)g->n_nodes + 1, sizeof *p->choice);
  p->state = calloc((size_t)g->n_nodes + 1, sizeof *p->state);
  if (!p->choice || !p->state)
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the kernel plan");
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_status st = choose(p, g, which, i, e);
    if (st != KILN_OK) {
      char d[256];
      kl_err_prefix(e, "%s", kl_node_describe(g, &g->nodes[i], d, sizeof d));
      return st;
    }
  }
  return KILN_OK;
}

void kl_cpu_plan_free(kl_cpu_plan *p) {
  if (!p) return;
  for (int i = 0; p->choice && p->state && i < p->n_nodes; i++)
    if (p->state[i] && p->choice[i].kernel.release) p->choice[i].kernel.release(p->state[i]);
#if KL_HAVE_DNNL
  kl_dnnl_engine_free(p->dnnl);
#endif
  free(p->choice);
  free(p->state);
  free(p);
}

const kl_cpu_choice *kl_cpu_plan_kernel(const kl_cpu_plan *p, int node) {
  return &p->choice[node];
}

void **kl_cpu_plan_state(kl_cpu_plan *p, int node) { return &p->state[node]; }
