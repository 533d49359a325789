// Gemma's sliding layers on the tiered, sparse path: a Gemma 3 folder (five sliding layers to a
// global one) decoded past its window by leoam on a store mostly on disk. At a budget that picks
// everything, its logits are the dense pass's, in the batch order and the layered prefill alike;
// at 10%, every sliding layer still reads its whole window (the selector picks only for the global
// layers, and watches only them) and nothing else; and the sliding layers' past behind their
// window is dropped, never written to disk, unless the session keeps it (swa_full), in a batch of
// sequences as alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "../hf/hf_folder_writer.h"
#include "../model/model_test_util.h"
#include "../temp_dir.h"
#include "core/thread_pool.h"
#include "hf/hf_folder.h"
#include "kv/tiered_kv_cache.h"
#include "leoam/session.h"
#include "model/attention_selector.h"
#include "model/forward_context.h"
#include "model/model.h"

namespace leoam {
namespace {

constexpr int kGemmaWindow = 16;
constexpr int kGemmaLayers = 7;  // layers 0-4 and 6 slide, layer 5 is global
constexpr int kGemmaPrompt = 150;
constexpr int kGemmaSteps = 12;
constexpr int kGemmaGlobalLayer = 5;

class SlidingWindowSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing_util::HfFolderSpec s;
    s.architecture = "Gemma3ForCausalLM";
    s.n_layer = kGemmaLayers;
    s.head_dim = 32;
    s.n_ctx = 512;
    s.tied = true;
    s.query_pre_attn_scalar = 32;
    s.sliding_window = kGemmaWindow;
    s.rope_theta = 1000000.0;
    s.rope_local_theta = 10000.0;
    testing_util::write_hf_folder(s, dir_.path());
    Result<GgufFile> gguf = open_model_source(dir_.path(), {});
    ASSERT_TRUE(gguf.is_ok()) << gguf.status().message();
    Result<std::unique_ptr<Model>> model = Model::from_gguf(std::move(*gguf));
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    model_ = std::move(*model);
    for (int i = 0; i < kGemmaPrompt; ++i) prompt_.push_back((7 + i * 37) % s.n_vocab);
  }

  // The prompt, then kGemmaSteps greedy steps one token at a time: each step's logits.
  std::vector<std::vector<float>> decode(ForwardContext& ctx) {
    std::vector<std::vector<float>> steps;
    std::vector<float> logits;
    EXPECT_TRUE(ctx.eval(prompt_, false, logits).is_ok());
    for (int i = 0; i < kGemmaSteps; ++i) {
      const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      const int32_t token[1] = {next};
      Status st = ctx.eval(token, false, logits);
      EXPECT_TRUE(st.is_ok()) << st.message();
      steps.push_back(logits);
    }
    return steps;
  }

  SessionOptions sparse_options(double budget, const std::string& kv_dir) const {
    SessionOptions o;
    o.kv.dir = kv_dir;
    o.kv.device_bytes = 48 << 10;  // a few chunks: most of the KV lives on disk
    o.kv.host_bytes = 32 << 10;
    o.kv.chunk_tokens = 8;
    o.kv.n_recent = 8;
    o.attention.policy = "leoam";
    o.attention.budget = budget;
    o.forward.n_ctx = 512;
    o.forward.n_threads = 2;
    return o;
  }

  // A store whose budgets hold the sliding layers' windows and a batch of 16 (chunks of 8 tokens
  // of 2 KiB), but not the global layer's past; the prompt in batches of 16, in two segments of
  // the layered prefill, the second reading the first's KV from the store.
  SessionOptions windowed_options(double budget, const std::string& kv_dir) const {
    SessionOptions o = sparse_options(budget, kv_dir);
    o.kv.device_bytes = 72 << 10;
    o.kv.host_bytes = 16 << 10;
    o.kv.prefill_working_set_bytes = 70000;
    o.forward.n_batch = 16;
    return o;
  }

  std::vector<std::vector<float>> dense_logits() {
    ForwardOptions dense_options;
    dense_options.n_ctx = 512;
    dense_options.n_threads = 2;
    Result<std::unique_ptr<ForwardContext>> dense = ForwardContext::create(*model_, dense_options);
    EXPECT_TRUE(dense.is_ok()) << dense.status().message();
    return decode(**dense);
  }

  testing_util::TempDir dir_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_;
};

