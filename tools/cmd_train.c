/* kiln train: train a model on arrays from a .npz file (docs/training.md). */
#include "bench_profile.h"
#include "cli.h"
#include "import/npz.h"
#include "runtime/session.h"
#include "train/train.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *train_help =
    "usage: kiln train MODEL.onnx --data TRAIN.npz (--epochs N | --steps N) [options]\n"
    "  --data FILE.npz       one array per model input, named as the input, and 'target'\n"
    "                        (int64 class indices for cross_entropy/nll, else float32 of\n"
    "                        the first output's shape); dim 0 is the sample\n"
    "  --eval FILE.npz       the same, evaluated after each epoch (accuracy for class\n"
    "                        losses, mean squared error otherwise)\n"
    "  --loss L              cross_entropy (default), nll, mse, l1, smooth_l1, bce_logits\n"
    "  --optimizer O         sgd (default), adagrad, adam, adamw, lamb, lars\n"
    "  --lr F --momentum F --dampening F --nesterov --weight-decay F --betas F,F --eps F\n"
    "  --lr-decay F --initial-accumulator F --amsgrad --trust-coefficient F\n"
    "                        the optimizer's settings, as PyTorch's (defaults: PyTorch's)\n"
    "  --label-smoothing F --ignore-index N --smooth-l1-beta F   the loss's\n"
    "  --reduction mean|sum  the loss over the batch (default mean, as PyTorch's)\n"
    "  --batch N             samples per step (default 32); the last partial batch is kept\n"
    "  --epochs N | --steps N   how long\n"
    "  --no-shuffle          batches in file order (default: shuffled by --seed)\n"
    "  --seed N              shuffling and dropout (default 0)\n"
    "  --clip-norm F         clip the gradients to this global L2 norm\n"
    "  --schedule S          step:N:GAMMA (lr x GAMMA every N steps), cosine[:T] (to 0 over\n"
    "                        T steps, default all), warmup:W (linear from lr/W over W steps)\n"
    "  --frozen LIST         comma-separated weights not to train\n"
    "  --no-decay auto|LIST  weights updated without weight decay: auto (every weight of\n"
    "                        rank 1: biases, normalization scales) or name patterns\n"
    "                        (\"*.bias,*norm*\"), as a PyTorch param group of weight_decay 0\n"
    "  --skip-nonfinite      skip a step whose loss is NaN or infinite (default: stop)\n"
    "  --bf16                weights as bfloat16 with their low halves kept apart (SplitSGD,\n"
    "                        every optimizer); the FP32 master is saved. On an AMX CPU the\n"
    "                        convolutions, their gradients and the products compute in\n"
    "                        bf16 too (--precision fp32 keeps float32; --precision bf16\n"
    "                        asks for it on an AVX512-BF16 CPU without AMX)\n"
    "  --log FILE.jsonl      one JSON object per step: step, epoch, loss, lr, ms\n"
    "  --profile             time each node of the step graph (steps after the first two)\n"
    "                        and print the op types and nodes that took longest\n"
    "  --curve FILE.svg      the loss curve (and eval metric) as SVG\n"
    "  -o OUT.onnx           write the trained model\n"
    "  --checkpoint DIR      save weights and optimizer state after each epoch\n"
    "  --resume DIR          continue from a checkpoint of the same model and options\n";

typedef struct train_args {
  const char *model, *data, *eval, *log, *curve, *out, *checkpoint, *resume, *schedule;
  int64_t batch, epochs, steps, seed;
  bool shuffle, skip_nonfinite, bf16, profile;
  cli_common common;
} train_args;

/* A data set: the arrays of a .npz, those the trainer reads, by sample. */
typedef struct dataset {
  kl_npz z;
  int64_t n;        /* samples */
  int *use;         /* the arrays bound, indices into z */
  int n_use;
  kl_tensor *batch; /* per bound array: the batch's buffer */
} dataset;

