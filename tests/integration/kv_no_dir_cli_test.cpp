// Without --kv-dir, the policies that score chunks (leoam, quest, oracle, h2o-chunked) get the
// tiered store without a disk tier: the KV never leaves RAM and no file is written, in $TMPDIR or
// anywhere else the run could reach.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;
using leoam::testing_cli::CliResult;
using leoam::testing_cli::shell_quote;

using leoam::testing_cli::kFixtures;
using leoam::testing_cli::kStoriesModel;

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

TEST(KvNoDirCli, ChunkPoliciesWriteNoFile) {
  if (!fs::exists(kStoriesModel)) GTEST_SKIP() << "fixture absent: " << kStoriesModel;
  char tmpl[] = "/tmp/leoam_no_dir_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  const std::string scratch = root + "/scratch";  // stderr of the runs
  const std::string tmp = root + "/tmp";          // $TMPDIR of the runs
  const std::string cwd = root + "/cwd";          // their working directory
  for (const std::string& d : {scratch, tmp, cwd}) fs::create_directory(d);
  for (const std::string policy : {"leoam", "quest", "oracle", "h2o-chunked"}) {
    const std::string env = "cd " + shell_quote(cwd) + " && TMPDIR=" + shell_quote(tmp);
    CliResult r = leoam::testing_cli::run_leoam(
        scratch,
        {"run", "-m", kStoriesModel, "-c", "1024", "-t", "1", "-p", std::string(600, 'a'), "-n", "8", "--temp", "0",
         "--policy", policy, "--budget", "0.1", "--kv-stats"},
        env);
    ASSERT_EQ(r.status, 0) << policy << ": " << r.err;
    EXPECT_NE(r.err.find("disk I/O: none"), std::string::npos) << policy << ": " << r.err;
    EXPECT_TRUE(entries(tmp).empty()) << policy << " wrote into $TMPDIR: " << entries(tmp)[0];
    EXPECT_TRUE(entries(cwd).empty()) << policy << " wrote into its working directory: " << entries(cwd)[0];
  }
  // A $TMPDIR where nothing can be made (under a regular file; root too is refused) is no obstacle.
  std::ofstream(root + "/file") << "x";
  CliResult r = leoam::testing_cli::run_leoam(
      scratch,
      {"run", "-m", kStoriesModel, "-c", "1024", "-t", "1", "-p", "Once upon a time", "-n", "4", "--policy", "leoam"},
      "TMPDIR=" + shell_quote(root + "/file/tmp"));
  EXPECT_EQ(r.status, 0) << r.err;
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace
