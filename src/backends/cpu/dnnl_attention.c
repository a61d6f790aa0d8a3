/* kiln.Attention on oneDNN (dnnl.h): four primitives per set of input shapes.
 *
 * (At precision bf16 at the AMX level, kiln.MultiHeadAttention within the bounds of
 * kl_mha_amx_fits runs on kiln's AMX tiles instead, isa/run_mha_amx.c, in a region of
 * the same workspace: BERT-base's 12 attentions at sequence 128 took 2.7 ms there
 * against 3.7 on the primitives below at 1 thread, 1.8 against 4.0 at 2.)
 *
 *   Q [..., S, D], Kt [..., D, T], V [..., T, Dv], Mask broadcast to [..., S, T]
 *   scores = (Q Kt) * scale      matmul with an output scale, into a buffer of ours
 *   scores += Mask               binary add, in place (when there is a Mask)
 *   scores = softmax(scores)     along the last axis, in place
 *   Y = scores V                 matmul
 *
 * kiln.MultiHeadAttention runs the same four primitives on strided views of its
 * token-major operands (ref/mha.h): Q as [B, H, S, D] with strides [S*row, D, row, 1],
 * Kt as [B, H, D, T] with strides [T*row, D, 1, row], V likewise, Y written as
 * [B, H, S, Dv] into [B, S, H*Dv]; packed QKV is Q's buffer at three offsets. The
 * heads are never copied out.
 *
 * With zero_masked_rows=1 the rows of the scores that have no value above -inf after
 * the mask (every key masked) are found before the softmax and set to 0 after it, so
 * that their result is 0 (the reference's rule), whatever the softmax made of them.
 *
 * Precision bf16 (the engine's): Q, Kt and V are first copied from those views into
 * dense bf16 copies in the workspace ([..., S, D], Kt as K's rows [..., T, D], [..., T,
 * Dv]: on the strided views oneDNN 2.6 runs its bf16 matmul as gemm:jit, 7x slower
 * than float32, on dense ones brg:avx512_core_amx_bf16), both products take bf16
 * operands and sum in float32, the scores stay float32 through the mask and the
 * softmax, which writes the probabilities in bf16 for the second product; Y is float32.
 * For kiln.MultiHeadAttention every copy is rows of one head's D values, which kiln's
 * conversion makes on the node's threads (own_copies: BERT-base's three took 0.045 ms
 * each on oneDNN's reorder at 1 thread, 0.036 at 2); kiln.Attention's go through
 * oneDNN's reorders (its Kt is transposed on the way).
 *
 * The reference keeps the scores in double; here they are float32, as in other
 * runtimes. Shapes oneDNN cannot do run the reference kernel. Every buffer is made
 * with the entry for a set of shapes, so running an existing entry allocates nothing. */
#include "backends/cpu/dnnl_cache.h"
#include "backends/cpu/dnnl_engine.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"
#include "backends/cpu/ref/mha.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { AT_QK, AT_MASK, AT_SOFTMAX, AT_PV, AT_STEPS };

typedef struct at_entry {
  bool fallback;
  /* kiln.MultiHeadAttention at precision bf16 on kiln's AMX tiles (kl_run_mha_amx) in a
   * region of the workspace, no primitive of oneDNN's */
  bool tiles;
  size_t tiles_off, tiles_bytes;
  dnnl_primitive_t prim[AT_STEPS];
  /* precision bf16: operand k (Q, Kt, V) reordered from its float32 view (q, kt, v
   * below) into a dense bf16 copy in the workspace at cvt_off[k] (cvt_dst, which the
   * products read) */
  dnnl_primitive_t cvt[3];
  dnnl_memory_t cvt_dst[3];
  /* ... or, for kiln.MultiHeadAttention, kiln's copies of rows (own_copies): operand k
   * is batch x heads x rows[k] rows of width[k] values, stride[k] apart in its view */
  bool own_cvt;
  int64_t batch, heads, cv_rows[3], cv_width[3], cv_stride[3];
  size_t cvt_off[3], probs_off;
  dnnl_memory_t probs; /* the softmax's bf16 output, read by the second product */
  char slow_impl[32]; /* a step's oneDNN reference implementation, "" when none */
  char impl[48];      /* the first product's implementation (" bf16" added in bf16) */
  dnnl_memory_t q, kt, mask, v, y, scores, scratch[AT_STEPS];
  int64_t off[3]; /* element offsets of Q, K, V in their buffers (packed QKV) */
  int64_t rows, len; /* the scores as rows of len values */
  /* The scores, the scratchpad the steps share and, for zero_masked_rows, a flag per
   * row of the scores: regions of the session's workspace */
  size_t scores_off, scratch_off, dead_off;
  uint64_t ws_gen; /* the workspace generation the memories point into (0: none) */
} at_entry;

