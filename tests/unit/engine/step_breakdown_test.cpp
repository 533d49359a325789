#include "engine/step_breakdown.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

namespace leoam {
namespace {

using Clock = Trace::Clock;
using std::chrono::microseconds;

// A wait for the read-ahead inside "qkv" (a layer's append waits for its read-ahead to finish) and
// a disk read inside "select" (a batch's rows read ahead as they select) are I/O waits, taken out of
// the weights and the selection, as the reads inside attention are taken out of it.
TEST(StepBreakdown, WaitsCountAsIoWhereverTheyFall) {
  Trace trace;
  const Clock::time_point t0 = Clock::now();
  const auto at = [&](int us) { return t0 + microseconds(us); };
  trace.record("decode step", "decode", at(0), at(10000));
  trace.record("qkv", "compute", at(0), at(3000), 0);
  trace.record("wait for read-ahead", "io", at(500), at(2500), 0);  // inside qkv
  trace.record("select", "selection", at(3000), at(4000), 0);
  trace.record("disk read", "io", at(3200), at(3600), 0);  // inside select
  trace.record("attention", "attention", at(4000), at(7000), 0);
  trace.record("disk read", "io", at(4000), at(5000), 0);  // inside attention
  trace.record("ffn", "compute", at(7000), at(9000), 0);
  const StepBreakdown b = summarize_decode_steps(trace, 0);
  EXPECT_NEAR(b.weights_ms, 3.0, 1e-9);    // 3 + 2 less the 2 waited
  EXPECT_NEAR(b.selection_ms, 0.6, 1e-9);  // 1 less the 0.4 read
  EXPECT_NEAR(b.io_wait_ms, 3.4, 1e-9);
  EXPECT_NEAR(b.attention_ms, 2.0, 1e-9);
  EXPECT_NEAR(b.other_ms, 1.0, 1e-9);
}

// Two decode steps of 10 ms on the compute thread, with spans at known times, and a read on
// another thread; the first step skipped: the second's parts, and what is left is "other".
TEST(StepBreakdown, SplitsAStepIntoItsPartsAndSkipsTheFirst) {
  Trace trace;
  const Clock::time_point t0 = Clock::now();
  const auto at = [&](int us) { return t0 + microseconds(us); };
  for (int step = 0; step < 2; ++step) {
    const int s = step * 20000;
    trace.record("decode step", "decode", at(s), at(s + 10000));
    trace.record("qkv", "compute", at(s + 0), at(s + 1000), 0);
    trace.record("select", "selection", at(s + 1000), at(s + 2500), 0);
    trace.record("attention", "attention", at(s + 2500), at(s + 6500), 0);
    trace.record("disk read", "io", at(s + 3000), at(s + 5000), 0);  // inside attention
    trace.record("decode chunks", "decode", at(s + 5000), at(s + 5500), 0);
    trace.record("attn_output", "compute", at(s + 6500), at(s + 7000), 0);
    trace.record("speculate next layer", "selection", at(s + 7000), at(s + 7500), 1);
    trace.record("ffn", "compute", at(s + 7500), at(s + 9500), 0);
  }
  trace.record("disk read", "io", at(50000), at(51000), 0);  // after the steps (a prefill's): not counted
  std::thread io([&] { trace.record("read ahead", "io", at(27000), at(29000), 1); });
  io.join();

  const StepBreakdown b = summarize_decode_steps(trace);
  EXPECT_EQ(b.n_steps, 1);
  EXPECT_NEAR(b.step_ms, 10.0, 1e-9);
  EXPECT_NEAR(b.weights_ms, 3.5, 1e-9);    // 1 + 0.5 + 2
  EXPECT_NEAR(b.selection_ms, 2.0, 1e-9);  // 1.5 + 0.5
  EXPECT_NEAR(b.io_wait_ms, 2.0, 1e-9);
  EXPECT_NEAR(b.decode_ms, 0.5, 1e-9);
  EXPECT_NEAR(b.attention_ms, 1.5, 1e-9);  // 4 less the read and the decoding
  EXPECT_NEAR(b.other_ms, 0.5, 1e-9);
  EXPECT_NEAR(b.read_ahead_ms, 2.0, 1e-9);
  EXPECT_NE(b.to_text().find("decode step 10.00 ms (mean of 1): weights 3.50, selection 2.00, I/O wait 2.00"),
            std::string::npos)
      << b.to_text();
  const nlohmann::json j = nlohmann::json::parse(b.to_json());
  EXPECT_EQ(j.at("steps").get<int>(), 1);
  EXPECT_NEAR(j.at("other_ms").get<double>(), 0.5, 1e-9);

  const StepBreakdown both = summarize_decode_steps(trace, 0);
  EXPECT_EQ(both.n_steps, 2);
  EXPECT_NEAR(both.weights_ms, 3.5, 1e-9);
  EXPECT_EQ(summarize_decode_steps(trace, 2).n_steps, 0);
  // The first step alone: the read-ahead ran in the second.
  const StepBreakdown first = summarize_decode_steps(trace, 0, 1);
  EXPECT_EQ(first.n_steps, 1);
  EXPECT_NEAR(first.step_ms, 10.0, 1e-9);
  EXPECT_NEAR(first.io_wait_ms, 2.0, 1e-9);
  EXPECT_NEAR(first.read_ahead_ms, 0.0, 1e-9);
  EXPECT_EQ(summarize_decode_steps(trace, 1, 0).n_steps, 0);
  EXPECT_EQ(summarize_decode_steps(Trace()).n_steps, 0);
}

}  // namespace
}  // namespace leoam
