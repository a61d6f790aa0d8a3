/* kiln's one-row matrix products (src/backends/cpu/isa/gemv_*.c, run_gemv.c, and their
 * hook in dnnl.c): the packing of either weight layout into panels, into new buffers
 * and in place; the primitives of every ISA level this machine has against the generic
 * ones and a double-precision sum, at awkward sizes, on weights packed from both
 * layouts; the driver's epilogue (alpha, broadcast addends, a Sum sharing y's buffer,
 * activations, threads); and whole Gemm / MatMul / fused nodes run through sessions
 * against the reference kernels, with static and dynamic row counts, the per-shape
 * cache, and release_weights on and off (on, with every run one row, the weights are
 * packed in place in the model's buffer, from either layout). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"
#include "export/onnx_export.h"
#include "kl_config.h"
#include "runtime/session.h"
#if KL_HAVE_DNNL
#include "backends/cpu/dnnl.h"
#endif

#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 4242;

/* Never zero: |v| in [0.1, 1] times span, either sign. */
static float *rand_floats(size_t n, float span) { return tu_rand_nonzero(&rng, n, span); }

/* ---- the primitives ---- */

static const size_t sizes[] = {1, 3, 15, 16, 17, 63, 100, 1031};
#define N_SIZES (sizeof sizes / sizeof sizes[0])

/* The levels this machine runs (KILN_ISA aside), generic first. */
static int levels(const kl_isa_fns **out) {
  kl_isa top = kl_isa_supported(kl_isa_features());
  int n = 0;
  out[n++] = kl_cpu_isa_fns(KL_ISA_GENERIC);
  if (top >= KL_ISA_AVX2) out[n++] = kl_cpu_isa_fns(KL_ISA_AVX2);
  if (top >= KL_ISA_AVX512) out[n++] = kl_cpu_isa_fns(KL_ISA_AVX512);
  return n;
}

/* y against the double sums of x and w (in form nk [n, k] or kn [k, n]), each output
 * within a bound scaled by its sum of |x||w|; the same for y2 (the generic level's
 * result) when given. */
static void check_products(const char *level, bool nk, const float *x, const float *w,
                           size_t k, size_t n, const float *y, const float *y2) {
  for (size_t i = 0; i < n; i++) {
    double want = 0, mag = 0;
    for (size_t j = 0; j < k; j++) {
      double wv = nk ? w[i * k + j] : w[j * n + i];
      want += (double)x[j] * wv;
      mag += fabs((double)x[j] * wv);
    }
    double tol = ((double)k / 8.0 + 16.0) * 2.4e-7 * mag;
    if (!(fabs((double)y[i] - want) <= tol))
      fail_msg("%s %s k=%zu n=%zu: y[%zu] = %.9g, the double sum %.9g (tolerance %.3g)",
               level, nk ? "nk" : "kn", k, n, i, (double)y[i], want, tol);
    if (y2 && !(fabs((double)y[i] - y2[i]) <= 2 * tol))
      fail_msg("%s %s k=%zu n=%zu: y[%zu] = %.9g, the generic level's %.9g", level,
               nk ? "nk" : "kn", k, n, i, (double)y[i], (double)y2[i]);
  }
}

/* The floats of W's panels, whole and partial: n rounded up to 16, times k. */
static size_t packed_floats(size_t k, size_t n) { return (n + 15) / 16 * 16 * k; }

/* Every element of W at its place in the panels (wp: the whole ones, tail: the last
 * partial one), the spare columns of the last panel 0. */
static void check_panels(const char *how, bool nk, const float *w, size_t k, size_t n,
                         const float *wp, const float *tail) {
  size_t whole = n / 16 * 16;
  for (size_t i = 0; i < (n + 15) / 16 * 16; i++)
    for (size_t j = 0; j < k; j++) {
      float got = i < whole ? wp[(i / 16) * 16 * k + j * 16 + i % 16] : tail[j * 16 + i % 16];
      float want = i >= n ? 0.0f : nk ? w[i * k + j] : w[j * n + i];
      if (got != want)
        fail_msg("%s %s k=%zu n=%zu: panel element of W[%zu][%zu] is %g, not %g", how,
                 nk ? "nk" : "kn", k, n, j, i, (double)got, (double)want);
    }
}

/* kl_gemv_pack into one contiguous run of panels and into whole panels and a tail
 * apart, and kl_gemv_pack_nk_inplace, with the transpose primitive of every level this
 * machine has: every element in place, nothing written past the buffers given. */
static void pack_case(const kl_isa_fns *f, bool nk, size_t k, size_t n) {
  size_t whole = n / 16 * 16 * k, packed = packed_floats(k, n);
  char how[64];
  float *w = rand_floats(k * n, 1.0f), *wp = malloc(sizeof(float) * (packed + 1));
  float *tail = malloc(sizeof(float) * (16 * k + 1));
  assert_non_null(wp);
  assert_non_null(tail);
  for (size_t i = 0; i < packed; i++) wp[i] = NAN; /* every element written */
  wp[packed] = 12345.0f;
  kl_gemv_pack(f, w, nk, (int64_t)k, (int64_t)n, wp, wp + whole);
  assert_true(wp[packed] == 12345.0f);
  snprintf(how, sizeof how, "%s contiguous", f->name);
  check_panels(how, nk, w, k, n, wp, wp + whole);
  for (size_t i = 0; i < 16 * k; i++) tail[i] = NAN;
  tail[16 * k] = wp[whole] = 12345.0f;
  kl_gemv_pack(f, w, nk, (int64_t)k, (int64_t)n, wp, tail);
  assert_true(wp[whole] == 12345.0f && tail[16 * k] == 12345.0f);
  snprintf(how, sizeof how, "%s tail apart", f->name);
  check_panels(how, nk, w, k, n, wp, tail);
  if (nk) {
    float *in = malloc(sizeof(float) * (k * n + 1)), *scratch = malloc(sizeof(float) * 16 * k);
    assert_non_null(in);
    assert_non_null(scratch);
    memcpy(in, w, sizeof(float) * k * n);
    in[k * n] = 12345.0f;
    for (size_t i = 0; i < 16 * k; i++) tail[i] = NAN;
    kl_gemv_pack_nk_inplace(f, in, (int64_t)k, (int64_t)n, tail, scratch);
    assert_true(in[k * n] == 12345.0f && tail[16 * k] == 12345.0f);
    snprintf(how, sizeof how, "%s in place", f->name);
    check_panels(how, nk, w, k, n, in, tail);
    free(in);
    free(scratch);
  }
  free(w);
  free(wp);
  free(tail);
}

