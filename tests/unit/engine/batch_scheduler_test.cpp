// Continuous batching over the tiny model (tiny_model_test.h): requests that join a running
// batch get what generate() gives each alone; stop strings, log-probabilities, a full queue,
// cancellation and shutdown.
#include "engine/batch_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../temp_dir.h"
#include "engine/generator.h"
#include "engine/prompt_cache.h"
#include "io/file.h"
#include "kv/memory_kv_cache.h"
#include "tiny_model_test.h"

namespace leoam {
namespace {

using namespace std::chrono_literals;

// What a request's stream delivered.
struct Collected {
  std::string text;
  std::vector<GeneratedToken> tokens;
  GenerationEvent last;
  bool ended = false;
};

Collected drain(GenerationStream& stream) {
  Collected c;
  while (!c.ended) {
    std::optional<GenerationEvent> e = stream.next(30s);
    if (!e) break;  // a hung scheduler: the test's checks fail on ended
    c.text += e->text;
    c.tokens.insert(c.tokens.end(), e->tokens.begin(), e->tokens.end());
    if (e->done) {
      c.last = std::move(*e);
      c.ended = true;
    }
  }
  return c;
}

class BatchSchedulerTest : public TinyModelTest {
 protected:
  // A scheduler whose requests each get an in-memory store of n_ctx positions, and `cache`.
  std::unique_ptr<BatchScheduler> scheduler(int n_parallel, int max_queued, int64_t n_ctx = 128,
                                            PromptCache* cache = nullptr) {
    ForwardOptions fwd;
    fwd.n_threads = 2;
    fwd.n_batch = 64;
    const ModelHparams& hp = model_->hparams();
    SequenceFactory factory = [hp, n_ctx]() -> Result<SequenceSlot> {
      MemoryKvCacheOptions m;
      m.shape = {hp.n_layer, hp.n_head_kv, hp.head_dim, n_ctx};
      LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<MemoryKvCache> kv, MemoryKvCache::create(m));
      return SequenceSlot{std::move(kv), nullptr};
    };
    BatchSchedulerOptions o{n_parallel, max_queued};
    o.prompt_cache = cache;
    auto s = BatchScheduler::create(*model_, *tokenizer_, fwd, factory, o);
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    return s.is_ok() ? std::move(*s) : nullptr;
  }

  static GenerationRequest request(std::string_view prompt, int n_predict, float temperature, uint64_t seed) {
    GenerationRequest r;
    r.prompt_tokens = tokenizer_->tokenize(prompt, /*add_bos=*/true, /*parse_special=*/false);
    r.n_predict = n_predict;
    r.sampler.temperature = temperature;
    r.sampler.seed = seed;
    return r;
  }

  // generate() alone on a fresh context: its tokens, and its text without an end-of-generation
  // token's piece (a request's text leaves it out).
  static std::vector<int32_t> alone(const GenerationRequest& r, std::string* text) {
    auto ctx = context(128);
    GenerateOptions o;
    o.n_predict = r.n_predict;
    o.sampler = r.sampler;
    std::vector<int32_t> tokens;
    GenerateCallbacks cb;
    cb.on_token = [&](int32_t t) { tokens.push_back(t); };
    auto st = generate_from_tokens(*ctx, *tokenizer_, r.prompt_tokens, false, o, cb);
    EXPECT_TRUE(st.is_ok()) << st.status().message();
    std::vector<int32_t> shown = tokens;
    if (!shown.empty() && tokenizer_->is_eog(shown.back())) shown.pop_back();
    *text = tokenizer_->detokenize(shown, /*remove_leading_space=*/false);
    return tokens;
  }

