/* The data ops (slicing, padding, indexing, resampling; ops.def's "data" section):
 * shape inference with symbolic and unknown dims and its errors, the reference
 * kernels on small inputs whose expected outputs were computed with NumPy, ONNX's
 * reference evaluator or onnxruntime (pasted as literals, or worked by hand where
 * noted), and the importer's rewrites of the ops' older forms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "import/onnx.h"
#include "ir/infer_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define assert_contains(hay, needle)                                                   \
  do {                                                                                 \
    const char *hay_ = (hay), *needle_ = (needle);                                     \
    if (!strstr(hay_, needle_)) fail_msg("\"%s\" does not contain \"%s\"", hay_, needle_); \
  } while (0)

#define LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- a node to run inference and kernels on ---- */

/* A graph holding one node of `op` with n_in inputs and n_out outputs. */
static kl_graph *one_node(kl_op op, int n_in, int n_out) {
  kl_graph *g = kl_graph_new();
  kl_err e = {0};
  int in[8], out[8];
  assert_non_null(g);
  for (int i = 0; i < n_in; i++) assert_true((in[i] = kl_graph_add_value(g, NULL, &e)) >= 0);
  for (int i = 0; i < n_out; i++) assert_true((out[i] = kl_graph_add_value(g, NULL, &e)) >= 0);
  assert_int_equal(kl_graph_add_node(g, op, "n", n_in, in, n_out, out, &e), 0);
  return g;
}

static void set_int(kl_graph *g, const char *name, int64_t v) {
  kl_err e = {0};
  assert_int_equal(kl_node_set_int(g, 0, name, v, &e), KILN_OK);
}

static void set_ints(kl_graph *g, const char *name, const int64_t *v, int n) {
  kl_err e = {0};
  assert_int_equal(kl_node_set_ints(g, 0, name, v, n, &e), KILN_OK);
}

static void set_string(kl_graph *g, const char *name, const char *v) {
  kl_err e = {0};
  assert_int_equal(kl_node_set_string(g, 0, name, v, &e), KILN_OK);
}

/* A type; dims of -1 are unknown. */
static kl_type ty(kl_dtype dt, int rank, const int64_t *dims) {
  kl_type t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rank = rank;
  for (int i = 0; i < rank; i++) t.dims[i] = (kl_dim){dims[i], -1};
  return t;
}

/* Inference on node 0 with types in[] (NULL: absent) and contents data[] (NULL: not
 * known); e receives the message. */
static kiln_status infer(kl_graph *g, const kl_type *const *in, const void *const *data,
                         kl_type *out, kl_err *e) {
  const kl_node *n = &g->nodes[0];
  for (int k = 0; k < n->n_out; k++) kl_type_unknown(&out[k], KL_UNDEFINED);
  kl_infer_ctx c = {g, n, n->n_in, n->n_out, in, data, out, e};
  return (kiln_status)kl_op_get(n->op)->infer(&c);
}

/* A concrete input for run(): dtype 0 marks an absent one. */
typedef struct tin {
  kl_dtype dt;
  int rank;
  int64_t dims[KL_MAX_RANK];
  const void *data;
} tin;

/* What run() produced: outputs allocated with malloc. */
typedef struct touts {
  int n;
  kl_tensor t[4];
} touts;

static void touts_free(touts *o) {
  for (int k = 0; k < o->n; k++) free(o->t[k].data);
  o->n = 0;
}

/* Runs node 0 as the runtime does: inference with every input's data, outputs sized
 * from it, then the reference kernel. */
static kiln_status run(kl_graph *g, const tin *ins, touts *o, kl_err *e) {
  const kl_node *n = &g->nodes[0];
  kl_type types[8], ot[4];
  const kl_type *tp[8];
  const void *dp[8];
  kl_tensor kin[8];
  const kl_tensor *kp[8];
  kl_tensor *kout[4];
  for (int i = 0; i < n->n_in; i++) {
    bool present = ins[i].dt != KL_UNDEFINED;
    types[i] = ty(ins[i].dt, ins[i].rank, ins[i].dims);
    kin[i] = (kl_tensor){ins[i].dt, ins[i].rank, {0}, (void *)ins[i].data};
    memcpy(kin[i].dims, ins[i].dims, sizeof kin[i].dims);
    tp[i] = present ? &types[i] : NULL;
    dp[i] = present ? ins[i].data : NULL;
    kp[i] = present ? &kin[i] : NULL;
  }
  memset(o, 0, sizeof *o);
  kiln_status st = infer(g, tp, dp, ot, e);
  if (st != KILN_OK) return st;
  o->n = n->n_out;
  for (int k = 0; k < n->n_out; k++) {
    int64_t numel;
    assert_true(kl_type_is_concrete(&ot[k]) && kl_type_numel(&ot[k], &numel));
    o->t[k].dtype = ot[k].dtype;
    o->t[k].rank = ot[k].rank;
    for (int d = 0; d < ot[k].rank; d++) o->t[k].dims[d] = ot[k].dims[d].size;
    o->t[k].data = calloc((size_t)(numel ? numel : 1), kl_dtype_size(ot[k].dtype));
    assert_non_null(o->t[k].data);
    kout[k] = &o->t[k];
  }
  kl_kernel_ctx kc = {n, n->n_in, n->n_out, kp, kout, e, 1, NULL};
  return (kiln_status)kl_op_get(n->op)->ref(&kc);
}

static void assert_dims(const kl_tensor *t, int rank, const int64_t *dims) {
  assert_int_equal(t->rank, rank);
  for (int d = 0; d < rank; d++) assert_int_equal(t->dims[d], dims[d]);
}

static void assert_f32(const kl_tensor *t, const float *want, int n, float tol) {
  assert_int_equal(t->dtype, KL_F32);
  assert_int_equal(kl_tensor_numel(t), n);
  for (int i = 0; i < n; i++)
    if (fabsf(((const float *)t->data)[i] - want[i]) > tol)
      fail_msg("element %d is %g, expected %g", i, ((const float *)t->data)[i], want[i]);
}

