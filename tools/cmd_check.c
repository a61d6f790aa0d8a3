/* kiln check: run ONNX test-case folders (model + test_data_set_N/{input,output}_K.pb)
 * and compare with the expected outputs: |got - want| <= atol + rtol * |want|. */
#include "cli.h"
#include "import/tensorfile.h"
#include "runtime/session.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *check_help =
    "usage: kiln check DIR... [options]\n"
    "Each DIR holds model.onnx (or model.pt) and test_data_set_*/input_*.pb and\n"
    "output_*.pb, the layout of the ONNX backend tests. Prints a line per folder on\n"
    "stdout, 'pass DIR (...)' or 'FAIL DIR', and ends with 'N passed, N failed'; a\n"
    "failing folder's reason goes to stderr as 'kiln check: DIR: REASON'. Exits 0 only\n"
    "if every folder passed. A passing folder's line gives the largest absolute and\n"
    "relative errors seen. The inputs of test_data_set_0 declare the input types of a\n"
    "model.pt from torch 1.x. Each input_K.pb and output_K.pb is for the model input or\n"
    "output its TensorProto's name names, whatever K; one without a name, or with a name\n"
    "the model does not have, is for the K-th (a note on stderr lists the latter), as\n"
    "are sequences and optionals. A data set whose files give one input or output twice\n"
    "is refused.\n"
    "  --rtol R   relative tolerance (default 1e-3)\n"
    "  --atol A   absolute tolerance (default: 1e-4 of each output's largest magnitude,\n"
    "             at least 1e-5: float32 rounding of values near zero, which in a deep\n"
    "             model is of the order of the sums that cancelled there; the ONNX\n"
    "             backend node tests use --rtol 1e-3 --atol 1e-7). Given either\n"
    "             tolerance, both are fixed: none follows the output's scale\n"
    "Where a folder holds float64_outputs/output_K.pb (tools/export_zoo.py and\n"
    "tools/trial_models.py write the model's outputs run in float64 there), an output\n"
    "of test_data_set_0 out of tolerance still passes when kiln's largest error\n"
    "against float64 is at most 3 times the expected outputs' own: the expected\n"
    "outputs are another runtime's float32 results, no closer to the truth than kiln's\n"
    "may be (the pass line says so).\n"
    "Where the session computes in TF32 (a GPU with tensor cores at precision auto or\n"
    "tf32) and no tolerance is given, the defaults are TF32's: rtol 1e-2, atol 1e-3 of\n"
    "each output's largest magnitude (operands rounded to 10-bit mantissas).\n";

#define MAX_FILES 256

typedef struct tolerance {
  double rtol, atol;
  double atol_scale; /* > 0: atol is at least this times the output's largest magnitude */
  bool given;        /* --rtol or --atol given: no TF32 defaults */
} tolerance;

typedef struct cmp_result {
  double max_abs, max_rel;
  double atol; /* the absolute tolerance applied (TF32's follows the output's scale) */
  int64_t bad; /* elements out of tolerance */
  int64_t first; /* the first of them, kiln's value and the expected one */
  double first_got, first_want;
  int by_f64;  /* outputs out of tolerance passed by float64_outputs (worst's count) */
  double f64_ratio; /* the largest of their kiln / expected errors against float64 */
} cmp_result;

