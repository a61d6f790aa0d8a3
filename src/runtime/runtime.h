/* The objects behind the public handles. */
#ifndef KL_RUNTIME_H
#define KL_RUNTIME_H

#include "ir/ir.h"
#include "kiln.h"
#include "passes/pass.h"

#include <pthread.h>

struct kiln_options {
  int opt_level;
  int threads;
  int verify;
  int64_t max_tensor_bytes;
  int64_t memory_limit;
  int64_t fold_limit; /* constant folding's result limit in bytes, 0 = the default */
  int64_t max_work;   /* the most steps one node's run may take (kl_node_work), 0: any */
  int reference;      /* 1: sessions run only the portable reference kernels */
  int release_weights; /* 1: the session frees the model's weights it holds packed */
  int pin_threads;     /* 1: runs pin their OpenMP threads to cores */
  int fast_only;       /* 1: a run fails where a node takes a slow path (session.c) */
  char *passes; /* owned, NULL when not set */
  char *input_types; /* owned, NULL when not set: TorchScript inputs' types */
  char *device;      /* owned, NULL when not set: "cpu", "auto", "opencl[:P.D]" */
  char *precision;   /* owned, NULL when not set: "auto", "fp32", "tf32" */
  /* training (kiln_trainer_create): owned strings, NULL when not set */
  char *loss;        /* cross_entropy (default), nll, mse, l1, smooth_l1, bce_logits */
  char *optimizer;   /* sgd (default), adagrad, adam, adamw, lamb, lars */
  char *frozen;      /* comma-separated weights that are not trained */
  char *no_decay;    /* "auto" (weights of rank 1) or comma-separated name patterns:
                        weights updated with no weight decay */
  char *reduction;   /* the loss over the batch: mean (default) or sum */
  /* NaN: the optimizer's default (train/trainer.c) */
  double lr, momentum, dampening, weight_decay, beta1, beta2, eps, lr_decay,
      initial_accumulator, trust_coefficient, clip_norm, label_smoothing, smooth_l1_beta;
  int nesterov, amsgrad, maximize, bf16;
  int64_t ignore_index, seed;
  kl_err err;        /* the last setter's failure (kiln_options_error); not copied */
};

#define KL_DEFAULT_MAX_TENSOR_BYTES (INT64_C(16) << 30)
/* max_work counts steps (kl_node_work) weighed by what each costs on the kernel that
 * takes it (kl_work_weight, ir/work_weight.c), in units of a multiply-add of a large
 * float32 product on one AVX-512 core, about KL_WORK_UNIT_NS: so max_work bounds a
 * node's time on one core. The default, 2^39, is about 7 s of it on the Xeon the
 * weights were measured on: a file of a few hundred bytes can ask for no more than
 * that of any kernel, while a 4096-token prefill of a 7B LLM's largest MatMul (4096 x
 * 4096 x 11008, 1.85e11) runs with room to spare (docs/fuzzing.md, "The default
 * compute bound"). */
#define KL_DEFAULT_MAX_WORK (INT64_C(1) << 39)

/* Copy src (or the defaults when src is NULL) into dst; dst's strings are owned after. */
kiln_status kl_options_copy(kiln_options *dst, const kiln_options *src, kl_err *e);
void kl_options_clear(kiln_options *o);

/* Public description of a model input or output, built once at load. */
typedef struct kl_io_info {
  kiln_tensor_info info;
  int64_t dims[KL_MAX_RANK];
  const char *dim_names[KL_MAX_RANK];
} kl_io_info;

/* A device the model's sessions share (option "device"): opened by the first session
 * that names it, its weights uploaded once, each by the first session that needs it. */
typedef struct kl_model_device {
  char *spec;                 /* "opencl", "opencl:0.0" */
  struct kl_cl_device *dev;
  struct kl_dev_buf *weights; /* per value; mem NULL until uploaded */
} kl_model_device;

struct kiln_model {
  kl_err err;
  kiln_options opts;
  kl_graph *g; /* optimized, immutable once loaded */
  kl_pass_stats stats; /* what the optimizer did, for `kiln inspect --stats` */
  kl_io_info *inputs, *outputs;
  int n_inputs, n_outputs;
  /* Sessions: how many are alive, and whether one made with release_weights took the
   * weights over (then no other may be made, ever). Under lock. */
  pthread_mutex_t lock;
  int sessions;
  bool claimed;
  kl_model_device **devices; /* under lock; entries never move */
  int n_devices;
  bool borrowed; /* g belongs to someone else (a control node's body: kl_model_wrap) */
  /* g is the body of an If, Loop or Scan (runtime/control.c): messages about its nodes
   * leave the file out, as they follow the control node's, which names it */
  bool body;
};

/* Load, verify, infer and optimize a graph from a file or buffer (either path or
 * data is given). */
kiln_status kl_model_load(kiln_model *m, const char *path, const void *data, size_t size);
/* The steps of kl_model_load apart, for graphs that are changed in between (training):
 * an empty model with a copy of options; the file's graph imported, sorted, verified
 * and inferred into m->g; then m->g optimized at the options' level and described. */
kiln_status kl_model_create(const kiln_options *options, kiln_model **out);
kiln_status kl_model_import(kiln_model *m, const char *path);
kiln_status kl_model_finish(kiln_model *m);
/* A model around g, which is already inferred and optimized and stays g's owner's (a
 * body of If, Loop or Scan, run by sessions of its own: runtime/control.c). */
kiln_status kl_model_wrap(kl_graph *g, const kiln_options *options, kiln_model **out);

#endif
