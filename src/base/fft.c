/* Mixed-radix FFT with Bluestein's method for large prime factors (fft.h).
 *
 * Decimation in time, recursive: the transform of length len (a stage of factor r,
 * m = len / r) is r transforms of length m over the samples q, q + r, q + 2r, ...
 * (q < r), written one after another into the output, then for each k < m the r
 * values t_q = W_len^(q k) Y_q[k] go through an r-point transform whose output j is
 * X[k + j m]. W_len^x = e^(sign 2 pi i x / len) is the plan's table entry x n / len.
 *
 * Bluestein, for a prime p over KL_FFT_DIRECT_MAX: k t = (k^2 + t^2 - (k - t)^2) / 2,
 * so with c_j = e^(sign pi i j^2 / p), X[k] = c_k sum_t (x_t c_t) conj(c_(k-t)): a
 * circular product of length m >= 2p - 1 (a power of two) through the m-point plan,
 * with the transform of conj(c) tabulated for both signs. j^2 is reduced mod 2p in
 * integers before the angle is taken, so the chirp is exact to a rounding. */
#include "base/fft.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.141592653589793238462643383279502884
#define MAX_FACTORS 64 /* 2^31 has 31 factors of two */
#define MAX_BLUE 4     /* distinct primes over 64 in a length <= 2^31: at most 4 */

typedef struct blue {
  int64_t p, m;
  kl_fft *pow2;        /* the m-point plan */
  double *cr, *ci;     /* [p]: c_j for sign -1, e^(-pi i j^2 / p) */
  double *hr[2], *hi[2]; /* [m]: the transform of conj(c) wrapped, sign -1 ([0]) and +1 */
  double *ar, *ai;     /* [m]: the product's line */
} blue;

struct kl_fft {
  int64_t n;
  int n_fac;
  int64_t fac[MAX_FACTORS];
  double *cw, *sw; /* [n]: cos and sin of 2 pi j / n */
  double *tr, *ti; /* [n]: the input line while a transform runs */
  int n_blue;
  blue *blues[MAX_BLUE];
};

/* The factors of n in the order the stages take them: a two when the power of two is
 * odd (the outermost stage, so that the innermost ones are radix 4), fours, then odd
 * primes ascending. Returns the count (at most MAX_FACTORS for n <= 2^31). */
static int factorize(int64_t n, int64_t *fac) {
  int k = 0;
  int64_t twos = 0;
  while (n % 2 == 0) {
    twos++;
    n /= 2;
  }
  if (twos % 2) fac[k++] = 2; /* an odd power of two: its lone two first (outermost) */
  for (int64_t i = 0; i < twos / 2; i++) fac[k++] = 4;
  for (int64_t d = 3; d * d <= n; d += 2)
    while (n % d == 0) {
      fac[k++] = d;
      n /= d;
    }
  if (n > 1) fac[k++] = n;
  return k;
}

static bool length_ok(int64_t n, const int64_t *fac, int n_fac) {
  if (n < 1 || n > KL_FFT_MAX_LEN) return false;
  for (int i = 0; i < n_fac; i++)
    if (fac[i] > KL_FFT_MAX_PRIME) return false;
  return true;
}

static int64_t pow2_above(int64_t x) {
  int64_t m = 1;
  while (m < x) m *= 2;
  return m;
}

double kl_fft_steps(int64_t n) {
  int64_t fac[MAX_FACTORS];
  int n_fac = n >= 1 && n <= KL_FFT_MAX_LEN ? factorize(n, fac) : 0;
  if (!length_ok(n, fac, n_fac)) return (double)n * (double)n;
  double steps = 0;
  for (int i = 0; i < n_fac; i++) {
    int64_t r = fac[i];
    double stage;
    if (r <= KL_FFT_DIRECT_MAX) {
      stage = (double)n * (double)r;
    } else { /* n / r products of length m: two transforms and the pointwise steps */
      int64_t m = pow2_above(2 * r - 1);
      stage = (double)(n / r) * (2 * kl_fft_steps(m) + 3 * (double)m);
    }
    steps += (double)n + stage; /* the twiddles, then the r-point transforms */
  }
  return steps;
}

/* ---- plans ---- */

static void blue_free(blue *b) {
  if (!b) return;
  kl_fft_free(b->pow2);
  free(b->cr);
  free(b);
}

