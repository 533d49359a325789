// leoam: LeoAM's GQA-aware chunk selection over an adaptive chunk tree (IAKM), with
// attention-desert detection. Each unit (leaf or chunk) is bounded from its box and its rows' key
// signs (sign_bound.h; the box alone without signs); per query head the bounds become log shares
// of its bounded attention mass, a GQA group's shares combine (PolicyOptions::group_combine), and
// the best units fill the budget (chunk_ranking.h). In the fine layers a unit sums its rows'
// masses (PolicyOptions::row_mass). A step reads no far KV where the bounds prove the far mass
// negligible beside the near window's. Each layer's ChunkTree splits hot leaves and merges cold
// ones. The rules and constants: docs/policies.md#leoam-in-detail.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/ops.h"
#include "kv/box_f16.h"
#include "sparse/chunk_ranking.h"
#include "sparse/chunk_tree.h"
#include "sparse/selection_policy.h"
#include "sparse/sign_bound.h"

namespace leoam::sparse {
namespace {

constexpr int kIakmMaxTokens = 512;      // merges stop here (the store's largest chunk, kMaxChunkTokens)
constexpr int kIakmInitialTokens = 64;   // LeoAM's initial chunk size
constexpr int kIakmFineLayers = 2;       // LeoAM: layers 0 and 1 start at the smallest chunks
constexpr int kIakmLooseFineBlock = 32;  // the fine layers' boxes where their budget reads a large share
constexpr int kIakmLooseFineShare = 4;   // "large": a budget of at least 1/4 of the layer's tokens
constexpr int64_t kIakmEarlySteps = 2;   // decode steps whose selected leaves split unconditionally
constexpr int kIakmHotSteps = 2;         // consecutive selections before a skewed layer splits a leaf
constexpr int kIakmColdSteps = 4;        // consecutive misses before two buddies merge
constexpr double kIakmSkew = 0.5;        // selected share of the far mass bound that makes a layer skewed
constexpr int kIakmMaxSplits = 32;       // splits per layer per step: bounds how fast leaves get fine
constexpr int kIakmLeavesPerBudget = 4;  // leaves start and merge no larger than a quarter of the far budget
constexpr int64_t kPromptRoomTokens = 64;  // the trees' room past a prompt: its first decode steps reallocate nothing

// The largest leaf size (min * 2^k, at least min) that lets kIakmLeavesPerBudget leaves fit the budget.
int budget_leaf_cap(const ChunkTreeOptions& o, int64_t budget_tokens) {
  int cap = o.min_tokens;
  while (cap * 2 <= o.max_tokens && int64_t{cap} * 2 * kIakmLeavesPerBudget <= budget_tokens) cap *= 2;
  return cap;
}

ChunkTreeOptions iakm_tree_options(int layer, int store_chunk_tokens, int64_t budget_tokens, int64_t n_tokens,
                                   bool key_signs) {
  const int c = std::max(store_chunk_tokens, 1);
  ChunkTreeOptions o;
  o.min_tokens = c;
  o.max_tokens = o.min_tokens;
  while (o.max_tokens * 2 <= kIakmMaxTokens) o.max_tokens *= 2;
  o.initial_tokens = o.min_tokens;
  if (layer >= kIakmFineLayers) {
    while (o.initial_tokens < kIakmInitialTokens && o.initial_tokens * 2 <= o.max_tokens) o.initial_tokens *= 2;
  }
  o.initial_tokens = std::min(o.initial_tokens, budget_leaf_cap(o, budget_tokens));
  o.key_signs = key_signs;
  // With the rows' signs, which tell a block's rows apart, a box per block: in the coarse layers
  // of the size their leaves start at. The fine layers' 8-token leaves against 32-token boxes
  // lost needles on a held-out set that full attention finds (docs/policies.md),
  // so they keep a box per store chunk, as every layer without signs does, unless their budget
  // reads a large share of their tokens anyway (LeoAM's 50% in the first layers of a 32-layer
  // model): there a looser bound costs less, and 32-token boxes keep the state under 5% of the KV.
  o.block_tokens = o.min_tokens;
  const bool loose_fine = budget_tokens * kIakmLooseFineShare >= n_tokens;
  if (key_signs && (layer >= kIakmFineLayers || loose_fine)) {
    const int block = layer >= kIakmFineLayers ? kIakmInitialTokens : kIakmLooseFineBlock;
    while (o.block_tokens < block && o.block_tokens * 2 <= o.max_tokens) o.block_tokens *= 2;
    o.block_tokens = std::min(o.block_tokens, budget_leaf_cap(o, budget_tokens));
  }
  return o;
}

// A float mass e^x from the vectorized exp is within this factor of e^x for the arguments the
// shares make (x in [-87.3, 0], rounded to float: at most 2.1e-5 nats off; the exp 1.5e-7).
constexpr double kExpSlack = 1.0 + 1e-4;

// out[i] = e^(scale * (v[i] - top)) for i in [0, n), by the vectorized exp: 0 below FLT_MIN.
void scaled_exp(const float* v, int64_t n, float scale, float top, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = scale * (v[i] - top);
  kernels::exp(out, n, out);
}

TokenRange intersect(TokenRange a, TokenRange b) {
  const int64_t begin = std::max(a.begin, b.begin);
  const int64_t end = std::min(a.end, b.end);
  return begin < end ? TokenRange{begin, end} : TokenRange{begin, begin};
}

// Upper bounds of query heads (every head's, or a kv head's group) over a run of units (chunks
// or leaves): [heads][n].
struct HeadBounds {
  int64_t n = 0;
  std::vector<float> data;
  uint64_t peak_bytes = 0;  // the most held while making them (the per-unit bounds too)