static void dataset_free(dataset *d) {
  for (int i = 0; i < d->n_use && d->batch; i++) free(d->batch[i].data);
  free(d->batch);
  free(d->use);
  kl_npz_free(&d->z);
}

/* Reads file and checks it has every input of the model (and target when want_target),
 * all with the same number of samples. */
static bool dataset_open(dataset *d, const char *file, const char *model, bool want_target,
                         int64_t batch) {
  memset(d, 0, sizeof *d);
  kl_err e = {0};
  if (kl_npz_read(file, INT64_C(16) << 30, INT64_C(64) << 30, &d->z, &e) != KILN_OK) {
    fprintf(stderr, "kiln train: %s\n", e.msg);
    return false;
  }
  kiln_options *o = NULL;
  kiln_model *m = NULL;
  /* the model as read (no optimization), for its inputs' names */
  if (kiln_options_create(&o) != KILN_OK || kiln_options_set_int(o, "opt_level", 0) != KILN_OK ||
      kiln_model_load(model, o, &m) != KILN_OK) {
    fprintf(stderr, "kiln train: %s\n", kiln_model_error(m));
    kiln_model_free(m);
    kiln_options_free(o);
    return false;
  }
  int n_in = kiln_model_input_count(m);
  d->use = calloc((size_t)n_in + 1, sizeof(int));
  d->batch = calloc((size_t)n_in + 1, sizeof(kl_tensor));
  bool ok = d->use && d->batch;
  for (int i = 0; ok && i <= n_in; i++) {
    const char *name;
    if (i < n_in) {
      kiln_tensor_info info;
      kiln_model_input_info(m, i, &info);
      name = info.name;
    } else {
      if (!want_target) break;
      name = "target";
    }
    int k = kl_npz_find(&d->z, name);
    if (k < 0) {
      fprintf(stderr, "kiln train: %s has no array '%s' (it has:", file, name);
      for (int j = 0; j < d->z.n; j++) fprintf(stderr, " %s", d->z.names[j]);
      fprintf(stderr, ")\n");
      ok = false;
      break;
    }
    const kl_tensor *a = &d->z.arrays[k];
    if (a->rank < 1) {
      fprintf(stderr, "kiln train: %s: array '%s' is a scalar; expected samples along dim 0\n",
              file, name);
      ok = false;
      break;
    }
    if (d->n_use == 0) d->n = a->dims[0];
    if (a->dims[0] != d->n) {
      fprintf(stderr, "kiln train: %s: array '%s' has %" PRId64 " samples, '%s' has %" PRId64
              "\n", file, name, a->dims[0], d->z.names[d->use[0]], d->n);
      ok = false;
      break;
    }
    d->use[d->n_use] = k;
    kl_tensor *b = &d->batch[d->n_use];
    *b = *a;
    b->dims[0] = batch < d->n ? batch : d->n;
    b->data = malloc(kl_tensor_nbytes(b) ? kl_tensor_nbytes(b) : 1);
    d->n_use++;
    if (!b->data) {
      fprintf(stderr, "kiln train: out of memory\n");
      ok = false;
    }
  }
  if (ok && d->n == 0) {
    fprintf(stderr, "kiln train: %s has no samples\n", file);
    ok = false;
  }
  kiln_model_free(m);
  kiln_options_free(o);
  return ok;
}

/* Gathers samples order[from .. from+count) into the batch buffers and binds them. */
static bool dataset_bind(dataset *d, kiln_trainer *t, const int64_t *order, int64_t from,
                         int64_t count) {
  for (int i = 0; i < d->n_use; i++) {
    const kl_tensor *a = &d->z.arrays[d->use[i]];
    kl_tensor *b = &d->batch[i];
    size_t row = kl_tensor_nbytes(a) / (size_t)(a->dims[0] ? a->dims[0] : 1);
    b->dims[0] = count;
    for (int64_t r = 0; r < count; r++)
      memcpy((char *)b->data + (size_t)r * row, (const char *)a->data + (size_t)order[from + r] * row,
             row);
    if (kiln_trainer_set_input(t, d->z.names[d->use[i]], (kiln_dtype)b->dtype, b->rank, b->dims,
                               b->data, row * (size_t)count) != KILN_OK) {
      fprintf(stderr, "kiln train: %s\n", kiln_trainer_error(t));
      return false;
    }
  }
  return true;
}

