// Tiled causal attention with an online softmax (see flash_attention.h for the two work splits).
// One step = one tile of up to kKeyTile keys x the query rows of one kv head:
//   K tile -> f32 (F16C)   s[i][j] = q_i . k_j        (q pre-scaled; 2 rows x 4 keys blocks)
//   mask s[i][j] for key position > query position
//   m_new = max(m, max_j s)  p = exp(s - m_new)  l = l e^(m - m_new) + sum p  acc *= e^(m - m_new)
//   V tile -> f32          acc[i] += sum_j p[i][j] v_j (4 rows x 16 dims blocks)
// Heads with at most kWalkRows query rows (MHA decode) take the same steps, but every head's slice
// of 8 keys before the next 8 (walk_tile), so that the reads come in address order. Scratch per
// thread is bounded by the tiles (~300 KiB for 8 kv heads of 128), whatever the number of keys.
// Why decode is bound by arithmetic, and the tiles and prefetch measured: docs/cpu.md#attention
#include "kernels/cpu/flash_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cpu_features.h"

#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/ops.h"

namespace leoam::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// 64 keys x 128 dims x 4 B = 32 KiB per f32 tile: K and V tiles together stay in L2 next to the
// accumulators, and 64 keys amortize the per-row softmax bookkeeping.
constexpr int64_t kKeyTile = 64;
// 64 query rows (tokens x group heads) per prefill item: each K/V tile is loaded once for 64
// rows; 64 x 128 x 4 B = 32 KiB of accumulators.
constexpr int kQueryRows = 64;
// 128 KiB: the f32 K and V tiles of all kv heads together when several heads share an item
// (decode of 9+ query rows per kv head); the tile converts whole KV rows in address order.
constexpr size_t kDecodeTileBytes = size_t{128} << 10;
// Up to 8 query rows per kv head (decode: one token, GQA group <= 8), f16 K/V are read in place,
// converted in registers as the dot products use them (faster than converted tiles), in tiles of
// 64 keys (faster than 32 with the KV hot in L2). Runs shorter than a tile are packed into one
// (PackWalk).
constexpr int kDirectF16Rows = 8;
constexpr int64_t kDirectKeyTile = 64;
static_assert(kKeyTile <= kDirectKeyTile, "a KeyPack holds any tile");
// Up to 2 query rows per kv head (decode with MHA, or GQA groups of 2), the arithmetic per KV
// byte is light enough that the hardware prefetcher, not software prefetch, keeps DRAM busy if
// the reads come in address order: a tile is walked in blocks of 8 keys, every head's slice of
// a block before the next block (scores, then the softmax fold per 64-key tile, then V the same
// way), which the L2 streamer follows, and the software prefetch, whose bursts stall the
// arithmetic, is left out: MHA decode from DRAM then reads near the machine's DRAM rate. Blocks
// of 8 beat 16, and beat 8-key tiles taken head by head. Groups of 4 lose this way: there
// software prefetch stays (docs/cpu.md#attention).
constexpr int kWalkRows = 2;
constexpr int kWalkKeys = 8;
// Software prefetch (KvPrefetch) runs this many cache lines of K, each with the same line of V,
// ahead of the rows being attended: 64 KiB of K and 64 of V, 32 rows of 8 kv heads of 128. It
// advances before each kPrefetchKeys keys of a head's scores and accumulation: faster than
// prefetching the next tile a slice per head, than fewer rows ahead, steps of 64 keys or every
// other line (docs/cpu.md#attention).
constexpr int64_t kPrefetchLines = 1024;
constexpr int kPrefetchKeys = 16;
// 512: fewest keys per thread before decode splits the KV; below it the merge and the wake-up
// cost more than the split saves.
constexpr int64_t kMinSplitKeys = 512;

// ---- tile kernels, one set per ISA ---------------------------------------------------------

using detail::TileKernels;

// The widest path the request, the CPU and head_dim allow: AVX-512 wants head_dim % 16 == 0,
// AVX2 head_dim % 8 == 0.
const TileKernels& pick_kernels(AttentionIsa isa, int head_dim) {
#ifdef LEOAM_HAVE_X86
  const bool want_avx512 = isa == AttentionIsa::kAuto || isa == AttentionIsa::kAvx512;
  if (want_avx512 && cpu_path() >= CpuPath::kAvx512 && head_dim % 16 == 0) return *detail::attention_tiles_avx512();
  if (isa != AttentionIsa::kScalar && cpu_path() >= CpuPath::kAvx2 && head_dim % 8 == 0) {
    return *detail::attention_tiles_avx2();
  }
#endif
  return *detail::attention_tiles_scalar();
}

