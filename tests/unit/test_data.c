/* The data ops (slicing, padding, indexing, resampling; ops.def's "data" section):
 * shape inference with symbolic and unknown dims and its errors, the reference
 * kernels on small inputs whose expected outputs were computed with NumPy, ONNX's
 * reference evaluator or onnxruntime (pasted as literals, or worked by hand where
 * noted), and the importer's rewrites of the ops' older forms. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "import/onnx.h"

#include "testutil.h"

/* ---- Slice ---- */

static void test_slice_infer(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Slice", 5, 1);
  int batch = kl_graph_symbol(f->g, "batch");
  kl_type x = tu_type(KL_F32, 3, (int64_t[]){-1, 10, 6});
  x.dims[0].sym = batch;
  kl_type t2 = tu_type(KL_I64, 1, (int64_t[]){2});
  const int64_t starts[] = {0, -4}, ends[] = {INT64_MAX, 1}, axes[] = {0, -1},
                steps[] = {1, -2};
  const kl_type *in[5] = {&x, &t2, &t2, &t2, &t2};
  const void *data[5] = {NULL, starts, ends, axes, steps};
  /* [0:INT64_MAX] keeps the symbol; in dim 2 (of 6) -4 is index 2, and walking back by 2
   * to index 1 (exclusive) takes one element */
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].rank, 3);
  assert_int_equal(f->out[0].dims[0].sym, batch);
  assert_int_equal(f->out[0].dims[1].size, 10);
  assert_int_equal(f->out[0].dims[2].size, 1);

  /* starts not known: only the dims that axes name become unknown */
  data[1] = NULL;
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].dims[0].size, -1);
  assert_int_equal(f->out[0].dims[1].size, 10);
  assert_int_equal(f->out[0].dims[2].size, -1);

  /* errors: a zero step, an axis twice, lists of different lengths */
  data[1] = starts;
  const int64_t zero_step[] = {1, 0}, twice[] = {2, -1};
  data[4] = zero_step;
  tu_assert_status(tu_infer_with(f, in, data), KILN_ERR_SHAPE, f->e.msg, "steps[1] is 0");
  data[4] = steps;
  data[3] = twice;
  tu_assert_status(tu_infer_with(f, in, data), KILN_ERR_SHAPE, f->e.msg, "twice");
  kl_type t1 = tu_type(KL_I64, 1, (int64_t[]){1});
  data[3] = axes;
  in[2] = &t1;
  data[2] = ends;
  tu_assert_status(tu_infer_with(f, in, data), KILN_ERR_SHAPE, f->e.msg,
                   "expected 2 like starts");
}

static void test_slice_kernel(void **state) {
  tu_fixture *f = *state;
  /* y = x[:, 2:0:-1, -1:-100:-2] (NumPy) */
  static const float x[] = {8, 2, 3, 8, 1, 5, 6, -5, -8, -4, -4, 7,
                            8, -9, 0, 6, -7, 6, -7, -1, 6, -4, -3, -4};
  static const float want[] = {7, -4, -5, 5, -4, -4, -1, 6};
  const int64_t starts[] = {2, -1}, ends[] = {0, -100}, axes[] = {1, 2}, steps[] = {-1, -2};
  tu_one_node(f, "Slice", 5, 1);
  tu_in ins[5] = {{KL_F32, 3, {2, 3, 4}, x}, {KL_I64, 1, {2}, starts}, {KL_I64, 1, {2}, ends},
                {KL_I64, 1, {2}, axes}, {KL_I64, 1, {2}, steps}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 3, (int64_t[]){2, 2, 2});
  tu_assert_f32(&f->tout[0], want, TU_LEN(want), TU_EXACT);
}

/* ---- Pad ---- */

static void test_pad_infer(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Pad", 4, 1);
  int seq = kl_graph_symbol(f->g, "seq");
  kl_type x = tu_type(KL_F32, 3, (int64_t[]){2, -1, 5});
  x.dims[1].sym = seq;
  kl_type tp = tu_type(KL_I64, 1, (int64_t[]){4}), ta = tu_type(KL_I64, 1, (int64_t[]){2});
  const int64_t pads[] = {1, -2, 3, 0}, axes[] = {0, -1};
  const kl_type *in[4] = {&x, &tp, NULL, &ta};
  const void *data[4] = {NULL, pads, NULL, axes};
  /* dims 0 and 2 padded (2 + 1 + 3, 5 - 2 + 0); the symbolic dim is untouched */
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].dims[0].size, 6);
  assert_int_equal(f->out[0].dims[1].sym, seq);
  assert_int_equal(f->out[0].dims[2].size, 3);

  /* pads not known: the dims axes does not name keep theirs */
  data[1] = NULL;
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].dims[0].size, -1);
  assert_int_equal(f->out[0].dims[1].sym, seq);
  assert_int_equal(f->out[0].dims[2].size, -1);

  /* cropping more than a dim holds; reflecting an emptied dim; the wrong pads count */
  const int64_t crop[] = {-2, 0, -1, 0};
  data[1] = crop;
  tu_assert_status(tu_infer_with(f, in, data), KILN_ERR_SHAPE, f->e.msg, "crop more than");
  const int64_t empty_then_pad[] = {0, -5, 0, 1};
  tu_attr_string(f, "mode", "reflect");
  data[1] = empty_then_pad;
  tu_assert_status(tu_infer_with(f, in, data), KILN_ERR_SHAPE, f->e.msg,
                   "cannot pad an empty dim in reflect mode");
  in[3] = NULL;
  data[1] = pads;
  tu_assert_status(tu_infer_with(f, in, data), KILN_ERR_SHAPE, f->e.msg, "expected 6");
  tu_attr_string(f, "mode", "mirror");
  assert_int_equal(tu_infer_with(f, in, data), KILN_ERR_INVALID_MODEL);
}

