/* Shared pieces of the kiln command-line tool. */
#ifndef KL_CLI_H
#define KL_CLI_H

#include "ir/ir.h"
#include "kiln.h"

#include <stdbool.h>
#include <stdint.h>

/* Exit codes, documented in `kiln --help`. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

typedef struct cli_common {
  int opt_level;
  int threads;
  int64_t max_tensor_bytes;
  int64_t memory_limit;
  int64_t max_work;   /* --max-work, when max_work_set */
  bool max_work_set;
  const char *passes;
  const char *input_types; /* --input-types: the kiln_options "input_types" */
  bool verify;
  bool pin;          /* --pin: pin_threads */
  bool keep_weights; /* --keep-weights: run and bench do not set release_weights */
  bool fast_only;    /* --fast-only: the option fast_only */
  const char *device; /* --device: the option "device" */
  const char *precision; /* --precision: the option "precision" */
} cli_common;

/* Parse an option shared by the subcommands at argv[*i] ("-O2", "--threads 4", ...).
 * Returns 1 if consumed (advancing *i past its value), 0 if not one of them, -1 on a
 * bad value (message printed). */
int cli_common_arg(cli_common *c, int argc, char **argv, int *i);
/* False (message printed) when an option given does not apply to command cmd: the
 * run options (--threads, --memory-limit, --pin, --fast-only) where it runs nothing,
 * --keep-weights anywhere but run and bench. runs: cmd runs the model. */
bool cli_check_applies(const cli_common *c, const char *cmd, bool runs);
/* Options object for the common settings; NULL on failure (message printed). */
kiln_options *cli_options(const cli_common *c);
/* The thread count to run: --threads as asked; without it, where other programs kept
 * some of the process's CPUs busy when the kiln command started (KILN_BUSY_CPUS,
 * kiln.c), the CPUs left free (1 when none is), else 0 (the library's one per core). */
int cli_threads(const cli_common *c);
/* The same for a command that reads --threads itself (asked: its count, 0 for none). */
int cli_threads_for(int asked);
/* Load a model, printing the error on failure (returns NULL). input_types: the list
 * given with --input-types, or NULL; when it names none of the model's inputs, a note
 * on stderr says that a torch 1.x archive took its entries by position (one that
 * records its inputs does not read the list). */
kiln_model *cli_load(const char *path, const kiln_options *o, const char *input_types);
/* Parse "1x3x224x224" into dims; false on a malformed list. */
bool cli_parse_dims(const char *s, int *rank, int64_t *dims);
bool cli_parse_int(const char *s, int64_t *v);
/* val, the value of option opt of `kiln cmd`, as an integer in lo..hi (hi INT64_MAX: no
 * upper bound) into *v; else false, with "kiln CMD: OPT VAL: must be LO..HI (WHAT)" on
 * stderr (WHAT, what the number counts, left out when NULL). */
bool cli_int_arg(const char *cmd, const char *opt, const char *val, int64_t lo, int64_t hi,
                 const char *what, int64_t *v);
/* The same for a finite number at least lo (above lo when above is true). */
bool cli_double_arg(const char *cmd, const char *opt, const char *val, double lo,
                    bool above, const char *what, double *v);
/* snprintf that reports truncation (false) instead of warning about it. */
/* How OpenMP's threads wait between parallel regions, for kiln bench: the variables
 * that set it and who set them, or the runtime's default (tools/kiln.c). */
const char *cli_wait_policy(void);
bool cli_format(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool cli_parse_double(const char *s, double *v);

/* Whether path, all links resolved, lies inside the folder whose resolved path is root
 * (kiln check and kiln quantize read only what the folders they were given hold); if
 * not, why not, in why ("PATH leads outside the FOLDER (a symbolic link?)"). */
bool cli_inside(const char *root, const char *path, const char *folder, char *why,
                size_t len);
/* Tensor files (.pb TensorProto or .npy), read with a size limit; data is malloc'd. */
bool cli_read_tensor(const char *path, int64_t max_bytes, kl_tensor *t, char **name);
/* A sequence or optional value file (kl_valuefile_read), with the message printed. */
struct kl_value_file;
bool cli_read_value(const char *path, int64_t max_bytes, bool seq, bool opt,
                    struct kl_value_file *v);
/* Binds sequence or optional input `name` of s from v (a value file): none, a sequence
 * (the session copies it) or a tensor, which moves to *keep (the caller frees its data).
 * Clears v. */
kiln_status cli_bind_value(kiln_session *s, const char *name, struct kl_value_file *v,
                           kl_tensor *keep);
bool cli_write_tensor(const char *path, const kl_tensor *t, const char *name);
/* A text stream kiln writes as it goes (a log, a CSV report, a DOT graph, an SVG): path
 * opened for writing (created, emptied unless append) without waiting: a FIFO that no
 * program reads is refused (opening it would block until one does, forever), a device
 * or a FIFO with a reader is written as any file. A symbolic link is followed only to a
 * character device, FIFO or socket (/dev/stdout), never to a file (nothing is emptied
 * then). NULL, with why printed as "kiln CMD: PATH: ...", when it cannot be opened. */
FILE *cli_open_stream(const char *cmd, const char *path, bool append);

/* Every "NAME=VALUE" entry of list (given with option opt) names a model input, and
 * none twice; else prints why, with the model's inputs, and returns false. */
bool cli_check_named(const char *cmd, const char *opt, const char *const *list, int n,
                     const kiln_model *m);
/* No input is given both a --shape (shapes) and a file (inputs): the file's shape is
 * the input's, so the --shape would be silently ignored, however malformed. Else prints
 * which and returns false. */
bool cli_check_shape_or_file(const char *cmd, const char *const *shapes, int n_shapes,
                             const char *const *inputs, int n_inputs);
/* When no entry of the input_types list spec ("x:float32[2,8];m:bool[2]") names an
 * input of m, the library matched its entries by position: "'input' as 'x', ..." into
 * buf, and true. False when spec is empty or names an input. */
bool cli_types_by_position(const char *spec, const kiln_model *m, char *buf, size_t len);
/* "NAME=VALUE" entry of list for name; returns VALUE or NULL. */
const char *cli_find_named(const char *const *list, int n, const char *name);
/* A random tensor for a model input: the shape from `shape` ("1x3x8x8") when given, else
 * the declared dims with a symbolic dim 0 set to batch and other symbols to 1. data is
 * malloc'd. Prints the problem and returns false on failure. */
bool cli_random_input(const char *cmd, const kiln_tensor_info *info, const char *shape,
                      int64_t batch, uint64_t *state, kl_tensor *t);

int cmd_run(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_optimize(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
/* `kiln inspect --memory` (inspect_memory.c): the memory plan of one run of m. */
int cli_inspect_memory(kiln_model *m, const kiln_options *o);
/* `kiln inspect --kernels`: the kernel and oneDNN implementation of every node in one
 * run of m on random inputs, and the slow paths taken. */
int cli_inspect_kernels(kiln_model *m, const kiln_options *o);

extern const char *cli_load_help, *cli_run_help, *cli_keep_help;

#endif
