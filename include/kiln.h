/* kiln: a small runtime for neural-network models exported from PyTorch and ONNX.
 *
 * The whole public API. Objects are opaque handles:
 *
 *   kiln_options  settings for loading and running; copied by the calls that take it,
 *                 so it may be freed right after them.
 *   kiln_model    a loaded, verified and optimized graph. Immutable after
 *                 kiln_model_load returns: one model may be shared by any number of
 *                 threads, each running its own session. Free it only after every
 *                 session made from it has been freed.
 *   kiln_session  the execution state of one model (buffers, plan). A session is used by
 *                 one thread at a time; sessions of the same model are independent.
 *
 * Threads: kiln keeps no mutable global state (CPU detection runs once, under
 * pthread_once), so calls on different objects need no locking. What may be shared:
 *   - a kiln_model, by any number of threads at once, for every call that takes it as
 *     const (kiln_session_create, kiln_model_*_info, kiln_model_error, the counts);
 *   - a kiln_options, read by concurrent loads and session creations, as long as no
 *     thread sets or frees it meanwhile;
 *   - the functions that take no object (kiln_version, kiln_status_string, ...).
 * A kiln_session, the output data and infos it hands out, and its error message belong
 * to one thread at a time: to move a session to another thread, hand it over as any
 * data is (a mutex, a queue, a join). tests/unit/test_threads.c checks this under
 * ThreadSanitizer.
 *
 * Every call returns a kiln_status; KILN_OK is 0 and errors are negative. Calls that
 * create an object follow sqlite3_open: they store a handle in *out even when they fail
 * (unless memory runs out, then *out is NULL), kiln_model_error / kiln_session_error
 * tell what went wrong with context (file, node, op, expected vs found), and the caller
 * frees the handle either way. The library never prints, aborts or exits.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERR_INVALID_ARGUMENT = -1, /* a NULL handle, unknown option, bad index */
  KILN_ERR_IO = -2,               /* a file could not be opened or read */
  KILN_ERR_INVALID_MODEL = -3,    /* malformed or inconsistent model file */
  KILN_ERR_UNSUPPORTED = -4,      /* valid, but an op, opset or dtype kiln cannot run */
  KILN_ERR_SHAPE = -5,            /* a shape that does not fit (input or inferred) */
  KILN_ERR_DTYPE = -6,            /* a dtype that does not fit */
  KILN_ERR_OUT_OF_MEMORY = -7,
  KILN_ERR_LIMIT = -8,            /* a size over a configured limit, or an overflow */
  KILN_ERR_NOT_FOUND = -9,        /* no input/output of that name */
  KILN_ERR_STATE = -10,           /* a call out of order: run without inputs, ... */
  KILN_ERR_INTERNAL = -11         /* a bug in kiln: please report it */
} kiln_status;

/* Element types; the numbers are ONNX's TensorProto.DataType values. */
typedef enum kiln_dtype {
  KILN_DTYPE_UNDEFINED = 0,
  KILN_DTYPE_FLOAT32 = 1,
  KILN_DTYPE_UINT8 = 2,
  KILN_DTYPE_INT8 = 3,
  KILN_DTYPE_UINT16 = 4,
  KILN_DTYPE_INT16 = 5,
  KILN_DTYPE_INT32 = 6,
  KILN_DTYPE_INT64 = 7,
  KILN_DTYPE_BOOL = 9, /* one byte per element, 0 or 1 */
  KILN_DTYPE_FLOAT16 = 10,
  KILN_DTYPE_FLOAT64 = 11,
  KILN_DTYPE_UINT32 = 12,
  KILN_DTYPE_UINT64 = 13,
  KILN_DTYPE_BFLOAT16 = 16,
  /* 8-bit floats, one byte per element (ONNX's formats; storage and conversion types:
   * Cast, CastLike, QuantizeLinear, DequantizeLinear and data movement take them) */
  KILN_DTYPE_FLOAT8E4M3FN = 17,   /* sign, 4 exponent bits (bias 7), 3 mantissa; NaN, no inf */
  KILN_DTYPE_FLOAT8E4M3FNUZ = 18, /* bias 8; 0x80 is NaN; no inf, no -0 */
  KILN_DTYPE_FLOAT8E5M2 = 19,     /* sign, 5 exponent bits (bias 15), 2 mantissa; inf, NaN */
  KILN_DTYPE_FLOAT8E5M2FNUZ = 20, /* bias 16; 0x80 is NaN; no inf, no -0 */
  KILN_DTYPE_FLOAT8E8M0 = 24,     /* 2^(b-127), no sign; 0xff is NaN */
  /* Sub-byte types. ONNX files pack them (two or four to a byte, the first element in
   * the lowest bits); in memory, and so at this API, they take one byte per element, as
   * ml_dtypes holds them: int4/int2 as a sign-extended int8, uint4/uint2 as a uint8,
   * float4e2m1 as its 4-bit code (sign in bit 3) in the low bits. kiln_dtype_size says 1. */
  KILN_DTYPE_UINT4 = 21,
  KILN_DTYPE_INT4 = 22,
  KILN_DTYPE_FLOAT4E2M1 = 23, /* sign, 2 exponent bits (bias 1), 1 mantissa; no inf or NaN */
  KILN_DTYPE_UINT2 = 25,
  KILN_DTYPE_INT2 = 26
} kiln_dtype;

