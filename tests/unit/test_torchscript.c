/* The TorchScript importer on the traces of tests/models/ts/ (make_ts_fixtures.py):
 * what it declares and builds, a run against PyTorch's output, and the archive
 * broken in every way the issue lists (each rewritten here with libzip), each of
 * which must be refused with a message that says what is wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "import/tensorfile.h"
#include "import/tscode.h"
#include "import/torchscript.h"
#include "kiln.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#define TS "tests/models/ts/"
#define MLP TS "mlp/model.pt"

typedef struct tmp {
  char dir[64];
  char path[96];
} tmp;

static int setup(void **state) {
  tmp *t = calloc(1, sizeof *t);
  assert_non_null(t);
  strcpy(t->dir, "/tmp/kiln-ts-XXXXXX");
  assert_non_null(mkdtemp(t->dir));
  snprintf(t->path, sizeof t->path, "%s/model.pt", t->dir);
  *state = t;
  return 0;
}

static int teardown(void **state) {
  tmp *t = *state;
  unlink(t->path);
  assert_int_equal(rmdir(t->dir), 0);
  free(t);
  return 0;
}

/* ---- archives ---- */

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The contents of the entry of src whose name ends with suffix (malloc'd, NUL after). */
static char *read_entry(const char *src, const char *suffix, size_t *len) {
  int err;
  zip_t *z = zip_open(src, ZIP_RDONLY, &err);
  assert_non_null(z);
  char *buf = NULL;
  for (zip_int64_t i = 0; i < zip_get_num_entries(z, 0) && !buf; i++) {
    zip_stat_t st;
    assert_int_equal(zip_stat_index(z, (zip_uint64_t)i, 0, &st), 0);
    if (!ends_with(st.name, suffix)) continue;
    zip_file_t *f = zip_fopen_index(z, (zip_uint64_t)i, 0);
    buf = malloc(st.size + 1);
    assert_true(f && buf);
    assert_int_equal(zip_fread(f, buf, st.size), (zip_int64_t)st.size);
    buf[st.size] = 0;
    *len = st.size;
    zip_fclose(f);
  }
  zip_discard(z);
  assert_non_null(buf);
  return buf;
}

/* Copy src to dst with the entry ending in suffix replaced by data (len bytes), or
 * removed when data is NULL. */
static void rewrite(const char *src, const char *dst, const char *suffix, const void *data,
                    size_t len) {
  int err;
  zip_t *in = zip_open(src, ZIP_RDONLY, &err), *out = zip_open(dst, ZIP_CREATE | ZIP_TRUNCATE, &err);
  assert_true(in && out);
  bool found = false;
  for (zip_int64_t i = 0; i < zip_get_num_entries(in, 0); i++) {
    const char *name = zip_get_name(in, (zip_uint64_t)i, 0);
    size_t n;
    char *body;
    if (ends_with(name, suffix)) {
      found = true;
      if (!data) continue;
      body = malloc(len + 1);
      assert_non_null(body);
      memcpy(body, data, len);
      n = len;
    } else {
      body = read_entry(src, name, &n);
    }
    if (!n) { /* libzip keeps no empty buffer, so it would not free it */
      free(body);
      body = NULL;
    }
    zip_source_t *s = zip_source_buffer(out, body, n, 1);
    assert_non_null(s);
    assert_true(zip_file_add(out, name, s, ZIP_FL_ENC_UTF_8) >= 0);
  }
  assert_true(found);
  zip_discard(in);
  assert_int_equal(zip_close(out), 0);
}

/* Copy src to dst with `from` replaced by `to` (once) in the entry ending in suffix. */
static void edit_text(const char *src, const char *dst, const char *suffix, const char *from,
                      const char *to) {
  size_t len;
  char *text = read_entry(src, suffix, &len);
  char *at = strstr(text, from);
  if (!at) fail_msg("'%s' is not in %s", from, suffix);
  size_t head = (size_t)(at - text), nf = strlen(from), nt = strlen(to);
  char *out = malloc(len - nf + nt + 1);
  assert_non_null(out);
  memcpy(out, text, head);
  memcpy(out + head, to, nt);
  memcpy(out + head + nt, at + nf, len - head - nf + 1);
  rewrite(src, dst, suffix, out, len - nf + nt);
  free(text);
  free(out);
}

static void expect_error(const char *path, const kiln_options *o, kiln_status code,
                         const char *words1, const char *words2) {
  kiln_model *m = NULL;
  kiln_status s = kiln_model_load(path, o, &m);
  const char *msg = kiln_model_error(m);
  if (s != code) fail_msg("status %d (%s), expected %d", s, msg, code);
  if (!strstr(msg, words1) || (words2 && !strstr(msg, words2)))
    fail_msg("'%s' does not say '%s' and '%s'", msg, words1, words2 ? words2 : "");
  assert_non_null(strstr(msg, path));
  kiln_model_free(m);
}

/* ---- what loads ---- */

static void test_declared_io(void **state) {
  (void)state;
  kiln_model *m;
  assert_int_equal(kiln_model_load(MLP, NULL, &m), KILN_OK);
  assert_int_equal(kiln_model_input_count(m), 1);
  assert_int_equal(kiln_model_output_count(m), 1);
  kiln_tensor_info in, out;
  assert_int_equal(kiln_model_input_info(m, 0, &in), KILN_OK);
  assert_string_equal(in.name, "x");
  assert_int_equal(in.dtype, KILN_DTYPE_FLOAT32);
  assert_int_equal(in.rank, 2);
  assert_true(in.dims[0] == -1 && in.dims[1] == 8);
  assert_string_equal(in.dim_names[0], "batch");
  assert_int_equal(kiln_model_output_info(m, 0, &out), KILN_OK);
  assert_string_equal(out.name, "output_0");
  assert_int_equal(out.rank, 2);
  assert_true(out.dims[1] == 4);
  kiln_model_free(m);
  /* token ids keep their dtype */
  assert_int_equal(kiln_model_load(TS "tiny_gpt/model.pt", NULL, &m), KILN_OK);
  assert_int_equal(kiln_model_input_info(m, 0, &in), KILN_OK);
  assert_string_equal(in.name, "tokens");
  assert_int_equal(in.dtype, KILN_DTYPE_INT64);
  kiln_model_free(m);
}

static bool has_node(const kl_graph *g, kl_op op, const char *src, const char *name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (g->nodes[i].op == op && strcmp(g->nodes[i].src, src) == 0 &&
        (!name || strcmp(g->nodes[i].name, name) == 0))
      return true;
  return false;
}

/* The graph as imported: ATen names as node sources, weights named by path. */
static void test_imported_graph(void **state) {
  (void)state;
  kl_graph *g;
  kl_err e = {0};
  assert_int_equal(kl_torchscript_load_file(TS "cnn/model.pt", NULL, &g, &e), KILN_OK);
  assert_true(has_node(g, KL_OP_Conv, "aten::_convolution", "stem/_convolution"));
  assert_true(has_node(g, KL_OP_Conv, "aten::_convolution", "block.conv2/_convolution"));
  assert_true(has_node(g, KL_OP_BatchNormalization, "aten::batch_norm", NULL));
  assert_true(has_node(g, KL_OP_MaxPool, "aten::max_pool2d", NULL));
  assert_true(has_node(g, KL_OP_AveragePool, "aten::avg_pool2d", NULL));
  assert_true(has_node(g, KL_OP_GlobalAveragePool, "aten::adaptive_avg_pool2d", NULL));
  assert_true(has_node(g, KL_OP_HardSwish, "aten::hardswish", NULL));
  assert_true(has_node(g, KL_OP_Add, "aten::add_", NULL));
  assert_true(has_node(g, KL_OP_Relu, "aten::relu_", NULL));
  assert_true(has_node(g, KL_OP_Flatten, "aten::flatten", NULL));
  assert_true(has_node(g, KL_OP_Gemm, "aten::linear", NULL));
  int w = kl_graph_find_value(g, "block.conv1.weight");
  assert_true(w >= 0);
  assert_int_equal(g->values[w].kind, KL_VALUE_CONST);
  assert_int_equal(g->values[w].type.rank, 4);
  assert_int_equal(kl_graph_verify(g, &e), KILN_OK);
  kl_graph_free(g);
  /* attention as the pattern kiln's passes fuse */
  assert_int_equal(kl_torchscript_load_file(TS "transformer/model.pt", NULL, &g, &e), KILN_OK);
  assert_true(has_node(g, KL_OP_Softmax, "aten::scaled_dot_product_attention", NULL));
  assert_true(has_node(g, KL_OP_LayerNormalization, "aten::layer_norm", NULL));
  kl_graph_free(g);
}

static kl_tensor read_pb(const char *path) {
  kl_tensor t;
  kl_err e = {0};
  assert_int_equal(kl_tensorfile_read(path, INT64_C(1) << 30, &t, NULL, &e), KILN_OK);
  return t;
}

/* Run a case from a file or from memory and compare with PyTorch's output; input_types
 * (NULL for none) declares the inputs of an archive of torch 1.x; model (NULL for
 * dir/model.pt) is an archive to run on dir's test data. */
static void run_model(const char *dir, const char *model, bool from_memory, int opt_level,
                      const char *input_types) {
  char path[256];
  kiln_options *o;
  kiln_model *m;
  kiln_session *s;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "opt_level", opt_level), KILN_OK);
  if (input_types)
    assert_int_equal(kiln_options_set_string(o, "input_types", input_types), KILN_OK);
  snprintf(path, sizeof path, "%s/model.pt", dir);
  if (model) snprintf(path, sizeof path, "%s", model);
  if (from_memory) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(kiln_model_load_memory(buf, n, o, &m), KILN_OK);
  } else {
    kiln_status st = kiln_model_load(path, o, &m);
    if (st != KILN_OK) fail_msg("%s", kiln_model_error(m));
  }
  assert_int_equal(kiln_session_create(m, NULL, &s), KILN_OK);
  snprintf(path, sizeof path, "%s/test_data_set_0/input_0.pb", dir);
  kl_tensor x = read_pb(path);
  kiln_tensor_info in;
  assert_int_equal(kiln_model_input_info(m, 0, &in), KILN_OK);
  assert_int_equal(kiln_session_set_input(s, in.name, (kiln_dtype)x.dtype, x.rank, x.dims,
                                          x.data, kl_tensor_nbytes(&x)), KILN_OK);
  assert_int_equal(kiln_session_run(s), KILN_OK);
  snprintf(path, sizeof path, "%s/test_data_set_0/output_0.pb", dir);
  kl_tensor want = read_pb(path);
  kiln_tensor_info info;
  const float *got;
  assert_int_equal(kiln_session_get_output(s, 0, &info, (const void **)&got), KILN_OK);
  assert_int_equal(info.rank, want.rank);
  for (int64_t i = 0; i < kl_tensor_numel(&want); i++) {
    float w = ((const float *)want.data)[i];
    if (fabsf(got[i] - w) > 1e-6f + 1e-4f * fabsf(w))
      fail_msg("%s element %lld: %g, PyTorch %g", dir, (long long)i, got[i], w);
  }
  free(x.data);
  free(want.data);
  kiln_session_free(s);
  kiln_model_free(m);
  kiln_options_free(o);
}

static void run_typed(const char *dir, bool from_memory, int opt_level,
                      const char *input_types) {
  run_model(dir, NULL, from_memory, opt_level, input_types);
}

static void run_case(const char *dir, bool from_memory, int opt_level) {
  run_typed(dir, from_memory, opt_level, NULL);
}

static void test_runs_like_pytorch(void **state) {
  (void)state;
  run_case(TS "mlp", false, 0);
  run_case(TS "mlp", true, 2);
  run_case(TS "strided", false, 0); /* views: transposed, offset, strided storages */
  run_case(TS "transformer", true, 2);
  run_case(TS "views", false, 0); /* in-place writes through views */
  run_case(TS "views", true, 2);
  run_case(TS "ops2", false, 0); /* arange of the batch's length, argsort, gather */
  run_case(TS "ops2", true, 2);
}

/* ---- archives of torch 1.13 (tests/models/ts/t113): no traced_inputs.pkl ---- */

#define T113 TS "t113/"

static kiln_options *typed(const char *input_types) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "input_types", input_types), KILN_OK);
  return o;
}

static void expect_bad_types(const char *input_types, const char *words) {
  kiln_options *o = typed(input_types);
  expect_error(T113 "mlp/model.pt", o, KILN_ERR_INVALID_ARGUMENT, "input_types", words);
  kiln_options_free(o);
}

/* The inputs' types come from the option input_types; without it an input is float32
 * of unknown rank, which only some models get by with. */
