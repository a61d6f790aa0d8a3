/* Winograd F(2x2, 3x3) convolutions over channels-last tensors (dnnl_wino.h), for the
 * level where oneDNN 2.6 has no Winograd of its own (AVX2: only its direct jit:avx2
 * kernels, 40 to 90 GFLOP/s on a Zen 3 core; AVX-512 has jit_fp32_wino_2x3).
 *
 * Shapes: X [N, H, W, C] in memory (channels-last), W [K, C, 3, 3], Bias [K], Sum and Y
 * [N, OH, OW, K]; stride 1, dilation 1, one group, pads (pt, pl) before, OH = H + pt +
 * pb - 2. The output is cut into 2x2 tiles, T = N * ceil(OH / 2) * ceil(OW / 2), done
 * TB at a time:
 *   V [16][TB][C]  B^T d B of each tile's 4x4 input window (the level's in_tile)
 *   M [16][TB][K]  V[x] U[x] for each x < 16: one batched oneDNN matmul, with
 *                  U [16][C][K] = G g G^T of the weights, packed once
 *   Y              A^T M A + Bias + Sum (out_tile), then the activation
 * with G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]. 16 products of C multiply-adds
 * make 4 outputs where the direct form takes 36: 2.25 times fewer. V and M are regions
 * of the session's workspace; each of their 16 planes is padded by 16 floats, so that
 * the planes' rows (written together by in_tile) do not fall on one cache set.
 *
 * X, or Y and Sum, held plain ([N, C, H, W]: a tensor kiln's plain kernels read, such as
 * an FPN's lateral sums and outputs) are transposed to channels-last in the workspace
 * first (X, Sum) or last (Y), in parallel parts of TR_PART positions: one pass each way,
 * as oneDNN's direct convolution reorders them too, and the tiles stay as above. */
#include "backends/cpu/dnnl_wino.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"

#include <stdlib.h>
#include <string.h>

#define WINO_TB 96  /* tiles per block: V and M of a block stay in the L2 cache */
#define WINO_PAD 16 /* floats after each plane of V and M */
#define TR_PART 64  /* spatial positions a task of the layout transposes takes */

struct kl_wino {
  kl_dnnl_engine *eng;
  const kl_isa_fns *fns;
  int64_t n, h, w, c, k, oh, ow, pt, pl, tiles_h, tiles_w, tiles, tb, tail;
  size_t vs, ms;               /* plane strides of V and M, in floats */
  size_t v_off, m_off, sp_off; /* regions of the workspace */
  size_t x_off, y_off;         /* and X's, Y's channels-last copies (when held plain) */
  bool x_cl, y_cl;
  dnnl_primitive_t mm[2];      /* a whole block, and the last, shorter one (tail) */
  dnnl_memory_t v[2], m[2], sp[2], u;
  void *u_data;                /* U packed in the layout the matmul asked for */
  size_t u_bytes;
  float *zeros;                /* C zeros: the taps in the padding */
  bool has_act;
  kl_act act;
  uint64_t ws_gen;
};

bool kl_wino_fits(const kl_wino_shape *s) {
  return s->c >= 32 && s->k >= 32 && s->oh > 0 && s->ow > 0 && s->n > 0;
}

/* U[x][c][k] = (G g G^T)[x] for g = W[k][c], in double, then rounded once. */
static float *transform_weights(const float *w, int64_t k, int64_t c) {
  static const double g[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  float *u = malloc(sizeof(float) * 16 * (size_t)(c * k));
  if (!u) return NULL;
  for (int64_t ko = 0; ko < k; ko++)
    for (int64_t ci = 0; ci < c; ci++) {
      const float *f = w + (ko * c + ci) * 9;
      double gf[4][3]; /* G g */
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
          gf[i][j] = g[i][0] * f[j] + g[i][1] * f[3 + j] + g[i][2] * f[6 + j];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) /* (G g) G^T */
          u[((size_t)(4 * i + j) * (size_t)c + (size_t)ci) * (size_t)k + (size_t)ko] =
              (float)(gf[i][0] * g[j][0] + gf[i][1] * g[j][1] + gf[i][2] * g[j][2]);
    }
  return u;
}