  const float* head(int h) const { return data.data() + h * n; }
};

class LeoamPolicy final : public SelectionPolicy {
 public:
  explicit LeoamPolicy(const PolicyOptions& options) : options_(options) {}

  std::string_view name() const override { return "leoam"; }

  Result<Selection> select(const SelectionQuery& query, KvCatalog& catalog) override {
    LEOAM_RETURN_IF_ERROR(check_query(query, catalog));
    if (query.far.size() <= 0 || query.budget_tokens <= 0) return Selection{};
    return options_.adaptive ? select_adaptive(query, catalog, true) : select_flat(query, catalog);
  }

  // The same ranking, with the tree left as it is: no leaf's history moves, nothing splits or
  // merges. (A tree grown from the prompt still coarsens to its starting leaves, as the first
  // select would: coarsening twice, to the same or larger leaves, gives the boxes of once.)
  Result<std::optional<Selection>> predict(const SelectionQuery& query, KvCatalog& catalog) override {
    LEOAM_RETURN_IF_ERROR(check_query(query, catalog));
    if (query.far.size() <= 0 || query.budget_tokens <= 0) return std::optional<Selection>(Selection{});
    LEOAM_ASSIGN_OR_RETURN(Selection s, options_.adaptive ? select_adaptive(query, catalog, false)
                                                          : select_flat(query, catalog));
    return std::optional<Selection>(std::move(s));
  }

  void reset() override { trees_.clear(); }

  // The adaptive trees grow as the prompt is written, from the abstracts still in memory.
  SelectorNeeds needs() const override { return {.stored = options_.adaptive}; }
  Status observe_stored(int layer, int64_t n_tokens, int64_t budget_tokens, KvCatalog& catalog) override {
    if (!options_.adaptive) return Status::ok();
    LEOAM_ASSIGN_OR_RETURN(ChunkTree * tree, tree_for(layer, catalog.catalog_kv_heads(), catalog.catalog_head_dim(),
                                                      n_tokens, budget_tokens, catalog));
    LEOAM_RETURN_IF_ERROR(tree->grow(catalog, layer, n_tokens, source()));
    note_working_bytes(tree->scratch_bytes());
    tree->reserve_ahead(kPromptRoomTokens);
    return Status::ok();
  }

  // The trees, and the most they and a call's working copies (a grow's piece of the store's
  // abstracts, the abstracts a flat step reads, every leaf's bounds) held at once.
  PolicyMemory memory() const override {
    PolicyMemory m;
    for (const std::optional<ChunkTree>& t : trees_) m.bytes += t ? t->memory_bytes() : 0;
    m.peak_bytes = std::max(peak_bytes_, m.bytes);
    return m;
  }

 private:
  AbstractSource source() const { return options_.lka ? AbstractSource::kLka : AbstractSource::kKv; }
  // Whether to score with the key sign sketch: asked for, and the catalog has it.
  bool key_signs(const KvCatalog& catalog) const { return options_.key_signs && catalog.has_key_signs(); }

  // The store's fixed chunks.
  Result<Selection> select_flat(const SelectionQuery& query, KvCatalog& catalog) {
    Selection s;
    const int chunk_tokens = catalog.chunk_tokens();
    const ChunkSpan far = chunks_overlapping(query.far, chunk_tokens);
    const ChunkSpan loaded = chunks_overlapping({0, query.n_tokens}, chunk_tokens);
    LEOAM_ASSIGN_OR_RETURN(const SpanAbstracts abstracts,
                           load_span(catalog, query.layer, loaded, source(), key_signs(catalog)));
    s.n_chunks_scored = loaded.size();
    std::vector<TokenRange> chunks(static_cast<size_t>(loaded.size()));
    for (int64_t i = 0; i < loaded.size(); ++i) chunks[i] = chunk_part(loaded.i0 + i, {0, query.n_tokens}, chunk_tokens);
    // Each chunk against its own box, in f16 as the trees keep them.
    const int64_t stride = abstracts.layout.chunk_stride;
    std::vector<uint16_t> boxes(static_cast<size_t>(loaded.size() * stride));
    BoundUnits units{{}, {}, abstracts.signs(), {}, abstracts.layout};
    for (int64_t i = 0; i < loaded.size(); ++i) {
      round_box_outward(abstracts.at(loaded.i0 + i), stride, boxes.data() + i * stride);
      units.units.push_back({chunks[i], boxes.data() + i * stride});
      units.owner.push_back(i);
    }
    const Shares shared = shares(query, units, chunks, far.i0 - loaded.i0, far.i1 - loaded.i0);
    note_working_bytes(capacity_bytes(abstracts.data) + capacity_bytes(abstracts.sign_words) + capacity_bytes(boxes) +
                       capacity_bytes(units.units) + capacity_bytes(units.owner) + shared.working_bytes);
    if (query.explain) {
      for (int64_t i = 0; i < far.size(); ++i) {
        s.ranking.push_back({chunk_part(far.i0 + i, query.far, chunk_tokens), shared.scores[i]});
      }
    }
    if (options_.desert && is_desert(query, chunks, units, shared)) {
      s.desert = true;
      return s;
    }
    s.ranges = pick_top_chunks(shared.scores, far, query.far, chunk_tokens, query.budget_tokens);
    return s;
  }