/* Reflect, edge and wrap with cropping pads, against onnxruntime. */
static void test_pad_modes(void **state) {
  tu_fixture *f = *state;
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
  for (int k = 0; k < TU_LEN(cases); k++) {
    tu_one_node(f, "Pad", 2, 1);
    tu_attr_string(f, "mode", cases[k].mode);
    tu_in ins[2] = {{KL_I32, 2, {3, 4}, x}, {KL_I64, 1, {4}, cases[k].pads}};
    assert_int_equal(tu_run_on(f, ins), KILN_OK);
    tu_assert_dims(&f->tout[0], 2, cases[k].dims);
    int64_t n = kl_tensor_numel(&f->tout[0]);
    for (int64_t i = 0; i < n; i++)
      assert_int_equal(((const int32_t *)f->tout[0].data)[i], cases[k].want[i]);
  }
}

static void test_pad_constant_value(void **state) {
  tu_fixture *f = *state;
  /* by hand: [[1.5, 2.5]] padded by one column each side with -7 */
  static const float x[] = {1.5f, 2.5f}, value = -7, want[] = {-7, 1.5f, 2.5f, -7};
  static const int64_t pads[] = {0, 1, 0, 1};
  tu_one_node(f, "Pad", 3, 1);
  tu_in ins[3] = {{KL_F32, 2, {1, 2}, x}, {KL_I64, 1, {4}, pads}, {KL_F32, 0, {0}, &value}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_f32(&f->tout[0], want, 4, TU_EXACT);
  /* the value must have the data's dtype */
  static const double wrong = 1;
  ins[2] = (tu_in){KL_F64, 0, {0}, &wrong};
  assert_int_equal(tu_run_on(f, ins), KILN_ERR_DTYPE);
}

/* ---- Expand, Tile, CenterCropPad ---- */

static void test_expand(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Expand", 2, 1);
  int n = kl_graph_symbol(f->g, "n");
  kl_type x = tu_type(KL_F32, 2, (int64_t[]){-1, 1}), s = tu_type(KL_I64, 1, (int64_t[]){3});
  x.dims[0].sym = n;
  const int64_t shape[] = {2, 1, 4};
  const kl_type *in[2] = {&x, &s};
  const void *data[2] = {NULL, shape};
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].rank, 3);
  assert_int_equal(f->out[0].dims[0].size, 2);
  assert_int_equal(f->out[0].dims[1].sym, n);
  assert_int_equal(f->out[0].dims[2].size, 4);
  const int64_t bad[] = {3, 3};
  kl_type s2 = tu_type(KL_I64, 1, (int64_t[]){2}), x2 = tu_type(KL_F32, 2, (int64_t[]){2, 1});
  in[0] = &x2, in[1] = &s2, data[1] = bad;
  tu_assert_status(tu_infer_with(f, in, data), KILN_ERR_SHAPE, f->e.msg, "does not broadcast");

  /* by hand: a column [1, 2, 3] broadcast to 2 x 3 x 2 */
  static const float col[] = {1, 2, 3}, want[] = {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3};
  static const int64_t to[] = {2, 1, 2};
  tu_in ins[2] = {{KL_F32, 2, {3, 1}, col}, {KL_I64, 1, {3}, to}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 3, (int64_t[]){2, 3, 2});
  tu_assert_f32(&f->tout[0], want, 12, TU_EXACT);
}

static void test_tile(void **state) {
  tu_fixture *f = *state;
  /* by hand: [[1, 2, 3], [4, 5, 6]] repeated (2, 1) and (1, 0) */
  static const int64_t x[] = {1, 2, 3, 4, 5, 6}, r21[] = {2, 1}, r10[] = {1, 0};
  static const int64_t want[] = {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6};
  tu_one_node(f, "Tile", 2, 1);
  tu_in ins[2] = {{KL_I64, 2, {2, 3}, x}, {KL_I64, 1, {2}, r21}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_i64(&f->tout[0], want, 12);
  ins[1].data = r10;
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 2, (int64_t[]){2, 0});
  static const int64_t huge[] = {INT64_MAX / 2, 1};
  ins[1].data = huge;
  assert_int_equal(tu_run_on(f, ins), KILN_ERR_LIMIT);
}

