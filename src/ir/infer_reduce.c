/* Shape/dtype inference for reductions along axes: the Reduce* ops (axes as input 1,
 * opset 18 form), ArgMax and ArgMin, CumSum and CumProd, and TopK. */
#include "ir/infer_common.h"
#include "ir/reduce.h"

/* The numeric dtypes of the opset 18 reductions and scans. */
#define DTS_NUM (KL_DTS_FLOAT | KL_DTS_INDEX | KL_DT(KL_U32) | KL_DT(KL_U64))
/* Every dtype with an order: ArgMax, ArgMin, TopK. */
#define DTS_ORDERED \
  (DTS_NUM | KL_DT(KL_I8) | KL_DT(KL_U8) | KL_DT(KL_I16) | KL_DT(KL_U16))

kiln_status kl_reduce_mask(const kl_node *node, int rank, const int64_t *axes, int n_axes,
                           bool *mask, kl_err *e) {
  bool all = n_axes == 0 && kl_attr_int(node, "noop_with_empty_axes", 0) == 0;
  for (int d = 0; d < rank; d++) mask[d] = all;
  for (int i = 0; i < n_axes; i++) {
    int64_t a = axes[i];
    if (a < -rank || a >= rank)
      return kl_fail(e, KILN_ERR_SHAPE, "axes[%d] is %lld, out of range for rank %d "
                     "(expected %d to %d)", i, (long long)a, rank, -rank, rank - 1);
    int d = (int)(a < 0 ? a + rank : a);
    if (mask[d])
      return kl_fail(e, KILN_ERR_SHAPE, "axes[%d] is %lld, naming axis %d a second time", i,
                     (long long)a, d);
    mask[d] = true;
  }
  return KILN_OK;
}

static uint32_t reduce_dtypes(kl_op op) {
  if (op == KL_OP_ReduceMax || op == KL_OP_ReduceMin)
    return DTS_NUM | KL_DT(KL_I8) | KL_DT(KL_U8) | KL_DT(KL_BOOL);
  return DTS_NUM;
}

/* Output of a reduction whose axes are not known yet (load time, axes from a graph
 * input): with keepdims the rank stays and only dims of 1 are sure; without it the
 * rank is known when the number of axes is. */
static kiln_status reduce_unknown_axes(kl_infer_ctx *c, const kl_type *x, bool keep) {
  kl_type *out = &c->out[0];
  if (keep) {
    kl_type_unknown_dims(out, x->dtype, x->rank);
    for (int d = 0; d < x->rank; d++)
      if (x->dims[d].size == 1) out->dims[d] = kl_dim_of(1);
    return KILN_OK;
  }
  const kl_type *axes = c->in[1];
  kl_dim n = axes->rank == 0 ? kl_dim_of(1) : axes->rank == 1 ? axes->dims[0]
                                                             : kl_dim_unknown();
  if (!kl_dim_known(n)) return KILN_OK;
  if (n.size > x->rank)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (axes) has %lld values but input 0 "
                   "(data) has rank %d", (long long)n.size, x->rank);
  kl_type_unknown_dims(out, x->dtype, x->rank - (int)n.size);
  return KILN_OK;
}

int kl_infer_reduce(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "data", reduce_dtypes(c->node->op));
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "axes", KL_DT(KL_I64));
  int64_t axes[KL_MAX_RANK];
  int n_axes = 0;
  if (st == KILN_OK && kl_infer_in(c, 1))
    st = kl_read_ints(c, 1, "axes", axes, KL_MAX_RANK, &n_axes);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  bool keep = kl_attr_int(c->node, "keepdims", 1) != 0;
  kl_type_unknown(&c->out[0], x->dtype);
  if (x->rank < 0) return KILN_OK;
  if (n_axes < 0) return reduce_unknown_axes(c, x, keep);
  bool mask[KL_MAX_RANK];
  st = kl_reduce_mask(c->node, x->rank, axes, n_axes, mask, c->e);
  if (st != KILN_OK) return st;
  kl_type *out = &c->out[0];
  out->rank = 0;
  for (int d = 0; d < x->rank; d++) {
    if (!mask[d]) out->dims[out->rank++] = x->dims[d];
    else if (keep) out->dims[out->rank++] = kl_dim_of(1);
  }
  return KILN_OK;
}

int kl_infer_argminmax(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "data", DTS_ORDERED);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "data", 1, KL_MAX_RANK);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_type_unknown(&c->out[0], KL_I64);
  if (x->rank < 0) return KILN_OK;
  int axis;
  st = kl_norm_axis(c, kl_attr_int(c->node, "axis", 0), x->rank, "axis", &axis);
  if (st != KILN_OK) return st;
  if (x->dims[axis].size == 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "axis %d of input 0 (data) is empty: there is no "
                   "%s", axis, c->node->op == KL_OP_ArgMax ? "maximum" : "minimum");
  bool keep = kl_attr_int(c->node, "keepdims", 1) != 0;
  kl_type *out = &c->out[0];
  out->rank = 0;
  for (int d = 0; d < x->rank; d++) {
    if (d != axis) out->dims[out->rank++] = x->dims[d];
    else if (keep) out->dims[out->rank++] = kl_dim_of(1);
  }
  return KILN_OK;
}

/* Input i must be a 0-D or one-element 1-D integer tensor; *v gets its value, *known
 * whether it is known. */
static kiln_status read_one_int(const kl_infer_ctx *c, int i, const char *name, int64_t *v,
                                bool *known) {
  const kl_type *t = c->in[i];
  *known = false;
  if (t->rank == 1 && kl_dim_known(t->dims[0]) && t->dims[0].size != 1)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %lld values, expected one", i,
                   name, (long long)t->dims[0].size);
  int n;
  kiln_status st = kl_read_ints(c, i, name, v, 1, &n);
  *known = st == KILN_OK && n == 1;
  return st;
}

int kl_infer_cumulative(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "x", DTS_NUM);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "axis", KL_DTS_INDEX);
  int64_t axis;
  bool known;
  if (st == KILN_OK) st = read_one_int(c, 1, "axis", &axis, &known);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  int a;
  if (known && x->rank >= 0) st = kl_norm_axis(c, axis, x->rank, "input 1 (axis)", &a);
  if (st == KILN_OK) c->out[0] = *x;
  return st;
}

int kl_infer_topk(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", DTS_ORDERED);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 1, KL_MAX_RANK);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "K", KL_DT(KL_I64));
  int64_t k;
  bool known;
  if (st == KILN_OK) st = read_one_int(c, 1, "K", &k, &known);
  if (st != KILN_OK) return st;
  if (known && k < 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (K) is %lld, expected at least 0",
                   (long long)k);
  const kl_type *x = c->in[0];
  kl_type_unknown(&c->out[0], x->dtype);
  kl_type_unknown(&c->out[1], KL_I64);
  if (x->rank < 0) return KILN_OK;
  int axis;
  st = kl_norm_axis(c, kl_attr_int(c->node, "axis", -1), x->rank, "axis", &axis);
  if (st != KILN_OK) return st;
  kl_dim len = x->dims[axis];
  if (known && kl_dim_known(len) && k > len.size)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (K) is %lld but axis %d of input 0 (X) "
                   "has only %lld elements", (long long)k, axis, (long long)len.size);
  c->out[0] = *x;
  c->out[0].dims[axis] = known ? kl_dim_of(k) : kl_dim_unknown();
  c->out[1] = c->out[0];
  c->out[1].dtype = KL_I64;
  return KILN_OK;
}