  static std::vector<int32_t> ids(const Collected& c) {
    std::vector<int32_t> v;
    for (const GeneratedToken& t : c.tokens) v.push_back(t.token);
    return v;
  }
};

// The real file system, whose reads (and with `writes_too` its writes) wait while the gate is
// shut: a large entry's check or save, held as long as the test likes.
class GatedFileSystem final : public FileSystem {
 public:
  void shut(bool writes_too = false) {
    std::lock_guard lock(mutex_);
    shut_ = true;
    writes_too_ = writes_too;
  }
  void wait_at_gate_to_write() {
    {
      std::lock_guard lock(mutex_);
      if (!writes_too_) return;
    }
    wait_at_gate();
  }
  void open_gate() {
    {
      std::lock_guard lock(mutex_);
      shut_ = false;
    }
    changed_.notify_all();
  }
  bool someone_waited() {
    std::lock_guard lock(mutex_);
    return waited_;
  }
  void wait_at_gate() {
    std::unique_lock lock(mutex_);
    if (shut_) waited_ = true;
    changed_.wait(lock, [&] { return !shut_; });
  }
  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& path, const FileOpenOptions& options) override {
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, posix_file_system().open(path, options));
    return std::unique_ptr<RandomAccessFile>(new Gated(std::move(f), *this));
  }
  Status remove(const std::string& path) override { return posix_file_system().remove(path); }
  Status create_dirs(const std::string& path) override { return posix_file_system().create_dirs(path); }
  bool exists(const std::string& path) override { return posix_file_system().exists(path); }

 private:
  class Gated final : public RandomAccessFile {
   public:
    Gated(std::unique_ptr<RandomAccessFile> f, GatedFileSystem& fs) : f_(std::move(f)), fs_(fs) {}
    const std::string& path() const override { return f_->path(); }
    FileIoInfo io_info() const override { return f_->io_info(); }
    Status read(std::span<const ReadRequest> r) override {
      fs_.wait_at_gate();
      return f_->read(r);
    }
    Status write(uint64_t offset, const void* src, size_t n) override {
      fs_.wait_at_gate_to_write();
      return f_->write(offset, src, n);
    }
    Status write_batch(std::span<const WriteRequest> w) override {
      fs_.wait_at_gate_to_write();
      return f_->write_batch(w);
    }
    Status sync() override { return f_->sync(); }
    Result<uint64_t> size() const override { return f_->size(); }

   private:
    std::unique_ptr<RandomAccessFile> f_;
    GatedFileSystem& fs_;
  };
  std::mutex mutex_;
  std::condition_variable changed_;
  bool shut_ = false;
  bool writes_too_ = false;
  bool waited_ = false;
};

// A prompt cache in a scratch folder whose files are read and written through a gate.
struct GatedCache {
  testing_util::TempDir dir;
  GatedFileSystem gated;
  Result<std::unique_ptr<PromptCache>> open() {
    PromptCacheOptions co;
    co.dir = dir.path() + "/cache";
    co.min_tokens = 16;
    co.layout.file_system = &gated;
    return PromptCache::open(co);
  }
};

