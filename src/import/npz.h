/* NumPy .npz archives (a zip of .npy files, stored or deflated): the arrays of one
 * file, each named as numpy.savez names it (the entry's name less ".npy"). Every
 * size is checked; a truncated or malformed archive is an error, never a crash. */
#ifndef KL_IMPORT_NPZ_H
#define KL_IMPORT_NPZ_H

#include "ir/ir.h"

typedef struct kl_npz {
  int n;
  char **names;      /* malloc'd */
  kl_tensor *arrays; /* data malloc'd */
} kl_npz;

/* Reads every array of the archive at path; an array of more than max_bytes bytes, or
 * arrays of more than max_total bytes in all, is KILN_ERR_LIMIT. */
kiln_status kl_npz_read(const char *path, int64_t max_bytes, int64_t max_total, kl_npz *out,
                        kl_err *e);
void kl_npz_free(kl_npz *z);
/* The index of the array called name, or -1. */
int kl_npz_find(const kl_npz *z, const char *name);

#endif
