#include "kv_options.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "cli_common.h"
#include "kv/memory_kv_cache.h"
#include "kv/tiered_kv_cache.h"
#include "sparse/sparse_attention.h"
#include "model/model.h"

namespace leoam::cli {

uint64_t mib_to_bytes(double mb) { return static_cast<uint64_t>(mb * 1024.0 * 1024.0); }

uint64_t prefill_working_set_bytes(const KvCliOptions& o) { return o.dir.empty() ? 0 : mib_to_bytes(o.prefill_mb); }

std::string pipeline_mode(const KvCliOptions& o) { return o.dir.empty() ? "off" : o.pipeline; }

bool decode_pipeline(const KvCliOptions& o) { return pipeline_mode(o) != "off"; }

void set_pipeline(const KvCliOptions& o, ForwardOptions& fwd) {
  fwd.pipeline = decode_pipeline(o);
  fwd.pipeline_auto = pipeline_mode(o) == "auto";
}

void add_kv_options(CLI::App& cmd, KvCliOptions& o) {
  const std::string group = "KV store (tiers)";
  CLI::Option* dir = cmd.add_option("--kv-dir", o.dir,
                 "keep the KV in the tiered store, with its disk tier in DIR (created if missing; its files are "
                 "unlinked once open, so none outlives the run); without it the KV lives in RAM")
      ->check(writable_dir())
      ->type_name("DIR")
      ->group(group);
  cmd.add_option("--kv-device-mb", o.device_mb, "device tier budget in MiB: compute-ready KV (RAM on the CPU), and its chunks' abstracts with a lossy --kv-host-codec or --policy quest")
      ->capture_default_str()
      ->check(positive<double>())
      ->needs(dir)
      ->group(group);
  cmd.add_option("--kv-host-mb", o.host_mb, "host tier budget in MiB: RAM, the KV in the --kv-host-codec form, and its chunks' abstracts with a lossy codec or --policy quest (0: none)")
      ->capture_default_str()
      ->check(non_negative<double>())
      ->needs(dir)
      ->group(group);
  cmd.add_option("--kv-chunk", o.chunk_tokens,
                 "tokens per KV chunk, any size (not only powers of two: leoam's adaptive chunks are C times a "
                 "power of two, halved down to C) (default: for --policy leoam, whose adaptive chunks split down to "
                 "one store chunk, and for oracle: 8, or 4 or 2 when the far budget holds fewer than 16 chunks of 8 "
                 "or 4; 16 for quest, its page size; else 64)")
      ->check(in_range(kMinChunkTokens, kMaxChunkTokens))
      ->group(group);
  cmd.add_option("--kv-host-codec", o.host_codec, "form of the KV on the host and disk tiers: none, int8 or int4 (lossy)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "int8", "int4"}))
      ->needs(dir)
      ->group(group);
  cmd.add_option("--kv-compress", o.compress,
                 "form of the chunks read from the disk tier: off (as they are), int8 or int4 (a compressed copy, read "
                 "and decoded: fewer bytes, lossy), or auto (int4 when the disk and decode speeds measured so far say "
                 "it is faster); the disk keeps both forms; needs --kv-host-codec none")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "int8", "int4", "auto"}))
      ->needs(dir)
      ->group(group);
  cmd.add_option("--kv-sink", o.n_sink, "first tokens (the sink): pinned to the device tier, and always attended")
      ->capture_default_str()
      ->check(non_negative<int>())
      ->group(group);
  cmd.add_option("--kv-recent", o.n_recent, "last tokens (the recent window): pinned to the device tier, and always attended")
      ->capture_default_str()
      ->check(non_negative<int>())
      ->group(group);
  cmd.add_option("--kv-queue-depth", o.queue_depth, "disk reads in flight at once (io_uring)")
      ->capture_default_str()
      ->check(in_range(1, 4096))
      ->needs(dir)
      ->group(group);
  cmd.add_option("--prefill-mb", o.prefill_mb,
                 "with --kv-dir, the prompt runs layer by layer and attends to each layer's prompt KV in this much "
                 "RAM instead of reading it back from disk (its rows' residual stream and one layer's KV; a longer "
                 "prompt runs in segments that read the earlier ones from the store); 0: batch by batch")
      ->capture_default_str()
      ->check(non_negative<double>())
      ->needs(dir)
      ->group(group);
  cmd.add_option("--pipeline", o.pipeline,
                 "with --kv-dir, decode in a pipeline: while a layer computes, the next layer's selection is made "
                 "from a query speculated from this layer's input, and its chunks are read from disk on an I/O "
                 "thread; the next layer still selects with its own query (the same tokens), and reads what the "
                 "speculation missed (with --policy full, the next layer's whole past is read ahead, as far as "
                 "--read-ahead-mb holds); auto: each step pipelined or not, whichever the recent steps ran faster "
                 "(one step in 16 tries the other; full reads ahead in every step)")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off", "auto"}))
      ->needs(dir)
      ->group(group);
  cmd.add_option("--read-ahead-mb", o.read_ahead_mb,
                 "with --pipeline on or auto, or in a batch of sequences, RAM in MiB for the chunks read ahead, per "
                 "sequence (two layers' worth at most; what does not fit is read when needed; 0: nothing is read "
                 "ahead, a batch's sequences read their chunks as they attend; --pipeline on or auto needs more)")
      ->capture_default_str()
      ->check(non_negative<double>())
      ->needs(dir)
      ->group(group);
  cmd.add_option("--kv-meta-mb", o.meta_mb,
                 "RAM budget in MiB for what the attention policy keeps about the KV (trees, abstracts read, scores, "
                 "partial keys); a run that needs more stops with an error (0: no budget; --kv-stats reports it)")
      ->capture_default_str()
      ->check(non_negative<double>())
      ->group(group);
  cmd.add_flag("--kv-stats", o.print_stats, "print the KV tiers' traffic, hits and I/O latency at the end (stderr)")
      ->group(group);
  cmd.add_option("--kv-stats-json", o.stats_json_path, "write the KV statistics as JSON to FILE")
      ->type_name("FILE")
      ->group(group);
}

