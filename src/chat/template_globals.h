// The functions a template calls by name: Jinja2's range, namespace and dict, and the two that
// Hugging Face adds for chat templates, raise_exception(message) and strftime_now(format).
#pragma once

#include <ctime>
#include <optional>
#include <string_view>

#include "chat/template_value.h"

namespace leoam::chat {

// `now` is the local time strftime_now formats. nullopt for other names.
std::optional<Value> find_global_function(std::string_view name, const std::tm& now);

}  // namespace leoam::chat
