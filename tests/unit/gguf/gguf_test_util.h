// Helpers shared by the GGUF tests: a raw byte builder for hand-made (often corrupt) files and
// fixture paths.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/status.h"

namespace leoam::test {

inline std::string fixture(const std::string& rel) { return std::string(LEOAM_FIXTURES_DIR) + "/" + rel; }

inline bool have_fixture(const std::string& rel) { return std::filesystem::exists(fixture(rel)); }

#define LEOAM_SKIP_WITHOUT_FIXTURE(rel)                                                         \
  do {                                                                                          \
    if (!::leoam::test::have_fixture(rel)) {                                                    \
      GTEST_SKIP() << "fixture " << ::leoam::test::fixture(rel) << " is absent (see ../shared)"; \
    }                                                                                           \
  } while (0)

// Appends GGUF fields byte by byte, so tests can write exactly the (broken) file they mean.
class RawGguf {
 public:
  explicit RawGguf(uint32_t version = 3) : version_(version) {}

  RawGguf& u32(uint32_t v) { return put(&v, 4); }
  RawGguf& u64(uint64_t v) { return put(&v, 8); }
  // A count/length/dim: u32 in v1, u64 otherwise.
  RawGguf& size(uint64_t v) { return version_ == 1 ? u32(static_cast<uint32_t>(v)) : u64(v); }
  RawGguf& str(const std::string& s) {
    size(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& header(uint64_t n_tensors, uint64_t n_kv) {
    u32(0x46554747);
    u32(version_);
    size(n_tensors);
    return size(n_kv);
  }
  RawGguf& kv_u32(const std::string& key, uint32_t v) {
    str(key);
    u32(4);
    return u32(v);
  }
  RawGguf& tensor_info(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    str(name);
    u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) size(d);
    u32(type);
    return u64(offset);
  }
  RawGguf& pad(size_t alignment = 32) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
    return *this;
  }
  RawGguf& zeros(size_t n) {
    bytes.insert(bytes.end(), n, 0);
    return *this;
  }

  std::vector<uint8_t> bytes;

 private:
  RawGguf& put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
    return *this;
  }
  uint32_t version_;
};

inline const Status& status_of(const Status& s) { return s; }
template <typename T>
const Status& status_of(const Result<T>& r) { return r.status(); }

// Asserts a failed Status/Result whose message starts with `name` and contains `needle`.
template <typename R>
::testing::AssertionResult fails_with(const R& r, const std::string& name, const std::string& needle) {
  if (r.is_ok()) return ::testing::AssertionFailure() << "expected an error containing '" << needle << "', got ok";
  const std::string& m = status_of(r).message();
  if (m.rfind(name, 0) != 0) return ::testing::AssertionFailure() << "message does not start with '" << name << "': " << m;
  if (m.find(needle) == std::string::npos) {
    return ::testing::AssertionFailure() << "message lacks '" << needle << "': " << m;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace leoam::test