static void test_center_crop_pad(void **state) {
  tu_fixture *f = *state;
  /* onnx reference: arange(12).reshape(3, 4) to (2, 6): crop rows, pad columns */
  static const float x[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  static const float want[] = {0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 7, 0};
  static const int64_t shape[] = {2, 6};
  tu_one_node(f, "CenterCropPad", 2, 1);
  tu_in ins[2] = {{KL_F32, 2, {3, 4}, x}, {KL_I64, 1, {2}, shape}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_f32(&f->tout[0], want, 12, TU_EXACT);
  /* with axes, one value per named axis */
  tu_attr_ints(f, "axes", (int64_t[]){-1}, 1);
  tu_assert_status(tu_run_on(f, ins), KILN_ERR_SHAPE, f->e.msg, "one per entry of axes");
}

/* ---- Split ---- */

static void test_split(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Split", 1, 4);
  tu_attr_int(f, "num_outputs", 4);
  /* 7 in 4 parts: ceil(7 / 4) = 2 each, the last gets what is left */
  static const float x[] = {1, 2, 3, 4, 5, 6, 7};
  tu_in ins[1] = {{KL_F32, 1, {7}, x}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  const int64_t sizes[] = {2, 2, 2, 1};
  for (int k = 0; k < 4; k++) {
    tu_assert_dims(&f->tout[k], 1, &sizes[k]);
    tu_assert_f32(&f->tout[k], x + 2 * k, (int)sizes[k], TU_EXACT);
  }
  tu_attr_int(f, "num_outputs", 3);
  assert_int_equal(tu_run_on(f, ins), KILN_ERR_INVALID_MODEL);

  /* split sizes: a symbolic dim elsewhere is kept; they must add up */
  tu_one_node(f, "Split", 2, 2);
  tu_attr_int(f, "axis", -1);
  int b = kl_graph_symbol(f->g, "b");
  kl_type t = tu_type(KL_F32, 2, (int64_t[]){-1, 5}), ts = tu_type(KL_I64, 1, (int64_t[]){2});
  t.dims[0].sym = b;
  const int64_t parts[] = {1, 4}, wrong[] = {1, 3};
  const kl_type *in[2] = {&t, &ts};
  const void *data[2] = {NULL, parts};
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].dims[0].sym, b);
  assert_int_equal(f->out[0].dims[1].size, 1);
  assert_int_equal(f->out[1].dims[1].size, 4);
  data[1] = wrong;
  tu_assert_status(tu_infer_with(f, in, data), KILN_ERR_SHAPE, f->e.msg, "adds up to 4");
  /* sizes whose sum wraps around int64 (it used to skip the check: [4, 0] split into
   * two [2^62, 0]) */
  const int64_t wraps[] = {INT64_C(1) << 62, INT64_MAX - 2};
  data[1] = wraps;
  tu_assert_status(tu_infer_with(f, in, data), KILN_ERR_SHAPE, f->e.msg, "add up past 2^63");
}

/* ---- Compress, ReverseSequence, Trilu ---- */

static void test_compress(void **state) {
  tu_fixture *f = *state;
  /* by hand: flattened [5, 6, 7, 8] keeping elements 1 and 3 */
  static const float x[] = {5, 6, 7, 8}, want[] = {6, 8};
  static const uint8_t cond[] = {0, 1, 0, 1}, past[] = {0, 1, 0, 0, 1};
  tu_one_node(f, "Compress", 2, 1);
  tu_in ins[2] = {{KL_F32, 2, {2, 2}, x}, {KL_BOOL, 1, {4}, cond}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 1, (int64_t[]){2});
  tu_assert_f32(&f->tout[0], want, 2, TU_EXACT);
  ins[1] = (tu_in){KL_BOOL, 1, {5}, past};
  tu_assert_status(tu_run_on(f, ins), KILN_ERR_SHAPE, f->e.msg, "true at index 4");
}

static void test_reverse_sequence(void **state) {
  tu_fixture *f = *state;
  /* by hand: rows of arange(12).reshape(3, 4) reversed over their first 4, 0, 2 */
  static const float x[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  static const float want[] = {3, 2, 1, 0, 4, 5, 6, 7, 9, 8, 10, 11};
  static const int64_t lens[] = {4, 0, 2}, too_long[] = {4, 5, 0};
  tu_one_node(f, "ReverseSequence", 2, 1);
  tu_attr_int(f, "batch_axis", 0);
  tu_attr_int(f, "time_axis", 1);
  tu_in ins[2] = {{KL_F32, 2, {3, 4}, x}, {KL_I64, 1, {3}, lens}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_f32(&f->tout[0], want, 12, TU_EXACT);
  ins[1].data = too_long;
  tu_assert_status(tu_run_on(f, ins), KILN_ERR_INVALID_ARGUMENT, f->e.msg, "expected 0 to 4");

  /* numpy: time first, rows of 2, int32 lengths: arange(24).reshape(4, 3, 2) - 5 with
   * x[:n, b] reversed for lengths 3, 1, 4 */
  int64_t xt[24];
  for (int i = 0; i < 24; i++) xt[i] = i - 5;
  static const int64_t want_t[] = {7, 8, -3, -2, 17, 18, 1, 2, 3, 4, 11, 12,
                                   -5, -4, 9, 10, 5, 6, 13, 14, 15, 16, -1, 0};
  static const int32_t lens_t[] = {3, 1, 4};
  tu_one_node(f, "ReverseSequence", 2, 1);
  tu_attr_int(f, "batch_axis", 1);
  tu_attr_int(f, "time_axis", 0);
  tu_in ins_t[2] = {{KL_I64, 3, {4, 3, 2}, xt}, {KL_I32, 1, {3}, lens_t}};
  assert_int_equal(tu_run_on(f, ins_t), KILN_OK);
  tu_assert_i64(&f->tout[0], want_t, 24);
}

static void test_trilu(void **state) {
  tu_fixture *f = *state;
  /* np.tril(x, 1) */
  static const int64_t x[] = {6, 6, 1, 6, 4, 1, 2, 5, 6, 5, 5, 7};
  static const int64_t want[] = {6, 6, 0, 0, 4, 1, 2, 0, 6, 5, 5, 7}, k = 1;
  tu_one_node(f, "Trilu", 2, 1);
  tu_attr_int(f, "upper", 0);
  tu_in ins[2] = {{KL_I64, 2, {3, 4}, x}, {KL_I64, 0, {0}, &k}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_i64(&f->tout[0], want, 12);
  ins[0].rank = 1;
  assert_int_equal(tu_run_on(f, ins), KILN_ERR_SHAPE);
}

/* ---- DepthToSpace, SpaceToDepth ---- */

static void test_depth_space(void **state) {
  tu_fixture *f = *state;
  /* onnx reference: arange(16) * 1.5 - 3 as [1, 4, 2, 2], CRD, blocksize 2 */
  float x[32];
  for (int i = 0; i < 16; i++) x[i] = (float)i * 1.5f - 3;
  static const float crd[] = {-3, 3, -1.5f, 4.5f, 9, 15, 10.5f, 16.5f,
                              0, 6, 1.5f, 7.5f, 12, 18, 13.5f, 19.5f};
  tu_one_node(f, "DepthToSpace", 1, 1);
  tu_attr_int(f, "blocksize", 2);
  tu_attr_string(f, "mode", "CRD");
  tu_in ins[1] = {{KL_F32, 4, {1, 4, 2, 2}, x}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 4, (int64_t[]){1, 1, 4, 4});
  tu_assert_f32(&f->tout[0], crd, 16, TU_EXACT);
  ins[0] = (tu_in){KL_F32, 4, {1, 6, 2, 2}, x};
  tu_assert_status(tu_run_on(f, ins), KILN_ERR_SHAPE, f->e.msg, "not a multiple of 4");

  /* onnx reference: arange(32) - 5 as [1, 2, 4, 4], blocksize 2 */
  for (int i = 0; i < 32; i++) x[i] = (float)i - 5;
  static const float s2d[] = {-5, -3, 3, 5, 11, 13, 19, 21, -4, -2, 4, 6, 12, 14, 20, 22,
                              -1, 1, 7, 9, 15, 17, 23, 25, 0, 2, 8, 10, 16, 18, 24, 26};
  tu_one_node(f, "SpaceToDepth", 1, 1);
  tu_attr_int(f, "blocksize", 2);
  ins[0] = (tu_in){KL_F32, 4, {1, 2, 4, 4}, x};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 4, (int64_t[]){1, 8, 2, 2});
  tu_assert_f32(&f->tout[0], s2d, 32, TU_EXACT);
}

/* ---- ConstantOfShape, Range, Size, EyeLike ---- */

static void test_constant_of_shape(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "ConstantOfShape", 1, 1);
  kl_tensor *v = calloc(1, sizeof *v);
  assert_non_null(v);
  v->dtype = KL_I32;
  v->rank = 1;
  v->dims[0] = 1;
  v->data = malloc(sizeof(int32_t));
  assert_non_null(v->data);
  *(int32_t *)v->data = -7;
  assert_int_equal(kl_node_set_tensor(f->g, f->node, "value", v, &f->e), KILN_OK);
  static const int64_t shape[] = {2, 0, 3}, neg[] = {2, -1}, small[] = {3};
  tu_in ins[1] = {{KL_I64, 1, {1}, small}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  assert_int_equal(f->tout[0].dtype, KL_I32);
  for (int i = 0; i < 3; i++) assert_int_equal(((int32_t *)f->tout[0].data)[i], -7);
  ins[0] = (tu_in){KL_I64, 1, {3}, shape};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 3, shape);
  ins[0] = (tu_in){KL_I64, 1, {2}, neg};
  assert_int_equal(tu_run_on(f, ins), KILN_ERR_SHAPE);

  /* without a value: float32 zeros; a shape whose contents are not known yet */
  tu_one_node(f, "ConstantOfShape", 1, 1);
  kl_type s = tu_type(KL_I64, 1, (int64_t[]){3});
  const kl_type *in[1] = {&s};
  const void *data[1] = {NULL};
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].dtype, KL_F32);
  assert_int_equal(f->out[0].rank, 3);
  assert_int_equal(f->out[0].dims[1].size, -1);
}

