/* The data-movement and sampling ops of detection post-processing (torchvision's
 * SSD, Faster R-CNN and RetinaNet exports): RoiAlign, ScatterElements, Expand,
 * ConstantOfShape, Gather, GatherND, GatherElements, Split, NonZero, TopK, Max and Min
 * of two inputs and the comparisons (Equal, Less, Greater, LessOrEqual,
 * GreaterOrEqual); Resize goes on to run_resize.c. Plain C, the same at every level:
 * their reference twins (ref/) walk one element at a time through generic loads,
 * stores and broadcast iterators; these read and write the dtypes' own words, collapse
 * broadcasts into rows, and spread large jobs over the node's threads. Each takes what its selection
 * (kernels.c) promised only when the run-time dtypes agree; anything else runs the
 * reference kernel.
 */
#include "ir/roi_align.h"
#include "backends/cpu/isa/run.h"
#include "backends/cpu/ref/ref.h"

#include <math.h>
#include <string.h>

#define CHUNK 16384 /* output elements per task, for the copies and fills */

static bool index_dtype(kl_dtype t) { return t == KL_I64 || t == KL_I32; }

static bool word_size(size_t es) { return es == 1 || es == 2 || es == 4 || es == 8; }

/* Index element i (int64 or int32 storage). */
static inline int64_t load_index(const void *p, kl_dtype t, int64_t i) {
  return t == KL_I64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
}

static kiln_status bad_index(const kl_kernel_ctx *c, int64_t k, int64_t at, int64_t len) {
  return kl_fail(c->e, KILN_ERR_INVALID_ARGUMENT, "input 1 (indices) has %lld at element "
                 "%lld, expected %lld to %lld", (long long)k, (long long)at, (long long)-len,
                 (long long)len - 1);
}

/* Fills n elements of es bytes at dst with the one at v. */
static void fill_words(void *dst, const void *v, size_t es, int64_t n) {
  switch (es) {
  case 1: memset(dst, *(const uint8_t *)v, (size_t)n); return;
  case 2: {
    uint16_t w;
    memcpy(&w, v, 2);
    for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = w;
    return;
  }
  case 4: {
    uint32_t w;
    memcpy(&w, v, 4);
    for (int64_t i = 0; i < n; i++) ((uint32_t *)dst)[i] = w;
    return;
  }
  default: {
    uint64_t w;
    memcpy(&w, v, 8);
    for (int64_t i = 0; i < n; i++) ((uint64_t *)dst)[i] = w;
    return;
  }
  }
}

/* ---- broadcast rows (Expand, the comparisons) ----
 * Y's shape with size-1 dims dropped and neighbours merged where both operands walk
 * them as one; the last dim is a row, each operand stepping 0 or 1 along it. */

typedef struct bcast_plan {
  kl_isa_walk w;      /* over the outer dims */
  int64_t inner, outer, step[2];
} bcast_plan;

static void bcast_plan_make(const kl_tensor *a, const kl_tensor *b, const kl_tensor *y,
                            bcast_plan *p) {
  int64_t st[2][KL_MAX_RANK], dims[KL_MAX_RANK], m_st[2][KL_MAX_RANK];
  kl_isa_bcast_strides(a, y, st[0]);
  if (b) kl_isa_bcast_strides(b, y, st[1]);
  else memset(st[1], 0, sizeof st[1]);
  int m = 0;
  for (int d = 0; d < y->rank; d++) {
    if (y->dims[d] == 1) continue;
    if (m > 0 && m_st[0][m - 1] == st[0][d] * y->dims[d] &&
        m_st[1][m - 1] == st[1][d] * y->dims[d]) {
      dims[m - 1] *= y->dims[d];
      m_st[0][m - 1] = st[0][d];
      m_st[1][m - 1] = st[1][d];
      continue;
    }
    dims[m] = y->dims[d];
    m_st[0][m] = st[0][d];
    m_st[1][m] = st[1][d];
    m++;
  }
  if (m == 0) { /* one element */
    dims[0] = 1;
    m_st[0][0] = m_st[1][0] = 0;
    m = 1;
  }
  memset(&p->w, 0, sizeof p->w);
  p->inner = dims[m - 1];
  p->step[0] = m_st[0][m - 1];
  p->step[1] = m_st[1][m - 1];
  p->w.rank = m - 1;
  p->outer = 1;
  for (int d = 0; d < m - 1; d++) {
    p->w.dims[d] = dims[d];
    p->w.stride[0][d] = m_st[0][d];
    p->w.stride[1][d] = m_st[1][d];
    p->outer *= dims[d];
  }
}

/* Tasks of whole rows, at least CHUNK elements each (a row longer than that is a task of
 * its own). */
static int64_t row_tasks(const bcast_plan *p, int64_t *rows_per) {
  return kl_isa_split(p->outer, CHUNK / (p->inner > 0 ? p->inner : 1) + 1, rows_per);
}

/* ---- Expand ---- */

typedef struct expand_job {
  bcast_plan p;
  const char *x;
  char *y;
  size_t es;
  int64_t per;
} expand_job;

static void expand_task(void *arg, int64_t t) {
  const expand_job *j = arg;
  kl_isa_walk w = j->p.w;
  int64_t first = t * j->per, last = first + j->per < j->p.outer ? first + j->per : j->p.outer;
  size_t row = (size_t)j->p.inner * j->es;
  kl_isa_walk_seek(&w, first);
  for (int64_t r = first; r < last; r++, kl_isa_walk_next(&w)) {
    char *dst = j->y + (size_t)r * row;
    const char *src = j->x + (size_t)w.off[0] * j->es;
    if (j->p.step[0]) memcpy(dst, src, row);
    else fill_words(dst, src, j->es, j->p.inner);
  }
}

static int run_expand(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  size_t es = kl_dtype_size(x->dtype);
  if (!word_size(es) || y->dtype != x->dtype || x->rank > y->rank) return kl_isa_ref(c);
  int64_t n = kl_tensor_numel(y);
  if (n == 0) return KILN_OK;
  expand_job j = {.x = x->data, .y = y->data, .es = es};
  bcast_plan_make(x, NULL, y, &j.p);
  int64_t tasks = row_tasks(&j.p, &j.per);
  kl_isa_parallel(c, tasks, n, expand_task, &j);
  return KILN_OK;
}

/* ---- ConstantOfShape ---- */

typedef struct fill_job {
  char *y;
  const void *v;
  size_t es;
  int64_t n, per;
} fill_job;

static void fill_task(void *arg, int64_t t) {
  const fill_job *j = arg;
  int64_t first = t * j->per, len = j->n - first < j->per ? j->n - first : j->per;
  fill_words(j->y + (size_t)first * j->es, j->v, j->es, len);
}

