#include "tokenizer/special_tokens.h"

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace leoam {

namespace {

// The whitespace that lstrip/rstrip remove from GGUF files: C isspace() in the "C" locale, as
// llama.cpp uses.
bool is_c_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

// What JavaScript's trim() removes (transformers.js strips added tokens with it). Hugging Face's
// Rust tokenizers (regex \s, Unicode White_Space) differ only in U+0085, which they strip, and U+FEFF.
bool is_js_space(uint32_t cp) {
  return (cp < 0x80 && is_c_space(static_cast<char>(cp))) || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000 || cp == 0xFEFF;
}

// Bytes of the valid code point text[pos, pos + len) if it is JavaScript whitespace, else 0.
size_t js_space_len(std::string_view text, size_t pos, size_t len) {
  if (len == 0 || unicode::valid_utf8_len(text, pos) != len) return 0;
  size_t end = pos;
  return is_js_space(unicode::decode_utf8(text, &end)) ? len : 0;
}

// Bytes of the whitespace character that ends `text`, 0 when there is none.
size_t trailing_space_len(std::string_view text, bool unicode_space) {
  if (text.empty()) return 0;
  if (!unicode_space) return is_c_space(text.back()) ? 1 : 0;
  // JavaScript's whitespace is 1 to 3 bytes in UTF-8; at most one length gives a valid sequence.
  for (size_t len = 1; len <= 3 && len <= text.size(); ++len) {
    if (size_t n = js_space_len(text, text.size() - len, len)) return n;
  }
  return 0;
}

// Bytes of the whitespace character that starts `text`, 0 when there is none.
size_t leading_space_len(std::string_view text, bool unicode_space) {
  if (text.empty()) return 0;
  if (!unicode_space) return is_c_space(text.front()) ? 1 : 0;
  return js_space_len(text, 0, unicode::valid_utf8_len(text, 0));
}

}  // namespace

std::vector<TextFragment> partition_special_tokens(const Vocab& vocab, std::string_view text, bool parse_special) {
  std::vector<TextFragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, text});

  std::vector<TextFragment> next;
  for (int32_t id : vocab.special_tokens_by_length()) {
    const TokenData& data = vocab.token(id);
    if (data.text.empty()) continue;
    if (!parse_special && (data.attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string_view needle = data.text;

    next.clear();
    bool changed = false;
    for (const TextFragment& fragment : fragments) {
      if (fragment.is_token()) {
        next.push_back(fragment);
        continue;
      }
      std::string_view rest = fragment.text;
      size_t match = rest.find(needle);
      if (match == std::string_view::npos) {
        next.push_back(fragment);
        continue;
      }
      changed = true;
      while (match != std::string_view::npos) {
        std::string_view left = rest.substr(0, match);
        if (data.attr & kAttrLstrip) {
          while (size_t n = trailing_space_len(left, vocab.strip_unicode_space)) left.remove_suffix(n);
        }
        if (!left.empty()) next.push_back({-1, left});
        next.push_back({id, {}});
        rest = rest.substr(match + needle.size());
        if (data.attr & kAttrRstrip) {
          while (size_t n = leading_space_len(rest, vocab.strip_unicode_space)) rest.remove_prefix(n);
        }
        match = rest.find(needle);
      }
      if (!rest.empty()) next.push_back({-1, rest});
    }
    if (changed) fragments.swap(next);
  }
  return fragments;
}

}  // namespace leoam
