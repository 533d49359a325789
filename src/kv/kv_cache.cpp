// The default KvCache::for_each_view, for a store that can view a whole layer at once: one view
// up to the end of the last range, its segments cut to the ranges, handed to fn in one call.
//
//   view:    | seg 0: [0, 6)          | seg 1: [6, 10)   |
//   ranges:      [1, 3)      [4,          8)    [9, 10)
//   cut:         [1, 3)      [4, 6) | [6, 8)    [9, 10)     (pointers advanced by the rows skipped)
//
// Ranges that hold no position (begin == end) are skipped; when none holds a position, fn is not
// called at all.
#include "kv/kv_cache.h"

#include <algorithm>
#include <string>

namespace leoam {

namespace {

std::string range_string(size_t index, const TokenRange& r) {
  return "range " + std::to_string(index) + " [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
}

}  // namespace

Status KvCache::for_each_view(int layer, std::span<const TokenRange> ranges, const ViewVisitor& fn) {
  if (layer < 0 || layer >= shape().n_layer) {
    return invalid_argument("KV cache: layer " + std::to_string(layer) + " out of range [0, " +
                            std::to_string(shape().n_layer) + ")");
  }
  const std::string where = "KV cache layer " + std::to_string(layer) + ": ";
  const int64_t n_stored = n_tokens(layer);
  int64_t n_wanted = 0;
  const TokenRange* last = nullptr;  // the last range holding a position
  size_t last_index = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const TokenRange& r = ranges[i];
    if (r.begin > r.end) return invalid_argument(where + range_string(i, r) + " ends before it begins");
    if (r.begin == r.end) continue;
    if (r.begin < 0 || r.end > n_stored) {
      return invalid_argument(where + range_string(i, r) + " is outside [0, " + std::to_string(n_stored) +
                              "), the positions the layer holds");
    }
    if (last != nullptr && r.begin < last->end) {
      return invalid_argument(where + range_string(i, r) + " starts before the end of " +
                              range_string(last_index, *last) + "; ranges must be sorted and disjoint");
    }
    last = &r;
    last_index = i;
    n_wanted += r.size();
  }
  if (last == nullptr) return Status::ok();

  LEOAM_ASSIGN_OR_RETURN(const KvView whole, view(layer, last->end));
  const std::span<const KvSegment> segments = whole.segments();
  std::vector<KvSegment> cut;
  size_t first = 0;  // the first segment that may overlap the current range
  int64_t n_cut = 0;
  for (const TokenRange& r : ranges) {
    if (r.begin == r.end) continue;
    while (first < segments.size() && segments[first].pos0 + segments[first].n_tokens <= r.begin) ++first;
    for (size_t s = first; s < segments.size() && segments[s].pos0 < r.end; ++s) {
      const KvSegment& seg = segments[s];
      const int64_t lo = std::max(r.begin, seg.pos0);
      const int64_t hi = std::min(r.end, seg.pos0 + seg.n_tokens);
      if (lo >= hi) continue;
      KvSegment piece = seg;
      piece.pos0 = lo;
      piece.n_tokens = hi - lo;
      piece.k = seg.k_row(lo - seg.pos0);
      piece.v = seg.v_row(lo - seg.pos0);
      cut.push_back(piece);
      n_cut += piece.n_tokens;
    }
  }
  // A view that leaves out positions would make attention silently skip them.
  if (n_cut != n_wanted) {
    return internal_error(where + "the view of " + std::to_string(last->end) + " positions covers " +
                          std::to_string(n_cut) + " of the " + std::to_string(n_wanted) + " positions asked for");
  }
  // `whole` (and whatever it pins) outlives the call.
  const KvView cut_view(whole.n_kv_heads(), whole.head_dim(), std::move(cut));
  return fn(cut_view);
}

}  // namespace leoam
