#include "model/model.h"

namespace leoam {

Result<std::unique_ptr<Model>> Model::load(const std::string& path) {
  LEOAM_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::open(path));
  return from_gguf(std::move(gguf));
}

Result<std::unique_ptr<Model>> Model::from_gguf(GgufFile gguf) {
  std::unique_ptr<Model> model(new Model(std::move(gguf)));
  LEOAM_ASSIGN_OR_RETURN(model->hparams_, read_hparams(model->gguf_));
  LEOAM_ASSIGN_OR_RETURN(model->weights_, map_weights(model->gguf_, model->hparams_));
  return model;
}

}  // namespace leoam
