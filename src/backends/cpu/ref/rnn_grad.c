/* Reference kernels of kiln.LSTMGrad and kiln.GRUGrad (ops.def, "gradient ops"; shapes
 * in ir/infer_rnn.c): the gradients of an LSTM or GRU (forward, reverse or bidirectional,
 * with or without sequence_lens; layout 0, the default activations, no clip, no
 * input_forget, no peepholes) by backpropagation through time, in double.
 *
 *   X [seq, batch, input], W [D, G H, input], R [D, G H, hidden], B [D, 2 G H],
 *   sequence_lens [batch], initial_h, initial_c [D, batch, H], dY [seq, D, batch, H],
 *   dY_h, dY_c [D, batch, H] -> dX, dW, dR, dB, dinitial_h, dinitial_c of the same
 *   shapes (dB given B or not); D = 2 when bidirectional.
 *
 * Per batch row and direction the forward pass of ref/rnn.c is run again over the row's
 * len steps (len = sequence_lens[b], else seq), keeping each step's gate activations,
 * states and (GRU) the recurrent term of the candidate; then the steps are walked back.
 * Arrays of the walk are indexed by step; step k reads time k forward and len - 1 - k in
 * reverse (the second direction of a bidirectional node is the reverse one). Times past
 * len give Y zeros, so their dY is not read and their dX is zero. With a_g the
 * pre-activation of gate g and dh, dc the gradients reaching h_t, c_t (dY_t added to dh
 * at step t):
 *   LSTM: c_t = f c + i g, h_t = o tanh(c_t):
 *         dc += dh o (1 - tanh(c_t)^2); da_o = dh tanh(c_t) o (1 - o);
 *         da_i = dc g i (1 - i); da_f = dc c_{t-1} f (1 - f); da_c = dc i (1 - g^2);
 *         dc_{t-1} = dc f; dh_{t-1} = R^T da
 *   GRU:  h_t = (1 - z) n + z h: dz = dh (h - n), dn = dh (1 - z), dh_{t-1} = dh z + ...;
 *         da_n = dn (1 - n^2); linear_before_reset 1: n = tanh(a_n' + r q), q = R_n h + Rb_n,
 *         so dq = da_n r, dr = da_n q; 0: n = tanh(a_n' + R_n (r h) + Rb_n), so
 *         d(r h) = R_n^T da_n, dr = d(r h) h, dh_{t-1} += d(r h) r.
 * dW, dR and dB sum every row's and step's terms; dX is W^T da at each step, summed over
 * the directions. */
#include "backends/cpu/ref/ref.h"
#include "ir/infer_more.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { IN_X, IN_W, IN_R, IN_B, IN_LENS, IN_H0, IN_C0 };
enum { GATE_I = 0, GATE_O = 1, GATE_F = 2, GATE_C = 3 }; /* LSTM's order in W */
enum { OUT_DX, OUT_DW, OUT_DR, OUT_DB, OUT_DH0, OUT_DC0 };

typedef struct bptt {
  bool lstm, lbr; /* lbr: GRU's linear_before_reset */
  int64_t seq, batch, input, hidden, gh; /* gh = gates * hidden */
  int dirs;                          /* 1, or 2 when bidirectional */
  bool rev_node;                     /* direction "reverse" */
  const kl_tensor *x, *lens, *h0, *c0, *dy, *dyh, *dyc;
  double *w_all, *r_all, *b_all;    /* W, R, B of every direction (B zeros when absent) */
  double *dw_all, *dr_all, *db_all; /* their gradients, summed over the rows */
  /* the direction walked now (set_direction): */
  int dir;
  bool rev;              /* step k at time len - 1 - k */
  int64_t len;           /* the row's steps */
  double *w, *r, *b;     /* W [gh, input], R [gh, hidden], B [2 gh] of dir */
  double *dw, *dr, *db;  /* their gradients */
  double *dxs;           /* the row's dX [seq, input] by time, summed over the directions */
  double *xs;            /* the row's inputs [seq, input] by step */
  double *hs, *cs;       /* the row's states [seq + 1, hidden], initial first */
  double *act;           /* gate activations [seq, gh] */
  double *q;             /* GRU: R_n h + Rb_n (lbr 1) or r h (lbr 0), [seq, hidden] */
  double *da, *dh, *dc, *dhp, *tmp; /* [gh], then [hidden] each */
} bptt;

