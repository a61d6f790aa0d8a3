/* Matrix products and convolutions on NVIDIA's tensor cores in TF32 (precision "tf32":
 * operands rounded to 10-bit mantissas, products summed in float32, as cuBLAS's and
 * cuDNN's TF32 modes), through inline PTX `mma.sync.aligned.m16n8k8` (sm_80 and later).
 * Only the PTX that tools/build_ptx.sh writes for sm_80 has them (it defines KL_SM);
 * a program built from source has none of these kernels, and ops_nn.c asks for them
 * only where the program has them (kl_cl_has_kernel).
 *
 * Tiles: a work-group of 256 work-items (8 warps of 32) makes a BM x 128 tile of Y,
 * BM 128 (warps 2 x 4, each 64 x 32 of Y: 4 x 4 m16n8 products) or 64 (each 32 x 32:
 * 2 x 4), in steps of 16 along k through local memory, where the operands are held
 * rounded to TF32 (cvt.rna), A as [m][k] and B as [n][k], rows of 20 words: a warp's
 * fragment reads (lane 4g + t: rows g and g + 8, columns t and t + 4) hit 32 banks.
 * The next step's operands are read from global memory into registers while the
 * tensor cores work on the current one. Fragment layout (checked on the H100,
 * ../shared/GPU.md): A rows g, g + 8 at columns t, t + 4; B rows t, t + 4 at column g;
 * D rows g, g + 8 at columns 2t, 2t + 1. */

#if defined(KL_SM) && KL_SM >= 80

#define KL_TC_BN 128
#define KL_TC_BK 16
#define KL_TC_LD 20

