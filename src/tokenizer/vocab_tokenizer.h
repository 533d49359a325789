// What the SPM and BPE tokenizers share: the vocabulary, the special-token pass, BOS/EOS, and
// detokenization through a table of token pieces. Subclasses only encode a run of raw text.
//
// tokenize(text, add_bos, parse_special), as llama.cpp's llama_tokenize with add_special = add_bos:
//   [BOS if add_bos and the vocab's add_bos flag]  fragments...  [EOS if add_bos and add_eos flag]
// where each fragment is a special token or a run of raw text that encode_text() turns into ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace leoam {

class VocabTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> tokenize(std::string_view text, bool add_bos, bool parse_special) const override;
  std::string token_to_piece(int32_t id) const override;
  std::string detokenize(const std::vector<int32_t>& ids, bool remove_leading_space = true) const override;
  int32_t n_vocab() const override { return vocab_.n_tokens(); }
  int32_t bos_id() const override { return vocab_.bos_id; }
  int32_t eos_id() const override { return vocab_.eos_id; }
  bool is_eog(int32_t id) const override;
  const std::string& token_text(int32_t id) const override;

  const Vocab& vocab() const { return vocab_; }

 protected:
  explicit VocabTokenizer(Vocab vocab);

  // Appends the ids of raw text `text`. `after_special` is true for the first fragment and for a
  // fragment that follows a special token (SPM puts its space prefix there).
  virtual void encode_text(std::string_view text, bool after_special, std::vector<int32_t>* out) const = 0;
  // The bytes of a normal token's text (SPM: U+2581 -> ' '; BPE: undo the byte mapping).
  virtual std::string decode_normal_text(const std::string& text) const = 0;

  // Fills pieces_; subclasses call it at the end of their constructor (it calls decode_normal_text).
  void build_pieces();

  Vocab vocab_;
  std::vector<std::string> pieces_;  // [n_vocab] what token_to_piece returns
};

}  // namespace leoam
