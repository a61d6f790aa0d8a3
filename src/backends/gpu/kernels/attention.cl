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

#define KL_FA_QB 64  /* queries per work-group */
#define KL_FA_KB 32  /* keys per tile */
#define KL_FA_D 64   /* the largest head (D and Dv) */
#define KL_FA_WG 128 /* work-items */

/* Attention for heads of at most 64 values, a work-group of 128 work-items per 64
 * queries of one (batch, head), the keys in tiles of 32 (flash attention, in float32):
 * the queries (scaled), the key and value tiles, the tile's weights and the softmax's
 * row reductions live in local memory; each work-item holds a 4 x 4 block of the
 * scores (work-item t: query rows 4 (t / 8) + 0..3, keys 4 (t % 8) + 0..3) and a 8 x 4
 * block of the output (rows 8 (t / 16) + 0..7, values 4 (t % 16) + 0..3) in registers.
 * Per tile: the scores, each row's maximum over the 8 work-items that share it, the
 * weights exp(s - max) with the row's running sum, the output rescaled by exp(old max -
 * new max) and the weights times the value tile added. Pitches of 65 and 33 floats keep
 * the column reads of Q, K and the weights off shared banks. A row whose scores are all
 * -inf so far has weight 0 (not exp(-inf + inf)), and its output, never given weight,
 * is 0 / 0: NaN, as the softmax of nothing but -inf, or 0 with zero_masked_rows. */
