/* The GPU "data" family (kernels/data.cl): Softmax and LogSoftmax; LayerNormalization
 * (with its Mean and InvStdDev outputs), RMSNormalization and kiln SkipLayerNorm (with
 * its X + Skip output); ReduceSum, Mean, Max, Min, Prod, L1, L2, SumSquare, LogSum and
 * LogSumExp; Transpose, Concat, Slice, Split, Expand and Tile as strided views; Gather
 * with int64 indices on the device; Pad in every mode. The moves (Transpose to Pad) take
 * float32, int64, int32, bool and uint8 data, by element size. The parameters these ops read on
 * the host (axes, starts, pads, ...) go through the same helpers as shape inference and
 * the reference kernels (ir/data_plan.h, ir/reduce.h), so all three agree. */
#include "backends/gpu/kernels.h"
#include "ir/data_plan.h"
#include "ir/reduce.h"

#include <stdio.h>
#include <string.h>

/* The structs below mirror data.cl's, which spell KL_MAX_RANK as 8. */
_Static_assert(KL_MAX_RANK == 8, "kernels/data.cl sizes its structs for rank 8");

/* data.cl's KL_GROUP (the local arrays of the _group kernels) and KL_VIEW_RANK (a Tile
 * view has two dims per tensor dim). Rows of at most ROW_ITEMS elements run a
 * work-item each; longer ones a work-group each. */
enum { GROUP = 256, VIEW_RANK = 2 * KL_MAX_RANK, ROW_ITEMS = 32 };
/* data.cl's KL_NR_ROWS and KL_NR_MAX * 32: kl_norm_rows' rows per group and longest row */
enum { NORM_ROWS = 8, NORM_ROW_MAX = 1024 };

/* Matches kl_cl_view of data.cl. */
typedef struct kl_cl_view {
  int64_t dims[VIEW_RANK];
  int64_t s[VIEW_RANK];
  int64_t base;
  int32_t rank, pad;
} kl_cl_view;

/* Matches kl_cl_norm of data.cl. */
typedef struct kl_cl_norm {
  int64_t dims[KL_MAX_RANK];
  int64_t s[4][KL_MAX_RANK];
  int64_t period[4];
  int32_t rank;
  int32_t mode[4]; /* NORM_AT_*: how operand k's offset follows from Y's element */
  int32_t pad;
} kl_cl_norm;

/* Matches kl_cl_pad of data.cl. */
typedef struct kl_cl_pad {
  int64_t dims[KL_MAX_RANK], xdims[KL_MAX_RANK], xs[KL_MAX_RANK];
  int64_t begin[KL_MAX_RANK], end[KL_MAX_RANK];
  int32_t rank, mode; /* mode: kl_pad_mode, as data.cl's KL_PAD_* */
} kl_cl_pad;
_Static_assert(KL_PADMODE_CONSTANT == 0 && KL_PADMODE_REFLECT == 1 && KL_PADMODE_EDGE == 2 &&
               KL_PADMODE_WRAP == 3, "data.cl's KL_PAD_* follow kl_pad_mode");

/* data.cl's KL_RED_* and KL_NORM_*. */
enum { RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_PROD, RED_L1, RED_L2, RED_SUMSQ, RED_LOGSUM,
       RED_LOGSUMEXP };
enum { NORM_SKIP = 1, NORM_BIAS = 2, NORM_RMS = 4, NORM_SUM = 8, NORM_MEAN = 16,
       NORM_INV = 32 };
/* An operand's offset for Y's element i = r * len + j: from its strides, i itself (Y's
 * shape, contiguous), or j (one row's worth, repeated: Scale and B). */
enum { NORM_AT_STRIDES = 0, NORM_AT_ELEMENT = 1, NORM_AT_COLUMN = 2 };

static const kl_tensor *input(const kl_kernel_ctx *kc, int k) {
  return kc->n_in > k ? kc->in[k] : NULL;
}

static kl_tensor *output(const kl_kernel_ctx *kc, int k) {
  return kc->n_out > k && kc->node->out[k] >= 0 ? kc->out[k] : NULL;
}

