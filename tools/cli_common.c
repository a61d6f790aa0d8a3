/* What every kiln command shares: the common options, their help text, number and
 * dims parsing, the options object, loading a model. The commands and these helpers
 * make the library kiln_cli (tools/meson.build), which tools/kiln and the CLI's fuzz
 * target link. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The options every command takes, by what they act on: loading and optimizing the
 * model (all of them), running it (not optimize), and keeping the weights (run, bench). */
const char *cli_load_help =
    "  -O0 .. -O3            graph optimization level (default -O2)\n"
    "  --passes LIST         switch passes on/off: +name,-name\n"
    "  --max-tensor-bytes N  largest tensor a model may hold or make (default 16 GiB)\n"
    "  --max-work N          the most work one node may take, in multiply-adds of a\n"
    "                        large product on one AVX-512 core, each step weighed by\n"
    "                        its kernel (default 2^39, about 7 s of one core; 0 = any)\n"
    "  --verify              run the graph verifier after every pass\n"
    "  --input-types LIST    the inputs of a .pt that does not record them (torch 1.x,\n"
    "                        scripted): name:dtype[d0,d1,...];... (x:float32[1,3,224,224]);\n"
    "                        a List[Tensor] parameter element by element: name.0:...;name.1:...\n";
const char *cli_run_help =
    "  --threads N           worker threads (default: one per core, or one per CPU\n"
    "                        that other programs left free when kiln started;\n"
    "                        KILN_IGNORE_LOAD=1 in the environment: one per core)\n"
    "  --memory-limit N      cap on weights plus buffers (a device's too), in bytes (default none)\n"
    "  --pin                 pin the worker threads to cores (one each)\n"
    "  --device D            where to run: cpu (default), opencl (the first GPU, else the\n"
    "                        first OpenCL device), opencl:P.D (`kiln info` lists them),\n"
    "                        auto (a GPU when one opens, else the CPU); nodes the device\n"
    "                        has no kernel for run on the CPU (kiln inspect --device D)\n"
    "  --precision P         auto (default: TF32 for convolutions and matrix products on a\n"
    "                        GPU with tensor cores, as PyTorch's cuDNN default; float32\n"
    "                        elsewhere), fp32, tf32 (fails where there are none), or\n"
    "                        bf16 (the CPU's convolutions and matrix products, and at\n"
    "                        the AMX level attention, with bf16 operands and float32\n"
    "                        sums: AVX512-BF16 or AMX CPUs only)\n"
    "  --fast-only           fail where a convolution, matrix product, pooling or\n"
    "                        attention node would run on a slow reference implementation\n"
    "                        (oneDNN's or kiln's) at this machine's ISA level\n";
const char *cli_keep_help =
    "  --keep-weights        keep the model's plain copy of the weights that oneDNN holds\n"
    "                        packed (by default the session frees it)\n";

bool cli_parse_int(const char *s, int64_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno || end == s || *end) return false;
  *v = x;
  return true;
}

bool cli_format(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, len, fmt, ap);
  va_end(ap);
  return n >= 0 && (size_t)n < len;
}

bool cli_parse_double(const char *s, double *v) {
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (errno || end == s || *end) return false;
  *v = x;
  return true;
}

/* "1..4096", or "at least 1" where there is no upper bound (hi INT64_MAX) unless the
 * value was past it (huge: "1..2^63-1"), into buf. */
static const char *int_range(int64_t lo, int64_t hi, bool huge, char *buf, size_t len) {
  if (hi == INT64_MAX && huge) snprintf(buf, len, "%lld..2^63-1", (long long)lo);
  else if (hi == INT64_MAX) snprintf(buf, len, "at least %lld", (long long)lo);
  else snprintf(buf, len, "%lld..%lld", (long long)lo, (long long)hi);
  return buf;
}

bool cli_int_arg(const char *cmd, const char *opt, const char *val, int64_t lo, int64_t hi,
                 const char *what, int64_t *v) {
  char range[64];
  char *end;
  errno = 0;
  long long x = strtoll(val, &end, 10);
  bool huge = errno == ERANGE, number = end != val && !*end;
  bool in = number && !huge && x >= lo && x <= hi;
  if (in) {
    *v = x;
    return true;
  }
  /* a number too large for strtoll is out of range, not "not a number" */
  fprintf(stderr, "kiln %s: %s %s: must be %s%s%s%s%s\n", cmd, opt, val,
          number ? "" : "an integer, ", int_range(lo, hi, huge, range, sizeof range),
          what ? " (" : "", what ? what : "", what ? ")" : "");
  return false;
}

