// splitmix64 (Steele, Lea and Flood): a small, fast generator whose output is the same on every
// platform (unlike the standard distributions), so a seed names one synthetic file or fill
// everywhere.
#pragma once

#include <cstdint>

namespace leoam {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

}  // namespace leoam
