// PartialProjection: InfiniGen's partial query projection and the partial keys it is scored
// against. Per layer and query head it keeps a few dimensions ("columns") of the head, chosen once
// from the weights, and computes the query restricted to them from a layer input, rotated by RoPE
// exactly as the full query is (so the partial scores are the full q.k restricted to the columns).
//
// Column choice. InfiniGen skews Wq/Wk offline with an SVD so that a few columns carry most of
// q.k; we choose static columns of the weights as they are. RoPE mixes the two dimensions of a
// pair, so the unit of choice is a rotation pair (normal llama pairing: dims (2i, 2i+1); NeoX:
// (i, i + n_rot/2)), plus each unrotated dim [n_rot, head_dim) on its own. A unit of query head h
// (kv head g = h / n_gqa) scores
//     ||Wq' rows of the unit in head h||_F * ||Wk' rows of the unit in kv head g||_F
// where W' = W diag(attn_norm) is the weight as the layer applies it to rmsnorm(x) (the biases
// are left out of the ranking). That product bounds the unit's share of q.k for an input of unit
// norm. Units are taken best first (ties: lower unit, pairs before unrotated dims) while they fit
// in 2 * ceil(ratio * head_dim / 2) columns; a pair that no longer fits is skipped for a later
// single dim. With n_rot == head_dim (every llama/qwen2 model) that is ceil(ratio * head_dim / 2)
// pairs per head.
//
// Layout per layer (n_sel = the columns of all query heads, n_kv_sel = those of all kv heads):
//
//   query columns   [head 0: c c c c][head 1: c c c c] ...       q_begin[h] .. q_begin[h + 1]
//   partial query   [n_sel] f32, the same order (post-RoPE)
//   kv columns      [kv head 0: union of its group's columns] ... kv_begin[g] .. kv_begin[g + 1]
//   partial key     [n_kv_sel] f32 per position, the same order; key_slot[i] is where query
//                   column i finds its key value in it
//
// The partial query weights are the selected rows of Wq read in place from the model's weights in
// their stored type (kernels::dot_row), not f32 copies: a copy would cost
// n_layer * n_sel * n_embd * 4 bytes (0.67 GB for a llama-7b at ratio 0.3). Where Wq is stored in
// row groups (Q4_0, Q8_0), the selected rows are copied out once in their stored type (90 MB for
// a Q4_0 llama-7b at ratio 0.3).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/rope.h"

namespace leoam {
class Model;
}

namespace leoam::sparse {

class PartialProjection {
 public:
  // Fails for a ratio outside (0, 1]. The model must outlive the result.
  static Result<PartialProjection> create(const Model& model, double ratio);

  int n_layer() const { return static_cast<int>(layers_.size()); }
  int n_head() const { return n_head_; }
  int n_head_kv() const { return n_head_kv_; }
  int head_dim() const { return head_dim_; }

  // The dims of query head `head` kept at `layer`, ascending.
  std::span<const int> head_columns(int layer, int head) const;
  // The dims of kv head `kv_head` kept in the partial key (the union over its query heads), ascending.
  std::span<const int> kv_columns(int layer, int kv_head) const;
  // Offsets of each query head's columns in the partial query: [n_head + 1].
  std::span<const int> q_begin(int layer) const { return layers_[layer].q_begin; }
  // For each partial query column i: its index in the partial key row. [n_sel]
  std::span<const int> key_slot(int layer) const { return layers_[layer].key_slot; }
  int n_sel(int layer) const { return layers_[layer].q_begin.back(); }
  int n_kv_sel(int layer) const { return layers_[layer].kv_begin.back(); }

  // The partial query of `layer` for layer input x [n_embd] (the residual stream before the
  // layer's attention norm) at position pos: rmsnorm(x) * attn_norm, the selected rows of Wq (+ the
  // bias), RoPE at pos. out: [n_sel(layer)].
  void project_query(int layer, int64_t pos, const float* x, float* out) const;
  // The partial query gathered from a full post-RoPE query q [n_head][head_dim]. out: [n_sel(layer)].
  void gather_query(int layer, const float* q, float* out) const;
  // The partial key row of one position from its full post-RoPE key k [n_head_kv][head_dim].
  // out: [n_kv_sel(layer)].
  void gather_key(int layer, const float* k, float* out) const;

 private:
  struct LayerColumns {
    std::vector<int> q_begin;   // [n_head + 1]
    std::vector<int> q_cols;    // [n_sel] dim in its head
    std::vector<int> kv_begin;  // [n_head_kv + 1]
    std::vector<int> kv_cols;   // [n_kv_sel] dim in its kv head
    std::vector<int> key_slot;  // [n_sel]
    // When attn_q is stored in row groups (kernels/cpu/row_groups.h): the attn_q rows of the
    // columns in GGUF's row layout, [n_sel][attn_q.row_bytes], taken out once here rather than at
    // every step; empty otherwise (the rows are read in place).
    std::vector<uint8_t> q_rows;
  };

  PartialProjection(const Model& model, Rope rope) : model_(&model), rope_(std::move(rope)) {}

  const Model* model_;
  Rope rope_;
  int n_head_ = 0;
  int n_head_kv_ = 0;
  int head_dim_ = 0;
  std::vector<LayerColumns> layers_;  // [n_layer]
};

}  // namespace leoam::sparse
