/* kiln's ISA-dispatched CPU kernels (src/backends/cpu/kernels.c, isa/) against the
 * reference kernels, at every ISA level this machine supports, and the level choice
 * itself (src/backends/cpu/isa.c).
 *
 * Each case builds a one-node graph, fills its inputs with random values (never zeros,
 * never all equal), shapes the outputs with the op's infer function, runs the
 * reference kernel, then for each level from generic up to kl_isa_supported() asks
 * kl_cpu_isa_kernel for a kernel, runs it with one thread and with all of them, and
 * compares: |got - want| <= atol + rtol |want| element by element (NaN where the
 * reference has NaN), bit for bit for the data-movement ops. Sizes are the awkward
 * ones (1, 7, 15, 16, 17, 1023, remainders of every vector width, rows longer than a
 * parallel task), buffers are misaligned on purpose, broadcast operands and strided
 * windows cover the non-contiguous accesses, and the elementwise, softmax and norm
 * kernels (BatchNormalization too) also run in place.
 *
 * Tolerances (float32): exact for Relu, LeakyRelu, Clip, Add/Sub/Mul/Div, MaxPool and
 * the copies (Transpose, Concat, Slice, Pad; the same operations, correctly rounded);
 * rtol 2e-6 for the approximations of exp, tanh, erf and what is built on them;
 * rtol 1e-5 for the normalizations (statistics in float; BatchNormalization's
 * per-channel factor in double, the rest in float); for sums (ReduceSum/Mean, AveragePool,
 * GlobalAveragePool) 1e-5 times the sum of |x| over the reduced set, as float
 * summation's error scales with it, not with the result. bfloat16: one unit in the
 * last place (rtol 2^-7), as the float result is rounded once more than the
 * reference's double one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/isa.h"
#include "ir/ir.h"
#include "runtime/session.h"
#include "testutil.h"

#define MAX_IO 6

/* ---- random numbers (splitmix64), local to each test ---- */

static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * (double)(next_u64(s) >> 11) / 9007199254740992.0;
}

/* ---- one-node cases ---- */

typedef struct tol {
  double rtol, atol;
  bool by_abs_sum; /* atol is a multiple of the reference run on |input 0| */
} tol;

static const tol EXACT = {0, 0, false};
#define APPROX {2e-6, 1e-37, false}
/* The reference's 1 + erf (or tanh) in double cancels for negative x, leaving an error
 * of about 1e-16 |x|; ours does not cancel (x sigmoid(2u), erfc). */
#define GELU {2e-6, 1e-12, false}
static const tol NORM = {1e-5, 1e-5, false};
static const tol SUMS = {0, 1e-5, true};
static const tol BF16 = {1.0 / 128, 1e-30, false};

typedef struct tcase {
  const char *name;
  kl_graph *g;
  int node, n_in, n_out;
  kl_tensor in[MAX_IO];
  void *mem[MAX_IO];
  kl_err e;
  kl_isa min_level;  /* lowest level that must have a kernel; KL_ISA_COUNT: none */
  bool unaligned;    /* buffers one element off their allocation's alignment */
  unsigned inplace;  /* bit k: the ISA kernel also runs with out[0] in in[k]'s buffer */
  bool rank_unknown; /* the selection sees input 0 with an unknown rank */
  uint64_t seed;
} tcase;

static void tc_init(tcase *t, const char *name, kl_op op, int n_in, int n_out) {
  memset(t, 0, sizeof *t);
  t->name = name;
  t->n_in = n_in;
  t->n_out = n_out;
  t->seed = 12345;
  t->unaligned = true;
  t->g = kl_graph_new();
  assert_non_null(t->g);
  int ins[MAX_IO], outs[MAX_IO];
  for (int i = 0; i < n_in; i++) ins[i] = kl_graph_add_value(t->g, NULL, &t->e);
  for (int i = 0; i < n_out; i++) outs[i] = kl_graph_add_value(t->g, NULL, &t->e);
  t->node = kl_graph_add_node(t->g, op, name, n_in, ins, n_out, outs, &t->e);
  assert_true(t->node >= 0);
}

static void tc_free(tcase *t) {
  for (int i = 0; i < MAX_IO; i++) free(t->mem[i]);
  kl_graph_free(t->g);
}

/* A buffer for n elements of dtype dt, one element past its (aligned) allocation when
 * misaligned; *mem gets what to free. */
static void *buffer(const tcase *t, kl_dtype dt, int64_t n, void **mem) {
  size_t es = kl_dtype_size(dt), off = t->unaligned ? 1 : 0;
  *mem = calloc((size_t)n + off + 1, es);
  assert_non_null(*mem);
  return (char *)*mem + off * es;
}

static void tc_shape(kl_tensor *x, kl_dtype dt, int rank, const int64_t *dims) {
  x->dtype = dt;
  x->rank = rank;
  for (int d = 0; d < rank; d++) x->dims[d] = dims[d];
}

/* Input i: random values in [lo, hi], away from zero by at least lo_abs. */
static void tc_rand(tcase *t, int i, kl_dtype dt, int rank, const int64_t *dims, double lo,
                    double hi, double lo_abs) {
  kl_tensor *x = &t->in[i];
  tc_shape(x, dt, rank, dims);
  int64_t n = kl_tensor_numel(x);
  x->data = buffer(t, dt, n, &t->mem[i]);
  for (int64_t k = 0; k < n; k++) {
    double v = uniform(&t->seed, lo, hi);
    if (fabs(v) < lo_abs) v = v < 0 ? -lo_abs : lo_abs;
    if (dt == KL_U8 || dt == KL_I64 || dt == KL_I32) v = floor(v);
    kl_store_f64(x->data, dt, (size_t)k, v);
  }
}

/* Input i: the given values. */
static void tc_values(tcase *t, int i, kl_dtype dt, int rank, const int64_t *dims,
                      const double *v) {
  kl_tensor *x = &t->in[i];
  tc_shape(x, dt, rank, dims);
  int64_t n = kl_tensor_numel(x);
  x->data = buffer(t, dt, n, &t->mem[i]);
  for (int64_t k = 0; k < n; k++) kl_store_f64(x->data, dt, (size_t)k, v[k]);
}

static void tc_int(tcase *t, const char *name, int64_t v) {
  assert_int_equal(kl_node_set_int(t->g, t->node, name, v, &t->e), KILN_OK);
}
static void tc_float(tcase *t, const char *name, float v) {
  assert_int_equal(kl_node_set_float(t->g, t->node, name, v, &t->e), KILN_OK);
}
static void tc_ints(tcase *t, const char *name, int n, const int64_t *v) {
  assert_int_equal(kl_node_set_ints(t->g, t->node, name, v, n, &t->e), KILN_OK);
}
static void tc_string(tcase *t, const char *name, const char *v) {
  assert_int_equal(kl_node_set_string(t->g, t->node, name, v, &t->e), KILN_OK);
}

static const kl_node *tc_node(const tcase *t) { return &t->g->nodes[t->node]; }

static void type_of(kl_type *ty, const kl_tensor *x) {
  memset(ty, 0, sizeof *ty);
  ty->dtype = x->dtype;
  kl_type_set_shape(ty, x->rank, x->dims);
}

/* Outputs shaped by infer, zero-filled; mem[k] gets what to free. */
static void alloc_outputs(tcase *t, kl_tensor *out, void **mem) {
  kl_type types[MAX_IO], res[MAX_IO];
  const kl_type *tp[MAX_IO];
  const void *data[MAX_IO];
  for (int i = 0; i < t->n_in; i++) {
    bool present = t->in[i].data != NULL;
    if (present) type_of(&types[i], &t->in[i]);
    tp[i] = present ? &types[i] : NULL;
    data[i] = present ? t->in[i].data : NULL;
  }
  for (int k = 0; k < t->n_out; k++) {
    memset(&res[k], 0, sizeof res[k]);
    res[k].rank = -1;
  }
  kl_infer_ctx ic = {t->g, tc_node(t), t->n_in, t->n_out, tp, data, res, &t->e, false};
  if (kl_op_get(tc_node(t)->op)->infer(&ic) != KILN_OK)
    fail_msg("%s: infer failed: %s", t->name, t->e.msg);
  for (int k = 0; k < t->n_out; k++) {
    assert_true(kl_type_is_concrete(&res[k]));
    out[k].dtype = res[k].dtype;
    out[k].rank = res[k].rank;
    for (int d = 0; d < res[k].rank; d++) out[k].dims[d] = res[k].dims[d].size;
    out[k].data = buffer(t, out[k].dtype, kl_tensor_numel(&out[k]), &mem[k]);
  }
}

static void free_all(void **mem, int n) {
  for (int k = 0; k < n; k++) free(mem[k]);
}

static void run(tcase *t, kl_kernel_fn fn, const kl_tensor *const *in, kl_tensor *out,
                int threads) {
  kl_tensor *outp[MAX_IO];
  for (int k = 0; k < t->n_out; k++) outp[k] = &out[k];
  kl_kernel_ctx c = {tc_node(t), t->n_in, t->n_out, in, outp, &t->e, threads, NULL, 0};
  kl_err_clear(&t->e);
  if (fn(&c) != KILN_OK) fail_msg("%s: kernel failed: %s", t->name, t->e.msg);
}

static void inputs_of(tcase *t, const kl_tensor **in) {
  for (int i = 0; i < t->n_in; i++) in[i] = t->in[i].data ? &t->in[i] : NULL;
}

static bool close_enough(double g, double w, double rtol, double atol) {
  if (isnan(w)) return isnan(g);
  return g == w || fabs(g - w) <= atol + rtol * fabs(w);
}

static void compare(const tcase *t, const char *level, int k, const kl_tensor *got,
                    const kl_tensor *want, tol tl, const kl_tensor *abs_sum) {
  int64_t n = kl_tensor_numel(want);
  assert_int_equal(got->dtype, want->dtype);
  if (!kl_dtype_is_float(want->dtype)) {
    if (memcmp(got->data, want->data, (size_t)n * kl_dtype_size(want->dtype)) != 0)
      fail_msg("%s at %s: output %d differs from the reference", t->name, level, k);
    return;
  }
  if (want->dtype == KL_BF16) { /* at least one unit in the last place */
    tl.rtol = tl.rtol > BF16.rtol ? tl.rtol : BF16.rtol;
    tl.atol = tl.atol > BF16.atol ? tl.atol : BF16.atol;
  }
  for (int64_t i = 0; i < n; i++) {
    double g = kl_load_f64(got->data, got->dtype, (size_t)i);
    double w = kl_load_f64(want->data, want->dtype, (size_t)i);
    double atol = tl.by_abs_sum && k == 0 ? tl.atol * kl_load_f64(abs_sum->data, KL_F32, (size_t)i)
                                          : tl.atol;
    if (!close_enough(g, w, tl.rtol, atol))
      fail_msg("%s at %s: output %d element %lld is %.9g, reference %.9g", t->name, level, k,
               (long long)i, g, w);
  }
}

/* The reference run on |input 0|: for sums, the sum of |x| over each output's set. */
static void abs_reference(tcase *t, kl_tensor *out, void **mem) {
  kl_tensor saved = t->in[0], a = saved;
  void *amem;
  int64_t n = kl_tensor_numel(&a);
  a.data = buffer(t, a.dtype, n, &amem);
  for (int64_t i = 0; i < n; i++)
    kl_store_f64(a.data, a.dtype, (size_t)i, fabs(kl_load_f64(saved.data, a.dtype, (size_t)i)));
  t->in[0] = a;
  alloc_outputs(t, out, mem);
  const kl_tensor *in[MAX_IO];
  inputs_of(t, in);
  run(t, kl_op_get(tc_node(t)->op)->ref, in, out, 1);
  t->in[0] = saved;
  free(amem);
}

/* The ISA kernel with out[0] in a copy of input k's buffer, which it reads; the
 * selection must allow it (kl_cpu_isa_inplace). */
static void run_inplace(tcase *t, kl_kernel_fn fn, kl_tensor *out, int k) {
  assert_true(kl_cpu_isa_inplace(tc_node(t)) & (1u << k));
  const kl_tensor *in[MAX_IO];
  inputs_of(t, in);
  kl_tensor shared = t->in[k];
  size_t bytes = kl_tensor_nbytes(&shared);
  assert_int_equal(bytes, kl_tensor_nbytes(&out[0]));
  memcpy(out[0].data, shared.data, bytes);
  shared.data = out[0].data;
  in[k] = &shared;
  run(t, fn, in, out, 1);
}

/* The kernel level k's name should say which primitives it uses. */
static const char *expected_name(kl_isa isa) {
  return kl_isa_level_name(isa > KL_ISA_AVX512_BF16 ? KL_ISA_AVX512_BF16 : isa);
}

