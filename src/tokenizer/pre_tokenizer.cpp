#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <utility>

#include "tokenizer/unicode.h"

namespace leoam {

namespace {

// The regex lists below are llama.cpp's (src/llama-vocab.cpp, llm_tokenizer_bpe), written as
// PCRE2 patterns. Non-ASCII characters are spelled \x{...} so that no editor or Unicode
// normalization can change them.

// GPT-2's split, without the final `|\s+` (llama.cpp drops it; unmatched whitespace then becomes
// a gap piece, which splits the same way).
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

// Llama 3 (tiktoken cl100k style): case-insensitive contractions spelled out, digits in threes.
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2: as Llama 3 but single digits.
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek LLM's cased-letter class (Lu, Ll, Lt as of the Unicode version its tokenizer used).
constexpr const char* kDeepseekLlmLetters =
    R"(\s?[\x{41}-\x{5A}\x{61}-\x{7A}\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C})"
    R"(\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5})"
    R"(\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77})"
    R"(\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57})"
    R"(\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
    R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC})"
    R"(\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
    R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B})"
    R"(\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A})"
    R"(\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2})"
    R"(\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";

// ASCII and full-width punctuation, curly quotes, ideographic space and full stop.
constexpr const char* kDeepseekLlmPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
// CJK ideographs, Samaritan..CJK, Hangul.
constexpr const char* kCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

// BLOOM-style: everything up to a space or sentence punctuation. The class really does contain
// '(', '|' and ')': the source regex was written that way.
constexpr const char* kBloom =
    R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)";

constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek-V3 (the three Split regexes of its tokenizer.json): digits in threes; runs of CJK
// ideographs and kana; then words, where one ASCII punctuation mark may lead a Latin word and
// combining marks (\p{M}) stay with their letters.
constexpr const char* kDeepseekV3Cjk = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr const char* kDeepseekV3Words =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

struct NamedPatterns {
  std::vector<std::string> names;
  std::vector<std::string> patterns;
};

const std::vector<NamedPatterns>& pre_tokenizer_table() {
  static const std::vector<NamedPatterns> kTable = {
      {{"default"},
       {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe", "chatglm-bpe"}, {kLlama3}},
      {{"deepseek-llm"},
       {"[\r\n]", kDeepseekLlmLetters, kDeepseekLlmPunct, R"(\s+$)", kCjk, R"(\p{N}+)"}},
      {{"deepseek-v3"}, {R"(\p{N}{1,3})", kDeepseekV3Cjk, kDeepseekV3Words}},
      {{"deepseek-coder"}, {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {R"(\p{N})", kGpt2}},
      {{"gpt-2", "mpt", "olmo", "jais", "phi-2", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de",
        "jina-v2-code", "roberta-bpe", "gigachat"},
       {kGpt2}},
      {{"qwen2", "stablelm2"}, {kQwen2}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kBloom}},
      {{"viking"}, {kBloom, R"(\p{N})"}},
      {{"tekken"}, {kTekken}},
  };
  return kTable;
}

}  // namespace

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

std::vector<std::string> PreTokenizer::supported_names() {
  std::vector<std::string> names;
  for (const NamedPatterns& entry : pre_tokenizer_table()) {
    names.insert(names.end(), entry.names.begin(), entry.names.end());
  }
  return names;
}

Result<PreTokenizer> PreTokenizer::for_name(std::string_view name) {
  for (const NamedPatterns& entry : pre_tokenizer_table()) {
    if (std::find(entry.names.begin(), entry.names.end(), name) != entry.names.end()) {
      return from_patterns(entry.patterns);
    }
  }
  std::string list;
  for (const std::string& n : supported_names()) list += (list.empty() ? "" : " ") + n;
  return unsupported("unknown pre-tokenizer tokenizer.ggml.pre = '" + std::string(name) + "'; supported: " + list);
}

Result<PreTokenizer> PreTokenizer::from_patterns(std::vector<std::string> patterns) {
  PreTokenizer pre;
  for (const std::string& pattern : patterns) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    // DOLLAR_ENDONLY: `$` means the end of the piece only, as in std::regex (llama.cpp).
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error_code, &error_offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      return invalid_argument("pre-tokenizer regex '" + pattern + "' does not compile at offset " +
                              std::to_string(error_offset) + ": " + reinterpret_cast<const char*>(message));
    }
    // JIT is an optimization: when it is unavailable pcre2_match interprets the pattern.
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    auto compiled = std::make_shared<Compiled>();
    compiled->code = code;
    pre.compiled_.push_back(std::move(compiled));
  }
  pre.patterns_ = std::move(patterns);
  return pre;
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const auto& compiled : compiled_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(compiled->code, nullptr);
    next.clear();
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t gap_start = 0;  // start of the text not yet emitted
      size_t offset = 0;     // where the next search starts
      while (offset <= piece.size()) {
        const int rc = pcre2_match(compiled->code, subject, piece.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0) break;  // PCRE2_ERROR_NOMATCH, or a resource limit: the rest stays one piece
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t m0 = ov[0];
        const size_t m1 = ov[1];
        if (m1 == m0) {
          // An empty match gives no piece (llama.cpp's empty words give no tokens); step one character.
          if (m0 >= piece.size()) break;
          offset = m0 + unicode::utf8_len(static_cast<uint8_t>(piece[m0]));
          continue;
        }
        if (m0 > gap_start) next.push_back(piece.substr(gap_start, m0 - gap_start));
        next.push_back(piece.substr(m0, m1 - m0));
        gap_start = offset = m1;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace leoam
