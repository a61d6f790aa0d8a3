/* Einsum: parsing the equation (shared with the reference kernel) and shape/dtype
 * inference.
 *
 * The equation is "term,term,...->output" or, in implicit mode, without "->": then the
 * output is the ellipsis dims (if any operand has an ellipsis) followed by the letters
 * that occur exactly once, in alphabetical order (upper case first, as NumPy sorts).
 * Spaces are ignored. A letter repeated within a term takes the diagonal; letters not
 * in the output are summed over. */
#include "ir/infer_common.h"
#include "ir/reduce.h"

#include <string.h>

#define SYM_ELL (-1)
#define MAX_TERM (KL_MAX_RANK + 1) /* letters of a term, and its ellipsis */

typedef struct term {
  int n;
  int8_t sym[MAX_TERM]; /* letter labels, SYM_ELL for the ellipsis */
  int letters;          /* count of letters */
  bool ell;
} term;

static int letter_label(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return 26 + (ch - 'a');
  return -1;
}

/* One term from *p up to a ',', '-' or the end; *p is left on that character. */
static kiln_status parse_term(const char **p, const char *what, term *t, kl_err *e) {
  memset(t, 0, sizeof *t);
  const char *s = *p;
  for (; *s && *s != ',' && *s != '-'; s++) {
    if (*s == ' ') continue;
    int8_t sym;
    if (*s == '.') {
      if (strncmp(s, "...", 3) != 0 || t->ell)
        return kl_fail(e, KILN_ERR_INVALID_MODEL, "equation: %s has a '.' that is not one "
                       "ellipsis \"...\"", what);
      t->ell = true;
      sym = SYM_ELL;
      s += 2;
    } else if ((sym = (int8_t)letter_label(*s)) < 0) {
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "equation: %s has '%c', expected letters, "
                     "\"...\" and spaces", what, *s);
    } else {
      t->letters++;
    }
    if (t->n == MAX_TERM)
      return kl_fail(e, KILN_ERR_UNSUPPORTED, "equation: %s has more than %d dims",
                     what, KL_MAX_RANK);
    t->sym[t->n++] = sym;
  }
  *p = s;
  return KILN_OK;
}

/* Splits the equation into n_in input terms and the output term (*explicit_out false
 * in implicit mode). */
static kiln_status split(const char *eq, int n_in, term *in, term *out, bool *explicit_out,
                         kl_err *e) {
  const char *p = eq;
  char what[32];
  for (int k = 0;; k++) {
    if (k == n_in)
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "equation \"%s\" has more terms than the "
                     "%d inputs", eq, n_in);
    snprintf(what, sizeof what, "term %d", k);
    kiln_status st = parse_term(&p, what, &in[k], e);
    if (st != KILN_OK) return st;
    if (*p != ',') {
      if (k + 1 != n_in)
        return kl_fail(e, KILN_ERR_INVALID_MODEL, "equation \"%s\" has %d input terms, "
                       "expected %d (one per input)", eq, k + 1, n_in);
      break;
    }
    p++;
  }
  *explicit_out = *p == '-';
  memset(out, 0, sizeof *out);
  if (!*explicit_out) return KILN_OK;
  if (p[1] != '>')
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "equation \"%s\": '-' not followed by '>'", eq);
  p += 2;
  kiln_status st = parse_term(&p, "the output", out, e);
  if (st == KILN_OK && *p)
    st = kl_fail(e, KILN_ERR_INVALID_MODEL, "equation \"%s\": unexpected '%c' in the output",
                 eq, *p);
  return st;
}

/* Labels the dims of input k (rank known) given the widest ellipsis n_ell. */
static void label_input(const term *t, int rank, int n_ell, int8_t *label) {
  int ell = rank - t->letters, d = 0;
  for (int i = 0; i < t->n; i++) {
    if (t->sym[i] != SYM_ELL) {
      label[d++] = t->sym[i];
      continue;
    }
    for (int j = 0; j < ell; j++) label[d++] = (int8_t)(KL_EINSUM_ELL + n_ell - ell + j);
  }
}

/* The output labels: explicit, or implicit (see the top of the file). ell_known says
 * whether n_ell is known. */
static kiln_status label_output(const term *in, int n_in, const term *out, bool explicit_out,
                                bool any_ell, bool ell_known, kl_einsum *r, kl_err *e) {
  int count[KL_EINSUM_LETTERS] = {0};
  for (int k = 0; k < n_in; k++)
    for (int i = 0; i < in[k].n; i++)
      if (in[k].sym[i] != SYM_ELL) count[in[k].sym[i]]++;
  bool out_ell = explicit_out ? out->ell : any_ell;
  r->out_rank = -1;
  if (out_ell && !ell_known) return KILN_OK;
  int n = 0;
  int8_t labels[KL_EINSUM_LABELS];
  if (!explicit_out) {
    for (int j = 0; out_ell && j < r->n_ell; j++) labels[n++] = (int8_t)(KL_EINSUM_ELL + j);
    for (int l = 0; l < KL_EINSUM_LETTERS; l++)
      if (count[l] == 1) labels[n++] = (int8_t)l;
  }
  bool seen[KL_EINSUM_LETTERS] = {false};
  for (int i = 0; explicit_out && i < out->n; i++) {
    int s = out->sym[i];
    if (s == SYM_ELL) {
      for (int j = 0; j < r->n_ell; j++) labels[n++] = (int8_t)(KL_EINSUM_ELL + j);
      continue;
    }
    if (!count[s] || seen[s])
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "equation: output letter '%c' %s",
                     s < 26 ? 'A' + s : 'a' + s - 26,
                     seen[s] ? "appears twice" : "is in no input term");
    seen[s] = true;
    labels[n++] = (int8_t)s;
  }
  if (n > KL_MAX_RANK)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "equation: the output has %d dims; kiln "
                   "supports at most %d", n, KL_MAX_RANK);
  r->out_rank = n;
  memcpy(r->out_label, labels, (size_t)n);
  return KILN_OK;
}

