/* Shape/dtype inference for the recurrent ops RNN, GRU and LSTM, and the reading of
 * their attributes that the reference kernel (backends/cpu/ref/rnn.c) shares.
 *
 *   X [seq, batch, input] (layout 1: [batch, seq, input])
 *   W [dirs, gates * hidden, input], R [dirs, gates * hidden, hidden],
 *   B [dirs, 2 * gates * hidden], sequence_lens [batch],
 *   initial_h, initial_c [dirs, batch, hidden] (layout 1: [batch, dirs, hidden]),
 *   P [dirs, 3 * hidden] (LSTM peepholes)
 *   -> Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]),
 *      Y_h, Y_c shaped like initial_h.
 */
#include "ir/infer_more.h"

#include <ctype.h>
#include <string.h>

kiln_status kl_more_expect_dim(const kl_infer_ctx *c, int i, const char *name, int axis,
                               int64_t want, const char *why) {
  const kl_type *t = kl_infer_in(c, i);
  if (!t || t->rank <= axis || want < 0 || !kl_dim_known(t->dims[axis]) ||
      t->dims[axis].size == want)
    return KILN_OK;
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %lld at dim %d, expected %lld (%s)",
                 i, name, (long long)t->dims[axis].size, axis, (long long)want, why);
}

/* ---- attributes ---- */

typedef struct act_info {
  const char *name;
  kl_rnn_act_kind kind;
  bool takes_alpha, takes_beta;
  double alpha, beta; /* defaults: those of the ONNX op of the same name */
} act_info;

static const act_info acts[] = {
    {"Relu", KL_RNN_ACT_RELU, false, false, 0, 0},
    {"Tanh", KL_RNN_ACT_TANH, false, false, 0, 0},
    {"Sigmoid", KL_RNN_ACT_SIGMOID, false, false, 0, 0},
    {"Affine", KL_RNN_ACT_AFFINE, true, true, 1.0, 0.0},
    {"LeakyRelu", KL_RNN_ACT_LEAKY_RELU, true, false, 0.01, 0},
    {"ThresholdedRelu", KL_RNN_ACT_THRESHOLDED_RELU, true, false, 1.0, 0},
    {"ScaledTanh", KL_RNN_ACT_SCALED_TANH, true, true, 1.0, 1.0},
    {"HardSigmoid", KL_RNN_ACT_HARD_SIGMOID, true, true, 0.2, 0.5},
    {"Elu", KL_RNN_ACT_ELU, true, false, 1.0, 0},
    {"Softsign", KL_RNN_ACT_SOFTSIGN, false, false, 0, 0},
    {"Softplus", KL_RNN_ACT_SOFTPLUS, false, false, 0, 0},
};

/* Exporters disagree on the case ("tanh", "Tanh"); onnxruntime ignores it too. */
static bool same_name(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
  return *a == *b;
}

static const act_info *find_act(const char *name) {
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
    if (same_name(acts[i].name, name)) return &acts[i];
  return NULL;
}

static const char *default_act(kl_op op, int k) {
  if (op == KL_OP_RNN) return "Tanh";
  return k == 0 ? "Sigmoid" : "Tanh"; /* GRU f, g; LSTM f, g, h */
}

/* The activation_alpha and activation_beta lists are consumed in order only by the
 * activations that take such a parameter (what onnxruntime does). Without a list every
 * activation keeps its op's default; a list shorter than the activations that take the
 * parameter is refused: the spec does not say what the ones left over get (onnxruntime
 * gives them 0, the operators' defaults are others, e.g. Affine's alpha 1). */
