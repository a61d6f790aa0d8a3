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
 * rounded to TF32 (cvt.rna), A as [m][k] in rows of 20 words and B as [k][n] in rows
 * of 136: a warp's fragment reads (lane 4g + t: A's rows g and g + 8 at columns t and
 * t + 4, B's rows t and t + 4 at column g) hit 32 banks, and so do the stores of
 * neighbouring work-items' 4-vectors.
 * The next step's operands are read from global memory into registers while the
 * tensor cores work on the current one, then stored into the other of two local
 * buffers: one barrier a step. Fragment layout (checked on the H100,
 * ../shared/GPU.md): A rows g, g + 8 at columns t, t + 4; B rows t, t + 4 at column g;
 * D rows g, g + 8 at columns 2t, 2t + 1. */

#if defined(KL_SM) && KL_SM >= 80

#define KL_TC_BN 128
#define KL_TC_BK 16
#define KL_TC_LD 20   /* A's rows [m][k] in local memory: BK + 4 words */
#define KL_TC_LDB 136 /* B's rows [k][n]: BN + 8 words */

uint kl_tc_tf32(float x) {
  uint r;
  __asm__("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

/* The epilogue's addends reach element yi (row m, column n) of Y by mode: 1 at Y's own
 * index, 2 at the column n (a bias along Y's last dim), 3 by the general broadcast of
 * operand k of bc (ops_nn.c picks the mode; 0: absent). The general case and the
 * activations but Relu are calls, so that the unrolled loops over a work-item's 64
 * results stay small and the results stay in registers. */
__attribute__((noinline)) float kl_tc_bcast(__global const float *p, ulong po,
                                            const kl_cl_bcast *bc, int k, long yi) {
  return p[po + kl_nn_bcast_off(bc, k, yi)];
}

__attribute__((noinline)) float kl_tc_act(float v, int act, float a, float b) {
  return kl_act(act, v, a, b);
}

#define KL_TC_ADDEND(p, po, mode, bc, k, yi, n)                                            \
  ((mode) == 1 ? (p)[(po) + (yi)] : (mode) == 2 ? (p)[(po) + (n)] : kl_tc_bcast(p, po, bc, k, yi))

/* Gelu (erf) inline in the epilogues: through kl_tc_act (a call, whose registers the
 * callers save around it, and libclc's erf) it took 0.22 ms of BERT-base's 4096 x 768 x
 * 3072 FusedMatMul on the H200 (0.37 against 0.15 ms with the bias alone). x Phi(x) as
 * the CPU's kl_g_gelu_erf (vmath_generic.h; the constants of vmath_coef.h, which
 * meson.build joins in front of the kernels, so the two stay one set): below
 * |x| / sqrt 2 = 1, 1/2 + x/sqrt2 Q(x^2/2) / 2 with erf's odd polynomial; above,
 * erfc(|x| / sqrt 2) / 2 = e^(-x^2/2) erfcx(t) / 2, x^2 as hi + lo (fma), |x| clamped at
 * 14.5 where e^(-x^2/2) is 0 in float. */
float kl_tc_erf_q(float a2) {
  float q = KL_ERF_C6;
  q = fma(q, a2, KL_ERF_C5);
  q = fma(q, a2, KL_ERF_C4);
  q = fma(q, a2, KL_ERF_C3);
  q = fma(q, a2, KL_ERF_C2);
  q = fma(q, a2, KL_ERF_C1);
  return fma(q, a2, KL_ERF_C0);
}

float kl_tc_gelu(float x) {
  float a = fabs(x), t = a * KL_SQRT1_2;
  if (t < KL_ERF_SMALL) return x * (0.5f + copysign(0.5f * t * kl_tc_erf_q(t * t), x));
  float xa = fmin(a, KL_GELU_BIG), tc = xa * KL_SQRT1_2, hi = xa * xa, lo = fma(xa, xa, -hi);
  float w = (tc - KL_ERFCX_W) / (tc + KL_ERFCX_W), g = KL_ERFCX_C8;
  g = fma(g, w, KL_ERFCX_C7);
  g = fma(g, w, KL_ERFCX_C6);
  g = fma(g, w, KL_ERFCX_C5);
  g = fma(g, w, KL_ERFCX_C4);
  g = fma(g, w, KL_ERFCX_C3);
  g = fma(g, w, KL_ERFCX_C2);
  g = fma(g, w, KL_ERFCX_C1);
  g = fma(g, w, KL_ERFCX_C0);
  float half_erfc = 0.5f * exp(-0.5f * hi) * (1.0f - 0.5f * lo) * g;
  return x * (x > 0 ? 1.0f - half_erfc : half_erfc);
}

#define KL_TC_ACT(v, act, a, b)                                                            \
  ((act) == KL_ACT_NONE ? (v) : (act) == KL_ACT_RELU ? ((v) < 0 ? 0.0f : (v))               \
                                                     : kl_tc_act(v, act, a, b))
/* KL_TC_ACT with Gelu inline: the wgmma products' epilogues only. In kl_tc_mm's and
 * kl_tc_cvt's the inline Gelu slowed the ReLU and residual epilogues of ResNet-50 b32
 * by 0.33 ms on the H200 (layer1's 1x1 + Sum 0.165 -> 0.185 ms), though it ran there
 * only as a branch not taken. */
#define KL_TC_ACT_G(v, act, a, b)                                                          \
  ((act) == KL_ACT_NONE   ? (v)                                                            \
   : (act) == KL_ACT_RELU ? ((v) < 0 ? 0.0f : (v))                                         \
   : (act) == KL_ACT_GELU ? kl_tc_gelu(v)                                                  \
                          : kl_tc_act(v, act, a, b))

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
      fb[j][0] = bs[ks + t][c];                                                            \
      fb[j][1] = bs[ks + t + 4][c];                                                        \
    }                                                                                      \
    _Pragma("unroll") for (int i = 0; i < MT; i++)                                                           \
      _Pragma("unroll") for (int j = 0; j < 4; j++) KL_TC_MMA(acc[i][j], fa[i], fb[j]);                      \
  }

/* The pipeline shared by the kernels below: the operands of step s + 1 are read from
 * global memory into registers (LOAD) while the tensor cores work on step s's in local
 * memory (KL_TC_STEP), then stored into the other of two local buffers (STORE): one
 * barrier a step. */
#define KL_TC_PIPELINE(MT, LOAD, STORE, PREP)                                              \
  {                                                                                        \
    int steps = (int)((K + KL_TC_BK - 1) / KL_TC_BK);                                      \
    LOAD(0);                                                                               \
    STORE(0);                                                                              \
    barrier(CLK_LOCAL_MEM_FENCE);                                                          \
    for (int st = 0; st < steps; st++) {                                                   \
      int cur = st % 2;                                                                    \
      if (st + 1 < steps) LOAD(st + 1);                                                    \
      KL_TC_STEP(MT, as[cur], bs[cur], wr, wc, fg, ft, acc)                                \
      if (st + 1 < steps) STORE(1 - cur);                                                  \
      PREP(st + 2);                                                                        \
      barrier(CLK_LOCAL_MEM_FENCE);                                                        \
    }                                                                                      \
  }

/* kl_nn_matmul64's product and epilogue (its arguments, its meaning) on BM x 128 tiles,
 * plus vec: bit 0 when A's rows are contiguous in k (sak 1) and A's offset, sam and K
 * are multiples of 4, bit 1 when B's rows are contiguous in n (sbn 1) and B's offset,
 * sbk and N are: those operands are read 4 floats at a time. Otherwise A(m, k) is read
 * along k when sak is 1 (16 work-items a row), else along m; B(k, n) along n when sbn
 * is 1, else along k: neighbouring work-items read neighbouring addresses either way. */
#define KL_TC_MATMUL(NAME, BM, MT)                                                         \
  __kernel __attribute__((reqd_work_group_size(256, 1, 1))) void NAME(                     \
      __global const float *a_, ulong ao, __global const float *b_, ulong bo,              \
      __global const float *e_, ulong eo, __global const float *s_, ulong so,              \
      __global float *y_, ulong yo, long M, long N, long K, long sam, long sak, long sbk,  \
      long sbn, kl_cl_bcast bb, kl_cl_bcast bc, float alpha, float beta, int act,          \
      float aa, float ab, int vec, int emode, int smode) {                                 \
    enum { TILE_M = BM }; /* for the LOAD and STORE macros */                             \
    __local uint as[2][BM][KL_TC_LD] __attribute__((aligned(16)));                         \
    __local uint bs[2][KL_TC_BK][KL_TC_LDB] __attribute__((aligned(16)));                  \
    int tid = get_local_id(0), lane = tid % 32, warp = tid / 32;                           \
    int fg = lane / 4, ft = lane % 4, wr = warp / 4 * (BM / 2), wc = warp % 4 * 32;        \
    long grp = get_group_id(0);                                                            \
    long tiles_n = (N + KL_TC_BN - 1) / KL_TC_BN, tiles_m = (M + BM - 1) / BM;             \
    long n0 = grp % tiles_n * KL_TC_BN, m0 = grp / tiles_n % tiles_m * BM;                 \
    long batch = grp / (tiles_n * tiles_m);                                                \
    __global const float *a = a_ + ao + kl_nn_bcast_off(&bb, 0, batch);                    \
    __global const float *b = b_ + bo + kl_nn_bcast_off(&bb, 1, batch);                    \
    bool va = vec & 1, vb = vec >> 1 & 1, a_k = sak == 1, b_n = sbn == 1;                  \
    /* this work-item's elements: A's r < BM / 16 (as 4-vectors: r < BM / 64), B's r < 8  \
     * (as 4-vectors: r < 2) */                                                            \
    int am4 = tid / 4, ak4 = tid % 4 * 4, bn4 = tid % 32 * 4, bk4 = tid / 32; /* 4-vectors */ \
    int am = a_k ? tid / 16 : tid % BM, ak = a_k ? tid % 16 : tid / BM;                    \
    int am_step = a_k ? 16 : 0, ak_step = a_k ? 0 : 256 / BM;                              \
    int bn = b_n ? tid % 128 : tid / 16, bk = b_n ? tid / 128 : tid % 16;                  \
    int bn_step = b_n ? 0 : 16, bk_step = b_n ? 2 : 0;                                     \
    float ra[BM / 16], rb[8];                                                              \
    float acc[MT][4][4];                                                                   \
    _Pragma("unroll") for (int i = 0; i < MT; i++)                                         \
      _Pragma("unroll") for (int j = 0; j < 4; j++)                                        \
        _Pragma("unroll") for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;                 \
    KL_TC_PIPELINE(MT, KL_TC_MM_LOAD, KL_TC_MM_STORE, KL_TC_NO_PREP)                       \
    _Pragma("unroll") for (int i = 0; i < MT; i++)                                         \
      _Pragma("unroll") for (int j = 0; j < 4; j++)                                        \
        _Pragma("unroll") for (int q = 0; q < 4; q++) {                                    \
          long m = m0 + wr + 16 * i + fg + 8 * (q / 2);                                    \
          long n = n0 + wc + 8 * j + 2 * ft + q % 2;                                       \
          if (m >= M || n >= N) continue;                                                  \
          long yi = (batch * M + m) * N + n;                                               \
          float v = alpha * acc[i][j][q];                                                  \
          if (e_) v += beta * KL_TC_ADDEND(e_, eo, emode, &bc, 0, yi, n);                  \
          if (s_) v += KL_TC_ADDEND(s_, so, smode, &bc, 1, yi, n);                         \
          y_[yo + yi] = KL_TC_ACT(v, act, aa, ab);                                         \
        }                                                                                  \
  }

