/* Graph-level shape and dtype inference: runs each op's infer function in order and
 * reconciles the result with what the model declared (value_info, graph outputs). */
#include "ir/infer_common.h"
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

/* Combine a declared type with an inferred one: the inferred one wins where it is
 * known; a known contradiction is an error. */
static kiln_status merge_types(kl_graph *g, kl_value *v, const kl_type *inf, kl_err *e) {
  kl_type *decl = &v->type;
  char a[256], b[256];
  if (decl->dtype != KL_UNDEFINED && inf->dtype != KL_UNDEFINED && decl->dtype != inf->dtype)
    return kl_fail(e, KILN_ERR_DTYPE, "value '%s' is declared %s but computed as %s",
                   v->name, kl_dtype_name(decl->dtype), kl_dtype_name(inf->dtype));
  kl_type out = *inf;
  if (out.dtype == KL_UNDEFINED) out.dtype = decl->dtype;
  if (decl->rank >= 0 && inf->rank >= 0) {
    bool clash = decl->rank != inf->rank;
    for (int i = 0; !clash && i < inf->rank; i++) {
      kl_dim d = decl->dims[i], n = inf->dims[i];
      if (d.size >= 0 && n.size >= 0 && d.size != n.size) clash = true;
      else if (n.size < 0 && d.size >= 0) out.dims[i] = d;
      else if (n.size < 0 && n.sym < 0) out.dims[i] = d;
    }
    if (clash) {
      kl_type_format(g, decl, a, sizeof a);
      kl_type_format(g, inf, b, sizeof b);
      return kl_fail(e, KILN_ERR_SHAPE, "value '%s' is declared %s but computed as %s",
                     v->name, a, b);
    }
  } else if (inf->rank < 0) {
    out = *decl;
    if (out.dtype == KL_UNDEFINED) out.dtype = inf->dtype;
  }
  out.seq = inf->seq || decl->seq; /* what the op makes: a sequence, an optional */
  out.opt = inf->opt || decl->opt;
  *decl = out;
  return KILN_OK;
}

static kiln_status infer_node(kl_graph *g, int i, const kl_type **in, const void **data,
                              kl_type *out, kl_err *e) {
  kl_node *n = &g->nodes[i];
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    in[k] = v >= 0 ? &g->values[v].type : NULL;
    data[k] = v >= 0 && g->values[v].kind == KL_VALUE_CONST ? g->values[v].data : NULL;
  }
  for (int k = 0; k < n->n_out; k++) {
    memset(&out[k], 0, sizeof out[k]);
    out[k].rank = -1;
  }
  for (int k = 0; k < n->n_in && !kl_op_takes_sequences(n->op); k++)
    if (in[k] && (in[k]->seq || in[k]->opt))
      return kl_fail(e, KILN_ERR_UNSUPPORTED, "%s takes tensors; input %d '%s' is %s",
                     kl_op_name(n->op), k, g->values[n->in[k]].name,
                     in[k]->opt ? "an optional" : "a sequence");
  kl_infer_ctx ctx = {g, n, n->n_in, n->n_out, in, data, out, e, false};
  kiln_status st = (kiln_status)kl_op_get(n->op)->infer(&ctx);
  /* an output whose dims are all known but multiply past int64 (each op's inference
   * need not check it) is refused here, for every op */
  for (int k = 0; st == KILN_OK && k < n->n_out; k++) st = kl_check_out_numel(&ctx, &out[k]);
  /* nor may the model declare what a tensor op makes a sequence or an optional (a graph
   * output declared `optional` after a Shape reached the session as an optional made
   * by an op that makes none: an internal error, found by fuzz_onnx) */
  for (int k = 0; st == KILN_OK && k < n->n_out && !kl_op_takes_sequences(n->op); k++) {
    const kl_type *d = n->out[k] >= 0 ? &g->values[n->out[k]].type : NULL;
    if (d && (d->seq || d->opt))
      st = kl_fail(e, KILN_ERR_INVALID_MODEL, "%s makes tensors; output %d '%s' is "
                   "declared %s", kl_op_name(n->op), k, g->values[n->out[k]].name,
                   d->opt ? "an optional" : "a sequence");
  }
  for (int k = 0; st == KILN_OK && k < n->n_out; k++)
    if (n->out[k] >= 0) st = merge_types(g, &g->values[n->out[k]], &out[k], e);
  return st;
}

kiln_status kl_graph_infer(kl_graph *g, kl_err *e) {
  int max_in = 1, max_out = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].n_in > max_in) max_in = g->nodes[i].n_in;
    if (g->nodes[i].n_out > max_out) max_out = g->nodes[i].n_out;
  }
  const kl_type **in = malloc(sizeof *in * (size_t)max_in);
  const void **data = malloc(sizeof *data * (size_t)max_in);
  kl_type *out = malloc(sizeof *out * (size_t)max_out);
  kiln_status st = KILN_OK;
  if (!in || !data || !out) st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int k = 0; st == KILN_OK && k < g->n_inputs; k++) { /* before what they feed */
    const kl_value *x = &g->values[g->inputs[k]];
    int64_t numel;
    if (kl_type_is_concrete(&x->type) && !kl_type_numel(&x->type, &numel))
      st = kl_fail(e, KILN_ERR_LIMIT, "input '%s' declares a shape too large to make (its "
                   "dims' product, an empty dim counted as 1, is over 2^59)",
                   x->name ? x->name : "");
  }
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    st = infer_node(g, i, in, data, out, e);
    if (st != KILN_OK) {
      char d[256];
      kl_err_prefix(e, "%s", kl_node_describe(g, &g->nodes[i], d, sizeof d));
    }
  }
  free(in);
  free(data);
  free(out);
  return st;
}
