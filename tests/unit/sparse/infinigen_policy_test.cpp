// The infinigen policy: its column choice, its selection against a ranking computed here with plain
// loops from the model's weights, speculation from the previous layer's input, and a decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/llama_forward.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "sparse/partial_projection.h"
#include "sparse/selection_policy.h"
#include "sparse/sparse_attention.h"

namespace leoam::sparse {
namespace {

// A synthetic model parsed from memory; `bytes` outlives `model`, whose tensors point into it.
struct TestModel {
  std::vector<uint8_t> bytes;
  std::unique_ptr<Model> model;
};

// Multiplies rows of an F32 tensor of the serialized file by `factor`.
struct RowScale {
  std::string tensor;
  std::vector<int64_t> rows;
  float factor = 1.0f;
};

std::unique_ptr<TestModel> make_model(const SyntheticModelSpec& spec, const std::vector<RowScale>& scales = {}) {
  auto m = std::make_unique<TestModel>();
  GgufWriter writer;
  EXPECT_TRUE(build_synthetic_model(spec, writer).is_ok());
  m->bytes = writer.to_bytes();
  {
    auto file = GgufFile::parse("m.gguf", m->bytes.data(), m->bytes.size());
    EXPECT_TRUE(file.is_ok()) << file.status().message();
    for (const RowScale& s : scales) {
      const GgufTensorInfo* t = file->find_tensor(s.tensor);
      EXPECT_TRUE(t != nullptr && t->type() == GgmlType::kF32) << s.tensor;
      auto* values = reinterpret_cast<float*>(m->bytes.data() + (t->data - m->bytes.data()));
      for (int64_t r : s.rows) {
        for (int64_t c = 0; c < t->ne[0]; ++c) values[r * t->ne[0] + c] *= s.factor;
      }
    }
  }
  auto file = GgufFile::parse("m.gguf", m->bytes.data(), m->bytes.size());
  EXPECT_TRUE(file.is_ok());
  auto model = Model::from_gguf(std::move(file).value());
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  m->model = std::move(model).value();
  return m;
}

SyntheticModelSpec small_spec(ModelArch arch) {
  SyntheticModelSpec spec;
  spec.arch = arch;
  spec.n_vocab = 300;
  spec.n_embd = 64;
  spec.n_layer = 3;
  spec.n_head = 4;
  spec.n_head_kv = 2;  // head_dim 16, two query heads per kv head
  spec.n_ff = 128;
  spec.n_ctx = 256;
  spec.qkv_bias = arch == ModelArch::kQwen2;
  return spec;
}

std::unique_ptr<SelectionPolicy> make_policy(const Model& model, double ratio) {
  PolicyOptions o;
  o.model = &model;
  o.partial_ratio = ratio;
  auto p = make_selection_policy("infinigen", o);
  EXPECT_TRUE(p.is_ok()) << p.status().message();
  return p.is_ok() ? std::move(p).value() : nullptr;
}

std::vector<float> random_vector(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The true post-RoPE query of `layer` for layer input x at pos, with plain loops over the F32
// weights: [n_head][head_dim].
std::vector<float> true_query(const Model& model, int layer, int64_t pos, const std::vector<float>& x) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& L = model.weights().layers[layer];
  double ss = 0.0;
  for (float v : x) ss += double{v} * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(hp.n_embd) + hp.rms_eps);
  std::vector<double> xn(static_cast<size_t>(hp.n_embd));
  for (int64_t c = 0; c < hp.n_embd; ++c) xn[c] = x[c] * inv * L.attn_norm[c];
  const auto* w = static_cast<const float*>(L.attn_q.data);  // F32: [n_head * head_dim][n_embd]
  std::vector<double> q(static_cast<size_t>(hp.n_embd_q()));
  for (int64_t r = 0; r < hp.n_embd_q(); ++r) {
    double s = L.attn_q_bias != nullptr ? L.attn_q_bias[r] : 0.0;
    for (int64_t c = 0; c < hp.n_embd; ++c) s += w[r * hp.n_embd + c] * xn[c];
    q[r] = s;
  }
  const int n_rot = hp.rope.n_rot;
  const bool neox = hp.rope.pairing == RopePairing::kNeox;
  for (int h = 0; h < hp.n_head; ++h) {
    double* v = q.data() + int64_t{h} * hp.head_dim;
    for (int i = 0; i < n_rot / 2; ++i) {
      const double theta = static_cast<double>(pos) * std::pow(double{hp.rope.freq_base}, -2.0 * i / n_rot);
      const int i0 = neox ? i : 2 * i;
      const int i1 = neox ? i + n_rot / 2 : 2 * i + 1;
      const double x0 = v[i0], x1 = v[i1];
      v[i0] = x0 * std::cos(theta) - x1 * std::sin(theta);
      v[i1] = x0 * std::sin(theta) + x1 * std::cos(theta);
    }
  }
  return std::vector<float>(q.begin(), q.end());
}

// The reference ranking: per head h, s_h(t) = scale * sum over cols(h) of q[h][c] k[t][g][c],
// minus the head's max over far; a token's score is its best head; the top `budget` far tokens
// (ties to the lower position) as merged ranges. cols(h) empty: every dim.
std::vector<TokenRange> reference_selection(const ModelHparams& hp, const std::vector<float>& q,
                                            const std::vector<float>& keys, TokenRange far, int64_t budget,
                                            const std::vector<std::vector<int>>& cols) {
  const int hd = hp.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<double> best(static_cast<size_t>(far.size()), -1e300);
  for (int h = 0; h < hp.n_head; ++h) {
    const int g = h / hp.n_gqa();
    std::vector<int> dims = cols.empty() ? std::vector<int>() : cols[h];
    if (dims.empty()) {
      dims.resize(static_cast<size_t>(hd));
      std::iota(dims.begin(), dims.end(), 0);
    }
    std::vector<double> s(static_cast<size_t>(far.size()));
    double max = -1e300;
    for (int64_t t = far.begin; t < far.end; ++t) {
      double dot = 0.0;
      for (int c : dims) dot += double{q[int64_t{h} * hd + c]} * keys[(t * hp.n_head_kv + g) * hd + c];
      s[t - far.begin] = scale * dot;
      max = std::max(max, s[t - far.begin]);
    }
    for (size_t i = 0; i < s.size(); ++i) best[i] = std::max(best[i], s[i] - max);
  }
  std::vector<int64_t> order(best.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return best[a] > best[b]; });
  // The ranking must not hinge on rounding: a clear gap at the budget's edge.
  EXPECT_GT(best[order[budget - 1]] - best[order[budget]], 1e-3);
  order.resize(static_cast<size_t>(budget));
  std::sort(order.begin(), order.end());
  std::vector<TokenRange> ranges;
  for (int64_t i : order) {
    const int64_t p = far.begin + i;
    if (!ranges.empty() && ranges.back().end == p) {
      ranges.back().end = p + 1;
    } else {
      ranges.push_back({p, p + 1});
    }
  }
  return ranges;
}

