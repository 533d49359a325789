#include "core/ggml_type.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace leoam {
namespace {

// Names of every ggml type id, so that an unsupported type can be named in an error.
constexpr std::array<std::string_view, 40> kAllNames = {
    "F32",     "F16",    "Q4_0",  "Q4_1",   "Q4_2",  "Q4_3",   "Q5_0",   "Q5_1",
    "Q8_0",    "Q8_1",   "Q2_K",  "Q3_K",   "Q4_K",  "Q5_K",   "Q6_K",   "Q8_K",
    "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",  "IQ4_XS",
    "I8",      "I16",    "I32",   "I64",    "F64",   "IQ1_M",  "BF16",   "Q4_0_4_4",
    "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};

struct Geometry {
  uint32_t id;
  int64_t block_size;
  size_t type_size;
  bool supported;
};

// Block sizes and bytes per block, from ggml's type table.
constexpr std::array<Geometry, 22> kGeometry = {{
    {0, 1, 4, true},                // F32
    {1, 1, 2, true},                // F16
    {2, 32, 18, true},              // Q4_0: f16 d, 16 bytes of nibbles
    {3, 32, 20, false},             // Q4_1
    {6, 32, 22, false},             // Q5_0
    {7, 32, 24, false},             // Q5_1
    {8, 32, 34, true},              // Q8_0: f16 d, 32 int8
    {9, 32, 36, false},             // Q8_1
    {10, kQK_K, 84, false},         // Q2_K
    {11, kQK_K, 110, false},        // Q3_K
    {12, kQK_K, 144, true},         // Q4_K: f16 d, f16 dmin, 12 scale bytes, 128 nibble bytes
    {13, kQK_K, 176, false},        // Q5_K
    {14, kQK_K, 210, true},         // Q6_K: 128 ql, 64 qh, 16 int8 scales, f16 d
    {15, kQK_K, 292, false},        // Q8_K
    {20, 32, 18, false},            // IQ4_NL
    {23, kQK_K, 136, false},        // IQ4_XS
    {24, 1, 1, false},              // I8
    {25, 1, 2, false},              // I16
    {26, 1, 4, false},              // I32
    {27, 1, 8, false},              // I64
    {28, 1, 8, false},              // F64
    {30, 1, 2, true},               // BF16
}};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id) {
  for (const Geometry& g : kGeometry) {
    if (g.id == type_id) return GgmlTypeTraits{kAllNames[type_id], g.block_size, g.type_size, g.supported};
  }
  return std::nullopt;
}

bool ggml_type_supported(uint32_t type_id) {
  const auto t = ggml_type_traits(type_id);
  return t && t->supported;
}

std::string ggml_type_name(uint32_t type_id) {
  if (type_id < kAllNames.size()) return std::string(kAllNames[type_id]);
  return "type " + std::to_string(type_id);
}

std::string_view supported_types_list() { return "F32 F16 BF16 Q8_0 Q4_0 Q4_K Q6_K"; }

std::string supported_type_names() {
  std::string s(supported_types_list());
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::optional<GgmlType> supported_type_by_name(std::string_view name) {
  const auto same = [](char a, char b) {
    return std::toupper(static_cast<unsigned char>(a)) == std::toupper(static_cast<unsigned char>(b));
  };
  for (uint32_t id = 0; id < kAllNames.size(); ++id) {
    if (ggml_type_supported(id) && std::ranges::equal(kAllNames[id], name, same)) return static_cast<GgmlType>(id);
  }
  return std::nullopt;
}

int64_t ggml_block_size(GgmlType type) { return ggml_type_traits(static_cast<uint32_t>(type))->block_size; }

size_t ggml_row_size(GgmlType type, int64_t n) {
  const auto t = *ggml_type_traits(static_cast<uint32_t>(type));
  return static_cast<size_t>(n / t.block_size) * t.type_size;
}

}  // namespace leoam
