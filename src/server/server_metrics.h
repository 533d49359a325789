// The counters of GET /metrics, in Prometheus' text format (version 0.0.4): requests by
// endpoint and status, histograms of time to first token, time per output token and request
// latency, clients that hung up, tokens, decode speed, and the running requests' KV bytes per tier.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/batch_scheduler.h"
#include "engine/prompt_cache.h"

namespace leoam::server {

class ServerMetrics {
 public:
  // One HTTP request answered.
  void record_request(const std::string& endpoint, int http_status);
  // A completion's time to its first token (from the request's arrival), in ms.
  void record_first_token_ms(double ms);
  // A completion answered whole: from its arrival to its last token, the time to its first, and
  // the tokens it generated (time per output token: the time after the first over the rest).
  void record_completion(double latency_ms, double first_token_ms, int64_t n_tokens);
  // A client that hung up before its answer was done (its request cancelled).
  void record_client_gone();

  // `cache`: the prompt cache's, when there is one.
  std::string prometheus_text(const SchedulerStats& scheduler, const PromptCacheStats* cache) const;

 private:
  mutable std::mutex mutex_;
  // A Prometheus histogram: cumulative counts at upper bounds, in seconds.
  struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // [bounds.size()]: observations <= bounds[i]
    uint64_t count = 0;
    double sum = 0.0;
    explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size(), 0) {}
    void observe(double seconds);
    void write(std::string& out, const char* name, const char* help) const;
  };
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  Histogram first_token_{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}};
  Histogram per_token_{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  Histogram latency_{{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
  uint64_t n_clients_gone_ = 0;
};

}  // namespace leoam::server
