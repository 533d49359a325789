// Converts a llama2.c legacy checkpoint (model.bin) and its tokenizer (tokenizer.bin) into a
// llama-architecture GGUF, with llama.cpp's tensor names and metadata keys.
//
// Checkpoint layout (little-endian):
//   int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len   (28 bytes)
//   f32 token_embedding_table [vocab][dim]
//   f32 rms_att   [n_layers][dim]           f32 wq [n_layers][n_heads*head_dim][dim]
//   f32 wk [n_layers][n_kv_heads*head_dim][dim]   f32 wv (same as wk)
//   f32 wo [n_layers][dim][n_heads*head_dim]      f32 rms_ffn [n_layers][dim]
//   f32 w1 [n_layers][hidden][dim]   f32 w2 [n_layers][dim][hidden]   f32 w3 [n_layers][hidden][dim]
//   f32 rms_final [dim]   f32 freq_cis_real [seq_len][head_dim/2]   f32 freq_cis_imag (same)
//   f32 wcls [vocab][dim]   only when vocab_size < 0 (a positive vocab_size means the
//                           classifier shares token_embedding_table)
// Every matrix is row-major [out][in], which is exactly GGUF's ne = {in, out}, so the bytes are
// copied unchanged. Q and K need no permutation: llama2.c rotates interleaved pairs (x0, x1) like
// Meta's original code and llama.cpp's LLAMA_ROPE_TYPE_NORM (the permutation in llama.cpp's
// HF converter exists only to undo Hugging Face's half-split layout). The freq_cis tables are
// not copied: the engine computes RoPE itself (theta 10000).
//
// Tokenizer layout: int32 max_token_length, then per token: f32 score, int32 n_bytes, bytes.
// Token text is stored as llama2.c's exporter wrote it (' ' for SentencePiece's U+2581 and
// "\n<s>\n" / "\n</s>\n" for BOS/EOS); the importer restores SentencePiece's spelling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace leoam {

class GgufWriter;

// The dimensions from a checkpoint header.
struct Llama2cConfig {
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t vocab_size = 0;  // absolute value; see shared_classifier
  int32_t seq_len = 0;
  bool shared_classifier = true;
};

// A file's bytes and the name to use for it in error messages.
struct Llama2cInput {
  std::string name;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// Adds metadata and tensors of the converted model to `out` (which the caller then writes).
// Every size is checked against the input sizes first; errors name the file and the problem.
Status import_llama2c(const Llama2cInput& checkpoint, const Llama2cInput& tokenizer, GgufWriter& out);
// The same, reading the two files.
Status import_llama2c(const std::string& checkpoint_path, const std::string& tokenizer_path, GgufWriter& out);

}  // namespace leoam
