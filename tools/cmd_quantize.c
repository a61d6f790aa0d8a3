/* kiln quantize: post-training quantization of a float32 model into a QDQ ONNX model
 * (static, calibrated on data) or a dynamically quantized one (src/quant/quantize.h). */
#include "cli.h"
#include "export/onnx_export.h"
#include "import/npz.h"
#include "import/tensorfile.h"
#include "quant/quantize.h"
#include "runtime/runtime.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *quantize_help =
    "usage: kiln quantize MODEL -o OUT.onnx --calibrate DATA [options]\n"
    "       kiln quantize MODEL -o OUT.onnx --dynamic [options]\n"
    "Post-training quantization into an ONNX model that kiln and onnxruntime run in int8.\n"
    "Static (default): runs the float model on calibration data, observes the inputs and\n"
    "outputs of every Conv, MatMul and Gemm with constant weights, and writes the QDQ\n"
    "form (QuantizeLinear/DequantizeLinear pairs on those activations, int8 weights and\n"
    "int32 biases behind DequantizeLinear). The ops between them whose inputs are all\n"
    "quantized (Add, Mul, Concat, MaxPool, average pooling, Sigmoid and other functions\n"
    "of one input, Flatten/Reshape/Transpose/Squeeze/Unsqueeze/Slice) get their output\n"
    "quantized too, as onnxruntime's quantizer does. kiln folds each quantized Conv into\n"
    "an int8 QLinearConv on oneDNN and runs those ops on the 8-bit codes. A Relu after\n"
    "a quantized node is removed (uint8 activations: its QuantizeLinear clamps at 0);\n"
    "model outputs stay float32.\n"
    "  -o FILE             where to write the model (required; not MODEL itself)\n"
    "  --calibrate DATA    calibration data (repeatable): a .npz whose arrays are named\n"
    "                      after the model's inputs (a model of one input takes a lone\n"
    "                      array of any name), a .npy (a model of one input), dim 0\n"
    "                      counting samples; or an ONNX test-case folder (input_*.pb,\n"
    "                      one batch) or a folder of test_data_set_* folders\n"
    "  --array INPUT=ARRAY the .npz array that feeds model input INPUT (repeatable)\n"
    "  --batch-size N      samples per calibration run from .npz/.npy (default 32; a\n"
    "                      model whose batch dim is fixed takes that)\n"
    "  --max-samples N     use at most N samples of each .npz/.npy (default all)\n"
    "  --method M          activation ranges: minmax (default), percentile (|x| clipped\n"
    "                      at --percentile of its histogram), entropy (clipped where the\n"
    "                      KL divergence of the quantized distribution is least; a\n"
    "                      value clamped at its top, as a ReLU6's, is not clipped)\n"
    "  --percentile P      for --method percentile (default 99.999)\n"
    "  --per-channel       weights per output channel (the default)\n"
    "  --per-tensor        one scale per weight tensor (depthwise convolutions too)\n"
    "  --symmetric         int8 symmetric activations (default uint8 asymmetric; a Relu\n"
    "                      then stays, and kiln keeps Conv+Relu in float32)\n"
    "  --full-range        8-bit weights in [-127, 127]; the default is 7-bit weights in\n"
    "                      [-64, 64], which AVX2 and AVX-512 without VNNI multiply exactly\n"
    "                      (kiln runs full-range weights in int8 only with VNNI or AMX)\n"
    "  --no-bias-correction  leave biases as they are; by default each quantized Conv's\n"
    "                      and Gemm's bias (one is added where there is none) is less\n"
    "                      the mean shift its rounded weights add on the calibration\n"
    "                      data, per output channel\n"
    "  --no-gptq           round each weight to its nearest code; by default the weights\n"
    "                      of each Conv, Gemm and MatMul are rounded column by column,\n"
    "                      each one's rounding error moved onto the later ones as\n"
    "                      their inputs on the calibration data cancel it best (GPTQ;\n"
    "                      groups of up to 1536 inputs, others rounded to the nearest)\n"
    "  --exclude LIST      node names (comma-separated, fnmatch patterns) kept float32\n"
    "  --dynamic           MatMul/Gemm weights to int8, activations quantized at run time\n"
    "                      (DynamicQuantizeLinear + MatMulInteger); no calibration data\n"
    "  --report            print every quantized value's scale, zero point, range and the\n"
    "                      error it adds on the calibration data (SQNR, relative L2; a\n"
    "                      second pass over the data), each weight's rounding (gptq, or\n"
    "                      nearest and why GPTQ could not have it), the nodes kept\n"
    "                      float32 and why, and the written model's outputs against\n"
    "                      the float model's on the calibration data (a third pass)\n"
    "  --report-csv FILE   the same table of values as CSV\n"
    "  --threads N         worker threads for calibration (default: one per core, or\n"
    "                      one per CPU that other programs left free when kiln started)\n"
    "  --no-progress       no progress bar (shown only on a terminal)\n"
    "  --max-tensor-bytes N  largest tensor the model or the data may hold\n";

