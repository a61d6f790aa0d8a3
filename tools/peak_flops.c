/* peak_flops: the machine's practical float32 peak, measured with a large oneDNN matmul
 * (the best-tuned kernel oneDNN has), for docs/benchmarks.md.
 *
 *   peak_flops [THREADS [SIZE [SECONDS]]]     defaults: 1 thread, 2048, 3 s
 *
 * Multiplies two SIZE x SIZE float32 matrices repeatedly for SECONDS after a warm-up
 * and prints the best and the median GFLOP/s over the runs (2 * SIZE^3 flops each).
 * The weights are in the layout oneDNN picks, as kiln keeps them. */
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
  case dnnl_cpu_isa_avx2: return "avx2";
  case dnnl_cpu_isa_avx512_core: return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  default: return "other";
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define CHECK(call)                                                          \
  do {                                                                       \
    dnnl_status_t s_ = (call);                                               \
    if (s_ != dnnl_success) {                                                \
      fprintf(stderr, "peak_flops: %s failed (oneDNN status %d)\n", #call, (int)s_); \
      return 1;                                                              \
    }                                                                        \
  } while (0)

typedef struct problem {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  dnnl_primitive_t mm;
  dnnl_memory_t a, b, c;
} problem;

static int setup(problem *p, int64_t n) {
  dnnl_dims_t dims = {n, n};
  dnnl_memory_desc_t plain, any;
  CHECK(dnnl_engine_create(&p->eng, dnnl_cpu, 0));
  CHECK(dnnl_stream_create(&p->stream, p->eng, dnnl_stream_default_flags));
  CHECK(dnnl_memory_desc_init_by_tag(&plain, 2, dims, dnnl_f32, dnnl_ab));
  CHECK(dnnl_memory_desc_init_by_tag(&any, 2, dims, dnnl_f32, dnnl_format_tag_any));
  dnnl_matmul_desc_t md;
  dnnl_primitive_desc_t pd;
  CHECK(dnnl_matmul_desc_init(&md, &plain, &any, NULL, &plain));
  CHECK(dnnl_primitive_desc_create(&pd, &md, NULL, p->eng, NULL));
  const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  CHECK(dnnl_memory_create(&p->a, &plain, p->eng, DNNL_MEMORY_ALLOCATE));
  CHECK(dnnl_memory_create(&p->b, wmd, p->eng, DNNL_MEMORY_ALLOCATE));
  CHECK(dnnl_memory_create(&p->c, &plain, p->eng, DNNL_MEMORY_ALLOCATE));
  CHECK(dnnl_primitive_create(&p->mm, pd));
  dnnl_primitive_desc_destroy(pd);
  float *a, *b;
  CHECK(dnnl_memory_get_data_handle(p->a, (void **)&a));
  CHECK(dnnl_memory_get_data_handle(p->b, (void **)&b));
  size_t bn = dnnl_memory_desc_get_size(wmd) / sizeof(float);
  for (int64_t i = 0; i < n * n; i++) a[i] = (float)(i % 7) * 0.25f;
  for (size_t i = 0; i < bn; i++) b[i] = (float)(i % 5) * 0.5f;
  return 0;
}

static int run(problem *p) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}};
  CHECK(dnnl_primitive_execute(p->mm, p->stream, 3, args));
  CHECK(dnnl_stream_wait(p->stream));
  return 0;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  int64_t n = argc > 2 ? atoll(argv[2]) : 2048;
  double seconds = argc > 3 ? atof(argv[3]) : 3.0;
  if (threads < 1 || n < 16 || n > 16384 || seconds <= 0) {
    fprintf(stderr, "usage: peak_flops [THREADS [SIZE [SECONDS]]]\n");
    return 2;
  }
  omp_set_num_threads(threads);
  problem p = {0};
  if (setup(&p, n) != 0) return 1;
  for (int i = 0; i < 3; i++)
    if (run(&p) != 0) return 1;
  double rates[4096], start = now_s();
  int count = 0;
  while (count < 4096 && now_s() - start < seconds) {
    double t0 = now_s();
    if (run(&p) != 0) return 1;
    rates[count++] = 2.0 * (double)n * (double)n * (double)n / (now_s() - t0) / 1e9;
  }
  qsort(rates, (size_t)count, sizeof *rates, cmp_double);
  printf("matmul %lldx%lld float32, %d thread%s, %d runs: best %.1f GFLOP/s, median %.1f "
         "GFLOP/s (oneDNN %d.%d, %s)\n", (long long)n, (long long)n, threads,
         threads == 1 ? "" : "s", count, rates[count - 1], rates[count / 2],
         dnnl_version()->major, dnnl_version()->minor, isa_name(dnnl_get_effective_cpu_isa()));
  dnnl_primitive_destroy(p.mm);
  dnnl_memory_destroy(p.a);
  dnnl_memory_destroy(p.b);
  dnnl_memory_destroy(p.c);
  dnnl_stream_destroy(p.stream);
  dnnl_engine_destroy(p.eng);
  return 0;
}
