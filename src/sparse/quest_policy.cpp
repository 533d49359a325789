// quest: Quest's query-aware chunk selection. Every query head ranks the far chunks by the upper
// bound of its kv head's abstracts, normalized to its own best chunk; a chunk scores its best
// rank over the heads, so a chunk that one head needs is kept even when the others prefer
// different chunks.
//
// Quest keeps its pages' min/max metadata beside the KV, in accelerator memory, and reads only the
// pages it picks. So does this policy: each store chunk's box, once the chunk is whole, is read
// once from the catalog (from disk for a disk chunk) and kept in f16, rounded outward (box_f16.h),
// counted in memory() and the policy memory budget as leoam's trees are. A far chunk still being
// filled is read again at each step.
#include <algorithm>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "kv/box_f16.h"
#include "sparse/chunk_ranking.h"
#include "sparse/policy_memory.h"
#include "sparse/selection_policy.h"

namespace leoam::sparse {
namespace {

constexpr int64_t kDecodeChunks = 32;  // boxes kept, read or decoded to f32 a block at a time

class QuestPolicy final : public SelectionPolicy {
 public:
  explicit QuestPolicy(const PolicyOptions& options)
      : source_(options.lka ? AbstractSource::kLka : AbstractSource::kKv) {}

  std::string_view name() const override { return "quest"; }
  PolicyMemory memory() const override { return {kept_bytes(), peak_bytes_}; }
  void reset() override { layers_.clear(); }

  // The boxes it keeps change no later selection: its forecast is its selection.
  Result<std::optional<Selection>> predict(const SelectionQuery& query, KvCatalog& catalog) override {
    LEOAM_ASSIGN_OR_RETURN(Selection s, select(query, catalog));
    return std::optional<Selection>(std::move(s));
  }

  Result<Selection> select(const SelectionQuery& query, KvCatalog& catalog) override {
    LEOAM_RETURN_IF_ERROR(check_query(query, catalog));
    Selection s;
    if (query.far.size() <= 0 || query.budget_tokens <= 0) return s;
    const int chunk_tokens = catalog.chunk_tokens();
    const ChunkSpan far = chunks_overlapping(query.far, chunk_tokens);
    const BoundLayout layout{catalog.catalog_kv_heads(), catalog.catalog_head_dim(),
                             2 * static_cast<int64_t>(catalog.catalog_kv_heads()) * catalog.catalog_head_dim()};
    if (layers_.size() <= static_cast<size_t>(query.layer)) layers_.resize(static_cast<size_t>(query.layer) + 1);
    Kept& kept = layers_[static_cast<size_t>(query.layer)];
    if (kept.end == kept.first || far.i0 < kept.first) kept = Kept{far.i0, far.i0, {}};
    // Keep the boxes of the whole chunks up to the far span's end; those past them are read now.
    // Read a block at a time, so that a step holds a block's f32 abstracts, not the span's.
    const int64_t whole = std::min(far.i1, query.n_tokens / chunk_tokens);
    for (int64_t i0 = kept.end; i0 < whole;) {
      const int64_t i1 = std::min(whole, i0 + kDecodeChunks - (i0 - kept.first) % kDecodeChunks);
      LEOAM_ASSIGN_OR_RETURN(const SpanAbstracts added, load_span(catalog, query.layer, {i0, i1}, source_));
      for (int64_t i = i0; i < i1; ++i) round_box_outward(added.at(i), layout.chunk_stride, kept.add(layout));
      peak_bytes_ = std::max(peak_bytes_, kept_bytes() + capacity_bytes(added.data));
      i0 = i1;
    }
    const int64_t from_kept = std::min(far.i1, kept.end);
    SpanAbstracts rest;
    if (from_kept < far.i1) {
      LEOAM_ASSIGN_OR_RETURN(rest, load_span(catalog, query.layer, {from_kept, far.i1}, source_));
    }

    // bounds[h * n + i]: query head h against far chunk far.i0 + i, the kept boxes decoded a block
    // of kDecodeChunks at a time (a step holds a block's f32 copy, not the whole span's).
    const int64_t n = far.size();
    const int group = query.n_head / query.n_head_kv;
    std::vector<float> bounds(static_cast<size_t>(query.n_head * n));
    std::vector<float> block(static_cast<size_t>(std::min<int64_t>(n, kDecodeChunks) * layout.chunk_stride));
    const auto bound_chunks = [&](int64_t i0, int64_t i1, const float* boxes) {
      for (int h = 0; h < query.n_head; ++h) {
        chunk_bounds(query.q + static_cast<int64_t>(h) * query.head_dim, h / group, boxes, i1 - i0, layout,
                     bounds.data() + h * n + (i0 - far.i0));
      }
    };
    for (int64_t i0 = far.i0; i0 < from_kept;) {  // a kept block's boxes at a time
      const int64_t i1 = std::min(from_kept, i0 + kDecodeChunks - (i0 - kept.first) % kDecodeChunks);
      decode_box(kept.box(i0, layout), (i1 - i0) * layout.chunk_stride, block.data());
      bound_chunks(i0, i1, block.data());
      i0 = i1;
    }
    if (from_kept < far.i1) bound_chunks(from_kept, far.i1, rest.at(from_kept));
    std::vector<float> scores(static_cast<size_t>(n), -std::numeric_limits<float>::infinity());
    for (int h = 0; h < query.n_head; ++h) {
      fold_normalized(std::span<const float>(bounds.data() + h * n, static_cast<size_t>(n)), query.scale, scores);
    }
    s.ranges = pick_top_chunks(scores, far, query.far, chunk_tokens, query.budget_tokens);
    s.n_chunks_scored = far.size();
    peak_bytes_ = std::max(peak_bytes_, kept_bytes() + capacity_bytes(rest.data) + capacity_bytes(block) +
                                            capacity_bytes(bounds) + capacity_bytes(scores));
    return s;
  }

 private:
  // A layer's f16 boxes of its chunks [first, end), read so far, in blocks of kDecodeChunks boxes
  // (a new chunk's box moves none of the others, and a layer holds at most one block's slack);
  // `first` is the far span's first chunk (the sink's chunks before it are never scored).
  struct Kept {
    int64_t first = 0;
    int64_t end = 0;
    std::vector<std::vector<uint16_t>> blocks;

    uint16_t* box(int64_t index, const BoundLayout& layout) {
      const int64_t k = index - first;
      return blocks[static_cast<size_t>(k / kDecodeChunks)].data() + (k % kDecodeChunks) * layout.chunk_stride;
    }
    // Room for chunk `end`'s box, which then counts as kept.
    uint16_t* add(const BoundLayout& layout) {
      if ((end - first) % kDecodeChunks == 0) {
        blocks.emplace_back(static_cast<size_t>(kDecodeChunks * layout.chunk_stride));
      }
      return box(end++, layout);
    }
  };

  uint64_t kept_bytes() const {
    uint64_t bytes = 0;
    for (const Kept& kept : layers_) {
      for (const std::vector<uint16_t>& block : kept.blocks) bytes += capacity_bytes(block);
    }
    return bytes;
  }

  AbstractSource source_;
  std::vector<Kept> layers_;  // [layer]
  uint64_t peak_bytes_ = 0;
};

}  // namespace

std::unique_ptr<SelectionPolicy> make_quest_policy(const PolicyOptions& options) {
  return std::make_unique<QuestPolicy>(options);
}

}  // namespace leoam::sparse