/* kl_gemv_pack_kn_inplace (no level's primitive: once per size) */
static void pack_kn_inplace_case(size_t k, size_t n) {
  size_t seen_bytes = kl_gemv_kn_seen_bytes((int64_t)k, (int64_t)n);
  float *w = rand_floats(k * n, 1.0f), *in = malloc(sizeof(float) * (k * n + 1));
  float *tail = malloc(sizeof(float) * (16 * k + 1));
  uint8_t *seen = malloc(seen_bytes + 1);
  assert_non_null(in);
  assert_non_null(tail);
  assert_non_null(seen);
  memcpy(in, w, sizeof(float) * k * n);
  in[k * n] = tail[16 * k] = 12345.0f;
  seen[seen_bytes] = 0xa5;
  for (size_t i = 0; i < 16 * k; i++) tail[i] = NAN;
  kl_gemv_pack_kn_inplace(in, (int64_t)k, (int64_t)n, tail, seen);
  assert_true(in[k * n] == 12345.0f && tail[16 * k] == 12345.0f && seen[seen_bytes] == 0xa5);
  check_panels("kn in place", false, w, k, n, in, tail);
  free(w);
  free(in);
  free(tail);
  free(seen);
}

static void test_pack(void **state) {
  (void)state;
  const kl_isa_fns *lv[3];
  int n_lv = levels(lv);
  for (int l = 0; l < n_lv; l++)
    for (int form = 0; form < 2; form++)
      for (size_t a = 0; a < N_SIZES; a++)
        for (size_t b = 0; b < N_SIZES; b++) pack_case(lv[l], form == 0, sizes[a], sizes[b]);
  for (size_t a = 0; a < N_SIZES; a++)
    for (size_t b = 0; b < N_SIZES; b++) pack_kn_inplace_case(sizes[a], sizes[b]);
}

static void test_primitives(void **state) {
  (void)state;
  const kl_isa_fns *lv[3];
  int n_lv = levels(lv);
  for (int form = 0; form < 2; form++) {
    bool nk = form == 0;
    for (size_t a = 0; a < N_SIZES; a++)
      for (size_t b = 0; b < N_SIZES; b++) {
        size_t k = sizes[a], n = sizes[b];
        size_t packed = packed_floats(k, n);
        float *x = rand_floats(k, 2.0f), *w = rand_floats(k * n, 1.0f);
        float *wp = malloc(sizeof(float) * packed);
        float *y0 = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * (n + 1));
        assert_non_null(wp);
        assert_non_null(y0);
        assert_non_null(y);
        kl_gemv_pack(lv[0], w, nk, (int64_t)k, (int64_t)n, wp, wp + n / 16 * 16 * k);
        for (int l = 0; l < n_lv; l++) {
          y[n] = 12345.0f; /* a guard past the end */
          for (size_t i = 0; i < n; i++) y[i] = NAN; /* every output written */
          lv[l]->gemv->panel(x, wp, k, y, n);
          assert_true(y[n] == 12345.0f);
          check_products(lv[l]->name, nk, x, w, k, n, y, l > 0 ? y0 : NULL);
          if (l == 0) memcpy(y0, y, sizeof(float) * n);
        }
        free(x);
        free(w);
        free(wp);
        free(y0);
        free(y);
      }
  }
}

/* A long k (VGG's 25088) of positive terms: each level's sums stay within 1e-6 of the
 * double ones, relatively. One chain of 12544 additions per sum (the kernels before
 * they summed blocks of KL_GEMV_BLOCK rows apart) drifted 2-5 times further. */
static void test_long_k(void **state) {
  (void)state;
  const kl_isa_fns *lv[3];
  int n_lv = levels(lv);
  size_t k = 25088, n = 40;
  float *x = malloc(sizeof(float) * k), *w = malloc(sizeof(float) * k * n);
  float *wp = malloc(sizeof(float) * packed_floats(k, n)), *y = malloc(sizeof(float) * n);
  assert_true(x && w && wp && y);
  uint32_t seed = 99;
  for (size_t i = 0; i < k; i++) x[i] = tu_rand_f32(&seed, 0, 1);
  for (size_t i = 0; i < k * n; i++) w[i] = tu_rand_f32(&seed, 0, 1);
  kl_gemv_pack(lv[0], w, true, (int64_t)k, (int64_t)n, wp, wp + n / 16 * 16 * k);
  for (int l = 0; l < n_lv; l++) {
    lv[l]->gemv->panel(x, wp, k, y, n);
    double worst = 0;
    for (size_t o = 0; o < n; o++) {
      double want = 0;
      for (size_t j = 0; j < k; j++) want += (double)x[j] * w[o * k + j];
      double rel = fabs(y[o] - want) / want;
      if (rel > worst) worst = rel;
    }
    if (worst > 1e-6) fail_msg("%s: relative error %.3g over k = %zu", lv[l]->name, worst, k);
  }
  free(x);
  free(w);
  free(wp);
  free(y);
}

/* The tile primitive of every level that has one, against the double sums and the
 * generic level's tile: rows 1 to 6, partial and whole panels, k from 1 to past a
 * pass, with and without adding to what c holds; nothing outside the tile's rows and
 * columns written. */
static void test_tiles(void **state) {
  (void)state;
  const kl_isa_fns *lv[3];
  int n_lv = levels(lv);
  static const size_t ks[] = {1, 2, 7, 64, 257};
  static const size_t ncs[] = {1, 7, 8, 9, 15, 16};
  const size_t ldc = 21; /* wider than a panel: the columns past nc are guards */
  for (size_t a = 0; a < sizeof ks / sizeof ks[0]; a++)
    for (size_t m = 1; m <= KL_GEMM_ROWS; m++)
      for (size_t b = 0; b < sizeof ncs / sizeof ncs[0]; b++)
        for (int acc = 0; acc < 2; acc++) {
          size_t k = ks[a], nc = ncs[b];
          float *ap = rand_floats(k * KL_GEMM_ROWS, 2.0f), *wp = rand_floats(k * 16, 1.0f);
          float *c0 = rand_floats((KL_GEMM_ROWS + 1) * ldc, 3.0f);
          float c[(KL_GEMM_ROWS + 1) * 21], first[(KL_GEMM_ROWS + 1) * 21];
          for (size_t j = 0; j < k; j++) /* rows past m hold zeros, as packed */
            for (size_t i = m; i < KL_GEMM_ROWS; i++) ap[j * KL_GEMM_ROWS + i] = 0.0f;
          for (int l = 0; l < n_lv; l++) {
            if (!lv[l]->gemv->tile) continue;
            memcpy(c, c0, sizeof c);
            /* the next slice to fetch: none, part of one, or more lines than k steps */
            size_t npf = (m + (size_t)acc) % 3 == 0 ? 0 : (m % 3 == 1 ? k / 2 : k + 3);
            lv[l]->gemv->tile(ap, wp, k, m, c, ldc, nc, acc, wp, npf);
            for (size_t i = 0; i <= KL_GEMM_ROWS; i++)
              for (size_t col = 0; col < ldc; col++) {
                float got = c[i * ldc + col];
                if (i >= m || col >= nc) {
                  if (got != c0[i * ldc + col])
                    fail_msg("%s tile m=%zu nc=%zu k=%zu: wrote c[%zu][%zu] outside the tile",
                             lv[l]->name, m, nc, k, i, col);
                  continue;
                }
                double want = acc ? c0[i * ldc + col] : 0.0, mag = fabs(want);
                for (size_t j = 0; j < k; j++) {
                  want += (double)ap[j * KL_GEMM_ROWS + i] * wp[j * 16 + col];
                  mag += fabs((double)ap[j * KL_GEMM_ROWS + i] * wp[j * 16 + col]);
                }
                double tol = ((double)k / 8.0 + 16.0) * 2.4e-7 * mag;
                if (!(fabs((double)got - want) <= tol))
                  fail_msg("%s tile m=%zu nc=%zu k=%zu acc=%d: c[%zu][%zu] = %.9g, the double "
                           "sum %.9g", lv[l]->name, m, nc, k, acc, i, col, (double)got, want);
                if (l > 0 && !(fabs((double)got - first[i * ldc + col]) <= 2 * tol))
                  fail_msg("%s tile m=%zu nc=%zu k=%zu: c[%zu][%zu] = %.9g, the generic "
                           "level's %.9g", lv[l]->name, m, nc, k, i, col, (double)got,
                           (double)first[i * ldc + col]);
              }
            if (l == 0) memcpy(first, c, sizeof c);
          }
          free(ap);
          free(wp);
          free(c0);
        }
}