static double sigmoid(double v) { return 1 / (1 + exp(-v)); }

static double dot(const double *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < n; k++) s += a[k] * b[k];
  return s;
}

static void load_all(const kl_tensor *t, int64_t at, int64_t n, double *v) {
  for (int64_t i = 0; i < n; i++) v[i] = t ? kl_ref_load(t->data, t->dtype, at + i) : 0;
}

static void store_all(kl_tensor *t, int64_t at, int64_t n, const double *v) {
  for (int64_t i = 0; i < n; i++) kl_ref_store(t->data, t->dtype, at + i, v[i]);
}

/* The time step k of the walk reads and writes. */
static int64_t time_of(const bptt *s, int64_t k) { return s->rev ? s->len - 1 - k : k; }

/* Where row b's state of the walk's direction starts in initial_h, Y_h and their kin. */
static int64_t state_at(const bptt *s, int64_t b) {
  return (s->dir * s->batch + b) * s->hidden;
}

/* Direction d of row b (whose length is len): the slices of W, R, B and their
 * gradients that the walk uses. */
static void set_direction(bptt *s, int d, int64_t len) {
  int64_t gh = s->gh;
  s->dir = d;
  s->rev = d == 1 || s->rev_node;
  s->len = len;
  s->w = s->w_all + d * gh * s->input;
  s->r = s->r_all + d * gh * s->hidden;
  s->b = s->b_all + d * 2 * gh;
  s->dw = s->dw_all + d * gh * s->input;
  s->dr = s->dr_all + d * gh * s->hidden;
  s->db = s->db_all + d * 2 * gh;
}

/* The row's forward pass: hs, cs, act, q. */
static void forward_row(bptt *s, int64_t b) {
  int64_t H = s->hidden, I = s->input, gh = s->gh;
  for (int64_t t = 0; t < s->len; t++)
    load_all(s->x, (time_of(s, t) * s->batch + b) * I, I, s->xs + t * I);
  load_all(s->h0, state_at(s, b), H, s->hs);
  load_all(s->c0, state_at(s, b), H, s->cs);
  for (int64_t t = 0; t < s->len; t++) {
    const double *x = s->xs + t * I, *h = s->hs + t * H;
    double *a = s->act + t * gh, *hn = s->hs + (t + 1) * H;
    for (int64_t row = 0; row < gh; row++) a[row] = dot(s->w + row * I, x, I) + s->b[row];
    if (s->lstm) {
      const double *c = s->cs + t * H;
      double *cn = s->cs + (t + 1) * H;
      for (int64_t row = 0; row < gh; row++)
        a[row] += dot(s->r + row * H, h, H) + s->b[gh + row];
      for (int64_t j = 0; j < H; j++) {
        double i = a[GATE_I * H + j] = sigmoid(a[GATE_I * H + j]);
        double o = a[GATE_O * H + j] = sigmoid(a[GATE_O * H + j]);
        double f = a[GATE_F * H + j] = sigmoid(a[GATE_F * H + j]);
        double g = a[GATE_C * H + j] = tanh(a[GATE_C * H + j]);
        cn[j] = f * c[j] + i * g;
        hn[j] = o * tanh(cn[j]);
      }
      continue;
    }
    double *q = s->q + t * H;
    for (int64_t row = 0; row < 2 * H; row++) /* z, r */
      a[row] = sigmoid(a[row] + dot(s->r + row * H, h, H) + s->b[gh + row]);
    if (!s->lbr)
      for (int64_t k = 0; k < H; k++) q[k] = a[H + k] * h[k];
    for (int64_t j = 0; j < H; j++) {
      const double *rn = s->r + (2 * H + j) * H;
      double bn = s->b[gh + 2 * H + j];
      if (s->lbr) q[j] = dot(rn, h, H) + bn;
      double rec = s->lbr ? a[H + j] * q[j] : dot(rn, q, H) + bn;
      a[2 * H + j] = tanh(a[2 * H + j] + rec);
    }
    for (int64_t j = 0; j < H; j++)
      hn[j] = (1 - a[j]) * a[2 * H + j] + a[j] * h[j];
  }
}

