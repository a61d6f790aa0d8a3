/* Drivers of the data-movement ISA kernels: Transpose and Concat, for dtypes of 1, 2,
 * 4 or 8 bytes (they move bytes, so the dtype only gives the element size).
 *
 * Transpose first simplifies the permutation: size-1 dims are dropped and input dims
 * that stay adjacent and in order are merged, so NCHW -> NHWC becomes a batch of 2-D
 * transposes [C, HW] -> [HW, C]. If the last input dim stays last, every output row is
 * a contiguous run of the input (memcpy); otherwise the ISA's 2-D transpose does the
 * pair of dims (the output's last, the input's last), over the remaining dims.
 */
#include "backends/cpu/isa/run.h"

#include <string.h>

#define TASK_BYTES (64 * 1024)
/* Rows of one 2-D transpose per task, when there are few of them. */
#define TILE_ROWS 64

typedef struct transpose_job {
  const kl_isa_fns *f;
  const char *x;
  char *y;
  size_t es;
  int rank;                    /* after simplification */
  int64_t dims[KL_MAX_RANK];   /* input dims */
  int perm[KL_MAX_RANK];       /* output dim k is input dim perm[k] */
  kl_isa_walk walk;            /* outer output dims; operand 0 input, 1 output offsets */
  int64_t outer, rows, cols;   /* 2-D part: rows along the output's last dim */
  int64_t src_ld, dst_ld;      /* elements */
  int64_t per, row_parts;
  bool runs;                   /* the last dim stays last: copy runs of `cols` */
} transpose_job;

/* Drops size-1 dims and merges runs of input dims that the output keeps adjacent and in
 * order; fills j->rank, j->dims, j->perm. */
static void simplify(const kl_tensor *x, const int64_t *perm, transpose_job *j) {
  int keep[KL_MAX_RANK], n = 0; /* new index of each kept input dim, -1 if dropped */
  for (int d = 0; d < x->rank; d++) keep[d] = x->dims[d] == 1 ? -1 : n++;
  int order[KL_MAX_RANK], m = 0; /* kept input dims in output order */
  for (int k = 0; k < x->rank; k++)
    if (keep[perm[k]] >= 0) order[m++] = keep[perm[k]];
  int group[KL_MAX_RANK], g = 0; /* first kept input dim of each merged group */
  for (int k = 0; k < m; k++)
    if (k == 0 || order[k] != order[k - 1] + 1) group[g++] = order[k];
  /* the merged dims in input order: a group spans until the next group start above it */
  int64_t size[KL_MAX_RANK];
  int64_t kept_dims[KL_MAX_RANK];
  for (int d = 0, i = 0; d < x->rank; d++)
    if (keep[d] >= 0) kept_dims[i++] = x->dims[d];
  for (int a = 0; a < g; a++) {
    int end = n;
    for (int b = 0; b < g; b++)
      if (group[b] > group[a] && group[b] < end) end = group[b];
    size[a] = 1;
    for (int d = group[a]; d < end; d++) size[a] *= kept_dims[d];
  }
  j->rank = g;
  for (int a = 0; a < g; a++) { /* rank of group a's start among all starts = its input dim */
    int r = 0;
    for (int b = 0; b < g; b++) r += group[b] < group[a];
    j->dims[r] = size[a];
    j->perm[a] = r;
  }
}

/* Row-major strides of the simplified input, and of the output. */
static void strides(const transpose_job *j, int64_t *in_st, int64_t *out_st) {
  int64_t s = 1;
  for (int d = j->rank - 1; d >= 0; d--) {
    in_st[d] = s;
    s *= j->dims[d];
  }
  s = 1;
  for (int k = j->rank - 1; k >= 0; k--) {
    out_st[k] = s;
    s *= j->dims[j->perm[k]];
  }
}

/* Sets up the walk over every output dim but the last (runs), or but the last and the
 * one that holds the input's last dim (2-D transposes). */
