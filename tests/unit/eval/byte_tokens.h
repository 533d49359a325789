// A byte tokenizer for the eval task tests: one token per byte (ids = bytes, BOS 256), so token
// counts are byte counts and can be pinned by hand.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace leoam::eval::testing {

constexpr int32_t kByteBos = 256;

inline std::vector<int32_t> byte_tokenize(std::string_view text) {
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

// The bytes of ids [begin, end).
inline std::string bytes_of(const std::vector<int32_t>& ids, size_t begin, size_t end) {
  std::string s;
  for (size_t i = begin; i < end; ++i) s.push_back(static_cast<char>(ids[i]));
  return s;
}

}  // namespace leoam::eval::testing