typedef struct kiln_options kiln_options;
typedef struct kiln_model kiln_model;
typedef struct kiln_session kiln_session;

/* A tensor's description. For model inputs and outputs a dimension that is not a fixed
 * number is reported as -1, with its symbol (for example "batch") in dim_names[i], or
 * NULL when the model leaves it anonymous. Every pointer stays valid as long as the
 * object it came from. */
typedef struct kiln_tensor_info {
  const char *name;
  kiln_dtype dtype;
  int rank;                      /* -1 when the model does not say */
  const int64_t *dims;           /* rank entries */
  const char *const *dim_names;  /* rank entries; NULL entries for fixed dims */
} kiln_tensor_info;

/* What a model input or output is (kiln_model_input_kind): a tensor, a sequence of
 * tensors (its kiln_tensor_info describes the elements), an optional tensor or sequence
 * (which may hold none); and, for an output of a run, none. */
typedef enum kiln_value_kind {
  KILN_VALUE_TENSOR = 0,
  KILN_VALUE_SEQUENCE = 1,
  KILN_VALUE_OPTIONAL = 2,
  KILN_VALUE_OPTIONAL_SEQUENCE = 3,
  KILN_VALUE_NONE = 4,
} kiln_value_kind;

/* "0.1.0" */
KILN_API const char *kiln_version(void);
/* A short fixed description of a status code, for any value. */
KILN_API const char *kiln_status_string(kiln_status status);
/* "float32", "int64", ...; "undefined" for values that are not kiln_dtype members. */
KILN_API const char *kiln_dtype_name(kiln_dtype dtype);
/* Bytes per element, 0 for unknown values. */
KILN_API size_t kiln_dtype_size(kiln_dtype dtype);

