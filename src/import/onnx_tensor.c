/* TensorProto -> kl_tensor: every storage form ONNX allows (raw_data, the typed
 * repeated fields, external files), with every size checked before it is used. */
#include "import/fileio.h"
#include "import/onnx_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* raw_data and external data are little-endian and used in place. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "kiln reads little-endian tensor data in place");

static void *pb_alloc(void *unused, size_t n) {
  (void)unused;
  return malloc(n);
}

static void pb_free(void *unused, void *p) {
  (void)unused;
  free(p);
}

void kl_onnx_allocator_init(ProtobufCAllocator *a) {
  a->alloc = pb_alloc;
  a->free = pb_free;
  a->allocator_data = NULL;
}

const char *kl_onnx_dtype_name(int t) {
  static const char *const extra[] = {
      [14] = "complex64",      [15] = "complex128",   [17] = "float8e4m3fn",
      [18] = "float8e4m3fnuz", [19] = "float8e5m2",   [20] = "float8e5m2fnuz",
      [21] = "uint4",          [22] = "int4",         [23] = "float4e2m1",
      [24] = "float8e8m0",     [25] = "uint2",        [26] = "int2",
  };
  if (t >= 0 && t < (int)(sizeof extra / sizeof extra[0]) && extra[t]) return extra[t];
  if (t == KL_STRING || kl_dtype_valid(t)) return kl_dtype_name((kl_dtype)t);
  return t == 0 ? "undefined" : "unknown";
}

/* A tensor as it is being decoded: what messages need and the sizes checked so far. */
typedef struct decoding {
  const char *name; /* "tensor 'w'" or "tensor" */
  kl_dtype dtype;
  size_t esize, numel, nbytes;
} decoding;

static kiln_status check_dtype(const Onnx__TensorProto *tp, decoding *d, kl_err *e) {
  int t = tp->has_data_type ? tp->data_type : 0;
  if (t == 0)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s has no data type", d->name);
  if (!kl_dtype_valid(t))
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "%s has data type %s (%d), which kiln does not "
                   "support", d->name, kl_onnx_dtype_name(t), t);
  d->dtype = (kl_dtype)t;
  d->esize = kl_dtype_size(d->dtype);
  return KILN_OK;
}

static kiln_status check_shape(const Onnx__TensorProto *tp, const kl_onnx_tensor_src *src,
                               decoding *d, kl_tensor *out, kl_err *e) {
  if (tp->n_dims > KL_MAX_RANK)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "%s has rank %zu; kiln supports up to %d",
                   d->name, tp->n_dims, KL_MAX_RANK);
  int64_t numel = 1;
  for (size_t i = 0; i < tp->n_dims; i++) {
    if (tp->dims[i] < 0)
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s has dimension %zu of size %lld",
                     d->name, i, (long long)tp->dims[i]);
    out->dims[i] = tp->dims[i];
  }
  if (!kl_dims_fit((int)tp->n_dims, out->dims, &numel))
    return kl_fail(e, KILN_ERR_LIMIT, "%s: its dims are too large (their product, an empty "
                   "dim counted as 1, is over 2^59)", d->name);
  out->rank = (int)tp->n_dims;
  out->dtype = d->dtype;
  size_t nbytes;
  if ((uint64_t)numel > SIZE_MAX || kl_mul_overflow_size((size_t)numel, d->esize, &nbytes))
    return kl_fail(e, KILN_ERR_LIMIT, "%s: its byte size overflows", d->name);
  if (nbytes > (uint64_t)src->max_bytes)
    return kl_fail(e, KILN_ERR_LIMIT, "%s is %zu bytes, over the limit of %lld "
                   "(max_tensor_bytes)", d->name, nbytes, (long long)src->max_bytes);
  d->numel = (size_t)numel;
  d->nbytes = nbytes;
  return KILN_OK;
}

/* ---- the typed repeated fields ---- */

static kiln_status count_matches(const decoding *d, const char *field, size_t n, kl_err *e) {
  if (n != d->numel)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: %s has %zu elements, expected %zu",
                   d->name, field, n, d->numel);
  return KILN_OK;
}

static kiln_status wrong_field(const decoding *d, const char *field, kl_err *e) {
  return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s is %s, which %s cannot hold", d->name,
                 kl_dtype_name(d->dtype), field);
}

