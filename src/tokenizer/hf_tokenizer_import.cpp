#include "tokenizer/hf_tokenizer_import.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gguf/gguf_value.h"
#include "gguf/json_file.h"
#include "gguf/quoted_name.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/vocab.h"

namespace leoam {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kMetaspace = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's visible space

// The byte-level pre-tokenizers leoam knows: Hugging Face's Split regexes, exactly as
// tokenizer.json spells them, and the tokenizer.ggml.pre name whose PCRE2 list
// (pre_tokenizer.cpp) splits the same way.
struct KnownPreTokenizer {
  const char* pre;
  std::vector<std::string> regexes;  // empty: ByteLevel's own GPT-2 regex (use_regex true)
  bool ignore_merges;                // what BpeTokenizer does for `pre`; model.ignore_merges must agree
};

const std::vector<KnownPreTokenizer>& known_pre_tokenizers() {
  static const std::vector<KnownPreTokenizer> kKnown = {
      {"gpt-2", {}, false},
      {"llama-bpe",
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true},
      {"qwen2",
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       false},
      // Written with JSON's escapes: the file holds literal CR/LF characters and CJK code points here.
      {"deepseek-v3",
       {R"(\p{N}{1,3})", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
        "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
       false},
  };
  return kKnown;
}

// Safe look-ups (a missing key, null or another type gives the fallback), so that odd files give
// the checks' errors below rather than nlohmann exceptions.
const json& member(const json& object, const std::string& key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}
std::optional<std::string> optional_string(const json& object, const std::string& key) {
  const json& v = member(object, key);
  if (!v.is_string()) return std::nullopt;
  return v.get<std::string>();
}
std::string text_of(const json& object, const std::string& key) { return optional_string(object, key).value_or(""); }
bool flag_of(const json& object, const std::string& key, bool fallback) {
  const json& v = member(object, key);
  return v.is_boolean() ? v.get<bool>() : fallback;
}

// A token named in tokenizer_config.json: "text", {"content": "text", ...} or null.
std::optional<std::string> config_token(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return optional_string(*it, "content");
  return std::nullopt;
}

// The components of a Sequence normalizer/pre-tokenizer/processor, flattened; [] for null.
std::vector<json> flatten(const json& component, const char* list_key) {
  std::vector<json> out;
  if (component.is_null()) return out;
  if (text_of(component, "type") == "Sequence" && member(component, list_key).is_array()) {
    for (const json& c : member(component, list_key)) {
      std::vector<json> inner = flatten(c, list_key);
      out.insert(out.end(), inner.begin(), inner.end());
    }
    return out;
  }
  out.push_back(component);
  return out;
}

bool is_byte_token(const std::string& text) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return text.size() == 6 && text.compare(0, 3, "<0x") == 0 && hex(text[3]) && hex(text[4]) && text[5] == '>';
}

// What the import builds before anything is written to the GgufWriter.
struct Import {
  std::string tok_path;
  std::string config_path;
  std::vector<std::string> tokens;  // [n] by id
  std::vector<int32_t> types;       // [n] TokenType
  std::unordered_map<std::string, int32_t> model_ids;  // model.vocab: text -> id
  std::unordered_map<std::string, int32_t> all_ids;    // vocab and added tokens; added ones win
  std::vector<std::pair<std::string, std::string>> merges;
  bool byte_level = false;
  std::string pre;                // byte-level only
  bool add_space_prefix = false;  // SentencePiece style only
  bool nfc = false;               // an NFC normalizer
  std::vector<int32_t> lstrip_ids;  // added tokens that swallow the whitespace on their left
  std::vector<int32_t> rstrip_ids;  // ... and on their right

