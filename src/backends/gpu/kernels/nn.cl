/* The "nn" family's kernels (src/backends/gpu/ops_nn.c launches them): convolution,
 * matrix products, pooling and inference-form BatchNormalization, float32, each summing
 * in float. Windows (Conv, pooling) are 3-D: 1-D and 2-D inputs come with leading
 * spatial dims of size 1, as in the reference kernels (src/backends/cpu/ref/ref.h). */

/* The geometry of a window over X [N, C, in0, in1, in2] producing Y [N, cout, out0,
 * out1, out2]: what kl_ref_window holds (its `kernel` is ksize here: a keyword of
 * OpenCL C), plus the channels. Matches kl_nn_window of ops_nn.c. */
typedef struct kl_nn_window {
  long in[3], out[3], ksize[3], stride[3], dilation[3], pad_begin[3], pad_end[3];
  long channels;       /* C */
  long cout;           /* Y's channels */
  long cin_per_group;  /* Conv: W's dim 1 */
  long cout_per_group; /* Conv: cout / group */
} kl_nn_window;

/* Offset of operand k (a row of bc.s) for element i of the output bc describes. */
long kl_nn_bcast_off(const kl_cl_bcast *bc, int k, long i) {
  long off = 0;
  for (int d = bc->rank - 1; d >= 0; d--) {
    off += i % bc->dims[d] * bc->s[k][d];
    i /= bc->dims[d];
  }
  return off;
}

/* What a fused op adds after its base op: v + Sum (operand 1 of bc, broadcast to Y;
 * absent when s_ is NULL), then the activation. */
float kl_nn_sum_act(float v, long i, __global const float *s_, ulong so,
                    const kl_cl_bcast *bc, int act, float a, float b) {
  if (s_) v += s_[so + kl_nn_bcast_off(bc, 1, i)];
  return kl_act(act, v, a, b);
}

/* The taps k < kn of a window starting at `start` (step dil) that land in [lo, hi):
 * [*k0, *k1) (kl_ref_tap_span's rule). */
void kl_nn_tap_span(long start, long kn, long dil, long lo, long hi, long *k0, long *k1) {
  long first = start >= lo ? 0 : (lo - start) / dil + ((lo - start) % dil != 0);
  long end = start >= hi ? 0 : (hi - 1 - start) / dil + 1;
  *k0 = min(first, kn);
  *k1 = max(min(end, kn), *k0);
}

/* Y[n, m, o] = act(B[m] + sum over the channels c of m's group and the taps k inside X of
 * X[n, c, o * stride - pad + k * dilation] * W[m, c', k] + Sum[...]).
 * X [N, C, in], W [cout, cin_per_group, kernel], B [cout] or NULL, Sum broadcast to Y
 * (bc operand 1) or NULL, Y [N, cout, out]; one work-item per element of Y, ordered
 * as Y (neighbours share W and read neighbouring X). */
__kernel void kl_nn_conv(__global const float *x_, ulong xo, __global const float *w_,
                         ulong wo, __global const float *b_, ulong bo,
                         __global const float *s_, ulong so, __global float *y_, ulong yo,
                         long n_out, kl_nn_window g, kl_cl_bcast bc, int act, float aa,
                         float ab) {
  long i = get_global_id(0);
  if (i >= n_out) return;
  long o[3], rest = i;
  for (int d = 2; d >= 0; d--) {
    o[d] = rest % g.out[d];
    rest /= g.out[d];
  }
  long m = rest % g.cout, n = rest / g.cout;
  long start[3], from[3], to[3];
  for (int d = 0; d < 3; d++) {
    start[d] = o[d] * g.stride[d] - g.pad_begin[d];
    kl_nn_tap_span(start[d], g.ksize[d], g.dilation[d], 0, g.in[d], &from[d], &to[d]);
  }
  long c0 = m / g.cout_per_group * g.cin_per_group;
  long xsize = g.in[0] * g.in[1] * g.in[2], wsize = g.ksize[0] * g.ksize[1] * g.ksize[2];
  __global const float *xp = x_ + xo + (n * g.channels + c0) * xsize;
  __global const float *wp = w_ + wo + m * g.cin_per_group * wsize;
  float acc = 0;
  for (long ci = 0; ci < g.cin_per_group; ci++, xp += xsize, wp += wsize)
    for (long k0 = from[0]; k0 < to[0]; k0++) {
      long i0 = start[0] + k0 * g.dilation[0];
      for (long k1 = from[1]; k1 < to[1]; k1++) {
        long row = (i0 * g.in[1] + start[1] + k1 * g.dilation[1]) * g.in[2] + start[2];
        long wrow = (k0 * g.ksize[1] + k1) * g.ksize[2];
        for (long k2 = from[2]; k2 < to[2]; k2++)
          acc += xp[row + k2 * g.dilation[2]] * wp[wrow + k2];
      }
    }
  if (b_) acc += b_[bo + m];
  y_[yo + i] = kl_nn_sum_act(acc, i, s_, so, &bc, act, aa, ab);
}

