/* The Winograd F(2x2, 3x3) tile transforms (isa/conv_*.c) at every ISA level this CPU
 * has against the generic level, on random data at awkward channel counts (exactly
 * equal: every level does the same operations in the same order, unfused); and the
 * transforms' arithmetic against a direct 3x3 convolution of one 4x4 window, through
 * the generic level, the transformed weights G g G^T and the 16 products. The whole
 * convolution (tiling, padding, blocks, oneDNN's batched products, Bias, Sum, the
 * activation) is tested against the reference kernels in test_dnnl (test_winograd). */
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

static uint32_t rng = 99;

static float *rand_vec(size_t n) { return tu_rand_vec(&rng, n, -2, 2); }

static void assert_same(const float *a, const float *b, size_t n, const char *what, size_t c,
                        int level) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i] && !(isnan(a[i]) && isnan(b[i])))
      fail_msg("%s, %zu channels, at %s: element %zu is %.9g, generic %.9g", what, c,
               kl_isa_level_name((kl_isa)level), i, (double)a[i], (double)b[i]);
}

static void test_tiles_match_generic(void **state) {
  (void)state;
  static const size_t counts[] = {1, 7, 8, 9, 17, 33, 64};
  kl_isa top = kl_isa_supported(kl_isa_features());
  const kl_conv_fns *gen = kl_cpu_isa_fns(KL_ISA_GENERIC)->conv;
  for (size_t ci = 0; ci < TU_LEN(counts); ci++) {
    size_t c = counts[ci], stride = c + 5; /* planes not adjacent */
    float *pix[16], *zeros = calloc(c, sizeof(float));
    const float *d[16];
    for (int k = 0; k < 16; k++) d[k] = pix[k] = rand_vec(c);
    d[3] = d[12] = zeros; /* padding taps */
    float *want = calloc(16 * stride, sizeof(float)), *got = calloc(16 * stride, sizeof(float));
    gen->in_tile(d, c, want, stride);
    float *m = rand_vec(16 * stride), *bias = rand_vec(c), *sum[4], *yw[4], *yg[4];
    for (int q = 0; q < 4; q++) {
      sum[q] = rand_vec(c);
      yw[q] = calloc(c, sizeof(float));
      yg[q] = calloc(c, sizeof(float));
    }
    for (int level = KL_ISA_GENERIC; level <= (int)top; level++) {
      const kl_conv_fns *f = kl_cpu_isa_fns((kl_isa)level)->conv;
      memset(got, 0, sizeof(float) * 16 * stride);
      f->in_tile(d, c, got, stride);
      assert_same(got, want, 16 * stride, "in_tile", c, level);
      /* out_tile: with bias and Sum, one output pixel outside Y (NULL); then bare */
      for (int form = 0; form < 2; form++) {
        float *ow[4] = {yw[0], yw[1], form ? yw[2] : NULL, yw[3]};
        float *og[4] = {yg[0], yg[1], form ? yg[2] : NULL, yg[3]};
        const float *const *s = form ? NULL : (const float *const *)sum;
        gen->out_tile(m, stride, c, form ? NULL : bias, ow, s);
        f->out_tile(m, stride, c, form ? NULL : bias, og, s);
        for (int q = 0; q < 4; q++) assert_same(yg[q], yw[q], c, "out_tile", c, level);
      }
    }
    for (int k = 0; k < 16; k++) free(pix[k]);
    for (int q = 0; q < 4; q++) free(sum[q]), free(yw[q]), free(yg[q]);
    free(zeros), free(want), free(got), free(m), free(bias);
  }
}

/* One channel in, one out: the 2x2 outputs of a 3x3 kernel over a 4x4 window. */
static void test_tile_math(void **state) {
  (void)state;
  static const double g_mat[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  const kl_conv_fns *gen = kl_cpu_isa_fns(KL_ISA_GENERIC)->conv;
  for (int trial = 0; trial < 20; trial++) {
    float win[16], w[9];
    for (int i = 0; i < 16; i++) win[i] = tu_rand_f32(&rng, -3, 3);
    for (int i = 0; i < 9; i++) w[i] = tu_rand_f32(&rng, -1, 1);
    const float *d[16];
    for (int i = 0; i < 16; i++) d[i] = &win[i];
    float v[16], u[16], m[16], y[4], bias = tu_rand_f32(&rng, -1, 1);
    gen->in_tile(d, 1, v, 1);
    double gw[4][3];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 3; j++)
        gw[i][j] = g_mat[i][0] * w[j] + g_mat[i][1] * w[3 + j] + g_mat[i][2] * w[6 + j];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++)
        u[4 * i + j] = (float)(gw[i][0] * g_mat[j][0] + gw[i][1] * g_mat[j][1] +
                               gw[i][2] * g_mat[j][2]);
    for (int x = 0; x < 16; x++) m[x] = v[x] * u[x];
    float *out[4] = {&y[0], &y[1], &y[2], &y[3]};
    gen->out_tile(m, 1, 1, &bias, out, NULL);
    for (int r = 0; r < 2; r++)
      for (int s = 0; s < 2; s++) {
        double direct = bias;
        for (int a = 0; a < 3; a++)
          for (int b = 0; b < 3; b++) direct += (double)win[(r + a) * 4 + s + b] * w[a * 3 + b];
        if (fabs(y[2 * r + s] - direct) > 1e-5 * (1 + fabs(direct)))
          fail_msg("trial %d: output (%d, %d) is %.8g, the direct convolution %.8g", trial, r,
                   s, (double)y[2 * r + s], direct);
      }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tiles_match_generic),
      cmocka_unit_test(test_tile_math),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