TEST_F(SlidingWindowSessionTest, AFullBudgetOnDiskGivesTheDenseLogits) {
  const std::vector<std::vector<float>> want = dense_logits();

  testing_util::TempDir kv_dir;
  Result<std::unique_ptr<Session>> sparse = Session::create(*model_, sparse_options(1.0, kv_dir.path()));
  ASSERT_TRUE(sparse.is_ok()) << sparse.status().message();
  ASSERT_NE((*sparse)->selector(), nullptr) << "leoam selects, even at a budget of everything";
  const std::vector<std::vector<float>> got = decode((*sparse)->context());
  EXPECT_GT((*sparse)->stats().tiers[static_cast<int>(Tier::kDisk)].bytes_written, 0u) << "the KV went to disk";
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    // The same f16 KV summed in another order.
    EXPECT_LE(testing_util::rel_l2(got[i], want[i]), 1e-4) << "step " << i;
  }
}

TEST_F(SlidingWindowSessionTest, SlidingLayersReadTheirWindowWhateverTheBudget) {
  testing_util::TempDir kv_dir;
  Result<std::unique_ptr<Session>> s = Session::create(*model_, sparse_options(0.1, kv_dir.path()));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  ForwardContext& ctx = (*s)->context();
  std::vector<float> logits;
  ASSERT_TRUE(ctx.eval(prompt_, false, logits).is_ok());
  const int n_sliding = kGemmaLayers - 1;
  for (int i = 0; i < kGemmaSteps; ++i) {
    const int64_t before = ctx.decode_positions_attended();
    const int32_t token[1] = {static_cast<int32_t>(i + 3)};
    ASSERT_TRUE(ctx.eval(token, false, logits).is_ok());
    const int64_t attended = ctx.decode_positions_attended() - before;
    const int64_t pos = kGemmaPrompt + i;
    // The global layer attends a tenth or so of pos + 1 positions; each sliding layer kGemmaWindow.
    EXPECT_GE(attended, int64_t{n_sliding} * kGemmaWindow + 1) << "step " << i;
    EXPECT_LE(attended, int64_t{n_sliding} * kGemmaWindow + (pos + 1) / 2) << "step " << i;
  }
}

// The layers a selector is asked about or shown: every position selected.
class RecordingSelector final : public AttentionSelector {
 public:
  Result<std::vector<TokenRange>> select(int layer, int64_t pos, const float*, ThreadPool&) override {
    selected.insert(layer);
    return std::vector<TokenRange>{{0, pos + 1}};
  }
  SelectorNeeds needs() const override { return {.keys = true, .values = true, .stored = true}; }
  Status observe_keys(int layer, int64_t, int64_t, const float*) override {
    watched.insert(layer);
    return Status::ok();
  }
  Status observe_values(int layer, int64_t, int64_t, const float*) override {
    watched.insert(layer);
    return Status::ok();
  }
  Status observe_stored(int layer, int64_t) override {
    watched.insert(layer);
    return Status::ok();
  }
  std::set<int> selected, watched;
};

// Every sliding layer's chunks: none on disk.
void expect_no_sliding_chunk_on_disk(const TieredKvCache& kv) {
  for (int il = 0; il < kGemmaLayers; ++il) {
    if (il == kGemmaGlobalLayer) continue;
    for (int64_t i = 0; i < kv.n_chunks(il); ++i) {
      EXPECT_FALSE(kv.disk().has_chunk(il, i)) << "layer " << il << " chunk " << i;
    }
  }
}

TEST_F(SlidingWindowSessionTest, ALayeredPrefillThatDropsTheWindowsPastGivesTheDenseLogits) {
  const std::vector<std::vector<float>> want = dense_logits();
  testing_util::TempDir kv_dir;
  Result<std::unique_ptr<Session>> sparse = Session::create(*model_, windowed_options(1.0, kv_dir.path()));
  ASSERT_TRUE(sparse.is_ok()) << sparse.status().message();
  const std::vector<std::vector<float>> got = decode((*sparse)->context());
  EXPECT_EQ((*sparse)->context().prefill_stats().n_segments, 2) << "the second segment reads the first's KV";
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(testing_util::rel_l2(got[i], want[i]), 1e-4) << "step " << i;
  const auto* kv = dynamic_cast<const TieredKvCache*>(&(*sparse)->kv());
  ASSERT_NE(kv, nullptr);
  expect_no_sliding_chunk_on_disk(*kv);
  EXPECT_TRUE(kv->disk().has_chunk(kGemmaGlobalLayer, 1)) << "the global layer's past is on disk";
  // Each sliding layer dropped all but its last window and batch, at least.
  const int64_t n = kGemmaPrompt + kGemmaSteps;
  EXPECT_GE((*sparse)->stats().window_dropped_chunks, uint64_t{kGemmaLayers - 1} * ((n - kGemmaWindow - 16) / 8));
}

