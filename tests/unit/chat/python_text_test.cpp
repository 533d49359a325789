// Python str semantics on UTF-8: float and string repr, whitespace, split, code points.
#include "chat/python_text.h"

#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace leoam::chat::py {
namespace {

using Parts = std::vector<std::string>;

TEST(PythonText, FormatFloatIsPythonRepr) {
  EXPECT_EQ(format_float(1.0), "1.0");
  EXPECT_EQ(format_float(0.1), "0.1");
  EXPECT_EQ(format_float(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(format_float(2.5), "2.5");
  EXPECT_EQ(format_float(-0.0), "-0.0");
  EXPECT_EQ(format_float(1e15), "1000000000000000.0");
  EXPECT_EQ(format_float(1e16), "1e+16");
  EXPECT_EQ(format_float(1.5e16), "1.5e+16");
  EXPECT_EQ(format_float(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(format_float(0.0001), "0.0001");
  EXPECT_EQ(format_float(0.00001), "1e-05");
  EXPECT_EQ(format_float(1.5e-300), "1.5e-300");
  EXPECT_EQ(format_float(5e-324), "5e-324");
  EXPECT_EQ(format_float(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(format_float(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(format_float(std::numeric_limits<double>::quiet_NaN()), "nan");
}

TEST(PythonText, ReprStringPicksQuotesAndEscapes) {
  EXPECT_EQ(repr_string("abc"), "'abc'");
  EXPECT_EQ(repr_string("it's"), "\"it's\"");
  EXPECT_EQ(repr_string("q\"'r"), "'q\"\\'r'");
  EXPECT_EQ(repr_string("a\nb\tc\\"), "'a\\nb\\tc\\\\'");
  EXPECT_EQ(repr_string(std::string("\x00\x7f", 2)), "'\\x00\\x7f'");
  EXPECT_EQ(repr_string("é日🎉"), "'é日🎉'");
  EXPECT_EQ(repr_string("\u00a0\u200b\u2028"), "'\\xa0\\u200b\\u2028'");
}

TEST(PythonText, StripUsesUnicodeWhitespaceOrGivenChars) {
  EXPECT_EQ(strip(" \t\n x y \u3000\u00a0", std::nullopt, true, true), "x y");
  EXPECT_EQ(strip("  x  ", std::nullopt, true, false), "x  ");
  EXPECT_EQ(strip("  x  ", std::nullopt, false, true), "  x");
  EXPECT_EQ(strip("xxhixx", std::string_view("x"), true, true), "hi");
  EXPECT_EQ(strip("ééhié", std::string_view("é"), true, true), "hi");
  EXPECT_EQ(strip("   ", std::nullopt, true, true), "");
}

TEST(PythonText, SplitLikePython) {
  EXPECT_EQ(split("a,b,,c", std::string_view(","), -1, false), (Parts{"a", "b", "", "c"}));
  EXPECT_EQ(split("  a  b ", std::nullopt, -1, false), (Parts{"a", "b"}));
  EXPECT_EQ(split("  a  b  c  ", std::nullopt, 1, false), (Parts{"a", "b  c  "}));
  EXPECT_EQ(split("  a  b  c  ", std::nullopt, 1, true), (Parts{"  a  b", "c"}));
  EXPECT_EQ(split("a,b,c", std::string_view(","), 1, true), (Parts{"a,b", "c"}));
  EXPECT_EQ(split("", std::nullopt, -1, false), Parts{});
  EXPECT_EQ(split("", std::string_view(","), -1, false), Parts{""});
  EXPECT_EQ(split_lines("a\nb\r\nc\rd\n"), (Parts{"a", "b", "c", "d"}));
}

TEST(PythonText, ReplaceAndCount) {
  EXPECT_EQ(replace("hello", "l", "L", -1), "heLLo");
  EXPECT_EQ(replace("hello", "l", "L", 1), "heLlo");
  EXPECT_EQ(replace("ab", "", "-", -1), "-a-b-");
  EXPECT_EQ(replace("ab", "", "-", 2), "-a-b");
  EXPECT_EQ(count_occurrences("aaaa", "aa"), 2);
  EXPECT_EQ(count_occurrences("日本", ""), 3);
}

TEST(PythonText, CodePointsAndCase) {
  EXPECT_EQ(count_code_points("naïve 日本 🎉"), 10u);
  EXPECT_EQ(code_point_offsets("aé"), (std::vector<size_t>{0, 1, 3}));
  EXPECT_EQ(to_upper("abc é"), "ABC é");  // ASCII only
  EXPECT_EQ(title("hello wORLD-x1y"), "Hello World-X1Y");
  EXPECT_EQ(capitalize("hELLO"), "Hello");
  std::string s;
  append_code_point(s, 0x1F389);
  EXPECT_EQ(s, "🎉");
  size_t n = 0;
  EXPECT_EQ(decode_code_point(s, 0, &n), 0x1F389u);
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(decode_code_point("\xff", 0, &n), 0xffu);  // malformed: the byte itself
  EXPECT_EQ(n, 1u);
}

}  // namespace
}  // namespace leoam::chat::py
