/* Pieces the ONNX importer's files share (onnx.c, onnx_tensor.c, onnx_attr.c,
 * onnx_canon.c) and that tensorfile.c reuses for TensorProto files. */
#ifndef KL_IMPORT_ONNX_INTERNAL_H
#define KL_IMPORT_ONNX_INTERNAL_H

#include "import/onnx.h"
#include "onnx.pb-c.h"

#include <stdbool.h>

#define KL_ONNX_MAX_NAME 4096   /* bytes in any name (value, node, attribute, symbol) */
#define KL_ONNX_MAX_ITEMS (1 << 20) /* nodes, initializers, inputs, outputs per graph */
#define KL_ONNX_MAX_NODE_IO 65536   /* inputs or outputs of one node */
#define KL_ONNX_MAX_ATTRS 1024      /* attributes of one node */
#define KL_ONNX_MAX_DROP 4          /* attributes a canonicalization rule may consume */

/* True when s is valid UTF-8 of at most KL_ONNX_MAX_NAME bytes without control
 * characters (or empty): names end up in messages and dumps, so they must print
 * safely. kl_onnx_name_fault says what is wrong for a message ("is longer than 4096
 * bytes", "is not valid UTF-8 text", "holds a control character", "missing or
 * empty"), NULL when nothing is. */
bool kl_onnx_name_ok(const char *s);
const char *kl_onnx_name_fault(const char *s);

/* A protobuf-c allocator over malloc/free. Unpacking with it makes every decoded
 * bytes field a malloc'd block, which the importer may take over (see
 * kl_onnx_tensor_decode) instead of copying large weights. */
void kl_onnx_allocator_init(ProtobufCAllocator *a);

/* Where a TensorProto's data may come from and how large it may be. */
typedef struct kl_onnx_tensor_src {
  const char *dir;   /* folder external data is relative to; NULL refuses external data */
  int64_t max_bytes; /* the largest tensor accepted (KILN_ERR_LIMIT above it) */
} kl_onnx_tensor_src;

/* A TensorProto's raw_data lifted out of the model's bytes before protobuf-c unpacks
 * them (onnx.c), so that large weights are copied once, straight into the tensor, and
 * never held twice: len bytes at offset of the open file fd when fd >= 0, else of base. */
typedef struct kl_onnx_lifted {
  bool present; /* false: the TensorProto had no raw_data */
  const uint8_t *base;
  int fd;
  uint64_t offset;
  size_t len;
} kl_onnx_lifted;

/* Decode a TensorProto in any storage form (raw_data, the typed fields, external
 * data) into out: dtype, rank, dims and malloc'd data (at least one byte allocated, so
 * that an empty tensor still has a data pointer) holding exactly *nbytes bytes. A
 * raw_data block is moved out of tp rather than copied, so tp must have been unpacked
 * with kl_onnx_allocator_init's allocator. Messages start with what ("initializer
 * 'w'"), or with "tensor 'name'" when what is NULL. */
kiln_status kl_onnx_tensor_decode(Onnx__TensorProto *tp, const kl_onnx_tensor_src *src,
                                  const char *what, kl_tensor *out, size_t *nbytes,
                                  kl_err *e);
/* The same for a TensorProto whose raw_data was lifted out (raw; NULL when none was):
 * raw counts as its raw_data, copied into the tensor's own buffer. */
kiln_status kl_onnx_tensor_decode_lifted(Onnx__TensorProto *tp, const kl_onnx_tensor_src *src,
                                         const char *what, const kl_onnx_lifted *raw,
                                         kl_tensor *out, size_t *nbytes, kl_err *e);

/* "float8e4m3fn" and so on: names for ONNX data types, including those kiln cannot
 * store, for messages. */
const char *kl_onnx_dtype_name(int onnx_type);

/* The importer's state while it builds one graph. */
typedef struct kl_onnx_ctx {
  kl_graph *g;
  kl_err *e;
  kl_onnx_tensor_src ts;
  int64_t opset; /* of the default domain */
  const kl_onnx_lifted *lifted; /* per initializer of the main graph, or NULL */
  size_t n_lifted;
  /* A body of If, Loop or Scan: the graph it is nested in, and the values of that graph
   * the body reads (their ids there), each a body input in this order after its own. */
  struct kl_onnx_ctx *parent;
  int *caps, n_caps, cap_caps;
} kl_onnx_ctx;

/* A node on its way from NodeProto into the graph: resolved value ids (KL_ABSENT for
 * "" names) and the attributes that a canonicalization rule has consumed. */
typedef struct kl_onnx_node {
  const Onnx__NodeProto *np;
  int index;          /* position in the file, for messages about unnamed nodes */
  kl_op op;
  const char *name;   /* "" when the file gives none */
  int n_in, cap_in, n_out;
  int *in, *out;
  const char *drop[KL_ONNX_MAX_DROP]; /* attribute names not to copy */
  int n_drop;
  bool contrib;       /* a com.microsoft op that kl_onnx_contrib_emit lowers */
} kl_onnx_node;

/* Convert one attribute. Unsupported kinds (graphs, sparse tensors, type protos) are
 * KILN_ERR_UNSUPPORTED naming the attribute. out is cleared on failure. */
kiln_status kl_onnx_attr_convert(const Onnx__AttributeProto *ap, const kl_onnx_tensor_src *ts,
                                 kl_attr *out, kl_err *e);
/* The attribute of that name on the node, or NULL. */
const Onnx__AttributeProto *kl_onnx_node_attr(const kl_onnx_node *n, const char *name);

/* Add the node as it stands (op, inputs, outputs, every attribute not dropped) to the
 * graph after checking its arity against the op table and each attribute's name
 * against the op's list (ops.def: one the op does not take is refused, as onnx.checker
 * does). *node gets its index. */
kiln_status kl_onnx_emit(kl_onnx_ctx *c, kl_onnx_node *n, int *node);
/* Make input slot `slot` exist (absent slots in between), growing n->in as needed. */
kiln_status kl_onnx_node_reserve_input(kl_onnx_ctx *c, kl_onnx_node *n, int slot);

/* Rewrite n into the newest form of its op (per the rules in onnx_canon.c) and emit
 * it; nodes with no rule for their op and opset are emitted unchanged. */
kiln_status kl_onnx_canon_emit(kl_onnx_ctx *c, kl_onnx_node *n);
/* The IR op for a default-domain op known only under an older name (Scatter, Upsample),
 * else KL_OP_COUNT; the rules of onnx_canon.c then rewrite its form. */
kl_op kl_onnx_canon_alias(const char *op_type);
/* onnxruntime's quantized contrib ops (domain com.microsoft, what its quantizer writes
 * with QuantFormat.QOperator): whether kiln lowers op_type, and the lowering, each
 * as DequantizeLinear of its inputs, the float op, QuantizeLinear of its output. */
bool kl_onnx_contrib_has(const char *op_type);
kiln_status kl_onnx_contrib_emit(kl_onnx_ctx *c, kl_onnx_node *n);
#define KL_DOMAIN_MS "com.microsoft"

#endif