static void assert_i64(const kl_tensor *t, const int64_t *want, int n) {
  assert_int_equal(t->dtype, KL_I64);
  assert_int_equal(kl_tensor_numel(t), n);
  for (int i = 0; i < n; i++) assert_int_equal(((const int64_t *)t->data)[i], want[i]);
}

/* ---- Slice ---- */

static void test_slice_infer(void **state) {
  (void)state;
  kl_graph *g = one_node(KL_OP_Slice, 5, 1);
  int batch = kl_graph_symbol(g, "batch");
  kl_type x = ty(KL_F32, 3, (int64_t[]){-1, 10, 6}), out[1];
  x.dims[0].sym = batch;
  kl_type t2 = ty(KL_I64, 1, (int64_t[]){2});
  const int64_t starts[] = {0, -4}, ends[] = {INT64_MAX, 1}, axes[] = {0, -1},
                steps[] = {1, -2};
  const kl_type *in[5] = {&x, &t2, &t2, &t2, &t2};
  const void *data[5] = {NULL, starts, ends, axes, steps};
  kl_err e = {0};
  /* [0:INT64_MAX] keeps the symbol; in dim 2 (of 6) -4 is index 2, and walking back by 2
   * to index 1 (exclusive) takes one element */
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].rank, 3);
  assert_int_equal(out[0].dims[0].sym, batch);
  assert_int_equal(out[0].dims[1].size, 10);
  assert_int_equal(out[0].dims[2].size, 1);

  /* starts not known: only the dims that axes name become unknown */
  data[1] = NULL;
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].dims[0].size, -1);
  assert_int_equal(out[0].dims[1].size, 10);
  assert_int_equal(out[0].dims[2].size, -1);

  /* errors: a zero step, an axis twice, lists of different lengths */
  data[1] = starts;
  const int64_t zero_step[] = {1, 0}, twice[] = {2, -1};
  data[4] = zero_step;
  assert_int_equal(infer(g, in, data, out, &e), KILN_ERR_SHAPE);
  assert_contains(e.msg, "steps[1] is 0");
  kl_err_clear(&e);
  data[4] = steps;
  data[3] = twice;
  assert_int_equal(infer(g, in, data, out, &e), KILN_ERR_SHAPE);
  assert_contains(e.msg, "twice");
  kl_err_clear(&e);
  kl_type t1 = ty(KL_I64, 1, (int64_t[]){1});
  data[3] = axes;
  in[2] = &t1;
  data[2] = ends;
  assert_int_equal(infer(g, in, data, out, &e), KILN_ERR_SHAPE);
  assert_contains(e.msg, "expected 2 like starts");
  kl_graph_free(g);
}

static void test_slice_kernel(void **state) {
  (void)state;
  /* y = x[:, 2:0:-1, -1:-100:-2] (NumPy) */
  static const float x[] = {8, 2, 3, 8, 1, 5, 6, -5, -8, -4, -4, 7,
                            8, -9, 0, 6, -7, 6, -7, -1, 6, -4, -3, -4};
  static const float want[] = {7, -4, -5, 5, -4, -4, -1, 6};
  const int64_t starts[] = {2, -1}, ends[] = {0, -100}, axes[] = {1, 2}, steps[] = {-1, -2};
  kl_graph *g = one_node(KL_OP_Slice, 5, 1);
  tin ins[5] = {{KL_F32, 3, {2, 3, 4}, x}, {KL_I64, 1, {2}, starts}, {KL_I64, 1, {2}, ends},
                {KL_I64, 1, {2}, axes}, {KL_I64, 1, {2}, steps}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 3, (int64_t[]){2, 2, 2});
  assert_f32(&o.t[0], want, LEN(want), 0);
  touts_free(&o);
  kl_graph_free(g);
}

/* ---- Pad ---- */

static void test_pad_infer(void **state) {
  (void)state;
  kl_graph *g = one_node(KL_OP_Pad, 4, 1);
  int seq = kl_graph_symbol(g, "seq");
  kl_type x = ty(KL_F32, 3, (int64_t[]){2, -1, 5}), out[1];
  x.dims[1].sym = seq;
  kl_type tp = ty(KL_I64, 1, (int64_t[]){4}), ta = ty(KL_I64, 1, (int64_t[]){2});
  const int64_t pads[] = {1, -2, 3, 0}, axes[] = {0, -1};
  const kl_type *in[4] = {&x, &tp, NULL, &ta};
  const void *data[4] = {NULL, pads, NULL, axes};
  kl_err e = {0};
  /* dims 0 and 2 padded (2 + 1 + 3, 5 - 2 + 0); the symbolic dim is untouched */
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].dims[0].size, 6);
  assert_int_equal(out[0].dims[1].sym, seq);
  assert_int_equal(out[0].dims[2].size, 3);

  /* pads not known: the dims axes does not name keep theirs */
  data[1] = NULL;
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].dims[0].size, -1);
  assert_int_equal(out[0].dims[1].sym, seq);
  assert_int_equal(out[0].dims[2].size, -1);

  /* cropping more than a dim holds; reflecting an emptied dim; the wrong pads count */
  const int64_t crop[] = {-2, 0, -1, 0};
  data[1] = crop;
  assert_int_equal(infer(g, in, data, out, &e), KILN_ERR_SHAPE);
  assert_contains(e.msg, "crop more than");
  kl_err_clear(&e);
  const int64_t empty_then_pad[] = {0, -5, 0, 1};
  set_string(g, "mode", "reflect");
  data[1] = empty_then_pad;
  assert_int_equal(infer(g, in, data, out, &e), KILN_ERR_SHAPE);
  assert_contains(e.msg, "cannot pad an empty dim in reflect mode");
  kl_err_clear(&e);
  in[3] = NULL;
  data[1] = pads;
  assert_int_equal(infer(g, in, data, out, &e), KILN_ERR_SHAPE);
  assert_contains(e.msg, "expected 6");
  kl_err_clear(&e);
  set_string(g, "mode", "mirror");
  assert_int_equal(infer(g, in, data, out, &e), KILN_ERR_INVALID_MODEL);
  kl_graph_free(g);
}

