/* oneDNN kernels (dnnl.h): convolution, deconvolution, matmul, pooling and binary
 * primitives with post-ops, cached per node and per set of input shapes.
 *
 * Activations are plain (row-major) unless the session keeps them channels-last
 * between oneDNN nodes (kl_dnnl_set_channels_last); a primitive that wants another
 * layout gets buffers of ours and reorders around it. 3x3 convolutions try Winograd.
 *
 * Shapes, as kiln's tensors hold them (row-major, "plain"):
 *   Conv           X [N, C, S...], W [M, C/g, K...], B [M]      -> Y [N, M, S'...]
 *   ConvTranspose  X [N, C, S...], W [C, M/g, K...], B [M]      -> Y [N, M, S'...]
 *   Gemm           A [M, K] or [K, M], B [K, N] or [N, K], C    -> Y [M, N]
 *   MatMul         A [..., M, K], B [..., K, N] (batch broadcast) -> Y [..., M, N]
 * and for the fused ops Y = act(base + Bias + Sum). The channels-last forms that the
 * O3 layout pass makes (ir/layout.h) hold X, Sum and Y as [N, H, W, C]: they are seen
 * through [N, C, H, W] dims with channels-last strides, the same bytes, no reorder. oneDNN sees weights with the group
 * split out ([g, M/g, C/g, K...]), ConvTranspose's weights through strides (its
 * [C, M/g] order is oneDNN's "io"), a transposed Gemm operand through strides, and a
 * MatMul operand of rank 1 as a matrix with a 1, all without copying.
 */
#include "backends/cpu/dnnl_engine.h"
#include "backends/cpu/dnnl_gconv.h"
#include "backends/cpu/dnnl_im2col.h"
#include "backends/cpu/dnnl_wino.h"
#include "backends/cpu/isa.h"
#include "backends/cpu/isa/run.h"
#include "ir/fused.h"
#include "ir/infer_common.h"
#include "ir/infer_convq.h"
#include "ir/layout.h"

#include "kl_config.h"

#include <dnnl.h>
#include <pthread.h>
#if KL_HAVE_OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* DN_CONCAT: a Concat along the channels between oneDNN nodes, run by kiln's own copy
 * (own_concat), here so that the session can hold its inputs and output channels-last
 * like the convolutions around it (SqueezeNet's, Inception's, DenseNet's blocks). */
typedef enum dn_kind {
  DN_CONV, DN_DECONV, DN_GEMM, DN_MATMUL, DN_POOL, DN_BINARY, DN_CONCAT
} dn_kind;

#define DN_SLOTS 4  /* primitives kept per node: one per recent set of input shapes */
#define DN_INPUTS 4 /* X, W, Bias or C, Sum */
#define DN_POSTS 2  /* binary post-ops: Bias or C, and a Sum that broadcasts */
#define DN_ALIGN 64

typedef struct dn_shape {
  int rank; /* -1: the input is absent */
  int64_t dims[KL_MAX_RANK];
} dn_shape;

/* Constant weights reordered into the layout a primitive asked for. */
typedef struct dn_packed {
  dnnl_memory_desc_t md;
  void *data;
  int users;
} dn_packed;

/* A reorder between two buffers; `from` or `to` gets kiln's pointer at each run. */
typedef struct dn_reorder {
  dnnl_primitive_t prim;
  dnnl_memory_t from, to, scratch; /* scratch: over the workspace, set by the user */
  size_t scratch_bytes;
} dn_reorder;

/* A run of a Gemm or MatMul on kiln's own product (below, gemv_fits). */
typedef struct gemv_plan {
  bool nk;                      /* the model's W is [N, K] (Gemm transB=1), else [K, N] */
  int64_t m, k, n;              /* rows of X (all its dims but the last) */
  int64_t add_step, sum_step;   /* steps along N: 0 a broadcast, 1 */
  int64_t add_row, sum_row;     /* steps from one row to the next: 0 a broadcast */
  bool add, sum;
  /* what a run needs besides its pointers, read from the node once (gemv_plan_of) */
  float alpha, add_scale;
  bool has_act;
  kl_act act;
} gemv_plan;

/* One primitive for one set of input shapes. */
typedef struct dn_entry {
  bool used, fallback;
  bool gemv; /* kiln's own product runs it (gemv_plan), no primitive */
  bool amx;  /* ... its bf16 product on AMX tiles (run_amx.c) */
  gemv_plan gemv_plan; /* then its plan */
  uint64_t last_use;
  dn_shape key[DN_INPUTS];
  dnnl_primitive_t prim;
  /* What the primitive reads and writes. src/dst/wei have kiln's pointers set at each
   * run unless a reorder stands between: then they are staged, regions of the
   * session's workspace (kl_dnnl_engine) at the offsets below, as is the scratchpad
   * that the primitive and its reorders share (they run one after the other). */
  dnnl_memory_t src, wei, bias, dst, scratch, post[DN_POSTS], src1;
  bool swap;        /* a binary op's inputs 1 and 0 are its sources 0 and 1 */
  int n_post, post_arg[DN_POSTS], post_input[DN_POSTS];
  dn_reorder src_in, wei_in, dst_out, sum_in;
  bool src_staged, wei_staged, dst_staged;
  size_t src_off, wei_off, dst_off, scratch_off; /* in the workspace */
  uint64_t ws_gen;  /* the workspace's generation the memories point into (0: none) */
  void *sum_copy;   /* the reference fallback's copy of a Sum that Y overwrites; for
                     * sum_after, Sum in Y's layout or the primitive's result
                     * (put_sum_aside) */
  size_t sum_bytes;
  int packed;       /* index into dn_node.packed, -1 when the weights are read as given */
  bool sum_postop;  /* the primitive adds what dst holds: dst is filled with Sum first */
  char impl[48];    /* oneDNN's name for the primitive's implementation (" bf16" added
                     * when it computes in bf16) */
  /* A matrix product whose broadcast addends (a Bias or C that is not the primitive's
   * bias, a Sum of another shape) made oneDNN choose its reference implementation
   * (binary post-ops that broadcast along M): kiln adds them to Y after the primitive,
   * then applies the activation (epilogue_of). */
  bool epilogue;
  /* A convolution whose primitive would start its sums from what dst holds (the sum
   * post-op of oneDNN's direct and gemm convolutions): kiln adds Sum to Y after the
   * primitive instead, then the activation (epilogue too; sum_after_of). */
  bool sum_after;
  kl_wino *wino; /* kiln's Winograd runs it instead of a primitive (wino_shape_of) */
  kl_im2col *im2col; /* kiln's product over gathered rows runs it (im2col_shape_of) */
  kl_gconv_plan *gconv; /* kiln's grouped convolution runs it (gconv_shape_of) */
  kl_act epi_act;
  bool epi_has_act;
  int n_after, after_input[DN_POSTS];
} dn_entry;

typedef struct dn_node {
  kl_dnnl_engine *eng;
  const kl_node *node;
  dn_kind kind;
  unsigned cl_in; /* bit k: input k is held channels-last */
  bool cl_dst;    /* so is the output */
  /* precision bf16: X (input 0) and Y held in bf16 between two such nodes
   * (kl_dnnl_set_bf16_held); the memory plan's float32 buffers hold them */
  bool bf16_src, bf16_dst;
  bool nhwc;      /* a channels-last node of the graph (ir/layout.h): always so */
  const kl_kernel_ctx *graph_ctx; /* for nhwc: the run's own tensors, [N, H, W, C] */
  const void *const_w; /* the graph's constant weights, NULL when computed */
  /* release_weights: the model's weight value, whose data this node frees once it
   * holds the weights packed (kl_dnnl_allow_release); then packed[w_src] is the only
   * copy, which every later layout is reordered from. */
  kl_value *own_w;
  bool w_released;
  int w_src;
  float *scaled_c;     /* beta * C for a Gemm with beta != 1 (C is then constant) */
  float gemm_beta;
  uint64_t clock;
  bool ran_reference; /* the last run went to the reference kernel */
  const char *ran_impl; /* the last run's oneDNN implementation, NULL when none ran */
  char own_impl[32];    /* "kiln:avx2 nhwc": kiln's kernel ran it (own_pool) */
  bool ran_gemv;      /* ... to kiln's matrix product (run_gemv.c) */
  int64_t ran_rows;   /* ... of this many rows */
  bool gemv_always; /* the graph's shapes make every run kiln's product (gemv_plan) */
  /* the weights packed for it, made on its first run: whole panels, the last partial
   * one apart (kl_gemv_pack) */
  float *gemv_w, *gemv_tail;
  size_t gemv_w_bytes;
  /* precision bf16 at the AMX level: the tiles' primitives, the weights packed for them
   * (kl_amx_pack_weights, on the first run that takes them), and whether the graph's
   * shapes make every run theirs (then the packed copy is the only one kept) */
  const kl_amx_fns *amx;
  uint16_t *amx_w;
  size_t amx_w_bytes;
  bool amx_always;
  /* the fused activation, run by kiln's primitive over Y after the primitive instead
   * of as oneDNN's post-op (act_after_of) */
  bool act_after;
  kl_act act;
  const kl_isa_fns *fns; /* kiln's primitives at the session's level (kl_isa_level) */
  dn_packed packed[DN_SLOTS];
  dn_entry slots[DN_SLOTS];
} dn_node;

/* ---- process-wide setup: the ISA cap, once ---- */

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static bool isa_usable, isa_capped = true;
static char isa_uncapped[160]; /* written once by limit_isa_once when the cap failed */
static const char *isa_name_of(dnnl_cpu_isa_t isa);

static void limit_isa_once(void) {
  kl_isa cap = kl_isa_level(); /* KILN_ISA lowers it for oneDNN too */
  isa_usable = cap != KL_ISA_GENERIC;
  static const dnnl_cpu_isa_t to_dnnl[KL_ISA_COUNT] = {
      [KL_ISA_GENERIC] = dnnl_cpu_isa_all,
      [KL_ISA_AVX2] = dnnl_cpu_isa_avx2,
      [KL_ISA_AVX512] = dnnl_cpu_isa_avx512_core,
      [KL_ISA_AVX512_BF16] = dnnl_cpu_isa_avx512_core_bf16,
      [KL_ISA_AMX] = dnnl_cpu_isa_all,
  };
  /* Fails only once oneDNN has fixed its ISA (a primitive made, or its ISA asked),
   * which cannot have happened yet through kiln; if the embedding program did so
   * first, oneDNN keeps its own choice and kl_dnnl_isa_name says so. */
  if (cap != KL_ISA_GENERIC && cap != KL_ISA_AMX)
    isa_capped = dnnl_set_max_cpu_isa(to_dnnl[cap]) == dnnl_success;
  if (!isa_capped)
    snprintf(isa_uncapped, sizeof isa_uncapped, "%s, not lowered to kiln's level: oneDNN's "
             "ISA was fixed before kiln could set it",
             isa_name_of(dnnl_get_effective_cpu_isa()));
}

bool kl_dnnl_usable(void) {
  pthread_once(&isa_once, limit_isa_once);
  return isa_usable;
}

static const char *isa_name_of(dnnl_cpu_isa_t isa) {
  switch (isa) {
  case dnnl_cpu_isa_sse41: return "sse41";
  case dnnl_cpu_isa_avx: return "avx";
  case dnnl_cpu_isa_avx2: return "avx2";
  case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
  case dnnl_cpu_isa_avx512_core: return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  default: return "other";
  }
}

const char *kl_dnnl_isa_name(void) {
  pthread_once(&isa_once, limit_isa_once);
  return isa_capped ? isa_name_of(dnnl_get_effective_cpu_isa()) : isa_uncapped;
}

bool kl_dnnl_bf16_native(void) {
  pthread_once(&isa_once, limit_isa_once);
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return isa_usable && (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

static kiln_status dn_fail(kl_err *e, dnnl_status_t s, const char *what) {
  kiln_status code = s == dnnl_out_of_memory ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_INTERNAL;
  return kl_fail(e, code, "oneDNN failed %s (status %d)", what, (int)s);
}

kiln_status kl_dnnl_engine_create(kl_dnnl_engine **out, kl_err *e) {
  kl_dnnl_engine *eng = calloc(1, sizeof *eng);
  *out = eng;
  if (!eng) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a oneDNN engine");
#ifdef KL_DEBUG_VERIFY
  eng->ws_poison = true; /* a node that reads what it did not write shows in the tests */
#endif
  dnnl_status_t s = dnnl_engine_create(&eng->engine, dnnl_cpu, 0);
  if (s == dnnl_success) s = dnnl_stream_create(&eng->stream, eng->engine, dnnl_stream_default_flags);
  return s == dnnl_success ? KILN_OK : dn_fail(e, s, "to create a CPU engine");
}

void kl_dnnl_engine_set_bf16(kl_dnnl_engine *eng, bool on) { eng->bf16 = on; }

void kl_dnnl_engine_free(kl_dnnl_engine *eng) {
  if (!eng) return;
  if (eng->stream) dnnl_stream_destroy(eng->stream);
  if (eng->engine) dnnl_engine_destroy(eng->engine);
  free(eng->ws);
  free(eng);
}

size_t kl_dnnl_engine_held_bytes(const kl_dnnl_engine *eng) { return eng ? eng->ws_bytes : 0; }

void kl_dnnl_ws_poison(kl_dnnl_engine *eng, bool on) {
  if (eng) eng->ws_poison = on;
}

void kl_dnnl_ws_enter(kl_dnnl_engine *eng) {
  if (eng->ws_poison && eng->ws) memset(eng->ws, 0xff, eng->ws_bytes); /* float NaNs */
}

dnnl_status_t kl_dnnl_ws_reserve(kl_dnnl_engine *eng, size_t bytes) {
  if (bytes <= eng->ws_bytes) return dnnl_success;
  void *p = NULL;
  if (posix_memalign(&p, KL_DNNL_WS_ALIGN, bytes) != 0) return dnnl_out_of_memory;
  free(eng->ws);
  eng->ws = p;
  eng->ws_bytes = bytes;
  eng->ws_gen++;
  return dnnl_success;
}

/* ---- which nodes ---- */

/* The ONNX pooling op of a pooling node, channels-last or not. */
static kl_op pool_op(const kl_node *n) {
  kl_op base = kl_layout_base(n->op);
  return base == KL_OP_COUNT ? n->op : base;
}

static bool dn_kind_of(kl_op op, dn_kind *kind) {
  kl_op base = kl_fused_base(op);
  if (base == KL_OP_COUNT) base = kl_layout_base(op);
  if (base == KL_OP_COUNT) base = op;
  switch (base) {
  case KL_OP_Conv: *kind = DN_CONV; return true;
  case KL_OP_ConvTranspose: *kind = DN_DECONV; return true;
  case KL_OP_Gemm: *kind = DN_GEMM; return true;
  case KL_OP_MatMul: *kind = DN_MATMUL; return true;
  case KL_OP_MaxPool:
  case KL_OP_AveragePool:
  case KL_OP_GlobalAveragePool:
  case KL_OP_GlobalMaxPool: *kind = DN_POOL; return true;
  case KL_OP_Add:
  case KL_OP_Sub:
  case KL_OP_Mul:
  case KL_OP_Div: *kind = DN_BINARY; return true;
  case KL_OP_Concat: *kind = DN_CONCAT; return true;
  default: return false;
  }
}

static bool is_f32(const kl_graph *g, int v) {
  return v < 0 || g->values[v].type.dtype == KL_F32;
}

static bool is_const(const kl_graph *g, int v) {
  return v >= 0 && g->values[v].kind == KL_VALUE_CONST;
}

/* Whether value v is made by a convolution or a pooling (fused or not). */
static bool made_by_conv(const kl_graph *g, int v) {
  dn_kind kind;
  int p = v >= 0 ? g->values[v].producer : -1;
  return p >= 0 && dn_kind_of(g->nodes[p].op, &kind) &&
         (kind == DN_CONV || kind == DN_DECONV || kind == DN_POOL);
}

/* Whether value v is made by a convolution or a pooling and has node n's output
 * shape (the same rank, each dim the same size or the same symbol). */
static bool full_conv_operand(const kl_graph *g, const kl_node *n, int v) {
  if (!made_by_conv(g, v)) return false;
  const kl_type *t = &g->values[v].type, *y = &g->values[n->out[0]].type;
  if (t->rank < 0 || t->rank != y->rank) return false;
  for (int i = 0; i < t->rank; i++)
    if (!kl_dim_equal(t->dims[i], y->dims[i])) return false;
  return true;
}

static bool dilated(const kl_node *n) {
  const int64_t *d = NULL;
  int count = kl_attr_ints(n, "dilations", &d);
  for (int i = 0; i < count; i++)
    if (d[i] != 1) return true;
  return false;
}

/* A Concat of float32 values of one known rank, 3 to 5, along dim 1 (the channels),
 * with fewer inputs than the session's channels-last bits count. */
static bool channel_concat(const kl_graph *g, const kl_node *n) {
  int rank = g->values[n->out[0]].type.rank;
  if (rank < 3 || rank > 5 || n->n_in < 1 || n->n_in >= 32) return false;
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] < 0 || !is_f32(g, n->in[k]) || g->values[n->in[k]].type.rank != rank)
      return false;
  int64_t axis = kl_attr_int(n, "axis", 0);
  return axis == 1 || axis == 1 - rank;
}

bool kl_dnnl_supports(const kl_graph *g, const kl_node *n) {
  dn_kind kind;
  if (!dn_kind_of(n->op, &kind) || n->n_out != 1 || !is_f32(g, n->out[0])) return false;
  if (kind == DN_CONCAT) return channel_concat(g, n);
  /* Elementwise ops are kiln's own, except between convolutions, where oneDNN's keep
   * the convolutions' layout: an operand of the output's shape comes from one. (Not a
   * convolution's small result scaling something else, such as the weights that
   * fold_input_scale scales: oneDNN 2.6 has only its reference binary for a
   * broadcast along dim 0, 6.8 ms for a 480 x 80 Mul.) */
  if (kind == DN_BINARY && !full_conv_operand(g, n, n->in[0]) &&
      !full_conv_operand(g, n, n->in[1]))
    return false;
  /* nor one value per image and channel scaling a convolution's result (a
   * squeeze-and-excitation block's): kiln's kernel runs it in either layout, where
   * oneDNN 2.6's channels-last broadcast took 16 us for EfficientNet-B0's 7x7x1152 one
   * (kl_run_binary_cl: about 5) */
  if (kind == DN_BINARY && n->n_in == 2 &&
      (kl_cpu_per_channel(&g->values[n->in[0]].type, &g->values[n->out[0]].type) ||
       kl_cpu_per_channel(&g->values[n->in[1]].type, &g->values[n->out[0]].type)))
    return false;
  /* nor a single value scaling or shifting one (NFNet's gains): kiln's elementwise
   * kernel runs it in either layout, where oneDNN 2.6 ran its jit:uni binary */
  if (kind == DN_BINARY && n->n_in == 2 &&
      (kl_cpu_single_value(&g->values[n->in[0]].type, &g->values[n->out[0]].type) ||
       kl_cpu_single_value(&g->values[n->in[1]].type, &g->values[n->out[0]].type)))
    return false;
  for (int k = 0; k < n->n_in; k++)
    if (!is_f32(g, n->in[k])) return false;
  const char *act = kl_attr_string(n, "activation", NULL);
  if (act && !kl_fused_act_find(act)) return false;
  if (kind == DN_GEMM && n->n_in > 2 && n->in[2] >= 0 &&
      kl_attr_float(n, "beta", 1.0f) != 1.0f && !is_const(g, n->in[2]))
    return false; /* beta * C would need a scaled copy at every run */
  int rank = g->values[n->in[0]].type.rank;
  if ((kind == DN_CONV || kind == DN_DECONV || kind == DN_POOL) && rank >= 0 &&
      (rank < 3 || rank > 5))
    return false;
  /* ONNX counts an AveragePool window that ceil_mode adds past the pads its own way */
  if (pool_op(n) == KL_OP_AveragePool && kl_attr_int(n, "ceil_mode", 0) != 0) return false;
  /* oneDNN 2.6 pools with dilations only in its reference loop (ref:any, at every ISA
   * level); kiln's own pooling kernels take them */
  if (kind == DN_POOL && dilated(n)) return false;
  /* a channels-last Sum is read in place only with Y's shape (the reference adds one
   * that broadcasts) */
  if (kl_layout_nhwc(n) && n->n_in > KL_FUSED_SUM && n->in[KL_FUSED_SUM] >= 0) {
    /* (a symbolic batch: the same symbol in both, as exporters write a residual) */
    const kl_type *sum = &g->values[n->in[KL_FUSED_SUM]].type, *y = &g->values[n->out[0]].type;
    if (!kl_type_same_dims(sum, y)) return false;
  }
  return true;
}

/* ---- small helpers ---- */

static void *aligned_alloc_bytes(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, DN_ALIGN, bytes ? bytes : DN_ALIGN) != 0) return NULL;
  return p;
}

