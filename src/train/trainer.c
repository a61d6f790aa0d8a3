/* The trainer (kiln.h's kiln_trainer_*): a model in training form.
 *
 * From the model file, read once (t->model; the graphs below and the one saved start
 * as copies of it; once both are built its trained weights' and statistics' data are
 * dropped, the trainer's buffers holding them), kiln makes two graphs and runs each in
 * a session:
 *
 *   the step graph: the forward pass with BatchNormalization in training form
 *     (kiln.BatchNormTrain: batch statistics, new running ones as outputs) and Dropout
 *     dropping (kiln.DropoutTrain, seeded per step), the loss (kiln.Loss) against the
 *     input "target", the gradients (autograd.c), and one fused optimizer node per
 *     trainable weight (kiln.SGD, kiln.Adam, ...), which updates the weight and its
 *     state in place. The weights, their state and the hyperparameters are graph
 *     inputs bound to the trainer's own buffers, so nothing is copied per step; each
 *     update runs as soon as nothing else reads its weight (update_order), so that
 *     gradients die early and the data is still in cache.
 *   the evaluation graph: the forward pass in inference form, reading the same
 *     weight and running-statistics buffers.
 *
 * Every update is guarded by the loss: a loss that is not finite makes the optimizer
 * nodes leave the weights and state as they were (their GradScale input is NaN), and
 * the step fails naming its number. */
#include "train/train.h"

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/isa.h"
#include "export/onnx_export.h"
#include "import/fileio.h"
#include "import/tensorfile.h"
#include "ir/optim.h"
#include "passes/pass.h"
#include "passes/rewrite.h"
#include "runtime/runtime.h"
#include "train/autograd.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_STATE 3
#define N_HYPER 8

typedef struct tparam {
  char *name;
  int64_t numel;
  int rank;
  int64_t dims[KL_MAX_RANK];
  float *data;                 /* the weight (float32 training) */
  uint16_t *top, *trail;       /* bf16 training: the FP32 master's halves, top = the
                                  bf16 weight the passes read, trail = its low bits */
  float *state[MAX_STATE];     /* the optimizer's, n_state of them */
  int n_state;
} tparam;

/* A BatchNormalization's running mean or variance: read by both graphs, replaced
 * after each step by the step graph's output. */
typedef struct tstat {
  char *name;
  int64_t numel;
  int rank;
  int64_t dims[KL_MAX_RANK];
  float *data;
  int out; /* its new value's index among the step graph's outputs */
} tstat;

typedef enum opt_kind { OPT_SGD, OPT_ADAGRAD, OPT_ADAM, OPT_ADAMW, OPT_LAMB, OPT_LARS } opt_kind;

struct kiln_trainer {
  kl_err err;
  kiln_options opts;
  char *path;
  opt_kind opt;
  tparam *params;
  int n_params;
  tstat *stats;
  int n_stats;
  double hyper[N_HYPER];
  int n_hyper;
  int step_at;  /* the index of the step count in hyper */
  int decay_at; /* the index of the weight decay in hyper */
  double hyper_nd[N_HYPER]; /* hyper with no weight decay: option no_decay's group */
  bool has_nd;              /* some weight reads it (input "kiln.hyper_nd") */
  double lr;
  int64_t steps;
  int64_t seed_now;
  kl_graph *model; /* the model file's graph as read (kl_train_own_stats applied) */
  kiln_model *step_m, *eval_m;
  kiln_session *step_s, *eval_s;
  char **weights; /* the model's own float constants (sorted), before any folding */
  int n_weights;
};

static void *falloc(int64_t numel) {
  void *p = NULL;
  size_t bytes = (size_t)(numel > 0 ? numel : 1) * sizeof(float);
  if (posix_memalign(&p, 64, (bytes + 63) / 64 * 64) != 0) return NULL;
  return p;
}

static const char *opt_name(opt_kind k) {
  static const char *const names[] = {"sgd", "adagrad", "adam", "adamw", "lamb", "lars"};
  return names[k];
}

static opt_kind opt_of(const char *s) {
  if (!s || strcmp(s, "sgd") == 0) return OPT_SGD;
  if (strcmp(s, "adagrad") == 0) return OPT_ADAGRAD;
  if (strcmp(s, "adam") == 0) return OPT_ADAM;
  if (strcmp(s, "adamw") == 0) return OPT_ADAMW;
  if (strcmp(s, "lamb") == 0) return OPT_LAMB;
  return OPT_LARS;
}

/* ---- the optimizer's hyperparameters (the layouts of the ops' Hyper input) ---- */

static double or_default(double v, double d) { return isnan(v) ? d : v; }

/* hyper_nd: hyper with its weight decay 0. */
static void sync_hyper_nd(kiln_trainer *t) {
  memcpy(t->hyper_nd, t->hyper, sizeof t->hyper);
  t->hyper_nd[t->decay_at] = 0;
}

static void fill_hyper(kiln_trainer *t) {
  const kiln_options *o = &t->opts;
  double *h = t->hyper;
  memset(h, 0, sizeof t->hyper);
  switch (t->opt) {
  case OPT_SGD: /* [lr, momentum, dampening, weight_decay, step] */
    h[1] = o->momentum, h[2] = o->dampening, h[3] = or_default(o->weight_decay, 0);
    t->step_at = 4, t->decay_at = 3;
    break;
  case OPT_ADAGRAD: /* [lr, lr_decay, weight_decay, eps, step] */
    h[1] = o->lr_decay, h[2] = or_default(o->weight_decay, 0), h[3] = or_default(o->eps, 1e-10);
    t->step_at = 4, t->decay_at = 2;
    break;
  case OPT_ADAM:
  case OPT_ADAMW:
  case OPT_LAMB: /* [lr, beta1, beta2, eps, weight_decay, step] */
    h[1] = o->beta1, h[2] = o->beta2;
    h[3] = or_default(o->eps, t->opt == OPT_LAMB ? 1e-6 : 1e-8);
    h[4] = or_default(o->weight_decay, t->opt == OPT_ADAM ? 0 : 1e-2);
    t->step_at = 5, t->decay_at = 4;
    break;
  case OPT_LARS: /* [lr, momentum, weight_decay, trust_coefficient, eps, step] */
    h[1] = o->momentum, h[2] = or_default(o->weight_decay, 0), h[3] = o->trust_coefficient;
    h[4] = or_default(o->eps, 1e-9);
    t->step_at = 5, t->decay_at = 2;
    break;
  }
  h[0] = t->lr;
  t->n_hyper = t->step_at + 1;
  sync_hyper_nd(t);
}

static int n_state_of(const kiln_trainer *t) {
  switch (t->opt) {
  case OPT_SGD: return t->opts.momentum != 0 ? 1 : 0;
  case OPT_ADAGRAD: return 1;
  case OPT_ADAM:
  case OPT_ADAMW: return t->opts.amsgrad ? 3 : 2;
  case OPT_LAMB: return 2;
  case OPT_LARS: return 1;
  }
  return 0;
}

static const char *state_name(const kiln_trainer *t, int k) {
  switch (t->opt) {
  case OPT_SGD:
  case OPT_LARS: return "momentum";
  case OPT_ADAGRAD: return "sum";
  default: return k == 0 ? "exp_avg" : k == 1 ? "exp_avg_sq" : "max_exp_avg_sq";
  }
}

/* ---- building the step graph ---- */

/* The next item of a comma-separated list, copied into buf (NUL-terminated; names are
 * at most 4096 bytes, longer items are cut): false past the end. *p walks the list. */
#define LIST_ITEM_MAX 4097
static bool next_item(const char **p, char buf[LIST_ITEM_MAX]) {
  if (!*p || !**p) return false;
  const char *end = strchr(*p, ',');
  size_t len = end ? (size_t)(end - *p) : strlen(*p);
  snprintf(buf, LIST_ITEM_MAX, "%.*s", (int)(len < LIST_ITEM_MAX - 1 ? len : LIST_ITEM_MAX - 1),
           *p);
  *p = end ? end + 1 : *p + len;
  return true;
}

static bool in_list(const char *list, const char *name) {
  char item[LIST_ITEM_MAX];
  for (const char *p = list; next_item(&p, item);)
    if (strcmp(item, name) == 0) return true;
  return false;
}

/* Whether weight `name` of rank `rank` is in option no_decay's group: "auto" takes every
 * weight of rank 1 (or 0), else the names matching a pattern of the list (fnmatch). */
static bool no_decay_of(const kiln_trainer *t, const char *name, int rank) {
  const char *list = t->opts.no_decay;
  if (!list || !*list) return false;
  if (strcmp(list, "auto") == 0) return rank <= 1;
  char pat[LIST_ITEM_MAX];
  for (const char *p = list; next_item(&p, pat);)
    if (*pat && fnmatch(pat, name, 0) == 0) return true;
  return false;
}

