/* The trainer's C API (kiln_trainer_*): steps, bad input, a non-finite loss, frozen
 * weights, clipping, every optimizer, checkpoints that resume exactly, saving. The
 * step-by-step agreement with PyTorch is tests/run_train.py's (suite train). */
#include "export/onnx_export.h"
#include "import/npz.h"
#include "import/onnx.h"
#include "kiln.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#define MLP "models/train/mlp/model.onnx"
#define MLP_DATA "models/train/mlp/train.npz"

static kl_npz data;

static int setup(void **state) {
  (void)state;
  kl_err e = {0};
  if (kl_npz_read(MLP_DATA, INT64_C(1) << 30, INT64_C(1) << 30, &data, &e) != KILN_OK) {
    fprintf(stderr, "%s\n", e.msg);
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  kl_npz_free(&data);
  return 0;
}

/* Binds samples [from, from + n) of the digits as x and target. */
static kiln_status bind(kiln_trainer *t, int64_t from, int64_t n, const int64_t *target) {
  const kl_tensor *x = &data.arrays[kl_npz_find(&data, "x")];
  const kl_tensor *y = &data.arrays[kl_npz_find(&data, "target")];
  int64_t xd[2] = {n, 64}, yd[1] = {n};
  kiln_status st = kiln_trainer_set_input(t, "x", KILN_DTYPE_FLOAT32, 2, xd,
                                          (const float *)x->data + from * 64,
                                          (size_t)(n * 64) * sizeof(float));
  if (st != KILN_OK) return st;
  return kiln_trainer_set_input(t, "target", KILN_DTYPE_INT64, 1, yd,
                                target ? target : (const int64_t *)y->data + from,
                                (size_t)n * sizeof(int64_t));
}

static int bf16_mode;

static kiln_trainer *make(const char *opt, double lr, const char *frozen, double clip) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  if (bf16_mode) assert_int_equal(kiln_options_set_int(o, "bf16", 1), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "optimizer", opt), KILN_OK);
  if (lr > 0) assert_int_equal(kiln_options_set_float(o, "lr", lr), KILN_OK);
  if (frozen) assert_int_equal(kiln_options_set_string(o, "frozen", frozen), KILN_OK);
  if (clip > 0) assert_int_equal(kiln_options_set_float(o, "clip_norm", clip), KILN_OK);
  kiln_trainer *t = NULL;
  kiln_status st = kiln_trainer_create(MLP, o, &t);
  if (st != KILN_OK) fail_msg("create: %s", kiln_trainer_error(t));
  kiln_options_free(o);
  return t;
}

/* The model's logits on the first 16 samples, in inference form (malloc'd). */
static float *logits(kiln_trainer *t) {
  assert_int_equal(bind(t, 0, 16, NULL), KILN_OK);
  kiln_tensor_info info;
  const void *out;
  if (kiln_trainer_evaluate(t, &info, &out) != KILN_OK) fail_msg("%s", kiln_trainer_error(t));
  assert_int_equal(info.rank, 2);
  float *copy = malloc(160 * sizeof(float));
  memcpy(copy, out, 160 * sizeof(float));
  return copy;
}

/* The float32 initializers of an ONNX file, concatenated in file order. */
static float *weights_of(const char *path, const char *only, int64_t *count) {
  kl_graph *g = NULL;
  kl_err e = {0};
  if (kl_onnx_load_file(path, NULL, &g, &e) != KILN_OK) fail_msg("%s", e.msg);
  int64_t n = 0;
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == KL_VALUE_CONST && g->values[v].type.dtype == KL_F32 &&
        (!only || strcmp(g->values[v].name, only) == 0))
      n += (int64_t)(g->values[v].nbytes / 4);
  float *w = malloc(sizeof(float) * (size_t)(n ? n : 1));
  n = 0;
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == KL_VALUE_CONST && g->values[v].type.dtype == KL_F32 &&
        (!only || strcmp(g->values[v].name, only) == 0)) {
      memcpy(w + n, g->values[v].data, g->values[v].nbytes);
      n += (int64_t)(g->values[v].nbytes / 4);
    }
  kl_graph_free(g);
  *count = n;
  return w;
}

static void test_steps_every_optimizer(void **state) {
  (void)state;
  const char *opts[] = {"sgd", "adagrad", "adam", "adamw", "lamb", "lars"};
  const double lrs[] = {0.05, 0.05, 2e-3, 2e-3, 2e-2, 20};
  for (int k = 0; k < 6; k++) {
    kiln_trainer *t = make(opts[k], lrs[k], NULL, 0);
    double first = 0, last = 0, loss;
    for (int s = 0; s < 30; s++) {
      assert_int_equal(bind(t, (s % 10) * 64, 64, NULL), KILN_OK);
      if (kiln_trainer_step(t, &loss) != KILN_OK) fail_msg("%s: %s", opts[k], kiln_trainer_error(t));
      assert_true(isfinite(loss));
      if (s < 10) first += loss;
      if (s >= 20) last += loss;
    }
    assert_int_equal(kiln_trainer_steps(t), 30);
    /* the third pass over the same ten batches has a lower loss than the first */
    if (!(last < first * 0.8)) fail_msg("%s: loss %g over the first pass, %g the third",
                                        opts[k], first / 10, last / 10);
    kiln_trainer_free(t);
  }
}

