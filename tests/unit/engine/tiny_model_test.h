// A test suite over a real forward pass and tokenizer: a small synthetic llama (2 layers,
// n_embd 128, vocab 512, trained context 256) written to a temporary directory once a suite.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "model/forward_context.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "tokenizer/tokenizer.h"

namespace leoam {

class TinyModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    namespace fs = std::filesystem;
    dir_ = new std::string(fs::temp_directory_path() / ("leoam_tiny_model_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    const std::string path = *dir_ + "/tiny.gguf";
    SyntheticModelSpec spec;
    spec.n_ctx = 256;
    Status st = write_synthetic_model(spec, path);
    ASSERT_TRUE(st.is_ok()) << st.message();
    auto model = Model::load(path);
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    model_ = model->release();
    auto tok = Tokenizer::from_gguf(model_->gguf());
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    tokenizer_ = tok->release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete model_;
    std::error_code ec;
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_, ec);
    delete dir_;
    tokenizer_ = nullptr;
    model_ = nullptr;
    dir_ = nullptr;
  }

  static std::unique_ptr<ForwardContext> context(int n_ctx) {
    ForwardOptions o;
    o.n_ctx = n_ctx;
    o.n_threads = 2;
    auto ctx = ForwardContext::create(*model_, o);
    EXPECT_TRUE(ctx.is_ok()) << ctx.status().message();
    return ctx.is_ok() ? std::move(*ctx) : nullptr;
  }

  static inline std::string* dir_ = nullptr;
  static inline Model* model_ = nullptr;
  static inline Tokenizer* tokenizer_ = nullptr;
};

}  // namespace leoam