/* Every pattern of option no_decay matches a trained weight (a typo is worth saying). */
static kiln_status check_no_decay(const kiln_trainer *t, kl_err *e) {
  const char *list = t->opts.no_decay;
  if (!list || !*list || strcmp(list, "auto") == 0) return KILN_OK;
  char pat[LIST_ITEM_MAX];
  for (const char *p = list; next_item(&p, pat);) {
    bool hit = false;
    for (int i = 0; i < t->n_params && !hit; i++) hit = fnmatch(pat, t->params[i].name, 0) == 0;
    if (*pat && !hit)
      return kl_fail(e, KILN_ERR_NOT_FOUND, "option no_decay: no trained weight matches '%s' "
                     "(the first is '%s'; \"auto\" takes every weight of rank 1)", pat,
                     t->n_params ? t->params[0].name : "");
  }
  return KILN_OK;
}

/* Value v, a constant, becomes a graph input whose data is copied into a fresh
 * buffer (*data). */
static kiln_status const_to_input(kl_graph *g, int v, float **data, kl_err *e) {
  kl_value *val = &g->values[v];
  int64_t numel;
  if (!kl_type_numel(&val->type, &numel))
    return kl_fail(e, KILN_ERR_INTERNAL, "weight '%s' has no known size", val->name);
  if (data) {
    if (!(*data = falloc(numel))) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (numel) memcpy(*data, val->data, (size_t)numel * sizeof(float));
  }
  if (!val->borrowed) free(val->data);
  val->data = NULL;
  val->nbytes = 0;
  val->borrowed = false;
  return kl_graph_add_input(g, v, e);
}

/* A new graph input of a type. */
static int new_input(kl_graph *g, const char *name, kl_dtype dtype, int rank,
                     const kl_dim *dims, kl_err *e) {
  int v = kl_graph_add_value(g, name, e);
  if (v < 0) return -1;
  g->values[v].type.dtype = dtype;
  g->values[v].type.rank = rank;
  for (int i = 0; i < rank; i++) g->values[v].type.dims[i] = dims[i];
  return kl_graph_add_input(g, v, e) == KILN_OK ? v : -1;
}

static int new_value(kl_graph *g, const char *base, const char *suffix, kl_err *e) {
  char name[512];
  snprintf(name, sizeof name, "%s%s", base, suffix);
  return kl_graph_add_value(g, kl_graph_find_value(g, name) >= 0 ? NULL : name, e);
}

/* Marks (per value) the BatchNormalization running statistics (inputs 3 and 4). */
static void mark_bn_stats(const kl_graph *g, bool *stat) {
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    if ((n->op == KL_OP_BatchNormalization || n->op == KL_OP_KilnBatchNormTrain) && n->n_in >= 5)
      for (int k = 3; k < 5; k++)
        if (n->in[k] >= 0) stat[n->in[k]] = true;
  }
}

/* The name for node n's own copy of its input k (1: scale, 2: bias) of a
 * BatchNormalization: "<node>.scale" or "<node>.bias", unused in g. */
static void bn_param_name(const kl_graph *g, const kl_node *n, int k, char *out, size_t len) {
  snprintf(out, len, "%s.%s", n->name ? n->name : "BatchNormalization", k == 1 ? "scale" : "bias");
  size_t base = strlen(out);
  for (int i = 2; kl_graph_find_value(g, out) >= 0 && base + 12 < len; i++)
    snprintf(out + base, len - base, ".%d", i);
}

/* A constant that is the scale or bias of more than one BatchNormalization (an exporter
 * that shares equal tensors without Identities): every such BatchNormalization but
 * the first gets a copy of its own (bn_param_name), as PyTorch trains them apart. */
static kiln_status untie_bn_params(kl_graph *g, bool *changed, kl_err *e) {
  int nv = g->n_values;
  int *first = malloc(sizeof(int) * (size_t)(nv ? nv : 1)); /* per value: its first BN */
  if (!first) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int v = 0; v < nv; v++) first[v] = -1;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    if (g->nodes[i].op != KL_OP_BatchNormalization || g->nodes[i].n_in < 3) continue;
    for (int k = 1; st == KILN_OK && k < 3; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0 || v >= nv || g->values[v].kind != KL_VALUE_CONST) continue;
      if (first[v] < 0 || first[v] == i) {
        first[v] = i;
        continue;
      }
      char name[512];
      bn_param_name(g, &g->nodes[i], k, name, sizeof name);
      kl_type type = g->values[v].type; /* adding a value may move g->values */
      size_t nbytes = g->values[v].nbytes;
      int64_t dims[KL_MAX_RANK];
      for (int d = 0; d < type.rank; d++) dims[d] = type.dims[d].size;
      void *copy = malloc(nbytes ? nbytes : 1);
      if (!copy) {
        st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        break;
      }
      memcpy(copy, g->values[v].data, nbytes);
      int c = kl_graph_add_const(g, name, type.dtype, type.rank, dims, copy, nbytes, false, e);
      if (c < 0) {
        free(copy);
        st = e->code;
        break;
      }
      g->nodes[i].in[k] = c;
      *changed = true;
    }
  }
  free(first);
  return st;
}

/* PyTorch's exporter writes one initializer for equal tensors: a fresh BatchNorm's
 * running variance (ones) becomes an Identity of its weight, its running mean an
 * Identity of its bias, and every BatchNorm of the same width after the first reads
 * its weight and bias as Identities of the first one's (the Identity's output named as
 * PyTorch's parameter). PyTorch trains them apart, so such a scale, bias or statistic
 * becomes a constant of its own (the Identity's output, its name kept); and a scale or
 * bias that several BatchNormalizations read directly, one per node
 * (untie_bn_params). */
kiln_status kl_train_own_stats(kl_graph *g, kl_err *e) {
  bool changed = false;
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    if (n->op != KL_OP_BatchNormalization || n->n_in < 5) continue;
    for (int k = 1; k < 5; k++) {
      int v = g->nodes[i].in[k], src = v, p;
      while (src >= 0 && (p = g->values[src].producer) >= 0 && g->nodes[p].op == KL_OP_Identity)
        src = g->nodes[p].in[0];
      if (src == v || src < 0 || g->values[src].kind != KL_VALUE_CONST) continue;
      p = g->values[v].producer;
      kl_value *val = &g->values[v];
      void *copy = malloc(g->values[src].nbytes ? g->values[src].nbytes : 1);
      if (!copy) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      memcpy(copy, g->values[src].data, g->values[src].nbytes);
      /* the Identity made v: it no longer does (it is dropped unless read elsewhere) */
      kl_node *id = &g->nodes[p];
      int m = 0;
      for (int o = 0; o < id->n_out; o++)
        if (id->out[o] != v) id->out[m++] = id->out[o];
      id->n_out = m;
      if (m == 0) kl_rw_remove(g, p);
      val->producer = -1;
      val->kind = KL_VALUE_CONST;
      val->type = g->values[src].type;
      val->data = copy;
      val->nbytes = g->values[src].nbytes;
      val->borrowed = false;
      changed = true;
    }
  }
  kiln_status st = untie_bn_params(g, &changed, e);
  if (st != KILN_OK) return st;
  kl_graph_uses_reset(g);
  return kl_rw_finish(g, changed, e);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_weight(const kiln_trainer *t, const char *name) {
  return t->weights && bsearch(&name, t->weights, (size_t)t->n_weights, sizeof(char *), cmp_str);
}

/* Whether constant v may be a trained weight: one of the model's own float32
 * constants (not one folding made), rank 1 or more, not frozen, not a running
 * statistic. */
static bool may_train(const kiln_trainer *t, const kl_graph *g, int v, const bool *stat) {
  const kl_value *val = &g->values[v];
  return val->kind == KL_VALUE_CONST && val->type.dtype == KL_F32 && val->type.rank >= 1 &&
         !in_list(t->opts.frozen, val->name) && !stat[v] && is_weight(t, val->name);
}

/* Exporters compute many shapes from constants (a Reshape's target as Shape, Gather,
 * Concat, Mod of constants): made known here as at -O1, by constant folding and the
 * shape arithmetic, so that the gradient rules see ranks and sizes. The weights that may
 * be trained are shown to the passes as inputs meanwhile, so that no node reading one is
 * folded (the weight would vanish into a constant of another name). */