  Status read_vocab(const json& model, const json& added);
  Status read_merges(const json& model);
  Status read_normalizer_and_pre(const json& tok, const json& model);
};

Status Import::read_vocab(const json& model, const json& added) {
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) return corrupt(tok_path + ": model.vocab is not an object");
  if (!added.is_null() && !added.is_array()) return corrupt(tok_path + ": added_tokens is not an array");
  const size_t n_entries = vocab_it->size() + (added.is_array() ? added.size() : 0);
  std::vector<std::pair<int64_t, std::string>> entries;
  entries.reserve(n_entries);
  int64_t max_id = -1;
  for (const auto& [text, id] : vocab_it->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      return corrupt(tok_path + ": model.vocab[" + quoted_name(text) + "] is not a token id (a non-negative integer)");
    }
    entries.emplace_back(id.get<int64_t>(), text);
    model_ids.emplace(text, static_cast<int32_t>(std::min<int64_t>(id.get<int64_t>(), INT32_MAX)));
    max_id = std::max(max_id, id.get<int64_t>());
  }
  const size_t n_model = entries.size();
  if (added.is_array()) {
    for (const json& a : added) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
          !a.contains("content") || !a["content"].is_string()) {
        return corrupt(tok_path + ": added_tokens holds an entry without an integer id and a string content");
      }
      entries.emplace_back(a["id"].get<int64_t>(), a["content"].get<std::string>());
      max_id = std::max(max_id, a["id"].get<int64_t>());
    }
  }
  if (entries.empty()) return corrupt(tok_path + ": the vocabulary is empty");
  // Every id in [0, n) must have a text; checked on the sorted ids before allocating n entries.
  std::vector<int64_t> ids;
  ids.reserve(entries.size());
  for (const auto& e : entries) ids.push_back(e.first);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != static_cast<int64_t>(i)) {
      return corrupt(tok_path + ": token ids are not dense: no token has id " + std::to_string(i) +
                     " (ids must run 0..n-1; the largest is " + std::to_string(max_id) + ")");
    }
  }
  if (max_id >= INT32_MAX) return corrupt(tok_path + ": too many tokens");
  const auto n = static_cast<size_t>(max_id + 1);
  tokens.assign(n, {});
  types.assign(n, static_cast<int32_t>(TokenType::kNormal));
  std::vector<bool> seen(n, false);
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto id = static_cast<size_t>(entries[i].first);
    const std::string& text = entries[i].second;
    if (seen[id] && (i < n_model || tokens[id] != text)) {
      return corrupt(tok_path + ": token id " + std::to_string(id) + " is given to both " + quoted_name(tokens[id]) +
                     " and " + quoted_name(text));
    }
    seen[id] = true;
    tokens[id] = text;
  }
  for (size_t id = 0; id < n; ++id) all_ids.emplace(tokens[id], static_cast<int32_t>(id));

  const bool byte_fallback = flag_of(model, "byte_fallback", false);
  if (byte_fallback) {
    for (size_t id = 0; id < n; ++id) {
      if (is_byte_token(tokens[id])) types[id] = static_cast<int32_t>(TokenType::kByte);
    }
  }
  if (added.is_array()) {
    for (const json& a : added) {
      const auto id = a["id"].get<size_t>();
      if (flag_of(a, "single_word", false)) {
        return unsupported(tok_path + ": added token " + quoted_name(tokens[id]) +
                           " has single_word set, which GGUF tokenizer metadata cannot express");
      }
      if (flag_of(a, "lstrip", false)) lstrip_ids.push_back(static_cast<int32_t>(id));
      if (flag_of(a, "rstrip", false)) rstrip_ids.push_back(static_cast<int32_t>(id));
      // Hugging Face splits every added token out of the text; leoam does so for user-defined tokens
      // always and for control tokens with parse_special.
      types[id] = static_cast<int32_t>(flag_of(a, "special", false) ? TokenType::kControl : TokenType::kUserDefined);
      all_ids.insert_or_assign(tokens[id], static_cast<int32_t>(id));
    }
  }
  if (auto unk = optional_string(model, "unk_token")) {
    auto it = all_ids.find(*unk);
    if (it == all_ids.end()) return corrupt(tok_path + ": model.unk_token " + quoted_name(*unk) + " is not in the vocabulary");
    types[static_cast<size_t>(it->second)] = static_cast<int32_t>(TokenType::kUnknown);
  }
  return Status::ok();
}

