/* Sessions: bind inputs, then run each node: concrete shape inference, a place for its
 * outputs from the memory plan, and the kernel chosen when the session was created.
 *
 * The first run, and any run in which a tensor outgrows its place, gives such tensors
 * buffers of their own (freed after their last use) and records every size; after it
 * the session plans one arena for those sizes (memplan.h), so that later runs with the
 * same shapes allocate nothing. Smaller shapes fit the plan as it is.
 *
 * With a device (option "device"), every node the device's backend supports runs there
 * and the rest on the CPU backend. A value lives where its producer ran (graph inputs and
 * constants on the host); it is copied to the device after it is made when a device node
 * reads it (constants once, at session creation), and from the device right after it is
 * made when a CPU node or the caller reads it. Device tensors get their memory from the
 * device's caching allocator and give it back after their last device use, so that
 * after the first run with a shape a run allocates nothing from the device itself. */
#include "runtime/session.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/isa.h"
#include "backends/gpu/gpu_backend.h"
#include "backends/gpu/level_zero.h"
#include "runtime/control.h"
#include "runtime/sequence.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bound_input {
  bool bound;
  const void *data;
  int rank; /* -1: an optional input set to hold none */
  int64_t dims[KL_MAX_RANK];
  void *owned; /* a sequence input's block, made by kiln_session_set_input_sequence */
} bound_input;

struct kiln_session {
  kl_err err;
  const kiln_model *model;
  kiln_options opts;
  kl_backend *cpu;     /* runs every node not placed on dev */
  kl_cpu_plan *kernels; /* cpu's plan */
  kl_backend *dev;     /* the device of option "device", NULL for none */
  unsigned char *place; /* per node: 1 when it runs on dev */
  unsigned *host_in;   /* per dev node: bit k when input k is read on the host */
  unsigned char *need; /* per value: NEED_HOST, NEED_DEV */
  bool *on_dev;        /* per value: made on dev */
  kl_tensor *dvals;    /* per value: its device tensor (data: &dbuf[v]) */
  kl_dev_buf *dbuf;    /* per value: its device memory */
  bool *downs;         /* per value: dbuf[v] is its own (not a view's, not freed yet) */
  int *dfree, *dfree_at; /* device buffers given back after node i: dfree[dfree_at[i]..] */
  int dev_nodes, uploads, downloads; /* placement counts (kl_session_placement) */
  /* the device's static plan: after a run in which some device tensor did not fit, one
   * arena from the allocator holds them all at planned offsets (as the host's does) */
  kl_memplan dplan;
  kl_memplan_node *drules; /* per node: device views */
  size_t *dseen;           /* per value: its device bytes in the current run */
  kl_dev_buf darena;
  bool dplanned;
  int dfallbacks;          /* device tensors of the last run that did not fit */
  kl_memplan_node *rules; /* per node: what its kernel allows the plan */
  kl_memplan plan;
  bool planned;        /* the plan has sizes from a run; else nothing fits it */
  int fallbacks;       /* tensors of the last run that did not fit the plan */
  void *arena;
  /* the arena a replan replaced: the last run's outputs may live in it, and the caller
   * reads them after the run, so it is freed only when the next run starts */
  void *stale_arena;
  kl_tensor *vals;     /* per value: the tensor of the current run */
  kl_type *types;      /* per value: its concrete type in the current run */
  size_t *seen;        /* per value: its size in bytes in the current run */
  void **heap;         /* per value: a buffer of its own when it did not fit */
  size_t heap_bytes;
  bool *as_view;       /* per node: its output was a view of its input */
  size_t const_bytes;
  bool counted;        /* counted in the model's sessions */
  bool pinned;         /* pin_threads: the threads were pinned for pinned_by's runs */
  pthread_t pinned_by;
  bound_input *inputs;
  int64_t *sym_sizes;  /* per graph symbol, bound from the inputs of a run */
  /* per-node scratch, sized for the widest node */
  const kl_tensor **kin;
  kl_tensor **kout;
  const kl_type **tin;
  const void **tdata;
  kl_type *tout;
  kl_io_info *outs;
  bool ran;
  bool profile, timed;
  double *t_start, *t_ms; /* per node, of the last profiled run */
  kl_control **ctl;    /* per node: an If's, Loop's or Scan's body sessions, else NULL */
  bool *values_node;   /* per node: it reads or makes a sequence or optional (run_values) */
  double work;         /* the current run's steps, by kl_node_work (when max_work is set) */
  /* per node: the class of kernel that takes its steps, for what each counts against
   * max_work (kl_work_weight): KL_WORK_UNIT, KL_WORK_REF or the ISA level's */
  kl_work_kernel *work_kernel;
  /* per node, of the last run (when max_work is set): its steps and their weight */
  double *node_steps, *node_weight;
};

enum { NEED_HOST = 1, NEED_DEV = 2 };

/* Whether node n reads or makes a sequence or an optional (the session runs it: the
 * sequence ops, and an Identity of such a value). */
static bool takes_values(const kl_graph *g, const kl_node *n) {
  if (kl_op_takes_sequences(n->op) && !kl_op_is_control(n->op) && n->op != KL_OP_Identity)
    return true;
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && (g->values[n->in[k]].type.seq || g->values[n->in[k]].type.opt))
      return true;
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0 && (g->values[n->out[k]].type.seq || g->values[n->out[k]].type.opt))
      return true;
  return false;
}

static kiln_status session_alloc(kiln_session *s) {
  const kl_graph *g = s->model->g;
  size_t nv = (size_t)g->n_values + 1, nn = (size_t)g->n_nodes + 1;
  int max_in = 1, max_out = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].n_in > max_in) max_in = g->nodes[i].n_in;
    if (g->nodes[i].n_out > max_out) max_out = g->nodes[i].n_out;
  }
  s->vals = calloc(nv, sizeof *s->vals);
  s->types = calloc(nv, sizeof *s->types);
  s->seen = calloc(nv, sizeof *s->seen);
  s->heap = calloc(nv, sizeof *s->heap);
  s->as_view = calloc(nn, sizeof *s->as_view);
  s->rules = calloc(nn, sizeof *s->rules);
  s->t_start = calloc(nn, sizeof *s->t_start);
  s->t_ms = calloc(nn, sizeof *s->t_ms);
  s->inputs = calloc((size_t)g->n_inputs + 1, sizeof *s->inputs);
  s->sym_sizes = calloc((size_t)g->n_symbols + 1, sizeof *s->sym_sizes);
  s->kin = calloc((size_t)max_in, sizeof *s->kin);
  s->tin = calloc((size_t)max_in, sizeof *s->tin);
  s->tdata = calloc((size_t)max_in, sizeof *s->tdata);
  s->kout = calloc((size_t)max_out, sizeof *s->kout);
  s->tout = calloc((size_t)max_out, sizeof *s->tout);
  s->outs = calloc((size_t)g->n_outputs + 1, sizeof *s->outs);
  s->ctl = calloc(nn, sizeof *s->ctl);
  s->work_kernel = calloc(nn, sizeof *s->work_kernel);
  s->node_steps = calloc(nn, sizeof *s->node_steps);
  s->node_weight = calloc(nn, sizeof *s->node_weight);
  s->values_node = calloc(nn, sizeof *s->values_node);
  for (int i = 0; s->values_node && i < g->n_nodes; i++)
    s->values_node[i] = takes_values(g, &g->nodes[i]);
  if (!s->ctl || !s->work_kernel || !s->node_steps || !s->node_weight || !s->values_node || !s->vals || !s->types || !s->seen || !s->heap || !s->as_view || !s->rules ||
      !s->t_start || !s->t_ms || !s->inputs || !s->sym_sizes || !s->kin || !s->tin ||
      !s->tdata || !s->kout || !s->tout || !s->outs)
    return kl_fail(&s->err, KILN_ERR_OUT_OF_MEMORY, "out of memory creating a session");
  for (int v = 0; v < g->n_values; v++) {
    const kl_value *val = &g->values[v];
    s->types[v].rank = -1;
    if (val->kind != KL_VALUE_CONST) continue;
    s->types[v] = val->type;
    s->vals[v].dtype = val->type.dtype;
    s->vals[v].rank = val->type.rank;
    for (int d = 0; d < val->type.rank; d++) s->vals[v].dims[d] = val->type.dims[d].size;
    s->vals[v].data = val->data;
    s->seen[v] = val->nbytes;
    s->const_bytes += val->nbytes;
  }
  return KILN_OK;
}