static void test_bad_input(void **state) {
  (void)state;
  kiln_trainer *t = make("sgd", 0.1, NULL, 0);
  int64_t d2[2] = {4, 64}, d1[1] = {4};
  float x[256] = {0};
  int64_t y[4] = {1, 2, 3, 4};
  tu_assert_status(kiln_trainer_set_input(t, "nope", KILN_DTYPE_FLOAT32, 2, d2, x, sizeof x),
                   KILN_ERR_NOT_FOUND, kiln_trainer_error(t), "no input 'nope'");
  tu_assert_status(kiln_trainer_set_input(t, "target", KILN_DTYPE_FLOAT32, 1, d1, x, 16),
                   KILN_ERR_DTYPE, kiln_trainer_error(t), "expected int64");
  tu_assert_status(kiln_trainer_set_input(t, "x", KILN_DTYPE_FLOAT32, 2, (int64_t[]){4, 63}, x,
                                          4 * 63 * 4),
                   KILN_ERR_SHAPE, kiln_trainer_error(t), "expected shape");
  tu_assert_status(kiln_trainer_set_input(t, "fc2.weight", KILN_DTYPE_FLOAT32, 2, d2, x, sizeof x),
                   KILN_ERR_INVALID_ARGUMENT, kiln_trainer_error(t), "a trained weight");
  tu_assert_status(kiln_trainer_set_input(t, "bn.running_mean", KILN_DTYPE_FLOAT32, 1,
                                          (int64_t[]){64}, x, 256),
                   KILN_ERR_INVALID_ARGUMENT, kiln_trainer_error(t), "running statistic");
  /* a step without a target */
  assert_int_equal(kiln_trainer_set_input(t, "x", KILN_DTYPE_FLOAT32, 2, d2, x, sizeof x), KILN_OK);
  tu_assert_status(kiln_trainer_step(t, NULL), KILN_ERR_STATE, kiln_trainer_error(t),
                   "'target' was not set");
  /* a class index outside [0, 10): refused, the weights untouched */
  float *before = logits(t);
  int64_t bad[4] = {1, 2, 10, 4};
  assert_int_equal(bind(t, 0, 4, bad), KILN_OK);
  kiln_status st = kiln_trainer_step(t, NULL);
  assert_int_not_equal(st, KILN_OK);
  tu_assert_contains(kiln_trainer_error(t), "10");
  float *after = logits(t);
  assert_memory_equal(before, after, 160 * sizeof(float));
  assert_int_equal(kiln_trainer_steps(t), 0);
  /* a target of the wrong shape */
  int64_t y3[3] = {1, 2, 3};
  assert_int_equal(bind(t, 0, 4, y), KILN_OK);
  assert_int_equal(kiln_trainer_set_input(t, "target", KILN_DTYPE_INT64, 1, (int64_t[]){3}, y3,
                                          sizeof y3), KILN_OK);
  assert_int_not_equal(kiln_trainer_step(t, NULL), KILN_OK);
  free(before);
  free(after);
  kiln_trainer_free(t);
}

/* A NaN input makes the loss NaN: the step fails naming it and changes nothing. */
static void test_nonfinite_loss(void **state) {
  (void)state;
  kiln_trainer *t = make("adam", 1e-2, NULL, 0);
  double loss;
  assert_int_equal(bind(t, 0, 64, NULL), KILN_OK);
  assert_int_equal(kiln_trainer_step(t, &loss), KILN_OK);
  float *before = logits(t);
  float x[64 * 4];
  memcpy(x, ((const kl_tensor *)&data.arrays[kl_npz_find(&data, "x")])->data, sizeof x);
  x[5] = NAN;
  int64_t xd[2] = {4, 64}, yd[1] = {4}, y[4] = {0, 1, 2, 3};
  assert_int_equal(kiln_trainer_set_input(t, "x", KILN_DTYPE_FLOAT32, 2, xd, x, sizeof x), KILN_OK);
  assert_int_equal(kiln_trainer_set_input(t, "target", KILN_DTYPE_INT64, 1, yd, y, sizeof y), KILN_OK);
  tu_assert_status(kiln_trainer_step(t, &loss), KILN_ERR_STATE, kiln_trainer_error(t),
                   "step 2: the loss is nan");
  assert_true(isnan(loss));
  assert_int_equal(kiln_trainer_steps(t), 1);
  float *after = logits(t);
  assert_memory_equal(before, after, 160 * sizeof(float));
  /* and training goes on from there */
  assert_int_equal(bind(t, 64, 64, NULL), KILN_OK);
  assert_int_equal(kiln_trainer_step(t, &loss), KILN_OK);
  assert_int_equal(kiln_trainer_steps(t), 2);
  free(before);
  free(after);
  kiln_trainer_free(t);
}

