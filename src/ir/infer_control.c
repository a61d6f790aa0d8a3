/* Shape and dtype inference for If, Loop and Scan: each body is inferred as a graph of its
 * own from the types the node gives its inputs, and the node's outputs take the types
 * the bodies compute (merged where branches or iterations differ).
 *
 * Types cross between a graph and a body with their symbols translated by name (each
 * graph numbers its own). A body is inferred again whenever its node is, with inputs
 * that can only have become more specific, so the types it keeps from an earlier
 * inference stay true. */
#include "ir/infer_common.h"

#include <stdlib.h>
#include <string.h>

/* What both a and b are: the dtype they share, the dims they agree on. */
static kiln_status join(const kl_type *a, const kl_type *b, kl_type *out, const char *what,
                        int k, kl_err *e) {
  if (a->dtype && b->dtype && a->dtype != b->dtype)
    return kl_fail(e, KILN_ERR_DTYPE, "%s %d is %s in one case and %s in the other", what, k,
                   kl_dtype_name(a->dtype), kl_dtype_name(b->dtype));
  if (a->dtype && b->dtype && a->seq != b->seq)
    return kl_fail(e, KILN_ERR_DTYPE, "%s %d is a sequence in one case and a tensor in the "
                   "other", what, k);
  kl_dtype dt = a->dtype ? a->dtype : b->dtype;
  bool seq = a->seq || b->seq, opt = a->opt || b->opt;
  if (a->rank < 0 || b->rank < 0 || a->rank != b->rank) {
    kl_type_unknown(out, dt);
  } else {
    *out = *a;
    out->dtype = dt;
    for (int d = 0; d < a->rank; d++)
      if (!kl_dim_equal(a->dims[d], b->dims[d])) out->dims[d] = kl_dim_unknown();
  }
  out->seq = seq;
  out->opt = opt;
  return KILN_OK;
}

/* Body input k takes type t (of the node's graph g) when t knows its rank: what the node
 * gives is what the body gets, whatever shape the body declared (exporters declare a
 * loop-carried input with its first iteration's shape, [0, 800, 800] for a list that
 * grows a row an iteration); else what the body declared. A declared dtype must agree. */
static kiln_status set_input(kl_graph *body, int k, const kl_graph *g, const kl_type *t,
                             const char *what, kl_err *e) {
  kl_value *v = &body->values[body->inputs[k]];
  kl_type in = kl_type_translate(body, g, t), *decl = &v->type;
  if (decl->dtype && in.dtype && decl->dtype != in.dtype)
    return kl_fail(e, KILN_ERR_DTYPE, "%s input %d '%s' is declared %s but is given %s", what,
                   k, v->name, kl_dtype_name(decl->dtype), kl_dtype_name(in.dtype));
  if (!in.dtype) in.dtype = decl->dtype;
  if (in.rank < 0) {
    in.rank = decl->rank;
    memcpy(in.dims, decl->dims, sizeof in.dims);
  }
  *decl = in;
  return KILN_OK;
}

/* The body `name` of c's node with its formal inputs typed `formal` (n_formal of them)
 * and its captures typed as the node's inputs after `node_formal`, inferred. */
static kiln_status infer_body(kl_infer_ctx *c, const char *name, kl_graph *body,
                              int n_formal, const kl_type *formal, int node_formal) {
  kl_err *e = c->e;
  int n_caps = c->n_in - node_formal;
  if (body->n_inputs != n_formal + n_caps || body->n_outer != n_caps)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s has %d inputs (%d of the enclosing graph); "
                   "the node gives it %d and %d", name, body->n_inputs, body->n_outer,
                   n_formal, n_caps);
  kiln_status st = KILN_OK;
  for (int k = 0; st == KILN_OK && k < n_formal; k++)
    st = set_input(body, k, c->g, &formal[k], name, e);
  for (int k = 0; st == KILN_OK && k < n_caps; k++) {
    const kl_type *t = kl_infer_in(c, node_formal + k);
    if (!t) return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: the enclosing graph's value %d "
                           "it reads is absent", name, k);
    st = set_input(body, n_formal + k, c->g, t, name, e);
  }
  if (st == KILN_OK && (st = kl_graph_infer(body, e)) != KILN_OK)
    kl_err_prefix(e, "in %s", name);
  return st;
}