typedef struct at_node {
  kl_dnnl_engine *eng;  /* the session's, not owned */
  bool bf16;            /* precision bf16 */
  dnnl_engine_t engine; /* eng's engine and stream */
  dnnl_stream_t stream;
  bool ran_reference;
  const char *ran_slow; /* the last run's slow_impl, NULL when it had none */
  const char *ran_impl; /* the last run's impl, NULL when the reference ran */
  kl_dnnl_cache cache;  /* per set of the inputs' shapes, an entry of slots */
  at_entry slots[KL_DNNL_CACHE_SLOTS];
} at_node;

typedef struct at_mds {
  int nd;
  int64_t off[3];
  bool bf16;
  bool mha;         /* kiln.MultiHeadAttention: geom is its geometry (describe_mha) */
  kl_mha_geom geom;
  dnnl_memory_desc_t q, kt, mask, v, y, scores, probs;
  dnnl_memory_desc_t dense[3]; /* bf16: Q, Kt, V as the products read them */
} at_mds;

static const kl_tensor *mask_of(const kl_kernel_ctx *c) { return c->n_in > 3 ? c->in[3] : NULL; }

/* t's dims right-aligned in nd dims, 1 in front. */
static void pad_dims(const kl_tensor *t, int nd, dnnl_dims_t dims) {
  for (int i = 0; i < nd; i++) dims[i] = 1;
  for (int i = 0; i < t->rank; i++) dims[nd - t->rank + i] = t->dims[i];
}

static dnnl_status_t plain_as(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims,
                              dnnl_data_type_t dt) {
  dnnl_dims_t strides;
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i] > 0 ? dims[i] : 1;
  }
  return dnnl_memory_desc_init_by_strides(md, nd, dims, dt, strides);
}

static dnnl_status_t plain(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims) {
  return plain_as(md, nd, dims, dnnl_f32);
}

static dnnl_status_t strided(dnnl_memory_desc_t *md, int64_t d0, int64_t d1, int64_t d2,
                             int64_t d3, int64_t s0, int64_t s1, int64_t s2, int64_t s3) {
  dnnl_dims_t dims = {d0, d1, d2, d3}, strides = {s0, s1, s2, s3};
  return dnnl_memory_desc_init_by_strides(md, 4, dims, dnnl_f32, strides);
}

/* MultiHeadAttention's operands as strided 4-D views (see the top of the file). */
static dnnl_status_t describe_mha(const kl_kernel_ctx *c, at_mds *m) {
  kl_mha_geom a;
  if (kl_mha_geometry(c, &a) != KILN_OK) return dnnl_invalid_arguments;
  m->mha = true;
  m->geom = a;
  int64_t b = a.batch, h = a.heads, s = a.seq, t = a.keys, d = a.d, dv = a.dv;
  m->nd = 4;
  m->off[0] = 0;
  m->off[1] = a.koff;
  m->off[2] = a.voff;
  dnnl_status_t st = strided(&m->q, b, h, s, d, s * a.qrow, d, a.qrow, 1);
  if (st == dnnl_success) st = strided(&m->kt, b, h, d, t, t * a.krow, d, 1, a.krow);
  if (st == dnnl_success) st = strided(&m->v, b, h, t, dv, t * a.vrow, dv, a.vrow, 1);
  if (st == dnnl_success) st = strided(&m->y, b, h, s, dv, s * h * dv, dv, h * dv, 1);
  if (st == dnnl_success) st = plain(&m->scores, 4, (dnnl_dims_t){b, h, s, t});
  if (st == dnnl_success) st = plain_as(&m->probs, 4, (dnnl_dims_t){b, h, s, t}, dnnl_bf16);
  if (st == dnnl_success && a.mask) {
    dnnl_dims_t md;
    pad_dims(a.mask, 4, md);
    st = plain(&m->mask, 4, md);
  }
  return st;
}

