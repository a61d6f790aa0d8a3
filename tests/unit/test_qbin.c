/* QLinearAdd and QLinearMul's primitives (isa_fns.h, kl_quant_fns qadd_u8 ... qmul_s8;
 * isa/run_quant.c runs them, test_fold_qdq in whole graphs): every level this CPU has
 * against the operations written out here (ref/qadd.c's), byte for byte, at lengths
 * around the AVX2 kernel's 32 codes a step, unaligned, b full or one broadcast code,
 * sums that saturate both ends, and scales that make infinities and NaNs (NaN gives
 * Y's zero point). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng = 77;

/* One output code as the reference computes it. */
static int32_t want_one(bool mul, int32_t a, float sa, int32_t za, int32_t b, float sb,
                        int32_t zb, float sc, int32_t zc, int32_t lo, int32_t hi) {
  float fa = (float)(a - za) * sa, fb = (float)(b - zb) * sb;
  float q = (mul ? fa * fb : fa + fb) / sc;
  if (q != q) q = 0.0f;
  q = q < (float)(lo - zc) ? (float)(lo - zc) : q > (float)(hi - zc) ? (float)(hi - zc) : q;
  return (int32_t)rintf(q) + zc;
}

typedef struct qb_scales {
  float sa, sb, sc;
} qb_scales;

static void check(bool mul, bool u8, size_t n, size_t bstep, const qb_scales *sc, int level) {
  const kl_quant_fns *f = kl_cpu_isa_fns((kl_isa)level)->quant;
  int32_t lo = u8 ? 0 : -128, hi = u8 ? 255 : 127;
  int32_t za = (int32_t)tu_rand_f32(&rng, (float)lo, (float)hi + 0.99f),
          zb = (int32_t)tu_rand_f32(&rng, (float)lo, (float)hi + 0.99f),
          zc = (int32_t)tu_rand_f32(&rng, (float)lo, (float)hi + 0.99f);
  uint8_t *buf = malloc(3 * (n + 1) + 3); /* +1: the operands start one byte in */
  assert_non_null(buf);
  uint8_t *a = buf + 1, *b = a + n + 1, *y = b + n + 1;
  for (size_t i = 0; i < n; i++) {
    int32_t va = (int32_t)tu_rand_f32(&rng, (float)lo, (float)hi + 0.99f);
    int32_t vb = (int32_t)tu_rand_f32(&rng, (float)lo, (float)hi + 0.99f);
    if (i % 11 == 3) va = za; /* 0 * inf: NaN where a scale is infinite */
    if (i % 13 == 5) va = hi, vb = hi;
    if (i % 17 == 7) va = lo, vb = lo;
    a[i] = (uint8_t)va, b[i] = (uint8_t)vb;
  }
  if (!n) b[0] = 0; /* read only when broadcast */
  memset(y, 0xa5, n + 1);
  if (u8)
    (mul ? f->qmul_u8 : f->qadd_u8)(a, sc->sa, za, b, sc->sb, zb, sc->sc, zc, y, n, bstep);
  else
    (mul ? f->qmul_s8 : f->qadd_s8)((const int8_t *)a, sc->sa, za, (const int8_t *)b, sc->sb,
                                    zb, sc->sc, zc, (int8_t *)y, n, bstep);
  for (size_t i = 0; i < n; i++) {
    int32_t ca = u8 ? a[i] : (int8_t)a[i], cb0 = u8 ? b[bstep * i] : (int8_t)b[bstep * i];
    int32_t w = want_one(mul, ca, sc->sa, za, cb0, sc->sb, zb, sc->sc, zc, lo, hi);
    int32_t got = u8 ? y[i] : (int8_t)y[i];
    if (got != w)
      fail_msg("level %d, %s %s, n %zu, bstep %zu, scales %g %g %g: y[%zu] is %d, expected %d "
               "(a %d za %d, b %d zb %d, zc %d)", level, mul ? "qmul" : "qadd", u8 ? "u8" : "s8",
               n, bstep, (double)sc->sa, (double)sc->sb, (double)sc->sc, i, got, w, ca, za, cb0,
               zb, zc);
  }
  assert_int_equal(y[n], 0xa5); /* nothing written past */
  free(buf);
}

static void test_qbin_levels(void **state) {
  (void)state;
  static const size_t ns[] = {0, 1, 7, 31, 32, 33, 63, 64, 65, 100, 1037};
  static const qb_scales scales[] = {
      {0.031f, 0.047f, 0.029f},  /* residual Adds: sums past both ends */
      {0.5f, 0.25f, 3.0f},       /* within range: rounding ties */
      {0.02f, 0.013f, 0.0007f},  /* products far past the range */
      {INFINITY, 0.1f, 0.05f},   /* infinities, and NaN where a is za */
      {INFINITY, -INFINITY, 1.0f}, /* inf - inf: NaN */
      {1e-30f, 1e-30f, 1e30f},   /* underflow to zeros */
  };
  for (int level = KL_ISA_GENERIC; level <= (int)kl_isa_level(); level++)
    for (int op = 0; op < 4; op++)
      for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++)
          for (size_t bstep = 0; bstep < 2; bstep++)
            check(op & 1, op < 2, ns[ni], bstep, &scales[si], level);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qbin_levels),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
