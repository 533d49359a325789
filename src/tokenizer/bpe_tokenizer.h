// Byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2"), as llama.cpp's llm_tokenizer_bpe.
//
// A raw-text fragment is split into words by the pre-tokenizer; each word's bytes are mapped to
// GPT-2's printable code points ("Ġ" for ' ') and cut into characters. Then, repeatedly, the
// adjacent pair with the lowest merge rank (its line in tokenizer.ggml.merges; ties: leftmost)
// is merged. Each final symbol is emitted as its token; one that is not in the vocabulary is
// emitted byte by byte where single bytes are tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab_tokenizer.h"

namespace leoam {

class BpeTokenizer final : public VocabTokenizer {
 public:
  // `merges`: "left right" lines, rank = index. Fails for a line without a separating space.
  static Result<std::unique_ptr<BpeTokenizer>> create(Vocab vocab, const std::vector<std::string>& merges,
                                                      PreTokenizer pre_tokenizer);

 protected:
  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>* out) const override;
  std::string decode_normal_text(const std::string& text) const override;

 private:
  BpeTokenizer(Vocab vocab, PreTokenizer pre_tokenizer);

  // Rank of merging `left` with `right`, or -1.
  int32_t merge_rank(std::string_view left, std::string_view right) const;
  // Merges one word given in GPT-2's mapped code points and appends its ids.
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  PreTokenizer pre_tokenizer_;
  // Key: left + ' ' + right. Mapped BPE text never holds a real space, so the key is unambiguous.
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ranks_;
  // Llama 3 style: a word that is itself a token is emitted whole, without merging.
  bool ignore_merges_ = false;
};

}  // namespace leoam
