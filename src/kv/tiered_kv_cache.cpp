#include "kv/tiered_kv_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "core/huge_pages.h"
#include "core/trace.h"
#include "kv/kv_session.h"

namespace leoam {
namespace {

// In MiB to the thousandth, rounded up: a budget the message asks for is enough when given as printed.
std::string mib(uint64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.10g MiB", std::ceil(static_cast<double>(bytes) * 1000.0 / (1 << 20)) / 1000.0);
  return buf;
}

std::string default_session_name() {
  std::random_device rd;
  char buf[48];
  std::snprintf(buf, sizeof(buf), "kv-%d-%08x", static_cast<int>(getpid()), rd());
  return buf;
}

// Owns the gathered bytes of a view made by view().
class OwnedKv final : public KvViewResources {
 public:
  std::vector<uint8_t> k, v;
};

}  // namespace

TieredKvCache::TieredKvCache(const TieredKvCacheOptions& options)
    : options_(options),
      geometry_{options.shape.n_kv_heads, options.shape.head_dim, options.chunk_tokens, options.dtype},
      host_chunk_bytes_(encoded_chunk_bytes(geometry_, options.host_codec)),
      residency_(ResidencyOptions{options.device_budget_bytes, options.host_budget_bytes,
                                  chunk_budget_bytes(options, Tier::kDevice), chunk_budget_bytes(options, Tier::kHost)}) {}

uint64_t TieredKvCache::chunk_budget_bytes(const TieredKvCacheOptions& o, Tier tier) {
  const ChunkGeometry g{o.shape.n_kv_heads, o.shape.head_dim, o.chunk_tokens, o.dtype};
  const uint64_t kv = tier == Tier::kHost ? encoded_chunk_bytes(g, o.host_codec) : g.chunk_bytes();
  return kv + (keeps_abstracts(o) ? g.abstract_bytes() : 0);
}

TieredKvCache::~TieredKvCache() = default;

uint64_t TieredKvCache::min_device_budget_bytes(const TieredKvCacheOptions& o) {
  const int64_t c = std::max(o.chunk_tokens, 1);
  const int64_t sink_chunks = (std::max(o.n_sink_tokens, 0) + c - 1) / c;
  // The recent window can straddle one more chunk than it fills; the open chunk is always there.
  const int64_t recent_chunks = o.n_recent_tokens > 0 ? (o.n_recent_tokens + c - 1) / c + 1 : 1;
  // One chunk more: a new chunk is inserted while the others are still pinned.
  return (static_cast<uint64_t>(std::max(o.shape.n_layer, 0)) * (sink_chunks + recent_chunks) + 1) *
         chunk_budget_bytes(o, Tier::kDevice);
}

uint64_t TieredKvCache::in_memory_device_budget_bytes(const TieredKvCacheOptions& o) {
  const int64_t c = std::max(o.chunk_tokens, 1);
  const int64_t n_chunks = (std::max<int64_t>(o.shape.n_ctx, 0) + c - 1) / c;
  // One chunk more, as in min_device_budget_bytes: a new chunk is inserted before any leaves.
  return std::max((static_cast<uint64_t>(std::max(o.shape.n_layer, 0)) * n_chunks + 1) *
                      chunk_budget_bytes(o, Tier::kDevice),
                  min_device_budget_bytes(o));
}

Result<std::unique_ptr<TieredKvCache>> TieredKvCache::create(const TieredKvCacheOptions& options) {
  const KvCacheShape& s = options.shape;
  if (s.n_layer <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0 || s.n_ctx <= 0) {
    return invalid_argument("tiered KV cache: every dimension must be positive");
  }
  if (options.chunk_tokens < kMinChunkTokens || options.chunk_tokens > kMaxChunkTokens) {
    return invalid_argument("KV chunk size must be in [" + std::to_string(kMinChunkTokens) + ", " +
                            std::to_string(kMaxChunkTokens) + "] tokens, got " + std::to_string(options.chunk_tokens));
  }
  if (options.n_sink_tokens < 0 || options.n_recent_tokens < 0) {
    return invalid_argument("pinned sink and recent token counts must not be negative");
  }
  const uint64_t need = min_device_budget_bytes(options);
  if (options.device_budget_bytes < need) {
    return invalid_argument("device KV budget of " + mib(options.device_budget_bytes) + " is too small: the pinned " +
                            std::to_string(options.n_sink_tokens) + " sink and " +
                            std::to_string(options.n_recent_tokens) + " recent tokens of " +
                            std::to_string(s.n_layer) + " layers in chunks of " +
                            std::to_string(options.chunk_tokens) + " need " + mib(need) + "; raise --kv-device-mb");
  }

  if (options.dir.empty() && options.device_budget_bytes < in_memory_device_budget_bytes(options)) {
    return invalid_argument("a KV store without a disk tier (no --kv-dir) keeps every chunk on the device: its budget of " +
                            mib(options.device_budget_bytes) + " is below the " +
                            mib(in_memory_device_budget_bytes(options)) + " that the context of " +
                            std::to_string(s.n_ctx) + " tokens needs");
  }
  if (options.dir.empty() && options.host_codec != KvCodec::kNone) {
    return invalid_argument("a KV store without a disk tier (no --kv-dir) has no host tier to encode for");
  }
  if (options.compress != KvCompress::kOff && options.host_codec != KvCodec::kNone) {
    return invalid_argument(std::string("--kv-compress ") + kv_compress_name(options.compress) +
                            " needs --kv-host-codec none: with a lossy host codec the disk holds only the compressed form");
  }

  std::unique_ptr<TieredKvCache> cache(new TieredKvCache(options));
  if (cache->options_.session.empty()) cache->options_.session = default_session_name();
  const size_t slot = align_up(encoded_chunk_bytes(cache->geometry_, options.host_codec), kDirectIoAlignment);
  cache->slot_bytes_ = slot;
  cache->row_scratch_.resize(cache->geometry_.chunk_bytes());
  cache->layers_.resize(static_cast<size_t>(s.n_layer));
  if (options.dir.empty()) {  // no disk tier: nothing is read into scratch or written through
    cache->stats_.disk_io_mode = "none (no disk tier: the KV stays in memory)";
    return cache;
  }
  DiskTierOptions d;
  d.dir = options.dir;
  d.session = cache->options_.session;
  d.n_layer = s.n_layer;
  d.geometry = cache->geometry_;
  d.codec = options.host_codec;
  d.transfer_codec = transfer_codec_of(options.compress);
  for (const int tokens : options.abstract_tokens) {
    if (tokens <= 0 || tokens % options.chunk_tokens != 0) {
      return invalid_argument("KV store: a disk abstract record must cover a multiple of the chunk (" +
                              std::to_string(options.chunk_tokens) + " tokens), not " + std::to_string(tokens));
    }
    d.abstract_group_chunks.push_back(tokens / options.chunk_tokens);
  }
  d.file_options = options.file_options;
  d.file_system = options.file_system;
  d.visible_files = options.visible_files;
  d.stats = &cache->stats_;
  LEOAM_ASSIGN_OR_RETURN(cache->disk_, DiskTier::create(d));
  cache->stats_.disk_io_mode = cache->disk_->io_mode();

  const bool decodes = options.host_codec != KvCodec::kNone || options.compress != KvCompress::kOff;
  const size_t decoded = decodes ? align_up(cache->geometry_.chunk_bytes(), kDirectIoAlignment) : 0;
  const uint64_t n_slots = std::max<uint64_t>(1, options.gather_batch_bytes / (slot + decoded));
  cache->gather_slots_ = static_cast<int64_t>(n_slots);
  // gather_batch's layout: the reads (one slot more, for the packing), then the decoded chunks.
  LEOAM_ASSIGN_OR_RETURN(cache->scratch_, AlignedBuffer::allocate((n_slots + 1) * slot + n_slots * decoded));
  // Write-through batches: the disk tier's queue depth of slots, at most kWriteBatchBytes (one slot at least).
  constexpr uint64_t kWriteBatchBytes = uint64_t{8} << 20;
  const uint64_t n_write_slots = std::clamp<uint64_t>(kWriteBatchBytes / slot, 1,
                                                      static_cast<uint64_t>(std::max(1, options.file_options.queue_depth)));
  LEOAM_ASSIGN_OR_RETURN(cache->write_buffer_, AlignedBuffer::allocate(n_write_slots * slot));
  if (options.compress != KvCompress::kOff) {
    const DiskTier& disk = *cache->disk_;
    LEOAM_ASSIGN_OR_RETURN(cache->compressed_write_buffer_,
                           AlignedBuffer::allocate(n_write_slots * disk.compressed_slot_bytes()));
    cache->stats_.transfer.mode = options.compress == KvCompress::kAuto
                                      ? std::string("auto (") + kv_codec_name(disk.transfer_codec()) + ")"
                                      : kv_compress_name(options.compress);
    if (options.compress == KvCompress::kAuto) {
      cache->transfer_model_ = std::make_unique<TransferCostModel>();
      cache->calibrate_decode();
    }
  }
  if (!keeps_abstracts(options)) {  // the records of a write-through batch, computed as it is written
    cache->disk_abstracts_.resize(n_write_slots * static_cast<uint64_t>(cache->geometry_.abstract_floats()));
  }
  if (options.read_ahead_bytes > 0) {
    LEOAM_ASSIGN_OR_RETURN(cache->read_ahead_,
                           ReadAhead::create(*cache->disk_, options.read_ahead_bytes, options.trace));
  }
  return cache;
}

int64_t TieredKvCache::n_tokens() const {
  int64_t n = layers_.empty() ? 0 : layers_[0].n_tokens;
  for (const LayerState& L : layers_) n = std::min(n, L.n_tokens);
  return n;
}

int64_t TieredKvCache::n_tokens(int layer) const {
  return layer >= 0 && layer < static_cast<int>(layers_.size()) ? layers_[layer].n_tokens : 0;
}

// --- moving chunks between tiers ---------------------------------------------------------

Status TieredKvCache::carry_out(const Residency::Plan& plan, const uint8_t* stored_from_disk,
                                const uint8_t* compressed_read) {
  for (const Residency::Move& move : plan.moves) {
    LEOAM_RETURN_IF_ERROR(move_chunk(move, stored_from_disk, compressed_read));
    residency_.apply(move);
    if (disk_ != nullptr && move.chunk.index < disk_->shared_chunks(move.chunk.layer)) {
      shared_on_disk_ += (move.to == Tier::kDisk) - (move.from == Tier::kDisk);
    }
    if (move.to != Tier::kDisk && keeps_abstracts(options_)) {
      uint64_t& peak = peak_abstract_bytes_[static_cast<int>(move.to)];
      peak = std::max(peak, static_cast<uint64_t>(residency_.n_chunks(move.to)) * geometry_.abstract_bytes());
    }
  }
  return Status::ok();
}

void TieredKvCache::recompute_abstract(Chunk& c, const uint8_t* compute_ready) {
  if (!keeps_abstracts(options_)) return;
  c.abstract.resize(static_cast<size_t>(geometry_.abstract_floats()));
  reset_abstract(geometry_, c.abstract.data());
  update_abstract(geometry_, compute_ready, 0, c.n_filled, c.abstract.data());
  cover_round_trip(c, compute_ready, c.abstract.data());
}

void TieredKvCache::cover_round_trip(const Chunk& c, const uint8_t* keys, float* box) {
  if (!transfers_compressed() || c.lossy) return;
  round_trip_scratch_.resize(geometry_.k_bytes());
  round_trip_keys(geometry_, disk_->transfer_codec(), keys, round_trip_scratch_.data());
  widen_abstract_box(geometry_, round_trip_scratch_.data(), 0, c.n_filled, box);
}

void TieredKvCache::cover_stored_form(Chunk& c, const uint8_t* stored) {
  if (options_.host_codec == KvCodec::kNone) return;
  decode_chunk_keys(geometry_, options_.host_codec, stored, row_scratch_.data());
  widen_abstract_box(geometry_, row_scratch_.data(), 0, c.n_filled, c.abstract.data());
}

const float* TieredKvCache::abstract_for_disk(Chunk& c, size_t slot, const uint8_t* compressed) {
  float* a = nullptr;
  if (keeps_abstracts(options_)) {
    a = c.abstract.data();
  } else {
    const auto n = static_cast<size_t>(geometry_.abstract_floats());
    assert((slot + 1) * n <= disk_abstracts_.size());
    a = disk_abstracts_.data() + slot * n;
    reset_abstract(geometry_, a);
    update_abstract(geometry_, c.device != nullptr ? c.device.get() : c.host.get(), 0, c.n_filled, a);
  }
  if (compressed != nullptr) {
    decode_chunk_keys(geometry_, disk_->transfer_codec(), compressed, row_scratch_.data());
    widen_abstract_box(geometry_, row_scratch_.data(), 0, c.n_filled, a);
  }
  return a;
}

DiskChunkWrite TieredKvCache::disk_write_of(Chunk& c, int64_t index, const uint8_t* stored, size_t slot) {
  uint8_t* compressed = nullptr;
  if (transfers_compressed()) {
    const size_t n = disk_->compressed_slot_bytes();
    compressed = compressed_write_buffer_.data() + slot * n;
    std::memset(compressed, 0, n);
    // The stored form is the compute-ready one here (a transfer codec needs the host codec none).
    encode_chunk(geometry_, disk_->transfer_codec(), stored, compressed);
  }
  return {index, stored, c.n_filled, abstract_for_disk(c, slot, compressed), compressed};
}

void TieredKvCache::calibrate_decode() {
  const KvCodec codec = disk_->transfer_codec();
  std::vector<uint8_t> encoded(encoded_chunk_bytes(geometry_, codec));
  std::vector<uint8_t> chunk(geometry_.chunk_bytes(), 0);
  encode_chunk(geometry_, codec, chunk.data(), encoded.data());
  const auto t0 = std::chrono::steady_clock::now();
  double seconds = 0.0;
  uint64_t n = 0;
  while (seconds < 1e-3) {
    decode_chunk(geometry_, codec, encoded.data(), row_scratch_.data());
    ++n;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  transfer_model_->record_decode(n, seconds);
}

bool TieredKvCache::choose_compressed_read() {
  if (!transfers_compressed()) return false;
  return transfer_model_ == nullptr || transfer_model_->choose_compressed();
}

void TieredKvCache::disk_slot_of(const Chunk& c, Tier tier, uint8_t* dst) const {
  std::memset(dst, 0, disk_->slot_bytes());
  if (tier == Tier::kDevice) {
    encode_chunk(geometry_, options_.host_codec, c.device.get(), dst);
  } else {
    std::memcpy(dst, c.host.get(), host_chunk_bytes_);
  }
}

std::unique_ptr<uint8_t[]> TieredKvCache::take_buffer(SpareBuffers& spare, size_t n, bool zeroed) {
  std::unique_ptr<uint8_t[]> buffer;
  if (spare.empty()) {
    buffer.reset(new uint8_t[n]);
  } else {
    buffer = std::move(spare.back());
    spare.pop_back();
  }
  if (zeroed) std::memset(buffer.get(), 0, n);
  return buffer;
}

void TieredKvCache::give_back(SpareBuffers& spare, std::unique_ptr<uint8_t[]> buffer) {
  if (buffer != nullptr && spare.size() < kMaxSpareBuffers) spare.push_back(std::move(buffer));
}

Status TieredKvCache::move_chunk(const Residency::Move& move, const uint8_t* stored_from_disk,
                                 const uint8_t* compressed_read) {
  Chunk& c = chunk(move.chunk);
  const int layer = move.chunk.layer;
  const int64_t index = move.chunk.index;
  const size_t chunk_bytes = geometry_.chunk_bytes();
  const KvCodec codec = options_.host_codec;

  if (!move.from) {  // a new chunk
    c = Chunk{};
    c.device = take_buffer(spare_device_, chunk_bytes, true);
    if (keeps_abstracts(options_)) {
      c.abstract.resize(static_cast<size_t>(geometry_.abstract_floats()));
      reset_abstract(geometry_, c.abstract.data());
    }
    return Status::ok();
  }
  const Tier from = *move.from;
  if (move.to == Tier::kDisk && disk_ == nullptr) {
    return internal_error("KV store without a disk tier: chunk " + std::to_string(index) + " of layer " +
                          std::to_string(layer) + " would leave memory (the device budget was checked at creation)");
  }
  if (move.to == Tier::kDisk) {
    stats_[from].evictions += 1;
    if (move.needs_write) {
      settle(layer);
      uint8_t* dst = write_buffer_.data();
      disk_slot_of(c, from, dst);
      cover_stored_form(c, dst);
      LEOAM_RETURN_IF_ERROR(disk_->write_chunk(layer, disk_write_of(c, index, dst, 0)));
    }
    give_back(spare_device_, std::move(c.device));
    give_back(spare_host_, std::move(c.host));
    std::vector<float>().swap(c.abstract);  // free it: disk chunks' abstracts live on disk
    return Status::ok();
  }

  // Into the host or the device: get the stored form or the compute-ready bytes.
  const uint8_t* stored = nullptr;
  if (from == Tier::kDisk) {
    stored = stored_from_disk;
    if (stored != nullptr && compressed_read != nullptr) c.lossy = true;
    if (stored == nullptr) {
      settle(layer);
      const DiskChunkRead read{index, write_buffer_.data()};
      LEOAM_RETURN_IF_ERROR(disk_->read_chunks(layer, {&read, 1}));
      stored = write_buffer_.data();
    }
  } else if (from == Tier::kHost) {
    stored = c.host.get();
  }

  if (move.to == Tier::kHost) {
    std::unique_ptr<uint8_t[]> host;
    if (from == Tier::kDevice) {  // zeroed for a codec's encoding, which may leave bytes unwritten
      host = take_buffer(spare_host_, host_chunk_bytes_, codec != KvCodec::kNone);
      encode_chunk(geometry_, codec, c.device.get(), host.get());
      stats_[Tier::kDevice].evictions += 1;
    } else {  // every byte copied: not zeroed first (a step promotes MiBs from the disk)
      host = take_buffer(spare_host_, host_chunk_bytes_, false);
      std::memcpy(host.get(), stored, host_chunk_bytes_);
    }
    if (from == Tier::kDisk) {
      // The disk copy's abstract stayed on disk: recompute it from the keys as they are served
      // (where the tier keeps abstracts: decoding the chunk costs a copy of it).
      if (keeps_abstracts(options_)) decode_chunk(geometry_, codec, host.get(), row_scratch_.data());
      recompute_abstract(c, row_scratch_.data());
    } else if (const ChunkResidency* r = residency_.find(move.chunk); r == nullptr || !r->on_disk) {
      // Not yet written through (a demotion within its append): its box has not seen this form.
      cover_stored_form(c, host.get());
    }
    c.host = std::move(host);
    give_back(spare_device_, std::move(c.device));
    stats_[Tier::kHost].bytes_written += host_chunk_bytes_;
    return Status::ok();
  }

  // Into the device, from the host or the disk.
  auto device = take_buffer(spare_device_, chunk_bytes, codec != KvCodec::kNone);  // none: every byte copied
  decode_chunk(geometry_, codec, stored, device.get());
  recompute_abstract(c, device.get());
  if (from == Tier::kHost) stats_[Tier::kHost].bytes_read += host_chunk_bytes_;
  c.device = std::move(device);
  give_back(spare_host_, std::move(c.host));
  stats_[Tier::kDevice].bytes_written += chunk_bytes;
  return Status::ok();
}

// --- appending -------------------------------------------------------------------------------

Status TieredKvCache::open_chunk(int layer, int64_t index) {
  LayerState& L = layers_[layer];
  if (static_cast<int64_t>(L.chunks.size()) <= index) L.chunks.resize(static_cast<size_t>(index) + 1);
  const ChunkKey key{layer, index};
  LEOAM_ASSIGN_OR_RETURN(Residency::Plan plan, residency_.plan_insert(key));
  LEOAM_RETURN_IF_ERROR(carry_out(plan));
  // As recent as the last gather's chunks: a chunk written in this append is not the least
  // recently used (the chunks before it, already on disk, go first).
  residency_.touch(key, tick_);
  residency_.pin(key);  // open
  if (index * options_.chunk_tokens < options_.n_sink_tokens) residency_.pin(key);  // sink, for good
  return Status::ok();
}

void TieredKvCache::update_recent_pins(int layer) {
  LayerState& L = layers_[layer];
  const int64_t c = options_.chunk_tokens;
  std::vector<int64_t> want;
  if (options_.n_recent_tokens > 0 && L.n_tokens > 0) {
    const int64_t first = std::max<int64_t>(0, L.n_tokens - options_.n_recent_tokens) / c;
    const int64_t last = (L.n_tokens - 1) / c;
    for (int64_t i = first; i <= last; ++i) {
      // Only device chunks are pinned: after a truncation the window may reach back to chunks
      // that were demoted, and those are served from where they are.
      const ChunkResidency* r = residency_.find({layer, i});
      if (r != nullptr && r->tier == Tier::kDevice) want.push_back(i);
    }
  }
  for (int64_t i : L.recent_pins) {
    if (!std::binary_search(want.begin(), want.end(), i)) residency_.unpin({layer, i});
  }
  for (int64_t i : want) {
    if (!std::binary_search(L.recent_pins.begin(), L.recent_pins.end(), i)) residency_.pin({layer, i});
  }
  L.recent_pins = std::move(want);
}

Status TieredKvCache::append(int layer, int64_t pos0, int64_t n_tokens, const float* k, const float* v) {
  if (layer < 0 || layer >= options_.shape.n_layer) {
    return invalid_argument("KV append: layer " + std::to_string(layer) + " out of range");
  }
  settle(layer);
  LayerState& L = layers_[layer];
  if (pos0 != L.n_tokens || n_tokens < 0 || pos0 + n_tokens > options_.shape.n_ctx) {
    return invalid_argument("KV append to layer " + std::to_string(layer) + ": positions [" + std::to_string(pos0) +
                            ", " + std::to_string(pos0 + n_tokens) + ") do not follow the " +
                            std::to_string(L.n_tokens) + " stored or exceed the context of " +
                            std::to_string(options_.shape.n_ctx));
  }
  const int64_t c = options_.chunk_tokens;
  const int64_t row_elems = geometry_.row_elements();
  const size_t row_bytes = geometry_.row_bytes();
  int64_t t = 0;
  while (t < n_tokens) {
    const int64_t pos = pos0 + t;
    const int64_t index = pos / c;
    const int64_t r0 = pos % c;
    if (r0 == 0) {
      if (Status st = open_chunk(layer, index); !st.is_ok()) {
        (void)truncate_layer(layer, pos0);  // back to where the append began
        return st;
      }
    }
    Chunk& ch = L.chunks[index];
    const int64_t r1 = std::min(c, r0 + (n_tokens - t));
    for (int64_t r = r0; r < r1; ++r, ++t) {
      store_kv_values(options_.dtype, k + t * row_elems, row_elems, ch.device.get() + r * row_bytes);
      store_kv_values(options_.dtype, v + t * row_elems, row_elems, ch.device.get() + geometry_.k_bytes() + r * row_bytes);
    }
    if (keeps_abstracts(options_)) update_abstract(geometry_, ch.device.get(), r0, r1, ch.abstract.data());
    ch.n_filled = r1;
    stats_[Tier::kDevice].bytes_written += static_cast<uint64_t>(r1 - r0) * row_bytes * 2;
    L.n_tokens = pos0 + t;
    if (r1 == c) {
      ch.sealed = true;
      residency_.unpin({layer, index});  // no longer open
    }
    update_recent_pins(layer);
  }
  if (Status st = write_through(layer, pos0 / c); !st.is_ok()) {
    (void)truncate_layer(layer, pos0);
    return st;
  }
  return Status::ok();
}

Status TieredKvCache::write_through(int layer, int64_t first) {
  if (disk_ == nullptr) return Status::ok();
  LayerState& L = layers_[layer];
  const size_t slot = disk_->slot_bytes();
  const size_t n_slots = write_buffer_.size() / slot;
  std::vector<DiskChunkWrite> batch;
  const auto flush = [&]() -> Status {
    LEOAM_RETURN_IF_ERROR(disk_->write_chunks(layer, batch));
    for (const DiskChunkWrite& w : batch) residency_.set_on_disk({layer, w.index});
    batch.clear();
    return Status::ok();
  };
  for (int64_t i = first; i < static_cast<int64_t>(L.chunks.size()); ++i) {
    Chunk& ch = L.chunks[i];
    const ChunkResidency* r = residency_.find({layer, i});
    if (!ch.sealed || r == nullptr || r->on_disk || r->tier == Tier::kDisk) continue;
    uint8_t* dst = write_buffer_.data() + batch.size() * slot;
    disk_slot_of(ch, r->tier, dst);
    cover_stored_form(ch, dst);
    batch.push_back(disk_write_of(ch, i, dst, batch.size()));
    if (batch.size() == n_slots) LEOAM_RETURN_IF_ERROR(flush());
  }
  return batch.empty() ? Status::ok() : flush();
}

// --- reading ---------------------------------------------------------------------------------

Status TieredKvCache::for_each_view(int layer, std::span<const TokenRange> ranges, const ViewVisitor& fn) {
  return gather(layer, ranges, fn, false);
}

Status TieredKvCache::for_each_view_unordered(int layer, std::span<const TokenRange> ranges, const ViewVisitor& fn) {
  return gather(layer, ranges, fn, true);
}

Status TieredKvCache::gather(int layer, std::span<const TokenRange> ranges, const ViewVisitor& fn, bool unordered) {
  if (layer < 0 || layer >= options_.shape.n_layer) {
    return invalid_argument("KV read: layer " + std::to_string(layer) + " out of range");
  }
  const LayerState& L = layers_[layer];
  int64_t prev_end = 0;
  for (const TokenRange& r : ranges) {
    if (r.begin < prev_end || r.end < r.begin || r.end > L.n_tokens) {
      return invalid_argument("KV read of layer " + std::to_string(layer) + ": ranges must be sorted, disjoint and inside [0, " +
                              std::to_string(L.n_tokens) + "), got [" + std::to_string(r.begin) + ", " +
                              std::to_string(r.end) + ")");
    }
    prev_end = r.end;
  }
  settle(layer);
  ++tick_;
  const int64_t c = options_.chunk_tokens;
  const int64_t n_slots = gather_slots_;

  std::vector<GatherItem> batch;
  int64_t slots_used = 0;
  for (const TokenRange& r : ranges) {
    for (int64_t p = r.begin; p < r.end;) {
      const int64_t index = p / c;
      const int64_t t1 = std::min(r.end - index * c, c);
      const bool same_chunk = !batch.empty() && batch.back().index == index;
      const Tier tier = residency_.find({layer, index})->tier;
      const bool needs_slot = tier == Tier::kDisk || (tier == Tier::kHost && options_.host_codec != KvCodec::kNone);
      if (needs_slot && !same_chunk && slots_used == n_slots) {
        LEOAM_RETURN_IF_ERROR(gather_batch(layer, batch, fn, unordered));
        batch.clear();
        slots_used = 0;
      }
      if (needs_slot && !same_chunk) ++slots_used;
      batch.push_back({index, p - index * c, t1, nullptr, tier});
      p = index * c + t1;
    }
  }
  if (!batch.empty()) LEOAM_RETURN_IF_ERROR(gather_batch(layer, batch, fn, unordered));
  return Status::ok();
}

Status TieredKvCache::prefetch(int layer, std::span<const TokenRange> ranges) {
  if (layer < 0 || layer >= options_.shape.n_layer) {
    return invalid_argument("KV prefetch: layer " + std::to_string(layer) + " out of range");
  }
  // The whole chunks of `ranges` that are not on the device, merged where they touch.
  const int64_t c = options_.chunk_tokens;
  const int64_t n = layers_[layer].n_tokens;
  std::vector<TokenRange> below;
  for (const TokenRange& r : ranges) {
    if (r.begin < 0 || r.end > n || r.end < r.begin) {
      return invalid_argument("KV prefetch of layer " + std::to_string(layer) + ": [" + std::to_string(r.begin) +
                              ", " + std::to_string(r.end) + ") is outside [0, " + std::to_string(n) + ")");
    }
    for (int64_t i = r.begin / c; i * c < r.end; ++i) {
      if (residency_.find({layer, i})->tier == Tier::kDevice) continue;
      const TokenRange chunk{i * c, std::min(n, (i + 1) * c)};
      if (!below.empty() && below.back().end >= chunk.begin) {
        below.back().end = std::max(below.back().end, chunk.end);
      } else {
        below.push_back(chunk);
      }
    }
  }
  if (below.empty()) return Status::ok();
  const uint64_t disk_read0 = stats_[Tier::kDisk].bytes_read;
  LEOAM_RETURN_IF_ERROR(for_each_view(layer, below, [](const KvView&) { return Status::ok(); }));
  stats_.disk_bytes_prefetched += stats_[Tier::kDisk].bytes_read - disk_read0;
  return Status::ok();
}

Status TieredKvCache::read_ahead(int layer, std::span<const TokenRange> ranges) {
  if (read_ahead_ == nullptr) return Status::ok();
  if (layer < 0 || layer >= options_.shape.n_layer) {
    return invalid_argument("KV read-ahead: layer " + std::to_string(layer) + " out of range");
  }
  const int64_t c = options_.chunk_tokens;
  const int64_t n = layers_[layer].n_tokens;
  std::vector<DiskChunkRead> on_disk;  // index, and whether lossy (read compressed whatever the form)
  int64_t last = -1;
  for (const TokenRange& r : ranges) {
    if (r.begin < 0 || r.end > n || r.end < r.begin) {
      return invalid_argument("KV read-ahead of layer " + std::to_string(layer) + ": [" + std::to_string(r.begin) +
                              ", " + std::to_string(r.end) + ") is outside [0, " + std::to_string(n) + ")");
    }
    for (int64_t i = std::max(r.begin / c, last + 1); i * c < r.end; ++i) {
      if (residency_.find({layer, i})->tier == Tier::kDisk) {
        on_disk.push_back({i, nullptr, layers_[layer].chunks[i].lossy});
      }
      last = i;
    }
  }
  if (!on_disk.empty() && choose_compressed_read()) {
    for (DiskChunkRead& r : on_disk) r.compressed = true;
  }
  read_ahead_->start(layer, on_disk, stats_);
  return Status::ok();
}

Status TieredKvCache::gather_batch(int layer, std::vector<GatherItem>& items, const ViewVisitor& fn, bool unordered) {
  const KvCodec codec = options_.host_codec;
  const size_t slot = slot_bytes_;
  const size_t decoded =
      codec == KvCodec::kNone && !transfers_compressed() ? 0 : align_up(geometry_.chunk_bytes(), kDirectIoAlignment);
  LayerState& L = layers_[layer];
  // A disk chunk's read staged ahead in the form it serves, or null.
  const auto staged_read = [&](int64_t index) -> const DiskChunkRead* {
    const DiskChunkRead* staged = read_ahead_ != nullptr ? read_ahead_->staged(layer, index) : nullptr;
    return staged != nullptr && !staged->compressed && L.chunks[index].lossy ? nullptr : staged;
  };

  // The scratch (gather_slots_ chunks a batch): the reads' bytes, then the decoded chunks. The
  // compressed reads are packed first, one after another, so that neighbours in the file are one
  // request; the reads as they are follow, a slot each, from the next whole slot.
  size_t n_reads = 0, n_lossy_reads = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const GatherItem& it = items[i];
    if (it.source == Tier::kDisk && (i == 0 || items[i - 1].index != it.index) && staged_read(it.index) == nullptr) {
      ++n_reads;
      n_lossy_reads += L.chunks[it.index].lossy ? 1 : 0;
    }
  }
  // The form of this batch's disk reads (lossy chunks are read compressed whatever it is).
  const bool compressed = n_reads > 0 && choose_compressed_read();
  const size_t n_compressed = compressed ? n_reads : n_lossy_reads;
  uint8_t* next_compressed = scratch_.data();
  uint8_t* next_as_is = scratch_.data() + align_up(n_compressed * (transfers_compressed() ? disk_->compressed_slot_bytes() : 0), slot);
  uint8_t* const decoded_base = scratch_.data() + (gather_slots_ + 1) * slot;

  std::vector<DiskChunkRead> reads;
  size_t next_slot = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    GatherItem& it = items[i];
    if (i > 0 && items[i - 1].index == it.index) {
      it.data = items[i - 1].data;
      it.stored = items[i - 1].stored;
      it.compressed = items[i - 1].compressed;
      continue;
    }
    Chunk& ch = L.chunks[it.index];
    const ChunkKey key{layer, it.index};
    residency_.touch(key, tick_);
    TierStats& device = stats_[Tier::kDevice];
    TierStats& host = stats_[Tier::kHost];
    switch (it.source) {
      case Tier::kDevice:
        it.data = ch.device.get();
        device.hits += 1;
        device.bytes_read += static_cast<uint64_t>(ch.n_filled) * geometry_.row_bytes() * 2;
        break;
      case Tier::kHost:
        device.misses += 1;
        host.hits += 1;
        host.bytes_read += host_chunk_bytes_;
        it.stored = ch.host.get();
        if (codec == KvCodec::kNone) {
          it.data = ch.host.get();
        } else {
          uint8_t* dst = decoded_base + next_slot++ * decoded;
          const TraceSpan span(options_.trace, "decode chunks", "decode", layer);
          decode_chunk(geometry_, codec, ch.host.get(), dst);
          it.data = dst;
        }
        break;
      case Tier::kDisk: {
        device.misses += 1;
        host.misses += 1;
        stats_[Tier::kDisk].hits += 1;
        uint8_t* decoded_dst = decoded_base + next_slot++ * decoded;
        if (const DiskChunkRead* staged = staged_read(it.index); staged != nullptr) {
          stats_.read_ahead.chunks_used += 1;
          it.stored = staged->dst;
          it.compressed = staged->compressed;
        } else {
          if (read_ahead_ != nullptr && read_ahead_->covers(layer)) stats_.read_ahead.chunks_missed += 1;
          it.compressed = compressed || ch.lossy;
          uint8_t*& next = it.compressed ? next_compressed : next_as_is;
          reads.push_back({it.index, next, it.compressed});
          it.stored = next;
          next += it.compressed ? disk_->compressed_slot_bytes() : slot;
        }
        it.data = codec == KvCodec::kNone && !it.compressed ? it.stored : decoded_dst;
        break;
      }
    }
  }
  // The segments of the items that `take` picks, in order.
  const size_t row_bytes = geometry_.row_bytes();
  const auto view_of = [&](auto take) {
    std::vector<KvSegment> segments;
    segments.reserve(items.size());
    for (const GatherItem& it : items) {
      if (!take(it)) continue;
      KvSegment s;
      s.pos0 = it.index * options_.chunk_tokens + it.t0;
      s.n_tokens = it.t1 - it.t0;
      s.k = it.data + it.t0 * row_bytes;
      s.v = it.data + geometry_.k_bytes() + it.t0 * row_bytes;
      s.dtype = options_.dtype;
      s.row_stride_bytes = row_bytes;
      segments.push_back(s);
    }
    return KvView(options_.shape.n_kv_heads, options_.shape.head_dim, std::move(segments));
  };
  const auto in_memory = [](const GatherItem& it) { return it.source != Tier::kDisk; };
  const auto from_disk = [](const GatherItem& it) { return it.source == Tier::kDisk; };
  // The chunks in memory visited while the reads are in flight (the transfer cost model times
  // the reads, so it wants them alone).
  const bool overlap = unordered && !reads.empty() && transfer_model_ == nullptr &&
                       std::any_of(items.begin(), items.end(), in_memory);
  if (overlap) {
    DiskTier::PendingRead pending;
    {
      const TraceSpan span(options_.trace, "disk read", "io", layer);
      LEOAM_RETURN_IF_ERROR(disk_->start_read_chunks(layer, reads, pending));
    }
    const Status visited = fn(view_of(in_memory));
    Status read;
    {
      const TraceSpan span(options_.trace, "disk read", "io", layer);
      read = disk_->finish_read_chunks(pending);
    }
    LEOAM_RETURN_IF_ERROR(visited);
    LEOAM_RETURN_IF_ERROR(read);
  } else if (!reads.empty()) {
    const TraceSpan span(options_.trace, "disk read", "io", layer);
    const auto t0 = std::chrono::steady_clock::now();
    LEOAM_RETURN_IF_ERROR(disk_->read_chunks(layer, reads));
    if (transfer_model_ != nullptr) {  // a batch of one form: a sample of its time per chunk
      const auto n_compressed = std::count_if(reads.begin(), reads.end(), [](const DiskChunkRead& r) { return r.compressed; });
      if (n_compressed == 0 || n_compressed == static_cast<std::ptrdiff_t>(reads.size())) {
        transfer_model_->record_read(n_compressed > 0, reads.size(),
                                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    }
  }
  if (codec != KvCodec::kNone || transfers_compressed()) {
    const TraceSpan span(options_.trace, "decode chunks", "decode", layer);
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t n_transfer_decoded = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const GatherItem& it = items[i];
      if (it.source != Tier::kDisk || (i > 0 && items[i - 1].index == it.index)) continue;
      if (codec != KvCodec::kNone) {
        decode_chunk(geometry_, codec, it.stored, const_cast<uint8_t*>(it.data));
      } else if (it.compressed) {
        decode_chunk(geometry_, disk_->transfer_codec(), it.stored, const_cast<uint8_t*>(it.data));
        ++n_transfer_decoded;
      }
    }
    if (n_transfer_decoded > 0) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      stats_.transfer.decode_ms += seconds * 1e3;
      if (transfer_model_ != nullptr) transfer_model_->record_decode(n_transfer_decoded, seconds);
    }
  }

