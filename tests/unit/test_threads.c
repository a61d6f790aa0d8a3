/* Threads: what include/kiln.h promises about sharing. One kiln_model shared by 8
 * threads, each with its own session, running thousands of inferences on different
 * inputs and batch sizes; every output must equal the single-thread result bit for bit.
 * Also 8 threads loading models at once (no shared state in the loader or the passes).
 * tools/test.sh runs this under ThreadSanitizer too. Runs from the source root.
 *
 * Worker threads never call cmocka (it is not thread-safe): they count mismatches and
 * keep the first message, and the main thread asserts on them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "import/tensorfile.h"
#include "kiln.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CNN "models/digits_cnn/model.onnx"
#define MLP "models/digits_mlp/model.onnx"
#define IMAGES "models/digits_data/heldout_images.npy"
#define N_THREADS 8
#define N_JOBS 1000
#define MAX_BATCH 8
#define N_CLASSES 10
#define IMAGE_FLOATS 64
_Static_assert(N_JOBS % N_THREADS == 0, "the threads share the jobs out evenly");

/* One inference: a batch of held-out images (a window of the 360), and its result. */
typedef struct job {
  int first, batch;
  float expected[MAX_BATCH * N_CLASSES];
} job;

typedef struct shared {
  const kiln_model *model;
  const float *images; /* [360, 1, 8, 8] */
  int n_images;
  job *jobs;
  pthread_barrier_t start;
} shared;

typedef struct worker {
  shared *sh;
  int index;
  int runs, mismatches;
  char error[512]; /* the first failure, "" if none */
} worker;

/* Batch sizes 1..MAX_BATCH in an order that changes from job to job, so that a session's
 * buffers are resized up and down while other threads run. */
static void plan_jobs(job *jobs, int n_images) {
  for (int j = 0; j < N_JOBS; j++) {
    jobs[j].batch = 1 + (j * 7 + j / MAX_BATCH) % MAX_BATCH;
    jobs[j].first = (j * 37) % (n_images - jobs[j].batch + 1);
  }
}

/* Run job j on s into out; returns a status and leaves the message in s. */
static kiln_status run_job(kiln_session *s, const shared *sh, const job *jb, float *out) {
  int64_t dims[4] = {jb->batch, 1, 8, 8};
  const float *x = sh->images + (size_t)jb->first * IMAGE_FLOATS;
  size_t bytes = (size_t)jb->batch * IMAGE_FLOATS * sizeof(float);
  kiln_status st = kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, dims, x, bytes);
  if (st == KILN_OK) st = kiln_session_run(s);
  kiln_tensor_info info;
  const void *data = NULL;
  if (st == KILN_OK) st = kiln_session_get_output(s, 0, &info, &data);
  if (st != KILN_OK) return st;
  if (info.rank != 2 || info.dims[0] != jb->batch || info.dims[1] != N_CLASSES)
    return KILN_ERR_SHAPE;
  memcpy(out, data, (size_t)jb->batch * N_CLASSES * sizeof(float));
  return KILN_OK;
}

/* Thread t takes the jobs j with j % N_THREADS == t, odd threads from the last one, and
 * goes over them twice so that a session's reused buffers are checked too. */
static void *worker_main(void *arg) {
  worker *w = arg;
  shared *sh = w->sh;
  kiln_session *s = NULL;
  kiln_status st = kiln_session_create(sh->model, NULL, &s);
  pthread_barrier_wait(&sh->start);
  int per_thread = N_JOBS / N_THREADS;
  for (int k = 0; st == KILN_OK && k < 2 * per_thread; k++) {
    int slot = k % per_thread;
    if (w->index % 2) slot = per_thread - 1 - slot;
    const job *jb = &sh->jobs[slot * N_THREADS + w->index];
    float got[MAX_BATCH * N_CLASSES];
    st = run_job(s, sh, jb, got);
    if (st != KILN_OK) break;
    w->runs++;
    if (memcmp(got, jb->expected, (size_t)jb->batch * N_CLASSES * sizeof(float)) != 0 &&
        w->mismatches++ == 0)
      snprintf(w->error, sizeof w->error, "thread %d: job %d (batch %d from image %d) "
               "differs from the single-thread result", w->index,
               (int)(jb - sh->jobs), jb->batch, jb->first);
  }
  if (st != KILN_OK)
    snprintf(w->error, sizeof w->error, "thread %d: %s: %s", w->index,
             kiln_status_string(st), kiln_session_error(s));
  kiln_session_free(s);
  return NULL;
}

static float *read_images(int *n) {
  kl_tensor t = {0};
  kl_err e = {0};
  if (kl_tensorfile_read(IMAGES, INT64_C(1) << 30, &t, NULL, &e) != KILN_OK)
    fail_msg("cannot read %s: %s", IMAGES, e.msg);
  assert_int_equal(t.dtype, KL_F32);
  assert_int_equal(t.rank, 4);
  assert_true(t.dims[0] >= MAX_BATCH && t.dims[1] * t.dims[2] * t.dims[3] == IMAGE_FLOATS);
  *n = (int)t.dims[0];
  return t.data;
}

