/* Row primitives on 16 float lanes, for one element type: included by rows_avx512.c
 * (float) and rows_avx512bf16.c (bfloat16), which define first
 *   ROW_T              the element type
 *   ROW_LOAD(p, m)     lanes of m from p, as floats (0 elsewhere)
 *   ROW_STORE(p, m, v) store the lanes of m
 *   ROW_KEEP_EXP       1 when y may hold e^(x - max) between passes (float), 0 when it
 *                      would round it (bfloat16), which then recomputes it instead
 * and then use softmax_row and norm_row. x and y may be the same row.
 */
#include "backends/cpu/isa/vmath_avx512.h"

#include <math.h>

static inline __mmask16 row_mask(size_t n, size_t i) {
  return n - i >= 16 ? (__mmask16)0xffff : kl_z_tail(n - i);
}

static float row_sum(const ROW_T *x, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) { /* four chains of additions, to hide their latency */
    a0 = _mm512_add_ps(a0, ROW_LOAD(x + i, 0xffff));
    a1 = _mm512_add_ps(a1, ROW_LOAD(x + i + 16, 0xffff));
    a2 = _mm512_add_ps(a2, ROW_LOAD(x + i + 32, 0xffff));
    a3 = _mm512_add_ps(a3, ROW_LOAD(x + i + 48, 0xffff));
  }
  for (; i < n; i += 16) a0 = _mm512_add_ps(a0, ROW_LOAD(x + i, row_mask(n, i)));
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* The largest element; NaN is skipped (max returns the accumulator, its second
 * operand), and reaches the result through the sum of exponentials instead. */
static float row_max(const ROW_T *x, size_t n) {
  __m512 a0 = _mm512_set1_ps(-INFINITY), a1 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_max_ps(ROW_LOAD(x + i, 0xffff), a0);
    a1 = _mm512_max_ps(ROW_LOAD(x + i + 16, 0xffff), a1);
  }
  for (; i < n; i += 16) {
    __mmask16 m = row_mask(n, i);
    a0 = _mm512_mask_max_ps(a0, m, ROW_LOAD(x + i, m), a0);
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
}

/* sum of e^(x - max), storing each term in y unless y is NULL */
static float exp_sum(const ROW_T *x, float max, ROW_T *y, size_t n) {
  const __m512 vmax = _mm512_set1_ps(max);
  __m512 acc = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = row_mask(n, i);
    __m512 e = kl_z_exp(_mm512_sub_ps(ROW_LOAD(x + i, m), vmax));
    acc = _mm512_mask_add_ps(acc, m, acc, e);
    if (y) ROW_STORE(y + i, m, e);
  }
  return _mm512_reduce_add_ps(acc);
}

static void softmax_row(const ROW_T *x, ROW_T *y, size_t n, bool log_form) {
  float max = row_max(x, n);
  const __m512 vmax = _mm512_set1_ps(max);
  if (log_form) { /* (x - max) - lse: x - max is exact near the max, so keep it apart */
    const __m512 lse = _mm512_set1_ps((float)log((double)exp_sum(x, max, NULL, n)));
    for (size_t i = 0; i < n; i += 16) {
      __mmask16 m = row_mask(n, i);
      ROW_STORE(y + i, m, _mm512_sub_ps(_mm512_sub_ps(ROW_LOAD(x + i, m), vmax), lse));
    }
    return;
  }
  float sum = exp_sum(x, max, ROW_KEEP_EXP ? y : NULL, n);
  const __m512 inv = _mm512_set1_ps(1.0f / sum);
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = row_mask(n, i);
    __m512 e = ROW_KEEP_EXP ? ROW_LOAD(y + i, m)
                            : kl_z_exp(_mm512_sub_ps(ROW_LOAD(x + i, m), vmax));
    ROW_STORE(y + i, m, _mm512_mul_ps(e, inv));
  }
}

/* sum of (x - mean)^2 */
static float sq_dev(const ROW_T *x, float mean, size_t n) {
  const __m512 vm = _mm512_set1_ps(mean);
  __m512 a0 = _mm512_setzero_ps(), a1 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 d0 = _mm512_sub_ps(ROW_LOAD(x + i, 0xffff), vm);
    __m512 d1 = _mm512_sub_ps(ROW_LOAD(x + i + 16, 0xffff), vm);
    a0 = _mm512_fmadd_ps(d0, d0, a0);
    a1 = _mm512_fmadd_ps(d1, d1, a1);
  }
  for (; i < n; i += 16) {
    __mmask16 m = row_mask(n, i);
    __m512 d = _mm512_maskz_sub_ps(m, ROW_LOAD(x + i, m), vm);
    a0 = _mm512_fmadd_ps(d, d, a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static void norm_row(const kl_norm_row *p, const ROW_T *x, ROW_T *y, float *mean_out,
                     float *inv_out) {
  size_t n = p->n;
  float mean, inv;
  KL_NORM_STATS(row_sum, sq_dev, x, p, &mean, &inv);
  const ROW_T *scale = p->scale, *bias = p->bias;
  const __m512 vm = _mm512_set1_ps(mean), vi = _mm512_set1_ps(inv);
  const __m512 s1 = _mm512_set1_ps(p->scale1), b1 = _mm512_set1_ps(p->bias1);
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = row_mask(n, i);
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(ROW_LOAD(x + i, m), vm), vi);
    __m512 b = bias ? ROW_LOAD(bias + i, m) : b1;
    ROW_STORE(y + i, m, _mm512_fmadd_ps(v, scale ? ROW_LOAD(scale + i, m) : s1, b));
  }
  *mean_out = mean;
  *inv_out = inv;
}