SelectionQuery make_query(const ModelHparams& hp, int layer, int64_t pos, const float* q, TokenRange far,
                          int64_t budget) {
  SelectionQuery query;
  query.layer = layer;
  query.n_tokens = pos + 1;
  query.q = q;
  query.n_head = hp.n_head;
  query.n_head_kv = hp.n_head_kv;
  query.head_dim = hp.head_dim;
  query.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  query.far = far;
  query.budget_tokens = budget;
  return query;
}

std::vector<int> pair_dims(std::initializer_list<int> pairs) {
  std::vector<int> dims;
  for (int i : pairs) {
    dims.push_back(2 * i);
    dims.push_back(2 * i + 1);
  }
  return dims;
}

// The dims of the n_pairs best llama pairs (2i, 2i+1) of query head h by
// ||Wq diag(attn_norm) rows|| * ||Wk diag(attn_norm) rows of its kv head||, ties to the lower pair.
std::vector<int> reference_columns(const Model& model, int layer, int h, int n_pairs) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& L = model.weights().layers[layer];
  const auto norm2 = [&](const kernels::MatrixView& w, int64_t r) {
    const auto* row = static_cast<const float*>(w.data) + r * hp.n_embd;
    double s = 0.0;
    for (int64_t c = 0; c < hp.n_embd; ++c) s += std::pow(double{row[c]} * L.attn_norm[c], 2);
    return s;
  };
  const int64_t q0 = int64_t{h} * hp.head_dim;
  const int64_t k0 = int64_t{h / hp.n_gqa()} * hp.head_dim;
  std::vector<double> score(static_cast<size_t>(hp.head_dim / 2));
  for (int i = 0; i < hp.head_dim / 2; ++i) {
    score[i] = std::sqrt(norm2(L.attn_q, q0 + 2 * i) + norm2(L.attn_q, q0 + 2 * i + 1)) *
               std::sqrt(norm2(L.attn_k, k0 + 2 * i) + norm2(L.attn_k, k0 + 2 * i + 1));
  }
  std::vector<int> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
  order.resize(static_cast<size_t>(n_pairs));
  std::sort(order.begin(), order.end());
  std::vector<int> dims;
  for (int i : order) {
    dims.push_back(2 * i);
    dims.push_back(2 * i + 1);
  }
  return dims;
}

