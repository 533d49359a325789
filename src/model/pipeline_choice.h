// PipelineChoice: whether a decode step runs the decode pipeline (ForwardOptions::pipeline), for
// `--pipeline auto`. The pipeline pays only where a step waits on the disk for longer than the
// speculated selection and the read-ahead thread cost it, which a fast disk and few cores do not
// (docs/kv-store.md#the-decode-pipeline). So each step takes the mode whose recent steps were
// faster, and one step in kTryEvery tries the other mode, to follow a change:
//   first step        off, not counted (a cold step: its reads fill the tiers)
//   until both known  off, then on
//   then              the faster mode by the mean of each mode's last kWindow steps; every
//                     kTryEvery-th step the other one
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>

namespace leoam {

class PipelineChoice {
 public:
  static constexpr int64_t kTryEvery = 16;
  static constexpr size_t kWindow = 3;

  // Whether the next decode step runs pipelined.
  bool next() const;
  // The decode step just run, pipelined or not, took `ms`.
  void record(bool pipelined, double ms);

 private:
  // The mean of a mode's recent step times; negative while it has none.
  double mean(bool pipelined) const;

  int64_t n_steps_ = 0;
  std::array<std::deque<double>, 2> recent_;  // [off, on]: the last kWindow step times
};

}  // namespace leoam