static kiln_status fold_shapes(kiln_trainer *t, kl_graph *g, kl_err *e) {
  int nv = g->n_values;
  bool *stat = calloc((size_t)nv + 1, sizeof(bool));
  char **names = calloc((size_t)nv + 1, sizeof(char *));
  int n = 0;
  kiln_status st = KILN_OK;
  if (!stat || !names) st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (st == KILN_OK) mark_bn_stats(g, stat);
  /* the model's own float constants, by name */
  t->weights = st == KILN_OK ? calloc((size_t)nv + 1, sizeof(char *)) : NULL;
  if (st == KILN_OK && !t->weights) st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int v = 0; st == KILN_OK && v < nv; v++) {
    const kl_value *val = &g->values[v];
    if (val->kind != KL_VALUE_CONST || val->type.dtype != KL_F32) continue;
    if (!(t->weights[t->n_weights] = strdup(val->name)))
      st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    else
      t->n_weights++;
  }
  if (st == KILN_OK) qsort(t->weights, (size_t)t->n_weights, sizeof(char *), cmp_str);
  for (int v = 0; st == KILN_OK && v < nv; v++)
    if (may_train(t, g, v, stat)) {
      g->values[v].kind = KL_VALUE_INPUT;
      names[n++] = g->values[v].name; /* the graph keeps its names through the passes */
    }
  if (st == KILN_OK) {
    kl_pass_config pc = {.level = 0, .passes = "+const_fold,+shape_values",
                         .fold_limit = t->opts.fold_limit};
    kl_pass_stats stats;
    memset(&stats, 0, sizeof stats);
    /* the names array points into values that compaction may move: copy them first */
    for (int i = 0; i < n; i++)
      if (!(names[i] = strdup(names[i]))) {
        for (int j = 0; j < i; j++) free(names[j]);
        n = 0;
        st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      }
    kiln_status ps = st == KILN_OK ? kl_optimize(g, &pc, &stats, e) : st;
    for (int i = 0; i < n; i++) { /* constants again, whatever the passes said */
      int v = kl_graph_find_value(g, names[i]);
      if (v >= 0 && g->values[v].producer < 0 && g->values[v].data) g->values[v].kind = KL_VALUE_CONST;
      free(names[i]);
    }
    st = ps;
  }
  free(stat);
  free(names);
  return st == KILN_OK ? kl_graph_infer(g, e) : st;
}

/* The forward graph in training form: BatchNormalization -> kiln.BatchNormTrain (new
 * running statistics as outputs, made graph outputs by the caller) and Dropout ->
 * kiln.DropoutTrain seeded by `seed` plus the node's number. */
static kiln_status training_form(kl_graph *g, int seed, int **bn_outs, int *n_bn, kl_err *e) {
  int nodes = g->n_nodes, drops = 0;
  *n_bn = 0;
  *bn_outs = malloc(sizeof(int) * (size_t)(2 * nodes + 1));
  if (!*bn_outs) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < nodes; i++) {
    kl_node *n = &g->nodes[i];
    char d[256];
    if (n->op == KL_OP_BatchNormalization) {
      if (n->n_in < 5 || n->in[3] < 0 || n->in[4] < 0 ||
          g->values[n->in[3]].kind != KL_VALUE_CONST || g->values[n->in[4]].kind != KL_VALUE_CONST)
        return kl_fail(e, KILN_ERR_UNSUPPORTED, "%s: its running mean and variance must be "
                       "initializers to be trained", kl_node_describe(g, n, d, sizeof d));
      n->n_out = 1; /* the inference form's optional outputs are not used */
      kl_rw_set_op(g, i, KL_OP_KilnBatchNormTrain);
      for (int k = 0; k < 2; k++) {
        int v = new_value(g, g->values[g->nodes[i].in[3 + k]].name, ".new", e);
        if (v < 0) return e->code;
        kiln_status st = kl_rw_add_output(g, i, v, e);
        if (st != KILN_OK) return st;
        (*bn_outs)[(*n_bn)++] = v;
      }
      kl_graph_uses_reset(g);
    } else if (n->op == KL_OP_Dropout) {
      /* this node's seed: the step's plus its number, so no two masks are alike */
      int64_t k = ++drops;
      int64_t *kd = malloc(sizeof(int64_t));
      if (!kd) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      *kd = k * INT64_C(0x9E3779B97F4A7C15 & 0x7fffffff);
      int kc = kl_rw_add_const(g, "dropout_stream", KL_I64, 0, NULL, kd, e);
      int sv = kc < 0 ? -1 : new_value(g, "dropout_seed", "", e);
      int in2[2] = {seed, kc};
      if (sv < 0 || kl_graph_add_node(g, KL_OP_Add, "dropout_seed", 2, in2, 1, &sv, e) < 0)
        return e->code;
      n = &g->nodes[i];
      int x = n->in[0], ratio = n->n_in > 1 ? n->in[1] : -1;
      int in3[3] = {x, ratio, sv};
      kiln_status st = kl_rw_become(g, i, KL_OP_KilnDropoutTrain, 3, in3, e);
      if (st != KILN_OK) return st;
      n = &g->nodes[i];
      if (n->n_out < 2) {
        int mv = new_value(g, g->values[n->out[0]].name, ".mask", e);
        if (mv < 0 || kl_rw_add_output(g, i, mv, e) != KILN_OK) return e->code;
      }
      kl_graph_uses_reset(g);
    }
  }
  return KILN_OK;
}

/* The loss node: kiln.Loss(prediction, target) -> "loss". Returns the loss value. */
static int add_loss(kiln_trainer *t, kl_graph *g, int pred, kl_err *e) {
  const char *kind = t->opts.loss ? t->opts.loss : "cross_entropy";
  bool classes = strcmp(kind, "cross_entropy") == 0 || strcmp(kind, "nll") == 0;
  const kl_type *pt = &g->values[pred].type;
  if (pt->dtype != KL_F32)
    return kl_fail(e, KILN_ERR_DTYPE, "the model's first output '%s' is %s; training takes "
                   "float32", g->values[pred].name, kl_dtype_name(pt->dtype)), -1;
  if (pt->rank < 0)
    return kl_fail(e, KILN_ERR_SHAPE, "the model's first output '%s' has no known rank",
                   g->values[pred].name), -1;
  if (classes && pt->rank < 2)
    return kl_fail(e, KILN_ERR_SHAPE, "loss %s compares scores [N, C, ...] with class "
                   "indices; the model's first output '%s' has rank %d", kind,
                   g->values[pred].name, pt->rank), -1;
  if (kl_graph_find_value(g, "target") >= 0)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "the model already has a value named "
                   "'target', the name of the training target"), -1;
  kl_dim dims[KL_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < pt->rank; i++)
    if (!classes || i != 1) dims[rank++] = pt->dims[i];
  int target = new_input(g, "target", classes ? KL_I64 : KL_F32, rank, dims, e);
  if (target < 0) return -1;
  int loss = kl_graph_add_value(g, kl_graph_find_value(g, "loss") >= 0 ? NULL : "loss", e);
  int in[2] = {pred, target};
  int n = loss < 0 ? -1 : kl_graph_add_node(g, KL_OP_KilnLoss, "loss", 2, in, 1, &loss, e);
  if (n < 0) return -1;
  kiln_status st = kl_node_set_string(g, n, "kind", kind, e);
  if (st == KILN_OK && t->opts.reduction)
    st = kl_node_set_string(g, n, "reduction", t->opts.reduction, e);
  if (st == KILN_OK) st = kl_node_set_int(g, n, "ignore_index", t->opts.ignore_index, e);
  if (st == KILN_OK && t->opts.label_smoothing != 0)
    st = kl_node_set_float(g, n, "label_smoothing", (float)t->opts.label_smoothing, e);
  if (st == KILN_OK && t->opts.smooth_l1_beta != 1.0)
    st = kl_node_set_float(g, n, "beta", (float)t->opts.smooth_l1_beta, e);
  return st == KILN_OK ? loss : -1;
}

static kl_op op_for(opt_kind k) {
  switch (k) {
  case OPT_SGD: return KL_OP_KilnSGD;
  case OPT_ADAGRAD: return KL_OP_KilnAdagrad;
  case OPT_ADAM:
  case OPT_ADAMW: return KL_OP_KilnAdam;
  case OPT_LAMB: return KL_OP_KilnLamb;
  case OPT_LARS: return KL_OP_KilnLars;
  }
  return KL_OP_KilnSGD;
}

/* The optimizer node of weight p: reads hyper, the weight, its gradient, its state and
 * the guard; its output (the trust ratio) is a graph output. */
