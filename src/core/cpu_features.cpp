// CPUID + XGETBV feature detection and the process-wide kernel path (see cpu_features.h).
//
// A feature counts only when the OS saves its register state on context switches: AVX needs
// XCR0 bits 1-2 (SSE, YMM), AVX-512 also bits 5-7 (opmask, ZMM_Hi256, Hi16_ZMM). A hypervisor or
// kernel may hide AVX-512 state even when CPUID lists the instructions.
#include "core/cpu_features.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define LEOAM_CPUID_X86 1
#endif

namespace leoam {
namespace {

#ifdef LEOAM_CPUID_X86
// XCR0, read with XGETBV (inline asm: _xgetbv would need -mxsave on the whole file).
uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return f;
  const unsigned max_leaf = eax;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = (ecx & (1u << 27)) != 0;
  const bool avx = (ecx & (1u << 28)) != 0;
  const bool fma = (ecx & (1u << 12)) != 0;
  const bool f16c = (ecx & (1u << 29)) != 0;
  if (!osxsave || !avx || max_leaf < 7) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;
  const bool os_zmm = (xcr0 & 0xE6) == 0xE6;
  if (!os_ymm) return f;

  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const unsigned max_sub7 = eax;
  const bool avx2 = (ebx & (1u << 5)) != 0;
  const bool avx512f = (ebx & (1u << 16)) != 0;
  const bool avx512dq = (ebx & (1u << 17)) != 0;
  const bool avx512bw = (ebx & (1u << 30)) != 0;
  const bool avx512vl = (ebx & (1u << 31)) != 0;
  const bool avx512vnni = (ecx & (1u << 11)) != 0;
  bool avx_vnni = false, avx512bf16 = false;
  if (max_sub7 >= 1) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    avx_vnni = (eax & (1u << 4)) != 0;
    avx512bf16 = (eax & (1u << 5)) != 0;
  }
  f.avx2 = avx2 && fma && f16c;
  f.avx_vnni = f.avx2 && avx_vnni;
  f.avx512 = f.avx2 && os_zmm && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_vnni = f.avx512 && avx512vnni;
  f.avx512_bf16 = f.avx512 && avx512bf16;
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

CpuPath best_path(const CpuFeatures& f) {
  if (f.avx512) return CpuPath::kAvx512;
  if (f.avx2) return CpuPath::kAvx2;
  return CpuPath::kScalar;
}

CpuPath min_path(CpuPath a, CpuPath b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

// The cap named by LEOAM_CPU_PATH; an unset or unknown value caps nothing.
CpuPath env_cap() {
  const char* v = std::getenv("LEOAM_CPU_PATH");
  if (v == nullptr) return CpuPath::kAvx512;
  if (std::strcmp(v, "scalar") == 0) return CpuPath::kScalar;
  if (std::strcmp(v, "avx2") == 0) return CpuPath::kAvx2;
  return CpuPath::kAvx512;
}

// The path in use: -1 until first read. Process-wide by contract (one binary, one CPU); only
// tests change it, through set_cpu_path_cap.
std::atomic<int> g_path{-1};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

CpuPath cpu_path() {
  int p = g_path.load(std::memory_order_relaxed);
  if (p < 0) {
    const CpuPath initial = min_path(best_path(cpu_features()), env_cap());
    int expected = -1;
    g_path.compare_exchange_strong(expected, static_cast<int>(initial), std::memory_order_relaxed);
    p = g_path.load(std::memory_order_relaxed);
  }
  return static_cast<CpuPath>(p);
}

// The test's cap replaces the environment's: a test that forces scalar and then avx2 must get
// avx2 back even when LEOAM_CPU_PATH=scalar was set for the process.
CpuPath set_cpu_path_cap(CpuPath cap) {
  const CpuPath p = min_path(best_path(cpu_features()), cap);
  g_path.store(static_cast<int>(p), std::memory_order_relaxed);
  return p;
}

std::string_view cpu_path_name() {
  const CpuFeatures& f = cpu_features();
  switch (cpu_path()) {
    case CpuPath::kScalar:
      return "scalar";
    case CpuPath::kAvx2:
      return "avx2";
    case CpuPath::kAvx512:
      return f.avx512_vnni ? "avx512+vnni" : "avx512";
  }
  return "scalar";
}

}  // namespace leoam