  // The leaves of the layer's chunk tree, which then adapts (docs/policies.md) when `learn`.
  Result<Selection> select_adaptive(const SelectionQuery& query, KvCatalog& catalog, bool learn) {
    LEOAM_ASSIGN_OR_RETURN(ChunkTree * tree, tree_for(query.layer, query.n_head_kv, query.head_dim, query.n_tokens,
                                                      query.budget_tokens, catalog));
    LEOAM_RETURN_IF_ERROR(tree->grow(catalog, query.layer, query.n_tokens, source()));
    note_working_bytes(tree->scratch_bytes());
    std::vector<TokenRange> leaves(static_cast<size_t>(tree->n_leaves()));
    for (int64_t i = 0; i < tree->n_leaves(); ++i) leaves[i] = tree->leaf(i);
    // Far leaves [l0, l1): those overlapping far.
    const int64_t l0 = std::upper_bound(leaves.begin(), leaves.end(), query.far.begin,
                                        [](int64_t p, const TokenRange& r) { return p < r.end; }) -
                       leaves.begin();
    const int64_t l1 = std::lower_bound(leaves.begin(), leaves.end(), query.far.end,
                                        [](const TokenRange& r, int64_t p) { return r.begin < p; }) -
                       leaves.begin();
    const std::span<const TokenRange> far_leaves(leaves.data() + l0, static_cast<size_t>(l1 - l0));

    Selection s;
    // Every leaf's upper bounds: the near ones weigh in the far ones' mass shares and the desert check.
    s.n_chunks_scored = tree->n_leaves();
    const BoundUnits units = leaf_units(*tree, leaves);
    Shares shared = shares(query, units, leaves, l0, l1);
    note_working_bytes(capacity_bytes(leaves) + capacity_bytes(units.units) + capacity_bytes(units.owner) +
                       shared.working_bytes);
    if (query.explain) {
      for (size_t i = 0; i < far_leaves.size(); ++i) {
        s.ranking.push_back({intersect(far_leaves[i], query.far), shared.scores[i]});
      }
    }
    std::vector<float> scores;
    RangePick pick;
    if (options_.desert && is_desert(query, leaves, units, shared)) {
      s.desert = true;
    } else {
      scores = std::move(shared.scores);
      pick = pick_top_ranges(scores, far_leaves, query.far, query.budget_tokens, tree->options().min_tokens);
      s.ranges = pick.ranges;
    }
    if (learn) LEOAM_RETURN_IF_ERROR(adapt(query, catalog, *tree, l0, l1, pick, scores, shared.far_weights, s));
    return s;
  }

  // peak_bytes_ follows the trees and `working` bytes a step holds besides them.
  void note_working_bytes(uint64_t working) {
    uint64_t held = working;
    for (const std::optional<ChunkTree>& t : trees_) held += t ? t->memory_bytes() : 0;
    peak_bytes_ = std::max(peak_bytes_, held);
  }

  // The layer's tree for a query or prompt of n_tokens at a far budget of budget_tokens: created,
  // or rebuilt when it does not fit the query or the catalog; one grown from the prompt (no split
  // or merge yet) coarsens to the leaves this budget starts them at, as if built now.
  Result<ChunkTree*> tree_for(int layer, int n_head_kv, int head_dim, int64_t n_tokens, int64_t budget_tokens,
                              const KvCatalog& catalog) {
    if (layer < 0) return invalid_argument("leoam: layer " + std::to_string(layer) + " is negative");
    if (trees_.size() <= static_cast<size_t>(layer)) trees_.resize(static_cast<size_t>(layer) + 1);
    std::optional<ChunkTree>& tree = trees_[layer];
    const ChunkTreeOptions o =
        iakm_tree_options(layer, catalog.chunk_tokens(), budget_tokens, n_tokens, key_signs(catalog));
    if (!tree || tree->n_tokens() > n_tokens || tree->store_chunk_tokens() != catalog.chunk_tokens() ||
        tree->layout().n_kv_heads != n_head_kv || tree->layout().head_dim != head_dim ||
        tree->options().key_signs != o.key_signs) {
      LEOAM_ASSIGN_OR_RETURN(ChunkTree t, ChunkTree::create(o, catalog.chunk_tokens(), n_head_kv, head_dim));
      tree = std::move(t);
    } else if (!tree->edited() && tree->options().initial_tokens <= o.initial_tokens &&
               tree->options().block_tokens <= o.block_tokens &&
               (tree->options().initial_tokens < o.initial_tokens || tree->options().block_tokens < o.block_tokens)) {
      LEOAM_RETURN_IF_ERROR(tree->coarsen(o.initial_tokens, o.block_tokens));
      note_working_bytes(tree->scratch_bytes());
    }
    return &*tree;
  }

