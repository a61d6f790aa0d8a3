/* Reference kernels: RNN, GRU and LSTM (shapes in src/ir/infer_rnn.c).
 *
 * One batch row of one direction at a time, one time step after another, in double.
 * With x the input at step t, h the previous hidden state, c the previous cell,
 * and (W x)_g = W_g x + Wb_g, (R h)_g = R_g h + Rb_g for gate g:
 *   RNN:  h' = f((W x)_i + (R h)_i)
 *   GRU:  z = f((W x)_z + (R h)_z), r = f((W x)_r + (R h)_r),
 *         n = g((W x)_h + (R (r * h))_h)        (linear_before_reset 0)
 *         n = g((W x)_h + r * (R h)_h)          (linear_before_reset 1)
 *         h' = (1 - z) * n + z * h
 *   LSTM: i = f((W x)_i + (R h)_i + P_i * c), f_ = f((W x)_f + (R h)_f + P_f * c)
 *         (f_ = 1 - i with input_forget), c' = f_ * c + i * g((W x)_c + (R h)_c),
 *         o = f((W x)_o + (R h)_o + P_o * c'), h' = o * h(c')
 * clip bounds the input of every gate's activation to [-clip, clip] (not h's input,
 * the cell: onnxruntime reads the spec so, and PyTorch has no clip). A batch row with
 * sequence_lens[b] = L runs steps 0..L-1 (the reverse direction L-1..0); Y is zero at
 * its steps L.. and Y_h, Y_c hold the state after its last step.
 */
#include "backends/cpu/ref/ref.h"
#include "ir/infer_more.h"

#include <math.h>
#include <stdlib.h>

enum { IN_X, IN_W, IN_R, IN_B, IN_LENS, IN_H0, IN_C0, IN_P };
enum { GATE_I = 0, GATE_O = 1, GATE_F = 2, GATE_C = 3 }; /* LSTM's order in W */
enum { GATE_Z = 0, GATE_RESET = 1, GATE_H = 2 };         /* GRU's */

typedef struct rnn_args {
  kl_rnn r;
  kl_op op;
  const kl_tensor *in[8];
  kl_tensor *y, *yh, *yc;
  int64_t seq, batch, input, hidden;
  /* scratch: x [input], h and c [hidden], pre-activations [gates * hidden], r * h */
  double *x, *h, *c, *pre, *rh;
} rnn_args;

static double activate(const kl_rnn_act *a, double v) {
  switch (a->kind) {
  case KL_RNN_ACT_RELU: return v > 0 ? v : 0;
  case KL_RNN_ACT_TANH: return tanh(v);
  case KL_RNN_ACT_SIGMOID: return 1 / (1 + exp(-v));
  case KL_RNN_ACT_AFFINE: return a->alpha * v + a->beta;
  case KL_RNN_ACT_LEAKY_RELU: return v >= 0 ? v : a->alpha * v;
  case KL_RNN_ACT_THRESHOLDED_RELU: return v > a->alpha ? v : 0;
  case KL_RNN_ACT_SCALED_TANH: return a->alpha * tanh(a->beta * v);
  case KL_RNN_ACT_HARD_SIGMOID: return fmin(fmax(a->alpha * v + a->beta, 0), 1);
  case KL_RNN_ACT_ELU: return v >= 0 ? v : a->alpha * (exp(v) - 1);
  case KL_RNN_ACT_SOFTSIGN: return v / (1 + fabs(v));
  case KL_RNN_ACT_SOFTPLUS: return v > 30 ? v : log1p(exp(v));
  }
  return v;
}

/* Activation k of direction d applied to v after clipping. */
static double act(const rnn_args *a, int d, int k, double v) {
  if (a->r.has_clip) v = fmin(fmax(v, -a->r.clip), a->r.clip);
  return activate(&a->r.act[d][k], v);
}

/* sum_k m[row, k] * v[k] for a [rows, n] block of tensor m starting at row 0. */
static double dot_row(const kl_tensor *m, int64_t row, int64_t n, const double *v) {
  double acc = 0;
  for (int64_t k = 0; k < n; k++) acc += kl_ref_load(m->data, m->dtype, row * n + k) * v[k];
  return acc;
}

