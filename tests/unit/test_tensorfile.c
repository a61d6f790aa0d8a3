/* Tensor files: .npy and TensorProto .pb round trips, the files numpy and onnx write
 * (tests/unit/fixtures/tensors/, made by make_onnx_fixtures.py), and broken files. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "import/tensorfile.h"

#include "testutil.h"

#define FIXTURES "tests/unit/fixtures/tensors/"
#define NO_LIMIT (INT64_C(1) << 40)

static size_t nbytes_of(const kl_tensor *t) {
  size_t n = kl_dtype_size(t->dtype);
  for (int i = 0; i < t->rank; i++) n *= (size_t)t->dims[i];
  return n;
}

static void expect_same(const kl_tensor *got, const kl_tensor *want) {
  assert_int_equal(got->dtype, want->dtype);
  assert_int_equal(got->rank, want->rank);
  for (int i = 0; i < want->rank; i++) assert_int_equal(got->dims[i], want->dims[i]);
  assert_non_null(got->data);
  size_t n = nbytes_of(want);
  if (n) assert_memory_equal(got->data, want->data, n);
}

static kl_tensor read_ok(const char *path, char **name) {
  kl_tensor t;
  kl_err e;
  kl_err_clear(&e);
  tu_assert_status(kl_tensorfile_read(path, NO_LIMIT, &t, name, &e), KILN_OK, e.msg, NULL);
  return t;
}

static void read_fails(const char *path, int64_t max, kiln_status want, const char *sub) {
  kl_tensor t;
  kl_err e;
  kl_err_clear(&e);
  char *name = (char *)&e; /* must be reset to NULL */
  tu_assert_status(kl_tensorfile_read(path, max, &t, &name, &e), want, e.msg, sub);
  assert_null(t.data);
  assert_null(name);
}

/* ---- round trips ---- */

static const struct {
  kl_dtype dtype;
  int rank;
  int64_t dims[3];
} shapes[] = {
    {KL_F32, 2, {2, 3}}, {KL_F64, 0, {0}},    {KL_F16, 1, {5}},     {KL_I8, 3, {2, 1, 3}},
    {KL_U8, 1, {1}},     {KL_I16, 1, {4}},    {KL_U16, 2, {2, 2}},  {KL_I32, 1, {3}},
    {KL_U32, 1, {3}},    {KL_I64, 2, {1, 3}}, {KL_U64, 1, {2}},     {KL_BOOL, 1, {4}},
    {KL_F32, 2, {0, 3}},
};

static kl_tensor make(size_t i, uint8_t *buf) {
  kl_tensor t = {.dtype = shapes[i].dtype, .rank = shapes[i].rank, .data = buf};
  memcpy(t.dims, shapes[i].dims, sizeof shapes[i].dims);
  for (size_t k = 0; k < nbytes_of(&t); k++)
    buf[k] = t.dtype == KL_BOOL ? (uint8_t)(k % 2) : (uint8_t)(k * 37 + i);
  return t;
}

static void test_npy_round_trip(void **state) {
  const tu_tmpdir *d = *state;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    uint8_t buf[64];
    kl_tensor t = make(i, buf);
    kl_err e;
    kl_err_clear(&e);
    assert_int_equal(kl_npy_write(d->path, &t, &e), KILN_OK);
    /* numpy's layout: the data starts at a multiple of 64 bytes */
    size_t len;
    uint8_t *file = tu_read_file(d->path, &len);
    assert_int_equal((len - nbytes_of(&t)) % 64, 0);
    assert_int_equal(file[len - nbytes_of(&t) - 1], '\n');
    free(file);
    char *name = (char *)&e;
    kl_tensor r = read_ok(d->path, &name);
    assert_null(name);
    expect_same(&r, &t);
    free(r.data);
  }
}

