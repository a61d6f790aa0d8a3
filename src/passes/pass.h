/* The pass manager: named graph rewrites, each enabled from an optimization level. */
#ifndef KL_PASS_H
#define KL_PASS_H

#include "ir/ir.h"

typedef struct kl_pass_config {
  int level;          /* 0..3 */
  const char *passes; /* "+name,-name": force single passes on or off; may be NULL */
  bool verify;        /* verify the graph after every pass that changed it */
  int64_t fold_limit; /* constant folding: largest result in bytes (0 = default) */
  bool native_nhwc;   /* the backend runs channels-last convolutions and pooling
                         natively (oneDNN): the layout pass runs by level only then
                         (--passes +layout forces it on) */
  int int8_weight_bits; /* fold_qdq: the backend's int8 convolution is exact for weights
                           of this many bits (7: within [-64, 64], AVX2 without VNNI,
                           whose pairs of products saturate at int16); 0 or 8: any */
} kl_pass_config;

typedef struct kl_pass {
  const char *name;
  int min_level;
  const char *what; /* one line for `kiln inspect --stats` and docs */
  /* adds to *changed the number of rewrites it made (0: the graph is unchanged) */
  kiln_status (*run)(kl_graph *g, const kl_pass_config *cfg, int *changed, kl_err *e);
} kl_pass;

#define KL_MAX_PASSES 64

typedef struct kl_pass_stats {
  int n_passes;
  const char *name[KL_MAX_PASSES];
  int fired[KL_MAX_PASSES]; /* how many rewrites each pass made (nodes removed, for dce) */
  int nodes_before, nodes_after;
  int ops_before[KL_OP_COUNT], ops_after[KL_OP_COUNT];
} kl_pass_stats;

/* All passes in the order they run. */
const kl_pass *kl_passes(int *count);
/* Run the passes for cfg->level until nothing changes; stats may be NULL. An unknown
 * name in cfg->passes is KILN_ERR_INVALID_ARGUMENT. */
kiln_status kl_optimize(kl_graph *g, const kl_pass_config *cfg, kl_pass_stats *stats,
                        kl_err *e);

#endif
