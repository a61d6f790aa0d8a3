/* kiln run: one inference on inputs from files or random ones. */
#include "cli.h"
#include "import/tensorfile.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const char *run_help =
    "usage: kiln run MODEL [options]\n"
    "  --input NAME=FILE     an input from a .pb (TensorProto) or .npy file; repeatable\n"
    "  --shape NAME=DIMS     shape of a random input, e.g. input=1x3x224x224\n"
    "                        (symbolic dims default to 1)\n"
    "  --seed N              seed for random inputs (default 1)\n"
    "  --output-dir DIR      write each output as DIR/NAME.npy (a sequence's elements as\n"
    "                        NAME.J.npy; at most 65536 files in all)\n"
    "  --format npy|pb       file format for --output-dir (default npy)\n"
    "  --iterations N        run N times and report the mean latency (default 1)\n";

#define MAX_ARGS 64

typedef struct run_args {
  const char *model;
  const char *inputs[MAX_ARGS];
  int n_inputs;
  const char *shapes[MAX_ARGS];
  int n_shapes;
  uint64_t seed;
  const char *out_dir;
  const char *format;
  int64_t iterations;
  cli_common common;
} run_args;

static void print_shape(int rank, const int64_t *dims) {
  printf("[");
  for (int d = 0; d < rank; d++) printf("%s%" PRId64, d ? "," : "", dims[d]);
  printf("]");
}

/* For a [rows, classes] output (a classifier's scores), the argmax of each row. */
static void print_row_argmax(const kiln_tensor_info *info, const void *data) {
  kl_dtype dt = (kl_dtype)info->dtype;
  int64_t rows = info->dims[0], cols = info->dims[1];
  printf("  argmax per row:");
  for (int64_t r = 0; r < rows && r < 32; r++) {
    int64_t best = 0;
    for (int64_t c = 1; c < cols; c++)
      if (kl_load_f64(data, dt, (size_t)(r * cols + c)) >
          kl_load_f64(data, dt, (size_t)(r * cols + best)))
        best = c;
    printf(" %" PRId64, best);
  }
  printf(rows > 32 ? " ...\n" : "\n");
}

/* name, dtype, shape, then min/max/mean and the first values. */
static void print_summary(const kiln_tensor_info *info, const void *data) {
  kl_dtype dt = (kl_dtype)info->dtype;
  int64_t n = 1;
  for (int d = 0; d < info->rank; d++) n *= info->dims[d];
  printf("%s: %s", info->name, kl_dtype_name(dt));
  print_shape(info->rank, info->dims);
  if (n == 0) {
    printf(" (empty)\n");
    return;
  }
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  int64_t argmax = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = kl_load_f64(data, dt, (size_t)i);
    if (v < lo) lo = v;
    if (v > hi) {
      hi = v;
      argmax = i;
    }
    sum += v;
  }
  printf(" min %.6g max %.6g mean %.6g argmax ", lo, hi, sum / (double)n);
  if (info->rank <= 1) {
    printf("%" PRId64, argmax);
  } else { /* the index in every dim: [row, class] for a batch of scores, not a flat one */
    int64_t idx[KL_MAX_RANK], rest = argmax;
    for (int d = info->rank - 1; d >= 0; d--) {
      idx[d] = info->dims[d] > 0 ? rest % info->dims[d] : 0;
      rest = info->dims[d] > 0 ? rest / info->dims[d] : 0;
    }
    for (int d = 0; d < info->rank; d++) printf("%s%" PRId64, d ? "," : "[", idx[d]);
    printf("]");
  }
  printf("\n  values:");
  for (int64_t i = 0; i < n && i < 8; i++) printf(" %.6g", kl_load_f64(data, dt, (size_t)i));
  printf(n > 8 ? " ...\n" : "\n");
  if (info->rank == 2 && info->dims[1] > 0) print_row_argmax(info, data);
}

/* The longest output name, with its suffix, kept in a file name: room is left for the
 * extension and the temporary file's ".XXXXXX" (src/import/fileio.c) within NAME_MAX. */
#define MAX_FILE_NAME 200

/* File name for an output: its name with characters a path cannot hold replaced, cut
 * so that suffix (".K", ".K.R") always fits, then suffix and the extension. */
