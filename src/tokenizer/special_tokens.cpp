#include "tokenizer/special_tokens.h"

#include "tokenizer/vocab.h"

namespace leoam {

namespace {

// The whitespace that lstrip/rstrip remove: C isspace() in the "C" locale, as llama.cpp uses.
bool is_c_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

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
          while (!left.empty() && is_c_space(left.back())) left.remove_suffix(1);
        }
        if (!left.empty()) next.push_back({-1, left});
        next.push_back({id, {}});
        rest = rest.substr(match + needle.size());
        if (data.attr & kAttrRstrip) {
          while (!rest.empty() && is_c_space(rest.front())) rest.remove_prefix(1);
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
