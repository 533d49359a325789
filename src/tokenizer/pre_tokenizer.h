// Pre-tokenization for byte-level BPE: splits text into the words that BPE merges within.
// A pre-tokenizer is a list of regexes, chosen by the GGUF key `tokenizer.ggml.pre`. As in
// llama.cpp's unicode_regex_split, each regex splits every piece that the previous one produced:
// its matches and the non-matching gaps between them all become pieces, and a regex only ever
// sees one piece (so `$` and lookaheads stop at the piece's end). Pieces concatenate back to the
// input exactly:  "Hello world!"  --regex 1-->  ["Hello", " world", "!"]  --regex 2--> ...
// Regexes run under PCRE2 in UTF + UCP mode (\p{L}, \s follow Unicode), JIT-compiled when the
// library supports it. Thread safety: split() is const and may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace leoam {

class PreTokenizer {
 public:
  // The regex list that llama.cpp uses for `tokenizer.ggml.pre` = `name` ("default" when the key
  // is absent). Fails for an unknown name, listing the supported ones.
  static Result<PreTokenizer> for_name(std::string_view name);
  // A pre-tokenizer from explicit PCRE2 patterns (tests, new vocabularies).
  static Result<PreTokenizer> from_patterns(std::vector<std::string> patterns);
  // The names for_name() accepts.
  static std::vector<std::string> supported_names();

  // Splits `text` (valid UTF-8) into non-empty pieces that point into `text`.
  std::vector<std::string_view> split(std::string_view text) const;

  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  struct Compiled;
  PreTokenizer() = default;

  std::vector<std::string> patterns_;
  std::vector<std::shared_ptr<const Compiled>> compiled_;  // immutable once built, so shared by copies
};

}  // namespace leoam
