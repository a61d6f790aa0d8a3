/* One ZIP entry read whole, CRC-32 checked: zipentry.h. */
#include "import/zipentry.h"

bool kl_zip_read_entry(zip_file_t *f, void *buf, zip_uint64_t size) {
  zip_int64_t got = zip_fread(f, buf, size);
  if (got < 0 || (zip_uint64_t)got != size) return false;
  char more;
  return zip_fread(f, &more, 1) == 0; /* the end: libzip compares the CRC-32 here */
}
