#include "sparse/partial_projection.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/row_groups.h"
#include "model/block_norm.h"
#include "model/model.h"

namespace leoam::sparse {
namespace {

// A unit of column choice: a RoPE pair (d0, d1), or an unrotated dim d0 (d1 = -1).
struct Unit {
  int d0 = 0;
  int d1 = -1;
};

std::vector<Unit> rotation_units(const RopeParams& rope, int head_dim) {
  std::vector<Unit> units;
  const int n_pairs = rope.n_rot / 2;
  for (int i = 0; i < n_pairs; ++i) {
    units.push_back(rope.pairing == RopePairing::kNeox ? Unit{i, i + n_pairs} : Unit{2 * i, 2 * i + 1});
  }
  for (int d = rope.n_rot; d < head_dim; ++d) units.push_back({d, -1});
  return units;
}

// sum_c (w[r][c] * norm[c])^2 for every row r of w: the squared row norms of W diag(norm).
std::vector<double> scaled_row_norms2(const kernels::MatrixView& w, const float* norm) {
  std::vector<double> out(static_cast<size_t>(w.n_rows));
  std::vector<float> row(static_cast<size_t>(w.n_cols));
  std::vector<uint8_t> scratch(w.row_bytes);
  for (int64_t r = 0; r < w.n_rows; ++r) {
    kernels::dequantize_row(w.type, kernels::matrix_row(w, r, scratch.data()), row.data(), w.n_cols);
    double s = 0.0;
    for (int64_t c = 0; c < w.n_cols; ++c) {
      const double v = static_cast<double>(row[c]) * norm[c];
      s += v * v;
    }
    out[r] = s;
  }
  return out;
}

double unit_norm2(const std::vector<double>& norms2, int64_t row0, const Unit& u) {
  return norms2[row0 + u.d0] + (u.d1 >= 0 ? norms2[row0 + u.d1] : 0.0);
}

}  // namespace

Result<PartialProjection> PartialProjection::create(const Model& model, double ratio) {
  if (!(ratio > 0.0 && ratio <= 1.0)) {
    return invalid_argument("infinigen: partial ratio " + std::to_string(ratio) +
                            " is outside (0, 1]; it is the fraction of each head's columns kept (e.g. 0.3)");
  }
  const ModelHparams& hp = model.hparams();
  const ModelWeights& w = model.weights();
  // LongRoPE (phi3): the factor set of the training context, which a shorter context may not use.
  LEOAM_ASSIGN_OR_RETURN(Rope rope, Rope::create(hp.rope, hp.head_dim, w.rope_factors(hp, hp.n_ctx_train)));
  PartialProjection p(model, std::move(rope));
  p.n_head_ = hp.n_head;
  p.n_head_kv_ = hp.n_head_kv;
  p.head_dim_ = hp.head_dim;
  const int hd = hp.head_dim;
  const int group = hp.n_gqa();
  const int budget_cols = 2 * static_cast<int>(std::ceil(ratio * hd / 2.0));
  const std::vector<Unit> units = rotation_units(hp.rope, hd);

  p.layers_.resize(static_cast<size_t>(hp.n_layer));
  for (int il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& L = w.layers[il];
    const std::vector<double> q_norms2 = scaled_row_norms2(L.attn_q, L.attn_norm);
    const std::vector<double> k_norms2 = scaled_row_norms2(L.attn_k, L.attn_norm);
    LayerColumns& lc = p.layers_[il];

    std::vector<std::vector<int>> head_cols(static_cast<size_t>(hp.n_head));
    std::vector<double> score(units.size());
    std::vector<int> order(units.size());
    for (int h = 0; h < hp.n_head; ++h) {
      const int g = h / group;
      for (size_t u = 0; u < units.size(); ++u) {
        score[u] = std::sqrt(unit_norm2(q_norms2, int64_t{h} * hd, units[u])) *
                   std::sqrt(unit_norm2(k_norms2, int64_t{g} * hd, units[u]));
      }
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
      int left = budget_cols;
      std::vector<int>& cols = head_cols[h];
      for (int u : order) {
        const int width = units[u].d1 >= 0 ? 2 : 1;
        if (width > left) continue;
        cols.push_back(units[u].d0);
        if (units[u].d1 >= 0) cols.push_back(units[u].d1);
        left -= width;
        if (left == 0) break;
      }
      std::sort(cols.begin(), cols.end());
    }

    lc.q_begin.assign(1, 0);
    for (int h = 0; h < hp.n_head; ++h) {
      lc.q_cols.insert(lc.q_cols.end(), head_cols[h].begin(), head_cols[h].end());
      lc.q_begin.push_back(static_cast<int>(lc.q_cols.size()));
    }
    lc.kv_begin.assign(1, 0);
    for (int g = 0; g < hp.n_head_kv; ++g) {
      std::vector<int> cols;
      for (int h = g * group; h < (g + 1) * group; ++h) cols.insert(cols.end(), head_cols[h].begin(), head_cols[h].end());
      std::sort(cols.begin(), cols.end());
      cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
      lc.kv_cols.insert(lc.kv_cols.end(), cols.begin(), cols.end());
      lc.kv_begin.push_back(static_cast<int>(lc.kv_cols.size()));
    }
    if (L.attn_q.row_groups) {
      const kernels::MatrixView& wq = L.attn_q;
      lc.q_rows.resize(lc.q_cols.size() * wq.row_bytes);
      for (int h = 0; h < hp.n_head; ++h) {
        for (int i = lc.q_begin[h]; i < lc.q_begin[h + 1]; ++i) {
          kernels::ungroup_rows(wq.type, wq.data, wq.row_bytes, wq.n_rows, int64_t{h} * hd + lc.q_cols[i], 1,
                                lc.q_rows.data() + static_cast<size_t>(i) * wq.row_bytes);
        }
      }
    }
    lc.key_slot.resize(lc.q_cols.size());
    for (int h = 0; h < hp.n_head; ++h) {
      const int g = h / group;
      const auto kv0 = lc.kv_cols.begin() + lc.kv_begin[g];
      const auto kv1 = lc.kv_cols.begin() + lc.kv_begin[g + 1];
      for (int i = lc.q_begin[h]; i < lc.q_begin[h + 1]; ++i) {
        lc.key_slot[i] = static_cast<int>(std::lower_bound(kv0, kv1, lc.q_cols[i]) - lc.kv_cols.begin());
      }
    }
  }
  return p;
}

std::span<const int> PartialProjection::head_columns(int layer, int head) const {
  const LayerColumns& lc = layers_[layer];
  return std::span<const int>(lc.q_cols).subspan(lc.q_begin[head], lc.q_begin[head + 1] - lc.q_begin[head]);
}

std::span<const int> PartialProjection::kv_columns(int layer, int kv_head) const {
  const LayerColumns& lc = layers_[layer];
  return std::span<const int>(lc.kv_cols).subspan(lc.kv_begin[kv_head], lc.kv_begin[kv_head + 1] - lc.kv_begin[kv_head]);
}

void PartialProjection::project_query(int layer, int64_t pos, const float* x, float* out) const {
  const ModelHparams& hp = model_->hparams();
  const LayerWeights& L = model_->weights().layers[layer];
  const LayerColumns& lc = layers_[layer];
  std::vector<float> xn(static_cast<size_t>(hp.n_embd));
  block_norm(hp, x, L.attn_norm, L.attn_norm_b, xn.data());

  // The selected rows into an otherwise zero query, rotated whole: pairs are kept or dropped
  // together, so the dropped ones stay zero and the kept ones rotate exactly as in the full query.
  std::vector<float> q(static_cast<size_t>(n_head_) * head_dim_, 0.0f);
  for (int h = 0; h < n_head_; ++h) {
    for (int i = lc.q_begin[h]; i < lc.q_begin[h + 1]; ++i) {
      const int64_t r = int64_t{h} * head_dim_ + lc.q_cols[i];
      const uint8_t* row = lc.q_rows.empty()
                               ? static_cast<const uint8_t*>(L.attn_q.data) + static_cast<size_t>(r) * L.attn_q.row_bytes
                               : lc.q_rows.data() + static_cast<size_t>(i) * L.attn_q.row_bytes;
      q[r] = kernels::dot_row(L.attn_q.type, row, xn.data(), hp.n_embd) +
             (L.attn_q_bias != nullptr ? L.attn_q_bias[r] : 0.0f);
    }
  }
  const int n_pairs = rope_.n_rot() / 2;
  std::vector<float> cos(static_cast<size_t>(n_pairs)), sin(static_cast<size_t>(n_pairs));
  rope_.fill_tables(pos, 1, cos.data(), sin.data());
  kernels::rope(q.data(), rope_.shape(n_head_), cos.data(), sin.data());
  const float scale = hp.query_scale(pos);  // as the forward pass scales the full query
  for (float& v : q) v *= scale;
  gather_query(layer, q.data(), out);
}

void PartialProjection::gather_query(int layer, const float* q, float* out) const {
  const LayerColumns& lc = layers_[layer];
  for (int h = 0; h < n_head_; ++h) {
    for (int i = lc.q_begin[h]; i < lc.q_begin[h + 1]; ++i) out[i] = q[int64_t{h} * head_dim_ + lc.q_cols[i]];
  }
}

void PartialProjection::gather_key(int layer, const float* k, float* out) const {
  const LayerColumns& lc = layers_[layer];
  for (int g = 0; g < n_head_kv_; ++g) {
    for (int i = lc.kv_begin[g]; i < lc.kv_begin[g + 1]; ++i) out[i] = k[int64_t{g} * head_dim_ + lc.kv_cols[i]];
  }
}

}  // namespace leoam::sparse
