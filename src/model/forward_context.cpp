#include "model/forward_context.h"

#include "kv/kv_cache.h"
#include "model/llama_forward.h"
#include "model/model.h"

namespace leoam {

Result<std::unique_ptr<ForwardContext>> ForwardContext::create(const Model& model, const ForwardOptions& options) {
  return create(model, options, nullptr);
}

Result<std::unique_ptr<ForwardContext>> ForwardContext::create(const Model& model, const ForwardOptions& options,
                                                               std::unique_ptr<KvCache> kv_cache) {
  switch (model.hparams().arch) {
    case ModelArch::kLlama:
    case ModelArch::kQwen2:
    case ModelArch::kQwen3:
    case ModelArch::kPhi3:
    case ModelArch::kGemma2:
    case ModelArch::kGemma3:
    case ModelArch::kOpt: {
      LEOAM_ASSIGN_OR_RETURN(std::unique_ptr<LlamaForward> ctx,
                             LlamaForward::create(model, options, std::move(kv_cache)));
      return std::unique_ptr<ForwardContext>(std::move(ctx));
    }
  }
  return internal_error("ForwardContext: no forward pass for architecture '" + model.hparams().arch_name + "'");
}

}  // namespace leoam
