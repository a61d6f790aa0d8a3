/* Matrix-vector products on panel-packed weights (isa_fns.h, kl_gemv_fns) in plain C
 * for the auto-vectorizer: the 16 outputs of a panel are 16 independent sums, so the
 * inner loop runs along them (a vector), never reassociating a sum. */
#include "backends/cpu/isa/isa_fns.h"

#include <string.h>

static void gemv_panel(const float *x, const float *wp, size_t k, float *y, size_t n) {
  for (size_t at = 0; at < n; at += KL_GEMV_PANEL, wp += KL_GEMV_PANEL * k) {
    float acc[KL_GEMV_PANEL] = {0};
    for (size_t j = 0; j < k; j++) {
      const float *row = wp + j * KL_GEMV_PANEL;
      float xj = x[j];
      for (int l = 0; l < KL_GEMV_PANEL; l++) acc[l] += xj * row[l];
    }
    size_t len = n - at < KL_GEMV_PANEL ? n - at : KL_GEMV_PANEL;
    memcpy(y + at, acc, sizeof(float) * len);
  }
}

const kl_gemv_fns kl_gemv_generic = {gemv_panel};
