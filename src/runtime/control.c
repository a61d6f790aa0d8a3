/* If, Loop and Scan: their bodies run as sessions of their own (control.h). */
#include "runtime/control.h"
#include "runtime/session.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_BODIES = 2 };

/* A buffer that only grows. */
typedef struct grow_buf {
  void *p;
  size_t cap;
} grow_buf;

struct kl_control {
  int n_bodies;
  kiln_model *models[MAX_BODIES];
  kiln_session *sessions[MAX_BODIES];
  /* Loop and Scan: the loop-carried values (states) of two iterations, each the other's
   * input, and Scan's slices of inputs scanned along an axis other than 0 */
  grow_buf *carried[2];
  grow_buf *slices;
  grow_buf scan_acc; /* Loop's scan outputs, iteration after iteration */
  int n_carried, n_slices, n_scan; /* n_scan: Loop's and Scan's scan outputs */
  /* per run scratch, made with the node so that runs allocate nothing: the carried
   * values now, the first iteration's scan outputs, their bytes and offsets in
   * scan_acc, the node's scan outputs, their axes, Scan's axes and directions */
  kl_tensor *cur, *first, **outs;
  size_t *slice_bytes, *offset;
  int *out_ax;
  int64_t *lists;
  int64_t iterations;
  double work; /* the last run's steps, its bodies' (nested control nodes' included) */
};

static kiln_status grow(grow_buf *b, size_t bytes, kl_err *e) {
  if (bytes <= b->cap) return KILN_OK;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < bytes) cap = cap > SIZE_MAX / 2 ? bytes : cap * 2;
  void *p = realloc(b->p, cap);
  if (!p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory (%zu bytes)", cap);
  b->p = p;
  b->cap = cap;
  return KILN_OK;
}

void kl_control_free(kl_control *c) {
  if (!c) return;
  for (int k = 0; k < c->n_bodies; k++) {
    kiln_session_free(c->sessions[k]);
    kiln_model_free(c->models[k]);
  }
  for (int j = 0; j < 2; j++) {
    for (int k = 0; c->carried[j] && k < c->n_carried; k++) free(c->carried[j][k].p);
    free(c->carried[j]);
  }
  for (int k = 0; c->slices && k < c->n_slices; k++) free(c->slices[k].p);
  free(c->slices);
  free(c->scan_acc.p);
  free(c->cur);
  free(c->first);
  free(c->outs);
  free(c->slice_bytes);
  free(c->offset);
  free(c->out_ax);
  free(c->lists);
  free(c);
}

