/* A convolution's kernel cut down to the taps that can read the input:
 *
 *   Conv(X [N, 960, 14, 14], W [256, 960, 3, 3]) dilations 24, pads 24
 *                    becomes   Conv(X, W[:, :, 1:2, 1:2]) dilations 1, pads 0
 *
 * With a dilation as large as the input (DeepLabV3's atrous rates 12, 24 and 36 on a
 * 14x14 feature map), a tap away from the centre lands in the padding at every output
 * position: it multiplies zeros. Along each spatial axis the taps that some output
 * position reads inside X are a run [first, last] (a tap's input position grows with
 * its index); the others are dropped from the kernel, the begin padding lowered by
 * first * dilation and the end padding by (K - 1 - last) * dilation, which keeps every
 * output position reading the same input positions through the taps kept, and the
 * output's size. A kernel left with one tap along an axis gets dilation 1 there. The
 * convolution then does only the products that are not with zeros: there, 9 times
 * fewer (a 1x1 convolution).
 *
 * Needs X's spatial sizes known while building, explicit pads (auto_pad NOTSET) and
 * constant weights; the trimmed weights are a new constant (the old one stays for any
 * other reader). A kernel whose taps all fall in the padding is left as it is (the
 * output is the bias alone; no exporter writes one).
 */
#include <stdlib.h>
#include <string.h>

#include "passes/rewrite.h"

#define MAX_SP 3

typedef struct taps_plan {
  int sp;                        /* spatial axes */
  int64_t k[MAX_SP];             /* kernel size per axis */
  int64_t first[MAX_SP], last[MAX_SP];
  int64_t pads[2 * MAX_SP], dil[MAX_SP];
} taps_plan;

/* The run of taps of one axis that read inside [0, in) for some output position, in
 * *first and *last (-1 for none): 1 when it is not all of them, 0 when it is, -1 when
 * a position does not fit in 64 bits (hostile strides or dilations: left as it is). */
static int live_taps(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int64_t pb,
                     int64_t *first, int64_t *last) {
  *first = -1;
  *last = -1;
  int64_t reach; /* (out - 1) * s: the last output's offset from the first */
  if (__builtin_mul_overflow(out - 1, s, &reach)) return -1;
  for (int64_t t = 0; t < k; t++) {
    /* tap t reads o * s - pb + t * d for o in [0, out): the lowest and highest */
    int64_t td, lo, hi;
    if (__builtin_mul_overflow(t, d, &td) || __builtin_sub_overflow(td, pb, &lo) ||
        __builtin_add_overflow(lo, reach, &hi))
      return -1;
    /* some o with a position in [0, in): the positions step by s from lo to hi */
    bool any = false;
    if (hi >= 0 && lo < in) {
      /* the first o at or past 0 (-lo fits: lo >= -pb > INT64_MIN); o0 * s and
       * lo + o0 * s are taken only for o0 < out, where they are at most reach and hi */
      int64_t o0 = lo >= 0 ? 0 : (-lo - 1) / s + 1;
      any = o0 < out && lo + o0 * s < in; /* lo + o0 * s is in [0, hi] */
    }
    if (any) {
      if (*first < 0) *first = t;
      *last = t;
    }
  }
  return *first >= 0 && (*first > 0 || *last < k - 1) ? 1 : 0;
}

static bool plan_node(const kl_graph *g, const kl_node *n, taps_plan *p) {
  if ((n->op != KL_OP_Conv && n->op != KL_OP_KilnFusedConv) || n->n_in < 2) return false;
  const char *pad_mode = kl_attr_string(n, "auto_pad", "NOTSET");
  if (strcmp(pad_mode, "NOTSET") != 0) return false;
  const kl_value *w = kl_rw_const(g, n->in[1]);
  const kl_type *xt = &g->values[n->in[0]].type, *yt = &g->values[n->out[0]].type;
  if (!w || !w->data || xt->rank < 3 || xt->rank > 2 + MAX_SP || w->type.rank != xt->rank ||
      yt->rank != xt->rank)
    return false;
  p->sp = xt->rank - 2;
  const int64_t *ks = NULL, *st = NULL, *dl = NULL, *pd = NULL;
  int nk = kl_attr_ints(n, "kernel_shape", &ks), ns = kl_attr_ints(n, "strides", &st);
  int nd = kl_attr_ints(n, "dilations", &dl), np = kl_attr_ints(n, "pads", &pd);
  if ((nk > 0 && nk != p->sp) || (ns > 0 && ns != p->sp) || (nd > 0 && nd != p->sp) ||
      (np > 0 && np != 2 * p->sp))
    return false;
  bool any = false;
  for (int a = 0; a < p->sp; a++) {
    int64_t in = xt->dims[2 + a].size, out = yt->dims[2 + a].size;
    int64_t k = w->type.dims[2 + a].size, s = ns > 0 ? st[a] : 1;
    p->dil[a] = nd > 0 ? dl[a] : 1;
    p->pads[a] = np > 0 ? pd[a] : 0;
    p->pads[p->sp + a] = np > 0 ? pd[p->sp + a] : 0;
    p->k[a] = k;
    if (in <= 0 || out <= 0 || k <= 0 || s <= 0 || p->dil[a] <= 0 || (nk > 0 && ks[a] != k) ||
        p->pads[a] < 0 || p->pads[p->sp + a] < 0)
      return false;
    int live = live_taps(in, out, k, s, p->dil[a], p->pads[a], &p->first[a], &p->last[a]);
    if (live < 0) return false;
    if (live) {
      any = true;
    } else {
      if (p->first[a] < 0) return false; /* no tap reads X: leave it */
      p->first[a] = 0, p->last[a] = k - 1;
    }
    /* the pads left must stay >= 0 (they do when the dropped taps read only padding) */
    if (p->pads[a] - p->first[a] * p->dil[a] < 0 ||
        p->pads[p->sp + a] - (k - 1 - p->last[a]) * p->dil[a] < 0)
      return false;
  }
  return any;
}

