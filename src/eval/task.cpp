// Evaluation tasks: the prompt builder and the scorer (see task.h for the contract).
#include "eval/task.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>

#include "eval/heldout_tasks.h"
#include "eval/task_text.h"

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
// kNeedles places the needles after the first: like the answer, their depths depend only on
// (task, seed).
// kStraddle draws where a needle placed across a chunk edge is cut (TaskParams::straddle_chunk).
enum class Stream : uint64_t { kAnswer = 1, kHaystack = 2, kNeedles = 3, kStraddle = 4 };

std::mt19937_64 make_rng(std::string_view task, uint64_t seed, Stream stream) {
  return std::mt19937_64(mix64(mix64(seed ^ fnv1a64(task)) + static_cast<uint64_t>(stream)));
}

// --- tasks ---

constexpr std::array<std::string_view, 32> kKeyWords = {
    "apple",   "river",  "candle",  "falcon", "garden",  "harbor", "island",  "jacket",
    "kettle",  "lantern", "meadow", "needle", "orchard", "pepper", "quartz",  "rabbit",
    "saddle",  "tunnel", "umbrella", "valley", "walnut",  "yellow", "zephyr",  "anchor",
    "blanket", "copper", "dolphin", "engine", "feather", "glacier", "hammock", "ivory"};