static void test_frozen_and_save(void **state) {
  (void)state;
  kiln_trainer *t = make("sgd", 0.1, "fc2.weight,fc2.bias", 0);
  for (int s = 0; s < 3; s++) {
    assert_int_equal(bind(t, s * 64, 64, NULL), KILN_OK);
    assert_int_equal(kiln_trainer_step(t, NULL), KILN_OK);
  }
  char path[] = "/tmp/kiln_test_train_XXXXXX.onnx";
  int fd = mkstemps(path, 5);
  assert_true(fd >= 0);
  close(fd);
  if (kiln_trainer_save(t, path) != KILN_OK) fail_msg("%s", kiln_trainer_error(t));
  int64_t n0, n1;
  float *w0 = weights_of(MLP, "fc2.weight", &n0), *w1 = weights_of(path, "fc2.weight", &n1);
  assert_int_equal(n0, 640);
  assert_int_equal(n1, 640);
  assert_memory_equal(w0, w1, 640 * sizeof(float)); /* frozen */
  free(w0);
  free(w1);
  w0 = weights_of(MLP, "fc1.weight", &n0);
  w1 = weights_of(path, "fc1.weight", &n1);
  assert_int_equal(n0, n1);
  assert_true(memcmp(w0, w1, (size_t)n0 * sizeof(float)) != 0); /* trained */
  free(w0);
  free(w1);
  /* the saved model, loaded for inference, gives the trainer's evaluation */
  float *want = logits(t);
  kiln_model *m = NULL;
  kiln_session *s = NULL;
  assert_int_equal(kiln_model_load(path, NULL, &m), KILN_OK);
  assert_int_equal(kiln_session_create(m, NULL, &s), KILN_OK);
  const kl_tensor *x = &data.arrays[kl_npz_find(&data, "x")];
  assert_int_equal(kiln_session_set_input(s, "x", KILN_DTYPE_FLOAT32, 2, (int64_t[]){16, 64},
                                          x->data, 16 * 64 * 4), KILN_OK);
  assert_int_equal(kiln_session_run(s), KILN_OK);
  kiln_tensor_info info;
  const void *got;
  assert_int_equal(kiln_session_get_output(s, 0, &info, &got), KILN_OK);
  for (int i = 0; i < 160; i++)
    if (fabsf(((const float *)got)[i] - want[i]) > 1e-4f * (1 + fabsf(want[i])))
      fail_msg("logit %d: saved model %g, trainer %g", i, ((const float *)got)[i], want[i]);
  kiln_session_free(s);
  kiln_model_free(m);
  free(want);
  unlink(path);
  /* the trained weights, less the frozen ones */
  assert_int_equal(kiln_trainer_weight_count(t), 3);
  for (int i = 0; i < 3; i++) {
    const char *w = kiln_trainer_weight_name(t, i);
    assert_non_null(w);
    assert_true(strcmp(w, "fc2.weight") != 0 && strcmp(w, "fc2.bias") != 0);
  }
  assert_null(kiln_trainer_weight_name(t, 3));
  assert_null(kiln_trainer_weight_name(t, -1));
  /* a frozen name that is no weight */
  kiln_options *o;
  kiln_options_create(&o);
  kiln_options_set_string(o, "frozen", "fc9.weight");
  kiln_trainer *bad = NULL;
  kiln_status cst = kiln_trainer_create(MLP, o, &bad);
  tu_assert_status(cst, KILN_ERR_NOT_FOUND, kiln_trainer_error(bad), "no weight 'fc9.weight'");
  kiln_trainer_free(bad);
  kiln_options_free(o);
  kiln_trainer_free(t);
}

/* Clipping to a tiny global norm: plain SGD moves the weights by at most lr * max_norm. */
/* One AdamW step (weight decay 0.5) with option no_decay; the weights saved after it,
 * each malloc'd in w[0..3] (bn.bias, all zeros, is left out: decay does not move it). */
static const char *const mlp_weights[4] = {"fc1.weight", "bn.weight", "fc2.weight", "fc2.bias"};

static void one_decay_step(double decay, const char *no_decay, float **w, int64_t *n) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "optimizer", "adamw"), KILN_OK);
  assert_int_equal(kiln_options_set_float(o, "lr", 0.05), KILN_OK);
  assert_int_equal(kiln_options_set_float(o, "weight_decay", decay), KILN_OK);
  if (no_decay) assert_int_equal(kiln_options_set_string(o, "no_decay", no_decay), KILN_OK);
  kiln_trainer *t = NULL;
  if (kiln_trainer_create(MLP, o, &t) != KILN_OK) fail_msg("create: %s", kiln_trainer_error(t));
  kiln_options_free(o);
  assert_int_equal(bind(t, 0, 64, NULL), KILN_OK);
  assert_int_equal(kiln_trainer_step(t, NULL), KILN_OK);
  char path[] = "/tmp/kiln_test_decay_XXXXXX.onnx";
  int fd = mkstemps(path, 5);
  assert_true(fd >= 0);
  close(fd);
  if (kiln_trainer_save(t, path) != KILN_OK) fail_msg("%s", kiln_trainer_error(t));
  for (int i = 0; i < 4; i++) w[i] = weights_of(path, mlp_weights[i], &n[i]);
  unlink(path);
  kiln_trainer_free(t);
}

