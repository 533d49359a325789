// BatchScheduler: continuous batching of generation requests over one model, for the server.
// A worker thread owns the forward context. Requests wait in a bounded queue; between two decode
// steps the waiting ones join the running batch (up to n_parallel), each in a sequence of its own
// (a KV store and selector from the SequenceFactory), its prompt prefilled whole there, which
// delays the running requests' next tokens by its prefill time. Then every running request
// samples its next token, the ones that stop leave (their store freed at once), and the rest
// decode one step together (ForwardContext::decode_batch). A request reads its events from its
// GenerationStream (text with stop strings held back and cut, tokens with log-probabilities when
// asked, a last event with the finish reason), and gets the tokens generate() would give it alone
// up to the batch's rounding. Cancelling a stream ends its request at the next step or segment.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/json_constraint.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "kv/kv_stats.h"
#include "model/forward_context.h"
#include "sparse/sparse_attention.h"

namespace leoam {

class Model;
class PromptCache;
class Tokenizer;

// A request's sequence: its own KV store and selector (null: every position attended).
struct SequenceSlot {
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<sparse::SparseAttention> selector;  // null: attention over every position
};
using SequenceFactory = std::function<Result<SequenceSlot>()>;

struct BatchSchedulerOptions {
  int n_parallel = 4;  // requests decoded together at most
  int max_queued = 64; // requests waiting for a place beyond those; more are refused
  // Where a prompt's beginning may be loaded from instead of computed, and kept for later
  // prompts (prompt_cache.h); null: none. Must outlive the scheduler.
  PromptCache* prompt_cache = nullptr;
};

struct GenerationRequest {
  std::vector<int32_t> prompt_tokens;  // non-empty
  int n_predict = 128;                 // tokens to generate at most; < 0: until EOG or a full context
  SamplerOptions sampler;
  std::vector<std::string> stop;  // generation ends before the first of these, which is not returned
  int n_top_logprobs = -1;        // -1: no log-probabilities; else the sampled token's and the n most likely
  bool strip_leading_space = false;  // remove SentencePiece's leading space from the first token's text
  // The text must be a JSON value of this constraint (json_constraint.h): each token is sampled
  // among those that keep it one and let it finish within n_predict (or the context), and the
  // request ends (kStop) once the value is whole. None: free text.
  std::optional<JsonConstraint> json;
};

enum class FinishReason : uint8_t {
  kStop,       // an end-of-generation token or a stop string
  kLength,     // n_predict tokens, or a full context
  kCancelled,  // the stream was cancelled, or the scheduler stopped
  kError,      // the forward pass or the store failed (GenerationEvent::error)
};
const char* finish_reason_name(FinishReason reason);  // OpenAI's: "stop", "length", "cancelled", "error"

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;  // log-softmax of the model's logits (before temperature and the samplers)
};
struct GeneratedToken {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // the n_top_logprobs most likely, most likely first
};

struct GenerationEvent {
  std::string text;                     // new text since the last event
  std::vector<GeneratedToken> tokens;   // tokens sampled since the last event
  bool done = false;                    // the last event of the request
  // With done:
  FinishReason finish = FinishReason::kStop;
  Status error;
  int64_t n_prompt_tokens = 0;
  int64_t n_reused_tokens = 0;  // prompt positions whose KV came from the prompt cache
  int64_t n_generated = 0;
  double queued_ms = 0.0;   // from submit to the start of its prefill
  double prefill_ms = 0.0;  // its prompt: loading from the prompt cache, evaluating, keeping it there
  double decode_ms = 0.0;   // from its first sample to its last
  double attended_share = 1.0;  // of the positions its decode steps could see, those attended
  std::array<uint64_t, kNumTiers> bytes_read{};  // its store's reads, per tier (tiered stores)
};

// The events of one request, in order. Written by the scheduler's worker, read by one reader.
class GenerationStream {
 public:
  // The next event, waiting up to `timeout`; nullopt when none came.
  std::optional<GenerationEvent> next(std::chrono::milliseconds timeout);
  // Asks the scheduler to end the request (FinishReason::kCancelled); its store is freed.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  void push(GenerationEvent event);  // the scheduler's side

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<GenerationEvent> events_;
  std::atomic<bool> cancelled_{false};
};