/* Options. Integer settings, by name:
 *   "opt_level"        0..3, graph optimization level (default 2)
 *   "threads"          worker threads for running, 0 = one per core (default 0), at
 *                      most 4096; more than the process's CPUs are started once at
 *                      session creation, which fails with KILN_ERR_LIMIT when the
 *                      system cannot start them all
 *   "max_work"         the most work one run of one node may take, estimated from
 *                      its shapes before it runs (KILN_ERR_LIMIT past it; also what
 *                      constant folding at load leaves for the run): its steps
 *                      (multiply-adds, window taps, element visits), each weighed by
 *                      what it costs on the kernel that takes it, in multiply-adds
 *                      of a large float32 product on one AVX-512 core (about
 *                      0.0125 ns): 1 for such a product on oneDNN, up to thousands
 *                      for kiln's scalar reference kernels (docs/fuzzing.md has the
 *                      table); a device's steps count 1; default 2^39 (about 7 s of
 *                      one core), 0 = no bound
 *   "max_tensor_bytes" largest single tensor a model may declare or produce
 *                      (default 16 GiB)
 *   "memory_limit"     largest total of weights plus session buffers (default 0 = none);
 *                      oneDNN's packed copies of the weights, its scratchpads and
 *                      staged copies count too, and with a "device" its memory (the
 *                      weights' device copies, the session's device tensors and what
 *                      its kernels keep) beside the host's: a session whose weights
 *                      and their copies exceed it is refused when created, one that
 *                      goes over it on a run fails that run
 *   "verify"           1 = run the verifier after every pass (default 0)
 *   "reference"        1 = sessions run only the portable reference kernels, the
 *                      slow oracle the fast kernels are tested against (default 0)
 *   "release_weights"  1 = the session frees the model's copy of each weight that
 *                      only its oneDNN nodes read, once they hold it packed (the
 *                      packed copy is then the only one), so that the weights are
 *                      not held twice. The model is then the session's: creating
 *                      another session from it, then or later, fails with
 *                      KILN_ERR_STATE, and so does this one when the model has other
 *                      sessions; not with "reference" (default 0; kiln run and kiln
 *                      bench set it, --keep-weights not)
 *                      Waiting threads: kiln's worker threads are OpenMP's (libgomp
 *                      in a gcc build, libomp in a clang one; oneDNN's are the same
 *                      threads), and those runtimes keep a thread that finished its
 *                      part spinning for the next parallel region, about 3 ms (libgomp)
 *                      or 200 ms (libomp). On an idle machine that is fastest; when
 *                      other programs want the same cores, runs took 3-12x as long
 *                      (docs/benchmarks.md, "Threads under load"). The runtimes read
 *                      their setting from the environment when the program starts, so
 *                      the library cannot change it: a program that shares its cores
 *                      should start with GOMP_SPINCOUNT=10000 (libgomp: spin a
 *                      fraction of a millisecond, then sleep) or KMP_BLOCKTIME=0
 *                      (libomp), as the
 *                      kiln command does for itself (OMP_WAIT_POLICY=passive sleeps at
 *                      once: steadier under load, up to 3x slower when idle). The
 *                      library does not look at the load; the kiln command without
 *                      --threads runs one thread per CPU that other programs left
 *                      free when it started: one busy program beside as many
 *                      spinning threads as cores made each run up to 16x slower
 *   "pin_threads"      1 = each run pins the threads that run it to cores: thread t of
 *                      the OpenMP team (the calling thread is 0, and stays pinned
 *                      after the run) to the t-th CPU the process may use; more
 *                      threads than such CPUs is KILN_ERR_INVALID_ARGUMENT at session
 *                      creation (default 0)
 *   "fast_only"        1 = a run fails (KILN_ERR_UNSUPPORTED, naming the node) when a
 *                      node that the fast kernels give to oneDNN (convolution,
 *                      matrix product, pooling, attention, ...) would run on oneDNN's
 *                      reference implementation or on kiln's reference kernel, for
 *                      the machine's ISA level and these shapes; for tests and for
 *                      deployments that would rather fail than run 100x slower
 *                      (default 0: such a node runs, and kiln bench warns of it)
 *   "fold_limit"       constant folding leaves a node alone when its results would
 *                      take more bytes than this and than its inputs (default 0 =
 *                      1 MiB)
 * String settings, by name ("" unsets one):
 *   "passes"           comma-separated pass names, each prefixed by '+' (force on)
 *                      or '-' (switch off)
 *   "input_types"      the inputs of a TorchScript archive that does not record them
 *                      (torch 1.x writes no traced_inputs.pkl), as example inputs:
 *                      "x:float32[2,3,224,224];ids:int64[2,7]" (forward's parameter
 *                      names; dim 0 becomes the symbolic "batch", as for recorded
 *                      inputs). A parameter with a default (scripted code's `mask:
 *                      Optional[Tensor] = None`) is an input only when the list (or
 *                      the recorded inputs) give it, else forward runs with its
 *                      default. A list that names none of forward's parameters and has
 *                      one entry per parameter (or per parameter without a default,
 *                      up to all) is taken by position; one that names
 *                      some and not others is KILN_ERR_INVALID_ARGUMENT. Recorded
 *                      inputs take precedence (the list is not read when the archive
 *                      records every input); ONNX models ignore it.
 *   "device"           where sessions run (default "cpu"): "opencl" (the first OpenCL
 *                      GPU, else the first OpenCL device), "opencl:P.D" (device D of
 *                      platform P, as `kiln info` numbers them), "auto" (the first GPU
 *                      when one opens, else the CPU: the only form that falls back
 *                      quietly), "level-zero[:D]" (listed, not run yet: fails saying so).
 *                      Nodes the device has kernels for run there, the rest on the CPU,
 *                      tensors copied at the boundaries (docs/gpu.md). Set it in the
 *                      options the model is loaded with too: a model loaded for a device
 *                      keeps the plain layout its kernels read (-O3's channels-last
 *                      rewrite is for the CPU). A device that does not exist or does not
 *                      open fails session creation; "memory_limit" counts its memory
 *                      beside the host's.
 *   "precision"        the arithmetic of convolutions and matrix products: "auto"
 *                      (default: TF32 on a GPU with tensor cores, where kiln has
 *                      kernels for them (NVIDIA sm_80 and later), as PyTorch's cuDNN
 *                      default; float32 everywhere else), "fp32" (float32 everywhere),
 *                      "tf32" (operands rounded to 10-bit mantissas, sums in float32;
 *                      session creation fails where the device has no tensor cores,
 *                      the CPU included), "bf16" (the CPU's convolutions and matrix
 *                      products, and at the AMX level attention, with bf16 operands and
 *                      float32 sums, and the activations between two products held in
 *                      bf16; session creation
 *                      fails below AVX512-BF16/AMX, for a reference session and on a
 *                      GPU device: docs/precision.md). fp16 is not built yet.
 * Training settings (kiln_trainer_create; docs/training.md), strings:
 *   "loss"             cross_entropy (default: logits [N, C, ...] against int64 class
 *                      indices), nll (log-probabilities), mse, l1, smooth_l1,
 *                      bce_logits (float targets of the output's shape)
 *   "optimizer"        sgd (default), adagrad, adam, adamw, lamb, lars
 *   "frozen"           comma-separated weight names that are not trained
 *   "no_decay"         weights updated without weight decay (a second parameter group,
 *                      as PyTorch's param_groups with weight_decay 0): "auto" (every
 *                      weight of rank 1: biases and normalization scales, timm's
 *                      rule) or comma-separated name patterns (fnmatch: "*.bias,ln*");
 *                      a pattern that matches no trained weight is an error
 *   "reduction"        the loss over the batch's elements: mean (default) or sum
 * integers: "nesterov", "amsgrad", "maximize" (0 or 1, as PyTorch's), "ignore_index"
 * (cross_entropy/nll, default -100), "seed" (dropout masks, default 0), "bf16" (1:
 * each trained weight held as the two 16-bit halves of its FP32 master, SplitSGD; on a
 * CPU with AMX the convolutions, their gradients and the matrix products also compute
 * in bf16, float32 sums, unless "precision" is "fp32"; elsewhere the arithmetic stays
 * float32 unless "precision" is "bf16" (AVX512-BF16: slower than float32 on the Xeon
 * measured, docs/training.md)); floats
 * (kiln_options_set_float): "lr", "momentum", "dampening", "weight_decay", "beta1",
 * "beta2", "eps", "lr_decay", "initial_accumulator", "trust_coefficient" (Lars),
 * "clip_norm" (clip the gradients to this global L2 norm, 0 = none),
 * "label_smoothing", "smooth_l1_beta". Unset, each takes PyTorch's default for the
 * optimizer (lr 1e-3 for sgd, adam, adamw, lamb; 1e-2 for adagrad and lars).
 * An unknown name or an out-of-range value is KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_options_create(kiln_options **out);
KILN_API void kiln_options_free(kiln_options *options);
KILN_API kiln_status kiln_options_set_int(kiln_options *options, const char *name, int64_t value);
KILN_API kiln_status kiln_options_set_string(kiln_options *options, const char *name,
                                             const char *value);
KILN_API kiln_status kiln_options_set_float(kiln_options *options, const char *name,
                                            double value);
/* The message of the last failed setter call on these options ("option 'threads': 5000
 * is out of range: expected a thread count (0 = one per core), from 0 to 4096"), "" if
 * the last call succeeded. Valid until the next call on the options. */
