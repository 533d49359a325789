// ChunkTree: IAKM's adaptive chunks for one layer, a buddy tree over positions [0, n_tokens)
// whose leaves are the chunks a policy scores and selects.
//
//   sizes: min_tokens * 2^k, each node aligned to its size; the last leaf may be cut short by n
//
//   [0 ............................ 128) [128 ............ 192) [192 ... n)
//   [0 ........ 64) [64 ........... 128)                           ^ the growing edge
//   [0..32) [32..64)    <- split: a hot leaf becomes its two halves (down to min_tokens)
//                       <- merge: two cold buddies become their parent (up to max_tokens)
//
// Every leaf keeps the abstract of its positions ([2][n_kv_heads][head_dim]: per-channel min and
// max of the keys, chunk_layout.h), the union of the abstracts of the store chunks it covers.
// Leaves are unions of whole store chunks, so min_tokens is a multiple of the store's chunk.
// A merge needs no I/O (the union of two abstracts); a split and the growth of the edge read the
// store chunks' abstracts through KvCatalog::load_abstracts, one call each (LKA: from the disk
// tier's abstract file for disk chunks, without their KV).
//
// Leaf abstracts lie contiguously in leaf order, so chunk_bounds scores every leaf in one call.
// With ChunkTreeOptions::key_signs the tree also keeps the key sign sketch of every position
// (kv/chunk_layout.h), read with the abstracts as the edge grows, and the boxes of the fixed
// blocks of initial_tokens (aligned) that the leaves start as: the rows' signs against the
// tighter of those boxes give the sign-refined bounds of sign_bound.h. A merge widens the
// leaf's box, which would loosen the bound of every row in it; the block boxes keep it as tight
// as it was before the merge.
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
  bool key_signs = false;   // keep the key sign sketch (the catalog must have_key_signs())
};

// What the policy remembers of a leaf between steps (its split/merge rule reads and writes it).
struct LeafHistory {
  int hot_steps = 0;   // consecutive steps the leaf was selected
  int cold_steps = 0;  // consecutive steps it was not
};

class ChunkTree {
 public:
  // Fails when the sizes are not min <= initial <= max, powers-of-two multiples of min, or min is
  // not a multiple of store_chunk_tokens.
  static Result<ChunkTree> create(const ChunkTreeOptions& options, int store_chunk_tokens, int n_kv_heads,
                                  int head_dim);

  // Covers [0, n_tokens) (n_tokens >= this->n_tokens(); a smaller n fails: reset the tree then).
  // The leaf that held the old end is refreshed (its keys have grown) and may grow to its aligned
  // size; new positions get leaves of initial_tokens, aligned, smaller only where n cuts the last.
  // Store-chunk abstracts come from `catalog` for `layer`, one load_abstracts call.
  [[nodiscard]] Status grow(KvCatalog& catalog, int layer, int64_t n_tokens, AbstractSource source);
  // Forgets every leaf (a new sequence).
  void reset();
  // Leaves and blocks of initial_tokens become those of `initial_tokens` (larger, min * 2^k, at
  // most max): the tree grown with it from the start, exactly (unions of the abstracts, no I/O;
  // histories fresh). For a tree built while the KV was written (the prompt), when the budget of
  // the first selection allows larger leaves than the prompt's early budget did. Fails on a size
  // that is not allowed, or after a split or merge (the leaves are no longer the initial ones).
  [[nodiscard]] Status coarsen(int initial_tokens);
  // Whether a split or merge has changed the leaves since they were grown.
  bool edited() const { return edited_; }

  int64_t n_tokens() const { return n_tokens_; }
  int64_t n_leaves() const { return static_cast<int64_t>(leaves_.size()); }
  TokenRange leaf(int64_t i) const { return leaves_[i]; }
  LeafHistory& history(int64_t i) { return history_[i]; }
  // The abstracts of leaves [i, n_leaves()), contiguous: chunk_bounds(..., abstracts(i), count, layout(), ...).
  const float* abstracts(int64_t i) const { return abstracts_.data() + i * layout_.chunk_stride; }
  const BoundLayout& layout() const { return layout_; }
  // The key sign sketch of positions [0, n_tokens()), when kept (key_signs; words null otherwise).
  SignSketch key_signs() const;
  // With key_signs: the box of block b, positions [b * initial_tokens, (b + 1) * initial_tokens)
  // cut by n_tokens() ([2][n_kv_heads][head_dim], as leaf abstracts).
  const float* block_box(int64_t b) const { return blocks_.data() + b * layout_.chunk_stride; }
  const ChunkTreeOptions& options() const { return options_; }
  // The bytes the tree's arrays take now, and the most it held at once so far, the abstracts and
  // signs read by a grow or a split included.
  uint64_t memory_bytes() const;
  uint64_t peak_bytes() const { return peak_bytes_; }
  int store_chunk_tokens() const { return store_chunk_tokens_; }