/* Kernels for every node, and what each allows the memory plan. */
static kiln_status session_plan_kernels(kiln_session *s) {
  const kl_graph *g = s->model->g;
  bool bf16 = s->opts.precision && strcmp(s->opts.precision, "bf16") == 0 && !s->dev;
  kl_cpu_kernels which = s->opts.reference ? KL_CPU_KERNELS_REF
                         : bf16            ? KL_CPU_KERNELS_FAST_BF16
                                           : KL_CPU_KERNELS_FAST;
  kl_isa isa = kl_isa_level();
  kl_work_kernel fast = isa >= KL_ISA_AVX512 ? KL_WORK_AVX512
                        : isa == KL_ISA_AVX2 ? KL_WORK_AVX2
                                             : KL_WORK_GENERIC;
  kiln_status st = kl_cpu_backend_create(g, which, s->place, &s->cpu, &s->err);
  if (st != KILN_OK) return st;
  s->kernels = kl_cpu_backend_plan(s->cpu);
  for (int i = 0; i < g->n_nodes; i++) {
    /* a device's kernel counts its steps once (not measured); a control or sequence
     * node runs no kernel of its own (its bodies' sessions weigh theirs) */
    s->work_kernel[i] = KL_WORK_UNIT;
    if (s->place && s->place[i]) continue; /* place_nodes set the device's */
    if (!kl_op_is_control(g->nodes[i].op) && !s->values_node[i])
      s->work_kernel[i] = kl_cpu_plan_is_reference(s->kernels, i) ? KL_WORK_REF : fast;
    const kl_cpu_choice *c = kl_cpu_plan_kernel(s->kernels, i);
    /* MatMulInteger's avx512 weight is oneDNN's (AMX, VNNI: 0.0012 ns a step); the
     * products oneDNN does not take (B uint8 or not constant) run on kiln's kernel, as
     * fast at every level as at avx2 (0.07 ns: an 8192^3 product of two generated uint8
     * matrices, weighed 1, ran 40 s) */
    if (s->work_kernel[i] == KL_WORK_AVX512 &&
        (g->nodes[i].op == KL_OP_MatMulInteger ||
         g->nodes[i].op == KL_OP_KilnMatMulIntegerToFloat) &&
        (!c->kernel.name || strncmp(c->kernel.name, "dnnl", 4) != 0))
      s->work_kernel[i] = KL_WORK_AVX2;
    s->rules[i] = (kl_memplan_node){c->inplace, c->view && g->nodes[i].n_out == 1};
  }
  if (s->opts.release_weights) /* the model is this session's alone (session_claim) */
    kl_cpu_plan_release_weights(s->kernels, (kl_graph *)g);
  return kl_memplan_init(&s->plan, g, &s->err);
}

/* Gives back every device buffer a value owns (constants too when all is set). */
static void release_device_values(kiln_session *s, bool all) {
  const kl_graph *g = s->model->g;
  for (int v = 0; s->downs && v < g->n_values; v++) {
    if (!s->downs[v] || (!all && g->values[v].kind == KL_VALUE_CONST)) continue;
    s->dev->iface->buffer_free(s->dev, &s->dbuf[v]);
    s->downs[v] = false;
  }
}

static void release_device(kiln_session *s) {
  if (!s->dev) return;
  release_device_values(s, true);
  s->dev->iface->buffer_free(s->dev, &s->darena);
  kl_memplan_clear(&s->dplan);
  free(s->drules);
  free(s->dseen);
  s->dev->iface->release(s->dev);
  s->dev = NULL;
  free(s->place);
  free(s->host_in);
  free(s->need);
  free(s->on_dev);
  free(s->dvals);
  free(s->dbuf);
  free(s->downs);
  free(s->dfree);
  free(s->dfree_at);
}

/* Value v's device tensor: its shape as the host's, its data the device range. */
static void dev_tensor(kiln_session *s, int v) {
  s->dvals[v] = s->vals[v];
  s->dvals[v].data = &s->dbuf[v];
}

/* Device memory for value v of `bytes` bytes: its place in the device arena when the
 * plan has one that holds it, else a block of its own from the allocator (counted, so
 * that the run ends with a new plan). */
static kiln_status device_place(kiln_session *s, int v, size_t bytes) {
  const kl_memplan *p = &s->dplan;
  int st_i = p->store[v]; /* -1: never in the arena (graph inputs) */
  s->dseen[v] = bytes;
  memset(&s->dbuf[v], 0, sizeof s->dbuf[v]);
  s->downs[v] = false;
  if (bytes == 0) return KILN_OK;
  if (s->dplanned && st_i >= 0 && bytes <= p->stores[st_i].size) {
    s->dbuf[v] = s->darena;
    s->dbuf[v].off += p->stores[st_i].offset;
    s->dbuf[v].size = bytes;
    return KILN_OK;
  }
  kiln_status st = s->dev->iface->buffer_alloc(s->dev, bytes, &s->dbuf[v], &s->err);
  if (st != KILN_OK) return st;
  s->downs[v] = true;
  s->dfallbacks += st_i >= 0;
  return KILN_OK;
}

/* After a run in which some device tensor did not fit: one arena for the sizes seen
 * (never smaller than planned before). On failure the session goes on with a block
 * per tensor. */
static void device_replan(kiln_session *s) {
  const kl_graph *g = s->model->g;
  for (int v = 0; v < g->n_values; v++)
    if (s->dplanned && s->dplan.bytes[v] > s->dseen[v]) s->dseen[v] = s->dplan.bytes[v];
  kl_err e = {0};
  s->dev->iface->buffer_free(s->dev, &s->darena);
  s->dplanned = false;
  kiln_status st = kl_memplan_build(&s->dplan, g, s->dseen, s->types, s->drules, &e);
  if (st == KILN_OK && s->dplan.arena_bytes)
    st = s->dev->iface->buffer_alloc(s->dev, s->dplan.arena_bytes, &s->darena, &e);
  if (st == KILN_OK) s->dplanned = true;
  else kl_memplan_build(&s->dplan, g, NULL, NULL, NULL, &e);
}

/* Copies host value v to the device: a constant into a block of its own (shared_weight
 * gives it to the model), anything else to its planned place. */
static kiln_status to_device(kiln_session *s, int v) {
  dev_tensor(s, v);
  size_t bytes = kl_tensor_nbytes(&s->vals[v]);
  if (bytes == 0) return KILN_OK;
  kl_backend *d = s->dev;
  kiln_status st;
  if (s->model->g->values[v].kind == KL_VALUE_CONST) { /* the model's, for every session */
    st = kl_gpu_backend_alloc_shared(d, bytes, &s->dbuf[v], &s->err);
    if (st != KILN_OK) return st;
  } else if ((st = device_place(s, v, bytes)) != KILN_OK) {
    return st;
  }
  st = d->iface->upload(d, &s->dbuf[v], s->vals[v].data, bytes, &s->err);
  if (st != KILN_OK) kl_err_prefix(&s->err, "value '%s'", s->model->g->values[v].name);
  return st;
}

/* The device buffers each node gives back after it: those of values whose last device
 * use it is (a view keeps its root's alive through its own uses). */
static kiln_status plan_device_frees(kiln_session *s) {
  const kl_graph *g = s->model->g;
  int *last = malloc(sizeof(int) * ((size_t)g->n_values + 1));
  s->dfree = malloc(sizeof(int) * ((size_t)g->n_values + 1));
  s->dfree_at = calloc((size_t)g->n_nodes + 2, sizeof(int));
  if (!last || !s->dfree || !s->dfree_at) {
    free(last);
    return kl_fail(&s->err, KILN_ERR_OUT_OF_MEMORY, "out of memory placing nodes");
  }
  for (int v = 0; v < g->n_values; v++) last[v] = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    if (!s->place[i]) continue;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0 && !(k < 32 && s->host_in[i] >> k & 1u)) last[n->in[k]] = i;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0 && last[n->out[k]] < i) last[n->out[k]] = i;
  }
  for (int i = g->n_nodes - 1; i >= 0; i--) { /* views: the root lives while they do */
    const kl_node *n = &g->nodes[i];
    if (s->place[i] && s->drules[i].view && last[n->out[0]] > last[n->in[0]])
      last[n->in[0]] = last[n->out[0]];
  }
  /* counting sort by the node that frees: each node's count at dfree_at[i + 1], prefix
   * sums, each value placed at its node's next slot (dfree_at[i] advancing to the start
   * of node i + 1), then the starts shifted back into place */
  for (int v = 0; v < g->n_values; v++)
    if (last[v] >= 0 && g->values[v].kind != KL_VALUE_CONST) s->dfree_at[last[v] + 1]++;
  for (int i = 0; i < g->n_nodes; i++) s->dfree_at[i + 1] += s->dfree_at[i];
  for (int v = 0; v < g->n_values; v++)
    if (last[v] >= 0 && g->values[v].kind != KL_VALUE_CONST)
      s->dfree[s->dfree_at[last[v]]++] = v;
  for (int i = g->n_nodes; i > 0; i--) s->dfree_at[i] = s->dfree_at[i - 1];
  s->dfree_at[0] = 0;
  free(last);
  return KILN_OK;
}

/* The model's entry for device spec, opening the device when no session has yet
 * (under the model's lock: sessions are made from many threads). */
static kiln_status model_device(kiln_session *s, const char *spec, kl_model_device **out,
                                kl_err *e) {
  kiln_model *m = (kiln_model *)s->model;
  kiln_status st = KILN_OK;
  *out = NULL;
  pthread_mutex_lock(&m->lock);
  for (int i = 0; i < m->n_devices && !*out; i++)
    if (strcmp(m->devices[i]->spec, spec) == 0) *out = m->devices[i];
  if (!*out) {
    kl_model_device *d = calloc(1, sizeof *d);
    kl_model_device **grown = realloc(m->devices, sizeof *grown * (size_t)(m->n_devices + 1));
    if (grown) m->devices = grown;
    if (d) d->spec = strdup(spec);
    if (d) d->weights = calloc((size_t)m->g->n_values + 1, sizeof *d->weights);
    if (!grown || !d || !d->spec || !d->weights)
      st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory opening device '%s'", spec);
    if (st == KILN_OK) st = kl_cl_device_open(spec, &d->dev, e);
    if (st == KILN_OK) {
      m->devices[m->n_devices++] = d;
      *out = d;
    } else if (d) {
      free(d->spec);
      free(d->weights);
      free(d);
    }
  }
  pthread_mutex_unlock(&m->lock);
  return st;
}

/* Constant v on the device: the model's copy, uploaded by the first session that
 * needs it; the session does not own it. */
