/* The TorchScript importer (see torchscript.h): the archive, the module tree, and an
 * interpreter that runs the traced forward code symbolically into graph nodes. */
#include "import/torchscript.h"
#include "import/fileio.h"
#include "import/zipentry.h"
#include "ir/strmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#define MAX_ENTRIES (1 << 20)               /* files in one archive */
#define MAX_TEXT_BYTES ((size_t)64 << 20)   /* a pickle or code file */
#define MAX_CALL_DEPTH 64                   /* module calls nested in each other */
#define MAX_APPEND_COPIES (1 << 20)         /* list elements that appends copy, in all:
                                             * each copies its list (lists are values) */
#define MAX_MOVED (1 << 20)                 /* statements copied into the paths of ifs
                                             * with a return, in all */
#define MAX_IF_RETURNS 256                  /* such ifs in the paths of each other */
#define MAX_UNROLLED (1 << 16)              /* passes of loops unrolled while building,
                                             * in all: a hostile range(10**12) whose
                                             * body only reverses a list would not end */
#define MAX_STATEMENTS (1 << 17)            /* statements run in all (inlining): a
                                             * module calling its child twice, 24 deep,
                                             * inlines 2^24 calls */
#define BUILD_FOLD_LIMIT (1 << 20)          /* bytes of the results of a node on
                                             * constants run while building */
#define MAX_PICKLED_VALUES (1 << 17)        /* pickled values read in all: the memo
                                             * shares objects, so a pickle of 100 bytes
                                             * can expand to 2^60 values */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_BIG_ENDIAN 1
#else
#define HOST_BIG_ENDIAN 0
#endif

/* ---- the archive ---- */

typedef struct archive {
  zip_t *z;
  char *prefix; /* "name/", the top folder every entry sits in */
  const char *path;
} archive;

static kiln_status zip_failure(const char *path, zip_error_t *ze, kl_err *e) {
  /* a file that cannot be opened or read is an I/O error, as for ONNX files */
  int code = zip_error_code_zip(ze);
  bool io = code == ZIP_ER_NOENT || code == ZIP_ER_OPEN || code == ZIP_ER_READ;
  kiln_status s = io ? kl_fail(e, KILN_ERR_IO, "%s: cannot read the file (%s)", path,
                               zip_error_strerror(ze))
                     : kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: not a readable ZIP archive "
                               "(%s)", path, zip_error_strerror(ze));
  zip_error_fini(ze);
  return s;
}

static int by_name(const void *x, const void *y) {
  return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* Two entries of one name: which one a reader takes is the reader's choice (libzip's
 * first, another tool's last), so such an archive means two things and is refused
 * (two byteorder entries once silently gave the first). */
static kiln_status no_twins(archive *a, zip_int64_t n, kl_err *e) {
  const char **names = malloc(sizeof *names * (size_t)(n ? n : 1));
  if (!names) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  zip_int64_t have = 0;
  for (zip_int64_t i = 0; i < n; i++) {
    const char *name = zip_get_name(a->z, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
    if (name) names[have++] = name;
  }
  qsort(names, (size_t)have, sizeof *names, by_name);
  kiln_status st = KILN_OK;
  for (zip_int64_t i = 1; i < have && st == KILN_OK; i++)
    if (strcmp(names[i - 1], names[i]) == 0)
      st = kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: the archive has two entries named '%s'",
                   a->path, names[i]);
  free(names);
  return st;
}

/* The top folder: the one holding data.pkl. */
static kiln_status find_prefix(archive *a, kl_err *e) {
  zip_int64_t n = zip_get_num_entries(a->z, 0);
  if (n < 0 || n > MAX_ENTRIES)
    return kl_fail(e, KILN_ERR_LIMIT, "%s: %lld entries, over the limit of %d", a->path,
                   (long long)n, MAX_ENTRIES);
  kiln_status st = no_twins(a, n, e);
  if (st != KILN_OK) return st;
  for (zip_int64_t i = 0; i < n; i++) {
    const char *name = zip_get_name(a->z, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
    const char *slash = name ? strchr(name, '/') : NULL;
    if (!slash || strcmp(slash + 1, "data.pkl") != 0) continue;
    size_t len = (size_t)(slash - name) + 1;
    if (!(a->prefix = malloc(len + 1))) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(a->prefix, name, len);
    a->prefix[len] = 0;
    return KILN_OK;
  }
  return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: a ZIP archive without <folder>/data.pkl: "
                 "not a TorchScript file (torch.jit.save)", a->path);
}

/* The archive in buf (len bytes), or else in fd (taken when it opens). */
static zip_t *open_zip(int fd, const void *buf, size_t len, int flags, zip_error_t *ze) {
  if (buf) {
    zip_source_t *src = zip_source_buffer_create(buf, len, 0, ze);
    zip_t *z = src ? zip_open_from_source(src, flags, ze) : NULL;
    if (src && !z) zip_source_free(src);
    return z;
  }
  int code = 0;
  zip_t *z = zip_fdopen(fd, flags, &code);
  if (!z) zip_error_init_with_code(ze, code);
  return z;
}

/* ZIP_CHECKCONS: each entry's local header checked against the central directory's
 * (signature, name, method, sizes); without it libzip skips whatever lies at an entry's
 * offset, and an offset into the central directory read its bytes as the storage's
 * data, exit 0 (round 6 of issue 20). That check refuses two entries of one name
 * without naming them, so such an archive is opened again without it to name them. */
static kiln_status ar_open(archive *a, const char *path, const void *buf, size_t len,
                           kl_err *e) {
  zip_error_t ze;
  zip_error_init(&ze);
  a->path = path;
  int fd = -1; /* a regular file only: a FIFO would block zip_open forever */
  if (!buf && (fd = kl_open_regular(path, 0, "the model", KILN_ERR_IO, e)) < 0) return e->code;
  a->z = open_zip(fd, buf, len, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
  if (!a->z && zip_error_code_zip(&ze) == ZIP_ER_EXISTS &&
      (a->z = open_zip(fd, buf, len, ZIP_RDONLY, &ze))) {
    zip_error_fini(&ze);
    kiln_status st = no_twins(a, zip_get_num_entries(a->z, 0), e);
    return st != KILN_OK ? st : kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: not a readable ZIP "
                                        "archive (two entries of one name)", path);
  }
  if (!a->z) {
    if (fd >= 0) close(fd);
    return zip_failure(path, &ze, e);
  }
  zip_error_fini(&ze);
  return find_prefix(a, e);
}

static void ar_close(archive *a) {
  if (a->z) zip_discard(a->z);
  free(a->prefix);
}

/* Read entry prefix+name (at most max bytes) into a malloc'd buffer with a NUL after
 * it. A missing entry is KILN_ERR_NOT_FOUND when optional, else an error. */
static kiln_status ar_read(archive *a, const char *name, size_t max, bool optional,
                           char **buf, size_t *len, kl_err *e) {
  char full[1024];
  *buf = NULL;
  *len = 0;
  if ((size_t)snprintf(full, sizeof full, "%s%s", a->prefix, name) >= sizeof full)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: entry name '%s' is too long", a->path, name);
  zip_stat_t st;
  zip_int64_t idx = zip_name_locate(a->z, full, ZIP_FL_ENC_RAW);
  if (idx < 0) {
    if (optional) return KILN_ERR_NOT_FOUND;
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: the archive has no entry '%s'", a->path, full);
  }
  if (zip_stat_index(a->z, (zip_uint64_t)idx, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: cannot read the size of '%s'", a->path, full);
  if (st.size > max)
    return kl_fail(e, KILN_ERR_LIMIT, "%s: entry '%s' has %llu bytes, over the limit of %zu",
                   a->path, full, (unsigned long long)st.size, max);
  zip_file_t *f = zip_fopen_index(a->z, (zip_uint64_t)idx, 0);
  char *p = malloc((size_t)st.size + 1);
  kiln_status s = KILN_OK;
  if (!p) s = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory reading '%s'", full);
  else if (!f || !kl_zip_read_entry(f, p, st.size))
    s = kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: entry '%s' is damaged or truncated (%s)",
                a->path, full, f ? zip_file_strerror(f) : zip_strerror(a->z));
  if (f) zip_fclose(f);
  if (s != KILN_OK) {
    free(p);
    return s;
  }
  p[st.size] = 0;
  *buf = p;
  *len = (size_t)st.size;
  return KILN_OK;
}

/* ---- the builder ---- */

typedef struct ts_block {
  struct ts_block *next;
  max_align_t data[];
} ts_block;

typedef struct code_file {
  char *path;
  kl_ts_code *code;
} code_file;

typedef struct tensor_ref {
  const kl_pk_obj *obj;
  int id;
} tensor_ref;

/* A storage entry read before: how often, and its bytes once read twice (storage_get). */
typedef struct storage_ref {
  char *entry;
  int reads;
  char *raw; /* kept from the second read on, while the cache has room */
  size_t have;
} storage_ref;

typedef struct frame {
  const char **names;
  kl_tsv *vals;
  int n, cap;
  struct frame *up; /* the frame running before this one: a function's caller's, a
                     * body's enclosing one */
} frame;

struct kl_ts_build {
  kl_graph *g;
  kl_err *e;
  archive ar;
  int64_t max_bytes;
  ts_block *blocks;
  kl_pickle *data_pkl, *const_pkl;
  const kl_pk_obj *root, *constants;
  code_file *files;
  int n_files;
  tensor_ref *tensors;
  int n_tensors, cap_tensors;
  int tensors_from; /* the first of tensors in b->g (a body has its own constants) */
  storage_ref *storages;  /* entries read, by first read */
  int n_storages, cap_storages;
  kl_strmap *storage_ids; /* entry -> index in storages */
  size_t cached_bytes;    /* of the storages' raw bytes kept, at most max_bytes */
  void *aten_state; /* aten.c's (view records), in blocks of kl_ts_alloc */
  const char *scope;    /* the attribute path of the module running, "" at the top */
  const char *aten;     /* the call being lowered, "aten::relu" */
  const char *where;    /* the code file running, for messages */
  int line;
  int depth;
  int bodies; /* If/Loop bodies being built around the statement running */
  int loops;  /* loop bodies around it, in the function running */
  /* the list that the body of the Loop being built appends to once per pass (its
   * name, NULL when none; the body's frame), and the element the pass being built
   * appended (-1 before the append) */
  const char *scan_name;
  const struct frame *scan_frame;
  int scan_id;
  struct frame *frame; /* the frame running: a function's, a method's or a body's */
  int64_t appended;    /* list elements copied by appends, against MAX_APPEND_COPIES */
  int64_t unrolled;    /* passes of unrolled loops, against MAX_UNROLLED */
  int64_t moved;       /* statements copied after ifs with a return, against MAX_MOVED */
  int if_returns;      /* ifs with a return being run, each in the path of the one before */
  int64_t statements;
  /* raises on paths the data chooses (kiln.Check): raise_code, the int64 0-D value of
   * b->g that is 0 or 1 + the index in raises of the raise the run reached, or -1 when
   * no raise can be reached yet; raised, while a raise ends the path being built */
  int raise_code;
  bool raised;
  char **raises;
  int n_raises, cap_raises;
  int64_t pickled_values; /* expanded by pickled_value, against MAX_PICKLED_VALUES */
  const char *input_types; /* kiln_options "input_types", or NULL */
  /* module attributes the code set ("self.flag = value"), by their attribute path: read
   * before data.pkl's */
  frame attrs;
};

kl_err *kl_ts_err(kl_ts_build *b) { return b->e; }
kl_graph *kl_ts_graph(kl_ts_build *b) { return b->g; }
const kl_type *kl_ts_type(kl_ts_build *b, int id) { return &b->g->values[id].type; }

void **kl_ts_aten_state(kl_ts_build *b) { return &b->aten_state; }
int kl_ts_bodies(const kl_ts_build *b) { return b->bodies; }

kiln_status kl_ts_list_copied(kl_ts_build *b, int64_t n) {
  if ((b->appended += n) <= MAX_APPEND_COPIES) return KILN_OK;
  return kl_fail(b->e, KILN_ERR_LIMIT, "%s:%d: list operations (append, +, slices) that "
                 "copy more than %d list elements in all (a list built by append of more "
                 "than about 1400)", b->where, b->line, MAX_APPEND_COPIES);
}

void *kl_ts_alloc(kl_ts_build *b, size_t size) {
  ts_block *blk = calloc(1, sizeof *blk + (size ? size : 1));
  if (!blk) {
    kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return NULL;
  }
  blk->next = b->blocks;
  b->blocks = blk;
  return blk->data;
}

static char *build_strdup(kl_ts_build *b, const char *s) {
  size_t n = strlen(s);
  char *r = kl_ts_alloc(b, n + 1);
  if (r) memcpy(r, s, n + 1);
  return r;
}

/* A value name not taken yet: base, else base_1, base_2, ... */
static int add_named_value(kl_ts_build *b, const char *base) {
  char name[512];
  snprintf(name, sizeof name, "%s", base);
  for (int k = 1; kl_graph_find_value(b->g, name) >= 0; k++)
    snprintf(name, sizeof name, "%.480s_%d", base, k);
  return kl_graph_add_value(b->g, name, b->e);
}

int kl_ts_node(kl_ts_build *b, kl_op op, int n_in, const int *in_ids, int n_out, int *out) {
  int in[64]; /* a copy: out may alias in_ids */
  if (n_in > 64 || n_out > 64)
    return kl_fail(b->e, KILN_ERR_LIMIT, "%s: a node of over 64 inputs or outputs", b->aten), -1;
  if (n_in) memcpy(in, in_ids, sizeof *in * (size_t)n_in);
  for (int k = 0; k < n_out; k++)
    if ((out[k] = kl_graph_add_value(b->g, NULL, b->e)) < 0) return -1;
  const char *short_name = strstr(b->aten, "::");
  char name[512];
  snprintf(name, sizeof name, "%s%s%s", b->scope, *b->scope ? "/" : "",
           short_name ? short_name + 2 : b->aten);
  int node = kl_graph_add_node(b->g, op, name, n_in, in, n_out, out, b->e);
  if (node < 0) return -1;
  char *src = strdup(b->aten);
  if (!src) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
  free(b->g->nodes[node].src);
  b->g->nodes[node].src = src;
  return node;
}

/* Shape and dtype inference of one node, as the graph-level pass does it, so that
 * lowering can read the ranks and dims of what it built so far. */
kiln_status kl_ts_finish(kl_ts_build *b, int node) {
  kl_node *n = &b->g->nodes[node];
  const kl_type *in[64];
  const void *data[64];
  kl_type out[64];
  if (n->n_in > 64 || n->n_out > 64)
    return kl_fail(b->e, KILN_ERR_LIMIT, "%s: more than 64 inputs or outputs", b->aten);
  for (int k = 0; k < n->n_in; k++) {
    const kl_value *v = n->in[k] >= 0 ? &b->g->values[n->in[k]] : NULL;
    in[k] = v ? &v->type : NULL;
    data[k] = v && v->kind == KL_VALUE_CONST ? v->data : NULL;
  }
  for (int k = 0; k < n->n_out; k++) {
    memset(&out[k], 0, sizeof out[k]);
    out[k].rank = -1;
  }
  kl_infer_ctx ctx = {b->g, n, n->n_in, n->n_out, in, data, out, b->e, false};
  kiln_status s = (kiln_status)kl_op_get(n->op)->infer(&ctx);
  if (s != KILN_OK) return s;
  for (int k = 0; k < n->n_out; k++) b->g->values[n->out[k]].type = out[k];
  /* inputs all constants: run it now, so that what it computes is known while building
   * (the sizes and scales torchvision's transform computes from an image's dims, taken
   * by item()) */
  bool folded = false;
  if (node == b->g->n_nodes - 1 && kl_node_inputs_known(b->g, n) &&
      (s = kl_node_fold(b->g, node, BUILD_FOLD_LIMIT, false, &folded, b->e)) != KILN_OK)
    return s;
  if (folded) kl_graph_pop_node(b->g);
  return KILN_OK;
}

int64_t kl_ts_max_bytes(const kl_ts_build *b) { return b->max_bytes; }

int kl_ts_const_data(kl_ts_build *b, kl_dtype dtype, int rank, const int64_t *dims,
                     void *data, size_t nbytes) {
  return kl_graph_add_const(b->g, NULL, dtype, rank, dims, data, nbytes, false, b->e);
}

int kl_ts_const_i64(kl_ts_build *b, const int64_t *v, int n, bool scalar) {
  int64_t dim = n;
  int64_t *data = malloc(sizeof *data * (size_t)(n ? n : 1));
  if (!data) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1;
  if (n) memcpy(data, v, sizeof *data * (size_t)n);
  return kl_ts_const_data(b, KL_I64, scalar ? 0 : 1, &dim, data, sizeof *data * (size_t)n);
}

int kl_ts_const_scalar(kl_ts_build *b, kl_dtype dtype, double v) {
  size_t size = kl_dtype_size(dtype);
  void *data = size ? malloc(size) : NULL;
  if (!data) return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "a scalar of dtype %s",
                            kl_dtype_name(dtype)), -1;
  kl_store_f64(data, dtype, 0, v);
  return kl_ts_const_data(b, dtype, 0, NULL, data, size);
}

/* ---- tensors from storages ---- */

/* The highest storage element the tensor touches, or -1 when it is empty. */
static bool tensor_extent(const kl_pk_obj *t, int64_t numel, int64_t *last) {
  int64_t hi = t->i;
  *last = -1;
  if (numel == 0) return true;
  for (int d = 0; d < t->rank; d++) {
    int64_t step;
    if (t->strides[d] < 0 || kl_mul_overflow_i64(t->sizes[d] - 1, t->strides[d], &step) ||
        __builtin_add_overflow(hi, step, &hi))
      return false;
  }
  *last = hi;
  return true;
}

/* Copy the strided view of src into dst in row-major order, a row (the last dim) at a
 * time: one copy when its stride is 1, one element repeated by doubling copies when it
 * is 0 (an expand: element by element, a 2.1 GB one took 78 s). */
/* The rows and columns of a block of gather_tiled: 64 x 64 elements, whose source
 * columns and output rows stay in the cache while the block is copied. */
#define GATHER_TILE 64

/* gather_strided for a view whose last dim strides further than the one before it (a
 * transpose, [R, C] with strides [1, R]): its last two dims copied in blocks, so that
 * neither the storage's columns nor the output's rows are walked a cache miss an
 * element (a transposed [16384, 16384] view of a 1 GiB storage: 4 s of 7.7 to load). */
static void gather_tiled(const kl_pk_obj *t, const char *src, char *dst, int64_t numel,
                         size_t size) {
  int64_t idx[KL_MAX_RANK] = {0};
  int last = t->rank - 1, prev = last - 1;
  int64_t cols = t->sizes[last], step = t->strides[last];
  int64_t rows = t->sizes[prev], rstep = t->strides[prev], plane = rows * cols;
  for (int64_t k = 0; k < numel && plane > 0; k += plane) {
    int64_t off = t->i;
    for (int d = 0; d < prev; d++) off += idx[d] * t->strides[d];
    char *out = dst + (size_t)k * size;
    for (int64_t r0 = 0; r0 < rows; r0 += GATHER_TILE)
      for (int64_t c0 = 0; c0 < cols; c0 += GATHER_TILE) {
        int64_t r1 = rows - r0 < GATHER_TILE ? rows : r0 + GATHER_TILE;
        int64_t c1 = cols - c0 < GATHER_TILE ? cols : c0 + GATHER_TILE;
        for (int64_t r = r0; r < r1; r++)
          for (int64_t c = c0; c < c1; c++)
            memcpy(out + (size_t)(r * cols + c) * size,
                   src + (size_t)(off + r * rstep + c * step) * size, size);
      }
    for (int d = prev - 1; d >= 0 && ++idx[d] == t->sizes[d]; d--) idx[d] = 0;
  }
}

static void gather_strided(const kl_pk_obj *t, const char *src, char *dst, int64_t numel,
                           size_t size) {
  int64_t idx[KL_MAX_RANK] = {0};
  int last = t->rank - 1;
  int64_t row = last >= 0 ? t->sizes[last] : 1, step = last >= 0 ? t->strides[last] : 0;
  if (last >= 1 && step > 1 && t->sizes[last - 1] > 1 && t->strides[last - 1] < step) {
    gather_tiled(t, src, dst, numel, size);
    return;
  }
  size_t row_bytes = (size_t)row * size;
  for (int64_t k = 0; k < numel && row > 0; k += row) {
    int64_t off = t->i;
    for (int d = 0; d < last; d++) off += idx[d] * t->strides[d];
    char *out = dst + (size_t)k * size;
    const char *in = src + (size_t)off * size;
    if (step == 1 || row == 1) {
      memcpy(out, in, row_bytes);
    } else if (step == 0) {
      memcpy(out, in, size);
      for (size_t done = size; done < row_bytes; done *= 2)
        memcpy(out + done, out, done < row_bytes - done ? done : row_bytes - done);
    } else {
      for (int64_t j = 0; j < row; j++)
        memcpy(out + (size_t)j * size, in + (size_t)(j * step) * size, size);
    }
    for (int d = last - 1; d >= 0 && ++idx[d] == t->sizes[d]; d--) idx[d] = 0;
  }
}

/* The bytes of storage entry (at most max) into *raw; *owned when the caller frees
 * them, else they stay in the build's cache. A storage is read again for every tensor
 * viewing it, so from its second read on it is kept (while the kept ones total at most
 * the tensor limit): 600 views of one deflated 256 MiB storage inflated it 600 times
 * (over 400 s from a 342 KB file). One read of each, the usual case, keeps nothing. */
static kiln_status storage_get(kl_ts_build *b, const char *entry, size_t max, char **raw,
                               size_t *have, bool *owned) {
  if (!b->storage_ids && !(b->storage_ids = kl_strmap_new()))
    return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  int id = kl_strmap_get(b->storage_ids, entry);
  if (id >= 0 && b->storages[id].raw) {
    *raw = b->storages[id].raw;
    *have = b->storages[id].have;
    *owned = false;
    return KILN_OK;
  }
  if (id < 0) {
    if (b->n_storages == b->cap_storages) {
      int cap = b->cap_storages ? b->cap_storages * 2 : 64;
      storage_ref *p = realloc(b->storages, sizeof *p * (size_t)cap);
      if (!p) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      b->storages = p;
      b->cap_storages = cap;
    }
    storage_ref *r = &b->storages[b->n_storages];
    memset(r, 0, sizeof *r);
    if (!(r->entry = strdup(entry)) || !kl_strmap_put(b->storage_ids, r->entry, b->n_storages)) {
      free(r->entry);
      return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    id = b->n_storages++;
  }
  kiln_status s = ar_read(&b->ar, entry, max, false, raw, have, b->e);
  if (s != KILN_OK) return s;
  storage_ref *r = &b->storages[id];
  *owned = true;
  if (++r->reads >= 2 && *have <= (uint64_t)b->max_bytes - b->cached_bytes) {
    r->raw = *raw;
    r->have = *have;
    b->cached_bytes += *have;
    *owned = false;
  }
  return KILN_OK;
}

static bool is_contiguous(const kl_pk_obj *t) {
  int64_t expect = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    if (t->sizes[d] != 1 && t->strides[d] != expect) return false;
    expect *= t->sizes[d];
  }
  return true;
}

static kiln_status check_storage_key(kl_ts_build *b, const char *key) {
  for (const char *p = key; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
          *p == '_'))
      return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s: storage key '%s' is not a plain name",
                     b->ar.path, key);
  return *key ? KILN_OK : kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s: empty storage key",
                                   b->ar.path);
}

