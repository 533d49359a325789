// A one-line progress bar on stderr for the prompt prefill, drawn only where it helps: when
// stderr is a terminal and the work is long (a short prompt finishes before a bar is readable).
#pragma once

#include <cstdint>

namespace leoam::cli {

class ProgressBar {
 public:
  // 256: below this many prompt tokens the prefill is quick enough to need no bar.
  static constexpr int64_t kMinTotal = 256;

  // enabled: whether to draw at all (e.g. isatty(STDERR_FILENO)).
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  // Draws "prefill [=====>    ] done/total tokens" over the previous drawing. Ignored when
  // disabled or total < kMinTotal.
  void update(int64_t done, int64_t total);
  // Erases the bar if one was drawn.
  void clear();

 private:
  bool enabled_;
  bool drawn_ = false;
};

}  // namespace leoam::cli