static kiln_status shared_weight(kiln_session *s, kl_model_device *md, int v) {
  kiln_model *m = (kiln_model *)s->model;
  kiln_status st = KILN_OK;
  pthread_mutex_lock(&m->lock);
  if (!md->weights[v].mem && kl_tensor_nbytes(&s->vals[v]) > 0) {
    st = to_device(s, v);
    if (st == KILN_OK) md->weights[v] = s->dbuf[v];
    else kl_cl_device_free_buf(md->dev, &s->dbuf[v]);
  }
  pthread_mutex_unlock(&m->lock);
  dev_tensor(s, v);
  s->dbuf[v] = md->weights[v];
  s->downs[v] = false;
  return st;
}

/* Option "device": the device's backend takes every node it supports; the CPU the
 * rest. Constants that device nodes read are the model's copies on the device. */

static kiln_status place_nodes(kiln_session *s) {
  const char *spec = s->opts.device;
  if (!spec || strcmp(spec, "cpu") == 0) return KILN_OK;
  const kl_graph *g = s->model->g;
  if (strncmp(spec, "level-zero", 10) == 0) return kl_ze_open(spec, &s->err);
  bool any = strcmp(spec, "auto") == 0;
  kl_err quiet = {0};
  kl_model_device *md = NULL;
  kiln_status st = model_device(s, any ? "opencl" : spec, &md, any ? &quiet : &s->err);
  if (st == KILN_OK)
    st = kl_gpu_backend_create(md->dev, g, s->opts.precision, &s->dev, any ? &quiet : &s->err);
  if (st != KILN_OK) return any ? KILN_OK : st; /* auto: the CPU when no device opens */
  size_t nv = (size_t)g->n_values + 1, nn = (size_t)g->n_nodes + 1;
  s->place = calloc(nn, 1);
  s->host_in = calloc(nn, sizeof *s->host_in);
  s->need = calloc(nv, 1);
  s->on_dev = calloc(nv, sizeof *s->on_dev);
  s->dvals = calloc(nv, sizeof *s->dvals);
  s->dbuf = calloc(nv, sizeof *s->dbuf);
  s->downs = calloc(nv, sizeof *s->downs);
  s->drules = calloc(nn, sizeof *s->drules);
  s->dseen = calloc(nv, sizeof *s->dseen);
  if (!s->place || !s->host_in || !s->need || !s->on_dev || !s->dvals || !s->dbuf ||
      !s->downs || !s->drules || !s->dseen)
    return kl_fail(&s->err, KILN_ERR_OUT_OF_MEMORY, "out of memory placing nodes");
  if ((st = kl_memplan_init(&s->dplan, g, &s->err)) != KILN_OK) return st;
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    bool view = false;
    if (s->values_node[i] || !s->dev->iface->supports_node(s->dev, g, i)) continue;
    s->dev->iface->node_io(s->dev, g, i, &s->host_in[i], &view);
    if (view && !s->on_dev[n->in[0]]) { /* a view of a host value stays a host view */
      s->host_in[i] = 0;
      continue;
    }
    s->place[i] = 1;
    s->dev_nodes++;
    s->rules[i] = (kl_memplan_node){0, false}; /* its host copies share nothing */
    s->drules[i] = (kl_memplan_node){0, view};
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) s->on_dev[n->out[k]] = true;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0)
        s->need[n->in[k]] |= s->place[i] && !(k < 32 && s->host_in[i] >> k & 1u) ? NEED_DEV : NEED_HOST;
  }
  for (int i = 0; i < g->n_outputs; i++) s->need[g->outputs[i]] |= NEED_HOST;
  for (int v = 0; v < g->n_values; v++) {
    if (s->on_dev[v] && (s->need[v] & NEED_HOST)) s->downloads++;
    if (!s->on_dev[v] && (s->need[v] & NEED_DEV) && g->values[v].kind != KL_VALUE_CONST)
      s->uploads++;
    if (g->values[v].kind == KL_VALUE_CONST && (s->need[v] & NEED_DEV) &&
        (st = shared_weight(s, md, v)) != KILN_OK)
      return st;
  }
  return plan_device_frees(s);
}

/* Device memory in use for the session: its tensors and what its kernels keep (the
 * session's allocator, live blocks), and the model's weights on the device. */
static size_t device_bytes(const kiln_session *s) {
  if (!s->dev) return 0;
  kl_dev_alloc_stats own, shared;
  kl_gpu_backend_stats(s->dev, &own);
  kl_gpu_backend_shared_stats(s->dev, &shared);
  return own.allocated_bytes + shared.allocated_bytes;
}

/* The model's weights still held (those a release_weights session freed are not), what
 * the kernels hold (oneDNN's packed weights, scratchpads and staged copies), and the
 * device memory of a session with a device (device_bytes). */
static size_t fixed_bytes(const kiln_session *s) {
  const kl_graph *g = s->model->g;
  size_t n = kl_cpu_plan_held_bytes(s->kernels) + device_bytes(s);
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == KL_VALUE_CONST && g->values[v].data) n += g->values[v].nbytes;
  return n;
}

/* memory_limit before any run: the weights, and oneDNN's reordered copies of those it
 * packs (which replace the model's copy in a release_weights session). */
static kiln_status check_weights_limit(kiln_session *s) {
  if (!s->opts.memory_limit) return KILN_OK;
  size_t packed =
      s->opts.release_weights ? 0 : kl_cpu_plan_packed_bytes(s->kernels, s->model->g);
  size_t dev = device_bytes(s); /* the weights place_nodes put on the device */
  if (s->const_bytes + packed + dev <= (uint64_t)s->opts.memory_limit) return KILN_OK;
  if (dev)
    return kl_fail(&s->err, KILN_ERR_LIMIT, "the model's weights (%zu bytes), oneDNN's "
                   "reordered copies of them (%zu bytes) and their copies on device %s (%zu "
                   "bytes) exceed the memory limit of %" PRId64 " bytes", s->const_bytes,
                   packed, s->dev->iface->device_name(s->dev), dev, s->opts.memory_limit);
  return kl_fail(&s->err, KILN_ERR_LIMIT, "the model's weights (%zu bytes) and oneDNN's "
                 "reordered copies of them (%zu bytes) exceed the memory limit of %" PRId64
                 " bytes", s->const_bytes, packed, s->opts.memory_limit);
}

/* Counts the session in the model's, refusing it when a release_weights session took
 * the weights, or when it is one and others exist. */
static kiln_status session_claim(kiln_session *s) {
  kiln_model *m = (kiln_model *)s->model;
  kiln_status st = KILN_OK;
  pthread_mutex_lock(&m->lock);
  if (m->claimed)
    st = kl_fail(&s->err, KILN_ERR_STATE, "a session created with release_weights=1 took "
                 "this model's weights over; load the model again for another session");
  else if (s->opts.release_weights && m->sessions > 0)
    st = kl_fail(&s->err, KILN_ERR_STATE, "release_weights=1 needs the model to itself, "
                 "and it has %d other session(s)", m->sessions);
  if (st == KILN_OK) {
    m->sessions++;
    m->claimed = s->opts.release_weights != 0;
    s->counted = true;
  }
  pthread_mutex_unlock(&m->lock);
  return st;
}

/* Undoes session_claim for a session that failed to be created (it ran nothing, so
 * it released no weights). */
static void session_unclaim(kiln_session *s) {
  kiln_model *m = (kiln_model *)s->model;
  pthread_mutex_lock(&m->lock);
  m->sessions--;
  if (s->opts.release_weights) m->claimed = false;
  pthread_mutex_unlock(&m->lock);
  s->counted = false;
}

/* Puts the file and node i before the session's message: "model.onnx: node 'r'
 * (Reshape): ...". A body's nodes go without the file, after the node that runs the body:
 * "model.onnx: node 'l' (Loop): in the body's iteration 0: node 'r' (Reshape): ...", as
 * the messages of loading say it. */
static void prefix_node(kiln_session *s, int i) {
  const kl_graph *g = s->model->g;
  char d[256];
  kl_node_describe(g, &g->nodes[i], d, sizeof d);
  if (s->model->body) kl_err_prefix(&s->err, "%s", d);
  else kl_err_prefix(&s->err, "%s: %s", g->source, d);
}

/* Sessions for the bodies of every If, Loop and Scan. */
static kiln_status make_controls(kiln_session *s) {
  const kl_graph *g = s->model->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    if (!kl_op_is_control(n->op)) continue;
    kiln_status st = kl_control_create(n, &s->opts, &s->ctl[i], &s->err);
    if (st != KILN_OK) {
      prefix_node(s, i);
      return st;
    }
  }
  return KILN_OK;
}

