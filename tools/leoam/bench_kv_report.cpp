#include "bench_kv_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "sparse/fidelity_probe.h"
#include "sparse/policy_registry.h"

namespace leoam::cli {
namespace {

using Json = nlohmann::ordered_json;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The probes' figures, in the order measured, as "A and B".
template <typename Probe, typename Figure>
std::string probe_list(const std::vector<Probe>& probes, Figure figure) {
  std::string out;
  char buf[32];
  for (size_t i = 0; i < probes.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%.1f", figure(probes[i]));
    out += (i == 0 ? "" : i + 1 == probes.size() ? " and " : ", ") + std::string(buf);
  }
  return out;
}

double policy_share(const BenchKvRun& r) {
  return r.kv_bytes > 0 ? static_cast<double>(r.policy_peak_bytes) / static_cast<double>(r.kv_bytes) : 0.0;
}
double disk_abstract_share(const BenchKvRun& r) {
  return r.kv_bytes > 0 ? static_cast<double>(r.disk_abstract_bytes) / static_cast<double>(r.kv_bytes) : 0.0;
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", bytes / (1024.0 * 1024.0));
  return buf;
}

std::string percent_or_dash(double x) {
  if (std::isnan(x)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * x);
  return buf;
}

std::string int_list(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(v[i]);
  return out;
}

Json nan_null(double x) { return std::isnan(x) ? Json(nullptr) : Json(x); }

// The report's figures, from its steps and probes.
class ReportWriter {
 public:
  explicit ReportWriter(const BenchKvReport& r) : r_(r), o_(r.options) {}

