/* Shape/dtype inference for Resize (opsets 11 to 19; Upsample and Resize-10 arrive
 * rewritten into it), and the attribute reading and per-dim plan that the reference
 * kernel shares (data_plan.h). Output sizes follow ONNX's reference implementation:
 * floor(size * scale) from scales, and from sizes either the sizes themselves or, when
 * keeping the aspect ratio, round-half-up(size * the one scale chosen). */
#include "ir/data_plan.h"
#include "ir/infer_common.h"

#include <math.h>
#include <string.h>

/* X's dtypes: the float types and the integers that double holds exactly. */
#define RESIZE_DTYPES (KL_DTS_FLOAT | KL_DT(KL_I8) | KL_DT(KL_U8) | KL_DT(KL_I16) | \
                       KL_DT(KL_U16) | KL_DT(KL_I32) | KL_DT(KL_U32))

/* Index of attribute `attr`'s value in names (n of them), dflt when absent. */
static kiln_status pick(const kl_node *node, const char *attr, const char *const *names, int n,
                        const char *dflt, int *out, kl_err *e) {
  const char *s = kl_attr_string(node, attr, dflt);
  for (int i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0) {
      *out = i;
      return KILN_OK;
    }
  char list[256];
  size_t used = 0;
  for (int i = 0; i < n && used < sizeof list; i++)
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", names[i]);
  return kl_fail(e, KILN_ERR_INVALID_MODEL, "%s is \"%s\", expected one of %s", attr, s, list);
}

static kiln_status read_modes(const kl_node *node, kl_resize_attrs *a, kl_err *e) {
  static const char *const modes[] = {"nearest", "linear", "cubic"};
  static const char *const coords[] = {"half_pixel", "half_pixel_symmetric",
                                       "pytorch_half_pixel", "align_corners", "asymmetric",
                                       "tf_crop_and_resize", "tf_half_pixel_for_nn"};
  static const char *const nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                        "ceil", "simple"};
  static const char *const aspects[] = {"stretch", "not_larger", "not_smaller"};
  int m = 0, co = 0, ne = 0, as = 0;
  kiln_status st = pick(node, "mode", modes, 3, "nearest", &m, e);
  if (st == KILN_OK)
    st = pick(node, "coordinate_transformation_mode", coords, 7, "half_pixel", &co, e);
  if (st == KILN_OK) st = pick(node, "nearest_mode", nearest, 5, "round_prefer_floor", &ne, e);
  if (st == KILN_OK) st = pick(node, "keep_aspect_ratio_policy", aspects, 3, "stretch", &as, e);
  a->mode = (kl_resize_mode)m;
  a->coord = (kl_resize_coord)co;
  a->nearest = (kl_resize_nearest)ne;
  a->aspect = (kl_resize_aspect)as;
  return st;
}

static kiln_status read_axes(const kl_node *node, int rank, kl_resize_attrs *a, kl_err *e) {
  const int64_t *axes;
  a->n_axes = kl_attr_ints(node, "axes", &axes);
  if (a->n_axes > KL_MAX_RANK || (rank >= 0 && a->n_axes > rank))
    return kl_fail(e, KILN_ERR_SHAPE, "axes has %d entries, more than the rank %d", a->n_axes,
                   rank >= 0 ? rank : KL_MAX_RANK);
  bool seen[KL_MAX_RANK] = {false};
  for (int k = 0; k < a->n_axes; k++) {
    a->axes[k] = axes[k];
    if (rank < 0) continue;
    if (axes[k] < -rank || axes[k] >= rank)
      return kl_fail(e, KILN_ERR_SHAPE, "axes[%d] is %lld, out of range for rank %d", k,
                     (long long)axes[k], rank);
    if (axes[k] < 0) a->axes[k] += rank;
    if (seen[a->axes[k]])
      return kl_fail(e, KILN_ERR_SHAPE, "axes name dim %lld twice", (long long)a->axes[k]);
    seen[a->axes[k]] = true;
  }
  return KILN_OK;
}

kiln_status kl_resize_attrs_read(const kl_node *node, int rank, kl_resize_attrs *a,
                                 kl_err *e) {
  memset(a, 0, sizeof *a);
  a->antialias = kl_attr_int(node, "antialias", 0) != 0;
  a->exclude_outside = kl_attr_int(node, "exclude_outside", 0) != 0;
  a->cubic_a = kl_attr_float(node, "cubic_coeff_a", -0.75f);
  a->extrapolation = kl_attr_float(node, "extrapolation_value", 0.0f);
  kiln_status st = read_modes(node, a, e);
  return st == KILN_OK ? read_axes(node, rank, a, e) : st;
}

/* ---- the plan ---- */

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)); }

