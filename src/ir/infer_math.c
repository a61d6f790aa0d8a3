/* Shape/dtype inference for the math ops: unary math and bit ops, the broadcasting
 * binary ops (Pow, Mod, comparisons, logical and bitwise ops), the variadic
 * broadcasting ops (Min, Max, Mean, Sum), Where, Cast and CastLike. */
#include "ir/infer_common.h"

#include <stdio.h>
#include <string.h>

#define DTS_UNSIGNED (KL_DT(KL_U8) | KL_DT(KL_U16) | KL_DT(KL_U32) | KL_DT(KL_U64))
#define DTS_SIGNED (KL_DT(KL_I8) | KL_DT(KL_I16) | KL_DT(KL_I32) | KL_DT(KL_I64))
#define DTS_INT (DTS_SIGNED | DTS_UNSIGNED)
#define DTS_NUMERIC (DTS_INT | KL_DTS_FLOAT)
#define DTS_BOOL KL_DT(KL_BOOL)

/* What each unary op's input may be (ONNX's type constraints, all of which the
 * reference kernel computes). */
static uint32_t unary_dtypes(kl_op op) {
  switch (op) {
  case KL_OP_Abs:
  case KL_OP_Sign: return DTS_NUMERIC;
  case KL_OP_Neg: return DTS_SIGNED | KL_DTS_FLOAT;
  case KL_OP_Not: return DTS_BOOL;
  case KL_OP_BitwiseNot: return DTS_INT;
  default: return KL_DTS_FLOAT;
  }
}

/* Abs, Neg, Exp, ..., IsNaN, IsInf, Not, BitwiseNot: Y has X's shape; the tests for
 * NaN and infinity give bool, the rest keep X's dtype. */
int kl_infer_math_unary(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", unary_dtypes(c->node->op));
  if (st != KILN_OK) return st;
  c->out[0] = *c->in[0];
  if (c->node->op == KL_OP_IsNaN || c->node->op == KL_OP_IsInf) c->out[0].dtype = KL_BOOL;
  return KILN_OK;
}

/* Two inputs of one dtype from `allowed`, broadcast together; the output has dtype
 * `out_dtype`, or the inputs' when that is KL_UNDEFINED. */
static kiln_status same_dtype_binary(kl_infer_ctx *c, uint32_t allowed, kl_dtype out_dtype) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "A", allowed);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "B", allowed);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st != KILN_OK) return st;
  if (out_dtype == KL_UNDEFINED)
    out_dtype = c->in[0]->dtype != KL_UNDEFINED ? c->in[0]->dtype : c->in[1]->dtype;
  kl_type_unknown(&c->out[0], out_dtype);
  return kl_broadcast(c, 0, 1, &c->out[0]);
}

/* Equal takes bool too; the orderings only numbers. */
int kl_infer_compare(kl_infer_ctx *c) {
  uint32_t allowed = DTS_NUMERIC;
  if (c->node->op == KL_OP_Equal) allowed |= DTS_BOOL;
  return same_dtype_binary(c, allowed, KL_BOOL);
}

/* And, Or, Xor on bool tensors. */
int kl_infer_logical(kl_infer_ctx *c) { return same_dtype_binary(c, DTS_BOOL, KL_BOOL); }

/* BitwiseAnd/Or/Xor on any integer dtype; BitShift on unsigned ones, in the direction
 * its required attribute names. */
int kl_infer_bitwise(kl_infer_ctx *c) {
  if (c->node->op != KL_OP_BitShift) return same_dtype_binary(c, DTS_INT, KL_UNDEFINED);
  const char *dir = kl_attr_string(c->node, "direction", NULL);
  if (!dir)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "attribute 'direction' (a string, LEFT or "
                   "RIGHT) is required");
  if (strcmp(dir, "LEFT") != 0 && strcmp(dir, "RIGHT") != 0)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "direction is \"%s\", expected LEFT or "
                   "RIGHT", dir);
  return same_dtype_binary(c, DTS_UNSIGNED, KL_UNDEFINED);
}

/* Mod: the fmod attribute picks C's remainder (sign of the dividend, 1) or the floored
 * one (sign of the divisor, 0); ONNX defines only the first for float types. */