static void plain_strides(int nd, const dnnl_dims_t dims, dnnl_dims_t strides) {
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i] > 0 ? dims[i] : 1;
  }
}

dnnl_status_t kl_dnnl_plain_md(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims) {
  dnnl_dims_t strides;
  plain_strides(nd, dims, strides);
  return dnnl_memory_desc_init_by_strides(md, nd, dims, dnnl_f32, strides);
}

static dnnl_status_t any_md(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims) {
  return dnnl_memory_desc_init_by_tag(md, nd, dims, dnnl_f32, dnnl_format_tag_any);
}

/* [N, C, S...] stored as [N, S..., C]. */
dnnl_status_t kl_dnnl_channels_last_md(dnnl_memory_desc_t *md, int nd, const dnnl_dims_t dims) {
  dnnl_dims_t strides;
  int64_t s = dims[1] > 0 ? dims[1] : 1;
  strides[1] = 1;
  for (int i = nd - 1; i >= 2; i--) {
    strides[i] = s;
    s *= dims[i] > 0 ? dims[i] : 1;
  }
  strides[0] = s;
  return dnnl_memory_desc_init_by_strides(md, nd, dims, dnnl_f32, strides);
}

/* A convolution's activation as kiln holds it: channels-last when the session keeps
 * it so, else plain; want is what the primitive is asked for (any layout it likes
 * for a plain one, which is then reordered; exactly the held one when channels-last,
 * so that no reorder happens between two oneDNN convolutions). */
static dnnl_status_t activation_md(bool cl, int nd, const dnnl_dims_t dims,
                                   dnnl_memory_desc_t *user, dnnl_memory_desc_t *want) {
  dnnl_status_t s = cl ? kl_dnnl_channels_last_md(user, nd, dims) : kl_dnnl_plain_md(user, nd, dims);
  if (s != dnnl_success || !want) return s;
  if (cl) *want = *user;
  return cl ? s : any_md(want, nd, dims);
}

/* dims of t right-aligned in nd dims, 1 in front. */
static void padded_dims(const kl_tensor *t, int nd, dnnl_dims_t dims) {
  for (int i = 0; i < nd; i++) dims[i] = 1;
  for (int i = 0; i < t->rank; i++) dims[nd - t->rank + i] = t->dims[i];
}

static bool same_shape(const kl_tensor *a, const kl_tensor *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static const kl_tensor *input(const kl_kernel_ctx *c, int k) {
  return k < c->n_in ? c->in[k] : NULL;
}

/* ---- kiln's own matrix product (isa/run_gemv.c) ---- */

/* A Gemm or MatMul run whose input is one row and whose weights are a constant
 * matrix streams the weights once: run_gemv.c does that at the memory's speed, on the
 * weights packed once in panels of 16 outputs (kl_gemv_pack), where a oneDNN primitive
 * reads them slower. Runs of more rows (up to KL_GEMM_MAX_ROWS, or any number on
 * weights of KL_GEMM_BIG_WEIGHTS floats or more) go there too at the levels whose
 * tiles beat oneDNN's products (kl_gemv_fns.rows_fast: AVX2, where oneDNN 2.6's gemm packs the weights again at every call). The shapes are known at session
 * creation (the graph's concrete types: such a node makes no primitive, and the panels
 * are the only copy it keeps under release_weights) or at a run (an entry of the
 * cache). The panels are made
 * from the plain weights, so once another entry's packing released those, such runs
 * stay on oneDNN unless the panels were made before. */

static int64_t shape_numel(const dn_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) n *= s->dims[i];
  return n;
}

/* The steps of an addend broadcast to Y's [m, n] (as rows): along n (*step) and from
 * row to row (*row); false when it is no such addend (one that broadcasts along some
 * of Y's leading dims but not all). */
static bool gemv_steps(const dn_shape *t, int64_t m, int64_t n, int64_t *step, int64_t *row) {
  int64_t count = shape_numel(t), last = t->rank > 0 ? t->dims[t->rank - 1] : 1;
  *step = last == n && n > 1 ? 1 : 0;
  if (count == *step * (n - 1) + 1) *row = 0; /* one row for all: a scalar or [..., n] */
  else if (count == m * (*step ? n : 1)) *row = *step ? n : 1; /* a row each */
  else return false;
  return last == n || last == 1;
}

/* Whether node d runs on kiln's product with inputs in[] (rank -1: absent) and output
 * y: one row, or more at a level whose tiles are fast. */
static bool gemv_plan_of(const dn_node *d, const dn_shape *in, const dn_shape *y,
                         bool tiles, gemv_plan *p) {
  const kl_node *n = d->node;
  const dn_shape *a = &in[0], *w = &in[1];
  memset(p, 0, sizeof *p);
  bool weights = (tiles ? d->amx_w != NULL : d->gemv_w != NULL) ||
                 (d->const_w && !d->w_released);
  if ((d->kind != DN_GEMM && d->kind != DN_MATMUL) || !weights || d->nhwc || d->cl_in ||
      d->cl_dst || w->rank != 2 || a->rank < 1 || y->rank < 1 ||
      !kl_isa_fused_act(n, &p->has_act, &p->act))
    return false;
  if (d->kind == DN_GEMM) {
    bool ta = kl_attr_int(n, "transA", 0) != 0;
    p->nk = kl_attr_int(n, "transB", 0) != 0;
    if (a->rank != 2 || (ta && a->dims[1] != 1)) return false;
    p->m = a->dims[ta ? 1 : 0];
    p->k = a->dims[ta ? 0 : 1];
  } else {
    p->m = 1;
    for (int i = 0; i + 1 < a->rank; i++) p->m *= a->dims[i];
    p->k = a->dims[a->rank - 1];
  }
  p->n = w->dims[p->nk ? 0 : 1];
  if (p->m < 1 || (tiles && p->m > KL_AMX_MAX_ROWS) ||
      (!tiles && p->m > 1 && !(d->fns->gemv->tile && d->fns->gemv->rows_fast &&
                                  (p->m <= KL_GEMM_MAX_ROWS ||
                                   p->k * p->n >= KL_GEMM_BIG_WEIGHTS))))
    return false;
  if (p->k < 1 || p->n < 1 || w->dims[p->nk ? 1 : 0] != p->k ||
      shape_numel(y) != p->m * p->n || y->dims[y->rank - 1] != p->n)
    return false;
  p->alpha = d->kind == DN_GEMM ? kl_attr_float(n, "alpha", 1.0f) : 1.0f;
  p->add_scale = d->kind == DN_GEMM ? kl_attr_float(n, "beta", 1.0f) : 1.0f;
  p->add = in[2].rank >= 0 && p->add_scale != 0.0f;
  p->sum = in[KL_FUSED_SUM].rank >= 0;
  return (!p->add || gemv_steps(&in[2], p->m, p->n, &p->add_step, &p->add_row)) &&
         (!p->sum || gemv_steps(&in[KL_FUSED_SUM], p->m, p->n, &p->sum_step, &p->sum_row));
}

static void shape_of(const kl_tensor *t, dn_shape *s) {
  s->rank = t ? t->rank : -1;
  if (t) memcpy(s->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
}

/* The same from the graph's types, when they are all concrete (else false). */
static bool gemv_always_of(const dn_node *d, const kl_graph *g, bool tiles) {
  const kl_node *n = d->node;
  dn_shape in[DN_INPUTS], y;
  for (int k = 0; k < DN_INPUTS; k++) {
    in[k].rank = -1;
    if (k >= n->n_in || n->in[k] < 0) continue;
    const kl_type *t = &g->values[n->in[k]].type;
    if (!kl_type_is_concrete(t)) return false;
    in[k].rank = t->rank;
    for (int i = 0; i < t->rank; i++) in[k].dims[i] = t->dims[i].size;
  }
  const kl_type *t = &g->values[n->out[0]].type;
  if (!kl_type_is_concrete(t)) return false;
  y.rank = t->rank;
  for (int i = 0; i < t->rank; i++) y.dims[i] = t->dims[i].size;
  gemv_plan p;
  return gemv_plan_of(d, in, &y, tiles, &p);
}

/* Whether the shapes of c make a run of kiln's product; then *p is complete for
 * gemv_run. */
static bool gemv_fits(const dn_node *d, const kl_kernel_ctx *c, gemv_plan *p) {
  if (d->bf16_src || d->bf16_dst) return false; /* kiln's product reads and writes float32 */
  dn_shape in[DN_INPUTS], y;
  for (int k = 0; k < DN_INPUTS; k++) shape_of(input(c, k), &in[k]);
  shape_of(c->out[0], &y);
  return gemv_plan_of(d, in, &y, false, p);
}

/* ---- kiln's bf16 product on AMX tiles (isa/run_amx.c) ----
 * Precision bf16 at the AMX level: a Gemm or MatMul with a constant W and at most
 * KL_AMX_MAX_ROWS rows runs there instead of on oneDNN's matmul (run_amx.c says why: it
 * fetches the next weights while it sums), its bias and activation fused over each
 * block's sums (kl_amx_fns.out), X and Y as the session holds them (float32, or bf16
 * between two bf16 nodes). */
static bool amx_fits(const dn_node *d, const kl_kernel_ctx *c, gemv_plan *p) {
  if (!d->amx) return false;
  dn_shape in[DN_INPUTS], y;
  for (int k = 0; k < DN_INPUTS; k++) shape_of(input(c, k), &in[k]);
  shape_of(c->out[0], &y);
  return gemv_plan_of(d, in, &y, true, p);
}

/* The weights packed for the tiles, once; when every run is theirs and the session
 * released the model's weights to this node, the model's float32 copy is freed. */
static kiln_status amx_weights(dn_node *d, const gemv_plan *p, kl_err *e) {
  if (d->amx_w) return KILN_OK;
  size_t bytes = kl_amx_weights_bytes(p->k, p->n);
  if (!(d->amx_w = aligned_alloc_bytes(bytes)))
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the bf16 weights of a "
                   "matrix product on AMX tiles (%zu bytes)", bytes);
  kl_amx_pack_weights(d->amx, d->const_w, p->nk, p->k, p->n, d->amx_w);
  d->amx_w_bytes = bytes;
  if (d->own_w && d->amx_always && !d->w_released) {
    free(d->own_w->data);
    d->own_w->data = NULL;
    d->const_w = NULL;
    d->w_released = true;
  }
  return KILN_OK;
}

static kiln_status amx_run(const dn_node *d, const gemv_plan *p, kl_kernel_ctx *c) {
  kl_amx_args a = {.x = c->in[0]->data, .x_bf16 = d->bf16_src, .w = d->amx_w, .m = p->m,
                   .k = p->k, .n = p->n, .y = c->out[0]->data, .y_bf16 = d->bf16_dst};
  a.epi = (kl_gemv_args){.alpha = p->alpha, .add_scale = p->add_scale,
                         .has_act = p->has_act, .act = p->act};
  if (p->add)
    a.epi.add = c->in[2]->data, a.epi.add_step = p->add_step, a.epi.add_row = p->add_row;
  if (p->sum)
    a.epi.sum = c->in[KL_FUSED_SUM]->data, a.epi.sum_step = p->sum_step,
    a.epi.sum_row = p->sum_row;
  kl_dnnl_ws_enter(d->eng); /* x's rows packed in the workspace, reserved for this entry */
  a.scratch = d->eng->ws;
  return kl_run_amx(c, d->fns, d->amx, &a);
}

/* The weights packed for the one-row product, once. When the session released the
 * model's weights to this node (release_weights) and every run is one row, the
 * model's buffer becomes the packed copy, packed in place whichever way the model
 * holds W (no moment with two copies, which for VGG-16's 411 MB layer would raise the
 * peak memory by as much): W [N, K] a panel at a time through a panel of scratch, W
 * [K, N] by moving 16-float blocks along the cycles of the transposition, a bit per
 * block of scratch. Otherwise the panels are a copy of the node's own, next to the
 * model's weights. */