static void test_npy_header_text(void **state) {
  const tu_tmpdir *d = *state;
  float v[6] = {0};
  kl_tensor t = {.dtype = KL_F32, .rank = 2, .dims = {2, 3}, .data = v};
  kl_err e;
  kl_err_clear(&e);
  assert_int_equal(kl_npy_write(d->path, &t, &e), KILN_OK);
  size_t len;
  char *file = tu_read_file(d->path, &len);
  const char want[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, "
                      "'shape': (2, 3), }";
  assert_memory_equal(file, want, sizeof want - 1);
  free(file);

  t.rank = 1;
  t.dims[0] = 6;
  assert_int_equal(kl_npy_write(d->path, &t, &e), KILN_OK);
  file = tu_read_file(d->path, &len);
  file[len - 24 - 1] = '\0';
  assert_non_null(strstr(file + 10, "'shape': (6,), }"));
  free(file);
}

static void test_pb_round_trip(void **state) {
  const tu_tmpdir *d = *state;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    uint8_t buf[64];
    kl_tensor t = make(i, buf);
    kl_err e;
    kl_err_clear(&e);
    assert_int_equal(kl_tensorpb_write(d->path, &t, "input_0", &e), KILN_OK);
    char *name = NULL;
    kl_tensor r = read_ok(d->path, &name);
    assert_string_equal(name, "input_0");
    expect_same(&r, &t);
    free(r.data);
    free(name);
  }
  /* bfloat16 has no NumPy type but a TensorProto one; a nameless tensor */
  uint16_t bf[2] = {0x3f80, 0x4000};
  kl_tensor t = {.dtype = KL_BF16, .rank = 1, .dims = {2}, .data = bf};
  kl_err e;
  kl_err_clear(&e);
  assert_int_equal(kl_tensorpb_write(d->path, &t, NULL, &e), KILN_OK);
  char *name = (char *)&e;
  kl_tensor r = read_ok(d->path, &name);
  assert_null(name);
  expect_same(&r, &t);
  free(r.data);
  assert_int_equal(kl_npy_write(d->path, &t, &e), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(e.msg, "bfloat16 has no NumPy dtype"));
}

/* A large tensor: the raw_data length varint spans several bytes. */
static void test_pb_large(void **state) {
  const tu_tmpdir *d = *state;
  enum { N = 100000 };
  float *v = malloc(N * sizeof *v);
  assert_non_null(v);
  for (int i = 0; i < N; i++) v[i] = (float)i * 0.5f;
  kl_tensor t = {.dtype = KL_F32, .rank = 2, .dims = {N / 4, 4}, .data = v};
  kl_err e;
  kl_err_clear(&e);
  assert_int_equal(kl_tensorpb_write(d->path, &t, "big", &e), KILN_OK);
  kl_tensor r = read_ok(d->path, NULL);
  expect_same(&r, &t);
  free(r.data);
  free(v);
}

static void test_writer_errors(void **state) {
  (void)state;
  kl_err e;
  kl_err_clear(&e);
  float v = 1;
  kl_tensor t = {.dtype = KL_F32, .rank = 1, .dims = {1}, .data = &v};
  assert_int_equal(kl_npy_write("/nonexistent-dir/x.npy", &t, &e), KILN_ERR_IO);
  assert_non_null(strstr(e.msg, "/nonexistent-dir/x.npy: cannot create"));
  kl_err_clear(&e);
  t.dims[0] = -1;
  assert_int_equal(kl_tensorpb_write("/tmp/unused.pb", &t, NULL, &e), KILN_ERR_INVALID_ARGUMENT);
  kl_err_clear(&e);
  t.dims[0] = 2;
  t.data = NULL;
  assert_int_equal(kl_npy_write("/tmp/unused.npy", &t, &e), KILN_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(e.msg, "no data"));
  /* a device named as the output is refused, not renamed over: as root, `-o /dev/null`
   * made /dev/null a regular file (round 6 of issue 20) */
  kl_err_clear(&e);
  t.dims[0] = 1;
  t.data = &v;
  assert_int_equal(kl_npy_write("/dev/null", &t, &e), KILN_ERR_IO);
  assert_non_null(strstr(e.msg, "/dev/null is a device, not a regular file"));
  struct stat st;
  assert_int_equal(lstat("/dev/null", &st), 0);
  assert_true(S_ISCHR(st.st_mode));
}

/* ---- what numpy and onnx write ---- */

