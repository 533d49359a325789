#include "model/hparams.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <string>

#include "gguf/gguf_file.h"

namespace leoam {

namespace {

// The architectures by their GGUF names, in the order supported_archs_list() gives them.
struct ArchName {
  const char* name;
  ModelArch arch;
};
constexpr ArchName kArchNames[] = {{"llama", ModelArch::kLlama},   {"qwen2", ModelArch::kQwen2},
                                   {"qwen3", ModelArch::kQwen3},   {"phi3", ModelArch::kPhi3},
                                   {"gemma2", ModelArch::kGemma2}, {"gemma3", ModelArch::kGemma3},
                                   {"opt", ModelArch::kOpt}};

// Reads "{arch}.{name}" keys of one file, keeping the first error's context in one place.
class KeyReader {
 public:
  KeyReader(const GgufFile& gguf, std::string arch) : gguf_(gguf), arch_(std::move(arch)) {}

  std::string key(const std::string& name) const { return arch_ + "." + name; }

  Result<int64_t> require_int(const std::string& name) const { return gguf_.require_int(key(name)); }
  Result<std::optional<int64_t>> get_int(const std::string& name) const { return gguf_.get_int(key(name)); }
  Result<double> require_float(const std::string& name) const { return gguf_.require_float(key(name)); }
  Result<std::optional<double>> get_float(const std::string& name) const { return gguf_.get_float(key(name)); }
  Result<std::optional<std::string>> get_string(const std::string& name) const {
    return gguf_.get_string(key(name));
  }

  Status error(const std::string& message) const { return invalid_argument(gguf_.path() + ": " + message); }
  const std::string& path() const { return gguf_.path(); }