static double bias(const rnn_args *a, int d, int64_t row, bool recurrent) {
  const kl_tensor *b = a->in[IN_B];
  if (!b) return 0;
  int64_t gh = a->r.gates * a->hidden;
  return kl_ref_load(b->data, b->dtype, d * 2 * gh + (recurrent ? gh : 0) + row);
}

/* (W x)_g[j] of direction d */
static double wx(const rnn_args *a, int d, int g, int64_t j) {
  int64_t row = g * a->hidden + j;
  return dot_row(a->in[IN_W], d * a->r.gates * a->hidden + row, a->input, a->x) +
         bias(a, d, row, false);
}

/* (R v)_g[j] of direction d */
static double rv(const rnn_args *a, int d, int g, int64_t j, const double *v) {
  int64_t row = g * a->hidden + j;
  return dot_row(a->in[IN_R], d * a->r.gates * a->hidden + row, a->hidden, v) +
         bias(a, d, row, true);
}

static double peephole(const rnn_args *a, int d, int k, int64_t j) {
  const kl_tensor *p = a->in[IN_P];
  return p ? kl_ref_load(p->data, p->dtype, (d * 3 + k) * a->hidden + j) : 0;
}

static void step_rnn(rnn_args *a, int d) {
  for (int64_t j = 0; j < a->hidden; j++) a->pre[j] = wx(a, d, 0, j) + rv(a, d, 0, j, a->h);
  for (int64_t j = 0; j < a->hidden; j++) a->h[j] = act(a, d, 0, a->pre[j]);
}

static void step_gru(rnn_args *a, int d) {
  int64_t n = a->hidden;
  double *z = a->pre, *reset = a->pre + n, *cand = a->pre + 2 * n;
  for (int64_t j = 0; j < n; j++) {
    z[j] = act(a, d, 0, wx(a, d, GATE_Z, j) + rv(a, d, GATE_Z, j, a->h));
    reset[j] = act(a, d, 0, wx(a, d, GATE_RESET, j) + rv(a, d, GATE_RESET, j, a->h));
    a->rh[j] = reset[j] * a->h[j];
  }
  for (int64_t j = 0; j < n; j++) {
    double rec = a->r.linear_before_reset ? reset[j] * rv(a, d, GATE_H, j, a->h)
                                          : rv(a, d, GATE_H, j, a->rh);
    cand[j] = act(a, d, 1, wx(a, d, GATE_H, j) + rec);
  }
  for (int64_t j = 0; j < n; j++) a->h[j] = (1 - z[j]) * cand[j] + z[j] * a->h[j];
}

static void step_lstm(rnn_args *a, int d) {
  int64_t n = a->hidden;
  double *cell = a->pre, *out_pre = a->pre + n; /* the new cell: c is read until the end */
  for (int64_t j = 0; j < n; j++) {
    double i = act(a, d, 0, wx(a, d, GATE_I, j) + rv(a, d, GATE_I, j, a->h) +
                                peephole(a, d, 0, j) * a->c[j]);
    double f = a->r.input_forget
                   ? 1 - i
                   : act(a, d, 0, wx(a, d, GATE_F, j) + rv(a, d, GATE_F, j, a->h) +
                                      peephole(a, d, 2, j) * a->c[j]);
    double cand = act(a, d, 1, wx(a, d, GATE_C, j) + rv(a, d, GATE_C, j, a->h));
    cell[j] = f * a->c[j] + i * cand;
    out_pre[j] = wx(a, d, GATE_O, j) + rv(a, d, GATE_O, j, a->h);
  }
  for (int64_t j = 0; j < n; j++) {
    a->c[j] = cell[j];
    double o = act(a, d, 0, out_pre[j] + peephole(a, d, 1, j) * a->c[j]);
    a->h[j] = o * activate(&a->r.act[d][2], a->c[j]); /* a cell, not a gate: no clip */
  }
}

/* Offset of (d, b, 0) in a [dirs, batch, hidden] state (layout 1: [batch, dirs, hidden]). */
static int64_t state_at(const rnn_args *a, int d, int64_t b) {
  return (a->r.batch_first ? b * a->r.dirs + d : d * a->batch + b) * a->hidden;
}