/* splitmix64 */
static uint64_t next_u64(uint64_t *s) {
  uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* The sample order of an epoch: file order, or a Fisher-Yates shuffle seeded by the
 * seed and the epoch (so that a resumed run sees the same order). */
static void epoch_order(int64_t *order, int64_t n, bool shuffle, int64_t seed, int64_t epoch) {
  for (int64_t i = 0; i < n; i++) order[i] = i;
  if (!shuffle) return;
  uint64_t s = (uint64_t)seed * 0x100000001B3ull ^ (uint64_t)epoch * 0x9E3779B97F4A7C15ull;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(next_u64(&s) % (uint64_t)(i + 1));
    int64_t tmp = order[i];
    order[i] = order[j];
    order[j] = tmp;
  }
}

typedef struct schedule {
  int kind; /* 0 none, 1 step, 2 cosine, 3 warmup */
  int64_t n;
  double gamma;
} schedule;

static bool parse_schedule(const char *s, schedule *out, int64_t total) {
  memset(out, 0, sizeof *out);
  if (!s) return true;
  char *end;
  if (strncmp(s, "step:", 5) == 0) {
    out->kind = 1;
    out->n = strtoll(s + 5, &end, 10);
    if (*end != ':' || out->n < 1) return false;
    out->gamma = strtod(end + 1, &end);
    return !*end && out->gamma > 0;
  }
  if (strncmp(s, "cosine", 6) == 0) {
    out->kind = 2;
    out->n = total;
    if (s[6] == ':') {
      out->n = strtoll(s + 7, &end, 10);
      return !*end && out->n >= 1;
    }
    return !s[6];
  }
  if (strncmp(s, "warmup:", 7) == 0) {
    out->kind = 3;
    out->n = strtoll(s + 7, &end, 10);
    return !*end && out->n >= 1;
  }
  return false;
}

/* The learning rate of step k (0-based), as PyTorch's StepLR, CosineAnnealingLR
 * (eta_min 0) and LinearLR(start_factor=1/W, total_iters=W) stepped once per step. */
