/* kiln inspect: the graph as kiln sees it after optimization. */
#include "cli.h"
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>

static const char *inspect_help =
    "usage: kiln inspect MODEL [options]\n"
    "Prints the model's inputs, outputs and nodes with their inferred shapes, after\n"
    "the optimization level's passes (use -O0 to see the graph as imported).\n";

int cmd_inspect(int argc, char **argv) {
  cli_common common = {.opt_level = 2};
  const char *path = NULL;
  for (int i = 1; i < argc; i++) {
    int r = cli_common_arg(&common, argc, argv, &i);
    if (r < 0) return EXIT_USAGE;
    if (r > 0) continue;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s%s", inspect_help, cli_common_help);
      return EXIT_OK;
    }
    if (argv[i][0] != '-' && !path) {
      path = argv[i];
    } else {
      fprintf(stderr, "kiln inspect: bad argument '%s'\n%s", argv[i], inspect_help);
      return EXIT_USAGE;
    }
  }
  if (!path) {
    fprintf(stderr, "kiln inspect: no MODEL given\n%s", inspect_help);
    return EXIT_USAGE;
  }
  kiln_options *o = cli_options(&common);
  if (!o) return EXIT_USAGE;
  kiln_model *m = cli_load(path, o);
  kiln_options_free(o);
  if (!m) return EXIT_FAIL;
  kl_graph_dump(m->g, stdout);
  kiln_model_free(m);
  return EXIT_OK;
}