static void test_torch113_inputs(void **state) {
  (void)state;
  kiln_model *m;
  kiln_tensor_info in;
  assert_int_equal(kiln_model_load(T113 "mlp/model.pt", NULL, &m), KILN_OK);
  assert_int_equal(kiln_model_input_info(m, 0, &in), KILN_OK);
  assert_string_equal(in.name, "x");
  assert_int_equal(in.dtype, KILN_DTYPE_FLOAT32);
  assert_int_equal(in.rank, -1);
  kiln_model_free(m);
  expect_error(T113 "transformer/model.pt", NULL, KILN_ERR_UNSUPPORTED,
               "traced_inputs.pkl", "input_types");
  kiln_options *o = typed("x:float32[2,3,16,16]");
  assert_int_equal(kiln_model_load(T113 "cnn/model.pt", o, &m), KILN_OK);
  assert_int_equal(kiln_model_input_info(m, 0, &in), KILN_OK);
  assert_int_equal(in.rank, 4);
  assert_true(in.dims[0] == -1 && in.dims[1] == 3 && in.dims[2] == 16 && in.dims[3] == 16);
  assert_string_equal(in.dim_names[0], "batch");
  kiln_model_free(m);
  /* the archive's own traced_inputs.pkl wins */
  assert_int_equal(kiln_options_set_string(o, "input_types", "x:float32[3,5]"), KILN_OK);
  assert_int_equal(kiln_model_load(MLP, o, &m), KILN_OK);
  assert_int_equal(kiln_model_input_info(m, 0, &in), KILN_OK);
  assert_true(in.rank == 2 && in.dims[1] == 8);
  kiln_model_free(m);
  /* ... and then the list is not read (kiln check names inputs after its test data) */
  assert_int_equal(kiln_options_set_string(o, "input_types", "input:float32[3,5]"), KILN_OK);
  assert_int_equal(kiln_model_load(MLP, o, &m), KILN_OK);
  kiln_model_free(m);
  /* "" unsets it */
  assert_int_equal(kiln_options_set_string(o, "input_types", ""), KILN_OK);
  expect_error(T113 "transformer/model.pt", o, KILN_ERR_UNSUPPORTED, "input_types", NULL);
  kiln_options_free(o);
  o = typed("tokens:int64[2,6]");
  assert_int_equal(kiln_model_load(T113 "tiny_gpt/model.pt", o, &m), KILN_OK);
  assert_int_equal(kiln_model_input_info(m, 0, &in), KILN_OK);
  assert_int_equal(in.dtype, KILN_DTYPE_INT64);
  kiln_model_free(m);
  kiln_options_free(o);
  expect_bad_types("x:float32[2,8", "name:dtype[d0,d1,...]");
  expect_bad_types("x:float99[2,8]", "at 'x:float99[2,8]'");
  expect_bad_types("x[2,8]", "name:dtype[d0,d1,...]");
  expect_bad_types("x:float32[2,-8]", "name:dtype[d0,d1,...]");
  expect_bad_types("x:float32[2,8]y", "name:dtype[d0,d1,...]");
  expect_bad_types("x:float32[1,1,1,1,1,1,1,1,1]", "name:dtype[d0,d1,...]");
  expect_bad_types("x:float32[99999999999999999999]", "name:dtype[d0,d1,...]");
  expect_bad_types("x:float32[2,8];y:int64[2]", "names 'y', which is not a parameter");
  /* names that are none of forward's, one per parameter: taken by position (kiln check's
   * test inputs saved as "input" for forward(self, x)); more entries than parameters,
   * or a list naming some parameters and some others, is still refused */
  o = typed("input:float32[2,3,16,16]");
  assert_int_equal(kiln_model_load(T113 "cnn/model.pt", o, &m), KILN_OK);
  assert_int_equal(kiln_model_input_info(m, 0, &in), KILN_OK);
  assert_string_equal(in.name, "x");
  assert_true(in.rank == 4 && in.dims[0] == -1 && in.dims[1] == 3 && in.dims[3] == 16);
  kiln_model_free(m);
  kiln_options_free(o);
  expect_bad_types("input:float32[2,8];y:int64[2]",
                   "names 'input', which is not a parameter of forward (forward's parameters: x;");
}

/* Every model of tests/models/ts/t113 against torch 1.13's eager output (kiln check
 * runs them too, with the types its test data declare). */
static void test_torch113_runs(void **state) {
  (void)state;
  run_typed(T113 "mlp", false, 0, "x:float32[4,8]");
  run_typed(T113 "cnn", true, 2, "x:float32[2,3,16,16]");
  run_typed(T113 "mobile", false, 2, "x:float32[2,3,16,16]");
  run_typed(T113 "transformer", false, 0, "src:float32[2,5,16]");
  run_typed(T113 "transformer", true, 2, "src:float32[2,5,16]");
  run_typed(T113 "tiny_gpt", false, 0, "tokens:int64[2,6]"); /* tril, triu, ~, -inf */
  run_typed(T113 "tiny_gpt", true, 2, "tokens:int64[2,6]");
  run_typed(T113 "strided", false, 0, "x:float32[3,8]");
  run_typed(T113 "ops", false, 2, "x:float32[2,4,6,6]");
  run_typed(T113 "views", false, 2, "x:float32[2,4,6]");
  run_typed(T113 "views_after_writes", true, 0, "x:float32[2,5,6]");
}

/* The outputs of MLP with its last line replaced by `tail` (which uses y, the MLP's
 * output [4, 4]); want[16] is PyTorch's y. Returns the count of outputs. */
static int run_mlp_tail(const char *path, const char *tail, const float *got[2],
                        kiln_session **sp, kiln_model **mp) {
  edit_text(MLP, path, "/code/__torch__.py", "    return (net).forward(x, )\n", tail);
  assert_int_equal(kiln_model_load(path, NULL, mp), KILN_OK);
  assert_int_equal(kiln_session_create(*mp, NULL, sp), KILN_OK);
  kl_tensor x = read_pb(TS "mlp/test_data_set_0/input_0.pb");
  assert_int_equal(kiln_session_set_input(*sp, "x", (kiln_dtype)x.dtype, x.rank, x.dims,
                                          x.data, kl_tensor_nbytes(&x)), KILN_OK);
  assert_int_equal(kiln_session_run(*sp), KILN_OK);
  free(x.data);
  int n = kiln_model_output_count(*mp);
  for (int k = 0; k < n && k < 2; k++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_session_get_output(*sp, k, &info, (const void **)&got[k]), KILN_OK);
    assert_int_equal(info.dtype, KILN_DTYPE_FLOAT32);
    assert_true(info.rank == 2 && info.dims[0] == 4 && info.dims[1] == 4);
  }
  return n;
}

/* tril, triu, bitwise_not and logical_not, and the literals inf and nan, on MLP's output. */
static void test_masks(void **state) {
  tmp *t = *state;
  kl_tensor want = read_pb(TS "mlp/test_data_set_0/output_0.pb");
  const float *w = want.data, *got[2];
  kiln_session *s;
  kiln_model *m;
  assert_int_equal(run_mlp_tail(t->path, "    y = (net).forward(x, )\n"
                                "    return (torch.tril(y, -1), torch.triu(y))\n", got, &s, &m), 2);
  for (int i = 0; i < 16; i++) {
    int r = i / 4, c = i % 4;
    float lo = c <= r - 1 ? w[i] : 0, up = c >= r ? w[i] : 0;
    if (fabsf(got[0][i] - lo) > 1e-4f * (1 + fabsf(lo)) || fabsf(got[1][i] - up) > 1e-4f * (1 + fabsf(up)))
      fail_msg("element %d: tril %g, triu %g, from %g", i, got[0][i], got[1][i], w[i]);
  }
  kiln_session_free(s);
  kiln_model_free(m);
  /* masked_fill with -inf and nan where a not-mask says */
  assert_int_equal(run_mlp_tail(t->path, "    y = (net).forward(x, )\n"
                                "    a = torch.masked_fill(y, torch.logical_not(torch.gt(y, 0.)), -inf)\n"
                                "    b = torch.masked_fill(y, torch.bitwise_not(torch.gt(y, 0.)), nan)\n"
                                "    return (a, b)\n", got, &s, &m), 2);
  int negative = 0;
  for (int i = 0; i < 16; i++) {
    negative += w[i] <= 0;
    bool ok = w[i] > 0 ? fabsf(got[0][i] - w[i]) <= 1e-4f * (1 + fabsf(w[i])) && got[1][i] == got[0][i]
                       : isinf(got[0][i]) && got[0][i] < 0 && isnan(got[1][i]);
    if (!ok) fail_msg("element %d: %g and %g, from %g", i, got[0][i], got[1][i], w[i]);
  }
  assert_true(negative > 0);
  kiln_session_free(s);
  kiln_model_free(m);
  /* bitwise_not of integers: -v - 1 */
  assert_int_equal(run_mlp_tail(t->path, "    y = (net).forward(x, )\n"
                                "    i = torch.to(torch.mul(y, 100.), 4)\n"
                                "    return (y, torch.to(torch.bitwise_not(i), 6))\n", got, &s, &m), 2);
  for (int i = 0; i < 16; i++)
    if (got[1][i] != (float)(-(int64_t)(got[0][i] * 100.f) - 1))
      fail_msg("element %d: ~int(%g * 100) is %g", i, got[0][i], got[1][i]);
  kiln_session_free(s);
  kiln_model_free(m);
  free(want.data);
  edit_text(MLP, t->path, "/code/__torch__.py", "    return (net).forward(x, )\n",
            "    return torch.bitwise_not((net).forward(x, ))\n");
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "aten::bitwise_not",
               "of a float32 tensor: expected bool or an integer type");
  edit_text(MLP, t->path, "/code/__torch__.py", "    return (net).forward(x, )\n",
            "    return torch.tril(torch.select((net).forward(x, ), 0, 0))\n");
  expect_error(t->path, NULL, KILN_ERR_INVALID_MODEL, "aten::tril", "rank 2 or more, found rank 1");
}

/* ---- what is refused ---- */

static void test_truncated_archive(void **state) {
  tmp *t = *state;
  size_t len;
  FILE *f = fopen(MLP, "rb");
  assert_non_null(f);
  char *buf = malloc(1 << 20);
  assert_non_null(buf);
  len = fread(buf, 1, 1 << 20, f);
  fclose(f);
  for (size_t cut = 0; cut < len; cut += len / 7 + 1) {
    f = fopen(t->path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, cut, f), cut);
    fclose(f);
    expect_error(t->path, NULL, KILN_ERR_INVALID_MODEL, "not a readable ZIP archive", NULL);
    kiln_model *m;
    assert_int_not_equal(kiln_model_load_memory(buf, cut, NULL, &m), KILN_OK);
    kiln_model_free(m);
  }
  free(buf);
}

static void test_missing_parts(void **state) {
  tmp *t = *state;
  rewrite(MLP, t->path, "/data/0", NULL, 0);
  expect_error(t->path, NULL, KILN_ERR_INVALID_MODEL, "no entry", "model/data/0");
  rewrite(MLP, t->path, "/data.pkl", NULL, 0);
  expect_error(t->path, NULL, KILN_ERR_INVALID_MODEL, "without <folder>/data.pkl", NULL);
  rewrite(MLP, t->path, "/code/__torch__.py", NULL, 0);
  expect_error(t->path, NULL, KILN_ERR_INVALID_MODEL, "no entry", "code/__torch__.py");
  rewrite(MLP, t->path, "/constants.pkl", NULL, 0);
  expect_error(t->path, NULL, KILN_ERR_INVALID_MODEL, "constants.pkl", NULL);
}

static void test_short_storage(void **state) {
  tmp *t = *state;
  rewrite(MLP, t->path, "/data/0", "abc", 3);
  expect_error(t->path, NULL, KILN_ERR_INVALID_MODEL, "holds 3 bytes", "need 512");
}

static void test_garbage_pickle(void **state) {
  tmp *t = *state;
  rewrite(MLP, t->path, "/data.pkl", "garbage!", 8);
  kiln_model *m;
  assert_int_not_equal(kiln_model_load(t->path, NULL, &m), KILN_OK);
  assert_non_null(strstr(kiln_model_error(m), "data.pkl: byte"));
  kiln_model_free(m);
  /* a pickle that is not a module */
  rewrite(MLP, t->path, "/data.pkl", "\x80\x02K\x07.", 5);
  expect_error(t->path, NULL, KILN_ERR_INVALID_MODEL, "data.pkl holds a int", NULL);
}