/* floor(len * scale), or -1 when len is not known. */
static kiln_status scaled_size(int64_t len, double scale, int64_t *out, kl_err *e) {
  *out = -1;
  if (len < 0) return KILN_OK;
  double v = floor((double)len * scale);
  if (v > 4e18) return kl_fail(e, KILN_ERR_LIMIT, "scale %g makes a dim of %g", scale, v);
  *out = (int64_t)v;
  return KILN_OK;
}

static kiln_status plan_scales(const kl_resize_request *r, int n, const int *dims_of,
                               const int64_t *dims, kl_resize_plan *p, kl_err *e) {
  for (int k = 0; k < n; k++) {
    int d = dims_of[k];
    double s = r->scales[k];
    if (!(s > 0) || !isfinite(s))
      return kl_fail(e, KILN_ERR_INVALID_ARGUMENT, "scales[%d] is %g, expected > 0", k, s);
    p->scale[d] = s;
    kiln_status st = scaled_size(dims[d], s, &p->out[d], e);
    if (st != KILN_OK) return st;
  }
  return KILN_OK;
}

/* With keep_aspect_ratio_policy every named dim gets the same scale, the smallest
 * (not_larger) or largest (not_smaller) of the ones the sizes ask for. */
static kiln_status plan_aspect(const kl_resize_attrs *a, int n, const int *dims_of,
                               const int64_t *dims, kl_resize_plan *p, kl_err *e) {
  double pick = 0;
  for (int k = 0; k < n; k++) {
    double s = p->scale[dims_of[k]];
    if (k == 0 || (a->aspect == KL_ASPECT_NOT_LARGER ? s < pick : s > pick)) pick = s;
  }
  for (int k = 0; k < n; k++) {
    int d = dims_of[k];
    double v = (double)dims[d] * pick + 0.5;
    if (v > 4e18) return kl_fail(e, KILN_ERR_LIMIT, "dim %d would be resized to %g", d, v);
    p->scale[d] = pick;
    p->out[d] = (int64_t)v;
  }
  return KILN_OK;
}

static kiln_status plan_sizes(const kl_resize_attrs *a, const kl_resize_request *r, int n,
                              const int *dims_of, const int64_t *dims, kl_resize_plan *p,
                              kl_err *e) {
  bool all_known = true;
  for (int k = 0; k < n; k++) {
    int d = dims_of[k];
    if (r->sizes[k] < 0)
      return kl_fail(e, KILN_ERR_SHAPE, "sizes[%d] is %lld, expected a size >= 0", k,
                     (long long)r->sizes[k]);
    if (dims[d] == 0 && r->sizes[k] != 0)
      return kl_fail(e, KILN_ERR_SHAPE, "dim %d is empty and cannot be resized to %lld", d,
                     (long long)r->sizes[k]);
    p->out[d] = r->sizes[k];
    p->scale[d] = dims[d] > 0 ? (double)r->sizes[k] / (double)dims[d] : dims[d] == 0 ? 1 : 0;
    all_known = all_known && dims[d] > 0;
  }
  if (a->aspect == KL_ASPECT_STRETCH) return KILN_OK;
  if (all_known) return plan_aspect(a, n, dims_of, dims, p, e);
  for (int k = 0; k < n; k++) p->out[dims_of[k]] = -1, p->scale[dims_of[k]] = 0;
  return KILN_OK;
}

/* Exactly one of scales and sizes; while one is not known (-2) the other decides. */
static kiln_status check_request(const kl_resize_attrs *a, const kl_resize_request *r, int n,
                                 kl_err *e) {
  if (r->n_scales >= 0 && r->n_sizes >= 0)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "both scales and sizes are given; exactly one "
                   "must be");
  if (r->n_scales == -1 && r->n_sizes == -1)
    return kl_fail(e, KILN_ERR_INVALID_MODEL, "neither scales nor sizes is given");
  bool scales = r->n_scales >= 0;
  int got = scales ? r->n_scales : r->n_sizes;
  if (got >= 0 && got != n)
    return kl_fail(e, KILN_ERR_SHAPE, "%s has %d values, expected %d (one per resized dim)",
                   scales ? "scales" : "sizes", got, n);
  if (a->coord == KL_COORD_TF_CROP_AND_RESIZE && r->n_roi != -2 && r->n_roi != 2 * n)
    return kl_fail(e, KILN_ERR_SHAPE, "roi has %d values, expected %d for tf_crop_and_resize",
                   r->n_roi < 0 ? 0 : r->n_roi, 2 * n);
  return KILN_OK;
}

static void plan_roi_and_identity(const kl_resize_attrs *a, const kl_resize_request *r,
                                  int n, const int *dims_of, int rank, const int64_t *dims,
                                  kl_resize_plan *p) {
  bool crop = a->coord == KL_COORD_TF_CROP_AND_RESIZE;
  for (int k = 0; crop && r->n_roi == 2 * n && k < n; k++) {
    p->roi_start[dims_of[k]] = r->roi[k];
    p->roi_end[dims_of[k]] = r->roi[n + k];
  }
  for (int d = 0; d < rank; d++) {
    bool same = p->out[d] == dims[d] || (p->out[d] < 0 && p->scale[d] == 1);
    bool roi = !crop || (p->roi_start[d] == 0 && p->roi_end[d] == 1);
    p->identity[d] = same && p->scale[d] > 0 && close_to(p->scale[d], 1) && roi;
  }
}

