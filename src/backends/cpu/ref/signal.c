/* Reference kernels: DFT, STFT, HannWindow, HammingWindow, BlackmanWindow and
 * MelWeightMatrix (shapes in src/ir/infer_signal.c).
 *
 * DFT of length L along one axis, in double, by the FFT of base/fft.h (O(L log L) for
 * every L; the direct sum each output is defined by, below, is the unit tests' oracle):
 *   forward:  Y[k] = sum_t x[t] e^(-2 pi i k t / L), t < L (x zero-padded or cut to L)
 *   inverse:  y[t] = 1/L sum_k X[k] e^(+2 pi i k t / L)
 *   one-sided inverse (NumPy's irfft): X is half of a Hermitian spectrum; only the
 *   real parts of X[0] and X[L/2] count, and y[t] = 1/L (Re X[0] + 2 sum_{0<k<L/2}
 *   Re(X[k] e^(2 pi i k t / L)) + Re X[L/2] (-1)^t).
 * STFT: frame f of batch row b is signal[b, f * step + t] * window[t], t < frame_length,
 *   and its DFT is output[b, f].
 * Windows, N = size when periodic else size - 1:
 *   Hann sin^2(pi n / N); Hamming 25/46 - 21/46 cos(2 pi n / N);
 *   Blackman 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N).
 * MelWeightMatrix [dft_length / 2 + 1, num_mel_bins]: triangular filters between
 *   num_mel_bins + 2 points evenly spaced on the mel scale (2595 log10(1 + f / 700))
 *   from lower_edge_hertz to upper_edge_hertz, each point at spectrogram bin
 *   floor((dft_length + 1) f / sample_rate), as the ONNX reference builds it.
 */
#include "backends/cpu/ref/ref.h"
#include "base/fft.h"

#include <math.h>
#include <stdlib.h>

#define TAU 6.283185307179586476925286766559

/* ---- the transform of one line ---- */

typedef struct dft_plan {
  kl_fft *fft;
  int64_t len;      /* L */
  double *re, *im;  /* [L]: the current line, zero-padded; its transform after dft_run */
} dft_plan;

static kiln_status plan_init(dft_plan *p, int64_t len, kl_err *e) {
  p->re = NULL;
  p->len = len;
  kiln_status st = kl_fft_create(len, &p->fft, e);
  if (st != KILN_OK) return st;
  if (!(p->re = malloc((size_t)len * 2 * sizeof(double)))) {
    kl_fft_free(p->fft);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "no memory for a DFT of length %lld",
                   (long long)len);
  }
  p->im = p->re + len;
  return KILN_OK;
}

static void plan_free(dft_plan *p) {
  kl_fft_free(p->fft);
  free(p->re);
}

/* The real signal whose half spectrum (bins < `bins`) is in p->re, p->im, into p->re
 * (times L): the Hermitian spectrum completed (only the real parts of bins 0 and L/2
 * count), then the inverse transform. */
static void irfft_line(dft_plan *p, int64_t bins) {
  int64_t len = p->len, half = (len - 1) / 2;
  p->im[0] = 0;
  for (int64_t k = 1; k < len; k++) {
    int64_t mirror = len - k;
    if (k <= half && k < bins) {
      p->re[mirror] = p->re[k];
      p->im[mirror] = -p->im[k];
    } else if (k <= half) {
      p->re[k] = p->im[k] = p->re[mirror] = p->im[mirror] = 0;
    }
  }
  if (len % 2 == 0) {
    if (len / 2 >= bins) p->re[len / 2] = 0;
    p->im[len / 2] = 0;
  }
  if (bins < 1) p->re[0] = 0;
  kl_fft_run(p->fft, p->re, p->im, 1);
}

/* ---- DFT ---- */

typedef struct dft_geom {
  int64_t outer, inner; /* elements before and after the axis (the last dim excluded) */
  int64_t n_in, c_in, n_out, c_out;
} dft_geom;

