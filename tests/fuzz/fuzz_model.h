/* Shared by the model targets (fuzz_onnx.c, fuzz_torchscript.c): see fuzz_model.c. */
#ifndef KILN_FUZZ_MODEL_H
#define KILN_FUZZ_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a of the bytes: the seed of everything random about one input. */
uint64_t fuzz_hash_bytes(const uint8_t *data, size_t size);

/* kiln_model_load_memory(data, size) with max_tensor_bytes 64 MiB, the verifier after
 * every pass and the optimization level seed >> 62; when it loads and holds at most
 * 4 MiB of weights, a session (one thread, 1 MiB per tensor, 16 MiB of buffers beyond
 * the weights), random inputs drawn from `seed` (symbolic dims 1..3, at most 4096
 * elements per input, else no run), one run, and a read of every output byte. Traps
 * on KILN_ERR_INTERNAL, naming `target`. */
void fuzz_model_check(const char *target, const void *data, size_t size, uint64_t seed);

#endif
