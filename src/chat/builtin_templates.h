// Chat templates of our own, in the same Jinja as real ones, for models whose GGUF carries none:
// "chatml", "llama2", "llama3", "gemma". Message content may be a string or a list of parts
// ({"type": "text", "text": ...}); only the text parts are kept.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace leoam::chat {

// The template's source; an unknown name is kNotFound listing the known ones.
Result<std::string> builtin_template(std::string_view name);

}  // namespace leoam::chat
