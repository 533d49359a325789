#include "benchmark.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>

#include "kernels/cpu/peak_rate.h"
#include "model/model.h"
#include "model/synthetic_model.h"

namespace leoam {
namespace {

// The "tiny" preset (F32: n_vocab 512, n_embd 256, 2 layers, 4 heads of 64, 2 KV heads, n_ff 512),
// written once to a temporary file for the whole suite.
class BenchmarkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/leoam_benchmark_test_XXXXXX.gguf";
    const int fd = ::mkstemps(tmpl, 5);
    ASSERT_GE(fd, 0);
    ::close(fd);
    Result<SyntheticModelSpec> spec = synthetic_model_preset("tiny");
    ASSERT_TRUE(spec.is_ok()) << spec.status().message();
    ASSERT_TRUE(write_synthetic_model(*spec, tmpl).is_ok());
    Result<std::unique_ptr<Model>> m = Model::load(tmpl);
    ::unlink(tmpl);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = std::move(*m).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static const Model& model() { return *model_; }

  static Model* model_;
};
Model* BenchmarkTest::model_ = nullptr;

TEST_F(BenchmarkTest, ModelCostOfTheTinyPreset) {
  const ModelCost c = model_cost(model(), KvDtype::kF16);
  // Per layer: q 256x256 + k 128x256 + v 128x256 + o 256x256 + gate, up 512x256 + down 256x512.
  const double layer = 65536 + 32768 + 32768 + 65536 + 3 * 131072;
  EXPECT_EQ(c.layer_macs_float, 2 * layer);
  EXPECT_EQ(c.layer_macs_quantized, 0);
  EXPECT_EQ(c.output_macs_float, 512 * 256);
  EXPECT_EQ(c.output_macs_quantized, 0);
  // F32 matrices, 5 norms of 256 floats, one embedding row of 256 floats.
  EXPECT_EQ(c.weight_bytes_per_token, static_cast<uint64_t>((2 * layer + 512 * 256) * 4 + 5 * 256 * 4 + 256 * 4));
  EXPECT_EQ(c.kv_bytes_per_position, 2u * 2 * 128 * 2);     // K and V, 2 layers, 2 heads x 64, f16
  EXPECT_EQ(c.attention_macs_per_position, 2.0 * 2 * 4 * 64);  // q.k and p.v, 2 layers, 4 heads x 64
  EXPECT_EQ(c.type_name, "F32");
  // The file's tensors: matrices, embedding and output, and 5 norms.
  EXPECT_EQ(c.n_params, static_cast<uint64_t>(2 * layer + 2 * 512 * 256 + 5 * 256));
  EXPECT_EQ(c.size_bytes, c.n_params * 4);
  EXPECT_EQ(model_cost(model(), KvDtype::kF32).kv_bytes_per_position, 2u * 2 * 128 * 4);
}

// A hand-made cost and machine, to pin the bound's arithmetic.
ModelCost made_up_cost() {
  ModelCost c;
  c.weight_bytes_per_token = 1000;
  c.layer_macs_quantized = 900;
  c.layer_macs_float = 50;
  c.output_macs_float = 50;
  c.attention_macs_per_position = 10;
  c.kv_bytes_per_position = 4;
  c.n_batch = 512;
  return c;
}

MachineBounds made_up_machine(double bytes_per_s, double flops_per_s, double int8_macs_per_s) {
  MachineBounds m;
  m.n_threads = 1;
  m.dram_bytes_per_s = bytes_per_s;
  m.peaks_available = true;
  m.f32_flops_per_s = flops_per_s;
  m.int8_macs_per_s = int8_macs_per_s;
  return m;
}

TEST(BenchmarkBound, DecodeIsTheLargerOfBytesOverBandwidthAndMacsOverPeak) {
  const ModelCost c = made_up_cost();
  // tg3 at depth 6: token i reads 6 + i + 1 positions, 8 on average.
  const MachineBounds memory_bound = made_up_machine(1e6, 1e9, 1e9);
  const Bound b = compute_bound(c, BenchTest::kGenerate, 3, 6, memory_bound);
  EXPECT_DOUBLE_EQ(b.bytes, 1000 + 4 * 8);
  EXPECT_DOUBLE_EQ(b.memory_s, 1032 / 1e6);
  // 900 int8 MACs on the madd peak; (100 + 10 * 8) MACs = 360 flops on the FMA peak.
  EXPECT_DOUBLE_EQ(b.compute_s, 900 / 1e9 + 360 / 1e9);
  EXPECT_DOUBLE_EQ(b.flops, 2 * 900 + 360);
  EXPECT_DOUBLE_EQ(b.tokens_per_s, 1e6 / 1032);
  EXPECT_STREQ(b.binding, "memory");

  const MachineBounds compute_bound_machine = made_up_machine(1e12, 1e6, 1e6);
  const Bound c2 = compute_bound(c, BenchTest::kGenerate, 3, 6, compute_bound_machine);
  EXPECT_STREQ(c2.binding, "compute");
  EXPECT_DOUBLE_EQ(c2.tokens_per_s, 1.0 / (900 / 1e6 + 360 / 1e6));
}

TEST(BenchmarkBound, PrefillIsFlopsOverTheFmaPeak) {
  const ModelCost c = made_up_cost();
  // pp4 at depth 2: queries attend to 3, 4, 5, 6 positions = 18 pairs.
  const Bound b = compute_bound(c, BenchTest::kPrompt, 4, 2, made_up_machine(1e9, 1e6, 1e9));
  EXPECT_DOUBLE_EQ(b.flops, 2.0 * (950 * 4 + 50 + 10 * 18));
  EXPECT_DOUBLE_EQ(b.compute_s, b.flops / 1e6);
  EXPECT_DOUBLE_EQ(b.bytes, 1000);  // one chunk of <= 512 tokens: the weights once
  EXPECT_DOUBLE_EQ(b.tokens_per_s, 4 / b.compute_s);
  EXPECT_STREQ(b.binding, "compute");
  EXPECT_DOUBLE_EQ(compute_bound(c, BenchTest::kPrompt, 1025, 0, made_up_machine(1e9, 1e6, 1e9)).bytes, 3000);  // 3 chunks
}

TEST(BenchmarkBound, NoPeaksMeansMemoryOnly) {
  MachineBounds m = made_up_machine(1e6, 0, 0);
  m.peaks_available = false;
  const Bound b = compute_bound(made_up_cost(), BenchTest::kGenerate, 1, 0, m);
  EXPECT_EQ(b.compute_s, 0);
  EXPECT_STREQ(b.binding, "memory");
  EXPECT_DOUBLE_EQ(b.tokens_per_s, 1e6 / 1004);
}

TEST(BenchmarkSummary, MedianMinMaxAndSampleStdev) {
  BenchmarkRow row;
  row.samples_tokens_per_s = {30, 10, 20};
  summarize_samples(row);
  EXPECT_EQ(row.median_tokens_per_s, 20);
  EXPECT_EQ(row.min_tokens_per_s, 10);
  EXPECT_EQ(row.max_tokens_per_s, 30);
  EXPECT_DOUBLE_EQ(row.stdev_tokens_per_s, 10);
  EXPECT_DOUBLE_EQ(row.ms_per_token(), 50);
  row.samples_tokens_per_s = {4, 1, 2, 3};
  summarize_samples(row);
  EXPECT_EQ(row.median_tokens_per_s, 2.5);
}

TEST_F(BenchmarkTest, RunsTheRequestedRowsInOrder) {
  BenchmarkOptions o;
  o.n_prompt = 8;
  o.n_gen = 4;
  o.n_threads = {1, 2};
  o.depths = {0, 8};
  o.n_reps = 3;
  std::vector<std::string> started;
  int n_done = 0;
  BenchmarkCallbacks cb;
  cb.on_row_start = [&](const std::string& test, int n_threads) { started.push_back(test + "/" + std::to_string(n_threads)); };
  cb.on_row_done = [&](const BenchmarkRow&) { ++n_done; };
  Result<std::vector<BenchmarkRow>> rows = run_benchmark(model(), o, cb);
  ASSERT_TRUE(rows.is_ok()) << rows.status().message();
  const std::vector<std::string> expected = {"pp8/1", "tg4/1", "pp8 @ d8/1", "tg4 @ d8/1",
                                             "pp8/2", "tg4/2", "pp8 @ d8/2", "tg4 @ d8/2"};
  EXPECT_EQ(started, expected);
  EXPECT_EQ(n_done, 8);
  ASSERT_EQ(rows->size(), 8u);
  for (size_t i = 0; i < rows->size(); ++i) {
    const BenchmarkRow& r = (*rows)[i];
    EXPECT_EQ(r.test + "/" + std::to_string(r.n_threads), expected[i]);
    EXPECT_EQ(r.kind, i % 2 == 0 ? BenchTest::kPrompt : BenchTest::kGenerate);
    EXPECT_EQ(r.n_tokens, i % 2 == 0 ? 8 : 4);
    EXPECT_EQ(r.depth, (i / 2) % 2 == 0 ? 0 : 8);
    ASSERT_EQ(r.samples_tokens_per_s.size(), 3u);
    for (double s : r.samples_tokens_per_s) EXPECT_GT(s, 0);
    std::vector<double> sorted = r.samples_tokens_per_s;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(r.median_tokens_per_s, sorted[1]);
    EXPECT_EQ(r.min_tokens_per_s, sorted[0]);
    EXPECT_EQ(r.max_tokens_per_s, sorted[2]);
  }
}

TEST_F(BenchmarkTest, ZeroTokensSkipsATestAndBadOptionsAreRejected) {
  BenchmarkOptions o;
  o.n_prompt = 0;
  o.n_gen = 2;
  o.n_threads = {1};
  o.n_reps = 1;
  o.warmup = false;
  Result<std::vector<BenchmarkRow>> rows = run_benchmark(model(), o);
  ASSERT_TRUE(rows.is_ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].test, "tg2");
  EXPECT_EQ((*rows)[0].stdev_tokens_per_s, 0);

