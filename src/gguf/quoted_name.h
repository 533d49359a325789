// A name read from an untrusted file, quoted for an error message: control bytes shown as '?',
// cut after 80 characters, so that a corrupt name keeps the message printable and short.
#pragma once

#include <string>
#include <string_view>

namespace leoam {

inline std::string quoted_name(std::string_view s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 80) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(s[i]);
    out += (u < 0x20 || u == 0x7f) ? '?' : s[i];
  }
  return out + "'";
}

}  // namespace leoam