/* The pack primitive of every level that has one against the definition: rows 1 to
 * KL_GEMM_ROWS, k short of, at and past the AVX2 level's 8 steps at a time; zeros for
 * the missing rows, nothing written past the group. */
static void test_pack_rows(void **state) {
  (void)state;
  const kl_isa_fns *lv[3];
  int n_lv = levels(lv);
  static const size_t ks[] = {1, 7, 8, 9, 16, 17, 100};
  for (size_t a = 0; a < sizeof ks / sizeof ks[0]; a++)
    for (size_t rows = 1; rows <= KL_GEMM_ROWS; rows++) {
      size_t k = ks[a], len = k * KL_GEMM_ROWS;
      float *x = rand_floats(rows * k, 2.0f), *out = rand_floats(len + 8, 1.0f);
      for (int l = 0; l < n_lv; l++) {
        if (!lv[l]->gemv->pack) continue;
        for (size_t i = 0; i < 8; i++) out[len + i] = 777.0f + (float)i;
        lv[l]->gemv->pack(x, k, rows, out);
        for (size_t j = 0; j < k; j++)
          for (size_t i = 0; i < KL_GEMM_ROWS; i++) {
            float want = i < rows ? x[i * k + j] : 0.0f;
            if (out[j * KL_GEMM_ROWS + i] != want)
              fail_msg("%s pack rows=%zu k=%zu: out[%zu][%zu] = %g, x's %g", lv[l]->name,
                       rows, k, j, i, (double)out[j * KL_GEMM_ROWS + i], (double)want);
          }
        for (size_t i = 0; i < 8; i++)
          if (out[len + i] != 777.0f + (float)i)
            fail_msg("%s pack rows=%zu k=%zu: wrote past the group", lv[l]->name, rows, k);
      }
      free(x);
      free(out);
    }
}

/* ---- the driver ---- */

typedef struct drv_case {
  const char *what;
  bool nk;
  size_t k, n;
  float alpha, add_scale;
  int add_step, sum_step; /* -1: absent */
  bool sum_in_y;          /* Sum is y's own elements */
  bool has_act;
  kl_act act;
  int threads;
  size_t m;               /* rows (0: one) */
  bool add_rows, sum_rows; /* an addend per row (else one for all) */
  size_t sum_shift;       /* Sum shares y's buffer, this many floats before y */
} drv_case;

static double act_ref(const kl_act *a, double v) {
  switch (a->kind) {
  case KL_ACT_RELU: return v < 0 ? 0 : v;
  case KL_ACT_LEAKY_RELU: return v < 0 ? a->alpha * v : v;
  case KL_ACT_SIGMOID: return 1 / (1 + exp(-v));
  case KL_ACT_TANH: return tanh(v);
  case KL_ACT_HARD_SIGMOID: return fmin(fmax(a->alpha * v + a->beta, 0), 1);
  case KL_ACT_CLIP: return fmin(fmax(v, a->alpha), a->beta);
  default: fail_msg("activation %d not in this test", (int)a->kind); return 0;
  }
}

/* An addend's row step: one per row (n or 1 elements apart) or none. */
static size_t row_step(bool rows, int step, size_t n) { return rows ? (step ? n : 1) : 0; }

static void run_driver(const kl_isa_fns *f, const drv_case *t) {
  size_t m = t->m ? t->m : 1, rows = t->nk ? t->n : t->k, cols = t->nk ? t->k : t->n;
  size_t add_row = row_step(t->add_rows, t->add_step, t->n);
  size_t sum_row = row_step(t->sum_rows, t->sum_step, t->n);
  size_t add_len = (m - 1) * add_row + (t->n - 1) * (size_t)(t->add_step > 0) + 1;
  size_t sum_len = (m - 1) * sum_row + (t->n - 1) * (size_t)(t->sum_step > 0) + 1;
  float *x = rand_floats(m * t->k, 2.0f), *w = rand_floats(rows * cols, 1.0f);
  float *add = t->add_step >= 0 ? rand_floats(add_len, 3.0f) : NULL;
  float *sum = t->sum_step >= 0 ? rand_floats(sum_len, 3.0f) : NULL;
  /* y, and before it the Sum that shares its buffer */
  float *buf = rand_floats(t->sum_shift + m * t->n + 1, 1.0f), *y = buf + t->sum_shift;
  float *wp = malloc(sizeof(float) * (t->n / 16 * 16 * t->k + 1));
  float *tail = malloc(sizeof(float) * 16 * t->k); /* apart, as dnnl.c holds it */
  assert_non_null(wp);
  assert_non_null(tail);
  kl_gemv_pack(f, w, t->nk, (int64_t)t->k, (int64_t)t->n, wp, tail);
  const float *sum_arg = sum;
  if (t->sum_in_y) memcpy(y, sum, sizeof(float) * sum_len), sum_arg = y;
  if (t->sum_shift) memcpy(buf, sum, sizeof(float) * sum_len), sum_arg = buf;
  y[m * t->n] = 12345.0f; /* a guard past the end */
  kl_gemv_args a = {.x = x, .w = wp, .w_tail = tail, .k = (int64_t)t->k, .n = (int64_t)t->n,
                    .m = (int64_t)m, .alpha = t->alpha, .add = add, .add_step = t->add_step,
                    .add_row = (int64_t)add_row, .add_scale = t->add_scale, .sum = sum_arg,
                    .sum_step = t->sum_step, .sum_row = (int64_t)sum_row,
                    .has_act = t->has_act, .act = t->act, .y = y};
  kl_err e = {0};
  kl_kernel_ctx c = {.e = &e, .threads = t->threads};
  if (m > 1 && !f->gemv->tile) goto done; /* a level without tiles: dnnl.c never asks */
  assert_int_equal(kl_run_gemv(&c, f, &a), KILN_OK);
  assert_true(y[m * t->n] == 12345.0f);
  for (size_t r = 0; r < m; r++)
    for (size_t i = 0; i < t->n; i++) {
      double dot = 0, mag = 0;
      for (size_t j = 0; j < t->k; j++) {
        double wv = t->nk ? w[i * t->k + j] : w[j * t->n + i];
        dot += (double)x[r * t->k + j] * wv;
        mag += fabs((double)x[r * t->k + j] * wv);
      }
      double v = t->alpha * dot;
      if (add) v += t->add_scale * add[r * add_row + i * (size_t)t->add_step];
      if (sum) v += sum[r * sum_row + i * (size_t)t->sum_step];
      if (t->has_act) v = act_ref(&t->act, v);
      double tol = ((double)t->k / 8.0 + 16.0) * 2.4e-7 * (fabs(t->alpha) * mag + 10) + 1e-6;
      if (!(fabs((double)y[r * t->n + i] - v) <= tol))
        fail_msg("%s, %s: y[%zu][%zu] = %.9g, expected %.9g", f->name, t->what, r, i,
                 (double)y[r * t->n + i], v);
    }
done:
  free(x);
  free(w);
  free(wp);
  free(tail);
  free(add);
  free(sum);
  free(buf);
}

