// The benchmark behind `leoam bench` (in the spirit of llama-bench): prompt processing (pp<P>, one
// eval of P random tokens) and text generation (tg<N>, N evals of one) per thread count t and
// depth d (tokens put in the KV cache by an untimed prefill), each repetition from reset() after
// one uncounted warm-up; reported: the median tok/s, with min, max and stdev. Each figure is set
// against a roofline bound measured with t threads in the same run: 1 / max(memory, compute) tok/s,
// memory = a token's bytes / DRAM read bandwidth, compute = quantized MACs / the int8 madd peak +
// 2 * float and attention MACs / the f32 FMA peak (Q4_0 Q8_0 Q4_K Q6_K dots are int8 madd, F32 F16
// BF16 ones f32 FMA); "binding" names the larger term. For pp, all flops / the FMA peak (prefill
// multiplies in f32), the weights read once per 512-token chunk.
// The terms in full: docs/cpu.md#the-bound-of-leoam-bench
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/kv_dtype.h"

namespace leoam {

class Model;

// What one token costs a model, from its tensor shapes and types alone.
struct ModelCost {
  uint64_t size_bytes = 0;  // every tensor's bytes (llama-bench's "size")
  uint64_t n_params = 0;    // every tensor's elements (llama-bench's "params")
  std::string type_name;    // the type holding most matrix bytes, e.g. "Q4_0"
  // Bytes one decode step reads: every layer matrix and norm, the output norm and matrix, and one
  // row of the token embedding (the output matrix counts in full even when tied to it).
  uint64_t weight_bytes_per_token = 0;
  // Multiply-adds per token in the matrices, by the peak that applies to each (see above).
  double layer_macs_quantized = 0;  // all layers, matrices of block-quantized types
  double layer_macs_float = 0;      // all layers, F32 F16 BF16 matrices
  double output_macs_quantized = 0;
  double output_macs_float = 0;
  // Per query token and per KV position, all layers: q.k and p.v over every query head,
  // 2 * n_layer * n_head * head_dim.
  double attention_macs_per_position = 0;
  // K and V of one position, all layers: 2 * n_layer * n_head_kv * head_dim * sizeof(kv element).
  uint64_t kv_bytes_per_position = 0;
  int64_t n_batch = 512;  // prefill chunk: the weights are read once per chunk

  double layer_macs() const { return layer_macs_quantized + layer_macs_float; }
  double output_macs() const { return output_macs_quantized + output_macs_float; }
  double macs_per_token() const { return layer_macs() + output_macs(); }
};

ModelCost model_cost(const Model& model, KvDtype kv_dtype);

// The machine's limits, measured with n_threads threads.
struct MachineBounds {
  int n_threads = 0;
  double dram_bytes_per_s = 0;      // median streaming read bandwidth
  double dram_min_bytes_per_s = 0;  // slowest and fastest pass
  double dram_max_bytes_per_s = 0;
  size_t dram_buffer_bytes = 0;
  const char* dram_method = "";     // "avx2" or "scalar"
  bool peaks_available = false;     // false without AVX2+FMA: no compute term
  double f32_flops_per_s = 0;       // AVX2 FMA peak
  double int8_macs_per_s = 0;       // AVX2 vpmaddubsw + vpmaddwd peak
  double sgemm_flops_per_s = 0;     // plain OpenBLAS sgemm, 512 x 2048 x 2048, n_threads threads
};

struct MachineBoundsOptions {
  size_t dram_buffer_bytes = size_t{1} << 30;  // 1 GiB; tests pass a few MiB
  int dram_passes = 5;
  double peak_min_seconds = 0.05;              // per timed pass of each peak loop
  int peak_passes = 3;
};

// Measures bandwidth and peaks with n_threads threads (<= 0: the physical cores).
Result<MachineBounds> measure_machine_bounds(int n_threads, const MachineBoundsOptions& options);

enum class BenchTest : uint8_t { kPrompt, kGenerate };

// One term-by-term bound (the header comment; docs/cpu.md#the-bound-of-leoam-bench).
struct Bound {
  double bytes = 0;           // per token for tg; for the whole eval for pp
  double flops = 0;           // the same, counting a MAC as 2 flops
  double memory_s = 0;        // bytes / bandwidth
  double compute_s = 0;       // arithmetic / the peaks
  double tokens_per_s = 0;    // n_tokens / max(memory_s, compute_s)
  const char* binding = "";   // "memory" or "compute"
};

// The bound of test `kind` with n_tokens tokens after `depth` tokens, on `machine`.
Bound compute_bound(const ModelCost& cost, BenchTest kind, int64_t n_tokens, int64_t depth, const MachineBounds& machine);

struct BenchmarkOptions {
  int n_prompt = 512;              // pp<P>; 0: no pp test
  int n_gen = 128;                 // tg<N>; 0: no tg test
  std::vector<int> n_threads = {0};  // each a row group; 0: the physical cores
  std::vector<int> depths = {0};   // tokens in the KV cache before timing
  int n_reps = 5;                  // timed repetitions per row
  bool warmup = true;              // one untimed repetition first
  uint64_t seed = 1234;            // the random token ids
  KvDtype kv_dtype = KvDtype::kF16;
};

struct BenchmarkRow {
  BenchTest kind = BenchTest::kPrompt;
  std::string test;                // "pp512", "tg128", "tg128 @ d4096"
  int64_t n_tokens = 0;            // P or N
  int64_t depth = 0;
  int n_threads = 0;               // as resolved (never 0)
  std::vector<double> samples_tokens_per_s;  // [n_reps], in the order run
  double median_tokens_per_s = 0;
  double min_tokens_per_s = 0;
  double max_tokens_per_s = 0;
  double stdev_tokens_per_s = 0;   // sample standard deviation; 0 for one repetition
  double ms_per_token() const { return median_tokens_per_s > 0 ? 1000.0 / median_tokens_per_s : 0; }
};

// Called before each row starts (for progress) and after each row ends; either may be empty.
struct BenchmarkCallbacks {
  std::function<void(const std::string& test, int n_threads)> on_row_start;
  std::function<void(const BenchmarkRow& row)> on_row_done;
};

// Runs every row: thread counts outermost, then depths, then pp before tg. Fails on options that
// measure nothing or are out of range (invalid_argument), or when a context cannot be created.
Result<std::vector<BenchmarkRow>> run_benchmark(const Model& model, const BenchmarkOptions& options,
                                                const BenchmarkCallbacks& callbacks = {});

// Median, min, max and sample stdev of `samples` into `row`.
void summarize_samples(BenchmarkRow& row);

}  // namespace leoam
