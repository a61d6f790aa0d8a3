/* The TorchScript importer: a torch.jit.trace + torch.jit.save archive into kiln's
 * graph IR, without Python or libtorch.
 *
 * The archive (a ZIP read with libzip) holds, under one top folder: data.pkl (the
 * module tree: attributes, parameters and buffers; pickle.h reads it), data/<key>
 * (raw little-endian storages), constants.pkl + constants/<key> (the CONSTANTS.cN of
 * the code), code/__torch__/... .py (the traced forward methods; tscode.h parses them),
 * traced_inputs.pkl (the example inputs, written by torch 2.x), byteorder and version.
 *
 * The graph is built by running the top module's forward method symbolically: every
 * submodule call is inlined, every ATen call becomes IR nodes (aten.c), Python values
 * (ints, lists, modules) exist only while building. Tensors that the module holds
 * become constants named by their attribute path ("layer1.0.conv1.weight").
 *
 * Inputs are forward's parameters. Their dtype and rank come from traced_inputs.pkl,
 * with dim 0 symbolic ("batch") and the others as traced; without that file (torch
 * 1.x) they come from the kiln_options "input_types" (kiln check passes its test
 * inputs'; by name, or by position when no entry names a parameter and there is one
 * per parameter), else an input is float32 of unknown rank, and ATen calls that need a rank
 * fail with a message saying so. Outputs are what forward returns (tensors, or tuples and lists
 * of them, flattened), named output_0, output_1, ...
 *
 * Scripted code (torch.jit.script): if/else, for ... in range(...) and while become If
 * and Loop nodes whose bodies read the enclosing graph's values as captures; a return
 * inside an if takes the statements after the if into the other branch; scripted free
 * functions (__torch__.torch.nn.functional.embedding, ...) are inlined like methods; a
 * raise on a path the data chooses becomes a kiln.Check of the outputs; NamedTuples
 * and dicts of string keys exist only while building; forward's parameters with
 * defaults are inputs only when declared; a list a Loop appends to once per pass is its
 * scan output (KL_TSV_STACK) (docs/torchscript.md, "Scripted control flow").
 *
 * A node whose inputs are all constants runs as it is made (ir/fold.c), so that what it
 * computes is known while building (torchvision's transform takes its scale with
 * item() of torch.min of the image's sizes).
 *
 * Refused with a message: scripted constructs beyond those, a trace taken in training
 * mode (batch_norm with training=True), quantized storages, big-endian archives, ATen
 * ops kiln does not lower (named), and any malformed or oversized part of the archive.
 */
#ifndef KL_IMPORT_TORCHSCRIPT_H
#define KL_IMPORT_TORCHSCRIPT_H

#include "import/onnx.h"
#include "import/pickle.h"
#include "import/tscode.h"

/* Load a TorchScript archive from a file or a buffer (not kept). o may be NULL. */
kiln_status kl_torchscript_load_file(const char *path, const kl_import_opts *o,
                                     kl_graph **out, kl_err *e);
kiln_status kl_torchscript_load_memory(const void *buf, size_t len, const kl_import_opts *o,
                                       kl_graph **out, kl_err *e);

/* ---- between torchscript.c (the interpreter) and aten.c (ATen -> IR) ---- */

/* A value while building: Python values exist only here; tensors are graph values. */
typedef enum kl_tsv_kind {
  KL_TSV_NONE,
  KL_TSV_BOOL,   /* i */
  KL_TSV_INT,    /* i when id < 0, else the 0-D int64 graph value id */
  KL_TSV_FLOAT,  /* f when id < 0, else the 0-D graph value id */
  KL_TSV_STR,    /* s */
  KL_TSV_TENSOR, /* id */
  KL_TSV_LIST,   /* items */
  KL_TSV_TUPLE,  /* items (and fields, for a NamedTuple) */
  KL_TSV_MODULE, /* obj, with its attribute path s */
  KL_TSV_FUNC,   /* a scripted function or a prefix of its name: s, "__torch__.a.f" */
  KL_TSV_DICT,   /* keys known while building: fields[k] (strings) -> items[k] */
  KL_TSV_STACK,  /* a list of tensors of one shape whose length the run decides, appended
                  * to once per pass of a Loop whose count the data decides: id, its
                  * elements stacked on a new dim 0 (the Loop's scan output) */
} kl_tsv_kind;

