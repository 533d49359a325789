// `leoam serve` on stories260K over real HTTP on the loopback: the endpoints, streamed against
// whole answers, every error case, concurrent streaming clients, the API key, a full queue, and
// a client that goes away mid-stream.
#include <gtest/gtest.h>

#include <dirent.h>

#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../unit/temp_dir.h"
#include "cli_runner.h"
#include "server_process.h"

namespace leoam::testing_cli {
namespace {

using json = nlohmann::json;

// What a streamed completion delivered: its chunks' text, the last chunk, and whether it ended
// with "data: [DONE]".
struct Streamed {
  int status = 0;
  std::string text;
  json last;
  bool done = false;
  std::vector<json> chunks;
};

// Posts `body` with "stream": true and reads its SSE events; `stop_after` > 0 hangs up after that
// many chunks.
Streamed post_stream(httplib::Client& c, const std::string& path, json body, int stop_after = 0) {
  body["stream"] = true;
  Streamed out;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        out.done = true;
        continue;
      }
      out.chunks.push_back(json::parse(payload));
      const json& j = out.chunks.back();
      if (j.contains("choices") && !j["choices"].empty()) {
        const json& ch = j["choices"][0];
        out.text += ch.contains("text") ? ch["text"].get<std::string>() : ch["delta"].value("content", "");
      }
      out.last = j;
      if (stop_after > 0 && static_cast<int>(out.chunks.size()) >= stop_after) return false;
    }
    return true;
  };
  httplib::Result r = c.send(req);
  out.status = r ? r->status : 0;
  return out;
}

json post_json(httplib::Client& c, const std::string& path, const json& body, int* status) {
  httplib::Result r = c.Post(path, body.dump(), "application/json");
  *status = r ? r->status : 0;
  return r ? json::parse(r->body, nullptr, false) : json();
}

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

// A folder outside the repository ($LEOAM_NPM_DIR/NAME, or ~/.cache/leoam-test-npm-NAME) where npm
// has installed `packages` (pinned), whose `modules` the test then requires; "" with the reason
// in `skip` where node or npm is missing or the registry cannot be reached.
std::string npm_folder(const std::string& name, const std::vector<std::string>& packages,
                       const std::vector<std::string>& modules, std::string& skip) {
  if (std::system("command -v node > /dev/null 2>&1 && command -v npm > /dev/null 2>&1") != 0) {
    skip = "node and npm are not installed (scripts/install-deps.sh --with-tests installs them)";
    return "";
  }
  const char* npm_env = std::getenv("LEOAM_NPM_DIR");
  const char* home = std::getenv("HOME");
  const std::string dir = npm_env != nullptr ? std::string(npm_env) + "/" + name
                                             : std::string(home != nullptr ? home : "/tmp") + "/.cache/leoam-test-npm-" + name;
  const auto installed = [&] {
    for (const std::string& m : modules) {
      if (!std::filesystem::exists(dir + "/node_modules/" + m + "/package.json")) return false;
    }
    return true;
  };
  if (installed()) return dir;
  std::string install = "mkdir -p " + shell_quote(dir) + " && timeout 300 npm install --no-audit --no-fund --prefix " +
                        shell_quote(dir);
  for (const std::string& p : packages) install += " " + p;
  if (std::system((install + " > /dev/null 2>&1").c_str()) != 0 || !installed()) {
    skip = "could not install the npm packages into " + dir + " (no network?)";
    return "";
  }
  return dir;
}

