#include "io/checksum.h"

#include <xxhash.h>
// libxxhash's XXH3 entry points that pick the widest vector code the CPU runs (AVX-512, AVX2,
// SSE2) at run time; the plain ones run the SSE2 code the library was built with. Same hashes.
#include <xxh_x86dispatch.h>

namespace leoam {

uint64_t checksum64(const void* data, size_t n_bytes) { return XXH3_64bits_dispatch(data, n_bytes); }

uint64_t checksum64_seeded(const void* data, size_t n_bytes, uint64_t seed) {
  return XXH3_64bits_withSeed_dispatch(data, n_bytes, seed);
}

}  // namespace leoam
