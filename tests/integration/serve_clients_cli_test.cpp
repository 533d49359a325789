// `leoam serve` as its clients meet it: third-party client packages (openai, the Vercel AI SDK,
// LangChain) installed with npm, and the page at / in headless Chromium.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
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

}  // namespace
}  // namespace leoam::testing_cli
