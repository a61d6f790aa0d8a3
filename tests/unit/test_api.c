/* The public API (include/kiln.h) on the bundled models: options, loading, model
 * description, sessions, outputs against PyTorch's, and every error path. Runs from
 * the source root. Internal headers are used only to read the expected tensors. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import/tensorfile.h"
#include "kiln.h"

#include "testutil.h"

#define CNN "models/digits_cnn/model.onnx"
#define MLP "models/digits_mlp/model.onnx"
#define CNN_SET0 "models/digits_cnn/test_data_set_0"
#define CNN_SET1 "models/digits_cnn/test_data_set_1"
#define MLP_SET0 "models/digits_mlp/test_data_set_0"
#define TOLERANCE 1e-4

/* A failed call: the status and a message that says something. */
#define assert_model_fails(call, m, want)                                              \
  do {                                                                                 \
    kiln_status st_ = (call);                                                          \
    if (st_ != (want))                                                                 \
      fail_msg("%s returned %d (%s), expected %d: %s", #call, st_,                     \
               kiln_status_string(st_), want, kiln_model_error(m));                    \
    assert_true(kiln_model_error(m)[0] != '\0');                                       \
  } while (0)

#define assert_session_fails(call, s, want)                                            \
  do {                                                                                 \
    kiln_status st_ = (call);                                                          \
    if (st_ != (want))                                                                 \
      fail_msg("%s returned %d (%s), expected %d: %s", #call, st_,                     \
               kiln_status_string(st_), want, kiln_session_error(s));                  \
    assert_true(kiln_session_error(s)[0] != '\0');                                     \
  } while (0)

#define assert_session_ok(call, s)                                                     \
  do {                                                                                 \
    kiln_status st_ = (call);                                                          \
    if (st_ != KILN_OK)                                                                \
      fail_msg("%s failed (%s): %s", #call, kiln_status_string(st_), kiln_session_error(s)); \
  } while (0)

/* ---- helpers ---- */

static kl_tensor read_tensor(const char *dir, const char *file) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  kl_tensor t = {0};
  kl_err e = {0};
  if (kl_tensorfile_read(path, INT64_C(1) << 30, &t, NULL, &e) != KILN_OK)
    fail_msg("cannot read %s: %s", path, e.msg);
  return t;
}

static kiln_model *load(const char *path, const kiln_options *o) {
  kiln_model *m = NULL;
  kiln_status st = kiln_model_load(path, o, &m);
  assert_non_null(m);
  if (st != KILN_OK) fail_msg("loading %s: %s: %s", path, kiln_status_string(st), kiln_model_error(m));
  return m;
}

static kiln_session *session(const kiln_model *m, const kiln_options *o) {
  kiln_session *s = NULL;
  kiln_status st = kiln_session_create(m, o, &s);
  assert_non_null(s);
  if (st != KILN_OK) fail_msg("session: %s: %s", kiln_status_string(st), kiln_session_error(s));
  return s;
}

static kiln_status set_tensor(kiln_session *s, const char *name, const kl_tensor *t) {
  return kiln_session_set_input(s, name, (kiln_dtype)t->dtype, t->rank, t->dims, t->data,
                                kl_tensor_nbytes(t));
}

/* Output 0 of the last run equals `want` within TOLERANCE; returns its data. */
static const float *check_output(kiln_session *s, const kl_tensor *want) {
  kiln_tensor_info info;
  const void *data = NULL;
  assert_session_ok(kiln_session_get_output(s, 0, &info, &data), s);
  assert_string_equal(info.name, "logits");
  assert_int_equal(info.dtype, KILN_DTYPE_FLOAT32);
  assert_int_equal(info.rank, want->rank);
  for (int d = 0; d < want->rank; d++) {
    assert_int_equal(info.dims[d], want->dims[d]);
    assert_null(info.dim_names[d]); /* a run's output is concrete */
  }
  assert_non_null(data);
  tu_assert_floats(data, want->data, kl_tensor_numel(want), TU_TOL(TOLERANCE, 0));
  return data;
}

/* Run one ONNX test data set (input_0.pb -> output_0.pb) on the session. */
static void run_set(kiln_session *s, const char *set) {
  kl_tensor in = read_tensor(set, "input_0.pb"), want = read_tensor(set, "output_0.pb");
  assert_session_ok(set_tensor(s, "input", &in), s);
  assert_session_ok(kiln_session_run(s), s);
  check_output(s, &want);
  free(in.data);
  free(want.data);
}

/* ---- small functions ---- */