/* The operands at the output's rank; dnnl_unimplemented for ranks below 2. */
static dnnl_status_t describe_views(const kl_kernel_ctx *c, at_mds *m) {
  m->off[0] = m->off[1] = m->off[2] = 0;
  m->mha = false;
  if (c->node->op == KL_OP_KilnMultiHeadAttention) return describe_mha(c, m);
  const kl_tensor *q = c->in[0], *kt = c->in[1], *v = c->in[2], *y = c->out[0];
  if (q->rank < 2 || kt->rank < 2 || v->rank < 2 || y->rank < 2 || y->rank > KL_MAX_RANK)
    return dnnl_unimplemented;
  int nd = y->rank;
  dnnl_dims_t qd, kd, vd, yd, sd, md;
  pad_dims(q, nd, qd);
  pad_dims(kt, nd, kd);
  pad_dims(v, nd, vd);
  pad_dims(y, nd, yd);
  for (int i = 0; i < nd - 2; i++) sd[i] = qd[i] > kd[i] ? qd[i] : kd[i];
  sd[nd - 2] = qd[nd - 2];
  sd[nd - 1] = kd[nd - 1];
  m->nd = nd;
  dnnl_status_t s = plain(&m->q, nd, qd);
  if (s == dnnl_success) s = plain(&m->kt, nd, kd);
  if (s == dnnl_success) s = plain(&m->v, nd, vd);
  if (s == dnnl_success) s = plain(&m->y, nd, yd);
  if (s == dnnl_success) s = plain(&m->scores, nd, sd);
  if (s == dnnl_success) s = plain_as(&m->probs, nd, sd, dnnl_bf16);
  if (s == dnnl_success && mask_of(c)) {
    pad_dims(mask_of(c), nd, md);
    s = plain(&m->mask, nd, md);
  }
  return s;
}

/* ... and, at precision bf16, the dense bf16 copies of Q, Kt and V. */
static dnnl_status_t describe(const at_node *a, const kl_kernel_ctx *c, at_mds *m) {
  m->bf16 = a->bf16;
  dnnl_status_t s = describe_views(c, m);
  const dnnl_memory_desc_t *views[3] = {&m->q, &m->kt, &m->v};
  for (int k = 0; k < 3 && m->bf16 && s == dnnl_success; k++)
    s = plain_as(&m->dense[k], views[k]->ndims, views[k]->dims, dnnl_bf16);
  if (m->bf16 && s == dnnl_success) { /* Kt as K's rows, [..., T, D] (a copy, no transpose) */
    dnnl_memory_desc_t *kt = &m->dense[1];
    int nd = kt->ndims;
    dnnl_dims_t st;
    for (int i = 0; i < nd; i++) st[i] = kt->format_desc.blocking.strides[i];
    st[nd - 1] = kt->dims[nd - 2];
    st[nd - 2] = 1;
    s = dnnl_memory_desc_init_by_strides(kt, nd, kt->dims, dnnl_bf16, st);
  }
  return s;
}

/* Primitive `step` from its op descriptor, with a scratchpad memory of ours (its
 * buffer comes later; the largest size goes into *need). */
static dnnl_status_t make(at_node *a, at_entry *en, int step, const void *desc, float scale,
                          size_t *need) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s = dnnl_primitive_attr_create(&attr);
  if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (s == dnnl_success && scale != 1.0f) s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale);

  if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, desc, attr, a->engine, NULL);
  const char *impl = NULL;
  if (s == dnnl_success && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) ==
                               dnnl_success && impl && kl_dnnl_impl_is_slow(impl) &&
      !en->slow_impl[0])
    snprintf(en->slow_impl, sizeof en->slow_impl, "%s", impl);
  if (s == dnnl_success && step == AT_QK && impl)
    snprintf(en->impl, sizeof en->impl, "%s%s", impl, a->bf16 ? " bf16" : "");
  if (s == dnnl_success) s = dnnl_primitive_create(&en->prim[step], pd);
  if (s == dnnl_success) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t bytes = md ? dnnl_memory_desc_get_size(md) : 0;
    if (bytes > *need) *need = bytes;
    if (bytes) s = dnnl_memory_create(&en->scratch[step], md, a->engine, DNNL_MEMORY_NONE);
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return s;
}