/* The tensor's elements, contiguous, in a malloc'd buffer of *nbytes. */
static kiln_status read_tensor(kl_ts_build *b, const kl_pk_obj *t, const char *dir,
                               const char *what, void **out, size_t *nbytes) {
  const kl_pk_obj *st = t->storage;
  size_t size = kl_dtype_size(t->dtype), need = 0, have = 0;
  int64_t numel, last;
  /* as every tensor of the IR: an empty one with huge other dims ([0, 2^62, 4]) too,
   * or its strides would overflow (it reached the verifier as a kiln bug) */
  if (!kl_dims_fit(t->rank, t->sizes, &numel))
    return kl_fail(b->e, KILN_ERR_LIMIT, "%s: tensor '%s' has a negative size or sizes too "
                   "large (their product, an empty dim counted as 1, over 2^59)", b->ar.path,
                   what);
  if (kl_mul_overflow_size((size_t)numel, size, nbytes) || *nbytes > (uint64_t)b->max_bytes)
    return kl_fail(b->e, KILN_ERR_LIMIT, "%s: tensor '%s' is larger than the limit of %lld "
                   "bytes", b->ar.path, what, (long long)b->max_bytes);
  if (!tensor_extent(t, numel, &last) || t->i < 0 || last >= st->i)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s: tensor '%s' (offset %lld) reaches past "
                   "the %lld elements of its storage '%s'", b->ar.path, what,
                   (long long)t->i, (long long)st->i, st->s);
  kiln_status s = check_storage_key(b, st->s);
  char entry[300], *raw = NULL;
  snprintf(entry, sizeof entry, "%s/%.200s", dir, st->s);
  if (s == KILN_OK && (kl_mul_overflow_size((size_t)st->i, size, &need) ||
                       need > (uint64_t)b->max_bytes))
    s = kl_fail(b->e, KILN_ERR_LIMIT, "%s: storage '%s' is larger than the tensor limit",
                b->ar.path, entry);
  bool owned = false;
  if (s == KILN_OK) s = storage_get(b, entry, need, &raw, &have, &owned);
  if (s == KILN_OK && have < need)
    s = kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s: storage '%s' holds %zu bytes; its %lld "
                "%s elements need %zu", b->ar.path, entry, have, (long long)st->i,
                kl_dtype_name(t->dtype), need);
  char *data = s == KILN_OK ? malloc(*nbytes ? *nbytes : 1) : NULL;
  if (s == KILN_OK && !data) s = kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (s == KILN_OK && is_contiguous(t)) {
    if (*nbytes) memcpy(data, raw + (size_t)t->i * size, *nbytes);
  } else if (s == KILN_OK) {
    gather_strided(t, raw, data, numel, size);
  }
  if (owned) free(raw);
  if (s != KILN_OK) free(data);
  else *out = data;
  return s;
}

/* The graph constant of a pickled tensor, made once per tensor object. */
static kiln_status tensor_value(kl_ts_build *b, const kl_pk_obj *t, const char *dir,
                                const char *name, int *id) {
  for (int i = b->tensors_from; i < b->n_tensors; i++) /* those of this graph */
    if (b->tensors[i].obj == t) return *id = b->tensors[i].id, KILN_OK;
  if (b->n_tensors == b->cap_tensors) {
    int cap = b->cap_tensors ? b->cap_tensors * 2 : 64;
    tensor_ref *p = realloc(b->tensors, sizeof *p * (size_t)cap);
    if (!p) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    b->tensors = p;
    b->cap_tensors = cap;
  }
  void *data;
  size_t nbytes;
  kiln_status s = read_tensor(b, t, dir, name, &data, &nbytes);
  if (s != KILN_OK) return s;
  int v = add_named_value(b, name);
  if (v < 0) {
    free(data);
    return b->e->code;
  }
  kl_value *val = &b->g->values[v];
  val->kind = KL_VALUE_CONST;
  val->type.dtype = t->dtype;
  kl_type_set_shape(&val->type, t->rank, t->sizes);
  val->data = data;
  val->nbytes = nbytes;
  b->tensors[b->n_tensors++] = (tensor_ref){t, v};
  *id = v;
  return KILN_OK;
}

/* ---- pickled attributes as builder values ---- */

static char *join_path(kl_ts_build *b, const char *base, const char *name) {
  size_t n = strlen(base) + strlen(name) + 2;
  char *r = kl_ts_alloc(b, n);
  if (r) snprintf(r, n, "%s%s%s", base, *base ? "." : "", name);
  return r;
}

static kiln_status pickled_value(kl_ts_build *b, const kl_pk_obj *o, const char *path,
                                 const char *dir, kl_tsv *out);

/* A dict attribute (torchvision's IntermediateLayerGetter.return_layers, a Dict[str,
 * str]): a dict of string keys, as the code's own (kl_tsv DICT). */
static kiln_status pickled_dict(kl_ts_build *b, const kl_pk_obj *o, const char *path,
                                const char *dir, kl_tsv *out) {
  int n = o->n / 2;
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)(n + 1));
  const char **keys = kl_ts_alloc(b, sizeof *keys * (size_t)(n + 1));
  if (!items || !keys) return b->e->code;
  for (int k = 0; k < n; k++) {
    const kl_pk_obj *key = o->items[2 * k];
    if (key->kind != KL_PK_STR)
      return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s: attribute '%s' is a dict with a key "
                     "that is a pickled %s, expected a string (kiln reads dicts of string "
                     "keys)", b->ar.path, path, kl_pk_kind_name(key->kind));
    const char *p = join_path(b, path, key->s);
    kiln_status s = p ? pickled_value(b, o->items[2 * k + 1], p, dir, &items[k]) : b->e->code;
    if (s != KILN_OK) return s;
    keys[k] = key->s;
  }
  *out = (kl_tsv){.kind = KL_TSV_DICT, .items = items, .fields = keys, .n = n, .id = -1};
  return KILN_OK;
}

static kiln_status pickled_value(kl_ts_build *b, const kl_pk_obj *o, const char *path,
                                 const char *dir, kl_tsv *out) {
  memset(out, 0, sizeof *out);
  out->id = -1;
  if (++b->pickled_values > MAX_PICKLED_VALUES)
    return kl_fail(b->e, KILN_ERR_LIMIT, "%s: attribute '%s': more than %d pickled values "
                   "to read (data shared many times over in the pickle, or modules inlined "
                   "too many times)", b->ar.path, path, MAX_PICKLED_VALUES);
  switch (o->kind) {
  case KL_PK_NONE: out->kind = KL_TSV_NONE; return KILN_OK;
  case KL_PK_BOOL: out->kind = KL_TSV_BOOL; out->i = o->i; return KILN_OK;
  case KL_PK_INT: out->kind = KL_TSV_INT; out->i = o->i; return KILN_OK;
  case KL_PK_FLOAT: out->kind = KL_TSV_FLOAT; out->f = o->f; return KILN_OK;
  case KL_PK_STR: out->kind = KL_TSV_STR; out->s = o->s; return KILN_OK;
  case KL_PK_OBJECT:
    out->kind = KL_TSV_MODULE;
    out->obj = o;
    out->s = path;
    return KILN_OK;
  case KL_PK_TENSOR: out->kind = KL_TSV_TENSOR; return tensor_value(b, o, dir, path, &out->id);
  case KL_PK_TUPLE:
  case KL_PK_LIST: {
    out->kind = o->kind == KL_PK_TUPLE ? KL_TSV_TUPLE : KL_TSV_LIST;
    out->n = o->n;
    if (!(out->items = kl_ts_alloc(b, sizeof *out->items * (size_t)o->n))) return b->e->code;
    for (int i = 0; i < o->n; i++) {
      char idx[24];
      snprintf(idx, sizeof idx, "%d", i);
      const char *p = join_path(b, path, idx);
      kiln_status s = p ? pickled_value(b, o->items[i], p, dir, &out->items[i]) : b->e->code;
      if (s != KILN_OK) return s;
    }
    return KILN_OK;
  }
  case KL_PK_DICT: return pickled_dict(b, o, path, dir, out);
  default:
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s: attribute '%s' is a pickled %s, which "
                   "kiln does not use", b->ar.path, path, kl_pk_kind_name(o->kind));
  }
}

static const kl_tsv *frame_get(const frame *f, const char *name);

static kiln_status module_attr(kl_ts_build *b, const kl_tsv *mod, const char *name,
                               kl_tsv *out) {
  if (mod->kind != KL_TSV_MODULE)
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: attribute '%s' of a value that is "
                   "not a module", b->where, b->line, name);
  const char *path = join_path(b, mod->s, name);
  if (!path) return b->e->code;
  const kl_tsv *set = frame_get(&b->attrs, path);
  if (set) return *out = *set, KILN_OK;
  const kl_pk_obj *v = kl_pk_dict_get(mod->obj->state, name);
  if (!v)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: module '%s' (%s) has no attribute "
                   "'%s' in data.pkl", b->where, b->line, *mod->s ? mod->s : "<top>",
                   mod->obj->name, name);
  return pickled_value(b, v, path, "data", out);
}

/* ---- code files ---- */

/* code/__torch__/a/b.py holds the classes of module __torch__.a.b */
static kiln_status load_code(kl_ts_build *b, const char *module, const kl_ts_code **out) {
  char path[600];
  if (strlen(module) > 500)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s: a module name over 500 characters",
                   b->ar.path);
  snprintf(path, sizeof path, "code/%s.py", module);
  for (char *p = path + 5; *p; p++)
    if (*p == '.' && strcmp(p, ".py") != 0) *p = '/';
  for (int i = 0; i < b->n_files; i++)
    if (strcmp(b->files[i].path, path) == 0) return *out = b->files[i].code, KILN_OK;
  code_file *f = realloc(b->files, sizeof *f * (size_t)(b->n_files + 1));
  if (!f) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  b->files = f;
  char *text;
  size_t len;
  kiln_status s = ar_read(&b->ar, path, MAX_TEXT_BYTES, false, &text, &len, b->e);
  if (s != KILN_OK) return s;
  kl_ts_code *code = NULL;
  char *stored = strdup(path);
  s = stored ? kl_tscode_parse(text, len, path, &code, b->e)
             : kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  free(text);
  if (s != KILN_OK) {
    free(stored);
    return s;
  }
  b->files[b->n_files++] = (code_file){stored, code};
  *out = code;
  return KILN_OK;
}

static kiln_status find_method(kl_ts_build *b, const kl_pk_obj *obj, const char *method,
                               const kl_ts_method **out, const char **file) {
  const kl_ts_code *code;
  *file = b->ar.path; /* (until the code file's path is found below) */
  kiln_status s = load_code(b, obj->s, &code);
  if (s != KILN_OK) return s;
  const kl_ts_class *cls = kl_tscode_class(code, obj->name);
  if (!cls)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s: the code of %s has no class %s",
                   b->ar.path, obj->s, obj->name);
  if (!(*out = kl_tscode_method(cls, method)))
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s: class %s.%s has no method '%s'",
                   b->ar.path, obj->s, obj->name, method);
  for (int i = 0; i < b->n_files; i++)
    if (b->files[i].code == code) *file = b->files[i].path;
  return KILN_OK;
}

/* ---- the interpreter ---- */


static kiln_status frame_set(kl_ts_build *b, frame *f, const char *name, const kl_tsv *v) {
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->names[i], name) == 0) return f->vals[i] = *v, KILN_OK;
  if (f->n == f->cap) {
    int cap = f->cap ? f->cap * 2 : 16;
    const char **names = realloc(f->names, sizeof *names * (size_t)cap);
    if (names) f->names = names;
    kl_tsv *vals = names ? realloc(f->vals, sizeof *vals * (size_t)cap) : NULL;
    if (!vals) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    f->vals = vals;
    f->cap = cap;
  }
  f->names[f->n] = name;
  f->vals[f->n++] = *v;
  return KILN_OK;
}

static const kl_tsv *frame_get(const frame *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->names[i], name) == 0) return &f->vals[i];
  return NULL;
}

/* What uninitialized(T) gives (scripted code's placeholder for a value that the path
 * which sets it does not read): None with this s. */
static const char uninitialized[] = "uninitialized";

static bool is_uninit(const kl_tsv *v) { return v->kind == KL_TSV_NONE && v->s == uninitialized; }

/* After a raise on the path being built, what remains of it computes nothing: *out
 * a placeholder, true. */
static bool after_raise(const kl_ts_build *b, kl_tsv *out) {
  if (b->raised) *out = (kl_tsv){.kind = KL_TSV_NONE, .s = uninitialized, .id = -1};
  return b->raised;
}

static kiln_status eval(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out);
static kiln_status call_method(kl_ts_build *b, const kl_tsv *self, const char *method,
                               const kl_tsv *args, const char *const *kw, int n_args,
                               kl_tsv *out);
static bool is_object(const kl_tsv *v);
static kiln_status object_method(kl_ts_build *b, const kl_tsv *obj, const char *method,
                                 const kl_tsv *args, const char *const *kw, int n_args,
                                 kl_tsv *out);

/* "torch.relu" -> "relu", "ops.prim.NumToTensor" -> "prim::NumToTensor",
 * "ops.aten.relu" -> "relu"; NULL for anything else. */
static const char *aten_name(kl_ts_build *b, const frame *f, const kl_ts_expr *callee) {
  const kl_ts_expr *x = callee;
  if (x->kind != KL_TSE_ATTR || x->obj->kind == KL_TSE_CALL) return NULL;
  if (x->obj->kind == KL_TSE_NAME && strcmp(x->obj->s, "torch") == 0 &&
      !frame_get(f, "torch"))
    return x->s;
  const kl_ts_expr *ns = x->obj;
  if (ns->kind != KL_TSE_ATTR || ns->obj->kind != KL_TSE_NAME ||
      strcmp(ns->obj->s, "ops") != 0 || frame_get(f, "ops"))
    return NULL;
  if (strcmp(ns->s, "aten") == 0) return x->s;
  size_t n = strlen(ns->s) + strlen(x->s) + 3;
  char *r = kl_ts_alloc(b, n);
  if (r) snprintf(r, n, "%s::%s", ns->s, x->s);
  return r;
}

static kiln_status eval_args(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv **args) {
  *args = kl_ts_alloc(b, sizeof **args * (size_t)(x->n_args ? x->n_args : 1));
  if (!*args) return b->e->code;
  for (int k = 0; k < x->n_args; k++) {
    kiln_status s = eval(b, f, x->args[k], &(*args)[k]);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* The list methods list_call does (append and insert have their own). */
static bool list_method(const char *name) {
  return strcmp(name, "extend") == 0 || strcmp(name, "pop") == 0 ||
         strcmp(name, "reverse") == 0 || strcmp(name, "clear") == 0;
}

/* "; in all the code calls 3 ATen ops kiln does not lower: a, b, c" (every code file of
 * the archive read for torch.NAME( and ops.aten.NAME( calls), so that a user learns
 * every missing op at once; "" when this one is the only one, or on any trouble. */
static void every_missing_op(kl_ts_build *b, char *buf, size_t len) {
  enum { MAX_LISTED = 16 };
  char names[MAX_LISTED][64];
  int n = 0, more = 0;
  buf[0] = '\0';
  zip_int64_t entries = zip_get_num_entries(b->ar.z, 0);
  size_t plen = strlen(b->ar.prefix);
  for (zip_int64_t i = 0; i < entries && i < 100000; i++) {
    const char *path = zip_get_name(b->ar.z, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
    size_t l = path ? strlen(path) : 0;
    if (l < plen + 8 || strncmp(path, b->ar.prefix, plen) != 0 ||
        strncmp(path + plen, "code/", 5) != 0 || strcmp(path + l - 3, ".py") != 0)
      continue;
    char *text;
    size_t tlen;
    kl_err quiet = {0};
    if (ar_read(&b->ar, path + plen, MAX_TEXT_BYTES, false, &text, &tlen, &quiet) != KILN_OK)
      continue;
    for (const char *p = text; (p = strstr(p, "torch."));) {
      const char *q = p + 6;
      if (p > text && (p[-1] == '_' || p[-1] == '.' || (p[-1] >= 'a' && p[-1] <= 'z'))) {
        p = q;
        continue;
      }
      if (strncmp(p, "torch.ops.", 10) == 0) {
        p = q;
        continue;
      }
      size_t k = 0;
      while (k < 63 && (q[k] == '_' || (q[k] >= 'a' && q[k] <= 'z') ||
                        (q[k] >= '0' && q[k] <= '9')))
        k++;
      p = q + k;
      if (k == 0 || *p != '(' || k >= 63) continue;
      char name[64];
      memcpy(name, q, k);
      name[k] = 0;
      if (kl_aten_known(name) || strcmp(name, "warn") == 0 || strcmp(name, "format") == 0 ||
          strcmp(name, "append") == 0 || strcmp(name, "_set_item") == 0 ||
          strcmp(name, "dict") == 0 || strcmp(name, "insert") == 0 ||
          strcmp(name, "keys") == 0 || strcmp(name, "values") == 0 ||
          strcmp(name, "items") == 0 || strcmp(name, "setdefault") == 0 ||
          strcmp(name, "update") == 0 || list_method(name))
        continue; /* (a warning, a raise's message, list and dict methods: the
                   * interpreter's) */
      int j = 0;
      while (j < n && strcmp(names[j], name) != 0) j++;
      if (j < n) continue;
      if (n < MAX_LISTED) memcpy(names[n++], name, k + 1);
      else more++;
    }
    free(text);
  }
  if (n < 2) return;
  size_t used = (size_t)snprintf(buf, len, "; in all the code calls %s%d ATen ops kiln does "
                                 "not lower:", more ? "more than " : "", n);
  for (int j = 0; j < n && used < len; j++)
    used += (size_t)snprintf(buf + used, len - used, "%s %s", j ? "," : "", names[j]);
}

static kiln_status dict_call(kl_ts_build *b, const char *name, const kl_tsv *args, int n_args,
                             kl_tsv *out);
static kiln_status list_call(kl_ts_build *b, const char *name, const kl_tsv *args, int n_args,
                             kl_tsv *out);

static kiln_status eval_aten(kl_ts_build *b, frame *f, const kl_ts_expr *x, const char *name,
                             kl_tsv *out) {
  kl_tsv *args;
  kiln_status s = eval_args(b, f, x, &args);
  if (s != KILN_OK || after_raise(b, out)) return s;
  if (x->n_args && args[0].kind == KL_TSV_DICT) return dict_call(b, name, args, x->n_args, out);
  if (x->n_args && args[0].kind == KL_TSV_LIST && list_method(name))
    return list_call(b, name, args, x->n_args, out);
  bool ns = strstr(name, "::") != NULL; /* prim::X keeps its namespace */
  size_t len = strlen(name), pre = ns ? 0 : 6;
  char *full = kl_ts_alloc(b, len + 7);
  if (!full) return b->e->code;
  memcpy(full, "aten::", pre); /* (by hand: gcc 12's -O2 sanitized build saw a NULL %s) */
  memcpy(full + pre, name, len + 1);
  b->aten = full;
  bool known = ns || kl_aten_known(name);
  s = kl_aten_call(b, name, args, x->kw, x->n_args, out);
  if (s != KILN_OK) {
    char ctx[600], all[600];
    snprintf(ctx, sizeof ctx, "%s:%d: %s", b->where, b->line, full);
    if (strncmp(b->e->msg, ctx, strlen(ctx)) != 0) kl_err_prefix(b->e, "%s", ctx);
    if (!known && s == KILN_ERR_UNSUPPORTED) {
      every_missing_op(b, all, sizeof all);
      size_t m = strlen(b->e->msg);
      if (*all && m + 1 < sizeof b->e->msg)
        snprintf(b->e->msg + m, sizeof b->e->msg - m, "%s", all);
    }
  }
  return s;
}

static bool formattable(const kl_tsv *a, int depth);
static void format_arg(const kl_tsv *a, char *dst, size_t cap, size_t *u);

/* str(v) of a value known while building (SSDLite's extra feature maps are named by
 * str(i) of their index), as format writes it */
static kiln_status eval_str(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out) {
  kl_tsv v;
  kiln_status s = eval(b, f, x->args[0], &v);
  if (s != KILN_OK) return s;
  if (!formattable(&v, 0))
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: str() of a value that is not known "
                   "when the graph is built", b->where, b->line);
  char text[1024];
  size_t u = 0;
  text[0] = 0;
  format_arg(&v, text, sizeof text, &u);
  char *copy = kl_ts_alloc(b, u + 1);
  if (!copy) return b->e->code;
  memcpy(copy, text, u + 1);
  *out = (kl_tsv){.kind = KL_TSV_STR, .s = copy, .id = -1};
  return KILN_OK;
}

/* Whether v is of the type that torch names t ("Tensor", "list", ...): 1, 0, or -1 for a
 * name kiln does not know. */
static int of_type(const kl_tsv *v, const char *t) {
  static const struct {
    const char *name;
    kl_tsv_kind kind;
  } types[] = {{"Tensor", KL_TSV_TENSOR}, {"list", KL_TSV_LIST},  {"tuple", KL_TSV_TUPLE},
               {"int", KL_TSV_INT},       {"float", KL_TSV_FLOAT}, {"bool", KL_TSV_BOOL},
               {"str", KL_TSV_STR},       {"dict", KL_TSV_DICT},   {"NoneType", KL_TSV_NONE}};
  for (size_t k = 0; k < sizeof types / sizeof *types; k++)
    if (strcmp(types[k].name, t) == 0)
      return v->kind == types[k].kind || (v->kind == KL_TSV_STACK && types[k].kind == KL_TSV_LIST);
  return -1;
}

/* isinstance(value, T) or isinstance(value, (T1, T2, ...)), T a builtin type or Tensor
 * (scripted code asks it of a Union argument, torchvision's roi_align of its boxes): a
 * bool known while building, since every value's kind is. */
static kiln_status eval_isinstance(kl_ts_build *b, frame *f, const kl_ts_expr *x,
                                   kl_tsv *out) {
  const kl_ts_expr *t = x->n_args == 2 ? x->args[1] : NULL;
  bool many = t && t->kind == KL_TSE_TUPLE;
  int n = many ? t->n_args : 1;
  if (!t || n < 1 || (x->kw && (x->kw[0] || x->kw[1])))
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: isinstance takes a value and a type "
                   "or a tuple of types", b->where, b->line);
  kl_tsv v;
  kiln_status s = eval(b, f, x->args[0], &v);
  if (s != KILN_OK || after_raise(b, out)) return s;
  bool is = false;
  for (int k = 0; k < n; k++) {
    const kl_ts_expr *name = many ? t->args[k] : t;
    int r = name->kind == KL_TSE_NAME ? of_type(&v, name->s) : -1;
    if (r < 0)
      return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: isinstance of a type other than "
                     "Tensor, list, tuple, int, float, bool, str, dict or NoneType",
                     b->where, b->line);
    is |= r == 1;
  }
  *out = (kl_tsv){.kind = KL_TSV_BOOL, .i = is, .id = -1};
  return KILN_OK;
}