/* Option no_decay: the weights in its group take exactly the step of a run without
 * weight decay, the others that of a run with it ("auto": the biases; patterns). */
static void test_no_decay(void **state) {
  (void)state;
  float *with[4], *without[4], *got[4];
  int64_t n[4];
  one_decay_step(0.5, NULL, with, n);
  one_decay_step(0, NULL, without, n);
  static const struct {
    const char *list;
    bool in[4]; /* per weight: in the no-decay group */
  } cases[] = {
      {"auto", {false, true, false, true}},
      {"fc2.*", {false, false, true, true}},
      {"*.bias,fc1.w*", {true, false, false, true}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    one_decay_step(0.5, cases[c].list, got, n);
    for (int i = 0; i < 4; i++) {
      const float *want = cases[c].in[i] ? without[i] : with[i];
      const float *other = cases[c].in[i] ? with[i] : without[i];
      if (memcmp(got[i], want, (size_t)n[i] * sizeof(float)) != 0)
        fail_msg("no_decay \"%s\": %s is not the step %s weight decay", cases[c].list,
                 mlp_weights[i], cases[c].in[i] ? "without" : "with");
      assert_true(memcmp(got[i], other, (size_t)n[i] * sizeof(float)) != 0);
      free(got[i]);
    }
  }
  for (int i = 0; i < 4; i++) {
    free(with[i]);
    free(without[i]);
  }
  /* a pattern no trained weight matches is refused, naming it */
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_string(o, "no_decay", "fc2.bias,*.gamma"), KILN_OK);
  kiln_trainer *t = NULL;
  kiln_status st = kiln_trainer_create(MLP, o, &t);
  tu_assert_status(st, KILN_ERR_NOT_FOUND, kiln_trainer_error(t),
                   "option no_decay: no trained weight matches '*.gamma'");
  kiln_trainer_free(t);
  kiln_options_free(o);
}

static void test_clip_norm(void **state) {
  (void)state;
  kiln_options *o;
  kiln_options_create(&o);
  kiln_options_set_float(o, "lr", 0.5);
  kiln_options_set_float(o, "clip_norm", 1e-3);
  kiln_trainer *t = NULL;
  if (kiln_trainer_create(MLP, o, &t) != KILN_OK) fail_msg("%s", kiln_trainer_error(t));
  assert_int_equal(bind(t, 0, 64, NULL), KILN_OK);
  assert_int_equal(kiln_trainer_step(t, NULL), KILN_OK);
  char path[] = "/tmp/kiln_test_clip_XXXXXX.onnx";
  int fd = mkstemps(path, 5);
  close(fd);
  assert_int_equal(kiln_trainer_save(t, path), KILN_OK);
  /* the trained weights: fc1.weight, bn.weight, bn.bias, fc2.weight, fc2.bias */
  const char *names[] = {"fc1.weight", "bn.weight", "bn.bias", "fc2.weight", "fc2.bias"};
  double moved = 0;
  for (int k = 0; k < 5; k++) {
    int64_t n0, n1;
    float *w0 = weights_of(MLP, names[k], &n0), *w1 = weights_of(path, names[k], &n1);
    assert_int_equal(n0, n1);
    for (int64_t i = 0; i < n0; i++) moved += ((double)w1[i] - w0[i]) * ((double)w1[i] - w0[i]);
    free(w0);
    free(w1);
  }
  moved = sqrt(moved);
  if (!(moved > 0.4e-3 && moved <= 0.5e-3 * 1.001))
    fail_msg("the weights moved by %g; with lr 0.5 and clip_norm 1e-3, expected at most 5e-4 "
             "(and about that: the gradient's norm is far above 1e-3)", moved);
  unlink(path);
  kiln_trainer_free(t);
  kiln_options_free(o);
}

/* Issue 20, round 4 (class 5 and class 1): the manifest is written as the arrays are,
 * replacing a link planted where it goes rather than writing through it (fopen "w"
 * overwrote the link's target), and a FIFO there is refused when loading, not waited on
 * (fopen "r" blocked forever) and replaced when saving. */
