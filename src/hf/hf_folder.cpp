#include "hf/hf_folder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>
#include <vector>

#include "gguf/gguf_writer.h"
#include "gguf/quoted_name.h"
#include "gguf/safetensors_checkpoint.h"
#include "kernels/cpu/quant.h"
#include "hf/hf_config.h"
#include "tokenizer/hf_tokenizer_import.h"

namespace leoam {
namespace {

namespace fs = std::filesystem;

// One tensor the architecture uses: its GGUF name and the shape config.json implies, numpy's
// order (HF's [out, in], which is GGUF's ne [in, out] reversed).
struct Expected {
  std::string gguf_name;
  std::vector<int64_t> shape;
  bool permute_heads = false;  // q or k of the llama family: rows regrouped for GGUF's RoPE pairing
  int n_heads = 0;
  bool plus_one = false;  // a Gemma norm: GGUF holds 1 + w
  int64_t skip_rows = 0;  // leading rows GGUF leaves out (OPT's 2 unused position rows)
};

// OPT's tensors: the decoder's names, biases everywhere, learned positions from row 2 on.
std::map<std::string, Expected> expected_opt_tensors(const HfConfig& c) {
  const int64_t d = c.n_embd;
  std::map<std::string, Expected> m;
  m["model.decoder.embed_tokens.weight"] = {"token_embd.weight", {c.n_vocab, d}};
  m["model.decoder.embed_positions.weight"] = {
      .gguf_name = "position_embd.weight", .shape = {c.n_ctx + 2, d}, .skip_rows = 2};
  m["model.decoder.final_layer_norm.weight"] = {"output_norm.weight", {d}};
  m["model.decoder.final_layer_norm.bias"] = {"output_norm.bias", {d}};
  if (!c.tie_word_embeddings) m["lm_head.weight"] = {"output.weight", {c.n_vocab, d}};
  const std::pair<const char*, const char*> vectors[] = {
      {"self_attn_layer_norm", "attn_norm"}, {"final_layer_norm", "ffn_norm"}, {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},         {"self_attn.v_proj", "attn_v"},   {"self_attn.out_proj", "attn_output"},
      {"fc1", "ffn_up"},                      {"fc2", "ffn_down"}};
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string hf = "model.decoder.layers." + std::to_string(il) + ".";
    const std::string gg = "blk." + std::to_string(il) + ".";
    for (const auto& [hf_name, gg_name] : vectors) {
      const std::string h = hf_name;
      const int64_t rows = h == "fc1" ? c.n_ff : d;
      const int64_t cols = h == "fc2" ? c.n_ff : d;
      std::vector<int64_t> shape = {rows, cols};
      if (h.ends_with("layer_norm")) shape = {d};
      m[hf + h + ".weight"] = {gg + gg_name + ".weight", shape};
      m[hf + h + ".bias"] = {gg + gg_name + ".bias", {rows}};
    }
  }
  return m;
}

// HF tensor name -> what it is, for each architecture config.json may name (hf_config.h).
std::map<std::string, Expected> expected_tensors(const HfConfig& c) {
  if (c.opt()) return expected_opt_tensors(c);
  const int64_t q = int64_t{c.n_head} * c.head_dim;
  const int64_t kv = int64_t{c.n_head_kv} * c.head_dim;
  std::map<std::string, Expected> m;
  m["model.embed_tokens.weight"] = {"token_embd.weight", {c.n_vocab, c.n_embd}};
  // A norm's weight: Gemma's are stored as w where RMSNorm multiplies by 1 + w.
  const auto norm = [&](std::string gguf_name, int64_t n) {
    return Expected{.gguf_name = std::move(gguf_name), .shape = {n}, .plus_one = c.gemma};
  };
  m["model.norm.weight"] = norm("output_norm.weight", c.n_embd);
  if (!c.tie_word_embeddings) m["lm_head.weight"] = {"output.weight", {c.n_vocab, c.n_embd}};
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string hf = "model.layers." + std::to_string(il) + ".";
    const std::string gg = "blk." + std::to_string(il) + ".";
    m[hf + "input_layernorm.weight"] = norm(gg + "attn_norm.weight", c.n_embd);
    if (c.fused_projections) {  // phi3: q, k, v stacked; gate and up stacked, as GGUF's phi3 keeps them
      m[hf + "self_attn.qkv_proj.weight"] = {gg + "attn_qkv.weight", {q + 2 * kv, c.n_embd}};
      m[hf + "mlp.gate_up_proj.weight"] = {gg + "ffn_up.weight", {2 * c.n_ff, c.n_embd}};
    } else {
      m[hf + "self_attn.q_proj.weight"] = {gg + "attn_q.weight", {q, c.n_embd}, c.permute_qk, c.n_head};
      m[hf + "self_attn.k_proj.weight"] = {gg + "attn_k.weight", {kv, c.n_embd}, c.permute_qk, c.n_head_kv};
      m[hf + "self_attn.v_proj.weight"] = {gg + "attn_v.weight", {kv, c.n_embd}};
      m[hf + "mlp.gate_proj.weight"] = {gg + "ffn_gate.weight", {c.n_ff, c.n_embd}};
      m[hf + "mlp.up_proj.weight"] = {gg + "ffn_up.weight", {c.n_ff, c.n_embd}};
    }
    if (c.attention_bias) {
      m[hf + "self_attn.q_proj.bias"] = {gg + "attn_q.bias", {q}, c.permute_qk, c.n_head};
      m[hf + "self_attn.k_proj.bias"] = {gg + "attn_k.bias", {kv}, c.permute_qk, c.n_head_kv};
      m[hf + "self_attn.v_proj.bias"] = {gg + "attn_v.bias", {kv}};
    }
    if (c.head_norms) {
      m[hf + "self_attn.q_norm.weight"] = norm(gg + "attn_q_norm.weight", c.head_dim);
      m[hf + "self_attn.k_norm.weight"] = norm(gg + "attn_k_norm.weight", c.head_dim);
    }
    m[hf + "self_attn.o_proj.weight"] = {gg + "attn_output.weight", {c.n_embd, q}};
    if (c.gemma) {  // Gemma's post_attention_layernorm is the attention output's norm, not the FFN's
      m[hf + "post_attention_layernorm.weight"] = norm(gg + "post_attention_norm.weight", c.n_embd);
      m[hf + "pre_feedforward_layernorm.weight"] = norm(gg + "ffn_norm.weight", c.n_embd);
      m[hf + "post_feedforward_layernorm.weight"] = norm(gg + "post_ffw_norm.weight", c.n_embd);
    } else {
      m[hf + "post_attention_layernorm.weight"] = norm(gg + "ffn_norm.weight", c.n_embd);
    }
    m[hf + "mlp.down_proj.weight"] = {gg + "ffn_down.weight", {c.n_embd, c.n_ff}};
  }
  return m;
}