static kiln_status read_acts(const kl_node *node, kl_rnn *r, kl_err *e) {
  const kl_attr *names = kl_node_attr(node, "activations");
  const float *alpha = NULL, *beta = NULL;
  int n_alpha = kl_attr_floats(node, "activation_alpha", &alpha);
  int n_beta = kl_attr_floats(node, "activation_beta", &beta);
  int want = r->n_acts * r->dirs, next_alpha = 0, next_beta = 0;
  if (names && names->kind != KL_ATTR_STRINGS)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "activations must be a list of strings");
  if (names && names->n != want)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "activations has %d names, expected %d (%d "
                   "per direction)", names->n, want, r->n_acts);
  int need_alpha = 0, need_beta = 0;
  for (int k = 0; k < want; k++) {
    const char *name = names ? names->strings[k] : default_act(node->op, k % r->n_acts);
    const act_info *info = find_act(name);
    if (!info)
      return kl_fail(e, KILN_ERR_UNSUPPORTED, "activation '%s' is not one of Relu, Tanh, "
                     "Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, "
                     "Elu, Softsign, Softplus", name);
    need_alpha += info->takes_alpha;
    need_beta += info->takes_beta;
  }
  if (n_alpha > 0 && n_alpha < need_alpha)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "activation_alpha has %d value%s, expected %d "
                   "(one for each of the activations that take an alpha, in order)",
                   n_alpha, n_alpha == 1 ? "" : "s", need_alpha);
  if (n_beta > 0 && n_beta < need_beta)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "activation_beta has %d value%s, expected %d "
                   "(one for each of the activations that take a beta, in order)",
                   n_beta, n_beta == 1 ? "" : "s", need_beta);
  for (int k = 0; k < want; k++) {
    const char *name = names ? names->strings[k] : default_act(node->op, k % r->n_acts);
    const act_info *info = find_act(name);
    kl_rnn_act *a = &r->act[k / r->n_acts][k % r->n_acts];
    a->kind = info->kind;
    a->alpha = info->takes_alpha && next_alpha < n_alpha ? alpha[next_alpha++] : info->alpha;
    a->beta = info->takes_beta && next_beta < n_beta ? beta[next_beta++] : info->beta;
  }
  return KILN_OK;
}

static kiln_status read_direction(const kl_node *node, kl_rnn *r, kl_err *e) {
  const char *dir = kl_attr_string(node, "direction", "forward");
  r->dirs = strcmp(dir, "bidirectional") == 0 ? 2 : 1;
  r->reverse = strcmp(dir, "reverse") == 0;
  if (r->dirs == 1 && !r->reverse && strcmp(dir, "forward") != 0)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "direction is '%s', expected forward, reverse "
                   "or bidirectional", dir);
  return KILN_OK;
}

static kiln_status read_flag(const kl_node *node, const char *name, bool *v, kl_err *e) {
  int64_t i = kl_attr_int(node, name, 0);
  if (i != 0 && i != 1)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s is %lld, expected 0 or 1", name,
                   (long long)i);
  *v = i == 1;
  return KILN_OK;
}

static kiln_status read_scalars(const kl_node *node, kl_rnn *r, kl_err *e) {
  const kl_attr *clip = kl_node_attr(node, "clip");
  r->hidden = kl_attr_int(node, "hidden_size", -1);
  if (kl_node_attr(node, "hidden_size") && r->hidden < 1)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "hidden_size is %lld, expected at least 1",
                   (long long)r->hidden);
  r->has_clip = clip != NULL;
  r->clip = kl_attr_float(node, "clip", 0);
  if (clip && !(r->clip > 0))
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "clip is %g, expected a positive threshold",
                   r->clip);
  kiln_status st = read_flag(node, "layout", &r->batch_first, e);
  if (st == KILN_OK) st = read_flag(node, "linear_before_reset", &r->linear_before_reset, e);
  if (st == KILN_OK) st = read_flag(node, "input_forget", &r->input_forget, e);
  return st;
}

kiln_status kl_rnn_init(const kl_node *node, kl_rnn *r, kl_err *e) {
  memset(r, 0, sizeof *r);
  bool lstm = node->op == KL_OP_LSTM || node->op == KL_OP_KilnLSTMGrad;
  bool gru = node->op == KL_OP_GRU || node->op == KL_OP_KilnGRUGrad;
  r->gates = lstm ? 4 : gru ? 3 : 1;
  r->n_acts = lstm ? 3 : gru ? 2 : 1;
  kiln_status st = read_direction(node, r, e);
  if (st == KILN_OK) st = read_scalars(node, r, e);
  if (st == KILN_OK) st = read_acts(node, r, e);
  return st;
}

/* ---- inference ---- */

enum { IN_X, IN_W, IN_R, IN_B, IN_LENS, IN_H0, IN_C0, IN_P };

