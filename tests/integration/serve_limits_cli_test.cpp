// `leoam serve`'s limits over real sockets: a chunked body refused as its bytes pass the limit
// (before it ends), the listen backlog, and a client of a whole (not streamed) answer that hangs up
// cancelling its request.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
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

// A TCP connection to the server on the loopback, reads timing out after `timeout_s`.
int connect_to(int port, int timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(ServeLimitsTest, AChunkedBodyIsRefusedAsItsBytesPassTheLimit) {
  if (!std::filesystem::exists(kStoriesModel)) GTEST_SKIP() << "fixture absent: " << kStoriesModel;
  const testing_util::TempDir scratch;
  ServerProcess server(scratch.path(), {"-m", kStoriesModel, "-c", "256", "-t", "1", "--max-body-mb", "0.05"});
  ASSERT_TRUE(server.started()) << server.stderr_text();
  const int fd = connect_to(server.port(), 30);
  ASSERT_GE(fd, 0);
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  // 96 KiB of a body that never ends, past the 50 KiB limit: the answer must come without its end.
  const std::string piece = "2000\r\n" + std::string(0x2000, 'a') + "\r\n";
  for (int i = 0; i < 12; ++i) {
    if (::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL) < 0) break;  // refused and closed already
  }
  std::string answer;
  std::array<char, 4096> buf{};
  for (ssize_t n; (n = ::recv(fd, buf.data(), buf.size(), 0)) > 0;) answer.append(buf.data(), static_cast<size_t>(n));
  ::close(fd);
  ASSERT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer.substr(0, 200);
  EXPECT_NE(answer.find("request_too_large"), std::string::npos) << answer;
  // The server goes on answering.
  auto c = server.client();
  auto health = c->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(server.stop(), 0);
}

// The kernel's queue of connections not yet accepted: `ss` shows a listening socket's backlog in
// its Send-Q column.
TEST(ServeLimitsTest, TheListenBacklogIsTheServers) {
  if (!std::filesystem::exists(kStoriesModel)) GTEST_SKIP() << "fixture absent: " << kStoriesModel;
  if (std::system("command -v ss >/dev/null 2>&1") != 0) GTEST_SKIP() << "no `ss` (iproute2) to read the backlog";
  const testing_util::TempDir scratch;
  for (const std::string& backlog : {std::string(), std::string("100")}) {
    std::vector<std::string> args = {"-m", kStoriesModel, "-c", "256", "-t", "1"};
    if (!backlog.empty()) args.insert(args.end(), {"--backlog", backlog});
    ServerProcess server(scratch.path(), args);
    ASSERT_TRUE(server.started()) << server.stderr_text();
    const std::string cmd = "ss -Hltn 'sport = :" + std::to_string(server.port()) + "'";
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char line[512] = {};
    const bool got = std::fgets(line, sizeof(line), p) != nullptr;
    ::pclose(p);
    ASSERT_TRUE(got) << cmd;
    unsigned recv_q = 0, send_q = 0;
    char state[32] = {};
    ASSERT_EQ(std::sscanf(line, "%31s %u %u", state, &recv_q, &send_q), 3) << line;
    EXPECT_EQ(send_q, backlog.empty() ? 512u : 100u) << line;
    EXPECT_EQ(server.stop(), 0);
  }
}

// A client that gives up on a whole answer (curl --max-time) cancels its request: the place is
// freed long before the answer would have ended, and /metrics counts it.
TEST(ServeLimitsTest, AWholeAnswersClientThatHangsUpCancelsIt) {
  if (!std::filesystem::exists(kStoriesModel)) GTEST_SKIP() << "fixture absent: " << kStoriesModel;
  const testing_util::TempDir scratch;
  ServerProcess server(scratch.path(), {"-m", kStoriesModel, "-c", "16384", "--parallel", "1", "-t", "1"});
  ASSERT_TRUE(server.started()) << server.stderr_text();
  {
    auto impatient = server.client();
    impatient->set_read_timeout(1, 0);
    auto r = impatient->Post("/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 16000}}.dump(),
                             "application/json");
    EXPECT_FALSE(r);  // timed out, and hung up
  }
  auto c = server.client();
  std::string metrics = server.metrics_when("leoam_client_disconnects_total", 1.0);
  EXPECT_EQ(metric(metrics, "leoam_client_disconnects_total"), 1.0) << metrics;
  metrics = server.metrics_when("leoam_requests_finished_total{result=\"cancelled\"}", 1.0);
  EXPECT_EQ(metric(metrics, "leoam_requests_finished_total{result=\"cancelled\"}"), 1.0) << metrics;
  EXPECT_EQ(metric(metrics, "leoam_requests_running"), 0.0);
  EXPECT_LT(metric(metrics, "leoam_generated_tokens_total"), 16000.0);
  // The one place is free again.
  auto after = c->Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 3})", "application/json");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
  EXPECT_EQ(server.stop(), 0);
}

}  // namespace
}  // namespace leoam::testing_cli