// Tensors a checkpoint may hold that the forward pass recomputes.
bool ignorable(const std::string& name) { return name.ends_with(".rotary_emb.inv_freq"); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// HF's llama checkpoints order each head's q/k rows as two halves that RoPE pairs (i, i + d/2);
// GGUF's llama orders them as adjacent pairs (2i, 2i + 1). Row 2i + s of a head takes HF's row
// s * d/2 + i. Rows of row_bytes bytes (one element for a bias), any element type.
void permute_rope_rows(const uint8_t* src, int64_t rows, size_t row_bytes, int n_heads, uint8_t* dst) {
  const int64_t d = rows / n_heads;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < d / 2; ++i) {
      for (int64_t s = 0; s < 2; ++s) {
        std::memcpy(dst + (h * d + 2 * i + s) * row_bytes, src + (h * d + s * (d / 2) + i) * row_bytes, row_bytes);
      }
    }
  }
}

GgmlType stored_type(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF16: return GgmlType::kF16;
    case SafetensorsDtype::kBF16: return GgmlType::kBF16;
    case SafetensorsDtype::kF32: break;
  }
  return GgmlType::kF32;
}

Status add_tensor(const std::string& file, const SafetensorsTensor& stored, const Expected& expected,
                  const HfImportOptions& options, GgufWriter& out) {
  if (stored.shape != expected.shape) {
    return invalid_argument(file + ": tensor " + quoted_name(stored.name) + " has shape " + shape_text(stored.shape) +
                            ", but config.json implies " + shape_text(expected.shape));
  }
  // The rows GGUF keeps: all but the skipped leading ones.
  SafetensorsTensor t = stored;
  Expected e = expected;
  if (e.skip_rows > 0) {
    const size_t row_bytes = t.n_bytes / static_cast<size_t>(t.shape[0]);
    t.data += e.skip_rows * row_bytes;
    t.n_bytes -= e.skip_rows * row_bytes;
    t.shape[0] -= e.skip_rows;
    e.shape[0] -= e.skip_rows;
  }
  const int64_t rows = e.shape[0];
  const int64_t cols = e.shape.size() == 2 ? e.shape[1] : 1;
  std::vector<int64_t> ne(e.shape.rbegin(), e.shape.rend());
  GgmlType type = GgmlType::kF32;
  if (e.shape.size() == 2) {
    type = options.type.value_or(stored_type(t.dtype));
    if (cols % ggml_block_size(type) != 0) type = GgmlType::kF16;
  }
  if (type == stored_type(t.dtype) && !e.plus_one) {  // the stored bytes as they are: no conversion
    std::vector<uint8_t> bytes(t.n_bytes);
    if (e.permute_heads) {
      permute_rope_rows(t.data, rows, t.n_bytes / static_cast<size_t>(rows), e.n_heads, bytes.data());
    } else {
      std::memcpy(bytes.data(), t.data, t.n_bytes);
    }
    return out.add_tensor(e.gguf_name, type, std::move(ne), std::move(bytes)).with_context(file);
  }
  std::vector<float> values(static_cast<size_t>(t.n_elements()));
  kernels::dequantize_row(stored_type(t.dtype), t.data, values.data(), t.n_elements());
  if (e.plus_one) {
    for (float& x : values) x += 1.0f;
  }
  if (e.permute_heads) {
    std::vector<float> permuted(values.size());
    permute_rope_rows(reinterpret_cast<const uint8_t*>(values.data()), rows, cols * sizeof(float), e.n_heads,
                      reinterpret_cast<uint8_t*>(permuted.data()));
    values = std::move(permuted);
  }
  if (type == GgmlType::kF16) {
    for (const float x : values) {
      if (std::isfinite(x) && std::fabs(x) > 65504.0f) {
        return invalid_argument(file + ": tensor " + quoted_name(t.name) + " holds " + std::to_string(x) +
                                ", beyond f16's range; load it with --type f32 or bf16");
      }
    }
  }
  return out.add_tensor_f32(e.gguf_name, type, std::move(ne), values).with_context(file);
}

