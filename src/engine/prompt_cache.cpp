#include "engine/prompt_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "io/checksum.h"
#include "kv/kv_session.h"

namespace leoam {
namespace {

namespace fs = std::filesystem;

std::string header_of(const std::string& dir) { return dir + "/session.json"; }

uint64_t dir_bytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) n += e.file_size(ec);
  }
  return n;
}

int64_t mtime_ns(const std::string& path) {
  std::error_code ec;
  const auto t = fs::last_write_time(path, ec);
  return ec ? 0 : std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Marks an entry used now (its header's time), and returns that time.
int64_t touch(const std::string& dir) {
  std::error_code ec;
  fs::last_write_time(header_of(dir), fs::file_time_type::clock::now(), ec);
  return mtime_ns(header_of(dir));
}

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

Result<std::unique_ptr<PromptCache>> PromptCache::open(const PromptCacheOptions& options) {
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) return io_error("cannot create the prompt cache directory '" + options.dir + "': " + ec.message());
  std::unique_ptr<PromptCache> cache(new PromptCache(options));
  for (const auto& e : fs::directory_iterator(options.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("p-", 0) != 0) continue;
    Result<KvSession> s = read_kv_session(e.path().string(), options.model_hash);
    if (s.is_ok()) {
      cache->entries_.push_back({e.path().string(), std::vector<int32_t>(s->tokens.begin(), s->tokens.begin() + s->n_kv),
                                 dir_bytes(e.path().string()), mtime_ns(header_of(e.path().string())), nullptr});
    } else if (s.status().code() != StatusCode::kInvalidArgument) {  // another model's entries stay
      fs::remove_all(e.path(), ec);
      ++cache->counts_.dropped;
    }
  }
  if (ec) return io_error("cannot list the prompt cache directory '" + options.dir + "': " + ec.message());
  cache->evict();
  cache->publish();
  return cache;
}

std::optional<std::pair<size_t, size_t>> PromptCache::best_entry(std::span<const int32_t> prompt) const {
  if (prompt.size() < 2) return std::nullopt;
  size_t best = 0, best_n = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const size_t n = std::min(common_prefix(entries_[i].tokens, prompt), prompt.size() - 1);
    if (n > best_n) {
      best = i;
      best_n = n;
    }
  }
  if (best_n < static_cast<size_t>(kMinReuseTokens)) return std::nullopt;
  return std::pair{best, best_n};
}

void PromptCache::wait_opened(std::unique_lock<std::mutex>& lock, const std::string& dir) {
  opened_.wait(lock, [&] {
    return std::none_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.dir == dir && e.opening; });
  });
}

void PromptCache::prepare(std::span<const int32_t> prompt, const StoreMaker& make_store) {
  std::string dir;
  {
    std::unique_lock lock(entries_mutex_);
    wait_saved(lock, prompt);
    const std::optional<std::pair<size_t, size_t>> best = best_entry(prompt);
    if (!best || entries_[best->first].files != nullptr) return;
    Entry& entry = entries_[best->first];
    dir = entry.dir;
    if (entry.opening) return wait_opened(lock, dir);
    entry.opening = true;
  }
  // The long part (every chunk read and checked), without the lock.
  Result<std::shared_ptr<const KeptKvFiles>> files = [&]() -> Result<std::shared_ptr<const KeptKvFiles>> {
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> geometry, make_store());
    return open_kv_session_tier(dir, options_.model_hash, *geometry, options_.layout);
  }();
  {
    std::lock_guard lock(entries_mutex_);
    const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.dir == dir; });
    if (it != entries_.end()) {  // not evicted meanwhile
      it->opening = false;
      if (files.is_ok()) {
        it->files = std::move(*files);
      } else {
        std::fprintf(stderr, "leoam: prompt cache: dropping %s: %s\n", dir.c_str(), files.status().message().c_str());
        drop(static_cast<size_t>(it - entries_.begin()), /*corrupt=*/true);
        publish();
      }
    }
  }
  opened_.notify_all();
}

int64_t PromptCache::restore(std::span<const int32_t> prompt, KvCache& kv) {
  std::unique_lock lock(entries_mutex_);
  std::optional<std::pair<size_t, size_t>> best = best_entry(prompt);
  if (best && entries_[best->first].opening) {  // a prepare() is checking it: its result, not a second read
    wait_opened(lock, entries_[best->first].dir);
    best = best_entry(prompt);
  }
  if (!best) {
    ++counts_.misses;
    publish();
    return 0;
  }
  Entry& entry = entries_[best->first];
  const auto n = static_cast<int64_t>(best->second);
  const size_t best_n = best->second;
  int64_t in_place = 0;
  const Status loaded = [&]() -> Status {
    if (entry.files == nullptr) {
      LEOAM_ASSIGN_OR_RETURN(entry.files, open_kv_session_tier(entry.dir, options_.model_hash, kv, options_.layout));
    }
    LEOAM_ASSIGN_OR_RETURN(in_place, kv.share_prefix(entry.files, n));
    return load_kv_session_tier(*entry.files->tier(), in_place, n, kv);  // the rest, copied
  }();
  if (!loaded.is_ok()) {
    // A corrupt or unreadable entry: gone, and the prompt is computed whole.
    std::fprintf(stderr, "leoam: prompt cache: dropping %s: %s\n", entry.dir.c_str(), loaded.message().c_str());
    kv.clear();
    drop(best->first, /*corrupt=*/true);
    ++counts_.misses;
    publish();
    return 0;
  }
  entry.last_used = touch(entry.dir);
  ++counts_.hits;
  counts_.tokens_reused += best_n;
  counts_.tokens_in_place += static_cast<uint64_t>(in_place);
  publish();
  return static_cast<int64_t>(best_n);
}

