/* The low-precision storage dtypes. The 8-bit floats (float8e4m3fn, float8e4m3fnuz,
 * float8e5m2, float8e5m2fnuz, float8e8m0): every code decoded against a table built here
 * from the format's bit fields, and float32 -> float8 against a brute-force oracle that
 * picks the nearest code (ties to the even code), with and without saturation, NaN and
 * inf. float4e2m1 likewise. The packed types (int4, uint4, int2, uint2, float4e2m1):
 * packing with odd counts, wrapping, and TensorProto reading and writing (raw_data and
 * int32_data, sizes that do not match the dims refused). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "import/tensorfile.h"
#include "ir/ir.h"

#include "testutil.h"

typedef struct fmt {
  kl_dtype t;
  int ebits, mbits, bias;
  bool uz;     /* 0x80 is NaN, no -0, no inf */
  bool ieee;   /* all-ones exponent is inf / NaN (e5m2) */
} fmt;

static const fmt FORMATS[] = {
    {KL_F8E4M3FN, 4, 3, 7, false, false},
    {KL_F8E4M3FNUZ, 4, 3, 8, true, false},
    {KL_F8E5M2, 5, 2, 15, false, true},
    {KL_F8E5M2FNUZ, 5, 2, 16, true, false},
};

/* The value of code b in format f, from its fields; NaN for the NaN codes. */
static double decode(const fmt *f, int b) {
  int s = b >> 7, e = (b >> f->mbits) & ((1 << f->ebits) - 1), m = b & ((1 << f->mbits) - 1);
  int emax = (1 << f->ebits) - 1;
  if (f->uz && b == 0x80) return NAN;
  if (f->ieee && e == emax) return m ? NAN : (s ? -INFINITY : INFINITY);
  if (!f->uz && !f->ieee && e == emax && m == (1 << f->mbits) - 1) return NAN; /* e4m3fn */
  double frac = (double)m / (double)(1 << f->mbits);
  double v = e == 0 ? frac * pow(2.0, 1 - f->bias) : (1.0 + frac) * pow(2.0, e - f->bias);
  return s ? -v : v;
}

static int max_code(const fmt *f) {
  int best = 0;
  for (int b = 0; b < 128; b++)
    if (isfinite(decode(f, b)) && decode(f, b) > decode(f, best)) best = b;
  return best;
}

static bool is_nan_code(const fmt *f, uint8_t b) { return isnan(decode(f, b)); }

/* float32 -> f by search: NaN for NaN; saturate clamps (inf too); otherwise the nearest
 * code, ties to an even code; past the largest finite value plus half its step: inf for
 * e5m2, NaN for the others. Returns -1 for "a NaN code". */
static int oracle(const fmt *f, float x, bool saturate) {
  if (isnan(x)) return -1;
  int mc = max_code(f);
  double maxv = decode(f, mc), a = fabs((double)x);
  int sign = signbit(x) ? 0x80 : 0;
  if (saturate && a > maxv) return sign | mc;
  double thr = maxv + (maxv - decode(f, mc - 1)) / 2;
  if (a > thr || (a == thr && (mc & 1))) return f->ieee ? (sign | 0x7c) : -1;
  int best = 0;
  double bd = INFINITY;
  for (int b = 0; b <= mc; b++) {
    double d = fabs(decode(f, b) - a);
    if (d < bd || (d == bd && !(b & 1))) { bd = d; best = b; }
  }
  if (best == 0 && f->uz) return 0;
  return sign | best;
}

static void check_one(const fmt *f, float x, bool saturate) {
  int want = oracle(f, x, saturate);
  uint8_t got = kl_f32_to_f8(x, f->t, saturate);
  if (want < 0) {
    if (!is_nan_code(f, got))
      fail_msg("%s(%.9g, saturate %d) = 0x%02x, want NaN", kl_dtype_name(f->t), (double)x,
               saturate, got);
  } else if (got != want) {
    fail_msg("%s(%.9g, saturate %d) = 0x%02x, want 0x%02x", kl_dtype_name(f->t), (double)x,
             saturate, got, want);
  }
}