static void test_driver(void **state) {
  (void)state;
  const kl_isa_fns *lv[3];
  int n_lv = levels(lv);
  const kl_act relu = {KL_ACT_RELU, 0, 0}, leaky = {KL_ACT_LEAKY_RELU, 0.1f, 0};
  const kl_act hsig = {KL_ACT_HARD_SIGMOID, 0.2f, 0.5f}, clip = {KL_ACT_CLIP, -0.5f, 0.75f};
  const kl_act tanh_a = {KL_ACT_TANH, 0, 0};
  /* what, nk, k, n, alpha, add_scale, add_step, sum_step, sum_in_y, has_act, act, threads,
   * m, add_rows, sum_rows, sum_shift */
  const drv_case cases[] = {
      {"nk plain", true, 100, 17, 1, 1, -1, -1, false, false, relu, 1, 0, false, false, 0},
      {"nk alpha, add [N], Relu", true, 63, 100, 0.5f, 2, 1, -1, false, true, relu, 1, 0,
       false, false, 0},
      {"kn add scalar, Sum in y, LeakyRelu", false, 17, 1031, 1, -1.5f, 0, 1, true, true,
       leaky, 1, 0, false, false, 0},
      {"kn Sum scalar, HardSigmoid", false, 1031, 63, 1, 1, -1, 0, false, true, hsig, 1, 0,
       false, false, 0},
      {"nk Sum in y, Clip", true, 15, 5000, 2, 1, 1, 1, true, true, clip, 1, 0, false, false,
       0},
      {"nk threads", true, 1031, 700, 1, 1, 1, -1, false, true, tanh_a, 2, 0, false, false, 0},
      {"kn threads, Sum in y", false, 1031, 1500, 1, 0.5f, 1, 1, true, false, relu, 2, 0,
       false, false, 0},
      {"kn threads, odd columns", false, 3000, 1001, 1, 1, 0, -1, false, false, relu, 2, 0,
       false, false, 0},
      /* many rows: tiles, row blocks, passes over k, addends per row */
      {"rows 2, nk plain", true, 100, 17, 1, 1, -1, -1, false, false, relu, 1, 2, false,
       false, 0},
      {"rows 5, add [N], Relu", true, 63, 100, 0.5f, 2, 1, -1, false, true, relu, 1, 5, false,
       false, 0},
      {"rows 7, add [M, 1], Sum [M, N]", false, 300, 33, 1, 1, 0, 1, false, false, relu, 1, 7,
       true, true, 0},
      {"rows 13, Sum in y, add [M, N], Tanh", true, 257, 40, 1, -0.5f, 1, 1, true, true,
       tanh_a, 1, 13, true, true, 0},
      {"rows 150, threads, Sum scalar, Clip", false, 513, 70, 1, 1, -1, 0, false, true, clip,
       2, 150, false, false, 0},
      {"rows 290, threads, Sum in y, C [N]", true, 31, 300, 1, 1, 1, 1, true, false, relu, 2,
       290, false, true, 0},
      {"rows 6, alpha 2, Sum in y", false, 600, 16, 2, 1, -1, 1, true, false, relu, 1, 6,
       false, true, 0},
      {"rows 9, Sum shares y's buffer 5 floats ahead", true, 20, 45, 1, 1, -1, 1, false, true,
       leaky, 1, 9, false, true, 5},
      {"rows 4, k 1, HardSigmoid", true, 1, 1031, 1, 1, 1, -1, false, true, hsig, 2, 4, false,
       false, 0},
  };

  for (int l = 0; l < n_lv; l++)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_driver(lv[l], &cases[i]);
}

/* The row counts whose groups split unevenly or the tiles of few rows take (1 to 7, 8:
 * 4 + 4, 11: 6 + 5), a whole product of BERT's (128) and either side of it, one past a
 * block of rows (205: two blocks); N not a multiple of a panel, K odd (one step past a
 * pass or short of one), a bias and an activation, one thread and two. */
static void test_row_counts(void **state) {
  (void)state;
  const kl_isa_fns *lv[3];
  int n_lv = levels(lv);
  const kl_act relu = {KL_ACT_RELU, 0, 0}, tanh_a = {KL_ACT_TANH, 0, 0};
  static const size_t ms[] = {2, 3, 4, 5, 6, 7, 8, 11, 127, 128, 129, 205};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
    for (int threads = 1; threads <= 2; threads++) {
      bool odd = (i + (size_t)threads) % 2;
      drv_case t = {"rows, bias, act", odd, odd ? 257 : 77, odd ? 50 : 33, 1, 1, 1, -1,
                    false, true, odd ? relu : tanh_a, threads, ms[i], false, false, 0};
      for (int l = 0; l < n_lv; l++) run_driver(lv[l], &t);
    }
}

