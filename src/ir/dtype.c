#include "ir/ir.h"

#include <math.h>
#include <string.h>

size_t kl_dtype_size(kl_dtype t) {
  switch (t) {
  case KL_F32: case KL_I32: case KL_U32: return 4;
  case KL_U8: case KL_I8: case KL_BOOL: return 1;
  case KL_F8E4M3FN: case KL_F8E4M3FNUZ: case KL_F8E5M2: case KL_F8E5M2FNUZ:
  case KL_F8E8M0: return 1;
  case KL_U4: case KL_I4: case KL_F4E2M1: case KL_U2: case KL_I2: return 1; /* in memory */
  case KL_U16: case KL_I16: case KL_F16: case KL_BF16: return 2;
  case KL_I64: case KL_F64: case KL_U64: return 8;
  case KL_UNDEFINED: case KL_STRING: return 0;
  }
  return 0;
}

const char *kl_dtype_name(kl_dtype t) {
  switch (t) {
  case KL_UNDEFINED: return "undefined";
  case KL_F32: return "float32";
  case KL_U8: return "uint8";
  case KL_I8: return "int8";
  case KL_U16: return "uint16";
  case KL_I16: return "int16";
  case KL_I32: return "int32";
  case KL_I64: return "int64";
  case KL_STRING: return "string";
  case KL_BOOL: return "bool";
  case KL_F16: return "float16";
  case KL_F64: return "float64";
  case KL_U32: return "uint32";
  case KL_U64: return "uint64";
  case KL_BF16: return "bfloat16";
  case KL_F8E4M3FN: return "float8e4m3fn";
  case KL_F8E4M3FNUZ: return "float8e4m3fnuz";
  case KL_F8E5M2: return "float8e5m2";
  case KL_F8E5M2FNUZ: return "float8e5m2fnuz";
  case KL_F8E8M0: return "float8e8m0";
  case KL_U4: return "uint4";
  case KL_I4: return "int4";
  case KL_F4E2M1: return "float4e2m1";
  case KL_U2: return "uint2";
  case KL_I2: return "int2";
  }
  return "unknown";
}

bool kl_dtype_valid(int t) {
  return t != KL_UNDEFINED && t != KL_STRING && kl_dtype_size((kl_dtype)t) != 0;
}

bool kl_dtype_is_f8(kl_dtype t) {
  return t == KL_F8E4M3FN || t == KL_F8E4M3FNUZ || t == KL_F8E5M2 || t == KL_F8E5M2FNUZ ||
         t == KL_F8E8M0 || t == KL_F4E2M1;
}

int kl_dtype_file_bits(kl_dtype t) {
  switch (t) {
  case KL_U4: case KL_I4: case KL_F4E2M1: return 4;
  case KL_U2: case KL_I2: return 2;
  default: return (int)(8 * kl_dtype_size(t));
  }
}

size_t kl_dtype_file_bytes(kl_dtype t, size_t n) {
  int bits = kl_dtype_file_bits(t);
  if (bits >= 8) return n * (size_t)(bits / 8);
  size_t per = (size_t)(8 / bits);
  return n / per + (n % per != 0);
}

void kl_store_small_int(void *data, kl_dtype t, size_t i, int64_t v) {
  int bits = kl_dtype_file_bits(t);
  unsigned mask = (1u << bits) - 1u, u = (unsigned)((uint64_t)v & mask);
  if ((t == KL_I4 || t == KL_I2) && (u & (1u << (bits - 1)))) u |= ~mask;
  ((uint8_t *)data)[i] = (uint8_t)u;
}

size_t kl_dtype_find_bad_small(kl_dtype t, const uint8_t *data, size_t n) {
  int bits = kl_dtype_file_bits(t);
  if (bits >= 8) return n;
  bool is_signed = t == KL_I4 || t == KL_I2;
  int lo = is_signed ? -(1 << (bits - 1)) : 0, hi = is_signed ? (1 << (bits - 1)) - 1
                                                              : (1 << bits) - 1;
  for (size_t i = 0; i < n; i++) {
    int v = is_signed ? (int)(int8_t)data[i] : (int)data[i];
    if (v < lo || v > hi) return i;
  }
  return n;
}

