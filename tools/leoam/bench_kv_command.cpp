// `leoam bench kv`: decode speed of each attention policy with the KV mostly on disk, each figure
// beside its bound, measured in the same run. Per --ctx and policy: a fresh tiered store, filled
// from synthetic KV (model/synthetic_kv.h, through the store's own append path, its last positions
// a prefilled prompt of random ids) or by prefilling -f's text, then -n tokens decoded by the real
// engine, as `leoam run`; every policy starts from the same state. The policies run one after the
// other, or with --interleave a step of each in turn, so that on a shared machine, whose bandwidth
// moves within minutes, steps side by side meet the same stretch. Bound of a step = the larger of
// its DRAM time and its disk time (its disk bytes / the disk's raw read rate), the rates probed
// before and after the runs, the faster of each. Output: markdown on stdout (and --markdown FILE),
// JSON in --json FILE. The fill, the bound and what full reads ahead: docs/kv-store.md#bench-kv
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_options.h"
#include "benchmark.h"
#include "cli_common.h"
#include "core/memory_bandwidth.h"
#include "core/trace.h"
#include "engine/sampler.h"
#include "engine/step_breakdown.h"
#include "gather_benchmark.h"
#include "kv/tiered_kv_cache.h"
#include "kv_options.h"
#include "model/forward_context.h"
#include "model/model.h"
#include "model/moving_targets.h"
#include "model/rope.h"
#include "model/synthetic_kv.h"
#include "progress_bar.h"
#include "sparse/fidelity_probe.h"
#include "sparse/policy_registry.h"
#include "sparse/sparse_attention.h"
#include "tokenizer/tokenizer.h"

namespace leoam::cli {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kFillBlockTokens = 512;  // positions generated and appended at once, per layer
constexpr int64_t kPromptEndTokens = 2;    // the synthetic fill's last positions, prefilled as a prompt
constexpr uint64_t kDiskMarginBytes = uint64_t{256} << 20;
// --workload moving (model/moving_targets.h): far keys a query leans on per KV head, the decode
// steps they last, the nats their logits rise by.
constexpr int kMovingTargets = 4;
constexpr int kMovingPeriod = 4;
constexpr float kMovingLean = 10.0f;

// One decode step's cost.
struct Step {
  double start_s = 0;  // when it began, from the command's start: the order the steps ran in
  double ms = 0;
  std::array<uint64_t, kNumTiers> kv_bytes_read{};  // per tier; disk without the abstracts
  uint64_t abstract_bytes_read = 0;                 // from disk
  int64_t n_attended = 0, n_visible = 0;            // summed over layers; attended as attention counted it
  int64_t n_selected = 0;                           // what the selectors say they picked (full: n_visible)
  // Fidelity (sparse/fidelity_probe.h), the means over the sequences' probes; full attends every
  // position: 1 and 0 by construction, and no profile (NaN).
  double mass_covered = 1.0, output_error = 0.0, top10_chunk_mass = std::nan("");
};

struct PolicyRun {
  std::string policy;
  int64_t n_ctx = 0;
  int chunk_tokens = 0;
  double disk_share = 0;  // of the KV's chunks, on disk after the fill
  double fill_s = 0;
  double prompt_end_s = 0;  // of fill_s: the synthetic fill's prompt end (kPromptEndTokens), every sequence
  std::vector<Step> steps;
  std::string io_mode;
  StepBreakdown breakdown;  // the steps after the first, from their trace
  StepBreakdown first_breakdown;  // the first step's
  uint64_t policy_peak_bytes = 0;  // the most the selectors held about the KV (SelectionPolicy::memory), all sequences
  uint64_t kv_bytes = 0;           // the KV of every position at the end, all sequences
  uint64_t disk_abstract_bytes = 0;  // the disk tier's abstract files (.lka) at the end, all sequences
  TransferStats transfer;          // --kv-compress: the compressed reads, all sequences (times: the first's)
};


double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Free bytes of the filesystem that holds `dir` (or its nearest existing parent).
Result<uint64_t> free_bytes(const std::string& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir);
  while (!std::filesystem::exists(p) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  struct statvfs st {};
  if (::statvfs(p.c_str(), &st) != 0) return io_error("--kv-dir " + dir + ": cannot read its filesystem's free space");
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

class BenchKvCommand : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* cmd = app.add_subcommand(
        "kv", "decode speed per attention policy with the KV mostly on disk, beside its bound");
    cmd->add_option("-m,--model", model_path_, "model file (GGUF); its KV shape is the shape")
        ->required()
        ->check(readable_file())
        ->type_name("FILE");
    cmd->add_option("--ctx", ctxs_, "context lengths: positions in the store before decoding")
        ->required()
        ->delimiter(',')
        ->check(in_range<int64_t>(1, int64_t{1} << 30))
        ->type_name("N[,N...]");
    cmd->add_option("--policies", policies_, "attention policies, comma-separated")
        ->delimiter(',')
        ->capture_default_str()
        ->check(CLI::IsMember(policy_names()))
        ->type_name("P[,P...]");
    cmd->add_option("--batch", batch_,
                    "sequences decoded together (ForwardContext::decode_batch), each its own store of --ctx "
                    "positions (synthetic KV of seed --seed + its index) and its own selector; a row's ms/tok is "
                    "the batch step's, its tok/s the batch's")
        ->capture_default_str()
        ->check(in_range(1, 64));
    cmd->add_flag("--interleave", interleave_,
                  "decode the policies' steps in turn (a step of each, then the next) rather than one policy's "
                  "run after the other, so that a slow stretch of the machine slows them alike; every policy's "
                  "stores are held at once (RAM and --kv-dir space for all of them)");
    cmd->add_option("-n,--n-gen", n_gen_, "tokens decoded per run (the first is reported apart)")
        ->capture_default_str()
        ->check(in_range(2, 4096));
    add_threads_option(*cmd, n_threads_);
    cmd->add_option("--seed", seed_, "seed of the synthetic KV and the first token")->capture_default_str();
    CLI::Option* synth = cmd->add_flag("--synthetic-kv", synthetic_kv_,
                                       "fill the store with synthetic skewed KV (model/synthetic_kv.h) instead of a "
                                       "prefill, but for a prompt of " + std::to_string(kPromptEndTokens) +
                                           " random ids at its end, prefilled as a prompt's end is (dense, then the "
                                           "forecast of the first step's picks); the tokens are random ids");
    CLI::Option* file = cmd->add_option("-f,--file", prompt_file_, "prefill this text, cut to --ctx tokens")
                            ->check(readable_file())
                            ->type_name("FILE");
    synth->excludes(file);
    file->excludes(synth);
    CLI::Option* workload =
        cmd->add_option("--workload", workload_,
                        "with --synthetic-kv: static (heavy hitters at the same positions in every layer and head, "
                        "the queries the model's own) or moving (heavy hitters per layer and KV head, and each "
                        "query leans on " + std::to_string(kMovingTargets) + " far keys per KV head drawn anew every " +
                            std::to_string(kMovingPeriod) + " steps, each such key's logit lifted by " +
                            std::to_string(static_cast<int>(kMovingLean)) + " nats)")
            ->capture_default_str()
            ->check(CLI::IsMember({"static", "moving"}));
    cmd->parse_complete_callback([synth, file, workload, this] {
      if (synth->count() == 0 && file->count() == 0) throw CLI::RequiredError("--synthetic-kv or -f FILE");
      if (workload->count() > 0 && workload_ == "moving" && synth->count() == 0) {
        throw CLI::ValidationError("--workload moving", "needs --synthetic-kv");
      }
    });
    cmd->add_option("--fidelity-layers", fidelity_layers_,
                    "layers sampled for fidelity (spread evenly; KV heads 0 and n_kv/2, every query head of their "
                    "groups): each step's full attention for the same queries, computed between steps, against "
                    "each policy's picks; 0: none")
        ->capture_default_str()
        ->check(in_range(0, 1024));
    cmd->add_option("--disk-probe-mb", disk_probe_mb_,
                    "MiB written to --kv-dir to measure the disk's raw read throughput for the bound")
        ->capture_default_str()
        ->check(in_range<uint64_t>(1, 1 << 20));
    cmd->add_option("--json", json_path_, "write every figure as JSON to FILE")->type_name("FILE");
    cmd->add_option("--markdown", markdown_path_, "write the table to FILE too")->type_name("FILE");
    add_kv_options(*cmd, kv_options_);
    cmd->get_option("--kv-dir")->required();
    cmd->remove_option(cmd->get_option("--kv-stats"));
    cmd->remove_option(cmd->get_option("--kv-stats-json"));
    add_attention_options(*cmd, attention_options_);
    cmd->remove_option(cmd->get_option("--policy"));
    return cmd;
  }

