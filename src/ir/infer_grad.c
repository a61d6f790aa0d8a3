/* Shape/dtype inference for the gradient ops (ops.def, "gradient ops"): the ops that
 * the autograd (src/train) emits in backward graphs, and the training forms of
 * BatchNormalization and Dropout. The ops that undo a forward op's geometry (ConvGrad*,
 * the pooling grads, SliceGrad) work out the forward op's output with its own
 * inference and check that dY has that shape. "Like" inputs give only their shape.
 * Also the attribute readers of grad.h, shared with the reference kernels. */
#include "ir/grad.h"
#include "ir/infer_common.h"

#include <math.h>
#include <string.h>

/* The forward ops' inference (ops.def binds them to their op lines). */
int kl_infer_conv(kl_infer_ctx *c);
int kl_infer_pool(kl_infer_ctx *c);
int kl_infer_slice(kl_infer_ctx *c);
int kl_infer_resize(kl_infer_ctx *c);

/* ---- attribute readers (grad.h) ---- */

static const struct {
  const char *name;
  kl_unary_grad_op op;
} unary_ops[] = {
    {"Relu", KL_UG_RELU},         {"LeakyRelu", KL_UG_LEAKY_RELU},
    {"Elu", KL_UG_ELU},           {"Selu", KL_UG_SELU},
    {"Sigmoid", KL_UG_SIGMOID},   {"HardSigmoid", KL_UG_HARD_SIGMOID},
    {"HardSwish", KL_UG_HARD_SWISH}, {"Tanh", KL_UG_TANH},
    {"Softplus", KL_UG_SOFTPLUS}, {"Softsign", KL_UG_SOFTSIGN},
    {"Exp", KL_UG_EXP},           {"Log", KL_UG_LOG},
    {"Sqrt", KL_UG_SQRT},         {"Reciprocal", KL_UG_RECIPROCAL},
    {"Abs", KL_UG_ABS},           {"Erf", KL_UG_ERF},
    {"Gelu", KL_UG_GELU},         {"Sin", KL_UG_SIN},
    {"Cos", KL_UG_COS},           {"Mish", KL_UG_MISH},
    {"Silu", KL_UG_SILU},         {"Swish", KL_UG_SWISH},
    {"Clip", KL_UG_CLIP},
};
_Static_assert(sizeof unary_ops / sizeof unary_ops[0] == KL_UG_COUNT,
               "UnaryGrad's name table and kl_unary_grad_op disagree");

/* The forward op's defaults (ONNX's, and Clip's open bounds). */
static void unary_defaults(kl_unary_grad *u) {
  u->alpha = 1.0;
  u->beta = 0.0;
  u->gamma = 1.0;
  switch (u->op) {
  case KL_UG_LEAKY_RELU: u->alpha = 0.01f; break;
  case KL_UG_SELU:
    u->alpha = 1.67326319217681884765625;
    u->gamma = 1.05070102214813232421875;
    break;
  case KL_UG_HARD_SIGMOID:
    u->alpha = 0.2f;
    u->beta = 0.5f;
    break;
  case KL_UG_CLIP:
    u->alpha = -INFINITY;
    u->beta = INFINITY;
    break;
  default: break;
  }
}

kiln_status kl_unary_grad_read(const kl_node *n, kl_unary_grad *u, kl_err *e) {
  memset(u, 0, sizeof *u);
  const char *name = kl_attr_string(n, "op", NULL);
  if (!name) return kl_fail(e, KILN_ERR_INVALID_MODEL, "attribute 'op' (the forward op) is required");
  int k = 0;
  while (k < KL_UG_COUNT && strcmp(unary_ops[k].name, name) != 0) k++;
  if (k == KL_UG_COUNT)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "op \"%s\" has no gradient rule (UnaryGrad knows "
                   "Relu, LeakyRelu, Elu, Selu, Sigmoid, HardSigmoid, HardSwish, Tanh, "
                   "Softplus, Softsign, Exp, Log, Sqrt, Reciprocal, Abs, Erf, Gelu, Sin, Cos, "
                   "Mish, Silu, Swish, Clip)", name);
  u->op = unary_ops[k].op;
  unary_defaults(u);
  u->alpha = kl_node_attr(n, "alpha") ? kl_attr_float(n, "alpha", 0) : u->alpha;
  u->beta = kl_node_attr(n, "beta") ? kl_attr_float(n, "beta", 0) : u->beta;
  u->gamma = kl_node_attr(n, "gamma") ? kl_attr_float(n, "gamma", 0) : u->gamma;
  const char *approx = kl_attr_string(n, "approximate", "none");
  if (strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "approximate is \"%s\", expected \"none\" or "
                   "\"tanh\"", approx);
  u->tanh_gelu = strcmp(approx, "tanh") == 0;
  return KILN_OK;
}