static void plan(transpose_job *j) {
  int64_t in_st[KL_MAX_RANK], out_st[KL_MAX_RANK];
  strides(j, in_st, out_st);
  int last = j->rank - 1, q = 0;
  for (int k = 0; k < j->rank; k++)
    if (j->perm[k] == last) q = k;
  j->runs = j->perm[last] == last;
  j->cols = j->dims[last];
  j->rows = j->runs ? 1 : j->dims[j->perm[last]];
  j->src_ld = in_st[j->perm[last]];
  j->dst_ld = out_st[q];
  j->walk.rank = 0;
  j->outer = 1;
  for (int k = 0; k < last; k++) {
    if (!j->runs && k == q) continue;
    int w = j->walk.rank++;
    j->walk.dims[w] = j->dims[j->perm[k]];
    j->walk.stride[0][w] = in_st[j->perm[k]];
    j->walk.stride[1][w] = out_st[k];
    j->outer *= j->walk.dims[w];
  }
}

static void transpose_task(void *arg, int64_t t) {
  const transpose_job *j = arg;
  kl_isa_walk w = j->walk;
  int64_t first = t / j->row_parts * j->per, part = t % j->row_parts;
  int64_t last = first + j->per < j->outer ? first + j->per : j->outer;
  int64_t r0 = part * TILE_ROWS, r1 = j->rows;
  if (j->row_parts > 1 && r0 + TILE_ROWS < r1) r1 = r0 + TILE_ROWS;
  kl_isa_walk_seek(&w, first);
  for (int64_t o = first; o < last; o++, kl_isa_walk_next(&w)) {
    const char *src = j->x + (size_t)w.off[0] * j->es;
    char *dst = j->y + (size_t)w.off[1] * j->es;
    if (j->runs) {
      memcpy(dst, src, (size_t)j->cols * j->es);
      continue;
    }
    j->f->copy->transpose2d(j->es, src + (size_t)(r0 * j->src_ld) * j->es, (size_t)j->src_ld,
                            dst + (size_t)r0 * j->es, (size_t)j->dst_ld, (size_t)(r1 - r0),
                            (size_t)j->cols);
  }
}

static bool movable(kl_dtype t) {
  size_t es = kl_dtype_size(t);
  return es == 1 || es == 2 || es == 4 || es == 8;
}

int kl_run_transpose(kl_kernel_ctx *c, const kl_isa_fns *f) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  int64_t reversed[KL_MAX_RANK];
  const int64_t *perm = reversed;
  if (kl_attr_ints(c->node, "perm", &perm) < 0)
    for (int k = 0; k < x->rank; k++) reversed[k] = x->rank - 1 - k;
  if (!movable(x->dtype) || y->dtype != x->dtype) return kl_isa_ref(c);
  int64_t n = kl_tensor_numel(x);
  transpose_job j = {.f = f, .x = x->data, .y = y->data, .es = kl_dtype_size(x->dtype)};
  if (n == 0) return KILN_OK;
  simplify(x, perm, &j);
  if (j.rank <= 1) { /* the order of the elements does not change */
    memcpy(j.y, j.x, (size_t)n * j.es);
    return KILN_OK;
  }
  plan(&j);
  int64_t per_o = (int64_t)(TASK_BYTES / j.es) / (j.rows * j.cols) + 1;
  int64_t tasks = kl_isa_split(j.outer, per_o, &j.per);
  j.row_parts = 1;
  if (tasks == 1 && !j.runs) { /* one large 2-D transpose: split its rows instead */
    j.row_parts = (j.rows + TILE_ROWS - 1) / TILE_ROWS;
    j.per = j.outer;
    tasks = j.row_parts;
  }
  kl_isa_parallel(c, tasks, n, transpose_task, &j);
  return KILN_OK;
}

/* ---- Concat ---- */

/* Y = [outer, sum of the inputs' axis dims, inner]: for each outer index, each input's
 * block of dims[axis] * inner elements, one after another. */
typedef struct concat_job {
  const kl_kernel_ctx *c;
  size_t row_bytes; /* one outer index of Y */
  int64_t inner, outer, per;
  int axis;
} concat_job;

