/* Reference Einsum: a plain loop over every combination of label values.
 *
 * kl_einsum_parse labels each input dim (see ir/reduce.h). With L_out the output's
 * labels and L_sum the other labels of the inputs:
 *   Y[L_out] = sum over L_sum of prod_k X_k[labels of X_k]
 * A label repeated within one input walks that input's diagonal (its strides add up);
 * an ellipsis dim of size 1 broadcasts (stride 0). Float dtypes are computed in double,
 * integers in 64-bit arithmetic wrapped to the dtype.
 */
#include "backends/cpu/ref/ref.h"
#include "ir/reduce.h"

#include <string.h>

/* An odometer over some labels, keeping every input's element offset. */
typedef struct label_walk {
  int n, n_in;
  int64_t size[KL_EINSUM_LABELS], idx[KL_EINSUM_LABELS];
  int64_t stride[KL_EINSUM_MAX_INPUTS][KL_EINSUM_LABELS];
  int64_t off[KL_EINSUM_MAX_INPUTS];
} label_walk;

static void walk_next(label_walk *w) {
  for (int d = w->n - 1; d >= 0; d--) {
    for (int k = 0; k < w->n_in; k++) w->off[k] += w->stride[k][d];
    if (++w->idx[d] < w->size[d]) return;
    for (int k = 0; k < w->n_in; k++) w->off[k] -= w->stride[k][d] * w->size[d];
    w->idx[d] = 0;
  }
}

/* Per label: its size and each input's stride (the sum over the dims it labels). */
typedef struct label_info {
  int64_t size[KL_EINSUM_LABELS];
  int64_t stride[KL_EINSUM_MAX_INPUTS][KL_EINSUM_LABELS];
  bool used[KL_EINSUM_LABELS];
} label_info;

static void label_info_init(const kl_kernel_ctx *c, const kl_einsum *r, label_info *li) {
  memset(li, 0, sizeof *li);
  for (int l = 0; l < KL_EINSUM_LABELS; l++) li->size[l] = 1;
  for (int k = 0; k < r->n_in; k++) {
    const kl_tensor *x = c->in[k];
    int64_t stride = 1;
    for (int d = x->rank - 1; d >= 0; stride *= x->dims[d], d--) {
      int l = r->label[k][d];
      li->used[l] = true;
      if (x->dims[d] == 1) continue; /* broadcast, or a label of size 1 anyway */
      li->size[l] = x->dims[d];
      li->stride[k][l] += stride;
    }
  }
}

/* A walk over `labels` (n of them); *count gets its length. The summed labels' walk
 * can be longer than any tensor ("i,j->" visits every pair), so it is checked. */
static kiln_status walk_init(const kl_kernel_ctx *c, const label_info *li, int n_in,
                             const int8_t *labels, int n, label_walk *w, int64_t *count) {
  memset(w, 0, sizeof *w);
  w->n = n;
  w->n_in = n_in;
  *count = 1;
  for (int i = 0; i < n; i++) {
    w->size[i] = li->size[labels[i]];
    if (__builtin_mul_overflow(*count, w->size[i], count))
      return kl_fail(c->e, KILN_ERR_LIMIT, "the equation visits more than 2^63 "
                     "combinations of indexes");
    for (int k = 0; k < n_in; k++) w->stride[k][i] = li->stride[k][labels[i]];
  }
  return KILN_OK;
}

/* Sum over the summed labels (walk `sum`, count n) of the product of the inputs at
 * base offsets `base`, in double or, for integers, wrapped 64-bit. */
static void contract(const kl_kernel_ctx *c, const int64_t *base, label_walk sum, int64_t n,
                     kl_tensor *y, int64_t o) {
  bool is_float = kl_dtype_is_float(y->dtype);
  double acc = 0;
  uint64_t iacc = 0;
  for (int64_t s = 0; s < n; s++, walk_next(&sum)) {
    double p = 1;
    uint64_t ip = 1;
    for (int k = 0; k < sum.n_in; k++) {
      const kl_tensor *x = c->in[k];
      int64_t at = base[k] + sum.off[k];
      if (is_float) p *= kl_ref_load(x->data, x->dtype, at);
      else ip *= (uint64_t)kl_ref_load_int(x->data, x->dtype, at);
    }
    acc += p;
    iacc += ip;
  }
  if (is_float) kl_ref_store(y->data, y->dtype, o, acc);
  else kl_ref_store_int(y->data, y->dtype, o, (int64_t)iacc);
}

int kl_ref_einsum(kl_kernel_ctx *c) {
  int ranks[KL_EINSUM_MAX_INPUTS];
  for (int k = 0; k < c->n_in && k < KL_EINSUM_MAX_INPUTS; k++) ranks[k] = c->in[k]->rank;
  kl_einsum r;
  kiln_status st = kl_einsum_parse(kl_attr_string(c->node, "equation", ""), c->n_in, ranks,
                                   &r, c->e);
  if (st != KILN_OK) return st;
  label_info li;
  label_info_init(c, &r, &li);
  int8_t summed[KL_EINSUM_LABELS];
  int n_sum = 0;
  for (int l = 0; l < KL_EINSUM_LABELS; l++)
    if (li.used[l] && !memchr(r.out_label, l, (size_t)r.out_rank)) summed[n_sum++] = (int8_t)l;
  label_walk out, sum;
  int64_t n_out, n_set;
  st = walk_init(c, &li, r.n_in, r.out_label, r.out_rank, &out, &n_out);
  if (st == KILN_OK) st = walk_init(c, &li, r.n_in, summed, n_sum, &sum, &n_set);
  if (st != KILN_OK) return st;
  for (int64_t o = 0; o < n_out; o++, walk_next(&out))
    contract(c, out.off, sum, n_set, c->out[0], o);
  return KILN_OK;
}