/* Reflect, edge and wrap with cropping pads, against onnxruntime. */
static void test_pad_modes(void **state) {
  (void)state;
  static const int32_t x[] = {4, -5, 9, -1, 0, 0, 2, 1, 0, 9, 6, 6};
  static const struct {
    const char *mode;
    int64_t pads[4], dims[2];
    int32_t want[42];
  } cases[] = {
      {"reflect", {1, -1, 2, 1}, {6, 4},
       {0, 2, 1, 2, -5, 9, -1, 9, 0, 2, 1, 2, 9, 6, 6, 6, 0, 2, 1, 2, -5, 9, -1, 9}},
      {"edge", {0, 2, 1, -2}, {4, 4}, {4, 4, 4, -5, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 9}},
      {"wrap", {2, 3, 1, 0}, {6, 7},
       {0, 2, 1, 0, 0, 2, 1, 9, 6, 6, 0, 9, 6, 6, -5, 9, -1, 4, -5, 9, -1,
        0, 2, 1, 0, 0, 2, 1, 9, 6, 6, 0, 9, 6, 6, -5, 9, -1, 4, -5, 9, -1}},
  };
  for (int k = 0; k < LEN(cases); k++) {
    kl_graph *g = one_node(KL_OP_Pad, 2, 1);
    set_string(g, "mode", cases[k].mode);
    tin ins[2] = {{KL_I32, 2, {3, 4}, x}, {KL_I64, 1, {4}, cases[k].pads}};
    touts o;
    kl_err e = {0};
    assert_int_equal(run(g, ins, &o, &e), KILN_OK);
    assert_dims(&o.t[0], 2, cases[k].dims);
    int64_t n = kl_tensor_numel(&o.t[0]);
    for (int64_t i = 0; i < n; i++)
      assert_int_equal(((const int32_t *)o.t[0].data)[i], cases[k].want[i]);
    touts_free(&o);
    kl_graph_free(g);
  }
}

static void test_pad_constant_value(void **state) {
  (void)state;
  /* by hand: [[1.5, 2.5]] padded by one column each side with -7 */
  static const float x[] = {1.5f, 2.5f}, value = -7, want[] = {-7, 1.5f, 2.5f, -7};
  static const int64_t pads[] = {0, 1, 0, 1};
  kl_graph *g = one_node(KL_OP_Pad, 3, 1);
  tin ins[3] = {{KL_F32, 2, {1, 2}, x}, {KL_I64, 1, {4}, pads}, {KL_F32, 0, {0}, &value}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_f32(&o.t[0], want, 4, 0);
  touts_free(&o);
  /* the value must have the data's dtype */
  static const double wrong = 1;
  ins[2] = (tin){KL_F64, 0, {0}, &wrong};
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_DTYPE);
  kl_graph_free(g);
}

/* ---- Expand, Tile, CenterCropPad ---- */

static void test_expand(void **state) {
  (void)state;
  kl_graph *g = one_node(KL_OP_Expand, 2, 1);
  int n = kl_graph_symbol(g, "n");
  kl_type x = ty(KL_F32, 2, (int64_t[]){-1, 1}), s = ty(KL_I64, 1, (int64_t[]){3}), out[1];
  x.dims[0].sym = n;
  const int64_t shape[] = {2, 1, 4};
  const kl_type *in[2] = {&x, &s};
  const void *data[2] = {NULL, shape};
  kl_err e = {0};
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].rank, 3);
  assert_int_equal(out[0].dims[0].size, 2);
  assert_int_equal(out[0].dims[1].sym, n);
  assert_int_equal(out[0].dims[2].size, 4);
  const int64_t bad[] = {3, 3};
  kl_type s2 = ty(KL_I64, 1, (int64_t[]){2}), x2 = ty(KL_F32, 2, (int64_t[]){2, 1});
  in[0] = &x2, in[1] = &s2, data[1] = bad;
  assert_int_equal(infer(g, in, data, out, &e), KILN_ERR_SHAPE);
  assert_contains(e.msg, "does not broadcast");

  /* by hand: a column [1, 2, 3] broadcast to 2 x 3 x 2 */
  static const float col[] = {1, 2, 3}, want[] = {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3};
  static const int64_t to[] = {2, 1, 2};
  tin ins[2] = {{KL_F32, 2, {3, 1}, col}, {KL_I64, 1, {3}, to}};
  touts o;
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 3, (int64_t[]){2, 3, 2});
  assert_f32(&o.t[0], want, 12, 0);
  touts_free(&o);
  kl_graph_free(g);
}

static void test_tile(void **state) {
  (void)state;
  /* by hand: [[1, 2, 3], [4, 5, 6]] repeated (2, 1) and (1, 0) */
  static const int64_t x[] = {1, 2, 3, 4, 5, 6}, r21[] = {2, 1}, r10[] = {1, 0};
  static const int64_t want[] = {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6};
  kl_graph *g = one_node(KL_OP_Tile, 2, 1);
  tin ins[2] = {{KL_I64, 2, {2, 3}, x}, {KL_I64, 1, {2}, r21}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_i64(&o.t[0], want, 12);
  touts_free(&o);
  ins[1].data = r10;
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 2, (int64_t[]){2, 0});
  touts_free(&o);
  static const int64_t huge[] = {INT64_MAX / 2, 1};
  ins[1].data = huge;
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_LIMIT);
  kl_graph_free(g);
}

