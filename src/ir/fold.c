/* Running one node on constant inputs by its reference kernel, so that its outputs
 * become constants: the constant folding pass (passes/const_fold.c) does it between
 * passes, and the TorchScript importer while building (a scale that torch.min of the
 * image's sizes computes is a number known then, import/torchscript.c).
 *
 * Bounded: the results must be no larger than a limit in bytes (or, when the caller
 * allows it, than the constant inputs), so that an Expand or a ConstantOfShape of a
 * constant does not turn a few bytes of model into megabytes; DequantizeLinear of
 * constant weights always folds (float32 weights, four times the int8 ones, as the
 * float model had them). Nor is a node whose work (kl_node_work's steps weighed by what
 * each costs on the reference kernel, kl_work_weight) is over FOLD_MAX_WORK folded:
 * folding runs at every load, on the reference kernels (an Einsum of 10^18 steps hung
 * `kiln inspect`); the run takes it, under the option max_work. A node whose kernel fails on its constants is left as it was, for the run
 * to report.
 */
#include "ir/ir.h"
#include "ir/optim.h"

#include <stdlib.h>
#include <string.h>

/* 2^27 element visits or multiply-adds of the reference kernels (768 units each):
 * about a second at most, of any op (an Einsum, 8192 a step, folds 11 times fewer) */
#define FOLD_MAX_WORK ((double)(1 << 27) * 768)

static bool reads_dims_only(kl_op op) {
  return strcmp(kl_op_name(op), "Shape") == 0 || strcmp(kl_op_name(op), "Size") == 0;
}

static bool deterministic(kl_op op) {
  if (kl_op_writes_inputs(op)) return false; /* optimizers: a run has effects */
  if (kl_op_is_control(op)) return false;     /* its bodies may draw random numbers */
  const char *name = kl_op_name(op);
  return strncmp(name, "Random", 6) != 0 && strcmp(name, "Bernoulli") != 0 &&
         strcmp(name, "Multinomial") != 0;
}

bool kl_node_deterministic(kl_op op) { return deterministic(op); }

bool kl_node_inputs_known(const kl_graph *g, const kl_node *n) {
  if (n->n_in > KL_FOLD_MAX_IO || n->n_out > KL_FOLD_MAX_IO || n->n_out == 0) return false;
  if (!deterministic(n->op) || kl_node_input_count(n) == 0) return false;
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v < 0) continue;
    const kl_value *val = &g->values[v];
    bool dims_known = k == 0 && reads_dims_only(n->op) && val->type.dtype != KL_UNDEFINED &&
                      kl_type_is_concrete(&val->type);
    if (val->kind != KL_VALUE_CONST && !dims_known) return false;
  }
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] < 0) return false;
  return true;
}

typedef struct fold_io {
  const kl_type *tin[KL_FOLD_MAX_IO];
  const void *din[KL_FOLD_MAX_IO];
  kl_tensor in[KL_FOLD_MAX_IO];
  const kl_tensor *pin[KL_FOLD_MAX_IO];
  kl_type tout[KL_FOLD_MAX_IO];
  kl_tensor out[KL_FOLD_MAX_IO];
  kl_tensor *pout[KL_FOLD_MAX_IO];
  size_t out_bytes[KL_FOLD_MAX_IO];
} fold_io;

static void tensor_of(const kl_value *v, kl_tensor *t) {
  t->dtype = v->type.dtype;
  t->rank = v->type.rank;
  for (int i = 0; i < t->rank; i++) t->dims[i] = v->type.dims[i].size;
  t->data = v->kind == KL_VALUE_CONST ? v->data : NULL;
}

/* Shapes the outputs by inference on the constants; false when they are not concrete
 * or too large. */
