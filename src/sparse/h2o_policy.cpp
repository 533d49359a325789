// h2o, h2o-chunked: H2O (Heavy-Hitter Oracle). Each layer accumulates, over the decode steps, the
// softmax mass every position receives (observe_attention: summed over the query heads), and keeps
// the far positions with the most, the heavy hitters, within the budget (ties to the lower
// position). A far position not kept is evicted for good, as H2O drops it from its KV cache. A
// layer's first step (no mass observed yet) attends every far position, as H2O scores the prompt
// with full attention. h2o-chunked does the same with the store's chunks: a chunk scores its
// positions' mass inside far, and an evicted chunk goes whole, its recent positions too once they
// leave the window. Memory: a float of mass per position and a byte per evicted unit, per layer.
// The steps in full: docs/selection.md#h2o
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sparse/chunk_ranking.h"
#include "sparse/selection_policy.h"

namespace leoam::sparse {
namespace {

struct LayerState {
  std::vector<float> mass;       // [position]: attention mass accumulated over the decode steps
  std::vector<uint8_t> evicted;  // [position] (h2o) or [chunk] (h2o-chunked): 1 once evicted
  bool observed = false;         // some attention mass has been observed in this sequence
};

// Appends [begin, end) to sorted `out`, merging it with the last range when they touch.
void append_merged(std::vector<TokenRange>& out, int64_t begin, int64_t end) {
  if (end <= begin) return;
  if (!out.empty() && out.back().end == begin) {
    out.back().end = end;
  } else {
    out.push_back({begin, end});
  }
}

class H2oPolicy final : public SelectionPolicy {
 public:
  explicit H2oPolicy(bool chunked) : chunked_(chunked) {}

  std::string_view name() const override { return chunked_ ? "h2o-chunked" : "h2o"; }
  SelectorNeeds needs() const override {
    SelectorNeeds n;
    n.attention_mass = true;
    return n;
  }
  void reset() override { layers_.clear(); }

  // The scores and eviction marks, kept between steps; a step's candidates and chunk scores besides.
  PolicyMemory memory() const override {
    const uint64_t kept = kept_bytes();
    return {kept, std::max(peak_bytes_, kept)};
  }

  void observe_attention(int layer, int64_t /*pos*/, std::span<const TokenRange> ranges,
                         std::span<const float> mass) override {
    if (layer < 0) return;
    LayerState& s = state(layer);
    size_t i = 0;
    for (const TokenRange& r : ranges) {
      if (r.begin < 0 || r.end <= r.begin) continue;
      grow(s.mass, r.end);
      for (int64_t p = r.begin; p < r.end && i < mass.size(); ++p, ++i) s.mass[static_cast<size_t>(p)] += mass[i];
    }
    s.observed = true;
  }

  Result<Selection> select(const SelectionQuery& query, KvCatalog& catalog) override {
    if (query.layer < 0 || query.far.begin < 0 || query.far.begin > query.far.end) {
      return invalid_argument("h2o: bad selection query (layer " + std::to_string(query.layer) + ", far [" +
                              std::to_string(query.far.begin) + ", " + std::to_string(query.far.end) + "))");
    }
    if (chunked_) LEOAM_RETURN_IF_ERROR(check_query(query, catalog));
    Selection sel;
    if (query.far.size() <= 0) return sel;
    LayerState& s = state(query.layer);
    if (!s.observed) {  // the first step: full attention scores the prompt
      sel.ranges.push_back(query.far);
      return sel;
    }
    grow(s.mass, query.far.end);
    if (chunked_) {
      select_chunks(query, catalog.chunk_tokens(), s, sel);
    } else {
      select_tokens(query, s, sel);
    }
    return sel;
  }

 private:
  LayerState& state(int layer) {
    if (static_cast<size_t>(layer) >= layers_.size()) layers_.resize(static_cast<size_t>(layer) + 1);
    return layers_[static_cast<size_t>(layer)];
  }

  template <typename T>
  static void grow(std::vector<T>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) grow_to(v, static_cast<size_t>(n));
  }