/* dR, dRb of gate rows [r0, r1) from da, and R^T da into dhp. */
static void recurrent_back(bptt *s, const double *hp, int64_t r0, int64_t r1) {
  int64_t H = s->hidden;
  for (int64_t row = r0; row < r1; row++) {
    double d = s->da[row];
    s->db[s->gh + row] += d;
    for (int64_t k = 0; k < H; k++) {
      s->dr[row * H + k] += d * hp[k];
      s->dhp[k] += s->r[row * H + k] * d;
    }
  }
}

/* Step t of the LSTM back: da from dh and dc; dc becomes dc_{t-1}. */
static void lstm_back(bptt *s, int64_t t) {
  int64_t H = s->hidden;
  const double *a = s->act + t * s->gh, *c = s->cs + (t + 1) * H, *cp = s->cs + t * H;
  for (int64_t j = 0; j < H; j++) {
    double i = a[GATE_I * H + j], o = a[GATE_O * H + j], f = a[GATE_F * H + j];
    double g = a[GATE_C * H + j], tc = tanh(c[j]);
    double dc = s->dc[j] + s->dh[j] * o * (1 - tc * tc);
    s->da[GATE_O * H + j] = s->dh[j] * tc * o * (1 - o);
    s->da[GATE_I * H + j] = dc * g * i * (1 - i);
    s->da[GATE_F * H + j] = dc * cp[j] * f * (1 - f);
    s->da[GATE_C * H + j] = dc * i * (1 - g * g);
    s->dc[j] = dc * f;
  }
  recurrent_back(s, s->hs + t * H, 0, s->gh);
}

/* Step t of the GRU back: da from dh; dhp gets everything but R^T da of z and r. */
static void gru_back(bptt *s, int64_t t) {
  int64_t H = s->hidden, gh = s->gh;
  const double *a = s->act + t * gh, *hp = s->hs + t * H, *q = s->q + t * H;
  double *da = s->da;
  for (int64_t j = 0; j < H; j++) {
    double z = a[j], n = a[2 * H + j];
    s->dhp[j] += s->dh[j] * z;
    da[j] = s->dh[j] * (hp[j] - n) * z * (1 - z);
    da[2 * H + j] = s->dh[j] * (1 - z) * (1 - n * n);
  }
  if (s->lbr) { /* n = tanh(a_n' + r q): dq = da_n r, dr = da_n q */
    for (int64_t j = 0; j < H; j++) {
      double r = a[H + j];
      s->tmp[j] = da[2 * H + j] * r;
      da[H + j] = da[2 * H + j] * q[j] * r * (1 - r);
    }
    for (int64_t j = 0; j < H; j++) {
      int64_t row = 2 * H + j;
      s->db[gh + row] += s->tmp[j];
      for (int64_t k = 0; k < H; k++) {
        s->dr[row * H + k] += s->tmp[j] * hp[k];
        s->dhp[k] += s->r[row * H + k] * s->tmp[j];
      }
    }
  } else { /* n = tanh(a_n' + R_n (r h) + Rb_n): q holds r h */
    for (int64_t k = 0; k < H; k++) s->tmp[k] = 0;
    for (int64_t j = 0; j < H; j++) {
      int64_t row = 2 * H + j;
      double d = da[row];
      s->db[gh + row] += d;
      for (int64_t k = 0; k < H; k++) {
        s->dr[row * H + k] += d * q[k];
        s->tmp[k] += s->r[row * H + k] * d;
      }
    }
    for (int64_t k = 0; k < H; k++) {
      double r = a[H + k];
      s->dhp[k] += s->tmp[k] * r;
      da[H + k] = s->tmp[k] * hp[k] * r * (1 - r);
    }
  }
  recurrent_back(s, hp, 0, 2 * H);
}

