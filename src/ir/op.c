#include "ir/ir.h"

#include <string.h>

#define KL_OP(id, name, domain, min_in, max_in, min_out, max_out, infer, kernel, attrs) \
  int kl_infer_##infer(kl_infer_ctx *ctx);                                            \
  int kl_ref_##kernel(kl_kernel_ctx *ctx);
#include "ir/ops.def"
#undef KL_OP

static const kl_op_info op_table[] = {
#define KL_OP(id, name, domain, min_in, max_in, min_out, max_out, infer, kernel, attrs) \
  {name, domain, min_in, max_in, min_out, max_out, kl_infer_##infer, kl_ref_##kernel, attrs},
#include "ir/ops.def"
#undef KL_OP
};

_Static_assert(sizeof op_table / sizeof op_table[0] == KL_OP_COUNT,
               "op table and kl_op enum disagree");

const kl_op_info *kl_op_get(kl_op op) {
  if ((unsigned)op >= KL_OP_COUNT) return NULL;
  return &op_table[op];
}

const char *kl_op_name(kl_op op) {
  const kl_op_info *info = kl_op_get(op);
  return info ? info->name : "?";
}

kl_op kl_op_lookup(const char *domain, const char *name) {
  if (!domain || strcmp(domain, "ai.onnx") == 0) domain = "";
  for (int i = 0; i < KL_OP_COUNT; i++)
    if (strcmp(op_table[i].name, name) == 0 && strcmp(op_table[i].domain, domain) == 0)
      return (kl_op)i;
  return KL_OP_COUNT;
}

bool kl_op_takes_attr(kl_op op, const char *name) {
  const kl_op_info *info = kl_op_get(op);
  size_t len = name ? strlen(name) : 0;
  if (!info || !len) return false;
  for (const char *p = info->attrs; *p;) {
    size_t word = strcspn(p, " ");
    if (word == len && memcmp(p, name, len) == 0) return true;
    p += word;
    p += strspn(p, " ");
  }
  return false;
}
