// `leoam bench kv`'s report: each policy's decode steps summed up (medians over the steps after
// the first) beside their bound, as the markdown table and the --json document. The bound of a
// step: the larger of its DRAM time and its disk time, at the fastest rates the machine's probes
// measured (docs/kv-store.md#bench-kv).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_options.h"
#include "benchmark.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "engine/step_breakdown.h"
#include "gather_benchmark.h"
#include "kv/kv_stats.h"
#include "kv_options.h"

namespace leoam::cli {

inline constexpr int64_t kPromptEndTokens = 2;  // the synthetic fill's last positions, prefilled as a prompt
// --workload moving (model/moving_targets.h): far keys a query leans on per KV head, the decode
// steps they last, the nats their logits rise by.
inline constexpr int kMovingTargets = 4;
inline constexpr int kMovingPeriod = 4;
inline constexpr float kMovingLean = 10.0f;

// The flags of `leoam bench kv`.
struct BenchKvOptions {
  std::string model_path;
  std::vector<int64_t> ctxs;
  std::vector<std::string> policies = {"full", "streaming", "h2o", "h2o-chunked", "quest", "infinigen", "leoam"};
  int n_gen = 8;
  int n_threads = 0;
  uint64_t seed = 1;
  int batch = 1;
  bool synthetic_kv = false;
  std::string workload = "static";
  int fidelity_layers = 4;
  bool interleave = false;
  std::string prompt_file;
  uint64_t disk_probe_mb = 256;
  std::string json_path;
  std::string markdown_path;
  KvCliOptions kv;
  AttentionCliOptions attention;
};

// One decode step's cost.
struct BenchKvStep {
  double start_s = 0;  // when it began, from the command's start: the order the steps ran in
  double ms = 0;
  std::array<uint64_t, kNumTiers> kv_bytes_read{};  // per tier; disk without the abstracts
  uint64_t abstract_bytes_read = 0;                 // from disk
  int64_t n_attended = 0, n_visible = 0;            // summed over layers; attended as attention counted it
  int64_t n_selected = 0;                           // what the selectors say they picked (full: n_visible)
  // Fidelity (sparse/fidelity_probe.h), the means over the sequences' probes; full attends every
  // position: 1 and 0 by construction, and no profile (NaN).
  double mass_covered = 1.0, output_error = 0.0, top10_chunk_mass = std::nan("");
};

// One policy's run at one --ctx.
struct BenchKvRun {
  std::string policy;
  int64_t n_ctx = 0;
  int chunk_tokens = 0;
  double disk_share = 0;  // of the KV's chunks, on disk after the fill
  double fill_s = 0;
  double prompt_end_s = 0;  // of fill_s: the synthetic fill's prompt end (kPromptEndTokens), every sequence
  std::vector<BenchKvStep> steps;
  std::string io_mode;
  StepBreakdown breakdown;  // the steps after the first, from their trace
  StepBreakdown first_breakdown;  // the first step's
  uint64_t policy_peak_bytes = 0;  // the most the selectors held about the KV (SelectionPolicy::memory), all sequences
  uint64_t kv_bytes = 0;           // the KV of every position at the end, all sequences
  uint64_t disk_abstract_bytes = 0;  // the disk tier's abstract files (.lka) at the end, all sequences
  TransferStats transfer;          // --kv-compress: the compressed reads, all sequences (times: the first's)
};

// The layers the fidelity probes sample: n of them spread evenly, (2i + 1) n_layer / 2n.
std::vector<int> fidelity_layers(int n, int n_layer);
// The KV heads they sample: 0 and n_kv_heads / 2.
std::vector<int> fidelity_kv_heads(int n_kv_heads);
// The share of the disk probe's chunks each gather reads: a fractional --budget, else 10%.
double probe_fraction(const AttentionCliOptions& attention);

// What the report states: the flags, the model's costs, the machine's probes and the runs.
struct BenchKvReport {
  explicit BenchKvReport(const BenchKvOptions& o) : options(o) {}

  const BenchKvOptions& options;
  ModelCost cost;
  int n_layer = 0;
  int n_kv_heads = 0;
  bool pipeline = false;                     // whether the decode pipeline runs (decode_pipeline())
  std::vector<MemoryBandwidth> dram_probes;  // before and after the runs
  std::vector<GatherBenchRow> disk_probes;   // the same
  std::vector<BenchKvRun> runs;
};

// The tables on stdout (and --markdown): the machine, the runs beside their bounds, where a step's
// time went.
std::string bench_kv_markdown(const BenchKvReport& report);
// The --json document: every figure, each step's included.
nlohmann::ordered_json bench_kv_json(const BenchKvReport& report);

}  // namespace leoam::cli
