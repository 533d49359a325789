#include "model/weights.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/ggml_type.h"
#include "gguf/gguf_file.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/row_groups.h"

namespace leoam {

namespace {

// LEOAM_ROW_GROUPS=0 keeps every matrix as the file stores it (for comparing the two layouts).
bool row_groups_enabled() {
  const char* v = std::getenv("LEOAM_ROW_GROUPS");
  return v == nullptr || std::string_view(v) != "0";
}

// Copies of the matrices in the row-group layout, owned by `weights`, for those whose type has
// one; the file's pages they came from are released, so the weights are not resident twice. The
// copies are split over up to 8 threads (the copy is memory-bound).
// They lie in one block on huge pages: a decode step streams through all of them, and on 4 KiB
// pages the Llama-3-8B shape's 4.2 GB take 1M TLB entries a step, which slowed the first step
// after a long fill far below the next ones (docs/cpu.md#memory).
Status group_matrices(const GgufFile& gguf, const std::vector<kernels::MatrixView*>& matrices, ModelWeights& weights) {
  std::vector<kernels::MatrixView*> todo;
  for (kernels::MatrixView* m : matrices) {
    if (kernels::has_row_groups(m->type) && m->n_rows >= kernels::kRowGroup && !m->row_groups) todo.push_back(m);
  }
  if (todo.empty()) return Status::ok();
  constexpr size_t kAlign = 64;
  std::vector<size_t> offset;
  size_t total = 0;
  for (const kernels::MatrixView* m : todo) {
    offset.push_back(total);
    total += (m->row_bytes * static_cast<size_t>(m->n_rows) + kAlign - 1) / kAlign * kAlign;
  }
  weights.grouped.reset(static_cast<uint8_t*>(allocate_huge_aware(total, kAlign)));
  if (weights.grouped == nullptr) {
    return resource_exhausted(gguf.path() + ": out of memory for the row-group copies of the weights (" +
                              std::to_string(total >> 20) + " MiB)");
  }
  std::vector<uint8_t*> dst;
  for (size_t o : offset) dst.push_back(weights.grouped.get() + o);
  const size_t n_threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < std::min(n_threads, todo.size()); ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < todo.size(); i += n_threads) {
        const kernels::MatrixView& m = *todo[i];
        kernels::group_rows(m.type, m.data, m.row_bytes, m.n_rows, dst[i]);
        gguf.release_pages(m.data, m.row_bytes * static_cast<size_t>(m.n_rows));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (size_t i = 0; i < todo.size(); ++i) {
    todo[i]->data = dst[i];
    todo[i]->row_groups = true;
  }
  return Status::ok();
}

std::string shape_string(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

class TensorMapper {
 public:
  explicit TensorMapper(const GgufFile& gguf) : gguf_(gguf) {}

  // A present tensor of a supported type with exactly the dimensions `want` (trailing 1s
  // ignored); null with *status set otherwise. Absent and optional: null with ok status.
  const GgufTensorInfo* find(const std::string& name, const std::vector<int64_t>& want, bool optional,
                             Status* status) const {
    const GgufTensorInfo* t = gguf_.find_tensor(name);
    if (t == nullptr) {
      if (!optional) *status = not_found(path() + ": missing tensor '" + name + "'");
      return nullptr;
    }
    if (!ggml_type_supported(t->type_id)) {
      *status = unsupported(path() + ": tensor '" + name + "' has type " + ggml_type_name(t->type_id) +
                            ", not supported; supported: " + std::string(supported_types_list()));
      return nullptr;
    }
    std::vector<int64_t> ne = t->ne;
    while (ne.size() > want.size() && ne.back() == 1) ne.pop_back();
    if (ne != want) {
      *status = invalid_argument(path() + ": tensor '" + name + "' has shape " + shape_string(t->ne) +
                                 ", expected " + shape_string(want) + " from the model's hyperparameters");
      return nullptr;
    }
    if (want[0] % ggml_block_size(t->type()) != 0) {
      *status = corrupt(path() + ": tensor '" + name + "' has rows of " + std::to_string(want[0]) +
                        " elements, not a multiple of the " + ggml_type_name(t->type_id) + " block size " +
                        std::to_string(ggml_block_size(t->type())));
      return nullptr;
    }
    int64_t n_rows = 1;
    for (size_t i = 1; i < want.size(); ++i) n_rows *= want[i];
    const size_t expect_bytes = ggml_row_size(t->type(), want[0]) * static_cast<size_t>(n_rows);
    if (t->data == nullptr || t->n_bytes != expect_bytes) {
      *status = corrupt(path() + ": tensor '" + name + "' holds " + std::to_string(t->n_bytes) + " bytes, expected " +
                        std::to_string(expect_bytes));
      return nullptr;
    }
    return t;
  }

  Status matrix(const std::string& name, int64_t n_cols, int64_t n_rows, kernels::MatrixView* out) const {
    Status st;
    const GgufTensorInfo* t = find(name, {n_cols, n_rows}, false, &st);
    if (t == nullptr) return st;
    out->type = t->type();
    out->data = t->data;
    out->n_cols = n_cols;
    out->n_rows = n_rows;
    out->row_bytes = ggml_row_size(t->type(), n_cols);
    return Status::ok();
  }

  // A matrix stored as several stacked along its rows (phi3's attn_qkv, its ffn_up of gate and
  // up): a view of each part's rows, in order.
  Status fused(const std::string& name, int64_t n_cols,
               std::initializer_list<std::pair<int64_t, kernels::MatrixView*>> parts) const {
    int64_t n_rows = 0;
    for (const auto& [rows, out] : parts) n_rows += rows;
    kernels::MatrixView all;
    LEOAM_RETURN_IF_ERROR(matrix(name, n_cols, n_rows, &all));
    int64_t row0 = 0;
    for (const auto& [rows, out] : parts) {
      *out = all;
      out->data = static_cast<const uint8_t*>(all.data) + row0 * all.row_bytes;
      out->n_rows = rows;
      row0 += rows;
    }
    return Status::ok();
  }

  bool has(const std::string& name) const { return gguf_.find_tensor(name) != nullptr; }

  // An f32 view of a 1-D tensor of n elements (converted into `weights.converted` when needed).
  Status vector(const std::string& name, int64_t n, bool optional, ModelWeights& weights, const float** out) const {
    Status st;
    const GgufTensorInfo* t = find(name, {n}, optional, &st);
    if (t == nullptr) return st;
    if (t->type() == GgmlType::kF32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0) {
      *out = reinterpret_cast<const float*>(t->data);
      return Status::ok();
    }
    std::unique_ptr<float[]> values(new float[static_cast<size_t>(n)]);
    kernels::dequantize_row(t->type(), t->data, values.get(), n);
    *out = values.get();
    weights.converted.push_back(std::move(values));
    return Status::ok();
  }

  const std::string& path() const { return gguf_.path(); }

 private:
  const GgufFile& gguf_;
};

}  // namespace

const float* ModelWeights::rope_factors(const ModelHparams& hp, int64_t n_ctx) const {
  if (rope_factors_long == nullptr) return rope_freqs;
  return n_ctx > hp.rope.n_ctx_orig ? rope_factors_long : rope_factors_short;
}

Result<ModelWeights> map_weights(const GgufFile& gguf, ModelHparams& hp) {
  const TensorMapper m(gguf);
  ModelWeights w;

  // The vocabulary size comes from the embedding matrix.
  const GgufTensorInfo* embd = gguf.find_tensor("token_embd.weight");
  if (embd == nullptr) return not_found(gguf.path() + ": missing tensor 'token_embd.weight'");
  if (embd->ne.size() < 2) {
    return invalid_argument(gguf.path() + ": tensor 'token_embd.weight' has shape " + shape_string(embd->ne) +
                            ", expected [" + std::to_string(hp.n_embd) + ", n_vocab]");
  }
  const int64_t n_vocab = embd->ne[1];
  if (hp.n_vocab != 0 && hp.n_vocab != n_vocab) {
    return invalid_argument(gguf.path() + ": key '" + hp.arch_name + ".vocab_size' is " + std::to_string(hp.n_vocab) +
                            " but tensor 'token_embd.weight' has " + std::to_string(n_vocab) + " rows");
  }
  if (n_vocab <= 0 || n_vocab > (int64_t{1} << 31) - 1) {
    return invalid_argument(gguf.path() + ": tensor 'token_embd.weight' has " + std::to_string(n_vocab) + " rows");
  }
  hp.n_vocab = n_vocab;
  LEOAM_RETURN_IF_ERROR(m.matrix("token_embd.weight", hp.n_embd, n_vocab, &w.token_embd));

  const int64_t n_q = hp.n_embd_q();
  const int64_t n_kv = hp.n_embd_kv();
  w.layers.resize(hp.n_layer);
  const bool layer_norm = hp.norm == NormKind::kLayer;
  const bool gemma = is_gemma(hp.arch);
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    LEOAM_RETURN_IF_ERROR(m.vector(p + "attn_norm.weight", hp.n_embd, false, w, &L.attn_norm));
    if (layer_norm) LEOAM_RETURN_IF_ERROR(m.vector(p + "attn_norm.bias", hp.n_embd, false, w, &L.attn_norm_b));
    if (m.has(p + "attn_qkv.weight")) {
      LEOAM_RETURN_IF_ERROR(
          m.fused(p + "attn_qkv.weight", hp.n_embd, {{n_q, &L.attn_q}, {n_kv, &L.attn_k}, {n_kv, &L.attn_v}}));
    } else {
      LEOAM_RETURN_IF_ERROR(m.matrix(p + "attn_q.weight", hp.n_embd, n_q, &L.attn_q));
      LEOAM_RETURN_IF_ERROR(m.matrix(p + "attn_k.weight", hp.n_embd, n_kv, &L.attn_k));
      LEOAM_RETURN_IF_ERROR(m.matrix(p + "attn_v.weight", hp.n_embd, n_kv, &L.attn_v));
    }
    LEOAM_RETURN_IF_ERROR(m.vector(p + "attn_q.bias", n_q, true, w, &L.attn_q_bias));
    LEOAM_RETURN_IF_ERROR(m.vector(p + "attn_k.bias", n_kv, true, w, &L.attn_k_bias));
    LEOAM_RETURN_IF_ERROR(m.vector(p + "attn_v.bias", n_kv, true, w, &L.attn_v_bias));
    if (hp.arch == ModelArch::kQwen3 || hp.arch == ModelArch::kGemma3) {
      LEOAM_RETURN_IF_ERROR(m.vector(p + "attn_q_norm.weight", hp.head_dim, false, w, &L.attn_q_norm));
      LEOAM_RETURN_IF_ERROR(m.vector(p + "attn_k_norm.weight", hp.head_dim, false, w, &L.attn_k_norm));
    }
    LEOAM_RETURN_IF_ERROR(m.matrix(p + "attn_output.weight", n_q, hp.n_embd, &L.attn_output));
    LEOAM_RETURN_IF_ERROR(m.vector(p + "attn_output.bias", hp.n_embd, true, w, &L.attn_output_bias));
    if (gemma) {
      LEOAM_RETURN_IF_ERROR(m.vector(p + "post_attention_norm.weight", hp.n_embd, false, w, &L.attn_post_norm));
    }
    LEOAM_RETURN_IF_ERROR(m.vector(p + "ffn_norm.weight", hp.n_embd, false, w, &L.ffn_norm));
    if (layer_norm) LEOAM_RETURN_IF_ERROR(m.vector(p + "ffn_norm.bias", hp.n_embd, false, w, &L.ffn_norm_b));
    if (hp.arch == ModelArch::kPhi3) {  // gate's rows first, then up's
      LEOAM_RETURN_IF_ERROR(m.fused(p + "ffn_up.weight", hp.n_embd, {{hp.n_ff, &L.ffn_gate}, {hp.n_ff, &L.ffn_up}}));
    } else {
      if (hp.ffn_activation != FfnActivation::kRelu) {
        LEOAM_RETURN_IF_ERROR(m.matrix(p + "ffn_gate.weight", hp.n_embd, hp.n_ff, &L.ffn_gate));
      }
      LEOAM_RETURN_IF_ERROR(m.matrix(p + "ffn_up.weight", hp.n_embd, hp.n_ff, &L.ffn_up));
    }
    LEOAM_RETURN_IF_ERROR(m.vector(p + "ffn_up.bias", hp.n_ff, true, w, &L.ffn_up_bias));
    LEOAM_RETURN_IF_ERROR(m.matrix(p + "ffn_down.weight", hp.n_ff, hp.n_embd, &L.ffn_down));
    LEOAM_RETURN_IF_ERROR(m.vector(p + "ffn_down.bias", hp.n_embd, true, w, &L.ffn_down_bias));
    if (gemma) LEOAM_RETURN_IF_ERROR(m.vector(p + "post_ffw_norm.weight", hp.n_embd, false, w, &L.ffn_post_norm));
  }
  LEOAM_RETURN_IF_ERROR(m.vector("output_norm.weight", hp.n_embd, false, w, &w.output_norm));
  if (layer_norm) {
    LEOAM_RETURN_IF_ERROR(m.vector("output_norm.bias", hp.n_embd, false, w, &w.output_norm_b));
  }
  if (hp.arch == ModelArch::kOpt) {
    LEOAM_RETURN_IF_ERROR(m.matrix("position_embd.weight", hp.n_embd, hp.n_ctx_train, &w.position_embd));
  }
  if (gguf.find_tensor("output.weight") != nullptr) {
    LEOAM_RETURN_IF_ERROR(m.matrix("output.weight", hp.n_embd, n_vocab, &w.output));
  } else {
    w.output = w.token_embd;
    w.output_tied = true;
  }
  LEOAM_RETURN_IF_ERROR(m.vector("rope_freqs.weight", hp.rope.n_rot / 2, true, w, &w.rope_freqs));
  LEOAM_RETURN_IF_ERROR(m.vector("rope_factors_long.weight", hp.rope.n_rot / 2, true, w, &w.rope_factors_long));
  LEOAM_RETURN_IF_ERROR(m.vector("rope_factors_short.weight", hp.rope.n_rot / 2, true, w, &w.rope_factors_short));
  if ((w.rope_factors_long == nullptr) != (w.rope_factors_short == nullptr)) {
    return invalid_argument(gguf.path() + ": LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight");
  }
  // The matrices only matvec and gemm read go to the row-group layout; token_embd (rows looked
  // up one at a time) and an output tied to it stay as stored.
  if (row_groups_enabled()) {
    std::vector<kernels::MatrixView*> matrices;
    for (LayerWeights& L : w.layers) {
      for (kernels::MatrixView* mv :
           {&L.attn_q, &L.attn_k, &L.attn_v, &L.attn_output, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) {
        matrices.push_back(mv);
      }
    }
    if (!w.output_tied) matrices.push_back(&w.output);
    LEOAM_RETURN_IF_ERROR(group_matrices(gguf, matrices, w));
  }
  return w;
}

}  // namespace leoam
