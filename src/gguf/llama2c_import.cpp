#include "gguf/llama2c_import.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gguf/gguf_writer.h"
#include "io/mapped_file.h"

namespace leoam {

namespace {

constexpr size_t kHeaderBytes = 7 * sizeof(int32_t);
// 1e-5: llama2.c's RMSNorm epsilon (model.py ModelArgs.norm_eps).
constexpr float kRmsNormEps = 1e-5f;
// 1, 2, 3, 6: llama.cpp's token types (LLAMA_TOKEN_TYPE_*): normal, unknown, control, byte.
constexpr int32_t kTokenNormal = 1;
constexpr int32_t kTokenUnknown = 2;
constexpr int32_t kTokenControl = 3;
constexpr int32_t kTokenByte = 6;

int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

Result<Llama2cConfig> parse_header(const Llama2cInput& in) {
  if (in.size < kHeaderBytes) {
    return corrupt(in.name + ": truncated: a llama2.c checkpoint starts with a 28-byte header, the file has " +
                   std::to_string(in.size) + " bytes");
  }
  Llama2cConfig c;
  c.dim = load_i32(in.data);
  c.hidden_dim = load_i32(in.data + 4);
  c.n_layers = load_i32(in.data + 8);
  c.n_heads = load_i32(in.data + 12);
  c.n_kv_heads = load_i32(in.data + 16);
  const int32_t vocab = load_i32(in.data + 20);
  c.seq_len = load_i32(in.data + 24);
  const std::string dims = "dim=" + std::to_string(c.dim) + " hidden_dim=" + std::to_string(c.hidden_dim) +
                           " n_layers=" + std::to_string(c.n_layers) + " n_heads=" + std::to_string(c.n_heads) +
                           " n_kv_heads=" + std::to_string(c.n_kv_heads) + " vocab_size=" + std::to_string(vocab) +
                           " seq_len=" + std::to_string(c.seq_len);
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || vocab == 0 ||
      vocab == INT32_MIN || c.seq_len <= 0) {
    return corrupt(in.name + ": corrupt llama2.c header (" + dims + "): every size must be positive");
  }
  if (c.dim % c.n_heads != 0 || (c.dim / c.n_heads) % 2 != 0 || c.n_heads % c.n_kv_heads != 0) {
    return corrupt(in.name + ": corrupt llama2.c header (" + dims +
                   "): dim must split into n_heads heads of even size, and n_heads must be a multiple of n_kv_heads");
  }
  c.shared_classifier = vocab > 0;
  c.vocab_size = vocab > 0 ? vocab : -vocab;
  return c;
}

// Walks the f32 arrays of the checkpoint in order; sizes were checked against the file up front.
class FloatReader {
 public:
  explicit FloatReader(const uint8_t* p) : p_(p) {}
  std::vector<uint8_t> take(uint64_t n_floats) {
    std::vector<uint8_t> out(p_, p_ + n_floats * 4);
    p_ += n_floats * 4;
    return out;
  }
  void skip(uint64_t n_floats) { p_ += n_floats * 4; }

 private:
  const uint8_t* p_;
};

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
};

bool is_byte_token(const std::string& t) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

Result<Vocab> parse_tokenizer(const Llama2cInput& in, int32_t n_vocab) {
  if (in.size < 4) {
    return corrupt(in.name + ": truncated: a llama2.c tokenizer starts with a 4-byte max_token_length, the file has " +
                   std::to_string(in.size) + " bytes");
  }
  const int32_t max_len = load_i32(in.data);
  if (max_len < 0) return corrupt(in.name + ": corrupt tokenizer: max_token_length is " + std::to_string(max_len));
  Vocab v;
  // Each token takes at least 8 bytes, so this bounds the allocation by the file size.
  if (static_cast<uint64_t>(n_vocab) > (in.size - 4) / 8) {
    return corrupt(in.name + ": truncated: the checkpoint's vocab_size " + std::to_string(n_vocab) +
                   " tokens cannot fit in " + std::to_string(in.size) + " bytes");
  }
  v.tokens.reserve(static_cast<size_t>(n_vocab));
  size_t pos = 4;
  for (int32_t i = 0; i < n_vocab; ++i) {
    if (in.size - pos < 8) {
      return corrupt(in.name + ": truncated: token " + std::to_string(i) + " of " + std::to_string(n_vocab) +
                     " starts at offset " + std::to_string(pos) + " but the file ends at " + std::to_string(in.size));
    }
    float score;
    std::memcpy(&score, in.data + pos, 4);
    const int32_t len = load_i32(in.data + pos + 4);
    pos += 8;
    if (len < 0 || static_cast<size_t>(len) > in.size - pos) {
      return corrupt(in.name + ": truncated or corrupt: token " + std::to_string(i) + " claims " + std::to_string(len) +
                     " bytes at offset " + std::to_string(pos) + " but only " + std::to_string(in.size - pos) +
                     " remain");
    }
    std::string text(reinterpret_cast<const char*>(in.data + pos), static_cast<size_t>(len));
    pos += static_cast<size_t>(len);

    // Ids 0, 1, 2 are <unk>, <s>, </s> in every SentencePiece model llama2.c exports.
    int32_t type = kTokenNormal;
    if (i == 0) {
      text = "<unk>";
      type = kTokenUnknown;
    } else if (i == 1) {
      text = "<s>";
      type = kTokenControl;
    } else if (i == 2) {
      text = "</s>";
      type = kTokenControl;
    } else if (is_byte_token(text)) {
      type = kTokenByte;
    } else {
      // llama2.c's exporter turned SentencePiece's U+2581 into ' '; turn it back.
      std::string spm;
      for (char c : text) {
        if (c == ' ') {
          spm += "\xe2\x96\x81";
        } else {
          spm += c;
        }
      }
      text = std::move(spm);
    }
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.types.push_back(type);
  }
  if (pos != in.size) {
    return corrupt(in.name + ": " + std::to_string(in.size - pos) + " unexpected bytes after the " +
                   std::to_string(n_vocab) + " tokens the checkpoint's vocab_size calls for (does the tokenizer "
                   "belong to this checkpoint?)");
  }
  return v;
}

}  // namespace

