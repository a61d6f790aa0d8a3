/* Tensor files: ONNX TensorProto (.pb, the format of the ONNX test data sets'
 * test_data_set_N/input_M.pb, with the tensor's name) and NumPy .npy (format versions
 * 1.0, 2.0 and 3.0; little-endian, C order).
 *
 * Readers fill a kl_tensor whose data is malloc'd (at least one byte, so an empty
 * tensor still has a data pointer) and owned by the caller: free(out->data). Every
 * size is checked; a truncated or malformed file is an error that says what is wrong,
 * never a crash. */
#ifndef KL_IMPORT_TENSORFILE_H
#define KL_IMPORT_TENSORFILE_H

#include "ir/ir.h"

#include <stddef.h>
#include <stdint.h>

/* Read a tensor file; the format is told by its contents (.npy files start with the
 * bytes "\x93NUMPY", anything else is read as a TensorProto). A tensor of more than
 * max_bytes bytes is KILN_ERR_LIMIT. name may be NULL; otherwise *name gets the
 * tensor's name (malloc'd), or NULL when the file gives none (.npy never does). */
kiln_status kl_tensorfile_read(const char *path, int64_t max_bytes, kl_tensor *out,
                               char **name, kl_err *e);

/* The same from buffers, which are not kept. */
kiln_status kl_npy_parse(const void *buf, size_t len, int64_t max_bytes, kl_tensor *out,
                         kl_err *e);
kiln_status kl_tensorpb_parse(const void *buf, size_t len, int64_t max_bytes, kl_tensor *out,
                              char **name, kl_err *e);

/* A value file of the ONNX test data: a TensorProto, a SequenceProto of TensorProtos, or
 * an OptionalProto of either (the files of sequence and optional inputs and outputs). */
typedef struct kl_value_file {
  bool none;       /* an OptionalProto holding nothing */
  bool seq;        /* a sequence: count items */
  int64_t count;
  kl_tensor *items; /* a tensor: one item; each item's data malloc'd */
  char *name;      /* malloc'd, or NULL */
} kl_value_file;

/* Read path as a value of that kind: seq (a SequenceProto) and opt (an OptionalProto
 * around it, or around a tensor); neither: a tensor file as kl_tensorfile_read reads
 * it. Each element is bounded by max_bytes, the file by PB_MAX_FILE. */
kiln_status kl_valuefile_read(const char *path, bool seq, bool opt, int64_t max_bytes,
                              kl_value_file *out, kl_err *e);
void kl_valuefile_clear(kl_value_file *v);

/* Write t as a .npy file (format 1.0; bfloat16 has no NumPy type and is refused). */
kiln_status kl_npy_write(const char *path, const kl_tensor *t, kl_err *e);
/* Whether a .npy file can hold dtype t (NumPy has no bfloat16, for one). */
bool kl_npy_has_dtype(kl_dtype t);
/* Write t as a TensorProto with raw_data; name may be NULL. */
kiln_status kl_tensorpb_write(const char *path, const kl_tensor *t, const char *name,
                              kl_err *e);

#endif