#define KL_TC_NO_PREP(s)

/* The matrix product's step s into ra, rb (zeros outside A and B). */
#define KL_TC_MM_LOAD(s)                                                                   \
  {                                                                                        \
    long k0 = (long)(s) * KL_TC_BK;                                                        \
    if (va) {                                                                              \
      KL_TC_LOAD_A4(a, sam);                                                               \
    } else {                                                                               \
      _Pragma("unroll") for (int r = 0; r < TILE_M / 16; r++) {                                \
        long m = m0 + am + am_step * r, k = k0 + ak + ak_step * r;                         \
        ra[r] = m < M && k < K ? a[m * sam + k * sak] : 0.0f;                              \
      }                                                                                    \
    }                                                                                      \
    if (vb) {                                                                              \
      _Pragma("unroll") for (int r = 0; r < 2; r++) {                                      \
        long n = n0 + bn4, k = k0 + bk4 + 8 * r;                                             \
        float4 v = n < N && k < K ? *(__global const float4 *)(b + k * sbk + n)            \
                                  : (float4)(0.0f);                                        \
        rb[4 * r] = v.x, rb[4 * r + 1] = v.y, rb[4 * r + 2] = v.z, rb[4 * r + 3] = v.w;    \
      }                                                                                    \
    } else {                                                                               \
      _Pragma("unroll") for (int r = 0; r < 8; r++) {                                      \
        long n = n0 + bn + bn_step * r, k = k0 + bk + bk_step * r;                         \
        rb[r] = n < N && k < K ? b[k * sbk + n * sbn] : 0.0f;                              \
      }                                                                                    \
    }                                                                                      \
  }

/* A's 4-vectors of step k0 into ra: rows am4 + 64 r, columns ak4..ak4 + 3 of the rows
 * of p, rs floats apart (zeros outside M x K; both kernels). */
#define KL_TC_LOAD_A4(p, rs)                                                               \
  _Pragma("unroll") for (int r = 0; r < TILE_M / 64; r++) {                                \
    long m = m0 + am4 + 64 * r, k = k0 + ak4;                                              \
    float4 v = m < M && k < K ? *(__global const float4 *)((p) + m * (rs) + k)             \
                              : (float4)(0.0f);                                            \
    ra[4 * r] = v.x, ra[4 * r + 1] = v.y, ra[4 * r + 2] = v.z, ra[4 * r + 3] = v.w;        \
  }

/* A's 4-vectors ra (rows am4 + 64 r, columns ak4..ak4 + 3) rounded to TF32 into local
 * buffer t, 16 bytes a store (both kernels). */
#define KL_TC_STORE_A4(t)                                                                  \
  _Pragma("unroll") for (int r = 0; r < TILE_M / 64; r++)                                  \
    *(__local uint4 *)&as[t][am4 + 64 * r][ak4] =                                          \
        (uint4)(kl_tc_tf32(ra[4 * r]), kl_tc_tf32(ra[4 * r + 1]), kl_tc_tf32(ra[4 * r + 2]), \
                kl_tc_tf32(ra[4 * r + 3]))

/* ra, rb rounded to TF32 into local buffer t: A as [m][k], B as [k][n]. */
#define KL_TC_MM_STORE(t)                                                                  \
  {                                                                                        \
    if (va) {                                                                              \
      KL_TC_STORE_A4(t);                                                                   \
    } else {                                                                               \
      _Pragma("unroll") for (int r = 0; r < TILE_M / 16; r++)                                  \
        as[t][am + am_step * r][ak + ak_step * r] = kl_tc_tf32(ra[r]);                     \
    }                                                                                      \
    if (vb) {                                                                              \
      _Pragma("unroll") for (int r = 0; r < 2; r++)                                        \
        *(__local uint4 *)&bs[t][bk4 + 8 * r][bn4] =                                         \
            (uint4)(kl_tc_tf32(rb[4 * r]), kl_tc_tf32(rb[4 * r + 1]),                      \
                    kl_tc_tf32(rb[4 * r + 2]), kl_tc_tf32(rb[4 * r + 3]));                 \
    } else {                                                                               \
      _Pragma("unroll") for (int r = 0; r < 8; r++)                                        \
        bs[t][bk + bk_step * r][bn + bn_step * r] = kl_tc_tf32(rb[r]);                     \
    }                                                                                      \
  }

KL_TC_MATMUL(kl_tc_matmul128, 128, 4)
KL_TC_MATMUL(kl_tc_matmul64, 64, 2)

/* kl_nn_conv_gemm's convolution (its arguments, its meaning) as an implicit product
 * per group: Y[n, g, m, p] = sum_k W[g, m, k] X~[n, g, k, p] with the batch folded into
 * the columns (column q = n * P + p: the 7 x 7 maps of a ResNet's last stage fill the
 * tiles). A is W's rows (contiguous in k; read 4 floats at a time when vec, which the
 * host sets when K and W's offset are multiples of 4). B is gathered: each work-item
 * keeps one column q (its output position's window start) and reads rows k of it
 * through a table of a step's 16 k (X's offset of channel c and the tap's offsets per
 * dim; kt[.][.].x < 0 past K), made two steps ahead by 16 work-items, in two slots. */
#define KL_TC_CONV(NAME, BM, MT)                                                           \
  __kernel __attribute__((reqd_work_group_size(256, 1, 1))) void NAME(                     \
      __global const float *x_, ulong xo, __global const float *w_, ulong wo,              \
      __global const float *b_, ulong bo, __global const float *s_, ulong so,              \
      __global float *y_, ulong yo, kl_nn_window g, long groups, long batch, kl_cl_bcast bc, \
      int act, float aa, float ab, int vec, int smode) {                                   \
    enum { TILE_M = BM }; /* for the LOAD and STORE macros */                             \
    __local uint as[2][BM][KL_TC_LD] __attribute__((aligned(16)));                         \
    __local uint bs[2][KL_TC_BK][KL_TC_LDB] __attribute__((aligned(16)));                  \
    __local int4 kt[2][KL_TC_BK];                                                          \
    int tid = get_local_id(0), lane = tid % 32, warp = tid / 32;                           \
    int fg = lane / 4, ft = lane % 4, wr = warp / 4 * (BM / 2), wc = warp % 4 * 32;        \
    long M = g.cout_per_group, taps = g.ksize[0] * g.ksize[1] * g.ksize[2];                \
    long K = g.cin_per_group * taps, P = g.out[0] * g.out[1] * g.out[2];                   \
    long Q = batch * P, xsize = g.in[0] * g.in[1] * g.in[2];                               \
    long tiles_n = (Q + KL_TC_BN - 1) / KL_TC_BN, tiles_m = (M + BM - 1) / BM;             \
    long grp = get_group_id(0);                                                            \
    long n0 = grp % tiles_n * KL_TC_BN, m0 = grp / tiles_n % tiles_m * BM;                 \
    long gr = grp / (tiles_n * tiles_m);                                                   \
    __global const float *wp = w_ + wo + gr * M * K;                                       \
    bool va = vec & 1;                                                                     \
    int am4 = tid / 4, ak4 = tid % 4 * 4, am = tid / 16, ak = tid % 16;                    \
    /* B: column q of this work-item, rows bk + 2 r */                                     \
    int bn = tid % 128, bk = tid / 128;                                                    \
    long q = n0 + bn, start[3];                                                            \
    __global const float *xp = x_ + xo;                                                    \
    bool q_in = q < Q;                                                                     \
    {                                                                                      \
      long nb = q_in ? q / P : 0, rest = q_in ? q % P : 0, o[3];                           \
      _Pragma("unroll") for (int d = 2; d >= 0; d--) {                                     \
        o[d] = rest % g.out[d];                                                            \
        rest /= g.out[d];                                                                  \
      }                                                                                    \
      _Pragma("unroll") for (int d = 0; d < 3; d++) start[d] =                             \
          o[d] * g.stride[d] - g.pad_begin[d];                                             \
      xp += (nb * g.channels + gr * g.cin_per_group) * xsize;                              \
    }                                                                                      \
    /* the gather's arithmetic in 32 bits (ops_nn.c: a group's channels of X, Cin x in0 x  \
     * in1 x in2, fit in an int), a position out of range one unsigned compare per dim */  \
    int st0 = (int)start[0], st1 = (int)start[1], st2 = (int)start[2];                     \
    int in0 = (int)g.in[0], in1 = (int)g.in[1], in2 = (int)g.in[2];                        \
    float ra[BM / 16], rb[8];                                                              \
    float acc[MT][4][4];                                                                   \
    _Pragma("unroll") for (int i = 0; i < MT; i++)                                         \
      _Pragma("unroll") for (int j = 0; j < 4; j++)                                        \
        _Pragma("unroll") for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;                 \
    KL_TC_CONV_PREP(0);                                                                    \
    KL_TC_CONV_PREP(1);                                                                    \
    barrier(CLK_LOCAL_MEM_FENCE);                                                          \
    KL_TC_PIPELINE(MT, KL_TC_CONV_LOAD, KL_TC_CONV_STORE, KL_TC_CONV_PREP)                 \
    /* Y's offset of each of this work-item's 8 columns (image nb, position p), -1 past Q */ \
    long col[8];                                                                           \
    _Pragma("unroll") for (int c = 0; c < 8; c++) {                                        \
      long qq = n0 + wc + 8 * (c / 2) + 2 * ft + c % 2;                                    \
      col[c] = qq < Q ? qq / P * g.cout * P + qq % P : -1;                                 \
    }                                                                                      \
    _Pragma("unroll") for (int i = 0; i < MT; i++)                                         \
      _Pragma("unroll") for (int h = 0; h < 2; h++) {                                      \
        long m = m0 + wr + 16 * i + fg + 8 * h;                                            \
        if (m >= M) continue;                                                              \
        long co = gr * M + m;                                                              \
        float bias = b_ ? b_[bo + co] : 0.0f;                                              \
        _Pragma("unroll") for (int c = 0; c < 8; c++) {                                    \
          if (col[c] < 0) continue;                                                        \
          long yi = col[c] + co * P;                                                       \
          float v = acc[i][c / 2][2 * h + c % 2] + bias;                                   \
          if (s_) v += KL_TC_ADDEND(s_, so, smode, &bc, 1, yi, 0);                         \
          y_[yo + yi] = KL_TC_ACT(v, act, aa, ab);                                         \
        }                                                                                  \
      }                                                                                    \
  }

