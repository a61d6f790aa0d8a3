/* One ZIP entry read whole, its CRC-32 checked: shared by the .npz and TorchScript
 * readers. libzip compares an entry's CRC-32 with its data only when a read reaches the
 * entry's end of file, which a read of exactly the entry's size never does. */
#ifndef KL_IMPORT_ZIPENTRY_H
#define KL_IMPORT_ZIPENTRY_H

#include <stdbool.h>
#include <zip.h>

/* Reads size bytes of the open entry f into buf, then reads on to its end so that
 * libzip checks the CRC-32 (and that nothing follows). True when exactly size bytes
 * were there and the CRC-32 matched; else false, zip_file_strerror(f) says why (a data
 * descriptor's entry, general-purpose flag bit 3, is checked as any other). */
bool kl_zip_read_entry(zip_file_t *f, void *buf, zip_uint64_t size);

#endif