bool kl_unary_grad_uses_y(kl_unary_grad_op op) {
  return op == KL_UG_SIGMOID || op == KL_UG_TANH || op == KL_UG_EXP;
}

kiln_status kl_loss_attrs_read(const kl_node *n, kl_loss_attrs *a, kl_err *e) {
  static const char *const kinds[] = {"cross_entropy", "nll", "mse", "l1", "smooth_l1",
                                      "bce_logits"};
  static const char *const reductions[] = {"mean", "sum", "none"};
  const char *kind = kl_attr_string(n, "kind", NULL);
  if (!kind) return kl_fail(e, KILN_ERR_INVALID_MODEL, "attribute 'kind' is required");
  int k = 0;
  while (k < 6 && strcmp(kinds[k], kind) != 0) k++;
  if (k == 6)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "kind is \"%s\", expected cross_entropy, nll, "
                   "mse, l1, smooth_l1 or bce_logits", kind);
  const char *red = kl_attr_string(n, "reduction", "mean");
  int r = 0;
  while (r < 3 && strcmp(reductions[r], red) != 0) r++;
  if (r == 3)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "reduction is \"%s\", expected mean, sum or "
                   "none", red);
  a->kind = (kl_loss_kind)k;
  a->reduction = (kl_loss_reduction)r;
  a->ignore_index = kl_attr_int(n, "ignore_index", -100);
  a->label_smoothing = kl_attr_float(n, "label_smoothing", 0.0f);
  a->beta = kl_attr_float(n, "beta", 1.0f);
  if (!(a->label_smoothing >= 0 && a->label_smoothing <= 1))
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "label_smoothing is %g, expected a value in "
                   "[0, 1]", a->label_smoothing);
  if (a->label_smoothing != 0 && a->kind != KL_LOSS_CROSS_ENTROPY)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "label_smoothing is %g, but only "
                   "cross_entropy takes it (kind is %s)", a->label_smoothing, kind);
  if (!(a->beta >= 0))
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "beta is %g, expected at least 0", a->beta);
  return KILN_OK;
}

