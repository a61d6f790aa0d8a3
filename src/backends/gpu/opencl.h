/* OpenCL devices for the GPU backend: a device chosen by a spec ("opencl",
 * "opencl:P.D"), its context and in-order queue, kiln's kernels built once for it (from
 * the source embedded in the library, or from the binary an earlier build cached on disk),
 * device memory through the caching allocator (alloc.h), and kernel launches.
 *
 * One kl_cl belongs to one session and is used by one thread at a time. In a build
 * without OpenCL (meson -Dgpu=disabled, or no ocl-icd-opencl-dev), kl_cl_device_open fails
 * with KILN_ERR_UNSUPPORTED saying so, and kl_cl_describe lists nothing. */
#ifndef KL_GPU_OPENCL_H
#define KL_GPU_OPENCL_H

#include "backends/backend.h"
#include "backends/gpu/alloc.h"

typedef struct kl_cl kl_cl;

/* A kernel binary built ahead of time (PTX for sm_<target>), embedded by the build. */
typedef struct kl_cl_blob {
  int target; /* the sm it was written for, and every later one unless exact */
  int exact;  /* arch-specific (sm_90a's wgmma): that sm only */
  const char *text;
} kl_cl_blob;

/* Every OpenCL platform and device this process sees, a line each, into buf (for
 * `kiln info`): "opencl:0.0  NVIDIA H100 80GB HBM3 (GPU, NVIDIA CUDA, OpenCL 3.0 CUDA
 * 13.0.98, driver 580.159.04, 79.2 GiB), kernels: built from source, cached in DIR".
 * Returns how many devices it listed; a line saying why when there are none. */
int kl_cl_describe(char *buf, size_t len);

/* A device shared by the sessions of one model: its context, kiln's kernels built for it
 * once, and its caching allocator (locked: sessions run on their own threads); counted
 * references, the last release frees it. */
typedef struct kl_cl_device kl_cl_device;
/* Opens the device a spec names: "opencl" (the first GPU of any platform, else the
 * first device) or "opencl:P.D" (device D of platform P, counted from 0), and builds
 * kiln's kernels for it (or loads them: embedded PTX, the disk cache). One reference. */
kiln_status kl_cl_device_open(const char *spec, kl_cl_device **out, kl_err *e);
void kl_cl_device_retain(kl_cl_device *d);
void kl_cl_device_release(kl_cl_device *d);
/* Gives a buffer of d's allocator back without a session (a model's weights). */
void kl_cl_device_free_buf(kl_cl_device *d, kl_dev_buf *buf);
/* A session's use of d: its own queue and kernel objects; holds a reference to d. */
kiln_status kl_cl_open_on(kl_cl_device *d, kl_cl **out, kl_err *e);
/* Profiling (kiln bench --profile): while on, launches record OpenCL events, and
 * kl_cl_kernel_ms waits for the kernels launched since its last call and returns the
 * time they ran on the device, by those events (the first 64 of a node). */
void kl_cl_set_profiling(kl_cl *c, bool on);
double kl_cl_kernel_ms(kl_cl *c);
void kl_cl_close(kl_cl *c);
/* "pthread-haswell-AMD EPYC (opencl:0.0, Portable Computing Language)" */
const char *kl_cl_name(const kl_cl *c);
/* How the kernels came: "built from source", "loaded from the cache DIR/FILE". */
const char *kl_cl_kernels_origin(const kl_cl *c);

/* Device memory for what this session's kernels write: its own caching allocator. */
kiln_status kl_cl_alloc(kl_cl *c, size_t bytes, kl_dev_buf *out, kl_err *e);
void kl_cl_free(kl_cl *c, kl_dev_buf *buf);
/* Device memory shared by every session (the model's weights: written once, then only
 * read), from the device's allocator; given back with kl_cl_device_free_buf. */
kiln_status kl_cl_alloc_shared(kl_cl *c, size_t bytes, kl_dev_buf *out, kl_err *e);
void kl_cl_shared_stats(const kl_cl *c, kl_dev_alloc_stats *st);
kiln_status kl_cl_upload(kl_cl *c, const kl_dev_buf *dst, const void *src, size_t n,
                         kl_err *e);
kiln_status kl_cl_download(kl_cl *c, void *dst, const kl_dev_buf *src, size_t n, kl_err *e);
kiln_status kl_cl_finish(kl_cl *c, kl_err *e);
void kl_cl_alloc_stats(const kl_cl *c, kl_dev_alloc_stats *st);

/* A kernel argument. A tensor is two arguments of the kernel: its buffer and its
 * offset in elements (`__global float *x, ulong x_off`); an absent or empty tensor
 * passes a NULL buffer. */
