// Internal to kernels/cpu: the tile kernels flash_attention.cpp's driver runs one step of the
// online softmax with (scores of a K tile, the fold into the running max and sum, the p.v
// accumulation), one table per instruction set, each in its own file: flash_attention_scalar.cpp,
// flash_attention_avx2.cpp and flash_attention_avx512.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace leoam::kernels::detail {

struct TileKernels {
  // dst[h * head_stride + j * hd + d] = f32 of element h * hd + d of the f16 row at
  // src + j * stride_bytes, for j < n, h < n_heads, d < hd: rows are read in order, whole.
  void (*load_f16)(const void* src, size_t stride_bytes, int64_t n, int n_heads, int hd, float* dst,
                   size_t head_stride);
  // s[i * ld + j] = q[i] . k[j] for i < nq, j < nk; q: [nq][hd].
  void (*scores)(const float* q, int nq, const float* const* k, int nk, int hd, float* s, int ld);
  // The same reading f16 rows directly (decode: few query rows, so converting each K element as
  // it is used costs less than a converted tile's extra store and reload).
  void (*scores_f16)(const float* q, int nq, const uint16_t* const* k, int nk, int hd, float* s, int ld);
  // Folds the scores s[0, n) (n > 0) of one query row into its online-softmax state (max m,
  // sum l, acc[hd]): m_new = max(m, max_j s[j]), s[j] = e^(s[j] - m_new), l and acc rescaled by
  // e^(m - m_new), l += sum_j s[j].
  void (*fold_scores)(float* s, int n, float& m, float& l, float* acc, int hd);
  // acc[i][d] += sum_j p[i * ld + j] v[j][d] for i < nq, j < nk.
  void (*accumulate)(const float* p, int ld, int nq, const float* const* v, int nk, int hd, float* acc);
  void (*accumulate_f16)(const float* p, int ld, int nq, const uint16_t* const* v, int nk, int hd, float* acc);
};

// The scalar table: any CPU, any head_dim.
const TileKernels* attention_tiles_scalar();

// The AVX2 (with FMA and F16C) table, for head_dim a multiple of 8; nullptr where the build has no
// such path (not x86). Calling it on a CPU without AVX2 is undefined: dispatch through cpu_path().
const TileKernels* attention_tiles_avx2();

// The AVX-512 (F, BW, VL, DQ) table, for head_dim a multiple of 16 and ld >= 8; nullptr where
// the build has no such path (not x86). Calling it on a CPU without cpu_features().avx512 is
// undefined: dispatch through cpu_path() only.
const TileKernels* attention_tiles_avx512();

}  // namespace leoam::kernels::detail
