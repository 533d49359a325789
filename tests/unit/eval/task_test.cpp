// Eval tasks: determinism, the needle's exact place, real-text haystacks, errors, and scoring.
// Most tests use a byte tokenizer (one token per byte, ids = bytes), so token counts are byte
// counts and can be pinned by hand; the layout test also runs on stories260K's SentencePiece vocab
// when ../shared/fixtures is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "eval/task.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace leoam::eval {
namespace {

constexpr int32_t kByteBos = 256;

std::vector<int32_t> byte_tokenize(std::string_view text) {
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

std::string bytes_of(const std::vector<int32_t>& ids, size_t begin, size_t end) {
  std::string s;
  for (size_t i = begin; i < end; ++i) s.push_back(static_cast<char>(ids[i]));
  return s;
}

// The passkey task's text, as task.cpp writes it (the test pins the format).
const std::string kPasskeyInstruction =
    "There is important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n";  // 144 bytes
const std::string kPasskeyQuestion = "\nWhat is the pass key? The pass key is";  // 38 bytes
std::string passkey_needle(const std::string& key) {  // 59 bytes for a 5-digit key
  return " The pass key is " + key + ". Remember it. " + key + " is the pass key.";
}

Sample must_make(const TaskParams& p, const TokenizeFn& tok = byte_tokenize, int32_t bos = kByteBos) {
  auto s = make_sample(p, tok, bos);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? std::move(s).value() : Sample{};
}

TaskParams params(std::string task, int64_t context, double depth, uint64_t seed) {
  TaskParams p;
  p.task = std::move(task);
  p.context_tokens = context;
  p.depth = depth;
  p.seed = seed;
  return p;
}

// stories260K's tokenizer, loaded once; null when the fixtures are absent.
const Tokenizer* stories_tokenizer() {
  static std::unique_ptr<Tokenizer> tok = [] {
    std::unique_ptr<Tokenizer> out;
    const std::string path = std::string(LEOAM_FIXTURES_DIR) + "/models/stories260K/stories260K.gguf";
    if (!std::filesystem::exists(path)) return out;
    auto gguf = GgufFile::open(path);
    if (!gguf.is_ok()) {
      ADD_FAILURE() << gguf.status().message();
      return out;
    }
    auto t = Tokenizer::from_gguf(*gguf);
    if (!t.is_ok()) {
      ADD_FAILURE() << t.status().message();
      return out;
    }
    return std::move(t).value();
  }();
  return tok.get();
}

// --- 1. determinism ---

TEST(EvalTask, SameParamsGiveTheSameSample) {
  for (const char* task : {"passkey", "niah_single"}) {
    const TaskParams p = params(task, 700, 0.3, 42);
    const Sample a = must_make(p);
    const Sample b = must_make(p);
    EXPECT_EQ(a.tokens, b.tokens) << task;
    EXPECT_EQ(a.needle_pos, b.needle_pos) << task;
    EXPECT_EQ(a.needle_tokens, b.needle_tokens) << task;
    EXPECT_EQ(a.answers, b.answers) << task;
    EXPECT_EQ(a.max_new_tokens, b.max_new_tokens) << task;
  }
}

TEST(EvalTask, GoldenAnswersPinTheSeeding) {
  // Pins the seed mixing (FNV-1a of the task name, splitmix64, mt19937_64 reduced by modulo), so
  // a sample set is the same on every platform and across releases.
  EXPECT_EQ(must_make(params("passkey", 400, 0.5, 0)).answers, std::vector<std::string>{"77757"});
  EXPECT_EQ(must_make(params("passkey", 400, 0.5, 1)).answers, std::vector<std::string>{"23115"});
  EXPECT_EQ(must_make(params("niah_single", 500, 0.5, 0)).answers, std::vector<std::string>{"9965298"});
}

TEST(EvalTask, SeedsChangeTheAnswerAndTheHaystack) {
  std::set<std::string> answers;
  std::set<std::vector<int32_t>> prompts;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const Sample s = must_make(params("passkey", 600, 0.5, seed));
    ASSERT_EQ(s.answers.size(), 1u);
    const int key = std::stoi(s.answers[0]);
    EXPECT_GE(key, 10000);
    EXPECT_LE(key, 99999);
    EXPECT_EQ(s.answers[0].size(), 5u);
    answers.insert(s.answers[0]);
    prompts.insert(s.tokens);
  }
  EXPECT_EQ(answers.size(), 10u);
  EXPECT_EQ(prompts.size(), 10u);

  // niah_single: the key word changes the question's length, so the needle moves too.
  std::set<int64_t> needle_positions;
  std::set<std::string> values;
  for (uint64_t seed = 0; seed < 32; ++seed) {
    const Sample s = must_make(params("niah_single", 800, 0.5, seed));
    ASSERT_EQ(s.answers.size(), 1u);
    EXPECT_EQ(s.answers[0].size(), 7u);
    values.insert(s.answers[0]);
    needle_positions.insert(s.needle_pos);
  }
  EXPECT_EQ(values.size(), 32u);
  EXPECT_GT(needle_positions.size(), 1u);
}

TEST(EvalTask, AnswerDependsOnlyOnTaskAndSeed) {
  // A depth/context sweep with one seed asks for the same value everywhere.
  const std::vector<std::string> answer = must_make(params("passkey", 300, 0.0, 7)).answers;
  EXPECT_EQ(must_make(params("passkey", 5000, 1.0, 7)).answers, answer);
  EXPECT_EQ(must_make(params("passkey", 900, 0.4, 7)).answers, answer);
  EXPECT_NE(must_make(params("niah_single", 900, 0.4, 7)).answers, answer);
}

// --- 2. the needle's place ---

// Checks the layout [BOS][instruction][haystack..][needle][..haystack][question] of a passkey
// sample, computing every position from the tokenizer independently of the task code.
void check_passkey_layout(const TokenizeFn& tok, int32_t bos, int64_t context, double depth, uint64_t seed) {
  SCOPED_TRACE("context " + std::to_string(context) + " depth " + std::to_string(depth));
  const Sample s = must_make(params("passkey", context, depth, seed), tok, bos);
  ASSERT_EQ(s.answers.size(), 1u);
  const std::vector<int32_t> instruction = tok(kPasskeyInstruction);
  const std::vector<int32_t> needle = tok(passkey_needle(s.answers[0]));
  const std::vector<int32_t> question = tok(kPasskeyQuestion);
  const int64_t prefix = (bos >= 0 ? 1 : 0) + static_cast<int64_t>(instruction.size());
  const int64_t n_haystack = context - prefix - static_cast<int64_t>(needle.size() + question.size());
  ASSERT_GE(n_haystack, 1);

  ASSERT_EQ(static_cast<int64_t>(s.tokens.size()), context);
  if (bos >= 0) {
    EXPECT_EQ(s.tokens[0], bos);
  }
  EXPECT_EQ(std::vector<int32_t>(s.tokens.begin() + (bos >= 0 ? 1 : 0), s.tokens.begin() + prefix), instruction);
  EXPECT_EQ(s.needle_pos, prefix + static_cast<int64_t>(std::floor(depth * static_cast<double>(n_haystack))));
  EXPECT_EQ(s.needle_tokens, static_cast<int64_t>(needle.size()));
  ASSERT_LE(s.needle_pos + s.needle_tokens, context);
  EXPECT_EQ(std::vector<int32_t>(s.tokens.begin() + s.needle_pos, s.tokens.begin() + s.needle_pos + s.needle_tokens),
            needle);
  EXPECT_EQ(std::vector<int32_t>(s.tokens.end() - static_cast<int64_t>(question.size()), s.tokens.end()), question);
}

TEST(EvalTask, NeedleSitsAtTheRequestedDepthByteTokenizer) {
  for (int64_t context : {243, 256, 1000, 4096}) {
    for (double depth : {0.0, 0.25, 0.5, 0.77, 1.0}) {
      check_passkey_layout(byte_tokenize, kByteBos, context, depth, 3);
    }
  }
  check_passkey_layout(byte_tokenize, -1, 500, 0.5, 3);  // no BOS

  // By hand: 1 + 144 prefix tokens, 1000 - 145 - 59 - 38 = 758 haystack tokens, floor(0.25 * 758) = 189.
  const Sample s = must_make(params("passkey", 1000, 0.25, 3));
  EXPECT_EQ(s.needle_pos, 145 + 189);
  EXPECT_EQ(s.needle_tokens, 59);
  EXPECT_EQ(s.max_new_tokens, 12);
  EXPECT_EQ(must_make(params("passkey", 1000, 0.0, 3)).needle_pos, 145);
  EXPECT_EQ(must_make(params("passkey", 1000, 1.0, 3)).needle_pos, 145 + 758);
}

TEST(EvalTask, NeedleSitsAtTheRequestedDepthStories260K) {
  const Tokenizer* tok = stories_tokenizer();
  if (tok == nullptr) GTEST_SKIP() << "stories260K.gguf not found under " << LEOAM_FIXTURES_DIR;
  const TokenizeFn fn = [tok](std::string_view t) { return tok->tokenize(t, false, false); };
  ASSERT_GE(tok->bos_id(), 0);
  for (int64_t context : {300, 1000, 5000}) {
    for (double depth : {0.0, 0.25, 0.5, 1.0}) {
      check_passkey_layout(fn, tok->bos_id(), context, depth, 11);
    }
  }
  // The needle reads back as its text. Each piece is tokenized on its own, so SentencePiece's
  // dummy prefix adds a space before it: "▁" "▁The" ..., which remove_leading_space drops again.
  const Sample s = must_make(params("passkey", 1000, 0.5, 11), fn, tok->bos_id());
  const std::vector<int32_t> needle(s.tokens.begin() + s.needle_pos, s.tokens.begin() + s.needle_pos + s.needle_tokens);
  EXPECT_EQ(tok->detokenize(needle, true), passkey_needle(s.answers[0]));
  EXPECT_EQ(tok->detokenize(needle, false), " " + passkey_needle(s.answers[0]));
}

TEST(EvalTask, NiahSingleNeedleAndQuestionNameTheSameKey) {
  const Sample s = must_make(params("niah_single", 2000, 0.6, 5));
  ASSERT_EQ(s.answers.size(), 1u);
  const std::string needle = bytes_of(s.tokens, static_cast<size_t>(s.needle_pos),
                                      static_cast<size_t>(s.needle_pos + s.needle_tokens));
  const std::string head = " One of the special magic numbers for ";
  const std::string tail = " is: " + s.answers[0] + ".";
  ASSERT_EQ(needle.substr(0, head.size()), head);
  ASSERT_EQ(needle.substr(needle.size() - tail.size()), tail);
  const std::string key = needle.substr(head.size(), needle.size() - head.size() - tail.size());
  const std::string question = "\nWhat is the special magic number for " + key +
                               " mentioned in the provided text? The special magic number for " + key +
                               " mentioned in the provided text is";
  EXPECT_EQ(bytes_of(s.tokens, s.tokens.size() - question.size(), s.tokens.size()), question);
  EXPECT_EQ(s.max_new_tokens, 16);
}

TEST(EvalTask, FillerHaystackHoldsNoDigits) {
  // The answer must be findable only in the needle: the prompt holds it exactly twice (the passkey
  // needle says it twice) and the filler holds no digits at all.
  const Sample s = must_make(params("passkey", 3000, 0.5, 9));
  const std::string prompt = bytes_of(s.tokens, 1, s.tokens.size());
  size_t count = 0;
  for (size_t pos = prompt.find(s.answers[0]); pos != std::string::npos; pos = prompt.find(s.answers[0], pos + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 2u);
  const std::string haystack = prompt.substr(144, static_cast<size_t>(s.needle_pos) - 145) +
                               prompt.substr(static_cast<size_t>(s.needle_pos + s.needle_tokens) - 1);
  for (char c : haystack) EXPECT_FALSE(c >= '0' && c <= '9') << haystack;
  EXPECT_NE(haystack.find("The "), std::string::npos);
}

// --- 3. real-text haystacks ---

// The haystack tokens of a byte-tokenized passkey sample (the needle taken out), as text.
std::string passkey_haystack(const Sample& s) {
  const size_t prefix = 1 + kPasskeyInstruction.size();
  const size_t needle_end = static_cast<size_t>(s.needle_pos + s.needle_tokens);
  return bytes_of(s.tokens, prefix, static_cast<size_t>(s.needle_pos)) +
         bytes_of(s.tokens, needle_end, s.tokens.size() - kPasskeyQuestion.size());
}

TEST(EvalTask, HaystackIsCutFromTheGivenText) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "word" + std::to_string(i) + " ";  // ~3.3 KB, every window unique
  std::set<size_t> starts;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    TaskParams p = params("passkey", 1200, 0.5, seed);
    p.haystack_text = text;
    const Sample s = must_make(p);
    const std::string hay = passkey_haystack(s);
    EXPECT_EQ(hay.size(), 1200u - 242u);
    const size_t at = text.find(hay);
    EXPECT_NE(at, std::string::npos) << "a long text is cut without wrapping";
    starts.insert(at);
  }
  EXPECT_GT(starts.size(), 1u) << "the seed picks the start";