typedef struct qargs {
  const char *model, *out, *report_csv;
  const char *data[64];
  int n_data;
  const char *arrays[64]; /* --array INPUT=ARRAY */
  int n_arrays;
  int64_t batch_size, max_samples, threads, max_bytes;
  bool report, progress;
  bool weights_set; /* --per-channel or --per-tensor given */
  kl_quant_options o;
} qargs;

/* One calibration batch: a tensor per model input, in the model's input order. */
typedef struct batch {
  kl_tensor *t; /* data borrowed from a source or owned (owned[k]) */
  bool *owned;
} batch;

typedef struct batches {
  batch *b;
  int n, cap;
  kl_npz *npz; /* the archives whose arrays batches point into */
  int n_npz;
  int64_t samples;
} batches;

static void batches_free(batches *bs, int n_in) {
  for (int i = 0; i < bs->n; i++) {
    for (int k = 0; k < n_in; k++)
      if (bs->b[i].owned[k]) free(bs->b[i].t[k].data);
    free(bs->b[i].t);
    free(bs->b[i].owned);
  }
  free(bs->b);
  for (int i = 0; i < bs->n_npz; i++) kl_npz_free(&bs->npz[i]);
  free(bs->npz);
}

static batch *batch_new(batches *bs, int n_in) {
  if (bs->n == bs->cap) {
    int cap = bs->cap ? 2 * bs->cap : 16;
    batch *b = realloc(bs->b, sizeof *b * (size_t)cap);
    if (!b) return NULL;
    bs->b = b;
    bs->cap = cap;
  }
  batch *b = &bs->b[bs->n];
  b->t = calloc((size_t)n_in, sizeof *b->t);
  b->owned = calloc((size_t)n_in, sizeof *b->owned);
  if (!b->t || !b->owned) {
    free(b->t), free(b->owned);
    return NULL;
  }
  bs->n++;
  return b;
}

static void describe_input(const kiln_tensor_info *in, char *buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "%s [", kiln_dtype_name(in->dtype));
  for (int d = 0; d < in->rank && o < len; d++) {
    if (in->dims[d] < 0)
      o += (size_t)snprintf(buf + o, len - o, "%s%s", d ? ", " : "",
                            in->dim_names && in->dim_names[d] ? in->dim_names[d] : "?");
    else
      o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? ", " : "", (long long)in->dims[d]);
  }
  if (o < len) snprintf(buf + o, len - o, "]");
}

static void describe_tensor(const kl_tensor *t, char *buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "%s [", kl_dtype_name(t->dtype));
  for (int d = 0; d < t->rank && o < len; d++)
    o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? ", " : "", (long long)t->dims[d]);
  if (o < len) snprintf(buf + o, len - o, "]");
}

/* Whether array a (dim 0 counting samples) fits model input `in`; else prints why. */
static bool array_fits(const char *file, const char *array, const kl_tensor *a,
                       const kiln_tensor_info *in) {
  bool ok = a->dtype == (kl_dtype)in->dtype && a->rank == in->rank && a->rank >= 1;
  for (int d = 1; ok && d < a->rank; d++) ok = in->dims[d] < 0 || in->dims[d] == a->dims[d];
  if (!ok) {
    char want[256], got[256];
    describe_input(in, want, sizeof want);
    describe_tensor(a, got, sizeof got);
    fprintf(stderr,
            "kiln quantize: %s: array '%s' is %s; the model's input '%s' is %s (dim 0 of "
            "the array counts samples)\n",
            file, array, got, in->name, want);
  }
  return ok;
}

