#include "kv/tiered_kv_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "kv/kv_session.h"

namespace leoam {
namespace {

// In MiB to the thousandth, rounded up: a budget the message asks for is enough when given as printed.
std::string mib(uint64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.10g MiB", std::ceil(static_cast<double>(bytes) * 1000.0 / (1 << 20)) / 1000.0);
  return buf;
}

// A sliding-window layer's chunks sort after every other chunk in the eviction order: they are
// what the layer's next queries read, and they leave once dropped.
constexpr float kWindowImportance = std::numeric_limits<float>::max();

std::string default_session_name() {
  std::random_device rd;
  char buf[48];
  std::snprintf(buf, sizeof(buf), "kv-%d-%08x", static_cast<int>(getpid()), rd());
  return buf;
}

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
  if (static_cast<int>(options.layer_windows.size()) > s.n_layer ||
      std::any_of(options.layer_windows.begin(), options.layer_windows.end(), [](int64_t w) { return w < 0; })) {
    return invalid_argument("tiered KV cache: a sliding window per layer at most, none negative");
  }
  const uint64_t need = min_device_budget_bytes(options);
  if (options.device_budget_bytes < need) {
    return invalid_argument("device KV budget of " + mib(options.device_budget_bytes) + " is too small: the pinned " +
                            std::to_string(options.n_sink_tokens) + " sink and " +
                            std::to_string(options.n_recent_tokens) + " recent tokens of " +
                            std::to_string(s.n_layer) + " layers in chunks of " +
                            std::to_string(options.chunk_tokens) + " need " + mib(need) + "; raise the device budget")
        .about(Setting::kKvDeviceBudget);
  }