static void test_version_and_strings(void **state) {
  (void)state;
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", KILN_VERSION_MAJOR, KILN_VERSION_MINOR,
           KILN_VERSION_PATCH);
  assert_string_equal(kiln_version(), want);

  const kiln_status codes[] = {
      KILN_OK, KILN_ERR_INVALID_ARGUMENT, KILN_ERR_IO, KILN_ERR_INVALID_MODEL,
      KILN_ERR_UNSUPPORTED, KILN_ERR_SHAPE, KILN_ERR_DTYPE, KILN_ERR_OUT_OF_MEMORY,
      KILN_ERR_LIMIT, KILN_ERR_NOT_FOUND, KILN_ERR_STATE, KILN_ERR_INTERNAL};
  const size_t n = sizeof codes / sizeof codes[0];
  const char *unknown = kiln_status_string((kiln_status)-99);
  assert_non_null(unknown);
  assert_true(unknown[0] != '\0');
  assert_string_equal(kiln_status_string((kiln_status)1), unknown);
  for (size_t i = 0; i < n; i++) {
    const char *s = kiln_status_string(codes[i]);
    assert_non_null(s);
    assert_true(s[0] != '\0');
    assert_string_not_equal(s, unknown);
    for (size_t j = 0; j < i; j++) assert_string_not_equal(s, kiln_status_string(codes[j]));
  }
  assert_string_equal(kiln_status_string(KILN_OK), "ok");
  assert_string_equal(kiln_status_string(KILN_ERR_IO), "i/o error");

  const struct {
    kiln_dtype t;
    const char *name;
    size_t size;
  } dts[] = {
      {KILN_DTYPE_FLOAT32, "float32", 4}, {KILN_DTYPE_UINT8, "uint8", 1},
      {KILN_DTYPE_INT8, "int8", 1},       {KILN_DTYPE_UINT16, "uint16", 2},
      {KILN_DTYPE_INT16, "int16", 2},     {KILN_DTYPE_INT32, "int32", 4},
      {KILN_DTYPE_INT64, "int64", 8},     {KILN_DTYPE_BOOL, "bool", 1},
      {KILN_DTYPE_FLOAT16, "float16", 2}, {KILN_DTYPE_FLOAT64, "float64", 8},
      {KILN_DTYPE_UINT32, "uint32", 4},   {KILN_DTYPE_UINT64, "uint64", 8},
      {KILN_DTYPE_BFLOAT16, "bfloat16", 2},
      {KILN_DTYPE_FLOAT8E4M3FN, "float8e4m3fn", 1},
      {KILN_DTYPE_FLOAT8E4M3FNUZ, "float8e4m3fnuz", 1},
      {KILN_DTYPE_FLOAT8E5M2, "float8e5m2", 1},
      {KILN_DTYPE_FLOAT8E5M2FNUZ, "float8e5m2fnuz", 1},
      {KILN_DTYPE_FLOAT8E8M0, "float8e8m0", 1},
      {KILN_DTYPE_UINT4, "uint4", 1},     {KILN_DTYPE_INT4, "int4", 1},
      {KILN_DTYPE_FLOAT4E2M1, "float4e2m1", 1},
      {KILN_DTYPE_UINT2, "uint2", 1},     {KILN_DTYPE_INT2, "int2", 1},
  };
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    assert_string_equal(kiln_dtype_name(dts[i].t), dts[i].name);
    assert_int_equal(kiln_dtype_size(dts[i].t), dts[i].size);
  }
  /* kiln.h: "undefined" and size 0 for values that are not a kiln_dtype */
  const int not_dtypes[] = {0, 8, 14, 15, 27, -1, 1000};
  for (size_t i = 0; i < sizeof not_dtypes / sizeof not_dtypes[0]; i++) {
    kiln_dtype t = (kiln_dtype)not_dtypes[i];
    assert_int_equal(kiln_dtype_size(t), 0);
    if (strcmp(kiln_dtype_name(t), "undefined") != 0)
      fail_msg("kiln_dtype_name(%d) is \"%s\", kiln.h promises \"undefined\"", not_dtypes[i],
               kiln_dtype_name(t));
  }
}

