// TieredKvCache: the KvCache whose KV may be far larger than memory. Each layer's positions are cut
// into chunks (chunk_layout.h), each in exactly one tier: device (compute-ready), host (RAM, in the
// host codec's form) or disk (disk_tier.h). Placement (residency.h) keeps device and host within
// their byte budgets; the sink, the recent window and each layer's open chunk stay on the device.
// A sealed chunk is on disk by the end of its append, so a demotion writes nothing. Gathers read in
// batches of bounded scratch (tiered_kv_cache_gather.cpp); the catalog is in
// tiered_kv_cache_catalog.cpp; read-ahead, compressed transfers and shared prefixes are
// collaborators (read_ahead_stage.h, compressed_transfers.h, shared_prefix_chunks.h). One thread
// drives it. docs/kv-store.md#the-tiered-store
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/aligned_buffer.h"
#include "io/file.h"
#include "kv/chunk_layout.h"
#include "kv/compressed_transfers.h"
#include "kv/disk_tier.h"
#include "kv/kv_cache.h"
#include "kv/kv_catalog.h"
#include "kv/kv_codec.h"
#include "kv/kv_stats.h"
#include "kv/read_ahead_stage.h"
#include "kv/residency.h"
#include "kv/shared_prefix_chunks.h"
#include "kv/transfer_compression.h"

namespace leoam {

class Trace;

struct TieredKvCacheOptions {
  KvCacheShape shape;
  KvDtype dtype = KvDtype::kF16;
  int chunk_tokens = kDefaultChunkTokens;
  uint64_t device_budget_bytes = 0;
  uint64_t host_budget_bytes = 0;
  KvCodec host_codec = KvCodec::kNone;  // stored form on the host and disk tiers
  // Disk reads of a compressed copy (transfer_compression.h); with a disk tier and host codec none.
  KvCompress compress = KvCompress::kOff;
  // Device and host chunks keep their abstracts in memory, inside their tier's budget, even
  // without a lossy codec: for a policy that scores every far chunk at every step (quest).
  bool keep_abstracts = false;
  // Per layer, the positions one disk abstract record covers (disk_tier.h: one box for them, each
  // chunk's own key signs), a multiple of chunk_tokens: the policy's blocks
  // (sparse::PolicyInfo::abstract_tokens). Empty, or a layer past the end: chunk_tokens.
  std::vector<int> abstract_tokens;
  // Disk tier directory (created if missing). Empty: no disk tier, no file is ever opened, and
  // every chunk stays on the device, whose budget must hold the whole context.
  std::string dir;
  std::string session;                  // file prefix and name in errors; "" = "kv-<pid>-<n>"
  int n_sink_tokens = 4;                // pinned on the device (StreamingLLM's 4 sinks)
  int n_recent_tokens = 64;             // pinned on the device
  uint64_t gather_batch_bytes = uint64_t{32} << 20;  // scratch for one gather batch
  // Staging for the decode pipeline's read-ahead (read_ahead.h), both buffers; 0: no read-ahead.
  uint64_t read_ahead_bytes = 0;
  // Where the gathers' disk reads and the read-ahead's go as spans (core/trace.h); null: none.
  Trace* trace = nullptr;
  FileOpenOptions file_options;         // direct, uring, queue depth of the disk tier
  FileSystem* file_system = nullptr;    // nullptr: posix_file_system()
  // Per layer, the window of a sliding-window layer, whose queries see only their last W
  // positions (0, or a layer past the end: every position). Such a layer's chunks are not written
  // through: they stay in memory ahead of every other chunk (the highest importance in the
  // eviction order) and are dropped once release_before passes them, so that while the budgets
  // hold the windows they never reach the disk. A truncate that needs dropped positions fails.
  std::vector<int64_t> layer_windows;
  // Keep the disk tier's files visible in `dir` while the store lives (for tools that read them
  // directly); by default they are unlinked once open, so none outlives the process.
  bool visible_files = false;
};

class TieredKvCache final : public KvCache, public KvCatalog {
 public:
  // Fails on a bad shape or chunk size, or a device budget too small for the pinned chunks (or,
  // without a dir, for the whole context); the message gives the least budget that works.
  static Result<std::unique_ptr<TieredKvCache>> create(const TieredKvCacheOptions& options);
  // Device bytes that the pinned chunks of `options` need: the least device budget that works.
  static uint64_t min_device_budget_bytes(const TieredKvCacheOptions& options);
  // Device bytes that every chunk of a full context needs: the least budget without a disk tier.
  static uint64_t in_memory_device_budget_bytes(const TieredKvCacheOptions& options);
  // What one chunk costs the budget of the device (compute-ready KV) or the host (its stored
  // form): its KV, and its abstract where it keeps one in memory (keeps_abstracts).
  static uint64_t chunk_budget_bytes(const TieredKvCacheOptions& options, Tier tier);
  // Whether device and host chunks keep their abstract in memory: when asked (keep_abstracts),
  // and always with a lossy host codec, whose chunks' abstracts must bound their keys as appended
  // and as decoded.
  static bool keeps_abstracts(const TieredKvCacheOptions& options) {
    return options.keep_abstracts || options.host_codec != KvCodec::kNone;
  }
  ~TieredKvCache() override;