/* The batched product of rows tiles: V [16, rows, C] x U [16, C, K] -> M [16, rows, K]. */
static dnnl_status_t make_matmul(kl_wino *p, int slot, int64_t rows, dnnl_memory_desc_t *u_md,
                                 size_t *sp_bytes) {
  dnnl_memory_desc_t a, b, y;
  dnnl_dims_t ad = {16, rows, p->c}, bd = {16, p->c, p->k}, yd = {16, rows, p->k};
  dnnl_dims_t as = {(dnnl_dim_t)p->vs, p->c, 1}, ys = {(dnnl_dim_t)p->ms, p->k, 1};
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_matmul_desc_t md;
  dnnl_status_t s = dnnl_memory_desc_init_by_strides(&a, 3, ad, dnnl_f32, as);
  if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&b, 3, bd, dnnl_f32, dnnl_format_tag_any);
  if (s == dnnl_success) s = dnnl_memory_desc_init_by_strides(&y, 3, yd, dnnl_f32, ys);
  if (s == dnnl_success) s = dnnl_matmul_desc_init(&md, &a, &b, NULL, &y);
  if (s == dnnl_success) s = dnnl_primitive_attr_create(&attr);
  if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, &md, attr, p->eng->engine, NULL);
  if (s == dnnl_success) s = dnnl_primitive_create(&p->mm[slot], pd);
  if (s == dnnl_success) s = dnnl_memory_create(&p->v[slot], &a, p->eng->engine, DNNL_MEMORY_NONE);
  if (s == dnnl_success) s = dnnl_memory_create(&p->m[slot], &y, p->eng->engine, DNNL_MEMORY_NONE);
  if (s == dnnl_success) {
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
    if (bytes > *sp_bytes) *sp_bytes = bytes;
    if (bytes) s = dnnl_memory_create(&p->sp[slot], sp, p->eng->engine, DNNL_MEMORY_NONE);
    /* both products must want U in one layout: it is packed once */
    const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (s == dnnl_success && slot == 0) *u_md = *want;
    else if (s == dnnl_success && !dnnl_memory_desc_equal(u_md, want)) s = dnnl_unimplemented;
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return s;
}

/* U from w, reordered into the layout the products asked for. */
static dnnl_status_t pack_u(kl_wino *p, const float *w, const dnnl_memory_desc_t *u_md) {
  float *u = transform_weights(w, p->k, p->c);
  if (!u) return dnnl_out_of_memory;
  p->u_bytes = dnnl_memory_desc_get_size(u_md);
  if (posix_memalign(&p->u_data, 64, p->u_bytes ? p->u_bytes : 64) != 0) {
    p->u_data = NULL;
    free(u);
    return dnnl_out_of_memory;
  }
  dnnl_memory_desc_t plain;
  dnnl_dims_t ud = {16, p->c, p->k};
  dnnl_memory_t from = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t r = NULL;
  dnnl_status_t s = dnnl_memory_desc_init_by_tag(&plain, 3, ud, dnnl_f32, dnnl_abc);
  if (s == dnnl_success) s = dnnl_memory_create(&from, &plain, p->eng->engine, u);
  if (s == dnnl_success) s = dnnl_memory_create(&p->u, u_md, p->eng->engine, p->u_data);
  if (s == dnnl_success)
    s = dnnl_reorder_primitive_desc_create(&pd, &plain, p->eng->engine, u_md, p->eng->engine, NULL);
  if (s == dnnl_success) s = dnnl_primitive_create(&r, pd);
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, p->u}};
  if (s == dnnl_success) s = dnnl_primitive_execute(r, p->eng->stream, 2, args);
  if (s == dnnl_success) s = dnnl_stream_wait(p->eng->stream);
  if (r) dnnl_primitive_destroy(r);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (from) dnnl_memory_destroy(from);
  free(u);
  return s;
}