static void output_path(char *buf, size_t len, const char *dir, const char *name,
                        const char *suffix, const char *ext) {
  char safe[MAX_FILE_NAME + 1];
  size_t k = 0, keep = MAX_FILE_NAME - strlen(suffix);
  for (; name[k] && k < keep; k++) {
    char c = name[k];
    safe[k] = (c == '/' || c == '\\' || c == ':' || (c == '.' && k == 0)) ? '_' : c;
  }
  safe[k] = '\0';
  snprintf(buf, len, "%s/%s%s.%s", dir, k ? safe : "output", suffix, ext);
}

static int parse_run_args(int argc, char **argv, run_args *a) {
  memset(a, 0, sizeof *a);
  a->common.opt_level = 2;
  a->seed = 1;
  a->iterations = 1;
  a->format = "npy";
  for (int i = 1; i < argc; i++) {
    int r = cli_common_arg(&a->common, argc, argv, &i);
    if (r < 0) return EXIT_USAGE;
    if (r > 0) continue;
    const char *o = argv[i];
    if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
      printf("%s%s%s%s", run_help, cli_load_help, cli_run_help, cli_keep_help);
      return EXIT_OK;
    }
    bool has_value = i + 1 < argc;
    int64_t v;
    if (strcmp(o, "--input") == 0 && has_value && a->n_inputs < MAX_ARGS) {
      a->inputs[a->n_inputs++] = argv[++i];
    } else if (strcmp(o, "--shape") == 0 && has_value && a->n_shapes < MAX_ARGS) {
      a->shapes[a->n_shapes++] = argv[++i];
    } else if (strcmp(o, "--seed") == 0 && has_value) {
      if (!cli_int_arg("run", o, argv[++i], 0, INT64_MAX, NULL, &v)) return EXIT_USAGE;
      a->seed = (uint64_t)v;
    } else if (strcmp(o, "--output-dir") == 0 && has_value) {
      a->out_dir = argv[++i];
    } else if (strcmp(o, "--format") == 0 && has_value &&
               (strcmp(argv[i + 1], "npy") == 0 || strcmp(argv[i + 1], "pb") == 0)) {
      a->format = argv[++i];
    } else if (strcmp(o, "--iterations") == 0 && has_value) {
      if (!cli_int_arg("run", o, argv[++i], 1, INT64_MAX, NULL, &v)) return EXIT_USAGE;
      a->iterations = v;
    } else if (o[0] != '-' && !a->model) {
      a->model = o;
    } else {
      fprintf(stderr, "kiln run: bad argument '%s'\n%s", o, run_help);
      return EXIT_USAGE;
    }
  }
  if (!a->model) {
    fprintf(stderr, "kiln run: no MODEL given\n%s", run_help);
    return EXIT_USAGE;
  }
  return -1;
}

/* Input k, a sequence or optional (kind): from its file (a SequenceProto or an
 * OptionalProto, as the ONNX test data holds them); an optional without one holds none.
 * An optional's tensor is kept in *keep. */
static bool bind_value(kiln_model *m, kiln_session *s, int k, int kind, const char *file,
                       kl_tensor *keep) {
  kiln_tensor_info info;
  kiln_model_input_info(m, k, &info);
  bool seq = kind == KILN_VALUE_SEQUENCE || kind == KILN_VALUE_OPTIONAL_SEQUENCE;
  bool opt = kind == KILN_VALUE_OPTIONAL || kind == KILN_VALUE_OPTIONAL_SEQUENCE;
  kiln_status st;
  kl_value_file v = {0};
  if (!file && !opt) {
    fprintf(stderr, "kiln run: input '%s' is a sequence of %s tensors: give it with --input "
            "%s=FILE.pb (an ONNX SequenceProto)\n", info.name, kiln_dtype_name(info.dtype),
            info.name);
    return false;
  }
  if (!file) {
    st = kiln_session_set_input_none(s, info.name);
    printf("input %s: none (an optional without --input)\n", info.name);
  } else if (!cli_read_value(file, INT64_C(16) << 30, seq, opt, &v)) {
    return false;
  } else {
    st = cli_bind_value(s, info.name, &v, keep);
  }
  if (st != KILN_OK)
    fprintf(stderr, "kiln run: %s: %s\n", kiln_status_string(st), kiln_session_error(s));
  return st == KILN_OK;
}