/* A .npz or .npy: each model input's array, cut into batches along dim 0. */
static bool read_arrays(const char *path, const kiln_model *m, const qargs *a, batches *bs) {
  /* an --array for an input the model does not have was ignored, as --shape's was */
  if (!cli_check_named("quantize", "--array", a->arrays, a->n_arrays, m)) return false;
  int n_in = kiln_model_input_count(m);
  kl_npz z = {0};
  kl_err e = {0};
  size_t len = strlen(path);
  bool npy = len > 4 && strcmp(path + len - 4, ".npy") == 0;
  if (npy) {
    z.names = calloc(1, sizeof *z.names);
    z.arrays = calloc(1, sizeof *z.arrays);
    if (!z.names || !z.arrays) {
      free(z.names), free(z.arrays);
      fprintf(stderr, "kiln quantize: out of memory\n");
      return false;
    }
    z.n = 1;
    char *name = NULL;
    if (kl_tensorfile_read(path, a->max_bytes, &z.arrays[0], &name, &e) != KILN_OK ||
        !(z.names[0] = strdup(name ? name : "array"))) {
      free(name);
      kl_npz_free(&z);
      fprintf(stderr, "kiln quantize: %s\n", e.msg[0] ? e.msg : "out of memory");
      return false;
    }
    free(name);
  } else if (kl_npz_read(path, a->max_bytes, a->max_bytes, &z, &e) != KILN_OK) {
    fprintf(stderr, "kiln quantize: %s: %s\n", kiln_status_string(e.code), e.msg);
    return false;
  }
  kl_npz *keep = realloc(bs->npz, sizeof *keep * (size_t)(bs->n_npz + 1));
  if (!keep) {
    kl_npz_free(&z);
    fprintf(stderr, "kiln quantize: out of memory\n");
    return false;
  }
  bs->npz = keep;
  bs->npz[bs->n_npz++] = z;
  int idx[64];
  int64_t samples = -1, per = a->batch_size;
  bool fixed = false;
  if (n_in > 64) {
    fprintf(stderr, "kiln quantize: more than 64 model inputs\n");
    return false;
  }
  if (npy && n_in != 1) {
    fprintf(stderr, "kiln quantize: %s: a .npy holds one array; the model has %d inputs "
                    "(give a .npz with an array named after each)\n", path, n_in);
    return false;
  }
  for (int k = 0; k < n_in; k++) {
    kiln_tensor_info in;
    kiln_model_input_info(m, k, &in);
    const char *want = cli_find_named(a->arrays, a->n_arrays, in.name);
    idx[k] = kl_npz_find(&z, want ? want : in.name);
    if (idx[k] < 0 && !want && n_in == 1 && z.n == 1) idx[k] = 0; /* not one --array named */
    if (idx[k] < 0) {
      fprintf(stderr, "kiln quantize: %s has no array named '%s' (%s; --array %s=NAME "
                      "names another); it holds", path, want ? want : in.name,
              want ? "given with --array" : "the model's input", in.name);
      for (int j = 0; j < z.n; j++) fprintf(stderr, "%s '%s'", j ? "," : "", z.names[j]);
      fprintf(stderr, "%s\n", z.n ? "" : " no arrays");
      return false;
    }
    const kl_tensor *t = &z.arrays[idx[k]];
    if (!array_fits(path, z.names[idx[k]], t, &in)) return false;
    if (samples >= 0 && t->dims[0] != samples) {
      fprintf(stderr, "kiln quantize: %s: array '%s' has %lld samples, '%s' %lld\n", path,
              z.names[idx[k]], (long long)t->dims[0], z.names[idx[0]], (long long)samples);
      return false;
    }
    samples = t->dims[0];
    if (in.dims[0] >= 0) per = in.dims[0], fixed = true; /* a fixed batch dim */
  }
  if (a->max_samples > 0 && samples > a->max_samples) samples = a->max_samples;
  if (samples <= 0) {
    fprintf(stderr, "kiln quantize: %s: no samples (dim 0 is 0)\n", path);
    return false;
  }
  if (!fixed && samples < per) per = samples;
  if (per <= 0 || samples < per) {
    fprintf(stderr, "kiln quantize: %s: %lld samples, fewer than the model's fixed batch "
                    "of %lld\n", path, (long long)samples, (long long)per);
    return false;
  }
  int64_t full = fixed ? samples / per : (samples + per - 1) / per;
  if (full * per < samples)
    fprintf(stderr, "kiln quantize: note: %s: the last %lld samples are left out (the "
                    "model's batch dim is fixed at %lld)\n", path,
            (long long)(samples - full * per), (long long)per);
  for (int64_t b = 0; b < full; b++) {
    batch *bt = batch_new(bs, n_in);
    if (!bt) {
      fprintf(stderr, "kiln quantize: out of memory\n");
      return false;
    }
    for (int k = 0; k < n_in; k++) {
      const kl_tensor *t = &z.arrays[idx[k]];
      int64_t rows = b * per + per <= samples ? per : samples - b * per;
      size_t row_bytes = kl_tensor_nbytes(t) / (size_t)t->dims[0];
      bt->t[k] = *t;
      bt->t[k].dims[0] = rows;
      bt->t[k].data = (char *)t->data + (size_t)(b * per) * row_bytes;
    }
    bs->samples += bt->t[0].dims[0];
  }
  return true;
}

