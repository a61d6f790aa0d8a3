/* Row primitives on bfloat16 rows, AVX512_BF16 level: rows_avx512_impl.h instantiated
 * for bfloat16, statistics in float, one rounding per output. */
#include "backends/cpu/isa/bf16_avx512.h"

#define ROW_T uint16_t
#define ROW_LOAD(p, m) kl_bf_load((p), (m))
#define ROW_STORE(p, m, v) kl_bf_store((p), (m), (v))
#define ROW_KEEP_EXP 0
#include "backends/cpu/isa/rows_avx512_impl.h"

static void softmax(const uint16_t *x, uint16_t *y, size_t n, bool log_form) {
  softmax_row(x, y, n, log_form);
}

static void norm(const kl_norm_row *p, const uint16_t *x, uint16_t *y, float *mean,
                 float *inv) {
  norm_row(p, x, y, mean, inv);
}

const kl_rows_bf16_fns kl_rows_avx512bf16 = {softmax, norm};