static kiln_status gemv_weights(dn_node *d, const gemv_plan *p, kl_err *e) {
  if (d->gemv_w) return KILN_OK;
  int64_t whole = p->n / KL_GEMV_PANEL * KL_GEMV_PANEL;
  size_t panel = (size_t)p->k * KL_GEMV_PANEL * sizeof(float);
  size_t full = (size_t)whole * (size_t)p->k * sizeof(float);
  bool take = d->own_w && d->gemv_always && !d->w_released;
  if (whole < p->n && !d->gemv_tail && !(d->gemv_tail = aligned_alloc_bytes(panel)))
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the packed weights of a "
                   "one-row product (%zu bytes)", panel);
  if (take) {
    size_t bytes = p->nk ? panel : kl_gemv_kn_seen_bytes(p->k, p->n);
    void *scratch = aligned_alloc_bytes(bytes);
    if (!scratch)
      return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory packing the weights of a "
                     "one-row product (%zu bytes)", bytes);
    if (p->nk)
      kl_gemv_pack_nk_inplace(d->fns, d->own_w->data, p->k, p->n, d->gemv_tail, scratch);
    else kl_gemv_pack_kn_inplace(d->own_w->data, p->k, p->n, d->gemv_tail, scratch);
    free(scratch);
    d->gemv_w = d->own_w->data;
    d->gemv_w_bytes = d->own_w->nbytes;
    d->own_w->data = NULL;
  } else {
    if (!(d->gemv_w = aligned_alloc_bytes(full)))
      return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the packed weights of a "
                     "one-row product (%zu bytes)", full);
    d->gemv_w_bytes = full;
    kl_gemv_pack(d->fns, d->const_w, p->nk, p->k, p->n, d->gemv_w, d->gemv_tail);
  }
  if (d->gemv_tail) d->gemv_w_bytes += panel;
  if (take) {
    d->const_w = NULL;
    d->w_released = true;
  }
  return KILN_OK;
}

/* A run with the shapes the entry's plan p was made for (the cache's key). */
static kiln_status gemv_run(const dn_node *d, const gemv_plan *p, kl_kernel_ctx *c) {
  kl_gemv_args a = {.x = c->in[0]->data, .w = d->gemv_w, .w_tail = d->gemv_tail, .k = p->k,
                    .n = p->n, .m = p->m, .alpha = p->alpha, .add_scale = p->add_scale,
                    .has_act = p->has_act, .act = p->act, .y = c->out[0]->data};
  if (p->add)
    a.add = c->in[2]->data, a.add_step = p->add_step, a.add_row = p->add_row;
  if (p->sum)
    a.sum = c->in[KL_FUSED_SUM]->data, a.sum_step = p->sum_step, a.sum_row = p->sum_row;
  if (p->m > 1) { /* its rows packed in the workspace, reserved for this entry */
    kl_dnnl_ws_enter(d->eng);
    a.scratch = d->eng->ws;
  }
  return kl_run_gemv(c, d->fns, &a);
}

/* ---- problem descriptions: what each op asks of oneDNN ---- */

/* The memory descriptors and geometry of one problem. */
/* The layouts a primitive's activations are asked in, tried in this order until
 * oneDNN offers a fast implementation (not its reference loops, impl_is_slow): what
 * the session holds (channels-last or plain, a plain one left to oneDNN's choice for
 * convolutions), channels-last on both sides, oneDNN's choice (blocked) on both sides,
 * plain on both sides. oneDNN 2.6 on AVX2 has no JIT convolution for a channels-last
 * source with a blocked or plain destination, which the session's layouts can give
 * (a convolution whose output feeds a Concat): there the second try runs it. */
typedef enum dn_try { DN_TRY_HELD, DN_TRY_CL, DN_TRY_ANY, DN_TRY_PLAIN, DN_TRIES } dn_try;

typedef struct dn_problem {
  dn_try layouts;
  bool skip;                   /* this try asks for nothing new for the kind of node */
  int nd;
  dnnl_memory_desc_t src_user, wei_user, dst_user, src_want, wei_want, dst_want, bias;
  dnnl_memory_desc_t sum_user; /* a Sum of Y's shape, in its own layout */
  dnnl_memory_desc_t src1;     /* a binary op's second operand */
  bool swap;                   /* the binary op's operands taken the other way round */
  bool unsupported;            /* no primitive can do it: the reference runs */
  bool has_bias;
  bool bf16;                   /* src and weights in bf16 (precision bf16), dst float32 */
  bool fixed_w;                /* the weights are the graph's constants, reordered once */
  dnnl_dims_t strides, dilates, pad_l, pad_r, kernel; /* spatial dims only */
} dn_problem;

/* Weights with the group split out when there is more than one: conv [g, M/g, C/g, K]
 * over kiln's [M, C/g, K]; deconv [g, M/g, C/g, K] over kiln's [C, M/g, K] (i/o
 * swapped, through strides). */
static dnnl_status_t conv_weights_md(const dn_node *d, const kl_tensor *w, int64_t group,
                                     dnnl_memory_desc_t *user, dnnl_memory_desc_t *want) {
  int sp = w->rank - 2, nd = group > 1 ? w->rank + 1 : w->rank, o = group > 1;
  int64_t ksize = 1;
  for (int i = 0; i < sp; i++) ksize *= w->dims[2 + i];
  dnnl_dims_t dims, strides;
  int64_t ocg, icg;
  if (d->kind == DN_CONV) {
    ocg = w->dims[0] / group;
    icg = w->dims[1];
  } else {
    ocg = w->dims[1];
    icg = w->dims[0] / group;
  }
  if (group > 1) dims[0] = group;
  dims[o] = ocg;
  dims[o + 1] = icg;
  for (int i = 0; i < sp; i++) dims[o + 2 + i] = w->dims[2 + i];
  plain_strides(nd, dims, strides);
  if (d->kind == DN_DECONV) { /* memory order is [g][ic][oc][k] */
    strides[o] = ksize;
    strides[o + 1] = ocg * ksize;
  }
  if (group > 1) strides[0] = ocg * icg * ksize;
  dnnl_status_t s = dnnl_memory_desc_init_by_strides(user, nd, dims, dnnl_f32, strides);
  if (s == dnnl_success) s = any_md(want, nd, dims);
  return s;
}

kiln_status kl_dnnl_conv_geometry(const kl_node *n, const kl_tensor *x, const kl_tensor *w,
                                  kl_dnnl_conv_geom *g, kl_err *e) {
  int sp = x->rank - 2;
  kl_window win;
  kiln_status st = kl_window_init(n, sp, w->dims + 2, &win, e);
  for (int i = 0; st == KILN_OK && i < sp; i++) {
    int64_t out;
    st = kl_window_out(&win, i, x->dims[2 + i], &out, e);
    g->strides[i] = win.stride[i];
    g->dilates[i] = win.dilation[i] - 1;
    g->pad_l[i] = win.pad_begin[i];
    g->pad_r[i] = win.pad_end[i]; /* oneDNN rounds the output size down as ONNX does */
  }
  return st;
}

/* Strides, dilations and pads of a Conv over x giving y. */
static kiln_status conv_geometry(const kl_kernel_ctx *c, dn_problem *p) {
  kl_dnnl_conv_geom g;
  kiln_status st = kl_dnnl_conv_geometry(c->node, c->in[0], c->in[1], &g, c->e);
  if (st != KILN_OK) return st;
  memcpy(p->strides, g.strides, sizeof p->strides);
  memcpy(p->dilates, g.dilates, sizeof p->dilates);
  memcpy(p->pad_l, g.pad_l, sizeof p->pad_l);
  memcpy(p->pad_r, g.pad_r, sizeof p->pad_r);
  return KILN_OK;
}

static kiln_status deconv_geometry(const kl_kernel_ctx *c, dn_problem *p) {
  const kl_tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
  int sp = x->rank - 2;
  kl_convt t;
  kiln_status st = kl_convt_init(c->node, sp, w->dims + 2, &t, c->e);
  for (int i = 0; st == KILN_OK && i < sp; i++) {
    int64_t out;
    st = kl_convt_out(&t, i, x->dims[2 + i], &out, c->e);
    p->strides[i] = t.w.stride[i];
    p->dilates[i] = t.w.dilation[i] - 1;
    p->pad_l[i] = t.w.pad_begin[i];
    /* oneDNN's right pad is what gives y's size: ONNX's pad_end less output_padding */
    int64_t span = (w->dims[2 + i] - 1) * t.w.dilation[i] + 1;
    p->pad_r[i] = (x->dims[2 + i] - 1) * t.w.stride[i] + span - t.w.pad_begin[i] - y->dims[2 + i];
  }
  return st;
}

/* A convolution whose kernel is 1 in every spatial dim, unpadded, with a stride above
 * 1 reads only every stride-th element of X: the same as a stride-1 convolution over X
 * subsampled, which oneDNN's 1x1 kernels run faster (ResNet's downsampling 512 -> 1024
 * at 28x28: 2.6 -> 2.0 ms on a Zen 4 core) than their strided form. */
static bool subsampled_1x1(const dn_node *d, const kl_tensor *x, const kl_tensor *w,
                           const dn_problem *p) {
  if (d->kind != DN_CONV) return false;
  bool strided = false;
  for (int i = 0; i < w->rank - 2; i++) {
    /* a stride past X's extent reads one element: left to the strided primitive, so
     * that the view's strides (X's times the stride) cannot overflow */
    if (w->dims[2 + i] != 1 || p->pad_l[i] != 0 || p->pad_r[i] != 0 ||
        p->strides[i] > x->dims[2 + i])
      return false;
    strided |= p->strides[i] > 1;
  }
  return strided;
}

/* X's every stride-th element along the spatial dims: a strided view of kiln's tensor
 * (plain or channels-last) as src_user, reordered into a dense src_want in the
 * workspace; the convolution then has stride 1. false (p unchanged) where oneDNN
 * refuses the view: it takes strides whose spans interleave (an odd H subsampled in
 * [N, C, H, W]) for overlapping memory. */
static bool subsample_src(bool cl, int nd, const dnnl_dims_t xd, dn_problem *p) {
  dnnl_memory_desc_t full, user;
  if ((cl ? kl_dnnl_channels_last_md(&full, nd, xd) : kl_dnnl_plain_md(&full, nd, xd)) != dnnl_success)
    return false;
  dnnl_dims_t dims, strides;
  for (int i = 0; i < nd; i++) {
    dims[i] = xd[i];
    strides[i] = full.format_desc.blocking.strides[i];
  }
  for (int i = 0; i < nd - 2; i++) {
    dims[2 + i] = (xd[2 + i] - 1) / p->strides[i] + 1;
    strides[2 + i] *= p->strides[i];
  }
  if (dnnl_memory_desc_init_by_strides(&user, nd, dims, dnnl_f32, strides) != dnnl_success)
    return false;
  p->src_user = user; /* never the primitive's src itself: it reads a dense copy */
  for (int i = 0; i < nd - 2; i++) {
    p->strides[i] = 1;
    p->dilates[i] = 0;
  }
  return true;
}

/* What a convolution asks its src or dst in for try t, when the session holds it
 * channels-last (held_cl) or plain. */
static dnnl_status_t conv_want_md(dn_try t, bool held_cl, int nd, const dnnl_dims_t dims,
                                  dnnl_memory_desc_t *want) {
  switch (t) {
  case DN_TRY_HELD: return held_cl ? kl_dnnl_channels_last_md(want, nd, dims) : any_md(want, nd, dims);
  case DN_TRY_CL: return kl_dnnl_channels_last_md(want, nd, dims);
  case DN_TRY_ANY: return any_md(want, nd, dims);
  default: return kl_dnnl_plain_md(want, nd, dims);
  }
}

/* X and Y as the session holds them: in bf16 between two bf16 nodes (dn_node.bf16_src,
 * bf16_dst); the try's wants are set apart (choose_pd_as). */
static void held_bf16(const dn_node *d, dn_problem *p) {
  if (d->bf16_src) p->src_user.data_type = dnnl_bf16;
  if (d->bf16_dst) p->dst_user.data_type = dnnl_bf16;
}

/* Conv and ConvTranspose: src and dst in the layouts of the try (p->layouts),
 * reordered from and to what kiln holds around the primitive where they differ. */
static kiln_status conv_problem(const dn_node *d, const kl_kernel_ctx *c, dn_problem *p) {
  const kl_tensor *x = c->in[0], *w = c->in[1], *y = c->out[0], *b = input(c, 2);
  kiln_status st = d->kind == DN_CONV ? conv_geometry(c, p) : deconv_geometry(c, p);
  if (st != KILN_OK) return st;
  int64_t group = kl_attr_int(c->node, "group", 1);
  dnnl_dims_t xd, yd, bd;
  p->nd = x->rank;
  padded_dims(x, p->nd, xd);
  padded_dims(y, p->nd, yd);
  dnnl_status_t s = subsampled_1x1(d, x, w, p) && subsample_src(d->cl_in & 1, p->nd, xd, p)
                       ? dnnl_success
                       : activation_md(d->cl_in & 1, p->nd, xd, &p->src_user, NULL);
  if (s == dnnl_success)
    s = conv_want_md(p->layouts, d->cl_in & 1, p->nd, p->src_user.dims, &p->src_want);
  if (s == dnnl_success) s = activation_md(d->cl_dst, p->nd, yd, &p->dst_user, NULL);
  if (s == dnnl_success) s = conv_want_md(p->layouts, d->cl_dst, p->nd, yd, &p->dst_want);
  if (s == dnnl_success)
    s = activation_md(d->cl_in >> KL_FUSED_SUM & 1, p->nd, yd, &p->sum_user, NULL);
  if (s == dnnl_success) s = conv_weights_md(d, w, group, &p->wei_user, &p->wei_want);
  p->fixed_w = d->const_w || d->w_released;
  held_bf16(d, p);
  p->has_bias = b != NULL;
  bd[0] = y->dims[1];
  if (s == dnnl_success && b) s = kl_dnnl_plain_md(&p->bias, 1, bd);
  return s == dnnl_success ? KILN_OK : dn_fail(c->e, s, "to describe a convolution");
}

/* Pooling: the window of MaxPool/AveragePool, or the whole spatial extent for the
 * global ones; the right pad is what gives y's size (ceil_mode adds to it), which
 * oneDNN's max pooling fills with -inf as ONNX does. */
static kiln_status pool_problem(const dn_node *d, const kl_kernel_ctx *c, dn_problem *p) {
  const kl_tensor *x = c->in[0], *y = c->out[0];
  int sp = x->rank - 2;
  kl_op op = pool_op(c->node);
  bool global = op == KL_OP_GlobalAveragePool || op == KL_OP_GlobalMaxPool;
  kl_window win;
  kiln_status st = global ? KILN_OK : kl_window_init(c->node, sp, NULL, &win, c->e);
  for (int i = 0; st == KILN_OK && i < sp; i++) {
    int64_t out, in = x->dims[2 + i];
    if (global) {
      p->kernel[i] = in, p->strides[i] = 1, p->dilates[i] = p->pad_l[i] = p->pad_r[i] = 0;
      continue;
    }
    st = kl_window_out(&win, i, in, &out, c->e);
    int64_t span = (win.kernel[i] - 1) * win.dilation[i] + 1;
    p->kernel[i] = win.kernel[i];
    p->strides[i] = win.stride[i];
    p->dilates[i] = win.dilation[i] - 1;
    p->pad_l[i] = win.pad_begin[i];
    p->pad_r[i] = (y->dims[2 + i] - 1) * win.stride[i] + span - in - win.pad_begin[i];
    if (p->pad_r[i] < win.pad_end[i] && !win.ceil_mode) p->pad_r[i] = win.pad_end[i];
  }
  if (st != KILN_OK) return st;
  dnnl_dims_t xd, yd;
  p->nd = x->rank;
  padded_dims(x, p->nd, xd);
  padded_dims(y, p->nd, yd);
  /* pooling takes its source in a given layout (no "any") and is fast only when its
   * output has the same one: held (X's), channels-last or plain, reordered from and
   * to what kiln holds where they differ */
  bool cl = p->layouts == DN_TRY_HELD ? (d->cl_in & 1) != 0 : p->layouts == DN_TRY_CL;
  p->skip = p->layouts == DN_TRY_ANY;
  dnnl_status_t s = activation_md(d->cl_in & 1, p->nd, xd, &p->src_user, NULL);
  if (s == dnnl_success) s = activation_md(d->cl_dst, p->nd, yd, &p->dst_user, NULL);
  if (s == dnnl_success) s = activation_md(cl, p->nd, yd, &p->dst_want, NULL);
  if (s == dnnl_success) s = activation_md(cl, p->nd, xd, &p->src_want, NULL);
  return s == dnnl_success ? KILN_OK : dn_fail(c->e, s, "to describe a pooling");
}

/* Add, Sub, Mul, Div: oneDNN broadcasts only its second operand, so a full second
 * operand of Add or Mul becomes the first. */
