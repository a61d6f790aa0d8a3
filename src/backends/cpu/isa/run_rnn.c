/* kiln's float32 RNN, GRU and LSTM (run.h, kl_run_rnn): the reference kernel's
 * equations (backends/cpu/ref/rnn.c, shapes in ir/infer_rnn.c) with the default
 * activations, computed as matrix products on kiln's panels (run_gemv.c):
 *
 *   XW   [seq * batch, dirs * gates * hidden] = X W^T + (Wb + Rb), every step of every
 *        direction at once (X read as the matrix of its rows, whichever layout)
 *   per direction and step:
 *   HR   [batch, gates * hidden] = H R_d^T (one row: a matrix-vector product)
 *   the gates of each batch row from its row of XW at its own time step, HR, the state
 *        and the peepholes: the level's sigmoid and tanh (its unary primitive; clip
 *        through its Clip), the products and sums between them in plain C.
 *
 * GRU with linear_before_reset 0 multiplies R_h by r * h, known only after r: its R
 * is packed as two matrices, the z and r rows and the h rows, and each step makes two
 * products. With linear_before_reset 1 the h gate's Rb stays out of the folded bias
 * (it is multiplied by r). A batch row past its sequence length keeps its state: the
 * products still include it (rows of one matrix), its gates are not computed.
 *
 * The products run on kiln's panels (one row; many rows on the level's tiles) as dnnl.c
 * runs MatMul's: a projection of more than KL_GEMM_MAX_ROWS rows on small weights, and
 * any product of many rows at a level without tiles (AVX-512), goes to oneDNN's sgemm
 * (product() below). W and R are packed once per session when they are constants
 * (kl_cpu_isa_rnn_kernel decides), else at every run into the same buffers. On kiln's
 * products every output is made by one task, so results do not depend on the thread
 * count (oneDNN's sums may).
 */
#include "backends/cpu/isa/run.h"
#include "ir/infer_more.h"
#include "kl_config.h"
#if KL_HAVE_DNNL
#include "backends/cpu/dnnl.h"
#endif

#include <stdlib.h>
#include <string.h>

enum { IN_X, IN_W, IN_R, IN_B, IN_LENS, IN_H0, IN_C0, IN_P };
enum { LSTM_I = 0, LSTM_O = 1, LSTM_F = 2, LSTM_C = 3 }; /* gate order in W */

typedef struct packed {
  float *w, *w_tail; /* panels and the partial last one (in the same run of floats) */
} packed;

/* The node's state: its packed weights and the buffers of a run, both made for one set
 * of shapes and made again when they change. */
struct kl_rnn_state {
  int64_t input, hidden, dirs, gates, rows, batch; /* what the buffers were made for */
  bool packed_once;                                /* constant W and R packed */
  float *weights;                                  /* every pack below */
  packed w, r[2], rh[2]; /* W (all directions), R per direction (GRU lbr 0: z and r
                            rows), R's h rows per direction (GRU lbr 0) */
  float *work;           /* the buffers of a run (run_bufs) */
  size_t work_floats;
  size_t weight_floats;  /* of weights */
};
typedef struct kl_rnn_state rnn_state;

/* What one run reads and writes. */
typedef struct rnn_job {
  const kl_isa_fns *f;
  const kl_kernel_ctx *c;
  kl_rnn r;
  kl_op op;
  int64_t seq, batch, input, hidden, gh; /* gh = gates * hidden */
  const float *x, *p, *h0, *c0;
  float *y, *yh, *yc;
  int64_t *lens;
  /* run buffers */
  float *xw;      /* [seq * batch, dirs * gh] */
  float *bias;    /* [dirs * gh] Wb + Rb (GRU lbr 1: the h gate's Wb alone) */
  float *rbh;     /* [dirs * hidden] GRU lbr 1: the h gate's Rb */
  float *h, *cell; /* [batch, hidden] the state of the direction being run */
  float *hr;      /* [batch, gh] H R^T */
  float *rh;      /* [batch, hidden] GRU lbr 0: r * h, then the h rows' product */
  float *rhr;     /* [batch, hidden] GRU lbr 0: (r * h) R_h^T */
  float *gates;   /* [batch, gh + hidden] per row: pre-activations, then a temporary */
  float *scratch; /* the products' packed rows */
  /* the step being run */
  int d;
  int64_t s;
  const rnn_state *st;
} rnn_job;

