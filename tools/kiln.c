/* kiln: run, check and inspect neural-network models from the command line. */
#include "cli.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

static void short_wait(char **argv) {
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
  short_wait(argv);
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