static uint64_t splitmix64(uint64_t z) {
  z += UINT64_C(0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

bool kl_dropout_keep(int64_t seed, int64_t i, double ratio) {
  /* the stream of seed, at position i; the top 53 bits as a uniform in [0, 1) */
  uint64_t r = splitmix64(splitmix64((uint64_t)seed) + (uint64_t)i * UINT64_C(0x9e3779b97f4a7c15));
  return (double)(r >> 11) * 0x1.0p-53 >= ratio;
}

/* ---- shape helpers ---- */

/* "[2,batch,?]": t's shape, into buf. */
static const char *shape_str(const kl_infer_ctx *c, const kl_type *t, char *buf, size_t len) {
  kl_type_format(c->g, t, buf, len);
  char *open = strchr(buf, '[');
  return open ? open : buf;
}

/* Whether a and b can be the same shape (known ranks equal, known dims equal). */
static bool shapes_agree(const kl_type *a, const kl_type *b) {
  if (a->rank < 0 || b->rank < 0) return true;
  if (a->rank != b->rank) return false;
  for (int k = 0; k < a->rank; k++) {
    bool ok;
    kl_dim_merge(a->dims[k], b->dims[k], &ok);
    if (!ok) return false;
  }
  return true;
}

/* Input j (name) must have shape `want`, which `what` describes. */
static kiln_status check_shape_is(const kl_infer_ctx *c, int j, const char *name,
                                  const kl_type *want, const char *what) {
  const kl_type *t = kl_infer_in(c, j);
  if (!t || shapes_agree(t, want)) return KILN_OK;
  char a[256], b[256];
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has shape %s, expected %s (%s)", j,
                 name, shape_str(c, t, a, sizeof a), shape_str(c, want, b, sizeof b), what);
}

/* Input j (nj) must have the shape of input i (ni). */
static kiln_status check_same_shape(const kl_infer_ctx *c, int i, const char *ni, int j,
                                    const char *nj) {
  const kl_type *a = kl_infer_in(c, i);
  if (!a) return KILN_OK;
  char what[64];
  snprintf(what, sizeof what, "the shape of input %d (%s)", i, ni);
  return check_shape_is(c, j, nj, a, what);
}

/* t with the known dims of u filled in where t's are not known (shapes that agree). */
static kl_type merged(const kl_type *t, const kl_type *u) {
  kl_type m = t->rank < 0 ? *u : *t;
  m.dtype = t->dtype;
  if (t->rank < 0) return m;
  for (int k = 0; u->rank == m.rank && k < m.rank; k++) {
    bool ok;
    m.dims[k] = kl_dim_merge(t->dims[k], u->dims[k], &ok);
  }
  return m;
}

/* The shape of input i with the dtype of input j: a gradient shaped like its input. */
static kl_type like(const kl_infer_ctx *c, int i, int j) {
  kl_type t = *c->in[i];
  t.dtype = c->in[j]->dtype;
  return t;
}

/* Runs a forward op's inference on inputs in[0..n-1] (with contents data, or none),
 * giving its output 0 in *out; a failure's message says which forward op. */
static kiln_status forward_type(const kl_infer_ctx *c, kl_infer_fn fn, int n,
                                const kl_type *const *in, const void *const *data,
                                kl_type *out, const char *what) {
  static const void *const none[6] = {NULL};
  kl_infer_ctx f = *c;
  f.n_in = n;
  f.in = in;
  f.data = data ? data : none;
  f.n_out = 1;
  f.out = out;
  kiln_status st = (kiln_status)fn(&f);
  if (st != KILN_OK) kl_err_prefix(c->e, "%s", what);
  return st;
}

/* Input i, when present, is a 0-D or one-element float scalar. */
static kiln_status check_scalar(const kl_infer_ctx *c, int i, const char *name,
                                uint32_t dtypes) {
  kiln_status st = kl_check_dtype(c, i, name, dtypes);
  const kl_type *t = kl_infer_in(c, i);
  if (st != KILN_OK || !t || t->rank < 0) return st;
  if (t->rank == 0 || (t->rank == 1 && (!kl_dim_known(t->dims[0]) || t->dims[0].size == 1)))
    return KILN_OK;
  char s[256];
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has shape %s, expected a scalar", i,
                 name, shape_str(c, t, s, sizeof s));
}

/* ---- SumTo, UnaryGrad, SoftmaxGrad, ReduceGrad ---- */

int kl_infer_sum_to(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "dY", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_unidirectional(c, 1, "Like", c->in[0]);
  if (st == KILN_OK) c->out[0] = like(c, 1, 0);
  return st;
}

int kl_infer_unary_grad(kl_infer_ctx *c) {
  kl_unary_grad u;
  kiln_status st = kl_unary_grad_read(c->node, &u, c->e);
  if (st == KILN_OK) st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "dY", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = check_same_shape(c, 0, "dY", 1, "X");
  if (st == KILN_OK) st = check_same_shape(c, 0, "dY", 2, "Y");
  if (st == KILN_OK) c->out[0] = merged(c->in[0], c->in[1]);
  return st;
}

int kl_infer_softmax_grad(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "dY", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st == KILN_OK) st = check_same_shape(c, 0, "dY", 1, "Y");
  if (st != KILN_OK) return st;
  int64_t log_form = kl_attr_int(c->node, "log", 0);
  if (log_form != 0 && log_form != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "log is %lld, expected 0 or 1",
                   (long long)log_form);
  c->out[0] = merged(c->in[0], c->in[1]);
  int axis;
  if (c->out[0].rank >= 0)
    st = kl_norm_axis(c, kl_attr_int(c->node, "axis", -1), c->out[0].rank, "axis", &axis);
  return st;
}

/* ReduceGrad's reduced axes of a rank-`rank` input, as a mask; none listed or absent
 * is every axis, as the forward reductions' default. */
static kiln_status reduced_axes(const kl_infer_ctx *c, int rank, bool *mask) {
  const int64_t *axes;
  int n = kl_attr_ints(c->node, "axes", &axes);
  for (int d = 0; d < rank; d++) mask[d] = n <= 0;
  for (int k = 0; k < n; k++) {
    int d;
    kiln_status st = kl_norm_axis(c, axes[k], rank, "axes", &d);
    if (st != KILN_OK) return st;
    if (mask[d])
      return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "axes names axis %d twice", d);
    mask[d] = true;
  }
  return KILN_OK;
}

