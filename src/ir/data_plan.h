/* What the data-movement ops do to each dim (where a Slice starts and how it steps,
 * how far a Pad pads, where a Resize samples), worked out in one place from the op's
 * inputs and attributes. Shape inference (src/ir/infer_data.c, infer_resize.c,
 * infer_generate.c) and the reference kernels (src/backends/cpu/ref/) both call these,
 * so the shape an output gets and the elements a kernel writes cannot disagree.
 *
 * Dims are sizes, -1 where not known (load time); a plan then says -1 wherever the
 * answer depends on what is not known. The kernels call them with concrete dims.
 */
#ifndef KL_DATA_PLAN_H
#define KL_DATA_PLAN_H

#include "ir/ir.h"

/* ---- Slice ---- */

typedef struct kl_slice_plan {
  int64_t start[KL_MAX_RANK]; /* first element taken (clamped into the dim) */
  int64_t step[KL_MAX_RANK];  /* never 0; negative walks backwards */
  int64_t count[KL_MAX_RANK]; /* elements taken; -1 when the dim is not known */
  bool whole[KL_MAX_RANK];    /* the dim is taken whole, in order (its symbol carries) */
} kl_slice_plan;

/* n starts and ends for the dims named by axes (NULL: 0..n-1), stepping by steps
 * (NULL: 1). Axes may be negative; each dim at most once; no step may be 0. */
kiln_status kl_slice_plan_make(int rank, const int64_t *dims, int n, const int64_t *starts,
                               const int64_t *ends, const int64_t *axes,
                               const int64_t *steps, kl_slice_plan *p, kl_err *e);
/* The slice as a strided view of X (element strides xstrides, all counts known): per dim,
 * the stride of Y's index in X (0 where one element is taken, so that a huge step cannot
 * overflow), and the offset of Y's first element. */
void kl_slice_plan_view(const kl_slice_plan *p, int rank, const int64_t *xstrides,
                        int64_t *stride, int64_t *base);

/* ---- Pad ---- */

typedef enum kl_pad_mode { KL_PADMODE_CONSTANT, KL_PADMODE_REFLECT, KL_PADMODE_EDGE,
                           KL_PADMODE_WRAP } kl_pad_mode;

kiln_status kl_pad_mode_read(const kl_node *node, kl_pad_mode *mode, kl_err *e);

/* pads holds 2n values, [begins..., ends...], for the n dims named by axes (NULL: all
 * dims, n == rank). Fills begin/end for every dim (0 where not named). Negative pads
 * crop. */
kiln_status kl_pad_plan_make(int rank, int n, const int64_t *pads, const int64_t *axes,
                             int64_t *begin, int64_t *end, kl_err *e);

/* The input index that output index o of a dim of `len` elements padded by begin and
 * end reads, or -1 for an element of constant padding. Negative pads crop first; the
 * other modes then pad from what is left, which must not be empty. */
int64_t kl_pad_source(kl_pad_mode mode, int64_t o, int64_t len, int64_t begin,
                      int64_t end);

/* ---- Resize ---- */

typedef enum kl_resize_mode { KL_RESIZE_NEAREST, KL_RESIZE_LINEAR, KL_RESIZE_CUBIC }
    kl_resize_mode;
typedef enum kl_resize_coord {
  KL_COORD_HALF_PIXEL, KL_COORD_HALF_PIXEL_SYMMETRIC, KL_COORD_PYTORCH_HALF_PIXEL,
  KL_COORD_ALIGN_CORNERS, KL_COORD_ASYMMETRIC, KL_COORD_TF_CROP_AND_RESIZE,
  KL_COORD_TF_HALF_PIXEL_FOR_NN
} kl_resize_coord;
/* KL_NEAREST_SIMPLE ("simple", set by the importer for Upsample and Resize-10): down
 * when a dim grows, up when it shrinks, as those ops did. */
typedef enum kl_resize_nearest { KL_NEAREST_ROUND_PREFER_FLOOR, KL_NEAREST_ROUND_PREFER_CEIL,
                                 KL_NEAREST_FLOOR, KL_NEAREST_CEIL, KL_NEAREST_SIMPLE }
    kl_resize_nearest;
typedef enum kl_resize_aspect { KL_ASPECT_STRETCH, KL_ASPECT_NOT_LARGER,
                                KL_ASPECT_NOT_SMALLER } kl_resize_aspect;

/* Resize's attributes, checked. */
typedef struct kl_resize_attrs {
  kl_resize_mode mode;
  kl_resize_coord coord;
  kl_resize_nearest nearest;
  kl_resize_aspect aspect;
  bool antialias, exclude_outside;
  double cubic_a, extrapolation;
  int n_axes;          /* -1: every dim */
  int64_t axes[KL_MAX_RANK];
} kl_resize_attrs;

/* rank is the input's rank, or -1 when not known (the axes are then not checked). */
kiln_status kl_resize_attrs_read(const kl_node *node, int rank, kl_resize_attrs *a,
                                 kl_err *e);

/* Per dim: the output size, the scale used to map coordinates and the roi. */
typedef struct kl_resize_plan {
  int64_t out[KL_MAX_RANK];  /* -1 when not known */
  double scale[KL_MAX_RANK]; /* 0 when not known */
  double roi_start[KL_MAX_RANK], roi_end[KL_MAX_RANK];
  bool identity[KL_MAX_RANK]; /* the dim is copied unchanged */
} kl_resize_plan;

/* The request, one list per input; n_* is -1 when the input is absent or empty and
 * -2 when it is present but its contents are not known. Values are for the dims of
 * a->axes (every dim when it has none). */
typedef struct kl_resize_request {
  int n_scales, n_sizes, n_roi;
  double scales[KL_MAX_RANK];
  int64_t sizes[KL_MAX_RANK];
  double roi[2 * KL_MAX_RANK];
} kl_resize_request;

kiln_status kl_resize_plan_make(const kl_resize_attrs *a, int rank, const int64_t *dims,
                                const kl_resize_request *r, kl_resize_plan *p, kl_err *e);

/* ---- Unique ---- */

/* X seen as `outer` x `len` x `inner` elements: the `len` slices [o, i, :] over every
 * o are compared as a whole (Unique with an axis; without one, outer = inner = 1).
 * order gets the slice indexes sorted (ties in first-occurrence order), and *n_unique
 * the number of distinct slices. */
typedef struct kl_unique_view {
  const void *data;
  kl_dtype dtype;
  int64_t outer, len, inner;
} kl_unique_view;

kiln_status kl_unique_sort(const kl_unique_view *v, int64_t *order, int64_t *n_unique,
                           kl_err *e);
/* Whether slices a and b compare equal (NaNs equal to each other). */
bool kl_unique_same(const kl_unique_view *v, int64_t a, int64_t b);
/* The steps of kl_unique_sort's merge sort of `slices` slices of `slice_elems` elements
 * each: counted per slice even when the slices are empty (work.c, load-time inference). */
double kl_unique_steps(double slices, double slice_elems);

#endif
