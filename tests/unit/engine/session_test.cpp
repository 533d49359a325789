// The front door (leoam/session.h): the store and selector a session makes from its options, the
// errors it gives without naming a CLI flag, and generation through it equal to one assembled
// by hand from the same parts.
#include "leoam/session.h"

#include <gtest/gtest.h>

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "tiny_model_test.h"

namespace leoam {
namespace {

class SessionTest : public TinyModelTest {
 protected:
  static SessionOptions options(const std::string& policy, const std::string& dir = "") {
    SessionOptions o;
    o.kv.dir = dir;
    o.kv.device_bytes = 96 << 10;
    o.kv.host_bytes = 32 << 10;
    o.attention.policy = policy;
    o.attention.budget = 0.25;
    o.forward.n_ctx = 256;
    o.forward.n_threads = 2;
    return o;
  }

  // 24 greedy tokens after a fixed prompt, through `generate` (Session::generate or generate_from_tokens).
  using GenerateFn = std::function<Result<GenerateStats>(std::span<const int32_t>, const GenerateOptions&,
                                                         const GenerateCallbacks&)>;
  static std::string greedy(const GenerateFn& generate) {
    GenerateOptions g;
    g.n_predict = 24;
    g.sampler.temperature = 0.0f;
    std::string text;
    GenerateCallbacks cb;
    cb.on_text = [&text](std::string_view t) { text += t; };
    const std::vector<int32_t> prompt = tokenizer_->tokenize("once upon a time there was a", true, false);
    Result<GenerateStats> st = generate(prompt, g, cb);
    EXPECT_TRUE(st.is_ok()) << st.status().message();
    return text;
  }
  static std::string greedy(Session& s) {
    return greedy([&s](std::span<const int32_t> p, const GenerateOptions& g, const GenerateCallbacks& cb) {
      return s.generate(*tokenizer_, p, false, g, cb);
    });
  }
};

TEST_F(SessionTest, DenseInRamKeepsOneBufferAndNoSelector) {
  Result<std::unique_ptr<Session>> s = Session::create(*model_, options("full"));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_FALSE((*s)->kv().stats().tiered);
  EXPECT_EQ((*s)->selector(), nullptr);
  EXPECT_EQ((*s)->options().kv.chunk_tokens, 64) << "the dense policy's default chunk";
}

TEST_F(SessionTest, LeoamOnDiskMakesATieredStoreAndFillsItsChunk) {
  testing_util::TempDir dir;
  Result<std::unique_ptr<Session>> s = Session::create(*model_, options("leoam", dir.path()));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const KvStats stats = (*s)->stats();
  EXPECT_TRUE(stats.tiered);
  EXPECT_TRUE(stats.disk_tier);
  ASSERT_NE((*s)->selector(), nullptr);
  EXPECT_EQ(stats.policy_memory.policy, "leoam");
  EXPECT_GT((*s)->options().kv.chunk_tokens, 0);
  EXPECT_NE((*s)->kv().catalog(), nullptr);
  greedy(**s);
  EXPECT_GT((*s)->stats().tiers[static_cast<int>(Tier::kDisk)].bytes_written, 0u) << "the KV went to disk";
}

TEST_F(SessionTest, GeneratesWhatTheHandAssembledPartsGenerate) {
  testing_util::TempDir dir;
  SessionOptions o = options("leoam", dir.path());
  Result<std::unique_ptr<Session>> s = Session::create(*model_, o);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const std::string via_session = greedy(**s);

  testing_util::TempDir dir2;
  o.kv.dir = dir2.path();
  o.kv.chunk_tokens = *default_chunk_tokens(o.attention, o.kv, 256);
  Result<std::unique_ptr<KvCache>> kv = make_kv_store(o.kv, *model_, 256, *kv_store_needs(o.attention, o.kv, *model_, 256));
  ASSERT_TRUE(kv.is_ok()) << kv.status().message();
  Result<std::unique_ptr<sparse::SparseAttention>> selector = make_selector(o.attention, o.kv, *model_, **kv);
  ASSERT_TRUE(selector.is_ok()) << selector.status().message();
  o.forward.selector = selector->get();
  apply_store_options(o.kv, o.forward);
  Result<std::unique_ptr<ForwardContext>> ctx = ForwardContext::create(*model_, o.forward, std::move(*kv));
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().message();
  const std::string by_hand =
      greedy([&ctx](std::span<const int32_t> p, const GenerateOptions& g, const GenerateCallbacks& cb) {
        return generate_from_tokens(**ctx, *tokenizer_, p, false, g, cb);
      });
  EXPECT_EQ(via_session, by_hand);
  EXPECT_FALSE(via_session.empty());
}

TEST_F(SessionTest, ErrorsNameNoFlag) {
  SessionOptions bad_budget = options("leoam");
  bad_budget.attention.budget = -1.0;
  Result<std::unique_ptr<Session>> s = Session::create(*model_, bad_budget);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message().find("--"), std::string::npos) << s.status().message();

  Result<std::unique_ptr<Session>> typo = Session::create(*model_, options("leaom"));
  ASSERT_FALSE(typo.is_ok()) << "an unknown policy must not fall back to full attention";
  EXPECT_NE(typo.status().message().find("'leaom' is unknown"), std::string::npos) << typo.status().message();
  const SessionOptions unknown = options("leaom");
  EXPECT_FALSE(default_chunk_tokens(unknown.attention, unknown.kv, 256).is_ok()) << "no other policy's chunks";
  EXPECT_FALSE(kv_store_needs(unknown.attention, unknown.kv, *model_, 256).is_ok()) << "no other policy's needs";

  testing_util::TempDir dir;
  SessionOptions no_staging = options("leoam", dir.path());
  no_staging.kv.pipeline = DecodePipeline::kOn;
  no_staging.kv.read_ahead_bytes = 0;
  s = Session::create(*model_, no_staging);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().message().find("--"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace leoam