/* The table of step s into slot s % 2 (16 work-items; nothing past the last step). */
#define KL_TC_CONV_PREP(s)                                                                 \
  if (tid < KL_TC_BK && (long)(s) * KL_TC_BK < K) {                                        \
    long k = (long)(s) * KL_TC_BK + tid;                                                   \
    long c = k / taps, tt = k % taps;                                                      \
    kt[(s) % 2][tid] = (int4)(k < K ? (int)(c * xsize) : -1,                               \
                              (int)(tt / g.ksize[2] / g.ksize[1] * g.dilation[0]),         \
                              (int)(tt / g.ksize[2] % g.ksize[1] * g.dilation[1]),         \
                              (int)(tt % g.ksize[2] * g.dilation[2]));                     \
  }

#define KL_TC_CONV_LOAD(s)                                                                 \
  {                                                                                        \
    long k0 = (long)(s) * KL_TC_BK;                                                        \
    if (va) {                                                                              \
      KL_TC_LOAD_A4(wp, K);                                                                \
    } else {                                                                               \
      _Pragma("unroll") for (int r = 0; r < TILE_M / 16; r++) {                                \
        long m = m0 + am + 16 * r, k = k0 + ak;                                            \
        ra[r] = m < M && k < K ? wp[m * K + k] : 0.0f;                                     \
      }                                                                                    \
    }                                                                                      \
    _Pragma("unroll") for (int r = 0; r < 8; r++) {                                        \
      int4 e = kt[(s) % 2][bk + 2 * r]; /* one 16-byte read */                             \
      int i0 = st0 + e.y, i1 = st1 + e.z, i2 = st2 + e.w;                                  \
      rb[r] = q_in && e.x >= 0 && (uint)i0 < (uint)in0 && (uint)i1 < (uint)in1 &&          \
                      (uint)i2 < (uint)in2                                                 \
                  ? xp[e.x + (i0 * in1 + i1) * in2 + i2]                                   \
                  : 0.0f;                                                                  \
    }                                                                                      \
  }

#define KL_TC_CONV_STORE(t)                                                                \
  {                                                                                        \
    if (va) {                                                                              \
      KL_TC_STORE_A4(t);                                                                   \
    } else {                                                                               \
      _Pragma("unroll") for (int r = 0; r < TILE_M / 16; r++)                                  \
        as[t][am + 16 * r][ak] = kl_tc_tf32(ra[r]);                                        \
    }                                                                                      \
    _Pragma("unroll") for (int r = 0; r < 8; r++) bs[t][bk + 2 * r][bn] = kl_tc_tf32(rb[r]); \
  }

KL_TC_CONV(kl_tc_conv128, 128, 4)
KL_TC_CONV(kl_tc_conv64, 64, 2)

/* ---- Products of 4-vector operands: cp.async, ldmatrix, 64-column warp tiles ----
 *
 * kl_tc_mm{128,64}[t]: the product of kl_tc_matmul's arguments (its meaning, its
 * epilogue; `vec` is not taken) where A's rows are contiguous in k and B's rows in n
 * (or, in the kernels ending in t, B's columns in k: B^T as [n][k], Gemm's transB),
 * with the offsets, the row strides and the batch strides multiples of 4 floats and
 * K (and N for B as [k][n]) too: ops_nn.c checks this. A work-group of 128 work-items
 * (4 warps, 2 x 2) makes a BM x 128 tile of Y, each warp BM / 2 x 64 (MT x 8 products of
 * m16n8k8 a step of 8 along k). Operands go from global to local memory with
 * `cp.async` (16 bytes at a time, zeros past M, N and K through its source size; no
 * registers, no rounding on the way), STAGES steps of 16 along k in flight (3 for rows
 * of 128, 4 for 64: 48 KB, all that OpenCL gives a work-group on NVIDIA). Local memory
 * holds the tiles unpadded, their 16-byte pieces swizzled so that reads hit distinct
 * banks: A and B^T as rows of 16 words, piece c of row r at c ^ (r / 2 % 4), whose
 * fragments `ldmatrix` reads 4 at a time (the 8 rows of each 8 x 4 block on 8 distinct
 * pieces of the 128-byte line); B as [k][n] in rows of 128 words, piece c of row k at
 * c ^ 2 (k % 4), read a word at a time (lanes 4g + t: rows t, t + 4 at column g: 32
 * banks). Fragments are rounded to TF32 (cvt.rna) as they are read. Work-groups sweep
 * the columns 8 row tiles at a time, so that the tiles of A and B they share are read
 * from L2. Operand e's mode 4 adds e[m] (a convolution's bias: ops_nn.c's 1 x 1
 * convolutions). */

#define KL_MM_BK 16
#define KL_MM_TILE 2048 /* words of B's tile a step: 16 x 128 */

void kl_mm_cp16(__local uint *dst, __global const float *src, bool ok) {
  __asm__ volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"l"((ulong)dst),
                   "l"(src), "r"(ok ? 16 : 0)
                   : "memory");
}

#define KL_MM_COMMIT() __asm__ volatile("cp.async.commit_group;" ::: "memory")
/* waits until at most N (a literal) groups of copies are in flight */
#define KL_MM_WAIT(N) __asm__ volatile("cp.async.wait_group " #N ";" ::: "memory")

#define KL_MM_LDM4(r, p)                                                                   \
  __asm__ volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"        \
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                        \
                   : "l"((ulong)(p))                                                       \
                   : "memory")

#define KL_MM_TF32(x) kl_tc_tf32(as_float(x))

/* Step s of k into buffer `buf`: A's BM rows, B's 16 rows of [k][n] or 128 rows of
 * [n][k], 16 bytes a copy, each to its swizzled place (ad_, bd_: this work-item's). */
#define KL_MM_LOAD(BM, BT, s, buf)                                                         \
  {                                                                                        \
    long k0 = (long)(s) * KL_MM_BK;                                                        \
    __local uint *ad = as + (buf) * (BM * KL_MM_BK), *bd = bs + (buf) * KL_MM_TILE;        \
    bool kin = k0 + ck < K;                                                                \
    _Pragma("unroll") for (int r = 0; r < BM / 32; r++)                                    \
      kl_mm_cp16(ad + ad_ + 512 * r, kin && aok[r] ? ap[r] + k0 : a, kin && aok[r]);       \
    if (BT) {                                                                              \
      _Pragma("unroll") for (int r = 0; r < 4; r++)                                        \
        kl_mm_cp16(bd + ad_ + 512 * r, kin && bok[r] ? bp[r] + k0 : b, kin && bok[r]);     \
    } else {                                                                               \
      _Pragma("unroll") for (int r = 0; r < 4; r++) {                                      \
        long k = k0 + bkr + 4 * r;                                                         \
        bool ok = bok[0] && k < K;                                                         \
        kl_mm_cp16(bd + bd_ + 512 * r, ok ? bp[0] + k * sbk : b, ok);                      \
      }                                                                                    \
    }                                                                                      \
  }

/* The epilogue: the warps' results pass through local memory (bs, the tiles' buffers,
 * once the last step is done), 16 rows of a warp's 64 columns at a time, so that each
 * work-item then finishes 4 neighbouring columns of a row and writes them as one
 * 16-byte store (where Y's offset and N are multiples of 4), reading the addends
 * beside them; a loop, not 128 unrolled copies of the addend and activation code. */
