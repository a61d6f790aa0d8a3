/* `kiln bench --profile`: time per node and per op type over the timed runs, and a
 * Chrome trace (chrome://tracing, Perfetto) of the first runs. */
#ifndef KL_BENCH_PROFILE_H
#define KL_BENCH_PROFILE_H

#include "runtime/runtime.h"

#include <stdbool.h>
#include <stdio.h>

typedef struct bench_profile bench_profile;

/* NULL when out of memory (message printed). */
bench_profile *bench_profile_new(const kiln_model *m);
void bench_profile_free(bench_profile *p);
/* Adds the timings of the run s just made, which started run_start_ms after the
 * benchmark began. */
void bench_profile_add(bench_profile *p, const kiln_session *s, double run_start_ms);
/* Tables: op types by time, then the slowest nodes. */
void bench_profile_print(bench_profile *p, FILE *out);
/* `"profile": {...}` for the --json object (no leading comma). */
void bench_profile_json(bench_profile *p, FILE *out);
/* The Chrome trace JSON; false (message printed) when the file cannot be written. */
bool bench_profile_write_trace(const bench_profile *p, const char *path);

#endif
