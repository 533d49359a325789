// What the CPU this process runs on can do, read once from CPUID, and which kernel path the
// dispatchers use. The binary is built for any x86-64; each fast path is compiled with its own
// target attributes and chosen here at startup.
//
// LEOAM_CPU_PATH=scalar|avx2|avx512 in the environment caps the path (never above what the CPU
// has), so that every path can be exercised and compared on one machine.
#pragma once

#include <string_view>

namespace leoam {

struct CpuFeatures {
  bool avx2 = false;         // with FMA and F16C
  bool avx512 = false;       // F, BW, VL, DQ
  bool avx512_vnni = false;  // VPDPBUSD
  bool avx512_bf16 = false;  // VDPBF16PS
  bool avx_vnni = false;     // VEX-encoded VPDPBUSD (Alder Lake, Zen 5)
};

enum class CpuPath : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The features of this CPU (cached after the first call).
const CpuFeatures& cpu_features();

// The path the kernels use: the best the CPU has, capped by LEOAM_CPU_PATH (read once).
CpuPath cpu_path();

// Caps the path for the rest of the process, for tests that compare paths; returns the path now
// in use (the cap, or less when the CPU lacks it).
CpuPath set_cpu_path_cap(CpuPath cap);

// "scalar", "avx2", "avx512" plus "+vnni"/"+bf16" where used: printed by `leoam run --verbose`.
std::string_view cpu_path_name();

}  // namespace leoam