// ---- the driver ----------------------------------------------------------------------------

// ln of the softmax denominator of a row whose state is (max m, sum l): -inf when it saw no key.
inline float log_sum_exp(float m, float l) { return l > 0.0f ? m + std::log(l) : kNegInf; }

// The query rows one item attends with, and their online-softmax state. Rows are ordered
// [kv head - h0][token - t0][group head].
struct Scratch {
  std::vector<float> q;    // [n_rows][hd], pre-scaled
  std::vector<float> acc;  // [n_rows][hd]
  std::vector<float> m, l; // [n_rows]
  std::vector<float> k_tile, v_tile;  // [kv head - h0][key tile][hd], f32
  std::vector<float> s;    // [rows per kv head][kKeyTile] ([kv head - h0][...] in walk_tile)
};

struct Work {
  std::span<const KvRun> runs;
  const FlashAttentionParams* p;
  const TileKernels* kernels;
  int group;
  const float* q;
};

// The online-softmax step of one kv head's nq rows (state rows base..) over a tile of nk keys:
// s[i * kKeyTile + j] are the scores, of which row i sees the first visible(its query position)
// (the rest are masked), then replaced by their weights p.
// fold_tile's `visible` for a tile of nk keys at consecutive positions from j0.
struct RunVisible {
  int64_t j0;
  int nk;
  int operator()(int64_t q_pos) const { return static_cast<int>(std::clamp<int64_t>(q_pos - j0 + 1, 0, nk)); }
};

// With a window, the keys a row sees are those between visible(q_pos - window) and
// visible(q_pos); the rest get weight 0. A softcap reshapes the seen scores first.
template <typename Visible>
void fold_tile(const Work& w, float* s, int nq, int nk, const Visible& visible, int64_t q_first, size_t base,
               Scratch& sc) {
  const int hd = w.p->head_dim;
  const float cap = w.p->softcap;
  for (int i = 0; i < nq; ++i) {
    float* si = s + i * kKeyTile;
    const int64_t q_pos = q_first + i / w.group;
    const int n_vis = visible(q_pos);
    const int n_old = w.p->window > 0 ? std::min(n_vis, visible(q_pos - w.p->window)) : 0;
    std::fill(si + n_vis, si + nk, 0.0f);
    std::fill(si, si + n_old, 0.0f);
    if (n_vis == n_old) continue;
    if (cap > 0.0f) {
      for (int j = n_old; j < n_vis; ++j) si[j] = softcap(si[j], cap);
    }
    w.kernels->fold_scores(si + n_old, n_vis - n_old, sc.m[base + i], sc.l[base + i],
                           sc.acc.data() + (base + i) * hd, hd);
  }
}

