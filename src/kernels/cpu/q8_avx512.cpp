// AVX-512 VNNI integer dots: Q8_0 rows with vpdpbusd over two 32-element blocks per 512-bit
// vector, up to 4 rows per pass, prefetching the next group of rows as the AVX2 kernels do
// (avx2_util.h); and Q4_0 / Q8_0 row groups (row_groups.h) with 256-bit vpdpbusd. Everything else
// on the AVX-512 path (the activation quantizers, Q4_0 rows, the K-quant dots, and all of these
// on a CPU with AVX-512 but no VNNI) is the AVX2 table: those run unchanged there. Q4_0 rows stay
// on AVX2: a 512-bit kernel's extra shuffles sit on the one port that does 512-bit work
// (docs/cpu.md#8-bit-dot-products). Compiled everywhere, tested only where the CPU has it.
// Two blocks A, B in one vector: bytes [A 0..31 | B 0..31], lanes of B 8-15. vpdpbusd takes
// unsigned x signed bytes, so w is biased to w + 128 and 128 * sum(x) subtracted in int32 (one
// vpdpbusd with ones, shared by all rows): exact, no saturation (vpdpbusd sums in 32 bits).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/kquant_panel.h"
#include "kernels/cpu/q8_activation.h"
#include "kernels/cpu/q8_kernels.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/row_groups.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12 reports the _mm512_undefined_* placeholders inside its own intrinsics as uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/cpu/avx2_util.h"  // prefetch_bytes, bcast4
#define LEOAM_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace leoam::kernels::detail {
namespace {

LEOAM_AVX512 inline float f16_scale(uint16_t h) { return _cvtsh_ss(h); }

// Two 32-byte halves into one vector: lo in bytes 0..31, hi in 32..63.
LEOAM_AVX512 inline __m512i load_2x256(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
}

// sum over 4-byte groups of u (unsigned) x s (signed) -> 16 int32 lanes.
LEOAM_AVX512 inline __m512i dot_u8s8(__m512i u, __m512i s) {
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
}

// One block with 256-bit AVX2 instructions: the odd block left at the end of a row.
LEOAM_AVX512 inline __m256i dot_block_q8_0(const BlockQ8_0& w, const __m256i xq) {
  const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wq), _mm256_sign_epi8(xq, wq)),
                           _mm256_set1_epi16(1));
}

LEOAM_AVX512 inline float hsum_tail(__m512 acc, __m256 tail) {
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(tail), _mm256_extractf128_ps(tail, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_movehdup_ps(t));
  return _mm512_reduce_add_ps(acc) + _mm_cvtss_f32(t);
}

