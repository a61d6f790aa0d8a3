/* OpenCL devices (opencl.h): choosing one, building kiln's kernels for it with a disk
 * cache of the built binary, device memory and launches. */
#include "backends/gpu/opencl.h"
#include "import/fileio.h"
#include "kl_config.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if KL_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <CL/cl_ext.h>

extern const char kl_cl_source[]; /* the kernels folder's .cl files, embedded at build time */
#if KL_HAVE_CL_PTX
extern const kl_cl_blob kl_cl_ptx[]; /* the same, as PTX per sm target (tools/build_ptx.sh) */
extern const int kl_cl_ptx_count;
#endif
#ifndef CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV
#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001
#endif

#define MAX_PLATFORMS 16
#define MAX_DEVICES 64
#define BUILD_OPTIONS "-cl-std=CL1.2"

typedef struct cl_kernel_entry {
  char name[64];
  cl_kernel k;
} cl_kernel_entry;

/* A device as the sessions of one model share it: its context, the program built once,
 * and the caching allocator, which the lock guards (sessions run on their own threads). */
struct kl_cl_device {
  cl_platform_id platform;
  cl_device_id device;
  cl_context ctx;
  cl_program program;
  kl_dev_alloc *alloc;
  pthread_mutex_t lock;
  int refs; /* under lock */
  size_t max_group;
  unsigned units; /* CL_DEVICE_MAX_COMPUTE_UNITS (an NVIDIA GPU's SMs), at least 1 */
  cl_ulong max_alloc; /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
  char name[384];
  char origin[1200];
};

/* A session's use of a device: its own in-order queue and kernel objects (whose
 * arguments are set per launch, so they cannot be shared between threads), and its own
 * caching allocator for what its kernels write: a block freed by one queue while its
 * kernels may still run must not be handed to another queue (only the same in-order
 * queue is sure to finish with it first), so the device's shared allocator holds only
 * what is written once and then only read, the model's weights. */
#define MAX_TIMED 64 /* kernels of one node timed by events (kiln bench --profile) */

/* Uploads of at least STAGE_MIN bytes pass through two pinned host buffers of STAGE_CHUNK
 * bytes each (CL_MEM_ALLOC_HOST_PTR, mapped once per session): a chunk is copied into one
 * by the CPU's threads while the device reads the other, so an input arrives at the
 * DMA's rate rather than at that of the driver's own copy of pageable memory (NVIDIA's:
 * about 6 GB/s, 3.3 ms of ResNet-50's 19 MB input at batch 32, a third of its run). */
#define STAGE_MIN ((size_t)1 << 20)
#define STAGE_CHUNK ((size_t)4 << 20)

struct kl_cl {
  kl_cl_device *d;
  kl_dev_alloc *alloc;
  cl_command_queue queue;
  bool profiling;        /* launches record events */
  cl_event timed[MAX_TIMED];
  int n_timed;
  cl_kernel_entry *kernels;
  cl_uint n_kernels;
  bool tf32;             /* convolutions and products on the tensor cores (tc.cl) */
  int wgmma;             /* KL_CL_WG_*: KILN_GPU_WGMMA when the session opened */
  bool wg_round_tiles;   /* KILN_GPU_WGMMA_ROUND=tile then */
  kl_dev_buf flag;       /* the kernels' error flag (kl_cl_flag), flag_t its tensor */
  kl_tensor flag_t;
  bool has_flag;
  int node; /* the graph node whose kernels are being queued (kl_cl_set_node) */
  const char *last_kernel; /* the kernel queued last since kl_cl_set_node, else NULL:
                            * its name in the kernel table */
  /* the upload's pinned buffers (STAGE_CHUNK): made on the first large upload; the
   * event of the copy that last read each, NULL when none is in flight */
  cl_mem stage[2];
  void *stage_ptr[2];
  cl_event stage_ev[2];
  bool stage_tried; /* made, or found impossible: uploads then go straight */
};

static void stage_release(kl_cl *c);

static const char *cl_err_name(cl_int st) {
  switch (st) {
  case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
  case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
  case CL_COMPILER_NOT_AVAILABLE: return "CL_COMPILER_NOT_AVAILABLE";
  case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
  case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
  case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
  case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
  case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
  case CL_INVALID_PLATFORM: return "CL_INVALID_PLATFORM";
  case CL_INVALID_DEVICE: return "CL_INVALID_DEVICE";
  case CL_INVALID_BINARY: return "CL_INVALID_BINARY";
  case CL_INVALID_PROGRAM_EXECUTABLE: return "CL_INVALID_PROGRAM_EXECUTABLE";
  case CL_INVALID_KERNEL_NAME: return "CL_INVALID_KERNEL_NAME";
  case CL_INVALID_ARG_INDEX: return "CL_INVALID_ARG_INDEX";
  case CL_INVALID_ARG_VALUE: return "CL_INVALID_ARG_VALUE";
  case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
  case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
  case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
  case CL_INVALID_WORK_ITEM_SIZE: return "CL_INVALID_WORK_ITEM_SIZE";
  case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
  case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
  case CL_INVALID_COMMAND_QUEUE: return "CL_INVALID_COMMAND_QUEUE";
  case CL_PLATFORM_NOT_FOUND_KHR: return "CL_PLATFORM_NOT_FOUND_KHR (no OpenCL driver: "
                                         "ocl-icd found no file in /etc/OpenCL/vendors)";
  default: return "an OpenCL error";
  }
}

static void dev_str(cl_device_id d, cl_device_info what, char *buf, size_t len) {
  buf[0] = 0;
  if (clGetDeviceInfo(d, what, len, buf, NULL) != CL_SUCCESS) snprintf(buf, len, "?");
  buf[len - 1] = 0;
}

static void plat_str(cl_platform_id p, cl_platform_info what, char *buf, size_t len) {
  buf[0] = 0;
  if (clGetPlatformInfo(p, what, len, buf, NULL) != CL_SUCCESS) snprintf(buf, len, "?");
  buf[len - 1] = 0;
}

static cl_uint platforms(cl_platform_id *ids, cl_int *st) {
  cl_uint n = 0;
  *st = clGetPlatformIDs(MAX_PLATFORMS, ids, &n);
  if (*st != CL_SUCCESS) return 0;
  return n > MAX_PLATFORMS ? MAX_PLATFORMS : n;
}