static dnnl_status_t make_steps(at_node *a, at_entry *en, const kl_kernel_ctx *c,
                                const at_mds *m, size_t *need) {
  float scale = kl_attr_float(c->node, "scale", 1.0f);
  dnnl_matmul_desc_t qk, pv;
  dnnl_binary_desc_t add;
  dnnl_softmax_v2_desc_t sm;
  const dnnl_memory_desc_t *q = m->bf16 ? &m->dense[0] : &m->q;
  const dnnl_memory_desc_t *kt = m->bf16 ? &m->dense[1] : &m->kt;
  const dnnl_memory_desc_t *v = m->bf16 ? &m->dense[2] : &m->v;
  /* (the Mask as a binary post-op of the first product instead: 0.13 ms against 0.076 +
   * 0.025 apart, BERT-base's bf16 heads on brg:avx512_core_amx_bf16) */
  dnnl_status_t s = dnnl_matmul_desc_init(&qk, q, kt, NULL, &m->scores);
  if (s == dnnl_success) s = make(a, en, AT_QK, &qk, scale, need);
  if (s == dnnl_success && mask_of(c)) s = dnnl_binary_desc_init(&add, dnnl_binary_add,
                                                                 &m->scores, &m->mask, &m->scores);
  if (s == dnnl_success && mask_of(c)) s = make(a, en, AT_MASK, &add, 1.0f, need);
  const dnnl_memory_desc_t *probs = a->bf16 ? &m->probs : &m->scores;
  if (s == dnnl_success)
    s = dnnl_softmax_v2_forward_desc_init(&sm, dnnl_forward_inference, dnnl_softmax_accurate,
                                          &m->scores, probs, m->nd - 1);
  if (s == dnnl_success) s = make(a, en, AT_SOFTMAX, &sm, 1.0f, need);
  if (s == dnnl_success) s = dnnl_matmul_desc_init(&pv, probs, v, NULL, &m->y);
  if (s == dnnl_success) s = make(a, en, AT_PV, &pv, 1.0f, need);
  return s;
}

/* Precision bf16: a reorder of Q, Kt and V each from its float32 view to its dense
 * bf16 copy in the workspace (its offset taken from *used). */
