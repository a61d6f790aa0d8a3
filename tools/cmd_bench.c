/* kiln bench: load, session, first-inference and steady-state latency of a model. */
#include "backends/cpu/cpu_backend.h"
#include "bench_profile.h"
#include "cli.h"
#include "runtime/session.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char *bench_help =
    "usage: kiln bench MODEL [options]\n"
    "  --batch B             size of every symbolic dim named like a batch (default 1)\n"
    "  --shape NAME=DIMS     an input's shape, e.g. input=1x3x224x224 (repeatable);\n"
    "                        other symbolic dims are 1\n"
    "  --input NAME=FILE     an input from a .pb or .npy file instead of random data\n"
    "                        (repeatable)\n"
    "  --warmup N            runs before timing (default 3)\n"
    "  --iterations N        timed runs (default 50)\n"
    "  --time S              time runs for S seconds instead of a count\n"
    "  --seed N              seed for the random inputs (default 1)\n"
    "  --json                one JSON object on stdout instead of the table\n"
    "  --profile             time every node of the timed runs: print the time per op\n"
    "                        type and the slowest nodes (each one's mean and median:\n"
    "                        a mean moves with one slow run), and write a Chrome trace of\n"
    "                        the first 10 runs (chrome://tracing, ui.perfetto.dev)\n"
    "  --trace FILE          where --profile writes the trace (default\n"
    "                        kiln-profile.json); implies --profile\n";

#define MAX_SHAPES 64

typedef struct bench_args {
  const char *model;
  const char *shapes[MAX_SHAPES], *inputs[MAX_SHAPES];
  int n_shapes, n_inputs;
  int64_t batch, warmup, iterations;
  double seconds;
  uint64_t seed;
  bool json, profile;
  const char *trace;
  cli_common common;
} bench_args;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The peak resident memory of this program: Linux's VmHWM, which starts afresh at
 * exec, where ru_maxrss keeps the high-water mark of the process that exec'd us (a
 * big benchmark script would show through). ru_maxrss where /proc is not there. */
static double peak_rss_mb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
  if (f) fclose(f);
  if (kib >= 0) return (double)kib / 1024.0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0; /* Linux reports KiB */
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double percentile(const double *sorted, int64_t n, double p) {
  int64_t k = (int64_t)(p / 100.0 * (double)(n - 1) + 0.5);
  return sorted[k < n ? k : n - 1];
}

static int parse_bench_args(int argc, char **argv, bench_args *a) {
  memset(a, 0, sizeof *a);
  a->common.opt_level = 2; /* the library's default, as for the other commands */
  a->batch = 1;
  a->warmup = 3;
  a->iterations = 50;
  a->seed = 1;
  for (int i = 1; i < argc; i++) {
    int r = cli_common_arg(&a->common, argc, argv, &i);
    if (r < 0) return EXIT_USAGE;
    if (r > 0) continue;
    const char *o = argv[i];
    bool has = i + 1 < argc;
    int64_t v;
    double d;
    if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
      printf("%s%s%s%s", bench_help, cli_load_help, cli_run_help, cli_keep_help);
      return EXIT_OK;
    } else if (strcmp(o, "--json") == 0) {
      a->json = true;
    } else if (strcmp(o, "--profile") == 0) {
      a->profile = true;
    } else if (strcmp(o, "--trace") == 0 && has) {
      a->profile = true;
      a->trace = argv[++i];
    } else if (strcmp(o, "--shape") == 0 && has && a->n_shapes < MAX_SHAPES) {
      a->shapes[a->n_shapes++] = argv[++i];
    } else if (strcmp(o, "--input") == 0 && has && a->n_inputs < MAX_SHAPES) {
      a->inputs[a->n_inputs++] = argv[++i];
    } else if (strcmp(o, "--time") == 0 || strcmp(o, "--batch") == 0 ||
               strcmp(o, "--warmup") == 0 || strcmp(o, "--iterations") == 0 ||
               strcmp(o, "--seed") == 0) {
      /* each says what it needs: --iterations 0 was run as 1, --seed abc was "bad
       * argument" without a reason */
      bool seconds = o[2] == 't', at_least_one = o[2] == 'b' || o[2] == 'i';
      if (!has) {
        fprintf(stderr, "kiln bench: %s needs a value: %s\n", o,
                seconds ? "seconds, above 0" : at_least_one ? "at least 1" : "at least 0");
        return EXIT_USAGE;
      }
      const char *val = argv[++i];
      bool ok = seconds ? cli_double_arg("bench", o, val, 0, true, "seconds", &d)
                        : cli_int_arg("bench", o, val, at_least_one ? 1 : 0, INT64_MAX, NULL, &v);
      if (!ok) return EXIT_USAGE;
      if (seconds) a->seconds = d;
      else if (o[2] == 'b') a->batch = v;
      else if (o[2] == 'w') a->warmup = v;
      else if (o[2] == 'i') a->iterations = v;
      else a->seed = (uint64_t)v;
    } else if (o[0] != '-' && !a->model) {
      a->model = o;
    } else if (o[0] == '-' && !has && (strcmp(o, "--trace") == 0 || strcmp(o, "--shape") == 0 ||
                                       strcmp(o, "--input") == 0)) {
      fprintf(stderr, "kiln bench: %s needs a value\n%s", o, bench_help);
      return EXIT_USAGE;
    } else if (strcmp(o, "--shape") == 0 || strcmp(o, "--input") == 0) {
      fprintf(stderr, "kiln bench: more than %d %s options\n", MAX_SHAPES, o);
      return EXIT_USAGE;
    } else {
      fprintf(stderr, "kiln bench: unknown argument '%s'\n%s", o, bench_help);
      return EXIT_USAGE;
    }
  }
  if (!a->model) {
    fprintf(stderr, "kiln bench: no MODEL given\n%s", bench_help);
    return EXIT_USAGE;
  }
  return -1;
}