// Third-party clients as applications use them, installed by the test outside the repository
// (npm_folder), each skipped with a reason where npm cannot reach its registry: the official
// `openai` package (tests/integration/openai_client.cjs: chat, streamed chat, a completion, the
// model list, refused requests), and the Vercel AI SDK and LangChain
// (tests/integration/third_party_clients.mjs: chat, stream and completion, an object of a schema,
// a required tool call, tool_choice auto refused by name). Their answers are the server's own,
// their objects and calls match their schemas, and LangChain's streamed usage is counted once.
TEST(ServeClientsTest, TheOpenAiPackageTheVercelAiSdkAndLangChainTalkToTheServer) {
  if (!std::filesystem::exists(kStoriesModel)) GTEST_SKIP() << "fixture absent: " << kStoriesModel;
  std::string skip_openai, skip_others;
  // openai v4: the last major version that runs on Debian 12's Node 18.
  const std::string openai_dir = npm_folder("openai", {"openai@4.95.0"}, {"openai"}, skip_openai);
  const std::string others_dir =
      npm_folder("clients", {"ai@4.3.16", "@ai-sdk/openai-compatible@0.2.14", "@langchain/openai@0.5.10",
                             "@langchain/core@0.3.57", "zod@3.25.76"},
                 {"ai", "@ai-sdk/openai-compatible", "@langchain/openai", "@langchain/core", "zod"}, skip_others);
  if (openai_dir.empty() && others_dir.empty()) GTEST_SKIP() << skip_openai << "; " << skip_others;
  const testing_util::TempDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string& dir = scratch.path();
  ServerProcess server(dir, {"-m", kStoriesModel, "-c", "512", "-t", "1", "--chat-template", "chatml", "--api-key",
                             "k-123", "--alias", "stories"});
  ASSERT_TRUE(server.started()) << server.stderr_text();
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port()) + "/v1";
  // A client script's JSON output.
  const auto run_client = [&](const std::string& script, const std::string& npm_dir, const std::string& more) {
    const std::string cmd = "node " + shell_quote(std::string(LEOAM_SOURCE_DIR) + "/tests/integration/" + script) + " " +
                            shell_quote(npm_dir) + " " + base + " k-123" + more + " > " + shell_quote(dir + "/out.json") +
                            " 2> " + shell_quote(dir + "/err.txt");
    EXPECT_EQ(std::system(cmd.c_str()), 0) << read_file(dir + "/err.txt");
    return json::parse(read_file(dir + "/out.json"), nullptr, false);
  };
  // The server's own answers, over plain HTTP.
  int status = 0;
  auto c = server.client("k-123");
  const json direct = post_json(*c, "/v1/chat/completions",
                                {{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}}, {"max_tokens", 24},
                                 {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200);
  const json completion = post_json(*c, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 8},
                                                           {"temperature", 0}}, &status);
  ASSERT_EQ(status, 200);
  const std::string text = direct["choices"][0]["message"]["content"];
  const int completion_tokens = direct["usage"]["completion_tokens"];

  if (openai_dir.empty()) {
    std::fprintf(stderr, "skipped the openai package: %s\n", skip_openai.c_str());
  } else {
    const json out = run_client("openai_client.cjs", openai_dir, "");
    EXPECT_EQ(out["chat"]["text"], text);
    EXPECT_EQ(out["chat"]["usage"]["completion_tokens"], completion_tokens);
    EXPECT_EQ(out["stream"]["text"], out["chat"]["text"]);
    EXPECT_GT(out["stream"]["chunks"].get<int>(), 2);
    EXPECT_FALSE(out["completion"].get<std::string>().empty());
    EXPECT_EQ(out["models"], json::array({"stories"}));
    EXPECT_EQ(out["error"]["status"], 400) << out.dump();
    EXPECT_EQ(out["error"]["param"], "max_tokens") << out.dump();
    EXPECT_EQ(out["error"]["type"], "invalid_request_error");
    EXPECT_EQ(out["unknown_model"]["status"], 404) << out.dump();
    EXPECT_EQ(out["unknown_model"]["code"], "model_not_found") << out.dump();
    EXPECT_TRUE(out["json"]["title"].is_string() && out["json"]["title"].get<std::string>().size() <= 20) << out.dump();
    EXPECT_EQ(out["tool_call"]["finish"], "tool_calls") << out.dump();
    EXPECT_EQ(out["tool_call"]["name"], "weather") << out.dump();
    EXPECT_TRUE(out["tool_call"]["args"]["city"].is_string()) << out.dump();
    EXPECT_TRUE(out["after_tool"]["text"].is_string()) << out.dump();  // the call and its result in the history
  }
  if (others_dir.empty()) {
    std::fprintf(stderr, "skipped the Vercel AI SDK and LangChain: %s\n", skip_others.c_str());
  } else {
    const json out = run_client("third_party_clients.mjs", others_dir, " stories");
    for (const std::string client : {"vercel", "langchain"}) {
      SCOPED_TRACE(client);
      const json& o = out[client];
      EXPECT_EQ(o["chat"]["text"], text);
      EXPECT_EQ(o["stream"]["text"], text);
      EXPECT_EQ(o["completion"], completion["choices"][0]["text"]);
      // Tools it may call (auto): stories260K answers text, the chat's own.
      EXPECT_EQ(o["tools"]["calls"], 0) << o.dump();
      EXPECT_TRUE(o["tools"]["text"].is_string()) << o.dump();
      // Their own checks passed (zod's): an object with a string title of at most 20 characters,
      // and a call of the one tool with a city of at most 12.
      EXPECT_TRUE(o["json"]["object"]["title"].is_string()) << o.dump();
      EXPECT_EQ(o["tool_call"]["name"], "weather") << o.dump();
      EXPECT_TRUE(o["tool_call"]["args"]["city"].is_string()) << o.dump();
    }
    EXPECT_EQ(out["vercel"]["chat"]["usage"]["completionTokens"], completion_tokens);
  EXPECT_EQ(out["vercel"]["stream"]["usage"]["completionTokens"], completion_tokens) << "asked for, sent once";
    EXPECT_EQ(out["langchain"]["chat"]["usage"]["output_tokens"], completion_tokens);
    EXPECT_EQ(out["langchain"]["stream"]["usage"]["output_tokens"], completion_tokens) << "usage counted once";
  }
  EXPECT_EQ(server.stop(), 0);
}

