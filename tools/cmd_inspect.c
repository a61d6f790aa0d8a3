/* kiln inspect: the graph as kiln sees it after optimization, what the optimizer did,
 * and a Graphviz drawing of the graph. */
#include "cli.h"
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>

static const char *inspect_help =
    "usage: kiln inspect MODEL [options]\n"
    "Prints the model's inputs, outputs and nodes with their inferred shapes, after\n"
    "the optimization level's passes (use -O0 to see the graph as imported).\n"
    "  --stats          print what the optimizer did instead: how often each pass\n"
    "                   fired and the count of each op before and after\n"
    "  --dot FILE       also write the graph as Graphviz dot to FILE\n"
    "  --memory         print the memory plan of one run on random inputs instead:\n"
    "                   arena size, the total without reuse, what the kernels hold\n"
    "                   (packed weights, oneDNN's shared workspace), the largest tensors\n"
    "  --kernels        print what ran each node in one run on random inputs instead:\n"
    "                   the kernel, oneDNN's implementation (jit:avx2, brg:avx512_core,\n"
    "                   ...) and any slow path (a reference implementation)\n"
    "  --fold-limit N   constant folding's result limit in bytes (default 1 MiB)\n";

static void print_stats(const kl_pass_stats *s, int level, FILE *out) {
  int count;
  const kl_pass *passes = kl_passes(&count);
  fprintf(out, "passes at -O%d (rewrites each made):\n", level);
  for (int k = 0; k < s->n_passes && k < count; k++)
    fprintf(out, "  %-20s %4d   %s\n", s->name[k], s->fired[k], passes[k].what);
  fprintf(out, "nodes: %d -> %d\n", s->nodes_before, s->nodes_after);
  fprintf(out, "ops:%*s before  after\n", 25, "");
  for (int op = 0; op < KL_OP_COUNT; op++) {
    if (!s->ops_before[op] && !s->ops_after[op]) continue;
    const kl_op_info *info = kl_op_get((kl_op)op);
    char name[128];
    snprintf(name, sizeof name, "%s%s%s", info->domain, *info->domain ? "." : "", info->name);
    fprintf(out, "  %-30s %6d %6d\n", name, s->ops_before[op], s->ops_after[op]);
  }
}

/* ---- Graphviz ---- */

/* s inside a dot string literal: quotes and backslashes escaped. */
static void dot_text(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    fputc(*s, f);
  }
}

static void dot_type(FILE *f, const kl_graph *g, int v) {
  char t[512];
  kl_type_format(g, &g->values[v].type, t, sizeof t);
  dot_text(f, t);
}

/* A node's box: op, name, the constants it reads and a few attributes. Ids carry the
 * graph's prefix p ("" for the model's, "b1_" and on for bodies). */
static void dot_node(FILE *f, const kl_graph *g, int i, const char *p) {
  const kl_node *n = &g->nodes[i];
  const kl_op_info *info = kl_op_get(n->op);
  fprintf(f, "  %sn%d [label=\"%s%s", p, i, *info->domain ? "kiln." : "", info->name);
  const char *act = kl_attr_string(n, "activation", NULL);
  if (act) {
    fputs(" + ", f);
    dot_text(f, act);
  }
  if (n->name && *n->name) {
    fputs("\\n", f);
    dot_text(f, n->name);
  }
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v < 0 || g->values[v].kind != KL_VALUE_CONST) continue;
    fputs("\\n", f);
    dot_text(f, g->values[v].name);
    fputs(": ", f);
    dot_type(f, g, v);
  }
  fprintf(f, "\"%s];\n", *info->domain ? ", style=\"rounded,filled\", fillcolor=\"#fde8c8\"" : "");
}

/* Edges into node i, from the node or graph input that makes each of its inputs. */
static void dot_edges(FILE *f, const kl_graph *g, int i, const char *p) {
  const kl_node *n = &g->nodes[i];
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v < 0 || g->values[v].kind == KL_VALUE_CONST) continue;
    int src = g->values[v].producer;
    if (src >= 0) fprintf(f, "  %sn%d -> %sn%d [label=\"", p, src, p, i);
    else fprintf(f, "  %sv%d -> %sn%d [label=\"", p, v, p, i);
    dot_type(f, g, v);
    fputs("\"];\n", f);
  }
}

/* Graph g's inputs, nodes, edges and outputs under prefix p; each body of an If, Loop or
 * Scan as a cluster of its own after its node (bodies' inputs and outputs in them). */
