// Test doubles for the generator: a tiny SentencePiece-like tokenizer and a forward context
// whose logits follow a script, so generation outcomes are exact.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/forward_context.h"
#include "tokenizer/tokenizer.h"

namespace leoam::testing {

// Vocab: 0 <s> (BOS), 1 </s> (EOS, EOG), 2.. word pieces with SPM's leading space, then the
// three byte tokens of "€" (E2 82 AC).
class FakeTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kBos = 0, kEos = 1, kOnce = 2, kUpon = 3, kA = 4, kTime = 5, kComma = 6;
  static constexpr int32_t kE2 = 7, k82 = 8, kAC = 9;

  std::vector<int32_t> tokenize(std::string_view text, bool add_bos, bool /*parse_special*/) const override {
    std::vector<int32_t> ids;
    if (add_bos) ids.push_back(kBos);
    if (text.empty()) return ids;
    const std::string s = text[0] == ' ' ? std::string(text) : " " + std::string(text);  // SPM dummy prefix
    size_t pos = 0;
    while (pos < s.size()) {
      int32_t best = -1;
      size_t best_len = 0;
      for (int32_t id = 2; id < n_vocab(); ++id) {
        const std::string& p = pieces_[static_cast<size_t>(id)];
        if (p.size() > best_len && s.compare(pos, p.size(), p) == 0) {
          best = id;
          best_len = p.size();
        }
      }
      if (best < 0) return {};  // not expected in these tests
      ids.push_back(best);
      pos += best_len;
    }
    return ids;
  }
  std::string token_to_piece(int32_t id) const override { return pieces_.at(static_cast<size_t>(id)); }
  std::string detokenize(const std::vector<int32_t>& ids, bool remove_leading_space) const override {
    std::string out;
    for (int32_t id : ids) out += token_to_piece(id);
    if (remove_leading_space && !ids.empty() && token_to_piece(ids[0]).starts_with(' ')) out.erase(0, 1);
    return out;
  }
  int32_t n_vocab() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos_id() const override { return kBos; }
  int32_t eos_id() const override { return kEos; }
  bool is_eog(int32_t id) const override { return id == kEos; }
  const std::string& token_text(int32_t id) const override { return pieces_.at(static_cast<size_t>(id)); }

 private:
  std::vector<std::string> pieces_ = {"", "", " Once", " upon", " a", " time", ",", "\xE2", "\x82", "\xAC"};
};

// Logits at position p are 0 everywhere but 10 at script(p), the token "predicted" after p, and
// 9 at runner_up when it is set and not script(p).
class FakeForwardContext : public ForwardContext {
 public:
  FakeForwardContext(int32_t n_vocab, int64_t n_ctx, std::function<int32_t(int64_t pos)> script)
      : n_vocab_(n_vocab), n_ctx_(n_ctx), script_(std::move(script)) {}

  Status eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) override {
    if (n_past_ + static_cast<int64_t>(tokens.size()) > n_ctx_) return invalid_argument("exceeds the context");
    for (int32_t t : tokens) {
      if (t < 0 || t >= n_vocab_) return invalid_argument("token out of range");
    }
    eval_sizes.push_back(tokens.size());
    const size_t n_rows = all_logits ? tokens.size() : 1;
    logits.assign(n_rows * static_cast<size_t>(n_vocab_), 0.0f);
    for (size_t r = 0; r < n_rows; ++r) {
      const int64_t pos = n_past_ + static_cast<int64_t>(all_logits ? r : tokens.size() - 1);
      float* row = logits.data() + r * static_cast<size_t>(n_vocab_);
      if (runner_up >= 0) row[runner_up] = 9.0f;
      row[script_(pos)] = 10.0f;
    }
    for (int32_t t : tokens) history.push_back(t);
    n_past_ += static_cast<int64_t>(tokens.size());
    return Status::ok();
  }
  int64_t n_past() const override { return n_past_; }
  int64_t n_ctx() const override { return n_ctx_; }
  int32_t n_vocab() const override { return n_vocab_; }
  int n_threads() const override { return 1; }
  void reset() override {
    n_past_ = 0;
    history.clear();
  }

  int32_t runner_up = -1;          // < 0: none
  std::vector<size_t> eval_sizes;  // tokens per eval() call
  std::vector<int32_t> history;    // every token evaluated

 private:
  int32_t n_vocab_;
  int64_t n_ctx_;
  std::function<int32_t(int64_t)> script_;
  int64_t n_past_ = 0;
};

}  // namespace leoam::testing
