// `leoam bench`: prompt processing and text generation speed, in the spirit of llama-bench, with
// each figure set against the machine's bound measured in the same run (benchmark.h
// defines the tests and the bound). `leoam bench kv` (bench_kv_command.cpp) is its subcommand.
//
// Output on stdout: a few lines with the measured DRAM bandwidth and peak rates, then a markdown
// table, one row per (threads, depth, test), printed as each row finishes; or, with --json, one
// JSON document at the end. Progress goes to stderr, and only when stderr is a terminal.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmark.h"
#include "cli_common.h"
#include "core/ggml_type.h"
#include "progress_bar.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/blas_core.h"
#include "model/model.h"
#include "model/synthetic_model.h"

namespace leoam::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// "1.23 GiB", "404.00 MiB", "1.00 KiB": binary units, as llama-bench prints sizes.
std::string format_bytes(double bytes) {
  if (bytes >= 1024.0 * 1024 * 1024) return format("%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  if (bytes >= 1024.0 * 1024) return format("%.2f MiB", bytes / (1024.0 * 1024));
  return format("%.2f KiB", bytes / 1024.0);
}

// "1.24 B", "292.99 K": decimal units for counts.
std::string format_count(double n) {
  if (n >= 1e9) return format("%.2f B", n * 1e-9);
  if (n >= 1e6) return format("%.2f M", n * 1e-6);
  return format("%.2f K", n * 1e-3);
}

// Deletes a file when destroyed (the synthetic model; unlinked as soon as it is mapped).
class TempFile {
 public:
  TempFile() = default;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { remove(); }
  Status create() {
    std::error_code ec;
    std::string dir = std::filesystem::temp_directory_path(ec).string();
    if (ec) dir = "/tmp";
    std::string tmpl = dir + "/leoam-bench-XXXXXX.gguf";
    const int fd = ::mkstemps(tmpl.data(), 5);  // 5: ".gguf"
    if (fd < 0) return io_error("cannot create a temporary file in '" + dir + "' for the synthetic model (set TMPDIR)");
    ::close(fd);
    path_ = tmpl;
    return Status::ok();
  }
  void remove() {
    if (!path_.empty()) ::unlink(path_.c_str());
    path_.clear();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class BenchCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* cmd =
        app.add_subcommand("bench", "measure prompt processing and text generation speed against the machine's bounds");
    CLI::Option* m =
        cmd->add_option("-m,--model", model_path_, "model file (GGUF)")->check(readable_file())->type_name("FILE");
    CLI::Option* s = cmd->add_option("--synthetic", synthetic_,
                                     std::string("a random-weight model of a preset shape, NAME[:TYPE]; presets: ") +
                                         synthetic_model_preset_names() + "; types: " + supported_type_names())
                         ->type_name("NAME[:TYPE]");
    m->excludes(s);
    s->excludes(m);
    kv_app_ = kv_->add_to(*cmd);
    cmd->parse_complete_callback([m, s, kv = kv_app_] {
      if (kv->parsed()) return;
      if (m->count() == 0 && s->count() == 0) throw CLI::RequiredError("a model (-m FILE or --synthetic NAME[:TYPE])");
    });
    cmd->add_option("-p,--n-prompt", options_.n_prompt, "prompt tokens of the pp test (0: no pp test)")
        ->capture_default_str()
        ->check(in_range(0, 1 << 20));
    cmd->add_option("-n,--n-gen", options_.n_gen, "tokens generated in the tg test (0: no tg test)")
        ->capture_default_str()
        ->check(in_range(0, 1 << 20));
    cmd->add_option("-t,--threads", options_.n_threads,
                    "thread counts, comma-separated (0: the physical cores, " +
                        std::to_string(ThreadPool::default_thread_count()) + " here)")
        ->delimiter(',')
        ->capture_default_str()
        ->check(in_range(0, 1024))
        ->type_name("N[,N...]");
    cmd->add_option("-d,--depth", options_.depths,
                    "context depths, comma-separated: tokens already in the KV cache when timing starts")
        ->delimiter(',')
        ->capture_default_str()
        ->check(in_range(0, 1 << 24))
        ->type_name("D[,D...]");
    cmd->add_option("-r,--repetitions", options_.n_reps, "timed repetitions per test (the median is reported)")
        ->capture_default_str()
        ->check(in_range(1, 1000));
    cmd->add_flag("--json", json_, "print one JSON document instead of the table");
    cmd->add_flag("--no-bound", no_bound_, "skip measuring the DRAM bandwidth and peak rates (and the bound columns)");
    return cmd;
  }

  int execute() override {
    if (kv_app_->parsed()) return kv_->execute();
    if (options_.n_prompt == 0 && options_.n_gen == 0) {
      print_error("nothing to measure: -p and -n are both 0");
      return kExitUsage;
    }
    TempFile temp;
    std::string path = model_path_;
    if (!synthetic_.empty()) {
      Result<SyntheticModelSpec> spec = synthetic_model_preset(synthetic_);
      if (!spec.is_ok()) {
        print_error("--synthetic: " + spec.status().message());
        return kExitUsage;
      }
      if (Status st = temp.create(); !st.is_ok()) return fail(st);
      status_.show("writing synthetic model " + synthetic_ + " ...");
      if (Status st = write_synthetic_model(*spec, temp.path()); !st.is_ok()) {
        return fail(st.with_context("--synthetic " + synthetic_));
      }
      path = temp.path();
    }
    status_.show("loading model ...");
    Result<std::unique_ptr<Model>> loaded = Model::load(path);
    temp.remove();  // the mapping keeps the data; nothing is left behind if the run is interrupted
    if (!loaded.is_ok()) return fail(loaded.status());
    const Model& model = **loaded;
    cost_ = model_cost(model, options_.kv_dtype);
    model_name_ = describe_model(model);

    // The bounds, per distinct thread count, before any row: they head the table.
    if (!no_bound_) {
      for (int t : options_.n_threads) {
        const int resolved = t > 0 ? t : ThreadPool::default_thread_count();
        if (bounds_.count(resolved) != 0) continue;
        status_.show("measuring DRAM bandwidth and peak rates with " + std::to_string(resolved) + " threads ...");
        Result<MachineBounds> b = measure_machine_bounds(resolved, MachineBoundsOptions{});
        if (!b.is_ok()) return fail(b.status());
        bounds_[resolved] = *b;
      }
    }
    status_.clear();
    if (!json_) print_preamble();

    BenchmarkCallbacks callbacks;
    callbacks.on_row_start = [this](const std::string& test, int n_threads) {
      status_.show("running " + test + " with " + std::to_string(n_threads) + " threads ...");
    };
    callbacks.on_row_done = [this](const BenchmarkRow& row) {
      status_.clear();
      if (!json_) print_row(row);
      if (const MachineBounds* m = bound_for(row.n_threads); m != nullptr) {
        const Bound b = compute_bound(cost_, row.kind, row.n_tokens, row.depth, *m);
        if (row.kind == BenchTest::kGenerate && row.median_tokens_per_s > b.tokens_per_s) above_bound_ = true;
      }
    };
    Result<std::vector<BenchmarkRow>> rows = run_benchmark(model, options_, callbacks);
    status_.clear();
    if (!rows.is_ok()) return fail(rows.status());
    if (json_) {
      std::printf("%s\n", to_json(*rows).dump(2).c_str());
    } else {
      print_legend();
    }
    std::fflush(stdout);
    return kExitOk;
  }

 private:
  std::string describe_model(const Model& model) const {
    std::string name;
    if (Result<std::optional<std::string>> n = model.gguf().get_string("general.name"); n.is_ok() && n->has_value()) {
      name = **n;
    }
    if (name.empty()) name = synthetic_.empty() ? std::filesystem::path(model_path_).stem().string() : "synthetic-" + synthetic_;
    return name + " " + cost_.type_name;
  }

  const MachineBounds* bound_for(int n_threads) const {
    const auto it = bounds_.find(n_threads);
    return it == bounds_.end() ? nullptr : &it->second;
  }

  // Achieved rate: bytes per second for tg (what decode is limited by), flop/s for pp.
  double achieved_rate(const BenchmarkRow& row, const Bound& b) const {
    return row.kind == BenchTest::kGenerate ? b.bytes * row.median_tokens_per_s
                                            : b.flops * row.median_tokens_per_s / static_cast<double>(row.n_tokens);
  }

  void print_preamble() const {
    const std::string path_name(cpu_path_name());
    const std::string blas(kernels::blas_core());
    std::printf("model: %s, %s, %s params; kernel path %s, OpenBLAS core %s\n", model_name_.c_str(),
                size_text().c_str(), params_text().c_str(), path_name.c_str(), blas.c_str());
    const std::string weights = format_bytes(static_cast<double>(cost_.weight_bytes_per_token));
    const std::string macs_q = format_count(cost_.layer_macs_quantized + cost_.output_macs_quantized);
    const std::string macs_f = format_count(cost_.layer_macs_float + cost_.output_macs_float);
    const std::string kv = format_bytes(static_cast<double>(cost_.kv_bytes_per_position));
    std::printf("per token: %s of weights read, %s MACs (int8-dot %s, f32 %s), KV %s per position\n", weights.c_str(),
                format_count(cost_.macs_per_token()).c_str(), macs_q.c_str(), macs_f.c_str(), kv.c_str());
    for (const auto& [t, b] : bounds_) {
      const std::string buffer = format_bytes(static_cast<double>(b.dram_buffer_bytes));
      std::printf("bounds, %d threads: DRAM read %.1f GB/s (min %.1f, max %.1f; %s buffer, %s loads)", t,
                  b.dram_bytes_per_s * 1e-9, b.dram_min_bytes_per_s * 1e-9, b.dram_max_bytes_per_s * 1e-9, buffer.c_str(),
                  b.dram_method);
      if (b.peaks_available) {
        std::printf("; peak f32 FMA %.1f GFLOP/s, int8 madd %.1f GMAC/s", b.f32_flops_per_s * 1e-9,
                    b.int8_macs_per_s * 1e-9);
        std::printf("; OpenBLAS SGEMM %.1f GFLOP/s\n", b.sgemm_flops_per_s * 1e-9);
      } else {
        std::printf("; no AVX2+FMA: no compute term\n");
      }
    }
    std::printf("\n| model | size | params | threads | test | t/s | ms/tok | achieved |");
    std::printf(no_bound_ ? "\n" : " bound t/s | of bound | bound by |\n");
    std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    std::printf(no_bound_ ? "\n" : " ---: | ---: | --- |\n");
    std::fflush(stdout);
  }

  std::string size_text() const { return format_bytes(static_cast<double>(cost_.size_bytes)); }
  std::string params_text() const { return format_count(static_cast<double>(cost_.n_params)); }

  void print_row(const BenchmarkRow& row) const {
    // With no measured bound, the achieved rate still needs the row's bytes and flops.
    const MachineBounds* m = bound_for(row.n_threads);
    const Bound b = compute_bound(cost_, row.kind, row.n_tokens, row.depth, m != nullptr ? *m : MachineBounds{});
    const double rate = achieved_rate(row, b);
    std::string achieved =
        row.kind == BenchTest::kGenerate ? format("%.2f GB/s", rate * 1e-9) : format("%.1f GFLOP/s", rate * 1e-9);
    if (row.kind == BenchTest::kPrompt && m != nullptr && m->sgemm_flops_per_s > 0) {
      achieved += format(" (%.0f%% of SGEMM)", 100.0 * rate / m->sgemm_flops_per_s);
    }
    std::printf("| %s | %s | %s | %d | %s | %.2f ± %.2f | %.3f | %s |", model_name_.c_str(), size_text().c_str(),
                params_text().c_str(), row.n_threads, row.test.c_str(), row.median_tokens_per_s, row.stdev_tokens_per_s,
                row.ms_per_token(), achieved.c_str());
    if (!no_bound_ && m != nullptr) {
      std::printf(" %.2f | %.1f%% | %s |", b.tokens_per_s, 100.0 * row.median_tokens_per_s / b.tokens_per_s, b.binding);
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  void print_legend() const {
    std::printf(
        "\nt/s: median ± sample stdev over %d repetitions (after one warm-up). ms/tok: 1000 / median t/s; for tg, the "
        "time per token at batch 1, overheads included.\n",
        options_.n_reps);
    if (no_bound_) return;
    std::printf(
        "bound: tg = 1 / max(bytes per token / DRAM bandwidth, MACs / peak) with weights + KV at the average depth, "
        "int8 madd peak for quantized matrices, f32 FMA for float ones and attention; pp = P / max(weights per "
        "512-token chunk / bandwidth, flops / f32 FMA peak); pp's achieved GFLOP/s is also given as a fraction of a "
        "plain OpenBLAS SGEMM (512 x 2048 x 2048). Bandwidth and peaks measured with the row's thread count.\n");
    if (above_bound_) {
      std::printf("above 100%%: the bytes read per token fit in the CPU caches, so DRAM bandwidth does not limit this "
                  "model.\n");
    }
  }

  Json to_json(const std::vector<BenchmarkRow>& rows) const {
    Json doc;
    doc["model"] = {
        {"name", model_name_},
        {"path", synthetic_.empty() ? Json(model_path_) : Json(nullptr)},
        {"synthetic", synthetic_.empty() ? Json(nullptr) : Json(synthetic_)},
        {"type", cost_.type_name},
        {"size_bytes", cost_.size_bytes},
        {"n_params", cost_.n_params},
        {"weight_bytes_per_token", cost_.weight_bytes_per_token},
        {"macs_per_token", cost_.macs_per_token()},
        {"macs_per_token_quantized", cost_.layer_macs_quantized + cost_.output_macs_quantized},
        {"macs_per_token_float", cost_.layer_macs_float + cost_.output_macs_float},
        {"attention_macs_per_position", cost_.attention_macs_per_position},
        {"kv_bytes_per_position", cost_.kv_bytes_per_position},
    };
    doc["cpu_path"] = std::string(cpu_path_name());
    doc["blas_core"] = std::string(kernels::blas_core());
    Json machine = Json::array();
    for (const auto& [t, b] : bounds_) {
      machine.push_back({
          {"n_threads", t},
          {"dram_read_gb_per_s", b.dram_bytes_per_s * 1e-9},
          {"dram_read_gb_per_s_min", b.dram_min_bytes_per_s * 1e-9},
          {"dram_read_gb_per_s_max", b.dram_max_bytes_per_s * 1e-9},
          {"dram_buffer_bytes", b.dram_buffer_bytes},
          {"dram_method", b.dram_method},
          {"peaks_available", b.peaks_available},
          {"f32_fma_gflops", b.f32_flops_per_s * 1e-9},
          {"int8_madd_gmacs", b.int8_macs_per_s * 1e-9},
          {"openblas_sgemm_gflops", b.sgemm_flops_per_s * 1e-9},
      });
    }
    doc["machine"] = no_bound_ ? Json(nullptr) : machine;
    Json results = Json::array();
    for (const BenchmarkRow& row : rows) {
      const MachineBounds* m = bound_for(row.n_threads);
      const Bound b = compute_bound(cost_, row.kind, row.n_tokens, row.depth, m != nullptr ? *m : MachineBounds{});
      const double rate = achieved_rate(row, b);
      Json r = {
          {"test", row.test},
          {"kind", row.kind == BenchTest::kPrompt ? "pp" : "tg"},
          {"n_tokens", row.n_tokens},
          {"n_depth", row.depth},
          {"n_threads", row.n_threads},
          {"n_reps", row.samples_tokens_per_s.size()},
          {"tokens_per_s", row.median_tokens_per_s},
          {"tokens_per_s_min", row.min_tokens_per_s},
          {"tokens_per_s_max", row.max_tokens_per_s},
          {"tokens_per_s_stdev", row.stdev_tokens_per_s},
          {"samples_tokens_per_s", row.samples_tokens_per_s},
          {"ms_per_token", row.ms_per_token()},
      };
      if (row.kind == BenchTest::kGenerate) {
        r["bytes_per_token"] = b.bytes;
        r["achieved_gb_per_s"] = rate * 1e-9;
      } else {
        r["flops"] = b.flops;
        r["achieved_gflops"] = rate * 1e-9;
        if (m != nullptr && m->sgemm_flops_per_s > 0) r["fraction_of_sgemm"] = rate / m->sgemm_flops_per_s;
      }
      if (m != nullptr) {
        r["bound"] = {
            {"tokens_per_s", b.tokens_per_s},
            {"fraction", b.tokens_per_s > 0 ? row.median_tokens_per_s / b.tokens_per_s : 0.0},
            {"binding", b.binding},
            {"memory_s", b.memory_s},
            {"compute_s", b.compute_s},
        };
      } else {
        r["bound"] = nullptr;
      }
      results.push_back(std::move(r));
    }
    doc["results"] = std::move(results);
    return doc;
  }


  std::unique_ptr<Command> kv_ = make_bench_kv_command();
  CLI::App* kv_app_ = nullptr;
  std::string model_path_;
  std::string synthetic_;
  bool json_ = false;
  bool no_bound_ = false;
  BenchmarkOptions options_;
  ModelCost cost_;
  std::string model_name_;
  std::map<int, MachineBounds> bounds_;  // by resolved thread count
  StatusLine status_{::isatty(STDERR_FILENO) != 0, "leoam: bench"};
  bool above_bound_ = false;  // a tg row beat its DRAM bound: say why under the table
};

}  // namespace

std::unique_ptr<Command> make_bench_command() { return std::make_unique<BenchCommand>(); }

}  // namespace leoam::cli
