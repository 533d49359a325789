// Writes safetensors files by the format's definition (an 8-byte little-endian header size, a
// JSON header, the data), for the reader's tests and the Hugging Face folders the tests build.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace leoam::testing_util {

// One tensor to write: its header entry's fields and its bytes.
struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// The file's bytes: `header` as given (with the size in front), then `data`.
inline std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i) & 0xff);
  return out + header + data;
}

// The entries end to end, with an optional __metadata__, the header padded with spaces to a
// multiple of 8 bytes as Hugging Face's writer does.
inline std::string safetensors(const std::vector<Entry>& entries, const nlohmann::ordered_json& metadata = nlohmann::ordered_json()) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string data;
  for (const Entry& e : entries) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {data.size(), data.size() + e.bytes.size()}}};
    data += e.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return file_bytes(text, data);
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace leoam::testing_util
