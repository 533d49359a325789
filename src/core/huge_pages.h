// Memory that transparent huge pages can back: a block of 1 MiB or more is rounded up to whole
// 2 MiB huge pages, starts on one and is madvised MADV_HUGEPAGE (the kernel's "madvise" mode
// grants them only so). Touching it then faults once per 2 MiB instead of once per 4 KiB page,
// and streaming through it takes a few TLB entries. Both matter most in a virtual machine, where
// a page fault costs microseconds (docs/cpu.md#memory). Smaller blocks are plain heap memory.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace leoam {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;  // x86-64 and arm64 with 4 KiB pages

// n_bytes (> 0) aligned to `alignment` (a power of two that divides kHugePageBytes), on huge
// pages from kHugePageBytes / 2 on; nullptr when out of memory. Not zeroed. Free with std::free.
void* allocate_huge_aware(size_t n_bytes, size_t alignment);

// Frees a block of allocate_huge_aware, as the deleter of a std::unique_ptr.
struct HugeAwareFree {
  void operator()(void* p) const { std::free(p); }
};

// A standard allocator over allocate_huge_aware, for the large arrays that the selection path
// grows or fills anew (chunk-tree abstracts, abstract reads).
template <class T>
struct HugePageAllocator {
  using value_type = T;

  HugePageAllocator() = default;
  template <class U>
  explicit HugePageAllocator(const HugePageAllocator<U>& /*other*/) {}

  T* allocate(size_t n) {
    if (n > size_t{1} << 40) throw std::bad_array_new_length();
    constexpr size_t kAlign = alignof(T) > alignof(std::max_align_t) ? alignof(T) : alignof(std::max_align_t);
    void* p = allocate_huge_aware(n * sizeof(T), kAlign);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t /*n*/) { std::free(p); }

  template <class U>
  bool operator==(const HugePageAllocator<U>& /*other*/) const {
    return true;
  }
};

}  // namespace leoam
