/* Shape and dtype inference for the sequence and optional ops: a sequence's type is its
 * elements' (kl_type.seq), the dims every element shares where that is known. They run
 * in the session (runtime/sequence.c), which never asks these functions at run time. */
#include "ir/infer_common.h"

#include <string.h>

static kiln_status not_at_run(kl_infer_ctx *c) {
  return kl_fail(c->e, KILN_ERR_INTERNAL, "%s is run by the session, not by shape inference",
                 kl_op_name(c->node->op));
}

/* What both element types are: the dtype (which must agree), the dims they share. */
static kiln_status join(const kl_type *a, const kl_type *b, kl_type *out, kl_err *e) {
  if (a->dtype && b->dtype && a->dtype != b->dtype)
    return kl_fail(e, KILN_ERR_DTYPE, "a sequence of %s cannot hold a %s tensor",
                   kl_dtype_name(a->dtype), kl_dtype_name(b->dtype));
  kl_dtype dt = a->dtype ? a->dtype : b->dtype;
  if (a->rank < 0 || b->rank < 0 || a->rank != b->rank) {
    kl_type_unknown(out, dt);
    return KILN_OK;
  }
  *out = *a;
  out->dtype = dt;
  for (int d = 0; d < a->rank; d++)
    if (!kl_dim_equal(a->dims[d], b->dims[d])) out->dims[d] = kl_dim_unknown();
  return KILN_OK;
}

/* Input i must be a sequence (when its type is known). */
static kiln_status want_seq(kl_infer_ctx *c, int i, const kl_type **t) {
  *t = kl_infer_in(c, i);
  if (!*t) return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "input %d is absent", i);
  if (!(*t)->seq && (*t)->dtype)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "input %d must be a sequence, found a tensor",
                   i);
  return KILN_OK;
}

/* Input i must be a tensor (not a sequence, not an optional). */
static kiln_status want_tensor(kl_infer_ctx *c, int i) {
  const kl_type *t = kl_infer_in(c, i);
  if (t && (t->seq || t->opt))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "input %d must be a tensor, found a %s", i,
                   t->seq ? "sequence" : "optional");
  return KILN_OK;
}

/* A position input (int32 or int64, one element). */
static kiln_status want_position(kl_infer_ctx *c, int i) {
  kiln_status st = want_tensor(c, i);
  if (st == KILN_OK) st = kl_check_dtype(c, i, "position", KL_DTS_INDEX);
  const kl_type *t = kl_infer_in(c, i);
  int64_t n;
  if (st == KILN_OK && t && kl_type_numel(t, &n) && n != 1)
    st = kl_fail(c->e, KILN_ERR_SHAPE, "position must have one element, found %lld",
                 (long long)n);
  return st;
}

static void as_seq(kl_type *t) {
  t->seq = true;
  t->opt = false;
}

int kl_infer_sequence_empty(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  int64_t dt = kl_attr_int(c->node, "dtype", KL_F32);
  if (!kl_dtype_valid((int)dt) || dt == KL_STRING)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "dtype %lld is not one kiln stores",
                   (long long)dt);
  kl_type_unknown(&c->out[0], (kl_dtype)dt);
  as_seq(&c->out[0]);
  return KILN_OK;
}

int kl_infer_sequence_construct(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  kiln_status st = kl_check_required(c, c->n_in);
  for (int k = 0; st == KILN_OK && k < c->n_in; k++) st = want_tensor(c, k);
  if (st != KILN_OK) return st;
  kl_type t = *kl_infer_in(c, 0);
  for (int k = 1; st == KILN_OK && k < c->n_in; k++) st = join(&t, kl_infer_in(c, k), &t, c->e);
  c->out[0] = t;
  as_seq(&c->out[0]);
  return st;
}

int kl_infer_sequence_insert(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  const kl_type *s;
  kiln_status st = want_seq(c, 0, &s);
  if (st == KILN_OK) st = kl_check_required(c, 2);
  if (st == KILN_OK) st = want_tensor(c, 1);
  if (st == KILN_OK && kl_infer_in(c, 2)) st = want_position(c, 2);
  if (st != KILN_OK) return st;
  const kl_type *x = kl_infer_in(c, 1);
  kl_type t;
  /* a sequence whose elements' rank is unknown (an empty one) stays so: later elements
   * may have other shapes than this one */
  if (s->rank < 0) {
    if (s->dtype && x->dtype && s->dtype != x->dtype)
      return kl_fail(c->e, KILN_ERR_DTYPE, "a sequence of %s cannot hold a %s tensor",
                     kl_dtype_name(s->dtype), kl_dtype_name(x->dtype));
    kl_type_unknown(&t, s->dtype ? s->dtype : x->dtype);
  } else if ((st = join(s, x, &t, c->e)) != KILN_OK) {
    return st;
  }
  c->out[0] = t;
  as_seq(&c->out[0]);
  return KILN_OK;
}

