/* The "nn" family's kernels (src/backends/gpu/ops_nn.c launches them). */
