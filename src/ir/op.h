/* The op table: one line per op in ops.def (X-macro), everything else generated. */
#ifndef KL_OP_H
#define KL_OP_H

#include <stdbool.h>

typedef enum kl_op {
#define KL_OP(id, name, domain, min_in, max_in, min_out, max_out, infer, kernel, attrs) \
  KL_OP_##id,
#include "ir/ops.def"
#undef KL_OP
  KL_OP_COUNT
} kl_op;

struct kl_graph;
struct kl_node;
struct kl_type;
struct kl_tensor;
struct kl_err;

/* Shape and dtype inference for one node. in[i] is NULL for an absent input; data[i]
 * is the input's contents when known (a constant while loading, the actual data at run
 * time), else NULL. The function fills out[0..n_out-1]. At load time dims may be
 * symbolic or unknown and the function must do its best (unknown rank is allowed);
 * at run time every input is concrete and so must every output be. */
typedef struct kl_infer_ctx {
  struct kl_graph *g;
  const struct kl_node *node;
  int n_in, n_out;
  const struct kl_type *const *in;
  const void *const *data;
  struct kl_type *out;
  struct kl_err *e;
  /* a session's run: every output shape must come out concrete, whatever computing a
   * data-dependent one costs (the session bounded the node's work first); false at
   * load, where such an op leaves its shape unknown when it would take long */
  bool at_run;
} kl_infer_ctx;
typedef int (*kl_infer_fn)(kl_infer_ctx *ctx); /* returns a kiln_status */

/* A kernel: inputs and outputs are concrete (outputs already shaped and allocated). */
typedef struct kl_kernel_ctx {
  const struct kl_node *node;
  int n_in, n_out;
  const struct kl_tensor *const *in; /* NULL for absent inputs */
  struct kl_tensor *const *out;
  struct kl_err *e;
  int threads;
  void **state; /* per-node, per-session kernel state (see backends/backend.h); the
                   reference kernels and constant folding leave it NULL */
  /* For an optimized kernel that may hand a run's shapes to the reference kernel
   * (kl_isa_ref_allowed): the session's max_work, 0 where no such bound applies (no
   * bound, the reference kernel itself, constant folding) */
  int64_t max_work;
} kl_kernel_ctx;
typedef int (*kl_kernel_fn)(kl_kernel_ctx *ctx); /* returns a kiln_status */

#define KL_DOMAIN_ONNX ""
#define KL_DOMAIN_KILN "kiln"
#define KL_ARITY_ANY 1000

typedef struct kl_op_info {
  const char *name;
  const char *domain;
  int min_in, max_in, min_out, max_out;
  kl_infer_fn infer;
  kl_kernel_fn ref; /* portable reference kernel, the oracle */
  const char *attrs; /* every attribute name it may carry, space-separated (ops.def) */
} kl_op_info;

const kl_op_info *kl_op_get(kl_op op);
const char *kl_op_name(kl_op op);
/* KL_OP_COUNT when unknown. domain "" and "ai.onnx" are the same. */
kl_op kl_op_lookup(const char *domain, const char *name);
/* Whether name is one of the op's attributes (kl_op_info.attrs). */
bool kl_op_takes_attr(kl_op op, const char *name);

#endif
