#include "kv/residency.h"

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <string>
#include <utility>

namespace leoam {

namespace {

using Move = Residency::Move;
using Plan = Residency::Plan;

// "1.0 MiB", "0.25 MiB": at most three decimals, at least one.
std::string mib_string(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  std::string s = buf;
  while (s.back() == '0' && s[s.size() - 2] != '.') s.pop_back();
  return s + " MiB";
}

// Adds (sign > 0) or removes one chunk's bytes in `tier`; the disk is unbounded and not counted.
void account(const ResidencyOptions& options, Tier tier, int sign, uint64_t& used_device, uint64_t& used_host) {
  if (tier == Tier::kDisk) return;
  uint64_t& used = tier == Tier::kDevice ? used_device : used_host;
  const uint64_t bytes = tier == Tier::kDevice ? options.device_chunk_bytes : options.host_chunk_bytes;
  used = sign > 0 ? used + bytes : used - bytes;
}

std::string key_name(ChunkKey key) {
  return "KV chunk (layer " + std::to_string(key.layer) + ", index " + std::to_string(key.index) + ")";
}

// Builds a plan against a simulated copy of the byte usage; the residency itself is only read.
// Each chunk moves at most once in a plan, so a victim is never a chunk the plan already moves.
// make_room_*() choose all their victims before adding any move: a failed attempt adds nothing.
class PlanBuilder {
 public:
  // `importance_ceiling`: when set, only chunks of strictly lower importance may be displaced
  // (which also keeps a promoted chunk from being its own victim).
  PlanBuilder(const Residency& residency, std::optional<float> importance_ceiling)
      : residency_(residency),
        options_(residency.options()),
        importance_ceiling_(importance_ceiling),
        used_device_(residency.used_bytes(Tier::kDevice)),
        used_host_(residency.used_bytes(Tier::kHost)) {}

  // Demotes device victims (each to the host when room can be made there, else to disk) until
  // one more chunk fits on the device. False when the victims run out.
  bool make_room_on_device() {
    const std::optional<std::vector<ChunkKey>> victims = victims_for_room(Tier::kDevice);
    if (!victims) return false;
    for (ChunkKey victim : *victims) {
      if (make_room_on_host()) {
        add({victim, Tier::kDevice, Tier::kHost, false});
      } else {
        add(to_disk(victim, Tier::kDevice));
      }
    }
    return true;
  }

  // Demotes host victims to disk until one more chunk fits on the host. False when the host has
  // no budget, a chunk is larger than it, or the victims run out.
  bool make_room_on_host() {
    if (options_.host_budget_bytes == 0) return false;
    const std::optional<std::vector<ChunkKey>> victims = victims_for_room(Tier::kHost);
    if (!victims) return false;
    for (ChunkKey victim : *victims) add(to_disk(victim, Tier::kHost));
    return true;
  }

  void add(const Move& move) {
    if (move.from) account(options_, *move.from, -1, used_device_, used_host_);
    account(options_, move.to, +1, used_device_, used_host_);
    assert(used_device_ <= options_.device_budget_bytes && used_host_ <= options_.host_budget_bytes &&
           "a plan must keep every tier within its budget after each move");
    plan_.moves.push_back(move);
  }

  Plan take_plan() { return std::move(plan_); }

 private:
  // The victims that, demoted in this order, leave room for one more chunk in `tier` (device or
  // host); nullopt when a chunk is larger than the budget or the victims run out.
  std::optional<std::vector<ChunkKey>> victims_for_room(Tier tier) const {
    const bool device = tier == Tier::kDevice;
    const uint64_t budget = device ? options_.device_budget_bytes : options_.host_budget_bytes;
    const uint64_t chunk_bytes = device ? options_.device_chunk_bytes : options_.host_chunk_bytes;
    if (chunk_bytes > budget) return std::nullopt;
    std::vector<ChunkKey> victims;
    for (uint64_t used = device ? used_device_ : used_host_; used + chunk_bytes > budget; used -= chunk_bytes) {
      const std::optional<ChunkKey> victim = next_victim(tier, victims);
      if (!victim) return std::nullopt;
      victims.push_back(*victim);
    }
    return victims;
  }

  // The first chunk in eviction order among the unpinned chunks of `tier` that are below the
  // importance ceiling, not moved by the plan yet, and not in `chosen`.
  std::optional<ChunkKey> next_victim(Tier tier, const std::vector<ChunkKey>& chosen) const {
    const auto planned = [&](ChunkKey key) {
      return std::find(chosen.begin(), chosen.end(), key) != chosen.end() ||
             std::any_of(plan_.moves.begin(), plan_.moves.end(), [key](const Move& m) { return m.chunk == key; });
    };
    return residency_.first_victim(tier, importance_ceiling_, planned);
  }

