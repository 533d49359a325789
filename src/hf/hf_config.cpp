#include "hf/hf_config.h"

#include <cmath>
#include <numbers>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "gguf/gguf_value.h"
#include "gguf/json_file.h"
#include "gguf/gguf_writer.h"

namespace leoam {
namespace {

using Json = nlohmann::json;

// The architectures this engine computes, as config.json names them.
struct KnownArch {
  const char* hf_name;
  const char* gguf_arch;
  bool permute_qk;
  bool attention_bias;
  bool head_norms;
  bool fused_projections;
  bool gemma;
};
constexpr KnownArch kKnownArchs[] = {
    {"LlamaForCausalLM", "llama", true, false, false, false, false},
    {"MistralForCausalLM", "llama", true, false, false, false, false},
    {"Qwen2ForCausalLM", "qwen2", false, true, false, false, false},
    {"Qwen3ForCausalLM", "qwen3", false, false, true, false, false},
    {"Phi3ForCausalLM", "phi3", false, false, false, true, false},
    {"Gemma2ForCausalLM", "gemma2", false, false, false, false, true},
    {"Gemma3ForCausalLM", "gemma3", false, false, true, false, true},
    {"OPTForCausalLM", "opt", false, true, false, false, false},
};

std::string known_arch_list() {
  std::string s;
  for (const KnownArch& a : kKnownArchs) s += (s.empty() ? "" : " ") + std::string(a.hf_name);
  return s;
}

// Field access that names the field in every error, after `prefix` for a nested object
// ("rope_scaling."); read_hf_config adds the file.
class Fields {
 public:
  explicit Fields(const Json& j, std::string prefix = "") : j_(j), prefix_(std::move(prefix)) {}

  Status error(const std::string& field, const std::string& what) const {
    return invalid_argument("\"" + prefix_ + field + "\" " + what);
  }
  const Json* find(const std::string& field) const {
    auto it = j_.find(field);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  Result<std::optional<int64_t>> get_int(const std::string& field, int64_t max_value) const {
    const Json* v = find(field);
    if (v == nullptr) return std::optional<int64_t>();
    if (!v->is_number_integer()) return error(field, "is " + v->dump() + ", not an integer");
    const int64_t x = v->get<int64_t>();
    if (x < 1 || x > max_value) {
      return error(field, "is " + std::to_string(x) + "; it must be in [1, " + std::to_string(max_value) + "]");
    }
    return std::optional<int64_t>(x);
  }
  Result<int64_t> require_int(const std::string& field, int64_t max_value) const {
    LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> v, get_int(field, max_value));
    if (!v) return error(field, "is missing");
    return *v;
  }
  Result<std::optional<double>> get_float(const std::string& field) const {
    const Json* v = find(field);
    if (v == nullptr) return std::optional<double>();
    if (!v->is_number()) return error(field, "is " + v->dump() + ", not a number");
    const double x = v->get<double>();
    if (!std::isfinite(x) || x <= 0) return error(field, "is " + v->dump() + "; it must be positive");
    return std::optional<double>(x);
  }
  Result<double> require_float(const std::string& field) const {
    LEOAM_ASSIGN_OR_RETURN(std::optional<double> v, get_float(field));
    if (!v) return error(field, "is missing");
    return *v;
  }
  Result<bool> get_bool(const std::string& field, bool fallback) const {
    const Json* v = find(field);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return error(field, "is " + v->dump() + ", not true or false");
    return v->get<bool>();
  }

