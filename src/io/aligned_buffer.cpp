#include "io/aligned_buffer.h"

#include <cstdint>
#include <cstring>

namespace leoam {

Result<AlignedBuffer> AlignedBuffer::allocate(size_t n_bytes) {
  AlignedBuffer buffer;
  if (n_bytes == 0) return buffer;
  // Rounding up would wrap around to a tiny size.
  if (n_bytes > SIZE_MAX - kDirectIoAlignment) {
    return io_error("out of memory allocating " + std::to_string(n_bytes) + " bytes");
  }
  // std::aligned_alloc needs a size that is a multiple of the alignment; O_DIRECT lengths are
  // too, so callers can read whole blocks into the rounded-up tail.
  const size_t n_alloc = align_up(n_bytes, kDirectIoAlignment);
  // Huge pages where it spans one (core/huge_pages.h): a gather scratch of tens of MiB that
  // O_DIRECT fills and attention streams through then takes a few TLB entries instead of
  // thousands, which a decode under full offload reads far faster (docs/cpu.md#memory).
  auto* p = static_cast<uint8_t*>(allocate_huge_aware(n_alloc, kDirectIoAlignment));
  if (p == nullptr) return io_error("out of memory allocating " + std::to_string(n_alloc) + " bytes");
  std::memset(p, 0, n_alloc);
  buffer.data_.reset(p);
  buffer.size_ = n_alloc;
  return buffer;
}

}  // namespace leoam