kiln_status kiln_session_create(const kiln_model *model, const kiln_options *options,
                                kiln_session **out) {
  if (!out) return KILN_ERR_INVALID_ARGUMENT;
  kiln_session *s = calloc(1, sizeof *s);
  *out = s;
  if (!s) return KILN_ERR_OUT_OF_MEMORY;
  if (!model) return kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "model is NULL");
  if (model->err.code != KILN_OK || !model->g || !model->outputs)
    return kl_fail(&s->err, KILN_ERR_STATE, "the model did not load: %s", model->err.msg);
  s->model = model;
  kiln_status st = kl_options_copy(&s->opts, options ? options : &model->opts, &s->err);
  if (st == KILN_OK && s->opts.release_weights && s->opts.reference)
    st = kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "release_weights needs the fast "
                 "kernels: the reference kernels read the weights as the model holds them");
  if (st == KILN_OK && s->opts.pin_threads)
    st = kl_cpu_pin_check(s->opts.threads, &s->err);
  if (st == KILN_OK) st = kl_cpu_threads_check(s->opts.threads, &s->err);
  if (st == KILN_OK) st = session_claim(s);
  if (st == KILN_OK) st = session_alloc(s);
  if (st == KILN_OK) st = place_nodes(s); /* first: the CPU plans around the device */
  if (st == KILN_OK && s->opts.precision && strcmp(s->opts.precision, "tf32") == 0 && !s->dev)
    st = kl_fail(&s->err, KILN_ERR_UNSUPPORTED, "option 'precision': tf32 is a GPU's (tensor "
                 "cores); this session runs on the CPU (device '%s'), which computes float32: "
                 "use fp32 or auto", s->opts.device && *s->opts.device ? s->opts.device : "cpu");
  if (st == KILN_OK && s->opts.precision && strcmp(s->opts.precision, "bf16") == 0) {
    if (s->opts.reference)
      st = kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "option 'precision': bf16 runs on the "
                   "fast kernels; the reference kernels (option 'reference') compute float32");
    else if (!s->dev)
      st = kl_cpu_bf16_check(&s->err);
  }
  if (st == KILN_OK) st = session_plan_kernels(s);
  if (st == KILN_OK) st = check_weights_limit(s);
  if (st == KILN_OK) st = make_controls(s);
  if (st != KILN_OK && s->counted) session_unclaim(s);
  return st;
}

/* Frees every buffer a tensor got outside the plan (the last run's outputs among them). */
static void release_heap(kiln_session *s) {
  for (int v = 0; s->heap && v < s->model->g->n_values; v++) {
    free(s->heap[v]);
    s->heap[v] = NULL;
  }
  s->heap_bytes = 0;
}

void kiln_session_free(kiln_session *s) {
  if (!s) return;
  if (s->model) release_heap(s);
  if (s->counted) {
    kiln_model *m = (kiln_model *)s->model;
    pthread_mutex_lock(&m->lock);
    m->sessions--;
    pthread_mutex_unlock(&m->lock);
  }
  release_device(s);
  for (int i = 0; s->ctl && i < s->model->g->n_nodes; i++) kl_control_free(s->ctl[i]);
  free(s->ctl);
  free(s->values_node);
  free(s->work_kernel);
  free(s->node_steps);
  free(s->node_weight);
  if (s->cpu) s->cpu->iface->release(s->cpu);
  kl_memplan_clear(&s->plan);
  free(s->arena);
  free(s->stale_arena);
  free(s->vals);
  free(s->types);
  free(s->seen);
  free(s->heap);
  free(s->as_view);
  free(s->rules);
  free(s->t_start);
  free(s->t_ms);
  for (int i = 0; s->inputs && s->model && i < s->model->g->n_inputs; i++)
    free(s->inputs[i].owned);
  free(s->inputs);
  free(s->sym_sizes);
  free(s->kin);
  free(s->tin);
  free(s->tdata);
  free(s->kout);
  free(s->tout);
  free(s->outs);
  kl_options_clear(&s->opts);
  free(s);
}

const char *kiln_session_error(const kiln_session *s) { return s ? s->err.msg : "session is NULL"; }

static int find_input(const kl_graph *g, const char *name) {
  for (int i = 0; i < g->n_inputs; i++)
    if (strcmp(g->values[g->inputs[i]].name, name) == 0) return i;
  return -1;
}

static void format_dims(int rank, const int64_t *dims, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? "," : "", dims[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
}

/* The index of input `name` of s's model, for the kiln_session_set_input* calls (the
 * session's last error cleared); -1 with the failure recorded. */
static int input_to_set(kiln_session *s, const char *name) {
  kl_err_clear(&s->err);
  if (!s->model) return kl_fail(&s->err, KILN_ERR_STATE, "the session was not created"), -1;
  if (!name) return kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "input name is NULL"), -1;
  int i = find_input(s->model->g, name);
  if (i < 0) kl_fail(&s->err, KILN_ERR_NOT_FOUND, "the model has no input '%s'", name);
  return i;
}

static kiln_status bind_tensor(kiln_session *s, int i, kiln_dtype dtype, int rank,
                               const int64_t *dims, const void *data, size_t size_bytes);

kiln_status kiln_session_set_input(kiln_session *s, const char *name, kiln_dtype dtype,
                                   int rank, const int64_t *dims, const void *data,
                                   size_t size_bytes) {
  if (!s) return KILN_ERR_INVALID_ARGUMENT;
  int i = input_to_set(s, name);
  return i < 0 ? s->err.code : bind_tensor(s, i, dtype, rank, dims, data, size_bytes);
}

/* Input i of s's model takes the caller's tensor, after every check of its dtype and
 * shape against the model's. */
static kiln_status bind_tensor(kiln_session *s, int i, kiln_dtype dtype, int rank,
                               const int64_t *dims, const void *data, size_t size_bytes) {
  const kl_graph *g = s->model->g;
  const char *name = g->values[g->inputs[i]].name;
  const kl_type *t = &g->values[g->inputs[i]].type;
  if (t->seq)
    return kl_fail(&s->err, KILN_ERR_DTYPE, "input '%s' is a sequence of %s tensors: set it "
                   "with kiln_session_set_input_sequence", name, kl_dtype_name(t->dtype));
  if ((kl_dtype)dtype != t->dtype)
    return kl_fail(&s->err, KILN_ERR_DTYPE, "input '%s': expected %s, got %s", name,
                   kl_dtype_name(t->dtype), kl_dtype_name((kl_dtype)dtype));
  if (rank < 0 || rank > KL_MAX_RANK || (rank > 0 && !dims))
    return kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "input '%s': bad rank %d", name, rank);
  char want[256], got[256];
  kl_type_format(g, t, want, sizeof want);
  format_dims(rank, dims, got, sizeof got);
  if (t->rank >= 0 && rank != t->rank)
    return kl_fail(&s->err, KILN_ERR_SHAPE, "input '%s': expected shape %s, got %s", name,
                   want, got);
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) {
    if (dims[d] < 0)
      return kl_fail(&s->err, KILN_ERR_SHAPE, "input '%s': invalid shape %s", name, got);
    if (t->rank >= 0 && t->dims[d].size >= 0 && t->dims[d].size != dims[d])
      return kl_fail(&s->err, KILN_ERR_SHAPE, "input '%s': expected shape %s, got %s "
                     "(dim %d)", name, want, got, d);
  }
  if (!kl_dims_fit(rank, dims, &numel))
    return kl_fail(&s->err, KILN_ERR_LIMIT, "input '%s': shape %s is too large (its dims' "
                   "product, an empty dim counted as 1, is over 2^59)", name, got);
  size_t bytes;
  if (kl_mul_overflow_size((size_t)numel, kl_dtype_size(t->dtype), &bytes) ||
      bytes != size_bytes)
    return kl_fail(&s->err, KILN_ERR_SHAPE, "input '%s': shape %s of %s needs %zu bytes, "
                   "the buffer has %zu", name, got, kl_dtype_name(t->dtype), bytes, size_bytes);
  if (bytes && !data)
    return kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "input '%s': data is NULL", name);
  size_t bad = kl_dtype_find_bad_small(t->dtype, data, bytes);
  if (bad < bytes)
    return kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "input '%s': element %zu is 0x%02x, "
                   "not a %s value (one element a byte: %s)", name, bad,
                   ((const uint8_t *)data)[bad], kl_dtype_name(t->dtype),
                   t->dtype == KL_I4 || t->dtype == KL_I2 ? "sign-extended" : "in the low bits");
  bound_input *b = &s->inputs[i];
  free(b->owned);
  b->owned = NULL;
  b->bound = true;
  b->data = data;
  b->rank = rank;
  if (rank > 0) memcpy(b->dims, dims, sizeof(int64_t) * (size_t)rank);
  return KILN_OK;
}

kiln_status kiln_session_set_input_sequence(kiln_session *s, const char *name, int64_t count,
                                            const kiln_tensor_info *elements,
                                            const void *const *data) {
  if (!s) return KILN_ERR_INVALID_ARGUMENT;
  int i = input_to_set(s, name);
  if (i < 0) return s->err.code;
  const kl_graph *g = s->model->g;
  const kl_type *t = &g->values[g->inputs[i]].type;
  if (!t->seq)
    return kl_fail(&s->err, KILN_ERR_DTYPE, "input '%s' is not a sequence: set it with "
                   "kiln_session_set_input", name);
  if (count < 0 || count > (INT64_C(1) << 24) || (count && (!elements || !data)))
    return kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "input '%s': %lld elements%s", name,
                   (long long)count, count > 0 ? " without their descriptions or data" : "");
  kl_tensor *items = calloc((size_t)count + 1, sizeof *items);
  size_t *bytes = calloc((size_t)count + 1, sizeof *bytes);
  const kl_tensor **shapes = calloc((size_t)count + 1, sizeof *shapes);
  kiln_status st = items && bytes && shapes ? KILN_OK
                       : kl_fail(&s->err, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int64_t k = 0; st == KILN_OK && k < count; k++) {
    const kiln_tensor_info *x = &elements[k];
    int64_t numel;
    if ((kl_dtype)x->dtype != t->dtype || x->rank < 0 || x->rank > KL_MAX_RANK ||
        (x->rank > 0 && !x->dims) || !kl_dims_fit(x->rank, x->dims, &numel) ||
        (numel && !data[k])) {
      st = kl_fail(&s->err, KILN_ERR_SHAPE, "input '%s' element %lld: expected a %s tensor "
                   "of rank 0 to %d with data, got %s of rank %d", name, (long long)k,
                   kl_dtype_name(t->dtype), KL_MAX_RANK, kl_dtype_name((kl_dtype)x->dtype),
                   x->rank);
      break;
    }
    items[k] = (kl_tensor){.dtype = t->dtype, .rank = x->rank, .data = (void *)data[k]};
    if (x->rank) memcpy(items[k].dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
    bytes[k] = kl_tensor_nbytes(&items[k]);
    shapes[k] = &items[k];
  }
  size_t total = st == KILN_OK ? kl_seq_block_bytes(count, bytes) : 0;
  void *block = NULL;
  if (st == KILN_OK && (!total || posix_memalign(&block, KL_SEQ_ALIGN, total) != 0))
    st = kl_fail(&s->err, total ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_LIMIT, "input '%s': a "
                 "sequence of %lld elements is too large", name, (long long)count);
  if (st == KILN_OK) {
    kl_seq_layout(block, count, shapes);
    for (int64_t k = 0; k < count; k++)
      if (bytes[k]) memcpy((char *)block + ((kl_seq *)block)->items[k].offset, items[k].data,
                           bytes[k]);
    bound_input *b = &s->inputs[i];
    free(b->owned);
    b->owned = block;
    b->bound = true;
    b->data = block;
    b->rank = 0;
  }
  free(items);
  free(bytes);
  free(shapes);
  return st;
}