/* int32_data carries every type of 16 bits or less, one element per int32. */
static kiln_status from_int32(const Onnx__TensorProto *tp, const decoding *d, void *data,
                              kl_err *e) {
  int64_t lo, hi;
  switch (d->dtype) {
  case KL_I32: lo = INT32_MIN; hi = INT32_MAX; break;
  case KL_I16: lo = INT16_MIN; hi = INT16_MAX; break;
  case KL_I8: lo = INT8_MIN; hi = INT8_MAX; break;
  case KL_U8: lo = 0; hi = UINT8_MAX; break;
  case KL_U16: case KL_F16: case KL_BF16: lo = 0; hi = UINT16_MAX; break;
  case KL_F8E4M3FN: case KL_F8E4M3FNUZ: case KL_F8E5M2: case KL_F8E5M2FNUZ: case KL_F8E8M0:
    lo = 0; hi = UINT8_MAX; break; /* bit patterns */
  case KL_BOOL: lo = INT32_MIN; hi = INT32_MAX; break;
  default: return wrong_field(d, "int32_data", e);
  }
  kiln_status s = count_matches(d, "int32_data", tp->n_int32_data, e);
  for (size_t i = 0; s == KILN_OK && i < d->numel; i++) {
    int32_t v = tp->int32_data[i];
    if (v < lo || v > hi)
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: int32_data element %zu is %d, out of "
                     "range for %s", d->name, i, v, kl_dtype_name(d->dtype));
    if (d->dtype == KL_BOOL) v = v != 0;
    /* F16/BF16 elements are bit patterns, so storing them as integers is exact */
    kl_dtype st = d->dtype == KL_F16 || d->dtype == KL_BF16 ? KL_U16
                  : kl_dtype_is_f8(d->dtype)                  ? KL_U8
                                                              : d->dtype;
    kl_store_f64(data, st, i, v);
  }
  return s;
}

static kiln_status from_uint64(const Onnx__TensorProto *tp, const decoding *d, void *data,
                               kl_err *e) {
  if (d->dtype != KL_U32 && d->dtype != KL_U64) return wrong_field(d, "uint64_data", e);
  kiln_status s = count_matches(d, "uint64_data", tp->n_uint64_data, e);
  for (size_t i = 0; s == KILN_OK && i < d->numel; i++) {
    uint64_t v = tp->uint64_data[i];
    if (d->dtype == KL_U64) {
      ((uint64_t *)data)[i] = v;
    } else if (v > UINT32_MAX) {
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: uint64_data element %zu is %llu, out "
                     "of range for uint32", d->name, i, (unsigned long long)v);
    } else {
      ((uint32_t *)data)[i] = (uint32_t)v;
    }
  }
  return s;
}

/* A field whose elements are stored as they are (float, int64, double). */
static kiln_status from_same(const decoding *d, kl_dtype want, const char *field,
                             const void *src, size_t n, void *data, kl_err *e) {
  if (d->dtype != want) return wrong_field(d, field, e);
  kiln_status s = count_matches(d, field, n, e);
  if (s == KILN_OK && d->nbytes) memcpy(data, src, d->nbytes);
  return s;
}

static kiln_status from_typed(const Onnx__TensorProto *tp, const decoding *d, void *data,
                              kl_err *e) {
  if (tp->n_float_data)
    return from_same(d, KL_F32, "float_data", tp->float_data, tp->n_float_data, data, e);
  if (tp->n_int64_data)
    return from_same(d, KL_I64, "int64_data", tp->int64_data, tp->n_int64_data, data, e);
  if (tp->n_double_data)
    return from_same(d, KL_F64, "double_data", tp->double_data, tp->n_double_data, data, e);
  if (tp->n_int32_data) return from_int32(tp, d, data, e);
  if (tp->n_uint64_data) return from_uint64(tp, d, data, e);
  if (tp->n_string_data) return wrong_field(d, "string_data", e);
  if (d->numel != 0)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s has no data (expected %zu elements)",
                   d->name, d->numel);
  return KILN_OK;
}

/* ---- external data ---- */

typedef struct external_ref {
  const char *location;
  uint64_t offset, length;
  bool has_length;
} external_ref;