static int run_constant_of_shape(kl_kernel_ctx *c) {
  kl_tensor *y = c->out[0];
  const kl_attr *a = kl_node_attr(c->node, "value");
  static const float zero = 0.0f;
  fill_job j = {.y = y->data, .v = a ? a->t->data : &zero, .es = kl_dtype_size(y->dtype),
                .n = kl_tensor_numel(y)};
  if (!word_size(j.es) || (!a && y->dtype != KL_F32) || (a && a->t->dtype != y->dtype))
    return kl_isa_ref(c);
  if (j.n == 0) return KILN_OK;
  int64_t tasks = kl_isa_split(j.n, 4 * CHUNK, &j.per);
  kl_isa_parallel(c, tasks, j.n, fill_task, &j);
  return KILN_OK;
}

/* ---- comparisons ---- */

typedef struct cmp_job {
  bcast_plan p;
  kl_op op;
  kl_dtype dt;
  const void *a, *b;
  uint8_t *y;
  int64_t per;
} cmp_job;

/* One row: o[i] = a[i sa] OP b[i sb], the steps written out as constants for the
 * common cases so that the compiler vectorizes them. */
#define CMP_LOOP(T, OP, SA, SB)                                                          \
  for (int64_t i = 0; i < len; i++) o[i] = (uint8_t)(pa[i * (SA)] OP pb[i * (SB)]);
#define CMP_STEPS(T, OP)                                                                 \
  switch (sa * 2 + sb) {                                                                 \
  case 3: CMP_LOOP(T, OP, 1, 1) break;                                                   \
  case 2: CMP_LOOP(T, OP, 1, 0) break;                                                   \
  case 1: CMP_LOOP(T, OP, 0, 1) break;                                                   \
  default: CMP_LOOP(T, OP, 0, 0) break;                                                  \
  }
#define CMP_ROW(T)                                                                       \
  {                                                                                      \
    const T *pa = (const T *)a, *pb = (const T *)b;                                      \
    switch (op) {                                                                        \
    case KL_OP_Equal: CMP_STEPS(T, ==) break;                                            \
    case KL_OP_Less: CMP_STEPS(T, <) break;                                              \
    case KL_OP_Greater: CMP_STEPS(T, >) break;                                           \
    case KL_OP_LessOrEqual: CMP_STEPS(T, <=) break;                                      \
    default: CMP_STEPS(T, >=) break;                                                     \
    }                                                                                    \
  }

static void cmp_row(kl_op op, kl_dtype dt, const void *a, int64_t sa, const void *b,
                    int64_t sb, uint8_t *o, int64_t len) {
  switch (dt) {
  case KL_F32: CMP_ROW(float) break;
  case KL_F64: CMP_ROW(double) break;
  case KL_I32: CMP_ROW(int32_t) break;
  default: CMP_ROW(int64_t) break;
  }
}

static void cmp_task(void *arg, int64_t t) {
  const cmp_job *j = arg;
  kl_isa_walk w = j->p.w;
  size_t es = kl_dtype_size(j->dt);
  int64_t first = t * j->per, last = first + j->per < j->p.outer ? first + j->per : j->p.outer;
  kl_isa_walk_seek(&w, first);
  for (int64_t r = first; r < last; r++, kl_isa_walk_next(&w))
    cmp_row(j->op, j->dt, (const char *)j->a + (size_t)w.off[0] * es, j->p.step[0],
            (const char *)j->b + (size_t)w.off[1] * es, j->p.step[1], j->y + r * j->p.inner,
            j->p.inner);
}

static bool cmp_dtype(kl_dtype t) {
  return t == KL_F32 || t == KL_F64 || t == KL_I32 || t == KL_I64;
}

static int run_compare(kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  kl_tensor *y = c->out[0];
  if (!cmp_dtype(a->dtype) || b->dtype != a->dtype || y->dtype != KL_BOOL)
    return kl_isa_ref(c);
  int64_t n = kl_tensor_numel(y);
  if (n == 0) return KILN_OK;
  cmp_job j = {.op = c->node->op, .dt = a->dtype, .a = a->data, .b = b->data, .y = y->data};
  bcast_plan_make(a, b, y, &j.p);
  int64_t tasks = row_tasks(&j.p, &j.per);
  kl_isa_parallel(c, tasks, n, cmp_task, &j);
  return KILN_OK;
}

/* ---- Max and Min of two inputs ----
 * y = fold(a, b) as the reference folds: b where it is larger (Max) or smaller (Min)
 * or NaN, else a (so a NaN in either wins). */

typedef struct minmax_job {
  bcast_plan p;
  bool max;
  kl_dtype dt;
  const void *a, *b;
  void *y;
  int64_t per;
} minmax_job;

#define MM_LOOP(T, BETTER, SA, SB)                                                       \
  for (int64_t i = 0; i < len; i++) {                                                    \
    T u = pa[i * (SA)], v = pb[i * (SB)];                                                \
    o[i] = BETTER ? v : u;                                                               \
  }
#define MM_STEPS(T, BETTER)                                                              \
  switch (sa * 2 + sb) {                                                                 \
  case 3: MM_LOOP(T, BETTER, 1, 1) break;                                                \
  case 2: MM_LOOP(T, BETTER, 1, 0) break;                                                \
  case 1: MM_LOOP(T, BETTER, 0, 1) break;                                                \
  default: MM_LOOP(T, BETTER, 0, 0) break;                                               \
  }
#define MM_ROW(T, NAN_WINS)                                                              \
  {                                                                                      \
    const T *pa = (const T *)a, *pb = (const T *)b;                                      \
    T *o = (T *)y;                                                                       \
    if (max) MM_STEPS(T, (v > u || (NAN_WINS && v != v)))                                \
    else MM_STEPS(T, (v < u || (NAN_WINS && v != v)))                                    \
  }

static void minmax_row(bool max, kl_dtype dt, const void *a, int64_t sa, const void *b,
                       int64_t sb, void *y, int64_t len) {
  switch (dt) {
  case KL_F32: MM_ROW(float, 1) break;
  case KL_I32: MM_ROW(int32_t, 0) break;
  default: MM_ROW(int64_t, 0) break;
  }
}

static void minmax_task(void *arg, int64_t t) {
  const minmax_job *j = arg;
  kl_isa_walk w = j->p.w;
  size_t es = kl_dtype_size(j->dt);
  int64_t first = t * j->per, last = first + j->per < j->p.outer ? first + j->per : j->p.outer;
  kl_isa_walk_seek(&w, first);
  for (int64_t r = first; r < last; r++, kl_isa_walk_next(&w))
    minmax_row(j->max, j->dt, (const char *)j->a + (size_t)w.off[0] * es, j->p.step[0],
               (const char *)j->b + (size_t)w.off[1] * es, j->p.step[1],
               (char *)j->y + (size_t)(r * j->p.inner) * es, j->p.inner);
}