kiln_status kl_control_create(const kl_node *n, const kiln_options *o, kl_control **out,
                              kl_err *e) {
  *out = NULL;
  kl_control *c = calloc(1, sizeof *c);
  if (!c) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  const char *names[MAX_BODIES] = {"body", NULL};
  if (n->op == KL_OP_If) names[0] = "then_branch", names[1] = "else_branch";
  kiln_options opts;
  kiln_status st = kl_options_copy(&opts, o, e);
  if (st != KILN_OK) {
    free(c);
    return st;
  }
  /* the bodies run where the parent does: their nodes on its device where it has
   * kernels for them (a decoding Loop is the whole model), the rest on the CPU */
  opts.pin_threads = 0; /* the parent's runs pinned the threads already */
  opts.release_weights = 0;
  for (int k = 0; k < MAX_BODIES && names[k] && st == KILN_OK; k++) {
    kl_graph *body = kl_node_body(n, names[k]);
    c->n_bodies = k + 1;
    if (!body) {
      st = kl_fail(e, KILN_ERR_INTERNAL, "no graph attribute %s", names[k]);
      break;
    }
    st = kl_model_wrap(body, &opts, &c->models[k]);
    if (c->models[k]) c->models[k]->body = true;
    if (st == KILN_OK) st = kiln_session_create(c->models[k], &opts, &c->sessions[k]);
    if (st != KILN_OK) {
      const char *why = c->sessions[k] ? kiln_session_error(c->sessions[k])
                                       : kiln_model_error(c->models[k]);
      st = kl_fail(e, st, "%s: %s", names[k], why);
    }
  }
  kl_options_clear(&opts);
  int formal = kl_control_formal_inputs(n);
  if (n->op == KL_OP_Loop) c->n_carried = formal > 2 ? formal - 2 : 0;
  if (n->op == KL_OP_Scan) {
    c->n_slices = (int)kl_attr_int(n, "num_scan_inputs", 0);
    if (c->n_slices < 0 || c->n_slices > formal) c->n_slices = 0; /* inference refused it */
    c->n_carried = formal - c->n_slices;
  }
  for (int j = 0; j < 2 && st == KILN_OK; j++)
    if (!(c->carried[j] = calloc((size_t)c->n_carried + 1, sizeof(grow_buf))))
      st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  c->n_scan = n->n_out - c->n_carried > 0 ? n->n_out - c->n_carried : 0;
  size_t nc = (size_t)c->n_carried + 1, ns = (size_t)c->n_scan + 1;
  if (st == KILN_OK &&
      (!(c->slices = calloc((size_t)c->n_slices + 1, sizeof(grow_buf))) ||
       !(c->cur = calloc(nc, sizeof *c->cur)) || !(c->first = calloc(ns, sizeof *c->first)) ||
       !(c->outs = calloc(ns, sizeof *c->outs)) ||
       !(c->slice_bytes = calloc(ns, sizeof *c->slice_bytes)) ||
       !(c->offset = calloc(ns, sizeof *c->offset)) ||
       !(c->out_ax = calloc(ns, sizeof *c->out_ax)) ||
       !(c->lists = calloc(2 * (size_t)c->n_slices + 2 * ns, sizeof *c->lists))))
    st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (st != KILN_OK) kl_control_free(c);
  else *out = c;
  return st;
}

int64_t kl_control_iterations(const kl_control *c) { return c ? c->iterations : 0; }

double kl_control_work(const kl_control *c) { return c ? c->work : 0; }

/* ---- running a body ---- */

static void dims_text(int rank, const int64_t *dims, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < rank && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, d ? "," : "", dims[d]);
  if (used < len) snprintf(buf + used, len - used, "]");
}

static kiln_status bind(kiln_session *s, int index, const kl_tensor *t, kl_err *e) {
  kiln_status st = kl_session_bind_value(s, index, t);
  return st == KILN_OK ? st : kl_fail(e, st, "%s", kiln_session_error(s));
}

/* A scalar input of the body (iteration_num, cond) in the rank the body declares it
 * (0, or 1 with one element). */
static kl_tensor scalar(const kiln_session *s, int index, kl_dtype dtype, void *data) {
  const kl_graph *g = kl_session_model(s)->g;
  kl_tensor t = {.dtype = dtype, .rank = 0, .data = data};
  const kl_type *decl = &g->values[g->inputs[index]].type;
  if (decl->rank == 1) t.rank = 1, t.dims[0] = 1;
  return t;
}

/* Binds the captures (the node's inputs from `formal`, the body's from `own`) and runs. */
static kiln_status run_body(kl_control *c, int b, const kl_node *n, const kl_tensor *const *in,
                            int own, double *work, int64_t max_work, kl_err *e) {
  kiln_session *s = c->sessions[b];
  int formal = kl_control_formal_inputs(n);
  kiln_status st = KILN_OK;
  for (int k = formal; st == KILN_OK && k < n->n_in; k++) st = bind(s, own + k - formal, in[k], e);
  if (st == KILN_OK && (st = kiln_session_run(s)) != KILN_OK)
    st = kl_fail(e, st, "%s", kiln_session_error(s));
  c->iterations++;
  *work += KL_CONTROL_ITERATION_STEPS + kl_session_run_work(s);
  c->work = *work;
  if (st == KILN_OK && max_work > 0 && *work > (double)max_work)
    st = kl_fail(e, KILN_ERR_LIMIT, "its bodies took about %.3g steps in %" PRId64 " runs, "
                 "over max_work %" PRId64 " (option max_work, `--max-work N`; 0 lifts the "
                 "bound)", *work, c->iterations, max_work);
  return st;
}

/* Output k of body session s (its data valid until the session runs again). */
static kl_tensor body_output(kiln_session *s, int k) { return *kl_session_output_value(s, k); }

/* The graph type of output k of body session s. */
static const kl_type *body_output_type(const kiln_session *s, int k) {
  const kl_graph *g = kl_session_model(s)->g;
  return &g->values[g->outputs[k]].type;
}

/* The node's output k: a copy of t, of graph type ty (a tensor, a sequence, none). */
static kiln_status emit(kl_value_alloc alloc, void *actx, int k, const kl_tensor *t,
                        const kl_type *ty) {
  kl_tensor *o;
  size_t bytes = kl_value_bytes(t, ty);
  kiln_status st = alloc(actx, k, t, bytes, &o);
  if (st == KILN_OK && bytes) memcpy(o->data, t->data, bytes);
  return st;
}

/* A one-element flag: bool (cond) or int64 (M). */
static kiln_status flag(const kl_tensor *t, kl_dtype want, const char *what, int64_t *v,
                        kl_err *e) {
  if (t->dtype != want || kl_tensor_numel(t) != 1)
    return kl_fail(e, KILN_ERR_SHAPE, "%s must be one %s, found %s with %" PRId64
                   " elements", what, kl_dtype_name(want), kl_dtype_name(t->dtype),
                   kl_tensor_numel(t));
  *v = want == KL_BOOL ? (int64_t)(*(const uint8_t *)t->data != 0) : *(const int64_t *)t->data;
  return KILN_OK;
}

static kiln_status run_if(kl_control *c, const kl_node *n, const kl_tensor *const *in,
                          int64_t max_work, kl_value_alloc alloc, void *actx, kl_err *e) {
  int64_t cond = 0;
  double work = 0;
  kiln_status st = flag(in[0], KL_BOOL, "cond", &cond, e);
  int b = cond ? 0 : 1;
  if (st == KILN_OK) st = run_body(c, b, n, in, 0, &work, max_work, e);
  if (st != KILN_OK) {
    kl_err_prefix(e, "in %s", b ? "else_branch" : "then_branch");
    return st;
  }
  for (int k = 0; st == KILN_OK && k < n->n_out; k++) {
    kl_tensor t = body_output(c->sessions[b], k);
    st = emit(alloc, actx, k, &t, body_output_type(c->sessions[b], k));
  }
  return st;
}

/* Keeps a copy of the body's output `from` as loop-carried value k of the next
 * iteration, in buffer set `set` (the other set holds this iteration's inputs, which
 * the output may be). */
static kiln_status carry(kl_control *c, int set, int k, const kl_tensor *from,
                         const kl_type *ty, kl_tensor *to, kl_err *e) {
  size_t bytes = kl_value_bytes(from, ty);
  grow_buf *b = &c->carried[set][k];
  kiln_status st = grow(b, bytes ? bytes : 1, e);
  if (st != KILN_OK) return st;
  if (bytes) memcpy(b->p, from->data, bytes);
  *to = *from;
  to->data = kl_value_is_none(from, ty) ? NULL : b->p;
  return KILN_OK;
}

