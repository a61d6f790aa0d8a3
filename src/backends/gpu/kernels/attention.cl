/* Attention kernels (src/backends/gpu/ops_attention.c launches them). */

#define KL_ATTN_MAX_DV 256

/* The geometry of kiln.MultiHeadAttention (src/backends/cpu/ref/mha.h); matches
 * kl_cl_mha in ops_attention.c. */
typedef struct kl_cl_mha {
  long batch, heads, seq, keys, d, dv;
  long qrow, krow, vrow, koff, voff;
  long mstride[4];
  float scale;
  int has_mask;
  int zero_masked_rows; /* a query with no score above -inf gives 0 */
} kl_cl_mha;

/* The online softmax taking score s: when s is a new maximum, what was summed under
 * the old one (sum, acc[0..dv-1]) is rescaled; returns s's weight exp(s - max), already
 * added to sum (the caller adds it times the value row to acc). */
float kl_attn_step(float s, float *max, float *sum, float *acc, long dv) {
  if (s > *max) {
    float r = exp(*max - s);
    *sum *= r;
    for (long e = 0; e < dv; e++) acc[e] *= r;
    *max = s;
  }
  float p = exp(s - *max);
  *sum += p;
  return p;
}

/* One work-item per (batch, head, query): the scores over every key with an online
 * softmax (a running maximum and sum, the accumulator rescaled when the maximum grows),
 * so that no scores matrix is stored. K and V are Q itself when QKV is packed. */
__kernel void kl_attn_mha(__global const float *q_, ulong qo, __global const float *k_,
                          ulong ko, __global const float *v_, ulong vo,
                          __global const float *m_, ulong mo, __global float *y_, ulong yo,
                          kl_cl_mha g) {
  long id = get_global_id(0);
  if (id >= g.batch * g.heads * g.seq) return;
  long i = id % g.seq, h = id / g.seq % g.heads, b = id / g.seq / g.heads;
  __global const float *q = q_ + qo + (b * g.seq + i) * g.qrow + h * g.d;
  float acc[KL_ATTN_MAX_DV];
  for (long e = 0; e < g.dv; e++) acc[e] = 0.0f;
  float max = -INFINITY, sum = 0.0f;
  for (long j = 0; j < g.keys; j++) {
    __global const float *k = k_ + ko + (b * g.keys + j) * g.krow + g.koff + h * g.d;
    float s = 0.0f;
    for (long e = 0; e < g.d; e++) s += q[e] * k[e];
    s *= g.scale;
    if (g.has_mask)
      s += m_[mo + b * g.mstride[0] + h * g.mstride[1] + i * g.mstride[2] + j * g.mstride[3]];
    __global const float *v = v_ + vo + (b * g.keys + j) * g.vrow + g.voff + h * g.dv;
    float p = kl_attn_step(s, &max, &sum, acc, g.dv);
    for (long e = 0; e < g.dv; e++) acc[e] += p * v[e];
  }
  __global float *y = y_ + yo + (b * g.seq + i) * g.heads * g.dv + h * g.dv;
  bool dead = g.zero_masked_rows && max == -INFINITY;
  for (long e = 0; e < g.dv; e++) y[e] = dead ? 0.0f : acc[e] / sum;
}

#define KL_ATTN_QB 64    /* queries per work-group, one per work-item */
#define KL_ATTN_KB 32    /* keys per tile in local memory */
#define KL_ATTN_TILE_D 128 /* the largest head (D and Dv) of the tiled kernel */

/* kl_attn_mha with the keys and values shared through local memory: a work-group takes
 * 64 queries of one (batch, head) and walks the keys in tiles of 32, loaded once for all
 * of them (kl_attn_mha reads every key once per query). Heads of at most 128 values. */
__kernel __attribute__((reqd_work_group_size(KL_ATTN_QB, 1, 1))) void
kl_attn_mha_tiled(__global const float *q_, ulong qo, __global const float *k_, ulong ko,
                  __global const float *v_, ulong vo, __global const float *m_, ulong mo,
                  __global float *y_, ulong yo, kl_cl_mha g) {
  __local float kt[KL_ATTN_KB][KL_ATTN_TILE_D];
  __local float vt[KL_ATTN_KB][KL_ATTN_TILE_D];
  int t = get_local_id(0);
  long blocks = (g.seq + KL_ATTN_QB - 1) / KL_ATTN_QB, grp = get_group_id(0);
  long h = grp / blocks % g.heads, b = grp / blocks / g.heads;
  long i = grp % blocks * KL_ATTN_QB + t;
  bool live = i < g.seq;
  float q[KL_ATTN_TILE_D], acc[KL_ATTN_TILE_D];
  __global const float *qp = q_ + qo + (b * g.seq + (live ? i : 0)) * g.qrow + h * g.d;
  for (long e = 0; e < g.d; e++) q[e] = qp[e] * g.scale;
  for (long e = 0; e < g.dv; e++) acc[e] = 0.0f;
  float max = -INFINITY, sum = 0.0f;
  for (long j0 = 0; j0 < g.keys; j0 += KL_ATTN_KB) {
    long nk = min((long)KL_ATTN_KB, g.keys - j0);
    for (long x = t; x < nk * g.d; x += KL_ATTN_QB) { /* the tile, by all work-items */
      long j = x / g.d, e = x % g.d;
      kt[j][e] = k_[ko + (b * g.keys + j0 + j) * g.krow + g.koff + h * g.d + e];
    }
    for (long x = t; x < nk * g.dv; x += KL_ATTN_QB) {
      long j = x / g.dv, e = x % g.dv;
      vt[j][e] = v_[vo + (b * g.keys + j0 + j) * g.vrow + g.voff + h * g.dv + e];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (long j = 0; live && j < nk; j++) {
      float s = 0.0f;
      for (long e = 0; e < g.d; e++) s = fma(q[e], kt[j][e], s);
      if (g.has_mask)
        s += m_[mo + b * g.mstride[0] + h * g.mstride[1] + i * g.mstride[2] +
                (j0 + j) * g.mstride[3]];
      float p = kl_attn_step(s, &max, &sum, acc, g.dv);
      for (long e = 0; e < g.dv; e++) acc[e] = fma(p, vt[j][e], acc[e]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (!live) return;
  __global float *y = y_ + yo + (b * g.seq + i) * g.heads * g.dv + h * g.dv;
  bool dead = g.zero_masked_rows && max == -INFINITY;
  for (long e = 0; e < g.dv; e++) y[e] = dead ? 0.0f : acc[e] / sum;
}