static int run_minmax(kl_kernel_ctx *c) {
  if (c->n_in != 2 || !c->in[0] || !c->in[1]) return kl_isa_ref(c);
  const kl_tensor *a = c->in[0], *b = c->in[1];
  kl_tensor *y = c->out[0];
  kl_dtype t = a->dtype;
  if ((t != KL_F32 && t != KL_I32 && t != KL_I64) || b->dtype != t || y->dtype != t)
    return kl_isa_ref(c);
  int64_t n = kl_tensor_numel(y);
  if (n == 0) return KILN_OK;
  minmax_job j = {.max = c->node->op == KL_OP_Max, .dt = t, .a = a->data, .b = b->data,
                  .y = y->data};
  bcast_plan_make(a, b, y, &j.p);
  int64_t tasks = row_tasks(&j.p, &j.per);
  kl_isa_parallel(c, tasks, n, minmax_task, &j);
  return KILN_OK;
}

/* ---- NonZero ----
 * Y [rank, count]: the coordinates of X's non-zero elements in row-major order (shape
 * inference counted them). */

#define NZ_SCAN(T)                                                                       \
  {                                                                                      \
    const T *v = (const T *)x->data;                                                     \
    for (int64_t i = 0; i < n; i++) {                                                    \
      if (v[i] != 0 && k < count) {                                                      \
        for (int d = 0; d < rank; d++) out[d * count + k] = pos[d];                      \
        k++;                                                                             \
      }                                                                                  \
      for (int d = rank - 1; d >= 0; d--) {                                              \
        if (++pos[d] < x->dims[d]) break;                                                \
        pos[d] = 0;                                                                      \
      }                                                                                  \
    }                                                                                    \
  }

static int run_non_zero(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  kl_tensor *y = c->out[0];
  kl_dtype t = x->dtype;
  bool bytes = t == KL_BOOL || t == KL_U8 || t == KL_I8;
  if (!(bytes || t == KL_F32 || t == KL_I32 || t == KL_I64) || x->rank < 1 ||
      y->dtype != KL_I64 || y->rank != 2)
    return kl_isa_ref(c);
  int rank = x->rank;
  int64_t n = kl_tensor_numel(x), count = y->dims[1], k = 0, pos[KL_MAX_RANK] = {0};
  int64_t *out = y->data;
  if (rank == 1) { /* the common case: indices only */
    switch (t) {
    case KL_F32:
      for (int64_t i = 0; i < n && k < count; i++) if (((const float *)x->data)[i] != 0) out[k++] = i;
      break;
    case KL_I32:
      for (int64_t i = 0; i < n && k < count; i++) if (((const int32_t *)x->data)[i] != 0) out[k++] = i;
      break;
    case KL_I64:
      for (int64_t i = 0; i < n && k < count; i++) if (((const int64_t *)x->data)[i] != 0) out[k++] = i;
      break;
    default:
      for (int64_t i = 0; i < n && k < count; i++) if (((const uint8_t *)x->data)[i] != 0) out[k++] = i;
      break;
    }
    return KILN_OK;
  }
  switch (t) {
  case KL_F32: NZ_SCAN(float) break;
  case KL_I32: NZ_SCAN(int32_t) break;
  case KL_I64: NZ_SCAN(int64_t) break;
  default: NZ_SCAN(uint8_t) break;
  }
  return KILN_OK;
}

/* ---- Gather ----
 * X viewed as [outer, len, inner], Y as [outer, count, inner]: Y[o, j, :] =
 * X[o, idx[j], :]. The indices are checked (and made non-negative) first, as the
 * reference does, so that nothing is written on a bad one. */

static int run_gather(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *idx = c->in[1];
  kl_tensor *y = c->out[0];
  size_t es = kl_dtype_size(x->dtype);
  if (!index_dtype(idx->dtype) || !word_size(es) || y->dtype != x->dtype) return kl_isa_ref(c);
  int axis = kl_isa_axis(c->node, "axis", 0, x->rank);
  int64_t outer = kl_ref_span(x->dims, 0, axis), len = x->dims[axis];
  int64_t inner = kl_ref_span(x->dims, axis + 1, x->rank), count = kl_tensor_numel(idx);
  for (int64_t j = 0; j < count; j++) {
    int64_t k = load_index(idx->data, idx->dtype, j);
    if (k < -len || k >= len) return bad_index(c, k, j, len);
  }
  if (inner == 0 || outer == 0 || count == 0) return KILN_OK;
  const char *src = x->data;
  char *dst = y->data;
  if (inner == 1 && es == 4) { /* a scalar per index: the words themselves */
    const uint32_t *s = (const uint32_t *)src;
    uint32_t *d = (uint32_t *)dst;
    for (int64_t o = 0; o < outer; o++, s += len)
      for (int64_t j = 0; j < count; j++) {
        int64_t k = load_index(idx->data, idx->dtype, j);
        *d++ = s[k < 0 ? k + len : k];
      }
    return KILN_OK;
  }
  if (inner == 1 && es == 8) {
    const uint64_t *s = (const uint64_t *)src;
    uint64_t *d = (uint64_t *)dst;
    for (int64_t o = 0; o < outer; o++, s += len)
      for (int64_t j = 0; j < count; j++) {
        int64_t k = load_index(idx->data, idx->dtype, j);
        *d++ = s[k < 0 ? k + len : k];
      }
    return KILN_OK;
  }
  size_t block = (size_t)inner * es;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < count; j++, dst += block) {
      int64_t k = load_index(idx->data, idx->dtype, j);
      memcpy(dst, src + (size_t)(o * len + (k < 0 ? k + len : k)) * block, block);
    }
  return KILN_OK;
}

/* ---- Split ----
 * X as [outer, len, inner]; output k takes the next dims[axis] of every outer row, as
 * the reference (ref/data.c) does. The outputs laid end to end make one run of bytes,
 * cut into pieces of equal size for the threads; a piece copies, output by output and
 * row by row, the contiguous runs it covers (one memcpy per outer row of an output, a
 * whole output at once when outer is 1). */

typedef struct split_job {
  kl_tensor *const *out;
  int n_out, axis;
  const char *x;
  int64_t row; /* bytes of one step along the axis (the inner elements) */
  int64_t outer, len, total, per;
} split_job;

static void split_task(void *arg, int64_t t) {
  const split_job *j = arg;
  int64_t lo = t * j->per, hi = lo + j->per < j->total ? lo + j->per : j->total;
  int64_t start = 0, first = 0; /* output k's bytes begin at start, its steps at first */
  for (int k = 0; k < j->n_out && lo < hi; k++) {
    int64_t take = j->out[k]->dims[j->axis], block = take * j->row; /* bytes per outer row */
    int64_t end = start + j->outer * block;
    if (lo < end) { /* the first row may start inside; the rest are whole */
      int64_t o = (lo - start) / block, in = (lo - start) % block;
      char *dst = (char *)j->out[k]->data + (lo - start);
      const char *src = j->x + (o * j->len + first) * j->row + in;
      for (; lo < hi && lo < end; in = 0, src += j->len * j->row) {
        int64_t n = block - in < hi - lo ? block - in : hi - lo;
        memcpy(dst, src, (size_t)n);
        dst += n, lo += n;
        src -= in; /* back to the row's start for the next step */
      }
    }
    start = end;
    first += take;
  }
}

