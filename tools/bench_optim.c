/* Bandwidth of kiln's fused optimizer steps (ops.def "optimizers") against memcpy:
 * each op at the ISA level kiln picks (KILN_ISA lowers it) on N float32 elements
 * (default 16M), GB/s counted over the bytes the step must move (every array it reads
 * once, every one it writes once; Lamb and Lars read theirs twice: a norm pass, then the
 * update), the best of the runs. memcpy is timed on the same threads, each copying its
 * share, counting the bytes read and written.
 *   build/tools/bench_optim [--n N] [--threads T] [--runs R]
 * Not run by the tests; docs/training.md has the figures. */
#include "backends/backend.h"
#include "backends/cpu/isa.h"
#include "ir/ir.h"
#include "ir/optim.h"
#include "kl_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if KL_HAVE_OPENMP
#include <omp.h>
#endif

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct bench {
  const char *name;
  kl_op op;
  double hyper[6];
  int n_in;           /* inputs, Hyper .. the last present */
  int arrays;         /* float32 arrays after Hyper: Param, Grad, states */
  bool split;         /* Param bf16 + Trail u16 instead of a float32 Param */
  const char *attr;   /* an int attribute set to 1, or NULL */
  double bytes;       /* per element moved */
} bench;

static const bench benches[] = {
    {"SGD (momentum)", KL_OP_KilnSGD, {0.01, 0.9, 0, 1e-4, 2, 0}, 4, 3, false, NULL, 20},
    {"SplitSGD (momentum, fp32 grad)", KL_OP_KilnSGD, {0.01, 0.9, 0, 1e-4, 2, 0}, 6, 3, true, NULL, 20},
    {"Adagrad", KL_OP_KilnAdagrad, {0.01, 0, 1e-4, 1e-10, 2, 0}, 4, 3, false, NULL, 20},
    {"Adam", KL_OP_KilnAdam, {1e-3, 0.9, 0.999, 1e-8, 0, 2}, 5, 4, false, NULL, 28},
    {"AdamW", KL_OP_KilnAdam, {1e-3, 0.9, 0.999, 1e-8, 0.01, 2}, 5, 4, false, "decoupled", 28},
    {"Adam amsgrad", KL_OP_KilnAdam, {1e-3, 0.9, 0.999, 1e-8, 0, 2}, 6, 5, false, "amsgrad", 36},
    {"Lamb", KL_OP_KilnLamb, {1e-3, 0.9, 0.999, 1e-6, 0.01, 2}, 5, 4, false, NULL, 40},
    {"Lars", KL_OP_KilnLars, {0.1, 0.9, 5e-4, 0.001, 1e-9, 2}, 4, 3, false, NULL, 28},
};

int main(int argc, char **argv) {
  int64_t n = INT64_C(16) << 20;
  int threads = 0, runs = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--n") == 0) n = atoll(argv[i + 1]);
    else if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--runs") == 0) runs = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: %s [--n N] [--threads T] [--runs R]\n", argv[0]);
      return 2;
    }
  }
#if KL_HAVE_OPENMP
  if (threads <= 0) threads = omp_get_max_threads();
#else
  threads = 1;
#endif
  if (n < 1 || runs < 1) return 2;
  size_t fb = sizeof(float) * (size_t)n;
  float *arr[6];
  for (int k = 0; k < 6; k++) {
    arr[k] = malloc(fb);
    if (!arr[k]) return fprintf(stderr, "out of memory\n"), 1;
    for (int64_t i = 0; i < n; i++) arr[k][i] = 0.001f * (float)((i * 7 + k) % 1000 + 1);
  }
  kl_isa isa = kl_isa_level();
  printf("cpu %s\nlevel %s, threads %d, n %lld floats\n", kl_isa_features()->brand,
         kl_isa_level_name(isa), threads, (long long)n);

  double best = 1e30;
  for (int r = 0; r < runs; r++) {
    double t0 = now();
#if KL_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
    for (int t = 0; t < threads; t++) {
      int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
      memcpy(arr[1] + lo, arr[0] + lo, sizeof(float) * (size_t)(hi - lo));
    }
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  double memcpy_gbs = 2.0 * (double)fb / best / 1e9;
  printf("%-32s %7.2f GB/s\n", "memcpy", memcpy_gbs);

  for (size_t b = 0; b < sizeof benches / sizeof benches[0]; b++) {
    const bench *bn = &benches[b];
    kl_err e = {0};
    kl_graph *g = kl_graph_new();
    int in[KL_OPTIM_MAX_IN], out = kl_graph_add_value(g, "ratio", &e);
    for (int i = 0; i < bn->n_in; i++) in[i] = kl_graph_add_value(g, NULL, &e);
    if (bn->split) in[4] = KL_ABSENT; /* no GradScale */
    int node = kl_graph_add_node(g, bn->op, "opt", bn->n_in, in, 1, &out, &e);
    if (node < 0) return fprintf(stderr, "%s\n", e.msg), 1;
    if (bn->attr) kl_node_set_int(g, node, bn->attr, 1, &e);
    kl_type types[KL_OPTIM_MAX_IN];
    const kl_type *tp[KL_OPTIM_MAX_IN];
    for (int i = 0; i < bn->n_in; i++) {
      types[i] = (kl_type){.dtype = KL_F32, .rank = 1, .dims = {{n, -1}}};
      tp[i] = &types[i];
    }
    kl_cpu_kernel k = kl_cpu_isa_kernel(&g->nodes[node], tp, bn->n_in, isa);
    if (!k.run) return fprintf(stderr, "%s: no ISA kernel\n", bn->name), 1;
    kl_tensor t[KL_OPTIM_MAX_IN];
    const kl_tensor *pin[KL_OPTIM_MAX_IN];
    double hyper[6];
    memcpy(hyper, bn->hyper, sizeof hyper);
    t[0] = (kl_tensor){KL_F64, 1, {6}, hyper};
    for (int i = 1; i < bn->n_in; i++) t[i] = (kl_tensor){KL_F32, 1, {n}, arr[i - 1]};
    if (bn->split) { /* the first array holds both halves of Param: top, then trail */
      t[1] = (kl_tensor){KL_BF16, 1, {n}, arr[0]};
      t[5] = (kl_tensor){KL_U16, 1, {n}, (uint16_t *)arr[0] + n};
    }
    for (int i = 0; i < bn->n_in; i++) pin[i] = in[i] == KL_ABSENT ? NULL : &t[i];
    float ratio;
    kl_tensor y = {KL_F32, 0, {0}, &ratio};
    kl_tensor *pout[1] = {&y};
    kl_kernel_ctx c = {.node = &g->nodes[node], .n_in = bn->n_in, .in = pin, .n_out = 1,
                       .out = pout, .e = &e, .threads = threads};
    best = 1e30;
    for (int r = 0; r < runs + 1; r++) {
      double t0 = now();
      if (k.run(&c) != KILN_OK) return fprintf(stderr, "%s: %s\n", bn->name, e.msg), 1;
      double dt = now() - t0;
      if (r > 0 && dt < best) best = dt; /* the first run warms up */
    }
    double gbs = bn->bytes * (double)n / best / 1e9;
    printf("%-32s %7.2f GB/s  %5.1f%% of memcpy  (%.2f ms, %.0f bytes/element)\n", bn->name,
           gbs, 100.0 * gbs / memcpy_gbs, best * 1e3, bn->bytes);
    kl_graph_free(g);
  }
  for (int k = 0; k < 6; k++) free(arr[k]);
  return 0;
}
