/* Level Zero drivers and devices (level_zero.h). */
#include "backends/gpu/level_zero.h"
#include "kl_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if KL_HAVE_LEVEL_ZERO
#include <level_zero/ze_api.h>

#define MAX_ZE 32

static const char *ze_name(ze_result_t r) {
  switch (r) {
  case ZE_RESULT_ERROR_UNINITIALIZED: return "ZE_RESULT_ERROR_UNINITIALIZED: no driver";
  case ZE_RESULT_ERROR_DEVICE_LOST: return "ZE_RESULT_ERROR_DEVICE_LOST";
  case ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY: return "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY";
  case ZE_RESULT_ERROR_UNSUPPORTED_VERSION: return "ZE_RESULT_ERROR_UNSUPPORTED_VERSION";
  default: return "a Level Zero error";
  }
}

/* Every device of every driver, in order, into devs (at most MAX_ZE); the count, or
 * -1 with *why set when Level Zero has no driver. */
static int devices(ze_device_handle_t *devs, ze_result_t *why) {
  ze_result_t r = zeInit(ZE_INIT_FLAG_GPU_ONLY);
  uint32_t nd = 0;
  if (r == ZE_RESULT_SUCCESS) r = zeDriverGet(&nd, NULL);
  if (r != ZE_RESULT_SUCCESS || nd == 0) {
    *why = r == ZE_RESULT_SUCCESS ? ZE_RESULT_ERROR_UNINITIALIZED : r;
    return -1;
  }
  ze_driver_handle_t drv[MAX_ZE];
  if (nd > MAX_ZE) nd = MAX_ZE;
  if ((r = zeDriverGet(&nd, drv)) != ZE_RESULT_SUCCESS) {
    *why = r;
    return -1;
  }
  int n = 0;
  for (uint32_t d = 0; d < nd && n < MAX_ZE; d++) {
    uint32_t k = (uint32_t)(MAX_ZE - n);
    if (zeDeviceGet(drv[d], &k, devs + n) == ZE_RESULT_SUCCESS) n += (int)k;
  }
  return n;
}

int kl_ze_describe(char *buf, size_t len) {
  ze_device_handle_t devs[MAX_ZE];
  ze_result_t why = ZE_RESULT_SUCCESS;
  int n = devices(devs, &why);
  buf[0] = 0;
  if (n < 0) {
    snprintf(buf, len, "no Level Zero driver (zeInit: %s, 0x%x; Intel GPUs need Intel's "
             "driver, intel-level-zero-gpu)\n", ze_name(why), (unsigned)why);
    return 0;
  }
  size_t used = 0;
  for (int i = 0; i < n && used < len; i++) {
    ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
    zeDeviceGetProperties(devs[i], &p);
    used += (size_t)snprintf(buf + used, len - used, "  level-zero:%d  %s (not run by kiln "
                             "yet: use its OpenCL driver)\n", i, p.name);
  }
  return n;
}

kiln_status kl_ze_open(const char *spec, kl_err *e) {
  const char *rest = spec + strlen("level-zero");
  long want = 0;
  if (*rest == ':') want = strtol(rest + 1, NULL, 10);
  ze_device_handle_t devs[MAX_ZE];
  ze_result_t why = ZE_RESULT_SUCCESS;
  int n = devices(devs, &why);
  if (n < 0)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "device '%s': no Level Zero driver (zeInit: %s, "
                   "0x%x); Intel GPUs need Intel's driver (intel-level-zero-gpu)", spec,
                   ze_name(why), (unsigned)why);
  if (want >= n)
    return kl_fail(e, KILN_ERR_NOT_FOUND, "device '%s': Level Zero has %d device(s) "
                   "(`kiln info` lists them)", spec, n);
  ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
  zeDeviceGetProperties(devs[want], &p);
  return kl_fail(e, KILN_ERR_UNSUPPORTED, "device '%s' (%s): kiln does not run on Level Zero "
                 "yet; run it through its OpenCL driver (--device opencl)", spec, p.name);
}

#else

int kl_ze_describe(char *buf, size_t len) {
  snprintf(buf, len, "this kiln was built without Level Zero (Debian libze-dev)\n");
  return 0;
}

kiln_status kl_ze_open(const char *spec, kl_err *e) {
  return kl_fail(e, KILN_ERR_UNSUPPORTED, "device '%s': this kiln was built without Level "
                 "Zero (Debian libze-dev)", spec);
}
#endif
