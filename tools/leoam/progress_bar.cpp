#include "progress_bar.h"

#include <cstdio>
#include <string>

namespace leoam::cli {

void ProgressBar::update(int64_t done, int64_t total) {
  if (!enabled_ || total < kMinTotal) return;
  constexpr int kWidth = 40;
  const int filled = static_cast<int>(done * kWidth / total);
  std::string bar(static_cast<size_t>(kWidth), ' ');
  for (int i = 0; i < filled; ++i) bar[static_cast<size_t>(i)] = '=';
  if (filled < kWidth) bar[static_cast<size_t>(filled)] = '>';
  std::fprintf(stderr, "\rprefill [%s] %lld/%lld tokens", bar.c_str(), static_cast<long long>(done),
               static_cast<long long>(total));
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!drawn_) return;
  std::fputs("\r\033[2K", stderr);  // carriage return, erase the line
  std::fflush(stderr);
  drawn_ = false;
}

void StatusLine::show(const std::string& text) {
  if (!enabled_) return;
  std::fprintf(stderr, "\r\033[K%s: %s", prefix_.c_str(), text.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void StatusLine::clear() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace leoam::cli