 private:
  const GgufFile& gguf_;
  std::string arch_;
};

// A positive count that fits an int, from a required key.
Result<int64_t> require_positive(const KeyReader& r, const std::string& name, int64_t max_value) {
  LEOAM_ASSIGN_OR_RETURN(int64_t v, r.require_int(name));
  if (v <= 0 || v > max_value) {
    return r.error("key '" + r.key(name) + "' is " + std::to_string(v) + "; it must be in [1, " +
                   std::to_string(max_value) + "]");
  }
  return v;
}

Result<int64_t> get_positive(const KeyReader& r, const std::string& name, int64_t fallback, int64_t max_value) {
  LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> v, r.get_int(name));
  if (!v) return fallback;
  if (*v <= 0 || *v > max_value) {
    return r.error("key '" + r.key(name) + "' is " + std::to_string(*v) + "; it must be in [1, " +
                   std::to_string(max_value) + "]");
  }
  return *v;
}

Result<float> get_float_or(const KeyReader& r, const std::string& name, float fallback) {
  LEOAM_ASSIGN_OR_RETURN(std::optional<double> v, r.get_float(name));
  if (!v) return fallback;
  if (!std::isfinite(*v)) return r.error("key '" + r.key(name) + "' is not a finite number");
  return static_cast<float>(*v);
}

// 1 << 24: far beyond any real model's dimension or head count, small enough for int math.
constexpr int64_t kMaxDim = int64_t{1} << 24;
// 1 << 30 positions: a bound that keeps position arithmetic far from overflow.
constexpr int64_t kMaxCtx = int64_t{1} << 30;

Status read_rope(const KeyReader& r, ModelHparams& hp) {
  RopeParams& rope = hp.rope;
  rope.pairing = hp.arch == ModelArch::kLlama ? RopePairing::kNormal : RopePairing::kNeox;
  LEOAM_ASSIGN_OR_RETURN(int64_t n_rot, get_positive(r, "rope.dimension_count", hp.head_dim, kMaxDim));
  if (n_rot > hp.head_dim || n_rot % 2 != 0) {
    return r.error("key '" + r.key("rope.dimension_count") + "' is " + std::to_string(n_rot) +
                   "; it must be even and at most the head size " + std::to_string(hp.head_dim));
  }
  rope.n_rot = static_cast<int>(n_rot);
  LEOAM_ASSIGN_OR_RETURN(rope.freq_base, get_float_or(r, "rope.freq_base", 10000.0f));
  if (!(rope.freq_base > 1.0f)) {
    return r.error("key '" + r.key("rope.freq_base") + "' is " + std::to_string(rope.freq_base) +
                   "; it must be greater than 1");
  }

  // Scaling: rope.scaling.type (none | linear | yarn) with rope.scaling.factor; older files say
  // rope.scale_linear instead. A file with a factor but no type is linear (llama.cpp's default).
  LEOAM_ASSIGN_OR_RETURN(std::optional<std::string> type, r.get_string("rope.scaling.type"));
  LEOAM_ASSIGN_OR_RETURN(std::optional<double> factor, r.get_float("rope.scaling.factor"));
  if (!factor) {
    LEOAM_ASSIGN_OR_RETURN(factor, r.get_float("rope.scale_linear"));
  }
  if (!type) {
    type = (factor && *factor != 0.0 && *factor != 1.0) ? "linear" : "none";
  }
  if (*type == "none") {
    rope.scaling = RopeScalingType::kNone;
  } else if (*type == "linear") {
    rope.scaling = RopeScalingType::kLinear;
  } else if (*type == "yarn") {
    rope.scaling = RopeScalingType::kYarn;
  } else {
    return unsupported(r.path() + ": key '" + r.key("rope.scaling.type") + "' is '" + *type +
                       "', not supported; supported: none linear yarn");
  }
  rope.freq_scale = 1.0f;
  if (rope.scaling != RopeScalingType::kNone && factor && *factor != 0.0) {
    if (!(std::isfinite(*factor) && *factor > 0.0)) {
      return r.error("key '" + r.key("rope.scaling.factor") + "' is " + std::to_string(*factor) +
                     "; it must be positive");
    }
    rope.freq_scale = static_cast<float>(1.0 / *factor);
  }
  LEOAM_ASSIGN_OR_RETURN(rope.n_ctx_orig,
                         get_positive(r, "rope.scaling.original_context_length", hp.n_ctx_train, kMaxCtx));
  LEOAM_ASSIGN_OR_RETURN(rope.yarn_ext_factor, get_float_or(r, "rope.scaling.yarn_ext_factor",
                                                            rope.scaling == RopeScalingType::kYarn ? 1.0f : 0.0f));
  if (rope.scaling != RopeScalingType::kYarn) rope.yarn_ext_factor = 0.0f;
  LEOAM_ASSIGN_OR_RETURN(std::optional<double> attn_factor, r.get_float("rope.scaling.yarn_attn_factor"));
  if (!attn_factor) {  // llama.cpp's name for the same value
    LEOAM_ASSIGN_OR_RETURN(attn_factor, r.get_float("rope.scaling.attn_factor"));
  }
  rope.yarn_attn_factor = attn_factor ? static_cast<float>(*attn_factor) : 1.0f;
  LEOAM_ASSIGN_OR_RETURN(rope.yarn_beta_fast, get_float_or(r, "rope.scaling.yarn_beta_fast", 32.0f));
  LEOAM_ASSIGN_OR_RETURN(rope.yarn_beta_slow, get_float_or(r, "rope.scaling.yarn_beta_slow", 1.0f));
  if (rope.scaling == RopeScalingType::kYarn && !(rope.yarn_beta_fast > 0.0f && rope.yarn_beta_slow > 0.0f)) {
    return r.error("YaRN beta_fast and beta_slow must be positive");
  }
  return Status::ok();
}

// A cap or scale: positive when present.
Result<float> get_positive_float(const KeyReader& r, const std::string& name, float fallback) {
  LEOAM_ASSIGN_OR_RETURN(float v, get_float_or(r, name, fallback));
  if (!(v > 0.0f)) return r.error("key '" + r.key(name) + "' is " + std::to_string(v) + "; it must be positive");
  return v;
}

// The attention scale, the caps, the sliding layers and the rest that sets Gemma apart; the
// defaults where a Gemma file says nothing are llama.cpp's.
Status read_attention_shape(const KeyReader& r, ModelHparams& hp) {
  const bool gemma = is_gemma(hp.arch);
  // Gemma's 27B shapes (46 and 62 layers) scale by the width per head, not head_dim.
  const bool per_width = (hp.arch == ModelArch::kGemma2 && hp.n_layer == 46) ||
                         (hp.arch == ModelArch::kGemma3 && hp.n_layer == 62);
  const double scale_dim = per_width ? static_cast<double>(hp.n_embd) / hp.n_head : hp.head_dim;
  LEOAM_ASSIGN_OR_RETURN(hp.attn_scale,
                         get_positive_float(r, "attention.scale", static_cast<float>(1.0 / std::sqrt(scale_dim))));
  hp.rope_swa = hp.rope;
  if (!gemma) {
    // Mistral v0.1 and Phi-3 4K slide every layer; a window past the trained context (Phi-3
    // 128K's 262144) never bites, and leaves every layer to the selector.
    if (hp.arch != ModelArch::kLlama && hp.arch != ModelArch::kPhi3) return Status::ok();
    LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> window, r.get_int("attention.sliding_window"));
    if (window && *window <= 0) return r.error("key '" + r.key("attention.sliding_window") + "' must be positive");
    // Phi-3 mini and medium 4K files written without the key: llama.cpp's default, their 2047.
    const bool phi3_4k =
        hp.arch == ModelArch::kPhi3 && (hp.n_layer == 32 || hp.n_layer == 40) && hp.n_ctx_train == 4096;
    if (!window && phi3_4k) window = 2047;
    if (window && *window < hp.n_ctx_train) hp.sliding_window = *window;
    return Status::ok();
  }
  const bool capped = hp.arch == ModelArch::kGemma2;
  LEOAM_ASSIGN_OR_RETURN(std::optional<double> attn_cap, r.get_float("attn_logit_softcapping"));
  LEOAM_ASSIGN_OR_RETURN(std::optional<double> final_cap, r.get_float("final_logit_softcapping"));
  if (attn_cap || capped) {
    LEOAM_ASSIGN_OR_RETURN(hp.attn_softcap, get_positive_float(r, "attn_logit_softcapping", 50.0f));
  }
  if (final_cap || capped) {
    LEOAM_ASSIGN_OR_RETURN(hp.final_softcap, get_positive_float(r, "final_logit_softcapping", 30.0f));
  }
  hp.embd_scale = static_cast<float>(std::sqrt(static_cast<double>(hp.n_embd)));
  hp.ffn_activation = FfnActivation::kGeluTanh;
  hp.swa_period = capped ? 2 : 6;
  LEOAM_ASSIGN_OR_RETURN(hp.sliding_window,
                         get_positive(r, "attention.sliding_window", capped ? 4096 : 512, kMaxCtx));
  if (hp.arch == ModelArch::kGemma3) {
    hp.rope_swa.scaling = RopeScalingType::kNone;
    hp.rope_swa.freq_scale = 1.0f;
    hp.rope_swa.yarn_ext_factor = 0.0f;
    LEOAM_ASSIGN_OR_RETURN(hp.rope_swa.freq_base, get_float_or(r, "rope.freq_base_swa", 10000.0f));
    if (!(hp.rope_swa.freq_base > 1.0f)) {
      return r.error("key '" + r.key("rope.freq_base_swa") + "' must be greater than 1");
    }
  }
  return Status::ok();
}

}  // namespace