int kl_infer_mod(kl_infer_ctx *c) {
  int64_t fmod = kl_attr_int(c->node, "fmod", 0);
  if (fmod != 0 && fmod != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "fmod is %lld, expected 0 or 1",
                   (long long)fmod);
  kiln_status st = same_dtype_binary(c, DTS_NUMERIC, KL_UNDEFINED);
  if (st == KILN_OK && fmod == 0 && kl_dtype_is_float(c->out[0].dtype))
    st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "fmod is 0 but the inputs are %s; ONNX "
                 "requires fmod=1 for float types", kl_dtype_name(c->out[0].dtype));
  return st;
}

/* Pow: the base (float or int32/int64) gives the output dtype; the exponent may be any
 * numeric dtype. */
int kl_infer_pow(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT | KL_DTS_INDEX);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "Y", DTS_NUMERIC);
  if (st != KILN_OK) return st;
  kl_type_unknown(&c->out[0], c->in[0]->dtype);
  return kl_broadcast(c, 0, 1, &c->out[0]);
}

/* Min, Max (any numeric dtype), Mean and Sum (float types): one or more inputs of one
 * dtype, all broadcast together. */
int kl_infer_variadic(kl_infer_ctx *c) {
  kl_op op = c->node->op;
  uint32_t allowed = op == KL_OP_Min || op == KL_OP_Max ? DTS_NUMERIC : KL_DTS_FLOAT;
  int model = -1; /* the first input whose dtype is known: the others must match it */
  kiln_status st = kl_check_required(c, c->n_in);
  for (int i = 0; st == KILN_OK && i < c->n_in; i++) {
    char name[32];
    snprintf(name, sizeof name, "data_%d", i);
    if ((st = kl_check_dtype(c, i, name, allowed)) != KILN_OK) break;
    if (model >= 0) st = kl_check_same_dtype(c, model, i);
    else if (c->in[i]->dtype != KL_UNDEFINED) model = i;
  }
  if (st != KILN_OK) return st;
  kl_dtype dt = model >= 0 ? c->in[model]->dtype : KL_UNDEFINED;
  kl_type_unknown(&c->out[0], dt);
  return kl_broadcast_inputs(c, 0, c->n_in, &c->out[0]);
}

/* Where(condition, X, Y): bool condition; X and Y of one dtype, any storable one. */
int kl_infer_where(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "condition", DTS_BOOL);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "X", KL_DTS_ANY);
  if (st == KILN_OK) st = kl_check_dtype(c, 2, "Y", KL_DTS_ANY);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 1, 2);
  if (st != KILN_OK) return st;
  kl_dtype dt = c->in[1]->dtype != KL_UNDEFINED ? c->in[1]->dtype : c->in[2]->dtype;
  kl_type_unknown(&c->out[0], dt);
  return kl_broadcast_inputs(c, 0, 3, &c->out[0]);
}

/* The target of Cast: a dtype kiln stores. Strings and the float8/float4/int4/int2
 * family (ONNX numbers 17 and up) have no storage in kiln. */
static kiln_status cast_target(const kl_infer_ctx *c, kl_dtype *to) {
  const kl_attr *a = kl_node_attr(c->node, "to");
  if (!a || a->kind != KL_ATTR_INT)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "attribute 'to' (an int, the target "
                   "dtype) is required");
  if (a->i == KL_STRING)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "casting to string is not supported");
  if (a->i < 0 || a->i > 64 || !kl_dtype_valid((int)a->i))
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "to=%lld is a dtype kiln does not store "
                   "(it stores bool, integers, float16, bfloat16, float32, float64, the float8s)",
                   (long long)a->i);
  *to = (kl_dtype)a->i;
  return KILN_OK;
}

int kl_infer_cast(kl_infer_ctx *c) {
  kl_dtype to = KL_UNDEFINED;
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "input", KL_DTS_ANY);
  if (st == KILN_OK) st = cast_target(c, &to);
  if (st != KILN_OK) return st;
  c->out[0] = *c->in[0];
  c->out[0].dtype = to;
  return KILN_OK;
}

/* CastLike(input, target_type): input's shape, target_type's dtype. */
int kl_infer_castlike(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "input", KL_DTS_ANY);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "target_type", KL_DTS_ANY);
  if (st != KILN_OK) return st;
  c->out[0] = *c->in[0];
  c->out[0].dtype = c->in[1]->dtype;
  return KILN_OK;
}
