// The KV store flags shared by the subcommands that run a model (run, eval, serve, bench kv):
// without --kv-dir the KV lives in RAM (the in-memory cache); with it, in the tiered
// store, whose device and host tiers hold at most --kv-device-mb and --kv-host-mb and whose disk
// tier is DIR.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "kv/kv_cache.h"
#include "kv/kv_stats.h"
#include "leoam/session.h"

namespace leoam::cli {

struct KvCliOptions {
  std::string dir;
  double device_mb = 256.0;
  double host_mb = 1024.0;
  int chunk_tokens = 0;  // 0: the attention policy's (default_chunk_tokens, attention_options.h)
  std::string host_codec = "none";
  std::string compress = "off";  // TieredKvCacheOptions::compress
  int n_sink = 4;
  int n_recent = 64;
  int queue_depth = 32;
  double prefill_mb = 1024.0;  // the layered prefill's working set, with a dir (ForwardOptions)
  double meta_mb = 0.0;  // the policy's memory budget (SparseAttentionOptions::memory_budget_bytes); 0: none
  std::string pipeline = "off";  // the decode pipeline (ForwardOptions::pipeline): on, off or auto, with a dir
  double read_ahead_mb = 64.0;   // its staging (TieredKvCacheOptions::read_ahead_bytes)
  bool swa_full = false;         // KvStoreOptions::swa_full
  bool print_stats = false;
  std::string stats_json_path;
};

// Registers --kv-dir, --kv-device-mb, --kv-host-mb, --kv-chunk, --kv-host-codec, --kv-compress, --kv-sink,
// --kv-recent, --kv-queue-depth, --prefill-mb, --pipeline, --read-ahead-mb, --kv-meta-mb,
// --kv-swa-full, --kv-stats and --kv-stats-json on `cmd`.
void add_kv_options(CLI::App& cmd, KvCliOptions& options);

// A flag's MiB as bytes.
uint64_t mib_to_bytes(double mb);

// --pipeline as it applies: off without a disk tier.
std::string pipeline_mode(const KvCliOptions& options);

// The store the flags describe (leoam/session.h). Fails, naming the flag, on --pipeline on or auto
// without --read-ahead-mb.
Result<KvStoreOptions> store_options(const KvCliOptions& options);

// One line on how the disk tier does its I/O ("leoam: KV disk tier DIR: O_DIRECT + io_uring ...").
std::string kv_store_summary(const KvCliOptions& options, const KvCache& kv);

// Prints --kv-stats to stderr and writes --kv-stats-json, as asked: the store's tiers (with the
// tiered store) and what the policy holds about the KV (Session::stats). `prefill` splits the
// disk traffic between the prompt and the decode, when known.
Status report_kv_stats(const KvCliOptions& options, KvStats stats, const PrefillIoStats& prefill = {});

}  // namespace leoam::cli
