#include "io/aligned_buffer.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace leoam {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;  // x86-64 and arm64 (4 KiB granule)

}  // namespace

void AlignedBuffer::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

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
  // A buffer of huge pages or more is backed by them where the kernel allows (transparent huge
  // pages, "madvise" mode): a gather scratch of tens of MiB that O_DIRECT fills and attention
  // streams through then costs a few TLB entries instead of thousands. On a 2-core VM, full
  // offload's decode over a 32 MiB scratch ran 3x faster (bench/RESULTS.md, issue 6). Advisory:
  // where refused, the buffer keeps small pages.
  const bool huge = n_alloc >= kHugePageBytes;
  const size_t alignment = huge ? kHugePageBytes : kDirectIoAlignment;
  const size_t n_reserved = align_up(n_alloc, alignment);
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(alignment, n_reserved));
  if (p == nullptr) return io_error("out of memory allocating " + std::to_string(n_reserved) + " bytes");
  if (huge) (void)::madvise(p, n_reserved, MADV_HUGEPAGE);
  std::memset(p, 0, n_alloc);
  buffer.data_.reset(p);
  buffer.size_ = n_alloc;
  return buffer;
}

}  // namespace leoam