static void dft_geometry(const kl_tensor *x, const kl_tensor *y, int axis, dft_geom *g) {
  g->outer = kl_ref_span(x->dims, 0, axis);
  g->inner = kl_ref_span(x->dims, axis + 1, x->rank - 1);
  g->n_in = x->dims[axis];
  g->c_in = x->dims[x->rank - 1];
  g->n_out = y->dims[axis];
  g->c_out = y->dims[y->rank - 1];
}

/* Loads line (o, i) into p->re, p->im: its first min(n_in, L) samples, zeros after. */
static void load_line(dft_plan *p, const kl_tensor *x, const dft_geom *g, int64_t o, int64_t i) {
  for (int64_t t = 0; t < p->len; t++) {
    int64_t at = ((o * g->n_in + t) * g->inner + i) * g->c_in;
    bool in = t < g->n_in;
    p->re[t] = in ? kl_ref_load(x->data, x->dtype, at) : 0;
    p->im[t] = in && g->c_in == 2 ? kl_ref_load(x->data, x->dtype, at + 1) : 0;
  }
}

static void dft_line(dft_plan *p, kl_tensor *y, const dft_geom *g, int64_t o, int64_t i,
                     bool inverse) {
  if (inverse && g->c_out == 1)
    irfft_line(p, g->n_in);
  else
    kl_fft_run(p->fft, p->re, p->im, inverse ? 1 : -1);
  double scale = inverse ? 1 / (double)p->len : 1;
  for (int64_t k = 0; k < g->n_out; k++) {
    int64_t at = ((o * g->n_out + k) * g->inner + i) * g->c_out;
    kl_ref_store(y->data, y->dtype, at, p->re[k] * scale);
    if (g->c_out == 2) kl_ref_store(y->data, y->dtype, at + 1, p->im[k] * scale);
  }
}

int kl_ref_dft(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  const kl_tensor *len_t = c->n_in > 1 ? c->in[1] : NULL, *axis_t = c->n_in > 2 ? c->in[2] : NULL;
  kl_tensor *y = c->out[0];
  bool inverse = kl_attr_int(c->node, "inverse", 0) == 1;
  int64_t axis = axis_t ? kl_ref_load_int(axis_t->data, axis_t->dtype, 0) : -2;
  if (axis < 0) axis += x->rank;
  dft_geom g;
  dft_geometry(x, y, (int)axis, &g);
  bool irfft = inverse && kl_attr_int(c->node, "onesided", 0) == 1;
  int64_t len = len_t ? kl_ref_load_int(len_t->data, len_t->dtype, 0)
                      : irfft ? 2 * (g.n_in - 1) : g.n_in;
  dft_plan p;
  kiln_status st = plan_init(&p, len, c->e);
  if (st != KILN_OK) return st;
  for (int64_t o = 0; o < g.outer; o++)
    for (int64_t i = 0; i < g.inner; i++) {
      load_line(&p, x, &g, o, i);
      dft_line(&p, y, &g, o, i, inverse);
    }
  plan_free(&p);
  return KILN_OK;
}

/* ---- STFT ---- */

int kl_ref_stft(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *step_t = c->in[1];
  const kl_tensor *win = c->n_in > 2 ? c->in[2] : NULL;
  kl_tensor *y = c->out[0];
  int64_t step = kl_ref_load_int(step_t->data, step_t->dtype, 0);
  const kl_tensor *frame_t = c->n_in > 3 ? c->in[3] : NULL;
  if (!win && !frame_t)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "neither window nor frame_length is given");
  int64_t frame = win ? win->dims[0] : kl_ref_load_int(frame_t->data, frame_t->dtype, 0);
  int64_t n = x->dims[1], comps = x->dims[2], frames = y->dims[1], bins = y->dims[2];
  dft_plan p;
  kiln_status st = plan_init(&p, frame, c->e);
  if (st != KILN_OK) return st;
  for (int64_t b = 0; b < x->dims[0]; b++)
    for (int64_t f = 0; f < frames; f++) {
      for (int64_t t = 0; t < frame; t++) {
        int64_t at = (b * n + f * step + t) * comps;
        double w = win ? kl_ref_load(win->data, win->dtype, t) : 1;
        p.re[t] = w * kl_ref_load(x->data, x->dtype, at);
        p.im[t] = comps == 2 ? w * kl_ref_load(x->data, x->dtype, at + 1) : 0;
      }
      kl_fft_run(p.fft, p.re, p.im, -1);
      for (int64_t k = 0; k < bins; k++) {
        int64_t at = ((b * frames + f) * bins + k) * 2;
        kl_ref_store(y->data, y->dtype, at, p.re[k]);
        kl_ref_store(y->data, y->dtype, at + 1, p.im[k]);
      }
    }
  plan_free(&p);
  return KILN_OK;
}