static void test_decode_all_codes(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof FORMATS / sizeof FORMATS[0]; k++) {
    const fmt *f = &FORMATS[k];
    for (int b = 0; b < 256; b++) {
      double want = decode(f, b), got = kl_f8_to_f32((uint8_t)b, f->t);
      if (isnan(want)) {
        assert_true(isnan(got));
        continue;
      }
      if (got != want || signbit(got) != signbit(want))
        fail_msg("%s 0x%02x -> %g, want %g", kl_dtype_name(f->t), b, got, want);
    }
  }
  assert_true(kl_f8_to_f32(0x7e, KL_F8E4M3FN) == 448.0f);
  assert_true(kl_f8_to_f32(0x7f, KL_F8E4M3FNUZ) == 240.0f);
  assert_true(kl_f8_to_f32(0x7b, KL_F8E5M2) == 57344.0f);
  assert_true(kl_f8_to_f32(0x7f, KL_F8E5M2FNUZ) == 57344.0f);
}

static void test_round_trip_all_codes(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof FORMATS / sizeof FORMATS[0]; k++) {
    const fmt *f = &FORMATS[k];
    for (int b = 0; b < 256; b++) {
      if (is_nan_code(f, (uint8_t)b)) continue;
      float v = kl_f8_to_f32((uint8_t)b, f->t);
      for (int sat = 0; sat < 2; sat++) {
        uint8_t back = kl_f32_to_f8(v, f->t, sat);
        if (isinf(v) && sat) continue; /* saturates: checked below */
        if (back != b) fail_msg("%s 0x%02x -> %g -> 0x%02x", kl_dtype_name(f->t), b, v, back);
      }
    }
  }
}

/* Every code's value, the midpoints between neighbours (ties), just above and below them,
 * beyond the largest value, tiny values, NaN and inf, each with saturate on and off. */
static void test_rounding(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof FORMATS / sizeof FORMATS[0]; k++) {
    const fmt *f = &FORMATS[k];
    int mc = max_code(f);
    for (int b = 0; b <= mc; b++) {
      double v = decode(f, b), next = b < mc ? decode(f, b + 1) : 2 * v;
      double mid = (v + next) / 2;
      float xs[] = {(float)v, (float)mid, nextafterf((float)mid, INFINITY),
                    nextafterf((float)mid, 0), (float)(v + (next - v) / 4),
                    (float)(v + 3 * (next - v) / 4)};
      for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++)
        for (int sat = 0; sat < 2; sat++) {
          check_one(f, xs[i], sat);
          check_one(f, -xs[i], sat);
        }
    }
    float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e30f, -1e30f, INFINITY, -INFINITY,
                        NAN, 65504.0f, 3.0e38f, 1e-45f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
      for (int sat = 0; sat < 2; sat++) check_one(f, specials[i], sat);
  }
  /* spot values from the ONNX Cast spec's table */
  assert_int_equal(kl_f32_to_f8(INFINITY, KL_F8E4M3FN, true), 0x7e);
  assert_int_equal(kl_f32_to_f8(-INFINITY, KL_F8E5M2, true), 0xfb);
  assert_int_equal(kl_f32_to_f8(INFINITY, KL_F8E5M2, false), 0x7c);
  assert_true(is_nan_code(&FORMATS[0], kl_f32_to_f8(1000.0f, KL_F8E4M3FN, false)));
  assert_int_equal(kl_f32_to_f8(1000.0f, KL_F8E4M3FN, true), 0x7e);
  assert_int_equal(kl_f32_to_f8(-0.0f, KL_F8E4M3FNUZ, true), 0x00);
  assert_int_equal(kl_f32_to_f8(-0.0f, KL_F8E4M3FN, true), 0x80);
  assert_int_equal(kl_f32_to_f8(INFINITY, KL_F8E5M2FNUZ, false), 0x80);
}

