#include "model/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_set>
#include <vector>

#include "core/splitmix64.h"
#include "gguf/gguf_writer.h"

namespace leoam {

namespace {

class UniformRng {
 public:
  explicit UniformRng(uint64_t seed) : bits_(seed) {}
  // Uniform in [-1, 1).
  float uniform() { return static_cast<float>(static_cast<double>(bits_.next() >> 11) * 0x1.0p-52 - 1.0); }

 private:
  SplitMix64 bits_;
};

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

// n values, uniform with standard deviation `stddev` around `mean`; one stream per tensor name.
std::vector<float> random_values(uint64_t seed, std::string_view name, size_t n, float mean, float stddev) {
  UniformRng rng(seed ^ fnv1a(name));
  const float half_width = stddev * std::sqrt(3.0f);  // uniform on [-a, a] has variance a^2 / 3
  std::vector<float> v(n);
  for (float& x : v) x = mean + half_width * rng.uniform();
  return v;
}

// 259: <unk>, <s>, </s> and the 256 byte tokens.
constexpr int64_t kFirstFillerToken = 259;

void add_vocabulary(int64_t n_vocab, GgufWriter& w) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0.0f, 0.0f, 0.0f};
  // llama.cpp token types: 1 normal, 2 unknown, 3 control, 6 byte.
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    scores.push_back(0.0f);
    types.push_back(6);
  }
  static const char* const kWords[] = {
      "the", "and", "to", "a", "was", "he", "she", "it", "in", "of", "his", "her", "that", "with", "for", "on",
      "you", "they", "is", "had", "said", "day", "play", "time", "once", "upon", "there", "little", "girl",
      "boy", "big", "happy", "friend", "mom", "dog", "cat", "tree", "sun", "very", "were", "one", "saw", "went",
      "so", "but", "not", "all", "be", "at", "as", "an", "want", "like", "can", "go", "we", "my", "me", "no",
      "up", "out", "what", "do", "look", "this", "have", "from", "him", "by", "Once", "The", "She", "He", "Lily"};
  const std::string kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's word-boundary mark
  std::vector<std::string> pieces;
  for (const char* word : kWords) pieces.push_back(kSpace + word);
  for (char c = 'a'; c <= 'z'; ++c) pieces.push_back(kSpace + c);
  for (char c = 'a'; c <= 'z'; ++c) pieces.push_back(std::string(1, c));
  for (char c : std::string(".,!?'\"")) pieces.push_back(std::string(1, c));
  for (char a = 'a'; a <= 'z'; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) pieces.push_back(std::string{a, b});
  }
  for (char a = 'a'; a <= 'z'; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) pieces.push_back(kSpace + a + b);
  }
  std::unordered_set<std::string> seen;
  size_t next_piece = 0;
  int64_t counter = 0;  // beyond the list: "▁w0", "▁w1", ...
  for (int64_t id = kFirstFillerToken; id < n_vocab; ++id) {
    std::string piece;
    do {
      piece = next_piece < pieces.size() ? pieces[next_piece++] : kSpace + "w" + std::to_string(counter++);
    } while (!seen.insert(piece).second);
    tokens.push_back(piece);
    scores.push_back(-static_cast<float>(id - kFirstFillerToken));
    types.push_back(1);
  }
  w.set("tokenizer.ggml.model", GgufValue::from_string("llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::from_strings(std::move(tokens)));
  w.set("tokenizer.ggml.scores", GgufValue::from_f32s(scores));
  w.set("tokenizer.ggml.token_type", GgufValue::from_i32s(types));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::from_u32(1));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::from_u32(2));
  w.set("tokenizer.ggml.unknown_token_id", GgufValue::from_u32(0));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::from_bool(true));
}

}  // namespace

const char* synthetic_model_preset_names() { return "tiny llama-1b llama2-7b llama3-8b qwen2-0.5b gemma3-1b"; }

