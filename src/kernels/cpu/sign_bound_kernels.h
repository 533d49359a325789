// The per-CPU kernels of the sign-refined bound (sparse/sign_bound.h owns the bound, its units,
// runs and threads): one box's channel terms for a group of query heads, then each unit's largest
// row bound over rows' sign words or over the chunk tree's channel slices. Scalar references in
// namespace ref; the AVX2 and AVX-512 tables are picked by cpu_path() (core/cpu_features.h).
// Why these layouts: docs/selection.md#sign-bound-kernels
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace leoam::kernels {

// The most query heads scored together against one kv head's rows. The vector kernels' loops over
// a group's heads carry `#pragma GCC unroll 4` to match: without it GCC at -O2 left a loop of 4
// heads rolled, their accumulators on the stack.
inline constexpr int kSignMaxGroup = 4;
// The AVX-512 slices kernel's steps per head: each term N_c - P_c rounded up to a multiple of the
// head's largest |N_c - P_c| / kSignTermSteps (|steps| <= 4095: 8 channels sum in int16).
inline constexpr float kSignTermSteps = 4094.0f;

// A query head's positive and negative parts (head_dim floats each; one of them 0 a channel).
struct SignQuery {
  const float* pos = nullptr;
  const float* neg = nullptr;
};

// Rows [begin, end) of a unit.
struct SignRows {
  int64_t begin = 0;
  int64_t end = 0;
};

// Row-major sign words: row pos's words of kv head h at
// words + (pos - pos0) * words_per_row + h * words_per_head; bit c % 32 of word c / 32 is channel c.
struct SignRowWords {
  const uint32_t* words = nullptr;
  int64_t pos0 = 0;
  int64_t words_per_row = 0;
  int words_per_head = 0;

  const uint32_t* row(int64_t pos, int kv_head) const {
    return words + (pos - pos0) * words_per_row + static_cast<int64_t>(kv_head) * words_per_head;
  }
};

// Sign words sliced by channel: bit r of words[(g * n_kv_heads + h) * head_dim + c] is channel c
// of kv head h at row 64 g + r.
struct SignSliceWords {
  const uint64_t* words = nullptr;
  int n_kv_heads = 0;
  int head_dim = 0;

  const uint64_t* slice(int64_t g, int kv_head) const {
    return words + (g * n_kv_heads + kv_head) * static_cast<int64_t>(head_dim);
  }
};

// A group of g <= kSignMaxGroup query heads' terms against one box of head_dim channels:
//   P_c = qp_c * max_c + qn_c * max(0, min_c)      N_c = qp_c * min(0, max_c) + qn_c * min_c
// base[j] = sum_c P_c and d[j * hd + c] = N_c - P_c. Where `quantized` (AVX-512 slices only),
// dq[j * hd + c] holds d rounded up to whole steps of step[j], twice in a 32-bit word (low and
// high int16): step[j] * int16(dq) >= d.
struct SignTerms {
  explicit SignTerms(int hd)
      : d(static_cast<size_t>(kSignMaxGroup * hd)), dq(static_cast<size_t>(kSignMaxGroup * hd)) {}
  float base[kSignMaxGroup] = {};
  std::vector<float> d;
  bool quantized = false;
  float step[kSignMaxGroup] = {};
  std::vector<uint32_t> dq;
};

// The terms of g heads (heads[0, g)) against the box whose mins are mn[hd] and maxes mx[hd] (f16).
using SignTermsFn = void (*)(const SignQuery* heads, int g, const uint16_t* mn, const uint16_t* mx, int hd,
                             SignTerms& terms);
// For a run of units that share the box of `terms`, best[j * run.size() + u] = the largest over
// unit u's rows of base[j] plus head j's d at the row's set bits (kv head kv_head's signs).
using SignRowsBoundFn = void (*)(const SignTerms& terms, int g, const SignRowWords& signs,
                                 std::span<const SignRows> run, int kv_head, int hd, float* best);
using SignSlicesBoundFn = void (*)(const SignTerms& terms, int g, const SignSliceWords& signs,
                                   std::span<const SignRows> run, int kv_head, int hd, float* best);

// One instruction set's kernels: the terms and bound over row words, and over slices.
struct SignBoundKernels {
  SignTermsFn rows_terms;
  SignRowsBoundFn rows_bound;
  SignTermsFn slices_terms;
  SignSlicesBoundFn slices_bound;
};

// The kernels for cpu_path() and head_dim: over row words AVX2+FMA where head_dim % 8 == 0; over
// slices AVX-512 (in steps, float where a box's terms overflow), else AVX2+FMA where
// head_dim % 8 == 0; else the references.
SignBoundKernels sign_bound_kernels(int head_dim);

namespace detail {
// Each instruction set's table; nullptr off x86. Dispatch through cpu_path() only.
const SignBoundKernels* sign_bound_kernels_avx2();
const SignBoundKernels* sign_bound_kernels_avx512();

// Calls kernel(std::integral_constant<int, G>{}) for the group of 1 <= g <= kSignMaxGroup heads:
// each vector kernel is a template on G, so that its accumulators stay in registers.
template <typename Kernel>
void for_sign_group(int g, Kernel kernel) {
  switch (g) {
    case 1: return kernel(std::integral_constant<int, 1>{});
    case 2: return kernel(std::integral_constant<int, 2>{});
    case 3: return kernel(std::integral_constant<int, 3>{});
    default: return kernel(std::integral_constant<int, 4>{});
  }
}
}  // namespace detail

namespace ref {
// Scalar float loops: the kScalar table, and what the vector kernels are tested against.
void sign_terms(const SignQuery* heads, int g, const uint16_t* mn, const uint16_t* mx, int hd, SignTerms& terms);
void sign_rows_bound(const SignTerms& terms, int g, const SignRowWords& signs, std::span<const SignRows> run,
                     int kv_head, int hd, float* best);
void sign_slices_bound(const SignTerms& terms, int g, const SignSliceWords& signs, std::span<const SignRows> run,
                       int kv_head, int hd, float* best);
// One head's terms (the struct comment): returns sum_c P_c and stores d[c]; the vector paths'
// tails.
float sign_channel_terms(const float* qp, const float* qn, const uint16_t* mn, const uint16_t* mx, int hd, float* d);
}  // namespace ref

}  // namespace leoam::kernels