static void test_e8m0(void **state) {
  (void)state;
  for (int b = 0; b < 255; b++)
    assert_true(kl_f8_to_f32((uint8_t)b, KL_F8E8M0) == (float)ldexp(1.0, b - 127));
  assert_true(isnan(kl_f8_to_f32(0xff, KL_F8E8M0)));
  /* powers of two are exact in every mode */
  for (int m = 0; m < 3; m++) {
    assert_int_equal(kl_f32_to_e8m0(1.0f, true, (kl_round_mode)m), 127);
    assert_int_equal(kl_f32_to_e8m0(0.25f, true, (kl_round_mode)m), 125);
  }
  /* 3 = 1.5 * 2: up -> 4, down -> 2, nearest (a tie) -> 4 */
  assert_int_equal(kl_f32_to_e8m0(3.0f, true, KL_ROUND_UP), 129);
  assert_int_equal(kl_f32_to_e8m0(3.0f, true, KL_ROUND_DOWN), 128);
  assert_int_equal(kl_f32_to_e8m0(3.0f, true, KL_ROUND_NEAREST), 129);
  assert_int_equal(kl_f32_to_e8m0(2.5f, true, KL_ROUND_NEAREST), 128);
  assert_int_equal(kl_f32_to_e8m0(2.5f, true, KL_ROUND_UP), 129);
  assert_int_equal(kl_f32_to_e8m0(NAN, true, KL_ROUND_UP), 0xff);
  assert_int_equal(kl_f32_to_e8m0(INFINITY, true, KL_ROUND_UP), 0xff);
  /* the largest float rounds up to NaN unless saturating */
  assert_int_equal(kl_f32_to_e8m0(3.0e38f, true, KL_ROUND_UP), 0xfe);
  assert_int_equal(kl_f32_to_e8m0(3.0e38f, false, KL_ROUND_UP), 0xff);
  /* the sign is dropped */
  assert_int_equal(kl_f32_to_e8m0(-4.0f, true, KL_ROUND_UP), 129);
}

static void test_dtype_table(void **state) {
  (void)state;
  kl_dtype ts[] = {KL_F8E4M3FN, KL_F8E4M3FNUZ, KL_F8E5M2, KL_F8E5M2FNUZ, KL_F8E8M0};
  const char *names[] = {"float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz",
                         "float8e8m0"};
  for (int i = 0; i < 5; i++) {
    assert_int_equal(kl_dtype_size(ts[i]), 1);
    assert_string_equal(kl_dtype_name(ts[i]), names[i]);
    assert_true(kl_dtype_valid((int)ts[i]));
    assert_true(kl_dtype_is_f8(ts[i]));
    assert_false(kl_dtype_is_float(ts[i]));
  }
  uint8_t buf[2] = {0};
  kl_store_f64(buf, KL_F8E4M3FN, 1, 1e6); /* stores saturate */
  assert_int_equal(buf[1], 0x7e);
  assert_true(kl_load_f64(buf, KL_F8E4M3FN, 1) == 448.0);
}

/* float4e2m1: S.EE.M, bias 1: 0, 0.5, 1, 1.5, 2, 3, 4, 6 */
static void test_float4(void **state) {
  (void)state;
  const double mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int b = 0; b < 16; b++) {
    double want = (b & 8) ? -mags[b & 7] : mags[b & 7];
    float got = kl_f8_to_f32((uint8_t)b, KL_F4E2M1);
    assert_true(got == want && !signbit(got) == !signbit(want));
    assert_int_equal(kl_f32_to_f8(got, KL_F4E2M1, false), b); /* every code round-trips */
  }
  /* nearest, ties to even: 0.25 -> 0, 0.75 -> 1 (code 2), 1.25 -> 1, 1.75 -> 2, 2.5 -> 2,
   * 3.5 -> 4, 5 -> 4; no inf or NaN: saturate always, NaN -> -0 as ONNX's reference */
  const float xs[] = {0.25f, 0.26f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.01f, 7.0f,
                      1e6f, INFINITY, -INFINITY, -3.5f, -0.1f};
  const int want[] = {0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 7, 7, 15, 14, 8};
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++)
    for (int sat = 0; sat < 2; sat++)
      if (kl_f32_to_f8(xs[i], KL_F4E2M1, sat) != want[i])
        fail_msg("float4e2m1(%g) = %d, want %d", (double)xs[i],
                 kl_f32_to_f8(xs[i], KL_F4E2M1, sat), want[i]);
  assert_int_equal(kl_f32_to_f8(NAN, KL_F4E2M1, true), 8);
}

