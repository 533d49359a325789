// Ctrl-C during `leoam run`, sent as SIGINT to the real binary: the first stops generation (or the
// prefill, at a batch boundary), and the run still prints its timing and --kv-stats lines and
// saves --kv-save (a prefill cut short saves nothing), exiting with 130; a second exits at once.
// During `leoam eval` it stops the sweep, which the same command resumes.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;
using leoam::testing_cli::CliResult;
using leoam::testing_cli::kBookText;
using leoam::testing_cli::kStoriesModel;
using leoam::testing_cli::read_file;

// A `leoam` child process: stdout through a pipe, stderr to a file, stdin from /dev/null.
class Child {
 public:
  Child(const std::vector<std::string>& args, const std::string& err_path) : err_path_(err_path) {
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int in = ::open("/dev/null", O_RDONLY);
      ::dup2(err, STDERR_FILENO);
      ::dup2(in, STDIN_FILENO);
      ::close(out[0]);
      std::vector<char*> argv;
      std::string bin = LEOAM_BIN;
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_fd_ = out[0];
  }
  ~Child() {
    if (out_fd_ >= 0) ::close(out_fd_);
    if (pid_ > 0 && status_ < 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool started() const { return pid_ > 0 && out_fd_ >= 0; }
  // Reads stdout until it holds at least n bytes or ends; false at the end.
  bool read_until(size_t n) {
    char buf[4096];
    while (out_.size() < n) {
      const ssize_t got = ::read(out_fd_, buf, sizeof(buf));
      if (got <= 0) return false;
      out_.append(buf, static_cast<size_t>(got));
    }
    return true;
  }
  // Waits until the child has installed its SIGINT handler: SigCgt in /proc/PID/status has bit 2
  // (SIGINT is signal 2). Before that a SIGINT would kill it.
  bool wait_for_sigint_handler() {
    for (int i = 0; i < 3000; ++i) {
      std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
      for (std::string line; std::getline(status, line);) {
        if (line.rfind("SigCgt:", 0) == 0 && (std::stoull(line.substr(7), nullptr, 16) & (1ull << (SIGINT - 1))) != 0) {
          return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  void interrupt() const { ::kill(pid_, SIGINT); }
  // Drains stdout, waits for the exit, and returns what the user saw.
  CliResult finish() {
    read_until(static_cast<size_t>(-1));
    int raw = 0;
    ::waitpid(pid_, &raw, 0);
    status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : 1000 + (WIFSIGNALED(raw) ? WTERMSIG(raw) : 0);
    CliResult r;
    r.status = status_;
    r.out = out_;
    r.err = read_file(err_path_);
    return r;
  }
  std::string err_so_far() const { return read_file(err_path_); }

 private:
  std::string err_path_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int status_ = -1;
  std::string out_;
};

// The N in "leoam: <what> N tokens".
long long tokens_in(const std::string& err, const std::string& what) {
  std::smatch m;
  if (!std::regex_search(err, m, std::regex("leoam: " + what + " +([0-9]+) tokens"))) return -1;
  return std::stoll(m[1].str());
}

class InterruptCliTest : public leoam::testing_cli::StoriesCliTest {
 protected:
  // A prompt of about 20k tokens: tens of prefill batches of 16, seconds of work.
  std::string long_prompt() const {
    const std::string book = read_file(kBookText);
    std::string text;
    while (text.size() < 40000) text += book;
    const std::string path = dir_ + "/long.txt";
    std::ofstream(path) << text.substr(0, 40000);
    return path;
  }
};

TEST_F(InterruptCliTest, FirstSigintStopsGenerationReportsAndSaves) {
  const std::string prompt = "Once upon a time";
  const std::string session = dir_ + "/session";
  // -n -1 in a context of 16384: seconds of generation, which the SIGINT cuts short.
  Child child({"run", "-m", kStoriesModel, "-p", prompt, "-n", "-1", "-c", "16384", "-t", "1", "--seed", "1", "--policy",
               "leoam", "--kv-dir", dir_ + "/kv", "--kv-stats", "--kv-save", session},
              dir_ + "/stderr.txt");
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(child.read_until(prompt.size() + 200)) << "the run ended before it could be interrupted";
  child.interrupt();
  const CliResult r = child.finish();
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_NE(r.err.find("leoam: interrupted: stopping (Ctrl-C again to quit at once)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(stopped: interrupted (Ctrl-C))"), std::string::npos) << r.err;
  const long long n_prompt = tokens_in(r.err, "prompt");
  const long long n_generated = tokens_in(r.err, "generated");
  EXPECT_GT(n_prompt, 0) << r.err;
  EXPECT_GT(n_generated, 0) << r.err;
  EXPECT_LT(n_prompt + n_generated, 16384) << r.err;
  // --kv-stats: the tiers' table and the policy's line.
  EXPECT_NE(r.err.find("disk write latency:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("attention: policy leoam:"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.rfind(prompt, 0), 0u);
  EXPECT_EQ(r.out.back(), '\n');

  // The session holds the prompt and every token generated: it loads, and goes on from there.
  ASSERT_TRUE(fs::exists(session + "/session.json"));
  const CliResult more = leoam::testing_cli::run_leoam(
      dir_, {"run", "-m", kStoriesModel, "--kv-load", session, "-n", "3", "-c", "16384", "-t", "1", "--policy", "leoam"});
  ASSERT_EQ(more.status, 0) << more.err;
  EXPECT_EQ(tokens_in(more.err, "prompt"), n_prompt + n_generated) << more.err;
  EXPECT_EQ(tokens_in(more.err, "generated"), 3) << more.err;
}

TEST_F(InterruptCliTest, SigintInPrefillStopsAtABatchAndSavesNothing) {
  const std::string session = dir_ + "/session";
  Child child({"run", "-m", kStoriesModel, "-f", long_prompt(), "-n", "8", "-c", "32768", "-b", "16", "-t", "1",
               "--kv-stats", "--kv-save", session},
              dir_ + "/stderr.txt");
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(child.wait_for_sigint_handler());
  child.interrupt();
  const CliResult r = child.finish();
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_EQ(r.out, "");  // the prompt is echoed once evaluated
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("leoam: prompt +([0-9]+) tokens .* \\(interrupted: ([0-9]+) of them evaluated\\)")))
      << r.err;
  const long long n_prompt = std::stoll(m[1].str());
  const long long n_done = std::stoll(m[2].str());
  EXPECT_LT(n_done, n_prompt);
  EXPECT_EQ(n_done % 16, 0) << "stopped between batches of 16";
  EXPECT_NE(r.err.find("leoam: generated      0 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("leoam: --kv-stats: the KV is in memory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("leoam: --kv-save: nothing saved to " + session +
                       ": interrupted before the whole prompt was evaluated"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(session));
}

// With --kv-dir the prompt runs layer by layer (the layered prefill), here in one segment: the
// stop is heard between its layers, and the segment's KV, in some layers only, is dropped.
TEST_F(InterruptCliTest, SigintInALayeredPrefillStopsBetweenLayers) {
  Child child({"run", "-m", kStoriesModel, "-f", long_prompt(), "-n", "8", "-c", "32768", "-b", "16", "-t", "1",
               "--kv-dir", dir_ + "/kv", "--kv-device-mb", "0.25", "--kv-host-mb", "0.25"},
              dir_ + "/stderr.txt");
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(child.wait_for_sigint_handler());
  child.interrupt();
  const CliResult r = child.finish();
  EXPECT_EQ(r.status, 130) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("leoam: prompt +([0-9]+) tokens .* \\(interrupted: ([0-9]+) of them evaluated\\)")))
      << r.err;
  EXPECT_LT(std::stoll(m[2].str()), std::stoll(m[1].str()));
  EXPECT_NE(r.err.find("leoam: generated      0 tokens"), std::string::npos) << r.err;
}

TEST_F(InterruptCliTest, SecondSigintExitsAtOnce) {
  // Batches of 4096 tokens: the first SIGINT lands inside one, which runs on; the second ends it.
  Child child({"run", "-m", kStoriesModel, "-f", long_prompt(), "-n", "8", "-c", "32768", "-b", "4096", "-t", "1"},
              dir_ + "/stderr.txt");
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(child.wait_for_sigint_handler());
  child.interrupt();
  for (int i = 0; i < 2000 && child.err_so_far().find("leoam: interrupted") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  child.interrupt();
  const CliResult r = child.finish();
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_EQ(r.err.find("leoam: prompt"), std::string::npos) << "no summary after a second Ctrl-C\n" << r.err;
}

// Ctrl-C during `leoam eval`: the run in progress stops and writes no line, the table of the
// runs done is printed, the exit is 130, and the same command resumes from --out.
TEST_F(InterruptCliTest, SigintStopsAnEvalSweepWhichTheSameCommandResumes) {
  const std::string out = dir_ + "/results.jsonl";
  const std::vector<std::string> args = {"eval", "-m", kStoriesModel, "-c", "512", "-t", "1", "--task", "passkey",
                                         "--ctx", "256", "--depth", "0.1,0.3,0.5,0.7,0.9", "--seeds", "6",
                                         "--policy", "full,leoam", "--budget", "0.5", "--out", out};
  Child child(args, dir_ + "/stderr.txt");
  ASSERT_TRUE(child.started());
  const auto lines_in_out = [&] {
    std::ifstream in(out);
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  };
  for (int i = 0; i < 5000 && lines_in_out() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_GT(lines_in_out(), 0) << "no run finished\n" << child.err_so_far();
  child.interrupt();
  const CliResult r = child.finish();
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_NE(r.err.find("leoam: eval: interrupted in run"), std::string::npos) << r.err;
  const std::string written = read_file(out);
  ASSERT_FALSE(written.empty());
  EXPECT_EQ(written.back(), '\n') << "only whole lines";
  const int done = lines_in_out();
  EXPECT_LT(done, 60) << "the sweep was cut short";
  EXPECT_NE(r.out.find("| passkey |"), std::string::npos) << "the table of the runs done\n" << r.out;

  const CliResult rest = leoam::testing_cli::run_leoam(dir_, args);
  ASSERT_EQ(rest.status, 0) << rest.err;
  EXPECT_NE(rest.err.find("60 runs, " + std::to_string(done) + " skipped"), std::string::npos) << rest.err;
  EXPECT_EQ(lines_in_out(), 60);
}

}  // namespace
