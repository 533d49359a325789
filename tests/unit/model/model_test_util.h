// Helpers shared by the model tests: temporary synthetic model files, the numpy reference,
// error metrics.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model/synthetic_model.h"

namespace leoam::testing_util {

// A file path under the test temp dir that is removed when the object dies.
class TempFile {
 public:
  explicit TempFile(const std::string& stem)
      : path_(::testing::TempDir() + "leoam_" + stem + "_" + std::to_string(::getpid()) + ".gguf") {}
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ||a - b|| / ||b||
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1.0));
}

// Whether /usr/bin/python3 with numpy can run the reference; the reason when not.
inline bool reference_available(std::string* why) {
  const std::string script = std::string(LEOAM_SOURCE_DIR) + "/tests/reference/llama_ref.py";
  if (std::string(LEOAM_PYTHON).empty() || ::access(LEOAM_PYTHON, X_OK) != 0) {
    *why = "python3 not found";
    return false;
  }
  if (::access(script.c_str(), R_OK) != 0) {
    *why = script + " not found";
    return false;
  }
  const std::string cmd = std::string(LEOAM_PYTHON) + " -c 'import numpy' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    *why = "numpy is not installed for " + std::string(LEOAM_PYTHON);
    return false;
  }
  return true;
}

// Runs the numpy reference on `model_path`; returns the logits of every position, [n_tokens][n_vocab]
// flattened, or an empty vector (with *error set) on failure. q8_activations: the reference rounds
// the inputs of Q4_0, Q8_0, Q4_K and Q6_K matrices to 8 bits, as the engine's prefill does where
// kernels::gemm_auto_uses_q8 (llama_ref.py --q8-activations).
// `script`: llama_ref.py for a GGUF file, hf_ref.py for a Hugging Face folder (no kv_f16 nor
// q8_activations there).
inline std::vector<float> run_reference(const std::string& model_path, const std::vector<int32_t>& tokens,
                                        bool kv_f16, std::string* error, bool q8_activations = false,
                                        const std::string& script = "llama_ref.py") {
  const std::string out = (model_path.ends_with("/") ? model_path.substr(0, model_path.size() - 1) : model_path) + ".ref.txt";
  std::string ids;
  for (size_t i = 0; i < tokens.size(); ++i) ids += (i ? "," : "") + std::to_string(tokens[i]);
  const std::string cmd = std::string(LEOAM_PYTHON) + " " + LEOAM_SOURCE_DIR + "/tests/reference/" + script + " --model '" +
                          model_path + "' --tokens " + ids + (kv_f16 ? " --kv-f16" : "") +
                          (q8_activations ? " --q8-activations" : "") + " --out '" + out +
                          "' 2>&1";
  std::string log;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *error = "popen failed";
    return {};
  }
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) log += buf;
  const int rc = ::pclose(p);
  std::vector<float> logits;
  if (rc != 0) {
    *error = "reference failed (" + cmd + "):\n" + log;
    return {};
  }
  std::ifstream in(out);
  float v;
  while (in >> v) logits.push_back(v);
  std::remove(out.c_str());
  return logits;
}

}  // namespace leoam::testing_util