static void test_center_crop_pad(void **state) {
  (void)state;
  /* onnx reference: arange(12).reshape(3, 4) to (2, 6): crop rows, pad columns */
  static const float x[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  static const float want[] = {0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 7, 0};
  static const int64_t shape[] = {2, 6};
  kl_graph *g = one_node(KL_OP_CenterCropPad, 2, 1);
  tin ins[2] = {{KL_F32, 2, {3, 4}, x}, {KL_I64, 1, {2}, shape}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_f32(&o.t[0], want, 12, 0);
  touts_free(&o);
  /* with axes, one value per named axis */
  set_ints(g, "axes", (int64_t[]){-1}, 1);
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_SHAPE);
  assert_contains(e.msg, "one per entry of axes");
  kl_graph_free(g);
}

/* ---- Split ---- */

static void test_split(void **state) {
  (void)state;
  kl_graph *g = one_node(KL_OP_Split, 1, 4);
  set_int(g, "num_outputs", 4);
  /* 7 in 4 parts: ceil(7 / 4) = 2 each, the last gets what is left */
  static const float x[] = {1, 2, 3, 4, 5, 6, 7};
  tin ins[1] = {{KL_F32, 1, {7}, x}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  const int64_t sizes[] = {2, 2, 2, 1};
  for (int k = 0; k < 4; k++) {
    assert_dims(&o.t[k], 1, &sizes[k]);
    assert_f32(&o.t[k], x + 2 * k, (int)sizes[k], 0);
  }
  touts_free(&o);
  set_int(g, "num_outputs", 3);
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_INVALID_MODEL);
  kl_graph_free(g);

  /* split sizes: a symbolic dim elsewhere is kept; they must add up */
  g = one_node(KL_OP_Split, 2, 2);
  set_int(g, "axis", -1);
  int b = kl_graph_symbol(g, "b");
  kl_type t = ty(KL_F32, 2, (int64_t[]){-1, 5}), ts = ty(KL_I64, 1, (int64_t[]){2}), out[2];
  t.dims[0].sym = b;
  const int64_t parts[] = {1, 4}, wrong[] = {1, 3};
  const kl_type *in[2] = {&t, &ts};
  const void *data[2] = {NULL, parts};
  kl_err_clear(&e);
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].dims[0].sym, b);
  assert_int_equal(out[0].dims[1].size, 1);
  assert_int_equal(out[1].dims[1].size, 4);
  data[1] = wrong;
  assert_int_equal(infer(g, in, data, out, &e), KILN_ERR_SHAPE);
  assert_contains(e.msg, "adds up to 4");
  kl_graph_free(g);
}

/* ---- Compress, ReverseSequence, Trilu ---- */

static void test_compress(void **state) {
  (void)state;
  /* by hand: flattened [5, 6, 7, 8] keeping elements 1 and 3 */
  static const float x[] = {5, 6, 7, 8}, want[] = {6, 8};
  static const uint8_t cond[] = {0, 1, 0, 1}, past[] = {0, 1, 0, 0, 1};
  kl_graph *g = one_node(KL_OP_Compress, 2, 1);
  tin ins[2] = {{KL_F32, 2, {2, 2}, x}, {KL_BOOL, 1, {4}, cond}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 1, (int64_t[]){2});
  assert_f32(&o.t[0], want, 2, 0);
  touts_free(&o);
  ins[1] = (tin){KL_BOOL, 1, {5}, past};
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_SHAPE);
  assert_contains(e.msg, "true at index 4");
  kl_graph_free(g);
}

static void test_reverse_sequence(void **state) {
  (void)state;
  /* by hand: rows of arange(12).reshape(3, 4) reversed over their first 4, 0, 2 */
  static const float x[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  static const float want[] = {3, 2, 1, 0, 4, 5, 6, 7, 9, 8, 10, 11};
  static const int64_t lens[] = {4, 0, 2}, too_long[] = {4, 5, 0};
  kl_graph *g = one_node(KL_OP_ReverseSequence, 2, 1);
  set_int(g, "batch_axis", 0);
  set_int(g, "time_axis", 1);
  tin ins[2] = {{KL_F32, 2, {3, 4}, x}, {KL_I64, 1, {3}, lens}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_f32(&o.t[0], want, 12, 0);
  touts_free(&o);
  ins[1].data = too_long;
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_INVALID_ARGUMENT);
  assert_contains(e.msg, "expected 0 to 4");
  kl_graph_free(g);
}

static void test_trilu(void **state) {
  (void)state;
  /* np.tril(x, 1) */
  static const int64_t x[] = {6, 6, 1, 6, 4, 1, 2, 5, 6, 5, 5, 7};
  static const int64_t want[] = {6, 6, 0, 0, 4, 1, 2, 0, 6, 5, 5, 7}, k = 1;
  kl_graph *g = one_node(KL_OP_Trilu, 2, 1);
  set_int(g, "upper", 0);
  tin ins[2] = {{KL_I64, 2, {3, 4}, x}, {KL_I64, 0, {0}, &k}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_i64(&o.t[0], want, 12);
  touts_free(&o);
  ins[0].rank = 1;
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_SHAPE);
  kl_graph_free(g);
}

/* ---- DepthToSpace, SpaceToDepth ---- */

static void test_depth_space(void **state) {
  (void)state;
  /* onnx reference: arange(16) * 1.5 - 3 as [1, 4, 2, 2], CRD, blocksize 2 */
  float x[32];
  for (int i = 0; i < 16; i++) x[i] = (float)i * 1.5f - 3;
  static const float crd[] = {-3, 3, -1.5f, 4.5f, 9, 15, 10.5f, 16.5f,
                              0, 6, 1.5f, 7.5f, 12, 18, 13.5f, 19.5f};
  kl_graph *g = one_node(KL_OP_DepthToSpace, 1, 1);
  set_int(g, "blocksize", 2);
  set_string(g, "mode", "CRD");
  tin ins[1] = {{KL_F32, 4, {1, 4, 2, 2}, x}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 4, (int64_t[]){1, 1, 4, 4});
  assert_f32(&o.t[0], crd, 16, 0);
  touts_free(&o);
  ins[0] = (tin){KL_F32, 4, {1, 6, 2, 2}, x};
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_SHAPE);
  assert_contains(e.msg, "not a multiple of 4");
  kl_graph_free(g);

  /* onnx reference: arange(32) - 5 as [1, 2, 4, 4], blocksize 2 */
  for (int i = 0; i < 32; i++) x[i] = (float)i - 5;
  static const float s2d[] = {-5, -3, 3, 5, 11, 13, 19, 21, -4, -2, 4, 6, 12, 14, 20, 22,
                              -1, 1, 7, 9, 15, 17, 23, 25, 0, 2, 8, 10, 16, 18, 24, 26};
  g = one_node(KL_OP_SpaceToDepth, 1, 1);
  set_int(g, "blocksize", 2);
  ins[0] = (tin){KL_F32, 4, {1, 2, 4, 4}, x};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 4, (int64_t[]){1, 8, 2, 2});
  assert_f32(&o.t[0], s2d, 32, 0);
  touts_free(&o);
  kl_graph_free(g);
}

