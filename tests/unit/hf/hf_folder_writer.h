// Writes random-weight Hugging Face checkpoint folders as transformers saves them: config.json,
// the weights in one model.safetensors or in shards with model.safetensors.index.json, and a
// byte-level BPE tokenizer.json (Llama 3's split) whose vocabulary fills the model's.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../safetensors_writer.h"
#include "core/fp16.h"

namespace leoam::testing_util {

struct HfFolderSpec {
  std::string architecture = "LlamaForCausalLM";
  int n_vocab = 300;
  int n_embd = 64;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 2;
  int n_ff = 96;
  int head_dim = 0;            // 0: n_embd / n_head (and no "head_dim" in config.json)
  int n_ctx = 256;
  bool tied = false;
  bool bias = false;           // q/k/v biases (Qwen2)
  std::string dtype = "F32";   // F32, F16 or BF16
  int shards = 1;              // > 1: model-0000i-of-0000n.safetensors and the index
  double rope_theta = 10000.0;
  nlohmann::json rope_scaling;  // null: none
  int original_ctx = 0;         // > 0: "original_max_position_embeddings" (Phi-3 keeps it at the top level)
  uint32_t seed = 1;
  // Gemma2ForCausalLM and Gemma3ForCausalLM: the fields of their config.json.
  double query_pre_attn_scalar = 0;
  int sliding_window = 0;
  double attn_softcap = 0;       // 0: null
  double final_softcap = 0;      // 0: null
  double rope_local_theta = 0;   // Gemma 3's rope_local_base_freq