/* A non-negative decimal integer, as ONNX writes offset and length. */
static bool parse_u64(const char *s, uint64_t *v) {
  if (!s || !*s) return false;
  uint64_t x = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return false;
    if (__builtin_mul_overflow(x, 10u, &x) || __builtin_add_overflow(x, (uint64_t)(*s - '0'), &x))
      return false;
  }
  *v = x;
  return true;
}

static kiln_status parse_external(const Onnx__TensorProto *tp, const decoding *d,
                                  external_ref *r, kl_err *e) {
  memset(r, 0, sizeof *r);
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const char *k = tp->external_data[i]->key, *v = tp->external_data[i]->value;
    if (!k || !v)
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: an external_data entry has no %s",
                     d->name, k ? "value" : "key");
    bool ok = true;
    if (strcmp(k, "location") == 0) r->location = v;
    else if (strcmp(k, "offset") == 0) ok = parse_u64(v, &r->offset);
    else if (strcmp(k, "length") == 0) ok = r->has_length = parse_u64(v, &r->length);
    if (!ok)
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: external data %s '%.64s' is not a "
                     "non-negative integer", d->name, k, v);
  }
  if (!r->location || !*r->location)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: external data has no location", d->name);
  if (r->has_length && r->length != d->nbytes)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: external data length is %llu bytes, "
                   "expected %zu", d->name, (unsigned long long)r->length, d->nbytes);
  return KILN_OK;
}

/* The location must name a file inside the model's folder: relative, no '..'
 * component, and (checked after resolving symlinks) not leading out of the folder. */
static kiln_status check_location(const decoding *d, const char *loc, kl_err *e) {
  if (loc[0] == '/' || loc[0] == '\\')
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: external data location '%.256s' is an "
                   "absolute path; it must be relative to the model's folder", d->name, loc);
  for (const char *p = loc; *p;) {
    size_t n = strcspn(p, "/\\");
    if (n == 2 && p[0] == '.' && p[1] == '.')
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: external data location '%.256s' has "
                     "a '..' component; it must stay inside the model's folder", d->name, loc);
    p += n;
    if (*p) p++;
  }
  if (!kl_onnx_name_ok(loc))
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: external data location %s", d->name,
                   kl_onnx_name_fault(loc));
  return KILN_OK;
}

/* Resolve loc under dir and open it, refusing what escapes dir through symlinks. */
static kiln_status open_inside(const char *dir, const decoding *d, const char *loc, int *fd,
                               kl_err *e) {
  char *real_dir = realpath(dir, NULL), *joined = NULL, *real = NULL;
  size_t n = strlen(dir) + strlen(loc) + 2;
  kiln_status s = KILN_OK;
  if (!real_dir) {
    s = kl_fail(e, KILN_ERR_IO, "%s: cannot resolve the model's folder '%s': %s", d->name,
                dir, strerror(errno));
    goto done;
  }
  if (!(joined = malloc(n))) {
    s = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  snprintf(joined, n, "%s/%s", dir, loc);
  if (!(real = realpath(joined, NULL))) {
    s = kl_fail(e, KILN_ERR_IO, "%s: cannot open external data file '%s': %s", d->name, loc,
                strerror(errno));
    goto done;
  }
  size_t rd = strlen(real_dir);
  bool inside = strncmp(real, real_dir, rd) == 0 &&
                (real[rd] == '/' || (rd == 1 && real_dir[0] == '/'));
  if (!inside) {
    s = kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: external data location '%s' leads outside "
                "the model's folder", d->name, loc);
    goto done;
  }
  *fd = kl_open_regular(real, O_NOFOLLOW, "an external data file",
                        KILN_ERR_INVALID_MODEL, e);
  if (*fd < 0) {
    s = e->code;
    kl_err_prefix(e, "%s: external data '%s'", d->name, loc);
  }
done:
  free(real_dir);
  free(joined);
  free(real);
  return s;
}

