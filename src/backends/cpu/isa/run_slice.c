/* Driver of the ISA kernel for Slice, any dtype of 1, 2, 4 or 8 bytes.
 *
 * The plan (ir/data_plan.h, the one shape inference and the reference use) says where
 * each dim starts, how it steps and how many elements it takes. Trailing dims taken
 * whole and in order, together with the dim before them when it steps by 1, form
 * contiguous runs of the input, copied with memcpy; otherwise each output row of the
 * last dim is gathered at its step, element by element. The outer dims are walked
 * with strides (negative for negative steps). A single long run is split into parts
 * for the threads.
 */
#include "backends/cpu/isa/run.h"
#include "ir/data_plan.h"

#include <string.h>

#define TASK_BYTES (64 * 1024)

typedef struct slice_job {
  const char *x;
  char *y;
  size_t es;
  int64_t base;          /* the first element taken, in input elements */
  int64_t row, row_step; /* a row: `row` elements, `row_step` apart in the input */
  kl_isa_walk walk;      /* outer dims; operand 0: input offsets */
  int64_t rows, per;
} slice_job;

/* A row of n elements of es bytes, src step s (in elements) apart. */
static void gather(char *dst, const char *src, size_t es, int64_t s, int64_t n) {
  switch (es) {
  case 1:
    for (int64_t i = 0; i < n; i++) dst[i] = src[i * s];
    break;
  case 2:
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * 2, src + i * s * 2, 2);
    break;
  case 4:
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * 4, src + i * s * 4, 4);
    break;
  default:
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * 8, src + i * s * 8, 8);
    break;
  }
}

static void slice_task(void *arg, int64_t t) {
  const slice_job *j = arg;
  kl_isa_walk w = j->walk;
  int64_t first = t * j->per, last = first + j->per < j->rows ? first + j->per : j->rows;
  kl_isa_walk_seek(&w, first);
  for (int64_t r = first; r < last; r++, kl_isa_walk_next(&w)) {
    const char *src = j->x + (j->base + w.off[0]) * (int64_t)j->es;
    char *dst = j->y + r * j->row * (int64_t)j->es;
    if (j->row_step == 1) memcpy(dst, src, (size_t)j->row * j->es);
    else gather(dst, src, j->es, j->row_step, j->row);
  }
}

/* One contiguous run: part t of TASK_BYTES. */
static void run_part_task(void *arg, int64_t t) {
  const slice_job *j = arg;
  size_t bytes = (size_t)j->row * j->es, from = (size_t)t * TASK_BYTES;
  size_t len = bytes - from < TASK_BYTES ? bytes - from : TASK_BYTES;
  memcpy(j->y + from, j->x + (size_t)j->base * j->es + from, len);
}

/* Up to KL_MAX_RANK values of an integer tensor (absent: none), as the reference reads
 * them; false for a dtype that is not an integer. */
static bool ints_of(const kl_tensor *t, int64_t *v, int *n) {
  *n = 0;
  if (!t) return true;
  if (t->dtype != KL_I64 && t->dtype != KL_I32) return false;
  int64_t cnt = kl_tensor_numel(t);
  for (int64_t k = 0; k < cnt && k < KL_MAX_RANK; k++)
    v[k] = kl_load_i64(t->data, t->dtype, (size_t)k);
  *n = (int)(cnt < KL_MAX_RANK ? cnt : KL_MAX_RANK);
  return true;
}

int kl_run_slice(kl_kernel_ctx *c, const kl_isa_fns *f) {
  (void)f; /* memcpy is libc's, already tuned to the CPU */
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  size_t es = kl_dtype_size(x->dtype);
  if (y->dtype != x->dtype || !(es == 1 || es == 2 || es == 4 || es == 8) || x->rank < 1)
    return kl_isa_ref(c);
  int64_t starts[KL_MAX_RANK], ends[KL_MAX_RANK], axes[KL_MAX_RANK], steps[KL_MAX_RANK];
  const kl_tensor *ta = c->n_in > 3 ? c->in[3] : NULL, *ts = c->n_in > 4 ? c->in[4] : NULL;
  int n, n_ends, n_axes, n_steps;
  if (!ints_of(c->in[1], starts, &n) || !ints_of(c->in[2], ends, &n_ends) ||
      !ints_of(ta, axes, &n_axes) || !ints_of(ts, steps, &n_steps) || n_ends < n ||
      (ta && n_axes < n) || (ts && n_steps < n))
    return kl_isa_ref(c);
  kl_slice_plan p;
  kiln_status st = kl_slice_plan_make(x->rank, x->dims, n, starts, ends, ta ? axes : NULL,
                                      ts ? steps : NULL, &p, c->e);
  if (st != KILN_OK) return st;
  if (y->rank != x->rank) return kl_isa_ref(c);
  for (int d = 0; d < x->rank; d++)
    if (p.count[d] != y->dims[d]) return kl_isa_ref(c);
  int64_t total = kl_tensor_numel(y);
  if (total == 0) return KILN_OK;

  int64_t xs[KL_MAX_RANK];
  for (int d = x->rank - 1, s = 1; d >= 0; d--) {
    xs[d] = s;
    s *= x->dims[d];
  }
  slice_job j = {.x = x->data, .y = y->data, .es = es, .row = 1, .row_step = 1};
  for (int d = 0; d < x->rank; d++) j.base += p.start[d] * xs[d];
  /* the row: trailing dims taken whole, then the one before if it steps by 1 */
  int d = x->rank - 1;
  while (d >= 0 && p.start[d] == 0 && p.step[d] == 1 && p.count[d] == x->dims[d])
    j.row *= p.count[d--];
  if (d >= 0 && (p.step[d] == 1 || p.count[d] == 1)) j.row *= p.count[d--];
  else if (d >= 0 && j.row == 1) { /* a strided last dim: gathered */
    j.row = p.count[d];
    j.row_step = p.step[d];
    d--;
  }
  j.walk.rank = d + 1;
  for (int k = 0; k <= d; k++) {
    j.walk.dims[k] = p.count[k];
    /* a huge step takes at most one element: keep the stride from overflowing */
    j.walk.stride[0][k] = p.count[k] > 1 ? xs[k] * p.step[k] : 0;
    j.walk.stride[1][k] = 0;
  }
  j.rows = total / j.row;
  if (j.rows == 1 && j.row_step == 1) {
    size_t bytes = (size_t)j.row * es;
    kl_isa_parallel(c, (int64_t)((bytes + TASK_BYTES - 1) / TASK_BYTES), total,
                    run_part_task, &j);
    return KILN_OK;
  }
  int64_t tasks = kl_isa_split(j.rows, (int64_t)(TASK_BYTES / ((size_t)j.row * es)) + 1,
                               &j.per);
  kl_isa_parallel(c, tasks, total, slice_task, &j);
  return KILN_OK;
}