Status import_tensors(const std::string& dir, const HfConfig& config, const HfImportOptions& options,
                      GgufWriter& out) {
  LEOAM_ASSIGN_OR_RETURN(SafetensorsCheckpoint checkpoint, SafetensorsCheckpoint::open(dir));
  const std::map<std::string, Expected> expected = expected_tensors(config);
  for (const SafetensorsTensor* t : checkpoint.tensors()) {
    if (expected.contains(t->name) || ignorable(t->name)) continue;
    // A tied model's stored head is the embedding again: transformers ties it on load.
    if (config.tie_word_embeddings && t->name == "lm_head.weight") continue;
    return invalid_argument(dir + ": tensor " + quoted_name(t->name) + " is not one that " + config.architecture +
                            " with this config.json uses (" + std::to_string(config.n_layer) + " layers" +
                            (config.tie_word_embeddings ? ", tied embeddings" : "") + ")");
  }
  // In GGUF's usual order: embeddings, the layers in turn, then the output.
  std::vector<std::pair<std::string, const Expected*>> order;
  for (const auto& [name, e] : expected) order.emplace_back(name, &e);
  auto rank = [](const std::string& gguf_name) {
    if (gguf_name.starts_with("token_embd")) return std::pair<int, int>(-1, 0);
    if (gguf_name.starts_with("blk.")) return std::pair<int, int>(std::stoi(gguf_name.substr(4)), 0);
    return std::pair<int, int>(1 << 30, gguf_name == "output_norm.weight" ? 0 : 1);
  };
  std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    return rank(a.second->gguf_name) < rank(b.second->gguf_name);
  });
  const auto n = static_cast<int64_t>(order.size());
  for (int64_t i = 0; i < n; ++i) {
    const auto& [name, e] = order[static_cast<size_t>(i)];
    const SafetensorsTensor* t = checkpoint.find(name);
    if (t == nullptr) {
      return not_found(dir + ": no shard holds tensor " + quoted_name(name) + ", which " + config.architecture +
                       " needs");
    }
    LEOAM_RETURN_IF_ERROR(add_tensor(dir, *t, *e, options, out));
    if (options.progress) options.progress(i + 1, n);
  }
  for (const auto& [name, factors] : {std::pair{"rope_freqs.weight", &config.rope_freq_factors},
                                      std::pair{"rope_factors_long.weight", &config.rope_long_factors},
                                      std::pair{"rope_factors_short.weight", &config.rope_short_factors}}) {
    if (factors->empty()) continue;
    const int64_t n = static_cast<int64_t>(factors->size());
    LEOAM_RETURN_IF_ERROR(out.add_tensor_f32(name, GgmlType::kF32, {n}, *factors));
  }
  return Status::ok();
}

}  // namespace

bool is_model_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::string model_source_name(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "dir/"
  return is_model_folder(path) ? p.filename().string() : p.stem().string();
}

Status import_hf_folder(const std::string& dir, const HfImportOptions& options, GgufWriter& out) {
  LEOAM_ASSIGN_OR_RETURN(HfConfig config, read_hf_config((fs::path(dir) / "config.json").string()));
  add_hf_config_metadata(config, model_source_name(dir), out);
  LEOAM_RETURN_IF_ERROR(import_hf_tokenizer(dir, out, config.n_vocab));
  return import_tensors(dir, config, options, out);
}

Result<GgufFile> open_model_source(const std::string& path, const HfImportOptions& options) {
  if (!is_model_folder(path)) {
    if (options.type) {
      return invalid_argument(path + ": a weight type (--type) applies to a Hugging Face folder; a GGUF file keeps "
                              "the types it was written with");
    }
    return GgufFile::open(path);
  }
  GgufWriter out;
  LEOAM_RETURN_IF_ERROR(import_hf_folder(path, options, out));
  return GgufFile::adopt(path, std::move(out).to_bytes());
}

Result<GgufFile> open_tokenizer_source(const std::string& path) {
  if (!is_model_folder(path)) return GgufFile::open(path);
  GgufWriter out;
  LEOAM_RETURN_IF_ERROR(import_hf_tokenizer(path, out));
  return GgufFile::adopt(path, std::move(out).to_bytes());
}

}  // namespace leoam
