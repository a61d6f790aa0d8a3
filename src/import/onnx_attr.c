/* AttributeProto -> kl_attr, and the text checks that every name from a file passes. */
#include "import/onnx_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* kl_attr_kind is defined with ONNX's AttributeType numbers; conversions rely on it. */
_Static_assert((int)KL_ATTR_FLOAT == (int)ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT &&
                   (int)KL_ATTR_INT == (int)ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT &&
                   (int)KL_ATTR_STRING == (int)ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING &&
                   (int)KL_ATTR_TENSOR == (int)ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR &&
                   (int)KL_ATTR_GRAPH == (int)ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH &&
                   (int)KL_ATTR_FLOATS == (int)ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS &&
                   (int)KL_ATTR_INTS == (int)ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS &&
                   (int)KL_ATTR_STRINGS == (int)ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS,
               "kl_attr_kind must match ONNX's AttributeType");

/* Length of the UTF-8 sequence starting at s (1..4), or 0 if it is malformed,
 * overlong, a surrogate or above U+10FFFF. */
static int utf8_seq(const unsigned char *s) {
  unsigned c = s[0];
  int n;
  unsigned min;
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0) n = 2, min = 0x80, c &= 0x1f;
  else if ((c & 0xf0) == 0xe0) n = 3, min = 0x800, c &= 0x0f;
  else if ((c & 0xf8) == 0xf0) n = 4, min = 0x10000, c &= 0x07;
  else return 0;
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    c = (c << 6) | (s[i] & 0x3fu);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  return n;
}

#define STR_(x) #x
#define STR(x) STR_(x)

const char *kl_onnx_name_fault(const char *s) {
  if (!s || !*s) return "is missing or empty";
  const unsigned char *p = (const unsigned char *)s;
  size_t len = 0;
  while (p[len]) {
    if (p[len] < 0x20 || p[len] == 0x7f) return "holds a control character";
    int n = utf8_seq(p + len);
    if (n == 0) return "is not valid UTF-8 text";
    len += (size_t)n;
    if (len > KL_ONNX_MAX_NAME) return "is longer than " STR(KL_ONNX_MAX_NAME) " bytes";
  }
  return NULL;
}

bool kl_onnx_name_ok(const char *s) { return !s || !*s || !kl_onnx_name_fault(s); }

/* A bytes value as a C string: refused when it holds a NUL, which C cannot carry. */
static char *bytes_to_str(ProtobufCBinaryData b, const char *attr, kl_err *e) {
  if (b.len && memchr(b.data, 0, b.len)) {
    kl_fail(e, KILN_ERR_UNSUPPORTED, "attribute '%s' holds a string with a NUL byte", attr);
    return NULL;
  }
  char *s = malloc(b.len + 1);
  if (!s) {
    kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return NULL;
  }
  if (b.len) memcpy(s, b.data, b.len);
  s[b.len] = '\0';
  return s;
}

static kiln_status convert_list(const Onnx__AttributeProto *ap, kl_attr *a, kl_err *e) {
  size_t n = a->kind == KL_ATTR_FLOATS ? ap->n_floats
             : a->kind == KL_ATTR_INTS ? ap->n_ints : ap->n_strings;
  if (n > INT_MAX)
    return kl_fail(e, KILN_ERR_LIMIT, "attribute '%s' has %zu elements", a->name, n);
  a->n = (int)n;
  size_t bytes = (n ? n : 1) * (a->kind == KL_ATTR_FLOATS ? sizeof(float)
                                : a->kind == KL_ATTR_INTS ? sizeof(int64_t) : sizeof(char *));
  void *p = calloc(1, bytes);
  if (!p) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  if (a->kind == KL_ATTR_FLOATS) {
    a->floats = p;
    if (n) memcpy(a->floats, ap->floats, n * sizeof(float));
  } else if (a->kind == KL_ATTR_INTS) {
    a->ints = p;
    if (n) memcpy(a->ints, ap->ints, n * sizeof(int64_t));
  } else {
    a->strings = p;
    for (size_t i = 0; i < n; i++)
      if (!(a->strings[i] = bytes_to_str(ap->strings[i], a->name, e))) return e->code;
  }
  return KILN_OK;
}

static kiln_status convert_tensor(const Onnx__AttributeProto *ap, const kl_onnx_tensor_src *ts,
                                  kl_attr *a, kl_err *e) {
  if (!ap->t)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "tensor attribute '%s' has no tensor", a->name);
  if (!(a->t = calloc(1, sizeof *a->t))) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  size_t nbytes;
  char what[KL_ONNX_MAX_NAME + 32];
  snprintf(what, sizeof what, "attribute '%s'", a->name);
  return kl_onnx_tensor_decode(ap->t, ts, what, a->t, &nbytes, e);
}