  const KvCacheShape& shape() const override { return options_.shape; }
  KvDtype dtype() const override { return options_.dtype; }
  int64_t n_tokens() const override;
  int64_t n_tokens(int layer) const override;
  Status append(int layer, int64_t pos0, int64_t n_tokens, const float* k, const float* v) override;
  // Gathers every chunk of [0, n_tokens_visible) into scratch owned by the view (test and tool
  // use; attention uses for_each_view, whose memory is bounded).
  Result<KvView> view(int layer, int64_t n_tokens_visible) override;
  Status for_each_view(int layer, std::span<const TokenRange> ranges, const ViewVisitor& fn) override;
  // A gather batch with disk reads hands over its device and host chunks while the reads are in
  // flight, then the chunks read (two views); except where the cost model of compressed
  // transfers times the reads (--kv-compress auto), which wants them alone.
  Status for_each_view_unordered(int layer, std::span<const TokenRange> ranges, const ViewVisitor& fn) override;
  // Gathers the host and disk chunks of `ranges` as for_each_view does, visiting nothing, so that
  // they are promoted as after a read; their disk bytes count as prefetched (KvStats).
  Status prefetch(int layer, std::span<const TokenRange> ranges) override;
  // With read_ahead_bytes, the disk chunks of `ranges` are read on the read-ahead thread into its
  // staging, where the layer's next gathers take them from; without, nothing.
  Status read_ahead(int layer, std::span<const TokenRange> ranges) override;
  void clear() override;
  // Fails, changing nothing, when a sliding-window layer would need positions it dropped.
  Status truncate(int64_t n_tokens) override;
  // Drops the whole chunks before `pos` of a layer with a window (layer_windows); other layers
  // keep theirs.
  void release_before(int layer, int64_t pos) override;

  // Makes the whole chunks of `base`'s first n_positions positions (a kept session's tier, opened
  // with DiskTier::open_existing, of this store's geometry) the first chunks of every layer, on
  // the disk tier, read in place; the sink chunks are read onto the device. Only on an empty store
  // with a disk tier, host codec none and no compressed transfers. Returns the positions shared, a
  // multiple of the chunk size (0: none, the store unchanged): the caller appends the rest. On an
  // error the store is left empty.
  Result<int64_t> share_prefix(std::shared_ptr<const KeptKvFiles> files, int64_t n_positions) override;