static void test_deep_pickle(void **state) {
  tmp *t = *state;
  size_t n = 100000;
  char *deep = malloc(n + 4);
  assert_non_null(deep);
  deep[0] = (char)0x80;
  deep[1] = 2;
  deep[2] = 'N';
  memset(deep + 3, 0x85, n); /* TUPLE1 again and again */
  deep[n + 3] = '.';
  rewrite(MLP, t->path, "/data.pkl", deep, n + 4);
  expect_error(t->path, NULL, KILN_ERR_LIMIT, "nested deeper than the limit", NULL);
  free(deep);
}

static void test_oversized(void **state) {
  tmp *t = *state;
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "max_tensor_bytes", 256), KILN_OK);
  expect_error(MLP, o, KILN_ERR_LIMIT, "net.0.weight", "limit of 256 bytes");
  kiln_options_free(o);
  /* a pickle over 64 MiB (it compresses to little) */
  size_t n = ((size_t)64 << 20) + 1;
  char *big = calloc(1, n);
  assert_non_null(big);
  rewrite(MLP, t->path, "/data.pkl", big, n);
  free(big);
  expect_error(t->path, NULL, KILN_ERR_LIMIT, "data.pkl", "over the limit");
  /* the weight and bias a layer_norm without them gets are tensors too: within the
   * limit (they were made unchecked: 400 KB here, 2.1 GB from a small file) */
  static const char ln[] = "class MLP(Module):\n  def forward(self, x):\n"
                           "    return torch.layer_norm(x, [100000], None, None)\n";
  rewrite(MLP, t->path, "/code/__torch__.py", ln, strlen(ln));
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "max_tensor_bytes", 1000), KILN_OK);
  expect_error(t->path, o, KILN_ERR_LIMIT, "100000 elements", "limit of 1000 bytes");
  kiln_options_free(o);
}