/* Inputs from files or random, bound to the session; tensors are kept in ts. */
/* The inputs a run gets: "  x: float32[1,3,224,224]", a line each. */
static void print_inputs(const kiln_model *m, const kl_tensor *ts, FILE *out) {
  for (int k = 0; k < kiln_model_input_count(m); k++) {
    kiln_tensor_info info;
    kiln_model_input_info(m, k, &info);
    fprintf(out, "  %s: %s[", info.name, kl_dtype_name(ts[k].dtype));
    for (int d = 0; d < ts[k].rank; d++)
      fprintf(out, "%s%" PRId64, d ? "," : "", ts[k].dims[d]);
    fprintf(out, "]\n");
  }
}

static bool make_inputs(const bench_args *a, kiln_model *m, kiln_session *s, kl_tensor *ts) {
  uint64_t state = a->seed;
  if (!cli_check_named("bench", "--input", a->inputs, a->n_inputs, m) ||
      !cli_check_named("bench", "--shape", a->shapes, a->n_shapes, m) ||
      !cli_check_shape_or_file("bench", a->shapes, a->n_shapes, a->inputs, a->n_inputs))
    return false;
  int64_t limit = a->common.max_tensor_bytes ? a->common.max_tensor_bytes : (INT64_C(16) << 30);
  bool batched = false; /* --batch sized some input's symbolic first dim */
  for (int k = 0; k < kiln_model_input_count(m); k++) {
    kiln_tensor_info info;
    kiln_model_input_info(m, k, &info);
    const char *file = cli_find_named(a->inputs, a->n_inputs, info.name);
    const char *shape = cli_find_named(a->shapes, a->n_shapes, info.name);
    batched |= !file && !shape && info.rank > 0 && info.dims[0] < 0;
    char *name = NULL;
    if (file ? !cli_read_tensor(file, limit, &ts[k], &name)
             : !cli_random_input("bench", &info, shape, a->batch, &state, &ts[k]))
      return false;
    free(name);
    kiln_status st = kiln_session_set_input(s, info.name, info.dtype, ts[k].rank, ts[k].dims,
                                            ts[k].data, kl_tensor_nbytes(&ts[k]));
    if (st != KILN_OK) {
      fprintf(stderr, "kiln bench: %s: %s\n", kiln_status_string(st), kiln_session_error(s));
      return false;
    }
  }
  if (a->batch > 1 && !batched) { /* the throughput would count inferences never made */
    fprintf(stderr, "kiln bench: --batch %" PRId64 ": no input has a symbolic first dim "
            "that it could size (the inputs below are what runs); export the model with a "
            "dynamic batch, or give the shapes with --shape\n", a->batch);
    print_inputs(m, ts, stderr);
    return false;
  }
  return true;
}

static void progress(double done, double total) {
  int width = 30, fill = (int)(done / total * width);
  if (fill > width) fill = width;
  fprintf(stderr, "\r[%.*s%*s] %3d%%", fill, "==============================", width - fill, "",
          (int)(done / total * 100 > 100 ? 100 : done / total * 100));
}

