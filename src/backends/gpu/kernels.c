/* What the GPU op families share (kernels.h): activations of fused nodes, broadcast
 * strides, 1-D launches. */
#include "backends/gpu/kernels.h"
#include "ir/fused.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

bool kl_gpu_fused_act(const kl_node *n, kl_gpu_act *act) {
  *act = (kl_gpu_act){KL_ACT_NONE, 0, 0};
  const char *name = kl_attr_string(n, "activation", NULL);
  if (!name) return true;
  const kl_fused_act *fa = kl_fused_act_find(name);
  if (!fa) return false;
  const float *p = NULL; /* absent (-1 values) when the activation takes none */
  if (fa->n_params > 0 && kl_attr_floats(n, "activation_params", &p) < fa->n_params)
    return false;
  static const struct { const char *name; int code; } map[] = {
      {"Relu", KL_ACT_RELU},       {"LeakyRelu", KL_ACT_LEAKY},       {"Clip", KL_ACT_CLIP},
      {"Sigmoid", KL_ACT_SIGMOID}, {"Tanh", KL_ACT_TANH},             {"HardSigmoid", KL_ACT_HSIGMOID},
      {"HardSwish", KL_ACT_HSWISH}, {"Gelu", KL_ACT_GELU},            {"GeluTanh", KL_ACT_GELU_TANH},
      {"Silu", KL_ACT_SWISH},      {"Mish", KL_ACT_MISH},             {"Elu", KL_ACT_ELU},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    if (strcmp(map[i].name, name) != 0) continue;
    act->code = map[i].code;
    act->a = fa->n_params > 0 ? p[0] : 0;
    act->b = fa->n_params > 1 ? p[1] : 0;
    if (act->code == KL_ACT_SWISH) act->a = 1.0f;
    if (act->code == KL_ACT_CLIP) { /* an absent bound is stored as -inf / inf */
      if (isnan(act->a)) act->a = -INFINITY;
      if (isnan(act->b)) act->b = INFINITY;
    }
    return true;
  }
  return false;
}

void kl_gpu_bcast(kl_cl_bcast *bc, const kl_tensor *out, const kl_tensor *const *x, int n) {
  memset(bc, 0, sizeof *bc);
  bc->rank = out->rank;
  for (int d = 0; d < out->rank; d++) bc->dims[d] = out->dims[d];
  for (int k = 0; k < n && k < 3; k++) {
    int64_t stride = 1;
    for (int d = x[k]->rank - 1; d >= 0; d--) {
      int od = out->rank - x[k]->rank + d;
      bc->s[k][od] = x[k]->dims[d] == 1 ? 0 : stride;
      stride *= x[k]->dims[d];
    }
  }
  if (bc->rank == 0) { /* a scalar: one element, one dim of 1 */
    bc->rank = 1;
    bc->dims[0] = 1;
  }
}

const char *kl_gpu_sized(const char *base, const kl_tensor *t, char *buf) {
  size_t es = kl_dtype_size(t->dtype);
  snprintf(buf, 64, "%s%s", base, es == 1 ? "_b1" : es == 8 ? "_b8" : "");
  return buf;
}

kiln_status kl_gpu_launch1(kl_cl *c, const char *name, int64_t n, const kl_cl_arg *args,
                           int n_args, kl_err *e) {
  size_t local = kl_cl_max_group(c) < 256 ? kl_cl_max_group(c) : 256;
  return kl_cl_launch(c, name, args, n_args, 1, (size_t[]){(size_t)n}, &local, e);
}
