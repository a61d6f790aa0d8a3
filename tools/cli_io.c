/* Tensor files for the CLI: the library's readers and writers, with messages printed. */
#include "cli.h"
#include "import/tensorfile.h"

#include <stdio.h>
#include <string.h>

bool cli_read_tensor(const char *path, int64_t max_bytes, kl_tensor *t, char **name) {
  kl_err e = {0};
  if (kl_tensorfile_read(path, max_bytes, t, name, &e) == KILN_OK) return true;
  /* the reader's status for a malformed file is "invalid model"; this file is a tensor */
  const char *what = e.code == KILN_ERR_INVALID_MODEL ? "invalid tensor file"
                                                      : kiln_status_string(e.code);
  fprintf(stderr, "kiln: %s: %s\n", what, e.msg);
  return false;
}

bool cli_read_value(const char *path, int64_t max_bytes, bool seq, bool opt,
                    kl_value_file *v) {
  kl_err e = {0};
  if (kl_valuefile_read(path, seq, opt, max_bytes, v, &e) == KILN_OK) return true;
  const char *what = e.code == KILN_ERR_INVALID_MODEL ? "invalid value file"
                                                      : kiln_status_string(e.code);
  fprintf(stderr, "kiln: %s: %s\n", what, e.msg);
  return false;
}

bool cli_write_tensor(const char *path, const kl_tensor *t, const char *name) {
  kl_err e = {0};
  size_t n = strlen(path);
  bool pb = n > 3 && strcmp(path + n - 3, ".pb") == 0;
  kiln_status st = pb ? kl_tensorpb_write(path, t, name, &e) : kl_npy_write(path, t, &e);
  if (st == KILN_OK) return true;
  fprintf(stderr, "kiln: %s: %s: %s\n", path, kiln_status_string(st), e.msg);
  return false;
}