/* ---- ConstantOfShape, Range, Size, EyeLike ---- */

static void test_constant_of_shape(void **state) {
  (void)state;
  kl_graph *g = one_node(KL_OP_ConstantOfShape, 1, 1);
  kl_tensor *v = calloc(1, sizeof *v);
  assert_non_null(v);
  v->dtype = KL_I32;
  v->rank = 1;
  v->dims[0] = 1;
  v->data = malloc(sizeof(int32_t));
  assert_non_null(v->data);
  *(int32_t *)v->data = -7;
  kl_err e = {0};
  assert_int_equal(kl_node_set_tensor(g, 0, "value", v, &e), KILN_OK);
  static const int64_t shape[] = {2, 0, 3}, neg[] = {2, -1}, small[] = {3};
  tin ins[1] = {{KL_I64, 1, {1}, small}};
  touts o;
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_int_equal(o.t[0].dtype, KL_I32);
  for (int i = 0; i < 3; i++) assert_int_equal(((int32_t *)o.t[0].data)[i], -7);
  touts_free(&o);
  ins[0] = (tin){KL_I64, 1, {3}, shape};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 3, shape);
  touts_free(&o);
  ins[0] = (tin){KL_I64, 1, {2}, neg};
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_SHAPE);
  kl_graph_free(g);

  /* without a value: float32 zeros; a shape whose contents are not known yet */
  g = one_node(KL_OP_ConstantOfShape, 1, 1);
  kl_type s = ty(KL_I64, 1, (int64_t[]){3}), out[1];
  const kl_type *in[1] = {&s};
  const void *data[1] = {NULL};
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].dtype, KL_F32);
  assert_int_equal(out[0].rank, 3);
  assert_int_equal(out[0].dims[1].size, -1);
  kl_graph_free(g);
}

static void test_range(void **state) {
  (void)state;
  kl_graph *g = one_node(KL_OP_Range, 3, 1);
  /* ceil((-7 - 5) / -3) = 4 values: 5, 2, -1, -4 */
  static const int32_t start = 5, limit = -7, delta = -3, zero = 0;
  tin ins[3] = {{KL_I32, 0, {0}, &start}, {KL_I32, 0, {0}, &limit}, {KL_I32, 0, {0}, &delta}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 1, (int64_t[]){4});
  const int32_t want[] = {5, 2, -1, -4};
  for (int i = 0; i < 4; i++) assert_int_equal(((int32_t *)o.t[0].data)[i], want[i]);
  touts_free(&o);
  ins[2].data = &zero;
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_INVALID_ARGUMENT);
  kl_err_clear(&e);
  /* float: ceil((1 - 0.25) / 0.3) = 3 values */
  static const double fs = 0.25, fl = 1, fd = 0.3, fwant[] = {0.25, 0.55, 0.85};
  tin fins[3] = {{KL_F64, 0, {0}, &fs}, {KL_F64, 0, {0}, &fl}, {KL_F64, 0, {0}, &fd}};
  assert_int_equal(run(g, fins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 1, (int64_t[]){3});
  for (int i = 0; i < 3; i++) assert_true(fabs(((double *)o.t[0].data)[i] - fwant[i]) < 1e-12);
  touts_free(&o);
  /* mixed dtypes; at load time, contents not known: one dim, unknown */
  fins[1] = (tin){KL_F32, 0, {0}, &fl};
  assert_int_equal(run(g, fins, &o, &e), KILN_ERR_DTYPE);
  kl_type t = ty(KL_I64, 0, NULL), out[1];
  const kl_type *in[3] = {&t, &t, &t};
  const void *data[3] = {NULL, NULL, NULL};
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].rank, 1);
  assert_int_equal(out[0].dims[0].size, -1);
  kl_graph_free(g);
}

static void test_size_and_eye_like(void **state) {
  (void)state;
  kl_graph *g = one_node(KL_OP_Size, 1, 1);
  static const float x[12] = {0};
  tin ins[1] = {{KL_F32, 2, {3, 4}, x}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 0, NULL);
  assert_i64(&o.t[0], (int64_t[]){12}, 1);
  touts_free(&o);
  kl_graph_free(g);

  /* np.eye(3, 4, -1) as float64 from an int32 input */
  g = one_node(KL_OP_EyeLike, 1, 1);
  set_int(g, "k", -1);
  set_int(g, "dtype", KL_F64);
  static const int32_t xi[12] = {3};
  ins[0] = (tin){KL_I32, 2, {3, 4}, xi};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_int_equal(o.t[0].dtype, KL_F64);
  for (int i = 0; i < 12; i++)
    assert_true(((double *)o.t[0].data)[i] == (i == 4 || i == 9 ? 1.0 : 0.0));
  touts_free(&o);
  set_int(g, "dtype", KL_STRING);
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_UNSUPPORTED);
  kl_graph_free(g);
}

/* ---- OneHot, NonZero, Unique ---- */

