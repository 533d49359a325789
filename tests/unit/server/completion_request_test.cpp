#include "server/completion_request.h"

#include <gtest/gtest.h>

#include <string>

namespace leoam::server {
namespace {

RequestDefaults defaults() {
  RequestDefaults d;
  d.sampler.temperature = 0.8f;
  d.sampler.top_k = 40;
  d.max_tokens = 32;
  d.max_tokens_limit = 512;
  return d;
}

CompletionRequest ok(const std::string& body, Endpoint endpoint = Endpoint::kCompletions) {
  ParsedRequest p = parse_completion_request(body, endpoint, defaults());
  EXPECT_TRUE(p.request.has_value()) << body << ": " << p.error.message;
  return p.request.value_or(CompletionRequest{});
}

// The request is refused with a 400 naming `param` and saying `says`.
void refused(const std::string& body, const std::string& param, const std::string& says,
             Endpoint endpoint = Endpoint::kCompletions) {
  ParsedRequest p = parse_completion_request(body, endpoint, defaults());
  ASSERT_FALSE(p.request.has_value()) << body;
  EXPECT_EQ(p.error.http_status, 400) << body;
  EXPECT_EQ(p.error.param, param) << body;
  EXPECT_NE(p.error.message.find(says), std::string::npos) << body << ": " << p.error.message;
  const nlohmann::json j = p.error.body();
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param));
}

TEST(CompletionRequestTest, FieldsAndDefaults) {
  CompletionRequest r = ok(R"({"prompt": "Once", "model": "x", "unknown_field": [1, 2]})");
  EXPECT_EQ(r.prompt, "Once");
  EXPECT_EQ(r.max_tokens, 32);
  EXPECT_FLOAT_EQ(r.sampler.temperature, 0.8f);
  EXPECT_EQ(r.sampler.top_k, 40);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.n_logprobs, -1);

  r = ok(R"({"prompt": ["Once"], "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 3, "min_p": 0.1,
             "seed": 42, "stop": "\n", "stream": true, "stream_options": {"include_usage": true}, "logprobs": 2,
             "n": 1, "presence_penalty": 0, "repeat_penalty": 1.1})");
  EXPECT_EQ(r.prompt, "Once");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampler.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.sampler.top_p, 0.5f);
  EXPECT_EQ(r.sampler.top_k, 3);
  EXPECT_FLOAT_EQ(r.sampler.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.sampler.repeat_penalty, 1.1f);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.n_logprobs, 2);

  r = ok(R"({"prompt": [1, 15, 300], "stop": ["a", "bc"]})");
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 15, 300}));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
}

TEST(CompletionRequestTest, ChatMessagesAndLogprobs) {
  CompletionRequest r = ok(R"({"messages": [{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                                                         {"type": "text", "text": "there"}]}],
                               "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3})",
                           Endpoint::kChat);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1]["content"], "Hi there");
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(r.n_logprobs, 3);
  EXPECT_EQ(ok(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", Endpoint::kChat).n_logprobs, 0);
  // A tool loop's history: an assistant turn that only called a tool (content null, as the
  // template sees it) and the tool's result.
  CompletionRequest loop = ok(R"({"messages": [{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                                                             "function": {"name": "w", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
      "tools": [{"type": "function", "function": {"name": "w"}}]})",
                              Endpoint::kChat);
  EXPECT_TRUE(loop.messages[1]["content"].is_null());
  EXPECT_EQ(loop.messages[1]["tool_calls"][0]["function"]["name"], "w");
  EXPECT_EQ(loop.tool_names, std::vector<std::string>{"w"});  // auto, the default
  EXPECT_FALSE(loop.tool_call);
}

TEST(CompletionRequestTest, BadRequestsNameTheirField) {
  refused("{not json", "", "not valid JSON");
  refused("[1, 2]", "", "must be a JSON object");
  refused("{}", "prompt", "'prompt' is required");
  refused(R"({"prompt": 5})", "prompt", "'prompt' must be a string");
  refused(R"({"prompt": ["a", "b"]})", "prompt", "one prompt a request");
  refused(R"({"prompt": [1, -2]})", "prompt", "non-negative");
  refused(R"({"prompt": "x", "max_tokens": "10"})", "max_tokens", "must be an integer");
  refused(R"({"prompt": "x", "max_tokens": 513})", "max_tokens", "must be in [0, 512], got 513");
  refused(R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens", "must be an integer");
  refused(R"({"prompt": "x", "temperature": "hot"})", "temperature", "must be a number");
  refused(R"({"prompt": "x", "temperature": 2.5})", "temperature", "must be in [0, 2]");
  refused(R"({"prompt": "x", "top_p": 0})", "top_p", "greater than 0");
  refused(R"({"prompt": "x", "stream": "yes"})", "stream", "must be a boolean");
  refused(R"({"prompt": "x", "stop": [1]})", "stop", "strings only");
  refused(R"({"prompt": "x", "n": 2})", "n", "must be in [1, 1]");
  refused(R"({"prompt": "x", "logprobs": 21})", "logprobs", "must be in [0, 20]");
  refused(R"({"prompt": "x", "echo": true})", "echo", "not supported");
  refused(R"({"prompt": "x", "frequency_penalty": 0.5})", "frequency_penalty", "not supported");
  refused(R"({"prompt": "x", "seed": "1"})", "seed", "must be an integer");
  refused(R"({"prompt": "x", "model": 3})", "model", "must be a string");
  refused(R"({"messages": []})", "messages", "non-empty array", Endpoint::kChat);
  refused(R"({"messages": [{"content": "x"}]})", "messages", "messages[0].role", Endpoint::kChat);
  refused(R"({"messages": [{"role": "user", "content": 3}]})", "messages", "messages[0].content", Endpoint::kChat);
  refused(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages", "only text",
          Endpoint::kChat);
  refused(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs",
          "needs 'logprobs': true", Endpoint::kChat);
}

}  // namespace
}  // namespace leoam::server