void kl_dtype_pack(kl_dtype t, const uint8_t *in, size_t n, uint8_t *out) {
  int bits = kl_dtype_file_bits(t);
  if (bits >= 8) return;
  unsigned mask = (1u << bits) - 1u;
  size_t per = (size_t)(8 / bits);
  memset(out, 0, kl_dtype_file_bytes(t, n));
  for (size_t i = 0; i < n; i++)
    out[i / per] |= (uint8_t)((in[i] & mask) << (bits * (int)(i % per)));
}

void kl_dtype_unpack(kl_dtype t, const uint8_t *in, size_t n, uint8_t *out) {
  int bits = kl_dtype_file_bits(t);
  if (bits >= 8) return;
  unsigned mask = (1u << bits) - 1u, sign = 1u << (bits - 1);
  size_t per = (size_t)(8 / bits);
  bool is_signed = t == KL_I4 || t == KL_I2;
  for (size_t i = 0; i < n; i++) {
    unsigned v = (in[i / per] >> (bits * (int)(i % per))) & mask;
    if (is_signed && (v & sign)) v |= ~mask; /* sign-extend into the byte */
    out[i] = (uint8_t)v;
  }
}

bool kl_dtype_is_float(kl_dtype t) {
  return t == KL_F32 || t == KL_F64 || t == KL_F16 || t == KL_BF16;
}

bool kl_dtype_is_int(kl_dtype t) {
  switch (t) {
  case KL_U8: case KL_I8: case KL_U16: case KL_I16: case KL_I32: case KL_I64:
  case KL_U32: case KL_U64: case KL_U4: case KL_I4: case KL_U2: case KL_I2: return true;
  default: return false;
  }
}

const char *kiln_dtype_name(kiln_dtype dtype) {
  return kl_dtype_valid((int)dtype) ? kl_dtype_name((kl_dtype)dtype) : "undefined";
}
size_t kiln_dtype_size(kiln_dtype dtype) { return kl_dtype_size((kl_dtype)dtype); }

static float bits_to_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t f32_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

