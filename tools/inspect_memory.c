/* `kiln inspect --memory`: the static memory plan of one run on random inputs: the
 * arena's size, what the tensors would take with no reuse, and the largest tensors
 * with their places in the arena. `kiln inspect --kernels`: what ran each node in
 * that run (kernel, oneDNN's implementation, slow paths). */
#include "cli.h"
#include "backends/cpu/cpu_backend.h"
#include "runtime/session.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGEST 15

static double mib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* Runs s once on inputs of the declared shapes (symbolic dims 1): random floats, and
 * zeros for integers, which unlike random ones are valid indices (token ids, types). */
static bool run_once(kiln_model *m, kiln_session *s, kl_tensor *ts) {
  uint64_t state = 1;
  for (int k = 0; k < kiln_model_input_count(m); k++) {
    kiln_tensor_info info;
    kiln_model_input_info(m, k, &info);
    if (!cli_random_input("inspect", &info, NULL, 1, &state, &ts[k])) return false;
    size_t bytes = kl_tensor_nbytes(&ts[k]);
    if (!kl_dtype_is_float(ts[k].dtype) && bytes) memset(ts[k].data, 0, bytes);
    kiln_status st = kiln_session_set_input(s, info.name, info.dtype, ts[k].rank, ts[k].dims,
                                            ts[k].data, kl_tensor_nbytes(&ts[k]));
    if (st != KILN_OK) break;
  }
  kiln_status st = kiln_session_run(s);
  if (st != KILN_OK)
    fprintf(stderr, "kiln inspect: %s: %s\n", kiln_status_string(st), kiln_session_error(s));
  return st == KILN_OK;
}

static void print_summary(const kiln_model *m, const kiln_session *s, const kl_memplan *p) {
  const kl_graph *g = m->g;
  int made = 0, inplace = 0, views = 0;
  size_t weights = 0;
  for (int v = 0; v < g->n_values; v++) {
    made += g->values[v].producer >= 0;
    inplace += p->inplace_of[v] >= 0;
    views += p->view_of[v] >= 0;
    if (g->values[v].kind == KL_VALUE_CONST) weights += g->values[v].nbytes;
  }
  double saved = p->total_bytes ? 100.0 * (1.0 - (double)p->arena_bytes / (double)p->total_bytes) : 0;
  printf("memory plan of one run:\n");
  printf("  arena            %10.3f MiB  (%d storages for %d tensors)\n", mib(p->arena_bytes),
         p->n_stores, made);
  printf("  without reuse    %10.3f MiB  (every tensor in a buffer of its own)\n",
         mib(p->total_bytes));
  printf("  saved            %9.1f %%\n", saved);
  printf("  in place         %6d tensors (written over an input that dies at their node)\n",
         inplace);
  printf("  views            %6d tensors (shape-only ops showing their input's bytes)\n", views);
  printf("  weights          %10.3f MiB  (constants, outside the arena; oneDNN keeps its own\n"
         "                                  reordered copies of the weights it packs)\n",
         mib(weights));
  printf("  held by kernels  %10.3f MiB  (oneDNN's packed weights, and the one workspace its\n"
         "                                  nodes share for scratchpads and staged copies;\n"
         "                                  kiln's RNN kernels' packed W, R and buffers)\n",
         mib(kl_session_held_bytes(s)));
}

