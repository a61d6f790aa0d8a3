/* Linear quantization, AVX2 level: quant_impl.h's loops compiled with AVX2 (vdivps,
 * vroundps, vcvtps2dq, eight lanes). */
#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/quant_impl.h"

const kl_quant_fns kl_quant_avx2 = KL_QUANT_FNS;