static kiln_status check_inputs(const kl_infer_ctx *c) {
  static const char *const names[] = {"X", "W", "R", "B", "sequence_lens", "initial_h",
                                      "initial_c", "P"};
  static const int ranks[] = {3, 3, 3, 2, 1, 3, 3, 2};
  kiln_status st = kl_check_required(c, 3);
  if (st == KILN_OK) st = kl_check_dtype(c, IN_X, "X", KL_DTS_FLOAT);
  for (int i = 1; st == KILN_OK && i < c->n_in; i++)
    if (i != IN_LENS) st = kl_check_same_dtype(c, IN_X, i);
  if (st == KILN_OK) st = kl_check_dtype(c, IN_LENS, "sequence_lens", KL_DTS_INDEX);
  for (int i = 0; st == KILN_OK && i < c->n_in && i <= IN_P; i++)
    st = kl_check_rank(c, i, names[i], ranks[i], ranks[i]);
  return st;
}

/* Dim `axis` of input i, unknown when the input or its rank is not known. */
static kl_dim in_dim(const kl_infer_ctx *c, int i, int axis) {
  const kl_type *t = kl_infer_in(c, i);
  return t && t->rank > axis ? t->dims[axis] : kl_dim_unknown();
}

/* hidden_size, or R's last dim when the attribute is absent. */
static kiln_status hidden_dim(const kl_infer_ctx *c, const kl_rnn *r, kl_dim *hidden) {
  *hidden = r->hidden >= 0 ? kl_dim_of(r->hidden) : in_dim(c, IN_R, 2);
  if (kl_dim_known(*hidden)) return KILN_OK;
  kl_dim rows = in_dim(c, IN_W, 1);
  if (kl_dim_known(rows)) {
    if (rows.size % r->gates != 0)
      return kl_fail(c->e, KILN_ERR_SHAPE, "input 1 (W) has %lld rows, expected a multiple "
                     "of %d (one block per gate)", (long long)rows.size, r->gates);
    *hidden = kl_dim_of(rows.size / r->gates);
  }
  return KILN_OK;
}

/* W, R, B and P against the directions, gates, hidden size and X's input size. */
static kiln_status check_weights(const kl_infer_ctx *c, const kl_rnn *r, int64_t hidden) {
  int64_t rows = -1, bias = -1, peep = -1, input = in_dim(c, IN_X, 2).size;
  if (hidden >= 0 && (__builtin_mul_overflow(hidden, r->gates, &rows) ||
                      __builtin_mul_overflow(rows, 2, &bias) ||
                      __builtin_mul_overflow(hidden, 3, &peep)))
    return kl_fail(c->e, KILN_ERR_LIMIT, "hidden_size %lld is too large", (long long)hidden);
  const char *dirs = r->dirs == 2 ? "two directions" : "one direction";
  kiln_status st = kl_more_expect_dim(c, IN_W, "W", 0, r->dirs, dirs);
  if (st == KILN_OK) st = kl_more_expect_dim(c, IN_W, "W", 1, rows, "gates * hidden_size");
  if (st == KILN_OK) st = kl_more_expect_dim(c, IN_W, "W", 2, input, "X's input size");
  if (st == KILN_OK) st = kl_more_expect_dim(c, IN_R, "R", 0, r->dirs, dirs);
  if (st == KILN_OK) st = kl_more_expect_dim(c, IN_R, "R", 1, rows, "gates * hidden_size");
  if (st == KILN_OK) st = kl_more_expect_dim(c, IN_R, "R", 2, hidden, "hidden_size");
  if (st == KILN_OK) st = kl_more_expect_dim(c, IN_B, "B", 0, r->dirs, dirs);
  if (st == KILN_OK) st = kl_more_expect_dim(c, IN_B, "B", 1, bias, "2 * gates * hidden_size");
  if (st == KILN_OK) st = kl_more_expect_dim(c, IN_P, "P", 0, r->dirs, dirs);
  if (st == KILN_OK) st = kl_more_expect_dim(c, IN_P, "P", 1, peep, "3 * hidden_size");
  return st;
}