TEST_F(SlidingWindowSessionTest, AtATenthTheSlidingLayersStillWriteNothingToDisk) {
  testing_util::TempDir kv_dir;
  Result<std::unique_ptr<Session>> sparse = Session::create(*model_, windowed_options(0.1, kv_dir.path()));
  ASSERT_TRUE(sparse.is_ok()) << sparse.status().message();
  decode((*sparse)->context());
  const auto* kv = dynamic_cast<const TieredKvCache*>(&(*sparse)->kv());
  ASSERT_NE(kv, nullptr);
  expect_no_sliding_chunk_on_disk(*kv);
  EXPECT_GT((*sparse)->stats().window_dropped_chunks, 0u);
}

TEST_F(SlidingWindowSessionTest, SwaFullKeepsTheWindowsPast) {
  testing_util::TempDir kv_dir;
  SessionOptions o = windowed_options(0.1, kv_dir.path());
  o.kv.swa_full = true;
  Result<std::unique_ptr<Session>> sparse = Session::create(*model_, o);
  ASSERT_TRUE(sparse.is_ok()) << sparse.status().message();
  decode((*sparse)->context());
  EXPECT_EQ((*sparse)->stats().window_dropped_chunks, 0u);
  const auto* kv = dynamic_cast<const TieredKvCache*>(&(*sparse)->kv());
  ASSERT_NE(kv, nullptr);
  EXPECT_TRUE(kv->disk().has_chunk(0, 0)) << "a sliding layer's sealed chunks are written through as any";
  EXPECT_TRUE((*sparse)->kv().view(0, kGemmaPrompt).is_ok());
}