static void test_options(void **state) {
  (void)state;
  kiln_options *o = NULL;
  assert_int_equal(kiln_options_create(NULL), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_non_null(o);
  const struct {
    const char *name;
    int64_t value;
    kiln_status want;
  } ints[] = {
      {"opt_level", 0, KILN_OK},
      {"opt_level", 3, KILN_OK},
      {"opt_level", -1, KILN_ERR_INVALID_ARGUMENT},
      {"opt_level", 4, KILN_ERR_INVALID_ARGUMENT},
      {"threads", 0, KILN_OK},
      {"threads", 8, KILN_OK},
      {"threads", -1, KILN_ERR_INVALID_ARGUMENT},
      {"threads", INT64_C(1) << 40, KILN_ERR_INVALID_ARGUMENT},
      {"max_work", 0, KILN_OK},
      {"max_work", INT64_C(1) << 50, KILN_OK},
      {"max_work", -1, KILN_ERR_INVALID_ARGUMENT},
      {"max_tensor_bytes", 1, KILN_OK},
      {"max_tensor_bytes", INT64_C(1) << 40, KILN_OK},
      {"max_tensor_bytes", 0, KILN_ERR_INVALID_ARGUMENT},
      {"max_tensor_bytes", -5, KILN_ERR_INVALID_ARGUMENT},
      {"memory_limit", 0, KILN_OK},
      {"memory_limit", 1 << 20, KILN_OK},
      {"memory_limit", -1, KILN_ERR_INVALID_ARGUMENT},
      {"verify", 0, KILN_OK},
      {"verify", 1, KILN_OK},
      {"verify", 2, KILN_ERR_INVALID_ARGUMENT},
      {"no_such_option", 1, KILN_ERR_INVALID_ARGUMENT},
      {"", 1, KILN_ERR_INVALID_ARGUMENT},
      {"OPT_LEVEL", 1, KILN_ERR_INVALID_ARGUMENT},
      {"passes", 1, KILN_ERR_INVALID_ARGUMENT}, /* a string setting */
  };
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    kiln_status st = kiln_options_set_int(o, ints[i].name, ints[i].value);
    if (st != ints[i].want)
      fail_msg("set_int(%s, %lld) = %d, expected %d", ints[i].name, (long long)ints[i].value,
               st, ints[i].want);
    /* a refusal says why, naming the option; a success leaves no message */
    if (st == KILN_OK) assert_string_equal(kiln_options_error(o), "");
    else if (*ints[i].name) assert_non_null(strstr(kiln_options_error(o), ints[i].name));
    else assert_true(kiln_options_error(o)[0] != '\0');
  }
  kiln_options_set_int(o, "threads", 5000);
  assert_string_equal(kiln_options_error(o), "option 'threads': 5000 is out of range: expected "
                      "a thread count (0 = one per core), from 0 to 4096");
  kiln_options_set_int(o, "thread", 1);
  assert_non_null(strstr(kiln_options_error(o), "no integer option 'thread'; the integer "
                         "options are opt_level, threads,"));
  kiln_options_set_int(o, "passes", 1);
  assert_non_null(strstr(kiln_options_error(o), "is a string: set it with kiln_options_set_string"));
  kiln_options_set_string(o, "threads", "2");
  assert_non_null(strstr(kiln_options_error(o), "is an integer: set it with kiln_options_set_int"));
  kiln_options_set_string(o, "passes", NULL);
  assert_non_null(strstr(kiln_options_error(o), "option 'passes': the value is NULL"));
  assert_int_equal(kiln_options_set_int(o, "threads", 2), KILN_OK);
  assert_string_equal(kiln_options_error(o), "");
  assert_true(kiln_options_error(NULL)[0] != '\0');
  assert_int_equal(kiln_options_set_int(NULL, "threads", 1), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_options_set_int(o, NULL, 1), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_options_set_string(o, "passes", "-dce"), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "passes", ""), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "opt_level", "2"), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_options_set_string(o, "nope", "x"), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_options_set_string(o, "passes", NULL), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_options_set_string(o, NULL, "x"), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_options_set_string(NULL, "passes", "x"), KILN_ERR_INVALID_ARGUMENT);
  /* "precision": auto, fp32, tf32, bf16; fp16 refused, saying it is not built */
  assert_int_equal(kiln_options_set_string(o, "precision", "auto"), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "precision", "fp32"), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "precision", "tf32"), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "precision", "bf16"), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "precision", ""), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "precision", "fp16"), KILN_ERR_INVALID_ARGUMENT);
  assert_string_equal(kiln_options_error(o), "option 'precision': 'fp16' is not one: expected "
                      "auto, fp32, tf32 or bf16 (fp16 is not built yet)");
  assert_int_equal(kiln_options_set_string(o, "precision", "FP32"), KILN_ERR_INVALID_ARGUMENT);
  kiln_options_free(o);
  kiln_options_free(NULL);
}

