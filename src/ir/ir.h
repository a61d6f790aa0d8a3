/* kiln's graph IR: values (tensors) and nodes referring to them by id.
 *
 * A graph owns everything it points at (names, attributes, constant data unless a
 * value is marked borrowed). Nodes refer to values by index into graph->values, never
 * by pointer, so the arrays may grow and graphs can be copied and compacted cheaply.
 * An absent optional input is the id KL_ABSENT.
 */
#ifndef KL_IR_H
#define KL_IR_H

#include "kiln.h"
#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define KL_MAX_RANK 8
#define KL_ABSENT (-1)

/* ---- dtypes (values are ONNX TensorProto.DataType numbers, as kiln_dtype) ---- */
typedef enum kl_dtype {
  KL_UNDEFINED = 0,
  KL_F32 = 1,
  KL_U8 = 2,
  KL_I8 = 3,
  KL_U16 = 4,
  KL_I16 = 5,
  KL_I32 = 6,
  KL_I64 = 7,
  KL_STRING = 8, /* recognised so that errors can name it; never runnable */
  KL_BOOL = 9,
  KL_F16 = 10,
  KL_F64 = 11,
  KL_U32 = 12,
  KL_U64 = 13,
  KL_BF16 = 16,
  /* 8-bit floats (storage and conversion types: Cast, CastLike, QuantizeLinear,
   * DequantizeLinear and data movement; no arithmetic) */
  KL_F8E4M3FN = 17,   /* 1-4-3, bias 7, no inf, NaN S.1111.111, max 448 */
  KL_F8E4M3FNUZ = 18, /* 1-4-3, bias 8, no inf, no -0, NaN 0x80, max 240 */
  KL_F8E5M2 = 19,     /* 1-5-2, bias 15, IEEE-like: inf and NaN, max 57344 */
  KL_F8E5M2FNUZ = 20, /* 1-5-2, bias 16, no inf, no -0, NaN 0x80, max 57344 */
  KL_F8E8M0 = 24,     /* 2^(b-127), no sign, NaN 0xff */
  /* Sub-byte types: packed in files (TensorProto: two or four per byte, the first
   * element in the lowest bits), one element per byte in memory as ml_dtypes holds them
   * (signed ones sign-extended, float4e2m1 as its 4-bit code); kl_dtype_file_bits. */
  KL_U4 = 21,
  KL_I4 = 22,
  KL_F4E2M1 = 23, /* 1-2-1, bias 1, no inf or NaN, max 6 */
  KL_U2 = 25,
  KL_I2 = 26,
} kl_dtype;

size_t kl_dtype_size(kl_dtype t);       /* 0 for undefined/unsupported */
const char *kl_dtype_name(kl_dtype t);  /* "float32", ... */
bool kl_dtype_is_float(kl_dtype t);     /* f16, bf16, f32, f64 */
bool kl_dtype_is_int(kl_dtype t);       /* signed and unsigned integers, not bool */
bool kl_dtype_valid(int t);             /* a dtype kiln can store */
bool kl_dtype_is_f8(kl_dtype t);        /* the small floats: the float8s and float4e2m1 */
/* Bits per element in a TensorProto: 4 or 2 for the packed types, else 8 * size. */
int kl_dtype_file_bits(kl_dtype t);
/* Bytes of n elements of t in a TensorProto (packed types rounded up to a byte). */
size_t kl_dtype_file_bytes(kl_dtype t, size_t n);
/* Packs n elements held one per byte into file form, and back (signed sub-byte types
 * sign-extended); other dtypes are not packed (these copy nothing: callers check). */
/* Stores v wrapped to the width of int4/uint4/int2/uint2 (two's complement, as
 * NumPy and ml_dtypes wrap), one element per byte. */
void kl_store_small_int(void *data, kl_dtype t, size_t i, int64_t v);
/* The first of n elements (one per byte) that is not a value of sub-byte type t (an
 * int4 byte that is not a sign-extended 4-bit number, ...), or n when all are. */
size_t kl_dtype_find_bad_small(kl_dtype t, const uint8_t *data, size_t n);
void kl_dtype_pack(kl_dtype t, const uint8_t *in, size_t n, uint8_t *out);
void kl_dtype_unpack(kl_dtype t, const uint8_t *in, size_t n, uint8_t *out);
/* The 8-bit floats. kl_f8_to_f32 is exact. kl_f32_to_f8 rounds to nearest even; with
 * saturate a value beyond the largest finite one (inf included) becomes that value,
 * without it it becomes inf (e5m2) or NaN (the others), as ONNX's Cast defines. For
 * e8m0 it rounds up (ONNX's default round_mode); kl_f32_to_e8m0 takes the mode. */
