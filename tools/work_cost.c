/* work_cost: what one counted step of each node of a model costs on one thread, the
 * measurements behind the weights of max_work (src/runtime/work_weight.c,
 * docs/fuzzing.md).
 *
 *   build/tools/work_cost MODEL [--reference] [--seconds S] [--input NAME=FILE]...
 *
 * Runs MODEL at 1 thread (the default optimization level; --reference: kiln's portable
 * reference kernels only) with random inputs (or the .npy / .pb files given), after one
 * warm-up run, for at least S seconds (default 1) and at least 3 runs, and prints one
 * line per node that ran a kernel: op, kernel (and oneDNN's implementation), its steps
 * by kl_node_work, the weight each counts with against max_work, the fastest run's
 * milliseconds, nanoseconds per step, and per weighed step. A node's time is its share
 * of the run's wall time scaled to the process's CPU time of that run, so that other
 * processes on the machine's cores do not count (the process runs one thread). With
 * KILN_ISA to choose the level. Not run by the tests. */
#include "cli.h"
#include "runtime/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_FILES 16

static double clock_s(clockid_t which) {
  struct timespec ts;
  clock_gettime(which, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int usage(void) {
  fprintf(stderr, "usage: work_cost MODEL [--reference] [--seconds S] [--input NAME=FILE]...\n");
  return 2;
}

static bool bind_inputs(kiln_session *s, const kiln_model *m, const char *const *files,
                        int n_files, kl_tensor *ts) {
  uint64_t state = 1;
  for (int k = 0; k < kiln_model_input_count(m); k++) {
    kiln_tensor_info info;
    if (kiln_model_input_info(m, k, &info) != KILN_OK) return false;
    const char *file = cli_find_named(files, n_files, info.name);
    char *name = NULL;
    if (file ? !cli_read_tensor(file, INT64_MAX, &ts[k], &name)
             : !cli_random_input("work_cost", &info, NULL, 1, &state, &ts[k]))
      return false;
    free(name);
    kiln_status st = kiln_session_set_input(s, info.name, info.dtype, ts[k].rank, ts[k].dims,
                                            ts[k].data, kl_tensor_nbytes(&ts[k]));
    if (st != KILN_OK) {
      fprintf(stderr, "work_cost: %s: %s\n", kiln_status_string(st), kiln_session_error(s));
      return false;
    }
  }
  return true;
}

static void report(const kiln_session *s, const kiln_model *m, const double *best_ms) {
  for (int i = 0; i < m->g->n_nodes; i++) {
    double weight, steps = kl_session_node_steps(s, i, &weight);
    if (steps <= 0) continue;
    const char *impl = kl_session_kernel_impl(s, i);
    char kernel[96];
    snprintf(kernel, sizeof kernel, "%s%s%s", kl_session_kernel_name(s, i), impl ? " " : "",
             impl ? impl : "");
    printf("%-24s %-40s steps %10.4g  weight %6g  %10.3f ms  %8.4f ns/step  %8.5f ns/weighed\n",
           kl_op_get(m->g->nodes[i].op)->name, kernel, steps, weight, best_ms[i],
           best_ms[i] * 1e6 / steps, best_ms[i] * 1e6 / (steps * weight));
  }
}

int main(int argc, char **argv) {
  const char *path = NULL, *files[MAX_FILES];
  int n_files = 0, reference = 0;
  double seconds = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--reference") == 0) reference = 1;
    else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) seconds = atof(argv[++i]);
    else if (strcmp(argv[i], "--input") == 0 && i + 1 < argc && n_files < MAX_FILES)
      files[n_files++] = argv[++i];
    else if (argv[i][0] != '-' && !path) path = argv[i];
    else return usage();
  }
  if (!path) return usage();
  kiln_options *o = NULL;
  if (kiln_options_create(&o) != KILN_OK) return 1;
  /* max_work counts every node's steps only when it is set: as high as it goes */
  kiln_options_set_int(o, "max_work", INT64_MAX);
  kiln_options_set_int(o, "threads", 1);
  kiln_options_set_int(o, "reference", reference);
  kiln_model *m = cli_load(path, o, NULL);
  kiln_session *s = NULL;
  int rc = 1;
  kl_tensor ts[64] = {0};
  double *best = NULL;
  if (!m || kiln_model_input_count(m) > 64) goto done;
  if (kiln_session_create(m, o, &s) != KILN_OK) {
    fprintf(stderr, "work_cost: %s\n", kiln_session_error(s));
    goto done;
  }
  if (!bind_inputs(s, m, files, n_files, ts)) goto done;
  best = calloc((size_t)m->g->n_nodes + 1, sizeof *best);
  if (!best) goto done;
  kl_session_set_profiling(s, true);
  double start = 0;
  for (int run = 0; run < 4 || clock_s(CLOCK_MONOTONIC) - start < seconds; run++) {
    if (run == 1) start = clock_s(CLOCK_MONOTONIC); /* after the warm-up run */
    double wall = clock_s(CLOCK_MONOTONIC), cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (kiln_session_run(s) != KILN_OK) {
      fprintf(stderr, "work_cost: %s\n", kiln_session_error(s));
      goto done;
    }
    double scale = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu) / (clock_s(CLOCK_MONOTONIC) - wall);
    const double *t0, *ms;
    if (run == 0 || !kl_session_timings(s, &t0, &ms)) continue;
    for (int i = 0; i < m->g->n_nodes; i++)
      if (run == 1 || ms[i] * scale < best[i]) best[i] = ms[i] * scale;
  }
  report(s, m, best);
  rc = 0;
done:
  for (int k = 0; k < 64; k++) free(ts[k].data);
  free(best);
  kiln_session_free(s);
  kiln_model_free(m);
  kiln_options_free(o);
  return rc;
}
