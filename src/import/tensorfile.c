/* .npy and TensorProto .pb tensor files, read and written. */
#include "import/tensorfile.h"
#include "import/fileio.h"
#include "import/onnx_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "kiln reads and writes little-endian .npy data in place");

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_HEADER (1 << 20) /* numpy's own headers are a few hundred bytes */
#define PB_MAX_FILE ((size_t)INT32_MAX) /* protobuf's 2 GiB limit */

/* ---- where bytes come from: a buffer or an open file ---- */

typedef struct source {
  const uint8_t *buf; /* NULL: read from fd */
  int fd;
  uint64_t size;
} source;

static kiln_status source_read(const source *s, uint64_t off, void *dst, size_t n, kl_err *e) {
  if (off > s->size || n > s->size - off)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "the file is truncated: %zu bytes at offset "
                   "%llu needed, it has %llu", n, (unsigned long long)off,
                   (unsigned long long)s->size);
  if (s->buf) {
    if (n) memcpy(dst, s->buf + off, n);
    return KILN_OK;
  }
  return kl_file_pread(s->fd, dst, n, off, "the file", e);
}

/* ---- .npy dtypes: kind letter and size, as in '<f4' ---- */

static const struct npy_type {
  char kind;
  int size;
  kl_dtype dtype;
} npy_types[] = {
    {'f', 2, KL_F16}, {'f', 4, KL_F32}, {'f', 8, KL_F64}, {'i', 1, KL_I8},
    {'i', 2, KL_I16}, {'i', 4, KL_I32}, {'i', 8, KL_I64}, {'u', 1, KL_U8},
    {'u', 2, KL_U16}, {'u', 4, KL_U32}, {'u', 8, KL_U64}, {'b', 1, KL_BOOL},
};

static kiln_status npy_dtype(const char *descr, kl_dtype *t, kl_err *e) {
  size_t n = strlen(descr);
  char order = n == 3 ? descr[0] : 0;
  if (order == '>')
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "big-endian data ('%s') is not supported", descr);
  for (size_t i = 0; n == 3 && i < sizeof npy_types / sizeof npy_types[0]; i++) {
    const struct npy_type *nt = &npy_types[i];
    /* '|' (order not applicable) is what numpy writes for one-byte types */
    bool order_ok = order == '<' || order == '=' || (order == '|' && nt->size == 1);
    if (order_ok && descr[1] == nt->kind && descr[2] == '0' + nt->size) {
      *t = nt->dtype;
      return KILN_OK;
    }
  }
  return kl_fail(e, KILN_ERR_UNSUPPORTED, "NumPy dtype '%.32s' is not supported", descr);
}

static const char *npy_descr(kl_dtype t, char buf[4]) {
  for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
    if (npy_types[i].dtype == t) {
      buf[0] = npy_types[i].size == 1 ? '|' : '<';
      buf[1] = npy_types[i].kind;
      buf[2] = (char)('0' + npy_types[i].size);
      buf[3] = '\0';
      return buf;
    }
  return NULL;
}

/* ---- the .npy header: a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * parsed strictly: those three keys once each, nothing else. ---- */

typedef struct npy_parser {
  const char *s;
  size_t i, n;
  kl_err *e;
} npy_parser;

typedef struct npy_header {
  char descr[16];
  bool fortran;
  int rank;
  int64_t dims[KL_MAX_RANK];
  unsigned seen; /* bit per key */
} npy_header;

static void skip_space(npy_parser *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\n' || p->s[p->i] == '\t'))
    p->i++;
}

static bool accept(npy_parser *p, char c) {
  skip_space(p);
  if (p->i < p->n && p->s[p->i] == c) {
    p->i++;
    return true;
  }
  return false;
}

static kiln_status bad_header(npy_parser *p, const char *expected) {
  return kl_fail(p->e, KILN_ERR_INVALID_MODEL, "malformed .npy header: expected %s at "
                 "character %zu", expected, p->i);
}