static double lr_at(const schedule *s, double base, int64_t k) {
  switch (s->kind) {
  case 1: return base * pow(s->gamma, (double)(k / s->n));
  case 2: {
    int64_t at = k < s->n ? k : s->n;
    return base * (1 + cos(M_PI * (double)at / (double)s->n)) / 2;
  }
  case 3: {
    double f = 1.0 / (double)s->n;
    int64_t at = k < s->n ? k : s->n;
    return base * (f + (1 - f) * (double)at / (double)s->n);
  }
  default: return base;
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The eval set's metric: accuracy (class losses) or mean squared error. */
static bool evaluate(kiln_trainer *t, dataset *d, int64_t batch, bool classes, double *metric) {
  int64_t *order = malloc(sizeof(int64_t) * (size_t)d->n);
  if (!order) return false;
  epoch_order(order, d->n, false, 0, 0);
  double acc = 0;
  int ti = -1;
  for (int i = 0; i < d->n_use; i++)
    if (strcmp(d->z.names[d->use[i]], "target") == 0) ti = i;
  bool ok = ti >= 0;
  for (int64_t from = 0; ok && from < d->n; from += batch) {
    int64_t count = d->n - from < batch ? d->n - from : batch;
    kiln_tensor_info info;
    const void *out;
    ok = dataset_bind(d, t, order, from, count);
    if (ok && kiln_trainer_evaluate(t, &info, &out) != KILN_OK) {
      fprintf(stderr, "kiln train: evaluation: %s\n", kiln_trainer_error(t));
      ok = false;
    }
    if (!ok) break;
    const kl_tensor *tg = &d->batch[ti];
    const float *y = out;
    if (classes) {
      int64_t classes_n = info.rank >= 2 ? info.dims[1] : 1, rest = 1;
      for (int k = 2; k < info.rank; k++) rest *= info.dims[k];
      for (int64_t b = 0; b < count; b++)
        for (int64_t r = 0; r < rest; r++) {
          int64_t best = 0;
          for (int64_t c = 1; c < classes_n; c++)
            if (y[(b * classes_n + c) * rest + r] > y[(b * classes_n + best) * rest + r]) best = c;
          acc += best == kl_load_i64(tg->data, tg->dtype, (size_t)(b * rest + r)) ? 1.0 / (double)rest : 0;
        }
    } else {
      int64_t per = kl_tensor_numel(tg) / (count ? count : 1);
      for (int64_t i = 0; i < count * per; i++) {
        double diff = y[i] - kl_load_f64(tg->data, tg->dtype, (size_t)i);
        acc += diff * diff / (double)per;
      }
    }
  }
  free(order);
  *metric = acc / (double)d->n;
  return ok;
}

/* The loss curve as an SVG polyline (and the eval metric per epoch, right axis). */
static bool write_curve(const char *path, const double *loss, int64_t n, const double *metric,
                        const int64_t *metric_step, int n_metric, const char *metric_name) {
  FILE *f = cli_open_stream("train", path, false);
  if (!f) return false;
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(loss[i])) lo = fmin(lo, loss[i]), hi = fmax(hi, loss[i]);
  if (!(hi > lo)) hi = lo + 1;
  const double W = 640, H = 360, L = 60, R = 60, T = 20, B = 40;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" "
          "height=\"100%%\" fill=\"white\"/>\n", W, H);
  fprintf(f, "<text x=\"%g\" y=\"14\">loss per step (left axis %.4g to %.4g)%s%s</text>\n", L,
          lo, hi, n_metric ? "; " : "", n_metric ? metric_name : "");
  fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.2\" points=\"");
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(loss[i])) continue;
    double x = L + (W - L - R) * (n > 1 ? (double)i / (double)(n - 1) : 0);
    double y = T + (H - T - B) * (1 - (loss[i] - lo) / (hi - lo));
    fprintf(f, "%.1f,%.1f ", x, y);
  }
  fprintf(f, "\"/>\n");
  if (n_metric) {
    double mlo = INFINITY, mhi = -INFINITY;
    for (int i = 0; i < n_metric; i++) mlo = fmin(mlo, metric[i]), mhi = fmax(mhi, metric[i]);
    if (!(mhi > mlo)) mhi = mlo + 1e-9;
    fprintf(f, "<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" points=\"");
    for (int i = 0; i < n_metric; i++) {
      double x = L + (W - L - R) * (n > 1 ? (double)(metric_step[i] - 1) / (double)(n - 1) : 0);
      double y = T + (H - T - B) * (1 - (metric[i] - mlo) / (mhi - mlo));
      fprintf(f, "%.1f,%.1f ", x, y);
    }
    fprintf(f, "\"/>\n<text x=\"%g\" y=\"%g\" fill=\"#d62728\">%s %.4g to %.4g</text>\n", L,
            H - 10, metric_name, mlo, mhi);
  }
  fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", L, H - B,
          W - R, H - B);
  fprintf(f, "<text x=\"%g\" y=\"%g\">step 1 to %" PRId64 "</text>\n</svg>\n", W / 2 - 40,
          H - B + 16, n);
  bool bad = ferror(f);
  if (fclose(f) == 0 && !bad) return true;
  fprintf(stderr, "kiln train: cannot write %s\n", path); /* a full disk: not only exit 1 */
  return false;
}

/* The float option name from flag's value; false, naming the flag and the range that
 * the library's message gives, when it is not a number in that range. */
