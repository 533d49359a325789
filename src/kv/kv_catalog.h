// KvCatalog: what a selection policy may see of a chunked KV store, per layer: the chunks, the
// tier each lives in, and their abstracts (chunk_layout.h). Never file descriptors and never KV
// bytes: a policy picks token ranges, and the store gathers them (KvCache::for_each_view).
//
// Abstracts come from where they live (LeoAM's LKA): device and host chunks from memory, disk
// chunks from the disk tier's abstract file, read in bulk, one read per run of consecutive disk
// chunks, without reading their KV.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "kv/chunk_layout.h"  // sign_words_per_head
#include "kv/residency.h"
#include "kv/tier.h"

namespace leoam {

// Where a disk chunk's abstract comes from: its record in the abstract file (LKA), or its KV,
// read in full and summarized again (the ablation without LKA; the reads count as disk reads).
// Device and host chunks answer from memory either way.
enum class AbstractSource { kLka, kKv };

// Chunks [begin, end) of one layer.
struct ChunkRun {
  int64_t begin = 0;
  int64_t end = 0;

  int64_t size() const { return end - begin; }
};

class KvCatalog {
 public:
  virtual ~KvCatalog() = default;

  virtual int chunk_tokens() const = 0;
  virtual int catalog_kv_heads() const = 0;
  virtual int catalog_head_dim() const = 0;
  // Chunks of `layer`: chunk i holds positions [i * chunk_tokens, min((i + 1) * chunk_tokens, n)).
  virtual int64_t n_chunks(int layer) const = 0;
  virtual Tier chunk_tier(int layer, int64_t index) const = 0;
  // dst = the boxes of the abstracts of chunks [i0, i1) of `layer`:
  // [i1 - i0][2][n_kv_heads][head_dim] floats ([0] = min, [1] = max per channel). signs, when not
  // null (only asked of a catalog that has_key_signs()), = their key sign sketch:
  // [i1 - i0][chunk_tokens][n_kv_heads][sign_words_per_head(head_dim)] words (chunk_layout.h), read with
  // the boxes. Fails on I/O errors and checksum mismatches.
  [[nodiscard]] virtual Status load_abstracts(int layer, int64_t i0, int64_t i1, float* dst, AbstractSource source,
                                              uint32_t* signs = nullptr) = 0;
  // The boxes of several runs of chunks of `layer` at once, run after run into dst (as
  // load_abstracts lays them out): a store reads the disk chunks' records of every run in one
  // batch. By default, one load_abstracts a run.
  [[nodiscard]] virtual Status load_abstract_runs(int layer, std::span<const ChunkRun> runs, float* dst,
                                                  AbstractSource source) {
    const int64_t stride = 2 * static_cast<int64_t>(catalog_kv_heads()) * catalog_head_dim();
    for (const ChunkRun& r : runs) {
      LEOAM_RETURN_IF_ERROR(load_abstracts(layer, r.begin, r.end, dst, source));
      dst += r.size() * stride;
    }
    return Status::ok();
  }
  // Whether the abstracts carry the key sign sketch.
  virtual bool has_key_signs() const { return false; }
  // The sign words load_abstracts writes per chunk: chunk_tokens x n_kv_heads x
  // sign_words_per_head(head_dim).
  int64_t sign_words_per_chunk() const {
    return static_cast<int64_t>(chunk_tokens()) * catalog_kv_heads() * sign_words_per_head(catalog_head_dim());
  }
  // A hint for eviction: raises the chunk's importance (higher stays closer to compute; a chunk
  // starts at 0) by `amount`, the policies' view of how much it matters. The store keeps the
  // count for as long as it keeps the chunk. Unknown chunks are ignored.
  virtual void raise_importance(ChunkKey key, float amount) = 0;
};

}  // namespace leoam