static bool same_shape(const kl_tensor *a, const kl_tensor *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* The shape a scan output of no iterations has per iteration: what inference knows of
 * the body's output, 0 where it does not. */
static kl_tensor empty_slice(const kiln_session *s, int k) {
  const kl_graph *g = kl_session_model(s)->g;
  const kl_type *t = &g->values[g->outputs[k]].type;
  kl_tensor x = {.dtype = t->dtype, .rank = t->rank > 0 ? t->rank : 0};
  for (int d = 0; d < x.rank; d++) x.dims[d] = t->dims[d].size >= 0 ? t->dims[d].size : 0;
  return x;
}

static kiln_status run_loop(kl_control *c, const kl_node *n, const kl_tensor *const *in,
                            int64_t max_work, kl_value_alloc alloc, void *actx, kl_err *e) {
  kiln_session *s = c->sessions[0];
  int nc = c->n_carried, n_scan = n->n_out - nc;
  int64_t trips = -1, cond = 1;
  bool use_cond = n->n_in > 1 && in[1];
  kiln_status st = KILN_OK;
  bool use_trips = n->n_in > 0 && in[0];
  if (use_trips) st = flag(in[0], KL_I64, "M (the trip count)", &trips, e);
  if (use_trips && trips < 0) trips = 0; /* a negative trip count runs no iteration */
  if (st == KILN_OK && use_cond) st = flag(in[1], KL_BOOL, "cond", &cond, e);
  if (st != KILN_OK) return st;
  kl_tensor *cur = c->cur, *first = c->first;
  size_t *slice_bytes = c->slice_bytes, *offset = c->offset;
  for (int k = 0; st == KILN_OK && k < nc; k++) cur[k] = *in[2 + k];
  double work = 0;
  size_t acc = 0; /* bytes of every scan output of one iteration, together */
  int64_t it = 0;
  for (; st == KILN_OK && (!use_trips || it < trips) && cond; it++) {
    int64_t iter = it;
    uint8_t cond_in = 1;
    kl_tensor x = scalar(s, 0, KL_I64, &iter), y = scalar(s, 1, KL_BOOL, &cond_in);
    st = bind(s, 0, &x, e);
    if (st == KILN_OK) st = bind(s, 1, &y, e);
    for (int k = 0; st == KILN_OK && k < nc; k++) st = bind(s, 2 + k, &cur[k], e);
    if (st == KILN_OK) st = run_body(c, 0, n, in, 2 + nc, &work, max_work, e);
    if (st != KILN_OK) break;
    kl_tensor out = body_output(s, 0);
    int64_t next = 0;
    if ((st = flag(&out, KL_BOOL, "the body's cond output", &next, e)) != KILN_OK) break;
    if (use_cond) cond = next;
    for (int k = 0; st == KILN_OK && k < nc; k++) {
      out = body_output(s, 1 + k);
      st = carry(c, (int)((it + 1) & 1), k, &out, body_output_type(s, 1 + k), &cur[k], e);
    }
    for (int k = 0; st == KILN_OK && k < n_scan; k++) {
      out = body_output(s, 1 + nc + k);
      if (it == 0) {
        first[k] = out;
        slice_bytes[k] = kl_tensor_nbytes(&out);
        offset[k] = acc;
        acc += slice_bytes[k];
      } else if (!same_shape(&out, &first[k])) {
        char a[128], b[128];
        dims_text(first[k].rank, first[k].dims, a, sizeof a);
        dims_text(out.rank, out.dims, b, sizeof b);
        st = kl_fail(e, KILN_ERR_SHAPE, "scan output %d is %s %s in iteration 0 and %s %s "
                     "in iteration %" PRId64 "; every iteration's must have one shape", k,
                     kl_dtype_name(first[k].dtype), a, kl_dtype_name(out.dtype), b, it);
        break;
      }
      size_t need;
      if (kl_mul_overflow_size(acc, (size_t)it + 1, &need))
        st = kl_fail(e, KILN_ERR_LIMIT, "the scan outputs outgrow memory");
      if (st == KILN_OK) st = grow(&c->scan_acc, need ? need : 1, e);
      if (st == KILN_OK && slice_bytes[k])
        memcpy((char *)c->scan_acc.p + acc * (size_t)it + offset[k], out.data, slice_bytes[k]);
    }
    if (st != KILN_OK) break; /* it names the failing iteration */
  }
  if (st != KILN_OK) kl_err_prefix(e, "in the body's iteration %" PRId64, it);
  for (int k = 0; st == KILN_OK && k < nc; k++)
    st = emit(alloc, actx, k, &cur[k], body_output_type(s, 1 + k));
  for (int k = 0; st == KILN_OK && k < n_scan; k++) {
    kl_tensor one = it > 0 ? first[k] : empty_slice(s, 1 + nc + k), *o;
    if (one.rank + 1 > KL_MAX_RANK) {
      st = kl_fail(e, KILN_ERR_UNSUPPORTED, "scan output %d would have rank %d; kiln "
                   "supports up to %d", k, one.rank + 1, KL_MAX_RANK);
      break;
    }
    kl_tensor all = {.dtype = one.dtype, .rank = one.rank + 1};
    all.dims[0] = it;
    memcpy(all.dims + 1, one.dims, sizeof(int64_t) * (size_t)one.rank);
    st = alloc(actx, nc + k, &all, kl_tensor_nbytes(&all), &o);
    for (int64_t j = 0; st == KILN_OK && j < it && slice_bytes[k]; j++)
      memcpy((char *)o->data + (size_t)j * slice_bytes[k],
             (const char *)c->scan_acc.p + acc * (size_t)j + offset[k], slice_bytes[k]);
  }
  return st;
}

/* Slice `idx` of x along axis `ax` into t (a view when ax is 0, else a copy in b). */
static kiln_status slice_of(const kl_tensor *x, int ax, int64_t idx, grow_buf *b, kl_tensor *t,
                            kl_err *e) {
  t->dtype = x->dtype;
  t->rank = x->rank - 1;
  for (int d = 0, j = 0; d < x->rank; d++)
    if (d != ax) t->dims[j++] = x->dims[d];
  size_t esize = kl_dtype_size(x->dtype), inner = esize, outer = 1;
  for (int d = ax + 1; d < x->rank; d++) inner *= (size_t)x->dims[d];
  for (int d = 0; d < ax; d++) outer *= (size_t)x->dims[d];
  size_t len = (size_t)x->dims[ax];
  if (outer == 1) {
    t->data = (char *)x->data + (size_t)idx * inner;
    return KILN_OK;
  }
  size_t bytes = outer * inner;
  kiln_status st = grow(b, bytes ? bytes : 1, e);
  if (st != KILN_OK) return st;
  for (size_t o = 0; o < outer; o++)
    memcpy((char *)b->p + o * inner, (const char *)x->data + (o * len + (size_t)idx) * inner,
           inner);
  t->data = b->p;
  return KILN_OK;
}

/* Writes t, one iteration's scan output, at position pos of y's axis ax. */
static void place(kl_tensor *y, int ax, int64_t pos, const kl_tensor *t) {
  size_t esize = kl_dtype_size(y->dtype), inner = esize, outer = 1;
  for (int d = ax + 1; d < y->rank; d++) inner *= (size_t)y->dims[d];
  for (int d = 0; d < ax; d++) outer *= (size_t)y->dims[d];
  size_t len = (size_t)y->dims[ax];
  for (size_t o = 0; o < outer && inner; o++)
    memcpy((char *)y->data + (o * len + (size_t)pos) * inner, (const char *)t->data + o * inner,
           inner);
}

static int norm_axis(int64_t axis, int rank) {
  if (axis < 0) axis += rank;
  return axis >= 0 && axis < rank ? (int)axis : -1;
}

static kiln_status run_scan(kl_control *c, const kl_node *n, const kl_tensor *const *in,
                            int64_t max_work, kl_value_alloc alloc, void *actx, kl_err *e) {
  kiln_session *s = c->sessions[0];
  int ns = c->n_carried, m = c->n_slices, n_out = n->n_out - ns;
  int64_t *lists = c->lists;
  kl_tensor *cur = c->cur, **outs = c->outs, *first = c->first;
  int *out_ax = c->out_ax;
  kiln_status st = KILN_OK;
  int64_t *in_axes = lists, *in_dirs = lists + m, *out_axes = lists + 2 * m,
          *out_dirs = lists + 2 * m + n_out;
  if (st == KILN_OK)
    st = kl_scan_layout(n, m, n_out, in_axes, in_dirs, out_axes, out_dirs, e);
  int64_t trips = 0;
  for (int j = 0; st == KILN_OK && j < m; j++) {
    const kl_tensor *x = in[ns + j];
    int ax = norm_axis(in_axes[j], x->rank);
    if (ax < 0) {
      st = kl_fail(e, KILN_ERR_SHAPE, "scanned input %d has rank %d, no axis %" PRId64, j,
                   x->rank, in_axes[j]);
      break;
    }
    in_axes[j] = ax;
    if (j == 0) trips = x->dims[ax];
    else if (x->dims[ax] != trips)
      st = kl_fail(e, KILN_ERR_SHAPE, "scanned input %d has %" PRId64 " slices along its "
                   "axis and input 0 has %" PRId64, j, x->dims[ax], trips);
  }
  for (int k = 0; st == KILN_OK && k < ns; k++) cur[k] = *in[k];
  double work = 0;
  int64_t t = 0;
  for (; st == KILN_OK && t < trips; t++) {
    for (int k = 0; st == KILN_OK && k < ns; k++) st = bind(s, k, &cur[k], e);
    for (int j = 0; st == KILN_OK && j < m; j++) {
      kl_tensor x;
      int64_t idx = in_dirs[j] ? trips - 1 - t : t;
      st = slice_of(in[ns + j], (int)in_axes[j], idx, &c->slices[j], &x, e);
      if (st == KILN_OK) st = bind(s, ns + j, &x, e);
    }
    if (st == KILN_OK) st = run_body(c, 0, n, in, ns + m, &work, max_work, e);
    for (int k = 0; st == KILN_OK && k < ns; k++) {
      kl_tensor out = body_output(s, k);
      st = carry(c, (int)((t + 1) & 1), k, &out, body_output_type(s, k), &cur[k], e);
    }
    for (int k = 0; st == KILN_OK && k < n_out; k++) {
      kl_tensor out = body_output(s, ns + k);
      if (t == 0) {
        first[k] = out;
        int ax = out.rank + 1 <= KL_MAX_RANK ? norm_axis(out_axes[k], out.rank + 1) : -1;
        if (ax < 0) {
          st = kl_fail(e, KILN_ERR_SHAPE, "scan output %d has rank %d: no axis %" PRId64
                       " (scan_output_axes) in rank %d", k, out.rank, out_axes[k], out.rank + 1);
          break;
        }
        out_ax[k] = ax;
        kl_tensor all = {.dtype = out.dtype, .rank = out.rank + 1};
        for (int d = 0, j = 0; d <= out.rank; d++) all.dims[d] = d == ax ? trips : out.dims[j++];
        st = alloc(actx, ns + k, &all, kl_tensor_nbytes(&all), &outs[k]);
      } else if (!same_shape(&out, &first[k])) {
        char a[128], b[128];
        dims_text(first[k].rank, first[k].dims, a, sizeof a);
        dims_text(out.rank, out.dims, b, sizeof b);
        st = kl_fail(e, KILN_ERR_SHAPE, "scan output %d is %s in iteration 0 and %s in "
                     "iteration %" PRId64 "; every iteration's must have one shape", k, a, b, t);
      }
      if (st == KILN_OK) place(outs[k], out_ax[k], out_dirs[k] ? trips - 1 - t : t, &out);
    }
    if (st != KILN_OK) break; /* t names the failing iteration */
  }
  if (st != KILN_OK) kl_err_prefix(e, "in the body's iteration %" PRId64, t);
  for (int k = 0; st == KILN_OK && k < ns; k++)
    st = emit(alloc, actx, k, &cur[k], body_output_type(s, k));
  for (int k = 0; st == KILN_OK && trips == 0 && k < n_out; k++) {
    kl_tensor one = empty_slice(s, ns + k);
    int ax = one.rank + 1 <= KL_MAX_RANK ? norm_axis(out_axes[k], one.rank + 1) : -1;
    if (ax < 0) {
      st = kl_fail(e, KILN_ERR_SHAPE, "scan output %d: no axis %" PRId64 " in rank %d", k,
                   out_axes[k], one.rank + 1);
      break;
    }
    kl_tensor all = {.dtype = one.dtype, .rank = one.rank + 1};
    for (int d = 0, j = 0; d <= one.rank; d++) all.dims[d] = d == ax ? 0 : one.dims[j++];
    st = alloc(actx, ns + k, &all, 0, &outs[k]);
  }
  return st;
}

kiln_status kl_control_run(kl_control *c, const kl_node *n, const kl_tensor *const *in,
                           int64_t max_work, kl_value_alloc alloc, void *actx, kl_err *e) {
  c->iterations = 0;
  c->work = 0;
  switch (n->op) {
  case KL_OP_If: return run_if(c, n, in, max_work, alloc, actx, e);
  case KL_OP_Loop: return run_loop(c, n, in, max_work, alloc, actx, e);
  case KL_OP_Scan: return run_scan(c, n, in, max_work, alloc, actx, e);
  default: return kl_fail(e, KILN_ERR_INTERNAL, "%s is not a control op", kl_op_name(n->op));
  }
}
