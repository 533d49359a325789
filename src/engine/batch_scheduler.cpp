#include "engine/batch_scheduler.h"

#include <algorithm>
#include <limits>
#include <cmath>
#include <cstdio>
#include <span>
#include <utility>

#include "engine/prompt_cache.h"
#include "engine/stop_matcher.h"
#include "engine/stop_rules.h"
#include "engine/utf8_stream.h"
#include "kv/kv_dtype.h"
#include "sparse/sparse_attention.h"
#include "tokenizer/tokenizer.h"

namespace leoam {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The sampled token's log-probability under the model's logits, and the n most likely.
GeneratedToken token_logprobs(std::span<const float> logits, int32_t token, int n_top) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max));
  const float log_z = max + static_cast<float>(std::log(sum));
  GeneratedToken g{token, logits[token] - log_z, {}};
  const auto n = std::min<size_t>(static_cast<size_t>(n_top), logits.size());
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (size_t i = 0; i < n; ++i) g.top.push_back({ids[i], logits[ids[i]] - log_z});
  return g;
}

}  // namespace

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

std::optional<GenerationEvent> GenerationStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  GenerationEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void GenerationStream::push(GenerationEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_one();
}

struct BatchScheduler::Job {
  GenerationRequest request;
  std::shared_ptr<GenerationStream> stream;
  Clock::time_point submitted;
};

struct BatchScheduler::Running {
  Running(std::unique_ptr<Job> j, SequenceSlot s)
      : job(std::move(j)), slot(std::move(s)), sampler(job->request.sampler), stop(job->request.stop),
        json(job->request.json) {}
  DecodeSequence sequence() const { return {slot.kv.get(), slot.selector.get()}; }

  std::unique_ptr<Job> job;
  SequenceSlot slot;
  Sampler sampler;
  Utf8Stream utf8;
  StopMatcher stop;
  std::vector<float> row;  // the logits its next token is sampled from
  std::optional<JsonConstraint> json;  // the JSON value so far, with a constraint
  bool keep = false;                   // the prompt cache keeps its prompt once it ends
  std::vector<float> masked;           // with one: row with the tokens it does not allow at -inf
  int64_t n_generated = 0;
  int64_t n_reused = 0;  // prompt positions loaded from the prompt cache
  double queued_ms = 0.0;
  double prefill_ms = 0.0;
  Clock::time_point first_sample{};
};

BatchScheduler::BatchScheduler(const Tokenizer& tokenizer, SequenceFactory factory, const BatchSchedulerOptions& options)
    : tokenizer_(tokenizer), factory_(std::move(factory)), options_(options) {}

Result<std::unique_ptr<BatchScheduler>> BatchScheduler::create(const Model& model, const Tokenizer& tokenizer,
                                                               ForwardOptions forward, SequenceFactory factory,
                                                               const BatchSchedulerOptions& options) {
  if (options.n_parallel < 1) {
    return invalid_argument("the requests decoded together must be at least 1").about(Setting::kParallel);
  }
  if (options.max_queued < 0) return invalid_argument("the request queue's length must not be negative");
  if (options.n_parallel > forward.n_batch) {
    return invalid_argument(std::to_string(options.n_parallel) + " requests decoded together exceed the batch size of " +
                            std::to_string(forward.n_batch) + ": a decode step holds one row a request")
        .about(Setting::kParallel);
  }
  std::unique_ptr<BatchScheduler> s(new BatchScheduler(tokenizer, std::move(factory), options));
  BatchScheduler* self = s.get();
  forward.should_stop = [self] {
    const GenerationStream* p = self->prefilling_.load();
    return p != nullptr && p->cancelled();
  };
  // The context's own store only sizes its batch buffers: n_batch positions in RAM.
  forward.n_ctx = forward.n_batch;
  LEOAM_ASSIGN_OR_RETURN(s->ctx_, ForwardContext::create(model, forward));
  s->worker_ = std::thread([self] { self->work(); });
  if (options.prompt_cache != nullptr) s->saver_ = std::thread([self] { self->save_prompts(); });
  return s;
}

BatchScheduler::~BatchScheduler() { stop(); }

void BatchScheduler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
  // The prompts the worker handed over are kept before the saver ends.
  {
    std::lock_guard lock(save_mutex_);
    saver_stopping_ = true;
  }
  save_wake_.notify_all();
  if (saver_.joinable()) saver_.join();
}

void BatchScheduler::save_prompts() {
  for (;;) {
    Save s;
    {
      std::unique_lock lock(save_mutex_);
      save_wake_.wait(lock, [&] { return saver_stopping_ || !saves_.empty(); });
      if (saves_.empty()) return;
      s = std::move(saves_.front());
      saves_.pop_front();
    }
    // A prompt that cannot be kept was still answered.
    if (Status kept = options_.prompt_cache->save(s.dir, s.prompt, *s.slot.kv); !kept.is_ok()) {
      std::fprintf(stderr, "leoam: %s\n", kept.message().c_str());
    }
  }
}

