#include "engine/utf8_stream.h"

#include <gtest/gtest.h>

namespace leoam {
namespace {

TEST(Utf8StreamTest, AsciiPassesThrough) {
  Utf8Stream s;
  EXPECT_EQ(s.push("Hello"), "Hello");
  EXPECT_EQ(s.push(" world"), " world");
  EXPECT_EQ(s.flush(), "");
}

TEST(Utf8StreamTest, HoldsSplitThreeByteCharacter) {
  Utf8Stream s;  // "€" = E2 82 AC
  EXPECT_EQ(s.push("a\xE2"), "a");
  EXPECT_EQ(s.n_pending(), 1u);
  EXPECT_EQ(s.push("\x82"), "");
  EXPECT_EQ(s.n_pending(), 2u);
  EXPECT_EQ(s.push("\xAC!"), "\xE2\x82\xAC!");
  EXPECT_EQ(s.n_pending(), 0u);
}

TEST(Utf8StreamTest, HoldsSplitFourByteCharacter) {
  Utf8Stream s;  // U+1F600 = F0 9F 98 80
  EXPECT_EQ(s.push("\xF0\x9F"), "");
  EXPECT_EQ(s.push("\x98"), "");
  EXPECT_EQ(s.push("\x80"), "\xF0\x9F\x98\x80");
}

TEST(Utf8StreamTest, CompleteMultiByteIsNotHeld) {
  Utf8Stream s;
  EXPECT_EQ(s.push("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(s.push("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(Utf8StreamTest, InvalidBytesPassThroughUnchanged) {
  Utf8Stream s;
  EXPECT_EQ(s.push("\x80\x80"), "\x80\x80");   // stray continuation bytes
  EXPECT_EQ(s.push("\xE2"), "");
  EXPECT_EQ(s.push("A"), "\xE2" "A");          // a lead byte that cannot complete
  EXPECT_EQ(s.push("\xFF"), "\xFF");
}

TEST(Utf8StreamTest, FlushReturnsIncompleteTail) {
  Utf8Stream s;
  EXPECT_EQ(s.push("x\xE2\x82"), "x");
  EXPECT_EQ(s.flush(), "\xE2\x82");
  EXPECT_EQ(s.n_pending(), 0u);
}

}  // namespace
}  // namespace leoam