/* The walk back of row b: dW, dR, dB, the row's dxs, dinitial_h and dinitial_c. */
static void backward_row(bptt *s, int64_t b, kl_tensor *const *out, int n_out) {
  int64_t H = s->hidden, I = s->input, gh = s->gh;
  load_all(s->dyh, state_at(s, b), H, s->dh);
  load_all(s->dyc, state_at(s, b), H, s->dc);
  for (int64_t t = s->len - 1; t >= 0; t--) {
    int64_t time = time_of(s, t);
    if (s->dy)
      for (int64_t j = 0; j < H; j++)
        s->dh[j] += kl_ref_load(s->dy->data, s->dy->dtype,
                                ((time * s->dirs + s->dir) * s->batch + b) * H + j);
    for (int64_t k = 0; k < H; k++) s->dhp[k] = 0;
    if (s->lstm) lstm_back(s, t);
    else gru_back(s, t);
    const double *x = s->xs + t * I;
    for (int64_t row = 0; row < gh; row++) {
      s->db[row] += s->da[row];
      for (int64_t k = 0; k < I; k++) s->dw[row * I + k] += s->da[row] * x[k];
    }
    for (int64_t k = 0; k < I; k++) {
      double v = 0;
      for (int64_t row = 0; row < gh; row++) v += s->w[row * I + k] * s->da[row];
      s->dxs[time * I + k] += v;
    }
    double *swap = s->dh;
    s->dh = s->dhp;
    s->dhp = swap;
  }
  if (n_out > OUT_DH0 && out[OUT_DH0]) store_all(out[OUT_DH0], state_at(s, b), H, s->dh);
  if (s->lstm && n_out > OUT_DC0 && out[OUT_DC0])
    store_all(out[OUT_DC0], state_at(s, b), H, s->dc);
}

/* Input i, when given, must have n elements. */
static kiln_status check_numel(const kl_kernel_ctx *c, int i, const char *name, int64_t n) {
  const kl_tensor *t = i < c->n_in ? c->in[i] : NULL;
  if (!t || kl_tensor_numel(t) == n) return KILN_OK;
  return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %lld elements, expected %lld", i,
                 name, (long long)kl_tensor_numel(t), (long long)n);
}

/* W, R, B, sequence_lens, the initial states and the output gradients against X's and
 * R's sizes, so that no read runs past a buffer. */
static kiln_status check_sizes(const kl_kernel_ctx *c, const bptt *s, int n_fwd) {
  int64_t state = s->dirs * s->batch * s->hidden, gh = s->dirs * s->gh;
  kiln_status st = check_numel(c, IN_W, "W", gh * s->input);
  if (st == KILN_OK) st = check_numel(c, IN_R, "R", gh * s->hidden);
  if (st == KILN_OK) st = check_numel(c, IN_B, "B", 2 * gh);
  if (st == KILN_OK) st = check_numel(c, IN_LENS, "sequence_lens", s->batch);
  if (st == KILN_OK) st = check_numel(c, IN_H0, "initial_h", state);
  if (st == KILN_OK && s->lstm) st = check_numel(c, IN_C0, "initial_c", state);
  if (st == KILN_OK) st = check_numel(c, n_fwd, "dY", s->seq * state);
  if (st == KILN_OK) st = check_numel(c, n_fwd + 1, "dY_h", state);
  if (st == KILN_OK && s->lstm) st = check_numel(c, n_fwd + 2, "dY_c", state);
  for (int i = 0; st == KILN_OK && i < c->n_out; i++)
    if (c->out[i] && c->out[i]->dtype != c->in[IN_X]->dtype)
      st = kl_fail(c->e, KILN_ERR_DTYPE, "output %d is %s, expected X's %s", i,
                   kl_dtype_name(c->out[i]->dtype), kl_dtype_name(c->in[IN_X]->dtype));
  return st;
}

/* Row b's length, which must lie in [0, seq]. */
static kiln_status row_len(const bptt *s, int64_t b, int64_t *len, kl_err *e) {
  *len = s->lens ? kl_ref_load_int(s->lens->data, s->lens->dtype, b) : s->seq;
  if (*len >= 0 && *len <= s->seq) return KILN_OK;
  return kl_fail(e, KILN_ERR_SHAPE, "sequence_lens[%lld] is %lld, expected 0 to %lld (X's "
                 "sequence length)", (long long)b, (long long)*len, (long long)s->seq);
}