static bool is_file(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* One test-case folder (input_K.pb): a batch, each tensor bound by its name when it
 * names a model input, else by position. Only files inside root, the folder given
 * (resolved), are read: a link planted there leading elsewhere is refused, as kiln
 * check refuses it. */
static bool read_case(const char *root, const char *dir, const kiln_model *m, const qargs *a,
                      batches *bs) {
  int n_in = kiln_model_input_count(m);
  char p[4096];
  int count = 0;
  while (cli_format(p, sizeof p, "%s/input_%d.pb", dir, count) && is_file(p)) count++;
  if (count != n_in) {
    fprintf(stderr, "kiln quantize: %s holds %d input_*.pb files; the model has %d inputs\n",
            dir, count, n_in);
    return false;
  }
  batch *bt = batch_new(bs, n_in);
  if (!bt) {
    fprintf(stderr, "kiln quantize: out of memory\n");
    return false;
  }
  for (int j = 0; j < count; j++) {
    kl_tensor t;
    char *name = NULL;
    cli_format(p, sizeof p, "%s/input_%d.pb", dir, j);
    char why[4200];
    if (!cli_inside(root, p, "calibration folder", why, sizeof why)) {
      fprintf(stderr, "kiln quantize: --calibrate: %s\n", why);
      return false;
    }
    if (!cli_read_tensor(p, a->max_bytes, &t, &name)) return false;
    int k = name ? kiln_model_input_index(m, name) : -1;
    free(name);
    if (k < 0) k = j;
    if (bt->owned[k]) {
      free(t.data);
      fprintf(stderr, "kiln quantize: %s: two files give input %d\n", dir, k);
      return false;
    }
    bt->t[k] = t;
    bt->owned[k] = true;
    kiln_tensor_info in;
    kiln_model_input_info(m, k, &in);
    if (!array_fits(p, in.name, &t, &in)) return false;
  }
  bs->samples += bt->t[0].rank ? bt->t[0].dims[0] : 1;
  return true;
}

/* Whether every --calibrate is a folder: its test data sets' input_N.pb are taken by
 * position, so an --array has nothing to name (it was ignored, silently). */
static bool only_folders(const qargs *a) {
  struct stat sb;
  for (int i = 0; i < a->n_data; i++)
    if (stat(a->data[i], &sb) != 0 || !S_ISDIR(sb.st_mode)) return false;
  return true;
}

static bool read_data(const char *path, const kiln_model *m, const qargs *a, batches *bs) {
  struct stat sb;
  if (stat(path, &sb) != 0) {
    fprintf(stderr, "kiln quantize: --calibrate %s: no such file or folder\n", path);
    return false;
  }
  if (!S_ISDIR(sb.st_mode)) return read_arrays(path, m, a, bs);
  if (a->n_arrays && only_folders(a)) {
    fprintf(stderr, "kiln quantize: --array %s: --calibrate %s is a folder of test data "
                    "sets, whose input_N.pb are taken by position; --array names the arrays "
                    "of a .npz or .npy\n", a->arrays[0], path);
    return false;
  }
  char *root = realpath(path, NULL), p[4096], why[4200];
  if (!root) {
    fprintf(stderr, "kiln quantize: --calibrate %s: %s\n", path, strerror(errno));
    return false;
  }
  cli_format(p, sizeof p, "%s/input_0.pb", path);
  bool single = is_file(p), ok = !single || read_case(root, path, m, a, bs);
  int sets = single;
  for (; ok && !single; sets++) {
    cli_format(p, sizeof p, "%s/test_data_set_%d", path, sets);
    if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)) break;
    if (!(ok = cli_inside(root, p, "calibration folder", why, sizeof why)))
      fprintf(stderr, "kiln quantize: --calibrate: %s\n", why);
    else
      ok = read_case(root, p, m, a, bs);
  }
  free(root);
  if (ok && sets == 0)
    fprintf(stderr, "kiln quantize: --calibrate %s: a folder without input_0.pb or "
                    "test_data_set_0/\n", path);
  return ok && sets > 0;
}

static void progress(const char *what, int done, int total) {
  int width = 30, filled = total ? done * width / total : width;
  fprintf(stderr, "\r%s [", what);
  for (int i = 0; i < width; i++) fputc(i < filled ? '#' : '.', stderr);
  fprintf(stderr, "] %d/%d batches", done, total);
  if (done == total) fputc('\n', stderr);
  fflush(stderr);
}

/* Runs every batch through q (the statistics pass, or the error pass after compute). */
static bool run_batches(kl_quantizer *q, const kiln_model *m, const batches *bs,
                        const char *what, bool show) {
  int n_in = kiln_model_input_count(m);
  const char *names[64];
  for (int k = 0; k < n_in; k++) {
    kiln_tensor_info in;
    kiln_model_input_info(m, k, &in);
    names[k] = in.name;
  }
  for (int i = 0; i < bs->n; i++) {
    kl_err e = {0};
    if (kl_quantizer_run(q, n_in, names, bs->b[i].t, &e) != KILN_OK) {
      if (show) fputc('\n', stderr);
      fprintf(stderr, "kiln quantize: calibration batch %d: %s: %s\n", i,
              kiln_status_string(e.code), e.msg);
      return false;
    }
    if (show) progress(what, i + 1, bs->n);
  }
  return true;
}

