/* Whole-file reads and writes with the checks every importer needs: regular files
 * only, sizes against a limit, short reads and EINTR handled, errno in messages. */
#ifndef KL_IMPORT_FILEIO_H
#define KL_IMPORT_FILEIO_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Open path for reading (with extra open flags, such as O_NOFOLLOW), only when it is a
 * regular file: a FIFO, device, socket or folder is refused without blocking, with
 * status not_regular (what names the file in the message). Returns the descriptor, or
 * -1 with e set. */
int kl_open_regular(const char *path, int flags, const char *what, kiln_status not_regular,
                    kl_err *e);

/* Read the regular file at path into a malloc'd buffer (*buf, *len bytes; at least
 * one byte is allocated so *buf is never NULL on success). A file over max bytes is
 * KILN_ERR_LIMIT. The caller frees *buf. */
kiln_status kl_file_read(const char *path, size_t max, void **buf, size_t *len, kl_err *e);

/* A regular file opened for reading and mapped (read-only, private) rather than read,
 * so that its pages are only in memory while they are being looked at: data and len
 * are its bytes (data is non-NULL on success, len may be 0), fd stays open for
 * kl_file_pread. Where it cannot be mapped it is read into memory instead. The file
 * must not shrink while it is mapped. */
typedef struct kl_file_map {
  const uint8_t *data;
  size_t len;
  int fd;
  bool mapped; /* false: data is malloc'd */
} kl_file_map;

/* Open and map path; a file over max bytes is KILN_ERR_LIMIT. Close with
 * kl_file_map_close, also after a failure (which leaves *m closed). */
kiln_status kl_file_map_open(const char *path, size_t max, kl_file_map *m, kl_err *e);
void kl_file_map_close(kl_file_map *m);

/* Read exactly n bytes at offset off of the open file fd (what names it in messages). */
kiln_status kl_file_pread(int fd, void *buf, size_t n, uint64_t off, const char *what,
                          kl_err *e);

/* Write head (nh bytes) then body (nb bytes) to path, replacing the file: written to a
 * new file of its own in the same folder, then renamed over path, so a link planted at
 * path is replaced rather than followed; a device at path is refused (KILN_ERR_IO),
 * never replaced. body may be NULL when nb is 0. */
kiln_status kl_file_write(const char *path, const void *head, size_t nh, const void *body,
                          size_t nb, kl_err *e);

/* The folder part of path ("." when it has none), malloc'd; NULL on out of memory. */
char *kl_path_dir(const char *path);

#endif