static int run_split(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  size_t es = kl_dtype_size(x->dtype);
  if (!word_size(es) || x->rank < 1 || c->n_out < 1) return kl_isa_ref(c);
  int axis = kl_isa_axis(c->node, "axis", 0, x->rank);
  if (axis < 0 || axis >= x->rank) return kl_isa_ref(c);
  split_job j = {.out = c->out, .n_out = c->n_out, .axis = axis, .x = x->data,
                 .outer = kl_ref_span(x->dims, 0, axis), .len = x->dims[axis]};
  j.row = kl_ref_span(x->dims, axis + 1, x->rank) * (int64_t)es;
  int64_t steps = 0; /* the outputs must tile X along the axis, as shape inference made them */
  for (int k = 0; k < c->n_out; k++) {
    const kl_tensor *y = c->out[k];
    if (!y || y->dtype != x->dtype || y->rank != x->rank) return kl_isa_ref(c);
    for (int d = 0; d < x->rank; d++)
      if (d != axis && y->dims[d] != x->dims[d]) return kl_isa_ref(c);
    steps += y->dims[axis];
  }
  if (steps != j.len) return kl_isa_ref(c);
  j.total = j.outer * j.len * j.row;
  if (j.total == 0) return KILN_OK;
  int64_t tasks = kl_isa_split(j.total, 4 * CHUNK, &j.per);
  kl_isa_parallel(c, tasks, j.total / (int64_t)es, split_task, &j);
  return KILN_OK;
}

/* ---- GatherND ----
 * With b batch dims: X as [batches, block], the indices as [batches, tuples, k]; Y's
 * slice (batch, tuple) is the run of X at the tuple's offset in its batch's block, one
 * memcpy each, tuples split into tasks. A task that meets an index out of range stops;
 * the first one in the indices' order is then found and named as the reference names
 * it (ref/index.c: the flat element, the range of the dim it indexes). */

typedef struct gnd_job {
  const char *x;
  char *y;
  const void *idx;
  kl_dtype idx_dt;
  int k;
  int64_t dims[KL_MAX_RANK], strides[KL_MAX_RANK]; /* of X's dims b .. b + k - 1 */
  int64_t tuples, block, slice, per, count;       /* block and slice in bytes */
  int bad;
} gnd_job;

#define GND_TUPLES(I)                                                                    \
  {                                                                                      \
    const I *ix = (const I *)j->idx + at * j->k;                                         \
    for (int64_t a = at; a < end; a++, ix += j->k) {                                     \
      int64_t off = a / j->tuples * j->block;                                            \
      for (int q = 0; q < j->k; q++) {                                                   \
        int64_t v = ix[q], len = j->dims[q];                                             \
        if (v < -len || v >= len) {                                                      \
          __atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);                                \
          return;                                                                        \
        }                                                                                \
        off += (v < 0 ? v + len : v) * j->strides[q];                                    \
      }                                                                                  \
      if (j->slice) memcpy(j->y + a * j->slice, j->x + off, (size_t)j->slice);           \
    }                                                                                    \
  }

static void gnd_task(void *arg, int64_t t) {
  gnd_job *j = arg;
  int64_t at = t * j->per, end = at + j->per < j->count ? at + j->per : j->count;
  if (j->idx_dt == KL_I64) GND_TUPLES(int64_t)
  else GND_TUPLES(int32_t)
}

static int run_gather_nd(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *idx = c->in[1];
  kl_tensor *y = c->out[0];
  size_t es = kl_dtype_size(x->dtype);
  int64_t b = kl_attr_int(c->node, "batch_dims", 0);
  if (!index_dtype(idx->dtype) || !word_size(es) || y->dtype != x->dtype || idx->rank < 1 ||
      b < 0 || b >= x->rank || b >= idx->rank)
    return kl_isa_ref(c);
  int bd = (int)b;
  int64_t k = idx->dims[idx->rank - 1];
  if (k < 1 || k > x->rank - bd) return kl_isa_ref(c);
  for (int d = 0; d < bd; d++)
    if (idx->dims[d] != x->dims[d]) return kl_isa_ref(c);
  gnd_job j = {.x = x->data, .y = y->data, .idx = idx->data, .idx_dt = idx->dtype, .k = (int)k};
  int64_t s = (int64_t)es;
  for (int d = x->rank - 1; d >= bd; d--) {
    if (d < bd + k) j.dims[d - bd] = x->dims[d], j.strides[d - bd] = s;
    s *= x->dims[d];
  }
  j.block = s;
  j.slice = kl_ref_span(x->dims, bd + j.k, x->rank) * (int64_t)es;
  j.tuples = kl_ref_span(idx->dims, bd, idx->rank - 1);
  j.count = kl_ref_span(x->dims, 0, bd) * j.tuples;
  if (kl_tensor_numel(y) * (int64_t)es != j.count * j.slice) return kl_isa_ref(c);
  if (j.count == 0) return KILN_OK;
  /* empty slices: nothing to copy, yet the indices are checked (as the reference) */
  int64_t tasks = kl_isa_split(j.count, 4 * CHUNK / (j.slice + k * 8) + 1, &j.per);
  kl_isa_parallel(c, tasks, j.count * (j.slice / (int64_t)es + k), gnd_task, &j);
  if (!__atomic_load_n(&j.bad, __ATOMIC_RELAXED)) return KILN_OK;
  for (int64_t i = 0; i < j.count * k; i++) {
    int64_t v = load_index(idx->data, idx->dtype, i), len = j.dims[i % k];
    if (v < -len || v >= len) return bad_index(c, v, i, len);
  }
  return KILN_OK;
}

/* ---- GatherElements ----
 * Y (the indices' shape)[i] = X[i with the axis coordinate replaced by indices[i]]:
 * rows along the indices' last dim, each at its offset in X without the axis' part;
 * along the last axis a row reads X's row at the indices, along another it steps
 * through X's columns. Rows split into tasks; a bad index as in GatherND. */

typedef struct ge_job {
  const char *x;
  char *y;
  const void *idx;
  kl_dtype idx_dt;
  size_t es;
  int rank, axis;
  int64_t idims[KL_MAX_RANK], xs[KL_MAX_RANK]; /* X's element strides */
  int64_t last, len, rows, per;
  int bad;
} ge_job;

/* One row of `last` elements: T the element word, I the index word; STEP the step
 * along the row in X (1 along the last axis, where the index's stride is 1 too). */
#define GE_ROW(T, I)                                                                     \
  {                                                                                      \
    const I *ix = (const I *)j->idx + r * last;                                          \
    const T *xx = (const T *)j->x + base;                                                \
    T *yy = (T *)j->y + r * last;                                                        \
    if (along_last) {                                                                    \
      for (int64_t i = 0; i < last; i++) {                                               \
        int64_t v = ix[i];                                                               \
        if (v < -len || v >= len) goto bad;                                              \
        yy[i] = xx[v < 0 ? v + len : v];                                                 \
      }                                                                                  \
    } else {                                                                             \
      for (int64_t i = 0; i < last; i++) {                                               \
        int64_t v = ix[i];                                                               \
        if (v < -len || v >= len) goto bad;                                              \
        yy[i] = xx[(v < 0 ? v + len : v) * step + i];                                   \
      }                                                                                  \
    }                                                                                    \
  }
