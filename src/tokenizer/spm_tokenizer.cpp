#include "tokenizer/spm_tokenizer.h"

#include <queue>

#include "tokenizer/unicode.h"

namespace leoam {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

struct Symbol {
  uint32_t start;  // byte offset in the escaped text
  uint32_t n;      // bytes; 0 once merged into its left neighbour
  int32_t prev;    // index of the previous live symbol, -1 at the start
  int32_t next;    // index of the next live symbol, -1 at the end
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t size;  // bytes of left + right when queued; a mismatch later means the pair is stale
};

// Highest score first; equal scores: leftmost first (llama.cpp's order).
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

SpmTokenizer::SpmTokenizer(Vocab vocab) : VocabTokenizer(std::move(vocab)) {
  static const char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', '\0'};
    int32_t id = vocab_.find(name);
    if (id < 0) id = vocab_.find(std::string(1, static_cast<char>(b)));
    if (id < 0) id = vocab_.unk_id;
    byte_tokens_[static_cast<size_t>(b)] = id;
  }
  isolated_.fill(true);
  for (int32_t id = 0; id < vocab_.n_tokens(); ++id) {
    const std::string& text = vocab_.token(id).text;
    if (text.size() < 2) continue;
    for (char c : text) {
      if (static_cast<uint8_t>(c) < 0x80) isolated_[static_cast<size_t>(c)] = false;
    }
  }
  build_pieces();
}

std::string SpmTokenizer::decode_normal_text(const std::string& text) const {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    if (text.compare(pos, kSpaceMark.size(), kSpaceMark) == 0) {
      out.push_back(' ');
      pos += kSpaceMark.size();
    } else {
      out.push_back(text[pos++]);
    }
  }
  return out;
}

void SpmTokenizer::encode_text(std::string_view text, bool after_special, std::vector<int32_t>* out) const {
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 2 + 3);
  if (vocab_.add_space_prefix && after_special) escaped += kSpaceMark;
  for (char c : text) {
    if (c == ' ') {
      escaped += kSpaceMark;
    } else {
      escaped.push_back(c);
    }
  }
  encode_escaped(escaped, out);
}

void SpmTokenizer::encode_escaped(std::string_view text, std::vector<int32_t>* out) const {
  // Walk the symbols as encode_segment() will cut them; a one-byte symbol that is isolated can
  // join no pair, so the segments on either side of it merge independently.
  size_t segment_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const auto c = static_cast<uint8_t>(text[pos]);
    const size_t len = std::min(unicode::utf8_len(c), text.size() - pos);
    if (len == 1 && c < 0x80 && isolated_[c]) {
      encode_segment(text.substr(segment_start, pos - segment_start), out);
      encode_segment(text.substr(pos, 1), out);
      segment_start = pos + 1;
    }
    pos += len;
  }
  encode_segment(text.substr(segment_start), out);
}

void SpmTokenizer::encode_segment(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  // Symbols are UTF-8 characters (by lead byte; a sequence cut short by the end is shorter).
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = std::min(unicode::utf8_len(static_cast<uint8_t>(text[offset])), text.size() - offset);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(len), index - 1,
                       offset + len == text.size() ? -1 : index + 1});
    offset += len;
  }

  std::vector<Bigram> storage;
  storage.reserve(symbols.size());
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue(BigramLess{}, std::move(storage));
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const uint32_t size = l.n + r.n;
    const int32_t id = vocab_.find(text.substr(l.start, size));
    if (id < 0) return;
    queue.push({vocab_.token(id).score, left, right, size});
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
    const std::string_view piece = text.substr(s.start, s.n);
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // Merged symbols are always tokens, so this is a single character missing from the vocab.
    for (char c : piece) {
      const int32_t byte_id = byte_tokens_[static_cast<uint8_t>(c)];
      if (byte_id >= 0) out->push_back(byte_id);
    }
  }
}

}  // namespace leoam
