#include "import/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

kiln_status kl_file_pread(int fd, void *buf, size_t n, uint64_t off, const char *what,
                          kl_err *e) {
  uint8_t *p = buf;
  while (n > 0) {
    size_t chunk = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
    if (off > (uint64_t)INT64_MAX)
      return kl_fail(e, KILN_ERR_IO, "%s: offset %llu is out of range", what,
                     (unsigned long long)off);
    ssize_t got = pread(fd, p, chunk, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      return kl_fail(e, KILN_ERR_IO, "%s: read failed: %s", what, strerror(errno));
    if (got == 0)
      return kl_fail(e, KILN_ERR_IO, "%s: file ended early (%zu bytes missing)", what, n);
    p += got;
    n -= (size_t)got;
    off += (uint64_t)got;
  }
  return KILN_OK;
}

int kl_open_regular(const char *path, int flags, const char *what, kiln_status not_regular,
                    kl_err *e) {
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
  int fd = open(path, flags | O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    kl_fail(e, KILN_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
    return -1;
  }
  struct stat st;
  int fl;
  if (fstat(fd, &st) != 0) {
    kl_fail(e, KILN_ERR_IO, "%s: cannot stat %s: %s", path, what, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    kl_fail(e, not_regular, "%s: %s is not a regular file (a folder, device, FIFO or "
            "socket)", path, what);
  } else if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    kl_fail(e, KILN_ERR_IO, "%s: cannot set up %s: %s", path, what, strerror(errno));
  } else {
    return fd;
  }
  close(fd);
  return -1;
}

kiln_status kl_file_read(const char *path, size_t max, void **buf, size_t *len, kl_err *e) {
  *buf = NULL;
  *len = 0;
  int fd = kl_open_regular(path, 0, "the file", KILN_ERR_IO, e);
  if (fd < 0) return e->code;
  struct stat st;
  kiln_status s = KILN_OK;
  if (fstat(fd, &st) != 0) {
    s = kl_fail(e, KILN_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
  } else if ((uint64_t)st.st_size > (uint64_t)max) {
    s = kl_fail(e, KILN_ERR_LIMIT, "%s: the file is %lld bytes, over the limit of %zu",
                path, (long long)st.st_size, max);
  } else {
    size_t n = (size_t)st.st_size;
    void *p = malloc(n ? n : 1);
    if (!p) {
      s = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory reading %zu bytes", path, n);
    } else if ((s = kl_file_pread(fd, p, n, 0, path, e)) != KILN_OK) {
      free(p);
    } else {
      *buf = p;
      *len = n;
    }
  }
  close(fd);
  return s;
}

kiln_status kl_file_map_open(const char *path, size_t max, kl_file_map *m, kl_err *e) {
  *m = (kl_file_map){.fd = -1};
  int fd = kl_open_regular(path, 0, "the file", KILN_ERR_IO, e);
  if (fd < 0) return e->code;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    kl_fail(e, KILN_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
  } else if ((uint64_t)st.st_size > (uint64_t)max) {
    kl_fail(e, KILN_ERR_LIMIT, "%s: the file is %lld bytes, over the limit of %zu", path,
            (long long)st.st_size, max);
  } else {
    m->fd = fd;
    m->len = (size_t)st.st_size;
    void *p = m->len ? mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    if (p != MAP_FAILED) {
      m->data = p;
      m->mapped = true;
      return KILN_OK;
    }
    /* an empty file, or one that cannot be mapped: read it */
    uint8_t *buf = malloc(m->len ? m->len : 1);
    kiln_status s = buf ? kl_file_pread(fd, buf, m->len, 0, path, e)
                        : kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory reading "
                                  "%zu bytes", path, m->len);
    m->data = buf;
    if (s == KILN_OK) return KILN_OK;
    kl_file_map_close(m);
    return s;
  }
  close(fd);
  return e->code;
}

void kl_file_map_close(kl_file_map *m) {
  if (m->mapped) munmap((void *)m->data, m->len);
  else free((void *)m->data);
  if (m->fd >= 0) close(m->fd);
  *m = (kl_file_map){.fd = -1};
}

static kiln_status write_all(int fd, const void *data, size_t n, const char *path, kl_err *e) {
  const uint8_t *p = data;
  while (n > 0) {
    ssize_t put = write(fd, p, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return kl_fail(e, KILN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    p += put;
    n -= (size_t)put;
  }
  return KILN_OK;
}

kiln_status kl_file_write(const char *path, const void *head, size_t nh, const void *body,
                          size_t nb, kl_err *e) {
  /* A new file of kiln's own in the same folder (O_EXCL: never one planted there),
   * renamed over path when complete: a symbolic or hard link at path is replaced, not
   * followed, and no reader sees a half-written file. A device at path is refused
   * first: renamed over, /dev/null itself would become a file (a FIFO or a link planted
   * in an output folder is replaced, as a file is). */
  struct stat st;
  if (lstat(path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)))
    return kl_fail(e, KILN_ERR_IO, "%s is a device, not a regular file; kiln writes only "
                   "regular files (replacing a file, a link or a FIFO there)", path);
  size_t n = strlen(path) + 8;
  char *tmp = malloc(n);
  if (!tmp) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
  snprintf(tmp, n, "%s.XXXXXX", path);
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) {
    kiln_status s = kl_fail(e, KILN_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    free(tmp);
    return s;
  }
  kiln_status s = write_all(fd, head, nh, path, e);
  if (s == KILN_OK && nb) s = write_all(fd, body, nb, path, e);
  if (s == KILN_OK && fchmod(fd, 0644) != 0)
    s = kl_fail(e, KILN_ERR_IO, "%s: cannot set its mode: %s", path, strerror(errno));
  /* close reports delayed write errors (NFS, full disks) */
  if (close(fd) != 0 && s == KILN_OK)
    s = kl_fail(e, KILN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
  if (s == KILN_OK && rename(tmp, path) != 0)
    s = kl_fail(e, KILN_ERR_IO, "%s: cannot replace: %s", path, strerror(errno));
  if (s != KILN_OK) unlink(tmp);
  free(tmp);
  return s;
}

char *kl_path_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return strdup(".");
  if (slash == path) return strdup("/");
  return strndup(path, (size_t)(slash - path));
}
