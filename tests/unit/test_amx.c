/* kiln's bfloat16 matrix product on AMX tiles (src/backends/cpu/isa/amx_bf16.c,
 * run_amx.c): the weights packed from either layout, x float32 or bfloat16, y float32
 * or bfloat16, against double sums of the bf16-rounded operands and the epilogue's
 * terms (alpha, broadcast and per-row addends, a Sum that is y's own elements or shares
 * its buffer shifted, activations), at sizes around the tiles' 16 and 32 rows, 32-column
 * panels and 32-element steps, on one thread and two. Random data, never zeros. On a
 * CPU without AMX (or with KILN_ISA below amx) there is nothing to run: the test says so
 * and passes, and tools/test.sh runs it at the amx level wherever the CPU has it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"

#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 777;

static float *rand_floats(size_t n, float span) { return tu_rand_nonzero(&rng, n, span); }

static double bf(float v) {
  uint32_t u = (uint32_t)kl_f32_to_bf16(v) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

typedef struct amx_case {
  const char *what;
  int64_t m, k, n;
  bool nk, x_bf16, y_bf16;
  float alpha, add_scale;
  int add;  /* 0 none, 1 [N], 2 [M, 1], 3 a scalar */
  int sum;  /* 0 none, 1 [M, N], 2 [M, N] in y (in place), 3 [N], 4 y's buffer 7 ahead */
  bool has_act;
  kl_act act;
  int threads;
} amx_case;

static double act_ref(const kl_act *a, double v) {
  switch (a->kind) {
  case KL_ACT_RELU: return v > 0 ? v : 0;
  case KL_ACT_TANH: return tanh(v);
  case KL_ACT_GELU_ERF: return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
  case KL_ACT_GELU_TANH:
    return 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  default: return v;
  }
}