/* Precision tf32 on the CPU fails session creation, saying why; fp32 and auto run. */
static void test_precision_cpu(void **state) {
  (void)state;
  kiln_model *m = load(MLP, NULL);
  const char *precisions[] = {"auto", "fp32", "tf32"};
  for (int i = 0; i < 3; i++) {
    kiln_options *o;
    assert_int_equal(kiln_options_create(&o), KILN_OK);
    assert_int_equal(kiln_options_set_string(o, "precision", precisions[i]), KILN_OK);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create(m, o, &s);
    if (i < 2) {
      assert_int_equal(st, KILN_OK);
    } else {
      assert_int_equal(st, KILN_ERR_UNSUPPORTED);
      tu_assert_contains(kiln_session_error(s), "option 'precision': tf32 is a GPU's");
      tu_assert_contains(kiln_session_error(s), "device 'cpu'");
    }
    kiln_session_free(s);
    kiln_options_free(o);
  }
  kiln_model_free(m);
}

/* Options are copied by the calls that take them, and each setting takes effect. */
static void test_options_used(void **state) {
  (void)state;
  kiln_options *o = NULL;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "opt_level", 0), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "threads", 2), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "verify", 1), KILN_OK);
  kiln_model *m = load(CNN, o);
  kiln_session *s = session(m, o);
  kiln_options_free(o);
  run_set(s, CNN_SET0);
  kiln_session_free(s);
  kiln_model_free(m);

  /* an unknown pass name is refused when the model is optimized */
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "passes", "+no_such_pass"), KILN_OK);
  m = NULL;
  assert_model_fails(kiln_model_load(CNN, o, &m), m, KILN_ERR_INVALID_ARGUMENT);
  tu_assert_contains(kiln_model_error(m), "no_such_pass");
  kiln_model_free(m);
  kiln_options_free(o);
}

/* ---- loading and describing ---- */

static void check_description(const kiln_model *m) {
  assert_int_equal(kiln_model_input_count(m), 1);
  assert_int_equal(kiln_model_output_count(m), 1);
  kiln_tensor_info info;
  assert_int_equal(kiln_model_input_info(m, 0, &info), KILN_OK);
  assert_string_equal(info.name, "input");
  assert_int_equal(info.dtype, KILN_DTYPE_FLOAT32);
  assert_int_equal(info.rank, 4);
  const int64_t dims[4] = {-1, 1, 8, 8};
  for (int d = 0; d < 4; d++) assert_int_equal(info.dims[d], dims[d]);
  assert_non_null(info.dim_names[0]);
  assert_string_equal(info.dim_names[0], "batch");
  for (int d = 1; d < 4; d++) assert_null(info.dim_names[d]);

  assert_int_equal(kiln_model_output_info(m, 0, &info), KILN_OK);
  assert_string_equal(info.name, "logits");
  assert_int_equal(info.dtype, KILN_DTYPE_FLOAT32);
  assert_int_equal(info.rank, 2);
  assert_int_equal(info.dims[0], -1);
  assert_string_equal(info.dim_names[0], "batch");
  assert_int_equal(info.dims[1], 10);
  assert_null(info.dim_names[1]);

  assert_int_equal(kiln_model_input_info(m, 1, &info), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_model_input_info(m, -1, &info), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_model_output_info(m, 1, &info), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_model_input_info(m, 0, NULL), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_model_output_info(m, 0, NULL), KILN_ERR_INVALID_ARGUMENT);

  /* by name */
  assert_int_equal(kiln_model_input_index(m, "input"), 0);
  assert_int_equal(kiln_model_output_index(m, "logits"), 0);
  assert_int_equal(kiln_model_input_index(m, "logits"), -1);
  assert_int_equal(kiln_model_output_index(m, "input"), -1);
  assert_int_equal(kiln_model_output_index(m, "logit"), -1);
  assert_int_equal(kiln_model_output_index(m, ""), -1);
  assert_int_equal(kiln_model_output_index(m, NULL), -1);
}

static void test_load_path(void **state) {
  (void)state;
  const char *paths[2] = {CNN, MLP};
  for (int i = 0; i < 2; i++) {
    kiln_model *m = load(paths[i], NULL);
    assert_string_equal(kiln_model_error(m), "");
    check_description(m);
    kiln_model_free(m);
  }
}