static kiln_status add_update(kiln_trainer *t, kl_graph *g, int p, int grad, int hyper,
                              int scale, int *state, int trail, kl_err *e) {
  int in[8], n_in = 0;
  in[n_in++] = hyper;
  in[n_in++] = p;
  in[n_in++] = grad;
  int ns = n_state_of(t);
  /* SGD without momentum has an absent Momentum; Adam's MaxExpAvgSq slot is absent
   * without amsgrad */
  if (t->opt == OPT_SGD) {
    in[n_in++] = ns ? state[0] : KL_ABSENT;
  } else if (t->opt == OPT_ADAM || t->opt == OPT_ADAMW) {
    in[n_in++] = state[0];
    in[n_in++] = state[1];
    in[n_in++] = ns > 2 ? state[2] : KL_ABSENT;
  } else {
    for (int k = 0; k < ns; k++) in[n_in++] = state[k];
  }
  in[n_in++] = scale;
  if (trail >= 0) in[n_in++] = trail; /* every optimizer: Trail follows GradScale */
  char name[512];
  snprintf(name, sizeof name, "%s/update", g->values[p].name);
  int out = new_value(g, g->values[p].name, ".ratio", e);
  int n = out < 0 ? -1 : kl_graph_add_node(g, op_for(t->opt), name, n_in, in, 1, &out, e);
  if (n < 0) return e->code;
  kiln_status st = KILN_OK;
  if (t->opt == OPT_SGD && t->opts.nesterov) st = kl_node_set_int(g, n, "nesterov", 1, e);
  if (st == KILN_OK && t->opts.maximize && t->opt != OPT_LAMB && t->opt != OPT_LARS)
    st = kl_node_set_int(g, n, "maximize", 1, e);
  if (st == KILN_OK && (t->opt == OPT_ADAM || t->opt == OPT_ADAMW) && t->opts.amsgrad)
    st = kl_node_set_int(g, n, "amsgrad", 1, e);
  if (st == KILN_OK && t->opt == OPT_ADAMW) st = kl_node_set_int(g, n, "decoupled", 1, e);
  if (st == KILN_OK) st = kl_graph_add_output(g, out, e);
  return st;
}

/* The update nodes write their weight in place: each must run after every other reader
 * of that weight. Each is moved to just after the last node it must follow (its
 * inputs' producers, the weight's readers); the rest keep their order. */
kiln_status kl_train_update_order(kl_graph *g, kl_err *e) {
  int n = g->n_nodes;
  int *after = malloc(sizeof(int) * (size_t)(n + 1));
  int *last_read = malloc(sizeof(int) * (size_t)(g->n_values + 1));
  kl_node *sorted = malloc(sizeof(kl_node) * (size_t)(n + 1));
  int *count = calloc((size_t)n + 2, sizeof(int));
  int *slot = malloc(sizeof(int) * (size_t)(n + 1));
  kiln_status st = KILN_OK;
  if (!after || !last_read || !sorted || !count || !slot) {
    st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory ordering the updates");
    goto done;
  }
  for (int v = 0; v < g->n_values; v++) last_read[v] = -1;
  for (int i = 0; i < n; i++) {
    if (kl_op_writes_inputs(g->nodes[i].op)) continue;
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] >= 0) last_read[g->nodes[i].in[k]] = i;
  }
  for (int i = 0; i < n; i++) {
    after[i] = -2; /* not an update */
    if (!kl_op_writes_inputs(g->nodes[i].op)) continue;
    int at = -1;
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0) continue;
      int p = g->values[v].producer;
      if (p > at) at = p;
      if (last_read[v] > at) at = last_read[v];
    }
    after[i] = at;
  }
  /* emit the updates due before any node (after -1), then each node followed by its
   * updates: a counting sort of the updates by the node they follow */
  for (int i = 0; i < n; i++)
    if (after[i] >= -1) count[after[i] + 2]++;
  for (int j = 1; j <= n + 1; j++) count[j] += count[j - 1];
  for (int i = 0; i < n; i++)
    if (after[i] >= -1) slot[count[after[i] + 1]++] = i;
  /* slot[0 .. count[n + 1]) now holds the updates by the node they follow, ascending
   * (after never names an update: their outputs are graph outputs only) */
  int m = 0, next = 0, updates = count[n + 1];
  for (int j = -1; j < n; j++) {
    if (j >= 0 && after[j] != -2) continue;
    if (j >= 0) sorted[m++] = g->nodes[j];
    while (next < updates && after[slot[next]] == j) sorted[m++] = g->nodes[slot[next++]];
  }
  if (m != n) {
    st = kl_fail(e, KILN_ERR_INTERNAL, "ordering the updates placed %d of %d nodes", m, n);
    goto done;
  }
  memcpy(g->nodes, sorted, sizeof(kl_node) * (size_t)n);
  kl_graph_uses_reset(g);
  for (int v = 0; v < g->n_values; v++) g->values[v].producer = -1;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++)
      if (g->nodes[i].out[k] >= 0) g->values[g->nodes[i].out[k]].producer = i;
done:
  free(after);
  free(last_read);
  free(sorted);
  free(count);
  free(slot);
  return st;
}

/* bf16 training: weight v (a float32 constant) becomes the float32 of input
 * "<name>.bf16" (its top half; a Cast node makes v from it), with input "<name>.trail"
 * holding the low halves; both are split from v's data into p->top and p->trail unless
 * those exist already (the evaluation graph reads the step graph's). *top_in and
 * *trail_in get the inputs (trail_in may be NULL: not made). */
static kiln_status split_weight(kl_graph *g, int v, tparam *p, int *top_in, int *trail_in,
                                kl_err *e) {
  kl_value *val = &g->values[v];
  kl_dim dims[KL_MAX_RANK];
  for (int d = 0; d < val->type.rank; d++) dims[d] = val->type.dims[d];
  int rank = val->type.rank;
  char name[600];
  if (!p->top) {
    size_t bytes = (size_t)(p->numel > 0 ? p->numel : 1) * sizeof(uint16_t);
    p->top = malloc(bytes);
    p->trail = malloc(bytes);
    if (!p->top || !p->trail) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; i < p->numel; i++)
      kl_split_bf16(((const float *)val->data)[i], &p->top[i], &p->trail[i]);
  }
  if (!val->borrowed) free(val->data);
  val->data = NULL;
  val->nbytes = 0;
  val->borrowed = false;
  val->kind = KL_VALUE_INTERMEDIATE;
  snprintf(name, sizeof name, "%s.bf16", p->name);
  *top_in = new_input(g, kl_graph_find_value(g, name) >= 0 ? NULL : name, KL_BF16, rank, dims, e);
  if (*top_in < 0) return e->code;
  if (trail_in) {
    snprintf(name, sizeof name, "%s.trail", p->name);
    *trail_in = new_input(g, kl_graph_find_value(g, name) >= 0 ? NULL : name, KL_U16, rank,
                          dims, e);
    if (*trail_in < 0) return e->code;
  }
  snprintf(name, sizeof name, "%s/bf16_to_f32", p->name);
  int n = kl_graph_add_node(g, KL_OP_Cast, name, 1, top_in, 1, &v, e);
  if (n < 0) return e->code;
  return kl_node_set_int(g, n, "to", KL_F32, e);
}

/* The model file's graph into t->model: imported (sorted, verified, inferred) and each
 * running statistic made a constant of its own (kl_train_own_stats). */
static kiln_status read_model(kiln_trainer *t) {
  kiln_model *m = NULL;
  kiln_status st = kl_model_create(&t->opts, &m);
  if (st != KILN_OK) return kl_fail(&t->err, st, "out of memory");
  if ((st = kl_model_import(m, t->path)) != KILN_OK) kl_fail(&t->err, st, "%s", m->err.msg);
  if (st == KILN_OK) st = kl_train_own_stats(m->g, &t->err);
  if (st == KILN_OK) {
    t->model = m->g;
    m->g = NULL;
  }
  kiln_model_free(m);
  return st;
}

/* The data of t->model's trained weights and running statistics, freed once both graphs
 * are built: the trainer's buffers hold them from then on, and a save fills them back
 * in (without this the trainer held one more copy of the weights). */
static void drop_trained_data(kiln_trainer *t) {
  for (int i = 0; i < t->n_params + t->n_stats; i++) {
    const char *name = i < t->n_params ? t->params[i].name : t->stats[i - t->n_params].name;
    int v = kl_graph_find_value(t->model, name);
    kl_value *val = v >= 0 ? &t->model->values[v] : NULL;
    if (!val || val->kind != KL_VALUE_CONST || val->borrowed) continue;
    free(val->data);
    val->data = NULL;
  }
}

/* *g = a copy of t->model. */
static kiln_status copy_model(kiln_trainer *t, kl_graph **g) {
  *g = kl_graph_copy(t->model);
  return *g ? KILN_OK
            : kl_fail(&t->err, KILN_ERR_OUT_OF_MEMORY, "out of memory copying the model's "
                      "graph");
}

/* The step graph into t->step_m (copied, changed, optimized), with the trainer's
 * weights (t->params) and running statistics (t->stats) taken from it. */
