#include "sparse/fidelity_probe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "core/fp16.h"
#include "kernels/cpu/ops.h"

namespace leoam::sparse {

Result<std::unique_ptr<FidelityProbe>> FidelityProbe::create(AttentionSelector* inner, FidelityProbeOptions o,
                                                             int n_layer) {
  const auto bad = [](const std::string& m) { return invalid_argument("fidelity probe: " + m); };
  if (n_layer <= 0 || o.n_head <= 0 || o.n_head_kv <= 0 || o.head_dim <= 0 || o.n_head % o.n_head_kv != 0) {
    return bad("bad shape: n_head must be a positive multiple of n_head_kv, every dimension positive");
  }
  if (!(o.scale > 0.0f)) return bad("the scale must be positive");
  if (o.layers.empty() || o.kv_heads.empty()) return bad("no layer or KV head sampled");
  for (int l : o.layers) {
    if (l < 0 || l >= n_layer) return bad("sampled layer " + std::to_string(l) + " outside [0, " + std::to_string(n_layer) + ")");
  }
  for (int h : o.kv_heads) {
    if (h < 0 || h >= o.n_head_kv) {
      return bad("sampled KV head " + std::to_string(h) + " outside [0, " + std::to_string(o.n_head_kv) + ")");
    }
  }
  return std::unique_ptr<FidelityProbe>(new FidelityProbe(inner, std::move(o), n_layer));
}

FidelityProbe::FidelityProbe(AttentionSelector* inner, FidelityProbeOptions options, int n_layer)
    : inner_(inner), options_(std::move(options)), slot_of_layer_(static_cast<size_t>(n_layer), -1),
      keys_(options_.layers.size()), values_(options_.layers.size()) {
  for (size_t s = 0; s < options_.layers.size(); ++s) slot_of_layer_[options_.layers[s]] = static_cast<int>(s);
}

SelectorNeeds FidelityProbe::needs() const {
  SelectorNeeds n = inner_ != nullptr ? inner_->needs() : SelectorNeeds{};
  n.keys = true;
  n.values = true;
  return n;
}

Status FidelityProbe::keep(std::vector<std::vector<uint16_t>>& store, int layer, int64_t pos0, int64_t n,
                           const float* x) {
  if (layer < 0 || static_cast<size_t>(layer) >= slot_of_layer_.size() || slot_of_layer_[layer] < 0) return Status::ok();
  const int d = options_.head_dim;
  const auto n_sampled = static_cast<int64_t>(options_.kv_heads.size());
  std::vector<uint16_t>& out = store[slot_of_layer_[layer]];
  if (static_cast<int64_t>(out.size()) < pos0 * n_sampled * d) {
    return invalid_argument("fidelity probe: layer " + std::to_string(layer) + " skipped positions before " +
                            std::to_string(pos0));
  }
  out.resize(static_cast<size_t>((pos0 + n) * n_sampled * d));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < n_sampled; ++j) {
      const float* src = x + (t * options_.n_head_kv + options_.kv_heads[j]) * d;
      uint16_t* dst = out.data() + ((pos0 + t) * n_sampled + j) * d;
      for (int c = 0; c < d; ++c) dst[c] = f32_to_f16(src[c]);
    }
  }
  return Status::ok();
}

Status FidelityProbe::observe_keys(int layer, int64_t pos0, int64_t n, const float* k) {
  LEOAM_RETURN_IF_ERROR(keep(keys_, layer, pos0, n, k));
  return inner_ != nullptr && inner_->needs().keys ? inner_->observe_keys(layer, pos0, n, k) : Status::ok();
}

Status FidelityProbe::observe_values(int layer, int64_t pos0, int64_t n, const float* v) {
  LEOAM_RETURN_IF_ERROR(keep(values_, layer, pos0, n, v));
  return inner_ != nullptr && inner_->needs().values ? inner_->observe_values(layer, pos0, n, v) : Status::ok();
}

Result<std::vector<TokenRange>> FidelityProbe::select(int layer, int64_t pos, const float* q, ThreadPool& pool) {
  std::vector<TokenRange> ranges;
  if (inner_ != nullptr) {
    LEOAM_ASSIGN_OR_RETURN(ranges, inner_->select(layer, pos, q, pool));
  } else {
    ranges = {{0, pos + 1}};
  }
  if (layer >= 0 && static_cast<size_t>(layer) < slot_of_layer_.size() && slot_of_layer_[layer] >= 0) {
    Pending p{slot_of_layer_[layer], pos, {}, ranges};
    const int group = options_.n_head / options_.n_head_kv;
    const size_t head_floats = static_cast<size_t>(group) * options_.head_dim;
    for (int h : options_.kv_heads) {
      const float* first = q + static_cast<size_t>(h) * head_floats;
      p.q.insert(p.q.end(), first, first + head_floats);
    }
    pending_.push_back(std::move(p));
  }
  return ranges;
}

Status FidelityProbe::observe_stored(int layer, int64_t n_tokens) {
  return inner_ != nullptr ? inner_->observe_stored(layer, n_tokens) : Status::ok();
}

Result<std::vector<TokenRange>> FidelityProbe::forecast(int layer, int64_t pos, int64_t n_stored, const float* q,
                                                        ThreadPool& pool, bool keep) {
  if (inner_ == nullptr) return std::vector<TokenRange>();
  return inner_->forecast(layer, pos, n_stored, q, pool, keep);
}

