/* Shape/dtype inference for the signal ops: DFT, STFT, HannWindow, HammingWindow,
 * BlackmanWindow and MelWeightMatrix.
 *
 * DFT: x [..., n, ..., 1 or 2] (real or complex, n along `axis`), dft_length L (input
 *   1, default n; 2 * (n - 1) for an inverse one-sided one), axis (input 2, default -2)
 *   -> [..., L, ..., 2]; one-sided forward: L / 2 + 1 bins; one-sided inverse (a real
 *   signal from half a spectrum): [..., L, ..., 1].
 * STFT: signal [batch, length, 1 or 2], frame_step, window [frame_length]?,
 *   frame_length? -> [batch, 1 + (length - frame_length) / frame_step, bins, 2] with
 *   bins frame_length / 2 + 1 (onesided, the default) or frame_length.
 * Windows: size (scalar) -> [size] of output_datatype.
 * MelWeightMatrix: num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
 *   upper_edge_hertz (scalars) -> [dft_length / 2 + 1, num_mel_bins].
 */
#include "ir/infer_more.h"

static kiln_status read_flag(const kl_infer_ctx *c, const char *name, int64_t dflt, bool *v) {
  int64_t i = kl_attr_int(c->node, name, dflt);
  if (i != 0 && i != 1)
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "%s is %lld, expected 0 or 1", name,
                   (long long)i);
  *v = i == 1;
  return KILN_OK;
}

/* Input i, an integer scalar (0-D or 1-D of one value): *known false when absent or
 * its contents are not known. */
static kiln_status read_int_scalar(const kl_infer_ctx *c, int i, const char *name,
                                   int64_t *v, bool *known) {
  int64_t buf[1];
  int n = -1;
  *known = false;
  if (!kl_infer_in(c, i)) return KILN_OK;
  kiln_status st = kl_check_dtype(c, i, name, KL_DTS_INDEX);
  if (st == KILN_OK) st = kl_check_rank(c, i, name, 0, 1);
  if (st == KILN_OK) st = kl_more_expect_dim(c, i, name, 0, 1, "a single value");
  if (st == KILN_OK) st = kl_read_ints(c, i, name, buf, 1, &n);
  if (st != KILN_OK || n < 0) return st;
  if (n != 1)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %d values, expected 1", i, name, n);
  *v = buf[0];
  *known = true;
  return KILN_OK;
}

/* ---- DFT ---- */

typedef struct dft_attrs {
  bool inverse, onesided;
  bool axis_known, length_known;
  int64_t axis, length;
} dft_attrs;

static kiln_status dft_read(const kl_infer_ctx *c, dft_attrs *a) {
  kiln_status st = read_flag(c, "inverse", 0, &a->inverse);
  if (st == KILN_OK) st = read_flag(c, "onesided", 0, &a->onesided);
  if (st == KILN_OK) st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "input", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "input", 2, KL_MAX_RANK);
  if (st == KILN_OK) st = read_int_scalar(c, 1, "dft_length", &a->length, &a->length_known);
  if (st == KILN_OK && a->length_known && a->length < 1)
    st = kl_fail(c->e, KILN_ERR_SHAPE, "dft_length is %lld, expected at least 1",
                 (long long)a->length);
  a->axis = -2;
  a->axis_known = true;
  if (st == KILN_OK && kl_infer_in(c, 2))
    st = read_int_scalar(c, 2, "axis", &a->axis, &a->axis_known);
  return st;
}

