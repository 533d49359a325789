// Jinja2's tests, for `x is name(args)` and the select/reject filters: defined, undefined, none,
// boolean, true, false, integer, float, number, string, mapping, iterable, sequence, callable,
// sameas, eq (==, equalto), ne (!=), lt (<, lessthan), le (<=), gt (>, greaterthan), ge (>=), in,
// odd, even, divisibleby, lower, upper, escaped.
#pragma once

#include <string_view>

#include "chat/template_value.h"
#include "core/status.h"

namespace leoam::chat {

bool has_test(std::string_view name);
// An unknown name is an error naming it.
Result<bool> apply_test(std::string_view name, const Value& v, const CallArgs& args);

}  // namespace leoam::chat
