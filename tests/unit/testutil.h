/* Helpers shared by the unit tests (tests/unit/test_*.c, linked from the testutil
 * static library that tests/meson.build builds once).
 *
 * - The one-node fixture (tu_fixture): a fresh graph holding one node, the input types
 *   (and the contents of shape inputs) its infer function gets, concrete tensors its
 *   reference kernel runs on as the runtime does (infer, outputs sized from what infer
 *   says, then the kernel), and checks of what came out.
 * - Types written as dims: TY(KL_F32, B, 3, U) is float32[batch,3,?]; a dim >= 0 is
 *   known, U unknown, B and S the symbols "batch" and "seq" (symbols 0 and 1 of every
 *   fixture graph). TY0 is a scalar, TYU a type of unknown rank.
 * - Comparisons of numbers with a tolerance (tu_tol), of statuses with the message
 *   that came with them, and small builders of graphs, files and folders.
 *
 * The checks are macros that pass the caller's file and line, so a failure points at
 * the line of the test, not at this library. Include this header after the system and
 * project headers: it defines short names (U, B, S, TY, DIMS, VALS, ...). */
#ifndef KILN_TESTUTIL_H
#define KILN_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/isa.h"
#include "ir/ir.h"

#define TU_MAX_IO 12 /* inputs or outputs of a fixture's node */

/* ---- counting literals ---- */

#define TU_LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define TU_COUNT(T, ...) ((int)(sizeof((T[]){__VA_ARGS__}) / sizeof(T)))
/* rank and dims arguments from a list: f(..., DIMS(2, 3), ...) */
#define DIMS(...) TU_COUNT(int64_t, __VA_ARGS__), (const int64_t[]){__VA_ARGS__}
#define VALS(...) ((const double[]){__VA_ARGS__})

/* ---- types written as dims ---- */

#define U (-1)   /* unknown */
#define B (-100) /* symbol 0, "batch" */
#define S (-101) /* symbol 1, "seq" */

/* A type of rank `rank` (-1: unknown) with dims written as above. */
kl_type tu_type(kl_dtype dt, int rank, const int64_t *dims);
#define TY(dt, ...) tu_type(dt, TU_COUNT(int64_t, __VA_ARGS__), (const int64_t[]){__VA_ARGS__})
#define TY0(dt) tu_type(dt, 0, NULL)
#define TYU(dt) tu_type(dt, -1, NULL)

/* ---- tolerances ---- */

/* got matches want when both are NaN, when they are equal (infinities included), or
 * when |got - want| <= atol + rtol * |want|. */
typedef struct tu_tol {
  double atol, rtol;
} tu_tol;
#define TU_TOL(atol, rtol) ((tu_tol){(atol), (rtol)})
#define TU_EXACT TU_TOL(0, 0)
#define TU_NEAR(tol) TU_TOL(tol, tol) /* |got - want| <= tol * (1 + |want|) */

/* ---- the one-node fixture ---- */

/* A concrete tensor given by reference, copied when used; dt KL_UNDEFINED is an absent
 * optional input. */
typedef struct tu_in {
  kl_dtype dt;
  int rank;
  int64_t dims[KL_MAX_RANK];
  const void *data;
} tu_in;

typedef struct tu_fixture {
  kl_graph *g;
  int node, n_in, n_out;
  kl_type in[TU_MAX_IO];       /* input types infer gets */
  bool present[TU_MAX_IO];     /* false: an absent optional input */
  const void *data[TU_MAX_IO]; /* contents infer gets; NULL when not known */
  kl_type out[TU_MAX_IO];      /* what infer said */
  kl_tensor tin[TU_MAX_IO];    /* kernel inputs (data owned) */
  kl_tensor tout[TU_MAX_IO];   /* kernel outputs (data owned) */
  kl_err e;                    /* the message of the last infer or kernel */
} tu_fixture;

/* cmocka's fail_msg names the line it is written on: this fails naming the test's
 * file and line (for checks that take __FILE__, __LINE__ from a macro). */