static bool set_f(kiln_options *o, const char *flag, const char *name, const char *value) {
  double v;
  if (!cli_parse_double(value, &v)) {
    fprintf(stderr, "kiln train: %s %s: must be a number\n", flag, value);
    return false;
  }
  if (kiln_options_set_float(o, name, v) != KILN_OK) {
    fprintf(stderr, "kiln train: %s %s: %s\n", flag, value, kiln_options_error(o));
    return false;
  }
  return true;
}

int cmd_train(int argc, char **argv) {
  train_args a = {.batch = 32, .shuffle = true, .common = {.opt_level = 2}};
  /* settings passed to the options as they come: (option name, value) */
  const char *fopts[32][3]; /* (option name, value, flag) */
  int n_f = 0;
  const char *sopts[8][2];
  int n_s = 0;
  const char *iopts[8][3];
  int n_i = 0;
  static const struct {
    const char *flag, *name;
    char kind; /* f float, s string, i int, b boolean int */
  } map[] = {
      {"--loss", "loss", 's'}, {"--optimizer", "optimizer", 's'}, {"--frozen", "frozen", 's'},
      {"--no-decay", "no_decay", 's'},
      {"--reduction", "reduction", 's'},
      {"--lr", "lr", 'f'}, {"--momentum", "momentum", 'f'}, {"--dampening", "dampening", 'f'},
      {"--weight-decay", "weight_decay", 'f'}, {"--eps", "eps", 'f'},
      {"--lr-decay", "lr_decay", 'f'}, {"--initial-accumulator", "initial_accumulator", 'f'},
      {"--trust-coefficient", "trust_coefficient", 'f'}, {"--clip-norm", "clip_norm", 'f'},
      {"--label-smoothing", "label_smoothing", 'f'}, {"--smooth-l1-beta", "smooth_l1_beta", 'f'},
      {"--ignore-index", "ignore_index", 'i'}, {"--nesterov", "nesterov", 'b'},
      {"--amsgrad", "amsgrad", 'b'}, {"--maximize", "maximize", 'b'},
  };
  const char *betas = NULL;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    int r = cli_common_arg(&a.common, argc, argv, &i);
    if (r < 0) return EXIT_USAGE;
    if (r > 0) continue;
    bool has_value = i + 1 < argc;
    bool found = false;
    for (size_t k = 0; k < sizeof map / sizeof map[0] && !found; k++) {
      if (strcmp(s, map[k].flag) != 0) continue;
      found = true;
      if (map[k].kind == 'b') {
        iopts[n_i][0] = map[k].name, iopts[n_i][2] = s, iopts[n_i++][1] = "1";
        continue;
      }
      if (!has_value) {
        fprintf(stderr, "kiln train: %s needs a value\n", s);
        return EXIT_USAGE;
      }
      const char *v = argv[++i];
      if (map[k].kind == 'f' && n_f < 32)
        fopts[n_f][0] = map[k].name, fopts[n_f][2] = s, fopts[n_f++][1] = v;
      if (map[k].kind == 's' && n_s < 8) sopts[n_s][0] = map[k].name, sopts[n_s++][1] = v;
      if (map[k].kind == 'i' && n_i < 8)
        iopts[n_i][0] = map[k].name, iopts[n_i][2] = s, iopts[n_i++][1] = v;
    }
    if (found) continue;
    const char **str = strcmp(s, "--data") == 0         ? &a.data
                       : strcmp(s, "--eval") == 0       ? &a.eval
                       : strcmp(s, "--log") == 0        ? &a.log
                       : strcmp(s, "--curve") == 0      ? &a.curve
                       : strcmp(s, "-o") == 0           ? &a.out
                       : strcmp(s, "--checkpoint") == 0 ? &a.checkpoint
                       : strcmp(s, "--resume") == 0     ? &a.resume
                       : strcmp(s, "--schedule") == 0   ? &a.schedule
                       : strcmp(s, "--betas") == 0      ? &betas
                                                        : NULL;
    int64_t *num = strcmp(s, "--batch") == 0    ? &a.batch
                   : strcmp(s, "--epochs") == 0 ? &a.epochs
                   : strcmp(s, "--steps") == 0  ? &a.steps
                   : strcmp(s, "--seed") == 0   ? &a.seed
                                                : NULL;
    if ((str || num) && !has_value) {
      fprintf(stderr, "kiln train: %s needs a value\n", s);
      return EXIT_USAGE;
    }
    if (str) {
      *str = argv[++i];
    } else if (num) {
      /* --epochs and --steps left at 0 are not given: one of them is required */
      if (!cli_int_arg("train", s, argv[++i], num == &a.seed ? 0 : 1, INT64_MAX, NULL, num))
        return EXIT_USAGE;
    } else if (strcmp(s, "--no-shuffle") == 0) {
      a.shuffle = false;
    } else if (strcmp(s, "--skip-nonfinite") == 0) {
      a.skip_nonfinite = true;
    } else if (strcmp(s, "--bf16") == 0) {
      a.bf16 = true;
    } else if (strcmp(s, "--profile") == 0) {
      a.profile = true;
    } else if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
      printf("%s%s%s", train_help, cli_load_help, cli_run_help);
      return EXIT_OK;
    } else if (s[0] == '-') {
      fprintf(stderr, "kiln train: unknown option %s\n%s", s, train_help);
      return EXIT_USAGE;
    } else if (!a.model) {
      a.model = s;
    } else {
      fprintf(stderr, "kiln train: one model only (got '%s' too)\n", s);
      return EXIT_USAGE;
    }
  }
  if (!a.model || !a.data || (a.epochs == 0) == (a.steps == 0)) {
    fprintf(stderr, "kiln train: a model, --data and one of --epochs or --steps (above 0) "
            "are required\n%s", train_help);
    return EXIT_USAGE;
  }
  kiln_options *o = cli_options(&a.common);
  if (!o) return EXIT_FAIL;
  bool ok = true;
  for (int k = 0; ok && k < n_f; k++) ok = set_f(o, fopts[k][2], fopts[k][0], fopts[k][1]);
  for (int k = 0; ok && k < n_s; k++)
    if (kiln_options_set_string(o, sopts[k][0], sopts[k][1]) != KILN_OK) {
      fprintf(stderr, "kiln train: %s\n", kiln_options_error(o));
      ok = false;
    }
  for (int k = 0; ok && k < n_i; k++) {
    int64_t v;
    if (!cli_parse_int(iopts[k][1], &v)) {
      fprintf(stderr, "kiln train: %s %s: must be an integer\n", iopts[k][2], iopts[k][1]);
      ok = false;
    } else if (kiln_options_set_int(o, iopts[k][0], v) != KILN_OK) {
      fprintf(stderr, "kiln train: %s %s: %s\n", iopts[k][2], iopts[k][1], kiln_options_error(o));
      ok = false;
    }
  }
  if (ok && betas) {
    char b1[64];
    const char *comma = strchr(betas, ',');
    if (!comma || (size_t)(comma - betas) >= sizeof b1) {
      fprintf(stderr, "kiln train: --betas takes two numbers, 'B1,B2'\n");
      ok = false;
    } else {
      snprintf(b1, sizeof b1, "%.*s", (int)(comma - betas), betas);
      ok = set_f(o, "--betas", "beta1", b1) && set_f(o, "--betas", "beta2", comma + 1);
    }
  }
  if (ok && kiln_options_set_int(o, "seed", a.seed) != KILN_OK) ok = false;
  if (ok && a.bf16 && kiln_options_set_int(o, "bf16", 1) != KILN_OK) ok = false;
  kiln_trainer *t = NULL;
  if (ok && kiln_trainer_create(a.model, o, &t) != KILN_OK) {
    fprintf(stderr, "kiln train: %s\n", kiln_trainer_error(t));
    ok = false;
  }
  const char *loss_kind = NULL;
  for (int k = 0; k < n_s; k++)
    if (strcmp(sopts[k][0], "loss") == 0) loss_kind = sopts[k][1];
  bool classes = !loss_kind || !strcmp(loss_kind, "cross_entropy") || !strcmp(loss_kind, "nll");
  dataset train = {0}, ev = {0};
  bool have_eval = false;
  if (ok) ok = dataset_open(&train, a.data, a.model, true, a.batch);
  if (ok && a.eval) ok = have_eval = dataset_open(&ev, a.eval, a.model, true, a.batch);
  /* (train.n + batch - 1) / batch and epochs * per_epoch overflowed for --batch or
   * --epochs near 2^63 (UBSan) */
  int64_t per_epoch = ok ? train.n / a.batch + (train.n % a.batch != 0) : 1;
  int64_t total = a.steps;
  if (ok && !a.steps && __builtin_mul_overflow(a.epochs, per_epoch, &total)) {
    fprintf(stderr, "kiln train: --epochs %" PRId64 ": %" PRId64 " steps an epoch make more "
            "steps than kiln counts (2^63 - 1)\n", a.epochs, per_epoch);
    ok = false;
  }
  schedule sch;
  if (ok && !parse_schedule(a.schedule, &sch, total)) {
    fprintf(stderr, "kiln train: --schedule '%s': expected step:N:GAMMA, cosine[:T] or "
            "warmup:W\n", a.schedule);
    ok = false;
  }
  if (ok && a.resume && kiln_trainer_load_checkpoint(t, a.resume) != KILN_OK) {
    fprintf(stderr, "kiln train: --resume: %s\n", kiln_trainer_error(t));
    ok = false;
  }
  FILE *log = NULL;
  if (ok && a.log && !(log = cli_open_stream("train", a.log, a.resume != NULL))) ok = false;
  int64_t *order = ok ? malloc(sizeof(int64_t) * (size_t)train.n) : NULL;
  double *losses = ok ? calloc((size_t)total + 1, sizeof(double)) : NULL;
  double metric[4096];
  int64_t metric_step[4096];
  int n_metric = 0;
  if (ok && (!order || !losses)) {
    fprintf(stderr, "kiln train: out of memory\n");
    ok = false;
  }
  if (ok) { /* what is trained: ONNX does not tell parameters from buffers */
    int nw = kiln_trainer_weight_count(t);
    printf("training %d weights:", nw);
    for (int i = 0; i < nw && i < 8; i++) printf(" %s", kiln_trainer_weight_name(t, i));
    printf(nw > 8 ? " ... (--frozen NAME,... leaves one as it is)\n"
                  : " (--frozen NAME,... leaves one as it is)\n");
  }
  double base_lr = ok ? kiln_trainer_lr(t) : 0;
  bench_profile *prof = NULL;
  if (ok && a.profile) {
    if (!(prof = bench_profile_new(kl_trainer_step_model(t)))) ok = false;
    else kl_session_set_profiling(kl_trainer_step_session(t), true);
  }
  bool tty = isatty(2);
  double t0 = now_s(), samples = 0;
  int64_t skipped = 0;
  int64_t start = ok ? kiln_trainer_steps(t) : 0;
  int64_t epoch = -1;
  for (int64_t k = start; ok && k < total; k++) {
    int64_t e = k / per_epoch, in_epoch = k % per_epoch;
    if (e != epoch) {
      epoch = e;
      epoch_order(order, train.n, a.shuffle, a.seed, e);
    }
    int64_t from = in_epoch * a.batch;
    int64_t count = train.n - from < a.batch ? train.n - from : a.batch;
    double lr = lr_at(&sch, base_lr, k), loss = NAN;
    double s0 = now_s();
    ok = dataset_bind(&train, t, order, from, count);
    if (ok && kiln_trainer_set_lr(t, lr) != KILN_OK) { /* --lr inf ended with no message */
      fprintf(stderr, "%skiln train: step %" PRId64 ": %s\n", tty ? "\n" : "", k + 1,
              kiln_trainer_error(t));
      ok = false;
    }
    kiln_status st = ok ? kiln_trainer_step(t, &loss) : KILN_ERR_STATE;
    double ms = (now_s() - s0) * 1e3;
    if (ok && st != KILN_OK) {
      if (!isfinite(loss) && a.skip_nonfinite && st == KILN_ERR_STATE) {
        skipped++;
      } else {
        fprintf(stderr, "%skiln train: %s\n", tty ? "\n" : "", kiln_trainer_error(t));
        ok = false;
        break;
      }
    }
    losses[k] = loss;
    samples += (double)count;
    if (prof && ok && k >= start + 2) bench_profile_add(prof, kl_trainer_step_session(t), 0);
    if (log)
      fprintf(log, "{\"step\": %" PRId64 ", \"epoch\": %" PRId64 ", \"loss\": %.9g, \"lr\": "
              "%.9g, \"ms\": %.3f}\n", k + 1, e + 1, loss, lr, ms);
    if (tty) {
      double el = now_s() - t0, rate = samples / (el > 0 ? el : 1e-9);
      double eta = (double)(total - k - 1) * el / (double)(k - start + 1);
      fprintf(stderr, "\rstep %" PRId64 "/%" PRId64 "  loss %.4f  %.0f samples/s  ETA %.0fs   ",
              k + 1, total, loss, rate, eta);
    }
    bool epoch_end = in_epoch == per_epoch - 1 || k == total - 1;
    if (ok && epoch_end && have_eval) {
      double m;
      ok = evaluate(t, &ev, a.batch, classes, &m);
      if (ok && n_metric < 4096) metric[n_metric] = m, metric_step[n_metric++] = k + 1;
      if (ok) {
        printf("%sepoch %" PRId64 ": %s %.6f\n", tty ? "\n" : "", e + 1,
               classes ? "eval accuracy" : "eval mse", m);
        if (log)
          fprintf(log, "{\"step\": %" PRId64 ", \"epoch\": %" PRId64 ", \"%s\": %.9g}\n", k + 1,
                  e + 1, classes ? "eval_accuracy" : "eval_mse", m);
      }
    }
    if (ok && epoch_end && a.checkpoint && kiln_trainer_save_checkpoint(t, a.checkpoint) != KILN_OK) {
      fprintf(stderr, "kiln train: --checkpoint: %s\n", kiln_trainer_error(t));
      ok = false;
    }
  }
  if (ok) {
    double el = now_s() - t0;
    printf("%strained %" PRId64 " steps (%" PRId64 " skipped) in %.2f s, %.0f samples/s; "
           "last loss %.6f\n", tty ? "\n" : "", total - start, skipped, el,
           samples / (el > 0 ? el : 1e-9), total > 0 ? losses[total - 1] : NAN);
  }
  if (ok && prof) bench_profile_print(prof, stdout);
  bench_profile_free(prof);
  if (ok && a.curve)
    ok = write_curve(a.curve, losses + start, total - start, metric, metric_step, n_metric,
                     classes ? "eval accuracy" : "eval mse");
  if (ok && a.out) {
    if (kiln_trainer_save(t, a.out) != KILN_OK) {
      fprintf(stderr, "kiln train: -o: %s\n", kiln_trainer_error(t));
      ok = false;
    } else {
      printf("wrote %s\n", a.out);
    }
  }
  if (log) {
    bool bad = ferror(log);
    if (fclose(log) != 0 || bad) {
      fprintf(stderr, "kiln train: cannot write %s\n", a.log);
      ok = false;
    }
  }
  free(order);
  free(losses);
  dataset_free(&train);
  if (have_eval || ev.z.n) dataset_free(&ev);
  kiln_trainer_free(t);
  kiln_options_free(o);
  return ok ? EXIT_OK : EXIT_FAIL;
}
