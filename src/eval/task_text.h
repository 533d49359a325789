// The pieces of one eval sample before tokenization, and the seeded draws that build them: shared
// by the development tasks (task.cpp) and the held-out ones (heldout_tasks.cpp).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace leoam::eval {

// A value in [lo, hi]. std::uniform_int_distribution's algorithm is implementation-defined, so
// reduce the (fully specified) mt19937_64 output ourselves; the modulo bias is below 2^-40 here.
inline int64_t draw(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(rng() % span);
}

// Appends n_pieces seeded pieces of a task's filler to `text` (a sentence, a line of a ledger).
using FillerFn = void (*)(std::mt19937_64& rng, int64_t n_pieces, std::string* text);

struct TaskText {
  std::string instruction;
  std::string needle;  // the first needle; starts with a space so it tokenizes as words in text
  std::vector<std::string> other_needles;  // in order; placed by place_other_needles
  bool others_follow = false;  // the others come after the first needle, in order (a chain)
  std::string question;
  std::vector<std::string> answers;
  int max_new_tokens = 16;
  FillerFn filler = nullptr;  // null: the development tasks' filler sentences
};

}  // namespace leoam::eval