static void test_range(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Range", 3, 1);
  /* ceil((-7 - 5) / -3) = 4 values: 5, 2, -1, -4 */
  static const int32_t start = 5, limit = -7, delta = -3, zero = 0;
  tu_in ins[3] = {{KL_I32, 0, {0}, &start}, {KL_I32, 0, {0}, &limit}, {KL_I32, 0, {0}, &delta}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 1, (int64_t[]){4});
  const int32_t want[] = {5, 2, -1, -4};
  for (int i = 0; i < 4; i++) assert_int_equal(((int32_t *)f->tout[0].data)[i], want[i]);
  ins[2].data = &zero;
  assert_int_equal(tu_run_on(f, ins), KILN_ERR_INVALID_ARGUMENT);
  /* float: ceil((1 - 0.25) / 0.3) = 3 values */
  static const double fs = 0.25, fl = 1, fd = 0.3, fwant[] = {0.25, 0.55, 0.85};
  tu_in fins[3] = {{KL_F64, 0, {0}, &fs}, {KL_F64, 0, {0}, &fl}, {KL_F64, 0, {0}, &fd}};
  assert_int_equal(tu_run_on(f, fins), KILN_OK);
  tu_assert_dims(&f->tout[0], 1, (int64_t[]){3});
  for (int i = 0; i < 3; i++) assert_true(fabs(((double *)f->tout[0].data)[i] - fwant[i]) < 1e-12);
  /* mixed dtypes; at load time, contents not known: one dim, unknown */
  fins[1] = (tu_in){KL_F32, 0, {0}, &fl};
  assert_int_equal(tu_run_on(f, fins), KILN_ERR_DTYPE);
  kl_type t = tu_type(KL_I64, 0, NULL);
  const kl_type *in[3] = {&t, &t, &t};
  const void *data[3] = {NULL, NULL, NULL};
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].rank, 1);
  assert_int_equal(f->out[0].dims[0].size, -1);
}

