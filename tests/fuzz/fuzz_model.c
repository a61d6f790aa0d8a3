/* What the model targets share (fuzz_model.h): load a model from memory with the
 * verifier on, and run a small one once on random inputs. Moved here unchanged from
 * fuzz_onnx.c when fuzz_torchscript.c came, so that both check a model the same way. */
#include "fuzz_model.h"

#include "runtime/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOAD_MAX_TENSOR_BYTES (INT64_C(64) << 20)
#define RUN_MAX_TENSOR_BYTES (INT64_C(1) << 20)
/* If/Loop/Scan bodies' work per run (option max_work; each pass counts at least
 * KL_CONTROL_ITERATION_STEPS, 2^22): 256 passes of small bodies, so that a mutated while
 * whose condition never changes stops in well under a second rather than at the
 * default's 2^40 steps, past libFuzzer's timeout */
#define RUN_MAX_WORK (INT64_C(1) << 30)
#define RUN_BUFFER_BYTES (INT64_C(16) << 20)
#define RUN_MAX_WEIGHT_BYTES ((size_t)4 << 20)
#define RUN_MAX_INPUT_ELEMS 4096

/* splitmix64: small, and good enough to spread input values around */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

uint64_t fuzz_hash_bytes(const uint8_t *data, size_t size) {
  uint64_t h = UINT64_C(1469598103934665603); /* FNV-1a */
  for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * UINT64_C(1099511628211);
  return h;
}

static const char *target_name = "fuzz";

static void fail_internal(const char *where, const char *msg) {
  fprintf(stderr, "%s: KILN_ERR_INTERNAL from %s: %s\n", target_name, where, msg);
  __builtin_trap();
}

static size_t weight_bytes(const kiln_model *m) {
  size_t total = 0;
  for (int v = 0; v < m->g->n_values; v++)
    if (m->g->values[v].kind == KL_VALUE_CONST) total += m->g->values[v].nbytes;
  return total;
}

/* Inputs of a run: shapes with symbols resolved, and their buffers. */
typedef struct run_inputs {
  int64_t dims[64][KL_MAX_RANK];
  int rank[64];
  void *data[64];
  size_t bytes[64];
} run_inputs;

/* The size of dim d of an input: fixed as declared; a symbol gets 1..3 from the seed and
 * its name, so that every dim naming it gets the same size. */
static int64_t pick_dim(const kiln_tensor_info *info, int input, int d, uint64_t seed) {
  if (info->dims[d] >= 0) return info->dims[d];
  const char *sym = info->dim_names[d];
  uint64_t r = seed ^ (sym ? fuzz_hash_bytes((const uint8_t *)sym, strlen(sym))
                           : (uint64_t)(input * KL_MAX_RANK + d));
  return 1 + (int64_t)(next_random(&r) % 3);
}

static void fill_values(void *data, kiln_dtype dt, int64_t n, uint64_t *rng) {
  bool is_float = dt == KILN_DTYPE_FLOAT32 || dt == KILN_DTYPE_FLOAT64 ||
                  dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16;
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = next_random(rng);
    /* small integers make valid indices and axes likely; floats in [-4, 4) */
    double v = dt == KILN_DTYPE_BOOL ? (double)(r & 1)
               : is_float            ? (double)(int64_t)(r % 8192) / 1024.0 - 4.0
                                     : (double)(int64_t)(r % 8) - 2.0;
    if (dt == KILN_DTYPE_UINT8 || dt == KILN_DTYPE_UINT16 || dt == KILN_DTYPE_UINT32 ||
        dt == KILN_DTYPE_UINT64)
      v = (double)(r % 8);
    kl_store_f64(data, (kl_dtype)dt, (size_t)i, v);
  }
}

/* Make input i; false when it is too big to run the model on. */
static bool make_input(const kiln_model *m, int i, uint64_t seed, run_inputs *in) {
  kiln_tensor_info info;
  if (kiln_model_input_info(m, i, &info) != KILN_OK || kiln_dtype_size(info.dtype) == 0)
    return false;
  int rank = info.rank < 0 ? 1 : info.rank; /* an unranked input gets a vector */
  int64_t numel = 1;
  for (int d = 0; d < rank; d++) {
    int64_t size = info.rank < 0 ? 2 : pick_dim(&info, i, d, seed);
    in->dims[i][d] = size;
    if (size > RUN_MAX_INPUT_ELEMS) return false;
    numel *= size; /* both at most RUN_MAX_INPUT_ELEMS: no overflow */
    if (numel > RUN_MAX_INPUT_ELEMS) return false;
  }
  in->rank[i] = rank;
  in->bytes[i] = (size_t)numel * kiln_dtype_size(info.dtype);
  in->data[i] = malloc(in->bytes[i] ? in->bytes[i] : 1);
  if (!in->data[i]) return false;
  uint64_t values = seed ^ UINT64_C(0x5DEECE66D) ^ (uint64_t)i;
  fill_values(in->data[i], info.dtype, numel, &values);
  return true;
}