  // KvCatalog: what the selection policies see.
  int chunk_tokens() const override { return options_.chunk_tokens; }
  int catalog_kv_heads() const override { return options_.shape.n_kv_heads; }
  int catalog_head_dim() const override { return options_.shape.head_dim; }
  int64_t n_chunks(int layer) const override;
  Tier chunk_tier(int layer, int64_t index) const override;
  Status load_abstracts(int layer, int64_t i0, int64_t i1, float* dst, AbstractSource source,
                        uint32_t* signs = nullptr) override;
  // The disk chunks of every run in one batch of reads (LKA; kKv reads run by run).
  Status load_abstract_runs(int layer, std::span<const ChunkRun> runs, float* dst, AbstractSource source) override;
  bool has_key_signs() const override { return true; }
  // A hint from the selection policies: a more important chunk stays closer to compute.
  void raise_importance(ChunkKey key, float amount) override;

  const ChunkGeometry& geometry() const { return geometry_; }
  // Per layer, the positions one disk abstract record covers (TieredKvCacheOptions).
  const std::vector<int>& abstract_tokens() const { return options_.abstract_tokens; }
  const Residency& residency() const { return residency_; }
  // Statistics so far, with the resident bytes, chunks and abstracts as they stand now.
  KvStats stats() const override;
  KvCatalog* catalog() override { return this; }
  bool has_disk_tier() const { return disk_ != nullptr; }
  const DiskTier& disk() const { return *disk_; }  // only when has_disk_tier()
  // Reads the abstracts of chunks [i0, i1) of `layer`, all on disk, in one bulk read of the disk
  // tier's abstract file (LKA): dst is [i1 - i0][abstract_floats].
  [[nodiscard]] Status read_disk_abstracts(int layer, int64_t i0, int64_t i1, float* dst) {
    if (disk_ == nullptr) return internal_error("KV abstracts: the store has no disk tier");
    return disk_->read_abstracts(layer, i0, i1, dst);
  }

 private:
  // The bytes of one chunk, wherever it lives.
  struct Chunk {
    std::unique_ptr<uint8_t[]> device;  // [chunk_bytes] compute-ready, when on the device
    std::unique_ptr<uint8_t[]> host;    // [host_chunk_bytes] stored form, when on the host
    std::vector<float> abstract;        // [abstract_floats], on the device or host when keeps_abstracts
    // Served as its compressed copy's round trip from now on: it was read compressed and moved up
    // as decoded, and its abstract may bound only that form. Wherever it is, it is read compressed.
    bool lossy = false;
    int64_t n_filled = 0;
    bool sealed = false;                // full, or closed by truncate: immutable
  };
  struct LayerState {
    std::vector<Chunk> chunks;  // [chunk index]
    int64_t n_tokens = 0;
    std::vector<int64_t> recent_pins;  // chunk indices pinned as the recent window
    int64_t first_kept = 0;            // chunks before it were dropped (release_before)
  };
  // One chunk of a gather batch, and the part of it the ranges ask for.
  struct GatherItem {
    int64_t index = 0;
    int64_t t0 = 0, t1 = 0;   // rows [t0, t1) of the chunk
    const uint8_t* data = nullptr;    // compute-ready bytes of the chunk
    Tier source = Tier::kDevice;
    const uint8_t* stored = nullptr;  // its stored form, when read from the host or the disk
    bool compressed = false;          // read from the disk in the transfer codec's form
    const DiskChunkRead* staged = nullptr;  // a disk chunk's read, when the read-ahead staged it
  };
  // Which items of a gather batch a view holds.
  enum class GatherPart : uint8_t { kAll, kInMemory, kFromDisk };