kiln_status kiln_session_set_input_none(kiln_session *s, const char *name) {
  if (!s) return KILN_ERR_INVALID_ARGUMENT;
  int i = input_to_set(s, name);
  if (i < 0) return s->err.code;
  const kl_graph *g = s->model->g;
  if (!g->values[g->inputs[i]].type.opt)
    return kl_fail(&s->err, KILN_ERR_DTYPE, "input '%s' is not optional: it must hold a "
                   "value", name);
  bound_input *b = &s->inputs[i];
  free(b->owned);
  b->owned = NULL;
  b->bound = true;
  b->data = NULL;
  b->rank = -1;
  return KILN_OK;
}

/* Internal (control.c): value t, of the body's graph type, as input `index` of body
 * session s: a tensor with the public checks, a sequence or none as it is. */
kiln_status kl_session_bind_value(kiln_session *s, int index, const kl_tensor *t) {
  const kl_graph *g = s->model->g;
  const kl_value *v = &g->values[g->inputs[index]];
  if (!v->type.seq && t->rank >= 0) {
    kl_err_clear(&s->err);
    return bind_tensor(s, index, (kiln_dtype)t->dtype, t->rank, t->dims, t->data,
                       kl_tensor_nbytes(t));
  }
  bound_input *b = &s->inputs[index];
  free(b->owned);
  b->owned = NULL;
  b->bound = true;
  b->data = t->data;
  b->rank = t->rank < 0 ? -1 : 0;
  return KILN_OK;
}

const kl_tensor *kl_session_output_value(const kiln_session *s, int k) {
  return &s->vals[s->model->g->outputs[k]];
}

/* Give every graph input its tensor, binding symbolic dims consistently. */
static kiln_status bind_inputs(kiln_session *s) {
  const kl_graph *g = s->model->g;
  for (int k = 0; k < g->n_symbols; k++) s->sym_sizes[k] = -1;
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    const kl_type *t = &g->values[v].type;
    const bound_input *b = &s->inputs[i];
    if (!b->bound)
      return kl_fail(&s->err, KILN_ERR_STATE, "input '%s' was not set",
                     g->values[v].name);
    if (t->seq || b->rank < 0) { /* a sequence's block, or an optional holding none */
      s->vals[v] = (kl_tensor){.dtype = t->dtype, .rank = b->rank, .data = (void *)b->data};
      s->types[v] = *t;
      s->seen[v] = 0;
      continue;
    }
    for (int d = 0; t->rank >= 0 && d < b->rank; d++) {
      int sym = t->dims[d].size < 0 ? t->dims[d].sym : -1;
      if (sym < 0) continue;
      if (s->sym_sizes[sym] < 0) s->sym_sizes[sym] = b->dims[d];
      else if (s->sym_sizes[sym] != b->dims[d])
        return kl_fail(&s->err, KILN_ERR_SHAPE, "input '%s' dim %d ('%s') is %" PRId64
                       " but another input set '%s' to %" PRId64, g->values[v].name, d,
                       g->symbols[sym], b->dims[d], g->symbols[sym], s->sym_sizes[sym]);
    }
    kl_tensor *x = &s->vals[v];
    x->dtype = t->dtype;
    x->rank = b->rank;
    memcpy(x->dims, b->dims, sizeof(int64_t) * (size_t)b->rank);
    x->data = (void *)b->data; /* kernels never write their inputs */
    s->types[v].dtype = t->dtype;
    kl_type_set_shape(&s->types[v], b->rank, b->dims);
    s->seen[v] = kl_tensor_nbytes(x);
    if (s->dev && (s->need[v] & NEED_DEV)) {
      kiln_status st = to_device(s, v);
      if (st != KILN_OK) return st;
    }
  }
  return KILN_OK;
}

/* A buffer of its own for value v, which did not fit the plan. */
static kiln_status fallback_buffer(kiln_session *s, int k, int v, size_t bytes) {
  size_t total = s->heap_bytes + bytes + (s->planned ? s->plan.arena_bytes : 0);
  size_t fixed = s->opts.memory_limit ? fixed_bytes(s) : 0;
  if (s->opts.memory_limit && total + fixed > (uint64_t)s->opts.memory_limit) {
    size_t dev = device_bytes(s); /* fixed's device share, for the message */
    return kl_fail(&s->err, KILN_ERR_LIMIT, "output %d '%s' (%zu bytes) would take the "
                   "session to %zu bytes (weights, oneDNN's packed weights and scratchpads "
                   "%zu, device memory %zu), over the memory limit of %" PRId64, k,
                   s->model->g->values[v].name, bytes, total + fixed, fixed - dev, dev,
                   s->opts.memory_limit);
  }
  void *p = NULL;
  if (posix_memalign(&p, KL_MEMPLAN_ALIGN, bytes) != 0)
    return kl_fail(&s->err, KILN_ERR_OUT_OF_MEMORY, "out of memory for output %d (%zu "
                   "bytes)", k, bytes);
  s->heap[v] = p;
  s->heap_bytes += bytes;
  s->vals[v].data = p;
  s->fallbacks++;
  return KILN_OK;
}

/* Where the plan puts value v of `bytes` bytes, or NULL when it does not fit: its
 * input's bytes for a view (*view set), else its storage in the arena (shared with an
 * input only when that input has v's type, as the in-place kernel needs). */
static void *planned_place(kiln_session *s, int v, size_t bytes, bool *view) {
  const kl_memplan *p = &s->plan;
  int u = p->view_of[v];
  if (u >= 0) {
    *view = kl_tensor_nbytes(&s->vals[u]) == bytes && s->vals[u].dtype == s->types[v].dtype;
    return *view ? s->vals[u].data : NULL;
  }
  int st = p->store[v];
  if (st < 0 || !s->planned || bytes > p->stores[st].size) return NULL;
  u = p->inplace_of[v];
  if (u >= 0 && !kl_type_is_concrete(&s->types[u])) return NULL;
  if (u >= 0 && (s->types[u].dtype != s->types[v].dtype || s->types[u].rank != s->types[v].rank))
    return NULL;
  for (int d = 0; u >= 0 && d < s->types[v].rank; d++)
    if (s->types[u].dims[d].size != s->types[v].dims[d].size) return NULL;
  return (char *)s->arena + p->stores[st].offset;
}

static kiln_status device_output(kiln_session *s, int i, int k, size_t bytes, bool *view);

/* Shape output k of node n from the inferred type and give it its bytes: on the host,
 * or, for a node on the device, there (and on the host too when the host reads it). */
static kiln_status prepare_output(kiln_session *s, int i, int k, bool *view) {
  const kl_node *n = &s->model->g->nodes[i];
  int v = n->out[k];
  const kl_type *t = &s->tout[k];
  int64_t numel;
  size_t bytes;
  if (!kl_type_is_concrete(t))
    return kl_fail(&s->err, KILN_ERR_INTERNAL, "output %d has no concrete shape", k);
  if (!kl_type_numel(t, &numel)) /* the input shapes of this run make it too large */
    return kl_fail(&s->err, KILN_ERR_LIMIT, "output %d '%s' would be too large (its dims' "
                   "product, an empty dim counted as 1, over 2^59)", k,
                   s->model->g->values[v].name);
  if (kl_mul_overflow_size((size_t)numel, kl_dtype_size(t->dtype), &bytes) ||
      bytes > (uint64_t)s->opts.max_tensor_bytes)
    return kl_fail(&s->err, KILN_ERR_LIMIT, "output %d '%s' would need %" PRId64 " elements "
                   "of %s, over the tensor limit of %" PRId64 " bytes", k,
                   s->model->g->values[v].name, numel, kl_dtype_name(t->dtype),
                   s->opts.max_tensor_bytes);
  kl_tensor *x = &s->vals[v];
  x->dtype = t->dtype;
  x->rank = t->rank;
  for (int d = 0; d < t->rank; d++) x->dims[d] = t->dims[d].size;
  s->types[v] = *t;
  s->seen[v] = bytes;
  x->data = NULL;
  *view = false;
  if (s->dev && s->place[i]) {
    kiln_status st = device_output(s, i, k, bytes, view);
    if (st != KILN_OK || !(s->need[v] & NEED_HOST)) {
      s->seen[v] = 0; /* no host copy: nothing in the host's plan */
      return st;
    }
    bool host_view = false;
    if (bytes == 0) return KILN_OK;
    if ((x->data = planned_place(s, v, bytes, &host_view)) && !host_view) return KILN_OK;
    x->data = NULL;
    return fallback_buffer(s, k, v, bytes);
  }
  if (bytes == 0) return KILN_OK; /* kernels accept NULL data for empty tensors */
  if ((x->data = planned_place(s, v, bytes, view))) return KILN_OK;
  *view = false;
  return fallback_buffer(s, k, v, bytes);
}