  // Leaf i is full-sized (not cut by n) and larger than min_tokens.
  bool can_split(int64_t i) const;
  // Leaf i becomes its two halves (fresh histories); leaves after it move up by one. Reads the
  // halves' store-chunk abstracts in one call. Fails when !can_split(i) or on a read error (the
  // tree is then unchanged).
  [[nodiscard]] Status split(int64_t i, KvCatalog& catalog, int layer, AbstractSource source);
  // Leaves i and i + 1 are buddies: same full size, the pair aligned to twice it, and twice it
  // <= max_tokens.
  bool can_merge(int64_t i) const;
  // Leaves i and i + 1 become their parent (the union of their abstracts, a fresh history); no I/O.
  // Requires can_merge(i).
  void merge(int64_t i);
  // Many splits and merges at once, each as split() and merge() would do it, by the leaf indices
  // of the tree before the edit (merges[k] merges leaves merges[k] and merges[k] + 1); no leaf
  // may change twice. Every split's abstracts are read (one call a split) before anything
  // changes, so on a read error, or a change that is not allowed, the tree is unchanged. One
  // pass over the leaves however many changes: one at a time, each split or merge moves every
  // leaf after it, which costs a step of IAKM O(leaves x changes) (hundreds of merges over
  // thousands of leaves when a long context's cold leaves merge).
  [[nodiscard]] Status edit(std::span<const int64_t> splits, std::span<const int64_t> merges, KvCatalog& catalog,
                            int layer, AbstractSource source);

 private:
  ChunkTree(const ChunkTreeOptions& options, int store_chunk_tokens, int n_kv_heads, int head_dim);
  // Leaf i spans its whole size (the last leaf may be cut short by n_tokens_).
  bool is_full(int64_t i) const;
  // dst = the union of the abstracts of the store chunks that `range` covers; `chunks` holds the
  // abstracts of store chunks c0, c0 + 1, ... as load_abstracts laid them out.
  void union_store_chunks(const float* chunks, int64_t c0, TokenRange range, float* dst) const;
  // What edit() does to each leaf.
  enum class LeafChange : uint8_t { kKeep, kSplit, kMergeFirst, kMergeSecond };
  // Applies `change` ([n_leaves()], checked), in place: merges in a forward pass that compacts,
  // then splits in a backward pass that spreads; `halves` holds the abstracts of the split
  // leaves' halves, two a split, in leaf order.
  void apply(std::vector<LeafChange>& change, const std::vector<float>& halves);
  // Leaf `from` moves to index `to` (its range, size, history and abstract).
  void move_leaf(int64_t from, int64_t to);

  ChunkTreeOptions options_;
  int store_chunk_tokens_;
  BoundLayout layout_;
  int64_t n_tokens_ = 0;
  std::vector<TokenRange> leaves_;   // in order, covering [0, n_tokens_) exactly once
  std::vector<int64_t> sizes_;        // per leaf: its size in the tree, min_tokens * 2^k, aligned to
                                      // it (> leaf(i).size() only for the last leaf, cut by n)
  std::vector<LeafHistory> history_;  // per leaf
  // The per-leaf and per-position arrays below grow to MiBs (2 KiB a leaf at 4 KV heads of 64):
  // on huge pages (core/huge_pages.h), the first step's grow over a long prompt faults them in
  // 2 MiB at a time.
  template <class T>
  using HugeVector = std::vector<T, HugePageAllocator<T>>;
  HugeVector<float> abstracts_;      // [n_leaves][2][n_kv_heads][head_dim]
  HugeVector<uint32_t> signs_;       // key_signs: [positions, whole store chunks][n_kv_heads][sign_words_per_head]
  HugeVector<float> blocks_;         // key_signs: [blocks][2][n_kv_heads][head_dim]
  uint64_t peak_bytes_ = 0;
  bool edited_ = false;
};

}  // namespace leoam::sparse
