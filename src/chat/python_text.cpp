#include "chat/python_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace leoam::chat::py {

namespace {

bool is_ascii_upper(uint32_t cp) { return cp >= 'A' && cp <= 'Z'; }
bool is_ascii_lower(uint32_t cp) { return cp >= 'a' && cp <= 'z'; }
char ascii_upper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }
char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Code points Python's str.isprintable() rejects and repr() escapes: controls, separators other
// than ' ', and the common format characters (unassigned code points are not covered).
bool is_unprintable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) return true;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f)) return true;
  if ((cp >= 0x205f && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206f) || cp == 0x3000) return true;
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61c || cp == 0x6dd || cp == 0x70f || cp == 0x180e) return true;
  if ((cp >= 0xd800 && cp <= 0xf8ff) || cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb)) return true;
  return cp == 0xe0001 || (cp >= 0xe0020 && cp <= 0xe007f) || cp >= 0xf0000;
}

// The code points of `chars`, for strip(chars).
std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> cps;
  for (size_t i = 0, n = 0; i < s.size(); i += n) cps.push_back(decode_code_point(s, i, &n));
  return cps;
}

bool is_line_break(uint32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 ||
         cp == 0x2028 || cp == 0x2029;
}

}  // namespace

uint32_t decode_code_point(std::string_view s, size_t i, size_t* n_bytes) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t n = 1;
  uint32_t cp = b0;
  if (b0 >= 0xc0 && b0 < 0xe0) {
    n = 2;
    cp = b0 & 0x1f;
  } else if (b0 >= 0xe0 && b0 < 0xf0) {
    n = 3;
    cp = b0 & 0x0f;
  } else if (b0 >= 0xf0 && b0 < 0xf8) {
    n = 4;
    cp = b0 & 0x07;
  }
  if (n > 1) {
    if (i + n > s.size()) n = 1;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xc0) != 0x80) {
        n = 1;
        break;
      }
      cp = (cp << 6) | (b & 0x3f);
    }
    if (n == 1) cp = b0;
  }
  *n_bytes = n;
  return cp;
}

void append_code_point(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    offsets.push_back(i);
    decode_code_point(s, i, &n);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t count_code_points(std::string_view s) {
  size_t count = 0;
  for (size_t i = 0, n = 0; i < s.size(); i += n, ++count) decode_code_point(s, i, &n);
  return count;
}

bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
         cp == 0x3000;
}

namespace {

bool is_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }
bool is_alpha(uint32_t cp) { return is_ascii_upper(cp) || is_ascii_lower(cp) || (cp >= 0x80 && !is_space(cp)); }
bool is_alnum(uint32_t cp) { return is_alpha(cp) || is_digit(cp); }

template <bool (*kPredicate)(uint32_t)>
bool all_code_points(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    if (!kPredicate(decode_code_point(s, i, &n))) return false;
  }
  return true;
}

// islower / isupper: some cased character, and none of the other case.
bool has_case(std::string_view s, bool upper) {
  bool cased = false;
  for (char c : s) {
    const auto cp = static_cast<unsigned char>(c);
    if (upper ? is_ascii_lower(cp) : is_ascii_upper(cp)) return false;
    cased = cased || is_ascii_upper(cp) || is_ascii_lower(cp);
  }
  return cased;
}

}  // namespace

bool is_space_text(std::string_view s) { return all_code_points<is_space>(s); }
bool is_digit_text(std::string_view s) { return all_code_points<is_digit>(s); }
bool is_alpha_text(std::string_view s) { return all_code_points<is_alpha>(s); }
bool is_alnum_text(std::string_view s) { return all_code_points<is_alnum>(s); }
bool is_lower_text(std::string_view s) { return has_case(s, false); }
bool is_upper_text(std::string_view s) { return has_case(s, true); }

