/* Text dump of a graph, for `kiln inspect` and debugging. */
#include "ir/ir.h"

#include <inttypes.h>
#include <string.h>

static void format_tensor(const kl_graph *g, const kl_type *t, char *buf, size_t len);

void kl_type_format(const kl_graph *g, const kl_type *t, char *buf, size_t len) {
  if (!t->seq && !t->opt) {
    format_tensor(g, t, buf, len);
    return;
  }
  const char *open = t->opt && t->seq ? "optional(sequence(" : t->opt ? "optional(" : "sequence(";
  size_t used = (size_t)snprintf(buf, len, "%s", open);
  if (used >= len) return;
  format_tensor(g, t, buf + used, len - used);
  used += strlen(buf + used);
  if (used < len) snprintf(buf + used, len - used, "%s", t->opt && t->seq ? "))" : ")");
}

static void format_tensor(const kl_graph *g, const kl_type *t, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "%s", kl_dtype_name(t->dtype));
  if (used >= len) return;
  if (t->rank < 0) {
    snprintf(buf + used, len - used, "[?]");
    return;
  }
  used += (size_t)snprintf(buf + used, len - used, "[");
  for (int i = 0; i < t->rank && used < len; i++) {
    const kl_dim *d = &t->dims[i];
    const char *sep = i ? "," : "";
    if (d->size >= 0)
      used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, sep, d->size);
    else if (d->sym >= 0 && g && d->sym < g->n_symbols)
      used += (size_t)snprintf(buf + used, len - used, "%s%s", sep, g->symbols[d->sym]);
    else
      used += (size_t)snprintf(buf + used, len - used, "%s?", sep);
  }
  if (used < len) snprintf(buf + used, len - used, "]");
}

static void dump_value(const kl_graph *g, int v, FILE *out) {
  char t[512];
  kl_type_format(g, &g->values[v].type, t, sizeof t);
  fprintf(out, "%s: %s", g->values[v].name, t);
}

static void dump_attr(const kl_attr *a, FILE *out) {
  fprintf(out, "%s=", a->name);
  switch (a->kind) {
  case KL_ATTR_INT: fprintf(out, "%" PRId64, a->i); break;
  case KL_ATTR_FLOAT: fprintf(out, "%g", (double)a->f); break;
  case KL_ATTR_STRING: fprintf(out, "\"%s\"", a->s); break;
  case KL_ATTR_INTS:
    fputc('[', out);
    for (int i = 0; i < a->n; i++) fprintf(out, "%s%" PRId64, i ? "," : "", a->ints[i]);
    fputc(']', out);
    break;
  case KL_ATTR_FLOATS:
    fputc('[', out);
    for (int i = 0; i < a->n; i++) fprintf(out, "%s%g", i ? "," : "", (double)a->floats[i]);
    fputc(']', out);
    break;
  case KL_ATTR_STRINGS:
    fputc('[', out);
    for (int i = 0; i < a->n; i++) fprintf(out, "%s\"%s\"", i ? "," : "", a->strings[i]);
    fputc(']', out);
    break;
  case KL_ATTR_TENSOR: fprintf(out, "<tensor %s>", kl_dtype_name(a->t->dtype)); break;
  case KL_ATTR_GRAPH: fprintf(out, "<graph>"); break;
  }
}

static void dump_graph(const kl_graph *g, FILE *out, int pad) {
  int n_const = 0;
  size_t const_bytes = 0;
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == KL_VALUE_CONST) {
      n_const++;
      const_bytes += g->values[v].nbytes;
    }
  if (pad) fprintf(out, "%*sbody", pad, "");
  else fprintf(out, "graph %s", g->source);
  if (g->opset && !pad) fprintf(out, " (opset %" PRId64 ")", g->opset);
  fprintf(out, ": %d nodes, %d constants (%.1f KiB)", g->n_nodes, n_const,
          (double)const_bytes / 1024.0);
  if (g->n_outer) fprintf(out, "; its last %d inputs are the enclosing graph's", g->n_outer);
  fputc('\n', out);
  fprintf(out, "%*sinputs:\n", pad, "");
  for (int i = 0; i < g->n_inputs; i++) {
    fprintf(out, "%*s  ", pad, "");
    dump_value(g, g->inputs[i], out);
    fputc('\n', out);
  }
  fprintf(out, "%*soutputs:\n", pad, "");
  for (int i = 0; i < g->n_outputs; i++) {
    fprintf(out, "%*s  ", pad, "");
    dump_value(g, g->outputs[i], out);
    fputc('\n', out);
  }
  fprintf(out, "%*snodes:\n", pad, "");
  for (int i = 0; i < g->n_nodes; i++) {
    const kl_node *n = &g->nodes[i];
    fprintf(out, "%*s  #%d %s", pad, "", i, kl_op_name(n->op));
    if (n->name && *n->name) fprintf(out, " '%s'", n->name);
    if (n->src && strcmp(n->src, kl_op_name(n->op)) != 0) fprintf(out, " from %s", n->src);
    fprintf(out, "\n%*s    in:  ", pad, "");
    for (int k = 0; k < n->n_in; k++) {
      if (k) fprintf(out, ", ");
      if (n->in[k] < 0) fprintf(out, "-");
      else if (g->values[n->in[k]].kind == KL_VALUE_CONST) {
        fprintf(out, "const ");
        dump_value(g, n->in[k], out);
      } else dump_value(g, n->in[k], out);
    }
    fprintf(out, "\n%*s    out: ", pad, "");
    for (int k = 0; k < n->n_out; k++) {
      if (k) fprintf(out, ", ");
      if (n->out[k] < 0) fprintf(out, "-");
      else dump_value(g, n->out[k], out);
    }
    fputc('\n', out);
    if (n->n_attrs) {
      fprintf(out, "%*s    attrs: ", pad, "");
      for (int k = 0; k < n->n_attrs; k++) {
        if (k) fprintf(out, ", ");
        dump_attr(&n->attrs[k], out);
      }
      fputc('\n', out);
    }
    for (int k = 0; k < n->n_attrs; k++)
      if (n->attrs[k].kind == KL_ATTR_GRAPH && n->attrs[k].g) {
        fprintf(out, "%*s    %s:\n", pad, "", n->attrs[k].name);
        dump_graph(n->attrs[k].g, out, pad + 6);
      }
  }
}

void kl_graph_dump(const kl_graph *g, FILE *out) { dump_graph(g, out, 0); }