/* Convolution as an implicit matrix product, per batch n and group g:
 *   Y[n, g, m, p] = sum_k W[g, m, k] X~[n, g, k, p]   (m < cout/group, p < out positions,
 *   k = (c, k0, k1, k2) < cin/group * taps; X~ is X at the tap's position, 0 in padding)
 * W's rows are contiguous in k; X~ is gathered while a tile is loaded (no im2col buffer).
 * Work-groups of 256 work-items over 64 x 64 tiles of Y in steps of 16 along k through
 * local memory; each work-item holds a 4 x 4 block of Y in registers (rows ty + 16 i,
 * columns tx + 16 j: neighbours read neighbouring local memory). The epilogue is
 * kl_nn_conv's: bias, Sum, activation. Group id: tile (gid % tiles_p, gid / tiles_p %
 * tiles_m) of (batch, group) gid / (tiles_p * tiles_m). */
/* A convolution's weights W [rows][cin][taps] (rows = output channels, every group's)
 * tap-major into y [rows][taps][cin], n elements: what tc.cl's kl_tc_cvt reads. */
__kernel void kl_nn_w_taps(__global const float *w_, ulong wo, __global float *y_, ulong yo,
                           long n, long cin, long taps) {
  long i = get_global_id(0);
  if (i >= n) return;
  long row = i / (cin * taps), r = i % (cin * taps), t = r / cin, c = r % cin;
  y_[yo + i] = w_[wo + row * cin * taps + c * taps + t];
}

#define KL_CG_BM 64
#define KL_CG_BN 64
#define KL_CG_BK 16

/* One step of k through a 64 x 64 tile: acc[i][j] += as[k][ty + 16 i] * bs[k][tx + 16 j]
 * for the 16 k in local memory (the register blocks of kl_nn_conv_gemm and
 * kl_nn_matmul64). */
