// Jinja2's built-in filters, for `x|name(args)`: abs, attr, capitalize, center, count, default (d),
// dictsort, escape (e, forceescape), first, float, format, indent, int, items, join, last, length,
// list, lower, map, max, min, reject, rejectattr, replace, reverse, round, safe, select,
// selectattr, sort, string, sum, title, tojson, trim, unique, upper, wordcount.
// tojson is Hugging Face's (json.dumps with ensure_ascii=False and keys in order), not Jinja2's
// HTML-escaping one: it is what chat templates are written against.
#pragma once

#include <string_view>

#include "chat/template_value.h"
#include "core/status.h"

namespace leoam::chat {

bool has_filter(std::string_view name);
// An unknown name is an error naming it.
Result<Value> apply_filter(std::string_view name, const Value& input, const CallArgs& args);

}  // namespace leoam::chat
