// `leoam eval`: the sweep's JSON lines, resuming an interrupted sweep, determinism, and one-line
// errors for bad flags, run as a user would on the real stories260K. stories260K cannot retrieve
// a pass key, so nothing here asserts accuracy.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;
using leoam::testing_cli::CliResult;
using leoam::testing_cli::read_file;

using leoam::testing_cli::kStoriesModel;
using leoam::testing_cli::kBookText;

std::vector<std::string> read_lines(const std::string& path) { return CliResult::lines(read_file(path)); }

class EvalCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kStoriesModel)) GTEST_SKIP() << "fixture absent: " << kStoriesModel;
    char tmpl[] = "/tmp/leoam_eval_cli_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  // stories260K trains at 128 tokens; -c 512 lets the 256-token prompts and their answers fit.
  CliResult eval(std::vector<std::string> args) {
    args.insert(args.begin(), {"eval", "-m", kStoriesModel, "-c", "512", "-t", "1"});
    return leoam::testing_cli::run_leoam(dir_, args);
  }
  // passkey at ctx 256, depths 0.2 and 0.8, seeds 0 and 1, full and leoam@0.5: 8 runs, through
  // small KV tiers (0.022 + 0.004 MiB) with the disk tier in the test directory.
  CliResult sweep(const std::string& out) {
    return eval({"--task", "passkey", "--ctx", "256", "--depth", "0.2,0.8", "--seeds", "2", "--policy", "full,leoam",
                 "--budget", "0.5", "--out", out, "--kv-dir", dir_ + "/kv", "--kv-device-mb", "0.022",
                 "--kv-host-mb", "0.004", "--kv-chunk", "8", "--kv-recent", "8"});
  }

  // ppl over the first two 128-token windows of the book, under full and streaming@1.
  CliResult ppl(const std::string& out) {
    return eval({"--task", "ppl", "--text", kBookText, "--ctx", "128", "--windows", "2", "--policy", "full,streaming",
                 "--budget", "1", "--out", out});
  }

  std::string dir_;
};

