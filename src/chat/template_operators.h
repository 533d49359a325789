// Python's operators on template values: arithmetic (+ - * / // % **, with int overflow an error
// rather than a big int), unary minus and plus, and membership (`in`).
#pragma once

#include <string_view>

#include "chat/template_value.h"
#include "core/status.h"

namespace leoam::chat {

// op: "+", "-", "*", "/", "//", "%", "**". An undefined operand is an error, as in Jinja2.
Result<Value> binary_op(std::string_view op, const Value& a, const Value& b);
Result<Value> unary_op(std::string_view op, const Value& v);  // "-" or "+"
Result<bool> contains(const Value& container, const Value& item);  // `item in container`

}  // namespace leoam::chat
