/* Sessions: bind inputs, then run each node: concrete shape inference, buffer, kernel.
 *
 * Buffers of intermediate values are kept between runs and only grow, so repeated
 * runs with the same input shapes allocate nothing. */
#include "runtime/runtime.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct bound_input {
  bool bound;
  const void *data;
  int rank;
  int64_t dims[KL_MAX_RANK];
} bound_input;

struct kiln_session {
  kl_err err;
  const kiln_model *model;
  kiln_options opts;
  kl_tensor *vals;    /* per value: the tensor of the current run */
  kl_type *types;     /* per value: its concrete type in the current run */
  void **bufs;        /* per value: owned buffer (intermediates) */
  size_t *caps;       /* per value: its capacity in bytes */
  size_t buf_bytes;   /* total capacity, for the memory limit */
  size_t const_bytes;
  bound_input *inputs;
  int64_t *sym_sizes; /* per graph symbol, bound from the inputs of a run */
  /* per-node scratch, sized for the widest node */
  const kl_tensor **kin;
  kl_tensor **kout;
  const kl_type **tin;
  const void **tdata;
  kl_type *tout;
  kl_io_info *outs;
  bool ran;
};

static kiln_status session_alloc(kiln_session *s) {
  const kl_graph *g = s->model->g;
  size_t nv = (size_t)g->n_values + 1;
  int max_in = 1, max_out = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].n_in > max_in) max_in = g->nodes[i].n_in;
    if (g->nodes[i].n_out > max_out) max_out = g->nodes[i].n_out;
  }
  s->vals = calloc(nv, sizeof *s->vals);
  s->types = calloc(nv, sizeof *s->types);
  s->bufs = calloc(nv, sizeof *s->bufs);
  s->caps = calloc(nv, sizeof *s->caps);
  s->inputs = calloc((size_t)g->n_inputs + 1, sizeof *s->inputs);
  s->sym_sizes = calloc((size_t)g->n_symbols + 1, sizeof *s->sym_sizes);
  s->kin = calloc((size_t)max_in, sizeof *s->kin);
  s->tin = calloc((size_t)max_in, sizeof *s->tin);
  s->tdata = calloc((size_t)max_in, sizeof *s->tdata);
  s->kout = calloc((size_t)max_out, sizeof *s->kout);
  s->tout = calloc((size_t)max_out, sizeof *s->tout);
  s->outs = calloc((size_t)g->n_outputs + 1, sizeof *s->outs);
  if (!s->vals || !s->types || !s->bufs || !s->caps || !s->inputs || !s->sym_sizes ||
      !s->kin || !s->tin || !s->tdata || !s->kout || !s->tout || !s->outs)
    return kl_fail(&s->err, KILN_ERR_OUT_OF_MEMORY, "out of memory creating a session");
  for (int v = 0; v < g->n_values; v++) {
    const kl_value *val = &g->values[v];
    if (val->kind != KL_VALUE_CONST) continue;
    s->types[v] = val->type;
    s->vals[v].dtype = val->type.dtype;
    s->vals[v].rank = val->type.rank;
    for (int d = 0; d < val->type.rank; d++) s->vals[v].dims[d] = val->type.dims[d].size;
    s->vals[v].data = val->data;
    s->const_bytes += val->nbytes;
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
  if (st != KILN_OK) return st;
  return session_alloc(s);
}

void kiln_session_free(kiln_session *s) {
  if (!s) return;
  if (s->bufs)
    for (int v = 0; v < s->model->g->n_values; v++) free(s->bufs[v]);
  free(s->vals);
  free(s->types);
  free(s->bufs);
  free(s->caps);
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

kiln_status kiln_session_set_input(kiln_session *s, const char *name, kiln_dtype dtype,
                                   int rank, const int64_t *dims, const void *data,
                                   size_t size_bytes) {
  if (!s) return KILN_ERR_INVALID_ARGUMENT;
  kl_err_clear(&s->err);
  if (!s->model) return kl_fail(&s->err, KILN_ERR_STATE, "the session was not created");
  const kl_graph *g = s->model->g;
  if (!name) return kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "input name is NULL");
  int i = find_input(g, name);
  if (i < 0) return kl_fail(&s->err, KILN_ERR_NOT_FOUND, "the model has no input '%s'", name);
  const kl_type *t = &g->values[g->inputs[i]].type;
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
    if (dims[d] < 0 || kl_mul_overflow_i64(numel, dims[d], &numel))
      return kl_fail(&s->err, KILN_ERR_SHAPE, "input '%s': invalid shape %s", name, got);
    if (t->rank >= 0 && t->dims[d].size >= 0 && t->dims[d].size != dims[d])
      return kl_fail(&s->err, KILN_ERR_SHAPE, "input '%s': expected shape %s, got %s "
                     "(dim %d)", name, want, got, d);
  }
  size_t bytes;
  if (kl_mul_overflow_size((size_t)numel, kl_dtype_size(t->dtype), &bytes) ||
      bytes != size_bytes)
    return kl_fail(&s->err, KILN_ERR_SHAPE, "input '%s': shape %s of %s needs %zu bytes, "
                   "the buffer has %zu", name, got, kl_dtype_name(t->dtype), bytes, size_bytes);
  if (bytes && !data)
    return kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "input '%s': data is NULL", name);
  bound_input *b = &s->inputs[i];
  b->bound = true;
  b->data = data;
  b->rank = rank;
  memcpy(b->dims, dims, sizeof(int64_t) * (size_t)rank);
  return KILN_OK;
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
  }
  return KILN_OK;
}