  std::string markdown() const {
    std::string out;
    char buf[512];
    const GatherBenchRow& d = disk();
    std::snprintf(buf, sizeof(buf),
                  "machine: DRAM read %.1f GB/s (the faster of %s, before and after the runs); disk raw read %.1f MB/s "
                  "(of %s; %d x %d KV, chunks of %d, %.0f%% read); weights %s MiB a token\n",
                  dram_bytes_per_s() * 1e-9,
                  probe_list(r_.dram_probes, [](const MemoryBandwidth& m) { return m.gb_per_s(); }).c_str(),
                  d.raw_mb_per_s, probe_list(r_.disk_probes, [](const GatherBenchRow& g) { return g.raw_mb_per_s; }).c_str(),
                  d.n_kv_heads, d.head_dim, d.chunk_tokens, 100.0 * probe_fraction(o_.attention),
                  mib(static_cast<double>(r_.cost.weight_bytes_per_token)).c_str());
    out += buf;
    const std::string io = r_.runs.empty() ? d.io_mode : r_.runs.front().io_mode;
    out += "disk I/O: " + io + "\n";
    if (io.find("buffered") != std::string::npos) {
      out += "warning: O_DIRECT fell back to buffered reads: disk figures may come from the page cache\n";
    }
    if (o_.interleave && o_.policies.size() > 1) {
      out += "policies interleaved (--interleave): a decode step of each in turn, every policy's stores held at once\n";
    }
    if (o_.batch > 1) {
      out += "batch: " + std::to_string(o_.batch) +
             " sequences a step, each its own store and selector: ms/tok is a batch step, tok/s the batch's, "
             "MiB read all the sequences'\n";
    }
    out += std::string("KV: ") +
           (o_.synthetic_kv ? "synthetic (--synthetic-kv, seed " + std::to_string(o_.seed) + "), ending in a prefilled prompt of " +
                                std::to_string(kPromptEndTokens) + " tokens (the first step follows a prompt's end)"
                          : "prefill of " + o_.prompt_file) +
           "\n";
    if (o_.synthetic_kv) out += "workload: " + workload_text() + "\n";
    out += "fidelity: " + fidelity_text() + "\n\n";
    out += "| ctx | policy | chunk | on disk | ms/tok | first ms | tok/s | vs full | attended | mass | out err | top 10% "
           "| read x | RAM / sel "
           "| device MiB | host MiB | disk MiB | abstract MiB | bound ms | of bound | policy MiB | of KV | .lka of KV |\n";
    out += "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const BenchKvRun& r : r_.runs) {
      const Summary s = summarize(r);
      const BenchKvRun* full = full_run(r.n_ctx);
      std::string vs = "-";
      if (full != nullptr) {
        std::snprintf(buf, sizeof(buf), "%.2fx", summarize(*full).ms / s.ms);
        vs = buf;
      }
      std::snprintf(buf, sizeof(buf),
                    "| %lld | %s | %d | %.1f%% | %.1f | %.1f | %.2f | %s | %.1f%% | %.3f | %.3f | %s | %.2f | %.2f | %s "
                    "| %s | %s | %s | %.1f | %.2fx | %s | %.2f%% | %.2f%% |\n",
                    static_cast<long long>(r.n_ctx), r.policy.c_str(), r.chunk_tokens, 100.0 * r.disk_share, s.ms,
                    s.first_ms, 1e3 * o_.batch / s.ms, vs.c_str(), 100.0 * s.attended, s.mass_covered, s.output_error,
                    percent_or_dash(s.top10_chunk_mass).c_str(), s.read_amplification,
                    s.ram_over_selection, mib(s.kv_read[0]).c_str(),
                    mib(s.kv_read[1]).c_str(), mib(s.kv_read[2]).c_str(), mib(s.abstract_read).c_str(), s.bound_ms,
                    s.ms / s.bound_ms, mib(static_cast<double>(r.policy_peak_bytes)).c_str(), 100.0 * policy_share(r),
                    100.0 * disk_abstract_share(r));
      out += buf;
    }
    out += "\nms/tok, tok/s, attended, MiB read and bound: medians over the " + std::to_string(o_.n_gen - 1) +
           " steps after the first (first ms apart). vs full: full's ms/tok over this one's. on disk: the share of the "
           "KV's chunks on disk after the fill. mass: the share of full attention's softmax mass on the positions "
           "attended; out err: the attention output's relative L2 error against full attention's (both from the "
           "probe's f16 keys and values; full: 1 and 0 by construction); top 10%: the full mass in the top tenth of "
           "64-token chunks, under the policy's own queries (how skewed the steps' attention is). read x: the KV read from every tier over the KV of the positions "
           "attended. RAM / sel: the device and host tiers' budgets over the KV a step attends (below 1 they cannot "
           "hold a selection). bound: the larger of (weights + KV read from device and host) / DRAM "
           "bandwidth and (disk KV + abstracts) / disk raw throughput, each the faster of its two probes; of bound: "
           "ms/tok over it. "
           "policy MiB: the most the policy held about the KV at once (trees, scores, partial keys, the copies a step "
           "reads), all sequences; of KV: over their KV.";
    out += " .lka of KV: the disk tier's abstract records (on disk, not in RAM) over the KV.\n";
    out += budget_rule_text(o_.attention, o_.kv, r_.n_layer) + "\n";
    out += std::string("\nwhere a step's time went (means over the steps after the first, and the first step "
                       "apart, ms; the pipeline ") +
           pipeline_mode(o_.kv) + "):\n\n";
    out += "| ctx | policy | steps | step | weights | selection | I/O wait | decode | attention | other | read ahead |\n";
    out += "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const BenchKvRun& r : r_.runs) {
      for (const auto& [which, b] : {std::pair<const char*, const StepBreakdown&>{"later", r.breakdown},
                                     std::pair<const char*, const StepBreakdown&>{"first", r.first_breakdown}}) {
        std::snprintf(buf, sizeof(buf), "| %lld | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
                      static_cast<long long>(r.n_ctx), r.policy.c_str(), which, b.step_ms, b.weights_ms,
                      b.selection_ms, b.io_wait_ms, b.decode_ms, b.attention_ms, b.other_ms, b.read_ahead_ms);
        out += buf;
      }
    }
    for (const BenchKvRun& r : r_.runs) {
      if (!r.transfer.mode.empty()) out += std::to_string(r.n_ctx) + " " + r.policy + ", the whole run: " + r.transfer.to_text() + "\n";
    }
    return out;
  }