/* Output k of device node i: a view of input 0's device memory when the node is a
 * view (*view set), else memory of its own. */
static kiln_status device_output(kiln_session *s, int i, int k, size_t bytes, bool *view) {
  const kl_graph *g = s->model->g;
  const kl_node *n = &g->nodes[i];
  int v = n->out[k];
  bool is_view = s->drules[i].view; /* node_io's, from place_nodes */
  dev_tensor(s, v);
  memset(&s->dbuf[v], 0, sizeof s->dbuf[v]);
  s->downs[v] = false;
  if (is_view && k == 0) {
    s->dbuf[v] = s->dbuf[n->in[0]];
    s->dseen[v] = bytes;
    *view = true;
    return KILN_OK;
  }
  kiln_status st = device_place(s, v, bytes);
  if (st != KILN_OK) kl_err_prefix(&s->err, "output %d '%s'", k, g->values[v].name);
  return st;
}

/* After node i: its outputs' copies, device to host or host to device, as their
 * readers need. */
static kiln_status copy_outputs(kiln_session *s, int i) {
  const kl_node *n = &s->model->g->nodes[i];
  for (int k = 0; k < n->n_out; k++) {
    int v = n->out[k];
    if (v < 0) continue;
    kiln_status st = KILN_OK;
    if (s->place[i] && (s->need[v] & NEED_HOST)) {
      size_t bytes = kl_tensor_nbytes(&s->vals[v]);
      if (bytes)
        st = s->dev->iface->download(s->dev, s->vals[v].data, &s->dbuf[v], bytes, &s->err);
    } else if (!s->place[i] && (s->need[v] & NEED_DEV)) {
      st = to_device(s, v);
    }
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

/* Buffers of values whose storage ends at node i (only those outside the plan). */
static void release_after(kiln_session *s, int i) {
  const kl_memplan *p = &s->plan;
  for (int j = p->release_at[i]; j < p->release_at[i + 1]; j++) {
    int v = p->release[j];
    if (!s->heap[v]) continue;
    free(s->heap[v]);
    s->heap[v] = NULL;
    s->heap_bytes -= s->seen[v];
  }
  for (int j = s->dev ? s->dfree_at[i] : 0; s->dev && j < s->dfree_at[i + 1]; j++) {
    int v = s->dfree[j];
    if (!s->downs[v]) continue;
    s->dev->iface->buffer_free(s->dev, &s->dbuf[v]);
    s->downs[v] = false;
  }
}

/* A node asking for more work than max_work allows (its estimate from the shapes it has
 * now: its inputs' alone when n_out is 0, each step weighed by what it costs on the
 * node's kernel) is refused before it starts: a file of a few hundred bytes could ask
 * for 10^18 steps. */
static kiln_status check_work(kiln_session *s, int i, int n_out) {
  if (s->opts.max_work <= 0) return KILN_OK;
  const kl_node *n = &s->model->g->nodes[i];
  double steps = kl_node_work(n, n->n_in, s->kin, n_out,
                              n_out ? (const kl_tensor *const *)s->kout : NULL);
  kl_work_kernel k = s->work_kernel[i];
  double weight = kl_work_weight(n, n->n_in, s->kin, k), work = steps * weight;
  if (n_out) {
    s->work += work;
    s->node_steps[i] = steps;
    s->node_weight[i] = weight;
  }
  if (work <= (double)s->opts.max_work) return KILN_OK;
  if (weight == 1)
    return kl_fail(&s->err, KILN_ERR_LIMIT, "about %.3g steps for these shapes, over "
                   "max_work %lld (option max_work, `--max-work N`; 0 lifts the bound)",
                   work, (long long)s->opts.max_work);
  return kl_fail(&s->err, KILN_ERR_LIMIT, "about %.3g steps for these shapes, over max_work "
                 "%lld: %s, whose steps count %g times a dense product's (%.3g in all; "
                 "option max_work, `--max-work N`; 0 lifts the bound)", steps,
                 (long long)s->opts.max_work,
                 k == KL_WORK_REF ? "kiln's reference kernel runs it, a scalar loop"
                                  : "an optimized kernel runs it",
                 weight, work);
}

/* A sequence's block or an optional's none, for output k of node i: memory of its own
 * (no arena: its size is the data's), freed after its last use or with the run. */
static kiln_status value_place(kiln_session *s, int i, int k, const kl_tensor *shape,
                               size_t bytes, kl_tensor **out) {
  const kl_graph *g = s->model->g;
  int v = g->nodes[i].out[k];
  size_t fixed = s->opts.memory_limit ? fixed_bytes(s) : 0;
  size_t arena = s->planned ? s->plan.arena_bytes : 0;
  if (s->opts.memory_limit && fixed + arena + s->heap_bytes + bytes > (uint64_t)s->opts.memory_limit)
    return kl_fail(&s->err, KILN_ERR_LIMIT, "output %d '%s' (%zu bytes) would take the "
                   "session over the memory limit of %" PRId64 " (device memory %zu of it)",
                   k, g->values[v].name, bytes, s->opts.memory_limit, device_bytes(s));
  if (bytes > (uint64_t)s->opts.max_tensor_bytes)
    return kl_fail(&s->err, KILN_ERR_LIMIT, "output %d '%s' would need %zu bytes, over the "
                   "tensor limit of %" PRId64 " bytes", k, g->values[v].name, bytes,
                   s->opts.max_tensor_bytes);
  void *p = NULL;
  if (bytes && posix_memalign(&p, KL_MEMPLAN_ALIGN, bytes) != 0)
    return kl_fail(&s->err, KILN_ERR_OUT_OF_MEMORY, "out of memory for output %d (%zu bytes)",
                   k, bytes);
  free(s->heap[v]);
  s->heap[v] = p;
  s->heap_bytes += bytes;
  s->vals[v] = *shape;
  s->vals[v].data = p;
  s->types[v] = g->values[v].type;
  s->seen[v] = 0;
  *out = &s->vals[v];
  return KILN_OK;
}

typedef struct value_out {
  kiln_session *s;
  int node;
} value_out;

/* Output k of a sequence op: a sequence or none as value_place makes it; a tensor in
 * its place in the plan, as any node's. */
static kiln_status value_alloc(void *ctx, int k, const kl_tensor *shape, size_t bytes,
                               kl_tensor **out) {
  value_out *c = ctx;
  kiln_session *s = c->s;
  const kl_node *n = &s->model->g->nodes[c->node];
  if (k < 0 || k >= n->n_out || shape->rank > KL_MAX_RANK)
    return kl_fail(&s->err, KILN_ERR_INTERNAL, "output %d of rank %d", k, shape->rank);
  const kl_type *t = &s->model->g->values[n->out[k]].type;
  if (t->seq || t->opt) return value_place(s, c->node, k, shape, bytes, out);
  kl_type_set_shape(&s->tout[k], shape->rank, shape->dims);
  s->tout[k].dtype = shape->dtype;
  bool view = false;
  kiln_status st = prepare_output(s, c->node, k, &view);
  *out = &s->vals[n->out[k]];
  if (st == KILN_OK && view)
    st = kl_fail(&s->err, KILN_ERR_INTERNAL, "output %d was planned as a view", k);
  return st;
}

/* What a sequence op's copies cost besides their elements, a step per element: each
 * item of a sequence it reads or makes (its header, its own copy) counts this many more.
 * Measured: a Loop of 20,000 trips whose body inserts a 64-float tensor into the
 * sequence it carries copies 2e8 items, 14 s (70 ns an item: 64 + 64 steps weighed 48,
 * 77 ns). */
#define SEQ_ITEM_STEPS 64.0
/* A step of a sequence op weighs as an element of any op on an optimized kernel
 * (src/ir/work_weight.c: 48): they are copies. */
#define SEQ_STEP_WEIGHT 48.0

/* The steps of reading or making value t of type ty: its elements, and a sequence's
 * items as above. */
static double value_steps(const kl_tensor *t, const kl_type *ty) {
  if (!t || !ty || kl_value_is_none(t, ty)) return 0;
  if (!ty->seq) return t->rank >= 0 ? (double)kl_tensor_numel(t) : 0;
  double steps = 0;
  int64_t count = kl_seq_count(t);
  for (int64_t k = 0; k < count; k++) {
    kl_tensor x = kl_seq_item_tensor(t, k);
    steps += SEQ_ITEM_STEPS + (double)kl_tensor_numel(&x);
  }
  return steps;
}

/* A sequence op's work against max_work, as check_work does for the other nodes: a
 * Loop that grows the sequence it carries copies it every trip (the Loop's bound is its
 * bodies' work, control.c), and uncounted a 300-byte file ran for hours. Its inputs'
 * steps before it runs (n_out 0), with its outputs' after. */
static kiln_status check_values_work(kiln_session *s, int i, bool with_outputs) {
  if (s->opts.max_work <= 0) return KILN_OK;
  const kl_graph *g = s->model->g;
  const kl_node *n = &g->nodes[i];
  double steps = 0;
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0) steps += value_steps(&s->vals[n->in[k]], &g->values[n->in[k]].type);
  for (int k = 0; with_outputs && k < n->n_out; k++)
    if (n->out[k] >= 0) steps += value_steps(&s->vals[n->out[k]], &g->values[n->out[k]].type);
  double work = steps * SEQ_STEP_WEIGHT;
  if (with_outputs) {
    s->work += work;
    s->node_steps[i] = steps;
    s->node_weight[i] = SEQ_STEP_WEIGHT;
  }
  if (work <= (double)s->opts.max_work) return KILN_OK;
  return kl_fail(&s->err, KILN_ERR_LIMIT, "about %.3g steps (elements and sequence items "
                 "copied), over max_work %lld: each counts %g times a dense product's (%.3g "
                 "in all; option max_work, `--max-work N`; 0 lifts the bound)", steps,
                 (long long)s->opts.max_work, SEQ_STEP_WEIGHT, work);
}

/* The sequence and optional ops (sequence.c). */
static kiln_status run_values(kiln_session *s, int i) {
  const kl_graph *g = s->model->g;
  const kl_node *n = &g->nodes[i];
  for (int k = 0; k < n->n_in; k++) {
    s->kin[k] = n->in[k] >= 0 ? &s->vals[n->in[k]] : NULL;
    s->tin[k] = n->in[k] >= 0 ? &g->values[n->in[k]].type : NULL;
  }
  value_out c = {s, i};
  s->as_view[i] = false;
  kiln_status st = check_values_work(s, i, false);
  if (st == KILN_OK) st = kl_seq_run(n, s->kin, s->tin, value_alloc, &c, &s->err);
  if (st == KILN_OK) st = check_values_work(s, i, true);
  /* a tensor it gives (SequenceAt's) that a device node reads goes there now */
  if (st == KILN_OK && s->dev) st = copy_outputs(s, i);
  return st;
}

/* If, Loop, Scan: their bodies run in sessions of their own (control.c). */
static kiln_status run_control(kiln_session *s, int i) {
  const kl_node *n = &s->model->g->nodes[i];
  for (int k = 0; k < n->n_in; k++) s->kin[k] = n->in[k] >= 0 ? &s->vals[n->in[k]] : NULL;
  kiln_status st = check_work(s, i, 0);
  if (st != KILN_OK) return st;
  value_out c = {s, i};
  /* max_work bounds the node's run as a whole, every iteration of every body in it; its
   * steps count in this session's too, for a Loop whose body this session is */
  st = kl_control_run(s->ctl[i], n, s->kin, s->opts.max_work, value_alloc, &c, &s->err);
  s->work += kl_control_work(s->ctl[i]);
  s->as_view[i] = false;
  if (st == KILN_OK && s->dev) st = copy_outputs(s, i);
  return st;
}

static kiln_status run_node(kiln_session *s, int i) {
  kl_graph *g = s->model->g;
  const kl_node *n = &g->nodes[i];
  if (s->ctl[i]) return run_control(s, i);
  if (s->values_node[i]) return run_values(s, i);
  bool on_dev = s->dev && s->place[i];
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    bool dev_in = on_dev && !(k < 32 && s->host_in[i] >> k & 1u);
    s->tin[k] = v >= 0 ? &s->types[v] : NULL;
    /* what shape inference may read: host data only (NULL for device-only values) */
    s->tdata[k] = v >= 0 && !(s->dev && s->on_dev[v] && !(s->need[v] & NEED_HOST))
                      ? s->vals[v].data : NULL;
    s->kin[k] = v < 0 ? NULL : dev_in ? &s->dvals[v] : &s->vals[v];
  }
  for (int k = 0; k < n->n_out; k++) {
    memset(&s->tout[k], 0, sizeof s->tout[k]);
    s->tout[k].rank = -1;
  }
  /* first from the inputs alone, for every node: inference itself may be the work
   * (NonMaxSuppression's output size is its selection, made from the boxes), and no
   * output is allocated for work that will be refused (an LSTM of 10^6 steps asks for
   * gigabytes); then again with the outputs, which most estimates count */
  kiln_status st = check_work(s, i, 0);
  if (st != KILN_OK) return st;
  kl_infer_ctx ic = {g, n, n->n_in, n->n_out, s->tin, s->tdata, s->tout, &s->err, true};
  st = (kiln_status)kl_op_get(n->op)->infer(&ic);
  bool view = false;
  for (int k = 0; st == KILN_OK && k < n->n_out; k++) {
    st = prepare_output(s, i, k, &view);
    s->kout[k] = on_dev ? &s->dvals[n->out[k]] : &s->vals[n->out[k]];
  }
  s->as_view[i] = st == KILN_OK && view;
  if (st == KILN_OK && view && s->dev) st = copy_outputs(s, i);
  if (st != KILN_OK || view) return st;
  /* A node whose every output is empty has nothing to compute: its kernel is not run,
   * so no kernel can loop over the rows of an empty-but-large input ([2^40, 0]: 2^40
   * empty rows of a LayerNormalization took minutes) or over attribute counts. A
   * kiln.Check runs regardless: its code, not its outputs, says whether the run fails. */
  bool empty = n->n_out > 0 && n->op != KL_OP_KilnCheck;
  for (int k = 0; k < n->n_out && empty; k++) empty = kl_tensor_numel(s->kout[k]) == 0;
  if (empty) return s->dev ? copy_outputs(s, i) : KILN_OK;
  st = check_work(s, i, n->n_out);
  if (st != KILN_OK) return st;
  kl_kernel_ctx kc = {.node = n, .n_in = n->n_in, .n_out = n->n_out, .in = s->kin,
                      .out = s->kout, .e = &s->err, .threads = s->opts.threads};
  if (s->work_kernel[i] > KL_WORK_REF) /* should it hand these shapes to the reference */
    kc.max_work = s->opts.max_work;
  kl_backend *b = on_dev ? s->dev : s->cpu;
  st = b->iface->execute(b, i, &kc);
  if (st == KILN_OK && s->dev) st = copy_outputs(s, i);

  const char *slow = st == KILN_OK && s->opts.fast_only && !on_dev
                         ? kl_cpu_plan_slow_path(s->kernels, i) : NULL;
  if (slow)
    st = kl_fail(&s->err, KILN_ERR_UNSUPPORTED, "ran on %s at ISA level %s, a slow path "
                 "that the option fast_only refuses", slow, kl_cpu_isa_used());
  return st;
}