  if (options.dir.empty() && options.device_budget_bytes < in_memory_device_budget_bytes(options)) {
    return invalid_argument("a KV store without a disk tier keeps every chunk on the device: its budget of " +
                            mib(options.device_budget_bytes) + " is below the " +
                            mib(in_memory_device_budget_bytes(options)) + " that the context of " +
                            std::to_string(s.n_ctx) + " tokens needs")
        .about(Setting::kKvDir);
  }
  if (options.dir.empty() && options.host_codec != KvCodec::kNone) {
    return invalid_argument("a KV store without a disk tier has no host tier to encode for").about(Setting::kKvDir);
  }
  if (options.compress != KvCompress::kOff && options.host_codec != KvCodec::kNone) {
    return invalid_argument(std::string("compressed disk reads (") + kv_compress_name(options.compress) +
                            ") need the host tier's chunks as they are: with a lossy host codec the disk holds only "
                            "the compressed form")
        .about(Setting::kKvCompress);
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
  cache->shared_ = SharedPrefixChunks(cache->disk_.get());

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
    LEOAM_ASSIGN_OR_RETURN(cache->transfers_,
                           CompressedTransfers::create(*cache->disk_, options.compress, n_write_slots));
  }
  if (!keeps_abstracts(options)) {  // the records of a write-through batch, computed as it is written
    cache->disk_abstracts_.resize(n_write_slots * static_cast<uint64_t>(cache->geometry_.abstract_floats()));
  }
  LEOAM_ASSIGN_OR_RETURN(cache->read_ahead_, ReadAheadStage::create(*cache->disk_, options.read_ahead_bytes,
                                                                   cache->stats_, options.trace));
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
    shared_.count_move(move);
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
  if (compressed != nullptr) transfers_->cover_compressed(compressed, c.n_filled, a, row_scratch_.data());
  return a;
}

DiskChunkWrite TieredKvCache::disk_write_of(Chunk& c, int64_t index, const uint8_t* stored, size_t slot) {
  // The stored form is the compute-ready one here (a transfer codec needs the host codec none).
  const uint8_t* compressed = transfers_ != nullptr ? transfers_->encode_for_write(stored, slot) : nullptr;
  return {index, stored, c.n_filled, abstract_for_disk(c, slot, compressed), compressed};
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
      read_ahead_.settle(layer);
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
      read_ahead_.settle(layer);
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
  if (window(layer) > 0) {
    residency_.set_importance(key, kWindowImportance);  // a sliding layer has no sink: its window
  } else if (index * options_.chunk_tokens < options_.n_sink_tokens) {
    residency_.pin(key);  // sink, for good
  }
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
  read_ahead_.settle(layer);
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
  if (disk_ == nullptr || window(layer) > 0) return Status::ok();  // a window's chunks are written when demoted
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
    for (int64_t i = std::max({group_first, disk_->shared_chunks(layer), L.first_kept}); i < first_gone; ++i) {
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
    if (const ChunkResidency* r = residency_.find({layer, i}); r != nullptr) shared_.count_forgotten({layer, i}, r->tier);
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
  for (int il = 0; il < options_.shape.n_layer; ++il) {
    // The next query, at n_tokens, reads the stored positions of its window: [first_read, n_tokens).
    const LayerState& L = layers_[il];
    const int64_t first_read = std::max<int64_t>(0, n_tokens - window(il) + 1);
    if (n_tokens < L.n_tokens && first_read < n_tokens && L.first_kept * options_.chunk_tokens > first_read) {
      return invalid_argument("KV truncate to " + std::to_string(n_tokens) + " positions: layer " +
                              std::to_string(il) + " has dropped its positions before " +
                              std::to_string(L.first_kept * options_.chunk_tokens) + ", behind its sliding window of " +
                              std::to_string(window(il)) + ", and a query at " + std::to_string(n_tokens) +
                              " reads from " + std::to_string(first_read))
          .about(Setting::kKvSwaFull);
    }
  }
  read_ahead_.drop_all();
  for (int il = 0; il < options_.shape.n_layer; ++il) LEOAM_RETURN_IF_ERROR(truncate_layer(il, n_tokens));
  return Status::ok();
}

void TieredKvCache::release_before(int layer, int64_t pos) {
  if (layer < 0 || layer >= options_.shape.n_layer || window(layer) <= 0) return;
  LayerState& L = layers_[layer];
  read_ahead_.settle(layer);
  const int64_t end = std::min<int64_t>(pos / options_.chunk_tokens, static_cast<int64_t>(L.chunks.size()));
  int64_t i = L.first_kept;
  for (; i < end && L.chunks[i].sealed; ++i) {
    const ChunkKey key{layer, i};
    if (const ChunkResidency* r = residency_.find(key); r != nullptr) {
      shared_.count_forgotten(key, r->tier);
      residency_.erase(key);
    }
    Chunk& ch = L.chunks[i];
    give_back(spare_device_, std::move(ch.device));
    give_back(spare_host_, std::move(ch.host));
    ch = Chunk{};
    stats_.window_dropped_chunks += 1;
  }
  std::erase_if(L.recent_pins, [&](int64_t r) { return r < i; });
  L.first_kept = i;
}

void TieredKvCache::clear() {
  read_ahead_.drop_all();
  residency_.clear();
  shared_.clear();
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
  const int64_t c = options_.chunk_tokens;
  const int n_layer = options_.shape.n_layer;
  const int64_t n_chunks = shared_.shareable_chunks(*base, n_layer, std::min(n_positions, options_.shape.n_ctx));
  if (n_chunks == 0) return int64_t{0};
  LEOAM_RETURN_IF_ERROR(shared_.share(std::move(base), n_layer, n_chunks));
  for (int il = 0; il < n_layer; ++il) {
    LayerState& L = layers_[il];
    L.chunks.resize(static_cast<size_t>(n_chunks));
    for (int64_t i = 0; i < n_chunks; ++i) {
      L.chunks[i].n_filled = c;
      L.chunks[i].sealed = true;
      const Residency::Move move{{il, i}, std::nullopt, Tier::kDisk};
      residency_.apply(move);
      shared_.count_move(move);
      if (window(il) > 0) residency_.set_importance({il, i}, kWindowImportance);
    }
    L.n_tokens = n_chunks * c;
  }
  // The sinks are pinned on the device, as appended ones are.
  const Status sinks = [&]() -> Status {
    for (int il = 0; il < n_layer; ++il) {
      for (int64_t i = 0; i < n_chunks && i * c < options_.n_sink_tokens && window(il) == 0; ++i) {
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
  const uint64_t disk_chunk_bytes = slot_bytes_ + (transfers_ != nullptr ? transfers_->slot_bytes() : 0);
  s.resident_bytes[static_cast<int>(Tier::kDisk)] = n(Tier::kDisk) * disk_chunk_bytes;
  shared_.report(s, disk_chunk_bytes);
  s.abstracts_in_memory = keeps_abstracts(options_);
  for (Tier t : {Tier::kDevice, Tier::kHost}) {
    s.abstract_bytes[static_cast<int>(t)] = keeps_abstracts(options_) ? n(t) * geometry_.abstract_bytes() : 0;
    s.peak_abstract_bytes[static_cast<int>(t)] = peak_abstract_bytes_[static_cast<int>(t)];
  }
  if (disk_ != nullptr) {
    s.abstract_bytes[static_cast<int>(Tier::kDisk)] = disk_->abstract_file_bytes();
    s.peak_abstract_bytes[static_cast<int>(Tier::kDisk)] = disk_->abstract_file_bytes();  // the files only grow
  }
  if (transfers_ != nullptr) transfers_->report(s);
  s.buffer_bytes = scratch_.size() + write_buffer_.size() + (transfers_ != nullptr ? transfers_->buffer_bytes() : 0) +
                   spare_device_.size() * geometry_.chunk_bytes() + spare_host_.size() * host_chunk_bytes_ +
                   row_scratch_.capacity() + disk_abstracts_.capacity() * sizeof(float) + read_ahead_.buffer_bytes() +
                   (disk_ != nullptr ? disk_->buffer_bytes() : 0);
  return s;
}

}  // namespace leoam
