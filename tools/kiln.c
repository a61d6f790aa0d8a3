/* kiln: run, check and inspect neural-network models from the command line. */
#include "cli.h"

#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *usage =
    "usage: kiln COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  run MODEL      run a model on given or random inputs, print or save outputs\n"
    "  check DIR...   run ONNX test-case folders and compare with expected outputs\n"
    "  inspect MODEL  print the model's graph after optimization, or what it did\n"
    "  optimize MODEL save the optimized graph as ONNX (-o OUT.onnx)\n"
    "  bench MODEL    measure load time, latency percentiles, throughput, memory\n"
    "  train MODEL    train a model on arrays from a .npz file, save it as ONNX\n"
    "  quantize MODEL post-training int8 quantization into a QDQ ONNX model (-o OUT.onnx)\n"
    "  info           print the version and what this build supports\n"
    "\n"
    "`kiln COMMAND --help` tells more. `kiln --version` prints the version.\n"
    "exit codes: 0 success, 1 failure (model error, failed check), 2 bad usage\n";

/* OpenMP's waiting threads (include/kiln.h, "threads"): unless the environment says
 * how they wait, kiln starts itself again with GOMP_SPINCOUNT=10000 and KMP_BLOCKTIME=0
 * (libgomp reads them when the process starts, before main), and KILN_OPENMP_WAIT=kiln
 * so that kiln bench can say who chose. When the new start fails, the variables are
 * taken back and the runtime's defaults stay.
 *
 * Not where the environment binds threads to CPUs (OMP_PROC_BIND, OMP_PLACES,
 * GOMP_CPU_AFFINITY, KMP_AFFINITY): libgomp binds this first start's thread to its
 * first place before main, the new start would inherit that one CPU as all it had, and
 * every thread ran on CPU 0 (EfficientNet-B0 at 2 threads 10.5 ms against 5.5; ten
 * times slower at 16 threads on a 16-core Xeon). A clang build also loads libgomp
 * (through oneDNN) beside its own libomp, so the places cannot be read back reliably
 * from here: such a user keeps the runtime's wait, or sets it. */
static bool binds_threads(void) {
  const char *b = getenv("OMP_PROC_BIND");
  return (b && strcasecmp(b, "false") != 0) || getenv("OMP_PLACES") ||
         getenv("GOMP_CPU_AFFINITY") || getenv("KMP_AFFINITY");
}

/* Other programs' load on the CPUs this process may run on, when it starts (busy_cpus:
 * what something other than this process, asleep meanwhile, kept busy over
 * BUSY_SAMPLE_MS, from /proc/stat's per-CPU times in ticks of 10 ms).
 *
 * Every node of a run waits for its slowest thread, and a thread that shares its core
 * with a busy program takes turns with it a time slice at a time: with one busy loop,
 * EfficientNet-B0 took 37 ms at 2 threads on a 2-core Xeon (5.7 idle, 8.7 at 1
 * thread) and 53 ms at 16 threads on a 16-core one (3.0 idle, 3.2 to 3.5 at 15
 * threads). So where other programs keep some CPUs busy at the start, kiln runs by
 * default one thread per CPU left free (cli_threads, from KILN_BUSY_CPUS), 1 when
 * every CPU is busy; a count asked for with --threads stays, since a run's numbers
 * depend on it (kiln bench warns when its threads were preempted; docs/benchmarks.md,
 * "Threads under load"). */
#define BUSY_SAMPLE_MS 30
#define BUSY_AGAIN_MS 70
#define BUSY_CPU 0.6 /* of one CPU's time, summed over the CPUs: one busy CPU */

static bool cpu_times(const cpu_set_t *set, unsigned long long *busy, unsigned long long *all) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return false;
  char line[512];
  int seen = 0;
  while (fgets(line, sizeof line, f)) {
    int cpu;
    unsigned long long t[8] = {0};
    if (strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9') continue;
    if (sscanf(line + 3, "%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &t[0], &t[1],
               &t[2], &t[3], &t[4], &t[5], &t[6], &t[7]) < 5 ||
        cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, set))
      continue;
    /* user nice system idle iowait irq softirq steal: idle and iowait are free time */
    all[cpu] = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    busy[cpu] = all[cpu] - t[3] - t[4];
    seen++;
  }
  fclose(f);
  return seen > 0;
}

/* How many of the CPUs in set other programs kept busy over BUSY_SAMPLE_MS (their busy
 * shares summed, from BUSY_CPU of a CPU on counting one), in *busy. */