static cl_uint devices(cl_platform_id p, cl_device_id *ids) {
  cl_uint n = 0;
  if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, MAX_DEVICES, ids, &n) != CL_SUCCESS) return 0;
  return n > MAX_DEVICES ? MAX_DEVICES : n;
}

/* ---- the disk cache of built programs ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * UINT64_C(1099511628211);
  return h;
}
#define FNV0 UINT64_C(14695981039346656037)

/* The cache folder: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln;
 * false (no cache) when none is set or KILN_CACHE_DIR is "". */
static bool cache_dir(char *buf, size_t len) {
  const char *d = getenv("KILN_CACHE_DIR");
  if (d) return *d && (size_t)snprintf(buf, len, "%s", d) < len;
  if ((d = getenv("XDG_CACHE_HOME")) && *d)
    return (size_t)snprintf(buf, len, "%s/kiln", d) < len;
  if ((d = getenv("HOME")) && *d) return (size_t)snprintf(buf, len, "%s/.cache/kiln", d) < len;
  return false;
}

/* The key of a build: platform, device, driver, kiln's source and the options. */
static uint64_t build_key(const kl_cl_device *c) {
  char s[512];
  uint64_t h = FNV0;
  plat_str(c->platform, CL_PLATFORM_NAME, s, sizeof s);
  h = fnv(h, s, strlen(s) + 1);
  plat_str(c->platform, CL_PLATFORM_VERSION, s, sizeof s);
  h = fnv(h, s, strlen(s) + 1);
  dev_str(c->device, CL_DEVICE_NAME, s, sizeof s);
  h = fnv(h, s, strlen(s) + 1);
  dev_str(c->device, CL_DRIVER_VERSION, s, sizeof s);
  h = fnv(h, s, strlen(s) + 1);
  h = fnv(h, kl_cl_source, strlen(kl_cl_source) + 1);
  return fnv(h, BUILD_OPTIONS, sizeof BUILD_OPTIONS);
}

typedef struct cache_head {
  char magic[8];   /* "KILNCLB1" */
  uint64_t key;    /* build_key */
  uint64_t size;   /* bytes of binary after the header */
  uint64_t sum;    /* fnv of those bytes */
} cache_head;

/* The cached binary for key, malloc'd, or NULL (absent, unreadable, corrupt, stale). */
static unsigned char *cache_read(const char *path, uint64_t key, size_t *size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat sb;
  cache_head h;
  unsigned char *bin = NULL;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || read(fd, &h, sizeof h) != sizeof h ||
      memcmp(h.magic, "KILNCLB1", 8) != 0 || h.key != key || h.size == 0 ||
      h.size != (uint64_t)sb.st_size - sizeof h || h.size > ((uint64_t)1 << 31))
    goto out;
  bin = malloc((size_t)h.size);
  if (!bin || read(fd, bin, (size_t)h.size) != (ssize_t)h.size ||
      fnv(FNV0, bin, (size_t)h.size) != h.sum) {
    free(bin);
    bin = NULL;
    goto out;
  }
  *size = (size_t)h.size;
out:
  close(fd);
  return bin;
}

/* Writes the binary atomically: a temporary file in the folder, renamed over path.
 * Failures are ignored (the next process builds again). */
static void cache_write(const char *dir, const char *path, uint64_t key,
                        const unsigned char *bin, size_t size) {
  char parent[600];
  snprintf(parent, sizeof parent, "%s", dir);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent) {
    *slash = 0;
    mkdir(parent, 0755); /* ~/.cache may not exist yet */
  }
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) return;
  char tmp[700];
  snprintf(tmp, sizeof tmp, "%s/.tmp-XXXXXX", dir);
  int fd = mkstemp(tmp);
  if (fd < 0) return;
  cache_head h = {{'K', 'I', 'L', 'N', 'C', 'L', 'B', '1'}, key, size, fnv(FNV0, bin, size)};
  bool ok = write(fd, &h, sizeof h) == sizeof h && write(fd, bin, size) == (ssize_t)size;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

/* The failure with the start of the compiler's log (its first errors). */
static kiln_status build_log(kl_cl_device *c, cl_int st, kl_err *e) {
  size_t n = 0;
  char *log = NULL;
  if (clGetProgramBuildInfo(c->program, c->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) ==
          CL_SUCCESS && n > 0 && (log = malloc(n + 1)) &&
      clGetProgramBuildInfo(c->program, c->device, CL_PROGRAM_BUILD_LOG, n, log, NULL) ==
          CL_SUCCESS)
    log[n] = 0;
  else if (log)
    log[0] = 0;
  kiln_status r = kl_fail(e, KILN_ERR_UNSUPPORTED, "OpenCL device %s: building kiln's kernels "
                          "failed (%s, %d): %.600s", c->name, cl_err_name(st), st,
                          log ? log : "(no log)");
  free(log);
  return r;
}

/* KILN_GPU_PTX=FILE: that PTX instead of the embedded one (for kernel development: a
 * PTX that tools/build_ptx.sh wrote, tried without rebuilding the library). Its text,
 * malloc'd, or NULL (unset, unreadable, or over 64 MiB). */
static char *ptx_file(void) {
  const char *path = getenv("KILN_GPU_PTX");
  if (!path || !*path) return NULL;
  void *buf = NULL;
  size_t len = 0;
  kl_err e = {0}; /* regular files only (kl_file_read: no FIFO blocks the load) */
  if (kl_file_read(path, (size_t)64 << 20, &buf, &len, &e) != KILN_OK) return NULL;
  char *text = realloc(buf, len + 1);
  if (!text) {
    free(buf);
    return NULL;
  }
  text[len] = 0;
  return text;
}

#if KL_HAVE_CL_PTX
/* An NVIDIA device's compute capability as 10 major + minor (90: sm_90), -1 unknown. */
static int nv_sm(cl_device_id d) {
  cl_uint major = 0, minor = 0;
  if (clGetDeviceInfo(d, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) !=
          CL_SUCCESS ||
      clGetDeviceInfo(d, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor, NULL) !=
          CL_SUCCESS)
    return -1;
  return (int)(major * 10 + minor);
}
#endif

/* NVIDIA's OpenCL: the embedded PTX of the highest sm target the device runs (or the
 * file KILN_GPU_PTX names), unless KILN_GPU_AOT=0. True when it loaded; else the caller
 * builds from source. */