 private:
  const Json& j_;
  std::string prefix_;
};

constexpr int64_t kMaxDim = 1 << 20;
constexpr int64_t kMaxCtx = int64_t{1} << 24;

// LongRoPE (Phi-3): a short and a long factor per rotated pair, and cos and sin scaled by
// sqrt(1 + ln(s) / ln(original)) where s = max_position_embeddings / original (1 when s <= 1).
Status read_longrope(const Fields& f, const Fields& s, HfConfig& c) {
  if (c.gguf_arch != "phi3") return unsupported("\"rope_scaling\" longrope is supported for Phi3ForCausalLM only");
  for (const char* unsupported_field : {"short_mscale", "long_mscale"}) {
    if (s.find(unsupported_field) != nullptr) {
      return unsupported("\"rope_scaling." + std::string(unsupported_field) + "\" is not supported");
    }
  }
  const auto factors = [&](const char* name, std::vector<float>& out) -> Status {
    const Json* v = s.find(name);
    if (v == nullptr || !v->is_array() || v->size() != static_cast<size_t>(c.head_dim / 2)) {
      return s.error(name, "must be a list of " + std::to_string(c.head_dim / 2) + " numbers, one per rotated pair");
    }
    for (const Json& x : *v) {
      if (!x.is_number() || !(x.get<double>() > 0) || !std::isfinite(x.get<double>())) {
        return s.error(name, "holds " + x.dump() + "; factors must be positive");
      }
      out.push_back(x.get<float>());
    }
    return Status::ok();
  };
  LEOAM_RETURN_IF_ERROR(factors("short_factor", c.rope_short_factors));
  LEOAM_RETURN_IF_ERROR(factors("long_factor", c.rope_long_factors));
  LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> original, s.get_int("original_max_position_embeddings", kMaxCtx));
  if (!original) {
    LEOAM_ASSIGN_OR_RETURN(original, f.get_int("original_max_position_embeddings", kMaxCtx));
  }
  if (!original) return f.error("original_max_position_embeddings", "is missing (LongRoPE needs it)");
  c.rope_original_ctx = *original;
  LEOAM_ASSIGN_OR_RETURN(std::optional<double> attention_factor, s.get_float("attention_factor"));
  const double scale = static_cast<double>(c.n_ctx) / static_cast<double>(*original);
  c.rope_attn_factor = attention_factor.value_or(
      scale <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(*original))));
  return Status::ok();
}

Status read_rope_scaling(const Fields& f, const Json& scaling, HfConfig& c) {
  if (!scaling.is_object()) return f.error("rope_scaling", "is " + scaling.dump() + ", not an object");
  const Fields s(scaling, "rope_scaling.");
  const Json* type = s.find("rope_type");
  if (type == nullptr) type = s.find("type");
  if (type == nullptr || !type->is_string()) return s.error("rope_type", "is missing or not a string");
  c.rope_scaling = type->get<std::string>();
  if (c.rope_scaling == "default") {
    c.rope_scaling = "none";
    return Status::ok();
  }
  if (c.rope_scaling == "su") c.rope_scaling = "longrope";  // Phi-3's first name for it
  if (c.rope_scaling == "longrope") return read_longrope(f, s, c);
  if (c.rope_scaling != "linear" && c.rope_scaling != "yarn" && c.rope_scaling != "llama3") {
    return unsupported("\"rope_scaling.rope_type\" is '" + c.rope_scaling + "', not supported; supported: " +
                       "default linear yarn llama3 longrope");
  }
  LEOAM_ASSIGN_OR_RETURN(c.rope_factor, s.require_float("factor"));
  if (c.rope_scaling == "linear") return Status::ok();
  LEOAM_ASSIGN_OR_RETURN(const double original, s.require_float("original_max_position_embeddings"));
  c.rope_original_ctx = static_cast<int64_t>(original);
  if (c.rope_scaling == "yarn") return Status::ok();
  // llama3: Meta's frequency-dependent scaling. Wavelengths shorter than original/high_freq_factor
  // keep their frequency, longer than original/low_freq_factor are divided by the factor, and
  // those between blend the two.
  LEOAM_ASSIGN_OR_RETURN(const double low, s.require_float("low_freq_factor"));
  LEOAM_ASSIGN_OR_RETURN(const double high, s.require_float("high_freq_factor"));
  if (!(high > low)) return s.error("high_freq_factor", "must be greater than low_freq_factor");
  const double low_wavelen = original / low;
  const double high_wavelen = original / high;
  for (int i = 0; i < c.head_dim / 2; ++i) {
    const double freq = std::pow(c.rope_theta, -2.0 * i / c.head_dim);
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double scaled = freq;
    if (wavelen > low_wavelen) {
      scaled = freq / c.rope_factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (original / wavelen - low) / (high - low);
      scaled = (1.0 - smooth) * freq / c.rope_factor + smooth * freq;
    }
    c.rope_freq_factors.push_back(static_cast<float>(freq / scaled));
  }
  return Status::ok();
}