template <int kRows>
LEOAM_AVX512 void dot_q8_0_rows(const uint8_t* rows, size_t row_bytes, const BlockQ8A32* x, int64_t n_blocks,
                                     float* out) {
  __m512 acc[kRows];
  __m256 tail[kRows];
  for (int r = 0; r < kRows; ++r) {
    acc[r] = _mm512_setzero_ps();
    tail[r] = _mm256_setzero_ps();
  }
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    const __m512i xq = load_2x256(x[b].qs, x[b + 1].qs);
    const __m512 dx = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(x[b].d), _mm512_set1_ps(x[b + 1].d));
    // 128 * (sum of each 4 activations), for the bias of w + 128.
    const __m512i xsum128 = _mm512_slli_epi32(dot_u8s8(_mm512_set1_epi8(1), xq), 7);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const BlockQ8_0* w = reinterpret_cast<const BlockQ8_0*>(rows + r * row_bytes) + b;
      prefetch_bytes<2 * sizeof(BlockQ8_0)>(reinterpret_cast<const uint8_t*>(w) + kRows * row_bytes);
      const __m512i wq = load_2x256(w[0].qs, w[1].qs);
      const __m512i u = _mm512_xor_si512(wq, _mm512_set1_epi8(static_cast<char>(0x80)));  // w + 128
      const __m512i isum = _mm512_sub_epi32(dot_u8s8(u, xq), xsum128);
      const __m512 dw = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(f16_scale(w[0].d)), _mm512_set1_ps(f16_scale(w[1].d)));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, dx), acc[r]);
    }
  }
  if (b < n_blocks) {
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    for (int r = 0; r < kRows; ++r) {
      const BlockQ8_0& w = reinterpret_cast<const BlockQ8_0*>(rows + r * row_bytes)[b];
      tail[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(dot_block_q8_0(w, xq)), _mm256_set1_ps(f16_scale(w.d) * x[b].d));
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = hsum_tail(acc[r], tail[r]);
}

void dot_q8_0_avx512(const void* rows, size_t row_bytes, int n_rows, const void* xq, int64_t n, float* out) {
  const auto* r = static_cast<const uint8_t*>(rows);
  const auto* x = static_cast<const BlockQ8A32*>(xq);
  const int64_t nb = n / kQK8_0;
  switch (n_rows) {
    case 4:
      return dot_q8_0_rows<4>(r, row_bytes, x, nb, out);
    case 3:
      return dot_q8_0_rows<3>(r, row_bytes, x, nb, out);
    case 2:
      return dot_q8_0_rows<2>(r, row_bytes, x, nb, out);
    default:
      return dot_q8_0_rows<1>(r, row_bytes, x, nb, out);
  }
}

// ---- Row groups (row_groups.h): 256-bit vpdpbusd, one int32 lane per row ----
//
// As the AVX2 group kernels (q8_avx2.cpp), with vpdpbusd for vpmaddubsw + vpmaddwd, kept to 256
// bits (512-bit instructions close port 1's vector unit on Intel cores). Q4_0: the high nibbles
// are taken in place (q & 0xF0 = 16 u), which saves a shift per chunk, and the lane sum is
// shifted back by 4 (exact: 16 divides it); the -8 x term through the activation sum s. Q8_0:
// w + 128 (unsigned) x x, and -128 sum_b d_w s_b after the loop.

LEOAM_AVX512 void dot_groups_q4_0_vnni(const void* groups, size_t row_bytes, int64_t n_groups, const void* xq,
                                       int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ8A32*>(xq);
  const int64_t n_blocks = n / kQK4_0;
  const size_t group_bytes = kRowGroup * row_bytes;
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* blk = static_cast<const uint8_t*>(groups) + static_cast<size_t>(g) * group_bytes;
    __m256 acc = _mm256_setzero_ps();
    __m256 corr = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b, blk += kRowGroup * sizeof(BlockQ4_0)) {
      prefetch_bytes<kRowGroup * sizeof(BlockQ4_0)>(blk + group_bytes);
      const int8_t* xb = x[b].qs;
      __m256i lo = _mm256_setzero_si256();
      __m256i hi16 = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * j));
        lo = _mm256_dpbusd_epi32(lo, _mm256_and_si256(q, _mm256_set1_epi8(0x0F)), bcast4(xb + 4 * j));
        hi16 = _mm256_dpbusd_epi32(hi16, _mm256_and_si256(q, _mm256_set1_epi8(static_cast<char>(0xF0))),
                                   bcast4(xb + 16 + 4 * j));
      }
      const __m256i s = _mm256_add_epi32(lo, _mm256_srai_epi32(hi16, 4));
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(x[b].d)), acc);
      corr = _mm256_fmadd_ps(dw, _mm256_set1_ps(x[b].s), corr);
    }
    _mm256_storeu_ps(out + g * kRowGroup, _mm256_fnmadd_ps(_mm256_set1_ps(8.0f), corr, acc));
  }
}

LEOAM_AVX512 void dot_groups_q8_0_vnni(const void* groups, size_t row_bytes, int64_t n_groups, const void* xq,
                                       int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ8A32*>(xq);
  const int64_t n_blocks = n / kQK8_0;
  const size_t group_bytes = kRowGroup * row_bytes;
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* blk = static_cast<const uint8_t*>(groups) + static_cast<size_t>(g) * group_bytes;
    __m256 acc = _mm256_setzero_ps();
    __m256 corr = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b, blk += kRowGroup * sizeof(BlockQ8_0)) {
      prefetch_bytes<kRowGroup * sizeof(BlockQ8_0)>(blk + group_bytes);
      const int8_t* xb = x[b].qs;
      __m256i s = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * j));
        s = _mm256_dpbusd_epi32(s, _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80))), bcast4(xb + 4 * j));
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(x[b].d)), acc);
      corr = _mm256_fmadd_ps(dw, _mm256_set1_ps(x[b].s), corr);
    }
    _mm256_storeu_ps(out + g * kRowGroup, _mm256_fnmadd_ps(_mm256_set1_ps(128.0f), corr, acc));
  }
}

