#include "tokenizer/vocab_tokenizer.h"

#include <algorithm>

#include "tokenizer/special_tokens.h"
#include "tokenizer/unicode.h"

namespace leoam {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

VocabTokenizer::VocabTokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}

void VocabTokenizer::build_pieces() {
  pieces_.resize(static_cast<size_t>(vocab_.n_tokens()));
  for (int32_t id = 0; id < vocab_.n_tokens(); ++id) {
    const TokenData& t = vocab_.token(id);
    std::string& piece = pieces_[static_cast<size_t>(id)];
    if (t.attr & kAttrUserDefined) {
      piece = t.text;  // added tokens are stored as the text they stand for
    } else if (t.attr & kAttrNormal) {
      piece = decode_normal_text(t.text);
    } else if (t.attr & kAttrByte) {
      // "<0xXX>"
      const int hi = t.text.size() == 6 ? hex_digit(t.text[3]) : -1;
      const int lo = t.text.size() == 6 ? hex_digit(t.text[4]) : -1;
      if (hi >= 0 && lo >= 0 && t.text.compare(0, 3, "<0x") == 0 && t.text[5] == '>') {
        piece.assign(1, static_cast<char>(hi * 16 + lo));
      } else {
        piece = t.text;
      }
    }
    // Control, unknown, unused and undefined tokens stay "" (llama.cpp without `special`).
  }
}

std::vector<int32_t> VocabTokenizer::tokenize(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  bool after_special = true;
  for (const TextFragment& fragment : partition_special_tokens(vocab_, text, parse_special)) {
    if (fragment.is_token()) {
      out.push_back(fragment.token);
      after_special = true;
    } else {
      if (vocab_.nfc) {
        encode_text(unicode::nfc(fragment.text), after_special, &out);
      } else {
        encode_text(fragment.text, after_special, &out);
      }
      after_special = false;
    }
  }
  if (add_bos && vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
  return out;
}

std::string VocabTokenizer::token_to_piece(int32_t id) const {
  if (!vocab_.is_valid_id(id)) return {};
  return pieces_[static_cast<size_t>(id)];
}

std::string VocabTokenizer::detokenize(const std::vector<int32_t>& ids, bool remove_leading_space) const {
  std::string out;
  // The space that tokenize() put in front is removed from the first token that gives any text
  // (so a leading BOS, which gives none, does not stop it).
  bool strip = remove_leading_space && vocab_.add_space_prefix;
  for (int32_t id : ids) {
    if (!vocab_.is_valid_id(id)) continue;
    const std::string& piece = pieces_[static_cast<size_t>(id)];
    if (piece.empty()) continue;
    if (strip) {
      strip = false;
      if (piece[0] == ' ') {
        out.append(piece, 1, std::string::npos);
        continue;
      }
    }
    out += piece;
  }
  return out;
}

bool VocabTokenizer::is_eog(int32_t id) const {
  return id >= 0 && std::find(vocab_.eog_ids.begin(), vocab_.eog_ids.end(), id) != vocab_.eog_ids.end();
}

const std::string& VocabTokenizer::token_text(int32_t id) const {
  static const std::string kEmpty;
  return vocab_.is_valid_id(id) ? vocab_.token(id).text : kEmpty;
}

}  // namespace leoam
