/* Level Zero (Intel GPUs): drivers and devices enumerated through Debian's loader
 * (libze1), for `kiln info` and option device "level-zero[:D]". kiln does not run on
 * Level Zero yet: opening a device that exists fails saying so (docs/gpu.md), and with
 * no driver it fails saying that. */
#ifndef KL_GPU_LEVEL_ZERO_H
#define KL_GPU_LEVEL_ZERO_H

#include "base/status.h"

#include <stddef.h>

/* The Level Zero devices, a line each, into buf; returns how many (a line saying why
 * when none: no loader in this build, no driver). */
int kl_ze_describe(char *buf, size_t len);
/* spec "level-zero" or "level-zero:D": a clean failure naming what is missing. */
kiln_status kl_ze_open(const char *spec, kl_err *e);

#endif