int kl_infer_reduce_grad(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "dY", KL_DTS_FLOAT);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[1];
  c->out[0] = like(c, 1, 0);
  if (x->rank < 0) return KILN_OK;
  bool mask[KL_MAX_RANK];
  st = reduced_axes(c, x->rank, mask);
  if (st != KILN_OK) return st;
  bool keep = kl_attr_int(c->node, "keepdims", 1) != 0;
  kl_type want = *x;
  want.rank = 0;
  for (int d = 0; d < x->rank; d++)
    if (!mask[d] || keep) want.dims[want.rank++] = mask[d] ? kl_dim_of(1) : x->dims[d];
  return check_shape_is(c, 0, "dY", &want, "XLike's shape reduced over axes");
}

/* ---- Loss and LossGrad ---- */

static kiln_status loss_class_shapes(const kl_infer_ctx *c, int first, const kl_type *x) {
  const kl_type *t = c->in[first + 1], *w = kl_infer_in(c, first + 2);
  kiln_status st = kl_check_rank(c, first, "Input", 1, KL_MAX_RANK);
  if (st != KILN_OK) return st;
  if (t->dtype != KL_UNDEFINED && t->dtype != KL_I64)
    return kl_fail(c->e, KILN_ERR_DTYPE, "input %d (Target) is %s, expected int64 class "
                   "indexes", first + 1, kl_dtype_name(t->dtype));
  if (x->rank >= 1) {
    kl_type want = *x; /* [N, C, d1, ...] -> [N, d1, ...]; [C] -> [] */
    want.rank = x->rank - 1;
    for (int d = 1; d < want.rank; d++) want.dims[d] = x->dims[d + 1];
    st = check_shape_is(c, first + 1, "Target", &want, "Input's shape without its class dim");
  }
  if (st == KILN_OK) st = kl_check_rank(c, first + 2, "Weight", 1, 1);
  if (st == KILN_OK && w && x->rank >= 1) {
    kl_type want = {.dtype = w->dtype, .rank = 1, .dims = {x->dims[x->rank == 1 ? 0 : 1]}};
    st = check_shape_is(c, first + 2, "Weight", &want, "one weight per class of Input");
  }
  return st;
}

static kiln_status loss_value_shapes(const kl_infer_ctx *c, int first, const kl_loss_attrs *a) {
  kiln_status st = kl_check_same_dtype(c, first, first + 1);
  if (st == KILN_OK) st = check_same_shape(c, first, "Input", first + 1, "Target");
  if (st != KILN_OK) return st;
  if (a->kind == KL_LOSS_BCE_LOGITS) return kl_check_unidirectional(c, first + 2, "Weight", c->in[first]);
  if (kl_infer_in(c, first + 2))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "input %d (Weight) is given, but kind "
                   "%s takes none (only cross_entropy, nll and bce_logits do)", first + 2,
                   a->kind == KL_LOSS_MSE ? "mse" : a->kind == KL_LOSS_L1 ? "l1" : "smooth_l1");
  return KILN_OK;
}

/* The loss's type for Input, Target, Weight? at inputs first.. (Loss: 0, LossGrad: 1). */
static kiln_status loss_type(const kl_infer_ctx *c, int first, kl_type *out) {
  kl_loss_attrs a;
  kiln_status st = kl_loss_attrs_read(c->node, &a, c->e);
  if (st == KILN_OK) st = kl_check_required(c, first + 2);
  if (st == KILN_OK) st = kl_check_dtype(c, first, "Input", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, first, first + 2);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[first];
  st = kl_loss_is_class(a.kind) ? loss_class_shapes(c, first, x) : loss_value_shapes(c, first, &a);
  if (st != KILN_OK) return st;
  if (a.reduction != KL_RED_NONE) {
    kl_type_unknown_dims(out, x->dtype, 0);
    return KILN_OK;
  }
  *out = kl_loss_is_class(a.kind) ? *c->in[first + 1] : merged(x, c->in[first + 1]);
  out->dtype = x->dtype;
  return KILN_OK;
}

int kl_infer_train_loss(kl_infer_ctx *c) { return loss_type(c, 0, &c->out[0]); }

int kl_infer_train_loss_grad(kl_infer_ctx *c) {
  kl_type l;
  kiln_status st = loss_type(c, 1, &l);
  if (st == KILN_OK) st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 1, 0);
  if (st == KILN_OK) st = check_shape_is(c, 0, "dLoss", &l, "the loss's shape");
  if (st == KILN_OK) c->out[0] = *c->in[1];
  return st;
}

/* ---- ConvGradX, ConvGradW, MaxPoolGrad, AveragePoolGrad ---- */