static bool plan_outputs(kl_graph *g, const kl_node *n, fold_io *io, int64_t limit,
                         bool within_inputs, kl_err *e) {
  size_t in_bytes = 0, total = 0;
  for (int k = 0; k < n->n_in; k++) {
    const kl_value *v = n->in[k] >= 0 ? &g->values[n->in[k]] : NULL;
    io->tin[k] = v ? &v->type : NULL;
    io->din[k] = v && v->kind == KL_VALUE_CONST ? v->data : NULL;
    io->pin[k] = NULL;
    if (!v) continue;
    tensor_of(v, &io->in[k]);
    io->pin[k] = &io->in[k];
    if (v->kind == KL_VALUE_CONST) in_bytes += v->nbytes;
  }
  for (int k = 0; k < n->n_out; k++) {
    memset(&io->tout[k], 0, sizeof io->tout[k]);
    io->tout[k].rank = -1;
  }
  kl_infer_ctx ic = {g, n, n->n_in, n->n_out, io->tin, io->din, io->tout, e, false};
  if (kl_op_get(n->op)->infer(&ic) != KILN_OK) return false;
  for (int k = 0; k < n->n_out; k++) {
    int64_t numel;
    if (!kl_type_is_concrete(&io->tout[k]) || !kl_type_numel(&io->tout[k], &numel) ||
        kl_mul_overflow_size((size_t)numel, kl_dtype_size(io->tout[k].dtype),
                             &io->out_bytes[k]) ||
        kl_add_overflow_size(total, io->out_bytes[k], &total))
      return false;
  }
  /* DequantizeLinear of constant weights: the float weights a float model holds (at
   * most 4 bytes per quantized one), which otherwise run every time (a QDQ MobileNetV2's
   * classifier weights: 17 ms of a 36 ms run) */
  if (within_inputs && n->op == KL_OP_DequantizeLinear && total / 4 <= in_bytes) return true;
  return total <= (size_t)limit || (within_inputs && total <= in_bytes);
}

static void free_outputs(fold_io *io, int n_out) {
  for (int k = 0; k < n_out; k++) free(io->out[k].data);
}

kiln_status kl_node_fold(kl_graph *g, int i, int64_t limit, bool within_inputs,
                         bool *folded, kl_err *e) {
  fold_io io;
  kl_err local = {0};
  kl_node *n = &g->nodes[i];
  *folded = false;
  if (!plan_outputs(g, n, &io, limit, within_inputs, &local)) return KILN_OK;
  for (int k = 0; k < n->n_out; k++) {
    io.out[k] = (kl_tensor){.dtype = io.tout[k].dtype, .rank = io.tout[k].rank};
    for (int d = 0; d < io.tout[k].rank; d++) io.out[k].dims[d] = io.tout[k].dims[d].size;
    io.out[k].data = malloc(io.out_bytes[k] ? io.out_bytes[k] : 1);
    io.pout[k] = &io.out[k];
    if (!io.out[k].data) {
      free_outputs(&io, k);
      return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory folding a constant");
    }
  }
  if (kl_node_work(n, n->n_in, io.pin, n->n_out, (const kl_tensor *const *)io.pout) *
          kl_work_weight(n, n->n_in, io.pin, KL_WORK_REF) >
      FOLD_MAX_WORK) {
    free_outputs(&io, n->n_out);
    return KILN_OK;
  }
  kl_kernel_ctx kc = {n, n->n_in, n->n_out, io.pin, io.pout, &local, 1, NULL, 0};
  bool empty = true; /* every output empty: nothing to compute (as in session.c) */
  for (int k = 0; k < n->n_out; k++) empty &= io.out_bytes[k] == 0;
  if (!empty && kl_op_get(n->op)->ref(&kc) != KILN_OK) {
    free_outputs(&io, n->n_out);
    return KILN_OK;
  }
  for (int k = 0; k < n->n_out; k++) {
    kl_value *v = &g->values[n->out[k]];
    if (!v->borrowed) free(v->data);
    v->kind = KL_VALUE_CONST;
    v->type = io.tout[k];
    v->data = io.out[k].data;
    v->nbytes = io.out_bytes[k];
    v->borrowed = false;
    if (v->producer == i) v->producer = -1;
  }
  kl_graph_uses_node(g, i, false); /* detached: no inputs, no outputs */
  n->n_in = 0;
  n->n_out = 0;
  *folded = true;
  return KILN_OK;
}
