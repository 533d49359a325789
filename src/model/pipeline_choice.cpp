#include "model/pipeline_choice.h"

namespace leoam {

double PipelineChoice::mean(bool pipelined) const {
  const std::deque<double>& r = recent_[pipelined ? 1 : 0];
  if (r.empty()) return -1.0;
  double sum = 0.0;
  for (double ms : r) sum += ms;
  return sum / static_cast<double>(r.size());
}

bool PipelineChoice::next() const {
  if (n_steps_ == 0) return false;
  const double off = mean(false);
  const double on = mean(true);
  if (off < 0.0) return false;
  if (on < 0.0) return true;
  const bool faster = on < off;
  return n_steps_ % kTryEvery == 0 ? !faster : faster;
}

void PipelineChoice::record(bool pipelined, double ms) {
  if (n_steps_++ == 0) return;  // the cold first step says nothing about either mode
  std::deque<double>& r = recent_[pipelined ? 1 : 0];
  r.push_back(ms);
  if (r.size() > kWindow) r.pop_front();
}

}  // namespace leoam
