// KeysCatalog: a KvCatalog over keys held in memory, for the tests of what reads abstracts (the
// chunk tree, leoam's adaptive policy): store chunk i's abstract is the min/max of its positions'
// keys (and, once with_key_signs(), their sign bits, kv/chunk_layout.h), every load_abstracts
// call is recorded, and loads can be made to fail.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kv/chunk_layout.h"  // sign_words_per_head
#include "kv/kv_catalog.h"

namespace leoam::testing_util {

struct Load {
  int layer = 0;
  int64_t i0 = 0;
  int64_t i1 = 0;

  bool operator==(const Load&) const = default;
};

inline void PrintTo(const Load& l, std::ostream* os) { *os << "(" << l.layer << ": " << l.i0 << ", " << l.i1 << ")"; }

// A catalog over keys held in memory: keys[pos][kv_head][head_dim]; store chunk i's abstract is
// the min/max of its positions' keys.
class KeysCatalog final : public KvCatalog {
 public:
  KeysCatalog(int chunk_tokens, int n_kv_heads, int head_dim)
      : chunk_tokens_(chunk_tokens), n_kv_heads_(n_kv_heads), head_dim_(head_dim) {}

  // Positions [p0, p1) get `key` for every kv head; the catalog grows to p1 if shorter.
  void set_keys(int64_t p0, int64_t p1, const std::vector<float>& key) {
    const int64_t row = static_cast<int64_t>(n_kv_heads_) * head_dim_;
    if (p1 * row > static_cast<int64_t>(keys_.size())) keys_.resize(static_cast<size_t>(p1 * row), 0.0f);
    for (int64_t p = p0; p < p1; ++p) {
      for (int h = 0; h < n_kv_heads_; ++h) std::copy(key.begin(), key.end(), keys_.begin() + p * row + h * head_dim_);
    }
  }
  int64_t n_tokens() const { return static_cast<int64_t>(keys_.size()) / (static_cast<int64_t>(n_kv_heads_) * head_dim_); }
  // The abstract of positions [p0, p1), as the tree should hold it.
  std::vector<float> abstract_of(int64_t p0, int64_t p1) const {
    const int64_t row = static_cast<int64_t>(n_kv_heads_) * head_dim_;
    std::vector<float> a(static_cast<size_t>(2 * row));
    std::fill(a.begin(), a.begin() + row, std::numeric_limits<float>::infinity());
    std::fill(a.begin() + row, a.end(), -std::numeric_limits<float>::infinity());
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t e = 0; e < row; ++e) {
        a[e] = std::min(a[e], keys_[p * row + e]);
        a[row + e] = std::max(a[row + e], keys_[p * row + e]);
      }
    }
    return a;
  }
  void fail_loads_with(Status s) { fail_loads_after(0, std::move(s)); }
  // The next n_ok loads succeed, then every one fails with s.
  void fail_loads_after(int n_ok, Status s) {
    n_ok_before_fail_ = n_ok;
    fail_ = std::move(s);
  }
  void clear_loads() { loads_.clear(); }
  void with_key_signs() { key_signs_ = true; }
  const std::vector<Load>& loads() const { return loads_; }

  int chunk_tokens() const override { return chunk_tokens_; }
  int catalog_kv_heads() const override { return n_kv_heads_; }
  int catalog_head_dim() const override { return head_dim_; }
  int64_t n_chunks(int /*layer*/) const override { return (n_tokens() + chunk_tokens_ - 1) / chunk_tokens_; }
  Tier chunk_tier(int /*layer*/, int64_t /*index*/) const override { return Tier::kDevice; }
  bool has_key_signs() const override { return key_signs_; }
  Status load_abstracts(int layer, int64_t i0, int64_t i1, float* dst, AbstractSource /*source*/,
                        uint32_t* signs) override {
    loads_.push_back({layer, i0, i1});
    if (!fail_.is_ok() && n_ok_before_fail_-- <= 0) return fail_;
    if (i0 < 0 || i0 > i1 || i1 > n_chunks(layer)) return invalid_argument("keys catalog: chunks out of range");
    for (int64_t i = i0; i < i1; ++i) {
      const auto a = abstract_of(i * chunk_tokens_, std::min((i + 1) * chunk_tokens_, n_tokens()));
      std::copy(a.begin(), a.end(), dst + (i - i0) * static_cast<int64_t>(a.size()));
    }
    if (signs == nullptr) return Status::ok();
    // [chunk][row][kv head][word]: bit c of a row's words set where its key's channel c is <= 0.
    const int words = sign_words_per_head(head_dim_);
    const int64_t row = static_cast<int64_t>(n_kv_heads_) * head_dim_;
    std::fill(signs, signs + (i1 - i0) * chunk_tokens_ * n_kv_heads_ * words, 0u);
    for (int64_t p = i0 * chunk_tokens_; p < std::min(i1 * chunk_tokens_, n_tokens()); ++p) {
      for (int h = 0; h < n_kv_heads_; ++h) {
        for (int c = 0; c < head_dim_; ++c) {
          if (std::signbit(keys_[p * row + h * head_dim_ + c])) {
            signs[((p - i0 * chunk_tokens_) * n_kv_heads_ + h) * words + c / 32] |= uint32_t{1} << (c % 32);
          }
        }
      }
    }
    return Status::ok();
  }
  void raise_importance(ChunkKey /*key*/, float /*amount*/) override {}

 private:
  int chunk_tokens_;
  int n_kv_heads_;
  int head_dim_;
  std::vector<float> keys_;  // [n_tokens][n_kv_heads][head_dim]
  std::vector<Load> loads_;
  Status fail_;
  int n_ok_before_fail_ = 0;  // loads left before fail_ applies
  bool key_signs_ = false;
};

}  // namespace leoam::testing_util
