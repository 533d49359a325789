// Text <-> token ids, from the tokenizer described in a GGUF file's `tokenizer.ggml.*` metadata:
// SentencePiece ("llama") and byte-level BPE ("gpt2") with the pre-tokenizer named by
// `tokenizer.ggml.pre`. Results match llama.cpp's tokenizer exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace leoam {

class GgufFile;

class Tokenizer {
 public:
  // Reads the vocabulary from `gguf`. Fails with a clear message for a missing or malformed
  // tokenizer, an unknown `tokenizer.ggml.model`, or an unknown `tokenizer.ggml.pre`.
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& gguf);
  virtual ~Tokenizer() = default;

  // Token ids for `text`. add_bos is llama.cpp's add_special: it prepends BOS where the vocab
  // wants one (tokenizer.ggml.add_bos_token; by default SentencePiece and Llama-3 vocabs do,
  // GPT-2 style ones do not) and appends EOS where it asks for that (add_eos_token).
  // parse_special recognizes control tokens written in the text (e.g. "</s>"); otherwise they are
  // tokenized as plain text. User-defined (added) tokens are always recognized, as in llama.cpp.
  virtual std::vector<int32_t> tokenize(std::string_view text, bool add_bos, bool parse_special) const = 0;

  // The bytes that token `id` stands for when detokenized (SPM's U+2581 becomes a space, byte
  // tokens become their byte, BPE's byte-to-unicode mapping is undone). Control tokens give "".
  virtual std::string token_to_piece(int32_t id) const = 0;

  // The text of a token sequence. For SPM, the leading space that tokenize() adds is removed
  // from the first token that gives any text (so after a BOS too) when remove_leading_space is
  // set, so detokenize(tokenize(t)) == t.
  virtual std::string detokenize(const std::vector<int32_t>& ids, bool remove_leading_space = true) const = 0;

  virtual int32_t n_vocab() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when the vocab has none
  virtual int32_t eos_id() const = 0;  // -1 when the vocab has none
  // End of generation: EOS, EOT and the other end tokens the vocab declares.
  virtual bool is_eog(int32_t id) const = 0;
  // The raw vocabulary string of a token (for debugging and `tokenize --verbose`).
  virtual const std::string& token_text(int32_t id) const = 0;
};

}  // namespace leoam