KILN_API const char *kiln_options_error(const kiln_options *options);

/* Load a model (.onnx, or a TorchScript .pt where supported) from a file, or from a
 * buffer that is copied as needed and may be freed after the call. options may be
 * NULL for the defaults. External data of an ONNX model is resolved relative to the
 * model's folder; a buffer-loaded model cannot use external data. */
KILN_API kiln_status kiln_model_load(const char *path, const kiln_options *options,
                                     kiln_model **out);
KILN_API kiln_status kiln_model_load_memory(const void *data, size_t size,
                                            const kiln_options *options, kiln_model **out);
/* Frees the model; free its sessions first (they read its graph and, on a device, its
 * weights there). */
KILN_API void kiln_model_free(kiln_model *model);
/* The message of the last failure on this model, "" if none. Valid until the next call
 * on the model. */
KILN_API const char *kiln_model_error(const kiln_model *model);

KILN_API int kiln_model_input_count(const kiln_model *model);
KILN_API int kiln_model_output_count(const kiln_model *model);
KILN_API kiln_status kiln_model_input_info(const kiln_model *model, int index,
                                           kiln_tensor_info *info);
KILN_API kiln_status kiln_model_output_info(const kiln_model *model, int index,
                                            kiln_tensor_info *info);
/* The index of the input or output with that name (what kiln_tensor_info.name says),
 * for kiln_model_*_info and kiln_session_get_output; -1 when the model has no such one
 * (or model or name is NULL). */
