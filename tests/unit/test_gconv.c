/* The grouped convolution primitive (kl_conv_fns.gconv, isa/conv_*.c) at every ISA level
 * this CPU has against the generic level, on random data at awkward sizes: 1 to 8
 * channels in a group, 8 and 16 out, 1 to 25 taps, runs of 1 to 21 pixels (a full
 * block of 8, the shorter ones, which go several groups at once), an input stride
 * wider than the pixel, some taps reading zeros, with and without a bias. The levels
 * fuse multiply-adds where the generic one rounds each product: equal within a float
 * ulp or so of the sum of magnitudes. The whole convolution (windows, padding, the
 * patches at a row's ends, strides, dilations, Bias, the activation, threads) is tested
 * against the reference kernels in test_dnnl (test_grouped_convs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng = 1234;

static float *rand_vec(size_t n) { return tu_rand_vec(&rng, n, -2, 2); }

typedef struct gc_case {
  size_t groups, ci, co, k, n, xpad; /* xpad: floats between pixels past the C channels */
  bool bias;
} gc_case;

static void run_case(const gc_case *t) {
  size_t c = t->groups * t->ci, k_out = t->groups * t->co, xstep = c + t->xpad;
  size_t ystride = k_out + 3, span = (t->n + 1) * xstep; /* each tap's pixels */
  float *x = rand_vec(t->k * span), *zeros = calloc(span, sizeof(float));
  float *w = rand_vec(t->groups * t->k * t->ci * t->co), *b = t->bias ? rand_vec(k_out) : NULL;
  float *mag = malloc(sizeof(float) * t->groups * t->k * t->ci * t->co);
  assert_non_null(zeros);
  assert_non_null(mag);
  const float *taps[32], *mtaps[32];
  float *xa = malloc(sizeof(float) * t->k * span);
  assert_non_null(xa);
  for (size_t i = 0; i < t->k * span; i++) xa[i] = fabsf(x[i]);
  for (size_t i = 0; i < t->groups * t->k * t->ci * t->co; i++) mag[i] = fabsf(w[i]);
  for (size_t q = 0; q < t->k; q++) {
    bool pad = q % 4 == 3; /* every fourth tap in the padding */
    taps[q] = pad ? zeros : x + q * span;
    mtaps[q] = pad ? zeros : xa + q * span;
  }
  size_t ny = t->n * ystride;
  float *want = calloc(ny, sizeof(float)), *bound = calloc(ny, sizeof(float));
  float *got = calloc(ny, sizeof(float));
  assert_non_null(want);
  assert_non_null(bound);
  assert_non_null(got);
  const kl_conv_fns *gen = kl_cpu_isa_fns(KL_ISA_GENERIC)->conv;
  kl_gconv d = {t->groups, t->ci, t->co, t->k, w, b}, m = {t->groups, t->ci, t->co, t->k, mag, NULL};
  gen->gconv(&d, taps, xstep, t->n, want, ystride);
  gen->gconv(&m, mtaps, xstep, t->n, bound, ystride); /* the sums of magnitudes */
  kl_isa top = kl_isa_supported(kl_isa_features());
  for (int level = KL_ISA_GENERIC; level <= (int)top; level++) {
    const kl_conv_fns *f = kl_cpu_isa_fns((kl_isa)level)->conv;
    for (size_t i = 0; i < ny; i++) got[i] = -7.0f; /* the gaps between pixels stay */
    f->gconv(&d, taps, xstep, t->n, got, ystride);
    for (size_t p = 0; p < t->n; p++)
      for (size_t i = 0; i < ystride; i++) {
        size_t at = p * ystride + i;
        if (i >= k_out) {
          if (got[at] != -7.0f)
            fail_msg("groups %zu, %zu -> %zu, %zu taps, %zu pixels, at %s: wrote past "
                     "pixel %zu's outputs", t->groups, t->ci, t->co, t->k, t->n,
                     kl_isa_level_name((kl_isa)level), p);
          continue;
        }
        double tol = 1e-6 * (bound[at] + (b ? fabs((double)b[i]) : 0) + 1);
        if (!(fabs((double)got[at] - want[at]) <= tol))
          fail_msg("groups %zu, %zu -> %zu, %zu taps, %zu pixels%s, at %s: pixel %zu output "
                   "%zu is %.9g, generic %.9g", t->groups, t->ci, t->co, t->k, t->n,
                   b ? ", bias" : "", kl_isa_level_name((kl_isa)level), p, i,
                   (double)got[at], (double)want[at]);
      }
  }
  free(x);
  free(xa);
  free(zeros);
  free(w);
  free(b);
  free(mag);
  free(want);
  free(bound);
  free(got);
}

static void test_gconv_matches_generic(void **state) {
  (void)state;
  static const gc_case cases[] = {
      {6, 8, 8, 9, 21, 0, true},   /* RegNet's shape: 2 blocks of 8 and 5 more */
      {13, 8, 8, 9, 8, 5, false},  /* one full block, pixels xstep apart */
      {5, 8, 8, 9, 1, 0, true},    /* one pixel: 4 groups at once and one more */
      {3, 8, 8, 9, 2, 3, true},    /* two: 2 groups at once and one more */
      {7, 8, 8, 9, 3, 0, false},   /* three */
      {2, 3, 16, 25, 11, 1, true}, /* 5x5, 3 in and 16 out a group */
      {4, 1, 8, 1, 17, 2, true},   /* 1 tap, 1 channel in */
      {9, 5, 16, 4, 7, 0, false},  /* 2x2 taps, 5 in */
  };
  for (size_t i = 0; i < TU_LEN(cases); i++) run_case(&cases[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gconv_matches_generic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