const char* model_arch_name(ModelArch arch) {
  for (const ArchName& a : kArchNames) {
    if (a.arch == arch) return a.name;
  }
  return "llama";
}

const char* supported_archs_list() {
  static const std::string list = [] {
    std::string s;
    for (const ArchName& a : kArchNames) s += (s.empty() ? "" : " ") + std::string(a.name);
    return s;
  }();
  return list.c_str();
}

Result<ModelHparams> read_hparams(const GgufFile& gguf) {
  ModelHparams hp;
  LEOAM_ASSIGN_OR_RETURN(hp.arch_name, gguf.require_string("general.architecture"));
  const auto known = std::find_if(std::begin(kArchNames), std::end(kArchNames),
                                  [&](const ArchName& a) { return hp.arch_name == a.name; });
  if (known == std::end(kArchNames)) {
    return unsupported(gguf.path() + ": architecture '" + hp.arch_name + "' is not supported; supported: " +
                       supported_archs_list());
  }
  hp.arch = known->arch;
  const KeyReader r(gguf, hp.arch_name);

  LEOAM_ASSIGN_OR_RETURN(hp.n_ctx_train, require_positive(r, "context_length", kMaxCtx));
  LEOAM_ASSIGN_OR_RETURN(hp.n_embd, require_positive(r, "embedding_length", kMaxDim));
  LEOAM_ASSIGN_OR_RETURN(int64_t n_layer, require_positive(r, "block_count", 1 << 16));
  hp.n_layer = static_cast<int>(n_layer);
  LEOAM_ASSIGN_OR_RETURN(hp.n_ff, require_positive(r, "feed_forward_length", kMaxDim));
  LEOAM_ASSIGN_OR_RETURN(int64_t n_head, require_positive(r, "attention.head_count", kMaxDim));
  hp.n_head = static_cast<int>(n_head);
  LEOAM_ASSIGN_OR_RETURN(int64_t n_head_kv, get_positive(r, "attention.head_count_kv", n_head, kMaxDim));
  hp.n_head_kv = static_cast<int>(n_head_kv);
  // opt's LayerNorm has its epsilon under llama.cpp's name for LayerNorm architectures.
  const bool opt = hp.arch == ModelArch::kOpt;
  hp.norm = opt ? NormKind::kLayer : NormKind::kRms;
  const char* eps_key = opt ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon";
  LEOAM_ASSIGN_OR_RETURN(double eps, r.require_float(eps_key));
  if (!(eps > 0.0 && eps < 1.0)) {
    return r.error("key '" + r.key(eps_key) + "' is " + std::to_string(eps) + "; it must be in (0, 1)");
  }
  hp.rms_eps = static_cast<float>(eps);

  LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> key_length, r.get_int("attention.key_length"));
  if (!key_length && hp.n_embd % hp.n_head != 0) {
    return r.error("embedding_length " + std::to_string(hp.n_embd) + " is not a multiple of head_count " +
                   std::to_string(hp.n_head) + " (and no attention.key_length is given)");
  }
  LEOAM_ASSIGN_OR_RETURN(int64_t head_dim, get_positive(r, "attention.key_length", hp.n_embd / hp.n_head, kMaxDim));
  hp.head_dim = static_cast<int>(head_dim);
  LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> value_length, r.get_int("attention.value_length"));
  if (value_length && *value_length != head_dim) {
    return unsupported(gguf.path() + ": attention.value_length " + std::to_string(*value_length) +
                       " differs from attention.key_length " + std::to_string(head_dim) +
                       "; only equal key and value head sizes are supported");
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    return r.error("attention.head_count " + std::to_string(hp.n_head) +
                   " is not a multiple of attention.head_count_kv " + std::to_string(hp.n_head_kv));
  }

  LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> vocab_size, r.get_int("vocab_size"));
  if (vocab_size) hp.n_vocab = *vocab_size;

  if (opt) {  // learned positions: no rotation
    hp.rope.n_rot = 0;
    hp.ffn_activation = FfnActivation::kRelu;
  } else {
    LEOAM_RETURN_IF_ERROR(read_rope(r, hp));
  }
  LEOAM_RETURN_IF_ERROR(read_attention_shape(r, hp));

  LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> logn_length, gguf.get_int(kLognLengthKey));
  if (logn_length) {
    if (*logn_length < 2 || *logn_length > kMaxCtx) {
      return invalid_argument(gguf.path() + ": key '" + std::string(kLognLengthKey) + "' is " +
                              std::to_string(*logn_length) + "; it must be in [2, " + std::to_string(kMaxCtx) + "]");
    }
    hp.logn_length = *logn_length;
  }
  return hp;
}

float ModelHparams::query_scale(int64_t pos) const {
  if (logn_length == 0 || pos + 1 <= logn_length) return 1.0f;
  return static_cast<float>(std::log(static_cast<double>(pos + 1)) / std::log(static_cast<double>(logn_length)));
}

}  // namespace leoam
