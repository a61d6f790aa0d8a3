/* Options and version: the small parts of the public API. */
#include "kl_config.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kiln_version(void) { return KL_VERSION; }

kiln_status kl_options_copy(kiln_options *dst, const kiln_options *src, kl_err *e) {
  kiln_options d = {.opt_level = 2, .max_tensor_bytes = KL_DEFAULT_MAX_TENSOR_BYTES,
                    .max_work = KL_DEFAULT_MAX_WORK, .lr = NAN, .momentum = 0,
                    .dampening = 0, .weight_decay = NAN, .beta1 = 0.9, .beta2 = 0.999,
                    .eps = NAN, .lr_decay = 0, .initial_accumulator = 0,
                    .trust_coefficient = 0.001, .clip_norm = 0, .label_smoothing = 0,
                    .smooth_l1_beta = 1.0, .ignore_index = -100, .seed = 0};
  if (src) {
    d = *src;
    d.err = (kl_err){0};
    char **strs[] = {&d.passes, &d.input_types, &d.device, &d.loss, &d.optimizer, &d.frozen,
                     &d.reduction, &d.precision, &d.no_decay};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
      if (*strs[i] && !(*strs[i] = strdup(*strs[i]))) {
        for (size_t j = 0; j < i; j++) free(*strs[j]);
        return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory copying options");
      }
    }
  }
  *dst = d;
  return KILN_OK;
}

void kl_options_clear(kiln_options *o) {
  char **strs[] = {&o->passes, &o->input_types, &o->device, &o->loss, &o->optimizer,
                   &o->frozen, &o->reduction, &o->precision, &o->no_decay};
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
    free(*strs[i]);
    *strs[i] = NULL;
  }
}

kiln_status kiln_options_create(kiln_options **out) {
  if (!out) return KILN_ERR_INVALID_ARGUMENT;
  *out = calloc(1, sizeof **out);
  if (!*out) return KILN_ERR_OUT_OF_MEMORY;
  return kl_options_copy(*out, NULL, NULL);
}

void kiln_options_free(kiln_options *options) {
  if (!options) return;
  kl_options_clear(options);
  free(options);
}

/* The integer options: where each is kept, its range, and what the range means. */
typedef struct int_option {
  const char *name;
  size_t offset;
  bool wide; /* int64_t, else int */
  int64_t lo, hi;
  const char *what;
} int_option;

#define OPT(field, wide, lo, hi, what) {#field, offsetof(kiln_options, field), wide, lo, hi, what}
static const int_option int_options[] = {
    OPT(opt_level, false, 0, 3, "an optimization level"),
    OPT(threads, false, 0, 4096, "a thread count (0 = one per core)"),
    OPT(max_tensor_bytes, true, 1, INT64_MAX, "a size in bytes"),
    OPT(memory_limit, true, 0, INT64_MAX, "a size in bytes (0 = none)"),
    OPT(max_work, true, 0, INT64_MAX, "a step count (0 = no bound)"),
    OPT(fold_limit, true, 0, INT64_MAX, "a size in bytes (0 = the default)"),
    OPT(verify, false, 0, 1, "0 or 1"),
    OPT(reference, false, 0, 1, "0 or 1"),
    OPT(release_weights, false, 0, 1, "0 or 1"),
    OPT(pin_threads, false, 0, 1, "0 or 1"),
    OPT(fast_only, false, 0, 1, "0 or 1"),
    OPT(nesterov, false, 0, 1, "0 or 1"),
    OPT(amsgrad, false, 0, 1, "0 or 1"),
    OPT(maximize, false, 0, 1, "0 or 1"),
    OPT(bf16, false, 0, 1, "0 or 1"),
    OPT(ignore_index, true, INT64_MIN, INT64_MAX, "a class index"),
    OPT(seed, true, 0, INT64_MAX, "a seed"),
};
#undef OPT

