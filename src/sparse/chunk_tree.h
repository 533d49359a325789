// ChunkTree: IAKM's adaptive chunks for one layer, a buddy tree over positions [0, n_tokens) whose
// leaves are the chunks a policy scores and selects. Sizes min_tokens * 2^k, each node aligned to
// its size; the last leaf may be cut short by n.
//   [0 ........ 64) [64 ........... 128) [128 ... 192) [192 ... n)   the growing edge at n
//   [0..32) [32..64)   <- split: a hot leaf becomes its two halves (down to min_tokens)
//                      <- merge: two cold buddies become their parent (up to max_tokens)
// What the tree knows of the keys is kept per aligned block of block_tokens, not per leaf: an f16
// box (box_f16.h) and, with key_signs, every row's key signs, sliced by channel. A leaf is bounded
// through the blocks it meets (sign_bound.h), so neither a split nor a merge reads or computes a
// box. What it holds and why: docs/selection.md#chunk-trees
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/huge_pages.h"
#include "core/status.h"
#include "kv/kv_cache.h"  // TokenRange
#include "kv/kv_catalog.h"
#include "sparse/chunk_bound.h"
#include "sparse/sign_bound.h"

namespace leoam::sparse {

struct ChunkTreeOptions {
  int min_tokens = 8;       // leaves never split below this
  int max_tokens = 512;     // merges stop at this
  int initial_tokens = 64;  // new leaves start at this size (min_tokens * 2^k, <= max_tokens)
  int block_tokens = 64;    // one box per aligned block of this many positions (min_tokens * 2^k, <= max_tokens)
  bool key_signs = false;   // keep the key sign sketch (the catalog must have_key_signs())
};

// What the policy remembers of a leaf between steps (its split/merge rule reads and writes it):
// two bytes a leaf, as the counts only meet thresholds of a few steps.
struct LeafHistory {
  uint8_t hot_steps = 0;   // consecutive steps the leaf was selected, up to 255
  uint8_t cold_steps = 0;  // consecutive steps it was not, up to 255

  // One more step, in which the leaf was selected or not.
  void note(bool selected) {
    uint8_t& streak = selected ? hot_steps : cold_steps;
    streak = static_cast<uint8_t>(streak + (streak < 255));
    (selected ? cold_steps : hot_steps) = 0;
  }
};

class ChunkTree {
 public:
  // Fails when the sizes are not min <= initial <= max and min <= block <= max, powers-of-two
  // multiples of min, or min is not a multiple of store_chunk_tokens.
  static Result<ChunkTree> create(const ChunkTreeOptions& options, int store_chunk_tokens, int n_kv_heads,
                                  int head_dim);

  // Covers [0, n_tokens) (n_tokens >= this->n_tokens(); a smaller n fails: reset the tree then).
  // The leaf that held the old end may grow to its aligned size, and the block that held it is
  // refreshed (its keys have grown); new positions get leaves of initial_tokens, aligned, smaller
  // only where n cuts the last. Store-chunk abstracts come from `catalog` for `layer`, one
  // load_abstracts call from the old end's block on.
  [[nodiscard]] Status grow(KvCatalog& catalog, int layer, int64_t n_tokens, AbstractSource source);
  // Makes room in the per-position and per-block arrays for n_more positions past n_tokens(), so
  // that the grows that add them reallocate nothing (a prompt's end: the first decode steps then
  // copy no array; coarsen keeps the room).
  void reserve_ahead(int64_t n_more);
  // Forgets every leaf (a new sequence).
  void reset();
  // Leaves become those of `initial_tokens` and blocks those of `block_tokens` (no smaller than
  // now, min * 2^k, at most max): the tree grown with them from the start, exactly (unions of the
  // boxes, no I/O; histories fresh). For a tree built while the KV was written (the prompt), when
  // the budget of the first selection allows larger leaves than the prompt's early budget did.
  // Fails on a size that is not allowed, or after a split or merge (the leaves are no longer the
  // initial ones).
  [[nodiscard]] Status coarsen(int initial_tokens, int block_tokens);
  // Whether a split or merge has changed the leaves since they were grown.
  bool edited() const { return edited_; }