  explicit TieredKvCache(const TieredKvCacheOptions& options);
  // Carries out a plan's moves in order, applying each to the residency once done. A move up
  // from the disk takes the chunk's stored bytes from stored_from_disk when given (a gather just
  // read them), else reads them; compressed_read: the compressed form they were decoded from.
  Status carry_out(const Residency::Plan& plan, const uint8_t* stored_from_disk = nullptr,
                   const uint8_t* compressed_read = nullptr);
  Status move_chunk(const Residency::Move& move, const uint8_t* stored_from_disk, const uint8_t* compressed_read);
  // Chunk buffers that moves gave back, taken by the next moves of their tier, so that a step's
  // promotions and evictions do not go through malloc: freed chunk buffers went back to the
  // system and came back as fresh pages to fault in and zero (at the Llama-3-8B shape, batch 8,
  // 16K a sequence: 41% of attention's samples were in those moves, mostly page faults, clearing
  // and copies). At most kMaxSpareBuffers a tier are kept.
  using SpareBuffers = std::vector<std::unique_ptr<uint8_t[]>>;
  static constexpr size_t kMaxSpareBuffers = 16;
  // A buffer of n bytes (n: the tier's chunk size) from `spare` or new, zeroed when asked.
  static std::unique_ptr<uint8_t[]> take_buffer(SpareBuffers& spare, size_t n, bool zeroed);
  // Keeps `buffer` (may be null) in `spare`, or frees it when spare is full.
  static void give_back(SpareBuffers& spare, std::unique_ptr<uint8_t[]> buffer);
  // With compressed transfers: widens `box` of resident chunk c (whose bytes are `keys`), unless it
  // is lossy, to hold its keys' round trip too, the form a compressed read would serve.
  void cover_round_trip(const Chunk& c, const uint8_t* keys, float* box) {
    if (transfers_ != nullptr && !c.lossy) transfers_->cover_round_trip(keys, c.n_filled, box);
  }
  // dst [slot_bytes] = chunk c's stored form, zero-padded to its disk slot, from the device
  // (encoded) or the host (as it is).
  void disk_slot_of(const Chunk& c, Tier tier, uint8_t* dst) const;
  static bool is_resident(const Chunk& c) { return c.device != nullptr || c.host != nullptr; }
  // c's abstract made anew from its keys, when it keeps one (keeps_abstracts).
  void recompute_abstract(Chunk& c, const uint8_t* compute_ready);
  // The abstract record of device or host chunk c, the `slot`-th of a write-through batch: kept,
  // or computed from its keys into disk_abstracts_; with compressed transfers, widened to bound
  // the keys of `compressed` (its compressed copy) too.
  const float* abstract_for_disk(Chunk& c, size_t slot, const uint8_t* compressed);
  // The disk write of chunk `index` of c, whose stored form is at `stored` (a slot), the
  // `slot`-th of a write-through batch: with compressed transfers, its compressed copy is encoded
  // and its abstract widened to bound it.
  DiskChunkWrite disk_write_of(Chunk& c, int64_t index, const uint8_t* stored, size_t slot);
  // Whether this gather batch (or read-ahead) reads its disk chunks compressed (--kv-compress; lossy
  // ones always).
  bool choose_compressed_read() { return transfers_ != nullptr && transfers_->choose_compressed_read(); }
  // Widens c's box to cover its keys decoded from `stored` (its stored form) when the codec is
  // lossy: a sealed chunk's abstract then bounds both forms of its keys, in every tier.
  void cover_stored_form(Chunk& c, const uint8_t* stored);
  // load_abstracts and load_abstract_runs: the runs' boxes (and signs, when not null) in order;
  // device and host chunks from memory, the disk chunks of every run read in one batch.
  Status gather_abstracts(int layer, std::span<const ChunkRun> runs, float* dst, AbstractSource source,
                          uint32_t* signs);
  // The abstracts of disk chunks [i0, i1) of `layer`, recomputed from their KV, read in full in
  // batches of the gather scratch (AbstractSource::kKv).
  Status abstracts_from_kv(int layer, int64_t i0, int64_t i1, float* dst);
  // a = sealed chunk `index` of `layer`'s abstract as its disk record takes it, made again for a
  // record that a truncation cuts (DiskTier::forget_from): kept, or from its keys (resident, or
  // read from the disk into scratch_ and decoded into row_scratch_), widened by cover_round_trip.
  Status record_abstract_again(int layer, int64_t index, float* a);
  Status open_chunk(int layer, int64_t index);
  // Writes the chunks of `layer` from `first` on that are sealed and have no disk copy yet to the
  // disk, in batches of write_buffer_'s slots, where they live (write-through).
  Status write_through(int layer, int64_t first);
  Status truncate_layer(int layer, int64_t n_tokens);
  void update_recent_pins(int layer);
  // for_each_view's walk; unordered: for_each_view_unordered's. It cuts the ranges into batches
  // that the scratch holds, each planned, issued and visited in turn (gather_batch).
  Status gather(int layer, std::span<const TokenRange> ranges, const ViewVisitor& fn, bool unordered);
  Status gather_batch(int layer, std::span<GatherItem> items, const ViewVisitor& fn, bool unordered);
  // Plan: touches and counts each chunk, takes the staged reads, points every item at its bytes
  // (host chunks decoded now, disk ones at their place in the scratch) and returns the disk
  // reads left to do, packed into the scratch.
  std::vector<DiskChunkRead> plan_batch(int layer, std::span<GatherItem> items);
  // Issue: reads `reads` and decodes the disk chunks that need it; with visit_in_memory, visits
  // the chunks in memory with it while the reads are in flight.
  Status issue_batch(int layer, std::span<const GatherItem> items, std::span<const DiskChunkRead> reads,
                     const ViewVisitor* visit_in_memory);
  // Visit: the batch's view (the part not yet visited), then the promotions of what was read.
  Status visit_batch(int layer, std::span<const GatherItem> items, const ViewVisitor& fn, GatherPart part);
  KvView batch_view(std::span<const GatherItem> items, GatherPart part) const;
  Status promote_after_read(int layer, std::span<const GatherItem> items);
  Chunk& chunk(ChunkKey key) { return layers_[key.layer].chunks[key.index]; }
  // The layer's sliding window (layer_windows), 0 for a layer that keeps every position.
  int64_t window(int layer) const {
    return layer < static_cast<int>(options_.layer_windows.size()) ? options_.layer_windows[layer] : 0;
  }
  // Fails when a range of `layer` that holds a position reaches below its dropped chunks.
  Status check_kept(int layer, std::span<const TokenRange> ranges, const char* what) const;