__kernel __attribute__((reqd_work_group_size(KL_FA_WG, 1, 1))) void
kl_attn_flash64(__global const float *q_, ulong qo, __global const float *k_, ulong ko,
                __global const float *v_, ulong vo, __global const float *m_, ulong mo,
                __global float *y_, ulong yo, kl_cl_mha g) {
  __local float qs[KL_FA_QB][KL_FA_D + 1];
  __local float ks[KL_FA_KB][KL_FA_D + 1];
  __local float vs[KL_FA_KB][KL_FA_D];
  __local float ps[KL_FA_QB][KL_FA_KB + 1];
  __local float red_max[KL_FA_QB][8], red_sum[KL_FA_QB][8];
  __local float alpha_s[KL_FA_QB], sum_s[KL_FA_QB];
  int t = get_local_id(0);
  long blocks = (g.seq + KL_FA_QB - 1) / KL_FA_QB, grp = get_group_id(0);
  long h = grp / blocks % g.heads, b = grp / blocks / g.heads, i0 = grp % blocks * KL_FA_QB;
  /* the queries, scaled; rows past the sequence are zeros */
  for (int x = t; x < KL_FA_QB * KL_FA_D; x += KL_FA_WG) {
    int r = x / KL_FA_D, e = x % KL_FA_D;
    long i = i0 + r;
    qs[r][e] = i < g.seq && e < g.d
                   ? q_[qo + (b * g.seq + i) * g.qrow + h * g.d + e] * g.scale : 0.0f;
  }
  int sr = t / 8 * 4, sc = t % 8 * 4;   /* this work-item's score block */
  int orow = t / 16 * 8, ocol = t % 16 * 4; /* and output block */
  float m_run[4], l_run[4], o[8][4];
  #pragma unroll
  for (int a = 0; a < 4; a++) {
    m_run[a] = -INFINITY;
    l_run[a] = 0.0f;
  }
  #pragma unroll
  for (int a = 0; a < 8; a++)
    #pragma unroll
    for (int c = 0; c < 4; c++) o[a][c] = 0.0f;
  for (long j0 = 0; j0 < g.keys; j0 += KL_FA_KB) {
    long nk = min((long)KL_FA_KB, g.keys - j0);
    for (int x = t; x < KL_FA_KB * KL_FA_D; x += KL_FA_WG) {
      int j = x / KL_FA_D, e = x % KL_FA_D;
      bool in = j < nk;
      ks[j][e] = in && e < g.d ? k_[ko + (b * g.keys + j0 + j) * g.krow + g.koff + h * g.d + e]
                               : 0.0f;
      vs[j][e] = in && e < g.dv
                     ? v_[vo + (b * g.keys + j0 + j) * g.vrow + g.voff + h * g.dv + e] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float s[4][4];
    #pragma unroll
    for (int a = 0; a < 4; a++)
      #pragma unroll
      for (int c = 0; c < 4; c++) s[a][c] = 0.0f;
    for (long e = 0; e < g.d; e++) {
      float qv[4], kv[4];
      #pragma unroll
      for (int a = 0; a < 4; a++) qv[a] = qs[sr + a][e];
      #pragma unroll
      for (int c = 0; c < 4; c++) kv[c] = ks[sc + c][e];
      #pragma unroll
      for (int a = 0; a < 4; a++)
        #pragma unroll
        for (int c = 0; c < 4; c++) s[a][c] = fma(qv[a], kv[c], s[a][c]);
    }
    #pragma unroll
    for (int a = 0; a < 4; a++) {
      long i = i0 + sr + a;
      float mx = -INFINITY;
      #pragma unroll
      for (int c = 0; c < 4; c++) {
        long j = sc + c;
        if (j >= nk)
          s[a][c] = -INFINITY;
        else if (g.has_mask && i < g.seq)
          s[a][c] += m_[mo + b * g.mstride[0] + h * g.mstride[1] + i * g.mstride[2] +
                        (j0 + j) * g.mstride[3]];
        mx = fmax(mx, s[a][c]);
      }
      red_max[sr + a][t % 8] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (int a = 0; a < 4; a++) {
      float mx = m_run[a];
      #pragma unroll
      for (int c = 0; c < 8; c++) mx = fmax(mx, red_max[sr + a][c]);
      float alpha = mx == -INFINITY ? 1.0f : exp(m_run[a] - mx), part = 0.0f;
      #pragma unroll
      for (int c = 0; c < 4; c++) {
        float p = mx == -INFINITY ? 0.0f : exp(s[a][c] - mx);
        ps[sr + a][sc + c] = p;
        part += p;
      }
      red_sum[sr + a][t % 8] = part;
      if (t % 8 == 0) alpha_s[sr + a] = alpha;
      m_run[a] = mx;
      l_run[a] *= alpha;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (int a = 0; a < 4; a++)
      #pragma unroll
      for (int c = 0; c < 8; c++) l_run[a] += red_sum[sr + a][c];
    #pragma unroll
    for (int a = 0; a < 8; a++) {
      float alpha = alpha_s[orow + a];
      #pragma unroll
      for (int c = 0; c < 4; c++) o[a][c] *= alpha;
    }
    for (int j = 0; j < KL_FA_KB; j++) {
      float4 vv = vload4(0, &vs[j][ocol]);
      #pragma unroll
      for (int a = 0; a < 8; a++) {
        float p = ps[orow + a][j];
        o[a][0] = fma(p, vv.x, o[a][0]);
        o[a][1] = fma(p, vv.y, o[a][1]);
        o[a][2] = fma(p, vv.z, o[a][2]);
        o[a][3] = fma(p, vv.w, o[a][3]);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  /* a row that saw no key above -inf has output 0 when zero_masked_rows says so: its
   * sum, 0, becomes +inf, so that its accumulator (0: never given weight) times 1/sum
   * is 0 rather than 0 / 0 */
  if (t % 8 == 0)
    #pragma unroll
    for (int a = 0; a < 4; a++)
      sum_s[sr + a] = g.zero_masked_rows && m_run[a] == -INFINITY ? INFINITY : l_run[a];
  barrier(CLK_LOCAL_MEM_FENCE);
  #pragma unroll
  for (int a = 0; a < 8; a++) {
    long i = i0 + orow + a;
    if (i >= g.seq) break;
    __global float *y = y_ + yo + (b * g.seq + i) * g.heads * g.dv + h * g.dv;
    float inv = 1.0f / sum_s[orow + a];
    #pragma unroll
    for (int c = 0; c < 4; c++)
      if (ocol + c < g.dv) y[ocol + c] = o[a][c] * inv;
  }
}