int kl_infer_sequence_at(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  const kl_type *s;
  kiln_status st = want_seq(c, 0, &s);
  if (st == KILN_OK) st = kl_check_required(c, 2);
  if (st == KILN_OK) st = want_position(c, 1);
  if (st != KILN_OK) return st;
  c->out[0] = *s;
  c->out[0].seq = c->out[0].opt = false;
  return KILN_OK;
}

int kl_infer_sequence_erase(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  const kl_type *s;
  kiln_status st = want_seq(c, 0, &s);
  if (st == KILN_OK && kl_infer_in(c, 1)) st = want_position(c, 1);
  if (st != KILN_OK) return st;
  c->out[0] = *s;
  as_seq(&c->out[0]);
  return KILN_OK;
}

int kl_infer_sequence_length(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  const kl_type *s;
  kiln_status st = want_seq(c, 0, &s);
  if (st != KILN_OK) return st;
  kl_type_set_shape(&c->out[0], 0, NULL);
  c->out[0].dtype = KL_I64;
  return KILN_OK;
}

int kl_infer_split_to_sequence(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = want_tensor(c, 0);
  if (st == KILN_OK && kl_infer_in(c, 1)) {
    st = want_tensor(c, 1);
    if (st == KILN_OK) st = kl_check_dtype(c, 1, "split", KL_DTS_INDEX);
    if (st == KILN_OK) st = kl_check_rank(c, 1, "split", 0, 1);
  }
  if (st != KILN_OK) return st;
  const kl_type *x = kl_infer_in(c, 0);
  kl_type t = *x;
  if (x->rank >= 0) {
    int64_t axis = kl_attr_int(c->node, "axis", 0);
    if (axis < -x->rank || axis >= x->rank)
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for rank %d",
                     (long long)axis, x->rank);
    if (axis < 0) axis += x->rank;
    bool squeeze = !kl_infer_in(c, 1) && kl_attr_int(c->node, "keepdims", 1) == 0;
    if (squeeze) {
      memmove(&t.dims[axis], &t.dims[axis + 1], sizeof(kl_dim) * (size_t)(x->rank - 1 - axis));
      t.rank--;
    } else {
      t.dims[axis] = kl_infer_in(c, 1) ? kl_dim_unknown() : kl_dim_of(1);
    }
  }
  c->out[0] = t;
  as_seq(&c->out[0]);
  return KILN_OK;
}

int kl_infer_concat_from_sequence(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  const kl_type *s;
  kiln_status st = want_seq(c, 0, &s);
  if (st != KILN_OK) return st;
  bool stack = kl_attr_int(c->node, "new_axis", 0) != 0;
  const kl_attr *a = kl_node_attr(c->node, "axis");
  if (!a) return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "ConcatFromSequence needs attribute axis");
  kl_type t = *s;
  t.seq = t.opt = false;
  if (s->rank < 0) {
    kl_type_unknown(&c->out[0], s->dtype);
    return KILN_OK;
  }
  int rank = s->rank + (stack ? 1 : 0);
  int64_t axis = a->i;
  if (axis < -rank || axis >= rank)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "axis %lld is out of range for rank %d",
                   (long long)axis, rank);
  if (axis < 0) axis += rank;
  if (rank > KL_MAX_RANK) return kl_check_out_rank(c, rank);
  if (stack) {
    memmove(&t.dims[axis + 1], &t.dims[axis], sizeof(kl_dim) * (size_t)(s->rank - axis));
    t.rank = rank;
  }
  t.dims[axis] = kl_dim_unknown(); /* the count and sizes of the elements */
  c->out[0] = t;
  return KILN_OK;
}

int kl_infer_optional(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  const kl_type *x = kl_infer_in(c, 0);
  if (x && x->opt)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "an optional of an optional is not supported");
  if (x) {
    c->out[0] = *x;
  } else {
    const kl_attr *dt = kl_node_attr(c->node, "elem_dtype");
    if (!dt)
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "an Optional with no input needs "
                     "attribute type");
    kl_type_unknown(&c->out[0], (kl_dtype)dt->i);
    c->out[0].seq = kl_attr_int(c->node, "elem_sequence", 0) != 0;
  }
  c->out[0].opt = true;
  return KILN_OK;
}

int kl_infer_optional_has_element(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  kl_type_set_shape(&c->out[0], 0, NULL);
  c->out[0].dtype = KL_BOOL;
  return KILN_OK;
}

int kl_infer_optional_get_element(kl_infer_ctx *c) {
  if (c->at_run) return not_at_run(c);
  kiln_status st = kl_check_required(c, 1);
  if (st != KILN_OK) return st;
  c->out[0] = *kl_infer_in(c, 0);
  c->out[0].opt = false;
  return KILN_OK;
}
