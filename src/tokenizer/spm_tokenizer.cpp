#include "tokenizer/spm_tokenizer.h"

#include "tokenizer/symbol_merge.h"
#include "tokenizer/unicode.h"

namespace leoam {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

}  // namespace

SpmTokenizer::SpmTokenizer(Vocab vocab) : VocabTokenizer(std::move(vocab)) {
  static const char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', '\0'};
    int32_t id = vocab_.find(name);
    if (id < 0) id = vocab_.find(std::string(1, static_cast<char>(b)));
    if (id < 0) id = vocab_.unk_id;
    byte_tokens_[static_cast<size_t>(b)] = id;
  }
  isolated_.fill(true);
  for (int32_t id = 0; id < vocab_.n_tokens(); ++id) {
    const std::string& text = vocab_.token(id).text;
    if (text.size() < 2) continue;
    for (char c : text) {
      if (static_cast<uint8_t>(c) < 0x80) isolated_[static_cast<size_t>(c)] = false;
    }
  }
  build_pieces();
}

std::string SpmTokenizer::decode_normal_text(const std::string& text) const {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    if (text.compare(pos, kSpaceMark.size(), kSpaceMark) == 0) {
      out.push_back(' ');
      pos += kSpaceMark.size();
    } else {
      out.push_back(text[pos++]);
    }
  }
  return out;
}

void SpmTokenizer::encode_text(std::string_view text, bool after_special, std::vector<int32_t>* out) const {
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 2 + 3);
  if (vocab_.add_space_prefix && after_special) escaped += kSpaceMark;
  for (char c : text) {
    if (c == ' ') {
      escaped += kSpaceMark;
    } else {
      escaped.push_back(c);
    }
  }
  encode_escaped(escaped, out);
}

void SpmTokenizer::encode_escaped(std::string_view text, std::vector<int32_t>* out) const {
  // Walk the symbols as encode_segment() will cut them; a one-byte symbol that is isolated can
  // join no pair, so the segments on either side of it merge independently.
  size_t segment_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const auto c = static_cast<uint8_t>(text[pos]);
    const size_t len = std::min(unicode::utf8_len(c), text.size() - pos);
    if (len == 1 && c < 0x80 && isolated_[c]) {
      encode_segment(text.substr(segment_start, pos - segment_start), out);
      encode_segment(text.substr(pos, 1), out);
      segment_start = pos + 1;
    }
    pos += len;
  }
  encode_segment(text.substr(segment_start), out);
}

void SpmTokenizer::encode_segment(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  auto priority = [this](std::string_view left, std::string_view right) -> std::optional<float> {
    const int32_t id = vocab_.find(std::string_view(left.data(), left.size() + right.size()));
    if (id < 0) return std::nullopt;
    return vocab_.token(id).score;
  };
  merge_symbols(text, priority, [&](std::string_view piece) {
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
    // Merged symbols are always tokens, so this is a single character missing from the vocab.
    for (char c : piece) {
      const int32_t byte_id = byte_tokens_[static_cast<uint8_t>(c)];
      if (byte_id >= 0) out->push_back(byte_id);
    }
  });
}

}  // namespace leoam