float kl_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) { /* zero or subnormal: man * 2^-24 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t kl_f32_to_f16(float f) {
  uint32_t u = f32_to_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00; /* NaN */
  if (abs >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: inf */
  if (abs < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
    float a = bits_to_f32(abs);
    /* a / 2^-24 rounded to nearest even; rintf uses the current (nearest) mode */
    return sign | (uint16_t)rintf(a * 16777216.0f);
  }
  uint32_t mant_round = abs + 0xfffu + ((abs >> 13) & 1u); /* round to nearest even */
  return sign | (uint16_t)((mant_round - 0x38000000u) >> 13);
}

float kl_bf16_to_f32(uint16_t h) { return bits_to_f32((uint32_t)h << 16); }

uint16_t kl_f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* ---- 8-bit floats ---- */

/* A sign-exponent-mantissa 8-bit format: mbits mantissa bits, the exponent bias, the
 * largest finite code (sign clear), and whether it is an "fnuz" one (0x80 is NaN, no -0). */
typedef struct f8_format {
  int mbits, bias;
  uint8_t max_code;
  bool uz;
  int sign_bit; /* 7, or 3 for float4e2m1 */
} f8_format;

static f8_format f8_format_of(kl_dtype t) {
  switch (t) {
  case KL_F8E4M3FN: return (f8_format){3, 7, 0x7e, false, 7};
  case KL_F8E4M3FNUZ: return (f8_format){3, 8, 0x7f, true, 7};
  case KL_F8E5M2: return (f8_format){2, 15, 0x7b, false, 7};
  case KL_F4E2M1: return (f8_format){1, 1, 0x7, false, 3};
  default: return (f8_format){2, 16, 0x7f, true, 7}; /* KL_F8E5M2FNUZ */
  }
}

float kl_f8_to_f32(uint8_t b, kl_dtype t) {
  if (t == KL_F8E8M0) return b == 0xff ? NAN : ldexpf(1.0f, (int)b - 127);
  f8_format f = f8_format_of(t);
  bool neg = ((b >> f.sign_bit) & 1) != 0;
  int mag = b & ((1 << f.sign_bit) - 1);
  if (f.uz && b == 0x80) return NAN;
  if (mag > f.max_code) { /* above the largest finite code: inf (e5m2 only) or NaN */
    if (t == KL_F8E5M2 && mag == 0x7c) return neg ? -INFINITY : INFINITY;
    return NAN;
  }
  int ex = mag >> f.mbits, man = mag & ((1 << f.mbits) - 1);
  float v = ex == 0 ? ldexpf((float)man, 1 - f.bias - f.mbits)
                    : ldexpf((float)(man | (1 << f.mbits)), ex - f.bias - f.mbits);
  return neg ? -v : v;
}

uint8_t kl_f32_to_f8(float x, kl_dtype t, bool saturate) {
  if (t == KL_F8E8M0) return kl_f32_to_e8m0(x, saturate, KL_ROUND_UP);
  f8_format f = f8_format_of(t);
  uint8_t sign = signbit(x) ? (uint8_t)(1u << f.sign_bit) : 0;
  uint8_t nan = f.uz ? 0x80 : (uint8_t)(sign | 0x7f);
  /* float4e2m1 has no NaN or inf: ONNX (ml_dtypes) gives -0 for NaN and saturates */
  if (t == KL_F4E2M1 && isnan(x)) return 0x8;
  if (t == KL_F4E2M1) saturate = true;
  if (isnan(x)) return nan;
  double maxv = kl_f8_to_f32(f.max_code, t);
  double a = fabs((double)x);
  if (a > maxv && saturate) a = maxv;
  if (isinf(a)) return t == KL_F8E5M2 ? (uint8_t)(sign | 0x7c) : nan;
  int code = 0;
  if (a != 0) {
    int e2;
    (void)frexp(a, &e2);
    int ex = e2 - 1, emin = 1 - f.bias; /* a = 1.m * 2^ex */
    if (ex < emin) ex = emin;
    /* a in units of the last mantissa bit at that exponent; exact, then rint rounds to
     * nearest even (the default rounding mode) */
    double q = rint(ldexp(a, f.mbits - ex));
    int one = 1 << f.mbits;
    if (q >= 2.0 * one) { q /= 2; ex++; }
    if (q >= one) code = ((ex + f.bias) << f.mbits) | ((int)q - one);
    else code = (int)q; /* subnormal (ex == emin) or zero */
    if (code > f.max_code) /* only without saturate */
      return t == KL_F8E5M2 ? (uint8_t)(sign | 0x7c) : nan;
  }
  if (code == 0 && f.uz) return 0;
  return (uint8_t)(sign | code);
}

/* ONNX's float32 -> e8m0: the float's biased exponent, rounded by the fraction bits in
 * the given mode; NaN and inf give 0xff (NaN); saturate keeps 0xfe from rounding to it. */
uint8_t kl_f32_to_e8m0(float x, bool saturate, kl_round_mode mode) {
  uint32_t u = f32_to_bits(x);
  uint32_t ex = (u >> 23) & 0xff;
  if (ex == 0xff) return 0xff;
  bool up = false;
  if (mode == KL_ROUND_NEAREST) {
    bool g = (u & 0x400000u) != 0, r = (u & 0x200000u) != 0, s = (u & 0x1fffffu) != 0;
    up = g && (r || s || ex > 0);
  } else if (mode == KL_ROUND_UP) {
    up = (u & 0x7fffffu) != 0;
  }
  if (up && saturate && ex == 0xfe) up = false;
  return (uint8_t)(ex + (up ? 1u : 0u));
}

double kl_load_f64(const void *data, kl_dtype t, size_t i) {
  switch (t) {
  case KL_F8E4M3FN: case KL_F8E4M3FNUZ: case KL_F8E5M2: case KL_F8E5M2FNUZ:
  case KL_F8E8M0: case KL_F4E2M1: return kl_f8_to_f32(((const uint8_t *)data)[i], t);
  case KL_I4: case KL_I2: return ((const int8_t *)data)[i];
  case KL_U4: case KL_U2: return ((const uint8_t *)data)[i];
  case KL_F32: return ((const float *)data)[i];
  case KL_F64: return ((const double *)data)[i];
  case KL_F16: return kl_f16_to_f32(((const uint16_t *)data)[i]);
  case KL_BF16: return kl_bf16_to_f32(((const uint16_t *)data)[i]);
  case KL_U8: return ((const uint8_t *)data)[i];
  case KL_I8: return ((const int8_t *)data)[i];
  case KL_U16: return ((const uint16_t *)data)[i];
  case KL_I16: return ((const int16_t *)data)[i];
  case KL_I32: return ((const int32_t *)data)[i];
  case KL_I64: return (double)((const int64_t *)data)[i];
  case KL_U32: return ((const uint32_t *)data)[i];
  case KL_U64: return (double)((const uint64_t *)data)[i];
  case KL_BOOL: return ((const uint8_t *)data)[i] != 0;
  default: return 0.0;
  }
}

int64_t kl_load_i64(const void *data, kl_dtype t, size_t i) {
  switch (t) {
  case KL_I64: return ((const int64_t *)data)[i];
  case KL_I32: return ((const int32_t *)data)[i];
  case KL_U8: return ((const uint8_t *)data)[i];
  case KL_I8: return ((const int8_t *)data)[i];
  case KL_U16: return ((const uint16_t *)data)[i];
  case KL_I16: return ((const int16_t *)data)[i];
  case KL_U32: return ((const uint32_t *)data)[i];
  case KL_U64: return (int64_t)((const uint64_t *)data)[i];
  case KL_BOOL: return ((const uint8_t *)data)[i] != 0;
  case KL_I4: case KL_I2: return ((const int8_t *)data)[i];
  case KL_U4: case KL_U2: return ((const uint8_t *)data)[i];
  default: {
    double d = kl_load_f64(data, t, i);
    if (d != d) return 0;
    if (d >= 9.2233720368547758e18) return INT64_MAX;
    if (d <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)d;
  }
  }
}

void kl_store_f64(void *data, kl_dtype t, size_t i, double v) {
  switch (t) {
  case KL_F32: ((float *)data)[i] = (float)v; break;
  case KL_F64: ((double *)data)[i] = v; break;
  case KL_F16: ((uint16_t *)data)[i] = kl_f32_to_f16((float)v); break;
  case KL_BF16: ((uint16_t *)data)[i] = kl_f32_to_bf16((float)v); break;
  case KL_F8E4M3FN: case KL_F8E4M3FNUZ: case KL_F8E5M2: case KL_F8E5M2FNUZ:
  case KL_F8E8M0: case KL_F4E2M1:
    ((uint8_t *)data)[i] = kl_f32_to_f8((float)v, t, true);
    break;
  case KL_I4: case KL_U4: case KL_I2: case KL_U2: kl_store_small_int(data, t, i, (int64_t)v); break;
  case KL_BOOL: ((uint8_t *)data)[i] = v != 0.0; break;
  case KL_U8: ((uint8_t *)data)[i] = (uint8_t)(int64_t)v; break;
  case KL_I8: ((int8_t *)data)[i] = (int8_t)(int64_t)v; break;
  case KL_U16: ((uint16_t *)data)[i] = (uint16_t)(int64_t)v; break;
  case KL_I16: ((int16_t *)data)[i] = (int16_t)(int64_t)v; break;
  case KL_I32: ((int32_t *)data)[i] = (int32_t)(int64_t)v; break;
  case KL_I64: ((int64_t *)data)[i] = (int64_t)v; break;
  case KL_U32: ((uint32_t *)data)[i] = (uint32_t)(int64_t)v; break;
  case KL_U64: ((uint64_t *)data)[i] = (uint64_t)v; break;
  default: break;
  }
}