static void test_load_memory(void **state) {
  (void)state;
  size_t len;
  unsigned char *buf = tu_read_file(CNN, &len);
  assert_true(len > 0);
  kiln_model *m = NULL;
  kiln_status st = kiln_model_load_memory(buf, len, NULL, &m);
  assert_non_null(m);
  if (st != KILN_OK) fail_msg("load_memory: %s", kiln_model_error(m));
  /* the buffer may go away right after the call */
  memset(buf, 0xee, len);
  free(buf);
  check_description(m);
  kiln_session *s = session(m, NULL);
  run_set(s, CNN_SET0);
  kiln_session_free(s);
  kiln_model_free(m);

  /* garbage, a TorchScript archive, nothing at all */
  const char junk[] = "this is not a protobuf \xff\xff\xff\xff\xff";
  m = NULL;
  st = kiln_model_load_memory(junk, sizeof junk, NULL, &m);
  assert_int_not_equal(st, KILN_OK);
  assert_true(kiln_model_error(m)[0] != '\0');
  assert_int_equal(kiln_model_input_count(m), 0);
  kiln_model_free(m);

  /* the start of a ZIP file (a TorchScript archive) and nothing after it */
  const char zip[] = "PK\003\004 and the rest of an archive";
  m = NULL;
  assert_model_fails(kiln_model_load_memory(zip, sizeof zip, NULL, &m), m,
                     KILN_ERR_INVALID_MODEL);
  kiln_model_free(m);

  m = NULL;
  st = kiln_model_load_memory(junk, 0, NULL, &m);
  assert_int_not_equal(st, KILN_OK);
  assert_true(kiln_model_error(m)[0] != '\0');
  kiln_model_free(m);
}

/* ---- running ---- */

static void test_run_expected(void **state) {
  (void)state;
  const char *models[2] = {CNN, MLP};
  const char *sets[2] = {CNN_SET0, MLP_SET0};
  for (int i = 0; i < 2; i++) {
    kiln_model *m = load(models[i], NULL);
    kiln_session *s = session(m, NULL);
    run_set(s, sets[i]);
    kiln_session_free(s);
    kiln_model_free(m);
  }
}

static void test_run_twice_identical(void **state) {
  (void)state;
  kiln_model *m = load(CNN, NULL);
  kiln_session *s = session(m, NULL);
  kl_tensor in = read_tensor(CNN_SET0, "input_0.pb"), want = read_tensor(CNN_SET0, "output_0.pb");
  assert_session_ok(set_tensor(s, "input", &in), s);
  assert_session_ok(kiln_session_run(s), s);
  size_t n = (size_t)kl_tensor_numel(&want);
  float *first = malloc(n * sizeof(float));
  assert_non_null(first);
  memcpy(first, check_output(s, &want), n * sizeof(float));
  /* again with the same binding, and with a second session of the same model */
  assert_session_ok(kiln_session_run(s), s);
  assert_memory_equal(check_output(s, &want), first, n * sizeof(float));
  kiln_session *s2 = session(m, NULL);
  assert_session_ok(set_tensor(s2, "input", &in), s2);
  assert_session_ok(kiln_session_run(s2), s2);
  assert_memory_equal(check_output(s2, &want), first, n * sizeof(float));
  kiln_session_free(s2);
  free(first);
  free(in.data);
  free(want.data);
  kiln_session_free(s);
  kiln_model_free(m);
}

static void test_batch_sizes(void **state) {
  (void)state;
  kiln_model *m = load(CNN, NULL);
  kiln_session *s = session(m, NULL);
  run_set(s, CNN_SET1); /* batch 1 */
  run_set(s, CNN_SET0); /* batch 16: buffers grow */
  run_set(s, CNN_SET1); /* and shrink back */
  kl_tensor in1 = read_tensor(CNN_SET1, "input_0.pb");
  assert_int_equal(in1.dims[0], 1);
  kl_tensor in16 = read_tensor(CNN_SET0, "input_0.pb");
  assert_int_equal(in16.dims[0], 16);
  /* image 0 of the batch of 16 alone gives row 0 of the batch's logits */
  kl_tensor want16 = read_tensor(CNN_SET0, "output_0.pb");
  kl_tensor one = in16;
  one.dims[0] = 1;
  assert_session_ok(set_tensor(s, "input", &one), s);
  assert_session_ok(kiln_session_run(s), s);
  kl_tensor row = want16;
  row.dims[0] = 1;
  check_output(s, &row);
  /* a batch of zero images (symbolic dims take any size) gives zero rows */
  kl_tensor none = in16;
  none.dims[0] = 0;
  assert_session_ok(set_tensor(s, "input", &none), s);
  assert_session_ok(kiln_session_run(s), s);
  kiln_tensor_info info;
  assert_session_ok(kiln_session_get_output(s, 0, &info, NULL), s);
  assert_int_equal(info.rank, 2);
  assert_int_equal(info.dims[0], 0);
  assert_int_equal(info.dims[1], 10);
  run_set(s, CNN_SET1); /* and back */
  free(in1.data);
  free(in16.data);
  free(want16.data);
  kiln_session_free(s);
  kiln_model_free(m);
}

/* ---- errors ---- */

