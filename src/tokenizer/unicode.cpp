#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

namespace leoam::unicode {

std::string nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return std::string(text);
  }
  const std::string valid = sanitize_utf8(text);
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* normalizer = unorm2_getNFCInstance(&status);
  // UTF-8 -> UTF-16 -> NFC -> UTF-8: ICU's C API normalizes UTF-16. NFC never more than triples
  // the UTF-16 length (Unicode's stated bound), so one pass with that capacity suffices.
  std::u16string utf16(valid.size(), u'\0');
  int32_t n16 = 0;
  u_strFromUTF8(reinterpret_cast<UChar*>(utf16.data()), static_cast<int32_t>(utf16.size()), &n16, valid.data(),
                static_cast<int32_t>(valid.size()), &status);
  std::u16string normalized(3 * static_cast<size_t>(n16) + 1, u'\0');
  const int32_t n_norm = unorm2_normalize(normalizer, reinterpret_cast<const UChar*>(utf16.data()), n16,
                                          reinterpret_cast<UChar*>(normalized.data()),
                                          static_cast<int32_t>(normalized.size()), &status);
  std::string out(4 * static_cast<size_t>(n_norm) + 1, '\0');
  int32_t n8 = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &n8, reinterpret_cast<const UChar*>(normalized.data()),
              n_norm, &status);
  if (U_FAILURE(status)) return valid;  // cannot happen with these capacities; keep the text whole
  out.resize(static_cast<size_t>(n8));
  return out;
}

size_t utf8_len(uint8_t lead) {
  // Indexed by the high nibble: 0xxx -> 1, 10xx (continuation) -> 1, 110x -> 2, 1110 -> 3, 1111 -> 4.
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

uint32_t decode_utf8(std::string_view text, size_t* pos) {
  const size_t i = *pos;
  const auto b0 = static_cast<uint8_t>(text[i]);
  const size_t len = utf8_len(b0);
  if (len == 1) {
    *pos = i + 1;
    return b0 < 0x80 ? b0 : 0xFFFD;
  }
  if (i + len > text.size()) {
    *pos = i + 1;
    return 0xFFFD;
  }
  uint32_t cp = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(text[i + k]);
    if ((b & 0xC0) != 0x80) {
      *pos = i + 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *pos = i + len;
  return cp;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t valid_utf8_len(std::string_view text, size_t pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) return 1;
  if (b0 < 0xC2 || b0 > 0xF4) return 0;  // continuation byte, overlong 2-byte lead, or beyond U+10FFFF
  const size_t len = utf8_len(b0);
  if (pos + len > text.size()) return 0;
  size_t end = pos;
  const uint32_t cp = decode_utf8(text, &end);
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (end - pos != len || cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

bool is_valid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = valid_utf8_len(text, pos);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = valid_utf8_len(text, pos);
    if (len == 0) {
      append_utf8(0xFFFD, &out);
      ++pos;
    } else {
      out.append(text.substr(pos, len));
      pos += len;
    }
  }
  return out;
}

namespace {

bool maps_to_itself(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct ByteTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  ByteTables() {
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = maps_to_itself(b) ? static_cast<uint32_t>(b) : next++;
      append_utf8(to_cp[b], &to_utf8[b]);
    }
  }
};

// Immutable after construction (thread-safe static init): not mutable global state.
const ByteTables& byte_tables() {
  static const ByteTables kTables;
  return kTables;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return byte_tables().to_cp[b]; }

int codepoint_to_byte(uint32_t cp) {
  if (cp < 0x100) return maps_to_itself(static_cast<int>(cp)) ? static_cast<int>(cp) : -1;
  if (cp >= 0x100 && cp < 0x100 + 68) {
    // The n-th byte that does not map to itself maps to U+0100 + n.
    uint32_t n = cp - 0x100;
    for (int b = 0; b < 256; ++b) {
      if (!maps_to_itself(b) && n-- == 0) return b;
    }
  }
  return -1;
}

const std::string& byte_to_utf8(uint8_t b) { return byte_tables().to_utf8[b]; }

std::string bytes_to_bpe_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_to_utf8(static_cast<uint8_t>(c));
  return out;
}

std::string bpe_text_to_bytes(std::string_view text) {
  // 68: the number of bytes that GPT-2's table moves to U+0100 and up.
  static const std::array<int16_t, 0x100 + 68> kInverse = [] {
    std::array<int16_t, 0x100 + 68> inv{};
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[byte_to_codepoint(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
    return inv;
  }();
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const uint32_t cp = decode_utf8(text, &pos);
    if (cp < kInverse.size() && kInverse[cp] >= 0) {
      out.push_back(static_cast<char>(kInverse[cp]));
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
  return out;
}

}  // namespace leoam::unicode