/* Sessions inherit the model's options: one kernel thread each, as a server running a
 * session per request thread would set it (more would only oversubscribe the cores). */
static kiln_model *load(const char *path) {
  kiln_options *o = NULL;
  kiln_model *m = NULL;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "threads", 1), KILN_OK);
  kiln_status st = kiln_model_load(path, o, &m);
  kiln_options_free(o);
  if (st != KILN_OK) fail_msg("loading %s: %s", path, kiln_model_error(m));
  return m;
}

/* The single-thread results, from one session running the jobs in order. */
static void compute_expected(shared *sh) {
  kiln_session *s = NULL;
  if (kiln_session_create(sh->model, NULL, &s) != KILN_OK)
    fail_msg("session: %s", kiln_session_error(s));
  for (int j = 0; j < N_JOBS; j++)
    if (run_job(s, sh, &sh->jobs[j], sh->jobs[j].expected) != KILN_OK)
      fail_msg("job %d: %s", j, kiln_session_error(s));
  kiln_session_free(s);
}

static void test_shared_model(void **state) {
  (void)state;
  shared sh = {0};
  sh.images = read_images(&sh.n_images);
  kiln_model *m = load(CNN);
  sh.model = m;
  sh.jobs = calloc(N_JOBS, sizeof *sh.jobs);
  assert_non_null(sh.jobs);
  plan_jobs(sh.jobs, sh.n_images);
  compute_expected(&sh);
  /* the results must depend on the input, or equality would prove little */
  assert_true(memcmp(sh.jobs[0].expected, sh.jobs[1].expected, N_CLASSES * sizeof(float)));

  pthread_t tids[N_THREADS];
  worker ws[N_THREADS];
  assert_int_equal(pthread_barrier_init(&sh.start, NULL, N_THREADS), 0);
  for (int t = 0; t < N_THREADS; t++) {
    ws[t] = (worker){.sh = &sh, .index = t};
    assert_int_equal(pthread_create(&tids[t], NULL, worker_main, &ws[t]), 0);
  }
  int runs = 0;
  for (int t = 0; t < N_THREADS; t++) {
    assert_int_equal(pthread_join(tids[t], NULL), 0);
    if (ws[t].error[0]) fail_msg("%s (%d mismatches)", ws[t].error, ws[t].mismatches);
    runs += ws[t].runs;
  }
  assert_int_equal(runs, 2 * N_JOBS);
  pthread_barrier_destroy(&sh.start);
  kiln_model_free(m);
  free(sh.jobs);
  free((void *)sh.images);
}

/* ---- loading in parallel ---- */

typedef struct loader {
  const char *path;
  const float *image;
  float logits[N_CLASSES];
  char error[512];
} loader;

static void *loader_main(void *arg) {
  loader *l = arg;
  kiln_model *m = NULL;
  kiln_session *s = NULL;
  int64_t dims[4] = {1, 1, 8, 8};
  const void *out = NULL;
  kiln_status st = kiln_model_load(l->path, NULL, &m);
  if (st == KILN_OK) st = kiln_session_create(m, NULL, &s);
  if (st == KILN_OK)
    st = kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, dims, l->image,
                                IMAGE_FLOATS * sizeof(float));
  if (st == KILN_OK) st = kiln_session_run(s);
  if (st == KILN_OK) st = kiln_session_get_output(s, 0, NULL, &out);
  if (st == KILN_OK) memcpy(l->logits, out, sizeof l->logits);
  else
    snprintf(l->error, sizeof l->error, "%s: %s", l->path,
             s ? kiln_session_error(s) : kiln_model_error(m));
  kiln_session_free(s);
  kiln_model_free(m);
  return NULL;
}

/* 8 threads each load, optimize and run a model (two different ones, four times each);
 * each result equals the one of its model loaded alone. */
static void test_parallel_loads(void **state) {
  (void)state;
  int n_images;
  float *images = read_images(&n_images);
  loader alone[2] = {{.path = CNN, .image = images}, {.path = MLP, .image = images}};
  for (int k = 0; k < 2; k++) {
    loader_main(&alone[k]);
    if (alone[k].error[0]) fail_msg("%s", alone[k].error);
  }
  pthread_t tids[N_THREADS];
  loader ls[N_THREADS];
  for (int t = 0; t < N_THREADS; t++) {
    ls[t] = (loader){.path = alone[t % 2].path, .image = images};
    assert_int_equal(pthread_create(&tids[t], NULL, loader_main, &ls[t]), 0);
  }
  for (int t = 0; t < N_THREADS; t++) {
    assert_int_equal(pthread_join(tids[t], NULL), 0);
    if (ls[t].error[0]) fail_msg("thread %d: %s", t, ls[t].error);
    assert_memory_equal(ls[t].logits, alone[t % 2].logits, sizeof ls[t].logits);
  }
  free(images);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shared_model),
      cmocka_unit_test(test_parallel_loads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