void tu_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* cmocka setup and teardown: *state becomes a tu_fixture. */
int tu_setup(void **state);
int tu_teardown(void **state);
/* Frees what f holds and zeroes it, for a fixture a test keeps itself. */
void tu_fixture_clear(tu_fixture *f);
#define TU_TEST(fn) cmocka_unit_test_setup_teardown(fn, tu_setup, tu_teardown)

/* Replaces f's graph by a fresh one holding a node of ONNX op `op` with n_in inputs,
 * all present with no contents, and n_out outputs; kernel tensors are freed. Input
 * types stay as they were, so a test can try several ops on the same inputs. */
void tu_one_node(tu_fixture *f, const char *op, int n_in, int n_out); /* "kiln.X": kiln's */

void tu_input(tu_fixture *f, int i, kl_type t); /* the type of input i; present */
void tu_absent(tu_fixture *f, int i);
void tu_contents(tu_fixture *f, int i, const void *data);
/* Input i an int64 constant holding v[0..n-1]: a scalar when rank is 0, else [n]. */
void tu_input_ints(tu_fixture *f, int i, int rank, const int64_t *v, int64_t n);

void tu_attr_int(tu_fixture *f, const char *name, int64_t v);
void tu_attr_float(tu_fixture *f, const char *name, float v);
void tu_attr_string(tu_fixture *f, const char *name, const char *v);
void tu_attr_ints(tu_fixture *f, const char *name, const int64_t *v, int n);
#define TU_ATTR_INTS(f, name, ...) \
  tu_attr_ints(f, name, (const int64_t[]){__VA_ARGS__}, TU_COUNT(int64_t, __VA_ARGS__))

/* Concrete input i: dtype dt and shape dims holding vals (stored in dt; vals may be
 * NULL when there are no elements), or a copy of t. Its type and contents become what
 * infer gets. */
void tu_tensor(tu_fixture *f, int i, kl_dtype dt, int rank, const int64_t *dims,
               const double *vals);
void tu_tensor_copy(tu_fixture *f, int i, const tu_in *t);

/* Infer on f's input types and contents; the outputs' types land in f->out. */
kiln_status tu_infer(tu_fixture *f);
/* The same with types in[] (NULL: absent) and contents data[] for every input. */
kiln_status tu_infer_with(tu_fixture *f, const kl_type *const *in, const void *const *data);
/* The reference kernel on f->tin, outputs (f->tout) allocated as the last infer said. */
kiln_status tu_kernel(tu_fixture *f);
/* tu_infer then, if it succeeded, tu_kernel: what the runtime does. */
kiln_status tu_run(tu_fixture *f);
/* tu_run after tu_tensor_copy of in[0..n_in-1]. */
kiln_status tu_run_on(tu_fixture *f, const tu_in *in);

/* Checks on the fixture; a failure names the test's line.
 * tu_expect_type(f, k, want): output k's type is want (a dim unknown in want must carry
 *   the same symbol).
 * tu_expect_ok(f, want): infer succeeds and output 0's type is want.
 * tu_expect_fail(f, code, part): infer fails with code and a message containing part.
 * tu_expect_run(f): tu_run succeeds.
 * tu_expect_values(f, k, tol, want, n): output k of the last run holds want[0..n-1]
 *   within tol; TU_EXPECT(f, k, tol, values...) lists them. */
#define tu_expect_type(f, k, want) tu_expect_type_at(f, k, want, __FILE__, __LINE__)
#define tu_expect_ok(f, want) tu_expect_ok_at(f, want, __FILE__, __LINE__)
#define tu_expect_fail(f, code, part) tu_expect_fail_at(f, code, part, __FILE__, __LINE__)
#define tu_expect_run(f) tu_expect_run_at(f, __FILE__, __LINE__)
#define tu_expect_values(f, k, ...) \
  tu_assert_tensor_at(&(f)->tout[k], __VA_ARGS__, __FILE__, __LINE__)
