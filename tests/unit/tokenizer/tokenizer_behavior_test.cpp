// Behaviour beyond the golden sets: BOS/EOS, special tokens, detokenization, error messages, and
// the building blocks (UTF-8 helpers, GPT-2 byte table, pre-tokenizer splits, special partition).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"
#include "tokenizer_test_util.h"

namespace leoam {
namespace {

using test::load_vocab;

// --- building blocks (no fixtures needed) ---

TEST(Unicode, Gpt2ByteTable) {
  EXPECT_EQ(unicode::byte_to_utf8(' '), "\xC4\xA0");   // 'Ġ' U+0120
  EXPECT_EQ(unicode::byte_to_utf8('\n'), "\xC4\x8A");  // 'Ċ' U+010A
  EXPECT_EQ(unicode::byte_to_utf8('a'), "a");
  EXPECT_EQ(unicode::byte_to_codepoint(0xAD), 0x143u);  // the last moved byte
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(unicode::bpe_text_to_bytes(unicode::bytes_to_bpe_text(all)), all);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(unicode::codepoint_to_byte(unicode::byte_to_codepoint(static_cast<uint8_t>(b))), b);
}

TEST(Unicode, Utf8) {
  std::string s;
  for (uint32_t cp : {0x41u, 0xE9u, 0x2581u, 0x1F999u}) unicode::append_utf8(cp, &s);
  EXPECT_EQ(s, "A\xC3\xA9\xE2\x96\x81\xF0\x9F\xA6\x99");
  size_t pos = 0;
  EXPECT_EQ(unicode::decode_utf8(s, &pos), 0x41u);
  EXPECT_EQ(unicode::decode_utf8(s, &pos), 0xE9u);
  EXPECT_EQ(unicode::decode_utf8(s, &pos), 0x2581u);
  EXPECT_EQ(unicode::decode_utf8(s, &pos), 0x1F999u);
  EXPECT_EQ(pos, s.size());
  EXPECT_TRUE(unicode::is_valid_utf8(s));
  EXPECT_FALSE(unicode::is_valid_utf8("a\xC3"));            // truncated
  EXPECT_FALSE(unicode::is_valid_utf8("\xC0\xAF"));         // overlong
  EXPECT_FALSE(unicode::is_valid_utf8("\xED\xA0\x80"));     // surrogate
  EXPECT_EQ(unicode::sanitize_utf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
}

std::vector<std::string> split(const PreTokenizer& pre, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : pre.split(text)) out.emplace_back(p);
  return out;
}

TEST(PreTokenizer, Gpt2Split) {
  auto pre = PreTokenizer::for_name("gpt-2");
  ASSERT_TRUE(pre.is_ok()) << pre.status().message();
  EXPECT_EQ(split(*pre, "Hello world's  3.14!!"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " 3", ".", "14", "!!"}));
  // \s+(?!\S) leaves the last space to the next word; trailing whitespace stays together.
  EXPECT_EQ(split(*pre, "a   b  "), (std::vector<std::string>{"a", "  ", " b", "  "}));
  EXPECT_TRUE(pre->split("").empty());
}

TEST(PreTokenizer, ChainedRegexesSplitEachOthersPieces) {
  // The second regex only sees the pieces of the first, never across them.
  auto pre = PreTokenizer::from_patterns({R"(\p{N})", R"( ?\p{L}+| ?\p{N}+)"});
  ASSERT_TRUE(pre.is_ok()) << pre.status().message();
  EXPECT_EQ(split(*pre, "ab 123 cd"), (std::vector<std::string>{"ab", " ", "1", "2", "3", " cd"}));
}

TEST(PreTokenizer, Llama3AndQwen2Digits) {
  auto llama3 = PreTokenizer::for_name("llama-bpe");
  auto qwen2 = PreTokenizer::for_name("qwen2");
  ASSERT_TRUE(llama3.is_ok() && qwen2.is_ok());
  EXPECT_EQ(split(*llama3, "12345 I'M"), (std::vector<std::string>{"123", "45", " I", "'M"}));
  EXPECT_EQ(split(*qwen2, "123"), (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(split(*llama3, "a\n\nb"), (std::vector<std::string>{"a", "\n\n", "b"}));
}

// Golden pieces from DeepSeek-V3's three Split regexes run by JavaScript's engine (transformers.js).
TEST(PreTokenizer, DeepseekV3Splits) {
  auto pre = PreTokenizer::for_name("deepseek-v3");
  ASSERT_TRUE(pre.is_ok()) << pre.status().message();
  EXPECT_EQ(split(*pre, "Hello, \"world\" 1234567 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD"
                        "\xE3\x82\xB9\xE3\x83\x88\n\n  x.y +=  na\xC3\xAFve_ok"),
            (std::vector<std::string>{"Hello", ",", " \"", "world", "\"", " ", "123", "456", "7", " ",
                                      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88",  // 日本語のテキスト
                                      "\n\n", " ", " x", ".y", " +=", " ", " na\xC3\xAFve", "_ok"}));
}

TEST(PreTokenizer, AllNamedListsCompile) {
  for (const std::string& name : PreTokenizer::supported_names()) {
    auto pre = PreTokenizer::for_name(name);
    EXPECT_TRUE(pre.is_ok()) << name << ": " << pre.status().message();
  }
}

TEST(PreTokenizer, UnknownNameListsSupported) {
  auto pre = PreTokenizer::for_name("no-such-pre");
  ASSERT_FALSE(pre.is_ok());
  EXPECT_EQ(pre.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(pre.status().message().find("no-such-pre"), std::string::npos);
  EXPECT_NE(pre.status().message().find("llama-bpe"), std::string::npos);
}

TEST(PreTokenizer, BadPatternIsAnError) {
  auto pre = PreTokenizer::from_patterns({"(unclosed"});
  ASSERT_FALSE(pre.is_ok());
  EXPECT_NE(pre.status().message().find("(unclosed"), std::string::npos);
}

Vocab tiny_spm_vocab() {
  std::vector<TokenData> tokens = {
      {"<unk>", 0, TokenType::kUnknown, kAttrUnknown},
      {"<s>", 0, TokenType::kControl, kAttrControl},
      {"</s>", 0, TokenType::kControl, kAttrControl},
      {"<|user|>", 0, TokenType::kUserDefined, kAttrUserDefined},
      {"<|u", 0, TokenType::kUserDefined, kAttrUserDefined},
  };
  return Vocab::from_tokens(VocabKind::kSpm, std::move(tokens));
}

TEST(SpecialTokens, PartitionLongestFirst) {
  const Vocab vocab = tiny_spm_vocab();
  const auto parts = partition_special_tokens(vocab, "a</s>b<|user|>c<|u", /*parse_special=*/true);
  ASSERT_EQ(parts.size(), 6u);
  EXPECT_EQ(parts[0].text, "a");
  EXPECT_EQ(parts[1].token, 2);
  EXPECT_EQ(parts[2].text, "b");
  EXPECT_EQ(parts[3].token, 3);  // "<|user|>" beats its prefix "<|u"
  EXPECT_EQ(parts[4].text, "c");
  EXPECT_EQ(parts[5].token, 4);
}

TEST(SpecialTokens, ControlTokensNeedParseSpecialUserDefinedDoNot) {
  const Vocab vocab = tiny_spm_vocab();
  const auto parts = partition_special_tokens(vocab, "</s><|user|>", /*parse_special=*/false);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].text, "</s>");
  EXPECT_EQ(parts[1].token, 3);
  EXPECT_TRUE(partition_special_tokens(vocab, "", true).empty());
}

// --- with the real vocabularies ---

TEST(TokenizerFixture, BosAndEos) {
  LEOAM_SKIP_WITHOUT_FIXTURES();
  const Tokenizer* spm = load_vocab("llama-spm");
  ASSERT_NE(spm, nullptr);
  EXPECT_EQ(spm->bos_id(), 1);
  EXPECT_EQ(spm->eos_id(), 2);
  EXPECT_EQ(spm->tokenize("Hello world", true, false), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(spm->tokenize("", true, false), (std::vector<int32_t>{1}));
  EXPECT_TRUE(spm->tokenize("", false, false).empty());
  EXPECT_EQ(spm->tokenize(" ", false, false), (std::vector<int32_t>{259}));
  EXPECT_EQ(spm->detokenize(spm->tokenize("Hello world", true, false)), "Hello world");
  EXPECT_EQ(spm->detokenize({1, 15043, 3186}, /*remove_leading_space=*/false), " Hello world");
  EXPECT_TRUE(spm->is_eog(2));
  EXPECT_FALSE(spm->is_eog(1));
  EXPECT_EQ(spm->token_to_piece(1), "");        // control
  EXPECT_EQ(spm->token_to_piece(13), "\n");     // <0x0A>
  EXPECT_EQ(spm->token_to_piece(15043), " Hello");
  EXPECT_EQ(spm->token_text(15043), "\xE2\x96\x81Hello");
  EXPECT_EQ(spm->token_to_piece(-1), "");
  EXPECT_EQ(spm->token_to_piece(spm->n_vocab()), "");

  // gpt-2 declares no add_bos_token, and llama.cpp adds no BOS for it.
  const Tokenizer* gpt2 = load_vocab("gpt-2");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(gpt2->tokenize("Hello", true, false), gpt2->tokenize("Hello", false, false));
  EXPECT_TRUE(gpt2->is_eog(50256));
  EXPECT_EQ(gpt2->token_to_piece(gpt2->tokenize(" world", false, false).at(0)), " world");
  // <|endoftext|> is a single token only when special tokens are parsed.
  EXPECT_EQ(gpt2->tokenize("<|endoftext|>", false, true), (std::vector<int32_t>{50256}));
  EXPECT_GT(gpt2->tokenize("<|endoftext|>", false, false).size(), 1u);

  const Tokenizer* deepseek = load_vocab("deepseek-llm");
  ASSERT_NE(deepseek, nullptr);
  const auto ids = deepseek->tokenize("Hi", true, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 100000);  // add_bos_token = true
}

TEST(TokenizerFixture, InvalidUtf8DoesNotFail) {
  LEOAM_SKIP_WITHOUT_FIXTURES();
  const Tokenizer* spm = load_vocab("llama-spm");
  ASSERT_NE(spm, nullptr);
  // Byte fallback keeps stray bytes...
  const std::string stray = "ab\x80\x80" "cd\xE2\x96";
  EXPECT_EQ(spm->detokenize(spm->tokenize(stray, false, false)), stray);
  // ...but a lead byte swallows the bytes it announces, here half of the escaped space, which
  // then comes back as raw bytes of U+2581 (llama.cpp does the same).
  const std::string bad = "ab\xFF\xC3 cd\xE2\x96";
  EXPECT_FALSE(spm->tokenize(bad, false, false).empty());
  const Tokenizer* gpt2 = load_vocab("gpt-2");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_FALSE(gpt2->tokenize(bad, false, false).empty());
}

// --- errors, with GGUF files built in memory ---

Result<std::unique_ptr<Tokenizer>> tokenizer_from(const GgufWriter& writer, std::vector<uint8_t>* bytes) {
  *bytes = writer.to_bytes();
  auto gguf = GgufFile::parse("test.gguf", bytes->data(), bytes->size());
  if (!gguf.is_ok()) return gguf.status();
  return Tokenizer::from_gguf(*gguf);
}

GgufWriter bpe_writer(const std::string& pre) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::from_string("gpt2"));
  w.set("tokenizer.ggml.model", GgufValue::from_string("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::from_string(pre));
  w.set("tokenizer.ggml.tokens", GgufValue::from_strings({"a", "b", "ab", "\xC4\xA0", "\xC4\xA0" "ab"}));
  w.set("tokenizer.ggml.token_type", GgufValue::from_i32s({1, 1, 1, 1, 1}));
  w.set("tokenizer.ggml.merges", GgufValue::from_strings({"a b", "\xC4\xA0 ab"}));
  return w;
}

TEST(TokenizerErrors, NoTokenizerKeys) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::from_string("llama"));
  std::vector<uint8_t> bytes;
  auto tok = tokenizer_from(w, &bytes);
  ASSERT_FALSE(tok.is_ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kNotFound);
  EXPECT_NE(tok.status().message().find("tokenizer.ggml.model"), std::string::npos) << tok.status().message();
  EXPECT_NE(tok.status().message().find("test.gguf"), std::string::npos) << tok.status().message();
}

TEST(TokenizerErrors, UnknownPreTokenizer) {
  std::vector<uint8_t> bytes;
  auto tok = tokenizer_from(bpe_writer("made-up-pre"), &bytes);
  ASSERT_FALSE(tok.is_ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(tok.status().message().find("made-up-pre"), std::string::npos) << tok.status().message();
}

TEST(TokenizerErrors, UnknownModelMissingMergesBadIdsBadLengths) {
  std::vector<uint8_t> bytes;
  {
    GgufWriter w = bpe_writer("gpt-2");
    w.set("tokenizer.ggml.model", GgufValue::from_string("bert"));
    auto tok = tokenizer_from(w, &bytes);
    ASSERT_FALSE(tok.is_ok());
    EXPECT_NE(tok.status().message().find("bert"), std::string::npos);
  }
  {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::from_string("gpt2"));
    w.set("tokenizer.ggml.tokens", GgufValue::from_strings({"a"}));
    auto tok = tokenizer_from(w, &bytes);
    ASSERT_FALSE(tok.is_ok());
    EXPECT_NE(tok.status().message().find("tokenizer.ggml.merges"), std::string::npos) << tok.status().message();
  }
  {
    GgufWriter w = bpe_writer("gpt-2");
    w.set("tokenizer.ggml.eos_token_id", GgufValue::from_u32(99));
    auto tok = tokenizer_from(w, &bytes);
    ASSERT_FALSE(tok.is_ok());
    EXPECT_NE(tok.status().message().find("eos_token_id"), std::string::npos) << tok.status().message();
  }
  {
    GgufWriter w = bpe_writer("gpt-2");
    w.set("tokenizer.ggml.token_type", GgufValue::from_i32s({1, 1}));
    auto tok = tokenizer_from(w, &bytes);
    ASSERT_FALSE(tok.is_ok());
    EXPECT_NE(tok.status().message().find("token_type"), std::string::npos) << tok.status().message();
  }
  {
    GgufWriter w = bpe_writer("gpt-2");
    w.set("tokenizer.ggml.tokens", GgufValue::from_i32s({1, 2}));
    auto tok = tokenizer_from(w, &bytes);
    ASSERT_FALSE(tok.is_ok());
    EXPECT_NE(tok.status().message().find("array of strings"), std::string::npos) << tok.status().message();
  }
}

TEST(TokenizerErrors, UnusedSpecialIdOutsideVocabIsIgnored) {
  // Real files ship e.g. padding_token_id == n_vocab; llama.cpp loads them, and so must we.
  std::vector<uint8_t> bytes;
  GgufWriter w = bpe_writer("gpt-2");
  w.set("tokenizer.ggml.padding_token_id", GgufValue::from_u32(5));
  auto tok = tokenizer_from(w, &bytes);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_EQ((*tok)->tokenize("ab", false, false), (std::vector<int32_t>{2}));
}

TEST(TokenizerErrors, TinyBpeFromWriterWorks) {
  std::vector<uint8_t> bytes;
  auto tok = tokenizer_from(bpe_writer("gpt-2"), &bytes);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_EQ((*tok)->tokenize("ab ab", false, false), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ((*tok)->detokenize({2, 4}), "ab ab");
  EXPECT_EQ((*tok)->bos_id(), -1);
}

// Throughput on a 4.4 MB text; run with --gtest_also_run_disabled_tests.
TEST(TokenizerSpeed, DISABLED_KjvBible) {
  LEOAM_SKIP_WITHOUT_FIXTURES();
  std::string text;
  ASSERT_TRUE(test::read_file(test::fixtures_dir() + "/text/kjv_bible.txt", &text));
  for (const char* name : {"llama-spm", "gpt-2"}) {
    const Tokenizer* tok = load_vocab(name);
    ASSERT_NE(tok, nullptr);
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok->tokenize(text, true, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ speed    ] %-10s %zu bytes -> %zu tokens (with BOS) in %.2f s (%.2f MB/s)\n", name, text.size(),
                ids.size(), s, text.size() / s / 1e6);
    EXPECT_EQ(tok->detokenize(ids), text);
  }
}

}  // namespace
}  // namespace leoam
