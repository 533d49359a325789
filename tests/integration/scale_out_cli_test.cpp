// Several `leoam serve` replicas behind HAProxy (scripts/haproxy-config.sh, docs/scale-out.md), on
// the loopback: questions about 4 documents, two each, through the proxy. Each document is
// prefilled once (the second question finds it in the prompt cache of the replica the first one
// went to), every answer is a single server's, and when a replica is killed the proxy goes on
// answering from the other. Skips without Debian's haproxy.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../unit/temp_dir.h"
#include "cli_runner.h"
#include "server_process.h"

namespace leoam::testing_cli {
namespace {

using json = nlohmann::json;

// A port free on the loopback now (bound, then let go).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// haproxy -db -f CFG, in the foreground, killed with the test.
class Haproxy {
 public:
  explicit Haproxy(const std::string& cfg, const std::string& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(out, 1);
      ::dup2(out, 2);
      ::execlp("haproxy", "haproxy", "-db", "-f", cfg.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Haproxy() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
};

TEST(ScaleOutTest, TwoReplicasBehindHaproxyKeepEachDocumentOnOneAndSurviveALoss) {
  if (!std::filesystem::exists(kStoriesModel) || !std::filesystem::exists(kBookText)) {
    GTEST_SKIP() << "fixture absent: " << kStoriesModel << " or " << kBookText;
  }
  if (std::system("command -v haproxy >/dev/null 2>&1") != 0) GTEST_SKIP() << "no haproxy (Debian's package)";
  const testing_util::TempDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string& dir = scratch.path();
  const std::string book = read_file(kBookText);
  ASSERT_GE(book.size(), 9900u);
  std::vector<std::string> docs;
  // Whole UTF-8 characters, each document past the 2048 bytes hashed.
  const auto boundary = [&](size_t at) {
    while (at > 0 && (static_cast<unsigned char>(book[at]) & 0xC0) == 0x80) --at;
    return at;
  };
  for (int d = 0; d < 4; ++d) {
    const size_t begin = boundary(2500 * d), end = boundary(2500 * d + 2400);
    docs.push_back(book.substr(begin, end - begin));
  }
  const std::vector<std::string> questions = {" Who was there?", " What happened next?"};
  const auto body = [&](int d, int q) {
    return json{{"prompt", docs[d] + questions[q]}, {"max_tokens", 12}, {"temperature", 0}}.dump();
  };
  const std::vector<std::string> common = {"-m", kStoriesModel, "-c", "2048", "-t", "1", "--parallel", "2"};

  // A single server's answers, no cache.
  std::vector<std::vector<std::string>> want(4, std::vector<std::string>(2));
  {
    std::filesystem::create_directories(dir + "/single");
    std::vector<std::string> args = common;
    ServerProcess single(dir + "/single", args);
    ASSERT_TRUE(single.started()) << single.stderr_text();
    auto c = single.client();
    for (int d = 0; d < 4; ++d) {
      for (int q = 0; q < 2; ++q) {
        auto r = c->Post("/v1/completions", body(d, q), "application/json");
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        want[d][q] = json::parse(r->body)["choices"][0]["text"];
      }
    }
    EXPECT_EQ(single.stop(), 0);
  }

  std::vector<std::unique_ptr<ServerProcess>> replicas;
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    const std::string rdir = dir + "/replica" + std::to_string(i);
    std::filesystem::create_directories(rdir);
    std::vector<std::string> args = common;
    args.insert(args.end(), {"--kv-dir", rdir + "/kv", "--kv-device-mb", "0.25", "--kv-host-mb", "0.25",
                             "--prompt-cache-min-tokens", "64"});
    replicas.push_back(std::make_unique<ServerProcess>(rdir, args));
    ASSERT_TRUE(replicas.back()->started()) << replicas.back()->stderr_text();
    addresses.push_back("127.0.0.1:" + std::to_string(replicas.back()->port()));
  }
  const int port = free_port();
  std::string cmd = shell_quote(std::string(LEOAM_SOURCE_DIR) + "/scripts/haproxy-config.sh") + " 127.0.0.1:" +
                    std::to_string(port);
  for (const std::string& a : addresses) cmd += " " + a;
  cmd += " > " + shell_quote(dir + "/haproxy.cfg");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  Haproxy proxy(dir + "/haproxy.cfg", dir + "/haproxy.log");
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  // Up once its health checks have seen both replicas.
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    auto h = c.Get("/health");
    up = h && h->status == 200;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(up) << read_file(dir + "/haproxy.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));

  for (int q = 0; q < 2; ++q) {
    for (int d = 0; d < 4; ++d) {
      auto r = c.Post("/v1/completions", body(d, q), "application/json");
      ASSERT_TRUE(r) << read_file(dir + "/haproxy.log");
      ASSERT_EQ(r->status, 200) << r->body;
      const json j = json::parse(r->body);
      EXPECT_EQ(j["choices"][0]["text"], want[d][q]) << "document " << d << ", question " << q;
      // The second question about a document reuses its KV: it went where the first one did.
      if (q == 1) {
        EXPECT_GT(j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0) << "document " << d;
      }
    }
  }
  // Each document prefilled once: 4 entries in all, 4 hits.
  std::vector<double> entries;
  double total_entries = 0, hits = 0;
  for (const auto& r : replicas) {
    auto m = r->client()->Get("/metrics");
    ASSERT_TRUE(m);
    entries.push_back(metric(m->body, "leoam_prompt_cache_entries"));
    total_entries += entries.back();
    hits += metric(m->body, "leoam_prompt_cache_lookups_total{result=\"hit\"}");
  }
  EXPECT_EQ(total_entries, 4.0);
  EXPECT_EQ(hits, 4.0);

  // A replica that held documents is lost: the proxy answers every question from the other.
  const size_t lost = entries[0] > 0 ? 0 : 1;
  ::kill(replicas[lost]->pid(), SIGKILL);
  replicas[lost]->stop();
  for (int d = 0; d < 4; ++d) {
    auto r = c.Post("/v1/completions", body(d, 0), "application/json");
    ASSERT_TRUE(r) << read_file(dir + "/haproxy.log");
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], want[d][0]) << "document " << d << " after the loss";
  }
  EXPECT_EQ(replicas[1 - lost]->stop(), 0);
}

}  // namespace
}  // namespace leoam::testing_cli
