/* A bounded reader for the pickles inside TorchScript archives (data.pkl,
 * constants.pkl, traced_inputs.pkl): protocol 2 as torch.jit.save writes it.
 *
 * It is not a Python unpickler: it knows the opcodes torch writes and a short list of
 * globals, and rebuilds them into a tree of kl_pk_obj:
 *
 *   __torch__.<module>.<Class>     NEWOBJ + BUILD -> KL_PK_OBJECT (class name, state)
 *   torch.<X>Storage in BINPERSID  ('storage', class, key, location, numel)
 *                                  -> KL_PK_STORAGE (dtype from the class name)
 *   torch._utils._rebuild_tensor_v2 (6 or 7 arguments) and _rebuild_parameter
 *                                  -> KL_PK_TENSOR (storage, offset, sizes, strides)
 *   collections.OrderedDict()      -> an empty KL_PK_DICT
 *   torch.jit._pickle.restore_type_tag(x, type) and build_*list(x) -> x
 *
 * Any other opcode or global is an error naming it. Everything is bounded: the
 * nesting depth of containers, the memo, the stack, the number of objects. A container
 * cannot be changed once it is inside another and cannot be put inside itself (nor an
 * object be its own state), which keeps the tree acyclic. It is not always a tree: the
 * memo lets one object sit in several containers, so a reader that expands the result
 * must bound its work by more than the object count (torchscript.c does).
 * Storages are not read here: a tensor names its storage by key, and the caller finds
 * the bytes (data/<key> in the archive).
 */
#ifndef KL_IMPORT_PICKLE_H
#define KL_IMPORT_PICKLE_H

#include "ir/ir.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kl_pk_kind {
  KL_PK_NONE,
  KL_PK_BOOL,
  KL_PK_INT,
  KL_PK_FLOAT,
  KL_PK_STR,
  KL_PK_TUPLE,
  KL_PK_LIST,
  KL_PK_DICT,    /* items hold key, value, key, value, ... in insertion order */
  KL_PK_GLOBAL,  /* module and name */
  KL_PK_OBJECT,  /* an instance of a __torch__ class: module, name, state */
  KL_PK_STORAGE, /* key, dtype, numel */
  KL_PK_TENSOR,  /* storage, offset, rank, sizes, strides */
} kl_pk_kind;

typedef struct kl_pk_obj kl_pk_obj;
struct kl_pk_obj {
  kl_pk_kind kind;
  bool frozen;       /* inside a container: may no longer change */
  int depth;         /* 1 + the deepest child's depth */
  int64_t i;         /* BOOL, INT; STORAGE: numel; TENSOR: storage offset (elements) */
  double f;          /* FLOAT */
  const char *s;     /* STR (NUL-terminated; len bytes); GLOBAL, OBJECT: module;
                      * STORAGE: key */
  size_t len;
  const char *name;  /* GLOBAL, OBJECT: the name inside the module */
  kl_pk_obj **items; /* TUPLE, LIST, DICT */
  int n, cap;
  kl_pk_obj *state;  /* OBJECT: what BUILD gave it (NULL before) */
  kl_pk_obj *storage; /* TENSOR */
  kl_dtype dtype;    /* STORAGE, TENSOR */
  int rank;          /* TENSOR */
  int64_t sizes[KL_MAX_RANK], strides[KL_MAX_RANK];
};

typedef struct kl_pk_limits {
  int max_depth;       /* container nesting */
  int max_stack;       /* values on the stack plus open MARKs */
  int64_t max_memo;    /* largest memo index + 1 */
  int64_t max_objects; /* objects made in all */
} kl_pk_limits;

#define KL_PK_DEFAULT_LIMITS {.max_depth = 200, .max_stack = 1 << 20, \
                              .max_memo = 1 << 22, .max_objects = 1 << 24}

typedef struct kl_pickle kl_pickle;

/* Read a pickle from buf (not kept). lim may be NULL for KL_PK_DEFAULT_LIMITS. `what`
 * names the pickle in messages ("data.pkl"). On success *out owns every object and
 * *root is the result; on failure *out is NULL. */
kiln_status kl_pickle_load(const void *buf, size_t len, const kl_pk_limits *lim,
                           const char *what, kl_pickle **out, const kl_pk_obj **root,
                           kl_err *e);
void kl_pickle_free(kl_pickle *p);

/* The value of a string key in a DICT, or NULL. */
const kl_pk_obj *kl_pk_dict_get(const kl_pk_obj *dict, const char *key);
/* "int", "dict", "tensor", ... for messages. */
const char *kl_pk_kind_name(kl_pk_kind k);

#endif