static kiln_status eval_builtin(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out) {
  const char *fn = x->obj->s;
  if (strcmp(fn, "getattr") == 0) {
    kl_tsv *args;
    kiln_status s = x->n_args == 2 ? eval_args(b, f, x, &args) : KILN_ERR_INVALID_MODEL;
    if (s == KILN_OK && args[1].kind == KL_TSV_STR) return module_attr(b, &args[0], args[1].s, out);
    if (s == KILN_OK || s == KILN_ERR_INVALID_MODEL)
      s = kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: getattr takes a module and a string",
                  b->where, b->line);
    return s;
  }
  if ((strcmp(fn, "annotate") == 0 || strcmp(fn, "unchecked_cast") == 0) && x->n_args == 1)
    return eval(b, f, x->args[0], out);
  if (strcmp(fn, "uninitialized") == 0) { /* a placeholder on paths that never read it */
    out->kind = KL_TSV_NONE;
    out->s = uninitialized;
    return KILN_OK;
  }
  if (strcmp(fn, "int") == 0 || strcmp(fn, "float") == 0 || strcmp(fn, "bool") == 0)
    return eval_aten(b, f, x, fn, out);
  if (strcmp(fn, "str") == 0 && x->n_args == 1) return eval_str(b, f, x, out);
  if (strcmp(fn, "isinstance") == 0) return eval_isinstance(b, f, x, out);
  return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: a call of '%s', which traced code does "
                 "not make: export with torch.jit.trace or to ONNX", b->where, b->line, fn);
}

/* A node of op on in (n_in of them) with one output, *out. */
static kiln_status node1(kl_ts_build *b, kl_op op, int n_in, const int *in, int *out) {
  int node = kl_ts_node(b, op, n_in, in, 1, out);
  return node < 0 ? b->e->code : kl_ts_finish(b, node);
}

/* *is_zero: whether raise code `code` (a value of b->g) is 0: no raise reached. */
static kiln_status no_raise(kl_ts_build *b, int code, int *is_zero) {
  int zero = kl_ts_const_scalar(b, KL_I64, 0);
  b->aten = "prim::RaiseException";
  return zero < 0 ? b->e->code : node1(b, KL_OP_Equal, 2, (int[]){code, zero}, is_zero);
}

/* b->raise_code := code where no raise was reached before (the first raise reached
 * is the one that ends the run), code being an int64 0-D value of b->g. */
static kiln_status raise_join(kl_ts_build *b, int code) {
  int prev = b->raise_code, is_zero, joined;
  if (prev < 0) return b->raise_code = code, KILN_OK;
  kiln_status s = no_raise(b, prev, &is_zero);
  if (s == KILN_OK) s = node1(b, KL_OP_Where, 3, (int[]){is_zero, code, prev}, &joined);
  if (s == KILN_OK) b->raise_code = joined;
  return s;
}

static kiln_status eval_format(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out);

/* The text of a raise's message as the code writes it: a string, a name holding one, or
 * the format string of torch.format(...). */
static const char *raise_text(const frame *f, const kl_ts_expr *a, int depth) {
  if (a->kind == KL_TSE_STR) return a->s;
  const kl_tsv *v = a->kind == KL_TSE_NAME ? frame_get(f, a->s) : NULL;
  if (v && v->kind == KL_TSV_STR) return v->s;
  if (a->kind == KL_TSE_CALL && a->n_args > 0 && depth < 4)
    return raise_text(f, a->args[0], depth + 1);
  return "(a message the code computes)";
}

/* A raise of message `text` reached on the path of b->g being built: the raise code
 * becomes its number (1 + its index in b->raises) where no raise was reached before. */
static kiln_status add_raise(kl_ts_build *b, const char *text) {
  if (b->n_raises == b->cap_raises) {
    int cap = b->cap_raises ? b->cap_raises * 2 : 8;
    char **r = realloc(b->raises, sizeof *r * (size_t)cap);
    if (!r) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    b->raises = r;
    b->cap_raises = cap;
  }
  if (!(b->raises[b->n_raises] = strdup(text)))
    return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  int code = kl_ts_const_scalar(b, KL_I64, ++b->n_raises);
  return code < 0 ? b->e->code : raise_join(b, code);
}

/* ops.prim.RaiseException(msg, ...): the scripted code's raise (its argument checks).
 * Reached while building on a path the data does not choose, it is the model's own
 * error for these inputs; inside an If or Loop body the data chooses it: the raise
 * code of the graph being built becomes this raise's where none was reached before,
 * and the path ends (b->raised; a kiln.Check of the outputs fails the run). */
static kiln_status raise_exception(kl_ts_build *b, frame *f, const kl_ts_expr *x,
                                   kl_tsv *out) {
  const char *msg = x->n_args ? raise_text(f, x->args[0], 0) : "";
  const kl_ts_expr *m = x->n_args ? x->args[0] : NULL;
  const char *callee = m && m->kind == KL_TSE_CALL ? aten_name(b, f, m->obj) : NULL;
  if (callee && strcmp(callee, "format") == 0) { /* its fields filled where known */
    kl_tsv text;
    kiln_status s = eval_format(b, f, m, &text);
    if (s != KILN_OK) return s;
    msg = text.s;
  }
  if (!b->bodies)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: the scripted code raises an "
                   "exception for these inputs: %s", b->where, b->line, msg);
  const kl_ts_expr *kind = x->n_args > 1 && x->args[1]->kind == KL_TSE_STR ? x->args[1] : NULL;
  char text[768];
  snprintf(text, sizeof text, "%s:%d: the scripted code raises %s for these inputs: %s",
           b->where, b->line, kind ? kind->s : "an exception", msg);
  kiln_status s = add_raise(b, text);
  b->raised = s == KILN_OK;
  *out = (kl_tsv){.kind = KL_TSV_NONE, .s = uninitialized, .id = -1};
  return s;
}

/* FUNC value fn, a prefix of a scripted function's name, extended by .name */
static kiln_status func_name(kl_ts_build *b, const kl_tsv *fn, const char *name, kl_tsv *out) {
  size_t n = strlen(fn->s) + strlen(name) + 2;
  if (n > 1000)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: a name over 1000 characters",
                   b->where, b->line);
  char *s = kl_ts_alloc(b, n);
  if (!s) return b->e->code;
  snprintf(s, n, "%s.%s", fn->s, name);
  *out = (kl_tsv){.kind = KL_TSV_FUNC, .s = s, .id = -1};
  return KILN_OK;
}

static kiln_status call_function(kl_ts_build *b, const char *qual, const kl_tsv *args,
                                 const char *const *kw, int n_args, kl_tsv *out);

static kiln_status eval_function_call(kl_ts_build *b, frame *f, const kl_ts_expr *x,
                                      const char *qual, kl_tsv *out) {
  kl_tsv *args;
  kiln_status s = eval_args(b, f, x, &args);
  if (s != KILN_OK || after_raise(b, out)) return s;
  return call_function(b, qual, args, x->kw, x->n_args, out);
}

/* A list or dict v may change (append, _set_item) only in the body that made it (or
 * outside any): one of an enclosing graph would change in an If or Loop body whatever
 * the data (a for over a count known while building that appends is unrolled instead:
 * run_loop). */
static kiln_status check_mutable(kl_ts_build *b, const kl_tsv *v, const char *op) {
  if (!b->bodies || v->made_in == b->bodies + 1) return KILN_OK;
  return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: aten::%s inside a loop or an if on the "
                 "data (a %s whose contents the data decides): export with torch.jit.trace "
                 "or to ONNX", b->where, b->line, op, v->kind == KL_TSV_DICT ? "dict" : "list");
}

/* The list or dict u (of v's kind, holding v's items `old`) and the lists, tuples and
 * dicts inside u now hold items (n of them, with keys `keys`). */
static void changed_in(kl_tsv *u, kl_tsv_kind kind, const kl_tsv *old, kl_tsv *items,
                       const char *const *keys, int n, int depth) {
  if (u->kind == kind && u->items == old) {
    u->items = items;
    u->fields = keys;
    u->n = n;
    return;
  }
  if ((u->kind == KL_TSV_LIST || u->kind == KL_TSV_TUPLE || u->kind == KL_TSV_DICT) &&
      depth < 8)
    for (int k = 0; k < u->n; k++) changed_in(&u->items[k], kind, old, items, keys, n, depth + 1);
}

/* v, a list or dict, now holds n items (with keys `keys` for a dict): so it does in
 * every frame running that holds it, by a name or as an element of a list, tuple or
 * dict it holds (one object however many names it has: torchvision's RoI heads set
 * "masks" in the dict `r = result[i]`, which `result` returns; f is b->frame), and *out
 * is v so changed. */
static void changed_everywhere(kl_ts_build *b, const kl_tsv *v, kl_tsv *items,
                               const char *const *keys, int n, kl_tsv *out) {
  const kl_tsv *old = v->items;
  *out = *v;
  for (frame *g = b->frame; g; g = g->up)
    for (int k = 0; k < g->n; k++) changed_in(&g->vals[k], v->kind, old, items, keys, n, 0);
  out->items = items;
  out->fields = keys;
  out->n = n;
}

/* torch.append(xs, v) (xs.append(v)): the list grows. */
static kiln_status eval_append(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out) {
  kl_tsv *args;
  kiln_status s = x->n_args == 2 ? eval_args(b, f, x, &args)
                                 : kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: append takes "
                                           "a list and a value", b->where, b->line);
  if (s != KILN_OK || after_raise(b, out)) return s;
  if (args[0].kind != KL_TSV_LIST)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: append to a value that is not a list",
                   b->where, b->line);
  if (b->scan_name && f == b->scan_frame && x->args[0]->kind == KL_TSE_NAME &&
      strcmp(x->args[0]->s, b->scan_name) == 0) {
    if (b->scan_id >= 0 || args[1].kind != KL_TSV_TENSOR)
      return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: append of %s to a list in a loop "
                     "whose count the data decides (one tensor per pass is stacked)",
                     b->where, b->line, b->scan_id >= 0 ? "a second value in one pass"
                                                        : "a value that is not a tensor");
    b->scan_id = args[1].id; /* (the Loop's scan output: the list is the elements stacked) */
    *out = (kl_tsv){.kind = KL_TSV_NONE, .id = -1};
    return KILN_OK;
  }
  if ((s = check_mutable(b, &args[0], "append")) != KILN_OK ||
      (s = kl_ts_list_copied(b, args[0].n + 1)) != KILN_OK)
    return s;
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)(args[0].n + 1));
  if (!items) return b->e->code;
  if (args[0].n) memcpy(items, args[0].items, sizeof *items * (size_t)args[0].n);
  items[args[0].n] = args[1];
  changed_everywhere(b, &args[0], items, NULL, args[0].n + 1, out);
  return KILN_OK;
}

/* torch.insert(xs, i, v) (xs.insert(i, v)): v before element i (Python's rules: i < 0
 * counts from the end, i is clamped to the list), i known while building. */
static kiln_status eval_insert(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out) {
  kl_tsv *args;
  kiln_status s = x->n_args == 3 ? eval_args(b, f, x, &args)
                                 : kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: insert takes "
                                           "a list, an index and a value", b->where, b->line);
  if (s != KILN_OK || after_raise(b, out)) return s;
  if (args[0].kind != KL_TSV_LIST)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: insert into a value that is not a "
                   "list", b->where, b->line);
  if ((args[1].kind != KL_TSV_INT && args[1].kind != KL_TSV_BOOL) || args[1].id >= 0)
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: aten::insert at an index that is not "
                   "an int known while building (one the graph computes would leave the "
                   "list's order to the data)", b->where, b->line);
  int n = args[0].n;
  int64_t i = args[1].i < 0 ? args[1].i + n : args[1].i;
  i = i < 0 ? 0 : i > n ? n : i;
  if ((s = check_mutable(b, &args[0], "insert")) != KILN_OK ||
      (s = kl_ts_list_copied(b, (int64_t)n + 1)) != KILN_OK)
    return s;
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)(n + 1));
  if (!items) return b->e->code;
  for (int k = 0, from = 0; k <= n; k++) items[k] = k == i ? args[2] : args[0].items[from++];
  changed_everywhere(b, &args[0], items, NULL, n + 1, out);
  out->kind = KL_TSV_NONE; /* (what insert returns) */
  return KILN_OK;
}

/* l.extend(other), l.pop([i]), l.reverse(), l.clear() of a list (the index of pop known
 * while building: Python's rules, an IndexError out of range): l changed in every
 * frame that holds it; *out what the method returns. */
static kiln_status list_call(kl_ts_build *b, const char *name, const kl_tsv *args, int n_args,
                             kl_tsv *out) {
  const kl_tsv *l = &args[0];
  bool extend = strcmp(name, "extend") == 0, pop = strcmp(name, "pop") == 0;
  const kl_tsv *o = n_args > 1 ? &args[1] : NULL;
  if ((extend && (n_args != 2 || (o->kind != KL_TSV_LIST && o->kind != KL_TSV_TUPLE))) ||
      (pop && n_args > 2) || (!extend && !pop && n_args != 1))
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: aten::%s of a list with other "
                   "arguments than %s", b->where, b->line, name,
                   extend ? "a list" : pop ? "an optional index" : "none");
  int64_t at = -1;
  if (pop && o && ((o->kind != KL_TSV_INT && o->kind != KL_TSV_BOOL) || o->id >= 0))
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: aten::pop of a list at an index that is "
                   "not an int known while building", b->where, b->line);
  if (pop && o) at = o->i;
  if (pop && (at < -(int64_t)l->n || at >= l->n))
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: aten::pop of a list of %d at index "
                   "%lld (IndexError)", b->where, b->line, l->n, (long long)at);
  if (pop && at < 0) at += l->n;
  int n = extend ? l->n + o->n : pop ? l->n - 1 : strcmp(name, "clear") == 0 ? 0 : l->n;
  kiln_status s = check_mutable(b, l, name);
  if (s == KILN_OK) s = kl_ts_list_copied(b, n);
  if (s != KILN_OK) return s;
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)(n + 1)), popped = {0};
  if (!items) return b->e->code;
  for (int k = 0, m = 0; k < l->n && m < n; k++)
    if (!pop || k != at) items[m++] = l->items[strcmp(name, "reverse") == 0 ? l->n - 1 - k : k];
  for (int k = 0; extend && k < o->n; k++) items[l->n + k] = o->items[k];
  if (pop) popped = l->items[at];
  changed_everywhere(b, l, items, NULL, n, out);
  *out = pop ? popped : (kl_tsv){.kind = KL_TSV_NONE, .id = -1};
  return KILN_OK;
}

/* The index of key in dict d, or -1. */
static int dict_find(const kl_tsv *d, const char *key) {
  for (int k = 0; k < d->n; k++)
    if (strcmp(d->fields[k], key) == 0) return k;
  return -1;
}

/* torch._set_item(d, key, v) (d[key] = v, l[i] = v): a dict's key known while building
 * set or added, a list's element at an index known while building replaced. */
static kiln_status eval_set_item(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out) {
  kl_tsv *args;
  kiln_status s = x->n_args == 3 ? eval_args(b, f, x, &args)
                                 : kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: _set_item "
                                           "takes a dict or list, a key and a value",
                                           b->where, b->line);
  if (s != KILN_OK || after_raise(b, out)) return s;
  const kl_tsv *d = &args[0], *key = &args[1];
  bool dict = d->kind == KL_TSV_DICT && key->kind == KL_TSV_STR;
  bool list = d->kind == KL_TSV_LIST && key->kind == KL_TSV_INT && key->id < 0 &&
              key->i >= -(int64_t)d->n && key->i < d->n;
  if (!dict && !list)
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: aten::_set_item of a %s by a key that "
                   "is not %s known while building", b->where, b->line,
                   d->kind == KL_TSV_DICT ? "dict" : "value", d->kind == KL_TSV_DICT
                   ? "a string" : "an index in the list");
  int at = dict ? dict_find(d, key->s) : (int)(key->i < 0 ? key->i + d->n : key->i);
  int n = at < 0 ? d->n + 1 : d->n;
  if ((s = check_mutable(b, d, "_set_item")) != KILN_OK ||
      (s = kl_ts_list_copied(b, n)) != KILN_OK)
    return s;
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)n);
  const char **keys = dict ? kl_ts_alloc(b, sizeof *keys * (size_t)n) : NULL;
  if (!items || (dict && !keys)) return b->e->code;
  if (d->n) memcpy(items, d->items, sizeof *items * (size_t)d->n);
  if (dict && d->n) memcpy(keys, d->fields, sizeof *keys * (size_t)d->n);
  if (at < 0) keys[at = d->n] = key->s;
  items[at] = args[2];
  changed_everywhere(b, d, items, keys, n, out);
  out->kind = KL_TSV_NONE; /* (what _set_item returns) */
  return KILN_OK;
}

/* {k: v, ...} with keys that are strings known while building (a later key wins). */
static kiln_status eval_dict(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out) {
  int n = x->n_args / 2;
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)(n + 1)), key;
  const char **keys = kl_ts_alloc(b, sizeof *keys * (size_t)(n + 1));
  if (!items || !keys) return b->e->code;
  *out = (kl_tsv){.kind = KL_TSV_DICT, .items = items, .fields = keys, .id = -1,
                  .made_in = b->bodies + 1};
  for (int k = 0; k < n; k++) {
    kiln_status s = eval(b, f, x->args[2 * k], &key);
    if (s != KILN_OK) return s;
    if (key.kind != KL_TSV_STR)
      return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: a dict key that is not a string "
                     "(kiln reads dicts of string keys known while building)", b->where,
                     b->line);
    int at = dict_find(out, key.s);
    if (at < 0) keys[at = out->n++] = key.s;
    if ((s = eval(b, f, x->args[2 * k + 1], &items[at])) != KILN_OK) return s;
  }
  return KILN_OK;
}

/* torch.dict() (OrderedDict(), {} typed by its use): an empty dict; torch.dict(pairs) of
 * a list of (key, value) tuples (dict(zip(names, results)), as torchvision's
 * FeaturePyramidNetwork writes its result) or of a dict: a dict made now. */
static kiln_status eval_dict_of(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out) {
  kl_tsv *args;
  kiln_status s = eval_args(b, f, x, &args);
  if (s != KILN_OK || after_raise(b, out)) return s;
  *out = (kl_tsv){.kind = KL_TSV_DICT, .id = -1, .made_in = b->bodies + 1};
  if (x->n_args == 0) return KILN_OK;
  const kl_tsv *l = &args[0];
  bool pairs = x->n_args == 1 && l->kind == KL_TSV_LIST;
  for (int k = 0; pairs && k < l->n; k++)
    pairs = l->items[k].kind == KL_TSV_TUPLE && l->items[k].n == 2 &&
            l->items[k].items[0].kind == KL_TSV_STR;
  if (!pairs && !(x->n_args == 1 && l->kind == KL_TSV_DICT))
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: aten::dict of a value that is not a "
                   "dict or a list of (key, value) tuples with keys that are strings known "
                   "while building", b->where, b->line);
  if ((s = kl_ts_list_copied(b, l->n)) != KILN_OK) return s;
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)(l->n + 1));
  const char **keys = kl_ts_alloc(b, sizeof *keys * (size_t)(l->n + 1));
  if (!items || !keys) return b->e->code;
  out->items = items;
  out->fields = keys;
  for (int k = 0; k < l->n; k++) {
    const char *key = pairs ? l->items[k].items[0].s : l->fields[k];
    int at = dict_find(out, key);
    if (at < 0) keys[at = out->n++] = key; /* (a later pair wins) */
    items[at] = pairs ? l->items[k].items[1] : l->items[k];
  }
  return KILN_OK;
}

/* d.pop(key[, default]): the value under key (default where the dict has none; a
 * KeyError without one), the key gone from d in every frame that holds it. */
static kiln_status dict_pop(kl_ts_build *b, const kl_tsv *args, int n_args, kl_tsv *out) {
  const kl_tsv *d = &args[0];
  int at = dict_find(d, args[1].s);
  if (at < 0 && n_args < 3)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: aten::pop of key '%s', which the dict "
                   "does not hold, without a default (KeyError)", b->where, b->line, args[1].s);
  if (at < 0) return *out = args[2], KILN_OK;
  kiln_status s = check_mutable(b, d, "pop");
  if (s == KILN_OK) s = kl_ts_list_copied(b, d->n);
  if (s != KILN_OK) return s;
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)d->n);
  const char **keys = kl_ts_alloc(b, sizeof *keys * (size_t)d->n);
  if (!items || !keys) return b->e->code;
  kl_tsv popped = d->items[at], changed;
  for (int k = 0, m = 0; k < d->n; k++)
    if (k != at) items[m] = d->items[k], keys[m++] = d->fields[k];
  changed_everywhere(b, d, items, keys, d->n - 1, &changed);
  *out = popped;
  return KILN_OK;
}

/* d.setdefault(key, default) (args: d, key, default): d's value under key, or default,
 * which d then holds under key. d.update(other): other's keys set in d (in other's
 * order, a key d holds keeping its place). Both change d as _set_item does. */
