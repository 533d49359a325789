// Progress on stderr, drawn only where it helps (stderr is a terminal): a one-line bar for the
// prompt prefill when the work is long (a short prompt finishes before a bar is readable), and a
// status line that says which step a benchmark is in.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

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

class StatusLine {
 public:
  // Lines read "<prefix>: <text>", e.g. prefix "leoam: bench".
  StatusLine(bool enabled, std::string prefix) : enabled_(enabled), prefix_(std::move(prefix)) {}
  // Draws the line over the previous one.
  void show(const std::string& text);
  // Erases the line if one was drawn.
  void clear();

 private:
  bool enabled_;
  std::string prefix_;
  bool drawn_ = false;
};

}  // namespace leoam::cli