static void test_garbage_code(void **state) {
  tmp *t = *state;
  static const struct {
    const char *code, *why;
  } cases[] = {
      {"class 1:\n", "expected a class name"},
      {"class MLP(Module):\n  def forward(self, x):\n    return x +\n", "operator '+'"},
      {"class MLP(Module):\n  def forward(self, x):\n    y = \"open\n", "unterminated string"},
      {"class MLP(Module):\n  def forward(self, x):\n    return (((x\n", "inside brackets"},
      {"class MLP(Module):\n  def forward(self, x):\n    y = x\n", "ends without return"},
      {"class MLP(Module):\n  def forward(self, x):\n    return (self.net).forward(x, x)\n",
       "forward takes 1 arguments, called with 2"},
      {"class MLP(Module):\n  def forward(self, x):\n    return y\n", "'y' is not defined"},
      {"class MLP(Module):\n  def forward(self, x):\n    return self.nope\n", "no attribute 'nope'"},
      {"class MLP(Module):\n  def forward(self, x):\n    return CONSTANTS.c9\n", "CONSTANTS.c9"},
      {"class MLP(Module):\n  def forward(self, x):\n    return 99999999999999999999\n",
       "beyond 64 bits"},
      {"class Other(Module):\n  pass\n", "has no class MLP"},
      {"\x01", "a character kiln does not read"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rewrite(MLP, t->path, "/code/__torch__.py", cases[i].code, strlen(cases[i].code));
    kiln_model *m;
    assert_int_not_equal(kiln_model_load(t->path, NULL, &m), KILN_OK);
    const char *msg = kiln_model_error(m);
    if (!strstr(msg, cases[i].why)) fail_msg("case %zu: '%s' does not say '%s'", i, msg, cases[i].why);
    kiln_model_free(m);
  }
  /* brackets nested past the parser's limit */
  char deep[700] = "class MLP(Module):\n  def forward(self, x):\n    return ";
  size_t at = strlen(deep);
  memset(deep + at, '[', 200);
  memset(deep + at + 200, ']', 200);
  deep[at + 400] = '\n';
  deep[at + 401] = 0;
  rewrite(MLP, t->path, "/code/__torch__.py", deep, strlen(deep));
  expect_error(t->path, NULL, KILN_ERR_LIMIT, "nested deeper", NULL);
}

/* annotate(Type, value) keeps only the value: the tracer writes it for an empty list
 * argument (avg_pool2d's stride, tests/models/ts/ops), and the type's brackets and
 * commas must not be read as an index or as more arguments. */
static void test_annotate(void **state) {
  (void)state;
  static const char src[] =
      "class M(Module):\n"
      "  def forward(self: __torch__.M, x: Tensor) -> Tensor:\n"
      "    y = torch.avg_pool2d(x, [2, 2], annotate(List[int], []), [1, 1], True, False)\n"
      "    z = annotate(Optional[Tuple[int, List[int]]], None)\n"
      "    return y\n";
  kl_err e = {0};
  kl_ts_code *code;
  assert_int_equal(kl_tscode_parse(src, strlen(src), "t.py", &code, &e), KILN_OK);
  const kl_ts_method *m = kl_tscode_method(kl_tscode_class(code, "M"), "forward");
  assert_non_null(m);
  assert_int_equal(m->n_body, 3);
  const kl_ts_expr *pool = m->body[0].value;
  assert_int_equal(pool->kind, KL_TSE_CALL);
  assert_int_equal(pool->n_args, 6);
  const kl_ts_expr *stride = pool->args[2];
  assert_int_equal(stride->kind, KL_TSE_CALL);
  assert_int_equal(stride->obj->kind, KL_TSE_NAME);
  assert_string_equal(stride->obj->s, "annotate");
  assert_int_equal(stride->n_args, 1);
  assert_int_equal(stride->args[0]->kind, KL_TSE_LIST);
  assert_int_equal(stride->args[0]->n_args, 0);
  const kl_ts_expr *none = m->body[1].value;
  assert_int_equal(none->n_args, 1);
  assert_int_equal(none->args[0]->kind, KL_TSE_NONE);
  kl_tscode_free(code);
  /* a type without a value */
  static const char bad[] = "class M(Module):\n  def forward(self, x):\n"
                            "    return annotate(List[int])\n";
  e = (kl_err){0};
  assert_int_equal(kl_tscode_parse(bad, strlen(bad), "t.py", &code, &e), KILN_ERR_INVALID_MODEL);
  assert_null(code);
  if (!strstr(e.msg, "t.py:3: expected ','"))
    fail_msg("'%s' does not say where ',' is missing", e.msg);
}

/* Scripted control flow kiln does not lower is refused with the line and the
 * construct; malformed blocks are errors, not crashes. (tests/models/ts/script/ checks
 * what it lowers against PyTorch.) */
static void test_control_flow(void **state) {
  tmp *t = *state;
  static const struct {
    const char *to, *why;
    kiln_status code;
  } cases[] = {
      {"    for i in range(3):\n      break\n    net = self.net\n",
       "__torch__.py:10: 'break' is not supported in scripted code", KILN_ERR_UNSUPPORTED},
      {"    while True:\n      continue\n    net = self.net\n",
       "'continue' is not supported", KILN_ERR_UNSUPPORTED},
      {"    with x:\n      net = self.net\n", "'with' is not supported", KILN_ERR_UNSUPPORTED},
      {"    for i in x:\n      net = self.net\n", "other than range(...)", KILN_ERR_UNSUPPORTED},
      {"    for i in range(0, 3, 0):\n      net = self.net\n",
       "__torch__.py:9: range: range() with a step of 0",
       KILN_ERR_INVALID_MODEL},
      {"    for i in range(0, 3, 1, 2):\n      net = self.net\n",
       "__torch__.py:9: expected range with 1 to 3 arguments", KILN_ERR_INVALID_MODEL},
      {"    for i in range(0, 3, torch.size(x, 0)):\n      net = self.net\n",
       "argument 'step' is a value computed by the graph, expected an int known",
       KILN_ERR_UNSUPPORTED},
      {"    for i in range(-9223372036854775807, 9223372036854775807):\n"
       "      net = self.net\n", "has more than 2^63 - 1 elements", KILN_ERR_LIMIT},
      /* unrolled (its body changes a list) for ever, but for the limit */
      {"    _l = [1, 2]\n    for i in range(1000000000000):\n      torch.reverse(_l)\n"
       "    net = self.net\n", "__torch__.py:10: loops unrolled while building the graph (a "
       "known count whose body changes a list or dict, or a while that appends) ran more than "
       "65536 passes in all", KILN_ERR_LIMIT},
      {"    for i in range(3):\n      if bool(torch.gt(torch.sum(x), 0)):\n        return x\n"
       "    net = self.net\n", "__torch__.py:10: a return inside a loop", KILN_ERR_UNSUPPORTED},
      {"    if bool(torch.gt(torch.sum(x), 0)):\n      return (x, x)\n    net = self.net\n",
       "__torch__.py:9: the two paths of this if return values of different structure",
       KILN_ERR_UNSUPPORTED},
      {"    _l = torch.slice([1, 2, 3], torch.size(x, 0))\n    net = self.net\n",
       "__torch__.py:9: aten::slice: a list slice whose 'start' the graph computes (from a dim "
       "whose size the data decides): the length of the list it makes would be known only at "
       "run time; expected an int known when the graph is built", KILN_ERR_UNSUPPORTED},
      {"    _l = torch.slice([1, 2, 3], None, torch.neg(torch.size(x, 0)))\n"
       "    net = self.net\n", "__torch__.py:9: aten::slice: a list slice whose 'end' the graph "
       "computes", KILN_ERR_UNSUPPORTED},
      {"    _l = torch.slice([1, 2, 3], 0, 3, 0)\n    net = self.net\n",
       "__torch__.py:9: aten::slice: a list slice with a step of 0 (ValueError",
       KILN_ERR_INVALID_MODEL},
      {"    _l = torch.slice([1, 2, 3], \"a\")\n    net = self.net\n",
       "__torch__.py:9: aten::slice: argument 'start' is str, expected an int or None",
       KILN_ERR_UNSUPPORTED},
      {"    _l = torch.mul([1, 2], torch.size(x, 0))\n    net = self.net\n",
       "__torch__.py:9: aten::mul: a list repeated a number of times that the graph computes "
       "(from a dim whose size the data decides)", KILN_ERR_UNSUPPORTED},
      {"    _l = torch.mul([x], 1.5)\n    net = self.net\n",
       "__torch__.py:9: aten::mul: argument 'other' is float, expected an int (the times a list "
       "is repeated)", KILN_ERR_UNSUPPORTED},
      {"    _s = torch.sum([1, torch.size(x, 0)])\n    net = self.net\n",
       "__torch__.py:9: aten::sum: argument 'self' is list, expected a list of numbers known",
       KILN_ERR_UNSUPPORTED},
      {"    _d = {\"a\": x}\n    _y = torch.pop(_d, \"b\")\n    net = self.net\n",
       "__torch__.py:10: aten::pop of key 'b', which the dict does not hold, without a default "
       "(KeyError)", KILN_ERR_INVALID_MODEL},
      {"    _d = {\"a\": x}\n    if bool(torch.gt(torch.sum(x), 0)):\n"
       "      _y = torch.pop(_d, \"a\")\n    net = self.net\n",
       "__torch__.py:11: aten::pop inside a loop or an if on the data (a dict",
       KILN_ERR_UNSUPPORTED},
      {"    _d = {\"a\": x}\n    _k = torch.keys(_d)\n    for _i in range(torch.size(x, 0)):\n"
       "      _y = _d[_k[_i]]\n    net = self.net\n", "__torch__.py:12: an element, chosen by "
       "the data, of a list that is not of numbers known now or of tensors",
       KILN_ERR_UNSUPPORTED},
      {"    if bool(torch.gt(torch.sum(x), 0)):\n      _t = ((x, x), x)\n    else:\n"
       "      _t = ((x, x), x)\n    net = self.net\n", "'_t' is set in the branches of an if "
       "on the data to tuples holding tuples", KILN_ERR_UNSUPPORTED},
      {"    _d = {x: 1}\n    net = self.net\n",
       "__torch__.py:9: a dict key that is not a string", KILN_ERR_UNSUPPORTED},
      {"    _d = {\"a\": x}\n    _y = _d[\"b\"]\n    net = self.net\n",
       "__torch__.py:10: a key that the dict does not hold", KILN_ERR_INVALID_MODEL},
      {"    _d = {\"a\": x}\n    if bool(torch.gt(torch.sum(x), 0)):\n"
       "      torch._set_item(_d, \"b\", x)\n    net = self.net\n",
       "__torch__.py:11: aten::_set_item inside a loop or an if on the data (a dict",
       KILN_ERR_UNSUPPORTED},
      {"    _d = {\"a\": x}\n    torch._set_item(_d, 1, x)\n    net = self.net\n",
       "__torch__.py:10: aten::_set_item of a dict by a key that is not a string",
       KILN_ERR_UNSUPPORTED},
      {"    _d = {\"a\": x}\n    _i = torch.popitem(_d)\n    net = self.net\n",
       "__torch__.py:10: aten::popitem of a dict (kiln reads len, in, get, pop, setdefault, "
       "update, keys, values, items", KILN_ERR_UNSUPPORTED},
      {"    _d = {\"a\": x}\n    if bool(torch.gt(torch.sum(x), 0)):\n"
       "      _y = torch.setdefault(_d, \"b\", x)\n    net = self.net\n",
       "__torch__.py:11: aten::setdefault inside a loop or an if on the data (a dict",
       KILN_ERR_UNSUPPORTED},
      {"    _d = {\"a\": x}\n    if bool(torch.gt(torch.sum(x), 0)):\n"
       "      torch.update(_d, {\"b\": x})\n    net = self.net\n",
       "__torch__.py:11: aten::update inside a loop or an if on the data (a dict",
       KILN_ERR_UNSUPPORTED},
      {"    _l = [x]\n    _2 = torch.insert(_l, torch.size(x, 0), x)\n    net = self.net\n",
       "__torch__.py:10: aten::insert at an index that is not an int known while building",
       KILN_ERR_UNSUPPORTED},
      {"    _l = [x]\n    if bool(torch.gt(torch.sum(x), 0)):\n      torch.insert(_l, 0, x)\n"
       "    net = self.net\n", "__torch__.py:11: aten::insert inside a loop or an if on the "
       "data (a list", KILN_ERR_UNSUPPORTED},
      {"    _d = torch.dict([1, 2])\n    net = self.net\n", "__torch__.py:9: aten::dict of a "
       "value that is not a dict or a list of (key, value) tuples", KILN_ERR_UNSUPPORTED},
      {"    _n = (self).__len__()\n    net = self.net\n", "__torch__.py:9: __len__ of module "
       "'<top>' (", KILN_ERR_INVALID_MODEL},
      {"    _n = ops.prim.min(annotate(List[int], []))\n    net = self.net\n",
       "__torch__.py:9: prim::min: min of an empty list (ValueError)", KILN_ERR_INVALID_MODEL},
      {"    _t = torch.tensor([1, [2]])\n    net = self.net\n", "__torch__.py:9: aten::tensor: "
       "argument 'data' is list, expected a number or rectangular lists of numbers known",
       KILN_ERR_UNSUPPORTED},
      {"    _t = torch.tensor(\"a\")\n    net = self.net\n", "__torch__.py:9: aten::tensor: "
       "argument 'data' is str, expected a number", KILN_ERR_UNSUPPORTED},
      {"    _p = torch.pow(0, -1)\n    net = self.net\n", "__torch__.py:9: aten::pow: 0 to a "
       "negative power (ZeroDivisionError)", KILN_ERR_INVALID_MODEL},
      {"    _p = torch.pow(3, 99)\n    net = self.net\n", "__torch__.py:9: aten::pow: 3 ** 99 "
       "overflows 64 bits", KILN_ERR_INVALID_MODEL},
      {"    _p = torch.pop(annotate(List[int], []))\n    net = self.net\n", "__torch__.py:9: "
       "aten::pop of a list of 0 at index -1 (IndexError)", KILN_ERR_INVALID_MODEL},
      {"    _p = torch.pop([1, 2], torch.size(x, 0))\n    net = self.net\n", "__torch__.py:9: "
       "aten::pop of a list at an index that is not an int known while building",
       KILN_ERR_UNSUPPORTED},
      {"    _l = [1]\n    torch.extend(_l, 2)\n    net = self.net\n", "__torch__.py:10: "
       "aten::extend of a list with other arguments than a list", KILN_ERR_INVALID_MODEL},
      {"    _l = [1]\n    if bool(torch.gt(torch.sum(x), 0)):\n      torch.reverse(_l)\n"
       "    net = self.net\n", "__torch__.py:11: aten::reverse inside a loop or an if on the "
       "data (a list", KILN_ERR_UNSUPPORTED},
      {"    _d = {\"a\": x}\n    _i = torch.pop(_d, 1)\n    net = self.net\n",
       "__torch__.py:10: aten::pop of a dict by a key that is not a string", KILN_ERR_UNSUPPORTED},
      {"    _d = {\"a\" x}\n    net = self.net\n", "__torch__.py:9: expected ':'",
       KILN_ERR_INVALID_MODEL},
      {"    _l = torch.add([1, 2, 3], 4)\n    net = self.net\n",
       "__torch__.py:9: aten::add: argument 'other' is int, expected a list", KILN_ERR_UNSUPPORTED},
      {"    ops.prim.RaiseException(\"boom\")\n    net = self.net\n",
       "__torch__.py:9: the scripted code raises an exception for these inputs: boom",
       KILN_ERR_INVALID_MODEL},
      {"    _c = torch.__contains__([1, 2], torch.size(x, 0))\n    net = self.net\n",
       "__torch__.py:9: aten::__contains__: 'in' of a value that is not known",
       KILN_ERR_UNSUPPORTED},
      {"    _c = torch.eq([1, 2], [torch.size(x, 0), 2])\n    net = self.net\n",
       "a comparison of lists whose elements are not known", KILN_ERR_UNSUPPORTED},
      {"    y : Tensor\n    net = self.net\n", "expected '=' after an "
       "annotated name", KILN_ERR_INVALID_MODEL},
      {"    _l = annotate(List[Tensor], [])\n    if bool(torch.gt(torch.sum(x), 0)):\n"
       "      _2 = torch.append(_l, x)\n    net = self.net\n",
       "__torch__.py:11: aten::append inside a loop or an if on the data", KILN_ERR_UNSUPPORTED},
      /* (a list appended to once per pass, and named nowhere else in the body, is the
       * Loop's scan output: test_stacked_list) */
      {"    _l = annotate(List[Tensor], [])\n    for i in range(torch.size(x, 0)):\n"
       "      _2 = torch.append(_l, x)\n      _3 = torch.len(_l)\n    net = self.net\n",
       "__torch__.py:11: aten::append inside a loop or an if on the data", KILN_ERR_UNSUPPORTED},
      {"    _l = annotate(List[Tensor], [])\n    for i in range(9223372036854775807):\n"
       "      _2 = torch.append(_l, x)\n    net = self.net\n",
       "__torch__.py:11: list operations (append, +, slices) that copy more than 1048576", KILN_ERR_LIMIT},
      {"    _l = annotate(List[Tensor], [])\n    _c = True\n    while _c:\n"
       "      _2 = torch.append(_l, x)\n      _c = bool(torch.gt(torch.sum(x), 0))\n"
       "    net = self.net\n", "__torch__.py:11: a while loop that appends to a list, whose "
       "condition the data decides after 1 passes", KILN_ERR_UNSUPPORTED},
      {"    _l = annotate(List[Tensor], [])\n    while True:\n"
       "      _2 = torch.append(_l, x)\n    net = self.net\n",
       "__torch__.py:11: list operations (append, +, slices) that copy more than",
       KILN_ERR_LIMIT},
      {"    _a = torch.all(x, 7)\n    net = self.net\n",
       "__torch__.py:9: aten::all: dim 7 is out of range for rank 2", KILN_ERR_SHAPE},
      {"    _a = torch.any(x, [0, \"a\"])\n    net = self.net\n",
       "__torch__.py:9: aten::any: argument 'dim' is list, expected a list of ints known",
       KILN_ERR_UNSUPPORTED},
      {"    _a = torch.any([torch.gt(torch.sum(x), 0)])\n    net = self.net\n",
       "__torch__.py:9: aten::any: argument 'self' is list, expected a list of bools known",
       KILN_ERR_UNSUPPORTED},
      {"    _f = torch.format(1, x)\n    net = self.net\n",
       "__torch__.py:9: format of a value that is not a string", KILN_ERR_INVALID_MODEL},
      {"    x = __torch__.nowhere.f(x)\n    net = self.net\n",
       "__torch__.py:9: calling __torch__.nowhere.f", KILN_ERR_INVALID_MODEL},
      {"    _l = [x, 1]\n    for _i in range(torch.size(x, 0)):\n      c = _l[_i]\n"
       "    net = self.net\n", "__torch__.py:11: an element, chosen "
       "by the data, of a list that is not", KILN_ERR_UNSUPPORTED},
      {"    if x:\n      net = self.net\n     y = 1\n", "indentation of 5 columns",
       KILN_ERR_INVALID_MODEL},
      {"    if x:\n    net = self.net\n", "expected an indented block", KILN_ERR_INVALID_MODEL},
      {"    else:\n      net = self.net\n", "expected the end of the statement",
       KILN_ERR_INVALID_MODEL},
      {"    if x\n      net = self.net\n", "expected ':'", KILN_ERR_INVALID_MODEL},
      {"    net = [1]\n    if bool(torch.gt(torch.sum(x), 0)):\n      net = [2]\n"
       "    net = self.net\n", "'net' is set in a branch or loop to a value that is not a tensor",
       KILN_ERR_UNSUPPORTED},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    edit_text(MLP, t->path, "/code/__torch__.py", "    net = self.net\n", cases[i].to);
    expect_error(t->path, NULL, cases[i].code, cases[i].why, "__torch__.py");
  }
  /* blocks nested past the limit */
  enum { DEPTH = 40 };
  char deep[DEPTH * (DEPTH + 16) + 64];
  size_t n = 0;
  for (int d = 0; d < DEPTH; d++)
    n += (size_t)snprintf(deep + n, sizeof deep - n, "%*sif x:\n", 4 + 2 * d, "");
  snprintf(deep + n, sizeof deep - n, "%*snet = self.net\n", 4 + 2 * DEPTH, "");
  edit_text(MLP, t->path, "/code/__torch__.py", "    net = self.net\n", deep);
  expect_error(t->path, NULL, KILN_ERR_LIMIT, "blocks nested deeper than 32", NULL);
  /* ifs with a return in a row: each takes the rest into its paths, nested */
  enum { IFS = 300 };
  static const char one_if[] = "    if bool(torch.gt(torch.sum(x), 0)):\n      return x\n";
  static char ifs[IFS * sizeof one_if + 32];
  n = 0;
  for (int i = 0; i < IFS; i++) n += (size_t)snprintf(ifs + n, sizeof ifs - n, "%s", one_if);
  snprintf(ifs + n, sizeof ifs - n, "    net = self.net\n");
  edit_text(MLP, t->path, "/code/__torch__.py", "    net = self.net\n", ifs);
  expect_error(t->path, NULL, KILN_ERR_LIMIT, "ifs with a return: more than 256", NULL);
}

/* Scripted free functions are inlined: keyword arguments and defaults bound (torch
 * writes every argument by position; hand-written code may not), and a function that
 * calls itself, a missing or unknown argument, a missing function, a forward parameter
 * with a default are errors naming the file and line. (tests/models/ts/script/functions
 * checks against PyTorch what torch writes.) */
#define FUNCS TS "script/functions"
static void test_scripted_functions(void **state) {
  tmp *t = *state;
  const char *types = "tokens:int64[2,4]";
  edit_text(FUNCS "/model.pt", t->path, "/code/__torch__.py", "__torch__.shift(h, 0.5, 3., )",
            "__torch__.shift(scale=3., x=h)");
  run_model(FUNCS, t->path, false, 0, types);
  edit_text(FUNCS "/model.pt", t->path, "/code/__torch__.py", "_0(__torch__.shift(",
            "__torch__.torch.nn.functional.normalize(__torch__.shift(");
  run_model(FUNCS, t->path, false, 2, types);
  static const struct {
    const char *from, *to, *why;
    kiln_status code;
  } cases[] = {
      {"torch.div(x, torch.add(torch.abs(x), 1.))", "__torch__.squash(x, )",
       "__torch__.py:24: calling __torch__.squash: calls of module methods and scripted "
       "functions nested deeper than 64", KILN_ERR_LIMIT},
      {"__torch__.shift(h, 0.5, 3., )", "__torch__.shift(h, bogus=1)",
       "__torch__.py:14: __torch__.shift has no parameter 'bogus'", KILN_ERR_INVALID_MODEL},
      {"__torch__.shift(h, 0.5, 3., )", "__torch__.shift(h, 0.5, 3., 4., )",
       "__torch__.shift takes 3 arguments, called with 4", KILN_ERR_INVALID_MODEL},
      {"__torch__.shift(h, 0.5, 3., )", "__torch__.shift(h, 0.5, x=h)",
       "__torch__.shift: argument 'x' given twice", KILN_ERR_INVALID_MODEL},
      {"__torch__.squash(torch.mul(x, scale), )", "__torch__.squash()",
       "__torch__.py:21: __torch__.squash: no argument for parameter 'x', which has no "
       "default", KILN_ERR_INVALID_MODEL},
      {"__torch__.torch.nn.functional.pad(", "__torch__.torch.nn.functional.nothing(",
       "has no function 'nothing'", KILN_ERR_INVALID_MODEL},
      {"__torch__.torch.nn.functional.pad(", "__torch__.Functions(",
       "__torch__.py:15: a call of class __torch__.Functions (an object made by the code, "
       "not a NamedTuple)", KILN_ERR_UNSUPPORTED},
  };
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "input_types", types), KILN_OK);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    edit_text(FUNCS "/model.pt", t->path, "/code/__torch__.py", cases[i].from, cases[i].to);
    expect_error(t->path, o, cases[i].code, cases[i].why, "__torch__.py");
  }
  kiln_options_free(o);
}