static void test_fused_act(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int a = tu_graph_input(g, "a", KL_F32, 2, (int64_t[]){1, 4});
  int w = tu_graph_input(g, "w", KL_F32, 2, (int64_t[]){4, 2});
  int n = tu_graph_node(g, KL_OP_KilnFusedMatMul, "fm", 2, (int[]){a, w}, 1,
                        (int[]){tu_graph_value(g, "y")});
  bool has;
  kl_act act;
  assert_true(kl_isa_fused_act(&g->nodes[n], &has, &act));
  assert_false(has);
  static const struct {
    const char *name;
    int n_p;
    float p[2];
    kl_act_kind kind;
    float alpha, beta;
    bool ok;
  } acts[] = {
      {"Relu", 0, {0}, KL_ACT_RELU, 0, 0, true},
      {"LeakyRelu", 1, {0.2f}, KL_ACT_LEAKY_RELU, 0.2f, 0, true},
      {"Clip", 2, {-1, 6}, KL_ACT_CLIP, -1, 6, true},
      {"HardSigmoid", 2, {0.3f, 0.4f}, KL_ACT_HARD_SIGMOID, 0.3f, 0.4f, true},
      {"Silu", 0, {0}, KL_ACT_SWISH, 1, 0, true},
      {"GeluTanh", 0, {0}, KL_ACT_GELU_TANH, 0, 0, true},
      {"Mish", 0, {0}, KL_ACT_COUNT, 0, 0, false},
      {"Elu", 1, {1}, KL_ACT_COUNT, 0, 0, false},
  };
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
    assert_int_equal(kl_node_set_string(g, n, "activation", acts[i].name, NULL), KILN_OK);
    if (acts[i].n_p)
      assert_int_equal(kl_node_set_floats(g, n, "activation_params", acts[i].p, acts[i].n_p,
                                          NULL),
                       KILN_OK);
    bool ok = kl_isa_fused_act(&g->nodes[n], &has, &act);
    if (ok != acts[i].ok) fail_msg("%s: kl_isa_fused_act said %d", acts[i].name, ok);
    assert_true(has);
    if (!ok) continue;
    assert_int_equal(act.kind, acts[i].kind);
    assert_true(act.alpha == acts[i].alpha && act.beta == acts[i].beta);
  }
  kl_graph_free(g);
}

/* ---- whole nodes through sessions ---- */

/* A graph input; batch: its first dim is the symbol "batch". */
static int graph_input(kl_graph *g, const char *name, int rank, const int64_t *dims,
                       bool batch) {
  int v = tu_graph_input(g, name, KL_F32, rank, dims);
  if (batch) g->values[v].type.dims[0] = (kl_dim){-1, kl_graph_symbol(g, "batch")};
  return v;
}

/* The weights are named "W", so that they can be found in the loaded model. */
static int graph_const(kl_graph *g, const char *name, int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  float *d = rand_floats((size_t)n, 1.0f);
  int v = tu_graph_const(g, name, KL_F32, rank, dims, d);
  free(d);
  return v;
}

/* g as ONNX bytes (g is freed), loaded as often as a test needs a fresh model. */
typedef struct onnx_buf {
  void *data;
  size_t len;
} onnx_buf;

static onnx_buf export_graph(kl_graph *g) {
  onnx_buf b;
  kl_err e = {0};
  if (kl_onnx_export(g, &b.data, &b.len, &e) != KILN_OK) fail_msg("export: %s", e.msg);
  kl_graph_free(g);
  return b;
}

static kiln_model *load(const onnx_buf *b) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "opt_level", 0), KILN_OK);
  kiln_model *m = NULL;
  if (kiln_model_load_memory(b->data, b->len, o, &m) != KILN_OK)
    fail_msg("load: %s", kiln_model_error(m));
  kiln_options_free(o);
  return m;
}

static const kl_value *named(const kiln_model *m, const char *name) {
  for (int v = 0; v < m->g->n_values; v++)
    if (m->g->values[v].name && strcmp(m->g->values[v].name, name) == 0)
      return &m->g->values[v];
  fail_msg("no value %s in the model", name);
  return NULL;
}

static kiln_session *session(const kiln_model *m, bool reference, bool release, int threads) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "reference", reference), KILN_OK);
  if (release) assert_int_equal(kiln_options_set_int(o, "release_weights", 1), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "threads", threads), KILN_OK);
  kiln_session *s = NULL;
  if (kiln_session_create(m, o, &s) != KILN_OK) fail_msg("session: %s", kiln_session_error(s));
  kiln_options_free(o);
  return s;
}

/* Random inputs for m, whose symbolic dims are `batch`. */
typedef struct inputs {
  int n;
  int rank[4];
  int64_t dims[4][KL_MAX_RANK];
  float *data[4];
} inputs;

static void make_inputs(const kiln_model *m, int64_t batch, inputs *in) {
  in->n = kiln_model_input_count(m);
  assert_true(in->n <= 4);
  for (int i = 0; i < in->n; i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    in->rank[i] = info.rank;
    int64_t n = 1;
    for (int d = 0; d < info.rank; d++)
      n *= in->dims[i][d] = info.dims[d] < 0 ? batch : info.dims[d];
    in->data[i] = rand_floats((size_t)n, 2.0f);
  }
}

static void free_inputs(inputs *in) {
  for (int i = 0; i < in->n; i++) free(in->data[i]);
}

/* Output 0 of a run of s on in (a copy, with its element count). */
static float *run(kiln_session *s, const kiln_model *m, const inputs *in, int64_t *count) {
  for (int i = 0; i < in->n; i++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_input_info(m, i, &info), KILN_OK);
    int64_t n = 1;
    for (int d = 0; d < in->rank[i]; d++) n *= in->dims[i][d];
    assert_int_equal(kiln_session_set_input(s, info.name, KILN_DTYPE_FLOAT32, in->rank[i],
                                            in->dims[i], in->data[i], sizeof(float) * (size_t)n),
                     KILN_OK);
  }
  if (kiln_session_run(s) != KILN_OK) fail_msg("run: %s", kiln_session_error(s));
  return tu_output0_f32(s, count);
}

/* got against the reference's want; k, the length of the dot products, scales the
 * tolerance (|x| <= 2, |w| <= 1: float rounding grows with the terms summed). */
static void compare(const char *what, const char *how, int64_t rows, const float *got,
                    int64_t n_got, const float *want, int64_t n_want, int64_t k) {
  if (n_got != n_want)
    fail_msg("%s, %s (rows %lld): %lld elements, the reference %lld", what, how,
             (long long)rows, (long long)n_got, (long long)n_want);
  double tol = 2e-7 * (double)(k + 16);
  for (int64_t i = 0; i < n_want; i++)
    if (!(fabs((double)got[i] - want[i]) <= tol * (1 + fabs((double)want[i]))))
      fail_msg("%s, %s (rows %lld): element %lld is %.8g, the reference %.8g", what, how,
               (long long)rows, (long long)i, (double)got[i], (double)want[i]);
}

/* Whether a fast session runs Gemm / MatMul on dnnl.c (and so one-row runs on kiln's
 * product, which packs the weights in panels on its first run). */
static bool dnnl_on(void) {
#if KL_HAVE_DNNL
  return kl_dnnl_usable();
#else
  return false;
#endif
}

/* Whether a fast session packs a oneDNN matmul's weights, freeing the plain copy under
 * release_weights (at AVX-512; below, oneDNN may read them plain). */
