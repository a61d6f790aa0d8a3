#include "base/status.h"

#include <stdio.h>
#include <string.h>

kiln_status kl_fail(kl_err *e, kiln_status code, const char *fmt, ...) {
  if (!e) return code;
  if (e->code != KILN_OK) return e->code;
  e->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return code;
}

void kl_err_prefix(kl_err *e, const char *fmt, ...) {
  if (!e || e->code == KILN_OK) return;
  char prefix[KL_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  if (n <= 0) return;
  /* prefix + ": " + message, cut to the buffer; the message's tail is what gets cut */
  char joined[KL_ERR_MSG_MAX];
  size_t p = strlen(prefix), m = strlen(e->msg);
  if (p > sizeof joined - 3) p = sizeof joined - 3;
  memcpy(joined, prefix, p);
  memcpy(joined + p, ": ", 2);
  if (m > sizeof joined - p - 3) m = sizeof joined - p - 3;
  memcpy(joined + p + 2, e->msg, m);
  joined[p + 2 + m] = '\0';
  memcpy(e->msg, joined, sizeof joined);
}

void kl_err_clear(kl_err *e) {
  if (!e) return;
  e->code = KILN_OK;
  e->msg[0] = '\0';
}

const char *kiln_status_string(kiln_status status) {
  switch (status) {
  case KILN_OK: return "ok";
  case KILN_ERR_INVALID_ARGUMENT: return "invalid argument";
  case KILN_ERR_IO: return "i/o error";
  case KILN_ERR_INVALID_MODEL: return "invalid model";
  case KILN_ERR_UNSUPPORTED: return "unsupported";
  case KILN_ERR_SHAPE: return "shape mismatch";
  case KILN_ERR_DTYPE: return "dtype mismatch";
  case KILN_ERR_OUT_OF_MEMORY: return "out of memory";
  case KILN_ERR_LIMIT: return "limit exceeded";
  case KILN_ERR_NOT_FOUND: return "not found";
  case KILN_ERR_STATE: return "invalid state";
  case KILN_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}