static kiln_status dict_merge(kl_ts_build *b, const kl_tsv *args, bool setdefault,
                              kl_tsv *out) {
  const kl_tsv *d = &args[0];
  if (setdefault && dict_find(d, args[1].s) >= 0)
    return *out = d->items[dict_find(d, args[1].s)], KILN_OK;
  const kl_tsv *other = setdefault ? NULL : &args[1];
  int add = setdefault ? 1 : other->n;
  kiln_status s = check_mutable(b, d, setdefault ? "setdefault" : "update");
  if (s == KILN_OK) s = kl_ts_list_copied(b, d->n + add);
  if (s != KILN_OK) return s;
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)(d->n + add));
  const char **keys = kl_ts_alloc(b, sizeof *keys * (size_t)(d->n + add));
  if (!items || !keys) return b->e->code;
  if (d->n) memcpy(items, d->items, sizeof *items * (size_t)d->n);
  if (d->n) memcpy(keys, d->fields, sizeof *keys * (size_t)d->n);
  kl_tsv merged = {.kind = KL_TSV_DICT, .items = items, .fields = keys, .n = d->n};
  for (int k = 0; k < add; k++) {
    const char *key = setdefault ? args[1].s : other->fields[k];
    int at = dict_find(&merged, key);
    if (at < 0) keys[at = merged.n++] = key;
    items[at] = setdefault ? args[2] : other->items[k];
  }
  kl_tsv changed;
  changed_everywhere(b, d, items, keys, merged.n, &changed);
  *out = setdefault ? args[2] : (kl_tsv){.kind = KL_TSV_NONE, .id = -1};
  return KILN_OK;
}

/* The list of d's (key, value) tuples, keys or values (what), made now. */
static kiln_status dict_list(kl_ts_build *b, const kl_tsv *d, char what, kl_tsv *out) {
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)(d->n + 1));
  kl_tsv *pairs = what == 'i' ? kl_ts_alloc(b, sizeof *pairs * (size_t)(2 * d->n + 1)) : NULL;
  if (!items || (what == 'i' && !pairs)) return b->e->code;
  for (int k = 0; k < d->n; k++) {
    kl_tsv key = {.kind = KL_TSV_STR, .s = d->fields[k], .id = -1};
    items[k] = what == 'k' ? key : d->items[k];
    if (what != 'i') continue;
    pairs[2 * k] = key;
    pairs[2 * k + 1] = d->items[k];
    items[k] = (kl_tsv){.kind = KL_TSV_TUPLE, .items = &pairs[2 * k], .n = 2, .id = -1};
  }
  *out = (kl_tsv){.kind = KL_TSV_LIST, .items = items, .n = d->n, .id = -1,
                  .made_in = b->bodies + 1};
  return KILN_OK;
}

/* len, __contains__, get, pop, keys, values and items of a dict: done while building. */
static kiln_status dict_call(kl_ts_build *b, const char *name, const kl_tsv *args, int n_args,
                             kl_tsv *out) {
  const kl_tsv *d = &args[0];
  bool keyed = n_args >= 2 && args[1].kind == KL_TSV_STR;
  int at = keyed ? dict_find(d, args[1].s) : -1;
  if (strcmp(name, "len") == 0 && n_args == 1)
    return *out = (kl_tsv){.kind = KL_TSV_INT, .i = d->n, .id = -1}, KILN_OK;
  if (strcmp(name, "__contains__") == 0 && keyed && n_args == 2)
    return *out = (kl_tsv){.kind = KL_TSV_BOOL, .i = at >= 0, .id = -1}, KILN_OK;
  if (strcmp(name, "get") == 0 && keyed && n_args <= 3) {
    *out = at >= 0 ? d->items[at] : n_args == 3 ? args[2] : (kl_tsv){.kind = KL_TSV_NONE};
    if (at < 0 && n_args < 3) out->id = -1;
    return KILN_OK;
  }
  if (strcmp(name, "pop") == 0 && keyed && n_args <= 3) return dict_pop(b, args, n_args, out);
  if (strcmp(name, "setdefault") == 0 && keyed && n_args == 3)
    return dict_merge(b, args, true, out);
  if (strcmp(name, "update") == 0 && n_args == 2 && args[1].kind == KL_TSV_DICT)
    return dict_merge(b, args, false, out);
  const char *lists[] = {"items", "keys", "values"};
  for (int k = 0; k < 3; k++)
    if (strcmp(name, lists[k]) == 0 && n_args == 1) return dict_list(b, d, name[0], out);
  return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: aten::%s of a dict%s (kiln reads len, in, "
                 "get, pop, setdefault, update, keys, values, items, d[key] and d[key] = v, "
                 "keys being strings known while building)", b->where, b->line, name,
                 n_args >= 2 && !keyed ? " by a key that is not a string" : "");
}

/* Whether a, or every element of it, is known while building and str() of it is
 * written by format_arg. */
static bool formattable(const kl_tsv *a, int depth) {
  if (a->kind == KL_TSV_LIST || a->kind == KL_TSV_TUPLE) {
    for (int k = 0; k < a->n; k++)
      if (depth > 4 || a->items[k].kind == KL_TSV_STR || !formattable(&a->items[k], depth + 1))
        return false;
    return true;
  }
  return a->kind == KL_TSV_STR || (a->kind == KL_TSV_NONE && !is_uninit(a)) ||
         ((a->kind == KL_TSV_INT || a->kind == KL_TSV_FLOAT || a->kind == KL_TSV_BOOL) &&
          a->id < 0);
}

/* a as TorchScript's format writes it (a float with 17 significant digits and a '.' when
 * it would read as an int: 2.5, 100., 0.10000000000000001; lists [1, 2], tuples (1, 2.),
 * None, True), appended at dst[*u] (cap bytes in all; *u stays below cap). */
static void format_arg(const kl_tsv *a, char *dst, size_t cap, size_t *u) {
  size_t room = cap - *u;
  int w = 0;
  if (a->kind == KL_TSV_LIST || a->kind == KL_TSV_TUPLE) {
    bool list = a->kind == KL_TSV_LIST;
    w = snprintf(dst + *u, room, "%s", list ? "[" : "(");
    *u += w < 0 || (size_t)w >= room ? room - 1 : (size_t)w;
    for (int k = 0; k < a->n; k++) {
      if (k) format_arg(&(kl_tsv){.kind = KL_TSV_STR, .s = ", ", .id = -1}, dst, cap, u);
      format_arg(&a->items[k], dst, cap, u);
    }
    const char *close = list ? "]" : a->n == 1 ? ",)" : ")";
    format_arg(&(kl_tsv){.kind = KL_TSV_STR, .s = close, .id = -1}, dst, cap, u);
    return;
  }
  if (a->kind == KL_TSV_STR) w = snprintf(dst + *u, room, "%s", a->s);
  else if (a->kind == KL_TSV_NONE) w = snprintf(dst + *u, room, "None");
  else if (a->kind == KL_TSV_BOOL) w = snprintf(dst + *u, room, "%s", a->i ? "True" : "False");
  else if (a->kind == KL_TSV_INT) w = snprintf(dst + *u, room, "%lld", (long long)a->i);
  else if (a->kind == KL_TSV_FLOAT) {
    char num[40];
    snprintf(num, sizeof num, "%.17g", a->f);
    bool int_like = !strpbrk(num, ".eEin"); /* (not 1e+20, inf, nan) */
    w = snprintf(dst + *u, room, "%s%s", num, int_like ? "." : "");
  }
  *u += w < 0 || (size_t)w >= room ? room - 1 : (size_t)w;
}

/* torch.format(fmt, args...) ("...{}...".format(a)): the string, each {} replaced by the
 * next argument known while building (a string, number, bool, None, or a list or tuple
 * of those; "{}" stays for a value the graph computes), up to 1023 characters: the code
 * builds messages so (raises) and tests whether one is empty. */
static kiln_status eval_format(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out) {
  kl_tsv *args;
  kiln_status s = eval_args(b, f, x, &args);
  if (s != KILN_OK || after_raise(b, out)) return s;
  if (x->n_args < 1 || args[0].kind != KL_TSV_STR)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: format of a value that is not a "
                   "string", b->where, b->line);
  enum { MAX_FORMAT = 1024 };
  char *text = kl_ts_alloc(b, MAX_FORMAT);
  if (!text) return b->e->code;
  size_t u = 0;
  int next = 1;
  for (const char *p = args[0].s; *p && u + 1 < MAX_FORMAT; p++) {
    if (p[0] != '{' || p[1] != '}' || next >= x->n_args) {
      text[u++] = *p;
      continue;
    }
    const kl_tsv *a = &args[next++];
    format_arg(formattable(a, 0) ? a : &(kl_tsv){.kind = KL_TSV_STR, .s = "{}", .id = -1},
               text, MAX_FORMAT, &u);
    p++;
  }
  text[u] = 0;
  *out = (kl_tsv){.kind = KL_TSV_STR, .s = text, .id = -1};
  return KILN_OK;
}

static kiln_status eval_call(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out) {
  const kl_ts_expr *callee = x->obj;
  if (callee->kind == KL_TSE_NAME) {
    const kl_tsv *fn = frame_get(f, callee->s);
    return fn && fn->kind == KL_TSV_FUNC ? eval_function_call(b, f, x, fn->s, out)
                                         : eval_builtin(b, f, x, out);
  }
  const char *aten = aten_name(b, f, callee);
  if (aten && strcmp(aten, "prim::RaiseException") == 0) return raise_exception(b, f, x, out);
  if (aten && strcmp(aten, "append") == 0) return eval_append(b, f, x, out);
  if (aten && strcmp(aten, "_set_item") == 0) return eval_set_item(b, f, x, out);
  if (aten && strcmp(aten, "format") == 0) return eval_format(b, f, x, out);
  if (aten && strcmp(aten, "insert") == 0) return eval_insert(b, f, x, out);
  if (aten && strcmp(aten, "dict") == 0) return eval_dict_of(b, f, x, out);
  if (aten && strcmp(aten, "warn") == 0) { /* a warning: nothing to compute */
    out->kind = KL_TSV_NONE;
    return KILN_OK;
  }
  if (aten) return eval_aten(b, f, x, aten, out);
  if (b->e->code != KILN_OK) return b->e->code;
  if (callee->kind != KL_TSE_ATTR)
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: a call of something that is not a "
                   "function or method", b->where, b->line);
  kl_tsv self, *args;
  kiln_status s = eval(b, f, callee->obj, &self);
  if (s == KILN_OK && self.kind == KL_TSV_FUNC) {
    kl_tsv fn;
    s = func_name(b, &self, callee->s, &fn);
    return s != KILN_OK ? s : eval_function_call(b, f, x, fn.s, out);
  }
  if (s == KILN_OK) s = eval_args(b, f, x, &args);
  if (s != KILN_OK || after_raise(b, out)) return s;
  if (is_object(&self)) return object_method(b, &self, callee->s, args, x->kw, x->n_args, out);
  if (self.kind != KL_TSV_MODULE)
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: method '%s' called on a value that is "
                   "not a module", b->where, b->line, callee->s);
  return call_method(b, &self, callee->s, args, x->kw, x->n_args, out);
}

static kiln_status eval_constant(kl_ts_build *b, const char *name, kl_tsv *out) {
  char *end;
  long k = name[0] == 'c' ? strtol(name + 1, &end, 10) : -1;
  if (k < 0 || !b->constants || name[1] == 0 || *end || k >= b->constants->n)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: CONSTANTS.%s is not in "
                   "constants.pkl", b->where, b->line, name);
  char path[64];
  snprintf(path, sizeof path, "CONSTANTS.%s", name);
  const char *p = build_strdup(b, path);
  return p ? pickled_value(b, b->constants->items[k], p, "constants", out) : b->e->code;
}

static kiln_status eval_seq(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out) {
  out->kind = x->kind == KL_TSE_LIST ? KL_TSV_LIST : KL_TSV_TUPLE;
  out->n = x->n_args;
  out->made_in = out->kind == KL_TSV_LIST ? b->bodies + 1 : 0;
  return eval_args(b, f, x, &out->items);
}

static kiln_status value_id(kl_ts_build *b, const kl_tsv *v, kl_dtype dt, const char *name,
                            int *id);

/* A list of ints some of which the graph computes (x.size() of a symbolic dim, and 0-D
 * tensors of arithmetic on them) as a list of 0-D int64 tensors, in *out; *made false
 * (nothing made) for any other list. */
static kiln_status ints_as_tensors(kl_ts_build *b, const kl_tsv *seq, kl_tsv *out, bool *made) {
  bool ints = false;
  *made = false;
  for (int k = 0; k < seq->n; k++) {
    const kl_tsv *v = &seq->items[k];
    const kl_type *t = v->kind == KL_TSV_TENSOR ? &b->g->values[v->id].type : NULL;
    if (v->kind != KL_TSV_INT && !(t && t->rank == 0 && t->dtype == KL_I64)) return KILN_OK;
    ints |= v->kind == KL_TSV_INT;
  }
  if (!ints) return KILN_OK;
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)(seq->n + 1));
  if (!items) return b->e->code;
  for (int k = 0; k < seq->n; k++) {
    items[k] = (kl_tsv){.kind = KL_TSV_TENSOR};
    kiln_status s = value_id(b, &seq->items[k], KL_I64, "list element", &items[k].id);
    if (s != KILN_OK) return s;
  }
  *out = (kl_tsv){.kind = KL_TSV_LIST, .items = items, .n = seq->n, .id = -1};
  *made = true;
  return KILN_OK;
}

/* xs[i] with i a value of the graph (a loop's counter: torch writes `for c in xs` as a
 * loop over range(len(xs))): a list of numbers known now as a constant tensor, one of
 * tensors (or of ints the graph computes) stacked, and the element gathered. */
static kiln_status index_at_run_time(kl_ts_build *b, const kl_tsv *seq, const kl_tsv *i,
                                     kl_tsv *out) {
  static const char *const no_kw[3] = {NULL, NULL, NULL};
  kl_tsv_kind kind = seq->n ? seq->items[0].kind : KL_TSV_NONE;
  bool numbers = kind == KL_TSV_INT || kind == KL_TSV_FLOAT || kind == KL_TSV_BOOL;
  for (int k = 0; k < seq->n; k++)
    if (seq->items[k].kind != kind || (numbers && seq->items[k].id >= 0)) numbers = false;
  kl_tsv a[3], stacked, ints;
  kiln_status s = KILN_OK;
  bool computed_ints = false;
  b->aten = "aten::__getitem__";
  if (!numbers && (kind == KL_TSV_INT || kind == KL_TSV_TENSOR)) {
    if ((s = ints_as_tensors(b, seq, &ints, &computed_ints)) != KILN_OK) return s;
    if (computed_ints) seq = &ints, kind = KL_TSV_TENSOR;
  }
  if (numbers) {
    kl_dtype dt = kind == KL_TSV_INT ? KL_I64 : kind == KL_TSV_BOOL ? KL_BOOL : KL_F32;
    int64_t n = seq->n;
    void *data = malloc(kl_dtype_size(dt) * (size_t)n);
    if (!data) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int k = 0; k < seq->n; k++)
      kl_store_f64(data, dt, (size_t)k, kind == KL_TSV_FLOAT ? seq->items[k].f
                                                               : (double)seq->items[k].i);
    int id = kl_ts_const_data(b, dt, 1, &n, data, kl_dtype_size(dt) * (size_t)n);
    if (id < 0) return b->e->code;
    a[0] = (kl_tsv){.kind = KL_TSV_TENSOR, .id = id};
  } else if (kind == KL_TSV_TENSOR) {
    for (int k = 0; k < seq->n; k++)
      if (seq->items[k].kind != KL_TSV_TENSOR) kind = KL_TSV_NONE;
    a[0] = (kl_tsv){.kind = KL_TSV_LIST, .items = seq->items, .n = seq->n, .id = -1};
    a[1] = (kl_tsv){.kind = KL_TSV_INT, .i = 0, .id = -1};
    if (kind == KL_TSV_TENSOR && (s = kl_aten_call(b, "stack", a, no_kw, 2, &stacked)) == KILN_OK)
      a[0] = stacked;
  }
  if (!numbers && kind != KL_TSV_TENSOR)
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: an element, chosen by the data, of "
                   "a list that is not of numbers known now or of tensors (a loop over "
                   "such a list)", b->where, b->line);
  a[1] = (kl_tsv){.kind = KL_TSV_INT, .i = 0, .id = -1};
  a[2] = *i;
  if (s == KILN_OK) s = kl_aten_call(b, "select", a, no_kw, 3, out);
  if (s == KILN_OK && (numbers || computed_ints) && out->kind == KL_TSV_TENSOR)
    out->kind = computed_ints ? KL_TSV_INT : kind;
  if (s != KILN_OK) kl_err_prefix(b->e, "%s:%d: an element of a list", b->where, b->line);
  return s;
}

static kiln_status eval_index(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out) {
  kl_tsv seq, ix = {.kind = KL_TSV_INT, .i = x->i, .id = -1};
  kiln_status s = eval(b, f, x->obj, &seq);
  if (s == KILN_OK && x->n_args == 1) s = eval(b, f, x->args[0], &ix);
  if (s != KILN_OK || after_raise(b, out)) return s;
  if (seq.kind == KL_TSV_DICT) {
    int at = ix.kind == KL_TSV_STR ? dict_find(&seq, ix.s) : -1;
    if (at < 0)
      return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: a key that the dict does not "
                     "hold, or is not a string (KeyError)", b->where, b->line);
    return *out = seq.items[at], KILN_OK;
  }
  if ((seq.kind == KL_TSV_LIST || seq.kind == KL_TSV_TUPLE) &&
      (ix.kind == KL_TSV_INT || ix.kind == KL_TSV_TENSOR) && ix.id >= 0)
    return index_at_run_time(b, &seq, &ix, out);
  if (ix.kind != KL_TSV_INT && ix.kind != KL_TSV_BOOL)
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: an index that is not an int",
                   b->where, b->line);
  int64_t i = ix.i < 0 ? ix.i + seq.n : ix.i;
  if ((seq.kind != KL_TSV_LIST && seq.kind != KL_TSV_TUPLE) || i < 0 || i >= seq.n)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: index %lld of a value that is not "
                   "a list or tuple that long", b->where, b->line, (long long)ix.i);
  *out = seq.items[i];
  return KILN_OK;
}

/* t.name of a NamedTuple */
static kiln_status field(kl_ts_build *b, const kl_tsv *t, const char *name, kl_tsv *out) {
  for (int k = 0; k < t->n; k++)
    if (strcmp(t->fields[k], name) == 0) return *out = t->items[k], KILN_OK;
  return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: the NamedTuple has no field '%s'",
                 b->where, b->line, name);
}

static kiln_status eval(kl_ts_build *b, frame *f, const kl_ts_expr *x, kl_tsv *out) {
  memset(out, 0, sizeof *out);
  out->id = -1;
  b->line = x->line;
  if (after_raise(b, out)) return KILN_OK;
  switch (x->kind) {
  case KL_TSE_NAME: {
    const kl_tsv *v = frame_get(f, x->s);
    if (!v && strcmp(x->s, "__torch__") == 0) { /* scripted functions live under it */
      *out = (kl_tsv){.kind = KL_TSV_FUNC, .s = x->s, .id = -1};
      return KILN_OK;
    }
    if (!v) return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: name '%s' is not defined",
                           b->where, x->line, x->s);
    *out = *v;
    return KILN_OK;
  }
  case KL_TSE_INT: out->kind = KL_TSV_INT; out->i = x->i; return KILN_OK;
  case KL_TSE_FLOAT: out->kind = KL_TSV_FLOAT; out->f = x->f; return KILN_OK;
  case KL_TSE_STR: out->kind = KL_TSV_STR; out->s = x->s; return KILN_OK;
  case KL_TSE_BOOL: out->kind = KL_TSV_BOOL; out->i = x->i; return KILN_OK;
  case KL_TSE_NONE: out->kind = KL_TSV_NONE; return KILN_OK;
  case KL_TSE_LIST:
  case KL_TSE_TUPLE: return eval_seq(b, f, x, out);
  case KL_TSE_INDEX: return eval_index(b, f, x, out);
  case KL_TSE_DICT: return eval_dict(b, f, x, out);
  case KL_TSE_CALL: return eval_call(b, f, x, out);
  case KL_TSE_ATTR: {
    if (x->obj->kind == KL_TSE_NAME && strcmp(x->obj->s, "CONSTANTS") == 0 &&
        !frame_get(f, "CONSTANTS"))
      return eval_constant(b, x->s, out);
    kl_tsv obj;
    kiln_status s = eval(b, f, x->obj, &obj);
    if (s == KILN_OK && obj.kind == KL_TSV_FUNC) return func_name(b, &obj, x->s, out);
    if (s == KILN_OK && obj.kind == KL_TSV_TUPLE && obj.fields) return field(b, &obj, x->s, out);
    return s != KILN_OK ? s : module_attr(b, &obj, x->s, out);
  }
  }
  return kl_fail(b->e, KILN_ERR_INTERNAL, "unknown expression kind %d", (int)x->kind);
}

/* "obj.name = value" (x: obj.name) with obj a module: the module's attribute is value
 * for the rest of the build (module_attr reads it). Not inside an If or Loop body the data
 * chooses (the other path would see it too). */
static kiln_status set_module_attr(kl_ts_build *b, frame *f, const kl_ts_expr *x,
                                   const kl_tsv *value) {
  kl_tsv mod;
  kiln_status s = eval(b, f, x->obj, &mod);
  if (s != KILN_OK) return s;
  if (is_object(&mod) && !b->bodies) { /* its items are the object's, under all its names */
    for (int k = 0; k < mod.n; k++)
      if (strcmp(mod.fields[k], x->s) == 0) return mod.items[k] = *value, KILN_OK;
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: class %s declares no attribute "
                   "'%s'", b->where, b->line, mod.s, x->s);
  }
  if (mod.kind != KL_TSV_MODULE && !is_object(&mod))
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: setting attribute '%s' of a value "
                   "that is not a module is not supported", b->where, b->line, x->s);
  if (b->bodies)
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: setting module attribute '%s' inside "
                   "an if or loop that the data decides is not supported", b->where, b->line,
                   x->s);
  const char *path = join_path(b, mod.s, x->s);
  return path ? frame_set(b, &b->attrs, path, value) : b->e->code;
}

