/* The ONNX importer: a ModelProto file (or buffer) into kiln's graph IR.
 *
 * What it accepts: IR versions 3..KL_ONNX_MAX_IR, the default ONNX domain ("" or
 * "ai.onnx") at opsets KL_ONNX_MIN_OPSET..KL_ONNX_MAX_OPSET, and kiln's own domain
 * ("kiln"). Nodes of any other domain are refused with the domain named.
 *
 * What it produces: a graph whose ops have the semantics of the newest opset (older
 * forms are rewritten on the way in, see onnx_canon.c), in the node order of the file
 * (kl_graph_toposort puts an out-of-order file right), with:
 *   - initializers and Constant nodes as constant values owning their data;
 *   - graph inputs that are not initializers as inputs. A graph input that is also an
 *     initializer is treated as a constant and not exposed: ONNX (IR >= 4) lets a
 *     caller override such an input, kiln does not;
 *   - the types that inputs, outputs and value_info declare (dim_param -> symbol).
 *
 * Every failure is a kiln_status with a message naming the file, the node (name, op,
 * domain) and what was expected vs found. On failure *out is NULL.
 */
#ifndef KL_IMPORT_ONNX_H
#define KL_IMPORT_ONNX_H

#include "ir/ir.h"

#include <stddef.h>
#include <stdint.h>

#define KL_ONNX_MIN_IR 3     /* opset_import appeared in IR version 3 */
#define KL_ONNX_MAX_IR 14    /* the newest IR version kiln has checked (onnx 1.23: 14 adds only
                                the float6 types, refused by number, and opaque types) */
#define KL_ONNX_MIN_OPSET 7
#define KL_ONNX_MAX_OPSET 27 /* the newest default-domain opset kiln checked (onnx 1.22):
                             24 to 27 changed only types kiln does not store, added ops,
                             or added inputs that the arity check refuses */

typedef struct kl_import_opts {
  int64_t max_tensor_bytes; /* largest tensor a model may hold; <= 0 means the default */
  const char *input_types;  /* TorchScript: the kiln_options "input_types", or NULL */
} kl_import_opts;

#define KL_IMPORT_DEFAULT_MAX_TENSOR_BYTES (INT64_C(16) << 30)

/* Load an ONNX model file. External data is read relative to the file's folder. o may
 * be NULL for the defaults. */
kiln_status kl_onnx_load_file(const char *path, const kl_import_opts *o, kl_graph **out,
                              kl_err *e);

/* Load an ONNX model from a buffer (not kept after the call). dir is the folder that
 * external data is relative to, or NULL: then a model with external data is refused. */
kiln_status kl_onnx_load_memory(const void *buf, size_t len, const char *dir,
                                const kl_import_opts *o, kl_graph **out, kl_err *e);

#endif