static kiln_status binary_problem(const dn_node *d, const kl_kernel_ctx *c, dn_problem *p) {
  const kl_tensor *y = c->out[0];
  p->skip = p->layouts != DN_TRY_HELD; /* its second operand is read as held */
  p->swap = !same_shape(c->in[0], y);
  if (p->swap && (!same_shape(c->in[1], y) || c->node->op == KL_OP_Sub || c->node->op == KL_OP_Div)) {
    p->unsupported = true;
    return KILN_OK;
  }
  int i0 = p->swap, i1 = !p->swap;
  p->nd = y->rank > 0 ? y->rank : 1;
  dnnl_dims_t d0, d1, yd;
  padded_dims(c->in[i0], p->nd, d0);
  padded_dims(c->in[i1], p->nd, d1);
  padded_dims(y, p->nd, yd);
  bool cl0 = d->cl_in >> i0 & 1, cl1 = d->cl_in >> i1 & 1;
  dnnl_status_t s = activation_md(cl0, p->nd, d0, &p->src_user, NULL);
  if (s == dnnl_success) s = activation_md(cl1, p->nd, d1, &p->src1, NULL);
  if (s == dnnl_success) s = activation_md(d->cl_dst, p->nd, yd, &p->dst_user, NULL);
  if (s == dnnl_success) s = activation_md(cl0, p->nd, yd, &p->dst_want, NULL);
  p->src_want = p->src_user;
  return s == dnnl_success ? KILN_OK : dn_fail(c->e, s, "to describe a binary op");
}

static dnnl_alg_kind_t binary_alg(kl_op op) {
  switch (op) {
  case KL_OP_Add: return dnnl_binary_add;
  case KL_OP_Sub: return dnnl_binary_sub;
  case KL_OP_Mul: return dnnl_binary_mul;
  default: return dnnl_binary_div;
  }
}

static dnnl_alg_kind_t pool_alg(const kl_node *n) {
  kl_op op = pool_op(n);
  if (op == KL_OP_MaxPool || op == KL_OP_GlobalMaxPool) return dnnl_pooling_max;
  if (op == KL_OP_AveragePool && kl_attr_int(n, "count_include_pad", 0) != 0)
    return dnnl_pooling_avg_include_padding;
  return dnnl_pooling_avg_exclude_padding;
}

/* A matrix product's A and Y for the try: as kiln holds them (HELD), in oneDNN's
 * choice of layout (ANY), or dense and plain (PLAIN, a copy of a transposed or
 * strided A); a computed B is always read as held. */
static dnnl_status_t product_wants(dn_problem *p) {
  p->sum_user = p->dst_user;
  p->skip = p->layouts == DN_TRY_CL;
  if (p->layouts == DN_TRY_ANY) {
    dnnl_status_t s = any_md(&p->src_want, p->nd, p->src_user.dims);
    return s == dnnl_success ? any_md(&p->dst_want, p->nd, p->dst_user.dims) : s;
  }
  p->dst_want = p->dst_user;
  if (p->layouts == DN_TRY_PLAIN) return kl_dnnl_plain_md(&p->src_want, p->nd, p->src_user.dims);
  p->src_want = p->src_user;
  return dnnl_success;
}

/* Gemm: A and B through strides when transposed; C becomes a binary post-op. */
static kiln_status gemm_problem(const dn_node *d, const kl_kernel_ctx *c, dn_problem *p) {
  const kl_tensor *a = c->in[0], *y = c->out[0];
  bool ta = kl_attr_int(c->node, "transA", 0) != 0, tb = kl_attr_int(c->node, "transB", 0) != 0;
  int64_t m = y->dims[0], n = y->dims[1], k = a->dims[ta ? 0 : 1];
  dnnl_dims_t ad = {m, k}, bd = {k, n}, yd = {m, n};
  dnnl_dims_t as = {ta ? 1 : k, ta ? m : 1}, bs = {tb ? 1 : n, tb ? k : 1};
  p->nd = 2;
  dnnl_status_t s = dnnl_memory_desc_init_by_strides(&p->src_user, 2, ad, dnnl_f32, as);
  if (s == dnnl_success) s = dnnl_memory_desc_init_by_strides(&p->wei_user, 2, bd, dnnl_f32, bs);
  if (s == dnnl_success) s = kl_dnnl_plain_md(&p->dst_user, 2, yd);
  held_bf16(d, p);
  p->wei_want = p->wei_user;
  if (s == dnnl_success && (d->const_w || d->w_released)) s = any_md(&p->wei_want, 2, bd);
  if (s == dnnl_success) s = product_wants(p);
  return s == dnnl_success ? KILN_OK : dn_fail(c->e, s, "to describe a Gemm");
}

/* MatMul: operands padded to one rank (a rank-1 A is [1, K], a rank-1 B [K, 1]). */
static bool addend_as_bias(const dn_node *d, const kl_kernel_ctx *c);

/* A [..., M, K] times a matrix B [K, N] is one [batch * M, K] x [K, N] product, whose
 * weights oneDNN then packs (it leaves a batched B plain and copies it at every run),
 * unless a broadcast addend needs the batch dims. */
static bool matmul_as_2d(const dn_node *d, const kl_kernel_ctx *c) {
  const kl_tensor *a = c->in[0], *b = c->in[1], *sum = input(c, KL_FUSED_SUM);
  if (a->rank <= 2 || b->rank != 2 || (sum && !same_shape(sum, c->out[0]))) return false;
  return !input(c, 2) || addend_as_bias(d, c);
}

/* Y [..., M, N] holds the same elements in the same order as the padded result, its
 * 1s dropped, so it is described by the padded dims. */
static kiln_status matmul_problem(const dn_node *d, const kl_kernel_ctx *c, dn_problem *p) {
  const kl_tensor *a = c->in[0], *b = c->in[1];
  int ra = a->rank < 2 ? 2 : a->rank, rb = b->rank < 2 ? 2 : b->rank;
  int nd = ra > rb ? ra : rb;
  dnnl_dims_t ad, bd, yd;
  padded_dims(a, nd, ad);
  padded_dims(b, nd, bd);
  if (b->rank == 1) {
    bd[nd - 2] = b->dims[0];
    bd[nd - 1] = 1;
  }
  for (int i = 0; i < nd - 2; i++) yd[i] = ad[i] > bd[i] ? ad[i] : bd[i];
  yd[nd - 2] = ad[nd - 2];
  yd[nd - 1] = bd[nd - 1];
  if (matmul_as_2d(d, c)) {
    for (int i = 0; i < nd - 2; i++) ad[nd - 2] *= ad[i];
    ad[0] = yd[0] = ad[nd - 2];
    ad[1] = ad[nd - 1];
    yd[1] = yd[nd - 1];
    bd[0] = bd[nd - 2];
    bd[1] = bd[nd - 1];
    nd = 2;
  }
  p->nd = nd;
  dnnl_status_t s = kl_dnnl_plain_md(&p->src_user, nd, ad);
  if (s == dnnl_success) s = kl_dnnl_plain_md(&p->wei_user, nd, bd);
  if (s == dnnl_success) s = kl_dnnl_plain_md(&p->dst_user, nd, yd);
  held_bf16(d, p);
  p->wei_want = p->wei_user;
  if (s == dnnl_success && (d->const_w || d->w_released)) s = any_md(&p->wei_want, nd, bd);
  if (s == dnnl_success) s = product_wants(p);
  return s == dnnl_success ? KILN_OK : dn_fail(c->e, s, "to describe a MatMul");
}

/* Gemm's C or FusedMatMul's Bias as the matmul's own bias when it is one value per
 * output column (oneDNN's fast matmul takes that, not every broadcast of a binary
 * post-op) and nothing scales the product (oneDNN would scale the bias too). */
static bool addend_as_bias(const dn_node *d, const kl_kernel_ctx *c) {
  const kl_tensor *t = input(c, 2);
  if (!t || (d->kind == DN_GEMM && (d->gemm_beta == 0.0f ||
                                    kl_attr_float(c->node, "alpha", 1.0f) != 1.0f)))
    return false;
  const kl_tensor *y = c->out[0];
  for (int i = 0; i + 1 < t->rank; i++)
    if (t->dims[i] != 1) return false;
  return t->rank == 0 || (y->rank > 0 && t->dims[t->rank - 1] == y->dims[y->rank - 1]);
}

static kiln_status describe(const dn_node *d, const kl_kernel_ctx *c, dn_try layouts,
                            dn_problem *p) {
  memset(p, 0, sizeof *p);
  p->layouts = layouts;
  kiln_status st;
  switch (d->kind) {
  case DN_CONV:
  case DN_DECONV: return conv_problem(d, c, p);
  case DN_POOL: return pool_problem(d, c, p);
  case DN_BINARY: return binary_problem(d, c, p);
  case DN_GEMM: st = gemm_problem(d, c, p); break;
  default: st = matmul_problem(d, c, p); break;
  }
  if (st != KILN_OK || !addend_as_bias(d, c)) return st;
  dnnl_dims_t bd;
  for (int i = 0; i < p->nd; i++) bd[i] = 1;
  const kl_tensor *t = input(c, 2);
  if (t->rank > 0) bd[p->nd - 1] = t->dims[t->rank - 1];
  p->has_bias = true;
  dnnl_status_t s = kl_dnnl_plain_md(&p->bias, p->nd, bd);
  return s == dnnl_success ? KILN_OK : dn_fail(c->e, s, "to describe a bias");
}

/* ---- post-ops: Bias / C, Sum, activation ---- */

static dnnl_status_t append_activation(const kl_node *n, dnnl_post_ops_t po) {
  const kl_fused_act *act = kl_fused_act_find(kl_attr_string(n, "activation", NULL));
  if (!act) return dnnl_success;
  const float *p = NULL;
  kl_attr_floats(n, "activation_params", &p);
  const char *a = act->name;
  dnnl_alg_kind_t alg;
  float alpha = 0, beta = 0;
  if (strcmp(a, "HardSigmoid") == 0) { /* clip(alpha x + beta, 0, 1) */
    dnnl_status_t s = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_linear, p[0], p[1]);
    return s == dnnl_success ? dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip_v2, 0, 1)
                             : s;
  }
  if (strcmp(a, "Relu") == 0) alg = dnnl_eltwise_relu;
  else if (strcmp(a, "LeakyRelu") == 0) alg = dnnl_eltwise_relu, alpha = p[0];
  else if (strcmp(a, "Clip") == 0) alg = dnnl_eltwise_clip_v2, alpha = p[0], beta = p[1];
  else if (strcmp(a, "Sigmoid") == 0) alg = dnnl_eltwise_logistic;
  else if (strcmp(a, "Tanh") == 0) alg = dnnl_eltwise_tanh;
  else if (strcmp(a, "HardSwish") == 0) alg = dnnl_eltwise_hardswish;
  else if (strcmp(a, "Gelu") == 0) alg = dnnl_eltwise_gelu_erf;
  else if (strcmp(a, "GeluTanh") == 0) alg = dnnl_eltwise_gelu_tanh;
  else if (strcmp(a, "Silu") == 0) alg = dnnl_eltwise_swish, alpha = 1;
  else if (strcmp(a, "Mish") == 0) alg = dnnl_eltwise_mish;
  else if (strcmp(a, "Elu") == 0) alg = dnnl_eltwise_elu, alpha = p[0];
  else return dnnl_unimplemented;
  return dnnl_post_ops_append_eltwise(po, 1.0f, alg, alpha, beta);
}

/* A binary add of input k (broadcast to the output) as post-op number idx. */
static dnnl_status_t append_addend(dn_entry *en, const kl_tensor *t, int k, int nd,
                                   dnnl_post_ops_t po, dnnl_memory_desc_t *mds) {
  if (en->epilogue) { /* added by kiln after the primitive */
    en->after_input[en->n_after++] = k;
    return dnnl_success;
  }
  dnnl_dims_t dims;
  padded_dims(t, nd, dims);
  dnnl_status_t s = kl_dnnl_plain_md(&mds[en->n_post], nd, dims);
  if (s == dnnl_success) s = dnnl_post_ops_append_binary(po, dnnl_binary_add, &mds[en->n_post]);
  if (s != dnnl_success) return s;
  en->post_arg[en->n_post] = DNNL_ARG_ATTR_MULTIPLE_POST_OP(dnnl_post_ops_len(po) - 1) |
                             DNNL_ARG_SRC_1;
  en->post_input[en->n_post] = k;
  en->n_post++;
  return dnnl_success;
}

/* The addend at input 2: FusedMatMul's Bias, or Gemm's C (beta * C, precomputed when
 * beta != 1); Conv and ConvTranspose take theirs as the primitive's bias. */
static dnnl_status_t append_input2(const dn_node *d, dn_entry *en, const kl_kernel_ctx *c,
                                   int nd, dnnl_post_ops_t po, dnnl_memory_desc_t *mds) {
  const kl_tensor *t = input(c, 2);
  if (!t || d->kind == DN_CONV || d->kind == DN_DECONV || d->kind == DN_POOL ||
      d->kind == DN_BINARY || addend_as_bias(d, c))
    return dnnl_success;
  if (d->kind == DN_GEMM && d->gemm_beta == 0.0f) return dnnl_success;
  return append_addend(en, t, 2, nd, po, mds);
}

static dnnl_status_t build_post_ops(const dn_node *d, dn_entry *en, const kl_kernel_ctx *c,
                                    int nd, dnnl_post_ops_t po, dnnl_memory_desc_t *mds) {
  dnnl_status_t s = append_input2(d, en, c, nd, po, mds);
  const kl_tensor *sum = input(c, KL_FUSED_SUM);
  if (s == dnnl_success && sum) {
    en->sum_postop = same_shape(sum, c->out[0]) && !en->sum_after;
    s = en->sum_postop ? dnnl_post_ops_append_sum(po, 1.0f)
                       : append_addend(en, sum, KL_FUSED_SUM, nd, po, mds);
  }
  if (s == dnnl_success && !d->act_after && !en->epilogue) s = append_activation(c->node, po);
  return s;
}

/* Scratchpad owned by us (allocated once with the entry), post-ops, Gemm's alpha. */
static dnnl_status_t build_attr(const dn_node *d, dn_entry *en, const kl_kernel_ctx *c,
                                int nd, dnnl_primitive_attr_t attr, dnnl_memory_desc_t *mds) {
  dnnl_post_ops_t po = NULL;
  dnnl_status_t s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  float alpha = d->kind == DN_GEMM ? kl_attr_float(c->node, "alpha", 1.0f) : 1.0f;
  if (s == dnnl_success && alpha != 1.0f)
    s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha);
  if (s == dnnl_success) s = dnnl_post_ops_create(&po);
  if (s == dnnl_success) s = build_post_ops(d, en, c, nd, po, mds);
  if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
  if (po) dnnl_post_ops_destroy(po);
  return s;
}

/* ---- building an entry ---- */

/* A 3x3 convolution with stride 1 and one group: Winograd F(4x4, 3x3) does it with
 * about a third of the multiplications, in float32, when oneDNN has it for the ISA.
 * Below 32 channels the transforms cost more than they save. Only for constant
 * weights: oneDNN transforms computed ones (a training step's) at every run, which
 * cost ResNet-18's 512-channel 3x3 convolutions 100 ms each at batch 8 (direct: 8). */
static bool winograd_candidate(const dn_problem *p) {
  if (p->bf16 || !p->fixed_w || p->nd != 4 || p->wei_user.ndims != 4) return false;
  const dnnl_dim_t *k = p->wei_user.dims; /* [OC, IC, 3, 3] */
  return k[0] >= 32 && k[1] >= 32 && k[2] == 3 && k[3] == 3 && p->strides[0] == 1 &&
         p->strides[1] == 1 && p->dilates[0] == 0 && p->dilates[1] == 0;
}

static const char *impl_of(const_dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
    return "unknown";
  return impl;
}

/* oneDNN 2.6's brgconv builds its kernels by the output row's width: about 1.3 us and
 * 550 bytes an output column to create the primitive (a 1-D convolution of 3 taps over
 * 9e6 samples, 2.7e7 steps from a 300-byte file, asked for 5 GB and its std::bad_alloc
 * aborted the process under a 4 GB cap; over 3e6 samples creating it took 8 s). Rows
 * wider than WIDE_ROW outputs take the next implementation, oneDNN's direct jit kernel
 * where it has one: as fast a step on such rows (0.29 against 0.32 ns for one channel
 * pair, 0.011 for 32 x 32 on one AVX-512 core), nothing to build by the width. */
#define WIDE_ROW 16384

