/* kiln.MultiHeadAttention at precision bf16 on AMX tiles (run.h, kl_run_mha_amx), the
 * AMX level: the same arithmetic as dnnl_attention.c's bf16 path (Q, K, V and the
 * probabilities rounded to bfloat16, both products summed in float32, the scale, the
 * mask and the softmax in float32, Y float32), without its buffers of all the scores.
 *
 * Why: BERT-base's twelve attentions at sequence 128 took 3.7 ms of its 34 ms bf16 run
 * on one core of a 2-core Sapphire Rapids VM and 4.0 ms at 2 threads: oneDNN 2.6 wrote
 * every head's float32 scores (0.8 MB a layer), added the mask and took the softmax in
 * separate passes over them, and its first product at 2 threads took longer than at 1
 * (0.087 against 0.054 ms a layer: both threads packing each head's transposed keys).
 *
 * First every head's K (as the first product's [n, k] weights: kl_amx_fns.pack_nk) and
 * V ([k, n]: pack_kn) are packed into panels once, tasks by head. Then each task takes
 * a run of groups of blocks of 32 queries of one head (group_for): their Q rows rounded
 * to bfloat16, their scores against every key by panels of 32 keys into the task's own
 * float32 rows (32 x T a block, L1 or L2), each row scaled, masked, its softmax taken
 * and rounded to bfloat16 into the probabilities by kl_amx_fns.probs, which then meet
 * V's panels into Y, 32 values a block (stored by the tiles straight into Y where a block
 * covers 32 whole rows and columns). A query whose every key is masked (-inf) gives NaN
 * as the reference does, or 0 with zero_masked_rows. */
#include "backends/cpu/isa/run.h"
#include "backends/cpu/ref/mha.h"

#include <math.h>
#include <string.h>

#define MHA_Q KL_AMX_ROWS                              /* queries a block */
#define MHA_TILE ((int64_t)2 * 16 * KL_AMX_STEP)       /* bf16 of one step of a panel */

static int64_t up32(int64_t v) { return (v + 31) / 32 * 32; }

/* Blocks of queries a task takes at once (of one head): the tiles and the vector
 * units take turns per group, not per block (on a Sapphire Rapids the first tile
 * product after vector work took about 0.5 us, the next ones 0.1), with the scores
 * and probabilities of a group within about 256 KB. */
static int64_t group_of(const kl_mha_geom *g) {
  int64_t per = MHA_Q * up32(g->keys) * 6, grp = ((int64_t)256 << 10) / per;
  return grp < 1 ? 1 : grp > 4 ? 4 : grp;
}

/* ... fewer where the groups would be too few to keep the threads busy (BERT-base at
 * sequence 128 has 12 groups of 4 blocks a layer: at 16 threads its attentions took 1.3
 * ms, 0.11 a layer against 0.3 at 1 thread). */
static int64_t group_for(const kl_mha_geom *g, int64_t blocks, int threads) {
  int64_t grp = group_of(g), heads = g->batch * g->heads;
  while (grp > 1 && heads * ((blocks + grp - 1) / grp) < 2 * (int64_t)threads) grp /= 2;
  return grp;
}

/* The bytes of one task's rows: Q [G 32][dp] bfloat16, the scores [G 32][tp] float32
 * and the probabilities [G 32][tp] bfloat16, one block's sums [32][32], the dead-row
 * flags [G 32]. */
static size_t slot_bytes(const kl_mha_geom *g) {
  size_t tp = (size_t)up32(g->keys), dp = (size_t)up32(g->d), rows = MHA_Q * (size_t)group_of(g);
  size_t b = rows * dp * 2 + rows * tp * sizeof(float) + rows * tp * 2 +
             MHA_Q * KL_AMX_COLS * sizeof(float) + rows;
  return (b + 63) / 64 * 64;
}

static size_t kv_elems(const kl_mha_geom *g) {
  return (size_t)(g->batch * g->heads) * (size_t)up32(g->keys) *
         (size_t)(up32(g->d) + up32(g->dv));
}

bool kl_mha_amx_fits(const kl_mha_geom *g) {
  return g->batch > 0 && g->heads > 0 && g->seq > 0 && g->keys > 0 && g->d > 0 && g->dv > 0 &&
         g->keys <= KL_MHA_AMX_MAX_KEYS && g->d <= KL_MHA_AMX_MAX_D &&
         g->dv <= KL_MHA_AMX_MAX_D && g->batch * g->heads <= (INT64_C(1) << 20) &&
         kv_elems(g) * 2 <= KL_MHA_AMX_MAX_KV_BYTES;
}

size_t kl_mha_amx_ws_bytes(const kl_mha_geom *g, int threads) {
  size_t kv = (kv_elems(g) * 2 + 63) / 64 * 64;
  return kv + (size_t)(threads < 1 ? 1 : threads) * slot_bytes(g);
}