static kiln_status blue_create(int64_t p, blue **out, kl_err *e) {
  blue *b = calloc(1, sizeof *b);
  *out = b;
  if (!b) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "no memory for an FFT plan");
  b->p = p;
  b->m = pow2_above(2 * p - 1);
  kiln_status st = kl_fft_create(b->m, &b->pow2, e);
  if (st != KILN_OK) return st;
  size_t count = (size_t)(2 * p + 6 * b->m);
  if (!(b->cr = malloc(count * sizeof(double))))
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "no memory for an FFT plan of length %lld",
                   (long long)p);
  b->ci = b->cr + p;
  double *at = b->ci + p;
  for (int s = 0; s < 2; s++) {
    b->hr[s] = at;
    b->hi[s] = at + b->m;
    at += 2 * b->m;
  }
  b->ar = at;
  b->ai = at + b->m;
  for (int64_t j = 0; j < p; j++) {
    double angle = PI * (double)((j * j) % (2 * p)) / (double)p;
    b->cr[j] = cos(angle);
    b->ci[j] = -sin(angle);
  }
  /* conj(c^sign) at j and m - j: c^(-1) = c, c^(+1) = conj(c) */
  for (int s = 0; s < 2; s++) {
    double flip = s == 0 ? -1 : 1; /* imaginary part of conj(c^sign) over c's */
    memset(b->hr[s], 0, (size_t)b->m * sizeof(double));
    memset(b->hi[s], 0, (size_t)b->m * sizeof(double));
    for (int64_t j = 0; j < p; j++) {
      b->hr[s][j] = b->cr[j];
      b->hi[s][j] = flip * b->ci[j];
      if (j > 0) {
        b->hr[s][b->m - j] = b->cr[j];
        b->hi[s][b->m - j] = flip * b->ci[j];
      }
    }
    kl_fft_run(b->pow2, b->hr[s], b->hi[s], -1);
  }
  return KILN_OK;
}

kiln_status kl_fft_create(int64_t n, kl_fft **out, kl_err *e) {
  *out = NULL;
  int64_t fac[MAX_FACTORS];
  int n_fac = n >= 1 && n <= KL_FFT_MAX_LEN ? factorize(n, fac) : 0;
  if (!length_ok(n, fac, n_fac))
    return kl_fail(e, KILN_ERR_LIMIT,
                   "a DFT of length %lld is over kiln's limits (lengths 1 to 2^31 whose "
                   "prime factors are at most 2^22)", (long long)n);
  kl_fft *p = calloc(1, sizeof *p);
  if (!p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "no memory for an FFT plan");
  p->n = n;
  p->n_fac = n_fac;
  memcpy(p->fac, fac, (size_t)n_fac * sizeof *fac);
  size_t bytes;
  if (kl_mul_overflow_size((size_t)n, 4 * sizeof(double), &bytes) || !(p->cw = malloc(bytes))) {
    kl_fft_free(p);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "no memory for a DFT of length %lld",
                   (long long)n);
  }
  p->sw = p->cw + n;
  p->tr = p->sw + n;
  p->ti = p->tr + n;
  for (int64_t j = 0; j < n; j++) {
    p->cw[j] = cos(2 * PI * (double)j / (double)n);
    p->sw[j] = sin(2 * PI * (double)j / (double)n);
  }
  for (int i = 0; i < n_fac; i++) {
    if (fac[i] <= KL_FFT_DIRECT_MAX || (i > 0 && fac[i] == fac[i - 1])) continue;
    kiln_status st = blue_create(fac[i], &p->blues[p->n_blue], e);
    p->n_blue++;
    if (st != KILN_OK) {
      kl_fft_free(p);
      return st;
    }
  }
  *out = p;
  return KILN_OK;
}

void kl_fft_free(kl_fft *p) {
  if (!p) return;
  for (int i = 0; i < p->n_blue; i++) blue_free(p->blues[i]);
  free(p->cw);
  free(p);
}

/* ---- transforms ---- */

/* The r-point transform of (xr, xi)[q * m + k], q < r, in place, for prime r by
 * Bluestein's method (the values are gathered into the product's line). */
static void blue_run(blue *b, double *xr, double *xi, int64_t m, int sign) {
  int64_t p = b->p;
  int s = sign < 0 ? 0 : 1;
  double flip = sign < 0 ? 1 : -1; /* c^sign's imaginary part over c's */
  for (int64_t t = 0; t < p; t++) {
    double ur = xr[t * m], ui = xi[t * m], cr = b->cr[t], ci = flip * b->ci[t];
    b->ar[t] = ur * cr - ui * ci;
    b->ai[t] = ur * ci + ui * cr;
  }
  memset(b->ar + p, 0, (size_t)(b->m - p) * sizeof(double));
  memset(b->ai + p, 0, (size_t)(b->m - p) * sizeof(double));
  kl_fft_run(b->pow2, b->ar, b->ai, -1);
  for (int64_t j = 0; j < b->m; j++) {
    double ur = b->ar[j], ui = b->ai[j], hr = b->hr[s][j], hi = b->hi[s][j];
    b->ar[j] = ur * hr - ui * hi;
    b->ai[j] = ur * hi + ui * hr;
  }
  kl_fft_run(b->pow2, b->ar, b->ai, 1);
  double scale = 1 / (double)b->m;
  for (int64_t k = 0; k < p; k++) {
    double ur = b->ar[k] * scale, ui = b->ai[k] * scale, cr = b->cr[k], ci = flip * b->ci[k];
    xr[k * m] = ur * cr - ui * ci;
    xi[k * m] = ur * ci + ui * cr;
  }
}

static blue *blue_of(const kl_fft *p, int64_t r) {
  for (int i = 0; i < p->n_blue; i++)
    if (p->blues[i]->p == r) return p->blues[i];
  return NULL;
}