static dnnl_status_t make_conversions(at_node *a, at_entry *en, const at_mds *m, size_t *used) {
  const dnnl_memory_desc_t *views[3] = {&m->q, &m->kt, &m->v};
  dnnl_status_t s = dnnl_success;
  for (int k = 0; k < 3 && s == dnnl_success; k++) {
    dnnl_primitive_desc_t pd = NULL;
    if (!en->own_cvt)
      s = dnnl_reorder_primitive_desc_create(&pd, views[k], a->engine, &m->dense[k],
                                             a->engine, NULL);
    if (s == dnnl_success && pd) s = dnnl_primitive_create(&en->cvt[k], pd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (s == dnnl_success)
      s = dnnl_memory_create(&en->cvt_dst[k], &m->dense[k], a->engine, DNNL_MEMORY_NONE);
    en->cvt_off[k] = kl_dnnl_ws_take(used, dnnl_memory_desc_get_size(&m->dense[k]));
  }
  return s;
}

/* The memories: kiln's tensors get their pointers at each run, the scores and the
 * scratchpad the steps share theirs in the workspace (ws_bind). */
static dnnl_status_t make_memories(at_node *a, at_entry *en, const at_mds *m, size_t need,
                                   bool zero_rows) {
  size_t used = 0;
  en->len = m->scores.dims[m->nd - 1];
  en->rows = en->len > 0 ? (int64_t)(dnnl_memory_desc_get_size(&m->scores) / sizeof(float)) /
                               en->len
                         : 0;
  en->scores_off = kl_dnnl_ws_take(&used, dnnl_memory_desc_get_size(&m->scores));
  en->scratch_off = kl_dnnl_ws_take(&used, need);
  en->dead_off = kl_dnnl_ws_take(&used, zero_rows ? (size_t)en->rows : 0);
  dnnl_engine_t e = a->engine;
  dnnl_status_t s = dnnl_success;
  if (a->bf16) {
    en->probs_off = kl_dnnl_ws_take(&used, dnnl_memory_desc_get_size(&m->probs));
    s = dnnl_memory_create(&en->probs, &m->probs, e, DNNL_MEMORY_NONE);
    if (s == dnnl_success) s = make_conversions(a, en, m, &used);
  }
  if (s == dnnl_success) s = kl_dnnl_ws_reserve(a->eng, used);
  if (s == dnnl_success) s = dnnl_memory_create(&en->scores, &m->scores, e, DNNL_MEMORY_NONE);
  if (s == dnnl_success) s = dnnl_memory_create(&en->q, &m->q, e, DNNL_MEMORY_NONE);
  if (s == dnnl_success) s = dnnl_memory_create(&en->kt, &m->kt, e, DNNL_MEMORY_NONE);
  if (s == dnnl_success) s = dnnl_memory_create(&en->v, &m->v, e, DNNL_MEMORY_NONE);
  if (s == dnnl_success) s = dnnl_memory_create(&en->y, &m->y, e, DNNL_MEMORY_NONE);
  if (s == dnnl_success && en->prim[AT_MASK])
    s = dnnl_memory_create(&en->mask, &m->mask, e, DNNL_MEMORY_NONE);
  return s;
}

/* Points the scores and the scratchpads into the workspace, when it is new to them. */
static dnnl_status_t ws_bind(at_node *a, at_entry *en) {
  if (en->ws_gen == a->eng->ws_gen) return dnnl_success;
  char *base = a->eng->ws;
  dnnl_status_t s = dnnl_memory_set_data_handle(en->scores, base + en->scores_off);
  for (int k = 0; s == dnnl_success && k < AT_STEPS; k++)
    if (en->scratch[k]) s = dnnl_memory_set_data_handle(en->scratch[k], base + en->scratch_off);
  if (s == dnnl_success && en->probs)
    s = dnnl_memory_set_data_handle(en->probs, base + en->probs_off);
  for (int k = 0; s == dnnl_success && k < 3; k++)
    if (en->cvt_dst[k]) s = dnnl_memory_set_data_handle(en->cvt_dst[k], base + en->cvt_off[k]);
  if (s == dnnl_success) en->ws_gen = a->eng->ws_gen;
  return s;
}

static void entry_free(void *entry) {
  at_entry *en = entry;
  for (int k = 0; k < AT_STEPS; k++) {
    if (en->prim[k]) dnnl_primitive_destroy(en->prim[k]);
    if (en->scratch[k]) dnnl_memory_destroy(en->scratch[k]);
  }
  for (int k = 0; k < 3; k++) {
    if (en->cvt[k]) dnnl_primitive_destroy(en->cvt[k]);
    if (en->cvt_dst[k]) dnnl_memory_destroy(en->cvt_dst[k]);
  }
  dnnl_memory_t mems[] = {en->q, en->kt, en->mask, en->v, en->y, en->scores, en->probs};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
    if (mems[i]) dnnl_memory_destroy(mems[i]);
  memset(en, 0, sizeof *en);
}

static kiln_status entry_build(void *owner, void *entry, kl_kernel_ctx *c) {
  at_node *a = owner;
  at_entry *en = entry;
  at_mds m;
  size_t need = 0;
  dnnl_status_t s = describe(a, c, &m);
  const kl_amx_fns *amx = kl_cpu_isa_amx(kl_isa_level());
  if (s == dnnl_success && a->bf16 && m.mha && amx && kl_mha_amx_fits(&m.geom)) {
    size_t used = 0;
    en->tiles = true;
    en->tiles_bytes = kl_mha_amx_ws_bytes(&m.geom, kl_isa_threads(c));
    en->tiles_off = kl_dnnl_ws_take(&used, en->tiles_bytes);
    snprintf(en->impl, sizeof en->impl, "kiln:amx bf16");
    s = kl_dnnl_ws_reserve(a->eng, used);
    if (s == dnnl_success) return KILN_OK;
    return kl_fail(c->e, s == dnnl_out_of_memory ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_INTERNAL,
                   "no workspace for the attention's tiles (%zu bytes)", en->tiles_bytes);
  }
  if (s == dnnl_success && a->bf16 && m.mha) { /* the rows of one head, as describe_mha */
    const kl_mha_geom g = m.geom;
    en->own_cvt = true;
    en->batch = g.batch;
    en->heads = g.heads;
    const int64_t rows[3] = {g.seq, g.keys, g.keys}, width[3] = {g.d, g.d, g.dv};
    const int64_t stride[3] = {g.qrow, g.krow, g.vrow};
    memcpy(en->cv_rows, rows, sizeof rows);
    memcpy(en->cv_width, width, sizeof width);
    memcpy(en->cv_stride, stride, sizeof stride);
  }
  if (s == dnnl_success) s = make_steps(a, en, c, &m, &need);
  if (s == dnnl_unimplemented || s == dnnl_invalid_arguments) {
    entry_free(en);
    en->fallback = true; /* shapes oneDNN cannot do: the reference runs */
    return KILN_OK;
  }
  if (s == dnnl_success)
    s = make_memories(a, en, &m, need, kl_attr_int(c->node, "zero_masked_rows", 0) != 0);
  memcpy(en->off, m.off, sizeof en->off);
  if (s == dnnl_success) return KILN_OK;
  return kl_fail(c->e, s == dnnl_out_of_memory ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_INTERNAL,
                 "oneDNN failed to build the attention primitives (status %d)", (int)s);
}

static dnnl_status_t step(at_node *a, at_entry *en, int k, int n, dnnl_exec_arg_t *args) {
  if (en->scratch[k]) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, en->scratch[k]};
  return dnnl_primitive_execute(en->prim[k], a->stream, n, args);
}

