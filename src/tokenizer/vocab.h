// The vocabulary of a GGUF tokenizer: token texts, scores and types from
// `tokenizer.ggml.{tokens,scores,token_type}`, the special token ids and the flags that shape
// tokenization (add_bos, add_eos, add_space_prefix). Shared by the SPM and BPE tokenizers.
//
// Loading checks what the tokenizers rely on: every array has one entry per token, every special
// id is in range. A missing or malformed key gives an error that names the file and the key.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace leoam {

class GgufFile;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Per-token attributes derived from the type (and from the strip keys below, or else, for some
// vocabs, from llama.cpp's name-based rules). kLstrip/kRstrip: when the token is matched in text,
// whitespace to its left/right is dropped.
enum TokenAttr : uint32_t {
  kAttrNone = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
};

// leoam's own keys, arrays of token ids: the added tokens of a Hugging Face tokenizer.json with
// lstrip/rstrip set, which tokenizer.ggml.token_type cannot carry (hf_tokenizer_import.h).
inline constexpr const char* kLstripIdsKey = "leoam.tokenizer.lstrip_ids";
inline constexpr const char* kRstripIdsKey = "leoam.tokenizer.rstrip_ids";
// leoam's own key, a string: "nfc" where a tokenizer.json's normalizer composes text (Qwen's),
// applied to the text between special tokens before it is split (unicode::nfc).
inline constexpr const char* kNormalizerKey = "leoam.tokenizer.normalizer";

enum class VocabKind : uint8_t { kSpm, kBpe };

struct TokenData {
  std::string text;
  float score = 0.0f;
  TokenType type = TokenType::kNormal;
  uint32_t attr = kAttrNormal;
};

class Vocab {
 public:
  // Reads tokenizer.ggml.model ("llama" -> SPM, "gpt2" -> BPE), tokens, scores, types and special ids.
  static Result<Vocab> from_gguf(const GgufFile& gguf);
  // Builds a vocabulary directly (tests). Special ids are -1; flags take the per-kind defaults.
  static Vocab from_tokens(VocabKind kind, std::vector<TokenData> tokens);

  VocabKind kind() const { return kind_; }
  int32_t n_tokens() const { return static_cast<int32_t>(tokens_.size()); }
  bool is_valid_id(int32_t id) const { return id >= 0 && id < n_tokens(); }
  const TokenData& token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }

  // The id of the token whose text is exactly `text`, or -1. With duplicate texts the last id
  // wins, as in llama.cpp.
  int32_t find(std::string_view text) const {
    auto it = text_to_id_.find(text);
    return it == text_to_id_.end() ? -1 : it->second;
  }

  // Control, user-defined and unknown tokens (whose text may appear in input), longest text first;
  // ties keep id order.
  const std::vector<int32_t>& special_tokens_by_length() const { return special_by_length_; }

  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t eot_id = -1;
  int32_t eom_id = -1;
  int32_t pad_id = -1;
  int32_t sep_id = -1;
  int32_t cls_id = -1;
  int32_t mask_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  std::string pre;  // tokenizer.ggml.pre, "default" when absent
  // The whitespace that lstrip/rstrip drop: C isspace() by default, as llama.cpp; Unicode
  // whitespace as JavaScript's trim() has it when the strip keys are present, as transformers.js.
  bool strip_unicode_space = false;
  bool nfc = false;  // kNormalizerKey is "nfc"
  // End-of-generation ids: eos, eot, eom and the control tokens llama.cpp treats as such.
  std::vector<int32_t> eog_ids;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  void build_indexes();

  VocabKind kind_ = VocabKind::kSpm;
  std::vector<TokenData> tokens_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> text_to_id_;
  std::vector<int32_t> special_by_length_;
};

}  // namespace leoam
