/* Internal error reporting: a status code plus a message with context, and checked size
 * arithmetic. The base layer: every other layer (ir, import, passes, runtime, backends)
 * includes it, and it includes nothing of theirs. */
#ifndef KL_STATUS_H
#define KL_STATUS_H

#include "kiln.h"

#include <stdarg.h>
#include <stddef.h>

#define KL_ERR_MSG_MAX 1024

typedef struct kl_err {
  kiln_status code;
  char msg[KL_ERR_MSG_MAX];
} kl_err;

/* Record a failure and return its code. The first failure wins: a later call with an
 * error already recorded only returns the recorded code, so low-level detail is kept
 * and callers add context with kl_err_prefix. e may be NULL. */
kiln_status kl_fail(kl_err *e, kiln_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Put "context: " in front of a recorded message (for example "node 'conv1' (Conv)"). */
void kl_err_prefix(kl_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kl_err_clear(kl_err *e);

/* Overflow-checked size arithmetic; return false on overflow. */
static inline int kl_mul_overflow_i64(int64_t a, int64_t b, int64_t *r) {
  return __builtin_mul_overflow(a, b, r);
}
static inline int kl_mul_overflow_size(size_t a, size_t b, size_t *r) {
  return __builtin_mul_overflow(a, b, r);
}
static inline int kl_add_overflow_size(size_t a, size_t b, size_t *r) {
  return __builtin_add_overflow(a, b, r);
}

#endif