/* Touch every output byte, so that a buffer shorter than its shape says is caught. */
static void read_outputs(kiln_session *s, int n_outputs) {
  volatile uint8_t sink = 0;
  for (int k = 0; k < n_outputs; k++) {
    kiln_tensor_info info;
    const void *data;
    if (kiln_session_get_output(s, k, &info, &data) != KILN_OK) __builtin_trap();
    size_t bytes = kiln_dtype_size(info.dtype);
    for (int d = 0; d < info.rank; d++) bytes *= (size_t)info.dims[d];
    for (size_t b = 0; b < bytes; b++) sink ^= ((const uint8_t *)data)[b];
  }
  (void)sink;
}

static void run_once(const kiln_model *m, uint64_t seed) {
  int n = kiln_model_input_count(m);
  if (n > 64 || weight_bytes(m) > RUN_MAX_WEIGHT_BYTES) return;
  run_inputs in;
  memset(&in, 0, sizeof in);
  kiln_options *o = NULL;
  kiln_session *s = NULL;
  bool ok = kiln_options_create(&o) == KILN_OK &&
            kiln_options_set_int(o, "threads", 1) == KILN_OK &&
            kiln_options_set_int(o, "max_tensor_bytes", RUN_MAX_TENSOR_BYTES) == KILN_OK &&
            kiln_options_set_int(o, "max_work", RUN_MAX_WORK) == KILN_OK &&
            kiln_options_set_int(o, "memory_limit",
                                 (int64_t)weight_bytes(m) + RUN_BUFFER_BYTES) == KILN_OK;
  for (int i = 0; ok && i < n; i++) ok = make_input(m, i, seed, &in);
  kiln_status st = ok ? kiln_session_create(m, o, &s) : KILN_OK;
  if (st == KILN_ERR_INTERNAL) fail_internal("kiln_session_create", kiln_session_error(s));
  for (int i = 0; ok && st == KILN_OK && i < n; i++) {
    kiln_tensor_info info;
    kiln_model_input_info(m, i, &info);
    st = kiln_session_set_input(s, info.name, info.dtype, in.rank[i], in.dims[i], in.data[i],
                                in.bytes[i]);
  }
  if (ok && st == KILN_OK) st = kiln_session_run(s);
  if (st == KILN_ERR_INTERNAL) fail_internal("kiln_session_run", kiln_session_error(s));
  if (ok && st == KILN_OK) read_outputs(s, kiln_model_output_count(m));
  kiln_session_free(s);
  kiln_options_free(o);
  for (int i = 0; i < n; i++) free(in.data[i]);
}

void fuzz_model_check(const char *target, const void *data, size_t size, uint64_t seed) {
  kiln_options *o = NULL;
  kiln_model *m = NULL;
  target_name = target;
  if (kiln_options_create(&o) != KILN_OK ||
      kiln_options_set_int(o, "max_tensor_bytes", LOAD_MAX_TENSOR_BYTES) != KILN_OK ||
      kiln_options_set_int(o, "verify", 1) != KILN_OK ||
      kiln_options_set_int(o, "opt_level", (int64_t)(seed >> 62)) != KILN_OK)
    __builtin_trap();
  kiln_status st = kiln_model_load_memory(data, size, o, &m);
  static int verbose = -1; /* KILN_FUZZ_VERBOSE=1: say why an input was refused */
  if (verbose < 0) verbose = getenv("KILN_FUZZ_VERBOSE") != NULL;
  if (verbose)
    fprintf(stderr, "%s: load: %s\n", target, st == KILN_OK ? "ok" : kiln_model_error(m));
  if (st == KILN_ERR_INTERNAL) fail_internal("kiln_model_load_memory", kiln_model_error(m));
  if (st == KILN_OK) run_once(m, seed);
  kiln_model_free(m);
  kiln_options_free(o);
}