/* The report as text (txt, when not NULL) and CSV (csv, when not NULL). */
static void print_report(const kl_quantizer *q, const kl_quant_options *o, FILE *txt,
                         FILE *csv) {
  int nv, nn;
  const kl_quant_value *v = kl_quantizer_values(q, &nv);
  const kl_quant_node *n = kl_quantizer_nodes(q, &nn);
  if (txt) {
    fprintf(txt, "quantized values (%s): scale, zero point, range quantized, range seen, "
                 "error added on the calibration data\n",
            o->dynamic ? "weights" : "activations, weights");
    fprintf(txt, "  %-32s %-10s %-21s %4s  %-23s %-23s %8s %9s  %s\n", "value", "kind", "scale",
            "zp", "range", "observed", "SQNR dB", "rel L2", "rounding");
  }
  if (csv)
    fprintf(csv, "value,kind,scale_min,scale_max,zero_point,lo,hi,min,max,sqnr_db,rel_l2,"
                 "rounding,rounding_note\n");
  for (int i = 0; i < nv; i++) {
    char sc[64], lo[64], mm[64];
    if (v[i].scale_max > v[i].scale)
      snprintf(sc, sizeof sc, "%.3g..%.3g", (double)v[i].scale, (double)v[i].scale_max);
    else
      snprintf(sc, sizeof sc, "%.6g", (double)v[i].scale);
    snprintf(lo, sizeof lo, "[%.4g, %.4g]", v[i].lo, v[i].hi);
    snprintf(mm, sizeof mm, "[%.4g, %.4g]", v[i].min, v[i].max);
    const char *kind = v[i].weight ? (v[i].scale_max > v[i].scale ? "weight/ch" : "weight")
                                   : (o->symmetric ? "act int8" : "act uint8");
    const char *rounding = v[i].rounding ? v[i].rounding : "";
    if (txt)
      fprintf(txt, "  %-32s %-10s %-21s %4d  %-23s %-23s %8.2f %9.3g%s%s%s%s\n", v[i].name,
              kind, sc, (int)v[i].zero_point, lo, mm, v[i].sqnr_db, v[i].rel_l2,
              rounding[0] ? "  " : "", rounding, v[i].rounding_why[0] ? ": " : "",
              v[i].rounding_why);
    if (csv) /* the note holds no comma or quote (quantize.c's strings) */
      fprintf(csv, "%s,%s,%.9g,%.9g,%d,%.9g,%.9g,%.9g,%.9g,%.4f,%.6g,%s,%s\n", v[i].name, kind,
              (double)v[i].scale, (double)v[i].scale_max, (int)v[i].zero_point, v[i].lo,
              v[i].hi, v[i].min, v[i].max, v[i].sqnr_db, v[i].rel_l2, rounding,
              v[i].rounding_why);
  }
  if (!txt) return;
  int kept = 0;
  for (int i = 0; i < nn; i++) kept += !n[i].quantized;
  fprintf(txt, "nodes not quantized (%d of %d):\n", kept, nn);
  for (int i = 0; i < nn; i++)
    if (!n[i].quantized)
      fprintf(txt, "  %-32s %-20s %s\n", n[i].name[0] ? n[i].name : "(unnamed)", n[i].op,
              n[i].why);
}

/* A note on stderr when h holds ops of kiln's own domain (a model that held them, a
 * fold that made one): kiln runs the file, onnxruntime does not know them. */
static void kiln_domain_note(const kl_graph *h, const char *out) {
  int n = 0, first = -1;
  for (int i = 0; i < h->n_nodes; i++) {
    if (strcmp(kl_op_get(h->nodes[i].op)->domain, KL_DOMAIN_KILN) != 0) continue;
    if (n++ == 0) first = i;
  }
  if (n)
    fprintf(stderr, "kiln quantize: note: %s holds %d node%s of kiln's own domain (the first: "
                    "'%s', %s): kiln runs it, onnxruntime will not load it\n",
            out, n, n == 1 ? "" : "s", h->nodes[first].name, kl_op_name(h->nodes[first].op));
}

/* --report: the written model as kiln runs it (-O2) against the float model on the
 * calibration batches: each float32 output's relative L2 error and SQNR, and for a
 * [batch, classes] output how often the top class agrees. */