static void test_one_hot(void **state) {
  (void)state;
  /* by hand: float indices [1, -1, 5] with depth 3 on axis 0; 5 is out of range */
  static const float idx[] = {1, -1, 5}, depth = 3, values[] = {-2, 4};
  static const float want[] = {-2, -2, -2, 4, -2, -2, -2, 4, -2};
  kl_graph *g = one_node(KL_OP_OneHot, 3, 1);
  set_int(g, "axis", 0);
  tin ins[3] = {{KL_F32, 1, {3}, idx}, {KL_F32, 0, {0}, &depth}, {KL_F32, 1, {2}, values}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 2, (int64_t[]){3, 3});
  assert_f32(&o.t[0], want, 9, 0);
  touts_free(&o);
  set_int(g, "axis", 2);
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_SHAPE);
  kl_graph_free(g);
}

static void test_non_zero(void **state) {
  (void)state;
  static const int32_t x[] = {0, 2, 0, 1, 0, 3};
  static const int64_t want[] = {0, 1, 1, 1, 0, 2}; /* np.nonzero */
  kl_graph *g = one_node(KL_OP_NonZero, 1, 1);
  tin ins[1] = {{KL_I32, 2, {2, 3}, x}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 2, (int64_t[]){2, 3});
  assert_i64(&o.t[0], want, 6);
  touts_free(&o);
  /* at load time the count is unknown, the rank is not */
  kl_type t = ty(KL_F32, 3, (int64_t[]){2, -1, 4}), out[1];
  const kl_type *in[1] = {&t};
  const void *data[1] = {NULL};
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].dims[0].size, 3);
  assert_int_equal(out[0].dims[1].size, -1);
  kl_graph_free(g);
}

static void test_unique(void **state) {
  (void)state;
  /* onnx reference, sorted=0 */
  static const float x[] = {3, 1, 3, 0, 1, 7, 3}, y[] = {3, 1, 0, 7};
  kl_graph *g = one_node(KL_OP_Unique, 1, 4);
  set_int(g, "sorted", 0);
  tin ins[1] = {{KL_F32, 1, {7}, x}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_f32(&o.t[0], y, 4, 0);
  assert_i64(&o.t[1], (int64_t[]){0, 1, 3, 5}, 4);
  assert_i64(&o.t[2], (int64_t[]){0, 1, 0, 2, 1, 3, 0}, 7);
  assert_i64(&o.t[3], (int64_t[]){3, 2, 1, 1}, 4);
  touts_free(&o);
  kl_graph_free(g);

  /* onnx reference, columns of [[1,0,1],[1,0,1],[0,2,0]] (axis -1), sorted */
  static const int32_t m[] = {1, 0, 1, 1, 0, 1, 0, 2, 0}, my[] = {0, 1, 0, 1, 2, 0};
  g = one_node(KL_OP_Unique, 1, 4);
  set_int(g, "axis", -1);
  ins[0] = (tin){KL_I32, 2, {3, 3}, m};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 2, (int64_t[]){3, 2});
  for (int i = 0; i < 6; i++) assert_int_equal(((int32_t *)o.t[0].data)[i], my[i]);
  assert_i64(&o.t[1], (int64_t[]){1, 0}, 2);
  assert_i64(&o.t[2], (int64_t[]){1, 0, 1}, 3);
  assert_i64(&o.t[3], (int64_t[]){1, 2}, 2);
  touts_free(&o);
  kl_graph_free(g);
}

/* ---- gathers and scatters ---- */

static void test_gather_scatter_elements(void **state) {
  (void)state;
  /* onnx reference: min-reduce updates into d along axis 1, index -3 meaning 0 */
  static const float d[] = {2, 6, 3, -7, 1, -4}, u[] = {9, 7, -6, 0, 8, 7};
  static const int64_t idx[] = {2, -3, 2, 0, 1, 0};
  static const float want[] = {2, 6, -6, -7, 1, -4};
  kl_graph *g = one_node(KL_OP_ScatterElements, 3, 1);
  set_int(g, "axis", 1);
  set_string(g, "reduction", "min");
  tin ins[3] = {{KL_F32, 2, {2, 3}, d}, {KL_I64, 2, {2, 3}, idx}, {KL_F32, 2, {2, 3}, u}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_f32(&o.t[0], want, 6, 0);
  touts_free(&o);
  set_string(g, "reduction", "mean");
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_INVALID_MODEL);
  kl_graph_free(g);

  /* by hand: gather along axis 0 with a negative index; then one out of range */
  static const int64_t gi[] = {-1, 0}, bad[] = {2, 0};
  static const float gwant[] = {-7, 6};
  g = one_node(KL_OP_GatherElements, 2, 1);
  tin gins[2] = {{KL_F32, 2, {2, 3}, d}, {KL_I64, 2, {1, 2}, gi}};
  kl_err_clear(&e);
  assert_int_equal(run(g, gins, &o, &e), KILN_OK);
  assert_f32(&o.t[0], gwant, 2, 0);
  touts_free(&o);
  gins[1].data = bad;
  assert_int_equal(run(g, gins, &o, &e), KILN_ERR_INVALID_ARGUMENT);
  assert_contains(e.msg, "has 2 at element 0, expected -2 to 1");
  touts_free(&o);
  /* indices larger than the data in a dim other than axis */
  kl_err_clear(&e);
  gins[1] = (tin){KL_I64, 2, {1, 4}, (int64_t[]){0, 0, 0, 0}};
  assert_int_equal(run(g, gins, &o, &e), KILN_ERR_SHAPE);
  kl_graph_free(g);
}