  if (overlap) {
    LEOAM_RETURN_IF_ERROR(fn(view_of(from_disk)));
  } else {
    LEOAM_RETURN_IF_ERROR(fn(view_of([](const GatherItem&) { return true; })));
  }
  return promote_after_read(layer, items);
}

Status TieredKvCache::promote_after_read(int layer, std::span<const GatherItem> items) {
  for (size_t i = 0; i < items.size(); ++i) {
    const GatherItem& it = items[i];
    if (it.source == Tier::kDevice || (i > 0 && items[i - 1].index == it.index)) continue;
    // Without a codec a host chunk is compute-ready where it is (both tiers are RAM on the CPU):
    // a move to the device would copy it, and push another one down, for no faster read.
    if (it.source == Tier::kHost && options_.host_codec == KvCodec::kNone) continue;
    const ChunkKey key{layer, it.index};
    // A lossy codec's chunks stay in their stored form once they leave the device: a decoded
    // copy on the device would be encoded anew when demoted, into other values than the ones its
    // abstract bounds (the codec is not idempotent).
    Residency::Plan plan;
    if (options_.host_codec == KvCodec::kNone) {
      LEOAM_ASSIGN_OR_RETURN(plan, residency_.plan_promote(key, Tier::kDevice));
    }
    if (plan.moves.empty() && it.source == Tier::kDisk && options_.host_budget_bytes > 0) {
      LEOAM_ASSIGN_OR_RETURN(plan, residency_.plan_promote(key, Tier::kHost));
    }
    if (plan.moves.empty()) continue;
    // Without a host codec the stored form is the compute-ready one: a chunk read compressed
    // moves up as decoded.
    const uint8_t* read = options_.host_codec == KvCodec::kNone ? it.data : it.stored;
    LEOAM_RETURN_IF_ERROR(carry_out(plan, it.source == Tier::kDisk ? read : nullptr,
                                    it.source == Tier::kDisk && it.compressed ? it.stored : nullptr));
  }
  return Status::ok();
}