// n distinct indices into a list of `size`, in draw order.
std::vector<size_t> draw_distinct(std::mt19937_64& rng, size_t n, size_t size) {
  std::vector<size_t> out;
  while (out.size() < n) {
    const auto i = static_cast<size_t>(draw(rng, 0, static_cast<int64_t>(size) - 1));
    if (std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
  }
  return out;
}

// n distinct 7-digit values, in draw order.
std::vector<std::string> draw_values(std::mt19937_64& rng, size_t n) {
  std::vector<std::string> out;
  while (out.size() < n) {
    std::string v = std::to_string(draw(rng, 1000000, 9999999));
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(std::move(v));
  }
  return out;
}

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

// The question of the single-answer NIAH tasks. RULER's answer prefix is "The special magic
// number for KEY mentioned in the provided text is"; this one repeats the needle's own words
// ("... for KEY is:"), so a model that retrieves by matching the text before the answer (an
// induction head, as small models have) can find the needle.
std::string niah_question(const std::string& key) {
  return "\nWhat is the special magic number for " + key +
         " mentioned in the provided text? The special magic number for " + key + " is:";
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
  t.question = niah_question(word);
  t.answers = {value};
  t.max_new_tokens = 16;
  return t;
}

// RULER's multi-needle NIAH variants: 4 needles of the niah_single form. 4: RULER's default
// num_needle_k / num_needle_v / num_needle_q for these tasks.
constexpr size_t kNiahNeedles = 4;

const char* kNiahInstruction =
    "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the numbers afterwards.\n";

std::string niah_needle(const std::string& key, const std::string& value) {
  return " One of the special magic numbers for " + key + " is: " + value + ".";
}

// One real needle (the first) and 3 distractors with other keys and values; asks for the first.
TaskText niah_multikey_text(std::mt19937_64& rng) {
  const std::vector<size_t> keys = draw_distinct(rng, kNiahNeedles, kKeyWords.size());
  const std::vector<std::string> values = draw_values(rng, kNiahNeedles);
  const std::string key(kKeyWords[keys[0]]);
  TaskText t;
  t.instruction = kNiahInstruction;
  t.needle = niah_needle(key, values[0]);
  for (size_t i = 1; i < kNiahNeedles; ++i) t.other_needles.push_back(niah_needle(std::string(kKeyWords[keys[i]]), values[i]));
  t.question = niah_question(key);
  t.answers = {values[0]};
  t.max_new_tokens = 16;
  return t;
}

// 4 needles for one key with 4 different values; asks for all of them.
TaskText niah_multivalue_text(std::mt19937_64& rng) {
  const std::string key(kKeyWords[static_cast<size_t>(draw(rng, 0, static_cast<int64_t>(kKeyWords.size()) - 1))]);
  const std::vector<std::string> values = draw_values(rng, kNiahNeedles);
  TaskText t;
  t.instruction = kNiahInstruction;
  t.needle = niah_needle(key, values[0]);
  for (size_t i = 1; i < kNiahNeedles; ++i) t.other_needles.push_back(niah_needle(key, values[i]));
  t.question = "\nWhat are all the special magic numbers for " + key +
               " mentioned in the provided text? The special magic numbers for " + key +
               " mentioned in the provided text are";
  t.answers = values;
  t.max_new_tokens = 48;  // 48: 4 x (7 digits + ", ") is ~36 tokens where digits are one token each
  return t;
}

// 4 needles for 4 different keys; asks for the numbers of all 4 keys.
TaskText niah_multiquery_text(std::mt19937_64& rng) {
  const std::vector<size_t> keys = draw_distinct(rng, kNiahNeedles, kKeyWords.size());
  const std::vector<std::string> values = draw_values(rng, kNiahNeedles);
  std::string key_list;  // "apple, river, candle, and falcon"
  for (size_t i = 0; i < kNiahNeedles; ++i) {
    if (i > 0) key_list += i + 1 == kNiahNeedles ? ", and " : ", ";
    key_list += kKeyWords[keys[i]];
  }
  TaskText t;
  t.instruction = kNiahInstruction;
  t.needle = niah_needle(std::string(kKeyWords[keys[0]]), values[0]);
  for (size_t i = 1; i < kNiahNeedles; ++i) t.other_needles.push_back(niah_needle(std::string(kKeyWords[keys[i]]), values[i]));
  t.question = "\nWhat are all the special magic numbers for " + key_list +
               " mentioned in the provided text? The special magic numbers for " + key_list +
               " mentioned in the provided text are";
  t.answers = values;
  t.max_new_tokens = 48;  // as niah_multivalue
  return t;
}

// Variable tracking: "VAR A = 12345." then 4 hops "VAR B = VAR A." ... later in the text; asks
// for every variable that holds the value. 4 hops: RULER's default num_hops.
constexpr size_t kVtHops = 4;

TaskText vt_text(std::mt19937_64& rng) {
  const std::string value = std::to_string(draw(rng, 10000, 99999));
  // 5 uppercase letters as in RULER: the filler never has two capitals in a row, so a name is found
  // only in its needles.
  std::vector<std::string> names;
  while (names.size() < kVtHops + 1) {
    std::string name;
    for (int i = 0; i < 5; ++i) name.push_back(static_cast<char>('A' + draw(rng, 0, 25)));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  TaskText t;
  t.instruction = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n";
  t.needle = " VAR " + names[0] + " = " + value + ".";
  for (size_t i = 1; i < names.size(); ++i) t.other_needles.push_back(" VAR " + names[i] + " = VAR " + names[i - 1] + ".");
  t.others_follow = true;
  t.question = "\nQuestion: Find all variables that are assigned the value " + value +
               " in the text above. Answer: According to the chain(s) of variable assignment in the text "
               "above, " + std::to_string(names.size()) + " variables are assigned the value " + value +
               ", they are:";
  t.answers = names;
  t.max_new_tokens = 40;  // 40: 5 names of up to ~5 tokens each, with separators
  return t;
}

// The other needles' seeded fractions in [0, 1], in 1e-6 steps (place_other_needles).
constexpr int64_t kFractionSteps = 1000000;

std::vector<int64_t> draw_fractions(std::mt19937_64& rng, size_t n) {
  std::vector<int64_t> f;
  for (size_t i = 0; i < n; ++i) f.push_back(draw(rng, 0, kFractionSteps));
  return f;
}

// Where the other needles go, as haystack token boundaries in [0, n_haystack] (boundary b: after
// haystack token b - 1). Each draws a seeded fraction f in [0, 1] (1e-6 steps, integer arithmetic
// so it is exact everywhere): b = floor(f * n_haystack), anywhere in the haystack; or, for a chain
// (others_follow), b = n_before + floor(f * (n_haystack - n_before)), sorted so the chain keeps its
// order after the first needle. Needles are inserted whole at boundaries, so none can split
// another; needles at one boundary sit side by side: the first needle, then the others in order.
std::vector<int64_t> place_other_needles(const TaskText& text, const std::vector<int64_t>& fractions,
                                         int64_t n_haystack, int64_t n_before) {
  std::vector<int64_t> at;
  for (const int64_t f : fractions) {
    at.push_back(text.others_follow ? n_before + f * (n_haystack - n_before) / kFractionSteps
                                    : f * n_haystack / kFractionSteps);
  }
  if (text.others_follow) std::sort(at.begin(), at.end());
  return at;
}

// --- needles across chunk edges (TaskParams::straddle_chunk) ---

// How many of the first needle's tokens come before the chunk edge: all but the last `tail` of
// the tokens that hold its answer's first occurrence (tail seeded, 1 or 2), so the edge cuts the
// answer's tail off; clamped to [1, needle tokens - 1], so the edge falls strictly inside.
Result<int64_t> straddle_split(const TaskText& text, const std::vector<int32_t>& needle, const TokenizeFn& tokenize,
                               std::mt19937_64& rng) {
  const std::string& answer = text.answers.front();
  const size_t at = text.needle.find(answer);
  if (at == std::string::npos || needle.size() < 2) {
    return internal_error("the first needle does not hold the answer '" + answer + "' in two tokens or more");
  }
  // The needle up to the answer's end, tokenized alone: where it agrees with the needle's tokens,
  // those end before the answer does; the first token that differs spans the answer's end.
  const std::vector<int32_t> head = tokenize(std::string_view(text.needle).substr(0, at + answer.size()));
  size_t same = 0;
  while (same < head.size() && same < needle.size() && head[same] == needle[same]) ++same;
  const int64_t last = same == head.size() ? static_cast<int64_t>(same) - 1 : static_cast<int64_t>(same);
  const int64_t tail = draw(rng, 1, 2);
  return std::clamp<int64_t>(last + 1 - tail, 1, static_cast<int64_t>(needle.size()) - 1);
}

// The haystack boundary for the first needle that puts a multiple of `chunk` tokens `split`
// tokens into it: of those boundaries, the one whose needle start is nearest the start at
// `n_before` (the requested depth), ties to the earlier. `others_at` are the other needles'
// boundaries and `other_tokens` their lengths: those before the boundary push the needle later.
// -1 when no boundary does.
int64_t straddle_boundary(int64_t n_before, int64_t n_haystack, int64_t n_prefix, int64_t chunk, int64_t split,
                          const std::vector<int64_t>& others_at, const std::vector<int64_t>& other_tokens) {
  const auto start = [&](int64_t b) {
    int64_t pos = n_prefix + b;
    for (size_t i = 0; i < others_at.size(); ++i) pos += others_at[i] < b ? other_tokens[i] : 0;
    return pos;
  };
  const int64_t wanted = start(n_before);
  int64_t best = -1;
  for (int64_t b = 0; b <= n_haystack; ++b) {
    if ((start(b) + split) % chunk != 0) continue;
    if (best < 0 || std::abs(start(b) - wanted) < std::abs(start(best) - wanted)) best = b;
  }
  return best;
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

void append_filler_sentences(std::mt19937_64& rng, int64_t n_sentences, std::string* text) {
  for (int64_t i = 0; i < n_sentences; ++i) {
    if (!text->empty()) text->push_back(' ');
    text->append(kFillerSentences[static_cast<size_t>(draw(rng, 0, static_cast<int64_t>(kFillerSentences.size()) - 1))]);
  }
}

// Exactly n tokens of seeded filler: one text, tokenized as one piece, grown until it is long
// enough. The first 64 sentences measure tokens per sentence, so one more pass is usually enough.
Result<std::vector<int32_t>> filler_haystack(int64_t n, std::mt19937_64& rng, const TokenizeFn& tokenize,
                                             FillerFn append_filler) {
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

const char* task_names() { return "passkey niah_single niah_multikey niah_multivalue niah_multiquery vt"; }

Scoring task_scoring(std::string_view task) {
  // Tasks that ask for several values score the fraction found; the others ask for one value.
  if (task == "niah_multivalue" || task == "niah_multiquery" || task == "vt") return Scoring::kRecall;
  return Scoring::kExactMatch;
}

Result<Sample> make_sample(const TaskParams& params, const TokenizeFn& tokenize, int32_t bos) {
  std::mt19937_64 answer_rng = make_rng(params.task, params.seed, Stream::kAnswer);
  TaskText text;
  if (params.task == "passkey") {
    text = passkey_text(answer_rng);
  } else if (params.task == "niah_single") {
    text = niah_single_text(answer_rng);
  } else if (params.task == "niah_multikey") {
    text = niah_multikey_text(answer_rng);
  } else if (params.task == "niah_multivalue") {
    text = niah_multivalue_text(answer_rng);
  } else if (params.task == "niah_multiquery") {
    text = niah_multiquery_text(answer_rng);
  } else if (params.task == "vt") {
    text = vt_text(answer_rng);
  } else if (std::optional<TaskText> heldout = heldout_task_text(params.task, answer_rng)) {
    text = std::move(*heldout);
  } else {
    return invalid_argument("unknown eval task '" + params.task + "'; known tasks: " + task_names() + " " +
                            heldout_task_names());
  }
  if (!(params.depth >= 0.0 && params.depth <= 1.0)) {  // also rejects NaN
    return invalid_argument("eval task '" + params.task + "': depth " + std::to_string(params.depth) +
                            " is outside [0, 1] (0: the needle at the haystack's start, 1: at its end)");
  }
  if (params.straddle_chunk < 0) {
    return invalid_argument("eval task '" + params.task + "': straddle_chunk is " +
                            std::to_string(params.straddle_chunk) + "; it must be 0 (off) or a chunk size in tokens");
  }
  if (params.context_tokens < 1) {
    return invalid_argument("eval task '" + params.task + "': context_tokens is " +
                            std::to_string(params.context_tokens) + "; it must be at least 1");
  }

  const std::vector<int32_t> instruction = tokenize(text.instruction);
  const std::vector<int32_t> needle = tokenize(text.needle);
  const std::vector<int32_t> question = tokenize(text.question);
  std::vector<std::vector<int32_t>> others;
  int64_t n_other_tokens = 0;
  for (const std::string& o : text.other_needles) {
    others.push_back(tokenize(o));
    n_other_tokens += static_cast<int64_t>(others.back().size());
  }
  const int64_t n_prefix = (bos >= 0 ? 1 : 0) + static_cast<int64_t>(instruction.size());
  const int64_t n_fixed = n_prefix + static_cast<int64_t>(needle.size() + question.size()) + n_other_tokens;
  const int64_t n_haystack = params.context_tokens - n_fixed;
  if (n_haystack < 1) {
    return invalid_argument("eval task '" + params.task + "': a context of " +
                            std::to_string(params.context_tokens) + " tokens is too short; the " +
                            (bos >= 0 ? "BOS, " : "") + "instruction, needle" +
                            (others.empty() ? "" : "s") + " and question need " +
                            std::to_string(n_fixed) + " tokens, plus at least 1 of haystack: use " +
                            std::to_string(n_fixed + 1) + " or more");
  }

  std::mt19937_64 haystack_rng = make_rng(params.task, params.seed, Stream::kHaystack);
  Result<std::vector<int32_t>> haystack =
      params.haystack_text.empty() ? filler_haystack(n_haystack, haystack_rng, tokenize,
                                                    text.filler ? text.filler : append_filler_sentences)
                                   : text_haystack(n_haystack, haystack_rng, tokenize, params.haystack_text);
  if (!haystack.is_ok()) return haystack.status().with_context("eval task '" + params.task + "'");

  // floor(depth * n): depth 0 puts the (first) needle before haystack token 0, depth 1 after the
  // last; other needles placed before it push it later by their lengths.
  int64_t n_before = std::min(
      n_haystack, static_cast<int64_t>(std::floor(params.depth * static_cast<double>(n_haystack))));

  // Every needle as (haystack boundary, order at that boundary): the first needle, then the others.
  std::mt19937_64 needles_rng = make_rng(params.task, params.seed, Stream::kNeedles);
  const std::vector<int64_t> fractions = draw_fractions(needles_rng, others.size());
  if (params.straddle_chunk > 0) {
    std::mt19937_64 straddle_rng = make_rng(params.task, params.seed, Stream::kStraddle);
    Result<int64_t> split = straddle_split(text, needle, tokenize, straddle_rng);
    if (!split.is_ok()) return split.status().with_context("eval task '" + params.task + "'");
    // A chain follows the first needle, so none of it comes before; others do not depend on n_before.
    const std::vector<int64_t> before_at =
        text.others_follow ? std::vector<int64_t>{} : place_other_needles(text, fractions, n_haystack, 0);
    std::vector<int64_t> other_tokens;
    for (const std::vector<int32_t>& o : others) other_tokens.push_back(static_cast<int64_t>(o.size()));
    n_before = straddle_boundary(n_before, n_haystack, n_prefix, params.straddle_chunk, *split, before_at,
                                 other_tokens);
    if (n_before < 0) {
      return invalid_argument("eval task '" + params.task + "': a context of " +
                              std::to_string(params.context_tokens) + " tokens has no place where a multiple of " +
                              std::to_string(params.straddle_chunk) +
                              " tokens falls inside the needle (straddle_chunk); use a longer context or a "
                              "smaller straddle_chunk");
    }
  }
  const std::vector<int64_t> other_at = place_other_needles(text, fractions, n_haystack, n_before);
  struct Placed {
    int64_t boundary;
    size_t order;  // 0: the first needle; i + 1: others[i]
  };
  std::vector<Placed> placed = {{n_before, 0}};
  for (size_t i = 0; i < others.size(); ++i) placed.push_back({other_at[i], i + 1});
  std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    return a.boundary != b.boundary ? a.boundary < b.boundary : a.order < b.order;
  });

  Sample s;
  s.tokens.reserve(static_cast<size_t>(params.context_tokens));
  if (bos >= 0) s.tokens.push_back(bos);
  s.tokens.insert(s.tokens.end(), instruction.begin(), instruction.end());
  int64_t done = 0;  // haystack tokens written
  for (const Placed& p : placed) {
    s.tokens.insert(s.tokens.end(), haystack->begin() + done, haystack->begin() + p.boundary);
    done = p.boundary;
    if (p.order == 0) s.needle_pos = static_cast<int64_t>(s.tokens.size());
    const std::vector<int32_t>& n = p.order == 0 ? needle : others[p.order - 1];
    s.tokens.insert(s.tokens.end(), n.begin(), n.end());
  }
  s.tokens.insert(s.tokens.end(), haystack->begin() + done, haystack->end());
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