std::vector<int> to_vector(std::span<const int> s) { return {s.begin(), s.end()}; }

// Scaled rows decide the pairs: head 0 (kv head 0) gets Wq pair 3 and head 1 Wq pair 5; kv head 0
// gets Wk pair 7, which both its query heads then keep. 0.25 of 16 dims: 2 pairs a head.
TEST(InfinigenPolicy, ChoosesThePairsWithTheLargestQueryAndKeyWeights) {
  const SyntheticModelSpec spec = small_spec(ModelArch::kLlama);
  const auto m = make_model(spec, {{"blk.1.attn_q.weight", {6, 7}, 10.0f},          // head 0, pair 3
                                   {"blk.1.attn_q.weight", {16 + 10, 16 + 11}, 10.0f},  // head 1, pair 5
                                   {"blk.1.attn_k.weight", {14, 15}, 10.0f}});      // kv head 0, pair 7
  auto p = PartialProjection::create(*m->model, 0.25);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(to_vector(p->head_columns(1, 0)), pair_dims({3, 7}));
  EXPECT_EQ(to_vector(p->head_columns(1, 1)), pair_dims({5, 7}));
  EXPECT_EQ(to_vector(p->kv_columns(1, 0)), pair_dims({3, 5, 7}));  // the union of the group
  EXPECT_EQ(p->head_columns(1, 2).size(), 4u);
  EXPECT_EQ(p->n_sel(1), 16);
  EXPECT_EQ(to_vector(p->key_slot(1)).size(), 16u);
  EXPECT_EQ(to_vector(p->key_slot(1)).front(), 0);  // head 0's dim 6: first of kv head 0's union
  EXPECT_EQ(p->key_slot(1)[2], 4);                  // head 0's dim 14: the union's fifth
  EXPECT_EQ(p->key_slot(1)[4], 2);                  // head 1's dim 10: the union's third
  // Every head of every layer as ranked here with plain loops.
  for (int il = 0; il < spec.n_layer; ++il) {
    for (int h = 0; h < spec.n_head; ++h) {
      EXPECT_EQ(to_vector(p->head_columns(il, h)), reference_columns(*m->model, il, h, 2)) << il << " " << h;
    }
  }
  // Everything at ratio 1.
  auto all = PartialProjection::create(*m->model, 1.0);
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(all->n_sel(0), 64);
  EXPECT_EQ(all->n_kv_sel(0), 32);
}