int kl_infer_dft(kl_infer_ctx *c) {
  dft_attrs a;
  kiln_status st = dft_read(c, &a);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_type *y = &c->out[0];
  *y = *x;
  if (x->rank < 0) return KILN_OK;
  int r = x->rank, axis = 0;
  kl_dim last = x->dims[r - 1];
  if (kl_dim_known(last) && last.size != 1 && last.size != 2)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0's last dim is %lld, expected 1 (real) or "
                   "2 (complex)", (long long)last.size);
  y->dims[r - 1] = kl_dim_of(a.inverse && a.onesided ? 1 : 2);
  if (!a.axis_known) {
    for (int i = 0; i < r - 1; i++) y->dims[i] = kl_dim_unknown();
    return KILN_OK;
  }
  if ((st = kl_norm_axis(c, a.axis, r, "axis", &axis)) != KILN_OK) return st;
  if (axis == r - 1)
    return kl_fail(c->e, KILN_ERR_SHAPE, "axis is %lld, the last dim (real and imaginary "
                   "parts); expected one of the first %d", (long long)a.axis, r - 1);
  kl_dim n = x->dims[axis];
  int64_t len = a.length_known ? a.length : -1;
  if (!kl_infer_in(c, 1) && kl_dim_known(n))
    len = a.inverse && a.onesided ? 2 * (n.size - 1) : n.size;
  if (len == 0 && a.inverse && a.onesided && n.size == 1)
    return kl_fail(c->e, KILN_ERR_SHAPE, "a one-sided inverse of 1 bin has no default "
                   "length (2 * (1 - 1)); give dft_length");
  if (len == 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 has no samples along axis %d", axis);
  /* a plain transform of the default length keeps the dim, symbol and all */
  bool keeps = !kl_infer_in(c, 1) && !a.onesided;
  if (len < 0) y->dims[axis] = keeps ? n : kl_dim_unknown();
  else y->dims[axis] = kl_dim_of(!a.inverse && a.onesided ? len / 2 + 1 : len);
  return kl_check_out_numel(c, y);
}

/* ---- STFT ---- */

static kiln_status stft_inputs(const kl_infer_ctx *c, bool *onesided) {
  kiln_status st = read_flag(c, "onesided", 1, onesided);
  if (st == KILN_OK) st = kl_check_required(c, 2);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "signal", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_same_dtype(c, 0, 2);
  if (st == KILN_OK) st = kl_check_rank(c, 0, "signal", 3, 3);
  if (st == KILN_OK) st = kl_check_rank(c, 2, "window", 1, 1);
  const kl_type *x = c->in[0];
  if (st == KILN_OK && x->rank == 3 && kl_dim_known(x->dims[2]) && x->dims[2].size != 1 &&
      x->dims[2].size != 2)
    st = kl_fail(c->e, KILN_ERR_SHAPE, "input 0 (signal) has %lld at dim 2, expected 1 (real) "
                 "or 2 (complex)", (long long)x->dims[2].size);
  return st;
}

/* frame_length from input 3, else the window's length; -1 when not known. */
static kiln_status stft_frame_length(const kl_infer_ctx *c, int64_t *len) {
  const kl_type *w = kl_infer_in(c, 2);
  int64_t wlen = w && w->rank == 1 && kl_dim_known(w->dims[0]) ? w->dims[0].size : -1;
  bool known;
  kiln_status st = read_int_scalar(c, 3, "frame_length", len, &known);
  if (st != KILN_OK) return st;
  if (!known) *len = kl_infer_in(c, 3) ? -1 : wlen;
  if (!w && !kl_infer_in(c, 3))
    return kl_fail(c->e, KILN_ERR_INVALID_MODEL, "neither window (input 2) nor frame_length "
                   "(input 3) is given; one must say the frame length");
  if (known && *len < 1)
    return kl_fail(c->e, KILN_ERR_SHAPE, "frame_length is %lld, expected at least 1",
                   (long long)*len);
  if (known && wlen >= 0 && wlen != *len)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 2 (window) has %lld values, expected %lld "
                   "(frame_length)", (long long)wlen, (long long)*len);
  if (*len == 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 2 (window) is empty");
  return KILN_OK;
}

int kl_infer_stft(kl_infer_ctx *c) {
  bool onesided = true, step_known = false;
  int64_t frame = -1, step = -1;
  kiln_status st = stft_inputs(c, &onesided);
  if (st == KILN_OK) st = read_int_scalar(c, 1, "frame_step", &step, &step_known);
  if (st == KILN_OK && step_known && step < 1)
    st = kl_fail(c->e, KILN_ERR_SHAPE, "frame_step is %lld, expected at least 1",
                 (long long)step);
  if (st == KILN_OK) st = stft_frame_length(c, &frame);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_type *y = &c->out[0];
  kl_type_unknown_dims(y, x->dtype, 4);
  y->dims[3] = kl_dim_of(2);
  if (x->rank == 3) y->dims[0] = x->dims[0];
  if (frame >= 0) y->dims[2] = kl_dim_of(onesided ? frame / 2 + 1 : frame);
  int64_t n = x->rank == 3 ? x->dims[1].size : -1;
  if (n >= 0 && frame >= 0 && n < frame)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input 0 (signal) has %lld samples, fewer than "
                   "one frame of %lld", (long long)n, (long long)frame);
  if (n >= 0 && frame >= 0 && step_known) y->dims[1] = kl_dim_of(1 + (n - frame) / step);
  return KILN_OK;
}