/* The first implementation of desc, past brgconv when skip_brgconv. */
static dnnl_status_t first_pd(const_dnnl_op_desc_t desc, dnnl_primitive_attr_t attr,
                              dnnl_engine_t engine, bool skip_brgconv,
                              dnnl_primitive_desc_t *pd) {
  if (!skip_brgconv) return dnnl_primitive_desc_create(pd, desc, attr, engine, NULL);
  dnnl_primitive_desc_iterator_t it;
  dnnl_status_t s = dnnl_primitive_desc_iterator_create(&it, desc, attr, engine, NULL);
  if (s != dnnl_success) return s;
  for (;;) {
    dnnl_primitive_desc_t cand = dnnl_primitive_desc_iterator_fetch(it);
    if (!cand) {
      s = dnnl_out_of_memory;
      break;
    }
    if (strncmp(impl_of(cand), "brgconv:", 8) != 0) {
      *pd = cand;
      break;
    }
    dnnl_primitive_desc_destroy(cand);
    if ((s = dnnl_primitive_desc_iterator_next(it)) != dnnl_success) break;
  }
  dnnl_primitive_desc_iterator_destroy(it);
  return s == dnnl_iterator_ends ? dnnl_unimplemented : s;
}

static dnnl_status_t conv_desc_create(const dn_problem *p, dnnl_alg_kind_t alg,
                                      const dnnl_memory_desc_t *src,
                                      const dnnl_memory_desc_t *dst, dnnl_primitive_attr_t attr,
                                      dnnl_engine_t engine, dnnl_primitive_desc_t *pd) {
  dnnl_convolution_desc_t cd;
  dnnl_status_t s = dnnl_dilated_convolution_forward_desc_init(
      &cd, dnnl_forward_inference, alg, src, &p->wei_want, p->has_bias ? &p->bias : NULL, dst,
      p->strides, p->dilates, p->pad_l, p->pad_r);
  bool wide = p->dst_user.ndims > 2 && p->dst_user.dims[p->dst_user.ndims - 1] > WIDE_ROW;
  return s == dnnl_success ? first_pd(&cd, attr, engine, wide, pd) : s;
}

/* Winograd when it applies (its src and dst in the blocked layout it needs, reordered
 * from and to what kiln holds), else direct in the layouts asked for. */
static dnnl_status_t conv_pd_create(const dn_problem *p, dnnl_primitive_attr_t attr,
                                    dnnl_engine_t engine, dnnl_primitive_desc_t *pd) {
  if (winograd_candidate(p)) {
    dnnl_memory_desc_t src, dst;
    dnnl_status_t s = any_md(&src, 4, p->src_user.dims);
    if (s == dnnl_success) s = any_md(&dst, 4, p->dst_user.dims);
    if (s == dnnl_success)
      s = conv_desc_create(p, dnnl_convolution_winograd, &src, &dst, attr, engine, pd);
    if (s == dnnl_success) return s;
  }
  return conv_desc_create(p, dnnl_convolution_direct, &p->src_want, &p->dst_want, attr, engine,
                          pd);
}

static dnnl_status_t op_desc_create(const dn_node *d, const dn_problem *p,
                                    dnnl_primitive_attr_t attr, dnnl_engine_t engine,
                                    dnnl_primitive_desc_t *pd) {
  const dnnl_memory_desc_t *bias = p->has_bias ? &p->bias : NULL;
  dnnl_status_t s;
  if (d->kind == DN_CONV) return conv_pd_create(p, attr, engine, pd);
  if (d->kind == DN_DECONV) {
    dnnl_deconvolution_desc_t dd;
    s = dnnl_dilated_deconvolution_forward_desc_init(
        &dd, dnnl_forward_inference, dnnl_deconvolution_direct, &p->src_want, &p->wei_want,
        bias, &p->dst_want, p->strides, p->dilates, p->pad_l, p->pad_r);
    return s == dnnl_success ? dnnl_primitive_desc_create(pd, &dd, attr, engine, NULL) : s;
  }
  if (d->kind == DN_BINARY) {
    dnnl_binary_desc_t bd;
    s = dnnl_binary_desc_init(&bd, binary_alg(d->node->op), &p->src_want, &p->src1,
                              &p->dst_want);
    return s == dnnl_success ? dnnl_primitive_desc_create(pd, &bd, attr, engine, NULL) : s;
  }
  if (d->kind == DN_POOL) {
    dnnl_pooling_v2_desc_t pl;
    s = dnnl_pooling_v2_forward_desc_init(&pl, dnnl_forward_inference, pool_alg(d->node),
                                          &p->src_want, &p->dst_want, p->strides, p->kernel,
                                          p->dilates, p->pad_l, p->pad_r);
    return s == dnnl_success ? dnnl_primitive_desc_create(pd, &pl, attr, engine, NULL) : s;
  }
  dnnl_matmul_desc_t md;
  s = dnnl_matmul_desc_init(&md, &p->src_want, &p->wei_want, bias, &p->dst_want);
  return s == dnnl_success ? dnnl_primitive_desc_create(pd, &md, attr, engine, NULL) : s;
}

/* Memory over buf, or with no buffer yet (NULL: kiln's pointer is set at each run). */
static dnnl_status_t memory(dnnl_memory_t *m, const dnnl_memory_desc_t *md, dnnl_engine_t eng,
                            void *buf) {
  return dnnl_memory_create(m, md, eng, buf ? buf : DNNL_MEMORY_NONE);
}

static void reorder_free(dn_reorder *r) {
  if (r->prim) dnnl_primitive_destroy(r->prim);
  if (r->from) dnnl_memory_destroy(r->from);
  if (r->to) dnnl_memory_destroy(r->to);
  if (r->scratch) dnnl_memory_destroy(r->scratch);
  memset(r, 0, sizeof *r);
}

/* A reorder from `from` to `to` layouts; the buffers are given (or set per run), and
 * so is its scratchpad's (r->scratch_bytes of the workspace, when it needs one). */
static dnnl_status_t reorder_create(dn_reorder *r, dnnl_engine_t eng,
                                    const dnnl_memory_desc_t *from, void *from_buf,
                                    const dnnl_memory_desc_t *to, void *to_buf) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s = dnnl_primitive_attr_create(&attr);
  if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (s == dnnl_success) s = dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, attr);
  if (s == dnnl_success) s = dnnl_primitive_create(&r->prim, pd);
  const dnnl_memory_desc_t *sp = s == dnnl_success ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0) : NULL;
  r->scratch_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
  if (s == dnnl_success && r->scratch_bytes) s = memory(&r->scratch, sp, eng, NULL);
  if (s == dnnl_success) s = memory(&r->from, from, eng, from_buf);
  if (s == dnnl_success) s = memory(&r->to, to, eng, to_buf);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return s;
}

static dnnl_status_t reorder_run(const dn_reorder *r, dnnl_stream_t stream) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, r->from}, {DNNL_ARG_TO, r->to},
                             {DNNL_ARG_SCRATCHPAD, r->scratch}};
  return dnnl_primitive_execute(r->prim, stream, r->scratch ? 3 : 2, args);
}

/* The primitive's side of a tensor kiln holds plainly: the same memory when the
 * layouts agree, else a region of the workspace (at *off; *used grows by its size)
 * and a reorder between (in: user -> region, out: region -> user). */
static dnnl_status_t staged(dnnl_engine_t eng, const dnnl_memory_desc_t *user,
                            const dnnl_memory_desc_t *want, bool in, dnnl_memory_t *m,
                            bool *is_staged, size_t *off, size_t *used, dn_reorder *r) {
  if (dnnl_memory_desc_equal(user, want)) return memory(m, user, eng, NULL);
  *is_staged = true;
  *off = kl_dnnl_ws_take(used, dnnl_memory_desc_get_size(want));
  dnnl_status_t s = memory(m, want, eng, NULL);
  if (s != dnnl_success) return s;
  return in ? reorder_create(r, eng, user, NULL, want, NULL)
            : reorder_create(r, eng, want, NULL, user, NULL);
}

/* Constant weights in the primitive's layout: shared with an entry that asked for the
 * same layout, else reordered now, once. Returns the index in d->packed or -1. */
static int pack_weights(dn_node *d, const dnnl_memory_desc_t *user,
                        const dnnl_memory_desc_t *want, dnnl_status_t *s) {
  const void *from_buf = d->const_w;
  if (d->w_released) { /* the plain weights are gone: from the packed copy */
    user = &d->packed[d->w_src].md;
    from_buf = d->packed[d->w_src].data;
  }
  for (int i = 0; i < DN_SLOTS; i++)
    if (d->packed[i].data && dnnl_memory_desc_equal(&d->packed[i].md, want)) {
      d->packed[i].users++;
      return i;
    }
  int slot = 0;
  while (slot < DN_SLOTS && d->packed[slot].data) slot++;
  if (slot == DN_SLOTS) { /* every entry holds its own layout: cannot happen */
    *s = dnnl_runtime_error;
    return -1;
  }
  dn_packed *pk = &d->packed[slot];
  pk->data = aligned_alloc_bytes(dnnl_memory_desc_get_size(want));
  if (!pk->data) {
    *s = dnnl_out_of_memory;
    return -1;
  }
  dn_reorder r = {0};
  *s = reorder_create(&r, d->eng->engine, user, (void *)from_buf, want, pk->data);
  if (*s == dnnl_success && r.scratch_bytes) *s = kl_dnnl_ws_reserve(d->eng, r.scratch_bytes);
  if (*s == dnnl_success && r.scratch) *s = dnnl_memory_set_data_handle(r.scratch, d->eng->ws);
  if (*s == dnnl_success) *s = reorder_run(&r, d->eng->stream);
  if (*s == dnnl_success) *s = dnnl_stream_wait(d->eng->stream);
  reorder_free(&r);
  if (*s != dnnl_success) {
    free(pk->data);
    pk->data = NULL;
    return -1;
  }
  pk->md = *want;
  pk->users = 1;
  if (d->own_w && !d->w_released) { /* the node keeps this copy for its life */
    free(d->own_w->data);
    d->own_w->data = NULL;
    d->const_w = NULL;
    d->w_released = true;
    d->w_src = slot;
    pk->users++;
  }
  return slot;
}

static dnnl_status_t setup_weights(dn_node *d, dn_entry *en, const dn_problem *p,
                                   const dnnl_memory_desc_t *want, size_t *used) {
  dnnl_engine_t eng = d->eng->engine;
  if (!d->w_released && (!d->const_w || dnnl_memory_desc_equal(&p->wei_user, want)))
    return staged(eng, &p->wei_user, want, true, &en->wei, &en->wei_staged, &en->wei_off,
                  used, &en->wei_in);
  dnnl_status_t s = dnnl_success;
  en->packed = pack_weights(d, &p->wei_user, want, &s);
  return s == dnnl_success ? memory(&en->wei, want, eng, d->packed[en->packed].data) : s;
}

static dnnl_status_t setup_memories(dn_node *d, dn_entry *en, const dn_problem *p,
                                    dnnl_primitive_desc_t pd, const dnnl_memory_desc_t *post) {
  dnnl_engine_t eng = d->eng->engine;
  const dnnl_memory_desc_t *src = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *wei = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  const dnnl_memory_desc_t *dst = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  size_t used = 0;
  dnnl_status_t s = staged(eng, &p->src_user, src, true, &en->src, &en->src_staged,
                           &en->src_off, &used, &en->src_in);
  if (s == dnnl_success && d->kind != DN_POOL && d->kind != DN_BINARY)
    s = setup_weights(d, en, p, wei, &used);
  if (s == dnnl_success && d->kind == DN_BINARY) s = memory(&en->src1, &p->src1, eng, NULL);
  if (s == dnnl_success)
    s = staged(eng, &p->dst_user, dst, false, &en->dst, &en->dst_staged, &en->dst_off, &used,
               &en->dst_out);
  if (s == dnnl_success && en->sum_postop && en->dst_staged) /* Sum into the staged dst */
    s = reorder_create(&en->sum_in, eng, &p->sum_user, NULL, dst, NULL);
  else if (s == dnnl_success && en->sum_postop && !dnnl_memory_desc_equal(&p->sum_user, dst))
    s = reorder_create(&en->sum_in, eng, &p->sum_user, NULL, dst, NULL); /* into Y */
  else if (s == dnnl_success && en->sum_after &&
           !dnnl_memory_desc_equal(&p->sum_user, &p->dst_user)) /* into Y's layout, aside */
    s = reorder_create(&en->sum_in, eng, &p->sum_user, NULL, &p->dst_user, NULL);
  if (s == dnnl_success && p->has_bias) s = memory(&en->bias, &p->bias, eng, NULL);
  for (int k = 0; s == dnnl_success && k < en->n_post; k++)
    s = memory(&en->post[k], &post[k], eng, NULL);
  /* One scratchpad region for the primitive and its reorders, as large as the largest. */
  size_t sp_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
  const dn_reorder *r[] = {&en->src_in, &en->wei_in, &en->dst_out, &en->sum_in};
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
    if (r[i]->scratch_bytes > sp_bytes) sp_bytes = r[i]->scratch_bytes;
  en->scratch_off = kl_dnnl_ws_take(&used, sp_bytes);
  if (s == dnnl_success && sp && dnnl_memory_desc_get_size(sp))
    s = memory(&en->scratch, sp, eng, NULL);
  return s == dnnl_success ? kl_dnnl_ws_reserve(d->eng, used) : s;
}

/* Points the entry's staged memories and scratchpads into the workspace at base. */
static dnnl_status_t ws_bind(dn_entry *en, char *base) {
  struct { dnnl_memory_t m; bool on; size_t off; } at[] = {
      {en->src, en->src_staged, en->src_off},     {en->src_in.to, en->src_staged, en->src_off},
      {en->wei, en->wei_staged, en->wei_off},     {en->wei_in.to, en->wei_staged, en->wei_off},
      {en->dst, en->dst_staged, en->dst_off},     {en->dst_out.from, en->dst_staged, en->dst_off},
      {en->sum_in.to, en->dst_staged, en->dst_off},
      {en->scratch, true, en->scratch_off},       {en->src_in.scratch, true, en->scratch_off},
      {en->wei_in.scratch, true, en->scratch_off}, {en->dst_out.scratch, true, en->scratch_off},
      {en->sum_in.scratch, true, en->scratch_off}};
  dnnl_status_t s = dnnl_success;
  for (size_t i = 0; s == dnnl_success && i < sizeof at / sizeof at[0]; i++)
    if (at[i].m && at[i].on) s = dnnl_memory_set_data_handle(at[i].m, base + at[i].off);
  return s;
}

static void entry_free(dn_node *d, dn_entry *en) {
  if (en->prim) dnnl_primitive_destroy(en->prim);
  dnnl_memory_t mems[] = {en->src, en->wei, en->bias, en->dst, en->scratch, en->post[0],
                          en->post[1], en->src1};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
    if (mems[i]) dnnl_memory_destroy(mems[i]);
  reorder_free(&en->src_in);
  reorder_free(&en->wei_in);
  reorder_free(&en->dst_out);
  reorder_free(&en->sum_in);
  kl_wino_free(en->wino);
  kl_im2col_free(en->im2col);
  kl_gconv_free(en->gconv);
  free(en->sum_copy);
  if (en->packed >= 0 && --d->packed[en->packed].users == 0) {
    free(d->packed[en->packed].data);
    d->packed[en->packed].data = NULL;
  }
  memset(en, 0, sizeof *en);
  en->packed = -1;
}

/* oneDNN's name for the implementation it chose ("jit:avx2", "brg:avx512_core",
 * "ref:any"). */
kiln_status kl_dnnl_sgemm_nt(const float *x, const float *w, const float *bias, int64_t m,
                             int64_t k, int64_t n, float *y, kl_err *e) {
  if (m <= 0 || n <= 0) return KILN_OK;
  for (int64_t r = 0; r < m; r++) {
    if (bias) memcpy(y + r * n, bias, sizeof(float) * (size_t)n);
    else memset(y + r * n, 0, sizeof(float) * (size_t)n);
  }
  if (k <= 0) return KILN_OK;
  dnnl_status_t s = dnnl_sgemm('N', 'T', m, n, k, 1.0f, x, k, w, k, 1.0f, y, n);
  return s == dnnl_success ? KILN_OK
                           : kl_fail(e, KILN_ERR_INTERNAL, "oneDNN failed its sgemm (%lld x "
                                     "%lld x %lld): status %d", (long long)m, (long long)k,
                                     (long long)n, (int)s);
}

bool kl_dnnl_impl_is_slow(const char *impl) {
  return strncmp(impl, "ref", 3) == 0 || strncmp(impl, "simple", 6) == 0;
}

static bool bf16_kind(dn_kind k) {
  return k == DN_CONV || k == DN_DECONV || k == DN_GEMM || k == DN_MATMUL;
}