  Json to_json() const {
    Json doc;
    doc["model"] = {{"path", o_.model_path},
                    {"type", r_.cost.type_name},
                    {"weight_bytes_per_token", r_.cost.weight_bytes_per_token},
                    {"kv_bytes_per_position", r_.cost.kv_bytes_per_position},
                    {"n_layer", r_.n_layer}};
    doc["kv_source"] = o_.synthetic_kv ? Json("synthetic") : Json(o_.prompt_file);
    doc["seed"] = o_.seed;
    doc["budget"] = o_.attention.budget;
    doc["n_gen"] = o_.n_gen;
    doc["kv_device_mb"] = o_.kv.device_mb;
    doc["kv_host_mb"] = o_.kv.host_mb;
    doc["pipeline"] = r_.pipeline;
    doc["pipeline_mode"] = pipeline_mode(o_.kv);
    doc["batch"] = o_.batch;
    doc["interleave"] = o_.interleave;
    doc["workload"] = o_.synthetic_kv ? Json(o_.workload) : Json(nullptr);
    doc["fidelity"] = o_.fidelity_layers > 0 ? Json{{"layers", fidelity_layers(o_.fidelity_layers, r_.n_layer)},
                                                  {"kv_heads", fidelity_kv_heads(r_.n_kv_heads)},
                                                  {"profile_chunk_tokens", sparse::FidelityProbe::kProfileChunkTokens}}
                                           : Json(nullptr);
    const GatherBenchRow& d = disk();
    Json dram_probes = Json::array(), disk_probes = Json::array();
    for (const MemoryBandwidth& m : r_.dram_probes) dram_probes.push_back(m.gb_per_s());
    for (const GatherBenchRow& g : r_.disk_probes) disk_probes.push_back(g.raw_mb_per_s);
    doc["machine"] = {{"dram_read_gb_per_s", dram_bytes_per_s() * 1e-9},
                      {"dram_read_gb_per_s_probes", dram_probes},
                      {"dram_n_threads", r_.dram_probes.front().n_threads},
                      {"disk_raw_mb_per_s", d.raw_mb_per_s},
                      {"disk_raw_mb_per_s_probes", disk_probes},
                      {"disk_gather_mb_per_s", d.gather_mb_per_s},
                      {"disk_probe", {{"n_kv_heads", d.n_kv_heads}, {"head_dim", d.head_dim},
                                      {"chunk_tokens", d.chunk_tokens}, {"file_bytes", o_.disk_probe_mb << 20}}},
                      {"disk_io_mode", d.io_mode}};
    Json results = Json::array();
    for (const BenchKvRun& r : r_.runs) {
      const Summary s = summarize(r);
      const BenchKvRun* full = full_run(r.n_ctx);
      Json steps = Json::array();
      for (const BenchKvStep& st : r.steps) {
        steps.push_back({{"start_s", st.start_s},
                         {"ms", st.ms},
                         {"bound_ms", bound_ms(st)},
                         {"bound_dram_ms", dram_ms(st)},
                         {"bound_disk_ms", disk_ms(st)},
                         {"kv_bytes_read", {{"device", st.kv_bytes_read[0]}, {"host", st.kv_bytes_read[1]},
                                            {"disk", st.kv_bytes_read[2]}}},
                         {"abstract_bytes_read", st.abstract_bytes_read},
                         {"n_attended", st.n_attended},
                         {"n_selected", st.n_selected},
                         {"n_visible", st.n_visible},
                         {"mass_covered", st.mass_covered},
                         {"output_error", st.output_error},
                         {"top10_chunk_mass", nan_null(st.top10_chunk_mass)}});
      }
      results.push_back({{"n_ctx", r.n_ctx},
                         {"policy", r.policy},
                         {"chunk_tokens", r.chunk_tokens},
                         {"disk_share", r.disk_share},
                         {"fill_s", r.fill_s},
                         {"prompt_end_s", r.prompt_end_s},
                         {"io_mode", r.io_mode},
                         {"ms_per_token", s.ms},
                         {"first_step_ms", s.first_ms},
                         {"tokens_per_s", 1e3 * o_.batch / s.ms},
                         {"speedup_vs_full", full != nullptr ? Json(summarize(*full).ms / s.ms) : Json(nullptr)},
                         {"attended_fraction", s.attended},
                         {"mass_covered", s.mass_covered},
                         {"output_error", s.output_error},
                         {"top10_chunk_mass", nan_null(s.top10_chunk_mass)},
                         {"read_amplification", s.read_amplification},
                         {"ram_tiers_over_selection", s.ram_over_selection},
                         {"kv_bytes_read", {{"device", s.kv_read[0]}, {"host", s.kv_read[1]}, {"disk", s.kv_read[2]}}},
                         {"abstract_bytes_read", s.abstract_read},
                         {"bound_ms", s.bound_ms},
                         {"of_bound", s.ms / s.bound_ms},
                         {"policy_peak_bytes", r.policy_peak_bytes},
                         {"kv_bytes", r.kv_bytes},
                         {"disk_abstract_bytes", r.disk_abstract_bytes},
                         {"breakdown", Json::parse(r.breakdown.to_json())},
                         {"first_step_breakdown", Json::parse(r.first_breakdown.to_json())},
                         {"transfer", r.transfer.mode.empty() ? Json(nullptr) : Json::parse(r.transfer.to_json())},
                         {"steps", std::move(steps)}});
    }
    doc["results"] = std::move(results);
    return doc;
  }