/* The node's "axis" in [0, rank). */
static int norm_axis(const kl_node *n, int64_t dflt, int rank) {
  int64_t a = kl_attr_int(n, "axis", dflt);
  return (int)(a < 0 ? a + rank : a);
}

/* Up to max values of a host int tensor (absent: none); returns the count. */
static int host_ints(const kl_tensor *t, int64_t *v, int max) {
  int64_t n = t ? kl_tensor_numel(t) : 0;
  for (int64_t k = 0; k < n && k < max; k++) v[k] = kl_load_i64(t->data, t->dtype, (size_t)k);
  return (int)(n < max ? n : max);
}

/* Row-major element strides of t. */
static void strides_of(const kl_tensor *t, int64_t *s) {
  int64_t n = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    s[d] = n;
    n *= t->dims[d];
  }
}

static int64_t span(const int64_t *dims, int from, int to) {
  int64_t n = 1;
  for (int d = from; d < to; d++) n *= dims[d];
  return n;
}

/* ---- views ---- */

/* Drops dims of 1 and merges neighbours that step as one dim: fewer divisions per
 * element (a Concat's inner dims become one). */
static void view_simplify(kl_cl_view *v) {
  int r = 0;
  for (int d = 0; d < v->rank; d++) {
    if (v->dims[d] == 1) continue;
    if (r > 0 && v->s[r - 1] == v->s[d] * v->dims[d]) {
      v->dims[r - 1] *= v->dims[d];
      v->s[r - 1] = v->s[d];
      continue;
    }
    v->dims[r] = v->dims[d];
    v->s[r++] = v->s[d];
  }
  v->rank = r;
}

/* A view over dims[rank] with strides s, from base. */
static kl_cl_view view_of(int rank, const int64_t *dims, const int64_t *s, int64_t base) {
  kl_cl_view v;
  memset(&v, 0, sizeof v);
  v.rank = rank;
  v.base = base;
  for (int d = 0; d < rank; d++) v.dims[d] = dims[d], v.s[d] = s[d];
  view_simplify(&v);
  return v;
}

/* kl_view_read over y's elements (write: over x's). */
static kiln_status view_move(kl_cl *c, bool write, const kl_tensor *x, const kl_tensor *y,
                             kl_cl_view v, kl_err *e) {
  int64_t n = kl_tensor_numel(write ? x : y);
  char name[64];
  return KL_GPU_LAUNCH1(c, kl_gpu_sized(write ? "kl_view_write" : "kl_view_read", x, name), n,
                        e, CLA_T(x), CLA_T(y), CLA_L(n), CLA_S(v));
}

/* ---- row kernels ---- */

/* The work-group of a row of len: a power of two, at most GROUP and the device's. */
static size_t row_group(kl_cl *c, int64_t len) {
  size_t cap = kl_cl_max_group(c) < GROUP ? kl_cl_max_group(c) : GROUP, l = 1;
  while (l * 2 <= cap && (int64_t)l < len) l *= 2;
  return l;
}

/* kernel_items over `rows` work-items or kernel_group over `rows` work-groups, as the
 * length of what each row or output combines says. */
static kiln_status launch_rows(kl_cl *c, const char *kernel, int64_t rows, int64_t len,
                               const kl_cl_arg *args, int n_args, kl_err *e) {
  char name[64];
  if (len <= ROW_ITEMS) {
    snprintf(name, sizeof name, "%s_items", kernel);
    return kl_gpu_launch1(c, name, rows, args, n_args, e);
  }
  size_t l = row_group(c, len);
  snprintf(name, sizeof name, "%s_group", kernel);
  return kl_cl_launch(c, name, args, n_args, 1, (size_t[]){(size_t)rows * l}, &l, e);
}
#define LAUNCH_ROWS(c, kernel, rows, len, e, ...)                                           \
  launch_rows(c, kernel, rows, len, (const kl_cl_arg[]){__VA_ARGS__},                      \
              (int)(sizeof((kl_cl_arg[]){__VA_ARGS__}) / sizeof(kl_cl_arg)), e)

/* ---- Softmax, LogSoftmax ---- */