/* ---- which nodes ---- */

static bool f32_or_absent(const kl_type *const *in, int n_in, int i) {
  return i >= n_in || !in[i] || in[i]->dtype == KL_F32;
}

bool kl_rnn_fast(const kl_node *n, const kl_type *const *in, int n_in) {
  if (n->op != KL_OP_RNN && n->op != KL_OP_GRU && n->op != KL_OP_LSTM) return false;
  if (n_in < 3 || !in[IN_X] || !in[IN_W] || !in[IN_R] || in[IN_X]->dtype != KL_F32 ||
      in[IN_W]->dtype != KL_F32 || in[IN_R]->dtype != KL_F32)
    return false;
  for (int i = IN_B; i <= IN_P; i++)
    if (i != IN_LENS && !f32_or_absent(in, n_in, i)) return false;
  if (IN_LENS < n_in && in[IN_LENS] && in[IN_LENS]->dtype != KL_I32 &&
      in[IN_LENS]->dtype != KL_I64)
    return false;
  kl_rnn r;
  kl_err e = {0};
  if (kl_rnn_init(n, &r, &e) != KILN_OK) return false;
  /* the default activations: f Sigmoid (RNN: Tanh), g and h Tanh */
  for (int d = 0; d < r.dirs; d++)
    for (int k = 0; k < r.n_acts; k++) {
      kl_rnn_act_kind want = k == 0 && n->op != KL_OP_RNN ? KL_RNN_ACT_SIGMOID : KL_RNN_ACT_TANH;
      if (r.act[d][k].kind != want) return false;
    }
  return true;
}

/* ---- state ---- */

size_t kl_rnn_held_bytes(const void *state) {
  const rnn_state *s = state;
  return s ? sizeof(float) * (s->weight_floats + s->work_floats) : 0;
}

void kl_rnn_state_free(void *state) {
  rnn_state *s = state;
  if (!s) return;
  free(s->weights);
  free(s->work);
  free(s);
}

static int64_t panel_floats(int64_t k, int64_t n) {
  return (n + KL_GEMV_PANEL - 1) / KL_GEMV_PANEL * KL_GEMV_PANEL * (k > 0 ? k : 1);
}

/* Points p at n outputs of k packed at *at, and moves *at past them. */
static void place(packed *p, float **at, int64_t k, int64_t n) {
  p->w = *at;
  p->w_tail = *at + n / KL_GEMV_PANEL * KL_GEMV_PANEL * k;
  *at += panel_floats(k, n);
}

static bool two_products(const rnn_job *j) {
  return j->op == KL_OP_GRU && !j->r.linear_before_reset;
}

/* The outputs of the first recurrent product per step. */
static int64_t hr_outputs(const rnn_job *j) {
  return two_products(j) ? 2 * j->hidden : j->gh;
}

static kiln_status make_weights(rnn_state *s, const rnn_job *j) {
  int64_t dirs = j->r.dirs, nr = hr_outputs(j), h = j->hidden;
  int64_t floats = panel_floats(j->input, dirs * j->gh) +
                   dirs * (panel_floats(h, nr) + (two_products(j) ? panel_floats(h, h) : 0));
  free(s->weights);
  s->weight_floats = 0;
  if (!(s->weights = malloc(sizeof(float) * (size_t)floats)))
    return kl_fail(j->c->e, KILN_ERR_OUT_OF_MEMORY, "%s: no memory for the packed W and R "
                   "(%lld floats)", kl_op_name(j->op), (long long)floats);
  s->weight_floats = (size_t)floats;
  float *at = s->weights;
  place(&s->w, &at, j->input, dirs * j->gh);
  for (int d = 0; d < dirs; d++) {
    place(&s->r[d], &at, h, nr);
    if (two_products(j)) place(&s->rh[d], &at, h, h);
  }
  s->packed_once = false;
  return KILN_OK;
}