/* Output k of a body as a type of the node's graph. */
static kl_type body_out(kl_infer_ctx *c, const kl_graph *body, int k) {
  return kl_type_translate(c->g, body, &body->values[body->outputs[k]].type);
}

static kiln_status not_at_run(kl_infer_ctx *c) {
  return kl_fail(c->e, KILN_ERR_INTERNAL, "%s is run by the session, not by shape inference",
                 kl_op_name(c->node->op));
}

/* cond-like input i: a bool with one element when known. */
static kiln_status check_flag(kl_infer_ctx *c, int i, const char *name, kl_dtype want) {
  const kl_type *t = kl_infer_in(c, i);
  if (!t) return KILN_OK;
  if (t->dtype && t->dtype != want)
    return kl_fail(c->e, KILN_ERR_DTYPE, "%s must be %s, found %s", name, kl_dtype_name(want),
                   kl_dtype_name(t->dtype));
  int64_t n;
  if (kl_type_numel(t, &n) && n != 1)
    return kl_fail(c->e, KILN_ERR_SHAPE, "%s must have one element, found %lld", name,
                   (long long)n);
  return KILN_OK;
}

int kl_infer_if(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  kl_graph *then_b = kl_node_body(c->node, "then_branch");
  kl_graph *else_b = kl_node_body(c->node, "else_branch");
  if (!then_b || !else_b)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "If needs graph attributes then_branch and "
                   "else_branch");
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = check_flag(c, 0, "cond", KL_BOOL);
  if (st == KILN_OK && (then_b->n_outputs != c->n_out || else_b->n_outputs != c->n_out))
    st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "the node has %d outputs; then_branch has %d "
                 "and else_branch %d", c->n_out, then_b->n_outputs, else_b->n_outputs);
  if (st == KILN_OK) st = infer_body(c, "then_branch", then_b, 0, NULL, 1);
  if (st == KILN_OK) st = infer_body(c, "else_branch", else_b, 0, NULL, 1);
  for (int k = 0; st == KILN_OK && k < c->n_out; k++) {
    kl_type a = body_out(c, then_b, k), b = body_out(c, else_b, k);
    st = join(&a, &b, &c->out[k], "output", k, c->e);
  }
  return st;
}

/* The loop-carried inputs of Loop's body (after iteration_num and cond) whose type its
 * outputs do not keep become as general as both: the body is to be inferred again from
 * its types before the first inference (*saved). *changed: whether any did. */
static kiln_status widen_carried(kl_graph *body, int n_carried, const kl_type *saved,
                                 kl_type *formal, kl_infer_ctx *c, bool *changed_out) {
  bool changed = false;
  *changed_out = false;
  for (int k = 0; k < n_carried; k++) {
    kl_type in = formal[2 + k], out = body_out(c, body, 1 + k), both;
    kiln_status st = join(&in, &out, &both, "loop-carried value", k, c->e);
    if (st != KILN_OK) return st;
    bool same = both.rank == in.rank;
    for (int d = 0; same && d < in.rank; d++) same = kl_dim_equal(both.dims[d], in.dims[d]);
    if (same) continue;
    formal[2 + k] = both;
    changed = true;
  }
  if (changed)
    for (int v = 0; v < body->n_values; v++) body->values[v].type = saved[v];
  *changed_out = changed;
  return KILN_OK;
}

