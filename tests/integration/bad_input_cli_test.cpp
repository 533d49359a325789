// Bad input to `leoam`, run as a user would: numeric flags out of range, a --kv-dir or --kv-save
// that cannot be written, and --kv-chunk sizes that are not powers of two (which are supported).
// Each error is one line naming the flag, found before the model is loaded (exit status 2).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;
using leoam::testing_cli::CliResult;
using leoam::testing_cli::kBookText;
using leoam::testing_cli::kStoriesModel;
using leoam::testing_cli::read_file;

class BadInputCliTest : public leoam::testing_cli::StoriesCliTest {
 protected:
  void SetUp() override {
    StoriesCliTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // About 900 tokens of real text: long enough that a prefill would print its timing.
    prompt_ = dir_ + "/prompt.txt";
    std::ofstream(prompt_) << read_file(kBookText).substr(0, 1700);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::permissions(dir_ + "/ro", fs::perms::owner_all, ec);
    StoriesCliTest::TearDown();
  }
  CliResult run(std::vector<std::string> args) {
    args.insert(args.begin(), {"run", "-m", kStoriesModel, "-f", prompt_, "-c", "1024", "-t", "1"});
    return leoam::testing_cli::run_leoam(dir_, args);
  }
  // One error line, the exact text given, exit status 2, and no work done (no timing line).
  static void expect_usage_error(const CliResult& r, const std::string& message) {
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err, "leoam: error: " + message + " (run with --help for usage)\n");
    EXPECT_EQ(r.out, "");
  }
  std::string prompt_;
};

// CLI11's own range checks printed "Value 0 not in range 0.000000 to 1797693134862315..." (DBL_MAX).
TEST_F(BadInputCliTest, NumericFlagErrorsNameTheFlagAndTheRule) {
  expect_usage_error(run({"--budget", "0"}), "--budget: must be > 0, got 0");
  expect_usage_error(run({"--budget", "inf"}), "--budget: must be a finite number, got inf");
  expect_usage_error(run({"--budget", "ten"}), "--budget: 'ten' is not a number");
  expect_usage_error(run({"--threads", "-1"}), "--threads: must be >= 0, got -1");
  expect_usage_error(run({"--threads", "1.5"}), "--threads: '1.5' is not a whole number");
  expect_usage_error(run({"--top-p", "2"}), "--top-p: must be from 0 to 1, got 2");
  expect_usage_error(run({"--temp", "warm"}), "--temp: 'warm' is not a number");
  expect_usage_error(run({"--kv-chunk", "1"}), "--kv-chunk: must be from 2 to 512, got 1");
  expect_usage_error(run({"--seed", "-2"}), "--seed: must be >= -1, got -2");
  expect_usage_error(run({"--kv-dir", dir_ + "/kv", "--kv-device-mb", "0"}), "--kv-device-mb: must be > 0, got 0");
  // The other subcommands share the checks.
  CliResult eval = leoam::testing_cli::run_leoam(
      dir_, {"eval", "-m", kStoriesModel, "--task", "passkey", "--ctx", "256", "--budget", "0.1,0"});
  expect_usage_error(eval, "--budget: must be > 0, got 0");
  CliResult bench = leoam::testing_cli::run_leoam(dir_, {"bench", "--synthetic", "tiny", "-r", "0"});
  expect_usage_error(bench, "--repetitions: must be from 1 to 1000, got 0");
  // --help gives --seed's default and rule, not the largest int64 as the top of a range.
  const CliResult help = leoam::testing_cli::run_leoam(dir_, {"run", "--help"});
  EXPECT_NE(help.out.find("--seed INT=-1"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("(-1: a random one"), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("9223372036854775807"), std::string::npos) << help.out;
}

// A --kv-save path that is a file failed only after the prefill and generation.
TEST_F(BadInputCliTest, KvSaveThatCannotBeWrittenFailsBeforeAnyWork) {
  const std::string file = dir_ + "/file";
  std::ofstream(file) << "not a directory";
  expect_usage_error(run({"--kv-save", file}),
                     "--kv-save: '" + file + "' is a file, not a directory; give a directory you can write to");
  expect_usage_error(run({"--kv-save", file + "/session"}),
                     "--kv-save: '" + file + "' is a file, not a directory (on the way to '" + file +
                         "/session'); give a directory you can write to");
  EXPECT_EQ(read_file(file), "not a directory");
  // A path to create is fine, and the check leaves nothing behind when the run fails later.
  const std::string fresh = dir_ + "/new/session";
  CliResult r = run({"--kv-save", fresh, "--kv-load", dir_ + "/no-session"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_FALSE(fs::exists(dir_ + "/new"));
}

TEST_F(BadInputCliTest, KvDirThatCannotBeWrittenNamesTheFlag) {
  // /proc takes no new files, even from root.
  CliResult r = run({"--kv-dir", "/proc/leoam-kv"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.err.rfind("leoam: error: --kv-dir: cannot create files in '/proc': ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("; give a directory you can write to"), std::string::npos) << r.err;
  expect_usage_error(run({"--kv-dir", prompt_ + "/kv"}), "--kv-dir: '" + prompt_ + "' is a file, not a directory (on the way to '" +
                                                             prompt_ + "/kv'); give a directory you can write to");
}

TEST_F(BadInputCliTest, KvDirReadOnlyNamesTheFlag) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into a mode 0555 directory";
  const std::string ro = dir_ + "/ro";
  ASSERT_TRUE(fs::create_directory(ro));
  ASSERT_EQ(::chmod(ro.c_str(), 0555), 0);
  expect_usage_error(run({"--kv-dir", ro}),
                     "--kv-dir: cannot create files in '" + ro + "': Permission denied; give a directory you can write to");
  expect_usage_error(run({"--kv-save", ro + "/session"}), "--kv-save: cannot create files in '" + ro +
                                                              "': Permission denied; give a directory you can write to");
}

// Chunks need not be powers of two (--help says so): leoam's adaptive chunks are C times a power
// of two. Through tiers so small that chunks go to disk and back, a chunk of 12 gives the same
// text as with the KV in RAM. The budget is a count, so that the disk records' grain, set for the
// whole context, is the trees' blocks at every step (a fraction's budget grows with the context,
// and a shorter context's trees may take finer blocks, which they fill from coarser records).
TEST_F(BadInputCliTest, KvChunkNotAPowerOfTwoWorksThroughTheDiskTier) {
  const CliResult help = leoam::testing_cli::run_leoam(dir_, {"run", "--help"});
  EXPECT_NE(help.out.find("not only powers of two"), std::string::npos);
  const std::vector<std::string> common = {"-n", "24", "--temp", "0", "--policy", "leoam", "--budget", "96",
                                           "--kv-chunk", "12", "--kv-stats"};
  std::vector<std::string> ram = common;
  CliResult in_ram = run(ram);
  ASSERT_EQ(in_ram.status, 0) << in_ram.err;
  std::vector<std::string> disk = common;
  disk.insert(disk.end(), {"--kv-dir", dir_ + "/kv", "--kv-device-mb", "0.078", "--kv-host-mb", "0.01"});
  CliResult on_disk = run(disk);
  ASSERT_EQ(on_disk.status, 0) << on_disk.err;
  EXPECT_NE(on_disk.err.find("chunks of 12 tokens"), std::string::npos) << on_disk.err;
  EXPECT_EQ(on_disk.err.find("disk read latency:  count 0,"), std::string::npos) << "no chunk came back from disk\n"
                                                                                   << on_disk.err;
  EXPECT_EQ(on_disk.out, in_ram.out);
}

}  // namespace