/* Shape and allocate output k of node n from the inferred type. */
static kiln_status prepare_output(kiln_session *s, const kl_node *n, int k) {
  int v = n->out[k];
  const kl_type *t = &s->tout[k];
  int64_t numel;
  size_t bytes;
  if (!kl_type_is_concrete(t) || !kl_type_numel(t, &numel))
    return kl_fail(&s->err, KILN_ERR_INTERNAL, "output %d has no concrete shape", k);
  if (kl_mul_overflow_size((size_t)numel, kl_dtype_size(t->dtype), &bytes) ||
      bytes > (uint64_t)s->opts.max_tensor_bytes)
    return kl_fail(&s->err, KILN_ERR_LIMIT, "output %d '%s' would need %" PRId64 " elements "
                   "of %s, over the tensor limit of %" PRId64 " bytes", k,
                   s->model->g->values[v].name, numel, kl_dtype_name(t->dtype),
                   s->opts.max_tensor_bytes);
  if (bytes > s->caps[v]) {
    size_t total = s->buf_bytes - s->caps[v] + bytes;
    if (s->opts.memory_limit && total + s->const_bytes > (uint64_t)s->opts.memory_limit)
      return kl_fail(&s->err, KILN_ERR_LIMIT, "output %d '%s' (%zu bytes) would take the "
                     "session to %zu bytes, over the memory limit of %" PRId64, k,
                     s->model->g->values[v].name, bytes, total + s->const_bytes,
                     s->opts.memory_limit);
    void *p = realloc(s->bufs[v], bytes);
    if (!p)
      return kl_fail(&s->err, KILN_ERR_OUT_OF_MEMORY, "out of memory for output %d (%zu "
                     "bytes)", k, bytes);
    s->bufs[v] = p;
    s->buf_bytes = total;
    s->caps[v] = bytes;
  }
  kl_tensor *x = &s->vals[v];
  x->dtype = t->dtype;
  x->rank = t->rank;
  for (int d = 0; d < t->rank; d++) x->dims[d] = t->dims[d].size;
  x->data = s->bufs[v];
  s->types[v] = *t;
  return KILN_OK;
}

static kiln_status run_node(kiln_session *s, const kl_node *n) {
  kl_graph *g = s->model->g;
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    s->tin[k] = v >= 0 ? &s->types[v] : NULL;
    s->tdata[k] = v >= 0 ? s->vals[v].data : NULL;
    s->kin[k] = v >= 0 ? &s->vals[v] : NULL;
  }
  for (int k = 0; k < n->n_out; k++) {
    memset(&s->tout[k], 0, sizeof s->tout[k]);
    s->tout[k].rank = -1;
  }
  const kl_op_info *info = kl_op_get(n->op);
  kl_infer_ctx ic = {g, n, n->n_in, n->n_out, s->tin, s->tdata, s->tout, &s->err};
  kiln_status st = (kiln_status)info->infer(&ic);
  for (int k = 0; st == KILN_OK && k < n->n_out; k++) {
    st = prepare_output(s, n, k);
    s->kout[k] = &s->vals[n->out[k]];
  }
  if (st != KILN_OK) return st;
  kl_kernel_ctx kc = {n, n->n_in, n->n_out, s->kin, s->kout, &s->err, s->opts.threads, NULL};
  return (kiln_status)info->ref(&kc);
}

static void describe_outputs(kiln_session *s) {
  const kl_graph *g = s->model->g;
  for (int i = 0; i < g->n_outputs; i++) {
    int v = g->outputs[i];
    kl_io_info *io = &s->outs[i];
    const kl_tensor *x = &s->vals[v];
    io->info.name = g->values[v].name;
    io->info.dtype = (kiln_dtype)x->dtype;
    io->info.rank = x->rank;
    memcpy(io->dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
    for (int d = 0; d < x->rank; d++) io->dim_names[d] = NULL;
    io->info.dims = io->dims;
    io->info.dim_names = io->dim_names;
  }
}

kiln_status kiln_session_run(kiln_session *s) {
  if (!s) return KILN_ERR_INVALID_ARGUMENT;
  kl_err_clear(&s->err);
  if (!s->model) return kl_fail(&s->err, KILN_ERR_STATE, "the session was not created");
  s->ran = false;
  kiln_status st = bind_inputs(s);
  const kl_graph *g = s->model->g;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    st = run_node(s, &g->nodes[i]);
    if (st != KILN_OK) {
      char d[256];
      kl_err_prefix(&s->err, "%s: %s", g->source, kl_node_describe(g, &g->nodes[i], d,
                                                                 sizeof d));
    }
  }
  if (st != KILN_OK) return st;
  describe_outputs(s);
  s->ran = true;
  return KILN_OK;
}

kiln_status kiln_session_get_output(kiln_session *s, int index, kiln_tensor_info *info,
                                    const void **data) {
  if (!s) return KILN_ERR_INVALID_ARGUMENT;
  kl_err_clear(&s->err); /* the first failure wins in kl_fail: forget an older one */
  if (!s->model || !s->ran)
    return kl_fail(&s->err, KILN_ERR_STATE, "no successful run to take outputs from");
  if (index < 0 || index >= s->model->g->n_outputs)
    return kl_fail(&s->err, KILN_ERR_INVALID_ARGUMENT, "output index %d is out of range "
                   "(the model has %d outputs)", index, s->model->g->n_outputs);
  if (info) *info = s->outs[index].info;
  if (data) *data = s->vals[s->model->g->outputs[index]].data;
  return KILN_OK;
}
