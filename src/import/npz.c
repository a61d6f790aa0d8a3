/* NumPy .npz archives: npz.h. */
#include "import/npz.h"

#include "import/fileio.h"
#include "import/tensorfile.h"
#include "import/zipentry.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

void kl_npz_free(kl_npz *z) {
  for (int i = 0; i < z->n; i++) {
    free(z->names[i]);
    free(z->arrays[i].data);
  }
  free(z->names);
  free(z->arrays);
  memset(z, 0, sizeof *z);
}

int kl_npz_find(const kl_npz *z, const char *name) {
  for (int i = 0; i < z->n; i++)
    if (strcmp(z->names[i], name) == 0) return i;
  return -1;
}

kiln_status kl_npz_read(const char *path, int64_t max_bytes, int64_t max_total, kl_npz *out,
                        kl_err *e) {
  memset(out, 0, sizeof *out);
  int code = 0, fd = kl_open_regular(path, 0, "the archive", KILN_ERR_IO, e);
  if (fd < 0) return e->code;
  /* local headers checked against the central directory (as torchscript.c does) */
  zip_t *z = zip_fdopen(fd, ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (!z) {
    zip_error_t ze;
    zip_error_init_with_code(&ze, code);
    kiln_status st = kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "%s: not a .npz archive (%s)", path,
                             zip_error_strerror(&ze));
    zip_error_fini(&ze);
    close(fd);
    return st;
  }
  zip_int64_t n = zip_get_num_entries(z, 0);
  kiln_status st = KILN_OK;
  int64_t total = 0;
  if (n < 0 || n > 100000)
    st = kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "%s: %lld entries", path, (long long)n);
  if (st == KILN_OK && n > 0 &&
      (!(out->names = calloc((size_t)n, sizeof(char *))) ||
       !(out->arrays = calloc((size_t)n, sizeof(kl_tensor)))))
    st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (zip_int64_t i = 0; st == KILN_OK && i < n; i++) {
    zip_stat_t s;
    const char *name = zip_get_name(z, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
    if (!name || zip_stat_index(z, (zip_uint64_t)i, 0, &s) != 0 || !(s.valid & ZIP_STAT_SIZE)) {
      st = kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "%s: entry %lld is unreadable", path,
                   (long long)i);
      break;
    }
    size_t len = strlen(name);
    if (len < 5 || strcmp(name + len - 4, ".npy") != 0) continue; /* not an array */
    if (s.size > (zip_uint64_t)max_bytes + 65536 || total + (int64_t)s.size > max_total + 65536) {
      st = kl_fail(e, KILN_ERR_LIMIT, "%s: array '%.*s' of %llu bytes is over the limit of "
                   "%lld bytes", path, (int)(len - 4), name, (unsigned long long)s.size,
                   (long long)max_bytes);
      break;
    }
    char *buf = malloc(s.size ? s.size : 1);
    zip_file_t *f = buf ? zip_fopen_index(z, (zip_uint64_t)i, 0) : NULL;
    if (!buf) st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    else if (!f || !kl_zip_read_entry(f, buf, s.size))
      st = kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "the entry is truncated or corrupt (%s)",
                   f ? zip_file_strerror(f) : zip_strerror(z));
    if (f) zip_fclose(f);
    kl_tensor t = {0};
    if (st == KILN_OK) st = kl_npy_parse(buf, s.size, max_bytes, &t, e);
    free(buf);
    if (st != KILN_OK) {
      kl_err_prefix(e, "%s: array '%.*s'", path, (int)(len - 4), name);
      break;
    }
    total += (int64_t)kl_tensor_nbytes(&t);
    out->arrays[out->n] = t;
    if (!(out->names[out->n] = strndup(name, len - 4))) {
      free(t.data);
      st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    out->n++;
  }
  zip_discard(z);
  if (st != KILN_OK) kl_npz_free(out);
  return st;
}