static void pack_weights(rnn_state *s, const rnn_job *j) {
  const float *w = j->c->in[IN_W]->data, *r = j->c->in[IN_R]->data;
  int64_t h = j->hidden, nr = hr_outputs(j);
  kl_gemv_pack(j->f, w, true, j->input, j->r.dirs * j->gh, s->w.w, s->w.w_tail);
  for (int d = 0; d < j->r.dirs; d++) {
    const float *rd = r + d * j->gh * h;
    kl_gemv_pack(j->f, rd, true, h, nr, s->r[d].w, s->r[d].w_tail);
    if (two_products(j)) kl_gemv_pack(j->f, rd + nr * h, true, h, h, s->rh[d].w, s->rh[d].w_tail);
  }
}

/* The packed rows of the products: the projection's or a step's, the larger. */
static size_t scratch_bytes(const rnn_job *j) {
  size_t x = kl_gemv_scratch_bytes(j->seq * j->batch, j->input);
  size_t h = kl_gemv_scratch_bytes(j->batch, j->hidden);
  return x > h ? x : h;
}

/* The floats of a run's buffers (before the lengths, which follow as int64). */
static int64_t work_floats(const rnn_job *j) {
  int64_t rows = j->seq * j->batch, bh = j->batch * j->hidden, dirs = j->r.dirs;
  int64_t scratch = (int64_t)(scratch_bytes(j) / sizeof(float));
  return rows * dirs * j->gh + dirs * j->gh + dirs * j->hidden + 4 * bh + j->batch * j->gh +
         j->batch * (j->gh + j->hidden) + scratch + j->batch /* lens: 2 floats each, */
         + j->batch;                                         /* as int64 */
}

static kiln_status make_work(rnn_state *s, rnn_job *j) {
  size_t need = (size_t)work_floats(j) + 2; /* + 2: the lengths' alignment */
  if (need > s->work_floats) {
    free(s->work);
    s->work_floats = 0;
    if (!(s->work = malloc(sizeof(float) * need)))
      return kl_fail(j->c->e, KILN_ERR_OUT_OF_MEMORY, "%s: no memory for a run's buffers "
                     "(%zu floats)", kl_op_name(j->op), need);
    s->work_floats = need;
  }
  int64_t rows = j->seq * j->batch, bh = j->batch * j->hidden, dirs = j->r.dirs;
  float *at = s->work;
  j->xw = at, at += rows * dirs * j->gh;
  j->bias = at, at += dirs * j->gh;
  j->rbh = at, at += dirs * j->hidden;
  j->h = at, at += bh;
  j->cell = at, at += bh;
  j->rh = at, at += bh;
  j->rhr = at, at += bh;
  j->hr = at, at += j->batch * j->gh;
  j->gates = at, at += j->batch * (j->gh + j->hidden);
  j->scratch = scratch_bytes(j) ? at : NULL;
  at += scratch_bytes(j) / sizeof(float);
  uintptr_t a = (uintptr_t)at;
  j->lens = (int64_t *)(a + (sizeof(int64_t) - a % sizeof(int64_t)) % sizeof(int64_t));
  return KILN_OK;
}