TEST_F(EvalCliTest, SweepWritesOneJsonLinePerRunAndATableRowPerPolicy) {
  const std::string out = dir_ + "/results.jsonl";
  CliResult r = sweep(out);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> lines = read_lines(out);
  ASSERT_EQ(lines.size(), 8u) << read_file(out);
  std::set<std::string> runs;
  for (const std::string& line : lines) {
    const nlohmann::json j = nlohmann::json::parse(line);
    for (const char* field : {"task", "ctx", "depth", "seed", "policy", "budget", "needle_pos", "answers", "output",
                              "score", "tokens_attended_pct", "bytes_read", "n_generated", "decode_ms",
                              "first_step_ms", "policy_memory_peak_bytes"}) {
      EXPECT_TRUE(j.contains(field)) << field << " missing: " << line;
    }
    // leoam's trees hold some bytes about the KV; full keeps nothing.
    const double memory = j.at("policy_memory_peak_bytes").get<double>();
    if (j.at("policy") == "leoam") {
      EXPECT_GT(memory, 0.0) << line;
    } else {
      EXPECT_EQ(memory, 0.0) << line;
    }
    EXPECT_EQ(j.at("task"), "passkey");
    EXPECT_EQ(j.at("ctx"), 256);
    const double score = j.at("score").get<double>();
    EXPECT_TRUE(score == 0.0 || score == 1.0) << line;
    ASSERT_TRUE(j.at("answers").is_array());
    EXPECT_EQ(j.at("answers").size(), 1u) << line;
    const std::string policy = j.at("policy").get<std::string>();
    const double attended = j.at("tokens_attended_pct").get<double>();
    if (policy == "full") {
      EXPECT_EQ(j.at("budget").get<double>(), 1.0);
      EXPECT_EQ(attended, 100.0);
    } else {
      EXPECT_EQ(policy, "leoam");
      EXPECT_EQ(j.at("budget").get<double>(), 0.5);
      EXPECT_GT(attended, 0.0);
      EXPECT_LT(attended, 100.0);
    }
    EXPECT_GT(j.at("bytes_read").at("disk").get<double>(), 0.0) << "the KV is 20x the tiers: it is read from disk";
    runs.insert(policy + " " + j.at("depth").dump() + " " + j.at("seed").dump());
  }
  EXPECT_EQ(runs.size(), 8u) << "every (depth, seed, policy) once";
  EXPECT_NE(r.out.find("| passkey | full | 4 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| passkey | leoam@0.5 | 4 |"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("eval: 8/8 passkey ctx 256 depth 0.8 seed 1 leoam@0.5: score "), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_empty(dir_ + "/kv")) << "each run's KV directory is removed";
}

// --show's "12.3 MiB", as eval_command.cpp prints it.
std::string human_bytes(uint64_t n_bytes) {
  if (n_bytes < 1024) return std::to_string(n_bytes) + " B";
  const char* const units[] = {"KiB", "MiB", "GiB"};
  double v = static_cast<double>(n_bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 2) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

TEST_F(EvalCliTest, ShowPrintsABlockPerRunWithItsLineAndTheTierBytes) {
  const std::string out = dir_ + "/results.jsonl";
  // The KV (256 positions x 640 B = 160 KiB) is 6x the tiers (0.022 + 0.004 MiB): mostly on disk.
  CliResult r = eval({"--task", "passkey", "--ctx", "256", "--depth", "0.5", "--first-seed", "7", "--policy",
                      "full,leoam", "--budget", "0.5", "--out", out, "--kv-dir", dir_ + "/kv", "--kv-device-mb", "0.022", "--kv-host-mb",
                      "0.004", "--kv-chunk", "8", "--kv-recent", "8", "--show"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> lines = read_lines(out);
  ASSERT_EQ(lines.size(), 2u) << read_file(out);
  const std::vector<std::string> shown = CliResult::lines(r.out);
  size_t at = 0;  // the next line of stdout to match
  for (const std::string& line : lines) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::string policy = j.at("policy").get<std::string>();
    SCOPED_TRACE(policy);
    EXPECT_EQ(j.at("seed"), 7) << "--first-seed 7";
    const nlohmann::json& bytes = j.at("bytes_read");
    const uint64_t device = bytes.at("device").get<uint64_t>();
    const uint64_t host = bytes.at("host").get<uint64_t>();
    const uint64_t disk = bytes.at("disk").get<uint64_t>();
    EXPECT_EQ(bytes.size(), 3u) << line;
    const int64_t n_generated = j.at("n_generated").get<int64_t>();
    if (policy == "full") {
      ASSERT_GE(n_generated, 2) << "at least one decode step, which attends to every position";
      const uint64_t kv_bytes = 256 * 640;
      const auto tier_bytes = static_cast<uint64_t>((0.022 + 0.004) * 1024 * 1024);
      EXPECT_GE(device + host + disk, kv_bytes) << line;
      EXPECT_GE(disk, kv_bytes - tier_bytes) << "what the tiers cannot hold is read from disk: " << line;
      EXPECT_GT(device, 0u) << "the sink and recent chunks are pinned to the device: " << line;
    } else {
      EXPECT_GT(disk, 0u) << line;
    }

    // The block: a header, then one line per field, in this order.
    const std::string header =
        "== passkey ctx 256 depth 0.5 seed 7: " + std::string(policy == "full" ? "full" : "leoam@0.5");
    auto block_start = std::find(shown.begin() + static_cast<std::ptrdiff_t>(at), shown.end(), header);
    ASSERT_NE(block_start, shown.end()) << header << " not in:\n" << r.out;
    EXPECT_EQ(std::count(shown.begin(), shown.end(), header), 1) << r.out;
    at = static_cast<size_t>(block_start - shown.begin()) + 1;
    ASSERT_GE(shown.size(), at + 6) << r.out;
    EXPECT_EQ(shown[at], "expected:   " + j.at("answers").at(0).dump());
    EXPECT_EQ(shown[at + 1], "output:     " + j.at("output").dump()) << "escaped, on one line";
    EXPECT_EQ(shown[at + 2], "score:      " + std::string(j.at("score").get<double>() == 1.0 ? "1" : "0"));
    EXPECT_TRUE(shown[at + 3].starts_with("attended:   ") && shown[at + 3].ends_with("% of tokens")) << shown[at + 3];
    EXPECT_EQ(shown[at + 4], "bytes read: device " + human_bytes(device) + ", host " + human_bytes(host) + ", disk " +
                                 human_bytes(disk));
    char decode[160];
    const double decode_ms = j.at("decode_ms").get<double>();
    const double first_step_ms = j.at("first_step_ms").get<double>();
    ASSERT_GE(n_generated, 2) << line;
    EXPECT_GT(first_step_ms, 0.0) << line;
    EXPECT_LE(first_step_ms, decode_ms) << line;
    std::snprintf(decode, sizeof(decode),
                  "decode:     %.2f ms/token, %.1f ms total (%lld tokens; the first step %.1f ms, then %.2f ms/token)",
                  decode_ms / static_cast<double>(n_generated), decode_ms, static_cast<long long>(n_generated),
                  first_step_ms, (decode_ms - first_step_ms) / static_cast<double>(n_generated - 1));
    EXPECT_EQ(shown[at + 5], decode);
    at += 6;
  }
  // The table closes stdout, after the blocks.
  const size_t table = r.out.find("| task | policy |");
  ASSERT_NE(table, std::string::npos) << r.out;
  EXPECT_GT(table, r.out.rfind("decode:     ")) << r.out;
  EXPECT_NE(r.out.find("| passkey | leoam@0.5 | 1 |"), std::string::npos) << r.out;

  // Without --kv-dir the whole KV is on the device tier, in RAM: every read is from the device.
  CliResult memory = eval({"--task", "passkey", "--ctx", "256", "--depth", "0.5", "--policy", "full", "--out",
                           dir_ + "/memory.jsonl", "--show"});
  ASSERT_EQ(memory.status, 0) << memory.err;
  const nlohmann::json in_ram = nlohmann::json::parse(read_lines(dir_ + "/memory.jsonl").at(0));
  const uint64_t device = in_ram.at("bytes_read").at("device").get<uint64_t>();
  EXPECT_GE(device, 256u * 640u) << "every position, once at least";
  EXPECT_NE(memory.out.find("\nbytes read: device " + human_bytes(device) + ", host 0 B, disk 0 B\n"), std::string::npos)
      << memory.out;
}

TEST_F(EvalCliTest, ShowPromptPrintsEachSamplesPromptOnceBeforeItsRuns) {
  const std::string out = dir_ + "/results.jsonl";
  CliResult r = eval({"--task", "passkey", "--ctx", "256", "--depth", "0.2,0.8", "--policy", "full,leoam", "--budget",
                      "0.5", "--out", out, "--show-prompt", "--show"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> lines = read_lines(out);
  ASSERT_EQ(lines.size(), 4u) << read_file(out);
  const std::vector<std::string> shown = CliResult::lines(r.out);
  for (const double depth : {0.2, 0.8}) {
    SCOPED_TRACE(depth);
    const nlohmann::json j = nlohmann::json::parse(lines[depth == 0.2 ? 0 : 2]);
    ASSERT_EQ(j.at("depth"), depth);
    const std::string header = "== passkey ctx 256 depth " + std::string(depth == 0.2 ? "0.2" : "0.8") +
                               " seed 0: prompt, 256 tokens, needle at token " +
                               std::to_string(j.at("needle_pos").get<int64_t>());
    const auto at = std::find(shown.begin(), shown.end(), header);
    ASSERT_NE(at, shown.end()) << header << " not in:\n" << r.out;
    EXPECT_EQ(std::count(shown.begin(), shown.end(), header), 1) << "once for both policies";
    ASSERT_LT(at + 1, shown.end());
    const std::string prompt = nlohmann::json::parse(*(at + 1)).get<std::string>();  // escaped on one line
    const std::string key = j.at("answers").at(0).get<std::string>();
    EXPECT_NE(prompt.find("The pass key is " + key + "."), std::string::npos) << prompt;
    EXPECT_TRUE(prompt.ends_with("The pass key is")) << prompt;
    // Its runs' blocks follow it, before the next sample's prompt.
    EXPECT_EQ(*(at + 3), "== passkey ctx 256 depth " + std::string(depth == 0.2 ? "0.2" : "0.8") + " seed 0: full");
  }

  // Resumed with nothing left to run, no prompt is printed.
  CliResult again = eval({"--task", "passkey", "--ctx", "256", "--depth", "0.2,0.8", "--policy", "full,leoam",
                          "--budget", "0.5", "--out", out, "--show-prompt"});
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(again.out.find("prompt, 256 tokens"), std::string::npos) << again.out;
}

TEST_F(EvalCliTest, ResumeSkipsFinishedRunsAndRedoesATornLastLine) {
  const std::string out = dir_ + "/results.jsonl";
  ASSERT_EQ(sweep(out).status, 0);
  const std::vector<std::string> first = read_lines(out);
  ASSERT_EQ(first.size(), 8u);

  CliResult again = sweep(out);
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(read_lines(out), first) << "nothing appended";
  EXPECT_NE(again.err.find("8 skipped"), std::string::npos) << again.err;
  EXPECT_NE(again.out.find("| passkey | full | 4 |"), std::string::npos) << "the table covers resumed lines";

  // Interrupted: 5 lines and half of the sixth.
  {
    std::ofstream cut(out, std::ios::binary | std::ios::trunc);
    for (size_t i = 0; i < 5; ++i) cut << first[i] << "\n";
    cut << first[5].substr(0, first[5].size() / 2);
  }
  CliResult resumed = sweep(out);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("5 skipped"), std::string::npos) << resumed.err;
  const std::vector<std::string> lines = read_lines(out);
  ASSERT_EQ(lines.size(), 8u) << read_file(out);
  std::set<std::string> keys;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i < 5) {
      EXPECT_EQ(lines[i], first[i]);
    }
    const nlohmann::json j = nlohmann::json::parse(lines[i]);  // throws on a torn line
    keys.insert(j.at("policy").dump() + j.at("depth").dump() + j.at("seed").dump());
  }
  EXPECT_EQ(keys.size(), 8u);
  EXPECT_NE(resumed.out.find("| passkey | leoam@0.5 | 4 |"), std::string::npos) << resumed.out;
}

TEST_F(EvalCliTest, FullAttentionOutputIsTheSameAcrossRuns) {
  std::vector<std::string> outputs;
  for (const std::string name : {"a.jsonl", "b.jsonl"}) {
    const std::string out = dir_ + "/" + name;
    CliResult r = eval({"--task", "niah_single", "--ctx", "256", "--depth", "0.5", "--seeds", "1", "--policy", "full",
                        "--out", out});
    ASSERT_EQ(r.status, 0) << r.err;
    const std::vector<std::string> lines = read_lines(out);
    ASSERT_EQ(lines.size(), 1u);
    const nlohmann::json j = nlohmann::json::parse(lines[0]);
    EXPECT_EQ(j.at("bytes_read").at("disk"), 0) << "no --kv-dir: the KV is in RAM";
    outputs.push_back(j.at("output").get<std::string>());
  }
  EXPECT_FALSE(outputs[0].empty());
  EXPECT_EQ(outputs[0], outputs[1]);
}

// The table puts each policy's measured share of tokens attended and KV bytes read per decode
// step, per tier, next to its score, under the budget rule line; policies that attended shares
// more than a point apart at one budget get a warning.
TEST_F(EvalCliTest, TableShowsWhatEachPolicyAttendedAndReadAndWarnsWhenUnmatched) {
  const std::string out = dir_ + "/results.jsonl";
  CliResult r = eval({"--task", "passkey", "--ctx", "256", "--depth", "0.5", "--policy", "full,streaming,quest,leoam",
                      "--budget", "0.1", "--kv-recent", "8", "--out", out});
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<std::string, nlohmann::json> by_policy;
  for (const std::string& line : read_lines(out)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    by_policy[j.at("policy").get<std::string>()] = j;
  }
  ASSERT_EQ(by_policy.size(), 4u) << read_file(out);
  const auto per_token = [&](const std::string& policy, const char* tier) {
    return by_policy.at(policy).at("kv_bytes_per_token").at(tier).get<double>();
  };
  // full reads every position of the 5 layers (640 B each) at each step; nothing leaves RAM.
  const double full_device = per_token("full", "device");
  EXPECT_GE(full_device, 256.0 * 640) << by_policy.at("full");
  EXPECT_LE(full_device, 272.0 * 640) << by_policy.at("full");
  // leoam at 10% reads its chunks of 2: the sink, the recent window and ~25 far tokens.
  EXPECT_LT(per_token("leoam", "device"), 0.3 * full_device) << by_policy.at("leoam");
  for (const auto& [policy, j] : by_policy) {
    EXPECT_EQ(per_token(policy, "host"), 0.0) << policy;
    EXPECT_EQ(per_token(policy, "disk"), 0.0) << policy;
  }
  // streaming: (4 + 8 + ceil(0.1 * 245)) / 257 = 14.4% at the first step; quest: one page of 16.
  const double streaming = by_policy.at("streaming").at("tokens_attended_pct").get<double>();
  const double quest = by_policy.at("quest").at("tokens_attended_pct").get<double>();
  EXPECT_GT(streaming, 13.0);
  EXPECT_LT(streaming, 16.0);
  EXPECT_LT(quest, streaming - 1.0);

  const size_t rule = r.out.find("budget rule: every sparse policy attends the sink (4 tokens), the recent window (8) "
                                 "and, of the far tokens between them, the budget B, a fraction of them (B <= 1) or "
                                 "a whole count (B > 1); a fraction B is max(B, 0.5) in the first "
                                 "round(n_layer/16) layers (none of 5 here)\n");
  ASSERT_NE(rule, std::string::npos) << r.out;
  const size_t header =
      r.out.find("| task | policy | samples | score | tokens attended | KV read/token: device | host | disk |\n");
  ASSERT_NE(header, std::string::npos) << r.out;
  EXPECT_LT(rule, header);
  EXPECT_NE(r.out.find("| passkey | full | 1 | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" | 100.0% | " + human_bytes(static_cast<uint64_t>(std::llround(full_device))) + " | 0 B | 0 B |\n"),
            std::string::npos)
      << r.out;
  char streaming_cells[64];
  std::snprintf(streaming_cells, sizeof(streaming_cells), " | %.1f%% | ", streaming);
  EXPECT_NE(r.out.find(streaming_cells), std::string::npos) << r.out;
  char warning[160];
  std::snprintf(warning, sizeof(warning), "warning: budget 0.1: the policies attended from %.1f%% (quest) to ", quest);
  EXPECT_NE(r.out.find(warning), std::string::npos) << r.out;

  // One sparse policy at the budget: nothing to match, no warning.
  CliResult single = eval({"--task", "passkey", "--ctx", "256", "--depth", "0.5", "--policy", "full,quest", "--budget",
                           "0.1", "--kv-recent", "8", "--out", dir_ + "/single.jsonl"});
  ASSERT_EQ(single.status, 0) << single.err;
  EXPECT_EQ(single.out.find("warning:"), std::string::npos) << single.out;
}

TEST_F(EvalCliTest, StraddleChunkIsPartOfARunsKeyAndItsTable) {
  const std::string out = dir_ + "/results.jsonl";
  const auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--task", "passkey", "--ctx", "256", "--depth", "0.5", "--policy", "full",
                                     "--out", out};
    args.insert(args.end(), extra.begin(), extra.end());
    return eval(args);
  };
  CliResult straddled = run({"--straddle-chunk", "8"});
  ASSERT_EQ(straddled.status, 0) << straddled.err;
  CliResult plain = run({});
  ASSERT_EQ(plain.status, 0) << plain.err;
  CliResult again = run({"--straddle-chunk", "8"});
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.err.find("1 runs, 1 skipped"), std::string::npos) << again.err;
  const std::vector<std::string> lines = read_lines(out);
  ASSERT_EQ(lines.size(), 2u) << "the plain run is not the straddled one: " << read_file(out);
  const nlohmann::json a = nlohmann::json::parse(lines[0]);
  const nlohmann::json b = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(a.at("straddle_chunk"), 8);
  EXPECT_FALSE(b.contains("straddle_chunk"));
  EXPECT_NE(a.at("needle_pos"), b.at("needle_pos")) << "the needle moved to an edge";
  EXPECT_EQ(a.at("answers"), b.at("answers"));
  // Each table holds the lines of its own --straddle-chunk only.
  for (const CliResult* r : {&straddled, &plain, &again}) {
    EXPECT_NE(r->out.find("| passkey | full | 1 |"), std::string::npos) << r->out;
  }
}

