/* RoiAlign's attributes, read and checked once (infer_more.c) for shape inference, the
 * reference kernel and the fast one (isa/run_detect.c). */
#ifndef KL_ROI_ALIGN_H
#define KL_ROI_ALIGN_H

#include "ir/ir.h"

typedef struct kl_roi_align {
  bool max_mode;        /* mode "max" (else "avg") */
  bool half_pixel;      /* coordinate_transformation_mode (else output_half_pixel) */
  int64_t out_h, out_w, sampling_ratio;
  double spatial_scale;
} kl_roi_align;

kiln_status kl_roi_align_init(const kl_node *node, kl_roi_align *r, kl_err *e);

#endif
