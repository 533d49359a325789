// OpenBLAS's kernel set (its "core"), checked against what the CPU has.
//
// Debian's OpenBLAS is built with DYNAMIC_ARCH: when it loads, it picks its kernels from the
// CPU's vendor, family and model. A CPU it does not know, such as a VM's that reports a generic
// "Intel(R) Xeon(R) Processor", gets the Prescott (SSE3) kernels even when it has AVX-512.
// Measured 2026-12-01 on such a VM (2-core Xeon with AVX-512, OpenBLAS 0.3.21, bench/gemm_bench.cpp,
// 512 tokens x 2048 x 2048, 2 threads): sgemm 54 GFLOP/s with Prescott, 125 with Haswell, 250
// with SkylakeX; a Q4_0 prefill product 49 against 206.
//
// So before the first BLAS call, a core whose kernels lack AVX2 is replaced by the best one this
// CPU runs (core/cpu_features.h: SkylakeX with AVX-512, Haswell with AVX2+FMA), by re-running
// OpenBLAS's own selection with OPENBLAS_CORETYPE set. A core OpenBLAS did recognize is kept, and
// so is any choice the user made with OPENBLAS_CORETYPE.
#pragma once

#include <string_view>

namespace leoam::kernels {

// The core OpenBLAS uses, after the check above (made on the first call, by one thread; every
// BLAS call of the kernels goes through it first). "" when the OpenBLAS linked does not say.
std::string_view blas_core();

// Whether OpenBLAS core `core` (as openblas_get_corename() names it, any case) runs AVX2 kernels.
bool has_avx2_kernels(std::string_view core);

}  // namespace leoam::kernels