static kiln_status assign(kl_ts_build *b, frame *f, const kl_ts_stmt *st, const kl_tsv *v) {
  if (st->n_targets == 1) return frame_set(b, f, st->targets[0], v);
  if ((v->kind != KL_TSV_TUPLE && v->kind != KL_TSV_LIST) || v->n != st->n_targets)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: %d names are assigned a value that "
                   "is not a tuple or list of %d", b->where, st->line, st->n_targets,
                   st->n_targets);
  for (int i = 0; i < st->n_targets; i++) {
    kiln_status s = frame_set(b, f, st->targets[i], &v->items[i]);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* ---- control flow: if/for/while as If and Loop nodes with bodies ---- */

static kiln_status run_block(kl_ts_build *b, frame *f, const kl_ts_stmt *st, int n,
                             kl_tsv *out, bool *returned);

/* A body being built: its graph, the frame it runs in (the enclosing frame's values,
 * each graph value of it read through a capture input), and the builder's state of the
 * enclosing graph. */
typedef struct body {
  kl_graph *g, *outer;
  int *from, *to; /* captured: enclosing graph's ids and the body's inputs for them */
  int n_caps, cap;
  frame f;
  int n_tensors, tensors_from;
  void *aten_state;
  int outer_raise;      /* the enclosing graph's raise_code */
  int raise_code;       /* the body's, once built (-1: it reaches no raise) */
  bool raised;          /* the body's path ends in a raise */
} body;

static void body_free(body *bd) {
  kl_graph_free(bd->g);
  free(bd->from);
  free(bd->to);
  free(bd->f.names);
  free(bd->f.vals);
  memset(bd, 0, sizeof *bd);
}

static int body_input(kl_ts_build *b, const kl_type *t) {
  int id = kl_graph_add_value(b->g, NULL, b->e);
  if (id < 0) return -1;
  b->g->values[id].kind = KL_VALUE_INPUT;
  b->g->values[id].type = *t;
  return kl_graph_add_input(b->g, id, b->e) == KILN_OK ? id : -1;
}

/* v, a value of the enclosing graph, as a value of the body: graph values captured. */
static kiln_status capture(kl_ts_build *b, body *bd, kl_tsv *v, int depth) {
  if (depth > 16) return kl_fail(b->e, KILN_ERR_LIMIT, "%s:%d: lists nested too deeply",
                                 b->where, b->line);
  if (v->kind == KL_TSV_LIST || v->kind == KL_TSV_TUPLE || v->kind == KL_TSV_DICT) {
    kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)(v->n ? v->n : 1));
    if (!items) return b->e->code;
    for (int k = 0; k < v->n; k++) {
      items[k] = v->items[k];
      kiln_status s = capture(b, bd, &items[k], depth + 1);
      if (s != KILN_OK) return s;
    }
    v->items = items;
    return KILN_OK;
  }
  if (v->id < 0) return KILN_OK;
  v->dim_sym = 0;
  for (int k = 0; k < bd->n_caps; k++)
    if (bd->from[k] == v->id) return v->id = bd->to[k], KILN_OK;
  if (bd->n_caps == bd->cap) {
    int cap = bd->cap ? bd->cap * 2 : 16;
    int *from = realloc(bd->from, sizeof *from * (size_t)cap);
    if (from) bd->from = from;
    int *to = from ? realloc(bd->to, sizeof *to * (size_t)cap) : NULL;
    if (!to) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    bd->to = to;
    bd->cap = cap;
  }
  kl_type t = kl_type_translate(bd->g, bd->outer, &bd->outer->values[v->id].type);
  int id = body_input(b, &t);
  if (id < 0) return b->e->code;
  bd->from[bd->n_caps] = v->id;
  bd->to[bd->n_caps++] = id;
  v->id = id;
  return KILN_OK;
}

/* Start building a body with formal inputs of types formal (n_formal; their ids in
 * ids): b->g is the body until body_end. */
static kiln_status body_begin(kl_ts_build *b, body *bd, const frame *f, const kl_type *formal,
                              int n_formal, int *ids) {
  memset(bd, 0, sizeof *bd);
  bd->outer = b->g;
  bd->outer_raise = b->raise_code;
  bd->raise_code = b->raise_code = -1;
  b->bodies++;
  bd->f.up = b->frame;
  b->frame = &bd->f;
  bd->n_tensors = b->n_tensors;
  bd->tensors_from = b->tensors_from;
  bd->aten_state = *kl_ts_aten_state(b);
  if (!(bd->g = kl_graph_new())) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  kiln_status s = kl_graph_set_source(bd->g, b->g->source, b->e);
  if (s != KILN_OK) return s;
  bd->g->opset = b->g->opset;
  b->tensors_from = b->n_tensors;
  *kl_ts_aten_state(b) = NULL;
  b->g = bd->g;
  for (int k = 0; k < n_formal; k++) {
    kl_type t = kl_type_translate(bd->g, bd->outer, &formal[k]);
    if ((ids[k] = body_input(b, &t)) < 0) return b->e->code;
  }
  for (int k = 0; k < f->n; k++) {
    kl_tsv v = f->vals[k];
    if ((s = capture(b, bd, &v, 0)) != KILN_OK || (s = frame_set(b, &bd->f, f->names[k], &v)))
      return s;
  }
  return KILN_OK;
}

/* Back to the enclosing graph (also after a failure). */
static void body_end(kl_ts_build *b, body *bd) {
  if (!bd->outer) return;
  bd->raise_code = b->raise_code;
  bd->raised = b->raised;
  b->raise_code = bd->outer_raise;
  b->raised = false;
  b->bodies--;
  b->frame = bd->f.up;
  b->g = bd->outer;
  if (b->n_tensors > bd->n_tensors) b->n_tensors = bd->n_tensors;
  b->tensors_from = bd->tensors_from;
  *kl_ts_aten_state(b) = bd->aten_state;
}

static bool has_id(const kl_tsv *v) {
  return v->id >= 0 && (v->kind == KL_TSV_TENSOR || v->kind == KL_TSV_INT ||
                        v->kind == KL_TSV_FLOAT || v->kind == KL_TSV_BOOL);
}

static bool is_literal(const kl_tsv *v) {
  return v->id < 0 && (v->kind == KL_TSV_INT || v->kind == KL_TSV_FLOAT || v->kind == KL_TSV_BOOL);
}

/* v as a graph value of b->g of dtype dt (KL_UNDEFINED: its own): literals become
 * constants. */
static kiln_status value_id(kl_ts_build *b, const kl_tsv *v, kl_dtype dt, const char *name,
                            int *id) {
  if (has_id(v)) {
    *id = v->id;
    if (dt == KL_UNDEFINED || b->g->values[v->id].type.dtype == dt) return KILN_OK;
  } else if (is_literal(v)) {
    kl_dtype own = v->kind == KL_TSV_INT ? KL_I64 : v->kind == KL_TSV_BOOL ? KL_BOOL : KL_F32;
    *id = kl_ts_const_scalar(b, dt == KL_UNDEFINED ? own : dt,
                             v->kind == KL_TSV_FLOAT ? v->f : (double)v->i);
    return *id < 0 ? b->e->code : KILN_OK;
  } else {
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: '%s' is set in a branch or loop to a "
                   "value that is not a tensor or number (a list, module, string or None)",
                   b->where, b->line, name);
  }
  int y;
  b->aten = "prim::Cast";
  int node = kl_ts_node(b, KL_OP_Cast, 1, id, 1, &y);
  kiln_status s = node < 0 ? b->e->code : kl_node_set_int(b->g, node, "to", dt, b->e);
  if (s == KILN_OK) s = kl_ts_finish(b, node);
  *id = y;
  return s;
}

/* The kind of Python value a graph value stands for after a branch or loop. */
static kl_tsv as_value(const kl_tsv *like, int id) {
  kl_tsv v = {.kind = like->kind == KL_TSV_TENSOR ? KL_TSV_TENSOR : like->kind, .id = id};
  return v;
}

/* Names that statements assign (targets and loop variables, nested blocks too). */
typedef struct name_set {
  const char **names;
  int n, cap;
} name_set;

static kiln_status names_add(kl_ts_build *b, name_set *ns, const char *name) {
  for (int k = 0; k < ns->n; k++)
    if (strcmp(ns->names[k], name) == 0) return KILN_OK;
  if (ns->n == ns->cap) {
    int cap = ns->cap ? ns->cap * 2 : 16;
    const char **p = realloc(ns->names, sizeof *p * (size_t)cap);
    if (!p) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    ns->names = p;
    ns->cap = cap;
  }
  ns->names[ns->n++] = name;
  return KILN_OK;
}

static kiln_status assigned(kl_ts_build *b, const kl_ts_stmt *st, int n, name_set *ns) {
  kiln_status s = KILN_OK;
  for (int i = 0; i < n && s == KILN_OK; i++) {
    for (int k = 0; k < st[i].n_targets && s == KILN_OK; k++)
      s = names_add(b, ns, st[i].targets[k]);
    if (s == KILN_OK && st[i].var) s = names_add(b, ns, st[i].var);
    if (s == KILN_OK) s = assigned(b, st[i].body, st[i].n_body, ns);
    if (s == KILN_OK) s = assigned(b, st[i].orelse, st[i].n_orelse, ns);
  }
  return s;
}

/* Statements of a block run in a body: a return there is refused. */
static kiln_status run_inner(kl_ts_build *b, frame *f, const kl_ts_stmt *st, int n) {
  bool returned = false;
  kl_tsv out;
  kiln_status s = run_block(b, f, st, n, &out, &returned);
  if (s == KILN_OK && returned)
    s = kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: a return inside a loop is not "
                "supported (kiln takes a return inside an if, not one in a for or while)",
                b->where, b->line);
  return s;
}

static kiln_status cond_id(kl_ts_build *b, const kl_tsv *c, int *id) {
  if (!has_id(c) && !is_literal(c))
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: a condition that is not a bool, "
                   "number or tensor", b->where, b->line);
  return value_id(b, c, KL_BOOL, "condition", id);
}

static kiln_status add_control(kl_ts_build *b, kl_op op, const char *const *attr,
                               body *const *bodies, int n_bodies, int n_in, const int *in,
                               int n_out, int *out) {
  b->aten = op == KL_OP_If ? "prim::If" : "prim::Loop";
  int node = kl_ts_node(b, op, n_in, in, n_out, out);
  if (node < 0) return b->e->code;
  for (int k = 0; k < n_bodies; k++) {
    bodies[k]->g->n_outer = bodies[k]->n_caps;
    kl_attr a = {.name = strdup(attr[k]), .kind = KL_ATTR_GRAPH, .g = bodies[k]->g};
    if (!a.name) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    bodies[k]->g = NULL; /* the node's now, also on failure */
    kiln_status s = kl_node_take_attr(b->g, node, &a, b->e);
    if (s != KILN_OK) return s;
  }
  return kl_ts_finish(b, node);
}

/* A value of body bd of t's dtype and rank (t of another body) to stand for a
 * placeholder, so that the If's output keeps the rank; else the literal 0. */
static const kl_tsv *like_of(const body *bd, const kl_type *t) {
  static const kl_tsv zero = {.kind = KL_TSV_INT, .id = -1};
  for (int k = 0; t && k < bd->f.n; k++) {
    const kl_tsv *v = &bd->f.vals[k];
    if (has_id(v) && bd->g->values[v->id].type.dtype == t->dtype &&
        bd->g->values[v->id].type.rank == t->rank)
      return v;
  }
  return &zero;
}

/* Branch j's value of a name (NULL: local to the other branch); a branch that ends in a
 * raise holds a placeholder for what the other one sets. */
static const kl_tsv *branch_value(const body *br, int j, const char *name) {
  static const kl_tsv placeholder = {.kind = KL_TSV_NONE, .s = uninitialized, .id = -1};
  const kl_tsv *v = frame_get(&br[j].f, name);
  if (br[j].raised && !br[1 - j].raised && frame_get(&br[1 - j].f, name)) return &placeholder;
  return v;
}

/* The raise code of the If's branches as their last outputs (0 in a branch that
 * reaches no raise), joined into the enclosing graph's once the If is made. */
static kiln_status raise_outputs(kl_ts_build *b, body *br, int *const *outs, int n_out,
                                 bool *any) {
  *any = br[0].raise_code >= 0 || br[1].raise_code >= 0;
  kiln_status s = KILN_OK;
  for (int j = 0; j < 2 && *any && s == KILN_OK; j++) {
    b->g = br[j].g;
    outs[j][n_out] = br[j].raise_code >= 0 ? br[j].raise_code : kl_ts_const_scalar(b, KL_I64, 0);
    if (outs[j][n_out] < 0) s = b->e->code;
    b->g = br[j].outer;
  }
  return s;
}

/* Branch values *v0 and *v1 that are tensors of different ranks (torchvision's box
 * decoding reshapes its boxes to [n, -1, 4] only when there are some): a value's rank
 * must be known while building, so the If gives the then branch's (the else branch's
 * where the then branch raises), and on the other path the value is an empty constant
 * of that rank and the run fails with a raise saying so. */
static kiln_status other_rank(kl_ts_build *b, body *br, const kl_tsv **v0, const kl_tsv **v1,
                              const char *name, kl_tsv *stand_in) {
  const kl_tsv *v[2] = {*v0, *v1};
  if (!has_id(v[0]) || !has_id(v[1])) return KILN_OK;
  const kl_type *t[2] = {&br[0].g->values[v[0]->id].type, &br[1].g->values[v[1]->id].type};
  if (t[0]->rank < 0 || t[1]->rank < 0 || t[0]->rank == t[1]->rank) return KILN_OK;
  int keep = br[0].raised ? 1 : 0, o = 1 - keep;
  const kl_type *kt = t[keep];
  int64_t dims[KL_MAX_RANK];
  for (int d = 0; d < kt->rank; d++) dims[d] = kt->dims[d].size >= 0 ? kt->dims[d].size : 0;
  size_t bytes = kt->rank ? 0 : kl_dtype_size(kt->dtype); /* none, or a 0-D zero */
  if (kt->rank) dims[0] = 0;
  char text[768];
  snprintf(text, sizeof text, "%s:%d: '%s' is a tensor of rank %d on one path of an if on the "
           "data and of rank %d on the other; kiln, which needs ranks while building, follows "
           "the %s path (rank %d), and this run took the other", b->where, b->line, name,
           t[0]->rank, t[1]->rank, keep ? "else" : "then", kt->rank);
  kl_graph *g = b->g;
  int saved = b->raise_code;
  b->g = br[o].g;
  b->raise_code = br[o].raise_code;
  void *data = calloc(1, bytes ? bytes : 1);
  int id = !data ? (kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory"), -1)
                 : kl_ts_const_data(b, kt->dtype, kt->rank, dims, data, bytes);
  kiln_status s = id < 0 ? b->e->code : add_raise(b, text);
  br[o].raise_code = b->raise_code;
  b->raise_code = saved;
  b->g = g;
  if (s != KILN_OK) return s;
  *stand_in = (kl_tsv){.kind = KL_TSV_TENSOR, .id = id};
  if (o) *v1 = stand_in;
  else *v0 = stand_in;
  return KILN_OK;
}

/* The If's outputs being gathered: outs[j][k], branch j's value of output k; like[k],
 * the kind of value output k stands for. */
typedef struct if_join {
  int *outs[2];
  kl_tsv *like;
  int n_out;
} if_join;

/* Branch values v0 and v1 of `name` (or of an element of it) joined: *v the value after
 * the If when both are the same literal, module or placeholder; else out (its index in
 * the If's outputs) a new output of the two. */
static kiln_status join_leaf(kl_ts_build *b, body *br, const kl_tsv *v0, const kl_tsv *v1,
                             const char *name, if_join *jn, kl_tsv *v, int *out) {
  *out = -1;
  *v = (kl_tsv){.kind = KL_TSV_NONE, .id = -1}; /* (an output: set once the If is made) */
  if ((is_literal(v0) && is_literal(v1) && v0->kind == v1->kind && v0->i == v1->i &&
       v0->f == v1->f) ||
      (!has_id(v0) && !has_id(v1) && v0->kind == KL_TSV_MODULE && v1->kind == KL_TSV_MODULE &&
       v0->obj == v1->obj) ||
      (is_uninit(v0) && is_uninit(v1)) ||
      (v0->kind == KL_TSV_NONE && v1->kind == KL_TSV_NONE && !is_uninit(v0) && !is_uninit(v1)))
    return *v = *v0, KILN_OK;
  kl_dtype dt = KL_UNDEFINED;
  if (has_id(v0)) dt = br[0].g->values[v0->id].type.dtype;
  else if (has_id(v1)) dt = br[1].g->values[v1->id].type.dtype;
  /* a placeholder, never read, stands for a value of the other branch's type */
  int j = is_uninit(v0) ? 0 : is_uninit(v1) ? 1 : -1;
  if (j >= 0) {
    const kl_tsv *set = j ? v0 : v1;
    const kl_type *t = has_id(set) ? &br[1 - j].g->values[set->id].type : NULL;
    const kl_tsv *stand_in = like_of(&br[j], t);
    if (j) v1 = stand_in;
    else v0 = stand_in;
  }
  kl_tsv stand_in;
  kiln_status s = other_rank(b, br, &v0, &v1, name, &stand_in);
  if (s != KILN_OK) return s;
  int k = jn->n_out;
  jn->like[k] = has_id(v0) ? *v0 : *v1;
  if (v0->kind == KL_TSV_TENSOR || v1->kind == KL_TSV_TENSOR) jn->like[k].kind = KL_TSV_TENSOR;
  for (j = 0; j < 2 && s == KILN_OK; j++) {
    b->g = br[j].g;
    s = value_id(b, j ? v1 : v0, dt, name, &jn->outs[j][k]);
    if (s == KILN_OK && dt == KL_UNDEFINED) dt = b->g->values[jn->outs[j][k]].type.dtype;
    b->g = br[j].outer;
  }
  *out = jn->n_out++;
  return s;
}

/* Whether v0 and v1 are tuples of one length (NamedTuples of one class: the same fields),
 * joined element by element (a placeholder, on a path that raises, stands for a tuple
 * of placeholders). */
static bool tuples_alike(const kl_tsv *v0, const kl_tsv *v1) {
  if (is_uninit(v0) != is_uninit(v1)) return (is_uninit(v0) ? v1 : v0)->kind == KL_TSV_TUPLE;
  if (v0->kind != KL_TSV_TUPLE || v1->kind != KL_TSV_TUPLE || v0->n != v1->n ||
      !v0->fields != !v1->fields)
    return false;
  for (int k = 0; v0->fields && k < v0->n; k++)
    if (strcmp(v0->fields[k], v1->fields[k]) != 0) return false;
  return true;
}

/* A name both branches set: its value after the If is *v, with v->items[k] to be made
 * the If's output slot[k] where slot[k] >= 0 (a tuple, joined element by element: a
 * NamedTuple made in both branches), or output slot[0] itself. */
static kiln_status join_name(kl_ts_build *b, body *br, const kl_tsv *v0, const kl_tsv *v1,
                             const char *name, if_join *jn, kl_tsv *v, int **slot) {
  if (!tuples_alike(v0, v1)) {
    *slot = kl_ts_alloc(b, sizeof **slot);
    return *slot ? join_leaf(b, br, v0, v1, name, jn, v, *slot) : b->e->code;
  }
  static const kl_tsv placeholder = {.kind = KL_TSV_NONE, .s = uninitialized, .id = -1};
  const kl_tsv *t = is_uninit(v0) ? v1 : v0;
  *v = *t;
  v->items = kl_ts_alloc(b, sizeof *v->items * (size_t)(t->n + 1));
  *slot = kl_ts_alloc(b, sizeof **slot * (size_t)(t->n + 1));
  if (!v->items || !*slot) return b->e->code;
  kiln_status s = KILN_OK;
  for (int k = 0; k < t->n && s == KILN_OK; k++) {
    const kl_tsv *e0 = is_uninit(v0) ? &placeholder : &v0->items[k];
    const kl_tsv *e1 = is_uninit(v1) ? &placeholder : &v1->items[k];
    if (tuples_alike(e0, e1))
      return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: '%s' is set in the branches of an if "
                     "on the data to tuples holding tuples (kiln joins a tuple's elements "
                     "when they are tensors or numbers)", b->where, b->line, name);
    s = join_leaf(b, br, e0, e1, name, jn, &v->items[k], &(*slot)[k]);
  }
  return s;
}

/* How many If outputs the names of ns may need: one each, a tuple one per element. */
static int outputs_bound(const body *br, const name_set *ns) {
  int n = 0;
  for (int k = 0; k < ns->n; k++) {
    const kl_tsv *v0 = branch_value(br, 0, ns->names[k]), *v1 = branch_value(br, 1, ns->names[k]);
    n += v0 && v1 && tuples_alike(v0, v1) ? (is_uninit(v0) ? v1 : v0)->n : 1;
  }
  return n;
}

/* The outputs of an If: every name both branches end with that one of them assigned
 * (a tuple's elements each), unless both hold the same literal; then the raise code,
 * when a branch raises. */
static kiln_status if_outputs(kl_ts_build *b, frame *f, body *br, const name_set *ns,
                              int cond, int line) {
  if_join jn = {{NULL, NULL}, NULL, 0};
  int *out = NULL, n_names = 0, bound = outputs_bound(br, ns), **slots = NULL;
  const char **names = NULL;
  b->line = line; /* (the joins' messages name the if) */
  kl_tsv *vals = NULL;
  kiln_status s = KILN_OK;
  size_t sz = sizeof(int) * (size_t)(bound + 2);
  if (!(jn.outs[0] = malloc(sz)) || !(jn.outs[1] = malloc(sz)) || !(out = malloc(sz)) ||
      !(names = malloc(sizeof *names * (size_t)(ns->n + 1))) ||
      !(vals = malloc(sizeof *vals * (size_t)(ns->n + 1))) ||
      !(slots = malloc(sizeof *slots * (size_t)(ns->n + 1))) ||
      !(jn.like = malloc(sizeof *jn.like * (size_t)(bound + 1))))
    s = kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int k = 0; k < ns->n && s == KILN_OK; k++) {
    const kl_tsv *v0 = branch_value(br, 0, ns->names[k]), *v1 = branch_value(br, 1, ns->names[k]);
    if (!v0 || !v1 || (br[0].raised && br[1].raised)) continue; /* local to one branch */
    names[n_names] = ns->names[k];
    s = join_name(b, br, v0, v1, ns->names[k], &jn, &vals[n_names], &slots[n_names]);
    n_names++;
  }
  int n_out = jn.n_out;
  bool raises = false;
  if (s == KILN_OK) s = raise_outputs(b, br, jn.outs, n_out, &raises);
  for (int j = 0; j < 2 && s == KILN_OK; j++)
    for (int k = 0; k < n_out + raises && s == KILN_OK; k++)
      s = kl_graph_add_output(br[j].g, jn.outs[j][k], b->e);
  int *in = NULL;
  if (s == KILN_OK && !(in = malloc(sizeof(int) * (size_t)(br[0].n_caps + 1))))
    s = kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (s == KILN_OK) {
    b->line = line;
    in[0] = cond;
    memcpy(in + 1, br[0].from, sizeof(int) * (size_t)br[0].n_caps);
    static const char *const attr[] = {"then_branch", "else_branch"};
    body *bodies[2] = {&br[0], &br[1]};
    if (n_out + raises) /* (branches that set nothing outside need no node) */
      s = add_control(b, KL_OP_If, attr, bodies, 2, 1 + br[0].n_caps, in, n_out + raises, out);
  }
  if (s == KILN_OK && raises) s = raise_join(b, out[n_out]);
  b->raised = br[0].raised && br[1].raised; /* (both paths end in a raise) */
  for (int k = 0; k < n_names && s == KILN_OK; k++) {
    kl_tsv *v = &vals[k];
    bool tuple = v->kind == KL_TSV_TUPLE;
    for (int e = 0; e < (tuple ? v->n : 1); e++) {
      int o = slots[k][e];
      if (o >= 0 && tuple) v->items[e] = as_value(&jn.like[o], out[o]);
      else if (o >= 0) *v = as_value(&jn.like[o], out[o]);
    }
    s = frame_set(b, f, names[k], v);
  }
  free(in);
  free(jn.outs[0]);
  free(jn.outs[1]);
  free(out);
  free(names);
  free(vals);
  free(slots);
  free(jn.like);
  return s;
}

