/* Whole-file reads and writes with the checks every importer needs: regular files
 * only, sizes against a limit, short reads and EINTR handled, errno in messages. */
#ifndef KL_IMPORT_FILEIO_H
#define KL_IMPORT_FILEIO_H

#include "runtime/status.h"

#include <stddef.h>
#include <stdint.h>

/* Read the regular file at path into a malloc'd buffer (*buf, *len bytes; at least
 * one byte is allocated so *buf is never NULL on success). A file over max bytes is
 * KILN_ERR_LIMIT. The caller frees *buf. */
kiln_status kl_file_read(const char *path, size_t max, void **buf, size_t *len, kl_err *e);

/* Read exactly n bytes at offset off of the open file fd (what names it in messages). */
kiln_status kl_file_pread(int fd, void *buf, size_t n, uint64_t off, const char *what,
                          kl_err *e);

/* Write head (nh bytes) then body (nb bytes) to path, replacing the file. body may be
 * NULL when nb is 0. */
kiln_status kl_file_write(const char *path, const void *head, size_t nh, const void *body,
                          size_t nb, kl_err *e);

/* The folder part of path ("." when it has none), malloc'd; NULL on out of memory. */
char *kl_path_dir(const char *path);

#endif