static void test_null_arguments(void **state) {
  (void)state;
  kiln_model *m = NULL;
  assert_model_fails(kiln_model_load(NULL, NULL, &m), m, KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_model_input_count(m), 0);
  assert_int_equal(kiln_model_output_count(m), 0);
  kiln_model_free(m);
  assert_int_equal(kiln_model_load(CNN, NULL, NULL), KILN_ERR_INVALID_ARGUMENT);
  m = NULL;
  assert_model_fails(kiln_model_load_memory(NULL, 10, NULL, &m), m,
                     KILN_ERR_INVALID_ARGUMENT);
  kiln_model_free(m);
  assert_int_equal(kiln_model_load_memory("x", 1, NULL, NULL), KILN_ERR_INVALID_ARGUMENT);
  assert_true(kiln_model_error(NULL)[0] != '\0');
  assert_int_equal(kiln_model_input_count(NULL), 0);
  assert_int_equal(kiln_model_output_count(NULL), 0);
  kiln_tensor_info info;
  assert_int_equal(kiln_model_input_info(NULL, 0, &info), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_model_output_info(NULL, 0, &info), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_model_input_index(NULL, "input"), -1);
  assert_int_equal(kiln_model_output_index(NULL, "logits"), -1);
  kiln_model_free(NULL);

  kiln_session *s = NULL;
  assert_session_fails(kiln_session_create(NULL, NULL, &s), s, KILN_ERR_INVALID_ARGUMENT);
  /* a session that never got a model refuses everything, without crashing */
  assert_session_fails(kiln_session_run(s), s, KILN_ERR_STATE);
  float x = 0;
  assert_session_fails(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 0, NULL, &x, 4),
                       s, KILN_ERR_STATE);
  assert_session_fails(kiln_session_get_output(s, 0, &info, NULL), s, KILN_ERR_STATE);
  kiln_session_free(s);
  m = load(CNN, NULL);
  assert_int_equal(kiln_session_create(m, NULL, NULL), KILN_ERR_INVALID_ARGUMENT);
  assert_true(kiln_session_error(NULL)[0] != '\0');
  assert_int_equal(kiln_session_run(NULL), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_session_get_output(NULL, 0, &info, NULL), KILN_ERR_INVALID_ARGUMENT);
  const int64_t dims[4] = {1, 1, 8, 8};
  float img[64] = {0};
  assert_int_equal(kiln_session_set_input(NULL, "input", KILN_DTYPE_FLOAT32, 4, dims, img,
                                          sizeof img), KILN_ERR_INVALID_ARGUMENT);
  kiln_session_free(NULL);

  s = session(m, NULL);
  assert_session_fails(kiln_session_set_input(s, NULL, KILN_DTYPE_FLOAT32, 4, dims, img,
                                              sizeof img), s, KILN_ERR_INVALID_ARGUMENT);
  assert_session_fails(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, NULL, img,
                                              sizeof img), s, KILN_ERR_INVALID_ARGUMENT);
  assert_session_fails(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, dims, NULL,
                                              sizeof img), s, KILN_ERR_INVALID_ARGUMENT);
  /* NULL info and data are allowed for get_output: the caller wants neither */
  assert_session_ok(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, dims, img,
                                           sizeof img), s);
  assert_session_ok(kiln_session_run(s), s);
  assert_session_ok(kiln_session_get_output(s, 0, NULL, NULL), s);
  kiln_session_free(s);
  kiln_model_free(m);
}

static void test_missing_file(void **state) {
  (void)state;
  const char *path = "models/no_such_model/model.onnx";
  kiln_model *m = NULL;
  assert_model_fails(kiln_model_load(path, NULL, &m), m, KILN_ERR_IO);
  tu_assert_contains(kiln_model_error(m), path);
  kiln_tensor_info info;
  assert_int_equal(kiln_model_input_info(m, 0, &info), KILN_ERR_INVALID_ARGUMENT);

  /* a session on a model that did not load */
  kiln_session *s = NULL;
  assert_session_fails(kiln_session_create(m, NULL, &s), s, KILN_ERR_STATE);
  tu_assert_contains(kiln_session_error(s), path);
  kiln_session_free(s);
  kiln_model_free(m);

  /* a folder is not a model file */
  m = NULL;
  kiln_status st = kiln_model_load("models/digits_cnn", NULL, &m);
  assert_int_not_equal(st, KILN_OK);
  tu_assert_contains(kiln_model_error(m), "models/digits_cnn");
  kiln_model_free(m);

  /* a missing TorchScript file is an i/o error too */
  const char *pt = "models/no_such_model/model.pt";
  m = NULL;
  assert_model_fails(kiln_model_load(pt, NULL, &m), m, KILN_ERR_IO);
  tu_assert_contains(kiln_model_error(m), pt);
  kiln_model_free(m);
}

