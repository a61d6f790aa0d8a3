/* Geometry of ConvTranspose, shared by its shape inference (infer_convq.c) and its
 * reference kernel (backends/cpu/ref/convq.c), so the two can never disagree about
 * the output size or the pads that output_shape and auto_pad imply. */
#ifndef KL_INFER_CONVQ_H
#define KL_INFER_CONVQ_H

#include "ir/infer_common.h"

/* A transposed convolution over n spatial dims. Output position o and kernel tap k
 * meet input position i where i * stride = o + pad_begin - k * dilation. */
typedef struct kl_convt {
  kl_window w;                   /* kernel, strides, dilations, pads, auto_pad */
  int64_t out_pad[KL_MAX_RANK];  /* output_padding */
  bool has_out_shape;
  int64_t out_shape[KL_MAX_RANK]; /* output_shape's spatial sizes when given */
} kl_convt;

/* Reads the node's attributes (auto_pad, kernel_shape, strides, dilations, pads,
 * output_padding, output_shape); kernel gives the weight's spatial dims (-1 where not
 * known). Checks list lengths and ranges. */
kiln_status kl_convt_init(const kl_node *node, int n, const int64_t *kernel, kl_convt *t,
                          kl_err *e);
/* Output size of spatial dim i for an input of size `in` (-1 when not known, which
 * gives -1 unless output_shape fixes it). Sets pad_begin/pad_end of dim i when the size
 * comes from output_shape or auto_pad. Fails when the output would be empty. */
kiln_status kl_convt_out(kl_convt *t, int i, int64_t in, int64_t *out, kl_err *e);

/* MaxUnpool's default output: spatial dim i is (in[i] - 1) * stride - pads + kernel,
 * the size MaxPool's input had (-1 where in[i] is not known). The indices of input I
 * point into a tensor of this shape even when output_shape asks for a larger one. */
kiln_status kl_unpool_dims(const kl_node *node, int n, const int64_t *in, int64_t *out,
                           kl_err *e);

#endif