Result<SyntheticModelSpec> synthetic_model_preset(std::string_view name_and_type) {
  std::string_view name = name_and_type;
  std::string_view type_name;
  if (const size_t colon = name_and_type.find(':'); colon != std::string_view::npos) {
    name = name_and_type.substr(0, colon);
    type_name = name_and_type.substr(colon + 1);
  }
  SyntheticModelSpec s;
  s.name = "synthetic-" + std::string(name);
  if (name == "tiny") {
    s.n_vocab = 512; s.n_embd = 256; s.n_layer = 2; s.n_head = 4; s.n_head_kv = 2; s.n_ff = 512;
    s.n_ctx = 2048; s.weight_type = GgmlType::kF32;
  } else if (name == "llama-1b") {  // Llama-3.2-1B dims, a 32000-token vocabulary
    s.n_vocab = 32000; s.n_embd = 2048; s.n_layer = 16; s.n_head = 32; s.n_head_kv = 8; s.n_ff = 8192;
    s.n_ctx = 8192; s.rope_freq_base = 500000.0f; s.weight_type = GgmlType::kF16;
  } else if (name == "llama2-7b" || name == "llama-7b") {  // Llama-2-7B dims (llama-7b: its older name)
    s.n_vocab = 32000; s.n_embd = 4096; s.n_layer = 32; s.n_head = 32; s.n_head_kv = 32; s.n_ff = 11008;
    s.n_ctx = 4096; s.weight_type = GgmlType::kF16;
  } else if (name == "llama3-8b") {  // Llama-3-8B dims, its real 128256-token vocabulary
    s.n_vocab = 128256; s.n_embd = 4096; s.n_layer = 32; s.n_head = 32; s.n_head_kv = 8; s.n_ff = 14336;
    s.n_ctx = 8192; s.rope_freq_base = 500000.0f; s.weight_type = GgmlType::kF16;
  } else if (name == "qwen2-0.5b") {  // Qwen2-0.5B dims, a 32000-token vocabulary
    s.arch = ModelArch::kQwen2;
    s.n_vocab = 32000; s.n_embd = 896; s.n_layer = 24; s.n_head = 14; s.n_head_kv = 2; s.n_ff = 4864;
    s.n_ctx = 32768; s.rope_freq_base = 1000000.0f; s.rms_eps = 1e-6f; s.qkv_bias = true; s.tied_output = true;
    s.weight_type = GgmlType::kF16;
  } else if (name == "gemma3-1b") {  // Gemma-3-1B dims (its 262144-token vocabulary cut to 32000)
    s.arch = ModelArch::kGemma3;
    s.n_vocab = 32000; s.n_embd = 1152; s.n_layer = 26; s.n_head = 4; s.n_head_kv = 1; s.head_dim = 256;
    s.n_ff = 6912; s.n_ctx = 32768; s.rope_freq_base = 1000000.0f; s.rms_eps = 1e-6f; s.tied_output = true;
    s.sliding_window = 512; s.weight_type = GgmlType::kF16;
  } else {
    return invalid_argument("unknown synthetic model '" + std::string(name) + "'; presets: " +
                            synthetic_model_preset_names());
  }
  if (!type_name.empty()) {
    const std::optional<GgmlType> type = supported_type_by_name(type_name);
    if (!type) {
      return invalid_argument("unknown weight type '" + std::string(type_name) + "' in '" +
                              std::string(name_and_type) + "'; types: " + supported_type_names());
    }
    s.weight_type = *type;
  }
  return s;
}