// Gemma's attention: its scale, caps and sliding window, and which layers slide, which must be
// the engine's pattern (every other layer in Gemma 2, five of six in Gemma 3).
Status read_gemma(const Fields& f, HfConfig& c) {
  const Json* act = f.find("hidden_activation");
  if (act == nullptr) act = f.find("hidden_act");
  if (act != nullptr && *act != "gelu_pytorch_tanh" && *act != "gelu_tanh") {
    return unsupported("\"hidden_activation\" " + act->dump() + " is not supported for " + c.architecture +
                       " (only gelu_pytorch_tanh)");
  }
  LEOAM_ASSIGN_OR_RETURN(c.query_pre_attn_scalar, f.require_float("query_pre_attn_scalar"));
  LEOAM_ASSIGN_OR_RETURN(c.sliding_window, f.require_int("sliding_window", kMaxCtx));
  LEOAM_ASSIGN_OR_RETURN(std::optional<double> attn_cap, f.get_float("attn_logit_softcapping"));
  LEOAM_ASSIGN_OR_RETURN(std::optional<double> final_cap, f.get_float("final_logit_softcapping"));
  const bool gemma2 = c.gguf_arch == "gemma2";
  if (gemma2 && !(attn_cap && final_cap)) {
    return unsupported("Gemma2ForCausalLM without attn_logit_softcapping and final_logit_softcapping is not supported");
  }
  c.attn_softcap = attn_cap.value_or(0.0);
  c.final_softcap = final_cap.value_or(0.0);
  const int period = gemma2 ? 2 : 6;
  LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> pattern, f.get_int("sliding_window_pattern", 1 << 16));
  if (pattern && *pattern != period) {
    return unsupported("\"sliding_window_pattern\" " + std::to_string(*pattern) + " is not supported for " +
                       c.architecture + " (only " + std::to_string(period) + ")");
  }
  if (const Json* types = f.find("layer_types")) {
    if (!types->is_array() || types->size() != static_cast<size_t>(c.n_layer)) {
      return f.error("layer_types", "must list one type per layer");
    }
    for (int il = 0; il < c.n_layer; ++il) {
      const char* want = (il + 1) % period != 0 ? "sliding_attention" : "full_attention";
      if ((*types)[il] != want) {
        return unsupported("\"layer_types\"[" + std::to_string(il) + "] is " + (*types)[il].dump() + "; " +
                           c.architecture + " is supported with every " + std::to_string(period) +
                           "th layer global and the rest sliding");
      }
    }
  }
  if (!gemma2) {
    LEOAM_ASSIGN_OR_RETURN(std::optional<double> local, f.get_float("rope_local_base_freq"));
    c.rope_local_theta = local.value_or(10000.0);
  }
  return Status::ok();
}

// OPT's fields, which name the shapes differently and leave the LayerNorm's epsilon at its 1e-5.
// Only the layout every size but 350M has: norms before the blocks, no projection of the
// embedding, ReLU, biases, norms with their weights.
Status read_opt(const Fields& f, HfConfig& c) {
  LEOAM_ASSIGN_OR_RETURN(c.n_vocab, f.require_int("vocab_size", int64_t{1} << 24));
  LEOAM_ASSIGN_OR_RETURN(c.n_embd, f.require_int("hidden_size", kMaxDim));
  LEOAM_ASSIGN_OR_RETURN(c.n_ff, f.require_int("ffn_dim", kMaxDim));
  LEOAM_ASSIGN_OR_RETURN(int64_t n_layer, f.require_int("num_hidden_layers", 1 << 16));
  LEOAM_ASSIGN_OR_RETURN(int64_t n_head, f.require_int("num_attention_heads", kMaxDim));
  c.n_layer = static_cast<int>(n_layer);
  c.n_head = c.n_head_kv = static_cast<int>(n_head);
  if (c.n_embd % c.n_head != 0) return f.error("hidden_size", "is not a multiple of num_attention_heads");
  c.head_dim = static_cast<int>(c.n_embd / c.n_head);
  LEOAM_ASSIGN_OR_RETURN(c.n_ctx, f.require_int("max_position_embeddings", kMaxCtx));
  c.rms_eps = 1e-5;
  if (const Json* act = f.find("activation_function"); act != nullptr && *act != "relu") {
    return unsupported("\"activation_function\" " + act->dump() + " is not supported for OPTForCausalLM (only relu)");
  }
  LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> proj_dim, f.get_int("word_embed_proj_dim", kMaxDim));
  if (proj_dim && *proj_dim != c.n_embd) {
    return unsupported("\"word_embed_proj_dim\" " + std::to_string(*proj_dim) +
                       " differs from hidden_size: the projected embeddings of OPT-350M are not supported");
  }
  for (const char* field : {"do_layer_norm_before", "enable_bias", "layer_norm_elementwise_affine"}) {
    LEOAM_ASSIGN_OR_RETURN(bool on, f.get_bool(field, true));
    if (!on) return unsupported("\"" + std::string(field) + "\" false is not supported for OPTForCausalLM");
  }
  LEOAM_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.get_bool("tie_word_embeddings", true));
  return Status::ok();
}