static kiln_status build_step(kiln_trainer *t) {
  kiln_model *m = t->step_m;
  kl_err *e = &t->err;
  kiln_status st = copy_model(t, &m->g);
  if (st != KILN_OK) return st;
  kl_graph *g = m->g;
  if ((st = fold_shapes(t, g, e)) != KILN_OK) return st;
  if (g->n_outputs < 1) return kl_fail(e, KILN_ERR_INVALID_MODEL, "the model has no output");
  int pred = g->outputs[0];
  int seed = new_input(g, "kiln.seed", KL_I64, 0, NULL, e);
  int *bn_outs = NULL, n_bn = 0;
  if (seed < 0) return e->code;
  st = training_form(g, seed, &bn_outs, &n_bn, e);
  int loss = st == KILN_OK ? add_loss(t, g, pred, e) : -1;
  if (loss < 0) {
    free(bn_outs);
    return e->code ? e->code : KILN_ERR_INTERNAL;
  }
  if ((st = kl_graph_infer(g, e)) != KILN_OK) {
    free(bn_outs);
    return st;
  }
  /* the trainable weights: float32 initializers, not frozen, not running statistics */
  int nv = g->n_values;
  bool *trainable = calloc((size_t)nv + 1, sizeof(bool));
  bool *stat = calloc((size_t)nv + 1, sizeof(bool));
  int *grads = NULL;
  if (!trainable || !stat) st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  else mark_bn_stats(g, stat);
  for (int v = 0; st == KILN_OK && v < nv; v++) trainable[v] = may_train(t, g, v, stat);
  free(stat);
  /* a frozen name that is no weight is a typo worth saying */
  char name[LIST_ITEM_MAX];
  for (const char *p = t->opts.frozen; st == KILN_OK && next_item(&p, name);) {
    int v = kl_graph_find_value(g, name);
    if (*name && (v < 0 || g->values[v].kind != KL_VALUE_CONST))
      st = kl_fail(e, KILN_ERR_NOT_FOUND, "option frozen: the model has no weight '%s'", name);
  }
  g->n_outputs = 0;
  if (st == KILN_OK) st = kl_graph_add_output(g, loss, e);
  if (st == KILN_OK) st = kl_autograd(g, loss, trainable, &grads, e);
  /* the weights the loss depends on become inputs bound to the trainer's buffers */
  int n_params = 0;
  for (int v = 0; st == KILN_OK && v < nv; v++) n_params += trainable[v] && grads[v] >= 0;
  if (st == KILN_OK && n_params == 0)
    st = kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "the loss depends on no trainable weight");
  if (st == KILN_OK && !(t->params = calloc((size_t)n_params, sizeof(tparam))))
    st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  /* the running statistics too, and their new values as outputs */
  if (st == KILN_OK && n_bn && !(t->stats = calloc((size_t)n_bn, sizeof(tstat))))
    st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; st == KILN_OK && i < n_bn; i++) {
    int newv = bn_outs[i], p = g->values[newv].producer;
    int old = g->nodes[p].in[3 + (i & 1)];
    tstat *s = &t->stats[t->n_stats];
    const kl_type *ty = &g->values[old].type;
    if (!kl_type_numel(ty, &s->numel) || ty->dtype != KL_F32) {
      st = kl_fail(e, KILN_ERR_UNSUPPORTED, "running statistic '%s' must be float32 of a "
                   "known size", g->values[old].name);
      break;
    }
    s->rank = ty->rank;
    for (int d = 0; d < ty->rank; d++) s->dims[d] = ty->dims[d].size;
    if (!(s->name = strdup(g->values[old].name))) {
      st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    t->n_stats++;
    /* a statistic shared by two BatchNormalizations: one buffer, the last's update */
    if (g->values[old].kind == KL_VALUE_CONST) st = const_to_input(g, old, &s->data, e);
    s->out = g->n_outputs;
    if (st == KILN_OK) st = kl_graph_add_output(g, newv, e);
  }
  int hyper = -1, hyper_nd = -1, scale = -1;
  if (st == KILN_OK) {
    kl_dim hd = {t->n_hyper, -1};
    hyper = new_input(g, "kiln.hyper", KL_F64, 1, &hd, e);
    /* the guard: 1 when the loss is finite, else NaN (loss - loss is NaN for +-Inf) */
    int d = hyper < 0 ? -1 : new_value(g, "loss", ".guard0", e);
    int in[2] = {loss, loss};
    if (d < 0 || kl_graph_add_node(g, KL_OP_Sub, "loss/guard", 2, in, 1, &d, e) < 0)
      st = e->code;
    float *one = st == KILN_OK ? malloc(sizeof(float)) : NULL;
    if (st == KILN_OK && !one) st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (st == KILN_OK) {
      *one = 1.0f;
      int c = kl_rw_add_const(g, "loss/one", KL_F32, 0, NULL, one, e);
      scale = c < 0 ? -1 : new_value(g, "loss", ".guard", e);
      int in2[2] = {d, c};
      if (scale < 0 || kl_graph_add_node(g, KL_OP_Add, "loss/guard1", 2, in2, 1, &scale, e) < 0)
        st = e->code;
    }
    if (st == KILN_OK && t->opts.clip_norm > 0) {
      /* clip by the global norm: scale *= min(1, max_norm / (norm + 1e-6)) */
      int *gin = malloc(sizeof(int) * (size_t)n_params);
      int k = 0, norm = new_value(g, "grad", ".norm", e), coef = new_value(g, "grad", ".clip", e);
      if (!gin || norm < 0 || coef < 0)
        st = e->code ? e->code : kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      for (int v = 0; st == KILN_OK && v < nv; v++)
        if (trainable[v] && grads[v] >= 0) gin[k++] = grads[v];
      int nn = st != KILN_OK ? -1
                             : kl_graph_add_node(g, KL_OP_KilnGradNorm, "grad/norm", k, gin, 1,
                                                 &norm, e);
      int cn = nn < 0 ? -1
                      : kl_graph_add_node(g, KL_OP_KilnClipCoef, "grad/clip", 1, &norm, 1,
                                          &coef, e);
      if (st == KILN_OK && cn < 0) st = e->code;
      if (st == KILN_OK) st = kl_node_set_float(g, cn, "max_norm", (float)t->opts.clip_norm, e);
      int s2 = st == KILN_OK ? new_value(g, "grad", ".scale", e) : -1;
      int in3[2] = {scale, coef};
      if (st == KILN_OK && (s2 < 0 || kl_graph_add_node(g, KL_OP_Mul, "grad/scale", 2, in3, 1, &s2, e) < 0))
        st = e->code;
      scale = s2;
      free(gin);
    }
  }
  for (int v = 0; st == KILN_OK && v < nv; v++) {
    if (!trainable[v] || grads[v] < 0) continue;
    tparam *p = &t->params[t->n_params];
    /* a copy: the inputs made below grow g->values, which may move */
    const kl_type type = g->values[v].type, *ty = &type;
    if (!kl_type_numel(ty, &p->numel)) {
      st = kl_fail(e, KILN_ERR_INTERNAL, "weight '%s' has no known size", g->values[v].name);
      break;
    }
    p->rank = ty->rank;
    for (int d = 0; d < ty->rank; d++) p->dims[d] = ty->dims[d].size;
    if (!(p->name = strdup(g->values[v].name))) {
      st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    t->n_params++;
    int param_in = v, trail_in = KL_ABSENT;
    if (t->opts.bf16) st = split_weight(g, v, p, &param_in, &trail_in, e);
    else st = const_to_input(g, v, &p->data, e);
    int state[MAX_STATE];
    p->n_state = n_state_of(t);
    for (int k = 0; st == KILN_OK && k < p->n_state; k++) {
      char sfx[64];
      snprintf(sfx, sizeof sfx, ".%s", state_name(t, k));
      kl_dim dims[KL_MAX_RANK];
      for (int d = 0; d < ty->rank; d++) dims[d] = ty->dims[d];
      char name[600];
      snprintf(name, sizeof name, "%s%s", p->name, sfx);
      state[k] = new_input(g, kl_graph_find_value(g, name) >= 0 ? NULL : name, KL_F32,
                           p->rank, dims, e);
      if (state[k] < 0) st = e->code;
      else if (!(p->state[k] = falloc(p->numel)))
        st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      else {
        float init = t->opt == OPT_ADAGRAD ? (float)t->opts.initial_accumulator : 0.0f;
        for (int64_t i = 0; i < p->numel; i++) p->state[k][i] = init;
      }
    }
    int h = hyper;
    if (st == KILN_OK && no_decay_of(t, p->name, p->rank)) {
      if (hyper_nd < 0) {
        kl_dim hd = {t->n_hyper, -1};
        hyper_nd = new_input(g, "kiln.hyper_nd", KL_F64, 1, &hd, e);
        if (hyper_nd < 0) st = e->code;
        t->has_nd = true;
      }
      h = hyper_nd;
    }
    if (st == KILN_OK) st = add_update(t, g, param_in, grads[v], h, scale, state, trail_in, e);
  }
  if (st == KILN_OK) st = check_no_decay(t, e);
  free(trainable);
  free(grads);
  free(bn_outs);
  if (st == KILN_OK) st = kl_graph_toposort(g, e);
  if (st == KILN_OK) st = kl_graph_verify(g, e);
  if (st == KILN_OK) st = kl_graph_infer(g, e);
  if (st == KILN_OK) {
    st = kl_model_finish(m);
    if (st != KILN_OK) kl_fail(e, st, "%s", m->err.msg);
  }
  if (st == KILN_OK) st = kl_train_update_order(m->g, e);
  return st;
}

/* The evaluation graph: the model as it is, its trained weights and running statistics
 * made inputs (bound to the trainer's buffers). */
static kiln_status build_eval(kiln_trainer *t) {
  kiln_model *m = t->eval_m;
  kl_err *e = &t->err;
  kiln_status st = copy_model(t, &m->g);
  if (st != KILN_OK) return st;
  kl_graph *g = m->g;
  for (int i = 0; st == KILN_OK && i < t->n_params; i++) {
    int v = kl_graph_find_value(g, t->params[i].name);
    if (v < 0 || g->values[v].kind != KL_VALUE_CONST)
      return kl_fail(e, KILN_ERR_INTERNAL, "weight '%s' is not in the evaluation graph",
                     t->params[i].name);
    if (t->opts.bf16) {
      int top;
      st = split_weight(g, v, &t->params[i], &top, NULL, e);
    } else {
      st = const_to_input(g, v, NULL, e);
    }
  }
  if (st == KILN_OK && t->opts.bf16) st = kl_graph_toposort(g, e);
  for (int i = 0; st == KILN_OK && i < t->n_stats; i++) {
    int v = kl_graph_find_value(g, t->stats[i].name);
    if (v >= 0 && g->values[v].kind == KL_VALUE_CONST) st = const_to_input(g, v, NULL, e);
  }
  if (st == KILN_OK) {
    st = kl_model_finish(m);
    if (st != KILN_OK) kl_fail(e, st, "%s", m->err.msg);
  }
  return st;
}

static kiln_status bind_f32(kiln_trainer *t, kiln_session *s, const char *name, int rank,
                            const int64_t *dims, int64_t numel, const float *data) {
  kiln_status st = kiln_session_set_input(s, name, KILN_DTYPE_FLOAT32, rank, dims, data,
                                          (size_t)numel * sizeof(float));
  return st == KILN_OK ? st : kl_fail(&t->err, st, "%s", kiln_session_error(s));
}

/* Bind the trainer's buffers to the sessions' inputs of the same names. */
static kiln_status bind_state(kiln_trainer *t) {
  kiln_status st = KILN_OK;
  int64_t hdims[1] = {t->n_hyper};
  st = kiln_session_set_input(t->step_s, "kiln.hyper", KILN_DTYPE_FLOAT64, 1, hdims, t->hyper,
                              sizeof(double) * (size_t)t->n_hyper);
  if (st == KILN_OK && t->has_nd)
    st = kiln_session_set_input(t->step_s, "kiln.hyper_nd", KILN_DTYPE_FLOAT64, 1, hdims,
                                t->hyper_nd, sizeof(double) * (size_t)t->n_hyper);
  if (st == KILN_OK)
    st = kiln_session_set_input(t->step_s, "kiln.seed", KILN_DTYPE_INT64, 0, NULL,
                                &t->seed_now, sizeof t->seed_now);
  if (st != KILN_OK) return kl_fail(&t->err, st, "%s", kiln_session_error(t->step_s));
  for (int i = 0; st == KILN_OK && i < t->n_params; i++) {
    tparam *p = &t->params[i];
    if (t->opts.bf16) {
      char name[600];
      size_t bytes = (size_t)p->numel * sizeof(uint16_t);
      snprintf(name, sizeof name, "%s.bf16", p->name);
      kiln_session *both[2] = {t->step_s, t->eval_s};
      for (int k = 0; k < 2 && st == KILN_OK; k++)
        if ((st = kiln_session_set_input(both[k], name, KILN_DTYPE_BFLOAT16, p->rank, p->dims,
                                         p->top, bytes)) != KILN_OK)
          kl_fail(&t->err, st, "%s", kiln_session_error(both[k]));
      snprintf(name, sizeof name, "%s.trail", p->name);
      if (st == KILN_OK && (st = kiln_session_set_input(t->step_s, name, KILN_DTYPE_UINT16,
                                                        p->rank, p->dims, p->trail, bytes)) != KILN_OK)
        kl_fail(&t->err, st, "%s", kiln_session_error(t->step_s));
    } else {
      st = bind_f32(t, t->step_s, p->name, p->rank, p->dims, p->numel, p->data);
      if (st == KILN_OK)
        st = bind_f32(t, t->eval_s, p->name, p->rank, p->dims, p->numel, p->data);
    }
    for (int k = 0; st == KILN_OK && k < p->n_state; k++) {
      char name[600];
      snprintf(name, sizeof name, "%s.%s", p->name, state_name(t, k));
      st = bind_f32(t, t->step_s, name, p->rank, p->dims, p->numel, p->state[k]);
    }
  }
  for (int i = 0; st == KILN_OK && i < t->n_stats; i++) {
    tstat *s = &t->stats[i];
    st = bind_f32(t, t->step_s, s->name, s->rank, s->dims, s->numel, s->data);
    if (st == KILN_OK) st = bind_f32(t, t->eval_s, s->name, s->rank, s->dims, s->numel, s->data);
  }
  return st;
}

static double default_lr(opt_kind k) {
  return k == OPT_ADAGRAD || k == OPT_LARS ? 1e-2 : 1e-3;
}

kiln_status kiln_trainer_create(const char *path, const kiln_options *options,
                                kiln_trainer **out) {
  if (!out) return KILN_ERR_INVALID_ARGUMENT;
  kiln_trainer *t = calloc(1, sizeof *t);
  *out = t;
  if (!t) return KILN_ERR_OUT_OF_MEMORY;
  kiln_status st = kl_options_copy(&t->opts, options, &t->err);
  if (st != KILN_OK) return st;
  if (!path) return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "path is NULL");
  if (!(t->path = strdup(path))) return kl_fail(&t->err, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  size_t n = strlen(path);
  if (n > 3 && strcmp(path + n - 3, ".pt") == 0)
    return kl_fail(&t->err, KILN_ERR_UNSUPPORTED, "%s: training reads ONNX models; export "
                   "the TorchScript model to ONNX first", path);
  if (t->opts.device && *t->opts.device && strcmp(t->opts.device, "cpu") != 0)
    return kl_fail(&t->err, KILN_ERR_UNSUPPORTED, "training runs on the CPU; device '%s' is "
                   "not supported for training yet", t->opts.device);
  t->opt = opt_of(t->opts.optimizer);
  t->lr = or_default(t->opts.lr, default_lr(t->opt));
  if (t->opt == OPT_SGD && t->opts.nesterov && (t->opts.momentum <= 0 || t->opts.dampening != 0))
    return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "Nesterov momentum needs a momentum "
                   "above 0 and zero dampening (as PyTorch's SGD)");
  fill_hyper(t);
  st = kl_model_create(&t->opts, &t->step_m);
  if (st == KILN_OK) st = kl_model_create(&t->opts, &t->eval_m);
  if (st != KILN_OK) return kl_fail(&t->err, st, "out of memory");
  st = read_model(t);
  if (st == KILN_OK) st = build_step(t);
  if (st == KILN_OK) st = build_eval(t);
  if (st == KILN_OK) drop_trained_data(t);
  /* bf16 training computes in bf16 too at the AMX level (precision unset or "auto"):
   * there it halves ResNet-18's step; at avx512_bf16 oneDNN 2.6's bf16 convolutions made
   * it 1.55 times float32's on a Xeon capped to that level, so float32 stays the
   * default there (precision "bf16" asks for it) */
  kiln_options so = t->opts;
  kl_err probe = {0};
  if (t->opts.bf16 && (!so.precision || strcmp(so.precision, "auto") == 0) &&
      kl_isa_level() == KL_ISA_AMX && kl_cpu_bf16_check(&probe) == KILN_OK)
    so.precision = (char *)"bf16"; /* a shallow copy for session creation: not freed */
  if (st == KILN_OK && (st = kiln_session_create(t->step_m, &so, &t->step_s)) != KILN_OK)
    kl_fail(&t->err, st, "%s", kiln_session_error(t->step_s));
  if (st == KILN_OK && (st = kiln_session_create(t->eval_m, &so, &t->eval_s)) != KILN_OK)
    kl_fail(&t->err, st, "%s", kiln_session_error(t->eval_s));
  if (st == KILN_OK) st = bind_state(t);
  if (st != KILN_OK && strncmp(t->err.msg, path, n) != 0) kl_err_prefix(&t->err, "%s", path);
  return st;
}

