// The counters of GET /metrics, in Prometheus' text format (version 0.0.4): requests by
// endpoint and status, tokens, decode speed, and the running requests' KV bytes per tier.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "engine/batch_scheduler.h"
#include "engine/prompt_cache.h"

namespace leoam::server {

class ServerMetrics {
 public:
  // One HTTP request answered.
  void record_request(const std::string& endpoint, int http_status);
  // A completion's time to its first token (from the request's arrival), in ms.
  void record_first_token_ms(double ms);

  // `cache`: the prompt cache's, when there is one.
  std::string prometheus_text(const SchedulerStats& scheduler, const PromptCacheStats* cache) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t n_first_tokens_ = 0;
  double first_token_ms_sum_ = 0.0;
};

}  // namespace leoam::server