/* Input k's data at element offset off (K and V are Q's buffer when packed). */
static void *operand(const kl_kernel_ctx *c, int k, int64_t off) {
  const kl_tensor *t = k < c->n_in && c->in[k] ? c->in[k] : c->in[0];
  return (float *)t->data + off;
}

static float *scores_of(const at_node *a, const at_entry *en) {
  return (float *)((char *)a->eng->ws + en->scores_off);
}

/* kiln.MultiHeadAttention at precision bf16: task t copies operand t / (B H)'s rows of
 * one image and head into its dense copy, each row converted by the AMX level's to_bf16
 * (bf16 attention runs only there). */
typedef struct copy_job {
  const at_entry *en;
  const float *src[3];
  uint16_t *dst[3];
  const kl_amx_fns *amx;
} copy_job;

static void copy_task(void *arg, int64_t t) {
  const copy_job *j = arg;
  const at_entry *en = j->en;
  int64_t per = en->batch * en->heads, k = t / per, b = t % per / en->heads, h = t % en->heads;
  int64_t rows = en->cv_rows[k], width = en->cv_width[k], stride = en->cv_stride[k];
  /* as describe_mha's views: image b's rows from b * rows * stride, head h's at h * width */
  const float *src = j->src[k] + b * rows * stride + h * width;
  uint16_t *dst = j->dst[k] + (b * en->heads + h) * rows * width;
  for (int64_t r = 0; r < rows; r++) j->amx->to_bf16(src + r * stride, dst + r * width, (size_t)width);
}

static void own_copies(const at_node *a, const at_entry *en, const kl_kernel_ctx *c) {
  copy_job j = {en, {NULL}, {NULL}, kl_cpu_isa_amx(kl_isa_level())};
  for (int k = 0; k < 3; k++) {
    j.src[k] = operand(c, k, en->off[k]);
    j.dst[k] = (uint16_t *)((char *)a->eng->ws + en->cvt_off[k]);
  }
  int64_t tasks = 3 * en->batch * en->heads;
  kl_isa_parallel(c, tasks, 3 * kl_tensor_numel(c->out[0]), copy_task, &j);
}