Result<std::unique_ptr<KvCache>> make_kv_cache(const KvCliOptions& o, const Model& model, int64_t n_ctx,
                                               const KvStoreNeeds& needs, Trace* trace) {
  const ModelHparams& hp = model.hparams();
  if (o.dir.empty() && !needs.chunks) {
    MemoryKvCacheOptions m;
    m.shape = {hp.n_layer, hp.n_head_kv, hp.head_dim, n_ctx};
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<MemoryKvCache> kv, MemoryKvCache::create(m));
    return std::unique_ptr<KvCache>(std::move(kv));
  }
  TieredKvCacheOptions t;
  t.shape = {hp.n_layer, hp.n_head_kv, hp.head_dim, n_ctx};
  t.chunk_tokens = o.chunk_tokens;
  t.n_sink_tokens = o.n_sink;
  t.n_recent_tokens = o.n_recent;
  t.dir = o.dir;
  t.host_codec = *parse_kv_codec(o.host_codec);  // these before the budgets, which depend on them
  t.compress = *parse_kv_compress(o.compress);
  t.keep_abstracts = needs.resident_abstracts;
  if (!o.dir.empty() && needs.abstract_tokens) {
    const int64_t far = std::max<int64_t>(0, n_ctx - o.n_sink - o.n_recent);
    for (int il = 0; il < hp.n_layer; ++il) {
      t.abstract_tokens.push_back(needs.abstract_tokens(il, static_cast<int>(hp.n_layer), o.chunk_tokens, n_ctx, far));
    }
  }
  t.device_budget_bytes = mib_to_bytes(o.device_mb);
  t.host_budget_bytes = mib_to_bytes(o.host_mb);
  if (o.dir.empty()) {  // no disk tier: every chunk stays on the device, and no file is written
    t.device_budget_bytes = TieredKvCache::in_memory_device_budget_bytes(t);
    t.host_budget_bytes = 0;
  }
  t.file_options.queue_depth = o.queue_depth;
  if (decode_pipeline(o) && o.read_ahead_mb == 0.0) {
    return invalid_argument("--pipeline " + o.pipeline + " reads the next layer's chunks ahead: it needs --read-ahead-mb > 0");
  }
  if (decode_pipeline(o) || needs.batched) t.read_ahead_bytes = mib_to_bytes(o.read_ahead_mb);
  t.trace = trace;
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<TieredKvCache> kv, TieredKvCache::create(t));
  return std::unique_ptr<KvCache>(std::move(kv));
}

std::string kv_store_summary(const KvCliOptions& o, const KvCache& kv) {
  const auto* tiered = dynamic_cast<const TieredKvCache*>(&kv);
  if (tiered == nullptr) return "KV store: in memory";
  if (!tiered->has_disk_tier()) return "KV store: in memory, in chunks of " + std::to_string(o.chunk_tokens) + " tokens";
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "KV store: device %.2f MiB, host %.2f MiB (%s), chunks of %d tokens, disk tier %s (compressed reads: %s): ",
                o.device_mb, o.host_mb, o.host_codec.c_str(), o.chunk_tokens, o.dir.c_str(), o.compress.c_str());
  return buf + tiered->disk().io_mode();
}

Status report_kv_stats(const KvCliOptions& o, const KvCache& kv, const sparse::SparseAttention* selector,
                       const PrefillIoStats& prefill) {
  if (!o.print_stats && o.stats_json_path.empty()) return Status::ok();
  PolicyMemoryStats policy;
  if (selector != nullptr) {
    const sparse::PolicyMemory m = selector->memory();
    policy = {std::string(selector->policy_name()), m.bytes, m.peak_bytes, mib_to_bytes(o.meta_mb)};
  }
  std::string text;
  std::string json;
  if (const auto* tiered = dynamic_cast<const TieredKvCache*>(&kv); tiered != nullptr) {
    KvStats stats = tiered->stats();
    stats.policy_memory = policy;
    stats.prefill = prefill;
    text = stats.to_text();
    json = stats.to_json();
  } else {
    text = "leoam: --kv-stats: the KV is in memory (no --kv-dir): no tier traffic to report\n";
    json = "{\"kv_in_memory\":true";
    if (!policy.policy.empty()) {
      text += policy.to_text() + "\n";
      json += ",\"policy_memory\":" + policy.to_json();
    }
    json += "}";
  }
  if (o.print_stats) std::fprintf(stderr, "%s", text.c_str());
  if (!o.stats_json_path.empty()) {
    std::ofstream out(o.stats_json_path);
    out << json << "\n";
    if (!out) return io_error("cannot write --kv-stats-json file '" + o.stats_json_path + "': " + std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace leoam::cli
