/* Model loading: import, check, infer, optimize; then the public description. */
#include "backends/cpu/cpu_backend.h"
#include "backends/gpu/opencl.h"
#include "import/onnx.h"
#include "import/torchscript.h"
#include "passes/pass.h"
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

static kiln_status describe_value(kiln_model *m, int v, kl_io_info *io) {
  const kl_value *val = &m->g->values[v];
  io->info.name = val->name;
  io->info.dtype = (kiln_dtype)val->type.dtype;
  io->info.rank = val->type.rank;
  for (int i = 0; i < val->type.rank; i++) {
    const kl_dim *d = &val->type.dims[i];
    io->dims[i] = d->size;
    io->dim_names[i] = d->size < 0 && d->sym >= 0 ? m->g->symbols[d->sym] : NULL;
  }
  io->info.dims = io->dims;
  io->info.dim_names = io->dim_names;
  return KILN_OK;
}

static kiln_status describe_io(kiln_model *m) {
  kl_graph *g = m->g;
  m->inputs = calloc((size_t)g->n_inputs + 1, sizeof(kl_io_info));
  m->outputs = calloc((size_t)g->n_outputs + 1, sizeof(kl_io_info));
  if (!m->inputs || !m->outputs)
    return kl_fail(&m->err, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < g->n_inputs; i++) describe_value(m, g->inputs[i], &m->inputs[i]);
  for (int i = 0; i < g->n_outputs; i++) describe_value(m, g->outputs[i], &m->outputs[i]);
  m->n_inputs = g->n_inputs;
  m->n_outputs = g->n_outputs;
  return KILN_OK;
}

static bool is_zip(const void *data, size_t size) {
  return size >= 4 && memcmp(data, "PK\003\004", 4) == 0;
}

static kiln_status import_graph(kiln_model *m, const char *path, const void *data,
                                size_t size) {
  kl_import_opts io = {.max_tensor_bytes = m->opts.max_tensor_bytes,
                       .input_types = m->opts.input_types};
  kl_err *e = &m->err;
  size_t n = path ? strlen(path) : 0;
  bool pt = path ? n > 3 && strcmp(path + n - 3, ".pt") == 0 : is_zip(data, size);
  /* an ONNX model declares its inputs: the option was silently ignored */
  if (!pt && io.input_types && *io.input_types)
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "%s: option input_types (--input-types) is "
                   "for TorchScript files; an ONNX model declares its inputs' types",
                   path ? path : "the model");
  if (path)
    return pt ? kl_torchscript_load_file(path, &io, &m->g, e)
              : kl_onnx_load_file(path, &io, &m->g, e);
  if (pt) return kl_torchscript_load_memory(data, size, &io, &m->g, e);
  return kl_onnx_load_memory(data, size, NULL, &io, &m->g, e);
}

/* Kernels always get a tensor for every output: trailing absent optional outputs are
 * dropped, absent ones in the middle get a fresh unnamed value. */
static kiln_status fill_absent_outputs(kl_graph *g, kl_err *e) {
  for (int i = 0; i < g->n_nodes; i++) {
    kl_node *n = &g->nodes[i];
    int min_out = kl_op_get(n->op)->min_out;
    while (n->n_out > min_out && n->out[n->n_out - 1] == KL_ABSENT) n->n_out--;
    for (int k = 0; k < n->n_out; k++) {
      if (n->out[k] != KL_ABSENT) continue;
      int v = kl_graph_add_value(g, NULL, e);
      if (v < 0) return e->code;
      n->out[k] = v;
      g->values[v].producer = i;
    }
  }
  return KILN_OK;
}

/* Loaded for a device (option "device" other than cpu): no channels-last layout, which
 * only oneDNN reads (the GPU kernels take the plain layout). */
static bool for_device(const kiln_options *o) {
  return o->device && strcmp(o->device, "cpu") != 0;
}

kiln_status kl_model_import(kiln_model *m, const char *path) {
  kl_err *e = &m->err;
  kiln_status st = import_graph(m, path, NULL, 0);
  if (st == KILN_OK) st = fill_absent_outputs(m->g, e);
  if (st == KILN_OK) st = kl_graph_toposort(m->g, e);
  if (st == KILN_OK) st = kl_graph_verify(m->g, e);
  if (st == KILN_OK) st = kl_graph_infer(m->g, e);
  if (st != KILN_OK && m->g && strncmp(e->msg, path, strlen(path)) != 0)
    kl_err_prefix(e, "%s", path);
  return st;
}

kiln_status kl_model_finish(kiln_model *m) {
  kl_err *e = &m->err;
  kl_pass_config pc = {.level = m->opts.opt_level, .passes = m->opts.passes,
                       .verify = m->opts.verify != 0, .fold_limit = m->opts.fold_limit,
                       .native_nhwc = !m->opts.reference && kl_cpu_native_nhwc() &&
                                      !for_device(&m->opts),
                       .int8_weight_bits = m->opts.reference ? 8 : kl_cpu_int8_weight_bits()};
  kiln_status st = kl_optimize(m->g, &pc, &m->stats, e);
  return st == KILN_OK ? describe_io(m) : st;
}