/* The state for j's shapes, W and R packed for this run. */
static kiln_status prepare(const kl_kernel_ctx *c, rnn_job *j, bool const_weights,
                           rnn_state **out) {
  rnn_state *s = c->state ? *c->state : NULL;
  kiln_status st;
  if (!s) {
    if (!(s = calloc(1, sizeof *s)))
      return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "%s: no memory for its state",
                     kl_op_name(j->op));
    if (c->state) *c->state = s;
  }
  *out = s;
  if (!s->weights || s->input != j->input || s->hidden != j->hidden || s->dirs != j->r.dirs ||
      s->gates != j->r.gates) {
    if ((st = make_weights(s, j)) != KILN_OK) return st;
    s->input = j->input, s->hidden = j->hidden, s->dirs = j->r.dirs, s->gates = j->r.gates;
  }
  if ((st = make_work(s, j)) != KILN_OK) return st;
  if (!s->packed_once) pack_weights(s, j);
  s->packed_once = const_weights && c->state;
  return KILN_OK;
}

/* ---- the run ---- */

static void fill_bias(rnn_job *j) {
  const kl_tensor *b = j->c->n_in > IN_B ? j->c->in[IN_B] : NULL;
  int64_t gh = j->gh, h = j->hidden;
  bool lbr = j->op == KL_OP_GRU && j->r.linear_before_reset;
  for (int d = 0; d < j->r.dirs; d++) {
    const float *wb = b ? (const float *)b->data + d * 2 * gh : NULL, *rb = wb ? wb + gh : NULL;
    for (int64_t i = 0; i < gh; i++) {
      bool rb_apart = lbr && i >= 2 * h;
      j->bias[d * gh + i] = wb ? wb[i] + (rb_apart ? 0.0f : rb[i]) : 0.0f;
    }
    for (int64_t i = 0; lbr && i < h; i++) j->rbh[d * h + i] = rb ? rb[2 * h + i] : 0.0f;
  }
}

static kiln_status read_lens(rnn_job *j) {
  const kl_tensor *l = j->c->n_in > IN_LENS ? j->c->in[IN_LENS] : NULL;
  for (int64_t b = 0; b < j->batch; b++) {
    int64_t v = !l                    ? j->seq
                : l->dtype == KL_I32 ? ((const int32_t *)l->data)[b]
                                     : ((const int64_t *)l->data)[b];
    if (v < 0 || v > j->seq)
      return kl_fail(j->c->e, KILN_ERR_INVALID_ARGUMENT, "%s: sequence_lens[%lld] is %lld, "
                     "expected 0 to %lld (X's sequence length)", kl_op_name(j->op), (long long)b,
                     (long long)v, (long long)j->seq);
    j->lens[b] = v;
  }
  return KILN_OK;
}

/* y [m, n] = x [m, k] W^T + bias for the m rows of x: W packed (p) for kiln's products,
 * w_raw its plain [n, k] rows for oneDNN's. Kiln's panels take one row, and many rows
 * where the level has tiles, as dnnl.c hands them MatMul's rows: up to KL_GEMM_MAX_ROWS,
 * or any number on weights of KL_GEMM_BIG_WEIGHTS; oneDNN's sgemm takes the other runs
 * of many rows (every one at a level without tiles); without oneDNN, row by row. */
static kiln_status product(const rnn_job *j, const float *x, int64_t m, int64_t k, int64_t n,
                           const packed *p, const float *w_raw, const float *bias, float *y) {
  const kl_gemv_fns *g = j->f->gemv;
  bool tiles = m <= 1 || (g->tile && !(g->rows_fast && m > KL_GEMM_MAX_ROWS &&
                                        k * n < KL_GEMM_BIG_WEIGHTS));
#if KL_HAVE_DNNL
  if (!tiles && kl_dnnl_usable()) return kl_dnnl_sgemm_nt(x, w_raw, bias, m, k, n, y, j->c->e);
#endif
  if (!tiles && !g->tile) {
    for (int64_t r = 0; r < m; r++) {
      kiln_status st = product(j, x + r * k, 1, k, n, p, w_raw, bias, y + r * n);
      if (st != KILN_OK) return st;
    }
    return KILN_OK;
  }
  kl_gemv_args a = {.x = x, .w = p->w, .w_tail = p->w_tail, .k = k, .n = n, .m = m,
                    .alpha = 1.0f, .add = bias, .add_step = 1, .add_row = 0, .add_scale = 1.0f,
                    .y = y, .scratch = j->scratch};
  return kl_run_gemv(j->c, j->f, &a);
}

