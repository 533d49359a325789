// The held-out tasks (heldout_tasks.h): built like the development tasks (exact length, the
// needle where asked, deterministic), but from fillers, needles and questions of their own.
// A byte tokenizer (byte_tokens.h), so token counts are byte counts.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "byte_tokens.h"
#include "eval/task.h"

namespace leoam::eval {
namespace {

constexpr int32_t kBos = testing::kByteBos;
constexpr auto& bytes = testing::byte_tokenize;
constexpr auto& text_of = testing::bytes_of;

Sample make(const std::string& task, int64_t ctx, double depth, uint64_t seed) {
  TaskParams p;
  p.task = task;
  p.context_tokens = ctx;
  p.depth = depth;
  p.seed = seed;
  Result<Sample> s = make_sample(p, bytes, kBos);
  EXPECT_TRUE(s.is_ok()) << task << ": " << s.status().message();
  return s.is_ok() ? std::move(s).value() : Sample{};
}

std::vector<std::string> heldout_tasks() {
  std::vector<std::string> out;
  std::istringstream in(heldout_task_names());
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

TEST(HeldoutTasks, AreNotDevelopmentTasks) {
  const std::vector<std::string> tasks = heldout_tasks();
  EXPECT_EQ(tasks, (std::vector<std::string>{"ledger", "logbook", "dialogue", "source"}));
  const std::string dev = std::string(" ") + task_names() + " ";
  for (const std::string& t : tasks) EXPECT_EQ(dev.find(" " + t + " "), std::string::npos) << t;
}

// Exact length, the needle at the depth, the answer inside the needle, and the question ending in
// the needle's words before the answer (what a model that retrieves by matching text needs).
TEST(HeldoutTasks, BuildExactSamplesWithTheAnswerInTheNeedle) {
  for (const std::string& task : heldout_tasks()) {
    for (const double depth : {0.0, 0.5, 1.0}) {
      const Sample s = make(task, 3000, depth, 7);
      ASSERT_EQ(s.tokens.size(), 3000u) << task;
      EXPECT_EQ(s.tokens.front(), kBos);
      ASSERT_EQ(s.answers.size(), 1u) << task;
      EXPECT_EQ(task_scoring(task), Scoring::kExactMatch) << task;
      const std::string needle = text_of(s.tokens, s.needle_pos, s.needle_pos + s.needle_tokens);
      // The answer after "is: " (source also sets it in code before that).
      const size_t is = needle.find("is: " + s.answers[0]);
      ASSERT_NE(is, std::string::npos) << task << ": " << needle;
      const size_t at = is + 4;
      const std::string prompt = text_of(s.tokens, 1, s.tokens.size());
      const std::string before = needle.substr(at - 20, 19);  // the 19 bytes before the answer's space
      ASSERT_GE(prompt.size(), before.size());
      EXPECT_EQ(prompt.substr(prompt.size() - before.size()), before) << task;
    }
  }
}

// The filler is each task's own: digits in the ledger, logbook and source; speakers' turns in the
// dialogue; none of the development tasks' sentences; and the needle's key never in the filler.
TEST(HeldoutTasks, FillersAreTheirOwn) {
  for (const std::string& task : heldout_tasks()) {
    const Sample s = make(task, 4000, 0.5, 3);
    const std::string before = text_of(s.tokens, 1, s.needle_pos);
    const std::string after = text_of(s.tokens, s.needle_pos + s.needle_tokens, s.tokens.size());
    EXPECT_EQ(before.find("The grass is green."), std::string::npos) << task;
    EXPECT_EQ(before.find("magic number"), std::string::npos) << task;
    const bool digits = before.find_first_of("0123456789") != std::string::npos;
    EXPECT_EQ(digits, task != "dialogue") << task;
    if (task == "dialogue") {
      EXPECT_NE(before.find("\nANNA: "), std::string::npos);
    }
    // The answer's value is in the needle, not in the filler around it.
    EXPECT_EQ(before.find(s.answers[0]), std::string::npos) << task;
    EXPECT_EQ(after.find(s.answers[0]), std::string::npos) << task;
  }
}

TEST(HeldoutTasks, AreDeterministicAndSeeded) {
  for (const std::string& task : heldout_tasks()) {
    std::set<std::string> answers;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      const Sample a = make(task, 1500, 0.4, seed);
      const Sample b = make(task, 1500, 0.4, seed);
      EXPECT_EQ(a.tokens, b.tokens) << task;
      answers.insert(a.answers[0]);
    }
    EXPECT_EQ(answers.size(), 8u) << task;
  }
  // Pins the seeding: a held-out set is the same on every platform and across releases.
  EXPECT_EQ(make("ledger", 1500, 0.5, 0).answers, std::vector<std::string>{"64019"});
  EXPECT_EQ(make("dialogue", 1500, 0.5, 0).answers, std::vector<std::string>{"477034"});
}

TEST(HeldoutTasks, UnknownTaskNamesBothLists) {
  TaskParams p;
  p.task = "ledgers";
  const Result<Sample> s = make_sample(p, bytes, kBos);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("ledger logbook dialogue source"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("passkey"), std::string::npos);
}

}  // namespace
}  // namespace leoam::eval
