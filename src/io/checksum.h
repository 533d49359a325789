// Checksums of data written to disk: XXH3-64 (libxxhash), fast enough to verify every chunk on
// every read (tens of GB/s, far above any SSD).
#pragma once

#include <cstddef>
#include <cstdint>

namespace leoam {

uint64_t checksum64(const void* data, size_t n_bytes);
// Continues a checksum over several pieces: checksum64_seeded(b, n, checksum64(a, m)) differs from
// checksum64 of the concatenation but is just as sensitive to every bit.
uint64_t checksum64_seeded(const void* data, size_t n_bytes, uint64_t seed);

}  // namespace leoam
