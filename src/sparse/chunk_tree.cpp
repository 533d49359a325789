#include "sparse/chunk_tree.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <string>

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
      !is_pow2_multiple(options.max_tokens, options.min_tokens) || options.initial_tokens > options.max_tokens) {
    return invalid_argument(sizes + ": need min <= initial <= max, each min times a power of two");
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
  abstracts_.clear();
  signs_.clear();
  blocks_.clear();
}

Status ChunkTree::coarsen(int initial_tokens) {
  if (edited_) return invalid_argument("chunk tree: cannot coarsen after a split or a merge");
  if (initial_tokens < options_.initial_tokens || initial_tokens > options_.max_tokens ||
      !is_pow2_multiple(initial_tokens, options_.min_tokens)) {
    return invalid_argument("chunk tree: cannot coarsen leaves of " + std::to_string(options_.initial_tokens) +
                            " tokens to " + std::to_string(initial_tokens));
  }
  const int64_t stride = layout_.chunk_stride;
  const int64_t half = stride / 2;
  // dst = the union of the boxes of `src` (one a fine unit of `fine` tokens, aligned) that the
  // coarse unit [begin, end) covers.
  const auto unite = [&](const float* src, int64_t fine, TokenRange range, float* dst) {
    std::fill(dst, dst + half, std::numeric_limits<float>::infinity());
    std::fill(dst + half, dst + stride, -std::numeric_limits<float>::infinity());
    for (int64_t u = range.begin / fine; u * fine < range.end; ++u) {
      const float* a = src + u * stride;
      for (int64_t e = 0; e < half; ++e) dst[e] = std::min(dst[e], a[e]);
      for (int64_t e = half; e < stride; ++e) dst[e] = std::max(dst[e], a[e]);
    }
  };
  const int64_t fine = options_.initial_tokens;
  const int64_t n_coarse = (n_tokens_ + initial_tokens - 1) / initial_tokens;
  // The grown leaves are the fine blocks, in order (the edge one cut by n): leaf u holds block u.
  HugeVector<float> abstracts(static_cast<size_t>(n_coarse * stride));
  HugeVector<float> blocks(options_.key_signs ? abstracts.size() : 0);
  std::vector<TokenRange> leaves(static_cast<size_t>(n_coarse));
  for (int64_t b = 0; b < n_coarse; ++b) {
    leaves[b] = {b * initial_tokens, std::min((b + 1) * initial_tokens, n_tokens_)};
    unite(abstracts_.data(), fine, leaves[b], abstracts.data() + b * stride);
    if (options_.key_signs) unite(blocks_.data(), fine, leaves[b], blocks.data() + b * stride);
  }
  leaves_ = std::move(leaves);
  sizes_.assign(static_cast<size_t>(n_coarse), initial_tokens);
  history_.assign(static_cast<size_t>(n_coarse), LeafHistory{});
  abstracts_ = std::move(abstracts);
  blocks_ = std::move(blocks);
  options_.initial_tokens = initial_tokens;
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

void ChunkTree::union_store_chunks(const float* chunks, int64_t c0, TokenRange range, float* dst) const {
  const int64_t half = layout_.chunk_stride / 2;
  std::fill(dst, dst + half, std::numeric_limits<float>::infinity());
  std::fill(dst + half, dst + layout_.chunk_stride, -std::numeric_limits<float>::infinity());
  const int64_t i0 = range.begin / store_chunk_tokens_;
  const int64_t i1 = (range.end + store_chunk_tokens_ - 1) / store_chunk_tokens_;
  for (int64_t c = i0; c < i1; ++c) {
    const float* a = chunks + (c - c0) * layout_.chunk_stride;
    for (int64_t e = 0; e < half; ++e) dst[e] = std::min(dst[e], a[e]);
    for (int64_t e = half; e < layout_.chunk_stride; ++e) dst[e] = std::max(dst[e], a[e]);
  }
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

  // With key signs, from the block that holds p0 on (a block is a multiple of the store's chunk).
  const int64_t b0 = p0 / options_.initial_tokens;
  const int64_t b1 = (n_tokens + options_.initial_tokens - 1) / options_.initial_tokens;
  const int64_t c0 = (options_.key_signs ? b0 * options_.initial_tokens : p0) / store_chunk_tokens_;
  const int64_t c1 = (n_tokens + store_chunk_tokens_ - 1) / store_chunk_tokens_;
  HugeVector<float> chunks(static_cast<size_t>((c1 - c0) * layout_.chunk_stride));
  // The signs of chunks [c0, c1) land at their positions, in a scratch copy too.
  const int64_t words_per_chunk = catalog.sign_words_per_chunk();
  HugeVector<uint32_t> signs(options_.key_signs ? static_cast<size_t>((c1 - c0) * words_per_chunk) : 0);
  LEOAM_RETURN_IF_ERROR(
      catalog.load_abstracts(layer, c0, c1, chunks.data(), source, options_.key_signs ? signs.data() : nullptr));
  if (options_.key_signs) {
    grow_to(signs_, static_cast<size_t>(c0 * words_per_chunk) + signs.size());
    std::copy(signs.begin(), signs.end(), signs_.begin() + c0 * words_per_chunk);
    grow_to(blocks_, static_cast<size_t>(b1 * layout_.chunk_stride));
    for (int64_t b = b0; b < b1; ++b) {
      const TokenRange block{b * options_.initial_tokens, std::min((b + 1) * options_.initial_tokens, n_tokens)};
      union_store_chunks(chunks.data(), c0, block, blocks_.data() + b * layout_.chunk_stride);
    }
  }

  const auto n_after = static_cast<size_t>(first + static_cast<int64_t>(leaves.size()));
  grow_to(history_, n_after);  // the edge keeps its history
  grow_to(abstracts_, n_after * layout_.chunk_stride);
  for (size_t j = 0; j < leaves.size(); ++j) {
    union_store_chunks(chunks.data(), c0, leaves[j], abstracts_.data() + (first + j) * layout_.chunk_stride);
  }
  grow_to(leaves_, n_after);
  grow_to(sizes_, n_after);
  std::copy(leaves.begin(), leaves.end(), leaves_.begin() + first);
  std::copy(sizes.begin(), sizes.end(), sizes_.begin() + first);
  n_tokens_ = n_tokens;
  peak_bytes_ = std::max(peak_bytes_, memory_bytes() + capacity_bytes(chunks) + capacity_bytes(signs) +
                                          capacity_bytes(leaves) + capacity_bytes(sizes));
  return Status::ok();
}

Status ChunkTree::split(int64_t i, KvCatalog& catalog, int layer, AbstractSource source) {
  const int64_t one[] = {i};
  return edit(one, {}, catalog, layer, source);
}

void ChunkTree::merge(int64_t i) {
  // An invariant, not an input error: the policy checks can_merge first.
  assert(can_merge(i));
  edited_ = true;
  std::vector<LeafChange> change(static_cast<size_t>(n_leaves()), LeafChange::kKeep);
  change[i] = LeafChange::kMergeFirst;
  change[i + 1] = LeafChange::kMergeSecond;
  apply(change, {});
}

Status ChunkTree::edit(std::span<const int64_t> splits, std::span<const int64_t> merges, KvCatalog& catalog,
                       int layer, AbstractSource source) {
  // Every IAKM step calls this, most with no change: then it touches nothing.
  if (splits.empty() && merges.empty()) return Status::ok();
  const auto where = [layer](int64_t i) {
    return "chunk tree of layer " + std::to_string(layer) + ": leaf " + std::to_string(i);
  };
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

  const int64_t stride = layout_.chunk_stride;
  std::vector<float> halves(2 * splits.size() * static_cast<size_t>(stride));
  // Every split's store chunks, read in one call (one batch of disk reads for a store).
  std::vector<ChunkRun> runs;
  for (int64_t i = 0; i < n_leaves(); ++i) {
    if (change[i] == LeafChange::kSplit) runs.push_back({leaves_[i].begin / store_chunk_tokens_, leaves_[i].end / store_chunk_tokens_});
  }
  int64_t n_chunks = 0;
  for (const ChunkRun& r : runs) n_chunks += r.size();
  std::vector<float> chunks(static_cast<size_t>(n_chunks * stride));
  LEOAM_RETURN_IF_ERROR(catalog.load_abstract_runs(layer, runs, chunks.data(), source));
  float* dst = halves.data();
  const float* run_boxes = chunks.data();
  size_t k = 0;
  for (int64_t i = 0; i < n_leaves(); ++i) {
    if (change[i] != LeafChange::kSplit) continue;
    const TokenRange whole = leaves_[i];
    const int64_t mid = whole.begin + sizes_[i] / 2;
    union_store_chunks(run_boxes, runs[k].begin, {whole.begin, mid}, dst);
    union_store_chunks(run_boxes, runs[k].begin, {mid, whole.end}, dst + stride);
    run_boxes += runs[k].size() * stride;
    ++k;
    dst += 2 * stride;
  }
  apply(change, halves);
  edited_ = true;
  peak_bytes_ = std::max(peak_bytes_, memory_bytes() + capacity_bytes(halves) + capacity_bytes(chunks) +
                                          capacity_bytes(change));
  return Status::ok();
}

uint64_t ChunkTree::memory_bytes() const {
  return capacity_bytes(leaves_) + capacity_bytes(sizes_) + capacity_bytes(history_) + capacity_bytes(abstracts_) +
         capacity_bytes(signs_) + capacity_bytes(blocks_);
}

void ChunkTree::move_leaf(int64_t from, int64_t to) {
  leaves_[to] = leaves_[from];
  sizes_[to] = sizes_[from];
  history_[to] = history_[from];
  const int64_t stride = layout_.chunk_stride;
  std::copy_n(abstracts_.begin() + from * stride, stride, abstracts_.begin() + to * stride);
}

void ChunkTree::apply(std::vector<LeafChange>& change, const std::vector<float>& halves) {
  const int64_t n = n_leaves();
  const int64_t stride = layout_.chunk_stride;
  const int64_t half = stride / 2;
  // Merges, forward: leaf i lands at w <= i, and a merged pair at the first's place.
  int64_t w = 0;
  for (int64_t i = 0; i < n; ++i, ++w) {
    if (w != i) {
      move_leaf(i, w);
      change[w] = change[i];
    }
    if (change[w] != LeafChange::kMergeFirst) continue;
    float* a = abstracts_.data() + w * stride;
    const float* b = abstracts_.data() + (i + 1) * stride;
    for (int64_t e = 0; e < half; ++e) a[e] = std::min(a[e], b[e]);
    for (int64_t e = half; e < stride; ++e) a[e] = std::max(a[e], b[e]);
    leaves_[w].end = leaves_[i + 1].end;
    sizes_[w] *= 2;
    history_[w] = {};
    change[w] = LeafChange::kKeep;
    ++i;  // the second of the pair is gone
  }
  // Splits, backward: leaf r lands at d >= r, a split leaf as its halves at d and d + 1.
  const auto n_splits = static_cast<int64_t>(halves.size()) / (2 * stride);
  const int64_t n_after = w + n_splits;
  grow_to(leaves_, static_cast<size_t>(n_after));
  grow_to(sizes_, static_cast<size_t>(n_after));
  grow_to(history_, static_cast<size_t>(n_after));
  grow_to(abstracts_, static_cast<size_t>(n_after * stride));
  int64_t d = n_after;
  int64_t k = n_splits;
  for (int64_t r = w - 1; r >= 0 && d > r + 1; --r) {
    if (change[r] != LeafChange::kSplit) {
      move_leaf(r, --d);
      continue;
    }
    d -= 2;
    --k;
    const TokenRange whole = leaves_[r];
    const int64_t size = sizes_[r] / 2;
    leaves_[d] = {whole.begin, whole.begin + size};
    leaves_[d + 1] = {whole.begin + size, whole.end};
    sizes_[d] = sizes_[d + 1] = size;
    history_[d] = history_[d + 1] = {};
    std::copy_n(halves.begin() + 2 * k * stride, 2 * stride, abstracts_.begin() + d * stride);
  }
}

}  // namespace leoam::sparse