static bool busy_window(const cpu_set_t *set, int cpus, int *busy) {
  static unsigned long long b0[CPU_SETSIZE], a0[CPU_SETSIZE], b1[CPU_SETSIZE], a1[CPU_SETSIZE];
  if (!cpu_times(set, b0, a0)) return false;
  struct timespec nap = {0, BUSY_SAMPLE_MS * 1000000L};
  nanosleep(&nap, NULL);
  if (!cpu_times(set, b1, a1)) return false;
  double sum = 0; /* CPUs' worth of others' time: a busy program that moved between
                     CPUs meanwhile still counts once */
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, set) && a1[c] > a0[c])
      sum += (double)(b1[c] - b0[c]) / (double)(a1[c] - a0[c]);
  *busy = (int)(sum + (1 - BUSY_CPU));
  if (*busy > cpus) *busy = cpus;
  return true;
}

/* How many of the process's CPUs other programs keep busy, in *busy, of *cpus; false
 * when /proc/stat cannot tell. */
static bool busy_cpus(int *busy, int *cpus) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return false;
  *cpus = CPU_COUNT(&set);
  *busy = 0;
  if (*cpus < 2 || !busy_window(&set, *cpus, busy)) return false;
  if (*busy == 0) return true;
  /* A program started beside kiln (the other end of a pipe: `kiln bench ... | python3`)
   * is busy for its first tens of milliseconds only: load counts when it is still
   * there BUSY_AGAIN_MS later (the fewer CPUs of the two windows). */
  struct timespec gap = {0, BUSY_AGAIN_MS * 1000000L};
  nanosleep(&gap, NULL);
  int again = 0;
  if (!busy_window(&set, *cpus, &again)) return false;
  if (again < *busy) *busy = again;
  return true;
}

/* The thread count asked for on the command line (--threads N), 0 when none. */
static long threads_asked(char **argv) {
  long n = 0;
  for (int i = 1; argv[i] && argv[i + 1]; i++)
    if (strcmp(argv[i], "--threads") == 0) n = strtol(argv[i + 1], NULL, 10);
  return n;
}

/* Whether the command runs models (what the load matters to). */
static bool runs_models(int argc, char **argv) {
  static const char *const cmds[] = {"run", "check", "bench", "train", "quantize"};
  if (argc < 3) return false;
  for (int i = 2; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return false;
  for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++)
    if (strcmp(argv[1], cmds[k]) == 0) return true;
  return false;
}

static void short_wait(int argc, char **argv) {
  if (getenv("KILN_OPENMP_WAIT")) return; /* the second start */
  int busy = 0, cpus = 0;
  char note[32];
  long asked = threads_asked(argv);
  unsetenv("KILN_BUSY_CPUS");
  if (asked == 0 && !getenv("KILN_IGNORE_LOAD") && runs_models(argc, argv) &&
      busy_cpus(&busy, &cpus) && busy > 0) {
    /* the thread count (cli_common.c, cli_threads, reads it) */
    snprintf(note, sizeof note, "%d/%d", busy, cpus);
    setenv("KILN_BUSY_CPUS", note, 1);
  }
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("KMP_BLOCKTIME") ||
      binds_threads())
    return;
  if (setenv("GOMP_SPINCOUNT", "10000", 1) == 0 && setenv("KMP_BLOCKTIME", "0", 1) == 0 &&
      setenv("KILN_OPENMP_WAIT", "kiln", 1) == 0)
    execv("/proc/self/exe", argv);
  unsetenv("GOMP_SPINCOUNT");
  unsetenv("KMP_BLOCKTIME");
  unsetenv("KILN_OPENMP_WAIT");
}

int main(int argc, char **argv) {
  short_wait(argc, argv);
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : EXIT_OK;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("kiln %s\n", kiln_version());
    return EXIT_OK;
  }
  static const struct {
    const char *name;
    int (*fn)(int, char **);
  } cmds[] = {{"run", cmd_run}, {"check", cmd_check}, {"inspect", cmd_inspect},
              {"optimize", cmd_optimize},
              {"info", cmd_info}, {"bench", cmd_bench}, {"train", cmd_train},
              {"quantize", cmd_quantize}};
  for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++)
    if (strcmp(argv[1], cmds[k].name) == 0) return cmds[k].fn(argc - 1, argv + 1);
  fprintf(stderr, "kiln: unknown command '%s'\n\n%s", argv[1], usage);
  return EXIT_USAGE;
}