static bool load_ptx(kl_cl_device *c) {
#if KL_HAVE_CL_PTX
  const char *aot = getenv("KILN_GPU_AOT");
  char pname[120];
  plat_str(c->platform, CL_PLATFORM_NAME, pname, sizeof pname);
  if ((aot && strcmp(aot, "0") == 0) || !strstr(pname, "NVIDIA")) return false;
  char *file = ptx_file();
  if (file) {
    const unsigned char *fbin = (const unsigned char *)file;
    size_t fsize = strlen(file) + 1;
    cl_int fst, fbst = CL_SUCCESS;
    c->program = clCreateProgramWithBinary(c->ctx, 1, &c->device, &fsize, &fbin, &fbst, &fst);
    bool ok = fst == CL_SUCCESS && fbst == CL_SUCCESS &&
              clBuildProgram(c->program, 1, &c->device, "", NULL, NULL) == CL_SUCCESS;
    free(file);
    if (ok) {
      snprintf(c->origin, sizeof c->origin, "the PTX of KILN_GPU_PTX");
      return true;
    }
    if (c->program) clReleaseProgram(c->program);
    c->program = NULL;
  }
  /* the highest target the device runs first; where the driver refuses one, the next */
  int sm = nv_sm(c->device), tried = INT_MAX;
  if (sm < 0) return false;
  for (;;) {
    int best = -1;
    for (int i = 0; i < kl_cl_ptx_count; i++) {
      const kl_cl_blob *b = &kl_cl_ptx[i];
      if (b->target <= sm && b->target < tried && (!b->exact || b->target == sm) &&
          (best < 0 || b->target > kl_cl_ptx[best].target))
        best = i;
    }
    if (best < 0) return false;
    tried = kl_cl_ptx[best].target;
    const unsigned char *bin = (const unsigned char *)kl_cl_ptx[best].text;
    size_t size = strlen(kl_cl_ptx[best].text) + 1;
    cl_int st, bst = CL_SUCCESS;
    c->program = clCreateProgramWithBinary(c->ctx, 1, &c->device, &size, &bin, &bst, &st);
    if (st == CL_SUCCESS && bst == CL_SUCCESS &&
        clBuildProgram(c->program, 1, &c->device, "", NULL, NULL) == CL_SUCCESS) {
      snprintf(c->origin, sizeof c->origin, "ahead of time: PTX for sm_%d%s embedded in the "
               "library (the device is sm_%d)", kl_cl_ptx[best].target,
               kl_cl_ptx[best].exact ? "a" : "", sm);
      return true;
    }
    if (c->program) clReleaseProgram(c->program);
    c->program = NULL;
  }
#else
  (void)c;
#endif
  return false;
}

static kiln_status build_program(kl_cl_device *c, kl_err *e) {
  if (load_ptx(c)) return KILN_OK;
  char dir[512], path[600];
  bool cached = cache_dir(dir, sizeof dir);
  uint64_t key = build_key(c);
  if (cached) snprintf(path, sizeof path, "%s/opencl-%016" PRIx64 ".bin", dir, key);
  cl_int st;
  size_t size = 0;
  unsigned char *bin = cached ? cache_read(path, key, &size) : NULL;
  if (bin) {
    const unsigned char *bins[1] = {bin};
    cl_int bst = CL_SUCCESS;
    c->program = clCreateProgramWithBinary(c->ctx, 1, &c->device, &size, bins, &bst, &st);
    free(bin);
    if (st == CL_SUCCESS && bst == CL_SUCCESS &&
        clBuildProgram(c->program, 1, &c->device, BUILD_OPTIONS, NULL, NULL) == CL_SUCCESS) {
      snprintf(c->origin, sizeof c->origin, "loaded from the cache %s", path);
      return KILN_OK;
    }
    if (c->program) clReleaseProgram(c->program); /* stale or refused: build again */
    c->program = NULL;
  }
  const char *src = kl_cl_source;
  c->program = clCreateProgramWithSource(c->ctx, 1, &src, NULL, &st);
  if (st != CL_SUCCESS)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "OpenCL device %s: clCreateProgramWithSource "
                   "failed: %s (%d)", c->name, cl_err_name(st), st);
  st = clBuildProgram(c->program, 1, &c->device, BUILD_OPTIONS, NULL, NULL);
  if (st != CL_SUCCESS) return build_log(c, st, e);
  snprintf(c->origin, sizeof c->origin, "built from source%s%s", cached ? ", cached in " : "",
           cached ? dir : " (no cache folder)");
  size_t bsize = 0;
  if (cached && clGetProgramInfo(c->program, CL_PROGRAM_BINARY_SIZES, sizeof bsize, &bsize,
                                 NULL) == CL_SUCCESS && bsize > 0) {
    unsigned char *out = malloc(bsize);
    unsigned char *outs[1] = {out};
    if (out && clGetProgramInfo(c->program, CL_PROGRAM_BINARIES, sizeof outs, outs, NULL) ==
                   CL_SUCCESS)
      cache_write(dir, path, key, out, bsize);
    free(out);
  }
  return KILN_OK;
}

static kiln_status make_kernels(kl_cl *c, kl_err *e) {
  cl_uint n = 0;
  cl_int st = clCreateKernelsInProgram(c->d->program, 0, NULL, &n);
  if (st != CL_SUCCESS || n == 0)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "OpenCL device %s: the kernels did not load: "
                   "%s (%d)", c->d->name, cl_err_name(st), st);
  cl_kernel *ks = calloc(n, sizeof *ks);
  c->kernels = calloc(n, sizeof *c->kernels);
  if (!ks || !c->kernels) {
    free(ks);
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for OpenCL kernels");
  }
  st = clCreateKernelsInProgram(c->d->program, n, ks, NULL);
  if (st != CL_SUCCESS) {
    free(ks);
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "OpenCL device %s: the kernels did not load: "
                   "%s (%d)", c->d->name, cl_err_name(st), st);
  }
  for (cl_uint i = 0; i < n; i++) {
    c->kernels[i].k = ks[i];
    clGetKernelInfo(ks[i], CL_KERNEL_FUNCTION_NAME, sizeof c->kernels[i].name,
                    c->kernels[i].name, NULL);
    c->kernels[i].name[sizeof c->kernels[i].name - 1] = 0;
  }
  c->n_kernels = n;
  free(ks);
  return KILN_OK;
}