TEST_F(EvalCliTest, BadFlagsFailWithOneLineAndWriteNothing) {
  const std::string out = dir_ + "/results.jsonl";
  const std::vector<std::vector<std::string>> cases = {
      {"--task", "nosuchtask", "--ctx", "256"},
      {"--task", "passkey", "--ctx", "256", "--depth", "0.5,1.5"},
      {"--task", "passkey", "--ctx", "1024"},  // -c 512
      {"--task", "passkey", "--ctx", "256", "--policy", "full,nosuchpolicy"},
      {"--task", "passkey", "--ctx", "256", "--haystack", dir_ + "/missing.txt"},
      {"--task", "passkey", "--ctx", "256", "--budget", "0.1,inf"},
      {"--task", "passkey", "--ctx", "256", "--layer-budget", "0=inf"},
  };
  for (std::vector<std::string> args : cases) {
    args.insert(args.end(), {"--out", out});
    SCOPED_TRACE(args[1] + " " + args[3] + " " + args[args.size() - 3]);
    CliResult r = eval(args);
    EXPECT_NE(r.status, 0);
    ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
    EXPECT_TRUE(r.err.starts_with("leoam: error: ")) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_FALSE(fs::exists(out));
  }
}

TEST_F(EvalCliTest, PplScoresEachWindowUnderEachPolicyAndResumes) {
  if (!fs::exists(kBookText)) GTEST_SKIP() << "fixture absent: " << kBookText;
  const std::string out = dir_ + "/ppl.jsonl";
  CliResult r = ppl(out);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> lines = read_lines(out);
  ASSERT_EQ(lines.size(), 4u) << read_file(out);
  std::map<std::string, double> nll;  // "policy window" -> nll_sum
  for (const std::string& line : lines) {
    const nlohmann::json j = nlohmann::json::parse(line);
    for (const char* field : {"task", "ctx", "depth", "seed", "policy", "budget", "nll_sum", "n_tokens", "n_bytes",
                              "ppl", "bits_per_byte", "tokens_attended_pct", "decode_ms"}) {
      EXPECT_TRUE(j.contains(field)) << field << " missing: " << line;
    }
    EXPECT_EQ(j.at("task"), "ppl");
    EXPECT_EQ(j.at("ctx"), 128);
    EXPECT_EQ(j.at("depth").get<double>(), 0.0);
    EXPECT_EQ(j.at("budget").get<double>(), 1.0);
    EXPECT_EQ(j.at("n_tokens"), 127) << "every position but the last predicts the next token";
    EXPECT_GT(j.at("n_bytes").get<int64_t>(), 127) << line;
    const double nll_sum = j.at("nll_sum").get<double>();
    const double perplexity = j.at("ppl").get<double>();
    EXPECT_GT(perplexity, 1.0) << line;
    EXPECT_NEAR(perplexity, std::exp(nll_sum / 127.0), 1e-9 * perplexity);
    EXPECT_GT(j.at("bits_per_byte").get<double>(), 0.0) << line;
    nll[j.at("policy").get<std::string>() + " " + j.at("seed").dump()] = nll_sum;
  }
  ASSERT_EQ(nll.size(), 4u) << "every (policy, window) once";
  for (const std::string window : {"0", "1"}) {
    const double full = nll.at("full " + window);
    EXPECT_NEAR(nll.at("streaming " + window), full, 1e-6 * std::abs(full)) << "budget 1 is full attention";
  }
  EXPECT_NE(nll.at("full 0"), nll.at("full 1")) << "the windows are different text";
  EXPECT_NE(r.out.find("| ppl | 0 | full | 2 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| ppl | 0 | streaming@1 | 2 |"), std::string::npos) << r.out;

  CliResult again = ppl(out);
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(read_lines(out), lines) << "nothing appended";
  EXPECT_NE(again.err.find("4 skipped"), std::string::npos) << again.err;
  EXPECT_NE(again.out.find("| ppl | 0 | streaming@1 | 2 |"), std::string::npos) << "the table covers resumed lines";
}