static kiln_status run_softmax(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *x = kc->in[0];
  int axis = norm_axis(kc->node, -1, x->rank);
  int64_t len = x->dims[axis], inner = span(x->dims, axis + 1, x->rank);
  int64_t rows = span(x->dims, 0, axis) * inner;
  return LAUNCH_ROWS(c, "kl_softmax", rows, len, kc->e, CLA_T(x), CLA_T(kc->out[0]),
                     CLA_L(rows), CLA_L(len), CLA_L(inner),
                     CLA_I(kc->node->op == KL_OP_LogSoftmax));
}

/* ---- LayerNormalization, RMSNormalization, SkipLayerNorm ---- */

/* Strides of t broadcast (numpy, right-aligned) to a shape of rank `rank`; 0 where it
 * repeats. */
static void bcast_strides(const kl_tensor *t, int rank, int64_t *s) {
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; d--) {
    int td = t->rank - rank + d;
    s[d] = td < 0 || t->dims[td] == 1 ? 0 : stride;
    if (td >= 0) stride *= t->dims[td];
  }
}

/* The period p when the operand with strides s is at offset i % p for every element i
 * (the same shape, a trailing block repeated, a scalar); 0 when it is not. */
static int64_t bcast_period(const int64_t *dims, const int64_t *s, int rank) {
  int64_t p = 1;
  int d = rank - 1;
  for (; d >= 0 && (dims[d] == 1 || s[d] == p); d--) p *= dims[d];
  for (; d >= 0; d--)
    if (dims[d] != 1 && s[d] != 0) return 0;
  return p;
}

static kiln_status run_norm(kl_cl *c, kl_kernel_ctx *kc) {
  bool skip = kc->node->op == KL_OP_KilnSkipLayerNorm;
  const kl_tensor *x = kc->in[0], *k = skip ? kc->in[1] : NULL;
  const kl_tensor *g = kc->in[skip ? 2 : 1], *b = input(kc, skip ? 3 : 2);
  kl_tensor *y = kc->out[0], *o1 = output(kc, 1), *o2 = output(kc, 2);
  int axis = norm_axis(kc->node, -1, y->rank);
  int64_t len = span(y->dims, axis, y->rank), rows = span(y->dims, 0, axis);
  int flags = (k ? NORM_SKIP : 0) | (b ? NORM_BIAS : 0) |
              (kc->node->op == KL_OP_RMSNormalization ? NORM_RMS : 0) |
              (skip && o1 ? NORM_SUM : 0) | (!skip && o1 ? NORM_MEAN : 0) | (o2 ? NORM_INV : 0);
  kl_cl_norm nb;
  memset(&nb, 0, sizeof nb);
  nb.rank = y->rank;
  memcpy(nb.dims, y->dims, sizeof(int64_t) * (size_t)y->rank);
  const kl_tensor *ops[4] = {x, k, g, b};
  for (int i = 0; i < 4; i++) {
    if (!ops[i]) continue;
    bcast_strides(ops[i], y->rank, nb.s[i]);
    nb.period[i] = bcast_period(y->dims, nb.s[i], y->rank);
    nb.mode[i] = nb.period[i] == rows * len ? NORM_AT_ELEMENT
                 : nb.period[i] == len      ? NORM_AT_COLUMN
                                            : NORM_AT_STRIDES;
  }
  float eps = kl_attr_float(kc->node, "epsilon", 1e-5f);
  bool plain = nb.mode[0] == NORM_AT_ELEMENT && (!k || nb.mode[1] == NORM_AT_ELEMENT) &&
               nb.mode[2] == NORM_AT_COLUMN && (!b || nb.mode[3] == NORM_AT_COLUMN);
  if (plain && len > ROW_ITEMS && len <= NORM_ROW_MAX && kl_cl_max_group(c) >= GROUP) {
    /* 8 rows per work-group of 256, each row held in registers (kl_norm_rows) */
    size_t global = (size_t)((rows + NORM_ROWS - 1) / NORM_ROWS) * GROUP, local = GROUP;
    return KL_CL_LAUNCH(c, "kl_norm_rows", 1, &global, &local, kc->e, CLA_T(x), CLA_T(k),
                        CLA_T(g), CLA_T(b), CLA_T(y), CLA_T(skip ? o1 : NULL),
                        CLA_T(skip ? NULL : o1), CLA_T(o2), CLA_L(rows), CLA_L(len),
                        CLA_F(eps), CLA_I(flags), CLA_S(nb));
  }
  return LAUNCH_ROWS(c, "kl_norm", rows, len, kc->e, CLA_T(x), CLA_T(k), CLA_T(g), CLA_T(b),
                     CLA_T(y), CLA_T(skip ? o1 : NULL), CLA_T(skip ? NULL : o1), CLA_T(o2),
                     CLA_L(rows), CLA_L(len), CLA_F(eps), CLA_I(flags), CLA_S(nb));
}