static void check_level(tcase *t, kl_isa isa, const kl_type *const *tp, const kl_tensor *ref,
                        tol tl, const kl_tensor *abs_sum) {
  kl_cpu_kernel k = kl_cpu_isa_kernel(tc_node(t), tp, t->n_in, isa);
  if (isa < t->min_level) {
    if (k.run) fail_msg("%s: a kernel at %s, expected none", t->name, kl_isa_level_name(isa));
    return;
  }
  if (!k.run) fail_msg("%s: no kernel at %s", t->name, kl_isa_level_name(isa));
  assert_string_equal(k.name, expected_name(isa));
  assert_null(k.release);
  const kl_tensor *in[MAX_IO];
  inputs_of(t, in);
  for (int pass = 0; pass < 2 + t->n_in; pass++) { /* 1 thread, all, then in place */
    if (pass >= 2 && !(t->inplace & (1u << (pass - 2)))) continue;
    kl_tensor out[MAX_IO];
    void *mem[MAX_IO];
    memset(out, 0, sizeof out);
    alloc_outputs(t, out, mem);
    if (pass < 2) run(t, k.run, in, out, pass == 0 ? 1 : 0);
    else run_inplace(t, k.run, out, pass - 2);
    for (int o = 0; o < t->n_out; o++)
      compare(t, kl_isa_level_name(isa), o, &out[o], &ref[o], tl, abs_sum);
    free_all(mem, t->n_out);
  }
}

/* Runs the case at every supported level against the reference; frees it. */
static void tc_check(tcase *t, tol tl) {
  kl_tensor ref[MAX_IO], abs_sum[MAX_IO] = {0};
  void *ref_mem[MAX_IO], *abs_mem[MAX_IO];
  memset(ref, 0, sizeof ref);
  alloc_outputs(t, ref, ref_mem);
  const kl_tensor *in[MAX_IO];
  inputs_of(t, in);
  run(t, kl_op_get(tc_node(t)->op)->ref, in, ref, 1);
  if (tl.by_abs_sum) abs_reference(t, abs_sum, abs_mem);
  kl_type types[MAX_IO];
  const kl_type *tp[MAX_IO];
  for (int i = 0; i < t->n_in; i++) {
    if (in[i]) type_of(&types[i], in[i]);
    tp[i] = in[i] ? &types[i] : NULL;
  }
  if (t->rank_unknown) types[0].rank = -1;
  kl_isa top = kl_isa_supported(kl_isa_features());
  for (int isa = KL_ISA_GENERIC; isa <= (int)top; isa++)
    check_level(t, (kl_isa)isa, tp, ref, tl, abs_sum);
  free_all(ref_mem, t->n_out);
  if (tl.by_abs_sum) free_all(abs_mem, t->n_out);
  tc_free(t);
}

/* ---- elementwise ---- */

static const int64_t SIZES[] = {1, 7, 15, 16, 17, 31, 33, 1023, 70001};
#define N_SIZES (sizeof SIZES / sizeof SIZES[0])

typedef struct act_case {
  kl_op op;
  const char *attr; /* a float attribute to set, or "approximate" */
  double value;
  double lo, hi; /* the input range */
  tol tl;
} act_case;

static const act_case ACTS[] = {
    {KL_OP_Relu, NULL, 0, -4, 4, {0, 0, false}},
    {KL_OP_LeakyRelu, "alpha", 0.1, -4, 4, {0, 0, false}},
    {KL_OP_Sigmoid, NULL, 0, -30, 30, APPROX},
    {KL_OP_Tanh, NULL, 0, -6, 6, APPROX},
    {KL_OP_Exp, NULL, 0, -30, 30, APPROX},
    {KL_OP_Erf, NULL, 0, -5, 5, APPROX},
    {KL_OP_Gelu, NULL, 0, -8, 8, GELU},
    {KL_OP_Gelu, "approximate", 0, -8, 8, GELU},
    {KL_OP_Swish, "alpha", 1.5, -20, 20, APPROX},
    {KL_OP_HardSigmoid, "alpha", 0.25, -6, 6, {1e-6, 1e-7, false}},
    {KL_OP_HardSwish, NULL, 0, -6, 6, {1e-6, 1e-7, false}},
};
#define N_ACTS (sizeof ACTS / sizeof ACTS[0])

static void act_setup(tcase *t, const act_case *a) {
  if (a->attr && strcmp(a->attr, "approximate") == 0) tc_string(t, a->attr, "tanh");
  else if (a->attr) tc_float(t, a->attr, (float)a->value);
}

static void test_activations(void **state) {
  (void)state;
  for (size_t a = 0; a < N_ACTS; a++)
    for (size_t s = 0; s < N_SIZES; s++)
      for (int bf = 0; bf < 2; bf++) {
        const act_case *ac = &ACTS[a];
        char name[96];
        snprintf(name, sizeof name, "%s%s n=%lld%s", kl_op_name(ac->op),
                 ac->attr ? "+attr" : "", (long long)SIZES[s], bf ? " bf16" : "");
        tcase t;
        tc_init(&t, name, ac->op, 1, 1);
        act_setup(&t, ac);
        t.inplace = 1;
        t.min_level = bf ? KL_ISA_AVX512_BF16 : KL_ISA_GENERIC;
        tc_rand(&t, 0, bf ? KL_BF16 : KL_F32, 1, &SIZES[s], ac->lo, ac->hi, 1e-3);
        tc_check(&t, ac->tl); /* widened to a bfloat16 ulp by compare */
      }
}

/* Values where approximations break: zeros, infinities, NaN, the ends of exp's range. */
static const double SPECIAL[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-30, -1e-30,
                                 1e-8, -1e-8, 0.62, 0.63, 0.99, 1.01, 1.41, 1.42, 9.9,
                                 10.1, 14.2, -14.2, 20, -20, 30, -30, 87, 88.7, 88.8, 89,
                                 -87, -87.4, -100, -103, -104, -120, 1e30, -1e30};
#define N_SPECIAL (sizeof SPECIAL / sizeof SPECIAL[0])

static void test_activation_special_values(void **state) {
  (void)state;
  int64_t n = (int64_t)N_SPECIAL;
  for (size_t a = 0; a < N_ACTS; a++) {
    const act_case *ac = &ACTS[a];
    if (ac->op == KL_OP_Relu) continue; /* NaN: see test_relu_nan */
    tcase t;
    tc_init(&t, kl_op_name(ac->op), ac->op, 1, 1);
    act_setup(&t, ac);
    tc_values(&t, 0, KL_F32, 1, &n, SPECIAL);
    tc_check(&t, ac->tl);
  }
}

/* Relu keeps NaN, as max(x, 0) in ONNX's definition and in NumPy does. */
static void test_relu_nan(void **state) {
  (void)state;
  const kl_type *tp[1];
  kl_type ty = {.dtype = KL_F32, .rank = 1};
  ty.dims[0].size = 3;
  tp[0] = &ty;
  tcase t;
  tc_init(&t, "relu nan", KL_OP_Relu, 1, 1);
  int64_t n = 3;
  double v[] = {NAN, -1, 2};
  tc_values(&t, 0, KL_F32, 1, &n, v);
  for (int isa = 0; isa <= (int)kl_isa_supported(kl_isa_features()); isa++) {
    kl_cpu_kernel k = kl_cpu_isa_kernel(tc_node(&t), tp, 1, (kl_isa)isa);
    float y[3] = {1, 1, 1};
    kl_tensor out = t.in[0];
    out.data = y;
    const kl_tensor *in[1] = {&t.in[0]};
    run(&t, k.run, in, &out, 1);
    assert_true(isnan(y[0]));
    assert_true(y[1] == 0.0f && y[2] == 2.0f);
  }
  tc_free(&t);
}

static void test_clip(void **state) {
  (void)state;
  static const double bounds[][2] = {{-1.5, 2.0}, {0.5, 0.25}, {-INFINITY, 0.0}};
  for (size_t s = 0; s < N_SIZES; s++)
    for (int b = 0; b < 5; b++) {
      tcase t;
      tc_init(&t, "Clip", KL_OP_Clip, 3, 1);
      tc_rand(&t, 0, KL_F32, 1, &SIZES[s], -4, 4, 1e-3);
      if (b < 4) /* b == 4: no lower bound */
        tc_values(&t, 1, KL_F32, 0, NULL, &bounds[b < 3 ? b : 0][0]);
      if (b != 3) /* b == 3: no upper bound */
        tc_values(&t, 2, KL_F32, 0, NULL, &bounds[b < 3 ? b : 0][1]);
      t.inplace = 1;
      tc_check(&t, EXACT);
    }
}

typedef struct bcast_case {
  int ra, rb;
  int64_t a[4], b[4];
} bcast_case;

static const bcast_case BCASTS[] = {
    {1, 1, {1023}, {1023}},        {1, 1, {7}, {7}},
    {1, 1, {1}, {1}},              {2, 0, {4, 17}, {0}},
    {0, 2, {0}, {4, 17}},          {2, 1, {5, 33}, {33}},
    {1, 2, {33}, {5, 33}},         {4, 3, {2, 3, 5, 7}, {3, 1, 1}},
    {4, 4, {2, 3, 5, 7}, {1, 3, 1, 1}}, {3, 3, {3, 1, 5}, {1, 4, 1}},
    {4, 4, {2, 3, 1, 7}, {2, 1, 5, 1}}, {2, 1, {128, 600}, {600}},
    {1, 1, {70001}, {70001}},      {2, 2, {3, 40000}, {3, 1}},
};
#define N_BCASTS (sizeof BCASTS / sizeof BCASTS[0])

/* Whether A has the broadcast shape, so that Y may take A's buffer. */
static bool covers(const bcast_case *bc) {
  if (bc->ra < bc->rb) return false;
  for (int d = 0; d < bc->rb; d++)
    if (bc->a[bc->ra - bc->rb + d] == 1 && bc->b[d] != 1) return false;
  return true;
}

/* Whether B has it. */
static bool covered(const bcast_case *bc) {
  bcast_case swapped = {bc->rb, bc->ra, {0}, {0}};
  memcpy(swapped.a, bc->b, sizeof bc->b);
  memcpy(swapped.b, bc->a, sizeof bc->a);
  return covers(&swapped);
}

static void test_binary(void **state) {
  (void)state;
  const kl_op ops[] = {KL_OP_Add, KL_OP_Sub, KL_OP_Mul, KL_OP_Div};
  for (size_t o = 0; o < 4; o++)
    for (size_t c = 0; c < N_BCASTS; c++)
      for (int bf = 0; bf < 2; bf++) {
        const bcast_case *bc = &BCASTS[c];
        char name[64];
        snprintf(name, sizeof name, "%s case %zu%s", kl_op_name(ops[o]), c, bf ? " bf16" : "");
        tcase t;
        tc_init(&t, name, ops[o], 2, 1);
        kl_dtype dt = bf ? KL_BF16 : KL_F32;
        tc_rand(&t, 0, dt, bc->ra, bc->a, -4, 4, 1e-3);
        tc_rand(&t, 1, dt, bc->rb, bc->b, -4, 4, 0.25); /* far from 0 for Div */
        t.min_level = bf ? KL_ISA_AVX512_BF16 : KL_ISA_GENERIC;
        t.inplace = (covers(bc) ? 1u : 0u) | (covered(bc) ? 2u : 0u);
        tc_check(&t, bf ? BF16 : EXACT);
      }
}

/* Input i: bool, 0 or 1 at random. */
static void tc_bool(tcase *t, int i, int rank, const int64_t *dims) {
  tc_rand(t, i, KL_U8, rank, dims, 0, 2, 0);
  t->in[i].dtype = KL_BOOL;
}

/* Where (Cond, X, Y) with every broadcast case's shapes (Cond A's, X B's, Y A's or a
 * scalar's), X and Y of 4, 8, 1 and 2 bytes, and three shapes broadcast together; And,
 * Or, Xor over bool with the same cases (run_select.c): bit for bit. */
/* QuantizeLinear and DequantizeLinear per tensor (run_quant.c), bit for bit: x spread
 * over the whole range and past it (saturation), exact ties of x / scale (rounded to
 * even), NaN and infinities; zero points at the ends and in the middle, and absent. */
static void test_quantize(void **state) {
  (void)state;
  const kl_dtype dts[] = {KL_U8, KL_I8};
  const int zps[2][3] = {{0, 128, 255}, {-128, 0, 17}};
  const float scale = 0.0625f; /* x / scale exact: ties stay ties */
  const int64_t one[1] = {1};
  for (size_t s = 0; s < N_SIZES; s++)
    for (int d = 0; d < 2; d++)
      for (int z = 0; z < 4; z++) { /* z == 3: no zero point (uint8 only) */
        if (z == 3 && d == 1) continue;
        char name[80];
        snprintf(name, sizeof name, "QuantizeLinear n %lld %s zp %d", (long long)SIZES[s],
                 kl_dtype_name(dts[d]), z < 3 ? zps[d][z] : 0);
        tcase t;
        tc_init(&t, name, KL_OP_QuantizeLinear, z < 3 ? 3 : 2, 1);
        tc_rand(&t, 0, KL_F32, 1, &SIZES[s], -20, 20, 0);
        float *x = t.in[0].data;
        for (int64_t k = 0; k < SIZES[s]; k += 5) x[k] = (float)(k % 61 - 30) * scale / 2;
        if (SIZES[s] > 9) x[3] = NAN, x[6] = INFINITY, x[9] = -INFINITY;
        tc_values(&t, 1, KL_F32, 0, one, (const double[]){scale});
        if (z < 3) tc_values(&t, 2, dts[d], 0, one, (const double[]){zps[d][z]});
        tc_check(&t, EXACT);
        snprintf(name, sizeof name, "DequantizeLinear n %lld %s zp %d", (long long)SIZES[s],
                 kl_dtype_name(dts[d]), z < 3 ? zps[d][z] : 0);
        tc_init(&t, name, KL_OP_DequantizeLinear, z < 3 ? 3 : 2, 1);
        tc_rand(&t, 0, dts[d], 1, &SIZES[s], d ? -128 : 0, d ? 127 : 255, 0);
        tc_values(&t, 1, KL_F32, 0, one, (const double[]){0.0123f});
        if (z < 3) tc_values(&t, 2, dts[d], 0, one, (const double[]){zps[d][z]});
        tc_check(&t, EXACT);
      }
}