static void run_case(const kl_amx_fns *amx, const amx_case *t) {
  const kl_isa_fns *f = kl_cpu_isa_fns(KL_ISA_AMX);
  int64_t m = t->m, k = t->k, n = t->n;
  float *x = rand_floats((size_t)(m * k), 1.0f), *w = rand_floats((size_t)(k * n), 0.5f);
  uint16_t *xb = malloc(sizeof(uint16_t) * (size_t)(m * k));
  assert_non_null(xb);
  for (int64_t i = 0; i < m * k; i++) xb[i] = kl_f32_to_bf16(x[i]);
  uint16_t *wp = malloc(kl_amx_weights_bytes(k, n));
  uint16_t *scratch = malloc(kl_amx_scratch_bytes(m, k));
  assert_non_null(wp);
  assert_non_null(scratch);
  kl_amx_pack_weights(amx, w, t->nk, k, n, wp);
  int64_t add_len = t->add == 1 ? n : t->add == 2 ? m : 1;
  float *add = t->add ? rand_floats((size_t)add_len, 2.0f) : NULL;
  float *sum = t->sum ? rand_floats((size_t)(t->sum == 3 ? n : m * n), 2.0f) : NULL;
  /* y with room for a guard and for a Sum 7 floats ahead in its buffer */
  size_t ysize = t->y_bf16 ? sizeof(uint16_t) : sizeof(float);
  char *ybuf = calloc((size_t)(m * n + 16), sizeof(float));
  assert_non_null(ybuf);
  float *sum_arg = sum;
  if (t->sum == 2) memcpy(ybuf, sum, sizeof(float) * (size_t)(m * n)), sum_arg = (float *)ybuf;
  if (t->sum == 4) {
    memcpy(ybuf + 7 * sizeof(float), sum, sizeof(float) * (size_t)(m * n));
    sum_arg = (float *)ybuf + 7;
  }
  uint32_t guard = 0x5a5a5a5a; /* past y (for the shifted Sum, past that) */
  size_t guard_at = t->sum == 4 ? (size_t)(m * n + 8) * sizeof(float) : (size_t)(m * n) * ysize;
  memcpy(ybuf + guard_at, &guard, sizeof guard);
  kl_amx_args a = {.x = t->x_bf16 ? (const void *)xb : x, .x_bf16 = t->x_bf16, .w = wp,
                   .m = m, .k = k, .n = n, .y = ybuf, .y_bf16 = t->y_bf16,
                   .scratch = scratch};
  a.epi = (kl_gemv_args){.alpha = t->alpha, .add_scale = t->add_scale, .has_act = t->has_act,
                         .act = t->act};
  if (t->add)
    a.epi.add = add, a.epi.add_step = t->add == 1 ? 1 : 0, a.epi.add_row = t->add == 2 ? 1 : 0;
  if (t->sum)
    a.epi.sum = sum_arg, a.epi.sum_step = 1, a.epi.sum_row = t->sum == 3 ? 0 : n;
  kl_err e = {0};
  kl_kernel_ctx c = {.e = &e, .threads = t->threads};
  assert_int_equal(kl_run_amx(&c, f, amx, &a), KILN_OK);
  uint32_t after;
  memcpy(&after, ybuf + guard_at, sizeof after);
  assert_true(after == guard);
  for (int64_t r = 0; r < m; r++)
    for (int64_t i = 0; i < n; i++) {
      double dot = 0, mag = 0;
      for (int64_t j = 0; j < k; j++) {
        double p = bf(x[r * k + j]) * bf(t->nk ? w[i * k + j] : w[j * n + i]);
        dot += p;
        mag += fabs(p);
      }
      double v = t->alpha * dot;
      if (add) v += t->add_scale * add[t->add == 1 ? i : t->add == 2 ? r : 0];
      if (sum) v += sum[t->sum == 3 ? i : r * n + i];
      if (t->has_act) v = act_ref(&t->act, v);
      double got;
      if (t->y_bf16) {
        uint32_t u = (uint32_t)((uint16_t *)ybuf)[r * n + i] << 16;
        float g;
        memcpy(&g, &u, sizeof g);
        got = g;
      } else {
        got = ((float *)ybuf)[r * n + i];
      }
      double tol = ((double)k / 8.0 + 16.0) * 2.4e-7 * (fabs(t->alpha) * mag + 10) + 1e-6;
      if (t->y_bf16) tol += fabs(v) * (1.0 / 256.0); /* one rounding to bf16 */
      if (!(fabs(got - v) <= tol))
        fail_msg("%s: y[%lld][%lld] = %.9g, expected %.9g (tolerance %.3g)", t->what,
                 (long long)r, (long long)i, got, v, tol);
    }
  /* where the fused epilogue ran (alpha 1, at most a bias [N], no Sum), the general one
   * (made to run by a Sum of zeros, which adds nothing) must give the same values */
  bool fused = t->alpha == 1.0f && !t->sum && (t->add == 0 || (t->add == 1 && t->add_scale == 1.0f));
  if (fused) {
    float *zeros = calloc((size_t)(m * n), sizeof(float));
    char *y2 = calloc((size_t)(m * n), sizeof(float));
    assert_non_null(zeros);
    assert_non_null(y2);
    kl_amx_args g = a;
    g.y = y2;
    g.epi.sum = zeros, g.epi.sum_step = 1, g.epi.sum_row = n;
    assert_int_equal(kl_run_amx(&c, f, amx, &g), KILN_OK);
    for (int64_t i = 0; i < m * n; i++) {
      double u, v;
      if (t->y_bf16) {
        uint32_t x1 = (uint32_t)((uint16_t *)ybuf)[i] << 16, x2 = (uint32_t)((uint16_t *)y2)[i] << 16;
        float f1, f2;
        memcpy(&f1, &x1, sizeof f1);
        memcpy(&f2, &x2, sizeof f2);
        u = f1, v = f2;
      } else {
        u = ((float *)ybuf)[i], v = ((float *)y2)[i];
      }
      if (u != v)
        fail_msg("%s: element %lld is %.9g by the fused epilogue, %.9g by the general one",
                 t->what, (long long)i, u, v);
    }
    free(zeros);
    free(y2);
  }
  printf("%-52s ok%s\n", t->what, fused ? " (fused epilogue = general)" : "");
  free(x);
  free(w);
  free(xb);
  free(wp);
  free(scratch);
  free(add);
  free(sum);
  free(ybuf);
}