/* ---- Reduce* ---- */

static int reduce_code(kl_op op) {
  switch (op) {
  case KL_OP_ReduceMean: return RED_MEAN;
  case KL_OP_ReduceMax: return RED_MAX;
  case KL_OP_ReduceMin: return RED_MIN;
  case KL_OP_ReduceProd: return RED_PROD;
  case KL_OP_ReduceL1: return RED_L1;
  case KL_OP_ReduceL2: return RED_L2;
  case KL_OP_ReduceSumSquare: return RED_SUMSQ;
  case KL_OP_ReduceLogSum: return RED_LOGSUM;
  case KL_OP_ReduceLogSumExp: return RED_LOGSUMEXP;
  default: return RED_SUM;
  }
}

/* The view over x's axes with mask[d] == want (x's strides), and its element count. */
static int64_t mask_view(const kl_tensor *x, const bool *mask, bool want, kl_cl_view *v) {
  int64_t xs[KL_MAX_RANK], dims[KL_MAX_RANK] = {0}, s[KL_MAX_RANK] = {0};
  strides_of(x, xs);
  int n = 0;
  for (int d = 0; d < x->rank; d++)
    if (mask[d] == want) dims[n] = x->dims[d], s[n++] = xs[d];
  *v = view_of(n, dims, s, 0);
  return span(dims, 0, n);
}

static kiln_status run_reduce(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *x = kc->in[0];
  int64_t axes[KL_MAX_RANK];
  int n_axes = host_ints(input(kc, 1), axes, KL_MAX_RANK);
  bool mask[KL_MAX_RANK];
  kiln_status st = kl_reduce_mask(kc->node, x->rank, axes, n_axes, mask, kc->e);
  if (st != KILN_OK) return st;
  kl_cl_view kept, set;
  int64_t n = mask_view(x, mask, false, &kept), n_set = mask_view(x, mask, true, &set);
  return LAUNCH_ROWS(c, "kl_reduce", n, n_set, kc->e, CLA_T(x), CLA_T(kc->out[0]), CLA_L(n),
                     CLA_I(reduce_code(kc->node->op)), CLA_S(kept), CLA_S(set), CLA_L(n_set));
}

/* ---- Transpose, Concat, Split, Slice, Expand, Tile ---- */

static kiln_status run_transpose(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *x = kc->in[0];
  kl_tensor *y = kc->out[0];
  const int64_t *perm;
  bool given = kl_attr_ints(kc->node, "perm", &perm) >= 0;
  int64_t xs[KL_MAX_RANK], s[KL_MAX_RANK];
  strides_of(x, xs);
  for (int k = 0; k < y->rank; k++) s[k] = xs[given ? perm[k] : y->rank - 1 - k];
  return view_move(c, false, x, y, view_of(y->rank, y->dims, s, 0), kc->e);
}

/* Concat writes each input into its place in Y; Split reads each output from its place
 * in X. `big` is the tensor cut along axis, parts[0..n-1] the pieces in order. */
