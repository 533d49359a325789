// Evaluation tasks: the prompt builder and the scorer (see task.h for the contract).
#include "eval/task.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <random>

namespace leoam::eval {
namespace {

// --- seeding: fully specified so a sample is the same on every platform and standard library ---

// FNV-1a 64: a stable hash of the task name (std::hash's values are unspecified).
uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 14695981039346656037ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// splitmix64's finalizer: spreads nearby seeds (0, 1, 2, ...) over the whole state space.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Independent random streams per (task, seed): the answer stream does not depend on the context
// length or depth, so a depth/context sweep with one seed asks for the same answer every time.
enum class Stream : uint64_t { kAnswer = 1, kHaystack = 2 };

std::mt19937_64 make_rng(std::string_view task, uint64_t seed, Stream stream) {
  return std::mt19937_64(mix64(mix64(seed ^ fnv1a64(task)) + static_cast<uint64_t>(stream)));
}

// A value in [lo, hi]. std::uniform_int_distribution's algorithm is implementation-defined, so
// reduce the (fully specified) mt19937_64 output ourselves; the modulo bias is below 2^-40 here.
int64_t draw(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(rng() % span);
}

// --- tasks ---

constexpr std::array<std::string_view, 32> kKeyWords = {
    "apple",   "river",  "candle",  "falcon", "garden",  "harbor", "island",  "jacket",
    "kettle",  "lantern", "meadow", "needle", "orchard", "pepper", "quartz",  "rabbit",
    "saddle",  "tunnel", "umbrella", "valley", "walnut",  "yellow", "zephyr",  "anchor",
    "blanket", "copper", "dolphin", "engine", "feather", "glacier", "hammock", "ivory"};

// The text pieces of one sample, before tokenization.
struct TaskText {
  std::string instruction;
  std::string needle;  // starts with a space so it tokenizes as words in the middle of text
  std::string question;
  std::vector<std::string> answers;
  int max_new_tokens = 16;
};

TaskText passkey_text(std::mt19937_64& rng) {
  const std::string key = std::to_string(draw(rng, 10000, 99999));
  TaskText t;
  t.instruction =
      "There is important info hidden inside a lot of irrelevant text. Find it and memorize it. "
      "I will quiz you about the important information there.\n";
  t.needle = " The pass key is " + key + ". Remember it. " + key + " is the pass key.";
  t.question = "\nWhat is the pass key? The pass key is";
  t.answers = {key};
  t.max_new_tokens = 12;  // " 58213." is at most ~8 tokens in any common vocab
  return t;
}

TaskText niah_single_text(std::mt19937_64& rng) {
  const std::string word(kKeyWords[static_cast<size_t>(draw(rng, 0, static_cast<int64_t>(kKeyWords.size()) - 1))]);
  const std::string value = std::to_string(draw(rng, 1000000, 9999999));
  TaskText t;
  // RULER's niah template.
  t.instruction =
      "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
      "I will quiz you about the numbers afterwards.\n";
  t.needle = " One of the special magic numbers for " + word + " is: " + value + ".";
  t.question = "\nWhat is the special magic number for " + word +
               " mentioned in the provided text? The special magic number for " + word +
               " mentioned in the provided text is";
  t.answers = {value};
  t.max_new_tokens = 16;
  return t;
}

// --- haystacks ---

// Plain filler in the spirit of RULER's "The grass is green. The sky is blue." noise: short,
// true, and unrelated to any needle (no digits, no "pass key", no "magic number").
constexpr std::array<std::string_view, 24> kFillerSentences = {
    "The grass is green.",
    "The sky is blue.",
    "The sun is yellow.",
    "Here we go.",
    "There and back again.",
    "The river flows to the sea.",
    "Birds sing in the morning.",
    "The wind moves the tall trees.",
    "Snow falls in the winter.",
    "The moon is bright tonight.",
    "A cat sleeps by the warm fire.",
    "The road goes on and on.",
    "Clouds drift slowly over the hills.",
    "The old clock ticks on the wall.",
    "Rain taps on the window.",
    "The bread is fresh and warm.",
    "A small boat rests on the lake.",
    "The children play in the park.",
    "Leaves turn red in the autumn.",
    "The stars come out at night.",
    "A dog runs along the beach.",
    "The garden is full of flowers.",
    "The mountain is tall and quiet.",
    "The tea is hot.",
};

void append_filler(std::mt19937_64& rng, int64_t n_sentences, std::string* text) {
  for (int64_t i = 0; i < n_sentences; ++i) {
    if (!text->empty()) text->push_back(' ');
    text->append(kFillerSentences[static_cast<size_t>(draw(rng, 0, static_cast<int64_t>(kFillerSentences.size()) - 1))]);
  }
}

// Exactly n tokens of seeded filler: one text, tokenized as one piece, grown until it is long
// enough. The first 64 sentences measure tokens per sentence, so one more pass is usually enough.
Result<std::vector<int32_t>> filler_haystack(int64_t n, std::mt19937_64& rng, const TokenizeFn& tokenize) {
  std::string text;
  int64_t n_sentences = 64;  // 64: enough to measure the tokenizer's rate, cheap to tokenize
  append_filler(rng, n_sentences, &text);
  std::vector<int32_t> tokens = tokenize(text);
  while (static_cast<int64_t>(tokens.size()) < n) {
    const size_t before = tokens.size();
    if (before == 0) return invalid_argument("the tokenizer gives no tokens for the filler text");
    const double per_sentence = static_cast<double>(before) / static_cast<double>(n_sentences);
    const double missing = static_cast<double>(n - static_cast<int64_t>(before));
    const int64_t more = static_cast<int64_t>(std::ceil(missing / per_sentence * 1.1)) + 16;
    append_filler(rng, more, &text);
    n_sentences += more;
    tokens = tokenize(text);
    if (tokens.size() <= before) return internal_error("the filler text's token count did not grow");
  }
  tokens.resize(static_cast<size_t>(n));
  return tokens;
}

// Exactly n tokens of the text's tokens from a seeded start; wraps to the text's beginning only
// when the text has fewer than n tokens.
Result<std::vector<int32_t>> text_haystack(int64_t n, std::mt19937_64& rng, const TokenizeFn& tokenize,
                                           std::string_view text) {
  const std::vector<int32_t> all = tokenize(text);
  const int64_t n_all = static_cast<int64_t>(all.size());
  if (n_all == 0) return invalid_argument("haystack text gives no tokens; pass a non-empty text");
  const int64_t start = n_all >= n ? draw(rng, 0, n_all - n) : draw(rng, 0, n_all - 1);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.push_back(all[static_cast<size_t>((start + i) % n_all)]);
  return out;
}

// --- scoring helpers ---

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space_or_punct(char c) {
  const auto u = static_cast<unsigned char>(c);
  return std::isspace(u) != 0 || std::ispunct(u) != 0;
}
char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

// Whether `answer` occurs in `out` at `pos` (ASCII case-insensitive) and is not part of a longer
// digit run: a digit at the answer's edge must not touch a digit in the output.
bool matches_at(std::string_view out, size_t pos, std::string_view answer) {
  if (answer.empty() || pos + answer.size() > out.size()) return false;
  for (size_t i = 0; i < answer.size(); ++i) {
    if (lower(out[pos + i]) != lower(answer[i])) return false;
  }
  if (is_digit(answer.front()) && pos > 0 && is_digit(out[pos - 1])) return false;
  const size_t end = pos + answer.size();
  if (is_digit(answer.back()) && end < out.size() && is_digit(out[end])) return false;
  return true;
}

bool contains(std::string_view out, std::string_view answer) {
  for (size_t pos = 0; pos + answer.size() <= out.size(); ++pos) {
    if (matches_at(out, pos, answer)) return true;
  }
  return false;
}

}  // namespace

const char* task_names() { return "passkey niah_single"; }

Scoring task_scoring(std::string_view task) {
  (void)task;  // passkey and niah_single both ask for one value; multi-value tasks will use kRecall
  return Scoring::kExactMatch;
}

Result<Sample> make_sample(const TaskParams& params, const TokenizeFn& tokenize, int32_t bos) {
  std::mt19937_64 answer_rng = make_rng(params.task, params.seed, Stream::kAnswer);
  TaskText text;
  if (params.task == "passkey") {
    text = passkey_text(answer_rng);
  } else if (params.task == "niah_single") {
    text = niah_single_text(answer_rng);
  } else {
    return invalid_argument("unknown eval task '" + params.task + "'; known tasks: " + task_names());
  }
  if (!(params.depth >= 0.0 && params.depth <= 1.0)) {  // also rejects NaN
    return invalid_argument("eval task '" + params.task + "': depth " + std::to_string(params.depth) +
                            " is outside [0, 1] (0: the needle at the haystack's start, 1: at its end)");
  }
  if (params.context_tokens < 1) {
    return invalid_argument("eval task '" + params.task + "': context_tokens is " +
                            std::to_string(params.context_tokens) + "; it must be at least 1");
  }

  const std::vector<int32_t> instruction = tokenize(text.instruction);
  const std::vector<int32_t> needle = tokenize(text.needle);
  const std::vector<int32_t> question = tokenize(text.question);
  const int64_t n_prefix = (bos >= 0 ? 1 : 0) + static_cast<int64_t>(instruction.size());
  const int64_t n_fixed = n_prefix + static_cast<int64_t>(needle.size() + question.size());
  const int64_t n_haystack = params.context_tokens - n_fixed;
  if (n_haystack < 1) {
    return invalid_argument("eval task '" + params.task + "': a context of " +
                            std::to_string(params.context_tokens) + " tokens is too short; the " +
                            (bos >= 0 ? "BOS, " : "") + "instruction, needle and question need " +
                            std::to_string(n_fixed) + " tokens, plus at least 1 of haystack: use " +
                            std::to_string(n_fixed + 1) + " or more");
  }

  std::mt19937_64 haystack_rng = make_rng(params.task, params.seed, Stream::kHaystack);
  Result<std::vector<int32_t>> haystack =
      params.haystack_text.empty() ? filler_haystack(n_haystack, haystack_rng, tokenize)
                                   : text_haystack(n_haystack, haystack_rng, tokenize, params.haystack_text);
  if (!haystack.is_ok()) return haystack.status().with_context("eval task '" + params.task + "'");

  // floor(depth * n): depth 0 puts the needle before haystack token 0, depth 1 after the last.
  const int64_t n_before = std::min(
      n_haystack, static_cast<int64_t>(std::floor(params.depth * static_cast<double>(n_haystack))));

  Sample s;
  s.tokens.reserve(static_cast<size_t>(params.context_tokens));
  if (bos >= 0) s.tokens.push_back(bos);
  s.tokens.insert(s.tokens.end(), instruction.begin(), instruction.end());
  s.tokens.insert(s.tokens.end(), haystack->begin(), haystack->begin() + n_before);
  s.needle_pos = static_cast<int64_t>(s.tokens.size());
  s.tokens.insert(s.tokens.end(), needle.begin(), needle.end());
  s.tokens.insert(s.tokens.end(), haystack->begin() + n_before, haystack->end());
  s.tokens.insert(s.tokens.end(), question.begin(), question.end());
  s.needle_tokens = static_cast<int64_t>(needle.size());
  s.answers = std::move(text.answers);
  s.max_new_tokens = text.max_new_tokens;
  if (static_cast<int64_t>(s.tokens.size()) != params.context_tokens) {
    return internal_error("eval task '" + params.task + "': built " + std::to_string(s.tokens.size()) +
                          " tokens, not " + std::to_string(params.context_tokens));
  }
  return s;
}

double score_output(Scoring scoring, const std::vector<std::string>& answers, std::string_view output) {
  if (answers.empty()) return 0.0;
  if (scoring == Scoring::kRecall) {
    size_t found = 0;
    for (const std::string& a : answers) found += contains(output, a) ? 1 : 0;
    return static_cast<double>(found) / static_cast<double>(answers.size());
  }
  // Exact match: each answer in turn is the next thing in the output, with only whitespace and
  // punctuation before it (", " between several answers).
  size_t pos = 0;
  for (const std::string& a : answers) {
    while (pos < output.size() && !matches_at(output, pos, a) && is_space_or_punct(output[pos])) ++pos;
    if (!matches_at(output, pos, a)) return 0.0;
    pos += a.size();
  }
  return 1.0;
}

}  // namespace leoam::eval