static void test_python_files(void **state) {
  (void)state;
  static const char *const names[] = {"f32_2x3", "f16_4", "f64_scalar", "i64_3",
                                      "i8_2x2",  "u8_5",  "bool_3",     "empty_0x3"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char npy[128], pb[128];
    snprintf(npy, sizeof npy, FIXTURES "%s.npy", names[i]);
    snprintf(pb, sizeof pb, FIXTURES "%s.pb", names[i]);
    char *name = NULL;
    kl_tensor a = read_ok(npy, NULL), b = read_ok(pb, &name);
    assert_string_equal(name, names[i]);
    expect_same(&a, &b);
    free(a.data);
    free(b.data);
    free(name);
  }
  kl_tensor t = read_ok(FIXTURES "f32_2x3.npy", NULL);
  assert_int_equal(t.rank, 2);
  assert_int_equal(t.dims[1], 3);
  assert_true(((float *)t.data)[5] == 0.625f);
  kl_tensor v2 = read_ok(FIXTURES "f32_2x3_v2.npy", NULL);
  expect_same(&v2, &t);
  free(v2.data);
  free(t.data);
  t = read_ok(FIXTURES "i64_3.pb", NULL);
  assert_int_equal(((int64_t *)t.data)[2], INT64_C(1) << 40);
  free(t.data);
  t = read_ok(FIXTURES "f64_scalar.npy", NULL);
  assert_int_equal(t.rank, 0);
  assert_true(*(double *)t.data == -0.25);
  free(t.data);
  read_fails(FIXTURES "fortran_2x3.npy", NO_LIMIT, KILN_ERR_UNSUPPORTED, "Fortran order");
  read_fails(FIXTURES "bigendian_2.npy", NO_LIMIT, KILN_ERR_UNSUPPORTED,
             "big-endian data ('>f4')");
}

/* ---- broken .npy files ---- */

/* A .npy file with the given header text (padded as numpy does) and data bytes. */
static void write_npy(const char *path, int major, const char *header, const void *data,
                      size_t n) {
  uint8_t buf[1024];
  size_t pre = major == 1 ? 10 : 12, hl = strlen(header);
  size_t total = (pre + hl + 1 + 63) / 64 * 64;
  assert_true(total + n <= sizeof buf);
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (uint8_t)major;
  buf[7] = 0;
  size_t hlen = total - pre;
  for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (uint8_t)(hlen >> (8 * i));
  memcpy(buf + pre, header, hl);
  memset(buf + pre + hl, ' ', total - pre - hl - 1);
  buf[total - 1] = '\n';
  if (n) memcpy(buf + total, data, n);
  tu_write_file(path, buf, total + n);
}

static void npy_fails(const tu_tmpdir *d, int major, const char *header, size_t n,
                      kiln_status want, const char *sub) {
  static const uint8_t zeros[256];
  write_npy(d->path, major, header, zeros, n);
  read_fails(d->path, NO_LIMIT, want, sub);
}

static void test_npy_headers(void **state) {
  const tu_tmpdir *d = *state;
  /* variants numpy could write: format 3.0, no trailing comma, double quotes */
  write_npy(d->path, 3, "{\"descr\": \"<i4\", \"shape\": (2,), \"fortran_order\": False}",
            (int32_t[]){7, -7}, 8);
  kl_tensor t = read_ok(d->path, NULL);
  assert_int_equal(t.dtype, KL_I32);
  assert_int_equal(((int32_t *)t.data)[1], -7);
  free(t.data);
  write_npy(d->path, 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
            "\x00\x01\x05", 3);
  t = read_ok(d->path, NULL);
  assert_memory_equal(t.data, "\x00\x01\x01", 3); /* bools normalized */
  free(t.data);

  const char *f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  npy_fails(d, 1, f4, 20, KILN_ERR_INVALID_MODEL, ".npy data is 20 bytes, expected 24");
  npy_fails(d, 1, f4, 28, KILN_ERR_INVALID_MODEL, ".npy data is 28 bytes, expected 24");
  npy_fails(d, 1, "{'descr': '<f4', 'shape': (2, 3), }", 24, KILN_ERR_INVALID_MODEL,
            "lacks 'fortran_order'");
  npy_fails(d, 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (), }",
            4, KILN_ERR_INVALID_MODEL, "gives 'descr' twice");
  npy_fails(d, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", 24,
            KILN_ERR_INVALID_MODEL, "unknown key 'x'");
  npy_fails(d, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", 24,
            KILN_ERR_INVALID_MODEL, "expected a dimension");
  npy_fails(d, 1, "{'descr': '<f4', 'fortran_order': false, 'shape': (2,), }", 8,
            KILN_ERR_INVALID_MODEL, "expected True or False");
  npy_fails(d, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x", 24,
            KILN_ERR_INVALID_MODEL, "expected the end of the header");
  npy_fails(d, 1, "{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }", 8,
            KILN_ERR_INVALID_MODEL, "malformed .npy header");
  npy_fails(d, 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4,
            KILN_ERR_INVALID_MODEL, "expected a string");
  npy_fails(d, 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", 8,
            KILN_ERR_UNSUPPORTED, "NumPy dtype '<c8' is not supported");
  npy_fails(d, 1, "{'descr': '|f4', 'fortran_order': False, 'shape': (1,), }", 4,
            KILN_ERR_UNSUPPORTED, "NumPy dtype '|f4'");
  npy_fails(d, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }",
            4, KILN_ERR_UNSUPPORTED, "more than 8 dimensions");
  npy_fails(d, 1, "{'descr': '<f4', 'fortran_order': False, "
            "'shape': (99999999999999999999,), }", 4, KILN_ERR_LIMIT, "dimension overflows");
  npy_fails(d, 1, "{'descr': '<f8', 'fortran_order': False, "
            "'shape': (4294967296, 4294967296), }", 4, KILN_ERR_LIMIT, "too large");
}