// One tile of nk keys from j0 (row0: its byte offset in the run) for kv heads [h0, h1) of nq
// rows each (at most kWalkRows), in address order: blocks of kWalkKeys keys, every head's
// slice of a block before the next; the scores of all heads [h - h0][row][kKeyTile] in sc.s,
// folded per row once the tile's are all in, then V the same way.
void walk_tile(const Work& w, const KvRun& run, size_t row0, int64_t j0, int nk, int h0, int h1, int nq,
               int64_t q_first, Scratch& sc) {
  const int hd = w.p->head_dim;
  const size_t head_bytes = static_cast<size_t>(hd) * (run.f16 ? 2 : 4);
  const size_t s_head = static_cast<size_t>(nq) * kKeyTile;
  const int ld = static_cast<int>(kKeyTile);
  const uint16_t* rows16[kWalkKeys];
  const float* rows32[kWalkKeys];
  // rows16 or rows32 (as the run's type) = kv head h's slices of keys [js, js + ns) of the tile.
  const auto point = [&](const void* base, int h, int js, int ns) {
    const char* src = static_cast<const char*>(base) + row0 + static_cast<size_t>(js) * run.row_stride_bytes +
                      static_cast<size_t>(h) * head_bytes;
    for (int j = 0; j < ns; ++j) {
      const char* row = src + j * run.row_stride_bytes;
      if (run.f16) {
        rows16[j] = reinterpret_cast<const uint16_t*>(row);
      } else {
        rows32[j] = reinterpret_cast<const float*>(row);
      }
    }
  };
  for (int js = 0; js < nk; js += kWalkKeys) {
    const int ns = std::min(kWalkKeys, nk - js);
    for (int h = h0; h < h1; ++h) {
      point(run.k, h, js, ns);
      const float* q = sc.q.data() + static_cast<size_t>(h - h0) * nq * hd;
      float* s = sc.s.data() + (h - h0) * s_head + js;
      if (run.f16) {
        w.kernels->scores_f16(q, nq, rows16, ns, hd, s, ld);
      } else {
        w.kernels->scores(q, nq, rows32, ns, hd, s, ld);
      }
    }
  }
  for (int h = h0; h < h1; ++h) {
    fold_tile(w, sc.s.data() + (h - h0) * s_head, nq, nk, RunVisible{j0, nk}, q_first, static_cast<size_t>(h - h0) * nq,
              sc);
  }
  for (int js = 0; js < nk; js += kWalkKeys) {
    const int ns = std::min(kWalkKeys, nk - js);
    for (int h = h0; h < h1; ++h) {
      point(run.v, h, js, ns);
      const float* p = sc.s.data() + (h - h0) * s_head + js;
      float* acc = sc.acc.data() + static_cast<size_t>(h - h0) * nq * hd;
      if (run.f16) {
        w.kernels->accumulate_f16(p, ld, nq, rows16, ns, hd, acc);
      } else {
        w.kernels->accumulate(p, ld, nq, rows32, ns, hd, acc);
      }
    }
  }
}

// The tiles attend() takes, in order: each run with keys in [key_lo, key_hi), in the order of
// the runs, cut into tiles of key_tile keys taken in two interleaved streams, from the first and
// the second half of the run's range (0, m, 1, m + 1, ...), so that a thread's DRAM reads run in
// two places at once, which decode from DRAM reads faster (four streams are no better). The
// online softmax takes tiles in any order.
class TileWalk {
 public:
  TileWalk(std::span<const KvRun> runs, int64_t key_lo, int64_t key_hi, int64_t key_tile)
      : runs_(runs), key_lo_(key_lo), key_hi_(key_hi), key_tile_(key_tile) {
    enter(0);
  }
  bool done() const { return ri_ >= runs_.size(); }
  const KvRun& run() const { return runs_[ri_]; }
  int64_t j0() const { return lo_ + (it_ % 2 == 0 ? it_ / 2 : m_ + it_ / 2) * key_tile_; }
  int nk() const { return static_cast<int>(std::min(key_tile_, hi_ - j0())); }
  void next() {
    if (++it_ == n_tiles_) enter(ri_ + 1);
  }

 private:
  // The first run at or after index r with keys in [key_lo, key_hi), at its first tile.
  void enter(size_t r) {
    for (ri_ = r; ri_ < runs_.size(); ++ri_) {
      lo_ = std::max(runs_[ri_].pos0, key_lo_);
      hi_ = std::min(runs_[ri_].pos0 + runs_[ri_].n_tokens, key_hi_);
      if (lo_ < hi_) break;
    }
    n_tiles_ = (hi_ - lo_ + key_tile_ - 1) / key_tile_;
    m_ = (n_tiles_ + 1) / 2;
    it_ = 0;
  }

  std::span<const KvRun> runs_;
  int64_t key_lo_, key_hi_, key_tile_;
  size_t ri_ = 0;
  int64_t lo_ = 0, hi_ = 0, n_tiles_ = 0, m_ = 0, it_ = 0;
};

// Up to kDirectKeyTile keys that attend() takes as one tile: where each key's row starts (K and
// V) and its position, in increasing positions, all f16 or all f32.
struct KeyPack {
  int n = 0;
  bool f16 = true;
  const char* k[kDirectKeyTile];
  const char* v[kDirectKeyTile];
  int64_t pos[kDirectKeyTile];
};