static kiln_status project_inputs(rnn_job *j, const rnn_state *s) {
  return product(j, j->x, j->seq * j->batch, j->input, j->r.dirs * j->gh, &s->w,
                 j->c->in[IN_W]->data, j->bias, j->xw);
}

/* Offset of (d, b, 0) in a state [dirs, batch, hidden] (layout 1: [batch, dirs, hidden]). */
static int64_t state_at(const rnn_job *j, int d, int64_t b) {
  return (j->r.batch_first ? b * j->r.dirs + d : d * j->batch + b) * j->hidden;
}

static int64_t y_at(const rnn_job *j, int64_t t, int d, int64_t b) {
  if (j->r.batch_first) return ((b * j->seq + t) * j->r.dirs + d) * j->hidden;
  return ((t * j->r.dirs + d) * j->batch + b) * j->hidden;
}

/* The time step of batch row b at step s of direction d, -1 past its length. */
static int64_t time_of(const rnn_job *j, int64_t b) {
  int64_t len = j->lens[b];
  if (j->s >= len) return -1;
  return j->d == 1 || j->r.reverse ? len - 1 - j->s : j->s;
}

static const float *xw_row(const rnn_job *j, int64_t t, int64_t b) {
  int64_t row = j->r.batch_first ? b * j->seq + t : t * j->batch + b;
  return j->xw + (row * j->r.dirs + j->d) * j->gh;
}

static void act(const rnn_job *j, kl_act_kind kind, float *v, int64_t n) {
  kl_act a = {kind, 0.0f, 0.0f};
  j->f->elt->unary(&a, v, v, (size_t)n);
}

static void clip(const rnn_job *j, float *v, int64_t n) {
  if (!j->r.has_clip) return;
  kl_act a = {KL_ACT_CLIP, (float)-j->r.clip, (float)j->r.clip};
  j->f->elt->unary(&a, v, v, (size_t)n);
}

static void lstm_row(const rnn_job *j, int64_t b, int64_t t) {
  int64_t n = j->hidden, gh = j->gh;
  float *g = j->gates + b * (gh + n), *tmp = g + gh, *h = j->h + b * n, *c = j->cell + b * n;
  const float *xw = xw_row(j, t, b), *hr = j->hr + b * gh;
  const float *p = j->p ? j->p + j->d * 3 * n : NULL;
  float *gi = g + LSTM_I * n, *go = g + LSTM_O * n, *gf = g + LSTM_F * n, *gc = g + LSTM_C * n;
  for (int64_t i = 0; i < gh; i++) g[i] = xw[i] + hr[i];
  if (p)
    for (int64_t i = 0; i < n; i++) {
      gi[i] += p[i] * c[i];
      gf[i] += p[2 * n + i] * c[i];
    }
  clip(j, gi, n);
  clip(j, gc, n);
  act(j, KL_ACT_SIGMOID, gi, n);
  act(j, KL_ACT_TANH, gc, n);
  if (j->r.input_forget) {
    for (int64_t i = 0; i < n; i++) gf[i] = 1.0f - gi[i];
  } else {
    clip(j, gf, n);
    act(j, KL_ACT_SIGMOID, gf, n);
  }
  for (int64_t i = 0; i < n; i++) c[i] = gf[i] * c[i] + gi[i] * gc[i];
  if (p)
    for (int64_t i = 0; i < n; i++) go[i] += p[n + i] * c[i];
  clip(j, go, n);
  act(j, KL_ACT_SIGMOID, go, n);
  memcpy(tmp, c, sizeof(float) * (size_t)n);
  act(j, KL_ACT_TANH, tmp, n); /* a cell, not a gate: no clip */
  for (int64_t i = 0; i < n; i++) h[i] = go[i] * tmp[i];
}