float kl_f8_to_f32(uint8_t b, kl_dtype t);
uint8_t kl_f32_to_f8(float f, kl_dtype t, bool saturate);
typedef enum kl_round_mode { KL_ROUND_UP, KL_ROUND_DOWN, KL_ROUND_NEAREST } kl_round_mode;
uint8_t kl_f32_to_e8m0(float f, bool saturate, kl_round_mode mode);
float kl_f16_to_f32(uint16_t h);
uint16_t kl_f32_to_f16(float f);
float kl_bf16_to_f32(uint16_t h);
uint16_t kl_f32_to_bf16(float f); /* round to nearest even, NaN kept */
/* Element i of a buffer of type t, converted to double / int64 (for shape data and
 * reference kernels that work in one precision). */
double kl_load_f64(const void *data, kl_dtype t, size_t i);
int64_t kl_load_i64(const void *data, kl_dtype t, size_t i);
void kl_store_f64(void *data, kl_dtype t, size_t i, double v);

/* ---- types: dtype + shape, each dim known or symbolic ---- */
typedef struct kl_dim {
  int64_t size; /* >= 0 known; -1 unknown */
  int32_t sym;  /* when size < 0: index into graph->symbols, or -1 for anonymous */
} kl_dim;

typedef struct kl_type {
  kl_dtype dtype; /* KL_UNDEFINED when not known yet */
  int rank;       /* -1 when not known */
  kl_dim dims[KL_MAX_RANK];
  /* A sequence of tensors (seq), or an optional value that may hold none (opt), or an
   * optional sequence (both): dtype, rank and dims then describe the elements (the dims
   * those of every element, where they all agree). Only the sequence and optional ops,
   * Identity and the control ops take them (kl_op_takes_sequences). */
  bool seq, opt;
} kl_type;

bool kl_type_is_concrete(const kl_type *t); /* dtype, rank and every dim known */
/* Whether a and b have the same rank and dims: each known and equal, or unknown and
 * named by one symbol (a batch), so equal whatever the run binds. */
bool kl_type_same_dims(const kl_type *a, const kl_type *b);
/* The largest product of a tensor's dims with its empty (0) dims counted as 1: every
 * stride of such a tensor, in elements and in bytes of any dtype, fits in int64. An
 * empty tensor with huge other dims ([0, 2^62, 4]: 0 elements) would overflow them. */
#define KL_MAX_EXTENT (INT64_C(1) << 59)
/* The most attention heads an op may have: kernels loop over them, empty or not. */
#define KL_MAX_HEADS (INT64_C(1) << 20)
/* *numel = the product of rank dims (>= 0) when they fit: no dim negative and, with
 * zeros counted as 1, a product of at most KL_MAX_EXTENT; false otherwise. */
bool kl_dims_fit(int rank, const int64_t *dims, int64_t *numel);
/* Product of dims, as kl_dims_fit; false if unknown or not fitting. */
bool kl_type_numel(const kl_type *t, int64_t *numel);
void kl_type_set_shape(kl_type *t, int rank, const int64_t *dims);
/* t, a type of graph `from`, as a type of graph `to`: its symbols entered in `to` by name
 * (one that cannot be, out of memory, becomes an anonymous unknown dim). */
struct kl_graph;
kl_type kl_type_translate(struct kl_graph *to, const struct kl_graph *from, const kl_type *t);
bool kl_dim_equal(kl_dim a, kl_dim b); /* same known size, or same symbol */

/* A concrete tensor: what kernels see. data points at numel*size bytes. */
typedef struct kl_tensor {
  kl_dtype dtype;
  int rank;
  int64_t dims[KL_MAX_RANK];
  void *data;
} kl_tensor;

int64_t kl_tensor_numel(const kl_tensor *t);
size_t kl_tensor_nbytes(const kl_tensor *t);

