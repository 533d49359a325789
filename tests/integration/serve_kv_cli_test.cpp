// `leoam serve`'s KV on disk: a full queue answers 503 and a client that leaves mid-stream frees its
// request's KV; a long document's KV kept in --kv-dir is reused, across restarts and corruption,
// and read selectively with --sparse-continuation.
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