static bool dnnl_packs(void) { return dnnl_on() && kl_isa_level() >= KL_ISA_AVX512; }

/* Runs g (its weights the constant "W") on row counts rows[] in order, in one fast
 * session per setting (release_weights off and on, 1 and 2 threads), each run against
 * the reference kernels. one_row: the graph's types make every run kiln's product (one
 * row, or more at a level with fast tiles), so release_weights frees the plain weights
 * once the first run has packed them in panels;
 * else, when a run of more than one row came first, release_weights has freed them
 * (oneDNN packed them), and the later one-row runs must still be right. */
/* Whether kiln's product runs the node under test (check_node): false for an
 * activation it has no primitive for. */
static bool kiln_runs_it = true;
/* Whether oneDNN holds the weights packed (its own layout) for this graph's product, so
 * that release_weights frees the plain copy: not for a batched product whose addend
 * keeps the batch dims apart (its weights broadcast over the batch, in their plain
 * layout, which then is the copy oneDNN reads). */
static bool onednn_packs_it = true;

/* The graph's weights have KL_GEMM_BIG_WEIGHTS floats or more (the tiles take any
 * number of rows). */
static bool big_weights = false;

/* The kernel that must have run a node of `rows` rows: kiln's product for one row, and
 * for more (up to KL_GEMM_MAX_ROWS, or any number on big weights) at a level whose
 * tiles are fast (kl_gemv_fns.rows_fast); else NULL (oneDNN's). */
static const char *product_kernel(int64_t rows) {
  if (!dnnl_on() || !kiln_runs_it) return NULL;
  if (rows <= 1) return "gemv";
  return kl_cpu_isa_fns(kl_isa_level())->gemv->rows_fast &&
                 (rows <= KL_GEMM_MAX_ROWS || big_weights)
             ? "gemm"
             : NULL;
}

static void check_node(kl_graph *g, const char *what, const int64_t *rows, int n_rows,
                       int64_t k, bool one_row) {
  onnx_buf buf = export_graph(g);
  kiln_model *m = load(&buf);
  inputs in[8];
  float *want[8];
  int64_t n_want[8];
  assert_true(n_rows <= 8);
  kiln_session *ref = session(m, true, false, 1);
  for (int r = 0; r < n_rows; r++) {
    make_inputs(m, rows[r], &in[r]);
    want[r] = run(ref, m, &in[r], &n_want[r]);
  }
  kiln_session_free(ref);
  kiln_model_free(m);
  for (int release = 0; release < 2; release++)
    for (int threads = 1; threads <= 2; threads++) {
      char how[64];
      snprintf(how, sizeof how, "release_weights %d, %d thread(s)", release, threads);
      m = load(&buf);
      kiln_session *s = session(m, false, release, threads);
      bool many = false;
      for (int r = 0; r < n_rows; r++) {
        int64_t n_got;
        for (int again = 0; again < 2; again++) { /* the second from the cache */
          float *got = run(s, m, &in[r], &n_got);
          compare(what, how, rows[r], got, n_got, want[r], n_want[r], k);
          free(got);
          const char *kernel = product_kernel(rows[r]), *ran = kl_session_kernel_name(s, 0);
          if (kernel && strcmp(ran, kernel) != 0) /* no silent fallback to oneDNN */
            fail_msg("%s, %s (rows %lld): ran on '%s', not kiln's %s", what, how,
                     (long long)rows[r], ran, kernel);
          if (!kernel && dnnl_on() && (!strcmp(ran, "gemm") || !strcmp(ran, "gemv")))
            fail_msg("%s, %s (rows %lld): ran on kiln's %s, which must leave it to oneDNN",
                     what, how, (long long)rows[r], ran);
        }
        many |= rows[r] > 1;
        const void *w = named(m, "W")->data;
        const char *ran = kl_session_kernel_name(s, 0);
        if (!release && !w) fail_msg("%s, %s: the weights were freed", what, how);
        else if (release && one_row && dnnl_on() && w) /* the panels are the only copy */
          fail_msg("%s, %s (rows %lld, ran on '%s'): the plain weights are kept beside the "
                   "panels", what, how, (long long)rows[r], ran);
        else if (release && !one_row && many && dnnl_packs() && onednn_packs_it &&
                 w) /* packed for the bigger run */
          fail_msg("%s, %s (rows %lld, ran on '%s'): the plain weights are kept beside "
                   "oneDNN's packed ones", what, how, (long long)rows[r], ran);
      }
      kiln_session_free(s);
      kiln_model_free(m);
    }
  for (int r = 0; r < n_rows; r++) {
    free_inputs(&in[r]);
    free(want[r]);
  }
  free(buf.data);
}

static int add_node(kl_graph *g, kl_op op, int n_in, const int *in) {
  int y = kl_graph_add_value(g, NULL, NULL);
  assert_true(y >= 0);
  int n = kl_graph_add_node(g, op, NULL, n_in, in, 1, &y, NULL);
  assert_true(n >= 0);
  assert_int_equal(kl_graph_add_output(g, y, NULL), KILN_OK);
  return n;
}

static const int64_t one[] = {1}, dyn[] = {1, 3, 1, 2, 1};

/* Gemm A [1, K] (or [K, 1] with transA) x W [N, K] (transB) or [K, N], C [N], [1, N],
 * scalar or none, alpha and beta. */
