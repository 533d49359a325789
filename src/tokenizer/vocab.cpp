#include "tokenizer/vocab.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <utility>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_value.h"

namespace leoam {

namespace {

uint32_t attr_for_type(TokenType type) {
  switch (type) {
    case TokenType::kUndefined: return kAttrNone;
    case TokenType::kNormal: return kAttrNormal;
    case TokenType::kUnknown: return kAttrUnknown;
    case TokenType::kControl: return kAttrControl;
    case TokenType::kUserDefined: return kAttrUserDefined;
    case TokenType::kUnused: return kAttrUnused;
    case TokenType::kByte: return kAttrByte;
  }
  return kAttrNone;
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Reads an optional integer key holding a token id and checks its range. `*id` keeps its default
// when the key is absent. An id outside the vocabulary is an error when the tokenizer uses it
// (`used`); otherwise it is ignored, as llama.cpp does: real files ship e.g. a padding id equal
// to the vocabulary size.
Status read_token_id(const GgufFile& gguf, std::string_view key, int32_t n_tokens, bool used, int32_t* id) {
  auto value = gguf.get_int(key);
  if (!value.is_ok()) return value.status();
  if (!value->has_value()) return Status::ok();
  const int64_t v = **value;
  if ((v < 0 || v >= n_tokens) && !used) return Status::ok();
  if (v < 0 || v >= n_tokens) {
    return corrupt("key '" + std::string(key) + "' is " + std::to_string(v) + ", outside the vocabulary [0, " +
                   std::to_string(n_tokens) + ")");
  }
  *id = static_cast<int32_t>(v);
  return Status::ok();
}

Status read_flag(const GgufFile& gguf, std::string_view key, bool* flag) {
  auto value = gguf.get_bool(key);
  if (!value.is_ok()) return value.status();
  if (value->has_value()) *flag = **value;
  return Status::ok();
}

// Reads an optional array of token ids; nullopt when the key is absent.
Result<std::optional<std::vector<int32_t>>> read_token_ids(const GgufFile& gguf, const char* key, int32_t n_tokens) {
  const GgufValue* value = gguf.find(key);
  if (value == nullptr) return std::optional<std::vector<int32_t>>();
  std::optional<std::vector<int32_t>> ids = value->to_i32s();
  if (!ids) {
    return corrupt("key '" + std::string(key) + "' holds " + value->to_display_string(4) +
                   ", not an array of token ids (integers)");
  }
  for (int32_t id : *ids) {
    if (id < 0 || id >= n_tokens) {
      return corrupt("key '" + std::string(key) + "' holds token id " + std::to_string(id) +
                     ", outside the vocabulary [0, " + std::to_string(n_tokens) + ")");
    }
  }
  return ids;
}

}  // namespace

Vocab Vocab::from_tokens(VocabKind kind, std::vector<TokenData> tokens) {
  Vocab vocab;
  vocab.kind_ = kind;
  vocab.tokens_ = std::move(tokens);
  vocab.add_bos = kind == VocabKind::kSpm;
  vocab.add_space_prefix = kind == VocabKind::kSpm;
  vocab.pre = "default";
  vocab.build_indexes();
  return vocab;
}

void Vocab::build_indexes() {
  text_to_id_.clear();
  text_to_id_.reserve(tokens_.size());
  special_by_length_.clear();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    text_to_id_.insert_or_assign(tokens_[i].text, static_cast<int32_t>(i));
    if (tokens_[i].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      special_by_length_.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(special_by_length_.begin(), special_by_length_.end(), [&](int32_t a, int32_t b) {
    return tokens_[static_cast<size_t>(a)].text.size() > tokens_[static_cast<size_t>(b)].text.size();
  });
}

Result<Vocab> Vocab::from_gguf(const GgufFile& gguf) {
  const std::string& file = gguf.path();
  auto fail = [&](const Status& s) { return s.with_context(file); };

  auto model = gguf.get_string("tokenizer.ggml.model");
  if (!model.is_ok()) return fail(model.status());
  if (!model->has_value()) {
    return fail(not_found("missing key 'tokenizer.ggml.model': the file has no tokenizer; convert the model "
                          "with its tokenizer (llama.cpp's convert_hf_to_gguf.py writes one)"));
  }
  Vocab vocab;
  const std::string& model_name = **model;
  if (model_name == "llama") {
    vocab.kind_ = VocabKind::kSpm;
  } else if (model_name == "gpt2") {
    vocab.kind_ = VocabKind::kBpe;
  } else {
    return fail(unsupported("tokenizer.ggml.model is '" + model_name +
                            "'; supported: llama (SentencePiece), gpt2 (byte-level BPE)"));
  }

  const GgufValue* tokens = gguf.find("tokenizer.ggml.tokens");
  if (tokens == nullptr) return fail(not_found("missing key 'tokenizer.ggml.tokens'"));
  const std::vector<std::string>* texts = tokens->as_strings();
  if (texts == nullptr) {
    return fail(corrupt("key 'tokenizer.ggml.tokens' is " + gguf_value_type_name(static_cast<uint32_t>(tokens->type())) +
                        ", expected an array of strings"));
  }
  if (texts->empty()) return fail(corrupt("key 'tokenizer.ggml.tokens' is empty"));
  if (texts->size() > static_cast<size_t>(INT32_MAX)) return fail(corrupt("too many tokens"));
  const size_t n = texts->size();

  std::optional<std::vector<float>> scores;
  if (const GgufValue* v = gguf.find("tokenizer.ggml.scores")) {
    scores = v->to_f32s();
    if (!scores) return fail(corrupt("key 'tokenizer.ggml.scores' is not an array of floats"));
    if (scores->size() != n) {
      return fail(corrupt("key 'tokenizer.ggml.scores' has " + std::to_string(scores->size()) + " entries for " +
                          std::to_string(n) + " tokens"));
    }
  }
  std::optional<std::vector<int32_t>> types;
  if (const GgufValue* v = gguf.find("tokenizer.ggml.token_type")) {
    types = v->to_i32s();
    if (!types) return fail(corrupt("key 'tokenizer.ggml.token_type' is not an array of integers"));
    if (types->size() != n) {
      return fail(corrupt("key 'tokenizer.ggml.token_type' has " + std::to_string(types->size()) +
                          " entries for " + std::to_string(n) + " tokens"));
    }
  }

  vocab.tokens_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = vocab.tokens_[i];
    t.text = (*texts)[i];
    t.score = scores ? (*scores)[i] : 0.0f;
    if (types) {
      const int32_t ty = (*types)[i];
      if (ty < 0 || ty > static_cast<int32_t>(TokenType::kByte)) {
        return fail(corrupt("token " + std::to_string(i) + " has type " + std::to_string(ty) +
                            " in 'tokenizer.ggml.token_type'; valid types are 0..6"));
      }
      t.type = static_cast<TokenType>(ty);
    }
    t.attr = attr_for_type(t.type);
  }

  // Defaults per kind, as llama.cpp has them; the keys below override them.
  const auto n_tokens = static_cast<int32_t>(n);
  if (vocab.kind_ == VocabKind::kSpm) {
    vocab.bos_id = n_tokens > 1 ? 1 : -1;
    vocab.eos_id = n_tokens > 2 ? 2 : -1;
    vocab.unk_id = 0;
    vocab.add_bos = true;
    vocab.add_space_prefix = true;
  }

  auto pre = gguf.get_string("tokenizer.ggml.pre");
  if (!pre.is_ok()) return fail(pre.status());
  vocab.pre = pre->has_value() && !(**pre).empty() ? **pre : "default";
  // llama.cpp's BPE pre-tokenizers that want a BOS by default.
  if (vocab.kind_ == VocabKind::kBpe && (vocab.pre == "llama3" || vocab.pre == "llama-v3" || vocab.pre == "llama-bpe" ||
                                         vocab.pre == "falcon3")) {
    vocab.add_bos = true;
  }

  struct IdKey {
    const char* key;
    bool used;  // the tokenizer or the generation loop relies on it
    int32_t* id;
  };
  const IdKey id_keys[] = {
      {"tokenizer.ggml.bos_token_id", true, &vocab.bos_id},
      {"tokenizer.ggml.eos_token_id", true, &vocab.eos_id},
      {"tokenizer.ggml.unknown_token_id", true, &vocab.unk_id},
      {"tokenizer.ggml.eot_token_id", true, &vocab.eot_id},
      {"tokenizer.ggml.eom_token_id", true, &vocab.eom_id},
      {"tokenizer.ggml.padding_token_id", false, &vocab.pad_id},
      {"tokenizer.ggml.seperator_token_id", false, &vocab.sep_id},  // sic: GGUF's spelling
      {"tokenizer.ggml.cls_token_id", false, &vocab.cls_id},
      {"tokenizer.ggml.mask_token_id", false, &vocab.mask_id},
  };
  for (const IdKey& k : id_keys) {
    Status s = read_token_id(gguf, k.key, n_tokens, k.used, k.id);
    if (!s.is_ok()) return fail(s);
  }
  for (auto [key, flag] : {std::pair{"tokenizer.ggml.add_bos_token", &vocab.add_bos},
                           std::pair{"tokenizer.ggml.add_eos_token", &vocab.add_eos},
                           std::pair{"tokenizer.ggml.add_space_prefix", &vocab.add_space_prefix}}) {
    Status s = read_flag(gguf, key, flag);
    if (!s.is_ok()) return fail(s);
  }

  vocab.build_indexes();

  auto normalizer = gguf.get_string(kNormalizerKey);
  if (!normalizer.is_ok()) return fail(normalizer.status());
  if (normalizer->has_value()) {
    if (**normalizer != "nfc") {
      return fail(unsupported("key '" + std::string(kNormalizerKey) + "' is '" + **normalizer +
                              "', not supported; supported: nfc"));
    }
    vocab.nfc = true;
  }

  // The strip flags of a Hugging Face import; where present they, not the name rule below, decide.
  bool strip_keys = false;
  for (auto [key, attr] : {std::pair{kLstripIdsKey, kAttrLstrip}, std::pair{kRstripIdsKey, kAttrRstrip}}) {
    auto ids = read_token_ids(gguf, key, n_tokens);
    if (!ids.is_ok()) return fail(ids.status());
    if (!ids->has_value()) continue;
    strip_keys = true;
    for (int32_t id : **ids) vocab.tokens_[static_cast<size_t>(id)].attr |= attr;
  }
  vocab.strip_unicode_space = strip_keys;

  // llama.cpp's name-based rule for Phi-3: its special tokens swallow the whitespace after them.
  auto general_name = gguf.get_string("general.name");
  if (!strip_keys && general_name.is_ok() && general_name->has_value()) {
    const std::string name = lowercase(**general_name);
    if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
      for (int32_t id : vocab.special_by_length_) vocab.tokens_[static_cast<size_t>(id)].attr |= kAttrRstrip;
      for (const char* text : {"<unk>", "<s>", "<|endoftext|>"}) {
        const int32_t id = vocab.find(text);
        if (id >= 0) vocab.tokens_[static_cast<size_t>(id)].attr &= ~static_cast<uint32_t>(kAttrRstrip);
      }
      const int32_t eos_text = vocab.find("</s>");
      if (eos_text >= 0) vocab.tokens_[static_cast<size_t>(eos_text)].attr |= kAttrRstrip;
    }
  }

  // End of generation: the declared ids plus the control tokens that chat templates end turns with.
  for (int32_t id : {vocab.eos_id, vocab.eot_id, vocab.eom_id}) {
    if (id >= 0) vocab.eog_ids.push_back(id);
  }
  for (const char* text : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                           "<EOT>", "_<EOT>", "<|end_of_text|>"}) {
    const int32_t id = vocab.find(text);
    if (id >= 0 && (vocab.token(id).attr & (kAttrControl | kAttrUserDefined)) &&
        std::find(vocab.eog_ids.begin(), vocab.eog_ids.end(), id) == vocab.eog_ids.end()) {
      vocab.eog_ids.push_back(id);
    }
  }
  return vocab;
}

}  // namespace leoam