static void test_pack_odd_counts(void **state) {
  (void)state;
  assert_int_equal(kl_dtype_file_bits(KL_I4), 4);
  assert_int_equal(kl_dtype_file_bits(KL_U2), 2);
  assert_int_equal(kl_dtype_file_bits(KL_F32), 32);
  assert_int_equal(kl_dtype_file_bytes(KL_I4, 5), 3);
  assert_int_equal(kl_dtype_file_bytes(KL_F4E2M1, 0), 0);
  assert_int_equal(kl_dtype_file_bytes(KL_U2, 7), 2);
  assert_int_equal(kl_dtype_file_bytes(KL_I2, 9), 3);
  assert_int_equal(kl_dtype_file_bytes(KL_F32, 3), 12);
  /* int4: 1, -2, 7, -8, 3 -> 0xe1, 0x87, 0x03 (first element in the low nibble) */
  int8_t i4[5] = {1, -2, 7, -8, 3}, back4[5];
  uint8_t packed[4] = {0xff, 0xff, 0xff, 0xff};
  kl_dtype_pack(KL_I4, (const uint8_t *)i4, 5, packed);
  assert_int_equal(packed[0], 0xe1);
  assert_int_equal(packed[1], 0x87);
  assert_int_equal(packed[2], 0x03); /* the unused high nibble is zero */
  assert_int_equal(packed[3], 0xff); /* nothing written past the packed size */
  kl_dtype_unpack(KL_I4, packed, 5, (uint8_t *)back4);
  assert_memory_equal(back4, i4, 5);
  /* uint4 reads the same bytes unsigned */
  uint8_t u4[5];
  kl_dtype_unpack(KL_U4, packed, 5, u4);
  const uint8_t u4_want[5] = {1, 14, 7, 8, 3};
  assert_memory_equal(u4, u4_want, 5);
  /* int2: 1, -1, -2, 0, 1, -2, 1 -> 0b00_10_11_01, 0b00_01_10_01 */
  int8_t i2[7] = {1, -1, -2, 0, 1, -2, 1}, back2[7];
  uint8_t p2[2];
  kl_dtype_pack(KL_I2, (const uint8_t *)i2, 7, p2);
  assert_int_equal(p2[0], 0x2d);
  assert_int_equal(p2[1], 0x19);
  kl_dtype_unpack(KL_I2, p2, 7, (uint8_t *)back2);
  assert_memory_equal(back2, i2, 7);
  uint8_t u2[7];
  kl_dtype_unpack(KL_U2, p2, 7, u2);
  const uint8_t u2_want[7] = {1, 3, 2, 0, 1, 2, 1};
  assert_memory_equal(u2, u2_want, 7);
  /* every int4 value and every uint2 value round-trips, at every position */
  for (int n = 1; n <= 9; n++) {
    int8_t v[9], w[9];
    uint8_t p[5];
    for (int k = 0; k < 16; k++) {
      for (int j = 0; j < n; j++) v[j] = (int8_t)(((k + j) & 15) - 8);
      kl_dtype_pack(KL_I4, (const uint8_t *)v, (size_t)n, p);
      kl_dtype_unpack(KL_I4, p, (size_t)n, (uint8_t *)w);
      assert_memory_equal(v, w, (size_t)n);
    }
  }
  /* stores wrap to the width, as NumPy and ml_dtypes do */
  int8_t s[4];
  kl_store_small_int(s, KL_I4, 0, 8);
  kl_store_small_int(s, KL_I4, 1, -9);
  kl_store_small_int(s, KL_I2, 2, 2);
  kl_store_small_int(s, KL_U2, 3, -1);
  assert_int_equal(s[0], -8);
  assert_int_equal(s[1], 7);
  assert_int_equal(s[2], -2);
  assert_int_equal((uint8_t)s[3], 3);
  assert_true(kl_load_f64(s, KL_I4, 1) == 7.0);
  /* what the C API takes: one element a byte, in range */
  const uint8_t in4[4] = {0x07, 0xf8, 0xff, 0x08}; /* 7, -8, -1, then 8: not an int4 */
  assert_int_equal(kl_dtype_find_bad_small(KL_I4, in4, 4), 3);
  assert_int_equal(kl_dtype_find_bad_small(KL_U4, in4, 4), 1);
  assert_int_equal(kl_dtype_find_bad_small(KL_I2, in4, 4), 0);
  const uint8_t in2[3] = {0, 3, 4};
  assert_int_equal(kl_dtype_find_bad_small(KL_U2, in2, 3), 2);
  assert_int_equal(kl_dtype_find_bad_small(KL_F4E2M1, in4, 4), 1);
  assert_int_equal(kl_dtype_find_bad_small(KL_U8, in4, 4), 4);
  assert_int_equal(kl_load_i64(s, KL_I2, 2), -2);
}