Status import_llama2c(const Llama2cInput& checkpoint, const Llama2cInput& tokenizer, GgufWriter& out) {
  LEOAM_ASSIGN_OR_RETURN(const Llama2cConfig c, parse_header(checkpoint));
  const uint64_t dim = static_cast<uint64_t>(c.dim);
  const uint64_t hidden = static_cast<uint64_t>(c.hidden_dim);
  const uint64_t n_layers = static_cast<uint64_t>(c.n_layers);
  const uint64_t vocab = static_cast<uint64_t>(c.vocab_size);
  const uint64_t head_dim = dim / static_cast<uint64_t>(c.n_heads);
  const uint64_t kv_dim = head_dim * static_cast<uint64_t>(c.n_kv_heads);
  const uint64_t seq_len = static_cast<uint64_t>(c.seq_len);

  // The header's int32s are untrusted: overflow-check every product and sum, then require the
  // file to be exactly that long before touching any weight.
  uint64_t n_floats = 0;
  bool overflow = false;
  auto add = [&](uint64_t a, uint64_t b) {
    uint64_t p = 0;
    overflow |= __builtin_mul_overflow(a, b, &p);
    overflow |= __builtin_add_overflow(n_floats, p, &n_floats);
  };
  add(vocab, dim);                        // token_embedding_table
  add(n_layers, dim);                     // rms_att
  add(n_layers, dim * dim);               // wq
  add(n_layers, 2 * kv_dim * dim);        // wk, wv
  add(n_layers, dim * dim);               // wo
  add(n_layers, dim);                     // rms_ffn
  add(n_layers, 3 * hidden * dim);        // w1, w2, w3
  add(1, dim);                            // rms_final
  add(seq_len, head_dim);                 // freq_cis_real + freq_cis_imag
  if (!c.shared_classifier) add(vocab, dim);
  uint64_t expected_bytes = 0;
  overflow |= __builtin_mul_overflow(n_floats, uint64_t{4}, &expected_bytes);
  overflow |= __builtin_add_overflow(expected_bytes, uint64_t{kHeaderBytes}, &expected_bytes);
  if (overflow || expected_bytes != checkpoint.size) {
    return corrupt(checkpoint.name + ": " + (expected_bytes > checkpoint.size || overflow ? "truncated" : "corrupt") +
                   ": the header (dim=" + std::to_string(c.dim) + " hidden_dim=" + std::to_string(c.hidden_dim) +
                   " n_layers=" + std::to_string(c.n_layers) + " n_heads=" + std::to_string(c.n_heads) +
                   " n_kv_heads=" + std::to_string(c.n_kv_heads) + " vocab_size=" + std::to_string(c.vocab_size) +
                   (c.shared_classifier ? " shared" : " separate") + " classifier, seq_len=" +
                   std::to_string(c.seq_len) + ") calls for " +
                   (overflow ? std::string("an impossible number of") : std::to_string(expected_bytes)) +
                   " bytes but the file has " + std::to_string(checkpoint.size));
  }
  LEOAM_ASSIGN_OR_RETURN(Vocab v, parse_tokenizer(tokenizer, c.vocab_size));

  out.set("general.architecture", GgufValue::from_string("llama"));
  out.set("general.name", GgufValue::from_string("llama2.c"));
  out.set("llama.context_length", GgufValue::from_u32(static_cast<uint32_t>(c.seq_len)));
  out.set("llama.embedding_length", GgufValue::from_u32(static_cast<uint32_t>(c.dim)));
  out.set("llama.block_count", GgufValue::from_u32(static_cast<uint32_t>(c.n_layers)));
  out.set("llama.feed_forward_length", GgufValue::from_u32(static_cast<uint32_t>(c.hidden_dim)));
  out.set("llama.attention.head_count", GgufValue::from_u32(static_cast<uint32_t>(c.n_heads)));
  out.set("llama.attention.head_count_kv", GgufValue::from_u32(static_cast<uint32_t>(c.n_kv_heads)));
  out.set("llama.attention.layer_norm_rms_epsilon", GgufValue::from_f32(kRmsNormEps));
  out.set("llama.rope.dimension_count", GgufValue::from_u32(static_cast<uint32_t>(head_dim)));
  out.set("tokenizer.ggml.model", GgufValue::from_string("llama"));
  out.set("tokenizer.ggml.tokens", GgufValue::from_strings(std::move(v.tokens)));
  out.set("tokenizer.ggml.scores", GgufValue::from_f32s(v.scores));
  out.set("tokenizer.ggml.token_type", GgufValue::from_i32s(v.types));
  out.set("tokenizer.ggml.unknown_token_id", GgufValue::from_u32(0));
  out.set("tokenizer.ggml.bos_token_id", GgufValue::from_u32(1));
  out.set("tokenizer.ggml.eos_token_id", GgufValue::from_u32(2));

  const auto i64 = [](uint64_t x) { return static_cast<int64_t>(x); };
  FloatReader r(checkpoint.data + kHeaderBytes);
  std::vector<uint8_t> embd = r.take(vocab * dim);
  std::vector<std::vector<uint8_t>> rms_att(n_layers), wq(n_layers), wk(n_layers), wv(n_layers), wo(n_layers),
      rms_ffn(n_layers), w1(n_layers), w2(n_layers), w3(n_layers);
  for (auto& t : rms_att) t = r.take(dim);
  for (auto& t : wq) t = r.take(dim * dim);
  for (auto& t : wk) t = r.take(kv_dim * dim);
  for (auto& t : wv) t = r.take(kv_dim * dim);
  for (auto& t : wo) t = r.take(dim * dim);
  for (auto& t : rms_ffn) t = r.take(dim);
  for (auto& t : w1) t = r.take(hidden * dim);
  for (auto& t : w2) t = r.take(dim * hidden);
  for (auto& t : w3) t = r.take(hidden * dim);
  std::vector<uint8_t> rms_final = r.take(dim);
  r.skip(seq_len * head_dim);  // freq_cis_real, freq_cis_imag
  std::vector<uint8_t> wcls;
  if (!c.shared_classifier) wcls = r.take(vocab * dim);

  const GgmlType f32 = GgmlType::kF32;
  LEOAM_RETURN_IF_ERROR(out.add_tensor("token_embd.weight", f32, {i64(dim), i64(vocab)}, std::move(embd)));
  LEOAM_RETURN_IF_ERROR(out.add_tensor("output_norm.weight", f32, {i64(dim)}, std::move(rms_final)));
  if (!c.shared_classifier) {
    LEOAM_RETURN_IF_ERROR(out.add_tensor("output.weight", f32, {i64(dim), i64(vocab)}, std::move(wcls)));
  }
  for (uint64_t l = 0; l < n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LEOAM_RETURN_IF_ERROR(out.add_tensor(p + "attn_q.weight", f32, {i64(dim), i64(dim)}, std::move(wq[l])));
    LEOAM_RETURN_IF_ERROR(out.add_tensor(p + "attn_k.weight", f32, {i64(dim), i64(kv_dim)}, std::move(wk[l])));
    LEOAM_RETURN_IF_ERROR(out.add_tensor(p + "attn_v.weight", f32, {i64(dim), i64(kv_dim)}, std::move(wv[l])));
    LEOAM_RETURN_IF_ERROR(out.add_tensor(p + "attn_output.weight", f32, {i64(dim), i64(dim)}, std::move(wo[l])));
    LEOAM_RETURN_IF_ERROR(out.add_tensor(p + "attn_norm.weight", f32, {i64(dim)}, std::move(rms_att[l])));
    LEOAM_RETURN_IF_ERROR(out.add_tensor(p + "ffn_gate.weight", f32, {i64(dim), i64(hidden)}, std::move(w1[l])));
    LEOAM_RETURN_IF_ERROR(out.add_tensor(p + "ffn_down.weight", f32, {i64(hidden), i64(dim)}, std::move(w2[l])));
    LEOAM_RETURN_IF_ERROR(out.add_tensor(p + "ffn_up.weight", f32, {i64(dim), i64(hidden)}, std::move(w3[l])));
    LEOAM_RETURN_IF_ERROR(out.add_tensor(p + "ffn_norm.weight", f32, {i64(dim)}, std::move(rms_ffn[l])));
  }
  return Status::ok();
}

Status import_llama2c(const std::string& checkpoint_path, const std::string& tokenizer_path, GgufWriter& out) {
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> ckpt, MappedFile::open(checkpoint_path));
  LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> tok, MappedFile::open(tokenizer_path));
  return import_llama2c(Llama2cInput{checkpoint_path, ckpt->data(), ckpt->size()},
                        Llama2cInput{tokenizer_path, tok->data(), tok->size()}, out);
}

}  // namespace leoam