/* initial_h, initial_c and sequence_lens against the batch size. */
static kiln_status check_states(const kl_infer_ctx *c, const kl_rnn *r, int64_t batch,
                                int64_t hidden) {
  const char *dirs = r->dirs == 2 ? "two directions" : "one direction";
  int dir_axis = r->batch_first ? 1 : 0, batch_axis = 1 - dir_axis;
  kiln_status st = kl_more_expect_dim(c, IN_LENS, "sequence_lens", 0, batch, "X's batch size");
  for (int i = IN_H0; st == KILN_OK && i <= IN_C0; i++) {
    const char *name = i == IN_H0 ? "initial_h" : "initial_c";
    st = kl_more_expect_dim(c, i, name, dir_axis, r->dirs, dirs);
    if (st == KILN_OK) st = kl_more_expect_dim(c, i, name, batch_axis, batch, "X's batch size");
    if (st == KILN_OK) st = kl_more_expect_dim(c, i, name, 2, hidden, "hidden_size");
  }
  return st;
}

/* Every length must lie in [0, seq] (checked once the contents are known). */
static kiln_status check_lengths(const kl_infer_ctx *c, int64_t seq) {
  const kl_type *t = kl_infer_in(c, IN_LENS);
  const void *data = kl_infer_data(c, IN_LENS);
  int64_t n;
  if (!t || !data || seq < 0 || !kl_type_numel(t, &n)) return KILN_OK;
  for (int64_t i = 0; i < n; i++) {
    int64_t len = kl_load_i64(data, t->dtype, (size_t)i);
    if (len < 0 || len > seq)
      return kl_fail(c->e, KILN_ERR_SHAPE, "sequence_lens[%lld] is %lld, expected 0 to %lld "
                     "(X's sequence length)", (long long)i, (long long)len, (long long)seq);
  }
  return KILN_OK;
}

static void set_outputs(kl_infer_ctx *c, const kl_rnn *r, kl_dim seq, kl_dim batch,
                        kl_dim hidden) {
  kl_dtype dt = c->in[IN_X]->dtype;
  kl_dim dirs = kl_dim_of(r->dirs);
  for (int k = 0; k < c->n_out; k++) {
    kl_type *t = &c->out[k];
    kl_type_unknown(t, dt);
    if (k == 0 && r->batch_first) {
      kl_dim d[4] = {batch, seq, dirs, hidden};
      t->rank = 4;
      memcpy(t->dims, d, sizeof d);
    } else if (k == 0) {
      kl_dim d[4] = {seq, dirs, batch, hidden};
      t->rank = 4;
      memcpy(t->dims, d, sizeof d);
    } else {
      kl_dim d[3] = {r->batch_first ? batch : dirs, r->batch_first ? dirs : batch, hidden};
      t->rank = 3;
      memcpy(t->dims, d, sizeof d);
    }
  }
}

int kl_infer_rnn(kl_infer_ctx *c) {
  kl_rnn r;
  kiln_status st = kl_rnn_init(c->node, &r, c->e);
  if (st == KILN_OK) st = check_inputs(c);
  kl_dim hidden;
  if (st == KILN_OK) st = hidden_dim(c, &r, &hidden);
  if (st != KILN_OK) return st;
  int seq_axis = r.batch_first ? 1 : 0;
  kl_dim seq = in_dim(c, IN_X, seq_axis), batch = in_dim(c, IN_X, 1 - seq_axis);
  st = check_weights(c, &r, hidden.size);
  if (st == KILN_OK) st = check_states(c, &r, batch.size, hidden.size);
  if (st == KILN_OK) st = check_lengths(c, seq.size);
  if (st == KILN_OK) set_outputs(c, &r, seq, batch, hidden);
  return st;
}

/* ---- LSTMGrad, GRUGrad ----
 * The forward op's input slots as they are (X, W, R, B?, sequence_lens?, initial_h?,
 * and for LSTM initial_c?, P?), then the gradients of its outputs (dY?, dY_h?, and for
 * LSTM dY_c?), with the forward node's attributes -> dX, dW, dR, dB [dirs, 2 * gates *
 * hidden] (given B or not), dinitial_h (and for LSTM dinitial_c) [dirs, batch, hidden]. */