KILN_API int kiln_model_input_index(const kiln_model *model, const char *name);
KILN_API int kiln_model_output_index(const kiln_model *model, const char *name);
/* The kiln_value_kind of input or output `index` (KILN_VALUE_TENSOR..._OPTIONAL_SEQUENCE);
 * -1 for a bad index. */
KILN_API int kiln_model_input_kind(const kiln_model *model, int index);
KILN_API int kiln_model_output_kind(const kiln_model *model, int index);

/* Create a session on a loaded model. options may be NULL (the model's options). */
KILN_API kiln_status kiln_session_create(const kiln_model *model, const kiln_options *options,
                                         kiln_session **out);
KILN_API void kiln_session_free(kiln_session *session);
KILN_API const char *kiln_session_error(const kiln_session *session);

/* Bind a caller-owned input buffer: dtype and dims must match the model's input
 * (symbolic dims take any size, consistently across inputs). The buffer is not
 * copied; it must stay valid and unchanged until kiln_session_run returns. */
KILN_API kiln_status kiln_session_set_input(kiln_session *session, const char *name,
                                            kiln_dtype dtype, int rank, const int64_t *dims,
                                            const void *data, size_t size_bytes);
/* A sequence input (kiln_model_input_kind KILN_VALUE_SEQUENCE): count tensors of the
 * sequence's dtype, elements[k] describing element k (name and dim_names unused) and
 * data[k] its bytes. Unlike kiln_session_set_input the session copies them. */
KILN_API kiln_status kiln_session_set_input_sequence(kiln_session *session, const char *name,
                                                     int64_t count,
                                                     const kiln_tensor_info *elements,
                                                     const void *const *data);
/* An optional input (KILN_VALUE_OPTIONAL, KILN_VALUE_OPTIONAL_SEQUENCE) holding no
 * value; one that holds a value is set as a tensor or a sequence. */
KILN_API kiln_status kiln_session_set_input_none(kiln_session *session, const char *name);
/* Run the model on the bound inputs. */
KILN_API kiln_status kiln_session_run(kiln_session *session);
/* An output of the last run, by index (0..output_count-1). info and *data point into
 * the session and stay valid until the next kiln_session_run or kiln_session_free. */
KILN_API kiln_status kiln_session_get_output(kiln_session *session, int index,
                                             kiln_tensor_info *info, const void **data);
/* What output `index` of the last run holds: KILN_VALUE_TENSOR (kiln_session_get_output
 * reads it), KILN_VALUE_SEQUENCE (kiln_session_get_output_element reads its elements) or
 * KILN_VALUE_NONE (an optional output holding nothing); -1 without a successful run. */
