#include "tokenizer/bpe_tokenizer.h"

#include "tokenizer/symbol_merge.h"
#include "tokenizer/unicode.h"

namespace leoam {

BpeTokenizer::BpeTokenizer(Vocab vocab, PreTokenizer pre_tokenizer)
    : VocabTokenizer(std::move(vocab)), pre_tokenizer_(std::move(pre_tokenizer)) {
  const std::string& pre = vocab_.pre;
  ignore_merges_ = pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" || pre == "tekken";
  build_pieces();
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(Vocab vocab, const std::vector<std::string>& merges,
                                                            PreTokenizer pre_tokenizer) {
  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer(std::move(vocab), std::move(pre_tokenizer)));
  tok->ranks_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& line = merges[i];
    // The separator is the first space after the first byte (llama.cpp's rule).
    const size_t sep = line.size() > 1 ? line.find(' ', 1) : std::string::npos;
    if (sep == std::string::npos) {
      return corrupt("tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + line +
                     "' has no space between its two parts");
    }
    // emplace keeps the first rank of a duplicate line, as llama.cpp does.
    tok->ranks_.emplace(line.substr(0, sep) + ' ' + line.substr(sep + 1), static_cast<int32_t>(i));
  }
  return tok;
}

std::string BpeTokenizer::decode_normal_text(const std::string& text) const { return unicode::bpe_text_to_bytes(text); }

int32_t BpeTokenizer::merge_rank(std::string_view left, std::string_view right) const {
  std::string key;
  key.reserve(left.size() + 1 + right.size());
  key.append(left);
  key.push_back(' ');
  key.append(right);
  auto it = ranks_.find(key);
  return it == ranks_.end() ? -1 : it->second;
}

void BpeTokenizer::encode_text(std::string_view text, bool /*after_special*/, std::vector<int32_t>* out) const {
  std::string sanitized;
  if (!unicode::is_valid_utf8(text)) {
    sanitized = unicode::sanitize_utf8(text);
    text = sanitized;
  }
  std::string word;
  for (std::string_view piece : pre_tokenizer_.split(text)) {
    word.clear();
    for (char c : piece) word += unicode::byte_to_utf8(static_cast<uint8_t>(c));
    encode_word(word, out);
  }
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t id = vocab_.find(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  // Ranks are below 2^24, so -rank is exact as a float priority (lower rank merges first).
  auto priority = [this](std::string_view left, std::string_view right) -> std::optional<float> {
    const int32_t rank = merge_rank(left, right);
    if (rank < 0) return std::nullopt;
    return -static_cast<float>(rank);
  };
  merge_symbols(word, priority, [&](std::string_view piece) {
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
    // Not a token: each byte of its text that is a token on its own (llama.cpp's fallback).
    for (char c : piece) {
      const int32_t byte_id = vocab_.find(std::string_view(&c, 1));
      if (byte_id >= 0) out->push_back(byte_id);
    }
  });
}

}  // namespace leoam