static void test_size_and_eye_like(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Size", 1, 1);
  static const float x[12] = {0};
  tu_in ins[1] = {{KL_F32, 2, {3, 4}, x}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 0, NULL);
  tu_assert_i64(&f->tout[0], (int64_t[]){12}, 1);

  /* np.eye(3, 4, -1) as float64 from an int32 input */
  tu_one_node(f, "EyeLike", 1, 1);
  tu_attr_int(f, "k", -1);
  tu_attr_int(f, "dtype", KL_F64);
  static const int32_t xi[12] = {3};
  ins[0] = (tu_in){KL_I32, 2, {3, 4}, xi};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  assert_int_equal(f->tout[0].dtype, KL_F64);
  for (int i = 0; i < 12; i++)
    assert_true(((double *)f->tout[0].data)[i] == (i == 4 || i == 9 ? 1.0 : 0.0));
  tu_attr_int(f, "dtype", KL_STRING);
  assert_int_equal(tu_run_on(f, ins), KILN_ERR_UNSUPPORTED);
}

/* ---- OneHot, NonZero, Unique ---- */

static void test_one_hot(void **state) {
  tu_fixture *f = *state;
  /* by hand: float indices [1, -1, 5] with depth 3 on axis 0; 5 is out of range */
  static const float idx[] = {1, -1, 5}, depth = 3, values[] = {-2, 4};
  static const float want[] = {-2, -2, -2, 4, -2, -2, -2, 4, -2};
  tu_one_node(f, "OneHot", 3, 1);
  tu_attr_int(f, "axis", 0);
  tu_in ins[3] = {{KL_F32, 1, {3}, idx}, {KL_F32, 0, {0}, &depth}, {KL_F32, 1, {2}, values}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 2, (int64_t[]){3, 3});
  tu_assert_f32(&f->tout[0], want, 9, TU_EXACT);
  tu_attr_int(f, "axis", 2);
  assert_int_equal(tu_run_on(f, ins), KILN_ERR_SHAPE);
  /* a depth of NaN (once read as 0) or infinity is refused */
  static const float nan_depth = NAN, inf_depth = INFINITY;
  tu_attr_int(f, "axis", 0);
  ins[1].data = &nan_depth;
  assert_int_equal(tu_run_on(f, ins), KILN_ERR_INVALID_ARGUMENT);
  tu_assert_contains(f->e.msg, "expected a finite count");
  ins[1].data = &inf_depth;
  assert_int_equal(tu_run_on(f, ins), KILN_ERR_INVALID_ARGUMENT);
}