Result<KvView> TieredKvCache::view(int layer, int64_t n_tokens_visible) {
  if (layer < 0 || layer >= options_.shape.n_layer || n_tokens_visible < 0 || n_tokens_visible > n_tokens(layer)) {
    return invalid_argument("KV view: layer " + std::to_string(layer) + " has " + std::to_string(n_tokens(layer)) +
                            " positions, " + std::to_string(n_tokens_visible) + " asked");
  }
  auto owned = std::make_unique<OwnedKv>();
  const size_t row_bytes = geometry_.row_bytes();
  owned->k.resize(static_cast<size_t>(n_tokens_visible) * row_bytes);
  owned->v.resize(owned->k.size());
  const TokenRange all{0, n_tokens_visible};
  LEOAM_RETURN_IF_ERROR(for_each_view(layer, {&all, 1}, [&](const KvView& part) {
    for (const KvSegment& s : part.segments()) {
      for (int64_t t = 0; t < s.n_tokens; ++t) {
        std::memcpy(owned->k.data() + (s.pos0 + t) * row_bytes, s.k_row(t), row_bytes);
        std::memcpy(owned->v.data() + (s.pos0 + t) * row_bytes, s.v_row(t), row_bytes);
      }
    }
    return Status::ok();
  }));
  std::vector<KvSegment> segments;
  if (n_tokens_visible > 0) {
    segments.push_back({0, n_tokens_visible, owned->k.data(), owned->v.data(), options_.dtype, row_bytes});
  }
  return KvView(options_.shape.n_kv_heads, options_.shape.head_dim, std::move(segments), std::move(owned));
}

