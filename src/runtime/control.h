/* If, Loop and Scan in a session: each body runs as a session of its own (made with the
 * parent session, so a body plans its memory once and a Loop's later iterations
 * allocate nothing), fed the node's tensors and its own earlier outputs. */
#ifndef KL_CONTROL_H
#define KL_CONTROL_H

#include "runtime/runtime.h"
#include "runtime/sequence.h"

typedef struct kl_control kl_control;


/* Sessions for the bodies of control node n, with the parent session's options (its
 * device too: a body's nodes run there where it has kernels for them; the control node
 * itself runs on the host, which holds what it passes between iterations). */
kiln_status kl_control_create(const kl_node *n, const kiln_options *o, kl_control **out,
                              kl_err *e);
void kl_control_free(kl_control *c);
/* Runs node n on its inputs (NULL for absent ones); max_work bounds the steps of all
 * iterations together (each counted as at least KL_CONTROL_ITERATION_STEPS), 0 for no
 * bound. */
kiln_status kl_control_run(kl_control *c, const kl_node *n, const kl_tensor *const *in,
                           int64_t max_work, kl_value_alloc alloc, void *actx, kl_err *e);
/* What one iteration of a body (or the run of a branch) counts against max_work at
 * least, so that a loop of empty iterations ends too: with the default max_work (2^39),
 * after 2^17 iterations (under a second of small bodies; `--max-work 0` lifts it). */
#define KL_CONTROL_ITERATION_STEPS 4194304.0
/* Iterations (Loop, Scan) or branch runs (If) of the last kl_control_run. */
int64_t kl_control_iterations(const kl_control *c);
/* The steps its last run counted against max_work (its bodies', nested ones' included):
 * the parent session adds them to its own, so that loops in loops are bounded too. */
double kl_control_work(const kl_control *c);

#endif
