// Runs `leoam serve` (LEOAM_BIN) as a child process on a free loopback port, as a user would,
// and talks to it over real HTTP (cpp-httplib's client). Shared by the server tests.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fcntl.h>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_runner.h"

namespace leoam::testing_cli {

// The value of a sample of /metrics' Prometheus text (-1 when absent).
inline double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size() + 2));
}

class ServerProcess {
 public:
  // Starts `leoam serve --port 0 args...`, its stderr in scratch_dir/serve.err, and waits (up to
  // 60 s) for the line that gives its port. started() says whether it came.
  ServerProcess(const std::string& scratch_dir, const std::vector<std::string>& args)
      : err_path_(scratch_dir + "/serve.err") {
    std::vector<std::string> argv = {LEOAM_BIN, "serve", "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    // Emptied before the child starts, so that no earlier run's port is read back.
    const int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no server outlives a test that crashed
      const int null = ::open("/dev/null", O_RDWR);
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(err, 2);
      std::vector<char*> c;
      for (std::string& a : argv) c.push_back(a.data());
      c.push_back(nullptr);
      ::execv(c[0], c.data());
      ::_exit(127);
    }
    ::close(err);
    const std::regex serving("serving .* on http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 600 && port_ == 0 && running(); ++i) {
      std::smatch m;
      const std::string err = read_file(err_path_);
      if (std::regex_search(err, m, serving)) port_ = std::stoi(m[1]);
      else std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~ServerProcess() { stop(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool started() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string stderr_text() const { return read_file(err_path_); }

  // /metrics' text once `name` reads `value` (what the server does after a request's answer, as
  // keeping its KV or counting a hang-up, may come a moment later), or after 10 s: the last text.
  std::string metrics_when(const std::string& name, double value) const {
    std::string text;
    for (int i = 0; i < 200; ++i) {
      if (auto m = client()->Get("/metrics"); m) text = m->body;
      if (metric(text, name) == value) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return text;
  }

  std::unique_ptr<httplib::Client> client(const std::string& api_key = {}) const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(120, 0);
    if (!api_key.empty()) c->set_bearer_token_auth(api_key);
    return c;
  }

  // Ctrl-C, as a user stops it; returns its exit status (-1: it had to be killed).
  int stop() {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGINT);
    for (int i = 0; i < 300; ++i) {
      int raw = 0;
      if (::waitpid(pid_, &raw, WNOHANG) == pid_) {
        pid_ = 0;
        status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = 0;
    return status_ = -1;
  }

 private:
  // Whether the child still runs (one that exited is reaped).
  bool running() {
    int raw = 0;
    if (pid_ <= 0) return false;
    if (::waitpid(pid_, &raw, WNOHANG) == 0) return true;
    status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    pid_ = 0;
    return false;
  }

  std::string err_path_;
  pid_t pid_ = 0;
  int port_ = 0;
  int status_ = -1;
};

}  // namespace leoam::testing_cli