/* A quoted string without escapes (numpy writes none in these fields). */
static kiln_status parse_string(npy_parser *p, char *out, size_t cap) {
  skip_space(p);
  if (p->i >= p->n || (p->s[p->i] != '\'' && p->s[p->i] != '"')) return bad_header(p, "a string");
  char q = p->s[p->i++];
  size_t start = p->i;
  while (p->i < p->n && p->s[p->i] != q && p->s[p->i] != '\\') p->i++;
  if (p->i >= p->n || p->s[p->i] != q) return bad_header(p, "the end of a string");
  size_t len = p->i++ - start;
  if (len >= cap) return bad_header(p, "a shorter string");
  memcpy(out, p->s + start, len);
  out[len] = '\0';
  return KILN_OK;
}

static kiln_status parse_bool(npy_parser *p, bool *v) {
  skip_space(p);
  const char *rest = p->s + p->i;
  size_t left = p->n - p->i;
  if (left >= 4 && memcmp(rest, "True", 4) == 0) *v = true, p->i += 4;
  else if (left >= 5 && memcmp(rest, "False", 5) == 0) *v = false, p->i += 5;
  else return bad_header(p, "True or False");
  return KILN_OK;
}

static kiln_status parse_dim(npy_parser *p, int64_t *v) {
  skip_space(p);
  int64_t x = 0;
  size_t start = p->i;
  for (; p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9'; p->i++)
    if (kl_mul_overflow_i64(x, 10, &x) || __builtin_add_overflow(x, p->s[p->i] - '0', &x))
      return kl_fail(p->e, KILN_ERR_LIMIT, ".npy header: a dimension overflows");
  if (p->i == start) return bad_header(p, "a dimension");
  *v = x;
  return KILN_OK;
}

/* (), (3,), (2, 3) and (2, 3,) */
static kiln_status parse_shape(npy_parser *p, npy_header *h) {
  if (!accept(p, '(')) return bad_header(p, "'(' starting the shape");
  h->rank = 0;
  while (!accept(p, ')')) {
    if (h->rank == KL_MAX_RANK)
      return kl_fail(p->e, KILN_ERR_UNSUPPORTED, ".npy shape has more than %d dimensions",
                     KL_MAX_RANK);
    kiln_status s = parse_dim(p, &h->dims[h->rank++]);
    if (s != KILN_OK) return s;
    if (!accept(p, ',') && !accept(p, ')')) return bad_header(p, "',' or ')' in the shape");
    if (p->s[p->i - 1] == ')') break;
  }
  return KILN_OK;
}

static kiln_status parse_entry(npy_parser *p, npy_header *h) {
  static const char *const keys[] = {"descr", "fortran_order", "shape"};
  char key[32];
  kiln_status s = parse_string(p, key, sizeof key);
  if (s != KILN_OK) return s;
  if (!accept(p, ':')) return bad_header(p, "':'");
  for (unsigned k = 0; k < 3; k++) {
    if (strcmp(key, keys[k]) != 0) continue;
    if (h->seen & (1u << k))
      return kl_fail(p->e, KILN_ERR_INVALID_MODEL, ".npy header gives '%s' twice", key);
    h->seen |= 1u << k;
    return k == 0 ? parse_string(p, h->descr, sizeof h->descr)
           : k == 1 ? parse_bool(p, &h->fortran) : parse_shape(p, h);
  }
  return kl_fail(p->e, KILN_ERR_INVALID_MODEL, ".npy header has an unknown key '%s'", key);
}

static kiln_status parse_header(const char *text, size_t len, npy_header *h, kl_err *e) {
  npy_parser p = {text, 0, len, e};
  memset(h, 0, sizeof *h);
  if (!accept(&p, '{')) return bad_header(&p, "'{'");
  while (!accept(&p, '}')) {
    kiln_status s = parse_entry(&p, h);
    if (s != KILN_OK) return s;
    if (!accept(&p, ',') && !accept(&p, '}')) return bad_header(&p, "',' or '}'");
    if (p.s[p.i - 1] == '}') break;
  }
  skip_space(&p);
  if (p.i != p.n) return bad_header(&p, "the end of the header");
  if (h->seen != 7)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, ".npy header lacks '%s'",
                   !(h->seen & 1) ? "descr" : !(h->seen & 2) ? "fortran_order" : "shape");
  if (h->fortran)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, ".npy data in Fortran order is not supported; "
                   "save it in C order (np.ascontiguousarray)");
  return KILN_OK;
}

/* ---- .npy reading ---- */