Result<std::vector<TokenRange>> FidelityProbe::select_continuation(int layer, int64_t pos0, int64_t n,
                                                                   const float* q_last, ThreadPool& pool) {
  if (inner_ == nullptr) return std::vector<TokenRange>();
  return inner_->select_continuation(layer, pos0, n, q_last, pool);
}

Status FidelityProbe::observe_layer_input(int layer, int64_t pos, const float* x) {
  return inner_ != nullptr ? inner_->observe_layer_input(layer, pos, x) : Status::ok();
}

void FidelityProbe::observe_attention(int layer, int64_t pos, std::span<const TokenRange> ranges,
                                      std::span<const float> mass) {
  if (inner_ != nullptr) inner_->observe_attention(layer, pos, ranges, mass);
}

void FidelityProbe::truncate(int64_t n_tokens) {
  const size_t row = options_.kv_heads.size() * static_cast<size_t>(options_.head_dim);
  for (auto* store : {&keys_, &values_}) {
    for (std::vector<uint16_t>& s : *store) s.resize(std::min(s.size(), static_cast<size_t>(n_tokens) * row));
  }
  std::erase_if(pending_, [&](const Pending& p) { return p.pos >= n_tokens; });
  if (inner_ != nullptr) inner_->truncate(n_tokens);
}

Result<StepFidelity> FidelityProbe::measure() {
  StepFidelity f;
  const int d = options_.head_dim;
  const int group = options_.n_head / options_.n_head_kv;
  const auto n_sampled = static_cast<int64_t>(options_.kv_heads.size());
  std::vector<float> k, v, o_full(d), o_sel(d);
  std::vector<double> p, chunk;
  for (const Pending& q : pending_) {
    const int64_t n = q.pos + 1;
    const std::vector<uint16_t>& keys = keys_[q.slot];
    const std::vector<uint16_t>& values = values_[q.slot];
    if (static_cast<int64_t>(std::min(keys.size(), values.size())) < n * n_sampled * d) {
      return invalid_argument("fidelity probe: a query of layer " + std::to_string(options_.layers[q.slot]) +
                              " at position " + std::to_string(q.pos) + " sees KV the probe was not given");
    }
    std::vector<char> picked(static_cast<size_t>(n), 0);
    for (const TokenRange& r : q.ranges) {
      for (int64_t t = std::max<int64_t>(r.begin, 0); t < std::min(r.end, n); ++t) picked[t] = 1;
    }
    k.resize(static_cast<size_t>(n) * d);
    v.resize(k.size());
    p.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n_sampled; ++j) {
      for (int64_t t = 0; t < n; ++t) {
        const size_t at = static_cast<size_t>((t * n_sampled + j) * d);
        for (int c = 0; c < d; ++c) {
          k[t * d + c] = f16_to_f32(keys[at + c]);
          v[t * d + c] = f16_to_f32(values[at + c]);
        }
      }
      for (int g = 0; g < group; ++g) {
        const float* qh = q.q.data() + (j * group + g) * d;
        double top = -INFINITY;
        for (int64_t t = 0; t < n; ++t) {
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += static_cast<double>(qh[c]) * k[t * d + c];
          p[t] = kernels::softcap(dot * options_.scale, options_.softcap);
          top = std::max(top, p[t]);
        }
        double total = 0, covered = 0;
        for (int64_t t = 0; t < n; ++t) {
          p[t] = std::exp(p[t] - top);
          total += p[t];
          covered += picked[t] != 0 ? p[t] : 0.0;
        }
        std::fill(o_full.begin(), o_full.end(), 0.0f);
        std::fill(o_sel.begin(), o_sel.end(), 0.0f);
        for (int64_t t = 0; t < n; ++t) {
          const auto w_full = static_cast<float>(p[t] / total);
          const auto w_sel = picked[t] != 0 ? static_cast<float>(p[t] / covered) : 0.0f;
          for (int c = 0; c < d; ++c) {
            o_full[c] += w_full * v[t * d + c];
            o_sel[c] += w_sel * v[t * d + c];
          }
        }
        double err = 0, norm = 0;
        for (int c = 0; c < d; ++c) {
          err += static_cast<double>(o_sel[c] - o_full[c]) * (o_sel[c] - o_full[c]);
          norm += static_cast<double>(o_full[c]) * o_full[c];
        }
        chunk.assign(static_cast<size_t>((n + kProfileChunkTokens - 1) / kProfileChunkTokens), 0.0);
        for (int64_t t = 0; t < n; ++t) chunk[t / kProfileChunkTokens] += p[t] / total;
        std::sort(chunk.begin(), chunk.end(), std::greater<>());
        const size_t n_top = std::max<size_t>(1, chunk.size() / 10);
        double top10 = 0;
        for (size_t c = 0; c < n_top; ++c) top10 += chunk[c];
        f.mass_covered += covered / total;
        f.output_error += norm > 0 ? std::sqrt(err / norm) : 0.0;
        f.top10_chunk_mass += top10;
        ++f.n_samples;
      }
    }
  }
  pending_.clear();
  if (f.n_samples > 0) {
    f.mass_covered /= f.n_samples;
    f.output_error /= f.n_samples;
    f.top10_chunk_mass /= f.n_samples;
  }
  return f;
}

uint64_t FidelityProbe::memory_bytes() const {
  uint64_t b = 0;
  for (const auto* store : {&keys_, &values_}) {
    for (const std::vector<uint16_t>& s : *store) b += s.capacity() * sizeof(uint16_t);
  }
  for (const Pending& p : pending_) b += p.q.capacity() * sizeof(float) + p.ranges.capacity() * sizeof(TokenRange);
  return b;
}

}  // namespace leoam::sparse