static void test_gather_scatter_nd(void **state) {
  (void)state;
  /* onnx reference: batch_dims 1 */
  static const float d[] = {9, -1, 6, 8, 6, 2, -1, 0, -4, 0, -2, -5};
  static const int64_t idx[] = {1, 0, 2, -1};
  static const float want[] = {6, 8, 9, -1, -2, -5, -2, -5};
  kl_graph *g = one_node(KL_OP_GatherND, 2, 1);
  set_int(g, "batch_dims", 1);
  tin ins[2] = {{KL_F32, 3, {2, 3, 2}, d}, {KL_I64, 3, {2, 2, 1}, idx}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 3, (int64_t[]){2, 2, 2});
  assert_f32(&o.t[0], want, 8, 0);
  touts_free(&o);
  /* tuples longer than the dims after the batch ones */
  ins[1] = (tin){KL_I64, 2, {2, 3}, (int64_t[]){0, 0, 0, 0, 0, 0}};
  assert_int_equal(run(g, ins, &o, &e), KILN_ERR_SHAPE);
  kl_graph_free(g);

  /* onnx reference: mul-reduce with a repeated index */
  static const float sd[] = {5, 1, 1, 1, 5, 4}, su[] = {3, -2, 2, -1, 0, -3};
  static const int64_t si[] = {2, 0, 2};
  static const float swant[] = {10, -1, 1, 1, 0, 24};
  g = one_node(KL_OP_ScatterND, 3, 1);
  set_string(g, "reduction", "mul");
  tin sins[3] = {{KL_F32, 2, {3, 2}, sd}, {KL_I64, 2, {3, 1}, si}, {KL_F32, 2, {3, 2}, su}};
  kl_err_clear(&e);
  assert_int_equal(run(g, sins, &o, &e), KILN_OK);
  assert_f32(&o.t[0], swant, 6, 0);
  touts_free(&o);
  sins[2].dims[1] = 1;
  assert_int_equal(run(g, sins, &o, &e), KILN_ERR_SHAPE);
  assert_contains(e.msg, "input 2 (updates)");
  kl_graph_free(g);
}

/* ---- Resize ---- */

static void test_resize_infer(void **state) {
  (void)state;
  kl_graph *g = one_node(KL_OP_Resize, 4, 1);
  int n = kl_graph_symbol(g, "n");
  kl_type x = ty(KL_F32, 4, (int64_t[]){-1, 3, 20, 30}), out[1];
  x.dims[0].sym = n;
  kl_type t2 = ty(KL_I64, 1, (int64_t[]){2});
  set_ints(g, "axes", (int64_t[]){-1, 2}, 2);
  set_string(g, "keep_aspect_ratio_policy", "not_larger");
  /* sizes (w 15, h 5): the smaller scale 0.25 for both, so 20 x 30 -> 5 x 8 (7.5 up) */
  const int64_t sizes[] = {15, 5};
  const kl_type *in[4] = {&x, NULL, NULL, &t2};
  const void *data[4] = {NULL, NULL, NULL, sizes};
  kl_err e = {0};
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].dims[0].sym, n);
  assert_int_equal(out[0].dims[1].size, 3);
  assert_int_equal(out[0].dims[2].size, 5);
  assert_int_equal(out[0].dims[3].size, 8);

  /* scales: floor(30 * 0.45) = 13; not known yet: unknown dims */
  kl_type tf = ty(KL_F32, 1, (int64_t[]){2});
  const float scales[] = {0.45f, 1};
  set_string(g, "keep_aspect_ratio_policy", "stretch");
  in[2] = &tf, data[2] = scales, in[3] = NULL, data[3] = NULL;
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].dims[2].size, 20);
  assert_int_equal(out[0].dims[3].size, 13);
  data[2] = NULL;
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].dims[1].size, 3);
  assert_int_equal(out[0].dims[3].size, -1);

  /* a scales input of unknown length (maybe empty, as opset 11 wrote) beside sizes */
  kl_type unknown_len = ty(KL_F32, 1, (int64_t[]){-1});
  in[2] = &unknown_len, data[2] = NULL, in[3] = &t2, data[3] = sizes;
  assert_int_equal(infer(g, in, data, out, &e), KILN_OK);
  assert_int_equal(out[0].dims[2].size, 5);
  assert_int_equal(out[0].dims[3].size, 15);

  /* both scales and sizes; a scale of 0; a bad mode */
  in[2] = &tf, data[2] = scales;
  assert_int_equal(infer(g, in, data, out, &e), KILN_ERR_INVALID_MODEL);
  assert_contains(e.msg, "both scales and sizes");
  kl_err_clear(&e);
  const float zero[] = {0, 1};
  in[3] = NULL, data[3] = NULL, data[2] = zero;
  assert_int_equal(infer(g, in, data, out, &e), KILN_ERR_INVALID_ARGUMENT);
  kl_err_clear(&e);
  set_string(g, "mode", "bilinear");
  data[2] = scales;
  assert_int_equal(infer(g, in, data, out, &e), KILN_ERR_INVALID_MODEL);
  assert_contains(e.msg, "expected one of nearest, linear, cubic");
  kl_graph_free(g);
}

static void test_resize_kernel(void **state) {
  (void)state;
  static const float x[] = {4, 2, -3, 9, -1, -5, 7, -6, 7, 2, -7, -9, -1, -9, -7, 0};
  /* onnx reference: cubic with antialias, 4 x 4 -> 3 x 3 */
  static const float cubic[] = {1.521759271621704f, -0.31915006041526794f, 4.524434566497803f,
                                1.9763436317443848f, -0.003358921967446804f,
                                -6.54373025894165f, 0.0023559769615530968f,
                                -7.79002571105957f, -3.9476494789123535f};
  static const int64_t sizes[] = {1, 1, 3, 3};
  kl_graph *g = one_node(KL_OP_Resize, 4, 1);
  set_string(g, "mode", "cubic");
  set_int(g, "antialias", 1);
  tin ins[4] = {{KL_F32, 4, {1, 1, 4, 4}, x}, {0}, {0}, {KL_I64, 1, {4}, sizes}};
  touts o;
  kl_err e = {0};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 4, sizes);
  assert_f32(&o.t[0], cubic, 9, 1e-5f);
  touts_free(&o);
  kl_graph_free(g);

  /* onnx reference: linear, align_corners, scales (0.75, 1.5) -> 3 x 6 */
  static const float lin[] = {4, 2.8f, 1, -2, 1.8f, 9, 3, 0.3f, -1.2f, -0.3f, -3, -7.5f,
                              -1, -5.8f, -8.6f, -7.4f, -4.2f, 0};
  static const float scales[] = {1, 1, 0.75f, 1.5f};
  g = one_node(KL_OP_Resize, 3, 1);
  set_string(g, "mode", "linear");
  set_string(g, "coordinate_transformation_mode", "align_corners");
  ins[2] = (tin){KL_F32, 1, {4}, scales};
  assert_int_equal(run(g, ins, &o, &e), KILN_OK);
  assert_dims(&o.t[0], 4, (int64_t[]){1, 1, 3, 6});
  assert_f32(&o.t[0], lin, 18, 1e-5f);
  touts_free(&o);
  kl_graph_free(g);

  /* by hand: uint8 linear upsampling rounds half to even and saturates nothing here:
   * [10, 15] at scale 2, half_pixel -> 10, 11.25, 13.75, 15 -> 10, 11, 14, 15 */
  static const uint8_t u8[] = {10, 15}, u8want[] = {10, 11, 14, 15};
  static const float two[] = {2};
  g = one_node(KL_OP_Resize, 3, 1);
  set_string(g, "mode", "linear");
  tin uins[3] = {{KL_U8, 1, {2}, u8}, {0}, {KL_F32, 1, {1}, two}};
  assert_int_equal(run(g, uins, &o, &e), KILN_OK);
  for (int i = 0; i < 4; i++) assert_int_equal(((uint8_t *)o.t[0].data)[i], u8want[i]);
  touts_free(&o);
  kl_graph_free(g);
}