  // The IAKM rule (docs/policies.md) after the selection of far leaves [l0, l1): pick.picked are
  // indices into them, `scores` their scores (empty in a desert), `far_weights` their
  // Shares::far_weights. Counts the changes in `s`.
  Status adapt(const SelectionQuery& query, KvCatalog& catalog, ChunkTree& tree, int64_t l0, int64_t l1,
               const RangePick& pick, const std::vector<float>& scores, const std::vector<double>& far_weights,
               Selection& s) {
    const std::vector<int64_t>& picked = pick.picked;
    std::vector<bool> selected(static_cast<size_t>(l1 - l0), false);
    for (int64_t j : picked) selected[j] = true;
    for (int64_t i = l0; i < l1; ++i) tree.history(i).note(selected[i - l0]);

    // A selection that holds all of far reads every far token however fine the leaves: no split pays.
    int64_t n_picked_tokens = 0;
    for (const TokenRange& r : pick.ranges) n_picked_tokens += r.size();
    const bool all_far = n_picked_tokens == query.far.size();

    std::vector<int64_t> splits;  // far-leaf offsets, best score first
    const bool early = query.step < kIakmEarlySteps;
    std::optional<bool> skewed;  // computed once, when a rule asks
    const auto is_skewed = [&] {
      if (!skewed) skewed = skew(query, selected, far_weights) >= kIakmSkew;
      return *skewed;
    };
    bool any_hot = false;
    for (int64_t j : picked) {
      if (all_far || !tree.can_split(l0 + j)) continue;
      const bool hot = tree.history(l0 + j).hot_steps >= kIakmHotSteps;
      if (early || hot) splits.push_back(j);
      any_hot = any_hot || hot;
    }
    if (!early && any_hot && !is_skewed()) splits.clear();
    // Nothing selected: the best leaf alone is over the budget. Split it, or no leaf would ever fit.
    if (picked.empty() && !scores.empty()) {
      const int64_t best = std::max_element(scores.begin(), scores.end()) - scores.begin();
      if (tree.can_split(l0 + best)) splits.push_back(best);
    }
    std::stable_sort(splits.begin(), splits.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
    if (splits.size() > static_cast<size_t>(kIakmMaxSplits)) splits.resize(kIakmMaxSplits);

    std::vector<int64_t> split_leaves(splits.size());
    for (size_t k = 0; k < splits.size(); ++k) split_leaves[k] = l0 + splits[k];
    std::sort(split_leaves.begin(), split_leaves.end());
    const auto splitting = [&](int64_t i) { return std::binary_search(split_leaves.begin(), split_leaves.end(), i); };

    // A leaf that splits never merges (a forced split takes an unselected leaf, possibly cold).
    std::vector<int64_t> merges;  // leaf indices i: merge i and i + 1
    const int64_t merge_cap = budget_leaf_cap(tree.options(), query.budget_tokens);
    for (int64_t i = l0; i + 1 < l1; ++i) {
      if (tree.history(i).cold_steps >= kIakmColdSteps && tree.history(i + 1).cold_steps >= kIakmColdSteps &&
          tree.can_merge(i) && 2 * tree.leaf(i).size() <= merge_cap && !splitting(i) && !splitting(i + 1)) {
        merges.push_back(i++);
      }
    }
    if (!merges.empty() && !s.desert && !is_skewed()) merges.clear();

    LEOAM_RETURN_IF_ERROR(tree.edit(split_leaves, merges));
    note_working_bytes(tree.scratch_bytes());
    s.n_splits += static_cast<int64_t>(split_leaves.size());
    s.n_merges += static_cast<int64_t>(merges.size());
    return Status::ok();
  }

  // The layer's skew (docs/policies.md): the mean over query heads of the selected far leaves'
  // share of the far leaves' bounded mass, which is linear in the selection: the selected leaves'
  // summed far weights (Shares::far_weights) over the heads.
  static double skew(const SelectionQuery& query, const std::vector<bool>& selected,
                     const std::vector<double>& far_weights) {
    double sum = 0.0;
    for (size_t i = 0; i < selected.size(); ++i) sum += selected[i] ? far_weights[i] : 0.0;
    return sum / query.n_head;
  }

  // What the bounds are computed over: units[u] bounds owner[u] (a leaf or a chunk), its rows
  // against its f16 box, cut to their key signs where the tree's sliced sketch or the abstracts'
  // row sketch has words (sign_bound.h); else by the box alone (chunk_bound.h). An owner's bound
  // is the best of its units'.
  struct BoundUnits {
    std::vector<SignUnit> units;
    std::vector<int64_t> owner;
    SignSketch signs;    // the store chunks' (a flat step's abstracts)
    SignSlices slices;   // the tree's
    BoundLayout layout;
    bool chunk_boxes = true;  // each box is one store chunk's (not a larger block's)
  };

  // A tree's leaves as units (the ChunkTree header): each leaf cut at the blocks it meets, each
  // piece against its block's box.
  static BoundUnits leaf_units(const ChunkTree& tree, std::span<const TokenRange> leaves) {
    BoundUnits r{{}, {}, {}, tree.key_signs(), tree.layout(),
                 tree.options().block_tokens == tree.options().min_tokens};
    const int64_t block = tree.options().block_tokens;
    for (int64_t i = 0; i < static_cast<int64_t>(leaves.size()); ++i) {
      const TokenRange leaf = leaves[i];
      for (int64_t b = leaf.begin / block; b * block < leaf.end; ++b) {
        r.units.push_back({intersect(leaf, {b * block, (b + 1) * block}), tree.block_box(b)});
        r.owner.push_back(i);
      }
    }
    return r;
  }

  // bounds[(h - h0) * units.size() + u]: the box bound (chunk_bound.h) of query head h of `heads`
  // ([h0, h1)) against unit u's box.
  static std::vector<float> box_bounds(const SelectionQuery& query, const BoundUnits& units, BoundSide side,
                                       KvHeadGroups heads) {
    const int group = query.n_head / query.n_head_kv;
    const auto [h0, h1] = heads.query_heads(query.n_head, query.n_head_kv);
    const size_t n = units.units.size();
    std::vector<float> bounds(static_cast<size_t>(h1 - h0) * n);
    std::vector<float> box(static_cast<size_t>(units.layout.chunk_stride));
    for (size_t u = 0; u < n; ++u) {
      decode_box(units.units[u].box, units.layout.chunk_stride, box.data());
      for (int h = h0; h < h1; ++h) {
        chunk_bounds(query.q + static_cast<int64_t>(h) * query.head_dim, h / group, box.data(), 1, units.layout,
                     &bounds[(h - h0) * n + u], side);
      }
    }
    return bounds;
  }

  // Per owner of a BoundUnits (whose units come owner by owner, in order): its rows, and whether
  // they lie on both sides of far's edge.
  struct OwnerRows {
    std::vector<int64_t> n_rows;
    std::vector<uint8_t> straddles;
    uint64_t bytes() const { return capacity_bytes(n_rows) + capacity_bytes(straddles); }
  };

  static OwnerRows owner_rows(const SelectionQuery& query, int64_t n, const BoundUnits& units) {
    OwnerRows r{std::vector<int64_t>(static_cast<size_t>(n), 0), std::vector<uint8_t>(static_cast<size_t>(n), 0)};
    std::vector<int64_t> n_far(static_cast<size_t>(n), 0);
    for (size_t u = 0; u < units.units.size(); ++u) {
      const TokenRange rows = units.units[u].rows;
      r.n_rows[units.owner[u]] += rows.size();
      n_far[units.owner[u]] += intersect(rows, query.far).size();
    }
    for (int64_t o = 0; o < n; ++o) r.straddles[o] = n_far[o] > 0 && n_far[o] < r.n_rows[o];
    return r;
  }

  // Rows a row_mass_values pass bounds at once: its working arrays stay small beside the trees.
  static constexpr int64_t kRowBatch = 2048;

  // Per owner and query head of `heads`, the log-mean-exp of its rows' upper bounds b_t:
  //
  //   v = (1 / scale) ln(mean over the owner's rows of e^(scale * b_t))
  //
  // so that size * e^(scale * v) is the sum of the rows' bounded masses: a bound on the owner's
  // attention mass, like size * e^(scale * max b_t), and tighter wherever its rows' bounds differ.
  // An owner with rows on both sides of far's edge keeps its best row's bound, so that its far
  // tokens' share of it still bounds theirs (the desert check). Units with signs only; their
  // rows are bounded as units of one row each, whole owners at a time.
  static HeadBounds row_mass_values(const SelectionQuery& query, int64_t n, const BoundUnits& units,
                                    const OwnerRows& owners, KvHeadGroups heads, ThreadPool* pool) {
    const auto [h0, h1] = heads.query_heads(query.n_head, query.n_head_kv);
    HeadBounds b{n, std::vector<float>(static_cast<size_t>((h1 - h0) * n))};
    std::vector<SignUnit> rows;
    std::vector<float> bounds;
    std::vector<float> e;
    uint64_t peak = 0;
    size_t u = 0;
    while (u < units.units.size()) {
      // Whole owners from unit u on, until kRowBatch rows or more.
      const int64_t o0 = units.owner[u];
      rows.clear();
      const auto batch_full = [&] { return static_cast<int64_t>(rows.size()) >= kRowBatch; };
      for (; u < units.units.size() && (!batch_full() || units.owner[u] == units.owner[u - 1]); ++u) {
        for (int64_t t = units.units[u].rows.begin; t < units.units[u].rows.end; ++t) {
          rows.push_back({{t, t + 1}, units.units[u].box});
        }
      }
      const int64_t o1 = u < units.units.size() ? units.owner[u] : n;
      const size_t n_rows = rows.size();
      bounds.resize(static_cast<size_t>(h1 - h0) * n_rows);
      e.resize(n_rows);
      if (units.slices.words != nullptr) {
        sign_bounds(query.q, query.n_head, rows, units.layout, units.slices, bounds.data(), pool, heads);
      } else {
        sign_bounds(query.q, query.n_head, rows, units.layout, units.signs, bounds.data(), pool, heads);
      }
      for (int h = 0; h < h1 - h0; ++h) {
        const float* in = bounds.data() + h * n_rows;
        float* out = b.data.data() + h * n;
        for (int64_t o = o0, r0 = 0; o < o1; r0 += owners.n_rows[o], ++o) {
          const int64_t k = owners.n_rows[o];
          const float top = k > 0 ? *std::max_element(in + r0, in + r0 + k) : -std::numeric_limits<float>::infinity();
          if (k == 0 || owners.straddles[o]) {
            out[o] = top;
            continue;
          }
          for (int64_t r = 0; r < k; ++r) e[r0 + r] = query.scale * (in[r0 + r] - top);
          kernels::exp(e.data() + r0, k, e.data() + r0);
          double sum = 0.0;
          for (int64_t r = 0; r < k; ++r) sum += e[r0 + r];
          out[o] = static_cast<float>(top + std::log(sum / static_cast<double>(k)) / query.scale);
        }
      }
      peak = std::max(peak, capacity_bytes(rows) + capacity_bytes(bounds) + capacity_bytes(e));
    }
    b.peak_bytes = peak + capacity_bytes(b.data);
    return b;
  }

  // The upper bounds (or, with RowScore::kMidpoint, the midpoint estimates: units with signs only)
  // of the query heads of `heads` over n owners (HeadBounds::head(j): the j-th), the units split
  // among `pool`'s threads when given.
  static HeadBounds unit_values(const SelectionQuery& query, int64_t n, const BoundUnits& units, KvHeadGroups heads,
                                ThreadPool* pool, RowScore score = RowScore::kUpper) {
    const auto [h0, h1] = heads.query_heads(query.n_head, query.n_head_kv);
    const size_t n_units = units.units.size();
    std::vector<float> unit_bounds;
    if (units.slices.words != nullptr) {
      unit_bounds.resize((h1 - h0) * n_units);
      sign_bounds(query.q, query.n_head, units.units, units.layout, units.slices, unit_bounds.data(), pool, heads,
                  score);
    } else if (units.signs.words != nullptr) {
      unit_bounds.resize((h1 - h0) * n_units);
      sign_bounds(query.q, query.n_head, units.units, units.layout, units.signs, unit_bounds.data(), pool, heads,
                  score);
    } else {
      unit_bounds = box_bounds(query, units, BoundSide::kUpper, heads);
    }
    // A unit per owner, in order (every flat step, and a tree whose leaves are its blocks): the
    // units' bounds are the owners'.
    bool one_to_one = static_cast<int64_t>(n_units) == n;
    for (size_t u = 0; one_to_one && u < n_units; ++u) one_to_one = units.owner[u] == static_cast<int64_t>(u);
    if (one_to_one) {
      const uint64_t bytes = capacity_bytes(unit_bounds);
      return HeadBounds{n, std::move(unit_bounds), bytes};
    }
    HeadBounds b{n, std::vector<float>(static_cast<size_t>((h1 - h0) * n), -std::numeric_limits<float>::infinity())};
    for (int h = 0; h < h1 - h0; ++h) {
      float* out = b.data.data() + h * n;
      const float* in = unit_bounds.data() + h * n_units;
      for (size_t u = 0; u < n_units; ++u) out[units.owner[u]] = std::max(out[units.owner[u]], in[u]);
    }
    b.peak_bytes = capacity_bytes(unit_bounds) + capacity_bytes(b.data);
    return b;
  }

  // What the ranking, the desert check and the skew need of every query head's upper bounds over
  // the units of [0, n_tokens) (docs/policies.md), made a kv head's group at a time (a group's
  // bounds are held, not every head's) and in one pass a head: each unit's bounded mass
  // e^(scale * (bound - m)) is computed once and serves the head's total, its far mass bound, its
  // shares and its far weights.
  struct Shares {
    std::vector<float> scores;        // far units [f0, f1): the GQA-combined log mass share
    std::vector<double> m;            // per query head: its largest upper bound
    std::vector<double> far_upper;    // per query head: sum over units of far tokens * e^(scale * (bound - m))
    std::vector<double> far_weights;  // far units: the sum over query heads of their share of the head's far mass
    uint64_t working_bytes = 0;       // the most held while making them
  };

  // A run of kv heads' part of Shares: their best scores and summed far weights, and its bytes.
  struct SharesPart {
    std::vector<float> scores;
    std::vector<double> far_weights;
    uint64_t working_bytes = 0;
  };

  // Whether the ranking takes the units' midpoint estimates (PolicyOptions::fine_midpoint): in the
  // fine layers where their boxes are a store chunk's, with signs. There the rows' cut intervals
  // are narrow and their midpoints near the keys, while the bounds' slack, which grows with each
  // channel's interval, ranks by the boxes' widths. The midpoints bring leoam's perplexity near
  // the oracle's, but they miss more needles than the bounds, which never rank a key's peak below
  // its box; in the coarse layers' 64-token boxes more still (docs/policies.md). So
  // they are not the default.
  bool ranks_by_midpoint(const SelectionQuery& query, const BoundUnits& units) const {
    return options_.fine_midpoint && tight_fine_rows(query, units);
  }

  // Whether the bounds sum the rows' masses (PolicyOptions::row_mass, row_mass_values) where
  // the midpoints would apply. There each row's bound lies near its q.k, and the sum tells a
  // leaf whose rows all match from one with a single matching row, which the best row's bound
  // ranks alike. In a coarse layer's 64-token box the rows' bounds share the box's slack, and
  // their sum ranks by the box's width (docs/policies.md).
  bool sums_row_mass(const SelectionQuery& query, const BoundUnits& units) const {
    return options_.row_mass && query.scale > 0.0f && tight_fine_rows(query, units);
  }

  // A fine layer whose boxes are a store chunk's, with the rows' signs.
  static bool tight_fine_rows(const SelectionQuery& query, const BoundUnits& units) {
    return query.layer < kIakmFineLayers && units.chunk_boxes &&
           (units.slices.words != nullptr || units.signs.words != nullptr);
  }

  // Shares over the units at `ranges` (n of them: their bounds are made over `bound_units`, whose
  // owners they are), scores for the far ones [f0, f1). With a pool, its threads take runs of kv
  // heads, each group's bounds and shares on one thread (the exps too), and the parts combine in
  // order (scores by max: exact; far weights by sum: the same up to rounding); a model with fewer
  // kv heads than would fill the pool splits each group's bounds by units instead.
  Shares shares(const SelectionQuery& query, const BoundUnits& bound_units, std::span<const TokenRange> ranges,
                int64_t f0, int64_t f1) const {
    Shares r{{}, std::vector<double>(query.n_head), std::vector<double>(query.n_head), {}};
    const int group = query.n_head / query.n_head_kv;
    // About a multiply-add a row, a channel and a query head (the bounds; the exps add a few a unit).
    const int64_t cost_per_group = query.n_tokens * group * query.head_dim;
    const bool by_groups = query.pool != nullptr && query.n_head_kv >= query.pool->n_threads();
    const int n_parts = by_groups ? query.pool->n_ranges_for(query.n_head_kv, cost_per_group) : 1;
    // Each owner's rows, once for every group, where the bounds sum their masses.
    const std::optional<OwnerRows> owners =
        sums_row_mass(query, bound_units) ? std::optional<OwnerRows>(owner_rows(query, ranges.size(), bound_units))
                                          : std::nullopt;
    const OwnerRows* owners_ptr = owners ? &*owners : nullptr;
    if (n_parts <= 1) {
      SharesPart part =
          shares_of_groups(query, bound_units, owners_ptr, ranges, f0, f1, 0, query.n_head_kv, query.pool, r);
      r.scores = std::move(part.scores);
      r.far_weights = std::move(part.far_weights);
      r.working_bytes = part.working_bytes;
    } else {
      std::vector<SharesPart> parts(static_cast<size_t>(n_parts));
      query.pool->parallel_for(query.n_head_kv, cost_per_group, [&](int64_t g0, int64_t g1, int range) {
        parts[range] = shares_of_groups(query, bound_units, owners_ptr, ranges, f0, f1, static_cast<int>(g0),
                                        static_cast<int>(g1), nullptr, r);
      });
      r.scores = std::move(parts[0].scores);
      r.far_weights = std::move(parts[0].far_weights);
      for (const SharesPart& part : parts) r.working_bytes += part.working_bytes;
      for (size_t k = 1; k < parts.size(); ++k) {
        for (size_t i = 0; i < r.scores.size(); ++i) {
          r.scores[i] = std::max(r.scores[i], parts[k].scores[i]);
          r.far_weights[i] += parts[k].far_weights[i];
        }
      }
    }
    r.working_bytes += capacity_bytes(r.m) + capacity_bytes(r.far_upper) + (owners ? owners->bytes() : 0);
    return r;
  }

  // The part of kv heads [g0, g1): their heads' m and far_upper into `r`, the rest returned. The
  // bounds' kernel splits the units among `pool`'s threads, when given. `owners`: each owner's rows
  // where the bounds sum their masses (sums_row_mass), else null.
  SharesPart shares_of_groups(const SelectionQuery& query, const BoundUnits& bound_units, const OwnerRows* owners,
                              std::span<const TokenRange> ranges, int64_t f0, int64_t f1, int g0, int g1,
                              ThreadPool* pool, Shares& r) const {
    const int group = query.n_head / query.n_head_kv;
    const auto n = static_cast<int64_t>(ranges.size());
    constexpr float kNone = -std::numeric_limits<float>::infinity();
    SharesPart part{std::vector<float>(static_cast<size_t>(f1 - f0), kNone),
                    std::vector<double>(static_cast<size_t>(f1 - f0), 0.0)};
    // One head's e^(scale * (bound - m)), by the vectorized exp (in float, as the bounds are;
    // the sums in double).
    std::vector<float> mass(static_cast<size_t>(n));
    // With midpoint ranking (ranks_by_midpoint), one head's e^(scale * (midpoint - its largest)):
    // the ranking's masses, apart from the bounds' that deserts and skew take.
    const bool midpoint = ranks_by_midpoint(query, bound_units);
    std::vector<float> rank_mass(midpoint ? static_cast<size_t>(n) : 0);
    std::vector<double> size(static_cast<size_t>(n));      // each unit's tokens
    std::vector<double> far_size(static_cast<size_t>(n));  // and those in far
    for (int64_t i = 0; i < n; ++i) {
      size[i] = static_cast<double>(ranges[i].size());
      far_size[i] = static_cast<double>(intersect(ranges[i], query.far).size());
    }
    std::vector<double> log_total(static_cast<size_t>(group));  // the group's heads' ln(ranked total)
    std::vector<double> rank_m(static_cast<size_t>(group));     // the group's heads' largest ranked value
    // kSum: the group's summed shares (the scores take the largest group's log; kMax: the largest
    // head's log share, straight into the scores).
    std::vector<double> sum(options_.group_combine == GroupCombine::kSum ? static_cast<size_t>(f1 - f0) : 0);
    float* scores = part.scores.data();
    uint64_t bounds_bytes = 0;
    for (int g = g0; g < g1; ++g) {
      const HeadBounds upper = owners != nullptr
                                   ? row_mass_values(query, n, bound_units, *owners, KvHeadGroups::of(g), pool)
                                   : unit_values(query, n, bound_units, KvHeadGroups::of(g), pool);
      const HeadBounds ranked =
          midpoint ? unit_values(query, n, bound_units, KvHeadGroups::of(g), pool, RowScore::kMidpoint) : HeadBounds{};
      bounds_bytes = std::max(bounds_bytes, upper.peak_bytes + ranked.peak_bytes);
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int j = 0; j < group; ++j) {
        const int h = g * group + j;
        const float* u = upper.head(j);
        const double m = *std::max_element(u, u + n);
        double total = 0.0;  // the head's bounded mass over every unit, times e^(-scale * m)
        double far_upper = 0.0;
        scaled_exp(u, n, query.scale, static_cast<float>(m), mass.data());
        double far_lost = 0.0;  // far tokens whose mass fell below FLT_MIN (0, or a denormal)
        for (int64_t i = 0; i < n; ++i) {
          total += size[i] * mass[i];
          far_upper += far_size[i] * mass[i];
          if (mass[i] < std::numeric_limits<float>::min()) far_lost += far_size[i];
        }
        // far_upper stays an upper bound for the desert check, whatever the float exp rounded.
        const double far_bound = far_upper * kExpSlack + far_lost * std::numeric_limits<float>::min();
        r.m[h] = m;
        r.far_upper[h] = far_bound;
        add_far_weights(query, u, far_size, f0, f1, mass, far_upper, part.far_weights);
        const float* v = midpoint ? ranked.head(j) : u;
        rank_m[j] = midpoint ? *std::max_element(v, v + n) : m;
        if (midpoint) {
          total = 0.0;
          scaled_exp(v, n, query.scale, static_cast<float>(rank_m[j]), rank_mass.data());
          for (int64_t i = 0; i < n; ++i) total += size[i] * rank_mass[i];
        }
        const std::vector<float>& w = midpoint ? rank_mass : mass;
        log_total[j] = std::log(total);
        if (options_.group_combine == GroupCombine::kMax) {
          for (int64_t i = f0; i < f1; ++i) {
            scores[i - f0] =
                std::max(scores[i - f0], static_cast<float>(query.scale * (v[i] - rank_m[j]) - log_total[j]));
          }
        } else {  // the group's attention mass on the unit, which is what a shared KV head serves
          for (int64_t i = f0; i < f1; ++i) sum[i - f0] += w[i] / total;
        }
      }
      if (options_.group_combine == GroupCombine::kSum) {
        for (int64_t i = f0; i < f1; ++i) {
          if (sum[i - f0] > 0.0) {
            scores[i - f0] = std::max(scores[i - f0], static_cast<float>(std::log(sum[i - f0])));
            continue;
          }
          // Every head's mass underflowed: rank by the best head's log share, as kMax does.
          for (int j = 0; j < group; ++j) {
            const float value = midpoint ? ranked.head(j)[i] : upper.head(j)[i];
            scores[i - f0] =
                std::max(scores[i - f0], static_cast<float>(query.scale * (value - rank_m[j]) - log_total[j]));
          }
        }
      }
    }
    part.working_bytes = capacity_bytes(part.scores) + capacity_bytes(part.far_weights) + capacity_bytes(mass) +
                         capacity_bytes(rank_mass) + capacity_bytes(log_total) + capacity_bytes(rank_m) +
                         capacity_bytes(sum) + capacity_bytes(size) + capacity_bytes(far_size) + bounds_bytes;
    return part;
  }