void kiln_trainer_free(kiln_trainer *t) {
  if (!t) return;
  kiln_session_free(t->step_s);
  kiln_session_free(t->eval_s);
  kiln_model_free(t->step_m);
  kiln_model_free(t->eval_m);
  kl_graph_free(t->model);
  for (int i = 0; i < t->n_params; i++) {
    free(t->params[i].name);
    free(t->params[i].data);
    free(t->params[i].top);
    free(t->params[i].trail);
    for (int k = 0; k < MAX_STATE; k++) free(t->params[i].state[k]);
  }
  free(t->params);
  for (int i = 0; i < t->n_stats; i++) {
    free(t->stats[i].name);
    free(t->stats[i].data);
  }
  free(t->stats);
  for (int i = 0; i < t->n_weights; i++) free(t->weights[i]);
  free(t->weights);
  free(t->path);
  kl_options_clear(&t->opts);
  free(t);
}

const char *kiln_trainer_error(const kiln_trainer *t) { return t ? t->err.msg : "trainer is NULL"; }

static bool ready(kiln_trainer *t) {
  if (t->step_s && t->eval_s) return true;
  kl_fail(&t->err, KILN_ERR_STATE, "the trainer was not created");
  return false;
}

kiln_status kiln_trainer_set_input(kiln_trainer *t, const char *name, kiln_dtype dtype,
                                   int rank, const int64_t *dims, const void *data,
                                   size_t size_bytes) {
  if (!t) return KILN_ERR_INVALID_ARGUMENT;
  kl_err_clear(&t->err);
  if (!ready(t)) return t->err.code;
  if (!name) return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "input name is NULL");
  if (strncmp(name, "kiln.", 5) == 0 || kiln_model_input_index(t->eval_m, name) < 0) {
    if (strcmp(name, "target") != 0)
      return kl_fail(&t->err, KILN_ERR_NOT_FOUND, "the model has no input '%s' (a batch is "
                     "the model's inputs and 'target')", name);
  } else {
    for (int i = 0; i < t->n_params; i++)
      if (strcmp(name, t->params[i].name) == 0)
        return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "'%s' is a trained weight, not an "
                       "input", name);
    for (int i = 0; i < t->n_params; i++) {
      size_t len = strlen(t->params[i].name);
      if (strncmp(name, t->params[i].name, len) == 0 &&
          (strcmp(name + len, ".bf16") == 0 || strcmp(name + len, ".trail") == 0))
        return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "'%s' is half of a trained weight, "
                       "not an input", name);
    }
    for (int i = 0; i < t->n_stats; i++)
      if (strcmp(name, t->stats[i].name) == 0)
        return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "'%s' is a running statistic the "
                       "trainer keeps, not an input", name);
    kiln_status st = kiln_session_set_input(t->eval_s, name, dtype, rank, dims, data, size_bytes);
    if (st != KILN_OK) return kl_fail(&t->err, st, "%s", kiln_session_error(t->eval_s));
  }
  kiln_status st = kiln_session_set_input(t->step_s, name, dtype, rank, dims, data, size_bytes);
  if (st != KILN_OK) return kl_fail(&t->err, st, "%s", kiln_session_error(t->step_s));
  return KILN_OK;
}