Status build_synthetic_model(const SyntheticModelSpec& spec, GgufWriter& w) {
  const auto bad = [](const std::string& m) { return invalid_argument("synthetic model: " + m); };
  if (spec.n_vocab < kFirstFillerToken) return bad("n_vocab must be at least 259, got " + std::to_string(spec.n_vocab));
  if (spec.n_embd <= 0 || spec.n_layer <= 0 || spec.n_head <= 0 || spec.n_head_kv <= 0 || spec.n_ff <= 0 ||
      spec.n_ctx <= 0) {
    return bad("every dimension must be positive");
  }
  if (spec.head_dim == 0 && spec.n_embd % spec.n_head != 0) return bad("n_embd must be a multiple of n_head");
  if (spec.n_head % spec.n_head_kv != 0) return bad("n_head must be a multiple of n_head_kv");
  const int64_t head_dim = spec.head_dim > 0 ? spec.head_dim : spec.n_embd / spec.n_head;
  const int n_rot = spec.n_rot > 0 ? spec.n_rot : static_cast<int>(head_dim);
  if (n_rot % 2 != 0 || n_rot > head_dim) return bad("n_rot must be even and at most the head size");
  const int64_t block = ggml_block_size(spec.weight_type);
  if (spec.n_embd % block != 0 || spec.n_ff % block != 0) {
    return bad(ggml_type_name(static_cast<uint32_t>(spec.weight_type)) + " needs n_embd and n_ff to be multiples of " +
               std::to_string(block) + " (got " + std::to_string(spec.n_embd) + " and " + std::to_string(spec.n_ff) + ")");
  }

  const std::string arch = model_arch_name(spec.arch);
  const auto key = [&](const char* k) { return arch + "." + k; };
  w.set("general.architecture", GgufValue::from_string(arch));
  w.set("general.name", GgufValue::from_string(spec.name));
  w.set(key("context_length"), GgufValue::from_u32(static_cast<uint32_t>(spec.n_ctx)));
  w.set(key("embedding_length"), GgufValue::from_u32(static_cast<uint32_t>(spec.n_embd)));
  w.set(key("block_count"), GgufValue::from_u32(static_cast<uint32_t>(spec.n_layer)));
  w.set(key("feed_forward_length"), GgufValue::from_u32(static_cast<uint32_t>(spec.n_ff)));
  w.set(key("attention.head_count"), GgufValue::from_u32(static_cast<uint32_t>(spec.n_head)));
  w.set(key("attention.head_count_kv"), GgufValue::from_u32(static_cast<uint32_t>(spec.n_head_kv)));
  w.set(key("attention.layer_norm_rms_epsilon"), GgufValue::from_f32(spec.rms_eps));
  if (spec.head_dim > 0) {
    w.set(key("attention.key_length"), GgufValue::from_u32(static_cast<uint32_t>(head_dim)));
    w.set(key("attention.value_length"), GgufValue::from_u32(static_cast<uint32_t>(head_dim)));
  }
  w.set(key("rope.dimension_count"), GgufValue::from_u32(static_cast<uint32_t>(n_rot)));
  w.set(key("rope.freq_base"), GgufValue::from_f32(spec.rope_freq_base));
  if (spec.sliding_window > 0) {
    w.set(key("attention.sliding_window"), GgufValue::from_u32(static_cast<uint32_t>(spec.sliding_window)));
  }
  if (spec.logn_length > 0) w.set(kLognLengthKey, GgufValue::from_u32(static_cast<uint32_t>(spec.logn_length)));
  if (spec.arch == ModelArch::kPhi3 && spec.rope_n_ctx_orig > 0) {  // LongRoPE: llama.cpp's phi3 keys
    w.set(key("rope.scaling.original_context_length"), GgufValue::from_u32(static_cast<uint32_t>(spec.rope_n_ctx_orig)));
    if (spec.yarn_attn_factor >= 0) w.set(key("rope.scaling.attn_factor"), GgufValue::from_f32(spec.yarn_attn_factor));
  }
  if (spec.rope_scaling != RopeScalingType::kNone) {
    w.set(key("rope.scaling.type"),
          GgufValue::from_string(spec.rope_scaling == RopeScalingType::kYarn ? "yarn" : "linear"));
    w.set(key("rope.scaling.factor"), GgufValue::from_f32(spec.rope_scaling_factor));
    if (spec.rope_n_ctx_orig > 0) {
      w.set(key("rope.scaling.original_context_length"),
            GgufValue::from_u32(static_cast<uint32_t>(spec.rope_n_ctx_orig)));
    }
    if (spec.yarn_ext_factor >= 0) w.set(key("rope.scaling.yarn_ext_factor"), GgufValue::from_f32(spec.yarn_ext_factor));
    if (spec.yarn_attn_factor >= 0) w.set(key("rope.scaling.yarn_attn_factor"), GgufValue::from_f32(spec.yarn_attn_factor));
    if (spec.yarn_beta_fast >= 0) w.set(key("rope.scaling.yarn_beta_fast"), GgufValue::from_f32(spec.yarn_beta_fast));
    if (spec.yarn_beta_slow >= 0) w.set(key("rope.scaling.yarn_beta_slow"), GgufValue::from_f32(spec.yarn_beta_slow));
  }
  add_vocabulary(spec.n_vocab, w);

  const uint64_t seed = spec.seed;
  const auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out, float stddev) {
    return w.add_tensor_f32(name, spec.weight_type, {n_in, n_out},
                            random_values(seed, name, static_cast<size_t>(n_in * n_out), 0.0f, stddev));
  };
  const auto vec = [&](const std::string& name, int64_t n, float mean, float stddev) {
    return w.add_tensor_f32(name, GgmlType::kF32, {n}, random_values(seed, name, static_cast<size_t>(n), mean, stddev));
  };
  const float in_embd = 1.0f / std::sqrt(static_cast<float>(spec.n_embd));
  const float in_ff = 1.0f / std::sqrt(static_cast<float>(spec.n_ff));
  const int64_t n_q = head_dim * spec.n_head;
  const int64_t n_kv = head_dim * spec.n_head_kv;
  // 0.1 / sqrt(3): norm weights uniform on [0.9, 1.1].
  const float norm_sd = 0.1f / std::sqrt(3.0f);

  LEOAM_RETURN_IF_ERROR(matrix("token_embd.weight", spec.n_embd, spec.n_vocab, 1.0f));
  for (int il = 0; il < spec.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LEOAM_RETURN_IF_ERROR(vec(p + "attn_norm.weight", spec.n_embd, 1.0f, norm_sd));
    if (spec.arch == ModelArch::kPhi3) {
      LEOAM_RETURN_IF_ERROR(matrix(p + "attn_qkv.weight", spec.n_embd, n_q + 2 * n_kv, in_embd));
    } else {
      LEOAM_RETURN_IF_ERROR(matrix(p + "attn_q.weight", spec.n_embd, n_q, in_embd));
      LEOAM_RETURN_IF_ERROR(matrix(p + "attn_k.weight", spec.n_embd, n_kv, in_embd));
      LEOAM_RETURN_IF_ERROR(matrix(p + "attn_v.weight", spec.n_embd, n_kv, in_embd));
    }
    if (spec.qkv_bias) {
      LEOAM_RETURN_IF_ERROR(vec(p + "attn_q.bias", n_q, 0.0f, 0.2f));
      LEOAM_RETURN_IF_ERROR(vec(p + "attn_k.bias", n_kv, 0.0f, 0.2f));
      LEOAM_RETURN_IF_ERROR(vec(p + "attn_v.bias", n_kv, 0.0f, 0.2f));
    }
    const bool gemma = is_gemma(spec.arch);
    if (spec.arch == ModelArch::kQwen3 || spec.arch == ModelArch::kGemma3) {
      LEOAM_RETURN_IF_ERROR(vec(p + "attn_q_norm.weight", head_dim, 1.0f, norm_sd));
      LEOAM_RETURN_IF_ERROR(vec(p + "attn_k_norm.weight", head_dim, 1.0f, norm_sd));
    }
    LEOAM_RETURN_IF_ERROR(matrix(p + "attn_output.weight", n_q, spec.n_embd, in_embd));
    if (gemma) LEOAM_RETURN_IF_ERROR(vec(p + "post_attention_norm.weight", spec.n_embd, 1.0f, norm_sd));
    LEOAM_RETURN_IF_ERROR(vec(p + "ffn_norm.weight", spec.n_embd, 1.0f, norm_sd));
    if (spec.arch == ModelArch::kPhi3) {  // gate's rows, then up's
      LEOAM_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", spec.n_embd, 2 * spec.n_ff, in_embd));
    } else {
      LEOAM_RETURN_IF_ERROR(matrix(p + "ffn_gate.weight", spec.n_embd, spec.n_ff, in_embd));
      LEOAM_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", spec.n_embd, spec.n_ff, in_embd));
    }
    LEOAM_RETURN_IF_ERROR(matrix(p + "ffn_down.weight", spec.n_ff, spec.n_embd, in_ff));
    if (gemma) LEOAM_RETURN_IF_ERROR(vec(p + "post_ffw_norm.weight", spec.n_embd, 1.0f, norm_sd));
  }
  LEOAM_RETURN_IF_ERROR(vec("output_norm.weight", spec.n_embd, 1.0f, norm_sd));
  if (!spec.tied_output) LEOAM_RETURN_IF_ERROR(matrix("output.weight", spec.n_embd, spec.n_vocab, in_embd));
  if (spec.arch == ModelArch::kPhi3 && spec.rope_n_ctx_orig > 0) {
    // LongRoPE: short factors near 1, long ones rising to 6 for the slowest pairs.
    const int n_pairs = n_rot / 2;
    std::vector<float> shorts(n_pairs), longs(n_pairs);
    for (int i = 0; i < n_pairs; ++i) {
      shorts[i] = 1.0f + 0.05f * static_cast<float>(i % 3);
      longs[i] = n_pairs > 1 ? 1.0f + 5.0f * i / (n_pairs - 1) : 1.0f;
    }
    LEOAM_RETURN_IF_ERROR(w.add_tensor_f32("rope_factors_long.weight", GgmlType::kF32, {n_pairs}, longs));
    LEOAM_RETURN_IF_ERROR(w.add_tensor_f32("rope_factors_short.weight", GgmlType::kF32, {n_pairs}, shorts));
  }
  if (spec.freq_factors) {
    // Llama-3.1 style: 1 for the fastest-turning pairs rising to 8 for the slowest.
    const int n_pairs = n_rot / 2;
    std::vector<float> factors(n_pairs);
    for (int i = 0; i < n_pairs; ++i) factors[i] = n_pairs > 1 ? 1.0f + 7.0f * i / (n_pairs - 1) : 1.0f;
    LEOAM_RETURN_IF_ERROR(w.add_tensor_f32("rope_freqs.weight", GgmlType::kF32, {n_pairs}, factors));
  }
  return Status::ok();
}

Status write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path) {
  GgufWriter writer;
  LEOAM_RETURN_IF_ERROR(build_synthetic_model(spec, writer));
  return writer.write(path);
}

}  // namespace leoam