std::string_view strip(std::string_view s, const std::optional<std::string_view>& chars, bool left, bool right) {
  const std::vector<uint32_t> set = chars ? code_points(*chars) : std::vector<uint32_t>{};
  auto strippable = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_space(cp);
  };
  const std::vector<size_t> offsets = code_point_offsets(s);
  size_t begin = 0;
  size_t end = offsets.size() - 1;  // in code points
  size_t n = 0;
  if (left) {
    while (begin < end && strippable(decode_code_point(s, offsets[begin], &n))) ++begin;
  }
  if (right) {
    while (end > begin && strippable(decode_code_point(s, offsets[end - 1], &n))) --end;
  }
  return s.substr(offsets[begin], offsets[end] - offsets[begin]);
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string_view>& sep, int64_t max_split,
                               bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    // The caller rejects an empty separator, as Python does.
    std::string_view rest = s;
    while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
      const size_t at = from_right ? rest.rfind(*sep) : rest.find(*sep);
      if (at == std::string_view::npos) break;
      if (from_right) {
        parts.emplace_back(rest.substr(at + sep->size()));
        rest = rest.substr(0, at);
      } else {
        parts.emplace_back(rest.substr(0, at));
        rest = rest.substr(at + sep->size());
      }
    }
    parts.emplace_back(rest);
    if (from_right) std::reverse(parts.begin(), parts.end());
    return parts;
  }
  // Whitespace runs separate words; once the limit is hit, the rest (whitespace kept at its far end)
  // is one part, as in CPython.
  const std::vector<size_t> offsets = code_point_offsets(s);
  const size_t n_cps = offsets.size() - 1;
  size_t n = 0;
  auto space_at = [&](size_t k) { return is_space(decode_code_point(s, offsets[k], &n)); };
  if (!from_right) {
    size_t k = 0;
    while (true) {
      while (k < n_cps && space_at(k)) ++k;
      if (k == n_cps) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        parts.emplace_back(s.substr(offsets[k]));
        break;
      }
      const size_t start = k;
      while (k < n_cps && !space_at(k)) ++k;
      parts.emplace_back(s.substr(offsets[start], offsets[k] - offsets[start]));
    }
    return parts;
  }
  size_t k = n_cps;
  while (true) {
    while (k > 0 && space_at(k - 1)) --k;
    if (k == 0) break;
    if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
      parts.emplace_back(s.substr(0, offsets[k]));
      break;
    }
    const size_t end = k;
    while (k > 0 && !space_at(k - 1)) --k;
    parts.emplace_back(s.substr(offsets[k], offsets[end] - offsets[k]));
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> split_lines(std::string_view s) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    const uint32_t cp = decode_code_point(s, i, &n);
    if (!is_line_break(cp)) continue;
    lines.emplace_back(s.substr(start, i - start));
    if (cp == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++n;
    start = i + n;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

std::string replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old_text.empty()) {  // Python inserts new_text around every code point
    const std::vector<size_t> offsets = code_point_offsets(s);
    for (size_t k = 0; k + 1 < offsets.size(); ++k) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      out += s.substr(offsets[k], offsets[k + 1] - offsets[k]);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old_text, pos);
    if (at == std::string_view::npos) break;
    out += s.substr(pos, at - pos);
    out += new_text;
    pos = at + old_text.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

int64_t count_occurrences(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(count_code_points(s)) + 1;
  int64_t count = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++count;
  return count;
}

std::string to_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_upper(c);
  return out;
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out = to_lower(s);
  if (!out.empty()) out[0] = ascii_upper(out[0]);
  return out;
}

std::string title(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    const auto cp = static_cast<unsigned char>(c);
    const bool cased = is_ascii_upper(cp) || is_ascii_lower(cp);
    if (cased) c = previous_cased ? ascii_lower(c) : ascii_upper(c);
    previous_cased = cased;
  }
  return out;
}

std::string repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    const uint32_t cp = decode_code_point(s, i, &n);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (is_unprintable(cp)) {
      char buf[16];
      const char* format = cp < 0x100 ? "\\x%02x" : (cp < 0x10000 ? "\\u%04x" : "\\U%08x");
      std::snprintf(buf, sizeof(buf), format, cp);
      out += buf;
    } else {
      out += s.substr(i, n);
    }
  }
  out += quote;
  return out;
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then Python's layout: positional for 1e-4 <= |d| < 1e16, else
  // scientific with a signed two-digit (or longer) exponent.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp_buf;
  }
  std::string out = sign;
  if (exponent < 0) {
    out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    const auto n_int = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= n_int) {
      out += digits + std::string(n_int - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, n_int) + "." + digits.substr(n_int);
    }
  }
  return out;
}

}  // namespace leoam::chat::py