/* ---- windows ---- */

int kl_ref_signal_window(kl_kernel_ctx *c) {
  kl_tensor *y = c->out[0];
  int64_t size = y->dims[0];
  bool periodic = kl_attr_int(c->node, "periodic", 1) == 1;
  double n_1 = (double)(periodic ? size : size - 1);
  for (int64_t n = 0; n < size; n++) {
    double a = n_1 > 0 ? TAU * (double)n / n_1 : 0, v;
    /* a symmetric window of one sample (N = 0) is its peak, 1, as in PyTorch */
    if (n_1 == 0) v = 1;
    else if (c->node->op == KL_OP_HannWindow) v = 0.5 - 0.5 * cos(a);
    else if (c->node->op == KL_OP_HammingWindow) v = 25.0 / 46 - 21.0 / 46 * cos(a);
    else v = 0.42 - 0.5 * cos(a) + 0.08 * cos(2 * a);
    kl_ref_store(y->data, y->dtype, n, v);
  }
  return KILN_OK;
}

/* ---- MelWeightMatrix ---- */

static double hz_to_mel(double hz) { return 2595 * log10(1 + hz / 700); }
static double mel_to_hz(double mel) { return 700 * (pow(10, mel / 2595) - 1); }

/* Filter i rises from point[i] to point[i + 1] and falls to point[i + 2]; a filter whose
 * rise is empty is 1 at its centre. Bins outside the matrix are skipped. */
static void mel_filter(kl_tensor *y, int64_t i, const int64_t *point, int64_t bins, int64_t mels) {
  int64_t lo = point[i], mid = point[i + 1], hi = point[i + 2];
  for (int64_t j = lo; j <= mid; j++) {
    double v = mid == lo ? 1 : (double)(j - lo) / (double)(mid - lo);
    if (j >= 0 && j < bins)
      kl_ref_store(y->data, y->dtype, j * mels + i, v);
  }
  for (int64_t j = mid; j < hi; j++)
    if (j >= 0 && j < bins)
      kl_ref_store(y->data, y->dtype, j * mels + i, (double)(hi - j) / (double)(hi - mid));
}

int kl_ref_mel_weight_matrix(kl_kernel_ctx *c) {
  kl_tensor *y = c->out[0];
  int64_t mels = y->dims[1], bins = y->dims[0];
  int64_t dft_len = kl_ref_load_int(c->in[1]->data, c->in[1]->dtype, 0);
  double rate = (double)kl_ref_load_int(c->in[2]->data, c->in[2]->dtype, 0);
  double lo = hz_to_mel(kl_ref_load(c->in[3]->data, c->in[3]->dtype, 0));
  double hi = hz_to_mel(kl_ref_load(c->in[4]->data, c->in[4]->dtype, 0));
  double step = (hi - lo) / (double)(mels + 2);
  int64_t *point = malloc(sizeof *point * (size_t)(mels + 2));
  if (!point) return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "no memory for %lld mel bins",
                             (long long)mels);
  for (int64_t i = 0; i < mels + 2; i++)
    point[i] = kl_ref_trunc_i64(
        floor((double)(dft_len + 1) * mel_to_hz(lo + (double)i * step) / rate));
  for (int64_t i = 0; i < bins * mels; i++) kl_ref_store(y->data, y->dtype, i, 0);
  for (int64_t i = 0; i < mels; i++) mel_filter(y, i, point, bins, mels);
  free(point);
  return KILN_OK;
}