#define KL_MM_LDE 72 /* words of a row of a warp's results in local memory */
/* The corner of the results acc[i] in the tile: rows ROW(i).., columns COL(i).. (16 x 64
 * a warp); kl_tc_mm's and kl_tc_cvt's are m16 tiles i of the warp's (BM / 2) x 64 */
#define KL_MM_ROW(i) (wr + 16 * (i))
#define KL_MM_COL(i) (wc)
#define KL_MM_EPILOGUE(MT, ROW, COL, ACT)                                                              \
  {                                                                                        \
    KL_MM_WAIT(0);                                                                         \
    __local float *ew = (__local float *)bs + warp * (16 * KL_MM_LDE);                     \
    bool y4 = N % 4 == 0 && yo % 4 == 0;                                                   \
    /* a Sum of Y's shape in 16-byte pieces: a warp's 16 rows x 64 columns copied to      \
     * local memory (as, free after the last step) at once, not read row after row */     \
    bool s4 = s_ && smode == 1 && y4 && so % 4 == 0;                                       \
    __local float *ss = (__local float *)as + warp * (16 * 64);                            \
    _Pragma("unroll") for (int i = 0; i < MT; i++) {                                       \
      barrier(CLK_LOCAL_MEM_FENCE);                                                        \
      if (s4) {                                                                            \
        _Pragma("unroll") for (int it = 0; it < 8; it++) {                                 \
          int row = 2 * it + lane / 16, c4 = lane % 16 * 4;                                \
          long m = m0 + ROW(i) + row, n = n0 + COL(i) + c4;                                \
          bool ok = m < M && n < N;                                                        \
          kl_mm_cp16((__local uint *)ss + row * 64 + c4,                                   \
                     ok ? s_ + so + (batch * M + m) * N + n : s_ + so, ok);                \
        }                                                                                  \
        KL_MM_COMMIT();                                                                    \
      }                                                                                    \
      _Pragma("unroll") for (int j = 0; j < 8; j++)                                        \
        _Pragma("unroll") for (int h = 0; h < 2; h++)                                      \
          *(__local float2 *)&ew[(fg + 8 * h) * KL_MM_LDE + 8 * j + 2 * ft] =              \
              (float2)(acc[i][j][2 * h], acc[i][j][2 * h + 1]);                            \
      KL_MM_WAIT(0);                                                                       \
      barrier(CLK_LOCAL_MEM_FENCE);                                                        \
      _Pragma("unroll 1") for (int it = 0; it < 8; it++) {                                 \
        int row = 2 * it + lane / 16, c4 = lane % 16 * 4;                                  \
        long m = m0 + ROW(i) + row, n = n0 + COL(i) + c4;                                  \
        if (m >= M || n >= N) continue;                                                    \
        float4 r = *(__local float4 *)&ew[row * KL_MM_LDE + c4];                           \
        float4 sp = s4 ? *(__local float4 *)&ss[row * 64 + c4] : (float4)(0.0f);           \
        float v[4] = {r.x, r.y, r.z, r.w}, sv[4] = {sp.x, sp.y, sp.z, sp.w};               \
        long yi = (batch * M + m) * N + n;                                                 \
        float eb = e_ && emode == 4 ? e_[eo + m] : 0.0f;                                   \
        _Pragma("unroll") for (int c = 0; c < 4; c++) {                                    \
          if (n + c >= N) break;                                                           \
          float x = alpha * v[c];                                                          \
          if (e_) x += beta * (emode == 4 ? eb : KL_TC_ADDEND(e_, eo, emode, &bc, 0, yi + c, n + c)); \
          if (s_) x += s4 ? sv[c] : KL_TC_ADDEND(s_, so, smode, &bc, 1, yi + c, n + c);    \
          v[c] = ACT(x, act, aa, ab);                                                      \
        }                                                                                  \
        if (y4)                                                                            \
          *(__global float4 *)(y_ + yo + yi) = (float4)(v[0], v[1], v[2], v[3]);           \
        else                                                                               \
          for (int c = 0; c < 4 && n + c < N; c++) y_[yo + yi + c] = v[c];                 \
      }                                                                                    \
    }                                                                                      \
  }

/* `steps` steps of 16 along k, the first STAGES - 1 queued (LOAD(BM, BT, s, buf) queues
 * step s's copies into buffer buf); at step st, KL_MM_NEXT queues step st + STAGES - 1
 * into buffer nxt, the one step st - 1 was done from. */
#define KL_MM_FIRST(BM, BT, STAGES, LOAD)                                                  \
  int steps = (int)((K + KL_MM_BK - 1) / KL_MM_BK);                                        \
  _Pragma("unroll") for (int s = 0; s < STAGES - 1; s++) {                                 \
    if (s < steps) LOAD(BM, BT, s, s);                                                     \
    KL_MM_COMMIT();                                                                        \
  }
#define KL_MM_NEXT(BM, BT, STAGES, LOAD)                                                   \
  if (st + STAGES - 1 < steps) LOAD(BM, BT, st + STAGES - 1, nxt);                         \
  KL_MM_COMMIT();                                                                          \
  nxt = nxt + 1 == STAGES ? 0 : nxt + 1;

/* The main loop of the kernels below: the steps of 16 along k, STAGES - 1 of them in
 * flight (LOAD(BM, BT, s, buf) queues step s's copies into buffer buf), each done by
 * the tensor cores from local memory; B^T (BT) read by ldmatrix, B as [k][n] by words. */
#define KL_MM_MAIN(BM, BT, STAGES, WAITN, LOAD) \
  {                                                                                     \
    KL_MM_FIRST(BM, BT, STAGES, LOAD)                                                   \
    /* ldmatrix rows of this lane: A's 8 x 4 blocks (rows +0, +8) x (k +0, +4) in the   \
     * order of the m16n8k8 fragment; B^T's (k +0, +4) x (rows +0, +8): two n-tiles. The \
     * rows' swizzle, r / 2 % 4, is the lane's (lane / 2 % 4): the tiles start at rows of \
     * 8. la[h], lb[h]: the words of the step's k 8 h.. */                              \
    int sw = lane / 2 % 4, la[2], lb[2], ob[8];                                         \
    _Pragma("unroll") for (int h = 0; h < 2; h++) {                                     \
      la[h] = (wr + lane % 8 + 8 * (lane / 8 % 2)) * 16 + ((2 * h + lane / 16) ^ sw) * 4; \
      lb[h] = (wc + lane % 8 + 8 * (lane / 16)) * 16 + ((2 * h + lane / 8 % 2) ^ sw) * 4; \
    }                                                                                   \
    /* B as [k][n]: row ft (and ft + 4, + 8, + 12) at column wc + 8 j + fg */           \
    _Pragma("unroll") for (int j = 0; j < 8; j++)                                       \
      ob[j] = ft * 128 + ((wc / 4 + 2 * j + fg / 4) ^ (ft * 2)) * 4 + fg % 4;           \
    int cur = 0, nxt = STAGES - 1;                                                      \
    for (int st = 0; st < steps; st++) {                                                \
      KL_MM_WAIT(WAITN);                                                                \
      barrier(CLK_LOCAL_MEM_FENCE);                                                     \
      KL_MM_NEXT(BM, BT, STAGES, LOAD)                                                  \
      __local const uint *asb = as + cur * (BM * KL_MM_BK);                             \
      __local const uint *bsb = bs + cur * KL_MM_TILE;                                  \
      cur = cur + 1 == STAGES ? 0 : cur + 1;                                            \
      _Pragma("unroll") for (int h = 0; h < 2; h++) {                                   \
        uint fa[MT][4], fb[8][2];                                                       \
        _Pragma("unroll") for (int i = 0; i < MT; i++) {                                \
          KL_MM_LDM4(fa[i], asb + la[h] + 16 * 16 * i);                                 \
          _Pragma("unroll") for (int q = 0; q < 4; q++) fa[i][q] = KL_MM_TF32(fa[i][q]); \
        }                                                                               \
        if (BT) {                                                                       \
          _Pragma("unroll") for (int jj = 0; jj < 4; jj++) {                            \
            uint r4[4];                                                                 \
            KL_MM_LDM4(r4, bsb + lb[h] + 16 * 16 * jj);                                 \
            fb[2 * jj][0] = KL_MM_TF32(r4[0]), fb[2 * jj][1] = KL_MM_TF32(r4[1]);       \
            fb[2 * jj + 1][0] = KL_MM_TF32(r4[2]), fb[2 * jj + 1][1] = KL_MM_TF32(r4[3]); \
          }                                                                             \
        } else {                                                                        \
          _Pragma("unroll") for (int j = 0; j < 8; j++) {                               \
            fb[j][0] = KL_MM_TF32(bsb[ob[j] + 8 * h * 128]);                            \
            fb[j][1] = KL_MM_TF32(bsb[ob[j] + (8 * h + 4) * 128]);                      \
          }                                                                             \
        }                                                                               \
        _Pragma("unroll") for (int i = 0; i < MT; i++)                                  \
          _Pragma("unroll") for (int j = 0; j < 8; j++) KL_TC_MMA(acc[i][j], fa[i], fb[j]); \
      }                                                                                 \
    }                                                                                   \
  }

/* What kl_tc_mm and kl_tc_cvt declare first: MT (m16 tiles a warp), the STAGES buffers of
 * A's BM x 16 and B's 16 x 128 words, this work-item's warp, lane, fragment coordinates
 * (fg, ft) and its warp's corner in the tile (wr, wc). */