static void rnn_row(const rnn_job *j, int64_t b, int64_t t) {
  int64_t n = j->hidden;
  float *h = j->h + b * n;
  const float *xw = xw_row(j, t, b), *hr = j->hr + b * n;
  for (int64_t i = 0; i < n; i++) h[i] = xw[i] + hr[i];
  clip(j, h, n);
  act(j, KL_ACT_TANH, h, n);
}

/* GRU, first part: z and r into the row's gates; with linear_before_reset 0 also
 * r * h into rh (the second product's row). */
static void gru_gates_zr(const rnn_job *j, int64_t b, int64_t t) {
  int64_t n = j->hidden;
  float *g = j->gates + b * (j->gh + n), *h = j->h + b * n;
  const float *xw = xw_row(j, t, b), *hr = j->hr + b * hr_outputs(j);
  for (int64_t i = 0; i < 2 * n; i++) g[i] = xw[i] + hr[i];
  clip(j, g, 2 * n);
  act(j, KL_ACT_SIGMOID, g, 2 * n);
  if (two_products(j))
    for (int64_t i = 0; i < n; i++) j->rh[b * n + i] = g[n + i] * h[i];
}

/* GRU, second part: the candidate and the new h. */
static void gru_finish(const rnn_job *j, int64_t b, int64_t t) {
  int64_t n = j->hidden;
  float *g = j->gates + b * (j->gh + n), *h = j->h + b * n, *cand = g + 2 * n;
  const float *z = g, *reset = g + n, *xw = xw_row(j, t, b) + 2 * n;
  if (two_products(j)) {
    const float *rec = j->rhr + b * n;
    for (int64_t i = 0; i < n; i++) cand[i] = xw[i] + rec[i];
  } else {
    const float *rec = j->hr + b * j->gh + 2 * n, *rb = j->rbh + j->d * n;
    for (int64_t i = 0; i < n; i++) cand[i] = xw[i] + reset[i] * (rec[i] + rb[i]);
  }
  clip(j, cand, n);
  act(j, KL_ACT_TANH, cand, n);
  for (int64_t i = 0; i < n; i++) h[i] = (1.0f - z[i]) * cand[i] + z[i] * h[i];
}

static void store_y(const rnn_job *j, int64_t b, int64_t t) {
  if (j->y)
    memcpy(j->y + y_at(j, t, j->d, b), j->h + b * j->hidden, sizeof(float) * (size_t)j->hidden);
}

/* The rows' tasks: one batch row each, skipped past its length. */
static void first_task(void *arg, int64_t b) {
  const rnn_job *j = arg;
  int64_t t = time_of(j, b);
  if (t < 0) {
    if (two_products(j)) memset(j->rh + b * j->hidden, 0, sizeof(float) * (size_t)j->hidden);
    return;
  }
  if (j->op == KL_OP_LSTM) lstm_row(j, b, t);
  else if (j->op == KL_OP_RNN) rnn_row(j, b, t);
  else {
    gru_gates_zr(j, b, t);
    if (two_products(j)) return; /* finished after the second product */
    gru_finish(j, b, t);
  }
  store_y(j, b, t);
}

static void second_task(void *arg, int64_t b) {
  const rnn_job *j = arg;
  int64_t t = time_of(j, b);
  if (t < 0) return;
  gru_finish(j, b, t);
  store_y(j, b, t);
}

static void load_state(const rnn_job *j, int d) {
  size_t row = sizeof(float) * (size_t)j->hidden;
  for (int64_t b = 0; b < j->batch; b++) {
    float *h = j->h + b * j->hidden, *c = j->cell + b * j->hidden;
    if (j->h0) memcpy(h, j->h0 + state_at(j, d, b), row);
    else memset(h, 0, row);
    if (j->c0) memcpy(c, j->c0 + state_at(j, d, b), row);
    else memset(c, 0, row);
  }
}