/* Offset of (t, d, b, 0) in Y. */
static int64_t y_at(const rnn_args *a, int64_t t, int d, int64_t b) {
  if (a->r.batch_first) return ((b * a->seq + t) * a->r.dirs + d) * a->hidden;
  return ((t * a->r.dirs + d) * a->batch + b) * a->hidden;
}

static void load_state(const kl_tensor *t, int64_t at, int64_t n, double *v) {
  for (int64_t j = 0; j < n; j++) v[j] = t ? kl_ref_load(t->data, t->dtype, at + j) : 0;
}

static void store_state(kl_tensor *t, int64_t at, int64_t n, const double *v) {
  for (int64_t j = 0; j < n; j++) kl_ref_store(t->data, t->dtype, at + j, v ? v[j] : 0);
}

static void load_x(rnn_args *a, int64_t t, int64_t b) {
  const kl_tensor *x = a->in[IN_X];
  int64_t row = a->r.batch_first ? b * a->seq + t : t * a->batch + b;
  for (int64_t i = 0; i < a->input; i++)
    a->x[i] = kl_ref_load(x->data, x->dtype, row * a->input + i);
}

static int64_t seq_len(const rnn_args *a, int64_t b) {
  const kl_tensor *lens = a->in[IN_LENS];
  return lens ? kl_ref_load_int(lens->data, lens->dtype, b) : a->seq;
}

static void run_row(rnn_args *a, int d, int64_t b) {
  bool backward = d == 1 || a->r.reverse;
  int64_t len = seq_len(a, b), at = state_at(a, d, b);
  load_state(a->in[IN_H0], at, a->hidden, a->h);
  load_state(a->in[IN_C0], at, a->hidden, a->c);
  for (int64_t s = 0; s < len; s++) {
    int64_t t = backward ? len - 1 - s : s;
    load_x(a, t, b);
    if (a->op == KL_OP_LSTM) step_lstm(a, d);
    else if (a->op == KL_OP_GRU) step_gru(a, d);
    else step_rnn(a, d);
    if (a->y) store_state(a->y, y_at(a, t, d, b), a->hidden, a->h);
  }
  for (int64_t t = len; a->y && t < a->seq; t++)
    store_state(a->y, y_at(a, t, d, b), a->hidden, NULL);
  if (a->yh) store_state(a->yh, at, a->hidden, a->h);
  if (a->yc) store_state(a->yc, at, a->hidden, a->c);
}

static kiln_status alloc_scratch(rnn_args *a, kl_err *e) {
  /* input + (4 + gates) * hidden doubles: x, h, c, r * h, pre-activations */
  size_t n, per_hidden = (size_t)(4 + a->r.gates), bytes;
  if (kl_mul_overflow_size(per_hidden, (size_t)a->hidden, &n) ||
      kl_add_overflow_size(n, (size_t)a->input, &n) ||
      kl_mul_overflow_size(n, sizeof(double), &bytes) || !(a->x = malloc(bytes ? bytes : 1)))
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "no memory for %s's scratch",
                   kl_op_name(a->op));
  a->h = a->x + a->input;
  a->c = a->h + a->hidden;
  a->rh = a->c + a->hidden;
  a->pre = a->rh + a->hidden;
  return KILN_OK;
}

int kl_ref_rnn(kl_kernel_ctx *c) {
  rnn_args a = {.op = c->node->op};
  kiln_status st = kl_rnn_init(c->node, &a.r, c->e);
  if (st != KILN_OK) return st;
  for (int i = 0; i < 8; i++) a.in[i] = i < c->n_in ? c->in[i] : NULL;
  a.y = c->n_out > 0 ? c->out[0] : NULL;
  a.yh = c->n_out > 1 ? c->out[1] : NULL;
  a.yc = c->n_out > 2 ? c->out[2] : NULL;
  const kl_tensor *x = a.in[IN_X], *r = a.in[IN_R];
  a.seq = x->dims[a.r.batch_first ? 1 : 0];
  a.batch = x->dims[a.r.batch_first ? 0 : 1];
  a.input = x->dims[2];
  a.hidden = r->dims[2];
  if ((st = alloc_scratch(&a, c->e)) != KILN_OK) return st;
  for (int d = 0; d < a.r.dirs; d++)
    for (int64_t b = 0; b < a.batch; b++) run_row(&a, d, b);
  free(a.x);
  return KILN_OK;
}
