/* Training's internals shared with tests (trainer.c). */
#ifndef KL_TRAIN_H
#define KL_TRAIN_H

#include "ir/ir.h"
#include "kiln.h"

/* Moves each in-place update node (kiln.SGD, kiln.Adam, ...) to just after the last node
 * it must follow: its inputs' producers and every other reader of its inputs. */
kiln_status kl_train_update_order(kl_graph *g, kl_err *e);

/* BatchNormalization running statistics that are Identities of other initializers (as
 * PyTorch exports a fresh BatchNorm) become constants of their own. */
kiln_status kl_train_own_stats(kl_graph *g, kl_err *e);

/* The step graph's model and session, for `kiln train --profile`. */
const kiln_model *kl_trainer_step_model(const kiln_trainer *t);
kiln_session *kl_trainer_step_session(kiln_trainer *t);

#endif