static kiln_status written(kl_ts_build *b, const kl_ts_stmt *st, int n, name_set *ns);
static kiln_status settle_writes(kl_ts_build *b, frame *f, const kl_ts_stmt *st, int n);

static kiln_status run_if(kl_ts_build *b, frame *f, const kl_ts_stmt *st) {
  kl_tsv c;
  kiln_status s = eval(b, f, st->value, &c);
  if (s != KILN_OK) return s;
  if (is_literal(&c) || c.kind == KL_TSV_NONE) /* known now: only the branch taken */
    return c.kind != KL_TSV_NONE && (c.kind == KL_TSV_FLOAT ? c.f != 0 : c.i != 0)
               ? run_inner(b, f, st->body, st->n_body)
               : run_inner(b, f, st->orelse, st->n_orelse);
  int cond;
  if ((s = cond_id(b, &c, &cond)) != KILN_OK) return s;
  name_set ns = {0};
  body br[2];
  memset(br, 0, sizeof br);
  s = assigned(b, st, 1, &ns);
  if (s == KILN_OK) s = written(b, st->body, st->n_body, &ns);
  if (s == KILN_OK) s = written(b, st->orelse, st->n_orelse, &ns);
  for (int k = 0; k < 2 && s == KILN_OK; k++) {
    const kl_ts_stmt *block = k ? st->orelse : st->body;
    int n_block = k ? st->n_orelse : st->n_body;
    s = body_begin(b, &br[k], f, NULL, 0, NULL);
    if (s == KILN_OK) s = run_inner(b, &br[k].f, block, n_block);
    if (s == KILN_OK) s = settle_writes(b, &br[k].f, block, n_block);
    body_end(b, &br[k]);
  }
  if (s == KILN_OK) s = if_outputs(b, f, br, &ns, cond, st->line);
  body_free(&br[0]);
  body_free(&br[1]);
  free(ns.names);
  return s;
}

/* A for over range(start, stop[, step]) as code written by hand has it (torch writes the
 * same as range(torch.__range_length(start, stop, step)) and a torch.__derive_index of
 * the iteration number): op "__range_length" of (start, first, step) or
 * "__derive_index" of (first, start, step), start and step read in frame f. */
static kiln_status range_op(kl_ts_build *b, frame *f, const kl_ts_stmt *st, const char *op,
                            const kl_tsv *first, kl_tsv *out) {
  static const char *const no_kw[3] = {NULL, NULL, NULL};
  kl_tsv a[3] = {*first, *first, {.kind = KL_TSV_INT, .i = 1, .id = -1}};
  bool length = strcmp(op, "__range_length") == 0;
  kiln_status s = eval(b, f, st->start, &a[length ? 0 : 1]);
  if (s == KILN_OK && st->step) s = eval(b, f, st->step, &a[2]);
  if (s != KILN_OK) return s;
  b->aten = length ? "aten::__range_length" : "aten::__derive_index";
  b->line = st->line;
  s = kl_aten_call(b, op, a, no_kw, 3, out);
  if (s != KILN_OK) kl_err_prefix(b->e, "%s:%d: range", b->where, st->line);
  return s;
}

/* Whether x calls torch.NAME (an ATen op, or a list or dict method) */
static bool torch_call(const kl_ts_expr *x) {
  return x->kind == KL_TSE_CALL && x->obj->kind == KL_TSE_ATTR &&
         x->obj->obj->kind == KL_TSE_NAME && strcmp(x->obj->obj->s, "torch") == 0;
}

/* Names of tensors that expression x writes in place (torch.index_put_(keep_mask, ...),
 * as torchvision's batched NMS marks the boxes kept in a loop over the classes; the
 * base of the views written through, torch.copy_(torch.select(m, 0, 0), v)), added to
 * ns: in an If or Loop body, such a tensor of the enclosing frame is an output. */
static kiln_status expr_writes(kl_ts_build *b, const kl_ts_expr *x, name_set *ns, int depth) {
  if (!x || depth > 64) return KILN_OK;
  kiln_status s = KILN_OK;
  const char *op = torch_call(x) ? x->obj->s : "";
  size_t len = strlen(op);
  if (len > 1 && op[len - 1] == '_' && op[len - 2] != '_' && op[0] != '_' && x->n_args > 0) {
    const kl_ts_expr *a = x->args[0];
    for (int k = 0; k < 64 && torch_call(a) && a->n_args > 0; k++) a = a->args[0];
    if (a->kind == KL_TSE_NAME) s = names_add(b, ns, a->s);
  }
  if (s == KILN_OK) s = expr_writes(b, x->obj, ns, depth + 1);
  for (int k = 0; s == KILN_OK && k < x->n_args; k++)
    s = expr_writes(b, x->args[k], ns, depth + 1);
  return s;
}

static kiln_status written(kl_ts_build *b, const kl_ts_stmt *st, int n, name_set *ns) {
  kiln_status s = KILN_OK;
  for (int i = 0; i < n && s == KILN_OK; i++) {
    s = expr_writes(b, st[i].value, ns, 0);
    if (s == KILN_OK) s = written(b, st[i].body, st[i].n_body, ns);
    if (s == KILN_OK) s = written(b, st[i].orelse, st[i].n_orelse, ns);
  }
  return s;
}

/* Names written in place in a body hold, in its frame f, the values they had before it
 * (the writes are records of aten.c): their values now, before the body ends. */
static kiln_status settle_writes(kl_ts_build *b, frame *f, const kl_ts_stmt *st, int n) {
  name_set ws = {0};
  kiln_status s = written(b, st, n, &ws);
  for (int k = 0; k < ws.n && s == KILN_OK; k++) {
    const kl_tsv *v = frame_get(f, ws.names[k]);
    if (!v || v->kind != KL_TSV_TENSOR) continue;
    kl_tsv now = *v;
    s = kl_aten_current(b, v->id, &now.id);
    if (s == KILN_OK) s = frame_set(b, f, ws.names[k], &now);
  }
  free(ws.names);
  return s;
}

/* The loop-carried names: those the body assigns, or writes in place, that are defined
 * before the loop. */
static kiln_status carried_names(kl_ts_build *b, const frame *f, const kl_ts_stmt *st,
                                 name_set *ns) {
  name_set all = {0};
  kiln_status s = assigned(b, st->body, st->n_body, &all);
  if (s == KILN_OK) s = written(b, st->body, st->n_body, &all);
  for (int k = 0; k < all.n && s == KILN_OK; k++)
    if (frame_get(f, all.names[k]) && !(st->var && strcmp(all.names[k], st->var) == 0))
      s = names_add(b, ns, all.names[k]);
  free(all.names);
  return s;
}

/* The condition a Loop body hands on (cond, a bool value of b->g), when the body may
 * raise: none after a path that raised, else cond and no raise reached yet (a raise
 * ends the loop, as in Python). */
static kiln_status cond_after_raise(kl_ts_build *b, int *cond) {
  if (b->raised) { /* (the body's path ended in a raise) */
    b->raised = false;
    *cond = kl_ts_const_scalar(b, KL_BOOL, 0);
    return *cond < 0 ? b->e->code : KILN_OK;
  }
  int ok;
  kiln_status s = no_raise(b, b->raise_code, &ok);
  return s != KILN_OK ? s : node1(b, KL_OP_And, 2, (int[]){*cond, ok}, cond);
}

/* One try at a Loop's body with the carried values typed `types` (and, with raises, a
 * raise code carried last): *retry when a value the body carries on changes its shape
 * (a tensor growing by a row), with types widened to what it changes to, or when a
 * body built without raises reaches one (*raises then true). */
static kiln_status loop_body(kl_ts_build *b, frame *f, const kl_ts_stmt *st,
                             const name_set *ns, kl_type *types, bool *raises, body *bd,
                             bool *retry) {
  int n = ns->n, carried = n + *raises;
  kl_type *formal = malloc(sizeof *formal * (size_t)(carried + 2));
  int *ids = malloc(sizeof *ids * (size_t)(carried + 2));
  kiln_status s = formal && ids ? KILN_OK : kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  *retry = false;
  if (s == KILN_OK) {
    formal[0] = (kl_type){.dtype = KL_I64, .rank = 0};
    formal[1] = (kl_type){.dtype = KL_BOOL, .rank = 0};
    memcpy(formal + 2, types, sizeof *formal * (size_t)carried);
    s = body_begin(b, bd, f, formal, carried + 2, ids);
  }
  if (s == KILN_OK && *raises) b->raise_code = ids[n + 2];
  for (int k = 0; k < n && s == KILN_OK; k++) {
    kl_tsv v = as_value(frame_get(f, ns->names[k]), ids[k + 2]);
    s = frame_set(b, &bd->f, ns->names[k], &v);
  }
  if (s == KILN_OK && st->var) {
    kl_tsv n = {.kind = KL_TSV_INT, .id = ids[0]}, i = n; /* i = start + n * step */
    if (st->start) s = range_op(b, &bd->f, st, "__derive_index", &n, &i);
    if (s == KILN_OK) s = frame_set(b, &bd->f, st->var, &i);
  }
  b->loops++;
  b->scan_id = -1;
  b->scan_frame = &bd->f;
  if (s == KILN_OK) s = run_inner(b, &bd->f, st->body, st->n_body);
  if (s == KILN_OK) s = settle_writes(b, &bd->f, st->body, st->n_body);
  b->loops--;
  bool raised = b->raised;
  if (s == KILN_OK && !*raises && b->raise_code >= 0) *raises = *retry = true;
  int cond = ids ? ids[1] : -1;
  if (s == KILN_OK && st->kind == KL_TSS_WHILE && !raised) {
    kl_tsv c;
    s = eval(b, &bd->f, st->value, &c);
    if (s == KILN_OK) s = cond_id(b, &c, &cond);
  }
  if (s == KILN_OK && b->raise_code >= 0) s = cond_after_raise(b, &cond);
  if (s == KILN_OK) s = kl_graph_add_output(b->g, cond, b->e);
  for (int k = 0; k < n && s == KILN_OK; k++) {
    int id;
    const kl_tsv *v = frame_get(&bd->f, ns->names[k]);
    kl_tsv in = as_value(frame_get(f, ns->names[k]), ids[k + 2]);
    if (is_uninit(v)) v = &in; /* (set by a call that raised: never read) */
    s = value_id(b, v, types[k].dtype, ns->names[k], &id);
    if (s == KILN_OK) s = kl_graph_add_output(b->g, id, b->e);
    if (s != KILN_OK) break;
    kl_type t = kl_type_translate(bd->outer, b->g, &b->g->values[id].type);
    if (t.rank != types[k].rank)
      s = kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: loop-carried '%s' changes rank from %d "
                  "to %d in the loop", b->where, st->line, ns->names[k], types[k].rank, t.rank);
    for (int d = 0; s == KILN_OK && d < t.rank; d++)
      if (!kl_dim_equal(t.dims[d], types[k].dims[d]) &&
          !(types[k].dims[d].size < 0 && types[k].dims[d].sym < 0)) {
        types[k].dims[d] = (kl_dim){-1, -1};
        *retry = true;
      }
  }
  if (s == KILN_OK && carried > n) s = kl_graph_add_output(b->g, b->raise_code, b->e);
  if (s == KILN_OK && b->scan_name && b->scan_id < 0)
    s = kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: a pass of the loop may end without its "
                "append (a raise before it)", b->where, st->line);
  /* the element appended: what it holds at the end of the pass, after the in-place
   * writes into it (mask pasting's copy_ into im_mask) */
  if (s == KILN_OK && b->scan_name && (s = kl_aten_current(b, b->scan_id, &b->scan_id)) == KILN_OK)
    s = kl_graph_add_output(b->g, b->scan_id, b->e);
  body_end(b, bd);
  free(formal);
  free(ids);
  return s;
}

/* The in-place writes of ATen that write through views (torchvision's batch_images
 * copies each image into a select and slices of the batch, in a loop) */
static bool view_write(const char *name) {
  static const char *const writes[] = {"copy_", "fill_", "zero_", "index_put_",
                                       "index_fill_", "masked_fill_"};
  for (size_t k = 0; k < sizeof writes / sizeof writes[0]; k++)
    if (strcmp(name, writes[k]) == 0) return true;
  return false;
}

/* Whether expression x changes a list or dict (torch.append, insert, _set_item, extend,
 * pop, ...) or writes into a tensor in place (copy_, fill_, ...: the write's select
 * or slice would take the loop counter, a graph value, for its index): a loop whose
 * count is known is then unrolled */
static bool expr_appends(const kl_ts_expr *x) {
  if (!x) return false;
  if (x->kind == KL_TSE_CALL && x->obj->kind == KL_TSE_ATTR &&
      (strcmp(x->obj->s, "append") == 0 || strcmp(x->obj->s, "insert") == 0 ||
       view_write(x->obj->s) ||
       strcmp(x->obj->s, "_set_item") == 0 || strcmp(x->obj->s, "setdefault") == 0 ||
       strcmp(x->obj->s, "update") == 0 || list_method(x->obj->s)) &&
      x->obj->obj->kind == KL_TSE_NAME && strcmp(x->obj->obj->s, "torch") == 0)
    return true;
  if (expr_appends(x->obj)) return true;
  for (int k = 0; k < x->n_args; k++)
    if (expr_appends(x->args[k])) return true;
  return false;
}

static bool appends(const kl_ts_stmt *st, int n) {
  for (int i = 0; i < n; i++)
    if (expr_appends(st[i].value) || appends(st[i].body, st[i].n_body) ||
        appends(st[i].orelse, st[i].n_orelse))
      return true;
  return false;
}

/* Whether tensors of types t and u may be stacked: one dtype and rank, and no dim whose
 * sizes are known and differ. */
static bool stackable(const kl_type *t, const kl_type *u) {
  if (t->dtype != u->dtype || t->rank != u->rank) return false;
  for (int k = 0; k < t->rank; k++)
    if (t->dims[k].size >= 0 && u->dims[k].size >= 0 && t->dims[k].size != u->dims[k].size)
      return false;
  return true;
}

/* Whether the graph can pick an element of list v at run time (index_at_run_time): a
 * list of numbers known while building of one kind, of ints, or of tensors of one type. */
static bool gatherable(const kl_ts_build *b, const kl_tsv *v) {
  bool known = true, ints = true, tensors = true;
  for (int k = 0; k < v->n; k++) {
    const kl_tsv *x = &v->items[k];
    known &= is_literal(x) && x->kind == v->items[0].kind;
    ints &= x->kind == KL_TSV_INT || (x->kind == KL_TSV_TENSOR &&
                                      b->g->values[x->id].type.rank == 0 &&
                                      b->g->values[x->id].type.dtype == KL_I64);
    tensors &= x->kind == KL_TSV_TENSOR && v->items[0].kind == KL_TSV_TENSOR &&
               stackable(&b->g->values[x->id].type, &b->g->values[v->items[0].id].type);
  }
  return known || ints || tensors;
}

/* Whether expression x reads an element, at an index not written as a literal, of a list
 * of frame f that the graph cannot pick at run time (dict.items(), keys(), a list of
 * tensors of other shapes): a loop over such a list is unrolled. */
static bool expr_reads_opaque(const kl_ts_build *b, const frame *f, const kl_ts_expr *x,
                              int depth) {
  if (!x || depth > 64) return false;
  if (x->kind == KL_TSE_INDEX && x->n_args == 1 && x->obj->kind == KL_TSE_NAME) {
    const kl_tsv *v = frame_get(f, x->obj->s);
    if (v && (v->kind == KL_TSV_LIST || v->kind == KL_TSV_TUPLE) && !gatherable(b, v))
      return true;
  }
  if (expr_reads_opaque(b, f, x->obj, depth + 1)) return true;
  for (int k = 0; k < x->n_args; k++)
    if (expr_reads_opaque(b, f, x->args[k], depth + 1)) return true;
  return false;
}

static bool reads_opaque(const kl_ts_build *b, const frame *f, const kl_ts_stmt *st, int n) {
  for (int i = 0; i < n; i++)
    if (expr_reads_opaque(b, f, st[i].value, 0) || reads_opaque(b, f, st[i].body, st[i].n_body) ||
        reads_opaque(b, f, st[i].orelse, st[i].n_orelse))
      return true;
  return false;
}

/* A for whose count is known while building and whose body appends to a list (F.interpolate
 * builds its scale factors so) or reads a list the graph cannot index (a dict's items):
 * the body run count times, no Loop node. */
/* One more pass of an unrolled loop, or KILN_ERR_LIMIT past MAX_UNROLLED in all. */
static kiln_status unroll_pass(kl_ts_build *b, const kl_ts_stmt *st) {
  if (++b->unrolled <= MAX_UNROLLED) return KILN_OK;
  return kl_fail(b->e, KILN_ERR_LIMIT, "%s:%d: loops unrolled while building the graph (a "
                 "known count whose body changes a list or dict, or a while that appends) "
                 "ran more than %d passes in all: export with torch.jit.trace or to ONNX",
                 b->where, st->line, MAX_UNROLLED);
}

static kiln_status unroll_for(kl_ts_build *b, frame *f, const kl_ts_stmt *st, int64_t count) {
  for (int64_t n = 0; n < count; n++) {
    if (unroll_pass(b, st) != KILN_OK) return KILN_ERR_LIMIT;
    kl_tsv i = {.kind = KL_TSV_INT, .i = n, .id = -1}, k = i;
    kiln_status s = st->start ? range_op(b, f, st, "__derive_index", &k, &i) : KILN_OK;
    if (s == KILN_OK && st->var) s = frame_set(b, f, st->var, &i);
    b->loops++;
    if (s == KILN_OK) s = run_inner(b, f, st->body, st->n_body);
    b->loops--;
    if (s != KILN_OK || b->raised) return s; /* (a raise ends the path, and the loop) */
  }
  return KILN_OK;
}

/* A while whose condition is known while building, before each pass, and whose body
 * appends to a list: the body run while it holds, no Loop node (the statements run in
 * all bound the passes). */
static kiln_status unroll_while(kl_ts_build *b, frame *f, const kl_ts_stmt *st, kl_tsv c) {
  for (int64_t n = 0;; n++) {
    if (!is_literal(&c))
      return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: a while loop that appends to a list, "
                     "whose condition the data decides after %lld passes: export with "
                     "torch.jit.trace or to ONNX", b->where, st->line, (long long)n);
    if (c.kind == KL_TSV_FLOAT ? c.f == 0 : c.i == 0) return KILN_OK;
    if (unroll_pass(b, st) != KILN_OK) return KILN_ERR_LIMIT;
    b->loops++;
    kiln_status s = run_inner(b, f, st->body, st->n_body);
    b->loops--;
    if (s != KILN_OK || b->raised || (s = eval(b, f, st->value, &c)) != KILN_OK) return s;
  }
}

/* Whether expression x names `name`. */
static bool mentions(const kl_ts_expr *x, const char *name, int depth) {
  if (!x || depth > 64) return x != NULL;
  if (x->kind == KL_TSE_NAME && strcmp(x->s, name) == 0) return true;
  if (mentions(x->obj, name, depth + 1)) return true;
  for (int k = 0; k < x->n_args; k++)
    if (mentions(x->args[k], name, depth + 1)) return true;
  return false;
}

/* How many of statements st (and of the statements in their blocks) name `name`. */
static int mentions_in(const kl_ts_stmt *st, int n, const char *name, int depth) {
  int count = 0;
  for (int i = 0; i < n && depth < 64; i++) {
    bool here = mentions(st[i].value, name, 0) || mentions(st[i].attr_target, name, 0) ||
                mentions(st[i].start, name, 0) || mentions(st[i].step, name, 0) ||
                (st[i].var && strcmp(st[i].var, name) == 0);
    for (int k = 0; k < st[i].n_targets; k++) here |= strcmp(st[i].targets[k], name) == 0;
    count += here + mentions_in(st[i].body, st[i].n_body, name, depth + 1) +
             mentions_in(st[i].orelse, st[i].n_orelse, name, depth + 1);
  }
  return count;
}

/* The list that the body of for loop st, whose count the data decides, appends to once
 * per pass and reads nowhere else (torchvision's paste_masks_in_image appends one mask
 * per detection): an empty list of frame f, named in one statement of the body,
 * `torch.append(name, value)` at its top level, made at the Loop's level (not outside an
 * If or Loop body the Loop is in). Its elements become the Loop's scan
 * output, stacked; the name is taken out of the carried names ns. NULL when none. */
static const char *scanned_list(const kl_ts_build *b, const frame *f, const kl_ts_stmt *st,
                                name_set *ns) {
  for (int i = 0; i < st->n_body; i++) {
    const kl_ts_expr *x = st->body[i].value;
    if (st->body[i].kind != KL_TSS_SIMPLE || !x || x->kind != KL_TSE_CALL || x->n_args != 2 ||
        !torch_call(x) || strcmp(x->obj->s, "append") != 0 || x->args[0]->kind != KL_TSE_NAME)
      continue;
    const char *name = x->args[0]->s;
    const kl_tsv *v = frame_get(f, name);
    if (!v || v->kind != KL_TSV_LIST || v->n != 0 || !v->items ||
        v->made_in != b->bodies + 1 || mentions(x->args[1], name, 0) ||
        mentions_in(st->body, st->n_body, name, 0) != 1)
      continue;
    for (int k = 0; k < ns->n; k++)
      if (strcmp(ns->names[k], name) == 0) ns->names[k--] = ns->names[--ns->n];
    return name;
  }
  return NULL;
}

/* The list of items `items` is now the stacked tensor id, in every frame running (by a
 * name or inside a list, tuple or dict). */
static void stacked_in(kl_tsv *u, const kl_tsv *items, int id, int depth) {
  if (u->kind == KL_TSV_LIST && u->items == items) {
    *u = (kl_tsv){.kind = KL_TSV_STACK, .id = id};
    return;
  }
  if ((u->kind == KL_TSV_LIST || u->kind == KL_TSV_TUPLE || u->kind == KL_TSV_DICT) &&
      depth < 8)
    for (int k = 0; k < u->n; k++) stacked_in(&u->items[k], items, id, depth + 1);
}