static void test_products(void **state) {
  (void)state;
  const kl_amx_fns *amx = kl_cpu_isa_amx(kl_isa_level());
  if (!amx) {
    printf("no AMX tiles at this level (%s): kiln's bf16 tile product does not run here\n",
           kl_isa_level_name(kl_isa_level()));
    return;
  }
  const kl_act relu = {KL_ACT_RELU, 0, 0}, tanh_a = {KL_ACT_TANH, 0, 0}, none = {0};
  const kl_act gelu = {KL_ACT_GELU_ERF, 0, 0}, gelu_t = {KL_ACT_GELU_TANH, 0, 0};
  const amx_case cases[] = {
      {"1x1x1", 1, 1, 1, false, false, false, 1, 1, 0, 0, false, none, 1},
      {"5x31x33 nk, add [N]", 5, 31, 33, true, false, false, 1, 1, 1, 0, false, none, 1},
      {"16x32x32 exact tiles", 16, 32, 32, false, false, false, 1, 1, 0, 0, false, none, 1},
      {"17x33x70 nk, add [M, 1], Relu", 17, 33, 70, true, false, false, 1, 1, 2, 0, true, relu,
       1},
      {"33x100x31 x bf16, Sum in y", 33, 100, 31, false, true, false, 1, 1, 0, 2, false, none,
       1},
      {"64x257x96 y bf16, add scalar", 64, 257, 96, true, false, true, 1, 1, 3, 0, false, none,
       1},
      {"130x768x200 threads, x and y bf16, add [N]", 130, 768, 200, false, true, true, 1, 1, 1,
       0, false, none, 2},
      {"3x1000x1031 threads, alpha 0.5, add [N] x 2, Tanh", 3, 1000, 1031, true, false, false,
       0.5f, 2, 1, 0, true, tanh_a, 2},
      {"40x64x64 Sum shares y's buffer 7 floats ahead", 40, 64, 64, false, false, false, 1, 1, 0,
       4, false, none, 1},
      {"47x45x50 Sum [N], add [N], threads", 47, 45, 50, true, false, false, 1, 1, 1, 3, false,
       none, 2},
      {"128x96x100 y bf16, bias [N], GELU (erf)", 128, 96, 100, false, false, true, 1, 1, 1, 0,
       true, gelu, 2},
      {"50x70x45 bias [N], GELU (tanh)", 50, 70, 45, true, true, false, 1, 1, 1, 0, true,
       gelu_t, 1},
      {"33x40x65 x bf16, Relu", 33, 40, 65, false, true, false, 1, 1, 0, 0, true, relu, 1},
      /* more threads than blocks of rows, and panels shared by two tasks */
      {"192x300x500 16 threads, x bf16, Sum [M, N]", 192, 300, 500, false, true, false, 1, 1,
       0, 1, false, none, 16},
      {"97x64x1000 5 threads, bias [N], Relu", 97, 64, 1000, true, false, false, 1, 1, 1, 0,
       true, relu, 5},
      {"160x96x40 7 threads, y bf16", 160, 96, 40, false, false, true, 1, 1, 0, 0, false, none,
       7},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(amx, &cases[i]);
}

/* The tasks' split changes with the thread count, each output's sums do not: the same
 * bits at 1, 2, 3, 4, 6, 8 and 16 threads (BERT-base's 128 x 768 x 3072 product, and an
 * awkward 190 x 200 x 333). */
static void test_threads_same_bits(void **state) {
  (void)state;
  const kl_amx_fns *amx = kl_cpu_isa_amx(kl_isa_level());
  if (!amx) {
    printf("no AMX tiles at this level (%s)\n", kl_isa_level_name(kl_isa_level()));
    return;
  }
  const kl_isa_fns *f = kl_cpu_isa_fns(KL_ISA_AMX);
  const int64_t shapes[][3] = {{128, 768, 3072}, {190, 200, 333}};
  for (size_t s = 0; s < 2; s++) {
    int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
    float *x = rand_floats((size_t)(m * k), 1.0f), *w = rand_floats((size_t)(k * n), 0.5f);
    float *bias = rand_floats((size_t)n, 1.0f);
    uint16_t *wp = malloc(kl_amx_weights_bytes(k, n));
    float *y1 = malloc(sizeof(float) * (size_t)(m * n)), *y = malloc(sizeof(float) * (size_t)(m * n));
    assert_non_null(wp);
    assert_non_null(y1);
    assert_non_null(y);
    kl_amx_pack_weights(amx, w, false, k, n, wp);
    const int counts[] = {1, 2, 3, 4, 6, 8, 16};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
      kl_err e = {0};
      kl_kernel_ctx c = {.e = &e, .threads = counts[i]};
      uint16_t *scratch = malloc(kl_amx_scratch_bytes(m, k));
      assert_non_null(scratch);
      kl_amx_args a = {.x = x, .w = wp, .m = m, .k = k, .n = n, .y = i ? y : y1,
                       .scratch = scratch};
      a.epi = (kl_gemv_args){.alpha = 1, .add_scale = 1, .add = bias, .add_step = 1};
      assert_int_equal(kl_run_amx(&c, f, amx, &a), KILN_OK);
      if (i && memcmp(y, y1, sizeof(float) * (size_t)(m * n)) != 0)
        fail_msg("%lldx%lldx%lld: %d threads give other bits than 1", (long long)m,
                 (long long)k, (long long)n, counts[i]);
      free(scratch);
    }
    printf("%lldx%lldx%lld: the same bits at 1 to 16 threads\n", (long long)m, (long long)k,
           (long long)n);
    free(x);
    free(w);
    free(bias);
    free(wp);
    free(y1);
    free(y);
  }
}