// The KV files the server process holds open in `dir` (unlinked once open, so only its open
// descriptors show them).
int open_kv_files(pid_t pid, const std::string& dir) {
  int n = 0;
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& e : std::filesystem::directory_iterator(fds)) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && target.rfind(dir, 0) == 0) ++n;
  }
  return n;
}

// One request at a time and none waiting: a second is refused with 503 and Retry-After; the
// first's client hangs up mid-stream, which cancels it and frees its KV (files and bytes).
TEST(ServeBusyTest, AFullQueueAnswers503AndAClientThatLeavesFreesItsKv) {
  if (!std::filesystem::exists(kStoriesModel)) GTEST_SKIP() << "fixture absent: " << kStoriesModel;
  const testing_util::TempDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string& dir = scratch.path();
  const std::string kv_dir = dir + "/kv";
  {
    ServerProcess server(dir, {"-m", kStoriesModel, "-c", "16384", "--parallel", "1", "--max-queue", "0", "-t", "1",
                               "--kv-dir", kv_dir, "--kv-device-mb", "0.25", "--kv-host-mb", "0.25"});
    ASSERT_TRUE(server.started()) << server.stderr_text();
    EXPECT_EQ(open_kv_files(server.pid(), kv_dir), 0);
    std::promise<void> streaming;
    std::promise<void> hang_up;
    auto first = std::async(std::launch::async, [&] {
      auto c = server.client();
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = json{{"prompt", "Once upon a time"}, {"max_tokens", 16000}, {"stream", true}}.dump();
      req.set_header("Content-Type", "application/json");
      bool told = false;
      req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
        if (!told) {
          told = true;
          streaming.set_value();
          hang_up.get_future().wait();
          return false;  // hang up
        }
        return true;
      };
      return c->send(req);
    });
    streaming.get_future().wait();
    EXPECT_GT(open_kv_files(server.pid(), kv_dir), 0);  // the running request's store
    auto c = server.client();
    auto busy = c->Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 3})", "application/json");
    ASSERT_TRUE(busy);
    EXPECT_EQ(busy->status, 503);
    EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
    EXPECT_EQ(json::parse(busy->body)["error"]["code"], "server_busy");
    hang_up.set_value();
    first.get();
    // The server notices at its next write, cancels the request and frees its store.
    const std::string metrics = server.metrics_when("leoam_requests_finished_total{result=\"cancelled\"}", 1.0);
    EXPECT_EQ(metric(metrics, "leoam_requests_finished_total{result=\"cancelled\"}"), 1.0) << metrics;
    EXPECT_EQ(metric(metrics, "leoam_requests_running"), 0.0);
    EXPECT_EQ(metric(metrics, "leoam_kv_resident_bytes{tier=\"device\"}"), 0.0);
    EXPECT_EQ(metric(metrics, "leoam_kv_resident_bytes{tier=\"disk\"}"), 0.0);
    EXPECT_LT(metric(metrics, "leoam_generated_tokens_total"), 16000.0);
    EXPECT_EQ(open_kv_files(server.pid(), kv_dir), 0);
    // And the place is free again.
    auto after = c->Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 3})", "application/json");
    ASSERT_TRUE(after);
    EXPECT_EQ(after->status, 200);
    EXPECT_EQ(server.stop(), 0);
  }
}