static void test_non_zero(void **state) {
  tu_fixture *f = *state;
  static const int32_t x[] = {0, 2, 0, 1, 0, 3};
  static const int64_t want[] = {0, 1, 1, 1, 0, 2}; /* np.nonzero */
  tu_one_node(f, "NonZero", 1, 1);
  tu_in ins[1] = {{KL_I32, 2, {2, 3}, x}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 2, (int64_t[]){2, 3});
  tu_assert_i64(&f->tout[0], want, 6);
  /* at load time the count is unknown, the rank is not */
  kl_type t = tu_type(KL_F32, 3, (int64_t[]){2, -1, 4});
  const kl_type *in[1] = {&t};
  const void *data[1] = {NULL};
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].dims[0].size, 3);
  assert_int_equal(f->out[0].dims[1].size, -1);
}

static void test_unique(void **state) {
  tu_fixture *f = *state;
  /* onnx reference, sorted=0 */
  static const float x[] = {3, 1, 3, 0, 1, 7, 3}, y[] = {3, 1, 0, 7};
  tu_one_node(f, "Unique", 1, 4);
  tu_attr_int(f, "sorted", 0);
  tu_in ins[1] = {{KL_F32, 1, {7}, x}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_f32(&f->tout[0], y, 4, TU_EXACT);
  tu_assert_i64(&f->tout[1], (int64_t[]){0, 1, 3, 5}, 4);
  tu_assert_i64(&f->tout[2], (int64_t[]){0, 1, 0, 2, 1, 3, 0}, 7);
  tu_assert_i64(&f->tout[3], (int64_t[]){3, 2, 1, 1}, 4);

  /* onnx reference, columns of [[1,0,1],[1,0,1],[0,2,0]] (axis -1), sorted */
  static const int32_t m[] = {1, 0, 1, 1, 0, 1, 0, 2, 0}, my[] = {0, 1, 0, 1, 2, 0};
  tu_one_node(f, "Unique", 1, 4);
  tu_attr_int(f, "axis", -1);
  ins[0] = (tu_in){KL_I32, 2, {3, 3}, m};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 2, (int64_t[]){3, 2});
  for (int i = 0; i < 6; i++) assert_int_equal(((int32_t *)f->tout[0].data)[i], my[i]);
  tu_assert_i64(&f->tout[1], (int64_t[]){1, 0}, 2);
  tu_assert_i64(&f->tout[2], (int64_t[]){1, 0, 1}, 3);
  tu_assert_i64(&f->tout[3], (int64_t[]){1, 2}, 2);
}

/* ---- gathers and scatters ---- */