KILN_API int kiln_session_output_kind(const kiln_session *session, int index);
/* The number of elements of sequence output `index`. */
KILN_API kiln_status kiln_session_get_output_length(kiln_session *session, int index,
                                                    int64_t *count);
/* Element `element` of sequence output `index`, as kiln_session_get_output gives a
 * tensor (info->name is the output's). */
KILN_API kiln_status kiln_session_get_output_element(kiln_session *session, int index,
                                                     int64_t element, kiln_tensor_info *info,
                                                     const void **data);

/* ---- training (docs/training.md) ----
 * A trainer holds a model in training form: one graph computes the forward pass, the
 * loss against the input "target", the gradients and the optimizer's update of every
 * trainable weight (every float32 initializer the loss depends on, less "frozen").
 * BatchNormalization uses batch statistics and updates its running ones; Dropout
 * drops. The weights and the optimizer state live in the trainer. */
typedef struct kiln_trainer kiln_trainer;

/* Load an ONNX model for training with options (NULL: the defaults: cross_entropy,
 * sgd). An op between the weights and the loss that kiln cannot differentiate is
 * KILN_ERR_UNSUPPORTED naming the node. */
KILN_API kiln_status kiln_trainer_create(const char *model_path, const kiln_options *options,
                                         kiln_trainer **out);
KILN_API void kiln_trainer_free(kiln_trainer *trainer);
/* The message of the last failure, "" if none. Valid until the next call. */
KILN_API const char *kiln_trainer_error(const kiln_trainer *trainer);
/* Bind a batch: the model's inputs and "target" (int64 class indices [N, ...] for
 * cross_entropy and nll, else float32 of the model's first output's shape). As
 * kiln_session_set_input: the buffer is not copied and must stay valid until the
 * step or evaluation that reads it returns. */
KILN_API kiln_status kiln_trainer_set_input(kiln_trainer *trainer, const char *name,
                                            kiln_dtype dtype, int rank, const int64_t *dims,
                                            const void *data, size_t size_bytes);
/* One optimizer step on the bound batch; *loss (may be NULL) gets the batch's loss.
 * A loss that is not finite stops before the update: KILN_ERR_STATE naming the step,
 * the weights unchanged. */
KILN_API kiln_status kiln_trainer_step(kiln_trainer *trainer, double *loss);
/* The learning rate of the next steps (schedules set it before each step). */
KILN_API kiln_status kiln_trainer_set_lr(kiln_trainer *trainer, double lr);
KILN_API double kiln_trainer_lr(const kiln_trainer *trainer);
/* The weights being trained (the model's float32 initializers the loss depends on,
 * less "frozen"), in graph order: how many, and the name of weight index (NULL when out
 * of range; valid while the trainer lives). */
KILN_API int kiln_trainer_weight_count(const kiln_trainer *trainer);
KILN_API const char *kiln_trainer_weight_name(const kiln_trainer *trainer, int index);
/* Steps taken (restored by kiln_trainer_load_checkpoint). */
KILN_API int64_t kiln_trainer_steps(const kiln_trainer *trainer);
/* Run the model in inference form (running statistics, no dropout) with the current
 * weights on the bound inputs; info and *data describe its first output and stay
 * valid until the next call on the trainer. */
KILN_API kiln_status kiln_trainer_evaluate(kiln_trainer *trainer, kiln_tensor_info *info,
                                           const void **data);
/* Write the model with the trained weights (and running statistics) as ONNX. */
KILN_API kiln_status kiln_trainer_save(kiln_trainer *trainer, const char *path);
/* A checkpoint: weights, optimizer state, running statistics and the step count, as
 * .npy files and a manifest in folder dir (created if missing; nothing is written
 * outside it). Loading one into a trainer made from the same model and options
 * continues exactly where it was saved. */
KILN_API kiln_status kiln_trainer_save_checkpoint(kiln_trainer *trainer, const char *dir);
KILN_API kiln_status kiln_trainer_load_checkpoint(kiln_trainer *trainer, const char *dir);

#ifdef __cplusplus
}
#endif
#endif