Result<std::shared_ptr<GenerationStream>> BatchScheduler::submit(GenerationRequest request) {
  if (request.prompt_tokens.empty()) return invalid_argument("the prompt is empty: nothing to generate from");
  auto job = std::make_unique<Job>();
  job->request = std::move(request);
  job->stream = std::make_shared<GenerationStream>();
  job->submitted = Clock::now();
  std::shared_ptr<GenerationStream> stream = job->stream;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return Status(StatusCode::kCancelled, "the server is stopping");
    // A request waits only when every place in the batch is taken.
    const auto waiting = static_cast<int64_t>(queue_.size()) + n_preparing_;
    if (stats_.n_running + waiting >= options_.n_parallel && waiting >= options_.max_queued) {
      return Status(StatusCode::kResourceExhausted, "the server is busy: " + std::to_string(stats_.n_running) +
                                                        " requests running and " + std::to_string(waiting) +
                                                        " waiting; try again later");
    }
    ++n_preparing_;
  }
  if (options_.prompt_cache != nullptr) {
    options_.prompt_cache->prepare(job->request.prompt_tokens, [this]() -> Result<std::unique_ptr<KvCache>> {
      LEOAM_ASSIGN_OR_RETURN(SequenceSlot slot, factory_());
      return std::move(slot.kv);
    });
  }
  {
    std::lock_guard lock(mutex_);
    --n_preparing_;
    if (stopping_) return Status(StatusCode::kCancelled, "the server is stopping");
    queue_.push_back(std::move(job));
    stats_.n_queued = static_cast<int64_t>(queue_.size());
  }
  wake_.notify_one();
  return stream;
}

SchedulerStats BatchScheduler::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void BatchScheduler::work() {
  std::vector<size_t> rows;
  for (;;) {
    // Admit waiting requests up to n_parallel, between steps.
    std::vector<std::unique_ptr<Job>> admitted;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !running_.empty(); });
      if (stopping_) break;
      while (!queue_.empty() && running_.size() + admitted.size() < static_cast<size_t>(options_.n_parallel)) {
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      stats_.n_queued = static_cast<int64_t>(queue_.size());
      stats_.n_running = static_cast<int64_t>(running_.size() + admitted.size());
    }
    for (std::unique_ptr<Job>& job : admitted) start(std::move(job));

    const std::vector<BatchToken> step = sample_all(rows);
    if (!step.empty()) {
      const Clock::time_point t0 = Clock::now();
      if (Status st = ctx_->decode_batch(step, logits_); !st.is_ok()) {
        finish_all(FinishReason::kError, st);
      } else {
        const auto n_vocab = static_cast<size_t>(ctx_->n_vocab());
        for (size_t k = 0; k < rows.size(); ++k) {
          running_[rows[k]]->row.assign(logits_.begin() + k * n_vocab, logits_.begin() + (k + 1) * n_vocab);
        }
        std::lock_guard lock(mutex_);
        ++stats_.n_steps;
        stats_.decode_ms += ms_between(t0, Clock::now());
      }
    }
    publish_stats();
  }
  // Stopping: every request still here ends cancelled.
  finish_all(FinishReason::kCancelled, Status::ok());
  std::deque<std::unique_ptr<Job>> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(queue_);
  }
  for (std::unique_ptr<Job>& job : left) {
    GenerationEvent e;
    e.done = true;
    e.finish = FinishReason::kCancelled;
    e.n_prompt_tokens = static_cast<int64_t>(job->request.prompt_tokens.size());
    job->stream->push(std::move(e));
  }
}

