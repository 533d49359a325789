// Synthetic KV: keys and values for a model's KV shape, skewed the way real ones are, made position
// by position from a seed, so a benchmark can fill a store at 7B scale and 64K tokens without
// hours of prefill (FlexGen's dummy mode, but not i.i.d.). Lives in model/ because the keys are
// rotated with the model's RoPE. A key is a topic's cluster centre in the slowly turning channels
// (runs of positions share a topic, as a paragraph does), plus unit noise, a few outlier channels,
// and a gain at the sink and the heavy-hitter positions; values are i.i.d. unit noise. Every draw
// comes from a stream keyed by (seed, layer, position), so any block split gives the same numbers.
// The generator term by term: docs/model.md#synthetic-kv
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/rope.h"

namespace leoam {

struct SyntheticKvOptions {
  int n_layer = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int64_t n_ctx = 0;  // positions that can be generated: [0, n_ctx)
  uint64_t seed = 1;
  int mean_run_tokens = 256;     // a topic run (paragraph)
  int n_topics = 32;             // distinct cluster centres per layer and head
  float centre_scale = 3.0f;     // cluster centre over the noise, in the slowest channels
  double heavy_hitter_fraction = 0.002;
  float heavy_hitter_gain = 8.0f;
  bool hitters_per_head = false;  // heavy-hitter positions drawn per layer and KV head
  float sink_gain = 16.0f;
  int n_outlier_channels = 2;    // per head; at most head_dim / 8
  float outlier_magnitude = 10.0f;
};

class SyntheticKv {
 public:
  // `rope`'s head_dim must be options.head_dim. Fails on a non-positive dimension or count, or
  // more outlier channels than head_dim / 8.
  static Result<SyntheticKv> create(const SyntheticKvOptions& options, const Rope& rope);

  // Positions [pos0, pos0 + n) of `layer` (inside [0, n_ctx)):
  // k, v: [n][n_kv_heads][head_dim] f32, k post-RoPE (what KvCache::append takes).
  void generate(int layer, int64_t pos0, int64_t n, float* k, float* v) const;

  const SyntheticKvOptions& options() const { return options_; }
  int topic(int64_t pos) const;
  // Whether pos is a heavy hitter of (layer, KV head); without hitters_per_head, of every one.
  bool is_heavy_hitter(int layer, int head, int64_t pos) const;
  // The outlier channels of every head, ascending.
  const std::vector<int>& outlier_channels() const { return outlier_channels_; }
  // The RoPE partner of channel c (c itself when c is not rotated).
  int rope_partner(int c) const;

 private:
  SyntheticKv(const SyntheticKvOptions& options, const Rope& rope);
  const float* centre(int layer, int head, int topic) const;
  const float* hitter(int layer, int head) const;

  SyntheticKvOptions options_;
  Rope rope_;
  std::vector<float> slowness_;          // [head_dim] w(c)
  std::vector<int> outlier_channels_;
  std::vector<float> centres_;           // [n_layer][n_kv_heads][n_topics][head_dim], pre-scaled by w
  std::vector<float> hitters_;           // [n_layer][n_kv_heads][head_dim], pre-scaled by w
  std::vector<float> outliers_;          // [n_layer][n_kv_heads][head_dim]: 0 or +-outlier_magnitude
  std::vector<int64_t> run_starts_;      // topic runs: first position of each, ascending
  std::vector<int> run_topics_;          // [runs]
};

}  // namespace leoam