bool cli_double_arg(const char *cmd, const char *opt, const char *val, double lo,
                    bool above, const char *what, double *v) {
  double x;
  bool number = cli_parse_double(val, &x) && isfinite(x);
  if (number && (above ? x > lo : x >= lo)) {
    *v = x;
    return true;
  }
  fprintf(stderr, "kiln %s: %s %s: must be %s%s %g%s%s%s\n", cmd, opt, val,
          number ? "" : "a finite number, ", above ? "above" : "at least", lo,
          what ? " (" : "", what ? what : "", what ? ")" : "");
  return false;
}

bool cli_parse_dims(const char *s, int *rank, int64_t *dims) {
  int r = 0;
  if (*s == '\0') { /* a scalar */
    *rank = 0;
    return true;
  }
  while (*s) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || x < 0 || r == KL_MAX_RANK) return false;
    dims[r++] = x;
    if (*end == 'x' || *end == ',') end++;
    else if (*end) return false;
    s = end;
  }
  *rank = r;
  return true;
}

int cli_common_arg(cli_common *c, int argc, char **argv, int *i) {
  const char *a = argv[*i];
  if (a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3' && !a[3]) {
    c->opt_level = a[2] - '0';
    return 1;
  }
  if (strcmp(a, "--verify") == 0) {
    c->verify = true;
    return 1;
  }
  if (strcmp(a, "--pin") == 0) {
    c->pin = true;
    return 1;
  }
  if (strcmp(a, "--keep-weights") == 0) {
    c->keep_weights = true;
    return 1;
  }
  if (strcmp(a, "--fast-only") == 0) {
    c->fast_only = true;
    return 1;
  }
  int64_t v;
  const char *names[] = {"--threads", "--max-tensor-bytes", "--memory-limit", "--max-work",
                         "--passes", "--input-types", "--device", "--precision"};
  /* the numbers' ranges: 0 is the options' "unset" for threads and memory_limit (taken
   * as given, it silently meant all cores and no cap at all), and 4096 their bound on
   * threads; max_tensor_bytes 0 would allow no tensor at all */
  static const struct {
    int64_t lo, hi;
    const char *what;
  } nums[] = {{1, 4096, "worker threads; without the option, one per core"},
              {1, INT64_MAX, "bytes; the default is 16 GiB"},
              {1, INT64_MAX, "bytes; without the option there is no cap"},
              {0, INT64_MAX, "weighed steps of one node; 0 = no bound, the default is 2^39"}};
  for (int k = 0; k < 8; k++) {
    if (strcmp(a, names[k]) != 0) continue;
    if (*i + 1 >= argc) {
      fprintf(stderr, "kiln %s: %s needs a value\n", argv[0], a);
      return -1;
    }
    const char *val = argv[++*i];
    if (k >= 4) {
      *(k == 4 ? &c->passes : k == 5 ? &c->input_types : k == 6 ? &c->device
                                                            : &c->precision) = val;
      return 1;
    }
    if (!cli_int_arg(argv[0], a, val, nums[k].lo, nums[k].hi, nums[k].what, &v)) return -1;
    if (k == 0) c->threads = (int)v;
    else if (k == 1) c->max_tensor_bytes = v;
    else if (k == 2) c->memory_limit = v;
    else {
      c->max_work = v;
      c->max_work_set = true;
    }
    return 1;
  }
  return 0;
}

bool cli_check_applies(const cli_common *c, const char *cmd, bool runs) {
  const char *given = c->keep_weights ? "--keep-weights" : NULL;
  if (!runs && !given)
    given = c->threads ? "--threads" : c->memory_limit ? "--memory-limit" : c->pin ? "--pin"
            : c->fast_only ? "--fast-only" : c->device ? "--device"
            : c->precision ? "--precision" : NULL;
  if (!given) return true;
  fprintf(stderr, "kiln %s: %s does not apply here: %s\n", cmd, given,
          runs ? "only run and bench free the weights oneDNN packs"
               : "this command runs nothing");
  return false;
}