kiln_status kl_model_load(kiln_model *m, const char *path, const void *data, size_t size) {
  kl_err *e = &m->err;
  kiln_status st = import_graph(m, path, data, size);
  if (st == KILN_OK) st = fill_absent_outputs(m->g, e);
  if (st == KILN_OK) st = kl_graph_toposort(m->g, e);
  if (st == KILN_OK) st = kl_graph_verify(m->g, e);
  if (st == KILN_OK) st = kl_graph_infer(m->g, e);
  if (st == KILN_OK) st = kl_model_finish(m);
  if (st != KILN_OK && m->g && path && strncmp(e->msg, path, strlen(path)) != 0)
    kl_err_prefix(e, "%s", path);
  return st;
}

kiln_status kl_model_create(const kiln_options *options, kiln_model **out) {
  if (!out) return KILN_ERR_INVALID_ARGUMENT;
  kiln_model *m = calloc(1, sizeof *m);
  *out = m;
  if (!m) return KILN_ERR_OUT_OF_MEMORY;
  pthread_mutex_init(&m->lock, NULL);
  return kl_options_copy(&m->opts, options, &m->err);
}

kiln_status kl_model_wrap(kl_graph *g, const kiln_options *options, kiln_model **out) {
  kiln_status st = kl_model_create(options, out);
  if (st != KILN_OK) return st;
  (*out)->g = g;
  (*out)->borrowed = true;
  return describe_io(*out);
}

kiln_status kiln_model_load(const char *path, const kiln_options *options, kiln_model **out) {
  kiln_status st = kl_model_create(options, out);
  if (st != KILN_OK) return st;
  if (!path) return kl_fail(&(*out)->err, KILN_ERR_INVALID_ARGUMENT, "path is NULL");
  return kl_model_load(*out, path, NULL, 0);
}

kiln_status kiln_model_load_memory(const void *data, size_t size, const kiln_options *options,
                                   kiln_model **out) {
  kiln_status st = kl_model_create(options, out);
  if (st != KILN_OK) return st;
  if (!data && size)
    return kl_fail(&(*out)->err, KILN_ERR_INVALID_ARGUMENT, "data is NULL");
  return kl_model_load(*out, NULL, data, size);
}

void kiln_model_free(kiln_model *m) {
  if (!m) return;
  for (int i = 0; i < m->n_devices; i++) {
    kl_model_device *d = m->devices[i];
    for (int v = 0; d->weights && m->g && v < m->g->n_values; v++)
      kl_cl_device_free_buf(d->dev, &d->weights[v]);
    kl_cl_device_release(d->dev);
    free(d->weights);
    free(d->spec);
    free(d);
  }
  free(m->devices);
  if (!m->borrowed) kl_graph_free(m->g);
  kl_options_clear(&m->opts);
  free(m->inputs);
  free(m->outputs);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

const char *kiln_model_error(const kiln_model *m) { return m ? m->err.msg : "model is NULL"; }

int kiln_model_input_count(const kiln_model *m) { return m && m->g ? m->n_inputs : 0; }
int kiln_model_output_count(const kiln_model *m) { return m && m->g ? m->n_outputs : 0; }

kiln_status kiln_model_input_info(const kiln_model *m, int index, kiln_tensor_info *info) {
  if (!m || !info || !m->inputs || index < 0 || index >= m->n_inputs)
    return KILN_ERR_INVALID_ARGUMENT;
  *info = m->inputs[index].info;
  return KILN_OK;
}

kiln_status kiln_model_output_info(const kiln_model *m, int index, kiln_tensor_info *info) {
  if (!m || !info || !m->outputs || index < 0 || index >= m->n_outputs)
    return KILN_ERR_INVALID_ARGUMENT;
  *info = m->outputs[index].info;
  return KILN_OK;
}

int kiln_model_input_index(const kiln_model *m, const char *name) {
  if (!m || !m->g || !m->inputs || !name) return -1;
  for (int i = 0; i < m->n_inputs; i++)
    if (strcmp(m->inputs[i].info.name, name) == 0) return i;
  return -1;
}

int kiln_model_output_index(const kiln_model *m, const char *name) {
  if (!m || !m->g || !m->outputs || !name) return -1;
  for (int i = 0; i < m->n_outputs; i++)
    if (strcmp(m->outputs[i].info.name, name) == 0) return i;
  return -1;
}

static int kind_of(const kl_type *t) {
  return t->opt ? (t->seq ? KILN_VALUE_OPTIONAL_SEQUENCE : KILN_VALUE_OPTIONAL)
                : t->seq ? KILN_VALUE_SEQUENCE : KILN_VALUE_TENSOR;
}

int kiln_model_input_kind(const kiln_model *m, int index) {
  if (!m || !m->g || index < 0 || index >= m->g->n_inputs) return -1;
  return kind_of(&m->g->values[m->g->inputs[index]].type);
}

int kiln_model_output_kind(const kiln_model *m, int index) {
  if (!m || !m->g || index < 0 || index >= m->g->n_outputs) return -1;
  return kind_of(&m->g->values[m->g->outputs[index]].type);
}