/* One block of doubles for every array of s (zeroed). */
static kiln_status alloc_all(bptt *s, kl_err *e) {
  int64_t H = s->hidden, I = s->input, gh = s->gh, T = s->seq, D = s->dirs;
  int64_t sizes[] = {D * gh * I, D * gh * H, D * 2 * gh, D * gh * I, D * gh * H, D * 2 * gh,
                     T * I, T * I, (T + 1) * H, (T + 1) * H, T * gh, T * H, gh, H, H, H, H};
  double **at[] = {&s->w_all, &s->r_all, &s->b_all, &s->dw_all, &s->dr_all, &s->db_all,
                   &s->dxs, &s->xs, &s->hs, &s->cs, &s->act, &s->q, &s->da, &s->dh,
                   &s->dc, &s->dhp, &s->tmp};
  size_t total = 0, bytes;
  bool over = false;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    over |= kl_add_overflow_size(total, (size_t)sizes[i], &total) != 0;
  double *block = NULL;
  if (over || kl_mul_overflow_size(total, sizeof(double), &bytes) ||
      !(block = calloc(total ? total : 1, sizeof(double))))
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "no memory for the scratch of the recurrent "
                   "gradient (%zu doubles)", total);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    *at[i] = block;
    block += sizes[i];
  }
  return KILN_OK;
}

int kl_ref_rnn_grad(kl_kernel_ctx *c) {
  kl_rnn r;
  kiln_status st = kl_rnn_init(c->node, &r, c->e);
  if (st != KILN_OK) return st;
  bptt s = {.lstm = r.gates == 4, .lbr = r.linear_before_reset, .dirs = r.dirs,
            .rev_node = r.reverse};
  int n_fwd = s.lstm ? 8 : 6;
  const char *why = kl_rnn_grad_unsupported(&r);
  const kl_tensor *in[11] = {0};
  for (int i = 0; i < c->n_in && i < 11; i++) in[i] = c->in[i];
  if (!why && s.lstm && in[7]) why = "peepholes (P)";
  if (why) return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "%s does not take %s",
                          kl_op_name(c->node->op), why);
  s.x = in[IN_X];
  s.lens = in[IN_LENS];
  s.h0 = in[IN_H0];
  s.c0 = s.lstm ? in[IN_C0] : NULL;
  s.dy = in[n_fwd];
  s.dyh = in[n_fwd + 1];
  s.dyc = s.lstm ? in[n_fwd + 2] : NULL;
  if (s.x->rank != 3 || in[IN_R]->rank != 3)
    return kl_fail(c->e, KILN_ERR_SHAPE, "X and R must be of rank 3");
  s.seq = s.x->dims[0];
  s.batch = s.x->dims[1];
  s.input = s.x->dims[2];
  s.hidden = in[IN_R]->dims[2];
  s.gh = r.gates * s.hidden;
  if ((st = check_sizes(c, &s, n_fwd)) != KILN_OK) return st;
  if ((st = alloc_all(&s, c->e)) != KILN_OK) return st;
  double *block = s.w_all;
  int64_t gh = s.dirs * s.gh, I = s.input;
  load_all(in[IN_W], 0, gh * I, s.w_all);
  load_all(in[IN_R], 0, gh * s.hidden, s.r_all);
  load_all(in[IN_B], 0, 2 * gh, s.b_all);
  kl_tensor *dx = c->n_out > OUT_DX ? c->out[OUT_DX] : NULL;
  for (int64_t b = 0, len; b < s.batch; b++) {
    if ((st = row_len(&s, b, &len, c->e)) != KILN_OK) break;
    memset(s.dxs, 0, (size_t)(s.seq * I) * sizeof(double));
    for (int d = 0; d < s.dirs; d++) {
      set_direction(&s, d, len);
      forward_row(&s, b);
      backward_row(&s, b, c->out, c->n_out);
    }
    for (int64_t t = 0; dx && t < s.seq; t++)
      store_all(dx, (t * s.batch + b) * I, I, s.dxs + t * I);
  }
  if (st == KILN_OK && c->n_out > OUT_DW && c->out[OUT_DW])
    store_all(c->out[OUT_DW], 0, gh * I, s.dw_all);
  if (st == KILN_OK && c->n_out > OUT_DR && c->out[OUT_DR])
    store_all(c->out[OUT_DR], 0, gh * s.hidden, s.dr_all);
  if (st == KILN_OK && c->n_out > OUT_DB && c->out[OUT_DB])
    store_all(c->out[OUT_DB], 0, 2 * gh, s.db_all);
  free(block);
  return st;
}
