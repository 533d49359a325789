// Hugging Face tokenizer folder -> GGUF tokenizer metadata, so that Tokenizer::from_gguf then
// tokenizes as Hugging Face does. Reads tokenizer.json (required) and tokenizer_config.json
// (optional) and accepts two kinds of model.type "BPE":
//   byte-level BPE  (pre_tokenizer ByteLevel, or Split regexes + ByteLevel)  -> model "gpt2",
//                   with tokenizer.ggml.pre naming leoam's regex list of the same split;
//   SentencePiece-style BPE (normalizer Replace " " -> "▁", byte_fallback)   -> model "llama",
//                   scores from the merge ranks (rank r -> -r).
// Added tokens with lstrip/rstrip go to leoam.tokenizer.{l,r}strip_ids (vocab.h), which make them
// swallow the whitespace beside them as transformers.js does; single_word is refused. An NFC
// normalizer goes to leoam.tokenizer.normalizer. Anything else (other model types, normalizers,
// regexes) fails with an unsupported error.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace leoam {

class GgufWriter;

// Adds tokenizer.ggml.* (model, pre, tokens, token_type, merges, scores where needed, bos/eos/unk/pad
// ids, add_bos_token/add_eos_token, add_space_prefix), leoam.tokenizer.{l,r}strip_ids where any
// added token has the flag, and tokenizer.chat_template to `out`.
// Errors name the file and the problem; `out` is only changed on success.
// n_vocab > 0: the model's vocabulary (config.json's vocab_size), which ids past the tokenizer's
// last token fill as unused tokens "[PAD<id>]"; a tokenizer with more tokens than that is an error.
Status import_hf_tokenizer(const std::string& dir, GgufWriter& out, int64_t n_vocab = 0);

}  // namespace leoam
