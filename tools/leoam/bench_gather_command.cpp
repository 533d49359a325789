// `leoam bench-gather`: chunk-gather read throughput of the KV store's disk tier, set against the
// device's raw throughput for the same reads, measured in the same run (gather_benchmark.h
// defines both).
//
// Output on stdout: a markdown table, one row per (shape, chunk size), then the disk I/O mode; or,
// with --json, one JSON object. Progress goes to stderr, and only when stderr is a terminal.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "progress_bar.h"
#include "kv/chunk_layout.h"
#include "gather_benchmark.h"

namespace leoam::cli {
namespace {

using Json = nlohmann::ordered_json;

// "32x128" -> {32, 128}; false unless both are positive integers.
bool parse_shape(const std::string& text, std::pair<int, int>& shape) {
  int n_heads = 0, head_dim = 0, n_used = 0;
  if (std::sscanf(text.c_str(), "%dx%d%n", &n_heads, &head_dim, &n_used) != 2) return false;
  if (static_cast<size_t>(n_used) != text.size() || n_heads <= 0 || head_dim <= 0) return false;
  shape = {n_heads, head_dim};
  return true;
}

class BenchGatherCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* cmd = app.add_subcommand(
        "bench-gather", "measure chunk-gather read throughput from the KV disk tier against the raw device");
    cmd->add_option("--kv-dir", options_.dir, "directory for the chunk files (created if missing; files removed after)")
        ->required()
        ->type_name("DIR");
    cmd->add_option("--chunk", options_.chunk_tokens, "chunk sizes in tokens, comma-separated")
        ->delimiter(',')
        ->capture_default_str()
        ->check(in_range(kMinChunkTokens, kMaxChunkTokens))
        ->type_name("C[,C...]");
    cmd->add_option("--shape", shape_texts_, "KV shapes, comma-separated KV heads x head dim (7B-shaped, GQA)")
        ->delimiter(',')
        ->capture_default_str()
        ->check(CLI::Validator(
            [](std::string& text) -> std::string {
              std::pair<int, int> shape;
              return parse_shape(text, shape) ? "" : "bad shape '" + text + "': want HEADSxDIM, e.g. 32x128";
            },
            "HEADSxDIM"))
        ->type_name("HxD[,HxD...]");
    cmd->add_option("--file-mb", file_mb_, "MiB of KV written to disk per configuration")
        ->capture_default_str()
        ->check(in_range<uint64_t>(1, 1 << 20));
    cmd->add_option("--fraction", options_.select_fraction, "fraction of the chunks each gather reads, in (0, 1]")
        ->capture_default_str()
        ->check(CLI::Validator(
            [](std::string& text) -> std::string {
              char* end = nullptr;
              const double f = std::strtod(text.c_str(), &end);
              const bool ok = !text.empty() && *end == '\0' && f > 0 && f <= 1;
              return ok ? "" : "must be in (0, 1], got " + text;
            },
            "(0,1]"));
    cmd->add_option("--queue-depth", options_.queue_depth, "disk reads in flight at once (io_uring)")
        ->capture_default_str()
        ->check(in_range(1, 4096));
    cmd->add_option("-r,--repetitions", options_.n_reps, "timed gather and raw reps each (the median is reported)")
        ->capture_default_str()
        ->check(in_range(1, 1000));
    cmd->add_option("--seed", options_.seed, "seed of the KV contents and the chunk selections")->capture_default_str();
    cmd->add_flag("--json", json_, "print one JSON object instead of the table");
    return cmd;
  }

  int execute() override {
    options_.shapes.clear();
    for (const std::string& text : shape_texts_) {
      std::pair<int, int> shape;
      parse_shape(text, shape);  // checked by the option's validator
      options_.shapes.push_back(shape);
    }
    options_.file_bytes = file_mb_ << 20;
    options_.progress = [this](const std::string& text) { status_.show(text); };
    Result<std::vector<GatherBenchRow>> rows = run_gather_benchmark(options_);
    status_.clear();
    if (!rows.is_ok()) return fail(rows.status());
    if (json_) {
      std::printf("%s\n", to_json(*rows).dump(2).c_str());
    } else {
      print_table(*rows);
    }
    std::fflush(stdout);
    return kExitOk;
  }

 private:
  void print_table(const std::vector<GatherBenchRow>& rows) const {
    std::printf("| KV heads x dim | chunk tokens | slot KiB | chunks read | gather MB/s | raw MB/s | gather/raw |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const GatherBenchRow& r : rows) {
      std::printf("| %d x %d | %d | %zu | %lld | %.1f | %.1f | %.1f%% |\n", r.n_kv_heads, r.head_dim, r.chunk_tokens,
                  r.slot_bytes / 1024, static_cast<long long>(r.n_chunks_read), r.gather_mb_per_s, r.raw_mb_per_s,
                  100.0 * r.fraction);
    }
    std::printf("\nmedians over %d reps, each reading a random %.0f%% of the chunks of %llu MiB of KV, in gather batches "
                "of %llu MiB; MB = 1e6 bytes; gather/raw: median of the reps' ratios (each raw read of the same slots "
                "right after its gather)\n",
                options_.n_reps, 100.0 * options_.select_fraction, static_cast<unsigned long long>(file_mb_),
                static_cast<unsigned long long>(options_.gather_batch_bytes >> 20));
    if (!rows.empty()) std::printf("disk I/O: %s\n", rows.front().io_mode.c_str());
  }

  Json to_json(const std::vector<GatherBenchRow>& rows) const {
    Json doc;
    doc["kv_dir"] = options_.dir;
    doc["file_bytes"] = options_.file_bytes;
    doc["select_fraction"] = options_.select_fraction;
    doc["queue_depth"] = options_.queue_depth;
    doc["n_reps"] = options_.n_reps;
    doc["gather_batch_bytes"] = options_.gather_batch_bytes;
    doc["seed"] = options_.seed;
    Json results = Json::array();
    for (const GatherBenchRow& r : rows) {
      results.push_back({
          {"n_kv_heads", r.n_kv_heads},
          {"head_dim", r.head_dim},
          {"chunk_tokens", r.chunk_tokens},
          {"slot_bytes", r.slot_bytes},
          {"n_chunks_read", r.n_chunks_read},
          {"gather_mb_per_s", r.gather_mb_per_s},
          {"raw_mb_per_s", r.raw_mb_per_s},
          {"fraction", r.fraction},
          {"gather_samples_mb_per_s", r.gather_samples_mb_per_s},
          {"raw_samples_mb_per_s", r.raw_samples_mb_per_s},
          {"io_mode", r.io_mode},
      });
    }
    doc["results"] = std::move(results);
    return doc;
  }


  GatherBenchOptions options_;
  std::vector<std::string> shape_texts_ = {"32x128", "8x128"};
  uint64_t file_mb_ = 512;
  bool json_ = false;
  StatusLine status_{::isatty(STDERR_FILENO) != 0, "leoam: bench-gather"};
};

}  // namespace

std::unique_ptr<Command> make_bench_gather_command() { return std::make_unique<BenchGatherCommand>(); }

}  // namespace leoam::cli
