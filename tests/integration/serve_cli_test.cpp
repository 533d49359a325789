// `leoam serve` on stories260K over real HTTP on the loopback: the endpoints, streamed against
// whole answers, structured output and tools, hosts and origins, every error case, concurrent
// streaming clients, and the API key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../unit/temp_dir.h"
#include "cli_runner.h"
#include "serve_client.h"
#include "server_process.h"

namespace leoam::testing_cli {
namespace {

using json = nlohmann::json;

// One server for the suite: stories260K, 512-token contexts, 4 requests at once.
class ServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kStoriesModel)) return;
    scratch_ = new testing_util::TempDir;
    server_ = new ServerProcess(scratch_->path(), {"-m", kStoriesModel, "-c", "512", "--parallel", "4", "--max-queue",
                                                   "16", "--max-body-mb", "0.05", "-t", "2", "--chat-template", "chatml",
                                                   "--allowed-hosts", "my.box", "--cors-origin", "https://app.example"});
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->stop(), 0) << server_->stderr_text();
    }
    delete server_;
    server_ = nullptr;
    delete scratch_;
    scratch_ = nullptr;
  }
  void SetUp() override {
    if (server_ == nullptr) GTEST_SKIP() << "fixture absent: " << kStoriesModel;
    ASSERT_TRUE(server_->started()) << server_->stderr_text();
  }
  static inline testing_util::TempDir* scratch_ = nullptr;
  static inline ServerProcess* server_ = nullptr;
};

TEST_F(ServeTest, HealthModelsAndMetrics) {
  auto c = server_->client();
  auto health = c->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto models = c->Get("/v1/models");
  ASSERT_TRUE(models);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "stories260K");
  EXPECT_EQ(m["data"][0]["meta"]["n_ctx"], 512);
  int status = 0;
  post_json(*c, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 5}}, &status);
  EXPECT_EQ(status, 200);
  auto metrics = c->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  EXPECT_GE(metric(metrics->body, "leoam_generated_tokens_total"), 5.0) << metrics->body;
  EXPECT_GE(metric(metrics->body, "leoam_prompt_tokens_total"), 5.0);
  EXPECT_EQ(metric(metrics->body, "leoam_requests_running"), 0.0);
  EXPECT_NE(metrics->body.find("leoam_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"}"), std::string::npos);
  EXPECT_NE(metrics->body.find("leoam_kv_resident_bytes{tier=\"disk\"}"), std::string::npos);
  // Histograms, as Prometheus users expect: every request in the +Inf bucket, counted once.
  for (const std::string h : {"leoam_time_to_first_token_seconds", "leoam_request_latency_seconds",
                              "leoam_time_per_output_token_seconds"}) {
    EXPECT_NE(metrics->body.find("# TYPE " + h + " histogram"), std::string::npos) << h;
    EXPECT_GE(metric(metrics->body, h + "_count"), 1.0) << h;
    EXPECT_EQ(metric(metrics->body, h + "_bucket{le=\"+Inf\"}"), metric(metrics->body, h + "_count")) << h;
  }
  EXPECT_EQ(metric(metrics->body, "leoam_client_disconnects_total"), 0.0);
}

