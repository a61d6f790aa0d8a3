/* Kernel selection for the CPU backend (cpu_backend.h): per node, oneDNN when it
 * supports the node, else kiln's kernel for the machine's ISA level (kernels.c), else
 * the portable reference kernel; the memory plan learns from the choice which outputs
 * may share an input's buffer. */
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/isa.h"
#include "ir/fused.h"
#include "kl_config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if KL_HAVE_DNNL
#include "backends/cpu/dnnl.h"
#endif
#if KL_HAVE_OPENMP
#include <omp.h>
#endif

enum { DNNL_NODE = 1, DNNL_ATTENTION = 2 };

#define KL_MAX_ISA_INPUTS 64 /* wider nodes (a Concat of more) keep the reference */

struct kl_cpu_plan {
  int n_nodes;
  kl_cpu_choice *choice;
  void **state;
#if KL_HAVE_DNNL
  kl_dnnl_engine *dnnl; /* made when some node runs on oneDNN */
  unsigned char *on_dnnl; /* per node: DNNL_NODE, DNNL_ATTENTION or 0 */
  unsigned *cl_slots;   /* per node: the inputs it can read channels-last (oneDNN) */
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
  c->inplace = 0;
  if (kl_dnnl_attention_supports(g, &g->nodes[i])) {
    p->on_dnnl[i] = DNNL_ATTENTION;
    return kl_dnnl_attention_create(p->dnnl, &c->kernel, &p->state[i], e);
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

/* Activations passed between oneDNN convolutions (and the pooling and elementwise
 * nodes between them) stay channels-last instead of being reordered to plain after
 * one primitive and back before the next. */
static kiln_status choose_layouts(kl_cpu_plan *p, const kl_graph *g, kl_err *e) {
  bool *cl = calloc((size_t)g->n_values + 1, sizeof *cl);
  if (!cl) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory choosing layouts");
  for (int i = 0; i < g->n_nodes; i++)
    if (p->cl_slots[i]) cl[g->nodes[i].out[0]] = channels_last(p, g, g->nodes[i].out[0]);
  for (int i = 0; i < g->n_nodes; i++) {
    if (!p->cl_slots[i]) continue;
    const kl_node *n = &g->nodes[i];
    unsigned in = 0;
    for (int k = 0; k < n->n_in && k < 32; k++)
      if (n->in[k] >= 0 && cl[n->in[k]]) in |= 1u << k;
    bool cl_y = cl[n->out[0]];
    kl_dnnl_set_channels_last(p->state[i], in, cl_y);
    for (int k = 0; k < n->n_in && k < 32; k++) /* Y overwrites only what it matches */
      if (n->in[k] >= 0 && cl[n->in[k]] != cl_y) p->choice[i].inplace &= ~(1u << k);
  }
  free(cl);
  return KILN_OK;
}
#endif

/* kiln's kernel for the ISA level, when it has one for the node. Its kernels make no
 * in-place promise (backend.h has no way to say so yet), so none runs in place. */
static void isa_choice(kl_cpu_plan *p, const kl_graph *g, int i) {
  const kl_node *n = &g->nodes[i];
  const kl_type *in[KL_MAX_ISA_INPUTS];
  int n_in = n->n_in < KL_MAX_ISA_INPUTS ? n->n_in : KL_MAX_ISA_INPUTS;
  for (int k = 0; k < n_in; k++) in[k] = n->in[k] >= 0 ? &g->values[n->in[k]].type : NULL;
  kl_cpu_kernel k = kl_cpu_isa_kernel(n, in, n_in, kl_isa_level());
  if (!k.run) return;
  p->choice[i].kernel = k;
  p->choice[i].inplace = 0;
}

static kiln_status choose(kl_cpu_plan *p, const kl_graph *g, kl_cpu_kernels which, int i,
                          kl_err *e) {
  const kl_node *n = &g->nodes[i];
  p->choice[i] = reference_choice(n);
  if (which == KL_CPU_KERNELS_REF) return KILN_OK;
#if KL_HAVE_DNNL
  if (kl_dnnl_usable() &&
      (kl_dnnl_supports(g, n) || kl_dnnl_attention_supports(g, n)))
    return dnnl_choice(p, g, i, e);
#else
  (void)e;
#endif
  if (n->n_in <= KL_MAX_ISA_INPUTS) isa_choice(p, g, i);
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
#if KL_HAVE_DNNL
  p->cl_slots = calloc((size_t)g->n_nodes + 1, sizeof *p->cl_slots);
  p->on_dnnl = calloc((size_t)g->n_nodes + 1, sizeof *p->on_dnnl);
  if (!p->cl_slots || !p->on_dnnl) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the kernel plan");
#endif
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
#if KL_HAVE_DNNL
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
#endif
  free(p->choice);
  free(p->state);
  free(p);
}

const kl_cpu_choice *kl_cpu_plan_kernel(const kl_cpu_plan *p, int node) {
  return &p->choice[node];
}

void **kl_cpu_plan_state(kl_cpu_plan *p, int node) { return &p->state[node]; }

const char *kl_cpu_plan_ran(const kl_cpu_plan *p, int node) {
#if KL_HAVE_DNNL
  if (p->on_dnnl && p->on_dnnl[node] == DNNL_NODE && kl_dnnl_ran_reference(p->state[node]))
    return "ref";
  if (p->on_dnnl && p->on_dnnl[node] == DNNL_ATTENTION &&
      kl_dnnl_attention_ran_reference(p->state[node]))
    return "ref";
#endif
  return p->choice[node].kernel.name;
}
