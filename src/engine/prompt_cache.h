// PromptCache: the KV of earlier prompts, kept on disk, so that a prompt that begins like one of
// them (the same long document, another question) loads that KV instead of computing it again.
//   DIR/p-<hash of the tokens>/   one entry: a saved KV session (kv_session.h) of a prompt's
//                                 tokens, all but its last position's KV; checksummed, tied to
//                                 the model's hash; its header file's time is its last use
// A store that can (KvCache::share_prefix) reads an entry's whole chunks in place and holds a copy
// of the rest only. An entry's first open checks all of it; later restores share that open entry.
// An entry that fails its checks is removed (stores reading it keep its open files) and the
// prompt is computed as if it had none. Entries survive restarts. Thread-safe: one lock over the
// entries, which prepare()'s reads and checks do not hold. Design: docs/server.md
#pragma once

#include <cstdint>
#include <memory>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache.h"
#include "kv/kv_session.h"

namespace leoam {

struct PromptCacheOptions {
  std::string dir;
  uint64_t max_bytes = 8ull << 30;
  uint64_t model_hash = 0;  // checksum64 of the model file: entries of another model are ignored
  int64_t min_tokens = 256; // shorter prompts are not kept
  // How entries are saved (the chunk size and abstract records per layer): those of the stores
  // that restore them, so that they read them in place.
  KvSessionIoOptions layout;
};

struct PromptCacheStats {
  int64_t n_entries = 0;
  uint64_t bytes = 0;          // the entries' files
  uint64_t hits = 0;           // prompts that loaded KV from an entry
  uint64_t misses = 0;
  uint64_t tokens_reused = 0;  // positions loaded
  uint64_t tokens_in_place = 0;  // of them, read in place from an entry's files (not copied)
  uint64_t saves = 0;
  uint64_t evictions = 0;
  uint64_t dropped = 0;        // entries removed because they failed their checks
};

class PromptCache {
 public:
  // The shortest prefix worth restoring: a shorter one (the BOS token every prompt shares) saves
  // nothing and is not a hit.
  static constexpr int64_t kMinReuseTokens = 16;

  // Creates `dir` if missing and indexes the entries in it (one that cannot be read is removed).
  static Result<std::unique_ptr<PromptCache>> open(const PromptCacheOptions& options);

  // Gives `kv` (empty) the KV of the longest prefix of `prompt` that an entry holds, in place
  // where it can, leaving at least one token of the prompt to evaluate; returns the positions
  // it holds (0: none, `kv` still empty).
  int64_t restore(std::span<const int32_t> prompt, KvCache& kv);
  // Opens and checks the entry that restore(prompt) would read, if it is not open yet; returns
  // once it is (or once another caller has opened it). `make_store` makes a store of the shape
  // that restores (its shape is what is read; it is made only when an entry must be opened, and
  // freed after). A failed check drops the entry, as restore would.
  using StoreMaker = std::function<Result<std::unique_ptr<KvCache>>()>;
  // The scheduler calls it on the request's own thread, before queueing it, so that a large
  // entry's check does not hold up the requests being decoded.
  void prepare(std::span<const int32_t> prompt, const StoreMaker& make_store);
  // After `prompt` was evaluated into `kv`, n_reused of its positions loaded by restore(): keeps
  // it as an entry when it is long enough and mostly new (worth_keeping), then evicts past
  // max_bytes. The copy runs without the lock; meanwhile a prepare() for a prompt that shares more
  // with it than with any entry waits for it. `kv` must not change meanwhile.
  [[nodiscard]] Status remember(std::span<const int32_t> prompt, KvCache& kv, int64_t n_reused);
  // remember() in two halves, for a caller that hands the copy to another thread. claim() marks
  // the prompt as being saved, so that a prepare() from then on waits for it rather than missing
  // it; it returns the save's place, or nothing when the prompt is not kept (not worth keeping,
  // kept already, or not in `kv`). save() makes the copy into a claimed place.
  std::optional<std::string> claim(std::span<const int32_t> prompt, const KvCache& kv, int64_t n_reused);
  [[nodiscard]] Status save(const std::string& dir, std::span<const int32_t> prompt, KvCache& kv);
  // A prompt of min_tokens or more that reused less than half of itself.
  bool worth_keeping(std::span<const int32_t> prompt, int64_t n_reused) const;

  PromptCacheStats stats() const;
  const PromptCacheOptions& options() const { return options_; }

 private:
  struct Entry {
    std::string dir;
    std::vector<int32_t> tokens;  // the positions whose KV it holds
    uint64_t bytes = 0;
    int64_t last_used = 0;        // the header file's time, in ns
    std::shared_ptr<const KeptKvFiles> files;  // opened and checked by the first restore or prepare
    bool opening = false;                      // prepare() is opening it, without the lock
  };
  explicit PromptCache(const PromptCacheOptions& options) : options_(options) {}
  // The entry sharing the longest prefix with `prompt` (at least kMinReuseTokens, leaving a
  // prompt token to evaluate), and that prefix's length; under entries_mutex_.
  std::optional<std::pair<size_t, size_t>> best_entry(std::span<const int32_t> prompt) const;
  // Waits (releasing `lock`) while a prepare() opens the entry in `dir`.
  void wait_opened(std::unique_lock<std::mutex>& lock, const std::string& dir);
  // Waits (releasing `lock`) while a remember() saves a prompt that shares more with `prompt`
  // than any entry does.
  void wait_saved(std::unique_lock<std::mutex>& lock, std::span<const int32_t> prompt);
  struct Saving {
    std::string dir;
    std::vector<int32_t> tokens;
  };
  void drop(size_t i, bool corrupt);
  void evict();
  void publish();

  PromptCacheOptions options_;
  std::mutex entries_mutex_;
  std::condition_variable opened_;  // an entry's `opening` or a save ended
  std::vector<Entry> entries_;      // under entries_mutex_
  std::vector<Saving> saving_;      // remember()s under way, under entries_mutex_
  PromptCacheStats counts_;         // under entries_mutex_
  mutable std::mutex mutex_;
  PromptCacheStats published_;  // under mutex_
};

}  // namespace leoam
