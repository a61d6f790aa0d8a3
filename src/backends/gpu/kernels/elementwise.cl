/* Elementwise kernels: unary functions and activations, binary ops with broadcasting,
 * a plain copy, and the ops of the other dtypes: Cast, comparisons, logic, Where and
 * int64 arithmetic (src/backends/gpu/ops_elementwise.c launches them). */

#define KL_BIN_ADD 0
#define KL_BIN_SUB 1
#define KL_BIN_MUL 2
#define KL_BIN_DIV 3
#define KL_BIN_POW 4
#define KL_BIN_MAX 5
#define KL_BIN_MIN 6
#define KL_BIN_PRELU 7

__kernel void kl_unary(__global const float *x_, ulong xo, __global float *y_, ulong yo,
                       long n, int act, float a, float b) {
  long i = get_global_id(0);
  if (i >= n) return;
  y_[yo + i] = kl_act(act, x_[xo + i], a, b);
}

__kernel void kl_binary(__global const float *a_, ulong ao, __global const float *b_,
                        ulong bo, __global float *y_, ulong yo, long n, int op,
                        kl_cl_bcast bc) {
  long i = get_global_id(0);
  if (i >= n) return;
  long rest = i, ia = 0, ib = 0;
  for (int d = bc.rank - 1; d >= 0; d--) {
    long k = rest % bc.dims[d];
    rest /= bc.dims[d];
    ia += k * bc.s[0][d];
    ib += k * bc.s[1][d];
  }
  float x = a_[ao + ia], z = b_[bo + ib], r;
  switch (op) {
  case KL_BIN_ADD: r = x + z; break;
  case KL_BIN_SUB: r = x - z; break;
  case KL_BIN_MUL: r = x * z; break;
  case KL_BIN_DIV: r = x / z; break;
  case KL_BIN_POW: r = pow(x, z); break;
  case KL_BIN_MAX: r = isnan(x) || isnan(z) ? NAN : fmax(x, z); break;
  case KL_BIN_MIN: r = isnan(x) || isnan(z) ? NAN : fmin(x, z); break;
  default: r = x < 0 ? x * z : x; break; /* PRelu: slope z */
  }
  y_[yo + i] = r;
}

/* Identity: a copy by element size (uint: float32 and int32, _b1: bool and uint8, _b8:
 * int64). */
#define KL_COPY(SFX, T)                                                                    \
  __kernel void kl_copy##SFX(__global const T *x_, ulong xo, __global T *y_, ulong yo,      \
                             long n) {                                                     \
    long i = get_global_id(0);                                                             \
    if (i < n) y_[yo + i] = x_[xo + i];                                                    \
  }
KL_COPY(, uint)
KL_COPY(_b1, uchar)
KL_COPY(_b8, ulong)

/* ---- int64, int32, bool and uint8 ----
 * bool and uint8 are uchar (a bool 0 or 1), int32 int, int64 long. Broadcasting as
 * kl_binary's. Integer arithmetic wraps (computed unsigned), as the reference kernels'. */

#define KL_DT_F32 0
#define KL_DT_I64 1
#define KL_DT_I32 2
#define KL_DT_U8 3
#define KL_DT_BOOL 4

#define KL_CMP_EQ 0
#define KL_CMP_LT 1
#define KL_CMP_LE 2
#define KL_CMP_GT 3
#define KL_CMP_GE 4

#define KL_LOGIC_AND 0
#define KL_LOGIC_OR 1
#define KL_LOGIC_XOR 2

#define KL_FLAG_DIV_ZERO 1 /* opencl.h's KL_CL_FLAG_DIV_ZERO */

/* Operand k's offset (k < n) of output element i under bc. */
void kl_bcast_at(const kl_cl_bcast *bc, long i, int n, long *off) {
  for (int k = 0; k < n; k++) off[k] = 0;
  for (int d = bc->rank - 1; d >= 0; d--) {
    long q = i % bc->dims[d];
    i /= bc->dims[d];
    for (int k = 0; k < n; k++) off[k] += q * bc->s[k][d];
  }
}

/* Cast (ONNX, as the reference kernel): float to an integer truncates toward zero,
 * saturating at int64's range (NaN gives 0), then wraps to the target's width; anything
 * to bool is "not zero" (NaN is true); int64 to float rounds to nearest. */
__kernel void kl_cast(__global const uchar *x_, ulong xo, int xt, __global uchar *y_,
                      ulong yo, int yt, long n) {
  long i = get_global_id(0);
  if (i >= n) return;
  float f = 0.0f;
  long v = 0;
  switch (xt) {
  case KL_DT_F32: f = ((__global const float *)x_)[xo + i]; break;
  case KL_DT_I64: v = ((__global const long *)x_)[xo + i]; break;
  case KL_DT_I32: v = ((__global const int *)x_)[xo + i]; break;
  default: v = x_[xo + i]; break;
  }
  bool from_f = xt == KL_DT_F32;
  /* NaN tested apart: NVIDIA's conversion (cvt.rzi.s64.f32) gives INT64_MIN for it */
  if (from_f && yt != KL_DT_BOOL) v = isnan(f) ? 0 : convert_long_sat_rtz(f);
  switch (yt) {
  case KL_DT_F32: ((__global float *)y_)[yo + i] = from_f ? f : (float)v; break;
  case KL_DT_I64: ((__global long *)y_)[yo + i] = v; break;
  case KL_DT_I32: ((__global int *)y_)[yo + i] = (int)v; break;
  case KL_DT_U8: y_[yo + i] = (uchar)v; break;
  default: y_[yo + i] = from_f ? (f != 0.0f || isnan(f)) : v != 0; break;
  }
}