/* Timed runs into lat (grown as needed), their node times into prof when profiling;
 * returns the count or -1 on failure. */
/* Context switches of the process's threads during the timed runs, and the runs' time.
 * A thread switched out involuntarily was preempted: on an idle machine that happens to
 * kiln's threads up to about 80 times a second (measured at 2 threads on the 2-core
 * Xeon: EfficientNet-B0, ResNet-50, SqueezeNet 1.1, ShuffleNetV2, BERT-base), while
 * other programs that want the
 * same cores preempt them hundreds of times a second (230 to 300 under one or two busy
 * loops), and a run at several threads, whose every node waits for its slowest thread,
 * takes up to several times as long (docs/benchmarks.md, "Threads under load"). Over
 * PREEMPT_WARN a second, and at least PREEMPT_MIN in all, kiln bench says so. Voluntary
 * switches (a thread going to sleep between nodes, by the runtime's wait policy) are
 * shown but not judged. */
#define PREEMPT_WARN 150.0
#define PREEMPT_MIN 10
typedef struct run_switches {
  long voluntary, involuntary;
  double run_ms;
} run_switches;

static void count_switches(run_switches *w, int sign) {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return;
  w->voluntary += sign * u.ru_nvcsw;
  w->involuntary += sign * u.ru_nivcsw;
}

static double per_s(const run_switches *w, long count) {
  return w->run_ms > 0 ? (double)count * 1e3 / w->run_ms : 0;
}

static double switches_per_s(const run_switches *w) {
  return per_s(w, w->voluntary + w->involuntary);
}

static bool preempted(const run_switches *w) {
  return w->involuntary >= PREEMPT_MIN && per_s(w, w->involuntary) > PREEMPT_WARN;
}

static int64_t timed_runs(const bench_args *a, kiln_session *s, bench_profile *prof,
                          double **lat, run_switches *sw) {
  int64_t cap = a->seconds > 0 ? 1024 : a->iterations, n = 0;
  *lat = malloc(sizeof(double) * (size_t)cap);
  if (!*lat) return -1;
  double start = now_ms(), budget = a->seconds * 1e3;
  bool show = isatty(2) && !a->json;
  *sw = (run_switches){0, 0, 0};
  count_switches(sw, -1);
  for (;;) {
    double elapsed = now_ms() - start;
    /* one timed run at least: --time 1e-300 once timed none and ended in exit 1, silently */
    if (a->seconds > 0 ? n > 0 && elapsed >= budget : n >= a->iterations) break;
    if (n == cap) {
      double *p = realloc(*lat, sizeof(double) * (size_t)(cap *= 2));
      if (!p) return -1;
      *lat = p;
    }
    double t0 = now_ms();
    if (kiln_session_run(s) != KILN_OK) {
      fprintf(stderr, "\nkiln bench: %s\n", kiln_session_error(s));
      return -1;
    }
    (*lat)[n++] = now_ms() - t0;
    sw->run_ms += (*lat)[n - 1];
    if (prof) bench_profile_add(prof, s, t0 - start);
    if (show && elapsed > 1000)
      progress(a->seconds > 0 ? elapsed : (double)n, a->seconds > 0 ? budget : (double)a->iterations);
  }
  count_switches(sw, 1);
  if (show && now_ms() - start > 1000) fprintf(stderr, "\n");
  if (preempted(sw))
    fprintf(stderr, "kiln bench: warning: other programs took these CPUs from kiln's "
            "threads %.0f times a second of the timed runs, so these times are not the "
            "machine's%s (docs/benchmarks.md, \"Threads under load\")\n",
            per_s(sw, sw->involuntary),
            kl_cpu_threads_for(cli_threads(&a->common)) > 1
                ? "; every node waits for its slowest thread: fewer threads (--threads) "
                  "hold up better on a shared machine"
                : "");
  return n;
}

/* A JSON string literal of s (quotes, backslashes and control characters escaped). */
static void print_json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

#define SLOW_SHOWN 10 /* slow nodes named in the warning */

/* Warns on stderr of the nodes whose last run took a slow path (a oneDNN reference
 * implementation, or kiln's reference kernel where oneDNN had none: 10 to 1000 times
 * slower than the fast kernels); returns their count. */
