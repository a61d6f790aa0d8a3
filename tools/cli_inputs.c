/* Random model inputs for `kiln run` and `kiln bench`. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next_random(uint64_t *s) { /* xorshift64*; the state must not be 0 */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

/* Values that make sense for the dtype: floats in [-1,1), integers in [0,10), bools. */
static void fill_random(kl_tensor *t, uint64_t *state) {
  int64_t n = kl_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = next_random(state);
    double v;
    if (kl_dtype_is_float(t->dtype)) v = (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    else if (t->dtype == KL_BOOL) v = (double)(r >> 63);
    else v = (double)(r % 10);
    kl_store_f64(t->data, t->dtype, (size_t)i, v);
  }
}

/* The model's input names, comma-separated, into buf. */
static const char *input_names(const kiln_model *m, char *buf, size_t len) {
  size_t u = 0;
  buf[0] = '\0';
  for (int k = 0; k < kiln_model_input_count(m) && u < len; k++) {
    kiln_tensor_info info;
    kiln_model_input_info(m, k, &info);
    int w = snprintf(buf + u, len - u, "%s%s", k ? ", " : "", info.name);
    u = w < 0 ? len : u + (size_t)w;
  }
  return buf;
}

bool cli_check_named(const char *cmd, const char *opt, const char *const *list, int n,
                     const kiln_model *m) {
  char names[1024];
  for (int i = 0; i < n; i++) {
    const char *eq = strchr(list[i], '=');
    size_t len = eq ? (size_t)(eq - list[i]) : 0;
    bool known = false;
    for (int k = 0; eq && k < kiln_model_input_count(m) && !known; k++) {
      kiln_tensor_info info;
      kiln_model_input_info(m, k, &info);
      known = strlen(info.name) == len && strncmp(info.name, list[i], len) == 0;
    }
    if (!known) {
      fprintf(stderr, "kiln %s: %s %s: expected NAME=%s with NAME a model input (the "
              "model's inputs: %s)\n", cmd, opt, list[i],
              strcmp(opt, "--shape") == 0   ? "DIMS"
              : strcmp(opt, "--array") == 0 ? "ARRAY"
                                             : "FILE",
              input_names(m, names, sizeof names));
      return false;
    }
    if (!eq[1] && strcmp(opt, "--input") == 0) { /* it was opened as the file "" */
      fprintf(stderr, "kiln %s: %s %s: no FILE after the '='\n", cmd, opt, list[i]);
      return false;
    }
    for (int j = 0; j < i; j++)
      if (strncmp(list[j], list[i], len + 1) == 0) {
        fprintf(stderr, "kiln %s: %s names input '%.*s' twice (%s and %s)\n", cmd, opt,
                (int)len, list[i], list[j], list[i]);
        return false;
      }
  }
  return true;
}

bool cli_check_shape_or_file(const char *cmd, const char *const *shapes, int n_shapes,
                             const char *const *inputs, int n_inputs) {
  for (int i = 0; i < n_shapes; i++) {
    const char *eq = strchr(shapes[i], '=');
    size_t len = eq ? (size_t)(eq - shapes[i]) : strlen(shapes[i]);
    for (int j = 0; j < n_inputs; j++)
      if (strncmp(inputs[j], shapes[i], len) == 0 && inputs[j][len] == '=') {
        fprintf(stderr, "kiln %s: --shape %s and --input %s both give input '%.*s' (the "
                "file's shape is the input's): give one of them\n", cmd, shapes[i],
                inputs[j], (int)len, shapes[i]);
        return false;
      }
  }
  return true;
}

/* Whether the n bytes at name are the name of an input of m. */
static bool is_input(const kiln_model *m, const char *name, size_t n) {
  for (int k = 0; k < kiln_model_input_count(m); k++) {
    kiln_tensor_info info;
    kiln_model_input_info(m, k, &info);
    if (strlen(info.name) == n && strncmp(info.name, name, n) == 0) return true;
  }
  return false;
}

bool cli_types_by_position(const char *spec, const kiln_model *m, char *buf, size_t len) {
  size_t u = 0;
  int k = 0;
  buf[0] = '\0';
  for (const char *p = spec; *p; k++) {
    const char *colon = strchr(p, ':'), *semi = strchr(p, ';');
    size_t n = colon && (!semi || colon < semi) ? (size_t)(colon - p) : strlen(p);
    if (is_input(m, p, n)) return false;
    kiln_tensor_info info = {.name = "?"};
    if (k < kiln_model_input_count(m)) kiln_model_input_info(m, k, &info);
    if (u < len) {
      int w = snprintf(buf + u, len - u, "%s'%.*s' as '%s'", k ? ", " : "", (int)n, p,
                       info.name);
      u = w < 0 ? len : u + (size_t)w;
    }
    p = semi ? semi + 1 : p + strlen(p);
  }
  return k > 0;
}

const char *cli_find_named(const char *const *list, int n, const char *name) {
  size_t len = strlen(name);
  for (int i = 0; i < n; i++)
    if (strncmp(list[i], name, len) == 0 && list[i][len] == '=') return list[i] + len + 1;
  return NULL;
}

bool cli_random_input(const char *cmd, const kiln_tensor_info *info, const char *shape,
                      int64_t batch, uint64_t *state, kl_tensor *t) {
  t->dtype = (kl_dtype)info->dtype;
  if (shape) {
    if (!cli_parse_dims(shape, &t->rank, t->dims)) {
      fprintf(stderr, "kiln %s: --shape %s=%s: expected dims like 1x3x224x224\n", cmd,
              info->name, shape);
      return false;
    }
  } else {
    if (info->rank < 0) {
      fprintf(stderr, "kiln %s: input '%s' has no declared rank; give --shape\n", cmd,
              info->name);
      return false;
    }
    t->rank = info->rank;
    for (int d = 0; d < info->rank; d++)
      t->dims[d] = info->dims[d] >= 0 ? info->dims[d] : d == 0 ? batch : 1;
  }
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++)
    if (__builtin_mul_overflow(n, t->dims[d], &n) || n > (INT64_C(1) << 32)) {
      fprintf(stderr, "kiln %s: input '%s' is too large for random data\n", cmd, info->name);
      return false;
    }
  t->data = malloc((size_t)n * kl_dtype_size(t->dtype) + 1);
  if (!t->data) {
    fprintf(stderr, "kiln %s: out of memory\n", cmd);
    return false;
  }
  if (*state == 0) *state = 1;
  fill_random(t, state);
  return true;
}
