/* The 8-bit float storage dtypes (float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz,
 * float8e8m0): every code decoded against a table built here from the format's bit
 * fields, and float32 -> float8 against a brute-force oracle that picks the nearest
 * code (ties to the even code), with and without saturation, NaN and inf. */
#include <math.h>
#include <stdint.h>
#include <string.h>

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_all_codes),
      cmocka_unit_test(test_round_trip_all_codes),
      cmocka_unit_test(test_rounding),
      cmocka_unit_test(test_e8m0),
      cmocka_unit_test(test_dtype_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
