// The Python methods templates call on str, dict and list values (s.strip(), d.items(), ...),
// bound to their receiver, and Python's two string formatting operators. Methods that would
// change a dict or list fail, as in Hugging Face's immutable sandbox.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "chat/template_value.h"
#include "core/status.h"

namespace leoam::chat {

// The method `name` of obj bound to it, or nullopt when its type has none by that name.
std::optional<Value> find_method(const Value& obj, std::string_view name);

// `fmt % args` (args a tuple, or one value): %s %r %d %i %f %e %g %x %% with flags, width, precision.
Result<std::string> percent_format(std::string_view fmt, const Value& args);
// fmt.format(*args, **kwargs): {} {0} {name}, with !s or !r; format specs are not supported.
Result<std::string> brace_format(std::string_view fmt, const CallArgs& args);

}  // namespace leoam::chat
