// A loaded model: its hyperparameters and weights, all read from a GGUF file's metadata and
// tensors (nothing is hard-coded per model). Weights stay in the read-only mapping of the file.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "model/hparams.h"
#include "model/weights.h"

namespace leoam {

class Model {
 public:
  // Opens and validates `path`: architecture (llama, qwen2), required keys, tensor names,
  // shapes and types. Errors name the file and what is wrong, e.g.
  // "m.gguf: tensor 'blk.3.attn_q.weight' has type Q5_K, not supported; supported: F32 F16 ...".
  static Result<std::unique_ptr<Model>> load(const std::string& path);
  // The same, from an already opened file.
  static Result<std::unique_ptr<Model>> from_gguf(GgufFile gguf);

  const ModelHparams& hparams() const { return hparams_; }
  const ModelWeights& weights() const { return weights_; }
  const GgufFile& gguf() const { return gguf_; }

 private:
  Model(GgufFile gguf) : gguf_(std::move(gguf)) {}
  GgufFile gguf_;
  ModelHparams hparams_;
  ModelWeights weights_;
};

}  // namespace leoam