void kl_nn_tile_fma(__local const float (*as)[KL_CG_BM], __local const float (*bs)[KL_CG_BN],
                    int tx, int ty, float acc[4][4]) {
  for (int k = 0; k < KL_CG_BK; k++) {
    float a[4], b[4];
    for (int i = 0; i < 4; i++) a[i] = as[k][ty + 16 * i];
    for (int j = 0; j < 4; j++) b[j] = bs[k][tx + 16 * j];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) acc[i][j] = fma(a[i], b[j], acc[i][j]);
  }
}
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void
kl_nn_conv_gemm(__global const float *x_, ulong xo, __global const float *w_, ulong wo,
                __global const float *b_, ulong bo, __global const float *s_, ulong so,
                __global float *y_, ulong yo, kl_nn_window g, long groups, kl_cl_bcast bc,
                int act, float aa, float ab) {
  __local float as[KL_CG_BK][KL_CG_BM];
  __local float bs[KL_CG_BK][KL_CG_BN];
  __local int4 kt[KL_CG_BK];
  int tid = get_local_id(0), tx = tid % 16, ty = tid / 16;
  long M = g.cout_per_group, taps = g.ksize[0] * g.ksize[1] * g.ksize[2];
  long K = g.cin_per_group * taps, P = g.out[0] * g.out[1] * g.out[2];
  long xsize = g.in[0] * g.in[1] * g.in[2];
  long tiles_p = (P + KL_CG_BN - 1) / KL_CG_BN, tiles_m = (M + KL_CG_BM - 1) / KL_CG_BM;
  long grp = get_group_id(0);
  long p0 = grp % tiles_p * KL_CG_BN, m0 = grp / tiles_p % tiles_m * KL_CG_BM;
  long ng = grp / (tiles_p * tiles_m), n = ng / groups, gr = ng % groups;
  __global const float *wp = w_ + wo + gr * M * K;
  __global const float *xp = x_ + xo + (n * g.channels + gr * g.cin_per_group) * xsize;
  /* what this work-item loads: A rows (tid / 16 + 16 r) at k column tid % 16, B's k row
   * tid / 64 + 4 r at position column tid % 64 */
  long lp = p0 + tid % 64, o[3], rest = lp;
  for (int d = 2; d >= 0; d--) {
    o[d] = rest % g.out[d];
    rest /= g.out[d];
  }
  /* the gather in 32 bits (ops_nn.c: a group's channels of X and the window fit an int
   * with room): each step's 16 k as a table (X's offset of channel c, or -1 past K, and
   * the tap's offsets per dim), made by 16 work-items, then one unsigned compare per dim
   * an element */
  int st0 = (int)(o[0] * g.stride[0] - g.pad_begin[0]);
  int st1 = (int)(o[1] * g.stride[1] - g.pad_begin[1]);
  int st2 = (int)(o[2] * g.stride[2] - g.pad_begin[2]);
  int in0 = (int)g.in[0], in1 = (int)g.in[1], in2 = (int)g.in[2];
  bool lp_in = lp < P;
  float acc[4][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  for (long k0 = 0; k0 < K; k0 += KL_CG_BK) {
    if (tid < KL_CG_BK) {
      long k = k0 + tid;
      int c = (int)(k / taps), t = (int)(k % taps), k2 = (int)g.ksize[2], k1 = (int)g.ksize[1];
      kt[tid] = (int4)(k < K ? c * (int)xsize : -1, t / k2 / k1 * (int)g.dilation[0],
                       t / k2 % k1 * (int)g.dilation[1], t % k2 * (int)g.dilation[2]);
    }
    for (int r = 0; r < 4; r++) {
      long m = m0 + tid / 16 + 16 * r, k = k0 + tid % 16;
      as[tid % 16][tid / 16 + 16 * r] = m < M && k < K ? wp[m * K + k] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < 4; r++) {
      int4 e = kt[tid / 64 + 4 * r];
      int i0 = st0 + e.y, i1 = st1 + e.z, i2 = st2 + e.w;
      bool in = lp_in && e.x >= 0 && (uint)i0 < (uint)in0 && (uint)i1 < (uint)in1 &&
                (uint)i2 < (uint)in2;
      bs[tid / 64 + 4 * r][tid % 64] = in ? xp[e.x + (i0 * in1 + i1) * in2 + i2] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    kl_nn_tile_fma(as, bs, tx, ty, acc);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int i = 0; i < 4; i++) {
    long m = m0 + ty + 16 * i;
    if (m >= M) continue;
    long co = gr * M + m;
    float bias = b_ ? b_[bo + co] : 0.0f;
    for (int j = 0; j < 4; j++) {
      long p = p0 + tx + 16 * j;
      if (p >= P) continue;
      long yi = (n * g.cout + co) * P + p;
      y_[yo + yi] = kl_nn_sum_act(acc[i][j] + bias, yi, s_, so, &bc, act, aa, ab);
    }
  }
}

#define KL_NN_TILE 16

/* Batched matrix product with an epilogue, for Gemm, MatMul and their fused forms:
 *   Y[b, m, n] = act(alpha * sum_k A(b, m, k) B(b, k, n) + beta * E[..] + Sum[..])
 * A(b, m, k) = A[ao + batch offset + m * sam + k * sak] (strides make transA),
 * B(b, k, n) = B[bo + batch offset + k * sbk + n * sbn]; batch offsets from bb (the
 * batch dims of Y; operand 0 A's, 1 B's, in elements). E (Gemm's C or FusedMatMul's
 * Bias) and Sum broadcast to Y as bc's operands 0 and 1; either may be NULL.
 * Y [batch, M, N] (dims of 1 dropped by MatMul's rank-1 operands do not change the
 * order). Work-groups of 16 x 16 work-items, one output each, over 16 x 16 tiles of Y
 * laid out in one dimension (no per-dimension limit on the number of groups): group
 * g is tile (g % ntiles_n, g / ntiles_n % ntiles_m) of batch g / (ntiles_n * ntiles_m).
 * K runs in steps of 16 through local memory; edges are zero-filled. */
__kernel __attribute__((reqd_work_group_size(KL_NN_TILE * KL_NN_TILE, 1, 1))) void
kl_nn_matmul(__global const float *a_, ulong ao, __global const float *b_, ulong bo,
             __global const float *e_, ulong eo, __global const float *s_, ulong so,
             __global float *y_, ulong yo, long M, long N, long K, long sam, long sak,
             long sbk, long sbn, kl_cl_bcast bb, kl_cl_bcast bc, float alpha, float beta,
             int act, float aa, float ab) {
  __local float at[KL_NN_TILE][KL_NN_TILE];
  __local float bt[KL_NN_TILE][KL_NN_TILE + 1];
  int tx = get_local_id(0) % KL_NN_TILE, ty = get_local_id(0) / KL_NN_TILE;
  long grp = get_group_id(0);
  long tiles_n = (N + KL_NN_TILE - 1) / KL_NN_TILE, tiles_m = (M + KL_NN_TILE - 1) / KL_NN_TILE;
  long n0 = grp % tiles_n * KL_NN_TILE, m0 = grp / tiles_n % tiles_m * KL_NN_TILE;
  long batch = grp / (tiles_n * tiles_m);
  __global const float *a = a_ + ao + kl_nn_bcast_off(&bb, 0, batch);
  __global const float *b = b_ + bo + kl_nn_bcast_off(&bb, 1, batch);
  long m = m0 + ty, n = n0 + tx;
  float acc = 0;
  for (long k0 = 0; k0 < K; k0 += KL_NN_TILE) {
    long ka = k0 + tx, kb = k0 + ty; /* A's tile by rows ty, B's by rows kb */
    at[ty][tx] = m < M && ka < K ? a[m * sam + ka * sak] : 0.0f;
    bt[ty][tx] = kb < K && n < N ? b[kb * sbk + n * sbn] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < KL_NN_TILE; k++) acc += at[ty][k] * bt[k][tx];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (m >= M || n >= N) return;
  long i = (batch * M + m) * N + n;
  float v = alpha * acc;
  if (e_) v += beta * e_[eo + kl_nn_bcast_off(&bc, 0, i)];
  y_[yo + i] = kl_nn_sum_act(v, i, s_, so, &bc, act, aa, ab);
}

/* kl_nn_matmul's product and epilogue on 64 x 64 tiles of Y, each of its 256 work-items
 * holding a 4 x 4 block in registers (rows ty + 16 i, columns tx + 16 j), k in steps of
 * 16 through local memory: for products of at least 16 rows and columns. */
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void
kl_nn_matmul64(__global const float *a_, ulong ao, __global const float *b_, ulong bo,
               __global const float *e_, ulong eo, __global const float *s_, ulong so,
               __global float *y_, ulong yo, long M, long N, long K, long sam, long sak,
               long sbk, long sbn, kl_cl_bcast bb, kl_cl_bcast bc, float alpha, float beta,
               int act, float aa, float ab) {
  __local float as[KL_CG_BK][KL_CG_BM];
  __local float bs[KL_CG_BK][KL_CG_BN];
  int tid = get_local_id(0), tx = tid % 16, ty = tid / 16;
  long grp = get_group_id(0);
  long tiles_n = (N + KL_CG_BN - 1) / KL_CG_BN, tiles_m = (M + KL_CG_BM - 1) / KL_CG_BM;
  long n0 = grp % tiles_n * KL_CG_BN, m0 = grp / tiles_n % tiles_m * KL_CG_BM;
  long batch = grp / (tiles_n * tiles_m);
  __global const float *a = a_ + ao + kl_nn_bcast_off(&bb, 0, batch);
  __global const float *b = b_ + bo + kl_nn_bcast_off(&bb, 1, batch);
  float acc[4][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  for (long k0 = 0; k0 < K; k0 += KL_CG_BK) {
    for (int r = 0; r < 4; r++) {
      long m = m0 + tid / 16 + 16 * r, k = k0 + tid % 16;
      as[tid % 16][tid / 16 + 16 * r] = m < M && k < K ? a[m * sam + k * sak] : 0.0f;
      long kb = k0 + tid / 64 + 4 * r, n = n0 + tid % 64;
      bs[tid / 64 + 4 * r][tid % 64] = kb < K && n < N ? b[kb * sbk + n * sbn] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    kl_nn_tile_fma(as, bs, tx, ty, acc);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int i = 0; i < 4; i++) {
    long m = m0 + ty + 16 * i;
    if (m >= M) continue;
    for (int j = 0; j < 4; j++) {
      long n = n0 + tx + 16 * j;
      if (n >= N) continue;
      long yi = (batch * M + m) * N + n;
      float v = alpha * acc[i][j];
      if (e_) v += beta * e_[eo + kl_nn_bcast_off(&bc, 0, yi)];
      y_[yo + yi] = kl_nn_sum_act(v, yi, s_, so, &bc, act, aa, ab);
    }
  }
}

/* MaxPool and AveragePool over X [N, C, in] -> Y [N, C, out], one work-item per element
 * of Y. Only taps inside X are read (a huge window over padding costs nothing).
 * MaxPool: the largest tap, NaN skipped, -inf when no tap is a number. AveragePool: the
 * sum over the taps inside X divided by their count, or with include_pad by the taps
 * inside the padded input (those beyond the end padding never count). */
__kernel void kl_nn_pool(__global const float *x_, ulong xo, __global float *y_, ulong yo,
                         long n_out, kl_nn_window g, int is_max, int include_pad) {
  long i = get_global_id(0);
  if (i >= n_out) return;
  long o[3], rest = i;
  for (int d = 2; d >= 0; d--) {
    o[d] = rest % g.out[d];
    rest /= g.out[d];
  }
  long start[3], from[3], to[3];
  float padded = 1; /* taps inside the padded input, counted in float as ref in double */
  for (int d = 0; d < 3; d++) {
    long p0, p1;
    start[d] = o[d] * g.stride[d] - g.pad_begin[d];
    kl_nn_tap_span(start[d], g.ksize[d], g.dilation[d], -g.pad_begin[d],
                   g.in[d] + g.pad_end[d], &p0, &p1);
    padded *= (float)(p1 - p0);
    kl_nn_tap_span(start[d], g.ksize[d], g.dilation[d], 0, g.in[d], &from[d], &to[d]);
  }
  __global const float *xp = x_ + xo + rest * g.in[0] * g.in[1] * g.in[2];
  float acc = is_max ? -INFINITY : 0.0f;
  for (long k0 = from[0]; k0 < to[0]; k0++) {
    long i0 = start[0] + k0 * g.dilation[0];
    for (long k1 = from[1]; k1 < to[1]; k1++) {
      long row = (i0 * g.in[1] + start[1] + k1 * g.dilation[1]) * g.in[2] + start[2];
      for (long k2 = from[2]; k2 < to[2]; k2++) {
        float v = xp[row + k2 * g.dilation[2]];
        if (!is_max) acc += v;
        else if (v > acc) acc = v;
      }
    }
  }
  if (!is_max) {
    float inside = (float)((to[0] - from[0]) * (to[1] - from[1]) * (to[2] - from[2]));
    acc /= include_pad ? padded : inside;
  }
  y_[yo + i] = acc;
}

/* kl_nn_pool in 32-bit arithmetic, for X and Y of fewer than 2^30 elements and windows
 * whose pads, extents (ksize x dilation) and strided outputs stay below 2^28 (ops_nn.c
 * checks): the same taps in the same order, the same results; the index arithmetic,
 * divisions included, was most of the 64-bit kernel's time. */
void kl_nn_tap_span32(int start, int kn, int dil, int lo, int hi, int *k0, int *k1) {
  /* no division where dil is 1 (every CNN's pooling): 12 a pooled output otherwise */
  int first = start >= lo ? 0 : dil == 1 ? lo - start : (lo - start + dil - 1) / dil;
  int end = start >= hi ? 0 : dil == 1 ? hi - start : (hi - 1 - start) / dil + 1;
  *k0 = min(first, kn);
  *k1 = max(min(end, kn), *k0);
}

__kernel void kl_nn_pool32(__global const float *x_, ulong xo, __global float *y_, ulong yo,
                           long n_out, kl_nn_window g, int is_max, int include_pad) {
  int i = (int)get_global_id(0);
  if (i >= n_out) return;
  int in[3], out[3], o[3], rest = i;
  for (int d = 0; d < 3; d++) in[d] = (int)g.in[d], out[d] = (int)g.out[d];
  for (int d = 2; d >= 0; d--) {
    o[d] = rest % out[d];
    rest /= out[d];
  }
  int start[3], from[3], to[3], dil[3];
  float padded = 1; /* taps inside the padded input */
  for (int d = 0; d < 3; d++) {
    int p0, p1, pb = (int)g.pad_begin[d], kn = (int)g.ksize[d];
    dil[d] = (int)g.dilation[d];
    start[d] = o[d] * (int)g.stride[d] - pb;
    kl_nn_tap_span32(start[d], kn, dil[d], -pb, in[d] + (int)g.pad_end[d], &p0, &p1);
    padded *= (float)(p1 - p0);
    kl_nn_tap_span32(start[d], kn, dil[d], 0, in[d], &from[d], &to[d]);
  }
  __global const float *xp = x_ + xo + rest * in[0] * in[1] * in[2];
  float acc = is_max ? -INFINITY : 0.0f;
  for (int k0 = from[0]; k0 < to[0]; k0++) {
    int i0 = start[0] + k0 * dil[0];
    for (int k1 = from[1]; k1 < to[1]; k1++) {
      __global const float *row = xp + (i0 * in[1] + start[1] + k1 * dil[1]) * in[2] + start[2];
      for (int k2 = from[2]; k2 < to[2]; k2++) {
        float v = row[k2 * dil[2]];
        if (!is_max) acc += v;
        else if (v > acc) acc = v;
      }
    }
  }
  if (!is_max) {
    float inside = (float)((to[0] - from[0]) * (to[1] - from[1]) * (to[2] - from[2]));
    acc /= include_pad ? padded : inside;
  }
  y_[yo + i] = acc;
}

#define KL_NN_REDUCE 64

/* GlobalAveragePool / GlobalMaxPool: X [planes, size] -> Y [planes], a work-group of 64
 * per plane: strided partial results, then a tree in local memory. The mean of no
 * element is NaN (0 / 0) and the max -inf, as in the reference; a NaN anywhere makes
 * the max NaN. */
__kernel __attribute__((reqd_work_group_size(KL_NN_REDUCE, 1, 1))) void
kl_nn_global_pool(__global const float *x_, ulong xo, __global float *y_, ulong yo,
                  long size, int is_max) {
  __local float part[KL_NN_REDUCE];
  int lane = get_local_id(0);
  long plane = get_group_id(0);
  __global const float *xp = x_ + xo + plane * size;
  float acc = is_max ? -INFINITY : 0.0f;
  for (long j = lane; j < size; j += KL_NN_REDUCE) {
    float v = xp[j];
    acc = !is_max ? acc + v : isnan(v) || isnan(acc) ? NAN : fmax(acc, v);
  }
  part[lane] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = KL_NN_REDUCE / 2; step > 0; step /= 2) {
    if (lane < step) {
      float u = part[lane], v = part[lane + step];
      part[lane] = !is_max ? u + v : isnan(u) || isnan(v) ? NAN : fmax(u, v);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lane == 0) y_[yo + plane] = is_max ? part[0] : part[0] / (float)size;
}

/* BatchNormalization, inference form: Y = (X - mean[c]) * scale[c] / sqrt(var[c] + eps)
 * + B[c] over X [N, C, inner] (a 1-D X: C = inner = 1); one work-item per element. */
__kernel void kl_nn_batchnorm(__global const float *x_, ulong xo, __global const float *sc_,
                              ulong sco, __global const float *b_, ulong bo,
                              __global const float *mean_, ulong mo,
                              __global const float *var_, ulong vo, __global float *y_,
                              ulong yo, long n, long channels, long inner, float eps) {
  long i = get_global_id(0);
  if (i >= n) return;
  long c = i / inner % channels;
  float k = sc_[sco + c] / sqrt(var_[vo + c] + eps);
  y_[yo + i] = (x_[xo + i] - mean_[mo + c]) * k + b_[bo + c];
}