  int64_t n_tokens() const { return n_tokens_; }
  int64_t n_leaves() const { return static_cast<int64_t>(begins_.size()); }
  TokenRange leaf(int64_t i) const;
  LeafHistory& history(int64_t i) { return history_[i]; }
  // layout().chunk_stride: the f16 values from one block's box to the next.
  const BoundLayout& layout() const { return layout_; }
  // The key sign sketch of positions [0, n_tokens()), sliced by channel (sign_bound.h), when kept
  // (key_signs; words null otherwise).
  SignSlices key_signs() const;
  int64_t n_blocks() const { return (n_tokens_ + options_.block_tokens - 1) / options_.block_tokens; }
  // The box of block b, positions [b * block_tokens, (b + 1) * block_tokens) cut by n_tokens():
  // [2][n_kv_heads][head_dim] f16, rounded outward. Blocks' boxes lie contiguously.
  const uint16_t* block_box(int64_t b) const { return blocks_.data() + b * layout_.chunk_stride; }
  const ChunkTreeOptions& options() const { return options_; }
  // The bytes the tree's arrays take now, and the scratch its last grow or edit held besides them
  // (a piece of the store's abstracts, the new leaves).
  uint64_t memory_bytes() const;
  uint64_t scratch_bytes() const { return scratch_bytes_; }
  int store_chunk_tokens() const { return store_chunk_tokens_; }

  // Leaf i is full-sized (not cut by n) and larger than min_tokens.
  bool can_split(int64_t i) const;
  // Leaf i becomes its two halves (fresh histories); leaves after it move up by one. No I/O.
  // Fails when !can_split(i) (the tree is then unchanged).
  [[nodiscard]] Status split(int64_t i);
  // Leaves i and i + 1 are buddies: same full size, the pair aligned to twice it, and twice it
  // <= max_tokens.
  bool can_merge(int64_t i) const;
  // Leaves i and i + 1 become their parent (a fresh history); no I/O. Requires can_merge(i).
  void merge(int64_t i);
  // Many splits and merges at once, each as split() and merge() would do it, by the leaf indices
  // of the tree before the edit (merges[k] merges leaves merges[k] and merges[k] + 1); no leaf
  // may change twice. On a change that is not allowed the tree is unchanged. One pass over the
  // leaves however many changes: one at a time, each split or merge moves every leaf after it,
  // which costs a step of IAKM O(leaves x changes) (hundreds of merges over thousands of leaves
  // when a long context's cold leaves merge).
  [[nodiscard]] Status edit(std::span<const int64_t> splits, std::span<const int64_t> merges);

 private:
  ChunkTree(const ChunkTreeOptions& options, int store_chunk_tokens, int n_kv_heads, int head_dim);
  // Leaf i's size in the tree.
  int64_t size_of(int64_t i) const;
  // Leaf i spans its whole size (the last leaf may be cut short by n_tokens_).
  bool is_full(int64_t i) const;
  // What edit() does to each leaf.
  enum class LeafChange : uint8_t { kKeep, kSplit, kMergeFirst, kMergeSecond };
  // Applies `change` ([n_leaves()], checked, n_splits of them kSplit), in place: merges in a
  // forward pass that compacts, then splits in a backward pass that spreads.
  void apply(std::vector<LeafChange>& change, int64_t n_splits);
  // Leaf `from` moves to index `to` (its begin and history).
  void move_leaf(int64_t from, int64_t to);
  // Leaf i's first position, and the begins_ entry of a leaf's first position p.
  int64_t leaf_begin(int64_t i) const { return int64_t{begins_[i]} * options_.min_tokens; }
  uint32_t begin_entry(int64_t p) const { return static_cast<uint32_t>(p / options_.min_tokens); }

  ChunkTreeOptions options_;
  int store_chunk_tokens_;
  BoundLayout layout_;
  int64_t n_tokens_ = 0;
  // Leaf i is [leaf_begin(i), leaf_begin(i + 1)), the last [leaf_begin(last), n_tokens_): its size
  // in the tree (min_tokens * 2^k, aligned to it) is its length, but for the last leaf, cut by n,
  // edge_size_. begins_ holds the begins in units of min_tokens (every begin is a multiple): four
  // bytes a leaf.
  std::vector<uint32_t> begins_;
  int64_t edge_size_ = 0;
  std::vector<LeafHistory> history_;  // per leaf
  // The per-position and per-block arrays below grow to MiBs over a long context: on huge pages
  // (core/huge_pages.h), the first step's grow over a long prompt faults them in 2 MiB at a time.
  template <class T>
  using HugeVector = std::vector<T, HugePageAllocator<T>>;
  HugeVector<uint64_t> signs_;       // key_signs: SignSlices of [0, whole store chunks)
  HugeVector<uint16_t> blocks_;      // [n_blocks][2][n_kv_heads][head_dim] f16, rounded outward
  uint64_t scratch_bytes_ = 0;
  bool edited_ = false;
};

}  // namespace leoam::sparse