// --- forgetting ------------------------------------------------------------------------------

Status TieredKvCache::truncate_layer(int layer, int64_t n) {
  LayerState& L = layers_[layer];
  if (n >= L.n_tokens) return Status::ok();
  const int64_t c = options_.chunk_tokens;
  const int64_t keep_full = n / c;      // chunks [0, keep_full) stay as they are
  const int64_t partial_rows = n % c;   // rows kept of chunk keep_full, re-opened on the device
  const int64_t first_gone = keep_full;

  // A disk abstract record that the cut splits is written again from the abstracts of the chunks
  // it keeps (DiskTier::forget_from), made before row_scratch_ holds the kept rows below.
  std::vector<float> kept;
  if (disk_ != nullptr) {
    const int64_t group_first = first_gone - first_gone % disk_->group_chunks(layer);
    kept.resize(static_cast<size_t>((first_gone - group_first) * geometry_.abstract_floats()));
    for (int64_t i = std::max(group_first, disk_->shared_chunks(layer)); i < first_gone; ++i) {
      if (!disk_->has_chunk(layer, i)) continue;
      LEOAM_RETURN_IF_ERROR(record_abstract_again(layer, i, kept.data() + (i - group_first) * geometry_.abstract_floats()));
    }
  }

  // The kept rows of the boundary chunk, compute-ready, before its chunk is forgotten.
  if (partial_rows > 0) {
    const TokenRange rows{keep_full * c, n};
    LEOAM_RETURN_IF_ERROR(for_each_view(layer, {&rows, 1}, [&](const KvView& part) {
      const KvSegment& s = part.segments()[0];
      const size_t n_bytes = static_cast<size_t>(s.n_tokens) * geometry_.row_bytes();
      std::memset(row_scratch_.data(), 0, row_scratch_.size());
      std::memcpy(row_scratch_.data(), s.k, n_bytes);
      std::memcpy(row_scratch_.data() + geometry_.k_bytes(), s.v, n_bytes);
      return Status::ok();
    }));
  }
  for (int64_t i = first_gone; i < static_cast<int64_t>(L.chunks.size()); ++i) {
    const ChunkResidency* r = residency_.find({layer, i});
    if (r != nullptr && r->tier == Tier::kDisk && disk_ != nullptr && i < disk_->shared_chunks(layer)) {
      --shared_on_disk_;
    }
    residency_.erase({layer, i});
  }
  L.chunks.resize(static_cast<size_t>(first_gone));
  std::erase_if(L.recent_pins, [&](int64_t i) { return i >= first_gone; });
  if (disk_ != nullptr) LEOAM_RETURN_IF_ERROR(disk_->forget_from(layer, first_gone, kept));
  L.n_tokens = keep_full * c;

  if (partial_rows > 0) {
    LEOAM_RETURN_IF_ERROR(open_chunk(layer, keep_full));
    Chunk& ch = L.chunks[keep_full];
    std::memcpy(ch.device.get(), row_scratch_.data(), geometry_.chunk_bytes());
    ch.n_filled = partial_rows;
    if (keeps_abstracts(options_)) update_abstract(geometry_, ch.device.get(), 0, partial_rows, ch.abstract.data());
    L.n_tokens = n;
  }
  update_recent_pins(layer);
  return Status::ok();
}

