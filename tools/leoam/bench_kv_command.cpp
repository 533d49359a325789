// `leoam bench kv`: decode speed of each attention policy with the KV mostly on disk, each figure
// beside its bound, measured in the same run. Per --ctx and policy: a fresh tiered store, filled
// from synthetic KV (model/synthetic_kv.h, through the store's own append path, its last positions
// a prefilled prompt of random ids) or by prefilling -f's text, then -n tokens decoded by the real
// engine, as `leoam run`; every policy starts from the same state. The policies run one after the
// other, or with --interleave a step of each in turn, so that on a shared machine, whose bandwidth
// moves within minutes, steps side by side meet the same stretch. Bound of a step = the larger of
// its DRAM time and its disk time (its disk bytes / the disk's raw read rate), the rates probed
// before and after the runs, the faster of each. Output (bench_kv_report.h): markdown on stdout (and
// --markdown FILE), JSON in --json FILE. The fill, the bound and full's read-ahead: docs/kv-store.md#bench-kv
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_options.h"
#include "bench_kv_report.h"
#include "benchmark.h"
#include "cli_common.h"
#include "kernels/cpu/memory_bandwidth.h"
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
constexpr uint64_t kDiskMarginBytes = uint64_t{256} << 20;

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
    cmd->add_option("-m,--model", o_.model_path, "model file (GGUF); its KV shape is the shape")
        ->required()
        ->check(readable_file())
        ->type_name("FILE");
    cmd->add_option("--ctx", o_.ctxs, "context lengths: positions in the store before decoding")
        ->required()
        ->delimiter(',')
        ->check(in_range<int64_t>(1, int64_t{1} << 30))
        ->type_name("N[,N...]");
    cmd->add_option("--policies", o_.policies, "attention policies, comma-separated")
        ->delimiter(',')
        ->capture_default_str()
        ->check(CLI::IsMember(policy_names()))
        ->type_name("P[,P...]");
    cmd->add_option("--batch", o_.batch,
                    "sequences decoded together (ForwardContext::decode_batch), each its own store of --ctx "
                    "positions (synthetic KV of seed --seed + its index) and its own selector; a row's ms/tok is "
                    "the batch step's, its tok/s the batch's")
        ->capture_default_str()
        ->check(in_range(1, 64));
    cmd->add_flag("--interleave", o_.interleave,
                  "decode the policies' steps in turn (a step of each, then the next) rather than one policy's "
                  "run after the other, so that a slow stretch of the machine slows them alike; every policy's "
                  "stores are held at once (RAM and --kv-dir space for all of them)");
    cmd->add_option("-n,--n-gen", o_.n_gen, "tokens decoded per run (the first is reported apart)")
        ->capture_default_str()
        ->check(in_range(2, 4096));
    add_threads_option(*cmd, o_.n_threads);
    cmd->add_option("--seed", o_.seed, "seed of the synthetic KV and the first token")->capture_default_str();
    CLI::Option* synth = cmd->add_flag("--synthetic-kv", o_.synthetic_kv,
                                       "fill the store with synthetic skewed KV (model/synthetic_kv.h) instead of a "
                                       "prefill, but for a prompt of " + std::to_string(kPromptEndTokens) +
                                           " random ids at its end, prefilled as a prompt's end is (dense, then the "
                                           "forecast of the first step's picks); the tokens are random ids");
    CLI::Option* file = cmd->add_option("-f,--file", o_.prompt_file, "prefill this text, cut to --ctx tokens")
                            ->check(readable_file())
                            ->type_name("FILE");
    synth->excludes(file);
    file->excludes(synth);
    CLI::Option* workload =
        cmd->add_option("--workload", o_.workload,
                        "with --synthetic-kv: static (heavy hitters at the same positions in every layer and head, "
                        "the queries the model's own) or moving (heavy hitters per layer and KV head, and each "
                        "query leans on " + std::to_string(kMovingTargets) + " far keys per KV head drawn anew every " +
                            std::to_string(kMovingPeriod) + " steps, each such key's logit lifted by " +
                            std::to_string(static_cast<int>(kMovingLean)) + " nats)")
            ->capture_default_str()
            ->check(CLI::IsMember({"static", "moving"}));
    cmd->parse_complete_callback([synth, file, workload, this] {
      if (synth->count() == 0 && file->count() == 0) throw CLI::RequiredError("--synthetic-kv or -f FILE");
      if (workload->count() > 0 && o_.workload == "moving" && synth->count() == 0) {
        throw CLI::ValidationError("--workload moving", "needs --synthetic-kv");
      }
    });
    cmd->add_option("--fidelity-layers", o_.fidelity_layers,
                    "layers sampled for fidelity (spread evenly; KV heads 0 and n_kv/2, every query head of their "
                    "groups): each step's full attention for the same queries, computed between steps, against "
                    "each policy's picks; 0: none")
        ->capture_default_str()
        ->check(in_range(0, 1024));
    cmd->add_option("--disk-probe-mb", o_.disk_probe_mb,
                    "MiB written to --kv-dir to measure the disk's raw read throughput for the bound")
        ->capture_default_str()
        ->check(in_range<uint64_t>(1, 1 << 20));
    cmd->add_option("--json", o_.json_path, "write every figure as JSON to FILE")
        ->check(writable_file())
        ->type_name("FILE");
    cmd->add_option("--markdown", o_.markdown_path, "write the table to FILE too")
        ->check(writable_file())
        ->type_name("FILE");
    cmd->add_option("--trace", trace_path_,
                    "write every run's timeline to FILE as Chrome trace-event JSON (open it in ui.perfetto.dev): "
                    "a process per policy and --ctx, on one clock; per layer the projections, selection, "
                    "attention and FFN on the compute thread, and the disk reads")
        ->check(writable_file())
        ->type_name("FILE");
    add_kv_options(*cmd, o_.kv);
    cmd->get_option("--kv-dir")->required();
    cmd->remove_option(cmd->get_option("--kv-stats"));
    cmd->remove_option(cmd->get_option("--kv-stats-json"));
    add_attention_options(*cmd, o_.attention);
    cmd->remove_option(cmd->get_option("--policy"));
    return cmd;
  }

  int execute() override {
    Result<std::unique_ptr<Model>> loaded = Model::load(o_.model_path);
    if (!loaded.is_ok()) return fail(named(loaded.status(), o_.model_path));
    const Model& model = **loaded;
    report_.cost = model_cost(model, KvDtype::kF16);
    report_.n_layer = model.hparams().n_layer;
    report_.n_kv_heads = model.hparams().n_head_kv;
    Result<KvStoreOptions> store = store_options(o_.kv);
    if (!store.is_ok()) return fail(store.status());
    store_ = *store;
    report_.pipeline = decode_pipeline(store_);
    Result<AttentionOptions> attention = attention_options(o_.attention, report_.n_layer);
    if (!attention.is_ok()) return fail(attention.status());
    attention_ = *attention;
    if (!o_.prompt_file.empty()) {
      if (Status st = tokenize_prompt(model); !st.is_ok()) return fail(st);
    }
    if (Status st = measure_machine(model, "before the runs"); !st.is_ok()) return fail(st);
    for (int64_t n_ctx : o_.ctxs) {
      const Status st = run_policies(model, n_ctx);
      status_.clear();
      if (!st.is_ok()) return fail(st);
    }
    // A shared machine's bandwidth moves within minutes: measured again, the faster of the two
    // sets the bounds (the tighter bound, so a step is never compared with a slow moment's).
    if (Status st = measure_machine(model, "after the runs"); !st.is_ok()) return fail(st);
    status_.clear();
    const std::string table = bench_kv_markdown(report_);
    std::printf("%s", table.c_str());
    std::fflush(stdout);
    if (!o_.markdown_path.empty()) {
      std::ofstream out(o_.markdown_path);
      out << table;
      if (!out) return fail(io_error("cannot write --markdown file '" + o_.markdown_path + "'"));
    }
    if (!o_.json_path.empty()) {
      std::ofstream out(o_.json_path);
      out << bench_kv_json(report_).dump(2) << "\n";
      if (!out) return fail(io_error("cannot write --json file '" + o_.json_path + "'"));
    }
    if (!trace_path_.empty()) {
      std::vector<NamedTrace> traces;
      for (const auto& [what, trace] : traces_) traces.push_back({what, trace.get()});
      if (Status st = write_traces(trace_path_, traces); !st.is_ok()) return fail(st);
    }
    return kExitOk;
  }

 private:
  Status tokenize_prompt(const Model& model) {
    LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::from_gguf(model.gguf()));
    std::ifstream in(o_.prompt_file, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    prompt_tokens_ = tokenizer->tokenize(text, /*add_bos=*/true, /*parse_special=*/false);
    const int64_t longest = *std::max_element(o_.ctxs.begin(), o_.ctxs.end());
    if (static_cast<int64_t>(prompt_tokens_.size()) < longest) {
      return invalid_argument("--ctx " + std::to_string(longest) + ": -f " + o_.prompt_file + " has only " +
                              std::to_string(prompt_tokens_.size()) + " tokens; give a longer text or a smaller --ctx");
    }
    return Status::ok();
  }

  // Measures the DRAM bandwidth and the disk's raw read throughput, `when` (for the status line),
  // into report_.dram_probes and report_.disk_probes.
  Status measure_machine(const Model& model, const std::string& when) {
    status_.show("measuring DRAM bandwidth " + when + " ...");
    MemoryBandwidthOptions mb;
    mb.n_threads = o_.n_threads;
    LEOAM_ASSIGN_OR_RETURN(MemoryBandwidth dram, measure_memory_bandwidth(mb));
    report_.dram_probes.push_back(dram);
    status_.show("measuring the disk's raw read throughput in " + o_.kv.dir + " " + when + " ...");
    const ModelHparams& hp = model.hparams();
    GatherBenchOptions g;
    g.dir = o_.kv.dir;
    g.shapes = {{hp.n_head_kv, hp.head_dim}};
    LEOAM_ASSIGN_OR_RETURN(const int chunk_tokens, chunk_tokens_for(o_.policies.front(), o_.ctxs.front()));
    g.chunk_tokens = {chunk_tokens};
    g.file_bytes = o_.disk_probe_mb << 20;
    g.queue_depth = o_.kv.queue_depth;
    g.n_reps = 3;
    g.seed = static_cast<uint32_t>(o_.seed);
    // A sparse selection's scattered chunks, and every chunk (full's reads, in long runs): the
    // faster sets the bound, so that no policy's reads can beat it.
    std::optional<GatherBenchRow> best;
    for (const double fraction : {probe_fraction(o_.attention), 1.0}) {
      g.select_fraction = fraction;
      Result<std::vector<GatherBenchRow>> rows = run_gather_benchmark(g);
      if (!rows.is_ok()) return rows.status().with_context("--kv-dir " + o_.kv.dir + ": measuring the disk");
      if (!best || rows->front().raw_mb_per_s > best->raw_mb_per_s) best = rows->front();
    }
    report_.disk_probes.push_back(*best);
    return Status::ok();
  }

  Result<int> chunk_tokens_for(const std::string& policy, int64_t n_ctx) const {
    if (store_.chunk_tokens > 0) return store_.chunk_tokens;
    AttentionOptions a = attention_;
    a.policy = policy;
    return default_chunk_tokens(a, store_, n_ctx);
  }

  // One policy's run in progress: its stores (the first owned by the context), selectors and
  // trace, and the tokens the next step decodes.
  struct PolicyBench {
    BenchKvRun run;
    std::string what;  // "leoam at 32768 tokens"
    std::unique_ptr<Trace> trace = std::make_unique<Trace>();  // kept past the run for --trace
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

  // The policies of one --ctx: one after the other, or with --interleave a step of each in turn.
  Status run_policies(const Model& model, int64_t n_ctx) {
    std::vector<std::vector<std::string>> groups;
    if (o_.interleave) {
      groups.push_back(o_.policies);
    } else {
      for (const std::string& p : o_.policies) groups.push_back({p});
    }
    for (const std::vector<std::string>& group : groups) {
      std::vector<std::unique_ptr<PolicyBench>> benches;
      for (const std::string& policy : group) {
        LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<PolicyBench> bench, start_policy(model, policy, n_ctx));
        benches.push_back(std::move(bench));
      }
      // BenchKvStep i starts at policy i mod k: each policy's steps follow each other policy's alike, so
      // that what one leaves behind (full's gigabytes of disk reads slow the memory for a while)
      // falls on all of them.
      const size_t k = benches.size();
      for (int i = 0; i < o_.n_gen; ++i) {
        for (size_t j = 0; j < k; ++j) LEOAM_RETURN_IF_ERROR(step_policy(model, *benches[(i + j) % k], i));
      }
      for (std::unique_ptr<PolicyBench>& bench : benches) report_.runs.push_back(finish_policy(*bench));
    }
    return Status::ok();
  }

  // A policy's stores and selectors, filled to n_ctx positions.
  Result<std::unique_ptr<PolicyBench>> start_policy(const Model& model, const std::string& policy, int64_t n_ctx) {
    auto bench = std::make_unique<PolicyBench>();
    BenchKvRun& run = bench->run;
    run.policy = policy;
    run.n_ctx = n_ctx;
    LEOAM_ASSIGN_OR_RETURN(run.chunk_tokens, chunk_tokens_for(policy, n_ctx));
    AttentionOptions attention = attention_;
    attention.policy = policy;
    KvStoreOptions kv_options = store_;
    kv_options.chunk_tokens = run.chunk_tokens;
    const int64_t n_store = n_ctx + o_.n_gen;
    LEOAM_ASSIGN_OR_RETURN(KvStoreNeeds needs, kv_store_needs(attention, kv_options, model, n_store));
    needs.chunks = true;  // every policy through the tiered store: their reads compare
    needs.batched = o_.batch > 1;
    if (sparse::is_dense_policy(policy) && decode_pipeline(kv_options)) {
      // FlexGen's schedule at its strongest: staging for two layers' whole past, so that all of the
      // next layer's reads overlap this layer's compute (the other policies' selections fit theirs).
      const double layer_mib = static_cast<double>(n_store) * static_cast<double>(report_.cost.kv_bytes_per_position) /
                               model.hparams().n_layer / (1024.0 * 1024.0);
      kv_options.read_ahead_bytes = std::max(kv_options.read_ahead_bytes, mib_to_bytes(2 * layer_mib));
    }
    bench->trace->name_thread("compute");
    // A store and a selector per sequence; the context owns the first store.
    for (int b = 0; b < o_.batch; ++b) {
      LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<TieredKvCache> kv,
                             make_tiered_kv_store(kv_options, model, n_store, needs, bench->trace.get()));
      bench->stores.push_back(kv.get());
      if (b == 0) LEOAM_RETURN_IF_ERROR(check_disk_space(*bench->stores[0], n_ctx));
      LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<sparse::SparseAttention> selector,
                             make_selector(attention, kv_options, model, *kv));
      if (selector && o_.fidelity_layers > 0) {
        const ModelHparams& hp = model.hparams();
        sparse::FidelityProbeOptions fo{.n_head = hp.n_head,
                                        .n_head_kv = hp.n_head_kv,
                                        .head_dim = hp.head_dim,
                                        .scale = hp.attn_scale,
                                        .softcap = hp.attn_softcap,
                                        .layers = fidelity_layers(o_.fidelity_layers, hp.n_layer),
                                        .kv_heads = fidelity_kv_heads(hp.n_head_kv)};
        LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<sparse::FidelityProbe> probe,
                               sparse::FidelityProbe::create(selector.get(), std::move(fo), hp.n_layer));
        bench->probes.resize(static_cast<size_t>(o_.batch));
        bench->probes[b] = std::move(probe);
      }
      bench->selectors.push_back(std::move(selector));
      bench->owned.push_back(std::move(kv));
      if (o_.synthetic_kv) {
        LEOAM_ASSIGN_OR_RETURN(SyntheticKv gen, make_synthetic_kv(model, n_ctx, o_.seed + static_cast<uint64_t>(b)));
        bench->gens.push_back(std::make_unique<SyntheticKv>(std::move(gen)));
      }
      if (o_.workload == "moving") {
        const int64_t n_fill = n_ctx > kPromptEndTokens ? n_ctx - kPromptEndTokens : n_ctx;
        MovingTargetsOptions mo{.n_head = model.hparams().n_head,
                                .scale = model.hparams().attn_scale,
                                .n_targets = kMovingTargets,
                                .period = kMovingPeriod,
                                .lean = kMovingLean,
                                .first = std::min<int64_t>(64, n_fill / 8),
                                .last = n_fill - std::min<int64_t>(512, n_fill / 4),
                                .seed = o_.seed + static_cast<uint64_t>(b)};
        LEOAM_ASSIGN_OR_RETURN(MovingTargets targets, MovingTargets::create(*bench->gens.back(), mo));
        bench->targets.push_back(std::move(targets));
      }
    }
    run.io_mode = bench->stores[0]->disk().io_mode();

    ForwardOptions fwd;
    fwd.n_threads = o_.n_threads;
    fwd.selector = bench->selector(0);
    if (!bench->targets.empty()) {
      fwd.decode_query_hook = [b = bench.get()](const KvCache& kv, int layer, float* q) {
        for (size_t i = 0; i < b->stores.size(); ++i) {
          if (b->stores[i] == &kv) b->targets[i].steer(layer, q);
        }
      };
    }
    apply_store_options(kv_options, fwd);
    fwd.trace = bench->trace.get();
    fwd.n_batch = std::max(fwd.n_batch, o_.batch);
    bench->what = policy + " at " + std::to_string(n_ctx) + " tokens";
    fwd.progress = [this, what = bench->what](int64_t done, int64_t total) {
      status_.show("prefill for " + what + ": " + std::to_string(done) + "/" + std::to_string(total));
    };
    std::mt19937_64 rng(o_.seed);
    const auto n_vocab = static_cast<int32_t>(model.hparams().n_vocab);
    std::vector<int32_t>& tokens = bench->tokens;
    tokens.resize(static_cast<size_t>(o_.batch));
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab));
    const auto t_fill = std::chrono::steady_clock::now();
    std::unique_ptr<KvCache> first = std::move(bench->owned[0]);
    LEOAM_ASSIGN_OR_RETURN(bench->ctx, ForwardContext::create(model, fwd, std::move(first)));
    for (int b = 0; b < o_.batch; ++b) {
      const std::string seq = o_.batch > 1 ? bench->what + ", sequence " + std::to_string(b + 1) : bench->what;
      const DecodeSequence sequence = bench->sequence(b);
      if (o_.synthetic_kv) {  // each sequence its own KV: the seed + its index, and its prompt's end
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
    status_.show("decoding " + bench.what + ": token " + std::to_string(i + 1) + "/" + std::to_string(o_.n_gen));
    const std::vector<TieredKvCache*>& stores = bench.stores;
    const std::vector<std::unique_ptr<sparse::SparseAttention>>& selectors = bench.selectors;
    std::vector<KvStats> before;
    int64_t visible0 = 0, selected0 = 0;
    for (int b = 0; b < o_.batch; ++b) {
      before.push_back(stores[b]->stats());
      if (selectors[b]) {
        visible0 += selectors[b]->total().n_visible;
        selected0 += selectors[b]->total().n_attended;
      }
    }
    const int64_t attended0 = bench.ctx->decode_positions_attended();
    for (MovingTargets& t : bench.targets) t.prepare(i);
    const auto t0 = std::chrono::steady_clock::now();
    BenchKvStep s;
    s.start_s = std::chrono::duration<double>(t0 - started_).count();
    if (o_.batch == 1) {  // the single-sequence path (the pipeline, the prompt's forecast)
      LEOAM_RETURN_IF_ERROR(bench.ctx->eval(std::span<const int32_t>(bench.tokens.data(), 1), false, bench.logits));
    } else {
      bench.batch.clear();
      for (int b = 0; b < o_.batch; ++b) bench.batch.push_back({bench.tokens[b], bench.sequence(b)});
      LEOAM_RETURN_IF_ERROR(bench.ctx->decode_batch(bench.batch, bench.logits));
    }
    s.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (int b = 0; b < o_.batch; ++b) {
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
    for (int b = 0; b < o_.batch; ++b) bench.tokens[b] = sampling::argmax(rows.subspan(b * n_vocab, n_vocab));
    return Status::ok();
  }

  // The step's fidelity from the probes (outside its timing): the means over the sequences.
  static Status measure_fidelity(PolicyBench& bench, BenchKvStep& s) {
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
  BenchKvRun finish_policy(PolicyBench& bench) {
    BenchKvRun& run = bench.run;
    run.breakdown = summarize_decode_steps(*bench.trace);
    run.first_breakdown = summarize_decode_steps(*bench.trace, 0, 1);
    if (!trace_path_.empty()) traces_.emplace_back(bench.what, std::move(bench.trace));
    for (int b = 0; b < o_.batch; ++b) {
      if (bench.selectors[b]) run.policy_peak_bytes += bench.selectors[b]->memory().peak_bytes;
      run.kv_bytes += static_cast<uint64_t>(bench.stores[b]->n_tokens()) * report_.cost.kv_bytes_per_position;
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
    const uint64_t n_chunks = static_cast<uint64_t>((n_ctx + o_.n_gen + kv.chunk_tokens() - 1) / kv.chunk_tokens());
    uint64_t need = 0;  // per sequence, then the batch's
    for (int il = 0; il < kv.shape().n_layer; ++il) {
      const uint64_t n_records = (n_chunks + disk.group_chunks(il) - 1) / disk.group_chunks(il);
      need += n_chunks * (disk.slot_bytes() + disk.compressed_slot_bytes()) + n_records * disk.record_bytes(il);
    }
    need *= static_cast<uint64_t>(o_.batch);
    const uint64_t want = need + need / 20 + kDiskMarginBytes;  // 5% and 256 MiB of margin
    LEOAM_ASSIGN_OR_RETURN(const uint64_t free, free_bytes(o_.kv.dir));
    if (free < want) {
      return invalid_argument("--ctx " + std::to_string(n_ctx) + ": the KV needs " + human_bytes(need) +
                              " on the filesystem of --kv-dir " + o_.kv.dir + " (" + human_bytes(want) +
                              " with the margin), and it has " + human_bytes(free) +
                              " free; give a smaller --ctx or another --kv-dir");
    }
    return Status::ok();
  }

  Result<SyntheticKv> make_synthetic_kv(const Model& model, int64_t n_ctx, uint64_t seed) const {
    const ModelHparams& hp = model.hparams();
    LEOAM_ASSIGN_OR_RETURN(Rope rope, Rope::create(hp.rope, hp.head_dim, model.weights().rope_factors(hp, n_ctx)));
    SyntheticKvOptions o;
    o.n_layer = hp.n_layer;
    o.n_kv_heads = hp.n_head_kv;
    o.head_dim = hp.head_dim;
    o.n_ctx = n_ctx;
    o.seed = seed;
    o.hitters_per_head = o_.workload == "moving";
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

  BenchKvOptions o_;
  BenchKvReport report_{o_};  // fills as the command runs
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::vector<int32_t> prompt_tokens_;
  std::string trace_path_;
  std::vector<std::pair<std::string, std::unique_ptr<Trace>>> traces_;  // each run's, for --trace
  KvStoreOptions store_;          // the flags' store and attention, for the model
  AttentionOptions attention_;
  StatusLine status_{::isatty(STDERR_FILENO) != 0, "leoam: bench kv"};
};

}  // namespace

std::unique_ptr<Command> make_bench_kv_command() { return std::make_unique<BenchKvCommand>(); }

}  // namespace leoam::cli
