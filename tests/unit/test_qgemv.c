/* The int8 matrix-vector product of kiln's QLinearGemm and QLinearMatMul of a few rows
 * (isa/run_qconv.c; test_qgemm runs it in sessions): the level's qgemv at each level
 * this CPU has against a plain loop, exact, at awkward sizes (k 1, 3, 4, 5, 33, 1283;
 * n 1, 7, 8, 9, 16, 17, 65, 1000: tails of the 8-column panels and of the pairs of
 * panels), codes up to 255 against 7-bit weights up to +-64 (where AVX2's vpmaddubsw's
 * 16-bit pair sums come closest to saturating). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/run.h"

#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint32_t rng = 2024;

static void test_qgemv(void **state) {
  (void)state;
  static const size_t ks[] = {1, 3, 4, 5, 33, 1283};
  static const size_t ns[] = {1, 7, 8, 9, 16, 17, 65, 1000};
  for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
      size_t k = ks[ki], n = ns[ni], groups = (k + 3) / 4;
      size_t panels = (n + KL_QGEMV_PANEL - 1) / KL_QGEMV_PANEL;
      uint8_t *a = calloc(groups * 4, 1);
      int8_t *b = malloc(k * n), *wp = calloc(panels * groups * 32, 1);
      int32_t *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
      assert_true(a && b && wp && want && got);
      for (size_t i = 0; i < k; i++) a[i] = i % 3 ? (uint8_t)tu_rand_f32(&rng, 0, 256) : 255;
      for (size_t i = 0; i < k * n; i++)
        b[i] = i % 5 == 1 ? 64 : i % 5 == 2 ? -64 : (int8_t)tu_rand_f32(&rng, -64, 64);
      for (size_t j = 0; j < n; j++) {
        want[j] = 0;
        for (size_t i = 0; i < k; i++) {
          want[j] += (int32_t)a[i] * b[i * n + j];
          wp[((j / KL_QGEMV_PANEL) * groups + i / 4) * 32 + (j % KL_QGEMV_PANEL) * 4 + i % 4] =
              b[i * n + j];
        }
      }
      for (int level = KL_ISA_GENERIC; level <= (int)kl_isa_level(); level++) {
        memset(got, 0xa5, n * sizeof *got);
        kl_cpu_isa_fns((kl_isa)level)->quant->qgemv(a, k, wp, n, got);
        for (size_t j = 0; j < n; j++)
          if (got[j] != want[j])
            fail_msg("level %d, k %zu, n %zu: column %zu is %d, expected %d", level, k, n, j,
                     got[j], want[j]);
      }
      free(a), free(b), free(wp), free(want), free(got);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qgemv),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