int kl_infer_loop(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  kl_graph *body = kl_node_body(c->node, "body");
  if (!body) return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "Loop needs a graph attribute body");
  int formal = kl_control_formal_inputs(c->node);
  int n_carried = formal > 2 ? formal - 2 : 0, n_scan = c->n_out - n_carried;
  if (n_scan < 0 || body->n_outputs != 1 + c->n_out)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "Loop has %d loop-carried values and %d "
                   "outputs, so its body must have %d outputs (cond, the carried values, the "
                   "scan outputs), found %d", n_carried, c->n_out, 1 + c->n_out,
                   body->n_outputs);
  kiln_status st = check_flag(c, 0, "M (the trip count)", KL_I64);
  if (st == KILN_OK) st = check_flag(c, 1, "cond", KL_BOOL);
  if (st != KILN_OK) return st;
  kl_type *types = calloc((size_t)(2 + n_carried), sizeof *types);
  kl_type *saved = calloc((size_t)body->n_values + 1, sizeof *saved);
  if (!types || !saved) {
    free(types);
    free(saved);
    return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  kl_type_unknown(&types[0], KL_I64);
  kl_type_unknown(&types[1], KL_BOOL);
  for (int k = 0; k < n_carried; k++) {
    const kl_type *t = kl_infer_in(c, 2 + k);
    if (t) types[2 + k] = *t;
    else st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "loop-carried value %d is absent", k);
  }
  for (int v = 0; v < body->n_values; v++) saved[v] = body->values[v].type;
  bool widened = false;
  if (st == KILN_OK) st = infer_body(c, "body", body, 2 + n_carried, types, formal);
  if (st == KILN_OK) st = widen_carried(body, n_carried, saved, types, c, &widened);
  if (st == KILN_OK && widened) st = infer_body(c, "body", body, 2 + n_carried, types, formal);
  if (st == KILN_OK) {
    kl_type cond = body_out(c, body, 0);
    if (cond.dtype && cond.dtype != KL_BOOL)
      st = kl_fail(c->e, KILN_ERR_DTYPE, "the body's first output (cond) must be bool, "
                   "found %s", kl_dtype_name(cond.dtype));
  }
  for (int k = 0; st == KILN_OK && k < n_carried; k++) {
    kl_type out = body_out(c, body, 1 + k);
    st = join(&types[2 + k], &out, &c->out[k], "loop-carried value", k, c->e);
    /* what the loop gives is what its body makes (an optional in, a sequence out) */
    c->out[k].seq = out.seq;
    c->out[k].opt = out.opt;
  }
  for (int k = 0; st == KILN_OK && k < n_scan; k++) {
    kl_type t = body_out(c, body, 1 + n_carried + k);
    kl_type *o = &c->out[n_carried + k];
    if (t.rank < 0 || t.rank + 1 > KL_MAX_RANK) {
      kl_type_unknown(o, t.dtype);
      continue;
    }
    *o = t;
    o->rank = t.rank + 1;
    o->dims[0] = kl_dim_unknown(); /* the trip count: known only when it ends */
    memcpy(&o->dims[1], t.dims, sizeof(kl_dim) * (size_t)t.rank);
  }
  free(types);
  free(saved);
  return st;
}

/* Scan's attribute `name`: n axes (default 0) or directions (default 0), each checked. */
static kiln_status scan_list(kl_infer_ctx *c, const char *name, int n, int64_t *out) {
  const int64_t *v;
  int count = kl_attr_ints(c->node, name, &v);
  for (int k = 0; k < n; k++) out[k] = 0;
  if (count < 0) return KILN_OK;
  if (count != n)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "attribute %s has %d entries, expected %d",
                   name, count, n);
  for (int k = 0; k < n; k++) out[k] = v[k];
  return KILN_OK;
}

kiln_status kl_scan_layout(const kl_node *n, int n_scan_in, int n_scan_out, int64_t *in_axes,
                           int64_t *in_dirs, int64_t *out_axes, int64_t *out_dirs, kl_err *e) {
  kl_infer_ctx c = {.node = n, .e = e};
  kiln_status st = scan_list(&c, "scan_input_axes", n_scan_in, in_axes);
  if (st == KILN_OK) st = scan_list(&c, "scan_input_directions", n_scan_in, in_dirs);
  if (st == KILN_OK) st = scan_list(&c, "scan_output_axes", n_scan_out, out_axes);
  if (st == KILN_OK) st = scan_list(&c, "scan_output_directions", n_scan_out, out_dirs);
  for (int k = 0; st == KILN_OK && k < n_scan_in; k++)
    if (in_dirs[k] != 0 && in_dirs[k] != 1)
      st = kl_fail(e, KILN_ERR_INVALID_MODEL, "scan_input_directions[%d] is %lld; 0 "
                   "(forward) or 1 (reverse)", k, (long long)in_dirs[k]);
  for (int k = 0; st == KILN_OK && k < n_scan_out; k++)
    if (out_dirs[k] != 0 && out_dirs[k] != 1)
      st = kl_fail(e, KILN_ERR_INVALID_MODEL, "scan_output_directions[%d] is %lld; 0 "
                   "(forward) or 1 (reverse)", k, (long long)out_dirs[k]);
  return st;
}