Status TieredKvCache::truncate(int64_t n_tokens) {
  if (n_tokens < 0) return invalid_argument("KV truncate: negative length");
  if (read_ahead_ != nullptr) read_ahead_->drop_all(stats_);
  for (int il = 0; il < options_.shape.n_layer; ++il) LEOAM_RETURN_IF_ERROR(truncate_layer(il, n_tokens));
  return Status::ok();
}

void TieredKvCache::clear() {
  if (read_ahead_ != nullptr) read_ahead_->drop_all(stats_);
  residency_.clear();
  shared_on_disk_ = 0;
  for (int il = 0; il < options_.shape.n_layer; ++il) {
    layers_[il] = LayerState{};
    if (disk_ != nullptr) (void)disk_->forget_from(il, 0);  // cuts no record: cannot fail
  }
}

Result<int64_t> TieredKvCache::share_prefix(std::shared_ptr<const KeptKvFiles> files, int64_t n_positions) {
  std::shared_ptr<DiskTier> base = files->tier();
  for (const LayerState& L : layers_) {
    if (L.n_tokens != 0) return invalid_argument("KV store: a prefix is shared into an empty store only");
  }
  // Only chunks stored as they are, in this store's geometry, read as they are.
  const ChunkGeometry& b = base->geometry();
  if (disk_ == nullptr || options_.host_codec != KvCodec::kNone || transfers_compressed() ||
      base->codec() != KvCodec::kNone || b.chunk_tokens != geometry_.chunk_tokens ||
      b.n_kv_heads != geometry_.n_kv_heads || b.head_dim != geometry_.head_dim || b.dtype != geometry_.dtype) {
    return int64_t{0};
  }
  const int64_t c = options_.chunk_tokens;
  const int n_layer = options_.shape.n_layer;
  int64_t n_chunks = std::min(n_positions, options_.shape.n_ctx) / c;
  for (int il = 0; il < n_layer; ++il) {
    for (int64_t i = 0; i < n_chunks; ++i) {
      if (base->n_tokens_of(il, i) != c) n_chunks = i;  // whole chunks only
    }
  }
  if (n_chunks == 0) return int64_t{0};
  LEOAM_RETURN_IF_ERROR(disk_->share_prefix(std::move(base), std::vector<int64_t>(static_cast<size_t>(n_layer), n_chunks)));
  for (int il = 0; il < n_layer; ++il) {
    LayerState& L = layers_[il];
    L.chunks.resize(static_cast<size_t>(n_chunks));
    for (int64_t i = 0; i < n_chunks; ++i) {
      L.chunks[i].n_filled = c;
      L.chunks[i].sealed = true;
      residency_.apply({{il, i}, std::nullopt, Tier::kDisk});
      ++shared_on_disk_;
    }
    L.n_tokens = n_chunks * c;
  }
  // The sinks are pinned on the device, as appended ones are.
  const Status sinks = [&]() -> Status {
    for (int il = 0; il < n_layer; ++il) {
      for (int64_t i = 0; i < n_chunks && i * c < options_.n_sink_tokens; ++i) {
        LEOAM_ASSIGN_OR_RETURN(Residency::Plan plan, residency_.plan_promote({il, i}, Tier::kDevice));
        if (plan.moves.empty()) return internal_error("KV store: no device room for a shared prefix's sink chunk");
        LEOAM_RETURN_IF_ERROR(carry_out(plan));
        residency_.touch({il, i}, tick_);
        residency_.pin({il, i});
      }
      update_recent_pins(il);
    }
    return Status::ok();
  }();
  if (!sinks.is_ok()) {
    clear();
    return sinks;
  }
  return n_chunks * c;
}

