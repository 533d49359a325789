// Runs the `leoam` binary (LEOAM_BIN) as a user would and captures what they see: stdout, stderr
// and the exit status. Shared by the CLI integration tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace leoam::testing_cli {

struct CliResult {
  int status = -1;
  std::string out;
  std::string err;

  std::vector<std::string> err_lines() const { return lines(err); }
  static std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> v;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) v.push_back(line);
    return v;
  }
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `env_prefix LEOAM_BIN args...` with stdin from /dev/null; stderr goes through a file in
// `scratch_dir`. env_prefix is e.g. "TMPDIR='/tmp/x'" (already quoted) or empty.
inline CliResult run_leoam(const std::string& scratch_dir, const std::vector<std::string>& args,
                           const std::string& env_prefix = "") {
  std::string cmd = env_prefix.empty() ? "" : env_prefix + " ";
  cmd += shell_quote(LEOAM_BIN);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  const std::string err_path = scratch_dir + "/stderr.txt";
  cmd += " 2>" + shell_quote(err_path) + " </dev/null";
  CliResult r;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, n);
  const int raw = ::pclose(p);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.err = read_file(err_path);
  return r;
}

// `text` with every run of whitespace (a wrapped --help's line breaks and indents) one space.
inline std::string unwrapped(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n' || c == '\t';
    if (!space) {
      out += c;
    } else if (!out.empty() && out.back() != ' ') {
      out += ' ';
    }
  }
  return out;
}

// A failure as the CLI reports it: exit `status`, nothing on stdout, one "leoam: error: " line on
// stderr that mentions `mentions`.
inline void expect_one_line_error(const CliResult& r, int status, const std::string& mentions) {
  EXPECT_EQ(r.status, status) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("leoam: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(mentions), std::string::npos) << r.err;
}

// The third-party fixtures the tests run on.
inline const std::string kFixtures = LEOAM_FIXTURES_DIR;
inline const std::string kStoriesModel = std::string(LEOAM_FIXTURES_DIR) + "/models/stories260K/stories260K.gguf";
inline const std::string kBookText = std::string(LEOAM_FIXTURES_DIR) + "/text/pg19_firstbook.txt";

// A test on stories260K and the book (skipped when either is absent), with a fresh scratch
// directory dir_ that is removed after.
class StoriesCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    if (!fs::exists(kStoriesModel) || !fs::exists(kBookText)) {
      GTEST_SKIP() << "fixture absent: " << kStoriesModel << " or " << kBookText;
    }
    char tmpl[] = "/tmp/leoam_cli_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
};

}  // namespace leoam::testing_cli