#define GE_ROWS(T)                                                                       \
  if (j->idx_dt == KL_I64) GE_ROW(T, int64_t) else GE_ROW(T, int32_t)

static void ge_task(void *arg, int64_t t) {
  ge_job *j = arg;
  int64_t r0 = t * j->per, r1 = r0 + j->per < j->rows ? r0 + j->per : j->rows;
  int64_t pos[KL_MAX_RANK] = {0}, rest = r0, last = j->last, len = j->len;
  int64_t step = j->xs[j->axis];
  bool along_last = j->axis == j->rank - 1;
  for (int d = j->rank - 2; d >= 0; d--) pos[d] = rest % j->idims[d], rest /= j->idims[d];
  for (int64_t r = r0; r < r1; r++) {
    int64_t base = 0; /* the row's offset in X, without the axis' part */
    for (int d = 0; d < j->rank - 1; d++)
      if (d != j->axis) base += pos[d] * j->xs[d];
    switch (j->es) {
    case 1: GE_ROWS(uint8_t) break;
    case 2: GE_ROWS(uint16_t) break;
    case 4: GE_ROWS(uint32_t) break;
    default: GE_ROWS(uint64_t) break;
    }
    for (int d = j->rank - 2; d >= 0; d--) { /* the next row of the indices */
      if (++pos[d] < j->idims[d]) break;
      pos[d] = 0;
    }
  }
  return;
bad:
  __atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);
}

static int run_gather_elements(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *idx = c->in[1];
  kl_tensor *y = c->out[0];
  size_t es = kl_dtype_size(x->dtype);
  if (!index_dtype(idx->dtype) || !word_size(es) || y->dtype != x->dtype || x->rank < 1 ||
      idx->rank != x->rank || kl_tensor_numel(y) != kl_tensor_numel(idx))
    return kl_isa_ref(c);
  int rank = x->rank, axis = kl_isa_axis(c->node, "axis", 0, rank);
  if (axis < 0 || axis >= rank) return kl_isa_ref(c);
  for (int d = 0; d < rank; d++)
    if (d != axis && idx->dims[d] > x->dims[d]) return kl_isa_ref(c);
  ge_job j = {.x = x->data, .y = y->data, .idx = idx->data, .idx_dt = idx->dtype, .es = es,
              .rank = rank, .axis = axis, .last = idx->dims[rank - 1], .len = x->dims[axis]};
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) j.xs[d] = s, s *= x->dims[d], j.idims[d] = idx->dims[d];
  int64_t n = kl_tensor_numel(idx);
  if (n == 0) return KILN_OK;
  j.rows = n / j.last;
  int64_t tasks = kl_isa_split(j.rows, CHUNK / j.last + 1, &j.per);
  kl_isa_parallel(c, tasks, n, ge_task, &j);
  if (!__atomic_load_n(&j.bad, __ATOMIC_RELAXED)) return KILN_OK;
  for (int64_t i = 0; i < n; i++) {
    int64_t v = load_index(idx->data, idx->dtype, i);
    if (v < -j.len || v >= j.len) return bad_index(c, v, i, j.len);
  }
  return KILN_OK;
}

/* ---- ScatterElements (reduction none) ----
 * Y = data; then Y[i with the axis coordinate replaced by indices[i]] = updates[i], in
 * the order of the updates (a later duplicate wins). Two updates can land on one
 * element only when they differ in the axis coordinate alone, so when the indices'
 * dims after the axis are Y's (torchvision's MultiScaleRoIAlign: [R, 256, 7, 7] along
 * axis 0), the indices are [outer, A, inner] with Y's [.., len, inner] under them,
 * and the columns (outer, inner position) are split into tasks on the node's
 * threads, each walking A in order. A bad index stops its task; the first one in the
 * indices' order is then found and named, as the reference names it. Otherwise rows
 * along the last dim, in order, on one thread. */

typedef struct scatter_job {
  const void *idx, *u;
  kl_dtype idx_dt;
  void *y;
  size_t es;
  int axis;
  int64_t outer_dims[KL_MAX_RANK], ys[KL_MAX_RANK];
  int64_t a_len, inner, len, per, columns;
  int bad; /* set (relaxed) by a task that met an index out of range */
} scatter_job;

#define SCATTER_COLS(T)                                                                  \
  {                                                                                      \
    const T *u = (const T *)j->u;                                                        \
    T *yy = (T *)j->y;                                                                   \
    for (int64_t a = 0; a < j->a_len; a++) {                                             \
      int64_t at = (o * j->a_len + a) * j->inner;                                        \
      for (int64_t i = i0; i < i1; i++) {                                                \
        int64_t k = load_index(j->idx, j->idx_dt, at + i);                               \
        if (k < -j->len || k >= j->len) {                                                \
          __atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);                                \
          return;                                                                        \
        }                                                                                \
        k += k < 0 ? j->len : 0;                                                         \
        yy[base + k * j->inner + i] = u[at + i];                                         \
      }                                                                                  \
    }                                                                                    \
  }

static void scatter_task(void *arg, int64_t t) {
  scatter_job *j = arg;
  int64_t c = t * j->per, end = c + j->per < j->columns ? c + j->per : j->columns;
  while (c < end) {
    int64_t o = c / j->inner, i0 = c % j->inner;
    int64_t i1 = i0 + (end - c) < j->inner ? i0 + (end - c) : j->inner;
    int64_t base = 0, rest = o; /* Y's offset of outer position o */
    for (int d = j->axis - 1; d >= 0; d--) {
      base += rest % j->outer_dims[d] * j->ys[d];
      rest /= j->outer_dims[d];
    }
    switch (j->es) {
    case 1: SCATTER_COLS(uint8_t) break;
    case 2: SCATTER_COLS(uint16_t) break;
    case 4: SCATTER_COLS(uint32_t) break;
    default: SCATTER_COLS(uint64_t) break;
    }
    c += i1 - i0;
  }
}

/* The indices' dims after the axis are Y's: the columns run. */
static bool scatter_columns(kl_kernel_ctx *c, const kl_tensor *idx, const kl_tensor *y,
                            int axis, const int64_t *ys, int *st) {
  scatter_job j = {.idx = idx->data, .u = c->in[2]->data, .idx_dt = idx->dtype,
                   .y = y->data, .es = kl_dtype_size(y->dtype), .axis = axis,
                   .a_len = idx->dims[axis], .inner = 1, .len = y->dims[axis]};
  for (int d = axis + 1; d < y->rank; d++) {
    if (idx->dims[d] != y->dims[d]) return false;
    j.inner *= y->dims[d];
  }
  int64_t outer = 1;
  for (int d = 0; d < axis; d++) {
    j.outer_dims[d] = idx->dims[d], j.ys[d] = ys[d];
    outer *= idx->dims[d];
  }
  j.columns = outer * j.inner;
  int64_t n = j.columns * j.a_len;
  int64_t tasks = kl_isa_split(j.columns, CHUNK / (j.a_len > 0 ? j.a_len : 1) + 1, &j.per);
  kl_isa_parallel(c, tasks, n, scatter_task, &j);
  *st = KILN_OK;
  if (__atomic_load_n(&j.bad, __ATOMIC_RELAXED))
    for (int64_t i = 0; i < n; i++) {
      int64_t k = load_index(idx->data, idx->dtype, i);
      if (k < -j.len || k >= j.len) {
        *st = bad_index(c, k, i, j.len);
        break;
      }
    }
  return true;
}