static int warn_slow_paths(const kiln_model *m, const kiln_session *s) {
  const kl_graph *g = m->g;
  int n = 0;
  char d[256];
  for (int i = 0; i < g->n_nodes; i++) {
    const char *slow = kl_session_slow_path(s, i);
    if (!slow) continue;
    if (n++ == 0)
      fprintf(stderr, "kiln bench: warning: nodes ran on slow reference code at ISA level "
              "%s (see docs/benchmarks.md, 'No silent slow path'):\n", kl_cpu_isa_used());
    if (n <= SLOW_SHOWN)
      fprintf(stderr, "  %s: %s\n", kl_node_describe(g, &g->nodes[i], d, sizeof d), slow);
  }
  if (n > SLOW_SHOWN) fprintf(stderr, "  ... and %d more\n", n - SLOW_SHOWN);
  return n;
}

/* The share of a run that kiln's portable reference kernels take (nodes whose kernel
 * is "ref": ops without a fast kernel, such as QuantizeLinear in a QDQ model), from
 * one more run with every node timed; a warning on stderr naming their op types when
 * it is over REF_WARN. -1 when the run fails. */
#define REF_WARN 0.10
typedef struct ref_share {
  double share;
  int nodes;
  char ops[160];
} ref_share;

static ref_share reference_share(const kiln_model *m, kiln_session *s) {
  ref_share r = {-1, 0, ""};
  const double *start, *ms;
  kl_session_set_profiling(s, true);
  bool ok = kiln_session_run(s) == KILN_OK && kl_session_timings(s, &start, &ms);
  kl_session_set_profiling(s, false);
  if (!ok) return r;
  double all = 0, ref = 0;
  size_t used = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    all += ms[i];
    if (strcmp(kl_session_kernel_name(s, i), "ref") != 0) continue;
    ref += ms[i];
    r.nodes++;
    const char *op = kl_op_name(m->g->nodes[i].op);
    if (!strstr(r.ops, op) && used + strlen(op) + 3 < sizeof r.ops)
      used += (size_t)snprintf(r.ops + used, sizeof r.ops - used, "%s%s", used ? ", " : "", op);
  }
  r.share = all > 0 ? ref / all : 0;
  if (r.share > REF_WARN)
    fprintf(stderr, "kiln bench: warning: %.0f%% of a run is in kiln's portable reference "
            "kernels (%d nodes: %s), which have no fast kernel at ISA level %s: this "
            "model runs far below the machine's speed\n", 100 * r.share, r.nodes, r.ops,
            kl_cpu_isa_used());
  return r;
}

/* Precision bf16: how many of the convolutions, matrix products and attention nodes on
 * the CPU ran in bf16 (the implementation named "... bf16"); the rest ran float32. */
static void report_precision(const bench_args *a, const kiln_model *m, const kiln_session *s,
                             bool json) {
  if (!a->common.precision || strcmp(a->common.precision, "bf16") != 0) return;
  int products = 0, bf16 = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    const char *k = kl_session_kernel_name(s, i), *impl = kl_session_kernel_impl(s, i);
    if (strcmp(k, "dnnl_conv") && strcmp(k, "dnnl_deconv") && strcmp(k, "dnnl_gemm") &&
        strcmp(k, "dnnl_matmul") && strcmp(k, "gemv") && strcmp(k, "gemm") &&
        strcmp(k, "dnnl_attention"))
      continue;
    products++;
    bf16 += impl && strstr(impl, " bf16") != NULL;
  }
  int held = kl_session_bf16_values(s);
  if (json)
    printf(", \"precision\": \"bf16\", \"bf16_nodes\": %d, \"product_nodes\": %d, "
           "\"bf16_activations\": %d", bf16, products, held);
  else
    printf("precision        bf16: %d of %d convolutions, matrix products and attention nodes "
           "in bf16%s; %d "
           "activations passed between them in bf16\n", bf16, products,
           bf16 < products ? " (the rest float32: --profile names each)" : "", held);
}