Status read_fields(const Fields& f, HfConfig& c) {
  const Json* archs = f.find("architectures");
  if (archs == nullptr || !archs->is_array() || archs->empty() || !archs->front().is_string()) {
    return f.error("architectures", "is missing or not a list of names");
  }
  c.architecture = archs->front().get<std::string>();
  const KnownArch* known = nullptr;
  for (const KnownArch& a : kKnownArchs) {
    if (c.architecture == a.hf_name) known = &a;
  }
  if (known == nullptr) {
    return unsupported("architecture '" + c.architecture + "' is not supported; supported: " + known_arch_list());
  }
  c.gguf_arch = known->gguf_arch;
  c.permute_qk = known->permute_qk;
  c.head_norms = known->head_norms;
  c.fused_projections = known->fused_projections;
  c.gemma = known->gemma;
  if (c.opt()) return read_opt(f, c);
  LEOAM_ASSIGN_OR_RETURN(c.n_vocab, f.require_int("vocab_size", int64_t{1} << 24));
  LEOAM_ASSIGN_OR_RETURN(c.n_embd, f.require_int("hidden_size", kMaxDim));
  LEOAM_ASSIGN_OR_RETURN(c.n_ff, f.require_int("intermediate_size", kMaxDim));
  LEOAM_ASSIGN_OR_RETURN(int64_t n_layer, f.require_int("num_hidden_layers", 1 << 16));
  LEOAM_ASSIGN_OR_RETURN(int64_t n_head, f.require_int("num_attention_heads", kMaxDim));
  LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> n_head_kv, f.get_int("num_key_value_heads", n_head));
  c.n_layer = static_cast<int>(n_layer);
  c.n_head = static_cast<int>(n_head);
  c.n_head_kv = static_cast<int>(n_head_kv.value_or(n_head));
  if (c.n_head % c.n_head_kv != 0) {
    return f.error("num_key_value_heads", "is " + std::to_string(c.n_head_kv) + ", which does not divide " +
                                              "num_attention_heads " + std::to_string(c.n_head));
  }
  LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, f.get_int("head_dim", kMaxDim));
  if (!head_dim && c.n_embd % c.n_head != 0) {
    return f.error("hidden_size", "is not a multiple of num_attention_heads (and no head_dim is given)");
  }
  c.head_dim = static_cast<int>(head_dim.value_or(c.n_embd / c.n_head));
  if (c.head_dim % 2 != 0) return f.error("head_dim", "must be even for RoPE");
  LEOAM_ASSIGN_OR_RETURN(c.n_ctx, f.require_int("max_position_embeddings", kMaxCtx));
  LEOAM_ASSIGN_OR_RETURN(c.rms_eps, f.require_float("rms_norm_eps"));
  if (c.rms_eps >= 1) return f.error("rms_norm_eps", "must be below 1");
  LEOAM_ASSIGN_OR_RETURN(std::optional<double> theta, f.get_float("rope_theta"));
  c.rope_theta = theta.value_or(10000.0);
  if (c.rope_theta <= 1) return f.error("rope_theta", "must be greater than 1");
  LEOAM_ASSIGN_OR_RETURN(std::optional<double> partial, f.get_float("partial_rotary_factor"));
  if (partial && *partial != 1.0) {
    return unsupported("\"partial_rotary_factor\" " + std::to_string(*partial) + " is not supported (only 1)");
  }
  if (c.gemma) {
    LEOAM_RETURN_IF_ERROR(read_gemma(f, c));
  } else if (const Json* act = f.find("hidden_act"); act != nullptr && *act != "silu") {
    return unsupported("\"hidden_act\" " + act->dump() + " is not supported for " + c.architecture + " (only silu)");
  }
  // Gemma ties its output to the embedding unless config.json says otherwise.
  LEOAM_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.get_bool("tie_word_embeddings", c.gemma));
  LEOAM_ASSIGN_OR_RETURN(bool bias, f.get_bool("attention_bias", known->attention_bias));
  c.attention_bias = bias;
  if (c.attention_bias && !known->attention_bias) {
    return unsupported("\"attention_bias\" true is not supported for " + c.architecture);
  }
  LEOAM_ASSIGN_OR_RETURN(bool sliding, f.get_bool("use_sliding_window", false));
  if (sliding) return unsupported("\"use_sliding_window\" true is not supported: sliding-window attention");
  if (c.gguf_arch == "llama" || c.gguf_arch == "phi3") {  // Mistral v0.1, Phi-3 4K: every layer slides
    LEOAM_ASSIGN_OR_RETURN(std::optional<int64_t> window, f.get_int("sliding_window", kMaxCtx));
    c.sliding_window = window.value_or(0);
  }
  if (const Json* scaling = f.find("rope_scaling")) LEOAM_RETURN_IF_ERROR(read_rope_scaling(f, *scaling, c));
  return Status::ok();
}

}  // namespace