kiln_status kl_einsum_parse(const char *equation, int n_in, const int *ranks, kl_einsum *r,
                            kl_err *e) {
  if (n_in < 1 || n_in > KL_EINSUM_MAX_INPUTS)
    return kl_fail(e, KILN_ERR_UNSUPPORTED, "%d inputs; kiln's Einsum takes 1 to %d", n_in,
                   KL_EINSUM_MAX_INPUTS);
  term in[KL_EINSUM_MAX_INPUTS], out;
  bool explicit_out, any_ell = false, ell_known = true;
  kiln_status st = split(equation, n_in, in, &out, &explicit_out, e);
  if (st != KILN_OK) return st;
  memset(r, 0, sizeof *r);
  r->n_in = n_in;
  for (int k = 0; k < n_in; k++) {
    int rank = ranks[k] >= 0 || in[k].ell ? ranks[k] : in[k].letters;
    r->rank[k] = rank;
    any_ell |= in[k].ell;
    ell_known &= !in[k].ell || rank >= 0;
    if (rank >= 0 && (in[k].ell ? rank < in[k].letters : rank != in[k].letters))
      return kl_fail(e, KILN_ERR_INVALID_MODEL, "equation: term %d names %d dims%s but "
                     "input %d has rank %d", k, in[k].letters, in[k].ell ? " and \"...\"" : "",
                     k, rank);
    if (rank >= 0 && rank - in[k].letters > r->n_ell) r->n_ell = rank - in[k].letters;
  }
  for (int k = 0; k < n_in; k++)
    if (r->rank[k] >= 0) label_input(&in[k], r->rank[k], r->n_ell, r->label[k]);
  return label_output(in, n_in, &out, explicit_out, any_ell, ell_known, r, e);
}

/* Size of label l over the inputs: letters must agree, ellipsis dims broadcast. */
static kiln_status label_size(const kl_infer_ctx *c, const kl_einsum *r, int l, kl_dim *size) {
  *size = l >= KL_EINSUM_ELL ? kl_dim_of(1) : kl_dim_unknown();
  for (int k = 0; k < r->n_in; k++)
    for (int d = 0; d < r->rank[k] && c->in[k]->rank >= 0; d++) {
      if (r->label[k][d] != l) continue;
      kl_dim dim = c->in[k]->dims[d];
      bool ok = true;
      if (l >= KL_EINSUM_ELL && dim.size == 1) continue;
      if (l >= KL_EINSUM_ELL && size->size == 1) *size = dim;
      else *size = kl_dim_merge(*size, dim, &ok);
      if (!ok)
        return kl_fail(c->e, KILN_ERR_SHAPE, "input %d dim %d is %lld, but the same %s "
                       "has %lld elsewhere", k, d, (long long)dim.size,
                       l >= KL_EINSUM_ELL ? "ellipsis dim" : "letter", (long long)size->size);
    }
  return KILN_OK;
}

int kl_infer_einsum(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, c->n_in);
  for (int k = 0; st == KILN_OK && k < c->n_in; k++) {
    st = kl_check_dtype(c, k, "Inputs", KL_DTS_ARITH | KL_DT(KL_U32) | KL_DT(KL_U64));
    if (st == KILN_OK) st = kl_check_same_dtype(c, 0, k);
  }
  const kl_attr *eq = kl_node_attr(c->node, "equation");
  if (st == KILN_OK && (!eq || eq->kind != KL_ATTR_STRING))
    st = kl_fail(c->e, KILN_ERR_INVALID_MODEL, "equation must be a string attribute");
  int ranks[KL_EINSUM_MAX_INPUTS];
  for (int k = 0; st == KILN_OK && k < c->n_in && k < KL_EINSUM_MAX_INPUTS; k++)
    ranks[k] = c->in[k]->rank; /* every input is present once kl_check_required passed */
  kl_einsum r;
  if (st == KILN_OK) st = kl_einsum_parse(eq->s, c->n_in, ranks, &r, c->e);
  if (st != KILN_OK) return st;
  kl_type *out = &c->out[0];
  kl_type_unknown(out, c->in[0]->dtype);
  bool every_rank = true;
  for (int k = 0; k < c->n_in; k++) every_rank &= c->in[k]->rank >= 0;
  for (int l = 0; every_rank && l < KL_EINSUM_LABELS; l++) {
    kl_dim size;
    st = label_size(c, &r, l, &size); /* checks every label, in the output or not */
    if (st != KILN_OK) return st;
  }
  if (r.out_rank < 0) return KILN_OK;
  out->rank = r.out_rank;
  for (int i = 0; i < r.out_rank; i++) {
    st = label_size(c, &r, r.out_label[i], &out->dims[i]);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}
