// The three places a KV chunk can live, fastest first.
#pragma once

#include <cstdint>

namespace leoam {

// kDevice: compute-ready KV that attention reads directly (GPU memory with a GPU backend; RAM on
// the CPU). kHost: RAM, possibly compressed. kDisk: a file on an SSD.
enum class Tier : uint8_t { kDevice, kHost, kDisk };

inline constexpr int kNumTiers = 3;

inline const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::kDevice: return "device";
    case Tier::kHost: return "host";
    case Tier::kDisk: return "disk";
  }
  return "?";
}

}  // namespace leoam
