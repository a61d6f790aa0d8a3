/* The "more" family (recurrent cells, sampling grids, signal processing, detection
 * and a few odd ones): what its shape inference (infer_rnn.c, infer_signal.c,
 * infer_more.c) shares with its reference kernels (backends/cpu/ref/rnn.c, signal.c,
 * more.c), so that the two read attributes one way. */
#ifndef KL_INFER_MORE_H
#define KL_INFER_MORE_H

#include "ir/infer_common.h"
#include "ir/roi_align.h"

/* Input i's dim `axis` must be `want` when both are known; `why` ends the message
 * ("hidden_size"). */
kiln_status kl_more_expect_dim(const kl_infer_ctx *c, int i, const char *name, int axis,
                               int64_t want, const char *why);

/* ---- RNN, GRU, LSTM ---- */

/* (KL_RNN_ACT_: the ISA kernels' activations are KL_ACT_, and run_rnn.c sees both) */
typedef enum kl_rnn_act_kind {
  KL_RNN_ACT_RELU, KL_RNN_ACT_TANH, KL_RNN_ACT_SIGMOID, KL_RNN_ACT_AFFINE, KL_RNN_ACT_LEAKY_RELU,
  KL_RNN_ACT_THRESHOLDED_RELU, KL_RNN_ACT_SCALED_TANH, KL_RNN_ACT_HARD_SIGMOID, KL_RNN_ACT_ELU,
  KL_RNN_ACT_SOFTSIGN, KL_RNN_ACT_SOFTPLUS
} kl_rnn_act_kind;

typedef struct kl_rnn_act {
  kl_rnn_act_kind kind;
  double alpha, beta;
} kl_rnn_act;

#define KL_RNN_MAX_ACTS 3 /* LSTM's f, g, h */

/* A recurrent node's attributes. Gates are stacked in W, R and B in ONNX's order:
 * RNN i; GRU z, r, h; LSTM i, o, f, c. */
typedef struct kl_rnn {
  int gates;            /* 1, 3 or 4 */
  int n_acts;           /* activations per direction: 1, 2 or 3 */
  int dirs;             /* 1 or 2 */
  bool reverse;         /* direction "reverse" (a bidirectional node has both) */
  bool batch_first;     /* layout 1: X [batch, seq, input], Y [batch, seq, dirs, hidden] */
  int64_t hidden;       /* hidden_size, -1 when absent (then R's last dim says) */
  bool has_clip;
  double clip;
  bool linear_before_reset; /* GRU */
  bool input_forget;        /* LSTM: f = 1 - i */
  kl_rnn_act act[2][KL_RNN_MAX_ACTS]; /* [direction][f, g, h] */
} kl_rnn;

/* Reads and checks the attributes of an RNN, GRU or LSTM node (or of kiln.GRUGrad and
 * kiln.LSTMGrad, which carry their forward node's). */
kiln_status kl_rnn_init(const kl_node *node, kl_rnn *r, kl_err *e);
/* What of r the gradient ops (kiln.LSTMGrad, kiln.GRUGrad) do not differentiate, for a
 * message ("layout 1", ...): they take any direction, layout 0, the default activations,
 * no clip and no input_forget. NULL when they take r. */
const char *kl_rnn_grad_unsupported(const kl_rnn *r);

/* ---- GridSample ---- */

typedef enum kl_grid_mode { KL_GRID_LINEAR, KL_GRID_NEAREST, KL_GRID_CUBIC } kl_grid_mode;
typedef enum kl_grid_pad { KL_GRID_ZEROS, KL_GRID_BORDER, KL_GRID_REFLECTION } kl_grid_pad;

typedef struct kl_grid {
  kl_grid_mode mode;
  kl_grid_pad pad;
  bool align_corners;
} kl_grid;

/* Reads mode (opset 20's names: linear, nearest, cubic), padding_mode and
 * align_corners. */
kiln_status kl_grid_init(const kl_node *node, kl_grid *g, kl_err *e);

/* ---- NonMaxSuppression ---- */

typedef struct kl_nms {
  const void *boxes, *scores;       /* [batches, count, 4], [batches, classes, count] */
  kl_dtype boxes_dtype, scores_dtype;
  int64_t batches, classes, count;
  int64_t max_per_class;            /* max_output_boxes_per_class (0: none) */
  double iou_threshold;
  bool has_score_threshold;
  double score_threshold;
  bool center_point_box;            /* boxes are (x, y, w, h), else two corners (y, x) */
} kl_nms;

/* The greedy selection, class by class: writes the first `rows` (batch, class, box)
 * triples to out and sets *selected to their number. Shape inference runs it (rows 0)
 * to learn the output's length; the kernel again to fill it. */
kiln_status kl_nms_select(const kl_nms *p, int64_t *out, int64_t rows, int64_t *selected,
                          kl_err *e);

/* ---- RoiAlign ---- */



#endif
