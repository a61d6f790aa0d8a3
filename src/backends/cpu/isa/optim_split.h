/* Split FP32 weights (SplitSGD: ir/optim.h) joined and split in plain C, included by
 * optim_generic.c and optim_simd.h so that each level's flags vectorize the loops (the
 * fields join and split of kl_optim_fns). The same bits as kl_join_bf16 and
 * kl_split_bf16 element by element (test_optim compares them over every class of
 * float32 bit pattern). */
#ifndef KL_OPTIM_SPLIT_H
#define KL_OPTIM_SPLIT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* out[i] = the float32 of bits top[i] << 16 | trail[i] (trail NULL: 0, a bfloat16's) */
static void join_halves(const uint16_t *restrict top, const uint16_t *restrict trail,
                        float *restrict out, size_t n) {
  if (trail) {
    for (size_t i = 0; i < n; i++) {
      uint32_t bits = (uint32_t)top[i] << 16 | trail[i];
      memcpy(out + i, &bits, sizeof bits);
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    uint32_t bits = (uint32_t)top[i] << 16;
    memcpy(out + i, &bits, sizeof bits);
  }
}

/* top[i], trail[i] = in[i]'s high and low 16 bits; a NaN whose payload sits only in the
 * low half keeps its top half a NaN (bit 6 set), as kl_split_bf16 */
static void split_halves(const float *restrict in, uint16_t *restrict top,
                         uint16_t *restrict trail, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t bits;
    memcpy(&bits, in + i, sizeof bits);
    uint32_t hi = bits >> 16, lo = bits & 0xffffu;
    uint32_t nan_low = ((hi & 0x7f80u) == 0x7f80u) & ((hi & 0x007fu) == 0) & (lo != 0);
    top[i] = (uint16_t)(hi | nan_low << 6);
    trail[i] = (uint16_t)lo;
  }
}

#endif