// The page at / in headless Chromium (Debian's): it asks its question through the API, streams
// the answer, and the screenshot is a real image of it.
TEST(ServePageTest, HeadlessChromiumAsksThroughThePage) {
  if (!std::filesystem::exists(kStoriesModel)) GTEST_SKIP() << "fixture absent: " << kStoriesModel;
  if (std::system("command -v chromium > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh --with-tests installs it)";
  }
  const testing_util::TempDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string& dir = scratch.path();
  {
    ServerProcess server(dir, {"-m", kStoriesModel, "-c", "512", "-t", "1"});
    ASSERT_TRUE(server.started()) << server.stderr_text();
    auto page = server.client()->Get("/");
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200);
    EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
    EXPECT_NE(page->body.find("id=\"ask\""), std::string::npos);
    const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) +
                            "/?doc=Once%20upon%20a%20time%20there%20was%20a%20girl.&q=Who%20was%20there%3F&max=24&ask=1";
    const std::string png = dir + "/page.png";
    const std::string cmd = "chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1000,800 "
                            "--timeout=5000 --user-data-dir=" + shell_quote(dir + "/profile") + " --screenshot=" +
                            shell_quote(png) + " " + shell_quote(url) + " > " + shell_quote(dir + "/chromium.log") + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(dir + "/chromium.log");
    // A PNG of the window's size.
    const std::string image = read_file(png);
    ASSERT_GT(image.size(), 24u);
    EXPECT_EQ(image.substr(1, 3), "PNG");
    const auto be32 = [&](size_t at) {
      return (static_cast<uint32_t>(static_cast<uint8_t>(image[at])) << 24) | (static_cast<uint8_t>(image[at + 1]) << 16) |
             (static_cast<uint8_t>(image[at + 2]) << 8) | static_cast<uint8_t>(image[at + 3]);
    };
    EXPECT_EQ(be32(16), 1000u);
    EXPECT_EQ(be32(20), 800u);
    // The page's script asked, streamed, and got its 24 tokens.
    auto metrics = server.client()->Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_EQ(metric(metrics->body, "leoam_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"}"), 1.0)
        << metrics->body;
    EXPECT_EQ(metric(metrics->body, "leoam_generated_tokens_total"), 24.0);
    EXPECT_EQ(metric(metrics->body, "leoam_requests_finished_total{result=\"ok\"}"), 1.0);
  }
}

