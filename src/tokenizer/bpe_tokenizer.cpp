#include "tokenizer/bpe_tokenizer.h"

#include <queue>

#include "tokenizer/unicode.h"

namespace leoam {

namespace {

struct Symbol {
  uint32_t start;  // byte offset in the word
  uint32_t n;      // bytes; 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Bigram {
  int32_t rank;
  int32_t left;
  int32_t right;
  uint32_t size;  // bytes of left + right when queued; a mismatch later means the pair is stale
};

// Lowest rank first; equal ranks: leftmost first (llama.cpp's order).
struct BigramGreater {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

BpeTokenizer::BpeTokenizer(Vocab vocab, PreTokenizer pre_tokenizer)
    : VocabTokenizer(std::move(vocab)), pre_tokenizer_(std::move(pre_tokenizer)) {
  const std::string& pre = vocab_.pre;
  ignore_merges_ = pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" || pre == "tekken";
  build_pieces();
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(Vocab vocab, const std::vector<std::string>& merges,
                                                            PreTokenizer pre_tokenizer) {
  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer(std::move(vocab), std::move(pre_tokenizer)));
  tok->ranks_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& line = merges[i];
    // The separator is the first space after the first byte (llama.cpp's rule).
    const size_t sep = line.size() > 1 ? line.find(' ', 1) : std::string::npos;
    if (sep == std::string::npos) {
      return corrupt("tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + line +
                     "' has no space between its two parts");
    }
    // emplace keeps the first rank of a duplicate line, as llama.cpp does.
    tok->ranks_.emplace(line.substr(0, sep) + ' ' + line.substr(sep + 1), static_cast<int32_t>(i));
  }
  return tok;
}

std::string BpeTokenizer::decode_normal_text(const std::string& text) const { return unicode::bpe_text_to_bytes(text); }

int32_t BpeTokenizer::merge_rank(std::string_view left, std::string_view right) const {
  std::string key;
  key.reserve(left.size() + 1 + right.size());
  key.append(left);
  key.push_back(' ');
  key.append(right);
  auto it = ranks_.find(key);
  return it == ranks_.end() ? -1 : it->second;
}

void BpeTokenizer::encode_text(std::string_view text, bool /*after_special*/, std::vector<int32_t>* out) const {
  std::string sanitized;
  if (!unicode::is_valid_utf8(text)) {
    sanitized = unicode::sanitize_utf8(text);
    text = sanitized;
  }
  std::string word;
  for (std::string_view piece : pre_tokenizer_.split(text)) {
    word.clear();
    for (char c : piece) word += unicode::byte_to_utf8(static_cast<uint8_t>(c));
    encode_word(word, out);
  }
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t id = vocab_.find(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t offset = 0; offset < word.size();) {
    const size_t len = std::min(unicode::utf8_len(static_cast<uint8_t>(word[offset])), word.size() - offset);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(len), index - 1,
                       offset + len == word.size() ? -1 : index + 1});
    offset += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramGreater> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const int32_t rank = merge_rank(word.substr(l.start, l.n), word.substr(r.start, r.n));
    if (rank < 0) return;
    queue.push({rank, left, right, l.n + r.n});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(bigram.left)];
    Symbol& right = symbols[static_cast<size_t>(bigram.right)];
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;  // stale
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = word.substr(s.start, s.n);
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // Not a token: each byte of its text that is a token on its own (llama.cpp's fallback).
    for (char c : piece) {
      const int32_t byte_id = vocab_.find(std::string_view(&c, 1));
      if (byte_id >= 0) out->push_back(byte_id);
    }
  }
}

}  // namespace leoam
