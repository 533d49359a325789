// Converts a llama2.c legacy checkpoint (model.bin) and its tokenizer (tokenizer.bin) into a
// llama-architecture GGUF, with llama.cpp's tensor names and metadata keys. Every llama2.c matrix
// is row-major [out][in], which is exactly GGUF's ne = {in, out}, so the bytes are copied
// unchanged. Q and K need no permutation: llama2.c rotates interleaved pairs like Meta's original
// code and llama.cpp's LLAMA_ROPE_TYPE_NORM (llama.cpp's HF converter permutes only to undo Hugging
// Face's half-split layout). The freq_cis tables are not copied: the engine computes RoPE itself
// (theta 10000). Token text comes as llama2.c's exporter wrote it (' ' for SentencePiece's U+2581,
// "\n<s>\n" and "\n</s>\n" for BOS and EOS); the importer restores SentencePiece's spelling.
// Both files' layouts: docs/model.md#llama2c-checkpoints
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