/* With a device: where the nodes ran and what its caching allocator did. */
static void report_device(const kiln_model *m, const kiln_session *s, bool json) {
  kl_session_devices d;
  if (!kl_session_placement(s, &d)) return;
  const kl_dev_alloc_stats *a = &d.alloc;
  double mib = 1 << 20;
  if (json) {
    printf(", \"device\": ");
    print_json_string(d.name);
    printf(", \"device_nodes\": %d, \"nodes\": %d, \"uploads_per_run\": %d, "
           "\"downloads_per_run\": %d, \"device_memory\": {\"reserved_mib\": %.3f, "
           "\"reserved_peak_mib\": %.3f, \"allocated_peak_mib\": %.3f, \"segments\": %zu, "
           "\"allocations\": %llu, \"cache_hits\": %llu, \"oom_retries\": %llu, "
           "\"arena_mib\": %.3f}",
           d.device_nodes, m->g->n_nodes, d.uploads, d.downloads, (double)a->reserved_bytes / mib,
           (double)a->reserved_bytes_peak / mib, (double)a->allocated_bytes_peak / mib,
           a->segments, (unsigned long long)a->allocs, (unsigned long long)a->cache_hits,
           (unsigned long long)a->oom_retries, (double)d.arena_bytes / mib);
    return;
  }
  printf("device           %s\n", d.name);
  printf("device kernels   %s\n", d.origin);
  printf("placement        %d of %d nodes on the device; %d copies to it, %d from it per run\n",
         d.device_nodes, m->g->n_nodes, d.uploads, d.downloads);
  printf("device weights   %.3f MiB (the model's, shared by its sessions)\n",
         (double)d.shared.allocated_bytes / mib);
  printf("device memory    %.3f MiB reserved (peak %.3f), %.3f MiB peak in use, %zu "
         "segments; %llu allocations, %llu from the cache, %llu out-of-memory retries; "
         "the session's arena %.3f MiB\n",
         (double)a->reserved_bytes / mib, (double)a->reserved_bytes_peak / mib,
         (double)a->allocated_bytes_peak / mib, a->segments, (unsigned long long)a->allocs,
         (unsigned long long)a->cache_hits, (unsigned long long)a->oom_retries,
         (double)d.arena_bytes / mib);
}

static void report(const bench_args *a, const kiln_model *m, const kiln_session *s,
                   const kl_tensor *ts,
                   double load_ms, double session_ms, double first_ms, double *lat, int64_t n,
                   bench_profile *prof, int slow, ref_share ref, const run_switches *sw) {
  int threads = kl_cpu_threads_for(cli_threads(&a->common));
  qsort(lat, (size_t)n, sizeof *lat, cmp_double);
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += lat[i];
  double mean = sum / (double)n, thr = 1000.0 * (double)a->batch / mean;
  double p50 = percentile(lat, n, 50), p90 = percentile(lat, n, 90), p99 = percentile(lat, n, 99);
  if (a->json) {
    printf("{\"model\": ");
    print_json_string(a->model);
    printf(", \"threads\": %d, \"isa\": \"%s\", \"batch\": %" PRId64
           ", \"iterations\": %" PRId64 ", \"model_load_ms\": %.3f, \"session_create_ms\": "
           "%.3f, \"first_inference_ms\": %.3f, \"latency_ms\": {\"min\": %.4f, \"p50\": "
           "%.4f, \"p90\": %.4f, \"p99\": %.4f, \"max\": %.4f, \"mean\": %.4f}, "
           "\"throughput_per_s\": %.3f, \"peak_rss_mb\": %.2f, \"slow_nodes\": %d, "
           "\"reference_share\": %.4f",
           threads, kl_cpu_isa_used(), a->batch, n, load_ms, session_ms, first_ms,
           lat[0], p50, p90, p99, lat[n - 1], mean, thr, peak_rss_mb(), slow, ref.share);
    printf(", \"switches_per_s\": %.1f, \"involuntary_switches_per_s\": %.1f",
           switches_per_s(sw), per_s(sw, sw->involuntary));
    const char *busy_json = getenv("KILN_BUSY_CPUS");
    printf(", \"cpus_busy_at_start\": ");
    if (busy_json) print_json_string(busy_json);
    else printf("null");
    printf(", \"thread_wait\": ");
    print_json_string(cli_wait_policy());
    report_device(m, s, true);
    report_precision(a, m, s, true);
    printf(", \"inputs\": {");
    for (int k = 0; k < kiln_model_input_count(m); k++) {
      kiln_tensor_info info;
      kiln_model_input_info(m, k, &info);
      printf("%s", k ? ", " : "");
      print_json_string(info.name);
      printf(": [");
      for (int d = 0; d < ts[k].rank; d++) printf("%s%" PRId64, d ? ", " : "", ts[k].dims[d]);
      printf("]");
    }
    printf("}");
    if (prof) {
      printf(", ");
      fflush(stdout);
      bench_profile_json(prof, stdout);
    }
    printf("}\n");
    return;
  }
  printf("model            %s\n", a->model);
  const char *busy = getenv("KILN_BUSY_CPUS");
  if (busy && cli_threads(&a->common) != a->common.threads)
    printf("threads          %d (%s CPUs busy when kiln started; KILN_IGNORE_LOAD=1 runs "
           "%d)\n", threads, busy, kl_cpu_threads_for(a->common.threads));
  else
    printf("threads          %d%s\n", threads, a->common.threads ? "" : " (one per core)");
  printf("thread wait      %s\n", cli_wait_policy());
  printf("isa              %s\n", kl_cpu_isa_used());
  report_device(m, s, false);
  report_precision(a, m, s, false);
  printf("inputs\n");
  print_inputs(m, ts, stdout);
  printf("model load       %.3f ms\n", load_ms);
  printf("session create   %.3f ms\n", session_ms);
  printf("first inference  %.3f ms\n", first_ms);
  printf("latency (ms)     min %.4f  p50 %.4f  p90 %.4f  p99 %.4f  max %.4f  (%" PRId64
         " runs)\n", lat[0], p50, p90, p99, lat[n - 1], n);
  printf("throughput       %.2f inferences/s (batch %" PRId64 ")\n", thr, a->batch);
  printf("peak RSS         %.2f MiB\n", peak_rss_mb());
  printf("switches         %.0f a second of runs (%.0f involuntary)%s\n", switches_per_s(sw),
         per_s(sw, sw->involuntary),
         preempted(sw) ? ": other programs took the CPUs" : "");
  printf("slow paths       %d nodes%s\n", slow, slow ? " (named above: not a fast run)" : "");
  if (ref.share >= 0)
    printf("reference        %.1f%% of a run in %d nodes on portable reference kernels%s%s%s\n",
           100 * ref.share, ref.nodes, ref.nodes ? " (" : "", ref.ops, ref.nodes ? ")" : "");
  if (prof) bench_profile_print(prof, stdout);
}