// --- the catalog the selection policies see ---------------------------------------------------

int64_t TieredKvCache::n_chunks(int layer) const {
  return (n_tokens(layer) + options_.chunk_tokens - 1) / options_.chunk_tokens;
}

Tier TieredKvCache::chunk_tier(int layer, int64_t index) const {
  const ChunkResidency* r = residency_.find({layer, index});
  return r != nullptr ? r->tier : Tier::kDisk;
}

Status TieredKvCache::load_abstracts(int layer, int64_t i0, int64_t i1, float* dst, AbstractSource source,
                                     uint32_t* signs) {
  const ChunkRun run{i0, i1};
  return gather_abstracts(layer, {&run, 1}, dst, source, signs);
}

Status TieredKvCache::load_abstract_runs(int layer, std::span<const ChunkRun> runs, float* dst,
                                         AbstractSource source) {
  return gather_abstracts(layer, runs, dst, source, nullptr);
}

Status TieredKvCache::gather_abstracts(int layer, std::span<const ChunkRun> runs, float* dst, AbstractSource source,
                                       uint32_t* signs) {
  for (const ChunkRun& r : runs) {
    if (layer < 0 || layer >= options_.shape.n_layer || r.begin < 0 || r.end > n_chunks(layer) || r.begin > r.end) {
      return invalid_argument("KV abstracts: chunks [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                              ") of layer " + std::to_string(layer) + " out of range");
    }
  }
  const int64_t n_box = geometry_.box_floats();
  const int64_t n_floats = geometry_.abstract_floats();
  // One whole abstract (box, then signs) into the caller's arrays, at output position k.
  const auto deliver = [&](int64_t k, const float* abstract) {
    std::memcpy(dst + k * n_box, abstract, static_cast<size_t>(n_box) * sizeof(float));
    if (signs != nullptr) abstract_signs(geometry_, abstract, signs + k * geometry_.sign_words());
  };
  // A device or host chunk's: kept, or computed from its keys (both tiers hold them as they are).
  const auto deliver_resident = [&](int64_t k, const Chunk& c) {
    if (keeps_abstracts(options_)) return deliver(k, c.abstract.data());
    const uint8_t* keys = c.device != nullptr ? c.device.get() : c.host.get();
    chunk_key_box(geometry_, keys, c.n_filled, dst + k * n_box);
    cover_round_trip(c, keys, dst + k * n_box);
    if (signs != nullptr) chunk_key_signs(geometry_, keys, c.n_filled, signs + k * geometry_.sign_words());
  };
  const LayerState& L = layers_[layer];
  // In-memory chunks (device, host) are delivered at once; the disk ones are gathered into runs of
  // their own, read together, then delivered where their chunks go.
  std::vector<ChunkRun> disk_runs;
  std::vector<int64_t> disk_at;  // per disk run, the output position of its first chunk
  int64_t k = 0;
  for (const ChunkRun& r : runs) {
    for (int64_t i = r.begin; i < r.end;) {
      if (is_resident(L.chunks[i])) {
        deliver_resident(k++, L.chunks[i]);
        ++i;
        continue;
      }
      int64_t end = i + 1;
      while (end < r.end && !is_resident(L.chunks[end])) ++end;
      disk_runs.push_back({i, end});
      disk_at.push_back(k);
      k += end - i;
      i = end;
    }
  }
  if (disk_runs.empty()) return Status::ok();
  int64_t n_disk = 0;
  for (const ChunkRun& r : disk_runs) n_disk += r.size();
  // Whole abstracts of the disk chunks: MiBs when a tree first covers a long prompt.
  std::vector<float, HugePageAllocator<float>> whole(static_cast<size_t>(n_disk * n_floats));
  if (source == AbstractSource::kLka) {  // their records, every run in one batch of reads
    LEOAM_RETURN_IF_ERROR(disk_->read_abstracts(layer, disk_runs, whole.data()));
  } else {  // their KV, read in full and summarized again
    float* part = whole.data();
    for (const ChunkRun& r : disk_runs) {
      LEOAM_RETURN_IF_ERROR(abstracts_from_kv(layer, r.begin, r.end, part));
      part += r.size() * n_floats;
    }
  }
  const float* src = whole.data();
  for (size_t d = 0; d < disk_runs.size(); ++d) {
    for (int64_t j = 0; j < disk_runs[d].size(); ++j, src += n_floats) deliver(disk_at[d] + j, src);
  }
  return Status::ok();
}