  o.n_gen = 0;
  EXPECT_EQ(run_benchmark(model(), o).status().code(), StatusCode::kInvalidArgument);
  o.n_gen = 2;
  o.n_reps = 0;
  EXPECT_EQ(run_benchmark(model(), o).status().code(), StatusCode::kInvalidArgument);
  o.n_reps = 1;
  o.depths = {-1};
  EXPECT_EQ(run_benchmark(model(), o).status().code(), StatusCode::kInvalidArgument);
}

TEST(PeakRate, PositiveRatesWithOneAndTwoThreads) {
  kernels::PeakRateOptions o;
  o.min_seconds = 0.01;
  o.n_passes = 1;
  const kernels::PeakRates one = kernels::measure_peak_rates(o);
  if (!one.available) GTEST_SKIP() << "this CPU lacks AVX2+FMA: no peak rates";
  EXPECT_EQ(one.n_threads, 1);
  EXPECT_EQ(one.isa, "avx2");
  // Under 1 TFLOP/s per core for 256-bit FMA, the same for int8 MACs; no floor, as a loaded machine
  // under ASan is slow and speed is for benchmarks.
  EXPECT_GT(one.f32_flops_per_s, 0);
  EXPECT_LT(one.f32_flops_per_s, 1e12);
  EXPECT_GT(one.int8_macs_per_s, 0);
  EXPECT_LT(one.int8_macs_per_s, 1e12);
  o.n_threads = 2;
  const kernels::PeakRates two = kernels::measure_peak_rates(o);
  EXPECT_EQ(two.n_threads, 2);
  EXPECT_GT(two.f32_flops_per_s, 0);
  EXPECT_GT(two.int8_macs_per_s, 0);
}

TEST(MachineBounds, MeasuredWithASmallBuffer) {
  MachineBoundsOptions o;
  o.dram_buffer_bytes = size_t{16} << 20;
  o.dram_passes = 1;
  o.peak_min_seconds = 0.01;
  o.peak_passes = 1;
  Result<MachineBounds> m = measure_machine_bounds(1, o);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->n_threads, 1);
  // A rate, not a speed floor: a loaded CI machine under ASan streams well under 1 GB/s. The ceiling
  // catches a bytes-per-second unit slip.
  EXPECT_GT(m->dram_bytes_per_s, 0);
  EXPECT_LT(m->dram_bytes_per_s, 1e13);
  EXPECT_EQ(m->dram_buffer_bytes, size_t{16} << 20);
  if (m->peaks_available) {
    EXPECT_GT(m->f32_flops_per_s, 0);
    EXPECT_GT(m->int8_macs_per_s, 0);
  }
}

}  // namespace
}  // namespace leoam