  // Adds one query head's far weights to `weights` (far units [f0, f1)): a far unit's share of the
  // head's far mass bound, far tokens * e^(scale * (bound - m_far)) over its sum over the far
  // units, with m_far the head's largest bound among them. That is far tokens * mass / far_upper
  // (both relative to the head's largest bound overall, m), unless every far unit's mass
  // underflowed there (a near unit far above them all): then from m_far.
  static void add_far_weights(const SelectionQuery& query, const float* u, const std::vector<double>& far_size,
                              int64_t f0, int64_t f1, const std::vector<float>& mass, double far_upper,
                              std::vector<double>& weights) {
    if (far_upper > 0.0) {
      for (int64_t i = f0; i < f1; ++i) weights[i - f0] += far_size[i] * mass[i] / far_upper;
      return;
    }
    if (f0 >= f1) return;
    const double m_far = *std::max_element(u + f0, u + f1);
    double total = 0.0;
    for (int64_t i = f0; i < f1; ++i) total += far_size[i] * std::exp(query.scale * (u[i] - m_far));
    if (!(total > 0.0)) return;
    for (int64_t i = f0; i < f1; ++i) {
      weights[i - f0] += far_size[i] * std::exp(query.scale * (u[i] - m_far)) / total;
    }
  }

  // True when, for every query head, the far chunks' bounded mass is below desert_mass of the
  // near window's (docs/policies.md). `chunks` are the positions of every chunk (leaf) of
  // [0, n_tokens), in order, `units` their units and `shared` their shares. Lower bounds are
  // needed only where near tokens are, the chunks at both ends: a chunk's is the least of its
  // units' box lower bounds.
  bool is_desert(const SelectionQuery& query, std::span<const TokenRange> chunks, const BoundUnits& units,
                 const Shares& shared) const {
    const int64_t n = static_cast<int64_t>(chunks.size());
    // Chunks [0, a) and [b, n) hold near tokens; those in [a, b) are all far.
    int64_t a = 0;
    while (a < n && intersect(chunks[a], query.far).size() < chunks[a].size()) ++a;
    int64_t b = n;
    while (b > a && intersect(chunks[b - 1], query.far).size() < chunks[b - 1].size()) --b;
    BoundUnits ends{{}, {}, {}, {}, units.layout};
    for (size_t u = 0; u < units.units.size(); ++u) {
      if (units.owner[u] < a || units.owner[u] >= b) {
        ends.units.push_back(units.units[u]);
        ends.owner.push_back(units.owner[u]);
      }
    }
    const std::vector<float> end_lower = box_bounds(query, ends, BoundSide::kLower, KvHeadGroups::all());
    std::vector<float> lower(static_cast<size_t>(n));
    for (int h = 0; h < query.n_head; ++h) {
      std::fill(lower.begin(), lower.end(), std::numeric_limits<float>::infinity());
      for (size_t u = 0; u < ends.units.size(); ++u) {
        lower[ends.owner[u]] = std::min(lower[ends.owner[u]], end_lower[h * ends.units.size() + u]);
      }
      double near_lower = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t n_near = chunks[i].size() - intersect(chunks[i], query.far).size();
        if (n_near > 0) near_lower += static_cast<double>(n_near) * std::exp(query.scale * (lower[i] - shared.m[h]));
      }
      if (!(shared.far_upper[h] < options_.desert_mass * near_lower)) return false;
    }
    return true;
  }

  PolicyOptions options_;
  std::vector<std::optional<ChunkTree>> trees_;  // [layer], adaptive only
  uint64_t peak_bytes_ = 0;  // the most the trees and a call's working copies held at once
};

}  // namespace

// The blocks of the trees over n_tokens at a far budget: the disk records' grain
// (PolicyInfo::abstract_tokens).
int leoam_block_tokens(const PolicyOptions& options, int layer, int store_chunk_tokens, int64_t budget_tokens,
                       int64_t n_tokens) {
  return iakm_tree_options(layer, store_chunk_tokens, budget_tokens, n_tokens, options.key_signs).block_tokens;
}

std::unique_ptr<SelectionPolicy> make_leoam_policy(const PolicyOptions& options) {
  return std::make_unique<LeoamPolicy>(options);
}

}  // namespace leoam::sparse
