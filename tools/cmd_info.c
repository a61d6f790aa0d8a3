/* kiln info: version and build features. */
#include "backends/cpu/isa.h"
#include "backends/gpu/level_zero.h"
#include "backends/gpu/opencl.h"
#include "cli.h"
#include "kl_config.h"

#include <stdio.h>
#include <string.h>

int cmd_info(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: kiln info [--levels]\nPrints kiln's version, build features and "
           "supported ops.\n  --levels   print only the ISA levels this CPU supports, one "
           "per line,\n             lowest first (the values KILN_ISA takes here)\n");
    return EXIT_OK;
  }
  if (argc == 2 && strcmp(argv[1], "--levels") == 0) {
    kl_isa top = kl_isa_supported(kl_isa_features());
    for (int l = KL_ISA_GENERIC; l <= (int)top; l++) printf("%s\n", kl_isa_level_name((kl_isa)l));
    return EXIT_OK;
  }
  if (argc > 1) {
    fprintf(stderr, "kiln info: unexpected argument '%s'\n", argv[1]);
    return EXIT_USAGE;
  }
  printf("kiln %s\n", kiln_version());
  printf("build: oneDNN %s, OpenMP %s, OpenCL %s, Level Zero %s\n", KL_HAVE_DNNL ? "yes" : "no",
         KL_HAVE_OPENMP ? "yes" : "no", KL_HAVE_OPENCL ? "yes" : "no",
         KL_HAVE_LEVEL_ZERO ? "yes" : "no");
  const kl_cpu_features *f = kl_isa_features();
  char features[512];
  printf("cpu: %s (%s)\n", f->brand[0] ? f->brand : "unknown", f->vendor[0] ? f->vendor : "-");
  printf("cpu features: %s\n", kl_isa_feature_list(f, features, sizeof features));
  printf("isa: %s\n", kl_isa_reason()); /* kiln's own kernels; KILN_ISA lowers it */
  char devs[4096];
  int n_devs = kl_cl_describe(devs, sizeof devs);
  printf("opencl devices (%d; --device opencl:P.D):%s%s", n_devs, n_devs ? "\n" : " ", devs);
  n_devs = kl_ze_describe(devs, sizeof devs);
  printf("level zero devices (%d):%s%s", n_devs, n_devs ? "\n" : " ", devs);
  printf("ops (%d):", KL_OP_COUNT);
  for (int i = 0; i < KL_OP_COUNT; i++) {
    const kl_op_info *op = kl_op_get((kl_op)i);
    printf("%s%s%s%s", i % 8 ? " " : "\n  ", op->domain[0] ? op->domain : "",
           op->domain[0] ? "." : "", op->name);
  }
  printf("\n");
  return EXIT_OK;
}
