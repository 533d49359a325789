#include "engine/utf8_stream.h"

namespace leoam {
namespace {

// Length of the sequence a lead byte starts: 1 for ASCII and for bytes that cannot lead
// (continuation bytes, 0xF8..0xFF), which are passed through.
size_t sequence_length(unsigned char lead) {
  if (lead >= 0xC0 && lead < 0xE0) return 2;
  if (lead >= 0xE0 && lead < 0xF0) return 3;
  if (lead >= 0xF0 && lead < 0xF8) return 4;
  return 1;
}

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

}  // namespace

std::string Utf8Stream::push(std::string_view piece) {
  std::string text = std::move(pending_);
  pending_.clear();
  text.append(piece);
  // Look for the last lead byte among the final 3 bytes: if its sequence is longer than what
  // follows it, and what follows is all continuation bytes, hold it back.
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const auto b = static_cast<unsigned char>(text[i]);
    if (is_continuation(b)) continue;
    if (sequence_length(b) > back) {
      pending_ = text.substr(i);
      text.resize(i);
    }
    break;
  }
  return text;
}

std::string Utf8Stream::flush() {
  std::string text = std::move(pending_);
  pending_.clear();
  return text;
}

}  // namespace leoam