// The tiles of a TileWalk as KeyPacks. With `pack`, consecutive tiles join one pack while it
// has room for them whole, keeps one element type and its positions increase: a sparse step's
// runs are the store's chunks (leoam's 8 positions), and a tile each would fold the softmax and
// reload the accumulators every 8 keys. Without, a pack is one tile. Packs prefetched by head
// read faster than a tile a run in whole rows, over chunks of 8 or 64 and over one run alike.
class PackWalk {
 public:
  PackWalk(std::span<const KvRun> runs, int64_t key_lo, int64_t key_hi, int64_t key_tile, bool pack)
      : walk_(runs, key_lo, key_hi, key_tile), pack_(pack) {}

  // The next pack into `p`; false when the walk is done.
  bool next(KeyPack& p) {
    p.n = 0;
    while (!walk_.done()) {
      const KvRun& run = walk_.run();
      const int64_t j0 = walk_.j0();
      const int nk = walk_.nk();
      if (p.n > 0 && (!pack_ || p.n + nk > kDirectKeyTile || run.f16 != p.f16 || j0 <= p.pos[p.n - 1])) break;
      p.f16 = run.f16;
      const size_t row0 = static_cast<size_t>(j0 - run.pos0) * run.row_stride_bytes;
      for (int j = 0; j < nk; ++j) {
        const size_t at = row0 + static_cast<size_t>(j) * run.row_stride_bytes;
        p.k[p.n] = static_cast<const char*>(run.k) + at;
        p.v[p.n] = static_cast<const char*>(run.v) + at;
        p.pos[p.n] = j0 + j;
        ++p.n;
      }
      walk_.next();
    }
    return p.n > 0;
  }

 private:
  TileWalk walk_;
  bool pack_;
};

// Software prefetch of the K and V rows (the slices of kv heads [h0, h0 + n_heads)) that attend()
// will read, in its order, a cache line of K and the same line of V at a time: started
// kPrefetchLines ahead and advanced by as many lines as are attended, it keeps the DRAM reads a
// fixed distance ahead of the arithmetic across tiles and runs (a sparse step's runs are chunks
// of 8 to 64 positions from wherever the store holds them), spread over it in small steps.
// Within a tile, the lines come in the order attend() reads them: whole rows, all heads at once
// (tiles converted to f32), or with `in_place` (K and V read in place, attend_packs), one head's
// slice of every row of a pack (PackWalk) before the next head's: faster than whole rows, in
// which the first heads of a tile read the rows past the prefetch's reach (kPrefetchLines is half
// a tile) from DRAM. 2048 lines ahead or 512 are no faster, nor whole rows 2048 ahead.
class KvPrefetch {
 public:
  KvPrefetch(std::span<const KvRun> runs, int64_t key_lo, int64_t key_hi, int64_t key_tile, int h0, int n_heads,
             int hd, bool in_place)
      : walk_(runs, key_lo, key_hi, key_tile, in_place), h0_(h0), n_heads_(n_heads), hd_(hd), in_place_(in_place) {
    has_pack_ = walk_.next(pack_);
  }

  // Cache lines of K (and as many of V) in one row of f16 or f32 elements.
  int64_t row_lines(bool f16) const { return n_heads_ * slice_lines(f16); }

  // The lines of the rows of a tile of nk that fall to the head-th of its n_heads heads, advanced
  // while that head attends: the tile's rows shared out among the heads in order.
  int64_t head_lines(int nk, int head, bool f16) const {
    return (nk * (head + 1) / n_heads_ - nk * head / n_heads_) * row_lines(f16);
  }

  void advance(int64_t n_lines) {
    while (n_lines > 0 && has_pack_) {
      const int64_t lines = in_place_ ? slice_lines(pack_.f16) : row_lines(pack_.f16);
      const size_t at = static_cast<size_t>(in_place_ ? h0_ + head_ : h0_) * hd_ * (pack_.f16 ? 2 : 4);
      const int64_t n = std::min(n_lines, lines - line_);
      for (int64_t i = line_; i < line_ + n; ++i) {
        __builtin_prefetch(pack_.k[row_] + at + i * 64);
        __builtin_prefetch(pack_.v[row_] + at + i * 64);
      }
      n_lines -= n;
      line_ += n;
      if (line_ < lines) continue;
      line_ = 0;
      if (++row_ < pack_.n) continue;
      row_ = 0;
      if (in_place_ && ++head_ < n_heads_) continue;
      head_ = 0;
      has_pack_ = walk_.next(pack_);
    }
  }

