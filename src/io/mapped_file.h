// A read-only memory mapping of a whole file. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace leoam {

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to data() == nullptr, size() == 0.
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Drops the whole pages of [p, p + n) (a range of this mapping) from the process, as a hint:
  // a later read faults them back in from the file, so the bytes read stay the same. For data
  // copied out at load, so that the copy is not resident twice.
  void release(const uint8_t* p, size_t n) const;

 private:
  MappedFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const uint8_t* data_;
  size_t size_;
};

}  // namespace leoam
