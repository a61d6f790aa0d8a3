/* Where (Cond, X, Y) and the logical And, Or, Xor over bool, with numpy broadcasting
 * of up to three operands, spread over the node's threads: the mask arithmetic of
 * transformer exports (a [B, 1, S, S] attention mask made by Where from a [B, S] one),
 * which the reference kernels walk one element and one broadcast iterator step at a
 * time. Plain C, the same at every level: the loops move bytes, bound by memory.
 *
 * The output's shape is collapsed as the binary driver does (run_eltwise.c): size-1
 * dims dropped, neighbours merged where every operand walks them as one; the last dim
 * is a row, each operand advancing by 0 or 1 along it; the rows are split into tasks.
 * Where copies elements of 1, 2, 4 or 8 bytes (any dtype of those sizes), picking by
 * Cond != 0; And, Or, Xor read their operands as "not zero" and write 0 or 1, as the
 * reference kernels do. */
#include "backends/cpu/isa/run.h"
#include "backends/cpu/ref/ref.h"

#include <string.h>

#define CHUNK 16384 /* output elements per task */

typedef struct sel_job {
  kl_op op;
  int n;              /* operands: 3 for Where (Cond, X, Y), 2 for the logical ops */
  const char *in[3];
  size_t es[3];       /* operand element sizes (Cond and the logical ops': 1) */
  char *y;
  size_t yes;         /* output element size */
  int rank;           /* outer dims */
  int64_t dims[KL_MAX_RANK], stride[3][KL_MAX_RANK];
  int64_t inner, step[3], outer, per;
} sel_job;

static void plan(sel_job *j, const kl_tensor *const *in, const kl_tensor *y) {
  int64_t st[3][KL_MAX_RANK], dims[KL_MAX_RANK], m_st[3][KL_MAX_RANK];
  for (int k = 0; k < j->n; k++) kl_isa_bcast_strides(in[k], y, st[k]);
  int m = 0;
  for (int d = 0; d < y->rank; d++) {
    if (y->dims[d] == 1) continue;
    bool merge = m > 0;
    for (int k = 0; k < j->n && merge; k++) merge = m_st[k][m - 1] == st[k][d] * y->dims[d];
    if (merge) {
      dims[m - 1] *= y->dims[d];
      for (int k = 0; k < j->n; k++) m_st[k][m - 1] = st[k][d];
      continue;
    }
    dims[m] = y->dims[d];
    for (int k = 0; k < j->n; k++) m_st[k][m] = st[k][d];
    m++;
  }
  if (m == 0) { /* one element */
    dims[0] = 1;
    for (int k = 0; k < j->n; k++) m_st[k][0] = 0;
    m = 1;
  }
  j->inner = dims[m - 1];
  for (int k = 0; k < j->n; k++) j->step[k] = m_st[k][m - 1];
  j->rank = m - 1;
  j->outer = 1;
  for (int d = 0; d < m - 1; d++) {
    j->dims[d] = dims[d];
    for (int k = 0; k < j->n; k++) j->stride[k][d] = m_st[k][d];
    j->outer *= dims[d];
  }
}

/* Where over one row of len elements: Cond steps by sc, X by sx, Y by sy, each 0 or 1;
 * written out per combination of steps, so that the compiler sees constant strides
 * (and turns the select into a blend) rather than multiplies by a run-time step. */
#define WHERE_LOOP(T, SC, SX, SY)                                                        \
  for (int64_t i = 0; i < len; i++) {                                                    \
    T a = x[i * (SX)], b = yy[i * (SY)];                                                 \
    o[i] = c[i * (SC)] ? a : b;                                                          \
  }
#define WHERE_ROW(T)                                                                     \
  {                                                                                      \
    const T *x = (const T *)px, *yy = (const T *)py;                                     \
    T *o = (T *)out;                                                                     \
    switch (sc * 4 + sx * 2 + sy) {                                                      \
    case 0: WHERE_LOOP(T, 0, 0, 0) break;                                                \
    case 1: WHERE_LOOP(T, 0, 0, 1) break;                                                \
    case 2: WHERE_LOOP(T, 0, 1, 0) break;                                                \
    case 3: WHERE_LOOP(T, 0, 1, 1) break;                                                \
    case 4: WHERE_LOOP(T, 1, 0, 0) break;                                                \
    case 5: WHERE_LOOP(T, 1, 0, 1) break;                                                \
    case 6: WHERE_LOOP(T, 1, 1, 0) break;                                                \
    default: WHERE_LOOP(T, 1, 1, 1) break;                                               \
    }                                                                                    \
  }