uint kl_tc_tf32(float x) {
  uint r;
  __asm__("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

/* One element of Y through kl_nn_matmul's epilogue (alpha, beta E, Sum, activation):
 * a call, so that the unrolled loops over a work-item's 64 results stay small and the
 * results stay in registers. */
__attribute__((noinline)) void kl_tc_out(float v, long yi, __global const float *e_, ulong eo,
                                         __global const float *s_, ulong so, __global float *y_,
                                         ulong yo, const kl_cl_bcast *bc, float alpha,
                                         float beta, int act, float aa, float ab) {
  v = alpha * v;
  if (e_) v += beta * e_[eo + kl_nn_bcast_off(bc, 0, yi)];
  y_[yo + yi] = kl_nn_sum_act(v, yi, s_, so, bc, act, aa, ab);
}

#define KL_TC_MMA(d, a, b)                                                                 \
  __asm__("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "            \
          "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                          \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                  \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

/* The tensor-core work on one step of 16 along k: MT m-tiles of 16 rows per warp (rows
 * wr + 16 i), 4 n-tiles of 8 columns (wc + 8 j). */
#define KL_TC_STEP(MT, as, bs, wr, wc, g, t, acc)                                          \
  _Pragma("unroll") for (int ks = 0; ks < KL_TC_BK; ks += 8) {                                               \
    uint fa[MT][4], fb[4][2];                                                              \
    _Pragma("unroll") for (int i = 0; i < MT; i++) {                                                         \
      int r = wr + 16 * i + g;                                                             \
      fa[i][0] = as[r][ks + t];                                                            \
      fa[i][1] = as[r + 8][ks + t];                                                        \
      fa[i][2] = as[r][ks + t + 4];                                                        \
      fa[i][3] = as[r + 8][ks + t + 4];                                                    \
    }                                                                                      \
    _Pragma("unroll") for (int j = 0; j < 4; j++) {                                                          \
      int c = wc + 8 * j + g;                                                              \
      fb[j][0] = bs[c][ks + t];                                                            \
      fb[j][1] = bs[c][ks + t + 4];                                                        \
    }                                                                                      \
    _Pragma("unroll") for (int i = 0; i < MT; i++)                                                           \
      _Pragma("unroll") for (int j = 0; j < 4; j++) KL_TC_MMA(acc[i][j], fa[i], fb[j]);                      \
  }

/* kl_nn_matmul64's product and epilogue (its arguments, its meaning) on BM x 128 tiles.
 * A tile's elements: A(m, k) read along k when sak is 1 (16 work-items a row), else
 * along m; B(k, n) along n when sbn is 1, else along k: neighbouring work-items read
 * neighbouring addresses either way. */
#define KL_TC_MATMUL(NAME, BM, MT)                                                         \
  __kernel __attribute__((reqd_work_group_size(256, 1, 1))) void NAME(                     \
      __global const float *a_, ulong ao, __global const float *b_, ulong bo,              \
      __global const float *e_, ulong eo, __global const float *s_, ulong so,              \
      __global float *y_, ulong yo, long M, long N, long K, long sam, long sak, long sbk,  \
      long sbn, kl_cl_bcast bb, kl_cl_bcast bc, float alpha, float beta, int act,          \
      float aa, float ab) {                                                                \
    __local uint as[BM][KL_TC_LD];                                                         \
    __local uint bs[KL_TC_BN][KL_TC_LD];                                                   \
    int tid = get_local_id(0), lane = tid % 32, warp = tid / 32;                           \
    int g = lane / 4, t = lane % 4, wr = warp / 4 * (BM / 2), wc = warp % 4 * 32;          \
    long grp = get_group_id(0);                                                            \
    long tiles_n = (N + KL_TC_BN - 1) / KL_TC_BN, tiles_m = (M + BM - 1) / BM;             \
    long n0 = grp % tiles_n * KL_TC_BN, m0 = grp / tiles_n % tiles_m * BM;                 \
    long batch = grp / (tiles_n * tiles_m);                                                \
    __global const float *a = a_ + ao + kl_nn_bcast_off(&bb, 0, batch);                    \
    __global const float *b = b_ + bo + kl_nn_bcast_off(&bb, 1, batch);                    \
    bool a_k = sak == 1, b_n = sbn == 1;                                                   \
    /* this work-item's elements r < BM / 16 of A's tile and r < 8 of B's */              \
    int am = a_k ? tid / 16 : tid % BM, ak = a_k ? tid % 16 : tid / BM;                    \
    int astep_m = a_k ? 16 : 0, astep_k = a_k ? 0 : 256 / BM;                              \
    int bn = b_n ? tid % 128 : tid / 16, bk = b_n ? tid / 128 : tid % 16;                  \
    int bstep_n = b_n ? 0 : 16, bstep_k = b_n ? 2 : 0;                                     \
    float ra[BM / 16], rb[8];                                                              \
    float acc[MT][4][4];                                                                   \
    _Pragma("unroll") for (int i = 0; i < MT; i++)                                                           \
      _Pragma("unroll") for (int j = 0; j < 4; j++)                                                          \
        _Pragma("unroll") for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;                                   \
    _Pragma("unroll") for (int r = 0; r < BM / 16; r++) {                                                    \
      long m = m0 + am + astep_m * r, k = ak + astep_k * r;                                \
      ra[r] = m < M && k < K ? a[m * sam + k * sak] : 0.0f;                                \
    }                                                                                      \
    _Pragma("unroll") for (int r = 0; r < 8; r++) {                                                          \
      long n = n0 + bn + bstep_n * r, k = bk + bstep_k * r;                                \
      rb[r] = n < N && k < K ? b[k * sbk + n * sbn] : 0.0f;                                \
    }                                                                                      \
    for (long k0 = 0; k0 < K; k0 += KL_TC_BK) {                                            \
      _Pragma("unroll") for (int r = 0; r < BM / 16; r++)                                                    \
        as[am + astep_m * r][ak + astep_k * r] = kl_tc_tf32(ra[r]);                        \
      _Pragma("unroll") for (int r = 0; r < 8; r++) bs[bn + bstep_n * r][bk + bstep_k * r] = kl_tc_tf32(rb[r]); \
      barrier(CLK_LOCAL_MEM_FENCE);                                                        \
      long k1 = k0 + KL_TC_BK;                                                             \
      if (k1 < K) {                                                                        \
        _Pragma("unroll") for (int r = 0; r < BM / 16; r++) {                                                \
          long m = m0 + am + astep_m * r, k = k1 + ak + astep_k * r;                       \
          ra[r] = m < M && k < K ? a[m * sam + k * sak] : 0.0f;                            \
        }                                                                                  \
        _Pragma("unroll") for (int r = 0; r < 8; r++) {                                                      \
          long n = n0 + bn + bstep_n * r, k = k1 + bk + bstep_k * r;                       \
          rb[r] = n < N && k < K ? b[k * sbk + n * sbn] : 0.0f;                            \
        }                                                                                  \
      }                                                                                    \
      KL_TC_STEP(MT, as, bs, wr, wc, g, t, acc)                                            \
      barrier(CLK_LOCAL_MEM_FENCE);                                                        \
    }                                                                                      \
    _Pragma("unroll") for (int i = 0; i < MT; i++)                                                           \
      _Pragma("unroll") for (int j = 0; j < 4; j++)                                                          \
        _Pragma("unroll") for (int q = 0; q < 4; q++) {                                                      \
          long m = m0 + wr + 16 * i + g + 8 * (q / 2), n = n0 + wc + 8 * j + 2 * t + q % 2; \
          if (m >= M || n >= N) continue;                                                  \
          kl_tc_out(acc[i][j][q], (batch * M + m) * N + n, e_, eo, s_, so, y_, yo, &bc,     \
                    alpha, beta, act, aa, ab);                                             \
        }                                                                                  \
  }

KL_TC_MATMUL(kl_tc_matmul128, 128, 4)
KL_TC_MATMUL(kl_tc_matmul64, 64, 2)

/* kl_nn_conv_gemm's convolution (its arguments, its meaning) as an implicit product
 * per group: Y[n, g, m, p] = sum_k W[g, m, k] X~[n, g, k, p] with the batch folded into
 * the columns (column q = n * P + p: the 7 x 7 maps of a ResNet's last stage fill the
 * tiles). A is W's rows (contiguous in k). B is gathered: each work-item keeps one
 * column q (its output position's window start) and reads rows k of it through a table
 * of the 16 k of a step (X's offset of channel c and the tap's offsets per dim,
 * kt[.][0] < 0 past K), made by 16 work-items a step ahead, in two slots. */
#define KL_TC_CONV(NAME, BM, MT)                                                           \
  __kernel __attribute__((reqd_work_group_size(256, 1, 1))) void NAME(                     \
      __global const float *x_, ulong xo, __global const float *w_, ulong wo,              \
      __global const float *b_, ulong bo, __global const float *s_, ulong so,              \
      __global float *y_, ulong yo, kl_nn_window g, long groups, long batch, kl_cl_bcast bc, \
      int act, float aa, float ab) {                                                       \
    __local uint as[BM][KL_TC_LD];                                                         \
    __local uint bs[KL_TC_BN][KL_TC_LD];                                                   \
    __local int kt[2][KL_TC_BK][4];                                                        \
    int tid = get_local_id(0), lane = tid % 32, warp = tid / 32;                           \
    int fg = lane / 4, ft = lane % 4, wr = warp / 4 * (BM / 2), wc = warp % 4 * 32;        \
    long M = g.cout_per_group, taps = g.ksize[0] * g.ksize[1] * g.ksize[2];                \
    long K = g.cin_per_group * taps, P = g.out[0] * g.out[1] * g.out[2];                   \
    long Q = batch * P;                                                                    \
    long xsize = g.in[0] * g.in[1] * g.in[2];                                              \
    long tiles_n = (Q + KL_TC_BN - 1) / KL_TC_BN, tiles_m = (M + BM - 1) / BM;             \
    long grp = get_group_id(0);                                                            \
    long n0 = grp % tiles_n * KL_TC_BN, m0 = grp / tiles_n % tiles_m * BM;                 \
    long gr = grp / (tiles_n * tiles_m);                                                   \
    __global const float *wp = w_ + wo + gr * M * K;                                       \
    /* B: column q of this work-item, rows bk + 2 r */                                     \
    int bn = tid % 128, bk = tid / 128;                                                    \
    long q = n0 + bn, start[3];                                                            \
    __global const float *xp = x_ + xo;                                                    \
    bool q_in = q < Q;                                                                     \
    {                                                                                      \
      long nb = q_in ? q / P : 0, rest = q_in ? q % P : 0, o[3];                           \
      _Pragma("unroll") for (int d = 2; d >= 0; d--) {                                                       \
        o[d] = rest % g.out[d];                                                            \
        rest /= g.out[d];                                                                  \
      }                                                                                    \
      _Pragma("unroll") for (int d = 0; d < 3; d++) start[d] = o[d] * g.stride[d] - g.pad_begin[d];          \
      xp += (nb * g.channels + gr * g.cin_per_group) * xsize;                              \
    }                                                                                      \
    int am = tid / 16, ak = tid % 16;                                                      \
    float ra[BM / 16], rb[8];                                                              \
    float acc[MT][4][4];                                                                   \
    _Pragma("unroll") for (int i = 0; i < MT; i++)                                                           \
      _Pragma("unroll") for (int j = 0; j < 4; j++)                                                          \
        _Pragma("unroll") for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;                                   \
    /* the table of step s into slot s % 2 */                                              \
    _Pragma("unroll") for (int s = 0; s < 2; s++) if (tid < KL_TC_BK) {                                      \
      long k = s * KL_TC_BK + tid;                                                         \
      long c = k / taps, tt = k % taps;                                                    \
      kt[s][tid][0] = k < K ? (int)(c * xsize) : -1;                                       \
      kt[s][tid][3] = (int)(tt % g.ksize[2] * g.dilation[2]);                              \
      kt[s][tid][2] = (int)(tt / g.ksize[2] % g.ksize[1] * g.dilation[1]);                 \
      kt[s][tid][1] = (int)(tt / g.ksize[2] / g.ksize[1] * g.dilation[0]);                 \
    }                                                                                      \
    barrier(CLK_LOCAL_MEM_FENCE);                                                          \
    _Pragma("unroll") for (int r = 0; r < BM / 16; r++) {                                                    \
      long m = m0 + am + 16 * r;                                                           \
      ra[r] = m < M && ak < K ? wp[m * K + ak] : 0.0f;                                     \
    }                                                                                      \
    _Pragma("unroll") for (int r = 0; r < 8; r++) {                                                          \
      __local const int *e = kt[0][bk + 2 * r];                                            \
      long i0 = start[0] + e[1], i1 = start[1] + e[2], i2 = start[2] + e[3];               \
      rb[r] = q_in && e[0] >= 0 && i0 >= 0 && i0 < g.in[0] && i1 >= 0 && i1 < g.in[1] &&  \
                      i2 >= 0 && i2 < g.in[2]                                              \
                  ? xp[e[0] + (i0 * g.in[1] + i1) * g.in[2] + i2]                          \
                  : 0.0f;                                                                  \
    }                                                                                      \
    int step = 0;                                                                          \
    for (long k0 = 0; k0 < K; k0 += KL_TC_BK, step++) {                                    \
      _Pragma("unroll") for (int r = 0; r < BM / 16; r++) as[am + 16 * r][ak] = kl_tc_tf32(ra[r]);           \
      _Pragma("unroll") for (int r = 0; r < 8; r++) bs[bn][bk + 2 * r] = kl_tc_tf32(rb[r]);                  \
      if (tid < KL_TC_BK && step >= 1) { /* step + 1's table (step 1's was made above) */ \
        int s = (step + 1) % 2;                                                            \
        long k = (step + 1) * KL_TC_BK + tid;                                              \
        long c = k / taps, tt = k % taps;                                                  \
        kt[s][tid][0] = k < K ? (int)(c * xsize) : -1;                                     \
        kt[s][tid][3] = (int)(tt % g.ksize[2] * g.dilation[2]);                            \
        kt[s][tid][2] = (int)(tt / g.ksize[2] % g.ksize[1] * g.dilation[1]);               \
        kt[s][tid][1] = (int)(tt / g.ksize[2] / g.ksize[1] * g.dilation[0]);               \
      }                                                                                    \
      barrier(CLK_LOCAL_MEM_FENCE);                                                        \
      long k1 = k0 + KL_TC_BK;                                                             \
      if (k1 < K) {                                                                        \
        _Pragma("unroll") for (int r = 0; r < BM / 16; r++) {                                                \
          long m = m0 + am + 16 * r, k = k1 + ak;                                          \
          ra[r] = m < M && k < K ? wp[m * K + k] : 0.0f;                                   \
        }                                                                                  \
        int s = (step + 1) % 2;                                                            \
        _Pragma("unroll") for (int r = 0; r < 8; r++) {                                                      \
          __local const int *e = kt[s][bk + 2 * r];                                        \
          long i0 = start[0] + e[1], i1 = start[1] + e[2], i2 = start[2] + e[3];           \
          rb[r] = q_in && e[0] >= 0 && i0 >= 0 && i0 < g.in[0] && i1 >= 0 &&               \
                          i1 < g.in[1] && i2 >= 0 && i2 < g.in[2]                          \
                      ? xp[e[0] + (i0 * g.in[1] + i1) * g.in[2] + i2]                      \
                      : 0.0f;                                                              \
        }                                                                                  \
      }                                                                                    \
      KL_TC_STEP(MT, as, bs, wr, wc, fg, ft, acc)                                          \
      barrier(CLK_LOCAL_MEM_FENCE);                                                        \
    }                                                                                      \
    _Pragma("unroll") for (int i = 0; i < MT; i++)                                                           \
      _Pragma("unroll") for (int j = 0; j < 4; j++)                                                          \
        _Pragma("unroll") for (int r = 0; r < 4; r++) {                                                      \
          long m = m0 + wr + 16 * i + fg + 8 * (r / 2);                                    \
          long qq = n0 + wc + 8 * j + 2 * ft + r % 2;                                      \
          if (m >= M || qq >= Q) continue;                                                 \
          long co = gr * M + m, nb = qq / P, p = qq % P;                                   \
          long yi = (nb * g.cout + co) * P + p;                                            \
          float bias = b_ ? b_[bo + co] : 0.0f;                                            \
          kl_tc_out(acc[i][j][r] + bias, yi, NULL, 0, s_, so, y_, yo, &bc, 1.0f, 0.0f, act, \
                    aa, ab);                                                               \
        }                                                                                  \
  }

KL_TC_CONV(kl_tc_conv128, 128, 4)
KL_TC_CONV(kl_tc_conv64, 64, 2)

#endif