static void store_state(const rnn_job *j, int d) {
  size_t row = sizeof(float) * (size_t)j->hidden;
  for (int64_t b = 0; b < j->batch; b++) {
    if (j->yh) memcpy(j->yh + state_at(j, d, b), j->h + b * j->hidden, row);
    if (j->yc) memcpy(j->yc + state_at(j, d, b), j->cell + b * j->hidden, row);
    for (int64_t t = j->lens[b]; j->y && t < j->seq; t++)
      memset(j->y + y_at(j, t, d, b), 0, row);
  }
}

static kiln_status run_direction(rnn_job *j, const rnn_state *s, int d) {
  int64_t longest = 0, row_work = 8 * (j->gh + j->hidden);
  for (int64_t b = 0; b < j->batch; b++) longest = j->lens[b] > longest ? j->lens[b] : longest;
  j->d = d;
  load_state(j, d);
  const float *r = (const float *)j->c->in[IN_R]->data + d * j->gh * j->hidden;
  for (j->s = 0; j->s < longest; j->s++) {
    kiln_status st = product(j, j->h, j->batch, j->hidden, hr_outputs(j), &s->r[d], r, NULL,
                             j->hr);
    if (st != KILN_OK) return st;
    kl_isa_parallel(j->c, j->batch, j->batch * row_work, first_task, j);
    if (!two_products(j)) continue;
    st = product(j, j->rh, j->batch, j->hidden, j->hidden, &s->rh[d],
                 r + 2 * j->hidden * j->hidden, NULL, j->rhr);
    if (st != KILN_OK) return st;
    kl_isa_parallel(j->c, j->batch, j->batch * row_work, second_task, j);
  }
  store_state(j, d);
  return KILN_OK;
}

static const float *data_of(const kl_kernel_ctx *c, int i) {
  return i < c->n_in && c->in[i] ? c->in[i]->data : NULL;
}

static float *out_of(const kl_kernel_ctx *c, int k) {
  return k < c->n_out && c->out[k] ? c->out[k]->data : NULL;
}

int kl_run_rnn(kl_kernel_ctx *c, const kl_isa_fns *f, bool const_weights) {
  rnn_job j = {.f = f, .c = c, .op = c->node->op};
  kiln_status st = kl_rnn_init(c->node, &j.r, c->e);
  if (st != KILN_OK) return st;
  const kl_tensor *x = c->in[IN_X], *r = c->in[IN_R];
  j.seq = x->dims[j.r.batch_first ? 1 : 0];
  j.batch = x->dims[j.r.batch_first ? 0 : 1];
  j.input = x->dims[2];
  j.hidden = r->dims[2];
  j.gh = j.r.gates * j.hidden;
  j.x = x->data;
  j.p = j.op == KL_OP_LSTM ? data_of(c, IN_P) : NULL;
  j.h0 = data_of(c, IN_H0);
  j.c0 = j.op == KL_OP_LSTM ? data_of(c, IN_C0) : NULL;
  j.y = out_of(c, 0);
  j.yh = out_of(c, 1);
  j.yc = j.op == KL_OP_LSTM ? out_of(c, 2) : NULL;
  if (j.batch == 0 || j.hidden == 0) return KILN_OK; /* (infer made the outputs empty) */
  rnn_state *s = NULL;
  st = prepare(c, &j, const_weights, &s);
  if (st == KILN_OK) st = read_lens(&j);
  if (st == KILN_OK) {
    fill_bias(&j);
    if (j.seq > 0) st = project_inputs(&j, s);
  }
  for (int d = 0; st == KILN_OK && d < j.r.dirs; d++) st = run_direction(&j, s, d);
  if (!c->state) kl_rnn_state_free(s);
  return st;
}
