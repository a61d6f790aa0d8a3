/* Driver of the ISA kernel for Pad in constant mode, any dtype of 1, 2, 4 or 8 bytes.
 *
 * The pads come from the plan the reference and shape inference use (ir/data_plan.h):
 * output index o of a dim with begin pad b reads input index o - b when that is inside
 * the input, else it is the constant (negative pads crop). Trailing dims without pads
 * are contiguous in both tensors and form the row's unit; the innermost padded dim d
 * then makes each output row: the constant, a contiguous run of the input (memcpy),
 * the constant. The dims before d are walked row by row; a row whose outer index falls
 * in their padding is the constant throughout. With no pads at all, Pad is a copy,
 * split into parts for the threads. Other modes run the reference kernel.
 *
 * Held channels-last (kl_run_pad_cl: X and Y [N, S..., C] in memory, kl_cpu_isa_layout's
 * WHOLE), the same walk runs over the dims in memory order with the pads permuted the
 * same way: each dim is padded on its own, so padding the permuted tensor is permuting
 * the padded one.
 */
#include "backends/cpu/isa/run.h"
#include "ir/data_plan.h"

#include <string.h>

#define TASK_BYTES (64 * 1024)

typedef struct pad_job {
  const char *x;
  char *y;
  size_t es;
  char value[8];
  bool zero;                  /* the constant is all zero bytes */
  int d;                      /* the innermost padded dim; the walk covers dims < d */
  const int64_t *xdims, *ydims;
  int64_t begin[KL_MAX_RANK];
  int64_t xs[KL_MAX_RANK];    /* input strides, in elements */
  int64_t unit;               /* elements of the unpadded dims after d */
  int64_t lo, hi;             /* the row's copied part: output units [lo, hi) */
  int64_t row, rows, per;     /* output elements per row, rows, rows per task */
} pad_job;

/* n elements of the constant at dst. */
static void fill(const pad_job *j, char *dst, int64_t n) {
  if (n <= 0) return;
  if (j->zero) {
    memset(dst, 0, (size_t)n * j->es);
    return;
  }
  for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * j->es, j->value, j->es);
}

static void pad_task(void *arg, int64_t t) {
  const pad_job *j = arg;
  int64_t first = t * j->per, last = first + j->per < j->rows ? first + j->per : j->rows;
  size_t es = j->es;
  for (int64_t r = first; r < last; r++) {
    char *dst = j->y + (size_t)(r * j->row) * es;
    int64_t off = 0, rest = r;
    bool inside = true;
    for (int k = j->d - 1; k >= 0 && inside; k--) { /* r's index in the outer dims */
      int64_t s = rest % j->ydims[k] - j->begin[k];
      rest /= j->ydims[k];
      inside = s >= 0 && s < j->xdims[k];
      off += s * j->xs[k];
    }
    if (!inside || j->hi <= j->lo) {
      fill(j, dst, j->row);
      continue;
    }
    fill(j, dst, j->lo * j->unit);
    off += (j->lo - j->begin[j->d]) * j->unit;
    memcpy(dst + (size_t)(j->lo * j->unit) * es, j->x + (size_t)off * es,
           (size_t)((j->hi - j->lo) * j->unit) * es);
    fill(j, dst + (size_t)(j->hi * j->unit) * es, j->row - j->hi * j->unit);
  }
}

/* No pads: part t of a plain copy. */
static void copy_task(void *arg, int64_t t) {
  const pad_job *j = arg;
  size_t bytes = (size_t)j->row * j->es, from = (size_t)t * TASK_BYTES;
  size_t len = bytes - from < TASK_BYTES ? bytes - from : TASK_BYTES;
  memcpy(j->y + from, j->x + from, len);
}

/* Up to max values of an integer tensor (absent: none), as the reference reads them;
 * false for a dtype that is not an integer. */
static bool ints_of(const kl_tensor *t, int64_t *v, int max, int *n) {
  *n = 0;
  if (!t) return true;
  if (t->dtype != KL_I64 && t->dtype != KL_I32) return false;
  int64_t cnt = kl_tensor_numel(t);
  for (int64_t k = 0; k < cnt && k < max; k++) v[k] = kl_load_i64(t->data, t->dtype, (size_t)k);
  *n = (int)(cnt < max ? cnt : max);
  return true;
}

