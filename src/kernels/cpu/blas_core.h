// OpenBLAS's kernel set (its "core"), checked against what the CPU has. Debian's OpenBLAS is built
// with DYNAMIC_ARCH: it picks its kernels from the CPU's vendor, family and model, and a CPU it
// does not know (a virtual machine's generic "Intel(R) Xeon(R) Processor") gets the Prescott
// (SSE3) kernels even when it has AVX-512, at a fraction of the speed. So before the first BLAS
// call, a core whose kernels lack AVX2 is replaced by the best one this CPU runs
// (core/cpu_features.h: SkylakeX with AVX-512, Haswell with AVX2+FMA), by re-running OpenBLAS's
// own selection with OPENBLAS_CORETYPE set. A core OpenBLAS did recognize is kept, and so is any
// choice the user made with OPENBLAS_CORETYPE. What each core ran at: docs/cpu.md#gemm
#pragma once

#include <string_view>

namespace leoam::kernels {

// The core OpenBLAS uses, after the check above (made on the first call, by one thread; every
// BLAS call of the kernels goes through it first). "" when the OpenBLAS linked does not say.
std::string_view blas_core();

// Whether OpenBLAS core `core` (as openblas_get_corename() names it, any case) runs AVX2 kernels.
bool has_avx2_kernels(std::string_view core);

}  // namespace leoam::kernels
