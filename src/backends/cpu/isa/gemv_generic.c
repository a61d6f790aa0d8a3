/* Matrix-vector products on panel-packed weights (isa_fns.h, kl_gemv_fns) in plain C
 * for the auto-vectorizer: the 16 outputs of a panel are 16 independent sums, so the
 * inner loop runs along them (a vector), never reassociating a sum. */
#include "backends/cpu/isa/isa_fns.h"

#include <string.h>

static void gemv_panel(const float *x, const float *wp, size_t k, float *y, size_t n) {
  for (size_t at = 0; at < n; at += KL_GEMV_PANEL, wp += KL_GEMV_PANEL * k) {
    float acc[KL_GEMV_PANEL] = {0};
    for (size_t j0 = 0; j0 < k; j0 += KL_GEMV_BLOCK) { /* blocks summed apart (isa_fns.h) */
      float part[KL_GEMV_PANEL] = {0};
      size_t end = k - j0 > KL_GEMV_BLOCK ? j0 + KL_GEMV_BLOCK : k;
      for (size_t j = j0; j < end; j++) {
        const float *row = wp + j * KL_GEMV_PANEL;
        float xj = x[j];
        for (int l = 0; l < KL_GEMV_PANEL; l++) part[l] += xj * row[l];
      }
      for (int l = 0; l < KL_GEMV_PANEL; l++) acc[l] += part[l];
    }
    size_t len = n - at < KL_GEMV_PANEL ? n - at : KL_GEMV_PANEL;
    memcpy(y + at, acc, sizeof(float) * len);
  }
}

static void gemm_tile(const float *a, const float *wp, size_t k, size_t m, float *c, size_t ldc,
                      size_t nc, bool acc, const float *pf, size_t npf) {
  (void)pf; /* a hint; the twin fetches nothing ahead */
  (void)npf;
  for (size_t i = 0; i < m; i++) {
    float sum[KL_GEMV_PANEL];
    for (size_t l = 0; l < KL_GEMV_PANEL; l++) sum[l] = 0.0f;
    for (size_t j = 0; j < k; j++) {
      float aj = a[j * KL_GEMM_ROWS + i];
      for (size_t l = 0; l < KL_GEMV_PANEL; l++) sum[l] += aj * wp[j * KL_GEMV_PANEL + l];
    }
    if (acc)
      for (size_t l = 0; l < nc; l++) sum[l] += c[i * ldc + l];
    memcpy(c + i * ldc, sum, sizeof(float) * nc);
  }
}

static void pack_rows(const float *x, size_t k, size_t rows, float *out) {
  for (size_t j = 0; j < k; j++, out += KL_GEMM_ROWS)
    for (size_t i = 0; i < KL_GEMM_ROWS; i++) out[i] = i < rows ? x[i * k + j] : 0.0f;
}

/* The twin of the others' tiles; oneDNN's products are faster than it. */
const kl_gemv_fns kl_gemv_generic = {gemv_panel, gemm_tile, false, pack_rows};