#define TU_EXPECT(f, k, tol, ...) \
  tu_expect_values(f, k, tol, VALS(__VA_ARGS__), TU_COUNT(double, __VA_ARGS__))

void tu_expect_type_at(const tu_fixture *f, int k, kl_type want, const char *file, int line);
void tu_expect_ok_at(tu_fixture *f, kl_type want, const char *file, int line);
void tu_expect_fail_at(tu_fixture *f, kiln_status code, const char *part, const char *file,
                       int line);
void tu_expect_run_at(tu_fixture *f, const char *file, int line);

/* ---- checks on numbers, tensors and messages ---- */

/* As above, each names the caller's line; the arguments after the first may be compound
 * literals.
 * tu_assert_close(got, got_dt, want, want_dt, n, tol): got[0..n-1] of dtype got_dt
 *   against want[0..n-1] of dtype want_dt, within tol.
 * tu_assert_floats(got, want, n, tol): the same on two float arrays.
 * tu_assert_tensor(t, tol, want, n): tensor t has n elements, want[0..n-1] (doubles)
 *   within tol.
 * tu_assert_f32(t, want, n, tol): tensor t is float32 with n elements, want[0..n-1]
 *   (floats) within tol.
 * tu_assert_i64(t, want, n): tensor t is int64 with n elements equal to want[0..n-1].
 * tu_assert_dims(t, rank, dims): tensor t has rank `rank` and dims[0..rank-1].
 * tu_assert_contains(hay, needle): the string hay contains needle.
 * tu_assert_status(st, want, msg, part): a call returned st; it must be want, with a
 *   message msg that contains part (unless part is NULL). */
#define tu_assert_close(got, got_dt, ...) \
  tu_assert_close_at(got, got_dt, __VA_ARGS__, __FILE__, __LINE__)
#define tu_assert_floats(got, want, ...) \
  tu_assert_close_at(got, KL_F32, want, KL_F32, __VA_ARGS__, __FILE__, __LINE__)
#define tu_assert_tensor(t, ...) tu_assert_tensor_at(t, __VA_ARGS__, __FILE__, __LINE__)
#define tu_assert_f32(t, ...) tu_assert_f32_at(t, __VA_ARGS__, __FILE__, __LINE__)
#define tu_assert_i64(t, ...) tu_assert_i64_at(t, __VA_ARGS__, __FILE__, __LINE__)
#define tu_assert_dims(t, ...) tu_assert_dims_at(t, __VA_ARGS__, __FILE__, __LINE__)
#define tu_assert_contains(hay, needle) tu_assert_contains_at(hay, needle, __FILE__, __LINE__)
#define tu_assert_status(st, want, msg, part) \
  tu_assert_status_at(st, want, msg, part, __FILE__, __LINE__)

void tu_assert_close_at(const void *got, kl_dtype got_dt, const void *want, kl_dtype want_dt,
                        int64_t n, tu_tol tol, const char *file, int line);
void tu_assert_tensor_at(const kl_tensor *t, tu_tol tol, const double *want, int64_t n,
                         const char *file, int line);
void tu_assert_f32_at(const kl_tensor *t, const float *want, int64_t n, tu_tol tol,
                      const char *file, int line);
void tu_assert_i64_at(const kl_tensor *t, const int64_t *want, int64_t n, const char *file,
                      int line);
void tu_assert_dims_at(const kl_tensor *t, int rank, const int64_t *dims, const char *file,
                       int line);
void tu_assert_contains_at(const char *hay, const char *needle, const char *file, int line);
void tu_assert_status_at(int st, int want, const char *msg, const char *part, const char *file,
                         int line);

/* ---- graphs ---- */