static void report_outputs(const char *out, const kiln_model *fm, const batches *bs,
                           int64_t threads) {
  kiln_options *o = NULL;
  kiln_model *qm = NULL;
  kiln_session *fs = NULL, *qs = NULL;
  int n_in = kiln_model_input_count(fm), n_out = kiln_model_output_count(fm);
  double *sum = calloc((size_t)n_out + 1, sizeof(double)),
         *err = calloc((size_t)n_out + 1, sizeof(double));
  int64_t *agree = calloc((size_t)n_out + 1, sizeof(int64_t)),
          *rows = calloc((size_t)n_out + 1, sizeof(int64_t));
  const char *why = NULL;
  if (!sum || !err || !agree || !rows || kiln_options_create(&o) != KILN_OK ||
      (threads && kiln_options_set_int(o, "threads", threads) != KILN_OK)) {
    why = "out of memory";
  } else if (kiln_model_load(out, o, &qm) != KILN_OK) {
    why = kiln_model_error(qm);
  } else if (kiln_session_create(fm, o, &fs) != KILN_OK) {
    why = kiln_session_error(fs);
  } else if (kiln_session_create(qm, o, &qs) != KILN_OK) {
    why = kiln_session_error(qs);
  }
  for (int i = 0; !why && i < bs->n; i++) {
    for (int k = 0; k < n_in; k++) {
      kiln_tensor_info in;
      kiln_model_input_info(fm, k, &in);
      const kl_tensor *t = &bs->b[i].t[k];
      kiln_session_set_input(fs, in.name, (kiln_dtype)t->dtype, t->rank, t->dims, t->data,
                             kl_tensor_nbytes(t));
      kiln_session_set_input(qs, in.name, (kiln_dtype)t->dtype, t->rank, t->dims, t->data,
                             kl_tensor_nbytes(t));
    }
    if (kiln_session_run(fs) != KILN_OK) why = kiln_session_error(fs);
    else if (kiln_session_run(qs) != KILN_OK) why = kiln_session_error(qs);
    for (int k = 0; !why && k < n_out; k++) {
      kiln_tensor_info fi, qi;
      const void *fd, *qd;
      if (kiln_session_get_output(fs, k, &fi, &fd) != KILN_OK ||
          kiln_session_get_output(qs, k, &qi, &qd) != KILN_OK || fi.dtype != KILN_DTYPE_FLOAT32 ||
          qi.dtype != KILN_DTYPE_FLOAT32 || fi.rank != qi.rank)
        continue;
      int64_t numel = 1;
      for (int d = 0; d < fi.rank; d++) numel *= fi.dims[d];
      const float *f = fd, *q = qd;
      for (int64_t e = 0; e < numel; e++) {
        sum[k] += (double)f[e] * f[e];
        err[k] += ((double)q[e] - f[e]) * ((double)q[e] - f[e]);
      }
      if (fi.rank != 2 || fi.dims[1] < 2) continue;
      for (int64_t r = 0; r < fi.dims[0]; r++) {
        const float *fr = f + r * fi.dims[1], *qr = q + r * fi.dims[1];
        int64_t bf = 0, bq = 0;
        for (int64_t c = 1; c < fi.dims[1]; c++) {
          if (fr[c] > fr[bf]) bf = c;
          if (qr[c] > qr[bq]) bq = c;
        }
        agree[k] += bf == bq;
        rows[k]++;
      }
    }
  }
  if (why) {
    fprintf(stderr, "kiln quantize: note: the written model was not run against the float "
                    "one: %s\n", why);
  } else {
    printf("outputs on the calibration data (%s at -O2 against the float model):\n", out);
    for (int k = 0; k < n_out; k++) {
      kiln_tensor_info fi;
      kiln_model_output_info(fm, k, &fi);
      if (sum[k] <= 0 && err[k] <= 0) continue;
      printf("  %-32s relative L2 %.3g, SQNR %.2f dB", fi.name, sqrt(err[k] / sum[k]),
             err[k] > 0 ? 10 * log10(sum[k] / err[k]) : INFINITY);
      if (rows[k])
        printf(", top-1 the same on %lld of %lld samples", (long long)agree[k],
               (long long)rows[k]);
      printf("\n");
    }
  }
  kiln_session_free(fs);
  kiln_session_free(qs);
  kiln_model_free(qm);
  kiln_options_free(o);
  free(sum), free(err), free(agree), free(rows);
}