/* A TensorProto by hand: dims (field 1), data_type (2), then raw_data (9) or packed
 * int32_data (5). */
static size_t tensor_pb(uint8_t *buf, int dtype, int dim, const uint8_t *raw, size_t raw_len,
                        const int *i32, size_t n_i32) {
  size_t k = 0;
  buf[k++] = 0x08;
  buf[k++] = (uint8_t)dim;
  buf[k++] = 0x10;
  buf[k++] = (uint8_t)dtype;
  if (raw) {
    buf[k++] = 0x4a;
    buf[k++] = (uint8_t)raw_len;
    memcpy(buf + k, raw, raw_len);
    k += raw_len;
  } else {
    buf[k++] = 0x2a;
    size_t len_at = k++;
    for (size_t i = 0; i < n_i32; i++) { /* values < 2^14 */
      if (i32[i] < 128) buf[k++] = (uint8_t)i32[i];
      else { buf[k++] = (uint8_t)(0x80 | (i32[i] & 0x7f)); buf[k++] = (uint8_t)(i32[i] >> 7); }
    }
    buf[len_at] = (uint8_t)(k - len_at - 1);
  }
  return k;
}

static void parse_fails(const uint8_t *buf, size_t len, const char *want) {
  kl_tensor t;
  kl_err e;
  kl_err_clear(&e);
  char *name = NULL;
  assert_int_equal(kl_tensorpb_parse(buf, len, 1 << 20, &t, &name, &e), KILN_ERR_INVALID_MODEL);
  if (!strstr(e.msg, want)) fail_msg("message \"%s\" lacks \"%s\"", e.msg, want);
  free(name);
}