const char *kl_rnn_grad_unsupported(const kl_rnn *r) {
  static const kl_rnn_act_kind want[KL_RNN_MAX_ACTS] = {KL_RNN_ACT_SIGMOID, KL_RNN_ACT_TANH,
                                                        KL_RNN_ACT_TANH};
  if (r->batch_first) return "layout 1";
  if (r->has_clip) return "a clip";
  if (r->input_forget) return "input_forget 1";
  for (int k = 0; k < r->dirs * r->n_acts; k++)
    if (r->act[k / r->n_acts][k % r->n_acts].kind != want[k % r->n_acts])
      return r->gates == 4 ? "activations other than Sigmoid, Tanh, Tanh"
                           : "activations other than Sigmoid, Tanh";
  return NULL;
}

int kl_infer_rnn_grad(kl_infer_ctx *c) {
  kl_rnn r;
  kiln_status st = kl_rnn_init(c->node, &r, c->e);
  if (st != KILN_OK) return st;
  bool lstm = r.gates == 4;
  int n_fwd = lstm ? 8 : 6; /* the forward op's slots; the output gradients follow */
  const char *why = kl_rnn_grad_unsupported(&r);
  if (!why && lstm && kl_infer_in(c, IN_P)) why = "peepholes (P)";
  if (why)
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%s differentiates layout 0, the default "
                   "activations, no clip, no input_forget and no peepholes; this node has %s",
                   kl_op_name(c->node->op), why);
  kl_infer_ctx fwd = *c;
  if (fwd.n_in > n_fwd) fwd.n_in = n_fwd;
  kl_dim hidden;
  st = check_inputs(&fwd);
  if (st == KILN_OK) st = hidden_dim(&fwd, &r, &hidden);
  if (st != KILN_OK) return st;
  kl_dim seq = in_dim(c, IN_X, 0), batch = in_dim(c, IN_X, 1);
  st = check_weights(&fwd, &r, hidden.size);
  if (st == KILN_OK) st = check_states(&fwd, &r, batch.size, hidden.size);
  if (st == KILN_OK) st = check_lengths(&fwd, seq.size);
  const char *dirs_name = r.dirs == 2 ? "two directions" : "one direction";
  static const char *const dnames[] = {"dY", "dY_h", "dY_c"};
  for (int k = 0; st == KILN_OK && k < (lstm ? 3 : 2); k++) {
    int i = n_fwd + k;
    st = kl_check_same_dtype(c, IN_X, i);
    if (st == KILN_OK) st = kl_check_rank(c, i, dnames[k], k ? 3 : 4, k ? 3 : 4);
    if (st == KILN_OK) st = kl_more_expect_dim(c, i, dnames[k], k ? 0 : 1, r.dirs, dirs_name);
    if (st == KILN_OK) st = kl_more_expect_dim(c, i, dnames[k], k ? 1 : 2, batch.size,
                                               "X's batch size");
    if (st == KILN_OK) st = kl_more_expect_dim(c, i, dnames[k], k ? 2 : 3, hidden.size,
                                               "hidden_size");
    if (st == KILN_OK && k == 0) st = kl_more_expect_dim(c, i, "dY", 0, seq.size,
                                                         "X's sequence length");
  }
  if (st != KILN_OK) return st;
  kl_dtype dt = c->in[IN_X]->dtype;
  kl_dim dirs = kl_dim_of(r.dirs);
  kl_dim bias = kl_dim_known(hidden) ? kl_dim_of(2 * r.gates * hidden.size) : kl_dim_unknown();
  for (int k = 0; k < c->n_out; k++) {
    kl_type *t = &c->out[k];
    if (k < 3) {
      *t = *kl_infer_in(c, k); /* dX, dW, dR: X's, W's, R's type */
    } else if (k == 3) {
      kl_type_unknown(t, dt);
      t->rank = 2;
      t->dims[0] = dirs;
      t->dims[1] = bias;
    } else {
      kl_type_unknown(t, dt);
      t->rank = 3;
      t->dims[0] = dirs;
      t->dims[1] = batch;
      t->dims[2] = hidden;
    }
  }
  return KILN_OK;
}
