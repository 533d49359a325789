// FidelityProbe: how close a selection's attention is to full attention, for `bench kv`'s fidelity
// beside speed. It wraps a selector (or none: every position) and passes everything through; on a
// sample of layers and KV heads it keeps its own copy of every key and value the store receives
// (f16, as the store holds them) and, at each select, the query and the positions picked.
// measure(), called between decode steps (outside the timed part), computes full attention for
// those queries over every visible position and compares the selection with it (StepFidelity).
// Memory: 4 bytes per sampled layer, KV head, position and channel (keys and values), apart from
// what the wrapped policy holds.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/attention_selector.h"

namespace leoam::sparse {

struct FidelityProbeOptions {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 0.0f;            // on q.k, as attention applies it
  float softcap = 0.0f;          // > 0: the scaled scores capped, as attention caps them
  std::vector<int> layers;       // the sampled layers
  std::vector<int> kv_heads;     // the sampled KV heads, each with every query head of its group
};

// Each a mean over the sampled (layer, query head) pairs of the queries since the last call.
struct StepFidelity {
  int n_samples = 0;             // (layer, query head, query) triples measured
  // The share of full attention's softmax mass on the positions the selection attended.
  double mass_covered = 0.0;
  // ||o_sel - o_full|| / ||o_full||, o_sel the softmax over the picks alone (what sparse
  // attention computes), both from the probe's keys and values: the selection's error, apart
  // from the store's codecs.
  double output_error = 0.0;
  // The share of the full mass in the top tenth of kProfileChunkTokens-token chunks: how skewed
  // the step's attention is, under the engine's own queries.
  double top10_chunk_mass = 0.0;
};

class FidelityProbe final : public AttentionSelector {
 public:
  static constexpr int kProfileChunkTokens = 64;

  // `inner` (null: full attention) must outlive the probe. Fails on a bad shape, a sampled layer or
  // head out of range, or an empty sample.
  static Result<std::unique_ptr<FidelityProbe>> create(AttentionSelector* inner, FidelityProbeOptions options,
                                                       int n_layer);

  Result<std::vector<TokenRange>> select(int layer, int64_t pos, const float* q, ThreadPool& pool) override;
  SelectorNeeds needs() const override;
  Status observe_keys(int layer, int64_t pos0, int64_t n, const float* k) override;
  Status observe_values(int layer, int64_t pos0, int64_t n, const float* v) override;
  Status observe_stored(int layer, int64_t n_tokens) override;
  Result<std::vector<TokenRange>> forecast(int layer, int64_t pos, int64_t n_stored, const float* q, ThreadPool& pool,
                                           bool keep) override;
  Result<std::vector<TokenRange>> select_continuation(int layer, int64_t pos0, int64_t n, const float* q_last,
                                                      ThreadPool& pool) override;
  Status observe_layer_input(int layer, int64_t pos, const float* x) override;
  void observe_attention(int layer, int64_t pos, std::span<const TokenRange> ranges,
                         std::span<const float> mass) override;
  void truncate(int64_t n_tokens) override;

  // The queries recorded since the last call against full attention; forgets them. Fails when a
  // query sees a position whose key or value the probe was not given.
  Result<StepFidelity> measure();
  // The probe's own keys, values and pending queries.
  uint64_t memory_bytes() const;

 private:
  FidelityProbe(AttentionSelector* inner, FidelityProbeOptions options, int n_layer);
  struct Pending {
    int slot = 0;                  // index into options_.layers
    int64_t pos = 0;
    std::vector<float> q;          // [kv_heads.size()][group][head_dim]
    std::vector<TokenRange> ranges;
  };
  Status keep(std::vector<std::vector<uint16_t>>& store, int layer, int64_t pos0, int64_t n, const float* x);

  AttentionSelector* inner_;
  FidelityProbeOptions options_;
  std::vector<int> slot_of_layer_;                 // [n_layer]: index into options_.layers, or -1
  std::vector<std::vector<uint16_t>> keys_, values_;  // per slot: [positions][kv_heads.size()][head_dim] f16
  std::vector<Pending> pending_;
};

}  // namespace leoam::sparse