/* The magic, version and header length; *start is where the header text begins. */
static kiln_status npy_preamble(const source *src, size_t *start, size_t *hlen, kl_err *e) {
  uint8_t pre[12];
  size_t have = src->size < sizeof pre ? (size_t)src->size : sizeof pre;
  kiln_status s = source_read(src, 0, pre, have, e);
  if (s != KILN_OK) return s;
  if (have < 10 || memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "not a .npy file (no \\x93NUMPY header)");
  int major = pre[6], minor = pre[7];
  if ((major < 1 || major > 3) || minor != 0)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, ".npy format version %d.%d is not supported "
                   "(1.0, 2.0 and 3.0 are)", major, minor);
  if (major == 1) {
    *start = 10;
    *hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
  } else {
    if (have < 12) return kl_fail(e, KILN_ERR_INVALID_MODEL, "the .npy file is truncated");
    *start = 12;
    *hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  }
  if (*hlen > NPY_MAX_HEADER)
    return kl_fail(e, KILN_ERR_LIMIT, ".npy header is %zu bytes; kiln reads up to %d", *hlen,
                   NPY_MAX_HEADER);
  return KILN_OK;
}

/* The tensor's type and byte size, checked against max_bytes. */
static kiln_status npy_shape(const npy_header *h, int64_t max_bytes, kl_tensor *out,
                             size_t *nbytes, kl_err *e) {
  kiln_status s = npy_dtype(h->descr, &out->dtype, e);
  if (s != KILN_OK) return s;
  int64_t numel = 1;
  out->rank = h->rank;
  for (int i = 0; i < h->rank; i++) out->dims[i] = h->dims[i];
  if (!kl_dims_fit(h->rank, h->dims, &numel))
    return kl_fail(e, KILN_ERR_LIMIT, ".npy shape is too large (its dims' product, an "
                   "empty dim counted as 1, is over 2^59)");
  if ((uint64_t)numel > SIZE_MAX ||
      kl_mul_overflow_size((size_t)numel, kl_dtype_size(out->dtype), nbytes))
    return kl_fail(e, KILN_ERR_LIMIT, ".npy data size overflows");
  if (*nbytes > (uint64_t)max_bytes)
    return kl_fail(e, KILN_ERR_LIMIT, ".npy data is %zu bytes, over the limit of %lld",
                   *nbytes, (long long)max_bytes);
  return KILN_OK;
}

static kiln_status npy_load(const source *src, int64_t max_bytes, kl_tensor *out, kl_err *e) {
  size_t start = 0, hlen = 0, nbytes = 0;
  npy_header h;
  char *text = NULL;
  kiln_status s = npy_preamble(src, &start, &hlen, e);
  if (s == KILN_OK && !(text = malloc(hlen + 1)))
    s = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (s == KILN_OK) s = source_read(src, start, text, hlen, e);
  if (s == KILN_OK) s = parse_header(text, hlen, &h, e);
  free(text);
  memset(out, 0, sizeof *out);
  if (s == KILN_OK) s = npy_shape(&h, max_bytes, out, &nbytes, e);
  if (s != KILN_OK) return s;
  uint64_t data_at = (uint64_t)start + hlen;
  if (src->size - data_at != nbytes) /* data_at <= size: the header was read */
    return kl_fail(e, KILN_ERR_INVALID_MODEL, ".npy data is %llu bytes, expected %zu for "
                   "its shape and dtype", (unsigned long long)(src->size - data_at), nbytes);
  if (!(out->data = malloc(nbytes ? nbytes : 1)))
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes", nbytes);
  if ((s = source_read(src, data_at, out->data, nbytes, e)) != KILN_OK) {
    free(out->data);
    out->data = NULL;
    return s;
  }
  if (out->dtype == KL_BOOL)
    for (size_t i = 0; i < nbytes; i++) ((uint8_t *)out->data)[i] = ((uint8_t *)out->data)[i] != 0;
  return KILN_OK;
}

kiln_status kl_npy_parse(const void *buf, size_t len, int64_t max_bytes, kl_tensor *out,
                         kl_err *e) {
  source src = {buf, -1, len};
  return npy_load(&src, max_bytes, out, e);
}

/* ---- TensorProto ---- */

