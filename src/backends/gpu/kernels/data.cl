/* The "data" family's kernels (src/backends/gpu/ops_data.c launches them): softmax and
 * the normalizations over rows, reductions, and the ops that move elements (Transpose,
 * Concat, Slice, Split, Expand, Tile through strided views; Gather; Pad). float32,
 * summing in float; the moves take any dtype by element size.
 *
 * Row kernels come in two forms with one body: `_items`, a work-item per row (short
 * rows), and `_group`, a work-group per row whose lanes stride through it and combine
 * their partial results in local memory (long rows). The group size is a power of two
 * of at most KL_GROUP. */

#define KL_GROUP 256
#define KL_VIEW_RANK 16

/* Reduction codes (ops_data.c's RED_*). */
#define KL_RED_SUM 0
#define KL_RED_MEAN 1
#define KL_RED_MAX 2
#define KL_RED_MIN 3
#define KL_RED_PROD 4
#define KL_RED_L1 5
#define KL_RED_L2 6
#define KL_RED_SUMSQ 7
#define KL_RED_LOGSUM 8
#define KL_RED_LOGSUMEXP 9

/* Normalization flags (ops_data.c's NORM_*). */
#define KL_NORM_SKIP 1  /* X + Skip (kiln SkipLayerNorm) */
#define KL_NORM_BIAS 2
#define KL_NORM_RMS 4   /* RMSNormalization: nothing subtracted */
#define KL_NORM_SUM 8   /* write X + Skip */
#define KL_NORM_MEAN 16 /* write the rows' means */
#define KL_NORM_INV 32  /* write the rows' 1 / sqrt(var + epsilon) */

/* Element i (row-major over dims) of one tensor sits at base + sum_d idx_d * s[d] of
 * another; strides may be 0 (broadcast) or negative (a backwards Slice). Matches
 * kl_cl_view of ops_data.c. */
typedef struct kl_cl_view {
  long dims[KL_VIEW_RANK];
  long s[KL_VIEW_RANK];
  long base;
  int rank;
  int pad;
} kl_cl_view;

long kl_view_at(const kl_cl_view *v, long i) {
  long off = v->base;
  for (int d = v->rank - 1; d > 0; d--) {
    off += i % v->dims[d] * v->s[d];
    i /= v->dims[d];
  }
  return v->rank > 0 ? off + i * v->s[0] : off;
}

/* A row's share of one work-item: lanes stride through the row from lane. */
typedef struct kl_lanes {
  long lane, lanes;
  __local float *buf; /* KL_GROUP floats, used when lanes > 1 */
} kl_lanes;

kl_lanes kl_lanes_group(__local float *buf) {
  kl_lanes l = {get_local_id(0), get_local_size(0), buf};
  return l;
}

kl_lanes kl_lanes_item(__local float *buf) {
  kl_lanes l = {0, 1, buf};
  return l;
}

/* Max and Min where a NaN wins, as in the reference kernels. */
float kl_max_nan(float a, float b) { return isnan(a) || isnan(b) ? NAN : fmax(a, b); }
float kl_min_nan(float a, float b) { return isnan(a) || isnan(b) ? NAN : fmin(a, b); }

float kl_combine(int op, float a, float b) {
  switch (op) {
  case KL_RED_MAX: return kl_max_nan(a, b);
  case KL_RED_MIN: return kl_min_nan(a, b);
  case KL_RED_PROD: return a * b;
  default: return a + b;
  }
}

/* v combined over the lanes of a row: every lane gets the result. Lanes of one group
 * all call it (the branch on lanes is uniform). */
