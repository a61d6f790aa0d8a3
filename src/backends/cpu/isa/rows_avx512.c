/* Row primitives (softmax, layer normalization, sums), AVX-512 level, on float rows:
 * rows_avx512_impl.h instantiated for float. */
#include <stdbool.h>
#include <stddef.h>

#define ROW_T float
#define ROW_LOAD(p, m) _mm512_maskz_loadu_ps((m), (p))
#define ROW_STORE(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define ROW_KEEP_EXP 1
#include "backends/cpu/isa/rows_avx512_impl.h"

static void softmax(const float *x, float *y, size_t n, bool log_form) {
  softmax_row(x, y, n, log_form);
}

static void norm(const kl_norm_row *p, const float *x, float *y, float *mean, float *inv) {
  norm_row(p, x, y, mean, inv);
}

const kl_rows_fns kl_rows_avx512 = {softmax, norm, row_sum};
