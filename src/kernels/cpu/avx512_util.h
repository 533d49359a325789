// What the AVX-512 kernels share: the target attribute that lets one function use AVX-512
// F/BW/VL/DQ in a binary built for any x86-64 (callers check cpu_path() first), and the
// diagnostics GCC 12 gets wrong inside its own AVX-512 intrinsics. Include it first, before any
// other header that includes immintrin.h.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
// GCC 12 reports the _mm512_undefined_* placeholders inside its intrinsics as uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#define LEOAM_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#endif