/* A return inside an if: the statements after the if run on the other path, and the
 * If's outputs are what each path returns (tuples too), known conditions take their
 * path only. (tests/models/ts/script/early_return_hand checks one against PyTorch.) */
static void test_early_return(void **state) {
  tmp *t = *state;
  edit_text(MLP, t->path, "/code/__torch__.py", "    net = self.net\n    return (net).forward(x, )\n",
            "    if bool(torch.gt(torch.sum(x), 0)):\n      return (x, torch.relu(x))\n"
            "    if True:\n      return (torch.neg(x), 2.)\n    return (x, x)\n");
  kiln_model *m = NULL;
  kiln_status s = kiln_model_load(t->path, NULL, &m);
  if (s != KILN_OK) fail_msg("%s", kiln_model_error(m));
  assert_int_equal(kiln_model_output_count(m), 2);
  kiln_model_free(m);
}

/* An if whose condition is known when the graph is built takes its branch only; one on
 * the data becomes an If node with both, whose outputs are what the branches assign. */
static void test_if_lowering(void **state) {
  tmp *t = *state;
  edit_text(MLP, t->path, "/code/__torch__.py", "    net = self.net\n",
            "    if False:\n      net = self.nothing\n    elif True:\n      net = self.net\n"
            "    else:\n      net = self.nothing\n");
  kiln_model *m = NULL;
  assert_int_equal(kiln_model_load(t->path, NULL, &m), KILN_OK);
  kiln_model_free(m);
  edit_text(MLP, t->path, "/code/__torch__.py", "    net = self.net\n",
            "    if bool(torch.gt(torch.sum(x), 0)):\n      x1 = torch.relu(x)\n"
            "    else:\n      x1, k = torch.neg(x), 2\n    x = x1\n    net = self.net\n");
  m = NULL;
  kiln_status s = kiln_model_load(t->path, NULL, &m);
  if (s != KILN_OK) fail_msg("%s", kiln_model_error(m));
  kiln_model_free(m);
}

/* A raise on a path the data chooses is a kiln.Check: nn.GroupNorm's scripted
 * functional raises when N * C / G times the spatial size is 1, which the batch decides
 * (tests/models/ts/script/group_norm checks the model against PyTorch). */
/* MLP's forward made of code (a format with the bound for %s, raising "too big" at
 * `line`), run on MLP's input: want its status, and the raise's message on failure. */
static void raise_on_sum(const char *path, const char *code_format, const char *bound,
                         int line, kiln_status want) {
  char code[1024], said[128];
  snprintf(code, sizeof code, code_format, bound);
  snprintf(said, sizeof said, "__torch__.py:%d: the scripted code raises builtins.ValueError "
           "for these inputs: too big", line);
  edit_text(MLP, path, "/code/__torch__.py",
            "    net = self.net\n    return (net).forward(x, )\n", code);
  kiln_model *m;
  kiln_session *s;
  kiln_status st = kiln_model_load(path, NULL, &m);
  if (st != KILN_OK) fail_msg("%s", kiln_model_error(m));
  assert_int_equal(kiln_session_create(m, NULL, &s), KILN_OK);
  kl_tensor x = read_pb(TS "mlp/test_data_set_0/input_0.pb");
  assert_int_equal(kiln_session_set_input(s, "x", (kiln_dtype)x.dtype, x.rank, x.dims, x.data,
                                          kl_tensor_nbytes(&x)), KILN_OK);
  st = kiln_session_run(s);
  if (st != want) fail_msg("status %d (%s), expected %d", st, kiln_session_error(s), want);
  if (want != KILN_OK && !strstr(kiln_session_error(s), said))
    fail_msg("'%s' does not name the raise", kiln_session_error(s));
  free(x.data);
  kiln_session_free(s);
  kiln_model_free(m);
}

static const char raise_in_if[] =
    "    if bool(torch.gt(torch.sum(x), %s)):\n      y = torch.relu(x)\n"
    "      ops.prim.RaiseException(\"too big\", \"builtins.ValueError\")\n"
    "      y = torch.neg(y)\n    else:\n      y = x\n    net = self.net\n"
    "    return (net).forward(y, )\n";
/* in a for over the rows, and in a while whose condition stays true: the raise ends it */
static const char raise_in_for[] =
    "    for i in range(torch.size(x, 0)):\n"
    "      if bool(torch.gt(torch.sum(torch.select(x, 0, i)), %s)):\n"
    "        ops.prim.RaiseException(\"too big\", \"builtins.ValueError\")\n"
    "    net = self.net\n    return (net).forward(x, )\n";
static const char raise_in_while[] =
    "    x0, _c = x, True\n    while _c:\n      x0 = torch.mul(x0, 2.)\n"
    "      if bool(torch.gt(torch.sum(torch.abs(x0)), %s)):\n"
    "        ops.prim.RaiseException(\"too big\", \"builtins.ValueError\")\n"
    "      _c = bool(torch.lt(torch.sum(torch.abs(x0)), 1000000.))\n"
    "    net = self.net\n    return (net).forward(x, )\n";

static const char raise_forever[] = /* (only the raise ends this loop) */
    "    x0, _c = x, True\n    while _c:\n      x0 = torch.mul(x0, 2.)\n"
    "      if bool(torch.gt(torch.sum(torch.abs(x0)), %s)):\n"
    "        ops.prim.RaiseException(\"too big\", \"builtins.ValueError\")\n"
    "      _c = bool(torch.gt(torch.sum(torch.abs(x0)), -1.))\n"
    "    net = self.net\n    return (net).forward(x, )\n";

static const char raise_then_return[] = /* (a raise on one path of an if with a return) */
    "    if bool(torch.gt(torch.sum(x), %s)):\n"
    "      ops.prim.RaiseException(\"too big\", \"builtins.ValueError\")\n"
    "      return x\n    if bool(torch.gt(torch.sum(x), 1000000.)):\n"
    "      return torch.neg(x)\n    net = self.net\n    return (net).forward(x, )\n";

static void test_raise_check(void **state) {
  tmp *t = *state;
  /* (the statements after the raise: none) */
  raise_on_sum(t->path, raise_in_if, "1000000.", 11, KILN_OK);
  raise_on_sum(t->path, raise_in_if, "-1000000.", 11, KILN_ERR_INVALID_ARGUMENT);
  raise_on_sum(t->path, raise_in_for, "1000000.", 11, KILN_OK);
  raise_on_sum(t->path, raise_in_for, "-1000000.", 11, KILN_ERR_INVALID_ARGUMENT);
  raise_on_sum(t->path, raise_in_while, "10000000.", 13, KILN_OK);
  raise_on_sum(t->path, raise_in_while, "1000.", 13, KILN_ERR_INVALID_ARGUMENT);
  raise_on_sum(t->path, raise_forever, "1000.", 13, KILN_ERR_INVALID_ARGUMENT);
  raise_on_sum(t->path, raise_then_return, "1000000.", 10, KILN_OK);
  raise_on_sum(t->path, raise_then_return, "-1000000.", 10, KILN_ERR_INVALID_ARGUMENT);
  kiln_options *o = typed("x:float32[1,3,1,1]");
  kiln_model *m;
  kiln_session *s;
  kiln_status st = kiln_model_load(TS "script/group_norm/model.pt", o, &m);
  if (st != KILN_OK) fail_msg("%s", kiln_model_error(m));
  assert_int_equal(kiln_session_create(m, NULL, &s), KILN_OK);
  float x[6] = {1, 2, 3, 4, 5, 6};
  for (int64_t n = 2; n >= 1; n--) {
    int64_t dims[4] = {n, 3, 1, 1};
    assert_int_equal(kiln_session_set_input(s, "x", KILN_DTYPE_FLOAT32, 4, dims, x,
                                            sizeof(float) * (size_t)(3 * n)), KILN_OK);
    st = kiln_session_run(s);
    if (n == 2 && st != KILN_OK) fail_msg("%s", kiln_session_error(s));
  }
  assert_int_equal(st, KILN_ERR_INVALID_ARGUMENT);
  const char *msg = kiln_session_error(s);
  if (!strstr(msg, "functional.py:26: the scripted code raises builtins.ValueError for these "
                   "inputs: Expected more than 1 value per channel"))
    fail_msg("'%s' does not name the raise", msg);
  kiln_session_free(s);
  kiln_model_free(m);
  kiln_options_free(o);
}

/* forward's parameters with defaults are inputs only where the input types give them
 * (tests/models/ts/script/defaults and defaults_mask check both against PyTorch). */
static void test_forward_defaults(void **state) {
  (void)state;
  static const struct {
    const char *types;
    int inputs;
  } cases[] = {{NULL, 1}, {"x:float32[2,4]", 1}, {"x:float32[2,4];mask:bool[2,3]", 2},
               {"#0:float32[2,4];#1:bool[2,3]", 2}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kiln_options *o = typed(cases[i].types ? cases[i].types : "");
    kiln_model *m;
    kiln_status st = kiln_model_load(TS "script/defaults/model.pt", o, &m);
    if (st != KILN_OK) fail_msg("%s", kiln_model_error(m));
    assert_int_equal(kiln_model_input_count(m), cases[i].inputs);
    kiln_model_free(m);
    kiln_options_free(o);
  }
  run_typed(TS "script/defaults", false, 0, "x:float32[2,4]");
  kiln_options *o = typed("x:float32[2,4];y:int64[1]");
  expect_error(TS "script/defaults/model.pt", o, KILN_ERR_INVALID_ARGUMENT,
               "input_types names 'y'", "forward's parameters: x, mask, scale");
  kiln_options_free(o);
}

/* Module attributes set by forward ("self._has_warned = True", torchvision's SSD; a
 * float set then read): the fixture script/attr_set runs at every level in the models
 * suite; set inside an if on the data, the build is refused naming the attribute. */
static void test_attribute_set(void **state) {
  (void)state;
  run_case(TS "script/attr_set", false, 2);
  expect_error(TS "script/attr_set_data/model.pt", NULL, KILN_ERR_UNSUPPORTED,
               "code/__torch__.py:10: setting module attribute 'flag'",
               "inside an if or loop that the data decides");
}

/* An LSTM with proj_size is unrolled over its sequence (ts/lstm_proj runs in the models
 * suite); over a sequence-first input, whose length the trace's batch dim makes
 * unknown, it is refused saying why. */
static void test_lstm_proj_refused(void **state) {
  (void)state;
  expect_error(TS "lstm_proj_seq_first/model.pt", NULL, KILN_ERR_UNSUPPORTED,
               "an LSTM with proj_size over a sequence whose length the graph does not know",
               "takes an input's dim 0 as the batch: use batch_first=True");
}

/* A List[Tensor] parameter declared element by element (xs.0, xs.1, ...): the elements
 * are the graph's inputs in order (script/list_input runs at every level in the models
 * suite); a gap in the numbering is an error naming the missing element. */
static void test_list_input(void **state) {
  (void)state;
  kiln_options *o = typed("xs.1:float32[2,3];xs.0:float32[2,3];xs.2:float32[2,3]");
  kiln_model *m;
  kiln_status st = kiln_model_load(TS "script/list_input/model.pt", o, &m);
  if (st != KILN_OK) fail_msg("%s", kiln_model_error(m));
  assert_int_equal(kiln_model_input_count(m), 3);
  for (int i = 0; i < 3; i++) {
    kiln_tensor_info in;
    char want[8];
    assert_int_equal(kiln_model_input_info(m, i, &in), KILN_OK);
    snprintf(want, sizeof want, "xs.%d", i);
    assert_string_equal(in.name, want);
    assert_int_equal(in.rank, 2);
  }
  kiln_model_free(m);
  kiln_options_free(o);
  o = typed("xs.0:float32[2,3];xs.2:float32[2,3]");
  expect_error(TS "script/list_input/model.pt", o, KILN_ERR_INVALID_ARGUMENT,
               "input_types declares 2 elements of list parameter 'xs' but not xs.1", NULL);
  kiln_options_free(o);
}