static void where_row(const uint8_t *c, int64_t sc, const char *px, int64_t sx, const char *py,
                      int64_t sy, char *out, size_t es, int64_t len) {
  switch (es) {
  case 1: WHERE_ROW(uint8_t) break;
  case 2: WHERE_ROW(uint16_t) break;
  case 4: WHERE_ROW(uint32_t) break;
  default: WHERE_ROW(uint64_t) break;
  }
}

/* And, Or, Xor over one row, the steps (0 or 1) constants of each loop as in
 * WHERE_ROW: with run-time steps the loop took 4 to 5 cycles an element (BERT's mask,
 * [1, 1, S, 1] & [B, 1, 1, S], 0.76 ms at B = 32, S = 128 on one Zen 3 core). */
#define LOGIC_LOOP(OPR, SA, SB)                                                          \
  for (int64_t i = 0; i < len; i++) out[i] = (a[i * (SA)] != 0) OPR(b[i * (SB)] != 0);
#define LOGIC_ROW(OPR)                                                                   \
  switch (sa * 2 + sb) {                                                                 \
  case 0: LOGIC_LOOP(OPR, 0, 0) break;                                                   \
  case 1: LOGIC_LOOP(OPR, 0, 1) break;                                                   \
  case 2: LOGIC_LOOP(OPR, 1, 0) break;                                                   \
  default: LOGIC_LOOP(OPR, 1, 1) break;                                                  \
  }

static void logic_row(kl_op op, const uint8_t *a, int64_t sa, const uint8_t *b, int64_t sb,
                      uint8_t *out, int64_t len) {
  if (op == KL_OP_And) LOGIC_ROW(&)
  else if (op == KL_OP_Or) LOGIC_ROW(|)
  else LOGIC_ROW(^)
}

static void task(void *arg, int64_t t) {
  const sel_job *j = arg;
  int64_t first = t * j->per, last = first + j->per < j->outer ? first + j->per : j->outer;
  for (int64_t row = first; row < last; row++) {
    int64_t off[3] = {0, 0, 0}, rest = row;
    for (int d = j->rank - 1; d >= 0; d--) {
      int64_t i = rest % j->dims[d];
      rest /= j->dims[d];
      for (int k = 0; k < j->n; k++) off[k] += i * j->stride[k][d];
    }
    char *out = j->y + (size_t)(row * j->inner) * j->yes;
    if (j->op == KL_OP_Where)
      where_row((const uint8_t *)j->in[0] + off[0], j->step[0], j->in[1] + (size_t)off[1] * j->es[1],
                j->step[1], j->in[2] + (size_t)off[2] * j->es[2], j->step[2], out, j->yes,
                j->inner);
    else
      logic_row(j->op, (const uint8_t *)j->in[0] + off[0], j->step[0],
                (const uint8_t *)j->in[1] + off[1], j->step[1], (uint8_t *)out, j->inner);
  }
}

int kl_run_select(kl_kernel_ctx *c, const kl_isa_fns *f) {
  (void)f;
  kl_tensor *y = c->out[0];
  bool where = c->node->op == KL_OP_Where;
  int n = where ? 3 : 2;
  size_t es = kl_dtype_size(y->dtype);
  if (c->n_in < n || y->rank > KL_MAX_RANK) return kl_isa_ref(c);
  for (int k = 0; k < n; k++) {
    const kl_tensor *t = c->in[k];
    bool is_bool = t && t->dtype == KL_BOOL;
    if (!t || t->rank > y->rank || ((!where || k == 0) ? !is_bool : t->dtype != y->dtype))
      return kl_isa_ref(c);
  }
  if ((where ? (es != 1 && es != 2 && es != 4 && es != 8) : y->dtype != KL_BOOL))
    return kl_isa_ref(c);
  int64_t total = kl_tensor_numel(y);
  if (total == 0) return KILN_OK;
  sel_job j = {.op = c->node->op, .n = n, .y = y->data, .yes = es};
  for (int k = 0; k < n; k++) {
    j.in[k] = c->in[k]->data;
    j.es[k] = kl_dtype_size(c->in[k]->dtype);
  }
  plan(&j, c->in, y);
  int64_t tasks = kl_isa_split(j.outer, CHUNK / j.inner + 1, &j.per);
  kl_isa_parallel(c, tasks, total, task, &j);
  return KILN_OK;
}