Status TieredKvCache::abstracts_from_kv(int layer, int64_t i0, int64_t i1, float* dst) {
  const KvCodec codec = options_.host_codec;
  const size_t slot = disk_->slot_bytes();
  const auto n_slots = static_cast<int64_t>(scratch_.size() / slot);
  const int64_t n_floats = geometry_.abstract_floats();
  std::vector<DiskChunkRead> reads;
  for (int64_t b0 = i0; b0 < i1; b0 += n_slots) {  // in batches the gather scratch holds
    const int64_t b1 = std::min(i1, b0 + n_slots);
    reads.clear();
    for (int64_t i = b0; i < b1; ++i) reads.push_back({i, scratch_.data() + (i - b0) * slot});
    settle(layer);
    LEOAM_RETURN_IF_ERROR(disk_->read_chunks(layer, reads));
    stats_[Tier::kDisk].hits += static_cast<uint64_t>(b1 - b0);
    for (int64_t i = b0; i < b1; ++i) {
      const uint8_t* stored = reads[i - b0].dst;
      const uint8_t* keys = stored;
      if (codec != KvCodec::kNone) {
        decode_chunk(geometry_, codec, stored, row_scratch_.data());
        keys = row_scratch_.data();
      }
      float* a = dst + (i - i0) * n_floats;
      reset_abstract(geometry_, a);
      update_abstract(geometry_, keys, 0, layers_[layer].chunks[i].n_filled, a);
    }
  }
  return Status::ok();
}