 private:
  // Cache lines of K (and as many of V) in one head's slice of a row.
  int64_t slice_lines(bool f16) const { return (static_cast<int64_t>(hd_) * (f16 ? 2 : 4) + 63) / 64; }

  PackWalk walk_;
  KeyPack pack_;
  bool has_pack_ = false;
  int head_ = 0;  // in_place: in [0, n_heads)
  int row_ = 0;  // in the pack
  int64_t line_ = 0;  // in the row (in_place: in the head's slice)
  int h0_, n_heads_, hd_;
  bool in_place_;
};

// attend()'s decode path (at most kDirectF16Rows rows per kv head): K and V read in place, in
// packs of up to kDirectKeyTile keys (PackWalk), prefetched kPrefetchLines ahead by head.
void attend_packs(const Work& w, int nq, int h0, int h1, int64_t key_lo, int64_t key_hi, int64_t q_first,
                  Scratch& sc) {
  const int hd = w.p->head_dim;
  const int n_heads = h1 - h0;
  float* s = sc.s.data();
  const int ld = static_cast<int>(kKeyTile);
  KvPrefetch prefetch(w.runs, key_lo, key_hi, kDirectKeyTile, h0, n_heads, hd, true);
  prefetch.advance(kPrefetchLines);  // then in steps of kPrefetchKeys keys
  const float* k_rows[kDirectKeyTile];
  const float* v_rows[kDirectKeyTile];
  const uint16_t* k16_rows[kDirectKeyTile];
  const uint16_t* v16_rows[kDirectKeyTile];
  KeyPack pack;
  for (PackWalk packs(w.runs, key_lo, key_hi, kDirectKeyTile, true); packs.next(pack);) {
    const int nk = pack.n;
    const size_t elem_bytes = pack.f16 ? 2 : 4;
    // Row i sees the pack's keys at positions up to its query's, a prefix (positions increase).
    const auto visible = [&](int64_t q_pos) {
      return static_cast<int>(std::upper_bound(pack.pos, pack.pos + nk, q_pos) - pack.pos);
    };
    for (int h = h0; h < h1; ++h) {
      const size_t offset = static_cast<size_t>(h) * hd * elem_bytes;
      for (int j = 0; j < nk; ++j) {
        if (pack.f16) {
          k16_rows[j] = reinterpret_cast<const uint16_t*>(pack.k[j] + offset);
          v16_rows[j] = reinterpret_cast<const uint16_t*>(pack.v[j] + offset);
        } else {
          k_rows[j] = reinterpret_cast<const float*>(pack.k[j] + offset);
          v_rows[j] = reinterpret_cast<const float*>(pack.v[j] + offset);
        }
      }
      const size_t base = static_cast<size_t>(h - h0) * nq;
      float* acc = sc.acc.data() + base * hd;
      // This head's slices of the pack's rows are prefetched while it attends.
      const int64_t head_lines = prefetch.head_lines(nk, h - h0, pack.f16);
      const int n_steps = 2 * ((nk + kPrefetchKeys - 1) / kPrefetchKeys);
      int steps = 0;
      const auto prefetch_step = [&] {
        prefetch.advance(head_lines * (steps + 1) / n_steps - head_lines * steps / n_steps);
        ++steps;
      };
      for (int j = 0; j < nk; j += kPrefetchKeys) {
        prefetch_step();
        const int n = std::min(kPrefetchKeys, nk - j);
        if (pack.f16) {
          w.kernels->scores_f16(sc.q.data() + base * hd, nq, k16_rows + j, n, hd, s + j, ld);
        } else {
          w.kernels->scores(sc.q.data() + base * hd, nq, k_rows + j, n, hd, s + j, ld);
        }
      }
      fold_tile(w, s, nq, nk, visible, q_first, base, sc);
      for (int j = 0; j < nk; j += kPrefetchKeys) {
        prefetch_step();
        const int n = std::min(kPrefetchKeys, nk - j);
        if (pack.f16) {
          w.kernels->accumulate_f16(s + j, ld, nq, v16_rows + j, n, hd, acc);
        } else {
          w.kernels->accumulate(s + j, ld, nq, v_rows + j, n, hd, acc);
        }
      }
    }
  }
}

