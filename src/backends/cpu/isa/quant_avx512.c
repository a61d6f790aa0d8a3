/* Linear quantization, AVX-512 level: quant_avx2.c compiled with AVX-512 F/BW/DQ/VL, so
 * that quant_impl.h's auto-vectorized loops (quantize, dequantize, QLinearAdd and
 * QLinearMul, the channels-last max) take sixteen lanes; the AVX2 intrinsics kernels
 * (sums, depthwise, matrix-vector) are AVX2's, as valid here; the table lookup is
 * VBMI's (quant_avx512vbmi.c) where the CPU has it, else AVX2's. */
#define KL_QUANT_AVX2_NAME kl_quant_avx512
#define KL_QUANT_AVX512 1
#include "backends/cpu/isa.h"
#include "quant_avx2.c"