Result<HfConfig> read_hf_config(const std::string& path) {
  LEOAM_ASSIGN_OR_RETURN(const Json j, read_json_object(path));
  HfConfig c;
  if (Status s = read_fields(Fields(j), c); !s.is_ok()) return s.with_context(path);
  return c;
}

void add_hf_config_metadata(const HfConfig& c, const std::string& name, GgufWriter& out) {
  const std::string a = c.gguf_arch;
  auto u32 = [](int64_t v) { return GgufValue::from_u32(static_cast<uint32_t>(v)); };
  out.set("general.architecture", GgufValue::from_string(a));
  out.set("general.name", GgufValue::from_string(name));
  out.set(a + ".vocab_size", u32(c.n_vocab));
  out.set(a + ".context_length", u32(c.n_ctx));
  out.set(a + ".embedding_length", u32(c.n_embd));
  out.set(a + ".block_count", u32(c.n_layer));
  out.set(a + ".feed_forward_length", u32(c.n_ff));
  out.set(a + ".attention.head_count", u32(c.n_head));
  out.set(a + ".attention.head_count_kv", u32(c.n_head_kv));
  out.set(a + ".attention.key_length", u32(c.head_dim));
  out.set(a + ".attention.value_length", u32(c.head_dim));
  if (c.opt()) {  // LayerNorm, and no RoPE
    out.set(a + ".attention.layer_norm_epsilon", GgufValue::from_f32(static_cast<float>(c.rms_eps)));
    return;
  }
  out.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::from_f32(static_cast<float>(c.rms_eps)));
  out.set(a + ".rope.dimension_count", u32(c.head_dim));
  out.set(a + ".rope.freq_base", GgufValue::from_f32(static_cast<float>(c.rope_theta)));
  if (c.sliding_window > 0) out.set(a + ".attention.sliding_window", u32(c.sliding_window));
  if (c.rope_scaling == "longrope") {
    out.set(a + ".rope.scaling.original_context_length", u32(c.rope_original_ctx));
    out.set(a + ".rope.scaling.attn_factor", GgufValue::from_f32(static_cast<float>(c.rope_attn_factor)));
  }
  if (c.gemma) {
    out.set(a + ".attention.scale", GgufValue::from_f32(static_cast<float>(1.0 / std::sqrt(c.query_pre_attn_scalar))));
    // The keys absent where config.json has none (0): a cap-less Gemma 3, Gemma 2's one RoPE.
    for (const auto& [key, value] : {std::pair{".attn_logit_softcapping", c.attn_softcap},
                                     std::pair{".final_logit_softcapping", c.final_softcap},
                                     std::pair{".rope.freq_base_swa", c.rope_local_theta}}) {
      if (value > 0) out.set(a + key, GgufValue::from_f32(static_cast<float>(value)));
    }
  }
  if (c.rope_scaling == "linear" || c.rope_scaling == "yarn") {
    out.set(a + ".rope.scaling.type", GgufValue::from_string(c.rope_scaling));
    out.set(a + ".rope.scaling.factor", GgufValue::from_f32(static_cast<float>(c.rope_factor)));
    if (c.rope_scaling == "yarn") out.set(a + ".rope.scaling.original_context_length", u32(c.rope_original_ctx));
  }
}

}  // namespace leoam