int cmd_bench(int argc, char **argv) {
  bench_args a;
  int rc = parse_bench_args(argc, argv, &a);
  if (rc >= 0) return rc;
  kiln_options *o = cli_options(&a.common);
  if (!o) return EXIT_USAGE;
  /* one session, and nothing reads the weights after it: it may free what it packs */
  kiln_options_set_int(o, "release_weights", !a.common.keep_weights);
  kiln_session *s = NULL;
  kl_tensor *ts = NULL;
  double *lat = NULL;
  bench_profile *prof = NULL;
  rc = EXIT_FAIL;
  double t0 = now_ms();
  kiln_model *m = cli_load(a.model, o, a.common.input_types);
  double load_ms = now_ms() - t0;
  if (!m) goto done;
  t0 = now_ms();
  kiln_status st = kiln_session_create(m, o, &s);
  double session_ms = now_ms() - t0;
  if (st != KILN_OK) {
    fprintf(stderr, "kiln bench: %s: %s\n", kiln_status_string(st), kiln_session_error(s));
    goto done;
  }
  ts = calloc((size_t)kiln_model_input_count(m) + 1, sizeof *ts);
  if (!ts || !make_inputs(&a, m, s, ts)) goto done;
  t0 = now_ms();
  if ((st = kiln_session_run(s)) != KILN_OK) {
    fprintf(stderr, "kiln bench: %s: %s\n", kiln_status_string(st), kiln_session_error(s));
    goto done;
  }
  double first_ms = now_ms() - t0;
  for (int64_t i = 0; i < a.warmup; i++)
    if (kiln_session_run(s) != KILN_OK) goto done;
  if (a.profile) {
    if (!(prof = bench_profile_new(m))) goto done;
    kl_session_set_profiling(s, true);
  }
  run_switches sw;
  int64_t n = timed_runs(&a, s, prof, &lat, &sw);
  if (n <= 0) goto done;
  int slow = warn_slow_paths(m, s);
  report(&a, m, s, ts, load_ms, session_ms, first_ms, lat, n, prof, slow, reference_share(m, s),
         &sw);
  rc = EXIT_OK;
  if (prof && !bench_profile_write_trace(prof, a.trace ? a.trace : "kiln-profile.json"))
    rc = EXIT_FAIL;
done:
  bench_profile_free(prof);
  if (ts)
    for (int k = 0; k < kiln_model_input_count(m); k++) free(ts[k].data);
  free(ts);
  free(lat);
  kiln_session_free(s);
  kiln_model_free(m);
  kiln_options_free(o);
  return rc;
}
