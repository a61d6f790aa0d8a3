/* What every kiln OpenCL kernel shares (joined first into the one program the library
 * embeds). Conventions:
 * - A tensor argument is a buffer and an offset in elements: `__global float *x_, ulong
 *   xo`; the kernel reads x_ + xo. Every size and index is a long.
 * - Kernels check their own bounds: the host rounds global sizes up to the work-group.
 * - Activation codes (KL_ACT_*) match src/backends/gpu/kernels.h. */

#define KL_MAX_RANK 8

/* The broadcast of up to three operands to an output of rank `rank` (dims), as element
 * strides per output dim (0 where an operand is broadcast). Matches kl_cl_bcast. */
typedef struct kl_cl_bcast {
  long dims[KL_MAX_RANK];
  long s[3][KL_MAX_RANK];
  int rank;
  int pad;
} kl_cl_bcast;

#define KL_ACT_NONE 0
#define KL_ACT_RELU 1
#define KL_ACT_SIGMOID 2
#define KL_ACT_TANH 3
#define KL_ACT_LEAKY 4
#define KL_ACT_ELU 5
#define KL_ACT_SELU 6
#define KL_ACT_CELU 7
#define KL_ACT_HSIGMOID 8
#define KL_ACT_HSWISH 9
#define KL_ACT_MISH 10
#define KL_ACT_GELU 11
#define KL_ACT_GELU_TANH 12
#define KL_ACT_SOFTPLUS 13
#define KL_ACT_SOFTSIGN 14
#define KL_ACT_THRELU 15
#define KL_ACT_CLIP 16
#define KL_ACT_ABS 17
#define KL_ACT_NEG 18
#define KL_ACT_EXP 19
#define KL_ACT_LOG 20
#define KL_ACT_SQRT 21
#define KL_ACT_RECIP 22
#define KL_ACT_FLOOR 23
#define KL_ACT_CEIL 24
#define KL_ACT_ROUND 25
#define KL_ACT_SIGN 26
#define KL_ACT_ERF 27
#define KL_ACT_SIN 28
#define KL_ACT_COS 29
#define KL_ACT_SWISH 30

float kl_softplus(float x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

/* Activation `act` with parameters a, b (alpha/beta, Clip's min/max, ...). */
float kl_act(int act, float x, float a, float b) {
  switch (act) {
  case KL_ACT_NONE: return x;
  case KL_ACT_RELU: return x < 0 ? 0.0f : x;
  case KL_ACT_SIGMOID: return 1.0f / (1.0f + exp(-x));
  case KL_ACT_TANH: return tanh(x);
  case KL_ACT_LEAKY: return x < 0 ? a * x : x;
  case KL_ACT_ELU: return x < 0 ? a * expm1(x) : x;
  case KL_ACT_SELU: return x <= 0 ? b * a * expm1(x) : b * x;
  case KL_ACT_CELU: return x < 0 ? a * expm1(x / a) : x;
  case KL_ACT_HSIGMOID: return clamp(a * x + b, 0.0f, 1.0f);
  case KL_ACT_HSWISH: return x * clamp(x / 6.0f + 0.5f, 0.0f, 1.0f);
  case KL_ACT_MISH: return x * tanh(kl_softplus(x));
  case KL_ACT_GELU: return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f));
  case KL_ACT_GELU_TANH:
    return 0.5f * x * (1.0f + tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  case KL_ACT_SOFTPLUS: return kl_softplus(x);
  case KL_ACT_SOFTSIGN: return x / (1.0f + fabs(x));
  case KL_ACT_THRELU: return x > a ? x : 0.0f;
  case KL_ACT_CLIP: return isnan(x) ? x : fmin(fmax(x, a), b);
  case KL_ACT_ABS: return fabs(x);
  case KL_ACT_NEG: return -x;
  case KL_ACT_EXP: return exp(x);
  case KL_ACT_LOG: return log(x);
  case KL_ACT_SQRT: return sqrt(x);
  case KL_ACT_RECIP: return 1.0f / x;
  case KL_ACT_FLOOR: return floor(x);
  case KL_ACT_CEIL: return ceil(x);
  case KL_ACT_ROUND: return rint(x);
  case KL_ACT_SIGN: return x > 0 ? 1.0f : x < 0 ? -1.0f : x;
  case KL_ACT_ERF: return erf(x);
  case KL_ACT_SIN: return sin(x);
  case KL_ACT_COS: return cos(x);
  case KL_ACT_SWISH: return x / (1.0f + exp(-a * x));
  }
  return x;
}

#if defined(KL_SM)
/* v of the work-item `lanes` away by xor in this warp (shfl.sync.bfly): the PTX programs
 * only (NVIDIA's warps are 32 consecutive work-items of a work-group); every work-item of
 * the warp must take part. */
float kl_shfl_xor(float v, int lanes) {
  float r;
  __asm__ volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                   : "=f"(r) : "f"(v), "r"(lanes));
  return r;
}
#endif