#define KL_MM_TILE_VARS(BM, STAGES)                                                        \
  enum { MT = BM / 32 };                                                                   \
  __local uint as[STAGES * BM * KL_MM_BK] __attribute__((aligned(1024)));                  \
  __local uint bs[STAGES * KL_MM_TILE] __attribute__((aligned(1024)));                     \
  int tid = get_local_id(0), lane = tid % 32, warp = tid / 32;                             \
  int fg = lane / 4, ft = lane % 4, wr = warp / 2 * (BM / 2), wc = warp % 2 * 64;

#define KL_MM(NAME, BM, BT, STAGES, WAITN, MAIN, ROW, COL, ACT)                            \
  __kernel __attribute__((reqd_work_group_size(128, 1, 1))) void NAME(                     \
      __global const float *a_, ulong ao, __global const float *b_, ulong bo,              \
      __global const float *e_, ulong eo, __global const float *s_, ulong so,              \
      __global float *y_, ulong yo, long M, long N, long K, long sam, long sak, long sbk,  \
      long sbn, kl_cl_bcast bb, kl_cl_bcast bc, float alpha, float beta, int act,          \
      float aa, float ab, int emode, int smode) {                                          \
    KL_MM_TILE_VARS(BM, STAGES)                                                            \
    long tiles_n = (N + 127) / 128, tiles_m = (M + BM - 1) / BM;                           \
    long grp = get_group_id(0), per = tiles_n * tiles_m, batch = grp / per, t = grp % per; \
    long first = t / (8 * tiles_n) * 8, gs = min(tiles_m - first, 8L);                    \
    long local_t = t % (8 * tiles_n);                                                      \
    long m0 = (first + local_t % gs) * BM, n0 = local_t / gs * 128;                        \
    __global const float *a = a_ + ao + kl_nn_bcast_off(&bb, 0, batch);                   \
    __global const float *b = b_ + bo + kl_nn_bcast_off(&bb, 1, batch);                    \
    /* copies: rows cr + 32 r of A (and of B^T) at k piece tid % 4 (words ck..ck + 3);    \
     * B as [k][n]: rows bkr + 4 r, piece tid % 32 (columns bnc..bnc + 3) */              \
    int cr = tid / 4, ck = tid % 4 * 4, bkr = tid / 32, bnc = tid % 32 * 4;                \
    int ad_ = cr * 16 + ((tid % 4) ^ (cr / 2 % 4)) * 4;                                    \
    int bd_ = bkr * 128 + ((tid % 32) ^ (bkr % 4 * 2)) * 4;                                \
    __global const float *ap[BM / 32], *bp[4];                                             \
    bool aok[BM / 32], bok[4];                                                             \
    _Pragma("unroll") for (int r = 0; r < BM / 32; r++) {                                  \
      long m = m0 + cr + 32 * r;                                                           \
      aok[r] = m < M;                                                                      \
      ap[r] = a + (aok[r] ? m * sam : 0) + ck;                                             \
    }                                                                                      \
    _Pragma("unroll") for (int r = 0; r < 4; r++) {                                        \
      long n = BT ? n0 + cr + 32 * r : n0 + bnc;                                           \
      bok[r] = n < N;                                                                      \
      bp[r] = b + (bok[r] ? (BT ? n * sbn + ck : n) : 0);                                  \
    }                                                                                      \
    float acc[MT][8][4];                                                                   \
    _Pragma("unroll") for (int i = 0; i < MT; i++)                                         \
      _Pragma("unroll") for (int j = 0; j < 8; j++)                                        \
        _Pragma("unroll") for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;                 \
    MAIN(BM, BT, STAGES, WAITN, KL_MM_LOAD)                                                \
    KL_MM_EPILOGUE(MT, ROW, COL, ACT)                                                      \
  }

KL_MM(kl_tc_mm128, 128, 0, 3, 1, KL_MM_MAIN, KL_MM_ROW, KL_MM_COL, KL_TC_ACT)
KL_MM(kl_tc_mm128t, 128, 1, 3, 1, KL_MM_MAIN, KL_MM_ROW, KL_MM_COL, KL_TC_ACT)
KL_MM(kl_tc_mm64, 64, 0, 4, 2, KL_MM_MAIN, KL_MM_ROW, KL_MM_COL, KL_TC_ACT)
KL_MM(kl_tc_mm64t, 64, 1, 4, 2, KL_MM_MAIN, KL_MM_ROW, KL_MM_COL, KL_TC_ACT)

/* ---- Convolutions with the weights tap-major: kl_tc_cvt{128,64} ----
 *
 * kl_tc_conv's convolution (its arguments but vec, its meaning) on kl_tc_mm's tiles,
 * for Cin per group a multiple of 16, with W reordered tap-major by ops_nn.c
 * (kl_nn_w_taps: W'[g][m][tap][c], k = tap * Cin + c): a step's 16 k then share one tap,
 * so each work-item (one column q = image * P + position; the batch folded into the
 * columns) copies 16 channels of one input position straight to local memory, 4-byte
 * `cp.async`s Cin x in apart, with one bounds check a step (zeros where the tap is in the
 * padding, through the copies' source size). A (W') as kl_tc_mm's A. The host checks
 * that K, and X's channels of a group (Cin x in0 x in1 x in2), fit an int and the
 * window its 32-bit arithmetic (window_fits_int). */

void kl_cv_cp4(__local uint *dst, __global const float *src, bool ok) {
  __asm__ volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"l"((ulong)dst),
                   "l"(src), "r"(ok ? 4 : 0)
                   : "memory");
}

/* Step s of k into buffer buf: A's BM rows of W' as kl_tc_mm's, then this work-item's
 * column: 16 channels from c0 at the step's tap, row i of B's [k][n] tile at its
 * swizzled word (bw: piece tid / 4 ^ 2 (i % 4), as KL_MM_LOAD's B). */
#define KL_CVT_LOAD(BM, BT, s, buf)                                                        \
  {                                                                                        \
    int k0 = (s) * KL_MM_BK;                                                               \
    __local uint *ad = as + (buf) * (BM * KL_MM_BK), *bd = bs + (buf) * KL_MM_TILE;        \
    _Pragma("unroll") for (int r = 0; r < BM / 32; r++)                                    \
      kl_mm_cp16(ad + ad_ + 512 * r, aok[r] ? ap[r] + k0 : a, aok[r]);                     \
    int tap = k0 / cin, c0 = k0 - tap * cin;                                               \
    int i0 = st0 + tap / (kn1 * kn2) * dl0, i1 = st1 + tap / kn2 % kn1 * dl1;              \
    int i2 = st2 + tap % kn2 * dl2;                                                        \
    bool ok = q_in && (uint)i0 < (uint)in0 && (uint)i1 < (uint)in1 && (uint)i2 < (uint)in2; \
    __global const float *src = ok ? xp + c0 * xsize + (i0 * in1 + i1) * in2 + i2 : xp;    \
    int step = ok ? xsize : 0;                                                             \
    _Pragma("unroll") for (int i = 0; i < KL_MM_BK; i++)                                   \
      kl_cv_cp4(bd + (BT ? bwt[i / 4] + i % 4 : i * 128 + bw[i % 4]), src + i * step, ok); \
  }

/* The epilogue of KL_MM_EPILOGUE's shape for a convolution: column q is Y's image q / P,
 * position q % P (col: Y's offset of this work-item's 4 columns, -1 past N), row m
 * output channel gr * M + m with its bias; 16-byte stores where P and Y's offset are
 * multiples of 4 (a work-item's 4 columns then lie in one image, side by side). */
#define KL_CVT_EPILOGUE(MT, ROW, COL)                                                      \
  {                                                                                        \
    KL_MM_WAIT(0);                                                                         \
    __local float *ew = (__local float *)bs + warp * (16 * KL_MM_LDE);                     \
    int c4 = lane % 16 * 4;                                                                \
    bool y4 = P % 4 == 0 && yo % 4 == 0;                                                   \
    _Pragma("unroll") for (int i = 0; i < MT; i++) {                                       \
      long col[4];                                                                         \
      _Pragma("unroll") for (int c = 0; c < 4; c++) {                                      \
        long qq = n0 + COL(i) + c4 + c;                                                    \
        col[c] = qq < N ? qq / P * g.cout * P + qq % P : -1;                               \
      }                                                                                    \
      barrier(CLK_LOCAL_MEM_FENCE);                                                        \
      _Pragma("unroll") for (int j = 0; j < 8; j++)                                        \
        _Pragma("unroll") for (int h = 0; h < 2; h++)                                      \
          *(__local float2 *)&ew[(fg + 8 * h) * KL_MM_LDE + 8 * j + 2 * ft] =              \
              (float2)(acc[i][j][2 * h], acc[i][j][2 * h + 1]);                            \
      barrier(CLK_LOCAL_MEM_FENCE);                                                        \
      _Pragma("unroll 1") for (int it = 0; it < 8; it++) {                                 \
        int row = 2 * it + lane / 16;                                                      \
        long m = m0 + ROW(i) + row;                                                        \
        if (m >= M || col[0] < 0) continue;                                                \
        float4 r = *(__local float4 *)&ew[row * KL_MM_LDE + c4];                           \
        float v[4] = {r.x, r.y, r.z, r.w};                                                 \
        long co = gr * M + m;                                                              \
        float bias = b_ ? b_[bo + co] : 0.0f;                                              \
        bool s4 = s_ && smode == 1 && y4 && so % 4 == 0 && col[3] >= 0;                    \
        float4 sp = s4 ? *(__global const float4 *)(s_ + so + col[0] + co * P) : (float4)(0.0f); \
        float sv[4] = {sp.x, sp.y, sp.z, sp.w};                                            \
        _Pragma("unroll") for (int c = 0; c < 4; c++) {                                    \
          if (col[c] < 0) break;                                                           \
          float x = v[c] + bias;                                                           \
          if (s_) x += s4 ? sv[c] : KL_TC_ADDEND(s_, so, smode, &bc, 1, col[c] + co * P, 0); \
          v[c] = KL_TC_ACT(x, act, aa, ab);                                                \
        }                                                                                  \
        if (y4 && col[3] >= 0)                                                             \
          *(__global float4 *)(y_ + yo + col[0] + co * P) = (float4)(v[0], v[1], v[2], v[3]); \
        else                                                                               \
          for (int c = 0; c < 4 && col[c] >= 0; c++) y_[yo + col[c] + co * P] = v[c];      \
      }                                                                                    \
    }                                                                                      \
  }