// A long document's KV kept in --kv-dir: a second question reuses it and answers as a cold
// server does, after a restart too; a corrupted cache file is dropped and the answer computed.
TEST(ServePromptCacheTest, ReusedPrefixesAnswerAsColdOnesAcrossRestartsAndCorruption) {
  if (!std::filesystem::exists(kStoriesModel) || !std::filesystem::exists(kBookText)) {
    GTEST_SKIP() << "fixture absent: " << kStoriesModel << " or " << kBookText;
  }
  const testing_util::TempDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string& dir = scratch.path();
  const std::string doc = read_file(kBookText).substr(0, 1500);
  const std::vector<std::string> questions = {" Who was there?", " What happened next?"};
  const auto ask = [&](ServerProcess& server, const std::string& q, json* usage) {
    int status = 0;
    auto c = server.client();
    const json j = post_json(*c, "/v1/completions", {{"prompt", doc + q}, {"max_tokens", 24}, {"temperature", 0}}, &status);
    EXPECT_EQ(status, 200) << j.dump();
    *usage = j["usage"];
    return j["choices"][0]["text"].get<std::string>();
  };
  const std::vector<std::string> args = {"-m", kStoriesModel, "-c", "1024", "-t", "1", "--kv-dir", dir + "/kv",
                                         "--kv-device-mb", "0.25", "--kv-host-mb", "0.25", "--prompt-cache-min-tokens", "64"};
  // Cold answers, from a server without a prompt cache.
  std::vector<std::string> cold;
  json usage;
  {
    std::vector<std::string> off = args;
    off.insert(off.end(), {"--prompt-cache-gb", "0"});
    ServerProcess server(dir, off);
    ASSERT_TRUE(server.started()) << server.stderr_text();
    for (const std::string& q : questions) cold.push_back(ask(server, q, &usage));
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 0);
  }
  int64_t n_doc = 0;
  {
    ServerProcess server(dir, args);
    ASSERT_TRUE(server.started()) << server.stderr_text();
    EXPECT_EQ(ask(server, questions[0], &usage), cold[0]);
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_EQ(ask(server, questions[1], &usage), cold[1]);
    n_doc = usage["prompt_tokens_details"]["cached_tokens"];
    EXPECT_GT(n_doc, 300);  // the document's tokens
    EXPECT_LT(n_doc, usage["prompt_tokens"].get<int64_t>());
    auto metrics = server.client()->Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_EQ(metric(metrics->body, "leoam_prompt_tokens_reused_total"), static_cast<double>(n_doc));
    // Its whole chunks read in place from the entry's files, not copied into the request's store.
    EXPECT_GT(metric(metrics->body, "leoam_prompt_tokens_in_place_total"), 0.9 * static_cast<double>(n_doc));
    EXPECT_EQ(metric(metrics->body, "leoam_prompt_cache_entries"), 1.0);
  }
  {  // A restart: the same question is answered without prefilling the document again.
    ServerProcess server(dir, args);
    ASSERT_TRUE(server.started()) << server.stderr_text();
    EXPECT_EQ(ask(server, questions[1], &usage), cold[1]);
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], n_doc);
  }
  // A flipped byte in the cached KV: detected, dropped, computed again, and still answered.
  std::string victim;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/kv/prompt-cache")) {
    if (e.path().extension() == ".kv") victim = e.path();
  }
  ASSERT_FALSE(victim.empty());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 100);
    const char c = static_cast<char>(f.get());
    f.seekp(4096 + 100);
    f.put(static_cast<char>(c ^ 0x40));
  }
  {
    ServerProcess server(dir, args);
    ASSERT_TRUE(server.started()) << server.stderr_text();
    EXPECT_EQ(ask(server, questions[1], &usage), cold[1]);
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 0);
    // Kept again, sound: by the scheduler's saver, once the answer is out.
    const std::string metrics = server.metrics_when("leoam_prompt_cache_entries", 1.0);
    EXPECT_EQ(metric(metrics, "leoam_prompt_cache_removed_total{reason=\"corrupt\"}"), 1.0);
    EXPECT_EQ(metric(metrics, "leoam_prompt_cache_entries"), 1.0);
    EXPECT_NE(server.stderr_text().find("checksum mismatch"), std::string::npos) << server.stderr_text();
  }
}

// --sparse-continuation: a question after a reused document reads the document selectively (the
// policy's picks for its last row), so fewer disk bytes than the dense prefill of the same
// question on an otherwise equal server.
TEST(ServePromptCacheTest, SparseContinuationReadsTheReusedDocumentSelectively) {
  if (!std::filesystem::exists(kStoriesModel) || !std::filesystem::exists(kBookText)) {
    GTEST_SKIP() << "fixture absent: " << kStoriesModel << " or " << kBookText;
  }
  const testing_util::TempDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string doc = read_file(kBookText).substr(0, 3000);
  const auto disk_read_of_second_question = [&](const std::string& name, bool sparse) -> int64_t {
    std::vector<std::string> args = {"-m", kStoriesModel, "-c", "2048", "-t", "1", "--kv-dir", scratch.path() + "/" + name,
                                     "--kv-device-mb", "0.25", "--kv-host-mb", "0", "--prompt-cache-min-tokens", "64",
                                     "--policy", "leoam", "--budget", "0.1"};
    if (sparse) args.push_back("--sparse-continuation");
    ServerProcess server(scratch.path(), args);
    EXPECT_TRUE(server.started()) << server.stderr_text();
    if (!server.started()) return -1;
    json j;
    for (const char* q : {" Who was there?", " What happened next?"}) {
      int status = 0;
      auto c = server.client();
      j = post_json(*c, "/v1/completions", {{"prompt", doc + q}, {"max_tokens", 1}, {"temperature", 0}}, &status);
      EXPECT_EQ(status, 200) << j.dump();
    }
    EXPECT_GT(j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 500) << j.dump();
    return j["leoam"]["kv_bytes_read"]["disk"].get<int64_t>();
  };
  const int64_t dense = disk_read_of_second_question("dense", false);
  const int64_t sparse = disk_read_of_second_question("sparse", true);
  EXPECT_GT(dense, 0);
  EXPECT_GE(sparse, 0);
  EXPECT_LT(sparse, dense);
}

}  // namespace
}  // namespace leoam::testing_cli
