// import_hf_tokenizer on small hand-written tokenizer.json files: the GGUF keys it writes, a round
// trip through GgufWriter -> GgufFile -> Tokenizer with golden ids, and the error for each kind
// of bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "../temp_dir.h"
#include "hf_tokenizer_json.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/hf_tokenizer_import.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace leoam {
namespace {

using json = nlohmann::json;

// Qwen2's Split regex, as Hugging Face writes it.
const char* kQwenRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A byte-level BPE: ids 0..255 are GPT-2's byte symbols (id b = byte b), then five merges
// (he 256, ll 257, hell 258, hello 259, Ġw 260), then an added special token (261) and an added
// plain one (262).
json byte_level_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[unicode::byte_to_utf8(static_cast<uint8_t>(b))] = b;
  const char* merged[] = {"he", "ll", "hell", "hello", "\xC4\xA0w"};
  for (int i = 0; i < 5; ++i) vocab[merged[i]] = 256 + i;
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 261}, {"content", "<|endoftext|>"}, {"special", true}},
        {{"id", 262}, {"content", "<tool>"}, {"special", false}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kQwenRegex}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        // Both spellings of a merge occur in real files.
        {"merges", {"h e", {"l", "l"}, "he ll", {"hell", "o"}, "\xC4\xA0 w"}}}},
  };
}

class HfImportTest : public ::testing::Test {
 protected:
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_.file(name), std::ios::binary) << text;
  }
  void write_tokenizer(const json& tok, const json& config = nullptr) {
    write("tokenizer.json", tok.dump());
    if (!config.is_null()) write("tokenizer_config.json", config.dump());
  }

  // Imports the folder into a GGUF image (then applies `edit` to it) and parses it back; fails
  // the test on an import error.
  const GgufFile& import_ok(const std::function<void(GgufWriter&)>& edit = nullptr) {
    GgufWriter writer;
    const Status s = import_hf_tokenizer(dir_.path(), writer);
    EXPECT_TRUE(s.is_ok()) << s.message();
    if (edit) edit(writer);
    bytes_ = writer.to_bytes();
    auto file = GgufFile::parse("imported.gguf", bytes_.data(), bytes_.size());
    EXPECT_TRUE(file.is_ok()) << file.status().message();
    gguf_ = std::make_unique<GgufFile>(std::move(file).value());
    return *gguf_;
  }
  std::unique_ptr<Tokenizer> load(const std::function<void(GgufWriter&)>& edit = nullptr) {
    auto tok = Tokenizer::from_gguf(import_ok(edit));
    EXPECT_TRUE(tok.is_ok()) << tok.status().message();
    return tok.is_ok() ? std::move(tok).value() : nullptr;
  }
  // The import's error; also checks that it wrote nothing.
  Status import_error() {
    GgufWriter writer;
    const Status s = import_hf_tokenizer(dir_.path(), writer);
    EXPECT_FALSE(s.is_ok());
    EXPECT_EQ(writer.to_bytes(), GgufWriter().to_bytes()) << "a failed import must leave the writer unchanged";
    return s;
  }
  std::string key_string(std::string_view key) {
    const GgufValue* v = gguf_->find(key);
    return v != nullptr && v->as_string() != nullptr ? *v->as_string() : "<absent>";
  }

  testing_util::TempDir dir_;
  std::vector<uint8_t> bytes_;
  std::unique_ptr<GgufFile> gguf_;
};

