// SentencePiece tokenizer (tokenizer.ggml.model = "llama"), as llama.cpp's llm_tokenizer_spm.
// A raw-text fragment gets a leading space when it starts the input or follows a special token
// (add_space_prefix), every ' ' becomes U+2581 "▁", and the text is cut into UTF-8 characters.
// Then, repeatedly, the adjacent pair whose concatenation is a vocabulary token with the highest
// score is merged (ties: leftmost first), until no adjacent pair forms a token. A final symbol
// that is not a token is emitted as byte tokens <0xXX> (byte fallback).
// The pairs live in a priority queue; a merged-away or grown symbol makes its old pairs stale,
// and they are dropped when popped. O(n log n) in the fragment's length; long texts are first cut
// at characters that no multi-byte token contains (exact, see isolated_).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab_tokenizer.h"

namespace leoam {

class SpmTokenizer final : public VocabTokenizer {
 public:
  explicit SpmTokenizer(Vocab vocab);

 protected:
  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>* out) const override;
  std::string decode_normal_text(const std::string& text) const override;

 private:
  // Cuts escaped text at the characters that can never merge and encodes each segment.
  void encode_escaped(std::string_view text, std::vector<int32_t>* out) const;
  // Merges the symbols of one segment of escaped text and appends the resulting ids.
  void encode_segment(std::string_view text, std::vector<int32_t>* out) const;

  std::array<int32_t, 256> byte_tokens_{};  // byte -> its fallback token (<0xXX>, else the byte, else unk)
  // ASCII bytes that occur in no token longer than one byte (for Llama 2: '\n', '\t', ...). Such
  // a character never merges with a neighbour, so the text can be cut around it without changing
  // the result; this keeps each priority queue small on long inputs.
  std::array<bool, 128> isolated_{};
};

}  // namespace leoam
