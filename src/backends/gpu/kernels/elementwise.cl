/* Elementwise kernels: unary functions and activations, binary ops with broadcasting,
 * and a plain copy (src/backends/gpu/ops_elementwise.c launches them). */

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

__kernel void kl_copy(__global const float *x_, ulong xo, __global float *y_, ulong yo,
                      long n) {
  long i = get_global_id(0);
  if (i < n) y_[yo + i] = x_[xo + i];
}