TEST_F(HfImportTest, ByteLevelBpeRoundTrip) {
  write_tokenizer(byte_level_tokenizer(),
                  {{"bos_token", nullptr},
                   {"eos_token", {{"__type", "AddedToken"}, {"content", "<|endoftext|>"}}},
                   {"pad_token", "<|endoftext|>"},
                   {"chat_template", "{{ messages }}"}});
  auto tok = load();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(key_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(key_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(key_string("tokenizer.chat_template"), "{{ messages }}");
  EXPECT_EQ(gguf_->find("tokenizer.ggml.scores"), nullptr);
  EXPECT_EQ(*gguf_->find("tokenizer.ggml.merges")->as_strings(),
            (std::vector<std::string>{"h e", "l l", "he ll", "hell o", "\xC4\xA0 w"}));
  const std::vector<int32_t> types = *gguf_->find("tokenizer.ggml.token_type")->to_i32s();
  ASSERT_EQ(types.size(), 263u);
  EXPECT_EQ(types[104], static_cast<int32_t>(TokenType::kNormal));
  EXPECT_EQ(types[261], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(types[262], static_cast<int32_t>(TokenType::kUserDefined));
  EXPECT_EQ(gguf_->find("tokenizer.ggml.bos_token_id"), nullptr);
  EXPECT_EQ(*gguf_->find("tokenizer.ggml.eos_token_id")->as_int(), 261);
  EXPECT_EQ(*gguf_->find("tokenizer.ggml.padding_token_id")->as_int(), 261);
  EXPECT_EQ(*gguf_->find("tokenizer.ggml.add_bos_token")->as_bool(), false);  // ByteLevel post-processor

  EXPECT_EQ(tok->eos_id(), 261);
  EXPECT_EQ(tok->bos_id(), -1);
  // "hello" merges fully; " world" gives Ġw and single bytes; digits split one by one (qwen2).
  EXPECT_EQ(tok->tokenize("hello world 42", /*add_bos=*/true, /*parse_special=*/true),
            (std::vector<int32_t>{259, 260, 'o', 'r', 'l', 'd', ' ', '4', '2'}));
  EXPECT_EQ(tok->tokenize("hello<|endoftext|><tool>", true, true), (std::vector<int32_t>{259, 261, 262}));
  EXPECT_EQ(tok->detokenize(tok->tokenize("hello world 42<tool>", false, true)), "hello world 42<tool>");
}

TEST_F(HfImportTest, TemplatePostProcessorAddsBos) {
  json tok = byte_level_tokenizer();
  // The template names its special tokens by key; special_tokens gives their text.
  tok["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "BOS"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"BOS", {{"id", "BOS"}, {"ids", {261}}, {"tokens", {"<|endoftext|>"}}}}}}};
  write_tokenizer(tok);  // no tokenizer_config.json: the template decides
  auto t = load();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*gguf_->find("tokenizer.ggml.add_bos_token")->as_bool(), true);
  EXPECT_EQ(t->bos_id(), 261);
  EXPECT_EQ(t->tokenize("he", true, false), (std::vector<int32_t>{261, 256}));
  EXPECT_EQ(t->tokenize("he", false, false), (std::vector<int32_t>{256}));

  // tokenizer_config.json's flag wins over the template.
  write("tokenizer_config.json", json{{"add_bos_token", false}}.dump());
  t = load();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->tokenize("he", true, false), (std::vector<int32_t>{256}));
}

TEST_F(HfImportTest, NullsReadAsDefaults) {
  json tok = byte_level_tokenizer();
  tok["model"]["ignore_merges"] = nullptr;
  tok["model"]["byte_fallback"] = nullptr;
  tok["added_tokens"][0]["lstrip"] = nullptr;
  tok["normalizer"] = nullptr;
  write_tokenizer(tok, {{"add_bos_token", nullptr}, {"chat_template", nullptr}});
  auto t = load();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->tokenize("hello", true, false), (std::vector<int32_t>{259}));
}

TEST_F(HfImportTest, LlamaBpeAndGpt2Names) {
  json tok = byte_level_tokenizer();
  tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  tok["model"]["ignore_merges"] = true;
  write_tokenizer(tok);
  import_ok();
  EXPECT_EQ(key_string("tokenizer.ggml.pre"), "llama-bpe");

  tok["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  tok["model"].erase("ignore_merges");
  write_tokenizer(tok);
  auto t = load();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(key_string("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_EQ(t->tokenize("hello", false, false), (std::vector<int32_t>{259}));
}

TEST_F(HfImportTest, SentencePieceStyleBpe) {
  // Llama 2's layout: <unk> <s> </s>, byte tokens, then pieces; "▁h" "▁he" from merges.
  json vocab = test::sentencepiece_vocab_base();
  vocab["\xE2\x96\x81"] = 259;
  vocab["h"] = 260;
  vocab["e"] = 261;
  vocab["\xE2\x96\x81h"] = 262;
  vocab["\xE2\x96\x81he"] = 263;
  json tok = {
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
        {{"id", 1}, {"content", "<s>"}, {"special", true}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer", test::sentencepiece_normalizer()},
      {"pre_tokenizer", nullptr},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", {"\xE2\x96\x81 h", "\xE2\x96\x81h e"}}}},
  };
  write_tokenizer(tok, {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"add_bos_token", true}});
  auto t = load();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(key_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(*gguf_->find("tokenizer.ggml.add_space_prefix")->as_bool(), true);
  const std::vector<int32_t> types = *gguf_->find("tokenizer.ggml.token_type")->to_i32s();
  EXPECT_EQ(types[0], static_cast<int32_t>(TokenType::kUnknown));
  EXPECT_EQ(types[1], static_cast<int32_t>(TokenType::kControl));
  EXPECT_EQ(types[3 + 'A'], static_cast<int32_t>(TokenType::kByte));
  EXPECT_EQ(types[262], static_cast<int32_t>(TokenType::kNormal));
  const std::vector<float> scores = *gguf_->find("tokenizer.ggml.scores")->to_f32s();
  EXPECT_EQ(scores[262], 0.0f);   // merge rank 0
  EXPECT_EQ(scores[263], -1.0f);  // merge rank 1
  EXPECT_LT(scores[260], -1.0f);  // made by no merge
  // "he h": a space is prepended; "A" falls back to its byte token.
  EXPECT_EQ(t->tokenize("he hA", true, false), (std::vector<int32_t>{1, 263, 262, 3 + 'A'}));
}

// Phi-3's chat tokens swallow the whitespace after them (rstrip), as transformers.js does it:
// all of JavaScript's whitespace, and the text after the token still gets its "▁" prefix.
TEST_F(HfImportTest, StripFlagsPhi3Style) {
  write_tokenizer(test::phi3_style_tokenizer(), {{"bos_token", "<s>"}, {"eos_token", "<|endoftext|>"}});
  auto t = load();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*gguf_->find(kLstripIdsKey)->to_i32s(), (std::vector<int32_t>{275, 276}));
  EXPECT_EQ(*gguf_->find(kRstripIdsKey)->to_i32s(), (std::vector<int32_t>{2, 272, 273, 274, 276}));
  const int32_t kSpace = 259, kHello = 269, kHi = 270;
  auto byte = [](uint8_t b) { return 3 + b; };
  const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
      {"<|user|>\n  Hello<|end|>\n<|assistant|>  Hi", {274, kHello, 273, 272, kHi}},
      {"<|endoftext|>\n Hello", {271, kSpace, byte('\n'), kHello}},  // no flag: the whitespace stays
      {"Hello  <tool>Hi", {kHello, 275, kHi}},
      {"Hi \t<|both|>\n Hi", {kHi, 276, kHi}},
      {"Hi</s> Hi", {kHi, 2, kHi}},
      {"<|end|>  <|assistant|>", {273, 272}},
      {"<|end|>\n", {273}},
      {"<|user|>\xE3\x80\x80\xC2\xA0Hi", {274, kHi}},  // U+3000, U+00A0: JavaScript whitespace
      {"Hi\xE2\x80\xA8<tool>", {kHi, 275}},            // U+2028
      // U+0085 is not JavaScript whitespace (Hugging Face's Rust tokenizers would strip it).
      {"<|user|>\xC2\x85Hi", {274, kSpace, byte(0xC2), byte(0x85), 260, 264}},
  };
  for (const auto& [text, ids] : cases) {
    EXPECT_EQ(t->tokenize(text, /*add_bos=*/false, /*parse_special=*/true), ids) << text;
  }
  // Without parse_special only the user-defined <tool> is split out, and it still strips.
  EXPECT_EQ(t->tokenize("Hello \t<tool>", false, false), (std::vector<int32_t>{kHello, 275}));
}

// Where the strip keys are present they decide, not llama.cpp's name rule for Phi-3; without them
// (GGUF files) the name rule strips ASCII whitespace only, as llama.cpp does.
TEST_F(HfImportTest, StripKeysOverrideTheNameRule) {
  auto named_phi3 = [](GgufWriter& w) { w.set("general.name", GgufValue::from_string("Phi-3-mini-4k-instruct")); };
  json tok = test::phi3_style_tokenizer();
  write_tokenizer(tok);
  auto t = load(named_phi3);
  ASSERT_NE(t, nullptr);
  // The name rule would give <tool> rstrip; its tokenizer.json does not.
  EXPECT_EQ(t->tokenize("<tool> Hi", false, true), (std::vector<int32_t>{275, 259, 270}));
  EXPECT_EQ(t->tokenize("<|user|>\xE3\x80\x80Hi", false, true), (std::vector<int32_t>{274, 270}));

  for (json& a : tok["added_tokens"]) a["lstrip"] = a["rstrip"] = false;
  write_tokenizer(tok);
  t = load(named_phi3);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(gguf_->find(kLstripIdsKey), nullptr);
  EXPECT_EQ(gguf_->find(kRstripIdsKey), nullptr);
  EXPECT_EQ(t->tokenize("<tool> Hi", false, true), (std::vector<int32_t>{275, 270}));
  EXPECT_EQ(t->tokenize("<|user|>\xE3\x80\x80Hi", false, true),
            (std::vector<int32_t>{274, 259, 3 + 0xE3, 3 + 0x80, 3 + 0x80, 260, 264}));
}

TEST_F(HfImportTest, MalformedStripIds) {
  write_tokenizer(test::phi3_style_tokenizer());
  const std::vector<std::pair<GgufValue, std::string>> cases = {
      {GgufValue::from_string("272"), "key 'leoam.tokenizer.rstrip_ids' holds \"272\", not an array of token ids"},
      {GgufValue::from_f32s({272.0f}), "key 'leoam.tokenizer.rstrip_ids' holds [1 x f32] 272, not an array of token ids"},
      {GgufValue::from_i32s({272, 277}),
       "key 'leoam.tokenizer.rstrip_ids' holds token id 277, outside the vocabulary [0, 277)"},
      {GgufValue::from_i32s({-1}), "key 'leoam.tokenizer.rstrip_ids' holds token id -1, outside the vocabulary"},
  };
  for (const auto& [value, expected] : cases) {
    const GgufFile& gguf = import_ok([&](GgufWriter& w) { w.set(kRstripIdsKey, value); });
    auto t = Tokenizer::from_gguf(gguf);
    ASSERT_FALSE(t.is_ok()) << expected;
    EXPECT_EQ(t.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(t.status().message().find("imported.gguf: " + expected), std::string::npos) << t.status().message();
  }
}

// An NFC normalizer (Qwen's) composes the text between special tokens before it is split.
TEST_F(HfImportTest, NfcNormalizerComposesText) {
  write_tokenizer(byte_level_tokenizer());
  auto tok = load();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(key_string(kNormalizerKey), "nfc");
  // "é" as e + U+0301 and as U+00E9 (bytes C3 A9, two byte tokens) give the same ids.
  EXPECT_EQ(tok->tokenize("e\xCC\x81", false, true), (std::vector<int32_t>{0xC3, 0xA9}));
  EXPECT_EQ(tok->tokenize("e\xCC\x81<|endoftext|>e\xCC\x81", false, true),
            (std::vector<int32_t>{0xC3, 0xA9, 261, 0xC3, 0xA9}));
  // Without the key the text is split as given.
  json plain = byte_level_tokenizer();
  plain["normalizer"] = nullptr;
  write_tokenizer(plain);
  auto raw = load();
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(gguf_->find(kNormalizerKey), nullptr);
  EXPECT_EQ(raw->tokenize("e\xCC\x81", false, true), (std::vector<int32_t>{'e', 0xCC, 0x81}));
}

TEST_F(HfImportTest, UnknownNormalizerKeyValue) {
  write_tokenizer(byte_level_tokenizer());
  auto t = Tokenizer::from_gguf(import_ok([](GgufWriter& w) { w.set(kNormalizerKey, GgufValue::from_string("nfkc")); }));
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("key 'leoam.tokenizer.normalizer' is 'nfkc', not supported; supported: nfc"),
            std::string::npos)
      << t.status().message();
}

TEST(UnicodeNfcTest, ComposesAndKeepsWhatIsComposed) {
  EXPECT_EQ(unicode::nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(unicode::nfc("e\xCC\x81te\xCC\x81"), "\xC3\xA9t\xC3\xA9");            // été
  EXPECT_EQ(unicode::nfc("A\xCC\x8A"), "\xC3\x85");                                  // Å
  EXPECT_EQ(unicode::nfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");              // 가 from its jamo
  EXPECT_EQ(unicode::nfc("\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD"), "\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD");  // already NFC
  EXPECT_EQ(unicode::nfc("a\xFF" "a\xCC\x81"), "a\xEF\xBF\xBD\xC3\xA1");  // an invalid byte -> U+FFFD; a + U+0301 -> á
  EXPECT_EQ(unicode::nfc("b\xCC\x81"), "b\xCC\x81");                          // no precomposed b with acute
}

// --- errors: each names the file and the problem ---

TEST_F(HfImportTest, MissingTokenizerJson) {
  const Status s = import_error();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find(dir_.file("tokenizer.json")), std::string::npos) << s.message();
}

TEST_F(HfImportTest, MalformedJson) {
  write("tokenizer.json", "{\"model\": {\"type\": \"BPE\",");
  Status s = import_error();
  EXPECT_NE(s.message().find("tokenizer.json: not valid JSON"), std::string::npos) << s.message();

  write_tokenizer(byte_level_tokenizer());
  write("tokenizer_config.json", "[1, 2");
  s = import_error();
  EXPECT_NE(s.message().find("tokenizer_config.json: not valid JSON"), std::string::npos) << s.message();
}

TEST_F(HfImportTest, NonBpeModelType) {
  for (const char* type : {"Unigram", "WordPiece"}) {
    json tok = byte_level_tokenizer();
    tok["model"]["type"] = type;
    write_tokenizer(tok);
    const Status s = import_error();
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    EXPECT_NE(s.message().find(std::string("model.type is '") + type + "'"), std::string::npos) << s.message();
  }
}

TEST_F(HfImportTest, NonDenseIds) {
  json tok = byte_level_tokenizer();
  tok["added_tokens"][1]["id"] = 263;  // leaves 262 empty
  write_tokenizer(tok);
  Status s = import_error();
  EXPECT_NE(s.message().find("not dense: no token has id 262"), std::string::npos) << s.message();

  tok = byte_level_tokenizer();
  tok["added_tokens"][1]["id"] = 100000;
  write_tokenizer(tok);
  s = import_error();
  EXPECT_NE(s.message().find("not dense: no token has id 262 (ids must run 0..n-1; the largest is 100000)"), std::string::npos) << s.message();

  tok = byte_level_tokenizer();
  tok["added_tokens"][1]["id"] = 5;  // an id that a different vocab token holds
  write_tokenizer(tok);
  s = import_error();
  EXPECT_NE(s.message().find("token id 5 is given to both"), std::string::npos) << s.message();
}

TEST_F(HfImportTest, UnknownRegexIsQuoted) {
  json tok = byte_level_tokenizer();
  tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = R"(\p{L}+|\p{N}{1,5})";
  write_tokenizer(tok);
  const Status s = import_error();
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find(R"("\\p{L}+|\\p{N}{1,5}")"), std::string::npos) << s.message();
}

TEST_F(HfImportTest, IgnoreMergesMustMatchThePreTokenizer) {
  json tok = byte_level_tokenizer();
  tok["model"]["ignore_merges"] = true;  // qwen2's regex, but Llama 3's merge rule
  write_tokenizer(tok);
  const Status s = import_error();
  EXPECT_NE(s.message().find("ignore_merges is true"), std::string::npos) << s.message();
}

TEST_F(HfImportTest, MergeNamingAMissingToken) {
  json tok = byte_level_tokenizer();
  tok["model"]["merges"].push_back("o w");  // "ow" is not a token
  write_tokenizer(tok);
  Status s = import_error();
  EXPECT_NE(s.message().find("model.merges[5] ('o', 'w') needs token 'ow'"), std::string::npos) << s.message();

  tok = byte_level_tokenizer();
  tok["model"]["merges"][0] = "h e x";
  write_tokenizer(tok);
  s = import_error();
  EXPECT_NE(s.message().find("model.merges[0] = 'h e x' is not two tokens"), std::string::npos) << s.message();
}

TEST_F(HfImportTest, UnsupportedComponents) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"normalizer", [](json& t) { t["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer {\"type\":\"Lowercase\"}"},
      {"prefix space", [](json& t) { t["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
       "add_prefix_space"},
      {"pre-tokenizer", [](json& t) { t["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "Whitespace"},
      {"single_word", [](json& t) { t["added_tokens"][0]["single_word"] = true; },
       "'<|endoftext|>' has single_word set"},
      {"post-processor", [](json& t) { t["post_processor"] = {{"type", "BertProcessing"}}; }, "'BertProcessing'"},
      {"odd normalizer", [](json& t) { t["normalizer"] = "NFC"; }, "normalizer \"NFC\" is not supported"},
      {"odd Split", [](json& t) { t["pre_tokenizer"]["pretokenizers"][0]["pattern"] = 7; }, "before ByteLevel"},
      {"SentencePiece style without byte_fallback",
       [](json& t) {
         t["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
         t["pre_tokenizer"] = nullptr;
       },
       "neither byte-level"},
  };
  for (const Case& c : cases) {
    json tok = byte_level_tokenizer();
    c.edit(tok);
    write_tokenizer(tok);
    const Status s = import_error();
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << c.what;
    EXPECT_NE(s.message().find(c.expected), std::string::npos) << c.what << ": " << s.message();
  }
}

TEST_F(HfImportTest, ConfigTokenNotInVocab) {
  write_tokenizer(byte_level_tokenizer(), {{"eos_token", "<|im_end|>"}});
  const Status s = import_error();
  EXPECT_NE(s.message().find("tokenizer_config.json: eos_token: '<|im_end|>' is not a token"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace leoam
