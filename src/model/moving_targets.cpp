#include "model/moving_targets.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/splitmix64.h"

namespace leoam {

Result<MovingTargets> MovingTargets::create(const SyntheticKv& kv, const MovingTargetsOptions& o) {
  const auto bad = [](const std::string& m) { return invalid_argument("moving targets: " + m); };
  const SyntheticKvOptions& shape = kv.options();
  if (o.n_head <= 0 || o.n_head % shape.n_kv_heads != 0) return bad("n_head must be a positive multiple of the KV heads");
  if (o.n_targets <= 0 || o.period <= 0) return bad("n_targets and period must be positive");
  if (!(o.lean > 0.0f) || !(o.scale > 0.0f)) return bad("lean and scale must be positive");
  if (o.first < 0 || o.last > shape.n_ctx || o.last - o.first < o.n_targets) {
    return bad("targets from [" + std::to_string(o.first) + ", " + std::to_string(o.last) + ") need " +
               std::to_string(o.n_targets) + " positions inside the KV's [0, " + std::to_string(shape.n_ctx) + ")");
  }
  return MovingTargets(kv, o);
}

MovingTargets::MovingTargets(const SyntheticKv& kv, const MovingTargetsOptions& options)
    : kv_(&kv), options_(options) {
  const SyntheticKvOptions& s = kv.options();
  targets_.resize(static_cast<size_t>(s.n_layer) * s.n_kv_heads * options_.n_targets);
  steer_.resize(static_cast<size_t>(s.n_layer) * s.n_kv_heads * s.head_dim);
}

void MovingTargets::prepare(int64_t step) {
  const int64_t epoch = step / options_.period;
  if (epoch == epoch_) return;
  epoch_ = epoch;
  const SyntheticKvOptions& s = kv_->options();
  const int d = s.head_dim;
  const size_t row = static_cast<size_t>(s.n_kv_heads) * d;
  std::vector<bool> shared(static_cast<size_t>(d), false);  // the outlier channels and their partners
  for (int c : kv_->outlier_channels()) shared[c] = shared[kv_->rope_partner(c)] = true;
  std::vector<float> k(row), v(row), dir(static_cast<size_t>(d));
  std::vector<std::vector<float>> keys(static_cast<size_t>(options_.n_targets));
  SplitMix64 rng(options_.seed * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(epoch));
  const auto span = static_cast<uint64_t>(options_.last - options_.first);
  for (int il = 0; il < s.n_layer; ++il) {
    for (int h = 0; h < s.n_kv_heads; ++h) {
      int64_t* t = targets_.data() + (static_cast<size_t>(il) * s.n_kv_heads + h) * options_.n_targets;
      for (int i = 0; i < options_.n_targets; ++i) t[i] = options_.first + static_cast<int64_t>(rng.next() % span);
      std::sort(t, t + options_.n_targets);
      std::fill(dir.begin(), dir.end(), 0.0f);
      for (int i = 0; i < options_.n_targets; ++i) {
        kv_->generate(il, t[i], 1, k.data(), v.data());
        keys[i].assign(k.begin() + h * d, k.begin() + (h + 1) * d);
        for (int c = 0; c < d; ++c) dir[c] += shared[c] ? 0.0f : keys[i][c];
      }
      double norm = 0;
      for (float x : dir) norm += static_cast<double>(x) * x;
      norm = std::sqrt(norm);
      double along = 0;  // the mean of u . k over the targets, u = dir / |dir|
      for (int i = 0; i < options_.n_targets; ++i) {
        for (int c = 0; c < d; ++c) along += dir[c] / norm * keys[i][c];
      }
      along /= options_.n_targets;
      const double gain = along > 0 ? options_.lean / (options_.scale * along) : 0.0;
      float* out = steer_.data() + (static_cast<size_t>(il) * s.n_kv_heads + h) * d;
      for (int c = 0; c < d; ++c) out[c] = static_cast<float>(gain * dir[c] / norm);
    }
  }
}

void MovingTargets::steer(int layer, float* q) const {
  const SyntheticKvOptions& s = kv_->options();
  const int d = s.head_dim;
  const int group = options_.n_head / s.n_kv_heads;
  const float* base = steer_.data() + static_cast<size_t>(layer) * s.n_kv_heads * d;
  for (int hq = 0; hq < options_.n_head; ++hq) {
    const float* add = base + static_cast<size_t>(hq / group) * d;
    for (int c = 0; c < d; ++c) q[static_cast<size_t>(hq) * d + c] += add[c];
  }
}

std::span<const int64_t> MovingTargets::targets(int layer, int kv_head) const {
  const size_t at = (static_cast<size_t>(layer) * kv_->options().n_kv_heads + kv_head) * options_.n_targets;
  return {targets_.data() + at, static_cast<size_t>(options_.n_targets)};
}

}  // namespace leoam
