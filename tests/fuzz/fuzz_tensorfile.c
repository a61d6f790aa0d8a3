/* libFuzzer target: the tensor file readers, .npy (kl_npy_parse) and TensorProto .pb
 * (kl_tensorpb_parse). Every input goes to both, so a seed of either format feeds the
 * other too. A tensor read successfully must be as large as its shape says: every byte
 * is read back, so a short buffer shows up as an ASan report. On failure a reader must
 * own nothing (LeakSanitizer checks that). */
#include "import/tensorfile.h"

#include <stdint.h>
#include <stdlib.h>

#define MAX_TENSOR_BYTES (INT64_C(64) << 20)

static void check_tensor(const kl_tensor *t) {
  if (!t->data || t->rank < 0 || t->rank > KL_MAX_RANK) __builtin_trap();
  volatile uint8_t sink = 0;
  size_t bytes = kl_tensor_nbytes(t);
  if (bytes > (size_t)MAX_TENSOR_BYTES) __builtin_trap();
  for (size_t i = 0; i < bytes; i++) sink ^= ((const uint8_t *)t->data)[i];
  (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kl_tensor t;
  kl_err e = {0};
  if (kl_npy_parse(data, size, MAX_TENSOR_BYTES, &t, &e) == KILN_OK) {
    check_tensor(&t);
    free(t.data);
  } else if (e.code == KILN_ERR_INTERNAL) {
    __builtin_trap();
  }
  char *name = NULL;
  kl_err_clear(&e);
  if (kl_tensorpb_parse(data, size, MAX_TENSOR_BYTES, &t, &name, &e) == KILN_OK) {
    check_tensor(&t);
    free(t.data);
    free(name);
  } else if (e.code == KILN_ERR_INTERNAL) {
    __builtin_trap();
  }
  return 0;
}