/* ---- device memory through the caching allocator ---- */

static kiln_status seg_alloc(void *ctx, size_t bytes, void **handle, kl_err *e) {
  kl_cl_device *c = ctx;
  cl_int st;
  /* NVIDIA's driver creates larger buffers and fails only when a kernel first uses
   * one: refuse them here, where the allocator can still release its cache */
  if (c->max_alloc && bytes > c->max_alloc)
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "OpenCL device %s: a buffer of %zu bytes is over "
                   "the device's largest allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE, %llu bytes)",
                   c->name, bytes, (unsigned long long)c->max_alloc);
  cl_mem m = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, bytes, NULL, &st);
  if (st == CL_SUCCESS && m) {
    *handle = m;
    return KILN_OK;
  }
  kiln_status code = st == CL_MEM_OBJECT_ALLOCATION_FAILURE || st == CL_OUT_OF_RESOURCES ||
                             st == CL_INVALID_BUFFER_SIZE || st == CL_OUT_OF_HOST_MEMORY
                         ? KILN_ERR_OUT_OF_MEMORY
                         : KILN_ERR_INTERNAL;
  return kl_fail(e, code, "OpenCL device %s: clCreateBuffer of %zu bytes failed: %s (%d)",
                 c->name, bytes, cl_err_name(st), st);
}

static void seg_free(void *ctx, void *handle) {
  (void)ctx;
  clReleaseMemObject((cl_mem)handle);
}

/* ---- opening a device ---- */

static bool parse_index(const char **p, cl_uint *out) {
  char *end;
  if (**p < '0' || **p > '9') return false;
  unsigned long v = strtoul(*p, &end, 10);
  if (v > 1000) return false;
  *out = (cl_uint)v;
  *p = end;
  return true;
}

static kiln_status choose(const char *spec, cl_platform_id *plat, cl_device_id *dev,
                          char *where, size_t where_len, kl_err *e) {
  cl_platform_id ps[MAX_PLATFORMS];
  cl_int st;
  cl_uint np = platforms(ps, &st);
  if (np == 0)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "device '%s': no OpenCL platform (%s, %d): "
                   "install a driver (PoCL for the CPU: pocl-opencl-icd) and its ICD file "
                   "in /etc/OpenCL/vendors", spec, st == CL_SUCCESS ? "none listed" :
                   cl_err_name(st), st);
  const char *rest = spec + strlen("opencl");
  if (*rest == 0) { /* the first GPU, else the first device */
    for (int want_gpu = 1; want_gpu >= 0; want_gpu--)
      for (cl_uint p = 0; p < np; p++) {
        cl_device_id ds[MAX_DEVICES];
        cl_uint nd = devices(ps[p], ds);
        for (cl_uint d = 0; d < nd; d++) {
          cl_device_type t = 0;
          clGetDeviceInfo(ds[d], CL_DEVICE_TYPE, sizeof t, &t, NULL);
          if (want_gpu && !(t & CL_DEVICE_TYPE_GPU)) continue;
          *plat = ps[p];
          *dev = ds[d];
          snprintf(where, where_len, "opencl:%u.%u", p, d);
          return KILN_OK;
        }
      }
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "device '%s': the %u OpenCL platform(s) have no "
                   "device", spec, np);
  }
  cl_uint pi = 0, di = 0;
  const char *q = rest + 1;
  if (*rest != ':' || !parse_index(&q, &pi) || *q++ != '.' || !parse_index(&q, &di) || *q)
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "device '%s': expected opencl or "
                   "opencl:P.D (platform P, device D, from 0; `kiln info` lists them)", spec);
  if (pi >= np)
    return kl_fail(e, KILN_ERR_NOT_FOUND, "device '%s': there is no OpenCL platform %u "
                   "(this machine has %u; `kiln info` lists them)", spec, pi, np);
  cl_device_id ds[MAX_DEVICES];
  cl_uint nd = devices(ps[pi], ds);
  if (di >= nd)
    return kl_fail(e, KILN_ERR_NOT_FOUND, "device '%s': OpenCL platform %u has no device %u "
                   "(it has %u; `kiln info` lists them)", spec, pi, di, nd);
  *plat = ps[pi];
  *dev = ds[di];
  snprintf(where, where_len, "opencl:%u.%u", pi, di);
  return KILN_OK;
}

static void device_free(kl_cl_device *d) {
  kl_dev_alloc_free(d->alloc, NULL);
  if (d->program) clReleaseProgram(d->program);
  if (d->ctx) clReleaseContext(d->ctx);
  pthread_mutex_destroy(&d->lock);
  free(d);
}

kiln_status kl_cl_device_open(const char *spec, kl_cl_device **out, kl_err *e) {
  *out = NULL;
  kl_cl_device *c = calloc(1, sizeof *c);
  if (!c) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory opening an OpenCL device");
  pthread_mutex_init(&c->lock, NULL);
  c->refs = 1;
  char where[32], dname[200], pname[120];
  kiln_status st = choose(spec, &c->platform, &c->device, where, sizeof where, e);
  if (st != KILN_OK) {
    device_free(c);
    return st;
  }
  dev_str(c->device, CL_DEVICE_NAME, dname, sizeof dname);
  plat_str(c->platform, CL_PLATFORM_NAME, pname, sizeof pname);
  snprintf(c->name, sizeof c->name, "%s (%s, %s)", dname, where, pname);
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)c->platform, 0};
  cl_int cst;
  c->ctx = clCreateContext(props, 1, &c->device, NULL, NULL, &cst);
  if (cst != CL_SUCCESS) {
    c->ctx = NULL;
    kl_fail(e, KILN_ERR_UNSUPPORTED, "OpenCL device %s: no context: %s (%d)", c->name,
            cl_err_name(cst), cst);
    device_free(c);
    return KILN_ERR_UNSUPPORTED;
  }
  size_t mg = 1;
  clGetDeviceInfo(c->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof mg, &mg, NULL);
  c->max_group = mg ? mg : 1;
  cl_uint units = 0;
  clGetDeviceInfo(c->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
  c->units = units ? units : 1;
  clGetDeviceInfo(c->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof c->max_alloc, &c->max_alloc,
                  NULL);
  kl_dev_iface di = {c, seg_alloc, seg_free};
  st = kl_dev_alloc_create(&di, &c->alloc, e);
  if (st == KILN_OK) st = build_program(c, e);
  if (st != KILN_OK) {
    device_free(c);
    return st;
  }
  *out = c;
  return KILN_OK;
}