static void test_npy_broken_files(void **state) {
  const tu_tmpdir *d = *state;
  write_npy(d->path, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
            (double[]){1, 2, 3}, 24);
  read_fails(d->path, 23, KILN_ERR_LIMIT, ".npy data is 24 bytes, over the limit of 23");

  size_t len;
  uint8_t *good = tu_read_file(d->path, &len);
  /* every truncation fails with a message, never a crash */
  for (size_t cut = 0; cut < len; cut++) {
    kl_tensor t;
    kl_err e;
    kl_err_clear(&e);
    assert_int_not_equal(kl_npy_parse(good, cut, NO_LIMIT, &t, &e), KILN_OK);
    assert_true(e.msg[0] != '\0');
  }
  uint8_t bad[256];
  assert_true(len <= sizeof bad);
  memcpy(bad, good, len);
  bad[6] = 4;
  tu_write_file(d->path, bad, len);
  read_fails(d->path, NO_LIMIT, KILN_ERR_UNSUPPORTED, ".npy format version 4.0");
  memcpy(bad, good, len);
  bad[8] = 0xff; /* header length past the end of the file */
  bad[9] = 0xff;
  tu_write_file(d->path, bad, len);
  read_fails(d->path, NO_LIMIT, KILN_ERR_INVALID_MODEL, "the file is truncated");
  memcpy(bad, "\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12);
  tu_write_file(d->path, bad, 12);
  read_fails(d->path, NO_LIMIT, KILN_ERR_LIMIT, ".npy header is 2147483647 bytes");
  free(good);
}

/* ---- broken .pb files and files that are neither ---- */

static void test_pb_broken_files(void **state) {
  const tu_tmpdir *d = *state;
  tu_write_file(d->path, "\x0a\xff\xff\xff", 4);
  read_fails(d->path, NO_LIMIT, KILN_ERR_INVALID_MODEL,
             "not a tensor file: neither .npy nor a TensorProto");
  assert_int_equal(strncmp(d->path, "/tmp/kiln-test-", 15), 0);
  /* the message names the file */
  tu_write_file(d->path, "", 0);
  read_fails(d->path, NO_LIMIT, KILN_ERR_INVALID_MODEL, "tensor has no data type");
  read_fails(d->path, NO_LIMIT, KILN_ERR_INVALID_MODEL, d->path);

  /* dims [3] float, raw_data of 4 bytes */
  tu_write_file(d->path, "\x08\x03\x10\x01\x4a\x04\x00\x00\x80\x3f", 10);
  read_fails(d->path, NO_LIMIT, KILN_ERR_INVALID_MODEL, "raw_data has 4 bytes, expected 12");
  /* dims [1000] float, no data: the limit is checked first */
  tu_write_file(d->path, "\x08\xe8\x07\x10\x01", 5);
  read_fails(d->path, 100, KILN_ERR_LIMIT, "over the limit of 100");
  /* external data is never followed from a .pb file */
  tu_write_file(d->path, "\x08\x01\x10\x01\x6a\x0d\x0a\x08location\x12\x01x\x70\x01", 21);
  read_fails(d->path, NO_LIMIT, KILN_ERR_UNSUPPORTED, "external file ('x')");

  read_fails("/nonexistent/input_0.pb", NO_LIMIT, KILN_ERR_IO, "cannot open");
  read_fails(d->dir, NO_LIMIT, KILN_ERR_IO, "not a regular file");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      TU_TMPDIR_TEST(test_npy_round_trip),
      TU_TMPDIR_TEST(test_npy_header_text),
      TU_TMPDIR_TEST(test_pb_round_trip),
      TU_TMPDIR_TEST(test_pb_large),
      cmocka_unit_test(test_writer_errors),
      cmocka_unit_test(test_python_files),
      TU_TMPDIR_TEST(test_npy_headers),
      TU_TMPDIR_TEST(test_npy_broken_files),
      TU_TMPDIR_TEST(test_pb_broken_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