/* zero_masked_rows, before the softmax: flags the rows of the scores that have no value
 * above -inf (a row's scan stops at its first live value: at once in padding masks). */
static void flag_masked_rows(const at_node *a, const at_entry *en) {
  const float *s = scores_of(a, en);
  bool *dead = (bool *)((char *)a->eng->ws + en->dead_off);
  for (int64_t r = 0; r < en->rows; r++) {
    dead[r] = true;
    for (int64_t j = 0; j < en->len && dead[r]; j++) dead[r] = !(s[r * en->len + j] > -INFINITY);
  }
}

/* ... and after it: the flagged rows of the probabilities (float32 in the scores, or
 * bf16) become 0. */
static void zero_masked_rows(const at_node *a, const at_entry *en) {
  size_t size = a->bf16 ? sizeof(uint16_t) : sizeof(float);
  char *s = a->bf16 ? (char *)a->eng->ws + en->probs_off : (char *)scores_of(a, en);
  const bool *dead = (const bool *)((char *)a->eng->ws + en->dead_off);
  for (int64_t r = 0; r < en->rows; r++)
    if (dead[r]) memset(s + (size_t)(r * en->len) * size, 0, size * (size_t)en->len);
}

static kiln_status execute(at_node *a, at_entry *en, kl_kernel_ctx *c) {
  if (en->tiles) {
    kl_mha_geom g;
    kiln_status st = kl_mha_geometry(c, &g);
    if (st != KILN_OK) return st;
    kl_dnnl_ws_enter(a->eng);
    return kl_run_mha_amx(c, kl_cpu_isa_fns(kl_isa_level()), kl_cpu_isa_amx(kl_isa_level()), &g,
                          (char *)a->eng->ws + en->tiles_off, en->tiles_bytes);
  }
  dnnl_status_t s = ws_bind(a, en);
  kl_dnnl_ws_enter(a->eng);
  dnnl_memory_t views[3] = {en->q, en->kt, en->v}, ops[3] = {en->q, en->kt, en->v};
  if (s == dnnl_success && en->own_cvt) own_copies(a, en, c);
  for (int k = 0; k < 3; k++) {
    if (en->cvt_dst[k]) ops[k] = en->cvt_dst[k]; /* precision bf16: the dense copies */
    if (s == dnnl_success) s = dnnl_memory_set_data_handle(views[k], operand(c, k, en->off[k]));
    if (s == dnnl_success && en->cvt[k]) {
      dnnl_exec_arg_t cv[2] = {{DNNL_ARG_FROM, views[k]}, {DNNL_ARG_TO, ops[k]}};
      s = dnnl_primitive_execute(en->cvt[k], a->stream, 2, cv);
    }
  }
  if (s == dnnl_success) s = dnnl_memory_set_data_handle(en->y, c->out[0]->data);
  if (s == dnnl_success && en->mask) s = dnnl_memory_set_data_handle(en->mask, (void *)mask_of(c)->data);
  dnnl_exec_arg_t qk[4] = {{DNNL_ARG_SRC, ops[0]}, {DNNL_ARG_WEIGHTS, ops[1]}, {DNNL_ARG_DST, en->scores}};
  dnnl_exec_arg_t add[4] = {{DNNL_ARG_SRC_0, en->scores}, {DNNL_ARG_SRC_1, en->mask},
                            {DNNL_ARG_DST, en->scores}};
  dnnl_memory_t probs = en->probs ? en->probs : en->scores;
  dnnl_exec_arg_t sm[3] = {{DNNL_ARG_SRC, en->scores}, {DNNL_ARG_DST, probs}};
  dnnl_exec_arg_t pv[4] = {{DNNL_ARG_SRC, probs}, {DNNL_ARG_WEIGHTS, ops[2]}, {DNNL_ARG_DST, en->y}};
  bool zero_rows = kl_attr_int(c->node, "zero_masked_rows", 0) != 0;
  if (s == dnnl_success) s = step(a, en, AT_QK, 3, qk);
  if (s == dnnl_success && en->prim[AT_MASK]) s = step(a, en, AT_MASK, 3, add);
  if (s == dnnl_success && zero_rows && (s = dnnl_stream_wait(a->stream)) == dnnl_success)
    flag_masked_rows(a, en);
  if (s == dnnl_success) s = step(a, en, AT_SOFTMAX, 2, sm);
  if (s == dnnl_success && zero_rows && (s = dnnl_stream_wait(a->stream)) == dnnl_success)
    zero_masked_rows(a, en);
  if (s == dnnl_success) s = step(a, en, AT_PV, 3, pv);
  if (s == dnnl_success) s = dnnl_stream_wait(a->stream);
  return s == dnnl_success ? KILN_OK
                           : kl_fail(c->e, KILN_ERR_INTERNAL, "oneDNN failed to run the "
                                     "attention primitives (status %d)", (int)s);
}

