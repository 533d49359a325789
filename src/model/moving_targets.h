// MovingTargets: the query side of a synthetic workload whose importance moves (`bench kv
// --workload moving`): a decode whose attention leans on a few far positions chosen anew every
// few steps, as retrieval and copying do, over synthetic KV (synthetic_kv.h).
//
// Per (layer, KV head) and epoch (period decode steps), n_targets positions are drawn uniformly
// from [first, last). steer() adds to each query head of the KV head's group a vector along the
// sum of those targets' keys (as stored: post-RoPE; without the outlier channels and their RoPE
// partners, which every key of the head shares), scaled so that a target's logit rises by `lean`
// nats on average. The model's own query stays in it: the lean is added, not substituted.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/synthetic_kv.h"

namespace leoam {

struct MovingTargetsOptions {
  int n_head = 0;          // query heads; a multiple of the KV's heads
  float scale = 0.0f;      // attention's scale on q.k
  int n_targets = 4;
  int period = 4;          // decode steps an epoch's targets last
  float lean = 10.0f;      // nats a target's logit rises, on average
  int64_t first = 0, last = 0;  // targets are drawn from [first, last)
  uint64_t seed = 1;
};

class MovingTargets {
 public:
  // `kv` must outlive this. Fails on a bad count, period, lean or scale, or a range outside the
  // KV's positions.
  static Result<MovingTargets> create(const SyntheticKv& kv, const MovingTargetsOptions& options);

  // Makes the steer of decode step `step` (0: the first) current, drawing its epoch's targets when
  // the epoch changes. Outside a timed step: it generates the targets' keys.
  void prepare(int64_t step);
  // Adds the current steer to `layer`'s query q ([n_head][head_dim]), as attention takes it.
  void steer(int layer, float* q) const;
  // The current targets of (layer, KV head), ascending.
  std::span<const int64_t> targets(int layer, int kv_head) const;

 private:
  MovingTargets(const SyntheticKv& kv, const MovingTargetsOptions& options);
  const SyntheticKv* kv_;
  MovingTargetsOptions options_;
  int64_t epoch_ = -1;
  std::vector<int64_t> targets_;  // [n_layer][n_kv_heads][n_targets]
  std::vector<float> steer_;      // [n_layer][n_kv_heads][head_dim]
};

}  // namespace leoam