  TieredKvCacheOptions options_;
  ChunkGeometry geometry_;
  size_t host_chunk_bytes_ = 0;
  size_t slot_bytes_ = 0;        // a chunk's stored form, padded to the disk tier's slot
  Residency residency_;
  std::unique_ptr<DiskTier> disk_;  // null without a dir
  // Off without a disk tier or read_ahead_bytes; settled before each use of a layer's chunk file
  // (destroyed before disk_).
  ReadAheadStage read_ahead_;
  std::unique_ptr<CompressedTransfers> transfers_;  // null without a disk tier's compressed copy
  SharedPrefixChunks shared_;
  std::vector<LayerState> layers_;
  KvStats stats_;
  uint64_t tick_ = 0;
  std::array<uint64_t, kNumTiers> peak_abstract_bytes_{};  // device and host: the most held at once
  AlignedBuffer scratch_;        // gather batch: [gather_slots_ + 1][slot_bytes] read, [gather_slots_] decoded
  int64_t gather_slots_ = 0;     // chunks a gather batch reads or decodes at most
  AlignedBuffer write_buffer_;   // write-through batch: [n][slot_bytes], aligned for O_DIRECT
  SpareBuffers spare_device_;    // [chunk_bytes] each
  SpareBuffers spare_host_;      // [host_chunk_bytes] each
  std::vector<uint8_t> row_scratch_;
  std::vector<float> disk_abstracts_;  // [write-through slots][abstract_floats], without keeps_abstracts
};

}  // namespace leoam
