/* Channels-last ("NHWC") forms of the ops oneDNN runs, made by the O3 layout pass
 * (src/passes/layout.c) and nothing else:
 *
 *   kiln.FusedConv / kiln.FusedConvTranspose with channels_last=1
 *   kiln.NhwcMaxPool, kiln.NhwcAveragePool, kiln.NhwcGlobalAveragePool,
 *   kiln.NhwcGlobalMaxPool (the attributes of the ONNX op of the same name)
 *
 * Such a node computes its base op on 2-D images whose activations (input X, the Sum
 * of a fused convolution, output Y) are tensors [N, H, W, C] instead of [N, C, H, W];
 * the weights, the bias and every attribute keep their ONNX meaning. A Sum of lower
 * rank broadcasts against [N, H, W, C] (right-aligned). A fused convolution with
 * nchw_input=1 reads X as [N, C, H, W] (Sum and Y stay channels-last): the first
 * convolution of a network, on the graph's image. Shape inference and the
 * reference kernels transpose to the ONNX layout around the base op's own, so both
 * agree with the base op by construction; oneDNN reads and writes the tensors in
 * place through channels-last memory descriptors.
 */
#ifndef KL_LAYOUT_H
#define KL_LAYOUT_H

#include "ir/ir.h"

/* Whether node n computes in the channels-last form. */
bool kl_layout_nhwc(const kl_node *n);
/* The ONNX op of a kiln.Nhwc* op (MaxPool for NhwcMaxPool ...), else KL_OP_COUNT. */
kl_op kl_layout_base(kl_op op);
/* The kiln.Nhwc* op of a pooling op, else KL_OP_COUNT. */
kl_op kl_layout_nhwc_of(kl_op base);
/* Slot k of a channels-last node holds a channels-last activation (X unless
 * nchw_input=1, or Sum of a convolution). */
bool kl_layout_activation_slot(const kl_node *n, int k);

/* The permutations between the layouts, as Transpose's perm. */
extern const int64_t kl_layout_to_nhwc[4]; /* [N, C, H, W] -> [N, H, W, C]: 0, 2, 3, 1 */
extern const int64_t kl_layout_to_nchw[4]; /* [N, H, W, C] -> [N, C, H, W]: 0, 3, 1, 2 */

/* dims of rank <= 4 padded in front with 1s to rank 4, then permuted by perm
 * (out[i] = padded[perm[i]]). */
void kl_layout_permute_dims(int rank, const int64_t *dims, const int64_t perm[4],
                            int64_t out[4]);
/* The same for a type of known rank <= 4 (the result has rank 4); a type of unknown
 * rank is copied. */
void kl_layout_permute_type(const kl_type *t, const int64_t perm[4], kl_type *out);
/* Copies src (dims sdims, padded to rank 4 as above, elements of esize bytes) into dst
 * permuted by perm. */
void kl_layout_permute_data(const void *src, int rank, const int64_t *sdims,
                            const int64_t perm[4], size_t esize, void *dst);

/* Inference and reference kernel of a channels-last node from its base op's: X (and
 * Sum) are described to base in the ONNX layout, the output's type or data comes back
 * channels-last. base receives a stand-in node with the base op and n's attributes. */
int kl_layout_infer(kl_infer_ctx *c, kl_infer_fn base);
int kl_layout_ref(kl_kernel_ctx *c, kl_kernel_fn base);

#endif