/* The r-point transform of (xr, xi)[q * m], q < r, in place, r <= KL_FFT_DIRECT_MAX. */
static void direct_run(const kl_fft *p, int64_t r, double *xr, double *xi, int64_t m, double sg) {
  double tr[KL_FFT_DIRECT_MAX], ti[KL_FFT_DIRECT_MAX];
  const double *cw = p->cw, *sw = p->sw;
  int64_t pstep = p->n / r;
  for (int64_t q = 0; q < r; q++) {
    tr[q] = xr[q * m];
    ti[q] = xi[q * m];
  }
  for (int64_t j = 0; j < r; j++) {
    double sr = 0, si = 0;
    for (int64_t q = 0, x = 0; q < r; q++, x = (x + j) % r) { /* x = q j mod r */
      double c = cw[x * pstep], s = sg * sw[x * pstep];
      sr += tr[q] * c - ti[q] * s;
      si += tr[q] * s + ti[q] * c;
    }
    xr[j * m] = sr;
    xi[j * m] = si;
  }
}

/* (or, oi)[0, len) = the transform of (ir, ii)[j * stride], j < len; f: the stage. */
static void transform(const kl_fft *p, int f, int64_t len, const double *ir, const double *ii,
                      int64_t stride, double *or_, double *oi, int sign) {
  if (len == 1) {
    or_[0] = ir[0];
    oi[0] = ii[0];
    return;
  }
  int64_t r = p->fac[f], m = len / r, step = p->n / len;
  if (m == 1) {
    for (int64_t q = 0; q < r; q++) {
      or_[q] = ir[q * stride];
      oi[q] = ii[q * stride];
    }
  } else {
    for (int64_t q = 0; q < r; q++)
      transform(p, f + 1, m, ir + q * stride, ii + q * stride, stride * r, or_ + q * m,
                oi + q * m, sign);
  }
  const double *cw = p->cw, *sw = p->sw;
  double sg = sign < 0 ? -1 : 1;
  if (r == 2) {
    for (int64_t k = 0; k < m; k++) {
      double c = cw[k * step], s = sg * sw[k * step];
      double ar = or_[k], ai = oi[k], ur = or_[m + k], ui = oi[m + k];
      double br = ur * c - ui * s, bi = ur * s + ui * c;
      or_[k] = ar + br;
      oi[k] = ai + bi;
      or_[m + k] = ar - br;
      oi[m + k] = ai - bi;
    }
    return;
  }
  if (r == 4) {
    double *r0 = or_, *r1 = or_ + m, *r2 = or_ + 2 * m, *r3 = or_ + 3 * m;
    double *i0 = oi, *i1 = oi + m, *i2 = oi + 2 * m, *i3 = oi + 3 * m;
    for (int64_t k = 0; k < m; k++) {
      int64_t j1 = k * step, j2 = 2 * j1, j3 = 3 * j1;
      double c1 = cw[j1], s1 = sg * sw[j1], c2 = cw[j2], s2 = sg * sw[j2];
      double c3 = cw[j3], s3 = sg * sw[j3];
      double ar = r0[k], ai = i0[k];
      double br = r1[k] * c1 - i1[k] * s1, bi = r1[k] * s1 + i1[k] * c1;
      double cr = r2[k] * c2 - i2[k] * s2, ci = r2[k] * s2 + i2[k] * c2;
      double dr = r3[k] * c3 - i3[k] * s3, di = r3[k] * s3 + i3[k] * c3;
      double s0r = ar + cr, s0i = ai + ci, d0r = ar - cr, d0i = ai - ci;
      double s1r = br + dr, s1i = bi + di, d1r = br - dr, d1i = bi - di;
      double rr = -sg * d1i, ri = sg * d1r; /* (sign i) d1: the odd outputs' rotation */
      r0[k] = s0r + s1r;
      i0[k] = s0i + s1i;
      r1[k] = d0r + rr;
      i1[k] = d0i + ri;
      r2[k] = s0r - s1r;
      i2[k] = s0i - s1i;
      r3[k] = d0r - rr;
      i3[k] = d0i - ri;
    }
    return;
  }
  blue *b = r > KL_FFT_DIRECT_MAX ? blue_of(p, r) : NULL;
  for (int64_t k = 0; k < m; k++) {
    for (int64_t q = 1; q < r && k > 0; q++) { /* the twiddles W_len^(q k) */
      int64_t at = q * m + k, j = q * k * step;
      double c = cw[j], s = sg * sw[j], ur = or_[at], ui = oi[at];
      or_[at] = ur * c - ui * s;
      oi[at] = ur * s + ui * c;
    }
    if (b)
      blue_run(b, or_ + k, oi + k, m, sign);
    else
      direct_run(p, r, or_ + k, oi + k, m, sg);
  }
}

void kl_fft_run(kl_fft *p, double *re, double *im, int sign) {
  memcpy(p->tr, re, (size_t)p->n * sizeof(double));
  memcpy(p->ti, im, (size_t)p->n * sizeof(double));
  transform(p, 0, p->n, p->tr, p->ti, 1, re, im, sign);
}