kiln_status kl_resize_plan_make(const kl_resize_attrs *a, int rank, const int64_t *dims,
                                const kl_resize_request *r, kl_resize_plan *p, kl_err *e) {
  int dims_of[KL_MAX_RANK], n = a->n_axes >= 0 ? a->n_axes : rank;
  for (int k = 0; k < n; k++) dims_of[k] = a->n_axes >= 0 ? (int)a->axes[k] : k;
  for (int d = 0; d < rank; d++) {
    p->out[d] = dims[d];
    p->scale[d] = 1;
    p->roi_start[d] = 0;
    p->roi_end[d] = 1;
  }
  kiln_status st = check_request(a, r, n, e);
  if (st != KILN_OK) return st;
  if (r->n_scales >= 0) st = plan_scales(r, n, dims_of, dims, p, e);
  else if (r->n_sizes >= 0) st = plan_sizes(a, r, n, dims_of, dims, p, e);
  else
    for (int k = 0; k < n; k++) p->out[dims_of[k]] = -1, p->scale[dims_of[k]] = 0;
  if (st == KILN_OK) plan_roi_and_identity(a, r, n, dims_of, rank, dims, p);
  return st;
}

/* ---- inference ---- */

/* Input i's values into v: *n -1 when absent or empty, -2 when not known. */
static kiln_status read_list(const kl_infer_ctx *c, int i, const char *name, bool integer,
                             double *v, int64_t *iv, int max, int *n) {
  const kl_type *t = kl_infer_in(c, i);
  const void *data = kl_infer_data(c, i);
  int64_t count;
  *n = -1;
  if (!t) return KILN_OK;
  if (t->dtype != KL_UNDEFINED && (integer ? !kl_dtype_is_int(t->dtype)
                                           : !kl_dtype_is_float(t->dtype)))
    return kl_fail(c->e, KILN_ERR_DTYPE, "input %d (%s) is %s, expected %s", i, name,
                   kl_dtype_name(t->dtype), integer ? "int64" : "float");
  kiln_status st = kl_check_rank(c, i, name, 1, 1);
  if (st != KILN_OK) return st;
  *n = -2;
  if (!kl_type_numel(t, &count)) return KILN_OK;
  if (count == 0) *n = -1;
  if (count == 0 || !data) return KILN_OK;
  if (count > max)
    return kl_fail(c->e, KILN_ERR_SHAPE, "input %d (%s) has %lld values, more than %d", i,
                   name, (long long)count, max);
  for (int k = 0; k < (int)count; k++) {
    if (integer) iv[k] = kl_load_i64(data, t->dtype, (size_t)k);
    else v[k] = kl_load_f64(data, t->dtype, (size_t)k);
  }
  *n = (int)count;
  return KILN_OK;
}

static kiln_status read_request(const kl_infer_ctx *c, kl_resize_request *r) {
  kiln_status st = read_list(c, 1, "roi", false, r->roi, NULL, 2 * KL_MAX_RANK, &r->n_roi);
  if (st == KILN_OK)
    st = read_list(c, 2, "scales", false, r->scales, NULL, KL_MAX_RANK, &r->n_scales);
  if (st == KILN_OK)
    st = read_list(c, 3, "sizes", true, NULL, r->sizes, KL_MAX_RANK, &r->n_sizes);
  return st;
}

int kl_infer_resize(kl_infer_ctx *c) {
  kiln_status st = kl_check_required(c, 1);
  if (st == KILN_OK) st = kl_check_dtype(c, 0, "X", RESIZE_DTYPES);
  if (st != KILN_OK) return st;
  const kl_type *x = c->in[0];
  kl_resize_attrs a;
  kl_resize_request r;
  st = kl_resize_attrs_read(c->node, x->rank, &a, c->e);
  if (st == KILN_OK) st = read_request(c, &r);
  kl_type *out = &c->out[0];
  kl_type_unknown(out, x->dtype);
  if (st != KILN_OK || x->rank < 0) return st;
  int64_t dims[KL_MAX_RANK];
  for (int d = 0; d < x->rank; d++) dims[d] = kl_dim_known(x->dims[d]) ? x->dims[d].size : -1;
  kl_resize_plan p;
  st = kl_resize_plan_make(&a, x->rank, dims, &r, &p, c->e);
  if (st != KILN_OK) return st;
  out->rank = x->rank;
  for (int d = 0; d < x->rank; d++)
    out->dims[d] = p.identity[d] ? x->dims[d] : p.out[d] >= 0 ? kl_dim_of(p.out[d])
                                                               : kl_dim_unknown();
  return kl_check_out_numel(c, out);
}