Status Import::read_merges(const json& model) {
  auto it = model.find("merges");
  if (it == model.end() || !it->is_array()) return corrupt(tok_path + ": model.merges is not an array");
  merges.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    std::string left, right;
    if (m.is_string()) {  // "left right" (older files)
      const std::string line = m.get<std::string>();
      const size_t sep = line.find(' ');
      if (sep == std::string::npos || line.find(' ', sep + 1) != std::string::npos) {
        return corrupt(tok_path + ": model.merges[" + std::to_string(i) + "] = " + quoted_name(line) +
                       " is not two tokens separated by one space");
      }
      left = line.substr(0, sep);
      right = line.substr(sep + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["left", "right"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return corrupt(tok_path + ": model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
    // As Hugging Face checks: both parts and their merge are vocabulary tokens.
    for (const std::string& t : {left, right, left + right}) {
      if (!model_ids.contains(t)) {
        return corrupt(tok_path + ": model.merges[" + std::to_string(i) + "] (" + quoted_name(left) + ", " + quoted_name(right) +
                       ") needs token " + quoted_name(t) + ", which is not in model.vocab");
      }
    }
    merges.emplace_back(std::move(left), std::move(right));
  }
  return Status::ok();
}

Status Import::read_normalizer_and_pre(const json& tok, const json& model) {
  bool prepend_space = false;
  bool replace_space = false;
  for (const json& n : flatten(member(tok, "normalizer"), "normalizers")) {
    const std::string type = text_of(n, "type");
    if (type == "NFC") {  // carried by leoam's own key (llama.cpp ignores it)
      nfc = true;
      continue;
    }
    if (type == "Prepend" && text_of(n, "prepend") == kMetaspace) {
      prepend_space = true;
    } else if (type == "Replace" && text_of(member(n, "pattern"), "String") == " " &&
               text_of(n, "content") == kMetaspace) {
      replace_space = true;
    } else {
      return unsupported(tok_path + ": normalizer " + n.dump() +
                         " is not supported; supported: NFC, and Prepend(\"▁\") + Replace(\" \", \"▁\") of "
                         "SentencePiece-style BPE");
    }
  }

  const std::vector<json> pres = flatten(member(tok, "pre_tokenizer"), "pretokenizers");
  const bool ignore_merges = flag_of(model, "ignore_merges", false);
  byte_level = !pres.empty() && text_of(pres.back(), "type") == "ByteLevel";
  if (byte_level) {
    if (prepend_space || replace_space) {
      return unsupported(tok_path + ": a ByteLevel pre-tokenizer after a SentencePiece-style normalizer is not supported");
    }
    const json& bl = pres.back();
    if (flag_of(bl, "add_prefix_space", true)) {  // Hugging Face's default is true
      return unsupported(tok_path + ": ByteLevel with add_prefix_space is not supported");
    }
    std::vector<std::string> regexes;
    for (size_t i = 0; i + 1 < pres.size(); ++i) {
      const json& p = pres[i];
      if (text_of(p, "type") != "Split" || !member(member(p, "pattern"), "Regex").is_string() ||
          text_of(p, "behavior") != "Isolated" || flag_of(p, "invert", false)) {
        return unsupported(tok_path + ": pre-tokenizer " + p.dump() +
                           " before ByteLevel is not supported; supported: Split(Regex, Isolated, invert false)");
      }
      regexes.push_back(text_of(member(p, "pattern"), "Regex"));
    }
    if (flag_of(bl, "use_regex", true) != regexes.empty()) {
      return unsupported(tok_path + ": ByteLevel's use_regex must be " + (regexes.empty() ? "true" : "false") +
                         (regexes.empty() ? " without" : " after") + " Split regexes");
    }
    for (const KnownPreTokenizer& k : known_pre_tokenizers()) {
      if (k.regexes != regexes) continue;
      if (k.ignore_merges != ignore_merges) {
        return unsupported(tok_path + ": model.ignore_merges is " + (ignore_merges ? "true" : "false") +
                           ", but leoam's pre-tokenizer '" + k.pre + "' for these regexes has it " +
                           (k.ignore_merges ? "on" : "off"));
      }
      pre = k.pre;
      return Status::ok();
    }
    std::string list;
    // JSON-quoted, as tokenizer.json spells them (some hold raw CR/LF characters).
    for (const std::string& r : regexes) list += (list.empty() ? "" : ", ") + json(r).dump();
    return unsupported(tok_path + ": the pre-tokenizer's Split regexes [" + list +
                       "] match none that leoam knows (llama-bpe, qwen2, deepseek-v3, or ByteLevel alone: gpt-2)");
  }

  // SentencePiece style: spaces become "▁" and BPE runs over the whole text, with byte fallback.
  for (const json& p : pres) {
    // After Replace(" ", "▁") no space is left, so splitting on " " does nothing (Gemma 3).
    const bool noop_split = replace_space && text_of(p, "type") == "Split" &&
                            text_of(member(p, "pattern"), "String") == " ";
    if (!noop_split) {
      return unsupported(tok_path + ": pre-tokenizer " + p.dump() +
                         " is not supported; supported: ByteLevel (with Split regexes), or none after a "
                         "SentencePiece-style normalizer");
    }
  }
  if (!replace_space || !flag_of(model, "byte_fallback", false)) {
    return unsupported(tok_path + ": a BPE model that is neither byte-level (ByteLevel pre-tokenizer) nor "
                       "SentencePiece style (normalizer Replace(\" \", \"▁\") with byte_fallback) is not supported");
  }
  if (ignore_merges) return unsupported(tok_path + ": ignore_merges in a SentencePiece-style BPE is not supported");
  add_space_prefix = prepend_space;
  return Status::ok();
}

// BOS/EOS that the post-processor adds: TemplateProcessing's leading/trailing special tokens.
struct PostTokens {
  std::optional<std::string> bos;
  std::optional<std::string> eos;
};

Result<PostTokens> read_post_processor(const std::string& tok_path, const json& tok) {
  PostTokens post;
  for (const json& p : flatten(member(tok, "post_processor"), "processors")) {
    const std::string type = text_of(p, "type");
    if (type == "ByteLevel") continue;  // only trims offsets
    if (type != "TemplateProcessing") {
      return unsupported(tok_path + ": post_processor '" + type + "' is not supported; supported: ByteLevel, "
                         "TemplateProcessing");
    }
    const json& single = member(p, "single");
    if (!single.is_array() || single.empty()) continue;
    // A SpecialToken names an entry of special_tokens, whose "tokens" hold the token's text.
    const json& specials = member(p, "special_tokens");
    auto special = [&](const json& item) -> std::optional<std::string> {
      const std::optional<std::string> name = optional_string(member(item, "SpecialToken"), "id");
      if (!name) return std::nullopt;
      const json& texts = member(member(specials, *name), "tokens");
      return texts.is_array() && texts.size() == 1 && texts[0].is_string() ? texts[0].get<std::string>() : *name;
    };
    if (auto t = special(single.front())) post.bos = t;
    if (single.size() > 1) {
      if (auto t = special(single.back())) post.eos = t;
    }
  }
  return post;
}

Status import_files(const std::string& dir, int64_t n_vocab, GgufWriter& out) {
  Import imp;
  imp.tok_path = (fs::path(dir) / "tokenizer.json").string();
  imp.config_path = (fs::path(dir) / "tokenizer_config.json").string();
  std::error_code ec;
  if (!fs::exists(imp.tok_path, ec)) {
    return not_found(imp.tok_path + ": not found; a Hugging Face model folder needs its tokenizer.json");
  }
  LEOAM_ASSIGN_OR_RETURN(const json tok, read_json_object(imp.tok_path));
  json config = json::object();
  if (fs::exists(imp.config_path, ec)) {
    LEOAM_ASSIGN_OR_RETURN(config, read_json_object(imp.config_path));
  }

  if (!tok.contains("model") || !tok["model"].is_object()) return corrupt(imp.tok_path + ": no \"model\" object");
  const json& model = tok["model"];
  const std::string type = text_of(model, "type");
  if (type != "BPE") {
    return unsupported(imp.tok_path + ": model.type is " + quoted_name(type) +
                       "; only BPE tokenizers are supported (not Unigram, WordPiece or WordLevel)");
  }
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    return unsupported(imp.tok_path + ": BPE dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (optional_string(model, key).value_or("") != "") {
      return unsupported(imp.tok_path + ": model." + key + " is not supported");
    }
  }
  LEOAM_RETURN_IF_ERROR(imp.read_vocab(model, member(tok, "added_tokens")));
  LEOAM_RETURN_IF_ERROR(imp.read_merges(model));
  LEOAM_RETURN_IF_ERROR(imp.read_normalizer_and_pre(tok, model));
  LEOAM_ASSIGN_OR_RETURN(const PostTokens post, read_post_processor(imp.tok_path, tok));

  auto token_id = [&](const std::string& text, const std::string& where) -> Result<int32_t> {
    auto it = imp.all_ids.find(text);
    if (it == imp.all_ids.end()) return corrupt(where + ": " + quoted_name(text) + " is not a token in tokenizer.json");
    return it->second;
  };
  std::vector<std::pair<std::string, GgufValue>> keys;
  auto add_id = [&](const char* key, const std::optional<std::string>& text, const std::string& where) -> Status {
    if (!text) return Status::ok();
    LEOAM_ASSIGN_OR_RETURN(const int32_t id, token_id(*text, where));
    keys.emplace_back(key, GgufValue::from_u32(static_cast<uint32_t>(id)));
    return Status::ok();
  };
  // The config names the tokens; the post-processor's template is the fallback.
  const std::optional<std::string> bos = config_token(config, "bos_token");
  const std::optional<std::string> eos = config_token(config, "eos_token");
  LEOAM_RETURN_IF_ERROR(add_id("tokenizer.ggml.bos_token_id", bos ? bos : post.bos,
                               bos ? imp.config_path + ": bos_token" : imp.tok_path + ": post_processor"));
  LEOAM_RETURN_IF_ERROR(add_id("tokenizer.ggml.eos_token_id", eos ? eos : post.eos,
                               eos ? imp.config_path + ": eos_token" : imp.tok_path + ": post_processor"));
  const std::optional<std::string> unk = optional_string(model, "unk_token");
  LEOAM_RETURN_IF_ERROR(add_id("tokenizer.ggml.unknown_token_id", unk ? unk : config_token(config, "unk_token"),
                               unk ? imp.tok_path + ": model.unk_token" : imp.config_path + ": unk_token"));
  LEOAM_RETURN_IF_ERROR(add_id("tokenizer.ggml.padding_token_id", config_token(config, "pad_token"),
                               imp.config_path + ": pad_token"));

  auto flag = [&](const char* key, bool fallback) {
    auto it = config.find(key);
    return it != config.end() && it->is_boolean() ? it->get<bool>() : fallback;
  };
  const bool add_bos = flag("add_bos_token", post.bos.has_value());
  const bool add_eos = flag("add_eos_token", post.eos.has_value());
  if ((add_bos && !bos && !post.bos) || (add_eos && !eos && !post.eos)) {
    return corrupt(imp.config_path + ": add_" + (add_bos && !bos && !post.bos ? "bos" : "eos") +
                   "_token is true but no such token is named");
  }

  // A model's embedding may have more rows than the tokenizer has tokens (Qwen's are padded to a
  // multiple of 64 or more): the rows past the last token become unused tokens, as llama.cpp's
  // converter names them, so that every id the model can produce has a token.
  if (n_vocab > 0 && static_cast<int64_t>(imp.tokens.size()) > n_vocab) {
    return invalid_argument(imp.tok_path + ": the tokenizer has " + std::to_string(imp.tokens.size()) +
                            " tokens, more than config.json's vocab_size " + std::to_string(n_vocab));
  }
  for (int64_t id = static_cast<int64_t>(imp.tokens.size()); id < n_vocab; ++id) {
    imp.tokens.push_back("[PAD" + std::to_string(id) + "]");
    imp.types.push_back(static_cast<int32_t>(TokenType::kUnused));
  }
  const size_t n = imp.tokens.size();
  out.set("tokenizer.ggml.model", GgufValue::from_string(imp.byte_level ? "gpt2" : "llama"));
  if (imp.byte_level) {
    out.set("tokenizer.ggml.pre", GgufValue::from_string(imp.pre));
    std::vector<std::string> merges;
    merges.reserve(imp.merges.size());
    for (const auto& [left, right] : imp.merges) merges.push_back(left + ' ' + right);
    out.set("tokenizer.ggml.merges", GgufValue::from_strings(std::move(merges)));
  } else {
    // SentencePiece merges the highest-scoring pair whose concatenation is a token; giving the
    // result of merge rank r the score -r makes that the lowest-ranked merge, as in BPE. Tokens
    // that no merge makes score below every merge.
    std::vector<float> scores(n, -static_cast<float>(imp.merges.size() + 1));
    std::vector<bool> scored(n, false);
    for (size_t r = 0; r < imp.merges.size(); ++r) {
      const auto id = static_cast<size_t>(imp.model_ids.at(imp.merges[r].first + imp.merges[r].second));
      if (scored[id]) continue;
      scored[id] = true;
      scores[id] = -static_cast<float>(r);
    }
    out.set("tokenizer.ggml.scores", GgufValue::from_f32s(scores));
    out.set("tokenizer.ggml.add_space_prefix", GgufValue::from_bool(imp.add_space_prefix));
  }
  out.set("tokenizer.ggml.tokens", GgufValue::from_strings(std::move(imp.tokens)));
  out.set("tokenizer.ggml.token_type", GgufValue::from_i32s(imp.types));
  // token_type has no strip flags, so leoam's own keys carry them (read by Vocab::from_gguf).
  if (!imp.lstrip_ids.empty()) out.set(kLstripIdsKey, GgufValue::from_i32s(imp.lstrip_ids));
  if (!imp.rstrip_ids.empty()) out.set(kRstripIdsKey, GgufValue::from_i32s(imp.rstrip_ids));
  if (imp.nfc) out.set(kNormalizerKey, GgufValue::from_string("nfc"));
  for (auto& [key, value] : keys) out.set(key, std::move(value));
  out.set("tokenizer.ggml.add_bos_token", GgufValue::from_bool(add_bos));
  out.set("tokenizer.ggml.add_eos_token", GgufValue::from_bool(add_eos));

  // chat_template: a string, or [{"name", "template"}] of which "default" is the main one.
  const json& templates = member(config, "chat_template");
  if (templates.is_string()) {
    out.set("tokenizer.chat_template", GgufValue::from_string(templates.get<std::string>()));
  } else if (templates.is_array()) {
    for (const json& t : templates) {
      const std::optional<std::string> name = t.is_object() ? optional_string(t, "name") : std::nullopt;
      const std::optional<std::string> text = t.is_object() ? optional_string(t, "template") : std::nullopt;
      if (!name || !text) continue;
      out.set(*name == "default" ? "tokenizer.chat_template" : "tokenizer.chat_template." + *name,
              GgufValue::from_string(*text));
    }
  }
  return Status::ok();
}

}  // namespace

Status import_hf_tokenizer(const std::string& dir, GgufWriter& out, int64_t n_vocab) {
  try {
    return import_files(dir, n_vocab, out);
  } catch (const std::exception& e) {  // the checks above should leave none; a net, not the plan
    return corrupt(dir + ": tokenizer.json or tokenizer_config.json has an unexpected layout: " + e.what());
  }
}

}  // namespace leoam
