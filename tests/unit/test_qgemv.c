/* The int8 matrix-vector product of kiln's QLinearGemm and QLinearMatMul of a few rows
 * (isa/run_qconv.c; test_qgemm runs it in sessions): the level's qgemv at each level
 * this CPU has against a plain loop, exact, at awkward sizes (k 1, 3, 4, 5, 33, 1283;
 * n 1, 7, 8, 9, 16, 17, 65, 1000: tails of the 8-column panels and of the pairs of
 * panels), codes up to 255 against 7-bit weights up to +-64 (where AVX2's vpmaddubsw's
 * 16-bit pair sums come closest to saturating). The same for qgemm, its form for up to
 * 4 rows and 16 columns (MatMulInteger, isa/run_qgemm.c; test_quantize's
 * test_dynamic_kernels runs it in sessions): 1 to 4 rows packed tight (a read past a row's
 * k reads the next row, past the last one the buffer's end: ASan), 1 to 16 columns, the
 * compensation taken off, nothing written past the columns. And qgemm16, the wide form
 * (any 8-bit operands less their zero points, as int16 in [-255, 255]; isa/run_qgemm.c;
 * test_mmint_float runs it in sessions): the same shapes in pairs of k (an odd k's last
 * value 0), the ends of the range (255 x 255 and -255 x 255 pairs, past int16 when
 * summed), nothing written past the columns. */
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
          wp[kl_qgemv_at(i, j, groups)] = b[i * n + j];
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

static void test_qgemm(void **state) {
  (void)state;
  static const size_t ks[] = {1, 3, 4, 5, 33, 1283};
  static const size_t cs[] = {1, 7, 8, 9, 15, 16};
  for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
    for (size_t rows = 1; rows <= KL_QGEMM_ROWS; rows++)
      for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        size_t k = ks[ki], cols = cs[ci], groups = (k + 3) / 4, ldy = cols + 3;
        uint8_t *a = malloc(rows * k);
        int8_t *b = malloc(k * cols), *wp = calloc(2 * groups * 32, 1);
        int32_t *comp = malloc(cols * sizeof *comp), *want = malloc(rows * ldy * sizeof *want),
                *got = malloc(rows * ldy * sizeof *got);
        assert_true(a && b && wp && comp && want && got);
        for (size_t i = 0; i < rows * k; i++)
          a[i] = i % 3 ? (uint8_t)tu_rand_f32(&rng, 0, 256) : 255;
        for (size_t i = 0; i < k * cols; i++)
          b[i] = i % 5 == 1 ? 64 : i % 5 == 2 ? -64 : (int8_t)tu_rand_f32(&rng, -64, 64);
        for (size_t j = 0; j < cols; j++) comp[j] = (int32_t)tu_rand_f32(&rng, -1e6f, 1e6f);
        for (size_t i = 0; i < k; i++)
          for (size_t j = 0; j < cols; j++)
            wp[kl_qgemv_at(i, j, groups)] = b[i * cols + j];
        for (size_t r = 0; r < rows; r++)
          for (size_t j = 0; j < ldy; j++) {
            int32_t s = 0;
            for (size_t i = 0; i < k && j < cols; i++) s += (int32_t)a[r * k + i] * b[i * cols + j];
            want[r * ldy + j] = j < cols ? s - comp[j] : 0x5a5a5a5a;
          }
        for (int level = KL_ISA_GENERIC; level <= (int)kl_isa_level(); level++) {
          memset(got, 0x5a, rows * ldy * sizeof *got);
          kl_cpu_isa_fns((kl_isa)level)->quant->qgemm(a, k, rows, k, wp, cols, comp, got, ldy);
          for (size_t i = 0; i < rows * ldy; i++)
            if (got[i] != want[i])
              fail_msg("level %d, k %zu, %zu rows, %zu columns: y[%zu][%zu] is %d, expected %d",
                       level, k, rows, cols, i / ldy, i % ldy, got[i], want[i]);
        }
        free(a), free(b), free(wp), free(comp), free(want), free(got);
      }
}

static void test_qgemm16(void **state) {
  (void)state;
  static const size_t ks[] = {1, 2, 3, 5, 33, 1283};
  static const size_t cs[] = {1, 7, 8, 9, 15, 16};
  for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
    for (size_t rows = 1; rows <= KL_QGEMM_ROWS; rows++)
      for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        size_t k = ks[ki], cols = cs[ci], pairs = (k + 1) / 2, ldy = cols + 3, lda = 2 * pairs;
        int16_t *a = calloc(rows * lda, sizeof *a), *b = malloc(k * cols * sizeof *b);
        int16_t *wp = calloc(2 * pairs * 16, sizeof *wp); /* two panels, tight */
        int32_t *want = malloc(rows * ldy * sizeof *want), *got = malloc(rows * ldy * sizeof *got),
                *init = malloc(rows * ldy * sizeof *init);
        assert_true(a && b && wp && want && got && init);
        for (size_t r = 0; r < rows; r++)
          for (size_t i = 0; i < k; i++)
            a[r * lda + i] = i % 3 ? (int16_t)tu_rand_f32(&rng, -255, 256) : (i % 2 ? 255 : -255);
        for (size_t i = 0; i < k * cols; i++)
          b[i] = i % 5 == 1 ? 255 : i % 5 == 2 ? -255 : (int16_t)tu_rand_f32(&rng, -255, 256);
        for (size_t i = 0; i < k; i++)
          for (size_t j = 0; j < cols; j++) wp[kl_qgemm16_at(i, j, pairs)] = b[i * cols + j];
        for (size_t i = 0; i < rows * ldy; i++) init[i] = (int32_t)tu_rand_f32(&rng, -1e8f, 1e8f);
        for (size_t r = 0; r < rows; r++)
          for (size_t j = 0; j < ldy; j++) {
            int32_t s = 0;
            for (size_t i = 0; i < k && j < cols; i++)
              s += (int32_t)a[r * lda + i] * b[i * cols + j];
            want[r * ldy + j] = j < cols ? s : init[r * ldy + j];
          }
        for (int level = KL_ISA_GENERIC; level <= (int)kl_isa_level(); level++) {
          memcpy(got, init, rows * ldy * sizeof *got);
          kl_cpu_isa_fns((kl_isa)level)->quant->qgemm16(a, lda, rows, pairs, wp, wp + pairs * 16,
                                                         cols, got, ldy);
          for (size_t i = 0; i < rows * ldy; i++)
            if (got[i] != want[i])
              fail_msg("level %d, k %zu, %zu rows, %zu columns: y[%zu][%zu] is %d, expected %d",
                       level, k, rows, cols, i / ldy, i % ldy, got[i], want[i]);
        }
        free(a), free(b), free(wp), free(want), free(got), free(init);
      }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qgemv),
      cmocka_unit_test(test_qgemm),
      cmocka_unit_test(test_qgemm16),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