void kl_cl_device_retain(kl_cl_device *d) {
  pthread_mutex_lock(&d->lock);
  d->refs++;
  pthread_mutex_unlock(&d->lock);
}

void kl_cl_device_release(kl_cl_device *d) {
  if (!d) return;
  pthread_mutex_lock(&d->lock);
  int left = --d->refs;
  pthread_mutex_unlock(&d->lock);
  if (left == 0) device_free(d);
}

void kl_cl_device_free_buf(kl_cl_device *d, kl_dev_buf *buf) {
  if (!buf->mem) return;
  kl_dev_block b = {buf->mem, buf->off, buf->size, buf->priv, buf->serial};
  pthread_mutex_lock(&d->lock);
  kl_dev_alloc_release(d->alloc, &b, NULL);
  pthread_mutex_unlock(&d->lock);
  memset(buf, 0, sizeof *buf);
}

kiln_status kl_cl_open_on(kl_cl_device *d, kl_cl **out, kl_err *e) {
  *out = NULL;
  kl_cl *c = calloc(1, sizeof *c);
  if (!c) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory opening an OpenCL device");
  kl_cl_device_retain(d);
  c->d = d;
  const char *wg = getenv("KILN_GPU_WGMMA"), *wr = getenv("KILN_GPU_WGMMA_ROUND");
  c->wgmma = !wg ? KL_CL_WG_PRODUCTS
             : strcmp(wg, "all") == 0 ? KL_CL_WG_ALL
             : strcmp(wg, "0") == 0   ? KL_CL_WG_NONE
                                      : KL_CL_WG_PRODUCTS;
  c->wg_round_tiles = wr && strcmp(wr, "tile") == 0;
  cl_int cst;
  c->queue = clCreateCommandQueue(d->ctx, d->device, CL_QUEUE_PROFILING_ENABLE, &cst);
  kiln_status st = KILN_OK;
  if (cst != CL_SUCCESS) {
    c->queue = NULL;
    st = kl_fail(e, KILN_ERR_UNSUPPORTED, "OpenCL device %s: no queue: %s (%d)", d->name,
                 cl_err_name(cst), cst);
  }
  kl_dev_iface di = {d, seg_alloc, seg_free};
  if (st == KILN_OK) st = kl_dev_alloc_create(&di, &c->alloc, e);
  if (st == KILN_OK) st = make_kernels(c, e);
  if (st != KILN_OK) {
    kl_cl_close(c);
    return st;
  }
  *out = c;
  return KILN_OK;
}

void kl_cl_close(kl_cl *c) {
  if (!c) return;
  if (c->queue) clFinish(c->queue);
  stage_release(c);
  kl_cl_kernel_ms(c); /* releases the events still held */
  if (c->has_flag) kl_cl_free(c, &c->flag);
  for (cl_uint i = 0; i < c->n_kernels; i++) clReleaseKernel(c->kernels[i].k);
  free(c->kernels);
  if (c->queue) clReleaseCommandQueue(c->queue);
  kl_dev_alloc_free(c->alloc, NULL);
  kl_cl_device_release(c->d);
  free(c);
}

void kl_cl_set_profiling(kl_cl *c, bool on) {
  kl_cl_kernel_ms(c);
  c->profiling = on;
}

double kl_cl_kernel_ms(kl_cl *c) {
  double ms = 0;
  if (c->n_timed) clWaitForEvents((cl_uint)c->n_timed, c->timed);
  for (int i = 0; i < c->n_timed; i++) {
    cl_ulong t0 = 0, t1 = 0;
    if (clGetEventProfilingInfo(c->timed[i], CL_PROFILING_COMMAND_START, sizeof t0, &t0,
                                NULL) == CL_SUCCESS &&
        clGetEventProfilingInfo(c->timed[i], CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) ==
            CL_SUCCESS && t1 >= t0)
      ms += (double)(t1 - t0) / 1e6;
    clReleaseEvent(c->timed[i]);
  }
  c->n_timed = 0;
  return ms;
}

const char *kl_cl_name(const kl_cl *c) { return c->d->name; }
const char *kl_cl_kernels_origin(const kl_cl *c) { return c->d->origin; }
size_t kl_cl_max_group(const kl_cl *c) { return c->d->max_group; }

unsigned kl_cl_compute_units(const kl_cl *c) { return c->d->units; }

kiln_status kl_cl_alloc(kl_cl *c, size_t bytes, kl_dev_buf *out, kl_err *e) {
  kl_dev_block b;
  memset(out, 0, sizeof *out);
  kiln_status st = kl_dev_alloc_alloc(c->alloc, bytes, &b, e);
  if (st != KILN_OK) return st;
  *out = (kl_dev_buf){b.segment, b.offset, b.size, b.chunk, b.serial};
  return KILN_OK;
}

void kl_cl_free(kl_cl *c, kl_dev_buf *buf) {
  if (!buf->mem) return;
  kl_dev_block b = {buf->mem, buf->off, buf->size, buf->priv, buf->serial};
  kl_dev_alloc_release(c->alloc, &b, NULL);
  memset(buf, 0, sizeof *buf);
}

kiln_status kl_cl_alloc_shared(kl_cl *c, size_t bytes, kl_dev_buf *out, kl_err *e) {
  kl_dev_block b;
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&c->d->lock);
  kiln_status st = kl_dev_alloc_alloc(c->d->alloc, bytes, &b, e);
  pthread_mutex_unlock(&c->d->lock);
  if (st != KILN_OK) return st;
  *out = (kl_dev_buf){b.segment, b.offset, b.size, b.chunk, b.serial};
  return KILN_OK;
}

void kl_cl_shared_stats(const kl_cl *c, kl_dev_alloc_stats *st) {
  pthread_mutex_lock(&c->d->lock);
  kl_dev_alloc_stats_get(c->d->alloc, st);
  pthread_mutex_unlock(&c->d->lock);
}

void kl_cl_alloc_stats(const kl_cl *c, kl_dev_alloc_stats *st) {
  kl_dev_alloc_stats_get(c->alloc, st);
}