/* ---- windows and MelWeightMatrix ---- */

/* output_datatype: a float type (kiln computes these in double and rounds once). */
static kiln_status out_dtype(const kl_infer_ctx *c, kl_dtype *dt) {
  int64_t v = kl_attr_int(c->node, "output_datatype", KL_F32);
  if (v < 0 || v > 31 || !kl_dtype_valid((int)v) || !(KL_DTS_FLOAT & KL_DT(v)))
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "output_datatype %lld (%s) is not supported; "
                   "kiln makes float16, bfloat16, float32 or float64", (long long)v,
                   v >= 0 && v <= 31 ? kl_dtype_name((kl_dtype)v) : "unknown");
  *dt = (kl_dtype)v;
  return KILN_OK;
}

int kl_infer_signal_window(kl_infer_ctx *c) {
  bool periodic, known;
  int64_t size = -1;
  kl_dtype dt = KL_F32;
  kiln_status st = read_flag(c, "periodic", 1, &periodic);
  if (st == KILN_OK) st = out_dtype(c, &dt);
  if (st == KILN_OK) st = kl_check_required(c, 1);
  if (st == KILN_OK) st = read_int_scalar(c, 0, "size", &size, &known);
  if (st != KILN_OK) return st;
  if (known && size < 0)
    return kl_fail(c->e, KILN_ERR_SHAPE, "size is %lld, expected at least 0", (long long)size);
  kl_type_unknown_dims(&c->out[0], dt, 1);
  if (known) c->out[0].dims[0] = kl_dim_of(size);
  return KILN_OK;
}

/* The three integer scalars and the two frequencies of MelWeightMatrix. */
static kiln_status mel_inputs(const kl_infer_ctx *c, int64_t *ints, bool *known) {
  static const char *const names[] = {"num_mel_bins", "dft_length", "sample_rate"};
  kiln_status st = kl_check_required(c, 5);
  for (int i = 0; st == KILN_OK && i < 3; i++)
    st = read_int_scalar(c, i, names[i], &ints[i], &known[i]);
  if (st == KILN_OK) st = kl_check_dtype(c, 3, "lower_edge_hertz", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_dtype(c, 4, "upper_edge_hertz", KL_DTS_FLOAT);
  if (st == KILN_OK) st = kl_check_rank(c, 3, "lower_edge_hertz", 0, 1);
  if (st == KILN_OK) st = kl_check_rank(c, 4, "upper_edge_hertz", 0, 1);
  for (int i = 0; st == KILN_OK && i < 3; i++)
    if (known[i] && ints[i] < 1)
      st = kl_fail(c->e, KILN_ERR_SHAPE, "%s is %lld, expected at least 1", names[i],
                   (long long)ints[i]);
  return st;
}

/* 0 <= lower < upper <= sample_rate / 2, once the values are known. */
static kiln_status mel_edges(const kl_infer_ctx *c, const int64_t *ints, const bool *known) {
  double lo, hi;
  if (!kl_read_scalar(c, 3, &lo) || !kl_read_scalar(c, 4, &hi)) return KILN_OK;
  if (!(lo >= 0 && lo < hi))
    return kl_fail(c->e, KILN_ERR_SHAPE, "lower_edge_hertz %g and upper_edge_hertz %g: "
                   "expected 0 <= lower < upper", lo, hi);
  if (known[2] && !(hi <= (double)ints[2] / 2))
    return kl_fail(c->e, KILN_ERR_SHAPE, "upper_edge_hertz %g is above the Nyquist "
                   "frequency %g (sample_rate / 2)", hi, (double)ints[2] / 2);
  return KILN_OK;
}

int kl_infer_mel_weight_matrix(kl_infer_ctx *c) {
  int64_t ints[3] = {-1, -1, -1};
  bool known[3] = {false, false, false};
  kl_dtype dt = KL_F32;
  kiln_status st = out_dtype(c, &dt);
  if (st == KILN_OK) st = mel_inputs(c, ints, known);
  if (st == KILN_OK) st = mel_edges(c, ints, known);
  if (st != KILN_OK) return st;
  kl_type *y = &c->out[0];
  kl_type_unknown_dims(y, dt, 2);
  if (known[1]) y->dims[0] = kl_dim_of(ints[1] / 2 + 1);
  if (known[0]) y->dims[1] = kl_dim_of(ints[0]);
  return kl_check_out_numel(c, y);
}