/* dY must be the output of the forward op `fn` on in[0..n-1]. */
static kiln_status check_forward(const kl_infer_ctx *c, int dy, kl_infer_fn fn, int n,
                                 const kl_type *const *in, const void *const *data,
                                 const char *what) {
  kl_type y;
  kiln_status st = forward_type(c, fn, n, in, data, &y, what);
  if (st != KILN_OK) return st;
  return check_shape_is(c, dy, "dY", &y, "the forward op's output");
}

int kl_infer_conv_grad_x(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "dY", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st != KILN_OK) return st;
  kl_type x = like(c, 2, 0);
  const kl_type *fw[2] = {&x, c->in[1]};
  st = check_forward(c, 0, kl_infer_conv, 2, fw, NULL, "the forward Conv (X = input 2, "
                     "W = input 1)");
  if (st == KILN_OK) c->out[0] = x;
  return st;
}

int kl_infer_conv_grad_w(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st != KILN_OK) return st;
  kl_type w = like(c, 2, 1);
  const kl_type *fw[2] = {c->in[0], &w};
  st = check_forward(c, 1, kl_infer_conv, 2, fw, NULL, "the forward Conv (X = input 0, "
                     "W = input 2)");
  if (st == KILN_OK) c->out[0] = w;
  return st;
}

int kl_infer_pool_grad(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "dY", KL_DTS_FLOAT);
  if (st == KILN_OK && c->node->op == KL_OP_KilnMaxPoolGrad) st = kl_check_same_dtype(c, 0, 1);
  if (st != KILN_OK) return st;
  kl_type x = like(c, 1, 0);
  const kl_type *fw[1] = {&x};
  st = check_forward(c, 0, kl_infer_pool, 1, fw, NULL, "the forward pooling (X = input 1)");
  if (st == KILN_OK) c->out[0] = x;
  return st;
}

/* ---- BatchNormTrain, BatchNormGrad, LayerNormGrad ---- */

/* Inputs from..to (names) are [C] for the channels of X (input x). */
static kiln_status check_channels(const kl_infer_ctx *c, int x, int from, int to,
                                  const char *const *names) {
  const kl_type *t = c->in[x];
  kl_type want = {.dtype = t->dtype, .rank = 1, .dims = {t->rank >= 2 ? t->dims[1] : kl_dim_unknown()}};
  kiln_status st = KILN_OK;
  for (int i = from; st == KILN_OK && i <= to; i++) {
    st = kl_check_dtype(c, i, names[i], KL_DTS_FLOAT);
    if (st == KILN_OK) st = kl_check_rank(c, i, names[i], 1, 1);
    if (st == KILN_OK) st = check_shape_is(c, i, names[i], &want, "one value per channel, dim 1 of X");
  }
  return st;
}

int kl_infer_batchnorm_train(kl_infer_ctx *c) {
  static const char *const names[] = {"X", "scale", "B", "running_mean", "running_var"};
  kiln_status st = kl_check_required(c, 5);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "X", 2, KL_MAX_RANK);
  if (st == KILN_OK) st = check_channels(c, 0, 1, 4, names);
  if (st != KILN_OK) return st;
  c->out[0] = *c->in[0];
  for (int k = 1; k < c->n_out; k++) c->out[k] = *c->in[k + 2];
  return KILN_OK;
}

int kl_infer_batchnorm_grad(kl_infer_ctx *c) {
  static const char *const names[] = {"dY", "X", "scale"};
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "dY", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st == KILN_OK) st = kl_check_rank(c, 1, "X", 2, KL_MAX_RANK);
  if (st == KILN_OK) st = check_same_shape(c, 1, "X", 0, "dY");
  if (st == KILN_OK) st = check_channels(c, 1, 2, 2, names);
  if (st != KILN_OK) return st;
  c->out[0] = merged(c->in[1], c->in[0]);
  for (int k = 1; k < c->n_out; k++) c->out[k] = like(c, 2, 0);
  return KILN_OK;
}

