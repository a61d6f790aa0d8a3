/* Helpers that graph rewrites share, so that each pass reads as its pattern.
 *
 * Conventions for a pass: it walks the nodes, rewires them in place and removes what it
 * replaced with kl_rw_remove, which only detaches a node; kl_rw_finish then sorts and
 * compacts the graph, freeing what was detached and whatever no node reads any more.
 * Graph inputs and outputs are the API: a rewrite never renames or drops one, so a
 * fused node takes over the value of the last node it replaces (kl_rw_take_output).
 * Queries of a value's readers read the graph's readers index (ir.h), kept as inputs
 * change: a pass changes node inputs only through these helpers or kl_graph_set_input,
 * never by writing n->in (the pass manager checks the index after every pass when it
 * verifies).
 */
#ifndef KL_REWRITE_H
#define KL_REWRITE_H

#include "passes/pass.h"

/* ---- queries ---- */

/* Input slots over all nodes that read v, plus one when v is a graph output. */
int kl_rw_uses(const kl_graph *g, int v);
bool kl_rw_is_output(const kl_graph *g, int v);
/* The node that is v's only reader (one slot, v not a graph output), or -1. */
int kl_rw_sole_consumer(const kl_graph *g, int v);
/* Up to max nodes reading v, each once, in node order; returns how many there are. */
int kl_rw_consumers(const kl_graph *g, int v, int *nodes, int max);
/* The node producing v, or -1 (inputs, constants, absent). */
int kl_rw_producer(const kl_graph *g, int v);
/* The node producing input k of node n when it is of op `op`, else -1. */
int kl_rw_input_op(const kl_graph *g, int n, int k, kl_op op);
/* The constant value v, or NULL when v is absent or not a constant. */
const kl_value *kl_rw_const(const kl_graph *g, int v);
/* A constant of one element (any rank) of a float or integer dtype, as a double. */
bool kl_rw_scalar(const kl_graph *g, int v, double *x);
/* True when v is a constant scalar within a relative 1e-4 of want (exported models
 * write constants such as 1/sqrt(2) at various precisions). */
bool kl_rw_scalar_near(const kl_graph *g, int v, double want);
/* Two types whose shapes are known to be equal: same rank, every dim the same size or
 * the same symbol. */
bool kl_rw_same_shape(const kl_type *a, const kl_type *b);
/* small broadcasts to big without enlarging it, as far as is known statically: same
 * dtype, rank not larger, every dim 1 or equal to big's (right-aligned). */
bool kl_rw_fits(const kl_type *small, const kl_type *big);
/* The other input of a two-input node: input 1 when v is input 0 and the reverse;
 * -1 when v is neither. */
int kl_rw_other_input(const kl_node *n, int v);
/* Elements of a constant as doubles, broadcast along one axis: c must be a constant
 * that, right-aligned with a tensor of rank `rank`, has size 1 on every axis except
 * `axis`, where it has size len or 1. Fills out[0..len-1]; false when c is not such a
 * constant (or not of a float dtype). */
bool kl_rw_per_axis(const kl_graph *g, int c, int rank, int axis, int64_t len,
                    double *out);

/* False for ops whose result is random (RandomNormal, Bernoulli, ...): such nodes are
 * never folded or merged. */
bool kl_rw_deterministic(kl_op op);

/* ---- edits ---- */

/* Every node input reading old reads repl instead (graph outputs are left alone);
 * returns how many inputs changed. */
int kl_rw_replace_uses(kl_graph *g, int old, int repl);
/* Detach node n (no inputs, no outputs); kl_rw_finish frees it. */
void kl_rw_remove(kl_graph *g, int n);
/* Node n writes value v into output slot `slot` (the node that produced v before has
 * been removed); its old output there is left for compaction. */
void kl_rw_take_output(kl_graph *g, int n, int slot, int v);
/* Remove node n, which computes `out` as an exact copy of `in`: readers of out read in.
 * When out is a graph output the copy moves upstream instead (in's producer writes out
 * directly). Returns false, changing nothing, when neither is possible (out is a graph
 * output and in is a graph input, a constant or another graph output). */
bool kl_rw_bypass(kl_graph *g, int n, int in, int out);
/* Constant integer values of v (1-D int64 or int32, at most 4), or false. */
bool kl_rw_const_ints(const kl_graph *g, int v, int64_t *out, int *n);
/* The global pooling that node n computes when it is a ReduceMean or ReduceMax of a
 * rank-4 input over its two spatial axes with keepdims (torch.export's adaptive pooling
 * to 1x1): GlobalAveragePool or GlobalMaxPool, else KL_OP_COUNT. */
kl_op kl_rw_global_pool_of(const kl_graph *g, const kl_node *n);
/* Whether an operand of type v takes kiln's 8-bit Add/Mul kernels against output type
 * y (fold_qdq.c; kiln quantize asks the same): y's shape (each dim the same known size
 * or the same symbol, such as a model's batch), or y's over its leading dims and 1 over
 * the rest (a per-channel scale [N, C, 1, 1] of [N, C, H, W]); *full says which. */
bool kl_rw_qbinary_fits(const kl_type *v, const kl_type *y, bool *full);
/* Node n reads v in input slot `slot`, absent slots added before it as needed. */
kiln_status kl_rw_set_input(kl_graph *g, int n, int slot, int v, kl_err *e);
/* Switch node n to op, keeping its inputs, outputs and attributes. */
void kl_rw_set_op(kl_graph *g, int n, kl_op op);
/* Drop every attribute of node n (an op whose new form takes none of the old ones). */
void kl_rw_drop_attrs(kl_graph *g, int n);
/* A new constant named after hint ("<hint>", "<hint>_1", ...); takes ownership of data
 * (numel(dims) elements of dtype) on success and on failure. Returns the id or -1. */
int kl_rw_add_const(kl_graph *g, const char *hint, kl_dtype dtype, int rank,
                    const int64_t *dims, void *data, kl_err *e);
/* A constant holding vals[0..n-1] as a 1-D tensor of dtype (a float type), or of the
 * given rank with every dim but the last 1. */
int kl_rw_add_vector(kl_graph *g, const char *hint, kl_dtype dtype, int rank,
                     const double *vals, int64_t n, kl_err *e);
/* Replace node n by a node of another op in place (a pattern's last node becomes the
 * fused op): op and src set, attributes dropped, inputs set to ids[0..count-1]. */
kiln_status kl_rw_become(kl_graph *g, int n, kl_op op, int count, const int *ids, kl_err *e);
/* Append an output slot holding v to node n (whose producer has been removed). */
kiln_status kl_rw_add_output(kl_graph *g, int n, int v, kl_err *e);
/* A BatchNormalization in inference with constant parameters of `count` values each
 * (scale, B, mean, var) as y = x * s[c] + t[c]: s = scale / sqrt(var + eps), t = B -
 * mean * s; false for any other node. */
bool kl_rw_bn_affine(const kl_graph *g, const kl_node *bn, int64_t count, double *s,
                     double *t);
/* End a pass: when it changed the graph, sort it and drop detached nodes and unread
 * values. */
kiln_status kl_rw_finish(kl_graph *g, bool changed, kl_err *e);

#endif
