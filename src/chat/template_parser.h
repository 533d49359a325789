// Parses tokens into the syntax tree with Jinja2's grammar and precedence (lowest first):
//   a if c else b | or | and | not | comparisons, in, not in | + - | ~ | * / // % | ** |
//   unary - + | postfix .attr [key] [a:b:c] (args) | filters x|f(args) and tests x is t
// Statements: if/elif/else, for (with else, `if` filter and tuple targets), set (with tuples,
// `ns.attr` and blocks), macro, filter blocks, break/continue (loopcontrols), and Hugging Face's
// generation block. Other Jinja2 tags (include, extends, call, ...) are syntax errors here.
#pragma once

#include <string_view>
#include <vector>

#include "chat/template_ast.h"
#include "chat/template_lexer.h"
#include "core/status.h"

namespace leoam::chat {

Result<Body> parse_template(std::vector<Token> tokens);

}  // namespace leoam::chat
