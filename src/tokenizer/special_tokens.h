// Splitting text on the special tokens written in it, before the SPM/BPE algorithm runs.
//
// The text is cut into fragments: runs of raw text and single special tokens. Tokens are tried
// longest text first (so "<|im_end|>" wins over "<|im"), each one splitting every raw fragment
// left so far at all its non-overlapping occurrences, left to right, as llama.cpp's
// tokenizer_st_partition does. Control and unknown tokens are split out only when parse_special
// is set; user-defined tokens always are (Hugging Face treats added tokens that way). A token
// with kAttrLstrip/kAttrRstrip also drops the whitespace before/after it (ASCII or Unicode
// whitespace: Vocab::strip_unicode_space).
//
//   "a</s> b"  ->  [raw "a"] [token 2] [raw " b"]
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace leoam {

class Vocab;

struct TextFragment {
  int32_t token = -1;     // >= 0 for a special token; -1 for raw text
  std::string_view text;  // the raw text (points into the input); empty for a token

  bool is_token() const { return token >= 0; }
};

std::vector<TextFragment> partition_special_tokens(const Vocab& vocab, std::string_view text, bool parse_special);

}  // namespace leoam
