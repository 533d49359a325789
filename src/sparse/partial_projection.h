// PartialProjection: InfiniGen's partial query projection and the partial keys it is scored
// against. Per layer and query head it keeps a few dimensions ("columns") of the head, chosen once
// from the weights, and computes the query restricted to them from a layer input, rotated by RoPE
// exactly as the full query is, so the partial scores are the full q.k restricted to the columns.
// Static columns stand in for InfiniGen's offline SVD skewing: units of a RoPE pair (or an
// unrotated dim), ranked by ||Wq' rows|| * ||Wk' rows||, best first while they fit in
// 2 * ceil(ratio * head_dim / 2) columns. Wq's selected rows are read in place in their stored
// type (row groups copied out once), not as f32 copies.
//
// Why these columns, the layout, and the memory: docs/selection.md#partial-projection
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
