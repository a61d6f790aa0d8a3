/* Tensor files for the CLI: the library's readers and writers, with messages printed. */
#include "cli.h"
#include "import/tensorfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

kiln_status cli_bind_value(kiln_session *s, const char *name, kl_value_file *v,
                           kl_tensor *keep) {
  kiln_status st;
  if (v->none) {
    st = kiln_session_set_input_none(s, name);
  } else if (v->seq) {
    kiln_tensor_info *el = calloc((size_t)v->count + 1, sizeof *el);
    const void **data = calloc((size_t)v->count + 1, sizeof *data);
    st = el && data ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (int64_t j = 0; st == KILN_OK && j < v->count; j++) {
      el[j] = (kiln_tensor_info){.dtype = (kiln_dtype)v->items[j].dtype,
                                 .rank = v->items[j].rank, .dims = v->items[j].dims};
      data[j] = v->items[j].data;
    }
    if (st == KILN_OK) st = kiln_session_set_input_sequence(s, name, v->count, el, data);
    free(el);
    free(data);
  } else {
    *keep = v->items[0];
    v->items[0].data = NULL;
    st = kiln_session_set_input(s, name, (kiln_dtype)keep->dtype, keep->rank, keep->dims,
                                keep->data, kl_tensor_nbytes(keep));
  }
  kl_valuefile_clear(v);
  return st;
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

bool cli_inside(const char *root, const char *path, const char *folder, char *why,
                size_t len) {
  char *real = realpath(path, NULL);
  int err = errno;
  size_t n = strlen(root);
  bool in = real && strncmp(real, root, n) == 0 && (real[n] == '/' || (n == 1 && *root == '/'));
  free(real);
  if (!real)
    cli_format(why, len, "%s cannot be resolved: %s", path, strerror(err));
  else if (!in)
    cli_format(why, len, "%s leads outside the %s (a symbolic link?)", path, folder);
  return in;
}

FILE *cli_open_stream(const char *cmd, const char *path, bool append) {
  /* a link is not followed (one planted where the file goes would have kiln write over
   * its target), unless it leads to a stream: /dev/stdout, a shell's /dev/fd/N */
  int fd = open(path, O_WRONLY | O_CREAT | O_NOCTTY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW |
                          (append ? O_APPEND : O_TRUNC), 0666);
  struct stat st;
  if (fd < 0 && errno == ELOOP) {
    fd = open(path, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : 0));
    if (fd >= 0 && (fstat(fd, &st) != 0 ||
                    !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))) {
      close(fd);
      fprintf(stderr, "kiln %s: %s is a symbolic link; kiln writes through a link only to a "
              "character device, FIFO or socket (name the file itself)\n", cmd, path);
      return NULL;
    }
  }
  if (fd < 0) {
    if (errno == ENXIO) /* O_NONBLOCK: a FIFO without a reader */
      fprintf(stderr, "kiln %s: %s is a FIFO that no program reads (kiln would wait for "
              "one forever)\n", cmd, path);
    else
      fprintf(stderr, "kiln %s: %s: %s\n", cmd, path, strerror(errno));
    return NULL;
  }
  int flags = fcntl(fd, F_GETFL); /* writes block as usual once it is open */
  FILE *f = flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0
                ? fdopen(fd, append ? "a" : "w")
                : NULL;
  if (!f) {
    fprintf(stderr, "kiln %s: %s: %s\n", cmd, path, strerror(errno));
    close(fd);
  }
  return f;
}
