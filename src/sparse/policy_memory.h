// What a selection policy holds in RAM about the KV, as it reports it (SelectionPolicy::memory):
// the bytes its trees, abstracts, scores and partial keys take now, and the most at once so far.
#pragma once

#include <cstdint>

namespace leoam::sparse {

struct PolicyMemory {
  uint64_t bytes = 0;
  uint64_t peak_bytes = 0;
};

// The bytes a vector's allocation takes (its capacity, not its size: what the process holds).
template <class V>
uint64_t capacity_bytes(const V& v) {
  return static_cast<uint64_t>(v.capacity()) * sizeof(typename V::value_type);
}

// Resizes v to n; when its allocation must grow, to a slack_div-th (an eighth) past n rather than
// to double its size (the vector's own growth): state that grows a position or a leaf at a time
// then holds at most that much slack, and growing stays amortized O(1). The slack is touched when
// it is allocated, so that the steps that grow into it later fault no page: on huge pages a
// fault zeroes 2 MiB, and the chunk trees' first decode step after a long prompt faulted two a
// layer, inside the step.
template <class V>
void grow_to(V& v, size_t n, size_t slack_div = 8) {
  if (n > v.capacity()) {
    v.reserve(n + n / slack_div);
    v.resize(v.capacity());
  }
  v.resize(n);
}

}  // namespace leoam::sparse
