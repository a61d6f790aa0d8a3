/* Attention on the GPU (kernels/attention.cl; at precision tf32 kernels/tc.cl's
 * kl_attn_tc64): kiln.MultiHeadAttention, the node the transformer fusions make
 * (src/passes/fuse_mha.c), in one kernel with no scores matrix in memory. */
#include "backends/cpu/ref/mha.h"
#include "backends/gpu/kernels.h"

#define MAX_DV 256 /* KL_ATTN_MAX_DV: the per-query accumulator lives in registers */
#define TILE_D 128 /* KL_ATTN_TILE_D: the largest head of kl_attn_mha_tiled */
#define QB 64      /* KL_ATTN_QB: its queries per work-group */
#define FA_D 64    /* KL_FA_D: the largest head of kl_attn_flash64 (and kl_attn_tc64) */
#define FA_QB 64   /* KL_FA_QB and KL_FA_WG: its queries and work-items per group */
#define FA_WG 128

typedef struct kl_cl_mha {
  int64_t batch, heads, seq, keys, d, dv;
  int64_t qrow, krow, vrow, koff, voff;
  int64_t mstride[4];
  float scale;
  int32_t has_mask;
  int32_t zero_masked_rows;
} kl_cl_mha;

/* A head width known from the static types and within the accumulator's size. */
static bool mha_supported(const kl_graph *g, const kl_node *n) {
  int64_t heads = kl_attr_int(n, "num_heads", 0);
  const kl_type *q = &g->values[n->in[0]].type;
  if (heads < 1 || q->rank != 3 || q->dims[2].size <= 0) return false;
  bool packed = n->n_in < 2 || n->in[1] < 0;
  if (packed) return q->dims[2].size % (3 * heads) == 0 && q->dims[2].size / 3 / heads <= MAX_DV;
  if (n->n_in < 3 || n->in[2] < 0) return false;
  const kl_type *v = &g->values[n->in[2]].type;
  return v->rank == 3 && v->dims[2].size > 0 && v->dims[2].size % heads == 0 &&
         v->dims[2].size / heads <= MAX_DV;
}

static kiln_status run_mha(kl_cl *c, kl_kernel_ctx *kc) {
  kl_mha_geom m;
  kiln_status st = kl_mha_geometry(kc, &m);
  if (st != KILN_OK) return st;
  if (m.dv > MAX_DV)
    return kl_fail(kc->e, KILN_ERR_UNSUPPORTED, "MultiHeadAttention: value heads of %lld, the "
                   "GPU kernel holds at most %d", (long long)m.dv, MAX_DV);
  kl_cl_mha g = {m.batch, m.heads, m.seq, m.keys, m.d, m.dv, m.qrow, m.krow, m.vrow, m.koff,
                 m.voff, {m.mstride[0], m.mstride[1], m.mstride[2], m.mstride[3]},
                 kl_attr_float(kc->node, "scale", 1.0f), m.mask != NULL,
                 kl_attr_int(kc->node, "zero_masked_rows", 0) != 0};
  int64_t rows = m.batch * m.heads * m.seq;
  if (m.d <= FA_D && m.dv <= FA_D && kl_cl_tf32(c) && kl_cl_has_kernel(c, "kl_attn_tc64")) {
    /* precision tf32: both products on the tensor cores (tc.cl), 64 queries a group,
     * the tiles copied in 16-byte pieces where every row starts on one */
    int vec = kl_gpu_elem_off(m.q) % 4 == 0 && kl_gpu_elem_off(m.k) % 4 == 0 &&
              kl_gpu_elem_off(m.v) % 4 == 0 && m.qrow % 4 == 0 && m.krow % 4 == 0 &&
              m.vrow % 4 == 0 && m.koff % 4 == 0 && m.voff % 4 == 0 && m.d % 4 == 0 &&
              m.dv % 4 == 0;
    size_t global = (size_t)((m.seq + FA_QB - 1) / FA_QB * m.batch * m.heads) * FA_WG,
           local = FA_WG;
    return KL_CL_LAUNCH(c, "kl_attn_tc64", 1, &global, &local, kc->e, CLA_T(m.q),
                        CLA_T(m.k), CLA_T(m.v), CLA_T(m.mask), CLA_T(kc->out[0]), CLA_S(g),
                        CLA_I(vec));
  }
  if (m.d <= FA_D && m.dv <= FA_D && kl_cl_max_group(c) >= FA_WG) {
    /* 64 queries of a head per work-group of 128, scores and output blocks in registers */
    size_t global = (size_t)((m.seq + FA_QB - 1) / FA_QB * m.batch * m.heads) * FA_WG,
           local = FA_WG;
    return KL_CL_LAUNCH(c, "kl_attn_flash64", 1, &global, &local, kc->e, CLA_T(m.q),
                        CLA_T(m.k), CLA_T(m.v), CLA_T(m.mask), CLA_T(kc->out[0]), CLA_S(g));
  }
  if (m.d <= TILE_D && m.dv <= TILE_D && kl_cl_max_group(c) >= QB) {
    /* 64 queries of a head per work-group, the keys and values through local memory */
    size_t global = (size_t)((m.seq + QB - 1) / QB * m.batch * m.heads) * QB, local = QB;
    return KL_CL_LAUNCH(c, "kl_attn_mha_tiled", 1, &global, &local, kc->e, CLA_T(m.q),
                        CLA_T(m.k), CLA_T(m.v), CLA_T(m.mask), CLA_T(kc->out[0]), CLA_S(g));
  }
  return KL_GPU_LAUNCH1(c, "kl_attn_mha", rows, kc->e, CLA_T(m.q), CLA_T(m.k), CLA_T(m.v),
                        CLA_T(m.mask), CLA_T(kc->out[0]), CLA_S(g));
}

const kl_gpu_op kl_gpu_ops_attention[] = {
    {KL_OP_KilnMultiHeadAttention, "cl:mha", 0, 0, false, mha_supported, run_mha},
};
const int kl_gpu_ops_attention_count =
    (int)(sizeof kl_gpu_ops_attention / sizeof kl_gpu_ops_attention[0]);
