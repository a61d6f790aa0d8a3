/* Winograd F(2x2, 3x3) tile transforms, generic level (isa_fns.h has the matrices):
 * channel by channel, in the order the AVX2 level computes them, so both round alike. */
#include "backends/cpu/isa/isa_fns.h"

static void in_tile(const float *const *d, size_t c, float *v, size_t stride) {
  for (size_t i = 0; i < c; i++) {
    float t[16], r[16];
    for (int k = 0; k < 16; k++) t[k] = d[k][i];
    for (int j = 0; j < 4; j++) { /* B^T d, by rows */
      r[j] = t[j] - t[8 + j];
      r[4 + j] = t[4 + j] + t[8 + j];
      r[8 + j] = t[8 + j] - t[4 + j];
      r[12 + j] = t[4 + j] - t[12 + j];
    }
    for (int a = 0; a < 4; a++) { /* then times B, by columns */
      const float *q = r + 4 * a;
      v[(size_t)(4 * a) * stride + i] = q[0] - q[2];
      v[(size_t)(4 * a + 1) * stride + i] = q[1] + q[2];
      v[(size_t)(4 * a + 2) * stride + i] = q[2] - q[1];
      v[(size_t)(4 * a + 3) * stride + i] = q[1] - q[3];
    }
  }
}

static void out_tile(const float *m, size_t stride, size_t k, const float *bias,
                     float *const *y, const float *const *sum) {
  for (size_t i = 0; i < k; i++) {
    float t[16], r[8];
    for (int x = 0; x < 16; x++) t[x] = m[(size_t)x * stride + i];
    for (int j = 0; j < 4; j++) { /* A^T M */
      r[j] = (t[j] + t[4 + j]) + t[8 + j];
      r[4 + j] = (t[4 + j] - t[8 + j]) - t[12 + j];
    }
    float b = bias ? bias[i] : 0.0f;
    for (int a = 0; a < 2; a++) { /* then times A */
      const float *q = r + 4 * a;
      float o[2] = {((q[0] + q[1]) + q[2]) + b, ((q[1] - q[2]) - q[3]) + b};
      for (int s = 0; s < 2; s++) {
        float *yp = y[2 * a + s];
        if (!yp) continue;
        yp[i] = sum ? o[s] + sum[2 * a + s][i] : o[s];
      }
    }
  }
}

/* The grouped convolution, plainly: each output's sum in the order isa_fns.h gives. */
static void gconv(const kl_gconv *d, const float *const *taps, size_t xstep, size_t n,
                  float *y, size_t ystride) {
  size_t ci = d->ci, co = d->co, k = d->k;
  for (size_t p = 0; p < n; p++)
    for (size_t g = 0; g < d->groups; g++)
      for (size_t o = 0; o < co; o++) {
        float acc = d->bias ? d->bias[g * co + o] : 0.0f;
        const float *w = d->w + g * k * ci * co + o;
        for (size_t t = 0; t < k; t++) {
          const float *x = taps[t] + p * xstep + g * ci;
          for (size_t c = 0; c < ci; c++, w += co) acc += x[c] * *w;
        }
        y[p * ystride + g * co + o] = acc;
      }
}

const kl_conv_fns kl_conv_generic = {in_tile, out_tile, gconv};
