// The OpenBLAS core check (blas_core.h).
#include "kernels/cpu/blas_core.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string>

#include "core/cpu_features.h"

// OpenBLAS's DYNAMIC_ARCH builds export these (driver/others/dynamic.c) without declaring them in
// a header: init selects the core (OPENBLAS_CORETYPE first, else CPUID) unless one is selected,
// quit forgets the selection. Weak, so that an OpenBLAS built for one core links too and keeps it.
extern "C" {
__attribute__((weak)) void gotoblas_dynamic_init(void);
__attribute__((weak)) void gotoblas_dynamic_quit(void);
}

namespace leoam::kernels {
namespace {

std::string current_core() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "";
}

std::string checked_core() {
  const std::string core = current_core();
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return core;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || has_avx2_kernels(core)) return core;
  const CpuFeatures& cpu = cpu_features();
  const char* wanted = cpu.avx512 ? "SkylakeX" : cpu.avx2 ? "Haswell" : nullptr;
  if (wanted == nullptr) return core;
  setenv("OPENBLAS_CORETYPE", wanted, 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");  // the choice is made; child processes choose their own
  return current_core();
}

}  // namespace

// OpenBLAS's x86-64 cores with AVX2 kernels; any other runs SSE or AVX1 kernels.
bool has_avx2_kernels(std::string_view core) {
  std::string lower(core);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  constexpr std::array<std::string_view, 5> kCores{"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"};
  return std::find(kCores.begin(), kCores.end(), lower) != kCores.end();
}

std::string_view blas_core() {
  static const std::string core = checked_core();
  return core;
}

}  // namespace leoam::kernels