/* The float options (training's), each with its range. */
typedef struct float_option {
  const char *name;
  size_t offset;
  double lo, hi;
  const char *what;
} float_option;
#define FOPT(field, lo, hi, what) {#field, offsetof(kiln_options, field), lo, hi, what}
static const float_option float_options[] = {
    FOPT(lr, 0, INFINITY, "a learning rate, at least 0"),
    FOPT(momentum, 0, INFINITY, "a momentum, at least 0"),
    FOPT(dampening, 0, 1, "a dampening from 0 to 1"),
    FOPT(weight_decay, 0, INFINITY, "a weight decay, at least 0"),
    FOPT(beta1, 0, 0.999999999, "a coefficient in [0, 1)"),
    FOPT(beta2, 0, 0.999999999, "a coefficient in [0, 1)"),
    FOPT(eps, 0, INFINITY, "an epsilon, at least 0"),
    FOPT(lr_decay, 0, INFINITY, "a decay, at least 0"),
    FOPT(initial_accumulator, 0, INFINITY, "an initial accumulator value, at least 0"),
    FOPT(trust_coefficient, 0, INFINITY, "a trust coefficient, at least 0"),
    FOPT(clip_norm, 0, INFINITY, "a gradient norm bound (0 = no clipping)"),
    FOPT(label_smoothing, 0, 1, "a label smoothing from 0 to 1"),
    FOPT(smooth_l1_beta, 0, INFINITY, "smooth L1's beta, at least 0"),
};
#undef FOPT
static const char *const string_options[] = {"passes", "input_types", "device", "precision",
                                             "loss", "optimizer", "frozen", "reduction",
                                             "no_decay"};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Records the setter's failure in o (each call replaces the last message). */
static kiln_status refuse(kiln_options *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static kiln_status refuse(kiln_options *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(o->err.msg, sizeof o->err.msg, fmt, ap);
  va_end(ap);
  o->err.code = KILN_ERR_INVALID_ARGUMENT;
  return KILN_ERR_INVALID_ARGUMENT;
}

/* "opt_level, threads, ..." */
static void list_names(char *buf, size_t len, bool ints) {
  size_t used = 0;
  buf[0] = '\0';
  size_t n = ints ? COUNT(int_options) : COUNT(string_options);
  for (size_t i = 0; i < n && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
                             ints ? int_options[i].name : string_options[i]);
}

static bool is_string_option(const char *name) {
  for (size_t i = 0; i < COUNT(string_options); i++)
    if (strcmp(name, string_options[i]) == 0) return true;
  return false;
}

kiln_status kiln_options_set_int(kiln_options *o, const char *name, int64_t value) {
  if (!o) return KILN_ERR_INVALID_ARGUMENT;
  o->err = (kl_err){0};
  if (!name) return refuse(o, "kiln_options_set_int: the option name is NULL");
  for (size_t i = 0; i < COUNT(int_options); i++) {
    const int_option *p = &int_options[i];
    if (strcmp(name, p->name) != 0) continue;
    if (value < p->lo || value > p->hi) {
      if (p->hi == INT64_MAX)
        return refuse(o, "option '%s': %lld is out of range: expected %s, at least %lld",
                      name, (long long)value, p->what, (long long)p->lo);
      return refuse(o, "option '%s': %lld is out of range: expected %s, from %lld to %lld",
                    name, (long long)value, p->what, (long long)p->lo, (long long)p->hi);
    }
    char *at = (char *)o + p->offset;
    if (p->wide)
      *(int64_t *)(void *)at = value;
    else
      *(int *)(void *)at = (int)value;
    return KILN_OK;
  }
  char names[256];
  if (is_string_option(name))
    return refuse(o, "option '%s' is a string: set it with kiln_options_set_string", name);
  list_names(names, sizeof names, true);
  return refuse(o, "no integer option '%s'; the integer options are %s", name, names);
}
/* "cpu", "auto", "opencl" or "opencl:P.D" with P and D decimal. */
static bool device_spec_ok(const char *v) {
  if (strcmp(v, "cpu") == 0 || strcmp(v, "auto") == 0 || strcmp(v, "opencl") == 0 ||
      strcmp(v, "level-zero") == 0)
    return true;
  if (strncmp(v, "level-zero:", 11) == 0) {
    const char *p = v + 11;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 4) p++, digits++;
    return digits && !*p;
  }
  if (strncmp(v, "opencl:", 7) != 0) return false;
  const char *p = v + 7;
  int parts = 0;
  for (;;) {
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 4) p++, digits++;
    if (!digits) return false;
    parts++;
    if (*p == '.' && parts == 1) p++;
    else break;
  }
  return *p == 0 && parts == 2;
}