static void stacked_everywhere(kl_ts_build *b, const kl_tsv *items, int id) {
  for (frame *g = b->frame; g; g = g->up)
    for (int k = 0; k < g->n; k++) stacked_in(&g->vals[k], items, id, 0);
}

static kiln_status run_loop(kl_ts_build *b, frame *f, const kl_ts_stmt *st) {
  kl_tsv c;
  kiln_status s = eval(b, f, st->value, &c);
  if (s == KILN_OK && st->kind == KL_TSS_FOR && st->start) {
    kl_tsv stop = c;
    s = range_op(b, f, st, "__range_length", &stop, &c);
  }
  if (s != KILN_OK) return s;
  if (st->kind == KL_TSS_WHILE && c.kind == KL_TSV_BOOL && c.id < 0 && !c.i) return KILN_OK;
  if (st->kind == KL_TSS_FOR && c.kind != KL_TSV_INT && c.kind != KL_TSV_TENSOR)
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: range of a value that is not an int",
                   b->where, st->line);
  if (st->kind == KL_TSS_FOR && c.kind == KL_TSV_INT && c.id < 0 &&
      (appends(st->body, st->n_body) || reads_opaque(b, f, st->body, st->n_body)))
    return unroll_for(b, f, st, c.i);
  if (st->kind == KL_TSS_WHILE && is_literal(&c) && appends(st->body, st->n_body))
    return unroll_while(b, f, st, c);
  int head[2];
  head[0] = KL_ABSENT;
  if (st->kind == KL_TSS_FOR) s = value_id(b, &c, KL_I64, "range", &head[0]);
  if (s == KILN_OK) s = st->kind == KL_TSS_FOR ? value_id(b, &(kl_tsv){.kind = KL_TSV_BOOL, .i = 1,
                                                                        .id = -1},
                                                          KL_BOOL, "cond", &head[1])
                                               : cond_id(b, &c, &head[1]);
  name_set ns = {0};
  const char *scan = NULL;
  if (s == KILN_OK) s = carried_names(b, f, st, &ns);
  if (s == KILN_OK && st->kind == KL_TSS_FOR && c.id >= 0) scan = scanned_list(b, f, st, &ns);
  const char *saved_name = b->scan_name;
  const frame *saved_frame = b->scan_frame;
  int saved_id = b->scan_id;
  const kl_tsv *scan_items = scan ? frame_get(f, scan)->items : NULL;
  b->scan_name = scan;
  int n = ns.n;
  int *init = malloc(sizeof(int) * (size_t)(n + 2));
  kl_type *types = malloc(sizeof *types * (size_t)(n + 2)); /* (and a raise code's) */
  if (s == KILN_OK && (!init || !types)) s = kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  for (int k = 0; k < n && s == KILN_OK; k++) {
    s = value_id(b, frame_get(f, ns.names[k]), KL_UNDEFINED, ns.names[k], &init[k]);
    if (s == KILN_OK) types[k] = b->g->values[init[k]].type;
  }
  body bd = {0};
  bool retry = true, raises = false; /* (a raise in the body: its code carried last) */
  for (int tries = 0; s == KILN_OK && retry; tries++) {
    body_free(&bd);
    if (tries == 4) {
      s = kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: the shapes of the loop's carried values "
                  "do not settle", b->where, st->line);
      break;
    }
    bool had = raises;
    s = loop_body(b, f, st, &ns, types, &raises, &bd, &retry);
    if (s == KILN_OK && raises && !had) {
      types[n] = (kl_type){.dtype = KL_I64, .rank = 0};
      if ((init[n] = kl_ts_const_scalar(b, KL_I64, 0)) < 0) s = b->e->code;
    }
  }
  b->scan_name = saved_name;
  b->scan_frame = saved_frame;
  b->scan_id = saved_id;
  int m = n + raises, *in = NULL, *out = NULL;
  if (s == KILN_OK && (!(in = malloc(sizeof(int) * (size_t)(2 + m + bd.n_caps))) ||
                       !(out = malloc(sizeof(int) * (size_t)(m + 2)))))
    s = kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (s == KILN_OK) {
    memcpy(in, head, sizeof head);
    if (m) memcpy(in + 2, init, sizeof(int) * (size_t)m);
    if (bd.n_caps) memcpy(in + 2 + m, bd.from, sizeof(int) * (size_t)bd.n_caps);
    static const char *const attr[] = {"body"};
    body *bodies[1] = {&bd};
    b->line = st->line;
    /* (a loop that carries nothing and reaches no raise, torchvision's check of each
     * box tensor's width, which is known while building, changes nothing: no node) */
    if (m || scan)
      s = add_control(b, KL_OP_Loop, attr, bodies, 1, 2 + m + bd.n_caps, in, m + !!scan, out);
  }
  if (s == KILN_OK && scan) /* the list: its elements stacked, wherever it is held */
    stacked_everywhere(b, scan_items, out[m]);
  for (int k = 0; k < n && s == KILN_OK; k++) {
    kl_tsv v = as_value(frame_get(f, ns.names[k]), out[k]);
    s = frame_set(b, f, ns.names[k], &v);
  }
  if (s == KILN_OK && raises) s = raise_join(b, out[n]);
  body_free(&bd);
  free(in);
  free(out);
  free(init);
  free(types);
  free(ns.names);
  return s;
}

/* ---- return inside an if ---- */

/* Whether a return is among these statements or in the if/else blocks among them (one
 * in a loop is refused where the loop runs). */
static bool returns(const kl_ts_stmt *st, int n) {
  for (int i = 0; i < n; i++)
    if (st[i].is_return ||
        (st[i].kind == KL_TSS_IF && (returns(st[i].body, st[i].n_body) ||
                                     returns(st[i].orelse, st[i].n_orelse))))
      return true;
  return false;
}

/* The leaves (tensors, numbers) of a returned value, named "<return N>" in frame f;
 * *n counts them. */
static kiln_status name_leaves(kl_ts_build *b, frame *f, const kl_tsv *v, int depth, int *n) {
  if (depth > 16)
    return kl_fail(b->e, KILN_ERR_LIMIT, "%s:%d: a return value nested too deeply",
                   b->where, b->line);
  if (v->kind == KL_TSV_LIST || v->kind == KL_TSV_TUPLE) {
    for (int k = 0; k < v->n; k++) {
      kiln_status s = name_leaves(b, f, &v->items[k], depth + 1, n);
      if (s != KILN_OK) return s;
    }
    return KILN_OK;
  }
  char *name = kl_ts_alloc(b, 32);
  if (!name) return b->e->code;
  snprintf(name, 32, "<return %d>", (*n)++);
  return frame_set(b, f, name, v);
}

static bool same_shape(const kl_tsv *x, const kl_tsv *y, int depth) {
  bool seq = x->kind == KL_TSV_LIST || x->kind == KL_TSV_TUPLE;
  if (!seq) return !(y->kind == KL_TSV_LIST || y->kind == KL_TSV_TUPLE);
  if (x->kind != y->kind || x->n != y->n || depth > 16) return false;
  for (int k = 0; k < x->n; k++)
    if (!same_shape(&x->items[k], &y->items[k], depth + 1)) return false;
  return true;
}

/* like, with its leaves replaced by frame f's "<return N>" values in order */
static kiln_status joined_value(kl_ts_build *b, const frame *f, const kl_tsv *like, int *n,
                                kl_tsv *out) {
  *out = *like;
  if (like->kind == KL_TSV_LIST || like->kind == KL_TSV_TUPLE) {
    out->items = kl_ts_alloc(b, sizeof *out->items * (size_t)(like->n ? like->n : 1));
    if (!out->items) return b->e->code;
    for (int k = 0; k < like->n; k++) {
      kiln_status s = joined_value(b, f, &like->items[k], n, &out->items[k]);
      if (s != KILN_OK) return s;
    }
    return KILN_OK;
  }
  char name[32];
  snprintf(name, sizeof name, "<return %d>", (*n)++);
  const kl_tsv *v = frame_get(f, name);
  if (!v)
    return kl_fail(b->e, KILN_ERR_INTERNAL, "%s:%d: return value %s lost", b->where,
                   b->line, name);
  *out = *v;
  return KILN_OK;
}

/* An if with a return in it, followed by the statements `rest` of its block: each
 * branch goes on with rest (a branch that returns stops before it), so that both
 * paths end in a return, and the value returned is the If's. */
static kiln_status run_if_return(kl_ts_build *b, frame *f, const kl_ts_stmt *st,
                                 const kl_ts_stmt *rest, int n_rest, kl_tsv *out,
                                 bool *returned) {
  kl_ts_stmt *path[2];
  int n[2] = {st->n_body + n_rest, st->n_orelse + n_rest};
  if ((b->moved += n[0] + n[1]) > MAX_MOVED || b->if_returns >= MAX_IF_RETURNS)
    return kl_fail(b->e, KILN_ERR_LIMIT, "%s:%d: ifs with a return: more than %d in the paths "
                   "of each other, or more than %d statements moved into their paths",
                   b->where, st->line, MAX_IF_RETURNS, MAX_MOVED);
  for (int k = 0; k < 2; k++) {
    if (!(path[k] = kl_ts_alloc(b, sizeof *path[k] * (size_t)(n[k] + 1)))) return b->e->code;
    const kl_ts_stmt *own = k ? st->orelse : st->body;
    int n_own = n[k] - n_rest;
    if (n_own) memcpy(path[k], own, sizeof *own * (size_t)n_own);
    if (n_rest) memcpy(path[k] + n_own, rest, sizeof *rest * (size_t)n_rest);
  }
  kl_tsv c;
  kiln_status s = eval(b, f, st->value, &c);
  if (s != KILN_OK) return s;
  if (is_literal(&c) || c.kind == KL_TSV_NONE) { /* known now: the path taken only */
    int k = c.kind != KL_TSV_NONE && (c.kind == KL_TSV_FLOAT ? c.f != 0 : c.i != 0) ? 0 : 1;
    b->if_returns++;
    s = run_block(b, f, path[k], n[k], out, returned);
    b->if_returns--;
    return s;
  }
  int cond;
  if ((s = cond_id(b, &c, &cond)) != KILN_OK) return s;
  body br[2];
  kl_tsv ret[2];
  bool done[2] = {false, false};
  int leaves[2] = {0, 0};
  memset(br, 0, sizeof br);
  for (int k = 0; k < 2 && s == KILN_OK; k++) {
    s = body_begin(b, &br[k], f, NULL, 0, NULL);
    b->if_returns++;
    if (s == KILN_OK) s = run_block(b, &br[k].f, path[k], n[k], &ret[k], &done[k]);
    b->if_returns--;
    if (s == KILN_OK && !done[k] && !b->raised)
      s = kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: the %s path of this if reaches the "
                  "end of the function without return", b->where, st->line,
                  k ? "else" : "then");
    if (s == KILN_OK && !b->raised) s = name_leaves(b, &br[k].f, &ret[k], 0, &leaves[k]);
    body_end(b, &br[k]);
  }
  /* (a path that ends in a raise returns nothing: the If's outputs are the other's) */
  int j = br[0].raised ? 1 : 0;
  if (s == KILN_OK && !br[0].raised && !br[1].raised && !same_shape(&ret[0], &ret[1], 0))
    s = kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: the two paths of this if return values "
                "of different structure (tuples or lists of other lengths)", b->where,
                st->line);
  name_set ns = {0};
  for (int k = 0; k < leaves[j] && s == KILN_OK && !br[j].raised; k++) {
    char name[32];
    snprintf(name, sizeof name, "<return %d>", k);
    for (int i = 0; i < br[j].f.n; i++) /* the name as stored, which outlives this */
      if (strcmp(br[j].f.names[i], name) == 0) s = names_add(b, &ns, br[j].f.names[i]);
  }
  if (s == KILN_OK) s = if_outputs(b, f, br, &ns, cond, st->line);
  int k = 0;
  if (s == KILN_OK && !b->raised) s = joined_value(b, f, &ret[j], &k, out);
  if (s == KILN_OK && !b->raised) *returned = true;
  body_free(&br[0]);
  body_free(&br[1]);
  free(ns.names);
  return s;
}

static kiln_status run_block(kl_ts_build *b, frame *f, const kl_ts_stmt *st, int n,
                             kl_tsv *out, bool *returned) {
  for (int i = 0; i < n; i++, st++) {
    if (++b->statements > MAX_STATEMENTS)
      return kl_fail(b->e, KILN_ERR_LIMIT, "%s: more than %d statements to run (modules "
                     "inlined into each other too many times)", b->ar.path, MAX_STATEMENTS);
    b->line = st->line;
    kiln_status s;
    if (st->kind == KL_TSS_PASS) continue;
    if (st->kind == KL_TSS_IF && returns(st, 1) && b->loops)
      return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: a return inside a loop is not "
                     "supported (kiln takes a return inside an if, not one in a for or "
                     "while)", b->where, st->line);
    if (st->kind == KL_TSS_IF && returns(st, 1))
      return run_if_return(b, f, st, st + 1, n - i - 1, out, returned);
    if (st->kind == KL_TSS_IF) s = run_if(b, f, st);
    else if (st->kind != KL_TSS_SIMPLE) s = run_loop(b, f, st);
    else {
      kl_tsv v;
      s = eval(b, f, st->value, &v);
      if (s != KILN_OK) return s;
      if (st->is_return) return *out = v, *returned = true, KILN_OK;
      if (st->n_targets) s = assign(b, f, st, &v);
      else if (st->attr_target) s = set_module_attr(b, f, st->attr_target, &v);
    }
    if (s != KILN_OK || b->raised) return s; /* (a raise ends the path) */
  }
  return KILN_OK;
}

static kiln_status run_body(kl_ts_build *b, const kl_ts_method *m, frame *f, kl_tsv *out) {
  bool returned = false;
  kiln_status s = run_block(b, f, m->body, m->n_body, out, &returned);
  if (s == KILN_OK && after_raise(b, out)) return KILN_OK;
  if (s == KILN_OK && !returned)
    s = kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: method '%s' ends without return",
                b->where, m->line, m->name);
  return s;
}

/* The parameters of m from `first` on bound in f: the arguments by position, then by
 * keyword (kw[k] names argument k, or is NULL, or kw is NULL), then the defaults. */
static kiln_status bind_args(kl_ts_build *b, const kl_ts_method *m, int first, const char *name,
                             const kl_tsv *args, const char *const *kw, int n_args, frame *f) {
  int np = m->n_params - first, pos = 0;
  kl_tsv *vals = kl_ts_alloc(b, sizeof *vals * (size_t)(np + 1));
  bool *set = kl_ts_alloc(b, sizeof *set * (size_t)(np + 1));
  if (!vals || !set) return b->e->code;
  for (int k = 0; k < n_args; k++) {
    int j = 0;
    if (kw && kw[k]) {
      while (j < np && strcmp(m->params[first + j], kw[k]) != 0) j++;
      if (j == np)
        return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: %s has no parameter '%s'",
                       b->where, b->line, name, kw[k]);
    } else if ((j = pos++) >= np) {
      return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: %s takes %d arguments, called "
                     "with %d", b->where, b->line, name, np, n_args);
    }
    if (set[j])
      return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: %s: argument '%s' given twice",
                     b->where, b->line, name, m->params[first + j]);
    vals[j] = args[k];
    set[j] = true;
  }
  for (int j = 0; j < np; j++) {
    kiln_status s = KILN_OK;
    if (!set[j] && !(m->defaults && m->defaults[first + j]))
      return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: %s: no argument for parameter "
                     "'%s', which has no default", b->where, b->line, name, m->params[first + j]);
    if (!set[j]) { /* a literal, read in no frame */
      frame none = {0};
      int line = b->line;
      s = eval(b, &none, m->defaults[first + j], &vals[j]);
      b->line = line;
    }
    if (s == KILN_OK) s = frame_set(b, f, m->params[first + j], &vals[j]);
    if (s != KILN_OK) return s;
  }
  return KILN_OK;
}

/* Inline m (of code file `file`, named `name` in messages): self (NULL for a free
 * function) and the arguments bound, its statements run. */
static kiln_status invoke(kl_ts_build *b, const kl_ts_method *m, const char *file,
                          const char *name, const kl_tsv *self, const kl_tsv *args,
                          const char *const *kw, int n_args, kl_tsv *out) {
  if (b->depth >= MAX_CALL_DEPTH)
    return kl_fail(b->e, KILN_ERR_LIMIT, "%s:%d: calling %s: calls of module methods and "
                   "scripted functions nested deeper than %d (a function that calls itself?)",
                   b->where, b->line, name, MAX_CALL_DEPTH);
  frame f = {0};
  kiln_status s = self ? frame_set(b, &f, m->params[0], self) : KILN_OK;
  if (s == KILN_OK) s = bind_args(b, m, self ? 1 : 0, name, args, kw, n_args, &f);
  const char *scope = b->scope, *where = b->where;
  int line = b->line, loops = b->loops;
  b->depth++;
  b->loops = 0; /* (a return in the function ends the function, not the caller's loop) */
  f.up = b->frame;
  b->frame = &f;
  if (self) b->scope = self->s;
  b->where = file;
  if (s == KILN_OK) s = run_body(b, m, &f, out);
  free(f.names);
  free(f.vals);
  b->scope = scope;
  b->where = where;
  b->line = line;
  b->loops = loops;
  b->frame = f.up;
  b->depth--;
  return s;
}

/* len(self.blocks) of an nn.ModuleList or nn.Sequential (its code has no __len__): the
 * submodules "0", "1", ... it holds. */
static kiln_status container_len(kl_ts_build *b, const kl_tsv *self, kl_tsv *out) {
  int64_t n = 0;
  char key[24];
  for (;; n++) {
    snprintf(key, sizeof key, "%lld", (long long)n);
    if (!kl_pk_dict_get(self->obj->state, key)) break;
  }
  if (n == 0 && !strstr(self->obj->name, "ModuleList") && !strstr(self->obj->name, "Sequential"))
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: __len__ of module '%s' (%s), which is "
                   "not an nn.ModuleList or nn.Sequential", b->where, b->line,
                   *self->s ? self->s : "<top>", self->obj->name);
  *out = (kl_tsv){.kind = KL_TSV_INT, .i = n, .id = -1};
  return KILN_OK;
}

static kiln_status call_method(kl_ts_build *b, const kl_tsv *self, const char *method,
                               const kl_tsv *args, const char *const *kw, int n_args,
                               kl_tsv *out) {
  const kl_ts_method *m;
  const char *file;
  if (strcmp(method, "__len__") == 0 && n_args == 0) /* of a ModuleList or Sequential */
    return container_len(b, self, out);
  kiln_status s = find_method(b, self->obj, method, &m, &file);
  if (s != KILN_OK) return s;
  if (m->n_params < 1)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: method %s has no parameters, "
                   "expected self first", b->where, b->line, method);
  return invoke(b, m, file, method, self, args, kw, n_args, out);
}

/* NamedTuple cls (named qual) made of the arguments, bound to its fields by position,
 * then by keyword: a tuple whose items have the fields' names. */
static kiln_status named_tuple(kl_ts_build *b, const kl_ts_class *cls, const char *qual,
                               const kl_tsv *args, const char *const *kw, int n_args,
                               kl_tsv *out) {
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)(cls->n_fields + 1));
  bool *set = kl_ts_alloc(b, sizeof *set * (size_t)(cls->n_fields + 1));
  if (!items || !set) return b->e->code;
  for (int k = 0; k < n_args; k++) {
    int j = kw && kw[k] ? 0 : k;
    while (kw && kw[k] && j < cls->n_fields && strcmp(cls->fields[j], kw[k]) != 0) j++;
    if (j >= cls->n_fields || set[j])
      return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: NamedTuple %s (%d fields): "
                     "argument %d (%s) is not one of its fields or is given twice", b->where,
                     b->line, qual, cls->n_fields, k, kw && kw[k] ? kw[k] : "by position");
    items[j] = args[k];
    set[j] = true;
  }
  for (int j = 0; j < cls->n_fields; j++)
    if (!set[j])
      return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: NamedTuple %s made without its "
                     "field '%s'", b->where, b->line, qual, cls->fields[j]);
  *out = (kl_tsv){.kind = KL_TSV_TUPLE, .items = items, .n = cls->n_fields, .id = -1,
                  .fields = cls->fields};
  return KILN_OK;
}

/* The class named qual[0, end) ("__torch__.torchvision.models.detection.image_list.
 * ImageList") of the code: *cls, and *file, the file holding it. */
static kiln_status code_class(kl_ts_build *b, const char *qual, size_t end,
                              const kl_ts_class **cls, const char **file) {
  char *name = kl_ts_alloc(b, end + 1);
  if (!name) return b->e->code;
  memcpy(name, qual, end);
  char *dot = strrchr(name, '.');
  if (!dot)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: %s is not a class of the code",
                   b->where, b->line, name);
  *dot = 0;
  const kl_ts_code *code;
  kiln_status s = load_code(b, name, &code);
  if (s != KILN_OK) {
    kl_err_prefix(b->e, "%s:%d: the class %s.%s", b->where, b->line, name, dot + 1);
    return s;
  }
  *file = b->ar.path;
  for (int i = 0; i < b->n_files; i++)
    if (b->files[i].code == code) *file = b->files[i].path;
  *cls = kl_tscode_class(code, dot + 1);
  if (!*cls)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: %s has no class '%s'", b->where,
                   b->line, *file, dot + 1);
  *dot = '.';
  return KILN_OK;
}

/* C.__new__(C) of a class of the code that is not a module (torchvision's ImageList):
 * an object, a tuple of its annotated attributes (all None until its __init__ sets
 * them) whose s is the class's name, for its methods. */
static kiln_status new_object(kl_ts_build *b, const char *qual, const char *dot, kl_tsv *out) {
  const kl_ts_class *cls;
  const char *file;
  kiln_status s = code_class(b, qual, (size_t)(dot - qual), &cls, &file);
  if (s != KILN_OK) return s;
  if (cls->named_tuple)
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: %s of a NamedTuple", b->where, b->line,
                   qual);
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)(cls->n_fields + 1));
  char *name = kl_ts_alloc(b, (size_t)(dot - qual) + 1);
  if (!items || !name) return b->e->code;
  for (int k = 0; k < cls->n_fields; k++) items[k] = (kl_tsv){.kind = KL_TSV_NONE, .id = -1};
  memcpy(name, qual, (size_t)(dot - qual));
  *out = (kl_tsv){.kind = KL_TSV_TUPLE, .items = items, .n = cls->n_fields, .id = -1,
                  .fields = cls->fields, .s = name};
  return KILN_OK;
}

static bool is_object(const kl_tsv *v) { return v->kind == KL_TSV_TUPLE && v->fields && v->s; }

