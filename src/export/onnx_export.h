/* The ONNX writer: a kiln graph (optimized or not) as an ONNX ModelProto.
 *
 * ONNX ops are written at the newest default-domain opset kiln reads
 * (KL_ONNX_MAX_OPSET), since the IR holds every op in that form; kiln's fused ops are
 * written in the domain "kiln" (opset_import "kiln" version 1), which kiln reads back
 * and other tools show as custom ops (Netron draws them). Constants become
 * initializers with raw_data; every value with a known dtype gets its type (symbols
 * as dim_param), so a reload needs no inference to know its shapes. The result
 * reloads into the same graph: same nodes, names, attributes and constants.
 *
 * Limits: one protobuf message holds at most 2 GiB (no external data is written), and
 * graph-valued attributes, which kiln does not hold, cannot occur.
 */
#ifndef KL_EXPORT_ONNX_H
#define KL_EXPORT_ONNX_H

#include "ir/ir.h"

#define KL_KILN_DOMAIN_VERSION 1

/* Serialize g into a malloc'd buffer (*buf, *len bytes); the caller frees *buf. */
kiln_status kl_onnx_export(const kl_graph *g, void **buf, size_t *len, kl_err *e);
/* Serialize g into the file at path, replacing it. */
kiln_status kl_onnx_export_file(const kl_graph *g, const char *path, kl_err *e);

#endif
