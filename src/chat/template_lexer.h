// Splits template source into tokens as Jinja2's lexer does: text between tags becomes kData, and
// the inside of {{ }} and {% %} becomes expression tokens between begin and end markers. Comments
// and whitespace control ({%- -%} {%+ +%}, trim_blocks, lstrip_blocks) are applied here, so the
// parser never sees them. Newlines are normalized to "\n" first.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/template_options.h"
#include "core/status.h"

namespace leoam::chat {

enum class TokenKind : uint8_t {
  kData,           // text: the literal output
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // text: an identifier or keyword
  kString,         // text: the literal's value, escapes decoded
  kInteger,        // int_value
  kFloat,          // float_value
  kOperator,       // text: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { } ;
  kEnd,            // end of the source
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;    // 1-based, of the token's first character
  int column = 1;  // 1-based, in bytes
};

// A syntax error names line, column and what was expected.
Result<std::vector<Token>> tokenize_template(std::string_view source, const TemplateOptions& options);

// "line 3, column 7: " for messages.
std::string source_position(int line, int column);

}  // namespace leoam::chat