  // A text shorter than the haystack wraps around.
  const std::string short_text = "Call me Ishmael. Some years ago, never mind how long precisely. ";
  TaskParams p = params("passkey", 1000, 0.3, 2);
  p.haystack_text = short_text;
  const std::string hay = passkey_haystack(must_make(p));
  std::string repeated;
  while (repeated.size() < hay.size() + 2 * short_text.size()) repeated += short_text;
  EXPECT_NE(repeated.find(hay), std::string::npos);
}

TEST(EvalTask, HaystackFromARealBookWithStories260K) {
  const Tokenizer* tok = stories_tokenizer();
  const std::string book = std::string(LEOAM_FIXTURES_DIR) + "/text/pg19_firstbook.txt";
  if (tok == nullptr || !std::filesystem::exists(book)) GTEST_SKIP() << "fixtures not found under " << LEOAM_FIXTURES_DIR;
  std::ifstream in(book, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  const TokenizeFn fn = [tok](std::string_view t) { return tok->tokenize(t, false, false); };
  TaskParams p = params("passkey", 2000, 0.5, 1);
  p.haystack_text = ss.str();
  const Sample s = must_make(p, fn, tok->bos_id());
  ASSERT_EQ(s.tokens.size(), 2000u);
  // The haystack before the needle is a contiguous run of the book's tokens.
  const std::vector<int32_t> all = fn(p.haystack_text);
  const int64_t prefix = 1 + static_cast<int64_t>(fn(kPasskeyInstruction).size());
  const std::vector<int32_t> before(s.tokens.begin() + prefix, s.tokens.begin() + s.needle_pos);
  ASSERT_FALSE(before.empty());
  EXPECT_NE(std::search(all.begin(), all.end(), before.begin(), before.end()), all.end());
}

// --- 4. errors ---

TEST(EvalTask, TooShortContextSaysHowManyTokensItNeeds) {
  // 1 BOS + 144 instruction + 59 needle + 38 question = 242 fixed tokens.
  auto r = make_sample(params("passkey", 242, 0.5, 0), byte_tokenize, kByteBos);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("need 242 tokens"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("243"), std::string::npos) << r.status().message();
  const Sample s = must_make(params("passkey", 243, 0.5, 0));  // one haystack token
  EXPECT_EQ(s.tokens.size(), 243u);
  EXPECT_EQ(s.needle_pos, 145);  // floor(0.5 * 1) = 0
  // Without BOS the fixed parts take 241 tokens.
  EXPECT_TRUE(make_sample(params("passkey", 242, 0.5, 0), byte_tokenize, -1).is_ok());
  auto no_bos = make_sample(params("passkey", 241, 0.5, 0), byte_tokenize, -1);
  ASSERT_FALSE(no_bos.is_ok());
  EXPECT_NE(no_bos.status().message().find("need 241 tokens"), std::string::npos) << no_bos.status().message();
}

TEST(EvalTask, RejectsUnknownTaskBadDepthAndBadContext) {
  auto unknown = make_sample(params("passkey2", 1000, 0.5, 0), byte_tokenize, kByteBos);
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("passkey2"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("passkey niah_single"), std::string::npos) << unknown.status().message();

  for (double depth : {-0.01, 1.01, std::numeric_limits<double>::quiet_NaN(),
                       std::numeric_limits<double>::infinity()}) {
    auto r = make_sample(params("passkey", 1000, depth, 0), byte_tokenize, kByteBos);
    ASSERT_FALSE(r.is_ok()) << depth;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("[0, 1]"), std::string::npos) << r.status().message();
  }
  for (int64_t context : {0, -5}) {
    auto r = make_sample(params("niah_single", context, 0.5, 0), byte_tokenize, kByteBos);
    ASSERT_FALSE(r.is_ok()) << context;
    EXPECT_NE(r.status().message().find("context_tokens"), std::string::npos) << r.status().message();
  }
  TaskParams p = params("passkey", 1000, 0.5, 0);
  p.haystack_text = "x";
  const TokenizeFn drops_x = [](std::string_view t) {
    return t == "x" ? std::vector<int32_t>{} : byte_tokenize(t);
  };
  auto empty = make_sample(p, drops_x, kByteBos);
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.status().message().find("no tokens"), std::string::npos) << empty.status().message();
}

