/* The "data" family's kernels (src/backends/gpu/ops_data.c launches them). */