int kl_infer_layernorm_grad(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "dY", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 2, "scale", KL_DTS_FLOAT);
  if (st == KILN_OK) st = check_same_shape(c, 1, "X", 0, "dY");
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[1];
  if (x->rank >= 0) {
    int axis;
    st = kl_norm_axis(c, kl_attr_int(c->node, "axis", -1), x->rank, "axis", &axis);
    if (st != KILN_OK) return st; /* axis is unset: out of range */
    kl_type norm = *x; /* the normalized dims, axis..rank-1 */
    norm.rank = x->rank - axis;
    memmove(norm.dims, x->dims + axis, sizeof(kl_dim) * (size_t)norm.rank);
    st = kl_check_unidirectional(c, 2, "scale", &norm);
    if (st != KILN_OK) return st;
  }
  c->out[0] = merged(x, c->in[0]);
  for (int k = 1; k < c->n_out; k++) c->out[k] = like(c, 2, 0);
  return KILN_OK;
}

/* ---- GatherGrad, SliceGrad ---- */

int kl_infer_gather_grad(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "dY", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "Indices", KL_DTS_INDEX);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[2], *ind = c->in[1];
  c->out[0] = like(c, 2, 0);
  if (x->rank < 0) return KILN_OK;
  int axis;
  st = kl_norm_axis(c, kl_attr_int(c->node, "axis", 0), x->rank, "axis", &axis);
  if (st != KILN_OK || ind->rank < 0) return st;
  st = kl_check_out_rank(c, (int64_t)x->rank - 1 + ind->rank);
  if (st != KILN_OK) return st;
  kl_type want = {.dtype = c->in[0]->dtype}; /* X[:axis] + Indices + X[axis+1:] */
  for (int d = 0; d < axis; d++) want.dims[want.rank++] = x->dims[d];
  for (int d = 0; d < ind->rank; d++) want.dims[want.rank++] = ind->dims[d];
  for (int d = axis + 1; d < x->rank; d++) want.dims[want.rank++] = x->dims[d];
  return check_shape_is(c, 0, "dY", &want, "Gather's output for XLike and Indices");
}

/* (dY, XLike, the forward op's inputs 1.. as inputs 2..) -> dX of XLike's shape and dY's
 * dtype, dY checked against the forward op fn's output on those inputs. */
static kiln_status grad_of_forward(kl_infer_ctx *c, kl_infer_fn fn, const char *what) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "dY", KL_DTS_FLOAT);
  if (st != KILN_OK) return st;
  kl_type x = like(c, 1, 0);
  const kl_type *fw[5] = {&x, NULL, NULL, NULL, NULL};
  const void *data[5] = {NULL};
  for (int i = 2; i < c->n_in && i < 6; i++) {
    fw[i - 1] = kl_infer_in(c, i);
    data[i - 1] = kl_infer_data(c, i);
  }
  st = check_forward(c, 0, fn, c->n_in - 1, fw, data, what);
  if (st == KILN_OK) c->out[0] = x;
  return st;
}

int kl_infer_slice_grad(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 4);
  return st != KILN_OK ? st : grad_of_forward(c, kl_infer_slice, "the forward Slice (X = "
                                              "input 1, starts.. = inputs 2..)");
}

int kl_infer_resize_grad(kl_infer_ctx *c) {
  return grad_of_forward(c, kl_infer_resize, "the forward Resize (X = input 1, roi, scales, "
                         "sizes = inputs 2..4)");
}

/* ---- DropoutTrain, DropoutGrad ---- */

/* ratio (input i), when present: a float scalar in [0, 1) when known. */
static kiln_status check_ratio(const kl_infer_ctx *c, int i) {
  kiln_status st = check_scalar(c, i, "ratio", KL_DTS_FLOAT);
  double r;
  if (st != KILN_OK || !kl_read_scalar(c, i, &r) || (r >= 0 && r < 1)) return st;
  return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input %d (ratio) is %g, expected a value "
                 "in [0, 1)", i, r);
}

int kl_infer_dropout_train(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK && !kl_infer_in(c, 2))
    st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "input 2 (seed) is required but absent");
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", KL_DTS_FLOAT);
  if (st == KILN_OK) st = check_ratio(c, 1);
  if (st == KILN_OK) st = check_scalar(c, 2, "seed", KL_DTS_INDEX);
  if (st != KILN_OK) return st;
  c->out[0] = *c->in[0];
  if (c->n_out > 1) {
    c->out[1] = *c->in[0];
    c->out[1].dtype = KL_BOOL;
  }
  return KILN_OK;
}

int kl_infer_dropout_grad(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "dY", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 1, "mask", KL_DT(KL_BOOL));
  if (st == KILN_OK) st = check_same_shape(c, 0, "dY", 1, "mask");
  if (st == KILN_OK) st = check_ratio(c, 2);
  if (st == KILN_OK) c->out[0] = merged(c->in[0], c->in[1]);
  return st;
}