// response_format: even stories260K, which knows no JSON, answers with a JSON object, and with a
// value of a schema: whole, streamed and in chat, within max_tokens.
TEST_F(ServeTest, StructuredOutputParsesAndMatchesItsSchema) {
  auto c = server_->client();
  const json schema = json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
      "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "minItems": 1, "maxItems": 3},
      "happy": {"type": "boolean"}}, "required": ["name", "age", "pets", "happy"]})");
  const json as_schema = {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", schema}}}};
  const auto check_person = [](const std::string& text) {
    const json j = json::parse(text, nullptr, false);
    ASSERT_TRUE(j.is_object()) << text;
    EXPECT_EQ(j.size(), 4u) << text;
    EXPECT_TRUE(j["name"].is_string() && j["name"].get<std::string>().size() <= 12) << text;
    EXPECT_TRUE(j["age"].is_number_integer()) << text;
    EXPECT_TRUE(j["pets"].is_array() && !j["pets"].empty() && j["pets"].size() <= 3) << text;
    EXPECT_TRUE(j["happy"].is_boolean()) << text;
  };
  for (int seed : {1, 2, 3}) {
    int status = 0;
    const json object = post_json(*c, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 40},
                                                         {"seed", seed}, {"response_format", {{"type", "json_object"}}}},
                                  &status);
    ASSERT_EQ(status, 200) << object.dump();
    const std::string text = object["choices"][0]["text"];
    EXPECT_TRUE(json::parse(text, nullptr, false).is_object()) << text;
    EXPECT_EQ(object["choices"][0]["finish_reason"], "stop") << text;
    const json person = post_json(*c, "/v1/chat/completions",
                                  {{"messages", {{{"role", "user"}, {"content", "Who?"}}}}, {"max_tokens", 90},
                                   {"seed", seed}, {"response_format", as_schema}},
                                  &status);
    ASSERT_EQ(status, 200) << person.dump();
    check_person(person["choices"][0]["message"]["content"]);
    const Streamed s = post_stream(*c, "/v1/completions", {{"prompt", "Tom"}, {"max_tokens", 90}, {"seed", seed},
                                                           {"response_format", as_schema}});
    EXPECT_TRUE(s.done);
    check_person(s.text);
  }
}

// Tools with tool_choice "required" or a named function: the answer is a call, in OpenAI's
// tool_calls shape, whose arguments match that function's parameters, whole and streamed;
// "none" answers text.
TEST_F(ServeTest, ARequiredToolCallMatchesItsFunction) {
  auto c = server_->client();
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "weather", "description": "the weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                                       "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "time", "parameters": {"type": "object",
      "properties": {"zone": {"enum": ["utc", "cet"]}}}}}])");
  const json messages = {{{"role", "user"}, {"content", "What is the weather in Paris?"}}};
  const auto check_call = [](const json& call, const std::string& want_name) {
    EXPECT_EQ(call["type"], "function") << call.dump();
    EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u) << call.dump();
    const std::string name = call["function"]["name"];
    if (!want_name.empty()) {
      EXPECT_EQ(name, want_name);
    }
    const json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(args.is_object()) << call.dump();
    if (name == "weather") {
      EXPECT_TRUE(args["city"].is_string() && args["city"].get<std::string>().size() <= 10) << args.dump();
      EXPECT_TRUE(args["days"].is_number_integer()) << args.dump();
    } else {
      ASSERT_EQ(name, "time");
      EXPECT_TRUE(args["zone"] == "utc" || args["zone"] == "cet") << args.dump();
    }
  };
  for (int seed : {1, 2}) {
    for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "time"}}}}}) {
      const std::string want = choice.is_string() ? "" : "time";
      int status = 0;
      const json r = post_json(*c, "/v1/chat/completions", {{"messages", messages}, {"tools", tools}, {"tool_choice", choice},
                                                           {"max_tokens", 60}, {"seed", seed}}, &status);
      ASSERT_EQ(status, 200) << r.dump();
      EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << r.dump();
      EXPECT_TRUE(r["choices"][0]["message"]["content"].is_null()) << r.dump();
      ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
      check_call(r["choices"][0]["message"]["tool_calls"][0], want);
      const Streamed s = post_stream(*c, "/v1/chat/completions", {{"messages", messages}, {"tools", tools},
                                                                  {"tool_choice", choice}, {"max_tokens", 60}, {"seed", seed}});
      ASSERT_TRUE(s.done);
      EXPECT_EQ(s.last["choices"][0]["finish_reason"], "tool_calls") << s.last.dump();
      ASSERT_EQ(s.last["choices"][0]["delta"]["tool_calls"].size(), 1u) << s.last.dump();
      EXPECT_EQ(s.last["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
      check_call(s.last["choices"][0]["delta"]["tool_calls"][0], want);
    }
  }
  int status = 0;
  const json text = post_json(*c, "/v1/chat/completions", {{"messages", messages}, {"tools", tools}, {"tool_choice", "none"},
                                                          {"max_tokens", 8}}, &status);
  ASSERT_EQ(status, 200) << text.dump();
  EXPECT_TRUE(text["choices"][0]["message"]["content"].is_string());
  EXPECT_FALSE(text["choices"][0]["message"].contains("tool_calls"));
}