static int at_run(kl_kernel_ctx *c) {
  at_node *a = *c->state;
  if (!a) return kl_fail(c->e, KILN_ERR_INTERNAL, "oneDNN attention without its state");
  a->ran_reference = false; /* empty operands: nothing to compute, no slow path */
  a->ran_slow = NULL;
  a->ran_impl = NULL;
  if (kl_tensor_numel(c->out[0]) == 0) return KILN_OK;
  for (int k = 0; k < c->n_in; k++) /* oneDNN refuses empty operands */
    if (c->in[k] && kl_tensor_numel(c->in[k]) == 0) return kl_op_get(c->node->op)->ref(c);
  void *found;
  a->ran_reference = true;
  kiln_status st = kl_dnnl_cache_get(&a->cache, c, &found);
  if (st != KILN_OK) return st;
  at_entry *en = found;
  a->ran_reference = en->fallback;
  a->ran_slow = en->slow_impl[0] && !en->fallback ? en->slow_impl : NULL;
  a->ran_impl = en->fallback ? NULL : en->impl;
  if (en->fallback || a->ran_slow) { /* weighed as the reference */
    st = kl_isa_ref_allowed(c, en->fallback ? "oneDNN has no implementation for these shapes"
                                            : "oneDNN has only its reference loops for these "
                                              "shapes");
    if (st != KILN_OK) return st;
  }
  return en->fallback ? (kiln_status)kl_op_get(c->node->op)->ref(c) : execute(a, en, c);
}

static void at_release(void *state) {
  at_node *a = state;
  if (!a) return;
  kl_dnnl_cache_clear(&a->cache);
  free(a);
}

bool kl_dnnl_attention_supports(const kl_graph *g, const kl_node *n) {
  if ((n->op != KL_OP_KilnAttention && n->op != KL_OP_KilnMultiHeadAttention) || n->n_out != 1)
    return false;
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && g->values[n->in[k]].type.dtype != KL_F32) return false;
  return g->values[n->out[0]].type.dtype == KL_F32;
}

bool kl_dnnl_attention_ran_reference(const void *state) {
  const at_node *a = state;
  return a && a->ran_reference;
}

const char *kl_dnnl_attention_ran_slow(const void *state) {
  const at_node *a = state;
  return a ? a->ran_slow : NULL;
}

const char *kl_dnnl_attention_ran_impl(const void *state) {
  const at_node *a = state;
  return a ? a->ran_impl : NULL;
}

kiln_status kl_dnnl_attention_create(kl_dnnl_engine *eng, kl_cpu_kernel *kernel, void **state,
                                     kl_err *e) {
  at_node *a = calloc(1, sizeof *a);
  *state = a;
  if (!a) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a oneDNN attention");
  a->eng = eng;
  /* bf16 only at the AMX level: at avx512_bf16 oneDNN 2.6's bf16 products of the heads
   * (brg:avx512_core_bf16) took longer than its float32 ones on a Sapphire Rapids
   * (BERT-base's: 0.29 + 0.25 ms against 0.25 + 0.22, the copies apart) */
  a->bf16 = eng->bf16 && kl_isa_level() == KL_ISA_AMX;
  a->engine = eng->engine;
  a->stream = eng->stream;
  /* keyed by the shapes of Q, Kt, V and Mask */
  kl_dnnl_cache_init(&a->cache, a->slots, sizeof a->slots[0], 4, a, entry_build, entry_free);
  *kernel = (kl_cpu_kernel){"dnnl_attention", at_run, at_release};
  return KILN_OK;
}