/* A NamedTuple made (by position, by keyword), read by field and returned: the
 * outputs are its fields that are not None, named after them; a missing or unknown
 * field is an error naming the line. (tests/models/ts/script/named_outputs checks the
 * model against PyTorch.) */
#define NAMED TS "script/named_outputs"
static void test_named_tuple(void **state) {
  tmp *t = *state;
  kiln_model *m;
  kiln_options *o = typed("x:float32[2,3,6,6]");
  assert_int_equal(kiln_model_load(NAMED "/model.pt", o, &m), KILN_OK);
  assert_int_equal(kiln_model_output_count(m), 2);
  static const char *const names[] = {"logits", "features"};
  for (int k = 0; k < 2; k++) {
    kiln_tensor_info info;
    assert_int_equal(kiln_model_output_info(m, k, &info), KILN_OK);
    assert_string_equal(info.name, names[k]);
  }
  kiln_model_free(m);
  edit_text(NAMED "/model.pt", t->path, "/code/__torch__.py", "torch.softmax((o)[0], 1)",
            "torch.softmax(o.logits, 1)");
  run_model(NAMED, t->path, false, 0, "x:float32[2,3,6,6]");
  edit_text(NAMED "/model.pt", t->path, "/code/__torch__.py",
            "__torch__.NetOutputs((fc).forward(f, ), None, f)",
            "__torch__.NetOutputs(aux=None, features=f, logits=(fc).forward(f, ))");
  run_model(NAMED, t->path, false, 2, "x:float32[2,3,6,6]");
  static const struct {
    const char *from, *to, *why;
  } cases[] = {
      {"torch.softmax((o)[0], 1)", "torch.softmax(o.nothing, 1)",
       "__torch__.py:11: the NamedTuple has no field 'nothing'"},
      {"(fc).forward(f, ), None, f)", "(fc).forward(f, ), None)",
       "__torch__.py:19: NamedTuple __torch__.NetOutputs made without its field 'features'"},
      {"(fc).forward(f, ), None, f)", "(fc).forward(f, ), None, bogus=f)",
       "__torch__.py:19: NamedTuple __torch__.NetOutputs (3 fields): argument 2 (bogus) is "
       "not one of its fields"},
      {"(fc).forward(f, ), None, f)", "(fc).forward(f, ), None, f, f)",
       "argument 3 (by position) is not one of its fields"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    edit_text(NAMED "/model.pt", t->path, "/code/__torch__.py", cases[i].from, cases[i].to);
    expect_error(t->path, o, KILN_ERR_INVALID_MODEL, cases[i].why, "__torch__.py");
  }
  kiln_options_free(o);
}

/* Run model `path` (input x of dims, every element v): the status, and the session's
 * error in msg. */
static kiln_status run_filled(const char *path, const char *types, int rank,
                              const int64_t *dims, float v, char *msg, size_t len) {
  kiln_options *o = typed(types);
  kiln_model *m;
  kiln_session *s;
  kiln_status st = kiln_model_load(path, o, &m);
  if (st != KILN_OK) fail_msg("%s", kiln_model_error(m));
  assert_int_equal(kiln_session_create(m, NULL, &s), KILN_OK);
  int64_t n = 1;
  for (int k = 0; k < rank; k++) n *= dims[k];
  float *x = malloc(sizeof *x * (size_t)n);
  assert_non_null(x);
  for (int64_t i = 0; i < n; i++) x[i] = v;
  assert_int_equal(kiln_session_set_input(s, "x", KILN_DTYPE_FLOAT32, rank, dims, x,
                                          sizeof *x * (size_t)n), KILN_OK);
  st = kiln_session_run(s);
  snprintf(msg, len, "%s", st == KILN_OK ? "" : kiln_session_error(s));
  free(x);
  kiln_session_free(s);
  kiln_model_free(m);
  kiln_options_free(o);
  return st;
}

/* The forms of tests/models/ts/script/list_ops, dict_iter and named_if (checked against
 * PyTorch there) where PyTorch does not run them: a raise's message with its format
 * fields filled, a NamedTuple made on one path of an if whose other path raises, a for
 * over a list that the graph cannot index (unrolled, its count known). */
#define LIST_OPS TS "script/list_ops"
#define NAMED_IF TS "script/named_if"
static void test_list_forms(void **state) {
  tmp *t = *state;
  char msg[1024];
  kiln_status st = run_filled(LIST_OPS "/model.pt", "x:float32[1,3,4,5]", 4,
                              (int64_t[]){1, 3, 4, 5}, 1e5f, msg, sizeof msg);
  assert_int_equal(st, KILN_ERR_INVALID_ARGUMENT);
  if (!strstr(msg, "__torch__.py:14: the scripted code raises builtins.ValueError for these "
                   "inputs: input of dims [3, 4, 5] over the bound 1000000. (True)"))
    fail_msg("'%s' does not fill the format fields", msg);
  edit_text(NAMED_IF "/model.pt", t->path, "/code/__torch__.py",
            "      o1 = __torch__.Pair(torch.sub(x, 1.), _0)\n      o = o1\n",
            "      ops.prim.RaiseException(\"negative\", \"builtins.ValueError\")\n");
  for (int level = 0; level <= 2; level += 2) run_model(NAMED_IF, t->path, false, level, "x:float32[2,3]");
  st = run_filled(t->path, "x:float32[2,3]", 2, (int64_t[]){2, 3}, -1, msg, sizeof msg);
  assert_int_equal(st, KILN_ERR_INVALID_ARGUMENT);
  if (!strstr(msg, "__torch__.py:13: the scripted code raises builtins.ValueError for these "
                   "inputs: negative"))
    fail_msg("'%s' does not name the raise", msg);
  edit_text(MLP, t->path, "/code/__torch__.py", "    net = self.net\n",
            "    _l = [x, 1, \"a\"]\n    for _i in range(torch.len(_l)):\n      _c = _l[_i]\n"
            "    net = self.net\n");
  run_model(TS "mlp", t->path, false, 2, NULL);
  /* list() copies: an append to the copy leaves the list be; insert's index rules */
  edit_text(MLP, t->path, "/code/__torch__.py", "    net = self.net\n",
            "    _l = [1]\n    _m = torch.list(_l)\n    _2 = torch.append(_m, 2)\n"
            "    torch.insert(_m, -1, 3)\n    torch.insert(_m, 9, 4)\n"
            "    torch.insert(_m, -9, 0)\n"
            "    if torch.ne(torch.len(_l), 1):\n      ops.prim.RaiseException(\"shared\")\n"
            "    if torch.ne(_m, [0, 1, 3, 2, 4]):\n      ops.prim.RaiseException(\"order\")\n"
            "    if torch.ne(ops.prim.max(_m), 4):\n      ops.prim.RaiseException(\"max\")\n"
            "    net = self.net\n");
  run_model(TS "mlp", t->path, false, 0, NULL);
  /* extend, pop, reverse, clear; _set_item in a for of a known count (unrolled) */
  edit_text(MLP, t->path, "/code/__torch__.py", "    net = self.net\n",
            "    _l = [1, 2]\n    torch.extend(_l, [3, 4])\n    _p = torch.pop(_l)\n"
            "    _q = torch.pop(_l, 0)\n    torch.reverse(_l)\n"
            "    if torch.ne(_l, [3, 2]):\n      ops.prim.RaiseException(\"l\")\n"
            "    if torch.ne(_p, 4):\n      ops.prim.RaiseException(\"p\")\n"
            "    if torch.ne(_q, 1):\n      ops.prim.RaiseException(\"q\")\n"
            "    _k = [x]\n    torch.clear(_k)\n"
            "    if torch.ne(torch.len(_k), 0):\n      ops.prim.RaiseException(\"k\")\n"
            "    for _i in range(2):\n      _3 = torch._set_item(_l, _i, 0)\n"
            "    if torch.ne(_l, [0, 0]):\n      ops.prim.RaiseException(\"s\")\n"
            "    net = self.net\n");
  run_model(TS "mlp", t->path, false, 0, NULL);
  /* torch.tensor's shape and dtype, ** of numbers, list.copy(), min of two numbers */
  edit_text(MLP, t->path, "/code/__torch__.py", "    net = self.net\n",
            "    _t = torch.tensor([[1, 2], [3, 4]])\n    _f = torch.tensor(2.5)\n"
            "    _b = torch.tensor([True], dtype=6)\n"
            "    if torch.ne(ops.prim.dtype(_t), 4):\n      ops.prim.RaiseException(\"int\")\n"
            "    if torch.ne(ops.prim.dtype(_f), 6):\n      ops.prim.RaiseException(\"f\")\n"
            "    if torch.ne(ops.prim.dtype(_b), 6):\n      ops.prim.RaiseException(\"b\")\n"
            "    if torch.ne(torch.size(_t), [2, 2]):\n      ops.prim.RaiseException(\"2x2\")\n"
            "    if torch.ne(torch.dim(_f), 0):\n      ops.prim.RaiseException(\"0-D\")\n"
            "    if torch.ne(torch.pow(2, 10), 1024):\n      ops.prim.RaiseException(\"2\")\n"
            "    if torch.ne(torch.pow(-1, 7), -1):\n      ops.prim.RaiseException(\"-1\")\n"
            "    if torch.ne(torch.pow(4, -0.5), 0.5):\n      ops.prim.RaiseException(\"4\")\n"
            "    _l = [3, 1]\n    _c = torch.copy(_l)\n    torch._set_item(_c, 0, 7)\n"
            "    if torch.ne(_l, [3, 1]):\n      ops.prim.RaiseException(\"copy\")\n"
            "    if torch.ne(ops.prim.min(_c[0], 2.5), 2.5):\n      ops.prim.RaiseException(\"m\")\n"
            "    net = self.net\n");
  run_model(TS "mlp", t->path, false, 0, NULL);
}

static void endless_loop(tmp *t, const char *code);

/* A while on the data that never ends, and a range of 2^62 elements, stop at run time
 * with KILN_ERR_LIMIT once their bodies have done max_work steps, as an ONNX Loop does. */
static void test_endless_while(void **state) {
  static const char *const loops[] = {
      "    _0 = bool(torch.gt(torch.sum(x), -1.))\n    x0 = x\n    while _0:\n"
      "      x0 = torch.abs(x0)\n      _0 = bool(torch.gt(torch.sum(x0), -1.))\n"
      "    net = self.net\n    x = x0\n",
      "    x0 = x\n    for i in range(5, 9223372036854775807, 2):\n"
      "      x0 = torch.add(torch.abs(x0), i)\n    net = self.net\n    x = x0\n",
  };
  for (size_t i = 0; i < sizeof loops / sizeof *loops; i++) endless_loop(*state, loops[i]);
}

static void endless_loop(tmp *t, const char *code) {
  edit_text(MLP, t->path, "/code/__torch__.py", "    net = self.net\n", code);
  kiln_options *o;
  kiln_model *m = NULL;
  kiln_session *s = NULL;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "max_work", 1 << 20), KILN_OK);
  kiln_status st = kiln_model_load(t->path, o, &m);
  if (st != KILN_OK) fail_msg("%s", kiln_model_error(m));
  assert_int_equal(kiln_session_create(m, NULL, &s), KILN_OK);
  kiln_tensor_info in;
  assert_int_equal(kiln_model_input_info(m, 0, &in), KILN_OK);
  float x[64] = {0};
  int64_t dims[8], n = 1;
  assert_true(in.rank >= 0 && in.rank <= 8);
  for (int d = 0; d < in.rank; d++) n *= (dims[d] = in.dims[d] < 0 ? 1 : in.dims[d]);
  assert_true(n <= 64);
  assert_int_equal(kiln_session_set_input(s, in.name, KILN_DTYPE_FLOAT32, in.rank, dims, x,
                                          sizeof(float) * (size_t)n), KILN_OK);
  assert_int_equal(kiln_session_run(s), KILN_ERR_LIMIT);
  assert_non_null(strstr(kiln_session_error(s), "max_work"));
  kiln_session_free(s);
  kiln_model_free(m);
  kiln_options_free(o);
}

/* Every ATen op kiln does not lower is named at once, from all the code files, not
 * only the first one the interpreter meets. */
static void test_every_missing_op(void **state) {
  tmp *t = *state;
  char twice[128];
  snprintf(twice, sizeof twice, "%s/twice.pt", t->dir);
  edit_text(MLP, twice, "modules/activation.py", "torch.gelu(", "torch.no_such_op(");
  edit_text(twice, t->path, "modules/linear.py", "torch.linear(", "torch.another_op(");
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "kiln has no lowering",
               "in all the code calls 2 ATen ops kiln does not lower: ");
  kiln_model *m = NULL;
  assert_int_not_equal(kiln_model_load(t->path, NULL, &m), KILN_OK);
  assert_non_null(strstr(kiln_model_error(m), "no_such_op"));
  assert_non_null(strstr(kiln_model_error(m), "another_op"));
  kiln_model_free(m);
  remove(twice);
}