  int execute() override {
    Result<std::unique_ptr<Model>> loaded = Model::load(model_path_);
    if (!loaded.is_ok()) return fail(named(loaded.status(), model_path_));
    const Model& model = **loaded;
    cost_ = model_cost(model, KvDtype::kF16);
    n_layer_ = model.hparams().n_layer;
    n_kv_heads_ = model.hparams().n_head_kv;
    Result<KvStoreOptions> store = store_options(kv_options_);
    if (!store.is_ok()) return fail(store.status());
    store_ = *store;
    Result<AttentionOptions> attention = attention_options(attention_options_, n_layer_);
    if (!attention.is_ok()) return fail(attention.status());
    attention_ = *attention;
    if (!prompt_file_.empty()) {
      if (Status st = tokenize_prompt(model); !st.is_ok()) return fail(st);
    }
    if (Status st = measure_machine(model, "before the runs"); !st.is_ok()) return fail(st);
    for (int64_t n_ctx : ctxs_) {
      const Status st = run_policies(model, n_ctx);
      status_.clear();
      if (!st.is_ok()) return fail(st);
    }
    // A shared machine's bandwidth moves within minutes: measured again, the faster of the two
    // sets the bounds (the tighter bound, so a step is never compared with a slow moment's).
    if (Status st = measure_machine(model, "after the runs"); !st.is_ok()) return fail(st);
    status_.clear();
    const std::string table = markdown();
    std::printf("%s", table.c_str());
    std::fflush(stdout);
    if (!markdown_path_.empty()) {
      std::ofstream out(markdown_path_);
      out << table;
      if (!out) return fail(io_error("cannot write --markdown file '" + markdown_path_ + "'"));
    }
    if (!json_path_.empty()) {
      std::ofstream out(json_path_);
      out << to_json().dump(2) << "\n";
      if (!out) return fail(io_error("cannot write --json file '" + json_path_ + "'"));
    }
    return kExitOk;
  }

 private:
  Status tokenize_prompt(const Model& model) {
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::from_gguf(model.gguf()));
    std::ifstream in(prompt_file_, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    prompt_tokens_ = tokenizer->tokenize(text, /*add_bos=*/true, /*parse_special=*/false);
    const int64_t longest = *std::max_element(ctxs_.begin(), ctxs_.end());
    if (static_cast<int64_t>(prompt_tokens_.size()) < longest) {
      return invalid_argument("--ctx " + std::to_string(longest) + ": -f " + prompt_file_ + " has only " +
                              std::to_string(prompt_tokens_.size()) + " tokens; give a longer text or a smaller --ctx");
    }
    return Status::ok();
  }

  // Measures the DRAM bandwidth and the disk's raw read throughput, `when` (for the status line),
  // into dram_probes_ and disk_probes_.
  Status measure_machine(const Model& model, const std::string& when) {
    status_.show("measuring DRAM bandwidth " + when + " ...");
    MemoryBandwidthOptions mb;
    mb.n_threads = n_threads_;
    LEOAM_ASSIGN_OR_RETURN(MemoryBandwidth dram, measure_memory_bandwidth(mb));
    dram_probes_.push_back(dram);
    status_.show("measuring the disk's raw read throughput in " + kv_options_.dir + " " + when + " ...");
    const ModelHparams& hp = model.hparams();
    GatherBenchOptions g;
    g.dir = kv_options_.dir;
    g.shapes = {{hp.n_head_kv, hp.head_dim}};
    g.chunk_tokens = {chunk_tokens_for(policies_.front(), ctxs_.front())};
    g.file_bytes = disk_probe_mb_ << 20;
    g.queue_depth = kv_options_.queue_depth;
    g.n_reps = 3;
    g.seed = static_cast<uint32_t>(seed_);
    // A sparse selection's scattered chunks, and every chunk (full's reads, in long runs): the
    // faster sets the bound, so that no policy's reads can beat it.
    std::optional<GatherBenchRow> best;
    for (const double fraction : {probe_fraction(), 1.0}) {
      g.select_fraction = fraction;
      Result<std::vector<GatherBenchRow>> rows = run_gather_benchmark(g);
      if (!rows.is_ok()) return rows.status().with_context("--kv-dir " + kv_options_.dir + ": measuring the disk");
      if (!best || rows->front().raw_mb_per_s > best->raw_mb_per_s) best = rows->front();
    }
    disk_probes_.push_back(*best);
    return Status::ok();
  }

