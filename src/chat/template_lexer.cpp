#include "chat/template_lexer.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <tuple>
#include <utility>

#include "chat/python_text.h"

namespace leoam::chat {

namespace {

// Longest first, so "//" wins over "/".
constexpr std::array<std::string_view, 25> kOperators = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=",
    ".", ":", "|", ","};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "\r\n" and "\r" become "\n"; one trailing newline goes unless kept (Jinja2's tokeniter).
std::string normalize_newlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const TemplateOptions& options) : src_(std::move(source)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    bool line_starting = true;  // the previous match ended a line (Jinja2's lstrip_blocks condition)
    while (pos < src_.size()) {
      const size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_data(src_.substr(pos), pos);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      size_t p = tag + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];

      std::string_view text = std::string_view(src_).substr(pos, tag - pos);
      if (sign == '-') {
        text = py::strip(text, std::nullopt, false, true);
      } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
        const size_t line_pos = text.rfind('\n') + 1;  // npos + 1 == 0
        if ((line_pos > 0 || line_starting) && py::is_space_text(text.substr(line_pos))) {
          text = text.substr(0, line_pos);
        }
      }
      emit_data(text, pos);

      size_t raw_body = 0;
      if (kind == '%' && match_raw_begin(p, &raw_body)) {
        LEOAM_RETURN_IF_ERROR(lex_raw(tag, raw_body, &pos, &line_starting));
        continue;
      }
      if (kind == '#') {
        LEOAM_RETURN_IF_ERROR(lex_comment(tag, p, &pos, &line_starting));
        continue;
      }
      LEOAM_RETURN_IF_ERROR(lex_tag(kind == '{', tag, p, &pos, &line_starting));
    }
    push(TokenKind::kEnd, src_.size());
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  std::pair<int, int> line_column(size_t pos) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos) - 1;
    return {static_cast<int>(it - line_starts_.begin()) + 1, static_cast<int>(pos - *it) + 1};
  }

  Status error(size_t pos, const std::string& what) const {
    const auto [line, column] = line_column(pos);
    return invalid_argument("template syntax error at " + source_position(line, column) + what);
  }

  Token& push(TokenKind kind, size_t pos) {
    Token t;
    t.kind = kind;
    std::tie(t.line, t.column) = line_column(pos);
    tokens_.push_back(std::move(t));
    return tokens_.back();
  }

  void emit_data(std::string_view text, size_t pos) {
    if (!text.empty()) push(TokenKind::kData, pos).text = std::string(text);
  }

  // Python's \s* from p.
  size_t skip_space(size_t p) const {
    size_t n = 0;
    while (p < src_.size() && py::is_space(py::decode_code_point(src_, p, &n))) p += n;
    return p;
  }

  bool starts_with(size_t p, std::string_view s) const { return std::string_view(src_).substr(p).starts_with(s); }

  // After "{%" and its sign: \s*raw\s*(-%}\s*|%}); *body is where the raw text starts.
  bool match_raw_begin(size_t p, size_t* body) const {
    p = skip_space(p);
    if (!starts_with(p, "raw")) return false;
    p = skip_space(p + 3);
    if (starts_with(p, "-%}")) {
      *body = skip_space(p + 3);
      return true;
    }
    if (starts_with(p, "%}")) {
      *body = p + 2;
      return true;
    }
    return false;
  }

  // The raw text runs to the first {% endraw %}, which strips and trims like a block tag.
  Status lex_raw(size_t tag, size_t body, size_t* pos, bool* line_starting) {
    for (size_t k = src_.find("{%", body); k != std::string::npos; k = src_.find("{%", k + 1)) {
      size_t p = k + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = skip_space(p);
      if (!starts_with(p, "endraw")) continue;
      p = skip_space(p + 6);
      size_t end = 0;
      if (!match_block_end(p, &end)) continue;
      std::string_view text = std::string_view(src_).substr(body, k - body);
      if (sign == '-') {
        text = py::strip(text, std::nullopt, false, true);
      } else if (sign != '+' && options_.lstrip_blocks) {
        const size_t line_pos = text.rfind('\n') + 1;
        const bool at_line_start = line_pos > 0 || src_[body - 1] == '\n';
        if (at_line_start && py::is_space_text(text.substr(line_pos))) text = text.substr(0, line_pos);
      }
      emit_data(text, body);
      *pos = end;
      *line_starting = src_[end - 1] == '\n';
      return Status::ok();
    }
    return error(tag, "missing {% endraw %} for this {% raw %}");
  }

  Status lex_comment(size_t tag, size_t p, size_t* pos, bool* line_starting) {
    const size_t close = src_.find("#}", p);
    if (close == std::string::npos) return error(tag, "missing '#}' to end this comment");
    size_t end = close + 2;
    const char sign = close > p ? src_[close - 1] : 0;
    if (sign == '-') {
      end = skip_space(end);
    } else if (sign != '+' && options_.trim_blocks && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    *pos = end;
    *line_starting = src_[end - 1] == '\n';
    return Status::ok();
  }

  // At p: +%} | -%}\s* | %}\n? (the newline only with trim_blocks); *end is past the match.
  bool match_block_end(size_t p, size_t* end) const {
    if (starts_with(p, "+%}")) {
      *end = p + 3;
    } else if (starts_with(p, "-%}")) {
      *end = skip_space(p + 3);
    } else if (starts_with(p, "%}")) {
      *end = p + 2;
      if (options_.trim_blocks && *end < src_.size() && src_[*end] == '\n') ++*end;
    } else {
      return false;
    }
    return true;
  }

  bool match_variable_end(size_t p, size_t* end) const {
    if (starts_with(p, "-}}")) {
      *end = skip_space(p + 3);
    } else if (starts_with(p, "}}")) {
      *end = p + 2;
    } else {
      return false;
    }
    return true;
  }

  Status lex_tag(bool variable, size_t tag, size_t p, size_t* pos, bool* line_starting) {
    push(variable ? TokenKind::kVariableBegin : TokenKind::kBlockBegin, tag);
    std::string brackets;  // the closers still expected, innermost last
    while (true) {
      size_t end = 0;
      if (brackets.empty() && (variable ? match_variable_end(p, &end) : match_block_end(p, &end))) {
        push(variable ? TokenKind::kVariableEnd : TokenKind::kBlockEnd, p);
        *pos = end;
        *line_starting = src_[end - 1] == '\n';
        return Status::ok();
      }
      if (p >= src_.size()) {
        const auto [line, column] = line_column(tag);
        return error(p, std::string("unexpected end of template; expected '") + (variable ? "}}" : "%}") +
                            "' to close the tag opened at line " + std::to_string(line) + ", column " +
                            std::to_string(column));
      }
      const size_t after_space = skip_space(p);
      if (after_space != p) {
        p = after_space;
        continue;
      }
      LEOAM_ASSIGN_OR_RETURN(p, lex_expression_token(p, &brackets));
    }
  }

  Result<size_t> lex_expression_token(size_t p, std::string* brackets) {
    const char c = src_[p];
    if (is_digit(c)) return lex_number(p);
    if (is_name_start(c)) {
      size_t e = p;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      push(TokenKind::kName, p).text = src_.substr(p, e - p);
      return e;
    }
    if (c == '\'' || c == '"') return lex_string(p);
    for (std::string_view op : kOperators) {
      if (!starts_with(p, op)) continue;
      if (op == "(" || op == "[" || op == "{") {
        *brackets += op == "(" ? ')' : (op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (brackets->empty()) return error(p, "unexpected '" + std::string(op) + "'");
        if (brackets->back() != op[0]) {
          return error(p, "unexpected '" + std::string(op) + "'; expected '" + brackets->back() + "'");
        }
        brackets->pop_back();
      }
      push(TokenKind::kOperator, p).text = std::string(op);
      return p + op.size();
    }
    return error(p, "unexpected character '" + std::string(1, c) + "'");
  }

  // Digits with single '_' between them, from p; returns the end.
  size_t scan_digits(size_t p) const {
    while (p < src_.size() && is_digit(src_[p])) {
      ++p;
      if (p + 1 < src_.size() && src_[p] == '_' && is_digit(src_[p + 1])) ++p;
    }
    return p;
  }

  Result<size_t> lex_number(size_t p) {
    std::string digits;
    auto collect = [&](size_t from, size_t to) {
      for (size_t i = from; i < to; ++i) {
        if (src_[i] != '_') digits += src_[i];
      }
    };
    // A float (Jinja2's float_re, never right after a '.': "x.0.1" is items, not a number).
    const bool after_dot = p > 0 && src_[p - 1] == '.';
    size_t e = scan_digits(p);
    bool is_float = false;
    if (!after_dot) {
      size_t f = e;
      if (f + 1 < src_.size() && src_[f] == '.' && is_digit(src_[f + 1])) {
        f = scan_digits(f + 1);
        is_float = true;
      }
      size_t x = f;
      if (x < src_.size() && (src_[x] == 'e' || src_[x] == 'E')) {
        ++x;
        if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
        if (x < src_.size() && is_digit(src_[x])) {
          f = scan_digits(x);
          is_float = true;
        }
      }
      if (is_float) {
        collect(p, f);
        push(TokenKind::kFloat, p).float_value = std::strtod(digits.c_str(), nullptr);
        return f;
      }
    }
    int base = 10;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      const char b = static_cast<char>(src_[p + 1] | 0x20);
      base = b == 'x' ? 16 : (b == 'o' ? 8 : (b == 'b' ? 2 : 10));
    }
    if (base != 10) {
      e = p + 2;
      while (e < src_.size() && (src_[e] == '_' || (hex_value(src_[e]) >= 0 && hex_value(src_[e]) < base))) ++e;
      collect(p + 2, e);
    } else if (src_[p] == '0') {
      e = p + 1;  // "0", "0_0": a decimal zero never has other leading zeros
      while (e + 1 < src_.size() && (src_[e] == '0' || (src_[e] == '_' && src_[e + 1] == '0'))) ++e;
      digits = "0";
    } else {
      collect(p, e);
    }
    if (digits.empty()) return error(p, "invalid integer literal");
    errno = 0;
    const long long value = std::strtoll(digits.c_str(), nullptr, base);
    if (errno == ERANGE) return error(p, "integer literal out of range (64 bits)");
    push(TokenKind::kInteger, p).int_value = value;
    return e;
  }

  // A quoted literal; escapes decode as Python's unicode-escape does.
  Result<size_t> lex_string(size_t p) {
    const char quote = src_[p];
    std::string value;
    size_t i = p + 1;
    while (true) {
      if (i >= src_.size()) return error(p, "unterminated string literal");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) return error(p, "unterminated string literal");
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n': break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'n': value += '\n'; break;
        case 'r': value += '\r'; break;
        case 't': value += '\t'; break;
        case 'v': value += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n_hex = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          uint32_t cp = 0;
          for (size_t k = 0; k < n_hex; ++k) {
            const int h = i + k < src_.size() ? hex_value(src_[i + k]) : -1;
            if (h < 0) return error(i - 2, std::string("truncated \\") + e + " escape in string literal");
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          if (cp > 0x10ffff) return error(i - 2, "escape beyond U+10FFFF in string literal");
          py::append_code_point(value, cp);
          i += n_hex;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i) {
              cp = cp * 8 + static_cast<uint32_t>(src_[i] - '0');
            }
            py::append_code_point(value, cp);
          } else if (e == 'N') {
            return error(i - 2, "\\N{...} escapes are not supported");
          } else {  // unknown escapes keep their backslash
            value += '\\';
            value += e;
          }
      }
    }
    push(TokenKind::kString, p).text = std::move(value);
    return i + 1;
  }

  std::string src_;
  const TemplateOptions& options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::string source_position(int line, int column) {
  return "line " + std::to_string(line) + ", column " + std::to_string(column) + ": ";
}

Result<std::vector<Token>> tokenize_template(std::string_view source, const TemplateOptions& options) {
  return Lexer(normalize_newlines(source, options.keep_trailing_newline), options).run();
}

}  // namespace leoam::chat