  Move to_disk(ChunkKey key, Tier from) const {
    return {key, from, Tier::kDisk, !residency_.find(key)->on_disk};
  }

  const Residency& residency_;
  const ResidencyOptions& options_;
  std::optional<float> importance_ceiling_;
  uint64_t used_device_;
  uint64_t used_host_;
  Plan plan_;
};

}  // namespace

namespace {

// The queues' order, for std's max-heap functions over queue entries: the first victim on top.
constexpr auto kLaterVictim = [](const auto& a, const auto& b) { return b.e < a.e; };

}  // namespace

Residency::Slot& Residency::must_find_slot(ChunkKey key) {
  auto* s = const_cast<Slot*>(find_slot(key));
  assert(s != nullptr && "the chunk must have a residency entry");
  return *s;
}

const Residency::Slot* Residency::find_slot(ChunkKey key) const {
  if (key.layer < 0 || key.index < 0 || static_cast<size_t>(key.layer) >= chunks_.size()) return nullptr;
  const std::vector<std::optional<Slot>>& layer = chunks_[static_cast<size_t>(key.layer)];
  if (static_cast<size_t>(key.index) >= layer.size() || !layer[static_cast<size_t>(key.index)]) return nullptr;
  return &*layer[static_cast<size_t>(key.index)];
}

bool Residency::live(const Queued& q) const {
  const Slot* s = find_slot(q.e.key);
  return s != nullptr && s->stamp == q.stamp;
}

std::vector<Residency::Evictable> Residency::evictable(Tier tier) const {
  std::vector<Evictable> out;
  for (const Queued& q : queue_[tier == Tier::kDevice ? 0 : 1]) {
    if (live(q)) out.push_back(q.e);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<ChunkKey> Residency::first_victim(Tier tier, std::optional<float> below,
                                                const std::function<bool(ChunkKey)>& skip) const {
  std::vector<Queued>& heap = queue_[tier == Tier::kDevice ? 0 : 1];
  passed_.clear();
  std::optional<ChunkKey> found;
  while (!heap.empty()) {
    const Queued top = heap.front();
    std::pop_heap(heap.begin(), heap.end(), kLaterVictim);
    heap.pop_back();
    if (!live(top)) continue;  // stale: gone for good
    passed_.push_back(top);
    if (below && !(top.e.importance < *below)) break;  // the rest are no less important
    if (!skip(top.e.key)) {
      found = top.e.key;
      break;
    }
  }
  for (const Queued& q : passed_) {
    heap.push_back(q);
    std::push_heap(heap.begin(), heap.end(), kLaterVictim);
  }
  return found;
}

Residency::Residency(const ResidencyOptions& options) : options_(options) {}

Result<Residency::Plan> Residency::plan_insert(ChunkKey key) const {
  if (find(key) != nullptr) {
    return invalid_argument(key_name(key) + " is already resident; a chunk is inserted once");
  }
  PlanBuilder builder(*this, std::nullopt);
  if (!builder.make_room_on_device()) {
    uint64_t pinned_bytes = 0;
    for_each_chunk([&](ChunkKey, const ChunkResidency& r) {
      if (r.tier == Tier::kDevice && r.pins > 0) pinned_bytes += options_.device_chunk_bytes;
    });
    return invalid_argument("device KV budget of " + mib_string(options_.device_budget_bytes) +
                            " cannot hold another chunk of " + mib_string(options_.device_chunk_bytes) + ": " +
                            mib_string(pinned_bytes) +
                            " is pinned (sink, recent window, open chunks); raise the device budget")
        .about(Setting::kKvDeviceBudget);
  }
  builder.add({key, std::nullopt, Tier::kDevice, false});
  return builder.take_plan();
}

Result<Residency::Plan> Residency::plan_promote(ChunkKey key, Tier to) const {
  const ChunkResidency* r = find(key);
  if (r == nullptr) return not_found(key_name(key) + " is not resident; it cannot be promoted");
  if (to > r->tier) {
    return invalid_argument(key_name(key) + " is on the " + tier_name(r->tier) +
                            " tier; it cannot be promoted to the slower " + tier_name(to) +
                            " tier (chunks move down only as victims of a plan)");
  }
  if (to == r->tier || r->pins > 0) return Plan{};
  PlanBuilder builder(*this, r->importance);
  const bool room = to == Tier::kDevice ? builder.make_room_on_device() : builder.make_room_on_host();
  if (!room) return Plan{};
  builder.add({key, r->tier, to, false});
  return builder.take_plan();
}

void Residency::unindex(Slot& s) {
  if (s.stamp == 0) return;
  --n_evictable_[s.entry.tier == Tier::kDevice ? 0 : 1];
  s.stamp = 0;  // its queued entry is stale now
}

void Residency::index(ChunkKey key, Slot& s) {
  const ChunkResidency& r = s.entry;
  if (r.tier == Tier::kDisk || r.pins > 0) return;
  const int t = r.tier == Tier::kDevice ? 0 : 1;
  std::vector<Queued>& heap = queue_[t];
  if (s.stamp == 0) ++n_evictable_[t];
  s.stamp = next_stamp_++;
  heap.push_back({{r.importance, r.last_use, key}, s.stamp});
  std::push_heap(heap.begin(), heap.end(), kLaterVictim);
  // Stale entries past the live ones: drop them all at once (amortized O(1) a push).
  if (static_cast<int64_t>(heap.size()) > 2 * n_evictable_[t] + 64) {
    std::erase_if(heap, [&](const Queued& q) { return !live(q); });
    std::make_heap(heap.begin(), heap.end(), kLaterVictim);
  }
}

void Residency::reorder(ChunkKey key, Slot& s, float importance, uint64_t last_use) {
  const bool queued = s.stamp != 0;
  s.entry.importance = importance;
  s.entry.last_use = last_use;
  if (queued) index(key, s);  // a new entry where it now sorts; the old one goes stale
}

void Residency::apply(const Move& move) {
  Slot* s = nullptr;
  if (move.from) {
    s = &must_find_slot(move.chunk);
    assert(s->entry.tier == *move.from && "a move must start from the chunk's tier");
    unindex(*s);
    account(options_, *move.from, -1, used_device_, used_host_);
    --n_chunks_[static_cast<int>(*move.from)];
  } else {
    assert(move.chunk.layer >= 0 && move.chunk.index >= 0 && "a chunk key is not negative");
    const auto layer = static_cast<size_t>(move.chunk.layer);
    const auto index = static_cast<size_t>(move.chunk.index);
    if (chunks_.size() <= layer) chunks_.resize(layer + 1);
    if (chunks_[layer].size() <= index) chunks_[layer].resize(index + 1);
    assert(!chunks_[layer][index] && "an insert must name a new chunk");
    s = &chunks_[layer][index].emplace();
    ++n_total_;
  }
  s->entry.tier = move.to;
  if (move.to == Tier::kDisk) s->entry.on_disk = true;
  account(options_, move.to, +1, used_device_, used_host_);
  ++n_chunks_[static_cast<int>(move.to)];
  index(move.chunk, *s);
}

void Residency::erase(ChunkKey key) {
  Slot* s = const_cast<Slot*>(find_slot(key));
  if (s == nullptr) return;
  unindex(*s);
  account(options_, s->entry.tier, -1, used_device_, used_host_);
  --n_chunks_[static_cast<int>(s->entry.tier)];
  chunks_[static_cast<size_t>(key.layer)][static_cast<size_t>(key.index)].reset();
  --n_total_;
}

void Residency::clear() {
  chunks_.clear();
  n_total_ = 0;
  for (auto& heap : queue_) heap.clear();
  n_evictable_ = {};
  n_chunks_ = {};
  used_device_ = 0;
  used_host_ = 0;
}

void Residency::pin(ChunkKey key) {
  Slot& s = must_find_slot(key);
  unindex(s);
  ++s.entry.pins;
}

void Residency::unpin(ChunkKey key) {
  Slot& s = must_find_slot(key);
  assert(s.entry.pins > 0 && "unpin without a matching pin");
  --s.entry.pins;
  index(key, s);
}

void Residency::set_importance(ChunkKey key, float importance) {
  Slot& s = must_find_slot(key);
  reorder(key, s, importance, s.entry.last_use);
}

void Residency::set_on_disk(ChunkKey key) { must_find_slot(key).entry.on_disk = true; }

void Residency::touch(ChunkKey key, uint64_t tick) {
  Slot& s = must_find_slot(key);
  reorder(key, s, s.entry.importance, tick);
}

const ChunkResidency* Residency::find(ChunkKey key) const {
  const Slot* s = find_slot(key);
  return s != nullptr ? &s->entry : nullptr;
}

uint64_t Residency::used_bytes(Tier tier) const {
  return tier == Tier::kDevice ? used_device_ : tier == Tier::kHost ? used_host_ : 0;
}

int64_t Residency::n_chunks(Tier tier) const { return n_chunks_[static_cast<int>(tier)]; }

}  // namespace leoam