static bool same_wants(const dn_problem *a, const dn_problem *b) {
  return dnnl_memory_desc_equal(&a->src_want, &b->src_want) &&
         dnnl_memory_desc_equal(&a->dst_want, &b->dst_want);
}

/* Whether c is a convolution oneDNN runs faster in its blocked layout than in the
 * channels-last one the session holds, X and Y reordered around it: at the AVX2 level
 * (oneDNN's jit:avx2), a kernel of 3x3 or more, 40 input channels or more (64 a group
 * and more where grouped). Measured on one Zen 3 core, each shape of the bench and
 * trial models that neither kiln's Winograd nor its im2col product takes, min of 30
 * runs, channels-last against blocked with its two reorders: 64 -> 64 3x3 stride 2 at
 * 112x112 9.3 ms against 3.8; 128 -> 256 stride 2 at 56x56 12.1 against 5.9; 256 -> 256
 * stride 2 at 28x28 4.8 against 3.7; 128 -> 16 stride 1 at 56x56 3.0 against 1.9; a
 * dilated 256 -> 256 at 28x28 17.8 against 13.9; NFNet's 384 -> 384 in groups of 64 at
 * 7x7 0.52 against 0.39. Not so below 40 channels (24 -> 48 stride 2 at 112x112 0.91
 * against 0.99, a 3-channel stem 0.30 against 0.42: the reorders cost what the kernel
 * gains), with few channels a group (RegNet's 8: 0.68 against 0.79), 2x2 patch or 1x7
 * kernels (128 -> 128 at 17x17 7x1 0.82 against 0.84), depthwise (jit_dw:avx2) or 1x1
 * (jit_1x1:avx2, as fast channels-last). */
static bool blocked_conv(const dn_node *d, const kl_kernel_ctx *c) {
  if (d->kind != DN_CONV || kl_isa_level() != KL_ISA_AVX2 || c->n_in < 2) return false;
  const kl_tensor *w = c->in[1];
  if (w->rank != 4 || w->dims[2] < 3 || w->dims[3] < 3 || w->dims[1] < 40) return false;
  int64_t group = kl_attr_int(c->node, "group", 1), icg = w->dims[1];
  int64_t ocg = group > 0 ? w->dims[0] / group : 0;
  return group == 1 || (group > 1 && icg >= 64 && ocg >= 64 && icg % 8 == 0 && ocg % 8 == 0);
}

/* Whether pd, a convolution's, runs on oneDNN's blocked layout (nChw8c, ...) of Y,
 * which kiln never holds: X and Y are reordered around it (blocked_conv). */
static bool reordered_to_blocked(const dn_node *d, const_dnnl_primitive_desc_t pd) {
  if (d->kind != DN_CONV) return false;
  return kl_dnnl_md_blocked(dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0));
}

/* The primitive descriptor for c's shapes in the first layouts (dn_try) for which
 * oneDNN has a fast implementation; where it has only slow ones, the first of those,
 * which en->impl then names (kiln bench warns of it and the tests fail on it). *s is
 * dnnl_unimplemented when oneDNN has none at all (p then describes the first try). */
static kiln_status choose_pd_as(const dn_node *d, const kl_kernel_ctx *c,
                                dnnl_primitive_attr_t attr, bool bf16, dn_problem *p,
                                dnnl_primitive_desc_t *pd, dnnl_status_t *s) {
  dn_problem tried[DN_TRIES];
  int n = 0, slow = -1;
  dnnl_primitive_desc_t slow_pd = NULL;
  static const dn_try held_first[DN_TRIES] = {DN_TRY_HELD, DN_TRY_CL, DN_TRY_ANY, DN_TRY_PLAIN};
  static const dn_try blocked_first[DN_TRIES] = {DN_TRY_ANY, DN_TRY_HELD, DN_TRY_CL,
                                                 DN_TRY_PLAIN};
  const dn_try *order = !bf16 && blocked_conv(d, c) ? blocked_first : held_first;
  *s = dnnl_unimplemented;
  for (int i = 0; i < DN_TRIES; i++) {
    dn_try t = order[i];
    dn_problem *q = &tried[n];
    kiln_status st = describe(d, c, t, q);
    if (st != KILN_OK) {
      if (slow_pd) dnnl_primitive_desc_destroy(slow_pd);
      return st;
    }
    if (bf16_kind(d->kind)) { /* the same layouts; the operands' elements bf16 or not */
      q->bf16 = bf16;
      q->src_want.data_type = q->wei_want.data_type = bf16 ? dnnl_bf16 : dnnl_f32;
      q->dst_want.data_type = bf16 && d->bf16_dst ? dnnl_bf16 : dnnl_f32;
    }
    if (i == 0) *p = *q;
    if (q->unsupported) break;
    bool seen = q->skip;
    for (int k = 0; k < n && !seen; k++) seen = same_wants(&tried[k], q);
    if (seen) continue;
    n++;
    dnnl_primitive_desc_t cand = NULL;
    dnnl_status_t r = op_desc_create(d, q, attr, d->eng->engine, &cand);
    if (r == dnnl_unimplemented || r == dnnl_invalid_arguments) continue;
    if (r != dnnl_success) {
      *s = r;
      break;
    }
    if (!kl_dnnl_impl_is_slow(impl_of(cand))) {
      if (slow_pd) dnnl_primitive_desc_destroy(slow_pd);
      *p = *q;
      *pd = cand;
      *s = dnnl_success;
      return KILN_OK;
    }
    if (slow_pd) {
      dnnl_primitive_desc_destroy(cand);
    } else {
      slow_pd = cand;
      slow = n - 1;
    }
  }
  if (slow_pd && (*s == dnnl_unimplemented || *s == dnnl_invalid_arguments)) {
    *p = tried[slow];
    *pd = slow_pd;
    *s = dnnl_success;
  } else if (slow_pd) {
    dnnl_primitive_desc_destroy(slow_pd);
  }
  return KILN_OK;
}

/* Precision bf16 (the engine's): a convolution or matrix product computes in bf16 where
 * oneDNN has a fast bf16 implementation for one of the layouts, else in float32 as
 * any other session (choose_pd_as). */
static kiln_status choose_pd(const dn_node *d, const kl_kernel_ctx *c,
                             dnnl_primitive_attr_t attr, dn_problem *p,
                             dnnl_primitive_desc_t *pd, dnnl_status_t *s) {
  if (d->eng->bf16 && bf16_kind(d->kind)) {
    dn_problem q;
    dnnl_primitive_desc_t cand = NULL;
    kiln_status st = choose_pd_as(d, c, attr, true, &q, &cand, s);
    if (st != KILN_OK) return st;
    if (*s == dnnl_success && !kl_dnnl_impl_is_slow(impl_of(cand))) {
      *p = q;
      *pd = cand;
      return KILN_OK;
    }
    if (cand) dnnl_primitive_desc_destroy(cand);
  }
  return choose_pd_as(d, c, attr, false, p, pd, s);
}

/* Whether a matrix product can move its broadcast addends and activation out of the
 * primitive (dn_entry.epilogue): kiln's primitives must have the activation. */
static bool epilogue_of(const dn_node *d, const kl_kernel_ctx *c, dn_entry *en) {
  if ((d->kind != DN_GEMM && d->kind != DN_MATMUL) || d->bf16_dst) return false;
  bool has;
  if (!kl_isa_fused_act(c->node, &has, &en->epi_act)) return false;
  en->epi_has_act = has && !d->act_after;
  return true;
}

/* oneDNN's implementations that take a sum post-op by loading dst into their
 * accumulators before the first product: the direct jit kernels ("jit:avx2") and the
 * gemm-based ones (beta = 1). Their products then round at the magnitude of Sum, not of
 * the convolution's own result: where the residual is much the larger (RAFT adds each
 * step's small flow update to pixel coordinates up to 27), the update keeps few bits
 * (raft_small -O2: 20 times the relative RMS error against float64 of -O0). The 1x1
 * kernels and kiln's Winograd add Sum to the finished result. */
static bool sums_from_dst(const char *impl) {
  return strncmp(impl, "jit:", 4) == 0 || strstr(impl, "gemm:") != NULL;
}

/* Whether a convolution whose primitive pd takes Sum as a sum post-op should take it
 * after the primitive (dn_entry.sum_after): in float32, with an activation kiln can
 * apply after it. */
static bool sum_after_of(const dn_node *d, dn_entry *en, const kl_kernel_ctx *c,
                         const dn_problem *p, dnnl_primitive_desc_t pd) {
  if (d->kind != DN_CONV || !en->sum_postop || p->bf16 || d->bf16_dst ||
      !sums_from_dst(impl_of(pd)))
    return false;
  bool has;
  if (!kl_isa_fused_act(c->node, &has, &en->epi_act)) return false;
  en->epi_has_act = has && !d->act_after;
  return true;
}

/* One round of entry_build: the attributes for en's post-ops (en->epilogue says which
 * are oneDNN's), then the primitive descriptor choose_pd finds. */
static kiln_status pick(dn_node *d, dn_entry *en, const kl_kernel_ctx *c, dn_problem *p,
                        dnnl_memory_desc_t *post, dnnl_primitive_attr_t *attr,
                        dnnl_primitive_desc_t *pd, dnnl_status_t *s) {
  en->n_post = en->n_after = 0;
  en->sum_postop = false;
  kiln_status st = describe(d, c, DN_TRY_HELD, p); /* the rank for the post-ops */
  if (st != KILN_OK) return st;
  *s = dnnl_primitive_attr_create(attr);
  if (*s == dnnl_success) *s = build_attr(d, en, c, p->nd, *attr, post);
  return *s == dnnl_success ? choose_pd(d, c, *attr, p, pd, s) : KILN_OK;
}

static void pick_free(dnnl_primitive_attr_t attr, dnnl_primitive_desc_t pd) {
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
}

/* Whether c is a 2-D convolution with constant weights, of one group (or of any when
 * grouped), whose Sum (if any) has Y's shape and is held as Y is, with an activation
 * kiln's primitives have: then *p holds its geometry (conv_geometry, whose errors are
 * the primitive's to report). What kiln's own convolutions (the Winograd, the im2col
 * product, the grouped one) take in common. */
static bool own_conv_geometry(const dn_node *d, const kl_kernel_ctx *c, bool grouped,
                              dn_problem *p) {
  if (d->kind != DN_CONV || !d->const_w || d->w_released) return false;
  const kl_tensor *x = c->in[0], *w = c->in[1], *y = c->out[0], *sum = input(c, KL_FUSED_SUM);
  bool has;
  kl_act act;
  int64_t group = kl_attr_int(c->node, "group", 1);
  if (x->rank != 4 || w->rank != 4 || group < 1 || (group != 1 && !grouped) ||
      w->dims[1] * group != x->dims[1] ||
      (sum && (!same_shape(sum, y) || (d->cl_in >> KL_FUSED_SUM & 1) != (unsigned)d->cl_dst)) ||
      !kl_isa_fused_act(c->node, &has, &act))
    return false;
  memset(p, 0, sizeof *p);
  kl_err ignored = {0};
  kl_kernel_ctx quiet = *c;
  quiet.e = &ignored;
  return conv_geometry(&quiet, p) == KILN_OK;
}

/* A 3x3, stride-1 one (own_conv_geometry) at the AVX2 level, where oneDNN has no
 * Winograd: kiln's runs it (dnnl_wino.c), with its Bias, Sum and activation, X and Y in
 * the layouts the session holds them. Its constant weights are needed plain, once (not
 * when a release_weights session already freed them). */
static bool wino_shape_of(const dn_node *d, const kl_kernel_ctx *c, kl_wino_shape *s) {
  dn_problem p;
  if (kl_isa_level() != KL_ISA_AVX2 || !own_conv_geometry(d, c, false, &p)) return false;
  const kl_tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
  if (w->dims[2] != 3 || w->dims[3] != 3 || p.strides[0] != 1 || p.strides[1] != 1 ||
      p.dilates[0] != 0 || p.dilates[1] != 0)
    return false;
  *s = (kl_wino_shape){x->dims[0], x->dims[2], x->dims[3], x->dims[1], y->dims[1],
                       y->dims[2], y->dims[3], p.pad_l[0], p.pad_l[1], (d->cl_in & 1) != 0,
                       d->cl_dst};
  return kl_wino_fits(s);
}

/* One with a kernel larger than 1x1 (own_conv_geometry), at a level whose product
 * tiles are fast, that kl_im2col_fits takes: kiln's product runs it (dnnl_im2col.c),
 * with its Bias, Sum and activation, X and Y in the layouts held. */
static bool im2col_shape_of(const dn_node *d, const kl_kernel_ctx *c, kl_im2col_shape *s) {
  dn_problem p;
  if (!d->fns->gemv->tile || !d->fns->gemv->rows_fast || d->bf16_src || d->bf16_dst ||
      !own_conv_geometry(d, c, false, &p))
    return false;
  const kl_tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
  *s = (kl_im2col_shape){x->dims[0], x->dims[2], x->dims[3], x->dims[1], y->dims[1],
                         y->dims[2], y->dims[3], w->dims[2], w->dims[3], p.strides[0],
                         p.strides[1], p.dilates[0] + 1, p.dilates[1] + 1, p.pad_l[0],
                         p.pad_l[1], (d->cl_in & 1) != 0, d->cl_dst};
  return kl_im2col_fits(s);
}

/* A grouped one (own_conv_geometry) with no Sum, X and Y held channels-last, at the
 * AVX2 level, that kl_gconv_fits takes (few channels a group): kiln's direct kernel
 * runs it (dnnl_gconv.c), with its Bias and activation. */
static bool gconv_shape_of(const dn_node *d, const kl_kernel_ctx *c, kl_gconv_shape *s) {
  dn_problem p;
  int64_t group = kl_attr_int(c->node, "group", 1);
  if (kl_isa_level() != KL_ISA_AVX2 || d->bf16_src || d->bf16_dst || !(d->cl_in & 1) ||
      !d->cl_dst || input(c, KL_FUSED_SUM) || group < 2 || !own_conv_geometry(d, c, true, &p))
    return false;
  const kl_tensor *x = c->in[0], *w = c->in[1], *y = c->out[0];
  *s = (kl_gconv_shape){x->dims[0], x->dims[2], x->dims[3], x->dims[1], y->dims[1],
                        y->dims[2], y->dims[3], w->dims[2], w->dims[3], p.strides[0],
                        p.strides[1], p.dilates[0] + 1, p.dilates[1] + 1, p.pad_l[0],
                        p.pad_l[1], group};
  return kl_gconv_fits(s);
}