static void test_select(void **state) {
  (void)state;
  const kl_dtype dts[] = {KL_F32, KL_I64, KL_U8, KL_BF16};
  const int64_t one[1] = {1};
  for (size_t c = 0; c < N_BCASTS; c++)
    for (int d = 0; d < 4; d++) {
      const bcast_case *bc = &BCASTS[c];
      char name[64];
      snprintf(name, sizeof name, "Where case %zu dtype %d", c, dts[d]);
      tcase t;
      tc_init(&t, name, KL_OP_Where, 3, 1);
      tc_bool(&t, 0, bc->ra, bc->a);
      tc_rand(&t, 1, dts[d], bc->rb, bc->b, 1, 100, 0);
      if (d % 2) tc_rand(&t, 2, dts[d], 1, one, 1, 100, 0);
      else tc_rand(&t, 2, dts[d], bc->ra, bc->a, 1, 100, 0);
      tc_check(&t, EXACT);
    }
  const kl_op logic[] = {KL_OP_And, KL_OP_Or, KL_OP_Xor};
  for (size_t o = 0; o < 3; o++)
    for (size_t c = 0; c < N_BCASTS; c++) {
      const bcast_case *bc = &BCASTS[c];
      char name[64];
      snprintf(name, sizeof name, "%s case %zu", kl_op_name(logic[o]), c);
      tcase t;
      tc_init(&t, name, logic[o], 2, 1);
      tc_bool(&t, 0, bc->ra, bc->a);
      tc_bool(&t, 1, bc->rb, bc->b);
      tc_check(&t, EXACT);
    }
  /* the steps along the row of each loop of logic_row (0 or 1 each): BERT's mask And
   * ([1, 1, S, 1] & [B, 1, 1, S]: 0, 1), its mirror (1, 0), one element (0, 0) */
  static const struct {
    kl_op op;
    int ra, rb;
    int64_t a[4], b[4];
  } steps[] = {{KL_OP_And, 4, 4, {1, 1, 17, 1}, {3, 1, 1, 129}},
               {KL_OP_Or, 4, 4, {3, 1, 1, 129}, {1, 1, 17, 1}},
               {KL_OP_Xor, 1, 1, {1}, {1}},
               {KL_OP_And, 2, 2, {5, 33}, {5, 33}}};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    char name[64];
    snprintf(name, sizeof name, "%s steps case %zu", kl_op_name(steps[i].op), i);
    tcase t;
    tc_init(&t, name, steps[i].op, 2, 1);
    tc_bool(&t, 0, steps[i].ra, steps[i].a);
    tc_bool(&t, 1, steps[i].rb, steps[i].b);
    tc_check(&t, EXACT);
  }
  tcase t; /* a BERT mask: [B, 1, 1, S] picks a scalar or [B, 1, S, S] */
  tc_init(&t, "Where three shapes", KL_OP_Where, 3, 1);
  tc_bool(&t, 0, 4, (const int64_t[]){3, 1, 1, 129});
  tc_rand(&t, 1, KL_F32, 0, NULL, -1, 1, 0.1);
  tc_rand(&t, 2, KL_F32, 4, (const int64_t[]){3, 1, 17, 129}, -1, 1, 0.1);
  tc_check(&t, EXACT);
}

/* ---- detection post-processing (run_detect.c) ---- */

/* RoiAlign over awkward sizes (X [2, 5, 13, 11], outputs 3 x 5), both coordinate
 * modes, avg and max, a fixed and an adaptive sampling grid, rois inside, across and
 * outside X (and one of zero extent), one thread and all. The kernel weighs in float
 * what the reference weighs in double. */
static void test_roi_align(void **state) {
  (void)state;
  static const double boxes[] = {0, 0, 10, 12,   1.3, 2.7, 7.9, 9.1,  -3, -2, 4, 5,
                                 8, 9, 15, 14,   2, 2, 2, 2,         5.5, 0.2, 6.1, 12.9,
                                 -20, -20, -10, -10};
  static const double batch[] = {0, 1, 1, 0, 1, 0, 1};
  const char *modes[] = {"avg", "max"}, *ctms[] = {"half_pixel", "output_half_pixel"};
  for (int m = 0; m < 2; m++)
    for (int ct = 0; ct < 2; ct++)
      for (int sr = 0; sr < 3; sr += 2) {
        char name[96];
        snprintf(name, sizeof name, "RoiAlign %s %s sampling_ratio %d", modes[m], ctms[ct], sr);
        tcase t;
        tc_init(&t, name, KL_OP_RoiAlign, 3, 1);
        tc_string(&t, "mode", modes[m]);
        tc_string(&t, "coordinate_transformation_mode", ctms[ct]);
        tc_int(&t, "output_height", 3);
        tc_int(&t, "output_width", 5);
        tc_int(&t, "sampling_ratio", sr);
        tc_float(&t, "spatial_scale", 0.75f);
        tc_rand(&t, 0, KL_F32, 4, (const int64_t[]){2, 5, 13, 11}, -2, 2, 0.01);
        tc_values(&t, 1, KL_F32, 2, (const int64_t[]){7, 4}, boxes);
        tc_values(&t, 2, KL_I64, 1, (const int64_t[]){7}, batch);
        tc_check(&t, (tol){2e-6, 2e-6, false});
      }
  tcase t; /* many rois and channels: tasks of whole rois */
  tc_init(&t, "RoiAlign many rois", KL_OP_RoiAlign, 3, 1);
  tc_int(&t, "output_height", 7);
  tc_int(&t, "output_width", 7);
  tc_int(&t, "sampling_ratio", 2);
  tc_float(&t, "spatial_scale", 0.25f);
  tc_rand(&t, 0, KL_F32, 4, (const int64_t[]){1, 37, 20, 23}, -1, 1, 0.01);
  tc_rand(&t, 1, KL_F32, 2, (const int64_t[]){53, 4}, 0, 90, 0);
  tc_rand(&t, 2, KL_I32, 1, (const int64_t[]){53}, 0, 0.5, 0);
  tc_check(&t, (tol){2e-6, 2e-6, false});
  for (int m = 0; m < 2; m++) { /* more samples per roi than the corner table holds */
    tc_init(&t, m ? "RoiAlign many samples max" : "RoiAlign many samples", KL_OP_RoiAlign, 3, 1);
    tc_string(&t, "mode", modes[m]);
    tc_int(&t, "output_height", 17);
    tc_int(&t, "output_width", 15);
    tc_int(&t, "sampling_ratio", 3);
    tc_rand(&t, 0, KL_F32, 4, (const int64_t[]){2, 3, 21, 19}, -1, 1, 0.01);
    tc_rand(&t, 1, KL_F32, 2, (const int64_t[]){5, 4}, -2, 22, 0);
    tc_rand(&t, 2, KL_I64, 1, (const int64_t[]){5}, 0, 1.99, 0);
    tc_check(&t, (tol){2e-6, 2e-6, false});
  }
}

/* ScatterElements along each axis, negative indices, words of 4, 8 and 1 bytes: bit for
 * bit (duplicates land in the reference's order). */
static void test_scatter_elements(void **state) {
  (void)state;
  const kl_dtype dts[] = {KL_F32, KL_I64, KL_U8};
  for (int axis = -1; axis < 3; axis++)
    for (int d = 0; d < 3; d++) {
      char name[64];
      snprintf(name, sizeof name, "ScatterElements axis %d dtype %d", axis, dts[d]);
      tcase t;
      tc_init(&t, name, KL_OP_ScatterElements, 3, 1);
      tc_int(&t, "axis", axis);
      int64_t data[3] = {3, 7, 5}, idx[3] = {2, 6, 4};
      int a = axis < 0 ? 2 : axis;
      tc_rand(&t, 0, dts[d], 3, data, 1, 100, 0);
      tc_rand(&t, 1, KL_I64, 3, idx, (double)-data[a], (double)data[a] - 0.01, 0);
      tc_rand(&t, 2, dts[d], 3, idx, 1, 100, 0);
      t.inplace = 1;
      tc_check(&t, EXACT);
    }
  /* the indices' dims after the axis Y's: columns on threads (duplicates: the later
   * wins), MultiScaleRoIAlign's shape among them */
  static const struct {
    int axis;
    int64_t y[4], idx[4];
  } cols[] = {{0, {3, 7, 5, 1}, {2, 7, 5, 1}}, {1, {3, 7, 5, 1}, {2, 9, 5, 1}},
              {0, {150, 256, 7, 7}, {150, 256, 7, 7}}, {2, {2, 3, 33, 41}, {2, 2, 70, 41}}};
  for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++) {
    char name[64];
    snprintf(name, sizeof name, "ScatterElements columns %zu", k);
    tcase t;
    tc_init(&t, name, KL_OP_ScatterElements, 3, 1);
    tc_int(&t, "axis", cols[k].axis);
    int64_t len = cols[k].y[cols[k].axis];
    tc_rand(&t, 0, KL_F32, 4, cols[k].y, -9, 9, 0);
    tc_rand(&t, 1, KL_I64, 4, cols[k].idx, (double)-len, (double)len - 0.01, 0);
    tc_rand(&t, 2, KL_F32, 4, cols[k].idx, -9, 9, 0);
    t.inplace = 1;
    tc_check(&t, EXACT);
  }
  /* an index out of range: the kernel names the first, as the reference does */
  tcase t;
  tc_init(&t, "ScatterElements bad index", KL_OP_ScatterElements, 3, 1);
  tc_rand(&t, 0, KL_F32, 2, (const int64_t[]){5, 7000}, -9, 9, 0);
  tc_rand(&t, 1, KL_I64, 2, (const int64_t[]){5, 7000}, 0, 4.99, 0);
  tc_rand(&t, 2, KL_F32, 2, (const int64_t[]){5, 7000}, -9, 9, 0);
  ((int64_t *)t.in[1].data)[1234] = 7, ((int64_t *)t.in[1].data)[30000] = -9;
  kl_type types[3];
  const kl_type *tp[3];
  const kl_tensor *in[3];
  inputs_of(&t, in);
  for (int i = 0; i < 3; i++) type_of(&types[i], in[i]), tp[i] = &types[i];
  kl_tensor out[MAX_IO];
  void *mem[MAX_IO];
  memset(out, 0, sizeof out);
  alloc_outputs(&t, out, mem);
  kl_tensor *outp[1] = {&out[0]};
  kl_cpu_kernel k = kl_cpu_isa_kernel(tc_node(&t), tp, 3, kl_isa_level());
  assert_non_null(k.run);
  for (int threads = 0; threads < 2; threads++) {
    kl_kernel_ctx c = {tc_node(&t), 3, 1, in, outp, &t.e, threads, NULL, 0};
    kl_err_clear(&t.e);
    assert_int_equal(k.run(&c), KILN_ERR_INVALID_ARGUMENT);
    if (!strstr(t.e.msg, "has 7 at element 1234, expected -5 to 4"))
      fail_msg("ScatterElements bad index: %s", t.e.msg);
  }
  free_all(mem, 1);
  tc_free(&t);
}

/* Expand of every broadcast case's A to the shape A and B broadcast to, in words of
 * 4, 8, 1 and 2 bytes, and of a scalar. */
static void test_expand(void **state) {
  (void)state;
  const kl_dtype dts[] = {KL_F32, KL_I64, KL_U8, KL_BF16};
  for (size_t c = 0; c < N_BCASTS; c++)
    for (int d = 0; d < 4; d++) {
      const bcast_case *bc = &BCASTS[c];
      char name[64];
      snprintf(name, sizeof name, "Expand case %zu dtype %d", c, dts[d]);
      double shape[4];
      for (int k = 0; k < bc->rb; k++) shape[k] = (double)bc->b[k];
      tcase t;
      tc_init(&t, name, KL_OP_Expand, 2, 1);
      tc_rand(&t, 0, dts[d], bc->ra, bc->a, 1, 100, 0);
      tc_values(&t, 1, KL_I64, 1, (const int64_t[]){bc->rb}, shape);
      tc_check(&t, EXACT);
    }
}

/* ConstantOfShape without a value (float32 0) and with values of 4, 8 and 1 bytes. */
static void test_constant_of_shape(void **state) {
  (void)state;
  const kl_dtype dts[] = {KL_UNDEFINED, KL_F32, KL_I64, KL_BOOL, KL_F16};
  for (int d = 0; d < 5; d++) {
    tcase t;
    tc_init(&t, "ConstantOfShape", KL_OP_ConstantOfShape, 1, 1);
    if (dts[d] != KL_UNDEFINED) {
      kl_tensor *v = calloc(1, sizeof *v);
      assert_non_null(v);
      *v = (kl_tensor){.dtype = dts[d], .rank = 1, .dims = {1}, .data = calloc(1, 8)};
      assert_non_null(v->data);
      kl_store_f64(v->data, dts[d], 0, dts[d] == KL_BOOL ? 1 : -3);
      assert_int_equal(kl_node_set_tensor(t.g, t.node, "value", v, &t.e), KILN_OK);
    }
    tc_values(&t, 0, KL_I64, 1, (const int64_t[]){3}, (const double[]){3, 17, 1001});
    tc_check(&t, EXACT);
  }
}