/* An axis of a tensor of rank `rank` (negative counts from the end), or -1. */
static int scan_axis(int64_t axis, int rank) {
  if (axis < 0) axis += rank;
  return axis >= 0 && axis < rank ? (int)axis : -1;
}

int kl_infer_scan(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  kl_graph *body = kl_node_body(c->node, "body");
  if (!body) return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "Scan needs a graph attribute body");
  int formal = kl_control_formal_inputs(c->node);
  int64_t m = kl_attr_int(c->node, "num_scan_inputs", -1);
  if (m < 1 || m > formal)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "num_scan_inputs is %lld; it must be 1 to "
                   "the %d inputs the node has", (long long)m, formal);
  int n_state = formal - (int)m, n_scan_out = c->n_out - n_state;
  if (n_scan_out < 0 || body->n_outputs != c->n_out)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "Scan has %d states and %d outputs; its "
                   "body must have %d outputs, found %d", n_state, c->n_out, c->n_out,
                   body->n_outputs);
  int64_t *lists = calloc((size_t)(2 * m + 2 * n_scan_out + 1), sizeof *lists);
  kl_type *types = calloc((size_t)formal, sizeof *types);
  kiln_status st = lists && types ? KILN_OK : kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  int64_t *in_axes = lists, *in_dirs = lists + m, *out_axes = lists + 2 * m,
          *out_dirs = lists + 2 * m + n_scan_out;
  if (st == KILN_OK)
    st = kl_scan_layout(c->node, (int)m, n_scan_out, in_axes, in_dirs, out_axes, out_dirs, c->e);
  kl_dim trips = kl_dim_unknown();
  for (int k = 0; st == KILN_OK && k < formal; k++) {
    const kl_type *t = kl_infer_in(c, k);
    if (!t) {
      st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "input %d is absent", k);
      break;
    }
    types[k] = *t;
    if (k < n_state || t->rank < 0) continue;
    int ax = scan_axis(in_axes[k - n_state], t->rank);
    if (ax < 0) {
      st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "scan_input_axes[%d] is %lld, outside the "
                   "rank %d of scanned input %d", k - n_state,
                   (long long)in_axes[k - n_state], t->rank, k - n_state);
      break;
    }
    bool ok = true;
    trips = k == n_state ? t->dims[ax] : kl_dim_merge(trips, t->dims[ax], &ok);
    if (!ok)
      st = kl_fail(c->e, KILN_ERR_SHAPE, "scanned inputs have different lengths (%lld along "
                   "the axis of input %d)", (long long)t->dims[ax].size, k);
    types[k].rank = t->rank - 1; /* one slice of it */
    memmove(&types[k].dims[ax], &types[k].dims[ax + 1], sizeof(kl_dim) * (size_t)(t->rank - 1 - ax));
  }
  if (st == KILN_OK) st = infer_body(c, "body", body, formal, types, formal);
  for (int k = 0; st == KILN_OK && k < n_state; k++) {
    kl_type out = body_out(c, body, k);
    st = join(&types[k], &out, &c->out[k], "state", k, c->e);
  }
  for (int k = 0; st == KILN_OK && k < n_scan_out; k++) {
    kl_type t = body_out(c, body, n_state + k);
    kl_type *o = &c->out[n_state + k];
    if (t.rank < 0) {
      kl_type_unknown(o, t.dtype);
      continue;
    }
    if (t.rank + 1 > KL_MAX_RANK) {
      st = kl_check_out_rank(c, t.rank + 1);
      break;
    }
    int ax = scan_axis(out_axes[k], t.rank + 1);
    if (ax < 0) {
      st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "scan_output_axes[%d] is %lld, outside "
                   "the rank %d of scan output %d", k, (long long)out_axes[k], t.rank + 1, k);
      break;
    }
    *o = t;
    o->rank = t.rank + 1;
    memmove(&o->dims[ax + 1], &t.dims[ax], sizeof(kl_dim) * (size_t)(t.rank - ax));
    o->dims[ax] = trips;
  }
  free(lists);
  free(types);
  return st;
}
