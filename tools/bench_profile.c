/* `kiln bench --profile` (bench_profile.h). Times come from the session's own clock
 * reads around each node (kl_session_timings), which include the node's shape
 * inference and the placing of its outputs as well as the kernel. */
#include "bench_profile.h"
#include "import/fileio.h"
#include "runtime/session.h"

#include <stdlib.h>
#include <string.h>

#define TRACE_RUNS 10 /* runs kept in the Chrome trace */
/* Each node's time in the first runs is kept for its median (a mean moves with a rare
 * outlier: a preempted run, a page fault): at most MEDIAN_RUNS runs and MEDIAN_VALUES
 * times in all. */
#define MEDIAN_RUNS 1000
#define MEDIAN_VALUES (1 << 22)

typedef struct trace_event {
  int node;
  double ts_ms, dur_ms;
} trace_event;

struct bench_profile {
  const kl_graph *g;
  int runs;
  double *node_ms;       /* per node, summed over runs */
  char (*kernel)[48];     /* per node, as of the last run: "dnnl_conv jit:avx2" */
  trace_event *events;   /* TRACE_RUNS * n_nodes */
  int n_events;
  int *order;            /* scratch: nodes or op types by time */
  double *op_ms;         /* per op, summed */
  int *op_nodes;
  double *samples;       /* [kept runs][nodes]: the first runs' node times */
  int kept, kept_max;    /* runs in samples; the most it takes */
  double *scratch;       /* kept_max values: one node's times, sorted */
};

bench_profile *bench_profile_new(const kiln_model *m) {
  bench_profile *p = calloc(1, sizeof *p);
  size_t nn = (size_t)m->g->n_nodes + 1;
  if (p) {
    p->g = m->g;
    p->node_ms = calloc(nn, sizeof *p->node_ms);
    p->kernel = calloc(nn, sizeof *p->kernel);
    p->events = calloc(nn * TRACE_RUNS, sizeof *p->events);
    p->order = calloc(nn + KL_OP_COUNT, sizeof *p->order);
    p->op_ms = calloc(KL_OP_COUNT, sizeof *p->op_ms);
    p->op_nodes = calloc(KL_OP_COUNT, sizeof *p->op_nodes);
  }
  if (p) {
    int64_t most = MEDIAN_VALUES / (int64_t)nn;
    p->kept_max = (int)(most < MEDIAN_RUNS ? (most > 0 ? most : 1) : MEDIAN_RUNS);
    p->samples = calloc((size_t)p->kept_max * nn, sizeof *p->samples);
    p->scratch = calloc((size_t)p->kept_max, sizeof *p->scratch);
  }
  if (!p || !p->node_ms || !p->kernel || !p->events || !p->order || !p->op_ms || !p->op_nodes ||
      !p->samples || !p->scratch) {
    fprintf(stderr, "kiln bench: out of memory for the profile\n");
    bench_profile_free(p);
    return NULL;
  }
  return p;
}

void bench_profile_free(bench_profile *p) {
  if (!p) return;
  free(p->node_ms);
  free(p->kernel);
  free(p->events);
  free(p->order);
  free(p->op_ms);
  free(p->op_nodes);
  free(p->samples);
  free(p->scratch);
  free(p);
}

void bench_profile_add(bench_profile *p, const kiln_session *s, double run_start_ms) {
  const double *start, *ms;
  if (!kl_session_timings(s, &start, &ms)) return;
  for (int i = 0; i < p->g->n_nodes; i++) {
    p->node_ms[i] += ms[i];
    const char *impl = kl_session_kernel_impl(s, i);
    snprintf(p->kernel[i], sizeof p->kernel[i], "%s%s%s", kl_session_kernel_name(s, i),
             impl ? " " : "", impl ? impl : "");
    if (p->runs < TRACE_RUNS)
      p->events[p->n_events++] = (trace_event){i, run_start_ms + start[i], ms[i]};
    if (p->kept < p->kept_max) p->samples[(size_t)p->kept * (size_t)p->g->n_nodes + (size_t)i] = ms[i];
  }
  if (p->kept < p->kept_max) p->kept++;
  p->runs++;
}

static const char *op_label(kl_op op, char *buf, size_t len) {
  const kl_op_info *info = kl_op_get(op);
  snprintf(buf, len, "%s%s%s", info->domain, *info->domain ? "." : "", info->name);
  return buf;
}

/* Sorts idx[0..n) by key, largest first (insertion sort: the lists are short). */
static void sort_desc(int *idx, int n, const double *key) {
  for (int i = 1; i < n; i++) {
    int v = idx[i], j = i;
    while (j > 0 && key[idx[j - 1]] < key[v]) {
      idx[j] = idx[j - 1];
      j--;
    }
    idx[j] = v;
  }
}

/* Per op type totals, into p->op_ms / op_nodes; returns the op types in time order
 * in p->order and their count. */
static int rank_ops(bench_profile *p) {
  memset(p->op_ms, 0, sizeof(double) * KL_OP_COUNT);
  memset(p->op_nodes, 0, sizeof(int) * KL_OP_COUNT);
  for (int i = 0; i < p->g->n_nodes; i++) {
    p->op_ms[p->g->nodes[i].op] += p->node_ms[i];
    p->op_nodes[p->g->nodes[i].op]++;
  }
  int n = 0;
  for (int op = 0; op < KL_OP_COUNT; op++)
    if (p->op_nodes[op]) p->order[n++] = op;
  sort_desc(p->order, n, p->op_ms);
  return n;
}

