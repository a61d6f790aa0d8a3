/* Internal views of a session for kiln's own tools and tests (`kiln bench --profile`,
 * `kiln inspect --memory`): the kernels chosen, the memory plan, per-node timings.
 * Pointers returned stay valid until the next kiln_session_run or kiln_session_free. */
#ifndef KL_SESSION_H
#define KL_SESSION_H

#include "backends/gpu/alloc.h"
#include "runtime/memplan.h"
#include "runtime/runtime.h"

/* Time every node of the following runs (a clock read before and after each). */
void kl_session_set_profiling(kiln_session *s, bool on);
/* The last run's timings when profiling was on: per node, its start in milliseconds
 * from the start of the run and its duration; false when there are none. */
bool kl_session_timings(const kiln_session *s, const double **start_ms, const double **ms);
/* The name of the kernel that ran node i in the last run ("ref", "dnnl_conv", ...),
 * or "view" for a node whose output was a view of its input. */
const char *kl_session_kernel_name(const kiln_session *s, int node);
/* Whether the session's device computes convolutions and matrix products in TF32
 * (option "precision" auto or tf32 on a GPU with tensor cores). */
bool kl_session_tf32(const kiln_session *s);
/* Where node i runs: "cpu", or the device backend's name ("opencl"). */
const char *kl_session_node_device(const kiln_session *s, int node);
/* What a session with a device placed there (option "device"). */
typedef struct kl_session_devices {
  const char *name;   /* the device */
  const char *origin; /* how its kernels came (built from source, from the cache) */
  int device_nodes;   /* nodes placed on it */
  int uploads, downloads; /* values copied to it and from it in every run */
  size_t arena_bytes;     /* the session's planned device arena (0 before a plan) */
  int fallbacks;          /* device tensors of the last run outside the arena */
  kl_dev_alloc_stats alloc;  /* the session's caching allocator on it, now */
  kl_dev_alloc_stats shared; /* the device's, shared by the model's sessions: weights */
} kl_session_devices;
/* false when the session has no device (then *out is zeroed). */
bool kl_session_placement(const kiln_session *s, kl_session_devices *out);
/* Whether value v is copied at a device boundary in every run, and which way. */
bool kl_session_value_copy(const kiln_session *s, int v, bool *to_device);
/* oneDNN's implementation of node i in the last run (kl_cpu_plan_impl), or NULL. */
const char *kl_session_kernel_impl(const kiln_session *s, int node);
/* The slow path node i took in the last run (kl_cpu_plan_slow_path), or NULL. */
const char *kl_session_slow_path(const kiln_session *s, int node);
/* The memory plan of the last run when it was made from that run's sizes, else NULL
 * (before the first run, or while the session plans a new shape). */
const kl_memplan *kl_session_memplan(const kiln_session *s);
/* The concrete type of value v in the last run (rank -1 if it was not made). */
const kl_type *kl_session_value_type(const kiln_session *s, int v);
/* Heap allocations the last run needed because a tensor did not fit the plan. */
int kl_session_fallback_count(const kiln_session *s);
/* Bytes the kernels hold besides the tensors (kl_cpu_plan_held_bytes). */
/* Precision bf16: the activations its CPU plan holds in bf16 (kl_cpu_plan_bf16_values). */
int kl_session_bf16_values(const kiln_session *s);
/* Tests, before the first run: kl_cpu_plan_bf16_unhold. */
void kl_session_bf16_unhold(kiln_session *s);
size_t kl_session_held_bytes(const kiln_session *s);
/* Tests: from now on every node finds oneDNN's workspace filled with NaNs, so that a
 * node depending on what another left there (or on padding it did not write) fails. */
void kl_session_poison_workspace(kiln_session *s);

/* Value t as input `index` of s (control.c's bodies): a tensor as kiln_session_set_input
 * takes it, a sequence's block or an optional's none as it is. */
kiln_status kl_session_bind_value(kiln_session *s, int index, const kl_tensor *t);
/* Output k of the last run as the session holds it (a sequence: its block). */
const kl_tensor *kl_session_output_value(const kiln_session *s, int k);
/* The model the session runs. */
const kiln_model *kl_session_model(const kiln_session *s);
/* The steps its last run's nodes took by kl_node_work's estimates (0 when the session
 * has no max_work, which is when nothing counts them). */
double kl_session_run_work(const kiln_session *s);
/* Node i's steps in the last run by kl_node_work (0 when it did not run its kernel or
 * the session has no max_work), and in *weight (when not NULL) what each counts. */
double kl_session_node_steps(const kiln_session *s, int node, double *weight);

#endif