/* W[:, :, first..last, ...] as a new constant; -1 on failure. */
static int trimmed_weights(kl_graph *g, int wv, const taps_plan *p, kl_err *e) {
  const kl_value *w = &g->values[wv];
  int rank = w->type.rank;
  int64_t dims[2 + MAX_SP], outer = w->type.dims[0].size * w->type.dims[1].size;
  dims[0] = w->type.dims[0].size, dims[1] = w->type.dims[1].size;
  int64_t numel = outer;
  for (int a = 0; a < p->sp; a++) {
    dims[2 + a] = p->last[a] - p->first[a] + 1;
    numel *= dims[2 + a];
  }
  size_t es = kl_dtype_size(w->type.dtype);
  char *dst = malloc(es * (size_t)(numel ? numel : 1));
  if (!dst) {
    kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "trim_taps: out of memory for the weights of %s",
            w->name ? w->name : "a convolution");
    return -1;
  }
  const char *src = w->data;
  int64_t src_taps = 1, dst_taps = numel / (outer ? outer : 1);
  for (int a = 0; a < p->sp; a++) src_taps *= p->k[a];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t t = 0; t < dst_taps; t++) {
      /* t's index along each axis of the trimmed kernel, then in the full one */
      int64_t rem = t, at = 0, stride = 1;
      for (int a = p->sp - 1; a >= 0; a--) {
        int64_t i = rem % dims[2 + a];
        rem /= dims[2 + a];
        at += (i + p->first[a]) * stride;
        stride *= p->k[a];
      }
      memcpy(dst + (size_t)(o * dst_taps + t) * es, src + (size_t)(o * src_taps + at) * es, es);
    }
  return kl_rw_add_const(g, w->name ? w->name : "trimmed_w", w->type.dtype, rank, dims, dst, e);
}

kiln_status kl_pass_trim_taps(kl_graph *g, const kl_pass_config *cfg, int *changed, kl_err *e) {
  (void)cfg;
  kiln_status st = KILN_OK;
  for (int i = 0; st == KILN_OK && i < g->n_nodes; i++) {
    taps_plan p = {0};
    if (!plan_node(g, &g->nodes[i], &p)) continue;
    int w = trimmed_weights(g, g->nodes[i].in[1], &p, e);
    if (w < 0) return KILN_ERR_OUT_OF_MEMORY;
    int64_t ks[MAX_SP], pads[2 * MAX_SP], dil[MAX_SP];
    for (int a = 0; a < p.sp; a++) {
      ks[a] = p.last[a] - p.first[a] + 1;
      pads[a] = p.pads[a] - p.first[a] * p.dil[a];
      pads[p.sp + a] = p.pads[p.sp + a] - (p.k[a] - 1 - p.last[a]) * p.dil[a];
      dil[a] = ks[a] == 1 ? 1 : p.dil[a];
    }
    st = kl_rw_set_input(g, i, 1, w, e);
    if (st == KILN_OK) st = kl_node_set_ints(g, i, "kernel_shape", ks, p.sp, e);
    if (st == KILN_OK) st = kl_node_set_ints(g, i, "pads", pads, 2 * p.sp, e);
    if (st == KILN_OK) st = kl_node_set_ints(g, i, "dilations", dil, p.sp, e);
    if (st == KILN_OK) (*changed)++;
  }
  if (st == KILN_OK) st = kl_rw_finish(g, *changed, e);
  return st;
}