static kiln_status cut(kl_cl *c, bool concat, const kl_tensor *big,
                       const kl_tensor *const *parts, int n, int axis, kl_err *e) {
  int64_t bs[KL_MAX_RANK], first = 0;
  strides_of(big, bs);
  for (int k = 0; k < n; k++) {
    const kl_tensor *p = parts[k];
    kl_cl_view v = view_of(p->rank, p->dims, bs, first * bs[axis]);
    first += p->dims[axis];
    if (kl_tensor_numel(p) == 0) continue;
    kiln_status st = concat ? view_move(c, true, p, big, v, e) : view_move(c, false, big, p, v, e);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

static kiln_status run_concat(kl_cl *c, kl_kernel_ctx *kc) {
  kl_tensor *y = kc->out[0];
  int axis = norm_axis(kc->node, 0, y->rank);
  return cut(c, true, y, kc->in, kc->n_in, axis, kc->e);
}

static kiln_status run_split(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *x = kc->in[0];
  int axis = norm_axis(kc->node, 0, x->rank);
  return cut(c, false, x, (const kl_tensor *const *)kc->out, kc->n_out, axis, kc->e);
}

static kiln_status run_slice(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *x = kc->in[0], *ta = input(kc, 3), *ts = input(kc, 4);
  kl_tensor *y = kc->out[0];
  int64_t starts[KL_MAX_RANK], ends[KL_MAX_RANK], axes[KL_MAX_RANK], steps[KL_MAX_RANK];
  int n = host_ints(kc->in[1], starts, KL_MAX_RANK);
  host_ints(kc->in[2], ends, KL_MAX_RANK);
  host_ints(ta, axes, KL_MAX_RANK);
  host_ints(ts, steps, KL_MAX_RANK);
  kl_slice_plan p;
  kiln_status st = kl_slice_plan_make(x->rank, x->dims, n, starts, ends, ta ? axes : NULL,
                                      ts ? steps : NULL, &p, kc->e);
  if (st != KILN_OK) return st;
  int64_t xs[KL_MAX_RANK], s[KL_MAX_RANK], base;
  strides_of(x, xs);
  kl_slice_plan_view(&p, x->rank, xs, s, &base);
  return view_move(c, false, x, y, view_of(y->rank, y->dims, s, base), kc->e);
}

static kiln_status run_expand(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *x = kc->in[0];
  kl_tensor *y = kc->out[0];
  int64_t s[KL_MAX_RANK];
  bcast_strides(x, y->rank, s);
  return view_move(c, false, x, y, view_of(y->rank, y->dims, s, 0), kc->e);
}

/* Y's dim d of reps * X.dims[d] is the dims [reps, X.dims[d]] with strides [0, X's]. */
static kiln_status run_tile(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *x = kc->in[0];
  kl_tensor *y = kc->out[0];
  int64_t xs[KL_MAX_RANK], dims[VIEW_RANK], s[VIEW_RANK];
  strides_of(x, xs);
  for (int d = 0; d < x->rank; d++) {
    dims[2 * d] = y->dims[d] / x->dims[d]; /* y is not empty, so neither is x */
    dims[2 * d + 1] = x->dims[d];
    s[2 * d] = 0;
    s[2 * d + 1] = xs[d];
  }
  return view_move(c, false, x, y, view_of(2 * x->rank, dims, s, 0), kc->e);
}

/* ---- Gather, Pad ---- */

static kiln_status run_gather(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *x = kc->in[0], *idx = kc->in[1];
  kl_tensor *y = kc->out[0];
  int axis = norm_axis(kc->node, 0, x->rank);
  int64_t n = kl_tensor_numel(y);
  const kl_tensor *flag = kl_cl_flag(c, kc->e); /* an index out of range raises it */
  if (!flag) return kc->e->code;
  char name[64];
  return KL_GPU_LAUNCH1(c, kl_gpu_sized("kl_gather", x, name), n, kc->e, CLA_T(x), CLA_T(idx), CLA_T(y), CLA_L(n),
                        CLA_L(x->dims[axis]), CLA_L(kl_tensor_numel(idx)),
                        CLA_L(span(x->dims, axis + 1, x->rank)), CLA_T(flag),
                        CLA_I(kl_cl_node(c)));
}

/* Pad's constant as the bits of one element of dtype t, as kl_pad's `value` (0 when
 * absent: every dtype's zero is all zero bits). */
static int64_t pad_bits(const kl_tensor *tv, kl_dtype t) {
  if (!tv || kl_tensor_numel(tv) == 0) return 0;
  switch (kl_dtype_size(t)) {
  case 1: return *(const uint8_t *)tv->data;
  case 8: return *(const int64_t *)tv->data;
  default: {
    uint32_t u;
    memcpy(&u, tv->data, sizeof u);
    return u;
  }
  }
}

static kiln_status run_pad(kl_cl *c, kl_kernel_ctx *kc) {
  const kl_tensor *x = kc->in[0], *tv = input(kc, 2), *ta = input(kc, 3);
  kl_tensor *y = kc->out[0];
  kl_pad_mode mode;
  int64_t pads[2 * KL_MAX_RANK], axes[KL_MAX_RANK];
  int n = host_ints(kc->in[1], pads, 2 * KL_MAX_RANK) / 2;
  host_ints(ta, axes, KL_MAX_RANK);
  kl_cl_pad p;
  memset(&p, 0, sizeof p);
  kiln_status st = kl_pad_mode_read(kc->node, &mode, kc->e);
  if (st == KILN_OK) st = kl_pad_plan_make(x->rank, n, pads, ta ? axes : NULL, p.begin, p.end, kc->e);
  if (st != KILN_OK) return st;
  p.rank = y->rank;
  p.mode = (int32_t)mode;
  memcpy(p.dims, y->dims, sizeof(int64_t) * (size_t)y->rank);
  memcpy(p.xdims, x->dims, sizeof(int64_t) * (size_t)x->rank);
  strides_of(x, p.xs);
  int64_t count = kl_tensor_numel(y);
  char name[64];
  return KL_GPU_LAUNCH1(c, kl_gpu_sized("kl_pad", y, name), count, kc->e, CLA_T(x), CLA_T(y),
                        CLA_L(count), CLA_L(pad_bits(tv, y->dtype)), CLA_S(p));
}

/* The moves: the output has the data input's dtype (float32 or any of KL_GPU_DT_MOVABLE;
 * the indices of Gather int64). */
static bool same_dtype(const kl_graph *g, const kl_node *n) {
  return g->values[n->in[0]].type.dtype == g->values[n->out[0]].type.dtype;
}

static bool gather_ok(const kl_graph *g, const kl_node *n) {
  return same_dtype(g, n) && g->values[n->in[1]].type.dtype == KL_I64;
}

#define HOST(k) (1u << (k))
#define MOVE KL_GPU_DT_MOVABLE
#define REDUCE(op) {KL_OP_##op, "cl:reduce", HOST(1), 0, false, NULL, run_reduce}

const kl_gpu_op kl_gpu_ops_data[] = {
    {KL_OP_Softmax, "cl:softmax", 0, 0, false, NULL, run_softmax},
    {KL_OP_LogSoftmax, "cl:softmax", 0, 0, false, NULL, run_softmax},
    {KL_OP_LayerNormalization, "cl:norm", 0, 0, false, NULL, run_norm},
    {KL_OP_RMSNormalization, "cl:norm", 0, 0, false, NULL, run_norm},
    {KL_OP_KilnSkipLayerNorm, "cl:norm", 0, 0, false, NULL, run_norm},
    REDUCE(ReduceSum), REDUCE(ReduceMean), REDUCE(ReduceMax), REDUCE(ReduceMin),
    REDUCE(ReduceProd), REDUCE(ReduceL1), REDUCE(ReduceL2), REDUCE(ReduceSumSquare),
    REDUCE(ReduceLogSum), REDUCE(ReduceLogSumExp),
    {KL_OP_Transpose, "cl:transpose", 0, MOVE, false, same_dtype, run_transpose},
    {KL_OP_Concat, "cl:concat", 0, MOVE, false, same_dtype, run_concat},
    {KL_OP_Split, "cl:split", HOST(1), MOVE, false, same_dtype, run_split},
    {KL_OP_Slice, "cl:slice", HOST(1) | HOST(2) | HOST(3) | HOST(4), MOVE, false, same_dtype,
     run_slice},
    {KL_OP_Expand, "cl:expand", HOST(1), MOVE, false, same_dtype, run_expand},
    {KL_OP_Tile, "cl:tile", HOST(1), MOVE, false, same_dtype, run_tile},
    {KL_OP_Gather, "cl:gather", 0, MOVE, false, gather_ok, run_gather},
    {KL_OP_Pad, "cl:pad", HOST(1) | HOST(2) | HOST(3), MOVE, false, same_dtype, run_pad},
};
const int kl_gpu_ops_data_count = (int)(sizeof kl_gpu_ops_data / sizeof kl_gpu_ops_data[0]);
