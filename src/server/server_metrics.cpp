#include "server/server_metrics.h"

#include <cstdio>

#include "kv/tier.h"

namespace leoam::server {
namespace {

// "# HELP name help\n# TYPE name type\n"
void header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), " %.17g\n", value);
  out += name + buf;
}

}  // namespace

void ServerMetrics::record_request(const std::string& endpoint, int http_status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, http_status}];
}

void ServerMetrics::Histogram::observe(double seconds) {
  for (size_t i = 0; i < bounds.size(); ++i) counts[i] += seconds <= bounds[i] ? 1 : 0;
  ++count;
  sum += seconds;
}

void ServerMetrics::Histogram::write(std::string& out, const char* name, const char* help) const {
  header(out, name, "histogram", help);
  char le[32];
  for (size_t i = 0; i < bounds.size(); ++i) {
    std::snprintf(le, sizeof(le), "%g", bounds[i]);
    sample(out, std::string(name) + "_bucket{le=\"" + le + "\"}", static_cast<double>(counts[i]));
  }
  sample(out, std::string(name) + "_bucket{le=\"+Inf\"}", static_cast<double>(count));
  sample(out, std::string(name) + "_sum", sum);
  sample(out, std::string(name) + "_count", static_cast<double>(count));
}

void ServerMetrics::record_first_token_ms(double ms) {
  std::lock_guard lock(mutex_);
  first_token_.observe(ms / 1000.0);
}

void ServerMetrics::record_completion(double latency_ms, double first_token_ms, int64_t n_tokens) {
  std::lock_guard lock(mutex_);
  latency_.observe(latency_ms / 1000.0);
  if (n_tokens >= 2) per_token_.observe((latency_ms - first_token_ms) / 1000.0 / static_cast<double>(n_tokens - 1));
}

void ServerMetrics::record_client_gone() {
  std::lock_guard lock(mutex_);
  ++n_clients_gone_;
}

std::string ServerMetrics::prometheus_text(const SchedulerStats& s, const PromptCacheStats* cache) const {
  std::string out;
  {
    std::lock_guard lock(mutex_);
    header(out, "leoam_http_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
    for (const auto& [key, n] : requests_) {
      sample(out, "leoam_http_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"}",
             static_cast<double>(n));
    }
    first_token_.write(out, "leoam_time_to_first_token_seconds", "From a completion request's arrival to its first token.");
    per_token_.write(out, "leoam_time_per_output_token_seconds",
                     "A completion's time after its first token over its tokens after the first.");
    latency_.write(out, "leoam_request_latency_seconds", "From a completion request's arrival to its last token.");
    header(out, "leoam_client_disconnects_total", "counter", "Clients that hung up before their answer was done.");
    sample(out, "leoam_client_disconnects_total", static_cast<double>(n_clients_gone_));
  }
  header(out, "leoam_requests_running", "gauge", "Completion requests in the running batch.");
  sample(out, "leoam_requests_running", static_cast<double>(s.n_running));
  header(out, "leoam_requests_queued", "gauge", "Completion requests waiting for a place in the batch.");
  sample(out, "leoam_requests_queued", static_cast<double>(s.n_queued));
  header(out, "leoam_requests_finished_total", "counter", "Completion requests finished, by how they ended.");
  const uint64_t ended_ok = s.n_requests - s.n_cancelled - s.n_failed;
  sample(out, "leoam_requests_finished_total{result=\"ok\"}", static_cast<double>(ended_ok));
  sample(out, "leoam_requests_finished_total{result=\"cancelled\"}", static_cast<double>(s.n_cancelled));
  sample(out, "leoam_requests_finished_total{result=\"error\"}", static_cast<double>(s.n_failed));
  header(out, "leoam_prompt_tokens_total", "counter", "Prompt tokens prefilled.");
  sample(out, "leoam_prompt_tokens_total", static_cast<double>(s.n_prompt_tokens));
  header(out, "leoam_prompt_tokens_reused_total", "counter", "Prompt tokens whose KV was reused from a cached prefix.");
  sample(out, "leoam_prompt_tokens_reused_total", static_cast<double>(s.n_reused_tokens));
  header(out, "leoam_generated_tokens_total", "counter", "Tokens generated.");
  sample(out, "leoam_generated_tokens_total", static_cast<double>(s.n_generated_tokens));
  header(out, "leoam_decode_steps_total", "counter", "Batched decode steps.");
  sample(out, "leoam_decode_steps_total", static_cast<double>(s.n_steps));
  header(out, "leoam_prefill_seconds_total", "counter", "Time spent prefilling prompts.");
  sample(out, "leoam_prefill_seconds_total", s.prefill_ms / 1000.0);
  header(out, "leoam_decode_seconds_total", "counter", "Time spent in batched decode steps.");
  sample(out, "leoam_decode_seconds_total", s.decode_ms / 1000.0);
  header(out, "leoam_decode_tokens_per_second", "gauge", "Tokens generated per second of decode steps, since the start.");
  sample(out, "leoam_decode_tokens_per_second", s.decode_ms > 0 ? static_cast<double>(s.n_generated_tokens) * 1000.0 / s.decode_ms : 0.0);
  header(out, "leoam_kv_resident_bytes", "gauge", "KV bytes of the running requests, by tier.");
  for (int t = 0; t < kNumTiers; ++t) {
    sample(out, std::string("leoam_kv_resident_bytes{tier=\"") + tier_name(static_cast<Tier>(t)) + "\"}",
           static_cast<double>(s.resident_bytes[t]));
  }
  header(out, "leoam_kv_disk_read_bytes_total", "counter", "KV bytes read from the disk tier.");
  sample(out, "leoam_kv_disk_read_bytes_total", static_cast<double>(s.disk_bytes_read));
  header(out, "leoam_kv_disk_written_bytes_total", "counter", "KV bytes written to the disk tier.");
  sample(out, "leoam_kv_disk_written_bytes_total", static_cast<double>(s.disk_bytes_written));
  if (cache != nullptr) {
    header(out, "leoam_prompt_cache_entries", "gauge", "Prompts whose KV the prompt cache keeps on disk.");
    sample(out, "leoam_prompt_cache_entries", static_cast<double>(cache->n_entries));
    header(out, "leoam_prompt_tokens_in_place_total", "counter",
           "Reused prompt tokens read in place from the prompt cache's files (not copied into the request's store).");
    sample(out, "leoam_prompt_tokens_in_place_total", static_cast<double>(cache->tokens_in_place));
    header(out, "leoam_prompt_cache_bytes", "gauge", "Bytes of the prompt cache's files.");
    sample(out, "leoam_prompt_cache_bytes", static_cast<double>(cache->bytes));
    header(out, "leoam_prompt_cache_lookups_total", "counter", "Prompts looked up in the prompt cache, by result.");
    sample(out, "leoam_prompt_cache_lookups_total{result=\"hit\"}", static_cast<double>(cache->hits));
    sample(out, "leoam_prompt_cache_lookups_total{result=\"miss\"}", static_cast<double>(cache->misses));
    header(out, "leoam_prompt_cache_removed_total", "counter", "Entries removed, by why.");
    sample(out, "leoam_prompt_cache_removed_total{reason=\"evicted\"}", static_cast<double>(cache->evictions));
    sample(out, "leoam_prompt_cache_removed_total{reason=\"corrupt\"}", static_cast<double>(cache->dropped));
  }
  return out;
}

}  // namespace leoam::server
