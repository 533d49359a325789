#include "benchmark.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <span>

#include "core/ggml_type.h"
#include "core/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/memory_bandwidth.h"
#include "kernels/cpu/peak_rate.h"
#include "leoam/session.h"
#include "model/forward_context.h"
#include "model/model.h"

namespace leoam {
namespace {

bool is_quantized(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return false;
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K:
      return true;
  }
  return false;
}

uint64_t matrix_bytes(const kernels::MatrixView& m) { return static_cast<uint64_t>(m.row_bytes) * static_cast<uint64_t>(m.n_rows); }
double matrix_macs(const kernels::MatrixView& m) { return static_cast<double>(m.n_rows) * static_cast<double>(m.n_cols); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

ModelCost model_cost(const Model& model, KvDtype kv_dtype) {
  const ModelHparams& hp = model.hparams();
  const ModelWeights& w = model.weights();
  ModelCost c;
  for (const GgufTensorInfo& t : model.gguf().tensors()) {
    c.size_bytes += t.n_bytes;
    c.n_params += static_cast<uint64_t>(t.n_elements());
  }

  std::map<GgmlType, uint64_t> bytes_by_type;
  auto add_matrix = [&](const kernels::MatrixView& m, double& macs_quantized, double& macs_float) {
    c.weight_bytes_per_token += matrix_bytes(m);
    bytes_by_type[m.type] += matrix_bytes(m);
    (is_quantized(m.type) ? macs_quantized : macs_float) += matrix_macs(m);
  };
  const uint64_t norm_bytes = static_cast<uint64_t>(hp.n_embd) * sizeof(float);
  for (const LayerWeights& L : w.layers) {
    for (const kernels::MatrixView* m : {&L.attn_q, &L.attn_k, &L.attn_v, &L.attn_output, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) {
      add_matrix(*m, c.layer_macs_quantized, c.layer_macs_float);
    }
    c.weight_bytes_per_token += 2 * norm_bytes;  // attn_norm, ffn_norm
  }
  add_matrix(w.output, c.output_macs_quantized, c.output_macs_float);
  c.weight_bytes_per_token += norm_bytes + w.token_embd.row_bytes;  // output_norm, one embedding row
  if (!w.output_tied) bytes_by_type[w.token_embd.type] += matrix_bytes(w.token_embd);

  const auto most = std::max_element(bytes_by_type.begin(), bytes_by_type.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  c.type_name = most == bytes_by_type.end() ? "?" : ggml_type_name(static_cast<uint32_t>(most->first));

  c.attention_macs_per_position = 2.0 * hp.n_layer * hp.n_head * hp.head_dim;
  c.kv_bytes_per_position = 2ull * static_cast<uint64_t>(hp.n_layer) * static_cast<uint64_t>(hp.n_embd_kv()) * kv_dtype_size(kv_dtype);
  return c;
}

namespace {

// The rate of one plain OpenBLAS sgemm on a prefill-shaped product (512 tokens x 2048 x 2048,
// the shape of a 1B model's attention matrices), with OpenBLAS's own n_threads threads: the
// reference that prefill GFLOP/s is compared with. Median of n_passes passes of >= min_seconds.
double measure_sgemm_flops(int n_threads, double min_seconds, int n_passes) {
  constexpr int64_t kM = 512, kN = 2048, kK = 2048;
  std::vector<float> a(static_cast<size_t>(kM * kK)), b(static_cast<size_t>(kN * kK)), c(static_cast<size_t>(kM * kN));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : a) v = dist(rng);
  for (float& v : b) v = dist(rng);
  kernels::blas_sgemm_nt(a.data(), b.data(), c.data(), kM, kN, kK, n_threads);  // warm-up
  std::vector<double> rates;
  for (int pass = 0; pass < n_passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t n_calls = 0;
    double elapsed = 0;
    do {
      kernels::blas_sgemm_nt(a.data(), b.data(), c.data(), kM, kN, kK, n_threads);
      ++n_calls;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < min_seconds);
    rates.push_back(2.0 * kM * kN * kK * static_cast<double>(n_calls) / elapsed);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

Result<MachineBounds> measure_machine_bounds(int n_threads, const MachineBoundsOptions& options) {
  MachineBounds m;
  m.n_threads = n_threads > 0 ? n_threads : ThreadPool::default_thread_count();

  MemoryBandwidthOptions bw_options;
  bw_options.buffer_bytes = options.dram_buffer_bytes;
  bw_options.n_threads = m.n_threads;
  bw_options.n_passes = options.dram_passes;
  LEOAM_ASSIGN_OR_RETURN(MemoryBandwidth bw, measure_memory_bandwidth(bw_options));
  m.dram_bytes_per_s = bw.bytes_per_s;
  m.dram_min_bytes_per_s = bw.min_bytes_per_s;
  m.dram_max_bytes_per_s = bw.max_bytes_per_s;
  m.dram_buffer_bytes = bw.buffer_bytes;
  m.dram_method = bw.method;

  kernels::PeakRateOptions peak_options;
  peak_options.n_threads = m.n_threads;
  peak_options.min_seconds = options.peak_min_seconds;
  peak_options.n_passes = options.peak_passes;
  const kernels::PeakRates peaks = kernels::measure_peak_rates(peak_options);
  m.peaks_available = peaks.available;
  m.f32_flops_per_s = peaks.f32_flops_per_s;
  m.int8_macs_per_s = peaks.int8_macs_per_s;
  m.sgemm_flops_per_s = measure_sgemm_flops(m.n_threads, options.peak_min_seconds, options.peak_passes);
  return m;
}

Bound compute_bound(const ModelCost& cost, BenchTest kind, int64_t n_tokens, int64_t depth, const MachineBounds& machine) {
  Bound b;
  const double n = static_cast<double>(n_tokens);
  const double d = static_cast<double>(depth);
  double int8_macs = 0;  // against the int8 madd peak
  double f32_flops = 0;  // against the FMA peak
  if (kind == BenchTest::kGenerate) {
    // Token i of N reads d + i + 1 positions: (d + (N + 1) / 2) on average.
    const double kv_positions = d + (n + 1.0) / 2.0;
    b.bytes = static_cast<double>(cost.weight_bytes_per_token) + static_cast<double>(cost.kv_bytes_per_position) * kv_positions;
    int8_macs = cost.layer_macs_quantized + cost.output_macs_quantized;
    f32_flops = 2.0 * (cost.layer_macs_float + cost.output_macs_float + cost.attention_macs_per_position * kv_positions);
    b.flops = 2.0 * int8_macs + f32_flops;
  } else {
    // Queries i in [0, P) attend to d + i + 1 positions: P * d + P (P + 1) / 2 pairs.
    const double pairs = n * d + n * (n + 1.0) / 2.0;
    const double n_chunks = std::ceil(n / static_cast<double>(std::max<int64_t>(1, cost.n_batch)));
    b.bytes = static_cast<double>(cost.weight_bytes_per_token) * n_chunks;
    f32_flops = 2.0 * (cost.layer_macs() * n + cost.output_macs() + cost.attention_macs_per_position * pairs);
    b.flops = f32_flops;
  }
  b.memory_s = machine.dram_bytes_per_s > 0 ? b.bytes / machine.dram_bytes_per_s : 0;
  if (machine.peaks_available && machine.f32_flops_per_s > 0 && machine.int8_macs_per_s > 0) {
    b.compute_s = int8_macs / machine.int8_macs_per_s + f32_flops / machine.f32_flops_per_s;
  }
  const double t = std::max(b.memory_s, b.compute_s);
  b.tokens_per_s = t > 0 ? (kind == BenchTest::kGenerate ? 1.0 : n) / t : 0;
  b.binding = b.compute_s > b.memory_s ? "compute" : "memory";
  return b;
}

void summarize_samples(BenchmarkRow& row) {
  std::vector<double> v = row.samples_tokens_per_s;
  if (v.empty()) return;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  row.median_tokens_per_s = n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  row.min_tokens_per_s = v.front();
  row.max_tokens_per_s = v.back();
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(n);
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  row.stdev_tokens_per_s = n > 1 ? std::sqrt(ss / static_cast<double>(n - 1)) : 0;
}

Result<std::vector<BenchmarkRow>> run_benchmark(const Model& model, const BenchmarkOptions& options,
                                                const BenchmarkCallbacks& callbacks) {
  if (options.n_prompt < 0 || options.n_gen < 0) {
    return invalid_argument("bench: -p and -n must not be negative");
  }
  if (options.n_prompt == 0 && options.n_gen == 0) {
    return invalid_argument("bench: nothing to measure: -p and -n are both 0");
  }
  if (options.n_reps < 1) return invalid_argument("bench: repetitions (-r) must be at least 1, got " + std::to_string(options.n_reps));
  if (options.n_threads.empty() || options.depths.empty()) return invalid_argument("bench: no thread count or depth given");
  for (int d : options.depths) {
    if (d < 0) return invalid_argument("bench: depth (-d) must not be negative, got " + std::to_string(d));
  }
  for (int t : options.n_threads) {
    if (t < 0) return invalid_argument("bench: thread count (-t) must not be negative, got " + std::to_string(t));
  }

  const int64_t n_vocab = model.hparams().n_vocab;
  const int max_depth = *std::max_element(options.depths.begin(), options.depths.end());
  const int n_run = std::max(options.n_prompt, options.n_gen);
  // Random ids, the same for every row, so that rows differ only in what they measure.
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n_vocab - 1));
  std::vector<int32_t> tokens(static_cast<size_t>(max_depth + n_run));
  for (int32_t& t : tokens) t = pick(rng);

  std::vector<BenchmarkRow> rows;
  std::vector<float> logits;
  for (int n_threads : options.n_threads) {
    SessionOptions session;  // full attention over the KV in RAM
    session.forward.n_ctx = max_depth + n_run;
    session.forward.n_threads = n_threads;
    session.kv.dtype = options.kv_dtype;
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<Session> made, Session::create(model, session));
    ForwardContext* ctx = &made->context();

    for (int depth : options.depths) {
      const std::span<const int32_t> fill(tokens.data(), static_cast<size_t>(depth));
      const std::span<const int32_t> run(tokens.data() + depth, static_cast<size_t>(n_run));
      for (BenchTest kind : {BenchTest::kPrompt, BenchTest::kGenerate}) {
        const int n = kind == BenchTest::kPrompt ? options.n_prompt : options.n_gen;
        if (n == 0) continue;
        BenchmarkRow row;
        row.kind = kind;
        row.n_tokens = n;
        row.depth = depth;
        row.n_threads = ctx->n_threads();
        row.test = (kind == BenchTest::kPrompt ? "pp" : "tg") + std::to_string(n);
        if (depth > 0) row.test += " @ d" + std::to_string(depth);
        if (callbacks.on_row_start) callbacks.on_row_start(row.test, row.n_threads);

        // One repetition: reset, refill the depth (untimed), then the timed evals.
        auto repetition = [&]() -> Result<double> {
          ctx->reset();
          if (depth > 0) LEOAM_RETURN_IF_ERROR(ctx->eval(fill, false, logits));
          const auto t0 = std::chrono::steady_clock::now();
          if (kind == BenchTest::kPrompt) {
            LEOAM_RETURN_IF_ERROR(ctx->eval(run.first(static_cast<size_t>(n)), false, logits));
          } else {
            for (int i = 0; i < n; ++i) LEOAM_RETURN_IF_ERROR(ctx->eval(run.subspan(static_cast<size_t>(i), 1), false, logits));
          }
          return seconds_since(t0);
        };
        if (options.warmup) {
          LEOAM_ASSIGN_OR_RETURN(double ignored, repetition());
          (void)ignored;
        }
        for (int rep = 0; rep < options.n_reps; ++rep) {
          LEOAM_ASSIGN_OR_RETURN(double seconds, repetition());
          row.samples_tokens_per_s.push_back(static_cast<double>(n) / std::max(seconds, 1e-9));
        }
        summarize_samples(row);
        if (callbacks.on_row_done) callbacks.on_row_done(row);
        rows.push_back(std::move(row));
      }
    }
  }
  return rows;
}

}  // namespace leoam