#define SCATTER_ROW(T)                                                                   \
  {                                                                                      \
    const T *u = (const T *)upd + r * last;                                              \
    T *yy = (T *)y->data;                                                                \
    for (int64_t i = 0; i < last; i++) {                                                 \
      int64_t k = load_index(idx->data, idx->dtype, r * last + i);                       \
      if (k < -len || k >= len) return bad_index(c, k, r * last + i, len);               \
      k += k < 0 ? len : 0;                                                              \
      yy[base + (along_last ? k : i + k * ys[axis])] = u[i];                             \
    }                                                                                    \
  }

static int run_scatter_elements(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *idx = c->in[1], *u = c->in[2];
  kl_tensor *y = c->out[0];
  size_t es = kl_dtype_size(x->dtype);
  if (!index_dtype(idx->dtype) || !word_size(es) || u->dtype != x->dtype ||
      y->dtype != x->dtype || x->rank < 1 || idx->rank != x->rank ||
      strcmp(kl_attr_string(c->node, "reduction", "none"), "none") != 0)
    return kl_isa_ref(c);
  int rank = x->rank, axis = kl_isa_axis(c->node, "axis", 0, rank);
  if (y->data != x->data) memcpy(y->data, x->data, kl_tensor_nbytes(x));
  int64_t n = kl_tensor_numel(idx);
  if (n == 0) return KILN_OK;
  int64_t ys[KL_MAX_RANK], s = 1;
  for (int d = rank - 1; d >= 0; d--) ys[d] = s, s *= y->dims[d];
  int st;
  if (scatter_columns(c, idx, y, axis, ys, &st)) return st;
  int64_t last = idx->dims[rank - 1], rows = n / last, len = y->dims[axis];
  bool along_last = axis == rank - 1;
  int64_t pos[KL_MAX_RANK] = {0};
  const void *upd = u->data;
  for (int64_t r = 0; r < rows; r++) {
    int64_t base = 0; /* the row's offset in Y, without the axis' part */
    for (int d = 0; d < rank - 1; d++)
      if (d != axis) base += pos[d] * ys[d];
    switch (es) {
    case 1: SCATTER_ROW(uint8_t) break;
    case 2: SCATTER_ROW(uint16_t) break;
    case 4: SCATTER_ROW(uint32_t) break;
    default: SCATTER_ROW(uint64_t) break;
    }
    for (int d = rank - 2; d >= 0; d--) { /* the next row of the indices */
      if (++pos[d] < idx->dims[d]) break;
      pos[d] = 0;
    }
  }
  return KILN_OK;
}

/* ---- RoiAlign ----
 * X [N, C, H, W] float32, rois [R, 4] float32, batch_indices [R] -> Y [R, C, oh, ow],
 * as the reference (ref/more.c) states it. A sample's position along y depends only
 * on its bin row and grid row, along x only on its bin column and grid column, and
 * the bilinear weights are products of a y and an x weight; so each roi's taps are
 * worked out once per axis (rows: the two rows' offsets and weights of each of the
 * oh * grid_h sample rows; columns the same), in double as the reference does, and
 * each channel's bins then read four pixels per sample, weighted in float. A task is
 * a roi and a run of channels. Rois whose sample rows or columns outnumber the
 * stacks' tables run the reference. */

#define ROI_TAPS 1024 /* sample rows (or columns) of one roi, at most */

typedef struct roi_tap {
  int64_t at0, at1; /* offsets of the two rows (y * W) or columns */
  float w0, w1;     /* their weights; both 0 for a sample outside X */
} roi_tap;

typedef struct roi_box {
  double start_y, start_x, bin_h, bin_w;
  int64_t grid_h, grid_w;
} roi_box;

typedef struct roi_job {
  kl_roi_align r;
  const float *x, *rois;
  const void *idx;
  kl_dtype idx_dt;
  float *y;
  int64_t channels, h, w, ch_per, ch_tasks;
} roi_job;

/* Roi i's geometry (the reference's roi_geometry); false when it samples more than the
 * reference allows. */
static bool roi_box_of(const roi_job *j, int64_t i, roi_box *b) {
  const kl_roi_align *r = &j->r;
  double v[4], offset = r->half_pixel ? 0.5 : 0;
  for (int k = 0; k < 4; k++) v[k] = (double)j->rois[i * 4 + k] * r->spatial_scale - offset;
  double roi_w = v[2] - v[0], roi_h = v[3] - v[1];
  if (!r->half_pixel) roi_w = fmax(roi_w, 1), roi_h = fmax(roi_h, 1);
  b->start_x = v[0], b->start_y = v[1];
  b->bin_h = roi_h / (double)r->out_h, b->bin_w = roi_w / (double)r->out_w;
  double gh = r->sampling_ratio > 0 ? (double)r->sampling_ratio : ceil(b->bin_h);
  double gw = r->sampling_ratio > 0 ? (double)r->sampling_ratio : ceil(b->bin_w);
  b->grid_h = b->grid_w = 0;
  if (!(gh <= 4096 && gw <= 4096)) return false; /* (NaN too: the reference's 0s) */
  b->grid_h = gh > 0 ? (int64_t)gh : 0, b->grid_w = gw > 0 ? (int64_t)gw : 0;
  return true;
}

/* The taps of the bins * grid samples along one axis of size `size` (stride: the
 * offset of one step along it). */
static void roi_axis_taps(double start, double bin, int64_t bins, int64_t grid, int64_t size,
                          int64_t stride, roi_tap *t) {
  for (int64_t p = 0; p < bins; p++)
    for (int64_t g = 0; g < grid; g++, t++) {
      double v = start + (double)p * bin + ((double)g + 0.5) * bin / (double)grid;
      if (size <= 0 || !(v >= -1 && v <= (double)size)) {
        *t = (roi_tap){0, 0, 0.0f, 0.0f};
        continue;
      }
      v = fmax(v, 0);
      int64_t lo = (int64_t)v, hi = lo + 1;
      if (lo >= size - 1) lo = hi = size - 1, v = (double)lo;
      double l = v - (double)lo;
      *t = (roi_tap){lo * stride, hi * stride, (float)(1 - l), (float)l};
    }
}