  bool gemma() const { return architecture.starts_with("Gemma"); }
};

// GPT-2's byte-to-character map: printable bytes stand for themselves, the others for U+0100 on.
inline std::string byte_level_char(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// 256 byte tokens, merges of common English pairs up to n_vocab - 2, then two special tokens.
inline nlohmann::ordered_json byte_level_tokenizer(int n_vocab) {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(b)] = b;
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  const char* pairs[][2] = {{"t", "h"}, {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"e", "r"}, {"a", "n"},
                            {"Ġ", "a"}, {"o", "n"}, {"r", "e"}, {"e", "n"}, {"Ġ", "s"}, {"o", "u"}, {"e", "d"}};
  int id = 256;
  for (const auto& p : pairs) {
    if (id >= n_vocab - 2) break;
    const std::string merged = std::string(p[0]) + p[1];
    if (vocab.contains(merged)) continue;
    vocab[merged] = id++;
    merges.push_back(std::string(p[0]) + " " + p[1]);
  }
  for (int i = 0; id < n_vocab - 2; ++i) vocab["<unused" + std::to_string(i) + ">"] = id++;
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (const char* special : {"<|begin_of_text|>", "<|end_of_text|>"}) {
    added.push_back({{"id", id}, {"content", special}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
    vocab[special] = id++;
  }
  const char* llama3_split =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", llama3_split}}}, {"behavior", "Isolated"}, {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
          {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
            {"ignore_merges", true}, {"vocab", vocab}, {"merges", merges}}}};
}

// A tensor's values as `dtype` bytes.
inline std::string encode(const std::vector<float>& v, const std::string& dtype) {
  std::string out;
  if (dtype == "F32") {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  out.resize(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = dtype == "F16" ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

// The folder's tensors in transformers' names and shapes, with random values.
inline std::vector<Entry> hf_tensors(const HfFolderSpec& s) {
  std::mt19937 rng(s.seed);
  const int head_dim = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int64_t q = int64_t{s.n_head} * head_dim, kv = int64_t{s.n_head_kv} * head_dim;
  std::vector<Entry> out;
  // A norm's weight is about 1 as the model applies it: Gemma's stored w multiplies by 1 + w.
  const float norm_center = s.gemma() ? 0.0f : 1.0f;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const float scale = norm ? 0.2f : 1.0f / std::sqrt(static_cast<float>(shape.back()));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = (norm ? norm_center : 0.0f) + scale * u(rng);
    out.push_back({name, s.dtype, shape, encode(v, s.dtype)});
  };
  if (s.architecture == "OPTForCausalLM") {
    // OPT: the decoder's names, biases on everything, 2 position rows no position uses.
    add("model.decoder.embed_tokens.weight", {s.n_vocab, s.n_embd}, false);
    add("model.decoder.embed_positions.weight", {s.n_ctx + 2, s.n_embd}, false);
    for (int il = 0; il < s.n_layer; ++il) {
      const std::string p = "model.decoder.layers." + std::to_string(il) + ".";
      for (const char* norm : {"self_attn_layer_norm", "final_layer_norm"}) {
        add(p + norm + ".weight", {s.n_embd}, true);
        add(p + norm + ".bias", {s.n_embd}, false);
      }
      for (const char* proj : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"}) {
        add(p + proj + ".weight", {s.n_embd, s.n_embd}, false);
        add(p + proj + ".bias", {s.n_embd}, false);
      }
      add(p + "fc1.weight", {s.n_ff, s.n_embd}, false);
      add(p + "fc1.bias", {s.n_ff}, false);
      add(p + "fc2.weight", {s.n_embd, s.n_ff}, false);
      add(p + "fc2.bias", {s.n_embd}, false);
    }
    add("model.decoder.final_layer_norm.weight", {s.n_embd}, true);
    add("model.decoder.final_layer_norm.bias", {s.n_embd}, false);
    if (!s.tied) add("lm_head.weight", {s.n_vocab, s.n_embd}, false);
    return out;
  }
  add("model.embed_tokens.weight", {s.n_vocab, s.n_embd}, false);
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string p = "model.layers." + std::to_string(il) + ".";
    add(p + "input_layernorm.weight", {s.n_embd}, true);
    const bool fused = s.architecture == "Phi3ForCausalLM";
    if (fused) {
      add(p + "self_attn.qkv_proj.weight", {q + 2 * kv, s.n_embd}, false);
    } else {
      add(p + "self_attn.q_proj.weight", {q, s.n_embd}, false);
      add(p + "self_attn.k_proj.weight", {kv, s.n_embd}, false);
      add(p + "self_attn.v_proj.weight", {kv, s.n_embd}, false);
    }
    if (s.bias) {
      add(p + "self_attn.q_proj.bias", {q}, false);
      add(p + "self_attn.k_proj.bias", {kv}, false);
      add(p + "self_attn.v_proj.bias", {kv}, false);
    }
    if (s.architecture == "Qwen3ForCausalLM" || s.architecture == "Gemma3ForCausalLM") {
      add(p + "self_attn.q_norm.weight", {head_dim}, true);
      add(p + "self_attn.k_norm.weight", {head_dim}, true);
    }
    add(p + "self_attn.o_proj.weight", {s.n_embd, q}, false);
    add(p + "post_attention_layernorm.weight", {s.n_embd}, true);
    if (s.gemma()) {
      add(p + "pre_feedforward_layernorm.weight", {s.n_embd}, true);
      add(p + "post_feedforward_layernorm.weight", {s.n_embd}, true);
    }
    if (fused) {
      add(p + "mlp.gate_up_proj.weight", {2 * int64_t{s.n_ff}, s.n_embd}, false);
    } else {
      add(p + "mlp.gate_proj.weight", {s.n_ff, s.n_embd}, false);
      add(p + "mlp.up_proj.weight", {s.n_ff, s.n_embd}, false);
    }
    add(p + "mlp.down_proj.weight", {s.n_embd, s.n_ff}, false);
  }
  add("model.norm.weight", {s.n_embd}, true);
  if (!s.tied) add("lm_head.weight", {s.n_vocab, s.n_embd}, false);
  return out;
}

inline nlohmann::ordered_json opt_config(const HfFolderSpec& s) {
  return {{"architectures", {s.architecture}},
          {"activation_function", "relu"},
          {"do_layer_norm_before", true},
          {"enable_bias", true},
          {"ffn_dim", s.n_ff},
          {"hidden_size", s.n_embd},
          {"layer_norm_elementwise_affine", true},
          {"max_position_embeddings", s.n_ctx},
          {"model_type", "opt"},
          {"num_attention_heads", s.n_head},
          {"num_hidden_layers", s.n_layer},
          {"tie_word_embeddings", s.tied},
          {"torch_dtype", "float32"},
          {"vocab_size", s.n_vocab},
          {"word_embed_proj_dim", s.n_embd}};
}

inline nlohmann::ordered_json hf_config(const HfFolderSpec& s) {
  if (s.architecture == "OPTForCausalLM") return opt_config(s);
  nlohmann::ordered_json c = {{"architectures", {s.architecture}},
                              {"hidden_act", "silu"},
                              {"hidden_size", s.n_embd},
                              {"intermediate_size", s.n_ff},
                              {"max_position_embeddings", s.n_ctx},
                              {"num_attention_heads", s.n_head},
                              {"num_hidden_layers", s.n_layer},
                              {"num_key_value_heads", s.n_head_kv},
                              {"rms_norm_eps", 1e-5},
                              {"rope_theta", s.rope_theta},
                              {"tie_word_embeddings", s.tied},
                              {"torch_dtype", "float32"},
                              {"vocab_size", s.n_vocab},
                              {"bos_token_id", s.n_vocab - 2},
                              {"eos_token_id", s.n_vocab - 1}};
  if (!s.rope_scaling.is_null()) c["rope_scaling"] = s.rope_scaling;
  if (s.head_dim > 0) c["head_dim"] = s.head_dim;
  if (s.original_ctx > 0) c["original_max_position_embeddings"] = s.original_ctx;
  if (!s.gemma() && s.sliding_window > 0) c["sliding_window"] = s.sliding_window;  // Mistral, Phi-3
  if (s.gemma()) {
    c.erase("hidden_act");
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["query_pre_attn_scalar"] = s.query_pre_attn_scalar;
    c["sliding_window"] = s.sliding_window;
    c["attn_logit_softcapping"] = s.attn_softcap > 0 ? nlohmann::ordered_json(s.attn_softcap) : nullptr;
    c["final_logit_softcapping"] = s.final_softcap > 0 ? nlohmann::ordered_json(s.final_softcap) : nullptr;
    if (s.rope_local_theta > 0) c["rope_local_base_freq"] = s.rope_local_theta;
  }
  return c;
}

// Writes the folder's files into `dir` (which exists): the tensors given (hf_tensors by default)
// split over spec.shards files.
inline void write_hf_folder(const HfFolderSpec& s, const std::string& dir, std::vector<Entry> tensors = {}) {
  if (tensors.empty()) tensors = hf_tensors(s);
  write_file(dir + "/config.json", hf_config(s).dump(2));
  write_file(dir + "/tokenizer.json", byte_level_tokenizer(s.n_vocab).dump());
  if (s.shards <= 1) {
    write_file(dir + "/model.safetensors", safetensors(tensors));
    return;
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  const size_t per_shard = (tensors.size() + s.shards - 1) / s.shards;
  for (int i = 0; i < s.shards; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i + 1, s.shards);
    std::vector<Entry> part;
    for (size_t t = i * per_shard; t < tensors.size() && t < (i + 1) * per_shard; ++t) {
      part.push_back(tensors[t]);
      weight_map[tensors[t].name] = name;
    }
    write_file(dir + "/" + name, safetensors(part));
  }
  write_file(dir + "/model.safetensors.index.json",
             nlohmann::ordered_json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(2));
}

}  // namespace leoam::testing_util