kiln_status kl_wino_create(kl_dnnl_engine *eng, const kl_wino_shape *s, const float *w,
                           const kl_node *n, kl_wino **out, kl_err *e) {
  *out = NULL;
  kl_wino *p = calloc(1, sizeof *p);
  if (!p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a Winograd plan");
  p->eng = eng;
  p->fns = kl_cpu_isa_fns(kl_isa_level());
  p->n = s->n, p->h = s->h, p->w = s->w, p->c = s->c, p->k = s->k, p->oh = s->oh, p->ow = s->ow;
  p->pt = s->pt, p->pl = s->pl;
  p->x_cl = s->x_cl, p->y_cl = s->y_cl;
  p->tiles_h = (p->oh + 1) / 2, p->tiles_w = (p->ow + 1) / 2;
  p->tiles = p->n * p->tiles_h * p->tiles_w;
  p->tb = p->tiles < WINO_TB ? p->tiles : WINO_TB;
  p->tail = p->tiles % p->tb;
  p->vs = (size_t)(p->tb * p->c) + WINO_PAD;
  p->ms = (size_t)(p->tb * p->k) + WINO_PAD;
  bool has;
  if (!kl_isa_fused_act(n, &has, &p->act)) { /* kl_wino_fits' caller checked it */
    free(p);
    return kl_fail(e, KILN_ERR_INTERNAL, "a Winograd convolution with an activation kiln lacks");
  }
  p->has_act = has;
  dnnl_memory_desc_t u_md;
  size_t sp_bytes = 0, used = 0;
  dnnl_status_t st = make_matmul(p, 0, p->tb, &u_md, &sp_bytes);
  if (st == dnnl_success && p->tail) st = make_matmul(p, 1, p->tail, &u_md, &sp_bytes);
  if (st == dnnl_success) st = pack_u(p, w, &u_md);
  if (st == dnnl_success && !(p->zeros = calloc((size_t)p->c, sizeof(float))))
    st = dnnl_out_of_memory;
  p->v_off = kl_dnnl_ws_take(&used, sizeof(float) * 16 * p->vs);
  p->m_off = kl_dnnl_ws_take(&used, sizeof(float) * 16 * p->ms);
  p->sp_off = kl_dnnl_ws_take(&used, sp_bytes);
  /* the tensors exist, so these byte counts do not overflow */
  if (!p->x_cl) p->x_off = kl_dnnl_ws_take(&used, sizeof(float) * (size_t)(p->n * p->h * p->w * p->c));
  if (!p->y_cl) p->y_off = kl_dnnl_ws_take(&used, sizeof(float) * (size_t)(p->n * p->oh * p->ow * p->k));
  if (st == dnnl_success) st = kl_dnnl_ws_reserve(eng, used);
  if (st != dnnl_success) {
    kl_wino_free(p);
    return kl_fail(e, st == dnnl_out_of_memory ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_INTERNAL,
                   "oneDNN failed to make a Winograd convolution's products (status %d)",
                   (int)st);
  }
  *out = p;
  return KILN_OK;
}

void kl_wino_free(kl_wino *p) {
  if (!p) return;
  for (int i = 0; i < 2; i++) {
    if (p->mm[i]) dnnl_primitive_destroy(p->mm[i]);
    if (p->v[i]) dnnl_memory_destroy(p->v[i]);
    if (p->m[i]) dnnl_memory_destroy(p->m[i]);
    if (p->sp[i]) dnnl_memory_destroy(p->sp[i]);
  }
  if (p->u) dnnl_memory_destroy(p->u);
  free(p->u_data);
  free(p->zeros);
  free(p);
}

size_t kl_wino_held_bytes(const kl_wino *p) { return p ? p->u_bytes : 0; }

/* ---- running ---- */

typedef struct wino_job {
  const kl_wino *p;
  const float *x, *bias, *sum;
  float *y, *v, *m;
  int64_t t0; /* the block's first tile */
} wino_job;

static void tile_at(const kl_wino *p, int64_t t, int64_t *n, int64_t *ty, int64_t *tx) {
  *tx = t % p->tiles_w;
  *ty = t / p->tiles_w % p->tiles_h;
  *n = t / (p->tiles_w * p->tiles_h);
}

static void in_task(void *arg, int64_t i) {
  const wino_job *j = arg;
  const kl_wino *p = j->p;
  int64_t n, ty, tx;
  tile_at(p, j->t0 + i, &n, &ty, &tx);
  const float *d[16];
  for (int r = 0; r < 4; r++)
    for (int s = 0; s < 4; s++) {
      int64_t iy = 2 * ty - p->pt + r, ix = 2 * tx - p->pl + s;
      d[4 * r + s] = iy < 0 || iy >= p->h || ix < 0 || ix >= p->w
                         ? p->zeros
                         : j->x + ((n * p->h + iy) * p->w + ix) * p->c;
    }
  p->fns->conv->in_tile(d, (size_t)p->c, j->v + i * p->c, p->vs);
}

static void out_task(void *arg, int64_t i) {
  const wino_job *j = arg;
  const kl_wino *p = j->p;
  int64_t n, ty, tx;
  tile_at(p, j->t0 + i, &n, &ty, &tx);
  float *y[4];
  const float *sum[4];
  for (int r = 0; r < 2; r++)
    for (int s = 0; s < 2; s++) {
      int64_t oy = 2 * ty + r, ox = 2 * tx + s, at = ((n * p->oh + oy) * p->ow + ox) * p->k;
      bool in = oy < p->oh && ox < p->ow;
      y[2 * r + s] = in ? j->y + at : NULL;
      sum[2 * r + s] = in && j->sum ? j->sum + at : NULL;
    }
  p->fns->conv->out_tile(j->m + i * p->k, p->ms, (size_t)p->k, j->bias, y, j->sum ? sum : NULL);
  for (int q = 0; p->has_act && q < 4; q++)
    if (y[q]) p->fns->elt->unary(&p->act, y[q], y[q], (size_t)p->k);
}

/* [n][ch][sp] <-> [n][sp][ch] (to_cl: plain to channels-last), TR_PART positions a task. */
typedef struct wino_tr {
  const kl_copy_fns *copy;
  const float *src;
  float *dst;
  int64_t ch, sp, parts;
  bool to_cl;
} wino_tr;

static void tr_task(void *arg, int64_t i) {
  const wino_tr *t = arg;
  int64_t img = i / t->parts, s0 = i % t->parts * TR_PART;
  size_t len = (size_t)(t->sp - s0 < TR_PART ? t->sp - s0 : TR_PART);
  const float *src = t->src + img * t->ch * t->sp;
  float *dst = t->dst + img * t->ch * t->sp;
  if (t->to_cl)
    t->copy->transpose2d(4, src + s0, (size_t)t->sp, dst + s0 * t->ch, (size_t)t->ch,
                         (size_t)t->ch, len);
  else
    t->copy->transpose2d(4, src + s0 * t->ch, (size_t)t->ch, dst + s0, (size_t)t->sp, len,
                         (size_t)t->ch);
}

void kl_cl_transpose(const kl_isa_fns *f, const kl_kernel_ctx *c, const float *src, float *dst,
                     int64_t n, int64_t ch, int64_t sp, bool to_cl) {
  wino_tr t = {f->copy, src, dst, ch, sp, (sp + TR_PART - 1) / TR_PART, to_cl};
  kl_isa_parallel(c, n * t.parts, n * ch * sp, tr_task, &t);
}

static void transpose(const kl_wino *p, const kl_kernel_ctx *c, const float *src, float *dst,
                      int64_t ch, int64_t sp, bool to_cl) {
  kl_cl_transpose(p->fns, c, src, dst, p->n, ch, sp, to_cl);
}

kiln_status kl_wino_run(kl_wino *p, const kl_kernel_ctx *c, const float *x, float *y,
                        const float *bias, const float *sum) {
  char *ws = p->eng->ws;
  dnnl_status_t s = dnnl_success;
  if (p->ws_gen != p->eng->ws_gen) { /* the workspace moved since the last run */
    for (int i = 0; i < 2 && s == dnnl_success; i++) {
      if (!p->mm[i]) continue;
      s = dnnl_memory_set_data_handle(p->v[i], ws + p->v_off);
      if (s == dnnl_success) s = dnnl_memory_set_data_handle(p->m[i], ws + p->m_off);
      if (s == dnnl_success && p->sp[i]) s = dnnl_memory_set_data_handle(p->sp[i], ws + p->sp_off);
    }
    p->ws_gen = p->eng->ws_gen;
  }
  kl_dnnl_ws_enter(p->eng);
  float *ys = p->y_cl ? y : (float *)(ws + p->y_off);
  if (!p->x_cl) {
    float *xt = (float *)(ws + p->x_off);
    transpose(p, c, x, xt, p->c, p->h * p->w, true);
    x = xt;
  }
  if (!p->y_cl && sum) { /* Sum is held as Y: into Y's channels-last copy, read in place */
    transpose(p, c, sum, ys, p->k, p->oh * p->ow, true);
    sum = ys;
  }
  wino_job j = {p, x, bias, sum, ys, (float *)(ws + p->v_off), (float *)(ws + p->m_off), 0};
  for (; s == dnnl_success && j.t0 < p->tiles; j.t0 += p->tb) {
    int64_t nt = p->tiles - j.t0 < p->tb ? p->tiles - j.t0 : p->tb;
    int slot = nt == p->tb ? 0 : 1;
    kl_isa_parallel(c, nt, nt * 16 * p->c, in_task, &j);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p->v[slot]}, {DNNL_ARG_WEIGHTS, p->u},
                               {DNNL_ARG_DST, p->m[slot]}, {DNNL_ARG_SCRATCHPAD, p->sp[slot]}};
    s = dnnl_primitive_execute(p->mm[slot], p->eng->stream, p->sp[slot] ? 4 : 3, args);
    if (s == dnnl_success) s = dnnl_stream_wait(p->eng->stream);
    if (s == dnnl_success) kl_isa_parallel(c, nt, nt * 16 * p->k, out_task, &j);
  }
  if (s == dnnl_success && !p->y_cl) transpose(p, c, ys, y, p->k, p->oh * p->ow, false);
  return s == dnnl_success ? KILN_OK
                           : kl_fail(c->e, KILN_ERR_INTERNAL, "oneDNN failed to run a Winograd "
                                     "convolution's products (status %d)", (int)s);
}