/* splitmix64: the dropout seed of each step from the option seed and the step */
static int64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return (int64_t)((x ^ (x >> 31)) >> 1);
}

kiln_status kiln_trainer_step(kiln_trainer *t, double *loss) {
  if (!t) return KILN_ERR_INVALID_ARGUMENT;
  kl_err_clear(&t->err);
  if (loss) *loss = NAN;
  if (!ready(t)) return t->err.code;
  t->hyper[0] = t->lr;
  t->hyper[t->step_at] = (double)(t->steps + 1);
  sync_hyper_nd(t);
  t->seed_now = mix((uint64_t)t->opts.seed * 0x100000001B3ull + (uint64_t)t->steps);
  kiln_status st = kiln_session_run(t->step_s);
  if (st != KILN_OK)
    return kl_fail(&t->err, st, "step %" PRId64 ": %s", t->steps + 1, kiln_session_error(t->step_s));
  kiln_tensor_info info;
  const void *data;
  st = kiln_session_get_output(t->step_s, 0, &info, &data);
  if (st != KILN_OK) return kl_fail(&t->err, st, "%s", kiln_session_error(t->step_s));
  double l = *(const float *)data;
  if (loss) *loss = l;
  if (!isfinite(l))
    return kl_fail(&t->err, KILN_ERR_STATE, "step %" PRId64 ": the loss is %g; the weights "
                   "and optimizer state were left as they were before it", t->steps + 1, l);
  for (int i = 0; i < t->n_stats; i++) {
    st = kiln_session_get_output(t->step_s, t->stats[i].out, &info, &data);
    if (st != KILN_OK) return kl_fail(&t->err, st, "%s", kiln_session_error(t->step_s));
    memcpy(t->stats[i].data, data, (size_t)t->stats[i].numel * sizeof(float));
  }
  t->steps++;
  return KILN_OK;
}

kiln_status kiln_trainer_set_lr(kiln_trainer *t, double lr) {
  if (!t) return KILN_ERR_INVALID_ARGUMENT;
  if (!(lr >= 0) || isinf(lr))
    return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "learning rate %g: expected a finite "
                   "value, at least 0", lr);
  t->lr = lr;
  return KILN_OK;
}

double kiln_trainer_lr(const kiln_trainer *t) { return t ? t->lr : NAN; }

int kiln_trainer_weight_count(const kiln_trainer *t) {
  return t && t->step_s ? t->n_params : 0;
}

const char *kiln_trainer_weight_name(const kiln_trainer *t, int index) {
  if (!t || !t->step_s || index < 0 || index >= t->n_params) return NULL;
  return t->params[index].name;
}
int64_t kiln_trainer_steps(const kiln_trainer *t) { return t ? t->steps : 0; }

kiln_status kiln_trainer_evaluate(kiln_trainer *t, kiln_tensor_info *info, const void **data) {
  if (!t || !info || !data) return KILN_ERR_INVALID_ARGUMENT;
  kl_err_clear(&t->err);
  if (!ready(t)) return t->err.code;
  kiln_status st = kiln_session_run(t->eval_s);
  if (st == KILN_OK) st = kiln_session_get_output(t->eval_s, 0, info, data);
  if (st != KILN_OK) return kl_fail(&t->err, st, "%s", kiln_session_error(t->eval_s));
  return KILN_OK;
}

/* ---- saving ---- */