  void select_tokens(const SelectionQuery& query, LayerState& s, Selection& sel) {
    grow(s.evicted, query.far.end);
    std::vector<int64_t> candidates;
    for (int64_t p = query.far.begin; p < query.far.end; ++p) {
      if (s.evicted[static_cast<size_t>(p)] == 0) candidates.push_back(p);
    }
    note_peak(capacity_bytes(candidates));
    sel.n_chunks_scored = static_cast<int64_t>(candidates.size());
    const auto n_keep = static_cast<size_t>(std::clamp<int64_t>(query.budget_tokens, 0, sel.n_chunks_scored));
    // A strict total order (mass descending, then position ascending) makes the top n_keep unique.
    const auto better = [&s](int64_t a, int64_t b) {
      const float ma = s.mass[static_cast<size_t>(a)];
      const float mb = s.mass[static_cast<size_t>(b)];
      return ma != mb ? ma > mb : a < b;
    };
    if (n_keep < candidates.size()) {
      std::nth_element(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(n_keep), candidates.end(),
                       better);
      for (size_t i = n_keep; i < candidates.size(); ++i) s.evicted[static_cast<size_t>(candidates[i])] = 1;
      candidates.resize(n_keep);
    }
    std::sort(candidates.begin(), candidates.end());
    for (int64_t p : candidates) append_merged(sel.ranges, p, p + 1);
  }

  void select_chunks(const SelectionQuery& query, int chunk_tokens, LayerState& s, Selection& sel) {
    const ChunkSpan span = chunks_overlapping(query.far, chunk_tokens);
    grow(s.evicted, span.i1);
    std::vector<int64_t> candidates;  // chunk indices
    std::vector<double> scores;       // [chunk - span.i0]
    scores.resize(static_cast<size_t>(span.size()), 0.0);
    for (int64_t c = span.i0; c < span.i1; ++c) {
      if (s.evicted[static_cast<size_t>(c)] != 0) continue;
      candidates.push_back(c);
      const TokenRange part = chunk_part(c, query.far, chunk_tokens);
      double sum = 0.0;
      for (int64_t p = part.begin; p < part.end; ++p) sum += s.mass[static_cast<size_t>(p)];
      scores[static_cast<size_t>(c - span.i0)] = sum;
    }
    sel.n_chunks_scored = static_cast<int64_t>(candidates.size());
    note_peak(capacity_bytes(candidates) + capacity_bytes(scores));
    // candidates are in index order: stable_sort sends ties to the lower index.
    std::stable_sort(candidates.begin(), candidates.end(), [&](int64_t a, int64_t b) {
      return scores[static_cast<size_t>(a - span.i0)] > scores[static_cast<size_t>(b - span.i0)];
    });
    size_t n_keep = 0;
    int64_t used = 0;
    for (; n_keep < candidates.size(); ++n_keep) {
      const int64_t n = chunk_part(candidates[n_keep], query.far, chunk_tokens).size();
      if (used + n > query.budget_tokens) break;  // stop at the first chunk that does not fit
      used += n;
    }
    for (size_t i = n_keep; i < candidates.size(); ++i) s.evicted[static_cast<size_t>(candidates[i])] = 1;
    candidates.resize(n_keep);
    std::sort(candidates.begin(), candidates.end());
    for (int64_t c : candidates) {
      const TokenRange part = chunk_part(c, query.far, chunk_tokens);
      append_merged(sel.ranges, part.begin, part.end);
    }
  }

  uint64_t kept_bytes() const {
    uint64_t b = capacity_bytes(layers_);
    for (const LayerState& s : layers_) b += capacity_bytes(s.mass) + capacity_bytes(s.evicted);
    return b;
  }
  void note_peak(uint64_t working) { peak_bytes_ = std::max(peak_bytes_, kept_bytes() + working); }

  bool chunked_;
  std::vector<LayerState> layers_;  // [layer]
  uint64_t peak_bytes_ = 0;  // the most held at once, a step's working copies included
};

}  // namespace

std::unique_ptr<SelectionPolicy> make_h2o_policy(bool chunked) { return std::make_unique<H2oPolicy>(chunked); }

}  // namespace leoam::sparse