/* The primitive for the shapes of c, or en->fallback when oneDNN has none. */
static kiln_status entry_build(dn_node *d, dn_entry *en, const kl_kernel_ctx *c) {
  if ((en->amx = amx_fits(d, c, &en->gemv_plan))) { /* run_amx.c */
    snprintf(en->impl, sizeof en->impl, "kiln:amx gemm bf16");
    size_t rows = kl_amx_scratch_bytes(en->gemv_plan.m, en->gemv_plan.k);
    if (kl_dnnl_ws_reserve(d->eng, rows) != dnnl_success)
      return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the workspace of a "
                     "matrix product (%zu bytes of packed rows)", rows);
    return amx_weights(d, &en->gemv_plan, c->e);
  }
  if ((en->gemv = gemv_fits(d, c, &en->gemv_plan))) { /* run_gemv.c */
    snprintf(en->impl, sizeof en->impl, "kiln:%s %s", d->fns->name,
             en->gemv_plan.m > 1 ? "gemm" : "gemv");
    size_t rows = kl_gemv_scratch_bytes(en->gemv_plan.m, en->gemv_plan.k);
    if (rows && kl_dnnl_ws_reserve(d->eng, rows) != dnnl_success)
      return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for the workspace of a "
                     "matrix product (%zu bytes of packed rows)", rows);
    return gemv_weights(d, &en->gemv_plan, c->e);
  }
  if (d->w_released && d->w_src < 0) /* Winograd's copy is the only one (below) */
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "this convolution's weights are held only "
                   "transformed for kiln's Winograd (or packed for its product or its grouped "
                   "convolution), for the "
                   "input shapes of its first run "
                   "(release_weights freed the plain copy), and these shapes need them "
                   "again: create the session without release_weights");
  kl_wino_shape wino;
  kl_im2col_shape im;
  kl_gconv_shape gc;
  bool is_wino = wino_shape_of(d, c, &wino), is_gconv = !is_wino && gconv_shape_of(d, c, &gc);
  if (is_wino || is_gconv || im2col_shape_of(d, c, &im)) {
    kiln_status st;
    if (is_wino) {
      snprintf(en->impl, sizeof en->impl, "kiln:%s wino_2x2%s%s", d->fns->name,
               wino.x_cl ? "" : " x:nchw", wino.y_cl ? "" : " y:nchw");
      st = kl_wino_create(d->eng, &wino, c->in[1]->data, c->node, &en->wino, c->e);
    } else if (is_gconv) {
      snprintf(en->impl, sizeof en->impl, "kiln:%s gconv", d->fns->name);
      st = kl_gconv_create(d->eng, kl_isa_threads(c), &gc, c->in[1]->data, c->node,
                           &en->gconv, c->e);
    } else {
      snprintf(en->impl, sizeof en->impl, "kiln:%s im2col gemm%s%s", d->fns->name,
               im.x_cl ? "" : " x:nchw", im.y_cl ? "" : " y:nchw");
      st = kl_im2col_create(d->eng, &im, c->in[1]->data, c->node, &en->im2col, c->e);
    }
    /* release_weights: the transformed or packed weights are the copy */
    if (st == KILN_OK && d->own_w && !d->w_released) {
      free(d->own_w->data);
      d->own_w->data = NULL;
      d->const_w = NULL;
      d->w_released = true; /* with no plain copy to pack from: w_src stays -1 */
    }
    return st;
  }
  dn_problem p;
  dnnl_memory_desc_t post[DN_POSTS];
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s;
  kiln_status st = pick(d, en, c, &p, post, &attr, &pd, &s);
  bool none = s == dnnl_unimplemented || s == dnnl_invalid_arguments;
  bool sum_after = st == KILN_OK && s == dnnl_success && sum_after_of(d, en, c, &p, pd);
  bool slow = none || (s == dnnl_success && kl_dnnl_impl_is_slow(impl_of(pd)));
  if (st == KILN_OK && (sum_after || (slow && epilogue_of(d, c, en)))) {
    /* again with the addends (or Sum) and the activation after it */
    dn_entry first = *en;
    dn_problem p2;
    dnnl_memory_desc_t post2[DN_POSTS];
    dnnl_primitive_attr_t attr2 = NULL;
    dnnl_primitive_desc_t pd2 = NULL;
    dnnl_status_t s2;
    en->epilogue = true;
    en->sum_after = sum_after;
    st = pick(d, en, c, &p2, post2, &attr2, &pd2, &s2);
    if (st == KILN_OK && s2 == dnnl_success && !kl_dnnl_impl_is_slow(impl_of(pd2))) {
      pick_free(attr, pd);
      p = p2;
      memcpy(post, post2, sizeof post);
      attr = attr2;
      pd = pd2;
      s = s2;
    } else {
      pick_free(attr2, pd2);
      *en = first;
    }
  }
  if (st != KILN_OK) {
    pick_free(attr, pd);
    return st;
  }
  en->swap = p.swap;
  if (pd)
    snprintf(en->impl, sizeof en->impl, "%s%s%s%s", impl_of(pd), p.bf16 ? " bf16" : "",
             en->sum_after ? " +sum" : "", reordered_to_blocked(d, pd) ? " blocked" : "");
  if ((s == dnnl_unimplemented || s == dnnl_invalid_arguments) && d->w_released) {
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "oneDNN cannot run this node for these "
                   "input shapes, and the reference kernel would need the plain weights, "
                   "which this session released (release_weights)");
  }
  if ((s == dnnl_unimplemented || s == dnnl_invalid_arguments) &&
      (d->bf16_src || d->bf16_dst)) {
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "oneDNN cannot run this node for these input "
                   "shapes, and its %s held in bf16 between convolutions or matrix products "
                   "(precision bf16), which the reference kernel cannot read: use precision "
                   "fp32", d->bf16_src ? "input is" : "output is");
  }
  if (s == dnnl_unimplemented || s == dnnl_invalid_arguments) {
    en->fallback = true; /* a shape or post-op oneDNN cannot do: the reference runs */
    s = dnnl_success;
  } else {
    if (s == dnnl_success) s = setup_memories(d, en, &p, pd, post);
    if (s == dnnl_success) s = dnnl_primitive_create(&en->prim, pd);
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (s != dnnl_success) return dn_fail(c->e, s, "to build a primitive");
  const kl_tensor *sum = input(c, KL_FUSED_SUM);
  if ((en->fallback || en->sum_after) && sum && same_shape(sum, c->out[0])) {
    /* Y may share Sum's buffer */
    en->sum_bytes = kl_tensor_nbytes(sum);
    if (!(en->sum_copy = aligned_alloc_bytes(en->sum_bytes)))
      return kl_fail(c->e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a copy of Sum");
  }
  return KILN_OK;
}

/* ---- the cache of entries ---- */

static bool entry_matches(const dn_entry *en, const kl_kernel_ctx *c) {
  for (int k = 0; k < DN_INPUTS; k++) {
    const kl_tensor *t = input(c, k);
    const dn_shape *s = &en->key[k];
    if ((t ? t->rank : -1) != s->rank) return false;
    if (t && memcmp(s->dims, t->dims, sizeof(int64_t) * (size_t)t->rank) != 0) return false;
  }
  return true;
}

/* The entry for c's shapes, built (in the least recently used slot) when new. */
static kiln_status entry_get(dn_node *d, const kl_kernel_ctx *c, dn_entry **out) {
  dn_entry *victim = &d->slots[0];
  d->clock++;
  for (int i = 0; i < DN_SLOTS; i++) {
    dn_entry *en = &d->slots[i];
    if (en->used && entry_matches(en, c)) {
      en->last_use = d->clock;
      *out = en;
      return KILN_OK;
    }
    if (!en->used ? victim->used : en->last_use < victim->last_use) victim = en;
  }
  if (victim->used) entry_free(d, victim);
  kiln_status st = entry_build(d, victim, c);
  if (st != KILN_OK) {
    entry_free(d, victim);
    return st;
  }
  victim->used = true;
  victim->last_use = d->clock;
  for (int k = 0; k < DN_INPUTS; k++) shape_of(input(c, k), &victim->key[k]);
  *out = victim;
  return KILN_OK;
}

/* ---- running ---- */

/* oneDNN had no implementation: the op's reference kernel, with Sum copied aside when
 * Y shares its buffer (the reference writes Y before it reads Sum). */
static kiln_status run_reference(dn_entry *en, kl_kernel_ctx *c) {
  const kl_tensor *sum = input(c, KL_FUSED_SUM);
  if (!sum || !en->sum_copy || sum->data != c->out[0]->data)
    return (kiln_status)kl_op_get(c->node->op)->ref(c);
  memcpy(en->sum_copy, sum->data, en->sum_bytes);
  kl_tensor copy = *sum;
  copy.data = en->sum_copy;
  const kl_tensor *in[DN_INPUTS];
  for (int k = 0; k < c->n_in && k < DN_INPUTS; k++) in[k] = c->in[k];
  in[KL_FUSED_SUM] = &copy;
  kl_kernel_ctx sub = *c;
  sub.in = in;
  return (kiln_status)kl_op_get(c->node->op)->ref(&sub);
}

static dnnl_status_t set_handle(dnnl_memory_t m, const void *p) {
  return dnnl_memory_set_data_handle(m, (void *)p);
}

/* Points the entry's memories at this run's tensors and fills dst with Sum. */
static dnnl_status_t bind(const dn_node *d, dn_entry *en, const kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[en->swap], *w = input(c, 1), *sum = input(c, KL_FUSED_SUM);
  kl_tensor *y = c->out[0];
  dnnl_stream_t stream = d->eng->stream;
  if (en->ws_gen != d->eng->ws_gen) { /* new entry, or the workspace has grown since */
    dnnl_status_t s = ws_bind(en, d->eng->ws);
    if (s != dnnl_success) return s;
    en->ws_gen = d->eng->ws_gen;
  }
  kl_dnnl_ws_enter(d->eng);
  if (en->src1) {
    dnnl_status_t s = set_handle(en->src1, c->in[!en->swap]->data);
    if (s != dnnl_success) return s;
  }
  dnnl_status_t s = set_handle(en->src_in.prim ? en->src_in.from : en->src, x->data);
  if (s == dnnl_success && en->src_in.prim) s = reorder_run(&en->src_in, stream);
  if (s == dnnl_success && en->packed < 0 && en->wei)
    s = set_handle(en->wei_in.prim ? en->wei_in.from : en->wei, w->data);
  if (s == dnnl_success && en->wei_in.prim) s = reorder_run(&en->wei_in, stream);
  if (s == dnnl_success && en->bias)
    s = set_handle(en->bias, d->scaled_c ? d->scaled_c : c->in[2]->data);
  for (int k = 0; s == dnnl_success && k < en->n_post; k++) {
    int i = en->post_input[k];
    s = set_handle(en->post[k], i == 2 && d->scaled_c ? d->scaled_c : c->in[i]->data);
  }
  if (s == dnnl_success) s = set_handle(en->dst_out.prim ? en->dst_out.to : en->dst, y->data);
  if (s != dnnl_success || !en->sum_postop) return s;
  if (en->sum_in.prim) {
    s = set_handle(en->sum_in.from, sum->data);
    if (s == dnnl_success && !en->dst_staged) s = set_handle(en->sum_in.to, y->data);
    return s == dnnl_success ? reorder_run(&en->sum_in, stream) : s;
  }
  if (sum->data != y->data) memcpy(y->data, sum->data, kl_tensor_nbytes(y));
  return dnnl_success;
}

/* sum_after, before the primitive runs: where Sum is held in another layout than Y, a
 * reorder of it to Y's into en->sum_copy (*sum_aside); where Y shares Sum's buffer, the
 * primitive's result goes to en->sum_copy instead (*y_aside), and Y = that + Sum after
 * it (one pass, no copy of Sum). */
static dnnl_status_t put_sum_aside(dn_entry *en, const kl_kernel_ctx *c, dnnl_stream_t stream,
                                   bool *sum_aside, bool *y_aside) {
  const kl_tensor *sum = input(c, KL_FUSED_SUM);
  dnnl_status_t s = dnnl_success;
  *sum_aside = en->sum_in.prim != NULL;
  *y_aside = !*sum_aside && sum->data == c->out[0]->data;
  if (*y_aside) return set_handle(en->dst_out.prim ? en->dst_out.to : en->dst, en->sum_copy);
  if (!*sum_aside) return s;
  s = set_handle(en->sum_in.from, sum->data);
  if (s == dnnl_success) s = set_handle(en->sum_in.to, en->sum_copy);
  return s == dnnl_success ? reorder_run(&en->sum_in, stream) : s;
}

static kiln_status execute(const dn_node *d, dn_entry *en, kl_kernel_ctx *c) {
  dnnl_exec_arg_t args[7 + DN_POSTS];
  int n = 0;
  args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, en->src};
  if (en->wei) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, en->wei};
  if (en->src1) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC_1, en->src1};
  args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, en->dst};
  if (en->bias) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, en->bias};
  if (en->scratch) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, en->scratch};
  for (int k = 0; k < en->n_post; k++) args[n++] = (dnnl_exec_arg_t){en->post_arg[k], en->post[k]};
  dnnl_stream_t stream = d->eng->stream;
  bool sum_aside = false, y_aside = false;
  dnnl_status_t s = bind(d, en, c);
  if (s == dnnl_success && en->sum_after) s = put_sum_aside(en, c, stream, &sum_aside, &y_aside);
  if (s == dnnl_success) s = dnnl_primitive_execute(en->prim, stream, n, args);
  if (s == dnnl_success && en->dst_out.prim) s = reorder_run(&en->dst_out, stream);
  if (s == dnnl_success) s = dnnl_stream_wait(stream);
  if (s != dnnl_success) return dn_fail(c->e, s, "to execute");
  for (int k = 0; k < en->n_after; k++) {
    kl_tensor t = *c->in[en->after_input[k]];
    if (en->after_input[k] == 2 && d->scaled_c) t.data = d->scaled_c;
    if (en->after_input[k] == KL_FUSED_SUM && sum_aside) t.data = en->sum_copy;
    if (en->after_input[k] == KL_FUSED_SUM && y_aside) { /* Y = result + Sum (in Y) */
      kl_tensor result = *c->out[0];
      result.data = en->sum_copy;
      kl_run_add(c, d->fns, &result, &t, c->out[0]);
    } else {
      kl_run_add_inplace(c, d->fns, c->out[0], &t);
    }
  }
  if (d->act_after || (en->epilogue && en->epi_has_act))
    kl_run_act_inplace(c, d->fns, d->act_after ? &d->act : &en->epi_act, c->out[0]->data,
                       kl_tensor_numel(c->out[0]));
  return KILN_OK;
}

/* Below this many multiply-adds (elements for pooling and binary ops) a node runs on
 * one thread: waking another costs more than it saves, and sessions run from several
 * threads at once would each wake every core for nothing. */
#define DN_SMALL_WORK 262144.0

static double work_of(const dn_node *d, const kl_kernel_ctx *c) {
  const kl_tensor *x = c->in[0], *w = input(c, 1), *y = c->out[0];
  double out = (double)kl_tensor_numel(y);
  switch (d->kind) {
  case DN_CONV: return out * (double)kl_tensor_numel(w) / (double)(w->dims[0] ? w->dims[0] : 1);
  case DN_DECONV:
    return (double)kl_tensor_numel(x) * (double)kl_tensor_numel(w) /
           (double)(w->dims[0] ? w->dims[0] : 1);
  case DN_GEMM:
    return out * (double)x->dims[kl_attr_int(c->node, "transA", 0) ? 0 : 1];
  case DN_MATMUL: return out * (double)x->dims[x->rank - 1];
  default: return out;
  }
}

/* Runs f with OpenMP's thread count at 1 for small work, restoring it after; the
 * same shapes give the same count when the primitive is made and when it runs. */
static kiln_status with_threads_for(dn_node *d, kl_kernel_ctx *c,
                                    kiln_status (*f)(dn_node *, kl_kernel_ctx *)) {
#if KL_HAVE_OPENMP
  if (work_of(d, c) < DN_SMALL_WORK) {
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    kiln_status st = f(d, c);
    omp_set_num_threads(saved);
    return st;
  }
#endif
  return f(d, c);
}

/* The reference kernels read and write plain tensors only. */
static kiln_status no_reference(const dn_node *d, kl_kernel_ctx *c) {
  if (d->nhwc || (!d->cl_in && !d->cl_dst)) return KILN_OK;
  return kl_fail(c->e, KILN_ERR_UNSUPPORTED, "oneDNN cannot run this convolution and its "
                 "tensors are held channels-last, which the reference kernel cannot read");
}

/* Pooling whose source and output are held in one layout runs on kiln's own kernels,
 * measured faster than oneDNN 2.6's on AVX2 and AVX-512: channels-last (vectorized
 * along C; oneDNN's channels-last max pooling took 0.75 ms for ResNet-50's 112x112
 * MaxPool on a Zen 3 core, kiln's 0.13) or plain 1-D and 2-D windows (oneDNN has only
 * its simple_nchw loop for those). Other layouts and ranks stay oneDNN's. Sets *ran. */
static kiln_status own_pool(dn_node *d, kl_kernel_ctx *c, bool *ran) {
  kl_op op = pool_op(c->node);
  bool cl = (d->cl_in & 1) != 0, global = op == KL_OP_GlobalAveragePool ||
                                          op == KL_OP_GlobalMaxPool;
  int rank = c->in[0]->rank;
  *ran = false;
  /* an output of one pixel per channel is the same bytes in both layouts */
  bool cl_y = d->cl_dst || kl_tensor_numel(c->out[0]) == c->out[0]->dims[0] * c->out[0]->dims[1];
  if (d->kind != DN_POOL || rank < 3 || rank > 4 || (cl ? !cl_y : d->cl_dst)) return KILN_OK;
  if (!cl && op == KL_OP_GlobalMaxPool) return KILN_OK; /* no plain kernel of kiln's */
  *ran = true;
  snprintf(d->own_impl, sizeof d->own_impl, "kiln:%s%s", d->fns->name, cl ? " nhwc" : "");
  d->ran_impl = d->own_impl;
  d->ran_reference = false;
  if (cl) return (kiln_status)kl_run_pool_nhwc(c, d->fns, c->in[0]->data, c->out[0]->data);
  return (kiln_status)(global ? kl_run_global_pool(c, d->fns) : kl_run_pool(c, d->fns));
}