/* Equal, Less, LessOrEqual, Greater, GreaterOrEqual of two T -> bool (NaN compares
 * false, as in C): _f float32, _l int64, _i int32, _b uchar (bool, uint8). */
#define KL_COMPARE(SFX, T)                                                                 \
  __kernel void kl_compare##SFX(__global const T *a_, ulong ao, __global const T *b_,       \
                                ulong bo, __global uchar *y_, ulong yo, long n, int op,    \
                                kl_cl_bcast bc) {                                          \
    long i = get_global_id(0);                                                             \
    if (i >= n) return;                                                                    \
    long off[2];                                                                           \
    kl_bcast_at(&bc, i, 2, off);                                                           \
    T x = a_[ao + off[0]], z = b_[bo + off[1]];                                            \
    bool r;                                                                                \
    switch (op) {                                                                          \
    case KL_CMP_EQ: r = x == z; break;                                                     \
    case KL_CMP_LT: r = x < z; break;                                                      \
    case KL_CMP_LE: r = x <= z; break;                                                     \
    case KL_CMP_GT: r = x > z; break;                                                      \
    default: r = x >= z; break;                                                            \
    }                                                                                      \
    y_[yo + i] = r;                                                                        \
  }
KL_COMPARE(_f, float)
KL_COMPARE(_l, long)
KL_COMPARE(_i, int)
KL_COMPARE(_b, uchar)

/* And, Or, Xor of two bools. */
__kernel void kl_logic(__global const uchar *a_, ulong ao, __global const uchar *b_, ulong bo,
                       __global uchar *y_, ulong yo, long n, int op, kl_cl_bcast bc) {
  long i = get_global_id(0);
  if (i >= n) return;
  long off[2];
  kl_bcast_at(&bc, i, 2, off);
  bool x = a_[ao + off[0]] != 0, z = b_[bo + off[1]] != 0;
  y_[yo + i] = op == KL_LOGIC_AND ? x && z : op == KL_LOGIC_OR ? x || z : x != z;
}

__kernel void kl_not(__global const uchar *x_, ulong xo, __global uchar *y_, ulong yo, long n) {
  long i = get_global_id(0);
  if (i < n) y_[yo + i] = x_[xo + i] == 0;
}

/* Where(cond, X, Y) = cond ? X : Y, by element size as kl_copy. */
#define KL_WHERE(SFX, T)                                                                   \
  __kernel void kl_where##SFX(__global const uchar *c_, ulong co, __global const T *a_,     \
                              ulong ao, __global const T *b_, ulong bo, __global T *y_,    \
                              ulong yo, long n, kl_cl_bcast bc) {                          \
    long i = get_global_id(0);                                                             \
    if (i >= n) return;                                                                    \
    long off[3];                                                                           \
    kl_bcast_at(&bc, i, 3, off);                                                           \
    y_[yo + i] = c_[co + off[0]] ? a_[ao + off[1]] : b_[bo + off[2]];                      \
  }
KL_WHERE(, uint)
KL_WHERE(_b1, uchar)
KL_WHERE(_b8, ulong)

/* int64 Add, Sub, Mul, Div, Max, Min (KL_BIN_*). Div truncates toward zero; a division
 * by zero writes 0 and raises the session's flag (opencl.h: [node + 1, the element (low,
 * high 32 bits), ..., [7] KL_FLAG_DIV_ZERO]), which fails the run as the CPU's does;
 * INT64_MIN / -1 wraps to INT64_MIN. */
__kernel void kl_binary_l(__global const long *a_, ulong ao, __global const long *b_,
                          ulong bo, __global long *y_, ulong yo, long n, int op,
                          kl_cl_bcast bc, __global int *f_, ulong fo, int node) {
  long i = get_global_id(0);
  if (i >= n) return;
  long off[2];
  kl_bcast_at(&bc, i, 2, off);
  long x = a_[ao + off[0]], z = b_[bo + off[1]], r;
  switch (op) {
  case KL_BIN_ADD: r = (long)((ulong)x + (ulong)z); break;
  case KL_BIN_SUB: r = (long)((ulong)x - (ulong)z); break;
  case KL_BIN_MUL: r = (long)((ulong)x * (ulong)z); break;
  case KL_BIN_MAX: r = x > z ? x : z; break;
  case KL_BIN_MIN: r = x < z ? x : z; break;
  default: /* Div */
    if (z == 0) {
      r = 0;
      __global int *f = f_ + fo;
      if (atomic_cmpxchg(f, 0, node + 1) == 0) {
        f[1] = (int)(i & 0xffffffff), f[2] = (int)(i >> 32);
        f[7] = KL_FLAG_DIV_ZERO;
      }
    } else {
      r = z == -1 ? (long)(0 - (ulong)x) : x / z;
    }
    break;
  }
  y_[yo + i] = r;
}

/* int64 Neg and Abs (KL_ACT_NEG, KL_ACT_ABS), wrapping: -INT64_MIN is INT64_MIN. */
__kernel void kl_unary_l(__global const long *x_, ulong xo, __global long *y_, ulong yo,
                         long n, int act) {
  long i = get_global_id(0);
  if (i >= n) return;
  long x = x_[xo + i];
  y_[yo + i] = act == KL_ACT_NEG || x < 0 ? (long)(0 - (ulong)x) : x;
}