// ---- Several tokens at once (prefill): two row groups x T tokens, 512-bit vpdpbusd ----
//
// The two groups' chunk j (row groups g and g + 1, or g twice for an odd last group) fill one
// 512-bit vector: lane i < 8 is row i of the first group, lane 8 + i row i of the second. The
// weights of a block are unpacked once into unsigned bytes (Q4_0 nibbles; Q8_0 as w + 128) and
// then reused by T tokens, each of which broadcasts its 4 matching activation bytes into a
// vpdpbusd: 8 of them per block and token carry 16 rows x 32 elements. The offset of the
// unsigned weights (8 or 128, times the activation sum s) comes off in the same fused step that
// applies the token's scale: acc += d_w (d_x isum - k s).
//
// 8 tokens at a time: 8 f32 accumulators, an int32 sum and 8 unpacked weight vectors in registers.
// A thread walks its group pairs in panels of kGemmPanelPairs; each panel meets every token, so
// the panel's weights stay in L2 while the activations stream past.

constexpr int kGemmTokens = 8;
constexpr int64_t kGemmPanelPairs = 4;
// The first token pass over a panel reads its weights from DRAM (a batched decode's few rows: the
// only pass), two streams a pair that the hardware prefetchers kept too short: it asks for each
// stream's block kGemmAheadBlocks ahead (2.3 KiB for Q4_0), a group's end running into the next.
// Later passes find the panel in L2 and ask for nothing. A batched decode's weights read faster
// so (32 blocks ahead no better), at a small cost where the rows are in L2 already
// (docs/cpu.md#8-bit-dot-products).
constexpr int64_t kGemmAheadBlocks = 16;

// The 8 f16 scales at a and the 8 at b, as 16 f32 lanes.
LEOAM_AVX512 inline __m512 group_scales(const uint8_t* a, const uint8_t* b) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
  return _mm512_cvtph_ps(h);
}

template <GgmlType kType>
struct GroupBlock;

template <>
struct GroupBlock<GgmlType::kQ4_0> {
  static constexpr size_t kBytes = kRowGroup * sizeof(BlockQ4_0);
  static constexpr float kOffset = 8.0f;
  // w[j] pairs with activation bytes 4j .. 4j + 3: chunk j's low nibbles are elements 4j.., its
  // high nibbles 16 + 4j.. (w[4 + j]). The loops here are unrolled so that w stays in registers:
  // GCC left them rolled, stored w to the stack and reloaded it each block, a batched decode's
  // weights and the 8-bit prefill both slower for it.
  LEOAM_AVX512 static void unpack(const uint8_t* a, const uint8_t* b, __m512i* w) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512i q = load_2x256(a + 16 + 32 * j, b + 16 + 32 * j);
      w[j] = _mm512_and_si512(q, m4);
      w[4 + j] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    }
  }
};

template <>
struct GroupBlock<GgmlType::kQ8_0> {
  static constexpr size_t kBytes = kRowGroup * sizeof(BlockQ8_0);
  static constexpr float kOffset = 128.0f;
  LEOAM_AVX512 static void unpack(const uint8_t* a, const uint8_t* b, __m512i* w) {
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) w[j] = _mm512_xor_si512(load_2x256(a + 16 + 32 * j, b + 16 + 32 * j), bias);
  }
};

// Rows of groups a and b (16 lanes) against the nt <= kGemmTokens tokens at xq; writes all 16
// lanes (pair) or the first 8. Fewer than kGemmTokens tokens (a batch's last few) repeat the last
// one in the spare slots, whose sums are not stored: each token's lanes see the same operations
// whatever nt, so its outputs are the same bits.
template <GgmlType kType, bool kAhead>
LEOAM_AVX512 void gemm_pair(const uint8_t* a, const uint8_t* b, bool pair, const uint8_t* xq, size_t xq_stride,
                            int nt, int64_t n_blocks, float* y, int64_t ldy) {
  using G = GroupBlock<kType>;
  constexpr int T = kGemmTokens;
  const BlockQ8A32* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = reinterpret_cast<const BlockQ8A32*>(xq + std::min(t, nt - 1) * xq_stride);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t blk = 0; blk < n_blocks; ++blk, a += G::kBytes, b += G::kBytes) {
    if constexpr (kAhead) {
      prefetch_bytes<G::kBytes>(a + kGemmAheadBlocks * G::kBytes);
      prefetch_bytes<G::kBytes>(b + kGemmAheadBlocks * G::kBytes);
    }
    __m512i w[8];
    G::unpack(a, b, w);
    const __m512 dw = group_scales(a, b);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const BlockQ8A32& x = xs[t][blk];
      __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        int32_t x4;
        std::memcpy(&x4, x.qs + 4 * j, 4);
        isum = _mm512_dpbusd_epi32(isum, w[j], _mm512_set1_epi32(x4));
      }
      const __m512 f = _mm512_fmsub_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(x.d), _mm512_set1_ps(G::kOffset * x.s));
      acc[t] = _mm512_fmadd_ps(f, dw, acc[t]);
    }
  }
  for (int t = 0; t < nt; ++t) _mm512_mask_storeu_ps(y + t * ldy, pair ? 0xFFFF : 0x00FF, acc[t]);
}