static kiln_status run_entry(dn_node *d, kl_kernel_ctx *c) {
  dn_entry *en;
  bool ran;
  kiln_status st = own_pool(d, c, &ran);
  if (ran || st != KILN_OK) return st;
  d->ran_reference = true; /* until an entry says otherwise */
  st = entry_get(d, c, &en);
  if (st != KILN_OK) return st;
  d->ran_reference = en->fallback;
  d->ran_gemv = en->gemv;
  d->ran_rows = en->gemv ? en->gemv_plan.m : 0;
  d->ran_impl = en->fallback ? NULL : en->impl;
  if (en->fallback || kl_dnnl_impl_is_slow(en->impl)) { /* weighed as the reference */
    st = kl_isa_ref_allowed(c, en->fallback ? "oneDNN has no implementation for these shapes"
                                            : "oneDNN has only its reference loops for these "
                                              "shapes");
    if (st != KILN_OK) return st;
  }
  if (en->gconv) {
    const kl_tensor *b = input(c, 2);
    return kl_gconv_run(en->gconv, c, c->in[0]->data, c->out[0]->data, b ? b->data : NULL);
  }
  if (en->im2col) {
    const kl_tensor *b = input(c, 2), *sum = input(c, KL_FUSED_SUM);
    return kl_im2col_run(en->im2col, c, c->in[0]->data, c->out[0]->data, b ? b->data : NULL,
                         sum ? sum->data : NULL);
  }
  if (en->wino) {
    const kl_tensor *b = input(c, 2), *sum = input(c, KL_FUSED_SUM);
    return kl_wino_run(en->wino, c, c->in[0]->data, c->out[0]->data, b ? b->data : NULL,
                       sum ? sum->data : NULL);
  }
  if (en->amx) return amx_run(d, &en->gemv_plan, c);
  if (en->gemv) return gemv_run(d, &en->gemv_plan, c);
  if (!en->fallback) return execute(d, en, c);
  if (d->nhwc) /* its reference kernel reads the graph's layout, X and Sum before Y */
    return (kiln_status)kl_op_get(c->node->op)->ref((kl_kernel_ctx *)d->graph_ctx);
  return (st = no_reference(d, c)) != KILN_OK ? st : run_reference(en, c);
}

/* A channels-last node's tensors under [N, C, H, W] dims, over the same bytes. */
typedef struct dn_view {
  kl_tensor in[DN_INPUTS], out;
  const kl_tensor *in_p[DN_INPUTS];
  kl_tensor *out_p[1];
  kl_kernel_ctx c;
} dn_view;

static void nchw_view(const kl_kernel_ctx *c, dn_view *v) {
  v->c = *c;
  v->c.n_in = c->n_in < DN_INPUTS ? c->n_in : DN_INPUTS;
  for (int k = 0; k < v->c.n_in; k++) {
    v->in_p[k] = c->in[k];
    if (!c->in[k] || !kl_layout_activation_slot(c->node, k)) continue;
    v->in[k] = *c->in[k];
    v->in[k].rank = 4;
    kl_layout_permute_dims(c->in[k]->rank, c->in[k]->dims, kl_layout_to_nchw, v->in[k].dims);
    v->in_p[k] = &v->in[k];
  }
  v->out = *c->out[0];
  kl_layout_permute_dims(4, c->out[0]->dims, kl_layout_to_nchw, v->out.dims);
  v->out_p[0] = &v->out;
  v->c.in = v->in_p;
  v->c.n_out = 1;
  v->c.out = v->out_p;
}

/* t's dims in channels-last order: [N, C, S...] -> [N, S..., C]. */
/* Input x of a channel Concat into Y's channels [off, off + C_k), one image at a time:
 * blocks where x is held as Y is (x_cl == y_cl), else through the level's transpose. */
static void concat_part(const dn_node *d, const kl_tensor *x, bool x_cl, kl_tensor *y,
                        bool y_cl, int64_t off) {
  int64_t n = x->dims[0], ck = x->dims[1], ct = y->dims[1], sp = 1;
  for (int i = 2; i < x->rank; i++) sp *= x->dims[i];
  for (int64_t b = 0; b < n; b++) {
    const float *src = (const float *)x->data + b * ck * sp;
    float *dst = (float *)y->data + b * ct * sp;
    if (x_cl && y_cl) /* [S, C_k] into the rows of [S, C] */
      for (int64_t p = 0; p < sp; p++) memcpy(dst + p * ct + off, src + p * ck, sizeof(float) * (size_t)ck);
    else if (!x_cl && !y_cl) /* [C_k, S] into [C, S] from channel off */
      memcpy(dst + off * sp, src, sizeof(float) * (size_t)(ck * sp));
    else if (y_cl) /* [C_k, S] -> rows of [S, C] */
      d->fns->copy->transpose2d(4, src, (size_t)sp, dst + off, (size_t)ct, (size_t)ck, (size_t)sp);
    else /* [S, C_k] -> [C, S] from channel off */
      d->fns->copy->transpose2d(4, src, (size_t)ck, dst + off * sp, (size_t)sp, (size_t)sp,
                                (size_t)ck);
  }
}

/* A channel Concat: along the last dim of the [N, S..., C] tensors when the session
 * holds Y and every input channels-last, along dim 1 when it holds them all plain; an
 * input held in the other layout than Y's (its producer or another reader could not
 * take Y's) goes in part by part, transposed. */
static kiln_status own_concat(dn_node *d, kl_kernel_ctx *c) {
  d->ran_reference = false;
  d->ran_gemv = false;
  bool cl = d->cl_dst;
  unsigned all = (1u << c->n_in) - 1, same = (cl ? d->cl_in : ~d->cl_in) & all;
  snprintf(d->own_impl, sizeof d->own_impl, "kiln:%s%s%s", d->fns->name, cl ? " nhwc" : "",
           same == all ? "" : " mixed");
  d->ran_impl = d->own_impl;
  if (!cl && same == all) return (kiln_status)kl_run_concat_axis(c, d->fns, 1);
  if (same == all) return (kiln_status)kl_run_concat_cl(c, d->fns);
  int64_t off = 0;
  for (int k = 0; k < c->n_in; k++) {
    concat_part(d, c->in[k], (d->cl_in >> k & 1) != 0, c->out[0], cl, off);
    off += c->in[k]->dims[1];
  }
  return KILN_OK;
}

static int dn_run(kl_kernel_ctx *c) {
  dn_node *d = *c->state;
  if (!d) return kl_fail(c->e, KILN_ERR_INTERNAL, "oneDNN kernel without its state");
  if (d->kind == DN_CONCAT) return own_concat(d, c);
  d->ran_reference = false; /* empty operands: nothing to compute, no slow path */
  d->ran_gemv = false;
  d->ran_impl = NULL;
  if (kl_tensor_numel(c->out[0]) == 0) return KILN_OK;
  kiln_status st;
  for (int k = 0; k < c->n_in; k++)
    if (c->in[k] && kl_tensor_numel(c->in[k]) == 0) /* oneDNN refuses empty operands */
      return (st = no_reference(d, c)) != KILN_OK ? st : (kiln_status)kl_op_get(c->node->op)->ref(c);
  if (!d->nhwc) return with_threads_for(d, c, run_entry);
  dn_view v;
  nchw_view(c, &v);
  d->graph_ctx = c;
  st = with_threads_for(d, &v.c, run_entry);
  d->graph_ctx = NULL;
  return st;
}

static void dn_release(void *state) {
  dn_node *d = state;
  if (!d) return;
  for (int i = 0; i < DN_SLOTS; i++)
    if (d->slots[i].used) entry_free(d, &d->slots[i]);
  for (int i = 0; i < DN_SLOTS; i++) free(d->packed[i].data);
  free(d->gemv_w);
  free(d->amx_w);
  free(d->gemv_tail);
  free(d->scaled_c);
  free(d);
}

/* beta * C, once, for a Gemm whose beta is not 1 (supports() made sure C is constant). */
static kiln_status scale_c(dn_node *d, const kl_graph *g, kl_err *e) {
  const kl_node *n = d->node;
  d->gemm_beta = kl_attr_float(n, "beta", 1.0f);
  if (n->n_in < 3 || n->in[2] < 0 || d->gemm_beta == 1.0f || d->gemm_beta == 0.0f)
    return KILN_OK;
  const kl_value *c = &g->values[n->in[2]];
  size_t count = c->nbytes / sizeof(float);
  if (!(d->scaled_c = aligned_alloc_bytes(c->nbytes)))
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for beta * C (%zu bytes)", c->nbytes);
  const float *src = c->data;
  for (size_t i = 0; i < count; i++) d->scaled_c[i] = d->gemm_beta * src[i];
  return KILN_OK;
}

/* A binary op's operands may be channels-last when the shapes are known and one of
 * them has the output's: oneDNN's binary then has a full source 0, and no reference
 * fallback (which reads plain tensors only) can be needed. With a symbolic dim (a
 * training step's batch), when both have the output's dims. */
static unsigned binary_cl_slots(const kl_graph *g, const kl_node *n) {
  const kl_type *y = &g->values[n->out[0]].type;
  bool full = false;
  unsigned slots = 0;
  if (!kl_type_is_concrete(y))
    return n->n_in == 2 && kl_type_same_dims(&g->values[n->in[0]].type, y) &&
                   kl_type_same_dims(&g->values[n->in[1]].type, y)
               ? 3u
               : 0u;
  for (int k = 0; k < 2; k++) {
    const kl_type *t = &g->values[n->in[k]].type;
    if (!kl_type_is_concrete(t) || t->rank != y->rank) continue;
    slots |= 1u << k;
    bool same = true;
    for (int d = 0; d < y->rank; d++) same &= t->dims[d].size == y->dims[d].size;
    full |= same && (k == 0 || n->op == KL_OP_Add || n->op == KL_OP_Mul);
  }
  return full ? slots : 0;
}

unsigned kl_dnnl_channels_last_slots(const kl_graph *g, const kl_node *n) {
  dn_kind kind;
  if (!dn_kind_of(n->op, &kind) || kl_layout_nhwc(n)) return 0; /* already in the graph */
  int rank = g->values[n->out[0]].type.rank;
  if (rank < 3 || rank > 5) return 0;
  switch (kind) {
  case DN_CONV:
  case DN_DECONV: return g->values[n->in[0]].type.rank == rank ? 1u | 1u << KL_FUSED_SUM : 0;
  case DN_POOL: return g->values[n->in[0]].type.rank == rank ? 1u : 0;
  case DN_BINARY: return binary_cl_slots(g, n);
  case DN_CONCAT: return (1u << n->n_in) - 1;
  default: return 0;
  }
}

bool kl_dnnl_allow_release(void *state, kl_value *w) {
  dn_node *d = state;
  if (!d || !d->const_w || d->const_w != w->data || d->kind == DN_POOL ||
      d->kind == DN_BINARY || d->kind == DN_CONCAT)
    return false;
  d->own_w = w;
  return true;
}

size_t kl_dnnl_weights_bytes(const void *state, const kl_graph *g) {
  const dn_node *d = state;
  if (!d || !d->const_w || d->kind == DN_POOL || d->kind == DN_BINARY ||
      d->kind == DN_CONCAT)
    return 0;
  return g->values[d->node->in[1]].nbytes;
}

size_t kl_dnnl_held_bytes(const void *state) {
  const dn_node *d = state;
  size_t n = d ? d->gemv_w_bytes + d->amx_w_bytes : 0;
  for (int i = 0; d && i < DN_SLOTS; i++) {
    if (d->packed[i].data) n += dnnl_memory_desc_get_size(&d->packed[i].md);
    if (d->slots[i].used)
      n += d->slots[i].sum_bytes + kl_wino_held_bytes(d->slots[i].wino) +
           kl_im2col_held_bytes(d->slots[i].im2col) + kl_gconv_held_bytes(d->slots[i].gconv);
  }
  return n;
}

const char *kl_dnnl_ran_gemv(const void *state) {
  const dn_node *d = state;
  return !d || !d->ran_gemv ? NULL : d->ran_rows > 1 ? "gemm" : "gemv";
}

const char *kl_dnnl_ran_impl(const void *state) {
  const dn_node *d = state;
  return d ? d->ran_impl : NULL;
}

bool kl_dnnl_ran_reference(const void *state) {
  const dn_node *d = state;
  return d && d->ran_reference;
}

bool kl_dnnl_bf16_capable(const void *state) {
  const dn_node *d = state;
  return d && d->eng->bf16 && bf16_kind(d->kind) && !d->nhwc;
}

void kl_dnnl_set_bf16_held(void *state, bool src, bool dst) {
  dn_node *d = state;
  d->bf16_src = src;
  d->bf16_dst = dst;
  if (dst) d->act_after = false; /* kiln's pass over Y reads float32: oneDNN's post-op */
}

void kl_dnnl_set_channels_last(void *state, unsigned inputs, bool output) {
  dn_node *d = state;
  d->cl_in = inputs;
  d->cl_dst = output;
}

/* Whether n's fused activation runs after the primitive, as kiln's own primitive over
 * Y (kl_run_act_inplace), instead of as oneDNN's eltwise post-op: for those that kiln
 * computes faster. Measured behind a oneDNN 1x1 convolution on a Zen 4 core, at the
 * AVX-512 level (time per element over the convolution without an activation, oneDNN
 * 2.6's post-op against kiln's pass over the output): Silu 0.39 against 0.30 ns,
 * Sigmoid 0.34 against 0.26, GeluTanh 0.55 against 0.35; not so Tanh (0.40 against
 * 0.37), Gelu (erf, 0.53 against 0.75) and the cheap ones (Relu, Clip, HardSwish, ...),
 * which stay post-ops. The same from AVX2 on: on a Zen 3 core oneDNN's swish post-op cost
 * about 1.3 ns an element behind a 1x1 convolution, and EfficientNet-B0 ran 1.04 -> 0.82
 * of onnxruntime's time with kiln's pass (docs/benchmarks.md). The Bias and Sum post-ops
 * still come before it, as ONNX orders them. */
static bool act_after_of(const kl_node *n, kl_act *a) {
  bool has;
  if (kl_isa_level() < KL_ISA_AVX2 || !kl_isa_fused_act(n, &has, a) || !has) return false;
  return a->kind == KL_ACT_SWISH || a->kind == KL_ACT_SIGMOID || a->kind == KL_ACT_GELU_TANH;
}

static const char *kernel_name(dn_kind kind) {
  switch (kind) {
  case DN_CONV: return "dnnl_conv";
  case DN_DECONV: return "dnnl_deconv";
  case DN_GEMM: return "dnnl_gemm";
  case DN_POOL: return "dnnl_pool";
  case DN_BINARY: return "dnnl_binary";
  case DN_CONCAT: return "concat";
  default: return "dnnl_matmul";
  }
}

kiln_status kl_dnnl_node_create(kl_dnnl_engine *eng, const kl_graph *g, const kl_node *n,
                                kl_cpu_kernel *kernel, unsigned *inplace, void **state,
                                kl_err *e) {
  dn_kind kind;
  *state = NULL;
  if (!dn_kind_of(n->op, &kind))
    return kl_fail(e, KILN_ERR_INTERNAL, "op %s is not one of oneDNN's", kl_op_name(n->op));
  dn_node *d = calloc(1, sizeof *d);
  if (!d) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for a oneDNN node");
  d->eng = eng;
  d->node = n;
  d->kind = kind;
  d->const_w = n->n_in > 1 && is_const(g, n->in[1]) ? g->values[n->in[1]].data : NULL;
  for (int i = 0; i < DN_SLOTS; i++) d->slots[i].packed = -1;
  d->w_src = -1;
  d->nhwc = kl_layout_nhwc(n);
  if (d->nhwc) { /* X, Sum and Y: the channels-last descriptors of the view */
    d->cl_in = (kl_layout_activation_slot(n, 0) ? 1u : 0u) | 1u << KL_FUSED_SUM;
    d->cl_dst = true;
  }
  d->fns = kl_cpu_isa_fns(kl_isa_level());
  d->amx = eng->bf16 && (kind == DN_GEMM || kind == DN_MATMUL) ? kl_cpu_isa_amx(kl_isa_level())
                                                              : NULL;
  d->amx_always = d->amx && gemv_always_of(d, g, true);
  d->gemv_always = !d->amx_always && gemv_always_of(d, g, false);
  d->act_after = act_after_of(n, &d->act);
  kiln_status st = kind == DN_GEMM ? scale_c(d, g, e) : KILN_OK;
  if (st != KILN_OK) {
    dn_release(d);
    return st;
  }
  *state = d;
  *kernel = (kl_cpu_kernel){kernel_name(kind), dn_run, dn_release};
  /* Y may take over a Sum that dies here: the sum post-op reads it before the
   * primitive writes, and the reference fallback copies it aside first. A binary op
   * may write over its source 0 (input 0 when that has Y's shape). */
  *inplace = n->n_in > KL_FUSED_SUM && n->in[KL_FUSED_SUM] >= 0 ? 1u << KL_FUSED_SUM : 0;
  if (kind == DN_BINARY) *inplace = 1;
  return KILN_OK;
}
