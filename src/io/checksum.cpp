#include "io/checksum.h"

#include <xxhash.h>

namespace leoam {

uint64_t checksum64(const void* data, size_t n_bytes) { return XXH3_64bits(data, n_bytes); }

uint64_t checksum64_seeded(const void* data, size_t n_bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(data, n_bytes, seed);
}

}  // namespace leoam