/* obj.method(args) of an object that new_object made */
static kiln_status object_method(kl_ts_build *b, const kl_tsv *obj, const char *method,
                                 const kl_tsv *args, const char *const *kw, int n_args,
                                 kl_tsv *out) {
  const kl_ts_class *cls;
  const char *file;
  kiln_status s = code_class(b, obj->s, strlen(obj->s), &cls, &file);
  if (s != KILN_OK) return s;
  const kl_ts_method *m = kl_tscode_method(cls, method);
  if (!m || m->n_params < 1)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: class %s has no method '%s' with "
                   "self", b->where, b->line, obj->s, method);
  return invoke(b, m, file, method, obj, args, kw, n_args, out);
}

/* A call of scripted function qual ("__torch__.torch.nn.functional.relu"): the function
 * `relu` of code/__torch__/torch/nn/functional.py, inlined as a method is. */
static kiln_status call_function(kl_ts_build *b, const char *qual, const kl_tsv *args,
                                 const char *const *kw, int n_args, kl_tsv *out) {
  if (strcmp(qual, "__torch__.torch.backends.mha.get_fastpath_enabled") == 0) {
    /* False: nn.MultiheadAttention and nn.TransformerEncoderLayer take the path that
     * PyTorch takes with the fast path off, the same computation spelled in the ops
     * kiln lowers (the fast path calls fused native kernels: _native_multi_head_attention,
     * _transformer_encoder_layer_fwd) */
    *out = (kl_tsv){.kind = KL_TSV_BOOL, .i = 0, .id = -1};
    return KILN_OK;
  }
  const char *dot = strrchr(qual, '.');
  if (dot && strcmp(dot, ".__new__") == 0) return new_object(b, qual, dot, out);
  if (!dot)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: a call of %s, which is not a "
                   "function", b->where, b->line, qual);
  char *module = kl_ts_alloc(b, (size_t)(dot - qual) + 1);
  if (!module) return b->e->code;
  memcpy(module, qual, (size_t)(dot - qual));
  const kl_ts_code *code;
  kiln_status s = load_code(b, module, &code);
  if (s != KILN_OK) {
    kl_err_prefix(b->e, "%s:%d: calling %s", b->where, b->line, qual);
    return s;
  }
  const kl_ts_method *m = kl_tscode_function(code, dot + 1);
  const char *file = b->ar.path;
  for (int i = 0; i < b->n_files; i++)
    if (b->files[i].code == code) file = b->files[i].path;
  const kl_ts_class *cls = m ? NULL : kl_tscode_class(code, dot + 1);
  if (cls && cls->named_tuple) return named_tuple(b, cls, qual, args, kw, n_args, out);
  if (cls)
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s:%d: a call of class %s (an object made "
                   "by the code, not a NamedTuple), which kiln does not build: export with "
                   "torch.jit.trace or to ONNX", b->where, b->line, qual);
  if (!m)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s:%d: %s has no function '%s' (a "
                   "call of %s)", b->where, b->line, file, dot + 1, qual);
  return invoke(b, m, file, qual, NULL, args, kw, n_args, out);
}

/* ---- inputs and outputs ---- */

/* The example input k of traced_inputs.pkl, or NULL. */
static const kl_pk_obj *traced_input(const kl_pk_obj *traced, int k) {
  const kl_pk_obj *list = kl_pk_dict_get(traced, "forward");
  if (!list || (list->kind != KL_PK_LIST && list->kind != KL_PK_TUPLE) || k >= list->n)
    return NULL;
  return list->items[k]->kind == KL_PK_TENSOR ? list->items[k] : NULL;
}

/* One entry "name:dtype[d0,d1,...]" of an input_types list at *p (advanced past it and
 * its ';'); false when malformed. */
static bool parse_input_type(const char **p, char *name, size_t name_len, kl_dtype *dt,
                             int *rank, int64_t *dims) {
  const char *s = *p, *colon = strchr(s, ':'), *open = colon ? strchr(colon, '[') : NULL;
  if (!colon || !open || colon == s || (size_t)(colon - s) >= name_len) return false;
  memcpy(name, s, (size_t)(colon - s));
  name[colon - s] = 0;
  *dt = KL_UNDEFINED;
  for (int t = 0; t < 64 && *dt == KL_UNDEFINED; t++) {
    const char *tn = kl_dtype_valid(t) ? kl_dtype_name((kl_dtype)t) : "";
    if (*tn && strlen(tn) == (size_t)(open - colon - 1) && !strncmp(tn, colon + 1, strlen(tn)))
      *dt = (kl_dtype)t;
  }
  if (*dt == KL_UNDEFINED) return false;
  s = open + 1;
  *rank = 0;
  while (*s != ']') {
    if (*rank == KL_MAX_RANK || *s < '0' || *s > '9') return false;
    int64_t d = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
      if (d > (INT64_C(1) << 40)) return false; /* no real dim is this large */
      d = d * 10 + (*s - '0');
    }
    dims[(*rank)++] = d;
    if (*s == ',') s++;
    else if (*s != ']') return false;
  }
  s++;
  if (*s == ';') s++;
  else if (*s) return false;
  *p = s;
  return true;
}

/* forward's parameters (params[1..]) as "x, mask" into buf. */
static const char *param_list(const kl_ts_method *fwd, char *buf, size_t len) {
  size_t u = 0;
  buf[0] = 0;
  for (int k = 1; k < fwd->n_params && u < len; k++) {
    int w = snprintf(buf + u, len - u, "%s%s", k > 1 ? ", " : "", fwd->params[k]);
    u = w < 0 ? len : u + (size_t)w;
  }
  return buf;
}

/* Whether input_types entry name is "param.N", element N of a list parameter: N, or -1. */
static int64_t list_entry(const char *param, const char *name) {
  size_t l = strlen(param);
  if (strncmp(name, param, l) != 0 || name[l] != '.' || !name[l + 1]) return -1;
  int64_t i = 0;
  for (const char *p = name + l + 1; *p; p++) {
    if (*p < '0' || *p > '9' || i > 100000) return -1;
    i = i * 10 + (*p - '0');
  }
  return i;
}

/* A list parameter k of forward (List[Tensor], as torchvision's detection models take
 * their images) declared element by element: input_types entries "images.0:float32[3,
 * 320,320];images.1:...", N from 0 up with none missing. Each element is a graph input
 * of that name and its declared shape (all dims fixed: dim 0 of an element is not a
 * batch); *out the list of them, its length known while building. *found false when no
 * entry declares an element. */
static kiln_status declared_list(kl_ts_build *b, const kl_ts_method *fwd, int k, bool *found,
                                 kl_tsv *out) {
  enum { MAX_ELEMENTS = 256 };
  char nm[256];
  kl_dtype t;
  int r, ids[MAX_ELEMENTS], n = 0;
  int64_t d[KL_MAX_RANK];
  *found = false;
  for (const char *p = b->input_types ? b->input_types : ""; *p;) {
    if (!parse_input_type(&p, nm, sizeof nm, &t, &r, d)) return KILN_OK; /* (reported) */
    n += list_entry(fwd->params[k], nm) >= 0;
  }
  if (n == 0) return KILN_OK;
  if (n > MAX_ELEMENTS)
    return kl_fail(b->e, KILN_ERR_LIMIT, "%s: input_types declares %d elements of list "
                   "parameter '%s', more than %d", b->ar.path, n, fwd->params[k], MAX_ELEMENTS);
  for (int want = 0; want < n; want++) {
    int v = -1;
    for (const char *p = b->input_types; *p && v < 0;) {
      parse_input_type(&p, nm, sizeof nm, &t, &r, d);
      if (list_entry(fwd->params[k], nm) == want && (v = add_named_value(b, nm)) < 0)
        return b->e->code;
    }
    if (v < 0)
      return kl_fail(b->e, KILN_ERR_INVALID_ARGUMENT, "%s: input_types declares %d elements "
                     "of list parameter '%s' but not %s.%d: elements are numbered from 0 "
                     "without a gap", b->ar.path, n, fwd->params[k], fwd->params[k], want);
    b->g->values[v].type.dtype = t;
    kl_type_set_shape(&b->g->values[v].type, r, d);
    kiln_status s = kl_graph_add_input(b->g, v, b->e);
    if (s != KILN_OK) return s;
    ids[want] = v;
  }
  kl_tsv *items = kl_ts_alloc(b, sizeof *items * (size_t)n);
  if (!items) return b->e->code;
  for (int i = 0; i < n; i++) items[i] = (kl_tsv){.kind = KL_TSV_TENSOR, .id = ids[i]};
  *out = (kl_tsv){.kind = KL_TSV_LIST, .items = items, .n = n, .id = -1};
  *found = true;
  return KILN_OK;
}

/* The type that b->input_types declares for forward's parameter k (k >= 1): *found
 * false when it declares none. Entries match parameters by name; when no entry names a
 * parameter and there is one entry per parameter, they match by position (test inputs
 * saved under other names: input_0.pb naming "input" for forward(self, x)). A malformed
 * list, or one naming some parameters and others that forward does not have, is an
 * error. */
static kiln_status declared_input(kl_ts_build *b, const kl_ts_method *fwd, int k, bool *found,
                                  kl_dtype *dt, int *rank, int64_t *dims) {
  *found = false;
  int n = 0, named = 0;
  char unknown[256] = "";
  for (const char *p = b->input_types ? b->input_types : ""; *p; n++) {
    char nm[256];
    kl_dtype t;
    int r;
    int64_t d[KL_MAX_RANK];
    if (!parse_input_type(&p, nm, sizeof nm, &t, &r, d))
      return kl_fail(b->e, KILN_ERR_INVALID_ARGUMENT, "%s: input_types '%.200s' is not a "
                     "list of name:dtype[d0,d1,...] separated by ';' (at '%.40s')",
                     b->ar.path, b->input_types, p);
    bool known = false;
    for (int j = 1; j < fwd->n_params; j++)
      known |= strcmp(fwd->params[j], nm) == 0 || list_entry(fwd->params[j], nm) >= 0;
    named += known;
    if (!known && !*unknown) snprintf(unknown, sizeof unknown, "%s", nm);
    /* by name, or entry k-1 for parameter k (whether by position holds is checked
     * below, once every entry has been seen) */
    if (known ? strcmp(nm, fwd->params[k]) == 0 : n == k - 1) {
      *found = true;
      *dt = t;
      *rank = r;
      memcpy(dims, d, sizeof *d * (size_t)r);
    }
  }
  int required = 0; /* (parameters with defaults come last) */
  for (int j = 1; j < fwd->n_params; j++) required += !(fwd->defaults && fwd->defaults[j]);
  bool by_position = n > 0 && named == 0 && n >= required && n <= fwd->n_params - 1;
  if (named < n && !by_position) {
    char params[512];
    return kl_fail(b->e, KILN_ERR_INVALID_ARGUMENT, "%s: input_types names '%s', which "
                   "is not a parameter of forward (forward's parameters: %s; entries are "
                   "taken by position only when none names a parameter and there is one "
                   "per parameter)", b->ar.path, unknown, param_list(fwd, params, sizeof params));
  }
  return KILN_OK;
}

/* forward's parameters as the graph's inputs, into args (by keyword: kw[k] names
 * args[k]; *n_args of them). A parameter with a default is an input only when the
 * example inputs or input_types give it; else forward runs with its default (an
 * Optional one defaulting to None: the input is absent). */
static kiln_status add_inputs(kl_ts_build *b, const kl_ts_method *fwd,
                              const kl_pk_obj *traced, kl_tsv *args, const char **kw,
                              int *n_args) {
  int batch = kl_graph_symbol(b->g, "batch");
  if (batch < 0) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  *n_args = 0;
  for (int k = 1; k < fwd->n_params; k++) {
    const kl_pk_obj *ex = traced_input(traced, k - 1);
    bool declared = false;
    int rank = 0;
    int64_t dims[KL_MAX_RANK];
    kl_dtype dt = KL_F32;
    /* recorded types win: input_types is not even read when traced_inputs.pkl has all */
    kiln_status s = ex ? KILN_OK
                       : declared_input(b, fwd, k, &declared, &dt, &rank, dims);
    if (s != KILN_OK) return s;
    bool listed = false;
    if (!ex && !declared && (s = declared_list(b, fwd, k, &listed, &args[*n_args])) != KILN_OK)
      return s;
    if (listed) {
      kw[(*n_args)++] = fwd->params[k];
      continue;
    }
    if (!ex && !declared && fwd->defaults && fwd->defaults[k]) continue; /* its default */
    int v = add_named_value(b, fwd->params[k]);
    if (v < 0) return b->e->code;
    kl_type *t = &b->g->values[v].type;
    t->dtype = ex ? ex->dtype : dt;
    if (ex) kl_type_set_shape(t, ex->rank, ex->sizes);
    else if (declared) kl_type_set_shape(t, rank, dims);
    if ((ex || declared) && t->rank > 0) t->dims[0] = (kl_dim){-1, batch};
    s = kl_graph_add_input(b->g, v, b->e);
    if (s != KILN_OK) return s;
    kw[*n_args] = fwd->params[k];
    args[(*n_args)++] = (kl_tsv){.kind = KL_TSV_TENSOR, .id = v};
  }
  return KILN_OK;
}

/* Redirect every reader of value `from` (and its producer's output) to `to`. */
static void replace_value(kl_graph *g, int from, int to) {
  for (int i = 0; i < g->n_nodes; i++) {
    kl_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] == from) n->in[k] = to;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] == from) n->out[k] = to;
  }
  g->values[to].type = g->values[from].type;
  g->values[to].producer = g->values[from].producer;
  g->values[from].producer = -1;
}

static kiln_status add_output(kl_ts_build *b, int id, const char *field) {
  kl_graph *g = b->g;
  char name[32];
  snprintf(name, sizeof name, "output_%d", g->n_outputs);
  if (field) snprintf(name, sizeof name, "%.31s", field);
  bool taken = g->values[id].producer < 0;
  for (int i = 0; i < g->n_outputs; i++) taken |= g->outputs[i] == id;
  int v = add_named_value(b, name);
  if (v < 0) return b->e->code;
  if (taken) { /* an input, a constant or a value returned twice: copy it */
    int node = kl_graph_add_node(g, KL_OP_Identity, name, 1, &id, 1, &v, b->e);
    if (node < 0) return b->e->code;
    g->values[v].type = g->values[id].type;
  } else {
    replace_value(g, id, v);
  }
  return kl_graph_add_output(g, v, b->e);
}

/* The tensors of r as outputs (named field, for a NamedTuple's field or a dict's key:
 * torchvision's segmentation models return {"out": ...}; None fields of
 * a NamedTuple, GoogLeNet's aux logits in eval mode, are none); with add false, only
 * what they hold after in-place writes is made (any view made again from its changed
 * base), before add_output renames any of those values. */
static kiln_status add_outputs(kl_ts_build *b, const kl_tsv *r, int depth, bool add,
                               const char *field) {
  if (r->kind == KL_TSV_TENSOR) {
    int id;
    kiln_status s = kl_aten_current(b, r->id, &id);
    return s != KILN_OK || !add ? s : add_output(b, id, field);
  }
  if ((r->kind == KL_TSV_TUPLE || r->kind == KL_TSV_LIST || r->kind == KL_TSV_DICT) &&
      depth < 8) {
    for (int i = 0; i < r->n; i++) {
      if (r->fields && r->items[i].kind == KL_TSV_NONE) continue;
      kiln_status s = add_outputs(b, &r->items[i], depth + 1, add,
                                  r->fields ? r->fields[i] : NULL);
      if (s != KILN_OK) return s;
    }
    return KILN_OK;
  }
  return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s: forward returns a value that is not a "
                 "tensor or a tuple, list or dict of tensors", b->ar.path);
}

/* The outputs made by a kiln.Check of the raise code (raises on paths the data
 * chooses): a run that reaches one fails with its message. */
static kiln_status add_check(kl_ts_build *b) {
  kl_graph *g = b->g;
  int n = g->n_outputs, *in = malloc(sizeof *in * (size_t)(n + 1));
  if (!in) return kl_fail(b->e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  in[0] = b->raise_code;
  kiln_status s = KILN_OK;
  for (int k = 0; k < n && s == KILN_OK; k++) { /* the value computed, renamed */
    if ((in[k + 1] = kl_graph_add_value(g, NULL, b->e)) < 0) s = b->e->code;
    else replace_value(g, g->outputs[k], in[k + 1]);
  }
  int node = s == KILN_OK ? kl_graph_add_node(g, KL_OP_KilnCheck, "raise_check", n + 1, in, n,
                                              g->outputs, b->e) : -1;
  if (s == KILN_OK && node < 0) s = b->e->code;
  if (s == KILN_OK)
    s = kl_node_set_strings(g, node, "messages", (const char *const *)b->raises, b->n_raises,
                            b->e);
  free(in);
  return s;
}

/* ---- the archive's parts ---- */

static kiln_status check_byteorder(kl_ts_build *b) {
  char *text;
  size_t len;
  kiln_status s = ar_read(&b->ar, "byteorder", 64, true, &text, &len, b->e);
  if (s == KILN_ERR_NOT_FOUND) return KILN_OK; /* older archives: little-endian */
  if (s != KILN_OK) return s;
  bool little = strncmp(text, "little", 6) == 0, big = strncmp(text, "big", 3) == 0;
  free(text);
  if (big || HOST_BIG_ENDIAN)
    return kl_fail(b->e, KILN_ERR_UNSUPPORTED, "%s: big-endian archives and machines are "
                   "not supported", b->ar.path);
  if (!little)
    return kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s: the byteorder entry is neither "
                   "'little' nor 'big'", b->ar.path);
  return KILN_OK;
}

static kiln_status read_pickle(kl_ts_build *b, const char *name, bool optional,
                               kl_pickle **p, const kl_pk_obj **root) {
  char *text;
  size_t len;
  kiln_status s = ar_read(&b->ar, name, MAX_TEXT_BYTES, optional, &text, &len, b->e);
  if (s != KILN_OK) return s;
  char what[600];
  snprintf(what, sizeof what, "%s: %s", b->ar.path, name);
  s = kl_pickle_load(text, len, NULL, what, p, root, b->e);
  free(text);
  return s;
}

static kiln_status build_graph(kl_ts_build *b) {
  kl_pickle *traced_pkl = NULL;
  const kl_pk_obj *traced = NULL;
  kiln_status s = check_byteorder(b);
  if (s == KILN_OK) s = read_pickle(b, "data.pkl", false, &b->data_pkl, &b->root);
  if (s == KILN_OK) s = read_pickle(b, "constants.pkl", false, &b->const_pkl, &b->constants);
  if (s == KILN_OK && b->constants->kind != KL_PK_TUPLE)
    s = kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s: constants.pkl is not a tuple", b->ar.path);
  if (s == KILN_OK && b->root->kind != KL_PK_OBJECT)
    s = kl_fail(b->e, KILN_ERR_INVALID_MODEL, "%s: data.pkl holds a %s, not a module",
                b->ar.path, kl_pk_kind_name(b->root->kind));
  if (s == KILN_OK && (s = read_pickle(b, "traced_inputs.pkl", true, &traced_pkl, &traced)) ==
                          KILN_ERR_NOT_FOUND)
    s = KILN_OK;
  kl_tsv self = {.kind = KL_TSV_MODULE, .obj = b->root, .s = "", .id = -1}, *args = NULL, ret;
  const kl_ts_method *fwd = NULL;
  const char *file, **kw = NULL;
  int n_args = 0;
  if (s == KILN_OK) s = find_method(b, b->root, "forward", &fwd, &file);
  if (s == KILN_OK && (!(args = kl_ts_alloc(b, sizeof *args * (size_t)fwd->n_params)) ||
                       !(kw = kl_ts_alloc(b, sizeof *kw * (size_t)fwd->n_params))))
    s = b->e->code;
  const char *where = b->where;
  if (s == KILN_OK) b->where = file; /* (for add_inputs' messages) */
  if (s == KILN_OK) s = add_inputs(b, fwd, traced, args, kw, &n_args);
  b->where = where;
  kl_pickle_free(traced_pkl);
  if (s == KILN_OK) s = call_method(b, &self, "forward", args, kw, n_args, &ret);
  if (s == KILN_OK) s = add_outputs(b, &ret, 0, false, NULL);
  if (s == KILN_OK) s = add_outputs(b, &ret, 0, true, NULL);
  if (s == KILN_OK && b->raise_code >= 0) s = add_check(b);
  return s;
}

static void build_free(kl_ts_build *b) {
  ar_close(&b->ar);
  kl_pickle_free(b->data_pkl);
  kl_pickle_free(b->const_pkl);
  for (int i = 0; i < b->n_files; i++) {
    free(b->files[i].path);
    kl_tscode_free(b->files[i].code);
  }
  free(b->files);
  free(b->tensors);
  for (int i = 0; i < b->n_storages; i++) {
    free(b->storages[i].entry);
    free(b->storages[i].raw);
  }
  free(b->storages);
  kl_strmap_free(b->storage_ids);
  for (int i = 0; i < b->n_raises; i++) free(b->raises[i]);
  free(b->raises);
  free(b->attrs.names);
  free(b->attrs.vals);
  for (ts_block *blk = b->blocks, *next; blk; blk = next) {
    next = blk->next;
    free(blk);
  }
}

static kiln_status load(const char *path, const void *buf, size_t len, const kl_import_opts *o,
                        kl_graph **out, kl_err *e) {
  *out = NULL;
  kl_ts_build b = {.e = e, .scope = "", .aten = "", .where = path, .raise_code = -1,
                   .input_types = o ? o->input_types : NULL};
  b.max_bytes = o && o->max_tensor_bytes > 0 ? o->max_tensor_bytes
                                             : KL_IMPORT_DEFAULT_MAX_TENSOR_BYTES;
  b.g = kl_graph_new();
  kiln_status s = b.g ? kl_graph_set_source(b.g, path, e)
                      : kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (s == KILN_OK) s = ar_open(&b.ar, path, buf, len, e);
  if (s == KILN_OK) s = build_graph(&b);
  build_free(&b);
  if (s != KILN_OK) {
    kl_graph_free(b.g);
    if (strncmp(e->msg, path, strlen(path)) != 0) kl_err_prefix(e, "%s", path);
    return s;
  }
  *out = b.g;
  return KILN_OK;
}

kiln_status kl_torchscript_load_file(const char *path, const kl_import_opts *o,
                                     kl_graph **out, kl_err *e) {
  return load(path, NULL, 0, o, out, e);
}

kiln_status kl_torchscript_load_memory(const void *buf, size_t len, const kl_import_opts *o,
                                       kl_graph **out, kl_err *e) {
  return load("<memory>", buf, len, o, out, e);
}
