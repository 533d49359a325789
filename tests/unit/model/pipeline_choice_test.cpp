// PipelineChoice (`--pipeline auto`): the first step runs unpipelined and is not counted, each mode
// is measured once, then the faster mode runs, and one step in kTryEvery tries the other, so that
// a change in which mode is faster is followed.
#include "model/pipeline_choice.h"

#include <gtest/gtest.h>

#include <vector>

namespace leoam {
namespace {

// Runs `steps` decode steps, each taking ms_off or ms_on as the choice's mode says; returns the
// modes it ran.
std::vector<bool> run(PipelineChoice& c, int steps, double ms_off, double ms_on) {
  std::vector<bool> modes;
  for (int i = 0; i < steps; ++i) {
    const bool on = c.next();
    modes.push_back(on);
    c.record(on, on ? ms_on : ms_off);
  }
  return modes;
}

TEST(PipelineChoice, MeasuresBothModesThenRunsTheFasterAndTriesTheOtherNowAndThen) {
  PipelineChoice c;
  const std::vector<bool> modes = run(c, 2 + 3 * PipelineChoice::kTryEvery, /*ms_off=*/100.0, /*ms_on=*/130.0);
  EXPECT_FALSE(modes[0]);  // cold, not counted
  EXPECT_FALSE(modes[1]);  // off measured
  EXPECT_TRUE(modes[2]);   // on measured
  int64_t on = 0;
  for (size_t i = 3; i < modes.size(); ++i) {
    on += modes[i] ? 1 : 0;
    EXPECT_EQ(modes[i], static_cast<int64_t>(i) % PipelineChoice::kTryEvery == 0) << "step " << i;
  }
  EXPECT_EQ(on, 3);  // the tries, one in kTryEvery
}

TEST(PipelineChoice, RunsThePipelineWhereItIsFasterAndFollowsAChange) {
  PipelineChoice c;
  std::vector<bool> modes = run(c, 40, /*ms_off=*/130.0, /*ms_on=*/100.0);
  int64_t off_after_warmup = 0;
  for (size_t i = 3; i < modes.size(); ++i) off_after_warmup += modes[i] ? 0 : 1;
  EXPECT_EQ(off_after_warmup, 2);  // steps 16 and 32 tried off
  // The disk gets faster: the pipeline stops paying. Once the tries have filled off's window of
  // recent steps with the new times, off runs again.
  modes = run(c, 4 * PipelineChoice::kTryEvery, /*ms_off=*/90.0, /*ms_on=*/100.0);
  EXPECT_FALSE(modes.back());
}

}  // namespace
}  // namespace leoam
