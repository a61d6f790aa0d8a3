/* The GPU backend (gpu_backend.h): the kl_backend_iface over an OpenCL device, with the
 * op tables of the kernel families (kernels.h). */
#include "backends/gpu/gpu_backend.h"
#include "backends/gpu/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gpu_ctx {
  kl_cl *cl;
  const kl_graph *g;
  const kl_gpu_op **ops; /* per node: its entry, NULL when the node is not the device's */
  const char **ran;      /* per node: the kernel its last run queued last (cl's name) */
  char (*label)[96];     /* per node: gpu_kernel_name's answer, made when asked */
  kl_gpu_node_mem *mem;  /* per node: device memory its kernels keep between runs */
  char name[448];
} gpu_ctx;

static const struct {
  const kl_gpu_op *ops;
  const int *count;
} families[] = {
    {kl_gpu_ops_elementwise, &kl_gpu_ops_elementwise_count},
    {kl_gpu_ops_nn, &kl_gpu_ops_nn_count},
    {kl_gpu_ops_data, &kl_gpu_ops_data_count},
    {kl_gpu_ops_attention, &kl_gpu_ops_attention_count},
};

static const kl_gpu_op *find_op(kl_op op) {
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
    for (int i = 0; i < *families[f].count; i++)
      if (families[f].ops[i].op == op) return &families[f].ops[i];
  return NULL;
}

/* Whether value v may be a device tensor of op: float32, or a dtype op->dtypes names. */
static bool dtype_ok(const kl_graph *g, const kl_gpu_op *op, int v) {
  kl_dtype t = g->values[v].type.dtype;
  return t == KL_F32 || ((unsigned)t < 32 && op->dtypes >> t & 1u);
}

static const kl_gpu_op *entry_for(const kl_graph *g, const kl_node *n) {
  const kl_gpu_op *op = find_op(n->op);
  if (!op) return NULL;
  for (int k = 0; k < n->n_in; k++) /* absent inputs are fine; host inputs any dtype */
    if (n->in[k] >= 0 && !(k < 32 && op->host_inputs >> k & 1u) && !dtype_ok(g, op, n->in[k]))
      return NULL;
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0 && !dtype_ok(g, op, n->out[k])) return NULL;
  if (op->view && (n->n_in < 1 || n->in[0] < 0 || n->n_out != 1)) return NULL;
  if (op->supports && !op->supports(g, n)) return NULL;
  return op;
}

/* A node that makes integers or bools goes to the device only when one of the inputs it
 * reads there is a graph input or made by a device node: the mask arithmetic of a
 * transformer follows its input or its device tensors there, while shape arithmetic
 * (Shape, then Gather, Unsqueeze, Concat into a Reshape's shape) stays on the host that
 * reads it, rather than going up and back down for every node. Float32 outputs always
 * go (their inputs are uploaded as before). */
static bool follows_device(const gpu_ctx *c, const kl_graph *g, const kl_node *n,
                           const kl_gpu_op *op) {
  bool all_f32 = true;
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0 && g->values[n->out[k]].type.dtype != KL_F32) all_f32 = false;
  if (all_f32) return true;
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v < 0 || (k < 32 && op->host_inputs >> k & 1u)) continue;
    int p = g->values[v].producer;
    if (g->values[v].kind == KL_VALUE_INPUT || (p >= 0 && p < g->n_nodes && c->ops[p]))
      return true;
  }
  return false;
}

static bool gpu_supports(kl_backend *b, const kl_graph *g, int node) {
  gpu_ctx *c = b->ctx;
  const kl_node *n = &g->nodes[node];
  const kl_gpu_op *op = entry_for(g, n);
  if (op && g == c->g && !follows_device(c, g, n, op)) op = NULL;
  if (g == c->g) {
    c->ops[node] = op;
    c->mem[node].const_inputs = 0;
    for (int k = 0; k < n->n_in && k < 32; k++)
      if (n->in[k] >= 0 && g->values[n->in[k]].kind == KL_VALUE_CONST)
        c->mem[node].const_inputs |= 1u << k;
  }
  return op != NULL;
}

static const char *gpu_op_name(const gpu_ctx *c, const kl_gpu_op *op) {
  const char *tf32 = kl_cl_tf32(c->cl) ? kl_gpu_tf32_name(op) : NULL;
  return tf32 ? tf32 : op->name;
}

