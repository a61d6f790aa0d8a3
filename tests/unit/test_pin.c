/* pin_threads: a session's runs pin the threads that run them, thread t of the OpenMP
 * team (the calling thread is 0) to the t-th CPU the process may use; asking for more
 * threads than there are such CPUs fails at session creation, saying so. Its own
 * program, since pinning the calling thread lasts past the session. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/cpu_backend.h"
#include "kiln.h"
#include "kl_config.h"
#include "testutil.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#if KL_HAVE_OPENMP
#include <omp.h>
#endif

#define MLP "models/digits_mlp/model.onnx"

static cpu_set_t allowed; /* the process's CPUs, before anything was pinned */
static int cpus[CPU_SETSIZE], n_cpus;

static int setup(void **state) {
  (void)state;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &allowed)) cpus[n_cpus++] = c;
  return n_cpus > 0 ? 0 : -1;
}

static kiln_options *pin_options(int threads) {
  kiln_options *o;
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "threads", threads), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "pin_threads", 1), KILN_OK);
  return o;
}

/* One run of the digits MLP on a constant image. */
static void run_once(kiln_session *s) {
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = (float)(i % 7) * 0.25f;
  int64_t dims[4] = {1, 1, 8, 8};
  assert_int_equal(kiln_session_set_input(s, "input", KILN_DTYPE_FLOAT32, 4, dims, x, sizeof x),
                   KILN_OK);
  tu_assert_status(kiln_session_run(s), KILN_OK, kiln_session_error(s), NULL);
}

/* The calling thread's CPUs are exactly {cpu}. */
static bool pinned_to(int cpu) {
  cpu_set_t now;
  if (sched_getaffinity(0, sizeof now, &now) != 0) return false;
  return CPU_COUNT(&now) == 1 && CPU_ISSET(cpu, &now);
}

static void test_pins_each_thread(void **state) {
  (void)state;
  kiln_model *m = NULL;
  assert_int_equal(kiln_model_load(MLP, NULL, &m), KILN_OK);
  int threads = n_cpus >= 2 ? 2 : 1;
  kiln_options *o = pin_options(threads);
  kiln_session *s = NULL;
  kiln_status cst = kiln_session_create(m, o, &s); /* before the message is read */
  tu_assert_status(cst, KILN_OK, kiln_session_error(s), NULL);
  run_once(s);
  assert_true(pinned_to(cpus[0]));
#if KL_HAVE_OPENMP
  /* the same team again: each of its threads runs on its own CPU */
  int ok = 0;
#pragma omp parallel num_threads(threads) reduction(+ : ok)
  ok += pinned_to(cpus[omp_get_thread_num()]);
  assert_int_equal(ok, threads);
#endif
  run_once(s); /* pinned once; later runs go on as they are */
  assert_true(pinned_to(cpus[0]));
  kiln_session_free(s);
  kiln_options_free(o);
#if KL_HAVE_OPENMP
  /* "one thread per core" still means the process's cores from the pinned thread */
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "threads", 0), KILN_OK);
  cst = kiln_session_create(m, o, &s); /* before the message is read */
  tu_assert_status(cst, KILN_OK, kiln_session_error(s), NULL);
  run_once(s);
  assert_int_equal(omp_get_max_threads(), n_cpus);
  kiln_session_free(s);
  kiln_options_free(o);
#endif
  kiln_model_free(m);
  assert_int_equal(sched_setaffinity(0, sizeof allowed, &allowed), 0);
}

static void test_too_many_threads(void **state) {
  (void)state;
  kiln_model *m = NULL;
  assert_int_equal(kiln_model_load(MLP, NULL, &m), KILN_OK);
  kiln_options *o = pin_options(n_cpus + 1);
  kiln_session *s = NULL;
  kiln_status st = kiln_session_create(m, o, &s);
#if KL_HAVE_OPENMP
  tu_assert_status(st, KILN_ERR_INVALID_ARGUMENT, kiln_session_error(s),
                   "cannot each have a core of their own");
#else /* one thread runs everything: one CPU is enough */
  tu_assert_status(st, KILN_OK, kiln_session_error(s), NULL);
#endif
  kiln_session_free(s);
  kiln_options_free(o);
  kiln_model_free(m);
  /* only 0 and 1 are settings */
  assert_int_equal(kiln_options_create(&o), KILN_OK);
  assert_int_equal(kiln_options_set_int(o, "pin_threads", 2), KILN_ERR_INVALID_ARGUMENT);
  assert_int_equal(kiln_options_set_int(o, "pin_threads", -1), KILN_ERR_INVALID_ARGUMENT);
  kiln_options_free(o);
}

/* More threads than CPUs are started once per process to see that the system allows
 * them; a later session asking for no more is not probed again. */
static void test_threads_probed_once(void **state) {
  (void)state;
  kiln_model *m = NULL;
  assert_int_equal(kiln_model_load(MLP, NULL, &m), KILN_OK);
  int before = kl_cpu_threads_probes();
  for (int k = 0; k < 3; k++) {
    kiln_options *o;
    assert_int_equal(kiln_options_create(&o), KILN_OK);
    assert_int_equal(kiln_options_set_int(o, "threads", n_cpus + 3 - k), KILN_OK);
    kiln_session *s = NULL;
    kiln_status cst = kiln_session_create(m, o, &s); /* before the message is read */
    tu_assert_status(cst, KILN_OK, kiln_session_error(s), NULL);
    run_once(s);
    kiln_session_free(s);
    kiln_options_free(o);
  }
#if KL_HAVE_OPENMP
  assert_int_equal(kl_cpu_threads_probes() - before, 1);
#else
  assert_int_equal(kl_cpu_threads_probes() - before, 0);
#endif
  kiln_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pins_each_thread),
      cmocka_unit_test(test_too_many_threads),
      cmocka_unit_test(test_threads_probed_once),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
