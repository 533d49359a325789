#include "core/huge_pages.h"

#include <sys/mman.h>

namespace leoam {

void* allocate_huge_aware(size_t n_bytes, size_t alignment) {
  // From half a huge page on, rounded up to whole ones: at most half of the last one is spare.
  const bool huge = n_bytes >= kHugePageBytes / 2;
  const size_t a = huge ? kHugePageBytes : alignment;
  // std::aligned_alloc needs a size that is a multiple of the alignment.
  const size_t n_reserved = (n_bytes + a - 1) / a * a;
  void* p = std::aligned_alloc(a, n_reserved);
  // Advisory: where the kernel refuses, the block keeps small pages.
  if (p != nullptr && huge) (void)::madvise(p, n_reserved, MADV_HUGEPAGE);
  return p;
}

}  // namespace leoam