typedef struct kl_tsv kl_tsv;
struct kl_tsv {
  kl_tsv_kind kind;
  int64_t i;
  double f;
  const char *s;
  int id;
  int dim_sym; /* INT or TENSOR computed by the graph from a symbolic dim: 1 + the graph
                * symbol it equals; 0 when none */
  kl_tsv *items;
  int n;
  const char *const *fields; /* a TUPLE that is a NamedTuple: its n field names; a
                              * DICT's n keys */
  int made_in; /* a LIST or DICT made by a display: 1 + the If/Loop bodies around it then
                * (append and _set_item may change it in that body only); 0 for any
                * other value */
  const kl_pk_obj *obj;
};

typedef struct kl_ts_build kl_ts_build;

/* Lower torch.<name>(...) (name "relu", "_convolution", ...), ops.prim.<name>(...)
 * (name "prim::NumToTensor") or a builtin ("int", "float") into nodes; *out is its
 * result. kw[k] is the keyword of argument k or NULL. */
/* Whether kiln lowers ATen op `name` ("relu", or an in-place "relu_"). */
bool kl_aten_known(const char *name);
kiln_status kl_aten_call(kl_ts_build *b, const char *name, const kl_tsv *args,
                         const char *const *kw, int n_args, kl_tsv *out);

/* Services of the builder for aten.c. Each failure is recorded in kl_ts_err(b). */
kl_err *kl_ts_err(kl_ts_build *b);
kl_graph *kl_ts_graph(kl_ts_build *b);
void *kl_ts_alloc(kl_ts_build *b, size_t size); /* zeroed, freed with the builder */
/* Add a node of op on the inputs (KL_ABSENT for an absent one) with n_out fresh
 * outputs (ids into out), named after the current module and ATen call, src set to
 * the ATen name. Returns the node index or -1. Call kl_ts_finish after setting its
 * attributes: that infers the outputs' types. */
int kl_ts_node(kl_ts_build *b, kl_op op, int n_in, const int *in, int n_out, int *out);
kiln_status kl_ts_finish(kl_ts_build *b, int node);
/* Constants: int64 list (rank 1, or rank 0 when scalar), and a scalar of dtype. */
int kl_ts_const_i64(kl_ts_build *b, const int64_t *v, int n, bool scalar);
int kl_ts_const_scalar(kl_ts_build *b, kl_dtype dtype, double v);
/* A constant of the given type whose data (malloc'd, owned after the call) is ready. */
/* The largest tensor the build may make (the max_tensor_bytes option), in bytes. */
int64_t kl_ts_max_bytes(const kl_ts_build *b);
int kl_ts_const_data(kl_ts_build *b, kl_dtype dtype, int rank, const int64_t *dims,
                     void *data, size_t nbytes);
const kl_type *kl_ts_type(kl_ts_build *b, int id);
/* Count n list elements copied (append, list + list, slices) against the bound on
 * them all: KILN_ERR_LIMIT, recorded, past it. */
kiln_status kl_ts_list_copied(kl_ts_build *b, int64_t n);
/* How many If/Loop bodies are being built around the call (a list made now may change
 * in the innermost only: kl_tsv.made_in). */
int kl_ts_bodies(const kl_ts_build *b);
/* A slot for aten.c's state while building (NULL at first; kl_ts_alloc'd memory). */
void **kl_ts_aten_state(kl_ts_build *b);
/* The graph value tensor `id` stands for now: aten.c functionalizes in-place writes
 * (through views too), after which a tensor and its views are new graph values. */
kiln_status kl_aten_current(kl_ts_build *b, int id, int *out);

#endif
