/* Linear quantization, generic level (quant_impl.h has the loops). */
#include "backends/cpu/isa/isa_fns.h"
#include "backends/cpu/isa/quant_impl.h"

const kl_quant_fns kl_quant_generic = KL_QUANT_FNS;