static inline float roi_max4(float a, float b, float c, float d) {
  float m = a > b ? a : b, n = c > d ? c : d;
  return m > n ? m : n;
}

/* One weighted corner of the max mode: 0 where the weight is (as the reference). */
static inline float roi_corner(float w, float v) { return w == 0.0f ? 0.0f : w * v; }

static void roi_channel(const roi_job *j, const roi_box *b, const roi_tap *ty,
                        const roi_tap *tx, const float *plane, float *out) {
  int64_t gh = b->grid_h, gw = b->grid_w, count = gh * gw;
  float inv = 1.0f / (float)(count > 1 ? count : 1);
  for (int64_t ph = 0; ph < j->r.out_h; ph++)
    for (int64_t pw = 0; pw < j->r.out_w; pw++) {
      const roi_tap *ry = ty + ph * gh, *rx0 = tx + pw * gw;
      float acc = 0.0f;
      if (!j->r.max_mode) {
        for (int64_t iy = 0; iy < gh; iy++, ry++) {
          const float *r0 = plane + ry->at0, *r1 = plane + ry->at1;
          float row = 0.0f;
          for (int64_t ix = 0; ix < gw; ix++) {
            const roi_tap *rx = rx0 + ix;
            float top = rx->w0 * r0[rx->at0] + rx->w1 * r0[rx->at1];
            float bot = rx->w0 * r1[rx->at0] + rx->w1 * r1[rx->at1];
            row += ry->w0 * top + ry->w1 * bot;
          }
          acc += row;
        }
        *out++ = acc * inv;
        continue;
      }
      for (int64_t iy = 0; iy < gh; iy++, ry++) {
        const float *r0 = plane + ry->at0, *r1 = plane + ry->at1;
        for (int64_t ix = 0; ix < gw; ix++) {
          const roi_tap *rx = rx0 + ix;
          float v = roi_max4(roi_corner(ry->w0 * rx->w0, r0[rx->at0]),
                             roi_corner(ry->w0 * rx->w1, r0[rx->at1]),
                             roi_corner(ry->w1 * rx->w0, r1[rx->at0]),
                             roi_corner(ry->w1 * rx->w1, r1[rx->at1]));
          acc = iy == 0 && ix == 0 ? v : acc > v ? acc : v;
        }
      }
      *out++ = acc;
    }
}

/* A roi of few samples (bins x grid, up to ROI_SAMPLES, Faster R-CNN's 7 x 7 x 2 x 2)
 * goes through a table of each sample's four corners and their weights (the y
 * weight times the x weight), made once for all its channels, so that a channel's
 * bin is a run of loads and multiply-adds. */
#define ROI_SAMPLES 1024

typedef struct roi_sample4 {
  int32_t at[4]; /* offsets in the plane (the plane fits int32: the driver checks) */
  float w[4];
} roi_sample4;

static void roi_samples(const roi_job *j, const roi_box *b, const roi_tap *ty,
                        const roi_tap *tx, roi_sample4 *s) {
  for (int64_t ph = 0; ph < j->r.out_h; ph++)
    for (int64_t pw = 0; pw < j->r.out_w; pw++)
      for (int64_t iy = 0; iy < b->grid_h; iy++)
        for (int64_t ix = 0; ix < b->grid_w; ix++, s++) {
          const roi_tap *ry = ty + ph * b->grid_h + iy, *rx = tx + pw * b->grid_w + ix;
          s->at[0] = (int32_t)(ry->at0 + rx->at0), s->at[1] = (int32_t)(ry->at0 + rx->at1);
          s->at[2] = (int32_t)(ry->at1 + rx->at0), s->at[3] = (int32_t)(ry->at1 + rx->at1);
          s->w[0] = ry->w0 * rx->w0, s->w[1] = ry->w0 * rx->w1;
          s->w[2] = ry->w1 * rx->w0, s->w[3] = ry->w1 * rx->w1;
        }
}

static void roi_channel_table(const roi_job *j, int64_t count, const roi_sample4 *s,
                              const float *p, float *out) {
  int64_t bins = j->r.out_h * j->r.out_w;
  float inv = 1.0f / (float)(count > 1 ? count : 1);
  if (!j->r.max_mode) {
    for (int64_t bin = 0; bin < bins; bin++) {
      float acc = 0.0f;
      for (int64_t k = 0; k < count; k++, s++)
        acc += s->w[0] * p[s->at[0]] + s->w[1] * p[s->at[1]] + s->w[2] * p[s->at[2]] +
               s->w[3] * p[s->at[3]];
      out[bin] = acc * inv;
    }
    return;
  }
  for (int64_t bin = 0; bin < bins; bin++) {
    float acc = 0.0f;
    for (int64_t k = 0; k < count; k++, s++) {
      float v = roi_max4(roi_corner(s->w[0], p[s->at[0]]), roi_corner(s->w[1], p[s->at[1]]),
                         roi_corner(s->w[2], p[s->at[2]]), roi_corner(s->w[3], p[s->at[3]]));
      acc = k == 0 ? v : acc > v ? acc : v;
    }
    out[bin] = acc;
  }
}

static void roi_task(void *arg, int64_t t) {
  const roi_job *j = arg;
  int64_t i = t / j->ch_tasks, c0 = t % j->ch_tasks * j->ch_per;
  int64_t c1 = c0 + j->ch_per < j->channels ? c0 + j->ch_per : j->channels;
  roi_box b;
  roi_box_of(j, i, &b); /* checked by the driver */
  roi_tap ty[ROI_TAPS], tx[ROI_TAPS];
  roi_axis_taps(b.start_y, b.bin_h, j->r.out_h, b.grid_h, j->h, j->w, ty);
  roi_axis_taps(b.start_x, b.bin_w, j->r.out_w, b.grid_w, j->w, 1, tx);
  int64_t batch = load_index(j->idx, j->idx_dt, i), plane = j->h * j->w;
  int64_t bins = j->r.out_h * j->r.out_w, count = b.grid_h * b.grid_w;
  if (bins * count <= ROI_SAMPLES && plane <= INT32_MAX) {
    roi_sample4 s[ROI_SAMPLES];
    roi_samples(j, &b, ty, tx, s);
    for (int64_t ch = c0; ch < c1; ch++)
      roi_channel_table(j, count, s, j->x + (batch * j->channels + ch) * plane,
                        j->y + (i * j->channels + ch) * bins);
    return;
  }
  for (int64_t ch = c0; ch < c1; ch++)
    roi_channel(j, &b, ty, tx, j->x + (batch * j->channels + ch) * plane,
                j->y + (i * j->channels + ch) * bins);
}