kiln_status kl_tensorpb_parse(const void *buf, size_t len, int64_t max_bytes, kl_tensor *out,
                              char **name, kl_err *e) {
  ProtobufCAllocator a;
  kl_onnx_allocator_init(&a);
  memset(out, 0, sizeof *out);
  if (name) *name = NULL;
  Onnx__TensorProto *tp = onnx__tensor_proto__unpack(&a, len, buf);
  if (!tp)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "not a tensor file: neither .npy nor a "
                   "TensorProto (protobuf parse failed)");
  /* a .pb file stands alone: external data is not followed from it */
  kl_onnx_tensor_src ts = {NULL, max_bytes};
  size_t nbytes;
  kiln_status s = kl_onnx_tensor_decode(tp, &ts, NULL, out, &nbytes, e);
  if (s == KILN_OK && name && tp->name && *tp->name && !(*name = strdup(tp->name))) {
    free(out->data);
    out->data = NULL;
    s = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  onnx__tensor_proto__free_unpacked(tp, &a);
  return s;
}

static kiln_status read_pb_file(const char *path, int64_t max_bytes, kl_tensor *out,
                                char **name, kl_err *e) {
  void *buf;
  size_t len;
  kiln_status s = kl_file_read(path, PB_MAX_FILE, &buf, &len, e);
  if (s != KILN_OK) return s;
  s = kl_tensorpb_parse(buf, len, max_bytes, out, name, e);
  free(buf);
  return s;
}