static void test_training_mode(void **state) {
  tmp *t = *state;
  edit_text(MLP, t->path, "modules/batchnorm.py", "running_var, False,", "running_var, True,");
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "aten::batch_norm", "training mode");
  edit_text(MLP, t->path, "modules/dropout.py", "0.10000000000000001, False)",
            "0.10000000000000001, True)");
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "dropout in training mode", NULL);
}

static void test_big_endian(void **state) {
  tmp *t = *state;
  rewrite(MLP, t->path, "/byteorder", "big", 3);
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "big-endian", NULL);
}

static void test_unknown_aten(void **state) {
  tmp *t = *state;
  edit_text(MLP, t->path, "modules/activation.py", "torch.gelu(", "torch.frobnicate(");
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "aten::frobnicate", "no lowering");
  edit_text(MLP, t->path, "modules/activation.py", "torch.gelu(argument_1)",
            "torch.gelu(argument_1, nonsense=1)");
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "no parameter named 'nonsense'", NULL);
  edit_text(MLP, t->path, "modules/activation.py", "torch.gelu(argument_1)",
            "torch.gelu(argument_1, 3)");
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "argument 'approximate' is int", NULL);
}

/* A call written in place of the MLP's torch.gelu(argument_1), and what loading must
 * then fail with: the status and two pieces of the message. */
typedef struct bad_call {
  const char *call;
  kiln_status code;
  const char *words1, *words2;
} bad_call;

static void expect_bad_calls(tmp *t, const bad_call *cases, size_t n) {
  for (size_t i = 0; i < n; i++) {
    edit_text(MLP, t->path, "modules/activation.py", "torch.gelu(argument_1)", cases[i].call);
    expect_error(t->path, NULL, cases[i].code, cases[i].words1, cases[i].words2);
  }
}

/* Arguments of the lowerings of arange, _weight_norm and the upsamplings that kiln
 * refuses, each with a message naming the op and what is wrong. */
static void test_bad_new_ops(void **state) {
  static const bad_call cases[] = {
      {"torch.add(argument_1, torch.sum(torch.arange(0, 4, 0, dtype=None, layout=None, "
       "device=torch.device(\"cpu\"), pin_memory=False)))",
       KILN_ERR_INVALID_MODEL, "aten::arange", "the step is zero"},
      {"torch.arange(3, 0, dtype=None, layout=None, device=torch.device(\"cpu\"), "
       "pin_memory=False)", KILN_ERR_INVALID_MODEL, "aten::arange", "points away from the end"},
      {"torch.arange(\"a\", dtype=None)", KILN_ERR_UNSUPPORTED, "argument 'start' is str",
       "expected a number"},
      {"torch._weight_norm(argument_1, argument_1, 5)", KILN_ERR_UNSUPPORTED,
       "aten::_weight_norm", "along dim 5 of a tensor of rank 2"},
      {"torch.upsample_nearest2d(argument_1, None, None)", KILN_ERR_UNSUPPORTED,
       "aten::upsample_nearest2d", "argument 'output_size' is None"},
      {"torch.upsample_nearest2d(argument_1, [3], None)", KILN_ERR_UNSUPPORTED,
       "argument 'output_size'", "one size per spatial dim"},
      {"torch.upsample_bilinear2d(torch.unsqueeze(argument_1, 0), None, True, [1.5, 1.5])",
       KILN_ERR_UNSUPPORTED, "aten::upsample_bilinear2d",
       "align_corners with a scale factor of 1.5 along a dim of unknown size"},
      {"torch.upsample_bilinear2d(argument_1, None, False, [argument_1, 2.])",
       KILN_ERR_UNSUPPORTED, "argument 'scale_factors'", "a list of numbers known"},
      {"torch.pad(argument_1, [1, 2.5])", KILN_ERR_UNSUPPORTED, "aten::pad",
       "argument 'pad' is list, expected a list of ints"},
  };
  expect_bad_calls(*state, cases, sizeof cases / sizeof cases[0]);
}

/* Arguments of the lowerings added for issue 21's trial of real models that kiln
 * refuses (the ops themselves are checked against PyTorch by tests/models/ts/ops3). */
static void test_bad_trial_ops(void **state) {
  static const bad_call cases[] = {
      {"torch.softmax(argument_1, -1, 99)", KILN_ERR_UNSUPPORTED, "aten::softmax",
       "argument 'dtype' is int, expected a numeric dtype"},
      {"torch.sum(argument_1, [1], False, 11)", KILN_ERR_UNSUPPORTED, "aten::sum",
       "expected a numeric dtype"},
      {"torch.im2col(argument_1, [3, 3], [1, 1], [0, 0], [1, 1])", KILN_ERR_UNSUPPORTED,
       "aten::im2col", "a tensor of rank 3 or 4"},
      {"torch.im2col(torch.unsqueeze(argument_1, 0), [1, 1], [1, 1], [0, 0], [1, 1])",
       KILN_ERR_UNSUPPORTED, "aten::im2col", "dim 1 is not known when the graph is built"},
      {"torch.im2col(torch.view(argument_1, [-1, 1, 4, 4]), [5, 1], [1, 1], [0, 0], [1, 1])",
       KILN_ERR_SHAPE, "aten::im2col", "a kernel spanning 5 is larger than dim 2 padded (4)"},
      {"torch.im2col(argument_1, [0, 1], [1, 1], [0, 0], [1, 1])", KILN_ERR_UNSUPPORTED,
       "argument 'kernel_size'", "a kernel size of two positive ints"},
      {"torch.im2col(argument_1, [1, 1], [1, 1], [0, 0])", KILN_ERR_UNSUPPORTED,
       "argument 'stride' is nothing", "a stride of two positive ints"},
      {"torch.diff(argument_1, -1)", KILN_ERR_UNSUPPORTED, "aten::diff",
       "an order from 0 to 64"},
      {"torch.diff(argument_1, 1, 5)", KILN_ERR_SHAPE, "aten::diff", "dim 5 is out of range"},
      {"torch.diff(argument_1, 1, -1, torch.unsqueeze(argument_1, 0))", KILN_ERR_UNSUPPORTED,
       "argument 'prepend'", "a tensor of the input's rank"},
      {"torch.add(argument_1, torch.linspace(0, torch.sum(argument_1), 5))",
       KILN_ERR_UNSUPPORTED, "aten::linspace",
       "argument 'end' is tensor, expected a number known when the graph is built"},
      {"torch.add(argument_1, torch.linspace(0, 1, -1))", KILN_ERR_UNSUPPORTED,
       "aten::linspace", "a count of steps from 0 to 2^24"},
      {"torch.grid_sampler(argument_1, argument_1, 5, 0, False)", KILN_ERR_UNSUPPORTED,
       "aten::grid_sampler", "0 (bilinear), 1 (nearest) or 2 (bicubic)"},
      {"torch.grid_sampler(argument_1, argument_1, 0, 3, False)", KILN_ERR_UNSUPPORTED,
       "aten::grid_sampler", "0 (zeros), 1 (border) or 2 (reflection)"},
      {"torch.instance_norm(argument_1, None, None, None, None, True, 0.1, 1e-05, True)",
       KILN_ERR_UNSUPPORTED, "aten::instance_norm", "a tensor of rank 3 or more"},
      {"torch.addcmul(argument_1, argument_1, \"a\")", KILN_ERR_UNSUPPORTED, "aten::addcmul",
       "argument 'tensor2' is str"},
      {"torch.chunk(argument_1, 0)", KILN_ERR_UNSUPPORTED, "aten::chunk",
       "a count of chunks from 1 to 64"},
  };
  expect_bad_calls(*state, cases, sizeof cases / sizeof cases[0]);
}

/* Arguments of the lowerings of torchvision's detection ops that kiln refuses (the ops
 * themselves are checked against PyTorch by tests/models/ts/script/detect_ops). */
static void test_bad_detect_ops(void **state) {
  static const bad_call cases[] = {
      {"torch.item(torch.select(argument_1, 0, 0))", KILN_ERR_INVALID_MODEL, "aten::item",
       "elements: expected one"},
      {"torch.softmax(argument_1, int(torch.item(torch.sum(argument_1))), None)",
       KILN_ERR_UNSUPPORTED, "argument 'dim' is a value computed by the graph",
       "expected an int known when the graph is built"},
      {"torch.repeat(argument_1, [2])", KILN_ERR_INVALID_MODEL, "aten::repeat",
       "1 repeats of a tensor of rank 2"},
      {"torch.meshgrid([argument_1], indexing=\"yx\")", KILN_ERR_INVALID_MODEL,
       "aten::meshgrid", "indexing 'yx'"},
      {"torch.meshgrid([argument_1])", KILN_ERR_UNSUPPORTED, "aten::meshgrid",
       "a list of 0-D or 1-D tensors"},
      {"torch.max(argument_1, argument_1, True)", KILN_ERR_UNSUPPORTED, "aten::max",
       "argument 'keepdim' is bool, expected absent"},
      {"torch.min(argument_1, 2)", KILN_ERR_SHAPE, "aten::min", "dim 2 is out of range"},
      {"torch.where(argument_1, argument_1)", KILN_ERR_UNSUPPORTED, "aten::where",
       "argument 'other' is nothing"},
      {"torch.where(torch.select(torch.select(argument_1, 0, 0), 0, 0))", KILN_ERR_UNSUPPORTED,
       "aten::where", "rank 1 or more"},
      {"torch.index(argument_1, [torch.gt(torch.unsqueeze(argument_1, 0), 0.)])",
       KILN_ERR_UNSUPPORTED, "aten::index", "a boolean mask of rank 3"},
      {"ops.torchvision.nms(argument_1, argument_1, 0.5)", KILN_ERR_INVALID_MODEL,
       "torchvision::nms", "scores of rank 2: expected [N, 4] and [N]"},
      {"torch.full_like(argument_1, argument_1)", KILN_ERR_UNSUPPORTED, "aten::full_like",
       "expected a number"},
      {"ops.torchvision.roi_align(argument_1, argument_1, 1., 2, 2, -1, False)",
       KILN_ERR_INVALID_MODEL, "torchvision::roi_align",
       "input of rank 2 and rois of rank 2: expected [N, C, H, W] and [K, 5]"},
      {"ops.torchvision.roi_align(torch.reshape(argument_1, [1, 1, 4, -1]), "
       "torch.slice(argument_1, 1, 0, 5), 1., 0, 2, -1, False)",
       KILN_ERR_INVALID_MODEL, "torchvision::roi_align", "roi_align to 0 x 2 bins"},
      {"ops.torchvision.roi_align(torch.reshape(argument_1, [1, 1, 4, -1]), "
       "torch.slice(argument_1, 1, 0, 5), \"a\", 2, 2, -1, False)",
       KILN_ERR_UNSUPPORTED, "torchvision::roi_align",
       "argument 'spatial_scale' is str, expected a number known when the graph is built"},
      {"torch.split(argument_1, [1.5, 2.5])", KILN_ERR_UNSUPPORTED, "aten::split",
       "expected a list of ints"},
      {"torch.split(argument_1, [torch.size(argument_1, 0), 1], 5)", KILN_ERR_SHAPE,
       "aten::split", "dim 5 is out of range"},
      {"torch.log2(\"a\")", KILN_ERR_UNSUPPORTED, "aten::log2", "expected a tensor"},
      {"torch.mul(argument_1, isinstance(argument_1, List[int]))", KILN_ERR_UNSUPPORTED,
       "activation.py:", "isinstance of a type other than Tensor"},
      {"torch.mul(argument_1, isinstance(argument_1))", KILN_ERR_INVALID_MODEL,
       "activation.py:", "isinstance takes a value and a type"},
  };
  expect_bad_calls(*state, cases, sizeof cases / sizeof cases[0]);
}

/* Objects of classes of the code (torchvision's ImageList) and str(): what kiln refuses
 * (script/detect_flow checks what loads against PyTorch). */