static const char *kind_name(int t) {
  switch (t) {
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH: return "GRAPH";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS: return "GRAPHS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS: return "TENSORS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR: return "SPARSE_TENSOR";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS: return "SPARSE_TENSORS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO: return "TYPE_PROTO";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS: return "TYPE_PROTOS";
  default: return NULL;
  }
}

/* An attribute type's name as onnx.proto spells it. */
static const char *type_name(int t) {
  switch (t) {
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: return "FLOAT";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: return "INT";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: return "STRING";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: return "TENSOR";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: return "FLOATS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS: return "INTS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: return "STRINGS";
  default: return kind_name(t) ? kind_name(t) : "?";
  }
}

/* The first value field of ap that its type does not use (an INT attribute holding only
 * f was read as i = 0, silently), or NULL. An unset field of the type itself is its
 * default, as protobuf writes a zero. */
static const char *stray_field(const Onnx__AttributeProto *ap, int type) {
#define T(x) ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__##x
  const struct {
    bool set;
    int type;
    const char *name;
  } fields[] = {
      {ap->has_f, T(FLOAT), "a float (f)"}, {ap->has_i, T(INT), "an int (i)"},
      {ap->has_s, T(STRING), "a string (s)"}, {ap->t != NULL, T(TENSOR), "a tensor (t)"},
      {ap->g != NULL, T(GRAPH), "a graph (g)"},
      {ap->sparse_tensor != NULL, T(SPARSE_TENSOR), "a sparse tensor"},
      {ap->tp != NULL, T(TYPE_PROTO), "a type (tp)"}, {ap->n_floats > 0, T(FLOATS), "floats"},
      {ap->n_ints > 0, T(INTS), "ints"}, {ap->n_strings > 0, T(STRINGS), "strings"},
      {ap->n_tensors > 0, T(TENSORS), "tensors"}, {ap->n_graphs > 0, T(GRAPHS), "graphs"},
      {ap->n_sparse_tensors > 0, T(SPARSE_TENSORS), "sparse tensors"},
      {ap->n_type_protos > 0, T(TYPE_PROTOS), "types"},
  };
#undef T
  for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++)
    if (fields[k].set && fields[k].type != type) return fields[k].name;
  return NULL;
}

static kiln_status convert_value(const Onnx__AttributeProto *ap, const kl_onnx_tensor_src *ts,
                                 kl_attr *a, kl_err *e) {
  int t = ap->has_type ? (int)ap->type : 0;
  const char *stray = t ? stray_field(ap, t) : NULL;
  if (stray)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "attribute '%s' is of type %s but holds %s",
                   a->name, type_name(t), stray);
  switch (t) {
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: a->f = ap->f; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: a->i = ap->i; break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
    return (a->s = bytes_to_str(ap->s, a->name, e)) ? KILN_OK : e->code;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: return convert_tensor(ap, ts, a, e);
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: return convert_list(ap, a, e);
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH:
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS:
    /* If's branches and Loop's and Scan's bodies are read before (onnx.c); any other
     * graph attribute is not in its op's schema */
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "attribute '%s' is of type %s (a subgraph); "
                   "only If's then_branch and else_branch and Loop's and Scan's body are",
                   a->name, type_name(t));
  default:
    if (kind_name(t))
      return kl_fail(e, KILN_ERR_UNSUPPORTED, "attribute '%s' has type %s, which kiln does "
                     "not support", a->name, kind_name(t));
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "attribute '%s' has no valid type (%d)",
                   a->name, t);
  }
  return KILN_OK;
}

kiln_status kl_onnx_attr_convert(const Onnx__AttributeProto *ap, const kl_onnx_tensor_src *ts,
                                 kl_attr *out, kl_err *e) {
  memset(out, 0, sizeof *out);
  if (kl_onnx_name_fault(ap->name))
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "an attribute's name %s",
                   kl_onnx_name_fault(ap->name));
  if (ap->ref_attr_name && *ap->ref_attr_name)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "attribute '%s' refers to a function's "
                   "attribute, which only a function body may do", ap->name);
  if (!(out->name = strdup(ap->name))) return kl_fail(e, KILN_ERR_OUT_OF_MEMORY, "out of memory");
  /* kl_attr's kind numbers are ONNX's AttributeType values */
  out->kind = ap->has_type ? (kl_attr_kind)ap->type : (kl_attr_kind)0;
  kiln_status s = convert_value(ap, ts, out, e);
  if (s != KILN_OK) kl_attr_clear(out);
  return s;
}

const Onnx__AttributeProto *kl_onnx_node_attr(const kl_onnx_node *n, const char *name) {
  for (size_t i = 0; i < n->np->n_attribute; i++)
    if (n->np->attribute[i]->name && strcmp(n->np->attribute[i]->name, name) == 0)
      return n->np->attribute[i];
  return NULL;
}
