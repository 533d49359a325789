// The built-in templates: pinned output for one conversation each, the same as python-jinja2's
// for a spread of conversations, and the error for an unknown name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat_test_util.h"

namespace leoam::chat {
namespace {

using nlohmann::json;
using testing_util::ReferenceCase;

const json kChat = json::parse(R"([{"role": "system", "content": " Be brief. "},
                                   {"role": "user", "content": "Hi"},
                                   {"role": "assistant", "content": "Hello!"},
                                   {"role": "user", "content": [{"type": "text", "text": "Bye"}, {"type": "image"}]}])");

std::string render_builtin(std::string_view name, bool add_generation_prompt, std::string_view bos,
                           std::string_view eos) {
  auto source = builtin_template(name);
  if (!source.is_ok()) return source.status().message();
  auto t = ChatTemplate::parse(*source);
  if (!t.is_ok()) return t.status().message();
  auto out = render_chat(*t, kChat, add_generation_prompt, bos, eos);
  return out.is_ok() ? *out : out.status().message();
}

TEST(BuiltinTemplates, Chatml) {
  EXPECT_EQ(render_builtin("chatml", true, "", "<|im_end|>"),
            "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
}

TEST(BuiltinTemplates, Llama2) {
  const std::string expected =
      "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Bye [/INST]";
  EXPECT_EQ(render_builtin("llama2", false, "<s>", "</s>"), expected);
  EXPECT_EQ(render_builtin("llama2", true, "<s>", "</s>"), expected);
}

TEST(BuiltinTemplates, Llama3) {
  EXPECT_EQ(render_builtin("llama3", true, "<|begin_of_text|>", "<|eot_id|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(BuiltinTemplates, Gemma) {
  EXPECT_EQ(render_builtin("gemma", true, "<bos>", "<eos>"),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
}

TEST(BuiltinTemplates, UnknownNameListsTheKnownOnes) {
  auto source = builtin_template("vicuna");
  ASSERT_FALSE(source.is_ok());
  EXPECT_EQ(source.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(source.status().message(), "no built-in chat template named 'vicuna'; known: chatml, llama2, llama3, gemma");
}

TEST(BuiltinTemplates, RenderLikePythonJinja2) {
  const std::vector<json> chats = {
      kChat,
      json::parse(R"([{"role": "user", "content": "only \"one\" ünïcode\n"}])"),
      json::parse(R"([{"role": "system", "content": "sys"}, {"role": "system", "content": "again"},
                      {"role": "user", "content": "u"}])"),
      json::parse(R"([{"role": "assistant", "content": "first"}, {"role": "user", "content": null}])"),
      json::array(),
  };
  std::vector<ReferenceCase> cases;
  std::vector<std::string> labels;
  for (const char* name : {"chatml", "llama2", "llama3", "gemma"}) {
    auto source = builtin_template(name);
    ASSERT_TRUE(source.is_ok());
    for (size_t i = 0; i < chats.size(); ++i) {
      for (bool add_generation_prompt : {false, true}) {
        cases.push_back({*source,
                         {{"messages", chats[i]}, {"add_generation_prompt", add_generation_prompt},
                          {"bos_token", "<s>"}, {"eos_token", "</s>"}},
                         {},
                         std::nullopt});
        labels.push_back(std::string(name) + " chat " + std::to_string(i) + (add_generation_prompt ? " +prompt" : ""));
      }
    }
  }
  std::string why;
  const auto expected = testing_util::render_with_jinja2(cases, &why);
  if (!expected) GTEST_SKIP() << why;
  ASSERT_EQ(expected->size(), cases.size());
  testing_util::expect_same_as_jinja2(cases, *expected, labels);
}

}  // namespace
}  // namespace leoam::chat
