/* The GPU backend as a session sees it: a kl_backend (backend.h) over one OpenCL
 * device, made for one graph (its supports_node records each node's kernel). */
#ifndef KL_GPU_BACKEND_H
#define KL_GPU_BACKEND_H

#include "backends/backend.h"
#include "backends/gpu/alloc.h"
#include "backends/gpu/opencl.h"

/* A backend on device d (opened with kl_cl_device_open, shared by a model's sessions;
 * the backend holds a reference) for graph g, at option "precision" (NULL, "", "auto":
 * TF32 for convolutions and matrix products where the device has tensor cores, else
 * float32; "fp32"; "tf32": fails on a device without them). */
kiln_status kl_gpu_backend_create(kl_cl_device *d, const kl_graph *g, const char *precision,
                                  kl_backend **out, kl_err *e);
/* Whether the backend computes convolutions and matrix products in TF32. */
bool kl_gpu_backend_tf32(const kl_backend *b);
/* The session's device allocator's statistics (alloc.h). */
void kl_gpu_backend_stats(const kl_backend *b, kl_dev_alloc_stats *st);
/* Memory every session of the model may read (its weights), from the device's shared
 * allocator, and that allocator's statistics. */
kiln_status kl_gpu_backend_alloc_shared(kl_backend *b, size_t bytes, kl_dev_buf *out,
                                        kl_err *e);
void kl_gpu_backend_shared_stats(const kl_backend *b, kl_dev_alloc_stats *st);
/* How its kernels came: built from source, loaded from the cache (opencl.h). */
const char *kl_gpu_backend_origin(const kl_backend *b);

#endif
