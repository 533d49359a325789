// Golden tests against llama.cpp's tokenizer test sets (models/ggml-vocab-*.gguf{,.inp,.out}):
// every case of every vocabulary must give exactly llama.cpp's ids.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace leoam {
namespace {

using test::load_vocab;
using test::printable;

struct VocabCases {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> expected;
};

// Reads <name>.gguf.inp/.out; false (with a failure) when they are malformed.
bool load_cases(const std::string& name, VocabCases* cases) {
  const std::string base = test::vocab_dir() + "/ggml-vocab-" + name + ".gguf";
  std::string inp, out;
  if (!test::read_file(base + ".inp", &inp) || !test::read_file(base + ".out", &out)) {
    ADD_FAILURE() << "cannot read " << base << ".inp/.out";
    return false;
  }
  cases->texts = test::split_cases(inp);
  cases->expected = test::parse_lines(out);
  if (cases->texts.size() != cases->expected.size()) {
    ADD_FAILURE() << base << ": " << cases->texts.size() << " cases in .inp but " << cases->expected.size()
                  << " lines in .out";
    return false;
  }
  return true;
}

// Each test gets the vocab named by the parameter and its cases; skipped when not in the fixtures.
class VocabFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    LEOAM_SKIP_WITHOUT_FIXTURES();
    name = GetParam();
    if (!std::filesystem::exists(test::vocab_dir() + "/ggml-vocab-" + name + ".gguf")) {
      GTEST_SKIP() << "ggml-vocab-" << name << ".gguf not in the fixtures";
    }
    ASSERT_TRUE(load_cases(name, &cases));
    tok = load_vocab(name);
    ASSERT_NE(tok, nullptr);
  }

  std::string name;
  VocabCases cases;
  const Tokenizer* tok = nullptr;
};

TEST_P(VocabFixtureTest, MatchesLlamaCpp) {
  size_t n_pass = 0;
  for (size_t i = 0; i < cases.texts.size(); ++i) {
    const std::vector<int32_t> got = tok->tokenize(cases.texts[i], /*add_bos=*/false, /*parse_special=*/false);
    if (got == cases.expected[i]) {
      ++n_pass;
    } else {
      ADD_FAILURE() << name << " case " << i << " " << printable(cases.texts[i]) << "\n  expected:"
                    << test::ids_to_string(cases.expected[i]) << "\n  got:     " << test::ids_to_string(got);
    }
  }
  RecordProperty("passed", static_cast<int>(n_pass));
  std::printf("[ vocab    ] %-15s %zu/%zu cases match\n", name.c_str(), n_pass, cases.texts.size());
}

// detokenize(tokenize(text)) gives the text back: exactly for BPE; for SPM after the space
// prefix is removed. Every case of these sets round-trips in llama.cpp.
TEST_P(VocabFixtureTest, RoundTrips) {
  for (size_t i = 0; i < cases.texts.size(); ++i) {
    const std::string& text = cases.texts[i];
    EXPECT_EQ(tok->detokenize(tok->tokenize(text, false, false)), text) << name << " case " << i << " " << printable(text);
  }
}

// bert-bge (WordPiece) is not supported; gpt-neox and baichuan have no test set.
INSTANTIATE_TEST_SUITE_P(Vocabs, VocabFixtureTest,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "falcon", "mpt", "starcoder", "refact",
                                           "deepseek-coder", "deepseek-llm"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

// llama.cpp's special-token set (from the TinyLlama test): "</s>" is parsed as EOS, and the SPM
// space prefix is added to the first fragment and after each special token.
TEST(TokenizerSpecial, TinyLlamaSet) {
  LEOAM_SKIP_WITHOUT_FIXTURES();
  const std::string base = test::vocab_dir() + "/ggml-vocab-tinyllama.gguf";
  std::string inp, out;
  ASSERT_TRUE(test::read_file(base + ".inp", &inp) && test::read_file(base + ".out", &out));
  const auto texts = test::split_cases(inp);
  const auto expected = test::parse_lines(out);
  ASSERT_EQ(texts.size(), 11u);
  ASSERT_EQ(expected.size(), texts.size());
  const Tokenizer* tok = load_vocab("llama-spm");
  ASSERT_NE(tok, nullptr);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(tok->tokenize(texts[i], /*add_bos=*/false, /*parse_special=*/true), expected[i])
        << "case " << i << " " << printable(texts[i]);
  }
}

void check_pg19(const std::string& vocab) {
  const std::string ids_path = test::vocab_dir() + "/pg19_firstbook.ggml-vocab-" + vocab + ".tokcpp";
  std::string text, ids_text;
  ASSERT_TRUE(test::read_file(test::fixtures_dir() + "/text/pg19_firstbook.txt", &text));
  ASSERT_TRUE(test::read_file(ids_path, &ids_text));
  const std::vector<int32_t> expected = test::parse_ids(ids_text);
  ASSERT_GT(expected.size(), 1000u);
  const Tokenizer* tok = load_vocab(vocab);
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> got = tok->tokenize(text, false, false);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], expected[i]) << "first difference at token " << i;
  }
  EXPECT_EQ(tok->detokenize(got), text);
}

TEST(TokenizerLongText, Pg19LlamaSpm) {
  LEOAM_SKIP_WITHOUT_FIXTURES();
  check_pg19("llama-spm");
}

TEST(TokenizerLongText, Pg19Gpt2) {
  LEOAM_SKIP_WITHOUT_FIXTURES();
  check_pg19("gpt-2");
}

}  // namespace
}  // namespace leoam