/* Waits for the copy that reads pinned buffer k, if one is in flight. */
static cl_int stage_wait(kl_cl *c, int k) {
  if (!c->stage_ev[k]) return CL_SUCCESS;
  cl_int st = clWaitForEvents(1, &c->stage_ev[k]);
  clReleaseEvent(c->stage_ev[k]);
  c->stage_ev[k] = NULL;
  return st;
}

static void stage_release(kl_cl *c) {
  for (int k = 0; k < 2; k++) {
    stage_wait(c, k);
    if (c->stage_ptr[k]) clEnqueueUnmapMemObject(c->queue, c->stage[k], c->stage_ptr[k], 0, NULL, NULL);
    if (c->stage[k]) clReleaseMemObject(c->stage[k]);
    c->stage[k] = NULL;
    c->stage_ptr[k] = NULL;
  }
  if (c->queue) clFinish(c->queue);
}

/* The pinned buffers, made once; false (uploads go straight) where the device has none. */
static bool stage_ready(kl_cl *c) {
  if (c->stage_tried) return c->stage_ptr[1] != NULL;
  c->stage_tried = true;
  for (int k = 0; k < 2; k++) {
    cl_int st;
    c->stage[k] = clCreateBuffer(c->d->ctx, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE,
                                 STAGE_CHUNK, NULL, &st);
    if (st != CL_SUCCESS) c->stage[k] = NULL;
    if (c->stage[k])
      c->stage_ptr[k] = clEnqueueMapBuffer(c->queue, c->stage[k], CL_TRUE, CL_MAP_WRITE, 0,
                                           STAGE_CHUNK, 0, NULL, NULL, &st);
    if (!c->stage[k] || st != CL_SUCCESS || !c->stage_ptr[k]) {
      c->stage_ptr[k] = NULL;
      stage_release(c);
      return false;
    }
  }
  return true;
}

/* dst <- src, n bytes, by the CPU's threads in pieces of 256 KiB. */
static void copy_parallel(char *dst, const char *src, size_t n) {
  const size_t piece = (size_t)256 << 10;
  long pieces = (long)((n + piece - 1) / piece);
#if KL_HAVE_OPENMP
#pragma omp parallel for schedule(static) if (pieces > 1)
#endif
  for (long i = 0; i < pieces; i++) {
    size_t at = (size_t)i * piece, len = n - at < piece ? n - at : piece;
    memcpy(dst + at, src + at, len);
  }
}

kiln_status kl_cl_upload(kl_cl *c, const kl_dev_buf *dst, const void *src, size_t n,
                         kl_err *e) {
  if (n == 0) return KILN_OK;
  cl_int st = CL_SUCCESS;
  if (n >= STAGE_MIN && stage_ready(c)) {
    /* chunk i through pinned buffer i % 2: the copy into it waits for that buffer's
     * last read; the writes are queued (in order, before the kernels that read dst) */
    for (size_t at = 0, i = 0; at < n && st == CL_SUCCESS; at += STAGE_CHUNK, i++) {
      int k = (int)(i % 2);
      size_t len = n - at < STAGE_CHUNK ? n - at : STAGE_CHUNK;
      st = stage_wait(c, k);
      if (st != CL_SUCCESS) break;
      copy_parallel(c->stage_ptr[k], (const char *)src + at, len);
      st = clEnqueueWriteBuffer(c->queue, (cl_mem)dst->mem, CL_FALSE, dst->off + at, len,
                                c->stage_ptr[k], 0, NULL, &c->stage_ev[k]);
      if (st != CL_SUCCESS) c->stage_ev[k] = NULL;
    }
  } else {
    st = clEnqueueWriteBuffer(c->queue, (cl_mem)dst->mem, CL_TRUE, dst->off, n, src, 0, NULL,
                              NULL);
  }
  if (st == CL_SUCCESS) return KILN_OK;
  return kl_fail(e, st == CL_MEM_OBJECT_ALLOCATION_FAILURE || st == CL_OUT_OF_RESOURCES
                        ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_INTERNAL,
                 "OpenCL device %s: copying %zu bytes to the device failed: %s (%d)", c->d->name,
                 n, cl_err_name(st), st);
}

kiln_status kl_cl_download(kl_cl *c, void *dst, const kl_dev_buf *src, size_t n, kl_err *e) {
  if (n == 0) return KILN_OK;
  cl_int st = clEnqueueReadBuffer(c->queue, (cl_mem)src->mem, CL_TRUE, src->off, n, dst, 0,
                                  NULL, NULL);
  if (st == CL_SUCCESS) return KILN_OK;
  return kl_fail(e, st == CL_MEM_OBJECT_ALLOCATION_FAILURE || st == CL_OUT_OF_RESOURCES
                        ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_INTERNAL,
                 "OpenCL device %s: copying %zu bytes from the device failed (a kernel "
                 "before it may have failed): %s (%d)", c->d->name, n, cl_err_name(st), st);
}

kiln_status kl_cl_finish(kl_cl *c, kl_err *e) {
  cl_int st = clFinish(c->queue);
  if (st == CL_SUCCESS) return KILN_OK;
  return kl_fail(e, KILN_ERR_INTERNAL, "OpenCL device %s: waiting for the queued kernels "
                 "failed: %s (%d)", c->d->name, cl_err_name(st), st);
}

static const cl_kernel_entry *find_kernel(const kl_cl *c, const char *name) {
  for (cl_uint i = 0; i < c->n_kernels; i++)
    if (strcmp(c->kernels[i].name, name) == 0) return &c->kernels[i];
  return NULL;
}

bool kl_cl_has_kernel(const kl_cl *c, const char *name) { return find_kernel(c, name) != NULL; }

void kl_cl_set_node(kl_cl *c, int node) {
  c->node = node;
  c->last_kernel = NULL;
}

const char *kl_cl_last_kernel(const kl_cl *c) { return c->last_kernel; }

int kl_cl_node(const kl_cl *c) { return c->node; }

