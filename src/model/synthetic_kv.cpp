#include "model/synthetic_kv.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/splitmix64.h"

namespace leoam {

namespace {

// Draws from a splitmix64 stream.
class Rng {
 public:
  explicit Rng(uint64_t seed) : bits_(seed) {}
  uint64_t next() { return bits_.next(); }
  // Near gaussian, mean 0, variance 1: four 16-bit uniforms summed (variance 4/12 each on [0, 1)).
  float normal() {
    const uint64_t r = next();
    const uint32_t s = static_cast<uint32_t>(r & 0xffff) + static_cast<uint32_t>((r >> 16) & 0xffff) +
                       static_cast<uint32_t>((r >> 32) & 0xffff) + static_cast<uint32_t>(r >> 48);
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3): 1 / sqrt(4 / 12)
    return (static_cast<float>(s) - 2.0f * 65535.0f) * kScale;
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  SplitMix64 bits_;
};

uint64_t mix(uint64_t a, uint64_t b) { return Rng(a * 0x9e3779b97f4a7c15ull ^ b).next(); }

// Stream tags, so the streams of one (seed, layer, position) never overlap.
constexpr uint64_t kTagKv = 1, kTagCentre = 2, kTagHitter = 3, kTagOutlier = 4, kTagRuns = 5, kTagHeavy = 6;

}  // namespace

Result<SyntheticKv> SyntheticKv::create(const SyntheticKvOptions& o, const Rope& rope) {
  const auto bad = [](const std::string& m) { return invalid_argument("synthetic KV: " + m); };
  if (o.n_layer <= 0 || o.n_kv_heads <= 0 || o.head_dim <= 0 || o.n_ctx <= 0) {
    return bad("layers, KV heads, head dim and context must be positive");
  }
  if (rope.head_dim() != o.head_dim) {
    return bad("RoPE head dim " + std::to_string(rope.head_dim()) + " is not the KV's " + std::to_string(o.head_dim));
  }
  if (o.mean_run_tokens <= 0 || o.n_topics <= 0) return bad("mean_run_tokens and n_topics must be positive");
  if (o.n_outlier_channels < 0 || o.n_outlier_channels > o.head_dim / 8) {
    return bad("n_outlier_channels must be in [0, head_dim / 8]");
  }
  if (!(o.heavy_hitter_fraction >= 0 && o.heavy_hitter_fraction < 1)) return bad("heavy_hitter_fraction must be in [0, 1)");
  return SyntheticKv(o, rope);
}

SyntheticKv::SyntheticKv(const SyntheticKvOptions& o, const Rope& rope) : options_(o), rope_(rope) {
  const int d = o.head_dim;
  const int n_pairs = rope.n_rot() / 2;
  const bool neox = rope.shape(1).neox;
  // w(c): the pair index over the last one (the slowest); unrotated channels count as slowest.
  slowness_.assign(d, 1.0f);
  for (int c = 0; c < rope.n_rot(); ++c) {
    const int pair = neox ? c % n_pairs : c / 2;
    slowness_[c] = n_pairs > 1 ? static_cast<float>(pair) / static_cast<float>(n_pairs - 1) : 1.0f;
  }
  // Outlier channels: the first channel of the slowest pairs (of the unrotated tail first).
  for (int c = d - 1; c >= 0 && static_cast<int>(outlier_channels_.size()) < o.n_outlier_channels; --c) {
    if (rope_partner(c) >= c) outlier_channels_.push_back(c);
  }
  std::sort(outlier_channels_.begin(), outlier_channels_.end());

  const size_t n_heads = static_cast<size_t>(o.n_layer) * o.n_kv_heads;
  centres_.resize(n_heads * o.n_topics * d);
  hitters_.resize(n_heads * d);
  outliers_.assign(n_heads * d, 0.0f);
  for (size_t lh = 0; lh < n_heads; ++lh) {
    Rng rc(mix(o.seed, mix(kTagCentre, lh)));
    for (int t = 0; t < o.n_topics; ++t) {
      float* centre = centres_.data() + (lh * o.n_topics + t) * d;
      for (int c = 0; c < d; ++c) centre[c] = rc.normal() * o.centre_scale * slowness_[c];
    }
    Rng rh(mix(o.seed, mix(kTagHitter, lh)));
    for (int c = 0; c < d; ++c) hitters_[lh * d + c] = rh.normal() * slowness_[c];
    Rng ro(mix(o.seed, mix(kTagOutlier, lh)));
    for (int c : outlier_channels_) outliers_[lh * d + c] = (ro.next() & 1) != 0 ? o.outlier_magnitude : -o.outlier_magnitude;
  }
  Rng rr(mix(o.seed, kTagRuns));
  for (int64_t p = 0; p < o.n_ctx;) {
    run_starts_.push_back(p);
    run_topics_.push_back(static_cast<int>(rr.next() % static_cast<uint64_t>(o.n_topics)));
    p += 1 + static_cast<int64_t>(rr.next() % static_cast<uint64_t>(2 * o.mean_run_tokens - 1));
  }
}

int SyntheticKv::rope_partner(int c) const {
  const int n_rot = rope_.n_rot();
  if (c >= n_rot) return c;
  if (rope_.shape(1).neox) return c < n_rot / 2 ? c + n_rot / 2 : c - n_rot / 2;
  return c ^ 1;
}

int SyntheticKv::topic(int64_t pos) const {
  const auto it = std::upper_bound(run_starts_.begin(), run_starts_.end(), pos);
  return run_topics_[static_cast<size_t>(it - run_starts_.begin()) - 1];
}

bool SyntheticKv::is_heavy_hitter(int layer, int head, int64_t pos) const {
  uint64_t key = mix(kTagHeavy, static_cast<uint64_t>(pos));
  if (options_.hitters_per_head) key = mix(key, static_cast<uint64_t>(layer) * options_.n_kv_heads + head);
  return Rng(mix(options_.seed, key)).uniform() < options_.heavy_hitter_fraction;
}

const float* SyntheticKv::centre(int layer, int head, int topic) const {
  const size_t lh = static_cast<size_t>(layer) * options_.n_kv_heads + head;
  return centres_.data() + (lh * options_.n_topics + topic) * options_.head_dim;
}

const float* SyntheticKv::hitter(int layer, int head) const {
  return hitters_.data() + (static_cast<size_t>(layer) * options_.n_kv_heads + head) * options_.head_dim;
}

void SyntheticKv::generate(int layer, int64_t pos0, int64_t n, float* k, float* v) const {
  const int d = options_.head_dim;
  const int n_heads = options_.n_kv_heads;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = pos0 + t;
    const int tp = topic(pos);
    const bool shared_hitter = !options_.hitters_per_head && is_heavy_hitter(layer, 0, pos);
    Rng rng(mix(options_.seed, mix(kTagKv, mix(static_cast<uint64_t>(layer), static_cast<uint64_t>(pos)))));
    float* kt = k + t * n_heads * d;
    float* vt = v + t * n_heads * d;
    for (int h = 0; h < n_heads; ++h) {
      const float* ce = centre(layer, h, tp);
      const float* hi = hitter(layer, h);
      const float* out = outliers_.data() + (static_cast<size_t>(layer) * n_heads + h) * d;
      const bool hitter = options_.hitters_per_head ? is_heavy_hitter(layer, h, pos) : shared_hitter;
      const float gain = pos == 0 ? options_.sink_gain : hitter ? options_.heavy_hitter_gain : 0.0f;
      for (int c = 0; c < d; ++c) kt[h * d + c] = ce[c] + rng.normal() + out[c] + gain * hi[c];
      for (int c = 0; c < d; ++c) vt[h * d + c] = rng.normal();
    }
  }
  const int half = rope_.n_rot() / 2;
  std::vector<float> cos(static_cast<size_t>(n) * half), sin(cos.size());
  rope_.fill_tables(pos0, n, cos.data(), sin.data());
  rope_.apply(k, n, n_heads, cos.data(), sin.data());
}

}  // namespace leoam
