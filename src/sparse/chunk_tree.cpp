#include "sparse/chunk_tree.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <string>

#include "core/fp16.h"
#include "sparse/box_f16.h"
#include "sparse/policy_memory.h"

namespace leoam::sparse {
namespace {

bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

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

SignSketch ChunkTree::key_signs() const {
  if (!options_.key_signs) return {};
  return SignSketch::of(signs_.data(), 0, layout_.n_kv_heads, layout_.head_dim);
}

void ChunkTree::reset() {
  n_tokens_ = 0;
  edited_ = false;
  leaves_.clear();
  sizes_.clear();
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
  // The grown leaves are blocks of initial_tokens, in order (the edge one cut by n).
  const int64_t n_leaves = (n_tokens_ + initial_tokens - 1) / initial_tokens;
  std::vector<TokenRange> leaves(static_cast<size_t>(n_leaves));
  for (int64_t l = 0; l < n_leaves; ++l) leaves[l] = {l * initial_tokens, std::min((l + 1) * initial_tokens, n_tokens_)};
  leaves_ = std::move(leaves);
  sizes_.assign(static_cast<size_t>(n_leaves), initial_tokens);
  history_.assign(static_cast<size_t>(n_leaves), LeafHistory{});
  blocks_ = std::move(blocks);
  options_.initial_tokens = initial_tokens;
  options_.block_tokens = block_tokens;
  return Status::ok();
}

bool ChunkTree::is_full(int64_t i) const { return leaves_[i].size() == sizes_[i]; }

bool ChunkTree::can_split(int64_t i) const {
  return i >= 0 && i < n_leaves() && is_full(i) && sizes_[i] > options_.min_tokens;
}

bool ChunkTree::can_merge(int64_t i) const {
  if (i < 0 || i + 1 >= n_leaves()) return false;
  const int64_t s = sizes_[i];
  return sizes_[i + 1] == s && is_full(i) && is_full(i + 1) && leaves_[i].begin % (2 * s) == 0 &&
         2 * s <= options_.max_tokens;
}

Status ChunkTree::grow(KvCatalog& catalog, int layer, int64_t n_tokens, AbstractSource source) {
  if (n_tokens < n_tokens_) {
    return invalid_argument("chunk tree of layer " + std::to_string(layer) + ": cannot shrink from " +
                            std::to_string(n_tokens_) + " to " + std::to_string(n_tokens) +
                            " tokens; reset the tree first");
  }
  if (n_tokens == n_tokens_) return Status::ok();
  // The first leaf to (re)compute: the edge leaf when the old end cut it, else the first new one.
  int64_t first = n_leaves();
  if (first > 0 && !is_full(first - 1)) --first;
  const int64_t p0 = first < n_leaves() ? leaves_[first].begin : n_tokens_;

  // The new leaves from `first` on, in a scratch copy: the tree changes only once the read succeeded.
  std::vector<TokenRange> leaves;
  std::vector<int64_t> sizes;
  int64_t p = p0;
  if (first < n_leaves()) {
    leaves.push_back({p, std::min(p + sizes_[first], n_tokens)});
    sizes.push_back(sizes_[first]);
    p += sizes_[first];
  }
  while (p < n_tokens) {
    // initial_tokens, halved until aligned at p (p is a multiple of min_tokens, so this stops there).
    int64_t s = options_.initial_tokens;
    while (p % s != 0) s /= 2;
    leaves.push_back({p, std::min(p + s, n_tokens)});
    sizes.push_back(s);
    p += s;
  }

  // The store chunks from the block that held the old end on (a block is a multiple of the store's chunk).
  const int64_t block = options_.block_tokens;
  const int64_t b0 = n_tokens_ / block;
  const int64_t b1 = (n_tokens + block - 1) / block;
  const int64_t c0 = b0 * block / store_chunk_tokens_;
  const int64_t c1 = (n_tokens + store_chunk_tokens_ - 1) / store_chunk_tokens_;
  const int64_t stride = layout_.chunk_stride;
  HugeVector<float> chunks(static_cast<size_t>((c1 - c0) * stride));
  // The signs of chunks [c0, c1) land at their positions, in a scratch copy too.
  const int64_t words_per_chunk = catalog.sign_words_per_chunk();
  HugeVector<uint32_t> signs(options_.key_signs ? static_cast<size_t>((c1 - c0) * words_per_chunk) : 0);
  LEOAM_RETURN_IF_ERROR(
      catalog.load_abstracts(layer, c0, c1, chunks.data(), source, options_.key_signs ? signs.data() : nullptr));
  if (options_.key_signs) {
    grow_to(signs_, static_cast<size_t>(c0 * words_per_chunk) + signs.size());
    std::copy(signs.begin(), signs.end(), signs_.begin() + c0 * words_per_chunk);
  }
  // Block b's box: the union of its store chunks' boxes, rounded outward to f16.
  grow_to(blocks_, static_cast<size_t>(b1 * stride));
  std::vector<float> box(static_cast<size_t>(stride));
  const int64_t half = stride / 2;
  const int64_t chunks_per_block = block / store_chunk_tokens_;
  for (int64_t b = b0; b < b1; ++b) {
    std::fill(box.begin(), box.begin() + half, std::numeric_limits<float>::infinity());
    std::fill(box.begin() + half, box.end(), -std::numeric_limits<float>::infinity());
    for (int64_t c = b * chunks_per_block; c < std::min(c1, (b + 1) * chunks_per_block); ++c) {
      const float* a = chunks.data() + (c - c0) * stride;
      for (int64_t e = 0; e < half; ++e) box[e] = std::min(box[e], a[e]);
      for (int64_t e = half; e < stride; ++e) box[e] = std::max(box[e], a[e]);
    }
    round_box_outward(box.data(), stride, blocks_.data() + b * stride);
  }

  const auto n_after = static_cast<size_t>(first + static_cast<int64_t>(leaves.size()));
  grow_to(history_, n_after);  // the edge keeps its history
  grow_to(leaves_, n_after);
  grow_to(sizes_, n_after);
  std::copy(leaves.begin(), leaves.end(), leaves_.begin() + first);
  std::copy(sizes.begin(), sizes.end(), sizes_.begin() + first);
  n_tokens_ = n_tokens;
  peak_bytes_ = std::max(peak_bytes_, memory_bytes() + capacity_bytes(chunks) + capacity_bytes(signs) +
                                          capacity_bytes(leaves) + capacity_bytes(sizes) + capacity_bytes(box));
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
  peak_bytes_ = std::max(peak_bytes_, memory_bytes() + capacity_bytes(change));
  return Status::ok();
}

uint64_t ChunkTree::memory_bytes() const {
  return capacity_bytes(leaves_) + capacity_bytes(sizes_) + capacity_bytes(history_) + capacity_bytes(signs_) +
         capacity_bytes(blocks_);
}

void ChunkTree::move_leaf(int64_t from, int64_t to) {
  leaves_[to] = leaves_[from];
  sizes_[to] = sizes_[from];
  history_[to] = history_[from];
}

void ChunkTree::apply(std::vector<LeafChange>& change, int64_t n_splits) {
  const int64_t n = n_leaves();
  // Merges, forward: leaf i lands at w <= i, and a merged pair at the first's place.
  int64_t w = 0;
  for (int64_t i = 0; i < n; ++i, ++w) {
    if (w != i) {
      move_leaf(i, w);
      change[w] = change[i];
    }
    if (change[w] != LeafChange::kMergeFirst) continue;
    leaves_[w].end = leaves_[i + 1].end;
    sizes_[w] *= 2;
    history_[w] = {};
    change[w] = LeafChange::kKeep;
    ++i;  // the second of the pair is gone
  }
  // Splits, backward: leaf r lands at d >= r, a split leaf as its halves at d and d + 1.
  const int64_t n_after = w + n_splits;
  grow_to(leaves_, static_cast<size_t>(n_after));
  grow_to(sizes_, static_cast<size_t>(n_after));
  grow_to(history_, static_cast<size_t>(n_after));
  int64_t d = n_after;
  for (int64_t r = w - 1; r >= 0 && d > r + 1; --r) {
    if (change[r] != LeafChange::kSplit) {
      move_leaf(r, --d);
      continue;
    }
    d -= 2;
    const TokenRange whole = leaves_[r];
    const int64_t size = sizes_[r] / 2;
    leaves_[d] = {whole.begin, whole.begin + size};
    leaves_[d + 1] = {whole.begin + size, whole.end};
    sizes_[d] = sizes_[d + 1] = size;
    history_[d] = history_[d + 1] = {};
  }
}

}  // namespace leoam::sparse
