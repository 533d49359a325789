// Best-first merging of adjacent symbols, the core that SentencePiece and BPE share: a text starts
// as its UTF-8 characters, and the pair of neighbours with the highest priority merges first
// (SPM: the merged token's score; BPE: the lowest merge rank), equal priorities leftmost first,
// as llama.cpp does. A priority queue of candidate pairs makes it O(n log n); a pair whose
// symbols have changed since it was queued is stale and skipped.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

#include "tokenizer/unicode.h"

namespace leoam {

// Merges the symbols of `text` and calls emit(piece) for each final symbol, in order.
// pair_priority(left, right) -> std::optional<float>: the priority of merging two neighbouring
// pieces (higher first), or nullopt when they never merge. `right` directly follows `left`
// in `text`, so std::string_view(left.data(), left.size() + right.size()) is the merged piece.
template <typename PairPriority, typename Emit>
void merge_symbols(std::string_view text, PairPriority&& pair_priority, Emit&& emit) {
  if (text.empty()) return;
  struct Symbol {
    uint32_t start;  // byte offset in text
    uint32_t n;      // bytes; 0 once merged into its left neighbour
    int32_t prev;    // previous live symbol, -1 at the start
    int32_t next;    // next live symbol, -1 at the end
  };
  struct Pair {
    float priority;
    int32_t left;
    int32_t right;
    uint32_t size;  // bytes of left + right when queued; a mismatch later means the pair is stale
  };
  struct PairLess {  // the queue's top is the highest priority, then the leftmost
    bool operator()(const Pair& a, const Pair& b) const {
      return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
    }
  };

  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {  // a sequence cut short by the end is shorter
    const size_t len = std::min(unicode::utf8_len(static_cast<uint8_t>(text[offset])), text.size() - offset);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(len), index - 1,
                       offset + len == text.size() ? -1 : index + 1});
    offset += len;
  }

  std::vector<Pair> storage;
  storage.reserve(symbols.size());
  std::priority_queue<Pair, std::vector<Pair>, PairLess> queue(PairLess{}, std::move(storage));
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const std::optional<float> priority = pair_priority(text.substr(l.start, l.n), text.substr(r.start, r.n));
    if (priority) queue.push({*priority, left, right, l.n + r.n});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!queue.empty()) {
    const Pair pair = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(pair.left)];
    Symbol& right = symbols[static_cast<size_t>(pair.right)];
    if (left.n == 0 || right.n == 0 || left.n + right.n != pair.size) continue;  // stale
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = pair.left;
    try_add(left.prev, pair.left);
    try_add(pair.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    emit(text.substr(s.start, s.n));
  }
}

}  // namespace leoam