static void concat_task(void *arg, int64_t t) {
  const concat_job *j = arg;
  size_t es = kl_dtype_size(j->c->out[0]->dtype);
  int64_t last = (t + 1) * j->per < j->outer ? (t + 1) * j->per : j->outer;
  for (int64_t o = t * j->per; o < last; o++) {
    char *dst = (char *)j->c->out[0]->data + (size_t)o * j->row_bytes;
    for (int i = 0; i < j->c->n_in; i++) {
      const kl_tensor *x = j->c->in[i];
      size_t block = (size_t)(x->dims[j->axis] * j->inner) * es;
      if (block) memcpy(dst, (const char *)x->data + (size_t)o * block, block);
      dst += block;
    }
  }
}

/* One long block per input (outer == 1): copied in parts. */
typedef struct concat_part_job {
  const char *src;
  char *dst;
  size_t bytes;
} concat_part_job;

static void concat_part_task(void *arg, int64_t t) {
  const concat_part_job *j = arg;
  size_t from = (size_t)t * TASK_BYTES, len = j->bytes - from < TASK_BYTES ? j->bytes - from
                                                                           : TASK_BYTES;
  memcpy(j->dst + from, j->src + from, len);
}

int kl_run_concat(kl_kernel_ctx *c, const kl_isa_fns *f) {
  kl_tensor *y = c->out[0];
  if (!movable(y->dtype) || kl_tensor_numel(y) == 0) return kl_isa_ref(c);
  return kl_run_concat_axis(c, f, kl_isa_axis(c->node, "axis", 0, y->rank));
}

/* t's dims as [N, S..., C] */
static void cl_dims(const kl_tensor *t, kl_tensor *v) {
  *v = *t;
  for (int i = 2; i < t->rank; i++) v->dims[i - 1] = t->dims[i];
  v->dims[t->rank - 1] = t->dims[1];
}

int kl_run_concat_cl(const kl_kernel_ctx *c, const kl_isa_fns *f) {
  if (c->n_in > 32 || c->out[0]->rank < 2) return KILN_ERR_UNSUPPORTED;
  kl_tensor in[32], out;
  const kl_tensor *in_p[32];
  kl_tensor *out_p[1] = {&out};
  for (int k = 0; k < c->n_in; k++) {
    cl_dims(c->in[k], &in[k]);
    in_p[k] = &in[k];
  }
  cl_dims(c->out[0], &out);
  kl_kernel_ctx v = *c;
  v.in = in_p;
  v.out = out_p;
  return kl_run_concat_axis(&v, f, out.rank - 1);
}

int kl_run_concat_axis(const kl_kernel_ctx *c, const kl_isa_fns *f, int axis) {
  (void)f; /* memcpy is libc's, already tuned to the CPU */
  kl_tensor *y = c->out[0];
  if (!movable(y->dtype) || axis < 0 || axis >= y->rank) return KILN_ERR_UNSUPPORTED;
  size_t es = kl_dtype_size(y->dtype);
  concat_job j = {.c = c, .axis = axis, .inner = 1, .outer = 1};
  for (int d = 0; d < axis; d++) j.outer *= y->dims[d];
  for (int d = axis + 1; d < y->rank; d++) j.inner *= y->dims[d];
  j.row_bytes = (size_t)(y->dims[axis] * j.inner) * es;
  int64_t n = kl_tensor_numel(y);
  if (j.outer > 1) {
    int64_t tasks = kl_isa_split(j.outer, (int64_t)(TASK_BYTES / j.row_bytes) + 1, &j.per);
    kl_isa_parallel(c, tasks, n, concat_task, &j);
    return KILN_OK;
  }
  char *dst = y->data;
  for (int i = 0; i < c->n_in; i++) {
    const kl_tensor *x = c->in[i];
    concat_part_job p = {x->data, dst, (size_t)kl_tensor_numel(x) * es};
    if (p.bytes)
      kl_isa_parallel(c, (int64_t)((p.bytes + TASK_BYTES - 1) / TASK_BYTES),
                      kl_tensor_numel(x), concat_part_task, &p);
    dst += p.bytes;
  }
  return KILN_OK;
}
