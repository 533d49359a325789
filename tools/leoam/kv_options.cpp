#include "kv_options.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "cli_common.h"

namespace leoam::cli {

uint64_t mib_to_bytes(double mb) { return static_cast<uint64_t>(mb * 1024.0 * 1024.0); }

std::string pipeline_mode(const KvCliOptions& o) { return o.dir.empty() ? "off" : o.pipeline; }

Result<KvStoreOptions> store_options(const KvCliOptions& o) {
  KvStoreOptions kv;
  kv.dir = o.dir;
  kv.device_bytes = mib_to_bytes(o.device_mb);
  kv.host_bytes = mib_to_bytes(o.host_mb);
  kv.chunk_tokens = o.chunk_tokens;
  kv.host_codec = *parse_kv_codec(o.host_codec);  // the flags take only the names these know
  kv.compress = *parse_kv_compress(o.compress);
  kv.n_sink = o.n_sink;
  kv.n_recent = o.n_recent;
  kv.queue_depth = o.queue_depth;
  kv.prefill_working_set_bytes = mib_to_bytes(o.prefill_mb);
  kv.meta_budget_bytes = mib_to_bytes(o.meta_mb);
  kv.pipeline = o.pipeline == "on" ? DecodePipeline::kOn : o.pipeline == "auto" ? DecodePipeline::kAuto : DecodePipeline::kOff;
  kv.read_ahead_bytes = mib_to_bytes(o.read_ahead_mb);
  kv.swa_full = o.swa_full;
  if (decode_pipeline(kv) && o.read_ahead_mb == 0.0) {
    return invalid_argument("--pipeline " + o.pipeline + " reads the next layer's chunks ahead: it needs --read-ahead-mb > 0");
  }
  return kv;
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
  cmd.add_flag("--kv-swa-full", o.swa_full,
               "keep the KV that a sliding-window layer's queries no longer see (Gemma 2 and 3, Mistral v0.1, "
               "Phi-3 4K) instead of dropping it (with --kv-dir it is written to disk as any layer's): a rewind "
               "behind a window then still works (--kv-save and the server's prompt cache set it)")
      ->group(group);
  cmd.add_flag("--kv-stats", o.print_stats, "print the KV tiers' traffic, hits and I/O latency at the end (stderr)")
      ->group(group);
  cmd.add_option("--kv-stats-json", o.stats_json_path, "write the KV statistics as JSON to FILE")
      ->type_name("FILE")
      ->group(group);
}

std::string kv_store_summary(const KvCliOptions& o, const KvCache& kv) {
  const KvStats stats = kv.stats();
  if (!stats.tiered) return "KV store: in memory";
  if (!stats.disk_tier) return "KV store: in memory, in chunks of " + std::to_string(o.chunk_tokens) + " tokens";
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "KV store: device %.2f MiB, host %.2f MiB (%s), chunks of %d tokens, disk tier %s (compressed reads: %s): ",
                o.device_mb, o.host_mb, o.host_codec.c_str(), o.chunk_tokens, o.dir.c_str(), o.compress.c_str());
  return buf + stats.disk_io_mode;
}

Status report_kv_stats(const KvCliOptions& o, KvStats stats, const PrefillIoStats& prefill) {
  if (!o.print_stats && o.stats_json_path.empty()) return Status::ok();
  const PolicyMemoryStats& policy = stats.policy_memory;
  std::string text;
  std::string json;
  if (stats.tiered) {
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
