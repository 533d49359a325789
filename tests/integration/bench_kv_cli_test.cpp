// `leoam bench kv` as a user runs it, on the tiny synthetic model at 4096 tokens with small tiers:
// a row per policy with sane figures, the JSON, a real prefill with -f, and the errors.
#include <gtest/gtest.h>

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

namespace fs = std::filesystem;
using leoam::testing_cli::CliResult;
using leoam::testing_cli::expect_one_line_error;

class BenchKvCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/leoam_bench_kv_cli_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    kv_dir_ = dir_ + "/kv";
    model_ = dir_ + "/tiny.gguf";
    const CliResult synth = leoam::testing_cli::run_leoam(dir_, {"gguf", "synth", "--preset", "tiny", "-o", model_});
    ASSERT_EQ(synth.status, 0) << synth.err;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // bench kv on the tiny model with tiers far smaller than its 4 MiB of KV at 4096 tokens.
  CliResult bench_kv(std::vector<std::string> args) {
    const std::vector<std::string> base = {"bench", "kv", "-m", model_, "--kv-dir", kv_dir_, "--kv-device-mb", "0.3",
                                           "--kv-host-mb", "0.3", "--disk-probe-mb", "2", "-t", "1"};
    args.insert(args.begin(), base.begin(), base.end());
    return leoam::testing_cli::run_leoam(dir_, args);
  }

  std::string dir_;
  std::string kv_dir_;
  std::string model_;
};

