// A Hugging Face checkpoint folder, as downloaded, read as the GGUF model it stands for:
// config.json (hf_config.h), the safetensors weights, sharded by their index or not
// (gguf/safetensors_checkpoint.h), tokenizer.json with tokenizer_config.json
// (tokenizer/hf_tokenizer_import.h). The weights take GGUF's names and layout (the llama family's
// q/k rows permuted to GGUF's RoPE pairing), so everything downstream reads one format:
// `-m DIR` loads the same model that `leoam gguf convert DIR -o model.gguf` writes.
// docs/model.md#hugging-face-folders
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/ggml_type.h"
#include "core/status.h"
#include "gguf/gguf_file.h"

namespace leoam {

class GgufWriter;

struct HfImportOptions {
  // The type of the matrices, any the engine computes with (supported_type_names()); unset keeps
  // each tensor's own (f32, f16 or bf16). A matrix whose rows do not fit the type's blocks stays
  // F16. Norms and biases are always F32.
  std::optional<GgmlType> type;
  // Called after each tensor with the count imported and the total: progress on a long import.
  std::function<void(int64_t done, int64_t total)> progress;
};

// True when `path` is a folder (a Hugging Face checkpoint), not a file.
bool is_model_folder(const std::string& path);
// What a model is called by its path: a folder's name ("Qwen2.5-0.5B" for "models/Qwen2.5-0.5B/"),
// a file's without its extension.
std::string model_source_name(const std::string& path);

// Adds the folder's model to `out`: metadata, tokenizer and tensors. Errors name the file and the
// tensor or field: shards and config that disagree, a missing or unknown tensor, a bad shape.
Status import_hf_folder(const std::string& dir, const HfImportOptions& options, GgufWriter& out);

// A model path as the engine reads it: a GGUF file (mapped), or a Hugging Face folder imported
// into an in-memory GGUF (its weights copied once, in their stored or the requested type).
Result<GgufFile> open_model_source(const std::string& path, const HfImportOptions& options = {});
// The same for a tokenizer alone: a folder's tokenizer files, without its weights.
Result<GgufFile> open_tokenizer_source(const std::string& path);

}  // namespace leoam