typedef enum kl_cl_arg_kind { KL_CLA_TENSOR, KL_CLA_INT, KL_CLA_LONG, KL_CLA_FLOAT, KL_CLA_BYTES } kl_cl_arg_kind;
typedef struct kl_cl_arg {
  kl_cl_arg_kind kind;
  const kl_tensor *t;
  int64_t i;
  float f;
  const void *p;
  size_t n;
} kl_cl_arg;
#define CLA_T(x) ((kl_cl_arg){.kind = KL_CLA_TENSOR, .t = (x)})
#define CLA_I(x) ((kl_cl_arg){.kind = KL_CLA_INT, .i = (x)})
#define CLA_L(x) ((kl_cl_arg){.kind = KL_CLA_LONG, .i = (x)})
#define CLA_F(x) ((kl_cl_arg){.kind = KL_CLA_FLOAT, .f = (x)})
#define CLA_S(x) ((kl_cl_arg){.kind = KL_CLA_BYTES, .p = &(x), .n = sizeof(x)})

/* Queues kernel `name` over global[0..dims-1] work-items (each rounded up to a multiple
 * of local[] when local is given; kernels check their bounds). Nothing is queued when
 * a global size is 0. Fails naming the device and kernel. */
kiln_status kl_cl_launch(kl_cl *c, const char *name, const kl_cl_arg *args, int n_args,
                         int dims, const size_t *global, const size_t *local, kl_err *e);
#define KL_CL_LAUNCH(c, name, dims, global, local, e, ...)                                \
  kl_cl_launch(c, name, (const kl_cl_arg[]){__VA_ARGS__},                              \
               (int)(sizeof((kl_cl_arg[]){__VA_ARGS__}) / sizeof(kl_cl_arg)), dims, global, \
               local, e)

/* The largest work-group size of the device (at least 1). */
size_t kl_cl_max_group(const kl_cl *c);
/* Its compute units (an NVIDIA GPU's SMs; at least 1). */
unsigned kl_cl_compute_units(const kl_cl *c);
/* The session's error flag: KL_CL_FLAG_INTS int32s on the device, zero until a kernel
 * finds bad input it cannot compute (a Gather index out of range), when the first such
 * work-item writes [node + 1, then what the message needs: kernels.h says per kernel]
 * (atomic_cmpxchg on element 0). Made (zeroed) on first use; NULL when out of memory.
 * kl_cl_flag_read, after the run's kernels finished, reads it into out (zeros when no
 * kernel took it) and clears a raised flag. Element 7 says what was found: 0 a Gather
 * index out of range ([1..2] the element, [3..4] the index, [5..6] the axis' length,
 * each low then high 32 bits), KL_CL_FLAG_DIV_ZERO an integer division by zero ([1..2]
 * the element). */
#define KL_CL_FLAG_INTS 8
#define KL_CL_FLAG_DIV_ZERO 1
/* The graph node whose kernels are being queued (the backend sets it before each node's
 * run; a kernel that may raise the flag gets it as its argument). */
void kl_cl_set_node(kl_cl *c, int node);
int kl_cl_node(const kl_cl *c);
/* The name of the kernel queued last since kl_cl_set_node (c's, as long as c lives),
 * NULL when none was. */
const char *kl_cl_last_kernel(const kl_cl *c);
const kl_tensor *kl_cl_flag(kl_cl *c, kl_err *e);
kiln_status kl_cl_flag_read(kl_cl *c, int32_t out[KL_CL_FLAG_INTS], kl_err *e);
/* Whether the program built for the device has kernel `name` (tc.cl's exist only in
 * the PTX for sm_80 and later). */
bool kl_cl_has_kernel(const kl_cl *c, const char *name);
/* Precision TF32: convolutions and matrix products on the tensor cores (tc.cl), set by
 * the GPU backend from option "precision" where the kernels exist. */
void kl_cl_set_tf32(kl_cl *c, bool on);
bool kl_cl_tf32(const kl_cl *c);
/* What the session may run on Hopper's wgmma kernels (tc.cl's kl_wg_*, where the program
 * has them), read once from the environment when the session opens: KILN_GPU_WGMMA unset,
 * matrix products (KL_CL_WG_PRODUCTS); "all", convolutions too (KL_CL_WG_ALL); "0",
 * none. KILN_GPU_WGMMA_ROUND=tile: the products' A rounded to TF32 in local memory by
 * each tile (kl_wg_mm*t) instead of by one pass before (kl_wg_round; for comparisons). */
enum { KL_CL_WG_NONE, KL_CL_WG_PRODUCTS, KL_CL_WG_ALL };
int kl_cl_wgmma(const kl_cl *c);
bool kl_cl_wg_round_in_tiles(const kl_cl *c);

#endif
