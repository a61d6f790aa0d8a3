/* Options and version: the small parts of the public API. */
#include "kl_config.h"
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

const char *kiln_version(void) { return KL_VERSION; }

kiln_status kl_options_copy(kiln_options *dst, const kiln_options *src, kl_err *e) {
  kiln_options d = {.opt_level = 2, .max_tensor_bytes = KL_DEFAULT_MAX_TENSOR_BYTES,
                    .max_work = KL_DEFAULT_MAX_WORK};
  if (src) {
    d = *src;
    if (src->passes && !(d.passes = strdup(src->passes)))
      return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory copying options");
    if (src->input_types && !(d.input_types = strdup(src->input_types))) {
      free(d.passes);
      return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory copying options");
    }
  }
  *dst = d;
  return KILN_OK;
}

void kl_options_clear(kiln_options *o) {
  free(o->passes);
  free(o->input_types);
  o->passes = NULL;
  o->input_types = NULL;
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

kiln_status kiln_options_set_int(kiln_options *o, const char *name, int64_t value) {
  if (!o || !name) return KILN_ERR_INVALID_ARGUMENT;
  if (strcmp(name, "opt_level") == 0) {
    if (value < 0 || value > 3) return KILN_ERR_INVALID_ARGUMENT;
    o->opt_level = (int)value;
  } else if (strcmp(name, "threads") == 0) {
    if (value < 0 || value > 4096) return KILN_ERR_INVALID_ARGUMENT;
    o->threads = (int)value;
  } else if (strcmp(name, "max_tensor_bytes") == 0) {
    if (value <= 0) return KILN_ERR_INVALID_ARGUMENT;
    o->max_tensor_bytes = value;
  } else if (strcmp(name, "release_weights") == 0) {
    if (value < 0 || value > 1) return KILN_ERR_INVALID_ARGUMENT;
    o->release_weights = (int)value;
  } else if (strcmp(name, "fast_only") == 0) {
    if (value < 0 || value > 1) return KILN_ERR_INVALID_ARGUMENT;
    o->fast_only = (int)value;
  } else if (strcmp(name, "pin_threads") == 0) {
    if (value < 0 || value > 1) return KILN_ERR_INVALID_ARGUMENT;
    o->pin_threads = (int)value;
  } else if (strcmp(name, "max_work") == 0) {
    if (value < 0) return KILN_ERR_INVALID_ARGUMENT;
    o->max_work = value;
  } else if (strcmp(name, "memory_limit") == 0) {
    if (value < 0) return KILN_ERR_INVALID_ARGUMENT;
    o->memory_limit = value;
  } else if (strcmp(name, "fold_limit") == 0) {
    if (value < 0) return KILN_ERR_INVALID_ARGUMENT;
    o->fold_limit = value;
  } else if (strcmp(name, "reference") == 0) {
    if (value != 0 && value != 1) return KILN_ERR_INVALID_ARGUMENT;
    o->reference = (int)value;
  } else if (strcmp(name, "verify") == 0) {
    if (value != 0 && value != 1) return KILN_ERR_INVALID_ARGUMENT;
    o->verify = (int)value;
  } else {
    return KILN_ERR_INVALID_ARGUMENT;
  }
  return KILN_OK;
}

kiln_status kiln_options_set_string(kiln_options *o, const char *name, const char *value) {
  if (!o || !name || !value) return KILN_ERR_INVALID_ARGUMENT;
  char **slot = strcmp(name, "passes") == 0        ? &o->passes
               : strcmp(name, "input_types") == 0 ? &o->input_types
                                                  : NULL;
  if (!slot) return KILN_ERR_INVALID_ARGUMENT;
  char *p = NULL;
  if (*value && !(p = strdup(value))) return KILN_ERR_OUT_OF_MEMORY;
  free(*slot);
  *slot = p;
  return KILN_OK;
}