static void test_input_errors(void **state) {
  (void)state;
  kiln_model *m = load(CNN, NULL);
  kiln_session *s = session(m, NULL);
  float img[2 * 64] = {0};
  const int64_t good[4] = {1, 1, 8, 8};

  assert_session_fails(kiln_session_set_input(s, "image", KILN_DTYPE_FLOAT32, 4, good, img,
                                              256), s, KILN_ERR_NOT_FOUND);
  tu_assert_contains(kiln_session_error(s), "'image'");

  assert_session_fails(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT64, 4, good, img,
                                              512), s, KILN_ERR_DTYPE);
  tu_assert_contains(kiln_session_error(s), "expected float32, got float64");
  assert_session_fails(kiln_session_set_input(s, "input", (kiln_dtype)77, 4, good, img, 256),
                       s, KILN_ERR_DTYPE);

  const int64_t rank3[3] = {1, 8, 8};
  assert_session_fails(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 3, rank3, img,
                                              256), s, KILN_ERR_SHAPE);
  tu_assert_contains(kiln_session_error(s), "expected shape float32[batch,1,8,8], got [1,8,8]");

  const int64_t two_ch[4] = {1, 2, 8, 8};
  assert_session_fails(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, two_ch, img,
                                              512), s, KILN_ERR_SHAPE);
  tu_assert_contains(kiln_session_error(s), "expected shape float32[batch,1,8,8], got [1,2,8,8]");
  tu_assert_contains(kiln_session_error(s), "dim 1");

  const int64_t neg[4] = {-1, 1, 8, 8};
  assert_session_fails(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, neg, img,
                                              256), s, KILN_ERR_SHAPE);

  const int64_t huge[4] = {INT64_C(1) << 62, 1, 8, 8};
  assert_session_fails(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, huge, img,
                                              256), s, KILN_ERR_LIMIT);

  assert_session_fails(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, good, img,
                                              255), s, KILN_ERR_SHAPE);
  tu_assert_contains(kiln_session_error(s), "256 bytes");
  tu_assert_contains(kiln_session_error(s), "255");
  assert_session_fails(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, good, img,
                                              512), s, KILN_ERR_SHAPE);

  int64_t deep[9] = {1, 1, 8, 8, 1, 1, 1, 1, 1};
  assert_session_fails(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 9, deep, img,
                                              256), s, KILN_ERR_INVALID_ARGUMENT);
  assert_session_fails(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, -1, good, img,
                                              256), s, KILN_ERR_INVALID_ARGUMENT);

  /* after all that, a good binding runs, and a successful call clears the message */
  assert_session_ok(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, good, img, 256),
                    s);
  assert_string_equal(kiln_session_error(s), "");
  assert_session_ok(kiln_session_run(s), s);
  kiln_session_free(s);
  kiln_model_free(m);
}

static void test_state_errors(void **state) {
  (void)state;
  kiln_model *m = load(CNN, NULL);
  kiln_session *s = session(m, NULL);
  kiln_tensor_info info;
  const void *data = NULL;
  assert_session_fails(kiln_session_get_output(s, 0, &info, &data), s, KILN_ERR_STATE);
  assert_session_fails(kiln_session_run(s), s, KILN_ERR_STATE);
  tu_assert_contains(kiln_session_error(s), "'input'");
  /* each failure reports itself, not an older one */
  assert_session_fails(kiln_session_get_output(s, 0, &info, &data), s, KILN_ERR_STATE);
  assert_null(strstr(kiln_session_error(s), "'input'"));

  float img[64] = {0};
  const int64_t dims[4] = {1, 1, 8, 8};
  assert_session_ok(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, dims, img,
                                           sizeof img), s);
  assert_session_ok(kiln_session_run(s), s);
  assert_session_ok(kiln_session_get_output(s, 0, &info, &data), s);
  assert_non_null(data);
  assert_session_fails(kiln_session_get_output(s, 1, &info, &data), s,
                       KILN_ERR_INVALID_ARGUMENT);
  tu_assert_contains(kiln_session_error(s), "out of range");
  assert_session_fails(kiln_session_get_output(s, -1, &info, &data), s,
                       KILN_ERR_INVALID_ARGUMENT);
  tu_assert_contains(kiln_session_error(s), "-1");
  /* a failed get_output does not lose the run: index 0 still works */
  assert_session_ok(kiln_session_get_output(s, 0, &info, &data), s);
  assert_int_equal(info.dims[0], 1);
  kiln_session_free(s);
  kiln_model_free(m);
}