template <GgmlType kType>
LEOAM_AVX512 void gemm_groups_vnni(const void* groups, size_t row_bytes, int64_t n_groups, const void* xq,
                                   size_t xq_stride, int64_t n_tokens, int64_t n, float* y, int64_t ldy) {
  const auto* base = static_cast<const uint8_t*>(groups);
  const auto* x = static_cast<const uint8_t*>(xq);
  const size_t group_bytes = kRowGroup * row_bytes;
  const int64_t n_blocks = n / 32;
  const int64_t n_pairs = (n_groups + 1) / 2;
  for (int64_t p0 = 0; p0 < n_pairs; p0 += kGemmPanelPairs) {
    const int64_t p1 = std::min(n_pairs, p0 + kGemmPanelPairs);
    for (int64_t t = 0; t < n_tokens; t += kGemmTokens) {
      const int64_t nt = std::min<int64_t>(kGemmTokens, n_tokens - t);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t g = 2 * p;
        const bool pair = g + 1 < n_groups;
        const uint8_t* a = base + static_cast<size_t>(g) * group_bytes;
        const uint8_t* b = pair ? a + group_bytes : a;
        float* yp = y + t * ldy + g * kRowGroup;
        const uint8_t* xp = x + static_cast<size_t>(t) * xq_stride;
        if (t == 0) {
          gemm_pair<kType, true>(a, b, pair, xp, xq_stride, static_cast<int>(nt), n_blocks, yp, ldy);
        } else {
          gemm_pair<kType, false>(a, b, pair, xp, xq_stride, static_cast<int>(nt), n_blocks, yp, ldy);
        }
      }
    }
  }
}

// ---- Q4_K and Q6_K rows x several tokens (prefill): panels of 16 rows, 512-bit vpdpbusd ----
//
// Each panel of 16 rows is unpacked once (kquant_panel.h), then every token meets it: per
// sub-block, kpanel's 4-element chunks of all 16 rows against 4 broadcast activation bytes in
// vpdpbusd, the int32 sums times the sub-block's 16 scales (vpmulld) summed over the super-block
// in int32 (exact: below 2^31 for both types); the offsets (Q4_K's mins, Q6_K's -32) as
// vpdpwssd of the panel's int16 pairs with the activation's sums of 16. Then f32: d * dx times
// the scaled sum, minus dmin * dx times the offset sum. 4 tokens at a time: 3 accumulators each.
// Panels are packed in 64-byte lines: the kernel's vector loads are aligned.

constexpr int kKPanelTokens = 4;

struct alignas(64) Line64 {
  uint8_t bytes[64];
};