void BatchScheduler::start(std::unique_ptr<Job> job) {
  const Clock::time_point t0 = Clock::now();
  GenerationEvent failed;
  failed.done = true;
  failed.n_prompt_tokens = static_cast<int64_t>(job->request.prompt_tokens.size());
  failed.queued_ms = ms_between(job->submitted, t0);
  const auto fail = [&](FinishReason reason, Status error) {
    failed.finish = reason;
    failed.error = std::move(error);
    {
      std::lock_guard lock(mutex_);
      ++stats_.n_requests;
      ++(reason == FinishReason::kCancelled ? stats_.n_cancelled : stats_.n_failed);
      --stats_.n_running;
    }
    job->stream->push(std::move(failed));
  };
  if (job->stream->cancelled()) return fail(FinishReason::kCancelled, Status::ok());
  Result<SequenceSlot> slot = factory_();
  if (!slot.is_ok()) return fail(FinishReason::kError, slot.status());
  auto r = std::make_unique<Running>(std::move(job), std::move(*slot));
  r->queued_ms = failed.queued_ms;
  const GenerationRequest& req = r->job->request;
  for (int32_t t : req.prompt_tokens) r->sampler.accept(t);
  PromptCache* cache = options_.prompt_cache;
  r->n_reused = cache != nullptr ? cache->restore(req.prompt_tokens, *r->slot.kv) : 0;
  prefilling_.store(r->job->stream.get());
  const std::span<const int32_t> rest = std::span(req.prompt_tokens).subspan(static_cast<size_t>(r->n_reused));
  const Status st = ctx_->eval_sequence(r->sequence(), rest, false, r->row);
  prefilling_.store(nullptr);
  // Kept by the saver once the request ends (remember: a copy of the prompt's KV, which the
  // decode of the others need not wait for).
  r->keep = st.is_ok() && cache != nullptr && cache->worth_keeping(req.prompt_tokens, r->n_reused);
  r->prefill_ms = ms_between(t0, Clock::now());
  if (!st.is_ok()) {
    // A request that fails or is cancelled in its prefill keeps nothing.
    r->slot = {};
    job = std::move(r->job);
    return fail(st.code() == StatusCode::kCancelled ? FinishReason::kCancelled : FinishReason::kError,
                st.code() == StatusCode::kCancelled ? Status::ok() : st);
  }
  {
    std::lock_guard lock(mutex_);
    stats_.n_prompt_tokens += rest.size();
    stats_.n_reused_tokens += static_cast<uint64_t>(r->n_reused);
    stats_.prefill_ms += r->prefill_ms;
  }
  running_.push_back(std::move(r));
}

std::vector<BatchToken> BatchScheduler::sample_all(std::vector<size_t>& rows) {
  std::vector<BatchToken> step;
  rows.clear();
  for (size_t i = 0; i < running_.size();) {
    Running& r = *running_[i];
    const GenerationRequest& req = r.job->request;
    const KvCache& kv = *r.slot.kv;
    const auto end = [&](FinishReason reason) { finish(i, reason); };  // running_[i] is then another
    if (r.job->stream->cancelled()) {
      end(FinishReason::kCancelled);
      continue;
    }
    const StopRules rules{req.n_predict};
    if (rules.before_sample(r.n_generated, kv.n_tokens(), kv.n_ctx())) {
      end(FinishReason::kLength);
      continue;
    }
    if (r.n_generated == 0) r.first_sample = Clock::now();
    if (r.json) {
      // The tokens left after this one: the value must be whole by then.
      const int64_t left = rules.tokens_left(r.n_generated, kv.n_tokens(), kv.n_ctx());
      r.masked = r.row;
      if (!mask_for_json(*r.json, left, r.masked)) {
        finish(i, FinishReason::kError, internal_error("no token of the vocabulary continues the JSON value"));
        continue;
      }
    }
    const int32_t token = r.sampler.sample(r.json ? r.masked : r.row);
    r.sampler.accept(token);
    ++r.n_generated;
    GenerationEvent e;
    if (req.n_top_logprobs >= 0) e.tokens.push_back(token_logprobs(r.row, token, req.n_top_logprobs));
    else e.tokens.push_back({token, 0.0f, {}});
    const bool eog = tokenizer_.is_eog(token);
    // An end-of-generation token's text (a control token's is empty) is not part of the answer.
    if (!eog) {
      const std::string piece = r.n_generated == 1 && req.strip_leading_space
                                    ? tokenizer_.detokenize({token}, /*remove_leading_space=*/true)
                                    : tokenizer_.token_to_piece(token);
      e.text = r.stop.push(r.utf8.push(piece));
      if (r.json && !r.json->feed(tokenizer_.token_to_piece(token))) {
        r.job->stream->push(std::move(e));
        finish(i, FinishReason::kError, internal_error("the sampled token does not continue the JSON value"));
        continue;
      }
    }
    r.job->stream->push(std::move(e));
    const std::optional<StopReason> after = rules.after_token(eog, r.n_generated);
    if (after == StopReason::kEndOfGeneration || r.stop.stopped() || (r.json && r.json->complete())) {
      end(FinishReason::kStop);
      continue;
    }
    if (after) {
      end(FinishReason::kLength);  // the last token needs no step
      continue;
    }
    step.push_back({token, r.sequence()});
    rows.push_back(i);
    ++i;
  }
  return step;
}