static bool same_file(const char *a, const char *b) {
  struct stat sa, sb;
  return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

static int parse_args(int argc, char **argv, qargs *a) {
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    bool has = i + 1 < argc;
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      fputs(quantize_help, stdout);
      return EXIT_OK + 100;
    } else if (strcmp(arg, "-o") == 0 && has) {
      a->out = argv[++i];
    } else if (strcmp(arg, "--calibrate") == 0 && has) {
      if (a->n_data == 64) {
        fprintf(stderr, "kiln quantize: more than 64 --calibrate\n");
        return EXIT_USAGE;
      }
      a->data[a->n_data++] = argv[++i];
    } else if (strcmp(arg, "--array") == 0 && has) {
      if (a->n_arrays == 64 || !strchr(argv[i + 1], '=')) {
        fprintf(stderr, "kiln quantize: --array %s: expected INPUT=ARRAY\n", argv[i + 1]);
        return EXIT_USAGE;
      }
      a->arrays[a->n_arrays++] = argv[++i];
    } else if (strcmp(arg, "--method") == 0 && has) {
      const char *m = argv[++i];
      if (strcmp(m, "minmax") == 0) a->o.method = KL_CALIB_MINMAX;
      else if (strcmp(m, "percentile") == 0) a->o.method = KL_CALIB_PERCENTILE;
      else if (strcmp(m, "entropy") == 0) a->o.method = KL_CALIB_ENTROPY;
      else {
        fprintf(stderr, "kiln quantize: --method %s: must be minmax, percentile or entropy\n", m);
        return EXIT_USAGE;
      }
    } else if (strcmp(arg, "--percentile") == 0 && has) {
      if (!cli_double_arg("quantize", "--percentile", argv[++i], 0, true, "percent",
                          &a->o.percentile))
        return EXIT_USAGE;
      if (a->o.percentile > 100) {
        fprintf(stderr, "kiln quantize: --percentile %s: must be at most 100\n", argv[i]);
        return EXIT_USAGE;
      }
    } else if (strcmp(arg, "--batch-size") == 0 && has) {
      if (!cli_int_arg("quantize", arg, argv[++i], 1, INT32_MAX, "samples", &a->batch_size))
        return EXIT_USAGE;
    } else if (strcmp(arg, "--max-samples") == 0 && has) {
      if (!cli_int_arg("quantize", arg, argv[++i], 1, INT64_MAX, "samples", &a->max_samples))
        return EXIT_USAGE;
    } else if (strcmp(arg, "--threads") == 0 && has) {
      if (!cli_int_arg("quantize", arg, argv[++i], 1, 4096, "threads", &a->threads))
        return EXIT_USAGE;
    } else if (strcmp(arg, "--max-tensor-bytes") == 0 && has) {
      if (!cli_int_arg("quantize", arg, argv[++i], 1, INT64_MAX, "bytes", &a->max_bytes))
        return EXIT_USAGE;
    } else if (strcmp(arg, "--exclude") == 0 && has) {
      a->o.exclude = argv[++i];
    } else if (strcmp(arg, "--report-csv") == 0 && has) {
      a->report_csv = argv[++i];
    } else if (strcmp(arg, "--per-channel") == 0) {
      a->weights_set = a->o.per_channel = true;
    } else if (strcmp(arg, "--per-tensor") == 0) {
      a->weights_set = true;
      a->o.per_channel = false;
    } else if (strcmp(arg, "--symmetric") == 0) {
      a->o.symmetric = true;
    } else if (strcmp(arg, "--full-range") == 0) {
      a->o.reduce_range = false;
    } else if (strcmp(arg, "--dynamic") == 0) {
      a->o.dynamic = true;
    } else if (strcmp(arg, "--no-gptq") == 0) {
      a->o.gptq = false;
    } else if (strcmp(arg, "--no-bias-correction") == 0) {
      a->o.no_bias_correction = true;
    } else if (strcmp(arg, "--report") == 0) {
      a->report = true;
    } else if (strcmp(arg, "--no-progress") == 0) {
      a->progress = false;
    } else if (arg[0] != '-' && !a->model) {
      a->model = arg;
    } else {
      fprintf(stderr, "kiln quantize: bad argument '%s'\n%s", arg, quantize_help);
      return EXIT_USAGE;
    }
  }
  /* per channel unless asked otherwise. Dynamic (transformers): one scale per weight
   * matrix moved all-MiniLM-L6-v2's embeddings to a mean cosine of 0.877 against float32,
   * per channel 0.992. Static: EfficientNet-Lite0's top-1 (tools/accuracy_lite0.py, 7-bit
   * weights, biases corrected) agreed with float32's on 69.5% of the crops with one scale
   * per tensor (depthwise filters per channel, the default until 2026-11-28), on 89% per
   * channel (docs/precision.md) */
  if (!a->weights_set) a->o.per_channel = true;
  const char *problem = !a->model ? "no MODEL given"
                        : !a->out ? "no -o OUT given"
                        : a->o.dynamic && a->n_data ? "--dynamic takes no --calibrate data"
                        : a->o.dynamic && a->o.symmetric
                            ? "--symmetric is for static quantization (dynamic activations "
                              "are uint8)"
                        : !a->o.dynamic && !a->n_data
                            ? "no --calibrate DATA given (static quantization needs it; "
                              "--dynamic does not)"
                            : NULL;
  if (problem) {
    fprintf(stderr, "kiln quantize: %s\n%s", problem, quantize_help);
    return EXIT_USAGE;
  }
  if (a->n_arrays && a->o.dynamic) {
    fprintf(stderr, "kiln quantize: --array is for --calibrate data\n");
    return EXIT_USAGE;
  }
  if (strcmp(a->model, a->out) == 0 || same_file(a->model, a->out)) {
    fprintf(stderr, "kiln quantize: -o %s is the model itself; write the quantized model "
                    "elsewhere\n", a->out);
    return EXIT_USAGE;
  }
  return -1;
}

/* The float model as the quantizer reads it: -O1 (constant folding, clean-ups) and
 * BatchNormalization folded into the weights; not fold_scale_bias, which makes a MatMul
 * and its bias Add kiln's FusedMatMul: nothing of kiln's own domain, so that
 * onnxruntime reads the result (kiln_domain_note says where something is). */
static kiln_model *load_float(const qargs *a) {
  kiln_options *o = NULL;
  kiln_model *m = NULL;
  if (kiln_options_create(&o) != KILN_OK ||
      kiln_options_set_int(o, "opt_level", 1) != KILN_OK ||
      kiln_options_set_string(o, "passes", "+fold_bn") != KILN_OK ||
      (a->threads && kiln_options_set_int(o, "threads", a->threads) != KILN_OK) ||
      (a->max_bytes && kiln_options_set_int(o, "max_tensor_bytes", a->max_bytes) != KILN_OK)) {
    fprintf(stderr, "kiln quantize: %s\n", o ? kiln_options_error(o) : "out of memory");
    kiln_options_free(o);
    return NULL;
  }
  m = cli_load(a->model, o, NULL);
  kiln_options_free(o);
  return m;
}