bool PromptCache::worth_keeping(std::span<const int32_t> prompt, int64_t n_reused) const {
  const auto n = static_cast<int64_t>(prompt.size());
  return n >= options_.min_tokens && 2 * n_reused < n;
}

Status PromptCache::remember(std::span<const int32_t> prompt, KvCache& kv, int64_t n_reused) {
  const std::optional<std::string> dir = claim(prompt, kv, n_reused);
  return dir ? save(*dir, prompt, kv) : Status::ok();
}

std::optional<std::string> PromptCache::claim(std::span<const int32_t> prompt, const KvCache& kv, int64_t n_reused) {
  const auto n = static_cast<int64_t>(prompt.size());
  if (!worth_keeping(prompt, n_reused) || kv.n_tokens() < n - 1) return std::nullopt;
  const std::string dir = options_.dir + "/p-" + [&] {
    char buf[20];
    std::snprintf(buf, sizeof(buf), "%016llx",
                  static_cast<unsigned long long>(checksum64(prompt.data(), prompt.size() * sizeof(int32_t))));
    return std::string(buf);
  }();
  std::vector<int32_t> kept(prompt.begin(), prompt.end() - 1);  // the positions it keeps the KV of
  {
    std::lock_guard lock(entries_mutex_);
    const auto same = [&](const auto& e) { return e.dir == dir; };
    if (std::any_of(entries_.begin(), entries_.end(), same) || std::any_of(saving_.begin(), saving_.end(), same)) {
      return std::nullopt;
    }
    saving_.push_back({dir, std::move(kept)});
  }
  return dir;
}

Status PromptCache::save(const std::string& dir, std::span<const int32_t> prompt, KvCache& kv) {
  const auto n = static_cast<int64_t>(prompt.size());
  // The long part (a copy of the prompt's KV), without the lock.
  KvSession session;
  session.model_hash = options_.model_hash;
  session.tokens.assign(prompt.begin(), prompt.end());
  session.n_kv = n - 1;  // the last token is evaluated again by whoever reuses it, for its logits
  Status st = save_kv_session(kv, session, dir, options_.layout);
  {
    std::lock_guard lock(entries_mutex_);
    const auto claimed = std::find_if(saving_.begin(), saving_.end(), [&](const Saving& s) { return s.dir == dir; });
    std::vector<int32_t> kept = claimed != saving_.end() ? std::move(claimed->tokens) : std::vector<int32_t>{};
    if (claimed != saving_.end()) saving_.erase(claimed);
    if (st.is_ok()) {
      entries_.push_back({dir, std::move(kept), dir_bytes(dir), touch(dir), nullptr, false});
      ++counts_.saves;
      evict();
      publish();
    }
  }
  opened_.notify_all();
  if (!st.is_ok()) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    return st.with_context("prompt cache");
  }
  return Status::ok();
}

void PromptCache::wait_saved(std::unique_lock<std::mutex>& lock, std::span<const int32_t> prompt) {
  // A prompt that shares more with a save under way than with any entry waits for that save.
  const size_t have = best_entry(prompt) ? best_entry(prompt)->second : 0;
  const auto longer = [&] {
    return std::any_of(saving_.begin(), saving_.end(), [&](const Saving& s) {
      const size_t n = std::min(common_prefix(s.tokens, prompt), prompt.size() - 1);
      return n >= static_cast<size_t>(kMinReuseTokens) && n > have;
    });
  };
  if (prompt.size() >= 2) opened_.wait(lock, [&] { return !longer(); });
}

void PromptCache::drop(size_t i, bool corrupt) {
  std::error_code ec;
  fs::remove_all(entries_[i].dir, ec);
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
  ++(corrupt ? counts_.dropped : counts_.evictions);
}

void PromptCache::evict() {
  uint64_t total = 0;
  for (const Entry& e : entries_) total += e.bytes;
  while (total > options_.max_bytes && !entries_.empty()) {
    const auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                         [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
    total -= oldest->bytes;
    drop(static_cast<size_t>(oldest - entries_.begin()), /*corrupt=*/false);
  }
}

void PromptCache::publish() {
  PromptCacheStats s = counts_;
  s.n_entries = static_cast<int64_t>(entries_.size());
  s.bytes = 0;
  for (const Entry& e : entries_) s.bytes += e.bytes;
  std::lock_guard lock(mutex_);
  published_ = s;
}

PromptCacheStats PromptCache::stats() const {
  std::lock_guard lock(mutex_);
  return published_;
}

}  // namespace leoam