kiln_status kl_tensorfile_read(const char *path, int64_t max_bytes, kl_tensor *out,
                               char **name, kl_err *e) {
  if (name) *name = NULL;
  memset(out, 0, sizeof *out);
  int fd = kl_open_regular(path, 0, "the tensor file", KILN_ERR_IO, e);
  if (fd < 0) return e->code;
  struct stat st;
  uint8_t magic[NPY_MAGIC_LEN] = {0};
  kiln_status s = KILN_OK;
  if (fstat(fd, &st) != 0) {
    s = kl_fail(e, KILN_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
  } else if (st.st_size >= NPY_MAGIC_LEN &&
             (s = kl_file_pread(fd, magic, NPY_MAGIC_LEN, 0, path, e)) == KILN_OK &&
             memcmp(magic, NPY_MAGIC, NPY_MAGIC_LEN) == 0) {
    source src = {NULL, fd, (uint64_t)st.st_size};
    if ((s = npy_load(&src, max_bytes, out, e)) != KILN_OK) kl_err_prefix(e, "%s", path);
    close(fd);
    return s;
  }
  close(fd);
  if (s != KILN_OK) return s;
  s = read_pb_file(path, max_bytes, out, name, e);
  if (s != KILN_OK && strncmp(e->msg, path, strlen(path)) != 0) kl_err_prefix(e, "%s", path);
  return s;
}

/* ---- SequenceProto, OptionalProto ---- */

/* One protobuf field of buf[*at..len): its number, and for length-delimited fields the
 * bytes (*v: the varint of a varint field). false at a malformed field. */
static bool next_field(const uint8_t *buf, size_t len, size_t *at, uint32_t *num, int *wire,
                       const uint8_t **val, uint64_t *v) {
  uint64_t key = 0, x = 0;
  for (int sh = 0;; sh += 7) {
    if (*at >= len || sh > 63) return false;
    uint8_t b = buf[(*at)++];
    key |= (uint64_t)(b & 0x7f) << sh;
    if (!(b & 0x80)) break;
  }
  *num = (uint32_t)(key >> 3);
  *wire = (int)(key & 7);
  if (*wire == 0 || *wire == 2) {
    for (int sh = 0;; sh += 7) {
      if (*at >= len || sh > 63) return false;
      uint8_t b = buf[(*at)++];
      x |= (uint64_t)(b & 0x7f) << sh;
      if (!(b & 0x80)) break;
    }
    *v = x;
    if (*wire == 2) {
      if (x > len - *at) return false;
      *val = buf + *at;
      *at += (size_t)x;
    }
    return true;
  }
  if (*wire == 1 && len - *at >= 8) return *at += 8, true;
  if (*wire == 5 && len - *at >= 4) return *at += 4, true;
  return false;
}

static kiln_status bad_value(kl_err *e, const char *what) {
  return kl_fail(e, KILN_ERR_INVALID_MODEL, "not a %s file (protobuf parse failed)", what);
}

/* A SequenceProto of tensors into v. */
static kiln_status sequence_parse(const uint8_t *buf, size_t len, int64_t max_bytes,
                                  kl_value_file *v, kl_err *e) {
  size_t at = 0;
  uint32_t num;
  int wire;
  const uint8_t *val = NULL;
  uint64_t x = 0;
  v->seq = true;
  while (at < len) {
    if (!next_field(buf, len, &at, &num, &wire, &val, &x)) return bad_value(e, "SequenceProto");
    if (num == 2 && wire == 0 && x != 0 && x != 1)
      return kl_fail(e, KILN_ERR_UNSUPPORTED, "a sequence of elements of kind %llu: kiln "
                     "reads sequences of tensors", (unsigned long long)x);
    if (num == 1 && wire == 2 && !v->name) {
      if (!(v->name = malloc((size_t)x + 1))) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      memcpy(v->name, val, (size_t)x);
      v->name[x] = '\0';
    }
    if (num == 3 && wire == 2) {
      if (v->count >= (INT64_C(1) << 24))
        return kl_fail(e, KILN_ERR_LIMIT, "a sequence of more than 2^24 tensors");
      kl_tensor *items = realloc(v->items, sizeof *items * (size_t)(v->count + 1));
      if (!items) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      v->items = items;
      kiln_status st = kl_tensorpb_parse(val, (size_t)x, max_bytes, &v->items[v->count], NULL, e);
      if (st != KILN_OK) return st;
      v->count++;
    }
    if ((num == 4 || num == 5 || num == 6 || num == 7) && wire == 2)
      return kl_fail(e, KILN_ERR_UNSUPPORTED, "a sequence of sparse tensors, sequences, maps "
                     "or optionals: kiln reads sequences of tensors");
  }
  return KILN_OK;
}

kiln_status kl_valuefile_read(const char *path, bool seq, bool opt, int64_t max_bytes,
                              kl_value_file *out, kl_err *e) {
  memset(out, 0, sizeof *out);
  if (!seq && !opt) {
    if (!(out->items = calloc(1, sizeof *out->items)))
      return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    out->count = 1;
    kiln_status st = kl_tensorfile_read(path, max_bytes, &out->items[0], &out->name, e);
    if (st != KILN_OK) kl_valuefile_clear(out);
    return st;
  }
  void *buf;
  size_t len;
  kiln_status st = kl_file_read(path, PB_MAX_FILE, &buf, &len, e);
  if (st != KILN_OK) return st;
  const uint8_t *p = buf, *val = NULL;
  size_t at = 0, n = len;
  uint32_t num;
  int wire;
  uint64_t x = 0;
  if (opt) { /* OptionalProto: 1 name, 2 elem_type, 3 tensor_value, 5 sequence_value */
    const uint8_t *inner = NULL;
    size_t inner_len = 0;
    bool inner_seq = false;
    while (st == KILN_OK && at < n) {
      if (!next_field(p, n, &at, &num, &wire, &val, &x)) st = bad_value(e, "OptionalProto");
      else if ((num == 3 || num == 5) && wire == 2) {
        inner = val;
        inner_len = (size_t)x;
        inner_seq = num == 5;
      }
    }
    if (st == KILN_OK && !inner) out->none = true;
    else if (st == KILN_OK && inner_seq != seq)
      st = kl_fail(e, KILN_ERR_DTYPE, "the optional holds a %s, the model expects a %s",
                   inner_seq ? "sequence" : "tensor", seq ? "sequence" : "tensor");
    else if (st == KILN_OK && seq) st = sequence_parse(inner, inner_len, max_bytes, out, e);
    else if (st == KILN_OK) {
      if (!(out->items = calloc(1, sizeof *out->items)))
        st = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
      else if ((st = kl_tensorpb_parse(inner, inner_len, max_bytes, &out->items[0], NULL, e)) ==
               KILN_OK)
        out->count = 1;
    }
  } else {
    st = sequence_parse(p, n, max_bytes, out, e);
  }
  free(buf);
  if (st != KILN_OK) {
    kl_valuefile_clear(out);
    if (strncmp(e->msg, path, strlen(path)) != 0) kl_err_prefix(e, "%s", path);
  }
  return st;
}

void kl_valuefile_clear(kl_value_file *v) {
  for (int64_t k = 0; v->items && k < v->count; k++) free(v->items[k].data);
  free(v->items);
  free(v->name);
  memset(v, 0, sizeof *v);
}

/* ---- writers ---- */

static kiln_status tensor_bytes(const kl_tensor *t, size_t *nbytes, kl_err *e) {
  if (t->rank < 0 || t->rank > KL_MAX_RANK || !kl_dtype_valid(t->dtype))
    return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "cannot write a tensor of rank %d and "
                   "dtype %d", t->rank, (int)t->dtype);
  size_t n = kl_dtype_size(t->dtype);
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0 || (uint64_t)t->dims[i] > SIZE_MAX ||
        kl_mul_overflow_size(n, (size_t)t->dims[i], &n))
      return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "tensor dimension %d (%lld) is invalid",
                     i, (long long)t->dims[i]);
  if (n && !t->data) return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "tensor has no data");
  *nbytes = n;
  return KILN_OK;
}

