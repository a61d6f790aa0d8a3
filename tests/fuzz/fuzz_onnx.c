/* libFuzzer target: the ONNX loader and, for small models, one run.
 *
 * The input is a model file. kiln_model_load_memory imports, verifies, infers and
 * optimizes it, at an optimization level 0..3 taken from a hash of the file, with the
 * verifier on after every pass. When it loads and its weights are small, a session runs
 * it once on random inputs drawn from a generator seeded by the same hash, so every
 * finding replays exactly. Symbolic dims get sizes 1..3 (one size per symbol name); a
 * model whose fixed input dims would exceed a small budget is only loaded, not run.
 * Limits keep every run small: 64 MiB per tensor at load (as in a real deployment,
 * scaled down), 1 MiB per tensor and 16 MiB of buffers at run time, one thread.
 *
 * Besides the sanitizers, the oracle is KILN_ERR_INTERNAL: kiln says that status means
 * a bug in kiln, so the target traps on it. Every other failure is a correct refusal.
 * The loading and the run are in fuzz_model.c, shared with fuzz_torchscript.c. */
#include "fuzz_model.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_model_check("fuzz_onnx", data, size, fuzz_hash_bytes(data, size));
  return 0;
}
