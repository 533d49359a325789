#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace leoam {
namespace {

// Pushes pieces one by one and returns everything emitted, flush included unless stopped.
std::string run(const std::vector<std::string>& stops, const std::vector<std::string>& pieces, bool* stopped = nullptr) {
  StopMatcher m(stops);
  std::string out;
  for (const std::string& p : pieces) out += m.push(p);
  if (stopped != nullptr) *stopped = m.stopped();
  return out + m.flush();
}

TEST(StopMatcherTest, CutsBeforeTheFirstStopStringAcrossPieces) {
  bool stopped = false;
  EXPECT_EQ(run({"\n\n"}, {"Hello", " world", "\n", "\nmore"}, &stopped), "Hello world");
  EXPECT_TRUE(stopped);
  // The earliest of several stop strings wins, whichever is listed first.
  EXPECT_EQ(run({"END", "wor"}, {"Hello world END"}, &stopped), "Hello ");
  // Nothing after a stop is returned.
  StopMatcher m({"x"});
  EXPECT_EQ(m.push("abxcd"), "ab");
  EXPECT_EQ(m.push("efg"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcherTest, HoldsBackOnlyWhatCouldStartAStopString) {
  StopMatcher m({"</s>", "STOP"});
  EXPECT_EQ(m.push("abc<"), "abc");
  EXPECT_EQ(m.n_pending(), 1u);
  EXPECT_EQ(m.push("/"), "");
  EXPECT_EQ(m.push("x"), "</x");  // it did not become "</s>"
  EXPECT_EQ(m.push("ST"), "");
  EXPECT_EQ(m.flush(), "ST");      // the end: what was held back is text
  EXPECT_FALSE(m.stopped());
  // Without stop strings everything passes at once; empty ones are ignored.
  StopMatcher none({""});
  EXPECT_EQ(none.push("a<b"), "a<b");
  EXPECT_EQ(none.n_pending(), 0u);
}

TEST(StopMatcherTest, AStopStringInsideAHeldTailIsFound) {
  // "aab" with stop "ab": the held "a" and the next piece make the stop one byte later.
  bool stopped = false;
  EXPECT_EQ(run({"ab"}, {"xa", "a", "b", "c"}, &stopped), "xa");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(run({"ab"}, {"a", "a", "a"}, &stopped), "aaa");
  EXPECT_FALSE(stopped);
}

}  // namespace
}  // namespace leoam
