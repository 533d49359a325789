// tool_call_parser.h: the calls in an answer, in each chat template family's syntax.
#include "server/tool_call_parser.h"

#include <gtest/gtest.h>

namespace leoam::server {
namespace {

const std::vector<std::string> kFunctions = {"weather", "time"};

TEST(ToolCallParser, EachFamilysSyntax) {
  auto hermes = parse_tool_calls(
      "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"time\", \"arguments\": {}}</tool_call>",
      kFunctions);
  ASSERT_TRUE(hermes.has_value());
  ASSERT_EQ(hermes->size(), 2u);
  EXPECT_EQ((*hermes)[0].name, "weather");
  EXPECT_EQ((*hermes)[0].arguments["city"], "Paris");
  EXPECT_EQ((*hermes)[1].name, "time");

  auto mistral = parse_tool_calls("[TOOL_CALLS] [{\"name\": \"time\", \"arguments\": \"{\\\"zone\\\": \\\"utc\\\"}\"}]", kFunctions);
  ASSERT_TRUE(mistral.has_value());
  ASSERT_EQ(mistral->size(), 1u);
  EXPECT_EQ((*mistral)[0].arguments["zone"], "utc");  // arguments given as a JSON string

  for (const char* llama : {"{\"name\": \"weather\", \"parameters\": {\"city\": \"Oslo\"}}",
                            "<|python_tag|>{\"name\": \"weather\", \"parameters\": {\"city\": \"Oslo\"}}"}) {
    auto c = parse_tool_calls(llama, kFunctions);
    ASSERT_TRUE(c.has_value()) << llama;
    EXPECT_EQ((*c)[0].arguments["city"], "Oslo");
  }
}

TEST(ToolCallParser, TextAndOtherFunctionsAreNotCalls) {
  for (const char* text : {"It is sunny in Paris.", "{\"name\": \"news\", \"arguments\": {}}",
                           "<tool_call>{\"name\": \"weather\", \"arguments\": {\"city\": \"Pa",  // cut short
                           "{\"name\": \"Lily\", \"age\": 3}", "[TOOL_CALLS] not json", ""}) {
    EXPECT_FALSE(parse_tool_calls(text, kFunctions).has_value()) << text;
  }
}

}  // namespace
}  // namespace leoam::server