static kiln_status gpu_execute(kl_backend *b, int node, kl_kernel_ctx *kc) {
  gpu_ctx *c = b->ctx;
  const kl_gpu_op *op = c->ops[node];
  if (!op)
    return kl_fail(kc->e, KILN_ERR_INTERNAL, "node %d was placed on %s, which does not "
                   "support it", node, c->name);
  kl_cl_set_node(c->cl, node);
  void *mem = &c->mem[node], **state = kc->state;
  kc->state = &mem;
  kiln_status st = op->run(c->cl, kc);
  kc->state = state;
  if (st != KILN_OK) kl_err_prefix(kc->e, "%s, kernel %s", kl_cl_name(c->cl), op->name);
  if (st == KILN_OK) c->ran[node] = kl_cl_last_kernel(c->cl);
  return st;
}

/* The kernel that ran node i last: its op's name (with tf32 where it computes so) and the
 * OpenCL kernel it queued last; the op's name alone before the node ran. Made when asked
 * (the tools ask), not as the node runs. */
static const char *gpu_kernel_name(const kl_backend *b, int node) {
  gpu_ctx *c = b->ctx;
  const kl_gpu_op *op = c->ops[node];
  if (!op) return "none";
  if (!c->ran[node]) return gpu_op_name(c, op);
  snprintf(c->label[node], sizeof c->label[node], "%s (%s)", gpu_op_name(c, op), c->ran[node]);
  return c->label[node];
}

static void gpu_node_io(kl_backend *b, const kl_graph *g, int node, unsigned *host_inputs,
                        bool *view) {
  (void)g;
  const gpu_ctx *c = b->ctx;
  const kl_gpu_op *op = c->ops[node];
  *host_inputs = op ? op->host_inputs : 0;
  *view = op && op->view;
}

static kiln_status gpu_alloc(kl_backend *b, size_t bytes, kl_dev_buf *out, kl_err *e) {
  return kl_cl_alloc(((gpu_ctx *)b->ctx)->cl, bytes, out, e);
}
static void gpu_free(kl_backend *b, kl_dev_buf *buf) { kl_cl_free(((gpu_ctx *)b->ctx)->cl, buf); }
static kiln_status gpu_upload(kl_backend *b, const kl_dev_buf *dst, const void *src, size_t n,
                              kl_err *e) {
  return kl_cl_upload(((gpu_ctx *)b->ctx)->cl, dst, src, n, e);
}
static kiln_status gpu_download(kl_backend *b, void *dst, const kl_dev_buf *src, size_t n,
                                kl_err *e) {
  return kl_cl_download(((gpu_ctx *)b->ctx)->cl, dst, src, n, e);
}
/* Waits for the run's kernels, then turns a raised error flag (opencl.h: Gather's index
 * out of range, an integer division by zero) into the error the CPU's kernel gives,
 * naming the node. */
static kiln_status gpu_sync(kl_backend *b, kl_err *e) {
  gpu_ctx *c = b->ctx;
  int32_t f[KL_CL_FLAG_INTS];
  kiln_status st = kl_cl_finish(c->cl, e);
  if (st == KILN_OK) st = kl_cl_flag_read(c->cl, f, e);
  if (st != KILN_OK || !f[0]) return st;
  int node = f[0] - 1;
  int64_t at[3];
  for (int k = 0; k < 3; k++)
    at[k] = (int64_t)(((uint64_t)(uint32_t)f[2 + 2 * k] << 32) | (uint32_t)f[1 + 2 * k]);
  /* named as the CPU's kernels name it: the file, the node's name or its index (an
   * unnamed node read "node ''") and op */
  char who[320];
  if (node >= 0 && node < c->g->n_nodes)
    kl_node_describe(c->g, &c->g->nodes[node], who, sizeof who);
  else
    snprintf(who, sizeof who, "node #%d", node);
  const char *src = c->g->source ? c->g->source : "model";
  if (f[7] == KL_CL_FLAG_DIV_ZERO)
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "%s: %s, on %s: integer division by zero "
                   "at element %lld (the device found it; the run's outputs are not valid)",
                   src, who, c->name, (long long)at[0]);
  return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "%s: %s, on %s: input 1 (indices) has %lld at "
                 "element %lld, expected %lld to %lld (the device found it; the run's "
                 "outputs are not valid)", src, who, c->name, (long long)at[1],
                 (long long)at[0], (long long)-at[2], (long long)at[2] - 1);
}
static void gpu_set_profiling(kl_backend *b, bool on) {
  kl_cl_set_profiling(((gpu_ctx *)b->ctx)->cl, on);
}
static double gpu_node_ms(kl_backend *b) { return kl_cl_kernel_ms(((gpu_ctx *)b->ctx)->cl); }