// Attends queries [t0, t0 + nt) x kv heads [h0, h1) over key positions [key_lo, key_hi), leaving
// the unnormalized state in `sc`.
void attend(const Work& w, int64_t t0, int64_t nt, int h0, int h1, int64_t key_lo, int64_t key_hi, Scratch& sc) {
  const FlashAttentionParams& p = *w.p;
  const int hd = p.head_dim;
  const int nq = static_cast<int>(nt) * w.group;  // rows per kv head
  const size_t n_rows = static_cast<size_t>(h1 - h0) * nq;
  sc.q.resize(n_rows * hd);
  sc.acc.assign(n_rows * hd, 0.0f);
  sc.m.assign(n_rows, kNegInf);
  sc.l.assign(n_rows, 0.0f);
  const int n_heads = h1 - h0;
  const bool direct = nq <= kDirectF16Rows;  // K and V read in place, in packs (PackWalk)
  const bool walk = nq <= kWalkRows;  // in address order, without software prefetch (kWalkRows)
  sc.s.resize(static_cast<size_t>(nq) * kKeyTile * (walk ? n_heads : 1));
  for (int h = h0; h < h1; ++h) {
    for (int64_t t = 0; t < nt; ++t) {
      for (int g = 0; g < w.group; ++g) {
        const float* src = w.q + ((t0 + t) * p.n_head + h * w.group + g) * hd;
        float* dst = sc.q.data() + (((h - h0) * nt + t) * w.group + g) * hd;
        for (int d = 0; d < hd; ++d) dst[d] = src[d] * p.scale;
      }
    }
  }
  const int64_t q_first = p.pos0 + t0;
  key_hi = std::min(key_hi, q_first + nt);  // nothing past the last query is visible
  float* s = sc.s.data();
  const int ld = static_cast<int>(kKeyTile);
  if (walk) {
    for (TileWalk tiles(w.runs, key_lo, key_hi, kDirectKeyTile); !tiles.done(); tiles.next()) {
      const KvRun& run = tiles.run();
      walk_tile(w, run, static_cast<size_t>(tiles.j0() - run.pos0) * run.row_stride_bytes, tiles.j0(), tiles.nk(),
                h0, h1, nq, q_first, sc);
    }
    return;
  }
  if (direct) {
    attend_packs(w, nq, h0, h1, key_lo, key_hi, q_first, sc);
    return;
  }
  // Prefill (many query rows): f16 K and V converted to f32 a tile at a time, f32 read in place.
  const int64_t key_tile =
      n_heads == 1 ? kKeyTile
                   : std::clamp<int64_t>(static_cast<int64_t>(kDecodeTileBytes / (2 * sizeof(float) * n_heads * hd)), 8,
                                         kKeyTile);
  const size_t head_stride = static_cast<size_t>(key_tile) * hd;  // floats between heads in a tile
  sc.k_tile.resize(head_stride * n_heads);
  sc.v_tile.resize(head_stride * n_heads);
  KvPrefetch prefetch(w.runs, key_lo, key_hi, key_tile, h0, n_heads, hd, false);
  // One tile ahead; further, the lines it brings would push the converted tiles out of L1 (12%
  // slower prefill attention at kPrefetchLines).
  if (!w.runs.empty()) prefetch.advance(key_tile * prefetch.row_lines(w.runs.front().f16));
  const float* k_rows[kKeyTile];
  const float* v_rows[kKeyTile];
  for (TileWalk tiles(w.runs, key_lo, key_hi, key_tile); !tiles.done(); tiles.next()) {
    const KvRun& run = tiles.run();
    const int64_t j0 = tiles.j0();
    const int nk = tiles.nk();
    const size_t elem_bytes = run.f16 ? 2 : 4;
    const size_t row0 = static_cast<size_t>(j0 - run.pos0) * run.row_stride_bytes;
    if (run.f16) {
      const size_t offset = row0 + static_cast<size_t>(h0) * hd * elem_bytes;
      w.kernels->load_f16(static_cast<const char*>(run.k) + offset, run.row_stride_bytes, nk, n_heads, hd,
                          sc.k_tile.data(), head_stride);
      w.kernels->load_f16(static_cast<const char*>(run.v) + offset, run.row_stride_bytes, nk, n_heads, hd,
                          sc.v_tile.data(), head_stride);
    }
    for (int h = h0; h < h1; ++h) {
      const size_t offset = row0 + static_cast<size_t>(h) * hd * elem_bytes;
      const char* k_src = static_cast<const char*>(run.k) + offset;
      const char* v_src = static_cast<const char*>(run.v) + offset;
      const size_t base = static_cast<size_t>(h - h0) * nq;
      float* acc = sc.acc.data() + base * hd;
      if (run.f16) {
        const size_t tile0 = (h - h0) * head_stride;
        for (int j = 0; j < nk; ++j) {
          k_rows[j] = sc.k_tile.data() + tile0 + j * hd;
          v_rows[j] = sc.v_tile.data() + tile0 + j * hd;
        }
      } else {
        for (int j = 0; j < nk; ++j) {
          k_rows[j] = reinterpret_cast<const float*>(k_src + j * run.row_stride_bytes);
          v_rows[j] = reinterpret_cast<const float*>(v_src + j * run.row_stride_bytes);
        }
      }
      // This head's share of the tile's rows is prefetched while it attends.
      prefetch.advance(prefetch.head_lines(nk, h - h0, run.f16));
      w.kernels->scores(sc.q.data() + base * hd, nq, k_rows, nk, hd, s, ld);
      fold_tile(w, s, nq, nk, RunVisible{j0, nk}, q_first, base, sc);
      w.kernels->accumulate(s, ld, nq, v_rows, nk, hd, acc);
    }
  }
}