bool BatchScheduler::mask_for_json(const JsonConstraint& json, int64_t chars_left, std::vector<float>& row) {
  if (pieces_.empty()) {
    pieces_.resize(static_cast<size_t>(tokenizer_.n_vocab()));
    for (int32_t id = 0; id < tokenizer_.n_vocab(); ++id) {
      if (!tokenizer_.is_eog(id)) pieces_[id] = tokenizer_.token_to_piece(id);
    }
  }
  const bool whole = json.complete();
  const auto allowed = [&](size_t id, int64_t left) {
    return pieces_[id].empty() ? whole && tokenizer_.is_eog(static_cast<int32_t>(id)) : json.allows(pieces_[id], left);
  };
  const size_t n = std::min(row.size(), pieces_.size());
  // A value that cannot be finished in the tokens left (max_tokens below its shortest text) is
  // still written as far as it goes: then any token that continues it.
  for (const int64_t left : {chars_left, std::numeric_limits<int64_t>::max()}) {
    std::vector<char> ok(n);
    bool any = false;
    for (size_t id = 0; id < n; ++id) any |= (ok[id] = allowed(id, left) ? 1 : 0) != 0;
    if (!any) continue;
    for (size_t id = 0; id < n; ++id) {
      if (ok[id] == 0) row[id] = -std::numeric_limits<float>::infinity();
    }
    return true;
  }
  return false;
}

void BatchScheduler::finish(size_t i, FinishReason reason, Status error) {
  std::unique_ptr<Running> r = std::move(running_[i]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
  GenerationEvent e;
  e.text = r->stop.push(r->utf8.flush()) + r->stop.flush();  // "" after a stop string
  e.done = true;
  e.finish = reason;
  e.error = std::move(error);
  e.n_prompt_tokens = static_cast<int64_t>(r->job->request.prompt_tokens.size());
  e.n_reused_tokens = r->n_reused;
  e.n_generated = r->n_generated;
  e.queued_ms = r->queued_ms;
  e.prefill_ms = r->prefill_ms;
  if (r->n_generated > 0) e.decode_ms = ms_between(r->first_sample, Clock::now());
  uint64_t read = 0, written = 0;
  if (const KvStats s = r->slot.kv->stats(); s.tiered) {
    for (int t = 0; t < kNumTiers; ++t) e.bytes_read[t] = s.tiers[t].bytes_read;
    read = s.tiers[static_cast<int>(Tier::kDisk)].bytes_read;
    written = s.tiers[static_cast<int>(Tier::kDisk)].bytes_written;
  }
  if (const sparse::SparseAttention* sparse = r->slot.selector.get(); sparse != nullptr) {
    e.attended_share = sparse->total().attended_share();
  }
  // The store is freed (its files removed), and the stats say so, before the client hears the end;
  // one whose prompt the cache keeps goes to the saver, which frees it after the copy. The cache
  // claims the prompt first, so that a request sent once this one's answer is heard waits for the
  // copy rather than missing it.
  if (r->keep && reason != FinishReason::kError) {
    if (std::optional<std::string> dir =
            options_.prompt_cache->claim(r->job->request.prompt_tokens, *r->slot.kv, r->n_reused)) {
      {
        std::lock_guard lock(save_mutex_);
        saves_.push_back({std::move(*dir), std::move(r->job->request.prompt_tokens), std::move(r->slot)});
      }
      save_wake_.notify_one();
    }
  }
  r->slot = {};
  {
    std::lock_guard lock(mutex_);
    ++stats_.n_requests;
    if (reason == FinishReason::kCancelled) ++stats_.n_cancelled;
    if (reason == FinishReason::kError) ++stats_.n_failed;
    stats_.n_generated_tokens += static_cast<uint64_t>(r->n_generated);
    finished_disk_read_ += read;
    finished_disk_written_ += written;
  }
  publish_stats();
  r->job->stream->push(std::move(e));
}

void BatchScheduler::finish_all(FinishReason reason, const Status& error) {
  while (!running_.empty()) finish(running_.size() - 1, reason, error);
}

void BatchScheduler::publish_stats() {
  std::array<uint64_t, kNumTiers> resident{};
  uint64_t read = 0, written = 0;
  for (const std::unique_ptr<Running>& r : running_) {
    const KvCache& kv = *r->slot.kv;
    if (const KvStats s = kv.stats(); s.tiered) {
      for (int t = 0; t < kNumTiers; ++t) resident[t] += s.resident_bytes[t];
      read += s.tiers[static_cast<int>(Tier::kDisk)].bytes_read;
      written += s.tiers[static_cast<int>(Tier::kDisk)].bytes_written;
    } else {  // the in-memory store holds its whole context from the start
      const KvCacheShape& sh = kv.shape();
      resident[static_cast<int>(Tier::kDevice)] += static_cast<uint64_t>(sh.n_ctx) * sh.n_layer * 2 * sh.n_kv_heads *
                                                   sh.head_dim * kv_dtype_size(kv.dtype());
    }
  }
  std::lock_guard lock(mutex_);
  stats_.resident_bytes = resident;
  stats_.disk_bytes_read = finished_disk_read_ + read;
  stats_.disk_bytes_written = finished_disk_written_ + written;
  stats_.n_running = static_cast<int64_t>(running_.size());
}

}  // namespace leoam