// The panel against the nt <= kKPanelTokens tokens at xq, spare slots as in gemm_pair; `mask`:
// the panel's rows that exist.
template <int kNSub>
LEOAM_AVX512 void kpanel_times_tokens(const uint8_t* panel, size_t super_bytes, int64_t n_super, const uint8_t* xq,
                                      size_t xq_stride, int nt, float* y, int64_t ldy, __mmask16 mask) {
  constexpr int T = kKPanelTokens;
  constexpr int kChunks = 64 / kNSub;  // 4-element chunks per sub-block
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_super; ++b) {
    const uint8_t* p = panel + b * super_bytes;
    const BlockQ8K* x[T];
    for (int t = 0; t < T; ++t) x[t] = reinterpret_cast<const BlockQ8K*>(xq + std::min(t, nt - 1) * xq_stride) + b;
    __m512i scaled[T], offset[T];
    for (int t = 0; t < T; ++t) scaled[t] = offset[t] = _mm512_setzero_si512();
    for (int s = 0; s < kNSub; ++s) {
      const __m512i sc = _mm512_load_si512(p + kPanelScales + 64 * s);
      const uint8_t* q = p + kpanel_quants(kNSub) + 64 * kChunks * s;
      __m512i w[kChunks];
      for (int c = 0; c < kChunks; ++c) w[c] = _mm512_load_si512(q + 64 * c);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        __m512i isum = _mm512_setzero_si512();
        for (int c = 0; c < kChunks; ++c) {
          int32_t x4;
          std::memcpy(&x4, x[t]->qs + 4 * (kChunks * s + c), 4);
          isum = _mm512_dpbusd_epi32(isum, w[c], _mm512_set1_epi32(x4));
        }
        scaled[t] = _mm512_add_epi32(scaled[t], _mm512_mullo_epi32(isum, sc));
      }
    }
    for (int k = 0; k < 8; ++k) {
      const __m512i mp = _mm512_load_si512(p + kPanelOffsetPairs + 64 * k);
      for (int t = 0; t < T; ++t) {
        int32_t sums;
        std::memcpy(&sums, x[t]->bsums + 2 * k, 4);
        offset[t] = _mm512_dpwssd_epi32(offset[t], mp, _mm512_set1_epi32(sums));
      }
    }
    const __m512 d = _mm512_load_ps(p + kPanelD);
    const __m512 dmin = _mm512_load_ps(p + kPanelDmin);
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(x[t]->d);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(scaled[t]), _mm512_mul_ps(d, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(offset[t]), _mm512_mul_ps(dmin, dx), acc[t]);
    }
  }
  for (int t = 0; t < nt; ++t) _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
}

template <GgmlType kType>
LEOAM_AVX512 void gemm_rows_kquant_vnni(const void* rows, size_t row_bytes, int64_t n_rows, const void* xq,
                                        size_t xq_stride, int64_t n_tokens, int64_t n, float* y, int64_t ldy) {
  constexpr int kNSub = kType == GgmlType::kQ4_K ? 8 : 16;
  const size_t super_bytes = kpanel_super_bytes(kType);
  const int64_t n_super = n / kQK_K;
  thread_local std::vector<Line64> panel;  // reused across calls
  panel.resize(static_cast<size_t>(n_super) * super_bytes / sizeof(Line64));
  const auto* x = static_cast<const uint8_t*>(xq);
  for (int64_t r0 = 0; r0 < n_rows; r0 += kPanelRows) {
    const int n_panel_rows = static_cast<int>(std::min<int64_t>(kPanelRows, n_rows - r0));
    kpanel_pack(kType, static_cast<const uint8_t*>(rows) + r0 * row_bytes, row_bytes, n_panel_rows, n, panel.data());
    const auto mask = static_cast<__mmask16>((1u << n_panel_rows) - 1);
    const auto* p = reinterpret_cast<const uint8_t*>(panel.data());
    for (int64_t t = 0; t < n_tokens; t += kKPanelTokens) {
      const auto nt = static_cast<int>(std::min<int64_t>(kKPanelTokens, n_tokens - t));
      kpanel_times_tokens<kNSub>(p, super_bytes, n_super, x + static_cast<size_t>(t) * xq_stride, xq_stride, nt,
                                 y + t * ldy + r0, ldy, mask);
    }
  }
}

Q8Kernels make_vnni_table() {
  Q8Kernels k = *q8_kernels_avx2();
  k.dot_q8_0 = dot_q8_0_avx512;
  k.dot_groups_q4_0 = dot_groups_q4_0_vnni;
  k.dot_groups_q8_0 = dot_groups_q8_0_vnni;
  k.gemm_groups_q4_0 = gemm_groups_vnni<GgmlType::kQ4_0>;
  k.gemm_groups_q8_0 = gemm_groups_vnni<GgmlType::kQ8_0>;
  k.gemm_rows_q4_k = gemm_rows_kquant_vnni<GgmlType::kQ4_K>;
  k.gemm_rows_q6_k = gemm_rows_kquant_vnni<GgmlType::kQ6_K>;
  return k;
}

}  // namespace

const Q8Kernels* q8_kernels_avx512() {
  if (!cpu_features().avx512_vnni) return q8_kernels_avx2();
  static const Q8Kernels with_vnni = make_vnni_table();
  return &with_vnni;
}

}  // namespace leoam::kernels::detail

#else  // not x86

namespace leoam::kernels::detail {
const Q8Kernels* q8_kernels_avx512() { return nullptr; }
}  // namespace leoam::kernels::detail

#endif