  // The fastest DRAM bandwidth the probes measured (each the median of its passes), bytes/s.
  double dram_bytes_per_s() const {
    double best = 0;
    for (const MemoryBandwidth& m : dram_probes_) best = std::max(best, m.bytes_per_s);
    return best;
  }
  // The disk probe with the fastest raw read.
  const GatherBenchRow& disk() const {
    return *std::max_element(disk_probes_.begin(), disk_probes_.end(),
                             [](const GatherBenchRow& a, const GatherBenchRow& b) { return a.raw_mb_per_s < b.raw_mb_per_s; });
  }
  // The probes' figures, in the order measured, as "A and B".
  template <typename Probe, typename Figure>
  static std::string probe_list(const std::vector<Probe>& probes, Figure figure) {
    std::string out;
    char buf[32];
    for (size_t i = 0; i < probes.size(); ++i) {
      std::snprintf(buf, sizeof(buf), "%.1f", figure(probes[i]));
      out += (i == 0 ? "" : i + 1 == probes.size() ? " and " : ", ") + std::string(buf);
    }
    return out;
  }

  // The share of the probe's chunks each gather reads: a fractional --budget, else 10%.
  double probe_fraction() const { return attention_options_.budget <= 1.0 ? attention_options_.budget : 0.1; }

  int chunk_tokens_for(const std::string& policy, int64_t n_ctx) const {
    if (store_.chunk_tokens > 0) return store_.chunk_tokens;
    AttentionOptions a = attention_;
    a.policy = policy;
    return default_chunk_tokens(a, store_, n_ctx);
  }

  // One policy's run in progress: its stores (the first owned by the context), selectors and
  // trace, and the tokens the next step decodes.
  struct PolicyBench {
    PolicyRun run;
    std::string what;  // "leoam at 32768 tokens"
    Trace trace;
    std::vector<std::unique_ptr<KvCache>> owned;
    std::vector<TieredKvCache*> stores;
    std::vector<std::unique_ptr<sparse::SparseAttention>> selectors;
    // Per sequence, with a selector and --fidelity-layers: the probe around it, which the forward
    // pass sees instead.
    std::vector<std::unique_ptr<sparse::FidelityProbe>> probes;
    std::vector<std::unique_ptr<SyntheticKv>> gens;  // per sequence, with --synthetic-kv
    std::vector<MovingTargets> targets;              // per sequence, with --workload moving
    std::unique_ptr<ForwardContext> ctx;
    std::vector<int32_t> tokens;
    std::vector<float> logits;
    std::vector<BatchToken> batch;

    // What the forward pass sees as sequence b's selector.
    AttentionSelector* selector(int b) const {
      if (!probes.empty() && probes[b]) return probes[b].get();
      return selectors[b].get();
    }
    DecodeSequence sequence(int b) const { return {stores[b], selector(b)}; }
  };

  // The layers the probes sample: n spread evenly, (2i + 1) n_layer / 2n.
  std::vector<int> fidelity_layers(int n_layer) const {
    const int n = std::min(fidelity_layers_, n_layer);
    std::vector<int> layers;
    for (int i = 0; i < n; ++i) layers.push_back((2 * i + 1) * n_layer / (2 * n));
    return layers;
  }
  static std::vector<int> fidelity_kv_heads(int n_kv_heads) {
    return n_kv_heads > 1 ? std::vector<int>{0, n_kv_heads / 2} : std::vector<int>{0};
  }

