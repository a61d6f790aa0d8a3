/* libFuzzer target: the TorchScript loader (src/import/torchscript.c: the archive;
 * pickle.c; tscode.c, the code parser; aten.c, ATen -> IR) and, for small models, one
 * run, checked as fuzz_onnx checks an ONNX model (fuzz_model.c: verifier after every
 * pass, optimization level from a hash of the input, limits on memory, KILN_ERR_INTERNAL
 * and the sanitizers as oracles).
 *
 * An input is one of two things:
 *
 * - A ZIP archive (it starts with "PK\3\4"): a .pt file as torch.jit.save writes it,
 *   loaded as is. Mutations of it mostly stop at the ZIP layer (libzip checks every
 *   entry's CRC-32), so this form mainly fuzzes the archive handling.
 *
 * - Anything else: a bundle, the entries of an archive as plain bytes, which the target
 *   packs into a valid archive in memory (libzip, stored entries, correct CRCs) before
 *   loading it. So every mutation reaches the pickle reader, the code parser and the
 *   ATen lowering. The bundle is
 *
 *       <bytes of data.pkl>
 *       \n@@<name>\n<bytes of entry name>
 *       \n@@<name>\n<bytes of entry name> ...
 *
 *   where <name> is 1 to 200 characters of [A-Za-z0-9_./-], a path inside the archive's
 *   folder ("code/__torch__.py", "constants.pkl", "data/0"). A "\n@@" not followed by
 *   such a name and a newline is part of the entry's bytes. A later entry of the same
 *   name replaces an earlier one; at most MAX_ENTRIES entries, the rest of the input
 *   belongs to the last. A bundle without constants.pkl gets an empty tuple there, so
 *   that a bare pickle or a data.pkl with its code goes on past it. The seeds
 *   (make_seeds.py) hold every fixture of tests/models/ts in both forms.
 */
#include "fuzz_model.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#define MAX_ENTRIES 256
#define MAX_NAME 200
#define FOLDER "archive/"

typedef struct entry {
  char name[sizeof FOLDER + MAX_NAME];
  const uint8_t *data;
  size_t len;
} entry;

static bool name_char(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '.' || c == '/' || c == '-';
}

/* If an entry header "\n@@<name>\n" starts at p, its name length; else 0. */
static size_t header_at(const uint8_t *p, size_t left) {
  if (left < 5 || p[0] != '\n' || p[1] != '@' || p[2] != '@') return 0;
  size_t n = 0;
  while (n < MAX_NAME && 3 + n < left && name_char(p[3 + n])) n++;
  return n > 0 && 3 + n < left && p[3 + n] == '\n' ? n : 0;
}

static void set_name(entry *e, const uint8_t *name, size_t n) {
  memcpy(e->name, FOLDER, sizeof FOLDER - 1);
  memcpy(e->name + sizeof FOLDER - 1, name, n);
  e->name[sizeof FOLDER - 1 + n] = 0;
}

/* Split a bundle into entries; returns how many. */
static int split_bundle(const uint8_t *data, size_t size, entry *out) {
  int n = 1;
  set_name(&out[0], (const uint8_t *)"data.pkl", 8);
  out[0].data = data;
  size_t start = 0;
  for (size_t i = 0; i < size && n < MAX_ENTRIES; i++) {
    size_t name_len = header_at(data + i, size - i);
    if (!name_len) continue;
    out[n - 1].len = i - start;
    set_name(&out[n], data + i + 3, name_len);
    start = i + 3 + name_len + 1;
    out[n].data = data + start;
    n++;
    i = start - 1;
  }
  out[n - 1].len = size - start;
  return n;
}

/* The bundle as a ZIP archive in a malloc'd buffer; NULL when libzip fails (out of
 * memory: any bytes under any allowed name make a valid archive). */
static uint8_t *pack_bundle(const uint8_t *data, size_t size, size_t *zip_len) {
  static entry entries[MAX_ENTRIES];
  static const uint8_t empty_tuple[] = {0x80, 0x02, ')', '.'}; /* PROTO 2, (), STOP */
  int n = split_bundle(data, size, entries);
  bool have_constants = false;
  for (int i = 0; i < n; i++) have_constants |= strcmp(entries[i].name, FOLDER "constants.pkl") == 0;
  if (!have_constants && n < MAX_ENTRIES) {
    set_name(&entries[n], (const uint8_t *)"constants.pkl", 13);
    entries[n].data = empty_tuple;
    entries[n++].len = sizeof empty_tuple;
  }
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t *src = zip_source_buffer_create(NULL, 0, 0, &ze);
  zip_t *za = src ? zip_open_from_source(src, ZIP_TRUNCATE, &ze) : NULL;
  zip_error_fini(&ze);
  if (!za) {
    zip_source_free(src);
    return NULL;
  }
  zip_source_keep(src); /* zip_close would free it; the archive is read from it after */
  bool ok = true;
  for (int i = 0; ok && i < n; i++) {
    zip_source_t *s = zip_source_buffer(za, entries[i].data, entries[i].len, 0);
    ok = s != NULL;
    /* a name libzip refuses (none known) leaves that entry out, as a writer would */
    zip_int64_t idx = s ? zip_file_add(za, entries[i].name, s, ZIP_FL_OVERWRITE) : -1;
    if (s && idx < 0) zip_source_free(s);
    if (idx >= 0) ok = zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0) == 0;
  }
  if (!ok || zip_close(za) != 0) {
    zip_discard(za);
    zip_source_free(src);
    return NULL;
  }
  uint8_t *buf = NULL;
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_source_stat(src, &st) == 0 && (st.valid & ZIP_STAT_SIZE) && st.size > 0 &&
      zip_source_open(src) == 0) {
    buf = malloc((size_t)st.size);
    if (buf && zip_source_read(src, buf, st.size) != (zip_int64_t)st.size) {
      free(buf);
      buf = NULL;
    }
    zip_source_close(src);
  }
  zip_source_free(src);
  *zip_len = buf ? (size_t)st.size : 0;
  return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint64_t seed = fuzz_hash_bytes(data, size);
  if (size >= 4 && memcmp(data, "PK\003\004", 4) == 0) {
    fuzz_model_check("fuzz_torchscript", data, size, seed);
    return 0;
  }
  size_t len;
  uint8_t *zip = pack_bundle(data, size, &len);
  if (!zip) __builtin_trap(); /* libzip failed on valid entries: a bug here */
  fuzz_model_check("fuzz_torchscript", zip, len, seed);
  free(zip);
  return 0;
}
