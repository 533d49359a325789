// A heap buffer aligned for O_DIRECT and SIMD (kDirectIoAlignment), zero-filled, on transparent
// huge pages where it spans one and the kernel allows. Move-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/huge_pages.h"
#include "core/status.h"
#include "io/file.h"  // kDirectIoAlignment

namespace leoam {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // n_bytes is rounded up to the alignment. Fails (kIoError, "out of memory ...") when the
  // allocation fails.
  static Result<AlignedBuffer> allocate(size_t n_bytes);

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  std::unique_ptr<uint8_t, HugeAwareFree> data_;
  size_t size_ = 0;
};

}  // namespace leoam