const kl_tensor *kl_cl_flag(kl_cl *c, kl_err *e) {
  if (!c->has_flag) {
    static const int32_t zeros[KL_CL_FLAG_INTS] = {0};
    if (kl_cl_alloc(c, sizeof zeros, &c->flag, e) != KILN_OK) return NULL;
    if (kl_cl_upload(c, &c->flag, zeros, sizeof zeros, e) != KILN_OK) {
      kl_cl_free(c, &c->flag);
      return NULL;
    }
    c->has_flag = true;
    memset(&c->flag_t, 0, sizeof c->flag_t);
    c->flag_t.dtype = KL_I32;
    c->flag_t.rank = 1;
    c->flag_t.dims[0] = KL_CL_FLAG_INTS;
    c->flag_t.data = &c->flag;
  }
  return &c->flag_t;
}

kiln_status kl_cl_flag_read(kl_cl *c, int32_t out[KL_CL_FLAG_INTS], kl_err *e) {
  memset(out, 0, sizeof(int32_t) * KL_CL_FLAG_INTS);
  if (!c->has_flag) return KILN_OK;
  kiln_status st = kl_cl_download(c, out, &c->flag, sizeof(int32_t) * KL_CL_FLAG_INTS, e);
  if (st == KILN_OK && out[0]) { /* raised: cleared for the next run */
    static const int32_t zeros[KL_CL_FLAG_INTS] = {0};
    st = kl_cl_upload(c, &c->flag, zeros, sizeof zeros, e);
  }
  return st;
}

void kl_cl_set_tf32(kl_cl *c, bool on) { c->tf32 = on; }

bool kl_cl_tf32(const kl_cl *c) { return c->tf32; }

int kl_cl_wgmma(const kl_cl *c) { return c->wgmma; }

bool kl_cl_wg_round_in_tiles(const kl_cl *c) { return c->wg_round_tiles; }

kiln_status kl_cl_launch(kl_cl *c, const char *name, const kl_cl_arg *args, int n_args,
                         int dims, const size_t *global, const size_t *local, kl_err *e) {
  size_t g[3];
  for (int d = 0; d < dims; d++) {
    if (global[d] == 0) return KILN_OK;
    g[d] = global[d];
    if (local && g[d] % local[d]) g[d] += local[d] - g[d] % local[d];
  }
  const cl_kernel_entry *entry = find_kernel(c, name);
  if (!entry)
    return kl_fail(e, KILN_ERR_INTERNAL, "OpenCL device %s: kiln has no kernel '%s'", c->d->name,
                   name);
  cl_kernel k = entry->k;
  cl_uint slot = 0;
  cl_int st = CL_SUCCESS;
  for (int i = 0; i < n_args && st == CL_SUCCESS; i++) {
    const kl_cl_arg *a = &args[i];
    switch (a->kind) {
    case KL_CLA_TENSOR: {
      const kl_dev_buf *b = a->t && kl_tensor_numel(a->t) > 0 ? a->t->data : NULL;
      cl_mem m = b ? (cl_mem)b->mem : NULL;
      size_t es = a->t ? kl_dtype_size(a->t->dtype) : 1;
      cl_ulong off = b && es ? (cl_ulong)(b->off / es) : 0;
      st = clSetKernelArg(k, slot++, sizeof m, &m);
      if (st == CL_SUCCESS) st = clSetKernelArg(k, slot++, sizeof off, &off);
      break;
    }
    case KL_CLA_INT: {
      cl_int v = (cl_int)a->i;
      st = clSetKernelArg(k, slot++, sizeof v, &v);
      break;
    }
    case KL_CLA_LONG: {
      cl_long v = (cl_long)a->i;
      st = clSetKernelArg(k, slot++, sizeof v, &v);
      break;
    }
    case KL_CLA_FLOAT: {
      cl_float v = a->f;
      st = clSetKernelArg(k, slot++, sizeof v, &v);
      break;
    }
    case KL_CLA_BYTES: st = clSetKernelArg(k, slot++, a->n, a->p); break;
    }
  }
  if (st == CL_SUCCESS)
    st = clEnqueueNDRangeKernel(c->queue, k, (cl_uint)dims, NULL, g, local, 0, NULL,
                                c->profiling && c->n_timed < MAX_TIMED ? &c->timed[c->n_timed++]
                                                                       : NULL);
  if (st == CL_SUCCESS) {
    c->last_kernel = entry->name;
    return KILN_OK;
  }
  return kl_fail(e, st == CL_OUT_OF_RESOURCES || st == CL_MEM_OBJECT_ALLOCATION_FAILURE
                        ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_INTERNAL,
                 "OpenCL device %s: kernel '%s' (argument %u): %s (%d)", c->d->name, name,
                 slot ? slot - 1 : 0, cl_err_name(st), st);
}