int cmd_quantize(int argc, char **argv) {
  qargs a = {.batch_size = 32, .max_bytes = KL_DEFAULT_MAX_TENSOR_BYTES,
             .progress = true, .o = {.reduce_range = true, .gptq = true}};
  int r = parse_args(argc, argv, &a);
  if (r == EXIT_OK + 100) return EXIT_OK;
  if (r >= 0) return r;
  bool show = a.progress && isatty(STDERR_FILENO);
  a.threads = cli_threads_for((int)a.threads); /* without --threads: the CPUs left free */
  kiln_model *m = load_float(&a);
  if (!m) return EXIT_FAIL;
  int n_in = kiln_model_input_count(m);
  batches bs = {0};
  kl_quantizer *q = NULL;
  kl_graph *h = NULL;
  FILE *csv = NULL;
  int rc = EXIT_FAIL;
  kl_err e = {0};
  if (kl_quantizer_create(m->g, &a.o, &q, &e) != KILN_OK) {
    fprintf(stderr, "kiln quantize: %s\n", e.msg);
    goto done;
  }
  for (int i = 0; i < a.n_data; i++)
    if (!read_data(a.data[i], m, &a, &bs)) goto done;
  if (!a.o.dynamic) {
    if (bs.n == 0) {
      fprintf(stderr, "kiln quantize: no calibration samples in the data given\n");
      goto done;
    }
    if (!run_batches(q, m, &bs, "calibrating", show)) goto done;
  }
  if (kl_quantizer_compute(q, &e) != KILN_OK) {
    fprintf(stderr, "kiln quantize: %s\n", e.msg);
    goto done;
  }
  if (a.report && !a.o.dynamic && !run_batches(q, m, &bs, "measuring  ", show)) goto done;
  if (kl_quantizer_graph(q, &h, &e) != KILN_OK ||
      kl_onnx_export_file(h, a.out, &e) != KILN_OK) {
    fprintf(stderr, "kiln quantize: %s: %s\n", kiln_status_string(e.code), e.msg);
    goto done;
  }
  kiln_domain_note(h, a.out);
  int nn, quantized = 0, candidates = 0, between = 0;
  const kl_quant_node *nodes = kl_quantizer_nodes(q, &nn);
  for (int i = 0; i < nn; i++) {
    bool product = !strcmp(nodes[i].op, "Conv") || !strcmp(nodes[i].op, "MatMul") ||
                   !strcmp(nodes[i].op, "Gemm");
    candidates += product;
    quantized += product && nodes[i].quantized;
    between += !product && nodes[i].quantized;
  }
  /* GPTQ's rounding: how many weights got it, and the first that did not */
  int nv, gptq = 0, weights = 0, first_nearest = -1;
  const kl_quant_value *vals = kl_quantizer_values(q, &nv);
  for (int i = 0; i < nv; i++) {
    if (!vals[i].weight) continue;
    weights++;
    if (vals[i].rounding && !strcmp(vals[i].rounding, "gptq") && !vals[i].rounding_why[0]) gptq++;
    else if (first_nearest < 0) first_nearest = i;
  }
  char gptq_txt[64] = "";
  if (a.o.gptq)
    snprintf(gptq_txt, sizeof gptq_txt, ", GPTQ rounding of %d of %d weights", gptq, weights);
  static const char *methods[] = {"minmax", "percentile", "entropy"};
  if (a.o.dynamic)
    printf("%s: %d of %d Conv/MatMul/Gemm nodes quantized (dynamic, %s %s weights)\n",
           a.out, quantized, candidates, a.o.per_channel ? "per-channel" : "per-tensor",
           a.o.reduce_range ? "7-bit" : "8-bit");
  else
    printf("%s: %d of %d Conv/MatMul/Gemm nodes quantized, %d ops between them on 8-bit "
           "codes (static, %s on %d batches of %lld samples, %s %s weights, %s "
           "activations%s%s)\n",
           a.out, quantized, candidates, between, methods[a.o.method], bs.n,
           (long long)bs.samples,
           a.o.per_channel ? "per-channel" : "per-tensor",
           a.o.reduce_range ? "7-bit" : "8-bit",
           a.o.symmetric ? "int8 symmetric" : "uint8",
           a.o.no_bias_correction ? ", biases as they were" : ", biases corrected",
           gptq_txt);
  if (a.o.gptq && first_nearest >= 0)
    fprintf(stderr, "kiln quantize: note: %d of %d weights not GPTQ-rounded (or not every "
                    "group of them); the first, '%s': %s%s%s (--report lists each)\n",
            weights - gptq, weights, vals[first_nearest].name, vals[first_nearest].rounding,
            vals[first_nearest].rounding_why[0] ? ", " : "", vals[first_nearest].rounding_why);
  if (a.report_csv && !(csv = cli_open_stream("quantize", a.report_csv, false))) goto done;
  if (a.report || csv) print_report(q, &a.o, a.report ? stdout : NULL, csv);
  if (a.report && bs.n) report_outputs(a.out, m, &bs, a.threads);
  rc = EXIT_OK;
done:
  if (csv) { /* a full disk shows at the last write or at the close: say so, not only exit 1 */
    bool bad = ferror(csv);
    if ((fclose(csv) != 0 || bad) && rc == EXIT_OK) {
      fprintf(stderr, "kiln quantize: cannot write %s\n", a.report_csv);
      rc = EXIT_FAIL;
    }
  }
  kl_graph_free(h);
  kl_quantizer_free(q);
  batches_free(&bs, n_in);
  kiln_model_free(m);
  return rc;
}