// What the scheduler has done and holds, for /metrics.
struct SchedulerStats {
  int64_t n_running = 0;
  int64_t n_queued = 0;
  uint64_t n_requests = 0;         // finished, every reason
  uint64_t n_cancelled = 0;
  uint64_t n_failed = 0;
  uint64_t n_prompt_tokens = 0;    // prefilled
  uint64_t n_reused_tokens = 0;    // loaded from the prompt cache instead
  uint64_t n_generated_tokens = 0;
  uint64_t n_steps = 0;            // batched decode steps
  double prefill_ms = 0.0;
  double decode_ms = 0.0;          // the decode steps' time, all requests together
  // The running requests' stores: bytes resident per tier, and disk traffic of every store so far.
  std::array<uint64_t, kNumTiers> resident_bytes{};
  uint64_t disk_bytes_read = 0;
  uint64_t disk_bytes_written = 0;
};

class BatchScheduler {
 public:
  // Creates the forward context (options.should_stop is the scheduler's own: a cancelled
  // request's prefill stops between segments) and starts the worker. `model`, `tokenizer` must
  // outlive it. The context's own store is left unused: every request has a store of the
  // factory's.
  static Result<std::unique_ptr<BatchScheduler>> create(const Model& model, const Tokenizer& tokenizer,
                                                        ForwardOptions forward, SequenceFactory factory,
                                                        const BatchSchedulerOptions& options);
  // stop(), then frees the context.
  ~BatchScheduler();
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;

  // Queues a request. Fails with kResourceExhausted when max_queued requests already wait, and
  // with kInvalidArgument on an empty prompt. With a prompt cache, first opens and checks the
  // entry its prompt will load (PromptCache::prepare), on the caller's thread: the worker, which
  // decodes the running requests, does not wait for a large entry's check.
  Result<std::shared_ptr<GenerationStream>> submit(GenerationRequest request);

  // Stops the worker: requests still waiting or running end with kCancelled, and later submits
  // fail with kCancelled. Returns once the worker has.
  void stop();

  SchedulerStats stats() const;
  const BatchSchedulerOptions& options() const { return options_; }

 private:
  struct Job;
  struct Running;
  BatchScheduler(const Tokenizer& tokenizer, SequenceFactory factory, const BatchSchedulerOptions& options);

  void work();
  // The saver's loop: keeps the prompts of finished requests in the prompt cache, one at a time.
  void save_prompts();
  void start(std::unique_ptr<Job> job);
  // Samples each running request's next token, emits it, ends the requests that stop; returns
  // the rows of the next decode step.
  std::vector<BatchToken> sample_all(std::vector<size_t>& rows);
  // Sets the logits of the tokens that `json` does not allow next, with `chars_left` tokens
  // after this one, to -inf (where none can finish it in time: of the tokens that do not continue
  // it); false when none continues it.
  bool mask_for_json(const JsonConstraint& json, int64_t chars_left, std::vector<float>& row);
  void finish(size_t i, FinishReason reason, Status error = Status::ok());
  void finish_all(FinishReason reason, const Status& error);
  void publish_stats();

  const Tokenizer& tokenizer_;
  SequenceFactory factory_;
  BatchSchedulerOptions options_;
  std::unique_ptr<ForwardContext> ctx_;
  std::atomic<GenerationStream*> prefilling_{nullptr};  // the stream whose prompt the worker evaluates

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  int64_t n_preparing_ = 0;  // submits checking their cache entry, under mutex_: they count as waiting
  std::deque<std::unique_ptr<Job>> queue_;
  bool stopping_ = false;
  SchedulerStats stats_;  // under mutex_
  uint64_t finished_disk_read_ = 0, finished_disk_written_ = 0;  // the freed stores', under mutex_

  // The worker's own.
  std::vector<std::string> pieces_;  // each token's text, for the JSON constraint (filled at its first use)
  std::vector<std::unique_ptr<Running>> running_;
  std::vector<float> logits_;
  std::thread worker_;

  // The saver: finished requests whose prompt the cache keeps, with their stores.
  struct Save {
    std::string dir;  // PromptCache::claim's
    std::vector<int32_t> prompt;
    SequenceSlot slot;
  };
  std::mutex save_mutex_;
  std::condition_variable save_wake_;
  std::deque<Save> saves_;       // under save_mutex_
  bool saver_stopping_ = false;  // under save_mutex_
  std::thread saver_;
};

}  // namespace leoam