static void describe_outputs(kiln_session *s) {
  const kl_graph *g = s->model->g;
  for (int i = 0; i < g->n_outputs; i++) {
    int v = g->outputs[i];
    kl_io_info *io = &s->outs[i];
    const kl_tensor *x = &s->vals[v];
    io->info.name = g->values[v].name;
    io->info.dtype = (kiln_dtype)x->dtype;
    io->info.rank = x->rank < 0 ? 0 : x->rank; /* none and sequences: their own calls */
    memcpy(io->dims, x->dims, sizeof(int64_t) * (size_t)io->info.rank);
    for (int d = 0; d < x->rank; d++) io->dim_names[d] = NULL;
    io->info.dims = io->dims;
    io->info.dim_names = io->dim_names;
  }
}

/* After a run in which some tensors did not fit: plan the arena for the sizes seen
 * (never smaller than planned before, so that sizes that vary with the data settle).
 * On failure the session goes on with a buffer per tensor. */
static void replan(kiln_session *s) {
  const kl_graph *g = s->model->g;
  for (int v = 0; v < g->n_values; v++)
    if (s->planned && s->plan.bytes[v] > s->seen[v]) s->seen[v] = s->plan.bytes[v];
  kl_err e = {0};
  free(s->stale_arena);
  s->stale_arena = s->arena;
  s->arena = NULL;
  s->planned = false;
  kiln_status st = kl_memplan_build(&s->plan, g, s->seen, s->types, s->rules, &e);
  size_t need = s->plan.arena_bytes;
  if (st == KILN_OK && s->opts.memory_limit &&
      need + fixed_bytes(s) > (uint64_t)s->opts.memory_limit)
    st = KILN_ERR_LIMIT;
  if (st == KILN_OK && need && posix_memalign(&s->arena, KL_MEMPLAN_ALIGN, need) != 0) {
    s->arena = NULL;
    st = KILN_ERR_OUT_OF_MEMORY;
  }
  if (st == KILN_OK) s->planned = true;
  else kl_memplan_build(&s->plan, g, NULL, NULL, NULL, &e);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static kiln_status run_nodes(kiln_session *s) {
  const kl_graph *g = s->model->g;
  double t0 = s->profile ? now_ms() : 0;
  for (int i = 0; i < g->n_nodes; i++) {
    double start = s->profile ? now_ms() : 0;
    kiln_status st = run_node(s, i);
    if (s->profile) {
      s->t_start[i] = start - t0;
      s->t_ms[i] = now_ms() - start;
      if (st == KILN_OK && s->dev && s->place[i]) /* its kernels' time on the device */
        s->t_ms[i] = s->dev->iface->node_ms(s->dev);
    }
    if (st != KILN_OK) {
      prefix_node(s, i);
      return st;
    }
    release_after(s, i);
  }
  s->timed = s->profile;
  return KILN_OK;
}

kiln_status kiln_session_run(kiln_session *s) {
  if (!s) return KILN_ERR_INVALID_ARGUMENT;
  kl_err_clear(&s->err);
  if (!s->model) return kl_fail(&s->err, KILN_ERR_STATE, "the session was not created");
  s->ran = false;
  s->timed = false;
  s->work = 0;
  memset(s->node_steps, 0, sizeof *s->node_steps * (size_t)s->model->g->n_nodes);
  memset(s->node_weight, 0, sizeof *s->node_weight * (size_t)s->model->g->n_nodes);
  s->fallbacks = 0;
  s->dfallbacks = 0;
  release_heap(s); /* the last run's outputs, or what a failed run left */
  free(s->stale_arena);
  s->stale_arena = NULL;
  if (s->dev) release_device_values(s, false);
  kl_cpu_set_threads(s->opts.threads);
  kiln_status st = KILN_OK;
  if (s->opts.pin_threads && !(s->pinned && pthread_equal(s->pinned_by, pthread_self()))) {
    if ((st = kl_cpu_pin_threads(s->opts.threads, &s->err)) != KILN_OK) return st;
    s->pinned = true;
    s->pinned_by = pthread_self();
  }
  st = bind_inputs(s);
  if (st == KILN_OK) st = run_nodes(s);
  if (st == KILN_OK && s->dev && s->dev->iface->synchronize)
    st = s->dev->iface->synchronize(s->dev, &s->err);
  if (st == KILN_OK && s->opts.memory_limit) { /* oneDNN packs on a shape's first run */
    size_t fixed = fixed_bytes(s), arena = s->planned ? s->plan.arena_bytes : 0;
    size_t dev = device_bytes(s);
    if (fixed + arena + s->heap_bytes > (uint64_t)s->opts.memory_limit)
      st = kl_fail(&s->err, KILN_ERR_LIMIT, "the session holds %zu bytes (weights, "
                   "oneDNN's packed weights and scratchpads %zu, tensors %zu, device "
                   "memory %zu), over the memory limit of %" PRId64,
                   fixed + arena + s->heap_bytes, fixed - dev, arena + s->heap_bytes, dev,
                   s->opts.memory_limit);
  }
  if (st != KILN_OK) return st;
  describe_outputs(s);
  s->ran = true;
  if (s->fallbacks) replan(s);
  if (s->dev && s->dfallbacks) device_replan(s);
  return KILN_OK;
}

/* Output index's value of the last run and its graph type, or a failure. */
static kiln_status output_value(kiln_session *s, int index, const kl_tensor **t,
                                const kl_type **ty) {
  if (!s) return KILN_ERR_INVALID_ARGUMENT;
  kl_err_clear(&s->err); /* the first failure wins in kl_fail: forget an older one */
  if (!s->model || !s->ran)
    return kl_fail(&s->err, KILN_ERR_STATE, "no successful run to take outputs from");
  if (index < 0 || index >= s->model->g->n_outputs)
    return kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "output index %d is out of range "
                   "(the model has %d outputs)", index, s->model->g->n_outputs);
  int v = s->model->g->outputs[index];
  *t = &s->vals[v];
  *ty = &s->model->g->values[v].type;
  return KILN_OK;
}