// A Q4_0 model's attn_q is loaded in row groups (kernels/cpu/row_groups.h): the partial query
// reads its rows taken out at create, and equals, bit for bit, that of the same model loaded
// row-major (LEOAM_ROW_GROUPS=0), whose rows it reads in place.
TEST(InfinigenPolicy, PartialQueryIsTheSameWithRowGroups) {
  SyntheticModelSpec spec = small_spec(ModelArch::kQwen2);
  spec.weight_type = GgmlType::kQ4_0;
  const auto grouped = make_model(spec);
  setenv("LEOAM_ROW_GROUPS", "0", 1);
  const auto plain = make_model(spec);
  unsetenv("LEOAM_ROW_GROUPS");
  ASSERT_TRUE(grouped->model->weights().layers[0].attn_q.row_groups);
  ASSERT_FALSE(plain->model->weights().layers[0].attn_q.row_groups);
  auto pg = PartialProjection::create(*grouped->model, 0.5);
  auto pp = PartialProjection::create(*plain->model, 0.5);
  ASSERT_TRUE(pg.is_ok() && pp.is_ok());
  std::mt19937 rng(3);
  const std::vector<float> x = random_vector(static_cast<size_t>(spec.n_embd), rng);
  for (int il = 0; il < spec.n_layer; ++il) {
    ASSERT_EQ(pg->n_sel(il), pp->n_sel(il));
    std::vector<float> a(static_cast<size_t>(pg->n_sel(il))), b(a.size());
    pg->project_query(il, 17, x.data(), a.data());
    pp->project_query(il, 17, x.data(), b.data());
    EXPECT_EQ(a, b) << "layer " << il;
    EXPECT_NE(a, std::vector<float>(a.size(), 0.0f));
  }
}

// NeoX pairs (i, i + n_rot/2) and unrotated dims [n_rot, head_dim) chosen singly: with n_rot 8,
// pair 1 is dims (1, 5); dims 9 and 12 are unrotated. 4 columns: the pair and the two singles.
TEST(InfinigenPolicy, ChoosesNeoxPairsAndUnrotatedDims) {
  SyntheticModelSpec spec = small_spec(ModelArch::kQwen2);
  spec.n_rot = 8;
  const auto m = make_model(spec, {{"blk.0.attn_q.weight", {1, 5, 9, 12}, 10.0f}});
  auto p = PartialProjection::create(*m->model, 0.25);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(to_vector(p->head_columns(0, 0)), (std::vector<int>{1, 5, 9, 12}));
}

// At ratio 1 the layer-0 speculation is the true query, so the selection is the exact top of
// the true q.k; the same without a speculation (the true query's fallback).
TEST(InfinigenPolicy, AtRatioOneSelectsTheExactTopTokensOfTheTrueQuery) {
  const auto m = make_model(small_spec(ModelArch::kLlama));
  const ModelHparams& hp = m->model->hparams();
  std::mt19937 rng(7);
  const int64_t n = 64;
  const int64_t pos = n - 1;
  const std::vector<float> keys = random_vector(static_cast<size_t>(n * hp.n_embd_kv()), rng);
  const std::vector<float> x = random_vector(static_cast<size_t>(hp.n_embd), rng);
  const std::vector<float> q = true_query(*m->model, 0, pos, x);
  const TokenRange far{4, 48};
  const std::vector<TokenRange> want = reference_selection(hp, q, keys, far, 10, {});

  KvCatalog& no_catalog = no_chunk_catalog();  // infinigen reads no abstract: a read fails
  auto spec = make_policy(*m->model, 1.0);
  ASSERT_TRUE(spec->observe_keys(0, 0, 40, keys.data()).is_ok());  // in two batches, as prefill + more
  ASSERT_TRUE(spec->observe_keys(0, 40, n - 40, keys.data() + 40 * hp.n_embd_kv()).is_ok());
  ASSERT_TRUE(spec->observe_layer_input(0, pos, x.data()).is_ok());
  const std::vector<float> garbage(q.size(), 1.0f);  // the speculation, not this, must decide
  auto got = spec->select(make_query(hp, 0, pos, garbage.data(), far, 10), no_catalog);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(got->ranges, want);
  EXPECT_EQ(got->n_chunks_scored, far.size());
  EXPECT_FALSE(got->desert);

  auto fallback = make_policy(*m->model, 1.0);
  ASSERT_TRUE(fallback->observe_keys(0, 0, n, keys.data()).is_ok());
  auto got2 = fallback->select(make_query(hp, 0, pos, q.data(), far, 10), no_catalog);
  ASSERT_TRUE(got2.is_ok()) << got2.status().message();
  EXPECT_EQ(got2->ranges, want);
}