// A stop in the second segment, after its first layer: that sliding layer dropped part of the
// window that going back to the segment's start needs, so the context is emptied, and says so;
// kept whole (swa_full), it goes back. Either way the prompt then runs again to the dense logits.
TEST_F(SlidingWindowSessionTest, AStopThatCannotGoBackEmptiesTheContextAndSaysSo) {
  const std::vector<float> want = dense_logits().front();
  for (const bool swa_full : {false, true}) {
    testing_util::TempDir kv_dir;
    SessionOptions o = windowed_options(1.0, kv_dir.path());
    o.kv.swa_full = swa_full;
    int calls = 0;
    o.forward.should_stop = [&calls] { return ++calls == 8; };  // 6 + 1 in the first segment
    Result<std::unique_ptr<Session>> s = Session::create(*model_, o);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    ForwardContext& ctx = (*s)->context();
    std::vector<float> logits;
    const Status st = ctx.eval(prompt_, false, logits);
    ASSERT_EQ(st.code(), StatusCode::kCancelled) << st.message();
    if (swa_full) {
      EXPECT_EQ(ctx.n_past(), 128) << "back to the second segment's start";
    } else {
      EXPECT_EQ(ctx.n_past(), 0);
      EXPECT_NE(st.message().find("the context was cleared"), std::string::npos) << st.message();
    }
    const std::span<const int32_t> rest(prompt_.begin() + ctx.n_past(), prompt_.end());
    ASSERT_TRUE(ctx.eval(rest, false, logits).is_ok());
    std::vector<float> step;
    const int32_t next[1] = {static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    ASSERT_TRUE(ctx.eval(next, false, step).is_ok());
    EXPECT_LE(testing_util::rel_l2(step, want), 1e-4) << "swa_full " << swa_full;
  }
}

// Four sequences decoded in one batch (two rows a thread: selections and attention side by side),
// each on its own store, drop their windows' past as when decoded alone, and give its logits.
TEST_F(SlidingWindowSessionTest, SequencesDecodedTogetherDropAsAlone) {
  constexpr int kRows = 4;
  const int n_vocab = model_->hparams().n_vocab;
  std::vector<std::vector<int32_t>> prompts, steps;
  for (int r = 0; r < kRows; ++r) {
    std::vector<int32_t> p(prompt_.begin(), prompt_.end() - 9 * r);
    for (int32_t& t : p) t = (t + 11 * r) % n_vocab;
    prompts.push_back(p);
    steps.emplace_back();
    for (int i = 0; i < kGemmaSteps; ++i) steps[r].push_back((5 + 13 * i + 7 * r) % n_vocab);
  }
  std::vector<std::vector<std::vector<float>>> alone(kRows);
  std::vector<uint64_t> alone_dropped(kRows);
  for (int r = 0; r < kRows; ++r) {
    testing_util::TempDir kv_dir;
    Result<std::unique_ptr<Session>> s = Session::create(*model_, windowed_options(0.1, kv_dir.path()));
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    std::vector<float> logits;
    ASSERT_TRUE((*s)->context().eval(prompts[r], false, logits).is_ok());
    for (const int32_t t : steps[r]) {
      ASSERT_TRUE((*s)->context().eval({&t, 1}, false, logits).is_ok());
      alone[r].push_back(logits);
    }
    alone_dropped[r] = (*s)->stats().window_dropped_chunks;
  }
  std::vector<testing_util::TempDir> dirs(kRows);
  std::vector<std::unique_ptr<Session>> sessions;
  for (int r = 0; r < kRows; ++r) {
    Result<std::unique_ptr<Session>> s = Session::create(*model_, windowed_options(0.1, dirs[r].path()));
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    sessions.push_back(std::move(*s));
  }
  ForwardContext& ctx = sessions[0]->context();  // one pass over the weights for every row
  const auto seq = [&](int r) { return DecodeSequence{&sessions[r]->kv(), sessions[r]->selector()}; };
  for (int r = 0; r < kRows; ++r) {
    std::vector<float> logits;
    ASSERT_TRUE(ctx.eval_sequence(seq(r), prompts[r], false, logits).is_ok());
  }
  for (int i = 0; i < kGemmaSteps; ++i) {
    std::vector<BatchToken> batch;
    for (int r = 0; r < kRows; ++r) batch.push_back({steps[r][i], seq(r)});
    std::vector<float> logits;
    const Status st = ctx.decode_batch(batch, logits);
    ASSERT_TRUE(st.is_ok()) << st.message();
    for (int r = 0; r < kRows; ++r) {
      const std::vector<float> row(logits.begin() + r * n_vocab, logits.begin() + (r + 1) * n_vocab);
      EXPECT_LE(testing_util::rel_l2(row, alone[r][i]), 1e-4) << "step " << i << " row " << r;
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const auto* kv = dynamic_cast<const TieredKvCache*>(&sessions[r]->kv());
    ASSERT_NE(kv, nullptr);
    expect_no_sliding_chunk_on_disk(*kv);
    EXPECT_EQ(kv->stats().window_dropped_chunks, alone_dropped[r]) << "row " << r;
  }
}

// Without a disk tier (dense, in RAM) the sliding layers drop their past too: the session keeps
// the KV in the tiered store's chunks, not in one buffer of every position; kept whole
// (swa_full), in the one buffer.
TEST_F(SlidingWindowSessionTest, InRamTheWindowsPastIsDroppedToo) {
  const std::vector<std::vector<float>> want = dense_logits();
  SessionOptions o;
  o.forward.n_ctx = 512;
  o.forward.n_threads = 2;
  o.forward.n_batch = 16;
  Result<std::unique_ptr<Session>> s = Session::create(*model_, o);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const std::vector<std::vector<float>> got = decode((*s)->context());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(testing_util::rel_l2(got[i], want[i]), 1e-4) << "step " << i;
  const KvStats stats = (*s)->stats();
  EXPECT_TRUE(stats.tiered);
  EXPECT_FALSE(stats.disk_tier);
  EXPECT_GT(stats.window_dropped_chunks, 0u);
  o.kv.swa_full = true;
  Result<std::unique_ptr<Session>> full = Session::create(*model_, o);
  ASSERT_TRUE(full.is_ok()) << full.status().message();
  EXPECT_FALSE((*full)->stats().tiered) << "every position in one buffer";
}

TEST_F(SlidingWindowSessionTest, TheSelectorIsAskedAboutAndShownOnlyTheGlobalLayer) {
  RecordingSelector selector;
  ForwardOptions o;
  o.n_ctx = 512;
  o.n_threads = 2;
  o.n_batch = 16;
  o.selector = &selector;
  Result<std::unique_ptr<ForwardContext>> ctx = ForwardContext::create(*model_, o);
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().message();
  decode(**ctx);
  EXPECT_EQ(selector.selected, std::set<int>{kGemmaGlobalLayer});
  EXPECT_EQ(selector.watched, std::set<int>{kGemmaGlobalLayer});
}

}  // namespace
}  // namespace leoam