/* The kernels that the nodes of op ran with, comma-separated, into buf. */
static const char *op_kernels(const bench_profile *p, int op, char *buf, size_t len) {
  buf[0] = '\0';
  for (int i = 0; i < p->g->n_nodes; i++) {
    const char *k = p->kernel[i][0] ? p->kernel[i] : "?";
    if ((int)p->g->nodes[i].op != op || strstr(buf, k)) continue;
    size_t used = strlen(buf);
    snprintf(buf + used, len - used, "%s%s", used ? "," : "", k);
  }
  return buf;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Node i's median time over the kept runs. */
static double node_median(bench_profile *p, int i) {
  if (!p->kept) return 0;
  for (int r = 0; r < p->kept; r++)
    p->scratch[r] = p->samples[(size_t)r * (size_t)p->g->n_nodes + (size_t)i];
  qsort(p->scratch, (size_t)p->kept, sizeof *p->scratch, cmp_double);
  return p->kept % 2 ? p->scratch[p->kept / 2]
                     : (p->scratch[p->kept / 2 - 1] + p->scratch[p->kept / 2]) / 2;
}

static double total_ms(const bench_profile *p) {
  double t = 0;
  for (int i = 0; i < p->g->n_nodes; i++) t += p->node_ms[i];
  return t;
}

void bench_profile_print(bench_profile *p, FILE *out) {
  if (!p->runs) return;
  double total = total_ms(p), runs = p->runs;
  int n = rank_ops(p);
  char label[128], kernels[512];
  fprintf(out, "profile: mean over %d runs, %.3f ms per run in nodes\n", p->runs, total / runs);
  fprintf(out, "  %-28s %10s %7s %6s  %s\n", "op type", "ms/run", "share", "nodes", "kernels");
  for (int k = 0; k < n; k++) {
    int op = p->order[k];
    fprintf(out, "  %-28s %10.4f %6.1f%% %6d  %s\n", op_label((kl_op)op, label, sizeof label),
            p->op_ms[op] / runs, total > 0 ? 100 * p->op_ms[op] / total : 0, p->op_nodes[op],
            op_kernels(p, op, kernels, sizeof kernels));
  }
  int nn = p->g->n_nodes, shown = nn < 25 ? nn : 25;
  for (int i = 0; i < nn; i++) p->order[i] = i;
  sort_desc(p->order, nn, p->node_ms);
  fprintf(out, "  slowest nodes (%d of %d; ms/run the mean, median over the first %d runs):\n",
          shown, nn, p->kept);
  fprintf(out, "  %5s  %-32s %-22s %-26s %10s %7s %10s\n", "#", "node", "op", "kernel", "ms/run",
          "share", "median");
  for (int k = 0; k < shown; k++) {
    int i = p->order[k];
    const kl_node *nd = &p->g->nodes[i];
    fprintf(out, "  %5d  %-32.32s %-22.22s %-26.26s %10.4f %6.1f%% %10.4f\n", i,
            *nd->name ? nd->name : "-", op_label(nd->op, label, sizeof label),
            p->kernel[i][0] ? p->kernel[i] : "?", p->node_ms[i] / runs,
            total > 0 ? 100 * p->node_ms[i] / total : 0, node_median(p, i));
  }
}

/* s as a JSON string literal (quotes, backslashes and control characters escaped). */
static void json_string(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
    else if (c < 0x20) fprintf(out, "\\u%04x", c);
    else fputc(c, out);
  }
  fputc('"', out);
}

void bench_profile_json(bench_profile *p, FILE *out) {
  int n = rank_ops(p);
  char label[128], kernels[512];
  double runs = p->runs ? p->runs : 1;
  fprintf(out, "\"profile\": {\"runs\": %d, \"ops\": [", p->runs);
  for (int k = 0; k < n; k++) {
    int op = p->order[k];
    fprintf(out, "%s{\"op\": ", k ? ", " : "");
    json_string(out, op_label((kl_op)op, label, sizeof label));
    fprintf(out, ", \"ms\": %.4f, \"nodes\": %d, \"kernels\": ", p->op_ms[op] / runs,
            p->op_nodes[op]);
    json_string(out, op_kernels(p, op, kernels, sizeof kernels));
    fputc('}', out);
  }
  fprintf(out, "]}");
}

/* The trace is made in memory and written by kl_file_write, which replaces a link
 * planted at path (the default, kiln-profile.json, lies in whatever folder bench runs
 * in) instead of writing through it. */
bool bench_profile_write_trace(const bench_profile *p, const char *path) {
  char *buf = NULL, label[128];
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) {
    fprintf(stderr, "kiln bench: out of memory for the trace\n");
    return false;
  }
  fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", f);
  for (int k = 0; k < p->n_events; k++) {
    const trace_event *ev = &p->events[k];
    const kl_node *nd = &p->g->nodes[ev->node];
    fputs(k ? ",\n{\"name\": " : "{\"name\": ", f);
    json_string(f, *nd->name ? nd->name : op_label(nd->op, label, sizeof label));
    fputs(", \"cat\": ", f);
    json_string(f, op_label(nd->op, label, sizeof label));
    fprintf(f, ", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": 1, \"tid\": 1, "
            "\"args\": {\"node\": %d, \"kernel\": ", ev->ts_ms * 1e3, ev->dur_ms * 1e3, ev->node);
    json_string(f, p->kernel[ev->node][0] ? p->kernel[ev->node] : "?");
    fputs("}}", f);
  }
  fputs("\n]}\n", f);
  bool ok = !ferror(f);
  ok &= fclose(f) == 0;
  kl_err e = {0};
  if (!ok) fprintf(stderr, "kiln bench: out of memory for the trace\n");
  else if (kl_file_write(path, buf, len, NULL, 0, &e) != KILN_OK)
    ok = false, fprintf(stderr, "kiln bench: %s\n", e.msg);
  free(buf);
  return ok;
}