static kiln_status from_external(const Onnx__TensorProto *tp, const kl_onnx_tensor_src *src,
                                 const decoding *d, void *data, kl_err *e) {
  external_ref r;
  kiln_status s = parse_external(tp, d, &r, e);
  if (s != KILN_OK) return s;
  if (!src->dir)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "%s keeps its data in an external file "
                   "('%.256s'), which a model loaded from memory cannot reach", d->name,
                   r.location);
  if ((s = check_location(d, r.location, e)) != KILN_OK) return s;
  int fd = -1;
  if ((s = open_inside(src->dir, d, r.location, &fd, e)) != KILN_OK) return s;
  struct stat st;
  uint64_t end;
  char what[KL_ONNX_MAX_NAME + 64];
  snprintf(what, sizeof what, "external data file '%s'", r.location);
  if (fstat(fd, &st) != 0) {
    s = kl_fail(e, KILN_ERR_IO, "%s: cannot stat %s: %s", d->name, what, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    s = kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: %s is not a regular file", d->name, what);
  } else if (__builtin_add_overflow(r.offset, (uint64_t)d->nbytes, &end) ||
             end > (uint64_t)st.st_size) {
    s = kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: its %zu bytes at offset %llu lie past the "
                "end of %s (%lld bytes)", d->name, d->nbytes, (unsigned long long)r.offset,
                what, (long long)st.st_size);
  } else {
    s = kl_file_pread(fd, data, d->nbytes, r.offset, what, e);
  }
  close(fd);
  return s;
}

/* ---- the whole tensor ---- */

static int storage_forms(const Onnx__TensorProto *tp, bool external, bool lifted) {
  return (tp->has_raw_data != 0) + external + lifted + (tp->n_float_data != 0) +
         (tp->n_int32_data != 0) + (tp->n_int64_data != 0) + (tp->n_double_data != 0) +
         (tp->n_uint64_data != 0) + (tp->n_string_data != 0);
}

/* raw_data of the exact size is moved out of tp, so large weights are never copied. */
static kiln_status from_raw(Onnx__TensorProto *tp, const decoding *d, void **data, kl_err *e) {
  if (tp->raw_data.len != d->nbytes)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: raw_data has %zu bytes, expected %zu "
                   "(%zu elements of %s)", d->name, tp->raw_data.len, d->nbytes, d->numel,
                   kl_dtype_name(d->dtype));
  if (d->nbytes == 0) {
    *data = malloc(1);
  } else {
    *data = tp->raw_data.data;
    tp->raw_data.data = NULL;
    tp->raw_data.len = 0;
    tp->has_raw_data = 0;
  }
  return *data ? KILN_OK : kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
}

/* Lifted raw_data: copied (or read from the file) into a buffer of the tensor's own. */
static kiln_status from_lifted(const kl_onnx_lifted *raw, const decoding *d, void *data,
                               kl_err *e) {
  if (raw->len != d->nbytes)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: raw_data has %zu bytes, expected %zu "
                   "(%zu elements of %s)", d->name, raw->len, d->nbytes, d->numel,
                   kl_dtype_name(d->dtype));
  if (d->nbytes == 0) return KILN_OK;
  if (raw->fd >= 0) return kl_file_pread(raw->fd, data, d->nbytes, raw->offset, d->name, e);
  memcpy(data, raw->base + raw->offset, d->nbytes);
  return KILN_OK;
}

/* The packed sub-byte types (int4, uint4, float4e2m1, int2, uint2): raw_data (or lifted
 * raw_data) of exactly the packed size, or int32_data holding one packed byte per
 * element, as onnx.helper writes them; unpacked to one element per byte. */
