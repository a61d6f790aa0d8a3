/* The oneDNN engine and stream a session's oneDNN kernels share (dnnl.h); internal to
 * dnnl.c and dnnl_attention.c, the only files that include oneDNN's header. */
#ifndef KL_CPU_DNNL_ENGINE_H
#define KL_CPU_DNNL_ENGINE_H

#include "backends/cpu/dnnl.h"

#include <dnnl.h>

struct kl_dnnl_engine {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
};

#endif