kiln_status kiln_options_set_string(kiln_options *o, const char *name, const char *value) {
  if (!o) return KILN_ERR_INVALID_ARGUMENT;
  o->err = (kl_err){0};
  if (!name) return refuse(o, "kiln_options_set_string: the option name is NULL");
  if (!value) return refuse(o, "option '%s': the value is NULL (\"\" unsets it)", name);
  char **slot = strcmp(name, "passes") == 0        ? &o->passes
               : strcmp(name, "input_types") == 0 ? &o->input_types
               : strcmp(name, "device") == 0      ? &o->device
               : strcmp(name, "precision") == 0   ? &o->precision
               : strcmp(name, "loss") == 0        ? &o->loss
               : strcmp(name, "optimizer") == 0   ? &o->optimizer
               : strcmp(name, "frozen") == 0      ? &o->frozen
               : strcmp(name, "reduction") == 0   ? &o->reduction
               : strcmp(name, "no_decay") == 0    ? &o->no_decay
                                                  : NULL;
  if (!slot) {
    char names[256];
    for (size_t i = 0; i < COUNT(int_options); i++)
      if (strcmp(name, int_options[i].name) == 0)
        return refuse(o, "option '%s' is an integer: set it with kiln_options_set_int", name);
    list_names(names, sizeof names, false);
    return refuse(o, "no string option '%s'; the string options are %s", name, names);
  }
  if (slot == &o->device && *value && !device_spec_ok(value))
    return refuse(o, "option 'device': '%s' is not a device: expected cpu, auto, opencl, "
                  "opencl:P.D (platform P, device D), level-zero or level-zero:D (`kiln "
                  "info` lists them)", value);
  static const char *const losses[] = {"cross_entropy", "nll", "mse", "l1", "smooth_l1",
                                       "bce_logits", NULL};
  static const char *const optimizers[] = {"sgd", "adagrad", "adam", "adamw", "lamb",
                                           "lars", NULL};
  static const char *const reductions[] = {"mean", "sum", NULL};
  static const char *const precisions[] = {"auto", "fp32", "tf32", "bf16", NULL};
  const char *const *allowed = slot == &o->loss        ? losses
                               : slot == &o->optimizer ? optimizers
                               : slot == &o->reduction ? reductions
                               : slot == &o->precision ? precisions
                                                       : NULL;
  bool known = !allowed || !*value;
  for (int i = 0; allowed && allowed[i] && !known; i++) known = strcmp(value, allowed[i]) == 0;
  if (!known)
    return refuse(o, "option '%s': '%s' is not one: expected %s", name, value,
                  allowed == losses       ? "cross_entropy, nll, mse, l1, smooth_l1 or bce_logits"
                  : allowed == optimizers ? "sgd, adagrad, adam, adamw, lamb or lars"
                  : allowed == precisions ? "auto, fp32, tf32 or bf16 (fp16 is not built "
                                            "yet)"
                                          : "mean or sum");
  char *p = NULL;
  if (*value && !(p = strdup(value))) {
    o->err.code = KILN_ERR_OUT_OF_MEMORY;
    snprintf(o->err.msg, sizeof o->err.msg, "option '%s': out of memory copying the value", name);
    return KILN_ERR_OUT_OF_MEMORY;
  }
  free(*slot);
  *slot = p;
  return KILN_OK;
}

kiln_status kiln_options_set_float(kiln_options *o, const char *name, double value) {
  if (!o) return KILN_ERR_INVALID_ARGUMENT;
  o->err = (kl_err){0};
  if (!name) return refuse(o, "kiln_options_set_float: the option name is NULL");
  for (size_t i = 0; i < COUNT(float_options); i++) {
    const float_option *p = &float_options[i];
    if (strcmp(name, p->name) != 0) continue;
    if (!(value >= p->lo && value <= p->hi)) /* NaN fails too */
      return refuse(o, "option '%s': %g is out of range: expected %s", name, value, p->what);
    *(double *)(void *)((char *)o + p->offset) = value;
    return KILN_OK;
  }
  char names[512];
  size_t used = 0;
  names[0] = '\0';
  for (size_t i = 0; i < COUNT(float_options) && used < sizeof names; i++)
    used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                             float_options[i].name);
  return refuse(o, "no float option '%s'; the float options are %s", name, names);
}

const char *kiln_options_error(const kiln_options *o) { return o ? o->err.msg : "options is NULL"; }