int kl_cl_describe(char *buf, size_t len) {
  size_t used = 0;
  int count = 0;
  buf[0] = 0;
  cl_platform_id ps[MAX_PLATFORMS];
  cl_int st;
  cl_uint np = platforms(ps, &st);
  char dir[512];
  bool cached = cache_dir(dir, sizeof dir);
#define PUT(...)                                                                           \
  do {                                                                                     \
    if (used < len) used += (size_t)snprintf(buf + used, len - used, __VA_ARGS__);         \
  } while (0)
  if (np == 0)
    PUT("no OpenCL platform (%s): install a driver and its ICD file in /etc/OpenCL/vendors "
        "(PoCL runs OpenCL on the CPU: pocl-opencl-icd)\n",
        st == CL_SUCCESS ? "none listed" : cl_err_name(st));
  for (cl_uint p = 0; p < np; p++) {
    char pname[120], pver[120];
    plat_str(ps[p], CL_PLATFORM_NAME, pname, sizeof pname);
    plat_str(ps[p], CL_PLATFORM_VERSION, pver, sizeof pver);
    cl_device_id ds[MAX_DEVICES];
    cl_uint nd = devices(ps[p], ds);
    for (cl_uint d = 0; d < nd; d++) {
      char dname[200], drv[120];
      cl_device_type t = 0;
      cl_ulong mem = 0;
      dev_str(ds[d], CL_DEVICE_NAME, dname, sizeof dname);
      dev_str(ds[d], CL_DRIVER_VERSION, drv, sizeof drv);
      clGetDeviceInfo(ds[d], CL_DEVICE_TYPE, sizeof t, &t, NULL);
      clGetDeviceInfo(ds[d], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
      char ptx[160] = "";
#if KL_HAVE_CL_PTX
      if (strstr(pname, "NVIDIA")) {
        size_t u = (size_t)snprintf(ptx, sizeof ptx, "PTX embedded for sm");
        for (int i = 0; i < kl_cl_ptx_count && u < sizeof ptx; i++)
          u += (size_t)snprintf(ptx + u, sizeof ptx - u, "%s%d%s", i ? "/" : "_",
                                kl_cl_ptx[i].target, kl_cl_ptx[i].exact ? "a" : "");
        if (u < sizeof ptx)
          snprintf(ptx + u, sizeof ptx - u, " (the device is sm_%d; the highest it runs), else ",
                   nv_sm(ds[d]));
      }
#endif
      PUT("  opencl:%u.%u  %s (%s, %s, %s, driver %s, %.1f GiB); kernels: %sbuilt from "
          "source once, %s%s\n", p, d, dname,
          t & CL_DEVICE_TYPE_GPU ? "GPU" : t & CL_DEVICE_TYPE_CPU ? "CPU" : "accelerator",
          pname, pver, drv, (double)mem / (1 << 30), ptx,
          cached ? "cached in " : "not cached (no cache folder)", cached ? dir : "");
      count++;
    }
  }
#undef PUT
  return count;
}

#else /* no OpenCL in this build */

struct kl_cl {
  int unused;
};
struct kl_cl_device {
  int unused;
};

kiln_status kl_cl_device_open(const char *spec, kl_cl_device **out, kl_err *e) {
  *out = NULL;
  return kl_fail(e, KILN_ERR_UNSUPPORTED, "device '%s': this kiln was built without OpenCL "
                 "(meson -Dgpu=enabled needs Debian's ocl-icd-opencl-dev and "
                 "opencl-c-headers)", spec);
}
void kl_cl_device_retain(kl_cl_device *d) { (void)d; }
void kl_cl_device_release(kl_cl_device *d) { (void)d; }
void kl_cl_device_free_buf(kl_cl_device *d, kl_dev_buf *buf) { (void)d, (void)buf; }
kiln_status kl_cl_open_on(kl_cl_device *d, kl_cl **out, kl_err *e) {
  (void)d;
  *out = NULL;
  return kl_fail(e, KILN_ERR_UNSUPPORTED, "no OpenCL in this build");
}
void kl_cl_set_profiling(kl_cl *c, bool on) { (void)c, (void)on; }
double kl_cl_kernel_ms(kl_cl *c) { (void)c; return 0; }
kiln_status kl_cl_alloc_shared(kl_cl *c, size_t bytes, kl_dev_buf *out, kl_err *e) {
  return kl_cl_alloc(c, bytes, out, e);
}
void kl_cl_shared_stats(const kl_cl *c, kl_dev_alloc_stats *st) { kl_cl_alloc_stats(c, st); }

int kl_cl_describe(char *buf, size_t len) {
  snprintf(buf, len, "this kiln was built without OpenCL (meson -Dgpu=enabled needs Debian's "
           "ocl-icd-opencl-dev and opencl-c-headers)\n");
  return 0;
}
void kl_cl_close(kl_cl *c) { (void)c; }
const char *kl_cl_name(const kl_cl *c) { (void)c; return ""; }
const char *kl_cl_kernels_origin(const kl_cl *c) { (void)c; return ""; }
size_t kl_cl_max_group(const kl_cl *c) { (void)c; return 1; }
unsigned kl_cl_compute_units(const kl_cl *c) {
  (void)c;
  return 1;
}
kiln_status kl_cl_alloc(kl_cl *c, size_t bytes, kl_dev_buf *out, kl_err *e) {
  (void)c, (void)bytes, (void)out;
  return kl_fail(e, KILN_ERR_UNSUPPORTED, "no OpenCL in this build");
}
void kl_cl_free(kl_cl *c, kl_dev_buf *buf) { (void)c, (void)buf; }
kiln_status kl_cl_upload(kl_cl *c, const kl_dev_buf *dst, const void *src, size_t n,
                         kl_err *e) {
  (void)c, (void)dst, (void)src, (void)n;
  return kl_fail(e, KILN_ERR_UNSUPPORTED, "no OpenCL in this build");
}
kiln_status kl_cl_download(kl_cl *c, void *dst, const kl_dev_buf *src, size_t n, kl_err *e) {
  (void)c, (void)dst, (void)src, (void)n;
  return kl_fail(e, KILN_ERR_UNSUPPORTED, "no OpenCL in this build");
}
kiln_status kl_cl_finish(kl_cl *c, kl_err *e) { (void)c, (void)e; return KILN_OK; }
void kl_cl_alloc_stats(const kl_cl *c, kl_dev_alloc_stats *st) {
  (void)c;
  memset(st, 0, sizeof *st);
}
bool kl_cl_has_kernel(const kl_cl *c, const char *name) {
  (void)c, (void)name;
  return false;
}

void kl_cl_set_node(kl_cl *c, int node) { (void)c, (void)node; }

const char *kl_cl_last_kernel(const kl_cl *c) {
  (void)c;
  return NULL;
}

int kl_cl_node(const kl_cl *c) {
  (void)c;
  return -1;
}

const kl_tensor *kl_cl_flag(kl_cl *c, kl_err *e) {
  (void)c;
  kl_fail(e, KILN_ERR_UNSUPPORTED, "no OpenCL in this build");
  return NULL;
}

kiln_status kl_cl_flag_read(kl_cl *c, int32_t out[KL_CL_FLAG_INTS], kl_err *e) {
  (void)c, (void)e;
  memset(out, 0, sizeof(int32_t) * KL_CL_FLAG_INTS);
  return KILN_OK;
}

void kl_cl_set_tf32(kl_cl *c, bool on) { (void)c, (void)on; }

int kl_cl_wgmma(const kl_cl *c) {
  (void)c;
  return KL_CL_WG_NONE;
}

bool kl_cl_wg_round_in_tiles(const kl_cl *c) {
  (void)c;
  return false;
}

bool kl_cl_tf32(const kl_cl *c) {
  (void)c;
  return false;
}

kiln_status kl_cl_launch(kl_cl *c, const char *name, const kl_cl_arg *args, int n_args,
                         int dims, const size_t *global, const size_t *local, kl_err *e) {
  (void)c, (void)args, (void)n_args, (void)dims, (void)global, (void)local;
  return kl_fail(e, KILN_ERR_UNSUPPORTED, "no OpenCL in this build (kernel '%s')", name);
}
#endif