static int run_roi_align(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *rois = c->in[1], *idx = c->in[2];
  kl_tensor *y = c->out[0];
  if (x->dtype != KL_F32 || rois->dtype != KL_F32 || y->dtype != KL_F32 ||
      !index_dtype(idx->dtype) || x->rank != 4)
    return kl_isa_ref(c);
  roi_job j = {.x = x->data, .rois = rois->data, .idx = idx->data, .idx_dt = idx->dtype,
               .y = y->data, .channels = x->dims[1], .h = x->dims[2], .w = x->dims[3]};
  kl_err quiet = {0}; /* attributes shape inference refused never get here */
  if (kl_roi_align_init(c->node, &j.r, &quiet) != KILN_OK) return kl_isa_ref(c);
  int64_t n_rois = y->dims[0], samples = 0;
  /* every roi's tables must fit the stack, and its batch index name a batch of X */
  for (int64_t i = 0; i < n_rois; i++) {
    roi_box b;
    int64_t batch = load_index(j.idx, j.idx_dt, i);
    if (!roi_box_of(&j, i, &b) || j.r.out_h * b.grid_h > ROI_TAPS ||
        j.r.out_w * b.grid_w > ROI_TAPS || batch < 0 || batch >= x->dims[0])
      return kl_isa_ref(c);
    samples += b.grid_h * b.grid_w;
  }
  if (n_rois == 0 || j.channels == 0) return KILN_OK;
  /* runs of channels: enough tasks for the threads when the rois are few */
  int threads = kl_isa_threads(c);
  j.ch_per = j.channels;
  if (n_rois < 4 * threads) {
    int64_t want = (4 * threads + n_rois - 1) / n_rois;
    j.ch_per = (j.channels + want - 1) / want;
  }
  j.ch_tasks = (j.channels + j.ch_per - 1) / j.ch_per;
  int64_t work = samples * j.r.out_h * j.r.out_w * j.channels * 4;
  kl_isa_parallel(c, n_rois * j.ch_tasks, work, roi_task, &j);
  return KILN_OK;
}

/* ---- bound to every level (kernels.c) ---- */

/* ---- TopK ----
 * float32 X along its last axis: per row a heap of the k best kept so far in the
 * outputs themselves (the worst at the root; a later element enters only when it ranks
 * strictly above it, so equal values keep the earlier index), then heap-sorted best
 * first: O(n log k) where the reference inserts into a sorted list (O(n k)). The order
 * is the reference's: NaN above every number (cmp_elem), ties by increasing index. */
typedef struct topk_job {
  const float *x;
  float *v;
  int64_t *ix;
  int64_t len, k, rows, per;
  int sign;
} topk_job;

static int topk_cmp(float a, float b) {
  if (isnan(a) || isnan(b)) return (int)isnan(a) - (int)isnan(b);
  return (a > b) - (a < b);
}

/* Whether entry a (value va, index ia) ranks above entry b. */
static bool topk_better(int sign, float va, int64_t ia, float vb, int64_t ib) {
  int c = sign * topk_cmp(va, vb);
  return c > 0 || (c == 0 && ia < ib);
}

static void topk_sift_down(const topk_job *j, float *v, int64_t *ix, int64_t n, int64_t p) {
  for (;;) {
    int64_t w = p, l = 2 * p + 1, r = l + 1;
    if (l < n && topk_better(j->sign, v[w], ix[w], v[l], ix[l])) w = l;
    if (r < n && topk_better(j->sign, v[w], ix[w], v[r], ix[r])) w = r;
    if (w == p) return;
    float tv = v[p];
    int64_t ti = ix[p];
    v[p] = v[w], ix[p] = ix[w], v[w] = tv, ix[w] = ti;
    p = w;
  }
}

static void topk_row(const topk_job *j, int64_t row) {
  const float *x = j->x + row * j->len;
  float *v = j->v + row * j->k;
  int64_t *ix = j->ix + row * j->k, n = 0;
  for (int64_t e = 0; e < j->len; e++) {
    if (n < j->k) { /* sift up: the worse rises to the root */
      int64_t p = n++;
      while (p > 0 && topk_better(j->sign, v[(p - 1) / 2], ix[(p - 1) / 2], x[e], e)) {
        v[p] = v[(p - 1) / 2], ix[p] = ix[(p - 1) / 2];
        p = (p - 1) / 2;
      }
      v[p] = x[e], ix[p] = e;
    } else if (j->k > 0 && topk_better(j->sign, x[e], e, v[0], ix[0])) {
      v[0] = x[e], ix[0] = e;
      topk_sift_down(j, v, ix, n, 0);
    }
  }
  for (int64_t m = n - 1; m > 0; m--) { /* the worst to the back: best first */
    float tv = v[0];
    int64_t ti = ix[0];
    v[0] = v[m], ix[0] = ix[m], v[m] = tv, ix[m] = ti;
    topk_sift_down(j, v, ix, m, 0);
  }
}

static void topk_task(void *arg, int64_t t) {
  const topk_job *j = arg;
  int64_t end = (t + 1) * j->per < j->rows ? (t + 1) * j->per : j->rows;
  for (int64_t r = t * j->per; r < end; r++) topk_row(j, r);
}

static int run_topk(kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0];
  int64_t axis = kl_attr_int(c->node, "axis", -1);
  if (axis < 0) axis += x->rank;
  if (x->dtype != KL_F32 || c->n_out < 2 || !c->out[0] || !c->out[1] ||
      c->out[1]->dtype != KL_I64 || axis != x->rank - 1 || x->rank < 1)
    return kl_isa_ref(c);
  topk_job j = {x->data, c->out[0]->data, c->out[1]->data, x->dims[x->rank - 1],
                c->out[0]->dims[x->rank - 1], 0, 0,
                kl_attr_int(c->node, "largest", 1) != 0 ? 1 : -1};
  if (j.k > j.len) return kl_isa_ref(c); /* the reference names it */
  j.rows = j.len ? kl_tensor_numel(x) / j.len : 0;
  if (j.rows == 0 || j.k == 0) return KILN_OK;
  int64_t tasks = kl_isa_split(j.rows, CHUNK / (j.len + 1) + 1, &j.per);
  kl_isa_parallel(c, tasks, j.rows * j.len * 4, topk_task, &j);
  return KILN_OK;
}

int kl_run_detect(kl_kernel_ctx *c, const kl_isa_fns *f) {
  switch (c->node->op) {
  case KL_OP_RoiAlign: return run_roi_align(c);
  case KL_OP_ScatterElements: return run_scatter_elements(c);
  case KL_OP_Expand: return run_expand(c);
  case KL_OP_Resize: return kl_run_resize(c, f);
  case KL_OP_ConstantOfShape: return run_constant_of_shape(c);
  case KL_OP_Gather: return run_gather(c);
  case KL_OP_GatherND: return run_gather_nd(c);
  case KL_OP_GatherElements: return run_gather_elements(c);
  case KL_OP_Split: return run_split(c);
  case KL_OP_Max: case KL_OP_Min: return run_minmax(c);
  case KL_OP_NonZero: return run_non_zero(c);
  case KL_OP_TopK: return run_topk(c);
  case KL_OP_Equal: case KL_OP_Less: case KL_OP_Greater: case KL_OP_LessOrEqual:
  case KL_OP_GreaterOrEqual:
    return run_compare(c);
  default: return kl_isa_ref(c);
  }
}