// Layer 1's selection comes from layer 0's input (NeoX RoPE, q bias, half of the columns); layer
// 1's own input, observed later, does not change it.
TEST(InfinigenPolicy, SpeculatesTheNextLayerFromThisLayersInput) {
  const auto m = make_model(small_spec(ModelArch::kQwen2));
  const ModelHparams& hp = m->model->hparams();
  std::mt19937 rng(11);
  const int64_t n = 80;
  const int64_t pos = n - 1;
  const std::vector<float> keys = random_vector(static_cast<size_t>(n * hp.n_embd_kv()), rng);
  const std::vector<float> x0 = random_vector(static_cast<size_t>(hp.n_embd), rng);
  const std::vector<float> x1 = random_vector(static_cast<size_t>(hp.n_embd), rng);
  const TokenRange far{4, 64};
  const int64_t budget = 12;

  auto p = PartialProjection::create(*m->model, 0.5);
  ASSERT_TRUE(p.is_ok());
  std::vector<std::vector<int>> cols;
  for (int h = 0; h < hp.n_head; ++h) cols.push_back(to_vector(p->head_columns(1, h)));
  const std::vector<TokenRange> want =
      reference_selection(hp, true_query(*m->model, 1, pos, x0), keys, far, budget, cols);
  const std::vector<TokenRange> from_x1 =
      reference_selection(hp, true_query(*m->model, 1, pos, x1), keys, far, budget, cols);
  ASSERT_NE(want, from_x1);  // the inputs lead to different sets, so the test tells them apart

  KvCatalog& no_catalog = no_chunk_catalog();  // infinigen reads no abstract: a read fails
  auto policy = make_policy(*m->model, 0.5);
  ASSERT_TRUE(policy->observe_keys(1, 0, n, keys.data()).is_ok());
  ASSERT_TRUE(policy->observe_layer_input(0, pos, x0.data()).is_ok());
  ASSERT_TRUE(policy->observe_layer_input(1, pos, x1.data()).is_ok());  // speculates layer 2 only
  const std::vector<float> garbage(static_cast<size_t>(hp.n_embd_q()), 1.0f);
  auto got = policy->select(make_query(hp, 1, pos, garbage.data(), far, budget), no_catalog);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(got->ranges, want);

  // Rewritten positions (a new sequence) are scored with their new keys.
  const std::vector<float> keys2 = random_vector(keys.size(), rng);
  policy->reset();
  ASSERT_TRUE(policy->observe_keys(1, 0, n, keys2.data()).is_ok());
  ASSERT_TRUE(policy->observe_layer_input(0, pos, x0.data()).is_ok());
  auto got2 = policy->select(make_query(hp, 1, pos, garbage.data(), far, budget), no_catalog);
  ASSERT_TRUE(got2.is_ok());
  EXPECT_EQ(got2->ranges, reference_selection(hp, true_query(*m->model, 1, pos, x0), keys2, far, budget, cols));
}