Status TieredKvCache::record_abstract_again(int layer, int64_t index, float* a) {
  const Chunk& c = layers_[layer].chunks[index];
  if (keeps_abstracts(options_) && !c.abstract.empty()) {
    std::memcpy(a, c.abstract.data(), c.abstract.size() * sizeof(float));
    return Status::ok();
  }
  const uint8_t* keys = c.device != nullptr ? c.device.get() : c.host.get();
  if (keys == nullptr) {  // on the disk only: its stored form, decoded
    settle(layer);
    const DiskChunkRead read{index, scratch_.data()};
    LEOAM_RETURN_IF_ERROR(disk_->read_chunks(layer, {&read, 1}));
    keys = scratch_.data();
    if (options_.host_codec != KvCodec::kNone) {
      decode_chunk_keys(geometry_, options_.host_codec, scratch_.data(), row_scratch_.data());
      keys = row_scratch_.data();
    }
  }
  reset_abstract(geometry_, a);
  update_abstract(geometry_, keys, 0, c.n_filled, a);
  cover_round_trip(c, keys, a);
  return Status::ok();
}

// --- hints and inspection --------------------------------------------------------------------

void TieredKvCache::raise_importance(ChunkKey key, float amount) {
  if (const ChunkResidency* c = residency_.find(key)) residency_.set_importance(key, c->importance + amount);
}

KvStats TieredKvCache::stats() const {
  KvStats s = stats_;
  s.tiered = true;
  s.disk_tier = disk_ != nullptr;
  for (Tier t : {Tier::kDevice, Tier::kHost, Tier::kDisk}) {
    s.resident_chunks[static_cast<int>(t)] = residency_.n_chunks(t);
  }
  const auto n = [this](Tier t) { return static_cast<uint64_t>(residency_.n_chunks(t)); };
  s.resident_bytes[static_cast<int>(Tier::kDevice)] = n(Tier::kDevice) * geometry_.chunk_bytes();
  s.resident_bytes[static_cast<int>(Tier::kHost)] = n(Tier::kHost) * host_chunk_bytes_;
  s.resident_bytes[static_cast<int>(Tier::kDisk)] =
      (n(Tier::kDisk) - static_cast<uint64_t>(shared_on_disk_)) *
      (slot_bytes_ + (transfers_compressed() ? disk_->compressed_slot_bytes() : 0));
  s.resident_chunks[static_cast<int>(Tier::kDisk)] -= shared_on_disk_;
  s.shared_disk_chunks = shared_on_disk_;
  s.shared_disk_bytes = static_cast<uint64_t>(shared_on_disk_) * slot_bytes_;
  s.abstracts_in_memory = keeps_abstracts(options_);
  for (Tier t : {Tier::kDevice, Tier::kHost}) {
    s.abstract_bytes[static_cast<int>(t)] = keeps_abstracts(options_) ? n(t) * geometry_.abstract_bytes() : 0;
    s.peak_abstract_bytes[static_cast<int>(t)] = peak_abstract_bytes_[static_cast<int>(t)];
  }
  if (disk_ != nullptr) {
    s.abstract_bytes[static_cast<int>(Tier::kDisk)] = disk_->abstract_file_bytes();
    s.peak_abstract_bytes[static_cast<int>(Tier::kDisk)] = disk_->abstract_file_bytes();  // the files only grow
  }
  if (transfer_model_ != nullptr) {
    s.transfer.as_is_us_per_chunk = transfer_model_->as_is_seconds() * 1e6;
    s.transfer.compressed_us_per_chunk = transfer_model_->compressed_seconds() * 1e6;
    s.transfer.decode_us_per_chunk = transfer_model_->decode_seconds() * 1e6;
  }
  s.buffer_bytes = scratch_.size() + write_buffer_.size() + compressed_write_buffer_.size() +
                   spare_device_.size() * geometry_.chunk_bytes() + spare_host_.size() * host_chunk_bytes_ +
                   round_trip_scratch_.capacity() + row_scratch_.capacity() + disk_abstracts_.capacity() * sizeof(float) +
                   (read_ahead_ != nullptr ? read_ahead_->buffer_bytes() : 0) +
                   (disk_ != nullptr ? disk_->buffer_bytes() : 0);
  return s;
}

}  // namespace leoam