static void print_largest(const kiln_model *m, const kiln_session *s, const kl_memplan *p) {
  const kl_graph *g = m->g;
  int order[LARGEST], n = 0;
  for (int v = 0; v < g->n_values; v++) { /* the LARGEST biggest, kept sorted */
    if (g->values[v].producer < 0) continue;
    int j;
    if (n < LARGEST) j = n++;
    else if (p->bytes[order[LARGEST - 1]] < p->bytes[v]) j = LARGEST - 1;
    else continue;
    order[j] = v;
    for (; j > 0 && p->bytes[order[j - 1]] < p->bytes[order[j]]; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  }
  printf("largest tensors:\n  %12s %12s  %-8s %-24s %-22s %s\n", "bytes", "offset", "place",
         "shape", "made by", "name");
  for (int k = 0; k < n; k++) {
    int v = order[k], st = p->store[v];
    char shape[128], offset[32];
    kl_type_format(g, kl_session_value_type(s, v), shape, sizeof shape);
    const char *place = p->view_of[v] >= 0 ? "view" : p->inplace_of[v] >= 0 ? "in-place" : "own";
    if (st >= 0) snprintf(offset, sizeof offset, "%zu", p->stores[st].offset);
    else snprintf(offset, sizeof offset, "-");
    const kl_node *prod = &g->nodes[g->values[v].producer];
    printf("  %12zu %12s  %-8s %-24s %-22s %s\n", p->bytes[v], offset, place, shape,
           kl_op_name(prod->op), g->values[v].name);
  }
}

/* With a device: where each value crosses between it and the host. */
static void print_copies(const kiln_model *m, const kiln_session *s) {
  const kl_graph *g = m->g;
  printf("copies in every run:\n");
  int weights = 0;
  size_t weight_bytes = 0;
  for (int v = 0; v < g->n_values; v++) {
    bool to_dev;
    if (!kl_session_value_copy(s, v, &to_dev)) continue;
    if (g->values[v].kind == KL_VALUE_CONST) { /* copied once, when the session was made */
      weights++;
      weight_bytes += g->values[v].nbytes;
      continue;
    }
    char shape[128];
    kl_type_format(g, kl_session_value_type(s, v), shape, sizeof shape);
    printf("  %-9s %-40.40s %s\n", to_dev ? "to device" : "to host", g->values[v].name, shape);
  }
  printf("weights copied to the device once, when the session was made: %d (%.3f MiB)\n",
         weights, (double)weight_bytes / (1 << 20));
}

static int print_kernels(const kiln_model *m, const kiln_session *s) {
  const kl_graph *g = m->g;
  int slow = 0;
  char d[256];
  kl_session_devices dev;
  if (kl_session_placement(s, &dev))
    printf("device: %s; kernels %s\n%d of %d nodes run on it, the rest on the CPU; %d values "
           "go to it and %d come back in every run\ndevice memory: %.3f MiB reserved, "
           "%.3f MiB peak in use, %llu allocations (%llu from the cache)\n",
           dev.name, dev.origin, dev.device_nodes, g->n_nodes, dev.uploads, dev.downloads,
           (double)dev.alloc.reserved_bytes / (1 << 20),
           (double)dev.alloc.allocated_bytes_peak / (1 << 20),
           (unsigned long long)dev.alloc.allocs, (unsigned long long)dev.alloc.cache_hits);
  printf("kernels of one run at ISA level %s:\n  %5s  %-36s %-24s %-6s %-12s %-20s %s\n",
         kl_cpu_isa_used(), "#", "node", "op", "device", "kernel", "implementation",
         "slow path");
  for (int i = 0; i < g->n_nodes; i++) {
    const char *impl = kl_session_kernel_impl(s, i), *why = kl_session_slow_path(s, i);
    slow += why != NULL;
    const kl_node *n = &g->nodes[i];
    const kl_op_info *op = kl_op_get(n->op);
    snprintf(d, sizeof d, "%s%s%s", op->domain, *op->domain ? "." : "", op->name);
    printf("  %5d  %-36.36s %-24.24s %-6s %-12s %-20s %s\n", i, *n->name ? n->name : "-", d,
           kl_session_node_device(s, i), kl_session_kernel_name(s, i), impl ? impl : "-",
           why ? why : "-");
  }
  printf("%d of %d nodes took a slow path\n", slow, g->n_nodes);
  if (dev.name) print_copies(m, s);
  return EXIT_OK;
}

/* One run of m on random inputs, then what print shows of it. */
static int inspect_run(kiln_model *m, const kiln_options *o,
                       int (*print)(const kiln_model *, const kiln_session *)) {
  kiln_session *s = NULL;
  kl_tensor *ts = calloc((size_t)kiln_model_input_count(m) + 1, sizeof *ts);
  int rc = EXIT_FAIL;
  kiln_status st = ts ? kiln_session_create(m, o, &s) : KILN_ERR_OUT_OF_MEMORY;
  if (st != KILN_OK) {
    fprintf(stderr, "kiln inspect: %s: %s\n", kiln_status_string(st), kiln_session_error(s));
  } else if (run_once(m, s, ts)) {
    rc = print(m, s);
  }
  for (int k = 0; ts && k < kiln_model_input_count(m); k++) free(ts[k].data);
  free(ts);
  kiln_session_free(s);
  return rc;
}

static int print_memory(const kiln_model *m, const kiln_session *s) {
  const kl_memplan *p = kl_session_memplan(s);
  if (!p) {
    fprintf(stderr, "kiln inspect: the run made no memory plan (over the memory limit?)\n");
    return EXIT_FAIL;
  }
  print_summary(m, s, p);
  print_largest(m, s, p);
  return EXIT_OK;
}

int cli_inspect_memory(kiln_model *m, const kiln_options *o) {
  return inspect_run(m, o, print_memory);
}

int cli_inspect_kernels(kiln_model *m, const kiln_options *o) {
  return inspect_run(m, o, print_kernels);
}