int cli_threads(const cli_common *c) { return cli_threads_for(c->threads); }

int cli_threads_for(int asked) {
  /* a count asked for stays: a run's numbers depend on it (the split of sums) */
  if (asked) return asked;
  int busy = 0, cpus = 0;
  const char *b = getenv("KILN_BUSY_CPUS"); /* "BUSY/CPUS", set by main (kiln.c) */
  if (!b || sscanf(b, "%d/%d", &busy, &cpus) != 2 || busy < 1 || cpus < 2 || cpus > 4096 ||
      busy > cpus)
    return 0;
  return busy < cpus ? cpus - busy : 1;
}

kiln_options *cli_options(const cli_common *c) {
  kiln_options *o;
  if (kiln_options_create(&o) != KILN_OK) {
    fprintf(stderr, "kiln: out of memory\n");
    return NULL;
  }
  kiln_status st = kiln_options_set_int(o, "opt_level", c->opt_level);
  if (st == KILN_OK) st = kiln_options_set_int(o, "threads", cli_threads(c));
  if (st == KILN_OK && c->max_tensor_bytes)
    st = kiln_options_set_int(o, "max_tensor_bytes", c->max_tensor_bytes);
  if (st == KILN_OK) st = kiln_options_set_int(o, "memory_limit", c->memory_limit);
  if (st == KILN_OK && c->max_work_set) st = kiln_options_set_int(o, "max_work", c->max_work);
  if (st == KILN_OK) st = kiln_options_set_int(o, "verify", c->verify);
  if (st == KILN_OK) st = kiln_options_set_int(o, "pin_threads", c->pin);
  if (st == KILN_OK) st = kiln_options_set_int(o, "fast_only", c->fast_only);
  if (st == KILN_OK && c->passes) st = kiln_options_set_string(o, "passes", c->passes);
  if (st == KILN_OK && c->input_types)
    st = kiln_options_set_string(o, "input_types", c->input_types);
  if (st == KILN_OK && c->device) st = kiln_options_set_string(o, "device", c->device);
  if (st == KILN_OK && c->precision)
    st = kiln_options_set_string(o, "precision", c->precision);
  if (st != KILN_OK) {
    fprintf(stderr, "kiln: %s\n", kiln_options_error(o));
    kiln_options_free(o);
    return NULL;
  }
  return o;
}

kiln_model *cli_load(const char *path, const kiln_options *o, const char *input_types) {
  kiln_model *m = NULL;
  kiln_status st = kiln_model_load(path, o, &m);
  if (st != KILN_OK) {
    fprintf(stderr, "kiln: %s: %s\n", kiln_status_string(st),
            m ? kiln_model_error(m) : "out of memory");
    kiln_model_free(m);
    return NULL;
  }
  char pairs[1024];
  /* (an archive that records its inputs, torch 2.x's, does not read the list at all) */
  if (input_types && cli_types_by_position(input_types, m, pairs, sizeof pairs))
    fprintf(stderr, "kiln: note: --input-types names none of the model's inputs: an archive "
            "that does not record them (torch 1.x) took its entries by position (%s)\n",
            pairs);
  return m;
}

const char *cli_wait_policy(void) {
  static char buf[160];
  const char *spin = getenv("GOMP_SPINCOUNT"), *block = getenv("KMP_BLOCKTIME"),
             *policy = getenv("OMP_WAIT_POLICY"), *who = getenv("KILN_OPENMP_WAIT");
  if (!spin && !block && !policy)
    return "the OpenMP runtime's default (spin for milliseconds)";
  snprintf(buf, sizeof buf, "%s%s%s%s%s%s%s%s%s", policy ? "OMP_WAIT_POLICY=" : "",
           policy ? policy : "", policy && (spin || block) ? " " : "",
           spin ? "GOMP_SPINCOUNT=" : "", spin ? spin : "", spin && block ? " " : "",
           block ? "KMP_BLOCKTIME=" : "", block ? block : "",
           who && strcmp(who, "kiln") == 0 ? " (set by kiln)" : " (from the environment)");
  return buf;
}

