// Eval tasks: determinism, the needle's exact place, real-text haystacks, errors, and scoring.
// Most tests use a byte tokenizer (one token per byte, ids = bytes), so token counts are byte
// counts and can be pinned by hand; the layout test also runs on stories260K's SentencePiece vocab
// when ../shared/fixtures is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "byte_tokens.h"
#include "eval/task.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace leoam::eval {
namespace {

using testing::byte_tokenize;
using testing::bytes_of;
using testing::kByteBos;

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
                               " mentioned in the provided text? The special magic number for " + key + " is:";
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
  EXPECT_EQ(task_scoring("niah_multikey"), Scoring::kExactMatch);
  EXPECT_EQ(task_scoring("niah_multivalue"), Scoring::kRecall);
  EXPECT_EQ(task_scoring("niah_multiquery"), Scoring::kRecall);
  EXPECT_EQ(task_scoring("vt"), Scoring::kRecall);
  EXPECT_STREQ(task_names(), "passkey niah_single niah_multikey niah_multivalue niah_multiquery vt");
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

// --- 6. multi-needle tasks (RULER's multikey, multivalue, multiquery NIAH and variable tracking) ---

const std::vector<std::string> kMultiTasks = {"niah_multikey", "niah_multivalue", "niah_multiquery", "vt"};

// The tasks' instructions, as task.cpp writes them (the test pins the format).
std::string instruction_of(const std::string& task) {
  if (task == "vt") return "Memorize and track the chain(s) of variable assignment hidden in the following text.\n";
  return "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
         "I will quiz you about the numbers afterwards.\n";
}

struct FoundNeedle {
  size_t pos = 0;  // token (= byte) index in the prompt
  size_t len = 0;
  std::string key;    // the niah word, or the vt variable assigned
  std::string value;  // 7 digits (niah); 5 digits or "VAR NAME" (vt)
};

// A run of `n` characters of `text` from `at` that all satisfy `is` (n = 0: one or more); its end,
// or npos when there is none.
template <typename Pred>
size_t run_of(const std::string& text, size_t at, size_t n, Pred is) {
  size_t end = at;
  while (end < text.size() && is(static_cast<unsigned char>(text[end])) && (n == 0 || end - at < n)) ++end;
  return (end > at && (n == 0 || end - at == n)) ? end : std::string::npos;
}

// `what` at `at`: the position after it, or npos.
size_t literal(const std::string& text, size_t at, std::string_view what) {
  return at != std::string::npos && text.compare(at, what.size(), what) == 0 ? at + what.size() : std::string::npos;
}

// The needle starting at `at`, if one does: " VAR NAME = (5 digits | VAR NAME)." for vt, else
// " One of the special magic numbers for WORD is: 7 digits.".
std::optional<FoundNeedle> needle_at(const std::string& prompt, size_t at, bool vt) {
  const auto upper = [](unsigned char c) { return c >= 'A' && c <= 'Z'; };
  const auto lower = [](unsigned char c) { return c >= 'a' && c <= 'z'; };
  const auto digit = [](unsigned char c) { return c >= '0' && c <= '9'; };
  FoundNeedle n;
  n.pos = at;
  size_t p = literal(prompt, at, vt ? " VAR " : " One of the special magic numbers for ");
  if (p == std::string::npos) return std::nullopt;
  const size_t key_end = vt ? run_of(prompt, p, 5, upper) : run_of(prompt, p, 0, lower);
  if (key_end == std::string::npos) return std::nullopt;
  n.key = prompt.substr(p, key_end - p);
  p = literal(prompt, key_end, vt ? " = " : " is: ");
  if (p == std::string::npos) return std::nullopt;
  size_t value_end = run_of(prompt, p, vt ? 5 : 7, digit);
  if (vt && value_end == std::string::npos) {  // or VAR NAME
    const size_t name = literal(prompt, p, "VAR ");
    value_end = name == std::string::npos ? name : run_of(prompt, name, 5, upper);
  }
  if (value_end == std::string::npos || literal(prompt, value_end, ".") == std::string::npos) return std::nullopt;
  n.value = prompt.substr(p, value_end - p);
  n.len = value_end + 1 - at;
  return n;
}

// Every needle in a byte-tokenized prompt, in prompt order, found by its text alone (no two
// overlap: the search goes on after each needle found).
std::vector<FoundNeedle> find_needles(const std::string& prompt, const std::string& task) {
  std::vector<FoundNeedle> out;
  for (size_t at = 0; at < prompt.size();) {
    if (const std::optional<FoundNeedle> n = needle_at(prompt, at, task == "vt")) {
      out.push_back(*n);
      at += n->len;
    } else {
      ++at;
    }
  }
  return out;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

// Checks one byte-tokenized multi-needle sample: its length, every needle whole and apart, the
// first needle at floor(depth * haystack tokens) of the haystack, and every answer found exactly
// where its needle is. Returns the number of haystack tokens.
int64_t check_multi_layout(const std::string& task, int64_t context, double depth, uint64_t seed) {
  SCOPED_TRACE(task + " context " + std::to_string(context) + " depth " + std::to_string(depth) + " seed " +
               std::to_string(seed));
  const Sample s = must_make(params(task, context, depth, seed));
  EXPECT_EQ(static_cast<int64_t>(s.tokens.size()), context);
  const std::string prompt = bytes_of(s.tokens, 0, s.tokens.size());
  const std::string instruction = instruction_of(task);
  const size_t prefix = 1 + instruction.size();
  EXPECT_EQ(s.tokens[0], kByteBos);
  EXPECT_EQ(prompt.substr(1, instruction.size()), instruction);
  const size_t question_at = prompt.rfind(task == "vt" ? "\nQuestion:" : "\nWhat ");
  EXPECT_NE(question_at, std::string::npos);
  if (question_at == std::string::npos) return 0;

  const std::vector<FoundNeedle> needles = find_needles(prompt, task);
  EXPECT_EQ(needles.size(), task == "vt" ? 5u : 4u);
  if (needles.size() != (task == "vt" ? 5u : 4u)) return 0;
  // Whole, inside the haystack's span, and apart (found needles never overlap; a needle cut by
  // another would not match at all and the count above would fail).
  size_t first = needles.size();
  std::string haystack;  // the body with every needle taken out
  size_t cursor = prefix;
  size_t hay_before_first = 0;
  for (size_t i = 0; i < needles.size(); ++i) {
    const FoundNeedle& n = needles[i];
    EXPECT_GE(n.pos, prefix);
    EXPECT_LE(n.pos + n.len, question_at);
    if (i > 0) { EXPECT_LE(needles[i - 1].pos + needles[i - 1].len, n.pos); }
    haystack += prompt.substr(cursor, n.pos - cursor);
    cursor = n.pos + n.len;
    if (static_cast<int64_t>(n.pos) == s.needle_pos) {
      first = i;
      hay_before_first = haystack.size();
      EXPECT_EQ(static_cast<int64_t>(n.len), s.needle_tokens);
    }
  }
  haystack += prompt.substr(cursor, question_at - cursor);
  EXPECT_LT(first, needles.size()) << "no needle starts at needle_pos " << s.needle_pos;
  if (first == needles.size()) return 0;
  const auto n_haystack = static_cast<int64_t>(haystack.size());
  // The requested depth: floor(depth * n_haystack) haystack tokens come before the first needle.
  EXPECT_EQ(static_cast<int64_t>(hay_before_first),
            static_cast<int64_t>(std::floor(depth * static_cast<double>(n_haystack))));
  // The filler holds nothing a needle's answer could be found in.
  for (size_t i = 0; i < haystack.size(); ++i) {
    EXPECT_FALSE(haystack[i] >= '0' && haystack[i] <= '9') << haystack;
    if (task == "vt" && i > 0) {
      const bool two_capitals = std::isupper(static_cast<unsigned char>(haystack[i - 1])) != 0 &&
                                std::isupper(static_cast<unsigned char>(haystack[i])) != 0;
      EXPECT_FALSE(two_capitals) << haystack;
    }
  }

  const std::string question = prompt.substr(question_at);
  const FoundNeedle& f = needles[first];
  auto needle_holding = [&](const std::string& what) {  // the needles whose text holds `what`
    size_t n = 0;
    for (const FoundNeedle& nd : needles) n += count_of(prompt.substr(nd.pos, nd.len), what);
    return n;
  };
  if (task == "vt") {
    // The chain in order after the first needle: A = value, B = A, C = B, ...
    EXPECT_EQ(first, 0u);
    EXPECT_EQ(s.answers.size(), 5u);
    if (s.answers.size() != 5u) return n_haystack;
    for (size_t i = 0; i < needles.size(); ++i) {
      EXPECT_EQ(needles[i].key, s.answers[i]);
      if (i > 0) { EXPECT_EQ(needles[i].value, "VAR " + s.answers[i - 1]); }
    }
    const std::string value = f.value;
    EXPECT_EQ(value.size(), 5u);
    EXPECT_EQ(count_of(prompt, value), 3u);  // the first needle and twice in the question
    EXPECT_EQ(count_of(question, value), 2u);
    EXPECT_NE(question.find(", 5 variables are assigned the value " + value + ", they are:"), std::string::npos);
    // Each name: in its own needle, and in the next hop's (the last has no next hop).
    for (size_t i = 0; i < 5; ++i) {
      const size_t expected = i + 1 < 5 ? 2 : 1;
      EXPECT_EQ(count_of(prompt, s.answers[i]), expected) << s.answers[i];
      EXPECT_EQ(needle_holding(s.answers[i]), expected) << s.answers[i];
    }
    return n_haystack;
  }

  // NIAH: each answer once in the whole prompt, and that once is its needle's value.
  std::set<std::string> keys;
  std::set<std::string> values;
  for (const FoundNeedle& n : needles) {
    keys.insert(n.key);
    values.insert(n.value);
    EXPECT_EQ(count_of(prompt, n.value), 1u) << n.value;
  }
  EXPECT_EQ(values.size(), 4u);
  for (const std::string& a : s.answers) {
    EXPECT_EQ(count_of(prompt, a), 1u) << a;
    EXPECT_EQ(needle_holding(a), 1u) << a;
  }
  EXPECT_EQ(s.answers.front(), f.value);  // the first answer is the requested-depth needle's
  if (task == "niah_multikey") {
    EXPECT_EQ(s.answers, std::vector<std::string>{f.value});
    EXPECT_EQ(keys.size(), 4u) << "3 distractors with other keys";
    EXPECT_EQ(question, "\nWhat is the special magic number for " + f.key +
                            " mentioned in the provided text? The special magic number for " + f.key + " is:");
  } else if (task == "niah_multivalue") {
    EXPECT_EQ(keys, std::set<std::string>{f.key}) << "one key for all 4";
    EXPECT_EQ(std::set<std::string>(s.answers.begin(), s.answers.end()), values);
    EXPECT_EQ(question, "\nWhat are all the special magic numbers for " + f.key +
                            " mentioned in the provided text? The special magic numbers for " + f.key +
                            " mentioned in the provided text are");
  } else {
    EXPECT_EQ(keys.size(), 4u);
    EXPECT_EQ(std::set<std::string>(s.answers.begin(), s.answers.end()), values);
    // The question lists the keys in answer order.
    std::string list;
    for (size_t i = 0; i < s.answers.size(); ++i) {
      for (const FoundNeedle& n : needles) {
        if (n.value == s.answers[i]) list += (i == 0 ? "" : i + 1 == s.answers.size() ? ", and " : ", ") + n.key;
      }
    }
    EXPECT_EQ(question, "\nWhat are all the special magic numbers for " + list +
                            " mentioned in the provided text? The special magic numbers for " + list +
                            " mentioned in the provided text are");
  }
  return n_haystack;
}

TEST(EvalMultiNeedle, SameSeedGivesTheSameSample) {
  for (const std::string& task : kMultiTasks) {
    const TaskParams p = params(task, 1500, 0.4, 42);
    const Sample a = must_make(p);
    const Sample b = must_make(p);
    EXPECT_EQ(a.tokens, b.tokens) << task;
    EXPECT_EQ(a.needle_pos, b.needle_pos) << task;
    EXPECT_EQ(a.needle_tokens, b.needle_tokens) << task;
    EXPECT_EQ(a.answers, b.answers) << task;
    // Seeds change the answers and the prompt; the answers depend only on (task, seed).
    std::set<std::vector<std::string>> answers;
    std::set<std::vector<int32_t>> prompts;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      const Sample s = must_make(params(task, 1500, 0.4, seed));
      answers.insert(s.answers);
      prompts.insert(s.tokens);
      EXPECT_EQ(must_make(params(task, 3000, 0.9, seed)).answers, s.answers) << task;
    }
    EXPECT_EQ(answers.size(), 8u) << task;
    EXPECT_EQ(prompts.size(), 8u) << task;
  }
  // Each task has its own answers for one seed.
  std::set<std::vector<std::string>> per_task;
  for (const std::string& task : kMultiTasks) per_task.insert(must_make(params(task, 1500, 0.4, 3)).answers);
  EXPECT_EQ(per_task.size(), kMultiTasks.size());
}

TEST(EvalMultiNeedle, FirstNeedleAtTheRequestedDepthAndAnswersInTheirNeedles) {
  for (const std::string& task : kMultiTasks) {
    for (int64_t context : {1000, 4096}) {
      for (double depth : {0.0, 0.25, 0.5, 0.77, 1.0}) {
        for (uint64_t seed : {1, 2, 3}) check_multi_layout(task, context, depth, seed);
      }
    }
  }
}

TEST(EvalMultiNeedle, OtherNeedlesSpreadOverTheHaystack) {
  // niah: the other needles land both before and after the first across seeds; vt: always after.
  for (const std::string& task : kMultiTasks) {
    size_t before = 0;
    size_t after = 0;
    for (uint64_t seed = 0; seed < 16; ++seed) {
      const Sample s = must_make(params(task, 4000, 0.5, seed));
      for (const FoundNeedle& n : find_needles(bytes_of(s.tokens, 0, s.tokens.size()), task)) {
        if (static_cast<int64_t>(n.pos) < s.needle_pos) ++before;
        if (static_cast<int64_t>(n.pos) > s.needle_pos) ++after;
      }
    }
    EXPECT_EQ(before + after, task == "vt" ? 64u : 48u) << task;
    if (task == "vt") {
      EXPECT_EQ(before, 0u);
    } else {
      EXPECT_GT(before, 0u) << task;
      EXPECT_GT(after, 0u) << task;
    }
  }
}

TEST(EvalMultiNeedle, ShortestContextHoldsEveryNeedle) {
  for (const std::string& task : kMultiTasks) {
    const int64_t n_fixed = 2000 - check_multi_layout(task, 2000, 0.5, 4);
    auto r = make_sample(params(task, n_fixed, 0.5, 4), byte_tokenize, kByteBos);
    ASSERT_FALSE(r.is_ok()) << task;
    EXPECT_NE(r.status().message().find("need " + std::to_string(n_fixed) + " tokens"), std::string::npos)
        << r.status().message();
    // One haystack token: every needle still whole, at boundary 0 or 1.
    EXPECT_EQ(check_multi_layout(task, n_fixed + 1, 0.5, 4), 1);
    EXPECT_EQ(check_multi_layout(task, n_fixed + 1, 1.0, 4), 1);
  }
}

TEST(EvalMultiNeedle, ScoringAndBudget) {
  EXPECT_EQ(must_make(params("niah_multikey", 1500, 0.5, 0)).max_new_tokens, 16);
  EXPECT_EQ(must_make(params("niah_multivalue", 1500, 0.5, 0)).max_new_tokens, 48);
  EXPECT_EQ(must_make(params("niah_multiquery", 1500, 0.5, 0)).max_new_tokens, 48);
  EXPECT_EQ(must_make(params("vt", 1500, 0.5, 0)).max_new_tokens, 40);
  for (const std::string& task : kMultiTasks) {
    const Sample s = must_make(params(task, 1500, 0.5, 0));
    std::string all;
    for (const std::string& a : s.answers) all += (all.empty() ? " " : ", ") + a;
    EXPECT_EQ(score_output(task_scoring(task), s.answers, all + "."), 1.0) << task;
    if (task_scoring(task) == Scoring::kRecall) {
      EXPECT_DOUBLE_EQ(score_output(Scoring::kRecall, s.answers, " " + s.answers[1]), 1.0 / s.answers.size());
    }
  }
}

// --- 7. needles across chunk edges (TaskParams::straddle_chunk) ---

const std::vector<std::string> kAllTasks = {"passkey", "niah_single", "niah_multikey", "niah_multivalue",
                                            "niah_multiquery", "vt"};

TaskParams straddled(std::string task, int64_t context, double depth, uint64_t seed, int64_t chunk) {
  TaskParams p = params(std::move(task), context, depth, seed);
  p.straddle_chunk = chunk;
  return p;
}

// The prompt without its first needle.
std::vector<int32_t> without_first_needle(const Sample& s) {
  std::vector<int32_t> out(s.tokens.begin(), s.tokens.begin() + s.needle_pos);
  out.insert(out.end(), s.tokens.begin() + s.needle_pos + s.needle_tokens, s.tokens.end());
  return out;
}

TEST(EvalStraddle, AChunkEdgeCutsTheAnswersLastOneOrTwoTokensOff) {
  // Byte tokens: the answer's first occurrence in the needle ends at byte a_end of it; the edge,
  // a multiple of the chunk, falls 1 or 2 tokens before that end, strictly inside the needle.
  for (const std::string& task : kAllTasks) {
    std::set<int64_t> tails;
    for (int64_t chunk : {3, 8, 16, 64, 100}) {
      for (double depth : {0.0, 0.3, 0.5, 0.77, 1.0}) {
        for (uint64_t seed = 0; seed < 4; ++seed) {
          SCOPED_TRACE(task + " chunk " + std::to_string(chunk) + " depth " + std::to_string(depth) + " seed " +
                       std::to_string(seed));
          const Sample s = must_make(straddled(task, 4096, depth, seed, chunk));
          const Sample plain = must_make(params(task, 4096, depth, seed));
          ASSERT_EQ(s.tokens.size(), 4096u);
          EXPECT_EQ(s.answers, plain.answers);
          EXPECT_EQ(s.needle_tokens, plain.needle_tokens);
          const std::string needle = bytes_of(s.tokens, static_cast<size_t>(s.needle_pos),
                                              static_cast<size_t>(s.needle_pos + s.needle_tokens));
          EXPECT_EQ(needle, bytes_of(plain.tokens, static_cast<size_t>(plain.needle_pos),
                                     static_cast<size_t>(plain.needle_pos + plain.needle_tokens)));
          const size_t at = needle.find(s.answers[0]);
          ASSERT_NE(at, std::string::npos) << needle;
          const int64_t answer_end = s.needle_pos + static_cast<int64_t>(at + s.answers[0].size());
          int64_t tail = 0;
          for (int64_t t : {1, 2}) {
            if ((answer_end - t) % chunk == 0) tail = t;
          }
          ASSERT_NE(tail, 0) << "no multiple of " << chunk << " 1 or 2 tokens before the answer's end, needle at "
                             << s.needle_pos << ": " << needle;
          tails.insert(tail);
          EXPECT_GT(answer_end - tail, s.needle_pos);
          EXPECT_LT(answer_end - tail, s.needle_pos + s.needle_tokens);
          // Nearest the requested depth: within half a chunk inside the haystack (a whole one where
          // the haystack's end clamps it), plus, for the tasks whose other needles may come before
          // it, the lengths of the 3 others (each under 64 bytes) that the nearest place may skip.
          const int64_t slack = (depth > 0.0 && depth < 1.0 ? chunk / 2 + 1 : chunk) +
                                (task == "passkey" || task == "niah_single" || task == "vt" ? 0 : 3 * 64);
          EXPECT_LE(std::abs(s.needle_pos - plain.needle_pos), slack);
          // Only the first needle moved: the rest of the prompt is the same (vt's chain is placed
          // after the first needle, so it moves with it).
          if (task != "vt") {
            EXPECT_EQ(without_first_needle(s), without_first_needle(plain));
          }
        }
      }
    }
    EXPECT_EQ(tails, (std::set<int64_t>{1, 2})) << task << ": the seed picks a tail of 1 or 2 tokens";
  }
  // The multi-needle layouts still hold (every needle whole and apart, each answer in its needle).
  for (const std::string& task : kMultiTasks) {
    const Sample s = must_make(straddled(task, 2000, 0.5, 2, 8));
    EXPECT_EQ(find_needles(bytes_of(s.tokens, 0, s.tokens.size()), task).size(), task == "vt" ? 5u : 4u) << task;
  }
}

TEST(EvalStraddle, TheEdgeCutsTheAnswerWithStories260K) {
  const Tokenizer* tok = stories_tokenizer();
  if (tok == nullptr) GTEST_SKIP() << "stories260K.gguf not found under " << LEOAM_FIXTURES_DIR;
  const TokenizeFn fn = [tok](std::string_view t) { return tok->tokenize(t, false, false); };
  // SentencePiece: the answer read up to the edge is incomplete, and complete 2 tokens later.
  for (const char* task : {"passkey", "niah_single", "niah_multikey"}) {
    for (int64_t chunk : {8, 64}) {
      for (double depth : {0.1, 0.5, 0.9}) {
        for (uint64_t seed : {0, 1}) {
          SCOPED_TRACE(std::string(task) + " chunk " + std::to_string(chunk) + " depth " + std::to_string(depth));
          const Sample s = must_make(straddled(task, 3000, depth, seed, chunk), fn, tok->bos_id());
          ASSERT_EQ(s.tokens.size(), 3000u);
          const auto text = [&](int64_t end) {
            return tok->detokenize(std::vector<int32_t>(s.tokens.begin() + s.needle_pos, s.tokens.begin() + end), true);
          };
          bool cut = false;
          for (int64_t edge = s.needle_pos + 1; edge < s.needle_pos + s.needle_tokens; ++edge) {
            if (edge % chunk != 0) continue;
            cut = cut || (text(edge).find(s.answers[0]) == std::string::npos &&
                          text(std::min(edge + 2, s.needle_pos + s.needle_tokens)).find(s.answers[0]) !=
                              std::string::npos);
          }
          EXPECT_TRUE(cut) << "no edge cuts the answer's tail off: " << text(s.needle_pos + s.needle_tokens);
        }
      }
    }
  }
}

TEST(EvalStraddle, OffChangesNothingAndBadChunksFail) {
  // straddle_chunk 0 is the default: the samples the other tests pin.
  for (const std::string& task : kAllTasks) {
    const Sample a = must_make(straddled(task, 1500, 0.4, 5, 0));
    const Sample b = must_make(params(task, 1500, 0.4, 5));
    EXPECT_EQ(a.tokens, b.tokens) << task;
    EXPECT_EQ(a.needle_pos, b.needle_pos) << task;
  }
  auto negative = make_sample(straddled("passkey", 1000, 0.5, 0, -8), byte_tokenize, kByteBos);
  ASSERT_FALSE(negative.is_ok());
  EXPECT_NE(negative.status().message().find("straddle_chunk is -8"), std::string::npos) << negative.status().message();
  // One haystack token gives two places for the needle: neither puts a multiple of 1000 in it.
  auto no_place = make_sample(straddled("passkey", 243, 0.5, 0, 1000), byte_tokenize, kByteBos);
  ASSERT_FALSE(no_place.is_ok());
  EXPECT_NE(no_place.status().message().find("no place where a multiple of 1000"), std::string::npos)
      << no_place.status().message();
}

}  // namespace
}  // namespace leoam::eval