/* Gather along each axis with negative indices, scalar and 2-D indices, words of 4, 8
 * and 1 bytes, int64 and int32 indices. */
static void test_gather(void **state) {
  (void)state;
  const kl_dtype dts[] = {KL_F32, KL_I64, KL_U8};
  for (int axis = -1; axis < 3; axis++)
    for (int d = 0; d < 3; d++)
      for (int ir = 0; ir < 3; ir++) {
        char name[64];
        snprintf(name, sizeof name, "Gather axis %d dtype %d indices rank %d", axis, dts[d], ir);
        int64_t data[3] = {5, 7, 3};
        int a = axis < 0 ? 2 : axis;
        tcase t;
        tc_init(&t, name, KL_OP_Gather, 2, 1);
        tc_int(&t, "axis", axis);
        tc_rand(&t, 0, dts[d], 3, data, 1, 100, 0);
        tc_rand(&t, 1, ir == 1 ? KL_I32 : KL_I64, ir, (const int64_t[]){4, 3}, (double)-data[a],
                (double)data[a] - 0.01, 0);
        tc_check(&t, EXACT);
      }
}

/* Input i: indices of dtype dt whose element e indexes a dim of lens[e % k] elements,
 * drawn from -len to len - 1 (negative ones count from the end). */
static void tc_indices(tcase *t, int i, kl_dtype dt, int rank, const int64_t *dims, int k,
                       const int64_t *lens) {
  kl_tensor *x = &t->in[i];
  tc_shape(x, dt, rank, dims);
  int64_t n = kl_tensor_numel(x);
  x->data = buffer(t, dt, n, &t->mem[i]);
  for (int64_t e = 0; e < n; e++) {
    int64_t len = lens[e % k], v = (int64_t)floor(uniform(&t->seed, (double)-len, (double)len));
    kl_store_f64(x->data, dt, (size_t)e, (double)(v < len ? v : len - 1));
  }
}

/* The case's kernel, at every level and on one thread and all, fails naming an index out
 * of range in the reference's words (part: what the message must hold). */
static void expect_bad_index(tcase *t, const char *part) {
  kl_type types[MAX_IO];
  const kl_type *tp[MAX_IO];
  const kl_tensor *in[MAX_IO];
  inputs_of(t, in);
  for (int i = 0; i < t->n_in; i++) type_of(&types[i], in[i]), tp[i] = &types[i];
  kl_tensor out[MAX_IO];
  void *mem[MAX_IO];
  memset(out, 0, sizeof out);
  alloc_outputs(t, out, mem);
  kl_tensor *outp[MAX_IO];
  for (int k = 0; k < t->n_out; k++) outp[k] = &out[k];
  kl_kernel_ctx rc = {tc_node(t), t->n_in, t->n_out, in, outp, &t->e, 1, NULL, 0};
  kl_err_clear(&t->e);
  assert_int_equal(kl_op_get(tc_node(t)->op)->ref(&rc), KILN_ERR_INVALID_ARGUMENT);
  char want[sizeof t->e.msg];
  snprintf(want, sizeof want, "%s", t->e.msg);
  if (!strstr(want, part)) fail_msg("%s: the reference says: %s", t->name, want);
  kl_isa top = kl_isa_supported(kl_isa_features());
  for (int isa = KL_ISA_GENERIC; isa <= (int)top; isa++) {
    kl_cpu_kernel k = kl_cpu_isa_kernel(tc_node(t), tp, t->n_in, (kl_isa)isa);
    assert_non_null(k.run);
    for (int threads = 0; threads < 2; threads++) {
      kl_kernel_ctx c = {tc_node(t), t->n_in, t->n_out, in, outp, &t->e, threads, NULL, 0};
      kl_err_clear(&t->e);
      assert_int_equal(k.run(&c), KILN_ERR_INVALID_ARGUMENT);
      if (strcmp(t->e.msg, want) != 0)
        fail_msg("%s at %s: '%s', the reference '%s'", t->name,
                 kl_isa_level_name((kl_isa)isa), t->e.msg, want);
    }
  }
  free_all(mem, t->n_out);
  tc_free(t);
}

/* The element dtypes of every size: 1, 2, 4 and 8 bytes. */
static const kl_dtype MOVE_DTS[] = {KL_U8, KL_BF16, KL_F32, KL_I64};

/* Split by a split input (a part of zero, uneven parts) and by num_outputs (the last
 * part shorter, or empty), along every rank from 1 to 5, negative axes, empty X, rows
 * long enough for tasks of their own and many short ones. */