TEST_F(BenchKvCliTest, SyntheticKvGivesARowPerPolicyWithSaneFiguresAndTheJson) {
  const std::string json_path = dir_ + "/out.json";
  const std::string md_path = dir_ + "/out.md";
  // In the pipeline (auto): full reads each next layer ahead, and waits for it inside other spans.
  const CliResult r = bench_kv(
      {"--ctx", "4096", "--synthetic-kv", "-n", "4", "--pipeline", "auto", "--json", json_path, "--markdown", md_path});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("disk I/O: O_DIRECT"), std::string::npos) << r.out;
  EXPECT_EQ(leoam::testing_cli::read_file(md_path), r.out);
  const std::vector<std::string> policies = {"full", "streaming", "h2o", "h2o-chunked", "quest", "infinigen", "leoam"};
  for (const std::string& p : policies) EXPECT_NE(r.out.find("| 4096 | " + p + " |"), std::string::npos) << p;

  EXPECT_NE(r.out.find("workload: static"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fidelity: layers 0, 1, KV heads 0, 1"), std::string::npos) << r.out;
  // The fill ends as a prompt does: its last 2 positions prefilled by the engine.
  EXPECT_NE(r.out.find("ending in a prefilled prompt of 2 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("where a step's time went"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| policy MiB | of KV | .lka of KV |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 4096 | leoam | "), std::string::npos) << r.out;
  const nlohmann::json doc = nlohmann::json::parse(leoam::testing_cli::read_file(json_path));
  EXPECT_EQ(doc["workload"], "static");
  EXPECT_EQ(doc["fidelity"]["layers"], nlohmann::json::array({0, 1}));
  EXPECT_GT(doc["machine"]["dram_read_gb_per_s"].get<double>(), 0);
  EXPECT_GT(doc["machine"]["disk_raw_mb_per_s"].get<double>(), 0);
  // Probed before and after the runs; the bounds take the faster of each.
  for (const std::string figure : {"dram_read_gb_per_s", "disk_raw_mb_per_s"}) {
    const nlohmann::json& probes = doc["machine"][figure + "_probes"];
    ASSERT_EQ(probes.size(), 2u) << figure;
    EXPECT_EQ(doc["machine"][figure].get<double>(), std::max(probes[0].get<double>(), probes[1].get<double>()))
        << figure;
  }
  EXPECT_NE(r.out.find("before and after the runs"), std::string::npos) << r.out;
  ASSERT_EQ(doc["results"].size(), policies.size());
  for (size_t i = 0; i < policies.size(); ++i) {
    const nlohmann::json& row = doc["results"][i];
    const std::string p = policies[i];
    EXPECT_EQ(row["policy"], p);
    EXPECT_EQ(row["n_ctx"], 4096);
    EXPECT_EQ(row["steps"].size(), 4u) << p;
    EXPECT_GE(row["disk_share"].get<double>(), 0.8) << p;
    EXPECT_GT(row["prompt_end_s"].get<double>(), 0.0) << p;
    EXPECT_LT(row["prompt_end_s"].get<double>(), row["fill_s"].get<double>()) << p;
    EXPECT_GT(row["ms_per_token"].get<double>(), 0.0) << p;
    EXPECT_GT(row["bound_ms"].get<double>(), 0.0) << p;
    // The bound is what a step's bytes take at the probes' fastest rates, the larger of its two
    // terms. Its disk term is checked by its formula, not against the step's time: the 2 MiB probes
    // are noisy beside other tests, and a timed test would fail on a slow probe.
    const double disk_bytes_per_ms = doc["machine"]["disk_raw_mb_per_s"].get<double>() * 1e3;
    for (const nlohmann::json& step : row["steps"]) {
      const double disk = step["kv_bytes_read"]["disk"].get<double>() + step["abstract_bytes_read"].get<double>();
      EXPECT_NEAR(step["bound_disk_ms"].get<double>(), disk / disk_bytes_per_ms, 1e-9 * disk)
          << p << ": " << step.dump();
      EXPECT_EQ(step["bound_ms"].get<double>(),
                std::max(step["bound_disk_ms"].get<double>(), step["bound_dram_ms"].get<double>()))
          << p;
    }
    // Where the steps after the first went. The measured parts (every one but "other", the rest)
    // count no time twice, so they fit in the step: a wait counted both inside the span that holds
    // it and as I/O would not.
    const nlohmann::json& b = row["breakdown"];
    EXPECT_EQ(b["steps"].get<int>(), 3) << p;
    EXPECT_GT(b["weights_ms"].get<double>(), 0.0) << p;
    const double measured = b["weights_ms"].get<double>() + b["selection_ms"].get<double>() +
                            b["io_wait_ms"].get<double>() + b["decode_ms"].get<double>() +
                            b["attention_ms"].get<double>();
    EXPECT_LE(measured, b["step_ms"].get<double>() * (1 + 1e-9)) << p;
    EXPECT_NEAR(measured + b["other_ms"].get<double>(), b["step_ms"].get<double>(), 1e-6 + 1e-9 * measured) << p;
    // The first step's, apart: one step, as long as the run says it took.
    const nlohmann::json& first = row["first_step_breakdown"];
    EXPECT_EQ(first["steps"].get<int>(), 1) << p;
    EXPECT_GT(first["weights_ms"].get<double>(), 0.0) << p;
    EXPECT_LE(first["step_ms"].get<double>(), row["first_step_ms"].get<double>()) << p;
    if (p == "full") {
      EXPECT_GT(b["io_wait_ms"].get<double>(), 0.0);  // full reads from disk every step
    }
    if (p == "leoam" || p == "quest") {
      EXPECT_GT(b["selection_ms"].get<double>(), 0.0) << p;
    }
    // What the policy held about the KV, beside the KV: nothing for full, and leoam's lean trees
    // (signs and an f16 box per 8-token chunk: 5/32 of the KV in this model's two layers, both
    // fine at a 10% budget, with leaves and counts).
    EXPECT_EQ(row["kv_bytes"].get<uint64_t>(), 4100 * doc["model"]["kv_bytes_per_position"].get<uint64_t>()) << p;
    const double policy_share = row["policy_peak_bytes"].get<double>() / row["kv_bytes"].get<double>();
    if (p == "full") {
      EXPECT_EQ(row["policy_peak_bytes"].get<uint64_t>(), 0u);
    }
    if (p == "leoam") {
      EXPECT_GT(policy_share, 0.15625);
      EXPECT_LT(policy_share, 0.2);
    }
    // The disk tier's abstract records: one per chunk of leoam's fine layers at a 10% budget (a
    // box and every row's signs: 5/32 of the KV, and the headers), one per chunk for the others.
    const double lka_share = row["disk_abstract_bytes"].get<double>() / row["kv_bytes"].get<double>();
    EXPECT_GT(lka_share, 0.0) << p;
    if (p == "leoam") {
      EXPECT_GT(lka_share, 0.15625);
      EXPECT_LT(lka_share, 0.19);
    }
    // What a step reads over what it attends: full reads what it attends, each chunk policy the
    // chunks it attends (the last one partly filled) and, in a step that `--pipeline auto` ran
    // pipelined (which depends on the steps' times), what its forecast read ahead and the step did
    // not pick; infinigen whole 8-token chunks around the tokens it picks.
    const double amplification = row["read_amplification"];
    if (p == "full" || p == "quest" || p == "leoam") {
      EXPECT_GE(amplification, 0.99) << p;
      EXPECT_LT(amplification, p == "full" ? 1.05 : 1.3) << p;
    }
    if (p == "infinigen") {
      EXPECT_EQ(row["chunk_tokens"], 8);
      EXPECT_GT(amplification, 1.5);
    }
    // The RAM tiers (0.3 + 0.3 MiB) over what a step attends: full's whole KV of about 4 MiB.
    if (p == "full") {
      EXPECT_NEAR(row["ram_tiers_over_selection"].get<double>(), 0.6 / 4.0, 0.005);
    }
    // quest's f16 page boxes, kept: 1/16 of the KV, and a block's working copy.
    if (p == "quest") {
      EXPECT_GT(policy_share, 1.0 / 16) << p;
      EXPECT_LT(policy_share, 0.08) << p;
    }
    // Attention's own count of the positions it read, against what the selection says it picked
    // (full: every visible position), step by step.
    for (const nlohmann::json& step : row["steps"]) EXPECT_EQ(step["n_attended"], step["n_selected"]) << p;
    // Fidelity against full attention on the sampled layers: full's exact by construction; a
    // selection covers part of the mass, with an error; the synthetic KV's attention is skewed
    // (its top tenth of chunks holds well over a tenth of the mass).
    if (p == "full") {
      EXPECT_EQ(row["mass_covered"], 1.0);
      EXPECT_EQ(row["output_error"], 0.0);
      EXPECT_TRUE(row["top10_chunk_mass"].is_null());
    } else {
      EXPECT_GT(row["mass_covered"].get<double>(), 0.05) << p;
      EXPECT_LT(row["mass_covered"].get<double>(), 1.0) << p;
      EXPECT_GT(row["output_error"].get<double>(), 0.0) << p;
      EXPECT_GT(row["top10_chunk_mass"].get<double>(), 0.3) << p;
      EXPECT_LE(row["top10_chunk_mass"].get<double>(), 1.0) << p;
      for (const nlohmann::json& step : row["steps"]) {
        EXPECT_GT(step["mass_covered"].get<double>(), 0.0) << p;
        EXPECT_LE(step["mass_covered"].get<double>(), 1.0) << p;
      }
    }
    const double attended = row["attended_fraction"];
    if (p == "full") {
      EXPECT_EQ(attended, 1.0);
      EXPECT_EQ(row["speedup_vs_full"], 1.0);
      // Full reads every chunk: all but the few on the device and host come from disk.
      EXPECT_GT(row["kv_bytes_read"]["disk"].get<double>(), 0.7 * 4096 * 1024);
      // Each step reads each disk-resident chunk once, whole: those the fill left there, and the
      // few that the steps since pushed out of the recent window (at most 2 a layer here).
      const double per_position = doc["model"]["kv_bytes_per_position"].get<double>();
      const int n_layer = doc["model"]["n_layer"].get<int>();
      const double chunk_bytes = row["chunk_tokens"].get<double>() * per_position / n_layer;
      const double filled_on_disk = row["disk_share"].get<double>() * 4096 * per_position;
      for (const nlohmann::json& step : row["steps"]) {
        const double disk = step["kv_bytes_read"]["disk"].get<double>();
        EXPECT_EQ(std::fmod(disk, chunk_bytes), 0.0) << disk;
        EXPECT_GE(disk, filled_on_disk);
        EXPECT_LE(disk, filled_on_disk + 2 * n_layer * chunk_bytes);
      }
    } else {
      // The sink and recent window (68 of 4096) and 10% of the rest: 11.5%.
      EXPECT_GT(attended, 0.09) << p;
      EXPECT_LT(attended, 0.15) << p;
    }
  }
}

// --batch: several sequences a step, each its own store and selector: a row per policy whose
// figures are the batch's (tok/s = sequences / step), every sequence's reads counted, and the
// share attended the policy's as at batch 1.
TEST_F(BenchKvCliTest, ABatchOfSequencesDecodesTogether) {
  const std::string json_path = dir_ + "/batch.json";
  const CliResult r = bench_kv({"--ctx", "2048", "--synthetic-kv", "-n", "3", "--batch", "3", "--policies",
                                "full,leoam", "--json", json_path});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("batch: 3 sequences a step"), std::string::npos) << r.out;
  const nlohmann::json doc = nlohmann::json::parse(leoam::testing_cli::read_file(json_path));
  EXPECT_EQ(doc["batch"].get<int>(), 3);
  ASSERT_EQ(doc["results"].size(), 2u);
  for (const nlohmann::json& row : doc["results"]) {
    const std::string p = row["policy"];
    EXPECT_NEAR(row["tokens_per_s"].get<double>(), 3e3 / row["ms_per_token"].get<double>(), 1e-6) << p;
    // Every sequence's positions count: 3 sequences x 2 layers of the tiny model x over 2048.
    for (const nlohmann::json& step : row["steps"]) {
      EXPECT_GT(step["n_visible"].get<double>(), 3.0 * 2 * 2048) << p;
    }
    EXPECT_EQ(row["breakdown"]["steps"].get<int>(), 2) << p;  // the batch steps' trace
    EXPECT_GT(row["breakdown"]["weights_ms"].get<double>(), 0.0) << p;
    const double attended = row["attended_fraction"];
    if (p == "full") {
      EXPECT_EQ(attended, 1.0);
      EXPECT_GT(row["kv_bytes_read"]["disk"].get<double>(), 3 * 0.7 * 2048 * 1024);  // three stores' KV
    } else {
      EXPECT_GT(attended, 0.09);
      EXPECT_LT(attended, 0.16);
    }
  }
}

// --interleave: the policies' steps taken in turn (in a rotating order) decode what their runs
// one after the other decode: each step reads the same bytes from every tier and attends as many
// positions. The steps' start times show the order they ran in.
TEST_F(BenchKvCliTest, InterleavedPoliciesReadWhatTheirOwnRunsRead) {
  const std::string one_by_one = dir_ + "/one_by_one.json";
  const std::string interleaved = dir_ + "/interleaved.json";
  const std::string trace = dir_ + "/trace.json";
  const std::vector<std::string> args = {"--ctx", "2048", "--synthetic-kv", "-n", "4", "--policies", "full,quest,leoam"};
  std::vector<std::string> a = args, b = args;
  a.insert(a.end(), {"--json", one_by_one});
  b.insert(b.end(), {"--json", interleaved, "--interleave", "--trace", trace});
  const CliResult ra = bench_kv(a);
  ASSERT_EQ(ra.status, 0) << ra.err;
  const CliResult rb = bench_kv(b);
  ASSERT_EQ(rb.status, 0) << rb.err;
  EXPECT_EQ(ra.out.find("policies interleaved"), std::string::npos) << ra.out;
  EXPECT_NE(rb.out.find("policies interleaved (--interleave)"), std::string::npos) << rb.out;
  const nlohmann::json da = nlohmann::json::parse(leoam::testing_cli::read_file(one_by_one));
  const nlohmann::json db = nlohmann::json::parse(leoam::testing_cli::read_file(interleaved));
  EXPECT_FALSE(da["interleave"].get<bool>());
  EXPECT_TRUE(db["interleave"].get<bool>());
  ASSERT_EQ(da["results"].size(), 3u);
  ASSERT_EQ(db["results"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const nlohmann::json& x = da["results"][i];
    const nlohmann::json& y = db["results"][i];
    const std::string p = x["policy"];
    EXPECT_EQ(y["policy"], p);
    ASSERT_EQ(x["steps"].size(), 4u) << p;
    ASSERT_EQ(y["steps"].size(), 4u) << p;
    for (size_t k = 0; k < 4; ++k) {
      SCOPED_TRACE(p + ", step " + std::to_string(k));
      EXPECT_EQ(x["steps"][k]["n_attended"], y["steps"][k]["n_attended"]);
      EXPECT_EQ(x["steps"][k]["kv_bytes_read"], y["steps"][k]["kv_bytes_read"]);
      EXPECT_EQ(x["steps"][k]["abstract_bytes_read"], y["steps"][k]["abstract_bytes_read"]);
    }
    EXPECT_EQ(y["breakdown"]["steps"].get<int>(), 3) << p;  // each policy's own trace
  }
  // Step k of a run: when it began.
  const auto start = [](const nlohmann::json& doc, size_t policy, size_t k) {
    return doc["results"][policy]["steps"][k]["start_s"].get<double>();
  };
  // One after the other: every step of a policy before the next policy's first.
  for (size_t i = 0; i + 1 < 3; ++i) EXPECT_LT(start(da, i, 3), start(da, i + 1, 0)) << i;
  // Interleaved: every policy's step k before any policy's step k + 1; step k starts at policy
  // k mod 3, so step 1 runs quest, leoam, full.
  for (size_t k = 0; k + 1 < 4; ++k) {
    for (size_t i = 0; i < 3; ++i) {
      for (size_t j = 0; j < 3; ++j) EXPECT_LT(start(db, i, k), start(db, j, k + 1)) << i << " " << j << " " << k;
    }
  }
  EXPECT_LT(start(db, 0, 0), start(db, 1, 0));
  EXPECT_LT(start(db, 1, 1), start(db, 2, 1));
  EXPECT_LT(start(db, 2, 1), start(db, 0, 1));

  // --trace: a process per run, named, in the runs' order; its 4 decode steps on one clock with
  // the others', so that every run's step k ends before any run's step k + 1 begins; only the
  // sparse policies select.
  const nlohmann::json events = nlohmann::json::parse(leoam::testing_cli::read_file(trace))["traceEvents"];
  std::vector<std::string> processes;
  std::vector<std::vector<std::pair<double, double>>> steps(3);  // per process: (begin, end) in us
  std::vector<int> selects(3, 0);
  for (const nlohmann::json& e : events) {
    const int pid = e["pid"].get<int>();
    ASSERT_GE(pid, 1);
    ASSERT_LE(pid, 3);
    if (e["name"] == "process_name") processes.push_back(e["args"]["name"]);
    if (e["name"] == "select") ++selects[pid - 1];
    if (e["name"] == "decode step") {
      const double ts = e["ts"].get<double>();
      steps[pid - 1].emplace_back(ts, ts + e["dur"].get<double>());
    }
  }
  EXPECT_EQ(processes, (std::vector<std::string>{"full at 2048 tokens", "quest at 2048 tokens", "leoam at 2048 tokens"}));
  EXPECT_EQ(selects, (std::vector<int>{0, 8, 8}));  // 4 steps x 2 layers
  for (size_t i = 0; i < 3; ++i) ASSERT_EQ(steps[i].size(), 4u) << i;
  for (size_t k = 0; k + 1 < 4; ++k) {
    for (size_t i = 0; i < 3; ++i) {
      for (size_t j = 0; j < 3; ++j) EXPECT_LT(steps[i][k].second, steps[j][k + 1].first) << i << " " << j << " " << k;
    }
  }
}

// --workload moving: heavy hitters per layer and head, and queries that lean on a few far keys
// drawn anew every few steps: the attention is more concentrated than the static workload's, the
// oracle's exact-mass picks cover most of it, and the run is other than the static one.
TEST_F(BenchKvCliTest, AMovingWorkloadConcentratesAttentionOnFarKeysThatMove) {
  const std::string moving_path = dir_ + "/moving.json";
  const std::string static_path = dir_ + "/static.json";
  const std::vector<std::string> args = {"--ctx", "2048", "--synthetic-kv", "-n", "6", "--policies", "full,oracle,leoam"};
  std::vector<std::string> a = args, b = args;
  a.insert(a.end(), {"--workload", "moving", "--json", moving_path});
  b.insert(b.end(), {"--json", static_path});
  const CliResult ra = bench_kv(a);
  ASSERT_EQ(ra.status, 0) << ra.err;
  EXPECT_NE(ra.out.find("workload: moving"), std::string::npos) << ra.out;
  const CliResult rb = bench_kv(b);
  ASSERT_EQ(rb.status, 0) << rb.err;
  const nlohmann::json moving = nlohmann::json::parse(leoam::testing_cli::read_file(moving_path));
  const nlohmann::json fixed = nlohmann::json::parse(leoam::testing_cli::read_file(static_path));
  EXPECT_EQ(moving["workload"], "moving");
  for (size_t i = 1; i < 3; ++i) {
    const std::string p = moving["results"][i]["policy"];
    EXPECT_GT(moving["results"][i]["top10_chunk_mass"].get<double>(),
              fixed["results"][i]["top10_chunk_mass"].get<double>() + 0.1)
        << p;
  }
  EXPECT_EQ(moving["results"][1]["policy"], "oracle");
  EXPECT_GT(moving["results"][1]["mass_covered"].get<double>(), 0.7);
}

TEST_F(BenchKvCliTest, PrefillOfAFileRunsTheSamePoliciesOverRealKv) {
  const std::string text_path = dir_ + "/prompt.txt";
  {
    std::ofstream text(text_path);
    for (int i = 0; i < 200; ++i) text << "the little girl saw a big dog in the sun and they went to play. ";
  }
  const CliResult r = bench_kv({"--ctx", "1024", "-f", text_path, "--policies", "full,leoam", "-n", "3"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("| 1024 | full |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 1024 | leoam |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KV: prefill of " + text_path), std::string::npos) << r.out;

  expect_one_line_error(bench_kv({"--ctx", "100000", "-f", text_path}), 1, "--ctx 100000");

  // With the decode pipeline: its read-ahead runs, and the table says so.
  const CliResult piped = bench_kv({"--ctx", "1024", "-f", text_path, "--policies", "leoam", "-n", "3", "--pipeline", "on"});
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_NE(piped.out.find("the pipeline on):"), std::string::npos) << piped.out;
}

TEST_F(BenchKvCliTest, ErrorsNameTheFlag) {
  expect_one_line_error(leoam::testing_cli::run_leoam(dir_, {"bench", "kv", "-m", model_, "--ctx", "64", "--synthetic-kv"}),
                        2, "--kv-dir");
  expect_one_line_error(bench_kv({"--ctx", "64"}), 2, "--synthetic-kv or -f FILE");
  expect_one_line_error(bench_kv({"--ctx", "64", "--synthetic-kv", "--policies", "full,fastest"}), 2, "--policies");
  expect_one_line_error(bench_kv({"--ctx", "0", "--synthetic-kv"}), 2, "--ctx");
  expect_one_line_error(bench_kv({"--synthetic-kv"}), 2, "--ctx");
  expect_one_line_error(bench_kv({"--ctx", "64", "-f", model_, "--workload", "moving"}), 2, "--workload moving");
  expect_one_line_error(bench_kv({"--ctx", "64", "--synthetic-kv", "--workload", "drifting"}), 2, "--workload");
  // An output that cannot be written fails before the run, and an existing one is left as it was.
  for (const char* flag : {"--json", "--markdown", "--trace"}) {
    expect_one_line_error(bench_kv({"--ctx", "64", "--synthetic-kv", flag, dir_ + "/no-such-dir/out"}), 2,
                          std::string(flag) + ": cannot write '" + dir_ + "/no-such-dir/out'");
    expect_one_line_error(bench_kv({"--ctx", "64", "--synthetic-kv", flag, dir_}), 2, "it is a directory");
  }
  const std::string kept = dir_ + "/kept.json";
  std::ofstream(kept) << "before";
  expect_one_line_error(bench_kv({"--ctx", "64", "--synthetic-kv", "--json", kept, "--workload", "drifting"}), 2,
                        "--workload");
  EXPECT_EQ(leoam::testing_cli::read_file(kept), "before");
  EXPECT_FALSE(fs::exists(dir_ + "/new.json"));
  expect_one_line_error(bench_kv({"--ctx", "64", "--synthetic-kv", "--json", dir_ + "/new.json", "--workload",
                                  "drifting"}),
                        2, "--workload");
  EXPECT_FALSE(fs::exists(dir_ + "/new.json"));  // the check made and removed it
}

TEST_F(BenchKvCliTest, AContextThatDoesNotFitTheDiskIsRefusedBeforeTheFill) {
  // 2^30 positions of the tiny model's KV: over a TiB.
  constexpr int64_t kCtx = int64_t{1} << 30;
  struct statvfs st {};
  ASSERT_EQ(::statvfs(dir_.c_str(), &st), 0);
  if (static_cast<double>(st.f_bavail) * st.f_frsize > kCtx * 1024.0 * 1.1) GTEST_SKIP() << "this disk holds it";
  expect_one_line_error(bench_kv({"--ctx", std::to_string(kCtx), "--synthetic-kv"}), 1,
                        "--ctx 1073741824: the KV needs");
}

}  // namespace
