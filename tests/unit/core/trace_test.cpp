#include "core/trace.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace leoam {
namespace {

// Spans from two threads: complete events with their thread's number, name, layer and position,
// in microseconds since the trace began, after one metadata event per thread.
TEST(Trace, SpansOfEachThreadBecomeCompleteEventsOfThatThread) {
  Trace trace;
  trace.name_thread("compute");
  { const TraceSpan span(&trace, "select", "selection", 3, 8101); }
  std::thread io([&] {
    trace.name_thread("read-ahead");
    trace.name_thread("ignored: the first name stays");
    const TraceSpan span(&trace, "read ahead", "io", 4);
  });
  io.join();
  { const TraceSpan span(&trace, "decode step", "decode"); }
  { const TraceSpan none(nullptr, "not recorded", "decode"); }
  ASSERT_EQ(trace.n_events(), 3u);

  const nlohmann::json j = nlohmann::json::parse(trace.to_json());
  const auto& ev = j.at("traceEvents");
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0].at("ph"), "M");
  EXPECT_EQ(ev[0].at("args").at("name"), "compute");
  EXPECT_EQ(ev[1].at("args").at("name"), "read-ahead");
  EXPECT_EQ(ev[2].at("name"), "select");
  EXPECT_EQ(ev[2].at("ph"), "X");
  EXPECT_EQ(ev[2].at("tid"), 1);
  EXPECT_EQ(ev[2].at("args").at("layer"), 3);
  EXPECT_EQ(ev[2].at("args").at("pos"), 8101);
  EXPECT_EQ(ev[3].at("name"), "read ahead");
  EXPECT_EQ(ev[3].at("tid"), 2);
  EXPECT_EQ(ev[3].at("args").at("layer"), 4);
  EXPECT_FALSE(ev[3].at("args").contains("pos"));
  EXPECT_FALSE(ev[4].contains("args"));  // neither layer nor position
  for (size_t i = 2; i < 5; ++i) {
    EXPECT_GE(ev[i].at("ts").get<double>(), 0.0);
    EXPECT_GE(ev[i].at("dur").get<double>(), 0.0);
  }
  EXPECT_LE(ev[2].at("ts").get<double>(), ev[4].at("ts").get<double>());
}

TEST(Trace, WritesItsJsonAndNamesAPathItCannotWrite) {
  Trace trace;
  { const TraceSpan span(&trace, "ffn", "compute", 0); }
  const std::string path = ::testing::TempDir() + "/leoam_trace_test.json";
  ASSERT_TRUE(trace.write(path).is_ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), trace.to_json());
  std::remove(path.c_str());
  const Status st = trace.write("/nonexistent-dir/trace.json");
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("/nonexistent-dir/trace.json"), std::string::npos) << st.message();
}

// Two traces in one file: a process each, named, in order; the later trace's times shifted by
// the time between the two epochs, so that its span lies after the first trace's on one clock.
TEST(Trace, TracesInOneFileAreNamedProcessesOnOneClock) {
  Trace first;
  first.name_thread("compute");
  { const TraceSpan span(&first, "select", "selection", 0); }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Trace second;
  { const TraceSpan span(&second, "attention", "attention", 1); }
  const std::vector<NamedTrace> both = {{"full at 2048 tokens", &first}, {"leoam at 2048 tokens", &second}};
  const nlohmann::json j = nlohmann::json::parse(traces_to_json(both));
  const auto& ev = j.at("traceEvents");
  ASSERT_EQ(ev.size(), 6u);
  EXPECT_EQ(ev[0].at("name"), "process_name");
  EXPECT_EQ(ev[0].at("pid"), 1);
  EXPECT_EQ(ev[0].at("args").at("name"), "full at 2048 tokens");
  EXPECT_EQ(ev[1].at("args").at("name"), "compute");
  EXPECT_EQ(ev[2].at("name"), "select");
  EXPECT_EQ(ev[2].at("pid"), 1);
  EXPECT_EQ(ev[3].at("name"), "process_name");
  EXPECT_EQ(ev[3].at("pid"), 2);
  EXPECT_EQ(ev[3].at("args").at("name"), "leoam at 2048 tokens");
  EXPECT_EQ(ev[4].at("args").at("name"), "thread 1");  // never named
  EXPECT_EQ(ev[5].at("name"), "attention");
  EXPECT_EQ(ev[5].at("pid"), 2);
  const double shift_us = std::chrono::duration<double, std::micro>(second.epoch() - first.epoch()).count();
  EXPECT_GE(shift_us, 20000.0);
  EXPECT_NEAR(ev[5].at("ts").get<double>(), second.events()[0].ts_us + shift_us, 1e-3);
  EXPECT_GT(ev[5].at("ts").get<double>(), ev[2].at("ts").get<double>() + ev[2].at("dur").get<double>());
}

}  // namespace
}  // namespace leoam
