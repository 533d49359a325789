#include "sparse/chunk_tree.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <string>

#include "core/fp16.h"
#include "kv/box_f16.h"
#include "sparse/policy_memory.h"

namespace leoam::sparse {
namespace {

bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

// A grow reads the store's f32 abstracts in pieces of about this many chunks (whole blocks): the
// scratch of a grow over a long prompt stays that of one piece (32 chunks at 4 KV heads of 64:
// 64 KiB), not as large as the f32 boxes of the whole prompt.
constexpr int64_t kGrowPieceChunks = 32;
// The tree's arrays grow by a 256th past their need when they must grow: they hold at most that
// much slack (policy_memory.h; 0.02% of the KV), and a long context reallocates them every 256th
// of its length (a copy of its signs and boxes: 24 MiB a layer at Llama-2-7B's 32K, every 128
// decode steps, about 0.1 ms a step).
constexpr size_t kTreeSlack = 256;

// x is min * 2^k for some k >= 0.
bool is_pow2_multiple(int64_t x, int64_t min) { return x >= min && x % min == 0 && is_pow2(x / min); }

}  // namespace

Result<ChunkTree> ChunkTree::create(const ChunkTreeOptions& options, int store_chunk_tokens, int n_kv_heads,
                                    int head_dim) {
  const std::string sizes = "chunk tree sizes min " + std::to_string(options.min_tokens) + ", initial " +
                            std::to_string(options.initial_tokens) + ", max " +
                            std::to_string(options.max_tokens);
  if (store_chunk_tokens <= 0 || n_kv_heads <= 0 || head_dim <= 0) {
    return invalid_argument("chunk tree: store chunk of " + std::to_string(store_chunk_tokens) + " tokens, " +
                            std::to_string(n_kv_heads) + " kv heads of dim " + std::to_string(head_dim) +
                            ": all must be positive");
  }
  if (options.min_tokens <= 0 || options.min_tokens % store_chunk_tokens != 0) {
    return invalid_argument(sizes + ": min must be a positive multiple of the store's chunk of " +
                            std::to_string(store_chunk_tokens) + " tokens");
  }
  if (!is_pow2_multiple(options.initial_tokens, options.min_tokens) ||
      !is_pow2_multiple(options.max_tokens, options.min_tokens) || options.initial_tokens > options.max_tokens ||
      !is_pow2_multiple(options.block_tokens, options.min_tokens) || options.block_tokens > options.max_tokens) {
    return invalid_argument(sizes + ", block " + std::to_string(options.block_tokens) +
                            ": need min <= initial <= max and min <= block <= max, each min times a power of two");
  }
  return ChunkTree(options, store_chunk_tokens, n_kv_heads, head_dim);
}

ChunkTree::ChunkTree(const ChunkTreeOptions& options, int store_chunk_tokens, int n_kv_heads, int head_dim)
    : options_(options), store_chunk_tokens_(store_chunk_tokens) {
  layout_.n_kv_heads = n_kv_heads;
  layout_.head_dim = head_dim;
  layout_.chunk_stride = 2 * static_cast<int64_t>(n_kv_heads) * head_dim;
}

SignSlices ChunkTree::key_signs() const {
  if (!options_.key_signs) return {};
  return {signs_.data(), layout_.n_kv_heads, layout_.head_dim};
}

void ChunkTree::reset() {
  n_tokens_ = 0;
  edited_ = false;
  begins_.clear();
  edge_size_ = 0;
  history_.clear();
  signs_.clear();
  blocks_.clear();
}

Status ChunkTree::coarsen(int initial_tokens, int block_tokens) {
  if (edited_) return invalid_argument("chunk tree: cannot coarsen after a split or a merge");
  const auto allowed = [&](int now, int to) {
    return to >= now && to <= options_.max_tokens && is_pow2_multiple(to, options_.min_tokens);
  };
  if (!allowed(options_.initial_tokens, initial_tokens) || !allowed(options_.block_tokens, block_tokens)) {
    return invalid_argument("chunk tree: cannot coarsen leaves of " + std::to_string(options_.initial_tokens) +
                            " tokens and blocks of " + std::to_string(options_.block_tokens) + " to " +
                            std::to_string(initial_tokens) + " and " + std::to_string(block_tokens));
  }
  // Each coarse block's box is the union of the fine blocks' it covers (f16 min and max: exact).
  const int64_t stride = layout_.chunk_stride;
  const int64_t half = stride / 2;
  const int64_t fine = options_.block_tokens;
  const int64_t n_coarse_blocks = (n_tokens_ + block_tokens - 1) / block_tokens;
  HugeVector<uint16_t> blocks(static_cast<size_t>(n_coarse_blocks * stride));
  for (int64_t b = 0; b < n_coarse_blocks; ++b) {
    uint16_t* dst = blocks.data() + b * stride;
    std::copy_n(block_box(b * (block_tokens / fine)), stride, dst);
    for (int64_t u = b * (block_tokens / fine) + 1; u < n_blocks() && u * fine < (b + 1) * block_tokens; ++u) {
      const uint16_t* a = block_box(u);
      for (int64_t e = 0; e < half; ++e) {
        if (f16_to_f32(a[e]) < f16_to_f32(dst[e])) dst[e] = a[e];
      }
      for (int64_t e = half; e < stride; ++e) {
        if (f16_to_f32(a[e]) > f16_to_f32(dst[e])) dst[e] = a[e];
      }
    }
  }
  // The room the old blocks had past n_tokens_, kept in the coarse ones.
  const int64_t room_blocks = (static_cast<int64_t>(blocks_.capacity()) / stride * fine + block_tokens - 1) / block_tokens;
  grow_to(blocks, static_cast<size_t>(std::max(room_blocks, n_coarse_blocks) * stride), kTreeSlack);
  blocks.resize(static_cast<size_t>(n_coarse_blocks * stride));
  // The grown leaves are blocks of initial_tokens, in order (the edge one cut by n): fewer than now.
  const int64_t n_leaves = (n_tokens_ + initial_tokens - 1) / initial_tokens;
  scratch_bytes_ = capacity_bytes(blocks_);  // the boxes replaced
  for (int64_t l = 0; l < n_leaves; ++l) begins_[l] = begin_entry(l * initial_tokens);
  begins_.resize(static_cast<size_t>(n_leaves));
  edge_size_ = initial_tokens;
  history_.assign(static_cast<size_t>(n_leaves), LeafHistory{});
  blocks_ = std::move(blocks);
  options_.initial_tokens = initial_tokens;
  options_.block_tokens = block_tokens;
  return Status::ok();
}

void ChunkTree::reserve_ahead(int64_t n_more) {
  const int64_t n = n_tokens_ + n_more;
  const int64_t rows = (n + store_chunk_tokens_ - 1) / store_chunk_tokens_ * store_chunk_tokens_;  // whole store chunks
  const size_t n_signs = signs_.size();
  const size_t n_blocks = blocks_.size();
  if (options_.key_signs) {
    grow_to(signs_, static_cast<size_t>(sign_slice_words(rows, layout_.n_kv_heads, layout_.head_dim)), kTreeSlack);
  }
  grow_to(blocks_,
          static_cast<size_t>((n + options_.block_tokens - 1) / options_.block_tokens * layout_.chunk_stride),
          kTreeSlack);
  signs_.resize(n_signs);
  blocks_.resize(n_blocks);
}

TokenRange ChunkTree::leaf(int64_t i) const {
  return {leaf_begin(i), i + 1 < n_leaves() ? leaf_begin(i + 1) : n_tokens_};
}

int64_t ChunkTree::size_of(int64_t i) const {
  return i + 1 < n_leaves() ? leaf_begin(i + 1) - leaf_begin(i) : edge_size_;
}

bool ChunkTree::is_full(int64_t i) const { return leaf(i).size() == size_of(i); }

bool ChunkTree::can_split(int64_t i) const {
  return i >= 0 && i < n_leaves() && is_full(i) && size_of(i) > options_.min_tokens;
}

bool ChunkTree::can_merge(int64_t i) const {
  if (i < 0 || i + 1 >= n_leaves()) return false;
  const int64_t s = size_of(i);
  return size_of(i + 1) == s && is_full(i) && is_full(i + 1) && leaf_begin(i) % (2 * s) == 0 &&
         2 * s <= options_.max_tokens;
}

Status ChunkTree::grow(KvCatalog& catalog, int layer, int64_t n_tokens, AbstractSource source) {
  if (n_tokens < n_tokens_) {
    return invalid_argument("chunk tree of layer " + std::to_string(layer) + ": cannot shrink from " +
                            std::to_string(n_tokens_) + " to " + std::to_string(n_tokens) +
                            " tokens; reset the tree first");
  }
  if (n_tokens == n_tokens_) return Status::ok();
  if (n_tokens / options_.min_tokens > int64_t{std::numeric_limits<uint32_t>::max()}) {
    return invalid_argument("chunk tree of layer " + std::to_string(layer) + ": " + std::to_string(n_tokens) +
                            " tokens are more than its leaves can begin at (2^32 leaves of " +
                            std::to_string(options_.min_tokens) + " tokens)");
  }
  // The first leaf to (re)compute: the edge leaf when the old end cut it, else the first new one.
  int64_t first = n_leaves();
  if (first > 0 && !is_full(first - 1)) --first;
  const int64_t p0 = first < n_leaves() ? leaf_begin(first) : n_tokens_;

  // The begins of the new leaves after the old ones (the edge leaf keeps its begin, and its size
  // in the tree), in a scratch copy: the tree changes only once the read succeeded.
  std::vector<int64_t> begins;
  int64_t p = p0;
  int64_t edge_size = 0;  // the last leaf's size in the tree
  if (first < n_leaves()) {
    edge_size = edge_size_;
    p += edge_size;
  }
  while (p < n_tokens) {
    // initial_tokens, halved until aligned at p (p is a multiple of min_tokens, so this stops there).
    int64_t s = options_.initial_tokens;
    while (p % s != 0) s /= 2;
    begins.push_back(p);
    edge_size = s;
    p += s;
  }

  // The store chunks from the block that held the old end on (a block is a multiple of the
  // store's chunk), read in pieces of whole blocks: straight into the tree's block boxes, the f32
  // boxes and the rows' signs through scratches of one piece, the signs then sliced into the
  // tree's (a row read again sets the bits it had). On a read error the edge block's box and the
  // arrays' sizes go back to what they were.
  const int64_t block = options_.block_tokens;
  const int64_t stride = layout_.chunk_stride;
  const int64_t half = stride / 2;
  const int64_t chunks_per_block = block / store_chunk_tokens_;
  const int64_t b0 = n_tokens_ / block;
  const int64_t b1 = (n_tokens + block - 1) / block;
  const int64_t c1 = (n_tokens + store_chunk_tokens_ - 1) / store_chunk_tokens_;
  const int64_t blocks_per_piece = std::max<int64_t>(1, kGrowPieceChunks / chunks_per_block);
  const int64_t words_per_chunk = catalog.sign_words_per_chunk();
  const size_t old_signs = signs_.size();
  const size_t old_blocks = blocks_.size();
  const std::vector<uint16_t> edge_box(blocks_.begin() + std::min<int64_t>(b0 * stride, old_blocks),
                                       blocks_.begin() + std::min<int64_t>((b0 + 1) * stride, old_blocks));
  const int64_t piece_chunks = std::min(b1 - b0, blocks_per_piece) * chunks_per_block;
  if (options_.key_signs) {
    grow_to(signs_,
            static_cast<size_t>(sign_slice_words(c1 * store_chunk_tokens_, layout_.n_kv_heads, layout_.head_dim)),
            kTreeSlack);
  }
  grow_to(blocks_, static_cast<size_t>(b1 * stride), kTreeSlack);
  HugeVector<float> chunks(static_cast<size_t>(piece_chunks * stride));
  HugeVector<uint32_t> row_signs(options_.key_signs ? static_cast<size_t>(piece_chunks * words_per_chunk) : 0);
  std::vector<float> box(static_cast<size_t>(stride));
  for (int64_t pb = b0; pb < b1; pb += blocks_per_piece) {
    const int64_t pc0 = pb * chunks_per_block;
    const int64_t pc1 = std::min(c1, (pb + blocks_per_piece) * chunks_per_block);
    const Status read = catalog.load_abstracts(layer, pc0, pc1, chunks.data(), source,
                                               options_.key_signs ? row_signs.data() : nullptr);
    if (!read.is_ok()) {
      std::copy(edge_box.begin(), edge_box.end(), blocks_.begin() + b0 * stride);
      signs_.resize(old_signs);
      blocks_.resize(old_blocks);
      return read;
    }
    if (options_.key_signs) {
      // The rows before the old end have their bits already: slice from it on.
      const int64_t r0 = std::max(pc0 * store_chunk_tokens_, n_tokens_);
      const int64_t r1 = pc1 * store_chunk_tokens_;
      if (r1 > r0) {
        slice_signs(row_signs.data() + (r0 - pc0 * store_chunk_tokens_) * words_per_chunk / store_chunk_tokens_, r0,
                    r1 - r0, layout_.n_kv_heads, layout_.head_dim, signs_.data());
      }
    }
    // Block b's box: the union of its store chunks' boxes, rounded outward to f16.
    for (int64_t b = pb; b < std::min(b1, pb + blocks_per_piece); ++b) {
      std::fill(box.begin(), box.begin() + half, std::numeric_limits<float>::infinity());
      std::fill(box.begin() + half, box.end(), -std::numeric_limits<float>::infinity());
      for (int64_t c = b * chunks_per_block; c < std::min(c1, (b + 1) * chunks_per_block); ++c) {
        const float* a = chunks.data() + (c - pc0) * stride;
        for (int64_t e = 0; e < half; ++e) box[e] = std::min(box[e], a[e]);
        for (int64_t e = half; e < stride; ++e) box[e] = std::max(box[e], a[e]);
      }
      round_box_outward(box.data(), stride, blocks_.data() + b * stride);
    }
  }

  const size_t n_before = begins_.size();
  grow_to(history_, n_before + begins.size(), kTreeSlack);  // the edge keeps its history
  grow_to(begins_, n_before + begins.size(), kTreeSlack);
  for (size_t k = 0; k < begins.size(); ++k) begins_[n_before + k] = begin_entry(begins[k]);
  edge_size_ = edge_size;
  n_tokens_ = n_tokens;
  scratch_bytes_ = capacity_bytes(chunks) + capacity_bytes(row_signs) + capacity_bytes(box) + capacity_bytes(edge_box) +
                   capacity_bytes(begins);
  return Status::ok();
}

Status ChunkTree::split(int64_t i) {
  const int64_t one[] = {i};
  return edit(one, {});
}

void ChunkTree::merge(int64_t i) {
  // An invariant, not an input error: the policy checks can_merge first.
  assert(can_merge(i));
  edited_ = true;
  std::vector<LeafChange> change(static_cast<size_t>(n_leaves()), LeafChange::kKeep);
  change[i] = LeafChange::kMergeFirst;
  change[i + 1] = LeafChange::kMergeSecond;
  apply(change, 0);
}

Status ChunkTree::edit(std::span<const int64_t> splits, std::span<const int64_t> merges) {
  // Every IAKM step calls this, most with no change: then it touches nothing.
  if (splits.empty() && merges.empty()) return Status::ok();
  const auto where = [](int64_t i) { return "chunk tree: leaf " + std::to_string(i); };
  std::vector<LeafChange> change(static_cast<size_t>(n_leaves()), LeafChange::kKeep);
  for (const int64_t i : splits) {
    if (!can_split(i)) {
      return invalid_argument(where(i) + " cannot split (it must be full-sized and larger than " +
                              std::to_string(options_.min_tokens) + " tokens)");
    }
    if (change[i] != LeafChange::kKeep) return invalid_argument(where(i) + " changes twice");
    change[i] = LeafChange::kSplit;
  }
  for (const int64_t i : merges) {
    if (!can_merge(i)) {
      return invalid_argument(where(i) + " cannot merge with the next (they must be full-sized " +
                              "buddies whose parent is at most " + std::to_string(options_.max_tokens) + " tokens)");
    }
    if (change[i] != LeafChange::kKeep || change[i + 1] != LeafChange::kKeep) {
      return invalid_argument(where(i) + " or the next changes twice");
    }
    change[i] = LeafChange::kMergeFirst;
    change[i + 1] = LeafChange::kMergeSecond;
  }

  apply(change, static_cast<int64_t>(splits.size()));
  edited_ = true;
  scratch_bytes_ = capacity_bytes(change);
  return Status::ok();
}

uint64_t ChunkTree::memory_bytes() const {
  return capacity_bytes(begins_) + capacity_bytes(history_) + capacity_bytes(signs_) + capacity_bytes(blocks_);
}

void ChunkTree::move_leaf(int64_t from, int64_t to) {
  begins_[to] = begins_[from];
  history_[to] = history_[from];
}

void ChunkTree::apply(std::vector<LeafChange>& change, int64_t n_splits) {
  const int64_t n = n_leaves();
  // Merges, forward: leaf i lands at w <= i, and a merged pair at the first's place (its end is
  // the begin of the leaf that lands next).
  int64_t w = 0;
  for (int64_t i = 0; i < n; ++i, ++w) {
    if (w != i) {
      move_leaf(i, w);
      change[w] = change[i];
    }
    if (change[w] != LeafChange::kMergeFirst) continue;
    if (i + 1 == n - 1) edge_size_ *= 2;  // the pair was the last two leaves
    history_[w] = {};
    change[w] = LeafChange::kKeep;
    ++i;  // the second of the pair is gone
  }
  // Splits, backward: leaf r lands at d >= r, a split leaf (full) as its halves at d and d + 1.
  const int64_t n_after = w + n_splits;
  grow_to(begins_, static_cast<size_t>(n_after), kTreeSlack);
  grow_to(history_, static_cast<size_t>(n_after), kTreeSlack);
  int64_t d = n_after;
  int64_t end = n_tokens_;  // the end of leaf r: the begin leaf r + 1 had before it moved
  for (int64_t r = w - 1; r >= 0 && d > r + 1; --r) {
    const int64_t begin = leaf_begin(r);
    if (change[r] != LeafChange::kSplit) {
      move_leaf(r, --d);
    } else {
      d -= 2;
      const int64_t half = (end - begin) / 2;
      begins_[d] = begin_entry(begin);
      begins_[d + 1] = begin_entry(begin + half);
      history_[d] = history_[d + 1] = {};
      if (r == w - 1) edge_size_ = half;
    }
    end = begin;
  }
}

}  // namespace leoam::sparse