static void test_split(void **state) {
  (void)state;
  static const struct {
    int rank;
    int64_t dims[5];
    int axis, n_out;
    int64_t split[4]; /* split[0] < 0: by num_outputs */
  } cases[] = {
      {1, {17}, 0, 3, {5, 0, 12}},
      {1, {200003}, -1, 2, {-1}},
      {2, {3, 70001}, -1, 3, {1, 35000, 35000}},
      {2, {70001, 3}, 0, 4, {-1}},
      {2, {4, 6}, 0, 3, {-1}}, /* parts of 2, 2 and 0 */
      {3, {1000, 37, 3}, 1, 2, {10, 27}},
      {3, {4, 0, 5}, 2, 3, {-1}},
      {3, {4, 5, 6}, -3, 2, {0, 4}},
      {4, {2, 3, 5, 7}, -2, 2, {-1}},
      {5, {2, 3, 4, 5, 6}, 4, 3, {1, 2, 3}},
      {5, {3, 2, 9, 2, 5}, 2, 4, {2, 3, 0, 4}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int d = 0; d < 4; d++) {
      char name[64];
      snprintf(name, sizeof name, "Split case %zu dtype %d", c, MOVE_DTS[d]);
      bool by_input = cases[c].split[0] >= 0;
      tcase t;
      tc_init(&t, name, KL_OP_Split, by_input ? 2 : 1, cases[c].n_out);
      tc_int(&t, "axis", cases[c].axis);
      if (!by_input) tc_int(&t, "num_outputs", cases[c].n_out);
      tc_rand(&t, 0, MOVE_DTS[d], cases[c].rank, cases[c].dims, 1, 100, 0);
      if (by_input) {
        double s[4];
        for (int k = 0; k < cases[c].n_out; k++) s[k] = (double)cases[c].split[k];
        tc_values(&t, 1, KL_I64, 1, (const int64_t[]){cases[c].n_out}, s);
      }
      tc_check(&t, EXACT);
    }
}

/* GatherND over ranks 1 to 5 of X and of the indices, batch_dims 0 to 2, tuples from 1
 * to all of X's dims (scalars to long slices), negative indices, int64 and int32
 * indices, elements of every size, empty indices and empty slices; an index out of
 * range named as the reference names it. */
static void test_gather_nd(void **state) {
  (void)state;
  static const struct {
    int xr, ir, b;
    int64_t x[5], idx[5];
  } cases[] = {
      {1, 2, 0, {7}, {5, 1}},
      {2, 2, 0, {5, 6}, {4, 2}},
      {2, 2, 0, {5, 6}, {3, 1}},
      {3, 3, 0, {4, 5, 6}, {2, 3, 2}},
      {3, 3, 1, {3, 4, 5}, {3, 2, 1}},
      {4, 4, 2, {2, 3, 4, 5}, {2, 3, 7, 1}},
      {4, 3, 2, {2, 3, 4, 5}, {2, 3, 2}},
      {5, 3, 1, {2, 3, 4, 5, 6}, {2, 3, 2}},
      {5, 3, 0, {2, 3, 4, 5, 6}, {2, 4, 3}},
      {5, 5, 2, {2, 3, 4, 5, 6}, {2, 3, 4, 9, 3}},
      {5, 1, 0, {2, 3, 4, 5, 6}, {5}},
      {2, 2, 0, {1000, 64}, {30000, 1}},  /* rows on threads */
      {2, 2, 0, {300, 301}, {50001, 2}},  /* scalars on threads */
      {2, 2, 0, {4, 5}, {0, 1}},          /* no tuples */
      {2, 2, 0, {3, 0}, {2, 1}},          /* empty slices: the indices still checked */
      {3, 3, 1, {4, 5, 6}, {4, 0, 1}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int d = 0; d < 4; d++) {
      char name[64];
      snprintf(name, sizeof name, "GatherND case %zu dtype %d", c, MOVE_DTS[d]);
      tcase t;
      tc_init(&t, name, KL_OP_GatherND, 2, 1);
      int b = cases[c].b, k = (int)cases[c].idx[cases[c].ir - 1];
      if (b) tc_int(&t, "batch_dims", b);
      tc_rand(&t, 0, MOVE_DTS[d], cases[c].xr, cases[c].x, 1, 100, 0);
      tc_indices(&t, 1, d % 2 ? KL_I32 : KL_I64, cases[c].ir, cases[c].idx, k, cases[c].x + b);
      tc_check(&t, EXACT);
    }
  for (int dt = 0; dt < 2; dt++) {
    tcase t;
    tc_init(&t, "GatherND bad index", KL_OP_GatherND, 2, 1);
    tc_rand(&t, 0, KL_F32, 2, (const int64_t[]){5, 6}, -9, 9, 0.5);
    tc_indices(&t, 1, dt ? KL_I32 : KL_I64, 2, (const int64_t[]){30000, 2}, 2,
               (const int64_t[]){5, 6});
    kl_store_f64(t.in[1].data, t.in[1].dtype, 2469, 6);
    kl_store_f64(t.in[1].data, t.in[1].dtype, 40000, -9);
    expect_bad_index(&t, "has 6 at element 2469, expected -6 to 5");
  }
  tcase t; /* with batch dims: the flat element, the range of the dim the tuple indexes */
  tc_init(&t, "GatherND bad index batch", KL_OP_GatherND, 2, 1);
  tc_int(&t, "batch_dims", 1);
  tc_rand(&t, 0, KL_I64, 3, (const int64_t[]){3, 4, 5}, 1, 9, 0);
  tc_indices(&t, 1, KL_I64, 3, (const int64_t[]){3, 2, 2}, 2, (const int64_t[]){4, 5});
  ((int64_t *)t.in[1].data)[9] = -6;
  expect_bad_index(&t, "has -6 at element 9, expected -5 to 4");
}

/* GatherElements along every axis (negative too) of ranks 1 to 5, indices smaller
 * than X in the other dims and longer along the axis, int64 and int32 indices, elements
 * of every size, large cases on threads, empty indices; an index out of range. */
static void test_gather_elements(void **state) {
  (void)state;
  static const struct {
    int rank, axis;
    int64_t x[5], idx[5];
  } cases[] = {
      {1, 0, {17}, {40}},
      {1, -1, {17}, {5}},
      {2, 0, {5, 7}, {9, 7}},
      {2, 1, {5, 7}, {4, 11}},
      {2, -1, {300, 1000}, {300, 1000}},
      {2, 0, {300, 1000}, {301, 997}},
      {3, 2, {4, 5, 6}, {4, 5, 9}},
      {3, 1, {4, 5, 6}, {2, 8, 3}},
      {3, -3, {4, 5, 6}, {7, 3, 6}},
      {4, -2, {2, 3, 4, 5}, {2, 3, 6, 5}},
      {5, 3, {2, 3, 4, 5, 6}, {2, 2, 4, 3, 6}},
      {5, 4, {2, 3, 4, 5, 6}, {2, 3, 4, 5, 10}},
      {5, 0, {2, 3, 4, 5, 6}, {1, 3, 2, 5, 6}},
      {2, 0, {4, 5}, {0, 5}},
      {2, 1, {4, 5}, {4, 0}},
      {2, 0, {4, 0}, {4, 0}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int d = 0; d < 4; d++) {
      char name[64];
      snprintf(name, sizeof name, "GatherElements case %zu dtype %d", c, MOVE_DTS[d]);
      tcase t;
      tc_init(&t, name, KL_OP_GatherElements, 2, 1);
      tc_int(&t, "axis", cases[c].axis);
      int a = cases[c].axis < 0 ? cases[c].axis + cases[c].rank : cases[c].axis;
      tc_rand(&t, 0, MOVE_DTS[d], cases[c].rank, cases[c].x, 1, 100, 0);
      tc_indices(&t, 1, d % 2 ? KL_I64 : KL_I32, cases[c].rank, cases[c].idx, 1,
                 &cases[c].x[a]);
      tc_check(&t, EXACT);
    }
  for (int axis = 0; axis < 2; axis++) {
    tcase t;
    tc_init(&t, axis ? "GatherElements bad index axis 1" : "GatherElements bad index",
            KL_OP_GatherElements, 2, 1);
    tc_int(&t, "axis", axis);
    int64_t dims[2] = {5, 7000};
    tc_rand(&t, 0, KL_F32, 2, dims, -9, 9, 0.5);
    tc_indices(&t, 1, axis ? KL_I32 : KL_I64, 2, dims, 1, &dims[axis]);
    kl_store_f64(t.in[1].data, t.in[1].dtype, 1234, axis ? 7000 : 7);
    kl_store_f64(t.in[1].data, t.in[1].dtype, 30000, -9000);
    expect_bad_index(&t, axis ? "has 7000 at element 1234, expected -7000 to 6999"
                              : "has 7 at element 1234, expected -5 to 4");
  }
}

/* In a session, Split, GatherND and GatherElements run on kiln's kernels at the
 * process's level (not the reference: kiln bench's "reference" share), with the
 * reference session's bits. */
static void test_index_session(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 2, (const int64_t[]){6, 10});
  int split = tu_graph_const(g, "split", KL_I64, 1, (const int64_t[]){2},
                             (const int64_t[]){3, 7});
  int nd_idx = tu_graph_const(g, "nd_idx", KL_I64, 2, (const int64_t[]){3, 1},
                              (const int64_t[]){1, 4, -1});
  int64_t ge[20];
  for (int i = 0; i < 20; i++) ge[i] = (i * 7) % 11 - 5;
  int ge_idx = tu_graph_const(g, "ge_idx", KL_I64, 2, (const int64_t[]){2, 10}, ge);
  int sp = tu_graph_output_node(g, KL_OP_Split, 2, (const int[]){x, split}, 2);
  tu_graph_output_node(g, KL_OP_GatherND, 2, (const int[]){x, nd_idx}, 1);
  int gel = tu_graph_output_node(g, KL_OP_GatherElements, 2, (const int[]){x, ge_idx}, 1);
  assert_int_equal(kl_node_set_int(g, sp, "axis", -1, NULL), KILN_OK);
  assert_int_equal(kl_node_set_int(g, gel, "axis", 0, NULL), KILN_OK);
  kiln_model *m = tu_model_of(g, 0);
  float xs[60];
  uint32_t rng = 7;
  for (int i = 0; i < 60; i++) xs[i] = tu_rand_f32(&rng, 1, 9);
  float *bufs[1] = {xs};
  kiln_session *ref = tu_session(m, true, 1), *fast = tu_session(m, false, 0);
  int64_t n_want, n_got;
  float *want = tu_run_f32(ref, m, bufs, &n_want), *got = tu_run_f32(fast, m, bufs, &n_got);
  assert_int_equal(n_got, n_want);
  assert_memory_equal(got, want, sizeof(float) * (size_t)n_want);
  int seen = 0;
  for (int i = 0; i < m->g->n_nodes; i++) {
    kl_op op = m->g->nodes[i].op;
    if (op != KL_OP_Split && op != KL_OP_GatherND && op != KL_OP_GatherElements) continue;
    seen++;
    const char *k = kl_session_kernel_name(fast, i);
    if (strcmp(k, expected_name(kl_isa_level())) != 0 || kl_session_slow_path(fast, i))
      fail_msg("node %d (%s) ran on '%s', expected '%s'", i, kl_op_name(op), k,
               expected_name(kl_isa_level()));
  }
  assert_int_equal(seen, 3);
  free(want);
  free(got);
  kiln_session_free(ref);
  kiln_session_free(fast);
  kiln_model_free(m);
}

/* The comparisons over every broadcast case, in float32, float64, int32 and int64, on
 * small integers (equal values are common) and on A against itself. */
static void test_compare(void **state) {
  (void)state;
  const kl_op ops[] = {KL_OP_Equal, KL_OP_Less, KL_OP_Greater, KL_OP_LessOrEqual,
                       KL_OP_GreaterOrEqual};
  const kl_dtype dts[] = {KL_F32, KL_F64, KL_I32, KL_I64};
  for (int o = 0; o < 5; o++)
    for (size_t c = 0; c < N_BCASTS; c++)
      for (int d = 0; d < 4; d++) {
        const bcast_case *bc = &BCASTS[c];
        char name[64];
        snprintf(name, sizeof name, "%s case %zu dtype %d", kl_op_name(ops[o]), c, dts[d]);
        tcase t;
        tc_init(&t, name, ops[o], 2, 1);
        tc_rand(&t, 0, dts[d], bc->ra, bc->a, -3, 3, 0);
        tc_rand(&t, 1, dts[d], bc->rb, bc->b, -3, 3, 0);
        if (kl_dtype_is_float(dts[d])) /* some equal values among the floats too */
          for (int i = 0; i < 2; i++)
            for (int64_t k = 0; k < kl_tensor_numel(&t.in[i]); k += 3)
              kl_store_f64(t.in[i].data, dts[d], (size_t)k, 1.0);
        tc_check(&t, EXACT);
      }
}

/* Resize of [2, 3, 13, 17] along its last two dims (up along one, down along the
 * other; by sizes and by scales), nearest (bit for bit) and linear in every coordinate
 * transformation; cubic and antialiased linear run the reference through the same
 * kernel (run_resize.c). */
static void test_resize(void **state) {
  (void)state;
  const char *coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                          "half_pixel_symmetric"};
  const char *modes[] = {"nearest", "linear", "cubic", "linear"};
  for (int m = 0; m < 4; m++)
    for (int co = 0; co < 5; co++)
      for (int by_scales = 0; by_scales < 2; by_scales++) {
        char name[96];
        snprintf(name, sizeof name, "Resize %s%s %s by %s", modes[m], m == 3 ? " antialias" : "",
                 coords[co], by_scales ? "scales" : "sizes");
        tcase t;
        tc_init(&t, name, KL_OP_Resize, 4, 1);
        tc_string(&t, "mode", modes[m]);
        tc_string(&t, "coordinate_transformation_mode", coords[co]);
        if (m == 3) tc_int(&t, "antialias", 1);
        if (m == 0 && co % 2) tc_string(&t, "nearest_mode", "floor");
        tc_rand(&t, 0, KL_F32, 4, (const int64_t[]){2, 3, 13, 17}, -2, 2, 0.01);
        if (by_scales)
          tc_values(&t, 2, KL_F32, 1, (const int64_t[]){4}, (const double[]){1, 1, 2.5, 0.6});
        else
          tc_values(&t, 3, KL_I64, 1, (const int64_t[]){4}, (const double[]){2, 3, 29, 11});
        tc_check(&t, m == 0 ? EXACT : (tol){2e-6, 2e-6, false});
      }
  /* nearest upsamplings whose rows repeat (copied) and whose columns go in pairs (by 2,
   * an odd width too: 17 -> 33 asymmetric), or by 3 (the table), bit for bit */
  static const double ups[][4] = {{1, 1, 2, 2}, {1, 1, 3, 2}, {2, 3, 26, 33}, {1, 1, 2, 3}};
  for (int u = 0; u < 4; u++)
    for (int co = 0; co < 2; co++) {
      char name[96];
      snprintf(name, sizeof name, "Resize nearest up %d %s", u, co ? "half_pixel" : "asymmetric");
      tcase t;
      tc_init(&t, name, KL_OP_Resize, 4, 1);
      tc_string(&t, "mode", "nearest");
      tc_string(&t, "coordinate_transformation_mode", co ? "half_pixel" : "asymmetric");
      if (!co) tc_string(&t, "nearest_mode", "floor");
      tc_rand(&t, 0, KL_F32, 4, (const int64_t[]){2, 3, 13, 17}, -2, 2, 0.01);
      if (u == 2)
        tc_values(&t, 3, KL_I64, 1, (const int64_t[]){4}, ups[u]);
      else
        tc_values(&t, 2, KL_F32, 1, (const int64_t[]){4}, ups[u]);
      tc_check(&t, EXACT);
    }
}

/* Max and Min of two inputs over every broadcast case in float32 (NaNs among them:
 * NaN wins, as in the reference), int32 and int64: bit for bit. */
static void test_minmax(void **state) {
  (void)state;
  const kl_op ops[] = {KL_OP_Max, KL_OP_Min};
  const kl_dtype dts[] = {KL_F32, KL_I32, KL_I64};
  for (int o = 0; o < 2; o++)
    for (size_t c = 0; c < N_BCASTS; c++)
      for (int d = 0; d < 3; d++) {
        const bcast_case *bc = &BCASTS[c];
        char name[64];
        snprintf(name, sizeof name, "%s case %zu dtype %d", kl_op_name(ops[o]), c, dts[d]);
        tcase t;
        tc_init(&t, name, ops[o], 2, 1);
        tc_rand(&t, 0, dts[d], bc->ra, bc->a, -50, 50, 0);
        tc_rand(&t, 1, dts[d], bc->rb, bc->b, -50, 50, 0);
        if (dts[d] == KL_F32)
          for (int i = 0; i < 2; i++)
            for (int64_t k = i; k < kl_tensor_numel(&t.in[i]); k += 7)
              ((float *)t.in[i].data)[k] = NAN;
        tc_check(&t, EXACT);
      }
}

/* TopK along the last axis, largest and smallest, k of 1, some, and all, rows of 1 to
 * 19,000 values: distinct values, many ties (values on a coarse grid: the earlier index
 * first) and NaNs (above every number). Values and indices exactly the reference's. */
static void test_topk(void **state) {
  (void)state;
  static const struct {
    int rank;
    int64_t dims[3], k;
  } cases[] = {{2, {3, 1001}, 1},  {2, {3, 1001}, 7},     {2, {3, 1001}, 1001},
               {1, {19000}, 1000}, {3, {2, 5, 37}, 36}, {2, {1, 1}, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int v = 0; v < 3; v++)     /* distinct, ties, NaN */
      for (int lg = 0; lg < 2; lg++) { /* largest 0, 1 */
        char name[80];
        snprintf(name, sizeof name, "TopK case %zu data %d largest %d", c, v, lg);
        tcase t;
        tc_init(&t, name, KL_OP_TopK, 2, 2);
        tc_rand(&t, 0, KL_F32, cases[c].rank, cases[c].dims, -5, 5, 0);
        float *x = t.in[0].data;
        int64_t n = kl_tensor_numel(&t.in[0]);
        for (int64_t i = 0; v > 0 && i < n; i++) x[i] = floorf(x[i]); /* 10 levels */
        for (int64_t i = 3; v == 2 && i < n; i += 11) x[i] = NAN;
        double k = (double)cases[c].k;
        tc_values(&t, 1, KL_I64, 1, (const int64_t[]){1}, &k);
        tc_int(&t, "largest", lg);
        tc_check(&t, EXACT);
      }
}

/* NonZero of 1-D and 3-D inputs in bool, float32, int32 and int64, about a third zero. */
static void test_non_zero(void **state) {
  (void)state;
  const kl_dtype dts[] = {KL_BOOL, KL_F32, KL_I32, KL_I64};
  static const int64_t shapes[][3] = {{1001, 0, 0}, {3, 5, 7}, {1, 1, 1}};
  const int ranks[] = {1, 3, 1};
  for (int s = 0; s < 3; s++)
    for (int d = 0; d < 4; d++) {
      char name[64];
      snprintf(name, sizeof name, "NonZero shape %d dtype %d", s, dts[d]);
      tcase t;
      tc_init(&t, name, KL_OP_NonZero, 1, 1);
      tc_rand(&t, 0, dts[d] == KL_BOOL ? KL_U8 : dts[d], ranks[s], shapes[s], 0, 3, 0);
      t.in[0].dtype = dts[d];
      for (int64_t k = 0; k < kl_tensor_numel(&t.in[0]); k++) /* 0, 1 or 2 */
        if (kl_load_f64(t.in[0].data, dts[d], (size_t)k) >= 2)
          kl_store_f64(t.in[0].data, dts[d], (size_t)k, dts[d] == KL_BOOL ? 1 : -0.5);
      tc_check(&t, EXACT);
    }
}

/* ---- rows ---- */

static void test_softmax(void **state) {
  (void)state;
  static const int64_t shapes[][2] = {{1, 1}, {1, 7}, {3, 15}, {2, 16}, {4, 17},
                                      {5, 1023}, {300, 1000}, {2, 33}};
  const kl_op ops[] = {KL_OP_Softmax, KL_OP_LogSoftmax};
  for (int o = 0; o < 2; o++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (int v = 0; v < 3; v++) { /* v: axis -1, axis 1 and offset data, bf16 */
        tcase t;
        tc_init(&t, kl_op_name(ops[o]), ops[o], 1, 1);
        if (v == 1) tc_int(&t, "axis", 1);
        kl_dtype dt = v == 2 ? KL_BF16 : KL_F32;
        double off = v == 1 ? 100 : 0; /* a large max: x - max must stay exact */
        tc_rand(&t, 0, dt, 2, shapes[s], off - 8, off + 8, 1e-3);
        t.min_level = v == 2 ? KL_ISA_AVX512_BF16 : KL_ISA_GENERIC;
        t.inplace = 1;
        tc_check(&t, v == 2 ? BF16 : (tol){2e-6, 1e-6, false});
      }
}

/* An axis that is not the last: no kernel when the rank is known; when it is not known
 * at selection, the kernel runs the reference at run time. */
static void test_softmax_other_axis(void **state) {
  (void)state;
  int64_t dims[] = {4, 9, 3};
  tcase t;
  tc_init(&t, "softmax axis 1 known rank", KL_OP_Softmax, 1, 1);
  tc_int(&t, "axis", 1);
  tc_rand(&t, 0, KL_F32, 3, dims, -3, 3, 1e-3);
  t.min_level = KL_ISA_COUNT;
  tc_check(&t, EXACT);
  tc_init(&t, "softmax axis 1 unknown rank", KL_OP_Softmax, 1, 1);
  tc_int(&t, "axis", 1);
  tc_rand(&t, 0, KL_F32, 3, dims, -3, 3, 1e-3);
  t.rank_unknown = true;
  tc_check(&t, EXACT);
}

static void norm_case(kl_op op, int rank, const int64_t *dims, int64_t axis, bool bias,
                      int n_out, kl_dtype dt) {
  tcase t;
  char name[64];
  snprintf(name, sizeof name, "%s rank %d axis %lld%s", kl_op_name(op), rank,
           (long long)axis, dt == KL_BF16 ? " bf16" : "");
  int n_in = op == KL_OP_RMSNormalization ? 2 : bias ? 3 : 2;
  tc_init(&t, name, op, n_in, n_out);
  tc_int(&t, "axis", axis);
  tc_float(&t, "epsilon", 1e-3f);
  int a = (int)(axis < 0 ? axis + rank : axis);
  tc_rand(&t, 0, dt, rank, dims, -3, 5, 1e-3);
  tc_rand(&t, 1, dt, rank - a, dims + a, -2, 2, 0.1);
  if (n_in > 2) tc_rand(&t, 2, dt, rank - a, dims + a, -1, 1, 1e-3);
  t.min_level = dt == KL_BF16 ? KL_ISA_AVX512_BF16 : KL_ISA_GENERIC;
  t.inplace = 1;
  tc_check(&t, NORM);
}

static void test_norms(void **state) {
  (void)state;
  static const int64_t lens[] = {1, 7, 16, 17, 1023};
  for (size_t l = 0; l < 5; l++) {
    int64_t dims[2] = {5, lens[l]};
    norm_case(KL_OP_LayerNormalization, 2, dims, -1, true, 1, KL_F32);
    norm_case(KL_OP_LayerNormalization, 2, dims, -1, false, 3, KL_F32);
    norm_case(KL_OP_RMSNormalization, 2, dims, -1, false, 1, KL_F32);
    norm_case(KL_OP_LayerNormalization, 2, dims, -1, true, 1, KL_BF16);
    norm_case(KL_OP_RMSNormalization, 2, dims, 1, false, 1, KL_BF16);
  }
  int64_t d3[3] = {2, 3, 5}, big[2] = {512, 768};
  norm_case(KL_OP_LayerNormalization, 3, d3, 1, true, 3, KL_F32);
  norm_case(KL_OP_LayerNormalization, 2, big, -1, true, 1, KL_F32);
}

/* InstanceNormalization: rows of one channel each, scaled and shifted by the
 * channel's Scale and B (the primitive's scalar form), short rows, odd spatial shapes,
 * and rows far longer than a block of the statistics (KL_NORM_BLOCK). */
static void test_instance_norm(void **state) {
  (void)state;
  static const int64_t d3[3] = {2, 3, 17}, d4[4] = {1, 5, 7, 9}, d5[5] = {1, 3, 4, 5, 6};
  static const int64_t long_rows[3] = {2, 2, 50001};
  const int64_t *dims[4] = {d3, d4, d5, long_rows};
  const int ranks[4] = {3, 4, 5, 3};
  for (int i = 0; i < 4; i++) {
    tcase t;
    tc_init(&t, "InstanceNormalization", KL_OP_InstanceNormalization, 3, 1);
    tc_float(&t, "epsilon", 1e-5f);
    tc_rand(&t, 0, KL_F32, ranks[i], dims[i], -3, 5, 1e-3);
    tc_rand(&t, 1, KL_F32, 1, dims[i] + 1, -2, 2, 0.1);
    tc_rand(&t, 2, KL_F32, 1, dims[i] + 1, -1, 1, 1e-3);
    t.inplace = 1;
    tc_check(&t, NORM);
  }
}

static void skip_norm_case(const int64_t *dims, bool bias, int n_out, kl_dtype dt) {
  tcase t;
  tc_init(&t, dt == KL_BF16 ? "SkipLayerNorm bf16" : "SkipLayerNorm", KL_OP_KilnSkipLayerNorm,
          bias ? 4 : 3, n_out);
  tc_float(&t, "epsilon", 1e-5f);
  tc_rand(&t, 0, dt, 3, dims, -3, 3, 1e-3);
  tc_rand(&t, 1, dt, 3, dims, -3, 3, 1e-3);
  tc_rand(&t, 2, dt, 1, dims + 2, -2, 2, 0.1);
  if (bias) tc_rand(&t, 3, dt, 1, dims + 2, -1, 1, 1e-3);
  t.min_level = dt == KL_BF16 ? KL_ISA_AVX512_BF16 : KL_ISA_GENERIC;
  t.inplace = 3; /* Y in X's buffer, or in Skip's */
  tc_check(&t, NORM);
}

static void test_skip_norm(void **state) {
  (void)state;
  int64_t small[3] = {2, 3, 17}, bert[3] = {1, 128, 768};
  skip_norm_case(small, true, 2, KL_F32);
  skip_norm_case(small, false, 1, KL_F32);
  skip_norm_case(bert, true, 1, KL_F32);
  skip_norm_case(small, true, 2, KL_BF16);
}

/* n_axes < 0: no axes input. Axes that are not adjacent run the reference inside the
 * kernel, which must then match it exactly, as it does. */
static void reduce_case(kl_op op, int rank, const int64_t *dims, int n_axes,
                        const double *axes, int keepdims) {
  tcase t;
  tc_init(&t, kl_op_name(op), op, n_axes >= 0 ? 2 : 1, 1);
  tc_int(&t, "keepdims", keepdims);
  tc_rand(&t, 0, KL_F32, rank, dims, -4, 4, 1e-3);
  int64_t na = n_axes;
  if (n_axes >= 0) tc_values(&t, 1, KL_I64, 1, &na, axes);
  tc_check(&t, SUMS);
}

static void test_reduce(void **state) {
  (void)state;
  const kl_op ops[] = {KL_OP_ReduceSum, KL_OP_ReduceMean};
  int64_t d2[2] = {4, 1023}, d3[3] = {3, 7, 17}, d4[4] = {2, 3, 5, 7}, d5[2] = {5, 16};
  int64_t big[2] = {64, 4096}, ones[4] = {1, 7, 1, 9};
  double last = -1, mid = 1, zero = 0, hw[2] = {2, 3}, split[2] = {0, 2}, both[2] = {1, 3};
  for (int o = 0; o < 2; o++)
    for (int keep = 0; keep < 2; keep++) {
      reduce_case(ops[o], 2, d2, 1, &last, keep);
      reduce_case(ops[o], 3, d3, 1, &mid, keep);
      reduce_case(ops[o], 4, d4, 2, hw, keep);
      reduce_case(ops[o], 2, d5, 1, &zero, keep);
      reduce_case(ops[o], 3, d3, 2, split, keep);
      reduce_case(ops[o], 2, big, 1, &last, keep);
      reduce_case(ops[o], 4, ones, 2, both, keep); /* size-1 axis between */
      reduce_case(ops[o], 3, d3, -1, NULL, keep);  /* no axes: all of them */
    }
}

/* A mean over 12544 rows of 37 columns (a channels-last tensor's pixels: the reduced
 * axes outside the kept one) and over 12544 contiguous elements, of positive terms:
 * each level within 5e-7 of the double sums, relatively. One chain of 12544 additions
 * per column (the kernel before it summed blocks of rows apart) drifted to 1e-6. */
static void test_reduce_long(void **state) {
  (void)state;
  static const tol LONG_SUM = {0, 5e-7, true}; /* of the sum of |x|: here the sum */
  int64_t pixels[2] = {12544, 37}, rows[2] = {37, 12544};
  double outer = 0, inner = 1;
  for (int o = 0; o < 2; o++) {
    tcase t;
    tc_init(&t, o ? "ReduceMean over the outer axis" : "ReduceSum over the outer axis",
            o ? KL_OP_ReduceMean : KL_OP_ReduceSum, 2, 1);
    tc_int(&t, "keepdims", 1);
    tc_rand(&t, 0, KL_F32, 2, o ? rows : pixels, 1, 4, 0);
    int64_t na = 1;
    tc_values(&t, 1, KL_I64, 1, &na, o ? &inner : &outer);
    tc_check(&t, LONG_SUM);
  }
}

/* ---- pooling ---- */

typedef struct pool_case {
  int64_t dims[4];
  int rank;
  int64_t kernel[2], strides[2], pads[4], dil[2];
  int ceil_mode, include_pad;
  const char *auto_pad;
} pool_case;

static const pool_case POOLS[] = {
    {{2, 3, 7, 7}, 4, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 0, 0, NULL},
    {{2, 3, 17, 15}, 4, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, 0, NULL},
    {{1, 2, 32, 33}, 4, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0, 0, NULL},
    {{1, 2, 17, 16}, 4, {3, 2}, {2, 3}, {1, 0, 2, 1}, {2, 1}, 1, 0, NULL},
    {{1, 2, 15, 15}, 4, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1, 1, NULL},
    {{1, 1, 1, 1}, 4, {1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 0, 0, NULL},
    {{1, 3, 9, 10}, 4, {3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0, 0, "SAME_UPPER"},
    {{2, 3, 17}, 3, {3, 0}, {2, 0}, {1, 1, 0, 0}, {1, 0}, 0, 1, NULL},
    {{1, 1, 3, 5000}, 4, {1, 5}, {1, 1}, {0, 2, 0, 2}, {1, 2}, 0, 0, NULL},
    {{1, 1, 2, 4500}, 4, {2, 3}, {1, 3}, {0, 0, 0, 0}, {1, 1}, 0, 1, NULL},
    {{4, 16, 56, 56}, 4, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, 0, NULL},
    /* stride 1, the output the input's size: the inner rows in bands (pool_band) */
    {{2, 3, 14, 14}, 4, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 0, 0, NULL},
    {{1, 3, 7, 8}, 4, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 0, 1, NULL},
    {{1, 2, 9, 40}, 4, {3, 4}, {1, 1}, {1, 1, 1, 2}, {1, 1}, 0, 1, NULL},
    {{1, 2, 61, 70}, 4, {5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}, 0, 0, NULL},
    {{1, 2, 6, 5}, 4, {2, 3}, {1, 1}, {0, 2, 1, 0}, {1, 1}, 0, 0, NULL},
};

static void pool_case_run(const pool_case *p, kl_op op) {
  tcase t;
  char name[64];
  snprintf(name, sizeof name, "%s %lldx%lld", kl_op_name(op), (long long)p->dims[2],
           (long long)(p->rank == 4 ? p->dims[3] : 1));
  tc_init(&t, name, op, 1, 1);
  int ns = p->rank - 2;
  int64_t pads[4] = {p->pads[0], p->pads[1], p->pads[2], p->pads[3]};
  if (ns == 1) pads[1] = p->pads[1];
  tc_ints(&t, "kernel_shape", ns, p->kernel);
  tc_ints(&t, "strides", ns, p->strides);
  tc_ints(&t, "dilations", ns, p->dil);
  if (p->auto_pad) tc_string(&t, "auto_pad", p->auto_pad);
  else tc_ints(&t, "pads", 2 * ns, pads);
  tc_int(&t, "ceil_mode", p->ceil_mode);
  if (op == KL_OP_AveragePool) tc_int(&t, "count_include_pad", p->include_pad);
  tc_rand(&t, 0, KL_F32, p->rank, p->dims, -4, 4, 1e-3);
  tc_check(&t, op == KL_OP_MaxPool ? EXACT : SUMS);
}

static void test_pool(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof POOLS / sizeof POOLS[0]; i++) {
    pool_case_run(&POOLS[i], KL_OP_AveragePool);
    pool_case_run(&POOLS[i], KL_OP_MaxPool);
  }
}

/* MaxPool never lets NaN win; a window with only padding under it is -inf. */
static void test_maxpool_nan(void **state) {
  (void)state;
  int64_t dims[4] = {1, 1, 3, 4}, k[2] = {2, 2}, s[2] = {1, 1}, pads[4] = {0, 0, 0, 0};
  double v[12] = {NAN, 1, 2, NAN, 3, NAN, -1, 5, 0.5, 0.25, NAN, NAN};
  tcase t;
  tc_init(&t, "maxpool nan", KL_OP_MaxPool, 1, 1);
  tc_ints(&t, "kernel_shape", 2, k);
  tc_ints(&t, "strides", 2, s);
  tc_ints(&t, "pads", 4, pads);
  tc_values(&t, 0, KL_F32, 4, dims, v);
  tc_check(&t, EXACT);
}

static void test_global_pool(void **state) {
  (void)state;
  static const int64_t shapes[][4] = {{2, 3, 7, 7}, {1, 5, 1, 1}, {2, 4, 33, 0},
                                      {1, 2048, 7, 7}};
  for (int s = 0; s < 4; s++) {
    tcase t;
    tc_init(&t, "GlobalAveragePool", KL_OP_GlobalAveragePool, 1, 1);
    tc_rand(&t, 0, KL_F32, shapes[s][3] ? 4 : 3, shapes[s], -4, 4, 1e-3);
    tc_check(&t, SUMS);
  }
}

/* ---- BatchNormalization (inference) ---- */

/* X [dims], the parameters [C] random, var positive; run in place too. */
static void batchnorm_case(int rank, const int64_t *dims) {
  tcase t;
  char name[96];
  int len = snprintf(name, sizeof name, "BatchNormalization");
  for (int d = 0; d < rank; d++)
    len += snprintf(name + len, sizeof name - (size_t)len, "%s%lld", d ? "x" : " ",
                    (long long)dims[d]);
  tc_init(&t, name, KL_OP_BatchNormalization, 5, 1);
  tc_float(&t, "epsilon", 1e-3f);
  int64_t ch[1] = {rank >= 2 ? dims[1] : 1};
  tc_rand(&t, 0, KL_F32, rank, dims, -3, 5, 1e-3);
  tc_rand(&t, 1, KL_F32, 1, ch, -2, 2, 0.1);  /* scale */
  tc_rand(&t, 2, KL_F32, 1, ch, -1, 1, 1e-3); /* B */
  tc_rand(&t, 3, KL_F32, 1, ch, -1, 1, 1e-3); /* mean */
  tc_rand(&t, 4, KL_F32, 1, ch, 0.1, 3, 0.1); /* var */
  t.inplace = 1;
  tc_check(&t, NORM);
}

static void test_batchnorm(void **state) {
  (void)state;
  static const int64_t chans[] = {1, 3, 17, 33}, spatial[] = {1, 7, 13}, batch[] = {1, 3};
  for (int b = 0; b < 2; b++) {
    int64_t d1[1] = {batch[b] * 7};
    batchnorm_case(1, d1);
    for (int c = 0; c < 4; c++) {
      int64_t d2[2] = {batch[b], chans[c]};
      batchnorm_case(2, d2);
      for (int s = 0; s < 3; s++) {
        int64_t sp = spatial[s];
        int64_t d3[3] = {batch[b], chans[c], sp}, d4[4] = {batch[b], chans[c], sp, sp};
        int64_t d5[5] = {batch[b], chans[c], sp, 2, sp};
        batchnorm_case(3, d3);
        batchnorm_case(4, d4);
        batchnorm_case(5, d5);
      }
    }
  }
  /* rows longer than a task, many channels per short row, more than a block of them */
  int64_t big[4] = {2, 64, 56, 56}, wide[2] = {3, 2100}, tall[3] = {5, 1500, 3};
  int64_t longrow[3] = {1, 3, 40000};
  batchnorm_case(4, big);
  batchnorm_case(2, wide);
  batchnorm_case(3, tall);
  batchnorm_case(3, longrow);
}

/* Training mode and non-float32 parameters are left to the reference. */
static void test_batchnorm_selection(void **state) {
  (void)state;
  kl_isa top = kl_isa_supported(kl_isa_features());
  tcase t;
  tc_init(&t, "BatchNormalization select", KL_OP_BatchNormalization, 5, 1);
  kl_type x = {.dtype = KL_F32, .rank = 2}, p = {.dtype = KL_F32, .rank = 1};
  x.dims[0].size = 4;
  x.dims[1].size = 8;
  p.dims[0].size = 8;
  const kl_type *tp[5] = {&x, &p, &p, &p, &p};
  assert_non_null(kl_cpu_isa_kernel(tc_node(&t), tp, 5, top).run);
  kl_type p16 = p;
  p16.dtype = KL_F16;
  tp[4] = &p16;
  assert_null(kl_cpu_isa_kernel(tc_node(&t), tp, 5, top).run);
  tp[4] = &p;
  tc_int(&t, "training_mode", 1);
  assert_null(kl_cpu_isa_kernel(tc_node(&t), tp, 5, top).run);
  tc_free(&t);
}

/* ---- data movement ---- */

typedef struct perm_case {
  int rank;
  int64_t dims[4], perm[4];
  bool given;
} perm_case;

static const perm_case PERMS[] = {
    {4, {2, 3, 5, 7}, {0, 2, 3, 1}, true},   {4, {2, 3, 5, 7}, {0, 3, 1, 2}, true},
    {2, {17, 33}, {1, 0}, true},             {2, {1023, 7}, {1, 0}, true},
    {2, {64, 64}, {1, 0}, true},             {2, {300, 500}, {1, 0}, true},
    {3, {2, 3, 4}, {0}, false},              {4, {2, 5, 3, 16}, {0, 2, 1, 3}, true},
    {3, {4, 5, 6}, {2, 0, 1}, true},         {4, {1, 7, 1, 9}, {3, 1, 2, 0}, true},
    {3, {3, 4, 5}, {0, 1, 2}, true},         {4, {1, 64, 56, 56}, {0, 2, 3, 1}, true},
    {4, {2, 128, 12, 64}, {0, 2, 1, 3}, true}, {2, {1, 1}, {1, 0}, true},
};

static void test_transpose(void **state) {
  (void)state;
  const kl_dtype dts[] = {KL_F32, KL_U8, KL_BF16, KL_I64};
  for (size_t p = 0; p < sizeof PERMS / sizeof PERMS[0]; p++)
    for (int d = 0; d < 4; d++) {
      tcase t;
      tc_init(&t, "Transpose", KL_OP_Transpose, 1, 1);
      if (PERMS[p].given) tc_ints(&t, "perm", PERMS[p].rank, PERMS[p].perm);
      tc_rand(&t, 0, dts[d], PERMS[p].rank, PERMS[p].dims, 1, 250, 0);
      tc_check(&t, EXACT);
    }
}

static void test_concat(void **state) {
  (void)state;
  static const int64_t shapes[][3][3] = {
      {{2, 3, 5}, {2, 4, 5}, {2, 1, 5}}, {{3, 7, 2}, {3, 7, 9}, {3, 7, 1}},
      {{1, 5, 7}, {4, 5, 7}, {2, 5, 7}}, {{1, 300, 300}, {1, 300, 300}, {1, 1, 300}}};
  static const int axes[] = {1, -1, 0, 1};
  const kl_dtype dts[] = {KL_F32, KL_U8, KL_I64};
  for (int s = 0; s < 4; s++)
    for (int d = 0; d < 3; d++) {
      tcase t;
      tc_init(&t, "Concat", KL_OP_Concat, 3, 1);
      tc_int(&t, "axis", axes[s]);
      for (int i = 0; i < 3; i++) tc_rand(&t, i, dts[d], 3, shapes[s][i], 1, 120, 0);
      tc_check(&t, EXACT);
    }
  int64_t big[1] = {300000}, small[1] = {5};
  tcase t;
  tc_init(&t, "Concat long", KL_OP_Concat, 2, 1);
  tc_int(&t, "axis", 0);
  tc_rand(&t, 0, KL_F32, 1, big, -1, 1, 1e-3);
  tc_rand(&t, 1, KL_F32, 1, small, -1, 1, 1e-3);
  tc_check(&t, EXACT);
}

typedef struct slice_case {
  int rank;
  int64_t dims[5];
  int n;                    /* entries of starts, ends, axes, steps */
  int64_t starts[3], ends[3], axes[3], steps[3];
  bool has_axes, has_steps;
} slice_case;

static const slice_case SLICES[] = {
    {4, {1, 116, 28, 28}, 1, {0}, {58}, {1}, {1}, true, false},         /* channel half */
    {4, {1, 116, 28, 28}, 1, {58}, {116}, {1}, {1}, true, true},
    {4, {3, 17, 7, 13}, 1, {2}, {15}, {1}, {1}, true, true},            /* per batch */
    {3, {3, 17, 33}, 1, {1}, {32}, {-1}, {2}, true, true},              /* strided last */
    {3, {3, 17, 33}, 2, {16, 30}, {0, 2}, {1, 2}, {-3, -5}, true, true}, /* backwards */
    {2, {7, 13}, 2, {-100, 5}, {100, INT64_MAX}, {0, 1}, {1, 1}, true, true}, /* clamped */
    {5, {3, 4, 5, 6, 7}, 3, {1, 0, 2}, {3, 6, 4}, {1, 3, 4}, {1, 2, 1}, true, true},
    {3, {1, 7, 1}, 1, {3}, {4}, {1}, {1}, true, true},                  /* one element */
    {2, {5, 9}, 1, {1}, {4}, {0}, {INT64_MAX}, true, true},             /* huge step */
    {2, {5, 9}, 2, {0, 0}, {5, 9}, {0}, {1}, false, false},             /* no axes: all */
    {1, {100000}, 1, {7}, {99990}, {0}, {1}, true, true},               /* one long run */
    {3, {2, 70000, 2}, 1, {1}, {69999}, {1}, {1}, true, true},          /* long rows */
    {2, {5, 9}, 1, {3}, {3}, {1}, {1}, true, true},                     /* empty */
};

static void test_slice(void **state) {
  (void)state;
  const kl_dtype dts[] = {KL_F32, KL_U8, KL_BF16, KL_I64};
  for (size_t s = 0; s < sizeof SLICES / sizeof SLICES[0]; s++)
    for (int d = 0; d < 4; d++) {
      const slice_case *sc = &SLICES[s];
      tcase t;
      int n_in = sc->has_steps ? 5 : sc->has_axes ? 4 : 3;
      tc_init(&t, "Slice", KL_OP_Slice, n_in, 1);
      tc_rand(&t, 0, dts[d], sc->rank, sc->dims, 1, 250, 0);
      int64_t nd[1] = {sc->n};
      const int64_t *lists[4] = {sc->starts, sc->ends, sc->axes, sc->steps};
      for (int i = 1; i < n_in; i++) { /* stored as is: INT64_MAX has no exact double */
        tc_shape(&t.in[i], KL_I64, 1, nd);
        t.in[i].data = buffer(&t, KL_I64, sc->n, &t.mem[i]);
        memcpy(t.in[i].data, lists[i - 1], (size_t)sc->n * sizeof(int64_t));
      }
      tc_check(&t, EXACT);
    }
}

typedef struct pad_case {
  int rank;
  int64_t dims[5];
  int n;                        /* dims padded: pads has 2n values */
  int64_t pads[10], axes[5];
  bool has_axes, value;         /* axes input; a non-zero constant */
} pad_case;

static const pad_case PADS[] = {
    {4, {1, 14, 14, 8}, 4, {0, 0, 0, 0, 0, 0, 0, 0}, {0}, false, false}, /* none: a copy */
    {4, {1, 7, 9, 3}, 4, {0, 1, 2, 0, 0, 3, 1, 0}, {0}, false, false},   /* H and W */
    {4, {2, 3, 5, 7}, 4, {0, 0, 1, 2, 0, 0, 3, 1}, {0}, false, true},    /* spatial, value */
    {3, {3, 17, 33}, 3, {1, -2, 0, 0, 3, -5}, {0}, false, true},          /* crops */
    {2, {5, 9}, 1, {4, -3}, {-1}, true, false},                          /* axes, last dim */
    {2, {5, 9}, 1, {-2, 3}, {0}, true, true},                            /* first dim only */
    {1, {1023}, 1, {17, 33}, {0}, false, true},
    {5, {2, 3, 4, 5, 6}, 2, {1, 1, 2, 0}, {1, 3}, true, false},
    {3, {2, 4, 6}, 3, {0, 0, -3, 0, 0, -3}, {0}, false, false},          /* crops to empty */
    {3, {2, 3, 4}, 3, {1, 0, 1, 1, 0, 0}, {0}, false, true},             /* constant rows */
    {3, {2, 40000, 3}, 3, {0, 1, 0, 0, 1, 0}, {0}, false, false},        /* long rows */
};

static void test_pad(void **state) {
  (void)state;
  const kl_dtype dts[] = {KL_F32, KL_U8, KL_BF16, KL_I64};
  for (size_t s = 0; s < sizeof PADS / sizeof PADS[0]; s++)
    for (int d = 0; d < 4; d++) {
      const pad_case *pc = &PADS[s];
      tcase t;
      tc_init(&t, "Pad", KL_OP_Pad, pc->has_axes ? 4 : pc->value ? 3 : 2, 1);
      tc_rand(&t, 0, dts[d], pc->rank, pc->dims, 1, 250, 0);
      int64_t np[1] = {2 * pc->n}, na[1] = {pc->n};
      double v[10];
      for (int k = 0; k < 2 * pc->n; k++) v[k] = (double)pc->pads[k];
      tc_values(&t, 1, KL_I64, 1, np, v);
      if (pc->value) {
        double cv[1] = {dts[d] == KL_U8 ? 7 : -7.5};
        tc_values(&t, 2, dts[d], 0, NULL, cv);
      }
      if (pc->has_axes) {
        for (int k = 0; k < pc->n; k++) v[k] = (double)pc->axes[k];
        tc_values(&t, 3, KL_I64, 1, na, v);
      }
      tc_check(&t, EXACT);
    }
  /* the other modes are the reference's */
  tcase t;
  tc_init(&t, "Pad reflect", KL_OP_Pad, 2, 1);
  tc_string(&t, "mode", "reflect");
  kl_type x = {.dtype = KL_F32, .rank = 1}, p = {.dtype = KL_I64, .rank = 1};
  x.dims[0].size = 8;
  p.dims[0].size = 2;
  const kl_type *tp[2] = {&x, &p};
  assert_null(kl_cpu_isa_kernel(tc_node(&t), tp, 2, kl_isa_supported(kl_isa_features())).run);
  tc_free(&t);
}

/* ---- selection ---- */

static kl_cpu_kernel select_for(kl_op op, kl_dtype dt, int n_in, int n_out, kl_isa isa) {
  tcase t;
  tc_init(&t, "select", op, n_in, n_out);
  kl_type ty = {.dtype = dt, .rank = 2};
  ty.dims[0].size = 4;
  ty.dims[1].size = 8;
  const kl_type *tp[MAX_IO];
  for (int i = 0; i < n_in; i++) tp[i] = &ty;
  kl_cpu_kernel k = kl_cpu_isa_kernel(tc_node(&t), tp, n_in, isa);
  tc_free(&t);
  return k;
}

static void test_selection(void **state) {
  (void)state;
  kl_isa top = kl_isa_supported(kl_isa_features());
  assert_non_null(select_for(KL_OP_Add, KL_F32, 2, 1, top).run);
  assert_null(select_for(KL_OP_Add, KL_I32, 2, 1, top).run);     /* integers: reference */
  assert_null(select_for(KL_OP_Relu, KL_F64, 1, 1, top).run);
  assert_null(select_for(KL_OP_Add, KL_F16, 2, 1, top).run);
  assert_null(select_for(KL_OP_Conv, KL_F32, 2, 1, top).run);    /* oneDNN's or the reference's */
  assert_null(select_for(KL_OP_MaxPool, KL_F32, 1, 2, top).run); /* Indices: reference */
  assert_null(select_for(KL_OP_Add, KL_UNDEFINED, 2, 1, top).run);
  assert_non_null(select_for(KL_OP_Transpose, KL_I64, 1, 1, KL_ISA_GENERIC).run);
  assert_null(select_for(KL_OP_Transpose, KL_STRING, 1, 1, KL_ISA_GENERIC).run);
  assert_null(select_for(KL_OP_Add, KL_BF16, 2, 1, KL_ISA_AVX512).run);
  kl_cpu_kernel k = select_for(KL_OP_Add, KL_BF16, 2, 1, KL_ISA_AMX);
  assert_non_null(k.run); /* AMX runs the AVX512_BF16 kernels (kiln has no matrix work) */
  assert_string_equal(k.name, "avx512_bf16");
  const kl_op none_inplace[] = {KL_OP_Transpose, KL_OP_Concat, KL_OP_MaxPool,
                                 KL_OP_ReduceSum, KL_OP_GlobalAveragePool, KL_OP_Conv};
  for (size_t i = 0; i < sizeof none_inplace / sizeof none_inplace[0]; i++) {
    kl_node n = {.op = none_inplace[i]};
    assert_int_equal(kl_cpu_isa_inplace(&n), 0);
  }
  tcase t;
  tc_init(&t, "absent input", KL_OP_Relu, 1, 1);
  const kl_type *none[1] = {NULL};
  assert_null(kl_cpu_isa_kernel(tc_node(&t), none, 1, top).run);
  tc_free(&t);
}

/* ---- accuracy of the approximations, against libm in double ---- */

static double gelu_exact(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double gelu_tanh_exact(double x) {
  double u = sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x);
  return x / (1.0 + exp(-2.0 * u)); /* x (1 + tanh u) / 2 without cancellation */
}
static double sigmoid_exact(double x) { return 1.0 / (1.0 + exp(-x)); }
static double swish_exact(double x) { return x / (1.0 + exp(-x)); } /* Swish's alpha 1: Silu */

typedef struct sweep {
  kl_op op;
  bool tanh_form;
  double lo, hi, bound;
  double (*exact)(double);
} sweep;

/* The largest relative error of op's kernel at level isa over n points of [lo, hi],
 * where the exact result is a normal float. */
static double max_rel_error(const sweep *s, kl_isa isa, int64_t n) {
  tcase t;
  tc_init(&t, "sweep", s->op, 1, 1);
  if (s->tanh_form) tc_string(&t, "approximate", "tanh");
  tc_shape(&t.in[0], KL_F32, 1, &n);
  float *x = buffer(&t, KL_F32, n, &t.mem[0]), *y = malloc((size_t)n * sizeof *y);
  assert_non_null(y);
  t.in[0].data = x;
  for (int64_t i = 0; i < n; i++) x[i] = (float)(s->lo + (s->hi - s->lo) * (double)i / (double)(n - 1));
  kl_type ty;
  type_of(&ty, &t.in[0]);
  const kl_type *tp[1] = {&ty};
  kl_cpu_kernel k = kl_cpu_isa_kernel(tc_node(&t), tp, 1, isa);
  kl_tensor out = t.in[0];
  out.data = y;
  const kl_tensor *in[1] = {&t.in[0]};
  run(&t, k.run, in, &out, 1);
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double want = s->exact(x[i]);
    if (fabs(want) < 1.2e-38 || fabs(want) > 3.4e38) continue;
    double err = fabs((double)y[i] - want) / fabs(want);
    if (err > worst) worst = err;
  }
  free(y);
  tc_free(&t);
  return worst;
}

static void test_accuracy(void **state) {
  (void)state;
  const sweep sweeps[] = {
      {KL_OP_Exp, false, -87.3, 88.7, 1e-6, exp},
      {KL_OP_Tanh, false, -9, 9, 1e-6, tanh},
      {KL_OP_Erf, false, -4, 4, 1e-6, erf},
      {KL_OP_Sigmoid, false, -87, 87, 1e-6, sigmoid_exact},
      {KL_OP_Swish, false, -87, 87, 1e-6, swish_exact},
      {KL_OP_Gelu, false, -13, 8, 2e-6, gelu_exact},
      /* x sigmoid(v), v = x (G1 + G3 x^2) rounded to float: its relative error,
       * about 1e-7, becomes |v| times that in e^-|v|, so below x = -5 (|v| = 17) the
       * tanh form, like any float one, loses digits; it is then under 3e-7 |x| */
      {KL_OP_Gelu, true, -5, 8, 2.5e-6, gelu_tanh_exact},
  };
  kl_isa top = kl_isa_supported(kl_isa_features());
  for (size_t i = 0; i < sizeof sweeps / sizeof sweeps[0]; i++)
    for (int isa = 0; isa <= (int)top && isa <= KL_ISA_AVX512; isa++) {
      double e = max_rel_error(&sweeps[i], (kl_isa)isa, 400001);
      print_message("%-8s%s at %-7s max relative error %.2e\n", kl_op_name(sweeps[i].op),
                    sweeps[i].tanh_form ? "(tanh)" : "      ", kl_isa_level_name((kl_isa)isa), e);
      if (e > sweeps[i].bound)
        fail_msg("%s at %s: relative error %.3g over %.3g", kl_op_name(sweeps[i].op),
                 kl_isa_level_name((kl_isa)isa), e, sweeps[i].bound);
    }
}

/* ---- the level choice ---- */

static kl_cpu_features features_up_to(kl_isa level) {
  kl_cpu_features f;
  memset(&f, 0, sizeof f);
  f.avx = f.os_avx = level >= KL_ISA_AVX2;
  f.avx2 = f.fma = level >= KL_ISA_AVX2;
  f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = f.os_avx512 = level >= KL_ISA_AVX512;
  f.avx512_bf16 = level >= KL_ISA_AVX512_BF16;
  f.amx_tile = f.amx_bf16 = f.amx_int8 = f.os_amx = f.amx_permitted = level >= KL_ISA_AMX;
  return f;
}

static void test_choose(void **state) {
  (void)state;
  char why[256];
  for (int hw = 0; hw < KL_ISA_COUNT; hw++) {
    kl_cpu_features f = features_up_to((kl_isa)hw);
    assert_int_equal(kl_isa_supported(&f), hw);
    assert_int_equal(kl_isa_choose(&f, NULL, why, sizeof why), hw);
    assert_true(strlen(why) > 0);
    for (int cap = 0; cap < KL_ISA_COUNT; cap++) { /* lowers, never raises */
      kl_isa got = kl_isa_choose(&f, kl_isa_level_name((kl_isa)cap), why, sizeof why);
      assert_int_equal(got, cap < hw ? cap : hw);
      if (cap < hw) assert_non_null(strstr(why, "lowers"));
      if (cap > hw) assert_non_null(strstr(why, "cannot raise"));
    }
    assert_int_equal(kl_isa_choose(&f, "avx9000", why, sizeof why), hw);
    assert_non_null(strstr(why, "ignored"));
  }
  kl_cpu_features f = features_up_to(KL_ISA_AMX);
  f.os_avx512 = false; /* AVX-512 on the CPU, but the OS does not save its registers */
  assert_int_equal(kl_isa_supported(&f), KL_ISA_AVX2);
  kl_isa_choose(&f, NULL, why, sizeof why);
  assert_non_null(strstr(why, "OS"));
  f = features_up_to(KL_ISA_AMX);
  f.amx_permitted = false; /* Linux refused tile data */
  assert_int_equal(kl_isa_supported(&f), KL_ISA_AVX512_BF16);
  kl_isa_choose(&f, NULL, why, sizeof why);
  assert_non_null(strstr(why, "permission"));
  /* KILN_ISA below amx: the permission is not asked, and the CPU's level is still amx */
  kl_isa_choose(&f, "avx2", why, sizeof why);
  assert_string_equal(why, "KILN_ISA=avx2 lowers it from amx");
}

static void test_names(void **state) {
  (void)state;
  for (int i = 0; i < KL_ISA_COUNT; i++) {
    kl_isa got;
    assert_true(kl_isa_parse(kl_isa_level_name((kl_isa)i), &got));
    assert_int_equal(got, i);
  }
  kl_isa got = KL_ISA_AVX2;
  assert_false(kl_isa_parse("AVX2", &got));
  assert_false(kl_isa_parse("", &got));
  assert_false(kl_isa_parse(NULL, &got));
  assert_int_equal(got, KL_ISA_AVX2);
  assert_string_equal(kl_isa_level_name(KL_ISA_COUNT), "?");
  char buf[512];
  kl_cpu_features f = features_up_to(KL_ISA_AVX512);
  assert_string_equal(kl_isa_feature_list(&f, buf, sizeof buf),
                      "avx avx2 fma avx512f avx512bw avx512dq avx512vl os:avx os:avx512");
  kl_isa_feature_list(&f, buf, 12); /* cut to the buffer, still a string */
  assert_true(strlen(buf) < 12);
}

/* The process's level is what kl_isa_choose makes of this CPU and KILN_ISA, and the
 * same on every call. */
static void test_process_level(void **state) {
  (void)state;
  const kl_cpu_features *f = kl_isa_features();
  char why[256];
  kl_isa want = kl_isa_choose(f, getenv("KILN_ISA"), why, sizeof why);
  assert_int_equal(kl_isa_level(), want);
  assert_int_equal(kl_isa_level(), kl_isa_level());
  assert_non_null(strstr(kl_isa_reason(), kl_isa_level_name(want)));
  assert_true(kl_isa_level() <= kl_isa_supported(f));
#if defined(__x86_64__)
  assert_true(strlen(f->vendor) == 12);
  assert_true(f->avx2 || !f->avx512f); /* no CPU has AVX-512 without AVX2 */
#endif
  print_message("cpu: %s (%s); level %s\n", f->brand, f->vendor, kl_isa_reason());
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_choose),
      cmocka_unit_test(test_process_level),
      cmocka_unit_test(test_selection),
      cmocka_unit_test(test_accuracy),
      cmocka_unit_test(test_activations),
      cmocka_unit_test(test_activation_special_values),
      cmocka_unit_test(test_relu_nan),
      cmocka_unit_test(test_clip),
      cmocka_unit_test(test_binary),
      cmocka_unit_test(test_select),
      cmocka_unit_test(test_quantize),
      cmocka_unit_test(test_roi_align),
      cmocka_unit_test(test_scatter_elements),
      cmocka_unit_test(test_expand),
      cmocka_unit_test(test_constant_of_shape),
      cmocka_unit_test(test_gather),
      cmocka_unit_test(test_split),
      cmocka_unit_test(test_gather_nd),
      cmocka_unit_test(test_gather_elements),
      cmocka_unit_test(test_index_session),
      cmocka_unit_test(test_compare),
      cmocka_unit_test(test_resize),
      cmocka_unit_test(test_minmax),
      cmocka_unit_test(test_non_zero),
      cmocka_unit_test(test_topk),
      cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_softmax_other_axis),
      cmocka_unit_test(test_norms),
      cmocka_unit_test(test_skip_norm),
      cmocka_unit_test(test_instance_norm),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_reduce_long),
      cmocka_unit_test(test_pool),
      cmocka_unit_test(test_maxpool_nan),
      cmocka_unit_test(test_global_pool),
      cmocka_unit_test(test_transpose),
      cmocka_unit_test(test_concat),
      cmocka_unit_test(test_batchnorm),
      cmocka_unit_test(test_batchnorm_selection),
      cmocka_unit_test(test_slice),
      cmocka_unit_test(test_pad),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
