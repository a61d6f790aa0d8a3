/* kiln optimize: load a model, run the optimizer and save the result as ONNX. */
#include "cli.h"
#include "export/onnx_export.h"
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>

static const char *optimize_help =
    "usage: kiln optimize MODEL -o OUT.onnx [options]\n"
    "Saves the graph after the optimization level's passes (default -O2) as ONNX:\n"
    "ONNX ops at the newest opset kiln reads, kiln's fused ops in the domain \"kiln\".\n"
    "kiln loads the file like any model; at -O0 it runs it exactly as saved.\n"
    "  -o FILE          where to write the model (required)\n"
    "  --fold-limit N   constant folding's result limit in bytes (default 1 MiB)\n";

int cmd_optimize(int argc, char **argv) {
  cli_common common = {.opt_level = 2};
  const char *path = NULL, *out = NULL;
  int64_t fold_limit = 0;
  for (int i = 1; i < argc; i++) {
    int r = cli_common_arg(&common, argc, argv, &i);
    if (r < 0) return EXIT_USAGE;
    if (r > 0) continue;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s%s", optimize_help, cli_load_help);
      return EXIT_OK;
    }
    if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else if (strcmp(argv[i], "--fold-limit") == 0 && i + 1 < argc) {
      if (!cli_int_arg("optimize", "--fold-limit", argv[++i], 0, INT64_MAX,
                       "bytes; 0 = the default, 1 MiB", &fold_limit))
        return EXIT_USAGE;
    } else if (argv[i][0] != '-' && !path) {
      path = argv[i];
    } else {
      fprintf(stderr, "kiln optimize: bad argument '%s'\n%s", argv[i], optimize_help);
      return EXIT_USAGE;
    }
  }
  if (!path || !out) {
    fprintf(stderr, "kiln optimize: %s\n%s", path ? "no -o OUT given" : "no MODEL given",
            optimize_help);
    return EXIT_USAGE;
  }
  if (!cli_check_applies(&common, "optimize", false)) return EXIT_USAGE;
  kiln_options *o = cli_options(&common);
  if (o && kiln_options_set_int(o, "fold_limit", fold_limit) != KILN_OK) {
    fprintf(stderr, "kiln: --fold-limit: %s\n", kiln_options_error(o));
    kiln_options_free(o);
    o = NULL;
  }
  if (!o) return EXIT_USAGE;
  kiln_model *m = cli_load(path, o, common.input_types);
  kiln_options_free(o);
  if (!m) return EXIT_FAIL;
  kl_err e = {0};
  kiln_status st = kl_onnx_export_file(m->g, out, &e);
  if (st == KILN_OK)
    printf("%s: %d nodes (%d before -O%d)\n", out, m->stats.nodes_after,
           m->stats.nodes_before, common.opt_level);
  else
    fprintf(stderr, "kiln: %s: %s\n", kiln_status_string(st), e.msg);
  kiln_model_free(m);
  return st == KILN_OK ? EXIT_OK : EXIT_FAIL;
}