static bool is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool is_file(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every entry of dir whose name starts with prefix, sorted, in a malloc'd array of
 * malloc'd names (*names); returns the count, or -1 (nothing to free). */
static int list_prefixed(const char *dir, const char *prefix, char ***names) {
  DIR *d = opendir(dir);
  *names = NULL;
  if (!d) return -1;
  int n = 0, cap = 0;
  struct dirent *ent;
  bool ok = true;
  while (ok && (ent = readdir(d))) {
    if (strncmp(ent->d_name, prefix, strlen(prefix)) != 0) continue;
    if (n == cap) {
      char **p = realloc(*names, sizeof *p * (size_t)(cap = cap ? 2 * cap : 16));
      if (!(ok = p != NULL)) break;
      *names = p;
    }
    ok = ((*names)[n] = strdup(ent->d_name)) != NULL;
    n += ok;
  }
  closedir(d);
  if (!ok) {
    for (int i = 0; i < n; i++) free((*names)[i]);
    free(*names);
    *names = NULL;
    return -1;
  }
  if (n > 1) qsort(*names, (size_t)n, sizeof **names, cmp_str); /* *names is NULL at 0 */
  return n;
}

/* Numbered files prefix_0.pb, prefix_1.pb ... in order; returns the count. */
static int count_numbered(const char *dir, const char *prefix) {
  int n = 0;
  char p[4096];
  for (;; n++) {
    cli_format(p, sizeof p, "%s/%s_%d.pb", dir, prefix, n);
    if (!is_file(p)) return n;
  }
}

static void compare(const kl_tensor *got, const kl_tensor *want, tolerance tol,
                    cmp_result *r) {
  int64_t n = kl_tensor_numel(want);
  /* the 8-bit floats are storage types: their values must match exactly */
  bool f8 = kl_dtype_is_f8(want->dtype);
  bool exact = !kl_dtype_is_float(want->dtype) && !f8;
  if (tol.atol_scale > 0 && !exact && !f8) { /* atol from the output's scale */
    double big = 0;
    for (int64_t i = 0; i < n; i++) {
      double w = fabs(kl_load_f64(want->data, want->dtype, (size_t)i));
      if (isfinite(w) && w > big) big = w;
    }
    if (tol.atol_scale * big > tol.atol) tol.atol = tol.atol_scale * big;
  }
  r->atol = tol.atol;
  for (int64_t i = 0; i < n; i++) {
    double g = kl_load_f64(got->data, got->dtype, (size_t)i);
    double w = kl_load_f64(want->data, want->dtype, (size_t)i);
    bool bad;
    if (isnan(w) || isnan(g)) {
      bad = isnan(w) != isnan(g); /* left out of the errors: say which element */
    } else if (isinf(w) || isinf(g)) {
      bad = g != w;
    } else {
      double diff = fabs(g - w), rel = w != 0 ? diff / fabs(w) : (diff ? INFINITY : 0);
      if (diff > r->max_abs) r->max_abs = diff;
      if (rel > r->max_rel) r->max_rel = rel;
      bad = exact ? kl_load_i64(got->data, got->dtype, (size_t)i) !=
                        kl_load_i64(want->data, want->dtype, (size_t)i)
                  : f8 ? g != w : diff > tol.atol + tol.rtol * fabs(w);
    }
    if (bad && r->bad++ == 0) r->first = i, r->first_got = g, r->first_want = w;
  }
}

static bool same_shape(const kl_tensor *a, const kl_tensor *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* "float32[1,10]" into buf (cut at len); snprintf's counts, as cli_format tells only
 * whether the text fit. */
static void format_shape(const kl_tensor *t, char *buf, size_t len) {
  int u = snprintf(buf, len, "%s[", kl_dtype_name(t->dtype));
  for (int d = 0; d < t->rank && u >= 0 && (size_t)u < len; d++)
    u += snprintf(buf + u, len - (size_t)u, "%s%lld", d ? "," : "", (long long)t->dims[d]);
  if (u >= 0 && (size_t)u < len) snprintf(buf + u, len - (size_t)u, "]");
}

/* Which of the model's inputs or outputs each file of a data set is for: the one its
 * name names, else the one at its position. */
typedef struct file_match {
  kiln_model *m;
  bool out;              /* output_K.pb for the outputs, else input_K.pb for the inputs */
  int by[MAX_FILES];     /* per model input or output: 1 + the file for it, 0 for none yet */
  bool named[MAX_FILES]; /* ... that file's name named it, else the file's position did */
  char *note;            /* the files named otherwise than the model's, taken by position */
  size_t note_len;       /* ("input_0.pb 'input' as 'x', ..."; left as it is when none) */
} file_match;

/* The name of the model's input or output j ("" when there is none). */
static const char *model_name(const file_match *f, int j) {
  kiln_tensor_info info = {0};
  kiln_status st = f->out ? kiln_model_output_info(f->m, j, &info)
                          : kiln_model_input_info(f->m, j, &info);
  return st == KILN_OK && info.name ? info.name : "";
}

/* The model input or output that file k (at path, named name: NULL or "" for none) is
 * for: the first of that name no earlier file is for (a model may give one value as two
 * outputs), else the one at position k (named in the note when the file has a name).
 * -1, with why, when an earlier file is for it already. k is below the model's count. */
static int match_file(file_match *f, int k, const char *name, const char *path, char *why,
                      size_t len) {
  const char *what = f->out ? "output" : "input";
  int n = f->out ? kiln_model_output_count(f->m) : kiln_model_input_count(f->m), idx = -1;
  for (int j = 0; name && *name && j < n && (idx < 0 || f->by[idx]); j++)
    if (strcmp(model_name(f, j), name) == 0 && (idx < 0 || !f->by[j])) idx = j;
  bool named = idx >= 0;
  if (!named) idx = k;
  if (!named && name && *name) {
    size_t u = strlen(f->note);
    if (u < f->note_len)
      snprintf(f->note + u, f->note_len - u, "%s%s_%d.pb '%s' as '%s'", u ? ", " : "", what,
               k, name, model_name(f, k));
  }
  if (f->by[idx]) {
    cli_format(why, len, "%s is for %s '%s' too (by its %s), which an earlier file gave "
               "(%s_%d.pb, by its %s)", path, what, model_name(f, idx),
               named ? "name" : "position", what, f->by[idx] - 1,
               f->named[idx] ? "name" : "position");
    return -1;
  }
  f->by[idx] = k + 1;
  f->named[idx] = named;
  return idx;
}

/* Input k, a sequence or optional (kind), from its SequenceProto or OptionalProto: the
 * session copies a sequence; an optional's tensor stays in *keep (the caller frees it). */
static bool bind_value(kiln_model *m, kiln_session *s, int k, int kind, const char *path,
                       kl_tensor *keep, char *why, size_t len) {
  kl_value_file v;
  kiln_tensor_info info;
  kiln_model_input_info(m, k, &info);
  bool seq = kind == KILN_VALUE_SEQUENCE || kind == KILN_VALUE_OPTIONAL_SEQUENCE;
  bool opt = kind == KILN_VALUE_OPTIONAL || kind == KILN_VALUE_OPTIONAL_SEQUENCE;
  if (!cli_read_value(path, INT64_C(16) << 30, seq, opt, &v)) {
    cli_format(why, len, "cannot read %s", path);
    return false;
  }
  kiln_status st = cli_bind_value(s, info.name, &v, keep);
  if (st != KILN_OK)
    cli_format(why, len, "%s: %s", kiln_status_string(st), kiln_session_error(s));
  return st == KILN_OK;
}

/* Bind the inputs of one data set: by name when the file names a model input, else by
 * position (match_file). Tensors are kept in ins (freed by the caller). Every model
 * input is bound once by every data set: the session keeps a binding until it is
 * replaced, and the data set before this one has been freed. The files whose names are
 * not the model's are listed in note ("input_0.pb 'input' as 'x', ..."; left as it is
 * when none). */
static bool bind_set(kiln_model *m, kiln_session *s, const char *root, const char *set,
                     kl_tensor *ins, int n, char *note, size_t note_len, char *why, size_t len) {
  char path[4096];
  file_match f = {.m = m, .out = false, .note = note, .note_len = note_len};
  if (n != kiln_model_input_count(m)) {
    int want = kiln_model_input_count(m);
    cli_format(why, len, "%d input file%s for the model's %d input%s", n, n == 1 ? "" : "s",
               want, want == 1 ? "" : "s");
    return false;
  }
  for (int k = 0; k < n; k++) {
    char *name = NULL;
    cli_format(path, sizeof path, "%s/input_%d.pb", set, k);
    if (!cli_inside(root, path, "test folder", why, len)) return false;
    int kind = kiln_model_input_kind(m, k);
    if (kind != KILN_VALUE_TENSOR) { /* a sequence or optional: by position */
      if (match_file(&f, k, NULL, path, why, len) < 0 ||
          !bind_value(m, s, k, kind, path, &ins[k], why, len))
        return false;
      continue;
    }
    if (!cli_read_tensor(path, INT64_C(16) << 30, &ins[k], &name)) {
      cli_format(why, len, "cannot read %s", path);
      return false;
    }
    int idx = match_file(&f, k, name, path, why, len);
    free(name);
    if (idx < 0) return false;
    kiln_tensor_info info = {0};
    kiln_model_input_info(m, idx, &info);
    kiln_status st = kiln_session_set_input(s, info.name, (kiln_dtype)ins[k].dtype, ins[k].rank,
                                            ins[k].dims, ins[k].data, kl_tensor_nbytes(&ins[k]));
    if (st != KILN_OK) {
      cli_format(why, len, "%s: %s", kiln_status_string(st), kiln_session_error(s));
      return false;
    }
  }
  return true;
}

/* got against want, of `what` ("output 0 'y'"; element `element` of a sequence, or -1):
 * dtype, shape and values within tol. */
static bool compare_tensor(const kl_tensor *got, const kl_tensor *want, const char *what,
                           int64_t element, tolerance tol, cmp_result *worst, char *why,
                           size_t len, bool *values) {
  char a[256], b[256], el[48] = "";
  if (element >= 0) snprintf(el, sizeof el, " element %lld", (long long)element);
  if (got->dtype != want->dtype || !same_shape(got, want)) {
    format_shape(got, a, sizeof a);
    format_shape(want, b, sizeof b);
    cli_format(why, len, "%s%s is %s, expected %s", what, el, a, b);
    return false;
  }
  cmp_result r = {0};
  compare(got, want, tol, &r);
  if (r.max_abs > worst->max_abs) worst->max_abs = r.max_abs;
  if (r.max_rel > worst->max_rel) worst->max_rel = r.max_rel;
  if (r.bad) {
    char scale[96] = "";
    if (tol.atol_scale > 0)
      snprintf(scale, sizeof scale, ": %g of the output's largest magnitude%s", tol.atol_scale,
               tol.atol_scale >= 1e-3 ? ", TF32's" : "");
    cli_format(why, len, "%s%s: %lld of %lld values out of tolerance, the first "
               "at element %lld: %.9g, expected %.9g; max abs err %.3g, max rel err %.3g (rtol "
               "%g, atol %g%s)", what, el, (long long)r.bad, (long long)kl_tensor_numel(want),
               (long long)r.first, r.first_got, r.first_want, r.max_abs, r.max_rel, tol.rtol,
               r.atol, scale);
    if (values) *values = true;
    return false;
  }
  return true;
}

/* Output k, a sequence or optional (its model kind `kind`), against its value file. */
static bool check_value(kiln_session *s, int k, int kind, const char *path, tolerance tol,
                        cmp_result *worst, char *why, size_t len) {
  bool seq = kind == KILN_VALUE_SEQUENCE || kind == KILN_VALUE_OPTIONAL_SEQUENCE;
  bool opt = kind == KILN_VALUE_OPTIONAL || kind == KILN_VALUE_OPTIONAL_SEQUENCE;
  kl_value_file v;
  if (!cli_read_value(path, INT64_C(16) << 30, seq, opt, &v)) {
    cli_format(why, len, "cannot read %s", path);
    return false;
  }
  int got_kind = kiln_session_output_kind(s, k);
  const char *want_kind = v.none ? "none" : v.seq ? "a sequence" : "a tensor";
  const char *kinds[] = {"a tensor", "a sequence", "?", "?", "none"};
  bool ok = got_kind == (v.none ? KILN_VALUE_NONE : v.seq ? KILN_VALUE_SEQUENCE : KILN_VALUE_TENSOR);
  kiln_tensor_info info;
  const void *data;
  if (!ok)
    cli_format(why, len, "output %d is %s, expected %s", k,
               got_kind >= 0 && got_kind <= 4 ? kinds[got_kind] : "missing", want_kind);
  int64_t count = 0;
  if (ok && v.seq && kiln_session_get_output_length(s, k, &count) == KILN_OK && count != v.count) {
    cli_format(why, len, "output %d is a sequence of %lld tensors, expected %lld", k,
               (long long)count, (long long)v.count);
    ok = false;
  }
  for (int64_t j = 0; ok && !v.none && j < v.count; j++) {
    kiln_status st = v.seq ? kiln_session_get_output_element(s, k, j, &info, &data)
                           : kiln_session_get_output(s, k, &info, &data);
    kl_tensor got = {.dtype = (kl_dtype)info.dtype, .rank = info.rank, .data = (void *)data};
    char what[320];
    if (st == KILN_OK) memcpy(got.dims, info.dims, sizeof(int64_t) * (size_t)info.rank);
    cli_format(what, sizeof what, "output %d '%s'", k, st == KILN_OK ? info.name : "");
    ok = st == KILN_OK &&
         compare_tensor(&got, &v.items[j], what, v.seq ? j : -1, tol, worst, why, len, NULL);
  }
  kl_valuefile_clear(&v);
  return ok;
}

/* The largest |a - f| over the elements (a of any float dtype, f as read). */
static double max_err(const kl_tensor *a, const kl_tensor *f) {
  double worst = 0;
  for (int64_t i = 0, n = kl_tensor_numel(a); i < n; i++) {
    double d = fabs(kl_load_f64(a->data, a->dtype, (size_t)i) -
                    kl_load_f64(f->data, f->dtype, (size_t)i));
    if (!(d <= worst)) worst = d; /* a NaN makes it NaN: never within */
  }
  return worst;
}

/* Output k of test_data_set_0, out of tolerance of want: passes when root's
 * float64_outputs/output_K.pb exists and kiln's largest error against it is at most
 * F64_FACTOR times want's. Adds to why either way once the file is there. */
#define F64_FACTOR 3.0
static bool within_float64(const char *root, int k, const kl_tensor *got, const kl_tensor *want,
                           cmp_result *worst, char *why, size_t len) {
  char path[4096], more[512];
  cli_format(path, sizeof path, "%s/float64_outputs/output_%d.pb", root, k);
  if (!is_file(path)) return false;
  kl_tensor f = {0};
  char *name = NULL;
  bool in = cli_inside(root, path, "test folder", more, sizeof more);
  if (!in || !cli_read_tensor(path, INT64_C(16) << 30, &f, &name)) {
    size_t u = strlen(why);
    if (u < len && in) /* the output's failure stands; say why float64 could not judge it */
      snprintf(why + u, len - u, "; float64_outputs/output_%d.pb cannot be read", k);
    else if (u < len)
      snprintf(why + u, len - u, "; %s", more);
    free(name);
    return false;
  }
  free(name);
  bool ok = false;
  if (!kl_dtype_is_float(f.dtype) || !same_shape(&f, want)) {
    cli_format(more, sizeof more, "; %s is not a float tensor of the output's shape", path);
  } else {
    double ek = max_err(got, &f), ew = max_err(want, &f);
    ok = ek <= F64_FACTOR * ew;
    cli_format(more, sizeof more, "; against float64_outputs/output_%d.pb kiln's max abs err "
               "is %.3g, the expected outputs' %.3g (%s %g times theirs)", k, ek, ew,
               ok ? "within" : "more than", F64_FACTOR);
    if (ok) {
      worst->by_f64++;
      double ratio = ew > 0 ? ek / ew : 0;
      if (ratio > worst->f64_ratio) worst->f64_ratio = ratio;
    }
  }
  free(f.data);
  size_t u = strlen(why);
  if (!ok && u < len) snprintf(why + u, len - u, "%s", more);
  return ok;
}

/* Compare every output of the last run with set/output_K.pb: each file with the output
 * its name names, else the one at its position (match_file; float64_outputs/output_K.pb
 * goes with output_K.pb). The files named otherwise than the model's outputs are listed
 * in note, as bind_set lists the inputs'. */
static bool check_outputs(kiln_model *m, kiln_session *s, const char *root, const char *set,
                          bool first, int n_out, tolerance tol, cmp_result *worst, char *note,
                          size_t note_len, char *why, size_t len) {
  char path[4096];
  file_match f = {.m = m, .out = true, .note = note, .note_len = note_len};
  for (int k = 0; k < n_out; k++) {
    kl_tensor want = {0};
    char *name = NULL;
    cli_format(path, sizeof path, "%s/output_%d.pb", set, k);
    if (!cli_inside(root, path, "test folder", why, len)) return false;
    int kind = kiln_model_output_kind(m, k);
    if (kind > KILN_VALUE_TENSOR) { /* a sequence or optional: by position */
      if (match_file(&f, k, NULL, path, why, len) < 0 ||
          !check_value(s, k, kind, path, tol, worst, why, len))
        return false;
      continue;
    }
    if (!cli_read_tensor(path, INT64_C(16) << 30, &want, &name)) {
      cli_format(why, len, "cannot read %s", path);
      return false;
    }
    int idx = match_file(&f, k, name, path, why, len);
    free(name);
    kiln_tensor_info info;
    const void *data;
    bool ok = idx >= 0;
    int got_kind = ok ? kiln_model_output_kind(m, idx) : KILN_VALUE_TENSOR;
    if (got_kind != KILN_VALUE_TENSOR) {
      cli_format(why, len, "%s holds a tensor named as output %d '%s', which is %s", path, idx,
                 model_name(&f, idx), got_kind == KILN_VALUE_SEQUENCE ? "a sequence"
                 : got_kind == KILN_VALUE_OPTIONAL ? "an optional" : "an optional sequence");
      ok = false;
    }
    if (ok && !(ok = kiln_session_get_output(s, idx, &info, &data) == KILN_OK))
      cli_format(why, len, "the model has no output %d", idx);
    if (ok) {
      kl_tensor got = {.dtype = (kl_dtype)info.dtype, .rank = info.rank, .data = (void *)data};
      memcpy(got.dims, info.dims, sizeof(int64_t) * (size_t)info.rank);
      char what[320];
      cli_format(what, sizeof what, idx == k ? "output %d '%s'" : "output %d '%s' (file "
                 "output_%d.pb)", idx, info.name, k);
      bool values = false;
      ok = compare_tensor(&got, &want, what, -1, tol, worst, why, len, &values);
      if (!ok && values && first && kl_dtype_is_float(want.dtype))
        ok = within_float64(root, k, &got, &want, worst, why, len);
    }
    free(want.data);
    if (!ok) return false;
  }
  return true;
}

/* Append printf(fmt, ...) to spec (u of cap bytes used); u ends >= cap when it does
 * not fit. */
static void append(char *spec, size_t cap, size_t *u, const char *fmt, ...) {
  if (*u >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(spec + *u, cap - *u, fmt, ap);
  va_end(ap);
  *u = n < 0 ? cap : *u + (size_t)n;
}

/* The option input_types for a TorchScript model ("x:float32[2,3,8,8];..."), from the
 * inputs of the data set set (NULL: unset it): archives of torch 1.x do not record
 * their inputs' types (torch 2.x's traced_inputs.pkl wins where present). Names that
 * are not forward's parameters make the library take the entries by position; so do
 * files without names when none has one (declared as "#K", which no parameter is);
 * where some have names, those without are left undeclared. */
static bool set_input_types(kiln_options *o, const char *root, const char *set, char *why,
                            size_t len) {
  char spec[4096] = "", path[4096], *names[MAX_FILES] = {NULL};
  kl_tensor ts[MAX_FILES];
  size_t u = 0;
  bool ok = true, any_named = false;
  int n = set ? count_numbered(set, "input") : 0;
  n = n < MAX_FILES ? n : MAX_FILES;
  for (int k = 0; k < n && ok; k++) {
    ts[k] = (kl_tensor){0};
    cli_format(path, sizeof path, "%s/input_%d.pb", set, k);
    ok = cli_inside(root, path, "test folder", why, len);
    if (ok && !(ok = cli_read_tensor(path, INT64_C(16) << 30, &ts[k], &names[k])))
      cli_format(why, len, "cannot read %s", path);
    free(ts[k].data);
    any_named |= names[k] && *names[k];
  }
  for (int k = 0; k < n && ok; k++) {
    if (any_named && !(names[k] && *names[k])) continue;
    if (any_named) append(spec, sizeof spec, &u, "%s%s", u ? ";" : "", names[k]);
    else append(spec, sizeof spec, &u, "%s#%d", u ? ";" : "", k);
    append(spec, sizeof spec, &u, ":%s", kl_dtype_name(ts[k].dtype));
    for (int d = 0; d < ts[k].rank; d++)
      append(spec, sizeof spec, &u, "%s%lld", d ? "," : "[", (long long)ts[k].dims[d]);
    append(spec, sizeof spec, &u, "%s", ts[k].rank ? "]" : "[]");
  }
  for (int k = 0; k < n; k++) free(names[k]);
  if (ok && u >= sizeof spec) {
    cli_format(why, len, "the inputs' names and shapes of %s are too long to declare", set);
    ok = false;
  }
  if (ok && kiln_options_set_string(o, "input_types", spec) != KILN_OK) {
    cli_format(why, len, "%s", kiln_options_error(o));
    ok = false;
  }
  return ok;
}

/* One test-case folder: true when every data set matches. */
static bool check_case(const char *dir, kiln_options *o, tolerance tol, cmp_result *worst,
                       char *why, size_t len, int *n_sets) {
  char model_path[4096];
  cli_format(model_path, sizeof model_path, "%s/model.onnx", dir);
  if (!is_file(model_path)) cli_format(model_path, sizeof model_path, "%s/model.pt", dir);
  if (!is_file(model_path)) {
    cli_format(why, len, "no model.onnx or model.pt");
    return false;
  }
  char *root = realpath(dir, NULL), **sets = NULL;
  kiln_model *m = NULL;
  kiln_session *s = NULL;
  bool ok = false, pt = strcmp(model_path + strlen(model_path) - 3, ".pt") == 0;
  *n_sets = root ? list_prefixed(dir, "test_data_set_", &sets) : -1;
  if (*n_sets <= 0) {
    cli_format(why, len, root ? "no test_data_set_* folders" : "cannot resolve the folder");
    goto done;
  }
  if (!cli_inside(root, model_path, "test folder", why, len)) goto done;
  char set0[4096];
  cli_format(set0, sizeof set0, "%s/%s", dir, sets[0]);
  if (!set_input_types(o, root, pt ? set0 : NULL, why, len)) goto done;
  kiln_status st = kiln_model_load(model_path, o, &m);
  if (st == KILN_OK) st = kiln_session_create(m, o, &s);
  if (st != KILN_OK) {
    cli_format(why, len, "%s: %s", kiln_status_string(st),
             s ? kiln_session_error(s) : m ? kiln_model_error(m) : "out of memory");
    goto done;
  }
  if (!tol.given && kl_session_tf32(s)) /* TF32's rounding, not float32's */
    tol = (tolerance){1e-2, 1e-5, 1e-3, false};
  ok = true;
  bool noted_in = false, noted_out = false;
  for (int i = 0; i < *n_sets && ok; i++) {
    char set[4096];
    cli_format(set, sizeof set, "%s/%s", dir, sets[i]);
    int n_in = count_numbered(set, "input"), n_out = count_numbered(set, "output");
    kl_tensor ins[MAX_FILES] = {{0}};
    ok = cli_inside(root, set, "test folder", why, len);
    if (ok && (n_in > MAX_FILES || n_out > MAX_FILES)) {
      cli_format(why, len, "%s has more than %d input or output files", sets[i], MAX_FILES);
      ok = false;
    }
    char note[1024] = "";
    if (ok) ok = bind_set(m, s, root, set, ins, n_in, note, sizeof note, why, len);
    if (*note && !noted_in) /* once a folder: a data set's names are most likely all sets' */
      fprintf(stderr, "kiln check: %s: note: the inputs of %s are not named as the model's: "
              "taken by position (%s)\n", dir, sets[i], note);
    noted_in |= *note != 0;
    if (ok && (st = kiln_session_run(s)) != KILN_OK) {
      cli_format(why, len, "%s: %s", kiln_status_string(st), kiln_session_error(s));
      ok = false;
    }
    if (ok && n_out != kiln_model_output_count(m)) {
      cli_format(why, len, "%s has %d expected outputs, the model has %d", sets[i], n_out,
               kiln_model_output_count(m));
      ok = false;
    }
    *note = '\0';
    if (ok)
      ok = check_outputs(m, s, root, set, i == 0, n_out, tol, worst, note, sizeof note, why, len);
    if (*note && !noted_out)
      fprintf(stderr, "kiln check: %s: note: the expected outputs of %s are not named as the "
              "model's: taken by position (%s)\n", dir, sets[i], note);
    noted_out |= *note != 0;
    for (int k = 0; k < n_in && k < MAX_FILES; k++) free(ins[k].data);
    if (!ok) {
      char tmp[1024];
      cli_format(tmp, sizeof tmp, "%s: %s", sets[i], why);
      cli_format(why, len, "%s", tmp);
    }
  }
done:
  for (int i = 0; i < *n_sets; i++) free(sets[i]);
  free(sets);
  free(root);
  kiln_session_free(s);
  kiln_model_free(m);
  return ok;
}

int cmd_check(int argc, char **argv) {
  cli_common common = {.opt_level = 2};
  tolerance tol = {1e-3, 1e-5, 1e-4, false};
  const char **dirs = calloc((size_t)argc, sizeof *dirs);
  int n_dirs = 0;
  if (!dirs) return EXIT_FAIL;
  for (int i = 1; i < argc; i++) {
    int r = cli_common_arg(&common, argc, argv, &i);
    if (r < 0) {
      free(dirs);
      return EXIT_USAGE;
    }
    if (r > 0) continue;
    const char *o = argv[i];
    if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
      printf("%s%s%s", check_help, cli_load_help, cli_run_help);
      free(dirs);
      return EXIT_OK;
    }
    if ((strcmp(o, "--rtol") == 0 || strcmp(o, "--atol") == 0) && i + 1 < argc) {
      tol.given = true;
      tol.atol_scale = 0; /* as given: fixed */
      if (!cli_double_arg("check", o, argv[++i], 0, false, "a tolerance",
                          o[2] == 'r' ? &tol.rtol : &tol.atol)) {
        free(dirs);
        return EXIT_USAGE;
      }
    } else if (o[0] != '-') {
      dirs[n_dirs++] = o;
    } else {
      fprintf(stderr, "kiln check: bad argument '%s'\n%s", o, check_help);
      free(dirs);
      return EXIT_USAGE;
    }
  }
  if (n_dirs == 0) {
    fprintf(stderr, "kiln check: no DIR given\n%s", check_help);
    free(dirs);
    return EXIT_USAGE;
  }
  kiln_options *o = cli_check_applies(&common, "check", true) ? cli_options(&common) : NULL;
  if (!o) {
    free(dirs);
    return EXIT_USAGE;
  }
  int passed = 0, failed = 0;
  for (int i = 0; i < n_dirs; i++) {
    char why[2048] = "not a folder"; /* check_case writes its own */
    int n_sets = 0;
    cmp_result worst = {0};
    bool ok = is_dir(dirs[i]) && check_case(dirs[i], o, tol, &worst, why, sizeof why, &n_sets);
    if (ok && worst.by_f64)
      printf("pass %s (%d data set%s; max abs err %.3g, max rel err %.3g; %d output%s out of "
             "tolerance, but no further from float64_outputs than %.2g times the expected)\n",
             dirs[i], n_sets, n_sets == 1 ? "" : "s", worst.max_abs, worst.max_rel,
             worst.by_f64, worst.by_f64 == 1 ? "" : "s", worst.f64_ratio);
    else if (ok)
      printf("pass %s (%d data set%s; max abs err %.3g, max rel err %.3g)\n", dirs[i], n_sets,
             n_sets == 1 ? "" : "s", worst.max_abs, worst.max_rel);
    else
      printf("FAIL %s\n", dirs[i]);
    fflush(stdout);
    /* the result on stdout, a line a script can match; the reason with the errors */
    if (!ok) fprintf(stderr, "kiln check: %s: %s\n", dirs[i], why);
    passed += ok;
    failed += !ok;
  }
  printf("%d passed, %d failed\n", passed, failed);
  kiln_options_free(o);
  free(dirs);
  return failed ? EXIT_FAIL : EXIT_OK;
}
