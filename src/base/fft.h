/* Discrete Fourier transforms of any length in O(n log n) (base layer: the signal
 * kernels DFT and STFT, and the work estimate of those ops in ir/work.c).
 *
 * A plan for length n transforms complex lines of n doubles (real and imaginary parts
 * in two arrays):  X[k] = sum_t x[t] e^(sign 2 pi i k t / n), sign -1 (forward) or +1
 * (inverse, unscaled). Mixed radix: n is split into its prime factors (a lone two
 * first, then fours, threes, fives, ...), each stage a p-point transform of n / p groups after a
 * twiddle; a prime factor over KL_FFT_DIRECT_MAX is transformed by Bluestein's chirp
 * product through a power-of-two plan. Every twiddle is tabulated once per plan from
 * cos/sin of 2 pi j / n (no recurrences), so the error grows as log n, not as n. */
#ifndef KL_FFT_H
#define KL_FFT_H

#include "base/status.h"

#include <stdint.h>

/* The largest prime factor summed directly (p^2 per p points); larger ones go through
 * Bluestein's method. */
#define KL_FFT_DIRECT_MAX 64
/* The largest length, and the largest prime factor Bluestein's method takes (its
 * power-of-two plan is about 80 bytes per point of 2p). */
#define KL_FFT_MAX_LEN (INT64_C(1) << 31)
#define KL_FFT_MAX_PRIME (INT64_C(1) << 22)

typedef struct kl_fft kl_fft;

/* A plan for lines of length n (1 <= n <= KL_FFT_MAX_LEN, prime factors at most
 * KL_FFT_MAX_PRIME): KILN_ERR_LIMIT past those, KILN_ERR_OUT_OF_MEMORY. */
kiln_status kl_fft_create(int64_t n, kl_fft **out, kl_err *e);
void kl_fft_free(kl_fft *p);
/* Transforms re[n], im[n] in place (sign -1 or +1). A plan holds scratch: one thread
 * runs a plan at a time. */
void kl_fft_run(kl_fft *p, double *re, double *im, int sign);
/* Multiply-adds of one transform of length n as kl_fft_run does it (the work estimate;
 * a length it refuses counts as the direct sum, n^2). */
double kl_fft_steps(int64_t n);

#endif