// A request whose prompt loads an entry of the prompt cache that nobody has opened yet has it
// read and checked on its own thread, in submit: meanwhile the worker goes on answering others.
TEST_F(BatchSchedulerTest, ACacheEntrysCheckDoesNotHoldUpOtherRequests) {
  GatedCache g;
  auto cache = g.open();
  ASSERT_TRUE(cache.is_ok()) << cache.status().message();
  GatedFileSystem& gated = g.gated;
  auto s = scheduler(/*n_parallel=*/2, /*max_queued=*/8, 128, cache->get());
  ASSERT_NE(s, nullptr);
  const std::string doc = "Once upon a time there was a little dog who liked to run in the park with his friends";
  auto first = s->submit(request(doc + " and", 2, 0.0f, 1));
  ASSERT_TRUE(first.is_ok());
  ASSERT_TRUE(drain(**first).ended);
  for (int i = 0; i < 500 && (*cache)->stats().n_entries == 0; ++i) std::this_thread::sleep_for(10ms);  // the saver's
  ASSERT_EQ((*cache)->stats().n_entries, 1);  // kept, not opened

  gated.shut();
  std::promise<Result<std::shared_ptr<GenerationStream>>> reuse;
  std::thread asking([&] { reuse.set_value(s->submit(request(doc + " then", 2, 0.0f, 1))); });
  for (int i = 0; i < 500 && !gated.someone_waited(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(gated.someone_waited());  // the check is under way, held at the gate
  auto other = s->submit(request("The cat sat", 4, 0.0f, 2));
  ASSERT_TRUE(other.is_ok());
  const Collected answered = drain(**other);
  EXPECT_TRUE(answered.ended) << "another request waited for the entry's check";
  EXPECT_NE(answered.last.finish, FinishReason::kCancelled);
  gated.open_gate();
  asking.join();
  auto reused = reuse.get_future().get();
  ASSERT_TRUE(reused.is_ok()) << reused.status().message();
  const Collected c = drain(**reused);
  ASSERT_TRUE(c.ended);
  EXPECT_GT(c.last.n_reused_tokens, 16);
}

// A request under a JSON constraint: its text a JSON object, ended as soon as it is whole; with
// max_tokens below the shortest object, written as far as it goes.
TEST_F(BatchSchedulerTest, AJsonConstrainedRequestAnswersAWholeValueOrAsMuchAsFits) {
  auto s = scheduler(/*n_parallel=*/2, /*max_queued=*/8);
  ASSERT_NE(s, nullptr);
  for (uint64_t seed : {1, 2, 3}) {
    GenerationRequest r = request("Once upon a time", 40, 1.0f, seed);
    r.json = JsonConstraint::any_object();
    auto stream = s->submit(r);
    ASSERT_TRUE(stream.is_ok());
    const Collected c = drain(**stream);
    ASSERT_TRUE(c.ended);
    EXPECT_EQ(c.last.finish, FinishReason::kStop) << c.text;
    EXPECT_TRUE(nlohmann::json::parse(c.text, nullptr, false).is_object()) << c.text;
  }
  GenerationRequest short_one = request("Once upon a time", 1, 1.0f, 4);
  short_one.json = JsonConstraint::any_object();
  auto stream = s->submit(short_one);
  ASSERT_TRUE(stream.is_ok());
  const Collected c = drain(**stream);
  ASSERT_TRUE(c.ended);
  EXPECT_EQ(c.last.finish, FinishReason::kLength);
  EXPECT_EQ(c.text.substr(0, 1), "{");
}

// A finished request whose prompt the cache keeps is saved by the scheduler's saver, not its
// worker: while the copy is held at the gate, another request is answered; the next question
// about the document waits for the save and reuses it.
TEST_F(BatchSchedulerTest, ADocumentsSaveDoesNotHoldUpOtherRequests) {
  GatedCache g;
  auto cache = g.open();
  ASSERT_TRUE(cache.is_ok()) << cache.status().message();
  GatedFileSystem& gated = g.gated;
  auto s = scheduler(/*n_parallel=*/2, /*max_queued=*/8, 128, cache->get());
  ASSERT_NE(s, nullptr);
  const std::string doc = "Once upon a time there was a little dog who liked to run in the park with his friends";
  gated.shut(/*writes_too=*/true);
  auto first = s->submit(request(doc + " and", 2, 0.0f, 1));
  ASSERT_TRUE(first.is_ok());
  ASSERT_TRUE(drain(**first).ended);  // answered before its prompt is kept
  for (int i = 0; i < 500 && !gated.someone_waited(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(gated.someone_waited());  // the save is under way, held at the gate
  auto other = s->submit(request("The cat sat", 4, 0.0f, 2));
  ASSERT_TRUE(other.is_ok());
  EXPECT_TRUE(drain(**other).ended) << "another request waited for the document's save";
  gated.open_gate();
  auto again = s->submit(request(doc + " then", 2, 0.0f, 1));
  ASSERT_TRUE(again.is_ok());
  const Collected c = drain(**again);
  ASSERT_TRUE(c.ended);
  EXPECT_GT(c.last.n_reused_tokens, 16);
  EXPECT_EQ((*cache)->stats().saves, 1u);
}

TEST_F(BatchSchedulerTest, RequestsThatJoinARunningBatchGetWhatEachGetsAlone) {
  auto s = scheduler(/*n_parallel=*/2, /*max_queued=*/8);
  ASSERT_NE(s, nullptr);
  const std::vector<GenerationRequest> requests = {
      request("the cat", 30, 0.0f, 0), request("once upon a time", 12, 0.0f, 0),
      request("a", 40, 0.9f, 7), request("the dog and the", 20, 1.0f, 3), request("b c d", 25, 0.0f, 0)};
  // Two run at once: the others wait and join as places free, between steps.
  std::vector<std::shared_ptr<GenerationStream>> streams;
  for (const GenerationRequest& r : requests) {
    auto stream = s->submit(r);
    ASSERT_TRUE(stream.is_ok()) << stream.status().message();
    streams.push_back(*stream);
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const Collected c = drain(*streams[i]);
    ASSERT_TRUE(c.ended) << "request " << i;
    std::string text;
    EXPECT_EQ(ids(c), alone(requests[i], &text)) << "request " << i;
    EXPECT_EQ(c.text, text) << "request " << i;
    EXPECT_EQ(c.last.n_generated, static_cast<int64_t>(c.tokens.size()));
    EXPECT_EQ(c.last.n_prompt_tokens, static_cast<int64_t>(requests[i].prompt_tokens.size()));
    const bool eog = tokenizer_->is_eog(c.tokens.back().token);
    EXPECT_EQ(c.last.finish, eog ? FinishReason::kStop : FinishReason::kLength) << "request " << i;
  }
  const SchedulerStats st = s->stats();
  EXPECT_EQ(st.n_requests, requests.size());
  EXPECT_EQ(st.n_running, 0);
  EXPECT_EQ(st.n_queued, 0);
  EXPECT_GT(st.n_steps, 0u);
  EXPECT_EQ(st.resident_bytes[0], 0u);  // every store freed
}

TEST_F(BatchSchedulerTest, StopStringsEndTheTextBeforeThem) {
  auto s = scheduler(2, 8);
  GenerationRequest r = request("the cat", 40, 0.0f, 0);
  std::string full;
  alone(r, &full);
  ASSERT_GE(full.size(), 12u);
  // A stop string from the middle of the text: the text ends before its first occurrence.
  const std::string stop = full.substr(full.size() / 2, 3);
  r.stop = {"never appears \x01", stop};
  const Collected c = drain(**s->submit(r));
  ASSERT_TRUE(c.ended);
  EXPECT_EQ(c.text, full.substr(0, full.find(stop)));
  EXPECT_EQ(c.last.finish, FinishReason::kStop);
  EXPECT_LT(c.last.n_generated, 40);
}

TEST_F(BatchSchedulerTest, LogprobsAreTheModelsLogSoftmax) {
  auto s = scheduler(1, 8);
  GenerationRequest r = request("the cat", 8, 0.0f, 0);
  r.n_top_logprobs = 3;
  const Collected c = drain(**s->submit(r));
  ASSERT_TRUE(c.ended);
  ASSERT_EQ(c.tokens.size(), 8u);
  for (const GeneratedToken& t : c.tokens) {
    ASSERT_EQ(t.top.size(), 3u);
    // Greedy: the sampled token is the most likely one.
    EXPECT_EQ(t.top[0].token, t.token);
    EXPECT_FLOAT_EQ(t.top[0].logprob, t.logprob);
    EXPECT_LE(t.logprob, 0.0f);
    EXPECT_GE(t.top[0].logprob, t.top[1].logprob);
    EXPECT_GE(t.top[1].logprob, t.top[2].logprob);
    EXPECT_LT(std::exp(t.top[0].logprob) + std::exp(t.top[1].logprob) + std::exp(t.top[2].logprob), 1.0001);
  }
}

TEST_F(BatchSchedulerTest, AFullQueueRefusesAndACancelledRequestEnds) {
  // Large stores so that the running request outlasts the checks; it is cancelled at the end.
  auto s = scheduler(/*n_parallel=*/1, /*max_queued=*/1, /*n_ctx=*/16384);
  auto running = s->submit(request("the cat", -1, 1.0f, 1));
  ASSERT_TRUE(running.is_ok());
  ASSERT_TRUE((*running)->next(30s).has_value());  // it runs: its first token came
  auto waiting = s->submit(request("a", 4, 0.0f, 0));
  ASSERT_TRUE(waiting.is_ok());
  auto refused = s->submit(request("b", 4, 0.0f, 0));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("busy"), std::string::npos) << refused.status().message();

  (*running)->cancel();
  const Collected c = drain(**running);
  ASSERT_TRUE(c.ended);
  EXPECT_EQ(c.last.finish, FinishReason::kCancelled);
  EXPECT_LT(c.last.n_generated, 16000);
  // The waiting request then runs to its end.
  const Collected w = drain(**waiting);
  ASSERT_TRUE(w.ended);
  EXPECT_EQ(w.last.finish, tokenizer_->is_eog(w.tokens.back().token) ? FinishReason::kStop : FinishReason::kLength);
  const SchedulerStats st = s->stats();
  EXPECT_EQ(st.n_cancelled, 1u);
  EXPECT_EQ(st.n_running, 0);
  EXPECT_EQ(st.resident_bytes[0], 0u);
}

TEST_F(BatchSchedulerTest, StoppingEndsEveryRequestCancelled) {
  auto s = scheduler(1, 4, 16384);
  auto a = s->submit(request("the cat", -1, 1.0f, 1));
  auto b = s->submit(request("a", -1, 1.0f, 2));
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  ASSERT_TRUE((*a)->next(30s).has_value());
  s.reset();
  EXPECT_EQ(drain(**a).last.finish, FinishReason::kCancelled);
  EXPECT_EQ(drain(**b).last.finish, FinishReason::kCancelled);
}

TEST_F(BatchSchedulerTest, BadRequestsAndOptionsAreRefused) {
  auto s = scheduler(1, 1);
  EXPECT_EQ(s->submit(GenerationRequest{}).status().code(), StatusCode::kInvalidArgument);
  // A prompt longer than its store ends in an error event, not a crash.
  GenerationRequest r = request("the cat", 4, 0.0f, 0);
  r.prompt_tokens.resize(200, r.prompt_tokens.back());
  const Collected c = drain(**s->submit(r));
  ASSERT_TRUE(c.ended);
  EXPECT_EQ(c.last.finish, FinishReason::kError);
  EXPECT_NE(c.last.error.message().find("exceeds the context size"), std::string::npos) << c.last.error.message();
  ForwardOptions fwd;
  fwd.n_batch = 4;
  auto bad = BatchScheduler::create(*model_, *tokenizer_, fwd, {}, {8, 1});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace leoam