// Decoding with SparseAttention just below a full budget (ceil(0.99 far) = far - 1 here: a full
// budget would skip the policy) and at 30%: every step scores every far token and attends the
// sink, the recent window and exactly ceil(b far) far tokens, so the logits leave full attention's.
TEST(InfinigenPolicy, DecodesExactlyWithinTheBudgetJustBelowFullAndAtThirtyPercent) {
  const auto m = make_model(small_spec(ModelArch::kLlama));
  const ModelHparams& hp = m->model->hparams();
  std::mt19937 rng(3);
  std::vector<int32_t> prompt(150);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % hp.n_vocab);
  std::vector<int32_t> decode(10);
  for (int32_t& t : decode) t = static_cast<int32_t>(rng() % hp.n_vocab);

  std::vector<LayerSparseStats> stats;
  auto run = [&](double budget) -> std::vector<std::vector<float>> {
    std::unique_ptr<SparseAttention> selector;
    if (budget > 0) {
      SparseAttentionOptions o;
      o.policy = "infinigen";
      o.budget = budget;
      o.n_sink = 4;
      o.n_recent = 16;
      o.policy_options.model = m->model.get();
      auto s = SparseAttention::create(
          o, nullptr, {hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f / std::sqrt(float(hp.head_dim))});
      EXPECT_TRUE(s.is_ok()) << s.status().message();
      selector = std::move(s).value();
    }
    ForwardOptions fo;
    fo.n_threads = 1;
    fo.selector = selector.get();
    auto ctx = LlamaForward::create(*m->model, fo);
    EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
    std::vector<float> logits;
    EXPECT_TRUE((*ctx)->eval(prompt, false, logits).is_ok());
    std::vector<std::vector<float>> rows;
    for (int32_t tok : decode) {
      const int32_t one[1] = {tok};
      const Status st = (*ctx)->eval(one, false, logits);
      EXPECT_TRUE(st.is_ok()) << st.message();
      rows.push_back(logits);
    }
    if (selector) stats = selector->stats();
    return rows;
  };
  const auto want = run(0.0);
  for (const double budget : {0.99, 0.3}) {
    SCOPED_TRACE(budget);
    const auto sparse = run(budget);
    EXPECT_NE(sparse, want);
    int64_t attended = 0, visible = 0, far = 0;
    for (int64_t n = 151; n <= 160; ++n) {
      attended += 4 + 16 + static_cast<int64_t>(std::ceil(budget * static_cast<double>(n - 4 - 16)));
      visible += n;
      far += n - 4 - 16;
    }
    if (budget == 0.99) {
      EXPECT_EQ(visible - attended, 10);  // one far token a step
    }
    ASSERT_EQ(stats.size(), static_cast<size_t>(hp.n_layer));
    for (const LayerSparseStats& s : stats) {
      EXPECT_EQ(s.n_queries, 10);
      EXPECT_EQ(s.n_visible, visible);
      EXPECT_EQ(s.n_attended, attended);
      EXPECT_EQ(s.n_chunks_scored, far);
    }
  }
}

TEST(InfinigenPolicy, RejectsBadOptions) {
  const auto m = make_model(small_spec(ModelArch::kLlama));
  PolicyOptions o;
  auto r = make_selection_policy("infinigen", o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("PolicyOptions.model"), std::string::npos) << r.status().message();
  o.model = m->model.get();
  for (double ratio : {0.0, -0.5, 1.5, std::nan("")}) {
    o.partial_ratio = ratio;
    auto bad = make_selection_policy("infinigen", o);
    ASSERT_FALSE(bad.is_ok()) << ratio;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("partial ratio"), std::string::npos) << bad.status().message();
  }
  o.partial_ratio = 0.3;
  auto ok = make_selection_policy("infinigen", o);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ((*ok)->name(), "infinigen");
  EXPECT_TRUE((*ok)->needs().keys);
  EXPECT_TRUE((*ok)->needs().layer_inputs);
  EXPECT_FALSE((*ok)->needs().attention_mass);

  // A query past the keys it has seen says what is missing.
  KvCatalog& no_catalog = no_chunk_catalog();  // infinigen reads no abstract: a read fails
  const ModelHparams& hp = m->model->hparams();
  const std::vector<float> q(static_cast<size_t>(hp.n_embd_q()), 1.0f);
  auto sel = (*ok)->select(make_query(hp, 0, 63, q.data(), {4, 48}, 10), no_catalog);
  ASSERT_FALSE(sel.is_ok());
  EXPECT_NE(sel.status().message().find("partial keys"), std::string::npos) << sel.status().message();
}

}  // namespace
}  // namespace leoam::sparse