/* Bind every model input from a file or random data; tensors are kept in ts. */
static bool bind_inputs(const run_args *a, kiln_model *m, kiln_session *s, kl_tensor *ts) {
  uint64_t state = a->seed;
  int n = kiln_model_input_count(m);
  if (!cli_check_named("run", "--input", a->inputs, a->n_inputs, m) ||
      !cli_check_named("run", "--shape", a->shapes, a->n_shapes, m) ||
      !cli_check_shape_or_file("run", a->shapes, a->n_shapes, a->inputs, a->n_inputs))
    return false;
  for (int k = 0; k < n; k++) {
    kiln_tensor_info info;
    kiln_model_input_info(m, k, &info);
    const char *file = cli_find_named(a->inputs, a->n_inputs, info.name);
    int kind = kiln_model_input_kind(m, k);
    if (kind != KILN_VALUE_TENSOR && !bind_value(m, s, k, kind, file, &ts[k])) return false;
    if (kind != KILN_VALUE_TENSOR) continue;
    if (file) {
      char *name = NULL;
      int64_t limit = a->common.max_tensor_bytes ? a->common.max_tensor_bytes
                                                 : (INT64_C(16) << 30);
      if (!cli_read_tensor(file, limit, &ts[k], &name)) return false;
      free(name);
    } else {
      const char *shape = cli_find_named(a->shapes, a->n_shapes, info.name);
      if (!cli_random_input("run", &info, shape, 1, &state, &ts[k])) return false;
      printf("random input %s: %s", info.name, kl_dtype_name(ts[k].dtype));
      print_shape(ts[k].rank, ts[k].dims);
      printf(" (seed %" PRIu64 ")\n", a->seed);
    }
    kiln_status st = kiln_session_set_input(s, info.name, (kiln_dtype)ts[k].dtype, ts[k].rank,
                                            ts[k].dims, ts[k].data, kl_tensor_nbytes(&ts[k]));
    if (st != KILN_OK) {
      fprintf(stderr, "kiln run: %s: %s\n", kiln_status_string(st), kiln_session_error(s));
      return false;
    }
  }
  return true;
}

/* The output folder, made (or found) before the model runs, so that a run never ends in
 * a folder it cannot write. */