// tool_choice auto (the default with tools): the tools are rendered into the prompt by the chat
// template, and an answer in no template's tool-call syntax is text, whole and streamed (held back
// to the end, where a call would be told apart from it).
TEST(ServeToolsTest, ToolsTheModelMayCallAreRenderedAndTextIsText) {
  if (!std::filesystem::exists(kStoriesModel)) GTEST_SKIP() << "fixture absent: " << kStoriesModel;
  const testing_util::TempDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string tmpl = scratch.path() + "/hermes.jinja";
  std::ofstream(tmpl) << "{%- if tools %}<|im_start|>system\n# Tools\n{%- for tool in tools %}\n{{ tool | tojson }}"
                         "{%- endfor %}<|im_end|>\n{% endif %}"
                         "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                         "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  ServerProcess server(scratch.path(), {"-m", kStoriesModel, "-c", "1024", "-t", "1", "--chat-template", tmpl});
  ASSERT_TRUE(server.started()) << server.stderr_text();
  auto c = server.client();
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  const json messages = {{{"role", "user"}, {"content", "Weather in Paris?"}}};
  int status = 0;
  const json plain = post_json(*c, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 12}, {"temperature", 0}},
                               &status);
  ASSERT_EQ(status, 200) << plain.dump();
  const json with_tools = post_json(*c, "/v1/chat/completions", {{"messages", messages}, {"tools", tools},
                                                                {"max_tokens", 12}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200) << with_tools.dump();
  EXPECT_GT(with_tools["usage"]["prompt_tokens"].get<int>(), plain["usage"]["prompt_tokens"].get<int>() + 10)
      << "the tools rendered into the prompt";
  EXPECT_TRUE(with_tools["choices"][0]["message"]["content"].is_string());
  EXPECT_FALSE(with_tools["choices"][0]["message"].contains("tool_calls"));
  EXPECT_NE(with_tools["choices"][0]["finish_reason"], "tool_calls");
  const Streamed s = post_stream(*c, "/v1/chat/completions", {{"messages", messages}, {"tools", tools},
                                                              {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_TRUE(s.done);
  EXPECT_EQ(s.text, with_tools["choices"][0]["message"]["content"]);
  EXPECT_EQ(server.stop(), 0);
}

// Only this server's Host names (DNS rebinding), only its own page's or --cors-origin's browser
// origin (a cross-site request), a browser's preflight answered, as a browser sends them.
TEST_F(ServeTest, HostsAndOriginsAreThisServersOrAllowed) {
  auto c = server_->client();
  const std::string self = "127.0.0.1:" + std::to_string(server_->port());
  const std::string body = R"({"prompt": "Once", "max_tokens": 2})";
  const auto post = [&](const httplib::Headers& headers) { return c->Post("/v1/completions", headers, body, "application/json"); };
  for (const std::string& host : std::vector<std::string>{"evil.example", "evil.example:" + std::to_string(server_->port()),
                                                         "127.0.0.1.nip.io"}) {
    auto r = post({{"Host", host}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403) << host;
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "host_not_allowed") << r->body;
  }
  for (const std::string& host :
       std::vector<std::string>{self, "localhost:" + std::to_string(server_->port()), "my.box", "MY.BOX:80"}) {
    auto r = post({{"Host", host}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << host << " " << r->body;
  }
  // A cross-site page's request (a form's text/plain POST too) carries its Origin.
  auto cross = c->Post("/v1/completions", {{"Origin", "https://evil.example"}}, body, "text/plain");
  ASSERT_TRUE(cross);
  EXPECT_EQ(cross->status, 403);
  EXPECT_EQ(json::parse(cross->body)["error"]["code"], "origin_not_allowed");
  EXPECT_FALSE(cross->has_header("Access-Control-Allow-Origin"));
  auto own = post({{"Origin", "http://" + self}});  // the page at /
  ASSERT_TRUE(own);
  EXPECT_EQ(own->status, 200);
  auto allowed = post({{"Origin", "https://app.example"}});
  ASSERT_TRUE(allowed);
  EXPECT_EQ(allowed->status, 200);
  EXPECT_EQ(allowed->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  auto preflight = c->Options("/v1/chat/completions", {{"Origin", "https://app.example"},
                                                      {"Access-Control-Request-Method", "POST"},
                                                      {"Access-Control-Request-Headers", "authorization,content-type"}});
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_NE(preflight->get_header_value("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
  auto bad_preflight = c->Options("/v1/chat/completions", {{"Origin", "https://evil.example"}});
  ASSERT_TRUE(bad_preflight);
  EXPECT_EQ(bad_preflight->status, 403);
}

TEST_F(ServeTest, StreamedTextEqualsTheWholeAnswerForTheSameSeed) {
  auto c = server_->client();
  for (int seed : {1, 2, 3}) {
    const json body = {{"prompt", "Once upon a time, there was"}, {"max_tokens", 48}, {"temperature", 0.9},
                       {"seed", seed}};
    int status = 0;
    const json whole = post_json(*c, "/v1/completions", body, &status);
    ASSERT_EQ(status, 200) << whole.dump();
    EXPECT_EQ(whole["object"], "text_completion");
    const std::string text = whole["choices"][0]["text"];
    EXPECT_FALSE(text.empty());
    const Streamed s = post_stream(*c, "/v1/completions", body);
    EXPECT_EQ(s.status, 200);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.text, text) << "seed " << seed;
    EXPECT_EQ(s.last["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"]);
    // Usage only where asked for (stream_options.include_usage, below).
    for (const json& chunk : s.chunks) EXPECT_FALSE(chunk.contains("usage")) << chunk.dump();
    EXPECT_EQ(whole["usage"]["total_tokens"].get<int>(),
              whole["usage"]["prompt_tokens"].get<int>() + whole["usage"]["completion_tokens"].get<int>());
    // leoam's own figures: full attention attends every position; the store is in RAM.
    EXPECT_EQ(whole["leoam"]["kv_attended"], 1.0);
    EXPECT_EQ(whole["leoam"]["kv_bytes_read"]["disk"], 0);
    EXPECT_GT(whole["leoam"]["prefill_ms"].get<double>(), 0.0);
    EXPECT_EQ(s.last["leoam"]["kv_attended"], 1.0);
  }
  // With stream_options.include_usage, OpenAI's usage chunk (no choices) comes before [DONE].
  const Streamed u = post_stream(*c, "/v1/completions",
                                 {{"prompt", "Once"}, {"max_tokens", 4}, {"stream_options", {{"include_usage", true}}}});
  EXPECT_TRUE(u.done);
  EXPECT_TRUE(u.last["choices"].empty());
  EXPECT_EQ(u.last["usage"]["completion_tokens"], 4);
  // Once: a client that adds up the usage it is sent (LangChain) counts it right.
  int with_usage = 0;
  for (const json& chunk : u.chunks) with_usage += chunk.contains("usage") ? 1 : 0;
  EXPECT_EQ(with_usage, 1);
}

TEST_F(ServeTest, ChatRendersTheTemplateAndStreamsAsItAnswers) {
  auto c = server_->client();
  const json body = {{"messages", {{{"role", "system"}, {"content", "You tell stories."}},
                                   {{"role", "user"}, {"content", "Tell me one about a cat."}}}},
                     {"max_tokens", 32}, {"temperature", 0.7}, {"seed", 5}};
  int status = 0;
  const json whole = post_json(*c, "/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << whole.dump();
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  const std::string text = whole["choices"][0]["message"]["content"];
  // The prompt is chatml's rendering of the two messages: the same as /v1/completions given it.
  const std::string rendered =
      "<|im_start|>system\nYou tell stories.<|im_end|>\n<|im_start|>user\nTell me one about a cat.<|im_end|>\n"
      "<|im_start|>assistant\n";
  const json as_text = post_json(*c, "/v1/completions", {{"prompt", rendered}, {"max_tokens", 32}, {"temperature", 0.7},
                                                        {"seed", 5}}, &status);
  EXPECT_EQ(whole["usage"]["prompt_tokens"], as_text["usage"]["prompt_tokens"]);
  EXPECT_EQ(text, as_text["choices"][0]["text"]);
  const Streamed s = post_stream(*c, "/v1/chat/completions", body);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.text, text);
  ASSERT_FALSE(s.chunks.empty());
  EXPECT_EQ(s.chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(s.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(s.last["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"]);
  EXPECT_FALSE(s.last.contains("usage"));
}

TEST_F(ServeTest, StopStringsAndLogprobs) {
  auto c = server_->client();
  int status = 0;
  const json plain = post_json(*c, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200);
  const std::string text = plain["choices"][0]["text"];
  const std::string stop = text.substr(text.size() / 2, 4);
  const json stopped = post_json(
      *c, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"stop", {stop}}},
      &status);
  EXPECT_EQ(stopped["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");

  const json lp = post_json(*c, "/v1/completions",
                            {{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 2}}, &status);
  ASSERT_EQ(status, 200) << lp.dump();
  const json& l = lp["choices"][0]["logprobs"];
  ASSERT_EQ(l["tokens"].size(), 6u);
  ASSERT_EQ(l["token_logprobs"].size(), 6u);
  ASSERT_EQ(l["top_logprobs"].size(), 6u);
  std::string joined;
  for (const json& t : l["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, lp["choices"][0]["text"]);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_LE(l["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_EQ(l["top_logprobs"][i].size(), 2u);
    // Greedy: the token is its own most likely alternative.
    EXPECT_DOUBLE_EQ(l["top_logprobs"][i][l["tokens"][i].get<std::string>()].get<double>(), l["token_logprobs"][i].get<double>());
  }
}

TEST_F(ServeTest, BadRequestsGetOpenAIErrors) {
  auto c = server_->client();
  const auto expect_error = [&](const std::string& path, const std::string& body, int status, const std::string& says,
                                const std::string& param = "") {
    httplib::Result r = c->Post(path, body, "application/json");
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, status) << body << " -> " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(says), std::string::npos) << r->body;
    EXPECT_TRUE(j["error"].contains("type"));
    if (!param.empty()) {
      EXPECT_EQ(j["error"]["param"], param) << r->body;
    }
  };
  expect_error("/v1/completions", "{\"prompt\": ", 400, "not valid JSON");
  expect_error("/v1/completions", R"({"prompt": "x", "max_tokens": "ten"})", 400, "must be an integer", "max_tokens");
  expect_error("/v1/completions", R"({"prompt": "x", "max_tokens": 513})", 400, "must be in [0, 512]", "max_tokens");
  expect_error("/v1/completions", R"({"prompt": "x", "temperature": true})", 400, "must be a number", "temperature");
  expect_error("/v1/completions", R"({"prompt": [1, 100000]})", 400, "out of the vocabulary", "prompt");
  std::string long_prompt;
  for (int i = 0; i < 500; ++i) long_prompt += " the cat";  // 4000 bytes: tokenized, then refused
  expect_error("/v1/completions", json{{"prompt", long_prompt}}.dump(), 400, "the context holds 512", "prompt");
  expect_error("/v1/completions", json{{"prompt", std::string(60000, 'a')}}.dump(), 413, "--max-body-mb");
  expect_error("/v1/chat/completions", R"({"messages": [{"role": "user"}], "max_tokens": -1})", 400, "must be in",
               "max_tokens");
  // A prompt far longer than the context is refused before it is tokenized: by its bytes.
  expect_error("/v1/completions", json{{"prompt", std::string(45000, 'a')}}.dump(), 400,
               "more tokens than the context holds", "prompt");
  // Fields the server cannot honour are refused by name, not ignored.
  const json tool = {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}};
  const json hi = json::array({{{"role", "user"}, {"content", "hi"}}});
  expect_error("/v1/chat/completions", json{{"messages", hi}, {"tool_choice", "required"}}.dump(), 400, "needs 'tools'",
               "tool_choice");
  expect_error("/v1/chat/completions",
               json{{"messages", hi}, {"tools", json::array({tool})},
                    {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}}.dump(),
               400, "names no function", "tool_choice");
  expect_error("/v1/chat/completions",
               json{{"messages", hi},
                    {"response_format", {{"type", "json_schema"},
                                         {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"pattern", "a"}}}}}}}}
                   .dump(),
               400, "'pattern' is not supported", "response_format");
  expect_error("/v1/chat/completions", json{{"messages", hi}, {"response_format", {{"type", "xml"}}}}.dump(), 400,
               "json_object or json_schema", "response_format");
  expect_error("/v1/completions", json{{"prompt", "x"}, {"logit_bias", {{"5", 10}}}}.dump(), 400, "not supported",
               "logit_bias");
  expect_error("/v1/completions", json{{"prompt", "x"}, {"model", "gpt-4o"}}.dump(), 404, "not served here", "model");
  for (const json& fine : {json{{"prompt", "x"}, {"max_tokens", 1}, {"model", "stories260K"}},
                           json{{"prompt", "x"}, {"max_tokens", 1}, {"response_format", {{"type", "text"}}}}}) {
    httplib::Result r = c->Post("/v1/completions", fine.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << fine.dump() << " -> " << r->body;
  }
  auto missing = c->Get("/v1/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["error"]["code"], "not_found");
}

TEST_F(ServeTest, EightConcurrentStreamingClientsEachGetTheirOwnAnswer) {
  const std::vector<std::string> prompts = {"Once upon a time", "Lily had a dog", "The sun was", "Tom and Sue",
                                            "One day, a bird", "There was a big tree", "The cat", "A little boy"};
  // Each prompt's answer alone, greedy, first.
  std::vector<std::string> alone;
  auto c = server_->client();
  for (const std::string& p : prompts) {
    int status = 0;
    const json j = post_json(*c, "/v1/completions", {{"prompt", p}, {"max_tokens", 40}, {"temperature", 0}}, &status);
    ASSERT_EQ(status, 200);
    alone.push_back(j["choices"][0]["text"]);
  }
  // Then all at once, streamed: 4 decode together, 4 wait and join.
  std::vector<std::future<Streamed>> futures;
  for (const std::string& p : prompts) {
    futures.push_back(std::async(std::launch::async, [&, p] {
      auto client = server_->client();
      return post_stream(*client, "/v1/completions", {{"prompt", p}, {"max_tokens", 40}, {"temperature", 0}});
    }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Streamed s = futures[i].get();
    EXPECT_EQ(s.status, 200);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.text, alone[i]) << prompts[i];
  }
}

TEST(ServeKeyTest, EveryEndpointButHealthNeedsTheKey) {
  if (!std::filesystem::exists(kStoriesModel)) GTEST_SKIP() << "fixture absent: " << kStoriesModel;
  const testing_util::TempDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  ServerProcess server(scratch.path(), {"-m", kStoriesModel, "-c", "256", "--api-key", "sesame", "-t", "1"});
  ASSERT_TRUE(server.started()) << server.stderr_text();
  auto none = server.client();
  auto wrong = server.client("open");
  auto right = server.client("sesame");
  const auto status = [](httplib::Result r) { return r ? r->status : 0; };
  EXPECT_EQ(status(none->Get("/health")), 200);
  for (const char* path : {"/v1/models", "/metrics"}) {
    EXPECT_EQ(status(none->Get(path)), 401) << path;
    EXPECT_EQ(status(wrong->Get(path)), 401) << path;
    EXPECT_EQ(status(right->Get(path)), 200) << path;
  }
  const std::string body = R"({"prompt": "Once", "max_tokens": 3})";
  auto r = none->Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(status(wrong->Post("/v1/completions", body, "application/json")), 401);
  EXPECT_EQ(status(right->Post("/v1/completions", body, "application/json")), 200);
  for (const char* scheme : {"bearer", "BEARER", "Bearer"}) {  // HTTP's scheme names are case-insensitive
    EXPECT_EQ(status(none->Get("/v1/models", {{"Authorization", std::string(scheme) + " sesame"}})), 200) << scheme;
  }
  // stories260K carries no chat template and none was given: chat is refused, saying how to fix it.
  auto chat = right->Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}]})", "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 400);
  EXPECT_NE(chat->body.find("--chat-template"), std::string::npos) << chat->body;
  EXPECT_EQ(server.stop(), 0);
}

}  // namespace
}  // namespace leoam::testing_cli
