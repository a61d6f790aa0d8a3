/* Reference matrix products: Gemm and MatMul. Accumulates in double.
 *
 * Gemm: A [M, K] (or [K, M] with transA), B [K, N] (or [N, K] with transB), optional
 *   C broadcastable to [M, N] (unidirectionally); Y [M, N] = alpha * A'B' + beta * C.
 * MatMul: NumPy matmul. A [..., M, K], B [..., K, N], batch dims broadcast; a 1-D A is
 *   a row [1, K] and a 1-D B a column [K, 1], whose 1 is dropped from Y.
 */
#include "backends/cpu/ref/ref.h"

/* Element (r, col) of a matrix stored row-major with `cols` columns, read transposed
 * when trans is set. */
static double mat_at(const kl_tensor *t, int64_t base, int64_t cols, bool trans,
                     int64_t r, int64_t col) {
  int64_t i = trans ? col * cols + r : r * cols + col;
  return kl_ref_load(t->data, t->dtype, base + i);
}

int kl_ref_gemm(kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[1], *cc = c->n_in > 2 ? c->in[2] : NULL;
  kl_tensor *y = c->out[0];
  bool ta = kl_attr_int(c->node, "transA", 0) != 0, tb = kl_attr_int(c->node, "transB", 0) != 0;
  double alpha = kl_attr_float(c->node, "alpha", 1.0f);
  double beta = kl_attr_float(c->node, "beta", 1.0f);
  int64_t m_size = y->dims[0], n_size = y->dims[1], k_size = a->dims[ta ? 0 : 1];
  kl_ref_iter it;
  kl_ref_iter_init(&it, 2, y->dims);
  if (cc) kl_ref_iter_bcast(&it, 0, cc->rank, cc->dims, 1);
  for (int64_t m = 0; m < m_size; m++)
    for (int64_t n = 0; n < n_size; n++, kl_ref_iter_next(&it)) {
      double acc = 0;
      for (int64_t k = 0; k < k_size; k++)
        acc += mat_at(a, 0, a->dims[1], ta, m, k) * mat_at(b, 0, b->dims[1], tb, k, n);
      double v = alpha * acc;
      if (cc) v += beta * kl_ref_load(cc->data, cc->dtype, it.off[0]);
      kl_ref_store(y->data, y->dtype, m * n_size + n, v);
    }
  return KILN_OK;
}

/* A matrix operand of MatMul: batch dims, then rows x cols. */
typedef struct mat_view {
  int batch_rank;
  const int64_t *batch;
  int64_t rows, cols;
} mat_view;

static mat_view view_of(const kl_tensor *t, bool is_b) {
  mat_view v = {0, t->dims, 1, t->dims[0]};
  if (t->rank == 1) {
    if (is_b) v = (mat_view){0, t->dims, t->dims[0], 1};
    return v;
  }
  v.batch_rank = t->rank - 2;
  v.rows = t->dims[t->rank - 2];
  v.cols = t->dims[t->rank - 1];
  return v;
}

int kl_ref_matmul(kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  kl_tensor *y = c->out[0];
  mat_view va = view_of(a, false), vb = view_of(b, true);
  int64_t m_size = va.rows, n_size = vb.cols, k_size = va.cols;
  /* Batch dims of Y: all of Y's dims except the matrix ones. */
  int batch_rank = y->rank - (a->rank > 1) - (b->rank > 1);
  kl_ref_iter it;
  kl_ref_iter_init(&it, batch_rank, y->dims);
  kl_ref_iter_bcast(&it, 0, va.batch_rank, va.batch, m_size * k_size);
  kl_ref_iter_bcast(&it, 1, vb.batch_rank, vb.batch, k_size * n_size);
  int64_t batches = kl_ref_span(y->dims, 0, batch_rank), i = 0;
  for (int64_t bi = 0; bi < batches; bi++, kl_ref_iter_next(&it))
    for (int64_t m = 0; m < m_size; m++)
      for (int64_t n = 0; n < n_size; n++) {
        double acc = 0;
        for (int64_t k = 0; k < k_size; k++)
          acc += mat_at(a, it.off[0], k_size, false, m, k) *
                 mat_at(b, it.off[1], n_size, false, k, n);
        kl_ref_store(y->data, y->dtype, i++, acc);
      }
  return KILN_OK;
}
