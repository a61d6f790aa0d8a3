/* The GPU "data" family (kernels/data.cl): being written; no op yet. */
#include "backends/gpu/kernels.h"

const kl_gpu_op kl_gpu_ops_data[] = {{KL_OP_COUNT, NULL, 0, 0, false, NULL, NULL}};
const int kl_gpu_ops_data_count = 0;