  // The policies of one --ctx: one after the other, or with --interleave a step of each in turn.
  Status run_policies(const Model& model, int64_t n_ctx) {
    std::vector<std::vector<std::string>> groups;
    if (interleave_) {
      groups.push_back(policies_);
    } else {
      for (const std::string& p : policies_) groups.push_back({p});
    }
    for (const std::vector<std::string>& group : groups) {
      std::vector<std::unique_ptr<PolicyBench>> benches;
      for (const std::string& policy : group) {
        LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<PolicyBench> bench, start_policy(model, policy, n_ctx));
        benches.push_back(std::move(bench));
      }
      // Step i starts at policy i mod k: each policy's steps follow each other policy's alike, so
      // that what one leaves behind (full's gigabytes of disk reads slow the memory for a while)
      // falls on all of them.
      const size_t k = benches.size();
      for (int i = 0; i < n_gen_; ++i) {
        for (size_t j = 0; j < k; ++j) LEOAM_RETURN_IF_ERROR(step_policy(model, *benches[(i + j) % k], i));
      }
      for (std::unique_ptr<PolicyBench>& bench : benches) runs_.push_back(finish_policy(*bench));
    }
    return Status::ok();
  }

  // A policy's stores and selectors, filled to n_ctx positions.
  Result<std::unique_ptr<PolicyBench>> start_policy(const Model& model, const std::string& policy, int64_t n_ctx) {
    auto bench = std::make_unique<PolicyBench>();
    PolicyRun& run = bench->run;
    run.policy = policy;
    run.n_ctx = n_ctx;
    run.chunk_tokens = chunk_tokens_for(policy, n_ctx);
    AttentionOptions attention = attention_;
    attention.policy = policy;
    KvStoreOptions kv_options = store_;
    kv_options.chunk_tokens = run.chunk_tokens;
    const int64_t n_store = n_ctx + n_gen_;
    KvStoreNeeds needs = kv_store_needs(attention, kv_options, model, n_store);
    needs.chunks = true;  // every policy through the tiered store: their reads compare
    needs.batched = batch_ > 1;
    if (sparse::is_dense_policy(policy) && decode_pipeline(kv_options)) {
      // FlexGen's schedule at its strongest: staging for two layers' whole past, so that all of the
      // next layer's reads overlap this layer's compute (the other policies' selections fit theirs).
      const double layer_mib = static_cast<double>(n_store) * static_cast<double>(cost_.kv_bytes_per_position) /
                               model.hparams().n_layer / (1024.0 * 1024.0);
      kv_options.read_ahead_bytes = std::max(kv_options.read_ahead_bytes, mib_to_bytes(2 * layer_mib));
    }
    bench->trace.name_thread("compute");
    // A store and a selector per sequence; the context owns the first store.
    for (int b = 0; b < batch_; ++b) {
      LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<TieredKvCache> kv,
                             make_tiered_kv_store(kv_options, model, n_store, needs, &bench->trace));
      bench->stores.push_back(kv.get());
      if (b == 0) LEOAM_RETURN_IF_ERROR(check_disk_space(*bench->stores[0], n_ctx));
      LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<sparse::SparseAttention> selector,
                             make_selector(attention, kv_options, model, *kv));
      if (selector && fidelity_layers_ > 0) {
        const ModelHparams& hp = model.hparams();
        sparse::FidelityProbeOptions fo{.n_head = hp.n_head,
                                        .n_head_kv = hp.n_head_kv,
                                        .head_dim = hp.head_dim,
                                        .scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim)),
                                        .layers = fidelity_layers(hp.n_layer),
                                        .kv_heads = fidelity_kv_heads(hp.n_head_kv)};
        LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<sparse::FidelityProbe> probe,
                               sparse::FidelityProbe::create(selector.get(), std::move(fo), hp.n_layer));
        bench->probes.resize(static_cast<size_t>(batch_));
        bench->probes[b] = std::move(probe);
      }
      bench->selectors.push_back(std::move(selector));
      bench->owned.push_back(std::move(kv));
      if (synthetic_kv_) {
        LEOAM_ASSIGN_OR_RETURN(SyntheticKv gen, make_synthetic_kv(model, n_ctx, seed_ + static_cast<uint64_t>(b)));
        bench->gens.push_back(std::make_unique<SyntheticKv>(std::move(gen)));
      }
      if (workload_ == "moving") {
        const int64_t n_fill = n_ctx > kPromptEndTokens ? n_ctx - kPromptEndTokens : n_ctx;
        MovingTargetsOptions mo{.n_head = model.hparams().n_head,
                                .scale = 1.0f / std::sqrt(static_cast<float>(model.hparams().head_dim)),
                                .n_targets = kMovingTargets,
                                .period = kMovingPeriod,
                                .lean = kMovingLean,
                                .first = std::min<int64_t>(64, n_fill / 8),
                                .last = n_fill - std::min<int64_t>(512, n_fill / 4),
                                .seed = seed_ + static_cast<uint64_t>(b)};
        LEOAM_ASSIGN_OR_RETURN(MovingTargets targets, MovingTargets::create(*bench->gens.back(), mo));
        bench->targets.push_back(std::move(targets));
      }
    }
    run.io_mode = bench->stores[0]->disk().io_mode();

    ForwardOptions fwd;
    fwd.n_threads = n_threads_;
    fwd.selector = bench->selector(0);
    if (!bench->targets.empty()) {
      fwd.decode_query_hook = [b = bench.get()](const KvCache& kv, int layer, float* q) {
        for (size_t i = 0; i < b->stores.size(); ++i) {
          if (b->stores[i] == &kv) b->targets[i].steer(layer, q);
        }
      };
    }
    apply_store_options(kv_options, fwd);
    fwd.trace = &bench->trace;
    fwd.n_batch = std::max(fwd.n_batch, batch_);
    bench->what = policy + " at " + std::to_string(n_ctx) + " tokens";
    fwd.progress = [this, what = bench->what](int64_t done, int64_t total) {
      status_.show("prefill for " + what + ": " + std::to_string(done) + "/" + std::to_string(total));
    };
    std::mt19937_64 rng(seed_);
    const auto n_vocab = static_cast<int32_t>(model.hparams().n_vocab);
    std::vector<int32_t>& tokens = bench->tokens;
    tokens.resize(static_cast<size_t>(batch_));
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab));
    const auto t_fill = std::chrono::steady_clock::now();
    std::unique_ptr<KvCache> first = std::move(bench->owned[0]);
    LEOAM_ASSIGN_OR_RETURN(bench->ctx, ForwardContext::create(model, fwd, std::move(first)));
    for (int b = 0; b < batch_; ++b) {
      const std::string seq = batch_ > 1 ? bench->what + ", sequence " + std::to_string(b + 1) : bench->what;
      const DecodeSequence sequence = bench->sequence(b);
      if (synthetic_kv_) {  // each sequence its own KV: the seed + its index, and its prompt's end
        const int64_t n_end = n_ctx > kPromptEndTokens ? kPromptEndTokens : 0;
        LEOAM_RETURN_IF_ERROR(
            fill_synthetic(model, *bench->gens[b], *bench->stores[b], bench->selector(b), n_ctx - n_end, seq));
        if (n_end > 0) {
          status_.show("prefilling the prompt's end for " + seq);
          std::vector<int32_t> end(static_cast<size_t>(n_end));
          for (int32_t& t : end) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab));
          const auto t_end = std::chrono::steady_clock::now();
          LEOAM_RETURN_IF_ERROR(bench->ctx->eval_sequence(sequence, end, false, bench->logits));
          run.prompt_end_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_end).count();
          tokens[b] = sampling::argmax(bench->logits);
        }
      } else {
        const std::span<const int32_t> prompt(prompt_tokens_.data(), static_cast<size_t>(n_ctx));
        LEOAM_RETURN_IF_ERROR(bench->ctx->eval_sequence(sequence, prompt, false, bench->logits));
        tokens[b] = sampling::argmax(bench->logits);
      }
    }
    run.fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_fill).count();
    run.disk_share = disk_share(*bench->stores[0]);
    return bench;
  }

  // Decode step i of a policy's run: its time, reads and share attended into run.steps.
  Status step_policy(const Model& model, PolicyBench& bench, int i) {
    status_.show("decoding " + bench.what + ": token " + std::to_string(i + 1) + "/" + std::to_string(n_gen_));
    const std::vector<TieredKvCache*>& stores = bench.stores;
    const std::vector<std::unique_ptr<sparse::SparseAttention>>& selectors = bench.selectors;
    std::vector<KvStats> before;
    int64_t visible0 = 0, selected0 = 0;
    for (int b = 0; b < batch_; ++b) {
      before.push_back(stores[b]->stats());
      if (selectors[b]) {
        visible0 += selectors[b]->total().n_visible;
        selected0 += selectors[b]->total().n_attended;
      }
    }
    const int64_t attended0 = bench.ctx->decode_positions_attended();
    for (MovingTargets& t : bench.targets) t.prepare(i);
    const auto t0 = std::chrono::steady_clock::now();
    Step s;
    s.start_s = std::chrono::duration<double>(t0 - started_).count();
    if (batch_ == 1) {  // the single-sequence path (the pipeline, the prompt's forecast)
      LEOAM_RETURN_IF_ERROR(bench.ctx->eval(std::span<const int32_t>(bench.tokens.data(), 1), false, bench.logits));
    } else {
      bench.batch.clear();
      for (int b = 0; b < batch_; ++b) bench.batch.push_back({bench.tokens[b], bench.sequence(b)});
      LEOAM_RETURN_IF_ERROR(bench.ctx->decode_batch(bench.batch, bench.logits));
    }
    s.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (int b = 0; b < batch_; ++b) {
      const KvStats after = stores[b]->stats();
      const uint64_t abstracts = after.disk_abstract_bytes_read - before[b].disk_abstract_bytes_read;
      for (int t = 0; t < kNumTiers; ++t) s.kv_bytes_read[t] += after.tiers[t].bytes_read - before[b].tiers[t].bytes_read;
      s.kv_bytes_read[static_cast<int>(Tier::kDisk)] -= abstracts;
      s.abstract_bytes_read += abstracts;
      if (selectors[b]) {
        s.n_visible += selectors[b]->total().n_visible;
        s.n_selected += selectors[b]->total().n_attended;
      } else {  // full: every visible position of every layer
        s.n_visible += (bench.run.n_ctx + i + 1) * model.hparams().n_layer;
        s.n_selected += (bench.run.n_ctx + i + 1) * model.hparams().n_layer;
      }
    }
    s.n_selected -= selected0;
    // The positions attention read, counted where it runs: the same measure for every policy.
    s.n_attended = bench.ctx->decode_positions_attended() - attended0;
    s.n_visible -= visible0;
    LEOAM_RETURN_IF_ERROR(measure_fidelity(bench, s));
    bench.run.steps.push_back(s);
    const auto n_vocab = static_cast<size_t>(model.hparams().n_vocab);
    const std::span<const float> rows(bench.logits);
    for (int b = 0; b < batch_; ++b) bench.tokens[b] = sampling::argmax(rows.subspan(b * n_vocab, n_vocab));
    return Status::ok();
  }

  // The step's fidelity from the probes (outside its timing): the means over the sequences.
  static Status measure_fidelity(PolicyBench& bench, Step& s) {
    if (bench.probes.empty()) return Status::ok();
    s.mass_covered = s.output_error = s.top10_chunk_mass = 0;
    for (const std::unique_ptr<sparse::FidelityProbe>& probe : bench.probes) {
      LEOAM_ASSIGN_OR_RETURN(const sparse::StepFidelity f, probe->measure());
      s.mass_covered += f.mass_covered / static_cast<double>(bench.probes.size());
      s.output_error += f.output_error / static_cast<double>(bench.probes.size());
      s.top10_chunk_mass += f.top10_chunk_mass / static_cast<double>(bench.probes.size());
    }
    return Status::ok();
  }

  // The run's summary once its steps are done: the breakdowns from its trace, the memory and
  // transfer counts of all its sequences.
  PolicyRun finish_policy(PolicyBench& bench) {
    PolicyRun& run = bench.run;
    run.breakdown = summarize_decode_steps(bench.trace);
    run.first_breakdown = summarize_decode_steps(bench.trace, 0, 1);
    for (int b = 0; b < batch_; ++b) {
      if (bench.selectors[b]) run.policy_peak_bytes += bench.selectors[b]->memory().peak_bytes;
      run.kv_bytes += static_cast<uint64_t>(bench.stores[b]->n_tokens()) * cost_.kv_bytes_per_position;
      const KvStats stats = bench.stores[b]->stats();
      run.disk_abstract_bytes += stats.abstract_bytes[static_cast<int>(Tier::kDisk)];
      const TransferStats t = stats.transfer;
      if (b == 0) {
        run.transfer = t;
      } else {
        run.transfer.chunks_compressed += t.chunks_compressed;
        run.transfer.chunks_as_is += t.chunks_as_is;
        run.transfer.bytes_compressed += t.bytes_compressed;
        run.transfer.decode_ms += t.decode_ms;
      }
    }
    return std::move(run);
  }

  Status check_disk_space(const TieredKvCache& kv, int64_t n_ctx) const {
    const DiskTier& disk = kv.disk();
    const uint64_t n_chunks = static_cast<uint64_t>((n_ctx + n_gen_ + kv.chunk_tokens() - 1) / kv.chunk_tokens());
    uint64_t need = 0;  // per sequence, then the batch's
    for (int il = 0; il < kv.shape().n_layer; ++il) {
      const uint64_t n_records = (n_chunks + disk.group_chunks(il) - 1) / disk.group_chunks(il);
      need += n_chunks * (disk.slot_bytes() + disk.compressed_slot_bytes()) + n_records * disk.record_bytes(il);
    }
    need *= static_cast<uint64_t>(batch_);
    const uint64_t want = need + need / 20 + kDiskMarginBytes;  // 5% and 256 MiB of margin
    LEOAM_ASSIGN_OR_RETURN(const uint64_t free, free_bytes(kv_options_.dir));
    if (free < want) {
      return invalid_argument("--ctx " + std::to_string(n_ctx) + ": the KV needs " + human_bytes(need) +
                              " on the filesystem of --kv-dir " + kv_options_.dir + " (" + human_bytes(want) +
                              " with the margin), and it has " + human_bytes(free) +
                              " free; give a smaller --ctx or another --kv-dir");
    }
    return Status::ok();
  }

  Result<SyntheticKv> make_synthetic_kv(const Model& model, int64_t n_ctx, uint64_t seed) const {
    const ModelHparams& hp = model.hparams();
    LEOAM_ASSIGN_OR_RETURN(Rope rope, Rope::create(hp.rope, hp.head_dim, model.weights().rope_freqs));
    SyntheticKvOptions o;
    o.n_layer = hp.n_layer;
    o.n_kv_heads = hp.n_head_kv;
    o.head_dim = hp.head_dim;
    o.n_ctx = n_ctx;
    o.seed = seed;
    o.hitters_per_head = workload_ == "moving";
    return SyntheticKv::create(o, rope);
  }

  // Appends synthetic KV for [0, n_ctx) block by block, each layer in turn as a prefill batch
  // does, and lets the selector watch the keys and the store as it would in a prefill.
  Status fill_synthetic(const Model& model, const SyntheticKv& gen, KvCache& kv, AttentionSelector* selector,
                        int64_t n_ctx, const std::string& what) {
    const ModelHparams& hp = model.hparams();
    const SelectorNeeds needs = selector != nullptr ? selector->needs() : SelectorNeeds{};
    const size_t row = static_cast<size_t>(hp.n_head_kv) * hp.head_dim;
    std::vector<float> k(kFillBlockTokens * row), v(k.size());
    for (int64_t pos0 = 0; pos0 < n_ctx; pos0 += kFillBlockTokens) {
      status_.show("filling " + what + " with synthetic KV: " + std::to_string(pos0) + "/" + std::to_string(n_ctx));
      const int64_t n = std::min(kFillBlockTokens, n_ctx - pos0);
      for (int il = 0; il < hp.n_layer; ++il) {
        gen.generate(il, pos0, n, k.data(), v.data());
        LEOAM_RETURN_IF_ERROR(kv.append(il, pos0, n, k.data(), v.data()));
        if (needs.keys) LEOAM_RETURN_IF_ERROR(selector->observe_keys(il, pos0, n, k.data()));
        if (needs.values) LEOAM_RETURN_IF_ERROR(selector->observe_values(il, pos0, n, v.data()));
        if (needs.stored) LEOAM_RETURN_IF_ERROR(selector->observe_stored(il, pos0 + n));
      }
    }
    return Status::ok();
  }

  static double disk_share(const TieredKvCache& kv) {
    int64_t n = 0, on_disk = 0;
    for (int il = 0; il < kv.shape().n_layer; ++il) {
      for (int64_t i = 0; i < kv.n_chunks(il); ++i, ++n) on_disk += kv.chunk_tier(il, i) == Tier::kDisk ? 1 : 0;
    }
    return n == 0 ? 0.0 : static_cast<double>(on_disk) / static_cast<double>(n);
  }

  // A step's bound's two terms in ms: weights and the KV read from RAM over the DRAM bandwidth, the
  // disk bytes over the disk's raw throughput (the fastest of the probes, each).
  double dram_ms(const Step& s) const {
    const double ram = static_cast<double>(cost_.weight_bytes_per_token + s.kv_bytes_read[0] + s.kv_bytes_read[1]);
    return 1e3 * ram / dram_bytes_per_s();
  }
  double disk_ms(const Step& s) const {
    const double disk = static_cast<double>(s.kv_bytes_read[2] + s.abstract_bytes_read);
    return 1e3 * disk / (this->disk().raw_mb_per_s * 1e6);
  }
  // The bound: the larger term (docs/kv-store.md#bench-kv).
  double bound_ms(const Step& s) const { return std::max(dram_ms(s), disk_ms(s)); }

  // The KV bytes of the positions a step attended (its selection).
  double attended_bytes(const Step& s) const {
    return static_cast<double>(s.n_attended) * static_cast<double>(cost_.kv_bytes_per_position) /
           static_cast<double>(n_layer_);
  }

  // The KV a step read from every tier over the KV of the positions it attended: 1 where it reads
  // what it attends, more where it reads whole chunks around scattered picks (infinigen).
  double read_amplification(const Step& s) const {
    double read = 0;
    for (uint64_t b : s.kv_bytes_read) read += static_cast<double>(b);
    return attended_bytes(s) > 0 ? read / attended_bytes(s) : 0.0;
  }

  // The device and host tiers' budgets, all sequences, over the KV a step attends (its selection):
  // below 1 the tiers cannot hold a selection, and a policy whose picks stay put still reads
  // from disk every step.
  double ram_over_selection(const Step& s) const {
    const double ram = static_cast<double>(batch_) * (kv_options_.device_mb + kv_options_.host_mb) * 1024.0 * 1024.0;
    return attended_bytes(s) > 0 ? ram / attended_bytes(s) : 0.0;
  }

  struct Summary {
    double ms = 0, first_ms = 0, bound_ms = 0, attended = 0, read_amplification = 0, ram_over_selection = 0;
    double kv_read[kNumTiers] = {}, abstract_read = 0;
    double mass_covered = 0, output_error = 0, top10_chunk_mass = 0;
  };
  // Medians over the steps after the first.
  Summary summarize(const PolicyRun& r) const {
    Summary s;
    s.first_ms = r.steps.front().ms;
    std::vector<double> ms, bound, att, amp, ram, tiers[kNumTiers], abs, mass, err, top10;
    for (size_t i = 1; i < r.steps.size(); ++i) {
      const Step& st = r.steps[i];
      ms.push_back(st.ms);
      bound.push_back(bound_ms(st));
      att.push_back(st.n_visible > 0 ? static_cast<double>(st.n_attended) / static_cast<double>(st.n_visible) : 0.0);
      amp.push_back(read_amplification(st));
      ram.push_back(ram_over_selection(st));
      for (int t = 0; t < kNumTiers; ++t) tiers[t].push_back(static_cast<double>(st.kv_bytes_read[t]));
      abs.push_back(static_cast<double>(st.abstract_bytes_read));
      mass.push_back(st.mass_covered);
      err.push_back(st.output_error);
      top10.push_back(st.top10_chunk_mass);
    }
    s.ms = median(ms);
    s.bound_ms = median(bound);
    s.attended = median(att);
    s.read_amplification = median(amp);
    s.ram_over_selection = median(ram);
    for (int t = 0; t < kNumTiers; ++t) s.kv_read[t] = median(tiers[t]);
    s.abstract_read = median(abs);
    s.mass_covered = median(mass);
    s.output_error = median(err);
    std::erase_if(top10, [](double x) { return std::isnan(x); });  // full's
    s.top10_chunk_mass = top10.empty() ? std::nan("") : median(top10);
    return s;
  }

  static double policy_share(const PolicyRun& r) {
    return r.kv_bytes > 0 ? static_cast<double>(r.policy_peak_bytes) / static_cast<double>(r.kv_bytes) : 0.0;
  }
  static double disk_abstract_share(const PolicyRun& r) {
    return r.kv_bytes > 0 ? static_cast<double>(r.disk_abstract_bytes) / static_cast<double>(r.kv_bytes) : 0.0;
  }

  const PolicyRun* full_run(int64_t n_ctx) const {
    for (const PolicyRun& r : runs_) {
      if (r.n_ctx == n_ctx && sparse::is_dense_policy(r.policy)) return &r;
    }
    return nullptr;
  }

  static std::string mib(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.2f", bytes / (1024.0 * 1024.0));
    return buf;
  }

  static std::string percent_or_dash(double x) {
    if (std::isnan(x)) return "-";
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * x);
    return buf;
  }

  static std::string int_list(const std::vector<int>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(v[i]);
    return out;
  }

  std::string workload_text() const {
    if (workload_ == "static") return "static (heavy hitters at the same positions in every layer and head)";
    return "moving (heavy hitters per layer and KV head; each query leans on " + std::to_string(kMovingTargets) +
           " far keys per KV head, drawn anew every " + std::to_string(kMovingPeriod) + " steps, their logits +" +
           std::to_string(static_cast<int>(kMovingLean)) + " nats)";
  }

  std::string fidelity_text() const {
    if (fidelity_layers_ == 0) return "not measured (--fidelity-layers 0)";
    return "layers " + int_list(fidelity_layers(n_layer_)) + ", KV heads " +
           int_list(fidelity_kv_heads(n_kv_heads_)) +
           " and their query heads: full attention for each step's queries, computed between steps";
  }

  std::string markdown() const {
    std::string out;
    char buf[512];
    const GatherBenchRow& d = disk();
    std::snprintf(buf, sizeof(buf),
                  "machine: DRAM read %.1f GB/s (the faster of %s, before and after the runs); disk raw read %.1f MB/s "
                  "(of %s; %d x %d KV, chunks of %d, %.0f%% read); weights %s MiB a token\n",
                  dram_bytes_per_s() * 1e-9,
                  probe_list(dram_probes_, [](const MemoryBandwidth& m) { return m.gb_per_s(); }).c_str(),
                  d.raw_mb_per_s, probe_list(disk_probes_, [](const GatherBenchRow& g) { return g.raw_mb_per_s; }).c_str(),
                  d.n_kv_heads, d.head_dim, d.chunk_tokens, 100.0 * probe_fraction(),
                  mib(static_cast<double>(cost_.weight_bytes_per_token)).c_str());
    out += buf;
    const std::string io = runs_.empty() ? d.io_mode : runs_.front().io_mode;
    out += "disk I/O: " + io + "\n";
    if (io.find("buffered") != std::string::npos) {
      out += "warning: O_DIRECT fell back to buffered reads: disk figures may come from the page cache\n";
    }
    if (interleave_ && policies_.size() > 1) {
      out += "policies interleaved (--interleave): a decode step of each in turn, every policy's stores held at once\n";
    }
    if (batch_ > 1) {
      out += "batch: " + std::to_string(batch_) +
             " sequences a step, each its own store and selector: ms/tok is a batch step, tok/s the batch's, "
             "MiB read all the sequences'\n";
    }
    out += std::string("KV: ") +
           (synthetic_kv_ ? "synthetic (--synthetic-kv, seed " + std::to_string(seed_) + "), ending in a prefilled prompt of " +
                                std::to_string(kPromptEndTokens) + " tokens (the first step follows a prompt's end)"
                          : "prefill of " + prompt_file_) +
           "\n";
    if (synthetic_kv_) out += "workload: " + workload_text() + "\n";
    out += "fidelity: " + fidelity_text() + "\n\n";
    out += "| ctx | policy | chunk | on disk | ms/tok | first ms | tok/s | vs full | attended | mass | out err | top 10% "
           "| read x | RAM / sel "
           "| device MiB | host MiB | disk MiB | abstract MiB | bound ms | of bound | policy MiB | of KV | .lka of KV |\n";
    out += "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const PolicyRun& r : runs_) {
      const Summary s = summarize(r);
      const PolicyRun* full = full_run(r.n_ctx);
      std::string vs = "-";
      if (full != nullptr) {
        std::snprintf(buf, sizeof(buf), "%.2fx", summarize(*full).ms / s.ms);
        vs = buf;
      }
      std::snprintf(buf, sizeof(buf),
                    "| %lld | %s | %d | %.1f%% | %.1f | %.1f | %.2f | %s | %.1f%% | %.3f | %.3f | %s | %.2f | %.2f | %s "
                    "| %s | %s | %s | %.1f | %.2fx | %s | %.2f%% | %.2f%% |\n",
                    static_cast<long long>(r.n_ctx), r.policy.c_str(), r.chunk_tokens, 100.0 * r.disk_share, s.ms,
                    s.first_ms, 1e3 * batch_ / s.ms, vs.c_str(), 100.0 * s.attended, s.mass_covered, s.output_error,
                    percent_or_dash(s.top10_chunk_mass).c_str(), s.read_amplification,
                    s.ram_over_selection, mib(s.kv_read[0]).c_str(),
                    mib(s.kv_read[1]).c_str(), mib(s.kv_read[2]).c_str(), mib(s.abstract_read).c_str(), s.bound_ms,
                    s.ms / s.bound_ms, mib(static_cast<double>(r.policy_peak_bytes)).c_str(), 100.0 * policy_share(r),
                    100.0 * disk_abstract_share(r));
      out += buf;
    }
    out += "\nms/tok, tok/s, attended, MiB read and bound: medians over the " + std::to_string(n_gen_ - 1) +
           " steps after the first (first ms apart). vs full: full's ms/tok over this one's. on disk: the share of the "
           "KV's chunks on disk after the fill. mass: the share of full attention's softmax mass on the positions "
           "attended; out err: the attention output's relative L2 error against full attention's (both from the "
           "probe's f16 keys and values; full: 1 and 0 by construction); top 10%: the full mass in the top tenth of "
           "64-token chunks, under the policy's own queries (how skewed the steps' attention is). read x: the KV read from every tier over the KV of the positions "
           "attended. RAM / sel: the device and host tiers' budgets over the KV a step attends (below 1 they cannot "
           "hold a selection). bound: the larger of (weights + KV read from device and host) / DRAM "
           "bandwidth and (disk KV + abstracts) / disk raw throughput, each the faster of its two probes; of bound: "
           "ms/tok over it. "
           "policy MiB: the most the policy held about the KV at once (trees, scores, partial keys, the copies a step "
           "reads), all sequences; of KV: over their KV.";
    out += " .lka of KV: the disk tier's abstract records (on disk, not in RAM) over the KV.\n";
    out += budget_rule_text(attention_options_, kv_options_, n_layer_) + "\n";
    out += std::string("\nwhere a step's time went (means over the steps after the first, and the first step "
                       "apart, ms; the pipeline ") +
           pipeline_mode(kv_options_) + "):\n\n";
    out += "| ctx | policy | steps | step | weights | selection | I/O wait | decode | attention | other | read ahead |\n";
    out += "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    for (const PolicyRun& r : runs_) {
      for (const auto& [which, b] : {std::pair<const char*, const StepBreakdown&>{"later", r.breakdown},
                                     std::pair<const char*, const StepBreakdown&>{"first", r.first_breakdown}}) {
        std::snprintf(buf, sizeof(buf), "| %lld | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
                      static_cast<long long>(r.n_ctx), r.policy.c_str(), which, b.step_ms, b.weights_ms,
                      b.selection_ms, b.io_wait_ms, b.decode_ms, b.attention_ms, b.other_ms, b.read_ahead_ms);
        out += buf;
      }
    }
    for (const PolicyRun& r : runs_) {
      if (!r.transfer.mode.empty()) out += std::to_string(r.n_ctx) + " " + r.policy + ", the whole run: " + r.transfer.to_text() + "\n";
    }
    return out;
  }

  static Json nan_null(double x) { return std::isnan(x) ? Json(nullptr) : Json(x); }

  Json to_json() const {
    Json doc;
    doc["model"] = {{"path", model_path_},
                    {"type", cost_.type_name},
                    {"weight_bytes_per_token", cost_.weight_bytes_per_token},
                    {"kv_bytes_per_position", cost_.kv_bytes_per_position},
                    {"n_layer", n_layer_}};
    doc["kv_source"] = synthetic_kv_ ? Json("synthetic") : Json(prompt_file_);
    doc["seed"] = seed_;
    doc["budget"] = attention_options_.budget;
    doc["n_gen"] = n_gen_;
    doc["kv_device_mb"] = kv_options_.device_mb;
    doc["kv_host_mb"] = kv_options_.host_mb;
    doc["pipeline"] = decode_pipeline(store_);
    doc["pipeline_mode"] = pipeline_mode(kv_options_);
    doc["batch"] = batch_;
    doc["interleave"] = interleave_;
    doc["workload"] = synthetic_kv_ ? Json(workload_) : Json(nullptr);
    doc["fidelity"] = fidelity_layers_ > 0 ? Json{{"layers", fidelity_layers(n_layer_)},
                                                  {"kv_heads", fidelity_kv_heads(n_kv_heads_)},
                                                  {"profile_chunk_tokens", sparse::FidelityProbe::kProfileChunkTokens}}
                                           : Json(nullptr);
    const GatherBenchRow& d = disk();
    Json dram_probes = Json::array(), disk_probes = Json::array();
    for (const MemoryBandwidth& m : dram_probes_) dram_probes.push_back(m.gb_per_s());
    for (const GatherBenchRow& g : disk_probes_) disk_probes.push_back(g.raw_mb_per_s);
    doc["machine"] = {{"dram_read_gb_per_s", dram_bytes_per_s() * 1e-9},
                      {"dram_read_gb_per_s_probes", dram_probes},
                      {"dram_n_threads", dram_probes_.front().n_threads},
                      {"disk_raw_mb_per_s", d.raw_mb_per_s},
                      {"disk_raw_mb_per_s_probes", disk_probes},
                      {"disk_gather_mb_per_s", d.gather_mb_per_s},
                      {"disk_probe", {{"n_kv_heads", d.n_kv_heads}, {"head_dim", d.head_dim},
                                      {"chunk_tokens", d.chunk_tokens}, {"file_bytes", disk_probe_mb_ << 20}}},
                      {"disk_io_mode", d.io_mode}};
    Json results = Json::array();
    for (const PolicyRun& r : runs_) {
      const Summary s = summarize(r);
      const PolicyRun* full = full_run(r.n_ctx);
      Json steps = Json::array();
      for (const Step& st : r.steps) {
        steps.push_back({{"start_s", st.start_s},
                         {"ms", st.ms},
                         {"bound_ms", bound_ms(st)},
                         {"bound_dram_ms", dram_ms(st)},
                         {"bound_disk_ms", disk_ms(st)},
                         {"kv_bytes_read", {{"device", st.kv_bytes_read[0]}, {"host", st.kv_bytes_read[1]},
                                            {"disk", st.kv_bytes_read[2]}}},
                         {"abstract_bytes_read", st.abstract_bytes_read},
                         {"n_attended", st.n_attended},
                         {"n_selected", st.n_selected},
                         {"n_visible", st.n_visible},
                         {"mass_covered", st.mass_covered},
                         {"output_error", st.output_error},
                         {"top10_chunk_mass", nan_null(st.top10_chunk_mass)}});
      }
      results.push_back({{"n_ctx", r.n_ctx},
                         {"policy", r.policy},
                         {"chunk_tokens", r.chunk_tokens},
                         {"disk_share", r.disk_share},
                         {"fill_s", r.fill_s},
                         {"prompt_end_s", r.prompt_end_s},
                         {"io_mode", r.io_mode},
                         {"ms_per_token", s.ms},
                         {"first_step_ms", s.first_ms},
                         {"tokens_per_s", 1e3 * batch_ / s.ms},
                         {"speedup_vs_full", full != nullptr ? Json(summarize(*full).ms / s.ms) : Json(nullptr)},
                         {"attended_fraction", s.attended},
                         {"mass_covered", s.mass_covered},
                         {"output_error", s.output_error},
                         {"top10_chunk_mass", nan_null(s.top10_chunk_mass)},
                         {"read_amplification", s.read_amplification},
                         {"ram_tiers_over_selection", s.ram_over_selection},
                         {"kv_bytes_read", {{"device", s.kv_read[0]}, {"host", s.kv_read[1]}, {"disk", s.kv_read[2]}}},
                         {"abstract_bytes_read", s.abstract_read},
                         {"bound_ms", s.bound_ms},
                         {"of_bound", s.ms / s.bound_ms},
                         {"policy_peak_bytes", r.policy_peak_bytes},
                         {"kv_bytes", r.kv_bytes},
                         {"disk_abstract_bytes", r.disk_abstract_bytes},
                         {"breakdown", Json::parse(r.breakdown.to_json())},
                         {"first_step_breakdown", Json::parse(r.first_breakdown.to_json())},
                         {"transfer", r.transfer.mode.empty() ? Json(nullptr) : Json::parse(r.transfer.to_json())},
                         {"steps", std::move(steps)}});
    }
    doc["results"] = std::move(results);
    return doc;
  }

  std::string model_path_;
  std::vector<int64_t> ctxs_;
  std::vector<std::string> policies_ = {"full", "streaming", "h2o", "h2o-chunked", "quest", "infinigen", "leoam"};
  int n_gen_ = 8;
  int n_threads_ = 0;
  uint64_t seed_ = 1;
  int batch_ = 1;
  bool synthetic_kv_ = false;
  std::string workload_ = "static";
  int fidelity_layers_ = 4;
  bool interleave_ = false;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::string prompt_file_;
  uint64_t disk_probe_mb_ = 256;
  std::string json_path_;
  std::string markdown_path_;
  KvCliOptions kv_options_;
  AttentionCliOptions attention_options_;
  std::vector<int32_t> prompt_tokens_;
  ModelCost cost_;
  int n_layer_ = 0;
  KvStoreOptions store_;          // the flags' store and attention, for the model
  AttentionOptions attention_;
  int n_kv_heads_ = 0;
  std::vector<MemoryBandwidth> dram_probes_;  // before and after the runs
  std::vector<GatherBenchRow> disk_probes_;    // the same
  std::vector<PolicyRun> runs_;
  StatusLine status_{::isatty(STDERR_FILENO) != 0, "leoam: bench kv"};
};

}  // namespace

std::unique_ptr<Command> make_bench_kv_command() { return std::make_unique<BenchKvCommand>(); }

}  // namespace leoam::cli