#define DETECT_FLOW TS "script/detect_flow/model.pt"
static void test_code_objects(void **state) {
  tmp *t = *state;
  static const struct {
    const char *from, *to, *words1, *words2;
    kiln_status code;
  } cases[] = {
      {"    self.sizes = sizes\n", "    self.sizes = sizes\n    self.other = sizes\n",
       "__torch__.py:", "class __torch__.Boxes declares no attribute 'other'",
       KILN_ERR_INVALID_MODEL},
      {"(b).scaled(2., )", "(b).rescaled(2., )", "__torch__.py:",
       "class __torch__.Boxes has no method 'rescaled'", KILN_ERR_INVALID_MODEL},
      {"__torch__.Boxes.__new__(__torch__.Boxes)", "__torch__.Crates.__new__(__torch__.Crates)",
       "__torch__.py:12", "has no class 'Crates'", KILN_ERR_INVALID_MODEL},
      {"str(i)", "str(torch.sum(x))", "__torch__.py:17",
       "str() of a value that is not known when the graph is built", KILN_ERR_UNSUPPORTED},
  };
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "input_types", "x:float32[6,5]"), KILN_OK);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    edit_text(DETECT_FLOW, t->path, "/code/__torch__.py", cases[i].from, cases[i].to);
    expect_error(t->path, o, cases[i].code, cases[i].words1, cases[i].words2);
  }
  kiln_options_free(o);
}

/* In-place ops are their functional twins, except a write through a view, whose base
 * PyTorch would change too. */
/* MLP's output written in place through a view: relu_ of its first two columns. */
static void check_relu_written(const char *path) {
  kiln_model *m;
  kiln_session *s;
  assert_int_equal(kiln_model_load(path, NULL, &m), KILN_OK);
  assert_int_equal(kiln_session_create(m, NULL, &s), KILN_OK);
  kl_tensor x = read_pb(TS "mlp/test_data_set_0/input_0.pb");
  kl_tensor want = read_pb(TS "mlp/test_data_set_0/output_0.pb"); /* [4, 4] */
  assert_int_equal(kiln_session_set_input(s, "x", (kiln_dtype)x.dtype, x.rank, x.dims, x.data,
                                          kl_tensor_nbytes(&x)), KILN_OK);
  assert_int_equal(kiln_session_run(s), KILN_OK);
  kiln_tensor_info info;
  const float *got;
  assert_int_equal(kiln_session_get_output(s, 0, &info, (const void **)&got), KILN_OK);
  assert_int_equal(kl_tensor_numel(&want), 16);
  int negative = 0;
  for (int i = 0; i < 16; i++) {
    float w = ((const float *)want.data)[i];
    negative += i % 4 < 2 && w < 0;
    if (i % 4 < 2 && w < 0) w = 0;
    if (fabsf(got[i] - w) > 1e-6f + 1e-4f * fabsf(w))
      fail_msg("element %d: %g, expected %g", i, got[i], w);
  }
  assert_true(negative > 0); /* the write changed something */
  free(x.data);
  free(want.data);
  kiln_session_free(s);
  kiln_model_free(m);
}

/* In-place writes through views become new values of the base (tests/models/ts/views
 * has the PyTorch-checked cases); views kiln cannot follow are refused. */
static void test_write_into_view(void **state) {
  tmp *t = *state;
  edit_text(MLP, t->path, "/code/__torch__.py", "    return (net).forward(x, )\n",
            "    y = (net).forward(x, )\n    z = torch.relu_(torch.slice(y, 1, 0, 2))\n"
            "    return y\n");
  check_relu_written(t->path);
  edit_text(MLP, t->path, "/code/__torch__.py", "    return (net).forward(x, )\n",
            "    y = (net).forward(x, )\n    a, b = torch.chunk(y, 2, 1)\n"
            "    z = torch.relu_(a)\n    return y\n");
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "aten::relu_",
               "in-place write into a view made by aten::chunk");
  edit_text(MLP, t->path, "/code/__torch__.py", "    return (net).forward(x, )\n",
            "    y = (net).forward(x, )\n    a, b = torch.chunk(y, 2, 1)\n"
            "    z = torch.fill_(torch.slice(y, 1, 0, 1), 1.)\n    return torch.relu(a)\n");
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "aten::relu",
               "read through a view made by aten::chunk");
  edit_text(MLP, t->path, "/code/__torch__.py", "    return (net).forward(x, )\n",
            "    y = torch.permute((net).forward(x, ), [1, 0])\n"
            "    z = torch.fill_(torch.slice(torch.reshape(y, [16]), 0, 0, 2), 1.)\n"
            "    return y\n");
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "aten::fill_",
               "view made by aten::reshape of a non-contiguous tensor");
  /* counted from the end of the batch dim, whose size the graph does not know */
  edit_text(MLP, t->path, "/code/__torch__.py", "    return (net).forward(x, )\n",
            "    y = (net).forward(x, )\n    z = torch.fill_(torch.select(y, 0, -1), 1.)\n"
            "    return y\n");
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "aten::fill_",
               "in-place write into a view made by aten::select");
  edit_text(MLP, t->path, "/code/__torch__.py", "    return (net).forward(x, )\n",
            "    y = (net).forward(x, )\n"
            "    z = torch.index_put_(y, [torch.gt(y, 0.)], y, True)\n    return y\n");
  expect_error(t->path, NULL, KILN_ERR_UNSUPPORTED, "aten::index_put_", "accumulate=True");
  edit_text(MLP, t->path, "/code/__torch__.py", "    return (net).forward(x, )\n",
            "    y = torch.dropout_(torch.slice((net).forward(x, ), 1, 0, 2), 0.5, False)\n"
            "    return torch.relu(y)\n");
  kiln_model *m;
  assert_int_equal(kiln_model_load(t->path, NULL, &m), KILN_OK); /* dropout_ in eval: no write */
  kiln_model_free(m);
}

/* Nodes whose inputs are all constants run while building, so what they compute is
 * known then: a slice bound from torch.min of a tensor of numbers, taken by item() (as
 * torchvision's transform takes its scale), lets a write through the slice be followed
 * (tests/models/ts/script/detect_heads checks it against PyTorch). */
static void test_build_time_constants(void **state) {
  tmp *t = *state;
  edit_text(MLP, t->path, "/code/__torch__.py", "    return (net).forward(x, )\n",
            "    y = (net).forward(x, )\n"
            "    _n = int(torch.item(torch.min(torch.tensor([3, 2]))))\n"
            "    _k = torch.floor(torch.mul(torch.tensor(float(_n)), 1.5))\n"
            "    if torch.ne(int(torch.item(_k)), 3):\n      ops.prim.RaiseException(\"k\")\n"
            "    z = torch.relu_(torch.slice(y, 1, 0, _n))\n    return y\n");
  check_relu_written(t->path);
  /* isinstance of a Union argument: kinds known while building */
  edit_text(MLP, t->path, "/code/__torch__.py", "    return (net).forward(x, )\n",
            "    y = (net).forward(x, )\n"
            "    if isinstance([y], (list, tuple)):\n      pass\n"
            "    else:\n      ops.prim.RaiseException(\"list\")\n"
            "    if isinstance(y, (int, Tensor)):\n      pass\n"
            "    else:\n      ops.prim.RaiseException(\"tensor\")\n"
            "    if isinstance(y, float):\n      ops.prim.RaiseException(\"float\")\n"
            "    z = torch.relu_(torch.slice(y, 1, 0, 2))\n    return y\n");
  check_relu_written(t->path);
}

/* An if on the data whose branches give tensors of different ranks: kiln follows the
 * then branch, and a run that takes the other fails saying so (script/rank_if checks
 * the then branch against PyTorch). */
static void test_rank_of_branches(void **state) {
  (void)state;
  char msg[1024];
  kiln_status st = run_filled(TS "script/rank_if/model.pt", "x:float32[5,4]", 2,
                              (int64_t[]){5, 4}, 1, msg, sizeof msg);
  if (st != KILN_OK) fail_msg("%s", msg);
  st = run_filled(TS "script/rank_if/model.pt", "x:float32[5,4]", 2, (int64_t[]){5, 4}, -1,
                  msg, sizeof msg);
  assert_int_equal(st, KILN_ERR_INVALID_ARGUMENT);
  if (!strstr(msg, "__torch__.py:12: ") ||
      !strstr(msg, "'r' is a tensor of rank 3 on one path of an if on the data and of rank 2 "
                   "on the other; kiln, which needs ranks while building, follows the then "
                   "path (rank 3), and this run took the other"))
    fail_msg("'%s' does not name the ranks", msg);
}

/* A list appended to once per pass of a loop whose count the data decides is the
 * Loop's scan output (tests/models/ts/script/stacked_list checks it against PyTorch);
 * what kiln refuses of it, with the file and line. */
#define STACKED_LIST TS "script/stacked_list/model.pt"
static void test_stacked_list(void **state) {
  tmp *t = *state;
  static const struct {
    const char *from, *to, *words1, *words2;
  } cases[] = {
      {"out = torch.stack(res)", "out = torch.stack(res, 1)", "__torch__.py:23: aten::stack",
       "stack of a list whose length the run decides (appended to in a loop whose count the "
       "data decides) along dim 1: only stack along dim 0"},
      {"out = torch.stack(res)", "out = torch.cat(res)", "__torch__.py:23: aten::cat",
       "only stack along dim 0"},
      /* named twice in the body: not a list of one element per pass */
      {"      _7 = torch.add_(im, 1.)\n", "      _7 = torch.len(res)\n",
       "__torch__.py:20", "aten::append inside a loop or an if on the data"},
      {"      _6 = torch.append(res, im)\n", "      _6 = torch.append(res, a)\n",
       "__torch__.py:20", "append of a value that is not a tensor to a list in a loop whose "
       "count the data decides"},
      {"    if torch.gt(torch.len(res), 0):\n", "    _9 = torch.mul(res, 2)\n"
       "    if torch.gt(torch.len(res), 0):\n", "__torch__.py:22", "aten::mul"},
      {"    if torch.gt(torch.len(res), 0):\n", "    _9 = torch.list(res)\n"
       "    if torch.gt(torch.len(res), 0):\n", "__torch__.py:22: aten::list",
       "argument 'l' is a list whose length the run decides, expected a list"},
      /* the loop inside an if on the data, the list made outside it */
      {"    for i in range(ops.prim.min([torch.len(rows), 4])):\n",
       "    if bool(torch.gt(torch.sum(x), 0.)):\n"
       "     for i in range(ops.prim.min([torch.len(rows), 4])):\n",
       "__torch__.py:21", "aten::append inside a loop or an if on the data"},
  };
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "input_types", "x:float32[6,5]"), KILN_OK);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    edit_text(STACKED_LIST, t->path, "/code/__torch__.py", cases[i].from, cases[i].to);
    expect_error(t->path, o, KILN_ERR_UNSUPPORTED, cases[i].words1, cases[i].words2);
  }
  kiln_options_free(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_declared_io),
      cmocka_unit_test(test_imported_graph),
      cmocka_unit_test(test_runs_like_pytorch),
      cmocka_unit_test(test_torch113_inputs),
      cmocka_unit_test(test_torch113_runs),
      cmocka_unit_test_setup_teardown(test_masks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_archive, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_parts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_short_storage, setup, teardown),
      cmocka_unit_test_setup_teardown(test_garbage_pickle, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deep_pickle, setup, teardown),
      cmocka_unit_test_setup_teardown(test_oversized, setup, teardown),
      cmocka_unit_test_setup_teardown(test_garbage_code, setup, teardown),
      cmocka_unit_test(test_annotate),
      cmocka_unit_test_setup_teardown(test_control_flow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_if_lowering, setup, teardown),
      cmocka_unit_test_setup_teardown(test_scripted_functions, setup, teardown),
      cmocka_unit_test_setup_teardown(test_early_return, setup, teardown),
      cmocka_unit_test_setup_teardown(test_raise_check, setup, teardown),
      cmocka_unit_test(test_forward_defaults),
      cmocka_unit_test_setup_teardown(test_attribute_set, setup, teardown),
      cmocka_unit_test(test_list_input),
      cmocka_unit_test(test_lstm_proj_refused),
      cmocka_unit_test_setup_teardown(test_named_tuple, setup, teardown),
      cmocka_unit_test_setup_teardown(test_list_forms, setup, teardown),
      cmocka_unit_test_setup_teardown(test_endless_while, setup, teardown),
      cmocka_unit_test_setup_teardown(test_training_mode, setup, teardown),
      cmocka_unit_test_setup_teardown(test_every_missing_op, setup, teardown),
      cmocka_unit_test_setup_teardown(test_big_endian, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_aten, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_new_ops, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_trial_ops, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_detect_ops, setup, teardown),
      cmocka_unit_test_setup_teardown(test_code_objects, setup, teardown),
      cmocka_unit_test_setup_teardown(test_build_time_constants, setup, teardown),
      cmocka_unit_test(test_rank_of_branches),
      cmocka_unit_test_setup_teardown(test_stacked_list, setup, teardown),
      cmocka_unit_test_setup_teardown(test_write_into_view, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