/* Where the channels-last kernel cannot run (those the plain one leaves to the
 * reference): the layout was chosen for a node it takes, so this is kiln's error. */
static int cl_refused(kl_kernel_ctx *c) {
  return kl_fail(c->e, KILN_ERR_INTERNAL, "Pad held channels-last outside what its "
                 "channels-last kernel takes (constant mode, X's dtype throughout)");
}

static int run_pad(kl_kernel_ctx *c, bool cl) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  const kl_tensor *tv = c->n_in > 2 ? c->in[2] : NULL, *ta = c->n_in > 3 ? c->in[3] : NULL;
  size_t es = kl_dtype_size(x->dtype);
  kl_pad_mode mode;
  if (y->dtype != x->dtype || !(es == 1 || es == 2 || es == 4 || es == 8) ||
      x->rank != y->rank || x->rank < (cl ? 3 : 1) ||
      kl_pad_mode_read(c->node, &mode, c->e) != KILN_OK || mode != KL_PADMODE_CONSTANT ||
      (tv && tv->dtype != x->dtype))
    return cl ? cl_refused(c) : kl_isa_ref(c);
  int64_t pads[2 * KL_MAX_RANK], axes[KL_MAX_RANK], begin[KL_MAX_RANK], end[KL_MAX_RANK];
  int n_pads, n_axes;
  if (!ints_of(c->in[1], pads, 2 * KL_MAX_RANK, &n_pads) ||
      !ints_of(ta, axes, KL_MAX_RANK, &n_axes))
    return cl ? cl_refused(c) : kl_isa_ref(c);
  kiln_status st = kl_pad_plan_make(x->rank, n_pads / 2, pads, ta ? axes : NULL, begin, end,
                                    c->e);
  if (st != KILN_OK) return st;
  for (int d = 0; d < x->rank; d++)
    if (x->dims[d] + begin[d] + end[d] != y->dims[d]) return cl ? cl_refused(c) : kl_isa_ref(c);
  /* the dims in memory order: [N, S..., C] channels-last */
  int64_t xdims[KL_MAX_RANK], ydims[KL_MAX_RANK], mend[KL_MAX_RANK];
  pad_job j = {.x = x->data, .y = y->data, .es = es, .xdims = xdims, .ydims = ydims};
  for (int d = 0; d < x->rank; d++) {
    int from = !cl || d == 0 ? d : d == x->rank - 1 ? 1 : d + 1;
    xdims[d] = x->dims[from], ydims[d] = y->dims[from];
    j.begin[d] = begin[from], mend[d] = end[from];
  }
  int64_t total = kl_tensor_numel(y);
  if (total == 0) return KILN_OK;
  if (tv && kl_tensor_numel(tv) > 0) memcpy(j.value, tv->data, es);
  j.zero = true;
  for (size_t b = 0; b < es; b++) j.zero = j.zero && j.value[b] == 0;
  int64_t stride = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    j.xs[d] = stride;
    stride *= xdims[d];
  }
  j.unit = 1;
  j.d = x->rank - 1;
  while (j.d >= 0 && j.begin[j.d] == 0 && mend[j.d] == 0) j.unit *= xdims[j.d--];
  if (j.d < 0) { /* no pads: a copy */
    j.row = total;
    kl_isa_parallel(c, (int64_t)(((size_t)total * es + TASK_BYTES - 1) / TASK_BYTES), total,
                    copy_task, &j);
    return KILN_OK;
  }
  int64_t b = j.begin[j.d], len = xdims[j.d], out = ydims[j.d];
  j.lo = b > 0 ? b : 0;
  j.hi = len + b < out ? len + b : out;
  j.row = out * j.unit;
  j.rows = total / j.row;
  int64_t tasks = kl_isa_split(j.rows, (int64_t)(TASK_BYTES / ((size_t)j.row * es)) + 1,
                               &j.per);
  kl_isa_parallel(c, tasks, total, pad_task, &j);
  return KILN_OK;
}

int kl_run_pad(kl_kernel_ctx *c, const kl_isa_fns *f) {
  (void)f; /* memcpy is libc's, already tuned to the CPU */
  return run_pad(c, false);
}

int kl_run_pad_cl(kl_kernel_ctx *c, const kl_isa_fns *f) {
  (void)f;
  return run_pad(c, true);
}