int kiln_session_output_kind(const kiln_session *s, int index) {
  if (!s || !s->model || !s->ran || index < 0 || index >= s->model->g->n_outputs) return -1;
  int v = s->model->g->outputs[index];
  const kl_type *ty = &s->model->g->values[v].type;
  if (kl_value_is_none(&s->vals[v], ty)) return KILN_VALUE_NONE;
  return ty->seq ? KILN_VALUE_SEQUENCE : KILN_VALUE_TENSOR;
}

kiln_status kiln_session_get_output_length(kiln_session *s, int index, int64_t *count) {
  const kl_tensor *t = NULL;
  const kl_type *ty = NULL;
  kiln_status st = output_value(s, index, &t, &ty);
  if (st != KILN_OK) return st;
  if (!ty->seq || kl_value_is_none(t, ty))
    return kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "output %d '%s' is not a sequence%s",
                   index, s->outs[index].info.name, ty->seq ? " (an optional holding none)" : "");
  if (count) *count = kl_seq_count(t);
  return KILN_OK;
}

kiln_status kiln_session_get_output_element(kiln_session *s, int index, int64_t element,
                                            kiln_tensor_info *info, const void **data) {
  int64_t count;
  kiln_status st = kiln_session_get_output_length(s, index, &count);
  if (st != KILN_OK) return st;
  if (element < 0 || element >= count)
    return kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "element %lld is out of range (output "
                   "%d has %lld)", (long long)element, index, (long long)count);
  const kl_tensor *t = &s->vals[s->model->g->outputs[index]];
  const kl_seq *q = t->data;
  const kl_seq_item *it = &q->items[element];
  kl_io_info *io = &s->outs[index];
  memcpy(io->dims, it->dims, sizeof(int64_t) * (size_t)it->rank);
  for (int d = 0; d < it->rank; d++) io->dim_names[d] = NULL;
  if (info) {
    *info = io->info;
    info->dtype = (kiln_dtype)it->dtype;
    info->rank = it->rank;
  }
  if (data) *data = it->bytes ? (const char *)q + it->offset : NULL;
  return KILN_OK;
}

kiln_status kiln_session_get_output(kiln_session *s, int index, kiln_tensor_info *info,
                                    const void **data) {
  const kl_tensor *t = NULL;
  const kl_type *ty = NULL;
  kiln_status st = output_value(s, index, &t, &ty);
  if (st != KILN_OK) return st;
  if (kl_value_is_none(t, ty))
    return kl_fail(&s->err, KILN_ERR_STATE, "output %d '%s' is an optional holding no value "
                   "(kiln_session_output_kind: KILN_VALUE_NONE)", index,
                   s->outs[index].info.name);
  if (ty->seq)
    return kl_fail(&s->err, KILN_ERR_DTYPE, "output %d '%s' is a sequence of %lld tensors: read "
                   "them with kiln_session_get_output_element", index, s->outs[index].info.name,
                   (long long)kl_seq_count(t));
  kl_io_info *io = &s->outs[index];
  io->info.rank = t->rank;
  memcpy(io->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
  for (int d = 0; d < t->rank; d++) io->dim_names[d] = NULL;
  if (info) *info = io->info;
  if (data) *data = t->data;
  return KILN_OK;
}

/* ---- internal views (session.h) ---- */

void kl_session_set_profiling(kiln_session *s, bool on) {
  s->profile = on;
  if (s->dev) s->dev->iface->set_profiling(s->dev, on);
}

bool kl_session_timings(const kiln_session *s, const double **start_ms, const double **ms) {
  if (!s->timed) return false;
  *start_ms = s->t_start;
  *ms = s->t_ms;
  return true;
}

const kiln_model *kl_session_model(const kiln_session *s) { return s->model; }

double kl_session_run_work(const kiln_session *s) { return s->work; }

double kl_session_node_steps(const kiln_session *s, int node, double *weight) {
  if (weight) *weight = s->node_weight[node];
  return s->node_steps[node];
}

bool kl_session_tf32(const kiln_session *s) { return s->dev && kl_gpu_backend_tf32(s->dev); }

const char *kl_session_kernel_name(const kiln_session *s, int node) {
  if (s->ctl[node]) return "subgraph";
  if (s->as_view[node]) return "view";
  if (s->dev && s->place[node]) return s->dev->iface->kernel_name(s->dev, node);
  return s->cpu->iface->kernel_name(s->cpu, node);
}

const char *kl_session_node_device(const kiln_session *s, int node) {
  return s->dev && s->place[node] ? s->dev->iface->name : "cpu";
}

bool kl_session_placement(const kiln_session *s, kl_session_devices *out) {
  memset(out, 0, sizeof *out);
  if (!s->dev) return false;
  out->name = s->dev->iface->device_name(s->dev);
  out->origin = kl_gpu_backend_origin(s->dev);
  out->device_nodes = s->dev_nodes;
  out->uploads = s->uploads;
  out->downloads = s->downloads;
  out->arena_bytes = s->dplanned ? s->dplan.arena_bytes : 0;
  out->fallbacks = s->dfallbacks;
  kl_gpu_backend_stats(s->dev, &out->alloc);
  kl_gpu_backend_shared_stats(s->dev, &out->shared);
  return true;
}

bool kl_session_value_copy(const kiln_session *s, int v, bool *to_device) {
  if (!s->dev) return false;
  if (s->on_dev[v] && (s->need[v] & NEED_HOST)) {
    *to_device = false;
    return true;
  }
  if (!s->on_dev[v] && (s->need[v] & NEED_DEV)) {
    *to_device = true;
    return true;
  }
  return false;
}

const char *kl_session_kernel_impl(const kiln_session *s, int node) {
  if (s->dev && s->place[node]) return NULL;
  return s->as_view[node] ? NULL : kl_cpu_plan_impl(s->kernels, node);
}

const char *kl_session_slow_path(const kiln_session *s, int node) {
  if (s->dev && s->place[node]) return NULL;
  return s->as_view[node] ? NULL : kl_cpu_plan_slow_path(s->kernels, node);
}

const kl_memplan *kl_session_memplan(const kiln_session *s) {
  return s->planned ? &s->plan : NULL;
}

const kl_type *kl_session_value_type(const kiln_session *s, int v) { return &s->types[v]; }

int kl_session_fallback_count(const kiln_session *s) { return s->fallbacks; }

int kl_session_bf16_values(const kiln_session *s) { return kl_cpu_plan_bf16_values(s->kernels); }

void kl_session_bf16_unhold(kiln_session *s) { kl_cpu_plan_bf16_unhold(s->kernels); }

size_t kl_session_held_bytes(const kiln_session *s) { return kl_cpu_plan_held_bytes(s->kernels); }

void kl_session_poison_workspace(kiln_session *s) { kl_cpu_plan_poison_workspace(s->kernels); }