 private:
  // The fastest DRAM bandwidth the probes measured (each the median of its passes), bytes/s.
  double dram_bytes_per_s() const {
    double best = 0;
    for (const MemoryBandwidth& m : r_.dram_probes) best = std::max(best, m.bytes_per_s);
    return best;
  }
  // The disk probe with the fastest raw read.
  const GatherBenchRow& disk() const {
    return *std::max_element(r_.disk_probes.begin(), r_.disk_probes.end(),
                             [](const GatherBenchRow& a, const GatherBenchRow& b) { return a.raw_mb_per_s < b.raw_mb_per_s; });
  }

  // A step's bound's two terms in ms: weights and the KV read from RAM over the DRAM bandwidth, the
  // disk bytes over the disk's raw throughput (the fastest of the probes, each).
  double dram_ms(const BenchKvStep& s) const {
    const double ram = static_cast<double>(r_.cost.weight_bytes_per_token + s.kv_bytes_read[0] + s.kv_bytes_read[1]);
    return 1e3 * ram / dram_bytes_per_s();
  }
  double disk_ms(const BenchKvStep& s) const {
    const double disk = static_cast<double>(s.kv_bytes_read[2] + s.abstract_bytes_read);
    return 1e3 * disk / (this->disk().raw_mb_per_s * 1e6);
  }
  // The bound: the larger term (docs/kv-store.md#bench-kv).
  double bound_ms(const BenchKvStep& s) const { return std::max(dram_ms(s), disk_ms(s)); }

  // The KV bytes of the positions a step attended (its selection).
  double attended_bytes(const BenchKvStep& s) const {
    return static_cast<double>(s.n_attended) * static_cast<double>(r_.cost.kv_bytes_per_position) /
           static_cast<double>(r_.n_layer);
  }

  // The KV a step read from every tier over the KV of the positions it attended: 1 where it reads
  // what it attends, more where it reads whole chunks around scattered picks (infinigen).
  double read_amplification(const BenchKvStep& s) const {
    double read = 0;
    for (uint64_t b : s.kv_bytes_read) read += static_cast<double>(b);
    return attended_bytes(s) > 0 ? read / attended_bytes(s) : 0.0;
  }

  // The device and host tiers' budgets, all sequences, over the KV a step attends (its selection):
  // below 1 the tiers cannot hold a selection, and a policy whose picks stay put still reads
  // from disk every step.
  double ram_over_selection(const BenchKvStep& s) const {
    const double ram = static_cast<double>(o_.batch) * (o_.kv.device_mb + o_.kv.host_mb) * 1024.0 * 1024.0;
    return attended_bytes(s) > 0 ? ram / attended_bytes(s) : 0.0;
  }