static void dot_graph(FILE *f, const kl_graph *g, const char *p, int *bodies) {
  for (int i = 0; i < g->n_inputs; i++) {
    fprintf(f, "  %sv%d [shape=ellipse, label=\"", p, g->inputs[i]);
    dot_text(f, g->values[g->inputs[i]].name);
    fputs("\"];\n", f);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    dot_node(f, g, i, p);
    const kl_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_attrs; k++) {
      if (n->attrs[k].kind != KL_ATTR_GRAPH || !n->attrs[k].g) continue;
      char q[32];
      snprintf(q, sizeof q, "b%d_", ++*bodies);
      fprintf(f, "  subgraph cluster_%s {\n  label=\"%s of ", q, n->attrs[k].name);
      dot_text(f, n->name && *n->name ? n->name : kl_op_name(n->op));
      fputs("\"; style=dashed;\n", f);
      dot_graph(f, n->attrs[k].g, q, bodies);
      fputs("  }\n", f);
      fprintf(f, "  %sn%d -> %sout0 [style=dotted, arrowhead=none];\n", p, i, q);
    }
  }
  for (int i = 0; i < g->n_nodes; i++) dot_edges(f, g, i, p);
  for (int i = 0; i < g->n_outputs; i++) {
    int v = g->outputs[i], src = g->values[v].producer;
    fprintf(f, "  %sout%d [shape=ellipse, label=\"", p, i);
    dot_text(f, g->values[v].name);
    fputs("\"];\n", f);
    if (src >= 0) fprintf(f, "  %sn%d -> %sout%d;\n", p, src, p, i);
    else fprintf(f, "  %sv%d -> %sout%d;\n", p, v, p, i);
  }
}

static bool write_dot(const kl_graph *g, const char *path) {
  FILE *f = cli_open_stream("inspect", path, false);
  if (!f) return false;
  fputs("digraph kiln {\n  compound=true;\n  node [shape=box, style=rounded, "
        "fontname=\"Helvetica\"];\n  edge [fontname=\"Helvetica\", fontsize=10];\n", f);
  int bodies = 0;
  dot_graph(f, g, "", &bodies);
  fputs("}\n", f);
  bool ok = !ferror(f);
  ok &= fclose(f) == 0;
  if (!ok) fprintf(stderr, "kiln inspect: cannot write %s\n", path);
  return ok;
}

int cmd_inspect(int argc, char **argv) {
  cli_common common = {.opt_level = 2};
  const char *path = NULL, *dot = NULL;
  bool stats = false, memory = false, kernels = false;
  int64_t fold_limit = 0;
  for (int i = 1; i < argc; i++) {
    int r = cli_common_arg(&common, argc, argv, &i);
    if (r < 0) return EXIT_USAGE;
    if (r > 0) continue;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s%s%s", inspect_help, cli_load_help, cli_run_help);
      return EXIT_OK;
    }
    if (strcmp(argv[i], "--stats") == 0) {
      stats = true;
    } else if (strcmp(argv[i], "--memory") == 0) {
      memory = true;
    } else if (strcmp(argv[i], "--kernels") == 0) {
      kernels = true;
    } else if (strcmp(argv[i], "--dot") == 0 && i + 1 < argc) {
      dot = argv[++i];
    } else if (strcmp(argv[i], "--fold-limit") == 0 && i + 1 < argc) {
      if (!cli_int_arg("inspect", "--fold-limit", argv[++i], 0, INT64_MAX,
                       "bytes; 0 = the default, 1 MiB", &fold_limit))
        return EXIT_USAGE;
    } else if (argv[i][0] != '-' && !path) {
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
  if (!cli_check_applies(&common, "inspect", true)) return EXIT_USAGE;
  if (common.device && !memory) kernels = true; /* placement is a session's */
  kiln_options *o = cli_options(&common);
  if (o && kiln_options_set_int(o, "fold_limit", fold_limit) != KILN_OK) {
    fprintf(stderr, "kiln: --fold-limit: %s\n", kiln_options_error(o));
    kiln_options_free(o);
    o = NULL;
  }
  if (!o) return EXIT_USAGE;
  kiln_model *m = cli_load(path, o, common.input_types);
  int memory_rc = !m ? EXIT_OK
                  : memory ? cli_inspect_memory(m, o)
                  : kernels ? cli_inspect_kernels(m, o)
                            : EXIT_OK;
  kiln_options_free(o);
  if (!m) return EXIT_FAIL;
  if (memory || kernels) {
    kiln_model_free(m);
    return memory_rc;
  }
  if (stats) print_stats(&m->stats, common.opt_level, stdout);
  else kl_graph_dump(m->g, stdout);
  bool ok = !dot || write_dot(m->g, dot);
  kiln_model_free(m);
  return ok ? EXIT_OK : EXIT_FAIL;
}