/* ---- the importer's rewrites of older forms ---- */

#define DATA_FIXTURES "tests/unit/fixtures/data/"

static kl_graph *load_fixture(const char *name) {
  char path[256];
  snprintf(path, sizeof path, DATA_FIXTURES "%s/model.onnx", name);
  kl_graph *g = NULL;
  kl_err e = {0};
  if (kl_onnx_load_file(path, NULL, &g, &e) != KILN_OK) fail_msg("%s: %s", path, e.msg);
  assert_int_equal(g->n_nodes, 1);
  return g;
}

/* The constant at input slot i of node 0, as int64 values. */
static void assert_const_i64(const kl_graph *g, int i, const int64_t *want, int n) {
  assert_true(g->nodes[0].n_in > i);
  const kl_value *v = &g->values[g->nodes[0].in[i]];
  assert_int_equal(v->kind, KL_VALUE_CONST);
  assert_int_equal(v->type.dtype, KL_I64);
  assert_int_equal(v->type.dims[0].size, n);
  for (int k = 0; k < n; k++) assert_int_equal(((const int64_t *)v->data)[k], want[k]);
}

static void test_canon_attributes_to_inputs(void **state) {
  (void)state;
  kl_graph *g = load_fixture("slice_opset9");
  assert_int_equal(g->nodes[0].op, KL_OP_Slice);
  assert_const_i64(g, 1, (int64_t[]){1, -3}, 2);
  assert_const_i64(g, 2, (int64_t[]){3, 1000}, 2);
  assert_const_i64(g, 3, (int64_t[]){0, 2}, 2);
  assert_null(kl_node_attr(&g->nodes[0], "starts"));
  kl_graph_free(g);

  g = load_fixture("pad_opset10");
  assert_int_equal(g->nodes[0].op, KL_OP_Pad);
  assert_const_i64(g, 1, (int64_t[]){1, 0, 2, 1}, 4);
  const kl_value *v = &g->values[g->nodes[0].in[2]];
  assert_int_equal(v->type.dtype, KL_F32);
  assert_true(*(const float *)v->data == 2.5f);
  kl_graph_free(g);

  g = load_fixture("split_opset11");
  assert_const_i64(g, 1, (int64_t[]){1, 3}, 2);
  kl_graph_free(g);
}

static void test_canon_renamed_ops(void **state) {
  (void)state;
  kl_graph *g = load_fixture("scatter_opset10");
  assert_int_equal(g->nodes[0].op, KL_OP_ScatterElements);
  assert_int_equal(kl_attr_int(&g->nodes[0], "axis", 0), 1);
  kl_graph_free(g);

  /* Upsample-8's scales attribute and Upsample-9's input both land at Resize's input 2 */
  const char *names[] = {"upsample_linear_opset8", "upsample_nearest_opset9",
                         "resize_nearest_opset10"};
  for (int k = 0; k < 3; k++) {
    g = load_fixture(names[k]);
    const kl_node *n = &g->nodes[0];
    assert_int_equal(n->op, KL_OP_Resize);
    assert_int_equal(n->n_in, 3);
    assert_int_equal(n->in[1], KL_ABSENT);
    assert_int_equal(g->values[n->in[2]].type.dtype, KL_F32);
    assert_string_equal(kl_attr_string(n, "coordinate_transformation_mode", ""), "asymmetric");
    assert_string_equal(kl_attr_string(n, "nearest_mode", ""), "simple");
    kl_graph_free(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slice_infer),
      cmocka_unit_test(test_slice_kernel),
      cmocka_unit_test(test_pad_infer),
      cmocka_unit_test(test_pad_modes),
      cmocka_unit_test(test_pad_constant_value),
      cmocka_unit_test(test_expand),
      cmocka_unit_test(test_tile),
      cmocka_unit_test(test_center_crop_pad),
      cmocka_unit_test(test_split),
      cmocka_unit_test(test_compress),
      cmocka_unit_test(test_reverse_sequence),
      cmocka_unit_test(test_trilu),
      cmocka_unit_test(test_depth_space),
      cmocka_unit_test(test_constant_of_shape),
      cmocka_unit_test(test_range),
      cmocka_unit_test(test_size_and_eye_like),
      cmocka_unit_test(test_one_hot),
      cmocka_unit_test(test_non_zero),
      cmocka_unit_test(test_unique),
      cmocka_unit_test(test_gather_scatter_elements),
      cmocka_unit_test(test_gather_scatter_nd),
      cmocka_unit_test(test_resize_infer),
      cmocka_unit_test(test_resize_kernel),
      cmocka_unit_test(test_canon_attributes_to_inputs),
      cmocka_unit_test(test_canon_renamed_ops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