static void test_tensorproto(void **state) {
  (void)state;
  uint8_t buf[64];
  kl_tensor t;
  kl_err e;
  char *name = NULL;
  /* five int4 in three bytes of raw_data */
  const uint8_t raw[3] = {0xe1, 0x87, 0x03};
  size_t len = tensor_pb(buf, KL_I4, 5, raw, 3, NULL, 0);
  kl_err_clear(&e);
  tu_assert_status(kl_tensorpb_parse(buf, len, 1 << 20, &t, &name, &e), KILN_OK, e.msg, NULL);
  assert_int_equal(t.dtype, KL_I4);
  assert_int_equal(t.dims[0], 5);
  const int8_t want[5] = {1, -2, 7, -8, 3};
  assert_memory_equal(t.data, want, 5);
  free(t.data);
  free(name);
  name = NULL;
  /* the same as int32_data, one packed byte an int32 */
  const int i32[3] = {0xe1, 0x87, 0x03};
  len = tensor_pb(buf, KL_I4, 5, NULL, 0, i32, 3);
  tu_assert_status(kl_tensorpb_parse(buf, len, 1 << 20, &t, &name, &e), KILN_OK, e.msg, NULL);
  assert_memory_equal(t.data, want, 5);
  free(t.data);
  free(name);
  /* float8 in int32_data: one code an int32 */
  const int f8[2] = {0x38, 0xb8}; /* e4m3fn 1.0, -1.0 */
  len = tensor_pb(buf, KL_F8E4M3FN, 2, NULL, 0, f8, 2);
  name = NULL;
  tu_assert_status(kl_tensorpb_parse(buf, len, 1 << 20, &t, &name, &e), KILN_OK, e.msg, NULL);
  assert_true(kl_load_f64(t.data, KL_F8E4M3FN, 0) == 1.0);
  assert_true(kl_load_f64(t.data, KL_F8E4M3FN, 1) == -1.0);
  free(t.data);
  free(name);
  /* sizes that do not match the dims */
  len = tensor_pb(buf, KL_I4, 5, raw, 2, NULL, 0);
  parse_fails(buf, len, "raw_data has 2 bytes, expected 3");
  const uint8_t five[5] = {0};
  len = tensor_pb(buf, KL_U4, 5, five, 5, NULL, 0);
  parse_fails(buf, len, "raw_data has 5 bytes, expected 3");
  len = tensor_pb(buf, KL_U2, 9, five, 2, NULL, 0);
  parse_fails(buf, len, "raw_data has 2 bytes, expected 3");
  const int unpacked[5] = {1, 2, 3, 4, 5};
  len = tensor_pb(buf, KL_I4, 5, NULL, 0, unpacked, 5);
  parse_fails(buf, len, "int32_data has 5 elements, expected 3");
  const int big[3] = {300, 0, 0};
  len = tensor_pb(buf, KL_I4, 5, NULL, 0, big, 3);
  parse_fails(buf, len, "not a packed byte of int4");
  const int f8big[2] = {256, 0};
  len = tensor_pb(buf, KL_F8E5M2, 2, NULL, 0, f8big, 2);
  parse_fails(buf, len, "out of range for float8e5m2");
}

/* kl_tensorpb_write packs; reading it back unpacks: odd counts of each packed type. */
static void test_tensorproto_round_trip(void **state) {
  const tu_tmpdir *d = *state;
  const kl_dtype ts[] = {KL_I4, KL_U4, KL_F4E2M1, KL_I2, KL_U2, KL_F8E5M2};
  const int8_t vals[7] = {1, -2, 0, -1, 1, 0, -2};
  const uint8_t uvals[7] = {1, 3, 0, 2, 15 & 3, 1, 3};
  const uint8_t f4[7] = {1, 15, 8, 7, 0, 9, 6};
  for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
    uint8_t data[7];
    memcpy(data, ts[k] == KL_I4 || ts[k] == KL_I2 ? (const void *)vals
                 : ts[k] == KL_F4E2M1 || ts[k] == KL_F8E5M2 ? (const void *)f4
                                                             : (const void *)uvals, 7);
    kl_tensor t = {.dtype = ts[k], .rank = 1, .dims = {7}, .data = data};
    kl_err e;
    kl_err_clear(&e);
    tu_assert_status(kl_tensorpb_write(d->path, &t, "x", &e), KILN_OK, e.msg, NULL);
    kl_tensor r;
    char *name = NULL;
    tu_assert_status(kl_tensorfile_read(d->path, 1 << 20, &r, &name, &e), KILN_OK, e.msg, NULL);
    assert_int_equal(r.dtype, ts[k]);
    assert_int_equal(r.dims[0], 7);
    assert_memory_equal(r.data, data, 7);
    free(r.data);
    free(name);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_all_codes),
      cmocka_unit_test(test_round_trip_all_codes),
      cmocka_unit_test(test_rounding),
      cmocka_unit_test(test_e8m0),
      cmocka_unit_test(test_dtype_table),
      cmocka_unit_test(test_float4),
      cmocka_unit_test(test_pack_odd_counts),
      cmocka_unit_test(test_tensorproto),
      TU_TMPDIR_TEST(test_tensorproto_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