static void test_checkpoint_manifest_planted(void **state) {
  (void)state;
  char dir[] = "/tmp/kiln_test_ckpt_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char victim[600], manifest[600];
  snprintf(victim, sizeof victim, "%s/victim.txt", dir);
  snprintf(manifest, sizeof manifest, "%s/ck/checkpoint.json", dir);
  FILE *f = fopen(victim, "w");
  assert_non_null(f);
  fputs("victim\n", f);
  fclose(f);
  char ck[600];
  snprintf(ck, sizeof ck, "%s/ck", dir);
  assert_int_equal(mkdir(ck, 0777), 0);
  assert_int_equal(symlink("../victim.txt", manifest), 0);
  kiln_trainer *a = make("sgd", 0.1, NULL, 0);
  assert_int_equal(bind(a, 0, 64, NULL), KILN_OK);
  assert_int_equal(kiln_trainer_step(a, NULL), KILN_OK);
  if (kiln_trainer_save_checkpoint(a, ck) != KILN_OK) fail_msg("%s", kiln_trainer_error(a));
  char text[64] = "";
  f = fopen(victim, "r");
  assert_non_null(f);
  assert_non_null(fgets(text, sizeof text, f));
  fclose(f);
  assert_string_equal(text, "victim\n");
  struct stat st;
  assert_int_equal(lstat(manifest, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  /* a FIFO where the manifest is: refused at once when loading, replaced when saving */
  assert_int_equal(unlink(manifest), 0);
  assert_int_equal(mkfifo(manifest, 0600), 0);
  kiln_trainer *b = make("sgd", 0.1, NULL, 0);
  tu_assert_status(kiln_trainer_load_checkpoint(b, ck), KILN_ERR_IO, kiln_trainer_error(b),
                   "not a regular file");
  if (kiln_trainer_save_checkpoint(a, ck) != KILN_OK) fail_msg("%s", kiln_trainer_error(a));
  assert_int_equal(lstat(manifest, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  if (kiln_trainer_load_checkpoint(b, ck) != KILN_OK) fail_msg("%s", kiln_trainer_error(b));
  assert_int_equal(kiln_trainer_steps(b), 1);
  /* round 7: a link in the folder to a valid manifest outside it is refused, not read
   * (the folder named is all a resume reads) */
  char outside[600];
  snprintf(outside, sizeof outside, "%s/outside.json", dir);
  assert_int_equal(rename(manifest, outside), 0);
  assert_int_equal(symlink("../outside.json", manifest), 0);
  tu_assert_status(kiln_trainer_load_checkpoint(b, ck), KILN_ERR_INVALID_ARGUMENT,
                   kiln_trainer_error(b), "checkpoint.json is a symbolic link");
  kiln_trainer_free(a);
  kiln_trainer_free(b);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* A checkpoint after 3 steps, resumed in a new trainer, continues exactly. */
static void test_checkpoint_resumes(void **state) {
  (void)state;
  char dir[] = "/tmp/kiln_test_ckpt_XXXXXX";
  assert_non_null(mkdtemp(dir));
  kiln_trainer *a = make("adamw", 1e-2, NULL, 0);
  for (int s = 0; s < 3; s++) {
    assert_int_equal(bind(a, s * 64, 64, NULL), KILN_OK);
    assert_int_equal(kiln_trainer_step(a, NULL), KILN_OK);
  }
  if (kiln_trainer_save_checkpoint(a, dir) != KILN_OK) fail_msg("%s", kiln_trainer_error(a));
  double la[2], lb[2];
  for (int s = 3; s < 5; s++) {
    assert_int_equal(bind(a, s * 64, 64, NULL), KILN_OK);
    assert_int_equal(kiln_trainer_step(a, &la[s - 3]), KILN_OK);
  }
  float *wa = logits(a);
  kiln_trainer *b = make("adamw", 1e-2, NULL, 0);
  if (kiln_trainer_load_checkpoint(b, dir) != KILN_OK) fail_msg("%s", kiln_trainer_error(b));
  assert_int_equal(kiln_trainer_steps(b), 3);
  for (int s = 3; s < 5; s++) {
    assert_int_equal(bind(b, s * 64, 64, NULL), KILN_OK);
    assert_int_equal(kiln_trainer_step(b, &lb[s - 3]), KILN_OK);
  }
  float *wb = logits(b);
  assert_memory_equal(la, lb, sizeof la);
  assert_memory_equal(wa, wb, 160 * sizeof(float));
  /* another optimizer's trainer refuses it */
  kiln_trainer *c = make("sgd", 0.1, NULL, 0);
  tu_assert_status(kiln_trainer_load_checkpoint(c, dir), KILN_ERR_INVALID_ARGUMENT,
                   kiln_trainer_error(c), "another optimizer");
  /* a truncated array is refused, the trainer unchanged */
  char path[512];
  snprintf(path, sizeof path, "%s/param0.value.npy", dir);
  FILE *f = fopen(path, "r+");
  assert_non_null(f);
  assert_int_equal(ftruncate(fileno(f), 100), 0);
  fclose(f);
  kiln_trainer *d = make("adamw", 1e-2, NULL, 0);
  float *w0 = logits(d);
  assert_int_not_equal(kiln_trainer_load_checkpoint(d, dir), KILN_OK);
  float *w1 = logits(d);
  assert_memory_equal(w0, w1, 160 * sizeof(float));
  assert_int_equal(kiln_trainer_steps(d), 0);
  free(w0);
  free(w1);
  free(wa);
  free(wb);
  kiln_trainer_free(a);
  kiln_trainer_free(b);
  kiln_trainer_free(c);
  kiln_trainer_free(d);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

static void test_options(void **state) {
  (void)state;
  kiln_options *o;
  kiln_options_create(&o);
  tu_assert_status(kiln_options_set_string(o, "loss", "hinge"), KILN_ERR_INVALID_ARGUMENT,
                   kiln_options_error(o), "expected cross_entropy, nll");
  tu_assert_status(kiln_options_set_string(o, "optimizer", "rmsprop"), KILN_ERR_INVALID_ARGUMENT,
                   kiln_options_error(o), "sgd, adagrad");
  tu_assert_status(kiln_options_set_float(o, "lr", -1), KILN_ERR_INVALID_ARGUMENT,
                   kiln_options_error(o), "out of range");
  tu_assert_status(kiln_options_set_float(o, "lr", NAN), KILN_ERR_INVALID_ARGUMENT,
                   kiln_options_error(o), "out of range");
  tu_assert_status(kiln_options_set_float(o, "beta1", 1.0), KILN_ERR_INVALID_ARGUMENT,
                   kiln_options_error(o), "[0, 1)");
  tu_assert_status(kiln_options_set_string(o, "reduction", "none"), KILN_ERR_INVALID_ARGUMENT,
                   kiln_options_error(o), "mean or sum");
  tu_assert_status(kiln_options_set_float(o, "speed", 1.0), KILN_ERR_INVALID_ARGUMENT,
                   kiln_options_error(o), "no float option 'speed'");
  /* Nesterov without momentum, as PyTorch refuses it */
  kiln_options_set_int(o, "nesterov", 1);
  kiln_trainer *t = NULL;
  kiln_status cst = kiln_trainer_create(MLP, o, &t);
  tu_assert_status(cst, KILN_ERR_INVALID_ARGUMENT, kiln_trainer_error(t), "Nesterov");
  kiln_trainer_free(t);
  t = make("sgd", 0.1, NULL, 0);
  tu_assert_status(kiln_trainer_set_lr(t, -0.5), KILN_ERR_INVALID_ARGUMENT, kiln_trainer_error(t),
                   "learning rate");
  assert_int_equal(kiln_trainer_set_lr(t, 0.25), KILN_OK);
  assert_true(kiln_trainer_lr(t) == 0.25);
  kiln_trainer_free(t);
  cst = kiln_trainer_create("/nonexistent/model.onnx", NULL, &t);
  tu_assert_status(cst, KILN_ERR_IO, kiln_trainer_error(t), "/nonexistent/model.onnx");
  kiln_trainer_free(t);
  kiln_options_free(o);
  assert_int_equal(kiln_trainer_step(NULL, NULL), KILN_ERR_INVALID_ARGUMENT);
}

/* reduction sum: the batch's loss summed; plain SGD at lr / batch then takes the step
 * that mean takes at lr. */
static void test_reduction_sum(void **state) {
  (void)state;
  double loss[2][2];
  for (int k = 0; k < 2; k++) {
    kiln_options *o;
    kiln_options_create(&o);
    kiln_options_set_float(o, "lr", k ? 0.1 / 64 : 0.1);
    if (k) kiln_options_set_string(o, "reduction", "sum");
    kiln_trainer *t = NULL;
    if (kiln_trainer_create(MLP, o, &t) != KILN_OK) fail_msg("%s", kiln_trainer_error(t));
    for (int s = 0; s < 2; s++) {
      assert_int_equal(bind(t, s * 64, 64, NULL), KILN_OK);
      assert_int_equal(kiln_trainer_step(t, &loss[k][s]), KILN_OK);
    }
    kiln_trainer_free(t);
    kiln_options_free(o);
  }
  for (int s = 0; s < 2; s++)
    if (fabs(loss[1][s] / 64 - loss[0][s]) > 1e-5 * loss[0][s])
      fail_msg("step %d: sum %g / 64, mean %g", s + 1, loss[1][s], loss[0][s]);
}

/* A model with an op that has no gradient rule between a weight and the output. */
static void test_untrainable_op(void **state) {
  (void)state;
  kl_graph *g = tu_graph_new();
  int x = tu_graph_input(g, "x", KL_F32, 2, (const int64_t[]){-1, 4});
  float w[16];
  for (int i = 0; i < 16; i++) w[i] = (float)i / 16;
  int wv = tu_graph_const(g, "w", KL_F32, 2, (const int64_t[]){4, 4}, w);
  int y = TU_OP(g, CumSum, TU_OP(g, MatMul, x, wv), tu_graph_const(g, NULL, KL_I64, 0, NULL,
                                                                 (const int64_t[]){1}));
  kl_graph_add_output(g, y, NULL);
  g->values[x].type.dims[0] = (kl_dim){-1, kl_graph_symbol(g, "batch")};
  char path[] = "/tmp/kiln_test_untrainable_XXXXXX.onnx";
  int fd = mkstemps(path, 5);
  close(fd);
  kl_err e = {0};
  if (kl_onnx_export_file(g, path, &e) != KILN_OK) fail_msg("%s", e.msg);
  kl_graph_free(g);
  kiln_trainer *t = NULL;
  kiln_status cst = kiln_trainer_create(path, NULL, &t);
  tu_assert_status(cst, KILN_ERR_UNSUPPORTED, kiln_trainer_error(t), "no gradient rule for op CumSum");
  kiln_trainer_free(t);
  unlink(path);
}

/* x [batch, 5, 4] -> Transpose -> LSTM or GRU (hidden 3, weights w, r, b) -> Y_h
 * squeezed to [batch, 3]: written to an ONNX file at path. direction as given. */
static void write_recurrent(const char *path, kl_op op, const char *direction, bool clip) {
  kl_graph *g = tu_graph_new();
  int gates = op == KL_OP_LSTM ? 4 : 3, dirs = strcmp(direction, "bidirectional") ? 1 : 2;
  int x = tu_graph_input(g, "x", KL_F32, 3, (const int64_t[]){-1, 5, 4});
  g->values[x].type.dims[0] = (kl_dim){-1, kl_graph_symbol(g, "batch")};
  float data[2 * 24 * 4];
  uint32_t rng = 5;
  for (int i = 0; i < 2 * 24 * 4; i++) data[i] = tu_rand_f32(&rng, -0.5f, 0.5f);
  int w = tu_graph_const(g, "w", KL_F32, 3, (const int64_t[]){dirs, gates * 3, 4}, data);
  int r = tu_graph_const(g, "r", KL_F32, 3, (const int64_t[]){dirs, gates * 3, 3}, data + 7);
  int b = tu_graph_const(g, "b", KL_F32, 2, (const int64_t[]){dirs, gates * 6}, data + 3);
  int t = TU_OP(g, Transpose, x);
  assert_int_equal(kl_node_set_ints(g, g->n_nodes - 1, "perm", (const int64_t[]){1, 0, 2}, 3,
                                    NULL), KILN_OK);
  int out[2] = {tu_graph_value(g, NULL), tu_graph_value(g, "h")};
  int n = tu_graph_node(g, op, "rec", 4, (const int[]){t, w, r, b}, 2, out);
  assert_int_equal(kl_node_set_int(g, n, "hidden_size", 3, NULL), KILN_OK);
  assert_int_equal(kl_node_set_string(g, n, "direction", direction, NULL), KILN_OK);
  if (op == KL_OP_GRU) assert_int_equal(kl_node_set_int(g, n, "linear_before_reset", 1, NULL), KILN_OK);
  if (clip) assert_int_equal(kl_node_set_float(g, n, "clip", 3.0f, NULL), KILN_OK);
  int y = TU_OP(g, Reshape, out[1], tu_graph_const(g, NULL, KL_I64, 1, (const int64_t[]){2},
                                                   (const int64_t[]){-1, 3 * dirs}));
  kl_graph_add_output(g, y, NULL);
  kl_err e = {0};
  if (kl_onnx_export_file(g, path, &e) != KILN_OK) fail_msg("%s", e.msg);
  kl_graph_free(g);
}

/* LSTM and GRU models train, forward, reverse and bidirectional (their weights get
 * gradients through kiln.LSTMGrad and kiln.GRUGrad; test_grad_ops checks those against
 * finite differences); a form their rules do not cover is refused at trainer creation,
 * naming the node. */
static void test_recurrent(void **state) {
  (void)state;
  char path[] = "/tmp/kiln_test_recurrent_XXXXXX.onnx";
  int fd = mkstemps(path, 5);
  close(fd);
  float x[16 * 20], target[16 * 6];
  uint32_t rng = 9;
  for (int i = 0; i < 16 * 20; i++) x[i] = tu_rand_f32(&rng, -1, 1);
  const kl_op ops[2] = {KL_OP_LSTM, KL_OP_GRU};
  const char *const dirs[3] = {"forward", "reverse", "bidirectional"};
  for (int k = 0; k < 6; k++) {
    int64_t width = k % 3 == 2 ? 6 : 3; /* Y_h [dirs, batch, 3] as [batch, 3 dirs] */
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < width; j++)
        target[i * width + j] = 0.5f * x[i * 20 + 19 - j % 3] - 0.2f * (float)j;
    write_recurrent(path, ops[k / 3], dirs[k % 3], false);
    kiln_options *o;
    assert_int_equal(kiln_options_create(&o), KILN_OK);
    kiln_options_set_string(o, "loss", "mse");
    kiln_options_set_string(o, "optimizer", "adam");
    kiln_options_set_float(o, "lr", 0.05);
    kiln_trainer *t = NULL;
    if (kiln_trainer_create(path, o, &t) != KILN_OK) fail_msg("%s", kiln_trainer_error(t));
    assert_int_equal(kiln_trainer_weight_count(t), 3);
    double first = 0, loss = 0;
    for (int s = 0; s < 40; s++) {
      assert_int_equal(kiln_trainer_set_input(t, "x", KILN_DTYPE_FLOAT32, 3,
                                              (const int64_t[]){16, 5, 4}, x, sizeof x), KILN_OK);
      assert_int_equal(kiln_trainer_set_input(t, "target", KILN_DTYPE_FLOAT32, 2,
                                              (const int64_t[]){16, width}, target,
                                              (size_t)(16 * width) * sizeof(float)),
                       KILN_OK);
      if (kiln_trainer_step(t, &loss) != KILN_OK) fail_msg("%s", kiln_trainer_error(t));
      if (s == 0) first = loss;
    }
    if (!(loss < 0.3 * first)) fail_msg("%s %s: loss %g after 40 steps, %g at the first",
                                         kl_op_name(ops[k / 3]), dirs[k % 3], loss, first);
    kiln_trainer_free(t);
    write_recurrent(path, ops[k / 3], dirs[k % 3], true);
    kiln_status cst = kiln_trainer_create(path, o, &t); /* before the message is read */
    tu_assert_status(cst, KILN_ERR_UNSUPPORTED, kiln_trainer_error(t), "this node has a clip");
    tu_assert_contains(kiln_trainer_error(t), "rec");
    kiln_trainer_free(t);
    kiln_options_free(o);
  }
  unlink(path);
}

/* bf16 training with split weights, for every optimizer: the FP32 master saved exactly
 * (split then join is exact), training close to float32's, checkpoints resuming
 * exactly, and a bf16 half refused as an input. */
static void test_bf16(void **state) {
  (void)state;
  const char *opts[] = {"sgd", "adagrad", "adam", "adamw", "lamb", "lars"};
  const double lrs[] = {0.05, 0.05, 2e-3, 2e-3, 2e-2, 20};
  for (int k = 0; k < 6; k++) {
    double loss32[20], loss16[20];
    for (int mode = 0; mode < 2; mode++) {
      bf16_mode = mode;
      kiln_trainer *t = make(opts[k], lrs[k], NULL, 0);
      if (mode == 1 && k == 0) { /* before any step: the saved master is the model's */
        char path[] = "/tmp/kiln_test_bf16_XXXXXX.onnx";
        int fd = mkstemps(path, 5);
        close(fd);
        assert_int_equal(kiln_trainer_save(t, path), KILN_OK);
        int64_t n0, n1;
        float *w0 = weights_of(MLP, "fc1.weight", &n0), *w1 = weights_of(path, "fc1.weight", &n1);
        assert_int_equal(n0, n1);
        assert_memory_equal(w0, w1, (size_t)n0 * sizeof(float));
        free(w0);
        free(w1);
        unlink(path);
        int64_t d[2] = {64, 64};
        float x[64];
        tu_assert_status(kiln_trainer_set_input(t, "fc1.weight.bf16", KILN_DTYPE_BFLOAT16, 2, d,
                                                x, 64 * 64 * 2),
                         KILN_ERR_INVALID_ARGUMENT, kiln_trainer_error(t), "half of a trained");
      }
      for (int s = 0; s < 20; s++) {
        assert_int_equal(bind(t, (s % 10) * 64, 64, NULL), KILN_OK);
        double *l = mode ? &loss16[s] : &loss32[s];
        if (kiln_trainer_step(t, l) != KILN_OK) fail_msg("%s: %s", opts[k], kiln_trainer_error(t));
      }
      kiln_trainer_free(t);
    }
    for (int s = 0; s < 20; s++)
      if (fabs(loss16[s] - loss32[s]) > 0.05 * loss32[s] + 0.01)
        fail_msg("%s step %d: bf16 loss %g, float32 %g", opts[k], s + 1, loss16[s], loss32[s]);
    assert_true(loss16[19] < loss16[0] * 0.7);
  }
  /* a checkpoint of split weights resumes exactly */
  bf16_mode = 1;
  char dir[] = "/tmp/kiln_test_bf16ck_XXXXXX";
  assert_non_null(mkdtemp(dir));
  kiln_trainer *a = make("sgd", 0.05, NULL, 0), *b = make("sgd", 0.05, NULL, 0);
  for (int s = 0; s < 2; s++) {
    assert_int_equal(bind(a, s * 64, 64, NULL), KILN_OK);
    assert_int_equal(kiln_trainer_step(a, NULL), KILN_OK);
  }
  assert_int_equal(kiln_trainer_save_checkpoint(a, dir), KILN_OK);
  if (kiln_trainer_load_checkpoint(b, dir) != KILN_OK) fail_msg("%s", kiln_trainer_error(b));
  double la, lb;
  assert_int_equal(bind(a, 128, 64, NULL), KILN_OK);
  assert_int_equal(kiln_trainer_step(a, &la), KILN_OK);
  assert_int_equal(bind(b, 128, 64, NULL), KILN_OK);
  assert_int_equal(kiln_trainer_step(b, &lb), KILN_OK);
  assert_memory_equal(&la, &lb, sizeof la);
  kiln_trainer_free(a);
  kiln_trainer_free(b);
  bf16_mode = 0;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_steps_every_optimizer), cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_nonfinite_loss),        cmocka_unit_test(test_frozen_and_save),
      cmocka_unit_test(test_clip_norm),             cmocka_unit_test(test_checkpoint_resumes),
      cmocka_unit_test(test_checkpoint_manifest_planted),
      cmocka_unit_test(test_no_decay),
      cmocka_unit_test(test_options),               cmocka_unit_test(test_untrainable_op),
      cmocka_unit_test(test_recurrent),             cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_reduction_sum),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