/* ---- attributes (kind numbers are ONNX's AttributeType) ---- */
typedef enum kl_attr_kind {
  KL_ATTR_FLOAT = 1,
  KL_ATTR_INT = 2,
  KL_ATTR_STRING = 3,
  KL_ATTR_TENSOR = 4,
  KL_ATTR_GRAPH = 5,
  KL_ATTR_FLOATS = 6,
  KL_ATTR_INTS = 7,
  KL_ATTR_STRINGS = 8,
} kl_attr_kind;

typedef struct kl_attr {
  char *name;
  kl_attr_kind kind;
  int n;          /* element count for the list kinds */
  int64_t i;
  float f;
  char *s;        /* NUL-terminated; string attributes with embedded NULs are refused */
  int64_t *ints;
  float *floats;
  char **strings;
  kl_tensor *t;   /* owned tensor with owned data */
  struct kl_graph *g; /* KL_ATTR_GRAPH: an owned body graph (If, Loop, Scan) */
} kl_attr;

/* ---- values and nodes ---- */
typedef enum kl_value_kind {
  KL_VALUE_INTERMEDIATE = 0,
  KL_VALUE_INPUT = 1,
  KL_VALUE_CONST = 2,
} kl_value_kind;

typedef struct kl_value {
  char *name;
  kl_type type;
  kl_value_kind kind;
  int producer;   /* node index, -1 for inputs, constants and unproduced values */
  void *data;     /* constants: type.dtype elements, in row-major order */
  size_t nbytes;
  bool borrowed;  /* data is not owned by the graph (not freed with it) */
} kl_value;

#include "ir/op.h"

typedef struct kl_node {
  kl_op op;
  char *name;     /* from the source model, "" if it had none */
  char *src;      /* what the source called it ("Conv", "aten::_convolution") */
  int n_in, n_out;
  int *in, *out;  /* value ids; KL_ABSENT for an absent optional input */
  int n_attrs;
  kl_attr *attrs;
} kl_node;

typedef struct kl_graph {
  kl_value *values;
  int n_values, cap_values;
  kl_node *nodes;
  int n_nodes, cap_nodes;
  int *inputs, n_inputs;
  int *outputs, n_outputs;
  char **symbols;
  int n_symbols;
  int64_t opset;  /* default-domain opset of the source model, 0 if not ONNX */
  char *source;   /* file the graph came from, for messages ("<memory>" if none) */
  /* A body of If, Loop or Scan: its last n_outer inputs are the values of the enclosing
   * graph that it reads (its captures), the node's last n_outer inputs in the same
   * order; every body of one node has the same captures. 0 for a model's graph. */
  int n_outer;
  struct kl_strmap *names; /* value name -> id */
  struct kl_uses *uses;    /* the readers of every value, made on demand (graph.c) */
} kl_graph;

kl_graph *kl_graph_new(void);
void kl_graph_free(kl_graph *g);
/* A deep copy of g: its values under the same ids and names (types, kinds, producers,
 * constant data: copied when owned, the same pointer when borrowed, whose owner must
 * then outlive the copy too), nodes with their attributes, inputs, outputs, symbols,
 * opset and source. NULL when out of memory. */
kl_graph *kl_graph_copy(const kl_graph *g);

/* ---- the readers of each value ----
 * An index made on the first query and kept while every change of a node's inputs goes
 * through the functions below (and kl_graph_add_node); passes' queries (rewrite.c) then
 * cost the readers of one value, not a scan of the graph (quadratic on large graphs:
 * 47 s for 40,000 Adds). Renumbering (toposort, compact) and the pass manager between
 * passes forget it. Code that writes node inputs directly must reset it first. */
/* The nodes reading v, one entry per input slot, ascending; *count of them. NULL when
 * there is no index and none can be made (out of memory): the caller scans. */
const int *kl_graph_readers(const kl_graph *g, int v, int *count);
void kl_graph_uses_reset(const kl_graph *g);
/* Sets input `slot` (< n_in) of node n to v (KL_ABSENT allowed), keeping the index. */
void kl_graph_set_input(kl_graph *g, int n, int slot, int v);
/* Around a change of node n's whole input list: false drops its slots from the index,
 * true enters those it has now. */
void kl_graph_uses_node(kl_graph *g, int n, bool enter);
/* KILN_ERR_INTERNAL when the index (if made) differs from the graph's inputs. */
kiln_status kl_graph_uses_check(const kl_graph *g, kl_err *e);
kiln_status kl_graph_set_source(kl_graph *g, const char *source, kl_err *e);

/* Add a value with a unique name (NULL or "" makes a fresh name "_vN"). Returns its id,
 * or -1 with e set (duplicate name, out of memory). */
int kl_graph_add_value(kl_graph *g, const char *name, kl_err *e);
/* Add a constant; the graph takes ownership of data unless borrowed is true. On
 * failure data is freed (when owned) and -1 returned. */
int kl_graph_add_const(kl_graph *g, const char *name, kl_dtype dtype, int rank,
                       const int64_t *dims, void *data, size_t nbytes, bool borrowed,
                       kl_err *e);
/* Id of the value with that name, or -1. */
int kl_graph_find_value(const kl_graph *g, const char *name);
/* Add a node; in/out ids are copied. Returns the node index or -1. */
int kl_graph_add_node(kl_graph *g, kl_op op, const char *name, int n_in, const int *in,
                      int n_out, const int *out, kl_err *e);
/* Removes the graph's last node (one just added and found not needed: a detached one,
 * or any whose outputs nothing reads yet). */
void kl_graph_pop_node(kl_graph *g);
kiln_status kl_graph_add_input(kl_graph *g, int value, kl_err *e);
kiln_status kl_graph_add_output(kl_graph *g, int value, kl_err *e);
/* Index of a symbol name, added if new; -1 on out of memory. */
int kl_graph_symbol(kl_graph *g, const char *name);

/* Attributes: setters copy their arguments; a second set of the same name replaces. */
kiln_status kl_node_set_int(kl_graph *g, int node, const char *name, int64_t v, kl_err *e);
kiln_status kl_node_set_float(kl_graph *g, int node, const char *name, float v, kl_err *e);
kiln_status kl_node_set_string(kl_graph *g, int node, const char *name, const char *v,
                               kl_err *e);
kiln_status kl_node_set_ints(kl_graph *g, int node, const char *name, const int64_t *v,
                             int n, kl_err *e);
kiln_status kl_node_set_floats(kl_graph *g, int node, const char *name, const float *v,
                               int n, kl_err *e);
kiln_status kl_node_set_strings(kl_graph *g, int node, const char *name,
                                const char *const *v, int n, kl_err *e);
/* Takes ownership of t (and t->data) on success and on failure. */
kiln_status kl_node_set_tensor(kl_graph *g, int node, const char *name, kl_tensor *t,
                               kl_err *e);
/* Takes ownership of a fully built attribute (used by importers). */
kiln_status kl_node_take_attr(kl_graph *g, int node, kl_attr *a, kl_err *e);
void kl_attr_clear(kl_attr *a);

const kl_attr *kl_node_attr(const kl_node *n, const char *name);
/* The steps (multiply-adds, element visits) node n's reference kernel takes for these
 * inputs and outputs (only their shapes are read; NULL for absent ones), as a double
 * (it may be far past int64): work.c. */
double kl_node_work(const kl_node *n, int n_in, const kl_tensor *const *in, int n_out,
                    const kl_tensor *const *out);
/* Who takes a node's steps, for what each costs (kl_work_weight). */
typedef enum kl_work_kernel {
  KL_WORK_UNIT,   /* a device's kernel, or a node that runs none of its own (If, Loop,
                     the sequence ops): each step counts 1 */
  KL_WORK_REF,    /* kiln's portable reference kernel */
  KL_WORK_GENERIC, /* oneDNN or kiln's optimized kernels at the generic level */
  KL_WORK_AVX2,   /* ... at the avx2 level */
  KL_WORK_AVX512  /* ... at the AVX-512 levels (avx512, avx512_bf16, amx) */
} kl_work_kernel;
/* What one of node n's steps (kl_node_work's count) costs when a kernel of class
 * `kernel` runs it on these inputs (only shapes and attributes are read), in units of
 * a multiply-add of a large float32 product on one AVX-512 core, about
 * KL_WORK_UNIT_NS: 1 for such a product, thousands for some scalar loops
 * (work_weight.c). Steps times weight is what a node counts against max_work. */
double kl_work_weight(const kl_node *n, int n_in, const kl_tensor *const *in,
                      kl_work_kernel kernel);
#define KL_WORK_UNIT_NS 0.0125

/* ---- running a node on constants while loading and optimizing (fold.c) ---- */
#define KL_FOLD_MAX_IO 64 /* wider nodes (a Concat of hundreds) are not run */
/* False for ops whose result is random (RandomNormal, Bernoulli, ...), for control flow
 * (its bodies may draw random numbers) and for ops that write their inputs. */
