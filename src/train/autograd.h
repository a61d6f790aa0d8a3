/* Reverse-mode differentiation over kiln's IR.
 *
 * kl_autograd appends to a graph the nodes that compute the gradient of a scalar value
 * (the loss) with respect to a set of values (the trainable weights): for every node
 * between them, taken in reverse order, the op's gradient rule (rules.c) emits the
 * nodes that turn the gradients of its outputs into those of its inputs; gradients
 * reaching one value from several readers are summed. The new nodes are ordinary IR
 * nodes, ONNX ops where one says it (MatMul, Gemm, Transpose, ReduceSum, Reshape,
 * Split, ...) and kiln's gradient ops where none does (kiln.ConvGradX, kiln.SumTo,
 * ...), so that the same passes, kernels and memory plan run them.
 *
 * A node between a trainable value and the loss whose op has no rule is an error
 * naming the node and the op. */
#ifndef KL_TRAIN_AUTOGRAD_H
#define KL_TRAIN_AUTOGRAD_H

#include "ir/ir.h"

typedef struct kl_ad {
  kl_graph *g;
  kl_err *e;
  int n_fwd;      /* nodes of the forward graph: those before the first added */
  int n_vals;     /* values of the forward graph */
  bool *requires; /* per forward value: depends on a trainable value */
  int *grad;      /* per forward value: the value holding its gradient, -1: none yet */
  int made;       /* values added (for their names) */
} kl_ad;

/* One rule: node n's outputs have the gradients dy[k] (-1 for none, at least one
 * given); it adds those of its inputs with kl_ad_accumulate, for the inputs that
 * kl_ad_wants. */
typedef kiln_status (*kl_grad_rule)(kl_ad *a, int n, const int *dy);

/* The rule of op, or NULL when it has none (rules.c). */
kl_grad_rule kl_grad_rule_of(kl_op op);

/* Differentiate `loss` (a float scalar value of g) with respect to every value v with
 * trainable[v] (per value of g): afterwards grads[v] (per value of g as it was before
 * the call, allocated here, freed by the caller) is the value holding d loss / d v,
 * or -1 when the loss does not depend on v. Types of the new values are inferred. */
kiln_status kl_autograd(kl_graph *g, int loss, const bool *trainable, int **grads, kl_err *e);

/* ---- for the rules ---- */

/* Whether input k of node n needs a gradient. */
bool kl_ad_wants(const kl_ad *a, int n, int k);
/* Adds gradient dv to forward value v (summed with what it has). */
kiln_status kl_ad_accumulate(kl_ad *a, int v, int dv);
/* A new node of op (an ONNX op or one of kiln's: KL_OP_KilnSumTo, ...) reading
 * in[0..n_in-1] with n_out fresh outputs (out[] set when not NULL); returns the node, -1
 * on error. Its name is derived from the forward node fwd's. */
int kl_ad_node(kl_ad *a, int fwd, kl_op op, int n_in, const int *in, int n_out, int *out);
/* Copies every attribute of node `from` to node `to`. */
kiln_status kl_ad_copy_attrs(kl_ad *a, int from, int to);
/* Constants: a float scalar of dtype, a 1-D int64 vector. -1 on error. */
int kl_ad_scalar(kl_ad *a, kl_dtype dtype, double v);
int kl_ad_ints(kl_ad *a, const int64_t *v, int n);

#endif