/* The packed weights: each element where TDPBF16PS reads it, zeros past k and n; a
 * weight at a time (no primitives) and, where AMX runs, with its whole-step packing of
 * W [k, n] and of W [n, k] (pack_kn, pack_nk; 70 x 100: whole steps and panels, and
 * edges of both), the same bits. */
static void check_pack(const kl_amx_fns *amx, int64_t k, int64_t n) {
  float *w = rand_floats((size_t)(k * n), 1.0f);
  int64_t panels = (n + 31) / 32, steps = (k + 31) / 32;
  size_t bytes = kl_amx_weights_bytes(k, n);
  assert_int_equal(bytes, (size_t)(panels * steps * 2048));
  uint16_t *p = malloc(bytes);
  assert_non_null(p);
  for (int nk = 0; nk < 2; nk++) {
    kl_amx_pack_weights(amx, w, nk, k, n, p);
    for (int64_t o = 0; o < panels * 32; o++)
      for (int64_t i = 0; i < steps * 32; i++) {
        int64_t pan = o / 32, t = o % 32 / 16, j = o % 16, s = i / 32, r = i % 32 / 2, e = i % 2;
        uint16_t got = p[((((pan * steps + s) * 2 + t) * 16 + r) * 16 + j) * 2 + e];
        uint16_t want = o < n && i < k ? kl_f32_to_bf16(nk ? w[o * k + i] : w[i * n + o]) : 0;
        if (got != want)
          fail_msg("%s %lldx%lld%s: output %lld, input %lld: 0x%04x, expected 0x%04x",
                   nk ? "nk" : "kn", (long long)k, (long long)n, amx ? " (AMX level)" : "",
                   (long long)o, (long long)i, got, want);
      }
  }
  free(p);
  free(w);
}

static void test_pack(void **state) {
  (void)state;
  const kl_amx_fns *amx = kl_cpu_isa_amx(kl_isa_level());
  check_pack(NULL, 37, 45);
  check_pack(NULL, 70, 100);
  if (amx) {
    check_pack(amx, 37, 45);
    check_pack(amx, 70, 100);
    check_pack(amx, 64, 32);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_pack),
                                     cmocka_unit_test(test_products),
                                     cmocka_unit_test(test_threads_same_bits)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