TEST_F(EvalCliTest, PplDepthPrefillsAShareOfEachWindowAndScoresTheRest) {
  if (!fs::exists(kBookText)) GTEST_SKIP() << "fixture absent: " << kBookText;
  const std::string out = dir_ + "/ppl.jsonl";
  CliResult r = eval({"--task", "ppl", "--text", kBookText, "--ctx", "128", "--windows", "2", "--depth", "0,0.5", "--policy",
                      "full,streaming", "--budget", "16", "--kv-sink", "4", "--kv-recent", "16", "--out", out});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> lines = read_lines(out);
  ASSERT_EQ(lines.size(), 8u) << read_file(out);
  std::map<std::string, nlohmann::json> by_run;  // "policy depth window"
  for (const std::string& line : lines) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const double depth = j.at("depth").get<double>();
    // floor(0.5 * 127) = 63 tokens prefilled; the 64 after them are decoded, each predicting the next.
    EXPECT_EQ(j.at("prefill_tokens"), depth == 0.0 ? 0 : 63) << line;
    EXPECT_EQ(j.at("n_tokens"), depth == 0.0 ? 127 : 64) << line;
    EXPECT_GT(j.at("ppl").get<double>(), 1.0) << line;
    by_run[j.at("policy").get<std::string>() + " " + j.at("depth").dump() + " " + j.at("seed").dump()] = j;
  }
  ASSERT_EQ(by_run.size(), 8u) << "every (policy, depth, window) once";
  for (const std::string window : {"0", "1"}) {
    // The streaming window (sink 4 + 16 far + recent 16) drops far tokens of the decoded half:
    // it scores it otherwise than full, and attends less.
    const nlohmann::json& full = by_run.at("full 0.5 " + window);
    const nlohmann::json& streaming = by_run.at("streaming 0.5 " + window);
    EXPECT_NE(streaming.at("nll_sum").get<double>(), full.at("nll_sum").get<double>()) << window;
    EXPECT_LT(streaming.at("tokens_attended_pct").get<double>(), 100.0) << window;
    EXPECT_LT(full.at("nll_sum").get<double>(), by_run.at("full 0.0 " + window).at("nll_sum").get<double>())
        << "64 of the 127 predictions";
  }
  EXPECT_NE(r.out.find("| ppl | 0.5 | full | 2 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| ppl | 0.5 | streaming@16 | 2 |"), std::string::npos) << r.out;

  // A depth that leaves nothing to decode fails before --out is touched.
  CliResult bad = eval({"--task", "ppl", "--text", kBookText, "--ctx", "128", "--depth", "1", "--out", dir_ + "/bad.jsonl"});
  EXPECT_NE(bad.status, 0);
  ASSERT_EQ(bad.err_lines().size(), 1u) << bad.err;
  EXPECT_NE(bad.err.find("leaves no token to decode"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir_ + "/bad.jsonl"));
}

TEST_F(EvalCliTest, PplBadFlagsFailWithOneLineAndWriteNothing) {
  const std::string out = dir_ + "/ppl.jsonl";
  const std::string tiny = dir_ + "/tiny.txt";
  std::ofstream(tiny) << "Once upon a time.";
  const std::vector<std::vector<std::string>> cases = {
      {"--task", "ppl", "--ctx", "128"},                               // no --text
      {"--task", "passkey", "--ctx", "256", "--text", tiny},           // --text with another task
      {"--task", "ppl", "--ctx", "128", "--text", tiny},               // less than one window
      {"--task", "ppl", "--ctx", "128", "--text", kBookText, "--straddle-chunk", "8"},  // no needle to place
  };
  for (std::vector<std::string> args : cases) {
    args.insert(args.end(), {"--out", out});
    SCOPED_TRACE(args[1] + " " + (args.size() > 6 ? args[5] : ""));
    CliResult r = eval(args);
    EXPECT_NE(r.status, 0);
    ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
    EXPECT_TRUE(r.err.starts_with("leoam: error: ")) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_FALSE(fs::exists(out));
  }
}

}  // namespace