// --- 5. scoring ---

TEST(EvalScore, TaskScoring) {
  EXPECT_EQ(task_scoring("passkey"), Scoring::kExactMatch);
  EXPECT_EQ(task_scoring("niah_single"), Scoring::kExactMatch);
}

TEST(EvalScore, ExactMatch) {
  const std::vector<std::string> a = {"58213"};
  EXPECT_EQ(score_output(Scoring::kExactMatch, a, "58213"), 1.0);
  EXPECT_EQ(score_output(Scoring::kExactMatch, a, " 58213."), 1.0);
  EXPECT_EQ(score_output(Scoring::kExactMatch, a, ": 58213 is the pass key"), 1.0);
  EXPECT_EQ(score_output(Scoring::kExactMatch, a, "\n**58213**\nWhat"), 1.0);
  EXPECT_EQ(score_output(Scoring::kExactMatch, a, " 58214."), 0.0);        // wrong digit
  EXPECT_EQ(score_output(Scoring::kExactMatch, a, " 582130"), 0.0);        // longer number
  EXPECT_EQ(score_output(Scoring::kExactMatch, a, " 5821"), 0.0);          // cut short
  EXPECT_EQ(score_output(Scoring::kExactMatch, a, " is 58213."), 0.0);     // answer not first
  EXPECT_EQ(score_output(Scoring::kExactMatch, a, "The pass key is 58213"), 0.0);
  EXPECT_EQ(score_output(Scoring::kExactMatch, a, ""), 0.0);
  EXPECT_EQ(score_output(Scoring::kExactMatch, {}, "58213"), 0.0);        // nothing expected
  EXPECT_EQ(score_output(Scoring::kExactMatch, {"Apple"}, " apple pie"), 1.0);  // ASCII case-insensitive
  // Several answers: in order, separated by whitespace or punctuation only.
  EXPECT_EQ(score_output(Scoring::kExactMatch, {"12", "34"}, " 12, 34."), 1.0);
  EXPECT_EQ(score_output(Scoring::kExactMatch, {"12", "34"}, " 34, 12."), 0.0);
  EXPECT_EQ(score_output(Scoring::kExactMatch, {"12", "34"}, " 12 and 34"), 0.0);
}

TEST(EvalScore, Recall) {
  const std::vector<std::string> a = {"123", "456", "789"};
  EXPECT_EQ(score_output(Scoring::kRecall, a, "nothing here"), 0.0);
  EXPECT_DOUBLE_EQ(score_output(Scoring::kRecall, a, "the value is 123."), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(score_output(Scoring::kRecall, a, "456, then 123"), 2.0 / 3.0);
  EXPECT_EQ(score_output(Scoring::kRecall, a, "123 456 789"), 1.0);
  EXPECT_EQ(score_output(Scoring::kRecall, a, "789x456y123"), 1.0);  // letters are boundaries
  // Embedded in a longer digit run: no match.
  EXPECT_EQ(score_output(Scoring::kRecall, a, "91234 4567 17890"), 0.0);
  EXPECT_DOUBLE_EQ(score_output(Scoring::kRecall, a, "91234 then 123"), 1.0 / 3.0);  // a later clean one counts
  EXPECT_EQ(score_output(Scoring::kRecall, {}, "123"), 0.0);
  EXPECT_EQ(score_output(Scoring::kRecall, {"Apple"}, "an APPLE"), 1.0);
}

}  // namespace
}  // namespace leoam::eval