static void test_gemm(void **state) {
  (void)state;
  static const struct {
    const char *what;
    int64_t k, n;
    bool ta, tb;
    float alpha, beta;
    int c_rank; /* -1: no C */
    int64_t c_dims[2];
  } cases[] = {
      {"gemm transB=1 C [N]", 100, 17, false, true, 1, 1, 1, {17}},
      {"gemm transB=0 C [1, N]", 63, 1031, false, false, 1, 1, 2, {1, 1031}},
      {"gemm transA alpha beta", 1031, 15, true, true, 0.5f, -2, 1, {15}},
      {"gemm transA transB=0 C scalar", 17, 3, true, false, 1, 0.25f, 0, {0}},
      {"gemm no C alpha", 16, 1, false, true, 1.5f, 1, -1, {0}},
      {"gemm beta 0", 15, 63, false, false, 1, 0, 1, {63}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kl_graph *g = kl_graph_new();
    int64_t k = cases[i].k, n = cases[i].n;
    int64_t a_dims[2] = {cases[i].ta ? k : 1, cases[i].ta ? 1 : k};
    int64_t w_dims[2] = {cases[i].tb ? n : k, cases[i].tb ? k : n};
    int a = graph_input(g, "a", 2, a_dims, false);
    int w = graph_const(g, "W", 2, w_dims);
    int c = cases[i].c_rank >= 0 ? graph_const(g, "C", cases[i].c_rank, cases[i].c_dims)
                                 : KL_ABSENT;
    int nd = add_node(g, KL_OP_Gemm, c == KL_ABSENT ? 2 : 3, (int[]){a, w, c});
    assert_int_equal(kl_node_set_int(g, nd, "transA", cases[i].ta, NULL), KILN_OK);
    assert_int_equal(kl_node_set_int(g, nd, "transB", cases[i].tb, NULL), KILN_OK);
    assert_int_equal(kl_node_set_float(g, nd, "alpha", cases[i].alpha, NULL), KILN_OK);
    assert_int_equal(kl_node_set_float(g, nd, "beta", cases[i].beta, NULL), KILN_OK);
    check_node(g, cases[i].what, one, 1, k, true);
  }
  /* rows from a symbolic dim: one, then three (oneDNN, packing), then one again */
  kl_graph *g = kl_graph_new();
  int a = graph_input(g, "a", 2, (int64_t[]){1, 300}, true);
  int w = graph_const(g, "W", 2, (int64_t[]){77, 300});
  int c = graph_const(g, "C", 1, (int64_t[]){77});
  int nd = add_node(g, KL_OP_Gemm, 3, (int[]){a, w, c});
  assert_int_equal(kl_node_set_int(g, nd, "transB", 1, NULL), KILN_OK);
  check_node(g, "gemm rows 1, 3, 1, 2, 1", dyn, 5, 300, false);
  g = kl_graph_new(); /* the same with W [K, N] */
  a = graph_input(g, "a", 2, (int64_t[]){1, 129}, true);
  w = graph_const(g, "W", 2, (int64_t[]){129, 1000});
  nd = add_node(g, KL_OP_Gemm, 2, (int[]){a, w});
  check_node(g, "gemm transB=0 rows 1, 3, 1, 2, 1", dyn, 5, 129, false);
}

static void set_act(kl_graph *g, int n, const char *act, int n_p, const float *p) {
  assert_int_equal(kl_node_set_string(g, n, "activation", act, NULL), KILN_OK);
  if (n_p)
    assert_int_equal(kl_node_set_floats(g, n, "activation_params", p, n_p, NULL), KILN_OK);
}

/* FusedGemm: C, Sum (an input, so Y may take its buffer) and an activation. */
static void test_fused_gemm(void **state) {
  (void)state;
  kl_graph *g = kl_graph_new();
  int a = graph_input(g, "a", 2, (int64_t[]){1, 1031}, false);
  int sum = graph_input(g, "sum", 2, (int64_t[]){1, 100}, false);
  int w = graph_const(g, "W", 2, (int64_t[]){100, 1031});
  int c = graph_const(g, "C", 1, (int64_t[]){100});
  int nd = add_node(g, KL_OP_KilnFusedGemm, 4, (int[]){a, w, c, sum});
  assert_int_equal(kl_node_set_int(g, nd, "transB", 1, NULL), KILN_OK);
  set_act(g, nd, "Relu", 0, NULL);
  check_node(g, "FusedGemm Relu + C + Sum", one, 1, 1031, true);

  g = kl_graph_new(); /* W [K, N], a Sum of one value, LeakyRelu, alpha */
  a = graph_input(g, "a", 2, (int64_t[]){1, 63}, false);
  sum = graph_input(g, "sum", 1, (int64_t[]){1}, false);
  w = graph_const(g, "W", 2, (int64_t[]){63, 1001});
  c = graph_const(g, "C", 2, (int64_t[]){1, 1001});
  nd = add_node(g, KL_OP_KilnFusedGemm, 4, (int[]){a, w, c, sum});
  assert_int_equal(kl_node_set_float(g, nd, "alpha", 0.75f, NULL), KILN_OK);
  set_act(g, nd, "LeakyRelu", 1, (float[]){0.1f});
  check_node(g, "FusedGemm LeakyRelu + Sum scalar", one, 1, 63, true);

  g = kl_graph_new(); /* dynamic rows, Clip */
  a = graph_input(g, "a", 2, (int64_t[]){1, 200}, true);
  w = graph_const(g, "W", 2, (int64_t[]){33, 200});
  c = graph_const(g, "C", 1, (int64_t[]){33});
  nd = add_node(g, KL_OP_KilnFusedGemm, 3, (int[]){a, w, c});
  assert_int_equal(kl_node_set_int(g, nd, "transB", 1, NULL), KILN_OK);
  set_act(g, nd, "Clip", 2, (float[]){-1.0f, 1.5f});
  check_node(g, "FusedGemm Clip rows 1, 3, 1, 2, 1", dyn, 5, 200, false);
}

/* MatMul [1, K] and [1, 1, K] and [K] x W [K, N]; FusedMatMul with Bias, Sum,
 * activations; a symbolic row count. */
static void test_matmul(void **state) {
  (void)state;
  static const struct {
    const char *what;
    int rank;
    int64_t a[3];
    int64_t n;
  } cases[] = {
      {"matmul [1, K]", 2, {1, 1031}, 17},
      {"matmul [1, 1, K]", 3, {1, 1, 100}, 63},
      {"matmul [K]", 1, {15}, 16},
      {"matmul [1, 3] x [3, 1]", 2, {1, 3}, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kl_graph *g = kl_graph_new();
    int64_t k = cases[i].a[cases[i].rank - 1];
    int a = graph_input(g, "a", cases[i].rank, cases[i].a, false);
    int w = graph_const(g, "W", 2, (int64_t[]){k, cases[i].n});
    add_node(g, KL_OP_MatMul, 2, (int[]){a, w});
    check_node(g, cases[i].what, one, 1, k, true);
  }
  kl_graph *g = kl_graph_new();
  int a = graph_input(g, "a", 3, (int64_t[]){1, 1, 300}, false);
  int sum = graph_input(g, "sum", 3, (int64_t[]){1, 1, 100}, false);
  int w = graph_const(g, "W", 2, (int64_t[]){300, 100});
  int b = graph_const(g, "bias", 1, (int64_t[]){100});
  int nd = add_node(g, KL_OP_KilnFusedMatMul, 4, (int[]){a, w, b, sum});
  set_act(g, nd, "Gelu", 0, NULL);
  check_node(g, "FusedMatMul Gelu + Bias + Sum", one, 1, 300, true);

  g = kl_graph_new();
  a = graph_input(g, "a", 2, (int64_t[]){1, 64}, false);
  w = graph_const(g, "W", 2, (int64_t[]){64, 48});
  b = graph_const(g, "bias", 2, (int64_t[]){1, 48});
  nd = add_node(g, KL_OP_KilnFusedMatMul, 3, (int[]){a, w, b});
  set_act(g, nd, "HardSigmoid", 2, (float[]){0.2f, 0.5f});
  check_node(g, "FusedMatMul HardSigmoid + Bias", one, 1, 64, true);

  g = kl_graph_new(); /* Mish: the GEMV has no primitive for it, oneDNN runs it */
  a = graph_input(g, "a", 2, (int64_t[]){1, 64}, false);
  w = graph_const(g, "W", 2, (int64_t[]){64, 48});
  nd = add_node(g, KL_OP_KilnFusedMatMul, 2, (int[]){a, w});
  set_act(g, nd, "Mish", 0, NULL);
  kiln_runs_it = false;
  check_node(g, "FusedMatMul Mish", one, 1, 64, false);
  kiln_runs_it = true;

  g = kl_graph_new();
  a = graph_input(g, "a", 3, (int64_t[]){1, 1, 500}, true);
  w = graph_const(g, "W", 2, (int64_t[]){500, 40});
  b = graph_const(g, "bias", 1, (int64_t[]){40});
  nd = add_node(g, KL_OP_KilnFusedMatMul, 3, (int[]){a, w, b});
  set_act(g, nd, "Silu", 0, NULL);
  check_node(g, "FusedMatMul Silu rows 1, 3, 1, 2, 1", dyn, 5, 500, false);
}

/* Runs of many rows whose shapes the graph fixes (at a level with fast tiles the node
 * makes no oneDNN primitive, and under release_weights its panels are the model's own
 * buffer): batch dims, a row block and a half, addends per row and per element. */
static void test_many_rows(void **state) {
  (void)state;
  static const int64_t fixed[] = {2}; /* no symbolic dims: "more than one row" */
  bool tiles = product_kernel(2) != NULL; /* then release_weights packs W in place */
  kl_graph *g = kl_graph_new();
  int a = graph_input(g, "a", 3, (int64_t[]){2, 5, 129}, false);
  int w = graph_const(g, "W", 2, (int64_t[]){129, 40});
  add_node(g, KL_OP_MatMul, 2, (int[]){a, w});
  check_node(g, "matmul [2, 5, K] x [K, N]", fixed, 1, 129, tiles);

  g = kl_graph_new(); /* C [M, 1]: one addend per row */
  a = graph_input(g, "a", 2, (int64_t[]){7, 300}, false);
  w = graph_const(g, "W", 2, (int64_t[]){77, 300});
  int c = graph_const(g, "C", 2, (int64_t[]){7, 1});
  int nd = add_node(g, KL_OP_Gemm, 3, (int[]){a, w, c});
  assert_int_equal(kl_node_set_int(g, nd, "transB", 1, NULL), KILN_OK);
  assert_int_equal(kl_node_set_float(g, nd, "beta", 0.5f, NULL), KILN_OK);
  check_node(g, "gemm [7, K] C [M, 1] beta", fixed, 1, 300, tiles);

  g = kl_graph_new(); /* C [M, N], alpha */
  a = graph_input(g, "a", 2, (int64_t[]){4, 33}, false);
  w = graph_const(g, "W", 2, (int64_t[]){33, 1000});
  c = graph_const(g, "C", 2, (int64_t[]){4, 1000});
  nd = add_node(g, KL_OP_Gemm, 3, (int[]){a, w, c});
  assert_int_equal(kl_node_set_float(g, nd, "alpha", -1.5f, NULL), KILN_OK);
  check_node(g, "gemm [4, K] C [M, N] alpha", fixed, 1, 33, tiles);

  g = kl_graph_new(); /* the most rows the tiles take; Bias, Sum [M, N], Gelu */
  a = graph_input(g, "a", 2, (int64_t[]){KL_GEMM_MAX_ROWS, 300}, false);
  int sum = graph_input(g, "sum", 2, (int64_t[]){KL_GEMM_MAX_ROWS, 100}, false);
  w = graph_const(g, "W", 2, (int64_t[]){300, 100});
  int b = graph_const(g, "bias", 1, (int64_t[]){100});
  nd = add_node(g, KL_OP_KilnFusedMatMul, 4, (int[]){a, w, b, sum});
  set_act(g, nd, "Gelu", 0, NULL);
  check_node(g, "FusedMatMul [KL_GEMM_MAX_ROWS, K] Gelu + Bias + Sum [M, N]", fixed, 1, 300, tiles);

  g = kl_graph_new(); /* an addend that broadcasts along one batch dim only: oneDNN */
  a = graph_input(g, "a", 3, (int64_t[]){2, 3, 20}, false);
  sum = graph_input(g, "sum", 3, (int64_t[]){1, 3, 16}, false);
  w = graph_const(g, "W", 2, (int64_t[]){20, 16});
  nd = add_node(g, KL_OP_KilnFusedMatMul, 3, (int[]){a, w, sum});
  kiln_runs_it = onednn_packs_it = false;
  check_node(g, "FusedMatMul [2, 3, K] + Sum [1, 3, N]", fixed, 1, 20, false);
  kiln_runs_it = onednn_packs_it = true;

  g = kl_graph_new(); /* more rows than the tiles take (KL_GEMM_MAX_ROWS): oneDNN */
  a = graph_input(g, "a", 3, (int64_t[]){3, (KL_GEMM_MAX_ROWS + 2) / 3, 24}, false);
  w = graph_const(g, "W", 2, (int64_t[]){24, 17});
  add_node(g, KL_OP_MatMul, 2, (int[]){a, w});
  kiln_runs_it = false; /* (fixed says "more than one row", not how many) */
  check_node(g, "matmul [3, M / 3, K] past the tiles' rows", fixed, 1, 24, false);
  kiln_runs_it = true;

  /* past the tiles' rows, on weights of KL_GEMM_BIG_WEIGHTS floats (4099 x 1025, a
   * partial panel, Faster R-CNN's box head in small): the tiles, + Bias, Relu */
  g = kl_graph_new();
  a = graph_input(g, "a", 2, (int64_t[]){KL_GEMM_MAX_ROWS + 21, 4099}, false);
  w = graph_const(g, "W", 2, (int64_t[]){1025, 4099});
  b = graph_const(g, "bias", 1, (int64_t[]){1025});
  nd = add_node(g, KL_OP_KilnFusedGemm, 3, (int[]){a, w, b});
  assert_int_equal(kl_node_set_int(g, nd, "transB", 1, NULL), KILN_OK);
  set_act(g, nd, "Relu", 0, NULL);
  _Static_assert(4099 * 1025 >= KL_GEMM_BIG_WEIGHTS, "the weights must be big");
  big_weights = true;
  check_node(g, "FusedGemm [M > KL_GEMM_MAX_ROWS, K] x W [N, K] big + Bias, Relu", fixed,
             1, 4099, tiles);
  big_weights = false;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pack),       cmocka_unit_test(test_primitives),
      cmocka_unit_test(test_tiles),      cmocka_unit_test(test_long_k),
      cmocka_unit_test(test_driver),
      cmocka_unit_test(test_row_counts),
      cmocka_unit_test(test_pack_rows),
      cmocka_unit_test(test_fused_act),  cmocka_unit_test(test_gemm),
      cmocka_unit_test(test_fused_gemm), cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_many_rows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
