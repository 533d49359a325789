// The KV store flags shared by the subcommands that run a model (run, eval, serve, bench kv):
// without --kv-dir the KV lives in RAM (the in-memory cache); with it, in the tiered
// store, whose device and host tiers hold at most --kv-device-mb and --kv-host-mb and whose disk
// tier is DIR.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "kv/kv_cache.h"
#include "kv/kv_stats.h"
#include "model/forward_context.h"

namespace leoam {
class Model;
class Trace;
}
namespace leoam::sparse {
class SparseAttention;
}

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
  bool print_stats = false;
  std::string stats_json_path;
};

// Registers --kv-dir, --kv-device-mb, --kv-host-mb, --kv-chunk, --kv-host-codec, --kv-compress, --kv-sink,
// --kv-recent, --kv-queue-depth, --prefill-mb, --pipeline, --read-ahead-mb, --kv-meta-mb, --kv-stats
// and --kv-stats-json on `cmd`.
void add_kv_options(CLI::App& cmd, KvCliOptions& options);

// A flag's MiB as bytes.
uint64_t mib_to_bytes(double mb);

// ForwardOptions::prefill_working_set_bytes: --prefill-mb with a disk tier (--kv-dir), else 0 (a
// store in RAM reads nothing back from disk: batch by batch).
uint64_t prefill_working_set_bytes(const KvCliOptions& options);

// --pipeline as it applies: off without a disk tier.
std::string pipeline_mode(const KvCliOptions& options);
// ForwardOptions::pipeline: --pipeline on or auto with a disk tier (a store in RAM has nothing to
// read ahead).
bool decode_pipeline(const KvCliOptions& options);
// Sets ForwardOptions::pipeline and pipeline_auto from --pipeline.
void set_pipeline(const KvCliOptions& options, ForwardOptions& fwd);

// What the attention policy needs of the store (attention_options.h: kv_store_needs).
struct KvStoreNeeds {
  bool chunks = false;              // it scores chunk abstracts: a tiered store even without --kv-dir
  bool resident_abstracts = false;  // it scores every far chunk at every step: device and host chunks
                                    // keep their abstracts (TieredKvCacheOptions::keep_abstracts)
  // The positions a disk abstract record of `layer` covers, for chunks of chunk_tokens and a
  // context of n_tokens, far_tokens of them between the sink and the recent window; null: a
  // chunk (TieredKvCacheOptions::abstract_tokens).
  std::function<int(int layer, int n_layer, int chunk_tokens, int64_t n_tokens, int64_t far_tokens)> abstract_tokens;
  // The store decodes in a batch with others (LlamaForward::decode_batch): its disk tier reads a
  // layer's selected chunks ahead (--read-ahead-mb) while the other sequences select and attend,
  // whatever --pipeline says (those reads are the selection's own: none is speculated).
  bool batched = false;
};

// The KV cache the options describe for `model` at n_ctx positions: the tiered store with
// --kv-dir, else the in-memory cache; or, when needs.chunks and no --kv-dir, a tiered store
// without a disk tier, whose device tier holds the whole context: it opens no file. The tiered
// store records its disk reads in `trace` (may be null). Fails when the store cannot be created.
Result<std::unique_ptr<KvCache>> make_kv_cache(const KvCliOptions& options, const Model& model, int64_t n_ctx,
                                               const KvStoreNeeds& needs = {}, Trace* trace = nullptr);

// One line on how the disk tier does its I/O ("leoam: KV disk tier DIR: O_DIRECT + io_uring ...").
std::string kv_store_summary(const KvCliOptions& options, const KvCache& kv);

// Prints --kv-stats to stderr and writes --kv-stats-json, as asked: the store's tiers (with the
// tiered store) and what `selector`'s policy holds about the KV (when one ran; may be null).
// `prefill` splits the disk traffic between the prompt and the decode, when known.
Status report_kv_stats(const KvCliOptions& options, const KvCache& kv, const sparse::SparseAttention* selector,
                       const PrefillIoStats& prefill = {});

}  // namespace leoam::cli