bool kl_node_deterministic(kl_op op);
/* Whether node n can be run now: deterministic, at least one input, every present
 * input a constant (the input of a Shape or Size: of concrete type), every output
 * present, at most KL_FOLD_MAX_IO inputs and outputs. */
bool kl_node_inputs_known(const kl_graph *g, const kl_node *n);
/* Runs node i (kl_node_inputs_known) by its reference kernel: when its outputs are
 * concrete, of limit bytes in all or less (or, with within_inputs, no larger than its
 * constant inputs), and its work is bounded, they become constants and the node is
 * detached (no inputs, no outputs; compaction frees it): *folded. A kernel that fails
 * leaves the node as it was; only running out of memory is an error. */
kiln_status kl_node_fold(kl_graph *g, int i, int64_t limit, bool within_inputs,
                         bool *folded, kl_err *e);
int64_t kl_attr_int(const kl_node *n, const char *name, int64_t dflt);
float kl_attr_float(const kl_node *n, const char *name, float dflt);
/* KILN_OK unless a is of another kind than kiln reads an attribute of its name as
 * (then an error naming the node, described by `node`, the attribute, and both kinds). */
kiln_status kl_attr_kind_check(const kl_attr *a, const char *node, kl_err *e);
const char *kl_attr_string(const kl_node *n, const char *name, const char *dflt);
/* List attribute: returns count (or -1 if absent) and sets *v. */
int kl_attr_ints(const kl_node *n, const char *name, const int64_t **v);
int kl_attr_floats(const kl_node *n, const char *name, const float **v);

/* ---- control flow (If, Loop, Scan) ----
 * A control node's bodies are graph attributes ("then_branch" and "else_branch" of If,
 * "body" of Loop and Scan). The node's inputs are its formal ones (If: cond; Loop: M,
 * cond, the loop-carried values; Scan: the states, then the scanned inputs) followed by
 * the bodies' captures (kl_graph.n_outer). */
bool kl_op_is_control(kl_op op);
/* Ops whose inputs may be sequences or optionals: the sequence and optional ops,
 * Identity and If, Loop, Scan; every other op takes tensors (kl_graph_infer checks). */
bool kl_op_takes_sequences(kl_op op);
/* The body graph attribute `name` of n, or NULL. */
struct kl_graph *kl_node_body(const kl_node *n, const char *name);
/* The node's first body (then_branch for If), or NULL. */
struct kl_graph *kl_node_first_body(const kl_node *n);
/* The node's inputs before its captures. */
int kl_control_formal_inputs(const kl_node *n);
/* Scan's scan_input_axes/directions (n_in entries) and scan_output_axes/directions
 * (n_out), each 0 by default, the directions checked to be 0 or 1 (infer_control.c). */
kiln_status kl_scan_layout(const kl_node *n, int n_in, int n_out, int64_t *in_axes,
                           int64_t *in_dirs, int64_t *out_axes, int64_t *out_dirs, kl_err *e);

/* Number of input slots actually given (trailing absent inputs not counted). */
int kl_node_input_count(const kl_node *n);
/* "node 'name' (Op)" for messages, into buf. */
const char *kl_node_describe(const kl_graph *g, const kl_node *n, char *buf, size_t len);

/* ---- whole-graph operations ---- */
/* Order nodes so every producer comes before its consumers; a cycle is an error naming
 * a node on it. */
kiln_status kl_graph_toposort(kl_graph *g, kl_err *e);
/* Fill in every value's type from the graph inputs and constants (symbolic dims kept).
 * Types already declared (value_info, outputs) are checked against what is inferred. */
kiln_status kl_graph_infer(kl_graph *g, kl_err *e);
/* Acyclic (nodes in topological order), one producer per value, ids in range, arity
 * within the op's limits, inputs/outputs/constants well formed, types consistent. */
kiln_status kl_graph_verify(const kl_graph *g, kl_err *e);
/* Remove nodes whose outputs nobody uses and values nobody refers to; renumbers. */
kiln_status kl_graph_compact(kl_graph *g, kl_err *e);
/* Readable text form: inputs, outputs, constants (summarised), nodes with shapes. */
void kl_graph_dump(const kl_graph *g, FILE *out);
void kl_type_format(const kl_graph *g, const kl_type *t, char *buf, size_t len);

#endif
