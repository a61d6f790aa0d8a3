#include "ir/ir.h"

#include <math.h>
#include <string.h>

size_t kl_dtype_size(kl_dtype t) {
  switch (t) {
  case KL_F32: case KL_I32: case KL_U32: return 4;
  case KL_U8: case KL_I8: case KL_BOOL: return 1;
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
  }
  return "unknown";
}

bool kl_dtype_valid(int t) {
  return t != KL_UNDEFINED && t != KL_STRING && kl_dtype_size((kl_dtype)t) != 0;
}

bool kl_dtype_is_float(kl_dtype t) {
  return t == KL_F32 || t == KL_F64 || t == KL_F16 || t == KL_BF16;
}

bool kl_dtype_is_int(kl_dtype t) {
  switch (t) {
  case KL_U8: case KL_I8: case KL_U16: case KL_I16: case KL_I32: case KL_I64:
  case KL_U32: case KL_U64: return true;
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

double kl_load_f64(const void *data, kl_dtype t, size_t i) {
  switch (t) {
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