float kl_lanes_combine(const kl_lanes *l, float v, int op) {
  if (l->lanes == 1) return v;
  int me = (int)l->lane;
  l->buf[me] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = (int)l->lanes / 2; s > 0; s >>= 1) {
    if (me < s) l->buf[me] = kl_combine(op, l->buf[me], l->buf[me + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  v = l->buf[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return v;
}

/* ---- Softmax, LogSoftmax ----
 * X, Y [outer, len, inner] around the axis; row r = (o, i) holds X[o, :, i]:
 *   Softmax Y = exp(X - max) / sum(exp(X - max)), LogSoftmax Y = X - max - log(sum). */

void kl_softmax_row(__global const float *x, __global float *y, long base, long len,
                    long step, int log_form, const kl_lanes *l) {
  float m = -INFINITY, sum = 0;
  for (long j = l->lane; j < len; j += l->lanes) m = kl_max_nan(m, x[base + j * step]);
  m = kl_lanes_combine(l, m, KL_RED_MAX);
  for (long j = l->lane; j < len; j += l->lanes) sum += exp(x[base + j * step] - m);
  sum = kl_lanes_combine(l, sum, KL_RED_SUM);
  float log_sum = log(sum);
  for (long j = l->lane; j < len; j += l->lanes) {
    float d = x[base + j * step] - m;
    y[base + j * step] = log_form ? d - log_sum : exp(d) / sum;
  }
}

void kl_softmax_at(__global const float *x_, ulong xo, __global float *y_, ulong yo,
                   long r, long len, long inner, int log_form, const kl_lanes *l) {
  long base = r / inner * len * inner + r % inner;
  kl_softmax_row(x_ + xo, y_ + yo, base, len, inner, log_form, l);
}

__kernel void kl_softmax_items(__global const float *x_, ulong xo, __global float *y_,
                               ulong yo, long rows, long len, long inner, int log_form) {
  __local float unused[1];
  long r = get_global_id(0);
  if (r >= rows) return;
  kl_lanes l = kl_lanes_item(unused);
  kl_softmax_at(x_, xo, y_, yo, r, len, inner, log_form, &l);
}

__kernel void kl_softmax_group(__global const float *x_, ulong xo, __global float *y_,
                               ulong yo, long rows, long len, long inner, int log_form) {
  __local float buf[KL_GROUP];
  kl_lanes l = kl_lanes_group(buf);
  kl_softmax_at(x_, xo, y_, yo, get_group_id(0), len, inner, log_form, &l);
}

/* ---- LayerNormalization, RMSNormalization, kiln SkipLayerNorm ----
 * Y [rows, len]: row r normalizes elements r * len .. r * len + len - 1 of X (+ Skip),
 * then scales by Scale and adds B. X, Skip, Scale and B broadcast to Y: the offset of
 * Y's element i in operand k (0 X, 1 Skip, 2 Scale, 3 B) is i % period[k] when the
 * operand repeats with that period, else from the strides. Matches kl_cl_norm. */
typedef struct kl_cl_norm {
  long dims[KL_MAX_RANK];
  long s[4][KL_MAX_RANK];
  long period[4];
  int rank;
  int mode[4];
  int pad;
} kl_cl_norm;

#define KL_NORM_AT_ELEMENT 1 /* operand k's offset is Y's element i (its shape, contiguous) */
#define KL_NORM_AT_COLUMN 2  /* j, the element's place in its row (Scale and B) */

long kl_norm_at(const kl_cl_norm *nb, int k, long i) {
  if (nb->period[k] > 0) return i % nb->period[k];
  long off = 0;
  for (int d = nb->rank - 1; d >= 0; d--) {
    off += i % nb->dims[d] * nb->s[k][d];
    i /= nb->dims[d];
  }
  return off;
}

/* Operand k's offset for Y's element i = r * len + j: without a division in the usual
 * cases (the 64-bit remainders of kl_norm_at cost more than the row's memory traffic). */
long kl_norm_off(const kl_cl_norm *nb, int k, long i, long j) {
  int mode = nb->mode[k];
  return mode == KL_NORM_AT_ELEMENT ? i : mode == KL_NORM_AT_COLUMN ? j : kl_norm_at(nb, k, i);
}

/* The tensors of a normalization, offsets applied (NULL where absent). */
typedef struct kl_norm_io {
  __global const float *x, *skip, *scale, *bias;
  __global float *y, *sum, *mean, *inv;
} kl_norm_io;

float kl_norm_in(const kl_norm_io *t, const kl_cl_norm *nb, int flags, long i, long j) {
  float v = t->x[kl_norm_off(nb, 0, i, j)];
  return flags & KL_NORM_SKIP ? v + t->skip[kl_norm_off(nb, 1, i, j)] : v;
}

void kl_norm_row(const kl_norm_io *t, const kl_cl_norm *nb, long r, long len, float eps,
                 int flags, const kl_lanes *l) {
  long first = r * len;
  bool rms = flags & KL_NORM_RMS;
  float acc = 0;
  for (long j = l->lane; j < len; j += l->lanes) {
    float v = kl_norm_in(t, nb, flags, first + j, j);
    acc += rms ? v * v : v;
  }
  acc = kl_lanes_combine(l, acc, KL_RED_SUM);
  float mean = rms ? 0.0f : acc / (float)len, var = acc / (float)len;
  if (!rms) { /* a second pass over the deviations: no cancellation */
    float sq = 0;
    for (long j = l->lane; j < len; j += l->lanes) {
      float d = kl_norm_in(t, nb, flags, first + j, j) - mean;
      sq += d * d;
    }
    var = kl_lanes_combine(l, sq, KL_RED_SUM) / (float)len;
  }
  float inv = 1.0f / sqrt(var + eps);
  for (long j = l->lane; j < len; j += l->lanes) {
    long i = first + j;
    float v = kl_norm_in(t, nb, flags, i, j);
    if (flags & KL_NORM_SUM) t->sum[i] = v;
    float o = (v - mean) * inv * t->scale[kl_norm_off(nb, 2, i, j)];
    t->y[i] = flags & KL_NORM_BIAS ? o + t->bias[kl_norm_off(nb, 3, i, j)] : o;
  }
  if (l->lane == 0 && flags & KL_NORM_MEAN) t->mean[r] = mean;
  if (l->lane == 0 && flags & KL_NORM_INV) t->inv[r] = inv;
}

#define KL_NORM_ARGS                                                                     \
  __global const float *x_, ulong xo, __global const float *k_, ulong ko,              \
      __global const float *g_, ulong go, __global const float *b_, ulong bo,          \
      __global float *y_, ulong yo, __global float *s_, ulong so, __global float *m_,    \
      ulong mo, __global float *v_, ulong vo, long rows, long len, float eps, int flags, \
      kl_cl_norm nb
#define KL_NORM_IO {x_ + xo, k_ + ko, g_ + go, b_ + bo, y_ + yo, s_ + so, m_ + mo, v_ + vo}

__kernel void kl_norm_items(KL_NORM_ARGS) {
  __local float unused[1];
  long r = get_global_id(0);
  if (r >= rows) return;
  kl_norm_io t = KL_NORM_IO;
  kl_lanes l = kl_lanes_item(unused);
  kl_norm_row(&t, &nb, r, len, eps, flags, &l);
}

__kernel void kl_norm_group(KL_NORM_ARGS) {
  __local float buf[KL_GROUP];
  kl_norm_io t = KL_NORM_IO;
  kl_lanes l = kl_lanes_group(buf);
  kl_norm_row(&t, &nb, get_group_id(0), len, eps, flags, &l);
}

#define KL_NR_ROWS 8  /* rows per work-group of kl_norm_rows, 32 work-items each */
#define KL_NR_MAX 32  /* values a work-item holds: rows of up to 32 * 32 = 1024 */

/* The sum of v over the 32 work-items of row w, for every row of the group at once
 * (each gets its row's sum). */
float kl_nr_sum(__local float (*buf)[32], int w, int lane, float v) {
  buf[w][lane] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = 16; s > 0; s >>= 1) {
    if (lane < s) buf[w][lane] += buf[w][lane + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  v = buf[w][0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return v;
}

/* Rows of 33 to 1024 elements whose X (and Skip) have Y's shape and whose Scale (and B)
 * are one row (the host checks the modes; kl_norm_group takes the rest): 8 rows per
 * work-group of 256, 32 work-items a row, the row read once into registers (each
 * work-item's elements lane, lane + 32, ...), then the mean, the deviations' mean
 * square and the output from them: the same sums as kl_norm_row (two passes, no
 * cancellation) with a third of its memory reads, no offset arithmetic and 8 times
 * fewer work-groups. */
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void kl_norm_rows(KL_NORM_ARGS) {
  __local float buf[KL_NR_ROWS][32];
  int lid = get_local_id(0), w = lid / 32, lane = lid % 32;
  long r = get_group_id(0) * KL_NR_ROWS + w;
  bool live = r < rows, rms = flags & KL_NORM_RMS, skip = flags & KL_NORM_SKIP;
  int n = (int)len;
  __global const float *x = x_ + xo + r * len, *k = k_ + ko + r * len;
  float v[KL_NR_MAX], acc = 0.0f;
#pragma unroll
  for (int q = 0; q < KL_NR_MAX; q++) {
    int j = lane + 32 * q;
    v[q] = live && j < n ? (skip ? x[j] + k[j] : x[j]) : 0.0f;
    acc += rms ? v[q] * v[q] : v[q];
  }
  acc = kl_nr_sum(buf, w, lane, acc);
  float mean = rms ? 0.0f : acc / (float)len, var = acc / (float)len;
  if (!rms) {
    float sq = 0.0f;
#pragma unroll
    for (int q = 0; q < KL_NR_MAX; q++) {
      float d = lane + 32 * q < n ? v[q] - mean : 0.0f;
      sq += d * d;
    }
    var = kl_nr_sum(buf, w, lane, sq) / (float)len;
  }
  if (!live) return;
  float inv = 1.0f / sqrt(var + eps);
  __global const float *g = g_ + go, *b = b_ + bo;
  __global float *y = y_ + yo + r * len, *sum = s_ + so + r * len;
  bool bias = flags & KL_NORM_BIAS, keep = flags & KL_NORM_SUM;
#pragma unroll
  for (int q = 0; q < KL_NR_MAX; q++) {
    int j = lane + 32 * q;
    if (j < n) {
      if (keep) sum[j] = v[q];
      float o = (v[q] - mean) * inv * g[j];
      y[j] = bias ? o + b[j] : o;
    }
  }
  if (lane == 0 && flags & KL_NORM_MEAN) m_[mo + r] = mean;
  if (lane == 0 && flags & KL_NORM_INV) v_[vo + r] = inv;
}

/* ---- ReduceSum, Mean, Max, Min, Prod, L1, L2, SumSquare, LogSum, LogSumExp ----
 * Y's element o reduces the set of X's elements at kept(o) + set(k), k < n_set (two
 * views over X's kept and reduced axes). An empty set gives the identity (Mean: NaN,
 * LogSum and LogSumExp: -inf). */

float kl_red_map(int op, float v, float m) {
  switch (op) {
  case KL_RED_L1: return fabs(v);
  case KL_RED_L2: case KL_RED_SUMSQ: return v * v;
  case KL_RED_LOGSUMEXP: return exp(v - m);
  default: return v;
  }
}

float kl_red_start(int op) {
  switch (op) {
  case KL_RED_MAX: return -INFINITY;
  case KL_RED_MIN: return INFINITY;
  case KL_RED_PROD: return 1.0f;
  default: return 0.0f;
  }
}

/* The combination of op over the set from base, across the lanes. */
float kl_red_set(__global const float *x, long base, const kl_cl_view *set, long n_set,
                 int op, const kl_lanes *l) {
  float m = 0;
  if (op == KL_RED_LOGSUMEXP) { /* exp(x - max) cannot overflow */
    m = -INFINITY;
    for (long k = l->lane; k < n_set; k += l->lanes) m = kl_max_nan(m, x[base + kl_view_at(set, k)]);
    m = kl_lanes_combine(l, m, KL_RED_MAX);
    if (isinf(m)) return m; /* empty, all -inf, or a +inf */
  }
  int combine = op == KL_RED_LOGSUMEXP ? KL_RED_SUM : op;
  float acc = kl_red_start(op);
  for (long k = l->lane; k < n_set; k += l->lanes)
    acc = kl_combine(combine, acc, kl_red_map(op, x[base + kl_view_at(set, k)], m));
  acc = kl_lanes_combine(l, acc, combine);
  switch (op) {
  case KL_RED_MEAN: return acc / (float)n_set;
  case KL_RED_L2: return sqrt(acc);
  case KL_RED_LOGSUM: return log(acc);
  case KL_RED_LOGSUMEXP: return m + log(acc);
  default: return acc;
  }
}

__kernel void kl_reduce_items(__global const float *x_, ulong xo, __global float *y_, ulong yo,
                              long n, int op, kl_cl_view kept, kl_cl_view set, long n_set) {
  __local float unused[1];
  long o = get_global_id(0);
  if (o >= n) return;
  kl_lanes l = kl_lanes_item(unused);
  y_[yo + o] = kl_red_set(x_, xo + kl_view_at(&kept, o), &set, n_set, op, &l);
}

__kernel void kl_reduce_group(__global const float *x_, ulong xo, __global float *y_, ulong yo,
                              long n, int op, kl_cl_view kept, kl_cl_view set, long n_set) {
  __local float buf[KL_GROUP];
  long o = get_group_id(0);
  kl_lanes l = kl_lanes_group(buf);
  float v = kl_red_set(x_, xo + kl_view_at(&kept, o), &set, n_set, op, &l);
  if (l.lane == 0) y_[yo + o] = v;
}

/* ---- moves through views, Gather ----
 * kl_view_read: Y[i] = X[v(i)] over Y's n elements (Transpose, Slice, Split, Expand,
 * Tile); kl_view_write: Y[v(i)] = X[i] over X's n elements (Concat).
 *
 * Gather: X [outer, len, inner], indices [count] (any shape, flattened), Y [outer,
 * count, inner]: Y[o, j, :] = X[o, idx[j], :], a negative index counting from the end.
 * An index out of range (the CPU's error) gives `bad` (NaN for float32) and raises the
 * session's flag (opencl.h): [node + 1, j (low, high 32 bits), the index (low, high),
 * len (low, high)], which the host turns into the CPU's error after the run.
 *
 * These only move elements, so each comes once per element size (KL_MOVES below): T
 * uint for 4 bytes (float32 and int32 under the names without a suffix), uchar (_b1:
 * bool, uint8), ulong (_b8: int64). */
#define KL_MOVES(SFX, T, BAD)                                                              \
  __kernel void kl_view_read##SFX(__global const T *x_, ulong xo, __global T *y_, ulong yo, \
                                  long n, kl_cl_view v) {                                  \
    long i = get_global_id(0);                                                             \
    if (i < n) y_[yo + i] = x_[xo + kl_view_at(&v, i)];                                    \
  }                                                                                        \
  __kernel void kl_view_write##SFX(__global const T *x_, ulong xo, __global T *y_,          \
                                   ulong yo, long n, kl_cl_view v) {                       \
    long i = get_global_id(0);                                                             \
    if (i < n) y_[yo + kl_view_at(&v, i)] = x_[xo + i];                                    \
  }                                                                                        \
  __kernel void kl_gather##SFX(__global const T *x_, ulong xo, __global const long *i_,     \
                               ulong io, __global T *y_, ulong yo, long n, long len,       \
                               long count, long inner, __global int *f_, ulong fo,         \
                               int node) {                                                 \
    long t = get_global_id(0);                                                             \
    if (t >= n) return;                                                                    \
    long in = t % inner, j = t / inner % count, o = t / inner / count;                     \
    long k0 = i_[io + j], k = k0 < 0 ? k0 + len : k0;                                      \
    if (k >= 0 && k < len) {                                                               \
      y_[yo + t] = x_[xo + (o * len + k) * inner + in];                                    \
      return;                                                                              \
    }                                                                                      \
    y_[yo + t] = BAD;                                                                      \
    __global int *f = f_ + fo;                                                             \
    if (atomic_cmpxchg(f, 0, node + 1) == 0) {                                             \
      f[1] = (int)(j & 0xffffffff), f[2] = (int)(j >> 32);                                 \
      f[3] = (int)(k0 & 0xffffffff), f[4] = (int)(k0 >> 32);                               \
      f[5] = (int)(len & 0xffffffff), f[6] = (int)(len >> 32);                             \
    }                                                                                      \
  }                                                                                        \
  __kernel void kl_pad##SFX(__global const T *x_, ulong xo, __global T *y_, ulong yo,       \
                            long n, long value, kl_cl_pad p) {                             \
    long i = get_global_id(0);                                                             \
    if (i >= n) return;                                                                    \
    long off = kl_pad_offset(&p, i);                                                       \
    y_[yo + i] = off < 0 ? (T)value : x_[xo + off];                                        \
  }

/* ---- Pad ----
 * Y's dim d of dims[d] reads X's dim of xdims[d] padded by begin[d] before and end[d]
 * after (negative: cropped), constant, reflect, edge or wrap (kl_pad_mode's order), as
 * kl_pad_source in src/ir/infer_data.c. Matches kl_cl_pad. */
typedef struct kl_cl_pad {
  long dims[KL_MAX_RANK], xdims[KL_MAX_RANK], xs[KL_MAX_RANK];
  long begin[KL_MAX_RANK], end[KL_MAX_RANK];
  int rank;
  int mode;
} kl_cl_pad;

#define KL_PAD_CONSTANT 0
#define KL_PAD_REFLECT 1
#define KL_PAD_EDGE 2
#define KL_PAD_WRAP 3

/* The input index of output index o, or -1 for a constant. */
long kl_pad_source(int mode, long o, long len, long begin, long end) {
  long crop_begin = begin < 0 ? -begin : 0, crop_end = end < 0 ? -end : 0;
  long m = len - crop_begin - crop_end, p = o - (begin > 0 ? begin : 0);
  if (p >= 0 && p < m) return crop_begin + p;
  if (mode == KL_PAD_CONSTANT || m <= 0) return -1;
  if (mode == KL_PAD_EDGE) return crop_begin + (p < 0 ? 0 : m - 1);
  if (mode == KL_PAD_WRAP) return crop_begin + (p % m + m) % m;
  if (m == 1) return crop_begin;
  long period = 2 * (m - 1), q = (p % period + period) % period; /* reflect */
  return crop_begin + (q < m ? q : period - q);
}

/* X's offset of Y's element i, or -1 where Y takes the constant. */
long kl_pad_offset(const kl_cl_pad *p, long i) {
  long rest = i, off = 0;
  for (int d = p->rank - 1; d >= 0; d--) {
    long s = kl_pad_source(p->mode, rest % p->dims[d], p->xdims[d], p->begin[d], p->end[d]);
    rest /= p->dims[d];
    if (s < 0) return -1;
    off += s * p->xs[d];
  }
  return off;
}

/* Pad's constant comes as the bits of one element (a float32's in the low 32). */
KL_MOVES(, uint, 0x7fc00000u)
KL_MOVES(_b1, uchar, 0)
KL_MOVES(_b8, ulong, 0)
