#include "sparse/chunk_ranking.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace leoam::sparse {

ChunkSpan chunks_overlapping(TokenRange range, int chunk_tokens) {
  if (range.size() <= 0) return {};
  return {range.begin / chunk_tokens, (range.end + chunk_tokens - 1) / chunk_tokens};
}

TokenRange chunk_part(int64_t index, TokenRange range, int chunk_tokens) {
  const int64_t begin = std::max(index * chunk_tokens, range.begin);
  const int64_t end = std::min((index + 1) * chunk_tokens, range.end);
  return begin < end ? TokenRange{begin, end} : TokenRange{begin, begin};
}

Status check_query(const SelectionQuery& query, const KvCatalog& catalog) {
  const std::string where = "selection query (layer " + std::to_string(query.layer) + ")";
  if (query.n_head_kv != catalog.catalog_kv_heads() || query.head_dim != catalog.catalog_head_dim()) {
    return invalid_argument(where + ": " + std::to_string(query.n_head_kv) + " kv heads of dim " +
                            std::to_string(query.head_dim) + ", but the catalog holds " +
                            std::to_string(catalog.catalog_kv_heads()) + " of dim " +
                            std::to_string(catalog.catalog_head_dim()));
  }
  if (query.n_head_kv <= 0 || query.n_head % query.n_head_kv != 0) {
    return invalid_argument(where + ": n_head " + std::to_string(query.n_head) +
                            " is not a positive multiple of n_head_kv " + std::to_string(query.n_head_kv));
  }
  if (query.far.begin < 0 || query.far.begin > query.far.end || query.far.end > query.n_tokens) {
    return invalid_argument(where + ": far range [" + std::to_string(query.far.begin) + ", " +
                            std::to_string(query.far.end) + ") is not inside [0, " +
                            std::to_string(query.n_tokens) + ")");
  }
  const int64_t needed = chunks_overlapping({0, query.n_tokens}, catalog.chunk_tokens()).i1;
  if (catalog.n_chunks(query.layer) < needed) {
    return invalid_argument(where + ": " + std::to_string(query.n_tokens) + " tokens need " +
                            std::to_string(needed) + " chunks, the catalog holds " +
                            std::to_string(catalog.n_chunks(query.layer)));
  }
  return Status::ok();
}

Result<SpanAbstracts> load_span(KvCatalog& catalog, int layer, ChunkSpan span, AbstractSource source,
                                bool key_signs) {
  SpanAbstracts a;
  a.span = span;
  a.layout.n_kv_heads = catalog.catalog_kv_heads();
  a.layout.head_dim = catalog.catalog_head_dim();
  a.layout.chunk_stride = 2 * static_cast<int64_t>(a.layout.n_kv_heads) * a.layout.head_dim;
  a.data.resize(static_cast<size_t>(span.size() * a.layout.chunk_stride));
  a.chunk_tokens = catalog.chunk_tokens();
  if (key_signs) {
    a.sign_words.resize(static_cast<size_t>(span.size() * catalog.sign_words_per_chunk()));
  }
  LEOAM_RETURN_IF_ERROR(catalog.load_abstracts(layer, span.i0, span.i1, a.data.data(), source,
                                               key_signs ? a.sign_words.data() : nullptr));
  return a;
}

void fold_normalized(std::span<const float> bounds, float scale, std::span<float> scores) {
  if (bounds.empty()) return;
  const float best = *std::max_element(bounds.begin(), bounds.end());
  for (size_t i = 0; i < bounds.size(); ++i) scores[i] = std::max(scores[i], (bounds[i] - best) * scale);
}

std::vector<TokenRange> pick_top_chunks(std::span<const float> scores, ChunkSpan span, TokenRange far,
                                        int chunk_tokens, int64_t budget_tokens) {
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  // stable_sort keeps equal scores in index order: ties go to the lower index.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  std::vector<int64_t> picked;
  int64_t used = 0;
  for (int64_t i : order) {
    const int64_t n = chunk_part(span.i0 + i, far, chunk_tokens).size();
    if (used + n > budget_tokens && !picked.empty()) break;
    used += n;
    picked.push_back(span.i0 + i);
  }
  std::sort(picked.begin(), picked.end());
  std::vector<TokenRange> ranges;
  for (int64_t index : picked) {
    const TokenRange part = chunk_part(index, far, chunk_tokens);
    if (!ranges.empty() && ranges.back().end == part.begin) {
      ranges.back().end = part.end;
    } else {
      ranges.push_back(part);
    }
  }
  return ranges;
}

RangePick pick_top_ranges(std::span<const float> scores, std::span<const TokenRange> units, TokenRange far,
                          int64_t budget_tokens, int64_t unsplittable_tokens) {
  auto far_part = [&](int64_t i) {
    const int64_t begin = std::max(units[i].begin, far.begin);
    const int64_t end = std::min(units[i].end, far.end);
    return begin < end ? TokenRange{begin, end} : TokenRange{begin, begin};
  };
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  RangePick pick;
  int64_t used = 0;
  for (int64_t i : order) {
    const int64_t n = far_part(i).size();
    const bool best_cannot_split = pick.picked.empty() && units[i].size() <= unsplittable_tokens;
    if (used + n > budget_tokens && !best_cannot_split) break;
    used += n;
    pick.picked.push_back(i);
  }
  std::sort(pick.picked.begin(), pick.picked.end());
  for (int64_t i : pick.picked) {
    const TokenRange part = far_part(i);
    if (part.size() <= 0) continue;
    if (!pick.ranges.empty() && pick.ranges.back().end == part.begin) {
      pick.ranges.back().end = part.end;
    } else {
      pick.ranges.push_back(part);
    }
  }
  return pick;
}

}  // namespace leoam::sparse