#define KL_CVT(NAME, BM, BT, STAGES, WAITN, MAIN, ROW, COL)                                \
  __kernel __attribute__((reqd_work_group_size(128, 1, 1))) void NAME(                     \
      __global const float *x_, ulong xo, __global const float *w_, ulong wo,              \
      __global const float *b_, ulong bo, __global const float *s_, ulong so,              \
      __global float *y_, ulong yo, kl_nn_window g, long groups, long batch, kl_cl_bcast bc, \
      int act, float aa, float ab, int smode) {                                            \
    KL_MM_TILE_VARS(BM, STAGES)                                                            \
    int cin = (int)g.cin_per_group, kn1 = (int)g.ksize[1], kn2 = (int)g.ksize[2];          \
    long M = g.cout_per_group, K = g.cin_per_group * g.ksize[0] * g.ksize[1] * g.ksize[2]; \
    long P = g.out[0] * g.out[1] * g.out[2], N = batch * P;                                \
    int xsize = (int)(g.in[0] * g.in[1] * g.in[2]);                                        \
    long tiles_n = (N + 127) / 128, tiles_m = (M + BM - 1) / BM;                           \
    long grp = get_group_id(0), per = tiles_n * tiles_m, gr = grp / per, t = grp % per;    \
    long first = t / (8 * tiles_n) * 8, gs = min(tiles_m - first, 8L);                     \
    long local_t = t % (8 * tiles_n);                                                      \
    long m0 = (first + local_t % gs) * BM, n0 = local_t / gs * 128;                        \
    __global const float *a = w_ + wo + gr * M * K;                                        \
    int cr = tid / 4, ck = tid % 4 * 4;                                                    \
    int ad_ = cr * 16 + ((tid % 4) ^ (cr / 2 % 4)) * 4;                                    \
    __global const float *ap[BM / 32];                                                     \
    bool aok[BM / 32];                                                                     \
    _Pragma("unroll") for (int r = 0; r < BM / 32; r++) {                                  \
      long m = m0 + cr + 32 * r;                                                           \
      aok[r] = m < M;                                                                      \
      ap[r] = a + (aok[r] ? m * K : 0) + ck;                                               \
    }                                                                                      \
    /* B: column q = n0 + tid, its window's start and X's channels of its group */         \
    long q = n0 + tid;                                                                     \
    bool q_in = q < N;                                                                     \
    int st[3];                                                                             \
    __global const float *xp = x_ + xo;                                                    \
    {                                                                                      \
      long nb = q_in ? q / P : 0, rest = q_in ? q % P : 0;                                 \
      _Pragma("unroll") for (int d = 2; d >= 0; d--) {                                     \
        st[d] = (int)(rest % g.out[d] * g.stride[d] - g.pad_begin[d]);                     \
        rest /= g.out[d];                                                                  \
      }                                                                                    \
      xp += (nb * g.channels + gr * g.cin_per_group) * xsize;                              \
    }                                                                                      \
    int st0 = st[0], st1 = st[1], st2 = st[2];                                             \
    int in0 = (int)g.in[0], in1 = (int)g.in[1], in2 = (int)g.in[2];                        \
    int dl0 = (int)g.dilation[0], dl1 = (int)g.dilation[1], dl2 = (int)g.dilation[2];      \
    /* B's element (k i of the step, column tid): [k][n] at i * 128 + bw[i % 4], or        \
     * (BT) [n][k] in rows of 16 words as A's, at bwt[i / 4] + i % 4 */                     \
    int bw[4], bwt[4];                                                                     \
    _Pragma("unroll") for (int j = 0; j < 4; j++) {                                        \
      bw[j] = ((tid / 4) ^ (2 * j)) * 4 + tid % 4;                                         \
      bwt[j] = tid * 16 + (j ^ (tid / 2 % 4)) * 4;                                         \
    }                                                                                      \
    float acc[MT][8][4];                                                                   \
    _Pragma("unroll") for (int i = 0; i < MT; i++)                                         \
      _Pragma("unroll") for (int j = 0; j < 8; j++)                                        \
        _Pragma("unroll") for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;                 \
    MAIN(BM, BT, STAGES, WAITN, KL_CVT_LOAD)                                               \
    KL_CVT_EPILOGUE(MT, ROW, COL)                                                          \
  }

KL_CVT(kl_tc_cvt128, 128, 0, 3, 1, KL_MM_MAIN, KL_MM_ROW, KL_MM_COL)
KL_CVT(kl_tc_cvt64, 64, 0, 4, 2, KL_MM_MAIN, KL_MM_ROW, KL_MM_COL)

/* ---- Attention on the tensor cores (kl_attn_tc64, ops_attention.c) ----
 *
 * kiln.MultiHeadAttention for heads of at most 64 (D and Dv) at precision tf32: flash
 * attention with both products on mma.sync m16n8k8 (TF32 operands, float32 sums) and the
 * online softmax in float32 registers. A work-group of 128 work-items (4 warps) takes 64
 * queries of one (batch, head), warp w rows 16 w .. 16 w + 15, and walks the keys in
 * tiles of 32. The tiles come by `cp.async` (16-byte copies where every row and offset
 * is a multiple of 4 floats, `vec`, else 4-byte ones; zeros past the keys and the
 * head), the next tile's while the tensor cores work on this one (two buffers, 35 KB);
 * each work-item rounds the words it copied to TF32 in place (cvt.rna: the tensor cores
 * would truncate). Rows of 68 words: a warp's fragment reads (K's rows g at columns t,
 * V's rows 2t at columns g) hit 32 banks. Q's fragments come through the second buffer
 * first and stay in registers. Lane 4g + t holds the scores of its rows g, g + 8 at keys
 * 8j + 2t, 8j + 2t + 1 of each block j of 8 keys (the product's D layout); the second
 * product takes them as its A operand as they lie, reading the 8 keys of block j in the
 * order 0 2 4 6 1 3 5 7 (A's columns t, t + 4 are keys 2t, 2t + 1; V's rows are read in
 * that order too): the weights never go through local memory. A row's maximum and sum
 * are over the 4 lanes that share it (shfl.sync.bfly); the scores are scaled by
 * scale log2(e) after the product (Q is not rescaled before rounding) and the weights are
 * 2^(s - max) (ex2.approx). A row that has seen only -inf has weight 0 and keeps output
 * 0 / 0 (NaN), or 0 with zero_masked_rows, as kl_attn_flash64. */
#define KL_TA_P 68   /* words of a row of the tiles */
#define KL_TA_KB 32  /* keys a tile */
#define KL_TA_BUF (2 * KL_TA_KB * KL_TA_P) /* words of a buffer: the key and value tiles */