bool kl_npy_has_dtype(kl_dtype t) {
  char descr[4];
  return npy_descr(t, descr) != NULL;
}

kiln_status kl_npy_write(const char *path, const kl_tensor *t, kl_err *e) {
  size_t nbytes;
  char descr[4], shape[KL_MAX_RANK * 24 + 4] = "(", head[512];
  kiln_status s = tensor_bytes(t, &nbytes, e);
  if (s != KILN_OK) return s;
  if (!npy_descr(t->dtype, descr))
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "%s has no NumPy dtype: a .npy file cannot hold it (an ONNX TensorProto .pb can)",
                   kl_dtype_name(t->dtype));
  for (int i = 0; i < t->rank; i++)
    snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", i ? ", " : "",
             (long long)t->dims[i]);
  strcat(shape, t->rank == 1 ? ",)" : ")");
  /* magic, version 1.0, 2-byte length, then the dict padded with spaces and ended by
   * '\n' so that the data starts at a multiple of 64 bytes, as numpy does */
  int n = snprintf(head + 10, sizeof head - 10,
                   "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
  size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
  memcpy(head, NPY_MAGIC "\x01\x00", 8);
  memset(head + 10 + n, ' ', total - 10 - (size_t)n - 1);
  head[total - 1] = '\n';
  head[8] = (char)((total - 10) & 0xff);
  head[9] = (char)((total - 10) >> 8);
  return kl_file_write(path, head, total, t->data, nbytes, e);
}

/* The message without raw_data is packed, and the raw_data field (number 9, length-
 * delimited) appended by hand, so the tensor's bytes are written without a copy:
 * protobuf allows fields in any order. */
kiln_status kl_tensorpb_write(const char *path, const kl_tensor *t, const char *name,
                              kl_err *e) {
  size_t nbytes;
  kiln_status s = tensor_bytes(t, &nbytes, e);
  if (s != KILN_OK) return s;
  Onnx__TensorProto tp = ONNX__TENSOR_PROTO__INIT;
  int64_t dims[KL_MAX_RANK];
  memcpy(dims, t->dims, sizeof dims);
  tp.n_dims = (size_t)t->rank;
  tp.dims = dims;
  tp.has_data_type = 1;
  tp.data_type = (int32_t)t->dtype;
  tp.name = (char *)(name ? name : ""); /* packing only reads it */
  size_t len = onnx__tensor_proto__get_packed_size(&tp);
  uint8_t *head = malloc(len + 11);
  if (!head) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  onnx__tensor_proto__pack(&tp, head);
  head[len++] = 9 << 3 | 2;
  const void *body = t->data;
  uint8_t *packed = NULL;
  if (kl_dtype_file_bits(t->dtype) < 8) { /* sub-byte types: packed, as ONNX stores them */
    size_t plen = kl_dtype_file_bytes(t->dtype, nbytes);
    packed = malloc(plen ? plen : 1);
    if (!packed) {
      free(head);
      return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    kl_dtype_pack(t->dtype, t->data, nbytes, packed);
    body = packed;
    nbytes = plen;
  }
  uint64_t v = nbytes;
  do {
    head[len++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  s = kl_file_write(path, head, len, body, nbytes, e);
  free(head);
  free(packed);
  return s;
}