// Writes the normalized state of rows [h0, h1) x [t0, t0 + nt) to out (and lse, unless null).
void write_out(const Work& w, int64_t t0, int64_t nt, int h0, int h1, const Scratch& sc, float* out, float* lse) {
  const int hd = w.p->head_dim;
  for (int h = h0; h < h1; ++h) {
    for (int64_t t = 0; t < nt; ++t) {
      for (int g = 0; g < w.group; ++g) {
        const size_t row = static_cast<size_t>(((h - h0) * nt + t) * w.group + g);
        const float inv_l = sc.l[row] > 0.0f ? 1.0f / sc.l[row] : 0.0f;
        const float* acc = sc.acc.data() + row * hd;
        const int64_t out_row = (t0 + t) * w.p->n_head + h * w.group + g;
        float* o = out + out_row * hd;
        for (int d = 0; d < hd; ++d) o[d] = acc[d] * inv_l;
        if (lse != nullptr) lse[out_row] = log_sum_exp(sc.m[row], sc.l[row]);
      }
    }
  }
}

thread_local Scratch t_scratch;

// Decode: queries [0, n_tokens) (one block) x all kv heads; the keys cut into n_splits ranges.
void flash_decode(const Work& w, int64_t n_keys, int n_splits, float* out, float* lse, ThreadPool& pool) {
  const FlashAttentionParams& p = *w.p;
  const int hd = p.head_dim;
  if (n_splits == 1) {
    attend(w, 0, p.n_tokens, 0, p.n_head_kv, 0, n_keys, t_scratch);
    write_out(w, 0, p.n_tokens, 0, p.n_head_kv, t_scratch, out, lse);
    return;
  }
  // Partials per split: rows in Scratch order, each (m, l, acc[hd]).
  const size_t n_rows = static_cast<size_t>(p.n_tokens) * p.n_head;
  const size_t row_floats = static_cast<size_t>(hd) + 2;
  std::vector<float> partial(static_cast<size_t>(n_splits) * n_rows * row_floats);
  pool.parallel_for(n_splits, [&](int64_t begin, int64_t end, int) {
    for (int64_t sp = begin; sp < end; ++sp) {
      const int64_t lo = n_keys * sp / n_splits;
      const int64_t hi = n_keys * (sp + 1) / n_splits;
      Scratch& sc = t_scratch;
      attend(w, 0, p.n_tokens, 0, p.n_head_kv, lo, hi, sc);
      float* dst = partial.data() + static_cast<size_t>(sp) * n_rows * row_floats;
      for (size_t r = 0; r < n_rows; ++r) {
        dst[r * row_floats] = sc.m[r];
        dst[r * row_floats + 1] = sc.l[r];
        std::memcpy(dst + r * row_floats + 2, sc.acc.data() + r * hd, hd * sizeof(float));
      }
    }
  });
  // Merge; rows are [kv head][token][group head], out is [token][head].
  const int64_t nt = p.n_tokens;
  std::vector<float> acc(hd);
  for (size_t r = 0; r < n_rows; ++r) {
    float m = kNegInf;
    for (int sp = 0; sp < n_splits; ++sp) m = std::max(m, partial[(sp * n_rows + r) * row_floats]);
    float l = 0.0f;
    std::fill(acc.begin(), acc.end(), 0.0f);
    if (m != kNegInf) {
      for (int sp = 0; sp < n_splits; ++sp) {
        const float* src = partial.data() + (sp * n_rows + r) * row_floats;
        if (src[1] == 0.0f) continue;
        const float c = std::exp(src[0] - m);
        l += src[1] * c;
        for (int d = 0; d < hd; ++d) acc[d] += c * src[2 + d];
      }
    }
    const int64_t h = static_cast<int64_t>(r) / (nt * w.group);
    const int64_t t = static_cast<int64_t>(r) / w.group % nt;
    const int64_t g = static_cast<int64_t>(r) % w.group;
    const int64_t out_row = t * p.n_head + h * w.group + g;
    float* o = out + out_row * hd;
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < hd; ++d) o[d] = acc[d] * inv_l;
    if (lse != nullptr) lse[out_row] = log_sum_exp(m, l);
  }
}