static kiln_status from_packed(const Onnx__TensorProto *tp, const kl_onnx_lifted *raw,
                               bool external, const decoding *d, void **data, kl_err *e) {
  size_t want = kl_dtype_file_bytes(d->dtype, d->numel);
  const char *tn = kl_dtype_name(d->dtype);
  if (external)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "%s: external data of packed %s is not supported",
                   d->name, tn);
  if (tp->n_float_data || tp->n_int64_data || tp->n_double_data || tp->n_uint64_data ||
      tp->n_string_data)
    return wrong_field(d, "a field other than raw_data and int32_data", e);
  /* the sizes first, so that nothing is allocated for a tensor whose data cannot fit */
  bool in_raw = tp->has_raw_data || raw;
  size_t len = raw ? raw->len : in_raw ? tp->raw_data.len : tp->n_int32_data;
  if (!in_raw && !tp->n_int32_data && want)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s has no data (expected %zu elements)",
                   d->name, d->numel);
  if (len != want)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: %s has %zu %s, expected %zu (%zu elements "
                   "of %s, packed %d to a byte)", d->name, in_raw ? "raw_data" : "int32_data",
                   len, in_raw ? "bytes" : "elements", want, d->numel, tn,
                   8 / kl_dtype_file_bits(d->dtype));
  for (size_t i = 0; !in_raw && i < want; i++)
    if (tp->int32_data[i] < 0 || tp->int32_data[i] > UINT8_MAX)
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s: int32_data element %zu is %d, not a "
                     "packed byte of %s", d->name, i, tp->int32_data[i], tn);
  uint8_t *packed = malloc(want ? want : 1), *out = malloc(d->numel ? d->numel : 1);
  kiln_status s = KILN_OK;
  if (!packed || !out)
    s = kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", d->name);
  else if (want && raw && raw->fd >= 0)
    s = kl_file_pread(raw->fd, packed, want, raw->offset, d->name, e);
  else if (want && in_raw)
    memcpy(packed, raw ? raw->base + raw->offset : tp->raw_data.data, want);
  else
    for (size_t i = 0; i < want; i++) packed[i] = (uint8_t)tp->int32_data[i];
  if (s == KILN_OK) kl_dtype_unpack(d->dtype, packed, d->numel, out);
  free(packed);
  if (s != KILN_OK) free(out);
  else *data = out;
  return s;
}

/* *data is malloc'd (or taken from raw_data) only when decoding succeeds. */
static kiln_status decode_data(Onnx__TensorProto *tp, const kl_onnx_tensor_src *src,
                               const kl_onnx_lifted *raw, const decoding *d, void **data,
                               kl_err *e) {
  bool external = tp->has_data_location &&
                  tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  if (tp->segment)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "%s is stored in segments, which kiln does not "
                   "support", d->name);
  if (storage_forms(tp, external, raw != NULL) > 1)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s stores its data in more than one form "
                   "(raw_data, external data, typed fields)", d->name);
  if (kl_dtype_file_bits(d->dtype) < 8) return from_packed(tp, raw, external, d, data, e);
  if (tp->has_raw_data) return from_raw(tp, d, data, e);
  void *p = malloc(d->nbytes ? d->nbytes : 1);
  if (!p)
    return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes", d->name,
                   d->nbytes);
  kiln_status s = raw        ? from_lifted(raw, d, p, e)
                   : external ? from_external(tp, src, d, p, e)
                              : from_typed(tp, d, p, e);
  if (s != KILN_OK) free(p);
  else *data = p;
  return s;
}

kiln_status kl_onnx_tensor_decode(Onnx__TensorProto *tp, const kl_onnx_tensor_src *src,
                                  const char *what, kl_tensor *out, size_t *nbytes,
                                  kl_err *e) {
  return kl_onnx_tensor_decode_lifted(tp, src, what, NULL, out, nbytes, e);
}

kiln_status kl_onnx_tensor_decode_lifted(Onnx__TensorProto *tp, const kl_onnx_tensor_src *src,
                                         const char *what, const kl_onnx_lifted *raw,
                                         kl_tensor *out, size_t *nbytes, kl_err *e) {
  char name[KL_ONNX_MAX_NAME + 32] = "tensor";
  if (tp->name && !kl_onnx_name_ok(tp->name))
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "a tensor name %s", kl_onnx_name_fault(tp->name));
  if (what) snprintf(name, sizeof name, "%s", what);
  else if (tp->name && *tp->name) snprintf(name, sizeof name, "tensor '%s'", tp->name);
  memset(out, 0, sizeof *out);
  decoding d = {.name = name};
  void *data = NULL;
  kiln_status s = check_dtype(tp, &d, e);
  if (s == KILN_OK) s = check_shape(tp, src, &d, out, e);
  if (s == KILN_OK) s = decode_data(tp, src, raw, &d, &data, e);
  if (s != KILN_OK) return s;
  /* kiln's bools are 0 or 1; raw bytes may say anything */
  if (d.dtype == KL_BOOL)
    for (size_t i = 0; i < d.numel; i++) ((uint8_t *)data)[i] = ((uint8_t *)data)[i] != 0;
  out->data = data;
  *nbytes = d.nbytes;
  return KILN_OK;
}
