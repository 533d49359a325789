// A saved session: the tokens of a sequence and the KV of its first n_kv positions, in a
// directory, so that a later run continues without recomputing the prompt (--kv-save, --kv-load).
// Works with any KvCache: the KV is read through for_each_view in chunk-sized pieces and written
// back through append, so memory stays bounded whatever the context.
//   DIR/session.json      header: format, version, model hash, KV geometry, tokens, sampler state,
//                         per-layer chunk counts, and a checksum of all of it
//   DIR/session-L000.kv   layer 0's KV chunks and (.lka) abstracts, as the disk tier lays them out
// Loading rejects, saying which and what to do: a header that does not parse or fails its
// checksum, a newer format version, another model hash or KV geometry than the running model's,
// and any chunk or abstract that fails its checksum.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/file.h"
#include "kv/kv_cache.h"

namespace leoam {

class DiskTier;

// A kept session's KV files, opened read-only (open_kv_session_tier) for many stores to read in
// place (KvCache::share_prefix): its disk tier, which those stores share.
class KeptKvFiles {
 public:
  explicit KeptKvFiles(std::shared_ptr<DiskTier> tier) : tier_(std::move(tier)) {}
  const std::shared_ptr<DiskTier>& tier() const { return tier_; }

 private:
  std::shared_ptr<DiskTier> tier_;
};

// The format this build writes and reads: abstract records with 10-byte chunk slots ("LKA5"),
// and each layer's chunks per abstract record in the header (a session saved from a store keeps
// its policy's blocks). Other versions are refused.
inline constexpr int kKvSessionVersion = 5;

struct KvSession {
  uint64_t model_hash = 0;       // checksum64 of the model file
  std::vector<int32_t> tokens;   // the whole sequence so far: prompt and generated
  int64_t n_kv = 0;              // positions whose KV is saved: tokens[0, n_kv); n_kv < tokens.size()
                                 // leaves tokens to evaluate on resume
  std::string sampler_state;     // opaque; restores the sampler's random stream
};

struct KvSessionIoOptions {
  int chunk_tokens = 64;              // chunk size of the saved files (any size loads)
  // Save: per layer, the positions one abstract record covers (a multiple of chunk_tokens; empty,
  // or a layer past the end: a chunk), as a store's disk tier groups them for its policy.
  std::vector<int> abstract_tokens;
  FileSystem* file_system = nullptr;  // nullptr: posix_file_system()
  int64_t max_positions = -1;         // load: at most this many positions (-1: all n_kv)
};

// Saves `session` and the KV of positions [0, session.n_kv) of every layer of `kv` into `dir`
// (created if missing; a previous session there is replaced).
[[nodiscard]] Status save_kv_session(KvCache& kv, const KvSession& session, const std::string& dir,
                                     const KvSessionIoOptions& options = {});

// Reads the session in `dir`, checks it against `model_hash` and the shape and dtype of `kv`
// (which must be empty), and appends its KV to `kv` (the first options.max_positions positions
// when set; the session's n_kv then says how many were loaded).
Result<KvSession> load_kv_session(const std::string& dir, uint64_t model_hash, KvCache& kv,
                                  const KvSessionIoOptions& options = {});

// The session in `dir` without its KV: its header, checked (checksum, version, model hash).
Result<KvSession> read_kv_session(const std::string& dir, uint64_t model_hash, const KvSessionIoOptions& options = {});

// The KV files of the session in `dir`, opened read-only for stores of the geometry of `kv` to
// read in place (KvCache::share_prefix), many at once. Checked as load_kv_session checks them,
// every chunk against its checksum included: one sequential read of the files, so that later
// reads fail only where the files change under them.
Result<std::shared_ptr<const KeptKvFiles>> open_kv_session_tier(const std::string& dir, uint64_t model_hash,
                                                                const KvCache& kv,
                                                                const KvSessionIoOptions& options = {});

// Appends positions [first, n) of every layer of a session's opened files (`tier`: from
// open_kv_session_tier, or load_kv_session's own) to `kv`, which must hold exactly `first`
// positions: what a store that shares the session's whole chunks (KvCache::share_prefix) lacks,
// or all of it for one that cannot share. Reads are serialised with the tier's other readers.
[[nodiscard]] Status load_kv_session_tier(DiskTier& tier, int64_t first, int64_t n, KvCache& kv);

}  // namespace leoam
