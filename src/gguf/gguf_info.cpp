#include "gguf/gguf_info.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/ggml_type.h"
#include "gguf/gguf_file.h"

namespace leoam {

namespace {

std::string value_type_string(const GgufValue& v) {
  const std::string elem = gguf_value_type_name(static_cast<uint32_t>(v.elem_type()));
  return v.is_array() ? "array[" + elem + "]" : elem;
}

std::string dims_string(const std::vector<int64_t>& ne) {
  std::string s;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i != 0) s += " x ";
    s += std::to_string(ne[i]);
  }
  return s.empty() ? "scalar" : s;
}

// "1.23 MiB": totals are easier to read scaled; the exact count is printed beside it.
std::string human_bytes(uint64_t n) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, kUnits[u]);
  return buf;
}

}  // namespace

void print_gguf_info(const GgufFile& file, std::ostream& out) {
  // 6: array items shown per metadata line; enough to recognise a vocab without flooding.
  constexpr size_t kMaxArrayItems = 6;

  out << "file: " << file.path() << "\n";
  out << "size: " << file.file_size() << " bytes\n";
  out << "version: " << file.version() << "\n";
  out << "alignment: " << file.alignment() << "\n";
  out << "data offset: " << file.data_offset() << "\n";
  out << "tensors: " << file.tensors().size() << "\n";
  out << "metadata keys: " << file.metadata().size() << "\n";

  out << "\nmetadata:\n";
  size_t key_width = 0;
  for (const auto& [key, value] : file.metadata()) key_width = std::max(key_width, key.size());
  key_width = std::min<size_t>(key_width, 48);
  for (const auto& [key, value] : file.metadata()) {
    std::string k = key;
    if (k.size() < key_width) k.append(key_width - k.size(), ' ');
    std::string type = value_type_string(value);
    if (type.size() < 14) type.append(14 - type.size(), ' ');
    out << "  " << k << "  " << type << "  " << value.to_display_string(kMaxArrayItems) << "\n";
  }

  out << "\ntensors:\n";
  size_t name_width = 4;
  for (const GgufTensorInfo& t : file.tensors()) name_width = std::max(name_width, t.name.size());
  name_width = std::min<size_t>(name_width, 64);
  char line[512];
  std::snprintf(line, sizeof(line), "  %-*s  %-8s  %-24s  %12s  %12s\n", static_cast<int>(name_width), "name", "type",
                "dims", "offset", "bytes");
  out << line;
  uint64_t n_params = 0;
  uint64_t n_bytes = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    std::snprintf(line, sizeof(line), "  %-*s  %-8s  %-24s  %12llu  %12llu\n", static_cast<int>(name_width),
                  t.name.c_str(), ggml_type_name(t.type_id).c_str(), dims_string(t.ne).c_str(),
                  static_cast<unsigned long long>(t.offset), static_cast<unsigned long long>(t.n_bytes));
    out << line;
    n_params += static_cast<uint64_t>(t.n_elements());
    n_bytes += t.n_bytes;
  }
  out << "\ntotal parameters: " << n_params << "\n";
  out << "total tensor bytes: " << n_bytes << " (" << human_bytes(n_bytes) << ")\n";
}

}  // namespace leoam