static void test_gather_scatter_elements(void **state) {
  tu_fixture *f = *state;
  /* onnx reference: min-reduce updates into d along axis 1, index -3 meaning 0 */
  static const float d[] = {2, 6, 3, -7, 1, -4}, u[] = {9, 7, -6, 0, 8, 7};
  static const int64_t idx[] = {2, -3, 2, 0, 1, 0};
  static const float want[] = {2, 6, -6, -7, 1, -4};
  tu_one_node(f, "ScatterElements", 3, 1);
  tu_attr_int(f, "axis", 1);
  tu_attr_string(f, "reduction", "min");
  tu_in ins[3] = {{KL_F32, 2, {2, 3}, d}, {KL_I64, 2, {2, 3}, idx}, {KL_F32, 2, {2, 3}, u}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_f32(&f->tout[0], want, 6, TU_EXACT);
  tu_attr_string(f, "reduction", "mean");
  assert_int_equal(tu_run_on(f, ins), KILN_ERR_INVALID_MODEL);

  /* by hand: gather along axis 0 with a negative index; then one out of range */
  static const int64_t gi[] = {-1, 0}, bad[] = {2, 0};
  static const float gwant[] = {-7, 6};
  tu_one_node(f, "GatherElements", 2, 1);
  tu_in gins[2] = {{KL_F32, 2, {2, 3}, d}, {KL_I64, 2, {1, 2}, gi}};
  assert_int_equal(tu_run_on(f, gins), KILN_OK);
  tu_assert_f32(&f->tout[0], gwant, 2, TU_EXACT);
  gins[1].data = bad;
  tu_assert_status(tu_run_on(f, gins), KILN_ERR_INVALID_ARGUMENT, f->e.msg,
                   "has 2 at element 0, expected -2 to 1");
  /* indices larger than the data in a dim other than axis */
  gins[1] = (tu_in){KL_I64, 2, {1, 4}, (int64_t[]){0, 0, 0, 0}};
  assert_int_equal(tu_run_on(f, gins), KILN_ERR_SHAPE);
}

static void test_gather_scatter_nd(void **state) {
  tu_fixture *f = *state;
  /* onnx reference: batch_dims 1 */
  static const float d[] = {9, -1, 6, 8, 6, 2, -1, 0, -4, 0, -2, -5};
  static const int64_t idx[] = {1, 0, 2, -1};
  static const float want[] = {6, 8, 9, -1, -2, -5, -2, -5};
  tu_one_node(f, "GatherND", 2, 1);
  tu_attr_int(f, "batch_dims", 1);
  tu_in ins[2] = {{KL_F32, 3, {2, 3, 2}, d}, {KL_I64, 3, {2, 2, 1}, idx}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 3, (int64_t[]){2, 2, 2});
  tu_assert_f32(&f->tout[0], want, 8, TU_EXACT);
  /* tuples longer than the dims after the batch ones */
  ins[1] = (tu_in){KL_I64, 2, {2, 3}, (int64_t[]){0, 0, 0, 0, 0, 0}};
  assert_int_equal(tu_run_on(f, ins), KILN_ERR_SHAPE);

  /* onnx reference: mul-reduce with a repeated index */
  static const float sd[] = {5, 1, 1, 1, 5, 4}, su[] = {3, -2, 2, -1, 0, -3};
  static const int64_t si[] = {2, 0, 2};
  static const float swant[] = {10, -1, 1, 1, 0, 24};
  tu_one_node(f, "ScatterND", 3, 1);
  tu_attr_string(f, "reduction", "mul");
  tu_in sins[3] = {{KL_F32, 2, {3, 2}, sd}, {KL_I64, 2, {3, 1}, si}, {KL_F32, 2, {3, 2}, su}};
  assert_int_equal(tu_run_on(f, sins), KILN_OK);
  tu_assert_f32(&f->tout[0], swant, 6, TU_EXACT);
  sins[2].dims[1] = 1;
  tu_assert_status(tu_run_on(f, sins), KILN_ERR_SHAPE, f->e.msg, "input 2 (updates)");
}

/* ---- Resize ---- */

static void test_resize_infer(void **state) {
  tu_fixture *f = *state;
  tu_one_node(f, "Resize", 4, 1);
  int n = kl_graph_symbol(f->g, "n");
  kl_type x = tu_type(KL_F32, 4, (int64_t[]){-1, 3, 20, 30});
  x.dims[0].sym = n;
  kl_type t2 = tu_type(KL_I64, 1, (int64_t[]){2});
  tu_attr_ints(f, "axes", (int64_t[]){-1, 2}, 2);
  tu_attr_string(f, "keep_aspect_ratio_policy", "not_larger");
  /* sizes (w 15, h 5): the smaller scale 0.25 for both, so 20 x 30 -> 5 x 8 (7.5 up) */
  const int64_t sizes[] = {15, 5};
  const kl_type *in[4] = {&x, NULL, NULL, &t2};
  const void *data[4] = {NULL, NULL, NULL, sizes};
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].dims[0].sym, n);
  assert_int_equal(f->out[0].dims[1].size, 3);
  assert_int_equal(f->out[0].dims[2].size, 5);
  assert_int_equal(f->out[0].dims[3].size, 8);

  /* scales: floor(30 * 0.45) = 13; not known yet: unknown dims */
  kl_type tf = tu_type(KL_F32, 1, (int64_t[]){2});
  const float scales[] = {0.45f, 1};
  tu_attr_string(f, "keep_aspect_ratio_policy", "stretch");
  in[2] = &tf, data[2] = scales, in[3] = NULL, data[3] = NULL;
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].dims[2].size, 20);
  assert_int_equal(f->out[0].dims[3].size, 13);
  data[2] = NULL;
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].dims[1].size, 3);
  assert_int_equal(f->out[0].dims[3].size, -1);

  /* a scales input of unknown length (maybe empty, as opset 11 wrote) beside sizes */
  kl_type unknown_len = tu_type(KL_F32, 1, (int64_t[]){-1});
  in[2] = &unknown_len, data[2] = NULL, in[3] = &t2, data[3] = sizes;
  assert_int_equal(tu_infer_with(f, in, data), KILN_OK);
  assert_int_equal(f->out[0].dims[2].size, 5);
  assert_int_equal(f->out[0].dims[3].size, 15);

  /* both scales and sizes; a scale of 0; a bad mode */
  in[2] = &tf, data[2] = scales;
  tu_assert_status(tu_infer_with(f, in, data), KILN_ERR_INVALID_MODEL, f->e.msg,
                   "both scales and sizes");
  const float zero[] = {0, 1};
  in[3] = NULL, data[3] = NULL, data[2] = zero;
  assert_int_equal(tu_infer_with(f, in, data), KILN_ERR_INVALID_ARGUMENT);
  tu_attr_string(f, "mode", "bilinear");
  data[2] = scales;
  tu_assert_status(tu_infer_with(f, in, data), KILN_ERR_INVALID_MODEL, f->e.msg,
                   "expected one of nearest, linear, cubic");
}