  struct Summary {
    double ms = 0, first_ms = 0, bound_ms = 0, attended = 0, read_amplification = 0, ram_over_selection = 0;
    double kv_read[kNumTiers] = {}, abstract_read = 0;
    double mass_covered = 0, output_error = 0, top10_chunk_mass = 0;
  };
  // Medians over the steps after the first.
  Summary summarize(const BenchKvRun& r) const {
    Summary s;
    s.first_ms = r.steps.front().ms;
    std::vector<double> ms, bound, att, amp, ram, tiers[kNumTiers], abs, mass, err, top10;
    for (size_t i = 1; i < r.steps.size(); ++i) {
      const BenchKvStep& st = r.steps[i];
      ms.push_back(st.ms);
      bound.push_back(bound_ms(st));
      att.push_back(st.n_visible > 0 ? static_cast<double>(st.n_attended) / static_cast<double>(st.n_visible) : 0.0);
      amp.push_back(read_amplification(st));
      ram.push_back(ram_over_selection(st));
      for (int t = 0; t < kNumTiers; ++t) tiers[t].push_back(static_cast<double>(st.kv_bytes_read[t]));
      abs.push_back(static_cast<double>(st.abstract_bytes_read));
      mass.push_back(st.mass_covered);
      err.push_back(st.output_error);
      top10.push_back(st.top10_chunk_mass);
    }
    s.ms = median(ms);
    s.bound_ms = median(bound);
    s.attended = median(att);
    s.read_amplification = median(amp);
    s.ram_over_selection = median(ram);
    for (int t = 0; t < kNumTiers; ++t) s.kv_read[t] = median(tiers[t]);
    s.abstract_read = median(abs);
    s.mass_covered = median(mass);
    s.output_error = median(err);
    std::erase_if(top10, [](double x) { return std::isnan(x); });  // full's
    s.top10_chunk_mass = top10.empty() ? std::nan("") : median(top10);
    return s;
  }

  const BenchKvRun* full_run(int64_t n_ctx) const {
    for (const BenchKvRun& r : r_.runs) {
      if (r.n_ctx == n_ctx && sparse::is_dense_policy(r.policy)) return &r;
    }
    return nullptr;
  }

  std::string workload_text() const {
    if (o_.workload == "static") return "static (heavy hitters at the same positions in every layer and head)";
    return "moving (heavy hitters per layer and KV head; each query leans on " + std::to_string(kMovingTargets) +
           " far keys per KV head, drawn anew every " + std::to_string(kMovingPeriod) + " steps, their logits +" +
           std::to_string(static_cast<int>(kMovingLean)) + " nats)";
  }

  std::string fidelity_text() const {
    if (o_.fidelity_layers == 0) return "not measured (--fidelity-layers 0)";
    return "layers " + int_list(fidelity_layers(o_.fidelity_layers, r_.n_layer)) + ", KV heads " +
           int_list(fidelity_kv_heads(r_.n_kv_heads)) +
           " and their query heads: full attention for each step's queries, computed between steps";
  }

  const BenchKvReport& r_;
  const BenchKvOptions& o_;
};

}  // namespace

std::vector<int> fidelity_layers(int n, int n_layer) {
  n = std::min(n, n_layer);
  std::vector<int> layers;
  for (int i = 0; i < n; ++i) layers.push_back((2 * i + 1) * n_layer / (2 * n));
  return layers;
}

std::vector<int> fidelity_kv_heads(int n_kv_heads) {
  return n_kv_heads > 1 ? std::vector<int>{0, n_kv_heads / 2} : std::vector<int>{0};
}

double probe_fraction(const AttentionCliOptions& attention) { return attention.budget <= 1.0 ? attention.budget : 0.1; }

std::string bench_kv_markdown(const BenchKvReport& report) { return ReportWriter(report).markdown(); }

Json bench_kv_json(const BenchKvReport& report) { return ReportWriter(report).to_json(); }

}  // namespace leoam::cli
