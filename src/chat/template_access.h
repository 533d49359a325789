// Member access with Jinja2's rules. `obj.name` tries the Python attribute (a method) first, then
// the item; `obj[key]` tries the item first, then the attribute. A miss gives undefined; only
// access on an undefined value is an error, as with Jinja2's default Undefined.
#pragma once

#include <string_view>
#include <vector>

#include "chat/template_value.h"
#include "core/status.h"

namespace leoam::chat {

Result<Value> get_attribute(const Value& obj, std::string_view name);
Result<Value> get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on a str, list or tuple; null bounds are absent. Non-integer bounds give undefined.
Result<Value> get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);

// What `for x in v` visits: a list's items, a dict's keys, a str's characters; undefined is empty.
Result<std::vector<Value>> iterate(const Value& v);
// len(v); undefined has length 0.
Result<int64_t> length_of(const Value& v);

}  // namespace leoam::chat