typedef struct mha_job {
  const kl_isa_fns *f;
  const kl_amx_fns *amx;
  const kl_mha_geom *g;
  float scale;
  bool zero_rows;
  float *y;
  uint16_t *kp, *vp; /* per head: K's panels [tp / 32][dp / 32], V's [dvp / 32][tp / 32] */
  char *slots;
  size_t slot;
  int64_t tp, dp, dvp, blocks, group, per; /* query blocks a head, a unit; units a task */
} mha_job;

/* A 32 x 32 block of rows ld floats apart at x, rows and cols of it inside the operand:
 * packed by pk straight from x when whole, else from a zero-padded copy. */
static void pack_block(void (*pk)(const float *, size_t, uint16_t *), const float *x, size_t ld,
                       int64_t rows, int64_t cols, uint16_t *out) {
  if (rows == 32 && cols == 32) {
    pk(x, ld, out);
    return;
  }
  float t[32 * 32];
  memset(t, 0, sizeof t);
  for (int64_t r = 0; r < rows; r++)
    memcpy(t + r * 32, x + (size_t)r * ld, sizeof(float) * (size_t)cols);
  pk(t, 32, out);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Task t: head t / 2's K (t even) or V (t odd) into its panels. */
static void pack_task(void *arg, int64_t t) {
  const mha_job *j = arg;
  const kl_mha_geom *g = j->g;
  int64_t bh = t / 2, b = bh / g->heads, h = bh % g->heads;
  if (t % 2 == 0) { /* K [keys][d]: panel p = keys 32 p.., step s = d 32 s.. */
    const float *k = (const float *)g->k->data + b * g->keys * g->krow + g->koff + h * g->d;
    uint16_t *out = j->kp + bh * j->tp * j->dp;
    for (int64_t p = 0; p < j->tp / 32; p++)
      for (int64_t s = 0; s < j->dp / 32; s++, out += MHA_TILE)
        pack_block(j->amx->pack_nk, k + (p * 32 * g->krow + s * 32), (size_t)g->krow,
                   min64(32, g->keys - 32 * p), min64(32, g->d - 32 * s), out);
  } else { /* V [keys][dv]: panel q = values 32 q.., step s = keys 32 s.. */
    const float *v = (const float *)g->v->data + b * g->keys * g->vrow + g->voff + h * g->dv;
    uint16_t *out = j->vp + bh * j->tp * j->dvp;
    for (int64_t q = 0; q < j->dvp / 32; q++)
      for (int64_t s = 0; s < j->tp / 32; s++, out += MHA_TILE)
        pack_block(j->amx->pack_kn, v + (s * 32 * g->vrow + q * 32), (size_t)g->vrow,
                   min64(32, g->keys - 32 * s), min64(32, g->dv - 32 * q), out);
  }
}

/* Blocks [s0 / 32, s0 / 32 + n) of queries of head h of image b, in the task's rows:
 * their Q rows packed, their scores (tiles), their probabilities (vector), their
 * products with V (tiles), straight into Y where a block covers 32 whole rows and
 * columns. */
static void group_task(const mha_job *j, int64_t b, int64_t h, int64_t s0, int64_t n, char *slot) {
  const kl_mha_geom *g = j->g;
  int64_t rows = min64(MHA_Q * n, g->seq - s0), bh = b * g->heads + h, tp = j->tp, dp = j->dp;
  uint16_t *qa = (uint16_t *)slot;
  float *sc = (float *)(qa + MHA_Q * n * dp);
  uint16_t *pr = (uint16_t *)(sc + MHA_Q * n * tp);
  float *cb = (float *)(pr + MHA_Q * n * tp);
  bool *dead = (bool *)(cb + MHA_Q * KL_AMX_COLS), any_dead = false;
  const float *q = (const float *)g->q->data + (b * g->seq + s0) * g->qrow + h * g->d;
  for (int64_t i = 0; i < MHA_Q * n; i++) {
    uint16_t *row = qa + i * dp;
    int64_t have = i < rows ? g->d : 0;
    if (have) j->amx->to_bf16(q + i * g->qrow, row, (size_t)have);
    memset(row + have, 0, sizeof(uint16_t) * (size_t)(dp - have));
  }
  const uint16_t *kp = j->kp + bh * tp * dp, *vp = j->vp + bh * tp * j->dvp;
  for (int64_t k = 0; k < n; k++)
    for (int64_t p = 0; p < tp / 32; p++)
      j->amx->block(qa + k * MHA_Q * dp, (size_t)dp, kp + p * (dp / 32) * MHA_TILE,
                    (size_t)(dp / 32), sc + k * MHA_Q * tp + 32 * p, (size_t)tp, NULL, 0, 0);
  const float *mask = NULL;
  if (g->mask)
    mask = (const float *)g->mask->data + b * g->mstride[0] + h * g->mstride[1];
  for (int64_t i = 0; i < MHA_Q * n; i++) {
    if (i >= rows) {
      memset(pr + i * tp, 0, sizeof(uint16_t) * (size_t)tp);
      continue;
    }
    const float *m = mask ? mask + (s0 + i) * g->mstride[2] : NULL;
    dead[i] = j->amx->probs(sc + i * tp, (size_t)g->keys, j->scale, m, (int)g->mstride[3],
                            pr + i * tp, (size_t)tp);
    any_dead |= dead[i];
  }
  int64_t yrow = g->heads * g->dv;
  float *y = j->y + (b * g->seq + s0) * yrow + h * g->dv;
  for (int64_t k = 0; k < n; k++)
    for (int64_t c = 0; c < j->dvp / 32; c++) {
      int64_t r0 = k * MHA_Q, nr = min64(MHA_Q, rows - r0), cols = min64(32, g->dv - 32 * c);
      if (nr <= 0) break;
      float *yb = y + r0 * yrow + 32 * c;
      bool whole = nr == MHA_Q && cols == 32;
      j->amx->block(pr + r0 * tp, (size_t)tp, vp + c * (tp / 32) * MHA_TILE, (size_t)(tp / 32),
                    whole ? yb : cb, whole ? (size_t)yrow : KL_AMX_COLS, NULL, 0, 0);
      for (int64_t i = 0; !whole && i < nr; i++)
        memcpy(yb + i * yrow, cb + i * KL_AMX_COLS, sizeof(float) * (size_t)cols);
    }
  for (int64_t i = 0; j->zero_rows && any_dead && i < rows; i++)
    if (dead[i]) memset(y + i * yrow, 0, sizeof(float) * (size_t)g->dv);
}

/* Task t: its run of (head, group of query blocks) units, in its own rows. */
static void run_task(void *arg, int64_t t) {
  const mha_job *j = arg;
  int64_t groups = (j->blocks + j->group - 1) / j->group;
  int64_t units = j->g->batch * j->g->heads * groups;
  int64_t u0 = t * j->per, u1 = min64(u0 + j->per, units);
  char *slot = j->slots + (size_t)t * j->slot;
  j->amx->config();
  for (int64_t u = u0; u < u1; u++) {
    int64_t bh = u / groups, first = u % groups * j->group;
    group_task(j, bh / j->g->heads, bh % j->g->heads, first * MHA_Q,
               min64(j->group, j->blocks - first), slot);
  }
  j->amx->release();
}

kiln_status kl_run_mha_amx(const kl_kernel_ctx *c, const kl_isa_fns *f, const kl_amx_fns *amx,
                           const kl_mha_geom *g, void *ws, size_t ws_bytes) {
  int threads = kl_isa_threads(c);
  if (threads < 1) threads = 1;
  if (!amx || !kl_mha_amx_fits(g) || ws_bytes < kl_mha_amx_ws_bytes(g, 1) ||
      g->q->dtype != KL_F32 || g->k->dtype != KL_F32 || g->v->dtype != KL_F32 ||
      (g->mask && g->mask->dtype != KL_F32) || c->out[0]->dtype != KL_F32)
    return kl_fail(c->e, KILN_ERR_INTERNAL, "MultiHeadAttention on AMX tiles: operands or "
                   "workspace not as planned");
  mha_job j = {f, amx, g, kl_attr_float(c->node, "scale", 1.0f),
               kl_attr_int(c->node, "zero_masked_rows", 0) != 0, c->out[0]->data, NULL, NULL,
               NULL, slot_bytes(g), up32(g->keys), up32(g->d), up32(g->dv),
               (g->seq + MHA_Q - 1) / MHA_Q, 1, 0};
  j.group = group_for(g, j.blocks, threads);
  size_t kv = (kv_elems(g) * 2 + 63) / 64 * 64; /* every head's K and V, then the rows */
  j.kp = ws;
  j.vp = j.kp + g->batch * g->heads * j.tp * j.dp;
  j.slots = (char *)ws + kv;
  int64_t heads = g->batch * g->heads;
  kl_isa_parallel(c, 2 * heads, heads * j.tp * (j.dp + j.dvp), pack_task, &j);
  /* as many runs as threads, each with its rows in the workspace: fewer where the
   * workspace was planned for fewer threads than this run has (at least one) */
  int64_t slots = (int64_t)((ws_bytes - kv) / j.slot);
  int64_t units = heads * ((j.blocks + j.group - 1) / j.group);
  int64_t runs = min64(min64(threads, slots), units);
  j.per = (units + runs - 1) / runs;
  runs = (units + j.per - 1) / j.per;
  int64_t work = units * MHA_Q * j.tp * (j.dp + j.dvp);
  kl_isa_parallel(c, runs, work, run_task, &j);
  return KILN_OK;
}