float kl_ta_exp2(float x) {
  float r;
  __asm__("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

/* Copies `rows` rows (of 64 words in local memory, `cols` of them from src, row r at
 * src + r stride; zeros past rows and cols) of a tile of `n` rows into dst, this
 * work-item's share: 16-byte copies with vec, else 4-byte ones. */
void kl_ta_copy(__local uint *dst, __global const float *src, long stride, long rows,
                long cols, int n, int vec, int t) {
  if (vec) {
    _Pragma("unroll 1") for (int c = t; c < n * 16; c += 128) {
      int r = c / 16, e = c % 16 * 4;
      bool ok = r < rows && e < cols;
      kl_mm_cp16(dst + r * KL_TA_P + e, ok ? src + r * stride + e : src, ok);
    }
  } else {
    _Pragma("unroll 1") for (int x = t; x < n * 64; x += 128) {
      int r = x / 64, e = x % 64;
      bool ok = r < rows && e < cols;
      kl_cv_cp4(dst + r * KL_TA_P + e, ok ? src + r * stride + e : src, ok);
    }
  }
}

/* Rounds to TF32 the words of a tile of n rows that kl_ta_copy gave this work-item. */
void kl_ta_round(__local uint *p, int n, int vec, int t) {
  if (vec) {
    _Pragma("unroll 1") for (int c = t; c < n * 16; c += 128) {
      __local uint *w = p + c / 16 * KL_TA_P + c % 16 * 4;
      for (int e = 0; e < 4; e++) w[e] = kl_tc_tf32(as_float(w[e]));
    }
  } else {
    _Pragma("unroll 1") for (int x = t; x < n * 64; x += 128) {
      __local uint *w = p + x / 64 * KL_TA_P + x % 64;
      *w = kl_tc_tf32(as_float(*w));
    }
  }
}

__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void
kl_attn_tc64(__global const float *q_, ulong qo, __global const float *k_, ulong ko,
             __global const float *v_, ulong vo, __global const float *m_, ulong mo,
             __global float *y_, ulong yo, kl_cl_mha g, int vec) {
  __local uint sm[2 * KL_TA_BUF] __attribute__((aligned(16)));
  int t = get_local_id(0), warp = t / 32, gq = t % 32 / 4, tq = t % 4;
  long blocks = (g.seq + 63) / 64, grp = get_group_id(0);
  long h = grp / blocks % g.heads, b = grp / blocks / g.heads, i0 = grp % blocks * 64;
  __global const float *kb = k_ + ko + b * g.keys * g.krow + g.koff + h * g.d;
  __global const float *vb = v_ + vo + b * g.keys * g.vrow + g.voff + h * g.dv;
  /* the queries through the second buffer (64 rows), then the first tile */
  kl_ta_copy(sm + KL_TA_BUF, q_ + qo + (b * g.seq + i0) * g.qrow + h * g.d, g.qrow,
             g.seq - i0, g.d, 64, vec, t);
  KL_MM_COMMIT();
  kl_ta_copy(sm, kb, g.krow, g.keys, g.d, KL_TA_KB, vec, t);
  kl_ta_copy(sm + KL_TA_KB * KL_TA_P, vb, g.vrow, g.keys, g.dv, KL_TA_KB, vec, t);
  KL_MM_COMMIT();
  KL_MM_WAIT(1);
  kl_ta_round(sm + KL_TA_BUF, 64, vec, t);
  barrier(CLK_LOCAL_MEM_FENCE);
  int r0 = warp * 16 + gq;
  uint qa[8][4];
  __local const uint *qs = sm + KL_TA_BUF;
  #pragma unroll
  for (int s = 0; s < 8; s++) {
    qa[s][0] = qs[r0 * KL_TA_P + 8 * s + tq];
    qa[s][1] = qs[(r0 + 8) * KL_TA_P + 8 * s + tq];
    qa[s][2] = qs[r0 * KL_TA_P + 8 * s + tq + 4];
    qa[s][3] = qs[(r0 + 8) * KL_TA_P + 8 * s + tq + 4];
  }
  long row[2] = {i0 + r0, i0 + r0 + 8};
  /* each row's mask, NULL where there is none or the row is past the sequence */
  __global const float *mrow[2];
  #pragma unroll
  for (int a = 0; a < 2; a++)
    mrow[a] = g.has_mask && row[a] < g.seq
                  ? m_ + mo + b * g.mstride[0] + h * g.mstride[1] + row[a] * g.mstride[2]
                  : NULL;
  float o[8][4], m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  #pragma unroll
  for (int c = 0; c < 8; c++)
    #pragma unroll
    for (int r = 0; r < 4; r++) o[c][r] = 0.0f;
  float sc = g.scale * M_LOG2E_F;
  for (long j0 = 0, tile = 0; j0 < g.keys; j0 += KL_TA_KB, tile++) {
    __local uint *ks = sm + tile % 2 * KL_TA_BUF, *vs = ks + KL_TA_KB * KL_TA_P;
    barrier(CLK_LOCAL_MEM_FENCE); /* the other buffer read by all (Q, or the last tile) */
    if (j0 + KL_TA_KB < g.keys) {
      __local uint *kn = sm + (tile + 1) % 2 * KL_TA_BUF;
      long j1 = j0 + KL_TA_KB;
      kl_ta_copy(kn, kb + j1 * g.krow, g.krow, g.keys - j1, g.d, KL_TA_KB, vec, t);
      kl_ta_copy(kn + KL_TA_KB * KL_TA_P, vb + j1 * g.vrow, g.vrow, g.keys - j1, g.dv,
                 KL_TA_KB, vec, t);
      KL_MM_COMMIT();
      KL_MM_WAIT(1);
    } else {
      KL_MM_WAIT(0);
    }
    kl_ta_round(ks, 2 * KL_TA_KB, vec, t);
    barrier(CLK_LOCAL_MEM_FENCE);
    int nk = (int)min((long)KL_TA_KB, g.keys - j0);
    float s[4][4];
    #pragma unroll
    for (int j = 0; j < 4; j++) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      #pragma unroll
      for (int k = 0; k < 8; k++) {
        uint fb[2] = {ks[(8 * j + gq) * KL_TA_P + 8 * k + tq],
                      ks[(8 * j + gq) * KL_TA_P + 8 * k + tq + 4]};
        KL_TC_MMA(s[j], qa[k], fb);
      }
    }
    float mx[2] = {-INFINITY, -INFINITY};
    #pragma unroll
    for (int j = 0; j < 4; j++)
      #pragma unroll
      for (int r = 0; r < 4; r++) {
        int key = 8 * j + 2 * tq + (r & 1);
        float x = s[j][r] * sc;
        if (key >= nk)
          x = -INFINITY;
        else if (mrow[r / 2]) {
          /* the mask in base 2: a large negative one (float32's lowest, as exporters
           * write "masked") would overflow to -inf times log2(e) and make a row whose
           * every key is so masked a row that saw nothing (0 or NaN) where the
           * reference gives it the mean of the values: held at the lowest float;
           * -inf stays -inf */
          float mk = mrow[r / 2][(j0 + key) * g.mstride[3]];
          x += mk == -INFINITY ? mk : fmax(mk * M_LOG2E_F, -FLT_MAX);
        }
        s[j][r] = x;
        mx[r / 2] = fmax(mx[r / 2], x);
      }
    float base[2], alpha[2];
    #pragma unroll
    for (int a = 0; a < 2; a++) {
      mx[a] = fmax(mx[a], kl_shfl_xor(mx[a], 1));
      mx[a] = fmax(mx[a], kl_shfl_xor(mx[a], 2));
      float mn = fmax(m_run[a], mx[a]);
      base[a] = mn == -INFINITY ? 0.0f : mn;
      alpha[a] = kl_ta_exp2(m_run[a] - base[a]); /* 0 while the row has seen only -inf */
      m_run[a] = mn;
      l_run[a] *= alpha[a];
    }
    #pragma unroll
    for (int c = 0; c < 8; c++) {
      o[c][0] *= alpha[0];
      o[c][1] *= alpha[0];
      o[c][2] *= alpha[1];
      o[c][3] *= alpha[1];
    }
    #pragma unroll
    for (int j = 0; j < 4; j++) {
      #pragma unroll
      for (int r = 0; r < 4; r++) {
        s[j][r] = kl_ta_exp2(s[j][r] - base[r / 2]);
        l_run[r / 2] += s[j][r];
      }
      uint fa[4] = {kl_tc_tf32(s[j][0]), kl_tc_tf32(s[j][2]), kl_tc_tf32(s[j][1]),
                    kl_tc_tf32(s[j][3])};
      #pragma unroll
      for (int c = 0; c < 8; c++) {
        uint fb[2] = {vs[(8 * j + 2 * tq) * KL_TA_P + 8 * c + gq],
                      vs[(8 * j + 2 * tq + 1) * KL_TA_P + 8 * c + gq]};
        KL_TC_MMA(o[c], fa, fb);
      }
    }
  }
  #pragma unroll
  for (int a = 0; a < 2; a++) {
    l_run[a] += kl_shfl_xor(l_run[a], 1);
    l_run[a] += kl_shfl_xor(l_run[a], 2);
    if (g.zero_masked_rows && m_run[a] == -INFINITY) l_run[a] = INFINITY;
  }
  #pragma unroll
  for (int a = 0; a < 2; a++) {
    if (row[a] >= g.seq) continue;
    __global float *y = y_ + yo + (b * g.seq + row[a]) * g.heads * g.dv + h * g.dv;
    float inv = 1.0f / l_run[a];
    #pragma unroll
    for (int c = 0; c < 8; c++) {
      int col = 8 * c + 2 * tq;
      if (col < g.dv) y[col] = o[c][2 * a] * inv;
      if (col + 1 < g.dv) y[col + 1] = o[c][2 * a + 1] * inv;
    }
  }
}

#if defined(KL_SM_ARCH) && KL_SM == 90
/* ---- Hopper (sm_90a): kl_wg_mm{128,64}t, kl_wg_cvt{128,64} on wgmma ----
 *
 * kl_tc_mm{128,64}t's and kl_tc_cvt{128,64}'s tiles, operands and epilogues with the
 * products done by `wgmma.mma_async` (one warpgroup: the work-group's 4 warps) straight
 * from local memory, where both operands are K-major in rows of 16 words (64 bytes) with
 * the 64-byte swizzle kl_tc_mm's loads write (piece c of row r at c ^ (r / 2 % 4): the
 * hardware's, on the addresses, whence the tiles' 1024-byte alignment). A step of 16
 * along k is two `m64n128k8` a 64 rows of the tile, k 0-7 and 8-15 (k 8.. start 32
 * bytes into the rows). The hardware reads a TF32 operand as the top 19 bits of each
 * float, a truncation whose bias (every product a little smaller) grew to 2% of
 * ResNet-50's logits: so every operand is rounded (cvt.rna, as kl_tc_mm's fragments),
 * the weights by ops_nn.c once (kl_wg_w_taps, kl_wg_b_rows), the activations in local
 * memory by the work-item that copied them, once its copies of the step landed. Both come
 * by `cp.async`, STAGES - 1 steps in flight. A warp w holds the results of rows 16 w.. (and 64 + 16 w.. in tiles of 128)
 * in mma.sync's m16n8 fragment order, 16 n8 blocks a row range: acc[2 h + c][j] is row
 * half h, n8 block 8 c + j, which is what the epilogues read through KL_WG_ROW/COL. One
 * wgmma group in flight: a step waits for the last step's products before the barrier
 * after which their buffers are refilled. */

/* the descriptor of a K-major operand at p: 64-byte swizzle (mode 2), 8-row groups 512
 * bytes apart (SBO), the leading offset unused (1) */
ulong kl_wg_desc(__local const uint *p) {
  return (ulong)(((uint)(ulong)p & 0x3FFFFu) >> 4) | (1ul << 16) | ((ulong)(512 >> 4) << 32) |
         (2ul << 62);
}

uint4 kl_wg_tf32x4(float4 v) {
  return (uint4)(kl_tc_tf32(v.x), kl_tc_tf32(v.y), kl_tc_tf32(v.z), kl_tc_tf32(v.w));
}

#define KL_WG_R4(x) "+f"(x[0]), "+f"(x[1]), "+f"(x[2]), "+f"(x[3])
#define KL_WG_R32(a)                                                                       \
  KL_WG_R4(a[0]), KL_WG_R4(a[1]), KL_WG_R4(a[2]), KL_WG_R4(a[3]), KL_WG_R4(a[4]),         \
      KL_WG_R4(a[5]), KL_WG_R4(a[6]), KL_WG_R4(a[7])
/* the accumulators as operands of an empty asm: the compiler keeps them where the
 * asynchronous products write them (no copies across a wgmma in flight) */
#define KL_WG_PIN64(acc)                                                                   \
  {                                                                                        \
    __asm__ volatile("" : KL_WG_R32(acc[0])::"memory");                                    \
    __asm__ volatile("" : KL_WG_R32(acc[1])::"memory");                                    \
  }
#define KL_WG_PIN128(acc)                                                                  \
  {                                                                                        \
    KL_WG_PIN64(acc)                                                                       \
    __asm__ volatile("" : KL_WG_R32(acc[2])::"memory");                                    \
    __asm__ volatile("" : KL_WG_R32(acc[3])::"memory");                                    \
  }

#define KL_WG_D64                                                                          \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,"  \
  "%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,"  \
  "%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define KL_WG_MMA(d0, d1, da, db)                                                          \
  __asm__ volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " KL_WG_D64       \
                   ", %64, %65, 1, 1, 1;"                                                  \
                   : KL_WG_R32(d0), KL_WG_R32(d1)                                          \
                   : "l"(da), "l"(db))