kiln_status kiln_trainer_save(kiln_trainer *t, const char *path) {
  if (!t) return KILN_ERR_INVALID_ARGUMENT;
  kl_err_clear(&t->err);
  if (!ready(t)) return t->err.code;
  if (!path) return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "path is NULL");
  /* the model as read, its weights replaced by the trained ones */
  kl_graph *g = NULL;
  kiln_status st = copy_model(t, &g);
  for (int i = 0; st == KILN_OK && i < t->n_params + t->n_stats; i++) {
    const char *name = i < t->n_params ? t->params[i].name : t->stats[i - t->n_params].name;
    const float *src = i < t->n_params ? t->params[i].data : t->stats[i - t->n_params].data;
    float *joined = NULL;
    if (i < t->n_params && t->params[i].top) { /* the FP32 master, exactly */
      const tparam *p = &t->params[i];
      if (!(joined = malloc(sizeof(float) * (size_t)(p->numel ? p->numel : 1)))) {
        st = kl_fail(&t->err, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        break;
      }
      for (int64_t j = 0; j < p->numel; j++) joined[j] = kl_join_bf16(p->top[j], p->trail[j]);
      src = joined;
    }
    int v = kl_graph_find_value(g, name);
    kl_value *val = v >= 0 ? &g->values[v] : NULL;
    if (!val || val->kind != KL_VALUE_CONST || val->type.dtype != KL_F32) {
      free(joined);
      st = kl_fail(&t->err, KILN_ERR_INTERNAL, "weight '%s' is not in the model", name);
      break;
    }
    if (!val->data && !(val->data = malloc(val->nbytes ? val->nbytes : 1))) { /* dropped */
      free(joined);
      st = kl_fail(&t->err, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    if (val->borrowed) { /* held by the file's mapping: the graph gets its own copy */
      void *copy = malloc(val->nbytes ? val->nbytes : 1);
      if (!copy) {
        free(joined);
        st = kl_fail(&t->err, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        break;
      }
      val->data = copy;
      val->borrowed = false;
    }
    memcpy(val->data, src, val->nbytes);
    free(joined);
  }
  if (st == KILN_OK) st = kl_onnx_export_file(g, path, &t->err);
  kl_graph_free(g);
  return st;
}

/* dir/name, refused when it does not fit */
static kiln_status join(kiln_trainer *t, char *buf, size_t len, const char *dir,
                        const char *name, int i, const char *what) {
  int n = what ? snprintf(buf, len, "%s/%s%d.%s.npy", dir, name, i, what)
               : snprintf(buf, len, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= len)
    return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "checkpoint folder path too long");
  return KILN_OK;
}

/* Each saved tensor: the weight i as param<i>.value.npy, its state as
 * param<i>.<state>.npy, statistic i as stat<i>.value.npy; a manifest names them. */
typedef struct ck_item {
  const char *prefix, *what;
  int index;
  void *data;
  int rank;
  const int64_t *dims;
  int64_t numel;
  kl_dtype dtype; /* float32, or uint16 for bf16 training's halves */
} ck_item;

static int ck_items(kiln_trainer *t, ck_item *items) {
  int n = 0;
  for (int i = 0; i < t->n_params; i++) {
    tparam *p = &t->params[i];
    if (p->top) {
      items[n++] = (ck_item){"param", "top", i, p->top, p->rank, p->dims, p->numel, KL_U16};
      items[n++] = (ck_item){"param", "trail", i, p->trail, p->rank, p->dims, p->numel, KL_U16};
    } else {
      items[n++] = (ck_item){"param", "value", i, p->data, p->rank, p->dims, p->numel, KL_F32};
    }
    for (int k = 0; k < p->n_state; k++)
      items[n++] = (ck_item){"param", state_name(t, k), i, p->state[k], p->rank, p->dims,
                             p->numel, KL_F32};
  }
  for (int i = 0; i < t->n_stats; i++) {
    tstat *s = &t->stats[i];
    items[n++] = (ck_item){"stat", "value", i, s->data, s->rank, s->dims, s->numel, KL_F32};
  }
  return n;
}

kiln_status kiln_trainer_save_checkpoint(kiln_trainer *t, const char *dir) {
  if (!t) return KILN_ERR_INVALID_ARGUMENT;
  kl_err_clear(&t->err);
  if (!ready(t)) return t->err.code;
  if (!dir || !*dir) return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "folder is NULL or empty");
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return kl_fail(&t->err, KILN_ERR_IO, "%s: cannot create the folder: %s", dir, strerror(errno));
  ck_item *items = malloc(sizeof(ck_item) * (size_t)(t->n_params * (2 + MAX_STATE) + t->n_stats + 1));
  if (!items) return kl_fail(&t->err, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  int n = ck_items(t, items);
  char path[4096];
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < n; i++) {
    st = join(t, path, sizeof path, dir, items[i].prefix, items[i].index, items[i].what);
    kl_tensor x = {.dtype = items[i].dtype, .rank = items[i].rank, .data = items[i].data};
    memcpy(x.dims, items[i].dims, sizeof(int64_t) * (size_t)items[i].rank);
    if (st == KILN_OK) st = kl_npy_write(path, &x, &t->err);
  }
  /* the manifest last: a checkpoint without one is incomplete. Made in memory and
   * written as the arrays are (kl_file_write: a new file renamed over the old one), so
   * that a link or FIFO planted in the folder where it goes is replaced, not followed
   * (fopen "w" overwrote a link's target, and blocked on a FIFO). */
  if (st == KILN_OK) st = join(t, path, sizeof path, dir, "checkpoint.json", 0, NULL);
  char *text = NULL;
  size_t len = 0;
  FILE *f = st == KILN_OK ? open_memstream(&text, &len) : NULL;
  if (st == KILN_OK && !f) st = kl_fail(&t->err, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (f) {
    fprintf(f, "{\"kiln_checkpoint\": 1, \"optimizer\": \"%s\", \"steps\": %" PRId64
            ", \"lr\": %.17g, \"params\": %d, \"stats\": %d, \"names\": [", opt_name(t->opt),
            t->steps, t->lr, t->n_params, t->n_stats);
    for (int i = 0; i < t->n_params + t->n_stats; i++) {
      const char *name = i < t->n_params ? t->params[i].name : t->stats[i - t->n_params].name;
      fputc(i ? ',' : ' ', f);
      fputc('"', f);
      for (const char *c = name; *c; c++) {
        if (*c == '"' || *c == '\\') fputc('\\', f);
        if ((unsigned char)*c >= 0x20) fputc(*c, f);
      }
      fputc('"', f);
    }
    fprintf(f, "]}\n");
    if (fclose(f) != 0 || !text) st = kl_fail(&t->err, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (st == KILN_OK) st = kl_file_write(path, text, len, NULL, 0, &t->err);
  }
  free(text);
  free(items);
  return st;
}

/* The integer after "key": in the manifest. */
static bool manifest_int(const char *text, const char *key, int64_t *v) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(text, pat);
  if (!p) return false;
  char *end;
  long long x = strtoll(p + strlen(pat), &end, 10);
  if (end == p + strlen(pat)) return false;
  *v = x;
  return true;
}

/* A checkpoint kiln saved holds no symbolic link (kl_file_write replaces one planted
 * where a file goes), so one in the folder is refused rather than followed: it could
 * lead anywhere outside the folder the caller named. */
static kiln_status no_link(kiln_trainer *t, const char *path) {
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
    return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "%s is a symbolic link; a checkpoint "
                   "kiln saves holds none (it would be read from wherever the link leads)",
                   path);
  return KILN_OK;
}

kiln_status kiln_trainer_load_checkpoint(kiln_trainer *t, const char *dir) {
  if (!t) return KILN_ERR_INVALID_ARGUMENT;
  kl_err_clear(&t->err);
  if (!ready(t)) return t->err.code;
  if (!dir || !*dir) return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "folder is NULL or empty");
  char path[4096], text[1 << 16];
  kiln_status st = join(t, path, sizeof path, dir, "checkpoint.json", 0, NULL);
  if (st != KILN_OK) return st;
  /* a regular file only (a FIFO planted there blocked fopen forever); the numbers come
   * first, a long list of names after them is not needed */
  void *buf;
  size_t len;
  st = no_link(t, path);
  if (st == KILN_OK) st = kl_file_read(path, (size_t)64 << 20, &buf, &len, &t->err);
  if (st != KILN_OK) return st;
  if (len > sizeof text - 1) len = sizeof text - 1;
  memcpy(text, buf, len);
  free(buf);
  text[len] = '\0';
  int64_t steps, params, stats;
  char want[64];
  snprintf(want, sizeof want, "\"optimizer\": \"%s\"", opt_name(t->opt));
  if (!manifest_int(text, "steps", &steps) || !manifest_int(text, "params", &params) ||
      !manifest_int(text, "stats", &stats) || steps < 0)
    return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "%s: not a kiln checkpoint manifest", path);
  if (!strstr(text, want))
    return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "%s: saved with another optimizer than "
                   "this trainer's %s", path, opt_name(t->opt));
  if (params != t->n_params || stats != t->n_stats)
    return kl_fail(&t->err, KILN_ERR_INVALID_ARGUMENT, "%s: %" PRId64 " weights and %" PRId64
                   " statistics; this trainer has %d and %d (another model?)", path, params,
                   stats, t->n_params, t->n_stats);
  ck_item *items = malloc(sizeof(ck_item) * (size_t)(t->n_params * (2 + MAX_STATE) + t->n_stats + 1));
  if (!items) return kl_fail(&t->err, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  int n = ck_items(t, items);
  /* read everything first, then copy: a bad file leaves the trainer as it was */
  kl_tensor *read = calloc((size_t)n + 1, sizeof(kl_tensor));
  if (!read) st = kl_fail(&t->err, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; st == KILN_OK && i < n; i++) {
    st = join(t, path, sizeof path, dir, items[i].prefix, items[i].index, items[i].what);
    if (st == KILN_OK) st = no_link(t, path);
    if (st == KILN_OK)
      st = kl_tensorfile_read(path, (int64_t)items[i].numel * 4 + 4096, &read[i], NULL, &t->err);
    if (st != KILN_OK) break;
    bool same = read[i].dtype == items[i].dtype && kl_tensor_numel(&read[i]) == items[i].numel;
    if (!same)
      st = kl_fail(&t->err, KILN_ERR_SHAPE, "%s: expected %" PRId64 " %s elements, found "
                   "%" PRId64 " of %s", path, items[i].numel, kl_dtype_name(items[i].dtype),
                   kl_tensor_numel(&read[i]), kl_dtype_name(read[i].dtype));
  }
  for (int i = 0; st == KILN_OK && i < n; i++)
    memcpy(items[i].data, read[i].data, (size_t)items[i].numel * kl_dtype_size(items[i].dtype));
  if (st == KILN_OK) t->steps = steps;
  for (int i = 0; read && i < n; i++) free(read[i].data);
  free(read);
  free(items);
  return st;
}

const kiln_model *kl_trainer_step_model(const kiln_trainer *t) { return t ? t->step_m : NULL; }
kiln_session *kl_trainer_step_session(kiln_trainer *t) { return t ? t->step_s : NULL; }