static void test_resize_kernel(void **state) {
  tu_fixture *f = *state;
  static const float x[] = {4, 2, -3, 9, -1, -5, 7, -6, 7, 2, -7, -9, -1, -9, -7, 0};
  /* onnx reference: cubic with antialias, 4 x 4 -> 3 x 3 */
  static const float cubic[] = {1.521759271621704f, -0.31915006041526794f, 4.524434566497803f,
                                1.9763436317443848f, -0.003358921967446804f,
                                -6.54373025894165f, 0.0023559769615530968f,
                                -7.79002571105957f, -3.9476494789123535f};
  static const int64_t sizes[] = {1, 1, 3, 3};
  tu_one_node(f, "Resize", 4, 1);
  tu_attr_string(f, "mode", "cubic");
  tu_attr_int(f, "antialias", 1);
  tu_in ins[4] = {{KL_F32, 4, {1, 1, 4, 4}, x}, {0}, {0}, {KL_I64, 1, {4}, sizes}};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 4, sizes);
  tu_assert_f32(&f->tout[0], cubic, 9, TU_TOL(1e-5, 0));

  /* onnx reference: linear, align_corners, scales (0.75, 1.5) -> 3 x 6 */
  static const float lin[] = {4, 2.8f, 1, -2, 1.8f, 9, 3, 0.3f, -1.2f, -0.3f, -3, -7.5f,
                              -1, -5.8f, -8.6f, -7.4f, -4.2f, 0};
  static const float scales[] = {1, 1, 0.75f, 1.5f};
  tu_one_node(f, "Resize", 3, 1);
  tu_attr_string(f, "mode", "linear");
  tu_attr_string(f, "coordinate_transformation_mode", "align_corners");
  ins[2] = (tu_in){KL_F32, 1, {4}, scales};
  assert_int_equal(tu_run_on(f, ins), KILN_OK);
  tu_assert_dims(&f->tout[0], 4, (int64_t[]){1, 1, 3, 6});
  tu_assert_f32(&f->tout[0], lin, 18, TU_TOL(1e-5, 0));

  /* by hand: uint8 linear upsampling rounds half to even and saturates nothing here:
   * [10, 15] at scale 2, half_pixel -> 10, 11.25, 13.75, 15 -> 10, 11, 14, 15 */
  static const uint8_t u8[] = {10, 15}, u8want[] = {10, 11, 14, 15};
  static const float two[] = {2};
  tu_one_node(f, "Resize", 3, 1);
  tu_attr_string(f, "mode", "linear");
  tu_in uins[3] = {{KL_U8, 1, {2}, u8}, {0}, {KL_F32, 1, {1}, two}};
  assert_int_equal(tu_run_on(f, uins), KILN_OK);
  for (int i = 0; i < 4; i++) assert_int_equal(((uint8_t *)f->tout[0].data)[i], u8want[i]);
}

/* ---- the importer's rewrites of older forms ---- */

#define DATA_FIXTURES "tests/unit/fixtures/data/"

/* The one-node model of a fixture folder. */
static kl_graph *load_fixture(const char *name) {
  char path[256];
  snprintf(path, sizeof path, DATA_FIXTURES "%s/model.onnx", name);
  kl_graph *g = tu_load_onnx(path);
  assert_int_equal(g->n_nodes, 1);
  return g;
}

/* The constant at input slot i of node 0 holds the int64 values want[0..n-1]. */
static void assert_const_i64(const kl_graph *g, int i, const int64_t *want, int n) {
  assert_true(g->nodes[0].n_in > i);
  const int64_t *got = tu_const_i64(g, g->nodes[0].in[i], n);
  for (int k = 0; k < n; k++) assert_int_equal(got[k], want[k]);
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
      TU_TEST(test_slice_infer),
      TU_TEST(test_slice_kernel),
      TU_TEST(test_pad_infer),
      TU_TEST(test_pad_modes),
      TU_TEST(test_pad_constant_value),
      TU_TEST(test_expand),
      TU_TEST(test_tile),
      TU_TEST(test_center_crop_pad),
      TU_TEST(test_split),
      TU_TEST(test_compress),
      TU_TEST(test_reverse_sequence),
      TU_TEST(test_trilu),
      TU_TEST(test_depth_space),
      TU_TEST(test_constant_of_shape),
      TU_TEST(test_range),
      TU_TEST(test_size_and_eye_like),
      TU_TEST(test_one_hot),
      TU_TEST(test_non_zero),
      TU_TEST(test_unique),
      TU_TEST(test_gather_scatter_elements),
      TU_TEST(test_gather_scatter_nd),
      TU_TEST(test_resize_infer),
      TU_TEST(test_resize_kernel),
      cmocka_unit_test(test_canon_attributes_to_inputs),
      cmocka_unit_test(test_canon_renamed_ops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
