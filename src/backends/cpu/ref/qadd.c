/* QLinearAdd and QLinearMul (kiln's domain; pass fold_qdq makes them from
 * DequantizeLinear, DequantizeLinear -> Add or Mul -> QuantizeLinear): each operand
 * dequantized in float32, (x - zero_point) * scale, the two added or multiplied in
 * float32, and the result quantized,
 * saturate(rint(sum / C_scale) + C_zero_point) with the division in float32 and NaN
 * giving the zero point: exactly what the three nodes compute (ref/quant.c,
 * ref/elementwise.c), so that the fold changes no bit. NumPy broadcasting. */
#include "backends/cpu/ref/ref.h"

#include <math.h>

static float param(const kl_tensor *t) { return *(const float *)t->data; }

int kl_ref_qlinear_add(kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[3];
  kl_tensor *y = c->out[0];
  bool mul = c->node->op == KL_OP_KilnQLinearMul;
  float sa = param(c->in[1]), sb = param(c->in[4]), sc = param(c->in[6]);
  int64_t za = kl_ref_load_int(c->in[2]->data, c->in[2]->dtype, 0);
  int64_t zb = kl_ref_load_int(c->in[5]->data, c->in[5]->dtype, 0);
  int64_t zc = kl_ref_load_int(c->in[7]->data, c->in[7]->dtype, 0);
  double lo = y->dtype == KL_U8 ? 0 : -128, hi = y->dtype == KL_U8 ? 255 : 127;
  kl_ref_iter it;
  kl_ref_iter_init(&it, y->rank, y->dims);
  kl_ref_iter_bcast(&it, 0, a->rank, a->dims, 1);
  kl_ref_iter_bcast(&it, 1, b->rank, b->dims, 1);
  int64_t n = kl_tensor_numel(y);
  for (int64_t i = 0; i < n; i++, kl_ref_iter_next(&it)) {
    float fa = (float)(kl_ref_load_int(a->data, a->dtype, it.off[0]) - za) * sa;
    float fb = (float)(kl_ref_load_int(b->data, b->dtype, it.off[1]) - zb) * sb;
    float q = (mul ? fa * fb : fa + fb) / sc;
    double v = isnan(q) ? (double)zc : rint((double)q) + (double)zc;
    kl_ref_store_int(y->data, y->dtype, i, (int64_t)(v < lo ? lo : v > hi ? hi : v));
  }
  return KILN_OK;
}

/* QLinearGlobalAveragePool (ops.def): the exact sum of each plane's codes minus the zero
 * point, times x_scale / (y_scale * S), each step rounded to float32 as onnxruntime's
 * MLAS kernel rounds it; NaN (an empty plane) gives the zero point. */
int kl_ref_qlinear_global_pool(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int64_t zx = kl_ref_load_int(c->in[2]->data, c->in[2]->dtype, 0);
  int64_t zy = kl_ref_load_int(c->in[4]->data, c->in[4]->dtype, 0);
  int64_t planes = x->dims[0] * x->dims[1], size = kl_ref_span(x->dims, 2, x->rank);
  for (int64_t p = 0; p < planes; p++) {
    int64_t acc = 0;
    for (int64_t j = 0; j < size; j++) acc += kl_ref_load_int(x->data, x->dtype, p * size + j) - zx;
    kl_ref_store_int(y->data, y->dtype, p, kl_ref_mean_code(acc, param(c->in[1]),
                                                            param(c->in[3]), (float)size, zy,
                                                            y->dtype));
  }
  return KILN_OK;
}

int kl_ref_qlinear_lookup(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  const uint8_t *table = c->in[1]->data;
  uint8_t *y = c->out[0]->data;
  int64_t n = kl_tensor_numel(x);
  for (int64_t i = 0; i < n; i++) {
    int64_t code = kl_ref_load_int(x->data, x->dtype, i) + (x->dtype == KL_I8 ? 128 : 0);
    y[i] = table[code];
  }
  return KILN_OK;
}