kl_graph *tu_graph_new(void);
int tu_graph_value(kl_graph *g, const char *name); /* name may be NULL */
/* A graph input of dtype dt and shape dims (rank -1: unknown). */
int tu_graph_input(kl_graph *g, const char *name, kl_dtype dt, int rank, const int64_t *dims);
/* A constant holding a copy of data (NULL when it has no elements). */
int tu_graph_const(kl_graph *g, const char *name, kl_dtype dt, int rank, const int64_t *dims,
                   const void *data);
/* A node of op over in[] (KL_ABSENT allowed) writing out[]; returns its index. */
int tu_graph_node(kl_graph *g, kl_op op, const char *name, int n_in, const int *in, int n_out,
                  const int *out);
/* An unnamed node of op over in[] with one new output value, which it returns. */
int tu_graph_op(kl_graph *g, kl_op op, int n_in, const int *in);
#define TU_OP(g, op, ...) \
  tu_graph_op(g, KL_OP_##op, TU_COUNT(int, __VA_ARGS__), (const int[]){__VA_ARGS__})
/* An unnamed node of op over in[] with n_out new outputs, each made a graph output;
 * returns the node. */
int tu_graph_output_node(kl_graph *g, kl_op op, int n_in, const int *in, int n_out);
/* Sets the ints attribute `name` of node n to v[0..count-1]; nothing when count is 0. */
void tu_node_ints(kl_graph *g, int n, const char *name, int count, const int64_t *v);
/* A kiln.MultiHeadAttention case: Q, K, V [B, S or T, heads x width] (K and V absent
 * when packed: Q holds all three), an additive mask of mask_rank dims (0: none). With
 * dead_fill (not 0) the mask is a constant of tu_dead_rows_mask and the node has
 * zero_masked_rows=1. */
typedef struct tu_mha_case {
  const char *what;
  bool packed;
  int heads, mask_rank;
  int64_t q[3], k[3], v[3], mask[4];
  float dead_fill;
} tu_mha_case;
/* A graph of one such node (num_heads, scale 0.4) over float32 inputs q, k, v, mask,
 * its output the graph's. */
kl_graph *tu_mha_graph(const tu_mha_case *c);
/* A float32 constant mask of shape dims whose rows (along its last dim) that are 1 mod
 * 3 hold fill throughout (a query that sees no key, where it is -inf), the others fill
 * at every fourth position from the 4th (keys masked), 0 elsewhere. */
int tu_dead_rows_mask(kl_graph *g, int rank, const int64_t *dims, float fill);
/* Value id is an int64 constant of shape [n]; returns its data. */
const int64_t *tu_const_i64(const kl_graph *g, int id, int64_t n);
/* Loads an ONNX file that must load and verify. */
kl_graph *tu_load_onnx(const char *path);
/* A copy of output 0 of session s, which must hold a successful run's outputs, as
 * float32 (free it), and its element count in *count. */
float *tu_output0_f32(kiln_session *s, int64_t *count);
/* g written as ONNX and loaded back at opt_level (g is freed); fails the test when
 * either step fails. */
kiln_model *tu_model_of(kl_graph *g, int opt_level);

/* ---- sessions ---- */

/* A session of m on the reference kernels (reference) or the fast ones, with `threads`
 * threads (0: the default). */
kiln_session *tu_session(const kiln_model *m, bool reference, int threads);
/* The same with option precision (NULL: unset), the status returned and the session
 * (to free, or read its error) in *out, not failing the test. */
kiln_status tu_session_try(const kiln_model *m, bool reference, int threads,
                           const char *precision, kiln_session **out);
/* A symbolic dim of a model input is given this size by tu_run_f32. */
#define TU_SYMBOLIC_DIM 2
/* Elements of a model input of that shape (symbolic dims TU_SYMBOLIC_DIM). */
int64_t tu_input_numel(const kiln_tensor_info *info);
/* Runs s, a session of m, on the float32 inputs bufs[i] (model input i, of the shape m
 * gives it, symbolic dims TU_SYMBOLIC_DIM) and returns every output, float32, one after
 * another: a copy to free, its element count in *count. */
float *tu_run_f32(kiln_session *s, const kiln_model *m, float *const *bufs, int64_t *count);

/* Uniform in [lo, hi] from the xorshift32 generator state *rng. */
float tu_rand_f32(uint32_t *rng, float lo, float hi);
/* n floats uniform in [lo, hi] from *rng, in a new buffer of at least one. */
float *tu_rand_vec(uint32_t *rng, size_t n, float lo, float hi);
/* n floats (a new buffer of at least one) never zero: |v| in [0.1, 1] times span, either
 * sign, from *rng. */
float *tu_rand_nonzero(uint32_t *rng, size_t n, float span);

/* ---- the GPU backend ---- */

/* Exports g (freed) and loads it at opt_level, then runs it on random inputs (float32
 * uniform in [-2, 2], int64 in [0, int_hi)) with the reference kernels and with option
 * device "opencl" (PoCL in CI), twice, and fails unless every output matches within tol
 * (|got - want| <= atol + rtol |want|), or when all_on_device and a node ran on the CPU.
 * Returns how many nodes ran on the device. */
int tu_gpu_check(kl_graph *g, const char *what, int opt_level, tu_tol tol, int64_t int_hi,
                 bool all_on_device);
/* The same with option precision on the device ("fp32", "tf32": every convolution and
 * matrix product must then name its kernel TF32), and with tf32_inputs the float
 * inputs rounded to TF32 (then TF32 products are exact, only the order of the sums
 * differs from the reference's). tu_gpu_check is precision "fp32", inputs as drawn. */
int tu_gpu_check_at(kl_graph *g, const char *what, int opt_level, tu_tol tol, int64_t int_hi,
                    bool all_on_device, const char *precision, bool tf32_inputs);
/* When set, tu_gpu_check_at fills input i (n elements of dtype t at p) with it instead
 * of its own draws (float32 and int64 only), and compares every output bit for bit
 * (float32 NaN as any NaN) instead of within tol: the integer, bool and uint8 kernels
 * (test_gpu_dtypes). */
extern void (*tu_gpu_fill)(void *p, kl_dtype t, int64_t n, int input);
/* A session of m: on the CPU's reference kernels (reference, device NULL) or on device
 * (precision, when not NULL); fails the test when it cannot be made. */
kiln_session *tu_gpu_session(const kiln_model *m, const char *device, bool reference,
                             const char *precision);
/* Each of m's inputs from bufs[i], of the shape and dtype m gives it. */
void tu_gpu_set_inputs(kiln_session *s, const kiln_model *m, void *const *bufs);
/* When set, tu_gpu_check_at also requires every convolution, matrix product and
 * attention of the graph to have queued an OpenCL kernel whose name contains it
 * ("kl_tc_cvt"): a fast
 * path must not fall back unseen. */
extern const char *tu_gpu_expect_kernel;

/* ---- files ---- */

/* A cmocka fixture: a fresh folder /tmp/kiln-test-XXXXXX and a path in it (dir/file)
 * for the test to write; teardown removes that file and the folder, which must then be
 * empty. */
typedef struct tu_tmpdir {
  char dir[64];
  char path[96];
} tu_tmpdir;
int tu_tmpdir_setup(void **state);
int tu_tmpdir_teardown(void **state);
#define TU_TMPDIR_TEST(fn) \
  cmocka_unit_test_setup_teardown(fn, tu_tmpdir_setup, tu_tmpdir_teardown)

/* Makes a fresh folder /tmp/kiln-<tag>-XXXXXX, its path in dir[size]. */
void tu_mkdtemp(char *dir, size_t size, const char *tag);
void tu_write_file(const char *path, const void *data, size_t len);
/* The whole file, malloc'd with a NUL after its *len bytes. */
void *tu_read_file(const char *path, size_t *len);

/* The ISA levels this machine runs (KILN_ISA aside) into out[3], generic first: the
 * levels a kernel test compares against its reference. Returns their count. */
int tu_isa_levels(kl_isa *out);

#endif
