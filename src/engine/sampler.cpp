#include "engine/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <locale>
#include <sstream>

namespace leoam {
namespace sampling {

void apply_repeat_penalty(std::span<float> logits, std::span<const int32_t> recent, float penalty) {
  if (penalty == 1.0f || recent.empty()) return;
  // Each distinct token is penalized once, however often it occurs (llama.cpp's repeat penalty).
  std::vector<int32_t> ids(recent.begin(), recent.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const auto n_vocab = static_cast<int64_t>(logits.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab) continue;
    float& l = logits[static_cast<size_t>(id)];
    l = l > 0.0f ? l / penalty : l * penalty;
  }
}

int32_t argmax(std::span<const float> logits) {
  assert(!logits.empty());
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: ties keep the lower id
  }
  return static_cast<int32_t>(best);
}

std::vector<TokenCandidate> make_candidates(std::span<const float> logits) {
  std::vector<TokenCandidate> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = {static_cast<int32_t>(i), logits[i], 0.0f};
  return out;
}

void top_k(std::vector<TokenCandidate>& candidates, int k) {
  auto by_logit = [](const TokenCandidate& a, const TokenCandidate& b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
  };
  if (k <= 0 || static_cast<size_t>(k) >= candidates.size()) {
    std::sort(candidates.begin(), candidates.end(), by_logit);
    return;
  }
  std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end(), by_logit);
  candidates.resize(static_cast<size_t>(k));
}

void softmax(std::vector<TokenCandidate>& candidates, float temperature) {
  assert(temperature > 0.0f);
  if (candidates.empty()) return;
  float max_logit = candidates[0].logit;
  for (const auto& c : candidates) max_logit = std::max(max_logit, c.logit);
  double sum = 0.0;
  for (auto& c : candidates) {
    c.p = std::exp((c.logit - max_logit) / temperature);
    sum += c.p;
  }
  for (auto& c : candidates) c.p = static_cast<float>(c.p / sum);
}

namespace {

void renormalize(std::vector<TokenCandidate>& candidates) {
  double sum = 0.0;
  for (const auto& c : candidates) sum += c.p;
  if (sum <= 0.0) return;
  for (auto& c : candidates) c.p = static_cast<float>(c.p / sum);
}

}  // namespace

void top_p(std::vector<TokenCandidate>& candidates, float top_p) {
  if (top_p >= 1.0f || candidates.empty()) return;
  double mass = 0.0;
  size_t n_keep = candidates.size();
  for (size_t i = 0; i < candidates.size(); ++i) {
    mass += candidates[i].p;
    if (mass >= top_p) {
      n_keep = i + 1;
      break;
    }
  }
  candidates.resize(n_keep);
  renormalize(candidates);
}

void min_p(std::vector<TokenCandidate>& candidates, float min_p) {
  if (min_p <= 0.0f || candidates.empty()) return;
  float max_p = 0.0f;
  for (const auto& c : candidates) max_p = std::max(max_p, c.p);
  const float threshold = min_p * max_p;
  std::erase_if(candidates, [threshold](const TokenCandidate& c) { return c.p < threshold; });
  renormalize(candidates);
}

int32_t draw(const std::vector<TokenCandidate>& candidates, std::mt19937_64& rng) {
  assert(!candidates.empty());
  double sum = 0.0;
  for (const auto& c : candidates) sum += c.p;
  // 53 random bits -> a double uniform in [0, 1).
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  const double target = u * sum;
  double mass = 0.0;
  for (const auto& c : candidates) {
    mass += c.p;
    if (target < mass) return c.id;
  }
  return candidates.back().id;  // rounding left target == sum
}

}  // namespace sampling

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {}

std::string Sampler::rng_state() const {
  std::ostringstream out;
  out.imbue(std::locale::classic());  // no digit grouping from a global locale
  out << rng_;
  return out.str();
}

Status Sampler::restore_rng_state(std::string_view state) {
  std::istringstream in{std::string(state)};
  in.imbue(std::locale::classic());
  std::mt19937_64 rng;
  in >> rng;
  const bool parsed = !in.fail();
  in >> std::ws;
  if (!parsed || !in.eof()) {
    return invalid_argument("sampler state (" + std::to_string(state.size()) +
                            " bytes) is not valid: expected a std::mt19937_64 state as Sampler::rng_state() "
                            "writes it (decimal numbers separated by spaces) and nothing after it");
  }
  rng_ = rng;
  return Status::ok();
}

void Sampler::accept(int32_t token) {
  if (options_.repeat_last_n <= 0) return;
  recent_.push_back(token);
  while (recent_.size() > static_cast<size_t>(options_.repeat_last_n)) recent_.pop_front();
}

int32_t Sampler::sample(std::span<const float> logits) {
  assert(!logits.empty());
  std::span<const float> row = logits;
  if (options_.repeat_penalty != 1.0f && !recent_.empty()) {
    scratch_logits_.assign(logits.begin(), logits.end());
    const std::vector<int32_t> recent(recent_.begin(), recent_.end());
    sampling::apply_repeat_penalty(scratch_logits_, recent, options_.repeat_penalty);
    row = scratch_logits_;
  }
  if (options_.temperature <= 0.0f) return sampling::argmax(row);

  candidates_.resize(row.size());
  for (size_t i = 0; i < row.size(); ++i) candidates_[i] = {static_cast<int32_t>(i), row[i], 0.0f};
  sampling::top_k(candidates_, options_.top_k);
  sampling::softmax(candidates_, options_.temperature);
  sampling::top_p(candidates_, options_.top_p);
  sampling::min_p(candidates_, options_.min_p);
  return sampling::draw(candidates_, rng_);
}

}  // namespace leoam
