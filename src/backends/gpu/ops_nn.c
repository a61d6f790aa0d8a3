/* The GPU "nn" family (kernels/nn.cl): being written; no op yet. */
#include "backends/gpu/kernels.h"

const kl_gpu_op kl_gpu_ops_nn[] = {{KL_OP_COUNT, NULL, 0, 0, false, NULL, NULL}};
const int kl_gpu_ops_nn_count = 0;