// Prefill: items (query block, kv head), the most expensive (latest) blocks handed out first.
void flash_prefill(const Work& w, int64_t block_tokens, float* out, float* lse, ThreadPool& pool) {
  const FlashAttentionParams& p = *w.p;
  const int64_t n_blocks = (p.n_tokens + block_tokens - 1) / block_tokens;
  const int64_t n_items = n_blocks * p.n_head_kv;
  std::atomic<int64_t> next{0};
  pool.parallel_for(pool.n_threads(), [&](int64_t, int64_t, int) {
    for (int64_t item = next++; item < n_items; item = next++) {
      const int64_t block = n_blocks - 1 - item / p.n_head_kv;
      const int h = static_cast<int>(item % p.n_head_kv);
      const int64_t t0 = block * block_tokens;
      const int64_t nt = std::min(block_tokens, p.n_tokens - t0);
      attend(w, t0, nt, h, h + 1, 0, std::numeric_limits<int64_t>::max(), t_scratch);
      write_out(w, t0, nt, h, h + 1, t_scratch, out, lse);
    }
  });
}

}  // namespace

void flash_attention(std::span<const KvRun> runs, const FlashAttentionParams& params, const float* q, float* out,
                     float* lse, ThreadPool& pool, const FlashAttentionOptions& options) {
  if (params.n_tokens <= 0) return;
  const int group = params.n_head / params.n_head_kv;
  const Work w{runs, &params, &pick_kernels(options.isa, params.head_dim), group, q};
  const int64_t block_tokens = std::max(1, kQueryRows / group);
  // Keys the last query sees that the view holds.
  int64_t n_keys = 0;
  for (const KvRun& run : runs) n_keys = std::max(n_keys, run.pos0 + run.n_tokens);
  n_keys = std::min(n_keys, params.pos0 + params.n_tokens);
  if (params.n_tokens <= block_tokens) {
    int n_splits = options.n_kv_splits;
    if (n_splits <= 0) {
      const int n_threads = pool.n_threads();
      n_splits = n_keys >= kMinSplitKeys * n_threads ? n_threads : 1;
      // Short KV, several threads: split by kv head instead (flash_prefill's items).
      if (n_splits == 1 && n_threads > 1 && params.n_head_kv > 1) {
        flash_prefill(w, block_tokens, out, lse, pool);
        return;
      }
    }
    flash_decode(w, n_keys, static_cast<int>(std::min<int64_t>(n_splits, std::max<int64_t>(n_keys, 1))), out, lse,
                 pool);
    return;
  }
  flash_prefill(w, block_tokens, out, lse, pool);
}

}  // namespace leoam::kernels