static bool prepare_out_dir(const char *dir) {
  if (mkdir(dir, 0777) == 0) return true;
  int err = errno;
  struct stat sb;
  if (err == EEXIST && stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return true;
  fprintf(stderr, "kiln run: cannot create output folder '%s': %s\n", dir,
          err == EEXIST ? "it exists and is not a folder" : strerror(err));
  return false;
}

/* Whether seq_path's sequence of count elements writes one to path: its elements go to
 * seq_path without the extension, ".J", the extension (J < count). */
static bool element_file(const char *seq_path, int64_t count, const char *path) {
  const char *dot = strrchr(seq_path, '.');
  size_t base = (size_t)(dot - seq_path);
  if (strncmp(path, seq_path, base) != 0 || path[base] != '.') return false;
  const char *p = path + base + 1, *digits = p;
  int64_t j = 0;
  while (*p >= '0' && *p <= '9' && j < count) j = j * 10 + (*p++ - '0');
  if (p == digits || (p - digits > 1 && *digits == '0') || j >= count) return false;
  return strcmp(p, dot) == 0;
}

/* Whether output k's file is another's, or one of a sequence output's element files
 * is another output's file (count[j] >= 0: output j is a sequence of that length):
 * outputs s, a sequence, and s.0 both wrote s.0.npy. */
static bool path_taken(char (*paths)[4096], const int64_t *count, int n, int k) {
  for (int j = 0; j < n; j++) {
    if (j == k) continue;
    if (strcmp(paths[j], paths[k]) == 0) return true;
    if (count[j] >= 0 && count[k] < 0 && element_file(paths[j], count[j], paths[k])) return true;
    if (count[k] >= 0 && count[j] < 0 && element_file(paths[k], count[k], paths[j])) return true;
  }
  return false;
}

#define RUN_MAX_FILES 65536    /* files kiln run --output-dir writes at most */
#define RUN_SHOWN_ELEMENTS 16  /* a sequence output's elements kiln run prints */

/* Each output to its file. An output whose file name another's makes too (a/b and a_b
 * both give a_b) gets its index K after the name, or K.R with the first R that is free
 * where that is taken as well (outputs a/b, a_b and a_b.0), so that none overwrites
 * another; the outputs before it keep theirs. The loop ends: the names K.R differ from
 * one another (the suffix is never cut), and the other n_out - 1 outputs can hold at
 * most n_out - 1 of them. */
static bool write_outputs(const run_args *a, const kiln_model *m, kiln_session *s, int n_out) {
  char(*paths)[4096] = calloc((size_t)n_out + 1, sizeof *paths);
  if (!paths) {
    fprintf(stderr, "kiln run: out of memory\n");
    return false;
  }
  for (int k = 0; k < n_out; k++) {
    kiln_tensor_info info;
    kiln_model_output_info(m, k, &info);
    output_path(paths[k], sizeof paths[k], a->out_dir, info.name, "", a->format);
  }
  int64_t *count = calloc((size_t)n_out + 1, sizeof *count);
  if (!count) {
    fprintf(stderr, "kiln run: out of memory\n");
    free(paths);
    return false;
  }
  int64_t files = 0;
  for (int k = 0; k < n_out; k++) {
    count[k] = -1;
    if (kiln_session_output_kind(s, k) == KILN_VALUE_SEQUENCE)
      kiln_session_get_output_length(s, k, &count[k]);
    files += count[k] >= 0 ? count[k] : 1;
  }
  /* A file for each sequence element: 2^17 of them from a 200-byte model took 2.6 to 8.2
   * s to write (issue 20, round 4), and nothing bounded their number; refused before
   * any is written */
  if (files > RUN_MAX_FILES) {
    int big = 0; /* the longest sequence, to name */
    for (int k = 1; k < n_out; k++)
      if (count[k] > count[big]) big = k;
    kiln_tensor_info info;
    kiln_model_output_info(m, big, &info);
    fprintf(stderr, "kiln run: output '%s' is a sequence of %" PRId64 " tensors, and "
            "--output-dir writes a file for each: %" PRId64 " files in all, over the limit "
            "of %d; nothing was written\n", info.name, count[big], files, RUN_MAX_FILES);
    free(count);
    free(paths);
    return false;
  }
  for (int k = 0; k < n_out; k++) {
    kiln_tensor_info info;
    kiln_model_output_info(m, k, &info);
    for (int r = 0; path_taken(paths, count, n_out, k); r++) {
      char suffix[32];
      snprintf(suffix, sizeof suffix, r ? ".%d.%d" : ".%d", k, r);
      output_path(paths[k], sizeof paths[k], a->out_dir, info.name, suffix, a->format);
    }
  }
  bool ok = true;
  for (int k = 0; k < n_out && ok; k++) {
    kiln_tensor_info info;
    const void *data;
    int kind = kiln_session_output_kind(s, k);
    if (kind == KILN_VALUE_NONE) {
      printf("%s: none, not written\n", paths[k]);
      continue;
    }
    int64_t count = 1;
    if (kind == KILN_VALUE_SEQUENCE) kiln_session_get_output_length(s, k, &count);
    for (int64_t j = 0; j < count && ok; j++) {
      /* a sequence's elements: NAME.J.npy (.pb) beside where the tensor would go */
      char path[4096 + 32];
      if (kind == KILN_VALUE_SEQUENCE) {
        kiln_session_get_output_element(s, k, j, &info, &data);
        const char *dot = strrchr(paths[k], '.');
        snprintf(path, sizeof path, "%.*s.%" PRId64 "%s", (int)(dot - paths[k]), paths[k], j, dot);
      } else {
        kiln_session_get_output(s, k, &info, &data);
        snprintf(path, sizeof path, "%s", paths[k]);
      }
      kl_tensor t = {.dtype = (kl_dtype)info.dtype, .rank = info.rank, .data = (void *)data};
      memcpy(t.dims, info.dims, sizeof(int64_t) * (size_t)info.rank);
      if ((ok = cli_write_tensor(path, &t, info.name))) printf("wrote %s\n", path);
    }
  }
  free(count);
  free(paths);
  return ok;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int cmd_run(int argc, char **argv) {
  run_args a;
  int rc = parse_run_args(argc, argv, &a);
  if (rc >= 0) return rc;
  kiln_options *o = cli_options(&a.common);
  if (!o) return EXIT_USAGE;
  /* one session, and nothing reads the weights after it: it may free what it packs */
  kiln_options_set_int(o, "release_weights", !a.common.keep_weights);
  kiln_model *m = cli_load(a.model, o, a.common.input_types);
  kiln_session *s = NULL;
  kl_tensor *ts = NULL;
  rc = EXIT_FAIL;
  if (!m) goto done;
  kiln_status st = kiln_session_create(m, o, &s);
  if (st != KILN_OK) {
    fprintf(stderr, "kiln run: %s: %s\n", kiln_status_string(st), kiln_session_error(s));
    goto done;
  }
  int n_in = kiln_model_input_count(m), n_out = kiln_model_output_count(m);
  /* before the run: an output that the format cannot hold */
  for (int k = 0; a.out_dir && strcmp(a.format, "npy") == 0 && k < n_out; k++) {
    kiln_tensor_info info;
    kiln_model_output_info(m, k, &info);
    if (info.dtype == KILN_DTYPE_UNDEFINED || kl_npy_has_dtype((kl_dtype)info.dtype)) continue;
    fprintf(stderr, "kiln run: output '%s' is %s, which a .npy file cannot hold (NumPy has "
            "no such dtype): use --format pb\n", info.name, kiln_dtype_name(info.dtype));
    rc = EXIT_USAGE;
    goto done;
  }
  if (a.out_dir && !prepare_out_dir(a.out_dir)) goto done;
  ts = calloc((size_t)n_in + 1, sizeof *ts);
  if (!ts || !bind_inputs(&a, m, s, ts)) goto done;
  double t0 = now_ms();
  for (int64_t it = 0; it < a.iterations; it++) {
    st = kiln_session_run(s);
    if (st != KILN_OK) {
      fprintf(stderr, "kiln run: %s: %s\n", kiln_status_string(st), kiln_session_error(s));
      goto done;
    }
  }
  double ms = (now_ms() - t0) / (double)a.iterations;
  for (int k = 0; k < n_out; k++) {
    kiln_tensor_info info;
    const void *data;
    int kind = kiln_session_output_kind(s, k);
    kiln_model_output_info(m, k, &info);
    int64_t count = 0;
    if (kind == KILN_VALUE_NONE) {
      printf("%s: none (an optional holding no value)\n", info.name);
    } else if (kind == KILN_VALUE_SEQUENCE) {
      kiln_session_get_output_length(s, k, &count);
      printf("%s: a sequence of %" PRId64 " tensor%s\n", info.name, count, count == 1 ? "" : "s");
      /* the first ones, then how many more (70,000 elements printed 140,000 lines) */
      for (int64_t j = 0; j < count && j < RUN_SHOWN_ELEMENTS; j++) {
        kiln_session_get_output_element(s, k, j, &info, &data);
        printf("  [%" PRId64 "] ", j);
        print_summary(&info, data);
      }
      if (count > RUN_SHOWN_ELEMENTS)
        printf("  ... and %" PRId64 " more\n", count - RUN_SHOWN_ELEMENTS);
    } else {
      kiln_session_get_output(s, k, &info, &data);
      print_summary(&info, data);
    }
  }
  printf("latency: %.3f ms (mean of %" PRId64 " run%s)\n", ms, a.iterations,
         a.iterations == 1 ? "" : "s");
  if (a.out_dir && !write_outputs(&a, m, s, n_out)) goto done;
  rc = EXIT_OK;
done:
  if (ts)
    for (int k = 0; k < kiln_model_input_count(m); k++) free(ts[k].data);
  free(ts);
  kiln_session_free(s);
  kiln_model_free(m);
  kiln_options_free(o);
  return rc;
}