/* s runs a batch of one but refuses the batch of 16: KILN_ERR_LIMIT, with a message
 * containing why. */
static void batch16_refused(kiln_session *s, const char *why) {
  run_set(s, CNN_SET1);
  kl_tensor in = read_tensor(CNN_SET0, "input_0.pb");
  assert_session_ok(set_tensor(s, "input", &in), s);
  assert_session_fails(kiln_session_run(s), s, KILN_ERR_LIMIT);
  tu_assert_contains(kiln_session_error(s), why);
  free(in.data);
}

/* Weights of the CNN: about 21 KB; its largest single weight is 32x16x3x3 floats
 * (18432 bytes); its first Conv's output is 16x8x8 floats (4096 bytes) per image. */
static void test_max_tensor_bytes(void **state) {
  (void)state;
  kiln_options *o = NULL;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  /* a limit below the largest weight: the model does not load */
  assert_int_equal(kiln_options_set_int(o, "max_tensor_bytes", 1000), KILN_OK);
  kiln_model *m = NULL;
  assert_model_fails(kiln_model_load(CNN, o, &m), m, KILN_ERR_LIMIT);
  kiln_model_free(m);

  /* above every weight, below the batch-16 activations: batch 1 runs, 16 does not */
  assert_int_equal(kiln_options_set_int(o, "max_tensor_bytes", 20000), KILN_OK);
  m = load(CNN, o);
  kiln_session *s = session(m, NULL);
  batch16_refused(s, "limit");
  kiln_tensor_info info;
  assert_session_fails(kiln_session_get_output(s, 0, &info, NULL), s, KILN_ERR_STATE);
  run_set(s, CNN_SET1); /* the session is still usable */
  kiln_session_free(s);

  /* a session's own options override the model's */
  assert_int_equal(kiln_options_set_int(o, "max_tensor_bytes", INT64_C(1) << 30), KILN_OK);
  s = session(m, o);
  run_set(s, CNN_SET0);
  kiln_session_free(s);
  kiln_model_free(m);
  kiln_options_free(o);
}

static void test_memory_limit(void **state) {
  (void)state;
  kiln_options *o = NULL;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  /* a limit under the weights alone: nothing can run */
  assert_int_equal(kiln_options_set_int(o, "memory_limit", 4096), KILN_OK);
  kiln_model *m = NULL;
  kiln_status st = kiln_model_load(CNN, o, &m);
  assert_non_null(m);
  if (st == KILN_OK) {
    kiln_session *s = NULL;
    st = kiln_session_create(m, NULL, &s);
    if (st == KILN_OK) {
      kl_tensor in = read_tensor(CNN_SET1, "input_0.pb");
      assert_session_ok(set_tensor(s, "input", &in), s);
      assert_session_fails(kiln_session_run(s), s, KILN_ERR_LIMIT);
      tu_assert_contains(kiln_session_error(s), "memory limit");
      free(in.data);
    } else {
      assert_int_equal(st, KILN_ERR_LIMIT);
      assert_true(kiln_session_error(s)[0] != '\0');
    }
    kiln_session_free(s);
  } else {
    assert_int_equal(st, KILN_ERR_LIMIT);
    assert_true(kiln_model_error(m)[0] != '\0');
  }
  kiln_model_free(m);

  /* room for the weights and a batch of one, not for a batch of 16 */
  assert_int_equal(kiln_options_set_int(o, "memory_limit", 64 << 10), KILN_OK);
  m = load(CNN, o);
  kiln_session *s = session(m, NULL);
  batch16_refused(s, "memory limit");
  kiln_session_free(s);

  /* no limit (0) on the session: the batch of 16 runs */
  assert_int_equal(kiln_options_set_int(o, "memory_limit", 0), KILN_OK);
  s = session(m, o);
  run_set(s, CNN_SET0);
  kiln_session_free(s);
  kiln_model_free(m);
  kiln_options_free(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version_and_strings),
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_precision_cpu),
      cmocka_unit_test(test_options_used),
      cmocka_unit_test(test_load_path),
      cmocka_unit_test(test_load_memory),
      cmocka_unit_test(test_run_expected),
      cmocka_unit_test(test_run_twice_identical),
      cmocka_unit_test(test_batch_sizes),
      cmocka_unit_test(test_null_arguments),
      cmocka_unit_test(test_missing_file),
      cmocka_unit_test(test_input_errors),
      cmocka_unit_test(test_state_errors),
      cmocka_unit_test(test_max_tensor_bytes),
      cmocka_unit_test(test_memory_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