/* a step's products: rows 0-63 (and 64-127 for tiles of 128) x k 0-7, 8-15 */
#define KL_WG_MMAS64(a0, b0)                                                               \
  _Pragma("unroll") for (int kh = 0; kh < 2; kh++)                                         \
    KL_WG_MMA(acc[0], acc[1], a0 + 2 * kh, b0 + 2 * kh);
#define KL_WG_MMAS128(a0, b0)                                                              \
  _Pragma("unroll") for (int kh = 0; kh < 2; kh++) {                                       \
    KL_WG_MMA(acc[0], acc[1], a0 + 2 * kh, b0 + 2 * kh);                                   \
    KL_WG_MMA(acc[2], acc[3], a0 + 4096 / 16 + 2 * kh, b0 + 2 * kh);                       \
  }

#define KL_WG_ROW(i) (64 * ((i) / 2) + 16 * warp)
#define KL_WG_COL(i) (64 * ((i) % 2))

/* The steps of 16 along k (KL_MM_MAIN's contract, BM 64 or 128; LOAD queues a step's
 * copies, K-major both); ROUND(BM, buf) rounds to TF32 in place what this work-item
 * copied of the activations into buffer buf, once they landed. */
#define KL_WG_MAIN(BM, BT, STAGES, WAITN, LOAD, ROUND)                                     \
  {                                                                                        \
    KL_MM_FIRST(BM, BT, STAGES, LOAD)                                                      \
    ulong da = kl_wg_desc(as), db = kl_wg_desc(bs);                                        \
    int cur = 0, nxt = STAGES - 1;                                                         \
    for (int st = 0; st < steps; st++) {                                                   \
      KL_MM_WAIT(WAITN);                                                                   \
      ROUND(BM, cur);                                                                      \
      /* this work-item's copies of step st, seen by the products' (async) proxy */        \
      __asm__ volatile("fence.proxy.async.shared::cta;" ::: "memory");                     \
      /* the last step's products done: its buffer is refilled below */                    \
      __asm__ volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");                   \
      KL_WG_PIN##BM(acc);                                                                  \
      barrier(CLK_LOCAL_MEM_FENCE);                                                        \
      __asm__ volatile("wgmma.fence.sync.aligned;" ::: "memory");                          \
      ulong a0 = da + (ulong)(cur * (BM * KL_MM_BK * 4 / 16));                             \
      ulong b0 = db + (ulong)(cur * (KL_MM_TILE * 4 / 16));                                \
      KL_WG_MMAS##BM(a0, b0)                                                               \
      __asm__ volatile("wgmma.commit_group.sync.aligned;" ::: "memory");                   \
      cur = cur + 1 == STAGES ? 0 : cur + 1;                                               \
      KL_MM_NEXT(BM, BT, STAGES, LOAD)                                                     \
    }                                                                                      \
    __asm__ volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");                     \
    KL_WG_PIN##BM(acc);                                                                    \
  }

/* kl_wg_mm: A (activations, [m][k]) and B (the [n][k] copy kl_wg_b_rows rounded) by
 * KL_MM_LOAD; this work-item's pieces of A rounded */
#define KL_WG_MM_ROUND(BM, buf)                                                            \
  {                                                                                        \
    __local uint *ad = as + (buf) * (BM * KL_MM_BK);                                       \
    _Pragma("unroll") for (int r = 0; r < BM / 32; r++) {                                  \
      __local uint4 *p = (__local uint4 *)(ad + ad_ + 512 * r);                            \
      *p = kl_wg_tf32x4(as_float4(*p));                                                    \
    }                                                                                      \
  }
#define KL_WG_MM_MAIN(BM, BT, STAGES, WAITN, LOAD)                                         \
  KL_WG_MAIN(BM, BT, STAGES, WAITN, LOAD, KL_WG_MM_ROUND)

/* kl_wg_cvt: A (W' rounded by kl_wg_w_taps) and B (this work-item's column, 16 channels
 * of one tap, into its row of 16 words: [n][k]) by KL_CVT_LOAD; that row rounded */
#define KL_WG_CV_ROUND(BM, buf)                                                            \
  {                                                                                        \
    __local uint *bd = bs + (buf) * KL_MM_TILE;                                            \
    _Pragma("unroll") for (int j = 0; j < 4; j++) {                                        \
      __local uint4 *p = (__local uint4 *)(bd + bwt[j]);                                   \
      *p = kl_wg_tf32x4(as_float4(*p));                                                    \
    }                                                                                      \
  }
#define KL_WG_CV_MAIN(BM, BT, STAGES, WAITN, LOAD)                                         \
  KL_WG_MAIN(BM, BT, STAGES, WAITN, LOAD, KL_WG_CV_ROUND)

/* kl_wg_mm{128,64}r: A already rounded to TF32 (kl_wg_round, below): nothing rounded in
 * local memory, the tensor cores fed as fast as the copies land */
#define KL_WG_NO_ROUND(BM, buf) (void)ad_;
#define KL_WG_MMR_MAIN(BM, BT, STAGES, WAITN, LOAD)                                        \
  KL_WG_MAIN(BM, BT, STAGES, WAITN, LOAD, KL_WG_NO_ROUND)

KL_MM(kl_wg_mm128t, 128, 1, 3, 1, KL_WG_MM_MAIN, KL_WG_ROW, KL_WG_COL, KL_TC_ACT_G)
KL_MM(kl_wg_mm64t, 64, 1, 4, 2, KL_WG_MM_MAIN, KL_WG_ROW, KL_WG_COL, KL_TC_ACT_G)
KL_MM(kl_wg_mm128r, 128, 1, 3, 1, KL_WG_MMR_MAIN, KL_WG_ROW, KL_WG_COL, KL_TC_ACT_G)
KL_MM(kl_wg_mm64r, 64, 1, 4, 2, KL_WG_MMR_MAIN, KL_WG_ROW, KL_WG_COL, KL_TC_ACT_G)
KL_CVT(kl_wg_cvt128, 128, 1, 3, 1, KL_WG_CV_MAIN, KL_WG_ROW, KL_WG_COL)
KL_CVT(kl_wg_cvt64, 64, 1, 4, 2, KL_WG_CV_MAIN, KL_WG_ROW, KL_WG_COL)

/* B of a product as [n][k] rounded to TF32 for kl_wg_mm: y[n * K + k] = x[k * sk + n * sn],
 * K x N, 32 x 32 tiles through local memory (reads along n, writes along k), 256
 * work-items (32 x 8) each. */
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void kl_wg_b_rows(
    __global const float *x_, ulong xo, __global float *y_, ulong yo, long K, long N, long sk,
    long sn) {
  __local float t[32][33];
  long tiles_n = (N + 31) / 32, grp = get_group_id(0);
  long k0 = grp / tiles_n * 32, n0 = grp % tiles_n * 32;
  int lx = get_local_id(0) % 32, ly = get_local_id(0) / 32;
  for (int r = ly; r < 32; r += 8) {
    long k = k0 + r, n = n0 + lx;
    t[r][lx] = k < K && n < N ? x_[xo + k * sk + n * sn] : 0.0f;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int r = ly; r < 32; r += 8) {
    long n = n0 + r, k = k0 + lx;
    if (n < N && k < K) y_[yo + n * K + k] = as_float(kl_tc_tf32(t[lx][r]));
  }
}

/* y = x rounded to TF32 (cvt.rna), n floats, four a work-item (x and y at offsets of
 * whole 4-vectors, n a multiple of 4: ops_nn.c checks): the A that kl_wg_mm*r read. */
__kernel void kl_wg_round(__global const float4 *x_, ulong xo, __global uint4 *y_, ulong yo,
                          long n4) {
  long i = get_global_id(0);
  if (i < n4) y_[yo / 4 + i] = kl_wg_tf32x4(x_[xo / 4 + i]);
}

/* kl_nn_w_taps's reordering, rounded to TF32: kl_wg_cvt's A */
__kernel void kl_wg_w_taps(__global const float *w_, ulong wo, __global float *y_, ulong yo,
                           long n, long cin, long taps) {
  long i = get_global_id(0);
  if (i >= n) return;
  long row = i / (cin * taps), r = i % (cin * taps), t = r / cin, c = r % cin;
  y_[yo + i] = as_float(kl_tc_tf32(w_[wo + row * cin * taps + c * taps + t]));
}
#endif

#endif