static const char *gpu_device_name(const kl_backend *b) { return ((const gpu_ctx *)b->ctx)->name; }

static void gpu_release(kl_backend *b) {
  if (!b) return;
  gpu_ctx *c = b->ctx;
  if (c) {
    for (int i = 0; c->mem && c->cl && i < c->g->n_nodes; i++) kl_cl_free(c->cl, &c->mem[i].buf);
    kl_cl_close(c->cl);
    free(c->ops);
    free(c->ran);
    free(c->label);
    free(c->mem);
    free(c);
  }
  free(b);
}

static const kl_backend_iface gpu_iface = {
    .name = "opencl",
    .supports_node = gpu_supports,
    .execute = gpu_execute,
    .kernel_name = gpu_kernel_name,
    .node_io = gpu_node_io,
    .buffer_alloc = gpu_alloc,
    .buffer_free = gpu_free,
    .upload = gpu_upload,
    .download = gpu_download,
    .synchronize = gpu_sync,
    .set_profiling = gpu_set_profiling,
    .node_ms = gpu_node_ms,
    .device_name = gpu_device_name,
    .release = gpu_release,
};

kiln_status kl_gpu_backend_create(kl_cl_device *d, const kl_graph *g, const char *precision,
                                  kl_backend **out, kl_err *e) {
  *out = NULL;
  kl_backend *b = calloc(1, sizeof *b);
  gpu_ctx *c = calloc(1, sizeof *c);
  if (b) b->ctx = c;
  if (!b || !c || !(c->ops = calloc((size_t)g->n_nodes + 1, sizeof *c->ops)) ||
      !(c->ran = calloc((size_t)g->n_nodes + 1, sizeof *c->ran)) ||
      !(c->label = calloc((size_t)g->n_nodes + 1, sizeof *c->label)) ||
      !(c->mem = calloc((size_t)g->n_nodes + 1, sizeof *c->mem))) {
    if (c) free(c->ops), free(c->ran), free(c->label), free(c->mem);
    free(c);
    free(b);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the GPU backend");
  }
  b->iface = &gpu_iface;
  c->g = g;
  kiln_status st = kl_cl_open_on(d, &c->cl, e);
  if (st != KILN_OK) {
    gpu_release(b);
    return st;
  }
  snprintf(c->name, sizeof c->name, "%s", kl_cl_name(c->cl));
  bool has_tc = kl_cl_has_kernel(c->cl, "kl_tc_matmul128");
  bool fp32 = precision && strcmp(precision, "fp32") == 0;
  if (precision && strcmp(precision, "bf16") == 0) {
    kl_fail(e, KILN_ERR_UNSUPPORTED, "option 'precision': bf16 is the CPU's (AVX512-BF16, "
            "AMX); kiln's GPU kernels compute in float32 or tf32 (device %s): use auto, fp32 "
            "or tf32", c->name);
    gpu_release(b);
    return KILN_ERR_UNSUPPORTED;
  }
  if (precision && strcmp(precision, "tf32") == 0 && !has_tc) {
    kl_fail(e, KILN_ERR_UNSUPPORTED, "option 'precision': tf32 needs tensor cores and kiln's "
            "kernels for them (NVIDIA sm_80 or later, kernels from the embedded PTX); device "
            "%s has none (kernels: %s): use fp32 or auto", c->name, kl_cl_kernels_origin(c->cl));
    gpu_release(b);
    return KILN_ERR_UNSUPPORTED;
  }
  kl_cl_set_tf32(c->cl, has_tc && !fp32);
  *out = b;
  return KILN_OK;
}

bool kl_gpu_backend_tf32(const kl_backend *b) { return kl_cl_tf32(((const gpu_ctx *)b->ctx)->cl); }

void kl_gpu_backend_stats(const kl_backend *b, kl_dev_alloc_stats *st) {
  kl_cl_alloc_stats(((const gpu_ctx *)b->ctx)->cl, st);
}

kiln_status kl_gpu_backend_alloc_shared(kl_backend *b, size_t bytes, kl_dev_buf *out,
                                        kl_err *e) {
  return kl_cl_alloc_shared(((gpu_ctx *)b->ctx)->cl, bytes, out, e);
}

void kl_gpu_backend_shared_stats(const kl_backend *b, kl_dev_alloc_stats *st) {
  kl_cl_shared_stats(((const gpu_ctx *)b->ctx)->cl, st);
}

const char *kl_gpu_backend_origin(const kl_backend *b) {
  return kl_cl_kernels_origin(((const gpu_ctx *)b->ctx)->cl);
}
